/* strategy.h - how a model graph becomes the graph the executor runs on D devices: serial (as is),
 * data parallel (a transform: partition every batch-carrying tensor, replicate every weight, and
 * fall back to a serial operator where the batch cannot be split, e.g. batch norm), tensor
 * parallel (Megatron-style linear pairs), mixed data x tensor (any op's sharding rules), or a plan
 * file: a pcg graph JSON with parallel ops, checked against the model and the device count.
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

/* The mixed data x tensor version of g for data * tensor devices: every regular op takes, among
 * its sharding rules (specs/ops.json), the batch rule of degree `data` where one splits its
 * outputs along the batch only, and at most one more rule of degree `tensor`, choosing the
 * layout that holds the fewest weight elements per device, then one that splits the batch, then
 * the fewest parallel ops inserted to convert its inputs, then the most output pieces. So linear
 * layers split by output features (or by rows after a column split, partial sums reduced),
 * attention by heads, convolutions by output channels (batch norm by channels) and embeddings by
 * columns, each also split along the batch; the rest is data parallel. Tensors are converted
 * between layouts by partition / combine / replicate / reduce (each conversion made once and
 * reused); outputs end split along the batch only. UN_ERR_INVALID when an input's batch is not a
 * multiple of `data`, g already has parallel ops or layouts, or the plan would not use all
 * data * tensor devices (no op splits `tensor` ways). Owned: free with un_graph_free. */
un_status un_strategy_mixed(un_ctx *ctx, const un_graph *g, int data, int tensor, un_graph **out);

/* Whether a --strategy name is a plan file (it ends in .json): un_strategy_named loads it. */
bool un_strategy_is_plan_file(const char *name);

/* The graph of strategy `name` for model g on `devices` devices: "serial", "data", "tensor",
 * "mixed:DxT" (D * T must be `devices`) or a plan file ending in .json (un_strategy_plan_load).
 * A name that is none of these is one error naming it. Owned: free with un_graph_free. */
un_status un_strategy_named(un_ctx *ctx, const un_spec *spec, const un_graph *g, const char *name,
                            int devices, un_graph **out);

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
