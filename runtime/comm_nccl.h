/* comm_nccl.h - NCCL as a device data plane (comm_dev.h): collectives and point-to-point
 * transfers of CUDA device memory on a stream, bootstrapped over the host control plane by
 * broadcasting rank 0's unique id, so one process per GPU over MPI (several machines) and one
 * thread per GPU of one process (local) both work. The CUDA backend offers it (its plane slots:
 * its device and its stream, so transfers are ordered with its kernels); NCCL's library is loaded
 * on first use (backend.c), and without NCCL in the build or on the machine, or with no GPU, the
 * constructor answers UN_ERR_UNAVAILABLE with one line saying why.
 *
 *   un_comm_dev *d;
 *   st = un_comm_nccl_new(ctx, ctrl, un_comm_node_rank(ctrl) % gpus, NULL, &d);
 *   st = un_comm_dev_allreduce(ctx, d, UN_RED_F32, dbuf, n);      // sum over ranks, in place
 *   st = un_comm_dev_synchronize(ctx, d);
 *   un_comm_dev_free(d);
 */
#ifndef UN_COMM_NCCL_H
#define UN_COMM_NCCL_H

#include "runtime/comm_dev.h"

/* Whether NCCL can be had here for CUDA device `device` (its library loads, the device is there),
 * without talking to other ranks; *why (static) says why not. */
bool un_comm_nccl_ready(int device, const char **why);
/* The NCCL data plane of ctrl's group on CUDA device `device` of this machine (collective over
 * ctrl: every rank calls it). ctrl is borrowed and must outlive the result. stream is the CUDA
 * stream (cudaStream_t) the transfers are queued on, or NULL for one the plane owns.
 * UN_ERR_UNAVAILABLE: no NCCL, or no such device; UN_ERR_DEVICE: NCCL or CUDA failed (the message
 * names the call). Owned: free with un_comm_dev_free. */
un_status un_comm_nccl_new(un_ctx *ctx, un_comm *ctrl, int device, void *stream, un_comm_dev **out);

#endif
