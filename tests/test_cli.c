/* tests/test_cli.c - the programs as a user runs them: good runs, and bad input (missing or
 * malformed files, a bad spec, unknown commands and flags, an illegal layout), each of which must
 * give one clear error line naming the input and the reason, a non-zero exit, and no crash.
 * The programs are found in $UNITY_BUILD/bin (set by scripts/run_tests.sh). */
#include "tests/test.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static char bin[256];
static char tmp[64];

typedef struct {
    int code; /* exit status, or 128 + signal */
    char out[1 << 18];
    char err[4096];
    int err_lines;
} run_result;

static void slurp(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    size_t len = f ? fread(buf, 1, n - 1, f) : 0;
    buf[len] = '\0';
    if (f)
        fclose(f);
}

/* Runs "unity-pcg ARGS" through the shell with stdout and stderr captured. */
static run_result run(const char *args) {
    run_result r;
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "%s/unity-pcg %s >%s/out 2>%s/err", bin, args, tmp, tmp);
    int st = system(cmd);
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char p[300];
    snprintf(p, sizeof p, "%s/out", tmp);
    slurp(p, r.out, sizeof r.out);
    snprintf(p, sizeof p, "%s/err", tmp);
    slurp(p, r.err, sizeof r.err);
    r.err_lines = 0;
    for (const char *c = r.err; *c; c++)
        r.err_lines += *c == '\n';
    return r;
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

/* A bad input: non-zero exit below 128 (no crash), exactly one stderr line, containing want. */
static void expect_clean_error(const char *args, const char *want) {
    run_result r = run(args);
    bool ok = r.code != 0 && r.code < 128 && r.err_lines == 1 && strstr(r.err, want) != NULL;
    EXPECT_TRUE(ok);
    if (!ok)
        printf("    unity-pcg %s -> exit %d, stderr: %s", args, r.code, r.err);
}

/* A good run: "unity-pcg ARGS" (every %s in fmt is the temporary directory) exits 0 and its
 * output contains want. */
static void expect_good(const char *fmt, const char *want) {
    char args[1024];
    snprintf(args, sizeof args, fmt, tmp, tmp);
    run_result r = run(args);
    bool ok = r.code == 0 && strstr(r.out, want) != NULL;
    EXPECT_TRUE(ok);
    if (!ok)
        printf("    unity-pcg %s -> exit %d, stderr: %s", args, r.code, r.err);
}

static void test_good_runs(void) {
    run_result r = run("ops");
    EXPECT_EQ(r.code, 0);
    EXPECT_TRUE(strstr(r.out, "multihead_attention") != NULL);
    char args[1024];
    const char *strategies[] = {"serial", "data", "tensor"};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "sample mlp --strategy %s --degree 2 >%s/%s.json",
                 strategies[i], tmp, strategies[i]);
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "%s/unity-pcg %s", bin, args);
        EXPECT_EQ(system(cmd), 0);
    }
    expect_good("compare %s/serial.json %s/tensor.json", "field  equal");
    expect_good("show %s/data.json", "float[8/2,16]");
    expect_good("dot %s/tensor.json", "digraph");
    expect_good("eval %s/tensor.json --domain f64", "f64");
    snprintf(args, sizeof args, "eval %s/tensor.json --dump", tmp);
    r = run(args);
    EXPECT_EQ(r.code, 0);
    EXPECT_TRUE(strstr(r.out, "{\"domain\": \"f64\", \"inputs\": {") == r.out);
    EXPECT_TRUE(strstr(r.out, "\"w2\": {\"shape\": [32, 4], \"values\": [") != NULL);
    EXPECT_TRUE(strstr(r.out, "{\"name\": \"y\", \"output\": 0, \"value\": {\"shape\": [8, 4]") !=
                NULL);
}

static void test_bad_input(void) {
    char args[1024];
    expect_clean_error("frobnicate", "unknown command 'frobnicate'");
    expect_clean_error("ops --bogus 1", "bad option");
    expect_clean_error("ops --spec", "needs a value");
    expect_clean_error("show", "takes 1 argument");
    snprintf(args, sizeof args, "show %s/missing.json", tmp);
    expect_clean_error(args, "missing.json: cannot open");
    write_file("trunc.json", "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\"");
    snprintf(args, sizeof args, "show %s/trunc.json", tmp);
    expect_clean_error(args, "trunc.json: offset");
    write_file("empty.json", "");
    snprintf(args, sizeof args, "show %s/empty.json", tmp);
    expect_clean_error(args, "empty.json");
    write_file("unknown_op.json",
               "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
               " {\"name\": \"y\", \"op\": \"relux\", \"in\": [\"x\"]}]}");
    snprintf(args, sizeof args, "show %s/unknown_op.json", tmp);
    expect_clean_error(args, "relux");
    write_file("bad_layout.json",
               "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [6, 4]}},"
               " {\"name\": \"p\", \"op\": \"partition\", \"in\": [\"x\"], \"params\": {\"dim\": "
               "0, \"degree\": 4}}]}");
    snprintf(args, sizeof args, "show %s/bad_layout.json", tmp);
    expect_clean_error(args, "not divisible");
    write_file("bad_spec.json",
               "{\"version\": 1, \"ops\": [{\"name\": \"relu\", \"outputs\": 3}]}");
    snprintf(args, sizeof args, "--spec %s/bad_spec.json ops", tmp);
    expect_clean_error(args, "bad_spec.json: $.ops[0]");
    snprintf(args, sizeof args, "compare %s/serial.json %s/unknown_op.json", tmp, tmp);
    expect_clean_error(args, "relux");
    write_file("huge.json", "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": "
                            "{\"shape\": [65536, 65536]}},"
                            " {\"name\": \"y\", \"op\": \"relu\", \"in\": [\"x\"]}]}");
    snprintf(args, sizeof args, "eval %s/huge.json", tmp);
    expect_clean_error(args, "limit");
    expect_clean_error("sample mlp --strategy zigzag", "only 'mlp'");
    expect_clean_error("sample mlp --degree 0", "bad option");
    expect_clean_error("sample mlp --strategy data --degree 3", "not divisible");
}

int main(void) {
    const char *b = getenv("UNITY_BUILD");
    snprintf(bin, sizeof bin, "%s/bin", b && *b ? b : "build/default");
    snprintf(tmp, sizeof tmp, "/tmp/unity-cli-XXXXXX");
    if (!mkdtemp(tmp)) {
        printf("cannot make a temporary directory\n0 passed, 1 failed\n");
        return 1;
    }
    static const test_case cases[] = {{"good_runs", test_good_runs}, {"bad_input", test_bad_input}};
    int rc = TEST_RUN_ALL(cases);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}
