/* report.h - human-readable text for the operator registry and for graphs (the tools print it).
 *
 *   un_buf b = {0};
 *   un_report_ops(spec, &b);   fputs(b.data, stdout);   un_buf_deinit(&b);
 */
#ifndef UN_REPORT_H
#define UN_REPORT_H

#include "pcg/graph.h"

/* One line per operator: kind, inputs, parameters with defaults, rule and axiom counts. */
void un_report_ops(const un_spec *spec, un_buf *out);
/* One line per node in topological order: name, op, non-default parameters, output shapes
 * with layouts; then the canonical hash and the total forward flops and bytes. */
un_status un_report_graph(un_ctx *ctx, const un_graph *g, un_buf *out);

/* Evaluates g on random inputs (seeded as un_eval_fill_random) in domain dom. Writes one line per
 * output with its shape and the sum of its values; with dump, a JSON object instead:
 * {"domain": "f64", "inputs": {"x": {"shape": [..], "values": [..]}, ...}, "outputs": [{"name": ..,
 * "shape": [..], "values": [..]}, ...]} with logical (gathered) values in row-major order; float64
 * infinities and NaN are written as the strings "inf", "-inf", "nan". */
un_status un_report_eval(un_ctx *ctx, const un_graph *g, int dom, uint64_t seed, bool dump,
                         un_buf *out);

#endif
