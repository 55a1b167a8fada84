/* backend.h - a device backend: memory for pieces, the data movement the parallel operators
 * need (block copies, accumulation), and forward/backward of regular operators on one piece.
 * A backend is a const vtable plus a context (backend_impl.h, STYLE rule 19); the CPU backend
 * (backend_cpu.c) runs the float32/float64 kernels of kernels.h on a thread pool; a CUDA backend
 * plugs into the same slots. The executor (exec.h) only talks to this interface.
 *
 *   un_backend *be;
 *   st = un_backend_cpu_new(ctx, UN_PREC_F32, 2, &be);   // 2 threads
 *   void *p; st = un_backend_alloc(ctx, be, 4096, &p);    // zeroed device memory
 *   un_backend_release(be, p);
 *   un_backend_free(be);
 */
#ifndef UN_BACKEND_H
#define UN_BACKEND_H

#include "runtime/kernels.h"

typedef enum { UN_DEV_CPU, UN_DEV_CUDA, UN_DEV_COUNT } un_dev_kind;

typedef struct un_backend un_backend;

/* A block copy between two dense row-major pieces: `len` elements per dim, read from src at
 * src_off, written to (or added into) dst at dst_off. */
typedef struct un_region {
    int rank;
    int64_t src_dim[UN_MAX_DIMS], src_off[UN_MAX_DIMS];
    int64_t dst_dim[UN_MAX_DIMS], dst_off[UN_MAX_DIMS];
    int64_t len[UN_MAX_DIMS];
} un_region;

/* ---- lifecycle ---- */

/* The CPU backend: kernels in precision prec on a pool of nthreads threads (the caller counts).
 * Owned: free with un_backend_free. */
un_status un_backend_cpu_new(un_ctx *ctx, un_prec prec, int nthreads, un_backend **out);
void un_backend_free(un_backend *be);

/* ---- queries ---- */

const char *un_backend_name(const un_backend *be); /* static */
un_dev_kind un_backend_kind(const un_backend *be);
un_prec un_backend_prec(const un_backend *be);
bool un_backend_supports_op(const un_backend *be, un_op op);
/* Whether host code may read and write this backend's memory directly (CPU: yes). */
bool un_backend_host_visible(const un_backend *be);

/* ---- memory and data movement ---- */

/* Zeroed device memory of nbytes (> 0); UN_ERR_NOMEM when it cannot be had. Free with
 * un_backend_release. */
un_status un_backend_alloc(un_ctx *ctx, un_backend *be, size_t nbytes, void **out);
void un_backend_release(un_backend *be, void *p); /* NULL is a no-op */
void un_backend_zero(un_backend *be, void *p, size_t nbytes);
/* Host <-> device copies (asserting n bytes stay inside what the caller owns). */
void un_backend_write(un_backend *be, void *dst, const void *host_src, size_t n);
void un_backend_read(un_backend *be, void *host_dst, const void *src, size_t n);
/* Block copy (accumulate false) or accumulation (true; FLOAT data in the backend's precision)
 * of elements of es bytes. */
void un_backend_copy_region(un_backend *be, void *dst, const void *src, size_t es,
                            const un_region *r, bool accumulate);

/* ---- compute ---- */

/* Forward and backward of a regular op on local pieces (kernels.h contracts). dropout_seed is
 * mixed into dropout's mask; off/full give the piece's place in the whole tensor (may be NULL). */
un_status un_backend_op_forward(un_ctx *ctx, un_backend *be, un_op op, const un_param *params,
                                const un_kt *in, int n_in, un_kt *out, int n_out,
                                uint64_t dropout_seed, const int64_t *off, const int64_t *full);
un_status un_backend_op_backward(un_ctx *ctx, un_backend *be, un_op op, const un_param *params,
                                 const un_kt *in, int n_in, const un_kt *out, int n_out,
                                 const un_kt *dout, un_kt *din, uint64_t dropout_seed,
                                 const int64_t *off, const int64_t *full);
/* Waits for queued work (no-op for synchronous backends). */
un_status un_backend_synchronize(un_ctx *ctx, un_backend *be);

#endif
