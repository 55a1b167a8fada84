/* profile_main.c - `unity-profile machine [-o FILE]`: measures this CPU box as a machine
 * description (search/profile.h) and writes it as JSON (specs/FORMAT.md). scripts/machine.sh
 * runs it. */
#include <stdio.h>
#include <string.h>

#include "pcg/cli.h"
#include "search/profile.h"

int main(int argc, char **argv) {
    const char *out = NULL;
    static const char usage[] =
        "unity-profile - measure this machine as a machine description\n\n"
        "usage: unity-profile machine [-o FILE]   (measures this machine)\n";
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        fputs(un_cli_help_footer(), stdout);
        return UN_EXIT_OK;
    }
    if (argc < 2 || strcmp(argv[1], "machine") != 0 || (argc != 2 && argc != 4) ||
        (argc == 4 && strcmp(argv[2], "-o") != 0)) {
        fputs("unity-profile: usage: unity-profile machine [-o FILE] (see --help)\n", stderr);
        return UN_EXIT_USAGE;
    }
    if (argc == 4)
        out = argv[3];
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine m;
    un_buf b = {0};
    un_status st = un_profile_machine(ctx, &m);
    if (st == UN_OK) {
        un_machine_to_json(&m, &b);
        FILE *f = out ? fopen(out, "w") : stdout;
        if (!f) {
            st = un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write", out);
        } else {
            fputs(b.data, f);
            if (out && fclose(f) != 0)
                st = un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write", out);
        }
    }
    if (st != UN_OK)
        fprintf(stderr, "unity-profile: %s\n", un_ctx_errmsg(ctx));
    un_buf_deinit(&b);
    un_ctx_free(ctx);
    return st == UN_OK ? UN_EXIT_OK : UN_EXIT_INPUT;
}
