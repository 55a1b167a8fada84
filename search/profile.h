/* profile.h - measured operator costs: times every regular operator of a graph on its piece
 * shapes on the local CPU or CUDA backend, as a step runs them (a replay of the step: every node's
 * forward in order, then every backward in reverse, warm-up passes, then timed ones, by the
 * backend's timer: CUDA events on a GPU), the optimizer step over the graph's weights and the loss
 * as the runtime runs them on that backend, and stores the times in rules.db's op-cost cache under
 * the keys the cost model looks up (search/cost.h: un_cost_key) for a device kind. The cost model
 * then uses them in place of its roofline for that device kind.
 *
 *   un_profile_params pp = un_profile_params_default();
 *   pp.device = "cpu"; pp.threads = 1;
 *   st = un_profile_graph(ctx, db, g, &pp, stdout, &n_stored);
 */
#ifndef UN_PROFILE_H
#define UN_PROFILE_H

#include <stdio.h>

#include "pcg/graph.h"
#include "rulesdb/rulesdb.h"
#include "runtime/backend.h" /* un_loss_kind */
#include "search/machine.h"

typedef struct un_profile_params {
    const char *device;    /* device kind key (the machine file's device.kind), e.g. "cpu" */
    int threads;           /* CPU threads of the backend (as one device of the run) */
    bool f64;              /* float64 (device key gets "-f64", as the cost model's) */
    int warmup;            /* untimed runs first */
    double min_seconds;    /* time each op for at least this long (a replay: as many passes as
                              give each distinct op this long forward and backward) ... */
    int min_reps;          /* ... and at least this many repetitions (passes) */
    const char *optimizer; /* also time this optimizer over the graph's weights (NULL: none) */
    int cuda_device;       /* >= 0: time on this CUDA device (device should then be the GPU's
                              kind, e.g. "h100"): ops, optimizer step and loss by CUDA events
                              (kernel time) */
    bool opaque;           /* time on the opaque backend (backend.h) instead of the CPU one: the
                              profiler reaches backend memory only through the backend (tests) */
    int value_sets;        /* a node's runs cycle through this many sets of input values (and
                              output gradients), as a run's steps cycle through its batches
                              (UN_TRAIN_SYNTHETIC_BATCHES for synthetic data: what the branch
                              predictor learns of a step's data-dependent branches it learns in
                              the replay too); 0: new values every run (real data) */
    un_loss_kind loss;     /* the run's loss, timed on the graph's output piece (default CE) */
    double timer_floor;    /* seconds an empty timed region takes, taken off every wall-time
                              median (un_profile_graph measures it on its CPU backend; 0: none) */
    int rounds;            /* the ops' replay this many times (1..UN_PROFILE_MAX_ROUNDS; each
                              round min_seconds / rounds), their starts spread over span_s
                              seconds (the other measurements fill the first pause, a sleep the
                              rest); the round whose forward + backward over the step's nodes
                              is the least is kept, whole: a shared machine's cores run its
                              work up to 1.4x slower for seconds at a time, and a profile taken
                              in such a moment would price every op that much higher than one
                              taken a second later (search/README.md, "Speed regimes") */
    double span_s;
} un_profile_params;

#define UN_PROFILE_MAX_ROUNDS 16

/* The round of a profile's replays to keep: fwd[r * nk + i], bwd[...]: round r's key i; key[p]:
 * the key of the step's node p (n_pos of them). total[r] gets round r's forward + backward over
 * the nodes; returns the r of the least (the first of equals). One whole round, not each key's
 * least over the rounds, which would mix moments and price the step below any of them. */
int un_profile_least_round(const double *fwd, const double *bwd, int rounds, int nk, const int *key,
                           int n_pos, double *total);

un_profile_params un_profile_params_default(void);

/* Whether a machine file's device kind names the GPU gpu_name (the kind, e.g. "h100", appears in
 * the name, e.g. "NVIDIA H100 80GB HBM3", ignoring case; "cpu" and "" name no GPU): costs
 * measured on that GPU may then be stored under the kind. */
bool un_profile_kind_matches(const char *kind, const char *gpu_name);

/* Profiles every distinct (op, per-piece params, piece shapes) of g and stores it (replacing an
 * older entry). A line per op goes to log (NULL: quiet). *n_stored counts the entries written. */
un_status un_profile_graph(un_ctx *ctx, un_rulesdb *db, const un_graph *g,
                           const un_profile_params *p, FILE *log, int64_t *n_stored);

/* Per node of g: whether its inputs are new every step of a run on synthetic data, which cycles
 * through a few batches (un_profile_params.value_sets): a dropout lies before it (its mask is new
 * every step). The replay gives such nodes new values every run. fresh: node count entries. */
void un_profile_fresh_nodes(const un_graph *g, bool *fresh);
/* Whether the repetitions of an op that took warm_s wall seconds before (its warm-up) are timed
 * with the thread's CPU clock too: from 25 us up (half of the 50 us from which a one-thread CPU
 * device's op is costed by that clock: profile.c CPU_TIME_MIN). */
bool un_profile_reads_cpu_clock(double warm_s);

/* One timed repetition: wall and thread CPU seconds (the CPU clock read outside the wall clock's
 * window; cpu < 0 where it was not read), and the backend timer's (CUDA events on a GPU; dev < 0
 * where the run has none). */
typedef struct un_profile_rep {
    double wall, cpu, dev;
} un_profile_rep;
/* What one run of an op costs from its n repetitions (sorted in place): on a GPU (p->cuda_device
 * >= 0 and a timer) the median of the backend timer's; else the median wall time less
 * p->timer_floor, unless the device is one CPU thread (p->threads 1), that median is 50 us or
 * more and at least half of the repetitions read the CPU clock: then the median of those CPU
 * times (the work, without the time other jobs took the core away). */
double un_profile_rep_cost(un_profile_rep *t, int n, const un_profile_params *p);

/* The values the profiler gives integer input t of node id, uniform in [0, range): range as the
 * run's synthetic batches draw them (the "range" parameter of the input it comes from through
 * parallel ops; 2 where it has none, as runtime/train.c), capped at an embedding table piece's
 * rows (the kernel's valid indices), so the lookups spread over the table as a step's do. */
int64_t un_profile_int_range(const un_graph *g, int32_t id, int t);
/* n values of dtype from seed into host: floats (element size fes) uniform in [-1, 1), integers
 * (int64) uniform in [0, range) (range >= 1). */
void un_profile_values(void *host, int64_t n, un_dtype dtype, size_t fes, int64_t range,
                       uint64_t seed);
/* Measures this CPU box as a machine description: one device per core (devices_per_node =
 * online CPUs), sgemm flop/s on one thread (the backend's linear kernel, 512^3), memory bandwidth
 * (bytes read + written per second by one thread's memcpy of 64 MiB), the thread-to-thread copy
 * bandwidth and the latency of one synchronisation of the `local` communicator (2 threads), the
 * cost of starting one operator (a 1-element relu), and memory = physical memory / devices. */
un_status un_profile_machine(un_ctx *ctx, un_machine *out);

#endif
