/* report.c - text reports of specs and graphs. */
#include "pcg/report.h"

#include <inttypes.h>
#include <string.h>

static const char *kind_name(un_op_kind k) {
    return k == UN_OPK_SOURCE ? "source" : k == UN_OPK_PARALLEL ? "parallel" : "regular";
}

void un_report_ops(const un_spec *spec, un_buf *b) {
    un_buf_printf(b, "%-20s %-8s %-34s %5s %6s  %s\n", "operator", "kind", "inputs", "rules",
                  "axioms", "parameters");
    for (int op = 0; op < UN_OP_COUNT; op++) {
        const un_op_spec *os = un_spec_op(spec, (un_op)op);
        un_buf in = {0}, pr = {0};
        for (int i = 0; i < os->n_inputs; i++) {
            const un_input_spec *is = &os->inputs[i];
            un_buf_printf(&in, "%s%s%s", i ? "," : "", is->name, is->when.n ? "?" : "");
        }
        for (int i = 0; i < os->n_params; i++) {
            const un_param_spec *ps = &os->params[i];
            un_buf_printf(&pr, "%s%s", i ? " " : "", ps->name);
            if (ps->has_default) {
                un_buf_printf(&pr, "=");
                un_spec_param_str(ps, &ps->dflt, &pr);
            }
        }
        un_buf_printf(b, "%-20s %-8s %-34s %5d %6d  %s\n", os->name, kind_name(os->kind),
                      in.data ? in.data : "-", os->kind == UN_OPK_REGULAR ? os->n_rules + 1 : 0,
                      os->n_axioms, pr.data ? pr.data : "");
        un_buf_free(&in);
        un_buf_free(&pr);
    }
    un_buf_printf(b,
                  "%d operators, %d sharding rules (+ the implicit copy rule of each regular op), "
                  "%d axioms\n",
                  UN_OP_COUNT, un_spec_total_rules(spec), un_spec_total_axioms(spec));
}

un_status un_report_graph(un_ctx *ctx, const un_graph *g, un_buf *b) {
    const un_spec *spec = un_graph_spec(g);
    const int32_t *topo = un_graph_topo(g);
    double flops = 0, bytes = 0;
    for (int32_t k = 0; k < un_graph_node_count(g); k++) {
        int32_t id = topo[k];
        const un_node *nd = un_graph_node(g, id);
        const un_op_spec *os = un_spec_op(spec, nd->op);
        un_buf_printf(b, "  %-10s = %s", nd->name ? nd->name : "?", os->name);
        bool any = false;
        for (int i = 0; i < os->n_params; i++) {
            const un_param_spec *ps = &os->params[i];
            if (un_param_eq(&nd->params[i], &ps->dflt) && ps->has_default)
                continue;
            un_buf_printf(b, "%s%s=", any ? " " : "[", ps->name);
            un_spec_param_str(ps, &nd->params[i], b);
            any = true;
        }
        if (any)
            un_buf_printf(b, "]");
        un_buf_printf(b, "(");
        for (int t = 0; t < nd->n_in; t++) {
            const un_node *src = un_graph_node(g, nd->in[t].node);
            un_buf_printf(b, "%s%s", t ? ", " : "", src->name ? src->name : "?");
            if (nd->in[t].out)
                un_buf_printf(b, ":%d", nd->in[t].out);
        }
        un_buf_printf(b, ") ->");
        for (int o = 0; o < nd->inf.n_out; o++) {
            char sb[96];
            un_shape_str(&nd->inf.out[o], sb, sizeof sb);
            un_buf_printf(b, " %s", sb);
        }
        un_buf_printf(b, "\n");
        if (os->kind == UN_OPK_SOURCE)
            continue;
        un_shape in[UN_MAX_INPUTS];
        for (int t = 0; t < nd->n_in; t++)
            in[t] = *un_graph_shape(g, nd->in[t]);
        double f, by;
        un_status st = un_spec_cost(ctx, spec, nd->op, nd->params, in, nd->n_in, &nd->inf, &f, &by);
        if (st != UN_OK)
            return st;
        flops += f;
        bytes += by;
    }
    un_buf_printf(b, "  %d nodes, canonical hash %016" PRIx64 ", forward %.3g flops, %.3g bytes\n",
                  un_graph_node_count(g), un_graph_hash(g), flops, bytes);
    return UN_OK;
}
