/* sample.c - the sample MLP graphs. */
#include "pcg/sample.h"

#include <string.h>

const char *un_sample_strategy_name(un_sample_strategy s) {
    static const char *const names[UN_SAMPLE_COUNT] = {"serial", "data parallel",
                                                       "tensor parallel"};
    return (unsigned)s < UN_SAMPLE_COUNT ? names[s] : "?";
}

static un_status add_par(un_ctx *ctx, un_graph *g, un_op op, int32_t in, int64_t dim,
                         int32_t degree, const char *name, int32_t *out) {
    const un_op_spec *os = un_spec_op(un_graph_spec(g), op);
    un_param p[UN_MAX_PARAMS];
    un_spec_param_defaults(os, p);
    int pd = un_spec_param_index(os, "dim");
    if (pd >= 0)
        p[pd].v[0] = dim;
    p[un_spec_param_index(os, "degree")].v[0] = degree;
    return un_graph_add(ctx, g, op, p, (un_ref[]){{in, 0}}, 1, name, out);
}

static un_status add_linear(un_ctx *ctx, un_graph *g, int32_t x, int32_t w, bool relu,
                            const char *name, int32_t *out) {
    const un_op_spec *os = un_spec_op(un_graph_spec(g), UN_OP_LINEAR);
    un_param p[UN_MAX_PARAMS];
    un_spec_param_defaults(os, p);
    if (relu)
        p[un_spec_param_index(os, "activation")].v[0] = 1; /* enum index of "relu" */
    return un_graph_add(ctx, g, UN_OP_LINEAR, p, (un_ref[]){{x, 0}, {w, 0}}, 2, name, out);
}

un_status un_sample_mlp(un_ctx *ctx, const un_spec *spec, un_sample_mlp_cfg c, un_sample_strategy s,
                        int32_t degree, un_graph **out) {
    *out = NULL;
    const un_op_spec *lin = un_spec_op(spec, UN_OP_LINEAR);
    int pa = un_spec_param_index(lin, "activation");
    if (pa < 0 || lin->params[pa].n_enum < 2 || strcmp(lin->params[pa].enums[1], "relu") != 0)
        return un_ctx_error(ctx, UN_ERR_SPEC, "linear's activation enum must list relu second");
    un_graph *g = un_graph_new(spec);
    int32_t x, w1, w2, a, b, h, y, r;
    un_status st;
    if ((st = un_graph_add_input(ctx, g, "x", UN_OP_INPUT, 2, (int64_t[]){c.batch, c.in}, &x)) !=
        UN_OK)
        goto fail;
    if ((st = un_graph_add_input(ctx, g, "w1", UN_OP_WEIGHT, 2, (int64_t[]){c.in, c.hidden},
                                 &w1)) != UN_OK)
        goto fail;
    if ((st = un_graph_add_input(ctx, g, "w2", UN_OP_WEIGHT, 2, (int64_t[]){c.hidden, c.out},
                                 &w2)) != UN_OK)
        goto fail;
    switch (s) {
    case UN_SAMPLE_SERIAL:
        if ((st = add_linear(ctx, g, x, w1, true, "fc1", &h)) != UN_OK)
            goto fail;
        if ((st = add_linear(ctx, g, h, w2, false, "fc2", &y)) != UN_OK)
            goto fail;
        break;
    case UN_SAMPLE_DATA: /* partition the batch, replicate the weights, combine the result */
        if ((st = add_par(ctx, g, UN_OP_PARTITION, x, 0, degree, "x_split", &a)) != UN_OK)
            goto fail;
        if ((st = add_par(ctx, g, UN_OP_REPLICATE, w1, 0, degree, "w1_copies", &b)) != UN_OK)
            goto fail;
        if ((st = add_linear(ctx, g, a, b, true, "fc1", &h)) != UN_OK)
            goto fail;
        if ((st = add_par(ctx, g, UN_OP_REPLICATE, w2, 0, degree, "w2_copies", &b)) != UN_OK)
            goto fail;
        if ((st = add_linear(ctx, g, h, b, false, "fc2", &r)) != UN_OK)
            goto fail;
        if ((st = add_par(ctx, g, UN_OP_COMBINE, r, 0, degree, "y", &y)) != UN_OK)
            goto fail;
        break;
    case UN_SAMPLE_TENSOR: /* column split of w1, row split of w2, reduce the partial sums */
        if ((st = add_par(ctx, g, UN_OP_REPLICATE, x, 0, degree, "x_copies", &a)) != UN_OK)
            goto fail;
        if ((st = add_par(ctx, g, UN_OP_PARTITION, w1, 1, degree, "w1_cols", &b)) != UN_OK)
            goto fail;
        if ((st = add_linear(ctx, g, a, b, true, "fc1", &h)) != UN_OK)
            goto fail;
        if ((st = add_par(ctx, g, UN_OP_PARTITION, w2, 0, degree, "w2_rows", &b)) != UN_OK)
            goto fail;
        if ((st = add_linear(ctx, g, h, b, false, "fc2", &r)) != UN_OK)
            goto fail;
        if ((st = add_par(ctx, g, UN_OP_REDUCE, r, 0, degree, "y", &y)) != UN_OK)
            goto fail;
        break;
    default:
        st = un_ctx_error(ctx, UN_ERR_INVALID, "unknown strategy %d", (int)s);
        goto fail;
    }
    *out = g;
    return UN_OK;
fail:
    un_graph_free(g);
    return st;
}
