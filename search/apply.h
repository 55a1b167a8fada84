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

/* g as Graphviz DOT with the nodes for which highlight[id] is true filled in a colour (the
 * replaced region of a rewrite, from un_apply's origin); highlight may be NULL. */
un_status un_apply_dot(un_ctx *ctx, const un_graph *g, const bool *highlight, un_buf *out);

#endif
