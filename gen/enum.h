/* enum.h - the generator's enumeration (DESIGN.md section 6): every graph of up to N operators over
 * a menu, each fingerprinted by evaluating it piece by piece in the prime field on fixed random
 * inputs (one value per menu input, drawn from the seed and the input's name).
 *
 * Graphs are built depth first, one operator at a time over the tensors already there, so each
 * extension costs one operator evaluation and memory holds only the current path plus one small
 * record per graph. A graph is generated exactly once: its operators must come in the canonical
 * order (Kahn's algorithm taking the smallest structural key among the ready operators), which is
 * prefix-closed, so a non-canonical prefix cuts the whole subtree. An extension whose new tensor
 * equals one already in the graph (same value, shape and layout) is cut as well (TASO's duplicate
 * tensor pruning): any rule it could take part in follows from a smaller one.
 *
 *   un_gen_enum *e;
 *   st = un_gen_enum_new(ctx, menu, seed, &e);
 *   un_gen_enum_result r;
 *   st = un_gen_enum_run(ctx, e, &params, &r);          // r.recs sorted by fingerprint
 *   un_gen_enum_result_deinit(&r);
 *   un_gen_enum_free(e);
 */
#ifndef UN_GEN_ENUM_H
#define UN_GEN_ENUM_H

#include "gen/menu.h"
#include "pcg/eval.h"

#define UN_GEN_MAX_OPS   5  /* operators per graph */
#define UN_GEN_MAX_OP_IN 3  /* inputs per operator */
#define UN_GEN_MAX_T     40 /* tensors per graph (menu inputs + operator outputs) */
#define UN_GEN_MAX_GOUTS 4  /* graph outputs (= UN_RULE_MAX_OUTS) */

/* One operator of a compact graph: a menu instance over tensor indices. Tensors 0..n_inputs-1 are
 * the menu inputs, then each operator's outputs in operator order. */
typedef struct un_gen_op {
    uint16_t inst;
    uint8_t n_in;
    uint8_t in[UN_GEN_MAX_OP_IN];
} un_gen_op;

typedef struct un_gen_graph {
    uint8_t n_ops;
    uint8_t pad;
    un_gen_op ops[UN_GEN_MAX_OPS]; /* unused entries zeroed, so graphs compare with memcmp */
} un_gen_graph;

/* A graph and its fingerprint: a hash of the multiset of its outputs' shapes, layouts and values.
 * Only connected graphs (every operator linked to every other through operator edges) are kept:
 * a disconnected partner of a connected graph is assembled from single-output classes when the
 * pairs are formed, and two disconnected sides split into smaller rules. */
typedef struct un_gen_rec {
    uint64_t fp;
    uint64_t nf; /* normal form: structure with every inner tensor replaced by its value class */
    un_gen_graph g;
} un_gen_rec;

/* The smallest graph found for one tensor value (the cone of a single operator's output): the
 * class representative used by the composition pruning. */
typedef struct un_gen_class {
    uint64_t vh;   /* value hash: shape, layout and value */
    uint32_t mask; /* menu inputs it depends on */
    uint32_t n_ops;
    uint64_t key;   /* structural key of the representative's tensor */
    un_gen_graph g; /* the representative (its last operator produces the tensor) */
    uint8_t out;    /* which output of that operator */
} un_gen_class;

typedef struct un_gen_params {
    int max_ops;          /* graph size bound, 1..UN_GEN_MAX_OPS */
    int threads;          /* worker threads (>= 1) */
    uint64_t seed;        /* input values */
    int shard_i, shard_n; /* keep graphs with fp % shard_n == shard_i (shard_n 1 = all) */
    double time_limit;    /* seconds; 0 = none; a run past it stops early (result.stopped) */
} un_gen_params;

un_gen_params un_gen_params_default(void);

typedef struct un_gen_enum_result {
    un_gen_rec *recs; /* owned; sorted by (fp, nf, graph); connected graphs with 1..UN_GEN_MAX_GOUTS
                       * outputs, one per (fp, nf): the smallest */
    int64_t n_recs;
    un_gen_class *classes; /* owned; sorted by (vh, mask), one per pair */
    int64_t n_classes;
    int64_t n_graphs;                      /* distinct graphs enumerated */
    int64_t n_by_size[UN_GEN_MAX_OPS + 1]; /* ... by operator count */
    int64_t n_dup;                         /* extensions cut: duplicate tensor */
    int64_t n_ill;                         /* extensions rejected by shape/layout inference */
    int64_t n_disconnected;                /* graphs not recorded: operators in >1 component */
    int64_t n_cut;                         /* extensions cut: too many components to join */
    int64_t n_naming;  /* graphs not recorded: inputs not a prefix of their groups */
    int64_t n_same_nf; /* graphs not recorded: same value and normal form as a smaller one */
    int64_t n_roots, n_roots_done; /* top-level work items */
    bool stopped;                  /* the time limit cut the run short */
    double seconds;
} un_gen_enum_result;

void un_gen_enum_result_deinit(un_gen_enum_result *r);

typedef struct un_gen_enum un_gen_enum;

/* Prepares the input values of every menu input. Owned: free with un_gen_enum_free. menu borrowed.
 */
un_status un_gen_enum_new(un_ctx *ctx, const un_gen_menu *menu, uint64_t seed, un_gen_enum **out);
void un_gen_enum_free(un_gen_enum *e);
const un_gen_menu *un_gen_enum_menu(const un_gen_enum *e);

/* Runs the enumeration (threads share the top-level work; the result does not depend on their
 * number). UN_ERR_NOMEM when a record array cannot grow. */
un_status un_gen_enum_run(un_ctx *ctx, un_gen_enum *e, const un_gen_params *p,
                          un_gen_enum_result *out);

/* ---- one graph at a time (for pairing and pruning) ---- */

/* A compact graph evaluated: per tensor its value hash, structural key, input mask, producer and
 * consumer count; the outputs sorted by value hash, with their logical values. */
typedef struct un_gen_geval {
    int n_t;
    uint64_t vh[UN_GEN_MAX_T];
    uint64_t key[UN_GEN_MAX_T];
    uint32_t mask[UN_GEN_MAX_T];
    uint32_t anc[UN_GEN_MAX_T]; /* operators it depends on (bit j = operator j) */
    int16_t prod[UN_GEN_MAX_T]; /* producing operator, -1 for menu inputs */
    int8_t prod_out[UN_GEN_MAX_T];
    int16_t uses[UN_GEN_MAX_T];
    un_shape shape[UN_GEN_MAX_T];
    int n_out;
    uint8_t out[UN_GEN_MAX_GOUTS];   /* output tensors, sorted by value hash */
    un_val *dense[UN_GEN_MAX_GOUTS]; /* owned logical values of the outputs */
    int64_t numel[UN_GEN_MAX_GOUTS];
    uint64_t fp;
    uint32_t mask_all;
} un_gen_geval;

/* Evaluates g (which must be well formed over e's menu). Free with un_gen_geval_deinit. */
un_status un_gen_enum_eval(un_ctx *ctx, const un_gen_enum *e, const un_gen_graph *g,
                           un_gen_geval *out);
void un_gen_geval_deinit(un_gen_geval *ev);

/* Builds g as a PCG over the spec. Inputs are named as in the menu; tensors listed in abstract[]
 * (n_abs of them) become fresh inputs named "_a<i>" of their shape, and operators that then reach
 * no output are left out. The graph outputs are set to outs[] (tensor indices, n_out), written
 * as node references to refs[]. Owned: free with un_graph_free. */
un_status un_gen_enum_to_graph(un_ctx *ctx, const un_gen_enum *e, const un_gen_graph *g,
                               const un_gen_geval *ev, const uint8_t *abstract, int n_abs,
                               const uint8_t *outs, int n_out, un_graph **out, un_ref *refs);

/* One line: "relu(partition[dim=0,degree=2](x1))", outputs separated by "; ". */
void un_gen_graph_str(const un_gen_enum *e, const un_gen_graph *g, un_buf *b);

#endif
