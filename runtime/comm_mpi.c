/* comm_mpi.c - the `mpi` communicator: one process per rank, MPI_COMM_WORLD. The only file that
 * includes mpi.h (STYLE rule 2); MPI errors become UN_ERR_DEVICE with MPI's own message. */
#include <mpi.h>
#include <stdlib.h>

#include "runtime/comm_impl.h"

typedef struct mpi_state {
    bool we_initialised;
} mpi_state;

static un_status mpi_status(un_ctx *ctx, int rc, const char *what) {
    if (rc == MPI_SUCCESS)
        return UN_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return un_ctx_error(ctx, UN_ERR_DEVICE, "mpi: %s: %.*s", what, len, msg);
}

static const char *mpi_name(const un_comm *c) {
    (void)c;
    return "mpi";
}

static void mpi_free(un_comm *c) {
    mpi_state *s = c->context;
    if (s->we_initialised) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin)
            MPI_Finalize();
    }
    free(s);
    free(c);
}

static un_status mpi_barrier(un_ctx *ctx, un_comm *c) {
    (void)c;
    return mpi_status(ctx, MPI_Barrier(MPI_COMM_WORLD), "barrier");
}

static un_status mpi_allreduce(un_ctx *ctx, un_comm *c, un_red_type t, void *buf, int64_t n) {
    (void)c;
    MPI_Datatype dt = t == UN_RED_F32 ? MPI_FLOAT : MPI_DOUBLE;
    size_t es = t == UN_RED_F32 ? sizeof(float) : sizeof(double);
    for (int64_t off = 0; off < n;) { /* MPI counts are int */
        int cnt = (int)(n - off > (1 << 30) ? (1 << 30) : n - off);
        un_status st = mpi_status(ctx,
                                  MPI_Allreduce(MPI_IN_PLACE, (char *)buf + (size_t)off * es, cnt,
                                                dt, MPI_SUM, MPI_COMM_WORLD),
                                  "allreduce");
        if (st != UN_OK)
            return st;
        off += cnt;
    }
    return UN_OK;
}

static un_status mpi_bcast(un_ctx *ctx, un_comm *c, int root, void *buf, size_t bytes) {
    (void)c;
    for (size_t off = 0; off < bytes;) {
        int cnt = (int)(bytes - off > (1u << 30) ? (1u << 30) : bytes - off);
        un_status st = mpi_status(
            ctx, MPI_Bcast((char *)buf + off, cnt, MPI_BYTE, root, MPI_COMM_WORLD), "bcast");
        if (st != UN_OK)
            return st;
        off += (size_t)cnt;
    }
    return UN_OK;
}

static un_status mpi_exchange(un_ctx *ctx, un_comm *c, const un_comm_msg *sends, int n_sends,
                              const un_comm_msg *recvs, int n_recvs) {
    (void)c;
    int n = n_sends + n_recvs;
    if (n == 0)
        return UN_OK;
    MPI_Request *req = un_xcalloc((size_t)n, sizeof *req);
    void **land = un_xcalloc((size_t)n_recvs + 1, sizeof *land); /* add receives: their stage */
    un_status st = UN_OK;
    int k = 0;
    for (int i = 0; i < n_recvs && st == UN_OK; i++, k++) {
        land[i] = recvs[i].data;
        if (recvs[i].add)
            land[i] = recvs[i].stage ? recvs[i].stage : un_xmalloc(recvs[i].bytes + 1);
        if (recvs[i].bytes > (size_t)1 << 30)
            st = un_ctx_error(ctx, UN_ERR_LIMIT, "mpi: message of %zu bytes", recvs[i].bytes);
        else
            st = mpi_status(ctx,
                            MPI_Irecv(land[i], (int)recvs[i].bytes, MPI_BYTE, recvs[i].peer,
                                      recvs[i].tag, MPI_COMM_WORLD, &req[k]),
                            "irecv");
    }
    for (int i = 0; i < n_sends && st == UN_OK; i++, k++) {
        if (sends[i].bytes > (size_t)1 << 30)
            st = un_ctx_error(ctx, UN_ERR_LIMIT, "mpi: message of %zu bytes", sends[i].bytes);
        else
            st = mpi_status(ctx,
                            MPI_Isend(sends[i].data, (int)sends[i].bytes, MPI_BYTE, sends[i].peer,
                                      sends[i].tag, MPI_COMM_WORLD, &req[k]),
                            "isend");
    }
    if (st == UN_OK)
        st = mpi_status(ctx, MPI_Waitall(k, req, MPI_STATUSES_IGNORE), "waitall");
    for (int i = 0; i < n_recvs; i++) { /* the adds, in list order */
        if (!recvs[i].add || !land[i])
            continue;
        if (st == UN_OK)
            un__comm_add(recvs[i].type, recvs[i].data, land[i], recvs[i].bytes);
        if (!recvs[i].stage)
            free(land[i]);
    }
    free(land);
    free(req);
    return st;
}

static void mpi_abort(un_comm *c) {
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static const struct un_comm_i mpi_iface = {
    .name = mpi_name,
    .free = mpi_free,
    .barrier = mpi_barrier,
    .allreduce = mpi_allreduce,
    .bcast = mpi_bcast,
    .exchange = mpi_exchange,
    .abort = mpi_abort,
};

un_status un_comm_mpi_new(un_ctx *ctx, un_comm **out) {
    *out = NULL;
    int init = 0;
    MPI_Initialized(&init);
    bool ours = false;
    if (!init) {
        if (MPI_Init(NULL, NULL) != MPI_SUCCESS)
            return un_ctx_error(ctx, UN_ERR_UNAVAILABLE, "mpi: MPI_Init failed");
        ours = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int node_size = 1, node_rank = 0; /* the ranks that share this machine's memory (MPI-3) */
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_size(node, &node_size);
        MPI_Comm_rank(node, &node_rank);
        MPI_Comm_free(&node);
    }
    mpi_state *s = un_xcalloc(1, sizeof *s);
    s->we_initialised = ours;
    un_comm *c = un_xcalloc(1, sizeof *c);
    *c = (un_comm){.api_version = UN_COMM_API_VERSION,
                   .iface = &mpi_iface,
                   .rank = rank,
                   .size = size,
                   .node_size = node_size,
                   .node_rank = node_rank,
                   .context = s};
    *out = c;
    return UN_OK;
}
