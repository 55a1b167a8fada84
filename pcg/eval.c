/* eval.c - the reference evaluator's machinery: parallel tensor values, gather/scatter, the
 * piece movement of the parallel operators, per-device execution of regular operators under
 * their applied sharding rules, and whole-graph evaluation. Kernels are in kernels.c. */
#include "pcg/eval.h"

#include <stdlib.h>
#include <string.h>

#include "pcg/kernels.h"

/* ---- parallel tensor values ---- */

static un_status check_size(un_ctx *ctx, const un_shape *shape) {
    int64_t n = un_shape_piece_numel(shape) * un_shape_npieces(shape);
    if (n <= UN_EVAL_MAX_VALUES)
        return UN_OK;
    char sb[96];
    un_shape_str(shape, sb, sizeof sb);
    return un_ctx_error(ctx, UN_ERR_LIMIT, "reference evaluator: %s holds %lld values (limit %lld)",
                        sb, (long long)n, (long long)UN_EVAL_MAX_VALUES);
}

un_status un_ptensor_init(un_ctx *ctx, un_ptensor *t, const un_shape *shape) {
    t->shape = *shape;
    t->data = NULL;
    un_status st = check_size(ctx, shape);
    if (st != UN_OK)
        return st;
    int64_t n = un_shape_piece_numel(shape) * un_shape_npieces(shape);
    t->data = un_ctx_calloc(ctx, (size_t)(n ? n : 1), sizeof(un_val));
    if (!t->data)
        return un_ctx_error(ctx, UN_ERR_NOMEM, "cannot allocate %lld values", (long long)n);
    return UN_OK;
}

void un_ptensor_deinit(un_ptensor *t) {
    free(t->data);
    t->data = NULL;
}

un_val *un_ptensor_piece(const un_ptensor *t, const int32_t *block, int32_t sum, int32_t copy) {
    return t->data +
           un_shape_piece_index(&t->shape, block, sum, copy) * un_shape_piece_numel(&t->shape);
}

/* Visits every piece: block indices, sum and copy index. */
typedef struct {
    int32_t block[UN_MAX_DIMS];
    int32_t sum, copy;
} piece_pos;

static bool piece_next(const un_shape *s, piece_pos *p) {
    if (++p->copy < s->copy)
        return true;
    p->copy = 0;
    if (++p->sum < s->sum)
        return true;
    p->sum = 0;
    for (int i = s->rank - 1; i >= 0; i--) {
        if (++p->block[i] < s->shard[i])
            return true;
        p->block[i] = 0;
    }
    return false;
}

/* Linear index in the logical dense tensor of local element `x` (row-major local index) of a piece.
 */
static int64_t global_index(const un_shape *s, const int32_t *block, int64_t x) {
    int64_t local[UN_MAX_DIMS], coord[UN_MAX_DIMS];
    for (int i = s->rank - 1; i >= 0; i--) {
        int64_t ld = s->dim[i] / s->shard[i];
        local[i] = x % ld;
        x /= ld;
    }
    int64_t g = 0;
    for (int i = 0; i < s->rank; i++) {
        coord[i] = (int64_t)block[i] * (s->dim[i] / s->shard[i]) + local[i];
        g = g * s->dim[i] + coord[i];
    }
    return g;
}

un_status un_ptensor_gather(un_ctx *ctx, const un_ptensor *t, un_dom dom, un_val *dense) {
    const un_shape *s = &t->shape;
    int64_t n = un_shape_numel(s), pn = un_shape_piece_numel(s);
    for (int64_t i = 0; i < n; i++)
        dense[i] = un_num_zero(dom);
    piece_pos p;
    memset(&p, 0, sizeof p);
    do {
        const un_val *src = un_ptensor_piece(t, p.block, p.sum, p.copy);
        if (p.copy == 0) {
            /* the local elements in row-major order, their logical offsets by an odometer */
            int64_t ld[UN_MAX_DIMS], stride[UN_MAX_DIMS], loc[UN_MAX_DIMS], g = 0, st = 1;
            for (int i = s->rank - 1; i >= 0; i--) {
                ld[i] = s->dim[i] / s->shard[i];
                stride[i] = st;
                st *= s->dim[i];
                loc[i] = 0;
                g += (int64_t)p.block[i] * ld[i] * stride[i];
            }
            for (int64_t x = 0; x < pn; x++) {
                dense[g] = un_num_add(dom, dense[g], src[x]);
                for (int i = s->rank - 1; i >= 0; i--) {
                    if (++loc[i] < ld[i]) {
                        g += stride[i];
                        break;
                    }
                    g -= (ld[i] - 1) * stride[i];
                    loc[i] = 0;
                }
            }
        } else {
            const un_val *first = un_ptensor_piece(t, p.block, p.sum, 0);
            for (int64_t x = 0; x < pn; x++)
                if (!un_num_eq(dom, first[x], src[x]))
                    return un_ctx_error(ctx, UN_ERR_MISMATCH,
                                        "copy %d of a piece differs from copy 0 at element %lld",
                                        p.copy, (long long)x);
        }
    } while (piece_next(s, &p));
    return UN_OK;
}

un_status un_ptensor_scatter(un_ctx *ctx, un_ptensor *t, un_dom dom, const un_val *dense,
                             un_rng *rng) {
    (void)ctx;
    const un_shape *s = &t->shape;
    int64_t pn = un_shape_piece_numel(s);
    piece_pos p;
    memset(&p, 0, sizeof p);
    do {
        un_val *dst = un_ptensor_piece(t, p.block, p.sum, p.copy);
        if (p.copy > 0) {
            memcpy(dst, un_ptensor_piece(t, p.block, p.sum, 0), sizeof(un_val) * (size_t)pn);
        } else if (p.sum + 1 < s->sum) {
            un_ptensor_random_dense(dom, UN_DT_FLOAT, 0, pn, rng, dst);
        } else {
            for (int64_t x = 0; x < pn; x++) {
                un_val v = dense[global_index(s, p.block, x)];
                for (int32_t o = 0; o < p.sum; o++)
                    v = un_num_sub(dom, v, un_ptensor_piece(t, p.block, o, 0)[x]);
                dst[x] = v;
            }
        }
    } while (piece_next(s, &p));
    return UN_OK;
}

void un_ptensor_random_dense(un_dom dom, un_dtype dtype, int64_t range, int64_t n, un_rng *rng,
                             un_val *out) {
    for (int64_t i = 0; i < n; i++) {
        if (dtype == UN_DT_INT)
            out[i] =
                un_num_from_int(dom, (int64_t)un_rng_below(rng, (uint64_t)(range > 0 ? range : 1)));
        else if (dom == UN_DOM_FIELD)
            out[i].u = un_rng_below(rng, UN_P);
        else
            out[i].f = 2.0 * un_rng_double(rng) - 1.0;
    }
}

bool un_dense_equal(un_dom dom, const un_val *a, const un_val *b, int64_t n, double tol,
                    int64_t *where) {
    for (int64_t i = 0; i < n; i++) {
        bool eq = dom == UN_DOM_FIELD ? a[i].u == b[i].u
                                      : fabs(a[i].f - b[i].f) <= tol * (1.0 + fabs(b[i].f));
        if (!eq) {
            if (where)
                *where = i;
            return false;
        }
    }
    return true;
}

/* ---- parallel operators ---- */

/* partition and combine: every output element reads the input piece that holds it. */
static void move_blocks(const un_ptensor *in, un_ptensor *out) {
    const un_shape *si = &in->shape, *so = &out->shape;
    int64_t pn = un_shape_piece_numel(so);
    piece_pos p;
    memset(&p, 0, sizeof p);
    do {
        un_val *dst = un_ptensor_piece(out, p.block, p.sum, p.copy);
        for (int64_t x = 0; x < pn; x++) {
            int64_t rest = x, coord[UN_MAX_DIMS];
            for (int i = so->rank - 1; i >= 0; i--) {
                int64_t ld = so->dim[i] / so->shard[i];
                coord[i] = (int64_t)p.block[i] * ld + rest % ld;
                rest /= ld;
            }
            int32_t blk[UN_MAX_DIMS];
            int64_t li = 0;
            for (int i = 0; i < si->rank; i++) {
                int64_t ld = si->dim[i] / si->shard[i];
                blk[i] = (int32_t)(coord[i] / ld);
                li = li * ld + coord[i] % ld;
            }
            dst[x] = un_ptensor_piece(in, blk, p.sum, p.copy)[li];
        }
    } while (piece_next(so, &p));
}

static void eval_parallel(un_op op, un_dom dom, int64_t k, const un_ptensor *in, un_ptensor *out) {
    const un_shape *so = &out->shape;
    int64_t pn = un_shape_piece_numel(so);
    if (op == UN_OP_PARTITION || op == UN_OP_COMBINE) {
        move_blocks(in, out);
        return;
    }
    piece_pos p;
    memset(&p, 0, sizeof p);
    do {
        un_val *dst = un_ptensor_piece(out, p.block, p.sum, p.copy);
        if (op == UN_OP_REPLICATE) {
            memcpy(dst, un_ptensor_piece(in, p.block, p.sum, (int32_t)(p.copy / k)),
                   sizeof(un_val) * (size_t)pn);
        } else { /* reduce: sum groups of k consecutive partial pieces */
            for (int64_t t = 0; t < k; t++) {
                const un_val *src = un_ptensor_piece(in, p.block, (int32_t)(p.sum * k + t), p.copy);
                for (int64_t x = 0; x < pn; x++)
                    dst[x] = un_num_add(dom, dst[x], src[x]);
            }
        }
    } while (piece_next(so, &p));
}

/* ---- regular operators: one kernel call per device ---- */

static void make_block(const un_shape *s, const int32_t *blk, un_val *data, un_block *b) {
    memset(b, 0, sizeof *b);
    b->rank = s->rank;
    b->dtype = s->dtype;
    for (int i = 0; i < s->rank; i++) {
        b->dim[i] = s->dim[i] / s->shard[i];
        b->off[i] = (int64_t)blk[i] * b->dim[i];
        b->full[i] = s->dim[i];
    }
    b->data = data;
}

un_status un_eval_op(un_ctx *ctx, const un_spec *spec, un_op op, const un_param *params,
                     const un_infer *inf, un_dom dom, const un_ptensor *in, int n_in,
                     un_ptensor *out) {
    un_status st = UN_OK;
    int n_done = 0;
    for (int o = 0; o < inf->n_out; o++) {
        if ((st = un_ptensor_init(ctx, &out[o], &inf->out[o])) != UN_OK)
            goto fail;
        n_done++;
    }
    if (un_op_kind_of(op) == UN_OPK_PARALLEL) {
        const un_op_spec *os = un_spec_op(spec, op);
        int64_t k = params[un_spec_param_index(os, "degree")].v[0];
        eval_parallel(op, dom, k, &in[0], &out[0]);
        return UN_OK;
    }
    UN_ASSERT(un_op_kind_of(op) == UN_OPK_REGULAR);
    int32_t u[UN_MAX_USES];
    memset(u, 0, sizeof u);
    un_block ib[UN_MAX_INPUTS], ob[UN_MAX_OUTPUTS];
    un_kargs a = {.dom = dom,
                  .op = op,
                  .spec = un_spec_op(spec, op),
                  .params = inf->local,
                  .salt = un_hash_bytes(un_op_name(op), strlen(un_op_name(op)), 0x5eed),
                  .n_in = n_in,
                  .in = ib,
                  .n_out = inf->n_out,
                  .out = ob}; /* regular ops read inf->local: params after rule rewrites */
    for (;;) {
        int32_t blk[UN_MAX_DIMS], sum, copy;
        for (int t = 0; t < n_in; t++) {
            un_infer_piece(inf, u, false, t, blk, &sum, &copy);
            make_block(&in[t].shape, blk, un_ptensor_piece(&in[t], blk, sum, copy), &ib[t]);
        }
        for (int o = 0; o < inf->n_out; o++) {
            un_infer_piece(inf, u, true, o, blk, &sum, &copy);
            make_block(&out[o].shape, blk, un_ptensor_piece(&out[o], blk, sum, copy), &ob[o]);
        }
        if ((st = un__kernel_run(ctx, &a)) != UN_OK)
            goto fail;
        int j = inf->n_uses - 1;
        while (j >= 0 && ++u[j] == inf->uses[j].degree)
            u[j--] = 0;
        if (j < 0)
            break;
    }
    return UN_OK;
fail:
    for (int o = 0; o < n_done; o++)
        un_ptensor_deinit(&out[o]);
    return st;
}

/* ---- whole graphs ---- */

struct un_eval {
    un_ctx *ctx;
    const un_graph *g;
    un_dom dom;
    int32_t n;
    un_ptensor **vals; /* per node, inf.n_out values */
    bool *set;
};

un_status un_eval_new(un_ctx *ctx, const un_graph *g, un_dom dom, un_eval **out) {
    *out = NULL;
    for (int32_t i = 0; i < un_graph_node_count(g); i++) {
        const un_node *nd = un_graph_node(g, i);
        for (int o = 0; o < nd->inf.n_out; o++) {
            un_status st = check_size(ctx, &nd->inf.out[o]);
            if (st != UN_OK)
                return st;
        }
    }
    un_eval *ev = un_xcalloc(1, sizeof *ev);
    ev->ctx = ctx;
    ev->g = g;
    ev->dom = dom;
    ev->n = un_graph_node_count(g);
    ev->vals = un_xcalloc((size_t)(ev->n ? ev->n : 1), sizeof *ev->vals);
    ev->set = un_xcalloc((size_t)(ev->n ? ev->n : 1), sizeof *ev->set);
    *out = ev;
    return UN_OK;
}

static void free_node_vals(un_eval *ev, int32_t id) {
    if (!ev->vals[id])
        return;
    const un_node *nd = un_graph_node(ev->g, id);
    for (int o = 0; o < nd->inf.n_out; o++)
        un_ptensor_deinit(&ev->vals[id][o]);
    free(ev->vals[id]);
    ev->vals[id] = NULL;
}

void un_eval_free(un_eval *ev) {
    if (!ev)
        return;
    for (int32_t i = 0; i < ev->n; i++)
        free_node_vals(ev, i);
    free(ev->vals);
    free(ev->set);
    free(ev);
}

un_status un_eval_set(un_eval *ev, int32_t node, const un_val *dense) {
    const un_node *nd = un_graph_node(ev->g, node);
    if (un_op_kind_of(nd->op) != UN_OPK_SOURCE)
        return un_ctx_error(ev->ctx, UN_ERR_INVALID, "node %d (%s) is not an input or weight", node,
                            un_op_name(nd->op));
    free_node_vals(ev, node);
    ev->vals[node] = un_xcalloc(1, sizeof(un_ptensor));
    un_status st = un_ptensor_init(ev->ctx, ev->vals[node], &nd->inf.out[0]);
    if (st != UN_OK) {
        free(ev->vals[node]);
        ev->vals[node] = NULL;
        return st;
    }
    /* Into the node's layout: blocks placed, copies filled, partial sums drawn at random (from
     * the node id, so runs repeat) that add up to the value. */
    un_rng rng;
    un_rng_seed(&rng, un_hash_combine(0x736574u, (uint64_t)node));
    st = un_ptensor_scatter(ev->ctx, ev->vals[node], ev->dom, dense, &rng);
    if (st != UN_OK) {
        free_node_vals(ev, node);
        return st;
    }
    ev->set[node] = true;
    return UN_OK;
}

un_status un_eval_fill_random(un_eval *ev, uint64_t seed) {
    const un_spec *spec = un_graph_spec(ev->g);
    for (int32_t i = 0; i < ev->n; i++) {
        const un_node *nd = un_graph_node(ev->g, i);
        if (un_op_kind_of(nd->op) != UN_OPK_SOURCE || ev->set[i])
            continue;
        int pr = un_spec_param_index(un_spec_op(spec, nd->op), "range");
        int64_t range = pr >= 0 ? nd->params[pr].v[0] : 0;
        int64_t n = un_shape_numel(&nd->inf.out[0]);
        un_val *v = un_ctx_malloc(ev->ctx, sizeof(un_val) * (size_t)(n ? n : 1));
        if (!v)
            return un_ctx_error(ev->ctx, UN_ERR_NOMEM, "cannot allocate %lld values", (long long)n);
        /* named sources draw from their name, so graphs sharing input names get equal inputs */
        uint64_t s = nd->name ? un_hash_bytes(nd->name, strlen(nd->name), seed)
                              : un_hash_combine(seed, (uint64_t)i);
        un_rng rng;
        un_rng_seed(&rng, s);
        un_ptensor_random_dense(ev->dom, nd->inf.out[0].dtype, range, n, &rng, v);
        un_status st = un_eval_set(ev, i, v);
        un_ctx_free_mem(ev->ctx, v);
        if (st != UN_OK)
            return st;
    }
    return UN_OK;
}

un_status un_eval_run(un_eval *ev) {
    const un_spec *spec = un_graph_spec(ev->g);
    for (int32_t k = 0; k < ev->n; k++) {
        int32_t id = k;
        const un_node *nd = un_graph_node(ev->g, id);
        if (un_op_kind_of(nd->op) == UN_OPK_SOURCE) {
            if (!ev->vals[id])
                return un_ctx_error(ev->ctx, UN_ERR_INVALID, "input node %d (%s) has no value", id,
                                    nd->name ? nd->name : "?");
            continue;
        }
        free_node_vals(ev, id);
        un_ptensor in[UN_MAX_INPUTS];
        for (int t = 0; t < nd->n_in; t++)
            in[t] = ev->vals[nd->in[t].node][nd->in[t].out];
        un_ptensor *out = un_xcalloc((size_t)nd->inf.n_out, sizeof *out);
        un_status st =
            un_eval_op(ev->ctx, spec, nd->op, nd->params, &nd->inf, ev->dom, in, nd->n_in, out);
        if (st != UN_OK) {
            free(out);
            return st;
        }
        ev->vals[id] = out;
    }
    return UN_OK;
}

const un_ptensor *un_eval_value(const un_eval *ev, un_ref r) {
    UN_ASSERT(r.node >= 0 && r.node < ev->n && ev->vals[r.node]);
    return &ev->vals[r.node][r.out];
}

static un_status run_seeded(un_ctx *ctx, const un_graph *g, un_dom dom, uint64_t seed,
                            un_eval **out) {
    un_status st = un_eval_new(ctx, g, dom, out);
    if (st == UN_OK)
        st = un_eval_fill_random(*out, seed);
    if (st == UN_OK)
        st = un_eval_run(*out);
    return st;
}

un_status un_eval_compare(un_ctx *ctx, const un_graph *a, const un_graph *b, un_dom dom,
                          uint64_t seed, double tol, double *max_err) {
    *max_err = 0;
    un_status st = UN_OK;
    un_eval *ea = NULL, *eb = NULL;
    un_val *va = NULL, *vb = NULL;
    for (int32_t i = 0; i < un_graph_node_count(b); i++) {
        const un_node *nd = un_graph_node(b, i);
        if (un_op_kind_of(nd->op) != UN_OPK_SOURCE)
            continue;
        int32_t j = nd->name ? un_graph_find(a, nd->name) : -1;
        if (j < 0 || !un_shape_same_dims(&un_graph_node(a, j)->inf.out[0], &nd->inf.out[0])) {
            st = un_ctx_error(
                ctx, UN_ERR_INVALID,
                "input '%s' of the second graph has no namesake of the same shape in the first",
                nd->name ? nd->name : "(unnamed)");
            goto done;
        }
    }
    if (un_graph_output_count(a) != un_graph_output_count(b)) {
        st = un_ctx_error(ctx, UN_ERR_INVALID, "the graphs have %d and %d outputs",
                          un_graph_output_count(a), un_graph_output_count(b));
        goto done;
    }
    if ((st = run_seeded(ctx, a, dom, seed, &ea)) != UN_OK)
        goto done;
    if ((st = run_seeded(ctx, b, dom, seed, &eb)) != UN_OK)
        goto done;
    for (int32_t o = 0; o < un_graph_output_count(a); o++) {
        const un_ptensor *ta = un_eval_value(ea, un_graph_output(a, o)),
                         *tb = un_eval_value(eb, un_graph_output(b, o));
        if (!un_shape_same_dims(&ta->shape, &tb->shape)) {
            char sa[96], sb[96];
            un_shape_str(&ta->shape, sa, sizeof sa);
            un_shape_str(&tb->shape, sb, sizeof sb);
            st =
                un_ctx_error(ctx, UN_ERR_MISMATCH, "output %d: shapes %s and %s differ", o, sa, sb);
            goto done;
        }
        int64_t n = un_shape_numel(&ta->shape);
        va = un_xrealloc(va, sizeof(un_val) * (size_t)(n ? n : 1));
        vb = un_xrealloc(vb, sizeof(un_val) * (size_t)(n ? n : 1));
        if ((st = un_ptensor_gather(ctx, ta, dom, va)) != UN_OK)
            goto done;
        if ((st = un_ptensor_gather(ctx, tb, dom, vb)) != UN_OK)
            goto done;
        for (int64_t x = 0; x < n; x++) {
            double d = dom == UN_DOM_FIELD ? (va[x].u != vb[x].u) : fabs(va[x].f - vb[x].f);
            if (d > *max_err)
                *max_err = d;
            if (dom == UN_DOM_FIELD ? d != 0 : d > tol * (1.0 + fabs(vb[x].f))) {
                st = un_ctx_error(ctx, UN_ERR_MISMATCH, "output %d differs at element %lld", o,
                                  (long long)x);
                goto done;
            }
        }
    }
done:
    free(va);
    free(vb);
    un_eval_free(ea);
    un_eval_free(eb);
    return st;
}
