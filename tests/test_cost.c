/* test_cost.c - machine descriptions, the cost model and the simulator (search/machine.h,
 * search/cost.h, search/sim.h), and unity-train --estimate / --profile on bad input. */
#include "runtime/backend_cuda.h"
#include "runtime/exec.h"
#include "runtime/strategy.h"
#include "runtime/train.h"
#include "search/profile.h"
#include "search/sim.h"
#include "tests/cli.h"

static un_spec *spec;

static const char *const machine_files[] = {
    "specs/machines/cpu.json",    "specs/machines/v100x4.json",   "specs/machines/a100x8.json",
    "specs/machines/h100x8.json", "specs/machines/v100x192.json", "specs/machines/h200x1.json",
    "specs/machines/h100x1.json"};

static const char good[] =
    "{\"version\": 1, \"name\": \"t\", \"nodes\": 2, \"devices_per_node\": 2,"
    " \"device\": {\"kind\": \"x\", \"flops\": {\"f32\": 1e12}, \"mem_bw\": 1e11, \"memory\": %s},"
    " \"intra_node\": {\"bw\": 1e11, \"latency\": 1e-6},"
    " \"inter_node\": {\"bw\": 1e10, \"latency\": 1e-5, \"collective\": \"tree\"}}";

static un_machine machine_mem(const char *memory) {
    char text[1024];
    snprintf(text, sizeof text, good, memory);
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine m;
    EXPECT_OK(ctx, un_machine_parse(ctx, "t.json", text, strlen(text), &m));
    un_ctx_free(ctx);
    return m;
}

static void test_machine_files(void) {
    int devs[] = {2, 4, 8, 8, 192, 1, 1};
    for (size_t i = 0; i < sizeof machine_files / sizeof *machine_files; i++) {
        un_ctx *ctx = un_ctx_new(NULL);
        un_machine m;
        EXPECT_OK(ctx, un_machine_load(ctx, machine_files[i], &m));
        EXPECT_TRUE(m.dev.flops[UN_MPREC_F32] > 0 && m.dev.mem_bw > 0 && m.dev.memory > 0);
        if (i > 0)
            EXPECT_EQ(un_machine_devices(&m), devs[i]);
        /* the H200 and the H100 (one, and eight of them), where our CUDA backend ran, describe
         * its kernels (device.gpu) */
        EXPECT_EQ(m.dev.gpu.on, i == 3 || i >= 5);
        if (m.dev.gpu.on) { /* and they read back */
            un_buf b = {0};
            un_machine_to_json(&m, &b);
            un_machine m2;
            EXPECT_OK(ctx, un_machine_parse(ctx, "back.json", b.data, b.len, &m2));
            EXPECT_TRUE(m2.dev.gpu.on && m2.dev.gpu.sms == m.dev.gpu.sms &&
                        m2.dev.gpu.gemm_launch == m.dev.gpu.gemm_launch &&
                        m2.dev.gpu.reserve == m.dev.gpu.reserve && m.dev.gpu.reserve > 0 &&
                        m2.dev.gpu.optimizer_bw == m.dev.gpu.optimizer_bw);
            un_buf_deinit(&b);
        }
        un_ctx_free(ctx);
    }
    un_machine m = machine_mem("1e9");
    EXPECT_TRUE(un_machine_link(&m, 0, 1) == &m.intra);
    EXPECT_TRUE(un_machine_link(&m, 1, 2) == &m.inter);
    EXPECT_EQ(m.inter.algo, UN_COLL_TREE);
    /* the JSON the measuring tool writes reads back */
    un_buf b = {0};
    un_machine_to_json(&m, &b);
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine m2;
    EXPECT_OK(ctx, un_machine_parse(ctx, "back.json", b.data, b.len, &m2));
    EXPECT_NEAR(m2.inter.bw, m.inter.bw, 1);
    un_ctx_free(ctx);
    un_buf_deinit(&b);
}

static void expect_bad(const char *text, const char *want) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine m;
    un_status st = un_machine_parse(ctx, "bad.json", text, strlen(text), &m);
    EXPECT_TRUE(st != UN_OK);
    const char *msg = un_ctx_errmsg(ctx);
    bool ok = strstr(msg, "bad.json") && strstr(msg, want) && !strchr(msg, '\n');
    if (!ok)
        printf("  message: %s (want '%s')\n", msg, want);
    EXPECT_TRUE(ok);
    EXPECT_EQ(m.nodes, 0);
    un_ctx_free(ctx);
}

static void test_machine_bad(void) {
    char t[1024];
    snprintf(t, sizeof t, good, "-1");
    expect_bad(t, "$.device.memory: must be greater than 0");
    snprintf(t, sizeof t, good, "\"lots\"");
    expect_bad(t, "$.device.memory: expected a number");
    expect_bad("{\"version\": 1, \"name\": \"t\", \"nodes\": 2, \"devices_per_node\": 2,"
               " \"device\": {\"kind\": \"x\", \"flops\": {\"f32\": 1e12}, \"mem_bw\": 1,"
               " \"memory\": 1}, \"intra_node\": {\"bw\": 1, \"latency\": 0}}",
               "missing member 'inter_node'");
    expect_bad("{\"version\": 1, \"name\": \"t\", \"nodes\": 1, \"devices_per_node\": 2,"
               " \"device\": {\"kind\": \"x\", \"flops\": {\"f16\": 1e12}, \"mem_bw\": 1,"
               " \"memory\": 1}, \"intra_node\": {\"bw\": 1, \"latency\": 0}}",
               "$.device.flops: missing member 'f32'");
    expect_bad("{\"version\": 1, \"name\": \"t\", \"nodes\": 1, \"devices_per_node\": 2,"
               " \"device\": {\"kind\": \"x\", \"flops\": {\"f32\": 1}, \"mem_bw\": 1,"
               " \"memory\": 1}, \"intra_node\": {\"bw\": 1, \"latency\": 0, \"collective\": "
               "\"star\"}}",
               "$.intra_node.collective: unknown collective 'star'");
    expect_bad("{\"version\": 1, \"name\": \"t\", \"nodes\": 0}", "$.nodes: must be in 1..65536");
    expect_bad("{\"version\": 2}", "$.version: unsupported version 2");
    expect_bad("{\"version\": 1, \"name\": \"t\", \"nodes\": 1, \"devices_per_node\": 1, "
               "\"speed\": 3}",
               "speed");
    expect_bad("[1,", "bad.json");
    /* device.gpu: every member required, numbers in range, whole counts, no unknown member */
    static const char gpu[] =
        "{\"version\": 1, \"name\": \"t\", \"nodes\": 1, \"devices_per_node\": 1,"
        " \"device\": {\"kind\": \"x\", \"flops\": {\"f32\": 1e12}, \"mem_bw\": 1e11,"
        " \"memory\": 1, \"gpu\": %s}, \"intra_node\": {\"bw\": 1, \"latency\": 0}}";
    static const char *const bad_gpu[][2] = {
        {"{\"launch\": 4e-6, \"gemm_launch\": 6e-6, \"sms\": 132.5, \"gemm_tile\": 64, "
         "\"gemm_latency\": 5e-6, \"mem_latency\": 6e-7}",
         "$.device.gpu.sms: must be a whole number in 1..65536 (got 132.5)"},
        {"{\"launch\": 4e-6, \"gemm_launch\": 6e-6, \"sms\": 132, \"gemm_tile\": 0, "
         "\"gemm_latency\": 5e-6, \"mem_latency\": 6e-7}",
         "$.device.gpu.gemm_tile: must be greater than 0"},
        {"{\"launch\": -1, \"gemm_launch\": 6e-6, \"sms\": 132, \"gemm_tile\": 64, "
         "\"gemm_latency\": 5e-6, \"mem_latency\": 6e-7}",
         "$.device.gpu.launch: must be at least 0"},
        {"{\"launch\": 4e-6, \"gemm_launch\": \"fast\", \"sms\": 132, \"gemm_tile\": 64, "
         "\"gemm_latency\": 5e-6, \"mem_latency\": 6e-7}",
         "$.device.gpu.gemm_launch: expected a number"},
        {"{\"launch\": 4e-6, \"gemm_launch\": 6e-6, \"sms\": 132, \"gemm_tile\": 64, "
         "\"gemm_latency\": 5e-6}",
         "$.device.gpu: missing member 'mem_latency'"},
        {"{\"launch\": 4e-6, \"gemm_launch\": 6e-6, \"sms\": 132, \"gemm_tile\": 64, "
         "\"gemm_latency\": 5e-6, \"mem_latency\": 6e-7, \"warps\": 4}",
         "warps"},
        {"{\"launch\": 4e-6, \"gemm_launch\": 6e-6, \"sms\": 132, \"gemm_tile\": 64, "
         "\"gemm_latency\": 5e-6, \"mem_latency\": 6e-7, \"reserve\": -1}",
         "$.device.gpu.reserve: must be at least 0"},
        {"{\"launch\": 4e-6, \"gemm_launch\": 6e-6, \"sms\": 132, \"gemm_tile\": 64, "
         "\"gemm_latency\": 5e-6, \"mem_latency\": 6e-7, \"optimizer_bw\": 0}",
         "$.device.gpu.optimizer_bw: must be greater than 0"},
        {"[]", "$.device.gpu: expected"},
    };
    for (size_t i = 0; i < sizeof bad_gpu / sizeof *bad_gpu; i++) {
        char text[1024];
        snprintf(text, sizeof text, gpu, bad_gpu[i][0]);
        expect_bad(text, bad_gpu[i][1]);
    }
}

static un_cost_model *model_on(const un_machine *m, un_rulesdb *db) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_cost_model *cm = NULL;
    EXPECT_OK(ctx, un_cost_model_new(ctx, spec, m, UN_MPREC_F32, db, &cm));
    un_ctx_free(ctx);
    return cm;
}

/* Every regular op on its first example, and on the example with input 0's dim 0 doubled: both
 * costs positive, and the larger piece costs more. */
static void test_op_costs_grow(void) {
    un_machine m = machine_mem("1e9");
    un_cost_model *cm = model_on(&m, NULL);
    int checked = 0, ops = 0;
    for (int op = 0; op < UN_OP_COUNT; op++) {
        const un_op_spec *os = un_spec_op(spec, (un_op)op);
        if (os->kind != UN_OPK_REGULAR || os->n_examples == 0)
            continue;
        ops++;
        const un_example *ex = &os->examples[0];
        un_ctx *ctx = un_ctx_new(NULL);
        un_op_cost a, b;
        EXPECT_OK(ctx, un_cost_piece(ctx, cm, (un_op)op, ex->params, ex->in, ex->n_in, &a));
        EXPECT_TRUE(a.fwd > 0 && a.bwd > 0);
        /* grow every input's dim 0 that is the same size as input 0's (the batch), twice */
        un_shape in[UN_MAX_INPUTS];
        memcpy(in, ex->in, sizeof in);
        int64_t d0 = in[0].dim[0];
        for (int t = 0; t < ex->n_in; t++)
            if (in[t].rank > 0 && in[t].dim[0] == d0 && (t == 0 || !os->inputs[t].weight))
                in[t].dim[0] *= 2;
        un_ctx *c2 = un_ctx_new(NULL);
        if (un_cost_piece(c2, cm, (un_op)op, ex->params, in, ex->n_in, &b) == UN_OK) {
            bool ok = b.fwd > a.fwd && b.bwd > a.bwd;
            if (!ok)
                printf("  %s: %g -> %g (fwd), %g -> %g (bwd)\n", os->name, a.fwd, b.fwd, a.bwd,
                       b.bwd);
            EXPECT_TRUE(ok);
            checked++;
        }
        un_ctx_free(c2);
        un_ctx_free(ctx);
    }
    printf("  %d of %d regular ops checked on a larger piece\n", checked, ops);
    EXPECT_TRUE(checked * 4 >= ops * 3);
    EXPECT_STR_EQ(un_cost_warnings(cm), "");
    /* the second query of a piece is a cache hit */
    int64_t q, c, meas;
    un_cost_stats(cm, &q, &c, &meas);
    const un_op_spec *os = un_spec_op(spec, UN_OP_LINEAR);
    un_ctx *ctx = un_ctx_new(NULL);
    un_op_cost x;
    EXPECT_OK(ctx, un_cost_piece(ctx, cm, UN_OP_LINEAR, os->examples[0].params, os->examples[0].in,
                                 os->examples[0].n_in, &x));
    int64_t q2, c2, m2;
    un_cost_stats(cm, &q2, &c2, &m2);
    EXPECT_EQ(q2, q + 1);
    EXPECT_EQ(c2, c + 1);
    un_ctx_free(ctx);
    un_cost_model_free(cm);
}

/* The cost of one piece on machine m (one error: a failed test). */
static un_op_cost piece_cost(un_cost_model *cm, un_op op, const un_param *p, const un_shape *in,
                             int n_in) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_op_cost c;
    EXPECT_OK(ctx, un_cost_piece(ctx, cm, op, p, in, n_in, &c));
    un_ctx_free(ctx);
    return c;
}

/* Attention of 16 heads over [8, 512, 1024] (q, k, v) with [1024, 1024] projections. */
static void attention_16(un_param *p, un_shape mha[7]) {
    un_spec_param_defaults(un_spec_op(spec, UN_OP_MULTIHEAD_ATTENTION), p);
    p[0].v[0] = 16;
    for (int i = 0; i < 3; i++)
        mha[i] = un_shape_make(3, (int64_t[]){8, 512, 1024}, UN_DT_FLOAT);
    for (int i = 3; i < 7; i++)
        mha[i] = un_shape_make(2, (int64_t[]){1024, 1024}, UN_DT_FLOAT);
}

/* With device.gpu an op costs the kernels the CUDA backend launches (backend_cuda.c): linear's
 * GEMM and activation, its backward's two GEMMs, and for gelu the forward GEMM again (no stash);
 * attention's plans (the backward recomputes all but the output projection); conv2d's im2col,
 * GEMM and layout copy per chunk of images; a kernel costs at least its launch; the loss and
 * the zeroing of gradient buffers. */
static void test_gpu_kernels(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine m;
    EXPECT_OK(ctx, un_machine_load(ctx, "specs/machines/h200x1.json", &m));
    un_ctx_free(ctx);
    un_cost_model *cm = model_on(&m, NULL);
    const un_gpu_kernels *g = &m.dev.gpu;
    /* linear [4096, 1024] x [1024, 1024]: GEMMs well above their launch */
    un_param p[UN_MAX_PARAMS];
    un_spec_param_defaults(un_spec_op(spec, UN_OP_LINEAR), p);
    un_shape lin[2] = {un_shape_make(2, (int64_t[]){4096, 1024}, UN_DT_FLOAT),
                       un_shape_make(2, (int64_t[]){1024, 1024}, UN_DT_FLOAT)};
    un_op_cost none = piece_cost(cm, UN_OP_LINEAR, p, lin, 2);
    p[0].v[0] = 1; /* relu */
    un_op_cost relu = piece_cost(cm, UN_OP_LINEAR, p, lin, 2);
    p[0].v[0] = 4; /* gelu */
    un_op_cost gelu = piece_cost(cm, UN_OP_LINEAR, p, lin, 2);
    EXPECT_EQ(none.fwd_kernels, 1);
    EXPECT_EQ(none.bwd_kernels, 2);
    EXPECT_EQ(relu.fwd_kernels, 2);
    EXPECT_EQ(relu.bwd_kernels, 3);
    EXPECT_EQ(gelu.bwd_kernels, 4); /* the forward's GEMM again */
    double gemm = none.fwd;         /* one GEMM */
    EXPECT_TRUE(gemm > g->gemm_launch && gemm > g->gemm_latency);
    EXPECT_NEAR(none.bwd, 2 * gemm + (none.bwd - 2 * gemm), 1e-12);
    EXPECT_TRUE(relu.bwd > none.bwd);
    EXPECT_NEAR(gelu.bwd - relu.bwd, gemm - m.dev.op_overhead, 1e-3 * gemm);
    /* the cost differs from the spec's roofline, which counts no recompute */
    un_machine roof = m;
    roof.dev.gpu.on = false;
    un_cost_model *rm = model_on(&roof, NULL);
    un_op_cost rg = piece_cost(rm, UN_OP_LINEAR, p, lin, 2);
    EXPECT_EQ(rg.bwd_kernels, 0);
    EXPECT_TRUE(gelu.bwd > rg.bwd);
    un_cost_model_free(rm);

    /* attention, 16 heads: forward 2 heads + 5 steps, backward 6 heads + 14 (4 heads + 10 of its
     * own plan, the forward's 2 heads + 4 again) */
    un_shape mha[7];
    attention_16(p, mha);
    un_op_cost a = piece_cost(cm, UN_OP_MULTIHEAD_ATTENTION, p, mha, 7);
    EXPECT_EQ(a.fwd_kernels, 2 * 16 + 5);
    EXPECT_EQ(a.bwd_kernels, 6 * 16 + 14);
    EXPECT_TRUE(a.bwd > 2.5 * a.fwd); /* twice the forward's GEMMs, and the forward again */
    /* more heads of the same width: more (smaller) GEMMs, never cheaper */
    p[0].v[0] = 32;
    un_op_cost a32 = piece_cost(cm, UN_OP_MULTIHEAD_ATTENTION, p, mha, 7);
    EXPECT_EQ(a32.fwd_kernels, 2 * 32 + 5);
    EXPECT_TRUE(a32.fwd > a.fwd && a32.bwd > a.bwd);

    /* conv2d: im2col + GEMM + layout copy per chunk; a batch whose im2col passes the backend's
     * chunk (UN_CU_CONV_COL_MAX floats) runs in more chunks: more kernels */
    un_spec_param_defaults(un_spec_op(spec, UN_OP_CONV2D), p);
    p[2].v[0] = p[3].v[0] = 1; /* pad 1 */
    un_shape cv[2] = {un_shape_make(4, (int64_t[]){8, 64, 56, 56}, UN_DT_FLOAT),
                      un_shape_make(4, (int64_t[]){64, 64, 3, 3}, UN_DT_FLOAT)};
    un_op_cost c8 = piece_cost(cm, UN_OP_CONV2D, p, cv, 2);
    EXPECT_EQ(c8.fwd_kernels, 3); /* one chunk: im2col, GEMM, copy */
    /* backward: copy, im2col, dW GEMM, dcol GEMM, col2im */
    EXPECT_EQ(c8.bwd_kernels, 5);
    cv[0].dim[0] = 64; /* 64 x 64 x 9 x 3136 floats of col: chunks of 37 images, 2 of them */
    un_op_cost c64 = piece_cost(cm, UN_OP_CONV2D, p, cv, 2);
    EXPECT_EQ(c64.fwd_kernels, 6);
    EXPECT_EQ(c64.bwd_kernels, 10);
    EXPECT_TRUE(c64.fwd > 6 * c8.fwd && c64.bwd > 6 * c8.bwd);
    p[5].v[0] = 1; /* relu: bias and activation after the chunks; its derivative first */
    un_op_cost cr = piece_cost(cm, UN_OP_CONV2D, p, cv, 2);
    EXPECT_EQ(cr.fwd_kernels, c64.fwd_kernels + 1);
    EXPECT_EQ(cr.bwd_kernels, c64.bwd_kernels + 1);
    EXPECT_TRUE(cr.bwd > c64.bwd);

    /* a small element-wise op costs the executor's overhead and one launch */
    un_spec_param_defaults(un_spec_op(spec, UN_OP_RELU), p);
    un_shape small = un_shape_make(1, (int64_t[]){64}, UN_DT_FLOAT);
    un_op_cost r = piece_cost(cm, UN_OP_RELU, p, &small, 1);
    EXPECT_EQ(r.fwd_kernels, 1);
    EXPECT_NEAR(r.fwd, m.dev.op_overhead + g->launch, 1e-12);
    /* the loss: the label check's copies and kernel, the rows' kernel, the sums copied out */
    ctx = un_ctx_new(NULL);
    EXPECT_NEAR(un_cost_loss(ctx, cm, 64, 10), 5 * g->launch, 1e-12);
    un_ctx_free(ctx);
    /* the optimizer step: one kernel moving parameter, gradient and state at the rate timed for
     * it (optimizer_bw: Adam 7 floats a parameter, SGD 5), at mem_bw where none is given */
    EXPECT_TRUE(g->optimizer_bw > 0 && g->optimizer_bw < m.dev.mem_bw);
    ctx = un_ctx_new(NULL);
    EXPECT_NEAR(un_cost_optimizer(ctx, cm, "adam", 256000000),
                m.dev.op_overhead + 28 * 256e6 / g->optimizer_bw, 1e-12);
    EXPECT_NEAR(un_cost_optimizer(ctx, cm, "sgd", 1000), m.dev.op_overhead + g->launch,
                1e-12); /* a small one costs its launch */
    un_machine nob = m;
    nob.dev.gpu.optimizer_bw = 0;
    un_cost_model *om = model_on(&nob, NULL);
    EXPECT_NEAR(un_cost_optimizer(ctx, om, "sgd", 256000000),
                m.dev.op_overhead + 20 * 256e6 / m.dev.mem_bw, 1e-12);
    un_cost_model_free(om);
    un_ctx_free(ctx);
    /* zeroing gradients: a memset call per buffer; without device.gpu, bytes at mem_bw */
    EXPECT_NEAR(un_cost_zero(cm, 4096, 3), 3 * g->launch, 1e-12);
    EXPECT_NEAR(un_cost_zero(cm, 4e9, 2), 4e9 / m.dev.mem_bw, 1e-12);
    un_machine flat = m;
    flat.dev.gpu.on = false;
    un_cost_model *fm = model_on(&flat, NULL);
    EXPECT_NEAR(un_cost_zero(fm, 4096, 3), 4096 / m.dev.mem_bw, 1e-15);
    un_cost_model_free(fm);
    un_cost_model_free(cm);
}

/* An op whose spec lost its cost gets the default and one warning, never an error. */
static void test_cost_default(void) {
    static const char cost[] = "\"cost\": {\"flops\": \"numel(out0)\", \"bytes\": "
                               "\"4 * 2 * numel(out0)\", \"bwd_flops\": \"numel(out0)\", "
                               "\"bwd_bytes\": \"3 * (4 * 2 * numel(out0)) / 2\"},";
    un_ctx *ctx = un_ctx_new(NULL);
    char *text = NULL;
    size_t len = 0;
    EXPECT_OK(ctx, un_read_file(ctx, "specs/ops.json", &text, &len));
    char *at = text ? strstr(text, cost) : NULL;
    EXPECT_TRUE(at != NULL);
    if (!at) {
        free(text);
        un_ctx_free(ctx);
        return;
    }
    memset(at, ' ', sizeof cost - 1);
    un_spec *sp = NULL;
    EXPECT_OK(ctx, un_spec_parse(ctx, "nocost.json", text, len, &sp));
    un_machine m = machine_mem("1e9");
    un_cost_model *cm = NULL;
    EXPECT_OK(ctx, un_cost_model_new(ctx, sp, &m, UN_MPREC_F32, NULL, &cm));
    int costless = 0;
    for (int op = 0; cm && op < UN_OP_COUNT; op++) {
        const un_op_spec *os = un_spec_op(sp, (un_op)op);
        if (os->kind != UN_OPK_REGULAR || os->flops)
            continue;
        costless++;
        un_op_cost c;
        const un_example *ex = &os->examples[0];
        EXPECT_OK(ctx, un_cost_piece(ctx, cm, (un_op)op, ex->params, ex->in, ex->n_in, &c));
        EXPECT_TRUE(c.fwd > 0 && c.bwd > 0 && c.bytes > 0);
        EXPECT_TRUE(strstr(un_cost_warnings(cm), os->name) != NULL);
    }
    EXPECT_EQ(costless, 1);
    EXPECT_TRUE(strstr(un_cost_warnings(cm), "has no cost expression") != NULL);
    un_cost_model_free(cm);
    un_spec_free(sp);
    free(text);
    un_ctx_free(ctx);
}

static void test_collectives(void) {
    un_machine m = machine_mem("1e9");
    un_cost_model *cm = model_on(&m, NULL);
    int devs[4] = {0, 1, 2, 3};
    EXPECT_TRUE(un_cost_allreduce(cm, devs, 1, 1e6) == 0);
    EXPECT_TRUE(un_cost_p2p(cm, 1, 1, 1e6) == 0);
    double intra = un_cost_allreduce(cm, devs, 2, 1e6), inter = un_cost_allreduce(cm, devs, 4, 1e6);
    EXPECT_TRUE(intra > 0 && inter > intra);
    EXPECT_TRUE(un_cost_p2p(cm, 0, 2, 1e6) > un_cost_p2p(cm, 0, 1, 1e6));
    EXPECT_TRUE(un_cost_allreduce(cm, devs, 2, 2e6) > intra);
    un_cost_model_free(cm);
}

/* x -> relu -> partition(0, 2) -> combine(0, 2) -> relu on one device: no communication. */
static void test_roundtrip_one_device(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = un_graph_new(spec);
    int32_t x, h, p, c, y;
    EXPECT_OK(ctx, un_graph_add_input(ctx, g, "x", UN_OP_INPUT, 2, (int64_t[]){8, 16}, &x));
    EXPECT_OK(ctx, un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{x, 0}}, 1, "h", &h));
    EXPECT_OK(ctx, un_graph_add_parallel(ctx, g, UN_OP_PARTITION, (un_ref){h, 0}, 0, 2, "p", &p));
    EXPECT_OK(ctx, un_graph_add_parallel(ctx, g, UN_OP_COMBINE, (un_ref){p, 0}, 0, 2, "c", &c));
    EXPECT_OK(ctx, un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{c, 0}}, 1, "y", &y));
    un_machine m = machine_mem("1e9");
    un_cost_model *cm = model_on(&m, NULL);
    for (int mirror = 0; mirror < 2; mirror++) {
        un_sim_params sp = un_sim_params_default();
        sp.devices = 1;
        sp.mirror_sources = mirror;
        un_sim_result r;
        EXPECT_OK(ctx, un_sim_run(ctx, cm, g, &sp, &r));
        EXPECT_TRUE(r.comm_bytes == 0 && r.comm_total == 0 && r.crit_comm == 0);
        EXPECT_TRUE(r.step > 0);
        un_sim_result_deinit(&r);
        /* on two devices the pieces move */
        sp.devices = 2;
        EXPECT_OK(ctx, un_sim_run(ctx, cm, g, &sp, &r));
        EXPECT_TRUE(r.comm_bytes > 0);
        un_sim_result_deinit(&r);
    }
    un_cost_model_free(cm);
    un_graph_free(g);
    un_ctx_free(ctx);
}

/* The tiny MLP data parallel: the step is a schedule (less than the sum of all devices' work),
 * memory is reported, and a machine with too little memory says the plan does not fit. */
static void test_sim_mlp(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = NULL;
    un_train_opts o = un_train_opts_default();
    o.model = "mlp";
    o.tiny = true;
    o.devices = 2;
    int d = 0;
    EXPECT_OK(ctx, un_train_graph(ctx, spec, &o, &g, &d));
    EXPECT_EQ(d, 2);
    for (int big = 0; big < 2 && g; big++) {
        un_machine m = machine_mem(big ? "1e12" : "1e4");
        un_cost_model *cm = model_on(&m, NULL);
        un_sim_params sp = un_sim_params_default();
        sp.devices = 2;
        un_sim_result r;
        EXPECT_OK(ctx, un_sim_run(ctx, cm, g, &sp, &r));
        EXPECT_TRUE(r.step > 0 && r.step < r.compute_total + r.comm_total + 1.0);
        EXPECT_TRUE(r.mem[0] > 0 && r.mem_weights > 0 && r.mem_acts > 0);
        EXPECT_EQ(r.fits, big);
        un_buf b = {0};
        un_sim_report(g, &r, cm, &b);
        EXPECT_EQ(strstr(b.data, "DOES NOT FIT") != NULL, !big);
        EXPECT_TRUE(strstr(b.data, "critical path's top operators") != NULL);
        un_buf_deinit(&b);
        un_sim_result_deinit(&r);
        /* more devices than the machine has */
        sp.devices = 5;
        EXPECT_TRUE(un_sim_run(ctx, cm, g, &sp, &r) == UN_ERR_INVALID);
        un_cost_model_free(cm);
    }
    un_graph_free(g);
    un_ctx_free(ctx);
}

/* A new database cli_tmp/NAME (NULL when it would not open). */
static un_rulesdb *new_db(un_ctx *ctx, const char *name) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", cli_tmp, name);
    un_rulesdb *db = NULL;
    EXPECT_OK(ctx, un_rulesdb_open(ctx, path, spec, UN_RULESDB_CREATE, &db));
    return db;
}

/* A measured cost in rules.db replaces the analytic one for its device kind only. */
static void test_measured(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = new_db(ctx, "costs.db");
    const un_op_spec *os = un_spec_op(spec, UN_OP_RELU);
    const un_example *ex = &os->examples[0];
    un_rulesdb_cost c;
    memset(&c, 0, sizeof c);
    EXPECT_TRUE(un_cost_key(spec, UN_OP_RELU, ex->params, ex->in, ex->n_in, c.op_sig,
                            sizeof c.op_sig, c.shape, sizeof c.shape));
    snprintf(c.device, sizeof c.device, "x");
    c.fwd_ms = 3;
    c.bwd_ms = 5;
    EXPECT_OK(ctx, un_rulesdb_cost_put(ctx, db, &c));
    un_machine m = machine_mem("1e9");
    for (int other = 0; other < 2; other++) {
        if (other)
            snprintf(m.dev.kind, sizeof m.dev.kind, "y");
        un_cost_model *cm = model_on(&m, db);
        un_op_cost oc;
        EXPECT_OK(ctx, un_cost_piece(ctx, cm, UN_OP_RELU, ex->params, ex->in, ex->n_in, &oc));
        EXPECT_EQ(oc.measured, !other);
        if (!other)
            EXPECT_TRUE(oc.fwd == 3e-3 && oc.bwd == 5e-3);
        un_cost_model_free(cm);
    }
    /* optimizer steps: a timed count as timed; another count from the timed ones of this kind
     * (the line between the two around it, beyond them the nearest's time per parameter); a
     * kind or an algorithm with none timed, and an entry that is no count, the analytic time */
    static const struct {
        const char *sig, *shape, *device;
        double ms;
    } steps[] = {{"optimizer:adam", "float[1000]", "x", 1},
                 {"optimizer:adam", "float[3000]", "x", 2},
                 {"optimizer:adam", "float[bad]", "x", 7},
                 {"optimizer:adam", "float[2000]", "y", 9}};
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
        memset(&c, 0, sizeof c);
        snprintf(c.op_sig, sizeof c.op_sig, "%s", steps[i].sig);
        snprintf(c.shape, sizeof c.shape, "%s", steps[i].shape);
        snprintf(c.device, sizeof c.device, "%s", steps[i].device);
        c.fwd_ms = steps[i].ms;
        EXPECT_OK(ctx, un_rulesdb_cost_put(ctx, db, &c));
    }
    snprintf(m.dev.kind, sizeof m.dev.kind, "x");
    un_cost_model *cm = model_on(&m, db), *bare = model_on(&m, NULL);
    EXPECT_NEAR(un_cost_optimizer(ctx, cm, "adam", 1000), 1e-3, 1e-12);
    EXPECT_NEAR(un_cost_optimizer(ctx, cm, "adam", 2000), 1.5e-3, 1e-12);
    EXPECT_NEAR(un_cost_optimizer(ctx, cm, "adam", 2500), 1.75e-3, 1e-12);
    EXPECT_NEAR(un_cost_optimizer(ctx, cm, "adam", 6000), 4e-3, 1e-12);
    EXPECT_NEAR(un_cost_optimizer(ctx, cm, "adam", 500), 0.5e-3, 1e-12);
    EXPECT_NEAR(un_cost_optimizer(ctx, cm, "sgd", 2000), un_cost_optimizer(ctx, bare, "sgd", 2000),
                1e-15);
    EXPECT_TRUE(un_cost_optimizer(ctx, bare, "adam", 2000) != 1.5e-3);
    un_cost_model_free(cm);
    un_cost_model_free(bare);
    snprintf(m.dev.kind, sizeof m.dev.kind, "z");
    cm = model_on(&m, db);
    bare = model_on(&m, NULL);
    EXPECT_NEAR(un_cost_optimizer(ctx, cm, "adam", 2000),
                un_cost_optimizer(ctx, bare, "adam", 2000), 1e-15);
    un_cost_model_free(cm);
    un_cost_model_free(bare);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
}

/* A piece without an entry, where the cache has pieces of the same op and parameters on the
 * device kind: the model time scaled as those measured pieces compare with theirs (log-log
 * between the two around it, beyond them the nearest one's ratio), forward and backward apart;
 * an entry whose shape text is not the op's inputs is skipped; another op, another kind, or
 * no database: the model time as it is. */
static void test_scaled(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = new_db(ctx, "scaled.db");
    const un_param *rp = un_spec_op(spec, UN_OP_RELU)->examples[0].params;
    const un_param *tp = un_spec_op(spec, UN_OP_TANH)->examples[0].params;
    un_machine m = machine_mem("1e9");
    snprintf(m.dev.kind, sizeof m.dev.kind, "s");
    un_cost_model *bare = model_on(&m, NULL);
    un_shape sh[5];
    int64_t rows[5] = {50, 100, 200, 400, 800};
    double a[5], ab[5];
    for (int i = 0; i < 5; i++) {
        sh[i] = un_shape_make(2, (int64_t[]){rows[i], 100}, UN_DT_FLOAT);
        un_op_cost oc;
        EXPECT_OK(ctx, un_cost_piece(ctx, bare, UN_OP_RELU, rp, &sh[i], 1, &oc));
        a[i] = oc.fwd;
        ab[i] = oc.bwd;
    }
    /* measured: 100 rows at 10x / 4x the model, 400 rows at 5x / 4x; and a malformed one */
    const struct {
        int i;
        double f, b;
    } meas[] = {{1, 10, 4}, {3, 5, 4}};
    un_rulesdb_cost c;
    for (size_t k = 0; k < 3; k++) {
        memset(&c, 0, sizeof c);
        EXPECT_TRUE(un_cost_key(spec, UN_OP_RELU, rp, &sh[k < 2 ? meas[k].i : 0], 1, c.op_sig,
                                sizeof c.op_sig, c.shape, sizeof c.shape));
        snprintf(c.device, sizeof c.device, "s");
        if (k < 2) {
            c.fwd_ms = 1e3 * meas[k].f * a[meas[k].i];
            c.bwd_ms = 1e3 * meas[k].b * ab[meas[k].i];
        } else {
            snprintf(c.shape, sizeof c.shape, "float[7,x]");
            c.fwd_ms = c.bwd_ms = 1e6;
        }
        EXPECT_OK(ctx, un_rulesdb_cost_put(ctx, db, &c));
    }
    un_cost_model *cm = model_on(&m, db);
    un_op_cost oc;
    double f = log(a[2] / a[1]) / log(a[3] / a[1]);
    double want[5] = {10 * a[0], 10 * a[1],
                      exp(log(10 * a[1]) + f * (log(5 * a[3]) - log(10 * a[1]))), 5 * a[3],
                      5 * a[4]};
    for (int i = 0; i < 5; i++) {
        EXPECT_OK(ctx, un_cost_piece(ctx, cm, UN_OP_RELU, rp, &sh[i], 1, &oc));
        EXPECT_NEAR(oc.fwd, want[i], 1e-9 * want[i]);
        EXPECT_NEAR(oc.bwd, 4 * ab[i], 1e-9 * ab[i]);
        EXPECT_EQ(oc.measured, i == 1 || i == 3);
    }
    EXPECT_TRUE(want[2] < 10 * a[2] && want[2] > 5 * a[2]);
    un_op_cost ob;
    EXPECT_OK(ctx, un_cost_piece(ctx, cm, UN_OP_TANH, tp, &sh[2], 1, &oc));
    EXPECT_OK(ctx, un_cost_piece(ctx, bare, UN_OP_TANH, tp, &sh[2], 1, &ob));
    EXPECT_TRUE(oc.fwd == ob.fwd && oc.bwd == ob.bwd);
    int64_t q, cached, measured, scaled, model;
    un_cost_stats(cm, &q, &cached, &measured);
    un_cost_pieces(cm, &measured, &scaled, &model);
    EXPECT_TRUE(q == 6 && measured == 2 && scaled == 3);
    un_cost_model_free(cm);
    snprintf(m.dev.kind, sizeof m.dev.kind, "t");
    cm = model_on(&m, db);
    EXPECT_OK(ctx, un_cost_piece(ctx, cm, UN_OP_RELU, rp, &sh[2], 1, &oc));
    EXPECT_TRUE(oc.fwd == a[2] && !oc.measured);
    un_cost_model_free(cm);
    un_cost_model_free(bare);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
}

/* The tiny configuration of zoo model `model` under a strategy on `devices` devices. */
static un_graph *zoo_graph(const char *model, const char *strategy, int devices) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = NULL;
    un_train_opts o = un_train_opts_default();
    o.model = model;
    o.tiny = true;
    o.devices = devices;
    o.strategy = strategy;
    int d = 0;
    EXPECT_OK(ctx, un_train_graph(ctx, spec, &o, &g, &d));
    un_ctx_free(ctx);
    return g;
}

static un_sim_result sim_runtime(un_cost_model *cm, const un_graph *g, int devices) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_sim_params sp = un_sim_params_default();
    sp.mirror_sources = true;
    sp.devices = devices;
    un_sim_result r;
    EXPECT_OK(ctx, un_sim_run(ctx, cm, g, &sp, &r));
    un_ctx_free(ctx);
    return r;
}

/* Runtime semantics (the weights folded as the runtime stores them): a rank holds its weight
 * pieces (tensor parallelism halves them), data parallelism sums the gradients over the copies
 * (bytes moved, communication on the clock) and each copy's holder updates its shard (half the
 * optimizer state), serial moves nothing; the optimizer's sizes the profiler times are the
 * ranks' shards. */
static void test_sim_runtime(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *ser = zoo_graph("mlp", "serial", 1), *dp = zoo_graph("mlp", "data", 2),
             *tp = zoo_graph("mlp", "tensor", 2);
    int64_t total = 0, c[UN_SIM_MAX_RANK_COUNTS];
    int n = 0;
    for (int32_t id = 0; ser && id < un_graph_node_count(ser); id++)
        if (un_graph_node(ser, id)->op == UN_OP_WEIGHT)
            total += un_shape_numel(&un_graph_node(ser, id)->inf.out[0]);
    EXPECT_OK(ctx, un_sim_rank_param_counts(ctx, ser, c, &n));
    EXPECT_TRUE(n == 1 && c[0] == total);
    EXPECT_OK(ctx, un_sim_rank_param_counts(ctx, dp, c, &n));
    EXPECT_TRUE(n == 1 && c[0] == total / 2); /* each copy's holder updates its half */
    EXPECT_OK(ctx, un_sim_rank_param_counts(ctx, tp, c, &n));
    EXPECT_TRUE(n >= 1 && c[0] < total);
    un_machine m = machine_mem("1e12");
    un_cost_model *cm = model_on(&m, NULL);
    un_sim_result rs = sim_runtime(cm, ser, 1), rd = sim_runtime(cm, dp, 2),
                  rt = sim_runtime(cm, tp, 2);
    double wbytes = 4.0 * (double)total;
    EXPECT_NEAR(rs.mem_weights, wbytes, 1);
    EXPECT_NEAR(rd.mem_weights, wbytes, 1); /* a whole copy on each device */
    EXPECT_TRUE(rt.mem_weights < wbytes);
    EXPECT_TRUE(rs.comm_bytes == 0 && rs.comm_total == 0);
    /* the copy-group sum: each device receives half of its copy twice (scatter, gather) */
    EXPECT_TRUE(rd.comm_bytes >= 2 * wbytes && rd.comm_total > 0);
    EXPECT_TRUE(rd.wait == 0 && rs.wait == 0);
    EXPECT_NEAR(rs.mem_optim, 2 * wbytes, 1); /* Adam: two moments */
    EXPECT_NEAR(rd.mem_optim, wbytes, 1);     /* of half the weights */
    un_sim_result_deinit(&rs);
    un_sim_result_deinit(&rd);
    un_sim_result_deinit(&rt);
    un_cost_model_free(cm);
    un_graph_free(ser);
    un_graph_free(dp);
    un_graph_free(tp);
    un_ctx_free(ctx);
}

/* The CPU kernels' forward stash (layer_norm's row moments, attention's saved values) and their
 * largest scratch (im2col, an activation's derivative, attention's gradients): the simulator
 * counts them per device with the runtime's own functions, so on a machine of kind "cpu" its
 * stash and scratch are what the runtime's memory check adds (un_exec_estimate_bytes with and
 * without the CPU kernels) on every rank, for serial, data and the model's own tensor layouts; a
 * GPU machine keeps none. The runtime semantics' memory per device is the runtime's estimate, up to
 * the gaps of the runtime's arena layout (at most 3 %): activations live from their forward to
 * their last reader, their gradients from their last consumer's backward to their own (every tiny
 * model; before, the simulator held activations for the whole step: up to 12 % above). */
static void test_sim_stash(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine cpu;
    EXPECT_OK(ctx, un_machine_load(ctx, "specs/machines/cpu.json", &cpu));
    un_machine gpu = machine_mem("1e12");
    un_cost_model *ccm = model_on(&cpu, NULL), *gcm = model_on(&gpu, NULL);
    /* the last: linear weights of 1 MiB and more (per tower [1024, 513] and [513, 513]), whose
     * copy-group sums the runtime's local ranks (cpu devices: they share memory) make in chunks
     * in place (exec.c chunked_grad): no reduce-scatter bytes for them, a meet per such layer and
     * one at the end instead of the exchange; on the gpu (NCCL: apart) the reduce-scatter stays */
    static const struct {
        const char *model, *strategy;
        int devices;
        const char *config;
    } cases[] = {
        {"transformer", "serial", 1, NULL}, {"transformer", "data", 2, NULL},
        {"charlm", "data", 2, NULL},        {"mlp", "data", 2, NULL},
        {"resnext50", "serial", 1, NULL},   {"resnext50", "data", 2, NULL},
        {"inception_v3", "data", 2, NULL},  {"dlrm", "data", 2, NULL},
        {"xdl", "serial", 1, NULL},         {"candle_uno", "data", 2, NULL},
        {"mlp", "tensor", 2, NULL},         {"mlp", "data", 2, "layers=2,hidden=513,batch=8"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        un_graph *g = NULL, *f = NULL;
        un_train_opts o = un_train_opts_default();
        o.model = cases[i].model;
        o.tiny = cases[i].config == NULL;
        o.config = cases[i].config;
        o.devices = cases[i].devices;
        o.strategy = cases[i].strategy;
        int d = 0;
        EXPECT_OK(ctx, un_train_graph(ctx, spec, &o, &g, &d));
        EXPECT_OK(ctx, un_strategy_fold_weights(ctx, g, &f));
        un_sim_result rc = sim_runtime(ccm, g, d), rg = sim_runtime(gcm, g, d);
        double want = 0;
        for (int r = 0; r < d; r++) {
            int64_t with = un_exec_estimate_bytes(f, r, d, UN_PREC_F32, true, 2, 1);
            int64_t without = un_exec_estimate_bytes(f, r, d, UN_PREC_F32, true, 2, 0);
            EXPECT_TRUE(with >= without && without > 0);
            want += (double)(with - without);
            /* the simulator frees an activation after its last reader, as the runtime does
             * (runtime/README.md: one arena by lifetime), and counts the arena's peak of live
             * bytes; the runtime's arena may be larger than that peak (its layout's gaps) */
            test__check(rc.mem[r] >= 0.97 * (double)with && rc.mem[r] <= (double)with + 0.5,
                        TEST__AT, "%s %s rank %d: simulated %.0f B, runtime %lld B", cases[i].model,
                        cases[i].strategy, r, rc.mem[r], (long long)with);
            /* the gpu's ranks do not share memory: the reduce-scatter's scratch, no stash */
            int64_t apart = un_exec_estimate_bytes(f, r, d, UN_PREC_F32, false, 2, 0);
            /* (the chunked layers' pieces, live longer there, shift the arena's layout a little) */
            EXPECT_NEAR(rc.mem[r] - rg.mem[r], (double)(with - apart),
                        cases[i].config ? 1e-3 * (double)with : 0.5);
        }
        EXPECT_NEAR(rc.stash_all + rc.scratch_all, want, 0.5);
        EXPECT_TRUE(rg.stash_all == 0 && rg.mem_stash == 0 && rg.scratch_all == 0);
        /* convolutions take im2col scratch, relu linears their derivative's */
        EXPECT_TRUE(rc.scratch_all > 0 && rc.mem_scratch > 0);
        /* layer norm and attention keep what their backward reads; relu linears, convolutions
         * and embeddings nothing */
        if (strcmp(cases[i].model, "transformer") == 0 || strcmp(cases[i].model, "charlm") == 0)
            EXPECT_TRUE(rc.stash_all > 0 && rc.mem_stash > 0);
        int chunked = 0;
        for (int32_t id = 0; f && id < un_graph_node_count(f); id++)
            chunked += un_exec_chunked_weight(f, id, 4);
        EXPECT_EQ(chunked, cases[i].config ? 4 : 0);
        if (cases[i].config) { /* each device receives the other's half of every weight (f32) */
            EXPECT_NEAR(rg.comm_bytes - rc.comm_bytes, 2.0 * (1024 * 513 + 513 * 513) * 4, 0.5);
            EXPECT_EQ(rc.meets - rg.meets, chunked); /* + 1 at the end - 1 exchange */
        }
        un_sim_result_deinit(&rc);
        un_sim_result_deinit(&rg);
        un_graph_free(f);
        un_graph_free(g);
    }
    un_cost_model_free(ccm);
    un_cost_model_free(gcm);
    un_ctx_free(ctx);
}

/* With device.gpu the memory estimate adds what the CUDA backend holds beside the runtime's
 * buffers: its growable scratch, as large as its largest call (conv2d's chunk of col and Y, and
 * in the backward also dcol and the whole dY' and pre-activation; attention's plan buffers; a
 * relu linear's activation gradient beside its pre-activation; layer_norm's statistics), and the
 * process's reserve (device.gpu.reserve: the CUDA context, cuBLAS) on every device. */
static void test_gpu_memory(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine m;
    EXPECT_OK(ctx, un_machine_load(ctx, "specs/machines/h200x1.json", &m));
    EXPECT_TRUE(m.dev.gpu.reserve > 0);
    un_cost_model *cm = model_on(&m, NULL);
    un_param p[UN_MAX_PARAMS];
    un_spec_param_defaults(un_spec_op(spec, UN_OP_CONV2D), p);
    p[2].v[0] = p[3].v[0] = 1; /* pad 1: 56 x 56 out, 3136 */
    un_shape cv[2] = {un_shape_make(4, (int64_t[]){8, 64, 56, 56}, UN_DT_FLOAT),
                      un_shape_make(4, (int64_t[]){64, 64, 3, 3}, UN_DT_FLOAT)};
    un_op_cost c = piece_cost(cm, UN_OP_CONV2D, p, cv, 2);
    double col = 64.0 * 9 * 8 * 3136, y = 64.0 * 8 * 3136;
    EXPECT_NEAR(c.scratch_fwd, 4 * (col + y), 0.5);
    EXPECT_NEAR(c.scratch_bwd, 4 * (2 * col + y + 2 * y), 0.5);
    cv[0].dim[0] = 64; /* chunks of 37 images: col and Y of one chunk, dY' and pre of all 64 */
    c = piece_cost(cm, UN_OP_CONV2D, p, cv, 2);
    col = 64.0 * 9 * 37 * 3136, y = 64.0 * 37 * 3136;
    EXPECT_NEAR(c.scratch_fwd, 4 * (col + y), 0.5);
    EXPECT_NEAR(c.scratch_bwd, 4 * (2 * col + y + 2 * 64.0 * 64 * 3136), 0.5);
    /* attention [8, 512, 1024], 16 heads: Q, K, V, O (8 x 512 x 1024 each) and P (8 x 16 x 512
     * x 512) forward; the backward adds dO, dQ, dK, dV, dP and dS */
    un_shape mha[7];
    attention_16(p, mha);
    c = piece_cost(cm, UN_OP_MULTIHEAD_ATTENTION, p, mha, 7);
    double s = 8.0 * 512 * 1024, pr = 8.0 * 16 * 512 * 512;
    EXPECT_NEAR(c.scratch_fwd, 4 * (4 * s + pr), 0.5);
    EXPECT_NEAR(c.scratch_bwd, 4 * (8 * s + 3 * pr), 0.5);
    /* linear [4096, 1024] x [1024, 512]: none in the forward; with relu the backward's d pre and
     * pre, 2 x 4096 x 512; without an activation none */
    un_spec_param_defaults(un_spec_op(spec, UN_OP_LINEAR), p);
    un_shape lin[2] = {un_shape_make(2, (int64_t[]){4096, 1024}, UN_DT_FLOAT),
                       un_shape_make(2, (int64_t[]){1024, 512}, UN_DT_FLOAT)};
    c = piece_cost(cm, UN_OP_LINEAR, p, lin, 2);
    EXPECT_TRUE(c.scratch_fwd == 0 && c.scratch_bwd == 0);
    p[0].v[0] = 1;
    c = piece_cost(cm, UN_OP_LINEAR, p, lin, 2);
    EXPECT_TRUE(c.scratch_fwd == 0);
    EXPECT_NEAR(c.scratch_bwd, 4 * 2 * 4096.0 * 512, 0.5);
    /* the simulator: the largest call's scratch and the reserve on top of the buffers; without
     * device.gpu neither */
    un_machine bare = m, roof = m;
    bare.dev.gpu.reserve = 0;
    roof.dev.gpu.on = false;
    roof.dev.gpu.reserve = 0;
    un_cost_model *bm = model_on(&bare, NULL), *rm = model_on(&roof, NULL);
    static const char *const models[] = {"resnext50", "transformer", "mlp"};
    for (int i = 0; i < 3; i++) {
        un_graph *g = NULL;
        un_train_opts o = un_train_opts_default();
        o.model = models[i];
        o.tiny = true;
        int d = 0;
        EXPECT_OK(ctx, un_train_graph(ctx, spec, &o, &g, &d));
        double most = 0;
        bool *ng = calloc((size_t)un_graph_node_count(g), sizeof *ng);
        for (int32_t id = 0; id < un_graph_node_count(g); id++) { /* in topological order */
            const un_node *nd = un_graph_node(g, id);
            ng[id] = nd->op == UN_OP_WEIGHT;
            for (int t = 0; t < nd->n_in; t++)
                ng[id] |= ng[nd->in[t].node];
            if (un_op_kind_of(nd->op) != UN_OPK_REGULAR)
                continue;
            un_op_cost k;
            EXPECT_OK(ctx, un_cost_node(ctx, cm, g, id, &k));
            most = k.scratch_fwd > most ? k.scratch_fwd : most;
            if (ng[id]) /* its backward runs */
                most = k.scratch_bwd > most ? k.scratch_bwd : most;
        }
        free(ng);
        un_sim_result r = sim_runtime(cm, g, d), rb = sim_runtime(bm, g, d),
                      rr = sim_runtime(rm, g, d);
        EXPECT_TRUE(most > 0); /* convolutions, attention, relu linears */
        EXPECT_NEAR(r.mem_scratch, most, 0.5);
        EXPECT_NEAR(r.mem_reserve, m.dev.gpu.reserve, 0.5);
        EXPECT_NEAR(r.mem[0] - rb.mem[0], m.dev.gpu.reserve, 1);
        EXPECT_NEAR(rb.mem[0] - rr.mem[0], most, 1);
        EXPECT_TRUE(rr.mem_scratch == 0 && rr.mem_reserve == 0);
        un_sim_result_deinit(&r);
        un_sim_result_deinit(&rb);
        un_sim_result_deinit(&rr);
        un_graph_free(g);
    }
    un_cost_model_free(bm);
    un_cost_model_free(rm);
    un_cost_model_free(cm);
    un_ctx_free(ctx);
}

/* The meets of a step (runtime/comm.h un_comm_stats: the communicator calls that wait for
 * another device) are what the simulator's runtime semantics counts between its stretches of
 * work: a data-parallel step of the tiny MLP makes 2 (the gradients' reduce-scatter, the weights'
 * all-gather), a tensor-parallel one its piece transfers besides, a chunked layer's weights a
 * meet each and one more at the end. The loss is summed over the ranks only on the steps that
 * report it (runtime/train.c): with --log-every past the run, the first and the last, so of the
 * 2 timed steps (the first is not) one meets once more. Every rank of a real run counts the
 * same number per step; on a box with idle cores each is a sleep and a wake-up on the other
 * core, most of a small step (search/README.md "Meets"). */
static void test_sim_meets(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine cpu;
    EXPECT_OK(ctx, un_machine_load(ctx, "specs/machines/cpu.json", &cpu));
    un_cost_model *cm = model_on(&cpu, NULL);
    static const struct {
        const char *model, *strategy, *config;
        int min_meets;
    } cases[] = {{"mlp", "data", NULL, 2},
                 {"mlp", "tensor", NULL, 3},
                 {"transformer", "data", NULL, 2},
                 {"dlrm", "data", NULL, 2},
                 {"mlp", "data", "layers=2,hidden=513,batch=8", 5}};
    FILE *sink = fopen("/dev/null", "w");
    for (size_t i = 0; i < sizeof cases / sizeof *cases && sink; i++) {
        un_graph *g = NULL;
        un_train_opts o = un_train_opts_default();
        o.model = cases[i].model;
        o.tiny = cases[i].config == NULL;
        o.config = cases[i].config;
        o.devices = 2;
        o.threads = 2;
        o.strategy = cases[i].strategy;
        o.steps = 3;
        o.log_every = 1000; /* the loss sums: steps 0 and 2 */
        o.quiet = true;
        o.stats = true;
        o.out = sink;
        int d = 0;
        EXPECT_OK(ctx, un_train_graph(ctx, spec, &o, &g, &d));
        un_sim_result r = sim_runtime(cm, g, d);
        un_train_result tr;
        EXPECT_OK(ctx, un_train_run(ctx, &o, &tr));
        for (int k = 0; k < d && tr.dev; k++)
            test__check(tr.dev[k].meets == r.meets + 0.5 && r.meets >= cases[i].min_meets, TEST__AT,
                        "%s %s rank %d: %.2f meets a step, simulated %d", cases[i].model,
                        cases[i].strategy, k, tr.dev[k].meets, r.meets);
        un_train_result_deinit(&tr);
        un_sim_result_deinit(&r);
        un_graph_free(g);
    }
    if (sink)
        fclose(sink);
    un_cost_model_free(cm);
    un_ctx_free(ctx);
}

/* A plan whose output is a parallel op that receives a piece from another device (a combine of
 * a batch-split linear): the received piece lives to the step's end, as the output does in the
 * runtime; the simulated memory is the runtime's estimate on both ranks (it wrote outside its
 * arena's clock: the search of test_search_cli's rewrites crashed). */
static void test_sim_output_parallel(void) {
    static const char text[] =
        "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [8, 16]}},"
        " {\"name\": \"w\", \"op\": \"weight\", \"params\": {\"shape\": [16, 4]}},"
        " {\"name\": \"xp\", \"op\": \"partition\", \"in\": [\"x\"], \"params\": {\"dim\": 0}},"
        " {\"name\": \"wr\", \"op\": \"replicate\", \"in\": [\"w\"]},"
        " {\"name\": \"y\", \"op\": \"linear\", \"in\": [\"xp\", \"wr\"]},"
        " {\"name\": \"yc\", \"op\": \"combine\", \"in\": [\"y\"], \"params\": {\"dim\": 0}}]}";
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = NULL, *f = NULL;
    EXPECT_OK(ctx, un_graph_from_json(ctx, spec, "comb.json", text, strlen(text), &g));
    EXPECT_OK(ctx, un_strategy_fold_weights(ctx, g, &f));
    un_machine cpu;
    EXPECT_OK(ctx, un_machine_load(ctx, "specs/machines/cpu.json", &cpu));
    un_cost_model *cm = model_on(&cpu, NULL);
    un_sim_result r = sim_runtime(cm, g, 2);
    for (int k = 0; k < 2 && r.mem; k++) {
        int64_t want = un_exec_estimate_bytes(f, k, 2, UN_PREC_F32, true, 2, 1);
        test__check(r.mem[k] >= 0.97 * (double)want && r.mem[k] <= (double)want + 0.5, TEST__AT,
                    "rank %d: simulated %.0f B, runtime %lld B", k, r.mem[k], (long long)want);
    }
    un_sim_result_deinit(&r);
    un_cost_model_free(cm);
    un_graph_free(f);
    un_graph_free(g);
    un_ctx_free(ctx);
}

static void put_cost(un_rulesdb *db, const char *sig, const char *shape, double fwd_ms,
                     double bwd_ms) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb_cost c;
    memset(&c, 0, sizeof c);
    snprintf(c.op_sig, sizeof c.op_sig, "%s", sig);
    snprintf(c.shape, sizeof c.shape, "%s", shape);
    snprintf(c.device, sizeof c.device, "x");
    c.fwd_ms = fwd_ms;
    c.bwd_ms = bwd_ms;
    EXPECT_OK(ctx, un_rulesdb_cost_put(ctx, db, &c));
    un_ctx_free(ctx);
}

/* An exchange (sig: comm:exchange or comm:send) measured at every message size on 2 devices:
 * flat_ms + per_byte_ms * bytes at each point. */
static void put_xchg(un_rulesdb *db, const char *sig, double flat_ms, double per_byte_ms) {
    for (int b = 0; b < UN_SIM_XCHG_POINTS; b++) {
        char shape[64];
        un_sim_xchg_shape(2, b, shape, sizeof shape);
        put_cost(db, sig, shape, flat_ms + per_byte_ms * un_sim_xchg_bytes[b], 0);
    }
}

static void put_meets(un_rulesdb *db, int devices, double factor) {
    for (int w = 0; w < UN_SIM_MEET_POINTS; w++) {
        char shape[64];
        un_sim_meet_shape(devices, w, shape, sizeof shape);
        put_cost(db, "comm:meet", shape, factor * un_sim_meet_work[w] * 1e3, 0);
    }
}

/* The measured parts of a step besides the ops: a slower barrier makes a data-parallel step
 * longer; measured stretches of work between rendezvous (comm:meet) stretch the step: a
 * one-device step is one stretch, a two-device one a stretch per rendezvous and one to the end,
 * each waiting what it takes beyond its work and an exchange; a stretch measured as fast as its
 * work adds nothing, an unmeasured one nothing either. */
static void test_sim_measured_parts(void) {
    char path[2][128];
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        snprintf(path[i], sizeof path[i], "%s/parts%d.db", cli_tmp, i);
        EXPECT_OK(ctx, un_rulesdb_open(ctx, path[i], spec, UN_RULESDB_CREATE, &db[i]));
    }
    un_machine m = machine_mem("1e12");
    un_graph *ser = zoo_graph("mlp", "serial", 1), *dp = zoo_graph("mlp", "data", 2);
    un_cost_model *cm = model_on(&m, db[0]);
    un_sim_result s0 = sim_runtime(cm, ser, 1), d0 = sim_runtime(cm, dp, 2);
    EXPECT_TRUE(s0.wait == 0 && d0.wait == 0 && s0.meet_time == 0);
    EXPECT_TRUE(s0.meets == 0 && d0.meets == 2); /* the gradients' scatter, the weights' gather */
    un_cost_model_free(cm);
    /* a step's time does not include making its batch (runtime/train.c times forward, loss,
     * backward and update): a second to make the batch (the profiler's former entry for the
     * step's inputs and labels) changes no estimate */
    int64_t elems = 0;
    for (int32_t id = 0; id < un_graph_node_count(ser); id++)
        if (un_graph_node(ser, id)->op == UN_OP_INPUT)
            elems += un_shape_numel(&un_graph_node(ser, id)->inf.out[0]);
    const un_shape *os = un_graph_shape(ser, un_graph_output(ser, 0)); /* labels */
    elems += os->rank == 2 && os->dim[1] > 2 ? os->dim[0] : un_shape_numel(os);
    char dshape[48];
    snprintf(dshape, sizeof dshape, "float[%lld]", (long long)elems);
    put_cost(db[0], "data:synthetic", dshape, 1e3, 0);
    cm = model_on(&m, db[0]);
    un_sim_result sd = sim_runtime(cm, ser, 1), dd = sim_runtime(cm, dp, 2);
    EXPECT_NEAR(sd.step, s0.step, 1e-12);
    EXPECT_NEAR(dd.step, d0.step, 1e-12);
    un_sim_result_deinit(&sd);
    un_sim_result_deinit(&dd);
    un_cost_model_free(cm);
    put_cost(db[0], "comm:barrier", "devices[2]", 1.0, 0); /* 1 ms a barrier */
    cm = model_on(&m, db[0]);
    un_sim_result d1 = sim_runtime(cm, dp, 2);
    EXPECT_NEAR(d1.step, d0.step + 4 * (1e-3 - m.intra.latency), 1e-9); /* the sync's 4 */
    un_sim_result_deinit(&d1);
    un_cost_model_free(cm);
    /* an exchange measured apart: the sync's two exchanges cost it instead of two barriers each;
     * one device has no rendezvous at all */
    put_cost(db[0], "comm:exchange", "devices[2]", 0.5, 0);
    put_cost(db[0], "comm:exchange", "devices[1]", 100.0, 0);
    cm = model_on(&m, db[0]);
    d1 = sim_runtime(cm, dp, 2);
    un_sim_result s3 = sim_runtime(cm, ser, 1);
    EXPECT_NEAR(d1.step, d0.step + 2 * 0.5e-3 - 2 * 2 * m.intra.latency, 1e-9);
    EXPECT_NEAR(s3.step, s0.step, 1e-12);
    un_sim_result_deinit(&d1);
    un_sim_result_deinit(&s3);
    un_cost_model_free(cm);
    /* a one-way exchange measured apart (comm:send): the data-parallel step has none (its
     * scatter and gather go both ways); the tensor-parallel one's one-way transfers cost it
     * instead of the exchange, a whole number of them */
    un_graph *tp = zoo_graph("mlp", "tensor", 2);
    cm = model_on(&m, db[0]);
    un_sim_result t1 = sim_runtime(cm, tp, 2);
    un_cost_model_free(cm);
    put_cost(db[0], "comm:send", "devices[2]", 0.1, 0);
    cm = model_on(&m, db[0]);
    d1 = sim_runtime(cm, dp, 2);
    un_sim_result t2 = sim_runtime(cm, tp, 2);
    EXPECT_NEAR(d1.step, d0.step + 2 * 0.5e-3 - 2 * 2 * m.intra.latency, 1e-9);
    double ways = (t1.step - t2.step) / (0.5e-3 - 0.1e-3);
    printf("    tensor parallel: %.0f one-way transfers a step\n", ways);
    EXPECT_TRUE(ways > 0.5 && fabs(ways - round(ways)) < 1e-6);
    un_sim_result_deinit(&d1);
    un_sim_result_deinit(&t1);
    un_sim_result_deinit(&t2);
    un_cost_model_free(cm);
    un_graph_free(tp);
    /* an all-reduce of the loss is no part of a step (runtime/train.c sums it only on the steps
     * that report it): a measured one changes nothing */
    put_cost(db[0], "comm:allreduce", "devices[2]", 0.25, 0);
    cm = model_on(&m, db[0]);
    d1 = sim_runtime(cm, dp, 2);
    EXPECT_NEAR(d1.step, d0.step + 2 * 0.5e-3 - 2 * 2 * m.intra.latency, 1e-9);
    un_sim_result_deinit(&d1);
    un_cost_model_free(cm);
    /* the exchange measured by message size (every point of un_sim_xchg_bytes) replaces the
     * rendezvous and the bytes at the link's bandwidth: a flat curve costs each of the sync's two
     * exchanges its value whatever they move; a curve proportional to the bytes (log-log between
     * the points is exact there) costs them what they move, the weights' gradient chunks going
     * (the reduce-scatter) and the updated chunks coming back (the gather), half the 16 KiB of
     * the tiny MLP's weights each way; the one-way curve prices the tensor step's transfers the
     * same way. One point missing: unmeasured, as before. */
    un_sim_result x[4];
    const double flat[4] = {0.7, 0.9, 0, 0}, per[4] = {0, 0, 1e-5, 2e-5};
    for (int k = 0; k < 4; k++) {
        put_xchg(db[0], "comm:exchange", flat[k], per[k]);
        cm = model_on(&m, db[0]);
        x[k] = sim_runtime(cm, dp, 2);
        un_cost_model_free(cm);
    }
    EXPECT_NEAR(x[1].step - x[0].step, 2 * 0.2e-3, 1e-9);
    /* ... and each message past the first of an exchange (the runtime sends one per weight
     * chunk) adds what the profile's exchange in UN_SIM_XCHG_MSGS messages took beyond one:
     * 0.1 ms each here, a whole number of them */
    {
        char ms[64];
        un_sim_xchg_msgs_shape(2, ms, sizeof ms);
        put_xchg(db[0], "comm:exchange", 0.9, 0);
        put_cost(db[0], "comm:exchange", ms, 0.9 + 0.1 * (UN_SIM_XCHG_MSGS - 1), 0);
        cm = model_on(&m, db[0]);
        un_sim_result xm = sim_runtime(cm, dp, 2);
        un_cost_model_free(cm);
        double more = (xm.step - x[1].step) / 0.1e-3;
        printf("    data parallel: the sync's exchanges have %.0f messages past their first\n",
               more);
        EXPECT_TRUE(more > 0.5 && fabs(more - round(more)) < 1e-6);
        un_sim_result_deinit(&xm);
        put_cost(db[0], "comm:exchange", ms, 0.9, 0); /* no more than one message: nothing */
    }
    double moved = (x[3].step - x[2].step) / 1e-8;
    printf("    data parallel: the sync's exchanges move %.0f bytes\n", moved);
    EXPECT_NEAR(moved, 16384, 1e-3);
    for (int k = 0; k < 4; k++)
        un_sim_result_deinit(&x[k]);
    tp = zoo_graph("mlp", "tensor", 2);
    for (int k = 0; k < 2; k++) {
        put_xchg(db[0], "comm:send", flat[k], 0);
        cm = model_on(&m, db[0]);
        x[k] = sim_runtime(cm, tp, 2);
        un_cost_model_free(cm);
    }
    EXPECT_NEAR((x[1].step - x[0].step) / 0.2e-3, ways, 1e-6);
    un_sim_result_deinit(&x[0]);
    un_sim_result_deinit(&x[1]);
    un_graph_free(tp);
    un_rulesdb_free(db[0]);
    remove(path[0]);
    EXPECT_OK(ctx, un_rulesdb_open(ctx, path[0], spec, UN_RULESDB_CREATE, &db[0]));
    put_cost(db[0], "comm:exchange", "devices[2]", 0.5, 0);
    for (int b = 0; b < UN_SIM_XCHG_POINTS; b++) {
        char shape[64];
        un_sim_xchg_shape(2, b, shape, sizeof shape);
        if (b != 2)
            put_cost(db[0], "comm:exchange", shape, 0.9, 0);
    }
    cm = model_on(&m, db[0]);
    d1 = sim_runtime(cm, dp, 2);
    EXPECT_NEAR(d1.step, d0.step + 2 * 0.5e-3 - 2 * 2 * m.intra.latency, 1e-9);
    un_sim_result_deinit(&d1);
    un_cost_model_free(cm);
    put_meets(db[1], 1, 1.0); /* as fast as the work: no wait */
    put_meets(db[1], 2, 3.0); /* three times the work */
    cm = model_on(&m, db[1]);
    un_sim_result s1 = sim_runtime(cm, ser, 1);
    d1 = sim_runtime(cm, dp, 2);
    EXPECT_NEAR(s1.step, s0.step, 1e-12);
    EXPECT_TRUE(s1.wait == 0 && s1.meet_time > 0);
    double work = d1.meet_work * (d1.meets + 1), lat = m.intra.latency;
    EXPECT_NEAR(work, d0.step - (d0.meets * 2 + 1) * lat, 0.2 * d0.step); /* the work, about */
    EXPECT_NEAR(d1.meet_time, 3 * work, 1e-12);
    /* each stretch waits beyond its work and an exchange (unmeasured here: two barriers) */
    EXPECT_TRUE(d1.wait <= 2 * work && d1.wait >= 2 * work - (d1.meets + 1) * 2 * lat - 1e-12);
    EXPECT_NEAR(d1.step, d0.step + d1.wait, 1e-12);
    un_sim_result_deinit(&d1);
    un_cost_model_free(cm);
    put_meets(db[1], 1, 2.0); /* one device: the whole step is one stretch */
    cm = model_on(&m, db[1]);
    un_sim_result s2 = sim_runtime(cm, ser, 1);
    EXPECT_NEAR(s2.step, 2 * s0.step, 1e-12);
    un_sim_result_deinit(&s2);
    un_cost_model_free(cm);
    for (int i = 0; i < 2; i++)
        un_rulesdb_free(db[i]);
    un_sim_result_deinit(&s0);
    un_sim_result_deinit(&d0);
    un_sim_result_deinit(&s1);
    un_graph_free(ser);
    un_graph_free(dp);
    un_ctx_free(ctx);
}

/* unity-train --profile on two devices stores, beside the ops, the optimizer over a rank's
 * parameters, the barrier, the exchange and the one-way exchange of the two device threads and
 * their stretches of work and meeting; no all-reduce of the loss, which no step makes
 * (runtime/train.c). */
/* unity-train ARGS --profile into cli_tmp/NAME on the CPU machine file: its output, and the
 * database opened read-only in *db (NULL when it would not open). */
static const cli_result *profile_into(un_ctx *ctx, const char *args, const char *name,
                                      un_rulesdb **db) {
    char path[128], cmd[512];
    snprintf(path, sizeof path, "%s/%s", cli_tmp, name);
    snprintf(cmd, sizeof cmd, "%s --profile --machine specs/machines/cpu.json --rules %s", args,
             path);
    const cli_result *r = cli_run("unity-train", cmd);
    EXPECT_EQ(r->code, 0);
    *db = NULL;
    EXPECT_OK(ctx, un_rulesdb_open(ctx, path, spec, UN_RULESDB_READONLY, db));
    return r;
}

static void test_profile_parts(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    const cli_result *r =
        profile_into(ctx, "--model mlp --tiny --devices 2 --threads 2", "prof2.db", &db);
    EXPECT_TRUE(strstr(r->out, "comm:barrier") && strstr(r->out, "comm:meet") &&
                strstr(r->out, "optimizer:adam"));
    un_rulesdb_cost c;
    bool found = false;
    EXPECT_OK(ctx, un_rulesdb_cost_get(ctx, db, "comm:barrier", "devices[2]", "cpu", &c, &found));
    EXPECT_TRUE(found && c.fwd_ms > 0);
    EXPECT_OK(ctx, un_rulesdb_cost_get(ctx, db, "comm:exchange", "devices[2]", "cpu", &c, &found));
    EXPECT_TRUE(found && c.fwd_ms > 0);
    EXPECT_OK(ctx, un_rulesdb_cost_get(ctx, db, "comm:send", "devices[2]", "cpu", &c, &found));
    EXPECT_TRUE(found && c.fwd_ms > 0);
    for (int b = 0; b < UN_SIM_XCHG_POINTS; b++) /* both by message size, every point */
        for (int k = 0; k < 2; k++) {
            char xs[64];
            un_sim_xchg_shape(2, b, xs, sizeof xs);
            EXPECT_OK(ctx, un_rulesdb_cost_get(ctx, db, k ? "comm:send" : "comm:exchange", xs,
                                               "cpu", &c, &found));
            EXPECT_TRUE(found && c.fwd_ms > 0);
            un_rulesdb_cost c0;
            EXPECT_OK(ctx, un_rulesdb_cost_get(ctx, db, k ? "comm:send" : "comm:exchange",
                                               "devices[2]", "cpu", &c0, &found));
            if (b == 0) /* the 64-byte point is the rendezvous, one measurement */
                EXPECT_TRUE(found && c.fwd_ms == c0.fwd_ms);
        }
    EXPECT_OK(ctx, un_rulesdb_cost_get(ctx, db, "comm:allreduce", "devices[2]", "cpu", &c, &found));
    EXPECT_TRUE(!found);
    char shape[64];
    un_sim_meet_shape(2, 0, shape, sizeof shape);
    EXPECT_OK(ctx, un_rulesdb_cost_get(ctx, db, "comm:meet", shape, "cpu", &c, &found));
    EXPECT_TRUE(found && c.fwd_ms >= 1e3 * un_sim_meet_work[0]);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
}

/* On 3 devices every rendezvous has all of them: the one-way send is between ranks 0 and 1, rank
 * 2 calling with nothing to move (a bystander that skipped it would leave the others waiting). */
static void test_profile_three(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    profile_into(ctx, "--model mlp --tiny --batch 12 --devices 3 --threads 3", "prof3.db", &db);
    un_rulesdb_cost c;
    bool found = false;
    char xs[64];
    un_sim_xchg_shape(3, UN_SIM_XCHG_POINTS - 1, xs, sizeof xs);
    EXPECT_OK(ctx, un_rulesdb_cost_get(ctx, db, "comm:send", xs, "cpu", &c, &found));
    EXPECT_TRUE(found && c.fwd_ms > 0);
    un_sim_xchg_msgs_shape(3, xs, sizeof xs);
    EXPECT_OK(ctx, un_rulesdb_cost_get(ctx, db, "comm:exchange", xs, "cpu", &c, &found));
    EXPECT_TRUE(found && c.fwd_ms > 0);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
}

static void test_cli(void) {
    const cli_result *r = cli_run("unity-train", "--model mlp --tiny --devices 2 --estimate "
                                                 "--machine specs/machines/cpu.json");
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "estimated step time") != NULL);
    cli_expect_clean_error("unity-train", "--model mlp --tiny --estimate", "needs --machine");
    cli_expect_clean_error("unity-train", "--model mlp --tiny --estimate --machine nope.json",
                           "nope.json");
    cli_expect_clean_error("unity-train",
                           "--model mlp --tiny --profile --machine "
                           "specs/machines/cpu.json",
                           "--profile needs --rules");
    cli_expect_clean_error("unity-train",
                           "--model mlp --tiny --sim fast --estimate --machine "
                           "specs/machines/cpu.json",
                           "--sim");
    cli_expect_clean_error("unity-train",
                           "--model mlp --tiny --devices 4 --estimate --machine "
                           "specs/machines/cpu.json",
                           "machine");
    /* profile into a database, then the estimate uses the measured costs */
    r = cli_run("unity-train", cli_fmt("--model mlp --tiny --profile --machine "
                                       "specs/machines/cpu.json --rules %s/p.db --quiet"));
    EXPECT_EQ(r->code, 0);
    r = cli_run("unity-train", cli_fmt("--model mlp --tiny --estimate --machine "
                                       "specs/machines/cpu.json --rules %s/p.db"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, " 0 measured") == NULL &&
                strstr(r->out, "measured (rules.db") != NULL);
}

/* The profiler runs on the run's backend: on the opaque one (backend memory reached only through
 * the backend, as on a GPU) it stores the same entries as on the CPU one; --backend cuda without a
 * GPU, and a machine file whose device kind does not name the GPU, are one error line. */
/* Ops are profiled as a step runs them (new values every repetition, a new dropout seed, input 0's
 * place): dropout on its half-batch pieces of a 2-device run, timed in lockstep, has a positive
 * forward and backward, and the run's exchange is stored beside the barrier. */
static void test_profile_dropout(void) {
    const cli_result *r = cli_run("unity-train", cli_fmt("--model candle_uno --tiny --devices 2 "
                                                         "--threads 2 --profile --machine "
                                                         "specs/machines/cpu.json --rules "
                                                         "%s/drop.db"));
    EXPECT_EQ(r->code, 0);
    const char *at = strstr(r->out, "  dropout[");
    EXPECT_TRUE(at != NULL && strstr(r->out, "comm:exchange") != NULL);
    if (!at)
        return;
    double fwd = 0, bwd = 0; /* "  <op> <piece shapes> <fwd> <bwd> ms" */
    EXPECT_EQ(sscanf(at, "%*s %*s %lf %lf ms", &fwd, &bwd), 2);
    EXPECT_TRUE(fwd > 0 && bwd > 0);
}

/* Profiles g on one CPU thread (value sets: 4, as unity-train on synthetic data, or 0: new values
 * every run) into a fresh database at path and returns op_sig/shape's forward and backward (ms). */
static void profile_entry(const un_graph *g, int sets, const char *path, const char *sig,
                          const char *shape, double *fwd, double *bwd) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    remove(path);
    EXPECT_OK(ctx, un_rulesdb_open(ctx, path, spec, UN_RULESDB_CREATE, &db));
    un_profile_params pp = un_profile_params_default();
    pp.value_sets = sets;
    int64_t n = 0;
    EXPECT_OK(ctx, un_profile_graph(ctx, db, g, &pp, NULL, &n));
    un_rulesdb_cost c;
    bool found = false;
    EXPECT_OK(ctx, un_rulesdb_cost_get(ctx, db, sig, shape, "cpu", &c, &found));
    EXPECT_TRUE(found);
    *fwd = found ? c.fwd_ms : 0;
    *bwd = found ? c.bwd_ms : 0;
    un_rulesdb_free(db);
    un_ctx_free(ctx);
}

/* An embedding's indices are drawn from its input's range as the run's batches are (not all 0,
 * which reads one row of the table whatever its size), capped at the table's rows: the lookups
 * of a 1,048,576-row table (64 MiB, past the caches) spread over the table as a step's do. The
 * profiler's choice of values is checked as data, not by timing the lookups (an earlier form of
 * this test wanted the big table's embedding 2x slower than a 16-row one's). */
static void test_profile_int_inputs(void) {
    int64_t want[2] = {16, 1048576};
    for (int i = 0; i < 2; i++) {
        int64_t rows = i ? 1048576 : 16;
        char text[512], path[128], shape[64];
        snprintf(text, sizeof text,
                 "{\"nodes\": [{\"name\": \"ix\", \"op\": \"input\", \"params\": {\"shape\": "
                 "[256, 8], \"dtype\": \"int\", \"range\": 1048576}}, {\"name\": \"tab\", \"op\": "
                 "\"weight\", \"params\": {\"shape\": [%lld, 16]}}, {\"name\": \"e\", \"op\": "
                 "\"embedding\", \"in\": [\"ix\", \"tab\"]}]}",
                 (long long)rows);
        un_ctx *ctx = un_ctx_new(NULL);
        un_graph *g = NULL;
        EXPECT_OK(ctx, un_graph_from_json(ctx, spec, "emb.json", text, strlen(text), &g));
        if (!g) {
            un_ctx_free(ctx);
            continue;
        }
        int64_t range = un_profile_int_range(g, un_graph_find(g, "e"), 0);
        EXPECT_EQ(range, want[i]);
        /* the values drawn: all valid rows, spread over the table */
        enum { N = 4096 };
        int64_t v[N], top = 0, low = 0;
        un_profile_values(v, N, UN_DT_INT, 4, range, 7);
        bool ok = true;
        for (int k = 0; k < N; k++) {
            ok &= v[k] >= 0 && v[k] < range;
            top = v[k] > top ? v[k] : top;
            low += v[k] < range / 2;
        }
        test__check(
            ok && top >= range - range / 8 && low > N / 4 && low < 3 * N / 4, TEST__AT,
            "%d index values in [0, %lld): all valid %d, largest %lld, below the middle %lld", N,
            (long long)range, ok, (long long)top, (long long)low);
        /* the 16-row table with indices of the input's range: the profile runs on valid rows */
        if (i == 0) {
            double f = 0, b = 0;
            snprintf(path, sizeof path, "%s/emb.db", cli_tmp);
            snprintf(shape, sizeof shape, "int[256,8];float[%lld,16]", (long long)rows);
            profile_entry(g, UN_TRAIN_SYNTHETIC_BATCHES, path, "embedding[aggr=sum]", shape, &f,
                          &b);
            EXPECT_TRUE(f > 0 && b > 0);
        }
        un_graph_free(g);
        un_ctx_free(ctx);
    }
}

/* The thread's CPU clock is a system call, and an op timed right after one ran slower than in the
 * step (tiny MLP linear 1.22 / 2.00 us forward / backward against 0.57 / 1.24 in the step): the
 * profiler reads it only around ops that took 25 us and more in their warm-up, and costs a
 * one-thread CPU device's op of 50 us and more by its CPU time. Both rules are checked on given
 * times (an earlier form counted the clock reads of a real profile, which depend on how slow its
 * repetitions happened to be). */
static void test_profile_cpu_clock(void) {
    EXPECT_TRUE(!un_profile_reads_cpu_clock(1e-6) && !un_profile_reads_cpu_clock(20e-6));
    EXPECT_TRUE(un_profile_reads_cpu_clock(30e-6) && un_profile_reads_cpu_clock(5e-3));
    un_profile_params p = un_profile_params_default();
    p.timer_floor = 0.1e-6;
    /* a 1 ms op, its CPU time read in every repetition: the CPU times' median */
    un_profile_rep r[5] = {{1.0e-3, 0.6e-3, -1},
                           {1.2e-3, 0.7e-3, -1},
                           {5.0e-3, 0.8e-3, -1},
                           {1.1e-3, 0.5e-3, -1},
                           {1.05e-3, 0.9e-3, -1}};
    un_profile_rep c[5];
    memcpy(c, r, sizeof r);
    EXPECT_NEAR(un_profile_rep_cost(c, 5, &p), 0.7e-3, 1e-12);
    /* read in only 2 of 5: the wall time's median, less the timer's floor */
    memcpy(c, r, sizeof r);
    for (int i = 0; i < 3; i++)
        c[i].cpu = -1;
    EXPECT_NEAR(un_profile_rep_cost(c, 5, &p), 1.1e-3 - 0.1e-6, 1e-12);
    /* a device of 2 threads: its wall time */
    memcpy(c, r, sizeof r);
    p.threads = 2;
    EXPECT_NEAR(un_profile_rep_cost(c, 5, &p), 1.1e-3 - 0.1e-6, 1e-12);
    p.threads = 1;
    /* an op under 50 us: its wall time, even with CPU times */
    for (int i = 0; i < 5; i++)
        c[i] = (un_profile_rep){(2 + i) * 1e-6, 1e-6, -1};
    EXPECT_NEAR(un_profile_rep_cost(c, 5, &p), 4e-6 - 0.1e-6, 1e-12);
}

/* A profile replays the step's ops in rounds spread over seconds (this guest's cores have moments
 * of up to 1.4x slower work, seconds long) and keeps the one round whose forward + backward over
 * the step's nodes is the least, whole: on given times, the kept round and its totals (a key
 * taken from another round, each key's least, would price this step at 4, below either round);
 * then unity-train --profile's rounds line: 3 totals, the kept one their least; --profile-rounds 1
 * replays once; bad counts are one error line. */
static void test_profile_rounds(void) {
    /* 2 keys; the step's nodes: key 0 twice, key 1 once */
    const double fwd[4] = {1, 5, 3, 2}, bwd[4] = {0, 0, 0, 0.5};
    const int key[3] = {0, 0, 1};
    double total[2];
    EXPECT_EQ(un_profile_least_round(fwd, bwd, 2, 2, key, 3, total), 0);
    EXPECT_NEAR(total[0], 7, 1e-12);
    EXPECT_NEAR(total[1], 8.5, 1e-12);
    const int key1[3] = {1, 1, 0}; /* key 1 twice: round 1 is the least */
    EXPECT_EQ(un_profile_least_round(fwd, bwd, 2, 2, key1, 3, total), 1);
    EXPECT_NEAR(total[1], 8, 1e-12);
    EXPECT_EQ(un_profile_least_round(fwd, bwd, 1, 2, key, 3, total), 0);
    const cli_result *r = cli_run("unity-train", cli_fmt("--model xdl --tiny --profile --machine "
                                                         "specs/machines/cpu.json --rules "
                                                         "%s/rounds.db"));
    EXPECT_EQ(r->code, 0);
    const char *at = strstr(r->out, "the step's ops in 3 rounds over ");
    double secs = 0, t[3] = {0, 0, 0};
    int kept = 0;
    EXPECT_TRUE(at != NULL);
    if (at) {
        EXPECT_EQ(sscanf(at,
                         "the step's ops in 3 rounds over %lf s, forward + backward: %lf / %lf "
                         "/ %lf ms; kept round %d",
                         &secs, &t[0], &t[1], &t[2], &kept),
                  5);
        test__check(secs >= 2 && kept >= 1 && kept <= 3 && t[kept - 1] > 0 && t[kept - 1] <= t[0] &&
                        t[kept - 1] <= t[1] && t[kept - 1] <= t[2],
                    TEST__AT, "rounds over %.1f s: %g / %g / %g ms, kept %d", secs, t[0], t[1],
                    t[2], kept);
        /* the ops' lines follow it, then the rest's */
        EXPECT_TRUE(strstr(at, "linear[") != NULL && strstr(at, "optimizer:adam") != NULL &&
                    strstr(at, "linear[") < strstr(at, "optimizer:adam"));
    }
    r = cli_run("unity-train", cli_fmt("--model xdl --tiny --profile --profile-rounds 1 --machine "
                                       "specs/machines/cpu.json --rules %s/rounds1.db"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "rounds over") == NULL && strstr(r->out, "linear[") != NULL);
    const char *bad[] = {"0", "17", "x", "3s", ""};
    for (int i = 0; i < 5; i++) {
        char a[256];
        snprintf(a, sizeof a,
                 "--model xdl --tiny --profile --profile-rounds '%s' --machine "
                 "specs/machines/cpu.json --rules %%s/bad.db",
                 bad[i]);
        cli_expect_clean_error("unity-train", cli_fmt(a), "--profile-rounds");
    }
    cli_expect_clean_error("unity-train", "--model xdl --tiny --profile-rounds 2",
                           "--profile-rounds goes with --profile");
}

/* A dropout's mask is new every step, so the nodes after it see new values every step even on
 * synthetic data that cycles through 4 batches; the profiler gives them new values every run
 * (a relu linear after a dropout: 3.0 us forward in the step, 1.9 profiled on 4 value sets, 3.8
 * on new ones). Tiny CANDLE-Uno: a tower's first linear and its dropout see the run's batches,
 * its second linear and everything after the concat new values; the tiny MLP has no dropout. */
static void test_profile_fresh(void) {
    un_graph *g = zoo_graph("candle_uno", "serial", 1);
    int32_t n = un_graph_node_count(g);
    bool *fresh = un_xcalloc((size_t)n, sizeof *fresh);
    un_profile_fresh_nodes(g, fresh);
    static const char *const names[] = {"cell.rnaseq.l1", "cell.rnaseq.l1.drop", "cell.rnaseq.l2",
                                        "dense1", "out"};
    static const bool want[] = {false, false, true, true, true};
    for (int i = 0; i < 5; i++) {
        int32_t id = un_graph_find(g, names[i]);
        test__check(id >= 0 && fresh[id] == want[i], TEST__AT, "candle_uno %s: fresh %d, want %d",
                    names[i], id >= 0 ? fresh[id] : -1, want[i]);
    }
    free(fresh);
    un_graph_free(g);
    g = zoo_graph("mlp", "serial", 1);
    n = un_graph_node_count(g);
    fresh = un_xcalloc((size_t)n, sizeof *fresh);
    un_profile_fresh_nodes(g, fresh);
    int k = 0;
    for (int32_t id = 0; id < n; id++)
        k += fresh[id];
    EXPECT_EQ(k, 0);
    free(fresh);
    un_graph_free(g);
}

/* The loss is profiled and estimated as the run computes it: xdl trains on mean squares (its loss
 * took 2.1 us in a step at batch 256, 9.0 profiled as cross-entropy), the MLP on cross-entropy;
 * the estimate's cost model looks up the run's kind (un_cost_model_set_loss). */
static void test_profile_loss_kind(void) {
    const cli_result *r = cli_run("unity-train", cli_fmt("--model xdl --tiny --profile --machine "
                                                         "specs/machines/cpu.json --rules "
                                                         "%s/loss.db"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "loss:mse") != NULL && strstr(r->out, "loss:ce") == NULL);
    r = cli_run("unity-train", cli_fmt("--model mlp --tiny --profile --machine "
                                       "specs/machines/cpu.json --rules %s/loss.db"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "loss:ce") != NULL && strstr(r->out, "loss:mse") == NULL);
    un_ctx *ctx = un_ctx_new(NULL);
    un_train_opts o = un_train_opts_default();
    o.model = "xdl";
    o.tiny = true;
    un_loss_kind k = UN_LOSS_CE;
    EXPECT_OK(ctx, un_train_loss(ctx, spec, &o, &k));
    EXPECT_EQ(k, UN_LOSS_MSE);
    char path[128];
    snprintf(path, sizeof path, "%s/loss.db", cli_tmp);
    un_rulesdb *db = NULL;
    EXPECT_OK(ctx, un_rulesdb_open(ctx, path, spec, UN_RULESDB_READONLY, &db));
    un_machine m;
    EXPECT_OK(ctx, un_machine_load(ctx, "specs/machines/cpu.json", &m));
    un_cost_model *cm = NULL;
    EXPECT_OK(ctx, un_cost_model_new(ctx, spec, &m, UN_MPREC_F32, db, &cm));
    double fb = un_cost_loss(ctx, cm, 16, 3); /* no entry of that shape: the fallback */
    un_cost_model_set_loss(cm, UN_LOSS_MSE);
    double mse = un_cost_loss(ctx, cm, 16, 2);
    un_rulesdb_cost c;
    bool found = false;
    EXPECT_OK(ctx, un_rulesdb_cost_get(ctx, db, "loss:mse", "float[16,2]", "cpu", &c, &found));
    EXPECT_TRUE(found && fb > 0);
    EXPECT_NEAR(mse, c.fwd_ms * 1e-3, 1e-12);
    un_cost_model_free(cm);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
}

static void test_profile_backends(void) {
    /* the transformer trains on mean squares: its loss is profiled as such */
    const char *args = "--model transformer --tiny --profile --machine specs/machines/cpu.json "
                       "--rules %s/%s.db";
    char a[256], b[256];
    snprintf(a, sizeof a, args, "%s", "cpu");
    snprintf(b, sizeof b, args, "%s", "opq");
    const cli_result *r = cli_run("unity-train", cli_fmt(a));
    EXPECT_EQ(r->code, 0);
    const char *at = strstr(r->out, "stored ");
    long long n_cpu = at ? atoll(at + 7) : -1;
    EXPECT_TRUE(strstr(r->out, "(backend cpu)") != NULL);
    char opq[2200];
    snprintf(opq, sizeof opq, "%s --backend opaque:staged", cli_fmt(b)); /* options too */
    r = cli_run("unity-train", opq);
    EXPECT_EQ(r->code, 0);
    at = strstr(r->out, "stored ");
    long long n_opq = at ? atoll(at + 7) : -2;
    EXPECT_TRUE(strstr(r->out, "(backend opaque:staged)") != NULL &&
                strstr(r->out, "loss:mse") != NULL && strstr(r->out, "optimizer:adam") != NULL);
    EXPECT_TRUE(n_cpu > 3 && n_cpu == n_opq);
    if (un_backend_cuda_devices(NULL) == 0)
        cli_expect_clean_error("unity-train",
                               cli_fmt("--model mlp --tiny --profile --machine "
                                       "specs/machines/h100x8.json --rules "
                                       "%s/g.db --backend cuda"),
                               "--backend cuda: no usable GPU");
    EXPECT_TRUE(un_profile_kind_matches("h100", "NVIDIA H100 80GB HBM3"));
    EXPECT_TRUE(un_profile_kind_matches("A100", "NVIDIA A100-SXM4-40GB"));
    EXPECT_TRUE(!un_profile_kind_matches("h100", "NVIDIA A100-SXM4-40GB"));
    EXPECT_TRUE(!un_profile_kind_matches("cpu", "NVIDIA H100"));
    EXPECT_TRUE(!un_profile_kind_matches("", "NVIDIA H100"));
}

int main(void) {
    if (!cli_init("/tmp/unity-cost-XXXXXX"))
        return 1;
    static const test_case c[] = {{"machine_files", test_machine_files},
                                  {"machine_bad", test_machine_bad},
                                  {"op_costs_grow", test_op_costs_grow},
                                  {"gpu_kernels", test_gpu_kernels},
                                  {"gpu_memory", test_gpu_memory},
                                  {"cost_default", test_cost_default},
                                  {"collectives", test_collectives},
                                  {"roundtrip_one_device", test_roundtrip_one_device},
                                  {"sim_mlp", test_sim_mlp},
                                  {"measured", test_measured},
                                  {"sim_runtime", test_sim_runtime},
                                  {"sim_stash", test_sim_stash},
                                  {"sim_meets", test_sim_meets},
                                  {"sim_output_parallel", test_sim_output_parallel},
                                  {"sim_measured_parts", test_sim_measured_parts},
                                  {"profile_dropout", test_profile_dropout},
                                  {"scaled", test_scaled},
                                  {"profile_parts", test_profile_parts},
                                  {"profile_three", test_profile_three},
                                  {"cli", test_cli},
                                  {"profile_backends", test_profile_backends},
                                  {"profile_int_inputs", test_profile_int_inputs},
                                  {"profile_cpu_clock", test_profile_cpu_clock},
                                  {"profile_rounds", test_profile_rounds},
                                  {"profile_fresh", test_profile_fresh},
                                  {"profile_loss_kind", test_profile_loss_kind}};
    int rc = TEST_RUN_WITH_SPEC(c, &spec);
    return cli_cleanup() ? rc : 1;
}
