/* test_verify_cli.c - `unity-verify` as a user runs it: a database of true and false rules gets
 * the right verdicts; a rerun has nothing left to do (resumable); --recheck, --rule, --shard and
 * --max-ops;
 * bad input (missing or malformed database, bad flags, a bad spec, a wrong axiom, a tampered row)
 * gives one error line and a non-zero exit. Programs come from $UNITY_BUILD/bin. */
#include "rulesdb/rulesdb.h"
#include "tests/cli.h"
#include "tests/test.h"
#include "verify/runner.h"

#include <signal.h>
#include <stdlib.h>

static un_spec *spec;

static const cli_result *run(const char *args) { return cli_run("unity-verify", args); }

static void expect_clean_error(const char *args, const char *want) {
    cli_expect_clean_error("unity-verify", args, want);
}

#define IN2(n, a, b)                                                                               \
    "{\"name\": \"" n "\", \"op\": \"input\", \"params\": {\"shape\": [" #a ", " #b "]}}"
#define RULE2(op, sa, sb, da, db)                                                                  \
    "{\"src\": {\"nodes\": [" IN2("a", 4, 6) ", " IN2(                                             \
        "b", 4, 6) ", {\"name\": \"s\", \"op\": \"" op "\", \"in\": [\"" sa "\", \"" sb            \
                   "\"]}]}, \"dst\": {\"nodes\": [" IN2("a", 4, 6) ", " IN2(                       \
                       "b", 4, 6) ", {\"name\": \"s\", \"op\": \"" op "\", \"in\": [\"" da         \
                                  "\", \"" db "\"]}]}}"

static const char *rules[] = {
    RULE2("ew_add", "a", "b", "b", "a"), /* true */
    RULE2("ew_mul", "a", "b", "b", "a"), /* true */
    RULE2("ew_sub", "a", "b", "b", "a"), /* false */
    /* relu(combine(x)) => combine(relu(x)), degree 2, no variable: generalized */
    "{\"src\": {\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [8, 4], "
    "\"shard\": [2, 1]}}, {\"name\": \"c\", \"op\": \"combine\", \"in\": [\"x\"], \"params\": "
    "{\"dim\": 0, \"degree\": 2}}, {\"name\": \"r\", \"op\": \"relu\", \"in\": [\"c\"]}]},"
    " \"dst\": {\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [8, 4], "
    "\"shard\": [2, 1]}}, {\"name\": \"r\", \"op\": \"relu\", \"in\": [\"x\"]}, {\"name\": \"c\", "
    "\"op\": \"combine\", \"in\": [\"r\"], \"params\": {\"dim\": 0, \"degree\": 2}}]}}",
};
#define N_RULES ((int)(sizeof rules / sizeof rules[0]))

static bool make_db(const char *path) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    un_status st = un_rulesdb_open(ctx, path, spec, UN_RULESDB_CREATE, &db);
    for (int i = 0; i < N_RULES && st == UN_OK; i++) {
        un_rule *r = NULL;
        st = un_rule_from_json(ctx, spec, "rule", rules[i], strlen(rules[i]), &r);
        if (st == UN_OK)
            st = un_rulesdb_rule_insert(ctx, db, r, UN_RULE_CANDIDATE, NULL,
                                        &(un_rulesdb_origin){.kind = "generated"}, NULL, NULL);
        un_rule_free(r);
    }
    EXPECT_OK(ctx, st);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
    return st == UN_OK;
}

static void counts(const char *path, int64_t *c) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    memset(c, 0, sizeof(int64_t) * UN_RULE_STATUS_COUNT);
    if (un_rulesdb_open(ctx, path, spec, UN_RULESDB_READONLY, &db) == UN_OK)
        EXPECT_OK(ctx, un_rulesdb_count(ctx, db, c));
    un_rulesdb_free(db);
    un_ctx_free(ctx);
}

static void test_verify_db(void) {
    const char *p = cli_path("good.db");
    if (!make_db(p))
        return;
    char args[400];
    snprintf(args, sizeof args, "%s --jobs 2", p);
    const cli_result *r = run(args);
    EXPECT_EQ(r->code, 0);
    printf("    %s", r->out);
    EXPECT_TRUE(strstr(r->out, "4 rules: 3 verified") != NULL);
    EXPECT_TRUE(strstr(r->out, "1 refuted, 0 unknown") != NULL);
    EXPECT_TRUE(strstr(r->out, "1 generalized") != NULL);
    EXPECT_EQ(r->err_lines, 0); /* not a terminal: no progress lines */
    int64_t c[UN_RULE_STATUS_COUNT];
    counts(p, c);
    EXPECT_EQ(c[UN_RULE_VERIFIED], 3);
    EXPECT_EQ(c[UN_RULE_REFUTED], 1);
    /* The refuted rule carries its counterexample; the generalized one a variable. */
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    if (un_rulesdb_open(ctx, p, spec, UN_RULESDB_READONLY, &db) == UN_OK) {
        un_rulesdb_filter f = un_rulesdb_filter_default();
        int32_t *ids = NULL;
        int64_t n = 0;
        EXPECT_OK(ctx, un_rulesdb_rule_ids(ctx, db, &f, &ids, &n));
        int with_var = 0;
        for (int64_t i = 0; i < n; i++) {
            un_rulesdb_row *row = NULL;
            if (un_rulesdb_rule_get(ctx, db, ids[i], &row) != UN_OK)
                continue;
            if (row->status == UN_RULE_REFUTED)
                EXPECT_TRUE(row->detail && strstr(row->detail, "differ"));
            if (row->status == UN_RULE_VERIFIED) {
                EXPECT_TRUE(row->trusted);
                with_var += row->rule && row->rule->n_vars > 0;
                EXPECT_TRUE(row->rule && row->rule->any_shape);
            }
            un_rulesdb_row_free(row);
        }
        EXPECT_EQ(with_var, 1);
        free(ids);
    }
    un_rulesdb_free(db);
    un_ctx_free(ctx);
    /* A rerun has nothing left to do; --recheck does it all again; --rule does one. */
    r = run(args);
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, ": 0 rules") != NULL);
    snprintf(args, sizeof args, "%s --recheck", p);
    r = run(args);
    EXPECT_TRUE(strstr(r->out, "4 rules: 3 verified") != NULL);
    EXPECT_TRUE(strstr(r->out, "z3 work: ") != NULL);
    /* the old wall-clock budget, for comparisons: the same verdicts here */
    snprintf(args, sizeof args, "%s --recheck --wall-clock", p);
    r = run(args);
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "4 rules: 3 verified") != NULL);
    snprintf(args, sizeof args, "%s --rule 3", p);
    r = run(args);
    EXPECT_TRUE(strstr(r->out, ": 1 rules") != NULL);
    snprintf(args, sizeof args, "%s --recheck --shard 1/2", p);
    r = run(args);
    EXPECT_TRUE(strstr(r->out, ": 2 rules") != NULL);
    /* --max-ops 1 (the staged pipeline's first stage): the three one-operator rules only; the
     * two-operator one stays a candidate until a run without the bound (or --max-ops 2) */
    const char *q = cli_path("max_ops.db");
    if (!make_db(q))
        return;
    snprintf(args, sizeof args, "%s --max-ops 1 --jobs 2", q);
    r = run(args);
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "3 rules: 2 verified") != NULL);
    counts(q, c);
    EXPECT_EQ(c[UN_RULE_CANDIDATE], 1);
    EXPECT_EQ(c[UN_RULE_VERIFIED], 2);
    snprintf(args, sizeof args, "%s --max-ops 1", q);
    EXPECT_TRUE(strstr(run(args)->out, ": 0 rules") != NULL);
    snprintf(args, sizeof args, "%s --max-ops 2", q);
    EXPECT_TRUE(strstr(run(args)->out, "1 rules: 1 verified") != NULL);
    counts(q, c);
    EXPECT_EQ(c[UN_RULE_CANDIDATE], 0);
}

/* The example: the verified rule carries its side condition, and `unity-rules show`
 * prints it (issue 10, item 2). */
static void test_side_condition_shown(void) {
    static const char *text =
        "{\"src\": {\"nodes\": [{\"name\": \"x0\", \"op\": \"input\", \"params\": {\"shape\": [2, "
        "4, 4]}}, {\"name\": \"s0\", \"op\": \"relu\", \"in\": [\"x0\"]}]}, \"dst\": {\"nodes\": "
        "[{\"name\": \"x0\", \"op\": \"input\", \"params\": {\"shape\": [2, 4, 4]}}, {\"name\": "
        "\"t0\", \"op\": \"partition\", \"in\": [\"x0\"], \"params\": {\"dim\": 1, \"degree\": "
        "2}}, "
        "{\"name\": \"t1\", \"op\": \"relu\", \"in\": [\"t0\"]}, {\"name\": \"t2\", \"op\": "
        "\"combine\", \"in\": [\"t1\"], \"params\": {\"dim\": 1, \"degree\": 2}}]}, \"vars\": "
        "[{\"name\": \"k\", \"value\": 2, \"at\": [[\"dst\", \"t0\", \"degree\"], [\"dst\", "
        "\"t2\", "
        "\"degree\"]]}]}";
    const char *p = cli_path("cond.db");
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    un_rule *r = NULL;
    int32_t id = 0;
    un_status st = un_rulesdb_open(ctx, p, spec, UN_RULESDB_CREATE, &db);
    if (st == UN_OK)
        st = un_rule_from_json(ctx, spec, "rule", text, strlen(text), &r);
    if (st == UN_OK)
        st = un_rulesdb_rule_insert(ctx, db, r, UN_RULE_CANDIDATE, NULL,
                                    &(un_rulesdb_origin){.kind = "generated"}, &id, NULL);
    EXPECT_OK(ctx, st);
    un_rule_free(r);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
    const cli_result *res = run(p);
    EXPECT_EQ(res->code, 0);
    EXPECT_TRUE(strstr(res->out, "1 rules: 1 verified (1 for any input size, 1 for every value") !=
                NULL);
    char args[400];
    snprintf(args, sizeof args, "show %s %d", p, (int)id);
    res = cli_run("unity-rules", args);
    EXPECT_EQ(res->code, 0);
    test__check(strstr(res->out, "if        k | dim 1 of x0") != NULL, __FILE__, __LINE__,
                "show prints no side condition:\n%s", res->out);
}

/* Rules decided (verified, refuted or unknown) in the database at path. */
static int64_t decided(const char *path) {
    int64_t c[UN_RULE_STATUS_COUNT];
    counts(path, c);
    return c[UN_RULE_VERIFIED] + c[UN_RULE_REFUTED] + c[UN_RULE_UNKNOWN];
}

/* "...: N rules: ..." of a run's summary line, or -1. */
static long long rules_done(const char *out) {
    const char *at = strstr(out, " rules: ");
    if (!at)
        return -1;
    while (at > out && at[-1] >= '0' && at[-1] <= '9')
        at--;
    return strtoll(at, NULL, 10);
}

/* The default menu at N=2 (187 candidates), generated by unity-gen into path. */
static int64_t make_gen_db(const char *path) {
    char args[400];
    snprintf(args, sizeof args, "--ops specs/ --max-ops 2 --threads 1 -o %s", path);
    const cli_result *r = cli_run("unity-gen", args);
    EXPECT_EQ(r->code, 0);
    int64_t c[UN_RULE_STATUS_COUNT];
    counts(path, c);
    return c[UN_RULE_CANDIDATE];
}

/* Two verifiers on one database split the work: each rule is decided once, by one of them, and
 * together they decide every rule (issue 10, item 9). */
static void test_concurrent(void) {
    const char *p = cli_path("conc.db");
    int64_t n = make_gen_db(p);
    EXPECT_TRUE(n > 100);
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "%s/unity-verify %s --jobs 1 > %s/c1.out 2>&1 & "
             "%s/unity-verify %s --jobs 1 > %s/c2.out 2>&1; wait",
             cli_bin, p, cli_tmp, cli_bin, p, cli_tmp);
    EXPECT_EQ(system(cmd), 0);
    char o1[4096], o2[4096];
    cli__slurp(cli_path("c1.out"), o1, sizeof o1);
    cli__slurp(cli_path("c2.out"), o2, sizeof o2);
    long long a = rules_done(o1), b = rules_done(o2);
    printf("    the two verifiers decided %lld and %lld of %lld rules\n", a, b, (long long)n);
    /* which one does how much depends on when each starts; without claims each did them all */
    EXPECT_TRUE(a >= 0 && b >= 0);
    EXPECT_EQ(a + b, n);      /* nothing done twice ... */
    EXPECT_EQ(decided(p), n); /* ... and nothing left out */
}

/* A verifier killed mid-way holds claims; a rerun waits for their lease to expire and then
 * decides every rule left. */
static void test_kill_rerun(void) {
    const char *p = cli_path("kill.db");
    int64_t n = make_gen_db(p);
    char prog[400];
    snprintf(prog, sizeof prog, "%s/unity-verify", cli_bin);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stdout);
        freopen("/dev/null", "w", stderr);
        execl(prog, prog, p, "--jobs", "1", "--lease", "2", (char *)NULL);
        _exit(127);
    }
    EXPECT_TRUE(pid > 0);
    if (pid <= 0)
        return;
    int64_t d = 0;
    for (int i = 0; i < 600 && (d = decided(p)) < 20; i++)
        usleep(50 * 1000);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    d = decided(p);
    printf("    killed after %lld of %lld rules\n", (long long)d, (long long)n);
    EXPECT_TRUE(d >= 20 && d < n);
    char args[400];
    snprintf(args, sizeof args, "%s --jobs 2 --lease 2", p);
    const cli_result *r = run(args);
    EXPECT_EQ(r->code, 0);
    EXPECT_EQ(rules_done(r->out), n - d);
    EXPECT_EQ(decided(p), n);
    r = run(args); /* nothing left, no claim left behind */
    EXPECT_TRUE(strstr(r->out, ": 0 rules") != NULL);
}

/* A claim reads the rows after the worker's last claimed id, not every row decided before it:
 * with a batch of one rule, the claims of a whole run read about as much as a few scans of the
 * table (before: one scan per claim up to its rule, quadratic in the rules). */
static void test_claims_linear(void) {
    const char *p = cli_path("claims.db");
    int64_t n = make_gen_db(p);
    EXPECT_TRUE(n > 100);
    un_ctx *ctx = un_ctx_new(NULL);
    un_runner_opts o = un_runner_opts_default();
    o.batch = 1;
    un_runner_stats s;
    EXPECT_OK(ctx, un_runner_run(ctx, spec, p, &o, &s));
    EXPECT_EQ(s.total, n);
    EXPECT_EQ(decided(p), n);
    /* the steps of one search through the whole table (every rule decided since then) */
    un_rulesdb *db = NULL;
    EXPECT_OK(ctx, un_rulesdb_open(ctx, p, spec, 0, &db));
    if (!db) {
        un_ctx_free(ctx);
        return;
    }
    un_rulesdb_filter f = un_rulesdb_filter_default();
    f.needs_verify = true;
    f.undecided_since = 1e12;
    int32_t ids[1];
    int got = -1;
    EXPECT_OK(ctx, un_rulesdb_claim(ctx, db, &f, "test", 60, 1, ids, &got, NULL));
    EXPECT_EQ(got, 0);
    int64_t scan = un_rulesdb_claim_steps(db);
    printf("    %lld claims of one rule: %lld VM steps; one scan of the table: %lld\n",
           (long long)n, (long long)s.claim_steps, (long long)scan);
    EXPECT_TRUE(scan > 0);
    EXPECT_TRUE(s.claim_steps < 6 * scan);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
}

static void test_bad_input(void) {
    const char *p = cli_path("bad_input.db");
    if (!make_db(p))
        return;
    char a[600];
    expect_clean_error("", "no rule database given");
    expect_clean_error("/nonexistent/rules.db", "no such rule database");
    snprintf(a, sizeof a, "%s --jobs 0", p);
    expect_clean_error(a, "--jobs needs an integer");
    snprintf(a, sizeof a, "%s --timeout-ms x", p);
    expect_clean_error(a, "--timeout-ms needs an integer");
    snprintf(a, sizeof a, "%s --wall-clock=1", p);
    expect_clean_error(a, "--wall-clock=1");
    snprintf(a, sizeof a, "%s --shard 2/2", p);
    expect_clean_error(a, "--shard needs I/N");
    snprintf(a, sizeof a, "%s --max-ops 0", p);
    expect_clean_error(a, "--max-ops needs an integer in [1, 16], not '0'");
    snprintf(a, sizeof a, "%s --max-ops", p);
    expect_clean_error(a, "--max-ops needs an integer");
    snprintf(a, sizeof a, "%s --max-ops 2 --rule 1", p);
    expect_clean_error(a, "--max-ops does not go with --rule");
    snprintf(a, sizeof a, "%s --frobnicate", p);
    expect_clean_error(a, "unknown option '--frobnicate'");
    snprintf(a, sizeof a, "%s --rule 999", p);
    expect_clean_error(a, "999");
    snprintf(a, sizeof a, "%s --ops /nonexistent", p);
    expect_clean_error(a, "/nonexistent");
    /* A wrong axiom in a copy of the spec stops everything before any proof. */
    char *text = NULL;
    size_t len = 0;
    un_ctx *c2 = un_ctx_new(NULL);
    EXPECT_OK(c2, un_read_file(c2, "specs/ops.json", &text, &len));
    un_ctx_free(c2);
    char *at = text ? strstr(text, "\"axioms\": [") : NULL;
    if (at) {
        char sp[300];
        snprintf(sp, sizeof sp, "%s/wrong_ops.json", cli_tmp);
        FILE *w = fopen(sp, "w");
        if (w) {
            size_t off = (size_t)(at - text) + strlen("\"axioms\": [");
            fwrite(text, 1, off, w);
            fputs(
                "{\"name\": \"planted\", \"vars\": {\"x\": [\"a\", \"b\"], \"y\": [\"a\", \"b\"]}, "
                "\"lhs\": \"(ew_mul x y)\", \"rhs\": \"(ew_add y x)\"}, ",
                w);
            fputs(text + off, w);
            fclose(w);
        }
        snprintf(a, sizeof a, "%s --ops %s", p, sp);
        expect_clean_error(a, "axiom planted is wrong");
    }
    free(text);
    /* A file that is not a database. */
    const char *g = cli_path("garbage.db");
    FILE *f = fopen(g, "w");
    if (f) {
        fputs("this is not a rule database, just text that is long enough to look like one\n", f);
        fclose(f);
    }
    expect_clean_error(g, "garbage.db");
    /* A tampered row: its content no longer matches its hash. */
    un_ctx *ctx = un_ctx_new(NULL);
    EXPECT_OK(ctx,
              un_rulesdb__test_exec(ctx, p,
                                    "UPDATE rules SET body = replace(body, 'ew_add', 'ew_mul') "
                                    "WHERE id = 1"));
    un_ctx_free(ctx);
    expect_clean_error(p, "rule 1");
}

int main(void) {
    if (!cli_init("/tmp/unity-verify-cli-XXXXXX"))
        return 1;
    un_ctx *ctx = un_ctx_new(NULL);
    if (un_spec_load(ctx, "specs/ops.json", &spec) != UN_OK) {
        printf("setup failed: %s\n0 passed, 1 failed\n", un_ctx_errmsg(ctx));
        un_ctx_free(ctx);
        return 1;
    }
    static const test_case cases[] = {
        {"verify_db", test_verify_db},         {"side_condition_shown", test_side_condition_shown},
        {"concurrent", test_concurrent},       {"kill_rerun", test_kill_rerun},
        {"claims_linear", test_claims_linear}, {"bad_input", test_bad_input}};
    int rc = TEST_RUN_ALL(cases);
    if (!cli_cleanup())
        rc = 1;
    un_spec_free(spec);
    un_ctx_free(ctx);
    return rc;
}
