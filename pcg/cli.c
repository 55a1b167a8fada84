/* cli.c - range-checked numbers for the programs' flags (cli.h). */
#include "pcg/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static bool digits_from(const char *v, size_t i) {
    if (!v[i])
        return false;
    for (; v[i]; i++)
        if (v[i] < '0' || v[i] > '9')
            return false;
    return true;
}

bool un_cli_int(const char *prog, const char *flag, const char *v, int64_t lo, int64_t hi,
                int64_t *out) {
    bool ok = v && digits_from(v, v[0] == '-');
    long long x = 0;
    if (ok) {
        errno = 0;
        x = strtoll(v, NULL, 10);
        ok = errno == 0 && x >= lo && x <= hi;
    }
    if (!ok) {
        fprintf(stderr, "%s: %s: '%s' is not an integer in [%lld, %lld]\n", prog, flag, v ? v : "",
                (long long)lo, (long long)hi);
        return false;
    }
    *out = x;
    return true;
}

bool un_cli_u64(const char *prog, const char *flag, const char *v, uint64_t *out) {
    bool ok = v && digits_from(v, 0);
    unsigned long long x = 0;
    if (ok) {
        errno = 0;
        x = strtoull(v, NULL, 10);
        ok = errno == 0;
    }
    if (!ok) {
        fprintf(stderr, "%s: %s: '%s' is not an integer in [0, %llu]\n", prog, flag, v ? v : "",
                (unsigned long long)UINT64_MAX);
        return false;
    }
    *out = x;
    return true;
}

const char *un_cli_help_footer(void) {
    return "\nEXIT STATUS\n"
           "  0  success\n"
           "  1  bad input: a file, database, model or plan that is missing, unreadable or\n"
           "     malformed (one error line names it and the reason)\n"
           "  2  usage error: an unknown flag or command, a missing argument, a flag value of the\n"
           "     wrong form or out of range\n"
           "\nENVIRONMENT\n"
           "  UNITY_SPECS  the operator specs (ops.json, or a directory holding it) when --spec "
           "is\n"
           "               not given\n"
           "\nFILES\n"
           "  The operator specs are the first of: --spec FILE|DIR (alias --ops), $UNITY_SPECS,\n"
           "  ./specs/ops.json, <program directory>/../share/unity/specs/ops.json (make install).\n"
           "  The default menu (menu.json), menus/ and machines/ lie beside ops.json.\n";
}
