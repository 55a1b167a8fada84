/* test_rule_claim.c - a rule's claim is exact (issue 10, items 2 and 3): side conditions computed,
 * stored and checked on instantiation; every verified rule re-checked on a grid of degrees and
 * sizes; reversed rules checked on their new side. With UNITY_CLAIM_DB=path set, it re-checks
 * every verified rule of that database instead (scripts/bench/claim.sh runs it on the N=3 set). */
#include <unistd.h>

#include "pcg/rule.h"
#include "rulesdb/rulesdb.h"
#include "tests/test.h"

static un_spec *spec;

/* Re-checks every verified rule of db_path; returns the number whose claim fails. With
 * recompute, side conditions are computed afresh (as the verifier does) before the check. */
static int64_t recheck_db(const char *db_path, bool recompute, int64_t *n_rules, int64_t *n_conds,
                          int64_t *n_held, bool verbose) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    un_rule **rules = NULL;
    int64_t n = 0, bad = 0;
    *n_rules = *n_conds = *n_held = 0;
    un_status st = un_rulesdb_open(ctx, db_path, spec, UN_RULESDB_READONLY, &db);
    if (st == UN_OK)
        st = un_rulesdb_load_verified(ctx, db, &rules, &n, NULL);
    EXPECT_OK(ctx, st);
    for (int64_t i = 0; i < n; i++) {
        un_rule *r = rules[i];
        if (recompute && un_rule_conds_compute(ctx, r) != UN_OK)
            un_ctx_clear(ctx);
        if (getenv("UNITY_CLAIM_STRIP")) /* the claim as it was before side conditions */
            r->n_conds = 0;
        *n_conds += r->n_conds > 0;
        if (verbose && getenv("UNITY_CLAIM_SHOW") && r->n_conds) {
            un_buf b = {0};
            un_rule_str(r, &b);
            for (int c = 0; c < r->n_conds; c++) {
                un_buf_printf(&b, "    if ");
                un_rule_cond_str(r, &r->conds[c], &b);
                un_buf_printf(&b, "\n");
            }
            printf("%s", b.data);
            un_buf_deinit(&b);
        }
        un_rule_claim_stats cs;
        if (un_rule_check_claim(ctx, r, 8, &cs) != UN_OK) {
            if (verbose && bad < 30) {
                un_buf b = {0};
                un_rule_str(r, &b);
                printf("  claim fails: %s    %s\n", b.data, un_ctx_errmsg(ctx));
                un_buf_deinit(&b);
            }
            bad++;
        }
        un_ctx_clear(ctx);
        *n_held += cs.held;
        un_rule_free(r);
    }
    free(rules);
    *n_rules = n;
    un_rulesdb_free(db);
    un_ctx_free(ctx);
    return bad;
}

/* relu(x0) => combine[dim=1,degree=k](relu(partition[dim=1,degree=k](x0))) at x0 [2,4,4] (or the
 * source's layout on dim 2 as `shard`, with k bound there too: then k^2 must divide dim 2). */
static un_rule *relu_rule(un_ctx *ctx, int dim, bool sharded_input) {
    char text[2048];
    snprintf(text, sizeof text,
             "{\"src\": {\"nodes\": [{\"name\": \"x0\", \"op\": \"input\", \"params\": "
             "{\"shape\": [2, 4, 4]%s}},"
             " {\"name\": \"s0\", \"op\": \"relu\", \"in\": [\"x0\"]}], \"outputs\": [\"s0\"]},"
             " \"dst\": {\"nodes\": [{\"name\": \"x0\", \"op\": \"input\", \"params\": "
             "{\"shape\": [2, 4, 4]%s}},"
             " {\"name\": \"t0\", \"op\": \"partition\", \"in\": [\"x0\"], \"params\": "
             "{\"dim\": %d, \"degree\": 2}},"
             " {\"name\": \"t1\", \"op\": \"relu\", \"in\": [\"t0\"]},"
             " {\"name\": \"t2\", \"op\": \"combine\", \"in\": [\"t1\"], \"params\": "
             "{\"dim\": %d, \"degree\": 2}}], \"outputs\": [\"t2\"]},"
             " \"vars\": [{\"name\": \"k\", \"value\": 2, \"at\": [[\"dst\", \"t0\", \"degree\"], "
             "[\"dst\", \"t2\", \"degree\"]%s]}], \"any_shape\": true}",
             sharded_input ? ", \"shard\": [1, 1, 2]" : "",
             sharded_input ? ", \"shard\": [1, 1, 2]" : "", dim, dim,
             sharded_input ? ", [\"src\", \"x0\", \"shard\", 2], [\"dst\", \"x0\", \"shard\", 2]"
                           : "");
    un_rule *r = NULL;
    EXPECT_OK(ctx, un_rule_from_json(ctx, spec, "relu_rule", text, strlen(text), &r));
    return r;
}

static void expect_conds(const un_rule *r, const char *want) {
    un_buf b = {0};
    for (int i = 0; i < r->n_conds; i++) {
        un_buf_printf(&b, "%s", i ? "; " : "");
        un_rule_cond_str(r, &r->conds[i], &b);
    }
    EXPECT_STR_EQ(b.data ? b.data : "", want);
    un_buf_deinit(&b);
}

/* The example: the target needs k | dim 1, the source nothing. */
static void test_target_only_degree(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *r = relu_rule(ctx, 1, false), *inst = NULL, *back = NULL, *canon = NULL;
    if (!r)
        goto done;
    /* without side conditions the claim fails at k=3 on x0 [2,4,4] */
    EXPECT_EQ(r->n_conds, 0);
    EXPECT_EQ(un_rule_check_claim(ctx, r, 8, NULL), UN_ERR_MISMATCH);
    un_ctx_clear(ctx);
    EXPECT_OK(ctx, un_rule_conds_compute(ctx, r));
    expect_conds(r, "k | dim 1 of x0");
    un_rule_claim_stats cs;
    EXPECT_OK(ctx, un_rule_check_claim(ctx, r, 8, &cs));
    EXPECT_TRUE(cs.held > 0 && cs.cond_failed > 0);
    /* instantiation checks it: k=3 on dim 4 names the condition; k=4 holds */
    EXPECT_EQ(un_rule_instantiate(ctx, r, (int64_t[]){3}, NULL, &inst), UN_ERR_SHAPE);
    EXPECT_TRUE(inst == NULL);
    if (!strstr(un_ctx_errmsg(ctx), "side condition k | dim 1 of x0 fails"))
        printf("    message: %s\n", un_ctx_errmsg(ctx));
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "side condition k | dim 1 of x0 fails") != NULL);
    un_ctx_clear(ctx);
    EXPECT_OK(ctx, un_rule_instantiate(ctx, r, (int64_t[]){4}, NULL, &inst));
    if (inst)
        EXPECT_OK(ctx, un_rule_check_random(ctx, inst, UN_DOM_FIELD, 7, NULL));
    /* JSON and the canonical form keep the conditions */
    un_buf j = {0};
    EXPECT_OK(ctx, un_rule_to_json(ctx, r, &j));
    EXPECT_TRUE(j.data && strstr(j.data, "\"conds\"") != NULL);
    un_rule *again = NULL;
    EXPECT_OK(ctx, un_rule_from_json(ctx, spec, "again", j.data, j.len, &again));
    if (again)
        expect_conds(again, "k | dim 1 of x0");
    un_rule_free(again);
    un_buf_deinit(&j);
    EXPECT_OK(ctx, un_rule_canonical(ctx, r, &canon));
    if (canon)
        expect_conds(canon, "k | dim 1 of x0");
    /* a condition naming a parameter the rule does not have, or no such node, is refused */
    static const char *bad[] = {
        "{\"coef\": 1, \"pow\": {\"j\": 1}, \"of\": [\"src\", \"x0\", 0, 1]}",
        "{\"coef\": 1, \"of\": [\"src\", \"nope\", 0, 1]}",
        "{\"coef\": 0, \"of\": [\"src\", \"x0\", 0, 1]}",
        "{\"coef\": 1, \"of\": [\"src\", \"x0\", 0, 9]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        un_buf t = {0};
        EXPECT_OK(ctx, un_rule_to_json(ctx, r, &t));
        char *at = t.data ? strstr(t.data, "\"conds\": [") : NULL;
        if (!at)
            continue;
        at += strlen("\"conds\": [");
        char *end = strchr(at, ']');
        end = end ? strchr(end + 1, ']') : NULL; /* the "of" list, then the conds list */
        if (!end)
            continue;
        un_buf u = {0};
        un_buf_printf(&u, "%.*s%s%s", (int)(at - t.data), t.data, bad[i], end);
        un_rule *x = NULL;
        EXPECT_EQ(un_rule_from_json(ctx, spec, "bad", u.data, u.len, &x), UN_ERR_PARSE);
        EXPECT_TRUE(x == NULL);
        un_ctx_clear(ctx);
        un_buf_deinit(&u);
        un_buf_deinit(&t);
    }
done:
    un_rule_free(canon);
    un_rule_free(back);
    un_rule_free(inst);
    un_rule_free(r);
    un_ctx_free(ctx);
}

/* k is also the input's own shard degree on the partitioned dim: the target needs k^2 | dim 2. */
static void test_k_squared(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *r = relu_rule(ctx, 2, true), *inst = NULL;
    if (!r)
        goto done;
    EXPECT_EQ(un_rule_check_claim(ctx, r, 8, NULL), UN_ERR_MISMATCH); /* k=4: 16 blocks of 4 */
    un_ctx_clear(ctx);
    EXPECT_OK(ctx, un_rule_conds_compute(ctx, r));
    expect_conds(r, "k^2 | dim 2 of x0");
    EXPECT_OK(ctx, un_rule_check_claim(ctx, r, 8, NULL));
    un_shape s = *un_graph_shape(r->src, (un_ref){un_rule_input_src(r, 0), 0});
    s.dim[2] = 8; /* k=2 and 8: holds; k=4: 16 does not divide 8 although 4 does */
    EXPECT_OK(ctx, un_rule_instantiate(ctx, r, (int64_t[]){2}, &s, &inst));
    un_rule_free(inst);
    s.shard[2] = 4;
    EXPECT_EQ(un_rule_instantiate(ctx, r, (int64_t[]){4}, &s, &inst), UN_ERR_SHAPE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "k^2 | dim 2 of x0") != NULL);
    un_ctx_clear(ctx);
    s.dim[2] = 16;
    EXPECT_OK(ctx, un_rule_instantiate(ctx, r, (int64_t[]){4}, &s, &inst));
done:
    un_rule_free(inst);
    un_rule_free(r);
    un_ctx_free(ctx);
}

/* A condition the source already implies is not one: partition[dim=0](relu(x)) needs k | dim 0
 * of x on both sides. */
static void test_implied_not_listed(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    static const char *text =
        "{\"src\": {\"nodes\": [{\"name\": \"x0\", \"op\": \"input\", \"params\": {\"shape\": [4, "
        "4]}}, {\"name\": \"s0\", \"op\": \"relu\", \"in\": [\"x0\"]}, {\"name\": \"s1\", \"op\": "
        "\"partition\", \"in\": [\"s0\"], \"params\": {\"dim\": 0, \"degree\": 2}}], \"outputs\": "
        "[\"s1\"]}, \"dst\": {\"nodes\": [{\"name\": \"x0\", \"op\": \"input\", \"params\": "
        "{\"shape\": [4, 4]}}, {\"name\": \"t0\", \"op\": \"partition\", \"in\": [\"x0\"], "
        "\"params\": {\"dim\": 0, \"degree\": 2}}, {\"name\": \"t1\", \"op\": \"relu\", \"in\": "
        "[\"t0\"]}], \"outputs\": [\"t1\"]}, \"vars\": [{\"name\": \"k\", \"value\": 2, \"at\": "
        "[[\"src\", \"s1\", \"degree\"], [\"dst\", \"t0\", \"degree\"]]}], \"any_shape\": true}";
    un_rule *r = NULL;
    EXPECT_OK(ctx, un_rule_from_json(ctx, spec, "dp", text, strlen(text), &r));
    if (r) {
        EXPECT_OK(ctx, un_rule_conds_compute(ctx, r));
        EXPECT_EQ(r->n_conds, 0);
        EXPECT_OK(ctx, un_rule_check_claim(ctx, r, 8, NULL));
    }
    un_rule_free(r);
    un_ctx_free(ctx);
}

/* Rules used backwards: the reversed rule's new target is checked on instantiation. */
static void test_reverse(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *r = relu_rule(ctx, 1, false), *f = NULL, *back = NULL, *inst = NULL;
    if (!r)
        goto done;
    EXPECT_OK(ctx, un_rule_conds_compute(ctx, r));
    /* f: combine(relu(partition(x0))) => relu(x0): needs nothing beyond its source */
    EXPECT_OK(ctx, un_rule_reverse(ctx, r, &f));
    if (!f)
        goto done;
    EXPECT_EQ(f->n_conds, 0);
    EXPECT_EQ(un_rule_hash(f) == un_rule_hash(r), false);
    EXPECT_OK(ctx, un_rule_check_claim(ctx, f, 8, NULL));
    un_shape s = *un_graph_shape(f->src, (un_ref){un_rule_input_src(f, 0), 0});
    s.dim[1] = 3; /* f's source is ill formed at k=2 on dim 3 */
    EXPECT_EQ(un_rule_instantiate(ctx, f, (int64_t[]){2}, &s, &inst), UN_ERR_SHAPE);
    un_ctx_clear(ctx);
    /* f reversed (r again): its source relu(x0) is well formed on [2,3,4], its target is not */
    EXPECT_OK(ctx, un_rule_reverse(ctx, f, &back));
    if (!back)
        goto done;
    EXPECT_EQ(un_rule_hash(back), un_rule_hash(r));
    expect_conds(back, "k | dim 1 of x0");
    EXPECT_EQ(un_rule_instantiate(ctx, back, (int64_t[]){2}, &s, &inst), UN_ERR_SHAPE);
    EXPECT_TRUE(inst == NULL);
    un_ctx_clear(ctx);
    s.dim[1] = 6;
    EXPECT_OK(ctx, un_rule_instantiate(ctx, back, (int64_t[]){2}, &s, &inst));
    if (inst)
        EXPECT_OK(ctx, un_rule_check_random(ctx, inst, UN_DOM_F64, 3, NULL));
done:
    un_rule_free(inst);
    un_rule_free(back);
    un_rule_free(f);
    un_rule_free(r);
    un_ctx_free(ctx);
}

/* Backwards, the new target may need a size the new source does not give (not a divisibility):
 * relu(concat(split[sizes=[2,2]](x0))) => relu(x0) read backwards needs dim 0 of x0 to be 4. */
static void test_reverse_sizes(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    static const char *text =
        "{\"src\": {\"nodes\": [{\"name\": \"x0\", \"op\": \"input\", \"params\": {\"shape\": [4, "
        "3]}}, {\"name\": \"s0\", \"op\": \"split\", \"in\": [\"x0\"], \"params\": {\"sizes\": [2, "
        "2]}}, {\"name\": \"s1\", \"op\": \"concat\", \"in\": [\"s0:0\", \"s0:1\"]}, {\"name\": "
        "\"s2\", \"op\": \"relu\", \"in\": [\"s1\"]}], \"outputs\": [\"s2\"]}, \"dst\": "
        "{\"nodes\": "
        "[{\"name\": \"x0\", \"op\": \"input\", \"params\": {\"shape\": [4, 3]}}, {\"name\": "
        "\"t0\", "
        "\"op\": \"relu\", \"in\": [\"x0\"]}], \"outputs\": [\"t0\"]}, \"any_shape\": true}";
    un_rule *r = NULL, *back = NULL, *inst = NULL;
    EXPECT_OK(ctx, un_rule_from_json(ctx, spec, "split_concat", text, strlen(text), &r));
    if (r)
        EXPECT_OK(ctx, un_rule_reverse(ctx, r, &back));
    if (!back)
        goto done;
    EXPECT_EQ(back->n_conds, 0);
    un_shape s = *un_graph_shape(back->src, (un_ref){un_rule_input_src(back, 0), 0});
    EXPECT_OK(ctx, un_rule_instantiate(ctx, back, NULL, &s, &inst));
    un_rule_free(inst);
    inst = NULL;
    s.dim[0] = 6; /* relu(x0) is well formed on [6,3]; split into [2,2] is not */
    EXPECT_EQ(un_rule_instantiate(ctx, back, NULL, &s, &inst), UN_ERR_SHAPE);
    EXPECT_TRUE(inst == NULL);
    un_rule_claim_stats cs;
    EXPECT_EQ(un_rule_check_claim(ctx, back, 8, &cs), UN_ERR_MISMATCH);
    EXPECT_TRUE(cs.target_ill > 0 && cs.outputs_differ == 0);
done:
    un_rule_free(back);
    un_rule_free(r);
    un_ctx_free(ctx);
}

/* The default menu at N=2, generated and verified by the programs: every verified rule's claim
 * holds on the re-check grid (k in 1..8, sizes where the source is well formed). */
static void test_verified_n2(void) {
    char dir[64], cmd[1024];
    if (!test_tmpdir_make(dir, sizeof dir, "/tmp/unity-claim-XXXXXX")) {
        EXPECT_TRUE(false);
        return;
    }
    const char *b = getenv("UNITY_BUILD");
    b = b && *b ? b : "build/default";
    snprintf(cmd, sizeof cmd,
             "%s/bin/unity-gen --ops specs/ --max-ops 2 --threads 1 -o %s/r.db >/dev/null 2>&1 && "
             "%s/bin/unity-verify %s/r.db --jobs 1 >/dev/null 2>&1",
             b, dir, b, dir);
    EXPECT_EQ(system(cmd), 0);
    char db[128];
    snprintf(db, sizeof db, "%s/r.db", dir);
    int64_t n, nc, nh;
    EXPECT_EQ(recheck_db(db, false, &n, &nc, &nh, true), 0);
    EXPECT_TRUE(n > 150);
    EXPECT_TRUE(nh > 1000);
    EXPECT_TRUE(test_tmpdir_remove(dir));
}

/* Every verified rule read backwards, on the re-check grid: how many have instances where the new
 * source (the old target) and its side conditions hold but the new target (the old source) is not
 * well formed (instantiation refuses those), and how many have instances where both sides are
 * well formed but the outputs differ (must be none). */
static int reverse_db(const char *path) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    un_rule **rules = NULL;
    int64_t n = 0, any = 0, needs = 0, fail = 0, no_rev = 0;
    un_status st = un_rulesdb_open(ctx, path, spec, UN_RULESDB_READONLY, &db);
    if (st == UN_OK)
        st = un_rulesdb_load_verified(ctx, db, &rules, &n, NULL);
    EXPECT_OK(ctx, st);
    for (int64_t i = 0; i < n; i++) {
        un_rule *b = NULL;
        if (un_rule_reverse(ctx, rules[i], &b) != UN_OK) {
            no_rev++;
        } else {
            un_rule_claim_stats cs;
            int nc = b->n_conds;
            b->n_conds = 0;
            un_rule_check_claim(ctx, b, 8, &cs);
            un_ctx_clear(ctx);
            any += cs.target_ill > 0;
            b->n_conds = nc;
            un_rule_check_claim(ctx, b, 8, &cs);
            needs += cs.target_ill > 0;
            if (cs.outputs_differ > 0) {
                if (fail < 30) {
                    un_buf t = {0};
                    un_rule_str(b, &t);
                    printf("  reversed, both sides well formed, outputs differ: %s    %s\n", t.data,
                           un_ctx_errmsg(ctx));
                    un_buf_deinit(&t);
                }
                fail++;
            }
        }
        un_ctx_clear(ctx);
        un_rule_free(b);
        un_rule_free(rules[i]);
    }
    free(rules);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
    printf("%s: %lld verified rules reversed: %lld have instances where the new source is well "
           "formed and the new target is not, %lld of them also where the reversed rule's side "
           "conditions hold (instantiation refuses them all); %lld have instances where both "
           "are well formed and the outputs differ; %lld cannot be reversed\n",
           path, (long long)n, (long long)any, (long long)needs, (long long)fail,
           (long long)no_rev);
    return fail != 0 || no_rev != 0;
}

static int full_db(const char *path) {
    if (!test_spec_load(&spec))
        return 1;
    if (getenv("UNITY_CLAIM_REVERSE")) {
        int bad = reverse_db(path);
        un_spec_free(spec);
        printf("%d passed, %d failed\n", !bad, bad);
        return bad;
    }
    int64_t n, nc, nh;
    int64_t bad = recheck_db(path, getenv("UNITY_CLAIM_RECOMPUTE") != NULL, &n, &nc, &nh, true);
    printf("%s: %lld verified rules re-checked (%lld with side conditions, %lld instances held): "
           "%lld claims fail\n",
           path, (long long)n, (long long)nc, (long long)nh, (long long)bad);
    un_spec_free(spec);
    printf("%d passed, %d failed\n", bad == 0 && !test__failed, bad != 0 || test__failed);
    return bad != 0 || test__failed;
}

int main(void) {
    const char *db = getenv("UNITY_CLAIM_DB");
    if (db)
        return full_db(db);
    static const test_case cases[] = {
        {"target_only_degree", test_target_only_degree}, {"k_squared", test_k_squared},
        {"implied_not_listed", test_implied_not_listed}, {"reverse", test_reverse},
        {"reverse_sizes", test_reverse_sizes},           {"verified_n2", test_verified_n2}};
    return TEST_RUN_WITH_SPEC(cases, &spec);
}
