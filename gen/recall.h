/* recall.h - how much of a published rule set (FlexFlow's graph_subst_3_v2.json) a generated one
 * contains. A published rule is "found" when a generated rule equals it up to renaming of inputs
 * and nodes and direction (un_rule_hash, which ignores input dims). Every other rule gets one
 * category with its reason:
 *   rejected   - our import cannot express it under our specs (flexflow.h gives the reason);
 *   wrong      - it fails un_rule_check_random (prime field): the published rule is not an
 *                identity under our semantics;
 *   off-menu   - it uses an operator instance, or an input kind/rank/layout, not in the menu;
 *   too-big    - a side has more operators than the run's bound;
 *   implied    - in reach, and it follows from the rules found: a congruence of smaller rules, a
 *                renaming or instance of a kept rule (un_gen_pair_explain), or a composition
 *                through the smallest graph of its group of equals (both sides are graphs the
 *                run enumerated and paired with that graph);
 *   missed     - everything else, with the reason.
 *
 *   un_gen_recall rc;
 *   st = un_gen_recall_run(ctx, e, max_ops, &rules, "flexflow.json", &rc, &report);
 */
#ifndef UN_GEN_RECALL_H
#define UN_GEN_RECALL_H

#include "gen/prune.h"

typedef enum {
    UN_GEN_RECALL_FOUND,
    UN_GEN_RECALL_REJECTED,
    UN_GEN_RECALL_WRONG,
    UN_GEN_RECALL_OFF_MENU,
    UN_GEN_RECALL_TOO_BIG,
    UN_GEN_RECALL_IMPLIED,
    UN_GEN_RECALL_MISSED,
    UN_GEN_RECALL_COUNT
} un_gen_recall_kind;

typedef struct un_gen_recall {
    int64_t total; /* rules in the published file */
    int64_t by_kind[UN_GEN_RECALL_COUNT];
} un_gen_recall;

/* Compares the published file at path with the rules rs found over e's menu with max_ops. report
 * receives one line per rule not found: "name: category: reason". */
un_status un_gen_recall_run(un_ctx *ctx, const un_gen_enum *e, int max_ops, const un_gen_rules *rs,
                            const char *path, un_gen_recall *out, un_buf *report);

const char *un_gen_recall_kind_name(un_gen_recall_kind k); /* static */

#endif
