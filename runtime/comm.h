/* comm.h - the communication layer: a group of devices (ranks) that run the same program and
 * exchange data. Two implementations behind one small vtable (comm_impl.h, STYLE rule 20):
 * `local` (threads of one process, each thread one rank; no set-up) and `mpi` (one process per
 * rank, launched by mpirun). Every call is collective over the group unless it says otherwise;
 * every rank must make the same calls in the same order.
 *
 *   un_comm_group *grp;  un_comm_local_group_new(ctx, 4, &grp);     // 4 thread ranks
 *   un_comm *c = un_comm_local_get(grp, rank);                      // in thread `rank`
 *   un_comm_allreduce(ctx, c, UN_RED_F32, buf, n);                  // sum over ranks
 *   un_comm_local_group_free(grp);
 */
#ifndef UN_COMM_H
#define UN_COMM_H

#include "pcg/un.h"

typedef struct un_comm un_comm;
typedef struct un_comm_group un_comm_group;

typedef enum { UN_RED_F32, UN_RED_F64, UN_RED_COUNT } un_red_type;

/* One point-to-point message of an exchange: to `peer` (send) or from `peer` (receive); tags
 * match a send to its receive between one pair of ranks. A receive with `add` set adds the
 * message into data element-wise (elements of `type`) instead of overwriting it: the `local`
 * communicator adds straight from the sender's buffer (no copy), `mpi` receives into `stage`
 * (bytes of host memory the caller gives) and adds from there. A rank's add receives into one
 * buffer are applied in the order of its receive list. */
typedef struct un_comm_msg {
    int peer;
    int tag;
    void *data;
    size_t bytes;
    bool add;         /* receive only: data += message */
    un_red_type type; /* of an add's elements */
    void *stage;      /* an add's landing place where the transport cannot add in place */
} un_comm_msg;

/* ---- lifecycle ---- */

/* A group of n thread ranks in this process. Owned: free with un_comm_local_group_free after
 * every rank's thread is done with its handle. */
un_status un_comm_local_group_new(un_ctx *ctx, int n, un_comm_group **out);
void un_comm_local_group_free(un_comm_group *g);
/* Rank r's handle (borrowed, valid until the group is freed); use it from one thread only. */
un_comm *un_comm_local_get(un_comm_group *g, int r);

/* The MPI world of this process (initialises MPI if needed). UN_ERR_UNAVAILABLE when MPI cannot be
 * initialised. Owned: free with un_comm_free (finalises MPI if this call initialised it). */
un_status un_comm_mpi_new(un_ctx *ctx, un_comm **out);
/* Frees an MPI communicator; NULL is a no-op. Local handles are freed with their group. */
void un_comm_free(un_comm *c);
/* Whether this process was started by mpirun (looks at the launcher's environment only). */
bool un_comm_mpi_launched(void);

/* ---- queries ---- */

const char *un_comm_name(const un_comm *c); /* "local" or "mpi"; static */
int un_comm_rank(const un_comm *c);
int un_comm_size(const un_comm *c);
/* Ranks running on this machine, this one included (they share its cores). */
int un_comm_node_size(const un_comm *c);
/* This rank's index among them (0 .. node_size - 1): which of the machine's GPUs it takes. */
int un_comm_node_rank(const un_comm *c);

/* What this rank's calls of the collectives below cost so far: a local communicator's ranks
 * are threads that meet in every call, and on a box with idle cores a meet's sleep and wake-up
 * is most of a small step (search/README.md, "Meets"). */
typedef struct un_comm_stats {
    int64_t meets;       /* calls of un_comm_barrier/allreduce/bcast/exchange with another rank */
    int64_t sleeps;      /* waits in them that went to sleep, for the others or for the local
                          * group's lock (local: after the spin; mpi: 0) */
    int64_t lock_sleeps; /* of those, the sleeps for the local group's lock */
    int64_t unpolled;    /* of those, the sleeps with no poll before them: un_pool_spin_ns
                          * said 0 (its load rule, or UN_SPIN_US=0) */
    double seconds;      /* wall time in them */
} un_comm_stats;
un_comm_stats un_comm_stats_get(const un_comm *c);

/* A rank's meet trace, for finding which rank a meet waits for and what it ran before it: when
 * on, every meet (the calls counted in un_comm_stats) records its arrival ("arrive") and its
 * release ("release") at un_now_s, and un_comm_mark records a label of the caller's (what runs
 * from then on). Off (the default): a branch per meet, a clock read per mark. A local group's ranks
 * share one clock, so rank a's arrival minus rank b's at the same meet is the skew. */
typedef struct un_comm_event {
    const char *what; /* static: "arrive", "release" or a mark */
    double t;         /* un_now_s */
} un_comm_event;
/* Turns the trace on (from now, cleared) with room for cap events; later events are dropped. */
void un_comm_trace_start(un_comm *c, int64_t cap);
/* The time now (un_now_s), recorded under the label `what` when the trace is on: one clock for
 * the trace and the caller's own phase times (runtime/train.c). */
double un_comm_mark(un_comm *c, const char *what);
/* The events so far (borrowed; NULL and 0 when off); dropped: events that did not fit. */
const un_comm_event *un_comm_trace(const un_comm *c, int64_t *n, int64_t *dropped);

/* ---- collectives ---- */

un_status un_comm_barrier(un_ctx *ctx, un_comm *c);
/* In-place sum over ranks of n elements; every rank ends with bitwise identical results. */
un_status un_comm_allreduce(un_ctx *ctx, un_comm *c, un_red_type t, void *buf, int64_t n);
/* Broadcast of bytes from rank root to all. */
un_status un_comm_bcast(un_ctx *ctx, un_comm *c, int root, void *buf, size_t bytes);
/* A round of point-to-point messages: this rank's sends and receives (either list may be empty;
 * every rank calls it). Returns when this rank's receives are complete and its send buffers may
 * be reused. A rank may send to itself only through a matching receive from itself. */
un_status un_comm_exchange(un_ctx *ctx, un_comm *c, const un_comm_msg *sends, int n_sends,
                           const un_comm_msg *recvs, int n_recvs);
/* Called by a rank that failed in the middle of a collective program: the other ranks' pending and
 * later calls fail (local: they return UN_ERR_DEVICE; mpi: the job is aborted). Not collective. */
void un_comm_abort(un_comm *c);
/* Any rank's failure makes every rank fail: all ranks pass their local status and get UN_OK only
 * if every rank passed UN_OK (otherwise UN_ERR_DEVICE, or the local error). Keeps the ranks in
 * step after an error on one of them. */
un_status un_comm_agree(un_ctx *ctx, un_comm *c, un_status local);

#endif
