/* sim.h - the simulator: the step time of a plan as a schedule of its task graph over devices and
 * links (every piece's forward and backward, every transfer, gradient synchronisation and the
 * optimizer step), with the per-device memory the plan needs. Each device runs its tasks in the
 * graph's topological order (backward in reverse), as the runtime does; a task starts when its
 * device is free and its inputs have arrived. Placement is the runtime's: piece p of a tensor on
 * the device its node's machine view names, else p mod D; a regular op's device tuple on the
 * device of its output piece.
 *
 *   un_sim_params p = un_sim_params_default();
 *   un_sim_result r;
 *   st = un_sim_run(ctx, cm, plan_graph, &p, &r);
 *   un_sim_report(g, &r, cm, &text);             // step, split, critical path, memory
 *   un_sim_result_deinit(&r);
 */
#ifndef UN_SIM_H
#define UN_SIM_H

#include "search/cost.h"

typedef struct un_sim_params {
    /* true (the runtime today, runtime/exec.h): inputs and weights are held whole on every
     * device, each node's transfers are one collective exchange (every device waits), and after
     * backward every weight gradient is all-reduced over all devices; every device updates every
     * weight. false (DESIGN.md section 9): sources are pieces like any tensor, transfers are
     * point to point, replicate's backward all-reduces over its copies, and each device updates
     * only the weight pieces it holds. */
    bool mirror_sources;
    const char *optimizer; /* "adam" or "sgd" (state: 2 or 1 copies of the weights) */
    int devices;           /* devices the plan runs on; 0 = the most pieces of any tensor */
} un_sim_params;

#define UN_SIM_TOP 8

typedef struct un_sim_result {
    double step;          /* seconds: the last device's finish */
    double crit_compute;  /* seconds of computation on the critical path */
    double crit_comm;     /* seconds of communication on the critical path */
    double crit_other;    /* seconds of copies, zeroing, optimizer on the critical path */
    double compute_total; /* computation summed over devices */
    double comm_total;    /* communication summed over devices */
    double comm_bytes;    /* bytes sent between devices */
    int devices;
    double wait;      /* seconds of the step spent off the cores (in step; 0 unmeasured) */
    int meets;        /* rendezvous of all devices in the step (runtime semantics) */
    double meet_work; /* mean seconds of work between two of them (or to the step's end) */
    double meet_time; /* the measured seconds of all those stretches ("comm:meet"; 0: none) */
    double *mem;      /* bytes per device; owned */
    double mem_weights, mem_grads, mem_optim, mem_acts; /* of the largest device */
    double mem_stash;   /* of the largest device: what the CPU kernels keep from the forwards for
                         * the backwards (un_kern_stash_bytes, as the runtime's memory check
                         * counts it; machines of kind "cpu" only: GPUs keep none) */
    double stash_all;   /* the stash summed over the devices (bytes) */
    double mem_scratch; /* of the largest device: the most scratch one kernel call takes (CPU:
                         * un_exec_kern_scratch, in the runtime's memory check; device.gpu: the
                         * CUDA backend's growable scratch, un_op_cost's scratch) */
    double mem_reserve; /* of every device: device.gpu's reserve (bytes; else 0) */
    double scratch_all; /* that scratch summed over the devices (bytes) */
    int worst;          /* the device needing the most memory */
    bool fits;          /* every device's memory within the machine's */
    int n_top;
    struct {
        int32_t node;
        double time; /* seconds this node contributes to the critical path */
    } top[UN_SIM_TOP];
} un_sim_result;

un_sim_params un_sim_params_default(void);

/* Simulates one training step of g. The machine needs at least the plan's devices
 * (UN_ERR_INVALID otherwise). *out is zeroed on failure. Free with un_sim_result_deinit. */
un_status un_sim_run(un_ctx *ctx, un_cost_model *cm, const un_graph *g, const un_sim_params *p,
                     un_sim_result *out);
void un_sim_result_deinit(un_sim_result *r);

/* The rows and classes of one output piece's loss (the last dim: classes). */
void un_sim_loss_rows(const un_shape *out, int64_t *rows, int64_t *classes);
/* The op-cost cache shape "float[rows,classes]" of one output piece's loss: the profiler and the
 * simulator key the measured loss time by it. */
void un_sim_loss_shape(const un_shape *out, char *buf, size_t n);

/* The device of piece `piece` of node id's output on `devices` devices: the node's machine view,
 * else piece mod devices (the runtime's placement). */
int un_sim_device(const un_graph *g, int32_t id, int64_t piece, int devices);

/* The distinct non-zero counts of parameters the ranks of g's run hold (weights folded as the
 * runtime stores them, un_strategy_fold_weights; un_strategy_devices ranks), at most
 * UN_SIM_MAX_RANK_COUNTS: the optimizer's sizes the profiler times and the simulator looks up. */
#define UN_SIM_MAX_RANK_COUNTS 64
un_status un_sim_rank_param_counts(un_ctx *ctx, const un_graph *g, int64_t *counts, int *n);

/* The work between two rendezvous at which the profiler times D device threads computing and
 * then meeting ("comm:meet"), and that entry's shape "devices[D],work[W us]" for point w. */
#define UN_SIM_MEET_POINTS 10
extern const double un_sim_meet_work[UN_SIM_MEET_POINTS];
void un_sim_meet_shape(int devices, int w, char *buf, size_t n);

/* The message sizes at which the profiler times an exchange of D device threads as a step meets
 * ("comm:exchange" a ring, every rank sending; "comm:send" one way), and that entry's shape
 * "devices[D],bytes[B]" for point b. Where all are measured, the simulator takes a transfer's
 * time from them (log-log between points; beyond the last, its segment's slope), else the
 * rendezvous of 64 bytes plus the bytes at the machine file's link bandwidth. */
#define UN_SIM_XCHG_POINTS 5
extern const double un_sim_xchg_bytes[UN_SIM_XCHG_POINTS];
void un_sim_xchg_shape(int devices, int b, char *buf, size_t n);
/* ... and the ring exchange of UN_SIM_XCHG_MSGS_BYTES in UN_SIM_XCHG_MSGS messages to the peer
 * ("devices[D],bytes[8192],messages[8]"): what each message past the first adds (the runtime
 * sends one per weight chunk or piece; in the slow regime 8 KiB in 4 messages took 6.2 us, in
 * one 4.1), which the simulator adds to an exchange of that many messages. */
#define UN_SIM_XCHG_MSGS       8
#define UN_SIM_XCHG_MSGS_BYTES 8192
void un_sim_xchg_msgs_shape(int devices, char *buf, size_t n);

/* The estimate as text: step time, compute/communication split, the critical path's top
 * operators, memory per device (and whether it fits). */
void un_sim_report(const un_graph *g, const un_sim_result *r, const un_cost_model *cm, un_buf *out);

#endif
