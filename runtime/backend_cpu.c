/* backend_cpu.c - the CPU backend: host memory, block copies, and the float32/float64 kernels of
 * kernels.h (OpenBLAS sgemm/dgemm inside them) run on a fixed thread pool. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend_impl.h"
#include "runtime/blas.h"
#include "runtime/pool.h"

/* OpenBLAS's own thread count (process-wide). Declared here rather than through cblas.h, which
 * only the kernel file includes: the backend owns the thread policy. */
void openblas_set_num_threads(int n);

typedef struct cpu_state {
    un_pool *pool;
} cpu_state;

static const char *cpu_name(const un_backend *be) {
    return be->prec == UN_PREC_F32 ? "cpu-f32" : "cpu-f64";
}

static void cpu_free(un_backend *be) {
    cpu_state *s = be->context;
    un_pool_free(s->pool);
    free(s);
    free(be);
}

static bool cpu_supports_op(const un_backend *be, un_op op) {
    (void)be;
    return un_op_kind_of(op) != UN_OPK_REGULAR || un_kern_supports(op);
}

static un_status cpu_alloc(un_ctx *ctx, un_backend *be, size_t nbytes, void **out) {
    (void)be;
    *out = calloc(1, nbytes);
    if (!*out)
        return un_ctx_error(ctx, UN_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", nbytes);
    return UN_OK;
}

static void cpu_release(un_backend *be, void *p) {
    (void)be;
    free(p);
}

static void cpu_zero(un_backend *be, void *p, size_t n) {
    (void)be;
    memset(p, 0, n);
}

static void cpu_copy(un_backend *be, void *dst, const void *src, size_t n) {
    (void)be;
    memmove(dst, src, n);
}

static void cpu_copy_region(un_backend *be, void *dst, const void *src, size_t es,
                            const un_region *r, bool accumulate) {
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
        } else if (be->prec == UN_PREC_F32) {
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

static un_kexec cpu_kexec(un_backend *be, uint64_t seed, const int64_t *off, const int64_t *full) {
    cpu_state *s = be->context;
    return (un_kexec){.prec = be->prec,
                      .pool = s->pool,
                      .seed = seed,
                      .training = true,
                      .off = off,
                      .full = full};
}

static un_status cpu_forward(un_ctx *ctx, un_backend *be, un_op op, const un_param *params,
                             const un_kt *in, int n_in, un_kt *out, int n_out, uint64_t seed,
                             const int64_t *off, const int64_t *full) {
    un_kexec ex = cpu_kexec(be, seed, off, full);
    return un_kern_forward(ctx, &ex, op, params, in, n_in, out, n_out);
}

static un_status cpu_backward(un_ctx *ctx, un_backend *be, un_op op, const un_param *params,
                              const un_kt *in, int n_in, const un_kt *out, int n_out,
                              const un_kt *dout, un_kt *din, uint64_t seed, const int64_t *off,
                              const int64_t *full) {
    un_kexec ex = cpu_kexec(be, seed, off, full);
    return un_kern_backward(ctx, &ex, op, params, in, n_in, out, n_out, dout, din);
}

static const struct un_backend_i cpu_iface = {
    .name = cpu_name,
    .free = cpu_free,
    .supports_op = cpu_supports_op,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .zero = cpu_zero,
    .write = cpu_copy,
    .read = cpu_copy,
    .copy_region = cpu_copy_region,
    .op_forward = cpu_forward,
    .op_backward = cpu_backward,
    .synchronize = NULL,
};

un_status un__backend_cpu_new(un_ctx *ctx, un_prec prec, int nthreads, un_backend **out) {
    *out = NULL;
    if (prec != UN_PREC_F32 && prec != UN_PREC_F64)
        return un_ctx_error(ctx, UN_ERR_INVALID, "cpu backend: unknown precision %d", (int)prec);
    if (nthreads < 1 || nthreads > 1024)
        return un_ctx_error(ctx, UN_ERR_INVALID, "cpu backend: %d threads (1..1024)", nthreads);
    /* The kernels' gemm runs on the same threads budget: OpenBLAS threads idling in spin loops
     * while another rank's threads work cost 3-15x on small pieces. */
    un_blas_init(); /* the kernel choice happens before any thread calls BLAS */
    if (!un_blas_ok())
        return un_ctx_error(ctx, UN_ERR_UNAVAILABLE, "cpu backend: BLAS self-check failed: %s",
                            un_blas_describe());
    static pthread_mutex_t blas_mu = PTHREAD_MUTEX_INITIALIZER; /* ranks start concurrently */
    pthread_mutex_lock(&blas_mu);
    openblas_set_num_threads(nthreads);
    pthread_mutex_unlock(&blas_mu);
    cpu_state *s = un_xcalloc(1, sizeof *s);
    s->pool = nthreads > 1 ? un_pool_new(nthreads) : NULL;
    un_backend *be = un_xcalloc(1, sizeof *be);
    *be = (un_backend){.api_version = UN_BACKEND_API_VERSION,
                       .iface = &cpu_iface,
                       .kind = UN_DEV_CPU,
                       .prec = prec,
                       .host_visible = true,
                       .context = s};
    *out = be;
    return UN_OK;
}
