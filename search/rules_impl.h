/* rules_impl.h - the compiled matcher of one rule, shared by search/rules.c (which compiles it
 * at load) and search/match.c (which runs it). Not API. */
#ifndef UN_RULES_IMPL_H
#define UN_RULES_IMPL_H

#include "search/rules.h"

/* How the search finds the next pattern node's graph node. */
enum {
    UN__STEP_SCAN,     /* every graph node with the operator (the root, or a disconnected part) */
    UN__STEP_PRODUCER, /* the producer of input `slot` of the image of pattern node `from` */
    UN__STEP_CONSUMER, /* a consumer, at input `slot`, of the tensor the pattern feeds there */
};

typedef struct un__step {
    int8_t kind;
    int8_t node; /* pattern node placed by this step */
    int8_t from; /* PRODUCER: the placed consumer */
    int8_t slot; /* PRODUCER: the consumer's input slot; CONSUMER: node's input slot */
} un__step;

/* Layout components of a source node a variable can sit in (un__bind.comp). */
enum {
    UN__COMP_NONE = -1,
    UN__COMP_DIM = 0,
    UN__COMP_SHARD = 8,
    UN__COMP_SUM = 16,
    UN__COMP_COPY = 17
};

/* A parameter occurrence of the source side that carries a variable; comp: for a source node,
 * the layout component it is (UN__COMP_DIM + i, UN__COMP_SHARD + i, SUM, COPY), else NONE. */
typedef struct un__bind {
    int8_t node, param, item, var, comp;
} un__bind;

/* A pattern node as the matcher needs it. */
typedef struct un__pnode {
    uint8_t op, n_in, n_out, n_params; /* n_params 0 for the pattern's inputs */
    int8_t in_node[UN_MAX_INPUTS], in_out[UN_MAX_INPUTS];
    uint16_t param_at; /* its parameters: params[param_at .. param_at + n_params) */
} un__pnode;

typedef struct un__pat {
    int8_t n_nodes; /* source-side nodes, inputs included */
    int8_t n_steps; /* one per operator node; steps[0] places the root */
    int8_t n_inputs, n_vars, n_binds;
    bool any_shape;
    un__step steps[UN_MATCH_MAX_NODES];
    un__pnode nodes[UN_MATCH_MAX_NODES];
    int8_t input_of[UN_MATCH_MAX_NODES];   /* pattern node -> rule input index, or -1 */
    int8_t input_node[UN_MATCH_MAX_NODES]; /* rule input -> pattern node */
    uint8_t bound[UN_MATCH_MAX_NODES]
                 [UN_MAX_PARAMS];          /* items carrying a variable (bit 7: scalar) */
    uint8_t is_mapped[UN_MATCH_MAX_NODES]; /* bit k: (node, output k) is mapped */
    int64_t var_value[UN_RULE_MAX_VARS];   /* the witness values */
    un__bind *binds;                       /* n_binds, in the set's arena */
    un_param *params;                      /* the operator nodes' parameters, in the set's arena */
    un_shape *in_shape;                    /* per rule input, in the set's arena */
} un__pat;

/* The compiled matcher of entry i. Borrowed, valid until un_ruleset_free. */
const un__pat *un__ruleset_pat(const un_ruleset *set, int64_t i);

/* The label index, un_match_all's filter: a pattern matches only a graph that has, for each of
 * its operator nodes, a node with that operator (un__label_op) and, where none of the node's
 * parameters carries a variable, with those parameters (un__label_params), as many times as the
 * pattern has them (matches are injective). Each entry needs its labels (sorted, with repeats:
 * un__ruleset_need) and is listed under one of them, its key, the one fewest entries share
 * (un__ruleset_by_key: the entries of key `label` in entry order; NULL and 0 when none), so a
 * graph is matched only against the entries listed under its own labels that need no more than
 * it has. A label is a hash: a collision only lets more entries through to the matcher. */
uint64_t un__label_op(int op);
uint64_t un__label_params(int op, const un_param *params, int n);
const uint64_t *un__ruleset_need(const un_ruleset *set, int64_t i, int64_t *n);
const int32_t *un__ruleset_by_key(const un_ruleset *set, uint64_t label, int64_t *n);
/* The first index of sorted v[0..n) whose value is not below x (n when none). */
int64_t un__u64_lower_bound(const uint64_t *v, int64_t n, uint64_t x);

#endif
