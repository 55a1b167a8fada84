/* optim.h - training state around the executor's flat weight buffer: seeded initialisation and
 * the optimizers (SGD with momentum, Adam); checkpoints are checkpoint.h. Host memory, float32
 * or float64; the optimizer state is kept in the weights' precision.
 *
 *   un_optim *opt;
 *   st = un_optim_init_exec(ctx, g, seed, NULL, ex, be);      // this rank's weight pieces
 *   st = un_optim_new_on(ctx, un_optim_params_default(UN_OPTIM_ADAM), un_exec_shard_count(ex),
 *                        be, &opt);
 *   st = un_exec_update(ctx, ex, opt);                         // every step, after backward
 *   un_optim_free(opt);
 */
#ifndef UN_OPTIM_H
#define UN_OPTIM_H

#include "pcg/graph.h"
#include "runtime/kernels.h"

typedef enum { UN_OPTIM_SGD, UN_OPTIM_ADAM, UN_OPTIM_COUNT } un_optim_algo;

typedef struct un_backend un_backend; /* runtime/backend.h */
typedef struct un_exec un_exec;       /* runtime/exec.h */

typedef struct un_optim_params {
    un_optim_algo kind;
    double lr;                /* learning rate */
    double momentum;          /* SGD: heavy-ball momentum (0 = plain SGD) */
    double beta1, beta2, eps; /* Adam */
} un_optim_params;

typedef struct un_optim un_optim;

/* sgd: lr 0.05, momentum 0.9; adam: lr 0.001, betas 0.9/0.999, eps 1e-8. */
un_optim_params un_optim_params_default(un_optim_algo kind);
const char *un_optim_algo_name(un_optim_algo kind); /* "sgd", "adam"; static */
bool un_optim_algo_from_name(const char *name, un_optim_algo *out);

/* ---- lifecycle ---- */

/* An optimizer over n parameters, its state in host memory. Owned: free with un_optim_free. */
un_status un_optim_new(un_ctx *ctx, un_optim_params p, int64_t n, un_prec prec, un_optim **out);
/* The same with its state (zeroed) in backend be's memory, in be's precision; be must outlive it.
 * UN_ERR_NOMEM when the backend has no room. */
un_status un_optim_new_on(un_ctx *ctx, un_optim_params p, int64_t n, un_backend *be,
                          un_optim **out);
void un_optim_free(un_optim *o);

/* ---- use ---- */

/* One update w -= f(g) of all n parameters (SGD: v = mu v + g, w -= lr v; Adam with bias
 * correction), w, g and the state in host memory (an optimizer made by un_optim_new). */
void un_optim_step(un_optim *o, void *w, const void *g);
/* The same update run by backend be on its memory: w, g and the state there (an optimizer made by
 * un_optim_new_on(..., be, ...)). */
un_status un_optim_step_on(un_ctx *ctx, un_optim *o, un_backend *be, void *w, const void *g);
/* A run of elements [off, off + n) of a weight buffer. */
typedef struct un_optim_seg {
    int64_t off, n;
} un_optim_seg;
/* One update (one step) of only the segments' elements of w and g (backend memory of be), the
 * state compact: segment k's state follows segment k-1's, and the segments' lengths add up to
 * un_optim_count(o). This is the sharded update: a rank updates only its shard of the weights
 * held in copies (exec.h, un_exec_update). */
un_status un_optim_step_segs(un_ctx *ctx, un_optim *o, un_backend *be, void *w, const void *g,
                             const un_optim_seg *segs, int n_segs);
int64_t un_optim_steps(const un_optim *o); /* updates done (restored by a checkpoint) */
void un_optim_set_steps(un_optim *o, int64_t t);
int64_t un_optim_count(const un_optim *o); /* parameters it updates */
un_optim_algo un_optim_kind(const un_optim *o);
/* Its state arrays, n elements in its precision, aligned with the parameters: i = 0 the SGD
 * velocity or Adam's first moment, i = 1 Adam's second moment (NULL for SGD). Borrowed; backend
 * memory for an optimizer made by un_optim_new_on (reach it through the backend, e.g.
 * un_exec_params_scatter / un_exec_params_gather). */
void *un_optim_state(const un_optim *o, int i);
un_prec un_optim_prec(const un_optim *o); /* the precision of its state */

/* Seeded initialisation of every weight of g into the flat buffer w (weights in node order, as
 * un_exec_params): layer_norm/batch_norm gamma 1, biases and beta 0, embedding tables uniform in
 * [-1, 1), other weights uniform in +-1/sqrt(fan_in) (torch's linear default). Element e of a
 * weight (row-major) depends only on the seed, the weight's name and shape, and e (a
 * counter-based generator: splitmix64 at position e of the weight's stream), so any piece of it
 * can be computed alone. */
void un_optim_init_weights(const un_graph *g, uint64_t seed, un_prec prec, void *w, int64_t n);
/* Writes this rank's weight pieces of ex (un_exec_params, through be) with those values, each
 * piece computed where it lives in bounded chunks: no rank holds the logical weights. given (may
 * be NULL: every weight seeded) is indexed by g's node ids: a weight's whole values (logical
 * order, float) that replace its seeded ones, e.g. an ONNX model's initializers; only the
 * rank's blocks of them are read. Copies get the same values; partial sums beyond summand 0,
 * zero. Not collective. */
un_status un_optim_init_exec(un_ctx *ctx, const un_graph *g, uint64_t seed,
                             const float *const *given, un_exec *ex, un_backend *be);

#endif
