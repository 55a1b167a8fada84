/* sp.c - consumer lists, dominators, post-dominators and the series-parallel decomposition
 * (search/sp.h). Reachability is one bitset row per node (ancestors and descendants), built in
 * one pass each way over the id order; dominators use the intersection walk of Cooper, Harvey
 * and Kennedy, which on a DAG visited in topological order needs a single pass. */
#include "search/sp.h"

#include <stdlib.h>
#include <string.h>

#define NOT_IN (-3)

static bool takes_part(const un_sp_info *a, int32_t v) { return v >= 0 && v < a->n && a->in[v]; }

/* Nearest common dominator of x and y in the tree given by up[] (root: -1 for ROOT / SINK). */
static int32_t meet(const int32_t *up, const int32_t *depth, int32_t x, int32_t y) {
    while (x != y) {
        if (x < 0 || y < 0)
            return -1;
        if (depth[x] > depth[y])
            x = up[x];
        else if (depth[y] > depth[x])
            y = up[y];
        else {
            x = up[x];
            y = up[y];
        }
    }
    return x;
}

/* Visits every (producer, distinct consumer) edge once, consumers ascending: counts them into
 * cons_at[p + 1] (cons NULL) or writes them at cons[cons_at[p] ..]. */
static void consumer_pass(un_sp_info *a, int32_t *cons) {
    int32_t n = a->n;
    int32_t *last = un_xmalloc(((size_t)n + 1) * sizeof *last);
    int32_t *fill = un_xcalloc((size_t)n + 1, sizeof *fill);
    for (int32_t v = 0; v < n; v++)
        last[v] = -1;
    for (int32_t v = 0; v < n; v++) {
        if (!a->in[v])
            continue;
        const un_node *nd = un_graph_node(a->g, v);
        for (int t = 0; t < nd->n_in; t++) {
            int32_t p = nd->in[t].node;
            if (!takes_part(a, p) || last[p] == v)
                continue;
            last[p] = v;
            if (cons)
                cons[a->cons_at[p] + fill[p]++] = v;
            else
                a->cons_at[p + 1]++;
        }
    }
    free(fill);
    free(last);
}

un_status un_sp_analyse(un_ctx *ctx, const un_graph *g, const bool *mask, un_sp_info *out) {
    (void)ctx;
    memset(out, 0, sizeof *out);
    int32_t n = un_graph_node_count(g);
    un_sp_info *a = out;
    a->g = g;
    a->n = n;
    a->in = un_xcalloc((size_t)n + 1, sizeof *a->in);
    for (int32_t v = 0; v < n; v++) {
        a->in[v] = !mask || mask[v];
        a->n_in += a->in[v];
    }
    /* consumers: distinct, ascending; counted, then filled */
    a->cons_at = un_xcalloc((size_t)n + 1, sizeof *a->cons_at);
    consumer_pass(a, NULL);
    for (int32_t v = 0; v < n; v++)
        a->cons_at[v + 1] += a->cons_at[v];
    a->cons = un_xcalloc((size_t)a->cons_at[n] + 1, sizeof *a->cons);
    consumer_pass(a, a->cons);
    /* reachability */
    a->words = (n + 63) / 64;
    size_t w = (size_t)a->words;
    a->anc = un_xcalloc((size_t)n * w + 1, sizeof *a->anc);
    a->desc = un_xcalloc((size_t)n * w + 1, sizeof *a->desc);
    for (int32_t v = 0; v < n; v++) {
        if (!a->in[v])
            continue;
        const un_node *nd = un_graph_node(g, v);
        uint64_t *row = a->anc + (size_t)v * w;
        for (int t = 0; t < nd->n_in; t++) {
            int32_t p = nd->in[t].node;
            if (!takes_part(a, p))
                continue;
            const uint64_t *pr = a->anc + (size_t)p * w;
            for (size_t k = 0; k < w; k++)
                row[k] |= pr[k];
            row[p / 64] |= (uint64_t)1 << (p % 64);
        }
    }
    for (int32_t v = n - 1; v >= 0; v--) {
        if (!a->in[v])
            continue;
        uint64_t *row = a->desc + (size_t)v * w;
        for (int32_t k = a->cons_at[v]; k < a->cons_at[v + 1]; k++) {
            int32_t c = a->cons[k];
            const uint64_t *cr = a->desc + (size_t)c * w;
            for (size_t j = 0; j < w; j++)
                row[j] |= cr[j];
            row[c / 64] |= (uint64_t)1 << (c % 64);
        }
    }
    /* dominators, then post-dominators on the reversed graph */
    a->idom = un_xmalloc(((size_t)n + 1) * sizeof *a->idom);
    a->ipdom = un_xmalloc(((size_t)n + 1) * sizeof *a->ipdom);
    int32_t *depth = un_xcalloc((size_t)n + 1, sizeof *depth);
    for (int32_t v = 0; v < n; v++) {
        a->idom[v] = NOT_IN;
        if (!a->in[v])
            continue;
        const un_node *nd = un_graph_node(g, v);
        int32_t d = -2; /* none yet */
        for (int t = 0; t < nd->n_in; t++) {
            int32_t p = nd->in[t].node;
            if (!takes_part(a, p))
                continue;
            d = d == -2 ? p : meet(a->idom, depth, d, p);
        }
        a->idom[v] = d < 0 ? UN_SP_ROOT : d;
        depth[v] = d < 0 ? 1 : depth[d] + 1;
    }
    for (int32_t v = n - 1; v >= 0; v--) {
        a->ipdom[v] = NOT_IN;
        if (!a->in[v])
            continue;
        int32_t d = -2;
        for (int32_t k = a->cons_at[v]; k < a->cons_at[v + 1]; k++)
            d = d == -2 ? a->cons[k] : meet(a->ipdom, depth, d, a->cons[k]);
        a->ipdom[v] = d < 0 ? UN_SP_SINK : d;
        depth[v] = d < 0 ? 1 : depth[d] + 1;
    }
    /* meet() walks up[] until a negative entry: ROOT and SINK are both negative */
    free(depth);
    return UN_OK;
}

void un_sp_info_deinit(un_sp_info *a) {
    if (!a)
        return;
    free(a->in);
    free(a->cons_at);
    free(a->cons);
    free(a->idom);
    free(a->ipdom);
    free(a->anc);
    free(a->desc);
    memset(a, 0, sizeof *a);
}

bool un_sp_dominates(const un_sp_info *a, int32_t d, int32_t v) {
    if (!takes_part(a, v))
        return false;
    for (int32_t x = v; x >= 0; x = a->idom[x])
        if (x == d)
            return true;
    return d == UN_SP_ROOT;
}

bool un_sp_postdominates(const un_sp_info *a, int32_t p, int32_t v) {
    if (!takes_part(a, v))
        return false;
    for (int32_t x = v; x >= 0; x = a->ipdom[x])
        if (x == p)
            return true;
    return p == UN_SP_SINK;
}

/* ---- decomposition ---- */

typedef struct sp_builder {
    const un_sp_info *a;
    un_sp_tree *t;
    int32_t cap_nodes, cap_child, n_child;
    uint64_t *set; /* scratch: the current set as a bitset */
    int32_t *pos;  /* scratch: position of a node in the current set */
} sp_builder;

static int32_t popcount_and(const uint64_t *x, const uint64_t *y, const uint64_t *m, int32_t w) {
    int32_t c = 0;
    for (int32_t k = 0; k < w; k++)
        c += __builtin_popcountll((x[k] | y[k]) & m[k]);
    return c;
}

static void set_bits(uint64_t *set, int32_t w, const int32_t *s, int32_t n) {
    memset(set, 0, (size_t)w * sizeof *set);
    for (int32_t i = 0; i < n; i++)
        set[s[i] / 64] |= (uint64_t)1 << (s[i] % 64);
}

static bool reaches(const un_sp_info *a, int32_t u, int32_t v) {
    return (a->anc[(size_t)v * (size_t)a->words + (size_t)(u / 64)] >> (u % 64)) & 1;
}

/* Bottlenecks of s (ascending) into out; returns how many. Uses b->set. */
static int32_t bottlenecks(sp_builder *b, const int32_t *s, int32_t n, int32_t *out) {
    const un_sp_info *a = b->a;
    size_t w = (size_t)a->words;
    set_bits(b->set, a->words, s, n);
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t v = s[i];
        if (popcount_and(a->anc + (size_t)v * w, a->desc + (size_t)v * w, b->set, a->words) ==
            n - 1)
            out[k++] = v;
    }
    return k;
}

int32_t un_sp_cut_nodes(const un_sp_info *a, int32_t *out) {
    int32_t *s = un_xcalloc((size_t)a->n + 1, sizeof *s);
    int32_t *pos = un_xcalloc((size_t)a->n + 1, sizeof *pos);
    int32_t n = 0;
    for (int32_t v = 0; v < a->n; v++)
        if (a->in[v]) {
            pos[v] = n;
            s[n++] = v;
        }
    /* skip[i]: edges u -> w with pos(u) < i < pos(w), which pass around the node at i */
    int32_t *skip = un_xcalloc((size_t)n + 2, sizeof *skip);
    for (int32_t v = 0; v < a->n; v++)
        for (int32_t k = a->in[v] ? a->cons_at[v] : 0; a->in[v] && k < a->cons_at[v + 1]; k++) {
            skip[pos[v] + 1]++;
            skip[pos[a->cons[k]]]--;
        }
    for (int32_t i = 1; i <= n; i++)
        skip[i] += skip[i - 1];
    sp_builder b = {.a = a, .set = un_xcalloc((size_t)a->words + 1, sizeof(uint64_t))};
    int32_t *bn = un_xcalloc((size_t)n + 1, sizeof *bn);
    int32_t k = bottlenecks(&b, s, n, bn), m = 0;
    for (int32_t i = 0; i < k; i++)
        if (skip[pos[bn[i]]] == 0)
            out[m++] = bn[i];
    free(bn);
    free(skip);
    free(b.set);
    free(pos);
    free(s);
    return m;
}

static int32_t new_node(sp_builder *b, un_sp_kind kind) {
    un_sp_tree *t = b->t;
    if (t->n_nodes == b->cap_nodes) {
        b->cap_nodes = b->cap_nodes ? 2 * b->cap_nodes : 64;
        t->nodes = un_xrealloc(t->nodes, (size_t)b->cap_nodes * sizeof *t->nodes);
    }
    un_sp_node *x = &t->nodes[t->n_nodes];
    memset(x, 0, sizeof *x);
    x->kind = kind;
    x->node = -1;
    return t->n_nodes++;
}

static void set_children(sp_builder *b, int32_t id, const int32_t *kids, int32_t k) {
    un_sp_tree *t = b->t;
    if (b->n_child + k > b->cap_child) {
        while (b->n_child + k > b->cap_child)
            b->cap_child = b->cap_child ? 2 * b->cap_child : 64;
        t->child = un_xrealloc(t->child, (size_t)b->cap_child * sizeof *t->child);
    }
    memcpy(t->child + b->n_child, kids, (size_t)k * sizeof *kids);
    t->nodes[id].child_at = b->n_child;
    t->nodes[id].n_child = k;
    b->n_child += k;
}

static int32_t find_root(int32_t *up, int32_t x) {
    while (up[x] != x) {
        up[x] = up[up[x]];
        x = up[x];
    }
    return x;
}

/* Decomposes s (n node ids, ascending; s is the caller's and is reordered by nothing). Returns
 * the tree node. */
static int32_t build(sp_builder *b, const int32_t *s, int32_t n) {
    un_sp_tree *t = b->t;
    const un_sp_info *a = b->a;
    if (n == 1) {
        int32_t id = new_node(b, UN_SP_LEAF);
        t->nodes[id].node = s[0];
        t->nodes[id].begin = t->n_order;
        t->order[t->n_order++] = s[0];
        t->nodes[id].end = t->n_order;
        return id;
    }
    int32_t *part = un_xmalloc((size_t)n * sizeof *part); /* part index of each s[i] */
    int32_t *bn = un_xmalloc((size_t)n * sizeof *bn);
    int32_t n_parts = 0;
    un_sp_kind kind;
    bool forced = false;
    int32_t k = bottlenecks(b, s, n, bn);
    if (k > 0) {
        /* series: seg0, b1, seg1, ..., bk, segk; part = 2 * (bottlenecks before) (+1 itself) */
        kind = UN_SP_SERIES;
        for (int32_t i = 0, j = 0; i < n; i++) {
            if (j < k && s[i] == bn[j]) {
                part[i] = 2 * j + 1;
                j++;
            } else {
                int32_t before = 0;
                for (int32_t q = 0; q < k; q++)
                    before += reaches(a, bn[q], s[i]);
                part[i] = 2 * before;
            }
        }
        n_parts = 2 * k + 1;
    } else {
        /* weakly connected components */
        int32_t *up = un_xmalloc((size_t)n * sizeof *up);
        for (int32_t i = 0; i < n; i++) {
            up[i] = i;
            b->pos[s[i]] = i;
        }
        set_bits(b->set, a->words, s, n);
        for (int32_t i = 0; i < n; i++) {
            const un_node *nd = un_graph_node(a->g, s[i]);
            for (int q = 0; q < nd->n_in; q++) {
                int32_t p = nd->in[q].node;
                if (p >= 0 && a->in[p] && ((b->set[p / 64] >> (p % 64)) & 1)) {
                    int32_t x = find_root(up, i), y = find_root(up, b->pos[p]);
                    if (x != y)
                        up[x < y ? y : x] = x < y ? x : y;
                }
            }
        }
        int32_t *label = un_xmalloc((size_t)n * sizeof *label);
        for (int32_t i = 0; i < n; i++)
            label[i] = -1;
        for (int32_t i = 0; i < n; i++) {
            int32_t r = find_root(up, i);
            if (label[r] < 0)
                label[r] = n_parts++;
            part[i] = label[r];
        }
        free(label);
        free(up);
        kind = UN_SP_PARALLEL;
        if (n_parts == 1) {
            /* not series-parallel: cut along the order where the fewest edges cross */
            int32_t *diff = un_xcalloc((size_t)n + 2, sizeof *diff);
            for (int32_t i = 0; i < n; i++) {
                const un_node *nd = un_graph_node(a->g, s[i]);
                for (int q = 0; q < nd->n_in; q++) {
                    int32_t p = nd->in[q].node;
                    if (p >= 0 && a->in[p] && ((b->set[p / 64] >> (p % 64)) & 1)) {
                        diff[b->pos[p] + 1]++;
                        diff[i + 1]--;
                    }
                }
            }
            int32_t best = 1, best_cross = -1, cross = 0;
            for (int32_t i = 1; i < n; i++) {
                cross += diff[i];
                int32_t dm = abs(2 * i - n), db = abs(2 * best - n);
                if (best_cross < 0 || cross < best_cross || (cross == best_cross && dm < db)) {
                    best = i;
                    best_cross = cross;
                }
            }
            free(diff);
            for (int32_t i = 0; i < n; i++)
                part[i] = i < best ? 0 : 1;
            n_parts = 2;
            kind = UN_SP_SERIES;
            forced = true;
        }
    }
    free(bn);
    int32_t id = new_node(b, kind);
    t->nodes[id].forced = forced;
    t->nodes[id].begin = t->n_order;
    int32_t *kids = un_xmalloc((size_t)n_parts * sizeof *kids);
    int32_t *sub = un_xmalloc((size_t)n * sizeof *sub);
    int32_t nk = 0;
    for (int32_t p = 0; p < n_parts; p++) {
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++)
            if (part[i] == p)
                sub[m++] = s[i];
        if (m > 0)
            kids[nk++] = build(b, sub, m);
    }
    free(sub);
    free(part);
    set_children(b, id, kids, nk);
    free(kids);
    t->nodes[id].end = t->n_order;
    t->n_forced += forced;
    return id;
}

un_status un_sp_decompose(un_ctx *ctx, const un_sp_info *a, un_sp_tree *out) {
    memset(out, 0, sizeof *out);
    out->root = -1;
    if (a->n_in == 0)
        return un_ctx_error(ctx, UN_ERR_INVALID, "series-parallel decomposition: no nodes");
    int32_t *s = un_xcalloc((size_t)a->n + 1, sizeof *s);
    int32_t n = 0;
    for (int32_t v = 0; v < a->n; v++)
        if (a->in[v])
            s[n++] = v;
    out->order = un_xcalloc((size_t)n + 1, sizeof *out->order);
    sp_builder b = {.a = a,
                    .t = out,
                    .set = un_xcalloc((size_t)a->words + 1, sizeof(uint64_t)),
                    .pos = un_xcalloc((size_t)a->n + 1, sizeof(int32_t))};
    out->root = build(&b, s, n);
    free(b.set);
    free(b.pos);
    free(s);
    return UN_OK;
}

void un_sp_tree_deinit(un_sp_tree *t) {
    if (!t)
        return;
    free(t->nodes);
    free(t->child);
    free(t->order);
    memset(t, 0, sizeof *t);
}

static void tree_str(const un_sp_tree *t, const un_graph *g, int32_t id, int depth, un_buf *out) {
    const un_sp_node *x = &t->nodes[id];
    un_buf_printf(out, "%*s", 2 * depth, "");
    if (x->kind == UN_SP_LEAF) {
        const un_node *nd = un_graph_node(g, x->node);
        if (nd->name)
            un_buf_printf(out, "%s\n", nd->name);
        else
            un_buf_printf(out, "#%d\n", (int)x->node);
        return;
    }
    un_buf_printf(out, "%s%s\n", x->kind == UN_SP_SERIES ? "series" : "parallel",
                  x->forced ? " (forced)" : "");
    for (int32_t i = 0; i < x->n_child; i++)
        tree_str(t, g, t->child[x->child_at + i], depth + 1, out);
}

void un_sp_tree_str(const un_sp_tree *t, const un_graph *g, un_buf *out) {
    if (t->root >= 0)
        tree_str(t, g, t->root, 0, out);
}
