/* closure.h - closure pruning of a rule set (issue 17 item 2), after TASO's and Quartz's
 * generators: a rule whose target is reachable from its source by a few rewrites with rules kept
 * before it is redundant, and dropped. It lives in search/ because it needs the rewriting engine
 * (match.h, apply.h) and gen/ may not depend on search/ (DESIGN.md section 2); `unity-closure`
 * runs it as a stage between unity-gen and unity-verify, writing the kept rules to a new database.
 *
 *   un_closure_params p = un_closure_params_default();      // 2 rewrites
 *   bool *drop = calloc(n, 1);
 *   st = un_closure_prune(ctx, spec, rules, n, &p, drop, &stats);
 *
 * Rules are decided in the order given (the generator's: smallest first): rule i is dropped when
 * some graph reachable from its source within ceil(depth/2) rewrites equals (same operators,
 * parameters, named inputs and ordered outputs) one reachable from its target within
 * floor(depth/2), using rules kept before i in either direction. So that the decisions can run on
 * several threads and still not depend on their number, rules are decided in chunks of a size
 * fixed by how many were decided before (1 .. 256, a sixteenth of them): a rule may use the rules
 * kept in earlier chunks only. The target's side is explored first; the source's stops as soon as
 * nothing closer can come. Each side expands a level only while it has seen at most max_graphs
 * graphs, so what is explored does not depend on the order of matches (nor on the threads).
 * At the source's last level a rewrite is built only when the kinds of operator its result has
 * (counted as the graph's minus the match's plus the rule target's) are those of some graph of
 * the target's side; this saves work and never changes a decision. The last level of either side
 * is only looked up, never expanded, so its rewrites are keyed from a sketch of the result
 * (un_apply_sketch: no graph built), with each thread's instantiations cached (un_inst_cache).
 *
 * un_closure_reach: the graphs reachable from a graph within d rewrites of a rule set (the reach
 * test: what the full set reaches, the pruned one must too). */
#ifndef UN_CLOSURE_H
#define UN_CLOSURE_H

#include "search/apply.h"

typedef struct un_closure_params {
    int depth;      /* rewrites of a derivation, 1..4 (default 2) */
    int max_graphs; /* per side, a level is expanded only while at most this many graphs were
                     * seen (default 4096) */
    int threads;    /* worker threads (default 1) */
    int basis_ops;  /* only rules of at most this many operators per side derive others (0 =
                     * every rule; a bound keeps large sets affordable: the basis rules are held
                     * in memory, ~34 KB each at N=4) */
    bool progress;  /* progress lines through un_ctx_progress */
} un_closure_params;

un_closure_params un_closure_params_default(void);

typedef struct un_closure_stats {
    int64_t rules;       /* rules given */
    int64_t too_big;     /* never used to derive others: a side over UN_MATCH_MAX_NODES */
    int64_t not_basis;   /* never used to derive others: over params.basis_ops */
    int64_t dropped;     /* derivable, dropped */
    int64_t kept;        /* rules - dropped */
    int64_t by_depth[5]; /* dropped, by the rewrites their derivation needed */
    int64_t capped;  /* kept rules whose exploration hit max_graphs (may be derivable after all) */
    int64_t unbuilt; /* rewrites not built: no graph of the other side has the operators their
                      * result would have */
    double seconds;
} un_closure_stats;

/* Decides, for each of rules[0..n) in order, whether it follows from the rules kept before it
 * (above); drop[i] is set for the dropped ones (the caller's array of n bools, zeroed). The rules
 * are borrowed. stats may be NULL. Errors: UN_ERR_* from compiling the rules. */
un_status un_closure_prune(un_ctx *ctx, const un_spec *spec, un_rule *const *rules, int64_t n,
                           const un_closure_params *p, bool *drop, un_closure_stats *stats);

/* The same in two steps, for sets too large to hold (an N=4 set): un_closure_new decides rules
 * (usually those of at most params.basis_ops operators) as un_closure_prune does and keeps the
 * kept ones as a basis; un_closure_check then decides more rules against that basis, all in
 * parallel, in batches the caller streams (they do not join the basis). The rules passed to
 * un_closure_new are borrowed only during the call. Owned: un_closure_free. */
typedef struct un_closure un_closure;
un_status un_closure_new(un_ctx *ctx, const un_spec *spec, un_rule *const *rules, int64_t n,
                         const un_closure_params *p, bool *drop, un_closure_stats *stats,
                         un_closure **out);
un_status un_closure_check(un_ctx *ctx, un_closure *c, un_rule *const *rules, int64_t n, bool *drop,
                           un_closure_stats *stats);
void un_closure_free(un_closure *c);

/* A graph's identity for the closure: operators, parameters, source nodes by name and shape, and
 * the outputs in order; independent of node order. */
uint64_t un_closure_graph_key(const un_graph *g);
/* The same key of a sketch (un_apply_sketch: a rewrite's result, not built); equal to the built
 * graph's. */
uint64_t un_closure_sketch_key(const un_sketch *s);

/* The keys (un_closure_graph_key) of every graph reachable from g within `depth` rewrites with
 * set's rules, g included: sorted, unique, *n of them, owned (free). At most max_graphs graphs
 * are expanded (0 = no bound); *capped (may be NULL) tells whether the bound cut it. */
un_status un_closure_reach(un_ctx *ctx, const un_ruleset *set, const un_graph *g, int depth,
                           int64_t max_graphs, uint64_t **keys, int64_t *n, bool *capped);

/* The reach test: every graph reachable from g within `depth` rewrites of `full` must be
 * reachable with `pruned`. Breadth first with full; a graph reached by a rule that pruned also has
 * (same un_rule_hash) is reachable; one reached otherwise from a graph known reachable is checked
 * to be within `step` rewrites of pruned from it (meet in the middle, as the pruning decided).
 * Graphs that fail are counted in missing and not expanded. */
typedef struct un_closure_reach_stats {
    int64_t graphs;  /* distinct graphs reached with full (g included) */
    int64_t direct;  /* reached by a rule pruned has too */
    int64_t derived; /* reached only through a derivation with pruned's rules */
    int64_t missing; /* not shown reachable with pruned */
    bool capped;     /* max_graphs cut the exploration */
} un_closure_reach_stats;

un_status un_closure_reach_check(un_ctx *ctx, const un_ruleset *full, const un_ruleset *pruned,
                                 const un_graph *g, int depth, int step, int64_t max_graphs,
                                 un_closure_reach_stats *out);

#endif
