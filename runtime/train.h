/* train.h - training: the options of `unity-train`, their parsing, and the training entry point
 * that ties the model (zoo or pcg JSON), the strategy (serial, data, plan file), the communicator
 * (local threads or MPI), the executor, the losses (cross-entropy, MSE), the optimizer and
 * checkpoints together. The program's main() only parses and prints (STYLE rule 1); the search
 * will call un_train_run with its plan.
 *
 *   un_train_opts o = un_train_opts_default();
 *   st = un_train_parse_args(ctx, argc - 1, argv + 1, &o);
 *   un_train_result r;
 *   st = un_train_run(ctx, &o, &r);          // prints per-step losses to o.out
 *   un_train_result_deinit(&r);
 */
#ifndef UN_TRAIN_H
#define UN_TRAIN_H

#include <stdio.h>

#include "pcg/graph.h"
#include "runtime/backend.h" /* un_loss_kind */
#include "runtime/kernels.h"

/* Synthetic data (no --data file) is a fixed pool of this many batches, step s using batch
 * s mod UN_TRAIN_SYNTHETIC_BATCHES (the loss falls as the model fits them): an op sees the same
 * inputs every that many steps, which the profiler reproduces (search/profile.h value_sets). */
#define UN_TRAIN_SYNTHETIC_BATCHES 4

/* Without --log-every, rank 0 prints a step's line when this many seconds have passed since the
 * last one (and the first and last step's): a line costs 4-8 us to a file and 40-120 us to a pipe,
 * a step of a tiny model ~10 us. */
#define UN_TRAIN_LINE_S 0.1

typedef struct un_train_opts {
    const char *model;       /* zoo name, a pcg graph JSON file or an ONNX model (*.onnx) */
    const char *input_shape; /* ONNX: dims of dynamic inputs, "2x3x64x64[,...]" */
    bool tiny;               /* zoo: the tiny configuration */
    int devices;             /* devices (ranks); 0 = 1 for local, the world size for mpi */
    const char *strategy;  /* "serial", "data", "tensor" or a plan file; NULL = serial on 1 device,
                              else data */
    int steps;             /* training steps */
    int64_t batch;         /* 0 = the model's default */
    const char *config;    /* zoo size "layers=8,hidden=2048,batch=64" (zoo.h), or NULL */
    double lr;             /* 0 = the optimizer's default */
    const char *optimizer; /* "sgd" or "adam" */
    const char *data;      /* text file for a token model (charlm), or NULL for synthetic data */
    const char *comm;      /* "local" or "mpi" */
    uint64_t seed;
    int threads;             /* CPU threads on this machine, split over its ranks */
    const char *save, *load; /* checkpoints, or NULL */
    const char *spec;        /* operator spec file */
    const char *loss;        /* JSON models: "ce" or "mse" */
    un_prec prec;            /* float32 (default) or float64 */
    const char *backend;     /* "cpu", "cuda" or "opaque[:OPTIONS]" (the CPU kernels behind memory
                                the host cannot reach, backend.h; un_backend_opaque_opts_parse);
                                NULL = cuda when this build has CUDA and a GPU is there (and the
                                precision is f32), else cpu */
    bool quiet;              /* no per-step lines */
    int log_every;           /* a step line every this many steps; 0 (default): one when
                                UN_TRAIN_LINE_S have passed since the last; the first and the
                                last step's line always. The loss is summed over the ranks on
                                those steps only (the others' losses with them, in one call) */
    bool stats;              /* print the per-device accounting at the end */
    bool node_times;         /* print device 0's median time per node and phase of a step */
    FILE *out;               /* per-step lines and the summary (default stdout) */
    FILE *err; /* mpi: rank 0 writes a failure found before training ("unity-train: <message>")
                  here before any rank returns, since mpirun ends the job as soon as one process
                  exits with an error, which can cut rank 0 off before its caller reports it;
                  NULL (default): the caller reports every failure */
} un_train_opts;

/* One device's accounting, in bytes (the runtime's own counts, exec.h). Traffic is that of one
 * training step (the last one); memory is what the device holds. */
typedef struct un_train_dev_stats {
    int64_t weight_bytes;     /* its weight pieces (their gradients take as much again) */
    int64_t optim_bytes;      /* its optimizer state */
    int64_t peak_bytes;       /* everything it allocated: weights, gradients, activations, transfer
                                 buffers, optimizer state */
    int64_t sent, recv;       /* to / from other devices per step (the communicator's links) */
    int64_t copied;           /* copied between buffers of the device per step */
    int64_t plane_exchanges;  /* exchanges per step over the backend's device data plane */
    int64_t staged_exchanges; /* ... staged through host memory (exec.h's un_exec_stats) */
    int64_t need_bytes;       /* what the memory check counted for it before allocating (the
                                 executor's estimate, the kernels' stash, host arrays on cpu) */
    /* its communicator calls that meet other devices, per timed step (comm.h's un_comm_stats) */
    double meets;    /* calls */
    double sleeps;   /* waits in them that slept */
    double meet_ms;  /* milliseconds in them (the median step's) */
    double unpolled; /* of the sleeps, those with no poll before (the load rule said 0) */
} un_train_dev_stats;

typedef struct un_train_result {
    int steps;
    double *losses;        /* per step; owned (un_train_result_deinit) */
    double samples_per_s;  /* mean over the steps after the first */
    double step_ms;        /* mean step time after the first, milliseconds */
    double step_ms_median; /* their median, milliseconds */
    int rank;              /* this process's rank (mpi), 0 otherwise: only rank 0 reports */
    bool reported;         /* the failure was already written to opts.err */
    int devices;
    int64_t batch;
    un_train_dev_stats *dev; /* per device (devices entries); owned */
} un_train_result;

/* ---- lifecycle ---- */

un_train_opts un_train_opts_default(void);
void un_train_result_deinit(un_train_result *r);

/* ---- use ---- */

/* Parses unity-train's flags (argv without the program name). A bad flag or value is
 * UN_ERR_INVALID with one message naming it. */
un_status un_train_parse_args(un_ctx *ctx, int argc, char **argv, un_train_opts *o);
/* The usage text (static). */
const char *un_train_usage(void);

/* Trains: builds or loads the model, applies the strategy, runs o->steps steps on o->devices
 * devices and reports. Bad input (unknown model, bad plan, missing or empty data file, ...) is an
 * error in ctx before anything is printed. */
un_status un_train_run(un_ctx *ctx, const un_train_opts *o, un_train_result *res);

/* The graph un_train_run would execute for these options (the model under its strategy on
 * o->devices devices, 0 = 1), without running it: the search and the estimator use it. Errors as
 * un_train_run's. Owned: free with un_graph_free. */
un_status un_train_graph(un_ctx *ctx, const un_spec *spec, const un_train_opts *o, un_graph **out,
                         int *devices);
/* The loss a run of o trains with: the zoo model's, else --loss (JSON and ONNX: default MSE). */
un_status un_train_loss(un_ctx *ctx, const un_spec *spec, const un_train_opts *o,
                        un_loss_kind *out);

/* The backend a run of o uses: o->backend, else cuda when this build has CUDA, a GPU is there and
 * the precision is float32, else cpu (*name: static). cuda where it cannot run (no GPU, a build
 * without CUDA, float64) is UN_ERR_UNAVAILABLE with one line. *gpus: the GPUs of this machine. */
un_status un_train_backend(un_ctx *ctx, const un_train_opts *o, const char **name, int *gpus);

/* Mean cross-entropy over N rows of logits [N, C] (rows [r0, r0 + rows) of it given, labels
 * indexed by global row) and its gradient (softmax - onehot) / N into grad; returns the sum of
 * the given rows' losses. Exposed for the tests. */
double un_train_ce(un_prec prec, const void *logits, int64_t rows, int64_t c, int64_t r0,
                   int64_t n_total, const int64_t *labels, void *grad);

#endif
