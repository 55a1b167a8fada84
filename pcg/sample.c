/* sample.c - the sample MLP graphs. */
#include "pcg/sample.h"

#include <string.h>
#include <time.h>

#include "pcg/eval.h"

const char *un_sample_strategy_name(un_sample_strategy s) {
    static const char *const names[UN_SAMPLE_COUNT] = {"serial", "data parallel",
                                                       "tensor parallel"};
    return (unsigned)s < UN_SAMPLE_COUNT ? names[s] : "?";
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
        if ((st = un_graph_add_parallel(ctx, g, UN_OP_PARTITION, (un_ref){x, 0}, 0, degree,
                                        "x_split", &a)) != UN_OK)
            goto fail;
        if ((st = un_graph_add_parallel(ctx, g, UN_OP_REPLICATE, (un_ref){w1, 0}, 0, degree,
                                        "w1_copies", &b)) != UN_OK)
            goto fail;
        if ((st = add_linear(ctx, g, a, b, true, "fc1", &h)) != UN_OK)
            goto fail;
        if ((st = un_graph_add_parallel(ctx, g, UN_OP_REPLICATE, (un_ref){w2, 0}, 0, degree,
                                        "w2_copies", &b)) != UN_OK)
            goto fail;
        if ((st = add_linear(ctx, g, h, b, false, "fc2", &r)) != UN_OK)
            goto fail;
        if ((st = un_graph_add_parallel(ctx, g, UN_OP_COMBINE, (un_ref){r, 0}, 0, degree, "y",
                                        &y)) != UN_OK)
            goto fail;
        break;
    case UN_SAMPLE_TENSOR: /* column split of w1, row split of w2, reduce the partial sums */
        if ((st = un_graph_add_parallel(ctx, g, UN_OP_REPLICATE, (un_ref){x, 0}, 0, degree,
                                        "x_copies", &a)) != UN_OK)
            goto fail;
        if ((st = un_graph_add_parallel(ctx, g, UN_OP_PARTITION, (un_ref){w1, 0}, 1, degree,
                                        "w1_cols", &b)) != UN_OK)
            goto fail;
        if ((st = add_linear(ctx, g, a, b, true, "fc1", &h)) != UN_OK)
            goto fail;
        if ((st = un_graph_add_parallel(ctx, g, UN_OP_PARTITION, (un_ref){w2, 0}, 0, degree,
                                        "w2_rows", &b)) != UN_OK)
            goto fail;
        if ((st = add_linear(ctx, g, h, b, false, "fc2", &r)) != UN_OK)
            goto fail;
        if ((st = un_graph_add_parallel(ctx, g, UN_OP_REDUCE, (un_ref){r, 0}, 0, degree, "y",
                                        &y)) != UN_OK)
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

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

un_status un_sample_bench(un_ctx *ctx, const un_spec *spec, int iters, un_buf *out) {
    static const int64_t sizes[] = {4, 64};
    un_buf_printf(out, "%-16s %6s %6s %14s %14s %14s\n", "graph", "size", "nodes", "build+hash/s",
                  "field eval/s", "f64 eval/s");
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        int64_t n = sizes[z];
        int reps = z == 0 ? iters : iters / 100;
        if (reps < 1)
            reps = 1;
        for (int s = 0; s < UN_SAMPLE_COUNT; s++) {
            un_sample_mlp_cfg cfg = {n, n, n, n};
            un_graph *g = NULL;
            uint64_t h = 0; /* keeps the hashing from being optimised away */
            double t0 = seconds();
            for (int i = 0; i < reps; i++) {
                un_status st = un_sample_mlp(ctx, spec, cfg, (un_sample_strategy)s, 2, &g);
                if (st != UN_OK)
                    return st;
                h ^= un_graph_hash(g);
                un_graph_free(g);
            }
            double build = reps / (seconds() - t0);
            un_status st = un_sample_mlp(ctx, spec, cfg, (un_sample_strategy)s, 2, &g);
            if (st != UN_OK)
                return st;
            double rate[UN_DOM_COUNT];
            for (int d = 0; d < UN_DOM_COUNT && st == UN_OK; d++) {
                t0 = seconds();
                for (int i = 0; i < reps && st == UN_OK; i++) {
                    un_eval *ev = NULL;
                    st = un_eval_new(ctx, g, (un_dom)d, &ev);
                    if (st == UN_OK) {
                        st = un_eval_fill_random(ev, (uint64_t)i);
                        if (st == UN_OK)
                            st = un_eval_run(ev);
                    }
                    un_eval_free(ev);
                }
                rate[d] = reps / (seconds() - t0);
            }
            if (st == UN_OK)
                un_buf_printf(out, "%-16s %6lld %6d %14.0f %14.0f %14.0f\n",
                              un_sample_strategy_name((un_sample_strategy)s), (long long)n,
                              un_graph_node_count(g), build, rate[UN_DOM_FIELD], rate[UN_DOM_F64]);
            un_graph_free(g);
            if (st != UN_OK)
                return st;
            (void)h;
        }
    }
    return UN_OK;
}
