/* backend_cuda.cu - the CUDA side of the CUDA backend: the C seam of backend_cuda_rt.h over the
 * CUDA runtime and cuBLAS, and the kernels. Each kernel is a grid-stride or one-block-per-row
 * loop around the functions of backend_cuda_kern.h (whose logic tests/test_cuda_index.c checks on
 * the CPU); the backend's logic is in backend_cuda.c. The only file with CUDA and cuBLAS headers
 * (STYLE rule 2). */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "runtime/backend_cuda_rt.h"

/* A message "what: reason" kept in a small static ring, so that a few recent ones stay valid. */
static const char *cu_msg(const char *what, const char *why) {
    static thread_local char ring[4][256];
    static thread_local int at;
    char *m = ring[at++ & 3];
    snprintf(m, sizeof ring[0], "%s: %s", what, why);
    return m;
}

static const char *ck(cudaError_t e, const char *what) {
    return e == cudaSuccess ? NULL : cu_msg(what, cudaGetErrorString(e));
}

static const char *ckb(cublasStatus_t s, const char *what) {
    return s == CUBLAS_STATUS_SUCCESS ? NULL : cu_msg(what, cublasGetStatusString(s));
}

/* After a launch: the launch's own error (asynchronous failures surface at the next sync). */
static const char *launched(const char *what) { return ck(cudaGetLastError(), what); }

#define ST(s) ((cudaStream_t)(s))

/* ---- devices, memory, streams, events ----------------------------------------------------------
 */

extern "C" int un__cu_device_count(const char **why) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why)
            *why = cudaGetErrorString(e);
        cudaGetLastError(); /* clear the sticky-free error */
        return 0;
    }
    if (n == 0 && why)
        *why = "no CUDA device";
    return n;
}

extern "C" const char *un__cu_device_name(int dev, char *buf, size_t cap) {
    cudaDeviceProp p;
    const char *err = ck(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
    if (!err)
        snprintf(buf, cap, "%s", p.name);
    return err;
}

extern "C" const char *un__cu_set_device(int dev) {
    return ck(cudaSetDevice(dev), "cudaSetDevice");
}

extern "C" const char *un__cu_mem_info(size_t *free_bytes, size_t *total_bytes) {
    return ck(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
}

extern "C" const char *un__cu_malloc(void **p, size_t n, bool *oom) {
    cudaError_t e = cudaMalloc(p, n);
    *oom = e == cudaErrorMemoryAllocation;
    if (e != cudaSuccess) {
        *p = NULL;
        cudaGetLastError();
    }
    return ck(e, "cudaMalloc");
}

extern "C" const char *un__cu_free(void *p) { return ck(cudaFree(p), "cudaFree"); }

extern "C" const char *un__cu_memset0(void *stream, void *p, size_t n) {
    return ck(cudaMemsetAsync(p, 0, n, ST(stream)), "cudaMemsetAsync");
}

extern "C" const char *un__cu_h2d(void *stream, void *dst, const void *src, size_t n) {
    return ck(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, ST(stream)), "cudaMemcpyAsync");
}

extern "C" const char *un__cu_d2h(void *stream, void *dst, const void *src, size_t n) {
    const char *err =
        ck(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, ST(stream)), "cudaMemcpyAsync");
    return err ? err : ck(cudaStreamSynchronize(ST(stream)), "cudaStreamSynchronize");
}

extern "C" const char *un__cu_d2d(void *stream, void *dst, const void *src, size_t n) {
    return ck(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, ST(stream)),
              "cudaMemcpyAsync");
}

extern "C" const char *un__cu_stream_new(void **s) {
    cudaStream_t st = NULL;
    const char *err = ck(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    *s = st;
    return err;
}

extern "C" const char *un__cu_stream_free(void *s) {
    return ck(cudaStreamDestroy(ST(s)), "cudaStreamDestroy");
}

extern "C" const char *un__cu_stream_sync(void *s) {
    return ck(cudaStreamSynchronize(ST(s)), "cudaStreamSynchronize");
}

extern "C" const char *un__cu_event_new(void **e) {
    cudaEvent_t ev = NULL;
    const char *err = ck(cudaEventCreate(&ev), "cudaEventCreate");
    *e = ev;
    return err;
}

extern "C" const char *un__cu_event_free(void *e) {
    return ck(cudaEventDestroy((cudaEvent_t)e), "cudaEventDestroy");
}

extern "C" const char *un__cu_event_record(void *e, void *stream) {
    return ck(cudaEventRecord((cudaEvent_t)e, ST(stream)), "cudaEventRecord");
}

extern "C" const char *un__cu_event_ms(void *start, void *stop, float *ms) {
    const char *err = ck(cudaEventSynchronize((cudaEvent_t)stop), "cudaEventSynchronize");
    return err ? err
               : ck(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)stop),
                    "cudaEventElapsedTime");
}

/* ---- cuBLAS ------------------------------------------------------------------------------------
 */

extern "C" const char *un__cu_blas_new(void **h, void *stream, bool tf32) {
    cublasHandle_t b = NULL;
    const char *err = ckb(cublasCreate(&b), "cublasCreate");
    if (!err)
        err = ckb(cublasSetStream(b, ST(stream)), "cublasSetStream");
    if (!err)
        err = ckb(cublasSetMathMode(b, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                  "cublasSetMathMode");
    if (err && b) {
        cublasDestroy(b);
        b = NULL;
    }
    *h = b;
    return err;
}

extern "C" const char *un__cu_blas_free(void *h) {
    return ckb(cublasDestroy((cublasHandle_t)h), "cublasDestroy");
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands. */
extern "C" const char *un__cu_sgemm(void *h, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                    float alpha, const float *A, int64_t lda, int64_t stride_a,
                                    const float *B, int64_t ldb, int64_t stride_b, float beta,
                                    float *C, int64_t ldc, int64_t stride_c, int64_t batch) {
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1)
        return ckb(cublasSgemm_64((cublasHandle_t)h, ob, oa, n, m, k, &alpha, B, ldb, A, lda, &beta,
                                  C, ldc),
                   "cublasSgemm");
    return ckb(cublasSgemmStridedBatched_64((cublasHandle_t)h, ob, oa, n, m, k, &alpha, B, ldb,
                                            stride_b, A, lda, stride_a, &beta, C, ldc, stride_c,
                                            batch),
               "cublasSgemmStridedBatched");
}

extern "C" const char *un__cu_gemm_bf16(void *h, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                        float alpha, const uint16_t *A, int64_t lda,
                                        const uint16_t *B, int64_t ldb, float beta, float *C,
                                        int64_t ldc) {
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    return ckb(cublasGemmEx_64((cublasHandle_t)h, ob, oa, n, m, k, &alpha, B, CUDA_R_16BF, ldb, A,
                               CUDA_R_16BF, lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx(bf16)");
}

/* ---- kernels -----------------------------------------------------------------------------------
 */

/* Grid-stride loop of the thread over n items. */
#define FOR_ITEMS(i, n)                                                                            \
    for (int64_t i =                                                                               \
             un_cu_first(un_cu_geom{(int)gridDim.x, (int)blockDim.x}, blockIdx.x, threadIdx.x);    \
         i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* One block per row, grid-stride over rows. */
#define FOR_ROWS(r, rows) for (int64_t r = blockIdx.x; r < (rows); r += gridDim.x)

/* The block's reduction of v (every thread passes one value; all get the result). */
static __device__ float block_reduce(float v, un_cu_red red) {
    __shared__ float sh[UN_CU_ROW_BLOCK];
    int tid = threadIdx.x;
    sh[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        un_cu_tree_level(sh, tid, s, red);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads(); /* sh is reused by the next reduction */
    return r;
}

__global__ void k_ew_fwd(un_cu_ew_args a) {
    FOR_ITEMS(i, a.n)
    un_cu_ew_fwd(&a, i);
}

__global__ void k_ew_bwd(un_cu_ew_args a) {
    FOR_ITEMS(i, a.n)
    un_cu_ew_bwd(&a, i);
}

__global__ void k_bias_act(float *y, const float *bias, int64_t n, int64_t cols, int act) {
    FOR_ITEMS(i, n)
    un_cu_bias_act(y, bias, cols, act, i);
}

__global__ void k_act_back(float *dpre, const float *dy, const float *pre, const float *out,
                           int64_t n, int act) {
    FOR_ITEMS(i, n)
    un_cu_act_back(dpre, dy, pre, out, act, i);
}

/* A un_cu_geom_cols launch: the block's column tiles (grid-stride; every thread of the block
 * takes the same tiles, so the barriers inside are reached by all); c is the thread's column,
 * lane its row lane. */
#define FOR_COL_TILES(t)                                                                           \
    for (int64_t t = (int64_t)blockIdx.x * UN_CU_COL_TILE; t < cols;                               \
         t += (int64_t)gridDim.x * UN_CU_COL_TILE)
#define COL_OF(t) ((t) + (int64_t)(threadIdx.x % UN_CU_COL_TILE))
#define LANE      ((int)(threadIdx.x / UN_CU_COL_TILE))

/* The lanes' tree over sh [LANES][TILE]; afterwards sh[col] holds the column's total. */
static __device__ void lanes_reduce(float *sh) {
    __syncthreads();
    for (int s = UN_CU_COL_LANES / 2; s > 0; s >>= 1) {
        un_cu_lane_level(sh, threadIdx.x / UN_CU_COL_TILE, threadIdx.x % UN_CU_COL_TILE, s);
        __syncthreads();
    }
}

__global__ void k_col_sum(float *db, const float *d, int64_t rows, int64_t cols) {
    __shared__ float sh[UN_CU_COL_LANES * UN_CU_COL_TILE];
    FOR_COL_TILES(t) {
        int64_t c = COL_OF(t);
        sh[threadIdx.x] = c < cols ? un_cu_col_psum(d, rows, cols, c, LANE) : 0.0f;
        lanes_reduce(sh);
        if (LANE == 0 && c < cols)
            db[c] += sh[threadIdx.x];
        __syncthreads(); /* sh is refilled by the next tile */
    }
}

template <typename T> __global__ void k_box(un_cu_box b, T *dst, const T *src, bool acc) {
    FOR_ITEMS(e, b.n) {
        int64_t s, d;
        un_cu_box_map(&b, e, &s, &d);
        dst[d] = acc ? (T)(dst[d] + src[s]) : src[s];
    }
}

__global__ void k_softmax_fwd(un_cu_rows g, const float *x, float *y) {
    FOR_ROWS(r, g.rows) {
        float mx =
            block_reduce(un_cu_softmax_pmax(&g, x, r, threadIdx.x, blockDim.x), UN_CU_RED_MAX);
        float s = block_reduce(un_cu_softmax_pexp(&g, x, y, mx, r, threadIdx.x, blockDim.x),
                               UN_CU_RED_SUM);
        un_cu_softmax_scale(&g, y, 1.0f / s, r, threadIdx.x, blockDim.x);
    }
}

__global__ void k_softmax_bwd(un_cu_rows g, const float *y, const float *dy, float *dx) {
    FOR_ROWS(r, g.rows) {
        float s =
            block_reduce(un_cu_softmax_pdot(&g, y, dy, r, threadIdx.x, blockDim.x), UN_CU_RED_SUM);
        un_cu_softmax_dx(&g, y, dy, dx, s, r, threadIdx.x, blockDim.x);
    }
}

__global__ void k_reduce_fwd(un_cu_rows g, const float *x, float *y, float f) {
    FOR_ITEMS(u, g.rows)
    un_cu_reduce_fwd(&g, x, y, f, u);
}

__global__ void k_reduce_bwd(un_cu_rows g, const float *dy, float *dx, float f, int64_t n) {
    FOR_ITEMS(e, n)
    un_cu_reduce_bwd(&g, dy, dx, f, e);
}

/* Mean and rs of row r into stats (and y when given). */
static __device__ void ln_row(const float *x, const float *gamma, const float *beta, float *y,
                              float *stats, int64_t n, int64_t r) {
    int tid = threadIdx.x, nt = blockDim.x;
    float mean = block_reduce(un_cu_ln_psum(x, n, r, tid, nt), UN_CU_RED_SUM) / (float)n;
    float rs = un_cu_ln_rs(block_reduce(un_cu_ln_pvar(x, n, mean, r, tid, nt), UN_CU_RED_SUM), n);
    if (tid == 0) {
        stats[2 * r] = mean;
        stats[2 * r + 1] = rs;
    }
    if (y)
        un_cu_ln_out(x, gamma, beta, y, n, mean, rs, r, tid, nt);
}

__global__ void k_ln_fwd(const float *x, const float *gamma, const float *beta, float *y,
                         float *stats, int64_t rows, int64_t n) {
    FOR_ROWS(r, rows)
    ln_row(x, gamma, beta, y, stats, n, r);
}

__global__ void k_ln_dx(const float *x, const float *gamma, const float *dy, const float *stats,
                        float *dx, int64_t rows, int64_t n) {
    int tid = threadIdx.x, nt = blockDim.x;
    FOR_ROWS(r, rows) {
        float mean = stats[2 * r], rs = stats[2 * r + 1], s1, s2;
        un_cu_ln_pback(x, dy, gamma, n, mean, rs, r, tid, nt, &s1, &s2);
        s1 = block_reduce(s1, UN_CU_RED_SUM);
        s2 = block_reduce(s2, UN_CU_RED_SUM);
        un_cu_ln_dx(x, dy, gamma, dx, n, mean, rs, s1, s2, r, tid, nt);
    }
}

__global__ void k_ln_dw(const float *x, const float *dy, const float *stats, float *dg, float *db,
                        int64_t rows, int64_t cols) {
    __shared__ float sa[UN_CU_COL_LANES * UN_CU_COL_TILE], sb[UN_CU_COL_LANES * UN_CU_COL_TILE];
    FOR_COL_TILES(t) {
        int64_t k = COL_OF(t);
        float a = 0, b = 0;
        if (k < cols)
            un_cu_ln_pdw(x, dy, stats, rows, cols, k, LANE, &a, &b);
        sa[threadIdx.x] = a, sb[threadIdx.x] = b;
        lanes_reduce(sa);
        lanes_reduce(sb);
        if (LANE == 0 && k < cols) {
            if (dg)
                dg[k] += sa[threadIdx.x];
            if (db)
                db[k] += sb[threadIdx.x];
        }
        __syncthreads();
    }
}

__global__ void k_emb_fwd(const int64_t *id, const float *tab, float *y, int64_t n, int64_t bag,
                          int64_t cols, float f) {
    FOR_ITEMS(u, n)
    un_cu_emb_fwd(id, tab, y, bag, cols, f, u);
}

__global__ void k_emb_bwd(const int64_t *id, const float *dy, float *dt, int64_t n, int64_t bag,
                          int64_t cols, float f) {
    FOR_ITEMS(u, n)
    atomicAdd(&dt[un_cu_emb_bwd_at(id, cols, u)], f * dy[un_cu_emb_bwd_src(bag, cols, u)]);
}

__global__ void k_index_check(const int64_t *id, int64_t n, int64_t limit, int64_t *bad) {
    FOR_ITEMS(e, n)
    if (id[e] < 0 || id[e] >= limit)
        atomicMin((unsigned long long *)bad, (unsigned long long)e);
}

__global__ void k_ce(const float *x, const int64_t *lab, int64_t rows, int64_t c, float *loss,
                     float *grad, const float *g, float gscale, bool acc) {
    int tid = threadIdx.x, nt = blockDim.x;
    FOR_ROWS(r, rows) {
        float mx = block_reduce(un_cu_ce_pmax(x, c, r, tid, nt), UN_CU_RED_MAX);
        float lse = mx + logf(block_reduce(un_cu_ce_psum(x, c, mx, r, tid, nt), UN_CU_RED_SUM));
        if (loss && tid == 0)
            loss[r] = lse - x[r * c + lab[r]];
        if (grad)
            un_cu_ce_grad(x, grad, c, lse, lab[r], g ? g[r] : gscale, acc, r, tid, nt);
    }
}

struct mse_dims {
    int rank;
    int64_t pdim[UN_CU_MAX_DIMS], off[UN_CU_MAX_DIMS], full[UN_CU_MAX_DIMS];
};

__global__ void k_mse(mse_dims d, const float *y, const float *t, float *grad, float *partial,
                      int64_t n, float numel) {
    float s = 0;
    FOR_ITEMS(e, n)
    s += un_cu_mse_elem(y, t, grad, un_cu_piece_global(d.rank, d.pdim, d.off, d.full, e), numel, e);
    s = block_reduce(s, UN_CU_RED_SUM);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

__global__ void k_opt(un_cu_opt o, float *w, const float *g, float *m, float *v, int64_t n) {
    FOR_ITEMS(i, n)
    un_cu_opt_elem(&o, w, g, m, v, i);
}

__global__ void k_im2col(un_cu_conv g, const float *x, float *col) {
    FOR_ITEMS(e, g.C * g.KH * g.KW * g.N * g.OHW)
    un_cu_im2col(&g, x, col, e);
}

__global__ void k_col2im(un_cu_conv g, const float *col, float *dx) {
    FOR_ITEMS(e, g.N * g.C * g.H * g.W)
    un_cu_col2im(&g, col, dx, e);
}

__global__ void k_chan_bias_act(float *y, const float *bias, int64_t n, int64_t O, int64_t hw,
                                int act) {
    FOR_ITEMS(i, n)
    un_cu_chan_bias_act(y, bias, O, hw, act, i);
}

__global__ void k_chan_sum(float *db, const float *d, int64_t N, int64_t O, int64_t hw) {
    FOR_ROWS(o, O) {
        float s =
            block_reduce(un_cu_chan_psum(d, N, O, hw, o, threadIdx.x, blockDim.x), UN_CU_RED_SUM);
        if (threadIdx.x == 0)
            db[o] += s;
    }
}

__global__ void k_pool_fwd(un_cu_pool g, const float *x, float *y, int64_t n) {
    FOR_ITEMS(e, n)
    un_cu_pool_fwd(&g, x, y, e);
}

__global__ void k_pool_bwd(un_cu_pool g, const float *x, const float *dy, float *dx, int64_t n) {
    FOR_ITEMS(e, n)
    un_cu_pool_bwd(&g, x, dy, dx, e);
}

/* One block per channel: y (forward) or dx, dgamma, dbeta (backward; either may be NULL). */
__global__ void k_bn(const float *x, const float *gamma, const float *beta, float *y,
                     const float *dy, float *dx, float *dg, float *db, int64_t C, int64_t hw,
                     int64_t cnt, bool bwd) {
    int tid = threadIdx.x, nt = blockDim.x;
    FOR_ROWS(ch, C) {
        float mean =
            block_reduce(un_cu_bn_psum(x, C, hw, cnt, ch, 0, false, tid, nt), UN_CU_RED_SUM) /
            (float)cnt;
        float rs = un_cu_ln_rs(
            block_reduce(un_cu_bn_psum(x, C, hw, cnt, ch, mean, true, tid, nt), UN_CU_RED_SUM),
            cnt);
        if (!bwd) {
            un_cu_bn_out(x, gamma, beta, y, C, hw, cnt, ch, mean, rs, tid, nt);
            continue;
        }
        float s1, s2;
        un_cu_bn_pback(x, dy, C, hw, cnt, ch, mean, rs, tid, nt, &s1, &s2);
        s1 = block_reduce(s1, UN_CU_RED_SUM);
        s2 = block_reduce(s2, UN_CU_RED_SUM);
        if (tid == 0 && dg)
            dg[ch] += s2;
        if (tid == 0 && db)
            db[ch] += s1;
        if (dx)
            un_cu_bn_dx(x, dy, gamma, dx, C, hw, cnt, ch, mean, rs, s1, s2, tid, nt);
    }
}

__global__ void k_to_bf16(uint16_t *dst, const float *src, int64_t n) {
    FOR_ITEMS(i, n) {
        __nv_bfloat16 b = __float2bfloat16_rn(src[i]);
        dst[i] = *(const uint16_t *)&b;
    }
}

/* ---- launchers ---------------------------------------------------------------------------------
 */

#define LAUNCH_1D(n, kernel, ...)                                                                  \
    do {                                                                                           \
        un_cu_geom g_ = un_cu_geom_1d(n);                                                          \
        if (g_.grid > 0)                                                                           \
            kernel<<<g_.grid, g_.block, 0, ST(stream)>>>(__VA_ARGS__);                             \
        return launched(#kernel);                                                                  \
    } while (0)

#define LAUNCH_ROWS(rows, len, kernel, ...)                                                        \
    do {                                                                                           \
        un_cu_geom g_ = un_cu_geom_rows(rows, len);                                                \
        if (g_.grid > 0)                                                                           \
            kernel<<<g_.grid, g_.block, 0, ST(stream)>>>(__VA_ARGS__);                             \
        return launched(#kernel);                                                                  \
    } while (0)

#define LAUNCH_COLS(cols, kernel, ...)                                                             \
    do {                                                                                           \
        un_cu_geom g_ = un_cu_geom_cols(cols);                                                     \
        if (g_.grid > 0)                                                                           \
            kernel<<<g_.grid, g_.block, 0, ST(stream)>>>(__VA_ARGS__);                             \
        return launched(#kernel);                                                                  \
    } while (0)

extern "C" const char *un__cu_ew_fwd(void *stream, const un_cu_ew_args *a) {
    LAUNCH_1D(a->n, k_ew_fwd, *a);
}

extern "C" const char *un__cu_ew_bwd(void *stream, const un_cu_ew_args *a) {
    LAUNCH_1D(a->n, k_ew_bwd, *a);
}

extern "C" const char *un__cu_bias_act(void *stream, float *y, const float *bias, int64_t rows,
                                       int64_t cols, int act) {
    LAUNCH_1D(rows * cols, k_bias_act, y, bias, rows * cols, cols, act);
}

extern "C" const char *un__cu_act_back(void *stream, float *dpre, const float *dy, const float *pre,
                                       const float *out, int64_t n, int act) {
    LAUNCH_1D(n, k_act_back, dpre, dy, pre, out, n, act);
}

extern "C" const char *un__cu_col_sum(void *stream, float *db, const float *d, int64_t rows,
                                      int64_t cols) {
    LAUNCH_COLS(cols, k_col_sum, db, d, rows, cols);
}

extern "C" const char *un__cu_box(void *stream, const un_cu_box *b, void *dst, const void *src,
                                  size_t es, bool accumulate) {
    if (es == 4 && accumulate)
        LAUNCH_1D(b->n, k_box<float>, *b, (float *)dst, (const float *)src, true);
    if (es == 4)
        LAUNCH_1D(b->n, k_box<uint32_t>, *b, (uint32_t *)dst, (const uint32_t *)src, false);
    if (es == 8 && !accumulate)
        LAUNCH_1D(b->n, k_box<uint64_t>, *b, (uint64_t *)dst, (const uint64_t *)src, false);
    return "box copy: unsupported element size or accumulation of non-float data";
}

extern "C" const char *un__cu_softmax_fwd(void *stream, const un_cu_rows *g, const float *x,
                                          float *y) {
    LAUNCH_ROWS(g->rows, g->len, k_softmax_fwd, *g, x, y);
}

extern "C" const char *un__cu_softmax_bwd(void *stream, const un_cu_rows *g, const float *y,
                                          const float *dy, float *dx) {
    LAUNCH_ROWS(g->rows, g->len, k_softmax_bwd, *g, y, dy, dx);
}

extern "C" const char *un__cu_reduce_fwd(void *stream, const un_cu_rows *g, const float *x,
                                         float *y, float f) {
    LAUNCH_1D(g->rows, k_reduce_fwd, *g, x, y, f);
}

extern "C" const char *un__cu_reduce_bwd(void *stream, const un_cu_rows *g, const float *dy,
                                         float *dx, float f) {
    LAUNCH_1D(g->rows / g->inner * g->len * g->inner, k_reduce_bwd, *g, dy, dx, f,
              g->rows / g->inner * g->len * g->inner);
}

extern "C" const char *un__cu_layer_norm_fwd(void *stream, const float *x, const float *gamma,
                                             const float *beta, float *y, float *stats,
                                             int64_t rows, int64_t n) {
    LAUNCH_ROWS(rows, n, k_ln_fwd, x, gamma, beta, y, stats, rows, n);
}

extern "C" const char *un__cu_layer_norm_bwd(void *stream, const float *x, const float *gamma,
                                             const float *dy, const float *stats, float *dx,
                                             float *dgamma, float *dbeta, int64_t rows, int64_t n) {
    if (dx) {
        un_cu_geom g = un_cu_geom_rows(rows, n);
        if (g.grid > 0)
            k_ln_dx<<<g.grid, g.block, 0, ST(stream)>>>(x, gamma, dy, stats, dx, rows, n);
        const char *err = launched("k_ln_dx");
        if (err)
            return err;
    }
    if (!dgamma && !dbeta)
        return NULL;
    LAUNCH_COLS(n, k_ln_dw, x, dy, stats, dgamma, dbeta, rows, n);
}

extern "C" const char *un__cu_embedding_fwd(void *stream, const int64_t *id, const float *tab,
                                            float *y, int64_t nbags, int64_t bag, int64_t cols,
                                            float f) {
    LAUNCH_1D(nbags * cols, k_emb_fwd, id, tab, y, nbags * cols, bag, cols, f);
}

extern "C" const char *un__cu_embedding_bwd(void *stream, const int64_t *id, const float *dy,
                                            float *dtab, int64_t nbags, int64_t bag, int64_t cols,
                                            float f) {
    LAUNCH_1D(nbags * bag * cols, k_emb_bwd, id, dy, dtab, nbags * bag * cols, bag, cols, f);
}

extern "C" const char *un__cu_index_check(void *stream, const int64_t *id, int64_t n, int64_t limit,
                                          int64_t *bad) {
    LAUNCH_1D(n, k_index_check, id, n, limit, bad);
}

extern "C" const char *un__cu_cross_entropy(void *stream, const float *x, const int64_t *labels,
                                            int64_t rows, int64_t c, float *loss, float *grad,
                                            const float *g, float gscale, bool accumulate) {
    LAUNCH_ROWS(rows, c, k_ce, x, labels, rows, c, loss, grad, g, gscale, accumulate);
}

extern "C" const char *un__cu_mse(void *stream, int rank, const int64_t *pdim, const int64_t *off,
                                  const int64_t *full, const float *y, const float *t, float *grad,
                                  float *partial, int64_t n, float numel) {
    mse_dims d;
    d.rank = rank;
    for (int i = 0; i < rank; i++) {
        d.pdim[i] = pdim[i];
        d.off[i] = off[i];
        d.full[i] = full[i];
    }
    LAUNCH_1D(n, k_mse, d, y, t, grad, partial, n, numel);
}

extern "C" const char *un__cu_opt_step(void *stream, const un_cu_opt *o, float *w, const float *g,
                                       float *m, float *v, int64_t n) {
    LAUNCH_1D(n, k_opt, *o, w, g, m, v, n);
}

extern "C" const char *un__cu_im2col(void *stream, const un_cu_conv *g, const float *x,
                                     float *col) {
    LAUNCH_1D(g->C * g->KH * g->KW * g->N * g->OHW, k_im2col, *g, x, col);
}

extern "C" const char *un__cu_col2im(void *stream, const un_cu_conv *g, const float *col,
                                     float *dx) {
    LAUNCH_1D(g->N * g->C * g->H * g->W, k_col2im, *g, col, dx);
}

extern "C" const char *un__cu_chan_bias_act(void *stream, float *y, const float *bias, int64_t N,
                                            int64_t O, int64_t hw, int act) {
    LAUNCH_1D(N * O * hw, k_chan_bias_act, y, bias, N * O * hw, O, hw, act);
}

extern "C" const char *un__cu_chan_sum(void *stream, float *db, const float *d, int64_t N,
                                       int64_t O, int64_t hw) {
    LAUNCH_ROWS(O, N * hw, k_chan_sum, db, d, N, O, hw);
}

extern "C" const char *un__cu_pool_fwd(void *stream, const un_cu_pool *g, const float *x,
                                       float *y) {
    LAUNCH_1D(g->planes * g->OH * g->OW, k_pool_fwd, *g, x, y, g->planes * g->OH * g->OW);
}

extern "C" const char *un__cu_pool_bwd(void *stream, const un_cu_pool *g, const float *x,
                                       const float *dy, float *dx) {
    LAUNCH_1D(g->planes * g->OH * g->OW, k_pool_bwd, *g, x, dy, dx, g->planes * g->OH * g->OW);
}

extern "C" const char *un__cu_batch_norm(void *stream, const float *x, const float *gamma,
                                         const float *beta, float *y, const float *dy, float *dx,
                                         float *dgamma, float *dbeta, int64_t N, int64_t C,
                                         int64_t hw, bool bwd) {
    LAUNCH_ROWS(C, N * hw, k_bn, x, gamma, beta, y, dy, dx, dgamma, dbeta, C, hw, N * hw, bwd);
}

extern "C" const char *un__cu_to_bf16(void *stream, uint16_t *dst, const float *src, int64_t n) {
    LAUNCH_1D(n, k_to_bf16, dst, src, n);
}

/* ---- the plugin's table (backend.c finds it with dlsym after loading this library) ---------- */

#define UN__CU_ENTRY(ret, name, params) un__cu_##name,
static const un__cu_fns cu_fns = {UN__CU_SEAM(UN__CU_ENTRY)};
#undef UN__CU_ENTRY

extern "C" __attribute__((visibility("default"))) const un__cu_fns *un__cu_fns_get(void) {
    return &cu_fns;
}
