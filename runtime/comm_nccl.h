/* comm_nccl.h - the communicator's device data plane: collectives and point-to-point transfers of
 * device memory between GPUs, on a CUDA stream, over NCCL. The host control plane (agree,
 * barrier, broadcast, abort) stays the un_comm of comm.h (local threads or MPI); it bootstraps
 * NCCL by broadcasting rank 0's unique id, so one process per GPU over MPI (several machines) and
 * one thread per GPU of one process (local) both work. Buffers are device pointers of the CUDA
 * backend; calls are collective over the group like comm.h's and return once queued on the
 * stream (un_comm_dev_synchronize waits). Without NCCL in the build, or with no GPU, the
 * constructor answers UN_ERR_UNAVAILABLE with one line saying why.
 *
 *   un_comm_dev *d;
 *   st = un_comm_nccl_new(ctx, ctrl, un_comm_rank(ctrl) % un_comm_node_size(ctrl), &d);
 *   st = un_comm_dev_allreduce(ctx, d, UN_RED_F32, dbuf, n);      // sum over ranks, in place
 *   st = un_comm_dev_synchronize(ctx, d);
 *   un_comm_dev_free(d);
 */
#ifndef UN_COMM_NCCL_H
#define UN_COMM_NCCL_H

#include "runtime/comm.h"

typedef struct un_comm_dev un_comm_dev;

/* ---- lifecycle ---- */

/* The device data plane of ctrl's group on CUDA device `device` of this machine (collective
 * over ctrl: every rank calls it). ctrl is borrowed and must outlive the result. stream is the
 * CUDA stream (cudaStream_t) the transfers are queued on, or NULL for one the communicator owns.
 * UN_ERR_UNAVAILABLE: a build without NCCL, or no such device; UN_ERR_DEVICE: NCCL or CUDA
 * failed (the message names the call). Owned: free with un_comm_dev_free. */
un_status un_comm_nccl_new(un_ctx *ctx, un_comm *ctrl, int device, void *stream, un_comm_dev **out);
/* Frees the NCCL communicator (not ctrl); NULL is a no-op. */
void un_comm_dev_free(un_comm_dev *d);

/* ---- queries ---- */

un_comm *un_comm_dev_control(const un_comm_dev *d); /* the host control plane (borrowed) */
int un_comm_dev_device(const un_comm_dev *d);       /* the CUDA device it drives */

/* ---- device collectives (queued on the stream) ---- */

/* In-place sum over ranks of n elements of device buffer buf. */
un_status un_comm_dev_allreduce(un_ctx *ctx, un_comm_dev *d, un_red_type t, void *buf, int64_t n);
/* recv[size * n] = every rank's send[n], in rank order. */
un_status un_comm_dev_allgather(un_ctx *ctx, un_comm_dev *d, un_red_type t, const void *send,
                                void *recv, int64_t n);
/* recv[n] = block `rank` of the sum over ranks of send[size * n]. */
un_status un_comm_dev_reduce_scatter(un_ctx *ctx, un_comm_dev *d, un_red_type t, const void *send,
                                     void *recv, int64_t n);
/* Broadcast of bytes of a device buffer from root. */
un_status un_comm_dev_bcast(un_ctx *ctx, un_comm_dev *d, int root, void *buf, size_t bytes);
/* A round of point-to-point messages of device buffers (comm.h's un_comm_msg; tags are not
 * needed by NCCL: messages between one pair match in order). A rank may not send to itself. */
un_status un_comm_dev_exchange(un_ctx *ctx, un_comm_dev *d, const un_comm_msg *sends, int n_sends,
                               const un_comm_msg *recvs, int n_recvs);
/* Waits until everything queued on the stream is done. */
un_status un_comm_dev_synchronize(un_ctx *ctx, un_comm_dev *d);
/* After a local failure: aborts the NCCL communicator (pending collectives end) and the control
 * plane (un_comm_abort). Not collective. */
void un_comm_dev_abort(un_comm_dev *d);

#endif
