/* zoo.h - the model zoo: the seven DNNs of the Unity evaluation (OSDI'22) plus a character-level
 * language model, built as PCGs from the operators of specs/ops.json only. Each model comes in its
 * paper configuration (built and shape-inferred, never trained here) and a tiny one with the same
 * structure that the CPU runtime trains in seconds. It only builds graphs; it runs nothing.
 *
 *   un_model m;
 *   st = un_zoo_build(ctx, spec, "transformer", true, 0, &m);   // tiny, default batch
 *   ... m.graph, m.inputs[i], m.loss, m.label_dim ...
 *   un_model_deinit(&m);
 *
 * Conventions. Weights are UN_OP_WEIGHT nodes (linear W is [in, out]); data inputs are
 * UN_OP_INPUT nodes listed in inputs[] with the batch as dim 0; the graph has exactly one output,
 * the prediction. CE: the output is logits [N, C], the label int [N] in [0, C). MSE: the label
 * has the output's shape. Node names are unique, so graphs round-trip through JSON.
 *
 * Configurations (paper = FlexFlow's osdi2022ae examples/cpp, which the Unity evaluation ran):
 *   mlp          2 towers x 8 linear 8192 (relu, last none, no bias) over inputs [B,1024] each;
 *                towers added = logits [B,8192], CE 8192 classes (FlexFlow: add then softmax).
 *                Tiny: inputs [B,32], 2 x 2 layers of 32, 32 classes.
 *   transformer  BERT-Large encoder: input [B,512,1024] (already embedded, as FlexFlow's), 24
 *                post-LN layers x = ln(x + mha(x)), x = ln(x + W2 gelu(W1 x)), 16 heads, FFN
 *                4096, no biases (so tensor-parallel "contract" rules apply, FlexFlow's has none
 *                either); per-token head linear 1024 -> 1, MSE on [B,512,1]. Tiny: [B,8,32],
 *                2 layers, 4 heads, FFN 128.
 *   dlrm         dense [B,4] -> bottom MLP 64-64 (relu, bias); 4 sparse int [B,1] into embedding
 *                bags 1e6 x 64 (sum); concat [B,320] -> top MLP 64 (relu, bias) -> 2 logits, CE
 *                2 classes (FlexFlow: sigmoid + MSE). Tiny: 4 tables x 100 x 8, bag 2, MLPs 8.
 *   xdl          4 sparse int [B,1] into embeddings 1e6 x 64, concat [B,256] -> 256 -> 256
 *                (relu) -> 2 (sigmoid), no bias, MSE on [B,2]. Tiny: 4 x 100 x 8, MLP 16.
 *   candle_uno   7 float inputs (cell.rnaseq 942, dose1/dose2 1, drug1/drug2 descriptors 5270
 *                and fingerprints 2048); each cell/drug input gets its own tower of 8 x linear
 *                4192 (relu, dropout 10%), doses pass through; concat (20962) -> 4 x 4192 (relu,
 *                dropout) -> 1, MSE on [B,1]. Tiny: features 16/1/24/20, towers 2 x 32, head
 *                2 x 32.
 *   resnext50    ResNeXt-50 32x4d on [B,3,224,224] as torchvision: 7x7/2 stem, 3x3/2 max pool,
 *                bottlenecks [3,4,6,3] (1x1, grouped 3x3 with 32 groups, 1x1; batch_norm after
 *                each conv; projection shortcut on each stage's first block), global average
 *                pool, linear 2048 -> 1000 with bias; CE 1000 classes. Tiny: [B,3,8,8], 3x3
 *                stem of 8, 2 stages of 1 block, 4 groups of width 2, 10 classes.
 *   inception_v3 Inception-v3 on [B,3,299,299] as torchvision without the auxiliary head: full
 *                stem, blocks A x3, B, C x4, D, E x2 (every conv = conv + batch_norm + relu),
 *                8x8 average pool, dropout 50%, linear 2048 -> 1000 with bias; CE 1000 classes.
 *                Tiny: [B,3,11,11], one 3x3 stem conv, then one block of each kind A..E with
 *                every channel count divided by 16, 10 classes.
 *   charlm       byte-level transformer LM: tokens int [B*T,1] in [0,256) (one token per row:
 *                reshape refuses int tensors, so the input is already flat); embedding 256 x D,
 *                reshape [B,T,D], pre-LN blocks x += mha(ln(x)), x += W2 gelu(W1 ln(x)), final
 *                layer_norm, reshape [B*T,D], linear D -> 256 = logits [B*T,256], CE with labels
 *                [B*T] (e.g. the next byte). Causal attention (position t sees positions <= t,
 *                so the next byte does not leak); no positional encoding, so the visible
 *                context is seen as a set. Tiny: T 32, D 32,
 *                4 heads, 1 block, FFN 128; non-tiny: T 64, D 128, 4 heads, 2 blocks, FFN 512.
 *
 * Default batch (batch <= 0): paper mlp/dlrm/xdl/candle_uno/inception_v3 64, transformer 8,
 * resnext50 16, charlm 32 sequences; tiny 16 (charlm 8 sequences, resnext50/inception_v3 8).
 * For charlm the batch counts sequences; dim 0 of its input and output is batch * T.
 */
#ifndef UN_ZOO_H
#define UN_ZOO_H

#include "pcg/graph.h"
#include "runtime/backend.h" /* un_loss_kind */

#define UN_ZOO_MAX_INPUTS 16

typedef struct un_model_input {
    const char *name;  /* the node's name; static string */
    int32_t node;      /* the UN_OP_INPUT node */
    bool is_int;       /* int tensor (indices, tokens) */
    int64_t int_range; /* INT inputs: values in [0, range) */
} un_model_input;

typedef struct un_model {
    un_graph *graph; /* owned; weights are UN_OP_WEIGHT nodes; its one output is the prediction */
    int n_inputs;
    un_model_input inputs[UN_ZOO_MAX_INPUTS]; /* data inputs, batch is dim 0 of each */
    /* CE: output logits [N, C], label int [N] in [0, C); MSE: label shaped like the output */
    un_loss_kind loss;
    int64_t n_classes;  /* CE: C; MSE: 0 */
    int32_t label_rank; /* the label tensor's rank and dims */
    int64_t label_dim[6];
    char name[32]; /* the zoo name */
    int64_t batch; /* the batch it was built for (sequences for charlm) */
    bool tiny;     /* tiny configuration */
    /* Data parallelism (dim 0 of every data input sharded, weights copied) end to end: */
    bool batch_bn; /* holds batch_norm, whose batch statistics forbid a sharded batch */
    bool batch_rs; /* holds a reshape whose dim 0 differs from its input's (charlm merges the
                      batch with the sequence), which ops.json's reshape rule refuses sharded */
} un_model;

/* A size between tiny and paper: each field 0 keeps the base configuration's value (the tiny one
 * with tiny, else the paper one). Parsed from "layers=8,hidden=2048,batch=64" (unity-train
 * --config; scripts/bench use the same strings). Which fields a model takes: mlp layers (per
 * tower), hidden; transformer and charlm layers, hidden, heads, ffn, seq; candle_uno layers (per
 * tower), hidden; xdl and dlrm hidden; every model batch. */
typedef struct un_zoo_config {
    int64_t batch, layers, hidden, heads, ffn, seq;
} un_zoo_config;

/* Parses "key=value,..." into *out (zeroed first). An unknown key, a value that is not a
 * positive integer (at most 2^30) or an empty item is UN_ERR_INVALID naming it. */
un_status un_zoo_config_parse(un_ctx *ctx, const char *text, un_zoo_config *out);

/* Builds model `name` at a configured size: un_zoo_build with cfg's fields over the base (tiny or
 * paper) configuration. A field the model does not take is UN_ERR_INVALID naming the model and
 * the key; sizes must keep the model's shapes legal (e.g. heads dividing hidden), which shape
 * inference checks while building. cfg may be NULL (the base configuration). */
un_status un_zoo_build_config(un_ctx *ctx, const un_spec *spec, const char *name, bool tiny,
                              const un_zoo_config *cfg, un_model *out);

/* Builds model `name` (one of un_zoo_names) over spec, tiny or paper-sized, for `batch` samples
 * (<= 0: the model's default). Every op is checked by shape inference while building. On failure
 * *out is zeroed and the context holds the reason; an unknown name is UN_ERR_INVALID listing the
 * known names. *out owns its graph: free with un_model_deinit. spec is borrowed and must outlive
 * it.
 */
un_status un_zoo_build(un_ctx *ctx, const un_spec *spec, const char *name, bool tiny, int64_t batch,
                       un_model *out);

/* Frees the graph and zeroes *m; NULL-safe. */
void un_model_deinit(un_model *m);

/* The model names, *n of them. Static. */
const char *const *un_zoo_names(int *n);

/* Trained parameters: the sum of the element counts of the weight nodes. */
int64_t un_zoo_param_count(const un_model *m);

/* Weight nodes in the graph. */
int32_t un_zoo_weight_count(const un_model *m);

/* The prediction output (the graph's one output). */
un_ref un_zoo_output(const un_model *m);

#endif
