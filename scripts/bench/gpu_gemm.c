/* scripts/bench/gpu_gemm.c - matmul throughput on one GPU, built and run by gpu.sh: the CUDA
 * backend's linear op (float32, and with TF32 allowed) against cuBLAS's own sgemm called
 * directly, and cuBLAS's bf16 GEMM (float32 accumulation) for reference, all in one run.
 * Exit status 2 (one line) when there is no usable GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/backend_cuda.h"
#include "runtime/backend_cuda_rt.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Seconds per call of fn over reps calls after warm-up, the queue drained by sync. */
#define TIME(reps, call, sync)                                                                     \
    ({                                                                                             \
        for (int w_ = 0; w_ < 3; w_++)                                                             \
            call;                                                                                  \
        sync;                                                                                      \
        double t0_ = now();                                                                        \
        for (int r_ = 0; r_ < (reps); r_++)                                                        \
            call;                                                                                  \
        sync;                                                                                      \
        (now() - t0_) / (reps);                                                                    \
    })

int main(void) {
    const char *why = NULL;
    if (un_backend_cuda_devices(&why) == 0) {
        fprintf(stderr, "gpu_gemm: no usable GPU (%s)\n", why);
        return 2;
    }
    const un__cu_fns *cu = un__cu_seam(&why); /* the CUDA plugin, loaded by the call above */
    if (!cu) {
        fprintf(stderr, "gpu_gemm: %s\n", why);
        return 2;
    }
    un_ctx *ctx = un_ctx_new(NULL);
    int rc = 1;
    printf("%6s %12s %12s %12s %12s %12s\n", "n", "unity f32", "cublas f32", "unity tf32",
           "cublas tf32", "cublas bf16");
    un_backend *be = NULL, *be_tf = NULL;
    if (un_backend_cuda_new(ctx, UN_PREC_F32, 0, &be) != UN_OK ||
        un_backend_cuda_new_opts(ctx, UN_PREC_F32, 0, true, &be_tf) != UN_OK) {
        fprintf(stderr, "gpu_gemm: %s\n", un_ctx_errmsg(ctx));
        goto done;
    }
    void *stream = NULL, *blas = NULL, *blas_tf = NULL;
    if (cu->stream_new(&stream) || cu->blas_new(&blas, stream, false) ||
        cu->blas_new(&blas_tf, stream, true)) {
        fprintf(stderr, "gpu_gemm: cannot make a stream or cuBLAS handle\n");
        goto done;
    }
    static const int64_t sizes[] = {512, 1024, 2048, 4096, 8192};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int64_t n = sizes[k];
        size_t bytes = (size_t)(n * n) * sizeof(float);
        void *a = NULL, *b = NULL, *c = NULL, *a16 = NULL, *b16 = NULL;
        if (un_backend_alloc(ctx, be, bytes, &a) || un_backend_alloc(ctx, be, bytes, &b) ||
            un_backend_alloc(ctx, be, bytes, &c) || un_backend_alloc(ctx, be, bytes / 2, &a16) ||
            un_backend_alloc(ctx, be, bytes / 2, &b16)) {
            fprintf(stderr, "gpu_gemm: n = %lld: %s\n", (long long)n, un_ctx_errmsg(ctx));
            break;
        }
        float *h = malloc(bytes);
        for (int64_t i = 0; i < n * n; i++)
            h[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        if (un_backend_write(ctx, be, a, h, bytes) || un_backend_write(ctx, be, b, h, bytes)) {
            fprintf(stderr, "gpu_gemm: %s\n", un_ctx_errmsg(ctx));
            free(h);
            break;
        }
        free(h);
        cu->to_bf16(stream, a16, a, n * n);
        cu->to_bf16(stream, b16, b, n * n);
        un_param p[UN_MAX_PARAMS] = {{-1, {0}}, {-1, {0}}}; /* no activation, no bias */
        un_kt in[2] = {{UN_DT_FLOAT, 2, {n, n}, a}, {UN_DT_FLOAT, 2, {n, n}, b}};
        un_kt out = {UN_DT_FLOAT, 2, {n, n}, c};
        int reps = n <= 1024 ? 50 : n <= 4096 ? 10 : 3;
        double flops = 2.0 * (double)n * (double)n * (double)n;
        double t_u = TIME(reps, un_backend_op_forward(ctx, be, UN_OP_LINEAR, p, in, 2, &out, 1, 0, NULL, NULL),
                          un_backend_synchronize(ctx, be));
        double t_c = TIME(reps, cu->sgemm(blas, false, false, n, n, n, 1, a, n, 0, b, n, 0, 0, c, n, 0, 1),
                          cu->stream_sync(stream));
        double t_ut = TIME(reps, un_backend_op_forward(ctx, be_tf, UN_OP_LINEAR, p, in, 2, &out, 1, 0, NULL, NULL),
                           un_backend_synchronize(ctx, be_tf));
        double t_ct = TIME(reps, cu->sgemm(blas_tf, false, false, n, n, n, 1, a, n, 0, b, n, 0, 0, c, n, 0, 1),
                           cu->stream_sync(stream));
        double t_b = TIME(reps, cu->gemm_bf16(blas, false, false, n, n, n, 1, a16, n, b16, n, 0, c, n),
                          cu->stream_sync(stream));
        printf("%6lld %9.1f TF %9.1f TF %9.1f TF %9.1f TF %9.1f TF\n", (long long)n, flops / t_u / 1e12,
               flops / t_c / 1e12, flops / t_ut / 1e12, flops / t_ct / 1e12, flops / t_b / 1e12);
        un_backend_release(be, a), un_backend_release(be, b), un_backend_release(be, c);
        un_backend_release(be, a16), un_backend_release(be, b16);
    }
    if (un_backend_synchronize(ctx, be) == UN_OK)
        rc = 0;
    else
        fprintf(stderr, "gpu_gemm: %s\n", un_ctx_errmsg(ctx));
    cu->blas_free(blas), cu->blas_free(blas_tf), cu->stream_free(stream);
done:
    un_backend_free(be);
    un_backend_free(be_tf);
    un_ctx_free(ctx);
    return rc;
}
