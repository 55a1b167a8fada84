/* strategy.h - how a model graph becomes the graph the executor runs on D devices: serial (as is),
 * data parallel (a transform: partition every batch-carrying tensor, replicate every weight, and
 * fall back to a serial operator where the batch cannot be split, e.g. batch norm), or a plan file:
 * a pcg graph JSON with parallel ops, checked against the model and the device count.
 *
 *   un_graph *dp;
 *   st = un_strategy_data(ctx, model_graph, 4, &dp);
 *   st = un_strategy_plan_load(ctx, spec, "plan.json", model_graph, 4, &plan);
 */
#ifndef UN_STRATEGY_H
#define UN_STRATEGY_H

#include "pcg/graph.h"

/* The data-parallel version of g for `devices` devices: every operator whose inputs can take the
 * batch (dim 0) split `devices` ways runs that way (inputs partitioned, weights replicated);
 * the others run on one device with their inputs combined. Same names, same outputs (the
 * outputs keep their split; the loss reads pieces). devices == 1 gives a copy.
 * Owned: free with un_graph_free. */
un_status un_strategy_data(un_ctx *ctx, const un_graph *g, int devices, un_graph **out);

/* The tensor-parallel version of g for `devices` devices (Megatron-style): a linear layer whose
 * weight is a weight node is split by columns (input in copies, weight and bias split on the
 * output features), and the next linear layer reached through element-wise activations is split
 * by rows (weight split on the input features, partial sums reduced), when shape inference allows
 * those layouts; every other op runs whole on its inputs combined. UN_ERR_INVALID when no linear
 * layer can be split. devices == 1 gives a copy. Owned: free with un_graph_free. */
un_status un_strategy_tensor(un_ctx *ctx, const un_graph *g, int devices, un_graph **out);

/* g without its parallel operators: each one's consumers read its input instead, and sources
 * lose their layouts. Owned: free with un_graph_free. */
un_status un_strategy_strip(un_ctx *ctx, const un_graph *g, un_graph **out);

/* g with each weight whose only use is a chain of partition/replicate ops stored in the chain's
 * output layout (the ops removed, their consumers reading the weight): the same function, but
 * the weight lives only as the pieces the plan uses, and its gradient synchronisation is the
 * copy group's sum (replicate's backward) instead of gathering the gradient at one device.
 * Owned: free with un_graph_free. */
un_status un_strategy_fold_weights(un_ctx *ctx, const un_graph *g, un_graph **out);

/* The most pieces any tensor of g has: the devices g runs on. */
int64_t un_strategy_devices(const un_graph *g);

/* Loads a plan (pcg graph JSON) and checks it: every layout legal (inference while loading), the
 * same graph as `model` once the parallel ops are removed (canonical hash, and every source of
 * the model present under its name with its shape), exactly `devices` devices used, and an output
 * the loss can read (no partial sums). Each failure is one error naming the file.
 * Owned: free with un_graph_free. */
un_status un_strategy_plan_load(un_ctx *ctx, const un_spec *spec, const char *path,
                                const un_graph *model, int devices, un_graph **out);

#endif
