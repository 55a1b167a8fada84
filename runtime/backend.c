/* backend.c - the backend constructors and the public wrappers over the vtable. A CUDA backend
 * (its own issue) adds its constructor here behind UN_USE_CUDA (STYLE rule 4). */
#include "runtime/backend.h"

#include "runtime/backend_cuda.h"
#include "runtime/backend_cuda_rt.h"
#include "runtime/backend_impl.h"
#include "runtime/comm_nccl_rt.h"

un_status un_backend_cpu_new(un_ctx *ctx, un_prec prec, int nthreads, un_backend **out) {
    return un__backend_cpu_new(ctx, prec, nthreads, out);
}

void un_backend_free(un_backend *be) {
    if (be)
        be->iface->free(be);
}

const char *un_backend_name(const un_backend *be) { return be->iface->name(be); }
un_dev_kind un_backend_kind(const un_backend *be) { return be->kind; }
un_prec un_backend_prec(const un_backend *be) { return be->prec; }
bool un_backend_host_visible(const un_backend *be) { return be->host_visible; }

bool un_backend_supports_op(const un_backend *be, un_op op) {
    return (unsigned)op < UN_OP_COUNT && be->iface->supports_op(be, op);
}

un_status un_backend_alloc(un_ctx *ctx, un_backend *be, size_t nbytes, void **out) {
    UN_ASSERT(nbytes > 0);
    return be->iface->alloc(ctx, be, nbytes, out);
}

void un_backend_release(un_backend *be, void *p) {
    if (p)
        be->iface->release(be, p);
}

void un_backend_zero(un_backend *be, void *p, size_t nbytes) {
    if (nbytes)
        be->iface->zero(be, p, nbytes);
}

void un_backend_write(un_backend *be, void *dst, const void *host_src, size_t n) {
    if (n)
        be->iface->write(be, dst, host_src, n);
}

void un_backend_read(un_backend *be, void *host_dst, const void *src, size_t n) {
    if (n)
        be->iface->read(be, host_dst, src, n);
}

void un_backend_copy_region(un_backend *be, void *dst, const void *src, size_t es,
                            const un_region *r, bool accumulate) {
    UN_ASSERT(r->rank >= 0 && r->rank <= UN_MAX_DIMS);
    for (int i = 0; i < r->rank; i++)
        UN_ASSERT(r->len[i] >= 0 && r->src_off[i] + r->len[i] <= r->src_dim[i] &&
                  r->dst_off[i] + r->len[i] <= r->dst_dim[i]);
    be->iface->copy_region(be, dst, src, es, r, accumulate);
}

un_status un_backend_op_forward(un_ctx *ctx, un_backend *be, un_op op, const un_param *params,
                                const un_kt *in, int n_in, un_kt *out, int n_out,
                                uint64_t dropout_seed, const int64_t *off, const int64_t *full) {
    return be->iface->op_forward(ctx, be, op, params, in, n_in, out, n_out, dropout_seed, off,
                                 full);
}

un_status un_backend_op_backward(un_ctx *ctx, un_backend *be, un_op op, const un_param *params,
                                 const un_kt *in, int n_in, const un_kt *out, int n_out,
                                 const un_kt *dout, un_kt *din, uint64_t dropout_seed,
                                 const int64_t *off, const int64_t *full) {
    return be->iface->op_backward(ctx, be, op, params, in, n_in, out, n_out, dout, din,
                                  dropout_seed, off, full);
}

un_status un_backend_synchronize(un_ctx *ctx, un_backend *be) {
    return be->iface->synchronize ? be->iface->synchronize(ctx, be) : UN_OK;
}

/* ---- CUDA ---- */

#ifdef UN_USE_CUDA
int un_backend_cuda_devices(const char **why) { return un__cu_device_count(why); }

un_status un_backend_cuda_new(un_ctx *ctx, un_prec prec, int device, un_backend **out) {
    return un__backend_cuda_new(ctx, prec, device, out);
}

un_status un_backend_cuda_new_opts(un_ctx *ctx, un_prec prec, int device, bool tf32,
                                   un_backend **out) {
    return un__backend_cuda_new_opts(ctx, prec, device, tf32, out);
}
#else
int un_backend_cuda_devices(const char **why) {
    if (why)
        *why = "this build has no CUDA (nvcc was not found or CUDA=0)";
    return 0;
}

un_status un_backend_cuda_new(un_ctx *ctx, un_prec prec, int device, un_backend **out) {
    return un_backend_cuda_new_opts(ctx, prec, device, false, out);
}

un_status un_backend_cuda_new_opts(un_ctx *ctx, un_prec prec, int device, bool tf32,
                                   un_backend **out) {
    (void)prec, (void)device, (void)tf32;
    *out = NULL;
    return un_ctx_error(ctx, UN_ERR_UNAVAILABLE,
                        "cuda backend: this build has no CUDA (nvcc was not found or CUDA=0)");
}
#endif

/* ---- the NCCL seam (comm_nccl.c reaches NCCL only through this table) ---- */

#ifdef UN_USE_NCCL
static const un__nccl_fns nccl_fns = {
    .get_id = un__nccl_get_id,
    .init = un__nccl_init,
    .free = un__nccl_free,
    .abort = un__nccl_abort,
    .allreduce = un__nccl_allreduce,
    .allgather = un__nccl_allgather,
    .reduce_scatter = un__nccl_reduce_scatter,
    .bcast = un__nccl_bcast,
    .sendrecv = un__nccl_sendrecv,
    .sync = un__nccl_sync,
    .device_count = un__nccl_device_count,
};
const un__nccl_fns *un__nccl_seam(void) { return &nccl_fns; }
#else
const un__nccl_fns *un__nccl_seam(void) { return NULL; }
#endif
