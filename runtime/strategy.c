/* strategy.c - the serial and data-parallel graphs and plan files (strategy.h). */
#include "runtime/strategy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether a parallel op applies to a tensor of shape s (inference without a message). */
static bool par_ok(const un_spec *spec, un_op op, const un_shape *s, int64_t dim, int32_t k,
                   un_shape *res) {
    un_param p[UN_MAX_PARAMS];
    un_spec_parallel_params(spec, op, dim, k, p);
    un_infer inf;
    if (un_spec_infer(NULL, spec, op, p, s, 1, NULL, &inf) != UN_OK)
        return false;
    *res = inf.out[0];
    return true;
}

static void sub_name(char *buf, size_t n, const char *base, const char *suffix) {
    snprintf(buf, n, "%s%s", base ? base : "t", suffix);
}

typedef struct dp_state {
    un_ctx *ctx;
    const un_graph *g;
    un_graph *ng;
    int32_t d;
    un_ref *ser, *par; /* per (node, output): the serial / split version in ng, node -1 if none */
} dp_state;

static int slot(const dp_state *s, un_ref r) {
    (void)s;
    return r.node * UN_MAX_OUTPUTS + r.out;
}

/* The serial version of tensor r (combining the split one if needed). */
static un_status get_ser(dp_state *s, un_ref r, un_ref *out) {
    int k = slot(s, r);
    if (s->ser[k].node < 0) {
        char nm[300];
        sub_name(nm, sizeof nm, un_graph_node(s->g, r.node)->name, "_gathered");
        if (r.out)
            snprintf(nm + strlen(nm), sizeof nm - strlen(nm), "%d", r.out);
        int32_t id;
        un_status st =
            un_graph_add_parallel(s->ctx, s->ng, UN_OP_COMBINE, s->par[k], 0, s->d, nm, &id);
        if (st != UN_OK)
            return st;
        s->ser[k] = (un_ref){id, 0};
    }
    *out = s->ser[k];
    return UN_OK;
}

/* The shape tensor r would have in its split version, or false when it cannot be split. */
static bool par_shape(dp_state *s, un_ref r, un_shape *out) {
    int k = slot(s, r);
    if (s->par[k].node >= 0) {
        *out = *un_graph_shape(s->ng, s->par[k]);
        return true;
    }
    const un_spec *spec = un_graph_spec(s->g);
    const un_shape *sh = un_graph_shape(s->g, r);
    if (!un_shape_is_trivial(sh))
        return false;
    if (un_graph_node(s->g, r.node)->op == UN_OP_WEIGHT)
        return par_ok(spec, UN_OP_REPLICATE, sh, 0, s->d, out);
    return par_ok(spec, UN_OP_PARTITION, sh, 0, s->d, out);
}

static un_status get_par(dp_state *s, un_ref r, un_ref *out) {
    int k = slot(s, r);
    if (s->par[k].node < 0) {
        un_ref src;
        un_status st = get_ser(s, r, &src);
        if (st != UN_OK)
            return st;
        bool w = un_graph_node(s->g, r.node)->op == UN_OP_WEIGHT;
        char nm[300];
        sub_name(nm, sizeof nm, un_graph_node(s->g, r.node)->name, w ? "_copies" : "_split");
        if (r.out)
            snprintf(nm + strlen(nm), sizeof nm - strlen(nm), "%d", r.out);
        int32_t id;
        st = un_graph_add_parallel(s->ctx, s->ng, w ? UN_OP_REPLICATE : UN_OP_PARTITION, src, 0,
                                   s->d, nm, &id);
        if (st != UN_OK)
            return st;
        s->par[k] = (un_ref){id, 0};
    }
    *out = s->par[k];
    return UN_OK;
}

/* Whether every output of an inferred node is split exactly along the batch. */
static bool batch_split(const un_infer *inf, int32_t d) {
    for (int o = 0; o < inf->n_out; o++) {
        const un_shape *s = &inf->out[o];
        if (s->rank < 1 || s->shard[0] != d || s->sum != 1 || s->copy != 1)
            return false;
        for (int i = 1; i < s->rank; i++)
            if (s->shard[i] != 1)
                return false;
    }
    return true;
}

un_status un_strategy_data(un_ctx *ctx, const un_graph *g, int devices, un_graph **out) {
    *out = NULL;
    if (devices < 1 || devices > UN_MAX_DEGREE)
        return un_ctx_error(ctx, UN_ERR_INVALID, "data parallelism: %d devices", devices);
    if (devices == 1) {
        *out = un_graph_clone(g);
        return UN_OK;
    }
    const un_spec *spec = un_graph_spec(g);
    int32_t n = un_graph_node_count(g);
    dp_state s = {.ctx = ctx, .g = g, .ng = un_graph_new(spec), .d = devices};
    s.ser = un_xcalloc((size_t)n * UN_MAX_OUTPUTS, sizeof *s.ser);
    s.par = un_xcalloc((size_t)n * UN_MAX_OUTPUTS, sizeof *s.par);
    for (int64_t i = 0; i < (int64_t)n * UN_MAX_OUTPUTS; i++)
        s.ser[i].node = s.par[i].node = -1;
    un_status st = UN_OK;
    for (int32_t i = 0; i < n && st == UN_OK; i++) {
        int32_t id = i;
        const un_node *nd = un_graph_node(g, id);
        int32_t nid;
        if (un_op_kind_of(nd->op) == UN_OPK_SOURCE) {
            const un_shape *sh = &nd->inf.out[0];
            if (nd->op == UN_OP_INPUT && sh->rank > 0 && sh->dim[0] % devices != 0) {
                st = un_ctx_error(ctx, UN_ERR_INVALID,
                                  "data parallelism over %d devices: input '%s' has batch %lld, "
                                  "not a multiple of %d (choose --batch accordingly)",
                                  devices, nd->name ? nd->name : "?", (long long)sh->dim[0],
                                  devices);
                break;
            }
            st = un_graph_add(ctx, s.ng, nd->op, nd->params, NULL, 0, nd->name, &nid);
            s.ser[slot(&s, (un_ref){id, 0})] = (un_ref){nid, 0};
            continue;
        }
        /* Can it run with every input split along the batch (weights replicated)? Parallel ops of
         * the model itself keep their serial meaning. */
        un_shape in[UN_MAX_INPUTS];
        bool can = un_op_kind_of(nd->op) == UN_OPK_REGULAR;
        for (int t = 0; t < nd->n_in && can; t++)
            can = par_shape(&s, nd->in[t], &in[t]);
        un_infer inf;
        if (can)
            can =
                un_spec_infer(NULL, spec, nd->op, nd->params, in, nd->n_in, NULL, &inf) == UN_OK &&
                batch_split(&inf, devices);
        un_ref ins[UN_MAX_INPUTS];
        for (int t = 0; t < nd->n_in && st == UN_OK; t++)
            st = can ? get_par(&s, nd->in[t], &ins[t]) : get_ser(&s, nd->in[t], &ins[t]);
        if (st == UN_OK)
            st = un_graph_add(ctx, s.ng, nd->op, nd->params, ins, nd->n_in, nd->name, &nid);
        for (int o = 0; st == UN_OK && o < nd->inf.n_out; o++)
            (can ? s.par : s.ser)[slot(&s, (un_ref){id, o})] = (un_ref){nid, o};
    }
    int32_t no = un_graph_output_count(g);
    un_ref *outs = un_xcalloc((size_t)no + 1, sizeof *outs);
    for (int32_t i = 0; i < no && st == UN_OK; i++) {
        un_ref r = un_graph_output(g, i);
        int k = slot(&s, r);
        outs[i] = s.par[k].node >= 0 ? s.par[k] : s.ser[k];
    }
    if (st == UN_OK)
        st = un_graph_set_outputs(ctx, s.ng, outs, no);
    free(outs);
    free(s.ser);
    free(s.par);
    if (st != UN_OK) {
        un_graph_free(s.ng);
        return st;
    }
    *out = s.ng;
    return UN_OK;
}

/* ---- tensor parallelism (Megatron-style pairs of linear layers) ---- */

typedef struct tp_state {
    un_ctx *ctx;
    const un_graph *g;
    un_graph *ng;
    int32_t t;
    un_ref *whole, *cols; /* per (node, output): whole / split on the last dim, node -1 if none */
} tp_state;

static un_status tp_add_par(tp_state *s, un_op op, un_ref in, int64_t dim, const char *base,
                            const char *suffix, un_ref *out) {
    char nm[300];
    sub_name(nm, sizeof nm, base, suffix);
    int32_t id;
    un_status st = un_graph_add_parallel(s->ctx, s->ng, op, in, dim, s->t, nm, &id);
    *out = (un_ref){id, 0};
    return st;
}

/* The whole version of tensor r of g (combining its column split if needed). */
static un_status tp_whole(tp_state *s, un_ref r, un_ref *out) {
    int k = r.node * UN_MAX_OUTPUTS + r.out;
    un_status st = UN_OK;
    if (s->whole[k].node < 0) {
        const un_shape *sh = un_graph_shape(s->ng, s->cols[k]);
        st = tp_add_par(s, UN_OP_COMBINE, s->cols[k], sh->rank - 1,
                        un_graph_node(s->g, r.node)->name, "_whole", &s->whole[k]);
    }
    *out = s->whole[k];
    return st;
}

static bool tp_unary(un_op op) {
    return op == UN_OP_RELU || op == UN_OP_GELU || op == UN_OP_SIGMOID || op == UN_OP_TANH ||
           op == UN_OP_IDENTITY || op == UN_OP_SCALAR_MUL;
}

/* The layout a parallel op gives shape in (false: it does not apply). */
static bool tp_shape(tp_state *s, un_op op, const un_shape *in, int64_t dim, un_shape *out) {
    return par_ok(un_graph_spec(s->g), op, in, dim, s->t, out);
}

/* A linear node of g as a tensor-parallel pair half: rows when its input is split by columns
 * (weight split by rows, partial sums reduced), else columns (input in copies, weight and bias
 * split by columns). False when the layouts do not infer (then it runs whole). */
static bool tp_linear(tp_state *s, const un_node *nd, bool *rows) {
    const un_spec *spec = un_graph_spec(s->g);
    if (nd->op != UN_OP_LINEAR || un_graph_node(s->g, nd->in[1].node)->op != UN_OP_WEIGHT)
        return false;
    const un_shape *x = un_graph_shape(s->g, nd->in[0]), *w = un_graph_shape(s->g, nd->in[1]);
    un_shape in[UN_MAX_INPUTS];
    un_infer inf;
    int kx = nd->in[0].node * UN_MAX_OUTPUTS + nd->in[0].out;
    *rows = s->cols[kx].node >= 0 && nd->n_in == 2;
    if (*rows) {
        in[0] = *un_graph_shape(s->ng, s->cols[kx]);
        if (tp_shape(s, UN_OP_PARTITION, w, 0, &in[1]) &&
            un_spec_infer(NULL, spec, nd->op, nd->params, in, 2, NULL, &inf) == UN_OK &&
            inf.out[0].sum == s->t)
            return true;
        *rows = false;
    }
    if (!tp_shape(s, UN_OP_REPLICATE, x, 0, &in[0]) ||
        !tp_shape(s, UN_OP_PARTITION, w, 1, &in[1]))
        return false;
    if (nd->n_in == 3 &&
        !tp_shape(s, UN_OP_PARTITION, un_graph_shape(s->g, nd->in[2]), 0, &in[2]))
        return false;
    return un_spec_infer(NULL, spec, nd->op, nd->params, in, nd->n_in, NULL, &inf) == UN_OK &&
           inf.out[0].shard[inf.out[0].rank - 1] == s->t && inf.out[0].sum == 1;
}

un_status un_strategy_tensor(un_ctx *ctx, const un_graph *g, int devices, un_graph **out) {
    *out = NULL;
    if (devices < 1 || devices > UN_MAX_DEGREE)
        return un_ctx_error(ctx, UN_ERR_INVALID, "tensor parallelism: %d devices", devices);
    if (devices == 1) {
        *out = un_graph_clone(g);
        return UN_OK;
    }
    int32_t n = un_graph_node_count(g);
    tp_state s = {.ctx = ctx, .g = g, .ng = un_graph_new(un_graph_spec(g)), .t = devices};
    s.whole = un_xcalloc((size_t)n * UN_MAX_OUTPUTS, sizeof *s.whole);
    s.cols = un_xcalloc((size_t)n * UN_MAX_OUTPUTS, sizeof *s.cols);
    for (int64_t i = 0; i < (int64_t)n * UN_MAX_OUTPUTS; i++)
        s.whole[i].node = s.cols[i].node = -1;
    un_status st = UN_OK;
    int split = 0;
    for (int32_t id = 0; id < n && st == UN_OK; id++) {
        const un_node *nd = un_graph_node(g, id);
        int32_t nid;
        un_ref ins[UN_MAX_INPUTS];
        int k0 = nd->n_in ? nd->in[0].node * UN_MAX_OUTPUTS + nd->in[0].out : 0;
        bool rows = false;
        if (un_op_kind_of(nd->op) == UN_OPK_SOURCE) {
            st = un_graph_add(ctx, s.ng, nd->op, nd->params, NULL, 0, nd->name, &nid);
            s.whole[id * UN_MAX_OUTPUTS] = (un_ref){nid, 0};
        } else if (un_op_kind_of(nd->op) == UN_OPK_REGULAR && tp_linear(&s, nd, &rows)) {
            const char *nm = nd->name;
            un_ref w = s.whole[nd->in[1].node * UN_MAX_OUTPUTS + nd->in[1].out];
            if (rows) {
                ins[0] = s.cols[k0];
                st = tp_add_par(&s, UN_OP_PARTITION, w, 0, nm, "_w_rows", &ins[1]);
            } else {
                if ((st = tp_whole(&s, nd->in[0], &ins[0])) == UN_OK)
                    st = tp_add_par(&s, UN_OP_REPLICATE, ins[0], 0, nm, "_in_copies", &ins[0]);
                if (st == UN_OK)
                    st = tp_add_par(&s, UN_OP_PARTITION, w, 1, nm, "_w_cols", &ins[1]);
                if (st == UN_OK && nd->n_in == 3)
                    st = tp_add_par(&s, UN_OP_PARTITION,
                                    s.whole[nd->in[2].node * UN_MAX_OUTPUTS + nd->in[2].out], 0,
                                    nm, "_b_cols", &ins[2]);
            }
            char pn[300];
            sub_name(pn, sizeof pn, nm, rows ? "_partial" : "");
            if (st == UN_OK)
                st = un_graph_add(ctx, s.ng, nd->op, nd->params, ins, nd->n_in,
                                  rows ? pn : nm, &nid);
            if (st == UN_OK && rows)
                st = tp_add_par(&s, UN_OP_REDUCE, (un_ref){nid, 0}, 0, nm, "", &s.whole[id * UN_MAX_OUTPUTS]);
            else if (st == UN_OK)
                s.cols[id * UN_MAX_OUTPUTS] = (un_ref){nid, 0};
            split++;
        } else if (tp_unary(nd->op) && s.cols[k0].node >= 0 && s.whole[k0].node < 0) {
            ins[0] = s.cols[k0];
            st = un_graph_add(ctx, s.ng, nd->op, nd->params, ins, 1, nd->name, &nid);
            s.cols[id * UN_MAX_OUTPUTS] = (un_ref){nid, 0};
        } else {
            for (int t = 0; t < nd->n_in && st == UN_OK; t++)
                st = tp_whole(&s, nd->in[t], &ins[t]);
            if (st == UN_OK)
                st = un_graph_add(ctx, s.ng, nd->op, nd->params, ins, nd->n_in, nd->name, &nid);
            for (int o = 0; st == UN_OK && o < nd->inf.n_out; o++)
                s.whole[id * UN_MAX_OUTPUTS + o] = (un_ref){nid, o};
        }
    }
    int32_t no = un_graph_output_count(g);
    un_ref *outs = un_xcalloc((size_t)no + 1, sizeof *outs);
    for (int32_t i = 0; i < no && st == UN_OK; i++)
        st = tp_whole(&s, un_graph_output(g, i), &outs[i]);
    if (st == UN_OK && split == 0)
        st = un_ctx_error(ctx, UN_ERR_INVALID,
                          "tensor parallelism over %d devices: no linear layer of the model can "
                          "be split %d ways",
                          devices, devices);
    if (st == UN_OK)
        st = un_graph_set_outputs(ctx, s.ng, outs, no);
    free(outs);
    free(s.whole);
    free(s.cols);
    if (st != UN_OK) {
        un_graph_free(s.ng);
        return st;
    }
    *out = s.ng;
    return UN_OK;
}

/* Sets a source's layout parameters (shard, sum, copy) to those of shape l. */
static void source_layout(const un_spec *spec, un_op op, un_param *p, const un_shape *l) {
    const un_op_spec *os = un_spec_op(spec, op);
    int ish = un_spec_param_index(os, "shard"), isum = un_spec_param_index(os, "sum"),
        icp = un_spec_param_index(os, "copy");
    if (ish >= 0) {
        bool trivial = un_shape_is_trivial(l);
        p[ish].len = trivial ? 0 : l->rank;
        for (int d = 0; !trivial && d < l->rank; d++)
            p[ish].v[d] = l->shard[d];
    }
    if (isum >= 0)
        p[isum] = un_param_int(l->sum);
    if (icp >= 0)
        p[icp] = un_param_int(l->copy);
}

/* un_strategy_strip's step: sources lose their layout, parallel ops are read through. */
static un_status strip_node(un_ctx *ctx, void *user, const un_graph *g, int32_t id, un_graph *ng,
                            un_ref *map) {
    (void)user;
    const un_node *nd = un_graph_node(g, id);
    int32_t nid;
    un_status st;
    switch (un_op_kind_of(nd->op)) {
    case UN_OPK_SOURCE: {
        /* the same parameters (dtype, int range) without the layout */
        un_param p[UN_MAX_PARAMS];
        memcpy(p, nd->params, sizeof p);
        un_shape logical = un_shape_logical(&nd->inf.out[0]);
        source_layout(un_graph_spec(g), nd->op, p, &logical);
        st = un_graph_copy_node(ctx, g, id, p, ng, map, &nid);
        break;
    }
    case UN_OPK_PARALLEL:
        map[id * UN_MAX_OUTPUTS] = map[nd->in[0].node * UN_MAX_OUTPUTS + nd->in[0].out];
        return UN_OK;
    default:
        st = un_graph_copy_node(ctx, g, id, NULL, ng, map, &nid);
    }
    if (st == UN_OK) /* placement goes with the layout */
        un_graph_node_set_view(ng, nid, (un_view){0});
    return st;
}

un_status un_strategy_strip(un_ctx *ctx, const un_graph *g, un_graph **out) {
    return un_graph_copy_remap(ctx, g, NULL, 0, strip_node, NULL, out, NULL);
}

/* The parallel op that is weight id's only consumer and that a source's layout can express
 * (partition, replicate), or -1. */
static int32_t sole_layout_user(const un_graph *g, int32_t id) {
    int32_t user = -1, uses = 0;
    for (int32_t j = 0; j < un_graph_node_count(g); j++) {
        const un_node *nd = un_graph_node(g, j);
        for (int t = 0; t < nd->n_in; t++)
            if (nd->in[t].node == id) {
                user = j;
                uses++;
            }
    }
    for (int32_t i = 0; i < un_graph_output_count(g); i++)
        uses += un_graph_output(g, i).node == id;
    if (uses != 1 || user < 0)
        return -1;
    un_op op = un_graph_node(g, user)->op;
    return op == UN_OP_PARTITION || op == UN_OP_REPLICATE ? user : -1;
}

typedef struct fold_state {
    const int32_t *folded_into; /* weight -> the last parallel op folded into it, or -1 */
    const bool *gone;           /* folded parallel ops */
} fold_state;

/* un_strategy_fold_weights' step: a folded weight takes its chain's layout and view, and the chain
 * reads it. */
static un_status fold_node(un_ctx *ctx, void *user, const un_graph *g, int32_t id, un_graph *ng,
                           un_ref *map) {
    const fold_state *fs = user;
    if (fs->gone[id])
        return UN_OK;
    const un_node *nd = un_graph_node(g, id);
    un_param p[UN_MAX_PARAMS];
    memcpy(p, nd->params, sizeof p);
    int32_t last = fs->folded_into[id], nid;
    if (last >= 0) /* the weight takes the last op's layout */
        source_layout(un_graph_spec(g), UN_OP_WEIGHT, p, &un_graph_node(g, last)->inf.out[0]);
    un_status st = un_graph_copy_node(ctx, g, id, p, ng, map, &nid);
    if (st != UN_OK || last < 0)
        return st;
    un_graph_node_set_view(ng, nid, un_graph_node(g, last)->view);
    for (int32_t u = last; u >= 0;) { /* the chain reads it */
        map[u * UN_MAX_OUTPUTS] = (un_ref){nid, 0};
        int32_t next = sole_layout_user(g, u);
        u = next >= 0 && fs->gone[next] ? next : -1;
    }
    return UN_OK;
}

un_status un_strategy_fold_weights(un_ctx *ctx, const un_graph *g, un_graph **out) {
    *out = NULL;
    int32_t n = un_graph_node_count(g);
    int32_t *folded_into = un_xcalloc((size_t)n, sizeof *folded_into); /* weight -> last op */
    bool *gone = un_xcalloc((size_t)n, sizeof *gone);                  /* folded parallel ops */
    for (int32_t id = 0; id < n; id++) {
        folded_into[id] = -1;
        if (un_graph_node(g, id)->op != UN_OP_WEIGHT)
            continue;
        for (int32_t cur = id, u; (u = sole_layout_user(g, cur)) >= 0; cur = u) {
            folded_into[id] = u;
            gone[u] = true;
        }
    }
    fold_state fs = {folded_into, gone};
    un_status st = un_graph_copy_remap(ctx, g, NULL, 0, fold_node, &fs, out, NULL);
    free(gone);
    free(folded_into);
    return st;
}

int64_t un_strategy_devices(const un_graph *g) {
    int64_t most = 1;
    for (int32_t id = 0; id < un_graph_node_count(g); id++) {
        const un_node *nd = un_graph_node(g, id);
        if (nd->view.count > 0) { /* a machine view names its devices */
            int64_t last = nd->view.start + (int64_t)(nd->view.count - 1) * nd->view.stride;
            most = last + 1 > most ? last + 1 : most;
            continue;
        }
        for (int o = 0; o < nd->inf.n_out; o++) {
            int64_t p = un_shape_npieces(&nd->inf.out[o]);
            most = p > most ? p : most;
        }
    }
    return most;
}

un_status un_strategy_plan_load(un_ctx *ctx, const un_spec *spec, const char *path,
                                const un_graph *model, int devices, un_graph **out) {
    *out = NULL;
    un_graph *plan = NULL, *bare = NULL, *model_x = NULL;
    un_status st = un_graph_load(ctx, spec, path, &plan);
    if (st != UN_OK)
        return st;
    int64_t used = un_strategy_devices(plan);
    if (used != devices) {
        st = un_ctx_error(ctx, UN_ERR_MISMATCH,
                          "%s: the plan runs on %lld devices (its most pieces of a tensor, or "
                          "the last device of a machine view + 1), but --devices is %d",
                          path, (long long)used, devices);
        goto done;
    }
    if ((st = un_strategy_strip(ctx, plan, &bare)) != UN_OK)
        goto done;
    /* Both with explicit outputs (explicit outputs count in the canonical hash). */
    model_x = un_graph_clone(model);
    int32_t no = un_graph_output_count(model);
    un_ref *outs = un_xcalloc((size_t)no + 1, sizeof *outs);
    for (int32_t i = 0; i < no; i++)
        outs[i] = un_graph_output(model, i);
    st = un_graph_set_outputs(ctx, model_x, outs, no);
    free(outs);
    if (st != UN_OK)
        goto done;
    if (un_graph_hash(bare) != un_graph_hash(model_x) ||
        un_graph_node_count(bare) != un_graph_node_count(model)) {
        st = un_ctx_error(ctx, UN_ERR_MISMATCH,
                          "%s: the plan without its parallel ops is not the model's graph "
                          "(operators, parameters, shapes or connections differ)",
                          path);
        goto done;
    }
    for (int32_t id = 0; id < un_graph_node_count(model); id++) {
        const un_node *nd = un_graph_node(model, id);
        if (un_op_kind_of(nd->op) != UN_OPK_SOURCE)
            continue;
        int32_t pid = nd->name ? un_graph_find(plan, nd->name) : -1;
        const un_node *pn = pid >= 0 ? un_graph_node(plan, pid) : NULL;
        if (!pn || pn->op != nd->op || !un_shape_same_dims(&pn->inf.out[0], &nd->inf.out[0])) {
            st = un_ctx_error(ctx, UN_ERR_MISMATCH,
                              "%s: the model's %s '%s' is not in the plan with the same shape",
                              path, un_op_name(nd->op), nd->name ? nd->name : "?");
            goto done;
        }
    }
    for (int32_t i = 0; i < un_graph_output_count(plan); i++) {
        const un_shape *s = un_graph_shape(plan, un_graph_output(plan, i));
        if (s->sum != 1) {
            st = un_ctx_error(ctx, UN_ERR_SHAPE,
                              "%s: output %d holds partial sums (sum degree %d); the loss needs "
                              "them reduced",
                              path, i, s->sum);
            goto done;
        }
    }
    *out = plan;
    plan = NULL;
done:
    un_graph_free(model_x);
    un_graph_free(bare);
    un_graph_free(plan);
    return st;
}
