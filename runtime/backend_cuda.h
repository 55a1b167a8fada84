/* backend_cuda.h - the CUDA backend's constructor and device query (the backend itself is used
 * through backend.h like any other). Defined by the registry (backend.c): a build without CUDA
 * keeps these names and answers UN_ERR_UNAVAILABLE / 0 devices. float32 only; matmuls run on
 * cuBLAS (TF32 tensor cores when asked), the other ops on the kernels of backend_cuda.cu.
 *
 *   un_backend *be;
 *   if (un_backend_cuda_devices(NULL) > 0)
 *       st = un_backend_cuda_new(ctx, UN_PREC_F32, 0, &be);              // device 0, exact fp32
 *   st = un_backend_cuda_new_opts(ctx, UN_PREC_F32, 0, true, &be);       // TF32 products
 */
#ifndef UN_BACKEND_CUDA_H
#define UN_BACKEND_CUDA_H

#include "runtime/backend.h"

/* CUDA devices usable by this process; 0 in a build without CUDA or with no GPU or driver, with
 * the reason in *why when why is not NULL (static). */
int un_backend_cuda_devices(const char **why);
/* The name of GPU `device` into buf (e.g. "NVIDIA H100 80GB HBM3"); false (buf "") in a build
 * without CUDA or for a device that is not there. */
bool un_backend_cuda_device_name(int device, char *buf, size_t cap);

/* un_backend_cuda_new (backend.h: one stream and one cuBLAS handle on GPU `device`, exact
 * float32 products; UN_ERR_UNAVAILABLE with one line for a build without CUDA, no such device or
 * a precision other than UN_PREC_F32), with tf32 letting cuBLAS use TF32 tensor cores for float32
 * products. */
un_status un_backend_cuda_new_opts(un_ctx *ctx, un_prec prec, int device, bool tf32,
                                   un_backend **out);

/* The constructor in backend_cuda.c, called by the registry once the CUDA plugin is loaded (not
 * API). */
un_status un__backend_cuda_new_opts(un_ctx *ctx, un_prec prec, int device, bool tf32,
                                    un_backend **out);

#endif
