/* comm_nccl_rt.h - the C seam over NCCL, implemented in comm_nccl.cu (the only file with nccl.h);
 * comm_nccl.c builds the data plane of comm_nccl.h on it. Handles are void pointers; each call
 * returns NULL or a static message naming the failed call ("ncclAllReduce: unhandled cuda
 * error"). Element types: 0 float32, 1 float64 (un_red_type's order). */
#ifndef UN_COMM_NCCL_RT_H
#define UN_COMM_NCCL_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UN_NCCL_ID_BYTES 128 /* = NCCL_UNIQUE_ID_BYTES (checked in comm_nccl.cu) */

const char *un__nccl_get_id(void *id /* UN_NCCL_ID_BYTES */);
/* Sets the device, makes a stream when *stream is NULL (*own_stream tells), joins the group. */
const char *un__nccl_init(void **comm, int nranks, const void *id, int rank, int device,
                          void **stream, bool *own_stream);
const char *un__nccl_free(void *comm, void *stream, bool own_stream);
const char *un__nccl_abort(void *comm);
const char *un__nccl_allreduce(void *comm, void *stream, int type, void *buf, size_t n);
const char *un__nccl_allgather(void *comm, void *stream, int type, const void *send, void *recv,
                               size_t n);
const char *un__nccl_reduce_scatter(void *comm, void *stream, int type, const void *send,
                                    void *recv, size_t n);
const char *un__nccl_bcast(void *comm, void *stream, int root, void *buf, size_t bytes);
/* One group of sends and receives (bytes each) with peers. */
const char *un__nccl_sendrecv(void *comm, void *stream, int n_sends, const int *send_peer,
                              void *const *send_buf, const size_t *send_bytes, int n_recvs,
                              const int *recv_peer, void *const *recv_buf,
                              const size_t *recv_bytes);
const char *un__nccl_sync(void *stream);
/* CUDA devices on this machine (0 with the reason in *why). */
int un__nccl_device_count(const char **why);

/* The seam as a table: backend.c (the registry, STYLE rule 4) answers un__nccl_seam() with it in
 * a build with NCCL and with NULL otherwise, so comm_nccl.c builds in every configuration. */
typedef struct un__nccl_fns {
    const char *(*get_id)(void *id);
    const char *(*init)(void **comm, int nranks, const void *id, int rank, int device,
                        void **stream, bool *own_stream);
    const char *(*free)(void *comm, void *stream, bool own_stream);
    const char *(*abort)(void *comm);
    const char *(*allreduce)(void *comm, void *stream, int type, void *buf, size_t n);
    const char *(*allgather)(void *comm, void *stream, int type, const void *send, void *recv,
                             size_t n);
    const char *(*reduce_scatter)(void *comm, void *stream, int type, const void *send, void *recv,
                                  size_t n);
    const char *(*bcast)(void *comm, void *stream, int root, void *buf, size_t bytes);
    const char *(*sendrecv)(void *comm, void *stream, int n_sends, const int *send_peer,
                            void *const *send_buf, const size_t *send_bytes, int n_recvs,
                            const int *recv_peer, void *const *recv_buf, const size_t *recv_bytes);
    const char *(*sync)(void *stream);
    int (*device_count)(const char **why);
} un__nccl_fns;

const un__nccl_fns *un__nccl_seam(void);

#ifdef __cplusplus
}
#endif

#endif
