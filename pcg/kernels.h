/* kernels.h - the interface between the reference evaluator (pcg/eval.c) and its kernels
 * (pcg/kernels.c): one piece of each tensor as a kernel sees it, and the call that runs one
 * regular op on them. Internal to pcg: programs and other parts use pcg/eval.h.
 *
 *   un_kargs a = {.dom = UN_DOM_F64, .op = UN_OP_RELU, .spec = os, .params = local,
 *                 .n_in = 1, .in = &x, .n_out = 1, .out = &y};
 *   st = un__kernel_run(ctx, &a);              // y.data filled
 */
#ifndef UN_PCG_KERNELS_H
#define UN_PCG_KERNELS_H

#include "pcg/num.h"
#include "pcg/spec.h"

/* One piece of a tensor as a kernel sees it. */
typedef struct un_block {
    int32_t rank;
    un_dtype dtype;
    int64_t dim[UN_MAX_DIMS];  /* local sizes */
    int64_t off[UN_MAX_DIMS];  /* global offset of this piece in each dim */
    int64_t full[UN_MAX_DIMS]; /* logical sizes */
    un_val *data;              /* row-major, prod(dim) values */
} un_block;

typedef struct un_kargs {
    un_dom dom;
    un_op op;
    const un_op_spec *spec;
    const un_param *params; /* the per-piece op's parameters (after sharding-rule rewrites) */
    uint64_t salt;          /* per-operator seed for field surrogates */
    int n_in;
    const un_block *in;
    int n_out;
    un_block *out; /* shapes set, data zeroed */
} un_kargs;

/* Value of the named parameter (scalar) / list parameter; asserts the name exists. */
int64_t un_kargs_int(const un_kargs *a, const char *name);
const un_param *un_kargs_param(const un_kargs *a, const char *name);

/* Runs one regular op on one piece of each input; a switch over the op. */
un_status un__kernel_run(un_ctx *ctx, const un_kargs *a);

#endif
