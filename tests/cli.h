/* tests/cli.h - running the programs as a user does, for the CLI tests: each run goes through the
 * shell with stdout and stderr captured into files in a temporary directory and read back. The
 * programs are found in $UNITY_BUILD/bin (set by scripts/run_tests.sh; build/default if unset).
 *   static void test_ops(void) {
 *       const cli_result *r = cli_run("unity-pcg", cli_fmt("show %s/g.json"));
 *       EXPECT_EQ(r->code, 0);
 *       cli_expect_clean_error("unity-pcg", "frobnicate", "unknown command");
 *   }
 *   int main(void) {
 *       if (!cli_init("/tmp/unity-cli-XXXXXX"))
 *           return 1;
 *       static const test_case c[] = {{"ops", test_ops}};
 *       int rc = TEST_RUN_ALL(c);
 *       return cli_cleanup() ? rc : 1;
 *   }
 */
#ifndef UN_TEST_CLI_H
#define UN_TEST_CLI_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/test.h"

/* The programs' folder ($UNITY_BUILD/bin) and the temporary directory, set by cli_init(). */
TEST__FN char cli_bin[256];
TEST__FN char cli_tmp[64];

typedef struct {
    int code;          /* exit status, or 128 + signal */
    char out[1 << 20]; /* the largest user, test_rules_cli's exports; the rest is cut */
    char err[8192];
    int err_lines; /* newlines in err */
} cli_result;

/* Sets cli_bin from $UNITY_BUILD and makes the temporary directory from tmpl (ending in XXXXXX).
 * On failure prints why, as a failed run, and returns false. */
TEST__FN bool cli_init(const char *tmpl) {
    const char *b = getenv("UNITY_BUILD");
    snprintf(cli_bin, sizeof cli_bin, "%s/bin", b && *b ? b : "build/default");
    return test_tmpdir_make(cli_tmp, sizeof cli_tmp, tmpl);
}

/* Removes the temporary directory; false if that failed. */
TEST__FN bool cli_cleanup(void) { return test_tmpdir_remove(cli_tmp); }

/* "TMP/name" in one of 4 rotating buffers: valid until the 4th cli_path() call after (the other
 * helpers do not use them). */
TEST__FN const char *cli_path(const char *name) {
    static char p[4][300];
    static int k;
    char *s = p[k++ % 4];
    snprintf(s, sizeof p[0], "%s/%s", cli_tmp, name);
    return s;
}

/* fmt with each of its (up to 4) %s replaced by the temporary directory; valid until the next
 * call. */
TEST__FN const char *cli_fmt(const char *fmt) {
    static char s[2048];
    snprintf(s, sizeof s, fmt, cli_tmp, cli_tmp, cli_tmp, cli_tmp);
    return s;
}

TEST__FN void cli__slurp(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    size_t len = f ? fread(buf, 1, n - 1, f) : 0;
    buf[len] = '\0';
    if (f)
        fclose(f);
}

/* Runs the shell command line cmd with stdout and stderr captured into files in the temporary
 * directory. The result is static: valid until the next run. */
TEST__FN const cli_result *cli_run_shell(const char *cmd) {
    static cli_result r;
    char full[4300];
    snprintf(full, sizeof full, "%s >%s/out 2>%s/err", cmd, cli_tmp, cli_tmp);
    int st = system(full);
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char p[300];
    snprintf(p, sizeof p, "%s/out", cli_tmp);
    cli__slurp(p, r.out, sizeof r.out);
    snprintf(p, sizeof p, "%s/err", cli_tmp);
    cli__slurp(p, r.err, sizeof r.err);
    r.err_lines = 0;
    for (const char *c = r.err; *c; c++)
        r.err_lines += *c == '\n';
    return &r;
}

/* Runs "PREFIX BIN/prog ARGS" through the shell (prefix NULL or "" for none, else e.g. an mpirun
 * command line); see cli_run_shell(). */
TEST__FN const cli_result *cli_run_with(const char *prefix, const char *prog, const char *args) {
    char cmd[4096];
    bool pre = prefix && *prefix;
    snprintf(cmd, sizeof cmd, "%s%s%s/%s %s", pre ? prefix : "", pre ? " " : "", cli_bin, prog,
             args);
    return cli_run_shell(cmd);
}

/* Runs "BIN/prog ARGS"; see cli_run_with(). */
TEST__FN const cli_result *cli_run(const char *prog, const char *args) {
    return cli_run_with(NULL, prog, args);
}

/* Writes text to TMP/name (silently nothing if it cannot be opened). */
TEST__FN void cli_write_file(const char *name, const char *text) {
    char p[300];
    snprintf(p, sizeof p, "%s/%s", cli_tmp, name);
    FILE *f = fopen(p, "w");
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

TEST__FN bool cli_exists(const char *name) {
    char p[300];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", cli_tmp, name);
    return stat(p, &sb) == 0;
}

/* A bad input's run: non-zero exit below 128 (no crash), exactly one stderr line, containing
 * want. */
TEST__FN bool cli_is_clean_error(const cli_result *r, const char *want) {
    return r->code != 0 && r->code < 128 && r->err_lines == 1 && strstr(r->err, want) != NULL;
}

/* Expects "prog ARGS" to be a clean error (cli_is_clean_error) and prints the run if not. */
TEST__FN void cli_expect_clean_error(const char *prog, const char *args, const char *want) {
    const cli_result *r = cli_run(prog, args);
    bool ok = cli_is_clean_error(r, want);
    EXPECT_TRUE(ok);
    if (!ok)
        printf("    %s %s -> exit %d, stderr: %s (wanted '%s')\n", prog, args, r->code, r->err,
               want);
}

/* The same with the exit status too: 1 for bad input, 2 for a usage error (pcg/cli.h). */
TEST__FN void cli_expect_error_code(const char *prog, const char *args, int code,
                                    const char *want) {
    const cli_result *r = cli_run(prog, args);
    bool ok = cli_is_clean_error(r, want) && r->code == code;
    EXPECT_TRUE(ok);
    if (!ok)
        printf("    %s %s -> exit %d, stderr: %s (wanted exit %d and '%s')\n", prog, args, r->code,
               r->err, code, want);
}

#endif /* UN_TEST_CLI_H */
