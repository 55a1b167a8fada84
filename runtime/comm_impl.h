/* comm_impl.h - the communicator vtable shared by comm.c, comm_local.c and comm_mpi.c (not API). */
#ifndef UN_COMM_IMPL_H
#define UN_COMM_IMPL_H

#include "runtime/comm.h"

#define UN_COMM_API_VERSION 1

struct un_comm_i {
    const char *(*name)(const un_comm *c);
    void (*free)(un_comm *c); /* optional: NULL = freed by its owner (local group) */
    un_status (*barrier)(un_ctx *ctx, un_comm *c);
    un_status (*allreduce)(un_ctx *ctx, un_comm *c, un_red_type t, void *buf, int64_t n);
    un_status (*bcast)(un_ctx *ctx, un_comm *c, int root, void *buf, size_t bytes);
    un_status (*exchange)(un_ctx *ctx, un_comm *c, const un_comm_msg *sends, int n_sends,
                          const un_comm_msg *recvs, int n_recvs);
    void (*abort)(un_comm *c); /* wakes or stops the other ranks after a local failure */
};

/* dst += src over `bytes` bytes of elements of type t (an add receive, comm.h). */
void un__comm_add(un_red_type t, void *dst, const void *src, size_t bytes);

struct un_comm {
    int api_version;
    const struct un_comm_i *iface;
    int rank, size;
    int node_size; /* ranks on this machine (sharing its cores) */
    int node_rank; /* this rank's index among them */
    void *context;
    un_comm_stats stats;  /* this rank's (comm.c; sleeps: the implementation) */
    un_comm_event *trace; /* un_comm_trace_start (comm.c); NULL: off */
    int64_t n_trace, cap_trace, dropped;
};

#endif
