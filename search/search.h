/* search.h - the search `unity-train` runs (DESIGN.md section 8): for a serial model graph on D
 * devices of a machine, the plan with the lowest estimated step time that fits device memory.
 *
 * Modes: joint (layer 3, search/mapping.h, over every node's configurations, with memory priced
 * in until the simulator says the plan fits; then the cheapest of it, data parallelism and
 * serial by the simulator), data (every node data parallel where it can), serial (no
 * parallelism: every node on device 0), and mcmc, the baseline of FlexFlow (SysML'19): a
 * Metropolis walk over per-node configurations from data parallelism, changing one node at a
 * time, with the same additive cost (and memory over the device's as a penalty). Every estimate
 * reported is the simulator's (search/sim.h, plan semantics, or the runtime's with
 * sim_runtime). Every run ends, and says why:
 * "exhausted" (the dynamic programme ran to the end), "budget" (mcmc's proposals), "time"
 * (time_limit). taso: TASO, then a parallelizer: layer 2 minimising the serial cost on one device,
 * then joint (layer 3) on its result.
 *
 * Layer 2 (search/subst.h) runs in joint and taso when rules are given: joint costs every
 * candidate graph by layer 3 on the D devices at the memory price layer 3 needed for the model
 * graph, then layer 3 plans the best candidate, and the best of that plan, the model graph's
 * own plan and the plan of taso's rewritten graph (by the simulator) wins. Layer 2 gets half of
 * time_limit (taso's candidate what joint's leaves of it, at least a tenth); the rest is layer 3's.
 * Joint's layer 3 takes as candidates, besides its own plans, data parallelism, serial and the
 * plan mcmc finds (same seed and budget as --search mcmc), so joint is never estimated worse
 * than any other mode (unless the time limit cuts one of its parts short). Beyond 8 devices,
 * where some branch node can fill a part of an uneven split, layer 3 also plans with the
 * quarters on whole nodes as split points (mapping.h uneven_splits) at the chosen memory price,
 * and that plan wins where the simulator says it is better (halves_only: not).
 *
 *   un_search_params p = un_search_params_default(4);
 *   un_search_result r;
 *   st = un_search_run(ctx, cm, model_graph, &p, &r);
 *   un_search_report(&r, model_graph, &text);
 *   ... r.plan (un_graph_to_json for --strategy) ...
 *   un_search_result_deinit(&r);
 */
#ifndef UN_SEARCH_H
#define UN_SEARCH_H

#include "search/split.h"
#include "search/subst.h"

typedef enum {
    UN_SEARCH_JOINT,
    UN_SEARCH_DATA,
    UN_SEARCH_SERIAL,
    UN_SEARCH_MCMC,
    UN_SEARCH_TASO,
    UN_SEARCH_COUNT
} un_search_mode;

typedef struct un_search_params {
    int devices;
    un_search_mode mode;
    const char *optimizer;   /* "adam" or "sgd" */
    double time_limit;       /* seconds of wall time (0: 60) */
    int64_t budget;          /* mcmc proposals (0: 20000) */
    int64_t max_states;      /* layer 3's frontier states (0: 4096) */
    int split_size;          /* layer 1: nodes per piece between cut nodes (0: 10) */
    uint64_t seed;           /* mcmc */
    const un_ruleset *rules; /* layer 2's rules (borrowed; NULL: no rewrites) */
    double alpha;            /* layer 2's pruning factor (0: 1.05) */
    int64_t subst_budget;    /* layer 2's graphs costed (0: 1000) */
    bool halves_only;        /* beyond 8 devices, no plan with uneven splits (search.c) */
    bool no_memo;            /* layer 3 without the memo across calls (mapping.h un_map_memo):
                                tests and benchmarks; the plan is the same either way */
    bool sim_runtime;        /* rank plans by the simulator under the runtime's semantics (what
                                runtime/exec.c executes today: un_sim_params.mirror_sources) instead of
                                DESIGN.md section 9's plan semantics (false, the default) */
} un_search_params;

typedef struct un_search_result {
    un_graph *plan;              /* owned */
    int devices_used;            /* the plan's devices (un_strategy_devices) */
    un_sim_result sim;           /* the plan's estimate */
    double wall;                 /* seconds the search took */
    const char *ended;           /* "exhausted", "budget" or "time" (static) */
    un_map_stats stats;          /* layer 3 of the chosen plan (joint) */
    un_split_stats split;        /* layer 1 of the chosen plan (joint) */
    un_map_memo_stats memo;      /* layer 3's piece solves over the whole search (all its graphs,
                                    memory prices and split settings) and the memo's answers */
    int lambda_rounds;           /* memory prices tried (joint) */
    double lambda;               /* the memory price of the chosen plan (seconds per byte) */
    int64_t proposals, accepted; /* mcmc */
    const char *picked;          /* "search", "data parallel", "serial", "mcmc" or "uneven split":
                                    which candidate won (joint) */
    const char *uneven; /* beyond 8 devices (joint): the plan with uneven splits "won", "lost",
                           "no part to fill" (no branch node can fill a part: it cannot win),
                           "skipped (time)"; NULL: not tried (static) */
    double dp_step;     /* data parallelism's estimate, for the report; 0 when it cannot run */
    bool dp_fits;
    double dp_mem; /* its largest device's bytes */
    int32_t n_nodes;
    char (*choice)[48]; /* per model node: its configuration's name ("" for sources) */
    int32_t *degree;    /* per model node: devices it runs on (0 for sources) */
    /* layer 2 (joint and taso with rules) */
    bool rewrites;            /* layer 2 ran */
    const char *rewrites_off; /* why not (static), when it did not */
    un_subst_result subst;    /* its statistics and the rewrites on the path to its best graph */
    un_graph *graph;          /* owned: the rewritten serial graph the plan runs, NULL when the plan
                                 runs the model graph itself (no rewrite chosen) */
    double unrewritten_step;  /* layer 3's plan of the model graph itself: its estimate (0: none) */
    bool unrewritten_fits;
    double taso_step; /* joint: the plan of taso's rewritten graph (0: none, or the same graph) */
    bool taso_won;    /* joint: that plan won (graph and subst are taso's) */
} un_search_result;

un_search_params un_search_params_default(int devices);
const char *un_search_mode_name(un_search_mode m); /* static */

/* Searches. The model graph must be serial (no parallel ops). UN_ERR_INVALID when no plan fits
 * the machine's device memory (the error says by how much the best one misses) or the device
 * count is impossible. */
un_status un_search_run(un_ctx *ctx, un_cost_model *cm, const un_graph *g,
                        const un_search_params *p, un_search_result *out);
void un_search_result_deinit(un_search_result *r);

/* A plan's estimate: the simulator's step under the runtime's semantics (sim_runtime) or plan
 * semantics, with the optimizer's state, on the plan's devices (devices 0: un_strategy_devices).
 * The one costing path of the search's candidates and of `unity-train --estimate`, so that the
 * search's estimate of its plan is what --estimate says of the exported plan. */
un_status un_search_estimate(un_ctx *ctx, un_cost_model *cm, const un_graph *plan, bool sim_runtime,
                             const char *optimizer, int devices, un_sim_result *out);

/* The report: the plan's estimate (step, split, memory per device) against data parallelism,
 * each operator's parallelization, and the search's statistics and why it ended. */
void un_search_report(const un_search_result *r, const un_graph *g, const un_search_params *p,
                      const un_cost_model *cm, un_buf *out);

#endif
