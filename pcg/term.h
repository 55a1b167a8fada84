/* term.h - instantiating axiom terms (spec.h's un_term) as PCG nodes, for concrete checks of the
 * axioms by the reference evaluator. The verifier reads the same terms symbolically.
 *
 *   int32_t vars[2] = {x_node, y_node};        // input nodes for the axiom's tensor variables
 *   int64_t pv[1] = {1};                       // values of its parameter variables
 *   un_ref l, r;
 *   st = un_term_build(ctx, g, ax, ax->lhs, pv, vars, &l);
 *   st = un_term_build(ctx, g, ax, ax->rhs, pv, vars, &r);
 */
#ifndef UN_TERM_H
#define UN_TERM_H

#include "pcg/graph.h"

/* Adds the nodes of term t to g (parameters evaluated from pvals and the shapes of var_nodes;
 * unlisted parameters take their defaults) and returns the reference to its value. A term that
 * is not well formed for these shapes is UN_ERR_SHAPE. */
un_status un_term_build(un_ctx *ctx, un_graph *g, const un_axiom *ax, const un_term *t,
                        const int64_t *pvals, const int32_t *var_nodes, un_ref *out);

/* Writes the term back as text. */
void un_term_str(const un_spec *spec, const un_term *t, const un_axiom *ax, un_buf *b);

#endif
