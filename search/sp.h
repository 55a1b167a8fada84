/* sp.h - graph analyses the search needs (DESIGN.md section 8): consumer lists, dominators and
 * post-dominators (the post-dominators are where the first layer splits a PCG), and the
 * series-parallel decomposition the mapping layer's dynamic programme runs over.
 *
 * The analyses run over the graph's nodes in id order (a topological order). A virtual root
 * precedes every node without inputs and a virtual sink follows every node without consumers,
 * so every node has an immediate dominator and post-dominator (UN_SP_ROOT / UN_SP_SINK when only
 * the virtual node dominates it).
 *
 * The decomposition: a set of nodes with one node that every other one reaches or is reached by
 * (a bottleneck) is the series of the parts between its bottlenecks; else, when it falls apart
 * into weakly connected components, the parallel of those; else it is not series-parallel, and
 * the standard fallback applies: it is cut in two along its topological order, at the cut that
 * the fewest edges cross (ties: nearest the middle), and the two halves are composed in series
 * (a valid order that adds dependencies; the tree node is marked `forced`).
 *
 *   un_sp_info a;
 *   st = un_sp_analyse(ctx, g, NULL, &a);          // NULL: every node
 *   for (int32_t k = a.cons_at[v]; k < a.cons_at[v + 1]; k++) ... a.cons[k] ...;
 *   if (a.ipdom[v] == UN_SP_SINK) ...;
 *   un_sp_tree t;
 *   st = un_sp_decompose(ctx, &a, &t);
 *   ... t.nodes[t.root], t.order[t.nodes[i].begin .. end) ...
 *   un_sp_tree_deinit(&t);
 *   un_sp_info_deinit(&a);
 */
#ifndef UN_SP_H
#define UN_SP_H

#include "pcg/graph.h"

#define UN_SP_ROOT (-1) /* the virtual root (dominator of every node) */
#define UN_SP_SINK (-2) /* the virtual sink (post-dominator of every node) */

typedef struct un_sp_info {
    int32_t n;        /* nodes of the graph */
    bool *in;         /* [n] the node takes part (the mask given, or all) */
    int32_t *cons_at; /* [n + 1] consumers of node v: cons[cons_at[v] .. cons_at[v + 1]) */
    int32_t *cons;    /* distinct consumer node ids, ascending; only nodes taking part */
    int32_t *idom;    /* [n] immediate dominator, UN_SP_ROOT, or -3 for a node not taking part */
    int32_t *ipdom;   /* [n] immediate post-dominator, UN_SP_SINK, or -3 */
    int32_t n_in;     /* nodes taking part */
    int32_t words;    /* 64-bit words per reachability row */
    uint64_t *anc;    /* [n * words] anc[v]: the nodes taking part that reach v */
    uint64_t *desc;   /* [n * words] desc[v]: the nodes taking part that v reaches */
    const un_graph *g;
} un_sp_info;

typedef enum { UN_SP_LEAF, UN_SP_SERIES, UN_SP_PARALLEL } un_sp_kind;

typedef struct un_sp_node {
    un_sp_kind kind;
    int32_t node;              /* graph node of a leaf, -1 otherwise */
    int32_t begin, end;        /* its leaves: order[begin .. end) (graph node ids) */
    int32_t child_at, n_child; /* children: child[child_at .. child_at + n_child), in order */
    bool forced;               /* a series made by the non-SP fallback */
} un_sp_node;

typedef struct un_sp_tree {
    int32_t n_nodes, root;
    un_sp_node *nodes;
    int32_t *child; /* child indices into nodes */
    int32_t *order; /* graph node ids, each taking part exactly once, in leaf order */
    int32_t n_order;
    int32_t n_forced; /* series made by the fallback: 0 for a series-parallel graph */
} un_sp_tree;

/* ---- lifecycle ---- */

/* Consumers, dominators and post-dominators of g restricted to the nodes with mask[v] true
 * (NULL: every node); edges from or to other nodes are ignored. Release with
 * un_sp_info_deinit. */
un_status un_sp_analyse(un_ctx *ctx, const un_graph *g, const bool *mask, un_sp_info *out);
void un_sp_info_deinit(un_sp_info *a);

/* The series-parallel decomposition of the nodes taking part in a. Release with
 * un_sp_tree_deinit. */
un_status un_sp_decompose(un_ctx *ctx, const un_sp_info *a, un_sp_tree *out);
void un_sp_tree_deinit(un_sp_tree *t);

/* ---- queries ---- */

/* Whether a dominates b (every path from the root to b passes a; a node dominates itself). */
bool un_sp_dominates(const un_sp_info *a, int32_t d, int32_t v);
/* Whether p post-dominates v (every path from v to the sink passes p). */
bool un_sp_postdominates(const un_sp_info *a, int32_t p, int32_t v);
/* The cut nodes of the nodes taking part: those that dominate every node after them and
 * post-dominate every node before them (every path from the start to the end crosses them, and
 * no edge passes around them), ascending, written to out (room for a->n); returns how many.
 * These are where the first layer splits a graph. */
int32_t un_sp_cut_nodes(const un_sp_info *a, int32_t *out);

/* The tree as text, one node per line, indented: "series", "parallel", "series (forced)" and
 * leaves by node name, for tests and reports. */
void un_sp_tree_str(const un_sp_tree *t, const un_graph *g, un_buf *out);

#endif
