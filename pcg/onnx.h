/* onnx.h - ONNX import: an ONNX model file (opsets 13-17) becomes a serial PCG over the
 * operators of specs/ops.json, its initializers the weights' starting values. The only user of
 * protobuf-c and of the code protoc-c generates from onnx.proto (STYLE rule 2); a build without
 * them keeps this API and answers UN_ERR_UNAVAILABLE. Shape arithmetic (Shape, Gather, Concat,
 * Unsqueeze, ... on constants) is folded at import; a node that needs an operator we lack is
 * refused with one error naming the node, its op type and why.
 *
 *   un_onnx m;
 *   st = un_onnx_import(ctx, spec, "resnet18.onnx", NULL, &m);   // or "2x3x64x64" for dynamic dims
 *   ... m.graph (weights: UN_OP_WEIGHT nodes named after the initializers), m.values ...
 *   un_onnx_deinit(&m);
 */
#ifndef UN_ONNX_H
#define UN_ONNX_H

#include "pcg/graph.h"

typedef struct un_onnx {
    un_graph *graph;     /* owned; its outputs are the ONNX graph's outputs */
    int64_t n_values;    /* the weights' element count (every UN_OP_WEIGHT node, in node order) */
    float *values;       /* their initial values from the initializers, in node order (the order
                            of un_optim_init_weights and un_exec_params); owned */
    int64_t onnx_params; /* elements of the float initializers the graph's nodes use as trained
                            parameters (BatchNormalization's running statistics excluded) */
    int opset;           /* the model's default-domain opset */
} un_onnx;

/* True when this build can import ONNX (protoc-c and protobuf-c were found). */
bool un_onnx_available(void);

/* True when path names an ONNX file by its extension (".onnx"). */
bool un_onnx_is_path(const char *path);

/* Imports the ONNX model at path. input_shape (may be NULL) fixes the graph inputs' dims where
 * the file leaves them symbolic: "2x3x64x64", several inputs separated by ','. Errors (a missing,
 * truncated or garbage file, an opset outside 13-17, an unknown or unsupported node, a dynamic
 * dim without input_shape) are one message in ctx naming the file and, for a node, its name and op
 * type; *out is then zeroed. Owned: release with un_onnx_deinit. spec is borrowed and must outlive
 * the graph. */
un_status un_onnx_import(un_ctx *ctx, const un_spec *spec, const char *path,
                         const char *input_shape, un_onnx *out);

/* Frees the graph and the values and zeroes *m; NULL-safe. */
void un_onnx_deinit(un_onnx *m);

#endif
