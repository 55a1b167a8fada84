/* kernels_cpu.c - the CPU kernels of runtime/kernels.h: argument checks, dispatch, and the
 * precision-independent helpers. The kernels themselves are written once in kernels_cpu.inc,
 * which this file includes twice (float32 with cblas_sgemm, float64 with cblas_dgemm). This is
 * the only file that includes cblas.h. Not here: data movement of parallel ops (the executor). */
#include "runtime/kernels.h"

#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <tgmath.h>

#include "runtime/blas.h"
#include "runtime/pool.h"

/* ---- parameter vectors (order of specs/ops.json; un_kern_param_names publishes it) ---------- */

enum { P_LIN_ACT, P_LIN_BIAS };
enum { P_SMUL_NUM, P_SMUL_DEN };
enum { P_DIM }; /* softmax */
enum { P_DROP_RATE, P_DROP_SEED };
enum { P_CONV_SH, P_CONV_SW, P_CONV_PH, P_CONV_PW, P_CONV_GROUPS, P_CONV_ACT, P_CONV_BIAS };
enum { P_POOL_KH, P_POOL_KW, P_POOL_SH, P_POOL_SW, P_POOL_PH, P_POOL_PW, P_POOL_TYPE };
enum { P_AXIS, P_SIZES };       /* concat (axis only), split */
enum { P_DIM0, P_DIM1 };        /* transpose */
enum { P_SHAPE };               /* reshape */
enum { P_AGGR };                /* embedding */
enum { P_HEADS, P_CAUSAL };     /* multihead_attention */
enum { P_RED_DIM, P_RED_KEEP }; /* reduce_sum, reduce_mean */

/* Activations in the order of linear's enum (conv2d's is a prefix). */
enum { ACT_NONE, ACT_RELU, ACT_SIGMOID, ACT_TANH, ACT_GELU, ACT_COUNT };

static const char *const names_none[] = {NULL};
static const char *const names_linear[] = {"activation", "use_bias", NULL};
static const char *const names_smul[] = {"num", "den", NULL};
static const char *const names_dim[] = {"dim", NULL};
static const char *const names_dropout[] = {"rate_pct", "seed", NULL};
static const char *const names_conv[] = {"stride_h", "stride_w",   "pad_h",    "pad_w",
                                         "groups",   "activation", "use_bias", NULL};
static const char *const names_pool[] = {"kernel_h", "kernel_w", "stride_h", "stride_w",
                                         "pad_h",    "pad_w",    "type",     NULL};
static const char *const names_axis[] = {"axis", NULL};
static const char *const names_split[] = {"axis", "sizes", NULL};
static const char *const names_transpose[] = {"dim0", "dim1", NULL};
static const char *const names_shape[] = {"shape", NULL};
static const char *const names_embedding[] = {"aggr", NULL};
static const char *const names_mha[] = {"heads", "causal", NULL};
static const char *const names_reduce[] = {"dim", "keep", NULL};

const char *const *un_kern_param_names(un_op op) {
    switch (op) {
    case UN_OP_LINEAR:
        return names_linear;
    case UN_OP_SCALAR_MUL:
        return names_smul;
    case UN_OP_SOFTMAX:
        return names_dim;
    case UN_OP_DROPOUT:
        return names_dropout;
    case UN_OP_CONV2D:
        return names_conv;
    case UN_OP_POOL2D:
        return names_pool;
    case UN_OP_CONCAT:
        return names_axis;
    case UN_OP_SPLIT:
        return names_split;
    case UN_OP_TRANSPOSE:
        return names_transpose;
    case UN_OP_RESHAPE:
        return names_shape;
    case UN_OP_EMBEDDING:
        return names_embedding;
    case UN_OP_MULTIHEAD_ATTENTION:
        return names_mha;
    case UN_OP_REDUCE_SUM:
    case UN_OP_REDUCE_MEAN:
        return names_reduce;
    default:
        return names_none;
    }
}

bool un_kern_supports(un_op op) {
    return (unsigned)op < UN_OP_COUNT && un_op_kind_of(op) == UN_OPK_REGULAR;
}

int64_t un_kt_numel(const un_kt *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->dim[i] < 1 || __builtin_mul_overflow(n, t->dim[i], &n) || n > UN_MAX_NUMEL)
            return -1;
    }
    return n;
}

/* ---- one call's arguments -------------------------------------------------------------------- */

typedef struct kcall {
    un_ctx *ctx;
    const un_kexec *ex;
    un_op op;
    const un_param *p;
    const un_kt *in;
    int n_in;
    const un_kt *out; /* forward: written through out[j].data */
    int n_out;
    const un_kt *dout; /* backward only */
    const un_kt *din;  /* backward only: accumulated through din[i].data */
} kcall;

static int64_t par(const kcall *c, int i) { return c->p[i].v[0]; }

/* Product of dims [lo, hi) of t. */
static int64_t span(const un_kt *t, int lo, int hi) {
    int64_t n = 1;
    for (int i = lo; i < hi; i++)
        n *= t->dim[i];
    return n;
}

/* A dim parameter that may count from the end, as an index in [0, rank) (checked before). */
static int norm_dim(int64_t d, int rank) { return (int)(d < 0 ? d + rank : d); }

/* Element-wise and reduction loops below this much work run on the calling thread. */
#define PAR_MIN_WORK ((int64_t)1 << 15)

/* Runs fn over [0, n) on the pool when the work (n * per) is big enough, else on this thread. */
static void par_for(const kcall *c, int64_t n, int64_t per, void (*fn)(void *, int64_t, int64_t),
                    void *arg) {
    if (n <= 0)
        return;
    int64_t work;
    if (!c->ex->pool || un_pool_size(c->ex->pool) < 2 ||
        (!__builtin_mul_overflow(n, per < 1 ? 1 : per, &work) && work < PAR_MIN_WORK))
        fn(arg, 0, n);
    else
        un_pool_for(c->ex->pool, n, fn, arg);
}

/* Dropout's mask seed: the op's seed parameter, mixed with the executor's seed when it is set. */
static uint64_t dropout_seed(const kcall *c) {
    uint64_t s = (uint64_t)par(c, P_DROP_SEED);
    return c->ex->seed ? un_hash_combine(s, c->ex->seed) : s;
}

/* Dropout's mask of local elements [b, e) of the input (row-major) into keep[0, e - b): element
 * e is kept unless mix64(hash_combine(seed, g)) % 100 < rate, g its global row-major index
 * (runtime/kernels.h). The global index steps along a row, one division per dim only where a row
 * starts: per element, as it was, the divisions and an out-of-line call made a [64,1024]
 * dropout 0.70 ms forward against 0.075 for the linear before it (tiny CANDLE-Uno at
 * hidden=1024, batch=64, one thread; 2026-11-28), and dropout 64 % of the tiny one's
 * data-parallel step. */
static void dropout_mask(const kcall *c, uint64_t seed, int64_t rate, int64_t b, int64_t e,
                         uint8_t *keep) {
    const un_kt *x = &c->in[0];
    /* hash_combine(seed, g) = mix64(seed ^ (g + add)) */
    uint64_t add = 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2);
    bool shard = c->ex->off && c->ex->full && x->rank > 0;
    int64_t row = shard ? x->dim[x->rank - 1] : e - b;
    for (int64_t i = b; i < e;) {
        int64_t j = shard ? i % row : 0, run = shard && row - j < e - i ? row - j : e - i;
        uint64_t g = (uint64_t)i;
        if (shard) {
            g = 0;
            uint64_t st = 1;
            int64_t rest = i;
            for (int d = x->rank - 1; d >= 0; d--) {
                int64_t idx = rest % x->dim[d];
                rest /= x->dim[d];
                g += (uint64_t)(c->ex->off[d] + idx) * st;
                st *= (uint64_t)c->ex->full[d];
            }
        }
        for (int64_t t = 0; t < run; t++)
            keep[i - b + t] =
                (int64_t)(un_mix64(un_mix64(seed ^ (g + (uint64_t)t + add))) % 100) >= rate;
        i += run;
    }
}

/* Elements a dropout loop takes its mask for at a time (dropout_mask; on the stack). */
enum { DROP_CHUNK = 512 };

/* Scratch memory for a kernel; NULL after recording UN_ERR_NOMEM. */
static void *scratch(const kcall *c, int64_t n, size_t elt) {
    if (n < 1)
        n = 1;
    if ((uint64_t)n > SIZE_MAX / elt) {
        un_ctx_error(c->ctx, UN_ERR_NOMEM, "%s: scratch of %lld values does not fit in memory",
                     un_op_name(c->op), (long long)n);
        return NULL;
    }
    void *p = un_ctx_malloc(c->ctx, (size_t)n * elt);
    if (!p)
        un_ctx_error(c->ctx, UN_ERR_NOMEM, "%s: out of memory for %lld scratch values",
                     un_op_name(c->op), (long long)n);
    return p;
}

/* ---- float32 gelu, vectorised ------------------------------------------------------------------
 * gelu(x) = x/2 erfc(-x/sqrt 2) and its derivative, with erfc from Numerical Recipes' Chebyshev
 * fit (fractional error < 1.2e-7 for every argument) and exp from Cephes' expf polynomial
 * (about 1 ulp), so that one float32 element costs two exp and no libm call: the loops below
 * vectorise (the AVX-512 clone, picked at load where the CPU has it; GCC 12 leaves the AVX2 and
 * baseline clones scalar, still without libm calls). float64 keeps libm's erf. */

/* Not under ThreadSanitizer: a clone's ifunc resolver runs while the dynamic loader relocates the
 * program, before the TSan runtime is up, and its instrumented entry crashes at start-up. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
/* -O3 for these loops only: -O2's cost model does not vectorise a loop with a remainder. */
#define VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3")))
#else
#define VEC_CLONES
#endif

/* exp(a), a not NaN (callers pass finite or infinite values, clamped here). */
static inline float vexpf(float a) {
    a = a < -87.3f ? -87.3f : (a > 88.3f ? 88.3f : a);
    /* round to nearest by adding and removing 1.5 * 2^23 (no rintf call in the loop) */
    float n = (a * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = a - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) * (1 << 23);
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* erfc(-x / sqrt 2) (so gelu = x/2 this); x not NaN. */
static inline float gelu_erfc(float x) {
    float z = fabsf(x) * 0.70710678118654752f, t = 2.0f / (2.0f + z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    float e = t * vexpf(-z * z - 1.26551223f + t * p); /* erfc(|x| / sqrt 2) */
    return x >= 0 ? 2.0f - e : e;
}

/* y[i] = gelu(x[i]); y may alias x; a NaN stays NaN. */
VEC_CLONES static void gelu_f32(float *y, const float *xv, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = xv[i], xs = x == x ? x : 0.0f;
        float g = 0.5f * xs * gelu_erfc(xs);
        y[i] = x == x ? g : x;
    }
}

/* y[i] = dy[i] gelu'(pre[i]); y may alias pre. */
VEC_CLONES static void gelu_grad_f32(float *y, const float *dy, const float *pre, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = pre[i], xs = x == x ? x : 0.0f;
        float g = 0.5f * gelu_erfc(xs) + xs * 0.39894228040143268f * vexpf(-0.5f * xs * xs);
        y[i] = dy[i] * (x == x ? g : x);
    }
}

/* y[i] = gelu(x[i]) and d[i] = gelu'(x[i]) in one pass (one erfc for both), the same bits as
 * gelu_f32 and as the factor gelu_grad_f32 multiplies dy by; y may alias x. */
VEC_CLONES static void gelu_dgelu_f32(float *y, float *d, const float *xv, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = xv[i], xs = x == x ? x : 0.0f, e = gelu_erfc(xs);
        float g = 0.5f * e + xs * 0.39894228040143268f * vexpf(-0.5f * xs * xs);
        y[i] = x == x ? 0.5f * xs * e : x;
        d[i] = x == x ? g : x;
    }
}

/* y[i] = a[i] b[i]. */
VEC_CLONES static void mul_f32(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] * b[i];
}

/* y[i] = relu(x[i]), NaN kept (act_body's relu): vectorised, so without a branch on each sign,
 * whose cost depended on how predictable the signs were (a step's relu patterns against the
 * profiler's values). */
VEC_CLONES static void relu_f32(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) { /* x's bits under a mask: no branch in any build */
        float v = x[i];
        uint32_t u;
        memcpy(&u, &v, sizeof u);
        u &= -(uint32_t)((v > 0.0f) | (v != v));
        memcpy(&v, &u, sizeof v);
        y[i] = v;
    }
}

/* y[i] = dy[i] relu'(out[i]), the generic loop's product (act_grad_body): vectorised. */
VEC_CLONES static void relu_grad_f32(float *y, const float *dy, const float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = dy[i] * (out[i] > 0 ? 1.0f : 0.0f);
}

/* z[i] = x[i] + y[i]; z may alias x or y. */
VEC_CLONES static void add_f32(float *z, const float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        z[i] = x[i] + y[i];
}

/* y[i] += s a[i]. */
VEC_CLONES static void add_scaled_f32(float *y, const float *a, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += s * a[i];
}

/* p[i] = exp(p[i] - mx) / sum for i < n, 0 for n <= i < len (the sum in double). */
VEC_CLONES static void softmax_row_f32(float *p, int64_t n, int64_t len) {
    float mx = p[0];
    for (int64_t i = 1; i < n; i++)
        mx = p[i] > mx ? p[i] : mx; /* a NaN anywhere makes the row NaN below, as fmax did */
    for (int64_t i = 0; i < n; i++) {
        float d = p[i] - mx; /* NaN stays NaN; vexpf clamps the infinities */
        float e = vexpf(d == d ? d : 0.0f);
        p[i] = d == d ? e : d;
    }
    double part[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            part[k] += p[i + k];
    for (; i < n; i++)
        part[0] += p[i];
    float inv = (float)(1.0 / (((part[0] + part[1]) + (part[2] + part[3])) +
                               ((part[4] + part[5]) + (part[6] + part[7]))));
    for (i = 0; i < n; i++)
        p[i] *= inv;
    for (i = n; i < len; i++)
        p[i] = 0.0f;
}

/* The backward of a softmax row in place: dp[t] = p[t] (dp[t] - sum_t dp[t] p[t]) for t < n, 0
 * for n <= t < len. The dot in double over 8 partial sums (each product exact in double), so
 * float32 results differ from a sequential sum only where the double sums round to different
 * floats. */
VEC_CLONES static void softmax_bwd_row_f32(float *dp, const float *p, int64_t n, int64_t len) {
    double part[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            part[k] += (double)dp[i + k] * p[i + k];
    for (; i < n; i++)
        part[0] += (double)dp[i] * p[i];
    float dot = (float)(((part[0] + part[1]) + (part[2] + part[3])) +
                        ((part[4] + part[5]) + (part[6] + part[7])));
    for (i = 0; i < n; i++)
        dp[i] = p[i] * (dp[i] - dot);
    for (i = n; i < len; i++)
        dp[i] = 0.0f;
}

/* ---- float32 layer_norm rows, vectorised -------------------------------------------------------
 * Sums in double over 8 partial sums (one AVX-512 register of doubles); the element-wise parts in
 * float. float64 keeps the plain loops of kernels_cpu.inc. */

/* sum of x[i] (k = 1) or of (x[i] - c)^2 (k = 2) over [0, n), in double. */
VEC_CLONES static double row_sum_f32(const float *x, int64_t n, int k, double c) {
    double part[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) {
            double t = (double)x[i + l] - c;
            part[l] += k == 1 ? (double)x[i + l] : t * t;
        }
    for (; i < n; i++) {
        double t = (double)x[i] - c;
        part[0] += k == 1 ? (double)x[i] : t * t;
    }
    return ((part[0] + part[1]) + (part[2] + part[3])) +
           ((part[4] + part[5]) + (part[6] + part[7]));
}

/* Mean and 1 / sqrt(biased variance + 1e-5) of x[0, n). */
static void row_moments_f32(const float *x, int64_t n, double *mean, double *rs) {
    *mean = row_sum_f32(x, n, 1, 0) / (double)n;
    *rs = 1.0 / sqrt(row_sum_f32(x, n, 2, *mean) / (double)n + 1e-5);
}

/* y = (x - mean) rs g + b over one row. */
VEC_CLONES static void ln_row_f32(float *y, const float *x, const float *g, const float *b,
                                  int64_t n, float mean, float rs) {
    for (int64_t i = 0; i < n; i++)
        y[i] = (x[i] - mean) * rs * g[i] + b[i];
}

/* dx += rs (dxh - mean(dxh) - xh mean(dxh xh)), dxh = dy g, xh = (x - mean) rs, over one row. */
VEC_CLONES static void ln_dx_row_f32(float *dx, const float *x, const float *dy, const float *g,
                                     int64_t n, float mean, float rs) {
    double p1[8] = {0}, p2[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) {
            float dxh = dy[i + l] * g[i + l], xh = (x[i + l] - mean) * rs;
            p1[l] += dxh;
            p2[l] += (double)dxh * xh;
        }
    for (; i < n; i++) {
        float dxh = dy[i] * g[i], xh = (x[i] - mean) * rs;
        p1[0] += dxh;
        p2[0] += (double)dxh * xh;
    }
    float s1 = (float)((((p1[0] + p1[1]) + (p1[2] + p1[3])) + ((p1[4] + p1[5]) + (p1[6] + p1[7]))) /
                       (double)n);
    float s2 = (float)((((p2[0] + p2[1]) + (p2[2] + p2[3])) + ((p2[4] + p2[5]) + (p2[6] + p2[7]))) /
                       (double)n);
    for (i = 0; i < n; i++)
        dx[i] += rs * (dy[i] * g[i] - s1 - (x[i] - mean) * rs * s2);
}

/* dg[k] += dy[k] (x[k] - mean) rs and db[k] += dy[k] for k in [b, e) (either may be NULL). */
VEC_CLONES static void ln_dw_row_f32(float *dg, float *db, const float *x, const float *dy,
                                     int64_t b, int64_t e, float mean, float rs) {
    if (dg)
        for (int64_t k = b; k < e; k++)
            dg[k] += dy[k] * ((x[k] - mean) * rs);
    if (db)
        for (int64_t k = b; k < e; k++)
            db[k] += dy[k];
}

/* ---- the training loss: cross-entropy rows ------------------------------------------------------
 */

/* g[i] = exp(x[i] - mx) (NaN stays NaN), returns their sum in double. */
VEC_CLONES static double exp_row_f32(float *g, const float *x, int64_t n, float mx) {
    double part[8] = {0};
    int64_t i = 0;
    for (; i < n; i++) {
        float d = x[i] - mx;
        float e = vexpf(d == d ? d : 0.0f);
        g[i] = d == d ? e : d;
    }
    for (i = 0; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            part[l] += g[i + l];
    for (; i < n; i++)
        part[0] += g[i];
    return ((part[0] + part[1]) + (part[2] + part[3])) +
           ((part[4] + part[5]) + (part[6] + part[7]));
}

/* g[i] = (g[i] inv - [i == y]) f. */
VEC_CLONES static void ce_grad_row_f32(float *g, int64_t n, int64_t y, float inv, float f) {
    for (int64_t i = 0; i < n; i++)
        g[i] = (g[i] * inv - (i == y ? 1.0f : 0.0f)) * f;
}

double un_kern_ce_loss(un_prec prec, const void *logits, int64_t rows, int64_t c,
                       const int64_t *labels, double gscale, void *grad) {
    double total = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t y = labels[r];
        if (prec == UN_PREC_F32) {
            const float *x = (const float *)logits + r * c;
            float *g = (float *)grad + r * c, mx = x[0];
            for (int64_t j = 1; j < c; j++)
                mx = x[j] > mx || x[j] != x[j] ? x[j] : mx; /* a NaN makes the row NaN */
            double s = exp_row_f32(g, x, c, mx);
            total += (double)mx + log(s) - (double)x[y];
            ce_grad_row_f32(g, c, y, (float)(1.0 / s), (float)gscale);
            continue;
        }
        const double *x = (const double *)logits + r * c;
        double *g = (double *)grad + r * c, mx = x[0], s = 0;
        for (int64_t j = 1; j < c; j++)
            mx = x[j] > mx || x[j] != x[j] ? x[j] : mx;
        for (int64_t j = 0; j < c; j++) {
            g[j] = exp(x[j] - mx);
            s += g[j];
        }
        total += mx + log(s) - x[y];
        for (int64_t j = 0; j < c; j++)
            g[j] = (g[j] / s - (j == y ? 1.0 : 0.0)) * gscale;
    }
    return total;
}

/* ---- the forward's saved values ----------------------------------------------------------------
 */

typedef struct kstash_entry {
    uint64_t key; /* call_key: the addresses of the call's inputs and outputs */
    un_op op;
    bool valid;   /* data holds the forward of the call with this fingerprint */
    uint64_t sig; /* call_sig of that call */
    void *data;
    size_t bytes;
} kstash_entry;

struct un_kstash {
    kstash_entry *e;
    int n, cap;
};

un_kstash *un_kstash_new(void) { return un_xcalloc(1, sizeof(un_kstash)); }

void un_kstash_free(un_kstash *s) {
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        free(s->e[i].data);
    free(s->e);
    free(s);
}

size_t un_kstash_bytes(const un_kstash *s) {
    size_t n = 0;
    for (int i = 0; s && i < s->n; i++)
        n += s->e[i].bytes;
    return n;
}

/* A fingerprint of n bytes: 32 independent lanes of a multiply-xorshift step (each a bijection of
 * the lane, so one changed word always changes the result) over 256-byte blocks, the tail and
 * the lanes folded with un_hash_bytes (byte-wise FNV-1a, too slow for MiBs). 32 lanes are four
 * AVX-512 registers whose multiply chains overlap: ~4x the speed of one register's 8 lanes. */
VEC_CLONES static uint64_t fingerprint(const void *p, size_t n, uint64_t h) {
    enum { LANES = 32 };
    const unsigned char *b = p;
    uint64_t lane[LANES];
    for (int k = 0; k < LANES; k++)
        lane[k] = h + 0x9e3779b97f4a7c15ull * (uint64_t)(k + 1);
    size_t blocks = n / sizeof lane;
    for (size_t i = 0; i < blocks; i++) {
        uint64_t w[LANES];
        memcpy(w, b + sizeof lane * i, sizeof lane);
        for (int k = 0; k < LANES; k++) {
            uint64_t x = (lane[k] ^ w[k]) * 0xff51afd7ed558ccdull;
            lane[k] = x ^ (x >> 29);
        }
    }
    h = un_hash_bytes(lane, sizeof lane, h ^ n);
    return un_hash_bytes(b + sizeof lane * blocks, n - sizeof lane * blocks, h);
}

static bool same_dims(const un_kt *a, const un_kt *b);

/* The call's op, parameters, input shapes and values (an input passed twice is read once). */
static uint64_t call_sig(const kcall *c) {
    uint64_t h = un_hash_combine((uint64_t)c->op, (uint64_t)c->ex->prec);
    for (int i = 0; un_kern_param_names(c->op)[i]; i++)
        for (int k = 0; k < c->p[i].len && k < UN_MAX_DIMS; k++)
            h = un_hash_combine(h, (uint64_t)c->p[i].v[k]);
    for (int i = 0; i < c->n_in; i++) {
        const un_kt *t = &c->in[i];
        h = un_hash_bytes(t->dim, (size_t)t->rank * sizeof t->dim[0], un_hash_combine(h, t->rank));
        int same = -1;
        for (int j = 0; j < i && same < 0; j++)
            if (c->in[j].data == t->data && same_dims(&c->in[j], t))
                same = j;
        size_t es = t->dtype == UN_DT_INT || c->ex->prec == UN_PREC_F64 ? 8 : 4;
        h = same >= 0 ? un_hash_combine(h, (uint64_t)same)
                      : fingerprint(t->data, (size_t)un_kt_numel(t) * es, h);
    }
    return h;
}

/* The stash's key of a call: its op and the addresses of its inputs and outputs. An executor may
 * reuse an output's memory for another op's output once nothing reads it (exec.c's arena), so
 * the output's address alone does not tell two ops' forwards apart; with their inputs it does
 * (a collision would only cost a recomputation: an entry is used only for its fingerprint). */
static uint64_t call_key(const kcall *c) {
    uint64_t h = un_hash_combine((uint64_t)c->op, (uint64_t)(uintptr_t)c->out[0].data);
    for (int i = 0; i < c->n_in; i++)
        h = un_hash_combine(h, (uint64_t)(uintptr_t)c->in[i].data);
    return h;
}

static kstash_entry *stash_find(un_kstash *s, uint64_t key, un_op op) {
    for (int i = 0; i < s->n; i++)
        if (s->e[i].key == key && s->e[i].op == op)
            return &s->e[i];
    return NULL;
}

/* The forward's slot of `bytes` for this call (its memory reused when the size is the same),
 * invalid until stash_seal; NULL without a stash or memory (the backward then recomputes). */
static kstash_entry *stash_slot(const kcall *c, size_t bytes) {
    un_kstash *s = c->ex->stash;
    if (!s)
        return NULL;
    kstash_entry *e = stash_find(s, call_key(c), c->op);
    if (!e) {
        if (s->n == s->cap) {
            s->cap = s->cap ? 2 * s->cap : 16;
            s->e = un_xrealloc(s->e, (size_t)s->cap * sizeof *s->e);
        }
        e = &s->e[s->n++];
        *e = (kstash_entry){.key = call_key(c), .op = c->op};
    }
    e->valid = false;
    if (e->bytes != bytes) {
        free(e->data);
        e->bytes = 0;
        if (!(e->data = malloc(bytes)))
            return NULL;
        e->bytes = bytes;
    }
    return e;
}

/* The forward filled e (may be NULL). */
static void stash_seal(const kcall *c, kstash_entry *e) {
    if (e) {
        e->sig = call_sig(c);
        e->valid = true;
    }
}

/* The entry holding the saved values of this call's forward (bytes long), or NULL. */
static kstash_entry *stash_lookup(const kcall *c, size_t bytes) {
    un_kstash *s = c->ex->stash;
    kstash_entry *e = s ? stash_find(s, call_key(c), c->op) : NULL;
    if (!e || !e->valid || e->bytes != bytes || e->sig != call_sig(c))
        return NULL;
    return e;
}

/* The saved values of this call's forward (bytes long), or NULL. */
static const void *stash_get(const kcall *c, size_t bytes) {
    kstash_entry *e = stash_lookup(c, bytes);
    return e ? e->data : NULL;
}

/* As stash_get, for a backward that overwrites them: the entry is invalid from then on (another
 * backward without a forward recomputes, as without a stash); the memory stays the stash's. */
static void *stash_take(const kcall *c, size_t bytes) {
    kstash_entry *e = stash_lookup(c, bytes);
    if (!e)
        return NULL;
    e->valid = false;
    return e->data;
}

/* Values multihead_attention keeps for its backward (the call's dims checked against 2^48 by the
 * caller): Q, K, V and O (proj = (2 S + 2 T) B HL), and the probabilities (B heads S T) when
 * they are at most 4x the projections (longer sequences recompute them block by block). */
static int64_t mha_saved_values(int64_t B, int64_t S, int64_t Tn, int64_t HL, int64_t heads) {
    int64_t proj = (2 * S + 2 * Tn) * B * HL, pall;
    bool keep_p = !__builtin_mul_overflow(B * heads, S * Tn, &pall) && pall <= 4 * proj;
    return proj + (keep_p ? pall : 0);
}

/* ---- small matrix products ---------------------------------------------------------------------
 * OpenBLAS spends a fixed cost on every call (argument checks, a buffer from blas_memory_alloc,
 * packing for its blocked kernels), and with the Haswell kernel set the buffer comes from one
 * list under one mutex for the process: two device threads calling small products at once take
 * turns on it (search/README.md "OpenBLAS's buffer lock"). Attention's per-head products at small
 * head sizes (8 x 8 x 8 in the tiny transformer, a thousand a step) and the tiny models' linears
 * are that kind of call. Products up to a bound of multiply-adds run in kernels_cpu.inc's small
 * kernel instead (AVX2 + FMA where the CPU has both), with op(B) packed in a stack buffer of at
 * most SMALL_GEMM_PACK bytes. The bound is where the small kernel stops being faster than
 * OpenBLAS on one thread (scripts/bench/small_gemm.sh; runtime/README.md has the table): 2^15
 * against the Haswell kernel set, 2^12 against SkylakeX and its successors, whose own
 * small-matrix path (AVX-512, no buffer) wins above that. */
enum { SMALL_GEMM_PACK = 32 << 10 };

int64_t un_kern_gemm_small_macs(void) {
    static int64_t bound; /* 0 until computed; every thread computes the same value */
    int64_t b = __atomic_load_n(&bound, __ATOMIC_RELAXED);
    if (!b) {
        const char *k = un_blas_kernel();
        bool avx512_small = strcasecmp(k, "SkylakeX") == 0 || strcasecmp(k, "Cooperlake") == 0 ||
                            strcasecmp(k, "SapphireRapids") == 0;
        b = avx512_small ? (int64_t)1 << 12 : (int64_t)1 << 15;
        __atomic_store_n(&bound, b, __ATOMIC_RELAXED);
    }
    return b;
}

/* Whether the small kernel takes the product: its packed op(B) fits the buffer and (unless any
 * size is asked for) it is within the bound. */
static bool small_gemm_fits(int64_t m, int64_t n, int64_t k, size_t elem, bool any) {
    int64_t vl = (int64_t)(32 / elem), np = (n + vl - 1) / vl * vl;
    /* dims fit in int: k np < 2^62, and once it fits the buffer m n k < 2^44 */
    return k * np <= SMALL_GEMM_PACK / (int64_t)elem &&
           (any || m * n * k <= un_kern_gemm_small_macs());
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SG_FMA  __attribute__((target("avx2,fma"), optimize("O3", "fp-contract=fast")))
#define SG_BASE __attribute__((optimize("O3")))
static bool small_gemm_fma(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
#define SG_FMA
#define SG_BASE
static bool small_gemm_fma(void) { return false; }
#endif

/* ---- the kernels, once per precision --------------------------------------------------------- */

#define CAT_(a, b) a##b
#define CAT(a, b)  CAT_(a, b)

#define T         float
#define FN(name)  CAT(name, _f32)
#define BLAS_GEMM cblas_sgemm
#include "runtime/kernels_cpu.inc"
#undef T
#undef FN
#undef BLAS_GEMM

#define T         double
#define FN(name)  CAT(name, _f64)
#define BLAS_GEMM cblas_dgemm
#include "runtime/kernels_cpu.inc"
#undef T
#undef FN
#undef BLAS_GEMM

bool un_kern_gemm_f32(un_gemm_path path, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc) {
    un_blas_init();
    return gemm_path_f32(path, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

bool un_kern_gemm_f64(un_gemm_path path, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      double alpha, const double *A, int64_t lda, const double *B, int64_t ldb,
                      double beta, double *C, int64_t ldc) {
    un_blas_init();
    return gemm_path_f64(path, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ---- argument checks ------------------------------------------------------------------------- */

#define FAIL(...) return un_ctx_error(c->ctx, UN_ERR_INVALID, __VA_ARGS__)

static void dims_str(const un_kt *t, char *buf, size_t n) {
    size_t at = 0;
    at += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->rank && i < UN_MAX_DIMS && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? "," : "", (long long)t->dim[i]);
    if (at < n)
        snprintf(buf + at, n - at, "]");
}

/* A tensor argument: rank in range, dims >= 1, size in bounds, dtype, buffer present. */
static un_status check_tensor(const kcall *c, const un_kt *t, const char *what, int i, un_dtype dt,
                              bool need_data) {
    const char *op = un_op_name(c->op);
    int min_rank = strcmp(what, "input") == 0 ? 1 : 0; /* outputs may be scalars (rank 0) */
    if (t->rank < min_rank || t->rank > UN_MAX_DIMS)
        FAIL("%s: %s %d has rank %d (expected %d..%d)", op, what, i, t->rank, min_rank,
             UN_MAX_DIMS);
    if (un_kt_numel(t) < 0) {
        char b[128];
        dims_str(t, b, sizeof b);
        FAIL("%s: %s %d has dims %s (each must be >= 1, at most 2^48 elements)", op, what, i, b);
    }
    if (t->dtype != dt)
        FAIL("%s: %s %d has dtype %s, expected %s", op, what, i,
             (unsigned)t->dtype < UN_DT_COUNT ? un_dtype_name(t->dtype) : "?", un_dtype_name(dt));
    if (need_data && !t->data)
        FAIL("%s: %s %d has no data", op, what, i);
    return UN_OK;
}

static bool same_dims(const un_kt *a, const un_kt *b) {
    if (a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dim[i] != b->dim[i])
            return false;
    return true;
}

/* The tensor `got` must have exactly the dims of `want`. */
static un_status check_dims(const kcall *c, const un_kt *got, const char *what, int i,
                            const un_kt *want) {
    if (same_dims(got, want))
        return UN_OK;
    char g[128], w[128];
    dims_str(got, g, sizeof g);
    dims_str(want, w, sizeof w);
    FAIL("%s: %s %d has dims %s, expected %s", un_op_name(c->op), what, i, g, w);
}

static bool gemm_fits(int64_t a, int64_t b, int64_t cc, int64_t d, int64_t e) {
    return a <= INT_MAX && b <= INT_MAX && cc <= INT_MAX && d <= INT_MAX && e <= INT_MAX;
}

/* Input counts: [lo, hi]; output count exact (split: >= 1). */
static void op_arity(const kcall *c, int *lo, int *hi, int *nout) {
    *nout = 1;
    switch (c->op) {
    case UN_OP_LINEAR:
    case UN_OP_CONV2D:
        *lo = 2, *hi = 3;
        break;
    case UN_OP_BATCH_MATMUL:
    case UN_OP_EW_ADD:
    case UN_OP_EW_SUB:
    case UN_OP_EW_MUL:
    case UN_OP_CONCAT:
    case UN_OP_EMBEDDING:
    case UN_OP_CROSS_ENTROPY:
        *lo = *hi = 2;
        break;
    case UN_OP_LAYER_NORM:
    case UN_OP_BATCH_NORM:
        *lo = *hi = 3;
        break;
    case UN_OP_MULTIHEAD_ATTENTION:
        *lo = *hi = 7;
        break;
    case UN_OP_SPLIT:
        *lo = *hi = 1;
        *nout = c->p[P_SIZES].len;
        break;
    default:
        *lo = *hi = 1;
        break;
    }
}

/* The output dims the op gives for these inputs, into want[] (the checks of pcg's spec, on the
 * local pieces). */
static un_status check_shapes(const kcall *c, un_kt *want) {
    const char *op = un_op_name(c->op);
    const un_kt *in = c->in;
    const un_kt *x = &in[0];
    int r = x->rank;
    for (int j = 0; j < c->n_out; j++) {
        want[j] = *x;
        want[j].dtype = UN_DT_FLOAT;
        want[j].data = NULL;
    }
    switch (c->op) {
    case UN_OP_LINEAR: {
        const un_kt *w = &in[1];
        bool bias = par(c, P_LIN_BIAS) != 0;
        if (par(c, P_LIN_ACT) < 0 || par(c, P_LIN_ACT) >= ACT_COUNT)
            FAIL("%s: activation %lld is not one of none/relu/sigmoid/tanh/gelu", op,
                 (long long)par(c, P_LIN_ACT));
        if (bias != (c->n_in == 3))
            FAIL("%s: use_bias is %s but %d inputs were given", op, bias ? "true" : "false",
                 c->n_in);
        if (r < 2 || w->rank != 2 || x->dim[r - 1] != w->dim[0])
            FAIL("%s: x (rank %d, last dim %lld) and w (rank %d, dim 0 %lld) do not match", op, r,
                 (long long)x->dim[r - 1], w->rank, (long long)w->dim[0]);
        if (bias && (in[2].rank != 1 || in[2].dim[0] != w->dim[1]))
            FAIL("%s: bias has %lld values, expected %lld", op, (long long)in[2].dim[0],
                 (long long)w->dim[1]);
        if (!gemm_fits(span(x, 0, r - 1), w->dim[0], w->dim[1], 0, 0))
            return un_ctx_error(c->ctx, UN_ERR_LIMIT, "%s: a matrix dim exceeds 2^31-1", op);
        want[0].dim[r - 1] = w->dim[1];
        break;
    }
    case UN_OP_BATCH_MATMUL: {
        const un_kt *b = &in[1];
        if (r < 2 || b->rank != r || x->dim[r - 1] != b->dim[r - 2] ||
            span(x, 0, r - 2) != span(b, 0, r - 2))
            FAIL("%s: a and b do not match (equal ranks >= 2, equal batch dims, a[-1] == b[-2])",
                 op);
        for (int i = 0; i < r - 2; i++)
            if (x->dim[i] != b->dim[i])
                FAIL("%s: batch dim %d differs (%lld vs %lld)", op, i, (long long)x->dim[i],
                     (long long)b->dim[i]);
        if (!gemm_fits(x->dim[r - 2], x->dim[r - 1], b->dim[r - 1], 0, 0))
            return un_ctx_error(c->ctx, UN_ERR_LIMIT, "%s: a matrix dim exceeds 2^31-1", op);
        want[0].dim[r - 1] = b->dim[r - 1];
        break;
    }
    case UN_OP_EW_ADD:
    case UN_OP_EW_SUB:
    case UN_OP_EW_MUL:
        return check_dims(c, &in[1], "input", 1, x);
    case UN_OP_SCALAR_MUL:
        if (par(c, P_SMUL_DEN) < 1)
            FAIL("%s: den is %lld, must be >= 1", op, (long long)par(c, P_SMUL_DEN));
        break;
    case UN_OP_SOFTMAX:
        if (par(c, P_DIM) < -r || par(c, P_DIM) >= r)
            FAIL("%s: dim %lld is outside [-%d, %d)", op, (long long)par(c, P_DIM), r, r);
        break;
    case UN_OP_LAYER_NORM:
        for (int i = 1; i < 3; i++)
            if (in[i].rank != 1 || in[i].dim[0] != x->dim[r - 1])
                FAIL("%s: input %d must be [%lld]", op, i, (long long)x->dim[r - 1]);
        break;
    case UN_OP_BATCH_NORM:
        if (r != 4)
            FAIL("%s: x has rank %d, expected 4", op, r);
        for (int i = 1; i < 3; i++)
            if (in[i].rank != 1 || in[i].dim[0] != x->dim[1])
                FAIL("%s: input %d must be [%lld]", op, i, (long long)x->dim[1]);
        break;
    case UN_OP_DROPOUT:
        if (par(c, P_DROP_RATE) < 0 || par(c, P_DROP_RATE) > 99)
            FAIL("%s: rate_pct %lld is outside [0, 99]", op, (long long)par(c, P_DROP_RATE));
        break;
    case UN_OP_CONV2D: {
        const un_kt *w = &in[1];
        int64_t sh = par(c, P_CONV_SH), sw = par(c, P_CONV_SW), ph = par(c, P_CONV_PH),
                pw = par(c, P_CONV_PW), g = par(c, P_CONV_GROUPS);
        bool bias = par(c, P_CONV_BIAS) != 0;
        if (par(c, P_CONV_ACT) < 0 || par(c, P_CONV_ACT) >= ACT_COUNT)
            FAIL("%s: activation %lld is unknown", op, (long long)par(c, P_CONV_ACT));
        if (bias != (c->n_in == 3))
            FAIL("%s: use_bias is %s but %d inputs were given", op, bias ? "true" : "false",
                 c->n_in);
        if (sh < 1 || sw < 1 || ph < 0 || pw < 0 || g < 1 || ph > (1 << 20) || pw > (1 << 20))
            FAIL("%s: strides and groups must be >= 1 and pads >= 0", op);
        if (r != 4 || w->rank != 4)
            FAIL("%s: x and w must have rank 4", op);
        if (x->dim[1] != w->dim[1] * g || w->dim[0] % g != 0)
            FAIL("%s: x has %lld channels, w [%lld, %lld, ...] with %lld groups does not match", op,
                 (long long)x->dim[1], (long long)w->dim[0], (long long)w->dim[1], (long long)g);
        if (x->dim[2] + 2 * ph < w->dim[2] || x->dim[3] + 2 * pw < w->dim[3])
            FAIL("%s: the kernel is larger than the padded input", op);
        if (bias && (in[2].rank != 1 || in[2].dim[0] != w->dim[0]))
            FAIL("%s: bias has %lld values, expected %lld", op, (long long)in[2].dim[0],
                 (long long)w->dim[0]);
        want[0].dim[1] = w->dim[0];
        want[0].dim[2] = (x->dim[2] + 2 * ph - w->dim[2]) / sh + 1;
        want[0].dim[3] = (x->dim[3] + 2 * pw - w->dim[3]) / sw + 1;
        if (!gemm_fits(w->dim[0], span(w, 1, 4), want[0].dim[2] * want[0].dim[3], 0, 0))
            return un_ctx_error(c->ctx, UN_ERR_LIMIT, "%s: a matrix dim exceeds 2^31-1", op);
        break;
    }
    case UN_OP_POOL2D: {
        int64_t kh = par(c, P_POOL_KH), kw = par(c, P_POOL_KW), sh = par(c, P_POOL_SH),
                sw = par(c, P_POOL_SW), ph = par(c, P_POOL_PH), pw = par(c, P_POOL_PW);
        if (r != 4)
            FAIL("%s: x has rank %d, expected 4", op, r);
        if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || ph < 0 || pw < 0 || 2 * ph > kh ||
            2 * pw > kw || kh > (1 << 20) || kw > (1 << 20))
            FAIL("%s: kernel and strides must be >= 1 and 0 <= 2 pad <= kernel", op);
        if (par(c, P_POOL_TYPE) != 0 && par(c, P_POOL_TYPE) != 1)
            FAIL("%s: type %lld is neither max nor avg", op, (long long)par(c, P_POOL_TYPE));
        if (x->dim[2] + 2 * ph < kh || x->dim[3] + 2 * pw < kw)
            FAIL("%s: the window is larger than the padded input", op);
        want[0].dim[2] = (x->dim[2] + 2 * ph - kh) / sh + 1;
        want[0].dim[3] = (x->dim[3] + 2 * pw - kw) / sw + 1;
        break;
    }
    case UN_OP_CONCAT: {
        int64_t ax = par(c, P_AXIS);
        if (ax < 0 || ax >= r || in[1].rank != r)
            FAIL("%s: axis %lld and ranks %d, %d do not fit", op, (long long)ax, r, in[1].rank);
        for (int i = 0; i < r; i++)
            if (i != ax && in[1].dim[i] != x->dim[i])
                FAIL("%s: dim %d differs (%lld vs %lld)", op, i, (long long)x->dim[i],
                     (long long)in[1].dim[i]);
        want[0].dim[ax] = x->dim[ax] + in[1].dim[ax];
        break;
    }
    case UN_OP_SPLIT: {
        int64_t ax = par(c, P_AXIS), tot = 0;
        if (ax < 0 || ax >= r)
            FAIL("%s: axis %lld is outside [0, %d)", op, (long long)ax, r);
        for (int j = 0; j < c->n_out; j++) {
            if (c->p[P_SIZES].v[j] < 1)
                FAIL("%s: size %d is %lld", op, j, (long long)c->p[P_SIZES].v[j]);
            want[j].dim[ax] = c->p[P_SIZES].v[j];
            tot += c->p[P_SIZES].v[j];
        }
        if (tot != x->dim[ax])
            FAIL("%s: sizes add up to %lld, but dim %lld is %lld", op, (long long)tot,
                 (long long)ax, (long long)x->dim[ax]);
        break;
    }
    case UN_OP_TRANSPOSE: {
        int64_t d0 = par(c, P_DIM0), d1 = par(c, P_DIM1);
        if (d0 < -r || d0 >= r || d1 < -r || d1 >= r)
            FAIL("%s: dims %lld, %lld do not fit rank %d", op, (long long)d0, (long long)d1, r);
        int a = norm_dim(d0, r), b = norm_dim(d1, r);
        want[0].dim[a] = x->dim[b];
        want[0].dim[b] = x->dim[a];
        break;
    }
    case UN_OP_RESHAPE: {
        const un_param *s = &c->p[P_SHAPE];
        if (s->len < 1 || s->len > UN_MAX_DIMS)
            FAIL("%s: shape has %d dims", op, s->len);
        want[0].rank = s->len;
        for (int i = 0; i < s->len; i++)
            want[0].dim[i] = s->v[i];
        if (un_kt_numel(&want[0]) != un_kt_numel(x))
            FAIL("%s: shape holds %lld elements, x %lld", op, (long long)un_kt_numel(&want[0]),
                 (long long)un_kt_numel(x));
        break;
    }
    case UN_OP_FLAT:
        if (r < 2)
            FAIL("%s: x has rank %d, expected >= 2", op, r);
        want[0].rank = 2;
        want[0].dim[1] = span(x, 1, r);
        break;
    case UN_OP_EMBEDDING:
        if (r != 2 || in[1].rank != 2)
            FAIL("%s: indices and table must have rank 2", op);
        if (par(c, P_AGGR) != 0 && par(c, P_AGGR) != 1)
            FAIL("%s: aggr %lld is neither sum nor mean", op, (long long)par(c, P_AGGR));
        want[0].dim[1] = in[1].dim[1];
        break;
    case UN_OP_MULTIHEAD_ATTENTION: {
        int64_t heads = par(c, P_HEADS), E = x->dim[2], HL = in[3].dim[1];
        for (int i = 0; i < 7; i++)
            if (in[i].rank != (i < 3 ? 3 : 2))
                FAIL("%s: input %d has rank %d, expected %d", op, i, in[i].rank, i < 3 ? 3 : 2);
        if (in[1].dim[0] != x->dim[0] || in[2].dim[0] != x->dim[0] ||
            in[2].dim[1] != in[1].dim[1] || in[1].dim[2] != E || in[2].dim[2] != E)
            FAIL("%s: q [b, s, e], k and v [b, t, e] do not match", op);
        for (int i = 3; i < 6; i++)
            if (in[i].dim[0] != E || in[i].dim[1] != HL)
                FAIL("%s: input %d must be [%lld, %lld]", op, i, (long long)E, (long long)HL);
        if (in[6].dim[0] != HL)
            FAIL("%s: wo has %lld rows, expected %lld", op, (long long)in[6].dim[0], (long long)HL);
        if (heads < 1 || HL % heads != 0)
            FAIL("%s: heads %lld does not divide %lld", op, (long long)heads, (long long)HL);
        if (par(c, P_CAUSAL) && x->dim[1] != in[1].dim[1])
            FAIL("%s: causal needs q and k of one sequence length (%lld, %lld)", op,
                 (long long)x->dim[1], (long long)in[1].dim[1]);
        if (!gemm_fits(x->dim[1], in[1].dim[1], E, HL, in[6].dim[1]))
            return un_ctx_error(c->ctx, UN_ERR_LIMIT, "%s: a matrix dim exceeds 2^31-1", op);
        want[0].dim[2] = in[6].dim[1];
        break;
    }
    case UN_OP_REDUCE_SUM:
    case UN_OP_REDUCE_MEAN: {
        int64_t d = par(c, P_RED_DIM);
        if (d < -r || d >= r)
            FAIL("%s: dim %lld is outside [-%d, %d)", op, (long long)d, r, r);
        int nd = norm_dim(d, r);
        if (par(c, P_RED_KEEP)) {
            want[0].dim[nd] = 1;
        } else {
            for (int i = nd; i + 1 < r; i++)
                want[0].dim[i] = x->dim[i + 1];
            want[0].rank = r - 1;
        }
        break;
    }
    case UN_OP_CROSS_ENTROPY:
        if (r != 2 || in[1].rank != 1 || in[1].dim[0] != x->dim[0])
            FAIL("%s: logits must be [b, c] and labels [b]", op);
        want[0].rank = 1;
        break;
    default:
        break;
    }
    return UN_OK;
}

/* Counts, dtypes, buffers and shapes of one call. */
static un_status check_call(const kcall *c, bool backward) {
    const char *op = un_op_name(c->op);
    if (!un_kern_supports(c->op))
        return un_ctx_error(c->ctx, UN_ERR_INVALID,
                            "no CPU kernel for operator '%s' (only regular operators have one)",
                            (unsigned)c->op < UN_OP_COUNT ? op : "?");
    if (!c->ex)
        FAIL("%s: no execution settings (un_kexec)", op);
    if (c->ex->prec != UN_PREC_F32 && c->ex->prec != UN_PREC_F64)
        FAIL("%s: unknown precision %d", op, (int)c->ex->prec);
    if (!c->p && un_kern_param_names(c->op)[0])
        FAIL("%s: no parameters given", op);
    if (!c->in || !c->out || (backward && (!c->dout || !c->din)))
        FAIL("%s: a tensor array is NULL", op);
    if (c->op == UN_OP_SPLIT && (c->p[P_SIZES].len < 1 || c->p[P_SIZES].len > UN_MAX_DIMS))
        FAIL("%s: sizes has %d entries, expected 1..%d", op, c->p[P_SIZES].len, UN_MAX_DIMS);
    int lo, hi, nout;
    op_arity(c, &lo, &hi, &nout);
    if (c->n_in < lo || c->n_in > hi)
        FAIL("%s: %d inputs given, expected %d%s%d", op, c->n_in, lo, lo == hi ? "" : "..",
             lo == hi ? lo : hi);
    if (nout < 1 || nout > UN_MAX_OUTPUTS || c->n_out != nout)
        FAIL("%s: %d outputs given, expected %d", op, c->n_out, nout);
    un_status st;
    for (int i = 0; i < c->n_in; i++) {
        bool is_int =
            (c->op == UN_OP_EMBEDDING && i == 0) || (c->op == UN_OP_CROSS_ENTROPY && i == 1);
        if ((st = check_tensor(c, &c->in[i], "input", i, is_int ? UN_DT_INT : UN_DT_FLOAT, true)))
            return st;
    }
    un_kt want[UN_MAX_OUTPUTS];
    if ((st = check_shapes(c, want)))
        return st;
    for (int j = 0; j < c->n_out; j++) {
        /* the backward reads outputs only where it needs them (checked there) */
        if ((st = check_tensor(c, &c->out[j], "output", j, UN_DT_FLOAT, !backward)) ||
            (st = check_dims(c, &c->out[j], "output", j, &want[j])))
            return st;
    }
    if (!backward)
        return UN_OK;
    for (int j = 0; j < c->n_out; j++)
        if (c->dout[j].data &&
            ((st = check_tensor(c, &c->dout[j], "output gradient", j, UN_DT_FLOAT, true)) ||
             (st = check_dims(c, &c->dout[j], "output gradient", j, &want[j]))))
            return st;
    for (int i = 0; i < c->n_in; i++) {
        if (!c->din[i].data)
            continue;
        if (c->in[i].dtype == UN_DT_INT)
            FAIL("%s: input %d holds integers and has no gradient (pass a NULL buffer)", op, i);
        if ((st = check_tensor(c, &c->din[i], "input gradient", i, UN_DT_FLOAT, true)) ||
            (st = check_dims(c, &c->din[i], "input gradient", i, &c->in[i])))
            return st;
    }
    return UN_OK;
}

/* The backward of these reads the forward output. */
static bool needs_out(const kcall *c) {
    switch (c->op) {
    case UN_OP_SIGMOID:
    case UN_OP_TANH:
    case UN_OP_SOFTMAX:
        return true;
    case UN_OP_LINEAR:
        return par(c, P_LIN_ACT) != ACT_NONE && par(c, P_LIN_ACT) != ACT_GELU;
    case UN_OP_CONV2D:
        return par(c, P_CONV_ACT) != ACT_NONE && par(c, P_CONV_ACT) != ACT_GELU;
    default:
        return false;
    }
}

#undef FAIL

/* ---- entry points ---------------------------------------------------------------------------- */

un_status un_kern_forward(un_ctx *ctx, const un_kexec *ex, un_op op, const un_param *params,
                          const un_kt *in, int n_in, un_kt *out, int n_out) {
    kcall c = {.ctx = ctx,
               .ex = ex,
               .op = op,
               .p = params,
               .in = in,
               .n_in = n_in,
               .out = out,
               .n_out = n_out};
    un_status st = check_call(&c, false);
    if (st != UN_OK)
        return st;
    un_blas_init(); /* once per process: the kernel set runs before the first product */
    return ex->prec == UN_PREC_F32 ? forward_f32(&c) : forward_f64(&c);
}

un_status un_kern_backward(un_ctx *ctx, const un_kexec *ex, un_op op, const un_param *params,
                           const un_kt *in, int n_in, const un_kt *out, int n_out,
                           const un_kt *dout, un_kt *din) {
    kcall c = {.ctx = ctx,
               .ex = ex,
               .op = op,
               .p = params,
               .in = in,
               .n_in = n_in,
               .out = out,
               .n_out = n_out,
               .dout = dout,
               .din = din};
    un_status st = check_call(&c, true);
    if (st != UN_OK)
        return st;
    un_blas_init();
    bool any = false;
    for (int j = 0; j < n_out; j++)
        any |= dout[j].data != NULL;
    if (!any)
        return UN_OK; /* zero output gradient: nothing to add */
    if (needs_out(&c) && !out[0].data)
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "%s: the backward needs the forward output, output 0 has no data",
                            un_op_name(op));
    return ex->prec == UN_PREC_F32 ? backward_f32(&c) : backward_f64(&c);
}

un_status un_kern_linear_wgrad(un_ctx *ctx, const un_kexec *ex, const un_param *params, int n,
                               const un_kt *x, const un_kt *y, const un_kt *dy, int64_t r0,
                               int64_t r1, void *dw) {
    kcall c = {
        .ctx = ctx, .ex = ex, .op = UN_OP_LINEAR, .p = params, .in = x, .out = y, .dout = dy};
    if (!params || !ex || (ex->prec != UN_PREC_F32 && ex->prec != UN_PREC_F64))
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "linear weight gradient: no parameters or precision");
    int64_t act = par(&c, P_LIN_ACT);
    if (act < ACT_NONE || act >= ACT_COUNT || act == ACT_GELU)
        return un_ctx_error(ctx, UN_ERR_UNAVAILABLE,
                            "linear weight gradient by rows: activation %lld (its derivative is "
                            "in the stash of the rank that ran the piece)",
                            (long long)act);
    if (n == 0)
        return UN_OK;
    if (n < 0 || !x || !y || !dy || !dw)
        return un_ctx_error(ctx, UN_ERR_INVALID, "linear weight gradient: %d pieces, NULL arrays",
                            n);
    int64_t in = x[0].rank >= 2 ? x[0].dim[x[0].rank - 1] : -1;
    int64_t out = y[0].rank >= 2 ? y[0].dim[y[0].rank - 1] : -1;
    for (int k = 0; k < n; k++) {
        const un_kt *t[3] = {&x[k], &y[k], &dy[k]};
        int64_t rows = span(t[0], 0, t[0]->rank - 1);
        for (int i = 0; i < 3; i++)
            if (t[i]->dtype != UN_DT_FLOAT || t[i]->rank < 2 || !t[i]->data ||
                t[i]->dim[t[i]->rank - 1] != (i ? out : in) ||
                span(t[i], 0, t[i]->rank - 1) != rows || rows > INT_MAX)
                return un_ctx_error(ctx, UN_ERR_INVALID,
                                    "linear weight gradient: piece %d: %s is not [%lld, %lld]", k,
                                    i == 0   ? "the input"
                                    : i == 1 ? "the output"
                                             : "its gradient",
                                    (long long)rows, (long long)(i ? out : in));
    }
    if (r0 < 0 || r1 <= r0 || r1 > in || in > INT_MAX || out > INT_MAX)
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "linear weight gradient: rows [%lld, %lld) of a [%lld, %lld] weight",
                            (long long)r0, (long long)r1, (long long)in, (long long)out);
    un_blas_init();
    return ex->prec == UN_PREC_F32 ? linear_wgrad_f32(&c, n, r0, r1, dw)
                                   : linear_wgrad_f64(&c, n, r0, r1, dw);
}

size_t un_kern_scratch_bytes(un_prec prec, un_op op, const un_param *params, const un_kt *in,
                             int n_in, const un_kt *out, const bool *grads, int threads,
                             bool stash) {
    size_t es = prec == UN_PREC_F32 ? sizeof(float) : sizeof(double);
    kcall c = {.op = op, .p = params, .in = in, .n_in = n_in, .out = out, .n_out = 1};
    int64_t n = 0; /* values of the precision's type */
    switch (op) {
    case UN_OP_LINEAR: { /* backward: dy act'(pre) unless gelu' is in the stash (dpre_of) */
        int64_t act = par(&c, P_LIN_ACT);
        n = act == ACT_NONE || (act == ACT_GELU && stash) ? 0 : un_kt_numel(&out[0]);
        break;
    }
    case UN_OP_CONV2D: { /* backward: im2col of x, of dx when wanted, dy act'(pre) (conv_bwd) */
        if (n_in < 2 || in[1].rank != 4 || out[0].rank != 4)
            return 0;
        int64_t col = in[1].dim[1] * in[1].dim[2] * in[1].dim[3] * out[0].dim[2] * out[0].dim[3];
        n = (!grads || grads[0] ? 2 : 1) * col +
            (par(&c, P_CONV_ACT) == ACT_NONE ? 0 : un_kt_numel(&out[0]));
        break;
    }
    case UN_OP_LAYER_NORM: /* backward without the stash: each row's moments, in double */
        n = stash ? 0 : un_kt_numel(&in[0]);
        return n > 0 ? (size_t)(2 * (n / in[0].dim[in[0].rank - 1])) * sizeof(double) : 0;
    case UN_OP_MULTIHEAD_ATTENTION: { /* backward (mha_init): dO, dQ, dK, dV, the blocks, Wqkv */
        if (n_in < 7 || un_kt_numel(&in[0]) < 0 || un_kt_numel(&in[1]) < 0 ||
            un_kt_numel(&in[3]) < 0 || un_kt_numel(&in[6]) < 0)
            return 0;
        int64_t B = in[0].dim[0], S = in[0].dim[1], E = in[0].dim[2], Tn = in[1].dim[1];
        int64_t HL = in[3].dim[1], dh = HL / par(&c, P_HEADS);
        int64_t proj = (2 * S + 2 * Tn) * B * HL, r = mha_rows_f32(S, Tn, dh);
        bool self = in[0].data && in[1].data == in[0].data && in[2].data == in[0].data &&
                    same_dims(&in[1], &in[0]) && same_dims(&in[2], &in[0]);
        n = (stash ? 0 : proj) + proj + r * Tn * 2 * (threads < 1 ? 1 : threads) +
            (self ? 3 * E * HL : 0);
        break;
    }
    default:
        return 0;
    }
    return n > 0 ? (size_t)n * es : 0;
}

size_t un_kern_stash_bytes(un_prec prec, un_op op, const un_param *params, const un_kt *in,
                           int n_in, const un_kt *out) {
    size_t es = prec == UN_PREC_F32 ? sizeof(float) : sizeof(double);
    kcall c = {.op = op, .p = params, .in = in, .n_in = n_in, .out = out, .n_out = 1};
    int64_t n;
    switch (op) {
    case UN_OP_LINEAR: /* gelu'(pre) */
        n = par(&c, P_LIN_ACT) == ACT_GELU ? un_kt_numel(&out[0]) : 0;
        return n > 0 ? (size_t)n * es : 0;
    case UN_OP_LAYER_NORM: /* each row's mean and 1/std, in double */
        n = un_kt_numel(&in[0]);
        return n > 0 ? (size_t)(2 * (n / in[0].dim[in[0].rank - 1])) * sizeof(double) : 0;
    case UN_OP_MULTIHEAD_ATTENTION:
        if (n_in < 7 || un_kt_numel(&in[0]) < 0 || un_kt_numel(&in[1]) < 0 ||
            un_kt_numel(&in[3]) < 0 || un_kt_numel(&in[6]) < 0)
            return 0;
        return (size_t)mha_saved_values(in[0].dim[0], in[0].dim[1], in[1].dim[1], in[3].dim[1],
                                        par(&c, P_HEADS)) *
               es;
    default:
        return 0;
    }
}
