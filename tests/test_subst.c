/* test_subst.c - layer 2 of the search (search/subst.h): with an unlimited budget and a large
 * alpha, the best-first search equals the exhaustive closure of rule applications (a BFS over
 * every rewrite to the fixpoint, every graph mapped by un_map_exhaustive, the minimum) on graphs
 * of up to 6 operators and 1, 2 and 4 devices, at two memory prices; every graph of the closure
 * is costed exactly once (the memo); a rewrite the cost model prefers (fusing relu into the
 * linear before it) is chosen, by layer 2 and by the joint search; the search always ends and
 * says why (budget 1, a tiny time limit, no rules); bad alpha is refused; layer 3's memo across
 * calls changes no plan and answers the pieces a rewrite leaves as they were. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "pcg/eval.h"
#include "runtime/zoo.h"
#include "search/search.h"
#include "search/subst.h"
#include "tests/test.h"

static un_spec *S;

static un_cost_model *model_for(un_ctx *ctx, const char *machine) {
    un_machine m;
    un_cost_model *cm = NULL;
    EXPECT_OK(ctx, un_machine_load(ctx, machine, &m));
    EXPECT_OK(ctx, un_cost_model_new(ctx, S, &m, UN_MPREC_F32, NULL, &cm));
    return cm;
}

static int32_t add_in(un_graph *g, const char *name, un_op op, int64_t a, int64_t b) {
    int32_t id = -1;
    EXPECT_OK(NULL, un_graph_add_input(NULL, g, name, op, 2, (int64_t[]){a, b}, &id));
    return id;
}

static int32_t add_op(un_graph *g, un_op op, bool relu, int32_t a, int32_t b, const char *name) {
    un_param p[UN_MAX_PARAMS];
    const un_op_spec *os = un_spec_op(S, op);
    un_spec_param_defaults(os, p);
    if (relu)
        p[un_spec_param_index(os, "activation")].v[0] = 1;
    int32_t id = -1;
    un_ref in[2] = {{a, 0}, {b, 0}};
    EXPECT_OK(NULL, un_graph_add(NULL, g, op, p, in, b < 0 ? 1 : 2, name, &id));
    return id;
}

/* The rules: linear[relu](x0, x1) => relu(linear(x0, x1)) (and, loaded reversed, the fusion),
 * ew_add and ew_mul commute. Rank-2 inputs, proven for every shape. */
static un_ruleset *hand_rules(un_ctx *ctx) {
    un_rule *r[3] = {0};
    un_op ops[3] = {UN_OP_LINEAR, UN_OP_EW_ADD, UN_OP_EW_MUL};
    for (int k = 0; k < 3; k++) {
        un_graph *s = un_graph_new(S), *d = un_graph_new(S);
        int32_t a = add_in(s, "x0", UN_OP_INPUT, 4, 4), b = add_in(s, "x1", UN_OP_INPUT, 4, 4);
        int32_t c = add_in(d, "x0", UN_OP_INPUT, 4, 4), e = add_in(d, "x1", UN_OP_INPUT, 4, 4);
        int32_t so, to;
        if (k == 0) {
            so = add_op(s, UN_OP_LINEAR, true, a, b, NULL);
            to = add_op(d, UN_OP_RELU, false, add_op(d, UN_OP_LINEAR, false, c, e, NULL), -1, NULL);
        } else {
            so = add_op(s, ops[k], false, a, b, NULL);
            to = add_op(d, ops[k], false, e, c, NULL);
        }
        EXPECT_OK(ctx, un_rule_make(ctx, s, d, (un_ref[]){{so, 0}}, (un_ref[]){{to, 0}}, 1, &r[k]));
        if (r[k])
            r[k]->any_shape = true;
        un_graph_free(s);
        un_graph_free(d);
    }
    un_ruleset *set = NULL;
    un_ruleset_params p = un_ruleset_params_default();
    p.reversed = true;
    p.cache = false;
    if (r[0] && r[1] && r[2])
        EXPECT_OK(ctx, un_ruleset_from_rules(ctx, S, r, (int32_t[]){11, 12, 13}, 3, &p, &set));
    for (int k = 0; k < 3; k++)
        un_rule_free(r[k]);
    return set;
}

/* Small graphs, at most 6 operators in any rewritten form. */
static un_graph *small_graph(int which, int64_t batch, int64_t width) {
    un_graph *g = un_graph_new(S);
    int32_t x = add_in(g, "x", UN_OP_INPUT, batch, width);
    int32_t w1 = add_in(g, "w1", UN_OP_WEIGHT, width, width);
    int32_t w2 = add_in(g, "w2", UN_OP_WEIGHT, width, width);
    if (which == 0) { /* 3 operators, 4 unfused */
        int32_t h = add_op(g, UN_OP_LINEAR, true, x, w1, "h");
        int32_t y = add_op(g, UN_OP_LINEAR, false, h, w2, "y");
        add_op(g, UN_OP_EW_ADD, false, y, x, "out");
    } else if (which == 1) { /* 5 operators, 6 unfused, 4 fused */
        int32_t w3 = add_in(g, "w3", UN_OP_WEIGHT, width, 8);
        int32_t a =
            add_op(g, UN_OP_RELU, false, add_op(g, UN_OP_LINEAR, false, x, w1, "a"), -1, "ra");
        int32_t b = add_op(g, UN_OP_LINEAR, true, x, w2, "b");
        int32_t m = add_op(g, UN_OP_EW_MUL, false, a, b, "m");
        add_op(g, UN_OP_LINEAR, false, m, w3, "head");
    } else { /* 4 operators, 3 fused */
        int32_t a = add_op(g, UN_OP_LINEAR, false, x, w1, "a");
        int32_t r = add_op(g, UN_OP_RELU, false, a, -1, "r");
        int32_t s = add_op(g, UN_OP_EW_ADD, false, r, x, "s");
        add_op(g, UN_OP_LINEAR, true, s, w2, "out");
    }
    return g;
}

/* The exhaustive closure: every graph reachable by rewrites (BFS to the fixpoint, duplicates by
 * canonical hash); returns how many, with the least un_map_exhaustive cost over them. */
static int64_t closure(un_ctx *ctx, const un_ruleset *set, un_cost_model *cm, const un_graph *g,
                       int devices, double lambda, double *best) {
    int64_t n = 1, cap = 4096;
    un_graph **all = calloc((size_t)cap, sizeof *all);
    uint64_t *hash = calloc((size_t)cap, sizeof *hash);
    all[0] = un_graph_clone(g);
    hash[0] = un_graph_hash(g);
    *best = INFINITY;
    for (int64_t i = 0; i < n; i++) {
        un_map_params mp = un_map_params_default(devices);
        un_map *m = NULL;
        EXPECT_OK(ctx, un_map_new(ctx, cm, all[i], &mp, &m));
        int32_t *a = calloc((size_t)un_graph_node_count(all[i]) + 1, sizeof *a);
        double c = INFINITY;
        if (m)
            EXPECT_OK(ctx, un_map_exhaustive(ctx, m, lambda, a, &c));
        if (c < *best)
            *best = c;
        free(a);
        un_map_free(m);
        un_matcher *mt = NULL;
        un_match_list ms = {0};
        EXPECT_OK(ctx, un_matcher_new(ctx, set, all[i], &mt));
        EXPECT_OK(ctx, un_match_all(ctx, mt, &ms));
        for (int64_t k = 0; k < ms.n; k++) {
            un_graph *child = NULL;
            EXPECT_OK(ctx, un_apply(ctx, set, all[i], &ms.v[k], &child, NULL));
            if (!child)
                continue;
            uint64_t h = un_graph_hash(child);
            bool seen = false;
            for (int64_t j = 0; j < n && !seen; j++)
                seen = hash[j] == h;
            if (seen || n == cap) {
                EXPECT_TRUE(seen); /* the closure must stay small */
                un_graph_free(child);
                continue;
            }
            all[n] = child;
            hash[n++] = h;
        }
        un_match_list_deinit(&ms);
        un_matcher_free(mt);
    }
    for (int64_t i = 0; i < n; i++)
        un_graph_free(all[i]);
    free(all);
    free(hash);
    return n;
}

static void test_optimal(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_cost_model *cm = model_for(ctx, "specs/machines/v100x4.json");
    un_ruleset *set = hand_rules(ctx);
    if (!set || !cm) {
        un_ruleset_free(set);
        un_cost_model_free(cm);
        un_ctx_free(ctx);
        return;
    }
    int64_t sizes[][2] = {{64, 32}, {8, 1024}, {4096, 256}};
    int checked = 0, improved = 0;
    for (int which = 0; which < 3; which++)
        for (int si = 0; si < 3; si++)
            for (int devices = 1; devices <= 4; devices *= 2)
                for (int li = 0; li < 2; li++) {
                    double lambda = li ? 1e-9 : 0;
                    un_graph *g = small_graph(which, sizes[si][0], sizes[si][1]);
                    double want;
                    int64_t n = closure(ctx, set, cm, g, devices, lambda, &want);
                    un_subst_params p = un_subst_params_default(devices);
                    p.lambda = lambda;
                    p.alpha = 1e9;
                    p.budget = INT64_MAX;
                    p.max_queue = INT64_MAX;
                    un_subst_result r;
                    EXPECT_OK(ctx, un_subst_search(ctx, set, cm, g, &p, &r));
                    test__check(fabs(r.best_cost - want) <= 1e-9 * want, TEST__AT,
                                "graph %d size %d devices %d lambda %g: layer 2 %.9g vs "
                                "closure %.9g (%lld graphs)",
                                which, si, devices, lambda, r.best_cost, want, (long long)n);
                    EXPECT_EQ(r.costed, n); /* every graph once: the memo */
                    EXPECT_TRUE(r.ended && strcmp(r.ended, "exhausted") == 0);
                    EXPECT_TRUE(n >= 4);
                    improved += r.best_cost < r.start_cost;
                    /* the path replays to the best graph's cost: its length is what it says */
                    EXPECT_TRUE((r.n_steps > 0) == (r.best_cost < r.start_cost));
                    checked++;
                    if (getenv("SUBST_DEBUG"))
                        printf("graph %d size %d dev %d lambda %g: closure %lld, best %.6g start "
                               "%.6g steps %d\n",
                               which, si, devices, lambda, (long long)n, r.best_cost, r.start_cost,
                               (int)r.n_steps);
                    un_subst_result_deinit(&r);
                    un_graph_free(g);
                }
    EXPECT_EQ(checked, 54);
    EXPECT_TRUE(improved > 0);
    un_ruleset_free(set);
    un_cost_model_free(cm);
    un_ctx_free(ctx);
}

/* relu(linear(x, w)) costs one more operator than linear[relu](x, w): the fusion (the first
 * rule read backwards) is chosen, by layer 2 and by the joint search, with the report saying so. */
static void test_fusion_chosen(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_cost_model *cm = model_for(ctx, "specs/machines/v100x4.json");
    un_ruleset *set = hand_rules(ctx);
    un_graph *g = un_graph_new(S);
    int32_t x = add_in(g, "x", UN_OP_INPUT, 256, 512);
    int32_t w1 = add_in(g, "w1", UN_OP_WEIGHT, 512, 512),
            w2 = add_in(g, "w2", UN_OP_WEIGHT, 512, 8);
    int32_t r = add_op(g, UN_OP_RELU, false, add_op(g, UN_OP_LINEAR, false, x, w1, "h"), -1, "r");
    add_op(g, UN_OP_LINEAR, false, r, w2, "y");
    un_subst_params p = un_subst_params_default(1);
    un_subst_result sr;
    EXPECT_OK(ctx, un_subst_search(ctx, set, cm, g, &p, &sr));
    EXPECT_EQ(sr.n_steps, 1);
    if (sr.n_steps == 1) {
        EXPECT_EQ(sr.steps[0].rule_id, 11);
        EXPECT_TRUE(sr.steps[0].reversed);
        EXPECT_EQ(un_graph_node_count(sr.best), 5); /* the relu went into the linear */
    }
    EXPECT_TRUE(sr.best_cost < sr.start_cost);
    un_subst_result_deinit(&sr);

    for (int mode = 0; mode < 2; mode++) {
        un_search_params sp = un_search_params_default(2);
        sp.mode = mode ? UN_SEARCH_TASO : UN_SEARCH_JOINT;
        sp.rules = set;
        un_search_result res;
        EXPECT_OK(ctx, un_search_run(ctx, cm, g, &sp, &res));
        EXPECT_TRUE(res.rewrites && res.graph != NULL);
        EXPECT_TRUE(res.subst.n_steps == 1);
        if (mode == 0)
            test__check(res.sim.step < res.unrewritten_step, TEST__AT,
                        "joint: %g s with the fusion, %g s without", res.sim.step,
                        res.unrewritten_step);
        un_buf text = {0};
        un_search_report(&res, g, &sp, cm, &text);
        EXPECT_TRUE(text.data && strstr(text.data, "rewrites applied: 1") != NULL);
        EXPECT_TRUE(text.data && strstr(text.data, "rule 11 (reversed): relu(linear(") != NULL);
        EXPECT_TRUE(text.data && strstr(text.data, "of the rewritten graph") != NULL);
        un_buf_deinit(&text);
        un_search_result_deinit(&res);
    }
    /* without rules: rewrites off, and it says why */
    un_search_params sp = un_search_params_default(2);
    un_search_result res;
    EXPECT_OK(ctx, un_search_run(ctx, cm, g, &sp, &res));
    EXPECT_TRUE(!res.rewrites && res.graph == NULL);
    un_buf text = {0};
    un_search_report(&res, g, &sp, cm, &text);
    EXPECT_TRUE(text.data && strstr(text.data, "rewrites off: no rules") != NULL);
    un_buf_deinit(&text);
    un_search_result_deinit(&res);
    un_graph_free(g);
    un_ruleset_free(set);
    un_cost_model_free(cm);
    un_ctx_free(ctx);
}

/* Every run ends and says why; bad alpha is refused. */
static void test_ends(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_cost_model *cm = model_for(ctx, "specs/machines/v100x4.json");
    un_ruleset *set = hand_rules(ctx);
    un_graph *g = small_graph(1, 64, 32);
    un_subst_params p = un_subst_params_default(4);
    un_subst_result r;
    p.budget = 1;
    EXPECT_OK(ctx, un_subst_search(ctx, set, cm, g, &p, &r));
    EXPECT_TRUE(r.ended && strcmp(r.ended, "budget") == 0);
    EXPECT_EQ(r.costed, 1);
    EXPECT_EQ(r.n_steps, 0);
    un_subst_result_deinit(&r);
    p.budget = 0;
    p.time_limit = 1e-9;
    EXPECT_OK(ctx, un_subst_search(ctx, set, cm, g, &p, &r));
    EXPECT_TRUE(r.ended && strcmp(r.ended, "time") == 0);
    un_subst_result_deinit(&r);
    p.time_limit = 0;
    EXPECT_OK(ctx, un_subst_search(ctx, NULL, cm, g, &p, &r));
    EXPECT_TRUE(r.ended && strcmp(r.ended, "exhausted") == 0 && r.best && r.n_steps == 0);
    EXPECT_EQ(un_graph_hash(r.best), un_graph_hash(g));
    un_subst_result_deinit(&r);
    double bad[] = {0.5, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        p.alpha = bad[i];
        EXPECT_EQ(un_subst_search(ctx, set, cm, g, &p, &r), UN_ERR_INVALID);
        EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "alpha") != NULL);
        EXPECT_TRUE(r.best == NULL);
        un_ctx_clear(ctx);
    }
    /* the whole search under a tiny time limit ends too, and says so */
    un_search_params sp = un_search_params_default(4);
    sp.rules = set;
    sp.time_limit = 1e-6;
    un_search_result res;
    un_status st = un_search_run(ctx, cm, g, &sp, &res);
    EXPECT_TRUE(st == UN_OK || strstr(un_ctx_errmsg(ctx), "time") != NULL);
    if (st == UN_OK) {
        EXPECT_TRUE(strcmp(res.ended, "time") == 0 || strcmp(res.subst.ended, "time") == 0);
        un_search_result_deinit(&res);
    }
    un_ctx_clear(ctx);
    /* parallel-op rules are not layer 2's */
    un_graph *s = un_graph_new(S), *d = un_graph_new(S);
    int32_t a = add_in(s, "x0", UN_OP_INPUT, 4, 4), b = add_in(d, "x0", UN_OP_INPUT, 4, 4), c;
    int32_t so = add_op(s, UN_OP_RELU, false, a, -1, NULL);
    EXPECT_OK(ctx, un_graph_add_parallel(ctx, d, UN_OP_PARTITION, (un_ref){b, 0}, 0, 2, NULL, &c));
    int32_t to = add_op(d, UN_OP_RELU, false, c, -1, NULL);
    EXPECT_OK(ctx, un_graph_add_parallel(ctx, d, UN_OP_COMBINE, (un_ref){to, 0}, 0, 2, NULL, &to));
    un_rule *pr = NULL;
    EXPECT_OK(ctx, un_rule_make(ctx, s, d, (un_ref[]){{so, 0}}, (un_ref[]){{to, 0}}, 1, &pr));
    if (pr) {
        EXPECT_TRUE(!un_subst_rule_algebraic(pr));
        EXPECT_TRUE(un_subst_rule_algebraic(un_ruleset_rule(set, 0)));
    }
    un_rule_free(pr);
    un_graph_free(s);
    un_graph_free(d);
    un_graph_free(g);
    un_ruleset_free(set);
    un_cost_model_free(cm);
    un_ctx_free(ctx);
}

/* A chain of `units` units [linear(., w_i), relu, ew_add(., x)]: every ew_add is a cut node, so
 * layer 1 with K = 3 ends its pieces exactly there. */
static un_graph *chain_graph(int units, int64_t batch, int64_t width) {
    un_graph *g = un_graph_new(S);
    int32_t x = add_in(g, "x", UN_OP_INPUT, batch, width), h = x;
    char name[32];
    for (int u = 0; u < units; u++) {
        snprintf(name, sizeof name, "w%d", u);
        int32_t w = add_in(g, name, UN_OP_WEIGHT, width, width);
        snprintf(name, sizeof name, "l%d", u);
        int32_t a = add_op(g, UN_OP_LINEAR, false, h, w, name);
        snprintf(name, sizeof name, "r%d", u);
        int32_t r = add_op(g, UN_OP_RELU, false, a, -1, name);
        snprintf(name, sizeof name, "s%d", u);
        h = add_op(g, UN_OP_EW_ADD, false, r, x, name);
    }
    return g;
}

/* Layer 2 per layer-1 piece against layer 2 on the whole graph, both exhaustive (unlimited
 * budget, alpha 1e9): never cheaper than the whole graph's (it searches a subset: rewrites
 * touching a piece's entry or exit are not tried), equal when the pieces end at nodes no rewrite
 * that pays touches (K = 3 and 6 on a chain of 12 operators: every boundary is an ew_add), with
 * equal pieces searched once; the stitched graph computes what the model does (reference evaluator,
 * f64 1e-9) and layer 3 costs it at what the search says. */
static void test_pieces(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_cost_model *cm = model_for(ctx, "specs/machines/v100x4.json");
    un_ruleset *set = hand_rules(ctx);
    int64_t sizes[][2] = {{128, 128}};
    int ks[] = {1, 3, 6, 12};
    int equal = 0, rewritten = 0, memo = 0, cases = 0;
    for (int si = 0; si < 1 && set && cm; si++)
        for (int devices = 1; devices <= 4; devices *= 2)
            for (int li = 0; li < 2; li++) {
                un_graph *g = chain_graph(4, sizes[si][0], sizes[si][1]);
                un_subst_params p = un_subst_params_default(devices);
                p.lambda = li ? 1e-9 : 0;
                p.alpha = 1e9;
                p.budget = INT64_MAX;
                p.max_queue = INT64_MAX;
                un_subst_result w;
                EXPECT_OK(ctx, un_subst_search(ctx, set, cm, g, &p, &w));
                for (int ki = 0; ki < 4; ki++) {
                    un_subst_result r;
                    double tt = un_search_clock();
                    EXPECT_OK(ctx, un_subst_search_pieces(ctx, set, cm, g, &p, ks[ki], &r));
                    if (getenv("SUBST_DEBUG"))
                        printf("K %d: %.3f s, costed %lld (whole %.3f s, %lld)\n", ks[ki],
                               un_search_clock() - tt, (long long)r.costed, w.wall,
                               (long long)w.costed);
                    if (!r.best)
                        continue;
                    cases++;
                    EXPECT_TRUE(r.ended && strcmp(r.ended, "exhausted") == 0);
                    EXPECT_TRUE(fabs(r.start_cost - w.start_cost) <= 1e-9 * w.start_cost);
                    test__check(r.best_cost >= w.best_cost * (1 - 1e-9), TEST__AT,
                                "K %d: pieces %.9g below the whole graph's %.9g", ks[ki],
                                r.best_cost, w.best_cost);
                    if (ks[ki] == 3 || ks[ki] == 6) {
                        EXPECT_TRUE(r.pieces == (ks[ki] == 3 ? 4 : 2));
                        test__check(fabs(r.best_cost - w.best_cost) <= 1e-9 * w.best_cost, TEST__AT,
                                    "K %d size %d devices %d lambda %g: pieces %.9g, "
                                    "whole %.9g",
                                    ks[ki], si, devices, p.lambda, r.best_cost, w.best_cost);
                        equal++;
                    }
                    if (ks[ki] == 3) {
                        EXPECT_EQ(r.piece_classes, 3); /* first, 2 middle ones alike, last */
                        memo += r.piece_classes < r.pieces;
                    }
                    if (ks[ki] == 12)
                        EXPECT_EQ(r.pieces, 0); /* one piece: the whole graph's search */
                    if (r.n_steps > 0) {
                        rewritten++;
                        EXPECT_TRUE(r.best_cost < r.start_cost);
                        double err;
                        EXPECT_OK(ctx, un_eval_compare(ctx, g, r.best, UN_DOM_F64, 7, 1e-9, &err));
                        un_map *m = NULL;
                        EXPECT_OK(ctx, un_map_new(ctx, cm, r.best, &p.map, &m));
                        int32_t *a = calloc((size_t)un_graph_node_count(r.best) + 1, sizeof *a);
                        un_map_stats ms;
                        if (m)
                            EXPECT_OK(ctx, un_map_solve(ctx, m, p.lambda, a, &ms));
                        EXPECT_TRUE(m && fabs(ms.cost - r.best_cost) <= 1e-12 * r.best_cost);
                        free(a);
                        un_map_free(m);
                    } else {
                        EXPECT_EQ(un_graph_hash(r.best), un_graph_hash(g));
                    }
                    un_subst_result_deinit(&r);
                }
                un_subst_result_deinit(&w);
                un_graph_free(g);
            }
    EXPECT_EQ(cases, 3 * 2 * 4);
    EXPECT_EQ(equal, 3 * 2 * 2);
    EXPECT_TRUE(rewritten > 0);
    EXPECT_TRUE(memo > 0);
    un_ruleset_free(set);
    un_cost_model_free(cm);
    un_ctx_free(ctx);
}

/* One joint search (split size k, max_states states) with or without layer 3's memo. */
static un_status memo_run(un_ctx *ctx, un_cost_model *cm, const un_ruleset *set, const un_graph *g,
                          int devices, int k, int64_t max_states, bool no_memo,
                          un_search_result *r) {
    un_search_params sp = un_search_params_default(devices);
    sp.rules = set;
    sp.split_size = k;
    sp.max_states = max_states;
    sp.no_memo = no_memo;
    return un_search_run(ctx, cm, g, &sp, r);
}

/* Layer 3's memo across calls (mapping.h un_map_memo): the joint search with the memo gives the
 * plan (JSON), the rewritten graph, the estimate and layer 3's counters of the search without it,
 * bit for bit, on a chain whose pieces layer 2 rewrites, the small graphs and tiny zoo models, on
 * 2 and 4 devices, with a wide and a narrow beam (a beam that drops states: runs kept for one
 * beam serve only it); and on the chain, where the rewritten graph keeps pieces as they were and
 * layer 2's pieces are layer 1's, the memo answers runs solved on another graph's map, and (at
 * split size 6, two units a piece) a candidate that fuses only the second unit starts from the
 * kept frontier after the first. */
static void test_memo(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_cost_model *cm = model_for(ctx, "specs/machines/v100x4.json");
    un_ruleset *set = hand_rules(ctx);
    const char *zoo[] = {"mlp", "transformer", "charlm"};
    int cases = 0;
    int64_t chain_across = 0, chain_prefix = 0, hits = 0;
    for (int gi = 0; gi < 7 && set && cm; gi++) {
        un_graph *g = NULL;
        un_model md;
        memset(&md, 0, sizeof md);
        if (gi == 0) {
            g = chain_graph(4, 128, 128);
        } else if (gi < 4) {
            g = small_graph(gi - 1, 64, 32);
        } else {
            EXPECT_OK(ctx, un_zoo_build(ctx, S, zoo[gi - 4], true, 0, &md));
            g = md.graph;
            md.graph = NULL;
        }
        for (int devices = 2; devices <= 4 && g; devices *= 2)
            for (int beam = 0; beam < 2; beam++) {
                un_search_result r[2];
                un_status st[2];
                for (int off = 0; off < 2; off++)
                    st[off] = memo_run(ctx, cm, set, g, devices, gi == 0 && beam ? 6 : 3,
                                       beam ? 8 : 0, off, &r[off]);
                test__check(st[0] == st[1], TEST__AT, "graph %d on %d: status %d with, %d without",
                            gi, devices, (int)st[0], (int)st[1]);
                if (st[0] == UN_OK && st[1] == UN_OK) {
                    cases++;
                    un_buf j[2] = {{0}, {0}};
                    for (int off = 0; off < 2; off++)
                        EXPECT_OK(ctx, un_graph_to_json(ctx, r[off].plan, &j[off]));
                    test__check(j[0].len == j[1].len && memcmp(j[0].data, j[1].data, j[0].len) == 0,
                                TEST__AT, "graph %d on %d devices, beam %d: plans differ", gi,
                                devices, beam);
                    EXPECT_TRUE(memcmp(&r[0].sim.step, &r[1].sim.step, sizeof(double)) == 0);
                    EXPECT_TRUE(memcmp(&r[0].sim.mem[r[0].sim.worst], &r[1].sim.mem[r[1].sim.worst],
                                       sizeof(double)) == 0);
                    EXPECT_TRUE((r[0].graph == NULL) == (r[1].graph == NULL));
                    if (r[0].graph && r[1].graph)
                        EXPECT_EQ(un_graph_hash(r[0].graph), un_graph_hash(r[1].graph));
                    EXPECT_EQ(r[0].subst.n_steps, r[1].subst.n_steps);
                    EXPECT_EQ(r[0].stats.states, r[1].stats.states);
                    EXPECT_EQ(r[0].stats.max_frontier, r[1].stats.max_frontier);
                    EXPECT_TRUE(r[0].stats.beam == r[1].stats.beam);
                    EXPECT_EQ(r[0].split.piece_solves, r[1].split.piece_solves);
                    EXPECT_TRUE(strcmp(r[0].picked, r[1].picked) == 0);
                    EXPECT_EQ(r[1].memo.solves, 0); /* off: never asked */
                    EXPECT_TRUE(r[0].memo.hits <= r[0].memo.solves);
                    EXPECT_TRUE(r[0].memo.hits_across <= r[0].memo.hits);
                    if (getenv("SUBST_DEBUG"))
                        printf("graph %d on %d, beam %d: %lld solves, %lld hits, %lld across, %lld "
                               "prefix; nodes %lld, %lld saved; %d rewrites\n",
                               gi, devices, beam, (long long)r[0].memo.solves,
                               (long long)r[0].memo.hits, (long long)r[0].memo.hits_across,
                               (long long)r[0].memo.prefix_hits, (long long)r[0].memo.nodes,
                               (long long)r[0].memo.nodes_saved, (int)r[0].subst.n_steps);
                    hits += r[0].memo.hits;
                    if (gi == 0) {
                        EXPECT_TRUE(r[0].subst.n_steps > 0); /* layer 2 rewrote the chain */
                        chain_across += r[0].memo.hits_across;
                        chain_prefix += r[0].memo.prefix_hits;
                    }
                    un_buf_deinit(&j[0]);
                    un_buf_deinit(&j[1]);
                }
                un_search_result_deinit(&r[0]);
                un_search_result_deinit(&r[1]);
            }
        un_graph_free(g);
        un_model_deinit(&md);
    }
    EXPECT_EQ(cases, 7 * 2 * 2);
    /* layer 1 on one map twice at one memory price: the second run is answered whole; a memo
     * bounded to nothing keeps nothing and answers nothing; the results are the memo-less ones */
    un_graph *g = chain_graph(4, 128, 128);
    int32_t n = un_graph_node_count(g);
    for (int bound = 0; bound < 2 && cm; bound++) {
        un_map_memo *mm = un_map_memo_new(cm, bound ? 1 : 0);
        un_map_params mp = un_map_params_default(4);
        un_map *m0 = NULL, *m1 = NULL;
        EXPECT_OK(ctx, un_map_new(ctx, cm, g, &mp, &m0));
        mp.memo = mm;
        EXPECT_OK(ctx, un_map_new(ctx, cm, g, &mp, &m1));
        un_split s0, s1;
        if (!m0 || !m1 || un_split_make(ctx, m0, 3, &s0) != UN_OK) {
            EXPECT_TRUE(false);
            break;
        }
        EXPECT_OK(ctx, un_split_make(ctx, m1, 3, &s1));
        int32_t *a0 = calloc((size_t)n + 1, sizeof *a0), *a1 = calloc((size_t)n + 1, sizeof *a1);
        un_split_stats t0, t1;
        EXPECT_OK(ctx, un_split_solve(ctx, m0, &s0, 1e-10, a0, &t0));
        for (int rep = 0; rep < 2; rep++) {
            EXPECT_OK(ctx, un_split_solve(ctx, m1, &s1, 1e-10, a1, &t1));
            EXPECT_TRUE(memcmp(a0, a1, (size_t)n * sizeof *a0) == 0);
            EXPECT_TRUE(memcmp(&t0.map.cost, &t1.map.cost, sizeof(double)) == 0);
            EXPECT_EQ(t0.map.states, t1.map.states);
        }
        un_map_memo_stats ms = un_map_memo_get_stats(mm);
        EXPECT_EQ(ms.solves, 2 * t1.piece_solves);
        EXPECT_EQ(ms.hits, bound ? 0 : t1.piece_solves);
        EXPECT_EQ(ms.hits_across, 0); /* one map */
        EXPECT_TRUE(bound ? ms.entries == 0 && ms.not_kept > 0 : ms.entries > 0);
        free(a0);
        free(a1);
        un_split_deinit(&s0);
        un_split_deinit(&s1);
        un_map_free(m0);
        un_map_free(m1);
        un_map_memo_free(mm);
    }
    un_graph_free(g);
    test__check(chain_across > 0, TEST__AT, "the memo answered no run across maps on the chain");
    test__check(chain_prefix > 0, TEST__AT, "no run on the chain started from a kept frontier");
    EXPECT_TRUE(hits >= chain_across);
    un_ruleset_free(set);
    un_cost_model_free(cm);
    un_ctx_free(ctx);
}

int main(void) {
    static const test_case cases[] = {
        {"optimal", test_optimal}, {"fusion_chosen", test_fusion_chosen},
        {"ends", test_ends},       {"pieces", test_pieces},
        {"memo", test_memo},
    };
    return TEST_RUN_WITH_SPEC(cases, &S);
}
