/* backend_cuda_kern.h - the CUDA kernels' launch geometry, index mapping and per-thread work,
 * written once in plain C for both sides: backend_cuda.cu compiles these functions as
 * __host__ __device__ and its kernels are thin loops around them; tests/test_cuda_index.c runs
 * the same functions on the CPU by walking every (block, thread) of each launch in order and
 * compares the results with the CPU kernels (kernels.h), so the logic is tested without a GPU.
 * float32 data (the CUDA backend's precision); reductions of a row run in one block: a strided
 * per-thread partial, then a shared-memory tree (un_cu_tree_level). No CUDA type appears here.
 *
 *   un_cu_geom g = un_cu_geom_1d(n);                 // <<<g.grid, g.block>>>
 *   for (int64_t i = un_cu_first(g, blockIdx.x, threadIdx.x); i < n; i += un_cu_stride(g))
 *       un_cu_ew_fwd(&a, i);
 */
#ifndef UN_BACKEND_CUDA_KERN_H
#define UN_BACKEND_CUDA_KERN_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define UN_CU_FN static __host__ __device__ __forceinline__
#else
#define UN_CU_FN static inline
#endif

#define UN_CU_MAX_DIMS  6    /* = UN_MAX_DIMS (pcg/shape.h; the host test checks it) */
#define UN_CU_BLOCK     256  /* threads of an element-wise block */
#define UN_CU_MAX_GRID  4096 /* blocks of a grid-stride launch */
#define UN_CU_ROW_BLOCK 256  /* the most threads of a row (one block per row) launch */

/* ---- launch geometry ------------------------------------------------------------------------- */

typedef struct un_cu_geom {
    int grid, block; /* blocks, threads per block */
} un_cu_geom;

/* A grid-stride launch over n items (n >= 0; n == 0 gives grid 0: launch nothing). */
UN_CU_FN un_cu_geom un_cu_geom_1d(int64_t n) {
    un_cu_geom g = {0, UN_CU_BLOCK};
    int64_t blocks = (n + UN_CU_BLOCK - 1) / UN_CU_BLOCK;
    g.grid = (int)(blocks < UN_CU_MAX_GRID ? blocks : UN_CU_MAX_GRID);
    return g;
}

/* One block per row (grid-stride over rows), threads a power of two in [32, UN_CU_ROW_BLOCK],
 * the smallest that covers len when it can. */
UN_CU_FN un_cu_geom un_cu_geom_rows(int64_t rows, int64_t len) {
    un_cu_geom g = {(int)(rows < UN_CU_MAX_GRID ? rows : UN_CU_MAX_GRID), 32};
    while (g.block < UN_CU_ROW_BLOCK && g.block < len)
        g.block *= 2;
    return g;
}

/* The first item of thread tid of block bid, and the stride between a thread's items. */
UN_CU_FN int64_t un_cu_first(un_cu_geom g, int bid, int tid) {
    return (int64_t)bid * g.block + tid;
}
UN_CU_FN int64_t un_cu_stride(un_cu_geom g) { return (int64_t)g.grid * g.block; }

/* ---- block reductions ------------------------------------------------------------------------ */

typedef enum { UN_CU_RED_SUM, UN_CU_RED_MAX } un_cu_red;

/* One level of the tree over sh[0, 2 s): thread tid < s folds sh[tid + s] into sh[tid]. The
 * levels run s = nthreads / 2, ..., 1 with a barrier after each; sh[0] holds the result. */
UN_CU_FN void un_cu_tree_level(float *sh, int tid, int s, un_cu_red r) {
    if (tid < s)
        sh[tid] = r == UN_CU_RED_MAX ? fmaxf(sh[tid], sh[tid + s]) : sh[tid] + sh[tid + s];
}

/* A row of len values stride apart starting at base: row r of a tensor reduced along a dim of
 * length len with inner elements after it. */
UN_CU_FN int64_t un_cu_row_base(int64_t r, int64_t len, int64_t inner) {
    return (r / inner) * len * inner + r % inner;
}

/* ---- hashing (dropout masks; = un_mix64 and un_hash_combine of pcg/un.h) ----------------------
 */

UN_CU_FN uint64_t un_cu_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
UN_CU_FN uint64_t un_cu_hash_combine(uint64_t h, uint64_t v) {
    return un_cu_mix64(h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)));
}

/* ---- activations (the order of linear's activation parameter) -------------------------------- */

enum { UN_CU_ACT_NONE, UN_CU_ACT_RELU, UN_CU_ACT_SIGMOID, UN_CU_ACT_TANH, UN_CU_ACT_GELU };

UN_CU_FN float un_cu_act(int act, float x) {
    switch (act) {
    case UN_CU_ACT_RELU:
        return x > 0 || isnan(x) ? x : 0.0f;
    case UN_CU_ACT_SIGMOID:
        return 1.0f / (1.0f + expf(-x));
    case UN_CU_ACT_TANH:
        return tanhf(x);
    case UN_CU_ACT_GELU:
        return 0.5f * x * (1.0f + erff(x / sqrtf(2.0f)));
    default:
        return x;
    }
}

/* d act / d pre at pre-activation x with output y (gelu reads x, the others y). */
UN_CU_FN float un_cu_act_grad(int act, float x, float y) {
    switch (act) {
    case UN_CU_ACT_RELU:
        return y > 0 ? 1.0f : 0.0f;
    case UN_CU_ACT_SIGMOID:
        return y * (1.0f - y);
    case UN_CU_ACT_TANH:
        return 1.0f - y * y;
    case UN_CU_ACT_GELU:
        return 0.5f * (1.0f + erff(x / sqrtf(2.0f))) +
               x * expf(-0.5f * x * x) * 0.39894228040143267794f;
    default:
        return 1.0f;
    }
}

/* ---- element-wise ops ------------------------------------------------------------------------ */

typedef enum {
    UN_CU_EW_COPY, /* identity, reshape, flat, dropout outside training */
    UN_CU_EW_ADD,
    UN_CU_EW_SUB,
    UN_CU_EW_MUL,
    UN_CU_EW_SCALE, /* scalar_mul */
    UN_CU_EW_RELU,
    UN_CU_EW_SIGMOID,
    UN_CU_EW_TANH,
    UN_CU_EW_GELU,
    UN_CU_EW_DROPOUT
} un_cu_ew;

/* Dropout's mask (kernels.h): element e of a piece is dropped when
 * mix64(hash_combine(seed, g)) % 100 < rate, g its row-major index in the whole tensor. */
typedef struct un_cu_drop {
    uint64_t seed;
    int64_t rate;
    float scale; /* 100 / (100 - rate) */
    int rank;
    bool global; /* off/full given: g is the index in the whole tensor */
    int64_t dim[UN_CU_MAX_DIMS], off[UN_CU_MAX_DIMS], full[UN_CU_MAX_DIMS];
} un_cu_drop;

UN_CU_FN bool un_cu_drop_keep(const un_cu_drop *d, int64_t e) {
    uint64_t g = (uint64_t)e;
    if (d->global) {
        g = 0;
        uint64_t s = 1;
        for (int i = d->rank - 1; i >= 0; i--) {
            int64_t idx = e % d->dim[i];
            e /= d->dim[i];
            g += (uint64_t)(d->off[i] + idx) * s;
            s *= (uint64_t)d->full[i];
        }
    }
    return (int64_t)(un_cu_mix64(un_cu_hash_combine(d->seed, g)) % 100) >= d->rate;
}

typedef struct un_cu_ew_args {
    un_cu_ew kind;
    int64_t n;
    const float *x, *y; /* inputs (y: second input of add/sub/mul) */
    const float *out;   /* backward: the forward output (sigmoid, tanh) */
    const float *dz;    /* backward: output gradient */
    float *z;           /* forward: output */
    float *dx, *dy;     /* backward: accumulated input gradients (NULL = not wanted) */
    float f;            /* scalar_mul's factor */
    un_cu_drop drop;
} un_cu_ew_args;

/* z[i] of an element-wise forward. */
UN_CU_FN void un_cu_ew_fwd(const un_cu_ew_args *a, int64_t i) {
    float x = a->x[i];
    switch (a->kind) {
    case UN_CU_EW_ADD:
        a->z[i] = x + a->y[i];
        break;
    case UN_CU_EW_SUB:
        a->z[i] = x - a->y[i];
        break;
    case UN_CU_EW_MUL:
        a->z[i] = x * a->y[i];
        break;
    case UN_CU_EW_SCALE:
        a->z[i] = x * a->f;
        break;
    case UN_CU_EW_RELU:
        a->z[i] = un_cu_act(UN_CU_ACT_RELU, x);
        break;
    case UN_CU_EW_SIGMOID:
        a->z[i] = un_cu_act(UN_CU_ACT_SIGMOID, x);
        break;
    case UN_CU_EW_TANH:
        a->z[i] = un_cu_act(UN_CU_ACT_TANH, x);
        break;
    case UN_CU_EW_GELU:
        a->z[i] = un_cu_act(UN_CU_ACT_GELU, x);
        break;
    case UN_CU_EW_DROPOUT:
        a->z[i] = x * (un_cu_drop_keep(&a->drop, i) ? a->drop.scale : 0.0f);
        break;
    default:
        a->z[i] = x;
        break;
    }
}

/* dx[i] (and dy[i]) += of an element-wise backward. */
UN_CU_FN void un_cu_ew_bwd(const un_cu_ew_args *a, int64_t i) {
    float g = a->dz[i];
    switch (a->kind) {
    case UN_CU_EW_ADD:
    case UN_CU_EW_SUB:
        if (a->dx)
            a->dx[i] += g;
        if (a->dy)
            a->dy[i] += a->kind == UN_CU_EW_ADD ? g : -g;
        break;
    case UN_CU_EW_MUL:
        if (a->dx)
            a->dx[i] += g * a->y[i];
        if (a->dy)
            a->dy[i] += g * a->x[i];
        break;
    case UN_CU_EW_SCALE:
        a->dx[i] += g * a->f;
        break;
    case UN_CU_EW_RELU:
        a->dx[i] += a->x[i] > 0 ? g : 0.0f;
        break;
    case UN_CU_EW_GELU:
        a->dx[i] += g * un_cu_act_grad(UN_CU_ACT_GELU, a->x[i], 0);
        break;
    case UN_CU_EW_SIGMOID:
        a->dx[i] += g * a->out[i] * (1.0f - a->out[i]);
        break;
    case UN_CU_EW_TANH:
        a->dx[i] += g * (1.0f - a->out[i] * a->out[i]);
        break;
    case UN_CU_EW_DROPOUT:
        if (un_cu_drop_keep(&a->drop, i))
            a->dx[i] += g * a->drop.scale;
        break;
    default:
        a->dx[i] += g;
        break;
    }
}

/* ---- linear's epilogues (after the cuBLAS product) --------------------------------------------
 */

/* y[i] = act(y[i] + bias[i % cols]) over rows x cols (bias may be NULL). */
UN_CU_FN void un_cu_bias_act(float *y, const float *bias, int64_t cols, int act, int64_t i) {
    float v = y[i] + (bias ? bias[i % cols] : 0.0f);
    y[i] = un_cu_act(act, v);
}

/* dpre[i] = dy[i] * act'(pre[i], out[i]) (pre: gelu only, may be NULL otherwise). */
UN_CU_FN void un_cu_act_back(float *dpre, const float *dy, const float *pre, const float *out,
                             int act, int64_t i) {
    dpre[i] = dy[i] * un_cu_act_grad(act, pre ? pre[i] : 0.0f, out ? out[i] : 0.0f);
}

/* ---- column sums: a rows x cols matrix reduced over its rows -----------------------------------
 * A block takes UN_CU_COL_TILE adjacent columns (one 32-byte sector of floats) with
 * UN_CU_COL_LANES threads per column: thread t is (lane t / TILE, column t % TILE); a lane sums
 * rows lane, lane + LANES, ...; the lanes of a column are then added by a fixed tree in shared
 * memory (un_cu_lane_level), so the result is deterministic. Grid-stride over column tiles. One
 * thread per column (the earlier form) ran 1024 threads down 8192 rows: milliseconds per
 * layer_norm backward on an H200. */
#define UN_CU_COL_TILE  8
#define UN_CU_COL_LANES 128

UN_CU_FN un_cu_geom un_cu_geom_cols(int64_t cols) {
    un_cu_geom g = {0, UN_CU_COL_TILE * UN_CU_COL_LANES};
    int64_t tiles = (cols + UN_CU_COL_TILE - 1) / UN_CU_COL_TILE;
    g.grid = (int)(tiles < UN_CU_MAX_GRID ? tiles : UN_CU_MAX_GRID);
    return g;
}

/* One level of the lanes' tree: sh[lane][col] += sh[lane + s][col] for lane < s. */
UN_CU_FN void un_cu_lane_level(float *sh, int lane, int col, int s) {
    if (lane < s)
        sh[lane * UN_CU_COL_TILE + col] += sh[(lane + s) * UN_CU_COL_TILE + col];
}

/* Lane `lane`'s share of column c of d [rows, cols]. */
UN_CU_FN float un_cu_col_psum(const float *d, int64_t rows, int64_t cols, int64_t c, int lane) {
    float s = 0;
    for (int64_t r = lane; r < rows; r += UN_CU_COL_LANES)
        s += d[r * cols + c];
    return s;
}

/* ---- block copies (parallel ops, concat, split, transpose) ------------------------------------
 */

/* Element e of a box of len[] (row-major) maps to src and dst offsets given the strides (in
 * elements) of both pieces and the box's corner in each. */
typedef struct un_cu_box {
    int rank;
    int64_t n; /* elements in the box */
    int64_t len[UN_CU_MAX_DIMS];
    int64_t src_stride[UN_CU_MAX_DIMS], dst_stride[UN_CU_MAX_DIMS];
    int64_t src_base, dst_base; /* offset of the corner */
} un_cu_box;

UN_CU_FN void un_cu_box_map(const un_cu_box *b, int64_t e, int64_t *src, int64_t *dst) {
    int64_t s = b->src_base, d = b->dst_base;
    for (int i = b->rank - 1; i >= 0; i--) {
        int64_t k = e % b->len[i];
        e /= b->len[i];
        s += k * b->src_stride[i];
        d += k * b->dst_stride[i];
    }
    *src = s;
    *dst = d;
}

/* The box of a region copy (backend.h un_region's fields: dims and offsets of both pieces and
 * the lengths), for dense row-major pieces. */
UN_CU_FN un_cu_box un_cu_box_region(int rank, const int64_t *src_dim, const int64_t *src_off,
                                    const int64_t *dst_dim, const int64_t *dst_off,
                                    const int64_t *len) {
    un_cu_box b;
    b.rank = rank;
    b.n = 1;
    b.src_base = b.dst_base = 0;
    int64_t ss = 1, ds = 1;
    for (int i = rank - 1; i >= 0; i--) {
        b.len[i] = len[i];
        b.n *= len[i];
        b.src_stride[i] = ss;
        b.dst_stride[i] = ds;
        b.src_base += src_off[i] * ss;
        b.dst_base += dst_off[i] * ds;
        ss *= src_dim[i];
        ds *= dst_dim[i];
    }
    return b;
}

/* Transpose of dims d0 and d1 of x (dims dim[rank]) as a box over x: source x contiguous,
 * destination strides of y at the swapped dims. */
UN_CU_FN un_cu_box un_cu_box_transpose(int rank, const int64_t *dim, int d0, int d1) {
    int64_t ydim[UN_CU_MAX_DIMS], ystride[UN_CU_MAX_DIMS], zero[UN_CU_MAX_DIMS];
    for (int i = 0; i < rank; i++) {
        ydim[i] = dim[i == d0 ? d1 : i == d1 ? d0 : i];
        zero[i] = 0;
    }
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        ystride[i] = s;
        s *= ydim[i];
    }
    un_cu_box b = un_cu_box_region(rank, dim, zero, dim, zero, dim);
    for (int i = 0; i < rank; i++)
        b.dst_stride[i] = ystride[i == d0 ? d1 : i == d1 ? d0 : i];
    return b;
}

/* ---- softmax (rows along a dim) ---------------------------------------------------------------
 */

typedef struct un_cu_rows {
    int64_t rows, len, inner; /* rows = outer * inner */
    int64_t causal;           /* softmax, > 0: row r sees its first r % causal + 1 values only
                                 (attention's causal mask over [.., S, T] scores with S = causal);
                                 the others get probability 0 */
} un_cu_rows;

/* The values row r of a softmax sees. */
UN_CU_FN int64_t un_cu_row_seen(const un_cu_rows *g, int64_t r) {
    return g->causal > 0 ? r % g->causal + 1 : g->len;
}

/* Thread tid's partial over row r: the max of x (phase 0), then sum of y = exp(x - mx) written
 * to y (phase 1); finally y *= inv, 0 past what the row sees (un_cu_softmax_scale). */
UN_CU_FN float un_cu_softmax_pmax(const un_cu_rows *g, const float *x, int64_t r, int tid, int nt) {
    int64_t base = un_cu_row_base(r, g->len, g->inner);
    float m = -INFINITY;
    for (int64_t j = tid; j < un_cu_row_seen(g, r); j += nt)
        m = fmaxf(m, x[base + j * g->inner]);
    return m;
}
UN_CU_FN float un_cu_softmax_pexp(const un_cu_rows *g, const float *x, float *y, float mx,
                                  int64_t r, int tid, int nt) {
    int64_t base = un_cu_row_base(r, g->len, g->inner);
    float s = 0;
    for (int64_t j = tid; j < un_cu_row_seen(g, r); j += nt) {
        float ev = expf(x[base + j * g->inner] - mx);
        y[base + j * g->inner] = ev;
        s += ev;
    }
    return s;
}
UN_CU_FN void un_cu_softmax_scale(const un_cu_rows *g, float *y, float inv, int64_t r, int tid,
                                  int nt) {
    int64_t base = un_cu_row_base(r, g->len, g->inner);
    int64_t seen = un_cu_row_seen(g, r);
    for (int64_t j = tid; j < g->len; j += nt)
        y[base + j * g->inner] = j < seen ? y[base + j * g->inner] * inv : 0.0f;
}
/* Backward: partial of sum dy y, then dx += y (dy - s). */
UN_CU_FN float un_cu_softmax_pdot(const un_cu_rows *g, const float *y, const float *dy, int64_t r,
                                  int tid, int nt) {
    int64_t base = un_cu_row_base(r, g->len, g->inner);
    float s = 0;
    for (int64_t j = tid; j < un_cu_row_seen(g, r); j += nt)
        s += dy[base + j * g->inner] * y[base + j * g->inner];
    return s;
}
UN_CU_FN void un_cu_softmax_dx(const un_cu_rows *g, const float *y, const float *dy, float *dx,
                               float s, int64_t r, int tid, int nt) {
    int64_t base = un_cu_row_base(r, g->len, g->inner);
    for (int64_t j = tid; j < un_cu_row_seen(g, r); j += nt) {
        int64_t at = base + j * g->inner;
        dx[at] += y[at] * (dy[at] - s);
    }
}

/* ---- reduce_sum / reduce_mean along a dim -----------------------------------------------------
 */

/* Output element u = (o, i): y[u] = f * sum_l x[(o len + l) inner + i]. */
UN_CU_FN void un_cu_reduce_fwd(const un_cu_rows *g, const float *x, float *y, float f, int64_t u) {
    int64_t o = u / g->inner, i = u % g->inner;
    float s = 0;
    for (int64_t l = 0; l < g->len; l++)
        s += x[(o * g->len + l) * g->inner + i];
    y[u] = s * f;
}
/* Input element e: dx[e] += f dy[(o, i)]. */
UN_CU_FN void un_cu_reduce_bwd(const un_cu_rows *g, const float *dy, float *dx, float f,
                               int64_t e) {
    int64_t o = e / (g->len * g->inner), i = e % g->inner;
    dx[e] += f * dy[o * g->inner + i];
}

/* ---- layer_norm over the last dim (rows of n) -------------------------------------------------
 */

/* Partial sums of row r for the mean (phase 0), then of squared deviations (phase 1). */
UN_CU_FN float un_cu_ln_psum(const float *x, int64_t n, int64_t r, int tid, int nt) {
    float s = 0;
    for (int64_t j = tid; j < n; j += nt)
        s += x[r * n + j];
    return s;
}
UN_CU_FN float un_cu_ln_pvar(const float *x, int64_t n, float mean, int64_t r, int tid, int nt) {
    float s = 0;
    for (int64_t j = tid; j < n; j += nt) {
        float t = x[r * n + j] - mean;
        s += t * t;
    }
    return s;
}
/* 1 / sqrt(var + 1e-5) from the summed squared deviations. */
UN_CU_FN float un_cu_ln_rs(float sumsq, int64_t n) {
    return 1.0f / sqrtf(sumsq / (float)n + 1e-5f);
}
UN_CU_FN void un_cu_ln_out(const float *x, const float *gamma, const float *beta, float *y,
                           int64_t n, float mean, float rs, int64_t r, int tid, int nt) {
    for (int64_t j = tid; j < n; j += nt)
        y[r * n + j] = (x[r * n + j] - mean) * rs * gamma[j] + beta[j];
}
/* Backward of row r: partials of sum dxh and sum dxh xh (dxh = dy gamma, xh normalised)... */
UN_CU_FN void un_cu_ln_pback(const float *x, const float *dy, const float *gamma, int64_t n,
                             float mean, float rs, int64_t r, int tid, int nt, float *s1,
                             float *s2) {
    float a = 0, b = 0;
    for (int64_t j = tid; j < n; j += nt) {
        float dxh = dy[r * n + j] * gamma[j];
        a += dxh;
        b += dxh * (x[r * n + j] - mean) * rs;
    }
    *s1 = a;
    *s2 = b;
}
/* ...then dx += rs (dxh - s1 / n - xh s2 / n). */
UN_CU_FN void un_cu_ln_dx(const float *x, const float *dy, const float *gamma, float *dx, int64_t n,
                          float mean, float rs, float s1, float s2, int64_t r, int tid, int nt) {
    float m1 = s1 / (float)n, m2 = s2 / (float)n;
    for (int64_t j = tid; j < n; j += nt) {
        int64_t at = r * n + j;
        dx[at] += rs * (dy[at] * gamma[j] - m1 - (x[at] - mean) * rs * m2);
    }
}
/* Column k of dgamma/dbeta (either may be NULL) over every row, from the rows' stats
 * (stats[2 r] = mean, stats[2 r + 1] = rs). */
/* Lane `lane`'s share of layer_norm's weight gradients at column k: *a of dgamma (dy times the
 * normalised x), *b of dbeta (dy); summed over the lanes as the column sums are. */
UN_CU_FN void un_cu_ln_pdw(const float *x, const float *dy, const float *stats, int64_t rows,
                           int64_t n, int64_t k, int lane, float *a, float *b) {
    float sa = 0, sb = 0;
    for (int64_t r = lane; r < rows; r += UN_CU_COL_LANES) {
        float g = dy[r * n + k];
        sa += g * (x[r * n + k] - stats[2 * r]) * stats[2 * r + 1];
        sb += g;
    }
    *a = sa, *b = sb;
}

/* ---- embedding (bags of indices) --------------------------------------------------------------
 */

/* Output element u = (bag b, column k): y[u] = sum_j table[id[b, j], k] (times f = 1/bag for
 * mean). */
UN_CU_FN void un_cu_emb_fwd(const int64_t *id, const float *tab, float *y, int64_t bag,
                            int64_t cols, float f, int64_t u) {
    int64_t b = u / cols, k = u % cols;
    float s = 0;
    for (int64_t j = 0; j < bag; j++)
        s += tab[id[b * bag + j] * cols + k];
    y[u] = s * f;
}
/* Backward item u = ((b, j), k): dtable[id[b, j], k] += f dy[b, k]; returns the target offset
 * (the kernel adds atomically: two bags may hit one row). */
UN_CU_FN int64_t un_cu_emb_bwd_at(const int64_t *id, int64_t cols, int64_t u) {
    return id[u / cols] * cols + u % cols;
}
UN_CU_FN int64_t un_cu_emb_bwd_src(int64_t bag, int64_t cols, int64_t u) {
    return (u / cols / bag) * cols + u % cols;
}

/* ---- cross-entropy (rows of logits, int64 labels) -------------------------------------------- */

/* Thread partial of sum exp(x - mx) over row r of c logits. */
UN_CU_FN float un_cu_ce_psum(const float *x, int64_t c, float mx, int64_t r, int tid, int nt) {
    float s = 0;
    for (int64_t j = tid; j < c; j += nt)
        s += expf(x[r * c + j] - mx);
    return s;
}
UN_CU_FN float un_cu_ce_pmax(const float *x, int64_t c, int64_t r, int tid, int nt) {
    float m = -INFINITY;
    for (int64_t j = tid; j < c; j += nt)
        m = fmaxf(m, x[r * c + j]);
    return m;
}
/* Gradient of row r: dx[r, j] (+= when accumulate, else =) g (exp(x - lse) - [j == label]). */
UN_CU_FN void un_cu_ce_grad(const float *x, float *dx, int64_t c, float lse, int64_t label, float g,
                            bool accumulate, int64_t r, int tid, int nt) {
    for (int64_t j = tid; j < c; j += nt) {
        float v = g * (expf(x[r * c + j] - lse) - (j == label ? 1.0f : 0.0f));
        dx[r * c + j] = accumulate ? dx[r * c + j] + v : v;
    }
}

/* ---- MSE loss (train.h: sum of squared errors, gradient 2 (y - t) / numel) --------------------
 */

/* Element e of a piece against the whole label: the label's index of e, given the piece's dims
 * and offset in the whole tensor's dims. */
UN_CU_FN int64_t un_cu_piece_global(int rank, const int64_t *pdim, const int64_t *off,
                                    const int64_t *full, int64_t e) {
    int64_t g = 0, s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        g += (off[i] + e % pdim[i]) * s;
        e /= pdim[i];
        s *= full[i];
    }
    return g;
}
/* grad[e] = 2 d / numel; returns d^2 (the kernel sums it in a block tree). */
UN_CU_FN float un_cu_mse_elem(const float *y, const float *t, float *grad, int64_t g, float numel,
                              int64_t e) {
    float d = y[e] - t[g];
    grad[e] = 2.0f * d / numel;
    return d * d;
}

/* ---- optimizer steps (optim.h; computed in double, stored in float, as the CPU does) --------- */

typedef struct un_cu_opt {
    bool adam;
    double lr, momentum, beta1, beta2;
    double step, eps_hat; /* Adam: lr sqrt(1 - b2^t) / (1 - b1^t), eps sqrt(1 - b2^t) */
} un_cu_opt;

UN_CU_FN un_cu_opt un_cu_opt_sgd(double lr, double momentum) {
    un_cu_opt o = {false, lr, momentum, 0, 0, 0, 0};
    return o;
}
/* Adam at update t (1-based). */
UN_CU_FN un_cu_opt un_cu_opt_adam(double lr, double beta1, double beta2, double eps, int64_t t) {
    double c1 = 1.0 - pow(beta1, (double)t), c2 = 1.0 - pow(beta2, (double)t);
    un_cu_opt o = {true, lr, 0, beta1, beta2, lr * sqrt(c2) / c1, eps * sqrt(c2)};
    return o;
}

/* Parameter i: SGD v = mu v + g, w -= lr v; Adam m, v moments and the bias-corrected step. */
UN_CU_FN void un_cu_opt_elem(const un_cu_opt *o, float *w, const float *g, float *m, float *v,
                             int64_t i) {
    double gi = g[i];
    if (!o->adam) {
        m[i] = (float)(o->momentum * m[i] + gi);
        w[i] = (float)(w[i] - o->lr * m[i]);
        return;
    }
    m[i] = (float)(o->beta1 * m[i] + (1 - o->beta1) * gi);
    v[i] = (float)(o->beta2 * v[i] + (1 - o->beta2) * gi * gi);
    w[i] = (float)(w[i] - o->step * m[i] / (sqrt((double)v[i]) + o->eps_hat));
}

/* ---- conv2d (im2col of a chunk of images, GEMMs batched over groups), pool2d, batch_norm ----- */

/* p += v: atomically on the device (several threads may add into one element), plainly on the
 * host (the simulation runs one thread at a time). */
UN_CU_FN void un_cu_add(float *p, float v) {
#ifdef __CUDA_ARCH__
    atomicAdd(p, v);
#else
    *p += v;
#endif
}

typedef struct un_cu_conv {
    int64_t N, C, H, W, O, cpg, KH, KW, OH, OW, sh, sw, ph, pw, groups, opg, K, OHW;
} un_cu_conv;

/* x [N, C, H, W], w [O, C / groups, KH, KW]. */
UN_CU_FN un_cu_conv un_cu_conv_of(const int64_t *xd, const int64_t *wd, int64_t sh, int64_t sw,
                                  int64_t ph, int64_t pw, int64_t groups) {
    un_cu_conv g;
    g.N = xd[0], g.C = xd[1], g.H = xd[2], g.W = xd[3];
    g.O = wd[0], g.cpg = wd[1], g.KH = wd[2], g.KW = wd[3];
    g.sh = sh, g.sw = sw, g.ph = ph, g.pw = pw, g.groups = groups;
    g.OH = (g.H + 2 * ph - g.KH) / sh + 1;
    g.OW = (g.W + 2 * pw - g.KW) / sw + 1;
    g.opg = g.O / groups;
    g.K = g.cpg * g.KH * g.KW;
    g.OHW = g.OH * g.OW;
    return g;
}

/* Floats of im2col scratch per chunk at most (256 MiB; the backward also holds its gradient): the
 * backend's chunks, and the cost model's (search/cost.c). */
#define UN_CU_CONV_COL_MAX ((int64_t)64 << 20)

/* The images of one chunk of the batch: at most max_col floats of col (C KH KW rows of OHW per
 * image), at least one image. */
UN_CU_FN int64_t un_cu_conv_chunk(const un_cu_conv *g, int64_t max_col) {
    int64_t per = g->C * g->KH * g->KW * g->OHW, nc = per > 0 ? max_col / per : g->N;
    return nc < 1 ? 1 : nc < g->N ? nc : g->N;
}

/* Floats of device scratch conv2d takes on the backend (runtime/backend_cuda.c conv_fwd and
 * conv_bwd; the cost model's memory estimate reads the same): a chunk of nc images' col and Y in
 * the forward; col, dcol and Y of a chunk and the whole dY' and pre-activation in the backward. */
UN_CU_FN int64_t un_cu_conv_col(const un_cu_conv *g, int64_t nc) {
    return g->C * g->KH * g->KW * nc * g->OHW;
}
UN_CU_FN int64_t un_cu_conv_y(const un_cu_conv *g, int64_t nc) { return g->O * nc * g->OHW; }
UN_CU_FN int64_t un_cu_conv_scratch(const un_cu_conv *g, int64_t nc, bool bwd) {
    int64_t col = un_cu_conv_col(g, nc), y = un_cu_conv_y(g, nc);
    return bwd ? 2 * col + y + 2 * g->N * g->O * g->OHW : col + y;
}

/* The chunk of (at most) nc images from image n0: the same convolution over its images. */
UN_CU_FN un_cu_conv un_cu_conv_at(const un_cu_conv *g, int64_t n0, int64_t nc) {
    un_cu_conv c = *g;
    c.N = nc < g->N - n0 ? nc : g->N - n0;
    return c;
}

/* The copy between a chunk's Y [O][N][OHW] (channel-major, the GEMMs' layout) and y [N][O][OHW]:
 * to_y Y -> y, else y -> Y. */
UN_CU_FN un_cu_box un_cu_conv_perm(const un_cu_conv *g, bool to_y) {
    int64_t d[3] = {to_y ? g->O : g->N, to_y ? g->N : g->O, g->OHW};
    return un_cu_box_transpose(3, d, 0, 1);
}

/* Element e of col [groups][K][N OHW] (= [C KH KW][N OHW]) from the N images at x (g->N: the
 * images of the chunk): col[(c KH + p) KW + q][n OHW + i OW + j] = x[n, c, i sh - ph + p,
 * j sw - pw + q] (0 outside), c the channel (group c / cpg). */
UN_CU_FN void un_cu_im2col(const un_cu_conv *g, const float *x, float *col, int64_t e) {
    int64_t L = g->N * g->OHW, rw = e / L, l = e % L, n = l / g->OHW, sp = l % g->OHW;
    int64_t c = rw / (g->KH * g->KW), p = rw / g->KW % g->KH, q = rw % g->KW;
    int64_t ih = sp / g->OW * g->sh - g->ph + p, iw = sp % g->OW * g->sw - g->pw + q;
    col[e] = ih < 0 || ih >= g->H || iw < 0 || iw >= g->W
                 ? 0.0f
                 : x[((n * g->C + c) * g->H + ih) * g->W + iw];
}

/* The adjoint, gathered: element e = (n, c, h, w) of dx (the chunk's N images) += every col entry
 * im2col read it from (deterministic: one thread per dx element). */
UN_CU_FN void un_cu_col2im(const un_cu_conv *g, const float *col, float *dx, int64_t e) {
    int64_t L = g->N * g->OHW, n = e / (g->C * g->H * g->W), c = e / (g->H * g->W) % g->C;
    int64_t h = e / g->W % g->H, w = e % g->W;
    const float *cc = col + c * g->KH * g->KW * L + n * g->OHW;
    float s = 0;
    for (int64_t p = 0; p < g->KH; p++) {
        int64_t t = h + g->ph - p;
        if (t < 0 || t % g->sh || t / g->sh >= g->OH)
            continue;
        for (int64_t q = 0; q < g->KW; q++) {
            int64_t u = w + g->pw - q;
            if (u < 0 || u % g->sw || u / g->sw >= g->OW)
                continue;
            s += cc[(p * g->KW + q) * L + t / g->sh * g->OW + u / g->sw];
        }
    }
    dx[e] += s;
}

/* y[i] = act(y[i] + bias[channel]) over [N, O, hw] (bias may be NULL). */
UN_CU_FN void un_cu_chan_bias_act(float *y, const float *bias, int64_t O, int64_t hw, int act,
                                  int64_t i) {
    y[i] = un_cu_act(act, y[i] + (bias ? bias[i / hw % O] : 0.0f));
}

/* Thread tid of nt's share of channel o's sum of d [N, O, hw] over images and positions (one
 * block per channel, then the block's tree: db[o] += the total). */
UN_CU_FN float un_cu_chan_psum(const float *d, int64_t N, int64_t O, int64_t hw, int64_t o, int tid,
                               int nt) {
    float s = 0;
    for (int64_t i = tid; i < N * hw; i += nt)
        s += d[(i / hw * O + o) * hw + i % hw];
    return s;
}

typedef struct un_cu_pool {
    int64_t planes, H, W, kh, kw, sh, sw, ph, pw, OH, OW;
    bool avg;
} un_cu_pool;

/* Output element e = (plane, i, j): the window's clipped bounds and, for max, the first largest
 * value (a NaN wins); returns the value (avg: the window sum / kh kw) and its argmax in *arg. */
UN_CU_FN float un_cu_pool_win(const un_cu_pool *g, const float *x, int64_t e, int64_t *arg) {
    int64_t pl = e / (g->OH * g->OW), i = e / g->OW % g->OH, j = e % g->OW;
    int64_t h0 = i * g->sh - g->ph, w0 = j * g->sw - g->pw;
    int64_t h1 = h0 + g->kh < g->H ? h0 + g->kh : g->H, w1 = w0 + g->kw < g->W ? w0 + g->kw : g->W;
    h0 = h0 < 0 ? 0 : h0;
    w0 = w0 < 0 ? 0 : w0;
    const float *xp = x + pl * g->H * g->W;
    float v = g->avg ? 0.0f : -INFINITY;
    *arg = pl * g->H * g->W + h0 * g->W + w0;
    for (int64_t p = h0; p < h1; p++)
        for (int64_t q = w0; q < w1; q++) {
            float t = xp[p * g->W + q];
            if (g->avg) {
                v += t;
            } else if (t > v || isnan(t)) {
                v = t;
                *arg = pl * g->H * g->W + p * g->W + q;
            }
        }
    return g->avg ? v * (float)(1.0 / (double)(g->kh * g->kw)) : v;
}

UN_CU_FN void un_cu_pool_fwd(const un_cu_pool *g, const float *x, float *y, int64_t e) {
    int64_t arg;
    y[e] = un_cu_pool_win(g, x, e, &arg);
}

/* Output element e's gradient into dx: to the argmax (max) or over the window (avg). */
UN_CU_FN void un_cu_pool_bwd(const un_cu_pool *g, const float *x, const float *dy, float *dx,
                             int64_t e) {
    int64_t arg;
    if (!g->avg) {
        un_cu_pool_win(g, x, e, &arg);
        un_cu_add(&dx[arg], dy[e]);
        return;
    }
    int64_t pl = e / (g->OH * g->OW), i = e / g->OW % g->OH, j = e % g->OW;
    int64_t h0 = i * g->sh - g->ph, w0 = j * g->sw - g->pw;
    int64_t h1 = h0 + g->kh < g->H ? h0 + g->kh : g->H, w1 = w0 + g->kw < g->W ? w0 + g->kw : g->W;
    float v = dy[e] * (float)(1.0 / (double)(g->kh * g->kw));
    for (int64_t p = h0 < 0 ? 0 : h0; p < h1; p++)
        for (int64_t q = w0 < 0 ? 0 : w0; q < w1; q++)
            un_cu_add(&dx[pl * g->H * g->W + p * g->W + q], v);
}

/* batch_norm over x [N, C, hw...]: one block per channel, its N hw values; item k of channel ch
 * is at (k / hw N C + ch) hw + k % hw. */
UN_CU_FN int64_t un_cu_bn_at(int64_t C, int64_t hw, int64_t ch, int64_t k) {
    return (k / hw * C + ch) * hw + k % hw;
}
/* Partials of channel ch: sum x (phase 0), sum (x - mean)^2 (phase 1). */
UN_CU_FN float un_cu_bn_psum(const float *x, int64_t C, int64_t hw, int64_t cnt, int64_t ch,
                             float mean, bool var, int tid, int nt) {
    float s = 0;
    for (int64_t k = tid; k < cnt; k += nt) {
        float t = x[un_cu_bn_at(C, hw, ch, k)] - (var ? mean : 0.0f);
        s += var ? t * t : t;
    }
    return s;
}
UN_CU_FN void un_cu_bn_out(const float *x, const float *gamma, const float *beta, float *y,
                           int64_t C, int64_t hw, int64_t cnt, int64_t ch, float mean, float rs,
                           int tid, int nt) {
    for (int64_t k = tid; k < cnt; k += nt) {
        int64_t at = un_cu_bn_at(C, hw, ch, k);
        y[at] = (x[at] - mean) * rs * gamma[ch] + beta[ch];
    }
}
/* Backward partials: sum dy (*s1) and sum dy xh (*s2). */
UN_CU_FN void un_cu_bn_pback(const float *x, const float *dy, int64_t C, int64_t hw, int64_t cnt,
                             int64_t ch, float mean, float rs, int tid, int nt, float *s1,
                             float *s2) {
    float a = 0, b = 0;
    for (int64_t k = tid; k < cnt; k += nt) {
        int64_t at = un_cu_bn_at(C, hw, ch, k);
        a += dy[at];
        b += dy[at] * (x[at] - mean) * rs;
    }
    *s1 = a;
    *s2 = b;
}
/* dx += gamma rs (dy - s1 / cnt - xh s2 / cnt). */
UN_CU_FN void un_cu_bn_dx(const float *x, const float *dy, const float *gamma, float *dx, int64_t C,
                          int64_t hw, int64_t cnt, int64_t ch, float mean, float rs, float s1,
                          float s2, int tid, int nt) {
    float gr = gamma[ch] * rs, m1 = s1 / (float)cnt, m2 = s2 / (float)cnt;
    for (int64_t k = tid; k < cnt; k += nt) {
        int64_t at = un_cu_bn_at(C, hw, ch, k);
        dx[at] += gr * (dy[at] - m1 - (x[at] - mean) * rs * m2);
    }
}

/* ---- multihead attention as a plan of strided-batched GEMMs and softmaxes -------------------- */

/* The buffers a plan names: the op's inputs, output and gradients (the caller's), and scratch
 * (Q, K, V, O projections [B, S|T, HL], scores P [B, heads, S, T] and their gradients). */
typedef enum {
    UN_CU_MHA_Q_IN, /* q [B, S, E] */
    UN_CU_MHA_K_IN, /* k [B, T, E] */
    UN_CU_MHA_V_IN, /* v [B, T, E] */
    UN_CU_MHA_WQ,   /* [E, HL] */
    UN_CU_MHA_WK,
    UN_CU_MHA_WV,
    UN_CU_MHA_WO,  /* [HL, EO] */
    UN_CU_MHA_OUT, /* [B, S, EO] */
    UN_CU_MHA_DOUT,
    UN_CU_MHA_DQ_IN, /* input gradients (accumulated), in the order of the inputs */
    UN_CU_MHA_DK_IN,
    UN_CU_MHA_DV_IN,
    UN_CU_MHA_DWQ,
    UN_CU_MHA_DWK,
    UN_CU_MHA_DWV,
    UN_CU_MHA_DWO,
    UN_CU_MHA_Q, /* scratch from here on */
    UN_CU_MHA_K,
    UN_CU_MHA_V,
    UN_CU_MHA_O,
    UN_CU_MHA_P,
    UN_CU_MHA_DO,
    UN_CU_MHA_DQ,
    UN_CU_MHA_DK,
    UN_CU_MHA_DV,
    UN_CU_MHA_DP,
    UN_CU_MHA_DS,
    UN_CU_MHA_NBUF
} un_cu_mha_buf;

typedef struct un_cu_mha {
    int64_t B, S, T, E, HL, EO, heads, dh;
    bool causal;
    float scale; /* 1 / sqrt(dh) */
} un_cu_mha;

typedef enum {
    UN_CU_STEP_GEMM,
    UN_CU_STEP_SOFTMAX_FWD,
    UN_CU_STEP_SOFTMAX_BWD,
    UN_CU_STEP_ZERO
} un_cu_step_kind;

/* One step: a row-major GEMM C = alpha op(A) op(B) + beta C over `batch` matrices strided apart
 * (the un__cu_sgemm contract), buffers a/b/c at element offsets; or a softmax over the rows of
 * P (forward: a -> c; backward: c += of y = a, dy = b); or c zeroed (m elements). */
typedef struct un_cu_step {
    un_cu_step_kind kind;
    bool ta, tb;
    int64_t m, n, k, batch;
    float alpha, beta;
    int a, b, c; /* un_cu_mha_buf or un_cu_conv_buf */
    int64_t off_a, lda, sa, off_b, ldb, sb, off_c, ldc, sc;
    un_cu_rows rows; /* softmax */
} un_cu_step;

/* Plans are written into arrays of UN_CU_MHA_MAX_STEPS; heads beyond UN_CU_MHA_MAX_HEADS are
 * refused by the backend (the backward takes 4 heads + 10 steps). */
enum { UN_CU_MHA_MAX_HEADS = 64, UN_CU_MHA_MAX_STEPS = 4 * UN_CU_MHA_MAX_HEADS + 16 };

UN_CU_FN un_cu_mha un_cu_mha_of(int64_t B, int64_t S, int64_t T, int64_t E, int64_t HL, int64_t EO,
                                int64_t heads, bool causal) {
    un_cu_mha m = {B, S, T, E, HL, EO, heads, HL / heads, causal, 1.0f};
    m.scale = (float)(1.0 / sqrt((double)m.dh));
    return m;
}

/* Elements of scratch buffer b (0 for the caller's buffers). */
UN_CU_FN int64_t un_cu_mha_scratch(const un_cu_mha *m, int b) {
    int64_t s = m->B * m->S * m->HL, t = m->B * m->T * m->HL, p = m->B * m->heads * m->S * m->T;
    switch (b) {
    case UN_CU_MHA_Q:
    case UN_CU_MHA_O:
    case UN_CU_MHA_DO:
    case UN_CU_MHA_DQ:
        return s;
    case UN_CU_MHA_K:
    case UN_CU_MHA_V:
    case UN_CU_MHA_DK:
    case UN_CU_MHA_DV:
        return t;
    case UN_CU_MHA_P:
    case UN_CU_MHA_DP:
    case UN_CU_MHA_DS:
        return p;
    default:
        return 0;
    }
}

/* Floats of scratch the forward (its buffers before DO) or the backward (all of them) takes. */
UN_CU_FN int64_t un_cu_mha_scratch_total(const un_cu_mha *m, bool bwd) {
    int64_t total = 0;
    for (int b = UN_CU_MHA_Q; b < (bwd ? UN_CU_MHA_NBUF : UN_CU_MHA_DO); b++)
        total += un_cu_mha_scratch(m, b);
    return total;
}

UN_CU_FN un_cu_step un_cu_gemm_step(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                                    int a, int64_t off_a, int64_t lda, int64_t sa, int b,
                                    int64_t off_b, int64_t ldb, int64_t sb, float beta, int c,
                                    int64_t off_c, int64_t ldc, int64_t sc, int64_t batch) {
    un_cu_step st = {
        UN_CU_STEP_GEMM, ta,  tb, m,     n,   k,  batch, alpha, beta, a,           b, c,
        off_a,           lda, sa, off_b, ldb, sb, off_c, ldc,   sc,   {0, 0, 0, 0}};
    return st;
}

/* The softmax rows of P. */
UN_CU_FN un_cu_rows un_cu_mha_rows(const un_cu_mha *m) {
    un_cu_rows r = {m->B * m->heads * m->S, m->T, 1, m->causal ? m->S : 0};
    return r;
}

/* Projections Q, K, V; per head (batched over B) the scores, softmax, and O; then out = O Wo.
 * Returns the number of steps written to st. */
UN_CU_FN int un_cu_mha_fwd_plan(const un_cu_mha *m, un_cu_step *st) {
    int n = 0;
    int64_t S = m->S, T = m->T, HL = m->HL, dh = m->dh, PS = m->heads * S * T;
    st[n++] = un_cu_gemm_step(false, false, m->B * S, HL, m->E, 1, UN_CU_MHA_Q_IN, 0, m->E, 0,
                              UN_CU_MHA_WQ, 0, HL, 0, 0, UN_CU_MHA_Q, 0, HL, 0, 1);
    st[n++] = un_cu_gemm_step(false, false, m->B * T, HL, m->E, 1, UN_CU_MHA_K_IN, 0, m->E, 0,
                              UN_CU_MHA_WK, 0, HL, 0, 0, UN_CU_MHA_K, 0, HL, 0, 1);
    st[n++] = un_cu_gemm_step(false, false, m->B * T, HL, m->E, 1, UN_CU_MHA_V_IN, 0, m->E, 0,
                              UN_CU_MHA_WV, 0, HL, 0, 0, UN_CU_MHA_V, 0, HL, 0, 1);
    for (int64_t h = 0; h < m->heads; h++)
        st[n++] = un_cu_gemm_step(false, true, S, T, dh, m->scale, UN_CU_MHA_Q, h * dh, HL, S * HL,
                                  UN_CU_MHA_K, h * dh, HL, T * HL, 0, UN_CU_MHA_P, h * S * T, T, PS,
                                  m->B);
    un_cu_step sm = {UN_CU_STEP_SOFTMAX_FWD,
                     false,
                     false,
                     0,
                     0,
                     0,
                     0,
                     0,
                     0,
                     UN_CU_MHA_P,
                     0,
                     UN_CU_MHA_P,
                     0,
                     0,
                     0,
                     0,
                     0,
                     0,
                     0,
                     0,
                     0,
                     un_cu_mha_rows(m)};
    st[n++] = sm;
    for (int64_t h = 0; h < m->heads; h++)
        st[n++] =
            un_cu_gemm_step(false, false, S, dh, T, 1, UN_CU_MHA_P, h * S * T, T, PS, UN_CU_MHA_V,
                            h * dh, HL, T * HL, 0, UN_CU_MHA_O, h * dh, HL, S * HL, m->B);
    st[n++] = un_cu_gemm_step(false, false, m->B * S, m->EO, HL, 1, UN_CU_MHA_O, 0, HL, 0,
                              UN_CU_MHA_WO, 0, m->EO, 0, 0, UN_CU_MHA_OUT, 0, m->EO, 0, 1);
    return n;
}

/* The backward after the forward plan ran (Q, K, V, O, P hold its values): gradients of the
 * inputs whose want[i] is set (i in input order q, k, v, Wq, Wk, Wv, Wo) are accumulated. */
UN_CU_FN int un_cu_mha_bwd_plan(const un_cu_mha *m, const bool *want, un_cu_step *st) {
    int n = 0;
    int64_t S = m->S, T = m->T, HL = m->HL, dh = m->dh, B = m->B, PS = m->heads * S * T;
    if (want[6])
        st[n++] = un_cu_gemm_step(true, false, HL, m->EO, B * S, 1, UN_CU_MHA_O, 0, HL, 0,
                                  UN_CU_MHA_DOUT, 0, m->EO, 0, 1, UN_CU_MHA_DWO, 0, m->EO, 0, 1);
    st[n++] = un_cu_gemm_step(false, true, B * S, HL, m->EO, 1, UN_CU_MHA_DOUT, 0, m->EO, 0,
                              UN_CU_MHA_WO, 0, m->EO, 0, 0, UN_CU_MHA_DO, 0, HL, 0, 1);
    for (int64_t h = 0; h < m->heads; h++) {
        st[n++] =
            un_cu_gemm_step(false, true, S, T, dh, 1, UN_CU_MHA_DO, h * dh, HL, S * HL, UN_CU_MHA_V,
                            h * dh, HL, T * HL, 0, UN_CU_MHA_DP, h * S * T, T, PS, B);
        st[n++] =
            un_cu_gemm_step(true, false, T, dh, S, 1, UN_CU_MHA_P, h * S * T, T, PS, UN_CU_MHA_DO,
                            h * dh, HL, S * HL, 0, UN_CU_MHA_DV, h * dh, HL, T * HL, B);
    }
    un_cu_step z = {UN_CU_STEP_ZERO, false, false, B * PS, 0, 0, 0, 0, 0, 0, 0,
                    UN_CU_MHA_DS,    0,     0,     0,      0, 0, 0, 0, 0, 0, {0, 0, 0, 0}};
    st[n++] = z;
    un_cu_step sm = {
        UN_CU_STEP_SOFTMAX_BWD, false, false, 0, 0, 0, 0, 0, 0, UN_CU_MHA_P, UN_CU_MHA_DP,
        UN_CU_MHA_DS,           0,     0,     0, 0, 0, 0, 0, 0, 0,           un_cu_mha_rows(m)};
    st[n++] = sm;
    for (int64_t h = 0; h < m->heads; h++) {
        st[n++] = un_cu_gemm_step(false, false, S, dh, T, m->scale, UN_CU_MHA_DS, h * S * T, T, PS,
                                  UN_CU_MHA_K, h * dh, HL, T * HL, 0, UN_CU_MHA_DQ, h * dh, HL,
                                  S * HL, B);
        st[n++] = un_cu_gemm_step(true, false, T, dh, S, m->scale, UN_CU_MHA_DS, h * S * T, T, PS,
                                  UN_CU_MHA_Q, h * dh, HL, S * HL, 0, UN_CU_MHA_DK, h * dh, HL,
                                  T * HL, B);
    }
    /* through the projections: dW += x^T dX, dx += dX W^T */
    const int xin[3] = {UN_CU_MHA_Q_IN, UN_CU_MHA_K_IN, UN_CU_MHA_V_IN};
    const int dX[3] = {UN_CU_MHA_DQ, UN_CU_MHA_DK, UN_CU_MHA_DV};
    const int w[3] = {UN_CU_MHA_WQ, UN_CU_MHA_WK, UN_CU_MHA_WV};
    const int64_t rows[3] = {B * S, B * T, B * T};
    for (int i = 0; i < 3; i++) {
        if (want[3 + i])
            st[n++] = un_cu_gemm_step(true, false, m->E, HL, rows[i], 1, xin[i], 0, m->E, 0, dX[i],
                                      0, HL, 0, 1, UN_CU_MHA_DWQ + i, 0, HL, 0, 1);
        if (want[i])
            st[n++] = un_cu_gemm_step(false, true, rows[i], m->E, HL, 1, dX[i], 0, HL, 0, w[i], 0,
                                      HL, 0, 1, UN_CU_MHA_DQ_IN + i, 0, m->E, 0, 1);
    }
    return n;
}

/* ---- conv2d's GEMMs (a chunk of g->N images; the steps of un_cu_step over these buffers) ----- */

/* W [groups][opg][K] (= [O][cpg][KH][KW]), col [groups][K][N OHW], Y [groups][opg][N OHW]
 * (= [O][N][OHW]: the output, or its gradient, channel-major), dW like W, dcol like col. */
typedef enum {
    UN_CU_CONV_W,
    UN_CU_CONV_COL,
    UN_CU_CONV_Y,
    UN_CU_CONV_DW,
    UN_CU_CONV_DCOL,
    UN_CU_CONV_NBUF
} un_cu_conv_buf;

/* Y_g = W_g col_g for every group g (one GEMM batched over the groups). */
UN_CU_FN un_cu_step un_cu_conv_fwd_step(const un_cu_conv *g) {
    int64_t L = g->N * g->OHW;
    return un_cu_gemm_step(false, false, g->opg, L, g->K, 1, UN_CU_CONV_W, 0, g->K, g->opg * g->K,
                           UN_CU_CONV_COL, 0, L, g->K * L, 0, UN_CU_CONV_Y, 0, L, g->opg * L,
                           g->groups);
}

/* dW_g += dY_g col_g^T (Y holds dY). */
UN_CU_FN un_cu_step un_cu_conv_dw_step(const un_cu_conv *g) {
    int64_t L = g->N * g->OHW;
    return un_cu_gemm_step(false, true, g->opg, g->K, L, 1, UN_CU_CONV_Y, 0, L, g->opg * L,
                           UN_CU_CONV_COL, 0, L, g->K * L, 1, UN_CU_CONV_DW, 0, g->K, g->opg * g->K,
                           g->groups);
}

/* dcol_g = W_g^T dY_g (Y holds dY). */
UN_CU_FN un_cu_step un_cu_conv_dcol_step(const un_cu_conv *g) {
    int64_t L = g->N * g->OHW;
    return un_cu_gemm_step(true, false, g->K, L, g->opg, 1, UN_CU_CONV_W, 0, g->K, g->opg * g->K,
                           UN_CU_CONV_Y, 0, L, g->opg * L, 0, UN_CU_CONV_DCOL, 0, L, g->K * L,
                           g->groups);
}

#endif
