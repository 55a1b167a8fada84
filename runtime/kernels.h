/* kernels.h - the runtime's CPU kernels: forward and backward of every regular operator of
 * pcg/ops.def on one dense local piece, in float32 or float64 (OpenBLAS for the products). The
 * forward computes what pcg/kernels.c (the float64 reference) computes; the backward accumulates
 * input gradients. Parallel and source operators are not kernels (the executor moves data).
 *
 *   un_kexec ex = {.prec = UN_PREC_F32, .pool = pool, .seed = 0, .training = true};
 *   un_kt x = {UN_DT_FLOAT, 2, {4, 6}, xd}, w = {UN_DT_FLOAT, 2, {6, 8}, wd};
 *   un_kt y = {UN_DT_FLOAT, 2, {4, 8}, yd};
 *   st = un_kern_forward(ctx, &ex, UN_OP_LINEAR, params, (un_kt[]){x, w}, 2, &y, 1);
 *   st = un_kern_backward(ctx, &ex, UN_OP_LINEAR, params, (un_kt[]){x, w}, 2, &y, 1, &dy,
 *                         (un_kt[]){dx, dw});                 // dx += ..., dw += ...
 */
#ifndef UN_KERNELS_H
#define UN_KERNELS_H

#include "pcg/op.h" /* un_op, un_param, UN_MAX_*; pcg/shape.h: un_dtype, UN_MAX_DIMS */

typedef enum { UN_PREC_F32, UN_PREC_F64 } un_prec; /* element type of FLOAT tensors */

/* One dense, row-major, contiguous local piece. INT tensors always hold int64_t. */
typedef struct un_kt {
    un_dtype dtype; /* UN_DT_FLOAT or UN_DT_INT */
    int rank;
    int64_t dim[UN_MAX_DIMS];
    void *
        data; /* float* or double* (per un_kexec.prec) for FLOAT; int64_t* for INT; NULL = absent */
} un_kt;

typedef struct un_pool un_pool; /* runtime/pool.h: fixed thread pool, parallel-for */

/* What a forward keeps for its backward: a linear layer's gelu derivatives gelu'(pre), attention's
 * projections and probabilities, layer_norm's row mean and 1/std (PyTorch keeps the same or
 * more). Entries are keyed by the op and the addresses of its inputs and output (an executor that
 * reuses an output's memory for a later op's output, as exec.c's arena does, still gets one entry
 * per op; each op runs on the same buffers every step) and carry a fingerprint of the
 * op's parameters, shapes and input values: the backward uses an entry only when its call has
 * the same fingerprint (so inputs changed since the forward, or a backward without a forward,
 * recompute as without a stash) and the results are the same bits either way. linear's backward
 * writes dy gelu' over its entry, which is then invalid (a second backward recomputes). An
 * entry's memory is reused by the next forward of that op on the same buffers and held until
 * un_kstash_free. Calls
 * sharing a stash must not run concurrently. */
typedef struct un_kstash un_kstash;
un_kstash *un_kstash_new(void);    /* owned: free with un_kstash_free; aborts without memory */
void un_kstash_free(un_kstash *s); /* NULL is a no-op */
/* Bytes the stash holds (for memory reports and tests). */
size_t un_kstash_bytes(const un_kstash *s);

typedef struct un_kexec {
    un_prec prec;
    un_pool *pool; /* may be NULL: run on the calling thread */
    uint64_t
        seed; /* dropout: mask = counter-based hash of (seed, element index); same in backward */
    bool training; /* dropout active only when true */
    /* Optional, for dropout on a shard: the global offset of this piece in each dim of the input
     * and the logical (whole tensor) sizes, so that the mask is that of the whole tensor, as in
     * the reference evaluator. NULL = the piece is the whole tensor. */
    const int64_t *off;
    const int64_t *full;
    un_kstash *stash; /* may be NULL: every backward recomputes what it needs */
} un_kexec;

/* Forward of a regular op on one local piece: params are the per-piece params (un_infer.local),
 * in/out shapes are the local piece shapes (the caller allocated out[].data with the sizes
 * un_spec_infer gives for those local inputs). Optional inputs that are absent (linear or conv2d
 * without bias) are not passed (n_in smaller), as in pcg graphs.
 * Dropout's mask: element e (global row-major index g) is dropped when
 * mix64(hash_combine(s, g)) % 100 < rate_pct, with s = the op's `seed` parameter when ex->seed is
 * 0 (then it equals pcg's reference), else hash_combine(seed param, ex->seed).
 * Errors (one line in ctx naming the op, the tensor and the reason): UN_ERR_INVALID for a
 * parallel/source op, a wrong count, dtype or shape, a missing buffer, an index out of range;
 * UN_ERR_LIMIT for a matrix dim beyond OpenBLAS's int; UN_ERR_NOMEM for scratch memory (taken
 * through ctx's allocator). ctx may be NULL (no message). Calls for different pools or without
 * a pool may run concurrently. */
un_status un_kern_forward(un_ctx *ctx, const un_kexec *ex, un_op op, const un_param *params,
                          const un_kt *in, int n_in, un_kt *out, int n_out);

/* Backward: given inputs, forward outputs and output gradients dout[n_out] (a dout[j].data may be
 * NULL = zero gradient), ACCUMULATES (+=) the input gradients into din[i] (din[i].data == NULL =
 * gradient not wanted, e.g. INT inputs). din[i] has in[i]'s shape. An input passed twice (x * x,
 * self-attention) may share one gradient buffer: both contributions are added. out[] must hold
 * the forward outputs where the backward reads them (sigmoid, tanh, softmax, linear and conv2d
 * with relu/sigmoid/tanh); the others recompute what they need. No din may overlap an in, out or
 * dout. Errors as for the forward. */
un_status un_kern_backward(un_ctx *ctx, const un_kexec *ex, un_op op, const un_param *params,
                           const un_kt *in, int n_in, const un_kt *out, int n_out,
                           const un_kt *dout, un_kt *din);

/* Rows [r0, r1) of a linear layer's weight gradient (weight [in, out]) summed over n batch
 * pieces in order, WRITTEN (not added) to dw (row r0's first element, rows of out elements):
 * dw = sum_k x_k[:, r0:r1]^T dpre_k, k = 0, 1, ..., where dpre_k is the pre-activation gradient of
 * piece k from its output gradient dy[k] and forward output y[k] (x[k] [.., in], y[k] and dy[k]
 * [.., out], the same rows). The first piece's product is stored, the others' added in the BLAS
 * product (beta 1), so the rows have the bits of a gradient zeroed, then accumulated piece by
 * piece. Activation none, relu, sigmoid or tanh; gelu is UN_ERR_UNAVAILABLE (its derivative is in
 * the stash of whoever ran the piece's forward), and n = 0 only asks that (UN_OK: supported).
 * The pieces may be other ranks' buffers (the executor's chunked gradient, exec.c). */
un_status un_kern_linear_wgrad(un_ctx *ctx, const un_kexec *ex, const un_param *params, int n,
                               const un_kt *x, const un_kt *y, const un_kt *dy, int64_t r0,
                               int64_t r1, void *dw);

/* The training loss on logits [rows, c] (float or double per prec) with labels[rows] in [0, c)
 * (checked by the caller): returns the sum over rows of logsumexp(row) - row[label] (in double)
 * and writes (not adds) grad = (softmax(row) - onehot(label)) * gscale. */
double un_kern_ce_loss(un_prec prec, const void *logits, int64_t rows, int64_t c,
                       const int64_t *labels, double gscale, void *grad);

/* Which code runs a matrix product: the kernels' choice (UN_GEMM_AUTO: products of at most
 * un_kern_gemm_small_macs() multiply-adds in the runtime's small kernel, the others in OpenBLAS;
 * kernels_cpu.c says why), or one forced (benchmarks and tests): the small kernel as this CPU runs
 * it (AVX2 + FMA where it has both), OpenBLAS, or the small kernel's portable version (what a CPU
 * without AVX2 + FMA runs). */
typedef enum { UN_GEMM_AUTO, UN_GEMM_SMALL, UN_GEMM_BLAS, UN_GEMM_SMALL_PORTABLE } un_gemm_path;

/* C = alpha op(A) op(B) + beta C, row-major (op = transpose when ta / tb), as the CPU kernels
 * compute every product; dims and leading dims must fit in int. C is not read when beta is 0.
 * False (nothing done) only for a forced small kernel on a product it cannot take (alpha 0, or
 * op(B) beyond its 32 KiB buffer). */
bool un_kern_gemm_f32(un_gemm_path path, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc);
bool un_kern_gemm_f64(un_gemm_path path, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      double alpha, const double *A, int64_t lda, const double *B, int64_t ldb,
                      double beta, double *C, int64_t ldc);

/* ---- queries ---- */

/* The most multiply-adds of a product the small kernel takes under UN_GEMM_AUTO (depends on the
 * OpenBLAS kernel set that runs: 2^15, or 2^12 where that set has its own small-matrix path). */
int64_t un_kern_gemm_small_macs(void);

/* The parameter names the kernels read for op, in parameter-vector order (as in specs/ops.json);
 * NULL-terminated, static. Tests check them against the spec. */
const char *const *un_kern_param_names(un_op op);

/* Whether op has CPU kernels (every regular op does). */
bool un_kern_supports(un_op op);

/* Bytes the forward of op on these local pieces keeps in a stash for its backward (shapes and
 * params only; data may be NULL): the memory a stash holds after one forward of each op is the
 * sum over the calls. 0 for ops that keep nothing. */
size_t un_kern_stash_bytes(un_prec prec, un_op op, const un_param *params, const un_kt *in,
                           int n_in, const un_kt *out);

/* The most bytes one forward or backward call of op on these local pieces takes as scratch
 * through ctx's allocator at once (kernel workspace, freed before the call returns: conv2d's
 * im2col matrices, an activation's derivative, attention's gradients and per-thread blocks),
 * with the input gradients grads[i] wanted (NULL: every one; the runtime passes no gradient
 * for an input that needs none, such as the data into a model's first conv), on a pool of `threads`
 * threads, with (stash) or without a forward stash that holds what the backward reads (un_kstash).
 * Shapes and params only; data is compared, never read: multihead_attention whose three inputs have
 * one data pointer (not NULL) is self-attention (its weights are packed in scratch). The backward's
 * figure is the larger for every op. */
size_t un_kern_scratch_bytes(un_prec prec, un_op op, const un_param *params, const un_kt *in,
                             int n_in, const un_kt *out, const bool *grads, int threads,
                             bool stash);

/* Elements in a piece (product of dims); -1 if it exceeds UN_MAX_NUMEL or a dim is < 1. */
int64_t un_kt_numel(const un_kt *t);

#endif
