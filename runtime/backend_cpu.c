/* backend_cpu.c - the CPU backend: host memory, block copies, and the float32/float64 kernels of
 * kernels.h (OpenBLAS sgemm/dgemm inside them) run on a fixed thread pool. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h> /* the float32 Adam update's AVX-512 path */
#endif

#include "runtime/backend_impl.h"
#include "runtime/blas.h"
#include "runtime/pool.h"

/* OpenBLAS's own thread count (process-wide). Declared here rather than through cblas.h, which
 * only the kernel file includes: the backend owns the thread policy. */
void openblas_set_num_threads(int n);
/* Stops OpenBLAS's worker threads (its pthread builds export it; weak: NULL where the library has
 * no such function). A later openblas_set_num_threads or threaded call starts them again. */
int blas_thread_shutdown_(void) __attribute__((weak));

typedef struct cpu_state {
    un_pool *pool;
    un_kstash *stash; /* what the forwards keep for their backwards (kernels.h) */
} cpu_state;

static const char *cpu_name(const un_backend *be) {
    return be->prec == UN_PREC_F32 ? "cpu-f32" : "cpu-f64";
}

/* OpenBLAS's thread count is the process's: backends are made concurrently (one per rank). */
static pthread_mutex_t blas_mu = PTHREAD_MUTEX_INITIALIZER;
static int blas_threads; /* the count set (0: none yet) */
static int blas_shared;  /* live backends with more than one thread (they may use the workers) */

static void cpu_free(un_backend *be) {
    cpu_state *s = be->context;
    if (s->pool) {
        pthread_mutex_lock(&blas_mu);
        blas_shared--;
        pthread_mutex_unlock(&blas_mu);
    }
    un_pool_free(s->pool);
    un_kstash_free(s->stash);
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

static un_status cpu_copy(un_ctx *ctx, un_backend *be, void *dst, const void *src, size_t n) {
    (void)ctx, (void)be;
    memmove(dst, src, n);
    return UN_OK;
}

static void cpu_copy_region(un_backend *be, void *dst, const void *src, size_t es,
                            const un_region *r, bool accumulate) {
    un_region_copy_host(be->prec, dst, src, es, r, accumulate);
}

static un_kexec cpu_kexec(un_backend *be, uint64_t seed, const int64_t *off, const int64_t *full) {
    cpu_state *s = be->context;
    return (un_kexec){.prec = be->prec,
                      .pool = s->pool,
                      .seed = seed,
                      .training = true,
                      .off = off,
                      .full = full,
                      .stash = s->stash};
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

static un_status cpu_linear_wgrad(un_ctx *ctx, un_backend *be, const un_param *params, int n,
                                  const un_kt *x, const un_kt *y, const un_kt *dy, int64_t r0,
                                  int64_t r1, void *dw) {
    un_kexec ex = cpu_kexec(be, 0, NULL, NULL);
    return un_kern_linear_wgrad(ctx, &ex, params, n, x, y, dy, r0, r1, dw);
}

/* ---- loss and optimizer on host memory (also the host-side paths of train.c and optim.c) ---- */

static inline double ld(const void *a, un_prec p, int64_t i) {
    return p == UN_PREC_F32 ? (double)((const float *)a)[i] : ((const double *)a)[i];
}
static inline void st_(void *a, un_prec p, int64_t i, double x) {
    if (p == UN_PREC_F32)
        ((float *)a)[i] = (float)x;
    else
        ((double *)a)[i] = x;
}

double un__loss_ce_host(un_prec prec, const void *logits, int64_t rows, int64_t c, int64_t r0,
                        int64_t n_total, const int64_t *labels, void *grad) {
    return un_kern_ce_loss(prec, logits, rows, c, labels + r0, 1.0 / (double)n_total, grad);
}

/* MSE over one piece: the sum of squared errors of its elements against the whole target,
 * gradient 2 (y - t) / numel. */
static double mse_host(un_prec prec, const un_kt *y, const int64_t *off, const int64_t *full,
                       const void *target, void *grad) {
    int64_t numel = 1, pn = 1;
    for (int i = 0; i < y->rank; i++) {
        numel *= full[i];
        pn *= y->dim[i];
    }
    double total = 0;
    for (int64_t x = 0; x < pn; x++) {
        int64_t rest = x, g = 0, coord[UN_MAX_DIMS];
        for (int i = y->rank - 1; i >= 0; i--) {
            coord[i] = off[i] + rest % y->dim[i];
            rest /= y->dim[i];
        }
        for (int i = 0; i < y->rank; i++)
            g = g * full[i] + coord[i];
        double d = ld(y->data, prec, x) - ld(target, prec, g);
        total += d * d;
        st_(grad, prec, x, 2 * d / (double)numel);
    }
    return total;
}

static un_status cpu_loss(un_ctx *ctx, un_backend *be, un_loss_kind kind, const un_kt *y,
                          const int64_t *off, const int64_t *full, const un_kt *target, un_kt *grad,
                          double *loss) {
    int64_t zero[UN_MAX_DIMS] = {0};
    const int64_t *o = off ? off : zero, *f = full ? full : y->dim;
    if (kind == UN_LOSS_CE) {
        if (y->rank != 2 || target->dtype != UN_DT_INT || y->dim[1] != f[1])
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "cross-entropy loss: needs int labels and logits of rank 2 whose "
                                "pieces hold whole rows (rank %d)",
                                y->rank);
        *loss = un__loss_ce_host(be->prec, y->data, y->dim[0], y->dim[1], o[0], f[0], target->data,
                                 grad->data);
    } else {
        *loss = mse_host(be->prec, y, o, f, target->data, grad->data);
    }
    return UN_OK;
}

/* One update of n elements of type T (float or double) in double arithmetic, one pass over w, g
 * and the state. Adam's moments are rounded to T before the weight update reads them, as they
 * are stored. */
#define OPTIM_UPDATE_FN(NAME, T)                                                                   \
    static void NAME(const un_optim_params *p, double step, double eps_hat, int64_t n,             \
                     T *restrict w, const T *restrict g, T *restrict m, T *restrict v) {           \
        if (p->kind == UN_OPTIM_SGD) {                                                             \
            double mu = p->momentum, lr = p->lr;                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T mi = (T)(mu * (double)m[i] + (double)g[i]);                                      \
                m[i] = mi;                                                                         \
                w[i] = (T)((double)w[i] - lr * (double)mi);                                        \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        double b1 = p->beta1, b2 = p->beta2;                                                       \
        for (int64_t i = 0; i < n; i++) {                                                          \
            double gi = (double)g[i];                                                              \
            T mi = (T)(b1 * (double)m[i] + (1 - b1) * gi);                                         \
            T vi = (T)(b2 * (double)v[i] + (1 - b2) * gi * gi);                                    \
            m[i] = mi;                                                                             \
            v[i] = vi;                                                                             \
            w[i] = (T)((double)w[i] - step * (double)mi / (sqrt((double)vi) + eps_hat));           \
        }                                                                                          \
    }
OPTIM_UPDATE_FN(optim_update_f32, float)
OPTIM_UPDATE_FN(optim_update_f64, double)

#if defined(__x86_64__) && defined(__GNUC__)
#define OPTIM_AVX512 1
/* float32 Adam on 8 elements at a time in AVX-512 double lanes: the scalar loop's operations in
 * its order (no FMA: each product and sum rounded as there), so the same bits; the compiler
 * cannot vectorise the scalar loop itself while sqrt may set errno. adam8_avx512 updates elements
 * [i, i + 8) under mask k: full blocks without one, the last block's lanes past n masked off (a
 * shard's segments are often short; masked stores are slow on some cores, so only there). */
typedef struct adam_lanes {
    __m512d b1, c1, b2, c2, st, eps;
} adam_lanes;

__attribute__((target("avx512f"), always_inline)) static inline void
adam8_avx512(const adam_lanes *c, int64_t i, __mmask16 k, float *restrict w,
             const float *restrict g, float *restrict m, float *restrict v) {
#define LD8(a)                                                                                     \
    _mm512_cvtps_pd(k == 0xff ? _mm256_loadu_ps((a) + i)                                           \
                              : _mm512_castps512_ps256(_mm512_maskz_loadu_ps(k, (a) + i)))
#define ST8(a, x)                                                                                  \
    (k == 0xff ? _mm256_storeu_ps((a) + i, (x))                                                    \
               : _mm512_mask_storeu_ps((a) + i, k, _mm512_castps256_ps512(x)))
    __m512d gi = LD8(g);
    __m256 mf =
        _mm512_cvtpd_ps(_mm512_add_pd(_mm512_mul_pd(c->b1, LD8(m)), _mm512_mul_pd(c->c1, gi)));
    __m256 vf = _mm512_cvtpd_ps(
        _mm512_add_pd(_mm512_mul_pd(c->b2, LD8(v)), _mm512_mul_pd(_mm512_mul_pd(c->c2, gi), gi)));
    ST8(m, mf);
    ST8(v, vf);
    __m512d upd = _mm512_div_pd(_mm512_mul_pd(c->st, _mm512_cvtps_pd(mf)),
                                _mm512_add_pd(_mm512_sqrt_pd(_mm512_cvtps_pd(vf)), c->eps));
    ST8(w, _mm512_cvtpd_ps(_mm512_sub_pd(LD8(w), upd)));
#undef LD8
#undef ST8
}

/* Every element of n: full blocks, then the rest masked. Returns n. */
__attribute__((target("avx512f"))) static int64_t
adam_f32_avx512(const un_optim_params *p, double step, double eps_hat, int64_t n, float *restrict w,
                const float *restrict g, float *restrict m, float *restrict v) {
    const adam_lanes c = {_mm512_set1_pd(p->beta1), _mm512_set1_pd(1 - p->beta1),
                          _mm512_set1_pd(p->beta2), _mm512_set1_pd(1 - p->beta2),
                          _mm512_set1_pd(step),     _mm512_set1_pd(eps_hat)};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        adam8_avx512(&c, i, 0xff, w, g, m, v);
    if (i < n)
        adam8_avx512(&c, i, (__mmask16)((1u << (n - i)) - 1), w, g, m, v);
    return n;
}
#else
#define OPTIM_AVX512 0
#endif

void un__optim_bias(const un_optim_params *p, int64_t t, double *step, double *eps_hat) {
    *step = *eps_hat = 0;
    if (p->kind == UN_OPTIM_ADAM) {
        double c1 = 1.0 - pow(p->beta1, (double)t), c2 = 1.0 - pow(p->beta2, (double)t);
        *step = p->lr * sqrt(c2) / c1;
        *eps_hat = p->eps * sqrt(c2); /* torch: eps added to sqrt(v_hat) */
    }
}

void un__optim_update_host(un_prec prec, const un_optim_params *p, double step, double eps_hat,
                           int64_t n, void *w, const void *g, void *m, void *v) {
    if (prec == UN_PREC_F32) {
        float *wf = w, *mf = m, *vf = v;
        const float *gf = g;
        int64_t done = 0;
#if OPTIM_AVX512
        if (p->kind == UN_OPTIM_ADAM && __builtin_cpu_supports("avx512f"))
            done = adam_f32_avx512(p, step, eps_hat, n, wf, gf, mf, vf);
#endif
        optim_update_f32(p, step, eps_hat, n - done, wf + done, gf + done, mf + done,
                         vf ? vf + done : NULL);
    } else
        optim_update_f64(p, step, eps_hat, n, w, g, m, v);
}

typedef struct optim_job {
    un_prec prec;
    const un_optim_params *p;
    double step, eps_hat;
    char *w, *m, *v;
    const char *g;
    size_t es;
} optim_job;

static void optim_body(void *arg, int64_t begin, int64_t end) {
    optim_job *j = arg;
    size_t at = (size_t)begin * j->es;
    un__optim_update_host(j->prec, j->p, j->step, j->eps_hat, end - begin, j->w + at, j->g + at,
                          j->m + at, j->v ? j->v + at : NULL);
}

/* Elements are independent: the pool's threads update disjoint blocks (the same bits as one). */
static un_status cpu_optim_step(un_ctx *ctx, un_backend *be, const un_optim_params *p, int64_t t,
                                const un_optim_seg *segs, int n_segs, void *w, const void *g,
                                void *m, void *v) {
    (void)ctx;
    cpu_state *s = be->context;
    size_t es = be->prec == UN_PREC_F32 ? sizeof(float) : sizeof(double), at = 0;
    optim_job j = {.prec = be->prec, .p = p, .es = es};
    un__optim_bias(p, t, &j.step, &j.eps_hat);
    for (int k = 0; k < n_segs; k++) { /* segment k's state follows segment k-1's */
        size_t wo = (size_t)segs[k].off * es;
        j.w = (char *)w + wo;
        j.g = (const char *)g + wo;
        j.m = (char *)m + at;
        j.v = v ? (char *)v + at : NULL;
        if (segs[k].n < 65536)
            optim_body(&j, 0, segs[k].n);
        else
            un_pool_for(s->pool, segs[k].n, optim_body, &j);
        at += (size_t)segs[k].n * es;
    }
    return UN_OK;
}

int64_t un__host_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    if (kb >= 0)
        return (int64_t)kb * 1024;
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (int64_t)pages * size : 0;
}

static un_status cpu_memory(un_ctx *ctx, un_backend *be, int64_t *avail, bool *host) {
    (void)ctx, (void)be;
    *avail = un__host_mem_available();
    *host = true;
    return UN_OK;
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
    .copy = cpu_copy,
    .copy_region = cpu_copy_region,
    .op_forward = cpu_forward,
    .op_backward = cpu_backward,
    .loss = cpu_loss,
    .optim_step = cpu_optim_step,
    .synchronize = NULL,
    .memory = cpu_memory,
    .linear_wgrad = cpu_linear_wgrad,
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
    /* One BLAS thread: OpenBLAS's worker, started when the library loads (and after a threaded
     * call), spins with sched_yield for 2^28 TSC cycles (~128 ms here) before it sleeps, and
     * openblas_set_num_threads(1) does not stop it: in a 2-rank run on 2 cores a third busy
     * thread beside the ranks for the run's first ~0.1 s (all of a short run). So it is stopped,
     * unless a live backend with more threads may be using it. openblas_set_num_threads restarts
     * the workers of a stopped library, so it is called only when the count changes. */
    pthread_mutex_lock(&blas_mu);
    if (nthreads != blas_threads) {
        openblas_set_num_threads(nthreads);
        blas_threads = nthreads;
        if (nthreads == 1 && blas_shared == 0 && blas_thread_shutdown_)
            blas_thread_shutdown_();
    }
    blas_shared += nthreads > 1;
    pthread_mutex_unlock(&blas_mu);
    cpu_state *s = un_xcalloc(1, sizeof *s);
    s->pool = nthreads > 1 ? un_pool_new(nthreads) : NULL;
    s->stash = un_kstash_new();
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
