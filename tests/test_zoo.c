/* tests/test_zoo.c - the model zoo: every model builds in both sizes with consistent inputs,
 * output and label; parameter counts against hand-computed (and torchvision's) values; every op is
 * in the spec; JSON round trips keep the hash; the unknown-name error; tiny models run in the
 * float64 reference evaluator; and which models accept a batch-sharded (data-parallel) layout,
 * with the data-parallel graph evaluating to the same outputs. Runs from the repository root. */
#include <stdlib.h>

#include "pcg/eval.h"
#include "runtime/zoo.h"
#include "tests/test.h"

static un_spec *S; /* loaded once in main */

/* ---- building ---- */

static void test_names(void) {
    int n = 0;
    const char *const *names = un_zoo_names(&n);
    EXPECT_EQ(n, 8);
    static const char *const want[] = {"mlp",        "transformer", "dlrm",         "xdl",
                                       "candle_uno", "resnext50",   "inception_v3", "charlm"};
    for (int i = 0; i < n && i < 8; i++)
        EXPECT_STR_EQ(names[i], want[i]);
}

static void test_unknown(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_model m;
    memset(&m, 0x5a, sizeof m);
    un_status st = un_zoo_build(ctx, S, "resnet", true, 0, &m);
    EXPECT_EQ(st, UN_ERR_INVALID);
    const char *msg = un_ctx_errmsg(ctx);
    EXPECT_TRUE(strstr(msg, "unknown model 'resnet'") != NULL);
    EXPECT_TRUE(strstr(msg, "mlp") && strstr(msg, "inception_v3") && strstr(msg, "charlm"));
    EXPECT_TRUE(m.graph == NULL && m.n_inputs == 0);
    un_ctx_clear(ctx);
    EXPECT_EQ(un_zoo_build(ctx, S, NULL, true, 0, &m), UN_ERR_INVALID);
    un_ctx_clear(ctx);
    EXPECT_EQ(un_zoo_build(ctx, S, "mlp", true, (int64_t)1 << 40, &m), UN_ERR_INVALID);
    EXPECT_TRUE(m.graph == NULL);
    un_model_deinit(&m);
    un_model_deinit(NULL);
    un_ctx_free(ctx);
}

/* Every model builds for a batch of one sample (one sequence for charlm). */
static void test_batch_one(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_model m;
    int n = 0;
    const char *const *names = un_zoo_names(&n);
    for (int i = 0; i < n; i++) {
        EXPECT_OK(ctx, un_zoo_build(ctx, S, names[i], true, 1, &m));
        EXPECT_EQ(m.batch, 1);
        un_model_deinit(&m);
        EXPECT_TRUE(m.graph == NULL);
    }
    un_ctx_free(ctx);
}

/* Everything the zoo promises about one built model. */
static void check_model(const un_model *m, const char *name, bool tiny) {
    const un_graph *g = m->graph;
    EXPECT_TRUE(g != NULL);
    if (!g)
        return;
    EXPECT_STR_EQ(m->name, name);
    EXPECT_EQ(m->tiny, tiny);
    EXPECT_EQ(un_graph_output_count(g), 1);
    int64_t n0 = strcmp(name, "charlm") == 0 ? m->batch * (tiny ? 32 : 64) : m->batch;
    /* every node's op is in the spec; every INPUT is a registered data input */
    int32_t n_nodes = un_graph_node_count(g), n_input_nodes = 0;
    for (int32_t i = 0; i < n_nodes; i++) {
        const un_node *nd = un_graph_node(g, i);
        EXPECT_TRUE(un_spec_op(S, nd->op) != NULL);
        EXPECT_TRUE(nd->name != NULL);
        EXPECT_TRUE(un_op_kind_of(nd->op) != UN_OPK_PARALLEL);
        if (nd->op == UN_OP_INPUT) {
            n_input_nodes++;
            bool found = false;
            for (int k = 0; k < m->n_inputs; k++)
                found |= m->inputs[k].node == i;
            EXPECT_TRUE(found);
        }
    }
    EXPECT_EQ(n_input_nodes, m->n_inputs);
    for (int k = 0; k < m->n_inputs; k++) {
        const un_model_input *in = &m->inputs[k];
        const un_shape *s = un_graph_shape(g, (un_ref){in->node, 0});
        EXPECT_STR_EQ(un_graph_node(g, in->node)->name, in->name);
        EXPECT_EQ(un_graph_node(g, in->node)->op, UN_OP_INPUT);
        EXPECT_EQ(s->dim[0], n0);
        EXPECT_EQ(s->dtype == UN_DT_INT, in->is_int);
        EXPECT_TRUE(in->is_int ? in->int_range >= 1 : in->int_range == 0);
    }
    /* the output and the label agree */
    const un_shape *y = un_graph_shape(g, un_zoo_output(m));
    EXPECT_EQ(y->dtype, UN_DT_FLOAT);
    EXPECT_EQ(y->dim[0], n0);
    if (m->loss == UN_LOSS_CE) {
        EXPECT_EQ(y->rank, 2);
        EXPECT_EQ(y->dim[1], m->n_classes);
        EXPECT_TRUE(m->n_classes >= 2);
        EXPECT_EQ(m->label_rank, 1);
        EXPECT_EQ(m->label_dim[0], y->dim[0]);
    } else {
        EXPECT_EQ(m->loss, UN_LOSS_MSE);
        EXPECT_EQ(m->label_rank, y->rank);
        for (int i = 0; i < y->rank; i++)
            EXPECT_EQ(m->label_dim[i], y->dim[i]);
    }
    /* the whole graph has trivial layouts (the strategy is the search's business) */
    for (int32_t i = 0; i < n_nodes; i++)
        EXPECT_TRUE(un_shape_is_trivial(un_graph_shape(g, (un_ref){i, 0})));
}

/* Hand-computed parameter counts of the paper configurations (see zoo.h for the layers). */
static int64_t expected_params(const char *name, bool tiny) {
    const int64_t K = 1024;
    if (strcmp(name, "mlp") == 0) /* 2 towers: in x w, then (layers - 1) x w x w */
        return tiny ? 2 * (32 * 32 + 32 * 32) : 2 * (1024 * 8192 + 7 * 8192 * 8192LL);
    if (strcmp(name, "transformer") == 0) { /* per layer: mha 4 h^2, ffn 2 h f, 2 layer norms */
        int64_t h = tiny ? 32 : K, f = tiny ? 128 : 4 * K, l = tiny ? 2 : 24;
        return l * (4 * h * h + 2 * h * f + 4 * h) + h;
    }
    if (strcmp(name, "dlrm") == 0) /* 4 tables; bottom 4-64-64, top 320-64-2, biases */
        return tiny ? 4 * 100 * 8 + (4 * 8 + 8 + 8 * 8 + 8) + (40 * 8 + 8 + 8 * 2 + 2)
                    : 4 * 1000000LL * 64 + (4 * 64 + 64 + 64 * 64 + 64) +
                          (320 * 64 + 64 + 64 * 2 + 2);
    if (strcmp(name, "xdl") == 0) /* 4 tables; top 256-256-256-2 */
        return tiny ? 4 * 100 * 8 + 32 * 16 + 16 * 16 + 16 * 2
                    : 4 * 1000000LL * 64 + 256 * 256 + 256 * 256 + 256 * 2;
    if (strcmp(name, "candle_uno") == 0) { /* 5 towers (feature x w, then 7 w x w); head */
        int64_t w = tiny ? 32 : 4192, tl = tiny ? 1 : 7, hl = tiny ? 1 : 3;
        int64_t fc = tiny ? 16 : 942, fe = tiny ? 24 : 5270, ff = tiny ? 20 : 2048;
        int64_t towers = (fc + 2 * fe + 2 * ff) * w + 5 * tl * w * w;
        return towers + (5 * w + 2) * w + hl * w * w + w;
    }
    if (strcmp(name, "resnext50") == 0 && !tiny) /* torchvision resnext50_32x4d */
        return 25028904;
    if (strcmp(name, "inception_v3") == 0 && !tiny) /* torchvision 27161264 minus AuxLogits */
        return 27161264 - (768 * 128 + 2 * 128 + 128 * 768 * 25 + 2 * 768 + 768 * 1000 + 1000);
    if (strcmp(name, "charlm") == 0) { /* embedding, blocks (2 ln, mha, ffn), final ln, head */
        int64_t d = tiny ? 32 : 128, f = tiny ? 128 : 512, nb = tiny ? 1 : 2;
        return 256 * d + nb * (4 * d + 4 * d * d + 2 * d * f) + 2 * d + d * 256;
    }
    return -1;
}

static void test_build_all(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    int n = 0;
    const char *const *names = un_zoo_names(&n);
    for (int t = 1; t >= 0; t--)
        for (int i = 0; i < n; i++) {
            un_model m;
            un_status st = un_zoo_build(ctx, S, names[i], t, 0, &m);
            EXPECT_OK(ctx, st);
            if (st != UN_OK) {
                un_ctx_clear(ctx);
                continue;
            }
            check_model(&m, names[i], t);
            int64_t params = un_zoo_param_count(&m), want = expected_params(names[i], t);
            const un_shape *y = un_graph_shape(m.graph, un_zoo_output(&m));
            char ys[96];
            un_shape_str(y, ys, sizeof ys);
            printf("    %-5s %-13s batch %3lld  nodes %4d  weights %3d  params %11lld  out %s %s\n",
                   t ? "tiny" : "paper", names[i], (long long)m.batch, un_graph_node_count(m.graph),
                   un_zoo_weight_count(&m), (long long)params, ys,
                   m.loss == UN_LOSS_CE ? "CE" : "MSE");
            if (want >= 0)
                EXPECT_EQ(params, want);
            un_model_deinit(&m);
        }
    un_ctx_free(ctx);
}

/* The paper numbers quoted in the report, spelled out. */
static void test_paper_counts(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_model m;
    EXPECT_OK(ctx, un_zoo_build(ctx, S, "mlp", false, 0, &m));
    EXPECT_EQ(un_zoo_param_count(&m), 956301312LL); /* 2 x (1024*8192 + 7*8192^2) */
    EXPECT_EQ(un_zoo_weight_count(&m), 16);
    un_model_deinit(&m);
    EXPECT_OK(ctx, un_zoo_build(ctx, S, "transformer", false, 0, &m));
    EXPECT_EQ(un_zoo_param_count(&m), 302089216LL); /* 24 x 12587008 + 1024 */
    EXPECT_EQ(un_zoo_weight_count(&m), 24 * 10 + 1);
    const un_shape *x = un_graph_shape(m.graph, (un_ref){m.inputs[0].node, 0});
    EXPECT_EQ(x->dim[1], 512);
    EXPECT_EQ(x->dim[2], 1024);
    un_model_deinit(&m);
    un_ctx_free(ctx);
}

static void test_json_roundtrip(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    int n = 0;
    const char *const *names = un_zoo_names(&n);
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < n; i++) {
            un_model m;
            if (un_zoo_build(ctx, S, names[i], t, 0, &m) != UN_OK) {
                EXPECT_OK(ctx, UN_ERR_INVALID);
                un_ctx_clear(ctx);
                continue;
            }
            un_buf buf = {0};
            un_graph *back = NULL;
            EXPECT_OK(ctx, un_graph_to_json(ctx, m.graph, &buf));
            EXPECT_OK(ctx, un_graph_from_json(ctx, S, names[i], buf.data, buf.len, &back));
            if (back) {
                EXPECT_EQ(un_graph_hash(back), un_graph_hash(m.graph));
                EXPECT_EQ(un_graph_node_count(back), un_graph_node_count(m.graph));
                EXPECT_EQ(un_graph_output_count(back), 1);
            }
            un_graph_free(back);
            un_buf_deinit(&buf);
            un_model_deinit(&m);
        }
    un_ctx_free(ctx);
}

/* Tiny models run in the float64 reference evaluator and give finite outputs. */
static void test_eval_tiny(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    int n = 0;
    const char *const *names = un_zoo_names(&n);
    for (int i = 0; i < n; i++) {
        un_model m;
        un_eval *ev = NULL;
        if (un_zoo_build(ctx, S, names[i], true, 2, &m) != UN_OK) {
            EXPECT_OK(ctx, UN_ERR_INVALID);
            un_ctx_clear(ctx);
            continue;
        }
        EXPECT_OK(ctx, un_eval_new(ctx, m.graph, UN_DOM_F64, &ev));
        if (ev) {
            EXPECT_OK(ctx, un_eval_fill_random(ev, 7));
            un_status st = un_eval_run(ev);
            EXPECT_OK(ctx, st);
            const un_ptensor *y = st == UN_OK ? un_eval_value(ev, un_zoo_output(&m)) : NULL;
            if (y) {
                int64_t ny = un_shape_numel(&y->shape), bad = 0;
                double sum = 0;
                for (int64_t k = 0; k < ny; k++) {
                    bad += !isfinite(y->data[k].f);
                    sum += fabs(y->data[k].f);
                }
                EXPECT_EQ(bad, 0);
                EXPECT_TRUE(sum > 0);
            }
        }
        un_eval_free(ev);
        un_model_deinit(&m);
        un_ctx_clear(ctx);
    }
    un_ctx_free(ctx);
}

/* ---- data parallelism ---- */

/* Rebuilds m's graph for k devices the way data parallelism lays it out: every data input sharded
 * k ways along dim 0, every weight copied k times, every other op re-added so that inference
 * decides whether its sharding rules accept that. */
static un_status data_parallel(un_ctx *ctx, const un_model *m, int32_t k, un_graph **out) {
    const un_graph *g = m->graph;
    int32_t n = un_graph_node_count(g);
    int32_t *map = malloc(sizeof(int32_t) * (size_t)n);
    un_graph *d = un_graph_new(S);
    un_status st = UN_OK;
    for (int32_t t = 0; t < n && st == UN_OK; t++) {
        int32_t i = t;
        const un_node *nd = un_graph_node(g, i);
        if (nd->op == UN_OP_INPUT || nd->op == UN_OP_WEIGHT) {
            /* Inputs: the same parameters (shape, dtype, range) with dim 0 sharded k ways
             * (partition would refuse int inputs). Weights: a replicate op (un_eval_set fills
             * only the first copy of a source that carries a copy degree). */
            const un_op_spec *os = un_spec_op(S, nd->op);
            un_param p[UN_MAX_PARAMS];
            memcpy(p, nd->params, sizeof p);
            if (nd->op == UN_OP_INPUT) {
                int ish = un_spec_param_index(os, "shard");
                int rank = un_graph_shape(g, (un_ref){i, 0})->rank;
                EXPECT_TRUE(ish >= 0);
                if (ish < 0) {
                    st = UN_ERR_SPEC;
                    break;
                }
                p[ish].len = rank;
                for (int j = 0; j < rank; j++)
                    p[ish].v[j] = j == 0 ? k : 1;
                st = un_graph_add(ctx, d, nd->op, p, NULL, 0, nd->name, &map[i]);
                continue;
            }
            int32_t w = -1;
            char name[128];
            snprintf(name, sizeof name, "%s.replicate", nd->name);
            un_param r[UN_MAX_PARAMS];
            un_spec_param_defaults(un_spec_op(S, UN_OP_REPLICATE), r);
            r[un_spec_param_index(un_spec_op(S, UN_OP_REPLICATE), "degree")] = un_param_int(k);
            st = un_graph_add(ctx, d, nd->op, p, NULL, 0, nd->name, &w);
            if (st == UN_OK)
                st = un_graph_add(ctx, d, UN_OP_REPLICATE, r, (un_ref[]){{w, 0}}, 1, name, &map[i]);
            continue;
        }
        un_ref in[UN_MAX_INPUTS];
        for (int j = 0; j < nd->n_in; j++)
            in[j] = (un_ref){map[nd->in[j].node], nd->in[j].out};
        st = un_graph_add(ctx, d, nd->op, nd->params, in, nd->n_in, nd->name, &map[i]);
    }
    if (st == UN_OK) {
        un_ref y = un_zoo_output(m);
        st = un_graph_set_outputs(ctx, d, (un_ref[]){{map[y.node], y.out}}, 1);
    }
    free(map);
    if (st != UN_OK) {
        un_graph_free(d);
        d = NULL;
    }
    *out = d;
    return st;
}

static void test_data_parallel(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    int n = 0;
    const char *const *names = un_zoo_names(&n);
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < n; i++) {
            un_model m;
            if (un_zoo_build(ctx, S, names[i], t, 4, &m) != UN_OK) {
                EXPECT_OK(ctx, UN_ERR_INVALID);
                un_ctx_clear(ctx);
                continue;
            }
            un_graph *d = NULL;
            un_status st = data_parallel(ctx, &m, 2, &d);
            if (t == 1)
                printf("    %-13s data parallel x2: %s%s\n", names[i],
                       st == UN_OK ? "ok" : "refused: ", st == UN_OK ? "" : un_ctx_errmsg(ctx));
            /* batch_norm's statistics forbid a sharded batch; charlm's reshapes merge the batch
             * with the sequence, which the reshape rule of specs/ops.json (in0[0] == shape[0])
             * refuses, though a relaxed rule (shape[0] % k == 0) would be sound; the rest must
             * accept it end to end. */
            bool named_bn =
                strcmp(names[i], "resnext50") == 0 || strcmp(names[i], "inception_v3") == 0;
            EXPECT_EQ(m.batch_bn, named_bn);
            EXPECT_EQ(m.batch_rs, strcmp(names[i], "charlm") == 0);
            if (m.batch_bn)
                EXPECT_TRUE(st != UN_OK && strstr(un_ctx_errmsg(ctx), "(batch_norm)"));
            else if (m.batch_rs)
                EXPECT_TRUE(st == UN_OK || strstr(un_ctx_errmsg(ctx), "(reshape)"));
            else
                EXPECT_OK(ctx, st);
            if (st == UN_OK && d && t == 1) {
                double err = -1;
                EXPECT_OK(ctx, un_eval_compare(ctx, m.graph, d, UN_DOM_F64, 11, 1e-9, &err));
                EXPECT_TRUE(err >= 0 && err <= 1e-9);
            }
            un_graph_free(d);
            un_model_deinit(&m);
            un_ctx_clear(ctx);
        }
    un_ctx_free(ctx);
}

int main(void) {
    static const test_case cases[] = {
        {"names", test_names},
        {"unknown", test_unknown},
        {"batch_one", test_batch_one},
        {"build_all", test_build_all},
        {"paper_counts", test_paper_counts},
        {"json_roundtrip", test_json_roundtrip},
        {"eval_tiny", test_eval_tiny},
        {"data_parallel", test_data_parallel},
    };
    return TEST_RUN_WITH_SPEC(cases, &S);
}
