/* flexflow.h - FlexFlow's JSON rule format (a RuleCollection of TASO-generated substitutions, e.g.
 * graph_subst_3_v2.json): import into our rules and export back. The format has no shapes and no
 * input layouts; import chooses them (dims by unification over each op's shape rule, layouts by
 * the least parallel assignment under which both sides are well formed). A rule that is malformed
 * under our specs is kept with its reason (REJECTED), never dropped. Mapping (README.md): dims are
 * Legion order (reversed) with the replica dim last; PM_ACTI uses TASO's codes (0 none, 1
 * sigmoid, 2 relu, 3 tanh); replicate and reduce become copy and sum degrees.
 *
 *   un_flexflow_rule *rs; int n;
 *   st = un_flexflow_load(ctx, spec, "graph_subst_3_v2.json", &rs, &n);   // one per rule in the
 * file for (int i = 0; i < n; i++) rs[i].rule ? use(rs[i].rule) : report(rs[i].name, rs[i].reason);
 *   un_flexflow_rules_free(rs, n);
 *   st = un_flexflow_import(ctx, db, path, &stats);                       // the same, into a
 * rulesdb
 */
#ifndef UN_FLEXFLOW_H
#define UN_FLEXFLOW_H

#include "rulesdb/rulesdb.h"

/* Why a rule was rejected (a closed set, counted by import). */
#define UN_FLEXFLOW_REJECT_LIST(X)                                                                 \
    X(MALFORMED, "malformed rule")                                                                 \
    X(UNKNOWN_OP, "unknown operator")                                                              \
    X(UNKNOWN_PARAM, "unknown or missing parameter")                                               \
    X(ARITY, "wrong arity")                                                                        \
    X(BAD_REF, "bad tensor reference")                                                             \
    X(ONE_SIDE, "input on one side only")                                                          \
    X(REPLICA_DIM, "op on the replica dim")                                                        \
    X(REDUCE_COPIES, "reduce of replicated copies")                                                \
    X(NO_SHAPES, "no input shapes fit")                                                            \
    X(ILL_FORMED, "ill-formed under our layouts")

typedef enum {
#define X(n, s) UN_FLEXFLOW_REJECT_##n,
    UN_FLEXFLOW_REJECT_LIST(X)
#undef X
        UN_FLEXFLOW_REJECT_COUNT
} un_flexflow_reject;

const char *un_flexflow_reject_name(un_flexflow_reject r); /* static */

/* One rule of a FlexFlow file, converted. */
typedef struct un_flexflow_rule {
    char name[64];           /* the rule's "name" (or "rule[i]" when it has none) */
    un_rule *rule;           /* owned; NULL when rejected */
    un_flexflow_reject kind; /* when rejected */
    char reason[256];        /* when rejected: the specific reason */
} un_flexflow_rule;

/* Reads a RuleCollection and converts every rule. A file that is not JSON, or has no "rule"
 * array, is an error naming the file (nothing is returned); a malformed rule is returned
 * rejected with its reason. Owned: un_flexflow_rules_free. */
un_status un_flexflow_load(un_ctx *ctx, const un_spec *spec, const char *path,
                           un_flexflow_rule **out, int *n);
un_status un_flexflow_parse(un_ctx *ctx, const un_spec *spec, const char *name, const char *text,
                            size_t len, un_flexflow_rule **out, int *n);
void un_flexflow_rules_free(un_flexflow_rule *rules, int n);

typedef struct un_flexflow_import_stats {
    int64_t parsed;     /* rules in the file */
    int64_t imported;   /* new candidates */
    int64_t duplicates; /* already in the database (or twice in the file) */
    int64_t rejected;   /* stored as REJECTED */
    int64_t by_reason[UN_FLEXFLOW_REJECT_COUNT]; /* rejected, per reason */
} un_flexflow_import_stats;

/* Loads path and stores every rule in db in one batch (all or nothing): candidates with origin
 * ("imported", path, name), rejected ones with their reason. report (may be NULL) receives one
 * line per rejected rule: "name: reason". */
un_status un_flexflow_import(un_ctx *ctx, un_rulesdb *db, const char *path,
                             un_flexflow_import_stats *stats, un_buf *report);

/* Appends one rule in FlexFlow's format (a "Rule" object) to out. A rule the format cannot express
 * (another operator, a linear with a bias or a gelu, an uneven split, ranks other than 2 without a
 * concat) is UN_ERR_UNAVAILABLE with the reason; out is then unchanged. */
un_status un_flexflow_rule_to_json(un_ctx *ctx, const un_rule *r, const char *name, un_buf *out);

/* Writes a whole RuleCollection of rules[n] (names may be NULL: the rule's own name, else
 * "rule_<i>"). Rules the format cannot express are skipped and counted in *n_skipped, with one
 * line each in report (may be NULL). */
un_status un_flexflow_export(un_ctx *ctx, const un_rule *const *rules, const char *const *names,
                             int64_t n, un_buf *out, int64_t *n_skipped, un_buf *report);

#endif
