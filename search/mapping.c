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
    int32_t *n_lay;  /* [n] layouts of node v: its configurations 0 .. n_lay[v] - 1 (start 0) */
    int n_cut;       /* split points of the machine for parallel branches (0: they share) */
    int cut[UN_MAP_MAX_CUTS]; /* ascending: the low range is [0, s), the high one [s, D) */
    bool have_tree;
    un_sp_info sa;    /* over the regular nodes */
    un_sp_tree tree;  /* the series-parallel decomposition the DP runs over */
    int32_t *pos;     /* [n] position of a regular node in the tree's leaf order */
    int32_t *lastpos; /* [n] the last position that reads it (its own when none) */
    uint64_t memo_id; /* this map among the memo's (p.memo), 0: none */
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

/* Whether degree d, which does not divide D, divides a part of one of the machine's splits (on up
 * to 8 devices: 3 of 4 devices next to 1); beyond 8 devices, with uneven splits, whether it fills
 * a part (18 of 24 next to 6). */
static bool part_degree(const un_map *m, int d) {
    if (m->p.devices > 8) { /* uneven splits: a degree that fills a part */
        for (int i = 0; i < m->n_cut && m->p.uneven_splits; i++)
            if (m->cut[i] == d || m->p.devices - m->cut[i] == d)
                return true;
        return false;
    }
    for (int i = 0; i < m->n_cut; i++)
        if (m->cut[i] % d == 0 || (m->p.devices - m->cut[i]) % d == 0)
            return true;
    return false;
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
        if ((D % d != 0 && !part_degree(m, d)) || (d > 1 && m->p.no_parallel))
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
            int32_t before = out->n;
            un_status st = try_config(m, nd, try, weight, d, out);
            if (st != UN_OK)
                return st;
            if (out->n > before)
                out->v[before].part_only = D % d != 0;
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

/* ---- the series-parallel tree and branch placements ---- */

/* Whether a range of rc devices may be split in two for parallel branches: only the whole
 * machine, at its split points (one level: nested splits into quarters multiplied the search
 * time of Inception-v3 on 192 devices by 6 without a better plan). */
static bool split_ok(const un_map *m, int rc) { return m->n_cut > 0 && rc == m->p.devices; }

/* The machine's split points for parallel branches: on up to 8 devices every s in 1 .. D - 1
 * (1 + 3, 2 + 2, 3 + 1 on 4; 2 + 4 on 6); beyond, the halves when D is even, or, with
 * uneven_splits, instead the quarters rounded to whole nodes (48 + 144 and 144 + 48 of 192; 6 +
 * 18 of 24 at 6 per node), whose parts a degree may fill (part_degree). search.c plans with
 * those as a second candidate: in one DP with the halves (48 / 96 / 144, degrees dividing D),
 * Inception-v3 on 192 devices took 31 -> 90 s wall at load 15-16 for a plan the simulator
 * finds 6 % worse (the additive cost preferred it: 0.0773 against 0.0786). */
static void map_cuts(un_map *m) {
    int D = m->p.devices;
    m->n_cut = 0;
    if (D <= 8) {
        for (int s = 1; s < D; s++)
            m->cut[m->n_cut++] = s;
    } else if (D % 2 == 0) {
        m->cut[m->n_cut++] = D / 2;
    }
    if (D > 8 && m->p.uneven_splits) {
        int P = un_cost_machine(m->cm)->devices_per_node;
        m->n_cut = 0;
        for (int k = 1; k <= 3; k += 2) {
            int s = (int)((double)D * k / 4 / P + 0.5) * P;
            if (s > 0 && s < D && 2 * s != D && (m->n_cut == 0 || m->cut[m->n_cut - 1] != s))
                m->cut[m->n_cut++] = s;
        }
    }
}

/* The SP tree over the regular nodes, positions in its leaf order (a topological order), and
 * the configurations of nodes inside parallel compositions copied to the start of the high
 * half (D / 2) when their degree fits in it. */
static un_status map_tree(un_map *m) {
    int32_t n = m->n;
    m->n_lay = un_xcalloc((size_t)n + 1, sizeof *m->n_lay);
    m->pos = un_xmalloc(((size_t)n + 1) * sizeof *m->pos);
    m->lastpos = un_xmalloc(((size_t)n + 1) * sizeof *m->lastpos);
    bool *mask = un_xcalloc((size_t)n + 1, sizeof *mask);
    int32_t n_reg = 0;
    for (int32_t v = 0; v < n; v++) {
        m->n_lay[v] = m->cfg_at[v + 1] - m->cfg_at[v];
        for (int32_t l = 0; l < m->n_lay[v]; l++)
            m->cfg[m->cfg_at[v] + l].layout = l;
        m->pos[v] = m->lastpos[v] = -1;
        mask[v] = is_regular(m->g, v);
        n_reg += mask[v];
    }
    un_status st = UN_OK;
    if (n_reg > 0) {
        st = un_sp_analyse(m->ctx, m->g, mask, &m->sa);
        if (st == UN_OK) {
            st = un_sp_decompose(m->ctx, &m->sa, &m->tree);
            if (st != UN_OK)
                un_sp_info_deinit(&m->sa);
        }
        m->have_tree = st == UN_OK;
    }
    free(mask);
    if (st != UN_OK || !m->have_tree)
        return st;
    for (int32_t i = 0; i < m->tree.n_order; i++)
        m->pos[m->tree.order[i]] = m->lastpos[m->tree.order[i]] = i;
    for (int32_t i = 0; i < m->n_edges; i++) {
        const map_edge *e = &m->edges[i];
        if (m->pos[e->from] >= m->pos[e->to])
            return un_ctx_error(m->ctx, UN_ERR_INVALID,
                                "mapping: the SP order is not topological at edge %d -> %d",
                                (int)e->from, (int)e->to);
        if (m->pos[e->to] > m->lastpos[e->from])
            m->lastpos[e->from] = m->pos[e->to];
    }
    int D = m->p.devices;
    if (m->n_cut == 0)
        return UN_OK;
    bool *in_par = un_xcalloc((size_t)n + 1, sizeof *in_par);
    bool any = false;
    for (int32_t x = 0; x < m->tree.n_nodes; x++)
        if (m->tree.nodes[x].kind == UN_SP_PARALLEL)
            for (int32_t i = m->tree.nodes[x].begin; i < m->tree.nodes[x].end; i++)
                any = in_par[m->tree.order[i]] = true;
    if (!any)
        m->n_cut = 0; /* no branches: no splits, and no part-only degrees (dropped below) */
    cfg_list all = {0};
    int32_t *at = un_xcalloc((size_t)n + 1, sizeof *at);
    int32_t *src = NULL; /* placed configuration -> its layout's old index */
    int32_t cap = 0;
    for (int32_t v = 0; v < n; v++) {
        at[v] = all.n;
        for (int ci = -1; ci < m->n_cut; ci++) {
            int s = ci < 0 ? 0 : m->cut[ci];
            if (s > 0 && !in_par[v])
                break;
            for (int32_t l = 0; l < m->n_lay[v]; l++) {
                un_map_config c = m->cfg[m->cfg_at[v] + l];
                if (s + c.degree > D || (c.part_only && !in_par[v]))
                    continue;
                c.start = s;
                c.layout = l;
                size_t len = strlen(c.name);
                if (s > 0 && len + 2 < sizeof c.name)
                    snprintf(c.name + len, sizeof c.name - len, "@%d", s);
                cfg_push(&all, &c);
                if (all.n > cap) {
                    cap = all.cap;
                    src = un_xrealloc(src, (size_t)cap * sizeof *src);
                }
                src[all.n - 1] = m->cfg_at[v] + l;
            }
        }
    }
    at[n] = all.n;
    double *ut = un_xcalloc((size_t)all.n + 1, sizeof *ut);
    double *um = un_xcalloc((size_t)all.n + 1, sizeof *um);
    for (int32_t i = 0; i < all.n; i++) {
        ut[i] = m->unary_time[src[i]];
        um[i] = m->unary_mem[src[i]];
    }
    free(m->unary_time);
    free(m->unary_mem);
    free(m->cfg);
    free(m->cfg_at);
    m->unary_time = ut;
    m->unary_mem = um;
    m->cfg = all.v;
    m->cfg_at = at;
    free(src);
    free(in_par);
    return UN_OK;
}

/* ---- the memo of piece solves across maps (mapping.h) ---- */

#define MEMO_BYTES_DEFAULT ((int64_t)256 << 20)

/* One kept run: its key (the subproblem word by word) and its results. */
typedef struct memo_entry {
    uint64_t hash;
    int32_t next;     /* the next entry of its bucket, -1: none */
    int32_t n_key;    /* words */
    int64_t *key;     /* owned */
    int32_t size, nx; /* the piece's nodes, the exit's configurations */
    double *cost;     /* [nx] owned */
    int32_t *assign;  /* [nx * size] owned: configurations by position (rows of finite costs) */
    int64_t beam;     /* the beam it ran with */
    bool beamed;      /* it dropped states: it serves that beam only */
    int64_t peak, peak_split; /* its largest frontier and split input (the beams that keep all) */
    un_map_stats added; /* the counters it added (states, splits, parallels, pieces, frontier) */
    uint64_t map_id;    /* the map that solved it */
    /* a frontier after the first parts of a piece (prefix_keep): nx states, their costs in cost,
     * their assignments in assign, and these */
    int32_t n_live;
    int32_t *live;          /* [n_live] positions of the live nodes in the piece */
    int32_t *fkey, *origin; /* [nx * n_live], [nx] */
    /* a node's configurations (configs_of) */
    un_map_config *cfg; /* [n_cfg] owned */
    int32_t n_cfg;
} memo_entry;

struct un_map_memo {
    const un_cost_model *cm;
    int64_t max_bytes;
    uint64_t maps; /* maps that took this memo */
    int32_t *head; /* [n_head] buckets, power of two */
    int32_t n_head;
    memo_entry *e;
    int32_t n, cap;
    un_map_memo_stats st;
};

un_map_memo *un_map_memo_new(const un_cost_model *cm, int64_t max_bytes) {
    un_map_memo *mm = un_xcalloc(1, sizeof *mm);
    mm->cm = cm;
    mm->max_bytes = max_bytes > 0 ? max_bytes : MEMO_BYTES_DEFAULT;
    return mm;
}

void un_map_memo_free(un_map_memo *mm) {
    if (!mm)
        return;
    for (int32_t i = 0; i < mm->n; i++) {
        free(mm->e[i].key);
        free(mm->e[i].cost);
        free(mm->e[i].assign);
        free(mm->e[i].live);
        free(mm->e[i].fkey);
        free(mm->e[i].origin);
        free(mm->e[i].cfg);
    }
    free(mm->e);
    free(mm->head);
    free(mm);
}

un_map_memo_stats un_map_memo_get_stats(const un_map_memo *mm) {
    un_map_memo_stats z = {0};
    return mm ? mm->st : z;
}

static uint64_t memo_next_map(un_map_memo *mm) { return ++mm->maps; }

/* The key being written: words, and its hash at the end. */
typedef struct memo_key {
    int64_t *w;
    int32_t n, cap;
} memo_key;

static void mk_put(memo_key *k, int64_t x) {
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 256;
        k->w = un_xrealloc(k->w, (size_t)k->cap * sizeof *k->w);
    }
    k->w[k->n++] = x;
}

static void mk_shape(memo_key *k, const un_shape *s) {
    mk_put(k, s->rank);
    mk_put(k, s->dtype);
    for (int i = 0; i < s->rank; i++) {
        mk_put(k, s->dim[i]);
        mk_put(k, s->shard[i]);
    }
    mk_put(k, s->sum);
    mk_put(k, s->copy);
}

/* A node's own work: op, parameters, outputs, each input's shape and whether it is a weight. */
static void mk_node(memo_key *k, const un_graph *g, int32_t v) {
    const un_node *nd = un_graph_node(g, v);
    mk_put(k, nd->op);
    for (int i = 0; i < UN_MAX_PARAMS; i++) {
        mk_put(k, nd->params[i].len);
        for (int j = 0; j < (nd->params[i].len < 0 ? 1 : nd->params[i].len); j++)
            mk_put(k, nd->params[i].v[j]);
    }
    mk_put(k, nd->inf.n_out);
    mk_put(k, nd->n_in);
    for (int t = 0; t < nd->n_in; t++) {
        mk_shape(k, un_graph_shape(g, nd->in[t]));
        mk_put(k, un_graph_node(g, nd->in[t].node)->op == UN_OP_WEIGHT);
    }
}

/* The SP subtree x, positions relative to b; whether it holds a parallel composition. */
static bool mk_tree(memo_key *k, const un_map *m, int32_t x, int32_t b) {
    const un_sp_node *t = &m->tree.nodes[x];
    mk_put(k, t->kind);
    mk_put(k, t->begin - b);
    mk_put(k, t->end - b);
    mk_put(k, t->n_child);
    bool par = t->kind == UN_SP_PARALLEL;
    for (int32_t i = 0; i < t->n_child; i++)
        par |= mk_tree(k, m, m->tree.child[t->child_at + i], b);
    return par;
}

static int cmp_id(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* The key of un_map_solve_piece's run over leaves order[b .. e) (see mapping.h); false when the
 * piece reads a regular node outside it other than the entry (then it is not memoized). */
static bool piece_key(const un_map *m, double lambda, int32_t x0, int32_t x1, int32_t b, int32_t e,
                      int32_t entry, int32_t entry_cfg, int32_t exit, memo_key *k) {
    const un_graph *g = m->g;
    uint64_t lb;
    memcpy(&lb, &lambda, sizeof lb);
    mk_put(k, (int64_t)lb);
    mk_put(k, m->p.devices);
    mk_put(k, m->p.only_data | m->p.no_parallel << 1);
    mk_put(k, m->state_copies);
    mk_put(k, entry >= 0 ? entry_cfg : -1);
    if (entry >= 0)
        mk_node(k, g, entry);
    int32_t size = e - b;
    mk_put(k, size);
    /* each id's rank among the piece's and the entry's: the DP keeps live nodes in id order */
    int32_t *ids = un_xmalloc(((size_t)size + 2) * sizeof *ids);
    memcpy(ids, m->tree.order + b, (size_t)size * sizeof *ids);
    int32_t n_ids = size;
    if (entry >= 0)
        ids[n_ids++] = entry;
    qsort(ids, (size_t)n_ids, sizeof *ids, cmp_id);
    if (entry >= 0)
        mk_put(k, (int32_t *)bsearch(&entry, ids, (size_t)n_ids, sizeof *ids, cmp_id) - ids);
    bool ok = true;
    int32_t first_out = m->p.free_outputs > 0 ? m->p.free_outputs : 0;
    for (int32_t i = b; i < e && ok; i++) {
        int32_t v = m->tree.order[i];
        mk_put(k, (int32_t *)bsearch(&v, ids, (size_t)n_ids, sizeof *ids, cmp_id) - ids);
        mk_node(k, g, v);
        const un_node *nd = un_graph_node(g, v);
        for (int t = 0; t < nd->n_in; t++) {
            int32_t u = nd->in[t].node;
            mk_put(k, nd->in[t].out);
            if (u == entry) {
                mk_put(k, -1);
            } else if (!is_regular(g, u)) {
                mk_put(k, -2 - (int64_t)un_graph_node(g, u)->op);
            } else if (m->pos[u] >= b && m->pos[u] < e) {
                mk_put(k, m->pos[u] - b);
            } else {
                ok = false;
            }
        }
        /* the outputs the loss reads (a piece's exit taken out is not one) */
        for (int32_t j = first_out; j < un_graph_output_count(g); j++)
            if (un_graph_output(g, j).node == v)
                mk_put(k, -1000 - (int64_t)un_graph_output(g, j).out);
        mk_put(k, v == exit ? -1 : m->lastpos[v] >= e ? -2 : m->lastpos[v] - b);
    }
    free(ids);
    mk_put(k, exit >= 0 ? m->pos[exit] - b : -1);
    const un_sp_node *root = &m->tree.nodes[m->tree.root];
    bool par = false;
    for (int32_t i = x0; i < x1; i++)
        par |= mk_tree(
            k, m, root->kind == UN_SP_SERIES ? m->tree.child[root->child_at + i] : m->tree.root, b);
    /* the machine's split points shape only the configurations of nodes inside a parallel
     * composition (map_tree) and the DP's splits of one: a piece without one is the same
     * subproblem with or without them */
    mk_put(k, par ? m->p.shared_branches | m->p.uneven_splits << 1 : -1);
    return ok;
}

static uint64_t mk_hash(const memo_key *k) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < k->n; i++)
        h = (h ^ (uint64_t)k->w[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* Whether kept run e answers a run with beam `beam`: the same beam, or e dropped no state and
 * `beam` would drop none of its states either. */
static bool memo_serves(const memo_entry *e, int64_t beam) {
    int64_t cap_in = beam / 8 > 64 ? beam / 8 : 64;
    return e->beam == beam || (!e->beamed && e->peak <= beam && e->peak_split <= cap_in);
}

static const memo_entry *memo_find(const un_map_memo *mm, const memo_key *k, uint64_t h,
                                   int64_t beam) {
    if (!mm->n_head)
        return NULL;
    for (int32_t i = mm->head[h & (uint64_t)(mm->n_head - 1)]; i >= 0; i = mm->e[i].next) {
        const memo_entry *e = &mm->e[i];
        if (e->hash == h && e->n_key == k->n &&
            memcmp(e->key, k->w, (size_t)k->n * sizeof *k->w) == 0 && memo_serves(e, beam))
            return e;
    }
    return NULL;
}

/* Keeps a run (takes k's words), unless the memo is at its bound. */
static void memo_keep(un_map_memo *mm, memo_key *k, uint64_t h, memo_entry *r) {
    int64_t bytes = (int64_t)sizeof *r + (int64_t)k->n * 8 + (int64_t)r->nx * 8 +
                    (int64_t)r->nx * r->size * 4 + (int64_t)r->n_live * 4 +
                    (r->n_live ? (int64_t)r->nx * (r->n_live + 1) * 4 : 0) +
                    (int64_t)r->n_cfg * (int64_t)sizeof *r->cfg;
    if (mm->st.bytes + bytes > mm->max_bytes) {
        mm->st.not_kept++;
        free(k->w);
        free(r->cost);
        free(r->assign);
        free(r->live);
        free(r->fkey);
        free(r->origin);
        free(r->cfg);
        return;
    }
    if (mm->n == mm->cap) {
        mm->cap = mm->cap ? 2 * mm->cap : 256;
        mm->e = un_xrealloc(mm->e, (size_t)mm->cap * sizeof *mm->e);
    }
    if (mm->n >= mm->n_head) { /* rehash at load 1 */
        mm->n_head = mm->n_head ? 2 * mm->n_head : 256;
        free(mm->head);
        mm->head = un_xmalloc((size_t)mm->n_head * sizeof *mm->head);
        for (int32_t i = 0; i < mm->n_head; i++)
            mm->head[i] = -1;
        for (int32_t i = 0; i < mm->n; i++) {
            int32_t bk = (int32_t)(mm->e[i].hash & (uint64_t)(mm->n_head - 1));
            mm->e[i].next = mm->head[bk];
            mm->head[bk] = i;
        }
    }
    r->hash = h;
    r->key = k->w;
    r->n_key = k->n;
    int32_t bk = (int32_t)(h & (uint64_t)(mm->n_head - 1));
    r->next = mm->head[bk];
    mm->head[bk] = mm->n;
    mm->e[mm->n++] = *r;
    mm->st.entries = mm->n;
    mm->st.bytes += bytes;
}

/* The key of node v's configurations on map m (node_configs, try_config): the node's own work
 * and what else shapes them: devices, only_data, no_parallel, the machine's split points (the
 * degrees that fill a part), the optimizer (its name and state copies); tag 2. */
static void cfg_key(const un_map *m, int32_t v, memo_key *k) {
    mk_node(k, m->g, v);
    mk_put(k, m->p.devices);
    mk_put(k, m->p.only_data | m->p.no_parallel << 1);
    mk_put(k, m->n_cut);
    for (int i = 0; i < m->n_cut; i++)
        mk_put(k, m->cut[i]);
    mk_put(k, m->state_copies);
    for (const char *o = m->p.optimizer ? m->p.optimizer : "adam"; *o; o++)
        mk_put(k, *o);
    mk_put(k, 2);
}

/* Node v's configurations: a copy of those of another map's node of the same key (the memo),
 * else node_configs (then kept). */
static un_status configs_of(un_map *m, int32_t v, cfg_list *out) {
    un_map_memo *mm = m->p.memo && m->p.memo->cm == m->cm ? m->p.memo : NULL;
    if (!mm)
        return node_configs(m, v, out);
    memo_key k = {0};
    cfg_key(m, v, &k);
    uint64_t h = mk_hash(&k);
    mm->st.config_lookups++;
    const memo_entry *e = memo_find(mm, &k, h, 0);
    if (e) {
        mm->st.config_hits++;
        for (int32_t i = 0; i < e->n_cfg; i++)
            cfg_push(out, &e->cfg[i]);
        free(k.w);
        return UN_OK;
    }
    un_status st = node_configs(m, v, out);
    if (st != UN_OK) {
        free(k.w);
        return st;
    }
    memo_entry r = {.n_cfg = out->n, .map_id = m->memo_id};
    r.cfg = un_xmalloc(((size_t)out->n + 1) * sizeof *r.cfg);
    memcpy(r.cfg, out->v, (size_t)out->n * sizeof *r.cfg);
    memo_keep(mm, &k, h, &r);
    return UN_OK;
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
    if (p->memo)
        m->memo_id = memo_next_map(p->memo);
    if (m->p.max_states <= 0)
        m->p.max_states = 4096;
    m->n = un_graph_node_count(g);
    m->eb = un_cost_elem_bytes(cm);
    m->state_copies = p->optimizer && strcmp(p->optimizer, "sgd") == 0 ? 1 : 2;
    int32_t n = m->n;
    un_status st = UN_OK;
    if (!m->p.shared_branches && !m->p.only_data && !m->p.no_parallel)
        map_cuts(m);
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
            st = configs_of(m, v, &l);
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
    for (int32_t i = p->free_outputs > 0 ? p->free_outputs : 0; i < un_graph_output_count(g); i++) {
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
    if ((st = map_tree(m)) != UN_OK) {
        un_map_free(m);
        return st;
    }
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
    free(m->n_lay);
    free(m->pos);
    free(m->lastpos);
    if (m->have_tree) {
        un_sp_tree_deinit(&m->tree);
        un_sp_info_deinit(&m->sa);
    }
    free(m);
}

int32_t un_map_node_count(const un_map *m) { return m->n; }

const un_graph *un_map_graph(const un_map *m) { return m->g; }

int64_t un_map_max_states(const un_map *m) { return m->p.max_states; }

int32_t un_map_config_count(const un_map *m, int32_t node) {
    return m->cfg_at[node + 1] - m->cfg_at[node];
}

const un_map_config *un_map_config_get(const un_map *m, int32_t node, int32_t i) {
    return &m->cfg[m->cfg_at[node] + i];
}

/* The cost of node v at configuration c given its producers' configurations in a[]: its own,
 * the conversions of its inputs (by layout), and a move of the input between device sets when
 * the producer starts elsewhere (forward and backward, point to point). */
static void node_cost(const un_map *m, int32_t v, int32_t c, const int32_t *a, double *time,
                      double *mem) {
    int32_t k = m->cfg_at[v] + c;
    const un_map_config *kc = &m->cfg[k];
    double t = kc->time + m->unary_time[k], b = kc->mem + m->unary_mem[k];
    int32_t nv = m->n_lay[v];
    for (int32_t i = m->edge_at[v]; i < m->edge_at[v + 1]; i++) {
        const map_edge *e = &m->edges[i];
        const un_map_config *pc = &m->cfg[m->cfg_at[e->from] + a[e->from]];
        size_t at = (size_t)pc->layout * (size_t)nv + (size_t)kc->layout;
        t += e->time[at];
        b += e->mem[at];
        if (pc->start != kc->start) {
            double bytes = piece_bytes(m, &kc->in[e->in]) * kc->degree;
            t += 2 * un_cost_p2p(m->cm, pc->start, kc->start, bytes);
            b += 2 * piece_bytes(m, &kc->in[e->in]);
        }
    }
    *time = t;
    *mem = b;
}

/* Which part of the range [rs, rs + lo + hi) cut after lo devices every node of tree node x runs
 * in: 0 (the low lo devices), 1 (the high hi), -1 (it spans both or differs between nodes). */
static int branch_side(const un_map *m, const int32_t *a, int32_t x, int rs, int lo, int hi) {
    const un_sp_node *t = &m->tree.nodes[x];
    int side = -2;
    for (int32_t i = t->begin; i < t->end; i++) {
        int32_t v = m->tree.order[i];
        const un_map_config *c = &m->cfg[m->cfg_at[v] + a[v]];
        int here = c->start >= rs && c->start + c->degree <= rs + lo             ? 0
                   : c->start >= rs + lo && c->start + c->degree <= rs + lo + hi ? 1
                                                                                 : -1;
        if (here < 0 || (side != -2 && side != here))
            return -1;
        side = here;
    }
    return side < 0 ? -1 : side;
}

/* The cost of tree node x under the device range [rs, rs + rc): leaves their node's time +
 * lambda * bytes (infinite unless the node starts at rs: a node of degree d in a range runs on
 * its first d devices, as every node did before branches got ranges); series the sum; parallel
 * branches that each run inside one half of the range (a split the range allows) the larger of the
 * halves' sums (they run concurrently), else the sum (they share devices). */
static double tree_cost(const un_map *m, const int32_t *a, int32_t x, int rs, int rc, double lambda,
                        double *mem) {
    const un_sp_node *t = &m->tree.nodes[x];
    if (t->kind == UN_SP_LEAF) {
        const un_map_config *c = &m->cfg[m->cfg_at[t->node] + a[t->node]];
        if (c->start != rs || c->degree > rc)
            return INFINITY; /* a node runs from its range's first device */
        double tt, bb;
        node_cost(m, t->node, a[t->node], a, &tt, &bb);
        *mem += bb;
        return tt + lambda * bb;
    }
    const int32_t *ch = m->tree.child + t->child_at;
    /* the branches one after another on the range, or (a parallel composition on the whole
     * machine) at a split point where every branch lies in one part, the larger part's sum: the
     * cheapest of these readings of the assignment, as the DP takes the cheapest option (the
     * memory is the nodes' whichever reading) */
    double best = 0, best_mem = 0;
    for (int32_t i = 0; i < t->n_child; i++)
        best += tree_cost(m, a, ch[i], rs, rc, lambda, &best_mem);
    for (int ci = 0; t->kind == UN_SP_PARALLEL && split_ok(m, rc) && ci < m->n_cut; ci++) {
        int lo = m->cut[ci], hi = rc - lo;
        bool split = true;
        for (int32_t i = 0; i < t->n_child && split; i++)
            split = branch_side(m, a, ch[i], rs, lo, hi) >= 0;
        if (!split)
            continue;
        double part[2] = {0, 0}, pm = 0;
        for (int32_t i = 0; i < t->n_child; i++) {
            int side = branch_side(m, a, ch[i], rs, lo, hi);
            part[side] += tree_cost(m, a, ch[i], rs + side * lo, side ? hi : lo, lambda, &pm);
        }
        double c = part[0] > part[1] ? part[0] : part[1];
        if (c < best) {
            best = c;
            best_mem = pm;
        }
    }
    *mem += best_mem;
    return best;
}

double un_map_cost(const un_map *m, const int32_t *a, double lambda, double *time, double *mem) {
    double b = m->base_mem, t = 0, cost = lambda * m->base_mem;
    if (m->have_tree) {
        double scratch = 0;
        t = tree_cost(m, a, m->tree.root, 0, m->p.devices, 0, &b);
        cost += tree_cost(m, a, m->tree.root, 0, m->p.devices, lambda, &scratch);
    }
    if (time)
        *time = t;
    if (mem)
        *mem = b;
    return cost;
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

/* ---- the dynamic programme over the series-parallel tree ---- */

/* A frontier: states, each the configurations of the live nodes (those a later node reads),
 * its cost so far, the state it grew from (`origin`: the input state of the branch run it
 * belongs to, so states of different inputs are never merged) and its trail of choices. */
static uint64_t key_hash(const int32_t *k, int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint64_t)(uint32_t)k[i]) * 1099511628211ull;
    return h;
}

typedef struct frontier {
    int32_t n_live;
    int32_t *live; /* node ids, ascending */
    int32_t n, cap;
    double *cost;
    int32_t *key; /* [n * n_live] */
    int32_t *origin;
    int32_t *rec; /* trail record, -1: none */
} frontier;

/* A trail record: v >= 0: a[v] = c, then prev; v < 0: a join of prev and the two halves' trails
 * x and y. States share their common records. */
typedef struct trail {
    int32_t v, c, prev, x, y;
} trail;

typedef struct dp {
    un_map *m;
    double lambda;
    trail *t;
    int32_t nt, capt;
    int32_t *assign; /* [n] scratch */
    int32_t *slot;   /* [3 * n] scratch: slot of a node in a live list */
    un_map_stats *st;
    int64_t max_states; /* the beam */
    bool beamed;        /* this run dropped states */
    int64_t peak;       /* its largest frontier before the beam */
    int64_t peak_split; /* its most input states of a split of the machine */
} dp;

static int32_t trail_push(dp *d, trail r) {
    if (d->nt == d->capt) {
        d->capt = d->capt ? 2 * d->capt : 1024;
        d->t = un_xrealloc(d->t, (size_t)d->capt * sizeof *d->t);
    }
    d->t[d->nt] = r;
    return d->nt++;
}

static void fr_deinit(frontier *f) {
    free(f->live);
    free(f->cost);
    free(f->key);
    free(f->origin);
    free(f->rec);
    memset(f, 0, sizeof *f);
}

static void fr_init(frontier *f, const int32_t *live, int32_t n_live) {
    memset(f, 0, sizeof *f);
    f->n_live = n_live;
    f->live = un_xmalloc(((size_t)n_live + 1) * sizeof *f->live);
    if (n_live)
        memcpy(f->live, live, (size_t)n_live * sizeof *live);
}

/* The hashed set of states being built: dedupe on (origin, key), keep the cheapest. `from` and
 * `aux` remember where each new state came from until its trail record is made. */
typedef struct fr_build {
    frontier *f;
    int32_t *table, hcap;
    int32_t *from, *aux, *aux2;
} fr_build;

static void fb_begin(fr_build *b, frontier *f, int64_t expect) {
    memset(b, 0, sizeof *b);
    b->f = f;
    b->hcap = 16;
    while (b->hcap < 2 * expect + 2 && b->hcap < (1 << 30))
        b->hcap *= 2;
    b->table = un_xmalloc((size_t)b->hcap * sizeof *b->table);
    for (int32_t i = 0; i < b->hcap; i++)
        b->table[i] = -1;
}

static void fb_grow(fr_build *b) {
    frontier *f = b->f;
    if (f->n < f->cap)
        return;
    f->cap = f->cap ? 2 * f->cap : 64;
    f->cost = un_xrealloc(f->cost, (size_t)f->cap * sizeof *f->cost);
    f->key = un_xrealloc(f->key, ((size_t)f->cap * (size_t)f->n_live + 1) * sizeof *f->key);
    f->origin = un_xrealloc(f->origin, (size_t)f->cap * sizeof *f->origin);
    f->rec = un_xrealloc(f->rec, (size_t)f->cap * sizeof *f->rec);
    b->from = un_xrealloc(b->from, (size_t)f->cap * sizeof *b->from);
    b->aux = un_xrealloc(b->aux, (size_t)f->cap * sizeof *b->aux);
    b->aux2 = un_xrealloc(b->aux2, (size_t)f->cap * sizeof *b->aux2);
}

static void fb_rehash(fr_build *b) {
    frontier *f = b->f;
    free(b->table);
    b->hcap *= 2;
    b->table = un_xmalloc((size_t)b->hcap * sizeof *b->table);
    for (int32_t i = 0; i < b->hcap; i++)
        b->table[i] = -1;
    for (int32_t i = 0; i < f->n; i++) {
        const int32_t *k = f->key + (size_t)i * (size_t)f->n_live;
        uint64_t h =
            key_hash(k, f->n_live) ^ ((uint64_t)(uint32_t)f->origin[i] * 0x9e3779b97f4a7c15ull);
        int32_t sl = (int32_t)(h & (uint64_t)(b->hcap - 1));
        while (b->table[sl] >= 0)
            sl = (sl + 1) & (b->hcap - 1);
        b->table[sl] = i;
    }
}

/* Offers a state; returns true when it was added or replaced a costlier one. */
static bool fb_offer(fr_build *b, const int32_t *k, int32_t origin, double cost, int32_t from,
                     int32_t aux, int32_t aux2) {
    frontier *f = b->f;
    if (2 * (int64_t)f->n + 2 > b->hcap)
        fb_rehash(b);
    uint64_t h = key_hash(k, f->n_live) ^ ((uint64_t)(uint32_t)origin * 0x9e3779b97f4a7c15ull);
    int32_t sl = (int32_t)(h & (uint64_t)(b->hcap - 1));
    while (b->table[sl] >= 0) {
        int32_t i = b->table[sl];
        if (f->origin[i] == origin &&
            memcmp(f->key + (size_t)i * (size_t)f->n_live, k, (size_t)f->n_live * sizeof *k) == 0)
            break;
        sl = (sl + 1) & (b->hcap - 1);
    }
    int32_t i = b->table[sl];
    if (i >= 0 && cost >= f->cost[i])
        return false;
    if (i < 0) {
        fb_grow(b);
        i = f->n++;
        b->table[sl] = i;
        memcpy(f->key + (size_t)i * (size_t)f->n_live, k, (size_t)f->n_live * sizeof *k);
        f->origin[i] = origin;
    }
    f->cost[i] = cost;
    b->from[i] = from;
    b->aux[i] = aux;
    b->aux2[i] = aux2;
    return true;
}

/* The beam's order: cost, then index (so ties keep their order). */
static bool cost_before(const double *c, int32_t a, int32_t b) {
    return c[a] < c[b] || (c[a] == c[b] && a < b);
}

static int cmp_cost_idx(const void *x, const void *y, void *u) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return cost_before(u, a, b) ? -1 : cost_before(u, b, a);
}

/* The indices of the `keep` cheapest of costs c[0 .. n), in the beam's order (owned): a
 * selection (quickselect), then a sort of the kept ones only. The same as sorting all n and
 * taking the first `keep`, in O(n + keep log keep). */
static int32_t *cheapest(double *c, int32_t n, int32_t keep) {
    int32_t *ord = un_xmalloc(((size_t)n + 1) * sizeof *ord);
    for (int32_t i = 0; i < n; i++)
        ord[i] = i;
    int32_t lo = 0, hi = n - 1, k = keep - 1;
    while (lo < hi) {
        int32_t p = ord[lo + (hi - lo) / 2], i = lo, j = hi;
        while (i <= j) {
            while (cost_before(c, ord[i], p))
                i++;
            while (cost_before(c, p, ord[j]))
                j--;
            if (i <= j) {
                int32_t t = ord[i];
                ord[i++] = ord[j];
                ord[j--] = t;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break;
    }
    qsort_r(ord, (size_t)keep, sizeof *ord, cmp_cost_idx, c);
    return ord;
}

/* Ends a build: the beam (the cheapest max_states states) when there are more. */
static void fb_end(dp *d, fr_build *b) {
    frontier *f = b->f;
    free(b->table);
    b->table = NULL;
    if (f->n > d->peak)
        d->peak = f->n;
    if (f->n > d->max_states) {
        d->beamed = true;
        int32_t keep = (int32_t)d->max_states;
        int32_t *ord = cheapest(f->cost, f->n, keep);
        int32_t L = f->n_live;
        double *c = un_xmalloc((size_t)keep * sizeof *c);
        int32_t *k = un_xmalloc(((size_t)keep * (size_t)L + 1) * sizeof *k);
        int32_t *o = un_xmalloc((size_t)keep * sizeof *o),
                *fr = un_xmalloc((size_t)keep * sizeof *fr);
        int32_t *x = un_xmalloc((size_t)keep * sizeof *x),
                *y = un_xmalloc((size_t)keep * sizeof *y);
        for (int32_t i = 0; i < keep; i++) {
            int32_t j = ord[i];
            c[i] = f->cost[j];
            memcpy(k + (size_t)i * (size_t)L, f->key + (size_t)j * (size_t)L,
                   (size_t)L * sizeof *k);
            o[i] = f->origin[j];
            fr[i] = b->from[j];
            x[i] = b->aux[j];
            y[i] = b->aux2[j];
        }
        free(ord);
        free(f->cost);
        free(f->key);
        free(f->origin);
        free(b->from);
        free(b->aux);
        free(b->aux2);
        f->cost = c;
        f->key = k;
        f->origin = o;
        b->from = fr;
        b->aux = x;
        b->aux2 = y;
        f->n = f->cap = keep;
        f->rec = un_xrealloc(f->rec, (size_t)keep * sizeof *f->rec);
        d->st->beam = true;
    }
    if (f->n > d->st->max_frontier)
        d->st->max_frontier = f->n;
}

static void fb_free(fr_build *b) {
    free(b->table);
    free(b->from);
    free(b->aux);
    free(b->aux2);
}

/* The live nodes after position `at` among `cand` (ascending, may repeat): lastpos > at. */
static int32_t live_after(const un_map *m, const int32_t *cand, int32_t nc, int32_t at,
                          int32_t *out) {
    int32_t k = 0;
    for (int32_t i = 0; i < nc; i++)
        if (m->lastpos[cand[i]] > at && (k == 0 || out[k - 1] != cand[i]))
            out[k++] = cand[i];
    return k;
}

static int cmp_i32(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return a < b ? -1 : a > b;
}

/* One node: every state times every configuration of v inside [rs, rs + rc). */
static void dp_leaf(dp *d, frontier *in, int32_t v, int rs, int rc, frontier *out) {
    un_map *m = d->m;
    int32_t *cand = un_xmalloc(((size_t)in->n_live + 2) * sizeof *cand);
    memcpy(cand, in->live, (size_t)in->n_live * sizeof *cand);
    cand[in->n_live] = v;
    qsort(cand, (size_t)in->n_live + 1, sizeof *cand, cmp_i32);
    int32_t *live = un_xmalloc(((size_t)in->n_live + 2) * sizeof *live);
    int32_t nl = live_after(m, cand, in->n_live + 1, m->pos[v], live);
    fr_init(out, live, nl);
    if (nl == 1 && live[0] == v)
        d->st->pieces++;
    int32_t nc = un_map_config_count(m, v);
    fr_build b;
    fb_begin(&b, out, (int64_t)in->n * 4);
    int32_t *k = un_xmalloc(((size_t)nl + 1) * sizeof *k);
    for (int32_t s = 0; s < in->n; s++) {
        for (int32_t i = 0; i < in->n_live; i++)
            d->assign[in->live[i]] = in->key[(size_t)s * (size_t)in->n_live + (size_t)i];
        for (int32_t c = 0; c < nc; c++) {
            const un_map_config *kc = un_map_config_get(m, v, c);
            if (kc->start != rs || kc->degree > rc)
                continue;
            double t, bb;
            node_cost(m, v, c, d->assign, &t, &bb);
            double cost = in->cost[s] + t + d->lambda * bb;
            if (!isfinite(cost))
                continue;
            d->assign[v] = c;
            for (int32_t i = 0; i < nl; i++)
                k[i] = d->assign[live[i]];
            fb_offer(&b, k, in->origin[s], cost, s, c, 0);
            d->st->states++;
        }
    }
    fb_end(d, &b);
    for (int32_t i = 0; i < out->n; i++)
        out->rec[i] = trail_push(d, (trail){v, b.aux[i], in->rec[b.from[i]], -1, -1});
    fb_free(&b);
    free(k);
    free(cand);
    free(live);
}

static void dp_run(dp *d, int32_t x, frontier *in, int rs, int rc, frontier *out);

/* A frontier of in's states with themselves as origins, cost 0 and no trail: the start of a
 * branch run whose results are joined per input state. */
static void fr_start(const frontier *in, frontier *f) {
    fr_init(f, in->live, in->n_live);
    f->n = f->cap = in->n;
    size_t kn = (size_t)in->n * (size_t)in->n_live;
    f->cost = un_xcalloc((size_t)in->n + 1, sizeof *f->cost);
    f->key = un_xmalloc((kn + 1) * sizeof *f->key);
    memcpy(f->key, in->key, kn * sizeof *f->key);
    f->origin = un_xmalloc(((size_t)in->n + 1) * sizeof *f->origin);
    f->rec = un_xmalloc(((size_t)in->n + 1) * sizeof *f->rec);
    for (int32_t i = 0; i < in->n; i++) {
        f->origin[i] = i;
        f->rec[i] = -1;
    }
}

/* The branches of parallel node x with bit i of mask set to the high part of the range cut after
 * lo devices (the low part [rs, rs + lo), the high one [rs + lo, rs + lo + hi)): each part's
 * branches one after another on its devices, from every input state; joined per input state with
 * the larger part's cost. Offered into b. */
static void dp_split(dp *d, int32_t x, frontier *in, int rs, int lo, int hi, uint32_t mask,
                     fr_build *b) {
    const un_sp_node *t = &d->m->tree.nodes[x];
    const int32_t *ch = d->m->tree.child + t->child_at;
    frontier half[2];
    for (int side = 0; side < 2; side++) {
        fr_start(in, &half[side]);
        for (int32_t i = 0; i < t->n_child; i++) {
            if ((int)((mask >> i) & 1u) != side)
                continue;
            frontier nx;
            dp_run(d, ch[i], &half[side], rs + side * lo, side ? hi : lo, &nx);
            fr_deinit(&half[side]);
            half[side] = nx;
        }
    }
    frontier *out = b->f;
    int32_t n = d->m->n, *slot = d->slot;
    for (int32_t i = 0; i < out->n_live; i++)
        slot[out->live[i]] = slot[n + out->live[i]] = slot[2 * n + out->live[i]] = -1;
    for (int32_t i = 0; i < in->n_live; i++)
        slot[in->live[i]] = i;
    for (int32_t i = 0; i < half[0].n_live; i++)
        slot[n + half[0].live[i]] = i;
    for (int32_t i = 0; i < half[1].n_live; i++)
        slot[2 * n + half[1].live[i]] = i;
    /* states of each half grouped by origin */
    int32_t *at[2], *idx[2];
    for (int side = 0; side < 2; side++) {
        frontier *f = &half[side];
        at[side] = un_xcalloc((size_t)in->n + 2, sizeof *at[side]);
        idx[side] = un_xmalloc(((size_t)f->n + 1) * sizeof *idx[side]);
        for (int32_t i = 0; i < f->n; i++)
            at[side][f->origin[i] + 1]++;
        for (int32_t s = 0; s < in->n; s++)
            at[side][s + 1] += at[side][s];
        int32_t *fill = un_xmalloc(((size_t)in->n + 1) * sizeof *fill);
        memcpy(fill, at[side], (size_t)in->n * sizeof *fill);
        for (int32_t i = 0; i < f->n; i++)
            idx[side][fill[f->origin[i]]++] = i;
        free(fill);
    }
    /* the joins: every pair of an input state's low and high states; beyond 16 x max_states
     * pairs, each input state's cheapest r of each half (a beam) */
    int64_t total = 0, limit = 16 * d->max_states;
    for (int32_t s = 0; s < in->n; s++)
        total += (int64_t)(at[0][s + 1] - at[0][s]) * (at[1][s + 1] - at[1][s]);
    int32_t r = INT32_MAX;
    if (total > limit) {
        for (int side = 0; side < 2; side++)
            for (int32_t s = 0; s < in->n; s++)
                qsort_r(idx[side] + at[side][s], (size_t)(at[side][s + 1] - at[side][s]),
                        sizeof(int32_t), cmp_cost_idx, half[side].cost);
        for (r = 64; r > 1; r /= 2) {
            total = 0;
            for (int32_t s = 0; s < in->n; s++) {
                int64_t a0 = at[0][s + 1] - at[0][s], a1 = at[1][s + 1] - at[1][s];
                total += (a0 < r ? a0 : r) * (a1 < r ? a1 : r);
            }
            if (total <= limit)
                break;
        }
        d->st->beam = true;
    }
    int32_t L = out->n_live;
    int32_t *k = un_xmalloc(((size_t)L + 1) * sizeof *k);
    for (int32_t s = 0; s < in->n; s++)
        for (int32_t p = at[0][s]; p < at[0][s + 1] && p - at[0][s] < r; p++)
            for (int32_t q = at[1][s]; q < at[1][s + 1] && q - at[1][s] < r; q++) {
                int32_t i0 = idx[0][p], i1 = idx[1][q];
                for (int32_t j = 0; j < L; j++) {
                    int32_t u = out->live[j];
                    k[j] =
                        slot[n + u] >= 0
                            ? half[0].key[(size_t)i0 * (size_t)half[0].n_live + (size_t)slot[n + u]]
                        : slot[2 * n + u] >= 0
                            ? half[1].key[(size_t)i1 * (size_t)half[1].n_live +
                                          (size_t)slot[2 * n + u]]
                            : in->key[(size_t)s * (size_t)in->n_live + (size_t)slot[u]];
                }
                double c0 = half[0].cost[i0], c1 = half[1].cost[i1];
                double cost = in->cost[s] + (c0 > c1 ? c0 : c1);
                /* from: the input state's trail; aux, aux2: the halves' trails */
                fb_offer(b, k, in->origin[s], cost, in->rec[s], half[0].rec[i0], half[1].rec[i1]);
                d->st->states++;
            }
    free(k);
    for (int side = 0; side < 2; side++) {
        free(at[side]);
        free(idx[side]);
        fr_deinit(&half[side]);
    }
}

/* Runs tree node x on the states of in (consumed) inside the device range [rs, rs + rc). */
static void dp_run(dp *d, int32_t x, frontier *in, int rs, int rc, frontier *out) {
    un_map *m = d->m;
    const un_sp_node *t = &m->tree.nodes[x];
    if (t->kind == UN_SP_LEAF) {
        dp_leaf(d, in, t->node, rs, rc, out);
        fr_deinit(in);
        return;
    }
    const int32_t *ch = m->tree.child + t->child_at;
    if (t->kind == UN_SP_SERIES || !split_ok(m, rc)) {
        if (t->kind == UN_SP_PARALLEL)
            d->st->parallels++;
        frontier cur = *in;
        memset(in, 0, sizeof *in);
        for (int32_t i = 0; i < t->n_child; i++) {
            frontier nx;
            dp_run(d, ch[i], &cur, rs, rc, &nx);
            cur = nx;
        }
        *out = cur;
        return;
    }
    d->st->parallels++;
    /* the live nodes after x, the same for every option */
    int32_t nc = in->n_live + (t->end - t->begin);
    int32_t *cand = un_xmalloc(((size_t)nc + 1) * sizeof *cand);
    memcpy(cand, in->live, (size_t)in->n_live * sizeof *cand);
    memcpy(cand + in->n_live, m->tree.order + t->begin, (size_t)(t->end - t->begin) * sizeof *cand);
    qsort(cand, (size_t)nc, sizeof *cand, cmp_i32);
    int32_t *live = un_xmalloc(((size_t)nc + 1) * sizeof *live);
    int32_t nl = live_after(m, cand, nc, t->end - 1, live);
    free(cand);
    frontier shared;
    { /* the branches share the range: one after another */
        frontier cur;
        fr_init(&cur, in->live, in->n_live);
        cur.n = cur.cap = in->n;
        size_t kn = (size_t)in->n * (size_t)in->n_live;
        cur.cost = un_xmalloc(((size_t)in->n + 1) * sizeof *cur.cost);
        cur.key = un_xmalloc((kn + 1) * sizeof *cur.key);
        cur.origin = un_xmalloc(((size_t)in->n + 1) * sizeof *cur.origin);
        cur.rec = un_xmalloc(((size_t)in->n + 1) * sizeof *cur.rec);
        memcpy(cur.cost, in->cost, (size_t)in->n * sizeof *cur.cost);
        memcpy(cur.key, in->key, kn * sizeof *cur.key);
        memcpy(cur.origin, in->origin, (size_t)in->n * sizeof *cur.origin);
        memcpy(cur.rec, in->rec, (size_t)in->n * sizeof *cur.rec);
        for (int32_t i = 0; i < t->n_child; i++) {
            frontier nx;
            dp_run(d, ch[i], &cur, rs, rc, &nx);
            cur = nx;
        }
        shared = cur;
    }
    fr_init(out, live, nl);
    free(live);
    fr_build b;
    fb_begin(&b, out, shared.n * 2);
    /* the shared option's states, reordered to the common live list */
    int32_t *k = un_xmalloc(((size_t)nl + 1) * sizeof *k);
    for (int32_t i = 0; i < shared.n_live; i++)
        d->slot[shared.live[i]] = i;
    for (int32_t s = 0; s < shared.n; s++) {
        for (int32_t j = 0; j < nl; j++)
            k[j] = shared.key[(size_t)s * (size_t)shared.n_live + (size_t)d->slot[out->live[j]]];
        fb_offer(&b, k, shared.origin[s], shared.cost[s], shared.rec[s], -3, -3);
    }
    free(k);
    fr_deinit(&shared);
    /* splits: every assignment of the branches to the halves for up to 3 branches; for 4,
     * those with the first branch low (the mirror images differ only in where the moves
     * between device sets land); beyond, the branches in order cut once */
    int32_t nb = t->n_child;
    uint32_t n_opt = nb <= 3 ? 1u << nb : nb == 4 ? 8u : (uint32_t)nb + 1;
    /* from the cheapest max_states / 8 input states (all of them on small graphs) */
    frontier sub, *from = in;
    int32_t cap_in = (int32_t)(d->max_states / 8 > 64 ? d->max_states / 8 : 64);
    if (in->n > d->peak_split)
        d->peak_split = in->n;
    if (in->n > cap_in) {
        d->beamed = true;
        int32_t *ord = cheapest(in->cost, in->n, cap_in);
        fr_init(&sub, in->live, in->n_live);
        sub.n = sub.cap = cap_in;
        sub.cost = un_xmalloc((size_t)cap_in * sizeof *sub.cost);
        sub.key = un_xmalloc(((size_t)cap_in * (size_t)in->n_live + 1) * sizeof *sub.key);
        sub.origin = un_xmalloc((size_t)cap_in * sizeof *sub.origin);
        sub.rec = un_xmalloc((size_t)cap_in * sizeof *sub.rec);
        for (int32_t i = 0; i < cap_in; i++) {
            int32_t j = ord[i];
            sub.cost[i] = in->cost[j];
            sub.origin[i] = in->origin[j];
            sub.rec[i] = in->rec[j];
            memcpy(sub.key + (size_t)i * (size_t)in->n_live,
                   in->key + (size_t)j * (size_t)in->n_live, (size_t)in->n_live * sizeof *sub.key);
        }
        free(ord);
        from = &sub;
        d->st->beam = true;
    }
    for (int ci = 0; ci < m->n_cut; ci++)
        for (uint32_t o = 0; o < n_opt; o++) {
            uint32_t mask = nb <= 3 ? o : nb == 4 ? o << 1 : ((1u << nb) - 1u) & ~((1u << o) - 1u);
            d->st->splits++;
            dp_split(d, x, from, rs, m->cut[ci], rc - m->cut[ci], mask, &b);
        }
    if (from == &sub)
        fr_deinit(&sub);
    fb_end(d, &b);
    for (int32_t i = 0; i < out->n; i++)
        out->rec[i] = b.aux[i] == -3
                          ? b.from[i]
                          : trail_push(d, (trail){-1, 0, b.from[i], b.aux[i], b.aux2[i]});
    fb_free(&b);
    fr_deinit(in);
}

static void trail_walk(const dp *d, int32_t rec, int32_t *a);

un_status un_map_solve(un_ctx *ctx, un_map *m, double lambda, int32_t *a, un_map_stats *stats) {
    memset(stats, 0, sizeof *stats);
    int32_t n = m->n;
    for (int32_t v = 0; v < n; v++) {
        a[v] = -1;
        if (is_regular(m->g, v))
            stats->configs += un_map_config_count(m, v);
    }
    if (!m->have_tree) {
        stats->mem = m->base_mem;
        stats->cost = lambda * m->base_mem;
        return UN_OK;
    }
    dp d = {.m = m, .lambda = lambda, .st = stats, .max_states = m->p.max_states};
    d.assign = un_xmalloc(((size_t)n + 1) * sizeof *d.assign);
    d.slot = un_xmalloc((3 * (size_t)n + 1) * sizeof *d.slot);
    frontier f;
    fr_init(&f, NULL, 0);
    f.n = f.cap = 1;
    f.cost = un_xcalloc(1, sizeof *f.cost);
    f.key = un_xmalloc(sizeof *f.key);
    f.origin = un_xcalloc(1, sizeof *f.origin);
    f.rec = un_xmalloc(sizeof *f.rec);
    f.rec[0] = -1;
    frontier res;
    dp_run(&d, m->tree.root, &f, 0, m->p.devices, &res);
    un_status st = UN_OK;
    if (res.n == 0) {
        st = un_ctx_error(ctx, UN_ERR_INVALID, "mapping: no configuration of every node fits");
    } else {
        int32_t best = 0;
        for (int32_t i = 1; i < res.n; i++)
            if (res.cost[i] < res.cost[best])
                best = i;
        trail_walk(&d, res.rec[best], a);
        stats->cost = un_map_cost(m, a, lambda, &stats->time, &stats->mem);
    }
    fr_deinit(&res);
    free(d.t);
    free(d.assign);
    free(d.slot);
    return st;
}

const un_sp_tree *un_map_tree(const un_map *m) { return m->have_tree ? &m->tree : NULL; }

const un_sp_info *un_map_sp(const un_map *m) { return m->have_tree ? &m->sa : NULL; }

/* The assignment a trail record leads to (the nodes it names). */
static void trail_walk(const dp *d, int32_t rec, int32_t *a) {
    int32_t cap = 64, sp = 0; /* grown as needed: a walk visits its own records only */
    int32_t *stack = un_xmalloc((size_t)cap * sizeof *stack);
    if (rec >= 0)
        stack[sp++] = rec;
    while (sp > 0) {
        trail r = d->t[stack[--sp]];
        if (sp + 3 > cap) {
            cap *= 2;
            stack = un_xrealloc(stack, (size_t)cap * sizeof *stack);
        }
        if (r.v >= 0)
            a[r.v] = r.c;
        if (r.prev >= 0)
            stack[sp++] = r.prev;
        if (r.v < 0 && r.x >= 0)
            stack[sp++] = r.x;
        if (r.v < 0 && r.y >= 0)
            stack[sp++] = r.y;
    }
    free(stack);
}

/* ---- the memo's use in un_map_solve_piece ---- */

/* Child i of the root's series (the root itself when it is not a series). */
static const un_sp_node *piece_child(const un_map *m, int32_t i) {
    const un_sp_node *root = &m->tree.nodes[m->tree.root];
    return root->kind == UN_SP_SERIES ? &m->tree.nodes[m->tree.child[root->child_at + i]] : root;
}

static void stats_replay(un_map_stats *st, const un_map_stats *added) {
    st->states += added->states;
    st->splits += added->splits;
    st->parallels += added->parallels;
    st->pieces += added->pieces;
    if (added->max_frontier > st->max_frontier)
        st->max_frontier = added->max_frontier;
    st->beam |= added->beam;
}

/* Counts an answer: a whole run's (hits) or a frontier's (prefix_hits), and the nodes whose DP
 * it saves. */
static void memo_answer(un_map_memo *mm, const memo_entry *e, const un_map *m, bool prefix) {
    if (prefix) {
        mm->st.prefix_hits++;
    } else {
        mm->st.hits++;
        mm->st.hits_across += e->map_id != m->memo_id;
    }
    mm->st.nodes_saved += e->size;
}

/* A kept run's beam and counters: what run d added to st since `before`. */
static memo_entry memo_entry_of(const dp *d, int32_t size, int32_t nx, const un_map_stats *st,
                                const un_map_stats *before) {
    memo_entry r = {.size = size,
                    .nx = nx,
                    .beam = d->max_states,
                    .beamed = d->beamed,
                    .peak = d->peak,
                    .peak_split = d->peak_split,
                    .map_id = d->m->memo_id};
    r.added.states = st->states - before->states;
    r.added.splits = st->splits - before->splits;
    r.added.parallels = st->parallels - before->parallels;
    r.added.pieces = st->pieces - before->pieces;
    r.added.max_frontier = d->peak < d->max_states ? d->peak : d->max_states;
    r.added.beam = d->beamed;
    return r;
}

/* The key of the frontier after the piece's parts [child_begin, i): the part [child_begin, i)
 * as a piece without exit, whether the entry is read after it, and the tag 1 (a frontier). */
static bool prefix_key(const un_map *m, double lambda, int32_t child_begin, int32_t i, int32_t b,
                       int32_t entry, int32_t entry_cfg, memo_key *k) {
    int32_t e = piece_child(m, i - 1)->end;
    if (!piece_key(m, lambda, child_begin, i, b, e, entry, entry_cfg, -1, k))
        return false;
    mk_put(k, entry >= 0 && m->lastpos[entry] >= e);
    mk_put(k, 1);
    return true;
}

/* Where a frontier is kept: after a part that is a single node and the only one live (a cut
 * node), the frontier is one state per configuration of it, small, and what the runs of
 * candidates that differ only after it have in common. */
static bool prefix_point(const un_map *m, int32_t i, const frontier *f) {
    const un_sp_node *c = piece_child(m, i - 1);
    return c->kind == UN_SP_LEAF && (!f || (f->n_live == 1 && f->live[0] == c->node));
}

/* Keeps the frontier f after parts [child_begin, i) (states in order: cost, origin, key, and the
 * assignment of the parts' nodes) unless kept already. */
static void prefix_keep(dp *d, un_map_memo *mm, double lambda, int32_t child_begin, int32_t i,
                        int32_t b, int32_t entry, int32_t entry_cfg, const frontier *f,
                        const un_map_stats *before) {
    const un_map *m = d->m;
    memo_key k = {0};
    if (!prefix_point(m, i, f) || f->n == 0 ||
        !prefix_key(m, lambda, child_begin, i, b, entry, entry_cfg, &k)) {
        free(k.w);
        return;
    }
    uint64_t h = mk_hash(&k);
    if (memo_find(mm, &k, h, d->max_states)) {
        free(k.w);
        return;
    }
    int32_t size = piece_child(m, i - 1)->end - b;
    memo_entry r = memo_entry_of(d, size, f->n, d->st, before);
    r.n_live = 1;
    r.live = un_xmalloc(sizeof *r.live);
    r.live[0] = m->pos[f->live[0]] - b;
    r.cost = un_xmalloc(((size_t)f->n + 1) * sizeof *r.cost);
    r.fkey = un_xmalloc(((size_t)f->n + 1) * sizeof *r.fkey);
    r.origin = un_xmalloc(((size_t)f->n + 1) * sizeof *r.origin);
    r.assign = un_xmalloc(((size_t)f->n * (size_t)size + 1) * sizeof *r.assign);
    int32_t *a = un_xmalloc(((size_t)m->n + 1) * sizeof *a);
    for (int32_t s = 0; s < f->n; s++) {
        r.cost[s] = f->cost[s];
        r.fkey[s] = f->key[s];
        r.origin[s] = f->origin[s];
        for (int32_t j = 0; j < size; j++)
            a[m->tree.order[b + j]] = -1;
        trail_walk(d, f->rec[s], a);
        for (int32_t j = 0; j < size; j++)
            r.assign[(size_t)s * (size_t)size + (size_t)j] = a[m->tree.order[b + j]];
    }
    free(a);
    memo_keep(mm, &k, h, &r);
}

/* The longest kept frontier of the piece's parts [child_begin, i), i < child_end, set up in f
 * (its states' trails rebuilt, its counters replayed): returns i, or child_begin (f untouched)
 * when none is kept. */
static int32_t prefix_find(dp *d, un_map_memo *mm, double lambda, int32_t child_begin,
                           int32_t child_end, int32_t b, int32_t entry, int32_t entry_cfg,
                           frontier *f) {
    const un_map *m = d->m;
    for (int32_t i = child_end - 1; i > child_begin; i--) {
        if (!prefix_point(m, i, NULL))
            continue;
        memo_key k = {0};
        const memo_entry *e = NULL;
        if (prefix_key(m, lambda, child_begin, i, b, entry, entry_cfg, &k))
            e = memo_find(mm, &k, mk_hash(&k), d->max_states);
        free(k.w);
        if (!e)
            continue;
        memo_answer(mm, e, m, true);
        stats_replay(d->st, &e->added);
        if (e->beamed)
            d->beamed = true;
        if (e->peak > d->peak)
            d->peak = e->peak;
        if (e->peak_split > d->peak_split)
            d->peak_split = e->peak_split;
        int32_t v = m->tree.order[b + e->live[0]];
        fr_init(f, &v, 1);
        f->n = f->cap = e->nx;
        f->cost = un_xmalloc(((size_t)e->nx + 1) * sizeof *f->cost);
        f->key = un_xmalloc(((size_t)e->nx + 1) * sizeof *f->key);
        f->origin = un_xmalloc(((size_t)e->nx + 1) * sizeof *f->origin);
        f->rec = un_xmalloc(((size_t)e->nx + 1) * sizeof *f->rec);
        memcpy(f->cost, e->cost, (size_t)e->nx * sizeof *f->cost);
        memcpy(f->key, e->fkey, (size_t)e->nx * sizeof *f->key);
        memcpy(f->origin, e->origin, (size_t)e->nx * sizeof *f->origin);
        for (int32_t s = 0; s < e->nx; s++) {
            int32_t rec = -1;
            for (int32_t j = 0; j < e->size; j++)
                rec = trail_push(d, (trail){m->tree.order[b + j],
                                            e->assign[(size_t)s * (size_t)e->size + (size_t)j], rec,
                                            -1, -1});
            f->rec[s] = rec;
        }
        return i;
    }
    return child_begin;
}

un_status un_map_solve_piece(un_ctx *ctx, un_map *m, double lambda, int32_t child_begin,
                             int32_t child_end, int32_t entry, int32_t entry_cfg, int32_t exit,
                             int64_t max_states, double *cost, int32_t *assign, un_map_stats *st) {
    if (!m->have_tree)
        return un_ctx_error(ctx, UN_ERR_INVALID, "mapping: no regular node to split");
    const un_sp_node *root = &m->tree.nodes[m->tree.root];
    int32_t n_child = root->kind == UN_SP_SERIES ? root->n_child : 1;
    if (child_begin < 0 || child_end > n_child || child_begin >= child_end)
        return un_ctx_error(ctx, UN_ERR_INVALID, "mapping: piece [%d, %d) of %d parts",
                            (int)child_begin, (int)child_end, (int)n_child);
    int32_t nx = exit >= 0 ? un_map_config_count(m, exit) : 1;
    for (int32_t x = 0; x < nx; x++)
        cost[x] = INFINITY;
    dp d = {.m = m,
            .lambda = lambda,
            .st = st,
            .max_states = max_states > 0 ? max_states : m->p.max_states};
    /* the leaves order[b .. e) of the piece's parts */
    int32_t b = piece_child(m, child_begin)->begin;
    int32_t size = piece_child(m, child_end - 1)->end - b;
    un_map_memo *mm = m->p.memo && m->p.memo->cm == m->cm ? m->p.memo : NULL;
    memo_key key = {0};
    uint64_t h = 0;
    if (mm) {
        mm->st.solves++;
        mm->st.nodes += size;
        if (piece_key(m, lambda, child_begin, child_end, b, b + size, entry, entry_cfg, exit,
                      &key)) {
            mk_put(&key, 0); /* a whole run's results */
            h = mk_hash(&key);
            const memo_entry *e = memo_find(mm, &key, h, d.max_states);
            if (e) {
                memo_answer(mm, e, m, false);
                for (int32_t x = 0; x < nx; x++) {
                    cost[x] = e->cost[x];
                    if (isfinite(cost[x]))
                        for (int32_t i = 0; i < size; i++)
                            assign[(size_t)x * (size_t)m->n + (size_t)m->tree.order[b + i]] =
                                e->assign[(size_t)x * (size_t)size + (size_t)i];
                }
                stats_replay(st, &e->added);
                free(key.w);
                return UN_OK;
            }
        } else {
            free(key.w);
            mm = NULL;
        }
    }
    un_map_stats before = *st;
    d.assign = un_xmalloc(((size_t)m->n + 1) * sizeof *d.assign);
    d.slot = un_xmalloc((3 * (size_t)m->n + 1) * sizeof *d.slot);
    /* an exit nothing reads (a piece out of its graph) stays live: results per its configuration */
    int32_t exit_last = exit >= 0 ? m->lastpos[exit] : 0;
    if (exit >= 0 && m->lastpos[exit] == m->pos[exit])
        m->lastpos[exit] = INT32_MAX;
    frontier f;
    int32_t from = child_begin;
    if (mm)
        from = prefix_find(&d, mm, lambda, child_begin, child_end, b, entry, entry_cfg, &f);
    if (from == child_begin) {
        bool live = entry >= 0 && m->lastpos[entry] > m->pos[entry];
        fr_init(&f, &entry, live ? 1 : 0);
        f.n = f.cap = 1;
        f.cost = un_xcalloc(1, sizeof *f.cost);
        f.key = un_xmalloc(sizeof *f.key);
        f.key[0] = entry_cfg;
        f.origin = un_xcalloc(1, sizeof *f.origin);
        f.rec = un_xmalloc(sizeof *f.rec);
        f.rec[0] = -1;
    }
    for (int32_t i = from; i < child_end; i++) {
        int32_t x = root->kind == UN_SP_SERIES ? m->tree.child[root->child_at + i] : m->tree.root;
        frontier nf;
        dp_run(&d, x, &f, 0, m->p.devices, &nf);
        f = nf;
        if (mm && i + 1 < child_end)
            prefix_keep(&d, mm, lambda, child_begin, i + 1, b, entry, entry_cfg, &f, &before);
    }
    int32_t slot = -1;
    for (int32_t i = 0; i < f.n_live; i++)
        if (f.live[i] == exit)
            slot = i;
    int32_t *best = un_xmalloc(((size_t)nx + 1) * sizeof *best);
    for (int32_t x = 0; x < nx; x++)
        best[x] = -1;
    for (int32_t i = 0; i < f.n; i++) {
        int32_t x = slot >= 0 ? f.key[(size_t)i * (size_t)f.n_live + (size_t)slot] : 0;
        if (x < nx && (best[x] < 0 || f.cost[i] < f.cost[best[x]]))
            best[x] = i;
    }
    for (int32_t x = 0; x < nx; x++)
        if (best[x] >= 0) {
            cost[x] = f.cost[best[x]];
            trail_walk(&d, f.rec[best[x]], assign + (size_t)x * (size_t)m->n);
        }
    free(best);
    fr_deinit(&f);
    free(d.t);
    free(d.assign);
    free(d.slot);
    if (exit >= 0)
        m->lastpos[exit] = exit_last;
    if (mm) {
        memo_entry r = memo_entry_of(&d, size, nx, st, &before);
        r.cost = un_xmalloc(((size_t)nx + 1) * sizeof *r.cost);
        r.assign = un_xmalloc(((size_t)nx * (size_t)size + 1) * sizeof *r.assign);
        for (int32_t x = 0; x < nx; x++) {
            r.cost[x] = cost[x];
            for (int32_t i = 0; i < size; i++)
                r.assign[(size_t)x * (size_t)size + (size_t)i] =
                    isfinite(cost[x])
                        ? assign[(size_t)x * (size_t)m->n + (size_t)m->tree.order[b + i]]
                        : -1;
        }
        memo_keep(mm, &key, h, &r);
    }
    return UN_OK;
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
    int32_t start; /* first device of the consumer the conversion feeds */
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
    int32_t start = b->start + pieces <= b->devices ? b->start : 0;
    un_graph_node_set_view_range(b->ng, id, start, 1, (int32_t)pieces);
    b->cur = (un_ref){id, 0};
}

/* A cache of converted tensors: (source ref, layout) -> ref in the plan. */
typedef struct conv_memo {
    un_ref src;
    un_shape to;
    int32_t start;
    un_ref got;
} conv_memo;

static un_status convert(plan_builder *b, conv_memo **memo, int32_t *n_memo, un_ref src,
                         const un_shape *to, un_ref *out) {
    for (int32_t i = 0; i < *n_memo; i++)
        if ((*memo)[i].src.node == src.node && (*memo)[i].src.out == src.out &&
            (*memo)[i].start == b->start && un_shape_eq(&(*memo)[i].to, to)) {
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
    (*memo)[(*n_memo)++] = (conv_memo){src, *to, b->start, b->cur};
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
        b.start = c->start;
        for (int t = 0; t < nd->n_in && st == UN_OK; t++)
            st = convert(&b, &memo, &n_memo, map[nd->in[t].node * UN_MAX_OUTPUTS + nd->in[t].out],
                         &c->in[t], &ins[t]);
        if (st == UN_OK)
            st = un_graph_add(ctx, ng, nd->op, nd->params, ins, nd->n_in, nd->name, &nid);
        if (st != UN_OK)
            break;
        un_graph_node_set_view_range(ng, nid, c->start, 1, c->degree);
        /* a weight read whole by a node placed past device 0 lives on that node's device (a
         * weight with a conversion chain takes the chain's view when it is folded) */
        for (int t = 0; t < nd->n_in && c->start > 0; t++) {
            const un_node *src = un_graph_node(g, nd->in[t].node);
            un_ref wr = map[nd->in[t].node * UN_MAX_OUTPUTS];
            if (src->op == UN_OP_WEIGHT && ins[t].node == wr.node &&
                un_graph_node(ng, wr.node)->view.count == 0)
                un_graph_node_set_view_range(ng, wr.node, c->start, 1, 1);
        }
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
            b.start = 0;
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
