/* small_gemm.c - the CPU kernels' small matrix-product kernel against OpenBLAS (runtime/kernels.h
 * un_kern_gemm_f32 / _f64 with UN_GEMM_SMALL and UN_GEMM_BLAS forced), float32 (or float64 with
 * the argument f64), on every shape m, n, k
 * in {8, 16, 32, 64} and the three transpose combinations the kernels use (NN, NT, TN): wall
 * time per call, each path on one thread alone, then on two threads at once (two device threads
 * of a data-parallel step on this box: each thread its own A, B, C; both start together), the
 * median of ROUNDS rounds (paths alternating within a round). Prints a row per shape with which
 * path the kernels take (UN_GEMM_AUTO), and a summary: per product size, the shapes where the
 * small kernel is faster alone and together, and what the runtime's choice costs against the
 * faster path on every shape. The OpenBLAS kernel set is the one the runtime runs
 * (un_blas_init: OPENBLAS_CORETYPE from the environment, else its own choice).
 *
 *   small_gemm ROUNDS [f64]     (built and run by scripts/bench/small_gemm.sh) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pcg/un.h"
#include "runtime/blas.h"
#include "runtime/kernels.h"

enum { NSZ = 4, NTR = 3, MAXR = 64 };
static const int sizes[NSZ] = {8, 16, 32, 64};
static const bool tr[NTR][2] = {{false, false}, {false, true}, {true, false}};
static const char *const trname[NTR] = {"NN", "NT", "TN"};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    int m, n, k, t;
    un_gemm_path path;
    bool f64;
    void *a, *b, *c;
    long calls;
    double ns; /* per call */
    pthread_barrier_t *start;
} job;

static void *run(void *arg) {
    job *j = arg;
    bool ta = tr[j->t][0], tb = tr[j->t][1];
    int lda = ta ? j->m : j->k, ldb = tb ? j->k : j->n;
    double t0 = 0;
    for (long i = -200; i < j->calls; i++) { /* 200 warm-up calls, then the timed ones */
        if (i == 0) {
            if (j->start)
                pthread_barrier_wait(j->start);
            t0 = now();
        }
        if (j->f64)
            un_kern_gemm_f64(j->path, ta, tb, j->m, j->n, j->k, 1, j->a, lda, j->b, ldb, 1, j->c,
                             j->n);
        else
            un_kern_gemm_f32(j->path, ta, tb, j->m, j->n, j->k, 1, j->a, lda, j->b, ldb, 1, j->c,
                             j->n);
    }
    j->ns = 1e9 * (now() - t0) / (double)j->calls;
    return NULL;
}

/* n values in [-0.5, 0.5) from pcg's generator, float or double. */
static void *filled(size_t n, uint64_t seed, bool f64) {
    void *p = malloc((f64 ? sizeof(double) : sizeof(float)) * n);
    if (!p) {
        fprintf(stderr, "small_gemm: out of memory\n");
        exit(1);
    }
    un_rng r;
    un_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        double v = un_rng_double(&r) - 0.5;
        if (f64)
            ((double *)p)[i] = v;
        else
            ((float *)p)[i] = (float)v;
    }
    return p;
}

/* Per-call ns of path on shape (m, n, k, t): on one thread, or on two at once (their mean). */
static double timed(int m, int n, int k, int t, un_gemm_path path, int threads, bool f64,
                    void *buf[2][3]) {
    long macs = (long)m * n * k, calls = 20000000 / (macs + 2000) + 200;
    job jobs[2];
    pthread_t th[2];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) {
        jobs[i] = (job){m, n, k, t, path, f64, buf[i][0], buf[i][1], buf[i][2], calls, 0,
                        threads > 1 ? &start : NULL};
        memset(jobs[i].c, 0, (f64 ? sizeof(double) : sizeof(float)) * (size_t)m * (size_t)n);
    }
    if (threads == 1)
        run(&jobs[0]);
    else {
        for (int i = 0; i < threads; i++)
            pthread_create(&th[i], NULL, run, &jobs[i]);
        for (int i = 0; i < threads; i++)
            pthread_join(th[i], NULL);
    }
    pthread_barrier_destroy(&start);
    return threads == 1 ? jobs[0].ns : (jobs[0].ns + jobs[1].ns) / 2;
}

static int cmp(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    bool f64 = argc > 2 && strcmp(argv[2], "f64") == 0;
    if (argc > 2 && !f64) {
        fprintf(stderr, "small_gemm: the second argument is f64 or nothing, not %s\n", argv[2]);
        return 2;
    }
    if (rounds < 1 || rounds > MAXR) {
        fprintf(stderr, "small_gemm: ROUNDS must be 1..%d\n", MAXR);
        return 2;
    }
    un_blas_init();
    printf("blas: %s\n", un_blas_describe());
    printf("the kernels' bound: products of at most %lld multiply-adds in the small kernel\n",
           (long long)un_kern_gemm_small_macs());
    printf("precision: %s\n", f64 ? "float64" : "float32");
    void *buf[2][3];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            buf[i][j] = filled(64 * 64, (uint64_t)(3 * i + j + 1), f64);
    printf("wall ns per call, median of %d rounds; ratio = small kernel / OpenBLAS (< 1: the small "
           "kernel is faster)\n",
           rounds);
    printf("%4s %4s %4s %3s %7s | %9s %9s %6s | %9s %9s %6s | %5s\n", "m", "n", "k", "op", "macs",
           "small_1", "blas_1", "ratio", "small_2", "blas_2", "ratio", "auto");
    /* per bucket of macs (2^9 .. 2^18): shapes, faster alone, faster together */
    int bucket_n[10] = {0}, win1[10] = {0}, win2[10] = {0};
    double cost_auto1 = 0, cost_best1 = 0, cost_blas1 = 0, cost_auto2 = 0, cost_best2 = 0,
           cost_blas2 = 0;
    for (int im = 0; im < NSZ; im++)
        for (int in = 0; in < NSZ; in++)
            for (int ik = 0; ik < NSZ; ik++)
                for (int t = 0; t < NTR; t++) {
                    int m = sizes[im], n = sizes[in], k = sizes[ik];
                    double r[4][MAXR], med[4];
                    for (int q = 0; q < rounds; q++)
                        for (int p = 0; p < 4; p++)
                            r[p][q] = timed(m, n, k, t, p % 2 ? UN_GEMM_BLAS : UN_GEMM_SMALL,
                                            p < 2 ? 1 : 2, f64, buf);
                    for (int p = 0; p < 4; p++) {
                        qsort(r[p], (size_t)rounds, sizeof(double), cmp);
                        med[p] = r[p][rounds / 2];
                    }
                    long macs = (long)m * n * k;
                    /* which path the kernels take (every shape here fits the small kernel's
                     * buffer, so its bound decides) */
                    bool small = macs <= un_kern_gemm_small_macs();
                    printf("%4d %4d %4d %3s %7ld | %9.0f %9.0f %6.2f | %9.0f %9.0f %6.2f | %5s\n",
                           m, n, k, trname[t], macs, med[0], med[1], med[0] / med[1], med[2],
                           med[3], med[2] / med[3], small ? "small" : "blas");
                    int bk = 0;
                    while ((512L << bk) < macs)
                        bk++;
                    bucket_n[bk]++;
                    win1[bk] += med[0] < med[1];
                    win2[bk] += med[2] < med[3];
                    cost_auto1 += small ? med[0] : med[1];
                    cost_auto2 += small ? med[2] : med[3];
                    cost_best1 += med[0] < med[1] ? med[0] : med[1];
                    cost_best2 += med[2] < med[3] ? med[2] : med[3];
                    cost_blas1 += med[1];
                    cost_blas2 += med[3];
                    fflush(stdout);
                }
    printf("summary by size (shapes where the small kernel is faster: alone / two threads at "
           "once):\n");
    for (int b = 0; b < 10; b++)
        if (bucket_n[b])
            printf("  macs %7ld: %2d shapes, faster alone %2d, together %2d\n", 512L << b,
                   bucket_n[b], win1[b], win2[b]);
    printf("all %d shapes, one call of each, ns: alone: kernels' choice %.0f, the faster path each "
           "%.0f, OpenBLAS only %.0f; two threads: kernels' choice %.0f, faster each %.0f, "
           "OpenBLAS only %.0f\n",
           NSZ * NSZ * NSZ * NTR, cost_auto1, cost_best1, cost_blas1, cost_auto2, cost_best2,
           cost_blas2);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            free(buf[i][j]);
    return 0;
}
