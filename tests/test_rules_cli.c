/* test_rules_cli.c - unity-rules as a user runs it: import, list, show, stats, export (both
 * formats, re-import of the export), check, merge; and bad input (missing, garbage or foreign
 * files, truncated JSON, bad flags and ids), each one error line, a non-zero exit, and no partial
 * output file or database change. The program is found in $UNITY_BUILD/bin. */
#include "tests/test.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static char bin[256];
static char tmp[64];
static const char *ff_file = "../shared/external/flexflow_graph_subst_3_v2.json";

typedef struct {
    int code; /* exit status, or 128 + signal */
    char out[1 << 20];
    char err[8192];
    int err_lines;
} run_result;

static run_result R;

static void slurp(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    size_t len = f ? fread(buf, 1, n - 1, f) : 0;
    buf[len] = '\0';
    if (f)
        fclose(f);
}

/* Runs "unity-rules ARGS" (each %s in fmt is the temporary directory). */
static run_result *run(const char *fmt) {
    char args[2048], cmd[2600], p[300];
    snprintf(args, sizeof args, fmt, tmp, tmp, tmp, tmp);
    snprintf(cmd, sizeof cmd, "%s/unity-rules %s >%s/out 2>%s/err", bin, args, tmp, tmp);
    int st = system(cmd);
    R.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    snprintf(p, sizeof p, "%s/out", tmp);
    slurp(p, R.out, sizeof R.out);
    snprintf(p, sizeof p, "%s/err", tmp);
    slurp(p, R.err, sizeof R.err);
    R.err_lines = 0;
    for (const char *c = R.err; *c; c++)
        R.err_lines += *c == '\n';
    return &R;
}

static void write_file(const char *name, const char *text) {
    char p[300];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    FILE *f = fopen(p, "w");
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

static bool exists(const char *name) {
    char p[300];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    return access(p, F_OK) == 0;
}

/* No "*.tmp-*" files left in the temporary directory. */
static bool no_temp_files(void) {
    DIR *d = opendir(tmp);
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
    run_result *r = run(fmt);
    bool ok = r->code != 0 && r->code < 128 && r->err_lines == 1 && strstr(r->err, want) != NULL;
    EXPECT_TRUE(ok);
    if (!ok)
        printf("    unity-rules %s -> exit %d, stderr: %s", fmt, r->code, r->err);
}

static void expect_good(const char *fmt, const char *want) {
    run_result *r = run(fmt);
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
    if (access(ff_file, R_OK) != 0) {
        printf("    %s: not found, skipped\n", ff_file);
        return;
    }
    char fmt[512];
    snprintf(fmt, sizeof fmt, "import %%s/a.db %s --quiet", ff_file);
    expect_good(fmt, "parsed 640, imported ");
    EXPECT_TRUE(strstr(R.out, "rejected") && strstr(R.out, "input on one side only"));
    snprintf(fmt, sizeof fmt, "import %%s/a.db %s", ff_file);
    expect_good(fmt, "imported 0,");
    EXPECT_TRUE(strstr(R.out, "taso_rule_300: rejected: reduce of replicated copies") != NULL);
    expect_good("list %s/a.db --status candidate --op linear", "linear(");
    int n_linear = count_lines(R.out);
    EXPECT_TRUE(n_linear > 5);
    expect_good("list %s/a.db --status candidate --size 4", "\t4\t");
    expect_good("list %s/a.db --status candidate --limit 1", "candidate");
    EXPECT_EQ(count_lines(R.out), 1);
    char id[16] = {0};
    sscanf(R.out, "%15s", id);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "show %%s/a.db %s", id);
    expect_good(cmd, "status    candidate");
    EXPECT_TRUE(strstr(R.out, "variable  k (witness 2") != NULL);
    EXPECT_TRUE(strstr(R.out, "source:") && strstr(R.out, "target:"));
    snprintf(cmd, sizeof cmd, "show %%s/a.db %s --dot", id);
    expect_good(cmd, "digraph");
    expect_good("stats %s/a.db", "by status: candidate ");
    EXPECT_TRUE(strstr(R.out, "by operator") && strstr(R.out, "linear "));
    expect_good("check %s/a.db", "ok (");
    /* export -> import: the same candidates, nothing new. */
    expect_good("export %s/a.db --format flexflow -o %s/out.json", "");
    EXPECT_TRUE(strstr(R.err, "exported ") != NULL);
    expect_good("import %s/b.db %s/out.json --quiet", "rejected 0");
    expect_good("stats %s/b.db", "rejected 0");
    char want[64];
    run("stats %s/a.db");
    const char *c = strstr(R.out, "candidate ");
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
    EXPECT_TRUE(!exists("none.db"));
    write_file("garbage.db", "SQLite format 2\nthis is no database, just words and more words.");
    expect_error("list %s/garbage.db", "not a rule database");
    expect_error("check %s/garbage.db", "not a rule database");
    write_file("trunc.json", "{\"_t\": \"RuleCollection\", \"rule\": [{\"name\": ");
    expect_error("import %s/t.db %s/trunc.json", "trunc.json");
    EXPECT_TRUE(!exists("t.db")); /* a failed import creates nothing */
    write_file("empty.json", "{\"_t\": \"RuleCollection\", \"rule\": []}");
    expect_good("import %s/t.db %s/empty.json", "parsed 0, imported 0");
    expect_error("import %s/t.db %s/trunc.json", "trunc.json");
    expect_good("stats %s/t.db", "0 rules");
    write_file("norule.json", "{\"rules\": []}");
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
    EXPECT_TRUE(!exists("m.db"));
    EXPECT_TRUE(no_temp_files());
    expect_error("list %s/t.db --bogus", "unknown option --bogus");
}

int main(void) {
    const char *b = getenv("UNITY_BUILD");
    snprintf(bin, sizeof bin, "%s/bin", b && *b ? b : "build/default");
    snprintf(tmp, sizeof tmp, "/tmp/unity-rules-XXXXXX");
    if (!mkdtemp(tmp)) {
        printf("cannot make a temporary directory\n0 passed, 1 failed\n");
        return 1;
    }
    static const test_case cases[] = {{"flexflow_cycle", test_flexflow_cycle},
                                      {"bad_input", test_bad_input}};
    int rc = TEST_RUN_ALL(cases);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}
