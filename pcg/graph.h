/* graph.h - the parallel computation graph: nodes (an operator, its parameters, its inputs as
 * (node, output) references), inferred parallel shapes, a canonical form and hash invariant under
 * node insertion order and renaming of inputs, JSON read/write (the format rules reuse) and
 * Graphviz DOT. Nodes refer to each other by int32 index (STYLE rule 15). Graphs are append-only
 * and a node's inputs exist before it, so id order is a topological order. No const query writes
 * to the graph: a const un_graph may be shared between threads.
 *
 *   un_graph *g = un_graph_new(spec);
 *   int32_t x, w, y;
 *   un_graph_add_input(ctx, g, "x", UN_OP_INPUT, 2, (int64_t[]){8, 16}, &x);
 *   un_graph_add_input(ctx, g, "w", UN_OP_WEIGHT, 2, (int64_t[]){16, 4}, &w);
 *   un_param p[UN_MAX_PARAMS]; un_spec_param_defaults(un_spec_op(spec, UN_OP_LINEAR), p);
 *   st = un_graph_add(ctx, g, UN_OP_LINEAR, p, (un_ref[]){{x, 0}, {w, 0}}, 2, NULL, &y);
 *   uint64_t h = un_graph_hash(g);
 *   un_graph_free(g);
 */
#ifndef UN_GRAPH_H
#define UN_GRAPH_H

#include "pcg/infer.h"
#include "pcg/json.h"

typedef struct un_ref {
    int32_t node; /* producing node */
    int32_t out;  /* which of its outputs */
} un_ref;

/* A machine view: the devices that hold a node's pieces, piece p on dev[p mod count]. Any distinct
 * devices in any order ([3, 1, 2, 0]); FlexFlow's start/stride MachineView is the list start,
 * start + stride, ..., start + (count - 1) * stride (graph JSON reads both and writes the list).
 * count 0 = the default (piece p on device p mod D). Placement only: it changes no value, shape,
 * hash or rule. A node's dev is owned by its graph (un_graph_node_set_view copies). */
typedef struct un_view {
    int32_t count;
    int32_t *dev; /* count device ids */
} un_view;

/* The device of piece p under view v on `devices` devices (the default p mod devices when v has
 * none). The runtime's placement (runtime/exec.c) and the simulator's (search/sim.c). */
int32_t un_view_device(const un_view *v, int64_t p, int32_t devices);

typedef struct un_node {
    un_op op;
    un_param params[UN_MAX_PARAMS]; /* indexed like the op spec's params */
    int32_t n_in;
    un_ref in[UN_MAX_INPUTS];
    un_infer inf; /* inferred outputs (inf.out, inf.n_out) and rule uses */
    char *name;   /* optional label (owned by the graph), NULL when none */
    un_view view; /* where its pieces run (count 0: the default); dev owned */
} un_node;

typedef struct un_graph un_graph;

/* ---- lifecycle ---- */

/* Empty graph over spec (borrowed; must outlive the graph). Owned: free with un_graph_free. */
un_graph *un_graph_new(const un_spec *spec);
void un_graph_free(un_graph *g);
un_graph *un_graph_clone(const un_graph *g);

/* ---- queries ---- */

const un_spec *un_graph_spec(const un_graph *g);
int32_t un_graph_node_count(const un_graph *g);
/* Borrowed, valid until the next mutation of g. */
const un_node *un_graph_node(const un_graph *g, int32_t id);
const un_shape *un_graph_shape(const un_graph *g, un_ref r);
/* Outputs: references nobody consumes, in node order then output order, unless set explicitly. */
int32_t un_graph_output_count(const un_graph *g);
un_ref un_graph_output(const un_graph *g, int32_t i);
/* Node id with this name, or -1. */
int32_t un_graph_find(const un_graph *g, const char *name);

/* Canonical hash: equal for graphs equal up to node insertion order and renaming of inputs.
 * Computed on each call unless un_graph_canonicalize cached it. */
uint64_t un_graph_hash(const un_graph *g);
/* Makes the canonical hash ignore the source nodes' dims (their ranks, dtypes and layouts still
 * count): rules use it, so that one rule found at two input shapes is one rule. */
void un_graph_hash_ignore_dims(un_graph *g, bool on);
/* Canonical order of nodes (inputs numbered by first use), written to order[n]. */
void un_graph_canonical_order(const un_graph *g, int32_t *order);

/* ---- mutation ---- */

/* Computes the canonical form (order and hash) once and keeps it until the next mutation, so
 * that later un_graph_hash and un_graph_canonical_order calls are lookups. */
void un_graph_canonicalize(un_graph *g);

/* Adds an input or weight node of the given logical shape (float). */
un_status un_graph_add_input(un_ctx *ctx, un_graph *g, const char *name, un_op op, int rank,
                             const int64_t *dims, int32_t *out);
/* Adds an input or weight node with a full parallel shape: dims, dtype and layout (shard degrees,
 * sum and copy degree), as a rule pattern's input that is already parallel. */
un_status un_graph_add_input_shape(un_ctx *ctx, un_graph *g, const char *name, un_op op,
                                   const un_shape *shape, int32_t *out);
/* Adds a node; its inputs must exist. Infers its output shapes; on a shape or layout error
 * nothing is added and the error names the node. params may be NULL for defaults. */
un_status un_graph_add(un_ctx *ctx, un_graph *g, un_op op, const un_param *params, const un_ref *in,
                       int n_in, const char *name, int32_t *out);
/* un_graph_add with the node's inference known: inf must be what un_spec_infer gives for op, params
 * and the inputs' shapes (the same node elsewhere, or a memo of it); it is copied, not computed. */
un_status un_graph_add_inferred(un_ctx *ctx, un_graph *g, un_op op, const un_param *params,
                                const un_ref *in, int n_in, const char *name, const un_infer *inf,
                                int32_t *out);
/* Adds parallel op `op` over `in` with its dim (ignored by replicate and reduce) and degree. */
un_status un_graph_add_parallel(un_ctx *ctx, un_graph *g, un_op op, un_ref in, int64_t dim,
                                int64_t degree, const char *name, int32_t *out);
/* Sets node id's machine view to a copy of v (count 0: the default); placement only, checked by
 * un_graph_views_valid, not here. */
void un_graph_node_set_view(un_graph *g, int32_t id, un_view v);
/* The same with the view start, start + stride, ..., count devices (FlexFlow's MachineView). */
void un_graph_node_set_view_range(un_graph *g, int32_t id, int32_t start, int32_t stride,
                                  int32_t count);
/* Whether every node's machine view is legal: distinct devices in [0, devices) (devices <= 0: any
 * device >= 0), no more than the node's pieces and dividing them (piece p on dev[p mod count]).
 * On false, why holds "node 'NAME': REASON". */
bool un_graph_views_valid(const un_graph *g, int32_t devices, char *why, size_t n);
/* Fixes the graph outputs explicitly (otherwise: every unconsumed output). */
un_status un_graph_set_outputs(un_ctx *ctx, un_graph *g, const un_ref *outs, int n);

/* ---- copies with a remap ---- */

/* Where each output of g's nodes went in a copy: map[id * UN_MAX_OUTPUTS + k] is the new reference
 * of output k of node id, {-1, -1} while unset. */
typedef un_status (*un_graph_copy_fn)(un_ctx *ctx, void *user, const un_graph *g, int32_t id,
                                      un_graph *ng, un_ref *map);

/* Copies g into a new graph over the same spec, visiting the ids in order[n_order] (NULL: every id
 * in id order). For each visited id, fn (NULL: un_graph_copy_node with the node's own
 * parameters) adds what it wants to ng and fills map for the node's outputs, or leaves them unset
 * to drop the node; an entry < 0 of order is passed to fn unchanged (a marker for a caller's own
 * insertion point). Then ng's outputs are g's outputs through map: a graph output whose node was
 * dropped is UN_ERR_INVALID. On success *out is owned (un_graph_free) and *map_out (may be NULL)
 * receives the map (owned, free()); on failure both are NULL. This is the one copy loop that
 * strategies (runtime/strategy.c) and rewrites (search/apply.c) share. */
un_status un_graph_copy_remap(un_ctx *ctx, const un_graph *g, const int32_t *order, int32_t n_order,
                              un_graph_copy_fn fn, void *user, un_graph **out, un_ref **map_out);
/* The default step of un_graph_copy_remap: adds node id of g to ng with its inputs through map
 * (each must be set), params (NULL: the node's own), its name and machine view, and sets map for
 * its outputs. Writes the new id to *nid (may be NULL). */
un_status un_graph_copy_node(un_ctx *ctx, const un_graph *g, int32_t id, const un_param *params,
                             un_graph *ng, un_ref *map, int32_t *nid);

/* ---- JSON and DOT ---- */

/* {"nodes":[{"name":"x","op":"input","params":{"shape":[8,16]}},
 *           {"name":"y","op":"linear","in":["x","w"],"params":{"activation":"relu"}}, ...],
 *  "outputs":["y"]}  — references are "name" or "name:k" for output k. */
un_status un_graph_to_json(un_ctx *ctx, const un_graph *g, un_buf *out);
un_status un_graph_from_json(un_ctx *ctx, const un_spec *spec, const char *name, const char *text,
                             size_t len, un_graph **out);
/* Reads a graph from a JSON value already parsed (the object at c, e.g. a graph embedded in a rule
 * file). Nodes may appear in any order; they are added in a topological order that keeps the file's
 * order where it already is one. Errors name the document, the JSON path and the reason (unknown
 * op, parameter or node name, bad value, cycle, shape or layout error); on failure *out = NULL.
 * Owned: free with un_graph_free. */
un_status un_graph_from_jcur(un_ctx *ctx, const un_spec *spec, const un_jcur *c, un_graph **out);
un_status un_graph_load(un_ctx *ctx, const un_spec *spec, const char *path, un_graph **out);
un_status un_graph_to_dot(un_ctx *ctx, const un_graph *g, un_buf *out);

#endif
