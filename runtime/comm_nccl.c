/* comm_nccl.c - the device data plane of comm_nccl.h: NCCL bootstrapped over the host control
 * plane (rank 0's unique id broadcast with un_comm_bcast, agreement with un_comm_agree), and the
 * collectives converting NCCL's failures into statuses. NCCL itself is reached through the seam
 * table of comm_nccl_rt.h, which a build without NCCL does not have (UN_ERR_UNAVAILABLE). */
#include "runtime/comm_nccl.h"

#include <stdlib.h>

#include "runtime/comm_nccl_rt.h"

struct un_comm_dev {
    const un__nccl_fns *fn;
    un_comm *ctrl; /* borrowed */
    int device;
    void *comm, *stream;
    bool own_stream;
};

/* UN_OK, or records "nccl: <what failed>" and returns UN_ERR_DEVICE. */
static un_status nccl_st(un_ctx *ctx, const char *err) {
    return err ? un_ctx_error(ctx, UN_ERR_DEVICE, "nccl: %s", err) : UN_OK;
}

un_status un_comm_nccl_new(un_ctx *ctx, un_comm *ctrl, int device, void *stream,
                           un_comm_dev **out) {
    *out = NULL;
    const un__nccl_fns *fn = un__nccl_seam();
    un_status st = UN_OK;
    const char *why = NULL;
    if (!fn)
        st = un_ctx_error(ctx, UN_ERR_UNAVAILABLE,
                          "nccl: this build has no NCCL (needs nvcc and nccl.h; see make's CUDA "
                          "line)");
    else if (device < 0 || device >= fn->device_count(&why))
        st = un_ctx_error(ctx, UN_ERR_UNAVAILABLE, "nccl: CUDA device %d is not available (%s)",
                          device, why ? why : "fewer devices");
    /* every rank learns whether all can take part before anyone waits inside NCCL */
    st = un_comm_agree(ctx, ctrl, st);
    if (st != UN_OK)
        return st;
    unsigned char id[UN_NCCL_ID_BYTES] = {0};
    if (un_comm_rank(ctrl) == 0)
        st = nccl_st(ctx, fn->get_id(id));
    if ((st = un_comm_agree(ctx, ctrl, st)) != UN_OK)
        return st;
    if ((st = un_comm_bcast(ctx, ctrl, 0, id, sizeof id)) != UN_OK)
        return st;
    un_comm_dev *d = un_xmalloc(sizeof *d);
    *d = (un_comm_dev){.fn = fn, .ctrl = ctrl, .device = device, .stream = stream};
    st = nccl_st(ctx, fn->init(&d->comm, un_comm_size(ctrl), id, un_comm_rank(ctrl), device,
                               &d->stream, &d->own_stream));
    if ((st = un_comm_agree(ctx, ctrl, st)) != UN_OK) {
        if (d->comm)
            fn->abort(d->comm);
        fn->free(NULL, d->stream, d->own_stream);
        free(d);
        return st;
    }
    *out = d;
    return UN_OK;
}

void un_comm_dev_free(un_comm_dev *d) {
    if (!d)
        return;
    d->fn->free(d->comm, d->stream, d->own_stream);
    free(d);
}

un_comm *un_comm_dev_control(const un_comm_dev *d) { return d->ctrl; }
int un_comm_dev_device(const un_comm_dev *d) { return d->device; }

/* Elements of type t that fit in size_t bytes (n >= 0 asserted). */
static size_t count(un_red_type t, int64_t n) {
    UN_ASSERT((unsigned)t < UN_RED_COUNT && n >= 0);
    return (size_t)n;
}

un_status un_comm_dev_allreduce(un_ctx *ctx, un_comm_dev *d, un_red_type t, void *buf, int64_t n) {
    size_t k = count(t, n);
    if (k == 0 || un_comm_size(d->ctrl) == 1)
        return UN_OK;
    return nccl_st(ctx, d->fn->allreduce(d->comm, d->stream, (int)t, buf, k));
}

un_status un_comm_dev_allgather(un_ctx *ctx, un_comm_dev *d, un_red_type t, const void *send,
                                void *recv, int64_t n) {
    size_t k = count(t, n);
    return k ? nccl_st(ctx, d->fn->allgather(d->comm, d->stream, (int)t, send, recv, k)) : UN_OK;
}

un_status un_comm_dev_reduce_scatter(un_ctx *ctx, un_comm_dev *d, un_red_type t, const void *send,
                                     void *recv, int64_t n) {
    size_t k = count(t, n);
    return k ? nccl_st(ctx, d->fn->reduce_scatter(d->comm, d->stream, (int)t, send, recv, k))
             : UN_OK;
}

un_status un_comm_dev_bcast(un_ctx *ctx, un_comm_dev *d, int root, void *buf, size_t bytes) {
    UN_ASSERT(root >= 0 && root < un_comm_size(d->ctrl));
    if (bytes == 0 || un_comm_size(d->ctrl) == 1)
        return UN_OK;
    return nccl_st(ctx, d->fn->bcast(d->comm, d->stream, root, buf, bytes));
}

un_status un_comm_dev_exchange(un_ctx *ctx, un_comm_dev *d, const un_comm_msg *sends, int n_sends,
                               const un_comm_msg *recvs, int n_recvs) {
    int size = un_comm_size(d->ctrl), me = un_comm_rank(d->ctrl), n = n_sends + n_recvs;
    if (n == 0)
        return UN_OK;
    int *peer = un_xcalloc((size_t)n, sizeof *peer);
    void **buf = un_xcalloc((size_t)n, sizeof *buf);
    size_t *bytes = un_xcalloc((size_t)n, sizeof *bytes);
    for (int i = 0; i < n; i++) {
        const un_comm_msg *m = i < n_sends ? &sends[i] : &recvs[i - n_sends];
        UN_ASSERT(m->peer >= 0 && m->peer < size && m->peer != me);
        peer[i] = m->peer, buf[i] = m->data, bytes[i] = m->bytes;
    }
    un_status st =
        nccl_st(ctx, d->fn->sendrecv(d->comm, d->stream, n_sends, peer, buf, bytes, n_recvs,
                                     peer + n_sends, buf + n_sends, bytes + n_sends));
    free(peer);
    free(buf);
    free(bytes);
    return st;
}

un_status un_comm_dev_synchronize(un_ctx *ctx, un_comm_dev *d) {
    return nccl_st(ctx, d->fn->sync(d->stream));
}

void un_comm_dev_abort(un_comm_dev *d) {
    if (d->comm)
        d->fn->abort(d->comm); /* the communicator is gone: un_comm_dev_free only frees d */
    d->comm = NULL;
    un_comm_abort(d->ctrl);
}
