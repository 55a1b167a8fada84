/* term.c - building axiom terms into graphs. */
#include "pcg/term.h"

#include <string.h>

un_status un_term_build(un_ctx *ctx, un_graph *g, const un_axiom *ax, const un_term *t,
                        const int64_t *pvals, const int32_t *var_nodes, un_ref *out) {
    if (t->kind == UN_TERM_VAR) {
        out->node = var_nodes[t->var];
        out->out = 0;
        return UN_OK;
    }
    const un_spec *spec = un_graph_spec(g);
    const un_op_spec *os = un_spec_op(spec, t->op);
    un_ref args[UN_MAX_INPUTS];
    un_status st;
    for (int i = 0; i < t->n_args; i++)
        if ((st = un_term_build(ctx, g, ax, t->args[i], pvals, var_nodes, &args[i])) != UN_OK)
            return st;
    const un_shape *vs[UN_MAX_INPUTS * 2];
    int nvs = ax->n_vars < UN_MAX_INPUTS * 2 ? ax->n_vars : UN_MAX_INPUTS * 2;
    for (int i = 0; i < nvs; i++)
        vs[i] = un_graph_shape(g, (un_ref){var_nodes[i], 0});
    un_expr_env env = {
        .params = NULL, .n_params = 0, .vars = pvals, .n_vars = ax->n_pvars, .in = vs, .n_in = nvs};
    un_param params[UN_MAX_PARAMS];
    un_spec_param_defaults(os, params);
    for (int i = 0; i < t->n_params; i++) {
        const un_term_param *tp = &t->params[i];
        un_param *p = &params[tp->param];
        int n = tp->n_items < 0 ? 1 : tp->n_items;
        p->len = tp->n_items;
        for (int j = 0; j < n; j++)
            if ((st = un_expr_eval(ctx, tp->items[j], &env, &p->v[j])) != UN_OK)
                return st;
    }
    int32_t id;
    if ((st = un_graph_add(ctx, g, t->op, params, args, t->n_args, NULL, &id)) != UN_OK)
        return st;
    if (t->out_index >= un_graph_node(g, id)->inf.n_out)
        return un_ctx_error(ctx, UN_ERR_SHAPE, "%s has no output %d", os->name, t->out_index);
    out->node = id;
    out->out = t->out_index;
    return UN_OK;
}

void un_term_str(const un_spec *spec, const un_term *t, const un_axiom *ax, un_buf *b) {
    if (t->kind == UN_TERM_VAR) {
        un_buf_printf(b, "%s", ax->vars[t->var].name);
        return;
    }
    const un_op_spec *os = un_spec_op(spec, t->op);
    un_buf_printf(b, "(%s", os->name);
    if (t->out_index)
        un_buf_printf(b, ".%d", t->out_index);
    for (int i = 0; i < t->n_params; i++) {
        un_buf_printf(b, " :%s ", os->params[t->params[i].param].name);
        int n = t->params[i].n_items;
        if (n >= 0)
            un_buf_printf(b, "[");
        for (int j = 0; j < (n < 0 ? 1 : n); j++) {
            if (j)
                un_buf_printf(b, " ");
            un_buf_printf(b, "{");
            un_expr_str(t->params[i].items[j], b);
            un_buf_printf(b, "}");
        }
        if (n >= 0)
            un_buf_printf(b, "]");
    }
    for (int i = 0; i < t->n_args; i++) {
        un_buf_printf(b, " ");
        un_term_str(spec, t->args[i], ax, b);
    }
    un_buf_printf(b, ")");
}
