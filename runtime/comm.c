/* comm.c - public wrappers over the communicator vtable. */
#include "runtime/comm.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/comm_impl.h"

const char *un_comm_name(const un_comm *c) { return c->iface->name(c); }
int un_comm_rank(const un_comm *c) { return c->rank; }
int un_comm_size(const un_comm *c) { return c->size; }
int un_comm_node_size(const un_comm *c) { return c->node_size; }
int un_comm_node_rank(const un_comm *c) { return c->node_rank; }

void un_comm_free(un_comm *c) {
    if (c && c->iface->free) {
        free(c->trace);
        c->trace = NULL;
        c->iface->free(c);
    }
}

un_comm_stats un_comm_stats_get(const un_comm *c) { return c->stats; }

void un_comm_trace_start(un_comm *c, int64_t cap) {
    free(c->trace);
    c->trace = un_xcalloc((size_t)(cap > 0 ? cap : 1), sizeof *c->trace);
    c->cap_trace = cap > 0 ? cap : 1;
    c->n_trace = c->dropped = 0;
}

static void trace_add(un_comm *c, const char *what, double t) {
    if (c->n_trace < c->cap_trace)
        c->trace[c->n_trace++] = (un_comm_event){what, t};
    else
        c->dropped++;
}

double un_comm_mark(un_comm *c, const char *what) {
    double t = un_now_s();
    if (c->trace)
        trace_add(c, what, t);
    return t;
}

const un_comm_event *un_comm_trace(const un_comm *c, int64_t *n, int64_t *dropped) {
    *n = c->n_trace;
    *dropped = c->dropped;
    return c->trace;
}

/* A call that meets the other ranks (it arrived at t0): counted and timed into c->stats. */
static un_status meet_end(un_comm *c, double t0, un_status st) {
    double t1 = un_now_s();
    c->stats.meets++;
    c->stats.seconds += t1 - t0;
    if (c->trace) {
        trace_add(c, "arrive", t0);
        trace_add(c, "release", t1);
    }
    return st;
}

un_status un_comm_barrier(un_ctx *ctx, un_comm *c) {
    if (c->size == 1)
        return c->iface->barrier(ctx, c);
    double t0 = un_now_s();
    return meet_end(c, t0, c->iface->barrier(ctx, c));
}

un_status un_comm_allreduce(un_ctx *ctx, un_comm *c, un_red_type t, void *buf, int64_t n) {
    UN_ASSERT((unsigned)t < UN_RED_COUNT && n >= 0);
    if (c->size == 1 || n == 0)
        return UN_OK;
    double t0 = un_now_s();
    return meet_end(c, t0, c->iface->allreduce(ctx, c, t, buf, n));
}

un_status un_comm_bcast(un_ctx *ctx, un_comm *c, int root, void *buf, size_t bytes) {
    UN_ASSERT(root >= 0 && root < c->size);
    if (c->size == 1 || bytes == 0)
        return UN_OK;
    double t0 = un_now_s();
    return meet_end(c, t0, c->iface->bcast(ctx, c, root, buf, bytes));
}

un_status un_comm_exchange(un_ctx *ctx, un_comm *c, const un_comm_msg *sends, int n_sends,
                           const un_comm_msg *recvs, int n_recvs) {
    for (int i = 0; i < n_sends; i++)
        UN_ASSERT(sends[i].peer >= 0 && sends[i].peer < c->size);
    for (int i = 0; i < n_recvs; i++)
        UN_ASSERT(recvs[i].peer >= 0 && recvs[i].peer < c->size &&
                  (!recvs[i].add || (unsigned)recvs[i].type < UN_RED_COUNT));
    bool meets = false; /* only ranks with messages meet (comm.h) */
    for (int i = 0; i < n_sends && !meets; i++)
        meets = sends[i].peer != c->rank;
    for (int i = 0; i < n_recvs && !meets; i++)
        meets = recvs[i].peer != c->rank;
    if (!meets)
        return c->iface->exchange(ctx, c, sends, n_sends, recvs, n_recvs);
    double t0 = un_now_s();
    return meet_end(c, t0, c->iface->exchange(ctx, c, sends, n_sends, recvs, n_recvs));
}

/* dst += src over n elements of T: 32 bytes at a time as a vector (GCC/Clang vector extensions;
 * -O2 leaves the plain loop scalar), then the rest. */
#define COMM_ADD_FN(NAME, T)                                                                       \
    static void NAME(T *d, const T *s, size_t n) {                                                 \
        typedef T vec __attribute__((vector_size(32)));                                            \
        size_t i = 0, w = sizeof(vec) / sizeof(T);                                                 \
        for (; i + w <= n; i += w) {                                                               \
            vec a, b;                                                                              \
            memcpy(&a, d + i, sizeof a);                                                           \
            memcpy(&b, s + i, sizeof b);                                                           \
            a += b;                                                                                \
            memcpy(d + i, &a, sizeof a);                                                           \
        }                                                                                          \
        for (; i < n; i++)                                                                         \
            d[i] += s[i];                                                                          \
    }
COMM_ADD_FN(comm_add_f32, float)
COMM_ADD_FN(comm_add_f64, double)

void un__comm_add(un_red_type t, void *dst, const void *src, size_t bytes) {
    if (t == UN_RED_F32)
        comm_add_f32(dst, src, bytes / sizeof(float));
    else
        comm_add_f64(dst, src, bytes / sizeof(double));
}

void un_comm_abort(un_comm *c) {
    if (c->size > 1)
        c->iface->abort(c);
}

un_status un_comm_agree(un_ctx *ctx, un_comm *c, un_status local) {
    double v = local == UN_OK ? 0.0 : 1.0;
    un_status st = un_comm_allreduce(ctx, c, UN_RED_F64, &v, 1);
    if (st != UN_OK)
        return st;
    if (local != UN_OK)
        return local;
    if (v != 0.0)
        return un_ctx_error(ctx, UN_ERR_DEVICE, "another rank failed");
    return UN_OK;
}

bool un_comm_mpi_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL ||
           getenv("PMIX_RANK") != NULL;
}
