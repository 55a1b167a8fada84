/* tests/test_gen_cli.c - unity-gen as a user runs it: a good run into a new database, a rerun
 * that adds nothing, a listing without a database, and bad input (flags, menu, specs, database),
 * each of which must give one clear error line, a non-zero exit, no crash and no database file.
 * The program is found in $UNITY_BUILD/bin (set by scripts/run_tests.sh). */
#include "rulesdb/rulesdb.h"
#include "tests/cli.h"
#include "tests/test.h"

#include <stdlib.h>

/* Runs "unity-gen ARGS" (each %s in fmt is the temporary directory) with output captured. */
static const cli_result *run(const char *fmt) { return cli_run("unity-gen", cli_fmt(fmt)); }

static void expect_clean_error(const char *fmt, const char *want) {
    cli_expect_clean_error("unity-gen", cli_fmt(fmt), want);
}

static void test_good_runs(void) {
    const cli_result *r =
        run("--ops specs/ --menu specs/menus/ew_add.json -o %s/rules.db --threads 2");
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "after random test 3 rules") != NULL);
    EXPECT_TRUE(strstr(r->out, "database            3 new, 0 already present") != NULL);
    EXPECT_TRUE(cli_exists("rules.db"));
    EXPECT_EQ(r->err_lines, 0); /* quiet when stderr is not a terminal */
    /* a rerun (e.g. after a kill) adds nothing twice */
    r = run("--ops specs/ops.json --menu specs/menus/ew_add.json -o %s/rules.db");
    EXPECT_EQ(r->code, 0);
    if (r->code != 0)
        printf("    rerun: %s", r->err);
    EXPECT_TRUE(strstr(r->out, "0 new, 3 already present") != NULL);
    /* listing without a database */
    r = run("--ops specs --menu specs/menus/ew_add.json --dry-run --list -o %s/none.db");
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "ew_add(x1, x0) => ew_add(x0, x1)") != NULL);
    EXPECT_TRUE(!cli_exists("none.db"));
    /* several menus in one run, one summary each, into one database */
    r = run("--ops specs/ --menu specs/menus/ew_add.json --menu specs/menus/heads.json "
            "-o %s/two.db --threads 2");
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "menu                specs/menus/ew_add.json (N=2)") != NULL);
    EXPECT_TRUE(strstr(r->out, "menu                specs/menus/heads.json (N=3)") != NULL);
    EXPECT_TRUE(strstr(r->out, "database            3 new, 0 already present") != NULL);
    const char *second = strstr(r->out, "heads.json");
    long long n2 = -1, p2 = -1;
    const char *d2 = second ? strstr(second, "database ") : NULL;
    EXPECT_TRUE(d2 && sscanf(d2, "database %lld new, %lld already present", &n2, &p2) == 2);
    EXPECT_TRUE(n2 > 0);
    EXPECT_EQ(p2, 0);
    r = run("--help");
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "--shard I/N") != NULL);
}

/* "N new, M already present" from a run's summary; -1 when absent. */
static long long db_total(const char *out) {
    const char *p = strstr(out, "database ");
    long long a, b;
    if (!p || sscanf(p, "database %lld new, %lld already present", &a, &b) != 2)
        return -1;
    return a + b;
}

/* A run killed at some point, then rerun, ends with exactly the rules of an uninterrupted run:
 * the killed run left whole batches, the rerun adds the rest and nothing twice. */
static void test_killed_run_resumes(void) {
    const cli_result *r = run("--ops specs/ --menu specs/menus/parallel.json -o %s/full.db");
    EXPECT_EQ(r->code, 0);
    long long full = db_total(r->out);
    EXPECT_TRUE(full > 0);
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "%s/unity-gen --ops specs/ --menu specs/menus/parallel.json -o %s/killed.db "
             ">/dev/null 2>&1 & p=$!; sleep 0.4; kill -9 $p 2>/dev/null; wait $p 2>/dev/null; "
             "true",
             cli_bin, cli_tmp);
    EXPECT_EQ(system(cmd), 0);
    r = run("--ops specs/ --menu specs/menus/parallel.json -o %s/killed.db");
    EXPECT_EQ(r->code, 0);
    EXPECT_EQ(db_total(r->out), full);
    r = run("--ops specs/ --menu specs/menus/parallel.json -o %s/killed.db");
    EXPECT_TRUE(strstr(r->out, "database            0 new") != NULL);
}

static void test_bad_input(void) {
    const char *m = "--ops specs/ --menu specs/menus/ew_add.json -o %s/bad.db";
    char a[512];
    expect_clean_error("--spec specs/nowhere.json --menu specs/menus/ew_add.json --dry-run",
                       "specs/nowhere.json");
    snprintf(a, sizeof a, "%s --max-ops 0", m);
    expect_clean_error(a, "--max-ops '0': expected an integer from 1 to 5");
    snprintf(a, sizeof a, "%s --seed 1234567890123456789012345", m); /* not 2^64 - 1 */
    expect_clean_error(a, "--seed: '1234567890123456789012345' is not an integer");
    snprintf(a, sizeof a, "%s --seed -1", m);
    expect_clean_error(a, "--seed: '-1'");
    snprintf(a, sizeof a, "%s --threads many", m);
    expect_clean_error(a, "--threads 'many'");
    snprintf(a, sizeof a, "%s --shard 2/2", m);
    expect_clean_error(a, "--shard '2/2': expected I/N with 0 <= I < N");
    snprintf(a, sizeof a, "%s --shard 1", m);
    expect_clean_error(a, "--shard '1'");
    snprintf(a, sizeof a, "%s --seed -4", m);
    expect_clean_error(a, "--seed: '-4'");
    snprintf(a, sizeof a, "%s --frobnicate", m);
    expect_clean_error(a, "unknown argument '--frobnicate'");
    snprintf(a, sizeof a, "%s --threads", m);
    expect_clean_error(a, "option --threads needs a value");
    expect_clean_error("--ops no/such/dir -o %s/bad.db", "no/such/dir");
    expect_clean_error("--ops specs/ --menu %s/missing.json -o %s/bad.db", "missing.json");
    /* a bad second menu stops the run before the first one's work */
    expect_clean_error("--ops specs/ --menu specs/menus/ew_add.json --menu %s/missing2.json "
                       "-o %s/bad.db",
                       "missing2.json");
    cli_write_file("m1.json", "{\"version\": 1, \"inputs\": [{\"name\": \"x\", \"shape\": [2]}], "
                              "\"ops\": [{\"op\": \"reshape\"}]}");
    expect_clean_error(
        "--ops specs/ --menu %s/m1.json -o %s/bad.db",
        "m1.json: $.ops[0].params: parameter 'shape' of reshape has no values to try");
    cli_write_file("m2.json", "{\"version\": 1, \"inputs\": [{\"name\": \"x\", \"shape\": [2]}], "
                              "\"ops\": [{\"op\": \"relu\"}],}");
    expect_clean_error("--ops specs/ --menu %s/m2.json -o %s/bad.db", "m2.json");
    cli_write_file("notdb", "this is not a database, just some text that is long enough to matter");
    expect_clean_error("--ops specs/ --menu specs/menus/ew_add.json -o %s/notdb", "notdb");
    EXPECT_TRUE(!cli_exists("bad.db"));
}

/* unity-gen -o onto a database with a damaged row refuses with one line and adds nothing. */
static void test_damaged_db(void) {
    const cli_result *r = run("--ops specs/ --menu specs/menus/ew_add.json -o %s/dmg.db");
    EXPECT_EQ(r->code, 0);
    un_ctx *ctx = un_ctx_new(NULL);
    EXPECT_OK(ctx, un_rulesdb__test_exec(ctx, cli_path("dmg.db"),
                                         "UPDATE rules SET body = replace(body, 'x1', 'x9') "
                                         "WHERE id = 2"));
    un_ctx_free(ctx);
    expect_clean_error("--ops specs/ --menu specs/menus/ew_add.json -o %s/dmg.db",
                       "rule 2 does not match its checksum");
    r = run("--ops specs/ --menu specs/menus/ew_add.json --max-ops 1 -o %s/dmg2.db");
    EXPECT_EQ(r->code, 0);
    ctx = un_ctx_new(NULL);
    EXPECT_OK(ctx, un_rulesdb__test_exec(ctx, cli_path("dmg2.db"),
                                         "UPDATE rules SET ops = 'relu' WHERE id = 1"));
    un_ctx_free(ctx);
    expect_clean_error("--ops specs/ --menu specs/menus/ew_add.json -o %s/dmg2.db",
                       "rule 1 does not match its checksum");
}

int main(void) {
    if (!cli_init("/tmp/unity-gen-cli-XXXXXX"))
        return 1;
    static const test_case cases[] = {{"good_runs", test_good_runs},
                                      {"killed_run_resumes", test_killed_run_resumes},
                                      {"damaged_db", test_damaged_db},
                                      {"bad_input", test_bad_input}};
    int rc = TEST_RUN_ALL(cases);
    if (!cli_cleanup())
        rc = 1;
    return rc;
}
