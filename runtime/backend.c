/* backend.c - the backend registry (constructors), the public wrappers over the vtable, and
 * sized buffers. A CUDA backend (its own issue) adds its constructor here behind UN_USE_CUDA
 * (STYLE rule 4). */
#include "runtime/backend.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/backend_cuda.h"
#include "runtime/backend_cuda_rt.h"
#include "runtime/backend_impl.h"
#include "runtime/comm_nccl_rt.h"

struct un_buffer {
    un_backend *be;
    size_t size; /* bytes */
    void *data;  /* device address */
};

un_status un_backend_cpu_new(un_ctx *ctx, un_prec prec, int nthreads, un_backend **out) {
    return un__backend_cpu_new(ctx, prec, nthreads, out);
}

un_status un_backend_opaque_new(un_ctx *ctx, un_prec prec, int nthreads, un_backend **out) {
    return un__backend_opaque_new(ctx, prec, nthreads, &(un_backend_opaque_opts){0}, out);
}

un_status un_backend_opaque_new_opts(un_ctx *ctx, un_prec prec, int nthreads,
                                     const un_backend_opaque_opts *o, un_backend **out) {
    return un__backend_opaque_new(ctx, prec, nthreads, o, out);
}

bool un_backend_is_opaque(const char *spec) {
    return strncmp(spec, "opaque", 6) == 0 && (spec[6] == '\0' || spec[6] == ':');
}

un_status un_backend_opaque_opts_parse(un_ctx *ctx, const char *spec, un_backend_opaque_opts *o) {
    *o = (un_backend_opaque_opts){0};
    if (!un_backend_is_opaque(spec))
        return un_ctx_error(ctx, UN_ERR_INVALID, "--backend: '%s' is not opaque[:OPTIONS]", spec);
    for (const char *p = spec + 7; spec[6];) { /* each option up to a comma; none may be empty */
        size_t n = strcspn(p, ",");
        bool ok = false;
        if (n == 6 && strncmp(p, "staged", 6) == 0) {
            o->staged = ok = true;
        } else if (n > 4 && strncmp(p, "mem=", 4) == 0 && p[4] >= '0' && p[4] <= '9') {
            char *end = NULL;
            unsigned long long v = strtoull(p + 4, &end, 10);
            int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
            end += shift != 0;
            ok = end == p + n && v > 0 && v <= (unsigned long long)(INT64_MAX >> shift);
            if (ok)
                o->mem_limit = (int64_t)(v << shift);
        }
        if (!ok)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "--backend: '%.*s' in '%s' is not 'staged' or 'mem=SIZE' (bytes > "
                                "0, optional K, M or G)",
                                (int)n, p, spec);
        if (p[n] != ',')
            break;
        p += n + 1;
    }
    return UN_OK;
}

void un_backend_free(un_backend *be) {
    if (be)
        be->iface->free(be);
}

const char *un_backend_name(const un_backend *be) { return be->iface->name(be); }
un_dev_kind un_backend_kind(const un_backend *be) { return be->kind; }
un_prec un_backend_prec(const un_backend *be) { return be->prec; }
bool un_backend_host_visible(const un_backend *be) { return be->host_visible; }

un_status un_backend_memory(un_ctx *ctx, un_backend *be, int64_t *avail, bool *host) {
    *avail = 0;
    *host = false;
    return be->iface->memory(ctx, be, avail, host);
}

bool un_backend_supports_op(const un_backend *be, un_op op) {
    return (unsigned)op < UN_OP_COUNT && be->iface->supports_op(be, op);
}

un_status un_backend_alloc(un_ctx *ctx, un_backend *be, size_t nbytes, void **out) {
    UN_ASSERT(nbytes > 0);
    return be->iface->alloc(ctx, be, nbytes, out);
}

void un_backend_release(un_backend *be, void *p) {
    if (p)
        be->iface->release(be, p);
}

void un_backend_zero(un_backend *be, void *p, size_t nbytes) {
    if (nbytes)
        be->iface->zero(be, p, nbytes);
}

un_status un_backend_write(un_ctx *ctx, un_backend *be, void *dst, const void *host_src, size_t n) {
    return n ? be->iface->write(ctx, be, dst, host_src, n) : UN_OK;
}

un_status un_backend_read(un_ctx *ctx, un_backend *be, void *host_dst, const void *src, size_t n) {
    return n ? be->iface->read(ctx, be, host_dst, src, n) : UN_OK;
}

void un_backend_copy_region(un_backend *be, void *dst, const void *src, size_t es,
                            const un_region *r, bool accumulate) {
    UN_ASSERT(r->rank >= 0 && r->rank <= UN_MAX_DIMS);
    for (int i = 0; i < r->rank; i++)
        UN_ASSERT(r->len[i] >= 0 && r->src_off[i] + r->len[i] <= r->src_dim[i] &&
                  r->dst_off[i] + r->len[i] <= r->dst_dim[i]);
    be->iface->copy_region(be, dst, src, es, r, accumulate);
}

/* The region with its trailing dims that are whole on both sides folded into the dim before them
 * (their elements are contiguous on both sides, so one row spans them): a batch-split piece of an
 * NCHW tensor is one run of memory, copied by one call instead of one per W elements (the tiny
 * resnext50's data-parallel pieces: 8-float rows, 2048 memcpy calls for 64 KiB). */
static un_region region_fold(const un_region *r) {
    un_region f = *r;
    while (f.rank > 1) {
        int i = f.rank - 1;
        if (f.len[i] != f.src_dim[i] || f.len[i] != f.dst_dim[i])
            break;
        f.len[i - 1] *= f.len[i];
        f.src_off[i - 1] *= f.src_dim[i];
        f.dst_off[i - 1] *= f.dst_dim[i];
        f.src_dim[i - 1] *= f.src_dim[i];
        f.dst_dim[i - 1] *= f.dst_dim[i];
        f.rank--;
    }
    return f;
}

void un_region_copy_host(un_prec prec, void *dst, const void *src, size_t es, const un_region *rr,
                         bool accumulate) {
    un_region fr = region_fold(rr);
    const un_region *r = &fr;
    int rank = r->rank;
    int64_t rows = 1, row = rank ? r->len[rank - 1] : 1;
    for (int i = 0; i + 1 < rank; i++)
        rows *= r->len[i];
    if (row == 0 || rows == 0)
        return;
    int64_t idx[UN_MAX_DIMS] = {0};
    for (int64_t q = 0; q < rows; q++) {
        int64_t so = 0, d = 0;
        for (int i = 0; i < rank; i++) {
            int64_t c = i + 1 < rank ? idx[i] : 0;
            so = so * r->src_dim[i] + r->src_off[i] + c;
            d = d * r->dst_dim[i] + r->dst_off[i] + c;
        }
        const char *s = (const char *)src + (size_t)so * es;
        char *t = (char *)dst + (size_t)d * es;
        if (!accumulate) {
            memcpy(t, s, (size_t)row * es);
        } else if (prec == UN_PREC_F32) {
            float *tf = (float *)t;
            const float *sf = (const float *)s;
            for (int64_t x = 0; x < row; x++)
                tf[x] += sf[x];
        } else {
            double *tf = (double *)t;
            const double *sf = (const double *)s;
            for (int64_t x = 0; x < row; x++)
                tf[x] += sf[x];
        }
        for (int i = rank - 2; i >= 0; i--) {
            if (++idx[i] < r->len[i])
                break;
            idx[i] = 0;
        }
    }
}

un_status un_backend_op_forward(un_ctx *ctx, un_backend *be, un_op op, const un_param *params,
                                const un_kt *in, int n_in, un_kt *out, int n_out,
                                uint64_t dropout_seed, const int64_t *off, const int64_t *full) {
    return be->iface->op_forward(ctx, be, op, params, in, n_in, out, n_out, dropout_seed, off,
                                 full);
}

un_status un_backend_op_backward(un_ctx *ctx, un_backend *be, un_op op, const un_param *params,
                                 const un_kt *in, int n_in, const un_kt *out, int n_out,
                                 const un_kt *dout, un_kt *din, uint64_t dropout_seed,
                                 const int64_t *off, const int64_t *full) {
    return be->iface->op_backward(ctx, be, op, params, in, n_in, out, n_out, dout, din,
                                  dropout_seed, off, full);
}

un_status un_backend_linear_wgrad(un_ctx *ctx, un_backend *be, const un_param *params, int n,
                                  const un_kt *x, const un_kt *y, const un_kt *dy, int64_t r0,
                                  int64_t r1, void *dw) {
    if (!be->iface->linear_wgrad)
        return un_ctx_error(ctx, UN_ERR_UNAVAILABLE,
                            "backend %s: no linear weight gradient by rows", un_backend_name(be));
    return be->iface->linear_wgrad(ctx, be, params, n, x, y, dy, r0, r1, dw);
}

un_status un_backend_loss(un_ctx *ctx, un_backend *be, un_loss_kind kind, const un_kt *y,
                          const int64_t *off, const int64_t *full, const un_kt *target, un_kt *grad,
                          double *loss) {
    UN_ASSERT((unsigned)kind < UN_LOSS_COUNT && y->dtype == UN_DT_FLOAT);
    *loss = 0;
    return be->iface->loss(ctx, be, kind, y, off, full, target, grad, loss);
}

un_status un_backend_optim_step(un_ctx *ctx, un_backend *be, const un_optim_params *p, int64_t t,
                                const un_optim_seg *segs, int n_segs, void *w, const void *g,
                                void *m, void *v) {
    UN_ASSERT(n_segs >= 0 && t >= 1);
    int64_t n = 0;
    for (int k = 0; k < n_segs; k++) {
        UN_ASSERT(segs[k].off >= 0 && segs[k].n >= 0);
        n += segs[k].n;
    }
    return n ? be->iface->optim_step(ctx, be, p, t, segs, n_segs, w, g, m, v) : UN_OK;
}

un_status un_backend_synchronize(un_ctx *ctx, un_backend *be) {
    return be->iface->synchronize ? be->iface->synchronize(ctx, be) : UN_OK;
}

static double host_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

un_status un_backend_timer_start(un_ctx *ctx, un_backend *be, un_backend_timer *t) {
    if (be->iface->time_begin)
        return be->iface->time_begin(ctx, be);
    un_status st = un_backend_synchronize(ctx, be);
    t->host_start = host_now();
    return st;
}

un_status un_backend_timer_stop(un_ctx *ctx, un_backend *be, un_backend_timer *t, double *sec) {
    *sec = 0;
    if (be->iface->time_end)
        return be->iface->time_end(ctx, be, sec);
    un_status st = un_backend_synchronize(ctx, be);
    *sec = host_now() - t->host_start;
    return st;
}

/* ---- CUDA and NCCL: plugins loaded on first GPU use ---- */

const void *un__plugin_open(const char *file, const char *sym, char *why, size_t cap) {
    char exe[4096], path[4200];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    void *h = NULL;
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        snprintf(path, sizeof path, "%s/../lib/%s", exe, file);
        if (access(path, F_OK) == 0 && !(h = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
            snprintf(why, cap, "cannot load %s: %s", path, dlerror());
            return NULL;
        }
    }
    if (!h && !(h = dlopen(file, RTLD_NOW | RTLD_LOCAL))) {
        snprintf(why, cap, "cannot load %s: %s", file, dlerror());
        return NULL;
    }
    const void *(*get)(void) = NULL;
    *(void **)&get = dlsym(h, sym);
    if (!get) {
        snprintf(why, cap, "%s has no %s", file, sym);
        dlclose(h);
        return NULL;
    }
    return get(); /* h stays loaded until exit */
}

#ifdef UN_USE_CUDA
/* The CUDA code (backend_cuda.cu over cudart and cuBLAS/cuBLASLt; comm_nccl.cu over NCCL) is
 * built into two shared libraries beside the programs (BUILD/lib, PREFIX/lib) that no program
 * links: a run that never touches a GPU never maps the CUDA libraries (about 210 MB of RSS for
 * cuBLASLt alone). The first GPU call loads the plugin with dlopen and takes its table. */
typedef struct plugin {
    pthread_once_t once;
    const char *file, *sym;
    const void *fns;
    char why[512];
} plugin;

static plugin cu_plugin = {PTHREAD_ONCE_INIT, "libunity_cuda.so", "un__cu_fns_get", NULL, ""};
#ifdef UN_USE_NCCL
static plugin nccl_plugin = {PTHREAD_ONCE_INIT, "libunity_nccl.so", "un__nccl_fns_get", NULL, ""};
#endif

/* Whether this machine has an NVIDIA driver (its device nodes): without one no GPU can be used,
 * and the plugin is not loaded just to learn that. */
static bool nvidia_driver(void) {
    return access("/dev/nvidiactl", F_OK) == 0 ||
           access("/proc/driver/nvidia/version", F_OK) == 0 ||
           access("/dev/dxg", F_OK) == 0; /* WSL */
}

static void plugin_load(plugin *p) {
    p->fns = un__plugin_open(p->file, p->sym, p->why, sizeof p->why);
}

static void cu_once(void) { plugin_load(&cu_plugin); }

const un__cu_fns *un__cu_seam(const char **why) {
    pthread_once(&cu_plugin.once, cu_once);
    if (!cu_plugin.fns && why)
        *why = cu_plugin.why;
    return cu_plugin.fns;
}

int un_backend_cuda_devices(const char **why) {
    if (!nvidia_driver()) {
        if (why)
            *why = "no NVIDIA driver on this machine: no /dev/nvidiactl";
        return 0;
    }
    const un__cu_fns *cu = un__cu_seam(why);
    return cu ? cu->device_count(why) : 0;
}

bool un_backend_cuda_device_name(int device, char *buf, size_t cap) {
    if (cap)
        buf[0] = '\0';
    if (device < 0 || device >= un_backend_cuda_devices(NULL))
        return false;
    return un__cu_seam(NULL)->device_name(device, buf, cap) == NULL;
}

un_status un_backend_cuda_new(un_ctx *ctx, un_prec prec, int device, un_backend **out) {
    return un_backend_cuda_new_opts(ctx, prec, device, false, out);
}

un_status un_backend_cuda_new_opts(un_ctx *ctx, un_prec prec, int device, bool tf32,
                                   un_backend **out) {
    const char *why = NULL;
    *out = NULL;
    if (un_backend_cuda_devices(&why) == 0)
        return un_ctx_error(ctx, UN_ERR_UNAVAILABLE, "cuda backend: %s", why ? why : "no GPU");
    return un__backend_cuda_new_opts(ctx, prec, device, tf32, out);
}
#else
int un_backend_cuda_devices(const char **why) {
    if (why)
        *why = "this build has no CUDA (nvcc was not found or CUDA=0)";
    return 0;
}

bool un_backend_cuda_device_name(int device, char *buf, size_t cap) {
    (void)device;
    if (cap)
        buf[0] = '\0';
    return false;
}

un_status un_backend_cuda_new(un_ctx *ctx, un_prec prec, int device, un_backend **out) {
    return un_backend_cuda_new_opts(ctx, prec, device, false, out);
}

un_status un_backend_cuda_new_opts(un_ctx *ctx, un_prec prec, int device, bool tf32,
                                   un_backend **out) {
    (void)prec, (void)device, (void)tf32;
    *out = NULL;
    return un_ctx_error(ctx, UN_ERR_UNAVAILABLE,
                        "cuda backend: this build has no CUDA (nvcc was not found or CUDA=0)");
}

const un__cu_fns *un__cu_seam(const char **why) {
    if (why)
        *why = "this build has no CUDA (nvcc was not found or CUDA=0)";
    return NULL;
}
#endif

#ifdef UN_USE_NCCL
static void nccl_once(void) { plugin_load(&nccl_plugin); }

const un__nccl_fns *un__nccl_seam(const char **why) {
    if (!nvidia_driver()) {
        if (why)
            *why = "no NVIDIA driver on this machine: no /dev/nvidiactl";
        return NULL;
    }
    pthread_once(&nccl_plugin.once, nccl_once);
    if (!nccl_plugin.fns && why)
        *why = nccl_plugin.why;
    return nccl_plugin.fns;
}
#else
const un__nccl_fns *un__nccl_seam(const char **why) {
    if (why)
        *why = "this build has no NCCL (needs nvcc and nccl.h; see make's CUDA line)";
    return NULL;
}
#endif

/* ---- buffers ---- */

un_status un_buffer_new(un_ctx *ctx, un_backend *be, size_t nbytes, un_buffer **out) {
    *out = NULL;
    void *data;
    un_status st = un_backend_alloc(ctx, be, nbytes, &data);
    if (st != UN_OK)
        return st;
    un_buffer *b = un_xcalloc(1, sizeof *b);
    *b = (un_buffer){.be = be, .size = nbytes, .data = data};
    *out = b;
    return UN_OK;
}

void un_buffer_free(un_buffer *b) {
    if (!b)
        return;
    un_backend_release(b->be, b->data);
    free(b);
}

size_t un_buffer_size(const un_buffer *b) { return b->size; }
un_backend *un_buffer_backend(const un_buffer *b) { return b->be; }

void *un_buffer_at(const un_buffer *b, size_t off) {
    UN_ASSERT(off <= b->size);
    return (char *)b->data + off;
}

/* Whether [off, off + n) lies inside b. */
static bool in_range(const un_buffer *b, size_t off, size_t n) {
    return off <= b->size && n <= b->size - off;
}

un_status un_buffer_write(un_ctx *ctx, un_buffer *b, size_t off, const void *host_src, size_t n) {
    UN_ASSERT(in_range(b, off, n));
    return un_backend_write(ctx, b->be, (char *)b->data + off, host_src, n);
}

un_status un_buffer_read(un_ctx *ctx, const un_buffer *b, size_t off, void *host_dst, size_t n) {
    UN_ASSERT(in_range(b, off, n));
    return un_backend_read(ctx, b->be, host_dst, (const char *)b->data + off, n);
}

un_status un_buffer_zero(un_ctx *ctx, un_buffer *b, size_t off, size_t n) {
    (void)ctx;
    UN_ASSERT(in_range(b, off, n));
    un_backend_zero(b->be, (char *)b->data + off, n);
    return UN_OK;
}

un_status un_buffer_copy(un_ctx *ctx, un_buffer *dst, size_t doff, const un_buffer *src,
                         size_t soff, size_t n) {
    UN_ASSERT(in_range(dst, doff, n) && in_range(src, soff, n));
    if (n == 0)
        return UN_OK;
    char *d = (char *)dst->data + doff;
    const char *s = (const char *)src->data + soff;
    if (dst->be == src->be)
        return dst->be->iface->copy(ctx, dst->be, d, s, n);
    if (src->be->host_visible) /* host memory on one side: one write or read */
        return un_backend_write(ctx, dst->be, d, s, n);
    if (dst->be->host_visible)
        return un_backend_read(ctx, src->be, d, s, n);
    /* Two devices: stage through host memory in chunks (no peer-to-peer copy yet). */
    enum { CHUNK = 1 << 20 };
    char *stage = malloc(n < CHUNK ? n : CHUNK);
    if (!stage)
        return un_ctx_error(ctx, UN_ERR_NOMEM, "buffer copy: no host memory to stage %zu bytes", n);
    un_status st = UN_OK;
    for (size_t at = 0; at < n && st == UN_OK; at += CHUNK) {
        size_t k = n - at < CHUNK ? n - at : CHUNK;
        st = un_backend_read(ctx, src->be, stage, s + at, k);
        if (st == UN_OK)
            st = un_backend_write(ctx, dst->be, d + at, stage, k);
    }
    free(stage);
    return st;
}
