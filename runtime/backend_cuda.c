/* backend_cuda.c - the CUDA backend behind un_backend_i: device memory, one stream and one cuBLAS
 * handle per backend, block copies, and forward/backward of the regular ops it has kernels for
 * (backend_cuda.cu through the seam of backend_cuda_rt.h; cuBLAS for linear and batch_matmul).
 * the loss and the optimizer update on the device. float32 only. Host code never touches device
 * memory: data moves through write/read. The vtable's void slots (release, zero, copy_region)
 * cannot return a status, so their first failure is kept and returned by the next op or by
 * synchronize (UN_ERR_DEVICE). Compiled only
 * in builds with CUDA; backend.c (the registry) answers UN_ERR_UNAVAILABLE otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend_cuda.h"
#include "runtime/backend_cuda_rt.h"
#include "runtime/backend_impl.h"
#include "runtime/comm_nccl.h"

/* The CUDA plugin's table: loaded by the registry before any backend is made (un__cu_seam). */
#define CU (un__cu_seam(NULL))

/* Parameter slots (the order of specs/ops.json, as kernels_cpu.c). */
enum { P_LIN_ACT, P_LIN_BIAS };
enum { P_SMUL_NUM, P_SMUL_DEN };
enum { P_DROP_RATE, P_DROP_SEED };
enum { P_CONV_SH, P_CONV_SW, P_CONV_PH, P_CONV_PW, P_CONV_GROUPS, P_CONV_ACT, P_CONV_BIAS };
enum { P_POOL_KH, P_POOL_KW, P_POOL_SH, P_POOL_SW, P_POOL_PH, P_POOL_PW, P_POOL_TYPE };

typedef struct cuda_state {
    int device;
    char dev_name[128];
    void *stream, *blas;
    float *scratch; /* growable device scratch (stream-ordered: one op at a time) */
    size_t scratch_bytes;
    int64_t *flag;    /* one device int64 for index checks */
    char sticky[512]; /* the first failure of a void slot, "" when none */
    void *ev[2];      /* timing events (made on first use) */
} cuda_state;

static cuda_state *S(const un_backend *be) { return be->context; }

/* UN_OK, or records "cuda: <what failed>" and returns UN_ERR_DEVICE. */
static un_status cu_st(un_ctx *ctx, const char *err) {
    return err ? un_ctx_error(ctx, UN_ERR_DEVICE, "cuda: %s", err) : UN_OK;
}

/* A void slot's failure: kept until an op or synchronize reports it. */
static void keep(un_backend *be, const char *err) {
    if (err && !S(be)->sticky[0])
        snprintf(S(be)->sticky, sizeof S(be)->sticky, "%s", err);
}

static un_status sticky_st(un_ctx *ctx, un_backend *be) {
    if (!S(be)->sticky[0])
        return UN_OK;
    return un_ctx_error(ctx, UN_ERR_DEVICE, "cuda: %s (from an earlier copy)", S(be)->sticky);
}

static const char *cuda_name(const un_backend *be) {
    (void)be;
    return "cuda-f32";
}

static void cuda_free(un_backend *be) {
    cuda_state *s = S(be);
    CU->set_device(s->device);
    CU->free(s->scratch);
    CU->free(s->flag);
    if (s->blas)
        CU->blas_free(s->blas);
    if (s->stream)
        CU->stream_free(s->stream);
    for (int i = 0; i < 2; i++)
        if (s->ev[i])
            CU->event_free(s->ev[i]);
    free(s);
    free(be);
}

static bool cuda_supports_op(const un_backend *be, un_op op) {
    (void)be;
    switch (op) {
    case UN_OP_LINEAR:
    case UN_OP_BATCH_MATMUL:
    case UN_OP_EW_ADD:
    case UN_OP_EW_SUB:
    case UN_OP_EW_MUL:
    case UN_OP_SCALAR_MUL:
    case UN_OP_RELU:
    case UN_OP_GELU:
    case UN_OP_SIGMOID:
    case UN_OP_TANH:
    case UN_OP_SOFTMAX:
    case UN_OP_LAYER_NORM:
    case UN_OP_DROPOUT:
    case UN_OP_CONCAT:
    case UN_OP_SPLIT:
    case UN_OP_TRANSPOSE:
    case UN_OP_RESHAPE:
    case UN_OP_FLAT:
    case UN_OP_IDENTITY:
    case UN_OP_EMBEDDING:
    case UN_OP_REDUCE_SUM:
    case UN_OP_REDUCE_MEAN:
    case UN_OP_CROSS_ENTROPY:
    case UN_OP_MULTIHEAD_ATTENTION:
    case UN_OP_CONV2D:
    case UN_OP_POOL2D:
    case UN_OP_BATCH_NORM:
        return true;
    default:
        return un_op_kind_of(op) != UN_OPK_REGULAR;
    }
}

/* ---- memory ---------------------------------------------------------------------------------- */

static un_status cuda_alloc(un_ctx *ctx, un_backend *be, size_t nbytes, void **out) {
    bool oom = false;
    *out = NULL;
    const char *err = CU->malloc(out, nbytes, &oom);
    if (oom)
        return un_ctx_error(ctx, UN_ERR_NOMEM, "cuda backend: cannot allocate %zu bytes on %s",
                            nbytes, S(be)->dev_name);
    if (!err)
        err = CU->memset0(S(be)->stream, *out, nbytes);
    if (err) {
        CU->free(*out);
        *out = NULL;
    }
    return cu_st(ctx, err);
}

static void cuda_release(un_backend *be, void *p) {
    /* cudaFree waits for the device: pending kernels that read p finish first */
    keep(be, CU->free(p));
}

static void cuda_zero(un_backend *be, void *p, size_t n) {
    keep(be, CU->memset0(S(be)->stream, p, n));
}

static un_status cuda_write(un_ctx *ctx, un_backend *be, void *dst, const void *src, size_t n) {
    const char *err = CU->h2d(S(be)->stream, dst, src, n);
    /* the caller may reuse src on return */
    return cu_st(ctx, err ? err : CU->stream_sync(S(be)->stream));
}

static un_status cuda_read(un_ctx *ctx, un_backend *be, void *dst, const void *src, size_t n) {
    return cu_st(ctx, CU->d2h(S(be)->stream, dst, src, n));
}

static un_status cuda_copy(un_ctx *ctx, un_backend *be, void *dst, const void *src, size_t n) {
    return cu_st(ctx, CU->d2d(S(be)->stream, dst, src, n));
}

static void cuda_copy_region(un_backend *be, void *dst, const void *src, size_t es,
                             const un_region *r, bool accumulate) {
    un_cu_box b = un_cu_box_region(r->rank, r->src_dim, r->src_off, r->dst_dim, r->dst_off, r->len);
    if (b.n == 0)
        return;
    keep(be, CU->box(S(be)->stream, &b, dst, src, es, accumulate));
}

/* Device scratch of at least n floats (valid until the next call). */
static un_status scratch(un_ctx *ctx, un_backend *be, int64_t n, float **out) {
    cuda_state *s = S(be);
    size_t bytes = (size_t)(n < 1 ? 1 : n) * sizeof(float);
    if (bytes > s->scratch_bytes) {
        CU->free(s->scratch);
        s->scratch = NULL;
        s->scratch_bytes = 0;
        void *p = NULL;
        un_status st = cuda_alloc(ctx, be, bytes, &p);
        if (st != UN_OK)
            return st;
        s->scratch = p;
        s->scratch_bytes = bytes;
    }
    *out = s->scratch;
    return UN_OK;
}

/* ---- ops ------------------------------------------------------------------------------------- */

static int64_t numel(const un_kt *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dim[i];
    return n;
}

static int64_t span(const un_kt *t, int lo, int hi) {
    int64_t n = 1;
    for (int i = lo; i < hi; i++)
        n *= t->dim[i];
    return n;
}

static int norm_dim(int64_t d, int rank) { return (int)(d < 0 ? d + rank : d); }
static int64_t par(const un_param *p, int i) { return p[i].v[0]; }
#define F(t)  ((float *)(t).data)
#define FC(t) ((const float *)(t).data)
#define I(t)  ((const int64_t *)(t).data)

/* An index input (embedding ids, labels) entirely in [0, limit); else one error line. */
static un_status check_index(un_ctx *ctx, un_backend *be, un_op op, const un_kt *ix, int64_t limit,
                             const char *what) {
    cuda_state *s = S(be);
    int64_t n = numel(ix), bad = n;
    const char *err = CU->h2d(s->stream, s->flag, &bad, sizeof bad);
    if (!err)
        err = CU->index_check(s->stream, I(*ix), n, limit, s->flag);
    if (!err)
        err = CU->d2h(s->stream, &bad, s->flag, sizeof bad);
    if (err)
        return cu_st(ctx, err);
    if (bad < n) {
        int64_t v = 0;
        if ((err = CU->d2h(s->stream, &v, I(*ix) + bad, sizeof v)))
            return cu_st(ctx, err);
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "%s: %s %lld at position %lld is outside [0, %lld)", un_op_name(op),
                            what, (long long)v, (long long)bad, (long long)limit);
    }
    return UN_OK;
}

static un_cu_ew ew_kind(un_op op) {
    switch (op) {
    case UN_OP_EW_ADD:
        return UN_CU_EW_ADD;
    case UN_OP_EW_SUB:
        return UN_CU_EW_SUB;
    case UN_OP_EW_MUL:
        return UN_CU_EW_MUL;
    case UN_OP_SCALAR_MUL:
        return UN_CU_EW_SCALE;
    case UN_OP_RELU:
        return UN_CU_EW_RELU;
    case UN_OP_SIGMOID:
        return UN_CU_EW_SIGMOID;
    case UN_OP_TANH:
        return UN_CU_EW_TANH;
    case UN_OP_GELU:
        return UN_CU_EW_GELU;
    case UN_OP_DROPOUT:
        return UN_CU_EW_DROPOUT;
    default:
        return UN_CU_EW_COPY;
    }
}

static un_cu_ew_args ew_args(un_op op, const un_param *p, const un_kt *in, int n_in, uint64_t seed,
                             const int64_t *off, const int64_t *full) {
    un_cu_ew_args a = {.kind = ew_kind(op), .n = numel(&in[0]), .x = FC(in[0])};
    if (n_in > 1)
        a.y = FC(in[1]);
    if (op == UN_OP_SCALAR_MUL)
        a.f = (float)((double)par(p, P_SMUL_NUM) / (double)par(p, P_SMUL_DEN));
    if (op == UN_OP_DROPOUT) {
        uint64_t s = (uint64_t)par(p, P_DROP_SEED);
        a.drop.seed = seed ? un_hash_combine(s, seed) : s;
        a.drop.rate = par(p, P_DROP_RATE);
        a.drop.scale = (float)(100.0 / (double)(100 - a.drop.rate));
        a.drop.rank = in[0].rank;
        a.drop.global = off && full;
        for (int i = 0; i < in[0].rank; i++) {
            a.drop.dim[i] = in[0].dim[i];
            a.drop.off[i] = off && full ? off[i] : 0;
            a.drop.full[i] = off && full ? full[i] : in[0].dim[i];
        }
    }
    return a;
}

/* The rows of softmax / reduce along dim d of x. */
static un_cu_rows rows_of(const un_kt *x, int d) {
    un_cu_rows g = {span(x, 0, d) * span(x, d + 1, x->rank), x->dim[d], span(x, d + 1, x->rank), 0};
    return g;
}

/* The box of a concat/split piece: part (dims pdim) at offset `at` along axis of whole (dims
 * wdim); to_whole: part -> whole, else whole -> part. */
static un_cu_box piece_box(const un_kt *part, const un_kt *whole, int axis, int64_t at,
                           bool to_whole) {
    int64_t zero[UN_MAX_DIMS] = {0}, o[UN_MAX_DIMS] = {0};
    o[axis] = at;
    return to_whole ? un_cu_box_region(part->rank, part->dim, zero, whole->dim, o, part->dim)
                    : un_cu_box_region(part->rank, whole->dim, o, part->dim, zero, part->dim);
}

/* y = act(x W + b) into y. */
static const char *linear_into(cuda_state *s, const un_kt *in, int n_in, float *y, int act) {
    const un_kt *x = &in[0], *w = &in[1];
    int64_t k = w->dim[0], n = w->dim[1], m = span(x, 0, x->rank - 1);
    const char *err =
        CU->sgemm(s->blas, false, false, m, n, k, 1, FC(*x), k, 0, FC(*w), n, 0, 0, y, n, 0, 1);
    if (!err && (n_in > 2 || act != UN_CU_ACT_NONE))
        err = CU->bias_act(s->stream, y, n_in > 2 ? FC(in[2]) : NULL, m, n, act);
    return err;
}

/* ---- multihead attention: the plans of backend_cuda_kern.h on cuBLAS and the softmax kernels --
 */

static const char *run_plan(cuda_state *s, const un_cu_step *st, int n, float *const *buf) {
    const char *err = NULL;
    for (int i = 0; i < n && !err; i++) {
        const un_cu_step *g = &st[i];
        switch (g->kind) {
        case UN_CU_STEP_GEMM:
            err = CU->sgemm(s->blas, g->ta, g->tb, g->m, g->n, g->k, g->alpha, buf[g->a] + g->off_a,
                            g->lda, g->sa, buf[g->b] + g->off_b, g->ldb, g->sb, g->beta,
                            buf[g->c] + g->off_c, g->ldc, g->sc, g->batch);
            break;
        case UN_CU_STEP_SOFTMAX_FWD:
            err = CU->softmax_fwd(s->stream, &g->rows, buf[g->a], buf[g->c]);
            break;
        case UN_CU_STEP_SOFTMAX_BWD:
            err = CU->softmax_bwd(s->stream, &g->rows, buf[g->a], buf[g->b], buf[g->c]);
            break;
        case UN_CU_STEP_ZERO:
            err = CU->memset0(s->stream, buf[g->c], (size_t)g->m * sizeof(float));
            break;
        }
    }
    return err;
}

/* Forward (bwd false: out written) or backward (the forward recomputed without its output, then
 * the gradients accumulated) of multihead attention. */
static un_status mha_run(un_ctx *ctx, un_backend *be, const un_param *p, const un_kt *in,
                         const un_kt *out, const un_kt *dout, const un_kt *din, bool bwd) {
    int64_t heads = par(p, 0);
    if (heads > UN_CU_MHA_MAX_HEADS)
        return un_ctx_error(ctx, UN_ERR_LIMIT,
                            "multihead_attention: %lld heads on cuda (at most %d)",
                            (long long)heads, UN_CU_MHA_MAX_HEADS);
    un_cu_mha m = un_cu_mha_of(in[0].dim[0], in[0].dim[1], in[1].dim[1], in[0].dim[2], in[3].dim[1],
                               in[6].dim[1], heads, par(p, 1) != 0);
    float *buf[UN_CU_MHA_NBUF] = {0};
    for (int i = 0; i < 7; i++) {
        buf[UN_CU_MHA_Q_IN + i] = F(in[i]);
        if (bwd)
            buf[UN_CU_MHA_DQ_IN + i] = F(din[i]);
    }
    buf[UN_CU_MHA_OUT] = F(out[0]);
    if (bwd)
        buf[UN_CU_MHA_DOUT] = F(dout[0]);
    int last = bwd ? UN_CU_MHA_NBUF : UN_CU_MHA_DO;
    float *sc;
    un_status st = scratch(ctx, be, un_cu_mha_scratch_total(&m, bwd), &sc);
    if (st != UN_OK)
        return st;
    for (int b = UN_CU_MHA_Q; b < last; b++) {
        buf[b] = sc;
        sc += un_cu_mha_scratch(&m, b);
    }
    un_cu_step steps[UN_CU_MHA_MAX_STEPS];
    int n = un_cu_mha_fwd_plan(&m, steps);
    /* the backward recomputes everything but the output projection (its last step) */
    const char *err = run_plan(S(be), steps, bwd ? n - 1 : n, buf);
    if (!err && bwd) {
        bool want[7];
        for (int i = 0; i < 7; i++)
            want[i] = din[i].data != NULL;
        n = un_cu_mha_bwd_plan(&m, want, steps);
        err = run_plan(S(be), steps, n, buf);
    }
    return cu_st(ctx, err);
}

/* ---- conv2d (im2col of a chunk of images, one GEMM batched over groups), pool2d, batch_norm -- */

static un_cu_conv conv_of(const un_param *p, const un_kt *in) {
    return un_cu_conv_of(in[0].dim, in[1].dim, par(p, P_CONV_SH), par(p, P_CONV_SW),
                         par(p, P_CONV_PH), par(p, P_CONV_PW), par(p, P_CONV_GROUPS));
}

/* y = act(conv(x, w) + b), nc images at a time: im2col of the chunk into col, one GEMM over the
 * groups into Y (ybuf; y itself for one image), Y copied into y's layout; then bias and act. */
static const char *conv_into(cuda_state *s, const un_cu_conv *g, int64_t nc, const un_kt *in,
                             int n_in, float *y, int act, float *col, float *ybuf) {
    float *buf[UN_CU_CONV_NBUF] = {[UN_CU_CONV_W] = F(in[1]), [UN_CU_CONV_COL] = col};
    const char *err = NULL;
    for (int64_t n0 = 0; n0 < g->N && !err; n0 += nc) {
        un_cu_conv c = un_cu_conv_at(g, n0, nc);
        un_cu_step st = un_cu_conv_fwd_step(&c);
        float *yc = y + n0 * g->O * g->OHW;
        buf[UN_CU_CONV_Y] = c.N == 1 ? yc : ybuf;
        err = CU->im2col(s->stream, &c, FC(in[0]) + n0 * g->C * g->H * g->W, col);
        if (!err)
            err = run_plan(s, &st, 1, buf);
        if (!err && c.N > 1) {
            un_cu_box b = un_cu_conv_perm(&c, true);
            err = CU->box(s->stream, &b, yc, ybuf, sizeof(float), false);
        }
    }
    if (!err && (n_in > 2 || act != UN_CU_ACT_NONE))
        err = CU->chan_bias_act(s->stream, y, n_in > 2 ? FC(in[2]) : NULL, g->N, g->O, g->OHW, act);
    return err;
}

static un_status conv_fwd(un_ctx *ctx, un_backend *be, const un_param *p, const un_kt *in, int n_in,
                          const un_kt *out) {
    un_cu_conv g = conv_of(p, in);
    int64_t nc = un_cu_conv_chunk(&g, UN_CU_CONV_COL_MAX);
    float *col;
    un_status st = scratch(ctx, be, un_cu_conv_scratch(&g, nc, false), &col);
    if (st != UN_OK)
        return st;
    return cu_st(ctx, conv_into(S(be), &g, nc, in, n_in, F(out[0]), (int)par(p, P_CONV_ACT), col,
                                col + un_cu_conv_col(&g, nc)));
}

/* Per chunk: dY into Y's layout, dW += dY col^T and dcol = W^T dY (GEMMs over the groups), dcol
 * gathered into dx; db from the whole dY. */
static un_status conv_bwd(un_ctx *ctx, un_backend *be, const un_param *p, const un_kt *in, int n_in,
                          const un_kt *out, const un_kt *dout, const un_kt *din) {
    cuda_state *s = S(be);
    un_cu_conv g = conv_of(p, in);
    int act = (int)par(p, P_CONV_ACT);
    int64_t nc = un_cu_conv_chunk(&g, UN_CU_CONV_COL_MAX), ny = g.N * g.O * g.OHW;
    int64_t ncol = un_cu_conv_col(&g, nc), nyc = un_cu_conv_y(&g, nc);
    float *col;
    un_status st = scratch(ctx, be, un_cu_conv_scratch(&g, nc, true), &col);
    if (st != UN_OK)
        return st;
    float *dcol = col + ncol, *ybuf = dcol + ncol, *dpre = ybuf + nyc, *pre = dpre + ny;
    const char *err = NULL;
    float *dp = F(dout[0]); /* read only */
    if (act != UN_CU_ACT_NONE) {
        if (act == UN_CU_ACT_GELU) /* gelu's derivative reads the pre-activation */
            err = conv_into(s, &g, nc, in, n_in, pre, UN_CU_ACT_NONE, col, ybuf);
        if (!err)
            err = CU->act_back(s->stream, dpre, dp, act == UN_CU_ACT_GELU ? pre : NULL,
                               act == UN_CU_ACT_GELU ? NULL : FC(out[0]), ny, act);
        dp = dpre;
    }
    float *buf[UN_CU_CONV_NBUF] = {[UN_CU_CONV_W] = F(in[1]),
                                   [UN_CU_CONV_COL] = col,
                                   [UN_CU_CONV_DW] = F(din[1]),
                                   [UN_CU_CONV_DCOL] = dcol};
    for (int64_t n0 = 0; n0 < g.N && !err && (din[0].data || din[1].data); n0 += nc) {
        un_cu_conv c = un_cu_conv_at(&g, n0, nc);
        float *dpc = dp + n0 * g.O * g.OHW;
        buf[UN_CU_CONV_Y] = c.N == 1 ? dpc : ybuf;
        if (c.N > 1) {
            un_cu_box b = un_cu_conv_perm(&c, false);
            err = CU->box(s->stream, &b, ybuf, dpc, sizeof(float), false);
        }
        if (!err && din[1].data) {
            un_cu_step st1 = un_cu_conv_dw_step(&c);
            err = CU->im2col(s->stream, &c, FC(in[0]) + n0 * g.C * g.H * g.W, col);
            if (!err)
                err = run_plan(s, &st1, 1, buf);
        }
        if (!err && din[0].data) {
            un_cu_step st0 = un_cu_conv_dcol_step(&c);
            err = run_plan(s, &st0, 1, buf);
            if (!err)
                err = CU->col2im(s->stream, &c, dcol, F(din[0]) + n0 * g.C * g.H * g.W);
        }
    }
    if (!err && n_in > 2 && din[2].data)
        err = CU->chan_sum(s->stream, F(din[2]), dp, g.N, g.O, g.OHW);
    return cu_st(ctx, err);
}

static un_cu_pool pool_of(const un_param *p, const un_kt *x) {
    un_cu_pool g = {x->dim[0] * x->dim[1],
                    x->dim[2],
                    x->dim[3],
                    par(p, P_POOL_KH),
                    par(p, P_POOL_KW),
                    par(p, P_POOL_SH),
                    par(p, P_POOL_SW),
                    par(p, P_POOL_PH),
                    par(p, P_POOL_PW),
                    0,
                    0,
                    par(p, P_POOL_TYPE) == 1};
    g.OH = (g.H + 2 * g.ph - g.kh) / g.sh + 1;
    g.OW = (g.W + 2 * g.pw - g.kw) / g.sw + 1;
    return g;
}

static un_status cuda_forward(un_ctx *ctx, un_backend *be, un_op op, const un_param *p,
                              const un_kt *in, int n_in, un_kt *out, int n_out, uint64_t seed,
                              const int64_t *off, const int64_t *full) {
    cuda_state *s = S(be);
    un_status st = sticky_st(ctx, be);
    if (st != UN_OK)
        return st;
    if (!cuda_supports_op(be, op) || un_op_kind_of(op) != UN_OPK_REGULAR)
        return un_ctx_error(ctx, UN_ERR_INVALID, "cuda backend: no kernel for %s", un_op_name(op));
    const un_kt *x = &in[0];
    const char *err = NULL;
    switch (op) {
    case UN_OP_LINEAR:
        err = linear_into(s, in, n_in, F(out[0]), (int)par(p, P_LIN_ACT));
        break;
    case UN_OP_BATCH_MATMUL: {
        int r = x->rank;
        int64_t nb = span(x, 0, r - 2), m = x->dim[r - 2], k = x->dim[r - 1], n = in[1].dim[r - 1];
        err = CU->sgemm(s->blas, false, false, m, n, k, 1, FC(in[0]), k, m * k, FC(in[1]), n, k * n,
                        0, F(out[0]), n, m * n, nb);
        break;
    }
    case UN_OP_SOFTMAX: {
        un_cu_rows g = rows_of(x, norm_dim(par(p, 0), x->rank));
        err = CU->softmax_fwd(s->stream, &g, FC(*x), F(out[0]));
        break;
    }
    case UN_OP_LAYER_NORM: {
        int64_t n = x->dim[x->rank - 1], rows = numel(x) / n;
        float *stats;
        if ((st = scratch(ctx, be, 2 * rows, &stats)) != UN_OK)
            return st;
        err =
            CU->layer_norm_fwd(s->stream, FC(*x), FC(in[1]), FC(in[2]), F(out[0]), stats, rows, n);
        break;
    }
    case UN_OP_CONCAT: {
        int ax = norm_dim(par(p, 0), x->rank);
        un_cu_box a = piece_box(&in[0], &out[0], ax, 0, true);
        un_cu_box b = piece_box(&in[1], &out[0], ax, in[0].dim[ax], true);
        err = CU->box(s->stream, &a, out[0].data, in[0].data, sizeof(float), false);
        if (!err)
            err = CU->box(s->stream, &b, out[0].data, in[1].data, sizeof(float), false);
        break;
    }
    case UN_OP_SPLIT: {
        int ax = norm_dim(par(p, 0), x->rank);
        int64_t at = 0;
        for (int j = 0; j < n_out && !err; j++) {
            un_cu_box b = piece_box(&out[j], x, ax, at, false);
            err = CU->box(s->stream, &b, out[j].data, x->data, sizeof(float), false);
            at += out[j].dim[ax];
        }
        break;
    }
    case UN_OP_TRANSPOSE: {
        un_cu_box b = un_cu_box_transpose(x->rank, x->dim, norm_dim(par(p, 0), x->rank),
                                          norm_dim(par(p, 1), x->rank));
        err = CU->box(s->stream, &b, out[0].data, x->data, sizeof(float), false);
        break;
    }
    case UN_OP_EMBEDDING: {
        if ((st = check_index(ctx, be, op, x, in[1].dim[0], "index")) != UN_OK)
            return st;
        int64_t bag = x->dim[1];
        err = CU->embedding_fwd(s->stream, I(*x), FC(in[1]), F(out[0]), x->dim[0], bag,
                                in[1].dim[1], par(p, 0) == 1 ? 1.0f / (float)bag : 1.0f);
        break;
    }
    case UN_OP_REDUCE_SUM:
    case UN_OP_REDUCE_MEAN: {
        int d = norm_dim(par(p, 0), x->rank);
        un_cu_rows g = rows_of(x, d);
        err = CU->reduce_fwd(s->stream, &g, FC(*x), F(out[0]),
                             op == UN_OP_REDUCE_MEAN ? 1.0f / (float)x->dim[d] : 1.0f);
        break;
    }
    case UN_OP_MULTIHEAD_ATTENTION:
        return mha_run(ctx, be, p, in, out, NULL, NULL, false);
    case UN_OP_CONV2D:
        return conv_fwd(ctx, be, p, in, n_in, out);
    case UN_OP_POOL2D: {
        un_cu_pool g = pool_of(p, x);
        err = CU->pool_fwd(s->stream, &g, FC(*x), F(out[0]));
        break;
    }
    case UN_OP_BATCH_NORM:
        err = CU->batch_norm(s->stream, FC(*x), FC(in[1]), FC(in[2]), F(out[0]), NULL, NULL, NULL,
                             NULL, x->dim[0], x->dim[1], span(x, 2, x->rank), false);
        break;
    case UN_OP_CROSS_ENTROPY:
        if ((st = check_index(ctx, be, op, &in[1], x->dim[1], "label")) != UN_OK)
            return st;
        err = CU->cross_entropy(s->stream, FC(*x), I(in[1]), x->dim[0], x->dim[1], F(out[0]), NULL,
                                NULL, 0, false);
        break;
    default: { /* element-wise, dropout, reshape, flat, identity */
        un_cu_ew_args a = ew_args(op, p, in, n_in, seed, off, full);
        a.z = F(out[0]);
        err = CU->ew_fwd(s->stream, &a);
        break;
    }
    }
    return cu_st(ctx, err);
}

/* d pre-activation of linear: dy itself without activation, else scratch = dy act'. */
static const char *linear_dpre(un_ctx *ctx, un_backend *be, const un_kt *in, int n_in,
                               const un_kt *out, const float *dy, int act, int64_t m, int64_t n,
                               const float **dpre, un_status *st) {
    cuda_state *s = S(be);
    *dpre = dy;
    if (act == UN_CU_ACT_NONE)
        return NULL;
    float *buf;
    if ((*st = scratch(ctx, be, 2 * m * n, &buf)) != UN_OK)
        return NULL;
    const float *pre = NULL;
    const char *err = NULL;
    if (act == UN_CU_ACT_GELU) { /* gelu's derivative reads the pre-activation */
        err = linear_into(s, in, n_in, buf + m * n, UN_CU_ACT_NONE);
        pre = buf + m * n;
    }
    if (!err)
        err = CU->act_back(s->stream, buf, dy, pre, act == UN_CU_ACT_GELU ? NULL : FC(out[0]),
                           m * n, act);
    *dpre = buf;
    return err;
}

static un_status cuda_backward(un_ctx *ctx, un_backend *be, un_op op, const un_param *p,
                               const un_kt *in, int n_in, const un_kt *out, int n_out,
                               const un_kt *dout, un_kt *din, uint64_t seed, const int64_t *off,
                               const int64_t *full) {
    cuda_state *s = S(be);
    un_status st = sticky_st(ctx, be);
    if (st != UN_OK)
        return st;
    if (!cuda_supports_op(be, op) || un_op_kind_of(op) != UN_OPK_REGULAR)
        return un_ctx_error(ctx, UN_ERR_INVALID, "cuda backend: no kernel for %s", un_op_name(op));
    const un_kt *x = &in[0];
    const char *err = NULL;
    if (op != UN_OP_SPLIT && !dout[0].data)
        return UN_OK; /* a zero output gradient adds nothing */
    switch (op) {
    case UN_OP_LINEAR: {
        const un_kt *w = &in[1];
        int64_t k = w->dim[0], n = w->dim[1], m = span(x, 0, x->rank - 1);
        const float *dpre;
        err = linear_dpre(ctx, be, in, n_in, out, FC(dout[0]), (int)par(p, P_LIN_ACT), m, n, &dpre,
                          &st);
        if (st != UN_OK)
            return st;
        if (!err && din[0].data)
            err = CU->sgemm(s->blas, false, true, m, k, n, 1, dpre, n, 0, FC(*w), n, 0, 1,
                            F(din[0]), k, 0, 1);
        if (!err && din[1].data)
            err = CU->sgemm(s->blas, true, false, k, n, m, 1, FC(*x), k, 0, dpre, n, 0, 1,
                            F(din[1]), n, 0, 1);
        if (!err && n_in > 2 && din[2].data)
            err = CU->col_sum(s->stream, F(din[2]), dpre, m, n);
        break;
    }
    case UN_OP_BATCH_MATMUL: {
        int r = x->rank;
        int64_t nb = span(x, 0, r - 2), m = x->dim[r - 2], k = x->dim[r - 1], n = in[1].dim[r - 1];
        if (din[0].data)
            err = CU->sgemm(s->blas, false, true, m, k, n, 1, FC(dout[0]), n, m * n, FC(in[1]), n,
                            k * n, 1, F(din[0]), k, m * k, nb);
        if (!err && din[1].data)
            err = CU->sgemm(s->blas, true, false, k, n, m, 1, FC(in[0]), k, m * k, FC(dout[0]), n,
                            m * n, 1, F(din[1]), n, k * n, nb);
        break;
    }
    case UN_OP_SOFTMAX: {
        un_cu_rows g = rows_of(x, norm_dim(par(p, 0), x->rank));
        if (din[0].data)
            err = CU->softmax_bwd(s->stream, &g, FC(out[0]), FC(dout[0]), F(din[0]));
        break;
    }
    case UN_OP_LAYER_NORM: {
        int64_t n = x->dim[x->rank - 1], rows = numel(x) / n;
        float *stats;
        if ((st = scratch(ctx, be, 2 * rows, &stats)) != UN_OK)
            return st;
        err = CU->layer_norm_fwd(s->stream, FC(*x), FC(in[1]), FC(in[2]), NULL, stats, rows, n);
        if (!err)
            err = CU->layer_norm_bwd(s->stream, FC(*x), FC(in[1]), FC(dout[0]), stats, F(din[0]),
                                     F(din[1]), F(din[2]), rows, n);
        break;
    }
    case UN_OP_CONCAT: {
        int ax = norm_dim(par(p, 0), x->rank);
        for (int i = 0; i < 2 && !err; i++)
            if (din[i].data) {
                un_cu_box b = piece_box(&in[i], &out[0], ax, i ? in[0].dim[ax] : 0, false);
                err = CU->box(s->stream, &b, din[i].data, dout[0].data, sizeof(float), true);
            }
        break;
    }
    case UN_OP_SPLIT: {
        int ax = norm_dim(par(p, 0), x->rank);
        int64_t at = 0;
        for (int j = 0; j < n_out && !err; j++) {
            if (dout[j].data && din[0].data) {
                un_cu_box b = piece_box(&out[j], x, ax, at, true);
                err = CU->box(s->stream, &b, din[0].data, dout[j].data, sizeof(float), true);
            }
            at += out[j].dim[ax];
        }
        break;
    }
    case UN_OP_TRANSPOSE: {
        /* the forward's box read backwards: dx[src] += dy[dst] */
        un_cu_box b = un_cu_box_transpose(x->rank, x->dim, norm_dim(par(p, 0), x->rank),
                                          norm_dim(par(p, 1), x->rank));
        for (int i = 0; i < b.rank; i++) {
            int64_t t = b.src_stride[i];
            b.src_stride[i] = b.dst_stride[i];
            b.dst_stride[i] = t;
        }
        if (din[0].data)
            err = CU->box(s->stream, &b, din[0].data, dout[0].data, sizeof(float), true);
        break;
    }
    case UN_OP_EMBEDDING: {
        int64_t bag = x->dim[1];
        if (din[1].data)
            err = CU->embedding_bwd(s->stream, I(*x), FC(dout[0]), F(din[1]), x->dim[0], bag,
                                    in[1].dim[1], par(p, 0) == 1 ? 1.0f / (float)bag : 1.0f);
        break;
    }
    case UN_OP_REDUCE_SUM:
    case UN_OP_REDUCE_MEAN: {
        int d = norm_dim(par(p, 0), x->rank);
        un_cu_rows g = rows_of(x, d);
        if (din[0].data)
            err = CU->reduce_bwd(s->stream, &g, FC(dout[0]), F(din[0]),
                                 op == UN_OP_REDUCE_MEAN ? 1.0f / (float)x->dim[d] : 1.0f);
        break;
    }
    case UN_OP_MULTIHEAD_ATTENTION:
        return mha_run(ctx, be, p, in, out, dout, din, true);
    case UN_OP_CONV2D:
        return conv_bwd(ctx, be, p, in, n_in, out, dout, din);
    case UN_OP_POOL2D: {
        un_cu_pool g = pool_of(p, x);
        if (din[0].data)
            err = CU->pool_bwd(s->stream, &g, FC(*x), FC(dout[0]), F(din[0]));
        break;
    }
    case UN_OP_BATCH_NORM:
        err = CU->batch_norm(s->stream, FC(*x), FC(in[1]), FC(in[2]), NULL, FC(dout[0]), F(din[0]),
                             F(din[1]), F(din[2]), x->dim[0], x->dim[1], span(x, 2, x->rank), true);
        break;
    case UN_OP_CROSS_ENTROPY:
        if (din[0].data)
            err = CU->cross_entropy(s->stream, FC(*x), I(in[1]), x->dim[0], x->dim[1], NULL,
                                    F(din[0]), FC(dout[0]), 0, true);
        break;
    default: {
        un_cu_ew_args a = ew_args(op, p, in, n_in, seed, off, full);
        a.out = FC(out[0]);
        a.dz = FC(dout[0]);
        a.dx = F(din[0]);
        a.dy = n_in > 1 ? F(din[1]) : NULL;
        if (a.dx || a.dy)
            err = CU->ew_bwd(s->stream, &a);
        break;
    }
    }
    return cu_st(ctx, err);
}

/* ---- loss and optimizer (backend v2 slots) ---- */

static un_status cuda_loss(un_ctx *ctx, un_backend *be, un_loss_kind kind, const un_kt *y,
                           const int64_t *off, const int64_t *full, const un_kt *target,
                           un_kt *grad, double *loss) {
    cuda_state *s = S(be);
    un_status st = sticky_st(ctx, be);
    if (st != UN_OK)
        return st;
    int64_t n = numel(y), zero[UN_MAX_DIMS] = {0};
    const int64_t *o = off ? off : zero, *f = off ? full : y->dim;
    const char *err = NULL;
    float *part;
    *loss = 0;
    if (kind == UN_LOSS_CE) {
        int64_t rows = y->dim[0], c = y->dim[1];
        if ((st = scratch(ctx, be, rows, &part)) != UN_OK)
            return st;
        un_kt lab = *target;
        lab.rank = 1, lab.dim[0] = rows;
        lab.data = (int64_t *)target->data + o[0];
        if ((st = check_index(ctx, be, UN_OP_CROSS_ENTROPY, &lab, c, "label")) != UN_OK)
            return st;
        err = CU->cross_entropy(s->stream, FC(*y), I(lab), rows, c, part, F(*grad), NULL,
                                1.0f / (float)f[0], false);
        n = rows;
    } else {
        un_cu_geom g = un_cu_geom_1d(n);
        int64_t total = 1;
        for (int i = 0; i < y->rank; i++)
            total *= f[i];
        if ((st = scratch(ctx, be, g.grid, &part)) != UN_OK)
            return st;
        err = CU->mse(s->stream, y->rank, y->dim, o, f, FC(*y), FC(*target), F(*grad), part, n,
                      (float)total);
        n = g.grid;
    }
    float *host = un_xmalloc((size_t)(n < 1 ? 1 : n) * sizeof *host);
    if (!err)
        err = CU->d2h(s->stream, host, part, (size_t)n * sizeof *host);
    for (int64_t i = 0; i < n && !err; i++)
        *loss += host[i];
    free(host);
    return cu_st(ctx, err);
}

static un_status cuda_optim_step(un_ctx *ctx, un_backend *be, const un_optim_params *p, int64_t t,
                                 const un_optim_seg *segs, int n_segs, void *w, const void *g,
                                 void *m, void *v) {
    un_status st = sticky_st(ctx, be);
    if (st != UN_OK)
        return st;
    un_cu_opt o = p->kind == UN_OPTIM_ADAM ? un_cu_opt_adam(p->lr, p->beta1, p->beta2, p->eps, t)
                                           : un_cu_opt_sgd(p->lr, p->momentum);
    const char *err = NULL;
    size_t at = 0; /* float elements: segment k's state follows segment k-1's */
    for (int k = 0; k < n_segs && !err; k++) {
        if (segs[k].n > 0)
            err = CU->opt_step(S(be)->stream, &o, (float *)w + segs[k].off,
                               (const float *)g + segs[k].off, (float *)m + at,
                               v ? (float *)v + at : NULL, segs[k].n);
        at += (size_t)segs[k].n;
    }
    return cu_st(ctx, err);
}

/* Kernel time on the stream between two events (the host's launch time left out). */
static un_status cuda_time_begin(un_ctx *ctx, un_backend *be) {
    cuda_state *s = S(be);
    const char *err = NULL;
    for (int i = 0; i < 2 && !err; i++)
        if (!s->ev[i])
            err = CU->event_new(&s->ev[i]);
    if (!err)
        err = CU->event_record(s->ev[0], s->stream);
    return cu_st(ctx, err);
}

static un_status cuda_time_end(un_ctx *ctx, un_backend *be, double *sec) {
    cuda_state *s = S(be);
    float ms = 0;
    const char *err = CU->event_record(s->ev[1], s->stream);
    if (!err)
        err = CU->event_ms(s->ev[0], s->ev[1], &ms);
    *sec = 1e-3 * (double)ms;
    un_status st = cu_st(ctx, err);
    return st != UN_OK ? st : sticky_st(ctx, be);
}

static un_status cuda_sync(un_ctx *ctx, un_backend *be) {
    un_status st = cu_st(ctx, CU->stream_sync(S(be)->stream));
    return st != UN_OK ? st : sticky_st(ctx, be);
}

static un_status cuda_memory(un_ctx *ctx, un_backend *be, int64_t *avail, bool *host) {
    size_t free_b = 0, total_b = 0;
    const char *err = CU->set_device(S(be)->device);
    if (!err)
        err = CU->mem_info(&free_b, &total_b);
    *avail = (int64_t)free_b;
    *host = false;
    return cu_st(ctx, err);
}

/* The device data plane: NCCL on this backend's device and stream (comm_nccl.h), when every rank
 * on this machine has a GPU of its own (NCCL refuses two ranks on one GPU; they stage instead). */
static bool cuda_plane_ready(const un_backend *be, const un_comm *ctrl) {
    return un_comm_node_size(ctrl) <= CU->device_count(NULL) &&
           un_comm_nccl_ready(S(be)->device, NULL);
}

static un_status cuda_plane_new(un_ctx *ctx, un_backend *be, un_comm *ctrl, un_comm_dev **out) {
    un_status st = un_comm_nccl_new(ctx, ctrl, S(be)->device, S(be)->stream, out);
    if (st == UN_OK)
        (*out)->be = be;
    return st;
}

static const struct un_backend_i cuda_iface = {
    .name = cuda_name,
    .free = cuda_free,
    .supports_op = cuda_supports_op,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .zero = cuda_zero,
    .write = cuda_write,
    .read = cuda_read,
    .copy = cuda_copy,
    .copy_region = cuda_copy_region,
    .op_forward = cuda_forward,
    .op_backward = cuda_backward,
    .loss = cuda_loss,
    .optim_step = cuda_optim_step,
    .synchronize = cuda_sync,
    .time_begin = cuda_time_begin,
    .time_end = cuda_time_end,
    .memory = cuda_memory,
    .plane_ready = cuda_plane_ready,
    .plane_new = cuda_plane_new,
};

un_status un__backend_cuda_new_opts(un_ctx *ctx, un_prec prec, int device, bool tf32,
                                    un_backend **out) {
    *out = NULL;
    if (prec != UN_PREC_F32)
        return un_ctx_error(ctx, UN_ERR_UNAVAILABLE,
                            "cuda backend: float32 only (float64 runs on the cpu backend)");
    const char *why = NULL;
    int n = CU->device_count(&why);
    if (device < 0 || device >= n)
        return un_ctx_error(ctx, UN_ERR_UNAVAILABLE,
                            "cuda backend: device %d is not available (%s)", device,
                            n == 0 && why ? why : "fewer devices");
    cuda_state *s = un_xcalloc(1, sizeof *s);
    un_backend *be = un_xcalloc(1, sizeof *be);
    *be = (un_backend){.api_version = UN_BACKEND_API_VERSION,
                       .iface = &cuda_iface,
                       .kind = UN_DEV_CUDA,
                       .prec = prec,
                       .host_visible = false,
                       .context = s};
    s->device = device;
    const char *err = CU->set_device(device);
    if (!err)
        err = CU->device_name(device, s->dev_name, sizeof s->dev_name);
    if (!err)
        err = CU->stream_new(&s->stream);
    if (!err)
        err = CU->blas_new(&s->blas, s->stream, tf32);
    void *flag = NULL;
    bool oom = false;
    if (!err)
        err = CU->malloc(&flag, sizeof(int64_t), &oom);
    s->flag = flag;
    if (err) {
        cuda_free(be);
        return cu_st(ctx, err);
    }
    *out = be;
    return UN_OK;
}
