/* backend.h - a device backend: memory for pieces, the data movement the parallel operators
 * need (block copies, accumulation), forward/backward of regular operators on one piece, the
 * loss on an output piece and the optimizer update. A backend is a const vtable plus a context
 * (backend_impl.h, STYLE rule 19); the CPU backend (backend_cpu.c) runs the float32/float64
 * kernels of kernels.h on a thread pool; a CUDA backend plugs into the same slots
 * (un_backend_cuda_new is UN_ERR_UNAVAILABLE in a build without it). Host code moves data in and
 * out of backend memory only through sized buffers (un_buffer: write, read, copy, also between
 * two backends), never by dereferencing a device address.
 *
 * Left out for now (a device backend may add them as new slots at the end of the vtable): streams
 * and asynchronous copies (every call here completes before it returns, except that a device
 * backend may queue copy_region and report its failure at the next synchronize), peer-to-peer
 * copies between two devices (un_buffer_copy stages through host memory), pinned host memory.
 *
 *   un_backend *be;
 *   un_buffer *b;
 *   st = un_backend_cpu_new(ctx, UN_PREC_F32, 2, &be);        // 2 threads
 *   st = un_buffer_new(ctx, be, 16 * sizeof(float), &b);       // zeroed device memory
 *   st = un_buffer_write(ctx, b, 0, host, 16 * sizeof(float)); // host -> device
 *   st = un_buffer_read(ctx, b, 0, host, 16 * sizeof(float));  // device -> host
 *   un_buffer_free(b);
 *   un_backend_free(be);
 */
#ifndef UN_BACKEND_H
#define UN_BACKEND_H

#include "runtime/kernels.h"

typedef enum { UN_DEV_CPU, UN_DEV_CUDA, UN_DEV_COUNT } un_dev_kind;

typedef struct un_backend un_backend;
typedef struct un_buffer un_buffer;             /* sized backend memory (below) */
typedef struct un_optim_params un_optim_params; /* runtime/optim.h */
typedef struct un_optim_seg un_optim_seg;       /* runtime/optim.h */

/* The losses the trainer computes on an output piece. */
typedef enum { UN_LOSS_CE, UN_LOSS_MSE, UN_LOSS_COUNT } un_loss_kind;

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
/* The opaque backend: the CPU backend's kernels behind memory the host cannot reach (device
 * addresses in a range reserved with no access, so any host dereference faults, and each slot
 * asserts that the addresses it is given are its own). Not host-visible, like a GPU: runs on it
 * prove that host code reaches backend memory only through this interface, and give the CPU
 * backend's results bit for bit. Owned: free with un_backend_free. */
un_status un_backend_opaque_new(un_ctx *ctx, un_prec prec, int nthreads, un_backend **out);
/* The opaque backend's options: by default it offers a device data plane (comm_dev.h: the
 * communicator moves its memory without host staging, as NCCL moves a GPU's) and takes memory
 * until its address range (16 GiB) is used up. */
typedef struct un_backend_opaque_opts {
    bool staged;       /* offer no device data plane: exchanges are staged through host memory */
    int64_t mem_limit; /* bytes it may hold at once (0: no limit); more is UN_ERR_NOMEM, and
                          un_backend_memory answers the limit minus what it holds */
} un_backend_opaque_opts;
un_status un_backend_opaque_new_opts(un_ctx *ctx, un_prec prec, int nthreads,
                                     const un_backend_opaque_opts *o, un_backend **out);
/* Parses a --backend value "opaque[:OPT[,OPT]]" with OPT "staged" or "mem=SIZE" (SIZE bytes with
 * an optional K, M or G suffix, powers of 1024) into *o; anything else is UN_ERR_INVALID naming
 * the value. */
un_status un_backend_opaque_opts_parse(un_ctx *ctx, const char *spec, un_backend_opaque_opts *o);
/* Whether a --backend value names the opaque backend ("opaque" or "opaque:..."). */
bool un_backend_is_opaque(const char *spec);
/* The CUDA backend on GPU `device`: UN_ERR_UNAVAILABLE (one line naming the reason) in a build
 * without CUDA or on a machine without that device. Owned: free with un_backend_free. */
un_status un_backend_cuda_new(un_ctx *ctx, un_prec prec, int device, un_backend **out);
void un_backend_free(un_backend *be);

/* ---- queries ---- */

const char *un_backend_name(const un_backend *be); /* static */
un_dev_kind un_backend_kind(const un_backend *be);
un_prec un_backend_prec(const un_backend *be);
bool un_backend_supports_op(const un_backend *be, un_op op);
/* Whether host code may read and write this backend's memory directly (CPU: yes). */
bool un_backend_host_visible(const un_backend *be);
/* The memory this backend can still allocate (*avail, bytes) and whether it is the machine's host
 * memory, shared by every backend of the processes on it (*host): CPU: MemAvailable, host; CUDA:
 * the device's free memory (cudaMemGetInfo), not host; opaque: its limit minus what it holds
 * (not host), or host memory without a limit. UN_ERR_DEVICE when it cannot be asked. */
un_status un_backend_memory(un_ctx *ctx, un_backend *be, int64_t *avail, bool *host);

/* ---- buffers: sized backend memory, the only way host code reaches it ---- */

/* A zeroed buffer of nbytes (> 0) on be; UN_ERR_NOMEM when it cannot be had. Owned: free with
 * un_buffer_free (NULL is a no-op); the backend must outlive it. */
un_status un_buffer_new(un_ctx *ctx, un_backend *be, size_t nbytes, un_buffer **out);
void un_buffer_free(un_buffer *b);
size_t un_buffer_size(const un_buffer *b);
un_backend *un_buffer_backend(const un_buffer *b);
/* The device address of byte off (off <= size), for un_kt.data and the calls below that take
 * device addresses. Host code must not dereference it (unless un_backend_host_visible). */
void *un_buffer_at(const un_buffer *b, size_t off);
/* Host -> buffer and buffer -> host copies of n bytes at off; a range beyond the buffer is a
 * broken invariant (UN_ASSERT), a device failure a status. */
un_status un_buffer_write(un_ctx *ctx, un_buffer *b, size_t off, const void *host_src, size_t n);
un_status un_buffer_read(un_ctx *ctx, const un_buffer *b, size_t off, void *host_dst, size_t n);
un_status un_buffer_zero(un_ctx *ctx, un_buffer *b, size_t off, size_t n);
/* n bytes from src at soff to dst at doff: within one backend by its own copy, between two
 * backends through host memory (both host-visible: directly). The ranges may overlap only within
 * one buffer (memmove semantics). */
un_status un_buffer_copy(un_ctx *ctx, un_buffer *dst, size_t doff, const un_buffer *src,
                         size_t soff, size_t n);

/* ---- raw memory and data movement (the executor's pieces; device addresses) ---- */

/* Zeroed device memory of nbytes (> 0); UN_ERR_NOMEM when it cannot be had. Free with
 * un_backend_release. */
un_status un_backend_alloc(un_ctx *ctx, un_backend *be, size_t nbytes, void **out);
void un_backend_release(un_backend *be, void *p); /* NULL is a no-op */
void un_backend_zero(un_backend *be, void *p, size_t nbytes);
/* Host <-> device copies of n bytes (the caller owns both ranges; un_buffer_write/read check
 * them against the buffer). */
un_status un_backend_write(un_ctx *ctx, un_backend *be, void *dst, const void *host_src, size_t n);
un_status un_backend_read(un_ctx *ctx, un_backend *be, void *host_dst, const void *src, size_t n);
/* Block copy (accumulate false) or accumulation (true; FLOAT data in the backend's precision)
 * of elements of es bytes. */
void un_backend_copy_region(un_backend *be, void *dst, const void *src, size_t es,
                            const un_region *r, bool accumulate);

/* The same block copy or accumulation between two host arrays (FLOAT data in precision prec
 * when accumulating): the CPU backend's copy_region, and the executor's packing of pieces in
 * host memory before they are written to (or after they are read from) a backend. */
void un_region_copy_host(un_prec prec, void *dst, const void *src, size_t es, const un_region *r,
                         bool accumulate);

/* ---- compute ---- */

/* Forward and backward of a regular op on local pieces (kernels.h contracts). dropout_seed is
 * mixed into dropout's mask; off/full give the piece's place in the whole tensor (may be NULL). */
un_status un_backend_op_forward(un_ctx *ctx, un_backend *be, un_op op, const un_param *params,
                                const un_kt *in, int n_in, un_kt *out, int n_out,
                                uint64_t dropout_seed, const int64_t *off, const int64_t *full);
/* Rows [r0, r1) of a linear layer's weight gradient summed over n batch pieces in order, written
 * to dw (un_kern_linear_wgrad's contract): the pieces may be other ranks' buffers where ranks share
 * this backend kind's memory (threads of one process on host-visible backends: the executor's
 * chunked gradient). UN_ERR_UNAVAILABLE where the backend has none or for gelu; n = 0 only asks. */
un_status un_backend_linear_wgrad(un_ctx *ctx, un_backend *be, const un_param *params, int n,
                                  const un_kt *x, const un_kt *y, const un_kt *dy, int64_t r0,
                                  int64_t r1, void *dw);
un_status un_backend_op_backward(un_ctx *ctx, un_backend *be, un_op op, const un_param *params,
                                 const un_kt *in, int n_in, const un_kt *out, int n_out,
                                 const un_kt *dout, un_kt *din, uint64_t dropout_seed,
                                 const int64_t *off, const int64_t *full);
/* The loss on one output piece y (FLOAT, local sizes y->dim) whose block starts at off[] in the
 * whole output of sizes full[] (off NULL = the piece is the whole output). CE: y holds logits of
 * shape [rows, classes] and target the int64_t labels of all full[0] rows; MSE: target holds the
 * whole output (full sizes, the backend's precision). Writes (not adds) into grad (y's shape) the
 * gradient of the mean loss (over full[0] rows for CE, over every element for MSE) and into
 * *loss the sum of this piece's terms (double on the host). */
un_status un_backend_loss(un_ctx *ctx, un_backend *be, un_loss_kind kind, const un_kt *y,
                          const int64_t *off, const int64_t *full, const un_kt *target, un_kt *grad,
                          double *loss);
/* One optimizer update of the segments' elements of w and g in backend memory: w -= f(g) with
 * state m (SGD velocity or Adam's first moment) and v (Adam's second moment; NULL for SGD), the
 * state compact (segment k's follows segment k-1's); t is the update's number (1 for the first;
 * Adam's bias correction, computed once for all the segments). */
un_status un_backend_optim_step(un_ctx *ctx, un_backend *be, const un_optim_params *p, int64_t t,
                                const un_optim_seg *segs, int n_segs, void *w, const void *g,
                                void *m, void *v);
/* Waits for queued work (no-op for synchronous backends). */
un_status un_backend_synchronize(un_ctx *ctx, un_backend *be);

/* Timing of the work queued on be between un_backend_timer_start and un_backend_timer_stop
 * (seconds into *sec): the device's own clock where the backend has one (CUDA events: kernel
 * time, not the host's launch time), else the host clock from a synchronised start to a
 * synchronised end. One timing at a time per backend. */
typedef struct un_backend_timer {
    double host_start; /* the host clock's start (backends without their own clock) */
} un_backend_timer;
un_status un_backend_timer_start(un_ctx *ctx, un_backend *be, un_backend_timer *t);
un_status un_backend_timer_stop(un_ctx *ctx, un_backend *be, un_backend_timer *t, double *sec);

#endif
