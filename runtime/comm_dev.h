/* comm_dev.h - the communicator's device data plane: collectives and point-to-point transfers of
 * backend memory between ranks, without staging it through host memory. The host control plane
 * (agree, barrier, broadcast, abort of host memory) stays the un_comm of comm.h (local threads
 * or MPI); a backend that is not host-visible may offer a data plane over it (backend_impl.h's
 * plane slots): the CUDA backend NCCL on its stream (comm_nccl.h), the opaque backend its own
 * (the communicator moving the memory behind its device addresses, so that tests without a GPU
 * run the executor on a device plane). Buffers are device addresses of the plane's backend
 * (un_buffer_at); calls are collective over the group like comm.h's and may return once queued
 * on the backend's stream (un_comm_dev_synchronize waits; later work on that backend is ordered
 * after them).
 *
 *   un_comm_dev *d;
 *   st = un_comm_dev_new(ctx, comm, be, &d);                   // collective; d NULL: none offered
 *   if (d) st = un_comm_dev_allreduce(ctx, d, UN_RED_F32, un_buffer_at(b, 0), n);
 *   un_comm_dev_free(d);
 */
#ifndef UN_COMM_DEV_H
#define UN_COMM_DEV_H

#include "runtime/comm.h"

typedef struct un_comm_dev un_comm_dev;
typedef struct un_backend un_backend;

/* ---- lifecycle ---- */

/* The data plane of be's memory over ctrl's group (collective: every rank calls it with its own
 * backend). *out = NULL and UN_OK when not every rank's backend offers one here (a host-visible
 * backend, a build or machine without NCCL, the opaque backend made with `staged`): the caller
 * stages through host memory then. Both are borrowed and must outlive the result. A failure to
 * set up a plane that was offered is an error on every rank. Owned: free with un_comm_dev_free. */
un_status un_comm_dev_new(un_ctx *ctx, un_comm *ctrl, un_backend *be, un_comm_dev **out);
/* Frees the plane (not ctrl, not the backend); NULL is a no-op. */
void un_comm_dev_free(un_comm_dev *d);

/* ---- queries ---- */

const char *un_comm_dev_name(const un_comm_dev *d); /* "nccl", "opaque"; static */
un_comm *un_comm_dev_control(const un_comm_dev *d); /* the host control plane (borrowed) */

/* ---- device collectives ---- */

/* In-place sum over ranks of n elements of device buffer buf (every rank: the same bits). */
un_status un_comm_dev_allreduce(un_ctx *ctx, un_comm_dev *d, un_red_type t, void *buf, int64_t n);
/* recv[size * n] = every rank's send[n], in rank order. */
un_status un_comm_dev_allgather(un_ctx *ctx, un_comm_dev *d, un_red_type t, const void *send,
                                void *recv, int64_t n);
/* recv[n] = block `rank` of the sum over ranks of send[size * n]. */
un_status un_comm_dev_reduce_scatter(un_ctx *ctx, un_comm_dev *d, un_red_type t, const void *send,
                                     void *recv, int64_t n);
/* Broadcast of bytes of a device buffer from root. */
un_status un_comm_dev_bcast(un_ctx *ctx, un_comm_dev *d, int root, void *buf, size_t bytes);
/* A round of point-to-point messages of device buffers (comm.h's un_comm_exchange: messages
 * between one pair match by tag; a rank may not send to itself; no add receives). */
un_status un_comm_dev_exchange(un_ctx *ctx, un_comm_dev *d, const un_comm_msg *sends, int n_sends,
                               const un_comm_msg *recvs, int n_recvs);
/* Waits until everything queued is done. */
un_status un_comm_dev_synchronize(un_ctx *ctx, un_comm_dev *d);
/* After a local failure: ends the plane's pending work and aborts the control plane
 * (un_comm_abort). Not collective. */
void un_comm_dev_abort(un_comm_dev *d);

#endif
