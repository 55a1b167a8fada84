/* op.h - the operator registry: the closed set of operators (pcg/ops.def) with their names and
 * kinds, the limits every operator shares, and a parameter value. What the operators mean (their
 * parameters, shapes, sharding rules, axioms) is loaded from specs/ops.json by pcg/spec.h; this
 * header is all a kernel needs.
 *
 *   un_op op;
 *   if (un_op_from_name("relu", &op) && un_op_kind_of(op) == UN_OPK_REGULAR) ...;
 *   printf("%s\n", un_op_name(op));                       // "relu"
 *   un_param p = un_param_int(2);                         // a scalar parameter value
 */
#ifndef UN_OP_H
#define UN_OP_H

#include "pcg/shape.h"

typedef enum {
#define X(n, s, k) UN_OP_##n,
#include "pcg/ops.def"
#undef X
    UN_OP_COUNT
} un_op;

typedef enum { UN_OPK_SOURCE, UN_OPK_REGULAR, UN_OPK_PARALLEL } un_op_kind;

#define UN_MAX_INPUTS  8
#define UN_MAX_OUTPUTS 8
#define UN_MAX_PARAMS  8
#define UN_MAX_RULES   24

/* A parameter value: a scalar (len == -1, value in v[0]) or a list of up to UN_MAX_DIMS ints. */
typedef struct un_param {
    int32_t len;
    int64_t v[UN_MAX_DIMS];
} un_param;

const char *un_op_name(un_op op); /* static; from ops.def */
un_op_kind un_op_kind_of(un_op op);
bool un_op_from_name(const char *name, un_op *out);

un_param un_param_int(int64_t v);
bool un_param_eq(const un_param *a, const un_param *b);

#endif
