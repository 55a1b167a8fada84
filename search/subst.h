/* subst.h - layer 2 of the search (DESIGN.md section 8, issue 15 item 2): best-first search over
 * applications of verified rules (search/rules.h, match.h, apply.h) to a serial PCG, each
 * candidate costed by layer 3 (search/mapping.h: un_map_new + un_map_solve at a given memory
 * price lambda, the additive estimate in seconds + lambda * bytes of device 0).
 *
 * A priority queue of graphs ordered by that cost starts from the given graph; each popped graph
 * is expanded by every match of every rule layer 2 uses. A child whose canonical hash
 * (un_graph_hash) was seen before is a duplicate and dropped (64-bit hashes: a collision would
 * drop a distinct graph; graphs are not compared node by node); each new graph is costed once
 * (the cost is kept per hash: the memo) and dropped when costlier than alpha x the best so far.
 * The queue holds at most max_queue graphs (each a whole PCG: memory), dropping the costliest.
 * The search ends when the queue is empty ("exhausted"), when `budget` graphs have been costed
 * ("budget") or at `time_limit` ("time").
 *
 * Which rules. Layer 3 already chooses every node's parallelization, so layer 2 uses the
 * algebraic rules: those with no parallel operator (partition, combine, replicate, reduce) on
 * either side (un_subst_rule_algebraic); a rule that introduces parallel ops would put a fixed
 * parallelization into the graph that layer 3 then cannot change, and layer 3 wants a serial PCG.
 * The candidates therefore stay serial.
 *
 *   un_subst_params p = un_subst_params_default(4);    // layer 3 on 4 devices, lambda 0
 *   un_subst_result r;
 *   st = un_subst_search(ctx, rules, cm, g, &p, &r);
 *   ... r.best (the rewritten graph), r.steps[0 .. r.n_steps) (the rules on its path) ...
 *   un_subst_result_deinit(&r);
 */
#ifndef UN_SUBST_H
#define UN_SUBST_H

#include "search/apply.h"
#include "search/split.h"

typedef struct un_subst_params {
    un_map_params map; /* how layer 3 costs each candidate (devices, max_states, ...) */
    double lambda;     /* memory price (seconds per byte of device 0) */
    double alpha;      /* children costlier than alpha x best are dropped (>= 1; 1.05) */
    int64_t budget;    /* graphs costed by layer 3 at most, the start included (0: 1000) */
    double time_limit; /* seconds of wall time (0: none; the budget still bounds it) */
    int32_t max_nodes; /* children with more nodes are dropped (0: no bound) */
    int64_t max_queue; /* graphs queued at most; beyond, the costliest is dropped (0: 256) */
    const bool *use;   /* the entries to use, from un_subst_rules_pick (NULL: picked here) */
} un_subst_params;

/* One rewrite on the path to the best graph. */
typedef struct un_subst_step {
    int32_t entry;   /* entry of the ruleset */
    int32_t rule_id; /* its rules.db id */
    bool reversed;   /* the rule was applied backwards */
} un_subst_step;

typedef struct un_subst_result {
    un_graph *best;           /* owned: the cheapest graph found (a copy of the start if none) */
    double start_cost;        /* layer 3's cost of the start graph */
    double best_cost;         /* of best */
    int32_t n_steps;          /* rewrites from the start to best */
    un_subst_step *steps;     /* owned, n_steps of them, in order */
    const char *ended;        /* "exhausted", "budget" or "time" (static) */
    int64_t rules_loaded;     /* entries of the ruleset */
    int64_t rules_used;       /* of those: algebraic (the ones layer 2 uses) */
    int64_t popped;           /* graphs taken from the queue and expanded */
    int64_t matches;          /* matches found on popped graphs (of the rules used) */
    int64_t generated;        /* children made by applying a match */
    int64_t apply_failed;     /* matches un_apply refused (shape or layout checks) */
    int64_t duplicates;       /* children already seen (canonical hash) */
    int64_t too_big;          /* children over max_nodes */
    int64_t costed;           /* graphs costed by layer 3 (the start included) */
    int64_t map_failed;       /* graphs layer 3 could not cost (dropped) */
    int64_t pruned_alpha;     /* children costlier than alpha x best */
    int64_t max_queue;        /* most graphs queued at once */
    int64_t queue_dropped;    /* the costliest queued graphs dropped at max_queue */
    int64_t boundary;         /* matches skipped: they touch a piece's entry or exit (pieces) */
    int32_t pieces;           /* layer-1 pieces searched one by one (0: the whole graph) */
    int32_t piece_classes;    /* of those, distinct subproblems (equal pieces searched once) */
    int32_t pieces_rewritten; /* pieces whose chosen form is not the original */
    double match_s, map_s;    /* seconds spent matching + applying, and in layer 3 */
    double wall;              /* seconds the search took */
} un_subst_result;

un_subst_params un_subst_params_default(int devices);

/* Whether layer 2 uses rule r: no parallel operator on either side. */
bool un_subst_rule_algebraic(const un_rule *r);
/* Marks in use[i] (room for un_ruleset_count(set); may be NULL) whether layer 2 uses entry i;
 * returns how many it uses. Decodes each rule once without keeping it. */
int64_t un_subst_rules_pick(const un_ruleset *set, bool *use);

/* Searches from g (serial, borrowed) with the rules of set (borrowed; set may be NULL: no
 * rewrites, best is a copy of g) costed by cm. UN_ERR_INVALID for alpha < 1 or NaN, or when
 * layer 3 cannot cost g itself. On error *out is empty. */
un_status un_subst_search(un_ctx *ctx, const un_ruleset *set, un_cost_model *cm, const un_graph *g,
                          const un_subst_params *p, un_subst_result *out);
void un_subst_result_deinit(un_subst_result *r);

/* Layer 2 per layer-1 piece, as Unity does it: g is cut into the pieces of un_split_make (at
 * most split_size regular nodes between cut nodes); each piece is taken out as its own graph (its
 * entry cut node over fresh inputs, its nodes, the sources it reads; the exit's outputs first)
 * and searched best-first like un_subst_search, except that a match touching the entry or exit
 * node is skipped (the cut stays where it is) and each candidate is costed by layer 3 on the
 * piece alone, once per configuration of the entry cut node, for every configuration of the
 * exit (un_map_solve_piece): the incremental costing, the rest of the graph is not re-costed.
 * Per (entry, exit) configuration pair the cheapest candidate is kept; the pieces are joined by
 * the dynamic programme along the chain (split.c's), and the chosen candidates stitched into one
 * graph (out->best; sources, their order and the graph outputs are g's). Pieces that are the same
 * subproblem (canonical hash, checked node by node: a transformer's layers) are searched once
 * and the result translated. A candidate is pruned by alpha on its cheapest configuration pair;
 * the budget holds per distinct piece (Unity's --budget is per base subgraph), the time limit for
 * the whole, shared among the pieces left. start_cost and best_cost are layer 3's cost
 * (un_map_solve) of g and of out->best (both 0 when no piece has a match: nothing is costed);
 * when the stitched graph is not cheaper, out->best is g and no step is reported. A piece no
 * rule matches is costed (its table) only when another piece has a match. When g does not split
 * (one piece) or a piece cannot be taken out, this is un_subst_search on the whole graph
 * (out->pieces 0). */
un_status un_subst_search_pieces(un_ctx *ctx, const un_ruleset *set, un_cost_model *cm,
                                 const un_graph *g, const un_subst_params *p, int split_size,
                                 un_subst_result *out);

/* Monotonic wall-clock seconds (the search's deadlines). */
double un_search_clock(void);

/* One line per step: "  rule 301 (reversed): linear(x0, w0) => ...". */
void un_subst_report_steps(const un_subst_result *r, const un_ruleset *set, un_buf *out);

#endif
