/* comm_dev.c - the device data plane's constructor (which backend offers one, agreed over the
 * control plane) and the public wrappers over its vtable (backend_impl.h). */
#include "runtime/comm_dev.h"

#include "runtime/backend_impl.h"

un_status un_comm_dev_new(un_ctx *ctx, un_comm *ctrl, un_backend *be, un_comm_dev **out) {
    *out = NULL;
    const struct un_backend_i *bi = be->iface;
    /* every rank says whether it can take part before any of them waits inside a plane's set-up */
    double ready = bi->plane_new && bi->plane_ready && bi->plane_ready(be, ctrl) ? 1.0 : 0.0;
    un_status st = un_comm_allreduce(ctx, ctrl, UN_RED_F64, &ready, 1);
    if (st != UN_OK || ready != (double)un_comm_size(ctrl))
        return st;
    un_comm_dev *d = NULL;
    st = un_comm_agree(ctx, ctrl, bi->plane_new(ctx, be, ctrl, &d));
    if (st != UN_OK) {
        un_comm_dev_free(d);
        return st;
    }
    *out = d;
    return UN_OK;
}

void un_comm_dev_free(un_comm_dev *d) {
    if (d)
        d->iface->free(d);
}

const char *un_comm_dev_name(const un_comm_dev *d) { return d->iface->name(d); }
un_comm *un_comm_dev_control(const un_comm_dev *d) { return d->ctrl; }

static void check_count(un_red_type t, int64_t n) {
    UN_ASSERT((unsigned)t < UN_RED_COUNT && n >= 0);
}

un_status un_comm_dev_allreduce(un_ctx *ctx, un_comm_dev *d, un_red_type t, void *buf, int64_t n) {
    check_count(t, n);
    if (n == 0 || un_comm_size(d->ctrl) == 1)
        return UN_OK;
    return d->iface->allreduce(ctx, d, t, buf, n);
}

un_status un_comm_dev_allgather(un_ctx *ctx, un_comm_dev *d, un_red_type t, const void *send,
                                void *recv, int64_t n) {
    check_count(t, n);
    return n ? d->iface->allgather(ctx, d, t, send, recv, n) : UN_OK;
}

un_status un_comm_dev_reduce_scatter(un_ctx *ctx, un_comm_dev *d, un_red_type t, const void *send,
                                     void *recv, int64_t n) {
    check_count(t, n);
    return n ? d->iface->reduce_scatter(ctx, d, t, send, recv, n) : UN_OK;
}

un_status un_comm_dev_bcast(un_ctx *ctx, un_comm_dev *d, int root, void *buf, size_t bytes) {
    UN_ASSERT(root >= 0 && root < un_comm_size(d->ctrl));
    if (bytes == 0 || un_comm_size(d->ctrl) == 1)
        return UN_OK;
    return d->iface->bcast(ctx, d, root, buf, bytes);
}

un_status un_comm_dev_exchange(un_ctx *ctx, un_comm_dev *d, const un_comm_msg *sends, int n_sends,
                               const un_comm_msg *recvs, int n_recvs) {
    int size = un_comm_size(d->ctrl), me = un_comm_rank(d->ctrl);
    for (int i = 0; i < n_sends + n_recvs; i++) {
        const un_comm_msg *m = i < n_sends ? &sends[i] : &recvs[i - n_sends];
        UN_ASSERT(m->peer >= 0 && m->peer < size && m->peer != me && !m->add);
    }
    if (n_sends + n_recvs == 0)
        return UN_OK;
    return d->iface->exchange(ctx, d, sends, n_sends, recvs, n_recvs);
}

un_status un_comm_dev_synchronize(un_ctx *ctx, un_comm_dev *d) {
    return d->iface->synchronize ? d->iface->synchronize(ctx, d) : UN_OK;
}

void un_comm_dev_abort(un_comm_dev *d) {
    if (d->iface->abort)
        d->iface->abort(d);
    un_comm_abort(d->ctrl);
}
