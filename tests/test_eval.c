/* tests/test_eval.c - the reference evaluator's machinery: scatter/gather round trips over random
 * layouts, the parallel operators' piece movement, detection of diverging copies, whole-graph
 * comparison, the size limit, and allocation failures injected through the context. */
#include "pcg/eval.h"
#include "pcg/sample.h"
#include "tests/test.h"

#include <stdlib.h>

static un_spec *S;

/* A random valid layout of a [4, 6, 8] tensor. */
static un_shape random_layout(un_rng *rng) {
    static const int32_t divs[3][4] = {{1, 2, 4, 1}, {1, 2, 3, 6}, {1, 2, 4, 8}};
    un_shape s = un_shape_make(3, (int64_t[]){4, 6, 8}, UN_DT_FLOAT);
    for (int i = 0; i < 3; i++)
        s.shard[i] = divs[i][un_rng_below(rng, 4)];
    s.sum = 1 + (int32_t)un_rng_below(rng, 3);
    s.copy = 1 + (int32_t)un_rng_below(rng, 2);
    return s;
}

static void test_scatter_gather(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rng rng;
    un_rng_seed(&rng, 3);
    for (int dom = 0; dom < UN_DOM_COUNT; dom++)
        for (int trial = 0; trial < 50; trial++) {
            un_shape s = random_layout(&rng);
            int64_t n = un_shape_numel(&s), where = -1;
            un_val *dense = un_xmalloc(sizeof(un_val) * (size_t)n),
                   *back = un_xmalloc(sizeof(un_val) * (size_t)n);
            un_ptensor_random_dense((un_dom)dom, UN_DT_FLOAT, 0, n, &rng, dense);
            un_ptensor t;
            EXPECT_OK(ctx, un_ptensor_init(ctx, &t, &s));
            EXPECT_OK(ctx, un_ptensor_scatter(ctx, &t, (un_dom)dom, dense, &rng));
            EXPECT_OK(ctx, un_ptensor_gather(ctx, &t, (un_dom)dom, back));
            EXPECT_TRUE(un_dense_equal((un_dom)dom, back, dense, n, 1e-12, &where));
            if (s.sum > 1) { /* partial sums are real summands, not a copy and zeros */
                int32_t blk[UN_MAX_DIMS] = {0};
                const un_val *p0 = un_ptensor_piece(&t, blk, 0, 0);
                EXPECT_TRUE(!un_num_eq((un_dom)dom, p0[0], dense[0]));
            }
            if (s.copy > 1) { /* a diverging copy is detected */
                int32_t blk[UN_MAX_DIMS] = {0};
                un_val *c1 = un_ptensor_piece(&t, blk, 0, 1);
                c1[0] = un_num_add((un_dom)dom, c1[0], un_num_from_int((un_dom)dom, 1));
                EXPECT_EQ(un_ptensor_gather(ctx, &t, (un_dom)dom, back), UN_ERR_MISMATCH);
                un_ctx_clear(ctx);
            }
            un_ptensor_deinit(&t);
            free(dense);
            free(back);
        }
    un_ctx_free(ctx);
}

/* Every parallel op on every layout it accepts keeps the logical value. */
static void test_parallel_ops(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rng rng;
    un_rng_seed(&rng, 4);
    int checked = 0;
    for (int trial = 0; trial < 200; trial++) {
        un_shape s = random_layout(&rng);
        un_op ops[] = {UN_OP_PARTITION, UN_OP_COMBINE, UN_OP_REPLICATE, UN_OP_REDUCE};
        un_op op = ops[un_rng_below(&rng, 4)];
        const un_op_spec *os = un_spec_op(S, op);
        un_param p[UN_MAX_PARAMS];
        un_spec_param_defaults(os, p);
        int pd = un_spec_param_index(os, "dim");
        if (pd >= 0)
            p[pd].v[0] = (int64_t)un_rng_below(&rng, 3);
        p[un_spec_param_index(os, "degree")].v[0] = 1 + (int64_t)un_rng_below(&rng, 3);
        un_infer inf;
        if (un_spec_infer(ctx, S, op, p, &s, 1, NULL, &inf) != UN_OK) {
            un_ctx_clear(ctx);
            continue;
        }
        for (int dom = 0; dom < UN_DOM_COUNT; dom++) {
            int64_t n = un_shape_numel(&s), where = -1;
            un_val *dense = un_xmalloc(sizeof(un_val) * (size_t)n),
                   *back = un_xmalloc(sizeof(un_val) * (size_t)n);
            un_ptensor_random_dense((un_dom)dom, UN_DT_FLOAT, 0, n, &rng, dense);
            un_ptensor in, out;
            EXPECT_OK(ctx, un_ptensor_init(ctx, &in, &s));
            EXPECT_OK(ctx, un_ptensor_scatter(ctx, &in, (un_dom)dom, dense, &rng));
            EXPECT_OK(ctx, un_eval_op(ctx, S, op, p, &inf, (un_dom)dom, &in, 1, &out));
            EXPECT_TRUE(un_shape_eq(&out.shape, &inf.out[0]));
            EXPECT_OK(ctx, un_ptensor_gather(ctx, &out, (un_dom)dom, back));
            bool eq = un_dense_equal((un_dom)dom, back, dense, n, 1e-12, &where);
            EXPECT_TRUE(eq);
            if (!eq) {
                char sb[96];
                un_shape_str(&s, sb, sizeof sb);
                printf("    %s on %s changed the value at %lld\n", os->name, sb, (long long)where);
            }
            un_ptensor_deinit(&in);
            un_ptensor_deinit(&out);
            free(dense);
            free(back);
        }
        checked++;
    }
    printf("    %d parallel-op applications checked in both domains\n", checked);
    EXPECT_TRUE(checked > 100);
    un_ctx_free(ctx);
}

static void test_compare_graphs(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_sample_mlp_cfg cfg = {8, 6, 12, 4};
    un_graph *g[UN_SAMPLE_COUNT] = {NULL};
    for (int s = 0; s < UN_SAMPLE_COUNT; s++)
        EXPECT_OK(ctx, un_sample_mlp(ctx, S, cfg, (un_sample_strategy)s, 2, &g[s]));
    double err = -1;
    for (int s = 1; s < UN_SAMPLE_COUNT; s++) {
        EXPECT_OK(ctx, un_eval_compare(ctx, g[0], g[s], UN_DOM_FIELD, 7, 0, &err));
        EXPECT_EQ(err, 0);
        EXPECT_OK(ctx, un_eval_compare(ctx, g[0], g[s], UN_DOM_F64, 7, 1e-12, &err));
        EXPECT_TRUE(err < 1e-12);
    }
    /* a graph that computes something else is told apart: no relu in the first layer */
    un_graph *h = un_graph_new(S);
    int32_t x, w1, w2, a, y;
    EXPECT_OK(ctx, un_graph_add_input(ctx, h, "x", UN_OP_INPUT, 2, (int64_t[]){8, 6}, &x));
    EXPECT_OK(ctx, un_graph_add_input(ctx, h, "w1", UN_OP_WEIGHT, 2, (int64_t[]){6, 12}, &w1));
    EXPECT_OK(ctx, un_graph_add_input(ctx, h, "w2", UN_OP_WEIGHT, 2, (int64_t[]){12, 4}, &w2));
    EXPECT_OK(ctx,
              un_graph_add(ctx, h, UN_OP_LINEAR, NULL, (un_ref[]){{x, 0}, {w1, 0}}, 2, "fc1", &a));
    EXPECT_OK(ctx,
              un_graph_add(ctx, h, UN_OP_LINEAR, NULL, (un_ref[]){{a, 0}, {w2, 0}}, 2, "fc2", &y));
    for (int dom = 0; dom < UN_DOM_COUNT; dom++) {
        EXPECT_EQ(un_eval_compare(ctx, g[0], h, (un_dom)dom, 7, 1e-9, &err), UN_ERR_MISMATCH);
        un_ctx_clear(ctx);
    }
    /* inputs that do not match by name are an error, not a silent pass */
    un_graph *k = un_graph_new(S);
    EXPECT_OK(ctx, un_graph_add_input(ctx, k, "z", UN_OP_INPUT, 2, (int64_t[]){8, 6}, &x));
    EXPECT_EQ(un_eval_compare(ctx, g[0], k, UN_DOM_FIELD, 7, 0, &err), UN_ERR_INVALID);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "'z'") != NULL);
    un_graph_free(k);
    un_graph_free(h);
    for (int s = 0; s < UN_SAMPLE_COUNT; s++)
        un_graph_free(g[s]);
    un_ctx_free(ctx);
}

static void test_size_limit(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = un_graph_new(S);
    int32_t x;
    EXPECT_OK(ctx,
              un_graph_add_input(ctx, g, "x", UN_OP_INPUT, 2, (int64_t[]){1 << 14, 1 << 14}, &x));
    un_eval *ev = NULL;
    EXPECT_EQ(un_eval_new(ctx, g, UN_DOM_FIELD, &ev), UN_ERR_LIMIT);
    EXPECT_TRUE(ev == NULL);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "limit") != NULL);
    un_graph_free(g);
    un_ctx_free(ctx);
}

/* Every allocation failure on the evaluation path is UN_ERR_NOMEM, with nothing leaked (ASan). */
static void test_alloc_failure(void) {
    un_ctx *plain = un_ctx_new(NULL);
    un_graph *g = NULL;
    EXPECT_OK(plain,
              un_sample_mlp(plain, S, (un_sample_mlp_cfg){8, 6, 12, 4}, UN_SAMPLE_TENSOR, 2, &g));
    int fails = 0, oks = 0;
    for (int n = 1; n < 100 && g; n++) {
        test_failing f = {0, n};
        un_ctx_params p = un_ctx_params_default();
        p.alloc = test_failing_alloc(&f);
        un_ctx *ctx = un_ctx_new(&p);
        un_eval *ev = NULL;
        un_status st = un_eval_new(ctx, g, UN_DOM_FIELD, &ev);
        if (st == UN_OK) {
            st = un_eval_fill_random(ev, 1);
            if (st == UN_OK)
                st = un_eval_run(ev);
        }
        EXPECT_TRUE(st == UN_OK || st == UN_ERR_NOMEM);
        fails += st == UN_ERR_NOMEM;
        oks += st == UN_OK;
        un_eval_free(ev);
        un_ctx_free(ctx);
        if (st == UN_OK)
            break;
    }
    printf("    %d injected allocation failures handled, then a clean run\n", fails);
    EXPECT_TRUE(fails > 0);
    EXPECT_EQ(oks, 1);
    un_graph_free(g);
    un_ctx_free(plain);
}

int main(void) {
    static const test_case cases[] = {
        {"scatter_gather", test_scatter_gather}, {"parallel_ops", test_parallel_ops},
        {"compare_graphs", test_compare_graphs}, {"size_limit", test_size_limit},
        {"alloc_failure", test_alloc_failure},
    };
    return TEST_RUN_WITH_SPEC(cases, &S);
}
