/* test_rules_cli.c - unity-rules as a user runs it: import, list, show, stats, export (both
 * formats, re-import of the export), check, merge; and bad input (missing, garbage or foreign
 * files, truncated JSON, bad flags and ids), each one error line, a non-zero exit, and no partial
 * output file or database change. The program is found in $UNITY_BUILD/bin. */
#include "tests/cli.h"
#include "tests/test.h"

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

static const char *ff_file = "../shared/external/flexflow_graph_subst_3_v2.json";

/* The last run's result. */
static const cli_result *R;

/* Runs "unity-rules ARGS" (each %s in fmt is the temporary directory). */
static const cli_result *run(const char *fmt) {
    R = cli_run("unity-rules", cli_fmt(fmt));
    return R;
}

/* No "*.tmp-*" files left in the temporary directory. */
static bool no_temp_files(void) {
    DIR *d = opendir(cli_tmp);
    bool ok = true;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp-"))
            ok = false;
    if (d)
        closedir(d);
    return ok;
}

static void expect_error(const char *fmt, const char *want) {
    const cli_result *r = run(fmt);
    bool ok = cli_is_clean_error(r, want);
    EXPECT_TRUE(ok);
    if (!ok)
        printf("    unity-rules %s -> exit %d, stderr: %s", fmt, r->code, r->err);
}

static void expect_good(const char *fmt, const char *want) {
    const cli_result *r = run(fmt);
    bool ok = r->code == 0 && strstr(r->out, want) != NULL;
    EXPECT_TRUE(ok);
    if (!ok)
        printf("    unity-rules %s -> exit %d, stdout: %.300s, stderr: %s", fmt, r->code, r->out,
               r->err);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void test_flexflow_cycle(void) {
    if (access(ff_file, R_OK) != 0)
        TEST_SKIP("../shared/external/flexflow_graph_subst_3_v2.json not found");
    char fmt[512];
    snprintf(fmt, sizeof fmt, "import %%s/a.db %s --quiet", ff_file);
    expect_good(fmt, "parsed 640, imported ");
    EXPECT_TRUE(strstr(R->out, "rejected") && strstr(R->out, "input on one side only"));
    snprintf(fmt, sizeof fmt, "import %%s/a.db %s", ff_file);
    expect_good(fmt, "imported 0,");
    EXPECT_TRUE(strstr(R->out, "taso_rule_300: rejected: reduce of replicated copies") != NULL);
    expect_good("list %s/a.db --status candidate --op linear", "linear(");
    int n_linear = count_lines(R->out);
    EXPECT_TRUE(n_linear > 5);
    expect_good("list %s/a.db --status candidate --size 4", "\t4\t");
    expect_good("list %s/a.db --status candidate --limit 1", "candidate");
    EXPECT_EQ(count_lines(R->out), 1);
    char id[16] = {0};
    sscanf(R->out, "%15s", id);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "show %%s/a.db %s", id);
    expect_good(cmd, "status    candidate");
    EXPECT_TRUE(strstr(R->out, "variable  k (witness 2") != NULL);
    EXPECT_TRUE(strstr(R->out, "source:") && strstr(R->out, "target:"));
    snprintf(cmd, sizeof cmd, "show %%s/a.db %s --dot", id);
    expect_good(cmd, "digraph");
    expect_good("stats %s/a.db", "by status: candidate ");
    EXPECT_TRUE(strstr(R->out, "by operator") && strstr(R->out, "linear "));
    expect_good("check %s/a.db", "ok (");
    /* export -> import: the same candidates, nothing new. */
    expect_good("export %s/a.db --format flexflow -o %s/out.json", "");
    EXPECT_TRUE(strstr(R->err, "exported ") != NULL);
    expect_good("import %s/b.db %s/out.json --quiet", "rejected 0");
    expect_good("stats %s/b.db", "rejected 0");
    char want[64];
    run("stats %s/a.db");
    const char *c = strstr(R->out, "candidate ");
    long n_cand = c ? strtol(c + 10, NULL, 10) : -1;
    snprintf(want, sizeof want, "candidate %ld ", n_cand);
    expect_good("stats %s/b.db", want);
    expect_good("import %s/a.db %s/out.json --quiet", "imported 0,");
    expect_good("export %s/a.db --format json --status candidate", "\"rules\": [");
    /* merge: the union. */
    expect_good("merge %s/a.db %s/b.db -o %s/c.db", "c.db: ");
    expect_good("stats %s/c.db", want);
    EXPECT_TRUE(no_temp_files());
}

static void test_bad_input(void) {
    expect_error("", "no command given");
    expect_error("frobnicate x.db", "unknown command 'frobnicate'");
    expect_error("list", "list wants one database");
    expect_error("list %s/none.db", "cannot open");
    EXPECT_TRUE(!cli_exists("none.db"));
    cli_write_file("garbage.db",
                   "SQLite format 2\nthis is no database, just words and more words.");
    expect_error("list %s/garbage.db", "not a rule database");
    expect_error("check %s/garbage.db", "not a rule database");
    cli_write_file("trunc.json", "{\"_t\": \"RuleCollection\", \"rule\": [{\"name\": ");
    expect_error("import %s/t.db %s/trunc.json", "trunc.json");
    EXPECT_TRUE(!cli_exists("t.db")); /* a failed import creates nothing */
    cli_write_file("empty.json", "{\"_t\": \"RuleCollection\", \"rule\": []}");
    expect_good("import %s/t.db %s/empty.json", "parsed 0, imported 0");
    expect_error("import %s/t.db %s/trunc.json", "trunc.json");
    expect_good("stats %s/t.db", "0 rules");
    cli_write_file("norule.json", "{\"rules\": []}");
    expect_error("import %s/t.db %s/norule.json", "no \"rule\" array");
    expect_error("import %s/t.db %s/missing.json", "missing.json");
    expect_error("export %s/t.db", "--format");
    expect_error("export %s/t.db --format xml", "--format");
    expect_error("export %s/t.db --format json -o %s/no/such/dir/x.json", "cannot write");
    expect_error("list %s/t.db --status bogus", "--status bogus");
    expect_error("list %s/t.db --op conv9", "--op conv9");
    expect_error("list %s/t.db --size 5-2", "--size 5-2");
    expect_error("list %s/t.db --limit 0", "--limit");
    expect_error("show %s/t.db abc", "not a rule id");
    expect_error("show %s/t.db 42", "no rule 42");
    expect_error("--ops %s/trunc.json list %s/t.db", "trunc.json");
    expect_error("merge %s/t.db -o %s/m.db", "merge wants two or more");
    expect_error("merge %s/t.db %s/garbage.db -o %s/m.db", "not a rule database");
    EXPECT_TRUE(!cli_exists("m.db"));
    EXPECT_TRUE(no_temp_files());
    expect_error("list %s/t.db --bogus", "unknown option --bogus");
}

/* bench's temporary databases left in the temporary directory. */
static int bench_files(void) {
    DIR *d = opendir(cli_tmp);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, "unity-rules-bench-", 18) == 0) {
            printf("    left behind: %s\n", e->d_name);
            n++;
        }
    if (d)
        closedir(d);
    return n;
}

/* Issue 10 item 6: bench's --n is bounded and named, --ff is accepted, the temporary database is
 * removed after an error and on SIGTERM; a directory is not "a disk I/O error". */
static void test_bench_and_dirs(void) {
    cli_expect_error_code("unity-rules", "bench --n 99999999999999", 2,
                          "--n: '99999999999999' is not an integer in [1, 655340]");
    cli_expect_error_code("unity-rules", "bench --n 0", 2, "--n");
    cli_expect_error_code("unity-rules", "list --limit 99999999999999999999 x.db", 2, "--limit");
    cli_expect_error_code("unity-rules", cli_fmt("list %s"), 1, "is a directory");
    cli_expect_error_code("unity-rules", cli_fmt("bench --ff %s/missing.json"), 1, "--ff ");
    char pre[128];
    snprintf(pre, sizeof pre, "TMPDIR=%s", cli_tmp);
    cli_write_file("bench_trunc.json", "{\"_t\": \"RuleCollection\", \"rule\": [{\"name\": ");
    R = cli_run_with(pre, "unity-rules", cli_fmt("bench --n 20 --ff %s/bench_trunc.json"));
    EXPECT_TRUE(cli_is_clean_error(R, "bench_trunc.json") && R->code == 1);
    EXPECT_EQ(bench_files(), 0);
    cli_write_file("bench_empty.json", "{\"_t\": \"RuleCollection\", \"rule\": []}");
    R = cli_run_with(pre, "unity-rules", cli_fmt("bench --n 20 --ff %s/bench_empty.json"));
    EXPECT_TRUE(R->code == 0 && strstr(R->out, "insert: 20 generated-like rules"));
    EXPECT_EQ(bench_files(), 0);
    /* SIGTERM once the database exists: it goes too */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "TMPDIR=%s %s/unity-rules bench --n 600000 --ff %s/bench_empty.json >/dev/null & "
             "p=$!; i=0; while [ ! -e %s/unity-rules-bench-$p.db ] && [ $i -lt 400 ]; do "
             "sleep 0.05; i=$((i+1)); done; [ -e %s/unity-rules-bench-$p.db ] || exit 3; "
             "kill -TERM $p; { wait $p; } 2>/dev/null; exit 0",
             cli_tmp, cli_bin, cli_tmp, cli_tmp, cli_tmp);
    int st = system(cmd);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0); /* 3: the database never appeared */
    EXPECT_EQ(bench_files(), 0);
}

int main(void) {
    if (!cli_init("/tmp/unity-rules-XXXXXX"))
        return 1;
    static const test_case cases[] = {{"flexflow_cycle", test_flexflow_cycle},
                                      {"bad_input", test_bad_input},
                                      {"bench_and_dirs", test_bench_and_dirs}};
    int rc = TEST_RUN_ALL(cases);
    if (!cli_cleanup())
        rc = 1;
    return rc;
}
