/* cost.c - per-piece operator costs (measured or roofline), communication (alpha-beta, ring and
 * tree collectives), optimizer steps, and the query cache (open addressing on the exact key). */
#include "search/cost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend_cuda_kern.h"

typedef struct ckey { /* zeroed before it is filled, so that memcmp compares it */
    int32_t op, n_in;
    un_param params[UN_MAX_PARAMS];
    int32_t rank[UN_MAX_INPUTS], dtype[UN_MAX_INPUTS];
    int64_t dim[UN_MAX_INPUTS][UN_MAX_DIMS];
} ckey;

typedef struct centry {
    uint64_t hash; /* 0 = empty slot */
    ckey key;
    un_op_cost val;
} centry;

struct un_cost_model {
    const un_spec *spec;
    un_machine m;
    un_mprec prec;
    int es; /* float element bytes */
    un_rulesdb *db;
    char device[48]; /* the op-cost cache's device key */
    centry *tab;
    size_t cap, used;
    bool warned[UN_OP_COUNT];
    un_buf warnings;
    int64_t queries, cached, measured;
    un_loss_kind loss;  /* the run's (un_cost_model_set_loss; 0: cross-entropy) */
    struct opt_points { /* measured optimizer steps of this device kind, by parameter count */
        bool loaded;    /* read from the op-cost cache (on the first query) */
        int64_t n;
        double *count, *sec; /* ascending counts */
    } opt[2];                /* sgd, adam */
};

un_status un_cost_model_new(un_ctx *ctx, const un_spec *spec, const un_machine *m, un_mprec prec,
                            un_rulesdb *db, un_cost_model **out) {
    *out = NULL;
    if (prec != UN_MPREC_F32 && prec != UN_MPREC_F64)
        return un_ctx_error(ctx, UN_ERR_INVALID, "cost model: precision must be f32 or f64");
    un_cost_model *cm = un_xcalloc(1, sizeof *cm);
    cm->spec = spec;
    cm->m = *m;
    cm->prec = prec;
    cm->es = prec == UN_MPREC_F64 ? 8 : 4;
    cm->db = db;
    snprintf(cm->device, sizeof cm->device, "%s%s", m->dev.kind,
             prec == UN_MPREC_F64 ? "-f64" : "");
    cm->cap = 256;
    cm->tab = un_xcalloc(cm->cap, sizeof *cm->tab);
    *out = cm;
    return UN_OK;
}

void un_cost_model_free(un_cost_model *cm) {
    if (!cm)
        return;
    free(cm->tab);
    un_buf_deinit(&cm->warnings);
    for (int i = 0; i < 2; i++) {
        free(cm->opt[i].count);
        free(cm->opt[i].sec);
    }
    free(cm);
}

void un_cost_pieces(const un_cost_model *cm, int64_t *measured, int64_t *scaled, int64_t *model) {
    *measured = *scaled = *model = 0;
    for (size_t i = 0; i < cm->cap; i++)
        if (cm->tab[i].hash)
            ++*(cm->tab[i].val.measured ? measured : cm->tab[i].val.scaled ? scaled : model);
}

const un_machine *un_cost_machine(const un_cost_model *cm) { return &cm->m; }
int un_cost_elem_bytes(const un_cost_model *cm) { return cm->es; }
const char *un_cost_warnings(const un_cost_model *cm) {
    return cm->warnings.data ? cm->warnings.data : "";
}
void un_cost_stats(const un_cost_model *cm, int64_t *queries, int64_t *cached, int64_t *measured) {
    *queries = cm->queries;
    *cached = cm->cached;
    *measured = cm->measured;
}

/* ---- keys ---- */

bool un_cost_key(const un_spec *spec, un_op op, const un_param *params, const un_shape *in,
                 int n_in, char *op_sig, size_t n_sig, char *shape, size_t n_shape) {
    const un_op_spec *os = un_spec_op(spec, op);
    un_buf b = {0};
    un_buf_printf(&b, "%s[", os->name);
    for (int i = 0; i < os->n_params; i++) {
        un_buf_printf(&b, "%s%s=", i ? "," : "", os->params[i].name);
        un_spec_param_str(&os->params[i], &params[i], &b);
    }
    un_buf_printf(&b, "]");
    bool ok = b.len < n_sig;
    snprintf(op_sig, n_sig, "%s", b.data);
    b.len = 0;
    b.data[0] = 0;
    for (int t = 0; t < n_in; t++) {
        char s[128];
        un_shape l = un_shape_logical(&in[t]);
        un_shape_str(&l, s, sizeof s);
        un_buf_printf(&b, "%s%s", t ? ";" : "", s);
    }
    ok = ok && b.len < n_shape;
    snprintf(shape, n_shape, "%s", b.data ? b.data : "");
    un_buf_deinit(&b);
    return ok;
}

void un_cost_piece_shapes(const un_graph *g, int32_t id, un_shape *in) {
    const un_node *nd = un_graph_node(g, id);
    for (int t = 0; t < nd->n_in; t++) {
        const un_shape *s = un_graph_shape(g, nd->in[t]);
        int64_t d[UN_MAX_DIMS];
        for (int i = 0; i < s->rank; i++)
            d[i] = s->dim[i] / s->shard[i];
        in[t] = un_shape_make(s->rank, d, s->dtype);
    }
}

static void key_make(ckey *k, un_op op, const un_param *params, int n_params, const un_shape *in,
                     int n_in) {
    memset(k, 0, sizeof *k);
    k->op = (int32_t)op;
    k->n_in = n_in;
    for (int i = 0; i < n_params; i++) {
        k->params[i].len = params[i].len;
        int n = params[i].len < 0 ? 1 : params[i].len;
        for (int j = 0; j < n && j < UN_MAX_DIMS; j++)
            k->params[i].v[j] = params[i].v[j];
    }
    for (int t = 0; t < n_in; t++) {
        k->rank[t] = in[t].rank;
        k->dtype[t] = (int32_t)in[t].dtype;
        for (int i = 0; i < in[t].rank; i++)
            k->dim[t][i] = in[t].dim[i];
    }
}

static centry *cache_slot(un_cost_model *cm, const ckey *k, uint64_t h) {
    size_t i = (size_t)h & (cm->cap - 1);
    while (cm->tab[i].hash && !(cm->tab[i].hash == h && memcmp(&cm->tab[i].key, k, sizeof *k) == 0))
        i = (i + 1) & (cm->cap - 1);
    return &cm->tab[i];
}

static void cache_grow(un_cost_model *cm) {
    centry *old = cm->tab;
    size_t n = cm->cap;
    cm->cap *= 2;
    cm->tab = un_xcalloc(cm->cap, sizeof *cm->tab);
    for (size_t i = 0; i < n; i++)
        if (old[i].hash)
            *cache_slot(cm, &old[i].key, old[i].hash) = old[i];
    free(old);
}

/* ---- operator costs ---- */

static double roofline(const un_cost_model *cm, double flops, double bytes) {
    double tc = flops / un_machine_flops(&cm->m, cm->prec), tm = bytes / cm->m.dev.mem_bw;
    return cm->m.dev.op_overhead + (tc > tm ? tc : tm);
}

static void warn(un_cost_model *cm, un_op op, const char *what) {
    if (cm->warned[op])
        return;
    cm->warned[op] = true;
    un_buf_printf(&cm->warnings, "warning: cost model: %s has no %s in the spec; using %s\n",
                  un_op_name(op), what,
                  strcmp(what, "cost expression") == 0
                      ? "flops = numel(out), bytes = 4 * (numel(ins) + numel(outs))"
                      : "twice the forward");
}

/* ---- the CUDA backend's kernels (device.gpu): what runtime/backend_cuda.c launches per op ---- */

/* Each kernel costs max(launch, its device time) (gemm_launch for a cuBLAS call): the host issues
 * the next kernel while the device runs this one, so short kernels cost their launch and long ones
 * their run. */
typedef struct kclock {
    const un_device_kind *d;
    double peak; /* flop/s */
    double t;    /* seconds so far */
    int n;       /* kernels so far */
} kclock;

static void k_issue(kclock *k, double host, double dev) {
    k->t += dev > host ? dev : host;
    k->n++;
}
static void k_run(kclock *k, double dev) { k_issue(k, k->d->gpu.launch, dev); }

/* A memory-bound kernel of launch geometry g moving `floats` 4-byte values: at mem_bw, or less
 * when it has too few threads to keep the memory busy (Little's law, one load in flight each). */
static void k_mem(kclock *k, un_cu_geom g, double floats) {
    if (g.grid <= 0)
        return; /* the backend launches nothing */
    double bw = (double)g.grid * g.block * 4 / k->d->gpu.mem_latency;
    k_run(k, 4 * floats / (bw < k->d->mem_bw ? bw : k->d->mem_bw));
}
static void k_ew(kclock *k, int64_t n, double floats) { k_mem(k, un_cu_geom_1d(n), floats); }

/* One cuBLAS sgemm over `batch` strided matrices: output tiles of gemm_tile^2 spread over the SMs
 * in waves (a last partial wave idles the rest: the GEMM's utilisation), at the f32 peak, or at
 * mem_bw when its operands take longer to move; plus its fill and drain. */
static void k_gemm(kclock *k, int64_t m, int64_t n, int64_t kk, int64_t batch) {
    if (m <= 0 || n <= 0 || kk <= 0 || batch <= 0)
        return;
    const un_gpu_kernels *g = &k->d->gpu;
    double T = g->gemm_tile, tiles = ceil((double)m / T) * ceil((double)n / T) * (double)batch;
    double waves = ceil(tiles / g->sms), use = tiles / (waves * g->sms);
    double flops = 2.0 * (double)m * (double)n * (double)kk * (double)batch;
    double bytes = 4.0 * ((double)m * kk + (double)kk * n + (double)m * n) * (double)batch;
    double tc = flops / (k->peak * use), tm = bytes / k->d->mem_bw;
    k_issue(k, g->gemm_launch, g->gemm_latency + (tc > tm ? tc : tm));
}

/* The steps of an attention or conv plan (backend_cuda_kern.h), as run_plan runs them. */
static void k_plan(kclock *k, const un_cu_step *st, int n) {
    for (int i = 0; i < n; i++) {
        const un_cu_step *g = &st[i];
        if (g->kind == UN_CU_STEP_GEMM)
            k_gemm(k, g->m, g->n, g->k, g->batch);
        else if (g->kind == UN_CU_STEP_ZERO)
            k_run(k, 4.0 * (double)g->m / k->d->mem_bw); /* cudaMemsetAsync */
        else /* softmax rows: forward reads and writes, backward reads two and adds into one */
            k_mem(k, un_cu_geom_rows(g->rows.rows, g->rows.len),
                  (double)g->rows.rows * (double)g->rows.len *
                      (g->kind == UN_CU_STEP_SOFTMAX_FWD ? 2 : 4));
    }
}

static double numel_d(const un_shape *s) { return (double)un_shape_numel(s); }

/* conv2d: per chunk of images im2col, one GEMM over the groups, the copy into y's layout; then
 * bias and activation (conv_fwd); the backward as conv_bwd, with every input gradient wanted. */
static un_cu_conv conv_geom(const un_param *p, const un_shape *in) {
    return un_cu_conv_of(in[0].dim, in[1].dim, p[0].v[0], p[1].v[0], p[2].v[0], p[3].v[0],
                         p[4].v[0]);
}
static void k_conv(kclock *k, const un_param *p, const un_shape *in, int n_in, bool bwd) {
    un_cu_conv g = conv_geom(p, in);
    int act = (int)p[5].v[0];
    int64_t nc = un_cu_conv_chunk(&g, UN_CU_CONV_COL_MAX);
    double ny = (double)(g.N * g.O * g.OHW);
    if (!bwd || act == UN_CU_ACT_GELU) { /* the forward, or gelu's pre-activation recomputed */
        for (int64_t n0 = 0; n0 < g.N; n0 += nc) {
            un_cu_conv c = un_cu_conv_at(&g, n0, nc);
            int64_t ncol = c.C * c.KH * c.KW * c.N * c.OHW;
            k_ew(k, ncol, (double)ncol + (double)(c.N * c.C * c.H * c.W));
            un_cu_step st = un_cu_conv_fwd_step(&c);
            k_plan(k, &st, 1);
            if (c.N > 1)
                k_ew(k, c.N * c.O * c.OHW, 2.0 * (double)(c.N * c.O * c.OHW));
        }
        if ((n_in > 2 && !bwd) || (act != UN_CU_ACT_NONE && !bwd))
            k_ew(k, (int64_t)ny, 2 * ny);
        if (!bwd)
            return;
    }
    if (act != UN_CU_ACT_NONE)
        k_ew(k, (int64_t)ny, 3 * ny);
    for (int64_t n0 = 0; n0 < g.N; n0 += nc) {
        un_cu_conv c = un_cu_conv_at(&g, n0, nc);
        int64_t ncol = c.C * c.KH * c.KW * c.N * c.OHW, nx = c.N * c.C * c.H * c.W;
        if (c.N > 1)
            k_ew(k, c.N * c.O * c.OHW, 2.0 * (double)(c.N * c.O * c.OHW));
        k_ew(k, ncol, (double)ncol + (double)nx); /* im2col for dW */
        un_cu_step st[2] = {un_cu_conv_dw_step(&c), un_cu_conv_dcol_step(&c)};
        k_plan(k, st, 2);
        /* col2im: every dx element gathers its KH KW col entries */
        k_ew(k, nx, (double)(c.KH * c.KW) * (double)nx / (double)(c.sh * c.sw) + 2.0 * nx);
    }
    if (n_in > 2)
        k_mem(k, un_cu_geom_rows(g.O, g.N * g.OHW), ny);
}

/* multihead attention: the forward plan; the backward recomputes all of it but the output
 * projection (no stash), then runs the backward plan with every gradient wanted. */
static bool mha_geom(const un_param *p, const un_shape *in, un_cu_mha *m) {
    *m = un_cu_mha_of(in[0].dim[0], in[0].dim[1], in[1].dim[1], in[0].dim[2], in[3].dim[1],
                      in[6].dim[1], p[0].v[0], p[1].v[0] != 0);
    return m->heads <= UN_CU_MHA_MAX_HEADS && m->heads >= 1; /* else the backend refuses it */
}
static void k_mha(kclock *k, const un_param *p, const un_shape *in, bool bwd) {
    un_cu_mha m;
    if (!mha_geom(p, in, &m))
        return;
    un_cu_step st[UN_CU_MHA_MAX_STEPS];
    int n = un_cu_mha_fwd_plan(&m, st);
    k_plan(k, st, bwd ? n - 1 : n);
    if (bwd) {
        bool want[7] = {true, true, true, true, true, true, true};
        k_plan(k, st, un_cu_mha_bwd_plan(&m, want, st));
    }
}

/* Seconds of the kernels the CUDA backend runs for one piece, forward or backward; *kernels
 * counts them. Mirrors cuda_forward / cuda_backward of runtime/backend_cuda.c. */
static double gpu_op_time(const un_cost_model *cm, un_op op, const un_param *p, const un_shape *in,
                          int n_in, const un_infer *inf, bool bwd, int *kernels) {
    /* the executor's own work for the op on the host, then its kernels */
    kclock k = {&cm->m.dev, un_machine_flops(&cm->m, UN_MPREC_F32), cm->m.dev.op_overhead, 0};
    const un_shape *x = &in[0];
    double nx = numel_d(x), no = inf->n_out > 0 ? numel_d(&inf->out[0]) : 0;
    int r = x->rank;
    switch (op) {
    case UN_OP_LINEAR: {
        int64_t kk = in[1].dim[0], n = in[1].dim[1], m = (int64_t)(nx / (double)(kk ? kk : 1));
        int act = (int)p[0].v[0];
        if (!bwd || act == UN_CU_ACT_GELU) { /* linear_into: the GEMM, then bias and act */
            k_gemm(&k, m, n, kk, 1);
            if (n_in > 2 || (act != UN_CU_ACT_NONE && !bwd))
                k_ew(&k, m * n, 2.0 * (double)(m * n));
        }
        if (bwd) {
            if (act != UN_CU_ACT_NONE)
                k_ew(&k, m * n, 3.0 * (double)(m * n));
            k_gemm(&k, m, kk, n, 1); /* dx */
            k_gemm(&k, kk, n, m, 1); /* dW */
            if (n_in > 2)
                k_mem(&k, un_cu_geom_cols(n), (double)(m * n));
        }
        break;
    }
    case UN_OP_BATCH_MATMUL: {
        int64_t nb = 1, m = x->dim[r - 2], kk = x->dim[r - 1], n = in[1].dim[r - 1];
        for (int i = 0; i < r - 2; i++)
            nb *= x->dim[i];
        if (!bwd)
            k_gemm(&k, m, n, kk, nb);
        else {
            k_gemm(&k, m, kk, n, nb);
            k_gemm(&k, kk, n, m, nb);
        }
        break;
    }
    case UN_OP_SOFTMAX: {
        int d = (int)(p[0].v[0] < 0 ? p[0].v[0] + r : p[0].v[0]);
        k_mem(&k, un_cu_geom_rows((int64_t)(nx / (double)x->dim[d]), x->dim[d]),
              bwd ? 3 * nx : 2 * nx);
        break;
    }
    case UN_OP_LAYER_NORM: { /* the backward recomputes the statistics, then dx and dgamma, dbeta */
        int64_t n = x->dim[r - 1], rows = (int64_t)(nx / (double)n);
        un_cu_geom g = un_cu_geom_rows(rows, n);
        k_mem(&k, g, bwd ? nx : 2 * nx);
        if (bwd) {
            k_mem(&k, g, 3 * nx);
            k_mem(&k, un_cu_geom_cols(n), 2 * nx);
        }
        break;
    }
    case UN_OP_CONCAT: /* a box per input: read and write; the backward adds into the gradients */
        k_ew(&k, un_shape_numel(&in[0]), (bwd ? 3 : 2) * numel_d(&in[0]));
        k_ew(&k, un_shape_numel(&in[1]), (bwd ? 3 : 2) * numel_d(&in[1]));
        break;
    case UN_OP_SPLIT:
        for (int j = 0; j < inf->n_out; j++)
            k_ew(&k, un_shape_numel(&inf->out[j]), (bwd ? 3 : 2) * numel_d(&inf->out[j]));
        break;
    case UN_OP_EMBEDDING: /* the index check (a copy in, a kernel, a copy out: a sync), the gather
                           */
        if (!bwd) {
            k_ew(&k, un_shape_numel(x), nx);
            k_run(&k, 0);
            k_run(&k, 0);
            k_ew(&k, (int64_t)no, no + nx);
        } else {
            k_ew(&k, (int64_t)(nx * (double)in[1].dim[1]), 3 * nx * (double)in[1].dim[1]);
        }
        break;
    case UN_OP_REDUCE_SUM:
    case UN_OP_REDUCE_MEAN:
        k_ew(&k, bwd ? (int64_t)nx : (int64_t)no, nx + no);
        break;
    case UN_OP_MULTIHEAD_ATTENTION:
        k_mha(&k, p, in, bwd);
        break;
    case UN_OP_CONV2D:
        k_conv(&k, p, in, n_in, bwd);
        break;
    case UN_OP_POOL2D:
        k_ew(&k, (int64_t)no, bwd ? 2 * nx + no : nx + no);
        break;
    case UN_OP_BATCH_NORM: /* one block per channel: statistics and normalisation in one kernel */
        k_mem(&k, un_cu_geom_rows(x->dim[1], (int64_t)(nx / (double)x->dim[1])),
              bwd ? 5 * nx : 3 * nx);
        break;
    case UN_OP_CROSS_ENTROPY:
        if (!bwd) {
            k_ew(&k, x->dim[0], (double)x->dim[0]);
            k_run(&k, 0);
            k_run(&k, 0);
        }
        k_mem(&k, un_cu_geom_rows(x->dim[0], x->dim[1]), bwd ? 2 * nx : nx);
        break;
    default: /* one element-wise kernel (transpose: one box): reads the inputs, writes the output;
              * the backward reads the output's gradient (and an input or the output) and adds
              * into each input's gradient */
        k_ew(&k, (int64_t)nx, bwd ? (1 + 3.0 * n_in) * nx : (n_in + 1) * nx);
        break;
    }
    *kernels = k.n;
    return k.t;
}

/* Bytes of device scratch the CUDA backend takes for one piece's forward or backward: the one
 * growable buffer of runtime/backend_cuda.c (`scratch`), sized there by conv2d's chunks and
 * attention's plan buffers (the same functions of backend_cuda_kern.h), linear's activation
 * gradient beside its recomputed pre-activation, and layer_norm's row statistics. */
static double gpu_op_scratch(un_op op, const un_param *p, const un_shape *in, bool bwd) {
    const un_shape *x = &in[0];
    double floats = 0;
    switch (op) {
    case UN_OP_CONV2D: {
        un_cu_conv g = conv_geom(p, in);
        floats = (double)un_cu_conv_scratch(&g, un_cu_conv_chunk(&g, UN_CU_CONV_COL_MAX), bwd);
        break;
    }
    case UN_OP_MULTIHEAD_ATTENTION: {
        un_cu_mha m;
        floats = mha_geom(p, in, &m) ? (double)un_cu_mha_scratch_total(&m, bwd) : 0;
        break;
    }
    case UN_OP_LINEAR: /* linear_dpre */
        if (bwd && (int)p[0].v[0] != UN_CU_ACT_NONE)
            floats = 2 * numel_d(x) / (double)in[1].dim[0] * (double)in[1].dim[1];
        break;
    case UN_OP_LAYER_NORM:
        floats = 2 * numel_d(x) / (double)x->dim[x->rank - 1];
        break;
    default:
        break;
    }
    return 4 * floats;
}

static un_status analytic(un_ctx *ctx, un_cost_model *cm, un_op op, const un_param *params,
                          const un_shape *in, int n_in, un_op_cost *c) {
    un_infer inf;
    un_status st = un_spec_infer(ctx, cm->spec, op, params, in, n_in, NULL, &inf);
    if (st != UN_OK)
        return st;
    double e[4];
    if ((st = un_spec_cost_all(ctx, cm->spec, op, params, in, n_in, &inf, e)) != UN_OK)
        return st;
    if (e[0] < 0 && e[1] < 0) {
        warn(cm, op, "cost expression");
        double n = 0, o = 0;
        for (int t = 0; t < n_in; t++)
            n += (double)un_shape_numel(&in[t]);
        for (int t = 0; t < inf.n_out; t++)
            o += (double)un_shape_numel(&inf.out[t]);
        e[0] = o;
        e[1] = 4 * (n + o);
    }
    e[0] = e[0] < 0 ? 0 : e[0];
    e[1] = e[1] < 0 ? 0 : e[1];
    if (e[2] < 0 || e[3] < 0) {
        warn(cm, op, "backward cost expression");
        e[2] = e[2] < 0 ? 2 * e[0] : e[2];
        e[3] = e[3] < 0 ? 2 * e[1] : e[3];
    }
    double scale = cm->es / 4.0; /* the spec counts 4-byte elements */
    c->flops = e[0];
    c->bytes = e[1] * scale;
    c->bwd_flops = e[2];
    c->bwd_bytes = e[3] * scale;
    if (cm->m.dev.gpu.on) {
        c->fwd = gpu_op_time(cm, op, params, in, n_in, &inf, false, &c->fwd_kernels);
        c->bwd = gpu_op_time(cm, op, params, in, n_in, &inf, true, &c->bwd_kernels);
        c->scratch_fwd = gpu_op_scratch(op, params, in, false);
        c->scratch_bwd = gpu_op_scratch(op, params, in, true);
    } else {
        c->fwd = roofline(cm, c->flops, c->bytes);
        c->bwd = roofline(cm, c->bwd_flops, c->bwd_bytes);
    }
    c->measured = false;
    return UN_OK;
}

/* The logical shapes of an op-cost cache entry's shape text (un_cost_key: "float[8,32];..."): false
 * unless it is n of them, each a plain dtype[d0,d1,...]. */
static bool shapes_parse(const char *text, un_shape *in, int n) {
    const char *p = text;
    for (int t = 0; t < n; t++) {
        un_dtype dt = UN_DT_COUNT;
        for (int k = 0; k < UN_DT_COUNT && dt == UN_DT_COUNT; k++) {
            size_t l = strlen(un_dtype_name((un_dtype)k));
            if (strncmp(p, un_dtype_name((un_dtype)k), l) == 0 && p[l] == '[') {
                dt = (un_dtype)k;
                p += l + 1;
            }
        }
        if (dt == UN_DT_COUNT)
            return false;
        int64_t d[UN_MAX_DIMS];
        int rank = 0;
        while (*p != ']') {
            char *e;
            long long v = strtoll(p, &e, 10);
            if (e == p || v <= 0 || rank == UN_MAX_DIMS)
                return false;
            d[rank++] = v;
            p = *e == ',' ? e + 1 : e;
            if (*e != ',' && *e != ']')
                return false;
        }
        in[t] = un_shape_make(rank, d, dt);
        p++;
        if (t + 1 < n && *p++ != ';')
            return false;
    }
    return *p == 0;
}

double un_cost_interp(const double *x, const double *t, int n, double v) {
    if (v <= x[0])
        return t[0] * v / x[0];
    if (v >= x[n - 1])
        return t[n - 1] * v / x[n - 1];
    int i = 0;
    while (v > x[i + 1])
        i++;
    if (x[i + 1] <= x[i])
        return t[i] * v / x[i];
    double f = log(v / x[i]) / log(x[i + 1] / x[i]);
    return exp(log(t[i]) + f * (log(t[i + 1]) - log(t[i])));
}

typedef struct mpair {
    double a, m;
} mpair;

static int mpair_cmp(const void *x, const void *y) {
    const mpair *p = x, *q = y;
    return (p->a > q->a) - (p->a < q->a);
}

/* A piece the op-cost cache has no entry for, where it has pieces of the same op with the same
 * parameters on this device kind (other shapes: the profiled strategies' pieces): its model time
 * (c, the roofline or the GPU kernel model) scaled as the measured pieces' model times compare
 * with their measurements (un_cost_interp over model time, forward and backward apart). So a search
 * that compares a profiled configuration with one nobody profiled compares like with like: on this
 * CPU the roofline of a tiny model's ops is 2-5x under their measured times, and unscaled the joint
 * search picked for the tiny transformer on 2 devices a plan of unprofiled pieces it estimated
 * 1.27x faster than data parallel (0.278 against 0.354 ms) that ran at 0.470 ms against data
 * parallel's 0.26 (2026-11-28). false: no usable entry (c unchanged). */
static bool scale_from_measured(un_ctx *ctx, un_cost_model *cm, un_op op, const un_param *params,
                                int n_in, const char *sig, un_op_cost *c) {
    un_rulesdb_cost *list = NULL;
    int64_t n = 0;
    un_ctx *scratch = un_ctx_new_child(ctx);
    if (un_rulesdb_cost_list(scratch, cm->db, sig, cm->device, &list, &n) != UN_OK || n == 0) {
        un_ctx_free(scratch);
        return false;
    }
    mpair *f = un_xcalloc((size_t)n, sizeof *f), *b = un_xcalloc((size_t)n, sizeof *b);
    int nf = 0, nb = 0;
    for (int64_t i = 0; i < n; i++) {
        un_shape in[UN_MAX_INPUTS];
        un_op_cost a;
        if (!shapes_parse(list[i].shape, in, n_in) ||
            analytic(scratch, cm, op, params, in, n_in, &a) != UN_OK)
            continue;
        if (a.fwd > 0 && list[i].fwd_ms > 0)
            f[nf++] = (mpair){a.fwd, list[i].fwd_ms * 1e-3};
        if (a.bwd > 0 && list[i].bwd_ms > 0)
            b[nb++] = (mpair){a.bwd, list[i].bwd_ms * 1e-3};
    }
    bool done = false;
    double *a = un_xcalloc((size_t)n, sizeof *a), *m = un_xcalloc((size_t)n, sizeof *m);
    for (int d = 0; d < 2; d++) {
        mpair *v = d ? b : f;
        int nv = d ? nb : nf;
        double *x = d ? &c->bwd : &c->fwd;
        if (nv == 0 || *x <= 0)
            continue;
        qsort(v, (size_t)nv, sizeof *v, mpair_cmp);
        for (int i = 0; i < nv; i++) {
            a[i] = v[i].a;
            m[i] = v[i].m;
        }
        *x = un_cost_interp(a, m, nv, *x);
        done = true;
    }
    free(a);
    free(m);
    free(f);
    free(b);
    free(list);
    un_ctx_free(scratch);
    return done;
}

un_status un_cost_piece(un_ctx *ctx, un_cost_model *cm, un_op op, const un_param *params,
                        const un_shape *in, int n_in, un_op_cost *out) {
    const un_op_spec *os = un_spec_op(cm->spec, op);
    memset(out, 0, sizeof *out);
    if (os->kind != UN_OPK_REGULAR)
        return un_ctx_error(ctx, UN_ERR_INVALID, "cost model: %s is not a regular operator",
                            os->name);
    cm->queries++;
    ckey k;
    key_make(&k, op, params, os->n_params, in, n_in);
    uint64_t h = un_hash_bytes(&k, sizeof k, 0x9e3779b97f4a7c15ull) | 1;
    centry *e = cache_slot(cm, &k, h);
    if (e->hash) {
        cm->cached++;
        if (e->val.measured)
            cm->measured++;
        *out = e->val;
        return UN_OK;
    }
    un_op_cost c;
    memset(&c, 0, sizeof c);
    /* a piece the op's requirements refuse (attention split by heads) has no analytic cost, but
     * it runs, and the profiler measures it: a measured time still counts */
    un_status ast = analytic(ctx, cm, op, params, in, n_in, &c), st = UN_OK;
    if (ast != UN_OK && !cm->db)
        return ast;
    if (cm->db) {
        char sig[128], shape[128];
        un_rulesdb_cost mc;
        bool found = false;
        if (un_cost_key(cm->spec, op, params, in, n_in, sig, sizeof sig, shape, sizeof shape) &&
            (st = un_rulesdb_cost_get(ctx, cm->db, sig, shape, cm->device, &mc, &found)) != UN_OK)
            return st;
        if (found) {
            c.fwd = mc.fwd_ms * 1e-3;
            c.bwd = mc.bwd_ms * 1e-3;
            c.measured = true;
            cm->measured++;
        } else if (ast != UN_OK) {
            return ast;
        } else {
            c.scaled = scale_from_measured(ctx, cm, op, params, n_in, sig, &c);
        }
    }
    if (2 * (cm->used + 1) > cm->cap) {
        cache_grow(cm);
        e = cache_slot(cm, &k, h);
    }
    e->hash = h;
    e->key = k;
    e->val = c;
    cm->used++;
    *out = c;
    return UN_OK;
}

un_status un_cost_node(un_ctx *ctx, un_cost_model *cm, const un_graph *g, int32_t id,
                       un_op_cost *out) {
    const un_node *nd = un_graph_node(g, id);
    un_shape in[UN_MAX_INPUTS];
    un_cost_piece_shapes(g, id, in);
    /* A piece whose own shapes the op's requirements refuse (attention split by heads: the
     * per-piece op is not the op on the piece shapes) costs the whole op over its device
     * tuples. */
    un_ctx *scratch = un_ctx_new_child(ctx);
    un_status st = un_cost_piece(scratch, cm, nd->op, nd->inf.local, in, nd->n_in, out);
    un_ctx_free(scratch);
    if (st == UN_OK || nd->inf.n_uses == 0)
        return st == UN_OK ? st : un_cost_piece(ctx, cm, nd->op, nd->inf.local, in, nd->n_in, out);
    for (int t = 0; t < nd->n_in; t++)
        in[t] = un_shape_logical(un_graph_shape(g, nd->in[t]));
    if ((st = un_cost_piece(ctx, cm, nd->op, nd->params, in, nd->n_in, out)) != UN_OK)
        return st;
    double tuples = 1;
    for (int i = 0; i < nd->inf.n_uses; i++)
        tuples *= nd->inf.uses[i].degree;
    out->fwd /= tuples;
    out->bwd /= tuples;
    out->flops /= tuples;
    out->bytes /= tuples;
    out->bwd_flops /= tuples;
    out->bwd_bytes /= tuples;
    out->scratch_fwd /= tuples;
    out->scratch_bwd /= tuples;
    return UN_OK;
}

/* ---- communication ---- */

double un_cost_p2p(const un_cost_model *cm, int a, int b, double bytes) {
    if (a == b)
        return 0;
    const un_link *l = un_machine_link(&cm->m, a, b);
    return l->latency + bytes / l->bw;
}

double un_cost_allreduce(const un_cost_model *cm, const int *devs, int n, double bytes) {
    if (n <= 1)
        return 0;
    const un_link *l = &cm->m.intra;
    for (int i = 1; i < n; i++)
        if (un_machine_link(&cm->m, devs[0], devs[i]) == &cm->m.inter)
            l = &cm->m.inter;
    if (l->algo == UN_COLL_TREE) /* pipelined double binary trees: log-depth latency */
        return 2 * ceil(log2((double)n)) * l->latency + 2 * bytes / l->bw;
    /* ring: a reduce-scatter then an all-gather, n - 1 steps each of bytes / n */
    return 2.0 * (n - 1) * (l->latency + bytes / ((double)n * l->bw));
}

double un_cost_copy(const un_cost_model *cm, double bytes) {
    return bytes > 0 ? 2 * bytes / cm->m.dev.mem_bw : 0; /* read + write */
}

bool un_cost_lookup(un_ctx *ctx, un_cost_model *cm, const char *op_sig, const char *shape,
                    double *fwd, double *bwd) {
    un_rulesdb_cost mc;
    bool found = false;
    if (!cm->db ||
        un_rulesdb_cost_get(ctx, cm->db, op_sig, shape, cm->device, &mc, &found) != UN_OK || !found)
        return false;
    *fwd = mc.fwd_ms * 1e-3;
    *bwd = mc.bwd_ms * 1e-3;
    return true;
}

double un_cost_measured(un_ctx *ctx, un_cost_model *cm, const char *op_sig, const char *shape,
                        double fallback) {
    double f, b;
    return un_cost_lookup(ctx, cm, op_sig, shape, &f, &b) ? f : fallback;
}

void un_cost_model_set_loss(un_cost_model *cm, un_loss_kind kind) { cm->loss = kind; }

double un_cost_loss(un_ctx *ctx, un_cost_model *cm, int64_t rows, int64_t classes) {
    char shape[64];
    snprintf(shape, sizeof shape, "float[%lld,%lld]", (long long)rows, (long long)classes);
    double n = (double)rows * (double)classes, fallback = un_cost_copy(cm, n * cm->es);
    if (cm->m.dev.gpu.on) { /* cuda_loss: the labels checked (a copy in, a kernel, a copy out that
                             * waits for the device), the rows' kernel, their sums copied out */
        kclock k = {&cm->m.dev, un_machine_flops(&cm->m, UN_MPREC_F32), 0, 0};
        k_run(&k, 0);
        k_ew(&k, rows, (double)rows);
        k_run(&k, 0);
        k_mem(&k, un_cu_geom_rows(rows, classes), 2 * n);
        k_run(&k, 0);
        fallback = k.t;
    }
    return un_cost_measured(ctx, cm, cm->loss == UN_LOSS_MSE ? "loss:mse" : "loss:ce", shape,
                            fallback);
}

double un_cost_zero(const un_cost_model *cm, double bytes, int64_t buffers) {
    if (!cm->m.dev.gpu.on || buffers < 1)
        return bytes / cm->m.dev.mem_bw;
    kclock k = {&cm->m.dev, 0, 0, 0}; /* a cudaMemsetAsync per buffer */
    for (int64_t i = 0; i < buffers; i++)
        k_run(&k, bytes / (double)buffers / cm->m.dev.mem_bw);
    return k.t;
}

/* The optimizer steps the op-cost cache holds for this device kind (sig "optimizer:adam" or
 * "optimizer:sgd", shape float[count]), read once; a cache that cannot be read has none. */
static const struct opt_points *opt_points_of(un_ctx *ctx, un_cost_model *cm, bool adam,
                                              const char *sig) {
    struct opt_points *o = &cm->opt[adam];
    if (o->loaded || !cm->db)
        return o;
    o->loaded = true;
    un_rulesdb_cost *rows = NULL;
    int64_t n = 0;
    un_ctx *tmp = un_ctx_new_child(ctx);
    if (un_rulesdb_cost_list(tmp, cm->db, sig, cm->device, &rows, &n) == UN_OK && n > 0) {
        o->count = un_xmalloc((size_t)n * sizeof *o->count);
        o->sec = un_xmalloc((size_t)n * sizeof *o->sec);
        for (int64_t i = 0; i < n; i++) {
            long long c;
            char end;
            if (sscanf(rows[i].shape, "float[%lld%c", &c, &end) != 2 || end != ']' || c <= 0 ||
                !(rows[i].fwd_ms > 0))
                continue;
            int64_t j = o->n++; /* insertion by count */
            for (; j > 0 && o->count[j - 1] > (double)c; j--) {
                o->count[j] = o->count[j - 1];
                o->sec[j] = o->sec[j - 1];
            }
            o->count[j] = (double)c;
            o->sec[j] = rows[i].fwd_ms * 1e-3;
        }
    }
    free(rows);
    un_ctx_free(tmp);
    return o;
}

double un_cost_optimizer(un_ctx *ctx, un_cost_model *cm, const char *optimizer, int64_t n) {
    bool adam = strcmp(optimizer, "adam") == 0;
    char sig[48], shape[48];
    snprintf(sig, sizeof sig, "optimizer:%s", adam ? "adam" : "sgd");
    snprintf(shape, sizeof shape, "float[%lld]", (long long)n);
    double f, b;
    if (un_cost_lookup(ctx, cm, sig, shape, &f, &b))
        return f;
    /* A count the profiler did not time (another plan's shard): between two timed counts the
     * line through them, beyond them the nearest one's time per parameter (the step streams its
     * parameters; the per-parameter time of this kernel on this device, not the roofline's). */
    const struct opt_points *o = opt_points_of(ctx, cm, adam, sig);
    double q = (double)n;
    if (o->n > 0 && n > 0) {
        int64_t i = 0;
        while (i < o->n && o->count[i] < q)
            i++;
        if (i == 0)
            return o->sec[0] * q / o->count[0];
        if (i == o->n)
            return o->sec[i - 1] * q / o->count[i - 1];
        double w = (q - o->count[i - 1]) / (o->count[i] - o->count[i - 1]);
        return o->sec[i - 1] + w * (o->sec[i] - o->sec[i - 1]);
    }
    /* Adam reads parameter, gradient and two moments and writes three; SGD with momentum reads
     * three and writes two. */
    double bytes = q * cm->es * (adam ? 7 : 5), flops = q * (adam ? 12 : 4);
    const un_gpu_kernels *g = &cm->m.dev.gpu;
    if (g->on) { /* one kernel of the CUDA backend, at the rate it was timed moving these bytes */
        kclock k = {&cm->m.dev, 0, cm->m.dev.op_overhead, 0};
        k_run(&k, bytes / (g->optimizer_bw > 0 ? g->optimizer_bw : cm->m.dev.mem_bw));
        return k.t;
    }
    return roofline(cm, flops, bytes);
}
