/* tests/test_gen_cli.c - unity-gen as a user runs it: a good run into a new database, a rerun
 * that adds nothing, a listing without a database, and bad input (flags, menu, specs, database),
 * each of which must give one clear error line, a non-zero exit, no crash and no database file.
 * The program is found in $UNITY_BUILD/bin (set by scripts/run_tests.sh). */
#include "rulesdb/rulesdb.h"
#include "tests/cli.h"
#include "tests/test.h"

#include <sqlite3.h>
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

/* Digest of every rule row of a database in id order, every column but the creation time (the
 * run id and the origin included); *n gets the row count, -1 when the file cannot be read. */
static uint64_t rows_digest(const char *path, long long *n) {
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    uint64_t h = 0x726f7773ull;
    *n = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db,
                           "SELECT id, hash, body, body_sum, n_in, n_src, n_dst, size, ops, "
                           "status, detail, gen_spec, origin_kind, origin_file, origin_name, run "
                           "FROM rules ORDER BY id",
                           -1, &q, NULL) == SQLITE_OK) {
        *n = 0;
        while (sqlite3_step(q) == SQLITE_ROW) {
            (*n)++;
            for (int c = 0; c < sqlite3_column_count(q); c++) {
                const unsigned char *t = sqlite3_column_text(q, c);
                h = un_hash_bytes(t ? (const char *)t : "(null)", t ? strlen((const char *)t) : 6,
                                  h + (uint64_t)c);
            }
        }
    }
    sqlite3_finalize(q);
    sqlite3_close(db);
    return h;
}

/* The pruning decisions do not depend on the thread count: 1, 2 and 4 threads store the same
 * rows (ids, hashes, bodies, counts) byte for byte, on a menu where every stage drops pairs. */
static void test_threads_same_rows(void) {
    static const char *runs[] = {"--threads 1 -o %s/t1.db", "--threads 2 -o %s/t2.db",
                                 "--threads 4 -o %s/t4.db"};
    static const char *dbs[] = {"t1.db", "t2.db", "t4.db"};
    uint64_t h[3];
    long long n[3];
    for (int i = 0; i < 3; i++) {
        char a[256];
        snprintf(a, sizeof a, "--ops specs/ --menu specs/menus/parallel.json --max-ops 3 %s",
                 runs[i]);
        const cli_result *r = run(a);
        EXPECT_EQ(r->code, 0);
        h[i] = rows_digest(cli_path(dbs[i]), &n[i]);
        if (i == 0) {
            EXPECT_TRUE(n[0] > 100);
            /* each stage removed something, so the decisions were exercised */
            long long s[5];
            const char *c = strstr(r->out, "after supergraph");
            EXPECT_TRUE(c && sscanf(c, "after supergraph %lld", &s[0]) == 1);
            c = c ? strstr(c, "after composition") : NULL;
            EXPECT_TRUE(c && sscanf(c, "after composition %lld", &s[1]) == 1);
            c = c ? strstr(c, "after renaming") : NULL;
            EXPECT_TRUE(c && sscanf(c, "after renaming %lld", &s[2]) == 1);
            c = c ? strstr(c, "after subgraph") : NULL;
            EXPECT_TRUE(c && sscanf(c, "after subgraph %lld", &s[3]) == 1);
            EXPECT_TRUE(c && s[0] > s[1] && s[1] > s[2] && s[2] > s[3]);
        }
    }
    EXPECT_EQ(n[1], n[0]);
    EXPECT_EQ(n[2], n[0]);
    EXPECT_TRUE(h[1] == h[0]);
    EXPECT_TRUE(h[2] == h[0]);
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
                                      {"threads_same_rows", test_threads_same_rows},
                                      {"bad_input", test_bad_input}};
    int rc = TEST_RUN_ALL(cases);
    if (!cli_cleanup())
        rc = 1;
    return rc;
}
