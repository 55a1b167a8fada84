/* sample.h - small ready-made PCGs: a two-layer MLP, serial or sharded by data parallelism
 * (partition the batch, replicate the weights) or tensor parallelism (split the hidden layer's
 * columns, then its rows, and reduce the partial sums). Used by the demo, tests and benches.
 *
 *   un_graph *g;
 *   st = un_sample_mlp(ctx, spec, (un_sample_mlp_cfg){8, 16, 32, 4}, UN_SAMPLE_TENSOR, 2, &g);
 */
#ifndef UN_SAMPLE_H
#define UN_SAMPLE_H

#include "pcg/graph.h"

typedef enum {
    UN_SAMPLE_SERIAL,
    UN_SAMPLE_DATA,
    UN_SAMPLE_TENSOR,
    UN_SAMPLE_COUNT
} un_sample_strategy;

typedef struct un_sample_mlp_cfg {
    int64_t batch, in, hidden, out;
} un_sample_mlp_cfg;

const char *un_sample_strategy_name(un_sample_strategy s);

/* y = linear(relu-linear(x, w1), w2) with inputs named x, w1, w2, parallelised with `degree`
 * devices by strategy s. Owned: free with un_graph_free. */
un_status un_sample_mlp(un_ctx *ctx, const un_spec *spec, un_sample_mlp_cfg cfg,
                        un_sample_strategy s, int32_t degree, un_graph **out);

/* Measures the core on the sample MLP (tiny 4x4 tensors, as the generator uses, and 64x64):
 * graphs built with inference and hashed per second, and field / float64 piecewise evaluations
 * per second, for each strategy; appends a table to out. */
un_status un_sample_bench(un_ctx *ctx, const un_spec *spec, int iters, un_buf *out);

#endif
