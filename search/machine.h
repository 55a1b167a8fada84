/* machine.h - machine descriptions (specs/machines/NAME.json, format: specs/FORMAT.md): nodes,
 * devices per node, the device kind (peak flop/s per precision, memory bandwidth and size, the
 * fixed cost of running one operator) and the two links (within a node, between nodes: bandwidth,
 * latency and the collective algorithm). Machines are homogeneous: one device kind for every
 * device. Device d lives on node d / devices_per_node.
 *
 *   un_machine m;
 *   if (un_machine_load(ctx, "specs/machines/v100x4.json", &m) != UN_OK) ...;  // one error line
 *   double t = m.dev.op_overhead + flops / m.dev.flops[UN_MPREC_F32];
 *   const un_link *l = un_machine_link(&m, 0, 5);                              // intra or inter
 */
#ifndef UN_MACHINE_H
#define UN_MACHINE_H

#include "pcg/un.h"

typedef enum { UN_MPREC_F32, UN_MPREC_F16, UN_MPREC_F64, UN_MPREC_COUNT } un_mprec;
typedef enum { UN_COLL_RING, UN_COLL_TREE, UN_COLL_COUNT } un_coll_algo;

typedef struct un_link {
    double bw;         /* bytes/s one device can send (and receive) at once on this link */
    double latency;    /* seconds per message (the alpha of alpha-beta) */
    un_coll_algo algo; /* how all-reduce / all-gather run over devices joined by this link */
} un_link;

/* The kernels of our CUDA backend (runtime/backend_cuda.c), device.gpu in the machine file: when
 * given, an operator's cost is the sum over the kernels that backend launches for it (cost.c). */
typedef struct un_gpu_kernels {
    bool on;             /* device.gpu was given */
    double launch;       /* seconds the host takes to launch one of our kernels (or a copy) */
    double gemm_launch;  /* seconds the host takes for one cuBLAS sgemm call */
    double sms;          /* streaming multiprocessors: the blocks one wave of a GEMM runs */
    double gemm_tile;    /* rows (= columns) of the output tile one sgemm block computes */
    double gemm_latency; /* seconds of a GEMM's fill and drain, on top of its waves */
    double mem_latency;  /* seconds a load is in flight: with one 4-byte load per thread, a
                          * kernel of T threads moves min(mem_bw, T * 4 / mem_latency) bytes/s */
    double reserve;      /* bytes of device memory a process of ours holds before its first
                          * buffer (the CUDA context, cuBLAS's handle and workspace; 0 if not
                          * given) */
    double optimizer_bw; /* bytes/s our optimizer step kernel moves (parameter, gradient and state
                          * read and written), as the profiler timed it (0 if not given: mem_bw) */
} un_gpu_kernels;

typedef struct un_device_kind {
    char kind[32];                /* "cpu", "v100", "a100", "h100": the measured-cost key */
    double flops[UN_MPREC_COUNT]; /* peak flop/s per precision; 0 = not given (f32 is required) */
    double mem_bw;                /* bytes/s of device memory */
    double memory;                /* bytes of device memory */
    double op_overhead;           /* seconds to start one operator (a kernel launch, a call) */
    un_gpu_kernels gpu;           /* zeroed (on false) when not given */
} un_device_kind;

typedef struct un_machine {
    char name[96];
    char source[256]; /* where the numbers come from (free text; "" when not given) */
    int nodes;
    int devices_per_node;
    un_device_kind dev;
    un_link intra; /* between devices of one node */
    un_link inter; /* between devices of different nodes (per device) */
} un_machine;

/* Loads and validates a machine file. Every error is one message naming the file, the JSON path
 * and the reason (a missing or unknown member, a wrong type, a value out of range). On failure
 * *out is zeroed. */
un_status un_machine_load(un_ctx *ctx, const char *path, un_machine *out);
un_status un_machine_parse(un_ctx *ctx, const char *name, const char *text, size_t len,
                           un_machine *out);

/* Devices in all: nodes * devices_per_node. */
int un_machine_devices(const un_machine *m);
/* The link between devices a and b (intra when they share a node). */
const un_link *un_machine_link(const un_machine *m, int a, int b);
/* The peak flop/s for a precision, falling back to f32 where that precision is not given. */
double un_machine_flops(const un_machine *m, un_mprec p);
/* The machine as JSON (the file format), e.g. for scripts/machine.sh. */
void un_machine_to_json(const un_machine *m, un_buf *out);
const char *un_coll_algo_name(un_coll_algo a); /* static */

#endif
