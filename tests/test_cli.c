/* tests/test_cli.c - the programs as a user runs them: good runs, and bad input (missing or
 * malformed files, a bad spec, unknown commands and flags, an illegal layout), each of which must
 * give one clear error line naming the input and the reason, a non-zero exit, and no crash.
 * The programs are found in $UNITY_BUILD/bin (set by scripts/run_tests.sh). */
#include "tests/cli.h"
#include "tests/test.h"

#include <stdlib.h>

/* Runs "unity-pcg ARGS" through the shell with stdout and stderr captured. */
static const cli_result *run(const char *args) { return cli_run("unity-pcg", args); }

/* A bad input: non-zero exit below 128 (no crash), exactly one stderr line, containing want. */
static void expect_clean_error(const char *args, const char *want) {
    cli_expect_clean_error("unity-pcg", args, want);
}

/* A good run: "unity-pcg ARGS" (every %s in fmt is the temporary directory) exits 0 and its
 * output contains want. */
static void expect_good(const char *fmt, const char *want) {
    const char *args = cli_fmt(fmt);
    const cli_result *r = run(args);
    bool ok = r->code == 0 && strstr(r->out, want) != NULL;
    EXPECT_TRUE(ok);
    if (!ok)
        printf("    unity-pcg %s -> exit %d, stderr: %s", args, r->code, r->err);
}

static void test_good_runs(void) {
    const cli_result *r = run("ops");
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "multihead_attention") != NULL);
    char args[1024];
    const char *strategies[] = {"serial", "data", "tensor"};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "sample mlp --strategy %s --degree 2 >%s/%s.json",
                 strategies[i], cli_tmp, strategies[i]);
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "%s/unity-pcg %s", cli_bin, args);
        EXPECT_EQ(system(cmd), 0);
    }
    expect_good("compare %s/serial.json %s/tensor.json", "field  equal");
    expect_good("show %s/data.json", "float[8/2,16]");
    expect_good("dot %s/tensor.json", "digraph");
    expect_good("eval %s/tensor.json --domain f64", "f64");
    r = run(cli_fmt("eval %s/tensor.json --dump"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "{\"domain\": \"f64\", \"inputs\": {") == r->out);
    EXPECT_TRUE(strstr(r->out, "\"w2\": {\"shape\": [32, 4], \"values\": [") != NULL);
    EXPECT_TRUE(strstr(r->out, "{\"name\": \"y\", \"output\": 0, \"value\": {\"shape\": [8, 4]") !=
                NULL);
}

static void test_bad_input(void) {
    expect_clean_error("frobnicate", "unknown command 'frobnicate'");
    expect_clean_error("ops --bogus 1", "unknown flag --bogus");
    expect_clean_error("ops --spec", "needs a value");
    expect_clean_error("show", "takes 1 argument");
    expect_clean_error(cli_fmt("show %s/missing.json"), "missing.json: cannot open");
    cli_write_file("trunc.json", "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\"");
    expect_clean_error(cli_fmt("show %s/trunc.json"), "trunc.json: offset");
    cli_write_file("empty.json", "");
    expect_clean_error(cli_fmt("show %s/empty.json"), "empty.json");
    cli_write_file(
        "unknown_op.json",
        "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"y\", \"op\": \"relux\", \"in\": [\"x\"]}]}");
    expect_clean_error(cli_fmt("show %s/unknown_op.json"), "relux");
    cli_write_file(
        "bad_layout.json",
        "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [6, 4]}},"
        " {\"name\": \"p\", \"op\": \"partition\", \"in\": [\"x\"], \"params\": {\"dim\": "
        "0, \"degree\": 4}}]}");
    expect_clean_error(cli_fmt("show %s/bad_layout.json"), "not divisible");
    cli_write_file("bad_spec.json",
                   "{\"version\": 1, \"ops\": [{\"name\": \"relu\", \"outputs\": 3}]}");
    expect_clean_error(cli_fmt("--spec %s/bad_spec.json ops"), "bad_spec.json: $.ops[0]");
    expect_clean_error(cli_fmt("compare %s/serial.json %s/unknown_op.json"), "relux");
    cli_write_file("huge.json", "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": "
                                "{\"shape\": [65536, 65536]}},"
                                " {\"name\": \"y\", \"op\": \"relu\", \"in\": [\"x\"]}]}");
    expect_clean_error(cli_fmt("eval %s/huge.json"), "limit");
    expect_clean_error("sample mlp --strategy zigzag", "only 'mlp'");
    expect_clean_error("sample mlp --degree 0", "--degree: '0' is not an integer in [1, 65536]");
    expect_clean_error("sample mlp --strategy data --degree 3", "not divisible");
}

/* Issue 10 item 6: numbers that used to wrap, flags taken for values, names that were cut. */
static void test_bad_input_gaps(void) {
    cli_expect_error_code("unity-pcg", "sample mlp --degree 4294967298", 2,
                          "--degree: '4294967298' is not an integer in [1, 65536]");
    cli_expect_error_code("unity-pcg", "sample mlp --batch 99999999999999999999", 2, "--batch");
    cli_expect_error_code("unity-pcg", "sample mlp --seed 1234567890123456789012345", 2,
                          "--seed: '1234567890123456789012345'");
    cli_expect_error_code("unity-pcg", "sample mlp --degree ' 4'", 2, "--degree");
    cli_expect_error_code("unity-pcg", cli_fmt("show %s/serial.json --turbo"), 2,
                          "unknown flag --turbo");
    /* node names: a \u0000 escape would cut the name short; bytes that are not UTF-8 */
    cli_write_file("nul.json", "{\"nodes\": [{\"name\": \"x\\u0000y\", \"op\": \"input\", "
                               "\"params\": {\"shape\": [2]}}]}");
    cli_expect_error_code("unity-pcg", cli_fmt("show %s/nul.json"), 1, "NUL character");
    cli_write_file("utf8.json", "{\"nodes\": [{\"name\": \"x\xff\", \"op\": \"input\", "
                                "\"params\": {\"shape\": [2]}}]}");
    cli_expect_error_code("unity-pcg", cli_fmt("show %s/utf8.json"), 1, "invalid UTF-8");
    cli_write_file("overlong.json", "{\"nodes\": [{\"name\": \"x\xc0\xaf\", \"op\": \"input\", "
                                    "\"params\": {\"shape\": [2]}}]}");
    cli_expect_error_code("unity-pcg", cli_fmt("show %s/overlong.json"), 1, "invalid UTF-8");
    /* an escaped backslash before "u0000" and real UTF-8 are fine */
    cli_write_file("fine.json", "{\"nodes\": [{\"name\": \"x\\\\u0000\xc3\xa9\", \"op\": "
                                "\"input\", \"params\": {\"shape\": [2]}}]}");
    expect_good("show %s/fine.json", "x\\u0000\xc3\xa9");
}

/* Every program: a usage error exits 2, bad input exits 1 (README.md, pcg/cli.h). */
static void test_exit_codes(void) {
    static const struct {
        const char *prog, *usage, *input;
    } p[] = {
        {"unity-pcg", "show", "show %s/missing.json"},
        {"unity-gen", "--frob", "--spec %s/missing.json --dry-run"},
        {"unity-verify", "--frob", "%s"},
        {"unity-rules", "list", "list %s"},
        {"unity-train", "--model mlp --frob", "--model %s"},
        {"unity-profile", "frob", NULL},
    };
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) {
        const cli_result *r = cli_run(p[i].prog, p[i].usage);
        test__check(cli_is_clean_error(r, "") && r->code == 2, TEST__AT,
                    "%s %s: exit %d (want 2), stderr: %s", p[i].prog, p[i].usage, r->code, r->err);
        r = cli_run(p[i].prog, "--help"); /* man-style: ends with EXIT STATUS, ENVIRONMENT, FILES */
        test__check(r->code == 0 && strstr(r->out, "usage") && strstr(r->out, "EXIT STATUS") &&
                        strstr(r->out, "UNITY_SPECS") && !*r->err,
                    TEST__AT, "%s --help: exit %d, stdout: %.80s", p[i].prog, r->code, r->out);
        if (!p[i].input)
            continue;
        r = cli_run(p[i].prog, cli_fmt(p[i].input));
        test__check(cli_is_clean_error(r, "") && r->code == 1, TEST__AT,
                    "%s %s: exit %d (want 1), stderr: %s", p[i].prog, p[i].input, r->code, r->err);
    }
}

int main(void) {
    if (!cli_init("/tmp/unity-cli-XXXXXX"))
        return 1;
    static const test_case cases[] = {{"good_runs", test_good_runs},
                                      {"bad_input", test_bad_input},
                                      {"bad_input_gaps", test_bad_input_gaps},
                                      {"exit_codes", test_exit_codes}};
    int rc = TEST_RUN_ALL(cases);
    if (!cli_cleanup())
        rc = 1;
    return rc;
}
