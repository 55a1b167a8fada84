/* backend_impl.h - the backend vtable shared by backend.c and the backends (not API). */
#ifndef UN_BACKEND_IMPL_H
#define UN_BACKEND_IMPL_H

#include "runtime/backend.h"
#include "runtime/comm_dev.h"
#include "runtime/optim.h"

#define UN_BACKEND_API_VERSION 5

struct un_backend_i {
    const char *(*name)(const un_backend *be);
    void (*free)(un_backend *be);
    bool (*supports_op)(const un_backend *be, un_op op);
    un_status (*alloc)(un_ctx *ctx, un_backend *be, size_t nbytes, void **out);
    void (*release)(un_backend *be, void *p);
    void (*zero)(un_backend *be, void *p, size_t nbytes);
    un_status (*write)(un_ctx *ctx, un_backend *be, void *dst, const void *host_src, size_t n);
    un_status (*read)(un_ctx *ctx, un_backend *be, void *host_dst, const void *src, size_t n);
    /* device -> device within this backend (memmove semantics) */
    un_status (*copy)(un_ctx *ctx, un_backend *be, void *dst, const void *src, size_t n);
    void (*copy_region)(un_backend *be, void *dst, const void *src, size_t es, const un_region *r,
                        bool accumulate);
    un_status (*op_forward)(un_ctx *ctx, un_backend *be, un_op op, const un_param *params,
                            const un_kt *in, int n_in, un_kt *out, int n_out, uint64_t seed,
                            const int64_t *off, const int64_t *full);
    un_status (*op_backward)(un_ctx *ctx, un_backend *be, un_op op, const un_param *params,
                             const un_kt *in, int n_in, const un_kt *out, int n_out,
                             const un_kt *dout, un_kt *din, uint64_t seed, const int64_t *off,
                             const int64_t *full);
    un_status (*loss)(un_ctx *ctx, un_backend *be, un_loss_kind kind, const un_kt *y,
                      const int64_t *off, const int64_t *full, const un_kt *target, un_kt *grad,
                      double *loss);
    un_status (*optim_step)(un_ctx *ctx, un_backend *be, const un_optim_params *p, int64_t t,
                            const un_optim_seg *segs, int n_segs, void *w, const void *g, void *m,
                            void *v);
    un_status (*synchronize)(un_ctx *ctx, un_backend *be); /* optional: NULL = synchronous */
    /* optional (NULL: the host clock around synchronised work): the device's own clock over the
     * work queued between time_begin and time_end (one timing at a time per backend) */
    un_status (*time_begin)(un_ctx *ctx, un_backend *be);
    un_status (*time_end)(un_ctx *ctx, un_backend *be, double *sec);
    /* the memory it can still allocate and whether that is the host's (un_backend_memory) */
    un_status (*memory)(un_ctx *ctx, un_backend *be, int64_t *avail, bool *host);
    /* optional (NULL: none; exchanges are staged through host memory): the device data plane
     * between ranks whose pieces live on backends like this one. plane_ready says, without
     * talking to other ranks, whether this rank can take part in ctrl's group (NCCL's library
     * loads, the device is there, no other rank of the machine shares it); plane_new is
     * collective over ctrl (un_comm_dev_new calls it on every rank once every rank is ready). */
    bool (*plane_ready)(const un_backend *be, const un_comm *ctrl);
    un_status (*plane_new)(un_ctx *ctx, un_backend *be, un_comm *ctrl, un_comm_dev **out);
    /* optional (NULL: none): rows of linear's weight gradient over batch pieces that may be other
     * ranks' buffers (un_backend_linear_wgrad) */
    un_status (*linear_wgrad)(un_ctx *ctx, un_backend *be, const un_param *params, int n,
                              const un_kt *x, const un_kt *y, const un_kt *dy, int64_t r0,
                              int64_t r1, void *dw);
};

/* A device data plane (comm_dev.h): a const vtable plus a context, over a host control plane. */
struct un_comm_dev_i {
    const char *(*name)(const un_comm_dev *d);
    void (*free)(un_comm_dev *d); /* the plane's own resources and d itself (not ctrl, not be) */
    un_status (*allreduce)(un_ctx *ctx, un_comm_dev *d, un_red_type t, void *buf, int64_t n);
    un_status (*allgather)(un_ctx *ctx, un_comm_dev *d, un_red_type t, const void *send, void *recv,
                           int64_t n);
    un_status (*reduce_scatter)(un_ctx *ctx, un_comm_dev *d, un_red_type t, const void *send,
                                void *recv, int64_t n);
    un_status (*bcast)(un_ctx *ctx, un_comm_dev *d, int root, void *buf, size_t bytes);
    un_status (*exchange)(un_ctx *ctx, un_comm_dev *d, const un_comm_msg *sends, int n_sends,
                          const un_comm_msg *recvs, int n_recvs);
    un_status (*synchronize)(un_ctx *ctx, un_comm_dev *d); /* optional: NULL = synchronous */
    void (*abort)(un_comm_dev *d); /* optional: ends the plane's pending work (not ctrl's) */
};

struct un_comm_dev {
    int api_version;
    const struct un_comm_dev_i *iface;
    un_comm *ctrl;  /* the host control plane (borrowed) */
    un_backend *be; /* whose memory it moves (borrowed; NULL for a plane made without one) */
    void *context;
};

struct un_backend {
    int api_version;
    const struct un_backend_i *iface;
    un_dev_kind kind;
    un_prec prec;
    bool host_visible;
    void *context;
};

/* The CPU backend's constructor (backend_cpu.c); the registry in backend.c calls it. */
un_status un__backend_cpu_new(un_ctx *ctx, un_prec prec, int nthreads, un_backend **out);
/* The opaque backend's (backend_opaque.c). */
un_status un__backend_opaque_new(un_ctx *ctx, un_prec prec, int nthreads,
                                 const un_backend_opaque_opts *o, un_backend **out);
/* Loads the shared library FILE (lib/FILE beside the program's directory: the build's and the
 * installed layout; else FILE on the loader's path) and returns what its function SYM returns
 * (the plugin's table); NULL with why ("cannot load FILE: <dlerror>") otherwise. The library
 * stays loaded. backend.c loads the CUDA and NCCL plugins with it on first GPU use. */
const void *un__plugin_open(const char *file, const char *sym, char *why, size_t cap);
/* The host memory this machine has free (MemAvailable, else free pages; bytes), 0 unknown: the CPU
 * backend's un_backend_memory. */
int64_t un__host_mem_available(void);

/* Host-memory loss and optimizer math of the CPU backend, shared with the host-side entry points
 * un_train_ce (train.c) and un_optim_step (optim.c). */
double un__loss_ce_host(un_prec prec, const void *logits, int64_t rows, int64_t c, int64_t r0,
                        int64_t n_total, const int64_t *labels, void *grad);
/* Adam's step size and epsilon at update t with bias correction (two pow calls: once per update,
 * not per segment); SGD: 0, 0. */
void un__optim_bias(const un_optim_params *p, int64_t t, double *step, double *eps_hat);
/* One update of n elements (step, eps_hat: un__optim_bias). */
void un__optim_update_host(un_prec prec, const un_optim_params *p, double step, double eps_hat,
                           int64_t n, void *w, const void *g, void *m, void *v);

#endif
