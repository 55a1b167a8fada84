/* mapping.c - layer 3: configurations, their costs, variable elimination over the frontier, the
 * exhaustive reference and the plan graph (search/mapping.h). */
#include "search/mapping.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/sp.h"

#define MAX_COMBOS 200000 /* input-layout assignments tried per node and degree */

/* An edge from a regular producer's output to a regular consumer's input: the conversion's
 * time and memory for every pair of their configurations. */
typedef struct map_edge {
    int32_t from, to;   /* nodes */
    int32_t out, in;    /* producer output, consumer input slot */
    double *time, *mem; /* [n_cfg(from) * n_cfg(to)] */
} map_edge;

struct un_map {
    un_ctx *ctx;
    un_cost_model *cm;
    const un_graph *g;
    const un_spec *spec;
    un_map_params p;
    int32_t n;
    int eb;           /* element bytes */
    int state_copies; /* optimizer state copies of a weight */
    int32_t *cfg_at;  /* [n + 1] configurations of node v: cfg[cfg_at[v] .. cfg_at[v + 1]) */
    un_map_config *cfg;
    double *unary_time, *unary_mem; /* per configuration: + conversions from sources, outputs */
    map_edge *edges;
    int32_t n_edges;
    int32_t *edge_at;  /* [n + 1] edges into node v: edges[edge_at[v] .. edge_at[v + 1]) */
    int32_t *last_use; /* [n] the last regular consumer of a regular node (itself if none) */
    int32_t n_cuts;
    double base_mem; /* data inputs, whole on device 0 */
};

un_map_params un_map_params_default(int devices) {
    return (un_map_params){.devices = devices, .max_states = 4096, .optimizer = "adam"};
}

static bool is_regular(const un_graph *g, int32_t v) {
    return un_op_kind_of(un_graph_node(g, v)->op) == UN_OPK_REGULAR;
}

static double piece_bytes(const un_map *m, const un_shape *s) {
    return (double)un_shape_piece_numel(s) * (s->dtype == UN_DT_FLOAT ? m->eb : 4);
}

/* An all-reduce of `bytes` over devices 0 .. k-1. */
static double group_allreduce(const un_map *m, int k, double bytes) {
    int devs[1024];
    int n = k < 1024 ? k : 1024;
    for (int i = 0; i < n; i++)
        devs[i] = i;
    return un_cost_allreduce(m->cm, devs, n, bytes);
}

/* ---- conversions between layouts ---- */

/* The steps that turn layout `from` (no copies) into `to` (no sums): reduce the sums, combine
 * or partition each dim, then replicate. Calls step(op, dim, degree, after) for each; returns
 * false when `to` cannot be reached. */
typedef void (*conv_step)(void *u, un_op op, int dim, int degree, const un_shape *after);

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int64_t smallest_factor(int64_t n) {
    for (int64_t f = 2; f * f <= n; f++)
        if (n % f == 0)
            return f;
    return n;
}

/* Greedy, with at most maxp pieces on the way: partition whenever a needed split fits (pieces
 * get smaller first), else combine one dim by its smallest factor; so a switch of the split dim
 * (batch -> channels) goes through pieces of whole/k rather than through the whole tensor on
 * one device whenever k * k <= maxp. */
static bool conv_walk(const un_shape *from, const un_shape *to, int64_t maxp, conv_step step,
                      void *u) {
    if (un_shape_eq(from, to))
        return true;
    if (from->copy != 1 || to->sum != 1)
        return false;
    un_shape cur = *from;
    if (cur.sum > 1) {
        int k = cur.sum;
        cur.sum = 1;
        step(u, UN_OP_REDUCE, 0, k, &cur);
    }
    for (int guard = 0; guard < 64; guard++) {
        bool same = true;
        for (int i = 0; i < cur.rank; i++)
            same &= cur.shard[i] == to->shard[i];
        if (same)
            break;
        int64_t pieces = un_shape_npieces(&cur);
        int best_dim = -1;
        int64_t best_f = 1;
        for (int i = 0; i < cur.rank; i++) {
            if (cur.shard[i] == to->shard[i] || to->shard[i] % cur.shard[i] != 0)
                continue;
            int64_t r = to->shard[i] / cur.shard[i];
            for (int64_t f = r; f > 1; f--)
                if (r % f == 0 && pieces * f <= maxp && f > best_f) {
                    best_f = f;
                    best_dim = i;
                    break;
                }
        }
        if (best_dim >= 0) {
            cur.shard[best_dim] *= (int32_t)best_f;
            step(u, UN_OP_PARTITION, best_dim, (int)best_f, &cur);
            continue;
        }
        int cdim = -1;
        for (int i = 0; i < cur.rank && cdim < 0; i++)
            if (to->shard[i] % cur.shard[i] != 0)
                cdim = i;
        if (cdim < 0)
            return false; /* only splits left, none fits: the target has too many pieces */
        int64_t f = smallest_factor(cur.shard[cdim] / gcd64(cur.shard[cdim], to->shard[cdim]));
        cur.shard[cdim] /= (int32_t)f;
        step(u, UN_OP_COMBINE, cdim, (int)f, &cur);
    }
    if (to->copy > 1) {
        int k = to->copy;
        cur.copy = k;
        step(u, UN_OP_REPLICATE, 0, k, &cur);
    }
    return true;
}

typedef struct conv_cost {
    const un_map *m;
    un_shape prev;
    double time, mem;
    bool local; /* from a data input: every rank has the whole value, moving is a copy */
} conv_cost;

static void cost_step(void *u, un_op op, int dim, int k, const un_shape *after) {
    (void)dim;
    conv_cost *c = u;
    const un_map *m = c->m;
    double before = piece_bytes(m, &c->prev), b = piece_bytes(m, after);
    int last = k - 1 < m->p.devices ? k - 1 : m->p.devices - 1;
    if (c->local) {
        c->time += un_cost_copy(m->cm, b);
    } else if (op == UN_OP_REDUCE) {
        c->time += group_allreduce(m, k, before) + un_cost_p2p(m->cm, 0, last, b);
    } else if (op == UN_OP_COMBINE || op == UN_OP_PARTITION) {
        double moved = (op == UN_OP_COMBINE ? before : b) * (k - 1);
        c->time += 2 * un_cost_p2p(m->cm, 0, last, moved);
    } else { /* replicate: a broadcast forward, an all-reduce of the copies' gradients back */
        c->time +=
            ceil(log2((double)k)) * un_cost_p2p(m->cm, 0, last, b) + group_allreduce(m, k, b);
    }
    c->mem += 2 * b;
    /* transfer buffers on device 0 (as the simulator keeps them): what it receives, twice
     * (the piece and its gradient), and what it sends */
    if (!c->local && (op == UN_OP_COMBINE || op == UN_OP_REDUCE))
        c->mem += 2 * (k - 1) * before;
    else if (!c->local)
        c->mem += (k - 1) * b;
    c->prev = *after;
}

static bool conv_price(const un_map *m, const un_shape *from, const un_shape *to, bool local,
                       double *time, double *mem) {
    conv_cost c = {.m = m, .prev = *from, .local = local};
    bool ok = conv_walk(from, to, m->p.devices, cost_step, &c);
    *time = c.time;
    *mem = c.mem;
    return ok;
}

/* Whether the loss can read this layout as a graph output: no sums or copies, split on the batch
 * (dim 0) at most. */
static bool loss_readable(const un_shape *s) {
    if (s->sum != 1 || s->copy != 1)
        return false;
    for (int i = 1; i < s->rank; i++)
        if (s->shard[i] != 1)
            return false;
    return true;
}

static un_shape loss_layout(const un_shape *s) {
    un_shape t = un_shape_logical(s);
    if (s->sum == 1 && s->copy == 1)
        t.shard[0] = s->shard[0];
    return t;
}

/* ---- configurations ---- */

typedef struct cfg_list {
    un_map_config *v;
    int32_t n, cap;
} cfg_list;

static void cfg_push(cfg_list *l, const un_map_config *c) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->v = un_xrealloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = *c;
}

static void cfg_name(const un_spec *spec, un_op op, const un_infer *inf, int degree, char *buf,
                     size_t n) {
    if (degree == 1) {
        snprintf(buf, n, "serial");
        return;
    }
    const un_op_spec *os = un_spec_op(spec, op);
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < inf->n_uses && at + 1 < n; i++) {
        const un_rule_use *u = &inf->uses[i];
        const char *rn = u->rule >= 0 ? os->rules[u->rule].name : "copy";
        int w = u->foreach >= 0
                    ? snprintf(buf + at, n - at, "%s%s(%d)", i ? "+" : "", rn, (int)u->foreach)
                    : snprintf(buf + at, n - at, "%s%s", i ? "+" : "", rn);
        at += w > 0 ? (size_t)w : 0;
    }
    if (at + 1 < n)
        snprintf(buf + at, n - at, "/%d", degree);
}

/* Adds the configuration of node nd with input layouts try on d devices, when the op's rules
 * accept it with d device tuples and an output without copies. */
static un_status try_config(un_map *m, const un_node *nd, const un_shape *try, const bool *weight,
                            int d, cfg_list *out) {
    un_infer inf;
    if (un_spec_infer(NULL, m->spec, nd->op, nd->params, try, nd->n_in, NULL, &inf) != UN_OK)
        return UN_OK;
    bool copies = false;
    for (int o = 0; o < inf.n_out; o++)
        copies |= inf.out[o].copy != 1;
    if (copies && d > 1)
        return UN_OK;   /* nothing can remove copies: every piece would run d times */
    int64_t tuples = 1; /* device tuples: the rules' degrees multiply */
    for (int i = 0; i < inf.n_uses; i++)
        tuples *= inf.uses[i].degree;
    if (tuples != d)
        return UN_OK;
    un_map_config k;
    memset(&k, 0, sizeof k);
    k.degree = d;
    memcpy(k.in, try, sizeof(un_shape) * (size_t)nd->n_in);
    k.n_out = inf.n_out;
    memcpy(k.out, inf.out, sizeof(un_shape) * (size_t)inf.n_out);
    cfg_name(m->spec, nd->op, &inf, d, k.name, sizeof k.name);
    un_shape pieces[UN_MAX_INPUTS];
    for (int t = 0; t < nd->n_in; t++) {
        int64_t dims[UN_MAX_DIMS];
        un_shape_piece_dims(&try[t], dims);
        pieces[t] = un_shape_make(try[t].rank, dims, try[t].dtype);
    }
    /* a piece whose own shapes the op's requirements refuse (e.g. attention split by
     * heads, where the per-piece op is not the op on piece shapes) costs 1/d of the
     * whole op */
    un_op_cost oc;
    un_ctx *scratch = un_ctx_new_child(m->ctx);
    un_status st = un_cost_piece(scratch, m->cm, nd->op, inf.local, pieces, nd->n_in, &oc);
    un_ctx_free(scratch);
    if (st != UN_OK) {
        un_shape in[UN_MAX_INPUTS];
        for (int t = 0; t < nd->n_in; t++)
            in[t] = un_shape_logical(&try[t]);
        st = un_cost_piece(m->ctx, m->cm, nd->op, nd->params, in, nd->n_in, &oc);
        if (st != UN_OK)
            return st;
        oc.fwd /= d;
        oc.bwd /= d;
    }
    k.time = oc.fwd + oc.bwd;
    for (int t = 0; t < nd->n_in; t++) {
        if (!weight[t])
            continue;
        double b = piece_bytes(m, &try[t]);
        k.mem += b * (2 + m->state_copies);
        /* every device updates the weight pieces it holds */
        k.time += un_cost_optimizer(m->ctx, m->cm, m->p.optimizer ? m->p.optimizer : "adam",
                                    un_shape_piece_numel(&try[t]));
        if (try[t].copy > 1)
            k.time += group_allreduce(m, try[t].copy, b);
    }
    for (int o = 0; o < inf.n_out; o++)
        k.mem += 2 * piece_bytes(m, &inf.out[o]);
    cfg_push(out, &k);
    return UN_OK;
}

/* One node's configurations: tries every input-layout assignment of each degree. */
static un_status node_configs(un_map *m, int32_t v, cfg_list *out) {
    const un_node *nd = un_graph_node(m->g, v);
    un_shape in[UN_MAX_INPUTS];
    bool weight[UN_MAX_INPUTS];
    for (int t = 0; t < nd->n_in; t++) {
        const un_shape *s = un_graph_shape(m->g, nd->in[t]);
        if (!un_shape_is_trivial(s))
            return un_ctx_error(m->ctx, UN_ERR_INVALID,
                                "mapping: node '%s' reads a parallel tensor; the search maps "
                                "serial graphs (without parallel ops)",
                                nd->name ? nd->name : "?");
        in[t] = un_shape_logical(s);
        weight[t] = un_graph_node(m->g, nd->in[t].node)->op == UN_OP_WEIGHT;
    }
    int D = m->p.devices;
    for (int d = 1; d <= D; d++) {
        if (D % d != 0 || (d > 1 && m->p.no_parallel))
            continue;
        /* options per input: 0 = whole (d == 1) or copy, 1 + k = split dim k */
        int n_opt[UN_MAX_INPUTS], idx[UN_MAX_INPUTS];
        int64_t combos = 1;
        for (int t = 0; t < nd->n_in; t++) {
            n_opt[t] = d == 1 ? 1 : 1 + in[t].rank;
            if (d > 1 && m->p.only_data)
                n_opt[t] = 2; /* copy, or the batch split */
            combos *= n_opt[t];
            idx[t] = 0;
        }
        if (combos > MAX_COMBOS)
            combos = MAX_COMBOS;
        for (int64_t c = 0; c < combos; c++) {
            un_shape try[UN_MAX_INPUTS];
            bool ok = true;
            for (int t = 0; t < nd->n_in && ok; t++) {
                try[t] = in[t];
                if (d == 1)
                    continue;
                if (idx[t] == 0)
                    try[t].copy = d;
                else if (in[t].dim[idx[t] - 1] % d == 0)
                    try[t].shard[idx[t] - 1] = d;
                else
                    ok = false;
                /* only_data: data inputs split on the batch, weights copied */
                if (m->p.only_data && ok)
                    ok = weight[t] ? idx[t] == 0 : idx[t] == 1;
            }
            for (int t = 0; t < nd->n_in; t++) { /* next assignment */
                if (++idx[t] < n_opt[t])
                    break;
                idx[t] = 0;
            }
            if (!ok)
                continue;
            un_status st = try_config(m, nd, try, weight, d, out);
            if (st != UN_OK)
                return st;
        }
    }
    if (out->n == 0)
        return un_ctx_error(m->ctx, UN_ERR_INVALID, "mapping: node '%s' has no configuration",
                            nd->name ? nd->name : "?");
    return UN_OK;
}

/* A node with the same op, parameters and input shapes as v (earlier), or -1. */
static int32_t same_as(const un_map *m, int32_t v, const int32_t *hash_next, const uint64_t *hash,
                       const int32_t *head, int32_t nbuckets) {
    const un_node *a = un_graph_node(m->g, v);
    for (int32_t u = head[hash[v] % (uint64_t)nbuckets]; u >= 0; u = hash_next[u]) {
        const un_node *b = un_graph_node(m->g, u);
        if (hash[u] != hash[v] || b->op != a->op || b->n_in != a->n_in)
            continue;
        bool eq = true;
        for (int i = 0; i < UN_MAX_PARAMS && eq; i++)
            eq = un_param_eq(&a->params[i], &b->params[i]);
        for (int t = 0; t < a->n_in && eq; t++)
            eq = un_shape_eq(un_graph_shape(m->g, a->in[t]), un_graph_shape(m->g, b->in[t])) &&
                 (un_graph_node(m->g, a->in[t].node)->op == UN_OP_WEIGHT) ==
                     (un_graph_node(m->g, b->in[t].node)->op == UN_OP_WEIGHT);
        if (eq)
            return u;
    }
    return -1;
}

static uint64_t node_sig(const un_graph *g, int32_t v) {
    const un_node *nd = un_graph_node(g, v);
    uint64_t h = 1469598103934665603ull ^ (uint64_t)nd->op;
    for (int t = 0; t < nd->n_in; t++)
        h = un_shape_hash(un_graph_shape(g, nd->in[t]), h * 1099511628211ull);
    for (int i = 0; i < UN_MAX_PARAMS; i++)
        for (int j = 0; j < (nd->params[i].len < 0 ? 1 : nd->params[i].len); j++)
            h = (h ^ (uint64_t)nd->params[i].v[j]) * 1099511628211ull;
    return h;
}

un_status un_map_new(un_ctx *ctx, un_cost_model *cm, const un_graph *g, const un_map_params *p,
                     un_map **out) {
    *out = NULL;
    const un_machine *mach = un_cost_machine(cm);
    if (p->devices < 1 || p->devices > un_machine_devices(mach))
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "mapping: %d devices requested, but machine '%s' has %d", p->devices,
                            mach->name, un_machine_devices(mach));
    un_map *m = un_xcalloc(1, sizeof *m);
    m->ctx = ctx;
    m->cm = cm;
    m->g = g;
    m->spec = un_graph_spec(g);
    m->p = *p;
    if (m->p.max_states <= 0)
        m->p.max_states = 4096;
    m->n = un_graph_node_count(g);
    m->eb = un_cost_elem_bytes(cm);
    m->state_copies = p->optimizer && strcmp(p->optimizer, "sgd") == 0 ? 1 : 2;
    int32_t n = m->n;
    un_status st = UN_OK;
    /* configurations, shared between nodes of equal signature */
    cfg_list all = {0};
    m->cfg_at = un_xcalloc((size_t)n + 1, sizeof *m->cfg_at);
    uint64_t *hash = un_xcalloc((size_t)n + 1, sizeof *hash);
    int32_t *next = un_xcalloc((size_t)n + 1, sizeof *next);
    int32_t nb = n + 1, *head = un_xmalloc((size_t)nb * sizeof *head);
    for (int32_t i = 0; i < nb; i++)
        head[i] = -1;
    for (int32_t v = 0; v < n && st == UN_OK; v++) {
        m->cfg_at[v] = all.n;
        const un_node *nd = un_graph_node(g, v);
        if (un_op_kind_of(nd->op) == UN_OPK_PARALLEL) {
            st = un_ctx_error(ctx, UN_ERR_INVALID,
                              "mapping: the graph already has parallel op '%s'; the search maps "
                              "serial graphs",
                              nd->name ? nd->name : "?");
            break;
        }
        if (!is_regular(g, v))
            continue;
        hash[v] = node_sig(g, v);
        int32_t u = same_as(m, v, next, hash, head, nb);
        if (u >= 0) {
            for (int32_t i = m->cfg_at[u]; i < m->cfg_at[u + 1]; i++) {
                un_map_config c = all.v[i];
                cfg_push(&all, &c);
            }
        } else {
            cfg_list l = {0};
            st = node_configs(m, v, &l);
            for (int32_t i = 0; i < l.n; i++)
                cfg_push(&all, &l.v[i]);
            free(l.v);
        }
        next[v] = head[hash[v] % (uint64_t)nb];
        head[hash[v] % (uint64_t)nb] = v;
    }
    m->cfg_at[n] = all.n;
    m->cfg = all.v;
    free(hash);
    free(next);
    free(head);
    if (st != UN_OK) {
        un_map_free(m);
        return st;
    }
    /* unary terms: conversions from sources and to the loss; edges between regular nodes */
    m->unary_time = un_xcalloc((size_t)all.n + 1, sizeof(double));
    m->unary_mem = un_xcalloc((size_t)all.n + 1, sizeof(double));
    m->edge_at = un_xcalloc((size_t)n + 1, sizeof *m->edge_at);
    m->last_use = un_xcalloc((size_t)n + 1, sizeof *m->last_use);
    int32_t cap = 0;
    for (int32_t v = 0; v < n; v++) {
        m->last_use[v] = v;
        m->edge_at[v] = m->n_edges;
        if (!is_regular(g, v))
            continue;
        const un_node *nd = un_graph_node(g, v);
        for (int t = 0; t < nd->n_in; t++) {
            int32_t u = nd->in[t].node;
            const un_node *un = un_graph_node(g, u);
            if (un_op_kind_of(un->op) == UN_OPK_SOURCE) {
                /* weights are stored in the layout their use needs (strategy fold); data inputs
                 * are on every rank: a split is a local copy */
                for (int32_t c = m->cfg_at[v]; c < m->cfg_at[v + 1]; c++) {
                    if (un->op == UN_OP_WEIGHT)
                        continue;
                    double tt, mm;
                    conv_price(m, un_graph_shape(g, nd->in[t]), &m->cfg[c].in[t], true, &tt, &mm);
                    m->unary_time[c] += tt;
                    m->unary_mem[c] += mm;
                }
                continue;
            }
            m->last_use[u] = v;
            if (m->n_edges == cap) {
                cap = cap ? 2 * cap : 64;
                m->edges = un_xrealloc(m->edges, (size_t)cap * sizeof *m->edges);
            }
            map_edge *e = &m->edges[m->n_edges++];
            memset(e, 0, sizeof *e);
            e->from = u;
            e->to = v;
            e->out = nd->in[t].out;
            e->in = t;
            int32_t nu = m->cfg_at[u + 1] - m->cfg_at[u], nv = m->cfg_at[v + 1] - m->cfg_at[v];
            e->time = un_xcalloc((size_t)nu * (size_t)nv + 1, sizeof(double));
            e->mem = un_xcalloc((size_t)nu * (size_t)nv + 1, sizeof(double));
            for (int32_t a = 0; a < nu; a++)
                for (int32_t b = 0; b < nv; b++) {
                    const un_map_config *ca = &m->cfg[m->cfg_at[u] + a];
                    const un_map_config *cb = &m->cfg[m->cfg_at[v] + b];
                    double tt = INFINITY, mm = 0;
                    if (!conv_price(m, &ca->out[e->out], &cb->in[t], false, &tt, &mm))
                        tt = INFINITY;
                    e->time[(size_t)a * (size_t)nv + (size_t)b] = tt;
                    e->mem[(size_t)a * (size_t)nv + (size_t)b] = mm;
                }
        }
    }
    m->edge_at[n] = m->n_edges;
    for (int32_t i = 0; i < un_graph_output_count(g); i++) {
        un_ref r = un_graph_output(g, i);
        if (!is_regular(g, r.node))
            continue;
        for (int32_t c = m->cfg_at[r.node]; c < m->cfg_at[r.node + 1]; c++) {
            const un_shape *o = &m->cfg[c].out[r.out];
            if (loss_readable(o))
                continue;
            double tt, mm;
            un_shape to = loss_layout(o);
            if (!conv_price(m, o, &to, false, &tt, &mm))
                tt = INFINITY;
            m->unary_time[c] += tt;
            m->unary_mem[c] += mm;
        }
    }
    for (int32_t v = 0; v < n; v++)
        if (un_graph_node(g, v)->op == UN_OP_INPUT)
            m->base_mem += piece_bytes(m, &un_graph_node(g, v)->inf.out[0]);
    *out = m;
    return UN_OK;
}

void un_map_free(un_map *m) {
    if (!m)
        return;
    for (int32_t i = 0; i < m->n_edges; i++) {
        free(m->edges[i].time);
        free(m->edges[i].mem);
    }
    free(m->edges);
    free(m->edge_at);
    free(m->last_use);
    free(m->cfg_at);
    free(m->cfg);
    free(m->unary_time);
    free(m->unary_mem);
    free(m);
}

int32_t un_map_config_count(const un_map *m, int32_t node) {
    return m->cfg_at[node + 1] - m->cfg_at[node];
}

const un_map_config *un_map_config_get(const un_map *m, int32_t node, int32_t i) {
    return &m->cfg[m->cfg_at[node] + i];
}

/* The cost of node v at configuration c given its producers' configurations in a[]. */
static void node_cost(const un_map *m, int32_t v, int32_t c, const int32_t *a, double *time,
                      double *mem) {
    int32_t k = m->cfg_at[v] + c;
    double t = m->cfg[k].time + m->unary_time[k], b = m->cfg[k].mem + m->unary_mem[k];
    int32_t nv = un_map_config_count(m, v);
    for (int32_t i = m->edge_at[v]; i < m->edge_at[v + 1]; i++) {
        const map_edge *e = &m->edges[i];
        size_t at = (size_t)a[e->from] * (size_t)nv + (size_t)c;
        t += e->time[at];
        b += e->mem[at];
    }
    *time = t;
    *mem = b;
}

double un_map_cost(const un_map *m, const int32_t *a, double lambda, double *time, double *mem) {
    double t = 0, b = m->base_mem;
    for (int32_t v = 0; v < m->n; v++) {
        if (!is_regular(m->g, v))
            continue;
        double tt, bb;
        node_cost(m, v, a[v], a, &tt, &bb);
        t += tt;
        b += bb;
    }
    if (time)
        *time = t;
    if (mem)
        *mem = b;
    return t + lambda * b;
}

void un_map_data_parallel(const un_map *m, int32_t *a) {
    for (int32_t v = 0; v < m->n; v++) {
        a[v] = -1;
        if (!is_regular(m->g, v))
            continue;
        a[v] = 0;
        int best = 0;
        const un_node *nd = un_graph_node(m->g, v);
        for (int32_t c = 0; c < un_map_config_count(m, v); c++) {
            const un_map_config *k = un_map_config_get(m, v, c);
            bool data = true;
            for (int t = 0; t < nd->n_in && data; t++) {
                bool w = un_graph_node(m->g, nd->in[t].node)->op == UN_OP_WEIGHT;
                data = w ? k->in[t].copy == k->degree
                         : k->in[t].shard[0] == k->degree && k->in[t].copy == 1;
            }
            if (data && k->degree > best) {
                best = k->degree;
                a[v] = c;
            }
        }
    }
}

/* ---- variable elimination over the frontier ---- */

typedef struct ve_state {
    double cost, time, mem;
    int32_t parent; /* state index in the previous step */
    int32_t choice; /* configuration of this step's node */
} ve_state;

typedef struct ve_step {
    int32_t node;
    int32_t n_live; /* frontier after this step */
    int32_t *live;  /* its nodes */
    int32_t n;      /* states */
    ve_state *s;
    int32_t *key; /* [n * n_live] configurations of the live nodes */
} ve_step;

static uint64_t key_hash(const int32_t *k, int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint64_t)(uint32_t)k[i]) * 1099511628211ull;
    return h;
}

static int cmp_state_cost(const void *x, const void *y, void *u) {
    const ve_state *s = u;
    double a = s[*(const int32_t *)x].cost, b = s[*(const int32_t *)y].cost;
    return a < b ? -1 : a > b;
}

un_status un_map_solve(un_ctx *ctx, un_map *m, double lambda, int32_t *a, un_map_stats *stats) {
    (void)ctx;
    memset(stats, 0, sizeof *stats);
    int32_t n = m->n;
    for (int32_t v = 0; v < n; v++)
        a[v] = -1;
    int32_t n_steps = 0;
    for (int32_t v = 0; v < n; v++)
        n_steps += is_regular(m->g, v);
    ve_step *steps = un_xcalloc((size_t)n_steps + 1, sizeof *steps);
    /* step -1: one empty state */
    int32_t prev_live_n = 0, *prev_live = NULL;
    int32_t prev_n = 1;
    ve_state *prev_s = un_xcalloc(1, sizeof *prev_s);
    int32_t *prev_key = NULL;
    ve_state *root = prev_s;
    int32_t *pos = un_xmalloc(((size_t)n + 1) * sizeof *pos); /* node -> slot in prev_live */
    int32_t *assign = un_xmalloc(((size_t)n + 1) * sizeof *assign);
    for (int32_t v = 0; v < n; v++)
        pos[v] = -1;
    int32_t si = 0;
    for (int32_t v = 0; v < n; v++) {
        if (!is_regular(m->g, v))
            continue;
        ve_step *S = &steps[si++];
        S->node = v;
        stats->configs += un_map_config_count(m, v);
        /* the new frontier: the old one and v, less the nodes whose last use is v */
        S->live = un_xmalloc(((size_t)prev_live_n + 1) * sizeof *S->live);
        for (int32_t i = 0; i < prev_live_n; i++)
            if (m->last_use[prev_live[i]] > v)
                S->live[S->n_live++] = prev_live[i];
        if (m->last_use[v] > v)
            S->live[S->n_live++] = v;
        if (S->n_live == 1 && S->live[0] == v)
            stats->pieces++;
        int32_t nc = un_map_config_count(m, v);
        int64_t cap = (int64_t)prev_n * nc;
        int32_t hcap = 1;
        while (hcap < 2 * cap + 2)
            hcap *= 2;
        int32_t *table = un_xmalloc((size_t)hcap * sizeof *table);
        for (int32_t i = 0; i < hcap; i++)
            table[i] = -1;
        S->s = un_xmalloc((size_t)cap * sizeof *S->s);
        S->key = un_xmalloc(((size_t)cap * (size_t)S->n_live + 1) * sizeof *S->key);
        int32_t *k = un_xmalloc(((size_t)S->n_live + 1) * sizeof *k);
        for (int32_t ps = 0; ps < prev_n; ps++) {
            for (int32_t i = 0; i < prev_live_n; i++)
                assign[prev_live[i]] = prev_key[(size_t)ps * (size_t)prev_live_n + (size_t)i];
            for (int32_t c = 0; c < nc; c++) {
                double t, b;
                node_cost(m, v, c, assign, &t, &b);
                double cost = prev_s[ps].cost + t + lambda * b;
                if (!isfinite(cost))
                    continue;
                assign[v] = c;
                for (int32_t i = 0; i < S->n_live; i++)
                    k[i] = assign[S->live[i]];
                uint64_t h = key_hash(k, S->n_live);
                int32_t slot = (int32_t)(h & (uint64_t)(hcap - 1));
                while (table[slot] >= 0 && memcmp(S->key + (size_t)table[slot] * (size_t)S->n_live,
                                                  k, (size_t)S->n_live * sizeof *k) != 0)
                    slot = (slot + 1) & (hcap - 1);
                ve_state ns = {cost, prev_s[ps].time + t, prev_s[ps].mem + b, ps, c};
                if (table[slot] < 0) {
                    table[slot] = S->n;
                    memcpy(S->key + (size_t)S->n * (size_t)S->n_live, k,
                           (size_t)S->n_live * sizeof *k);
                    S->s[S->n++] = ns;
                } else if (cost < S->s[table[slot]].cost) {
                    S->s[table[slot]] = ns;
                }
                stats->states++;
            }
        }
        free(k);
        free(table);
        if (S->n > m->p.max_states) { /* the beam: keep the cheapest */
            int32_t *ord = un_xmalloc((size_t)S->n * sizeof *ord);
            for (int32_t i = 0; i < S->n; i++)
                ord[i] = i;
            qsort_r(ord, (size_t)S->n, sizeof *ord, cmp_state_cost, S->s);
            int32_t keep = (int32_t)m->p.max_states;
            ve_state *ns = un_xmalloc((size_t)keep * sizeof *ns);
            int32_t *nk = un_xmalloc(((size_t)keep * (size_t)S->n_live + 1) * sizeof *nk);
            for (int32_t i = 0; i < keep; i++) {
                ns[i] = S->s[ord[i]];
                memcpy(nk + (size_t)i * (size_t)S->n_live,
                       S->key + (size_t)ord[i] * (size_t)S->n_live, (size_t)S->n_live * sizeof *nk);
            }
            free(ord);
            free(S->s);
            free(S->key);
            S->s = ns;
            S->key = nk;
            S->n = keep;
            stats->beam = true;
        }
        if (S->n > stats->max_frontier)
            stats->max_frontier = S->n;
        prev_live_n = S->n_live;
        prev_live = S->live;
        prev_n = S->n;
        prev_s = S->s;
        prev_key = S->key;
        if (prev_n == 0)
            break;
    }
    un_status st = UN_OK;
    if (prev_n == 0 || si < n_steps) {
        st = un_ctx_error(ctx, UN_ERR_INVALID, "mapping: no configuration of every node fits");
    } else if (n_steps > 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < prev_n; i++)
            if (prev_s[i].cost < prev_s[best].cost)
                best = i;
        stats->cost = prev_s[best].cost;
        stats->time = prev_s[best].time;
        stats->mem = prev_s[best].mem + m->base_mem;
        stats->cost += lambda * m->base_mem;
        for (int32_t i = n_steps - 1; i >= 0; i--) {
            a[steps[i].node] = steps[i].s[best].choice;
            best = steps[i].s[best].parent;
        }
    } else {
        stats->mem = m->base_mem;
    }
    for (int32_t i = 0; i < n_steps; i++) {
        free(steps[i].live);
        free(steps[i].s);
        free(steps[i].key);
    }
    free(steps);
    free(root);
    free(pos);
    free(assign);
    return st;
}

un_status un_map_exhaustive(un_ctx *ctx, const un_map *m, double lambda, int32_t *a, double *best) {
    int32_t n = m->n;
    double total = 1;
    for (int32_t v = 0; v < n; v++) {
        a[v] = -1;
        if (is_regular(m->g, v)) {
            a[v] = 0;
            total *= un_map_config_count(m, v);
        }
    }
    if (total > 1e7)
        return un_ctx_error(ctx, UN_ERR_INVALID, "exhaustive mapping: %.3g assignments", total);
    int32_t *cur = un_xmalloc(((size_t)n + 1) * sizeof *cur);
    memcpy(cur, a, (size_t)n * sizeof *cur);
    *best = INFINITY;
    for (;;) {
        double c = un_map_cost(m, cur, lambda, NULL, NULL);
        if (c < *best) {
            *best = c;
            memcpy(a, cur, (size_t)n * sizeof *a);
        }
        int32_t v = 0;
        for (; v < n; v++) {
            if (cur[v] < 0)
                continue;
            if (++cur[v] < un_map_config_count(m, v))
                break;
            cur[v] = 0;
        }
        if (v == n)
            break;
    }
    free(cur);
    return UN_OK;
}

/* ---- the plan graph ---- */

typedef struct plan_builder {
    un_ctx *ctx;
    un_graph *ng;
    un_ref cur;
    un_status st;
    int32_t devices;
} plan_builder;

static void plan_step(void *u, un_op op, int dim, int k, const un_shape *after) {
    plan_builder *b = u;
    if (b->st != UN_OK)
        return;
    int32_t id;
    b->st = un_graph_add_parallel(b->ctx, b->ng, op, b->cur, dim, k, NULL, &id);
    if (b->st != UN_OK)
        return;
    int64_t pieces = un_shape_npieces(after);
    un_graph_node_set_view(b->ng, id, (un_view){0, 1, (int32_t)pieces});
    b->cur = (un_ref){id, 0};
}

/* A cache of converted tensors: (source ref, layout) -> ref in the plan. */
typedef struct conv_memo {
    un_ref src;
    un_shape to;
    un_ref got;
} conv_memo;

static un_status convert(plan_builder *b, conv_memo **memo, int32_t *n_memo, un_ref src,
                         const un_shape *to, un_ref *out) {
    for (int32_t i = 0; i < *n_memo; i++)
        if ((*memo)[i].src.node == src.node && (*memo)[i].src.out == src.out &&
            un_shape_eq(&(*memo)[i].to, to)) {
            *out = (*memo)[i].got;
            return UN_OK;
        }
    const un_shape *from = un_graph_shape(b->ng, src);
    b->cur = src;
    b->st = UN_OK;
    if (!conv_walk(from, to, b->devices, plan_step, b))
        return un_ctx_error(b->ctx, UN_ERR_INVALID, "mapping: no conversion between layouts");
    if (b->st != UN_OK)
        return b->st;
    *memo = un_xrealloc(*memo, ((size_t)*n_memo + 1) * sizeof **memo);
    (*memo)[(*n_memo)++] = (conv_memo){src, *to, b->cur};
    *out = b->cur;
    return UN_OK;
}

un_status un_map_plan(un_ctx *ctx, const un_map *m, const int32_t *a, un_graph **out) {
    *out = NULL;
    const un_graph *g = m->g;
    int32_t n = m->n;
    un_graph *ng = un_graph_new(m->spec);
    un_ref *map = un_xcalloc((size_t)n * UN_MAX_OUTPUTS + 1, sizeof *map);
    conv_memo *memo = NULL;
    int32_t n_memo = 0;
    plan_builder b = {.ctx = ctx, .ng = ng, .devices = m->p.devices};
    un_status st = UN_OK;
    for (int32_t v = 0; v < n && st == UN_OK; v++) {
        const un_node *nd = un_graph_node(g, v);
        int32_t nid;
        if (!is_regular(g, v)) {
            st = un_graph_add(ctx, ng, nd->op, nd->params, NULL, 0, nd->name, &nid);
            map[v * UN_MAX_OUTPUTS] = (un_ref){nid, 0};
            continue;
        }
        if (a[v] < 0 || a[v] >= un_map_config_count(m, v)) {
            st = un_ctx_error(ctx, UN_ERR_INVALID, "mapping: node '%s' has no configuration",
                              nd->name ? nd->name : "?");
            break;
        }
        const un_map_config *c = un_map_config_get(m, v, a[v]);
        un_ref ins[UN_MAX_INPUTS];
        for (int t = 0; t < nd->n_in && st == UN_OK; t++)
            st = convert(&b, &memo, &n_memo, map[nd->in[t].node * UN_MAX_OUTPUTS + nd->in[t].out],
                         &c->in[t], &ins[t]);
        if (st == UN_OK)
            st = un_graph_add(ctx, ng, nd->op, nd->params, ins, nd->n_in, nd->name, &nid);
        if (st != UN_OK)
            break;
        un_graph_node_set_view(ng, nid, (un_view){0, 1, c->degree});
        for (int o = 0; o < nd->inf.n_out; o++)
            map[v * UN_MAX_OUTPUTS + o] = (un_ref){nid, o};
    }
    int32_t no = un_graph_output_count(g);
    un_ref *outs = un_xcalloc((size_t)no + 1, sizeof *outs);
    for (int32_t i = 0; i < no && st == UN_OK; i++) {
        un_ref r = un_graph_output(g, i);
        un_ref got = map[r.node * UN_MAX_OUTPUTS + r.out];
        const un_shape *s = un_graph_shape(ng, got);
        if (is_regular(g, r.node) && !loss_readable(s)) {
            un_shape to = loss_layout(s);
            st = convert(&b, &memo, &n_memo, got, &to, &got);
        }
        outs[i] = got;
    }
    if (st == UN_OK)
        st = un_graph_set_outputs(ctx, ng, outs, no);
    free(outs);
    free(memo);
    free(map);
    if (st != UN_OK) {
        un_graph_free(ng);
        return st;
    }
    *out = ng;
    return UN_OK;
}
