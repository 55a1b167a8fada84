/* tests/test_onnx.c - ONNX import (pcg/onnx.h) on the small exported models of tests/data/onnx
 * (written by scripts/onnx/make_test_data.py from PyTorch, so no Python is needed here): each
 * imports, computes PyTorch's float64 output on the stored input with its initializers, has
 * PyTorch's parameter count and the expected operators; the programs read it (unity-pcg show,
 * run; unity-train serial and data parallel with the loss falling, --save/--load); bad input is
 * one error line each. In a build without protobuf-c the import must say it is unavailable. */
#include "pcg/eval.h"
#include "pcg/onnx.h"
#include "runtime/backend.h"
#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/exec.h"
#include "tests/cli.h"

#define DATA "tests/data/onnx/"

static un_spec *spec;

static const char *const good[] = {"cnn", "cnn_eval", "mlp", "emb", "tenc"};

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)(n > 0 ? n : 1));
    *len = b && n > 0 ? fread(b, 1, (size_t)n, f) : 0;
    fclose(f);
    return b;
}

static int64_t torch_params(const char *name) {
    FILE *f = fopen(DATA "params.txt", "r");
    char nm[64];
    long long n;
    int64_t r = -1;
    while (f && fscanf(f, "%63s %lld", nm, &n) == 2)
        if (strcmp(nm, name) == 0)
            r = n;
    if (f)
        fclose(f);
    return r;
}

static int count_op(const un_graph *g, un_op op) {
    int n = 0;
    for (int32_t i = 0; i < un_graph_node_count(g); i++)
        n += un_graph_node(g, i)->op == op;
    return n;
}

/* Forward pass of m on its stored input; the largest |ours - torch| / max |torch|. */
static double forward_error(un_ctx *ctx, const un_onnx *m, const char *name) {
    char p[256];
    size_t lin = 0, lout = 0;
    snprintf(p, sizeof p, DATA "%s.in", name);
    char *in = slurp(p, &lin);
    snprintf(p, sizeof p, DATA "%s.out", name);
    char *want = slurp(p, &lout);
    const un_graph *g = m->graph;
    un_eval *ev = NULL;
    double err = INFINITY;
    un_val *v = NULL;
    un_status st = un_eval_new(ctx, g, UN_DOM_F64, &ev);
    int64_t at = 0;
    bool input_done = false;
    for (int32_t id = 0; st == UN_OK && id < un_graph_node_count(g); id++) {
        const un_node *nd = un_graph_node(g, id);
        int64_t n = un_shape_numel(&nd->inf.out[0]);
        if (nd->op != UN_OP_WEIGHT && !(nd->op == UN_OP_INPUT && !input_done))
            continue;
        v = realloc(v, (size_t)n * sizeof *v);
        for (int64_t i = 0; i < n; i++) {
            if (nd->op == UN_OP_WEIGHT) {
                v[i].f = m->values[at + i];
            } else if (nd->inf.out[0].dtype == UN_DT_INT) {
                int64_t x = 0;
                if (in && (size_t)(8 * i + 8) <= lin)
                    memcpy(&x, in + 8 * i, 8);
                v[i].f = (double)x;
            } else {
                float x = 0;
                if (in && (size_t)(4 * i + 4) <= lin)
                    memcpy(&x, in + 4 * i, 4);
                v[i].f = x;
            }
        }
        if (nd->op == UN_OP_WEIGHT)
            at += n;
        else
            input_done = true;
        st = un_eval_set(ev, id, v);
    }
    EXPECT_OK(ctx, st);
    if (st == UN_OK)
        st = un_eval_run(ev);
    EXPECT_OK(ctx, st);
    int64_t no = un_shape_numel(un_graph_shape(g, un_graph_output(g, 0)));
    EXPECT_EQ(lout, (size_t)no * 8);
    if (st == UN_OK && want && lout == (size_t)no * 8) {
        v = realloc(v, (size_t)no * sizeof *v);
        st = un_ptensor_gather(ctx, un_eval_value(ev, un_graph_output(g, 0)), UN_DOM_F64, v);
        EXPECT_OK(ctx, st);
        double mx = 0, d = 0;
        for (int64_t i = 0; i < no; i++) {
            double w;
            memcpy(&w, want + 8 * i, 8);
            mx = fmax(mx, fabs(w));
            d = fmax(d, fabs(v[i].f - w));
        }
        err = d / (mx > 0 ? mx : 1);
    }
    un_eval_free(ev);
    free(v);
    free(in);
    free(want);
    return err;
}

/* The runtime's float32 forward pass (one CPU device) of m on its stored input, with the
 * initializers as weights; the largest |ours - torch f64| / max |torch|. */
static double runtime_error(un_ctx *ctx, const un_onnx *m, const char *name) {
    char p[256];
    size_t lin = 0, lout = 0;
    snprintf(p, sizeof p, DATA "%s.in", name);
    char *in = slurp(p, &lin);
    snprintf(p, sizeof p, DATA "%s.out", name);
    char *want = slurp(p, &lout);
    const un_graph *g = m->graph;
    un_comm_group *grp = NULL;
    un_backend *be = NULL;
    un_exec *ex = NULL;
    float *y = NULL;
    double err = INFINITY;
    un_status st = un_comm_local_group_new(ctx, 1, &grp);
    if (st == UN_OK)
        st = un_backend_cpu_new(ctx, UN_PREC_F32, 1, &be);
    if (st == UN_OK)
        st = un_exec_new(ctx, g, un_comm_local_get(grp, 0), be, &ex);
    EXPECT_OK(ctx, st);
    if (st == UN_OK) {
        float *lw = calloc((size_t)un_exec_lparam_count(ex) + 1, sizeof *lw);
        int64_t at = 0;
        bool input_done = false;
        for (int32_t id = 0; id < un_graph_node_count(g); id++) {
            const un_node *nd = un_graph_node(g, id);
            int64_t n = un_shape_numel(&nd->inf.out[0]);
            if (nd->op == UN_OP_WEIGHT) {
                memcpy(lw + un_exec_lparam_offset(ex, id), m->values + at, (size_t)n * sizeof *lw);
                at += n;
            } else if (nd->op == UN_OP_INPUT && !input_done) {
                size_t es = nd->inf.out[0].dtype == UN_DT_INT ? 8 : 4;
                if (in && lin == (size_t)n * es)
                    memcpy(un_exec_source(ex, id), in, lin);
                input_done = true;
            }
        }
        EXPECT_OK(ctx, un_exec_params_scatter(ctx, ex, lw, un_exec_params(ex)));
        free(lw);
        st = un_exec_forward(ctx, ex, 0);
        EXPECT_OK(ctx, st);
    }
    int64_t no = un_shape_numel(un_graph_shape(g, un_graph_output(g, 0)));
    if (st == UN_OK && want && lout == (size_t)no * 8) {
        y = malloc((size_t)no * sizeof *y);
        st = un_exec_output_gather(ctx, ex, 0, y);
        EXPECT_OK(ctx, st);
        double mx = 0, d = 0;
        for (int64_t i = 0; st == UN_OK && i < no; i++) {
            double w;
            memcpy(&w, want + 8 * i, 8);
            mx = fmax(mx, fabs(w));
            d = fmax(d, fabs(y[i] - w));
        }
        err = st == UN_OK ? d / (mx > 0 ? mx : 1) : INFINITY;
    }
    free(y);
    un_exec_free(ex);
    un_backend_free(be);
    un_comm_local_group_free(grp);
    free(in);
    free(want);
    return err;
}

static void test_unavailable(void) {
    if (un_onnx_available())
        return;
    un_ctx *ctx = un_ctx_new(NULL);
    un_onnx m;
    EXPECT_EQ(un_onnx_import(ctx, spec, DATA "cnn.onnx", NULL, &m), UN_ERR_UNAVAILABLE);
    EXPECT_TRUE(m.graph == NULL);
    printf("    onnx: not in this build (protoc-c or protobuf-c missing); the rest is skipped\n");
    un_ctx_free(ctx);
}

/* Each model: PyTorch's float64 output (reference evaluator in float64, and the runtime in
 * float32) and parameter count. */
static void test_values(void) {
    if (!un_onnx_available())
        return;
    un_ctx *ctx = un_ctx_new(NULL);
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        char p[256];
        snprintf(p, sizeof p, DATA "%s.onnx", good[i]);
        un_onnx m;
        un_status st = un_onnx_import(ctx, spec, p, NULL, &m);
        EXPECT_OK(ctx, st);
        if (st != UN_OK)
            continue;
        EXPECT_EQ(m.onnx_params, torch_params(good[i]));
        EXPECT_EQ(m.n_values, m.onnx_params);
        double err = forward_error(ctx, &m, good[i]);
        EXPECT_TRUE(err <= 1e-6);
        double rerr = runtime_error(ctx, &m, good[i]);
        EXPECT_TRUE(rerr <= 1e-4);
        printf("    %s: %lld parameters; relative error against torch float64: reference evaluator "
               "%.1e, runtime float32 %.1e\n",
               good[i], (long long)m.onnx_params, err, rerr);
        un_onnx_deinit(&m);
    }
    un_ctx_free(ctx);
}

/* The patterns map to our operators: Gelu's Erf form, LayerNormalization's ReduceMean form,
 * MatMul + Add as one linear with bias, training BatchNormalization, inference BatchNormalization
 * as a depthwise conv, Gather as an embedding, Pad + AveragePool as one pooling. */
static void test_mapping(void) {
    if (!un_onnx_available())
        return;
    un_ctx *ctx = un_ctx_new(NULL);
    un_onnx m;
    EXPECT_OK(ctx, un_onnx_import(ctx, spec, DATA "mlp.onnx", NULL, &m));
    if (m.graph) {
        EXPECT_EQ(count_op(m.graph, UN_OP_GELU), 1);
        EXPECT_EQ(count_op(m.graph, UN_OP_LINEAR), 3);
        EXPECT_EQ(count_op(m.graph, UN_OP_EW_ADD), 0);
        EXPECT_EQ(count_op(m.graph, UN_OP_SCALAR_MUL), 1);
        EXPECT_EQ(m.opset, 13);
    }
    un_onnx_deinit(&m);
    EXPECT_OK(ctx, un_onnx_import(ctx, spec, DATA "tenc.onnx", NULL, &m));
    if (m.graph) {
        EXPECT_EQ(count_op(m.graph, UN_OP_LAYER_NORM), 2);
        EXPECT_EQ(count_op(m.graph, UN_OP_REDUCE_MEAN), 0);
        EXPECT_EQ(count_op(m.graph, UN_OP_SOFTMAX), 1);
        EXPECT_TRUE(count_op(m.graph, UN_OP_BATCH_MATMUL) == 2);
    }
    un_onnx_deinit(&m);
    EXPECT_OK(ctx, un_onnx_import(ctx, spec, DATA "cnn.onnx", NULL, &m));
    if (m.graph) {
        EXPECT_EQ(count_op(m.graph, UN_OP_BATCH_NORM), 2);
        EXPECT_EQ(count_op(m.graph, UN_OP_POOL2D), 3);
        EXPECT_EQ(count_op(m.graph, UN_OP_SPLIT), 1);
        EXPECT_TRUE(un_graph_find(m.graph, "bn.weight") >= 0);
    }
    un_onnx_deinit(&m);
    EXPECT_OK(ctx, un_onnx_import(ctx, spec, DATA "cnn_eval.onnx", NULL, &m));
    if (m.graph) {
        EXPECT_EQ(count_op(m.graph, UN_OP_BATCH_NORM), 0);
        EXPECT_EQ(count_op(m.graph, UN_OP_CONV2D), 3);
    }
    un_onnx_deinit(&m);
    EXPECT_OK(ctx, un_onnx_import(ctx, spec, DATA "dropout.onnx", NULL, &m));
    if (m.graph) { /* training-mode Dropout with ratio 0.2 */
        EXPECT_EQ(count_op(m.graph, UN_OP_DROPOUT), 1);
        const un_node *y = un_graph_node(m.graph, un_graph_output(m.graph, 0).node);
        int rp = un_spec_param_index(un_spec_op(spec, UN_OP_DROPOUT), "rate_pct");
        EXPECT_TRUE(y->op == UN_OP_DROPOUT && rp >= 0 && y->params[rp].v[0] == 20);
    }
    un_onnx_deinit(&m);
    EXPECT_OK(ctx, un_onnx_import(ctx, spec, DATA "emb.onnx", NULL, &m));
    if (m.graph) {
        EXPECT_EQ(count_op(m.graph, UN_OP_EMBEDDING), 1);
        int32_t x = un_graph_find(m.graph, "x");
        EXPECT_TRUE(x >= 0 && un_graph_shape(m.graph, (un_ref){x, 0})->dtype == UN_DT_INT);
    }
    un_onnx_deinit(&m);
    un_ctx_free(ctx);
}

/* Bad files and options: one error naming the file and the reason, nothing returned. */
static void test_bad_input(void) {
    if (!un_onnx_available())
        return;
    un_ctx *ctx = un_ctx_new(NULL);
    un_onnx m;
    size_t len = 0;
    char *good_bytes = slurp(DATA "cnn.onnx", &len);
    EXPECT_TRUE(good_bytes && len > 100);
    static const char *const garbage = "this is not a protobuf \xff\xff\xff\xff\xff";
    struct {
        const char *name;
        const char *data;
        size_t len;
        const char *want;
    } files[] = {
        {"truncated.onnx", good_bytes, len / 2, "not an ONNX model"},
        {"garbage.onnx", garbage, strlen(garbage), "not an ONNX model"},
        {"empty.onnx", "", 0, "empty file"},
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        const char *p = cli_path(files[i].name);
        FILE *f = fopen(p, "wb");
        if (f) {
            fwrite(files[i].data, 1, files[i].len, f);
            fclose(f);
        }
        un_ctx_clear(ctx);
        un_status st = un_onnx_import(ctx, spec, p, NULL, &m);
        EXPECT_TRUE(st != UN_OK && m.graph == NULL && m.values == NULL);
        EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), files[i].want) != NULL);
        if (!strstr(un_ctx_errmsg(ctx), files[i].want))
            printf("    %s: %s\n", files[i].name, un_ctx_errmsg(ctx));
        EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), files[i].name) != NULL);
    }
    free(good_bytes);
    struct {
        const char *path, *shape, *want;
    } cases[] = {
        {DATA "cumsum.onnx", NULL, "node '/CumSum' (CumSum): unsupported operator"},
        {DATA "bcast.onnx", NULL, "node '/Add' (Add): operands float[2,3] and float[3] differ"},
        {DATA "opset11.onnx", NULL, "opset 11 is not supported (13 to 17 are)"},
        {DATA "dynamic.onnx", NULL, "input 'x' has a dynamic dim 0 ('batch'); give --input-shape"},
        {DATA "dynamic.onnx", "5", "does not give input 'x' 2 dims"},
        {DATA "dynamic.onnx", "5x6x", "does not give input 'x' 2 dims"},
        {DATA "dynamic.onnx", "5x7", "input 'x' dim 1 = 7, the file 6"},
        {DATA "missing.onnx", NULL, "missing.onnx"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        un_ctx_clear(ctx);
        un_status st = un_onnx_import(ctx, spec, cases[i].path, cases[i].shape, &m);
        EXPECT_TRUE(st != UN_OK && m.graph == NULL);
        bool ok = strstr(un_ctx_errmsg(ctx), cases[i].want) != NULL;
        EXPECT_TRUE(ok);
        if (!ok)
            printf("    %s: got '%s', wanted '%s'\n", cases[i].path, un_ctx_errmsg(ctx),
                   cases[i].want);
    }
    /* --input-shape fixes the dynamic batch, and the graph follows it */
    un_ctx_clear(ctx);
    EXPECT_OK(ctx, un_onnx_import(ctx, spec, DATA "dynamic.onnx", "8x6", &m));
    if (m.graph) {
        const un_shape *s = un_graph_shape(m.graph, un_graph_output(m.graph, 0));
        EXPECT_EQ(s->dim[0], 8);
        EXPECT_EQ(s->dim[1], 4);
    }
    un_onnx_deinit(&m);
    un_ctx_free(ctx);
}

/* Damaged models (random bytes replaced, deleted, duplicated, the file cut) import or fail with
 * a message; never a crash (the ASan build runs this too). */
static void test_fuzz(void) {
    if (!un_onnx_available())
        return;
    un_ctx *ctx = un_ctx_new(NULL);
    un_rng rng;
    un_rng_seed(&rng, 1234);
    static const char *const names[] = {DATA "cnn.onnx", DATA "tenc.onnx", DATA "emb.onnx"};
    int failed = 0, imported = 0;
    for (size_t f = 0; f < sizeof names / sizeof *names; f++) {
        size_t len = 0;
        char *orig = slurp(names[f], &len);
        char *buf = malloc(len + 64);
        EXPECT_TRUE(orig && buf);
        for (int it = 0; orig && buf && it < 150; it++) {
            memcpy(buf, orig, len);
            size_t n = len;
            int edits = 1 + (int)un_rng_below(&rng, 3);
            for (int e = 0; e < edits && n > 1; e++) {
                size_t at = un_rng_below(&rng, n);
                switch (un_rng_below(&rng, 4)) {
                case 0:
                    buf[at] = (char)un_rng_below(&rng, 256);
                    break;
                case 1:
                    memmove(buf + at, buf + at + 1, n - at - 1);
                    n--;
                    break;
                case 2: {
                    size_t k = 1 + un_rng_below(&rng, 16);
                    k = at + k > n ? n - at : k;
                    memmove(buf + at + k, buf + at, n - at);
                    n += k;
                    break;
                }
                default:
                    n = at + 1;
                }
            }
            const char *p = cli_path("fuzz.onnx");
            FILE *fp = fopen(p, "wb");
            if (fp) {
                fwrite(buf, 1, n, fp);
                fclose(fp);
            }
            un_onnx m;
            un_ctx_clear(ctx);
            un_status st = un_onnx_import(ctx, spec, p, NULL, &m);
            if (st == UN_OK) {
                imported++;
                EXPECT_TRUE(m.graph != NULL);
            } else {
                failed++;
                EXPECT_TRUE(m.graph == NULL && *un_ctx_errmsg(ctx));
            }
            un_onnx_deinit(&m);
        }
        free(orig);
        free(buf);
    }
    EXPECT_TRUE(failed > 0);
    printf("    450 damaged models: %d refused with a message, %d still import\n", failed,
           imported);
    un_ctx_free(ctx);
}

/* The programs: unity-pcg show/dot/run, unity-train serial and data parallel (the loss falls:
 * synthetic data cycles through 4 batches, so steps 1 and 29 see the same one), checkpoints, and
 * their bad-input lines. */
static void test_cli(void) {
    if (!un_onnx_available())
        return;
    const cli_result *r = cli_run("unity-pcg", "show " DATA "cnn.onnx");
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "batch_norm") && strstr(r->out, "onnx: opset 17, 245 parameters"));
    r = cli_run("unity-pcg", "dot " DATA "tenc.onnx");
    EXPECT_TRUE(r->code == 0 && strstr(r->out, "digraph"));
    r = cli_run("unity-pcg", cli_fmt("run " DATA "mlp.onnx --input " DATA "mlp.in --output %s/y"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(cli_exists("y"));
    cli_expect_clean_error("unity-pcg", "show " DATA "cumsum.onnx", "unsupported operator");
    cli_expect_clean_error("unity-pcg", "show " DATA "dynamic.onnx", "give --input-shape");
    cli_expect_clean_error("unity-pcg",
                           "run " DATA "mlp.onnx --input " DATA "cnn.in --output /dev/null",
                           "input 0 takes 30 float32");
    static const struct {
        const char *model, *flags;
    } runs[] = {{"cnn", "--loss ce"},    {"cnn", "--loss ce --devices 2"},
                {"mlp", "--loss ce"},    {"emb", "--devices 2"},
                {"tenc", "--devices 2"}, {"dynamic", "--input-shape 8x6 --loss ce --devices 2"}};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char args[512];
        snprintf(args, sizeof args, "--model " DATA "%s.onnx --steps 29 %s", runs[i].model,
                 runs[i].flags);
        r = cli_run("unity-train", args);
        double a = NAN, b = NAN;
        const char *l = strstr(r->out, "trained ");
        l = l ? strstr(l, "loss ") : NULL;
        bool ok = r->code == 0 && l && sscanf(l, "loss %lf -> %lf", &a, &b) == 2 && b < a;
        EXPECT_TRUE(ok);
        if (!ok)
            printf("    unity-train %s -> exit %d, %s%s\n", args, r->code, r->out, r->err);
    }
    r = cli_run("unity-train", cli_fmt("--model " DATA "mlp.onnx --steps 3 --quiet --loss ce "
                                       "--save %s/m.ckpt"));
    EXPECT_EQ(r->code, 0);
    r = cli_run("unity-train", cli_fmt("--model " DATA "mlp.onnx --steps 3 --quiet --loss ce "
                                       "--load %s/m.ckpt"));
    EXPECT_EQ(r->code, 0);
    cli_expect_clean_error("unity-train", "--model " DATA "opset11.onnx", "opset 11");
    cli_expect_clean_error("unity-train", "--model " DATA "dynamic.onnx", "give --input-shape");
    cli_expect_clean_error("unity-train", "--model mlp --tiny --input-shape 2x3",
                           "--input-shape applies to ONNX models only");
}

/* unity-train starts from the model's initializers on every rank's pieces: after one SGD step at
 * lr 1e-12 (float64) the saved checkpoint holds the imported values (to 1e-9), serial and with the
 * weights cut into pieces (tensor parallel on 2 devices, data parallel for tenc; one file
 * streamed to rank 0);
 * a seeded start would be far off. */
static void test_train_initializers(void) {
    if (!un_onnx_available())
        return;
    static const char *const models[] = {"mlp", "tenc"};
    static const char *const plans[] = {"--devices 1", "--devices 2 --strategy tensor",
                                        "--devices 2 --strategy data"};
    un_ctx *ctx = un_ctx_new(NULL);
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char p[256];
        snprintf(p, sizeof p, DATA "%s.onnx", models[i]);
        un_onnx m;
        EXPECT_OK(ctx, un_onnx_import(ctx, spec, p, NULL, &m));
        if (!m.graph)
            continue;
        double *w = calloc((size_t)m.n_values + 1, sizeof *w);
        for (size_t k = 0; k < sizeof plans / sizeof *plans; k++) {
            if (k == 2 && strcmp(models[i], "mlp") == 0)
                continue; /* its batch of 5 does not split 2 ways */
            char args[1024];
            snprintf(args, sizeof args,
                     "--model %s --steps 1 --optimizer sgd --lr 1e-12 --precision f64 --quiet %s "
                     "--save %s",
                     p, plans[k], cli_path("init.ckpt"));
            const cli_result *r = cli_run("unity-train", args);
            EXPECT_EQ(r->code, 0);
            EXPECT_OK(
                ctx, un_checkpoint_load(ctx, cli_path("init.ckpt"), m.graph, UN_PREC_F64, w, NULL));
            double worst = 0;
            for (int64_t x = 0; x < m.n_values; x++)
                worst = fmax(worst, fabs(w[x] - (double)m.values[x]));
            test__check(worst <= 1e-9, TEST__AT,
                        "%s %s: saved weights differ from the "
                        "initializers by %g",
                        models[i], plans[k], worst);
        }
        free(w);
        un_onnx_deinit(&m);
    }
    un_ctx_free(ctx);
}

int main(void) {
    if (!cli_init("/tmp/unity-onnx-XXXXXX"))
        return 1;
    static const test_case c[] = {{"unavailable", test_unavailable},
                                  {"values", test_values},
                                  {"mapping", test_mapping},
                                  {"bad_input", test_bad_input},
                                  {"fuzz", test_fuzz},
                                  {"cli", test_cli},
                                  {"train_initializers", test_train_initializers}};
    int rc = TEST_RUN_WITH_SPEC(c, &spec);
    return cli_cleanup() ? rc : 1;
}
