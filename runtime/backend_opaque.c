/* backend_opaque.c - the opaque backend: the CPU backend's kernels behind memory the host cannot
 * reach, the stand-in for a device backend on a machine without one. Its device addresses lie in
 * an address range reserved with no access (PROT_NONE): host code that dereferences one faults at
 * once instead of reading plausible numbers. The memory behind them is a second reservation at
 * the same offsets; every slot translates the addresses it is given (and asserts that each lies
 * in the range, so a host pointer passed where a device address belongs is caught too) and runs
 * the wrapped CPU backend on the translated ones. Same kernels, same threads: the same bits as the
 * CPU backend, so a run on it must reproduce a CPU run exactly.
 *
 * Allocation is a bump pointer that never reuses an address (a stale device address faults or
 * reads zeros rather than another buffer's data); release returns the whole pages of a buffer
 * to the kernel. A limit on the bytes held at once (un_backend_opaque_opts) stands in for a
 * device's memory in tests of the memory check.
 *
 * Its device data plane (comm_dev.h) moves the memory behind the device addresses with the
 * control plane's own calls (un_comm_exchange, allreduce, bcast on the translated addresses), the
 * way NCCL moves a GPU's memory without the host staging it: the executor's device-plane path
 * runs, bit for bit against the staged one, without a GPU. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "runtime/backend_impl.h"

enum {
    OPQ_ALIGN = 64, /* every buffer starts on a cache line */
    OPQ_HDR = 64,   /* a header before each buffer in the real range: its size */
};
#define OPQ_RESERVE ((size_t)16 << 30) /* address space per backend (MAP_NORESERVE) */

typedef struct opq_state {
    un_backend *cpu; /* the kernels */
    char *fake;      /* the device addresses handed out: no access */
    char *real;      /* the memory behind them, at the same offsets */
    size_t next;     /* first unused offset (bump allocation) */
    un_backend_opaque_opts opts;
    int64_t held; /* bytes of the buffers not yet released (against opts.mem_limit) */
    pthread_mutex_t mu;
} opq_state;

/* The host address behind device address p of an n-byte range (NULL stays NULL). */
static void *real_of(const opq_state *s, const void *p, size_t n) {
    if (!p)
        return NULL;
    const char *c = p;
    UN_ASSERT(c >= s->fake && c <= s->fake + s->next && n <= (size_t)(s->fake + s->next - c));
    return s->real + (c - s->fake);
}

static size_t kt_bytes(const un_backend *be, const un_kt *k) {
    size_t n = k->dtype == UN_DT_INT     ? sizeof(int64_t)
               : be->prec == UN_PREC_F32 ? sizeof(float)
                                         : sizeof(double);
    for (int i = 0; i < k->rank; i++)
        n *= (size_t)k->dim[i];
    return n;
}

/* Copies of n tensors with their data translated. */
static void kts_real(const un_backend *be, const un_kt *in, int n, un_kt *out) {
    const opq_state *s = be->context;
    for (int i = 0; i < n; i++) {
        out[i] = in[i];
        out[i].data = real_of(s, in[i].data, in[i].data ? kt_bytes(be, &in[i]) : 0);
    }
}

static const char *opq_name(const un_backend *be) {
    return be->prec == UN_PREC_F32 ? "opaque-f32" : "opaque-f64";
}

static void opq_free(un_backend *be) {
    opq_state *s = be->context;
    un_backend_free(s->cpu);
    munmap(s->fake, OPQ_RESERVE);
    munmap(s->real, OPQ_RESERVE);
    pthread_mutex_destroy(&s->mu);
    free(s);
    free(be);
}

static bool opq_supports_op(const un_backend *be, un_op op) {
    const opq_state *s = be->context;
    return un_backend_supports_op(s->cpu, op);
}

static un_status opq_alloc(un_ctx *ctx, un_backend *be, size_t nbytes, void **out) {
    opq_state *s = be->context;
    *out = NULL;
    pthread_mutex_lock(&s->mu);
    size_t at = s->next + OPQ_HDR;
    bool ok = at + OPQ_ALIGN <= OPQ_RESERVE && nbytes <= OPQ_RESERVE - at - OPQ_ALIGN;
    int64_t held = s->held;
    bool fits = s->opts.mem_limit == 0 || (int64_t)nbytes <= s->opts.mem_limit - held;
    if (ok && fits) {
        memcpy(s->real + s->next, &nbytes, sizeof nbytes);
        s->next = (at + nbytes + OPQ_ALIGN - 1) / OPQ_ALIGN * OPQ_ALIGN;
        s->held += (int64_t)nbytes;
    }
    pthread_mutex_unlock(&s->mu);
    if (!fits)
        return un_ctx_error(ctx, UN_ERR_NOMEM,
                            "opaque backend: cannot allocate %zu bytes (%lld of its limit of %lld "
                            "bytes are held)",
                            nbytes, (long long)held, (long long)s->opts.mem_limit);
    if (!ok)
        return un_ctx_error(ctx, UN_ERR_NOMEM,
                            "opaque backend: cannot allocate %zu bytes (its %zu GiB of address "
                            "space are used up)",
                            nbytes, OPQ_RESERVE >> 30);
    *out = s->fake + at; /* zeroed: fresh pages, never handed out before */
    return UN_OK;
}

static void opq_release(un_backend *be, void *p) {
    opq_state *s = be->context;
    char *r = real_of(s, p, 0);
    size_t n;
    memcpy(&n, r - OPQ_HDR, sizeof n);
    pthread_mutex_lock(&s->mu);
    s->held -= (int64_t)n;
    pthread_mutex_unlock(&s->mu);
    /* the whole pages inside the buffer go back to the kernel (the others hold neighbours) */
    const uintptr_t pg = 4096;
    uintptr_t lo = ((uintptr_t)r + pg - 1) / pg * pg, hi = ((uintptr_t)r + n) / pg * pg;
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

static void opq_zero(un_backend *be, void *p, size_t n) {
    memset(real_of(be->context, p, n), 0, n);
}

static un_status opq_write(un_ctx *ctx, un_backend *be, void *dst, const void *host_src, size_t n) {
    (void)ctx;
    memcpy(real_of(be->context, dst, n), host_src, n);
    return UN_OK;
}

static un_status opq_read(un_ctx *ctx, un_backend *be, void *host_dst, const void *src, size_t n) {
    (void)ctx;
    memcpy(host_dst, real_of(be->context, src, n), n);
    return UN_OK;
}

static un_status opq_copy(un_ctx *ctx, un_backend *be, void *dst, const void *src, size_t n) {
    (void)ctx;
    memmove(real_of(be->context, dst, n), real_of(be->context, src, n), n);
    return UN_OK;
}

/* The bytes a region spans in a dense array of dims dim (elements of es bytes). */
static size_t region_span(int rank, const int64_t *dim, size_t es) {
    size_t n = es;
    for (int i = 0; i < rank; i++)
        n *= (size_t)dim[i];
    return n;
}

static void opq_copy_region(un_backend *be, void *dst, const void *src, size_t es,
                            const un_region *r, bool accumulate) {
    opq_state *s = be->context;
    un_backend_copy_region(s->cpu, real_of(s, dst, region_span(r->rank, r->dst_dim, es)),
                           real_of(s, src, region_span(r->rank, r->src_dim, es)), es, r,
                           accumulate);
}

static un_status opq_forward(un_ctx *ctx, un_backend *be, un_op op, const un_param *params,
                             const un_kt *in, int n_in, un_kt *out, int n_out, uint64_t seed,
                             const int64_t *off, const int64_t *full) {
    opq_state *s = be->context;
    un_kt ri[UN_MAX_INPUTS], ro[UN_MAX_OUTPUTS];
    kts_real(be, in, n_in, ri);
    kts_real(be, out, n_out, ro);
    return un_backend_op_forward(ctx, s->cpu, op, params, ri, n_in, ro, n_out, seed, off, full);
}

static un_status opq_backward(un_ctx *ctx, un_backend *be, un_op op, const un_param *params,
                              const un_kt *in, int n_in, const un_kt *out, int n_out,
                              const un_kt *dout, un_kt *din, uint64_t seed, const int64_t *off,
                              const int64_t *full) {
    opq_state *s = be->context;
    un_kt ri[UN_MAX_INPUTS], ro[UN_MAX_OUTPUTS], rdo[UN_MAX_OUTPUTS], rdi[UN_MAX_INPUTS];
    kts_real(be, in, n_in, ri);
    kts_real(be, out, n_out, ro);
    kts_real(be, dout, n_out, rdo);
    kts_real(be, din, n_in, rdi);
    return un_backend_op_backward(ctx, s->cpu, op, params, ri, n_in, ro, n_out, rdo, rdi, seed, off,
                                  full);
}

static un_status opq_loss(un_ctx *ctx, un_backend *be, un_loss_kind kind, const un_kt *y,
                          const int64_t *off, const int64_t *full, const un_kt *target, un_kt *grad,
                          double *loss) {
    opq_state *s = be->context;
    un_kt ry, rt, rg;
    kts_real(be, y, 1, &ry);
    kts_real(be, target, 1, &rt);
    kts_real(be, grad, 1, &rg);
    return un_backend_loss(ctx, s->cpu, kind, &ry, off, full, &rt, &rg, loss);
}

static un_status opq_optim_step(un_ctx *ctx, un_backend *be, const un_optim_params *p, int64_t t,
                                const un_optim_seg *segs, int n_segs, void *w, const void *g,
                                void *m, void *v) {
    opq_state *s = be->context;
    size_t es = be->prec == UN_PREC_F32 ? sizeof(float) : sizeof(double), end = 0, state = 0;
    for (int k = 0; k < n_segs; k++) { /* the weights' extent and the compact state's */
        size_t e = (size_t)(segs[k].off + segs[k].n) * es;
        end = e > end ? e : end;
        state += (size_t)segs[k].n * es;
    }
    return un_backend_optim_step(ctx, s->cpu, p, t, segs, n_segs, real_of(s, w, end),
                                 real_of(s, g, end), real_of(s, m, state),
                                 real_of(s, v, v ? state : 0));
}

static un_status opq_memory(un_ctx *ctx, un_backend *be, int64_t *avail, bool *host) {
    opq_state *s = be->context;
    if (s->opts.mem_limit == 0) { /* host memory behind it, like the CPU backend's */
        *avail = un__host_mem_available();
        *host = true;
        return UN_OK;
    }
    (void)ctx;
    pthread_mutex_lock(&s->mu);
    *avail = s->opts.mem_limit - s->held;
    pthread_mutex_unlock(&s->mu);
    *host = false;
    return UN_OK;
}

/* ---- the device data plane: the control plane's calls on the memory behind the addresses ---- */

static size_t red_bytes(un_red_type t) { return t == UN_RED_F32 ? sizeof(float) : sizeof(double); }

static const char *plane_name(const un_comm_dev *d) {
    (void)d;
    return "opaque";
}

static void plane_free(un_comm_dev *d) { free(d); }

static un_status plane_allreduce(un_ctx *ctx, un_comm_dev *d, un_red_type t, void *buf, int64_t n) {
    void *r = real_of(d->be->context, buf, (size_t)n * red_bytes(t));
    return un_comm_allreduce(ctx, d->ctrl, t, r, n);
}

static un_status plane_bcast(un_ctx *ctx, un_comm_dev *d, int root, void *buf, size_t bytes) {
    return un_comm_bcast(ctx, d->ctrl, root, real_of(d->be->context, buf, bytes), bytes);
}

static un_status plane_exchange(un_ctx *ctx, un_comm_dev *d, const un_comm_msg *sends, int n_sends,
                                const un_comm_msg *recvs, int n_recvs) {
    const opq_state *s = d->be->context;
    un_comm_msg *m = un_xcalloc((size_t)(n_sends + n_recvs) + 1, sizeof *m);
    for (int i = 0; i < n_sends + n_recvs; i++) {
        m[i] = i < n_sends ? sends[i] : recvs[i - n_sends];
        m[i].data = real_of(s, m[i].data, m[i].bytes);
    }
    un_status st = un_comm_exchange(ctx, d->ctrl, m, n_sends, m + n_sends, n_recvs);
    free(m);
    return st;
}

/* recv[size * n] = every rank's send[n]: one message to and from every other rank, tag = sender. */
static un_status plane_allgather(un_ctx *ctx, un_comm_dev *d, un_red_type t, const void *send,
                                 void *recv, int64_t n) {
    int size = un_comm_size(d->ctrl), me = un_comm_rank(d->ctrl);
    size_t bytes = (size_t)n * red_bytes(t);
    un_comm_msg *sm = un_xcalloc((size_t)size, sizeof *sm),
                *rm = un_xcalloc((size_t)size, sizeof *rm);
    int k = 0;
    for (int r = 0; r < size; r++)
        if (r != me) {
            sm[k] = (un_comm_msg){
                .peer = r, .tag = me, .data = (void *)(uintptr_t)send, .bytes = bytes};
            rm[k++] = (un_comm_msg){
                .peer = r, .tag = r, .data = (char *)recv + (size_t)r * bytes, .bytes = bytes};
        }
    un_status st = plane_exchange(ctx, d, sm, k, rm, k);
    if (st == UN_OK)
        st = opq_copy(ctx, d->be, (char *)recv + (size_t)me * bytes, send, bytes);
    free(sm);
    free(rm);
    return st;
}

/* recv[n] = block `me` of the sum over ranks of send[size * n]: every rank's block `me` comes here,
 * summed in rank order (the same bits whichever rank sums). */
static un_status plane_reduce_scatter(un_ctx *ctx, un_comm_dev *d, un_red_type t, const void *send,
                                      void *recv, int64_t n) {
    int size = un_comm_size(d->ctrl), me = un_comm_rank(d->ctrl);
    size_t es = red_bytes(t), bytes = (size_t)n * es;
    void *parts = NULL; /* every rank's block `me`, in rank order, on this backend */
    un_status st = opq_alloc(ctx, d->be, bytes * (size_t)size, &parts);
    if (st != UN_OK)
        return st;
    un_comm_msg *sm = un_xcalloc((size_t)size, sizeof *sm),
                *rm = un_xcalloc((size_t)size, sizeof *rm);
    int k = 0;
    for (int r = 0; r < size; r++)
        if (r != me) {
            sm[k] = (un_comm_msg){.peer = r,
                                  .tag = me,
                                  .data = (char *)(uintptr_t)send + (size_t)r * bytes,
                                  .bytes = bytes};
            rm[k++] = (un_comm_msg){
                .peer = r, .tag = r, .data = (char *)parts + (size_t)r * bytes, .bytes = bytes};
        }
    st = plane_exchange(ctx, d, sm, k, rm, k);
    if (st == UN_OK)
        st = opq_copy(ctx, d->be, (char *)parts + (size_t)me * bytes,
                      (const char *)send + (size_t)me * bytes, bytes);
    if (st == UN_OK) {
        const opq_state *s = d->be->context;
        un_region r = {.rank = 1, .src_dim = {n}, .dst_dim = {n}, .len = {n}};
        char *out = real_of(s, recv, bytes), *in = real_of(s, parts, bytes * (size_t)size);
        memcpy(out, in, bytes);
        for (int q = 1; q < size; q++)
            un_region_copy_host(t == UN_RED_F32 ? UN_PREC_F32 : UN_PREC_F64, out,
                                in + (size_t)q * bytes, es, &r, true);
    }
    opq_release(d->be, parts);
    free(sm);
    free(rm);
    return st;
}

static const struct un_comm_dev_i plane_iface = {
    .name = plane_name,
    .free = plane_free,
    .allreduce = plane_allreduce,
    .allgather = plane_allgather,
    .reduce_scatter = plane_reduce_scatter,
    .bcast = plane_bcast,
    .exchange = plane_exchange,
};

static bool opq_plane_ready(const un_backend *be, const un_comm *ctrl) {
    (void)ctrl;
    const opq_state *s = be->context;
    return !s->opts.staged;
}

static un_status opq_plane_new(un_ctx *ctx, un_backend *be, un_comm *ctrl, un_comm_dev **out) {
    (void)ctx;
    un_comm_dev *d = un_xcalloc(1, sizeof *d);
    *d = (un_comm_dev){
        .api_version = UN_BACKEND_API_VERSION, .iface = &plane_iface, .ctrl = ctrl, .be = be};
    *out = d;
    return UN_OK;
}

static const struct un_backend_i opq_iface = {
    .name = opq_name,
    .free = opq_free,
    .supports_op = opq_supports_op,
    .alloc = opq_alloc,
    .release = opq_release,
    .zero = opq_zero,
    .write = opq_write,
    .read = opq_read,
    .copy = opq_copy,
    .copy_region = opq_copy_region,
    .op_forward = opq_forward,
    .op_backward = opq_backward,
    .loss = opq_loss,
    .optim_step = opq_optim_step,
    .synchronize = NULL,
    .memory = opq_memory,
    .plane_ready = opq_plane_ready,
    .plane_new = opq_plane_new,
};

un_status un__backend_opaque_new(un_ctx *ctx, un_prec prec, int nthreads,
                                 const un_backend_opaque_opts *o, un_backend **out) {
    *out = NULL;
    if (o->mem_limit < 0)
        return un_ctx_error(ctx, UN_ERR_INVALID, "opaque backend: memory limit %lld < 0",
                            (long long)o->mem_limit);
    un_backend *cpu = NULL;
    un_status st = un__backend_cpu_new(ctx, prec, nthreads, &cpu);
    if (st != UN_OK)
        return st;
    void *fake =
        mmap(NULL, OPQ_RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *real = mmap(NULL, OPQ_RESERVE, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (fake == MAP_FAILED || real == MAP_FAILED) {
        if (fake != MAP_FAILED)
            munmap(fake, OPQ_RESERVE);
        if (real != MAP_FAILED)
            munmap(real, OPQ_RESERVE);
        un_backend_free(cpu);
        return un_ctx_error(ctx, UN_ERR_NOMEM,
                            "opaque backend: cannot reserve %zu GiB of address space",
                            OPQ_RESERVE >> 30);
    }
    opq_state *s = un_xcalloc(1, sizeof *s);
    s->cpu = cpu;
    s->fake = fake;
    s->real = real;
    s->opts = *o;
    pthread_mutex_init(&s->mu, NULL);
    un_backend *be = un_xcalloc(1, sizeof *be);
    *be = (un_backend){.api_version = UN_BACKEND_API_VERSION,
                       .iface = &opq_iface,
                       .kind = UN_DEV_CPU,
                       .prec = prec,
                       .host_visible = false,
                       .context = s};
    *out = be;
    return UN_OK;
}
