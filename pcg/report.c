/* report.c - text reports of specs and graphs. */
#include "pcg/report.h"

#include "pcg/eval.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
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
        un_buf_deinit(&in);
        un_buf_deinit(&pr);
    }
    un_buf_printf(b,
                  "%d operators, %d sharding rules (+ the implicit copy rule of each regular op), "
                  "%d axioms\n",
                  UN_OP_COUNT, un_spec_total_rules(spec), un_spec_total_axioms(spec));
}

un_status un_report_graph(un_ctx *ctx, const un_graph *g, un_buf *b) {
    const un_spec *spec = un_graph_spec(g);
    double flops = 0, bytes = 0;
    for (int32_t k = 0; k < un_graph_node_count(g); k++) {
        int32_t id = k;
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

static void dump_values(un_buf *b, const un_shape *s, int dom, const un_val *v) {
    un_buf_printf(b, "{\"shape\": [");
    for (int i = 0; i < s->rank; i++)
        un_buf_printf(b, "%s%lld", i ? ", " : "", (long long)s->dim[i]);
    un_buf_printf(b, "], \"values\": [");
    int64_t n = un_shape_numel(s);
    for (int64_t x = 0; x < n; x++) {
        if (dom == UN_DOM_FIELD)
            un_buf_printf(b, "%s%llu", x ? ", " : "", (unsigned long long)v[x].u);
        else if (isfinite(v[x].f))
            un_buf_printf(b, "%s%.17g", x ? ", " : "", v[x].f);
        else /* JSON has no infinities or NaN: they are written as strings */
            un_buf_printf(b, "%s\"%s\"", x ? ", " : "",
                          isnan(v[x].f) ? "nan"
                          : v[x].f > 0  ? "inf"
                                        : "-inf");
    }
    un_buf_printf(b, "]}");
}

un_status un_report_eval(un_ctx *ctx, const un_graph *g, int dom, uint64_t seed, bool dump,
                         un_buf *out) {
    const char *dn = dom == UN_DOM_FIELD ? "field" : "f64";
    un_eval *ev = NULL;
    un_val *v = NULL;
    un_status st = un_eval_new(ctx, g, (un_dom)dom, &ev);
    if (st == UN_OK)
        st = un_eval_fill_random(ev, seed);
    if (st == UN_OK)
        st = un_eval_run(ev);
    if (st == UN_OK && dump) {
        un_buf_printf(out, "{\"domain\": \"%s\", \"inputs\": {", dn);
        bool first = true;
        for (int32_t i = 0; st == UN_OK && i < un_graph_node_count(g); i++) {
            const un_node *nd = un_graph_node(g, i);
            if (un_op_kind_of(nd->op) != UN_OPK_SOURCE)
                continue;
            const un_ptensor *t = un_eval_value(ev, (un_ref){i, 0});
            v = un_xrealloc(v, sizeof(un_val) * (size_t)un_shape_numel(&t->shape) + 1);
            if ((st = un_ptensor_gather(ctx, t, (un_dom)dom, v)) != UN_OK)
                break;
            un_buf_printf(out, "%s", first ? "\n  " : ",\n  ");
            un_buf_json_str(out, nd->name ? nd->name : "?");
            un_buf_printf(out, ": ");
            dump_values(out, &t->shape, dom, v);
            first = false;
        }
        un_buf_printf(out, "},\n \"outputs\": [");
    }
    for (int32_t i = 0; st == UN_OK && i < un_graph_output_count(g); i++) {
        un_ref r = un_graph_output(g, i);
        const un_ptensor *t = un_eval_value(ev, r);
        const un_node *nd = un_graph_node(g, r.node);
        int64_t n = un_shape_numel(&t->shape);
        v = un_xrealloc(v, sizeof(un_val) * (size_t)n + 1);
        if ((st = un_ptensor_gather(ctx, t, (un_dom)dom, v)) != UN_OK)
            break;
        if (dump) {
            un_buf_printf(out, "%s{\"name\": ", i ? ",\n  " : "\n  ");
            un_buf_json_str(out, nd->name ? nd->name : "?");
            un_buf_printf(out, ", \"output\": %d, \"value\": ", r.out);
            dump_values(out, &t->shape, dom, v);
            un_buf_printf(out, "}");
            continue;
        }
        un_val sum = un_num_zero((un_dom)dom);
        for (int64_t x = 0; x < n; x++)
            sum = un_num_add((un_dom)dom, sum, v[x]);
        char sb[96];
        un_shape_str(&t->shape, sb, sizeof sb);
        if (dom == UN_DOM_FIELD)
            un_buf_printf(out, "%-6s %-10s %-28s sum = %llu (mod 2^61-1)\n", dn,
                          nd->name ? nd->name : "?", sb, (unsigned long long)sum.u);
        else
            un_buf_printf(out, "%-6s %-10s %-28s sum = %.12g\n", dn, nd->name ? nd->name : "?", sb,
                          sum.f);
    }
    if (st == UN_OK && dump)
        un_buf_printf(out, "]}\n");
    free(v);
    un_eval_free(ev);
    return st;
}
