/* apply.h - replacing a match by the rule's instantiated target (issue 12 item 3). The result is
 * a new graph (graphs stay append-only and topologically ordered): the match's operator nodes go,
 * the target's nodes come in over the bound inputs, consumers of each mapped output read the
 * target's output instead, nodes that no longer reach a graph output are dropped (sources stay),
 * and every kept node's layouts are re-inferred and must equal what they were. The rule is
 * instantiated again at the match (un_rule_instantiate), so a reversed rule is applied only once
 * its new side is checked well formed. The target's nodes are named after the rule and the place:
 * "<anchor>~r<id>[R].<target node>" (anchor: the replaced node of the rule's first output, up to
 * its first '~'; R: the rule used backwards; "#2", ... when the name is taken), e.g.
 * "l1.ffn1~r12R.t0", so reports, DOT and checkpoints stay readable and names deterministic.
 *
 *   un_graph *g2; int32_t *origin;
 *   st = un_apply(ctx, set, g, &ms.v[0], &g2, &origin);   // origin[new id] = old id, -1 = new
 *   free(origin); un_graph_free(g2);
 */
#ifndef UN_APPLY_H
#define UN_APPLY_H

#include "search/match.h"

/* Applies match mt of set's entry mt->rule to g. On success *out is owned (un_graph_free) and
 * *origin (may be NULL) receives per new node the old node it copies, or -1 for a node of the
 * target (owned, free()). Errors leave *out NULL: UN_ERR_SHAPE when the rule does not instantiate
 * at the match, UN_ERR_MISMATCH when a kept node's layout changed, UN_ERR_INVALID when the
 * match does not fit g (node ids, a cycle). */
un_status un_apply(un_ctx *ctx, const un_ruleset *set, const un_graph *g, const un_match *mt,
                   un_graph **out, int32_t **origin);

/* A graph as the closure reads it (its key and operator kinds), without names of its own or
 * inferred layouts: per node the operator, parameters, name and first output's layout (borrowed
 * from the graph, or from inst for a rewrite's new nodes), inputs by index; outputs. The arrays
 * are reused from one fill to the next; un_sketch_deinit frees them. */
typedef struct un_sketch_node {
    un_op op;
    const un_param *params;
    const char *name;
    const un_shape *shape;
    int32_t n_in;
    un_ref in[UN_MAX_INPUTS];
} un_sketch_node;

typedef struct un_sketch {
    const un_spec *spec;
    un_sketch_node *node;
    int32_t n_nodes, cap;
    un_ref *out;
    int32_t n_out, out_cap;
    un_rule *inst; /* the rule instantiated at the match, when not a cache's (owned) */
} un_sketch;

/* g's nodes and outputs, as they are. */
void un_sketch_of_graph(const un_graph *g, un_sketch *s);
/* What un_apply would build, without building it: the same nodes in the same order, names of
 * kept nodes, parameters and outputs, and the same errors (the instantiation and the match's
 * checks). *exact is false (s then unusable) where the result would depend on re-inferring kept
 * nodes (a mapped output read by a kept node changes layout): build it with un_apply then. */
un_status un_apply_sketch(un_ctx *ctx, const un_ruleset *set, const un_graph *g, const un_match *mt,
                          un_inst_cache *cache, un_sketch *s, bool *exact);
void un_sketch_deinit(un_sketch *s);

/* g as Graphviz DOT with the nodes for which highlight[id] is true filled in a colour (the
 * replaced region of a rewrite, from un_apply's origin); highlight may be NULL. */
un_status un_apply_dot(un_ctx *ctx, const un_graph *g, const bool *highlight, un_buf *out);

#endif
