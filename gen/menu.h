/* menu.h - the generator's menu (DESIGN.md section 6): which operators the superoptimizer combines,
 * with which parameter values, over which input tensors of small concrete shapes (and layouts),
 * up to how many operators per graph. It is a JSON file (specs/menu.json by default), so a user
 * changes generation without recompiling; errors name the file, the JSON path and the reason.
 *
 *   {"version": 1, "max_ops": 3,
 *    "inputs": [{"name": "x1", "shape": [2, 4, 4]},
 *               {"name": "w1", "op": "weight", "shape": [4, 4]},
 *               {"name": "xs", "shape": [4, 4], "shard": [2, 1]}],
 *    "ops": [{"op": "linear", "params": {"activation": ["none", "relu"]}},
 *            {"op": "split", "params": {"axis": [0], "sizes": [[2, 2]]}},
 *            {"op": "partition", "params": {"dim": [0, 1, 2]}}]}
 *
 * An op entry's parameter lists the values to try; a parameter left out takes the spec's `try`
 * values (its default when it has none); a parameter with neither must be given. An entry's
 * optional "min_rank" applies it only to a first input of at least that rank (layer_norm over
 * [b, s, h] activations, not over its own rank-1 gamma and beta).
 *
 *   un_gen_menu *m;
 *   st = un_gen_menu_load(ctx, spec, "specs/menu.json", &m);   // m->n_ops instances, m->n_inputs
 *   un_gen_menu_free(m);
 */
#ifndef UN_GEN_MENU_H
#define UN_GEN_MENU_H

#include "pcg/spec.h"

#define UN_GEN_MAX_INPUTS 16  /* menu input tensors */
#define UN_GEN_MAX_INSTS  512 /* operator instances (an op with one choice of parameters) */

typedef struct un_gen_input {
    char name[32];  /* unique within the menu */
    un_op op;       /* UN_OP_INPUT or UN_OP_WEIGHT */
    un_shape shape; /* dims, dtype float, and layout */
} un_gen_input;

/* One operator with one choice of parameter values. */
typedef struct un_gen_inst {
    un_op op;
    un_param params[UN_MAX_PARAMS]; /* every parameter of the op spec, defaults filled in */
    int n_in;                       /* inputs present under these parameters */
    int min_rank;                   /* the first input's rank must be at least this (0: any) */
    char label[64];                 /* "partition[dim=1,degree=2]" for messages and reports */
} un_gen_inst;

typedef struct un_gen_menu {
    const un_spec *spec; /* borrowed */
    char path[256];      /* the file (or name) it was read from */
    int max_ops;         /* default graph size bound (a command line flag may override it) */
    int n_inputs;
    un_gen_input inputs[UN_GEN_MAX_INPUTS];
    int n_insts;
    un_gen_inst *insts; /* owned */
    uint64_t hash;      /* content hash of the menu text, for provenance */
} un_gen_menu;

/* Reads and validates a menu against spec (borrowed, must outlive the menu). Errors: UN_ERR_IO
 * (unreadable file), UN_ERR_PARSE (bad JSON), UN_ERR_SPEC (unknown key, op or parameter, bad value,
 * a parameter without values, duplicate input names, a layout that does not divide the shape...),
 * each "<file>: <JSON path>: <reason>". Owned: free with un_gen_menu_free. */
un_status un_gen_menu_load(un_ctx *ctx, const un_spec *spec, const char *path, un_gen_menu **out);
un_status un_gen_menu_parse(un_ctx *ctx, const un_spec *spec, const char *name, const char *text,
                            size_t len, un_gen_menu **out);
void un_gen_menu_free(un_gen_menu *m);

/* Indices of the inputs interchangeable with input i (same op kind, shape and layout) form one
 * group; returns the group id (the smallest index in it). */
int un_gen_menu_input_group(const un_gen_menu *m, int i);

/* True when the inputs in mask (bit i = input i) are, in each group of interchangeable inputs, a
 * prefix of the group (x1, or x1 and x2, ...): every set of inputs has a renaming that is. */
bool un_gen_menu_prefix_ok(const un_gen_menu *m, uint32_t mask);

#endif
