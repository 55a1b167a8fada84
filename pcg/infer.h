/* infer.h - layout inference: applies an operator's output-shape rule to concrete input shapes
 * and explains the input layouts as a product of the operator's sharding rules (pcg/spec.h);
 * where each device's piece lies under the applied rules; and the op's cost for those shapes.
 *
 *   un_infer inf;
 *   st = un_spec_infer(ctx, spec, UN_OP_LINEAR, params, in_shapes, 2, "fc1", &inf);
 *   // inf.out[0]: the output layout; inf.uses: the applied rules; inf.local: per-piece params
 *   st = un_spec_cost(ctx, spec, UN_OP_LINEAR, params, in_shapes, 2, &inf, &flops, &bytes);
 */
#ifndef UN_INFER_H
#define UN_INFER_H

#include "pcg/spec.h"

/* ---- inference ---- */

/* Layout components a rule touches, as indices: shard of dim i is i, sum UN_COMP_SUM_AT, copy
 * UN_COMP_COPY_AT, absent input -1. */
#define UN_COMP_SUM_AT  UN_MAX_DIMS
#define UN_COMP_COPY_AT (UN_MAX_DIMS + 1)
#define UN_MAX_USES     16

/* One applied sharding rule: which rule, its foreach value, its degree and what it touches. */
typedef struct un_rule_use {
    int32_t rule;    /* index in os->rules, or -1 for the implicit copy rule */
    int32_t foreach; /* value of the foreach variable (-1 if none) */
    int32_t degree;  /* > 1 */
    int8_t in_comp[UN_MAX_INPUTS];
    int8_t out_comp[UN_MAX_OUTPUTS];
} un_rule_use;

typedef struct un_infer {
    int n_out;
    un_shape out[UN_MAX_OUTPUTS];
    int n_uses; /* applied rules (degree > 1), in spec order, copy last */
    un_rule_use uses[UN_MAX_USES];
    un_param local[UN_MAX_PARAMS]; /* parameters of the per-piece op after rewrites */
} un_infer;

/* Shape and layout inference for a regular, source or parallel op. Checks parameter domains,
 * ranks, dtypes, requirements and divisibility, then explains the input layouts as a product of
 * sharding rules. An illegal layout is UN_ERR_SHAPE with a message naming the op, the input and
 * the rule that fails. `label` names the node in messages (may be NULL). With ctx NULL no message
 * is built (the generator's fast path). */
un_status un_spec_infer(un_ctx *ctx, const un_spec *spec, un_op op, const un_param *params,
                        const un_shape *in, int n_in, const char *label, un_infer *out);

/* Parameters of parallel op `op` (partition, combine, replicate, reduce): defaults, then its dim
 * (ops that have one) and its degree. p has UN_MAX_PARAMS entries. */
void un_spec_parallel_params(const un_spec *spec, un_op op, int64_t dim, int64_t degree,
                             un_param *p);

/* The piece of tensor t (input t, or output t when is_out) that device tuple u works on when an op
 * runs under the applied rules inf->uses: u holds one index per applied rule, and each index is a
 * mixed-radix digit of the layout component its rule touches. Writes the block index per dim, the
 * partial-sum index and the copy index. The reference evaluator and the runtime both place pieces
 * this way. */
void un_infer_piece(const un_infer *inf, const int32_t *u, bool is_out, int t, int32_t *block,
                    int32_t *sum, int32_t *copy);

/* Multiplies into the input layouts `in` what sharding rule `rule` (-1: the implicit copy rule)
 * with foreach value fe and degree k requires of them: one layout the rule accepts. UN_ERR_SHAPE
 * when the rule does not apply (its conditions fail or a dim does not divide). */
un_status un_spec_rule_apply(un_ctx *ctx, const un_spec *spec, un_op op, const un_param *params,
                             int rule, int fe, int32_t k, un_shape *in, int n_in);

/* Evaluates the op's cost expressions for concrete shapes (after inference). */
un_status un_spec_cost(un_ctx *ctx, const un_spec *spec, un_op op, const un_param *params,
                       const un_shape *in, int n_in, const un_infer *inf, double *flops,
                       double *bytes);

/* All four cost expressions (forward flops, bytes, backward flops, bytes) into cost[4]; an
 * expression the spec does not give is -1 (the caller picks a default). */
un_status un_spec_cost_all(un_ctx *ctx, const un_spec *spec, un_op op, const un_param *params,
                           const un_shape *in, int n_in, const un_infer *inf, double *cost);

#endif
