/* backend_cuda_rt.h - the seam between C and CUDA: plain C functions implemented in
 * backend_cuda.cu (the only file with cuda_runtime.h and cublas_v2.h; nvcc compiles it as C++,
 * hence the extern "C" guards). Handles are void pointers, so no CUDA type leaves the .cu.
 * Each call returns NULL on success or a static message naming what failed ("cudaMalloc: out of
 * memory"); backend_cuda.c turns it into a status (UN_CUDA) and never dereferences device memory.
 * Kernel launches take their arguments in the structs of backend_cuda_kern.h and are queued on
 * the given stream (asynchronous; errors of the launch itself are returned).
 *
 *   const char *err = un__cu_malloc(&p, n, &oom);            // device memory
 *   err = un__cu_ew_fwd(stream, &args);                      // y = f(x) on the stream
 *   err = un__cu_stream_sync(stream);
 */
#ifndef UN_BACKEND_CUDA_RT_H
#define UN_BACKEND_CUDA_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/backend_cuda_kern.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The seam as one list, X(return type, name, (parameters)): it declares the functions (defined
 * in backend_cuda.cu as un__cu_<name>) and the table of them that backend_cuda.cu exports from the
 * CUDA plugin (un__cu_fns_get) and backend.c loads on first GPU use (un__cu_seam). */
#define UN__CU_SEAM(X)                                                                             \
    /* ---- devices, memory, streams, events ---- */                                               \
    /* Number of CUDA devices (0 with the reason in *why when there is no usable driver or GPU).   \
     */                                                                                            \
    X(int, device_count, (const char **why))                                                       \
    /* The device's name into buf (NUL-terminated). */                                             \
    X(const char *, device_name, (int dev, char *buf, size_t cap))                                 \
    X(const char *, set_device, (int dev))                                                         \
    /* Free and total bytes of the current device's memory (cudaMemGetInfo). */                    \
    X(const char *, mem_info, (size_t * free_bytes, size_t * total_bytes))                         \
    /* n bytes of device memory; *oom tells an out-of-memory failure from others. */               \
    X(const char *, malloc, (void **p, size_t n, bool *oom))                                       \
    X(const char *, free, (void *p))                                                               \
    X(const char *, memset0, (void *stream, void *p, size_t n))                                    \
    /* Copies on stream: host to device, device to host (then waits: the host buffer is ready),    \
     * device to device. */                                                                        \
    X(const char *, h2d, (void *stream, void *dst, const void *src, size_t n))                     \
    X(const char *, d2h, (void *stream, void *dst, const void *src, size_t n))                     \
    X(const char *, d2d, (void *stream, void *dst, const void *src, size_t n))                     \
    X(const char *, stream_new, (void **s))                                                        \
    X(const char *, stream_free, (void *s))                                                        \
    X(const char *, stream_sync, (void *s))                                                        \
    X(const char *, event_new, (void **e))                                                         \
    X(const char *, event_free, (void *e))                                                         \
    X(const char *, event_record, (void *e, void *stream))                                         \
    /* Milliseconds between two recorded events (waits for the second). */                         \
    X(const char *, event_ms, (void *start, void *stop, float *ms))                                \
    /* ---- cuBLAS ---- */                                                                         \
    /* A handle bound to stream; tf32 allows TF32 tensor-core math for float32 products. */        \
    X(const char *, blas_new, (void **h, void *stream, bool tf32))                                 \
    X(const char *, blas_free, (void *h))                                                          \
    /* Row-major C[b] = alpha op(A[b]) op(B[b]) + beta C[b] for b < batch, each matrix stride_*    \
     * elements after the previous one (0 = the same matrix for every b). */                       \
    X(const char *, sgemm,                                                                         \
      (void *h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A,    \
       int64_t lda, int64_t stride_a, const float *B, int64_t ldb, int64_t stride_b, float beta,   \
       float *C, int64_t ldc, int64_t stride_c, int64_t batch))                                    \
    /* The same product with bfloat16 inputs A, B (uint16 bit patterns) and float32 C, float32     \
     * accumulation (benchmarks; the backend's matmuls stay float32 or TF32). */                   \
    X(const char *, gemm_bf16,                                                                     \
      (void *h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *A, \
       int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc))            \
    /* dst[i] = bfloat16(src[i]) (round to nearest even), n elements. */                           \
    X(const char *, to_bf16, (void *stream, uint16_t *dst, const float *src, int64_t n))           \
    /* ---- kernels (arguments: backend_cuda_kern.h) ---- */                                       \
    X(const char *, ew_fwd, (void *stream, const un_cu_ew_args *a))                                \
    X(const char *, ew_bwd, (void *stream, const un_cu_ew_args *a))                                \
    /* y = act(y + bias) over rows x cols; dpre = dy act'(pre, out); db += column sums of d. */    \
    X(const char *, bias_act,                                                                      \
      (void *stream, float *y, const float *bias, int64_t rows, int64_t cols, int act))            \
    X(const char *, act_back,                                                                      \
      (void *stream, float *dpre, const float *dy, const float *pre, const float *out, int64_t n,  \
       int act))                                                                                   \
    X(const char *, col_sum,                                                                       \
      (void *stream, float *db, const float *d, int64_t rows, int64_t cols))                       \
    /* Box copy of elements of es bytes (4 or 8), or accumulation of floats (es 4). */             \
    X(const char *, box,                                                                           \
      (void *stream, const un_cu_box *b, void *dst, const void *src, size_t es, bool accumulate))  \
    X(const char *, softmax_fwd, (void *stream, const un_cu_rows *g, const float *x, float *y))    \
    X(const char *, softmax_bwd,                                                                   \
      (void *stream, const un_cu_rows *g, const float *y, const float *dy, float *dx))             \
    X(const char *, reduce_fwd,                                                                    \
      (void *stream, const un_cu_rows *g, const float *x, float *y, float f))                      \
    X(const char *, reduce_bwd,                                                                    \
      (void *stream, const un_cu_rows *g, const float *dy, float *dx, float f))                    \
    /* layer_norm over rows of n: y and stats[2 rows] (mean, rs); backward dx (may be NULL),       \
     * dgamma, dbeta (either may be NULL) from the stats of the forward's recomputation. */        \
    X(const char *, layer_norm_fwd,                                                                \
      (void *stream, const float *x, const float *gamma, const float *beta, float *y,              \
       float *stats, int64_t rows, int64_t n))                                                     \
    X(const char *, layer_norm_bwd,                                                                \
      (void *stream, const float *x, const float *gamma, const float *dy, const float *stats,      \
       float *dx, float *dgamma, float *dbeta, int64_t rows, int64_t n))                           \
    X(const char *, embedding_fwd,                                                                 \
      (void *stream, const int64_t *id, const float *tab, float *y, int64_t nbags, int64_t bag,    \
       int64_t cols, float f))                                                                     \
    X(const char *, embedding_bwd,                                                                 \
      (void *stream, const int64_t *id, const float *dy, float *dtab, int64_t nbags, int64_t bag,  \
       int64_t cols, float f))                                                                     \
    /* The first position (row-major) of an index outside [0, limit) into *bad, a device int64 the \
     * caller set to n beforehand (it stays n when every index is in range). */                    \
    X(const char *, index_check,                                                                   \
      (void *stream, const int64_t *id, int64_t n, int64_t limit, int64_t *bad))                   \
    /* cross_entropy over rows of c logits: loss[r] = lse - x[r, label] (loss may be NULL); grad   \
     * (may be NULL) = or += g[r] (g NULL: gscale for every row) (softmax - onehot). */            \
    X(const char *, cross_entropy,                                                                 \
      (void *stream, const float *x, const int64_t *labels, int64_t rows, int64_t c, float *loss,  \
       float *grad, const float *g, float gscale, bool accumulate))                                \
    /* MSE of a piece (dims pdim at offset off in full) against the whole label t: grad = 2 d /    \
     * numel, per-block partial sums of d^2 into partial[grid] (grid = un_cu_geom_1d(n).grid). */  \
    X(const char *, mse,                                                                           \
      (void *stream, int rank, const int64_t *pdim, const int64_t *off, const int64_t *full,       \
       const float *y, const float *t, float *grad, float *partial, int64_t n, float numel))       \
    /* One optimizer update of n parameters (m: velocity or first moment, v: second moment). */    \
    X(const char *, opt_step,                                                                      \
      (void *stream, const un_cu_opt *o, float *w, const float *g, float *m, float *v, int64_t n)) \
    /* conv2d pieces: im2col of the g->N images at x into col [groups][K][N OHW]; its adjoint      \
     * added into dx; y = act(y + bias[channel]) over [N, O, hw]; db += per-channel sums of d. */  \
    X(const char *, im2col, (void *stream, const un_cu_conv *g, const float *x, float *col))       \
    X(const char *, col2im, (void *stream, const un_cu_conv *g, const float *col, float *dx))      \
    X(const char *, chan_bias_act,                                                                 \
      (void *stream, float *y, const float *bias, int64_t N, int64_t O, int64_t hw, int act))      \
    X(const char *, chan_sum,                                                                      \
      (void *stream, float *db, const float *d, int64_t N, int64_t O, int64_t hw))                 \
    X(const char *, pool_fwd, (void *stream, const un_cu_pool *g, const float *x, float *y))       \
    X(const char *, pool_bwd,                                                                      \
      (void *stream, const un_cu_pool *g, const float *x, const float *dy, float *dx))             \
    /* batch_norm over x [N, C, hw]: forward y, or (bwd) dx, dgamma, dbeta accumulated (each may   \
     * be NULL), the batch statistics recomputed. */                                               \
    X(const char *, batch_norm,                                                                    \
      (void *stream, const float *x, const float *gamma, const float *beta, float *y,              \
       const float *dy, float *dx, float *dgamma, float *dbeta, int64_t N, int64_t C, int64_t hw,  \
       bool bwd))

#define UN__CU_DECL(ret, name, params) ret un__cu_##name params;
UN__CU_SEAM(UN__CU_DECL)
#undef UN__CU_DECL

typedef struct un__cu_fns {
#define UN__CU_SLOT(ret, name, params) ret(*name) params;
    UN__CU_SEAM(UN__CU_SLOT)
#undef UN__CU_SLOT
} un__cu_fns;

/* The CUDA plugin's table (backend_cuda.cu, looked up by name after dlopen). */
const un__cu_fns *un__cu_fns_get(void);
/* The table, the plugin loaded on the first call (backend.c); NULL with the reason in *why (static:
 * a build without CUDA, or the plugin or a CUDA library it needs did not load). */
const un__cu_fns *un__cu_seam(const char **why);

#ifdef __cplusplus
}
#endif

#endif
