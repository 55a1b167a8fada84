/* comm_nccl.c - NCCL as the device data plane of comm_dev.h: bootstrapped over the host control
 * plane (rank 0's unique id broadcast with un_comm_bcast, agreement with un_comm_agree), the
 * collectives converting NCCL's failures into statuses. NCCL itself is reached through the seam
 * table of comm_nccl_rt.h, loaded on first use by the registry (backend.c); without it the
 * constructor answers UN_ERR_UNAVAILABLE. */
#include "runtime/comm_nccl.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/backend_impl.h"
#include "runtime/comm_nccl_rt.h"

typedef struct nccl_plane {
    const un__nccl_fns *fn;
    int device;
    void *comm, *stream;
    bool own_stream;
} nccl_plane;

static nccl_plane *P(const un_comm_dev *d) { return d->context; }

/* UN_OK, or records "nccl: <what failed>" and returns UN_ERR_DEVICE. */
static un_status nccl_st(un_ctx *ctx, const char *err) {
    return err ? un_ctx_error(ctx, UN_ERR_DEVICE, "nccl: %s", err) : UN_OK;
}

bool un_comm_nccl_ready(int device, const char **why) {
    const char *w = NULL;
    const un__nccl_fns *fn = un__nccl_seam(&w);
    bool ok = fn && device >= 0 && device < fn->device_count(&w);
    if (!ok && why)
        *why = w ? w : "fewer CUDA devices";
    return ok;
}

static const char *nccl_name(const un_comm_dev *d) {
    (void)d;
    return "nccl";
}

static void nccl_free(un_comm_dev *d) {
    nccl_plane *p = P(d);
    p->fn->free(p->comm, p->stream, p->own_stream);
    free(p);
    free(d);
}

static un_status nccl_allreduce(un_ctx *ctx, un_comm_dev *d, un_red_type t, void *buf, int64_t n) {
    nccl_plane *p = P(d);
    return nccl_st(ctx, p->fn->allreduce(p->comm, p->stream, (int)t, buf, (size_t)n));
}

static un_status nccl_allgather(un_ctx *ctx, un_comm_dev *d, un_red_type t, const void *send,
                                void *recv, int64_t n) {
    nccl_plane *p = P(d);
    return nccl_st(ctx, p->fn->allgather(p->comm, p->stream, (int)t, send, recv, (size_t)n));
}

static un_status nccl_reduce_scatter(un_ctx *ctx, un_comm_dev *d, un_red_type t, const void *send,
                                     void *recv, int64_t n) {
    nccl_plane *p = P(d);
    return nccl_st(ctx, p->fn->reduce_scatter(p->comm, p->stream, (int)t, send, recv, (size_t)n));
}

static un_status nccl_bcast(un_ctx *ctx, un_comm_dev *d, int root, void *buf, size_t bytes) {
    nccl_plane *p = P(d);
    return nccl_st(ctx, p->fn->bcast(p->comm, p->stream, root, buf, bytes));
}

/* Messages in (peer, tag) order: NCCL matches the messages between one pair in the order they are
 * posted, comm.h's exchange by tag, so both sides post them sorted. */
static int by_peer_tag(const void *a, const void *b) {
    const un_comm_msg *x = a, *y = b;
    if (x->peer != y->peer)
        return x->peer < y->peer ? -1 : 1;
    return (x->tag > y->tag) - (x->tag < y->tag);
}

static void msgs_sorted(const un_comm_msg *m, int n, int *peer, void **buf, size_t *bytes) {
    un_comm_msg *c = un_xcalloc((size_t)n + 1, sizeof *c);
    if (n)
        memcpy(c, m, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, by_peer_tag);
    for (int i = 0; i < n; i++)
        peer[i] = c[i].peer, buf[i] = c[i].data, bytes[i] = c[i].bytes;
    free(c);
}

static un_status nccl_exchange(un_ctx *ctx, un_comm_dev *d, const un_comm_msg *sends, int n_sends,
                               const un_comm_msg *recvs, int n_recvs) {
    nccl_plane *p = P(d);
    int n = n_sends + n_recvs;
    int *peer = un_xcalloc((size_t)n, sizeof *peer);
    void **buf = un_xcalloc((size_t)n, sizeof *buf);
    size_t *bytes = un_xcalloc((size_t)n, sizeof *bytes);
    msgs_sorted(sends, n_sends, peer, buf, bytes);
    msgs_sorted(recvs, n_recvs, peer + n_sends, buf + n_sends, bytes + n_sends);
    un_status st =
        nccl_st(ctx, p->fn->sendrecv(p->comm, p->stream, n_sends, peer, buf, bytes, n_recvs,
                                     peer + n_sends, buf + n_sends, bytes + n_sends));
    free(peer);
    free(buf);
    free(bytes);
    return st;
}

static un_status nccl_synchronize(un_ctx *ctx, un_comm_dev *d) {
    return nccl_st(ctx, P(d)->fn->sync(P(d)->stream));
}

static void nccl_abort(un_comm_dev *d) {
    nccl_plane *p = P(d);
    if (p->comm)
        p->fn->abort(p->comm); /* the communicator is gone: free only releases the stream */
    p->comm = NULL;
}

static const struct un_comm_dev_i nccl_iface = {
    .name = nccl_name,
    .free = nccl_free,
    .allreduce = nccl_allreduce,
    .allgather = nccl_allgather,
    .reduce_scatter = nccl_reduce_scatter,
    .bcast = nccl_bcast,
    .exchange = nccl_exchange,
    .synchronize = nccl_synchronize,
    .abort = nccl_abort,
};

un_status un_comm_nccl_new(un_ctx *ctx, un_comm *ctrl, int device, void *stream,
                           un_comm_dev **out) {
    *out = NULL;
    const char *why = NULL;
    un_status st = UN_OK;
    if (!un_comm_nccl_ready(device, &why))
        st = un_ctx_error(ctx, UN_ERR_UNAVAILABLE, "nccl: not available for CUDA device %d (%s)",
                          device, why ? why : "?");
    /* every rank learns whether all can take part before anyone waits inside NCCL */
    st = un_comm_agree(ctx, ctrl, st);
    if (st != UN_OK)
        return st;
    const un__nccl_fns *fn = un__nccl_seam(NULL);
    unsigned char id[UN_NCCL_ID_BYTES] = {0};
    if (un_comm_rank(ctrl) == 0)
        st = nccl_st(ctx, fn->get_id(id));
    if ((st = un_comm_agree(ctx, ctrl, st)) != UN_OK)
        return st;
    if ((st = un_comm_bcast(ctx, ctrl, 0, id, sizeof id)) != UN_OK)
        return st;
    nccl_plane *p = un_xcalloc(1, sizeof *p);
    *p = (nccl_plane){.fn = fn, .device = device, .stream = stream};
    st = nccl_st(ctx, fn->init(&p->comm, un_comm_size(ctrl), id, un_comm_rank(ctrl), device,
                               &p->stream, &p->own_stream));
    if ((st = un_comm_agree(ctx, ctrl, st)) != UN_OK) {
        if (p->comm)
            fn->abort(p->comm);
        fn->free(NULL, p->stream, p->own_stream);
        free(p);
        return st;
    }
    un_comm_dev *d = un_xcalloc(1, sizeof *d);
    *d = (un_comm_dev){
        .api_version = UN_BACKEND_API_VERSION, .iface = &nccl_iface, .ctrl = ctrl, .context = p};
    *out = d;
    return UN_OK;
}
