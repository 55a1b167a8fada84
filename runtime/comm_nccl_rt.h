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

/* The seam as one list, X(return type, name, (parameters)): the functions (defined in
 * comm_nccl.cu as un__nccl_<name>) and the table of them that comm_nccl.cu exports from the NCCL
 * plugin (un__nccl_fns_get) and backend.c loads on first use (un__nccl_seam). */
#define UN__NCCL_SEAM(X)                                                                           \
    X(const char *, get_id, (void *id /* UN_NCCL_ID_BYTES */))                                     \
    /* Sets the device, makes a stream when *stream is NULL (*own_stream tells), joins the group.  \
     */                                                                                            \
    X(const char *, init,                                                                          \
      (void **comm, int nranks, const void *id, int rank, int device, void **stream,               \
       bool *own_stream))                                                                          \
    X(const char *, free, (void *comm, void *stream, bool own_stream))                             \
    X(const char *, abort, (void *comm))                                                           \
    X(const char *, allreduce, (void *comm, void *stream, int type, void *buf, size_t n))          \
    X(const char *, allgather,                                                                     \
      (void *comm, void *stream, int type, const void *send, void *recv, size_t n))                \
    X(const char *, reduce_scatter,                                                                \
      (void *comm, void *stream, int type, const void *send, void *recv, size_t n))                \
    X(const char *, bcast, (void *comm, void *stream, int root, void *buf, size_t bytes))          \
    /* One group of sends and receives (bytes each) with peers. */                                 \
    X(const char *, sendrecv,                                                                      \
      (void *comm, void *stream, int n_sends, const int *send_peer, void *const *send_buf,         \
       const size_t *send_bytes, int n_recvs, const int *recv_peer, void *const *recv_buf,         \
       const size_t *recv_bytes))                                                                  \
    X(const char *, sync, (void *stream))                                                          \
    /* CUDA devices on this machine (0 with the reason in *why). */                                \
    X(int, device_count, (const char **why))

#define UN__NCCL_DECL(ret, name, params) ret un__nccl_##name params;
UN__NCCL_SEAM(UN__NCCL_DECL)
#undef UN__NCCL_DECL

typedef struct un__nccl_fns {
#define UN__NCCL_SLOT(ret, name, params) ret(*name) params;
    UN__NCCL_SEAM(UN__NCCL_SLOT)
#undef UN__NCCL_SLOT
} un__nccl_fns;

/* The NCCL plugin's table (comm_nccl.cu, looked up by name after dlopen). */
const un__nccl_fns *un__nccl_fns_get(void);
/* The table, the plugin loaded on the first call (backend.c); NULL with the reason in *why (static:
 * a build without NCCL, or the plugin or libnccl did not load). */
const un__nccl_fns *un__nccl_seam(const char **why);

#ifdef __cplusplus
}
#endif

#endif
