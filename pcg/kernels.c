/* kernels.c - the reference kernels of the regular operators: one static function per op, each
 * computing ONE piece (local blocks in, local blocks out) in either number domain of pcg/num.h.
 * Every kernel is written once over un_val with the un_num_* helpers; float64 is real math, and
 * the prime field replaces each nonlinear function by a fixed random surrogate. Semantics of every
 * op are those documented in specs/ops.json. Slow and simple on purpose: the runtime has its
 * own. */
#include <math.h>
#include <string.h>

#include "pcg/kernels.h"

/* ---- kernel parameters ---- */

const un_param *un_kargs_param(const un_kargs *a, const char *name) {
    int i = un_spec_param_index(a->spec, name);
    if (i < 0)
        un_abort(__FILE__, __LINE__, name);
    return &a->params[i];
}

int64_t un_kargs_int(const un_kargs *a, const char *name) { return un_kargs_param(a, name)->v[0]; }

/* ---- small helpers --------------------------------------------------------------------------- */

static int64_t blk_numel(const un_block *b) {
    int64_t n = 1;
    for (int i = 0; i < b->rank; i++)
        n *= b->dim[i];
    return n;
}

/* Product of the local dims in [lo, hi). */
static int64_t blk_span(const un_block *b, int lo, int hi) {
    int64_t n = 1;
    for (int i = lo; i < hi; i++)
        n *= b->dim[i];
    return n;
}

/* A dim parameter that may count from the end (-1 = last) as an index in [0, rank). */
static int norm_dim(int64_t dim, int rank) {
    int d = (int)(dim < 0 ? dim + rank : dim);
    UN_ASSERT(d >= 0 && d < rank);
    return d;
}

static void fill_zero(un_dom d, un_val *p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        p[i] = un_num_zero(d);
}

/* Advances a row-major multi-index over dims; the last dim moves fastest. */
static void idx_next(int64_t *idx, const int64_t *dim, int rank) {
    for (int i = rank - 1; i >= 0; i--) {
        if (++idx[i] < dim[i])
            return;
        idx[i] = 0;
    }
}

static un_val num_one(un_dom d) { return un_num_from_int(d, 1); }

/* 1 / v for an integer v (the field inverse in the field). */
static un_val num_inv_int(un_dom d, int64_t v) {
    return un_num_div(d, num_one(d), un_num_from_int(d, v));
}

static un_val surr(uint64_t salt, un_val x) {
    un_val r;
    r.u = un_num_surrogate(salt, x.u);
    return r;
}

/* Tags that tell apart the internal nonlinear functions of one operator (salt ^ tag). */
enum {
    TAG_EXP = 0x11,   /* softmax numerator, cross_entropy's inner function */
    TAG_LOG = 0x22,   /* cross_entropy's outer function (log of the sum) */
    TAG_RSQRT = 0x33, /* normalisations: 1 / sqrt(var + eps) */
    TAG_POOL_H = 0x44,
    TAG_POOL_G = 0x55
};

/* ---- activations ----------------------------------------------------------------------------- */

/* The activation functions, in the order of linear's `activation` enum (conv2d's enum is a
 * prefix of it). Their field surrogates use fixed salts that do not depend on the operator, so
 * `relu(linear(x, w)) = linear[activation=relu](x, w)` holds in the field as it does in R. */
enum { ACT_NONE, ACT_RELU, ACT_SIGMOID, ACT_TANH, ACT_GELU, ACT_COUNT };

static const uint64_t act_salt[ACT_COUNT] = {
    0, 0x72656c7552454c55ull, 0x7369676d6f696421ull, 0x74616e6854414e48ull, 0x67656c7547454c55ull,
};

static un_val act_apply(un_dom d, int act, un_val x) {
    UN_ASSERT(act >= 0 && act < ACT_COUNT);
    if (act == ACT_NONE)
        return x;
    if (d == UN_DOM_FIELD)
        return surr(act_salt[act], x);
    un_val r;
    switch (act) {
    case ACT_RELU: /* NaN propagates, as in torch.relu */
        r.f = x.f > 0 || isnan(x.f) ? x.f : 0;
        break;
    case ACT_SIGMOID:
        r.f = 1.0 / (1.0 + exp(-x.f));
        break;
    case ACT_TANH:
        r.f = tanh(x.f);
        break;
    default:
        r.f = 0.5 * x.f * (1.0 + erf(x.f / sqrt(2.0)));
        break;
    }
    return r;
}

static void act_inplace(un_dom d, int act, un_val *p, int64_t n) {
    if (act == ACT_NONE)
        return;
    for (int64_t i = 0; i < n; i++)
        p[i] = act_apply(d, act, p[i]);
}

/* 1 / sqrt(v + 1e-5) in float64; a surrogate in the field. */
static un_val num_rsqrt_eps(un_dom d, uint64_t salt, un_val v) {
    if (d == UN_DOM_FIELD)
        return surr(salt ^ TAG_RSQRT, v);
    un_val r;
    r.f = 1.0 / sqrt(v.f + 1e-5);
    return r;
}

/* ---- matmul core ----------------------------------------------------------------------------- */

/* A strided matrix: element (i, j) at p[i * rs + j * cs]. */
typedef struct mat {
    const un_val *p;
    int64_t rs, cs;
} mat;

/* C[i, j] += sum_p A[i, p] B[p, j] for an m x k times k x n product; C rows are ldc apart. */
static void mm_acc(un_dom d, mat A, mat B, un_val *C, int64_t ldc, int64_t m, int64_t k,
                   int64_t n) {
    for (int64_t i = 0; i < m; i++) {
        un_val *c = C + i * ldc;
        for (int64_t p = 0; p < k; p++) {
            un_val aip = A.p[i * A.rs + p * A.cs];
            const un_val *b = B.p + p * B.rs;
            for (int64_t j = 0; j < n; j++)
                c[j] = un_num_add(d, c[j], un_num_mul(d, aip, b[j * B.cs]));
        }
    }
}

static mat mat_rows(const un_val *p, int64_t cols) { return (mat){p, cols, 1}; }

/* ---- softmax row ----------------------------------------------------------------------------- */

/* y_j = exp(x_j) / sum exp(x) over n values stride apart; in the field g(x_j) * inv(sum g(x)). */
static void softmax_row(un_dom d, uint64_t salt, const un_val *x, un_val *y, int64_t n,
                        int64_t stride) {
    double mx = 0;
    if (d == UN_DOM_F64) {
        mx = x[0].f;
        for (int64_t j = 1; j < n; j++)
            mx = fmax(mx, x[j * stride].f);
    }
    un_val s = un_num_zero(d);
    for (int64_t j = 0; j < n; j++) {
        un_val e;
        if (d == UN_DOM_FIELD)
            e = surr(salt ^ TAG_EXP, x[j * stride]);
        else
            e.f = exp(x[j * stride].f - mx);
        y[j * stride] = e;
        s = un_num_add(d, s, e);
    }
    un_val inv = un_num_div(d, num_one(d), s);
    for (int64_t j = 0; j < n; j++)
        y[j * stride] = un_num_mul(d, y[j * stride], inv);
}

/* ---- linear algebra ops ---------------------------------------------------------------------- */

/* y = act(x W [+ b]); x [..., in], W [in, out], b [out]. */
static un_status k_linear(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    const un_block *x = &a->in[0], *w = &a->in[1];
    un_block *y = &a->out[0];
    int64_t in = w->dim[0], out = w->dim[1], m = blk_numel(x) / in;
    UN_ASSERT(x->dim[x->rank - 1] == in && y->dim[y->rank - 1] == out);
    mm_acc(a->dom, mat_rows(x->data, in), mat_rows(w->data, out), y->data, out, m, in, out);
    if (a->n_in > 2 && un_kargs_int(a, "use_bias")) {
        const un_block *b = &a->in[2];
        UN_ASSERT(b->dim[0] == out);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < out; j++)
                y->data[i * out + j] = un_num_add(a->dom, y->data[i * out + j], b->data[j]);
    }
    act_inplace(a->dom, (int)un_kargs_int(a, "activation"), y->data, m * out);
    return UN_OK;
}

/* c[..., m, n] = a[..., m, k] b[..., k, n] with equal batch dims. */
static un_status k_batch_matmul(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    const un_block *x = &a->in[0], *w = &a->in[1];
    un_block *y = &a->out[0];
    int r = x->rank;
    int64_t nb = blk_span(x, 0, r - 2), m = x->dim[r - 2], k = x->dim[r - 1], n = w->dim[r - 1];
    UN_ASSERT(w->rank == r && w->dim[r - 2] == k && blk_span(w, 0, r - 2) == nb);
    for (int64_t b = 0; b < nb; b++)
        mm_acc(a->dom, mat_rows(x->data + b * m * k, k), mat_rows(w->data + b * k * n, n),
               y->data + b * m * n, n, m, k, n);
    return UN_OK;
}

/* ---- elementwise ----------------------------------------------------------------------------- */

typedef un_val (*num_binop)(un_dom, un_val, un_val);

static void ew_binary(const un_kargs *a, num_binop f) {
    const un_block *x = &a->in[0], *y = &a->in[1];
    un_block *z = &a->out[0];
    int64_t n = blk_numel(z);
    UN_ASSERT(blk_numel(x) == n && blk_numel(y) == n);
    for (int64_t i = 0; i < n; i++)
        z->data[i] = f(a->dom, x->data[i], y->data[i]);
}

static un_status k_ew_add(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    ew_binary(a, un_num_add);
    return UN_OK;
}

static un_status k_ew_sub(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    ew_binary(a, un_num_sub);
    return UN_OK;
}

static un_status k_ew_mul(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    ew_binary(a, un_num_mul);
    return UN_OK;
}

/* y = x * num / den (den >= 1; the field multiplies by the inverse of den). */
static un_status k_scalar_mul(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    int64_t num = un_kargs_int(a, "num"), den = un_kargs_int(a, "den");
    UN_ASSERT(den >= 1);
    un_val f = un_num_div(a->dom, un_num_from_int(a->dom, num), un_num_from_int(a->dom, den));
    int64_t n = blk_numel(&a->out[0]);
    for (int64_t i = 0; i < n; i++)
        a->out[0].data[i] = un_num_mul(a->dom, a->in[0].data[i], f);
    return UN_OK;
}

static void unary_act(const un_kargs *a, int act) {
    int64_t n = blk_numel(&a->out[0]);
    UN_ASSERT(blk_numel(&a->in[0]) == n);
    for (int64_t i = 0; i < n; i++)
        a->out[0].data[i] = act_apply(a->dom, act, a->in[0].data[i]);
}

static un_status k_relu(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    unary_act(a, ACT_RELU);
    return UN_OK;
}

static un_status k_gelu(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    unary_act(a, ACT_GELU);
    return UN_OK;
}

static un_status k_sigmoid(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    unary_act(a, ACT_SIGMOID);
    return UN_OK;
}

static un_status k_tanh(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    unary_act(a, ACT_TANH);
    return UN_OK;
}

/* identity, reshape and flat all copy the row-major data unchanged. */
static void copy_all(const un_kargs *a) {
    int64_t n = blk_numel(&a->out[0]);
    UN_ASSERT(blk_numel(&a->in[0]) == n);
    memcpy(a->out[0].data, a->in[0].data, (size_t)n * sizeof(un_val));
}

static un_status k_identity(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    copy_all(a);
    return UN_OK;
}

/* Inverted dropout y = x * m * 100 / (100 - rate_pct), with a mask m in {0, 1} that depends only
 * on (seed, global flat index), so that it is the same under every sharding. A dropped element is
 * x * 0 as in torch: 0, but NaN for a non-finite x. */
static un_status k_dropout(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    const un_block *x = &a->in[0];
    un_block *y = &a->out[0];
    int64_t rate = un_kargs_int(a, "rate_pct"), seed = un_kargs_int(a, "seed");
    UN_ASSERT(rate >= 0 && rate < 100);
    un_val scale =
        un_num_div(a->dom, un_num_from_int(a->dom, 100), un_num_from_int(a->dom, 100 - rate));
    un_val zero = un_num_zero(a->dom);
    int64_t gstride[UN_MAX_DIMS], idx[UN_MAX_DIMS] = {0}, n = blk_numel(x);
    int64_t s = 1;
    for (int i = x->rank - 1; i >= 0; i--) {
        gstride[i] = s;
        s *= x->full[i];
    }
    for (int64_t e = 0; e < n; e++) {
        uint64_t g = 0;
        for (int i = 0; i < x->rank; i++)
            g += (uint64_t)((x->off[i] + idx[i]) * gstride[i]);
        uint64_t h = un_mix64(un_hash_combine((uint64_t)seed, g));
        y->data[e] = un_num_mul(a->dom, x->data[e], (int64_t)(h % 100) >= rate ? scale : zero);
        idx_next(idx, x->dim, x->rank);
    }
    return UN_OK;
}

/* ---- normalisations -------------------------------------------------------------------------- */

static un_status k_softmax(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    const un_block *x = &a->in[0];
    int nd = norm_dim(un_kargs_int(a, "dim"), x->rank);
    int64_t outer = blk_span(x, 0, nd), len = x->dim[nd], inner = blk_span(x, nd + 1, x->rank);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            softmax_row(a->dom, a->salt, x->data + o * len * inner + i,
                        a->out[0].data + o * len * inner + i, len, inner);
    return UN_OK;
}

/* y = (x - mean) / sqrt(var + 1e-5) * gamma + beta over the last dim (biased variance). */
static un_status k_layer_norm(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    un_dom d = a->dom;
    const un_block *x = &a->in[0], *g = &a->in[1], *b = &a->in[2];
    int64_t n = x->dim[x->rank - 1], rows = blk_numel(x) / n;
    UN_ASSERT(g->dim[0] == n && b->dim[0] == n);
    un_val inv_n = num_inv_int(d, n);
    for (int64_t r = 0; r < rows; r++) {
        const un_val *xr = x->data + r * n;
        un_val *yr = a->out[0].data + r * n;
        un_val mean = un_num_zero(d), var = un_num_zero(d);
        for (int64_t j = 0; j < n; j++)
            mean = un_num_add(d, mean, xr[j]);
        mean = un_num_mul(d, mean, inv_n);
        for (int64_t j = 0; j < n; j++) {
            un_val c = un_num_sub(d, xr[j], mean);
            var = un_num_add(d, var, un_num_mul(d, c, c));
        }
        un_val rs = num_rsqrt_eps(d, a->salt, un_num_mul(d, var, inv_n));
        for (int64_t j = 0; j < n; j++) {
            un_val c = un_num_mul(d, un_num_sub(d, xr[j], mean), rs);
            yr[j] = un_num_add(d, un_num_mul(d, c, g->data[j]), b->data[j]);
        }
    }
    return UN_OK;
}

/* Training-mode batch norm: statistics per channel over (n, h, w); x [n, c, h, w]. */
static un_status k_batch_norm(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    un_dom d = a->dom;
    const un_block *x = &a->in[0], *g = &a->in[1], *b = &a->in[2];
    int64_t nn = x->dim[0], nc = x->dim[1], hw = blk_span(x, 2, x->rank);
    UN_ASSERT(g->dim[0] == nc && b->dim[0] == nc);
    un_val inv_cnt = num_inv_int(d, nn * hw);
    for (int64_t c = 0; c < nc; c++) {
        un_val mean = un_num_zero(d), var = un_num_zero(d);
        for (int64_t i = 0; i < nn; i++)
            for (int64_t p = 0; p < hw; p++)
                mean = un_num_add(d, mean, x->data[(i * nc + c) * hw + p]);
        mean = un_num_mul(d, mean, inv_cnt);
        for (int64_t i = 0; i < nn; i++)
            for (int64_t p = 0; p < hw; p++) {
                un_val t = un_num_sub(d, x->data[(i * nc + c) * hw + p], mean);
                var = un_num_add(d, var, un_num_mul(d, t, t));
            }
        un_val rs = num_rsqrt_eps(d, a->salt, un_num_mul(d, var, inv_cnt));
        for (int64_t i = 0; i < nn; i++)
            for (int64_t p = 0; p < hw; p++) {
                int64_t at = (i * nc + c) * hw + p;
                un_val t = un_num_mul(d, un_num_sub(d, x->data[at], mean), rs);
                a->out[0].data[at] = un_num_add(d, un_num_mul(d, t, g->data[c]), b->data[c]);
            }
    }
    return UN_OK;
}

/* ---- convolution and pooling ----------------------------------------------------------------- */

/* y[n, o, i, j] = act(b[o] + sum_{c, p, q} x[n, g*cpg + c, i*sh - ph + p, j*sw - pw + q] w[o, c, p,
 * q]) with g = o / (cout / groups) and cpg = w's dim 1 (input channels per group); zero padding. */
static un_status k_conv2d(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    un_dom d = a->dom;
    const un_block *x = &a->in[0], *w = &a->in[1];
    un_block *y = &a->out[0];
    int64_t sh = un_kargs_int(a, "stride_h"), sw = un_kargs_int(a, "stride_w");
    int64_t ph = un_kargs_int(a, "pad_h"), pw = un_kargs_int(a, "pad_w");
    int64_t groups = un_kargs_int(a, "groups");
    bool bias = a->n_in > 2 && un_kargs_int(a, "use_bias");
    int64_t N = x->dim[0], C = x->dim[1], H = x->dim[2], W = x->dim[3];
    int64_t O = w->dim[0], cpg = w->dim[1], KH = w->dim[2], KW = w->dim[3];
    int64_t OH = y->dim[2], OW = y->dim[3];
    UN_ASSERT(groups >= 1 && O % groups == 0 && C == cpg * groups && y->dim[1] == O);
    int64_t opg = O / groups;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++) {
            int64_t c0 = (o / opg) * cpg;
            for (int64_t i = 0; i < OH; i++)
                for (int64_t j = 0; j < OW; j++) {
                    un_val s = bias ? a->in[2].data[o] : un_num_zero(d);
                    for (int64_t c = 0; c < cpg; c++)
                        for (int64_t p = 0; p < KH; p++) {
                            int64_t ih = i * sh - ph + p;
                            if (ih < 0 || ih >= H)
                                continue;
                            for (int64_t q = 0; q < KW; q++) {
                                int64_t iw = j * sw - pw + q;
                                if (iw < 0 || iw >= W)
                                    continue;
                                un_val xv = x->data[((n * C + c0 + c) * H + ih) * W + iw];
                                un_val wv = w->data[((o * cpg + c) * KH + p) * KW + q];
                                s = un_num_add(d, s, un_num_mul(d, xv, wv));
                            }
                        }
                    y->data[((n * O + o) * OH + i) * OW + j] = s;
                }
        }
    act_inplace(d, (int)un_kargs_int(a, "activation"), y->data, blk_numel(y));
    return UN_OK;
}

/* Max or average pooling over kernel_h x kernel_w windows; padding contributes nothing. avg
 * divides by the full window size (count_include_pad), so it is linear. max propagates NaN as
 * torch does; the spec's 2 * pad <= kernel keeps every window non-empty. In the field max is
 * g(sum over the window of h(x)), a fixed symmetric nonlinear function of the window. */
static un_status k_pool2d(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    un_dom d = a->dom;
    const un_block *x = &a->in[0];
    un_block *y = &a->out[0];
    int64_t kh = un_kargs_int(a, "kernel_h"), kw = un_kargs_int(a, "kernel_w");
    int64_t sh = un_kargs_int(a, "stride_h"), sw = un_kargs_int(a, "stride_w");
    int64_t ph = un_kargs_int(a, "pad_h"), pw = un_kargs_int(a, "pad_w");
    bool avg = un_kargs_int(a, "type") == 1;
    int64_t planes = x->dim[0] * x->dim[1], H = x->dim[2], W = x->dim[3];
    int64_t OH = y->dim[2], OW = y->dim[3];
    un_val inv_area = num_inv_int(d, kh * kw);
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t i = 0; i < OH; i++)
            for (int64_t j = 0; j < OW; j++) {
                un_val s = un_num_zero(d);
                double mx = -INFINITY;
                int64_t cnt = 0;
                for (int64_t p = 0; p < kh; p++) {
                    int64_t ih = i * sh - ph + p;
                    if (ih < 0 || ih >= H)
                        continue;
                    for (int64_t q = 0; q < kw; q++) {
                        int64_t iw = j * sw - pw + q;
                        if (iw < 0 || iw >= W)
                            continue;
                        un_val v = x->data[(pl * H + ih) * W + iw];
                        cnt++;
                        if (avg)
                            s = un_num_add(d, s, v);
                        else if (d == UN_DOM_FIELD)
                            s = un_num_add(d, s, surr(a->salt ^ TAG_POOL_H, v));
                        else if (v.f > mx || isnan(v.f))
                            mx = v.f;
                    }
                }
                UN_ASSERT(cnt > 0);
                un_val r;
                if (avg)
                    r = un_num_mul(d, s, inv_area);
                else if (d == UN_DOM_FIELD)
                    r = surr(a->salt ^ TAG_POOL_G, s);
                else
                    r.f = mx;
                y->data[(pl * OH + i) * OW + j] = r;
            }
    return UN_OK;
}

/* ---- data movement --------------------------------------------------------------------------- */

static un_status k_concat(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    const un_block *x = &a->in[0], *z = &a->in[1];
    un_block *y = &a->out[0];
    int ax = norm_dim(un_kargs_int(a, "axis"), x->rank);
    int64_t outer = blk_span(x, 0, ax), inner = blk_span(x, ax + 1, x->rank);
    int64_t nx = x->dim[ax] * inner, nz = z->dim[ax] * inner;
    UN_ASSERT(y->dim[ax] == x->dim[ax] + z->dim[ax]);
    for (int64_t o = 0; o < outer; o++) {
        memcpy(y->data + o * (nx + nz), x->data + o * nx, (size_t)nx * sizeof(un_val));
        memcpy(y->data + o * (nx + nz) + nx, z->data + o * nz, (size_t)nz * sizeof(un_val));
    }
    return UN_OK;
}

/* Output j is the slice of sizes[j] along axis; the sizes are read from the output blocks. */
static un_status k_split(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    const un_block *x = &a->in[0];
    int ax = norm_dim(un_kargs_int(a, "axis"), x->rank);
    int64_t outer = blk_span(x, 0, ax), inner = blk_span(x, ax + 1, x->rank);
    int64_t nx = x->dim[ax] * inner, start = 0;
    for (int j = 0; j < a->n_out; j++) {
        un_block *y = &a->out[j];
        int64_t ny = y->dim[ax] * inner;
        UN_ASSERT(start + ny <= nx);
        for (int64_t o = 0; o < outer; o++)
            memcpy(y->data + o * ny, x->data + o * nx + start, (size_t)ny * sizeof(un_val));
        start += ny;
    }
    UN_ASSERT(start == nx);
    return UN_OK;
}

/* Swaps dims dim0 and dim1. */
static un_status k_transpose(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    const un_block *x = &a->in[0];
    un_block *y = &a->out[0];
    int r = x->rank;
    int d0 = norm_dim(un_kargs_int(a, "dim0"), r), d1 = norm_dim(un_kargs_int(a, "dim1"), r);
    int64_t ostride[UN_MAX_DIMS], istride[UN_MAX_DIMS], idx[UN_MAX_DIMS] = {0};
    int64_t s = 1;
    for (int i = r - 1; i >= 0; i--) {
        ostride[i] = s;
        s *= y->dim[i];
    }
    for (int i = 0; i < r; i++)
        istride[i] = ostride[i == d0 ? d1 : i == d1 ? d0 : i];
    int64_t n = blk_numel(x);
    for (int64_t e = 0; e < n; e++) {
        int64_t at = 0;
        for (int i = 0; i < r; i++)
            at += idx[i] * istride[i];
        y->data[at] = x->data[e];
        idx_next(idx, x->dim, r);
    }
    return UN_OK;
}

static un_status k_reshape(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    copy_all(a);
    return UN_OK;
}

static un_status k_flat(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    copy_all(a);
    return UN_OK;
}

/* out[b, :] = sum (or mean) over j of table[indices[b, j], :]. */
static un_status k_embedding(un_ctx *ctx, const un_kargs *a) {
    un_dom d = a->dom;
    const un_block *ix = &a->in[0], *t = &a->in[1];
    un_block *y = &a->out[0];
    int64_t nb = ix->dim[0], bag = ix->dim[1], rows = t->dim[0], cols = t->dim[1];
    UN_ASSERT(y->dim[0] == nb && y->dim[1] == cols);
    bool mean = un_kargs_int(a, "aggr") == 1;
    un_val inv_bag = num_inv_int(d, bag);
    for (int64_t b = 0; b < nb; b++) {
        un_val *yr = y->data + b * cols;
        for (int64_t j = 0; j < bag; j++) {
            int64_t r = un_num_to_index(d, ix->data[b * bag + j]);
            if (r < 0 || r >= rows)
                return un_ctx_error(ctx, UN_ERR_INVALID,
                                    "embedding: index %lld at [%lld, %lld] is outside the table "
                                    "of %lld rows",
                                    (long long)r, (long long)(ix->off[0] + b),
                                    (long long)(ix->off[1] + j), (long long)rows);
            for (int64_t c = 0; c < cols; c++)
                yr[c] = un_num_add(d, yr[c], t->data[r * cols + c]);
        }
        if (mean)
            for (int64_t c = 0; c < cols; c++)
                yr[c] = un_num_mul(d, yr[c], inv_bag);
    }
    return UN_OK;
}

/* ---- attention ------------------------------------------------------------------------------- */

/* out = concat_heads(softmax(Q_h K_h^T * scale) V_h) Wo with Q = q Wq, K = k Wk, V = v Wv; head h
 * uses the projected columns [h*dh, (h+1)*dh), dh = (Wq's columns) / heads. scale = 1/sqrt(dh) in
 * float64; the field has no scaling (its softmax is a surrogate anyway). causal: query row s
 * (S == T) normalises over keys 0..s only and gives the later keys probability zero, in both
 * domains. */
static un_status k_multihead_attention(un_ctx *ctx, const un_kargs *a) {
    un_dom d = a->dom;
    const un_block *q = &a->in[0], *k = &a->in[1], *v = &a->in[2];
    const un_block *wq = &a->in[3], *wk = &a->in[4], *wv = &a->in[5], *wo = &a->in[6];
    un_block *y = &a->out[0];
    int64_t B = q->dim[0], S = q->dim[1], E = q->dim[2], T = k->dim[1];
    int64_t HL = wq->dim[1], EO = wo->dim[1], heads = un_kargs_int(a, "heads");
    bool causal = un_kargs_int(a, "causal") != 0;
    UN_ASSERT(heads >= 1 && HL % heads == 0 && (!causal || S == T) && wo->dim[0] == HL &&
              wk->dim[1] == HL && wv->dim[1] == HL && wq->dim[0] == E && k->dim[2] == E &&
              v->dim[1] == T);
    int64_t dh = HL / heads;
    un_val scale = num_one(d);
    if (d == UN_DOM_F64)
        scale.f = 1.0 / sqrt((double)dh);
    size_t nbuf = (size_t)((2 * S + 2 * T) * HL + S * T);
    un_val *buf = un_ctx_malloc(ctx, nbuf * sizeof(un_val));
    if (!buf)
        return un_ctx_error(ctx, UN_ERR_NOMEM, "multihead_attention: out of memory (%zu values)",
                            nbuf);
    un_val *Q = buf, *K = Q + S * HL, *V = K + T * HL, *O = V + T * HL, *P = O + S * HL;
    for (int64_t b = 0; b < B; b++) {
        fill_zero(d, buf, (int64_t)nbuf);
        mm_acc(d, mat_rows(q->data + b * S * E, E), mat_rows(wq->data, HL), Q, HL, S, E, HL);
        mm_acc(d, mat_rows(k->data + b * T * E, E), mat_rows(wk->data, HL), K, HL, T, E, HL);
        mm_acc(d, mat_rows(v->data + b * T * E, E), mat_rows(wv->data, HL), V, HL, T, E, HL);
        for (int64_t h = 0; h < heads; h++) {
            fill_zero(d, P, S * T);
            /* P = Q_h K_h^T: K_h^T (c, t) lives at K[t * HL + h * dh + c]. */
            mm_acc(d, mat_rows(Q + h * dh, HL), (mat){K + h * dh, 1, HL}, P, T, S, dh, T);
            for (int64_t s = 0; s < S * T; s++)
                P[s] = un_num_mul(d, P[s], scale);
            for (int64_t s = 0; s < S; s++) {
                int64_t n = causal ? s + 1 : T; /* keys the row sees */
                softmax_row(d, a->salt, P + s * T, P + s * T, n, 1);
                fill_zero(d, P + s * T + n, T - n);
            }
            mm_acc(d, mat_rows(P, T), mat_rows(V + h * dh, HL), O + h * dh, HL, S, T, dh);
        }
        mm_acc(d, mat_rows(O, HL), mat_rows(wo->data, EO), y->data + b * S * EO, EO, S, HL, EO);
    }
    un_ctx_free_mem(ctx, buf);
    return UN_OK;
}

/* ---- reductions and loss --------------------------------------------------------------------- */

static void reduce_dim(const un_kargs *a, bool mean) {
    un_dom d = a->dom;
    const un_block *x = &a->in[0];
    int nd = norm_dim(un_kargs_int(a, "dim"), x->rank);
    int64_t outer = blk_span(x, 0, nd), len = x->dim[nd], inner = blk_span(x, nd + 1, x->rank);
    un_val *y = a->out[0].data;
    UN_ASSERT(blk_numel(&a->out[0]) == outer * inner);
    un_val f = num_inv_int(d, len);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            un_val s = un_num_zero(d);
            for (int64_t l = 0; l < len; l++)
                s = un_num_add(d, s, x->data[(o * len + l) * inner + i]);
            y[o * inner + i] = mean ? un_num_mul(d, s, f) : s;
        }
}

static un_status k_reduce_sum(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    reduce_dim(a, false);
    return UN_OK;
}

static un_status k_reduce_mean(un_ctx *ctx, const un_kargs *a) {
    (void)ctx;
    reduce_dim(a, true);
    return UN_OK;
}

/* loss[b] = log sum_j exp(x[b, j]) - x[b, label[b]]; in the field g(sum_j h(x[b, j])) - x[b,
 * label]. */
static un_status k_cross_entropy(un_ctx *ctx, const un_kargs *a) {
    un_dom d = a->dom;
    const un_block *x = &a->in[0], *lab = &a->in[1];
    int64_t nb = x->dim[0], nc = x->dim[1];
    UN_ASSERT(lab->dim[0] == nb);
    for (int64_t b = 0; b < nb; b++) {
        const un_val *row = x->data + b * nc;
        int64_t l = un_num_to_index(d, lab->data[b]);
        if (l < 0 || l >= nc)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "cross_entropy: label %lld of sample %lld is outside [0, %lld)",
                                (long long)l, (long long)(lab->off[0] + b), (long long)nc);
        un_val lse;
        if (d == UN_DOM_FIELD) {
            un_val s = un_num_zero(d);
            for (int64_t j = 0; j < nc; j++)
                s = un_num_add(d, s, surr(a->salt ^ TAG_EXP, row[j]));
            lse = surr(a->salt ^ TAG_LOG, s);
        } else {
            double mx = row[0].f, s = 0;
            for (int64_t j = 1; j < nc; j++)
                mx = fmax(mx, row[j].f);
            for (int64_t j = 0; j < nc; j++)
                s += exp(row[j].f - mx);
            lse.f = mx + log(s);
        }
        a->out[0].data[b] = un_num_sub(d, lse, row[l]);
    }
    return UN_OK;
}

/* ---- dispatch -------------------------------------------------------------------------------- */

un_status un__kernel_run(un_ctx *ctx, const un_kargs *a) {
    switch (a->op) {
    case UN_OP_LINEAR:
        return k_linear(ctx, a);
    case UN_OP_BATCH_MATMUL:
        return k_batch_matmul(ctx, a);
    case UN_OP_EW_ADD:
        return k_ew_add(ctx, a);
    case UN_OP_EW_SUB:
        return k_ew_sub(ctx, a);
    case UN_OP_EW_MUL:
        return k_ew_mul(ctx, a);
    case UN_OP_SCALAR_MUL:
        return k_scalar_mul(ctx, a);
    case UN_OP_RELU:
        return k_relu(ctx, a);
    case UN_OP_GELU:
        return k_gelu(ctx, a);
    case UN_OP_SIGMOID:
        return k_sigmoid(ctx, a);
    case UN_OP_TANH:
        return k_tanh(ctx, a);
    case UN_OP_SOFTMAX:
        return k_softmax(ctx, a);
    case UN_OP_LAYER_NORM:
        return k_layer_norm(ctx, a);
    case UN_OP_BATCH_NORM:
        return k_batch_norm(ctx, a);
    case UN_OP_DROPOUT:
        return k_dropout(ctx, a);
    case UN_OP_CONV2D:
        return k_conv2d(ctx, a);
    case UN_OP_POOL2D:
        return k_pool2d(ctx, a);
    case UN_OP_CONCAT:
        return k_concat(ctx, a);
    case UN_OP_SPLIT:
        return k_split(ctx, a);
    case UN_OP_TRANSPOSE:
        return k_transpose(ctx, a);
    case UN_OP_RESHAPE:
        return k_reshape(ctx, a);
    case UN_OP_FLAT:
        return k_flat(ctx, a);
    case UN_OP_EMBEDDING:
        return k_embedding(ctx, a);
    case UN_OP_MULTIHEAD_ATTENTION:
        return k_multihead_attention(ctx, a);
    case UN_OP_REDUCE_SUM:
        return k_reduce_sum(ctx, a);
    case UN_OP_REDUCE_MEAN:
        return k_reduce_mean(ctx, a);
    case UN_OP_CROSS_ENTROPY:
        return k_cross_entropy(ctx, a);
    case UN_OP_IDENTITY:
        return k_identity(ctx, a);
    /* Sources have no computation; parallel ops move pieces in eval.c. Every op is listed so that
     * -Wswitch flags a new regular op of ops.def without a kernel. */
    case UN_OP_INPUT:
    case UN_OP_WEIGHT:
    case UN_OP_PARTITION:
    case UN_OP_COMBINE:
    case UN_OP_REPLICATE:
    case UN_OP_REDUCE:
    case UN_OP_COUNT:
        break;
    }
    return un_ctx_error(ctx, UN_ERR_INVALID, "no kernel for operator '%s'",
                        (unsigned)a->op < UN_OP_COUNT ? un_op_name(a->op) : "?");
}
