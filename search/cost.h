/* cost.h - the cost model the search and the tools call (DESIGN.md section 8): the forward and
 * backward time of one piece of an operator on the machine's device kind (a measured time from
 * rules.db's op-cost cache when one exists for that device kind, else a roofline of the spec's
 * cost expressions evaluated on the piece, scaled as the cache's pieces of the same op and
 * parameters compare with their roofline where it has any), the time of moving bytes between two
 * devices and of collectives over a group (alpha-beta, ring or tree, intra- or inter-node), of a
 * local copy, and of an optimizer step. Queries are cached by (op, per-piece params, piece shapes):
 * after the first, a query is a hash lookup. An op without cost expressions gets a default and a
 * warning.
 *
 *   un_cost_model *cm;
 *   st = un_cost_model_new(ctx, spec, &machine, UN_MPREC_F32, db, &cm);   // db may be NULL
 *   un_op_cost c;
 *   st = un_cost_node(ctx, cm, g, node, &c);        // c.fwd, c.bwd: seconds for one piece
 *   double t = un_cost_allreduce(cm, devs, 4, 4e6); // 4 MB over 4 devices
 *   fputs(un_cost_warnings(cm), stderr);
 *   un_cost_model_free(cm);
 */
#ifndef UN_COST_H
#define UN_COST_H

#include "pcg/graph.h"
#include "rulesdb/rulesdb.h"
#include "runtime/backend.h" /* un_loss_kind */
#include "search/machine.h"

typedef struct un_cost_model un_cost_model;

/* One piece of one operator. */
typedef struct un_op_cost {
    double fwd, bwd;                 /* seconds on one device */
    double flops, bytes;             /* forward work of the piece (analytic) */
    double bwd_flops, bwd_bytes;     /* backward work of the piece (analytic) */
    int fwd_kernels, bwd_kernels;    /* kernels and cuBLAS calls of the CUDA backend (device.gpu
                                      * given; else 0) */
    double scratch_fwd, scratch_bwd; /* bytes of device scratch those take (device.gpu; else 0) */
    bool measured;                   /* fwd/bwd come from the op-cost cache */
    bool scaled; /* fwd/bwd: the model's scaled by measured pieces of the same op (un_cost_piece) */
} un_op_cost;

/* ---- lifecycle ---- */

/* A cost model for machine m (copied) at precision prec (f32 or f64: element bytes 4 or 8).
 * spec is borrowed, and db (NULL: analytic only) too; both must outlive the model.
 * Owned: free with un_cost_model_free. */
un_status un_cost_model_new(un_ctx *ctx, const un_spec *spec, const un_machine *m, un_mprec prec,
                            un_rulesdb *db, un_cost_model **out);
void un_cost_model_free(un_cost_model *cm);

/* ---- queries ---- */

const un_machine *un_cost_machine(const un_cost_model *cm);

/* The cost of one piece of op on the given piece shapes (their layouts are ignored: a piece is a
 * dense tensor) with the per-piece parameters (un_infer.local). Only regular operators. */
un_status un_cost_piece(un_ctx *ctx, un_cost_model *cm, un_op op, const un_param *params,
                        const un_shape *in, int n_in, un_op_cost *out);
/* The cost of one piece of regular node id of g (every device tuple of a node has the same piece
 * shapes). */
un_status un_cost_node(un_ctx *ctx, un_cost_model *cm, const un_graph *g, int32_t id,
                       un_op_cost *out);

/* Seconds to move `bytes` from device a to device b (0 when a == b). */
double un_cost_p2p(const un_cost_model *cm, int a, int b, double bytes);
/* Seconds for an all-reduce of `bytes` over the n devices devs (0 for n <= 1), with the
 * algorithm of the slowest link the group crosses. */
double un_cost_allreduce(const un_cost_model *cm, const int *devs, int n, double bytes);
/* Seconds to copy `bytes` within one device's memory. */
double un_cost_copy(const un_cost_model *cm, double bytes);
/* The loss the run trains with (un_cost_loss; cross-entropy until set). */
void un_cost_model_set_loss(un_cost_model *cm, un_loss_kind kind);
/* Seconds of the run's loss (un_cost_model_set_loss) and its gradient on one output piece of
 * rows x classes (the output's last dimension): measured (op-cost cache, "loss:ce" or "loss:mse"
 * float[rows,classes]) when present, else the CUDA backend's kernels for cross-entropy
 * (device.gpu; for either kind), else a copy of the piece. */
double un_cost_loss(un_ctx *ctx, un_cost_model *cm, int64_t rows, int64_t classes);
/* Seconds to zero `bytes` of device memory in `buffers` buffers: one memset call each on a kind
 * with device.gpu, else at mem_bw. */
double un_cost_zero(const un_cost_model *cm, double bytes, int64_t buffers);
/* Seconds for one optimizer step over n parameters on one device ("sgd" or "adam"): measured
 * (op-cost cache, op_sig "optimizer:adam") when present for n; else from the cache's other counts
 * of this kind (linear between the two around n, the nearest's time per parameter beyond them);
 * else memory-bound. */
double un_cost_optimizer(un_ctx *ctx, un_cost_model *cm, const char *optimizer, int64_t n);
/* The op-cost cache's entry (op_sig, shape) for this device kind: true and its two times in
 * seconds, or false when there is none. */
bool un_cost_lookup(un_ctx *ctx, un_cost_model *cm, const char *op_sig, const char *shape,
                    double *fwd, double *bwd);
/* The measured seconds of a step's part that is not an operator (op-cost cache entries the
 * profiler stores: "loss:ce" or "loss:mse" float[rows,classes] = the loss and its gradient on one
 * output piece, "comm:barrier" devices[D] = one barrier of D device threads, "comm:exchange"
 * devices[D] = one exchange of small messages between them: its rendezvous), or `fallback` when
 * none is cached for this device kind. */
double un_cost_measured(un_ctx *ctx, un_cost_model *cm, const char *op_sig, const char *shape,
                        double fallback);
/* Element bytes of float tensors at the model's precision. */
int un_cost_elem_bytes(const un_cost_model *cm);

/* Warnings gathered so far, one per line (an op without cost expressions), "" when none.
 * Borrowed, valid until the next query or un_cost_model_free. */
const char *un_cost_warnings(const un_cost_model *cm);
/* Queries answered, and of those answered from the cache or measured. */
void un_cost_stats(const un_cost_model *cm, int64_t *queries, int64_t *cached, int64_t *measured);
/* t at v from the points (x[i], t[i]), i < n, in ascending x: log-log between the two around v,
 * beyond them the nearest one's ratio t / x (a measured curve of times: un_cost_piece's scaled
 * pieces, the simulator's work-then-meet stretches). */
double un_cost_interp(const double *x, const double *t, int n, double v);
/* The distinct pieces queried so far: measured, scaled (un_cost_piece) and costed by the model
 * alone (the roofline or the GPU kernel model). */
void un_cost_pieces(const un_cost_model *cm, int64_t *measured, int64_t *scaled, int64_t *model);

/* ---- the op-cost cache's key (un_rulesdb_cost.op_sig / .shape) ---- */

/* op_sig "linear[activation=relu,use_bias=0]", shape "float[16,32];float[32,32]" (piece shapes).
 * Returns false when a key does not fit its buffer. */
bool un_cost_key(const un_spec *spec, un_op op, const un_param *params, const un_shape *in,
                 int n_in, char *op_sig, size_t n_sig, char *shape, size_t n_shape);
/* The dense piece shapes of node id's inputs (dims divided by their shard degrees). */
void un_cost_piece_shapes(const un_graph *g, int32_t id, un_shape *in);

#endif
