/* prune.h - from enumerated graphs to candidate rules (DESIGN.md section 6): graphs with equal
 * fingerprints are compared on their full values and paired, each with the smallest graph of its
 * group; the pairs then pass the pruning stages, cheapest first, and the survivors are checked on
 * fresh random inputs (un_rule_check_random, prime field) and kept in canonical form.
 *
 * Stages, each counted:
 *   naming     - the inputs a pair uses must be a prefix of every group of interchangeable menu
 *                inputs (x1 before x2 before x3): other pairs are renamings of one that is
 *                (applied to graphs as they are enumerated, and again to pairs);
 *   supergraph - both sides equal once every inner tensor is replaced by the smallest graph of
 *                its value (TASO's common supergraph, generalised): a congruence of smaller rules
 *                (applied to graphs as they are enumerated: one graph per value and normal form;
 *                again to pairs, where kept commutativity rules also make argument order moot);
 *   compose    - a side equal, that way, to a member of its group already kept or implied: the
 *                pair follows by composing that rule with smaller ones;
 *   rename     - the rule (either direction) is a renaming of a kept one (un_rule_hash);
 *   subgraph   - abstracting a tensor both sides compute identically (TASO's common subgraph), or
 *                dropping an output both compute identically, gives a kept rule: an instance;
 *   check      - the rule fails un_rule_check_random (a fingerprint collision).
 * Pairs are processed smallest first (largest side, then total size), so "kept" means smaller.
 *
 *   un_gen_rules rs;
 *   st = un_gen_find(ctx, e, &params, &rs);     // rs.rules[i] canonical, rs.stats counts per stage
 *   un_gen_rules_deinit(&rs);
 */
#ifndef UN_GEN_PRUNE_H
#define UN_GEN_PRUNE_H

#include "gen/enum.h"
#include "pcg/rule.h"

typedef struct un_gen_stats {
    int64_t graphs;         /* distinct graphs enumerated */
    int64_t records;        /* connected graphs with 1..4 outputs kept for pairing (this shard) */
    int64_t graphs_naming;  /* graphs dropped before pairing: inputs not a group prefix */
    int64_t graphs_same_nf; /* ... a smaller graph has the same value and normal form */
    int64_t unions;         /* disconnected partners assembled from single-output classes */
    int64_t buckets;        /* groups of >= 2 graphs with equal values */
    int64_t pairs;          /* candidate pairs (each member with its group's smallest graph) */
    int64_t after_naming;   /* pairs left after each stage */
    int64_t after_super;
    int64_t after_compose;
    int64_t after_rename;
    int64_t after_sub;
    int64_t after_check; /* = rules kept */
    int64_t with_var;    /* kept rules with a degree variable k */
    double enum_seconds, pair_seconds;
    double group_seconds, info_seconds; /* of pair_seconds: pairing the groups; the workers'
                                         * per-pair facts (the rest: the in-order decisions) */
    bool stopped;                       /* enumeration cut short by the time limit */
    int64_t work_done, work_total;      /* top-level work items of the enumeration */
} un_gen_stats;

typedef struct un_gen_rules {
    un_rule **rules;     /* owned, canonical form, in processing order (NULL when streamed) */
    int64_t n;           /* rules kept */
    uint64_t *kept_hash; /* un_rule_hash of each kept rule, in order (owned) */
    un_gen_stats stats;
    /* what the pruning knew at the end, for un_gen_pair_explain (owned) */
    un_gen_class *classes; /* value classes of the cones below the size bound */
    int64_t n_classes;
    bool *comm;      /* per menu instance: a kept rule made its argument order moot */
    uint64_t *known; /* sorted pair hashes of every rule kept or implied */
    int64_t n_known;
} un_gen_rules;

/* Enumerates, pairs and prunes. Deterministic for the same specs, menu, seed and shard, whatever
 * the thread count. */
un_status un_gen_find(un_ctx *ctx, un_gen_enum *e, const un_gen_params *p, un_gen_rules *out);

/* The same, handing each kept rule (canonical form, borrowed for the call) to sink->emit instead
 * of keeping it: memory then holds no rules (at N=4 they would not fit). An error from emit stops
 * the run and is returned. sink->prep (optional) runs on the worker threads on every likely keeper
 * (its stored form and un_rule_hash of it), so that what the sink does per rule (the database's
 * columns) leaves the sequential decisions; emit gets what prep made for the rule (NULL without
 * prep, or when prep failed: emit then does the work itself), and drop frees it afterwards, kept
 * or not. */
typedef un_status (*un_gen_emit_fn)(void *user, un_ctx *ctx, const un_rule *r, void *prepared);
typedef struct un_gen_sink {
    un_gen_emit_fn emit;
    void *(*prep)(void *user, un_ctx *ctx, const un_rule *r, uint64_t hash);
    void (*drop)(void *prepared);
    void *user;
} un_gen_sink;
un_status un_gen_find_stream(un_ctx *ctx, un_gen_enum *e, const un_gen_params *p,
                             const un_gen_sink *sink, un_gen_rules *out);
void un_gen_rules_deinit(un_gen_rules *rs);

/* The direction stored for a pair: of A => B and B => A, the one with the smaller canonical hash.
 * Returns it (owned, canonical form) or NULL with the error in ctx. */
un_status un_gen_rule_orient(un_ctx *ctx, const un_rule *r, un_rule **out);

/* Adds variable "k" to r when every parallel operator degree and every input layout degree > 1 on
 * both sides has the same value (and there is at least one on each side). */
un_status un_gen_rule_add_degree_var(un_ctx *ctx, un_rule *r);

/* Why the equality a <=> b (compact graphs over e's menu, equal values) follows from the rules
 * found: writes the reason (one of the pruning stages) into why and returns true; false when it
 * does not follow in one of those ways. */
bool un_gen_pair_explain(un_ctx *ctx, const un_gen_enum *e, const un_gen_rules *rs,
                         const un_gen_graph *a, const un_gen_graph *b, char *why, size_t n);

/* Writes the stats as a JSON object (for the run row and --json). */
void un_gen_stats_json(const un_gen_stats *s, un_buf *b);

#endif
