/* match.h - every occurrence of a rule's source pattern in a PCG (issue 12 item 2): an injective
 * map of the pattern's operator nodes to graph nodes with the same operator and parameters (a
 * parameter that carries a rule variable may take any value, bound consistently over the match),
 * the same inputs (a pattern input used twice binds one tensor; output indices kept), inputs whose
 * layouts equal the pattern's (up to the variables) and, for a rule not proven for every size,
 * whose dims do too; then the rule instantiated at the matched values and shapes
 * (un_rule_instantiate: side conditions and a well-formed target, which is what makes a
 * reversed rule safe) must hold. A matched tensor used outside the match (or a graph output)
 * must be a mapped output, and no path may leave the match and come back (the rewrite would make
 * a cycle). It finds matches; apply.h replaces them.
 *
 *   un_matcher *m;
 *   st = un_matcher_new(ctx, set, g, &m);              // consumer lists, nodes by operator
 *   un_match_list ms = {0};
 *   st = un_match_all(ctx, m, &ms);                   // or un_match_rule / un_match_at
 *   for (int64_t i = 0; i < ms.n; i++) ... ms.v[i].rule, ms.v[i].node[...] ...
 *   un_match_list_deinit(&ms);
 *   un_matcher_free(m);
 */
#ifndef UN_MATCH_H
#define UN_MATCH_H

#include "search/rules.h"

/* One match. node[] is indexed by the source pattern's node ids (un_ruleset_rule(set,
 * rule)->src): the graph node each operator node maps to, -1 at the pattern's input nodes. */
typedef struct un_match {
    int32_t rule;                     /* entry in the ruleset */
    int32_t n_nodes;                  /* pattern nodes (inputs included) */
    int32_t node[UN_MATCH_MAX_NODES]; /* graph node per pattern node, -1 for pattern inputs */
    int32_t n_inputs;                 /* rule inputs (un_rule_input_count) */
    un_ref input[UN_MATCH_MAX_NODES]; /* tensor bound to each rule input, un_rule_input order */
    int64_t values[UN_RULE_MAX_VARS]; /* each rule variable's matched value */
} un_match;

/* A growable list of matches (caller-owned storage; start from {0}). */
typedef struct un_match_list {
    un_match *v;
    int64_t n, cap;
} un_match_list;
void un_match_list_deinit(un_match_list *l);

/* Counters over a matcher's life (what was tried and why candidates failed). */
typedef struct un_match_stats {
    int64_t roots_tried; /* (rule, root node) pairs tried */
    int64_t structural;  /* complete node maps found by the structural search */
    int64_t outside_use; /* of those: an interior tensor used outside the match */
    int64_t cyclic;      /* of those: a path leaves the match and comes back */
    int64_t inst_failed; /* of those: un_rule_instantiate refused (side condition, target) */
    int64_t matches;     /* valid matches reported */
} un_match_stats;

typedef struct un_matcher un_matcher;

/* A matcher of set's rules on g: builds g's consumer lists and nodes by operator. Both are
 * borrowed and must outlive it and not change. Owned: free with un_matcher_free. */
un_status un_matcher_new(un_ctx *ctx, const un_ruleset *set, const un_graph *g, un_matcher **out);
void un_matcher_free(un_matcher *m);
/* Only entries e with entry_ok[e] match from now on (borrowed, read at each call; NULL: all). */
void un_matcher_restrict(un_matcher *m, const bool *entry_ok);

/* Instantiations of a rule set's entries at matches (un_rule_instantiate), kept for reuse by the
 * matcher (which instantiates every match) and un_apply_sketch: a few hundred, each replacing an
 * older one. One thread's; used with another set it starts empty. */
typedef struct un_inst_cache un_inst_cache;
un_inst_cache *un_inst_cache_new(void);
void un_inst_cache_free(un_inst_cache *c);
/* un_rule_instantiate of set's entry e at values and the inputs' layouts shapes, through c: *inst
 * is c's, valid until c's next use (*own false), or with c NULL the caller's (*own true). */
un_status un_inst_cache_instantiate(un_ctx *ctx, un_inst_cache *c, const un_ruleset *set, int32_t e,
                                    const int64_t *values, const un_shape *shapes, un_rule **inst,
                                    bool *own);
/* m instantiates its matches through c (may be NULL: none, the default). */
void un_matcher_use_cache(un_matcher *m, un_inst_cache *c);

/* Appends every match of entry `rule` to out. */
un_status un_match_rule(un_ctx *ctx, un_matcher *m, int64_t rule, un_match_list *out);
/* Appends every match of every rule whose pattern root maps to graph node `node` (the rules
 * indexed under its operator): after a rewrite, the search re-matches around the new nodes. */
un_status un_match_at(un_ctx *ctx, un_matcher *m, int32_t node, un_match_list *out);
/* Appends every match of every rule (each match once: at its root), by root operator, then entry.
 * Only the entries the set's label index lets through are tried (rules_impl.h): those whose
 * operators and fixed parameters the graph has; the others could not match. */
un_status un_match_all(un_ctx *ctx, un_matcher *m, un_match_list *out);
un_match_stats un_matcher_stats(const un_matcher *m);

/* Checks one complete node map from scratch, independently of the search: node_map[] gives a
 * graph node for each operator node of entry `rule`'s pattern (entries at pattern inputs are
 * ignored). On a valid match fills *out and returns true; false otherwise (no message). The tests
 * compare the matcher against every map this accepts. */
bool un_match_check(un_matcher *m, int64_t rule, const int32_t *node_map, un_match *out);

/* "rule 12 at [relu_3, fc1]: k=2" for listings. */
void un_match_str(const un_matcher *m, const un_match *mt, un_buf *out);

#endif
