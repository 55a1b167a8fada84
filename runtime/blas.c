/* blas.c - the OpenBLAS kernel choice of runtime/blas.h: CPU features, the switch through
 * OpenBLAS's dynamic-arch entry points, and the start-up self-check. With kernels_cpu.c, the only
 * file that includes cblas.h. */
#include "runtime/blas.h"

#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* OpenBLAS's own queries (openblas_config.h declares them; cblas.h includes it on Debian, but
 * these two are stable since 0.2 and declared here so the file does not depend on that). */
char *openblas_get_corename(void);
char *openblas_get_config(void);

static struct {
    char kernel[32];
    char line[256];
    bool ok;
} g_blas;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* ---- self-check --------------------------------------------------------------------------------
 */

/* A small deterministic value in [-1, 1). */
static double val(uint64_t i) {
    i = (i ^ 0x9e3779b97f4a7c15u) * 0xbf58476d1ce4e5b9u;
    i ^= i >> 31;
    return (double)(i >> 11) / (double)(1ull << 52) - 1.0;
}

/* sgemm and dgemm, row-major, every transpose combination, odd sizes that cross the kernels'
 * blocking (k > 128 for the panel loop, m and n not multiples of the 16/32-wide tiles), with
 * alpha/beta != 1/0; each element within 8 k eps of the float64 triple loop, relative to the sum
 * of |terms|. Returns the largest error in units of that bound (<= 1 passes); 1e30 on no memory. */
static double self_check(void) {
    enum { M = 37, N = 53, K = 171 };
    double worst = 0;
    double *ad = malloc(sizeof(double) * M * K), *bd = malloc(sizeof(double) * K * N);
    double *cd = malloc(sizeof(double) * M * N);
    float *af = malloc(sizeof(float) * M * K), *bf = malloc(sizeof(float) * K * N);
    float *cf = malloc(sizeof(float) * M * N);
    if (!ad || !bd || !cd || !af || !bf || !cf) {
        worst = 1e30;
        goto done;
    }
    for (int ta = 0; ta < 2; ta++) {
        for (int tb = 0; tb < 2; tb++) {
            /* A is M x K (stored K x M when transposed), B is K x N (N x K when transposed). */
            for (int i = 0; i < M * K; i++)
                af[i] = (float)(ad[i] = val((uint64_t)(i + 7 * ta + 13 * tb)));
            for (int i = 0; i < K * N; i++)
                bf[i] = (float)(bd[i] = val((uint64_t)(i + 100003)));
            for (int i = 0; i < M * N; i++)
                cf[i] = (float)(cd[i] = val((uint64_t)(i + 200003)));
            int lda = ta ? M : K, ldb = tb ? K : N;
            const double alpha = 0.75, beta = 0.5;
            /* reference before the products overwrite c */
            double *ref = malloc(sizeof(double) * M * N * 2);
            if (!ref) {
                worst = 1e30;
                goto done;
            }
            for (int i = 0; i < M; i++) {
                for (int j = 0; j < N; j++) {
                    double s = 0, mag = 0;
                    for (int k = 0; k < K; k++) {
                        double a = ta ? ad[k * lda + i] : ad[i * lda + k];
                        double b = tb ? bd[j * ldb + k] : bd[k * ldb + j];
                        s += a * b;
                        mag += fabs(a * b);
                    }
                    ref[2 * (i * N + j)] = alpha * s + beta * cd[i * N + j];
                    ref[2 * (i * N + j) + 1] = fabs(alpha) * mag + fabs(beta * cd[i * N + j]);
                }
            }
            enum CBLAS_TRANSPOSE tA = ta ? CblasTrans : CblasNoTrans;
            enum CBLAS_TRANSPOSE tB = tb ? CblasTrans : CblasNoTrans;
            cblas_sgemm(CblasRowMajor, tA, tB, M, N, K, (float)alpha, af, lda, bf, ldb, (float)beta,
                        cf, N);
            cblas_dgemm(CblasRowMajor, tA, tB, M, N, K, alpha, ad, lda, bd, ldb, beta, cd, N);
            for (int e = 0; e < M * N; e++) {
                double r = ref[2 * e], mag = ref[2 * e + 1] + 1e-30;
                double ef = fabs((double)cf[e] - r) / (8.0 * K * 0x1p-24 * mag);
                double ed = fabs(cd[e] - r) / (8.0 * K * 0x1p-53 * mag);
                if (!(ef <= worst))
                    worst = isnan(ef) ? 1e30 : fmax(worst, ef);
                if (!(ed <= worst))
                    worst = isnan(ed) ? 1e30 : fmax(worst, ed);
            }
            free(ref);
        }
    }
done:
    free(ad);
    free(bd);
    free(cd);
    free(af);
    free(bf);
    free(cf);
    return worst;
}

/* ---- the choice -------------------------------------------------------------------------------
 */

/* OpenBLAS's core-type names, fastest first on the CPUs that have the features (cpu.sh). */
static const char *const k_candidates[] = {"SkylakeX", "Haswell", "Sandybridge"};

static bool cpu_has(const char *which) {
    __builtin_cpu_init();
    if (!strcmp(which, "SkylakeX"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
    if (!strcmp(which, "Haswell"))
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (!strcmp(which, "Sandybridge"))
        return __builtin_cpu_supports("avx");
    return false;
}

/* Re-runs OpenBLAS's load-time choice with OPENBLAS_CORETYPE = name (NULL: its own detection);
 * the variable is removed again afterwards so that the environment stays as it was. */
static void switch_core(void (*quit)(void), void (*init)(void), const char *name) {
    if (name)
        setenv("OPENBLAS_CORETYPE", name, 1);
    quit();
    init();
    if (name)
        unsetenv("OPENBLAS_CORETYPE");
}

static void record(const char *why, double err) {
    snprintf(g_blas.kernel, sizeof g_blas.kernel, "%s", openblas_get_corename());
    /* openblas_get_config(): "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." - keep the first two
     * words */
    char lib[64];
    snprintf(lib, sizeof lib, "%s", openblas_get_config());
    char *sp = strchr(lib, ' ');
    if (sp && (sp = strchr(sp + 1, ' ')))
        *sp = '\0';
    g_blas.ok = err <= 1.0;
    snprintf(g_blas.line, sizeof g_blas.line,
             "%s kernel %s (%s; self-check %s, error %.2g of bound)", lib, g_blas.kernel, why,
             g_blas.ok ? "passed" : "FAILED", err);
}

static void choose(void) {
    const char *forced = getenv("OPENBLAS_CORETYPE");
    if (forced && *forced) {
        char why[96];
        snprintf(why, sizeof why, "OPENBLAS_CORETYPE=%.40s set in the environment, kept", forced);
        record(why, self_check());
        return;
    }
    /* POSIX's way to take a function from dlsym (ISO C has no object-to-function cast) */
    void (*init)(void) = NULL, (*quit)(void) = NULL;
    *(void **)&init = dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init");
    *(void **)&quit = dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit");
    if (!init || !quit) {
        record("not a DYNAMIC_ARCH build: its only kernel", self_check());
        return;
    }
    char own[32];
    snprintf(own, sizeof own, "%s", openblas_get_corename());
    for (size_t i = 0; i < sizeof k_candidates / sizeof k_candidates[0]; i++) {
        const char *name = k_candidates[i];
        if (!cpu_has(name))
            continue;
        switch_core(quit, init, name);
        if (strcasecmp(openblas_get_corename(), name) != 0)
            continue; /* the library refused it (a build without that kernel) */
        double err = self_check();
        if (err <= 1.0) {
            char why[96];
            snprintf(why, sizeof why, "chosen for this CPU's features; OpenBLAS alone picks %s",
                     own);
            record(why, err);
            return;
        }
    }
    switch_core(quit, init, NULL);
    record("OpenBLAS's own pick: no faster candidate fits this CPU", self_check());
}

void un_blas_init(void) { pthread_once(&g_once, choose); }

const char *un_blas_kernel(void) {
    un_blas_init();
    return g_blas.kernel;
}

const char *un_blas_describe(void) {
    un_blas_init();
    return g_blas.line;
}

bool un_blas_ok(void) {
    un_blas_init();
    return g_blas.ok;
}
