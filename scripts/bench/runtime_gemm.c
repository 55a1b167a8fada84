/* runtime_gemm.c - the GEMM-side choices of the mid transformer's step (issue 16), each against
 * the alternative, in the same process: (1) Q, K, V of self-attention as three [B S, E] x
 * [E, HL] products (runtime/kernels_cpu.inc's mha_project for cross-attention) against one
 * product with the three weights side by side (what it does for self-attention); (2) the step's large products in each of the four transpose
 * combinations (what OpenBLAS packs differs); (3) attention's per-(batch, head) score and
 * output products in blocks of 32 query rows (mha_rows at seq 128, head dim 64) against 64 and
 * 128. Thread CPU time, best of ROUNDS repetitions (alternating), 1 OpenBLAS thread, the kernel
 * the runtime chooses (un_blas_init). Sizes: batch 8, seq 128, hidden 256, 4 heads, FFN 1024.
 *
 *   runtime_gemm ROUNDS     (built and run by `ONLY=gemm scripts/bench/runtime.sh`) */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/blas.h"

void openblas_set_num_threads(int n);

enum { B = 8, S = 128, E = 256, HL = 256, H = 4, DH = 64, F = 1024, M = B * S };

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *filled(size_t n, unsigned seed) {
    float *p = malloc(sizeof(float) * n);
    if (!p) {
        fprintf(stderr, "runtime_gemm: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (float)(seed >> 9) / (float)(1u << 23) - 0.5f;
    }
    return p;
}

static void gemm(bool ta, bool tb, int m, int n, int k, const float *a, int lda, const float *b,
                 int ldb, float beta, float *c, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

/* Attention's forward products for every (batch, head) in blocks of r query rows, Q, K, V in
 * one [M, 3 HL] buffer (as (1)'s merged product leaves them; the kernels' separate buffers
 * differ only in the leading dimension). */
static void attention(int r, const float *qkv, float *P, float *O) {
    for (int bh = 0; bh < B * H; bh++)
        for (int s0 = 0; s0 < S; s0 += r) {
            int b = bh / H, h = bh % H;
            const float *q = qkv + (size_t)(b * S + s0) * 3 * HL + h * DH;
            const float *k = qkv + (size_t)b * S * 3 * HL + HL + h * DH;
            float *p = P + (size_t)bh * S * S + (size_t)s0 * S;
            gemm(false, true, r, S, DH, q, 3 * HL, k, 3 * HL, 0, p, S);
            gemm(false, false, r, DH, S, p, S, k + HL, 3 * HL, 0,
                 O + (size_t)(b * S + s0) * HL + h * DH, HL);
        }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    if (argc != 2 || rounds < 1) {
        fprintf(stderr, "usage: runtime_gemm ROUNDS (ROUNDS >= 1)\n");
        return 2;
    }
    un_blas_init();
    openblas_set_num_threads(1);
    printf("blas: %s\n", un_blas_describe());
    float *x = filled((size_t)M * F, 1), *w = filled((size_t)E * 3 * HL, 2);
    float *wq = filled((size_t)E * HL, 3), *wk = filled((size_t)E * HL, 4),
          *wv = filled((size_t)E * HL, 5);
    float *y = filled((size_t)M * F, 6), *big = filled((size_t)F * F, 7);
    float *P = filled((size_t)B * H * S * S, 8), *O = filled((size_t)M * HL, 9);
    /* (1) */
    double sep = 1e30, one = 1e30;
    for (int r = 0; r < rounds; r++) {
        double t = cpu_s();
        gemm(false, false, M, HL, E, x, E, wq, HL, 0, y, 3 * HL);
        gemm(false, false, M, HL, E, x, E, wk, HL, 0, y + HL, 3 * HL);
        gemm(false, false, M, HL, E, x, E, wv, HL, 0, y + 2 * HL, 3 * HL);
        t = cpu_s() - t;
        sep = t < sep ? t : sep;
        t = cpu_s();
        gemm(false, false, M, 3 * HL, E, x, E, w, 3 * HL, 0, y, 3 * HL);
        t = cpu_s() - t;
        one = t < one ? t : one;
    }
    double fl = 2.0 * M * 3 * HL * E;
    printf("(1) Q, K, V [%d x %d] x [%d x %d]: 3 products %.3f ms (%.1f GFLOP/s), one merged %.3f "
           "ms (%.1f GFLOP/s): merged / separate %.3f\n",
           M, E, E, HL, 1e3 * sep, fl / sep * 1e-9, 1e3 * one, fl / one * 1e-9, one / sep);
    /* (2) m, n, k of the step's products: projections, FFN up and down, weight gradients */
    static const int shapes[][3] = {{M, HL, E}, {M, F, E}, {M, E, F},
                                    {E, HL, M}, {E, F, M}, {F, E, M}};
    printf("(2) GFLOP/s of the transpose combinations (NN as the forward runs; the backward runs "
           "NT for dX and TN for dW)\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        double best[4] = {1e30, 1e30, 1e30, 1e30};
        for (int r = 0; r < rounds; r++)
            for (int c = 0; c < 4; c++) {
                bool ta = c & 2, tb = c & 1;
                double t = cpu_s();
                gemm(ta, tb, m, n, k, x, ta ? m : k, big, tb ? k : n, 1, y, n);
                t = cpu_s() - t;
                best[c] = t < best[c] ? t : best[c];
            }
        printf("    m %4d n %4d k %4d:", m, n, k);
        for (int c = 0; c < 4; c++)
            printf("  %c%c %6.1f", c & 2 ? 'T' : 'N', c & 1 ? 'T' : 'N',
                   2.0 * m * n * k / best[c] * 1e-9);
        printf("\n");
    }
    /* (3) */
    static const int rows[] = {32, 64, 128};
    double at[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < 3; i++) {
            double t = cpu_s();
            attention(rows[i], y, P, O);
            t = cpu_s() - t;
            at[i] = t < at[i] ? t : at[i];
        }
    double afl = 2.0 * 2 * B * H * S * S * DH;
    printf("(3) attention forward products, %d (batch, head) pairs:", B * H);
    for (int i = 0; i < 3; i++)
        printf("  %d rows %.3f ms (%.1f GFLOP/s)", rows[i], 1e3 * at[i], afl / at[i] * 1e-9);
    printf("\n");
    free(x), free(w), free(wq), free(wk), free(wv), free(y), free(big), free(P), free(O);
    return 0;
}
