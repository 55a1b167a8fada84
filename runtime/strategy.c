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
    if (!tp_shape(s, UN_OP_REPLICATE, x, 0, &in[0]) || !tp_shape(s, UN_OP_PARTITION, w, 1, &in[1]))
        return false;
    if (nd->n_in == 3 && !tp_shape(s, UN_OP_PARTITION, un_graph_shape(s->g, nd->in[2]), 0, &in[2]))
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
                                    s.whole[nd->in[2].node * UN_MAX_OUTPUTS + nd->in[2].out], 0, nm,
                                    "_b_cols", &ins[2]);
            }
            char pn[300];
            sub_name(pn, sizeof pn, nm, rows ? "_partial" : "");
            if (st == UN_OK)
                st = un_graph_add(ctx, s.ng, nd->op, nd->params, ins, nd->n_in, rows ? pn : nm,
                                  &nid);
            if (st == UN_OK && rows)
                st = tp_add_par(&s, UN_OP_REDUCE, (un_ref){nid, 0}, 0, nm, "",
                                &s.whole[id * UN_MAX_OUTPUTS]);
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

/* ---- mixed data x tensor parallelism (any op's sharding rules) ---- */

/* The versions of one tensor in the new graph: [0] the base (copy 1, sum 1; node -1 until made),
 * then any other layout it has been converted to or produced in (a partial-sum output). */
typedef struct mx_vers {
    int n, cap;
    un_shape *lay;
    un_ref *ref;
} mx_vers;

typedef struct mx_state {
    un_ctx *ctx;
    const un_graph *g;
    un_graph *ng;
    int32_t d, t;
    mx_vers *v;    /* per (node, output) of g */
    int64_t names; /* counter for the names of inserted parallel ops */
} mx_state;

static void mx_add(mx_vers *v, const un_shape *lay, un_ref r) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 4;
        v->lay = un_xrealloc(v->lay, (size_t)v->cap * sizeof *v->lay);
        v->ref = un_xrealloc(v->ref, (size_t)v->cap * sizeof *v->ref);
    }
    v->lay[v->n] = *lay;
    v->ref[v->n++] = r;
}

static int mx_find(const mx_vers *v, const un_shape *lay) {
    for (int i = 0; i < v->n; i++)
        if (v->ref[i].node >= 0 && un_shape_eq(&v->lay[i], lay))
            return i;
    return -1;
}

/* One conversion step of tensor r from version `from` to layout `to` by parallel op `op`: the
 * version if it exists, else made (counted in *ops when dry, nothing added). */
static un_status mx_step(mx_state *s, un_ref r, un_ref *cur, un_shape *cur_lay, un_op op,
                         int64_t dim, int32_t k, bool dry, int *ops) {
    un_shape to;
    if (!par_ok(un_graph_spec(s->g), op, cur_lay, dim, k, &to))
        return UN_ERR_SHAPE;
    mx_vers *v = &s->v[r.node * UN_MAX_OUTPUTS + r.out];
    int i = mx_find(v, &to);
    if (i >= 0) {
        *cur = v->ref[i];
    } else if (dry || cur->node < 0) {
        (*ops)++;
        cur->node = -1;
    } else {
        static const char *const what[] = {[UN_OP_PARTITION] = "_part",
                                           [UN_OP_COMBINE] = "_comb",
                                           [UN_OP_REPLICATE] = "_repl",
                                           [UN_OP_REDUCE] = "_red"};
        const char *base = un_graph_node(s->g, r.node)->name;
        char nm[300];
        snprintf(nm, sizeof nm, "%s%s%lld", base ? base : "t", what[op], (long long)s->names++);
        int32_t id;
        un_status st = un_graph_add_parallel(s->ctx, s->ng, op, *cur, dim, k, nm, &id);
        if (st != UN_OK)
            return st;
        *cur = (un_ref){id, 0};
        mx_add(v, &to, *cur);
        (*ops)++;
    }
    *cur_lay = to;
    return UN_OK;
}

/* Tensor r of g in layout `want`: an existing version, else the base (a partial-sum output
 * reduced) combined, partitioned and replicated into it. With dry, only counts the parallel ops
 * it would add into *ops. UN_ERR_SHAPE when no conversion reaches it (a partial sum that no op
 * produced). */
static un_status mx_get(mx_state *s, un_ref r, const un_shape *want, bool dry, un_ref *out,
                        int *ops) {
    mx_vers *v = &s->v[r.node * UN_MAX_OUTPUTS + r.out];
    int i = mx_find(v, want);
    if (i >= 0) {
        *out = v->ref[i];
        return UN_OK;
    }
    if (want->sum != 1 || want->copy < 1)
        return UN_ERR_SHAPE;
    un_ref cur = v->ref[0];
    un_shape lay = v->lay[0];
    un_status st = UN_OK;
    if (cur.node < 0) { /* the base of a partial-sum output: its sums reduced */
        int ps = -1;
        for (int j = 1; j < v->n && ps < 0; j++)
            if (v->lay[j].sum > 1 && v->lay[j].copy == 1)
                ps = j;
        if (ps < 0)
            return UN_ERR_SHAPE;
        cur = v->ref[ps];
        lay = v->lay[ps];
        if ((st = mx_step(s, r, &cur, &lay, UN_OP_REDUCE, 0, lay.sum, dry, ops)) != UN_OK)
            return st;
        if (!dry) {
            v->ref[0] = cur;
            v->lay[0] = lay;
        }
    }
    for (int d = 0; d < lay.rank && st == UN_OK; d++) /* coarser first, then finer */
        if (lay.shard[d] > want->shard[d] || want->shard[d] % lay.shard[d] != 0)
            st = mx_step(s, r, &cur, &lay, UN_OP_COMBINE, d,
                         lay.shard[d] % want->shard[d] == 0 ? lay.shard[d] / want->shard[d]
                                                            : lay.shard[d],
                         dry, ops);
    for (int d = 0; d < lay.rank && st == UN_OK; d++)
        if (want->shard[d] > lay.shard[d])
            st = mx_step(s, r, &cur, &lay, UN_OP_PARTITION, d, want->shard[d] / lay.shard[d], dry,
                         ops);
    if (st == UN_OK && want->copy > 1)
        st = mx_step(s, r, &cur, &lay, UN_OP_REPLICATE, 0, want->copy, dry, ops);
    *out = cur;
    return st;
}

/* A candidate layout of one op: its inputs' layouts and how good it is (lower is better). */
typedef struct mx_cand {
    un_shape in[UN_MAX_INPUTS];
    int64_t weight_elems; /* weight elements per device */
    int unbatched;        /* 1 when the batch is not split */
    int ops;              /* parallel ops it adds */
    int64_t pieces;       /* of its output (more is better) */
} mx_cand;

static bool mx_better(const mx_cand *a, const mx_cand *b) {
    if (a->weight_elems != b->weight_elems)
        return a->weight_elems < b->weight_elems;
    if (a->unbatched != b->unbatched)
        return a->unbatched < b->unbatched;
    if (a->ops != b->ops)
        return a->ops < b->ops;
    return a->pieces > b->pieces;
}

/* Evaluates the candidate of op nd under rule instances (rd: data, degree d; rt: tensor, degree
 * t; rule -2 = none): false when a rule does not apply, the layouts do not infer, an output is
 * in copies or an input cannot be converted. */
static bool mx_eval(mx_state *s, const un_node *nd, int rd, int fd, int rt, int ft, mx_cand *c) {
    const un_spec *spec = un_graph_spec(s->g);
    for (int i = 0; i < nd->n_in; i++)
        c->in[i] = un_shape_logical(un_graph_shape(s->g, nd->in[i]));
    if (rd > -2 &&
        un_spec_rule_apply(NULL, spec, nd->op, nd->params, rd, fd, s->d, c->in, nd->n_in) != UN_OK)
        return false;
    if (rt > -2 &&
        un_spec_rule_apply(NULL, spec, nd->op, nd->params, rt, ft, s->t, c->in, nd->n_in) != UN_OK)
        return false;
    un_infer inf;
    if (un_spec_infer(NULL, spec, nd->op, nd->params, c->in, nd->n_in, NULL, &inf) != UN_OK)
        return false;
    if (rd > -2 && !batch_split(&inf, s->d) && rt == -2)
        return false;
    c->pieces = 1;
    for (int o = 0; o < inf.n_out; o++) {
        if (inf.out[o].copy != 1)
            return false;
        int64_t p = un_shape_npieces(&inf.out[o]);
        c->pieces = p > c->pieces ? p : c->pieces;
    }
    c->weight_elems = 0;
    c->unbatched = rd == -2;
    c->ops = 0;
    for (int i = 0; i < nd->n_in; i++) {
        un_ref dummy;
        if (mx_get(s, nd->in[i], &c->in[i], true, &dummy, &c->ops) != UN_OK)
            return false;
        if (un_graph_node(s->g, nd->in[i].node)->op == UN_OP_WEIGHT)
            c->weight_elems += un_shape_numel(&c->in[i]) /
                               (un_shape_npieces(&c->in[i]) / c->in[i].copy / c->in[i].sum);
    }
    return true;
}

/* The data rule instance of op nd: the first whose degree-d layouts split every output along the
 * batch only (rule -2 when none). */
static void mx_data_rule(mx_state *s, const un_node *nd, int *rule, int *fe) {
    const un_op_spec *os = un_spec_op(un_graph_spec(s->g), nd->op);
    int rank0 = nd->n_in ? un_graph_shape(s->g, nd->in[0])->rank : 0;
    *rule = -2;
    *fe = -1;
    for (int r = 0; r < os->n_rules && s->d > 1; r++)
        for (int f = os->rules[r].foreach >= 0 ? 0 : -1;
             f < (os->rules[r].foreach >= 0 ? rank0 : 0); f++) {
            mx_cand c;
            if (mx_eval(s, nd, r, f, -2, -1, &c)) {
                *rule = r;
                *fe = f;
                return;
            }
        }
}

/* ---- mixed placement: an op's pieces and the pieces it consumes on the same devices ---- */

/* The device of piece p of a tensor of layout s in a d x t plan: device i * t + j for data block
 * i (dim 0 split d ways, the most significant digit of the piece order) and tensor piece j within
 * it; p mod (d * t) when dim 0 is not split by the data degree. */
static int32_t mx_coord_device(const un_shape *s, int64_t p, int32_t d, int32_t t) {
    int64_t np = un_shape_npieces(s);
    if (d < 2 || s->rank < 1 || s->shard[0] % d != 0)
        return (int32_t)(p % ((int64_t)d * t));
    int64_t per = np / d;
    return (int32_t)((p / per) * t + (p % per) % t);
}

/* The first source piece of output piece p of parallel op nd (input layout si, output so): the
 * block that starts it, of the same sum and copy (replicate: the copied piece; reduce: the first
 * partial sum). The order of runtime/exec.c's transfers. */
static int64_t mx_first_source(const un_node *nd, const un_shape *si, const un_shape *so,
                               int64_t p) {
    int32_t blk[UN_MAX_DIMS], sum, copy;
    un_shape_piece_coords(so, p, blk, &sum, &copy);
    if (nd->op == UN_OP_REPLICATE)
        return un_shape_piece_index(si, blk, sum, copy / (so->copy / si->copy));
    if (nd->op == UN_OP_REDUCE)
        return un_shape_piece_index(si, blk, sum * (si->sum / so->sum), copy);
    for (int i = 0; i < so->rank; i++)
        blk[i] = (int32_t)(blk[i] * (so->dim[i] / so->shard[i]) / (si->dim[i] / si->shard[i]));
    return un_shape_piece_index(si, blk, sum, copy);
}

/* Sets node id's view to dev[np] when that is a view (the list repeats with a period of
 * distinct devices); false otherwise. */
static bool mx_set_view(un_graph *ng, int32_t id, int32_t *dev, int64_t np) {
    for (int64_t c = 1; c <= np; c++) {
        if (np % c != 0)
            continue;
        bool ok = true;
        for (int64_t p = c; p < np && ok; p++)
            ok = dev[p] == dev[p % c];
        for (int64_t a = 0; a < c && ok; a++)
            for (int64_t b = 0; b < a && ok; b++)
                ok = dev[a] != dev[b];
        if (ok) {
            un_graph_node_set_view(ng, id, (un_view){(int32_t)c, dev});
            return true;
        }
    }
    return false;
}

/* Places a d x t plan. Each regular op by its output's coordinates (mx_coord_device). Each other
 * piece (weights, parallel ops) either where the op tuple that first consumes it runs, or where
 * its first source piece is (what no regular op consumes: there): reduces and combines prefer
 * their sources (k - 1 of k pieces move), the rest their consumers (a weight piece is stored
 * where its op runs; a copy or a block is made where it is used). A list that is no view (two
 * pieces on one device) falls back to the other, then to the default. */
static void mx_place(un_graph *ng, int32_t d, int32_t t) {
    int32_t n = un_graph_node_count(ng);
    int32_t **use = un_xcalloc((size_t)n, sizeof *use); /* per node: device per piece of out 0 */
    for (int32_t id = 0; id < n; id++) {
        const un_node *nd = un_graph_node(ng, id);
        int64_t np = un_shape_npieces(&nd->inf.out[0]);
        use[id] = un_xmalloc((size_t)np * sizeof **use);
        for (int64_t p = 0; p < np; p++)
            use[id][p] = un_op_kind_of(nd->op) == UN_OPK_REGULAR
                             ? mx_coord_device(&nd->inf.out[0], p, d, t)
                             : -1;
    }
    for (int32_t id = 0; id < n; id++) { /* consumers: where each input piece is used */
        const un_node *nd = un_graph_node(ng, id);
        if (un_op_kind_of(nd->op) != UN_OPK_REGULAR)
            continue;
        const un_infer *inf = &nd->inf;
        int64_t ntup = 1;
        for (int j = 0; j < inf->n_uses; j++)
            ntup *= inf->uses[j].degree;
        int32_t u[UN_MAX_USES] = {0}, blk[UN_MAX_DIMS], sum, copy;
        for (int64_t q = 0; q < ntup; q++) {
            un_infer_piece(inf, u, true, 0, blk, &sum, &copy);
            int32_t at = use[id][un_shape_piece_index(&inf->out[0], blk, sum, copy)];
            for (int k = 0; k < nd->n_in; k++) {
                un_ref r = nd->in[k];
                un_op sop = un_graph_node(ng, r.node)->op;
                if (r.out != 0 || sop == UN_OP_INPUT || un_op_kind_of(sop) == UN_OPK_REGULAR)
                    continue;
                un_infer_piece(inf, u, false, k, blk, &sum, &copy);
                int64_t p = un_shape_piece_index(un_graph_shape(ng, r), blk, sum, copy);
                if (use[r.node][p] < 0)
                    use[r.node][p] = at;
            }
            for (int j = inf->n_uses - 1; j >= 0 && ++u[j] == inf->uses[j].degree; j--)
                u[j] = 0;
        }
    }
    for (int32_t id = 0; id < n; id++) { /* the views, in order: a source's is set first */
        const un_node *nd = un_graph_node(ng, id);
        const un_shape *so = &nd->inf.out[0];
        int64_t np = un_shape_npieces(so);
        if (nd->op == UN_OP_INPUT)
            continue;
        if (un_op_kind_of(nd->op) == UN_OPK_REGULAR) {
            mx_set_view(ng, id, use[id], np);
            continue;
        }
        int32_t *from = un_xmalloc((size_t)np * sizeof *from);
        int32_t src = un_op_kind_of(nd->op) == UN_OPK_PARALLEL ? nd->in[0].node : -1;
        for (int64_t p = 0; p < np; p++) {
            if (src >= 0 && un_graph_node(ng, src)->op != UN_OP_INPUT)
                from[p] = un_view_device(&un_graph_node(ng, src)->view,
                                         mx_first_source(nd, un_graph_shape(ng, nd->in[0]), so, p),
                                         d * t);
            else
                from[p] = mx_coord_device(so, p, d, t);
            if (use[id][p] < 0)
                use[id][p] = from[p];
        }
        bool sources_first = nd->op == UN_OP_REDUCE || nd->op == UN_OP_COMBINE;
        if (!mx_set_view(ng, id, sources_first ? from : use[id], np))
            mx_set_view(ng, id, sources_first ? use[id] : from, np);
        free(from);
    }
    for (int32_t id = 0; id < n; id++)
        free(use[id]);
    free(use);
}

un_status un_strategy_mixed(un_ctx *ctx, const un_graph *g, int data, int tensor, un_graph **out) {
    *out = NULL;
    if (data < 1 || tensor < 1 || (int64_t)data * tensor > UN_MAX_DEGREE)
        return un_ctx_error(ctx, UN_ERR_INVALID, "mixed parallelism: %d x %d devices", data,
                            tensor);
    const un_spec *spec = un_graph_spec(g);
    int32_t n = un_graph_node_count(g);
    mx_state s = {.ctx = ctx, .g = g, .ng = un_graph_new(spec), .d = data, .t = tensor};
    s.v = un_xcalloc((size_t)n * UN_MAX_OUTPUTS, sizeof *s.v);
    un_status st = UN_OK;
    for (int32_t id = 0; id < n && st == UN_OK; id++) {
        const un_node *nd = un_graph_node(g, id);
        int32_t nid;
        if (un_op_kind_of(nd->op) == UN_OPK_SOURCE) {
            const un_shape *sh = &nd->inf.out[0];
            if (!un_shape_is_trivial(sh)) {
                st = un_ctx_error(ctx, UN_ERR_INVALID,
                                  "mixed parallelism: '%s' already has a layout; it transforms "
                                  "a serial graph",
                                  nd->name ? nd->name : "?");
                break;
            }
            if (nd->op == UN_OP_INPUT && sh->rank > 0 && sh->dim[0] % data != 0) {
                st = un_ctx_error(ctx, UN_ERR_INVALID,
                                  "mixed parallelism over %d x %d devices: input '%s' has batch "
                                  "%lld, not a multiple of %d (choose --batch accordingly)",
                                  data, tensor, nd->name ? nd->name : "?", (long long)sh->dim[0],
                                  data);
                break;
            }
            st = un_graph_add(ctx, s.ng, nd->op, nd->params, NULL, 0, nd->name, &nid);
            mx_add(&s.v[id * UN_MAX_OUTPUTS], sh, (un_ref){nid, 0});
            continue;
        }
        if (un_op_kind_of(nd->op) != UN_OPK_REGULAR) {
            st = un_ctx_error(ctx, UN_ERR_INVALID,
                              "mixed parallelism: the graph has parallel op '%s'; it transforms "
                              "a serial graph",
                              nd->name ? nd->name : "?");
            break;
        }
        /* The best layout: the data rule (when one applies) and at most one tensor rule. */
        const un_op_spec *os = un_spec_op(spec, nd->op);
        int rd, fd, rank0 = nd->n_in ? un_graph_shape(g, nd->in[0])->rank : 0;
        mx_data_rule(&s, nd, &rd, &fd);
        mx_cand best, c;
        bool have = false;
        for (int withd = rd > -2 ? 1 : 0; withd >= 0; withd--)
            for (int rt = -2; rt < (tensor > 1 ? os->n_rules : -1); rt++)
                for (int ft = rt >= 0 && os->rules[rt].foreach >= 0 ? 0 : -1;
                     ft < (rt >= 0 && os->rules[rt].foreach >= 0 ? rank0 : 0); ft++)
                    if (mx_eval(&s, nd, withd ? rd : -2, fd, rt, ft, &c) &&
                        (!have || mx_better(&c, &best))) {
                        best = c;
                        have = true;
                    }
        if (!have) /* serial always infers */
            mx_eval(&s, nd, -2, -1, -2, -1, &best);
        un_ref ins[UN_MAX_INPUTS];
        int ops = 0;
        for (int i = 0; i < nd->n_in && st == UN_OK; i++)
            if ((st = mx_get(&s, nd->in[i], &best.in[i], false, &ins[i], &ops)) == UN_ERR_SHAPE)
                st = un_ctx_error(ctx, st, "mixed parallelism: no conversion for input %d of '%s'",
                                  i, nd->name ? nd->name : "?");
        if (st == UN_OK)
            st = un_graph_add(ctx, s.ng, nd->op, nd->params, ins, nd->n_in, nd->name, &nid);
        for (int o = 0; st == UN_OK && o < un_graph_node(s.ng, nid)->inf.n_out; o++) {
            const un_shape *os_ = &un_graph_node(s.ng, nid)->inf.out[o];
            mx_vers *v = &s.v[id * UN_MAX_OUTPUTS + o];
            if (os_->sum > 1) /* the base: its sums reduced, made when first needed */
                mx_add(v, os_, (un_ref){-1, 0});
            mx_add(v, os_, (un_ref){nid, o});
            if (os_->sum > 1)
                v->lay[0].sum = 1;
        }
    }
    int32_t no = un_graph_output_count(g);
    un_ref *outs = un_xcalloc((size_t)no + 1, sizeof *outs);
    for (int32_t i = 0; i < no && st == UN_OK; i++) { /* split along the batch at most */
        un_ref r = un_graph_output(g, i);
        mx_vers *v = &s.v[r.node * UN_MAX_OUTPUTS + r.out];
        un_shape want = un_shape_logical(&v->lay[0]);
        want.shard[0] = v->lay[0].shard[0] % data == 0 ? data : 1;
        int ops = 0;
        st = mx_get(&s, r, &want, false, &outs[i], &ops);
    }
    if (st == UN_OK && un_strategy_devices(s.ng) != (int64_t)data * tensor)
        st = un_ctx_error(ctx, UN_ERR_INVALID,
                          "mixed parallelism over %d x %d devices: no operator of the model can "
                          "be split %d x %d ways (the plan would use %lld devices)",
                          data, tensor, data, tensor, (long long)un_strategy_devices(s.ng));
    if (st == UN_OK)
        st = un_graph_set_outputs(ctx, s.ng, outs, no);
    if (st == UN_OK)
        mx_place(s.ng, data, tensor);
    free(outs);
    for (int64_t i = 0; i < (int64_t)n * UN_MAX_OUTPUTS; i++) {
        free(s.v[i].lay);
        free(s.v[i].ref);
    }
    free(s.v);
    if (st != UN_OK) {
        un_graph_free(s.ng);
        return st;
    }
    *out = s.ng;
    return UN_OK;
}

/* "mixed:DxT" into d and t (both >= 1); false when name is not of that form. */
static bool mixed_name(const char *name, int *d, int *t) {
    if (strncmp(name, "mixed:", 6) != 0)
        return false;
    char *end;
    long a = strtol(name + 6, &end, 10);
    if (end == name + 6 || *end != 'x' || a < 1 || a > UN_MAX_DEGREE)
        return false;
    const char *p = end + 1;
    long b = strtol(p, &end, 10);
    if (end == p || *end != '\0' || b < 1 || b > UN_MAX_DEGREE || p[0] == '+' || p[0] == '-' ||
        name[6] == '+' || name[6] == '-')
        return false;
    *d = (int)a;
    *t = (int)b;
    return true;
}

bool un_strategy_is_plan_file(const char *name) {
    size_t sl = name ? strlen(name) : 0;
    return sl >= 5 && strcmp(name + sl - 5, ".json") == 0;
}

un_status un_strategy_named(un_ctx *ctx, const un_spec *spec, const un_graph *g, const char *name,
                            int devices, un_graph **out) {
    *out = NULL;
    if (strcmp(name, "serial") == 0) {
        *out = un_graph_clone(g);
        return UN_OK;
    }
    if (strcmp(name, "data") == 0)
        return un_strategy_data(ctx, g, devices, out);
    if (strcmp(name, "tensor") == 0)
        return un_strategy_tensor(ctx, g, devices, out);
    int d, t;
    if (mixed_name(name, &d, &t)) {
        if ((int64_t)d * t != devices)
            return un_ctx_error(ctx, UN_ERR_MISMATCH,
                                "--strategy %s runs on %lld devices, but --devices is %d", name,
                                (long long)d * t, devices);
        return un_strategy_mixed(ctx, g, d, t, out);
    }
    if (strncmp(name, "mixed", 5) == 0)
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "--strategy: '%s' is not mixed:DxT (data x tensor degrees, e.g. "
                            "mixed:2x2)",
                            name);
    if (!un_strategy_is_plan_file(name))
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "--strategy: '%s' is not serial, data, tensor, mixed:DxT or a plan "
                            "file (.json)",
                            name);
    return un_strategy_plan_load(ctx, spec, name, g, devices, out);
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
            for (int32_t k = 0; k < nd->view.count; k++)
                most = nd->view.dev[k] + 1 > most ? nd->view.dev[k] + 1 : most;
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
    char why[300];
    if (!un_graph_views_valid(plan, devices, why, sizeof why)) {
        st = un_ctx_error(ctx, UN_ERR_INVALID, "%s: %s", path, why);
        goto done;
    }
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
