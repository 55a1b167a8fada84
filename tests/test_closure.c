/* test_closure.c - closure pruning (search/closure.h, unity-closure): a copy of a kept rule and a
 * reversed one are dropped at one rewrite while the rules they copy stay; on a verified set (the
 * reach test menu at N=3) the pruning drops rules and the reach test holds: every graph
 * reachable from a tiny zoo model within 3 rewrites of the full set is reachable with the pruned
 * set, while an empty set fails it; a verified basis rule derives in its proven general form
 * (the staged pipeline: unity-verify --max-ops, then --verified-basis); the program's counts, run
 * row and bad input. */
#include "runtime/zoo.h"
#include "search/closure.h"
#include "search/match.h"
#include "tests/cli.h"

static un_spec *spec;

/* The rules of database TMP/name (every status) in id order: *n of them, owned. */
static un_rule **load_rules(const char *name, int64_t *n) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    int32_t *ids = NULL;
    un_rule **rules = NULL;
    *n = 0;
    un_rulesdb_filter f = un_rulesdb_filter_default();
    un_status st = un_rulesdb_open(ctx, cli_path(name), spec, UN_RULESDB_READONLY, &db);
    if (st == UN_OK)
        st = un_rulesdb_rule_ids(ctx, db, &f, &ids, n);
    EXPECT_OK(ctx, st);
    rules = calloc((size_t)*n + 2, sizeof *rules);
    for (int64_t i = 0; st == UN_OK && i < *n; i++) {
        un_rulesdb_row *row = NULL;
        st = un_rulesdb_rule_get(ctx, db, ids[i], &row);
        EXPECT_OK(ctx, st);
        if (st == UN_OK) {
            rules[i] = row->rule;
            row->rule = NULL;
        }
        un_rulesdb_row_free(row);
    }
    free(ids);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
    return rules;
}

static void free_rules(un_rule **r, int64_t n) {
    for (int64_t i = 0; r && i < n; i++)
        un_rule_free(r[i]);
    free(r);
}

static void test_copies_dropped(void) {
    const cli_result *res =
        cli_run("unity-gen",
                cli_fmt("--ops specs/ --menu specs/menus/ew_add.json --threads 1 -o %s/add.db"));
    EXPECT_EQ(res->code, 0);
    int64_t n = 0;
    un_rule **r = load_rules("add.db", &n);
    EXPECT_EQ(n, 3); /* commutativity and associativity */
    if (n != 3) {
        free_rules(r, n);
        return;
    }
    un_ctx *ctx = un_ctx_new(NULL);
    r[3] = un_rule_clone(r[1]);
    EXPECT_OK(ctx, un_rule_reverse(ctx, r[2], &r[4]));
    bool drop[5] = {0};
    un_closure_params p = un_closure_params_default();
    p.depth = 1;
    un_closure_stats s;
    EXPECT_OK(ctx, un_closure_prune(ctx, spec, r, 5, &p, drop, &s));
    EXPECT_TRUE(!drop[0] && !drop[1] && !drop[2]);
    EXPECT_TRUE(drop[3] && drop[4]);
    EXPECT_EQ(s.dropped, 2);
    EXPECT_EQ(s.by_depth[1], 2);
    EXPECT_EQ(s.kept, 3);
    /* the same at two threads */
    bool drop2[5] = {0};
    p.threads = 2;
    EXPECT_OK(ctx, un_closure_prune(ctx, spec, r, 5, &p, drop2, NULL));
    EXPECT_TRUE(memcmp(drop, drop2, sizeof drop) == 0);
    /* with only one-operator rules (commutativity) as the basis the associativity copies stay */
    p.basis_ops = 1;
    EXPECT_OK(ctx, un_closure_prune(ctx, spec, r, 5, &p, drop2, &s));
    EXPECT_EQ(s.dropped, 0);
    EXPECT_EQ(s.not_basis, 4);
    p.basis_ops = 0;
    /* a depth out of range is an error, not a crash */
    p.depth = 7;
    EXPECT_EQ(un_closure_prune(ctx, spec, r, 5, &p, drop, NULL), UN_ERR_INVALID);
    un_ctx_free(ctx);
    free_rules(r, 5);
}

/* The parallel test menu at N=3, verified: %s/par.db. */
static bool par_db(void) {
    static int made = -1;
    if (made < 0) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "%s/unity-gen --ops specs/ --menu specs/menus/reach.json --max-ops 3 "
                 "--threads 2 -o %s/par.db && %s/unity-verify %s/par.db --jobs 2",
                 cli_bin, cli_tmp, cli_bin, cli_tmp);
        const cli_result *res = cli_run_shell(cmd);
        made = res->code == 0;
        EXPECT_EQ(res->code, 0);
    }
    return made == 1;
}

static void test_reach(void) {
    if (!par_db())
        return;
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    un_rule **rules = NULL;
    int32_t *ids = NULL;
    int64_t n = 0, stale = 0;
    un_status st = un_rulesdb_open(ctx, cli_path("par.db"), spec, UN_RULESDB_READONLY, &db);
    if (st == UN_OK)
        st = un_rulesdb_load_verified_ids(ctx, db, &rules, &ids, &n, &stale);
    EXPECT_OK(ctx, st);
    un_rulesdb_free(db);
    EXPECT_TRUE(n > 100);
    bool *drop = calloc((size_t)n + 1, 1);
    un_closure_params p = un_closure_params_default();
    p.threads = 2;
    un_closure_stats s = {0};
    EXPECT_OK(ctx, un_closure_prune(ctx, spec, rules, n, &p, drop, &s));
    EXPECT_TRUE(s.dropped > n / 4); /* 380 of 683 when written */
    EXPECT_EQ(s.dropped + s.kept, n);
    EXPECT_EQ(s.by_depth[1] + s.by_depth[2], s.dropped);
    /* the decisions do not depend on the thread count, with or without a bounded basis (rules
     * built lazily by the threads that match them first, un_ruleset_rule) */
    for (int b = 0; b <= 2; b += 2) {
        bool *d1 = calloc((size_t)n + 1, 1), *d3 = calloc((size_t)n + 1, 1);
        un_closure_params q = p;
        q.basis_ops = b;
        q.threads = 1;
        EXPECT_OK(ctx, un_closure_prune(ctx, spec, rules, n, &q, d1, NULL));
        q.threads = 3;
        EXPECT_OK(ctx, un_closure_prune(ctx, spec, rules, n, &q, d3, NULL));
        EXPECT_TRUE(!memcmp(d1, d3, (size_t)n));
        EXPECT_TRUE(b || !memcmp(d1, drop, (size_t)n));
        free(d1);
        free(d3);
    }
    un_rule **kept = calloc((size_t)n + 1, sizeof *kept);
    int64_t nk = 0;
    for (int64_t i = 0; i < n; i++)
        if (!drop[i])
            kept[nk++] = rules[i];
    un_ruleset_params rp = un_ruleset_params_default();
    rp.reversed = true;
    rp.cache = false;
    un_ruleset *full = NULL, *pruned = NULL, *empty = NULL;
    EXPECT_OK(ctx, un_ruleset_from_rules(ctx, spec, rules, NULL, n, &rp, &full));
    EXPECT_OK(ctx, un_ruleset_from_rules(ctx, spec, kept, NULL, nk, &rp, &pruned));
    EXPECT_OK(ctx, un_ruleset_from_rules(ctx, spec, kept, NULL, 0, &rp, &empty));
    int64_t reached = 0, derived = 0;
    const char *models[] = {"mlp", "xdl", "transformer", "candle_uno"};
    for (int i = 0; full && pruned && empty && i < 4; i++) {
        un_model m = {0};
        EXPECT_OK(ctx, un_zoo_build(ctx, spec, models[i], true, 0, &m));
        un_closure_reach_stats rs, re;
        EXPECT_OK(ctx, un_closure_reach_check(ctx, full, pruned, m.graph, 3, 2, 20000, &rs));
        EXPECT_EQ(rs.missing, 0);
        EXPECT_TRUE(!rs.capped);
        EXPECT_EQ(rs.direct + rs.derived + 1, rs.graphs);
        reached += rs.graphs;
        derived += rs.derived;
        /* the control: with no rules nothing beyond the model is reachable */
        EXPECT_OK(ctx, un_closure_reach_check(ctx, full, empty, m.graph, 2, 2, 20000, &re));
        EXPECT_TRUE(re.graphs == 1 || re.missing > 0);
        EXPECT_EQ(re.direct + re.derived, 0);
        /* un_closure_reach agrees with the full set's count */
        uint64_t *keys = NULL;
        int64_t nkeys = 0;
        bool capped = true;
        EXPECT_OK(ctx, un_closure_reach(ctx, full, m.graph, 3, 0, &keys, &nkeys, &capped));
        EXPECT_EQ(nkeys, rs.graphs);
        EXPECT_TRUE(!capped);
        free(keys);
        un_model_deinit(&m);
    }
    EXPECT_TRUE(reached > 20); /* the rules rewrite these models */
    EXPECT_TRUE(derived > 0);  /* and some rewrites need a derivation with the pruned set */
    /* depth 3 drops more, on any thread count, and the reach holds with step 3 */
    bool *drop3 = calloc((size_t)n + 1, 1), *drop3b = calloc((size_t)n + 1, 1);
    un_closure_params p3 = p;
    p3.depth = 3;
    un_closure_stats s3 = {0};
    EXPECT_OK(ctx, un_closure_prune(ctx, spec, rules, n, &p3, drop3, &s3));
    EXPECT_TRUE(s3.dropped > s.dropped && s3.by_depth[3] > 0);
    EXPECT_TRUE(s3.unbuilt > 0); /* rewrites whose operators no target-side graph has */
    p3.threads = 1;
    EXPECT_OK(ctx, un_closure_prune(ctx, spec, rules, n, &p3, drop3b, NULL));
    EXPECT_TRUE(!memcmp(drop3, drop3b, (size_t)n));
    int64_t nk3 = 0;
    for (int64_t i = 0; i < n; i++)
        if (!drop3[i])
            kept[nk3++] = rules[i];
    un_ruleset *pruned3 = NULL;
    EXPECT_OK(ctx, un_ruleset_from_rules(ctx, spec, kept, NULL, nk3, &rp, &pruned3));
    for (int i = 0; full && pruned3 && i < 4; i++) {
        un_model m = {0};
        EXPECT_OK(ctx, un_zoo_build(ctx, spec, models[i], true, 0, &m));
        un_closure_reach_stats rs;
        EXPECT_OK(ctx, un_closure_reach_check(ctx, full, pruned3, m.graph, 3, 3, 20000, &rs));
        EXPECT_EQ(rs.missing, 0);
        un_model_deinit(&m);
    }
    un_ruleset_free(pruned3);
    free(drop3);
    free(drop3b);
    un_ruleset_free(full);
    un_ruleset_free(pruned);
    un_ruleset_free(empty);
    free(kept);
    free(drop);
    free(ids);
    free_rules(rules, n);
    un_ctx_free(ctx);
}

/* The reach menu's rules at N=3 (*rules, *n of them, owned) as a set, each both ways (owned). */
static un_ruleset *par_set(un_ctx *ctx, un_rule ***rules, int64_t *n) {
    *rules = load_rules("par.db", n);
    un_ruleset_params rp = un_ruleset_params_default();
    rp.reversed = true;
    rp.cache = false;
    un_ruleset *set = NULL;
    EXPECT_OK(ctx, un_ruleset_from_rules(ctx, spec, *rules, NULL, *n, &rp, &set));
    return set;
}

/* The matches of every entry root by root (the matcher's scan before the label index), entries
 * with ok[e] only (ok may be NULL); roots_tried goes to *tried. */
static void match_slow(un_ctx *ctx, const un_ruleset *set, const un_graph *g, const bool *ok,
                       un_match_list *out, int64_t *tried) {
    un_matcher *m = NULL;
    EXPECT_OK(ctx, un_matcher_new(ctx, set, g, &m));
    bool has[UN_OP_COUNT] = {0};
    for (int32_t v = 0; v < un_graph_node_count(g); v++)
        has[un_graph_node(g, v)->op] = true;
    for (int o = 0; m && o < UN_OP_COUNT; o++) {
        int64_t n = 0;
        const int32_t *es = has[o] ? un_ruleset_by_root(set, (un_op)o, &n) : NULL;
        for (int64_t i = 0; i < n; i++)
            if (!ok || ok[es[i]])
                EXPECT_OK(ctx, un_match_rule(ctx, m, es[i], out));
    }
    *tried += m ? un_matcher_stats(m).roots_tried : 0;
    un_matcher_free(m);
}

/* un_match_all with the set's label index finds exactly the matches of every entry tried at
 * every root, in the same order, while trying a fraction of the roots; un_matcher_restrict
 * leaves out the entries it excludes. On the sides of the reach menu's rules at N=3. */
static void test_match_index(void) {
    if (!par_db())
        return;
    un_ctx *ctx = un_ctx_new(NULL);
    int64_t n = 0;
    un_rule **rules = NULL;
    un_ruleset *set = par_set(ctx, &rules, &n);
    int64_t ne = set ? un_ruleset_count(set) : 0;
    bool *odd = calloc((size_t)ne + 1, 1);
    for (int64_t e = 1; e < ne; e += 2)
        odd[e] = true;
    int64_t tried_index = 0, tried_slow = 0, matches = 0, graphs = 0;
    for (int64_t i = 0; set && i < n; i += 3) {
        for (int side = 0; side < 2; side++) {
            const un_graph *g = side ? rules[i]->dst : rules[i]->src;
            for (int r = 0; r < 2; r++) {
                const bool *ok = r ? odd : NULL;
                un_match_list fast = {0}, slow = {0};
                un_matcher *m = NULL;
                EXPECT_OK(ctx, un_matcher_new(ctx, set, g, &m));
                un_matcher_restrict(m, ok);
                EXPECT_OK(ctx, un_match_all(ctx, m, &fast));
                tried_index += un_matcher_stats(m).roots_tried;
                un_matcher_free(m);
                match_slow(ctx, set, g, ok, &slow, &tried_slow);
                EXPECT_EQ(fast.n, slow.n);
                EXPECT_TRUE(fast.n != slow.n || fast.n == 0 ||
                            !memcmp(fast.v, slow.v, sizeof(un_match) * (size_t)fast.n));
                for (int64_t k = 0; r && k < fast.n; k++)
                    EXPECT_TRUE(odd[fast.v[k].rule]);
                matches += fast.n;
                un_match_list_deinit(&fast);
                un_match_list_deinit(&slow);
            }
            graphs++;
        }
    }
    EXPECT_TRUE(graphs > 400);
    EXPECT_TRUE(matches > graphs); /* the rules match one another's sides */
    /* 194,937 roots tried against 1,287,378 when written (3,710 matches on 456 graphs) */
    EXPECT_TRUE(tried_index * 4 < tried_slow);
    free(odd);
    un_ruleset_free(set);
    free_rules(rules, n);
    un_ctx_free(ctx);
}

/* Every rewrite of g with set (and, to depth levels, of its results): un_apply_sketch fails
 * exactly where un_apply does, and an exact sketch has the built graph's key. Counts into
 * n[0] (rewrites), n[1] (exact sketches), n[2] (failures, of broken matches too). Most
 * sketches instantiate through cache, some without. */
static void sketch_agrees(un_ctx *ctx, const un_ruleset *set, un_inst_cache *cache,
                          const un_graph *g, int depth, int64_t *n) {
    un_matcher *m = NULL;
    EXPECT_OK(ctx, un_matcher_new(ctx, set, g, &m));
    un_match_list ms = {0};
    if (m)
        EXPECT_OK(ctx, un_match_all(ctx, m, &ms));
    un_sketch sk = {0};
    for (int64_t i = 0; i < ms.n; i++) {
        un_graph *ng = NULL, *ng2 = NULL;
        bool exact = false;
        un_status built = un_apply(ctx, set, g, &ms.v[i], &ng, NULL);
        un_ctx_clear(ctx);
        un_status sketched =
            un_apply_sketch(ctx, set, g, &ms.v[i], i % 5 ? cache : NULL, &sk, &exact);
        un_ctx_clear(ctx);
        EXPECT_EQ(sketched, built);
        n[0]++;
        n[2] += built != UN_OK;
        if (built == UN_OK && sketched == UN_OK && exact) {
            n[1]++;
            EXPECT_EQ(un_closure_sketch_key(&sk), un_closure_graph_key(ng));
        }
        /* and a broken match fails both alike: its input read from the match (a cycle), or no
         * such entry */
        un_match bad = ms.v[i];
        for (int k = 0; k < bad.n_nodes && bad.n_inputs > 0; k++)
            if (bad.node[k] >= 0)
                bad.input[0] = (un_ref){bad.node[k], 0};
        if (i % 2)
            bad.rule = (int32_t)un_ruleset_count(set);
        built = un_apply(ctx, set, g, &bad, &ng2, NULL);
        un_ctx_clear(ctx);
        sketched = un_apply_sketch(ctx, set, g, &bad, i % 4 ? cache : NULL, &sk, &exact);
        un_ctx_clear(ctx);
        EXPECT_EQ(sketched, built);
        n[2] += built != UN_OK;
        un_graph_free(ng2);
        if (ng && depth > 1 && i % 3 == 0)
            sketch_agrees(ctx, set, cache, ng, depth - 1, n);
        un_graph_free(ng);
    }
    un_sketch_deinit(&sk);
    un_match_list_deinit(&ms);
    un_matcher_free(m);
}

/* The last level of an exploration keys a sketch of each rewrite instead of the graph: on the
 * reach menu's rule sides (two levels of rewrites) and the tiny zoo models, the keys are the
 * built graphs' and the failures un_apply's. */
static void test_sketch_key(void) {
    if (!par_db())
        return;
    un_ctx *ctx = un_ctx_new(NULL);
    int64_t n = 0;
    un_rule **rules = NULL;
    un_ruleset *set = par_set(ctx, &rules, &n);
    int64_t count[3] = {0};
    un_inst_cache *cache = un_inst_cache_new(); /* instantiations reused, or not */
    for (int64_t i = 0; set && i < n; i += 5)
        for (int side = 0; side < 2; side++) {
            const un_rule *r = rules[i];
            un_graph *g = un_graph_clone(side ? r->dst : r->src);
            EXPECT_OK(ctx, un_graph_set_outputs(ctx, g, side ? r->dst_out : r->src_out, r->n_out));
            sketch_agrees(ctx, set, cache, g, 2, count);
            un_graph_free(g);
        }
    const char *models[] = {"mlp", "xdl", "transformer", "candle_uno"};
    for (int i = 0; set && i < 4; i++) {
        un_model md = {0};
        EXPECT_OK(ctx, un_zoo_build(ctx, spec, models[i], true, 0, &md));
        sketch_agrees(ctx, set, cache, md.graph, 2, count);
        un_model_deinit(&md);
    }
    /* 6,218 rewrites when written, every sketch exact */
    EXPECT_TRUE(count[0] > 5000);
    EXPECT_TRUE(count[1] * 10 > count[0] * 9);
    EXPECT_TRUE(count[2] > count[0] / 2); /* the broken matches */
    un_inst_cache_free(cache);
    printf("sketch_key: %lld rewrites, %lld sketched exactly, %lld failing\n", (long long)count[0],
           (long long)count[1], (long long)count[2]);
    un_ruleset_free(set);
    free_rules(rules, n);
    un_ctx_free(ctx);
}

static void test_cli(void) {
    if (!par_db())
        return;
    const cli_result *r = cli_run("unity-closure", cli_fmt("%s/par.db -o %s/parp.db --threads 2"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "closure (depth 2)") != NULL);
    long long dropped = -1, kept = -1;
    const char *c = strstr(r->out, "closure (depth 2)");
    if (c)
        sscanf(c, "closure (depth 2) %lld dropped", &dropped);
    const char *k = c ? strstr(c, "), ") : NULL;
    if (k)
        sscanf(k, "), %lld kept", &kept);
    EXPECT_TRUE(dropped > 0);
    EXPECT_TRUE(kept > 0);
    /* the pruned database holds the kept rules, still verified, and the run's counts */
    r = cli_run("unity-rules", cli_fmt("stats %s/parp.db"));
    EXPECT_EQ(r->code, 0);
    r = cli_run("unity-closure", cli_fmt("--reach %s/par.db %s/parp.db --model mlp --model xdl"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "reach kept: 0 graphs missing") != NULL);
    /* --verified-basis: on candidates nothing derives, so nothing is dropped */
    r = cli_run("unity-gen", cli_fmt("--ops specs/ --max-ops 2 --threads 1 -o %s/n2.db"));
    EXPECT_EQ(r->code, 0);
    r = cli_run("unity-closure", cli_fmt("%s/n2.db -o %s/n2p.db"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "closure (depth 2)   0 dropped") == NULL); /* 3 when written */
    r = cli_run("unity-closure", cli_fmt("%s/n2.db -o %s/n2v.db --verified-basis"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "closure (depth 2)   0 dropped") != NULL);
    /* the staged pipeline (unity-verify --max-ops K, then --verified-basis --basis-ops K): a
     * verified basis rule derives in its proven general form. The matmul menu's ew_add
     * commutativity over [4,4] weights, proven for any size, drops the one over [2,4] inputs;
     * as a candidate it matches [4,4] tensors only and drops nothing. */
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s/unity-gen --ops specs/ --menu specs/menus/matmul.json --threads 1 -o %s/mm.db "
             ">/dev/null && cp %s/mm.db %s/mms.db && %s/unity-verify %s/mms.db --max-ops 1",
             cli_bin, cli_tmp, cli_tmp, cli_tmp, cli_bin, cli_tmp);
    r = cli_run_shell(cmd);
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "2 rules: 2 verified (2 for any input size") != NULL);
    r = cli_run("unity-closure", cli_fmt("%s/mms.db -o %s/mmv.db --verified-basis --basis-ops 1"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "closure (depth 2)   1 dropped (by 1 / 2 / 3 / 4 rewrites: 1 /") !=
                NULL);
    r = cli_run("unity-rules", cli_fmt("list %s/mmv.db --size 2"));
    EXPECT_TRUE(strstr(r->out, "ew_add(w1, w0) => ew_add(w0, w1)") != NULL);
    EXPECT_TRUE(strstr(r->out, "ew_add(x1, x0) => ew_add(x0, x1)") == NULL);
    r = cli_run("unity-closure", cli_fmt("%s/mm.db -o %s/mmc.db --basis-ops 1"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "closure (depth 2)   0 dropped") != NULL);
    /* bad input: one line, non-zero exit */
    cli_expect_error_code("unity-closure", cli_fmt("%s/nope.db -o %s/x.db"), 1, "nope.db");
    cli_write_file("junk.db", "not a database\n");
    cli_expect_error_code("unity-closure", cli_fmt("%s/junk.db -o %s/x.db"), 1, "junk.db");
    cli_expect_error_code("unity-closure", cli_fmt("%s/par.db -o %s/par.db"), 2, "another");
    cli_expect_error_code("unity-closure", cli_fmt("%s/par.db"), 2, "-o OUT.db");
    cli_expect_error_code("unity-closure", cli_fmt("%s/par.db -o %s/x.db --depth 9"), 2, "--depth");
    cli_expect_error_code("unity-closure", cli_fmt("%s/par.db -o %s/x.db --frob"), 2, "--frob");
    cli_expect_error_code("unity-closure", cli_fmt("--reach %s/par.db"), 2, "two rule databases");
    cli_expect_error_code("unity-closure", cli_fmt("--reach %s/par.db %s/par.db --basis-ops 2"), 2,
                          "--basis-ops");
    cli_expect_error_code("unity-closure", cli_fmt("--reach %s/par.db %s/par.db --verified-basis"),
                          2, "--verified-basis");
    cli_expect_error_code("unity-closure", cli_fmt("%s/par.db -o %s/x.db --basis-ops 0"), 2,
                          "--basis-ops");
    cli_expect_error_code("unity-closure", cli_fmt("--reach %s/par.db %s/par.db --model nope"), 1,
                          "nope");
    r = cli_run("unity-gen",
                cli_fmt("--ops specs/ --menu specs/menus/ew_add.json --threads 1 -o %s/cand.db"));
    EXPECT_EQ(r->code, 0);
    cli_expect_error_code("unity-closure", cli_fmt("--reach %s/cand.db %s/par.db"), 1,
                          "no verified rules");
}

/* A side of a sum of three inputs over shape [2, 2]: node p0 = x[a] + x[b], output p1 = x[c] + p0
 * (outer_first) or p0 + x[c]; *buf gets the graph's JSON. */
static void sum3_side(un_buf *buf, char p, int a, int b, int c, bool outer_first) {
    un_buf_printf(buf, "{\"nodes\": [");
    for (int i = 0; i < 3; i++)
        un_buf_printf(
            buf, "{\"name\": \"x%d\", \"op\": \"input\", \"params\": {\"shape\": [2, 2]}}, ", i);
    un_buf_printf(buf, "{\"name\": \"%c0\", \"op\": \"ew_add\", \"in\": [\"x%d\", \"x%d\"]}, ", p,
                  a, b);
    if (outer_first)
        un_buf_printf(buf, "{\"name\": \"%c1\", \"op\": \"ew_add\", \"in\": [\"x%d\", \"%c0\"]}", p,
                      c, p);
    else
        un_buf_printf(buf, "{\"name\": \"%c1\", \"op\": \"ew_add\", \"in\": [\"%c0\", \"x%d\"]}", p,
                      p, c);
    un_buf_printf(buf, "], \"outputs\": [\"%c1\"]}", p);
}

/* The rule x2 + (x0 + x1) => the sum with inner (a, b), outer c (first or not). */
static un_rule *sum3_rule(un_ctx *ctx, int a, int b, int c, bool outer_first) {
    un_buf doc = {0};
    un_buf_printf(&doc, "{\"src\": ");
    sum3_side(&doc, 's', 0, 1, 2, true);
    un_buf_printf(&doc, ", \"dst\": ");
    sum3_side(&doc, 't', a, b, c, outer_first);
    un_buf_printf(&doc, "}");
    un_rule *r = NULL;
    EXPECT_OK(ctx, un_rule_from_json(ctx, spec, "sum3", doc.data, doc.len, &r));
    un_buf_deinit(&doc);
    return r;
}

/* Depth 3: with commutativity and one associativity as the basis, x2 + (x0 + x1) => x0 + (x1 + x2)
 * needs three rewrites (regroup, then swap twice): kept at depth 2, dropped at 3, the same
 * through un_closure_new and un_closure_check (the staged N=4 path) on 1 or 2 threads. */
static void test_depth3(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *comm = "{\"src\": {\"nodes\": [{\"name\": \"x0\", \"op\": \"input\", \"params\": "
                       "{\"shape\": [2, 2]}}, {\"name\": \"x1\", \"op\": \"input\", \"params\": "
                       "{\"shape\": [2, 2]}}, {\"name\": \"s0\", \"op\": \"ew_add\", \"in\": "
                       "[\"x1\", \"x0\"]}], \"outputs\": [\"s0\"]}, \"dst\": {\"nodes\": "
                       "[{\"name\": \"x0\", \"op\": \"input\", \"params\": {\"shape\": [2, 2]}}, "
                       "{\"name\": \"x1\", \"op\": \"input\", \"params\": {\"shape\": [2, 2]}}, "
                       "{\"name\": \"t0\", \"op\": \"ew_add\", \"in\": [\"x0\", \"x1\"]}], "
                       "\"outputs\": [\"t0\"]}}";
    un_rule *r[4] = {0};
    EXPECT_OK(ctx, un_rule_from_json(ctx, spec, "comm", comm, strlen(comm), &r[0]));
    r[1] = sum3_rule(ctx, 0, 2, 1, false); /* x2 + (x0 + x1) => (x0 + x2) + x1 */
    r[2] = sum3_rule(ctx, 1, 2, 0, true);  /* => x0 + (x1 + x2): three rewrites */
    r[3] = sum3_rule(ctx, 0, 1, 2, false); /* => (x0 + x1) + x2: one */
    if (!r[0] || !r[1] || !r[2] || !r[3]) {
        for (int i = 0; i < 4; i++)
            un_rule_free(r[i]);
        un_ctx_free(ctx);
        return;
    }
    un_closure_params p = un_closure_params_default();
    un_closure_stats s;
    bool drop[4] = {0};
    EXPECT_OK(ctx, un_closure_prune(ctx, spec, r, 4, &p, drop, &s));
    EXPECT_TRUE(!drop[0] && !drop[1] && !drop[2] && drop[3]);
    p.depth = 3;
    memset(drop, 0, sizeof drop);
    EXPECT_OK(ctx, un_closure_prune(ctx, spec, r, 4, &p, drop, &s));
    EXPECT_TRUE(!drop[0] && !drop[1] && drop[2] && drop[3]);
    EXPECT_EQ(s.by_depth[3], 1);
    EXPECT_EQ(s.by_depth[1], 1);
    /* staged: the basis decided in order, the others checked against it */
    for (int threads = 1; threads <= 2; threads++) {
        p.threads = threads;
        p.basis_ops = 2;
        un_closure *c = NULL;
        bool bdrop[2] = {0}, cdrop[2] = {0};
        EXPECT_OK(ctx, un_closure_new(ctx, spec, r, 2, &p, bdrop, NULL, &c));
        if (c)
            EXPECT_OK(ctx, un_closure_check(ctx, c, r + 2, 2, cdrop, &s));
        EXPECT_TRUE(cdrop[0] && cdrop[1]);
        EXPECT_EQ(s.by_depth[3], 1);
        un_closure_free(c);
    }
    for (int i = 0; i < 4; i++)
        un_rule_free(r[i]);
    un_ctx_free(ctx);
}

int main(void) {
    if (!cli_init("/tmp/unity-closure-XXXXXX"))
        return 1;
    static const test_case c[] = {
        {"copies_dropped", test_copies_dropped},
        {"depth3", test_depth3},
        {"reach", test_reach},
        {"match_index", test_match_index},
        {"sketch_key", test_sketch_key},
        {"cli", test_cli},
    };
    int rc = TEST_RUN_WITH_SPEC(c, &spec);
    return cli_cleanup() ? rc : 1;
}
