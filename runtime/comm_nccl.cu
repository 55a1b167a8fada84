/* comm_nccl.cu - the C seam of comm_nccl_rt.h over NCCL and the CUDA runtime (STYLE rule 2: the
 * only file with nccl.h). Every call converts NCCL's and CUDA's codes into a message. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#include "runtime/comm_nccl_rt.h"

static_assert(UN_NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "NCCL unique id size");

static const char *msg(const char *what, const char *why) {
    static thread_local char ring[4][256];
    static thread_local int at;
    char *m = ring[at++ & 3];
    snprintf(m, sizeof ring[0], "%s: %s", what, why);
    return m;
}

static const char *ckn(ncclResult_t r, const char *what) {
    return r == ncclSuccess ? NULL : msg(what, ncclGetErrorString(r));
}

static const char *ckc(cudaError_t e, const char *what) {
    return e == cudaSuccess ? NULL : msg(what, cudaGetErrorString(e));
}

static ncclDataType_t dtype(int type) { return type == 1 ? ncclFloat64 : ncclFloat32; }

#define COMM(c)   ((ncclComm_t)(c))
#define STREAM(s) ((cudaStream_t)(s))

extern "C" const char *un__nccl_get_id(void *id) {
    ncclUniqueId u;
    const char *err = ckn(ncclGetUniqueId(&u), "ncclGetUniqueId");
    if (!err)
        memcpy(id, u.internal, NCCL_UNIQUE_ID_BYTES);
    return err;
}

extern "C" const char *un__nccl_init(void **comm, int nranks, const void *id, int rank, int device,
                                     void **stream, bool *own_stream) {
    *comm = NULL;
    *own_stream = false;
    const char *err = ckc(cudaSetDevice(device), "cudaSetDevice");
    if (err)
        return err;
    if (!*stream) {
        cudaStream_t s = NULL;
        if ((err = ckc(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate")))
            return err;
        *stream = s;
        *own_stream = true;
    }
    ncclUniqueId u;
    memcpy(u.internal, id, NCCL_UNIQUE_ID_BYTES);
    ncclComm_t c = NULL;
    err = ckn(ncclCommInitRank(&c, nranks, u, rank), "ncclCommInitRank");
    if (err && *own_stream) {
        cudaStreamDestroy(STREAM(*stream));
        *stream = NULL;
        *own_stream = false;
    }
    *comm = c;
    return err;
}

extern "C" const char *un__nccl_free(void *comm, void *stream, bool own_stream) {
    const char *err = comm ? ckn(ncclCommDestroy(COMM(comm)), "ncclCommDestroy") : NULL;
    if (own_stream && stream) {
        const char *e2 = ckc(cudaStreamDestroy(STREAM(stream)), "cudaStreamDestroy");
        err = err ? err : e2;
    }
    return err;
}

extern "C" const char *un__nccl_abort(void *comm) {
    return ckn(ncclCommAbort(COMM(comm)), "ncclCommAbort");
}

extern "C" const char *un__nccl_allreduce(void *comm, void *stream, int type, void *buf, size_t n) {
    return ckn(ncclAllReduce(buf, buf, n, dtype(type), ncclSum, COMM(comm), STREAM(stream)),
               "ncclAllReduce");
}

extern "C" const char *un__nccl_allgather(void *comm, void *stream, int type, const void *send,
                                          void *recv, size_t n) {
    return ckn(ncclAllGather(send, recv, n, dtype(type), COMM(comm), STREAM(stream)),
               "ncclAllGather");
}

extern "C" const char *un__nccl_reduce_scatter(void *comm, void *stream, int type,
                                               const void *send, void *recv, size_t n) {
    return ckn(ncclReduceScatter(send, recv, n, dtype(type), ncclSum, COMM(comm), STREAM(stream)),
               "ncclReduceScatter");
}

extern "C" const char *un__nccl_bcast(void *comm, void *stream, int root, void *buf, size_t bytes) {
    return ckn(ncclBroadcast(buf, buf, bytes, ncclUint8, root, COMM(comm), STREAM(stream)),
               "ncclBroadcast");
}

extern "C" const char *un__nccl_sendrecv(void *comm, void *stream, int n_sends,
                                         const int *send_peer, void *const *send_buf,
                                         const size_t *send_bytes, int n_recvs,
                                         const int *recv_peer, void *const *recv_buf,
                                         const size_t *recv_bytes) {
    const char *err = ckn(ncclGroupStart(), "ncclGroupStart");
    if (err)
        return err;
    for (int i = 0; i < n_sends && !err; i++)
        err = ckn(ncclSend(send_buf[i], send_bytes[i], ncclUint8, send_peer[i], COMM(comm),
                           STREAM(stream)),
                  "ncclSend");
    for (int i = 0; i < n_recvs && !err; i++)
        err = ckn(ncclRecv(recv_buf[i], recv_bytes[i], ncclUint8, recv_peer[i], COMM(comm),
                           STREAM(stream)),
                  "ncclRecv");
    const char *e2 = ckn(ncclGroupEnd(), "ncclGroupEnd"); /* always closes the group */
    return err ? err : e2;
}

extern "C" const char *un__nccl_sync(void *stream) {
    return ckc(cudaStreamSynchronize(STREAM(stream)), "cudaStreamSynchronize");
}

extern "C" int un__nccl_device_count(const char **why) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        *why = cudaGetErrorString(e);
        cudaGetLastError();
        return 0;
    }
    if (n == 0)
        *why = "no CUDA device";
    return n;
}

/* ---- the plugin's table (backend.c finds it with dlsym after loading this library) ---------- */

#define UN__NCCL_ENTRY(ret, name, params) un__nccl_##name,
static const un__nccl_fns nccl_fns = {UN__NCCL_SEAM(UN__NCCL_ENTRY)};
#undef UN__NCCL_ENTRY

extern "C" __attribute__((visibility("default"))) const un__nccl_fns *un__nccl_fns_get(void) {
    return &nccl_fns;
}
