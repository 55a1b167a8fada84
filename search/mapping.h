/* mapping.h - layer 3 of the search (DESIGN.md section 8): for a fixed PCG, the parallel
 * configuration of every operator on D devices with the lowest estimated step time, memory per
 * device a hard constraint; and the plan graph (parallel ops + machine views) that runs it.
 *
 * Configurations. For each regular node and each degree d dividing D (d = 1: serial on device 0),
 * every assignment of input layouts in which each input is whole (d = 1), copied d times or split
 * d ways along one dim, that the op's sharding rules accept (un_spec_infer) with an output that
 * holds no copies: data parallelism (batch), Megatron's column and row splits of a linear
 * (out_features; contract, whose output holds partial sums), channel or head splits, as the
 * spec allows. A node of degree d runs on devices start .. start + d - 1 (machine view start,
 * stride 1, count d): start 0, or, for the nodes of a parallel branch (below), a split point s of
 * the machine with s + d <= D; each configuration is one (layouts, start) pair,
 * `layout` naming the start-0 twin. Split points: on up to 8 devices every s in 1 .. D - 1 (1 + 3,
 * 2 + 2, 3 + 1 on 4; 2 + 4 on 6), beyond the halves (D even), or with `uneven_splits` the
 * quarters on whole nodes instead (6 + 18 and 18 + 6 of 24 at 6 devices per node). On up to 8
 * devices a branch's node may also take a degree that divides a part of a split but not D (3 of
 * 4 devices next to 1: `part_only`); with uneven splits, one that fills a part (18 of 24).
 *
 * Costs (from search/cost.h, every query cached there): a node's forward and backward time on
 * its piece; gradient all-reduce of its replicated weights over their copies; for each edge the
 * conversion from the producer's output layout to the layout the consumer needs (reduce,
 * combine, partition, replicate: forward and backward transfers), plus a point-to-point move
 * when producer and consumer start on different devices. Memory: weight pieces with gradients
 * and optimizer state, activation pieces and their gradients, conversion buffers, added over the
 * nodes (an upper bound on the fullest device). The simulator (search/sim.h) then checks the
 * plan.
 *
 * Search. A dynamic programme over the series-parallel tree (search/sp.h), whose state is the
 * configuration of every node whose output is still needed (the frontier). A series runs its
 * parts one after another (their costs add); a parallel composition either shares the range of
 * devices (one branch after another, costs add) or, on the whole machine cut at one of its
 * split points s, gives the low part [0, s) and the high part [s, D) each a subset of the
 * branches: each part runs its branches from every input state on its own devices, and the parts
 * are joined per input state with the larger part's cost (they run concurrently). Every node runs
 * from the first device of its range. un_map_cost evaluates the same cost on any assignment (a
 * parallel composition whose branches each lie in one part of a split costs the larger part, the
 * cheapest such split), so the DP equals exhaustive enumeration on small graphs (tests). Beyond
 * max_states states the cheapest are kept (a beam), which the stats report. Memory: minimises
 * time + lambda * memory; search.c raises lambda until the simulator says the plan fits. Layer 1
 * (search/split.h) cuts the graph at cut nodes into pieces solved by un_map_solve_piece.
 *
 *   un_map_params p = un_map_params_default(4);
 *   un_map *m;
 *   st = un_map_new(ctx, cm, g, &p, &m);
 *   int32_t *a = malloc(n * sizeof *a);
 *   un_map_stats s;
 *   st = un_map_solve(ctx, m, 0.0, a, &s);     // a[v]: config index of node v (-1: source)
 *   un_graph *plan;
 *   st = un_map_plan(ctx, m, a, &plan);        // for the runtime (--strategy) and the simulator
 *   un_map_free(m);
 */
#ifndef UN_MAPPING_H
#define UN_MAPPING_H

#include "search/sim.h"
#include "search/sp.h"

typedef struct un_map un_map;
typedef struct un_map_memo un_map_memo;

/* Split points of the machine for parallel branches, at most (search/mapping.c map_cuts). */
#define UN_MAP_MAX_CUTS 8

typedef struct un_map_params {
    int devices;           /* D */
    int64_t max_states;    /* frontier states kept per step (0: 4096) */
    bool only_data;        /* configurations: serial or the batch (dim 0) split only */
    bool no_parallel;      /* configurations: serial only (every node on device 0) */
    bool shared_branches;  /* parallel branches always share their devices (no disjoint sets) */
    const char *optimizer; /* "adam" (2 state copies) or "sgd" (1) */
    bool uneven_splits;    /* beyond 8 devices, node-aligned split points besides the halves
                            * (search/mapping.c map_cuts); search.c plans with and without them
                            * and keeps the better plan */
    int32_t free_outputs;  /* the first k graph outputs are not the loss's (a layer-1 piece's exit
                            * taken out of its graph, search/subst.h): no conversion to the
                            * layout the loss reads is charged for them */
    un_map_memo *memo;     /* borrowed: piece solves answered and kept across maps (below); NULL:
                            * none. Never changes a result, only whether it is computed again */
} un_map_params;

/* One configuration of one node. */
typedef struct un_map_config {
    int32_t degree;             /* devices start .. start + degree - 1 */
    int32_t start;              /* first device (machine view start, stride 1) */
    int32_t layout;             /* index of the same layouts at start 0 (edge costs) */
    un_shape in[UN_MAX_INPUTS]; /* the layout each input must have */
    int32_t n_out;
    un_shape out[UN_MAX_OUTPUTS]; /* the output layouts */
    double time;                  /* forward + backward of a piece, + weight gradient sync */
    double mem;                   /* bytes on device 0: weights, grads, state, activations */
    char name[48];                /* "serial", "batch/4", "out_features/2", ... */
    bool part_only; /* its degree does not divide D but a part of a split: only in a branch */
} un_map_config;

typedef struct un_map_stats {
    int64_t configs;      /* configurations over all nodes */
    int64_t states;       /* frontier states expanded */
    int64_t max_frontier; /* most states alive at once */
    int32_t pieces;       /* pieces between cut nodes (layer 1) */
    int32_t parallels;    /* parallel compositions of the SP tree the DP went through */
    int64_t splits;       /* device-set splits of parallel branches tried (split point, subset) */
    bool beam;            /* states were dropped: the result may not be optimal */
    double cost;          /* the additive estimate of the result (seconds + lambda * bytes) */
    double time, mem;     /* its seconds and bytes on device 0 */
} un_map_stats;

un_map_params un_map_params_default(int devices);

/* ---- lifecycle ---- */

/* Enumerates and costs every node's configurations of g (borrowed, with cm, until un_map_free).
 * UN_ERR_INVALID for devices < 1 or more than the machine has. */
un_status un_map_new(un_ctx *ctx, un_cost_model *cm, const un_graph *g, const un_map_params *p,
                     un_map **out);
void un_map_free(un_map *m);

/* ---- queries ---- */

int32_t un_map_node_count(const un_map *m); /* the graph's nodes */
const un_graph *un_map_graph(const un_map *m);
int64_t un_map_max_states(const un_map *m); /* the beam: frontier states kept */
int32_t un_map_config_count(const un_map *m, int32_t node);
const un_map_config *un_map_config_get(const un_map *m, int32_t node, int32_t i);
/* The additive cost of an assignment (a[v] for every regular node): seconds + lambda * bytes of
 * device 0; *time and *mem (may be NULL) get the two parts. */
double un_map_cost(const un_map *m, const int32_t *a, double lambda, double *time, double *mem);
/* The assignment that runs every node data parallel over all devices where it can (else
 * serial), like runtime/strategy.h's transform. */
void un_map_data_parallel(const un_map *m, int32_t *a);

/* ---- search ---- */

/* The cheapest assignment by variable elimination (see above); a[] has room for every node. */
un_status un_map_solve(un_ctx *ctx, un_map *m, double lambda, int32_t *a, un_map_stats *st);
/* The cheapest by enumerating every assignment (tests; UN_ERR_INVALID beyond 1e7 of them). */
un_status un_map_exhaustive(un_ctx *ctx, const un_map *m, double lambda, int32_t *a, double *best);

/* ---- layer 1's primitive (search/split.h) ---- */

/* The series-parallel tree the DP runs over (NULL when g has no regular node), and its
 * analysis (cut nodes: un_sp_cut_nodes). */
const un_sp_tree *un_map_tree(const un_map *m);
const un_sp_info *un_map_sp(const un_map *m);
/* One piece: the root's children [child_begin, child_end) (the root itself as child 0 when it is
 * not a series), entered with cut node `entry` at configuration entry_cfg (entry -1: the start
 * of the graph), solved by the DP for every configuration x of the cut node `exit` that ends it
 * (exit -1: the end; one result). cost[x]: the piece's cost (seconds + lambda * bytes of its
 * nodes, the entry's own cost excluded), INFINITY when none; assign[x * n + v] for the piece's
 * nodes (n = nodes of the graph). max_states: this run's beam (0: the map's). Adds to *st's
 * counters. An exit that nothing reads (a piece taken out of its graph) is kept live to the end,
 * so the results are still per exit configuration. */
un_status un_map_solve_piece(un_ctx *ctx, un_map *m, double lambda, int32_t child_begin,
                             int32_t child_end, int32_t entry, int32_t entry_cfg, int32_t exit,
                             int64_t max_states, double *cost, int32_t *assign, un_map_stats *st);

/* ---- the memo of piece solves across maps ----
 *
 * One search solves the same piece many times on different maps: every layer-2 candidate is a
 * new graph (and a new map) whose pieces are mostly the model's own, the rewritten graph is
 * planned again at the same memory prices, layer 2's pieces are those layer 1 solved. A memo
 * set in un_map_params.memo makes un_map_solve_piece look each run up before solving it and keep
 * what it solves. The key is the exact subproblem, written out word by word in the DP's own order
 * (hashed, then compared in full, never by the hash alone): lambda, the map parameters that shape
 * configurations (devices, only_data, no_parallel, the optimizer's state copies; shared_branches
 * and uneven_splits where the piece holds a parallel composition: elsewhere they change nothing),
 * the entry cut node (op, parameters, input shapes and which are weights) and its
 * configuration, every node of the piece in the DP's leaf order (op, parameters, each input as a
 * source of some op and shape, the entry, or a piece node by position; its outputs the loss reads;
 * the last position that reads it; its id's rank among the piece's, which fixes the DP's order of
 * live nodes and so its ties), the exit's position, and the piece's SP subtree. Configurations
 * and costs follow from those and the cost model (one per memo). The beam is not in the key: a run
 * that dropped no state is the exact DP for any beam at least as wide as its largest frontier; a
 * run that dropped states serves only its own beam. The value: the cost per exit configuration,
 * the assignment of the piece's nodes by position, and the counters the run added to its stats
 * (replayed, so the stats are the same with or without the memo).
 *
 * Frontiers. A candidate rewritten late in a piece shares the piece's first parts with the piece
 * as it was: after each part of the root's series that is a cut node (a single node, the only one
 * live), un_map_solve_piece keeps the DP's frontier (one state per configuration of the cut node,
 * in the DP's order, with its cost and the assignment of the parts before) under the key of those
 * parts (the same key, the exit left out, with whether the entry is read after them), and a run
 * not answered whole starts from the longest kept frontier of its first parts: the same states,
 * costs and order as if it had run them, so the rest runs exactly as without the memo.
 *
 * Configurations. un_map_new enumerates and costs each node's configurations (most of its time,
 * and it runs once per layer-2 candidate): with a memo, a node's list is kept under the node's
 * own work (op, parameters, input shapes, which inputs are weights) and the map's devices,
 * only_data, no_parallel, split points and optimizer, and a node of another map with that key
 * gets a copy (what un_map_new already does between equal nodes of one graph).
 * Bounded by bytes: beyond the bound nothing new is kept. */
typedef struct un_map_memo_stats {
    int64_t solves;         /* un_map_solve_piece runs asked of the memo */
    int64_t hits;           /* answered from it */
    int64_t hits_across;    /* of those, solved first on another map (another graph, candidate or
                             * set of map parameters) */
    int64_t prefix_hits;    /* runs not answered whole that started from a kept frontier (below) */
    int64_t nodes;          /* the pieces' nodes over those runs */
    int64_t nodes_saved;    /* of those, nodes the memo's answers and kept frontiers ran for them */
    int64_t config_lookups; /* un_map_new: nodes whose configurations were looked up (a node
                             * equal to an earlier one of its own map shares those, not asked) */
    int64_t config_hits;    /* of those, copied from another map's node of the same key */
    int64_t entries;        /* kept */
    int64_t bytes;          /* their size */
    int64_t not_kept;       /* solved but not kept: the memo was at its bound */
} un_map_memo_stats;

/* A memo for maps over cost model cm (borrowed); max_bytes 0: 256 MB. */
un_map_memo *un_map_memo_new(const un_cost_model *cm, int64_t max_bytes);
void un_map_memo_free(un_map_memo *mm);
un_map_memo_stats un_map_memo_get_stats(const un_map_memo *mm); /* zeros for NULL */

/* The plan graph of an assignment: g's nodes, with the parallel ops that convert each tensor
 * to the layout its consumer needs, and each node's machine view. Owned: un_graph_free. */
un_status un_map_plan(un_ctx *ctx, const un_map *m, const int32_t *a, un_graph **out);

#endif
