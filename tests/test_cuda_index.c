/* tests/test_cuda_index.c - the CUDA kernels' logic on the CPU: each launch of backend_cuda.cu is
 * simulated by walking every (block, thread) of its geometry (runtime/backend_cuda_kern.h) in
 * order, running the same per-thread functions the kernels run, block reductions through the
 * same tree levels; the results are compared with the CPU kernels (kernels.h), the training
 * losses (train.h) and the optimizer (optim.h). Also: every grid-stride and per-row launch visits
 * each item exactly once, and the dropout hash equals pcg's. Runs in every build (no GPU). */
#include "runtime/backend_cuda_kern.h"

#include "runtime/kernels.h"
#include "runtime/optim.h"
#include "runtime/train.h"
#include "tests/test.h"

/* ---- helpers --------------------------------------------------------------------------------- */

static uint64_t rng_state = 1234;

static float frand(void) { /* uniform in [-1, 1) */
    rng_state = un_mix64(rng_state);
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *fvec(int64_t n) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = frand();
    return v;
}

static float *fzero(int64_t n) { return calloc((size_t)n, sizeof(float)); }

static float *fcopy(const float *a, int64_t n) {
    float *v = malloc((size_t)n * sizeof *v);
    memcpy(v, a, (size_t)n * sizeof *v);
    return v;
}

/* Largest |a - b| / (1 + |b|) over n values, and whether it is within tol. */
static bool close_to(const float *a, const float *b, int64_t n, double tol, const char *what) {
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (1 + fabs((double)b[i]));
        if (!(d <= worst)) {
            worst = d;
            at = i;
        }
    }
    if (worst <= tol)
        return true;
    printf("  %s: element %lld differs: %.9g vs %.9g (rel %.3g > %.3g)\n", what, (long long)at,
           (double)a[at], (double)b[at], worst, tol);
    return false;
}

static un_kt kt(int rank, const int64_t *dim, void *data) {
    un_kt t = {.dtype = UN_DT_FLOAT, .rank = rank, .data = data};
    for (int i = 0; i < rank; i++)
        t.dim[i] = dim[i];
    return t;
}

static un_kt kti(int rank, const int64_t *dim, int64_t *data) {
    un_kt t = kt(rank, dim, data);
    t.dtype = UN_DT_INT;
    return t;
}

static void set_par(un_param *p, int i, int64_t v) {
    p[i].len = -1;
    p[i].v[0] = v;
}

static const un_kexec EX = {.prec = UN_PREC_F32, .training = true};

/* ---- launch simulation ----------------------------------------------------------------------- */

/* A grid-stride launch over n items: body(arg, i) for every (block, thread) and its items, in
 * block then thread order. visits (may be NULL) counts how often each item ran. */
static void sim_1d(int64_t n, void (*body)(void *, int64_t), void *arg, int *visits) {
    un_cu_geom g = un_cu_geom_1d(n);
    for (int b = 0; b < g.grid; b++)
        for (int t = 0; t < g.block; t++)
            for (int64_t i = un_cu_first(g, b, t); i < n; i += un_cu_stride(g)) {
                if (visits)
                    visits[i]++;
                if (body)
                    body(arg, i);
            }
}

/* The tree of block_reduce (backend_cuda.cu) over the threads' partials part[nt]. */
static float sim_tree(float *part, int nt, un_cu_red red) {
    for (int s = nt / 2; s > 0; s >>= 1)
        for (int t = 0; t < nt; t++)
            un_cu_tree_level(part, t, s, red);
    return part[0];
}

/* A one-block-per-row launch: row(arg, r, nt, part) for every row of every block, in the order
 * the blocks take them; part is scratch for nt partials. */
static void sim_rows(int64_t rows, int64_t len, void (*row)(void *, int64_t, int, float *),
                     void *arg, int *visits) {
    un_cu_geom g = un_cu_geom_rows(rows, len);
    float part[UN_CU_ROW_BLOCK];
    for (int b = 0; b < g.grid; b++)
        for (int64_t r = b; r < rows; r += g.grid) {
            if (visits)
                visits[r]++;
            if (row)
                row(arg, r, g.block, part);
        }
}

/* A un_cu_geom_cols launch of a column reduction (k_col_sum, k_ln_dw): part(arg, c, lane, v)
 * gives lane's nv partials of column c, the lanes are added by the kernels' tree
 * (un_cu_lane_level, level by level as the barriers order them), then done(arg, c, totals). */
static void sim_cols(int64_t cols, int nv, void (*part)(void *, int64_t, int, float *),
                     void (*done)(void *, int64_t, const float *), void *arg, int *visits) {
    un_cu_geom g = un_cu_geom_cols(cols);
    enum { NT = UN_CU_COL_LANES * UN_CU_COL_TILE };
    static float sh[2][NT];
    for (int b = 0; b < g.grid; b++)
        for (int64_t t = (int64_t)b * UN_CU_COL_TILE; t < cols;
             t += (int64_t)g.grid * UN_CU_COL_TILE) {
            for (int th = 0; th < g.block; th++) {
                int64_t c = t + th % UN_CU_COL_TILE;
                float v[2] = {0, 0};
                if (c < cols && part)
                    part(arg, c, th / UN_CU_COL_TILE, v);
                sh[0][th] = v[0], sh[1][th] = v[1];
            }
            for (int k = 0; k < nv; k++)
                for (int s = UN_CU_COL_LANES / 2; s > 0; s >>= 1)
                    for (int th = 0; th < g.block; th++)
                        un_cu_lane_level(sh[k], th / UN_CU_COL_TILE, th % UN_CU_COL_TILE, s);
            for (int col = 0; col < UN_CU_COL_TILE && t + col < cols; col++) {
                if (visits)
                    visits[t + col]++;
                float tot[2] = {sh[0][col], sh[1][col]};
                if (done)
                    done(arg, t + col, tot);
            }
        }
}

/* ---- geometry -------------------------------------------------------------------------------- */

static void test_geometry(void) {
    EXPECT_EQ(UN_CU_MAX_DIMS, UN_MAX_DIMS);
    EXPECT_EQ(UN_CU_BLOCK, UN_CU_ROW_BLOCK); /* k_mse reduces a UN_CU_BLOCK block in row memory */
    const int64_t ns[] = {0,
                          1,
                          31,
                          255,
                          256,
                          257,
                          1000,
                          (int64_t)UN_CU_MAX_GRID * UN_CU_BLOCK,
                          (int64_t)UN_CU_MAX_GRID * UN_CU_BLOCK * 2 + 3};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int64_t n = ns[k];
        int *v = calloc((size_t)n + 1, sizeof *v);
        sim_1d(n, NULL, NULL, v);
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += v[i] != 1;
        EXPECT_EQ(bad, 0);
        un_cu_geom g = un_cu_geom_1d(n);
        EXPECT_TRUE(g.grid >= 0 && g.grid <= UN_CU_MAX_GRID && g.block == UN_CU_BLOCK);
        EXPECT_TRUE((n == 0) == (g.grid == 0));
        free(v);
    }
    const int64_t rows[] = {1, 7, UN_CU_MAX_GRID, UN_CU_MAX_GRID + 5};
    const int64_t lens[] = {1, 5, 32, 33, 200, 256, 257, 100000};
    for (size_t a = 0; a < sizeof rows / sizeof rows[0]; a++)
        for (size_t b = 0; b < sizeof lens / sizeof lens[0]; b++) {
            un_cu_geom g = un_cu_geom_rows(rows[a], lens[b]);
            EXPECT_TRUE(g.block >= 32 && g.block <= UN_CU_ROW_BLOCK && !(g.block & (g.block - 1)));
            EXPECT_TRUE(g.block >= lens[b] || g.block == UN_CU_ROW_BLOCK);
            EXPECT_TRUE(g.block / 2 < lens[b] || g.block == 32); /* the smallest that covers */
            int *v = calloc((size_t)rows[a], sizeof *v);
            sim_rows(rows[a], lens[b], NULL, NULL, v);
            int bad = 0;
            for (int64_t i = 0; i < rows[a]; i++)
                bad += v[i] != 1;
            EXPECT_EQ(bad, 0);
            free(v);
        }
    /* a column launch visits every column once, with TILE x LANES threads a block */
    const int64_t colss[] = {0, 1, 7, 8, 9, 1000, (int64_t)UN_CU_MAX_GRID * UN_CU_COL_TILE + 3};
    for (size_t a = 0; a < sizeof colss / sizeof colss[0]; a++) {
        un_cu_geom g = un_cu_geom_cols(colss[a]);
        EXPECT_TRUE(g.block == UN_CU_COL_TILE * UN_CU_COL_LANES && g.grid <= UN_CU_MAX_GRID);
        EXPECT_TRUE((colss[a] == 0) == (g.grid == 0));
        int *v = calloc((size_t)colss[a] + 1, sizeof *v);
        sim_cols(colss[a], 1, NULL, NULL, NULL, v);
        int bad = 0;
        for (int64_t i = 0; i < colss[a]; i++)
            bad += v[i] != 1;
        EXPECT_EQ(bad, 0);
        free(v);
    }
    /* the tree of 256 partials sums them all and finds the max */
    float part[UN_CU_ROW_BLOCK], sum = 0, mx = -INFINITY;
    for (int t = 0; t < UN_CU_ROW_BLOCK; t++) {
        part[t] = (float)(t % 17) - 3;
        sum += part[t];
        mx = part[t] > mx ? part[t] : mx;
    }
    float copy[UN_CU_ROW_BLOCK];
    memcpy(copy, part, sizeof part);
    EXPECT_NEAR(sim_tree(part, UN_CU_ROW_BLOCK, UN_CU_RED_SUM), sum, 1e-3);
    EXPECT_NEAR(sim_tree(copy, UN_CU_ROW_BLOCK, UN_CU_RED_MAX), mx, 0);
}

static void test_hash(void) {
    uint64_t x = 0;
    int bad = 0;
    for (int i = 0; i < 1000; i++) {
        bad += un_cu_mix64(x) != un_mix64(x);
        bad += un_cu_hash_combine(x, (uint64_t)i * 7919) != un_hash_combine(x, (uint64_t)i * 7919);
        x = un_mix64(x + (uint64_t)i);
    }
    EXPECT_EQ(bad, 0);
}

/* ---- element-wise ---------------------------------------------------------------------------- */

static void ew_fwd_body(void *a, int64_t i) { un_cu_ew_fwd(a, i); }
static void ew_bwd_body(void *a, int64_t i) { un_cu_ew_bwd(a, i); }

static void test_elementwise(void) {
    static const struct {
        un_op op;
        un_cu_ew kind;
        int n_in;
    } ops[] = {{UN_OP_EW_ADD, UN_CU_EW_ADD, 2},      {UN_OP_EW_SUB, UN_CU_EW_SUB, 2},
               {UN_OP_EW_MUL, UN_CU_EW_MUL, 2},      {UN_OP_SCALAR_MUL, UN_CU_EW_SCALE, 1},
               {UN_OP_RELU, UN_CU_EW_RELU, 1},       {UN_OP_SIGMOID, UN_CU_EW_SIGMOID, 1},
               {UN_OP_TANH, UN_CU_EW_TANH, 1},       {UN_OP_GELU, UN_CU_EW_GELU, 1},
               {UN_OP_DROPOUT, UN_CU_EW_DROPOUT, 1}, {UN_OP_IDENTITY, UN_CU_EW_COPY, 1}};
    int64_t dim[3] = {3, 5, 70}, n = 3 * 5 * 70;
    int64_t off[3] = {3, 0, 70}, full[3] = {9, 5, 140}; /* a shard of a bigger tensor */
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        for (int shard = 0; shard < (ops[k].op == UN_OP_DROPOUT ? 2 : 1); shard++) {
            float *x = fvec(n), *y = fvec(n), *z = fzero(n), *zc = fzero(n), *dz = fvec(n);
            float *dx = fvec(n), *dy = fvec(n), *dxc = fcopy(dx, n), *dyc = fcopy(dy, n);
            un_param p[UN_MAX_PARAMS] = {0};
            if (ops[k].op == UN_OP_SCALAR_MUL)
                set_par(p, 0, 3), set_par(p, 1, 4);
            if (ops[k].op == UN_OP_DROPOUT)
                set_par(p, 0, 30), set_par(p, 1, 77);
            un_kexec ex = EX;
            ex.seed = 99;
            if (shard)
                ex.off = off, ex.full = full;
            un_kt in[2] = {kt(3, dim, x), kt(3, dim, y)}, out = kt(3, dim, zc),
                  dout = kt(3, dim, dz);
            un_kt din[2] = {kt(3, dim, dxc), kt(3, dim, dyc)};
            EXPECT_OK(NULL, un_kern_forward(NULL, &ex, ops[k].op, p, in, ops[k].n_in, &out, 1));
            EXPECT_OK(NULL, un_kern_backward(NULL, &ex, ops[k].op, p, in, ops[k].n_in, &out, 1,
                                             &dout, din));
            un_cu_ew_args a = {.kind = ops[k].kind, .n = n, .x = x, .y = y, .z = z};
            a.f = 0.75f;
            a.drop.seed = un_hash_combine(77, 99);
            a.drop.rate = 30;
            a.drop.scale = (float)(100.0 / 70.0);
            a.drop.rank = 3;
            a.drop.global = shard;
            for (int i = 0; i < 3; i++)
                a.drop.dim[i] = dim[i], a.drop.off[i] = off[i], a.drop.full[i] = full[i];
            sim_1d(n, ew_fwd_body, &a, NULL);
            a.out = z, a.dz = dz, a.dx = dx, a.dy = ops[k].n_in > 1 ? dy : NULL;
            sim_1d(n, ew_bwd_body, &a, NULL);
            const char *name = un_op_name(ops[k].op);
            EXPECT_TRUE(close_to(z, zc, n, 1e-6, name));
            EXPECT_TRUE(close_to(dx, dxc, n, 1e-6, name));
            EXPECT_TRUE(close_to(dy, dyc, n, 1e-6, name));
            free(x), free(y), free(z), free(zc), free(dz), free(dx), free(dy), free(dxc), free(dyc);
        }
    }
}

/* ---- linear: a host product plus the kernels' epilogues ---------------------------------------
 */

typedef struct lin_job {
    float *y, *dpre;
    const float *bias, *dy, *pre, *out, *d;
    float *db;
    int64_t rows, cols;
    int act;
} lin_job;

static void bias_act_body(void *a, int64_t i) {
    lin_job *j = a;
    un_cu_bias_act(j->y, j->bias, j->cols, j->act, i);
}
static void act_back_body(void *a, int64_t i) {
    lin_job *j = a;
    un_cu_act_back(j->dpre, j->dy, j->pre, j->out, j->act, i);
}
static void col_sum_part(void *a, int64_t c, int lane, float *v) {
    lin_job *j = a;
    v[0] = un_cu_col_psum(j->d, j->rows, j->cols, c, lane);
}
static void col_sum_done(void *a, int64_t c, const float *tot) {
    lin_job *j = a;
    j->db[c] += tot[0];
}

/* c (+)= op(a) op(b), row-major, m x n from k (ta: a is k x m). */
static void host_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                      const float *b, float *c, bool acc) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t l = 0; l < k; l++)
                s +=
                    (double)(ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
            c[i * n + j] = (float)(acc ? c[i * n + j] + s : s);
        }
}

static void test_linear_epilogue(void) {
    int64_t m = 2 * UN_CU_COL_LANES + 37, kin = 19, nout = 23; /* more rows than lanes */
    for (int act = UN_CU_ACT_NONE; act <= UN_CU_ACT_GELU; act++) {
        float *x = fvec(m * kin), *w = fvec(kin * nout), *b = fvec(nout), *y = fzero(m * nout);
        float *yc = fzero(m * nout), *dy = fvec(m * nout), *dx = fzero(m * kin),
              *dw = fzero(kin * nout), *db = fzero(nout);
        float *dxc = fzero(m * kin), *dwc = fzero(kin * nout), *dbc = fzero(nout);
        un_param p[UN_MAX_PARAMS] = {0};
        set_par(p, 0, act), set_par(p, 1, 1);
        int64_t xd[2] = {m, kin}, wd[2] = {kin, nout}, bd[1] = {nout}, yd[2] = {m, nout};
        un_kt in[3] = {kt(2, xd, x), kt(2, wd, w), kt(1, bd, b)}, out = kt(2, yd, yc),
              dout = kt(2, yd, dy);
        un_kt din[3] = {kt(2, xd, dxc), kt(2, wd, dwc), kt(1, bd, dbc)};
        EXPECT_OK(NULL, un_kern_forward(NULL, &EX, UN_OP_LINEAR, p, in, 3, &out, 1));
        EXPECT_OK(NULL, un_kern_backward(NULL, &EX, UN_OP_LINEAR, p, in, 3, &out, 1, &dout, din));
        /* what the backend does: cuBLAS product, then the epilogue kernels */
        host_gemm(false, false, m, nout, kin, x, w, y, false);
        lin_job j = {.y = y, .bias = b, .rows = m, .cols = nout, .act = act};
        sim_1d(m * nout, bias_act_body, &j, NULL);
        float *pre = NULL, *dpre = fzero(m * nout);
        if (act == UN_CU_ACT_GELU) { /* gelu's backward recomputes the pre-activation */
            pre = fzero(m * nout);
            host_gemm(false, false, m, nout, kin, x, w, pre, false);
            lin_job jp = {.y = pre, .bias = b, .cols = nout, .act = UN_CU_ACT_NONE};
            sim_1d(m * nout, bias_act_body, &jp, NULL);
        }
        j.dpre = dpre, j.dy = dy, j.pre = pre, j.out = act == UN_CU_ACT_GELU ? NULL : y;
        sim_1d(m * nout, act_back_body, &j, NULL);
        host_gemm(false, true, m, kin, nout, dpre, w, dx, true);
        host_gemm(true, false, kin, nout, m, x, dpre, dw, true);
        j.db = db, j.d = dpre;
        sim_cols(nout, 1, col_sum_part, col_sum_done, &j, NULL);
        EXPECT_TRUE(close_to(y, yc, m * nout, 1e-5, "linear y"));
        EXPECT_TRUE(close_to(dx, dxc, m * kin, 1e-5, "linear dx"));
        EXPECT_TRUE(close_to(dw, dwc, kin * nout, 1e-5, "linear dw"));
        EXPECT_TRUE(close_to(db, dbc, nout, 1e-5, "linear db"));
        free(x), free(w), free(b), free(y), free(yc), free(dy), free(dx), free(dw), free(db);
        free(dxc), free(dwc), free(dbc), free(pre), free(dpre);
    }
}

/* ---- boxes: region copies and transpose ------------------------------------------------------ */

typedef struct box_job {
    const un_cu_box *b;
    const float *src;
    float *dst;
    bool acc;
} box_job;

static void box_body(void *a, int64_t e) {
    box_job *j = a;
    int64_t s, d;
    un_cu_box_map(j->b, e, &s, &d);
    j->dst[d] = j->acc ? j->dst[d] + j->src[s] : j->src[s];
}

static void test_box(void) {
    int64_t sdim[3] = {4, 6, 9}, soff[3] = {1, 2, 3}, ddim[3] = {5, 3, 8}, doff[3] = {2, 0, 1},
            len[3] = {3, 3, 6};
    float *src = fvec(4 * 6 * 9);
    for (int acc = 0; acc < 2; acc++) {
        float *dst = fvec(5 * 3 * 8), *ref = fcopy(dst, 5 * 3 * 8);
        for (int64_t a = 0; a < len[0]; a++)
            for (int64_t b = 0; b < len[1]; b++)
                for (int64_t c = 0; c < len[2]; c++) {
                    float v = src[((a + soff[0]) * 6 + b + soff[1]) * 9 + c + soff[2]];
                    float *o = &ref[((a + doff[0]) * 3 + b + doff[1]) * 8 + c + doff[2]];
                    *o = acc ? *o + v : v;
                }
        un_cu_box bx = un_cu_box_region(3, sdim, soff, ddim, doff, len);
        EXPECT_EQ(bx.n, 3 * 3 * 6);
        box_job j = {&bx, src, dst, acc};
        sim_1d(bx.n, box_body, &j, NULL);
        EXPECT_TRUE(close_to(dst, ref, 5 * 3 * 8, 0, "region"));
        free(dst), free(ref);
    }
    free(src);
    /* transpose of every pair of dims of a rank-4 tensor, against the CPU kernel */
    int64_t dim[4] = {2, 3, 4, 5}, n = 120;
    float *x = fvec(n);
    for (int d0 = 0; d0 < 4; d0++)
        for (int d1 = d0 + 1; d1 < 4; d1++) {
            int64_t ydim[4];
            for (int i = 0; i < 4; i++)
                ydim[i] = dim[i == d0 ? d1 : i == d1 ? d0 : i];
            float *y = fzero(n), *yc = fzero(n);
            un_param p[UN_MAX_PARAMS] = {0};
            set_par(p, 0, d0), set_par(p, 1, d1);
            un_kt in = kt(4, dim, x), out = kt(4, ydim, yc);
            EXPECT_OK(NULL, un_kern_forward(NULL, &EX, UN_OP_TRANSPOSE, p, &in, 1, &out, 1));
            un_cu_box bx = un_cu_box_transpose(4, dim, d0, d1);
            box_job j = {&bx, x, y, false};
            sim_1d(bx.n, box_body, &j, NULL);
            EXPECT_TRUE(close_to(y, yc, n, 0, "transpose"));
            free(y), free(yc);
        }
    free(x);
}

/* ---- softmax --------------------------------------------------------------------------------- */

typedef struct sm_job {
    un_cu_rows g;
    const float *x, *dy;
    float *y, *dx;
} sm_job;

static void sm_fwd_row(void *a, int64_t r, int nt, float *part) {
    sm_job *j = a;
    for (int t = 0; t < nt; t++)
        part[t] = un_cu_softmax_pmax(&j->g, j->x, r, t, nt);
    float mx = sim_tree(part, nt, UN_CU_RED_MAX);
    for (int t = 0; t < nt; t++)
        part[t] = un_cu_softmax_pexp(&j->g, j->x, j->y, mx, r, t, nt);
    float s = sim_tree(part, nt, UN_CU_RED_SUM);
    for (int t = 0; t < nt; t++)
        un_cu_softmax_scale(&j->g, j->y, 1.0f / s, r, t, nt);
}

static void sm_bwd_row(void *a, int64_t r, int nt, float *part) {
    sm_job *j = a;
    for (int t = 0; t < nt; t++)
        part[t] = un_cu_softmax_pdot(&j->g, j->y, j->dy, r, t, nt);
    float s = sim_tree(part, nt, UN_CU_RED_SUM);
    for (int t = 0; t < nt; t++)
        un_cu_softmax_dx(&j->g, j->y, j->dy, j->dx, s, r, t, nt);
}

static void test_softmax(void) {
    int64_t dim[3] = {3, 300, 4}, n = 3 * 300 * 4;
    for (int d = 0; d < 3; d++) {
        float *x = fvec(n), *y = fzero(n), *yc = fzero(n), *dy = fvec(n), *dx = fvec(n);
        float *dxc = fcopy(dx, n);
        un_param p[UN_MAX_PARAMS] = {0};
        set_par(p, 0, d - 3); /* counted from the end */
        un_kt in = kt(3, dim, x), out = kt(3, dim, yc), dout = kt(3, dim, dy),
              din = kt(3, dim, dxc);
        EXPECT_OK(NULL, un_kern_forward(NULL, &EX, UN_OP_SOFTMAX, p, &in, 1, &out, 1));
        EXPECT_OK(NULL,
                  un_kern_backward(NULL, &EX, UN_OP_SOFTMAX, p, &in, 1, &out, 1, &dout, &din));
        int64_t inner = 1;
        for (int i = d + 1; i < 3; i++)
            inner *= dim[i];
        sm_job j = {.g = {n / dim[d], dim[d], inner, 0}, .x = x, .y = y, .dy = dy, .dx = dx};
        sim_rows(j.g.rows, j.g.len, sm_fwd_row, &j, NULL);
        sim_rows(j.g.rows, j.g.len, sm_bwd_row, &j, NULL);
        EXPECT_TRUE(close_to(y, yc, n, 1e-6, "softmax y"));
        EXPECT_TRUE(close_to(dx, dxc, n, 1e-6, "softmax dx"));
        free(x), free(y), free(yc), free(dy), free(dx), free(dxc);
    }
}

/* ---- reduce_sum / reduce_mean -----------------------------------------------------------------
 */

typedef struct red_job {
    un_cu_rows g;
    const float *x, *dy;
    float *y, *dx, f;
} red_job;

static void red_fwd_body(void *a, int64_t u) {
    red_job *j = a;
    un_cu_reduce_fwd(&j->g, j->x, j->y, j->f, u);
}
static void red_bwd_body(void *a, int64_t e) {
    red_job *j = a;
    un_cu_reduce_bwd(&j->g, j->dy, j->dx, j->f, e);
}

static void test_reduce(void) {
    int64_t dim[3] = {4, 7, 5}, n = 140;
    for (int mean = 0; mean < 2; mean++)
        for (int d = 0; d < 3; d++) {
            int64_t ydim[3] = {dim[0], dim[1], dim[2]}, inner = 1;
            ydim[d] = 1;
            for (int i = d + 1; i < 3; i++)
                inner *= dim[i];
            int64_t ny = n / dim[d];
            float *x = fvec(n), *y = fzero(ny), *yc = fzero(ny), *dy = fvec(ny), *dx = fvec(n);
            float *dxc = fcopy(dx, n);
            un_op op = mean ? UN_OP_REDUCE_MEAN : UN_OP_REDUCE_SUM;
            un_param p[UN_MAX_PARAMS] = {0};
            set_par(p, 0, d), set_par(p, 1, 1);
            un_kt in = kt(3, dim, x), out = kt(3, ydim, yc), dout = kt(3, ydim, dy),
                  din = kt(3, dim, dxc);
            EXPECT_OK(NULL, un_kern_forward(NULL, &EX, op, p, &in, 1, &out, 1));
            EXPECT_OK(NULL, un_kern_backward(NULL, &EX, op, p, &in, 1, &out, 1, &dout, &din));
            red_job j = {.g = {ny, dim[d], inner, 0}, .x = x, .dy = dy, .y = y, .dx = dx};
            j.f = mean ? 1.0f / (float)dim[d] : 1.0f;
            sim_1d(ny, red_fwd_body, &j, NULL);
            sim_1d(n, red_bwd_body, &j, NULL);
            EXPECT_TRUE(close_to(y, yc, ny, 1e-6, "reduce y"));
            EXPECT_TRUE(close_to(dx, dxc, n, 1e-6, "reduce dx"));
            free(x), free(y), free(yc), free(dy), free(dx), free(dxc);
        }
}

/* ---- layer_norm ------------------------------------------------------------------------------ */

typedef struct ln_job {
    const float *x, *g, *b, *dy;
    float *y, *stats, *dx, *dg, *db;
    int64_t rows, n;
} ln_job;

static void ln_fwd_row(void *a, int64_t r, int nt, float *part) {
    ln_job *j = a;
    for (int t = 0; t < nt; t++)
        part[t] = un_cu_ln_psum(j->x, j->n, r, t, nt);
    float mean = sim_tree(part, nt, UN_CU_RED_SUM) / (float)j->n;
    for (int t = 0; t < nt; t++)
        part[t] = un_cu_ln_pvar(j->x, j->n, mean, r, t, nt);
    float rs = un_cu_ln_rs(sim_tree(part, nt, UN_CU_RED_SUM), j->n);
    j->stats[2 * r] = mean, j->stats[2 * r + 1] = rs;
    for (int t = 0; t < nt; t++)
        un_cu_ln_out(j->x, j->g, j->b, j->y, j->n, mean, rs, r, t, nt);
}

static void ln_dx_row(void *a, int64_t r, int nt, float *part) {
    ln_job *j = a;
    float p1[UN_CU_ROW_BLOCK], mean = j->stats[2 * r], rs = j->stats[2 * r + 1];
    for (int t = 0; t < nt; t++)
        un_cu_ln_pback(j->x, j->dy, j->g, j->n, mean, rs, r, t, nt, &p1[t], &part[t]);
    float s1 = sim_tree(p1, nt, UN_CU_RED_SUM), s2 = sim_tree(part, nt, UN_CU_RED_SUM);
    for (int t = 0; t < nt; t++)
        un_cu_ln_dx(j->x, j->dy, j->g, j->dx, j->n, mean, rs, s1, s2, r, t, nt);
}

static void ln_dw_part(void *a, int64_t k, int lane, float *v) {
    ln_job *j = a;
    un_cu_ln_pdw(j->x, j->dy, j->stats, j->rows, j->n, k, lane, &v[0], &v[1]);
}
static void ln_dw_done(void *a, int64_t k, const float *tot) {
    ln_job *j = a;
    j->dg[k] += tot[0], j->db[k] += tot[1];
}

static void test_layer_norm(void) {
    int64_t lens[] = {5, 64, 700, 9};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        int64_t rows = k < 3 ? 6 : 3 * UN_CU_COL_LANES + 5; /* fewer and more rows than lanes */
        int64_t n = lens[k], xd[2] = {rows, n}, gd[1] = {n}, nx = rows * n;
        float *x = fvec(nx), *g = fvec(n), *b = fvec(n), *y = fzero(nx), *yc = fzero(nx);
        float *dy = fvec(nx), *dx = fvec(nx), *dg = fvec(n), *db = fvec(n);
        float *dxc = fcopy(dx, nx), *dgc = fcopy(dg, n), *dbc = fcopy(db, n);
        float *stats = fzero(2 * rows);
        un_param p[UN_MAX_PARAMS] = {0};
        un_kt in[3] = {kt(2, xd, x), kt(1, gd, g), kt(1, gd, b)}, out = kt(2, xd, yc),
              dout = kt(2, xd, dy);
        un_kt din[3] = {kt(2, xd, dxc), kt(1, gd, dgc), kt(1, gd, dbc)};
        EXPECT_OK(NULL, un_kern_forward(NULL, &EX, UN_OP_LAYER_NORM, p, in, 3, &out, 1));
        EXPECT_OK(NULL,
                  un_kern_backward(NULL, &EX, UN_OP_LAYER_NORM, p, in, 3, &out, 1, &dout, din));
        ln_job j = {.x = x,
                    .g = g,
                    .b = b,
                    .dy = dy,
                    .y = y,
                    .stats = stats,
                    .dx = dx,
                    .dg = dg,
                    .db = db,
                    .rows = rows,
                    .n = n};
        sim_rows(rows, n, ln_fwd_row, &j, NULL);
        sim_rows(rows, n, ln_dx_row, &j, NULL);
        sim_cols(n, 2, ln_dw_part, ln_dw_done, &j, NULL);
        EXPECT_TRUE(close_to(y, yc, nx, 1e-5, "layer_norm y"));
        EXPECT_TRUE(close_to(dx, dxc, nx, 1e-4, "layer_norm dx"));
        EXPECT_TRUE(close_to(dg, dgc, n, 1e-5, "layer_norm dgamma"));
        EXPECT_TRUE(close_to(db, dbc, n, 1e-5, "layer_norm dbeta"));
        free(x), free(g), free(b), free(y), free(yc), free(dy), free(dx), free(dg), free(db);
        free(dxc), free(dgc), free(dbc), free(stats);
    }
}

/* ---- embedding ------------------------------------------------------------------------------- */

typedef struct emb_job {
    const int64_t *id;
    const float *tab, *dy;
    float *y, *dt, f;
    int64_t bag, cols;
} emb_job;

static void emb_fwd_body(void *a, int64_t u) {
    emb_job *j = a;
    un_cu_emb_fwd(j->id, j->tab, j->y, j->bag, j->cols, j->f, u);
}
static void emb_bwd_body(void *a, int64_t u) { /* the kernel's atomicAdd */
    emb_job *j = a;
    j->dt[un_cu_emb_bwd_at(j->id, j->cols, u)] +=
        j->f * j->dy[un_cu_emb_bwd_src(j->bag, j->cols, u)];
}

static void test_embedding(void) {
    int64_t nb = 9, bag = 4, rows = 11, cols = 13;
    int64_t *id = malloc((size_t)(nb * bag) * sizeof *id);
    for (int64_t i = 0; i < nb * bag; i++)
        id[i] = (int64_t)(un_mix64((uint64_t)i) % (uint64_t)rows); /* repeats: atomics matter */
    for (int aggr = 0; aggr < 2; aggr++) {
        float *tab = fvec(rows * cols), *y = fzero(nb * cols), *yc = fzero(nb * cols);
        float *dy = fvec(nb * cols), *dt = fvec(rows * cols), *dtc = fcopy(dt, rows * cols);
        un_param p[UN_MAX_PARAMS] = {0};
        set_par(p, 0, aggr);
        int64_t idd[2] = {nb, bag}, td[2] = {rows, cols}, yd[2] = {nb, cols};
        un_kt in[2] = {kti(2, idd, id), kt(2, td, tab)}, out = kt(2, yd, yc), dout = kt(2, yd, dy);
        un_kt din[2] = {kti(2, idd, NULL), kt(2, td, dtc)};
        EXPECT_OK(NULL, un_kern_forward(NULL, &EX, UN_OP_EMBEDDING, p, in, 2, &out, 1));
        EXPECT_OK(NULL,
                  un_kern_backward(NULL, &EX, UN_OP_EMBEDDING, p, in, 2, &out, 1, &dout, din));
        emb_job j = {.id = id, .tab = tab, .dy = dy, .y = y, .dt = dt, .bag = bag, .cols = cols};
        j.f = aggr == 1 ? 1.0f / (float)bag : 1.0f;
        sim_1d(nb * cols, emb_fwd_body, &j, NULL);
        sim_1d(nb * bag * cols, emb_bwd_body, &j, NULL);
        EXPECT_TRUE(close_to(y, yc, nb * cols, 1e-6, "embedding y"));
        EXPECT_TRUE(close_to(dt, dtc, rows * cols, 1e-6, "embedding dtable"));
        free(tab), free(y), free(yc), free(dy), free(dt), free(dtc);
    }
    free(id);
}

/* ---- cross-entropy and MSE ------------------------------------------------------------------- */

typedef struct ce_job {
    const float *x, *g;
    const int64_t *lab;
    float *loss, *grad, gscale;
    int64_t c;
    bool acc;
} ce_job;

static void ce_row(void *a, int64_t r, int nt, float *part) {
    ce_job *j = a;
    for (int t = 0; t < nt; t++)
        part[t] = un_cu_ce_pmax(j->x, j->c, r, t, nt);
    float mx = sim_tree(part, nt, UN_CU_RED_MAX);
    for (int t = 0; t < nt; t++)
        part[t] = un_cu_ce_psum(j->x, j->c, mx, r, t, nt);
    float lse = mx + logf(sim_tree(part, nt, UN_CU_RED_SUM));
    j->loss[r] = lse - j->x[r * j->c + j->lab[r]];
    for (int t = 0; t < nt; t++)
        un_cu_ce_grad(j->x, j->grad, j->c, lse, j->lab[r], j->g ? j->g[r] : j->gscale, j->acc, r, t,
                      nt);
}

static void test_cross_entropy(void) {
    int64_t rows = 10, c = 300;
    float *x = fvec(rows * c);
    int64_t *lab = malloc((size_t)rows * sizeof *lab);
    for (int64_t r = 0; r < rows; r++)
        lab[r] = (r * 37) % c;
    /* the op: loss per row, accumulated gradient with an upstream gradient per row */
    float *loss = fzero(rows), *lossc = fzero(rows), *g = fvec(rows), *dx = fvec(rows * c);
    float *dxc = fcopy(dx, rows * c);
    int64_t xd[2] = {rows, c}, ld[1] = {rows};
    un_param p[UN_MAX_PARAMS] = {0};
    un_kt in[2] = {kt(2, xd, x), kti(1, ld, lab)}, out = kt(1, ld, lossc), dout = kt(1, ld, g);
    un_kt din[2] = {kt(2, xd, dxc), kti(1, ld, NULL)};
    EXPECT_OK(NULL, un_kern_forward(NULL, &EX, UN_OP_CROSS_ENTROPY, p, in, 2, &out, 1));
    EXPECT_OK(NULL,
              un_kern_backward(NULL, &EX, UN_OP_CROSS_ENTROPY, p, in, 2, &out, 1, &dout, din));
    ce_job j = {.x = x, .g = g, .lab = lab, .loss = loss, .grad = dx, .c = c, .acc = true};
    sim_rows(rows, c, ce_row, &j, NULL);
    EXPECT_TRUE(close_to(loss, lossc, rows, 1e-5, "cross_entropy loss"));
    EXPECT_TRUE(close_to(dx, dxc, rows * c, 1e-5, "cross_entropy dx"));
    /* the training loss: rows 3.. of 25 labels, gradient set to (p - onehot) / n_total */
    int64_t *lab25 = calloc(25, sizeof *lab25);
    for (int64_t r = 0; r < rows; r++)
        lab25[3 + r] = lab[r];
    float *gr = fvec(rows * c), *grc = fzero(rows * c);
    double total = un_train_ce(UN_PREC_F32, x, rows, c, 3, 25, lab25, grc);
    ce_job k = {.x = x, .lab = lab, .loss = loss, .grad = gr, .gscale = 1.0f / 25, .c = c};
    sim_rows(rows, c, ce_row, &k, NULL);
    double sum = 0;
    for (int64_t r = 0; r < rows; r++)
        sum += loss[r];
    EXPECT_NEAR(sum, total, 1e-5 * (1 + fabs(total)));
    EXPECT_TRUE(close_to(gr, grc, rows * c, 1e-6, "ce training gradient"));
    free(x), free(lab), free(loss), free(lossc), free(g), free(dx), free(dxc), free(lab25);
    free(gr), free(grc);
}

typedef struct mse_job {
    const float *y, *t;
    float *grad, *partial, numel;
    int64_t pdim[2], off[2], full[2];
} mse_job;

static void test_mse(void) {
    /* a 5 x 7 piece at (2, 3) of a 9 x 12 output; the block partials, summed, are the loss */
    mse_job j = {.pdim = {5, 7}, .off = {2, 3}, .full = {9, 12}, .numel = 108};
    int64_t n = 35;
    float *y = fvec(n), *t = fvec(108), *grad = fzero(n);
    un_cu_geom g = un_cu_geom_1d(n);
    float *partial = fzero(g.grid), part[UN_CU_BLOCK];
    for (int b = 0; b < g.grid; b++) {
        for (int th = 0; th < g.block; th++) {
            float s = 0;
            for (int64_t e = un_cu_first(g, b, th); e < n; e += un_cu_stride(g))
                s += un_cu_mse_elem(y, t, grad, un_cu_piece_global(2, j.pdim, j.off, j.full, e),
                                    j.numel, e);
            part[th] = s;
        }
        partial[b] = sim_tree(part, g.block, UN_CU_RED_SUM);
    }
    double loss = 0, want = 0;
    for (int b = 0; b < g.grid; b++)
        loss += partial[b];
    float *gw = fzero(n);
    for (int64_t r = 0; r < 5; r++)
        for (int64_t c = 0; c < 7; c++) {
            double d = (double)y[r * 7 + c] - t[(r + 2) * 12 + c + 3];
            want += d * d;
            gw[r * 7 + c] = (float)(2 * d / 108);
        }
    EXPECT_NEAR(loss, want, 1e-5);
    EXPECT_TRUE(close_to(grad, gw, n, 1e-6, "mse gradient"));
    free(y), free(t), free(grad), free(partial), free(gw);
}

/* ---- optimizer ------------------------------------------------------------------------------- */

typedef struct opt_job {
    un_cu_opt o;
    float *w, *m, *v;
    const float *g;
} opt_job;

static void opt_body(void *a, int64_t i) {
    opt_job *j = a;
    un_cu_opt_elem(&j->o, j->w, j->g, j->m, j->v, i);
}

static void test_optimizer(void) {
    int64_t n = 1000;
    for (int kind = 0; kind < 2; kind++) {
        un_optim_params pr = un_optim_params_default(kind ? UN_OPTIM_ADAM : UN_OPTIM_SGD);
        un_optim *opt = NULL;
        EXPECT_OK(NULL, un_optim_new(NULL, pr, n, UN_PREC_F32, &opt));
        if (!opt)
            return;
        float *w = fvec(n), *wc = fcopy(w, n), *m = fzero(n), *v = fzero(n);
        for (int step = 1; step <= 5; step++) {
            float *g = fvec(n);
            un_optim_step(opt, wc, g);
            opt_job j = {.w = w, .m = m, .v = v, .g = g};
            j.o = kind ? un_cu_opt_adam(pr.lr, pr.beta1, pr.beta2, pr.eps, step)
                       : un_cu_opt_sgd(pr.lr, pr.momentum);
            sim_1d(n, opt_body, &j, NULL);
            free(g);
        }
        /* the same double arithmetic: bitwise equal */
        EXPECT_TRUE(close_to(w, wc, n, 0, un_optim_algo_name(pr.kind)));
        EXPECT_TRUE(close_to(m, un_optim_state(opt, 0), n, 0, "optimizer state 0"));
        if (kind)
            EXPECT_TRUE(close_to(v, un_optim_state(opt, 1), n, 0, "optimizer state 1"));
        free(w), free(wc), free(m), free(v);
        un_optim_free(opt);
    }
}

/* ---- multihead attention: the GEMM/softmax plan run on the host ------------------------------ */

/* un__cu_sgemm's contract on the host: row-major, leading dims, batch strides, alpha, beta. */
static void host_gemm_step(const un_cu_step *g, float *const *buf) {
    for (int64_t bt = 0; bt < g->batch; bt++) {
        const float *A = buf[g->a] + g->off_a + bt * g->sa, *B = buf[g->b] + g->off_b + bt * g->sb;
        float *C = buf[g->c] + g->off_c + bt * g->sc;
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t j = 0; j < g->n; j++) {
                double s = 0;
                for (int64_t l = 0; l < g->k; l++)
                    s += (double)(g->ta ? A[l * g->lda + i] : A[i * g->lda + l]) *
                         (g->tb ? B[j * g->ldb + l] : B[l * g->ldb + j]);
                C[i * g->ldc + j] =
                    (float)(g->alpha * s + (g->beta != 0 ? g->beta * C[i * g->ldc + j] : 0));
            }
    }
}

static void run_plan(const un_cu_step *st, int n, float *const *buf) {
    for (int i = 0; i < n; i++) {
        const un_cu_step *g = &st[i];
        sm_job j = {.g = g->rows};
        switch (g->kind) {
        case UN_CU_STEP_GEMM:
            host_gemm_step(g, buf);
            break;
        case UN_CU_STEP_SOFTMAX_FWD:
            j.x = buf[g->a], j.y = buf[g->c];
            sim_rows(g->rows.rows, g->rows.len, sm_fwd_row, &j, NULL);
            break;
        case UN_CU_STEP_SOFTMAX_BWD:
            j.y = buf[g->a], j.dy = buf[g->b], j.dx = buf[g->c];
            sim_rows(g->rows.rows, g->rows.len, sm_bwd_row, &j, NULL);
            break;
        case UN_CU_STEP_ZERO:
            memset(buf[g->c], 0, (size_t)g->m * sizeof(float));
            break;
        }
    }
}

static void test_attention(void) {
    for (int causal = 0; causal < 2; causal++) {
        int64_t B = 2, S = 5, T = causal ? 5 : 7, E = 6, HL = 8, EO = 3, heads = 2;
        un_cu_mha m = un_cu_mha_of(B, S, T, E, HL, EO, heads, causal);
        int64_t sz[UN_CU_MHA_NBUF] = {[UN_CU_MHA_Q_IN] = B * S * E, [UN_CU_MHA_K_IN] = B * T * E,
                                      [UN_CU_MHA_V_IN] = B * T * E, [UN_CU_MHA_WQ] = E * HL,
                                      [UN_CU_MHA_WK] = E * HL,      [UN_CU_MHA_WV] = E * HL,
                                      [UN_CU_MHA_WO] = HL * EO,     [UN_CU_MHA_OUT] = B * S * EO,
                                      [UN_CU_MHA_DOUT] = B * S * EO};
        for (int i = 0; i < 7; i++)
            sz[UN_CU_MHA_DQ_IN + i] = sz[UN_CU_MHA_Q_IN + i];
        float *buf[UN_CU_MHA_NBUF], *ref[UN_CU_MHA_NBUF] = {0};
        for (int b = 0; b < UN_CU_MHA_NBUF; b++) {
            int64_t n = b >= UN_CU_MHA_Q ? un_cu_mha_scratch(&m, b) : sz[b];
            buf[b] = fvec(n); /* garbage in scratch and outputs: the plan must overwrite it */
            if (b >= UN_CU_MHA_DQ_IN && b <= UN_CU_MHA_DWO)
                ref[b] = fcopy(buf[b], n);
        }
        ref[UN_CU_MHA_OUT] = fzero(sz[UN_CU_MHA_OUT]);
        int64_t qd[3] = {B, S, E}, kd[3] = {B, T, E}, wd[2] = {E, HL}, od[2] = {HL, EO},
                yd[3] = {B, S, EO};
        un_kt in[7] = {kt(3, qd, buf[UN_CU_MHA_Q_IN]), kt(3, kd, buf[UN_CU_MHA_K_IN]),
                       kt(3, kd, buf[UN_CU_MHA_V_IN]), kt(2, wd, buf[UN_CU_MHA_WQ]),
                       kt(2, wd, buf[UN_CU_MHA_WK]),   kt(2, wd, buf[UN_CU_MHA_WV]),
                       kt(2, od, buf[UN_CU_MHA_WO])};
        un_kt din[7];
        for (int i = 0; i < 7; i++) {
            din[i] = in[i];
            din[i].data = ref[UN_CU_MHA_DQ_IN + i];
        }
        un_kt out = kt(3, yd, ref[UN_CU_MHA_OUT]), dout = kt(3, yd, buf[UN_CU_MHA_DOUT]);
        un_param p[UN_MAX_PARAMS] = {0};
        set_par(p, 0, heads), set_par(p, 1, causal);
        EXPECT_OK(NULL, un_kern_forward(NULL, &EX, UN_OP_MULTIHEAD_ATTENTION, p, in, 7, &out, 1));
        EXPECT_OK(NULL, un_kern_backward(NULL, &EX, UN_OP_MULTIHEAD_ATTENTION, p, in, 7, &out, 1,
                                         &dout, din));
        un_cu_step st[UN_CU_MHA_MAX_STEPS];
        int n = un_cu_mha_fwd_plan(&m, st);
        EXPECT_TRUE(n <= UN_CU_MHA_MAX_STEPS);
        run_plan(st, n, buf);
        bool want[7] = {true, true, true, true, true, true, true};
        n = un_cu_mha_bwd_plan(&m, want, st);
        EXPECT_TRUE(n <= UN_CU_MHA_MAX_STEPS);
        run_plan(st, n, buf);
        EXPECT_TRUE(close_to(buf[UN_CU_MHA_OUT], ref[UN_CU_MHA_OUT], sz[UN_CU_MHA_OUT], 1e-5,
                             "attention out"));
        for (int i = 0; i < 7; i++)
            EXPECT_TRUE(close_to(buf[UN_CU_MHA_DQ_IN + i], ref[UN_CU_MHA_DQ_IN + i],
                                 sz[UN_CU_MHA_DQ_IN + i], 1e-5, "attention gradient"));
        for (int b = 0; b < UN_CU_MHA_NBUF; b++)
            free(buf[b]), free(ref[b]);
    }
    /* the biggest plan fits */
    un_cu_mha big = un_cu_mha_of(1, 2, 2, 4, UN_CU_MHA_MAX_HEADS, 4, UN_CU_MHA_MAX_HEADS, false);
    un_cu_step st[UN_CU_MHA_MAX_STEPS];
    bool want[7] = {true, true, true, true, true, true, true};
    EXPECT_TRUE(un_cu_mha_bwd_plan(&big, want, st) <= UN_CU_MHA_MAX_STEPS);
    EXPECT_TRUE(un_cu_mha_fwd_plan(&big, st) <= UN_CU_MHA_MAX_STEPS);
}

/* ---- conv2d, pool2d, batch_norm ---------------------------------------------------------------
 */

typedef struct conv_job {
    const un_cu_conv *g;
    const float *src, *bias, *dy, *pre, *out;
    float *dst, *db, *dpre;
    int act;
} conv_job;

static void im2col_body(void *a, int64_t e) {
    conv_job *j = a;
    un_cu_im2col(j->g, j->src, j->dst, e);
}
static void col2im_body(void *a, int64_t e) {
    conv_job *j = a;
    un_cu_col2im(j->g, j->src, j->dst, e);
}
static void chan_bias_body(void *a, int64_t i) {
    conv_job *j = a;
    un_cu_chan_bias_act(j->dst, j->bias, j->g->O, j->g->OHW, j->act, i);
}
static void chan_sum_row(void *a, int64_t o, int nt, float *part) {
    conv_job *j = a;
    for (int t = 0; t < nt; t++)
        part[t] = un_cu_chan_psum(j->dpre, j->g->N, j->g->O, j->g->OHW, o, t, nt);
    j->db[o] += sim_tree(part, nt, UN_CU_RED_SUM);
}
static void conv_act_back_body(void *a, int64_t i) {
    conv_job *j = a;
    un_cu_act_back(j->dpre, j->dy, j->pre, j->out, j->act, i);
}

/* The convolutions of the conv2d tests: groups 1 and > 1, strides 1 and 2, padding, 1x1 and
 * 3x3 (and 3x2) kernels; x [N, C, H, W], w [O, C / groups, KH, KW]. */
static const struct {
    int64_t x[4], w[4], sh, sw, ph, pw, groups;
    int act;
} conv_cases[] = {{{3, 4, 7, 6}, {6, 2, 3, 3}, 2, 1, 1, 0, 2, UN_CU_ACT_RELU},
                  {{1, 3, 5, 5}, {4, 3, 3, 2}, 1, 2, 0, 1, 1, UN_CU_ACT_GELU},
                  {{3, 2, 4, 4}, {2, 1, 1, 1}, 1, 1, 0, 0, 2, UN_CU_ACT_NONE},
                  {{5, 8, 6, 5}, {8, 2, 3, 3}, 2, 2, 1, 1, 4, UN_CU_ACT_RELU},
                  {{4, 3, 6, 6}, {5, 3, 1, 1}, 2, 2, 0, 0, 1, UN_CU_ACT_GELU}};
enum { N_CONV_CASES = sizeof conv_cases / sizeof conv_cases[0] };

/* The chunk sizes tried: 1, 2 and all N images (N not dividing by 2 in some cases). */
static int64_t next_chunk(int64_t nc, int64_t N) { return nc == 1 ? 2 : nc < N ? N : N + 1; }

static un_cu_conv conv_case(size_t k) {
    return un_cu_conv_of(conv_cases[k].x, conv_cases[k].w, conv_cases[k].sh, conv_cases[k].sw,
                         conv_cases[k].ph, conv_cases[k].pw, conv_cases[k].groups);
}

/* im2col of a chunk, its gathered adjoint, the chunk size and the Y <-> y copies against direct
 * loops, for chunks of 1, 2 and all images. */
/* Direct im2col of a chunk of cn images: for col entry e ([C KH KW][cn OHW], L = cn OHW), the
 * offset in the chunk of the x element it reads, or -1 for padding (owned: free). */
static int64_t *im2col_map(const un_cu_conv *g, int64_t cn, int64_t L, int64_t ncol) {
    int64_t *at = malloc((size_t)ncol * sizeof *at);
    for (int64_t n = 0; n < cn; n++)
        for (int64_t ch = 0; ch < g->C; ch++)
            for (int64_t p = 0; p < g->KH; p++)
                for (int64_t q = 0; q < g->KW; q++)
                    for (int64_t i = 0; i < g->OH; i++)
                        for (int64_t j = 0; j < g->OW; j++) {
                            int64_t ih = i * g->sh - g->ph + p, iw = j * g->sw - g->pw + q;
                            bool in = ih >= 0 && ih < g->H && iw >= 0 && iw < g->W;
                            at[((ch * g->KH + p) * g->KW + q) * L + n * g->OHW + i * g->OW + j] =
                                in ? ((n * g->C + ch) * g->H + ih) * g->W + iw : -1;
                        }
    return at;
}

static void test_conv_index(void) {
    for (size_t k = 0; k < N_CONV_CASES; k++) {
        un_cu_conv g = conv_case(k);
        int64_t per = g.C * g.KH * g.KW * g.OHW, nx = g.N * g.C * g.H * g.W;
        EXPECT_EQ(g.groups * g.K, g.C * g.KH * g.KW);
        /* the chunk: as many images as max_col floats of col hold, at least 1, at most N */
        EXPECT_EQ(un_cu_conv_chunk(&g, 0), 1);
        EXPECT_EQ(un_cu_conv_chunk(&g, per - 1), 1);
        EXPECT_EQ(un_cu_conv_chunk(&g, 2 * per + per - 1), g.N < 2 ? g.N : 2);
        EXPECT_EQ(un_cu_conv_chunk(&g, (int64_t)1 << 40), g.N);
        float *x = fvec(nx);
        for (int64_t nc = 1; nc <= g.N; nc = next_chunk(nc, g.N)) {
            for (int64_t n0 = 0; n0 < g.N; n0 += nc) {
                un_cu_conv c = un_cu_conv_at(&g, n0, nc);
                EXPECT_EQ(c.N, nc < g.N - n0 ? nc : g.N - n0);
                int64_t L = c.N * c.OHW, ncol = per * c.N;
                float *col = fvec(ncol), *ref = fzero(ncol);
                const float *xc = x + n0 * g.C * g.H * g.W;
                int64_t *at = im2col_map(&g, c.N, L, ncol);
                for (int64_t e = 0; e < ncol; e++)
                    ref[e] = at[e] >= 0 ? xc[at[e]] : 0;
                conv_job ji = {.g = &c, .src = xc, .dst = col};
                sim_1d(ncol, im2col_body, &ji, NULL);
                EXPECT_TRUE(close_to(col, ref, ncol, 0, "conv2d im2col of a chunk"));
                /* the adjoint: the gathered dx equals scattering every col entry back */
                float *dcol = fvec(ncol), *dx = fvec(c.N * g.C * g.H * g.W);
                float *dref = fcopy(dx, c.N * g.C * g.H * g.W);
                for (int64_t e = 0; e < ncol; e++)
                    if (at[e] >= 0)
                        dref[at[e]] += dcol[e];
                conv_job jc = {.g = &c, .src = dcol, .dst = dx};
                sim_1d(c.N * g.C * g.H * g.W, col2im_body, &jc, NULL);
                EXPECT_TRUE(close_to(dx, dref, c.N * g.C * g.H * g.W, 1e-6, "conv2d col2im"));
                /* Y [O][N][OHW] <-> y [N][O][OHW] */
                int64_t ny = g.O * L;
                float *Y = fvec(ny), *y = fzero(ny), *back = fzero(ny);
                un_cu_box to_y = un_cu_conv_perm(&c, true), to_Y = un_cu_conv_perm(&c, false);
                EXPECT_EQ(to_y.n, ny);
                EXPECT_EQ(to_Y.n, ny);
                box_job jb = {&to_y, Y, y, false};
                sim_1d(ny, box_body, &jb, NULL);
                bool same = true;
                for (int64_t o = 0; o < g.O; o++)
                    for (int64_t n = 0; n < c.N; n++)
                        for (int64_t sp = 0; sp < g.OHW; sp++)
                            same &= y[(n * g.O + o) * g.OHW + sp] == Y[(o * c.N + n) * g.OHW + sp];
                EXPECT_TRUE(same);
                box_job jY = {&to_Y, y, back, false};
                sim_1d(ny, box_body, &jY, NULL);
                EXPECT_TRUE(close_to(back, Y, ny, 0, "conv2d y -> Y"));
                free(at), free(col), free(ref), free(dcol), free(dx), free(dref), free(Y), free(y),
                    free(back);
            }
        }
        free(x);
    }
}

/* What conv_into (backend_cuda.c) does, chunks of nc images: y = act(conv(x, w) + b). */
static void conv_fwd_host(const un_cu_conv *g, int64_t nc, const float *x, float *w, const float *b,
                          float *y, int act, float *col, float *ybuf) {
    float *buf[UN_CU_CONV_NBUF] = {[UN_CU_CONV_W] = w, [UN_CU_CONV_COL] = col};
    for (int64_t n0 = 0; n0 < g->N; n0 += nc) {
        un_cu_conv c = un_cu_conv_at(g, n0, nc);
        un_cu_step st = un_cu_conv_fwd_step(&c);
        float *yc = y + n0 * g->O * g->OHW;
        buf[UN_CU_CONV_Y] = c.N == 1 ? yc : ybuf;
        conv_job j = {.g = &c, .src = x + n0 * g->C * g->H * g->W, .dst = col};
        sim_1d(g->C * g->KH * g->KW * c.N * g->OHW, im2col_body, &j, NULL);
        host_gemm_step(&st, buf);
        if (c.N > 1) {
            un_cu_box bx = un_cu_conv_perm(&c, true);
            box_job jb = {&bx, ybuf, yc, false};
            sim_1d(bx.n, box_body, &jb, NULL);
        }
    }
    conv_job jb = {.g = g, .dst = y, .bias = b, .act = act};
    sim_1d(g->N * g->O * g->OHW, chan_bias_body, &jb, NULL);
}

/* The backend's conv2d forward and backward (conv_into, conv_bwd) simulated on the host with
 * chunks of 1, 2 and all images, against the CPU kernels. */
static void test_conv(void) {
    for (size_t k = 0; k < N_CONV_CASES; k++) {
        un_cu_conv g = conv_case(k);
        int act = conv_cases[k].act;
        int64_t nx = g.N * g.C * g.H * g.W, nw = g.O * g.K, ny = g.N * g.O * g.OHW;
        int64_t yd[4] = {g.N, g.O, g.OH, g.OW}, bd[1] = {g.O};
        float *x = fvec(nx), *w = fvec(nw), *b = fvec(g.O), *yc = fzero(ny), *dy = fvec(ny);
        float *dx0 = fvec(nx), *dw0 = fvec(nw), *db0 = fvec(g.O);
        float *dxc = fcopy(dx0, nx), *dwc = fcopy(dw0, nw), *dbc = fcopy(db0, g.O);
        un_param p[UN_MAX_PARAMS] = {0};
        int64_t pv[7] = {conv_cases[k].sh,
                         conv_cases[k].sw,
                         conv_cases[k].ph,
                         conv_cases[k].pw,
                         g.groups,
                         act,
                         1};
        for (int i = 0; i < 7; i++)
            set_par(p, i, pv[i]);
        un_kt in[3] = {kt(4, conv_cases[k].x, x), kt(4, conv_cases[k].w, w), kt(1, bd, b)},
              out = kt(4, yd, yc), dout = kt(4, yd, dy);
        un_kt din[3] = {kt(4, conv_cases[k].x, dxc), kt(4, conv_cases[k].w, dwc), kt(1, bd, dbc)};
        EXPECT_OK(NULL, un_kern_forward(NULL, &EX, UN_OP_CONV2D, p, in, 3, &out, 1));
        EXPECT_OK(NULL, un_kern_backward(NULL, &EX, UN_OP_CONV2D, p, in, 3, &out, 1, &dout, din));
        int64_t per = g.C * g.KH * g.KW * g.OHW;
        for (int64_t want = 1; want <= g.N; want = next_chunk(want, g.N)) {
            int64_t nc = un_cu_conv_chunk(&g, want * per);
            EXPECT_EQ(nc, want);
            /* scratch starts as garbage: every step must overwrite what it reads later */
            float *col = fvec(per * nc), *dcol = fvec(per * nc), *ybuf = fvec(g.O * nc * g.OHW);
            float *y = fzero(ny), *pre = fzero(ny), *dpre = fzero(ny);
            float *dx = fcopy(dx0, nx), *dw = fcopy(dw0, nw), *db = fcopy(db0, g.O);
            conv_fwd_host(&g, nc, x, w, b, y, act, col, ybuf);
            conv_job j = {.g = &g, .dy = dy, .out = y, .dpre = dpre, .db = db, .act = act};
            if (act == UN_CU_ACT_GELU) {
                conv_fwd_host(&g, nc, x, w, b, pre, UN_CU_ACT_NONE, col, ybuf);
                j.pre = pre, j.out = NULL;
            }
            float *dp = dy;
            if (act != UN_CU_ACT_NONE) {
                sim_1d(ny, conv_act_back_body, &j, NULL);
                dp = dpre;
            }
            float *buf[UN_CU_CONV_NBUF] = {[UN_CU_CONV_W] = w,
                                           [UN_CU_CONV_COL] = col,
                                           [UN_CU_CONV_DW] = dw,
                                           [UN_CU_CONV_DCOL] = dcol};
            for (int64_t n0 = 0; n0 < g.N; n0 += nc) {
                un_cu_conv c = un_cu_conv_at(&g, n0, nc);
                float *dpc = dp + n0 * g.O * g.OHW;
                buf[UN_CU_CONV_Y] = c.N == 1 ? dpc : ybuf;
                if (c.N > 1) {
                    un_cu_box bx = un_cu_conv_perm(&c, false);
                    box_job jb = {&bx, dpc, ybuf, false};
                    sim_1d(bx.n, box_body, &jb, NULL);
                }
                conv_job ji = {.g = &c, .src = x + n0 * g.C * g.H * g.W, .dst = col};
                sim_1d(per * c.N, im2col_body, &ji, NULL);
                un_cu_step st1 = un_cu_conv_dw_step(&c), st0 = un_cu_conv_dcol_step(&c);
                host_gemm_step(&st1, buf);
                host_gemm_step(&st0, buf);
                conv_job jc = {.g = &c, .src = dcol, .dst = dx + n0 * g.C * g.H * g.W};
                sim_1d(c.N * g.C * g.H * g.W, col2im_body, &jc, NULL);
            }
            j.dpre = dp;
            sim_rows(g.O, g.N * g.OHW, chan_sum_row, &j, NULL);
            EXPECT_TRUE(close_to(y, yc, ny, 1e-5, "conv2d y"));
            EXPECT_TRUE(close_to(dx, dxc, nx, 1e-5, "conv2d dx"));
            EXPECT_TRUE(close_to(dw, dwc, nw, 1e-5, "conv2d dw"));
            EXPECT_TRUE(close_to(db, dbc, g.O, 1e-5, "conv2d db"));
            free(col), free(dcol), free(ybuf), free(y), free(pre), free(dpre), free(dx), free(dw);
            free(db);
        }
        free(x), free(w), free(b), free(yc), free(dy), free(dx0), free(dw0), free(db0);
        free(dxc), free(dwc), free(dbc);
    }
}

typedef struct pool_job {
    const un_cu_pool *g;
    const float *x, *dy;
    float *y, *dx;
} pool_job;

static void pool_fwd_body(void *a, int64_t e) {
    pool_job *j = a;
    un_cu_pool_fwd(j->g, j->x, j->y, e);
}
static void pool_bwd_body(void *a, int64_t e) {
    pool_job *j = a;
    un_cu_pool_bwd(j->g, j->x, j->dy, j->dx, e);
}

static void test_pool(void) {
    for (int avg = 0; avg < 2; avg++) {
        int64_t xd[4] = {2, 3, 7, 6}, nx = 2 * 3 * 7 * 6;
        un_cu_pool g = {6, 7, 6, 3, 2, 2, 2, 1, 1, 0, 0, avg == 1};
        g.OH = (g.H + 2 * g.ph - g.kh) / g.sh + 1, g.OW = (g.W + 2 * g.pw - g.kw) / g.sw + 1;
        int64_t yd[4] = {2, 3, g.OH, g.OW}, ny = 6 * g.OH * g.OW;
        float *x = fvec(nx), *y = fzero(ny), *yc = fzero(ny), *dy = fvec(ny), *dx = fvec(nx);
        float *dxc = fcopy(dx, nx);
        un_param p[UN_MAX_PARAMS] = {0};
        int64_t pv[7] = {g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, avg};
        for (int i = 0; i < 7; i++)
            set_par(p, i, pv[i]);
        un_kt in = kt(4, xd, x), out = kt(4, yd, yc), dout = kt(4, yd, dy), din = kt(4, xd, dxc);
        EXPECT_OK(NULL, un_kern_forward(NULL, &EX, UN_OP_POOL2D, p, &in, 1, &out, 1));
        EXPECT_OK(NULL, un_kern_backward(NULL, &EX, UN_OP_POOL2D, p, &in, 1, &out, 1, &dout, &din));
        pool_job j = {&g, x, dy, y, dx};
        sim_1d(ny, pool_fwd_body, &j, NULL);
        sim_1d(ny, pool_bwd_body, &j, NULL);
        EXPECT_TRUE(close_to(y, yc, ny, 1e-6, "pool2d y"));
        EXPECT_TRUE(close_to(dx, dxc, nx, 1e-6, "pool2d dx"));
        free(x), free(y), free(yc), free(dy), free(dx), free(dxc);
    }
}

typedef struct bn_job {
    const float *x, *g, *b, *dy;
    float *y, *dx, *dg, *db;
    int64_t C, hw, cnt;
} bn_job;

/* One block per channel: forward (y), or backward (dx, dgamma, dbeta) recomputing the stats. */
static void bn_row(bn_job *j, int64_t ch, int nt, float *part, bool bwd) {
    for (int t = 0; t < nt; t++)
        part[t] = un_cu_bn_psum(j->x, j->C, j->hw, j->cnt, ch, 0, false, t, nt);
    float mean = sim_tree(part, nt, UN_CU_RED_SUM) / (float)j->cnt;
    for (int t = 0; t < nt; t++)
        part[t] = un_cu_bn_psum(j->x, j->C, j->hw, j->cnt, ch, mean, true, t, nt);
    float rs = un_cu_ln_rs(sim_tree(part, nt, UN_CU_RED_SUM), j->cnt);
    if (!bwd) {
        for (int t = 0; t < nt; t++)
            un_cu_bn_out(j->x, j->g, j->b, j->y, j->C, j->hw, j->cnt, ch, mean, rs, t, nt);
        return;
    }
    float p1[UN_CU_ROW_BLOCK];
    for (int t = 0; t < nt; t++)
        un_cu_bn_pback(j->x, j->dy, j->C, j->hw, j->cnt, ch, mean, rs, t, nt, &p1[t], &part[t]);
    float s1 = sim_tree(p1, nt, UN_CU_RED_SUM), s2 = sim_tree(part, nt, UN_CU_RED_SUM);
    j->dg[ch] += s2, j->db[ch] += s1; /* thread 0 of the kernel */
    for (int t = 0; t < nt; t++)
        un_cu_bn_dx(j->x, j->dy, j->g, j->dx, j->C, j->hw, j->cnt, ch, mean, rs, s1, s2, t, nt);
}
static void bn_fwd_row(void *a, int64_t ch, int nt, float *part) { bn_row(a, ch, nt, part, false); }
static void bn_bwd_row(void *a, int64_t ch, int nt, float *part) { bn_row(a, ch, nt, part, true); }

static void test_batch_norm(void) {
    int64_t xd[4] = {5, 3, 6, 7}, nx = 5 * 3 * 42, cd[1] = {3};
    float *x = fvec(nx), *g = fvec(3), *b = fvec(3), *y = fzero(nx), *yc = fzero(nx);
    float *dy = fvec(nx), *dx = fvec(nx), *dg = fvec(3), *db = fvec(3);
    float *dxc = fcopy(dx, nx), *dgc = fcopy(dg, 3), *dbc = fcopy(db, 3);
    un_param p[UN_MAX_PARAMS] = {0};
    un_kt in[3] = {kt(4, xd, x), kt(1, cd, g), kt(1, cd, b)}, out = kt(4, xd, yc),
          dout = kt(4, xd, dy);
    un_kt din[3] = {kt(4, xd, dxc), kt(1, cd, dgc), kt(1, cd, dbc)};
    EXPECT_OK(NULL, un_kern_forward(NULL, &EX, UN_OP_BATCH_NORM, p, in, 3, &out, 1));
    EXPECT_OK(NULL, un_kern_backward(NULL, &EX, UN_OP_BATCH_NORM, p, in, 3, &out, 1, &dout, din));
    bn_job j = {x, g, b, dy, y, dx, dg, db, 3, 42, 5 * 42};
    sim_rows(3, 5 * 42, bn_fwd_row, &j, NULL);
    sim_rows(3, 5 * 42, bn_bwd_row, &j, NULL);
    EXPECT_TRUE(close_to(y, yc, nx, 1e-5, "batch_norm y"));
    EXPECT_TRUE(close_to(dx, dxc, nx, 1e-4, "batch_norm dx"));
    EXPECT_TRUE(close_to(dg, dgc, 3, 1e-5, "batch_norm dgamma"));
    EXPECT_TRUE(close_to(db, dbc, 3, 1e-5, "batch_norm dbeta"));
    free(x), free(g), free(b), free(y), free(yc), free(dy), free(dx), free(dg), free(db);
    free(dxc), free(dgc), free(dbc);
}

int main(void) {
    static const test_case cases[] = {
        {"geometry", test_geometry},
        {"hash", test_hash},
        {"elementwise", test_elementwise},
        {"linear_epilogue", test_linear_epilogue},
        {"box", test_box},
        {"softmax", test_softmax},
        {"reduce", test_reduce},
        {"layer_norm", test_layer_norm},
        {"embedding", test_embedding},
        {"cross_entropy", test_cross_entropy},
        {"mse", test_mse},
        {"optimizer", test_optimizer},
        {"attention", test_attention},
        {"conv2d_index", test_conv_index},
        {"conv2d", test_conv},
        {"pool2d", test_pool},
        {"batch_norm", test_batch_norm},
    };
    return TEST_RUN_ALL(cases);
}
