/* tests/test_dims.c - dimension variables (issue 17 item 3): the generator's two-linears merge
 * (rule 301 of the N=3 default set: linear(x0, w0), linear(x0, w1) => split[sizes=[4,4]](linear(x0,
 * concat(w0, w1)))) gets its split sizes tied to the weights' dims (un_rule_dims_generalize), the
 * verifier proves that form for every size and stores it, the matcher binds the symbols from the
 * matched tensors (Q/K-style linears of a hand-built graph at two sizes, neither the witness) and
 * the rewrite keeps the reference evaluator's outputs; random rewrite chains with such rules keep
 * every output; a planted rule whose symbolic form is false for some size is refuted; a form the
 * verifier cannot prove for every size keeps no dim variable. */
#include "tests/rewrite.h"
#include "verify/runner.h"

#include <stdlib.h>

static un_spec *spec;
static un_verifier *ver;

static un_param *params(un_op op, un_param *p) {
    un_spec_param_defaults(un_spec_op(spec, op), p);
    return p;
}

static int pidx(un_op op, const char *name) {
    return un_spec_param_index(un_spec_op(spec, op), name);
}

/* The N=3 rule 301: two linears (activation act) sharing x0 [2,4,4] over w0, w1 [4,4] => one
 * linear over concat[axis=1](w0, w1), split[axis=2, sizes=[4,4]]. */
static un_rule *merge_rule(int act) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g[2];
    un_ref outs[2][2];
    for (int s = 0; s < 2; s++) {
        g[s] = un_graph_new(spec);
        int32_t x, w0, w1, a, b, c;
        un_graph_add_input(ctx, g[s], "x0", UN_OP_INPUT, 3, (int64_t[]){2, 4, 4}, &x);
        un_graph_add_input(ctx, g[s], "w0", UN_OP_WEIGHT, 2, (int64_t[]){4, 4}, &w0);
        un_graph_add_input(ctx, g[s], "w1", UN_OP_WEIGHT, 2, (int64_t[]){4, 4}, &w1);
        un_param p[UN_MAX_PARAMS];
        params(UN_OP_LINEAR, p)[pidx(UN_OP_LINEAR, "activation")].v[0] = act;
        if (s == 0) {
            EXPECT_OK(ctx, un_graph_add(ctx, g[s], UN_OP_LINEAR, p, (un_ref[]){{x, 0}, {w0, 0}}, 2,
                                        NULL, &a));
            EXPECT_OK(ctx, un_graph_add(ctx, g[s], UN_OP_LINEAR, p, (un_ref[]){{x, 0}, {w1, 0}}, 2,
                                        NULL, &b));
            outs[s][0] = (un_ref){a, 0};
            outs[s][1] = (un_ref){b, 0};
            continue;
        }
        un_param pc[UN_MAX_PARAMS], ps[UN_MAX_PARAMS];
        params(UN_OP_CONCAT, pc)[pidx(UN_OP_CONCAT, "axis")].v[0] = 1;
        EXPECT_OK(ctx, un_graph_add(ctx, g[s], UN_OP_CONCAT, pc, (un_ref[]){{w0, 0}, {w1, 0}}, 2,
                                    NULL, &a));
        EXPECT_OK(
            ctx, un_graph_add(ctx, g[s], UN_OP_LINEAR, p, (un_ref[]){{x, 0}, {a, 0}}, 2, NULL, &b));
        params(UN_OP_SPLIT, ps);
        ps[pidx(UN_OP_SPLIT, "axis")].v[0] = 2;
        un_param *sz = &ps[pidx(UN_OP_SPLIT, "sizes")];
        sz->len = 2;
        sz->v[0] = sz->v[1] = 4;
        EXPECT_OK(ctx, un_graph_add(ctx, g[s], UN_OP_SPLIT, ps, (un_ref[]){{b, 0}}, 1, NULL, &c));
        outs[s][0] = (un_ref){c, 0};
        outs[s][1] = (un_ref){c, 1};
    }
    un_rule *r = NULL;
    EXPECT_OK(ctx, un_rule_make(ctx, g[0], g[1], outs[0], outs[1], 2, &r));
    un_graph_free(g[0]);
    un_graph_free(g[1]);
    un_ctx_free(ctx);
    return r;
}

static int dim_vars(const un_rule *r) {
    int n = 0;
    for (int a = 0; a < r->n_vars; a++)
        n += un_rule_var_is_dim(r, a);
    return n;
}

/* The proposal ties sizes[0] to dim 1 of w0 and sizes[1] to dim 1 of w1; instantiation follows the
 * symbols (from values, or from the matched input shapes); JSON keeps them; dropping removes them.
 */
static void test_propose_instantiate(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *r = merge_rule(0), *d = NULL;
    if (!r)
        goto done;
    EXPECT_EQ(dim_vars(r), 0);
    EXPECT_OK(ctx, un_rule_dims_generalize(ctx, r, &d));
    if (!d)
        goto done;
    EXPECT_EQ(d->n_vars, 2);
    EXPECT_EQ(dim_vars(d), 2);
    int32_t split = -1;
    for (int32_t v = 0; v < un_graph_node_count(d->dst); v++)
        if (un_graph_node(d->dst, v)->op == UN_OP_SPLIT)
            split = v;
    int ish = pidx(UN_OP_WEIGHT, "shape"), isz = pidx(UN_OP_SPLIT, "sizes");
    for (int i = 0; i < 2; i++) {
        int a = un_rule_var_at(d, UN_RULE_DST, split, isz, i);
        int32_t w = un_graph_find(d->src, i ? "w1" : "w0");
        EXPECT_TRUE(a >= 0);
        EXPECT_EQ(a, un_rule_var_at(d, UN_RULE_SRC, w, ish, 1));
        EXPECT_EQ(un_rule_var_at(d, UN_RULE_SRC, w, ish, 0), -1); /* the shared dim stays free */
    }
    un_buf b = {0};
    un_rule_str(d, &b);
    EXPECT_TRUE(b.data && strstr(b.data, "sizes=[n1,n2]"));
    un_buf_deinit(&b);
    /* at values: n1 = 3, n2 = 5 */
    int a0 = un_rule_var_at(d, UN_RULE_DST, split, isz, 0);
    int64_t vals[2];
    vals[a0] = 3;
    vals[1 - a0] = 5;
    un_rule *inst = NULL;
    EXPECT_OK(ctx, un_rule_instantiate(ctx, d, vals, NULL, &inst));
    if (inst) {
        const un_param *sp = &un_graph_node(inst->dst, split)->params[isz];
        EXPECT_EQ(sp->v[0], 3);
        EXPECT_EQ(sp->v[1], 5);
        EXPECT_EQ(un_graph_shape(inst->src, inst->src_out[1])->dim[2], 5);
    }
    un_rule_free(inst);
    /* at matched shapes: x0 [3,5,6], w0 [6,7], w1 [6,2]; the values passed are overridden */
    un_shape sh[3];
    for (int i = 0; i < 3; i++)
        sh[i] = *un_graph_shape(d->src, (un_ref){un_rule_input_src(d, i), 0});
    for (int i = 0; i < 3; i++) {
        const char *nm = un_graph_node(d->src, un_rule_input_src(d, i))->name;
        int64_t *dm = sh[i].dim;
        if (!strcmp(nm, "x0"))
            dm[0] = 3, dm[1] = 5, dm[2] = 6;
        else
            dm[0] = 6, dm[1] = strcmp(nm, "w0") ? 2 : 7;
    }
    EXPECT_OK(ctx, un_rule_instantiate(ctx, d, vals, sh, &inst));
    if (inst) {
        const un_param *sp = &un_graph_node(inst->dst, split)->params[isz];
        EXPECT_EQ(sp->v[0], 7);
        EXPECT_EQ(sp->v[1], 2);
        double err;
        EXPECT_OK(ctx, un_rule_check_random(ctx, inst, UN_DOM_FIELD, 5, &err));
    }
    un_rule_free(inst);
    /* the concrete rule at those shapes: the target's split [4,4] does not fit */
    EXPECT_TRUE(un_rule_instantiate(ctx, r, NULL, sh, &inst) != UN_OK);
    un_ctx_clear(ctx);
    /* JSON round trip */
    un_buf js = {0};
    EXPECT_OK(ctx, un_rule_to_json(ctx, d, &js));
    un_rule *back = NULL;
    EXPECT_OK(ctx, un_rule_from_json(ctx, spec, "dims", js.data, js.len, &back));
    if (back) {
        EXPECT_EQ(dim_vars(back), 2);
        EXPECT_EQ(un_rule_hash(back), un_rule_hash(r));
        EXPECT_EQ(un_rule_dims_drop(back), 2);
        EXPECT_EQ(back->n_vars, 0);
    }
    un_rule_free(back);
    un_buf_deinit(&js);
done:
    un_rule_free(d);
    un_rule_free(r);
    un_ctx_free(ctx);
}

/* The verifier's pipeline on r: verified for any input size, the stored form (its general form,
 * else r) with want_dims dim variables, of which made here: made. Returns the stored form. */
static un_rule *verified_general(un_ctx *ctx, const un_rule *r, int want_dims, int made) {
    un_verify_verdict vv;
    EXPECT_OK(ctx, un_runner_rule(ctx, ver, r, NULL, &vv));
    EXPECT_EQ(vv.status, UN_RULE_VERIFIED);
    EXPECT_TRUE(vv.any_shape);
    EXPECT_EQ(vv.n_dim_vars, made);
    un_rule *g = vv.general ? vv.general : un_rule_clone(r);
    vv.general = NULL;
    un_verify_verdict_deinit(&vv);
    EXPECT_EQ(dim_vars(g), want_dims);
    return g;
}

/* A Q/K-style graph: x [b, s, h], q = linear(x, wq [h, dq]), k = linear(x, wk [h, dk]), both
 * outputs (relu'd so each is consumed once inside the graph). */
static un_graph *qk_graph(int64_t b, int64_t s, int64_t h, int64_t dq, int64_t dk) {
    un_graph *g = un_graph_new(spec);
    int32_t x, wq, wk, q, k, rq, rk;
    un_graph_add_input(NULL, g, "x", UN_OP_INPUT, 3, (int64_t[]){b, s, h}, &x);
    un_graph_add_input(NULL, g, "wq", UN_OP_WEIGHT, 2, (int64_t[]){h, dq}, &wq);
    un_graph_add_input(NULL, g, "wk", UN_OP_WEIGHT, 2, (int64_t[]){h, dk}, &wk);
    un_param p[UN_MAX_PARAMS];
    params(UN_OP_LINEAR, p);
    un_graph_add(NULL, g, UN_OP_LINEAR, p, (un_ref[]){{x, 0}, {wq, 0}}, 2, "q", &q);
    un_graph_add(NULL, g, UN_OP_LINEAR, p, (un_ref[]){{x, 0}, {wk, 0}}, 2, "k", &k);
    params(UN_OP_RELU, p);
    un_graph_add(NULL, g, UN_OP_RELU, p, (un_ref[]){{q, 0}}, 1, "rq", &rq);
    un_graph_add(NULL, g, UN_OP_RELU, p, (un_ref[]){{k, 0}}, 1, "rk", &rk);
    un_graph_set_outputs(NULL, g, (un_ref[]){{rq, 0}, {rk, 0}}, 2);
    return g;
}

static void test_verify_match_two_sizes(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *r = merge_rule(0);
    un_rule *g = r ? verified_general(ctx, r, 2, 2) : NULL;
    un_ruleset *gen = NULL, *conc = NULL;
    if (!g)
        goto done;
    EXPECT_OK(ctx, un_ruleset_from_rules(ctx, spec, &g, NULL, 1, NULL, &gen));
    EXPECT_OK(ctx, un_ruleset_from_rules(ctx, spec, &r, NULL, 1, NULL, &conc));
    if (!gen || !conc)
        goto done;
    static const int64_t sizes[2][5] = {{2, 3, 8, 8, 8}, {1, 5, 6, 12, 2}};
    for (int z = 0; z < 2; z++) {
        const int64_t *S = sizes[z];
        un_graph *qk = qk_graph(S[0], S[1], S[2], S[3], S[4]);
        un_matcher *m = NULL, *mc = NULL;
        un_match_list ms = {0}, mcs = {0};
        EXPECT_OK(ctx, un_matcher_new(ctx, gen, qk, &m));
        EXPECT_OK(ctx, un_match_all(ctx, m, &ms));
        EXPECT_OK(ctx, un_matcher_new(ctx, conc, qk, &mc));
        EXPECT_OK(ctx, un_match_all(ctx, mc, &mcs));
        EXPECT_EQ(mcs.n, 0); /* the fixed-shape rule serves only its witness sizes */
        EXPECT_TRUE(ms.n >= 1);
        for (int64_t i = 0; i < ms.n; i++) {
            un_graph *next = NULL;
            int32_t *origin = NULL;
            EXPECT_OK(ctx, un_apply(ctx, gen, qk, &ms.v[i], &next, &origin));
            if (next) {
                EXPECT_TRUE(rw_same_model(ctx, qk, next, 11 + (uint64_t)i));
                int splits = 0;
                for (int32_t v = 0; v < un_graph_node_count(next); v++) {
                    const un_node *nd = un_graph_node(next, v);
                    if (nd->op != UN_OP_SPLIT)
                        continue;
                    const un_param *sp = &nd->params[pidx(UN_OP_SPLIT, "sizes")];
                    EXPECT_EQ(sp->v[0] + sp->v[1], S[3] + S[4]);
                    EXPECT_TRUE((sp->v[0] == S[3] && sp->v[1] == S[4]) ||
                                (sp->v[0] == S[4] && sp->v[1] == S[3]));
                    splits++;
                }
                EXPECT_EQ(splits, 1);
            }
            un_graph_free(next);
            free(origin);
        }
        if (ms.n) {
            un_buf b = {0};
            un_match_str(m, &ms.v[0], &b);
            printf(
                "    x [%lld,%lld,%lld], wq [.,%lld], wk [.,%lld]: %lld matches (fixed-shape rule "
                "0), %s\n",
                (long long)S[0], (long long)S[1], (long long)S[2], (long long)S[3], (long long)S[4],
                (long long)ms.n, b.data ? b.data : "");
            un_buf_deinit(&b);
        }
        un_match_list_deinit(&ms);
        un_match_list_deinit(&mcs);
        un_matcher_free(m);
        un_matcher_free(mc);
        un_graph_free(qk);
    }
done:
    un_ruleset_free(gen);
    un_ruleset_free(conc);
    un_rule_free(g);
    un_rule_free(r);
    un_ctx_free(ctx);
}

/* split[axis=r-1, sizes=[a, b]](concat[axis=r-1](x0, x1)) => x0, x1 over x0, x1 of rank r (3:
 * [2,4,4], 4: [2,2,2,4]), with a and b bound to sizes[0]/[1] and to the last dim of x0/x1
 * (right) or of x1/x0 (planted: true only where the two dims are equal). */
static un_rule *split_concat(bool swapped, int rank) {
    char text[4096], in[512];
    const char *sh = rank == 3 ? "[2, 4, 4]" : "[2, 2, 2, 4]";
    int ax = rank - 1;
    snprintf(in, sizeof in,
             "{\"name\": \"x0\", \"op\": \"input\", \"params\": {\"shape\": %s}}, "
             "{\"name\": \"x1\", \"op\": \"input\", \"params\": {\"shape\": %s}}",
             sh, sh);
    const char *a = swapped ? "x1" : "x0", *b = swapped ? "x0" : "x1";
    snprintf(text, sizeof text,
             "{\"src\": {\"nodes\": [%s, {\"name\": \"c\", \"op\": \"concat\", \"in\": [\"x0\", "
             "\"x1\"], \"params\": {\"axis\": %d}}, {\"name\": \"s\", \"op\": \"split\", \"in\": "
             "[\"c\"], \"params\": {\"axis\": %d, \"sizes\": [4, 4]}}], \"outputs\": [\"s:0\", "
             "\"s:1\"]}, \"dst\": {\"nodes\": [%s], \"outputs\": [\"x0\", \"x1\"]}, \"vars\": "
             "[{\"name\": \"a\", \"at\": [[\"src\", \"s\", \"sizes\", 0], [\"src\", \"%s\", "
             "\"shape\", %d], [\"dst\", \"%s\", \"shape\", %d]]}, {\"name\": \"b\", \"at\": "
             "[[\"src\", \"s\", \"sizes\", 1], [\"src\", \"%s\", \"shape\", %d], [\"dst\", \"%s\", "
             "\"shape\", %d]]}]}",
             in, ax, ax, in, a, ax, a, ax, b, ax, b, ax);
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *r = NULL;
    EXPECT_OK(ctx, un_rule_from_json(ctx, spec, "split_concat", text, strlen(text), &r));
    un_ctx_free(ctx);
    return r;
}

/* A rule body whose dim variable is malformed is refused when read, with the reason. */
static void test_bad_input(void) {
    static const char *const cases[][2] = {
        /* an input's dim bound on one side only: the sides would read different tensors */
        {"[{\"name\": \"a\", \"at\": [[\"src\", \"s\", \"sizes\", 0], [\"src\", \"x0\", \"shape\", "
         "2]]}]",
         "on one side only"},
        /* a symbol over sizes of different values (split sizes 4, dim 0 of x0 is 2) */
        {"[{\"name\": \"a\", \"at\": [[\"src\", \"s\", \"sizes\", 0], [\"src\", \"x0\", \"shape\", "
         "0], "
         "[\"dst\", \"x0\", \"shape\", 0]]}]",
         "different values"},
        /* an item the list does not have */
        {"[{\"name\": \"a\", \"at\": [[\"src\", \"s\", \"sizes\", 3]]}]", "bad item"},
    };
    const char *in = "{\"name\": \"x0\", \"op\": \"input\", \"params\": {\"shape\": [2, 4, 4]}}, "
                     "{\"name\": \"x1\", \"op\": \"input\", \"params\": {\"shape\": [2, 4, 4]}}";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[4096];
        snprintf(
            text, sizeof text,
            "{\"src\": {\"nodes\": [%s, {\"name\": \"c\", \"op\": \"concat\", \"in\": [\"x0\", "
            "\"x1\"], \"params\": {\"axis\": 2}}, {\"name\": \"s\", \"op\": \"split\", \"in\": "
            "[\"c\"], \"params\": {\"axis\": 2, \"sizes\": [4, 4]}}], \"outputs\": [\"s:0\", "
            "\"s:1\"]}, \"dst\": {\"nodes\": [%s], \"outputs\": [\"x0\", \"x1\"]}, \"vars\": %s}",
            in, in, cases[i][0]);
        un_ctx *ctx = un_ctx_new(NULL);
        un_rule *r = NULL;
        EXPECT_TRUE(un_rule_from_json(ctx, spec, "bad", text, strlen(text), &r) != UN_OK);
        EXPECT_TRUE(r == NULL);
        const char *msg = un_ctx_errmsg(ctx);
        EXPECT_TRUE(msg && strstr(msg, cases[i][1]));
        if (!msg || !strstr(msg, cases[i][1]))
            printf("    case %zu: %s\n", i, msg ? msg : "(no message)");
        un_rule_free(r);
        un_ctx_free(ctx);
    }
}

static void test_planted_refuted(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *good = split_concat(false, 3), *bad = split_concat(true, 3);
    if (good && bad) {
        EXPECT_EQ(dim_vars(bad), 2);
        un_verify_verdict vv;
        EXPECT_OK(ctx, un_runner_rule(ctx, ver, bad, NULL, &vv));
        EXPECT_EQ(vv.status, UN_RULE_REFUTED);
        printf("    planted: %s\n", vv.detail);
        un_verify_verdict_deinit(&vv);
        /* Z3 alone does not prove it either, for every size */
        un_proof p;
        EXPECT_OK(ctx,
                  un_verifier_prove(ctx, ver, bad,
                                    &(un_prove_opts){.timeout_ms = 2000, .symbolic = true}, &p));
        EXPECT_TRUE(p.verdict != UN_VERDICT_VALID);
        un_rule *g = verified_general(ctx, good, 2, 0);
        un_rule_free(g);
    }
    un_rule_free(good);
    un_rule_free(bad);
    un_ctx_free(ctx);
}

/* A dim variable the proof for every size does not cover is dropped: the split/concat rule at
 * rank 4 on the last axis holds for every size, but no axiom (declared or lifted) splits a rank-4
 * concat on axis 3 into parts of different sizes, so only the witness proof goes through; the
 * stored form keeps no dim variable (it claims the witness sizes only). */
static void test_unproven_dropped(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *r = split_concat(false, 4);
    if (r) {
        EXPECT_EQ(dim_vars(r), 2);
        un_verify_verdict vv;
        EXPECT_OK(ctx, un_runner_rule(ctx, ver, r, NULL, &vv));
        EXPECT_EQ(vv.status, UN_RULE_VERIFIED);
        EXPECT_TRUE(!vv.any_shape);
        EXPECT_EQ(vv.dropped_vars, 2);
        EXPECT_TRUE(vv.general != NULL);
        if (vv.general)
            EXPECT_EQ(dim_vars(vv.general), 0);
        un_verify_verdict_deinit(&vv);
    }
    un_rule_free(r);
    un_ctx_free(ctx);
}

/* Dims forms whose split sizes are tied to no input dim (n2 binds the source's sizes[1] only):
 * at n1 = 3, n2 = 1 the source is well formed and the target's split [3, 2] is not, so that
 * form's claim fails the concrete re-check, and the verifier spends no Z3 work on it (the rule's
 * proof costs what proving the rule itself costs). A second form (N=3 set) holds at its witness
 * sizes, where x2 [2,4,4] admits only n1 = n2 = 1, and fails at x2 [4,4,4], n1 = 3, n2 = 1: the
 * re-check for every size must try the untied sizes there too. */
static void test_untied_not_proven(void) {
    static const char *const text =
        "{\"src\": {\"nodes\": [{\"name\": \"x0\", \"op\": \"input\", \"params\": {\"shape\": [2, "
        "4, 4]}}, {\"name\": \"s0\", \"op\": \"split\", \"in\": [\"x0\"], \"params\": {\"axis\": "
        "1, \"sizes\": [2, 2]}}, {\"name\": \"s1\", \"op\": \"concat\", \"in\": [\"s0:1\", "
        "\"s0:1\"], \"params\": {\"axis\": 1}}, {\"name\": \"s2\", \"op\": \"concat\", \"in\": "
        "[\"s1\", \"s1\"], \"params\": {\"axis\": 0}}], \"outputs\": [\"s2\", \"s0\"]}, \"dst\": "
        "{\"nodes\": [{\"name\": \"x0\", \"op\": \"input\", \"params\": {\"shape\": [2, 4, 4]}}, "
        "{\"name\": \"t0\", \"op\": \"split\", \"in\": [\"x0\"], \"params\": {\"axis\": 1, "
        "\"sizes\": [2, 2]}}, {\"name\": \"t1\", \"op\": \"concat\", \"in\": [\"t0:1\", "
        "\"t0:1\"], \"params\": {\"axis\": 0}}, {\"name\": \"t2\", \"op\": \"concat\", \"in\": "
        "[\"t1\", \"t1\"], \"params\": {\"axis\": 1}}], \"outputs\": [\"t2\", \"t0\"]}}";
    static const char *const wide =
        "{\"src\": {\"nodes\": [{\"name\": \"x0\", \"op\": \"input\", \"params\": {\"shape\": [2, "
        "4, 4]}}, {\"name\": \"x1\", \"op\": \"input\", \"params\": {\"shape\": [2, 4, 4]}}, "
        "{\"name\": \"x2\", \"op\": \"input\", \"params\": {\"shape\": [2, 4, 4]}}, {\"name\": "
        "\"s0\", \"op\": \"split\", \"in\": [\"x2\"], \"params\": {\"axis\": 0, \"sizes\": [1, "
        "1]}}, {\"name\": \"s1\", \"op\": \"concat\", \"in\": [\"s0\", \"x0\"], \"params\": "
        "{\"axis\": 0}}, {\"name\": \"s2\", \"op\": \"concat\", \"in\": [\"s1\", \"x1\"], "
        "\"params\": {\"axis\": 0}}], \"outputs\": [\"s0:1\", \"s2\"]}, \"dst\": {\"nodes\": "
        "[{\"name\": \"x0\", \"op\": \"input\", \"params\": {\"shape\": [2, 4, 4]}}, {\"name\": "
        "\"x1\", \"op\": \"input\", \"params\": {\"shape\": [2, 4, 4]}}, {\"name\": \"x2\", "
        "\"op\": \"input\", \"params\": {\"shape\": [2, 4, 4]}}, {\"name\": \"t0\", \"op\": "
        "\"concat\", \"in\": [\"x0\", \"x1\"], \"params\": {\"axis\": 0}}, {\"name\": \"t1\", "
        "\"op\": \"split\", \"in\": [\"x2\"], \"params\": {\"axis\": 0, \"sizes\": [1, 1]}}, "
        "{\"name\": \"t2\", \"op\": \"concat\", \"in\": [\"t1\", \"t0\"], \"params\": "
        "{\"axis\": 0}}], \"outputs\": [\"t1:1\", \"t2\"]}, \"vars\": [{\"name\": \"n1\", "
        "\"at\": [[\"src\", \"s0\", \"sizes\", 0]]}, {\"name\": \"n2\", \"at\": [[\"src\", "
        "\"s0\", \"sizes\", 1], [\"dst\", \"t1\", \"sizes\", 1]]}]}";
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *r = NULL, *d = NULL, *rc = NULL;
    un_verifier *v[2] = {NULL, NULL};
    EXPECT_OK(ctx, un_rule_from_json(ctx, spec, "untied", text, strlen(text), &r));
    if (r)
        EXPECT_OK(ctx, un_rule_dims_generalize(ctx, r, &d));
    EXPECT_TRUE(d != NULL);
    if (!d)
        goto done;
    EXPECT_EQ(dim_vars(d), 2);
    d->any_shape = true;
    EXPECT_EQ(un_rule_check_claim(ctx, d, 8, NULL), UN_ERR_MISMATCH);
    printf("    %s\n", un_ctx_errmsg(ctx));
    un_ctx_clear(ctx);
    /* one whose claim fails only at other input sizes: x2 [2,4,4] admits n1 = n2 = 1 alone */
    un_rule *w = NULL;
    EXPECT_OK(ctx, un_rule_from_json(ctx, spec, "untied_sizes", wide, strlen(wide), &w));
    if (w) {
        EXPECT_OK(ctx, un_rule_check_claim(ctx, w, 8, NULL));
        w->any_shape = true;
        EXPECT_EQ(un_rule_check_claim(ctx, w, 8, NULL), UN_ERR_MISMATCH);
        printf("    %s\n", un_ctx_errmsg(ctx));
        un_ctx_clear(ctx);
    }
    un_rule_free(w);
    for (int k = 0; k < 2; k++)
        EXPECT_OK(ctx, un_runner_verifier(ctx, spec, 1234, &v[k], NULL));
    rc = un_rule_clone(r);
    EXPECT_OK(ctx, un_rule_conds_compute(ctx, rc));
    if (!v[0] || !v[1])
        goto done;
    /* the runner's budget; each fresh verifier proves the rule once first (internalizing) */
    un_prove_opts po = {.timeout_ms = 20000, .symbolic = true, .rlimit = 2000 * 3500};
    un_proof p;
    for (int k = 0; k < 2; k++)
        EXPECT_OK(ctx, un_verifier_prove(ctx, v[k], rc, &po, &p));
    EXPECT_OK(ctx, un_verifier_prove(ctx, v[0], rc, &po, &p));
    EXPECT_EQ(p.verdict, UN_VERDICT_VALID);
    un_verify_verdict vv;
    EXPECT_OK(ctx, un_runner_rule(ctx, v[1], r, NULL, &vv));
    EXPECT_EQ(vv.status, UN_RULE_VERIFIED);
    EXPECT_TRUE(vv.any_shape);
    EXPECT_EQ(vv.n_dim_vars, 0);
    EXPECT_EQ(vv.work, p.work);
    printf("    work %llu (the rule alone: %llu)\n", (unsigned long long)vv.work,
           (unsigned long long)p.work);
    un_verify_verdict_deinit(&vv);
done:
    un_verifier_free(v[0]);
    un_verifier_free(v[1]);
    un_rule_free(rc);
    un_rule_free(d);
    un_rule_free(r);
    un_ctx_free(ctx);
}

/* A random PCG at sizes other than the rules' witnesses: x [b, s, h] and weights [h, d_i] with
 * distinct d_i, linears sharing x, splits of a linear's last dim at random sizes, concats of those
 * pieces, relu and ew_add; its outputs are the unconsumed tensors. */
static un_graph *random_sized(un_rng *rng) {
    un_graph *g = un_graph_new(spec);
    int64_t b = 1 + (int64_t)un_rng_below(rng, 3), s = 1 + (int64_t)un_rng_below(rng, 4),
            h = 2 + (int64_t)un_rng_below(rng, 6);
    int32_t x, w[3], id;
    un_graph_add_input(NULL, g, "x", UN_OP_INPUT, 3, (int64_t[]){b, s, h}, &x);
    for (int i = 0; i < 3; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "w%d", i);
        un_graph_add_input(NULL, g, nm, UN_OP_WEIGHT, 2,
                           (int64_t[]){h, 1 + (int64_t)un_rng_below(rng, 7)}, &w[i]);
    }
    un_param p[UN_MAX_PARAMS];
    for (int i = 0; i < 3; i++) { /* linears sharing x, some with relu */
        params(UN_OP_LINEAR, p)[pidx(UN_OP_LINEAR, "activation")].v[0] =
            (int64_t)un_rng_below(rng, 2);
        un_graph_add(NULL, g, UN_OP_LINEAR, p, (un_ref[]){{x, 0}, {w[i], 0}}, 2, NULL, &id);
    }
    for (int t = 0; t < 6; t++) {
        int32_t n = un_graph_node_count(g);
        un_ref a = {(int32_t)(n - 1 - (int32_t)un_rng_below(rng, (uint64_t)(n < 4 ? n : 4))), 0};
        const un_node *an = un_graph_node(g, a.node);
        a.out = (int)un_rng_below(rng, (uint64_t)an->inf.n_out);
        un_ref c = {(int32_t)un_rng_below(rng, (uint64_t)n), 0};
        c.out = (int)un_rng_below(rng, (uint64_t)un_graph_node(g, c.node)->inf.n_out);
        const un_shape *sa = un_graph_shape(g, a);
        switch (un_rng_below(rng, 4)) {
        case 0: { /* split the last dim in two */
            int64_t last = sa->dim[sa->rank - 1];
            if (last < 2)
                continue;
            params(UN_OP_SPLIT, p)[pidx(UN_OP_SPLIT, "axis")].v[0] = sa->rank - 1;
            un_param *sz = &p[pidx(UN_OP_SPLIT, "sizes")];
            sz->len = 2;
            sz->v[0] = 1 + (int64_t)un_rng_below(rng, (uint64_t)(last - 1));
            sz->v[1] = last - sz->v[0];
            un_graph_add(NULL, g, UN_OP_SPLIT, p, &a, 1, NULL, &id);
            break;
        }
        case 1:
            params(UN_OP_CONCAT, p)[pidx(UN_OP_CONCAT, "axis")].v[0] = sa->rank - 1;
            un_graph_add(NULL, g, UN_OP_CONCAT, p, (un_ref[]){a, c}, 2, NULL, &id);
            break;
        case 2:
            un_graph_add(NULL, g, UN_OP_RELU, params(UN_OP_RELU, p), &a, 1, NULL, &id);
            break;
        default:
            un_graph_add(NULL, g, UN_OP_EW_ADD, params(UN_OP_EW_ADD, p), (un_ref[]){a, c}, 2, NULL,
                         &id);
        }
    }
    return g;
}

/* The soundness property with dim-variable rules: chains of random rewrites (forwards and
 * backwards) by the verifier's general forms of the merge rules (activation none and relu) and
 * the split/concat rule keep every output's value and layout on graphs at other sizes. */
static void test_random_chains(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *rs[3] = {merge_rule(0), merge_rule(1), split_concat(false, 3)};
    un_rule *gs[3] = {0};
    un_ruleset *set = NULL;
    bool ok = true;
    for (int i = 0; i < 3; i++) {
        gs[i] = rs[i] ? verified_general(ctx, rs[i], 2, i < 2 ? 2 : 0) : NULL;
        ok = ok && gs[i];
    }
    un_ruleset_params pp = un_ruleset_params_default();
    pp.reversed = true;
    if (ok)
        EXPECT_OK(ctx, un_ruleset_from_rules(ctx, spec, gs, NULL, 3, &pp, &set));
    if (set) {
        un_rng rng;
        un_rng_seed(&rng, 17);
        int64_t applied = 0, wrong = 0, other = 0;
        for (int gi = 0; gi < 80; gi++) {
            un_graph *g = random_sized(&rng);
            applied += rw_chains(ctx, set, g, &rng, 3, &wrong, NULL, &other);
            un_graph_free(g);
        }
        printf("    %lld rewrites in chains of 1-20 (%lld by a dim-variable rule at other sizes), "
               "%lld wrong\n",
               (long long)applied, (long long)other, (long long)wrong);
        EXPECT_EQ(wrong, 0);
        EXPECT_TRUE(other >= 50);
    }
    un_ruleset_free(set);
    for (int i = 0; i < 3; i++) {
        un_rule_free(rs[i]);
        un_rule_free(gs[i]);
    }
    un_ctx_free(ctx);
}

static void run_with_verifier(void (*fn)(void)) {
    if (!ver) {
        un_ctx *ctx = un_ctx_new(NULL);
        EXPECT_OK(ctx, un_runner_verifier(ctx, spec, 1234, &ver, NULL));
        un_ctx_free(ctx);
    }
    if (ver)
        fn();
}

static void t_verify_match(void) { run_with_verifier(test_verify_match_two_sizes); }
static void t_planted(void) { run_with_verifier(test_planted_refuted); }
static void t_unproven(void) { run_with_verifier(test_unproven_dropped); }
static void t_chains(void) { run_with_verifier(test_random_chains); }
static void t_free(void) {
    un_verifier_free(ver);
    ver = NULL;
}

int main(void) {
    static const test_case cases[] = {
        {"propose_instantiate", test_propose_instantiate},
        {"bad_input", test_bad_input},
        {"verify_match_two_sizes", t_verify_match},
        {"planted_refuted", t_planted},
        {"unproven_dropped", t_unproven},
        {"untied_not_proven", test_untied_not_proven},
        {"random_chains", t_chains},
        {"free", t_free},
    };
    return TEST_RUN_WITH_SPEC(cases, &spec);
}
