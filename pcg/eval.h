/* eval.h - the reference evaluator: runs a PCG piece by piece on concrete tensors, in the prime
 * field (exact; fingerprints and axiom checks) or in float64 (ground truth for the runtime).
 * A parallel tensor value holds all its pieces; regular ops run once per device tuple of their
 * applied sharding rules; parallel ops move pieces. Slow and simple on purpose: it defines what
 * every faster path must compute.
 *
 *   un_eval *ev;
 *   st = un_eval_new(ctx, g, UN_DOM_FIELD, &ev);
 *   un_eval_fill_random(ev, 42);                  // every input and weight
 *   st = un_eval_run(ev);
 *   const un_ptensor *y = un_eval_value(ev, un_graph_output(g, 0));
 *   st = un_ptensor_gather(ctx, y, UN_DOM_FIELD, dense);   // logical value
 *   un_eval_free(ev);
 */
#ifndef UN_EVAL_H
#define UN_EVAL_H

#include "pcg/graph.h"
#include "pcg/num.h"

/* A parallel tensor value: all pieces of `shape`, contiguous, piece-major in the order
 * (block index per dim j_0..j_{r-1}, sum index, copy index), row-major; each piece is a dense
 * row-major block of the local sizes dim[i] / shard[i]. Owned data: free with un_ptensor_deinit. */
/* The most values (over all pieces) the reference evaluator holds for one tensor: 2^26 (512 MiB).
 */
#define UN_EVAL_MAX_VALUES ((int64_t)1 << 26)

typedef struct un_ptensor {
    un_shape shape;
    un_val *data;
} un_ptensor;

un_status un_ptensor_init(un_ctx *ctx, un_ptensor *t, const un_shape *shape);
void un_ptensor_deinit(un_ptensor *t);
/* Pointer to piece (blocks[], sum index, copy index). */
un_val *un_ptensor_piece(const un_ptensor *t, const int32_t *block, int32_t sum, int32_t copy);
/* Logical value into dense (numel of the logical shape): blocks assembled, partial sums added.
 * UN_ERR_MISMATCH when copies differ. */
un_status un_ptensor_gather(un_ctx *ctx, const un_ptensor *t, un_dom dom, un_val *dense);
/* Splits a logical value into t's layout (t initialised): partial sums are random summands that
 * add up to the value, drawn from rng; copies identical. */
un_status un_ptensor_scatter(un_ctx *ctx, un_ptensor *t, un_dom dom, const un_val *dense,
                             un_rng *rng);
/* Random logical values: field elements, floats in [-1,1), or ints in [0, range). */
void un_ptensor_random_dense(un_dom dom, un_dtype dtype, int64_t range, int64_t n, un_rng *rng,
                             un_val *out);
/* Compares dense values: exact in the field, |a-b| <= tol*(1+|b|) in float64. Writes the first
 * differing index to *where (may be NULL). */
bool un_dense_equal(un_dom dom, const un_val *a, const un_val *b, int64_t n, double tol,
                    int64_t *where);

/* ---- evaluation ---- */

/* Runs a regular or parallel op on parallel tensor values. out[] are initialised by the call
 * (un_ptensor_deinit them). inf must come from un_spec_infer on the same inputs. */
un_status un_eval_op(un_ctx *ctx, const un_spec *spec, un_op op, const un_param *params,
                     const un_infer *inf, un_dom dom, const un_ptensor *in, int n_in,
                     un_ptensor *out);

typedef struct un_eval un_eval;

/* Owned: free with un_eval_free. The graph is borrowed and must not change meanwhile. A graph
 * with a tensor beyond UN_EVAL_MAX_VALUES is UN_ERR_LIMIT (the reference evaluator is for small
 * instances). */
un_status un_eval_new(un_ctx *ctx, const un_graph *g, un_dom dom, un_eval **out);
void un_eval_free(un_eval *ev);
/* Sets a source node's logical value (numel values), split into its layout: blocks placed,
 * copies filled, partial sums drawn at random (repeatably) so that they add up to it. */
un_status un_eval_set(un_eval *ev, int32_t node, const un_val *dense);
/* Fills every source node not yet set with random values drawn from seed and the node's name
 * (graphs that share input names get equal inputs); ints lie in [0, range). */
un_status un_eval_fill_random(un_eval *ev, uint64_t seed);
un_status un_eval_run(un_eval *ev);
/* Value of a node output after un_eval_run; borrowed until un_eval_free. */
const un_ptensor *un_eval_value(const un_eval *ev, un_ref r);

/* Evaluates two graphs on the same random inputs (source nodes matched by name; every source of
 * b must have a namesake of the same logical shape in a) and compares their outputs in order,
 * as logical values. *max_err is the largest |difference| (0 in the field). UN_ERR_MISMATCH,
 * with the output and element, when they differ (exactly in the field; beyond tol in float64). */
un_status un_eval_compare(un_ctx *ctx, const un_graph *a, const un_graph *b, un_dom dom,
                          uint64_t seed, double tol, double *max_err);

#endif
