/* graph.c - the parallel computation graph: a growable node array with shapes inferred at add
 * time, a name index, the implicit outputs kept up to date as nodes are added, the canonical order
 * and hash (cached only when un_graph_canonicalize asks)
 * (DESIGN.md section 5), JSON read/write and Graphviz DOT. It does not evaluate graphs (eval.c) nor
 * rewrite them (search/). Node ids are assigned in insertion order; since a node's inputs must
 * exist when it is added, id order is always topological.
 */
#include "pcg/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the graph ----------------------------------------------------------------------------------
 */

/* Open-addressing table of node ids keyed by name; the names live elsewhere (name_fn). */
typedef struct name_table {
    int32_t *slot; /* -1 = empty */
    uint32_t cap;  /* power of two, or 0 */
    int32_t count;
} name_table;

typedef const char *(*name_fn)(const void *owner, int32_t id);

struct un_graph {
    const un_spec *spec;
    un_node *nodes;
    int32_t n_nodes, cap_nodes;
    name_table names;
    bool outs_explicit;
    bool hash_no_dims; /* the canonical hash ignores the sources' dims (rules) */
    un_ref *outs;      /* explicit outputs */
    int32_t n_outs;
    /* Derived data. Every mutation keeps it right or drops it, and no const query writes it, so a
     * const graph may be queried from many threads at once. */
    uint8_t *used; /* per node: bit k set when output k is consumed (cap_nodes entries) */
    un_ref *iouts; /* implicit outputs: unconsumed references, in node then output order */
    int32_t n_iouts, cap_iouts;
    bool canon_ok; /* canon and hash hold the canonical form (un_graph_canonicalize) */
    int32_t *canon;
    uint64_t hash;
};

static uint64_t name_hash(const char *s, size_t len) { return un_hash_bytes(s, len, 0x6e616d65u); }

static bool name_match(const char *have, const char *s, size_t len) {
    return strncmp(have, s, len) == 0 && have[len] == '\0';
}

/* The id stored under the first len bytes of s, or -1. */
static int32_t table_find(const name_table *t, const char *s, size_t len, name_fn fn,
                          const void *owner) {
    if (!t->cap)
        return -1;
    uint32_t mask = t->cap - 1;
    for (uint32_t i = (uint32_t)name_hash(s, len) & mask;; i = (i + 1) & mask) {
        int32_t id = t->slot[i];
        if (id < 0)
            return -1;
        if (name_match(fn(owner, id), s, len))
            return id;
    }
}

static void table_put(name_table *t, int32_t id, const char *name) {
    uint32_t mask = t->cap - 1;
    uint32_t i = (uint32_t)name_hash(name, strlen(name)) & mask;
    while (t->slot[i] >= 0)
        i = (i + 1) & mask;
    t->slot[i] = id;
}

/* Inserts id (whose name must not be present yet), growing the table to keep it half empty. */
static void table_insert(name_table *t, int32_t id, name_fn fn, const void *owner) {
    if ((uint32_t)(t->count + 1) * 2 > t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 16;
        int32_t *old = t->slot;
        uint32_t old_cap = t->cap;
        t->slot = un_xmalloc(cap * sizeof *t->slot);
        memset(t->slot, 0xff, cap * sizeof *t->slot);
        t->cap = cap;
        for (uint32_t i = 0; i < old_cap; i++)
            if (old[i] >= 0)
                table_put(t, old[i], fn(owner, old[i]));
        free(old);
    }
    table_put(t, id, fn(owner, id));
    t->count++;
}

static const char *graph_name_of(const void *owner, int32_t id) {
    const un_graph *g = owner;
    return g->nodes[id].name;
}

static void graph_touch(un_graph *g) { g->canon_ok = false; }

un_graph *un_graph_new(const un_spec *spec) {
    UN_ASSERT(spec != NULL);
    un_graph *g = un_xcalloc(1, sizeof *g);
    g->spec = spec;
    return g;
}

void un_graph_free(un_graph *g) {
    if (!g)
        return;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        free(g->nodes[i].name);
        free(g->nodes[i].view.dev);
    }
    free(g->nodes);
    free(g->names.slot);
    free(g->outs);
    free(g->used);
    free(g->iouts);
    free(g->canon);
    free(g);
}

un_graph *un_graph_clone(const un_graph *g) {
    un_graph *c = un_graph_new(g->spec);
    c->n_nodes = c->cap_nodes = g->n_nodes;
    c->nodes = un_xmalloc((size_t)g->n_nodes * sizeof *c->nodes);
    c->used = un_xmalloc((size_t)g->n_nodes + 1);
    if (g->n_nodes) {
        memcpy(c->nodes, g->nodes, (size_t)g->n_nodes * sizeof *c->nodes);
        memcpy(c->used, g->used, (size_t)g->n_nodes);
    }
    c->n_iouts = c->cap_iouts = g->n_iouts;
    c->iouts = un_xmalloc((size_t)g->n_iouts * sizeof *c->iouts + 1);
    if (g->n_iouts)
        memcpy(c->iouts, g->iouts, (size_t)g->n_iouts * sizeof *c->iouts);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].name)
            c->nodes[i].name = un_xstrdup(g->nodes[i].name);
        c->nodes[i].view = (un_view){0};
        un_graph_node_set_view(c, i, g->nodes[i].view);
    }
    c->names = g->names;
    if (g->names.cap) {
        c->names.slot = un_xmalloc(g->names.cap * sizeof *c->names.slot);
        memcpy(c->names.slot, g->names.slot, g->names.cap * sizeof *c->names.slot);
    }
    c->outs_explicit = g->outs_explicit;
    c->hash_no_dims = g->hash_no_dims;
    c->n_outs = g->n_outs;
    if (g->n_outs) {
        c->outs = un_xmalloc((size_t)g->n_outs * sizeof *c->outs);
        memcpy(c->outs, g->outs, (size_t)g->n_outs * sizeof *c->outs);
    }
    return c;
}

/* ---- queries ------------------------------------------------------------------------------------
 */

const un_spec *un_graph_spec(const un_graph *g) { return g->spec; }
int32_t un_graph_node_count(const un_graph *g) { return g->n_nodes; }

const un_node *un_graph_node(const un_graph *g, int32_t id) {
    UN_ASSERT(id >= 0 && id < g->n_nodes);
    return &g->nodes[id];
}

const un_shape *un_graph_shape(const un_graph *g, un_ref r) {
    UN_ASSERT(r.node >= 0 && r.node < g->n_nodes);
    UN_ASSERT(r.out >= 0 && r.out < g->nodes[r.node].inf.n_out);
    return &g->nodes[r.node].inf.out[r.out];
}

int32_t un_graph_find(const un_graph *g, const char *name) {
    if (!name)
        return -1;
    return table_find(&g->names, name, strlen(name), graph_name_of, g);
}

int32_t un_graph_output_count(const un_graph *g) {
    return g->outs_explicit ? g->n_outs : g->n_iouts;
}

un_ref un_graph_output(const un_graph *g, int32_t i) {
    UN_ASSERT(i >= 0 && i < un_graph_output_count(g));
    return g->outs_explicit ? g->outs[i] : g->iouts[i];
}

/* ---- canonical order and hash -------------------------------------------------------------------
 */

/* Parameters are normalised at add time (unused items zeroed), so hashing len and the used items
 * of the op's parameters is exact. */
static uint64_t hash_params(const un_graph *g, const un_node *nd, uint64_t h) {
    const un_op_spec *os = un_spec_op(g->spec, nd->op);
    int skip = g->hash_no_dims && os->kind == UN_OPK_SOURCE ? un_spec_param_index(os, "shape") : -1;
    for (int i = 0; i < os->n_params; i++) {
        const un_param *p = &nd->params[i];
        h = un_hash_combine(h, (uint64_t)(int64_t)p->len);
        int n = i == skip ? 0 : p->len < 0 ? 1 : p->len;
        for (int k = 0; k < n; k++)
            h = un_hash_combine(h, (uint64_t)p->v[k]);
    }
    return h;
}

static uint64_t hash3(uint64_t a, uint64_t b, uint64_t c) {
    return un_hash_combine(un_hash_combine(un_mix64(a), b), c);
}

/* Consumers of every node as a CSR list of (consumer, argument position). */
typedef struct edge_list {
    int32_t *start; /* n + 1 */
    int32_t *user;
    int32_t *arg;
} edge_list;

static void edges_build(const un_graph *g, edge_list *e) {
    int32_t n = g->n_nodes, m = 0;
    e->start = un_xcalloc((size_t)n + 1, sizeof *e->start);
    for (int32_t v = 0; v < n; v++)
        for (int32_t j = 0; j < g->nodes[v].n_in; j++)
            e->start[g->nodes[v].in[j].node + 1]++, m++;
    for (int32_t v = 0; v < n; v++)
        e->start[v + 1] += e->start[v];
    e->user = un_xmalloc((size_t)(m ? m : 1) * sizeof *e->user);
    e->arg = un_xmalloc((size_t)(m ? m : 1) * sizeof *e->arg);
    int32_t *fill = un_xmalloc((size_t)(n ? n : 1) * sizeof *fill);
    for (int32_t v = 0; v < n; v++)
        fill[v] = e->start[v];
    for (int32_t v = 0; v < n; v++)
        for (int32_t j = 0; j < g->nodes[v].n_in; j++) {
            int32_t s = g->nodes[v].in[j].node;
            e->user[fill[s]] = v;
            e->arg[fill[s]] = j;
            fill[s]++;
        }
    free(fill);
}

static void edges_free(edge_list *e) {
    free(e->start);
    free(e->user);
    free(e->arg);
}

/* Working state of the canonical labelling. */
typedef struct canon_state {
    const un_graph *g;
    int32_t n;
    edge_list e;
    uint64_t *col;     /* current colour per node */
    uint64_t *nxt;     /* next colour (refinement rounds) */
    uint64_t *marks;   /* order-independent hash of the explicit output positions at each node */
    uint64_t *scratch; /* sorting */
} canon_state;

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int32_t count_distinct(canon_state *s) {
    if (!s->n)
        return 0;
    memcpy(s->scratch, s->col, (size_t)s->n * sizeof *s->col);
    qsort(s->scratch, (size_t)s->n, sizeof *s->scratch, cmp_u64);
    int32_t d = 1;
    for (int32_t i = 1; i < s->n; i++)
        d += s->scratch[i] != s->scratch[i - 1];
    return d;
}

/* Hash of the consumers of v: the multiset of (consumer colour, argument position, output). */
static uint64_t consumers_hash(const canon_state *s, const uint64_t *col, int32_t v) {
    uint64_t sum = s->marks[v];
    for (int32_t k = s->e.start[v]; k < s->e.start[v + 1]; k++) {
        int32_t u = s->e.user[k], j = s->e.arg[k];
        sum += un_mix64(hash3(col[u], (uint64_t)j, (uint64_t)s->g->nodes[u].in[j].out));
    }
    return sum;
}

/* Refines the colouring (classes only ever split): one bottom-up sweep in id (topological) order
 * folding each node's inputs in argument order, one top-down sweep folding its consumers, then
 * rounds mixing both directions until the number of classes stops growing. The sweeps carry
 * information along whole paths at once, so few rounds are needed. */
static void refine(canon_state *s) {
    const un_graph *g = s->g;
    uint64_t *col = s->col;
    for (int32_t v = 0; v < s->n; v++) {
        const un_node *nd = &g->nodes[v];
        uint64_t h = hash3(0x75700000u, col[v], (uint64_t)nd->n_in);
        for (int32_t j = 0; j < nd->n_in; j++)
            h = hash3(h, col[nd->in[j].node], (uint64_t)nd->in[j].out);
        col[v] = h;
    }
    for (int32_t v = s->n - 1; v >= 0; v--)
        col[v] = hash3(0x646f776eu, col[v], consumers_hash(s, col, v));
    int32_t distinct = count_distinct(s);
    for (int round = 0; round < 64 && distinct < s->n; round++) {
        for (int32_t v = 0; v < s->n; v++) {
            const un_node *nd = &g->nodes[v];
            uint64_t h = s->col[v];
            for (int32_t j = 0; j < nd->n_in; j++)
                h = hash3(h, s->col[nd->in[j].node], (uint64_t)nd->in[j].out);
            s->nxt[v] = hash3(0x776c0000u, h, consumers_hash(s, s->col, v));
        }
        uint64_t *t = s->col;
        s->col = s->nxt;
        s->nxt = t;
        int32_t d = count_distinct(s);
        if (d <= distinct)
            break;
        distinct = d;
    }
}

/* Min-heap of node ids by (colour, id). */
typedef struct heap {
    int32_t *a;
    int32_t n;
    const canon_state *s;
} heap;

static bool heap_less(const heap *h, int32_t x, int32_t y) {
    const uint64_t *col = h->s->col;
    return col[x] != col[y] ? col[x] < col[y] : x < y;
}

static void heap_push(heap *h, int32_t v) {
    int32_t i = h->n++;
    h->a[i] = v;
    while (i > 0 && heap_less(h, h->a[i], h->a[(i - 1) / 2])) {
        int32_t p = (i - 1) / 2, t = h->a[p];
        h->a[p] = h->a[i];
        h->a[i] = t;
        i = p;
    }
}

static int32_t heap_pop(heap *h) {
    int32_t top = h->a[0];
    h->a[0] = h->a[--h->n];
    for (int32_t i = 0;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && heap_less(h, h->a[l], h->a[m]))
            m = l;
        if (r < h->n && heap_less(h, h->a[r], h->a[m]))
            m = r;
        if (m == i)
            break;
        int32_t t = h->a[m];
        h->a[m] = h->a[i];
        h->a[i] = t;
        i = m;
    }
    return top;
}

/* Re-establishes the heap order after the colours changed. */
static void heap_rebuild(heap *h) {
    int32_t n = h->n;
    h->n = 0;
    for (int32_t i = 0; i < n; i++)
        heap_push(h, h->a[i]);
}

static bool is_source(const un_node *nd) { return un_op_kind_of(nd->op) == UN_OPK_SOURCE; }

/* Colour classes of the unplaced non-source nodes: sorted distinct colours and their sizes. */
typedef struct classes {
    uint64_t *col;
    int32_t *cnt;
    int32_t n;
} classes;

static void classes_build(classes *k, const canon_state *s, const int32_t *pos) {
    int32_t m = 0;
    for (int32_t v = 0; v < s->n; v++)
        if (pos[v] < 0 && !is_source(&s->g->nodes[v]))
            s->scratch[m++] = s->col[v];
    qsort(s->scratch, (size_t)m, sizeof *s->scratch, cmp_u64);
    k->n = 0;
    for (int32_t i = 0; i < m; i++) {
        if (k->n && k->col[k->n - 1] == s->scratch[i]) {
            k->cnt[k->n - 1]++;
            continue;
        }
        k->col[k->n] = s->scratch[i];
        k->cnt[k->n++] = 1;
    }
}

/* Removes one member of colour c (present); returns how many shared it before. */
static int32_t classes_take(classes *k, uint64_t c) {
    int32_t lo = 0, hi = k->n - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (k->col[mid] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    UN_ASSERT(k->n > 0 && k->col[lo] == c);
    return k->cnt[lo]--;
}

/* The canonical form. Names and ids never enter it.
 *  1. Colour every node by op and params (a source's params are its shape and dtype), then refine
 *     (refine above): inputs in argument order with output index, consumers with argument
 *     position, explicit output positions.
 *  2. Order the non-source nodes by Kahn's algorithm, taking the ready node of smallest colour.
 *     When another unplaced node shares the chosen node's colour, the choice is individualised (its
 *     colour gets its position) and the colouring refined again before the next choice, so later
 *     choices are made relative to it (individualisation-refinement, taking the first branch).
 *  3. Put the sources first, numbered by first use (consumers in canonical order, arguments in
 *     order, then explicit outputs); unused sources follow by colour.
 *  4. Hash the sequence, each input referenced by its canonical position, then the outputs.
 * A tie among equal colours is broken by node id. When the tied nodes are automorphic (swapped by
 * a symmetry of the graph, e.g. two identical branches) every choice yields the same sequence, and
 * that is what remains in practice. Colour refinement can in theory leave non-automorphic nodes
 * tied (as in some regular graphs); there the hash may depend on insertion order. Cost: one
 * refinement, O(E + n log n) per round, plus one more per tied choice, so k mutually symmetric
 * nodes (k identical branches) cost O(k (E + n log n)). */
static void canon_compute(const un_graph *g, int32_t *canon, uint64_t *hash) {
    int32_t n = g->n_nodes;
    size_t nn = (size_t)(n ? n : 1);
    canon_state s = {.g = g, .n = n};
    edges_build(g, &s.e);
    s.col = un_xmalloc(nn * sizeof *s.col);
    s.nxt = un_xmalloc(nn * sizeof *s.nxt);
    s.scratch = un_xmalloc(nn * sizeof *s.scratch);
    s.marks = un_xcalloc(nn, sizeof *s.marks);
    for (int32_t p = 0; g->outs_explicit && p < g->n_outs; p++)
        s.marks[g->outs[p].node] +=
            un_mix64(hash3(0x6f7574u, (uint64_t)p, (uint64_t)g->outs[p].out));
    for (int32_t v = 0; v < n; v++) {
        const un_node *nd = &g->nodes[v];
        uint64_t h = hash_params(g, nd, hash3(0x6f700000u, (uint64_t)nd->op, (uint64_t)nd->n_in));
        /* Which arguments are the same tensor: colour refinement cannot see that ew_add(x, x)
         * differs from ew_add(x, y) when x and y look alike. */
        for (int32_t j = 1; j < nd->n_in; j++)
            for (int32_t k = 0; k < j; k++)
                if (nd->in[j].node == nd->in[k].node && nd->in[j].out == nd->in[k].out) {
                    h = hash3(h, (uint64_t)j, (uint64_t)k);
                    break;
                }
        s.col[v] = h;
    }
    refine(&s);

    /* Kahn over the non-source nodes; sources count as available. */
    int32_t *indeg = un_xcalloc(nn, sizeof *indeg);
    int32_t *pos = un_xmalloc(nn * sizeof *pos); /* canonical position, -1 = not placed */
    int32_t *ops = un_xmalloc(nn * sizeof *ops);
    int32_t n_ops = 0;
    heap h = {.a = un_xmalloc(nn * sizeof(int32_t)), .n = 0, .s = &s};
    for (int32_t v = 0; v < n; v++) {
        pos[v] = -1;
        if (is_source(&g->nodes[v]))
            continue;
        for (int32_t j = 0; j < g->nodes[v].n_in; j++)
            indeg[v] += !is_source(&g->nodes[g->nodes[v].in[j].node]);
        if (!indeg[v])
            heap_push(&h, v);
    }
    classes cls = {.col = un_xmalloc(nn * sizeof(uint64_t)),
                   .cnt = un_xmalloc(nn * sizeof(int32_t))};
    classes_build(&cls, &s, pos);
    while (h.n) {
        int32_t v = heap_pop(&h);
        pos[v] = n_ops; /* provisional: marks v as placed */
        ops[n_ops++] = v;
        if (classes_take(&cls, s.col[v]) > 1) {
            s.col[v] = hash3(0x696e6476u, s.col[v], (uint64_t)n_ops);
            refine(&s);
            heap_rebuild(&h);
            classes_build(&cls, &s, pos);
        }
        for (int32_t k = s.e.start[v]; k < s.e.start[v + 1]; k++)
            if (--indeg[s.e.user[k]] == 0)
                heap_push(&h, s.e.user[k]);
    }

    /* Sources by first use, then unused ones by colour; then the ops. */
    for (int32_t v = 0; v < n; v++)
        pos[v] = -1;
    int32_t m = 0;
    for (int32_t i = 0; i < n_ops; i++) {
        const un_node *nd = &g->nodes[ops[i]];
        for (int32_t j = 0; j < nd->n_in; j++) {
            int32_t src = nd->in[j].node;
            if (is_source(&g->nodes[src]) && pos[src] < 0)
                canon[pos[src] = m++] = src;
        }
    }
    for (int32_t p = 0; g->outs_explicit && p < g->n_outs; p++) {
        int32_t src = g->outs[p].node;
        if (is_source(&g->nodes[src]) && pos[src] < 0)
            canon[pos[src] = m++] = src;
    }
    h.n = 0;
    for (int32_t v = 0; v < n; v++)
        if (is_source(&g->nodes[v]) && pos[v] < 0)
            heap_push(&h, v);
    while (h.n) {
        int32_t v = heap_pop(&h);
        canon[pos[v] = m++] = v;
    }
    for (int32_t i = 0; i < n_ops; i++)
        canon[pos[ops[i]] = m++] = ops[i];
    UN_ASSERT(m == n); /* ids are topological, so Kahn placed every node */

    uint64_t hh = hash3(0x70636721u, (uint64_t)n, 0);
    for (int32_t i = 0; i < n; i++) {
        const un_node *nd = &g->nodes[canon[i]];
        hh = hash_params(g, nd, hash3(hh, (uint64_t)nd->op, (uint64_t)nd->n_in));
        for (int32_t j = 0; j < nd->n_in; j++)
            hh = hash3(hh, (uint64_t)pos[nd->in[j].node], (uint64_t)nd->in[j].out);
    }
    hh = hash3(hh, g->outs_explicit, (uint64_t)(g->outs_explicit ? g->n_outs : 0));
    for (int32_t p = 0; g->outs_explicit && p < g->n_outs; p++)
        hh = hash3(hh, (uint64_t)pos[g->outs[p].node], (uint64_t)g->outs[p].out);
    *hash = hh;

    free(cls.col);
    free(cls.cnt);
    free(h.a);
    free(ops);
    free(pos);
    free(indeg);
    free(s.marks);
    free(s.scratch);
    free(s.nxt);
    free(s.col);
    edges_free(&s.e);
}

void un_graph_hash_ignore_dims(un_graph *g, bool on) {
    if (g->hash_no_dims != on) {
        g->hash_no_dims = on;
        graph_touch(g);
    }
}

void un_graph_canonicalize(un_graph *g) {
    if (g->canon_ok)
        return;
    free(g->canon);
    g->canon = un_xmalloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *g->canon);
    canon_compute(g, g->canon, &g->hash);
    g->canon_ok = true;
}

uint64_t un_graph_hash(const un_graph *g) {
    if (g->canon_ok)
        return g->hash;
    int32_t *canon = un_xmalloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *canon);
    uint64_t h;
    canon_compute(g, canon, &h);
    free(canon);
    return h;
}

void un_graph_canonical_order(const un_graph *g, int32_t *order) {
    if (!g->canon_ok) {
        uint64_t h;
        canon_compute(g, order, &h);
    } else if (g->n_nodes) {
        memcpy(order, g->canon, (size_t)g->n_nodes * sizeof *order);
    }
}

/* ---- mutation -----------------------------------------------------------------------------------
 */

/* Zeroes what a parameter does not use, so nodes compare and hash by content. */
static void param_normalize(un_param *p) {
    int used = p->len < 0 ? 1 : p->len;
    if (p->len < 0)
        p->len = -1;
    for (int k = used; k < UN_MAX_DIMS; k++)
        p->v[k] = 0;
}

static un_status check_name(un_ctx *ctx, const un_graph *g, const char *name) {
    if (!*name)
        return un_ctx_error(ctx, UN_ERR_INVALID, "node names must not be empty");
    if (strchr(name, ':'))
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "node name '%s' contains ':' (reserved for output references)", name);
    if (un_graph_find(g, name) >= 0)
        return un_ctx_error(ctx, UN_ERR_INVALID, "duplicate node name '%s'", name);
    return UN_OK;
}

/* Keeps the implicit outputs right when node id is added: the references it consumes leave the
 * list (it stays in node then output order), and its own outputs join at the end. */
static void iouts_add(un_graph *g, int32_t id) {
    _Static_assert(UN_MAX_OUTPUTS <= 8, "consumed-output mask is 8 bits");
    const un_node *nd = &g->nodes[id];
    for (int32_t j = 0; j < nd->n_in; j++) {
        un_ref r = nd->in[j];
        if (g->used[r.node] >> r.out & 1u)
            continue;
        g->used[r.node] |= (uint8_t)(1u << r.out);
        int32_t lo = 0, hi = g->n_iouts; /* first entry not before r */
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            un_ref m = g->iouts[mid];
            if (m.node < r.node || (m.node == r.node && m.out < r.out))
                lo = mid + 1;
            else
                hi = mid;
        }
        UN_ASSERT(lo < g->n_iouts && g->iouts[lo].node == r.node && g->iouts[lo].out == r.out);
        memmove(&g->iouts[lo], &g->iouts[lo + 1], (size_t)(g->n_iouts - lo - 1) * sizeof *g->iouts);
        g->n_iouts--;
    }
    if (g->n_iouts + nd->inf.n_out > g->cap_iouts) {
        g->cap_iouts = (g->n_iouts + nd->inf.n_out) * 2;
        g->iouts = un_xrealloc(g->iouts, (size_t)g->cap_iouts * sizeof *g->iouts);
    }
    for (int32_t k = 0; k < nd->inf.n_out; k++)
        g->iouts[g->n_iouts++] = (un_ref){id, k};
}

/* un_graph_add, inferring the node unless inf is given. */
static un_status graph_add(un_ctx *ctx, un_graph *g, un_op op, const un_param *params,
                           const un_ref *in, int n_in, const char *name, const un_infer *inf,
                           int32_t *out) {
    if (out)
        *out = -1;
    char label[48];
    const char *lbl = name;
    if (!lbl) { /* formatted only when a message can be built: this is every graph's hot path */
        lbl = "node";
        if (ctx && un_ctx_status(ctx) == UN_OK) {
            snprintf(label, sizeof label, "node %d", (int)g->n_nodes);
            lbl = label;
        }
    }
    if ((unsigned)op >= UN_OP_COUNT)
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: unknown op %d", lbl, (int)op);
    const un_op_spec *os = un_spec_op(g->spec, op);
    if (!os)
        return un_ctx_error(ctx, UN_ERR_SPEC, "%s: op '%s' has no spec", lbl, un_op_name(op));
    if (n_in < 0 || n_in > UN_MAX_INPUTS || (n_in > 0 && !in))
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s (%s): %d inputs (at most %d)", lbl, os->name,
                            n_in, UN_MAX_INPUTS);
    if (name) {
        un_status st = check_name(ctx, g, name);
        if (st != UN_OK)
            return st;
    }

    un_node node;
    memset(&node, 0, sizeof node);
    node.op = op;
    if (params)
        memcpy(node.params, params, (size_t)os->n_params * sizeof *params);
    else
        un_spec_param_defaults(os, node.params);
    for (int i = os->n_params; i < UN_MAX_PARAMS; i++) { /* as un_spec_param_defaults leaves them */
        memset(&node.params[i], 0, sizeof node.params[i]);
        node.params[i].len = -1;
    }
    for (int i = 0; i < os->n_params; i++) {
        char why[160];
        param_normalize(&node.params[i]);
        if (!un_spec_param_valid(&os->params[i], &node.params[i], why, sizeof why))
            return un_ctx_error(ctx, UN_ERR_INVALID, "%s (%s): parameter '%s': %s", lbl, os->name,
                                os->params[i].name, why);
    }
    un_shape shapes[UN_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) {
        un_ref r = in[i];
        if (r.node < 0 || r.node >= g->n_nodes)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "%s (%s): input %d refers to node %d, which does not exist "
                                "(the graph has %d nodes)",
                                lbl, os->name, i, (int)r.node, (int)g->n_nodes);
        const un_node *src = &g->nodes[r.node];
        if (r.out < 0 || r.out >= src->inf.n_out) {
            char sl[48];
            snprintf(sl, sizeof sl, "node %d", (int)r.node);
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "%s (%s): input %d refers to output %d of '%s', which has %d "
                                "output%s",
                                lbl, os->name, i, (int)r.out, src->name ? src->name : sl,
                                src->inf.n_out, src->inf.n_out == 1 ? "" : "s");
        }
        node.in[i] = r;
        shapes[i] = src->inf.out[r.out];
    }
    node.n_in = n_in;
    if (inf) {
        node.inf = *inf;
    } else {
        un_status st = un_spec_infer(ctx, g->spec, op, node.params, shapes, n_in, lbl, &node.inf);
        if (st != UN_OK)
            return st;
    }
    UN_ASSERT(node.inf.n_out >= 0 && node.inf.n_out <= UN_MAX_OUTPUTS);

    if (g->n_nodes == g->cap_nodes) {
        g->cap_nodes = g->cap_nodes ? g->cap_nodes * 2 : 16;
        g->nodes = un_xrealloc(g->nodes, (size_t)g->cap_nodes * sizeof *g->nodes);
        g->used = un_xrealloc(g->used, (size_t)g->cap_nodes);
    }
    int32_t id = g->n_nodes++;
    node.name = name ? un_xstrdup(name) : NULL;
    g->nodes[id] = node;
    g->used[id] = 0;
    if (name)
        table_insert(&g->names, id, graph_name_of, g);
    iouts_add(g, id);
    graph_touch(g);
    if (out)
        *out = id;
    return UN_OK;
}

un_status un_graph_add(un_ctx *ctx, un_graph *g, un_op op, const un_param *params, const un_ref *in,
                       int n_in, const char *name, int32_t *out) {
    return graph_add(ctx, g, op, params, in, n_in, name, NULL, out);
}

un_status un_graph_add_inferred(un_ctx *ctx, un_graph *g, un_op op, const un_param *params,
                                const un_ref *in, int n_in, const char *name, const un_infer *inf,
                                int32_t *out) {
    return graph_add(ctx, g, op, params, in, n_in, name, inf, out);
}

un_status un_graph_add_input(un_ctx *ctx, un_graph *g, const char *name, un_op op, int rank,
                             const int64_t *dims, int32_t *out) {
    if (out)
        *out = -1;
    if ((unsigned)op >= UN_OP_COUNT || un_op_kind_of(op) != UN_OPK_SOURCE)
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: op %s is not a source op (input, weight)",
                            name ? name : "input",
                            (unsigned)op < UN_OP_COUNT ? un_op_name(op) : "?");
    if (rank < 0 || rank > UN_MAX_DIMS || (rank > 0 && !dims))
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: rank %d outside 0..%d", name ? name : "input",
                            rank, UN_MAX_DIMS);
    const un_op_spec *os = un_spec_op(g->spec, op);
    if (!os)
        return un_ctx_error(ctx, UN_ERR_SPEC, "op '%s' has no spec", un_op_name(op));
    int ip = un_spec_param_index(os, "shape");
    if (ip < 0)
        return un_ctx_error(ctx, UN_ERR_SPEC, "op '%s' has no 'shape' parameter", os->name);
    un_param p[UN_MAX_PARAMS];
    memset(p, 0, sizeof p);
    un_spec_param_defaults(os, p);
    p[ip].len = rank;
    for (int i = 0; i < rank; i++)
        p[ip].v[i] = dims[i];
    return un_graph_add(ctx, g, op, p, NULL, 0, name, out);
}

un_status un_graph_add_input_shape(un_ctx *ctx, un_graph *g, const char *name, un_op op,
                                   const un_shape *shape, int32_t *out) {
    if (out)
        *out = -1;
    if ((unsigned)op >= UN_OP_COUNT || un_op_kind_of(op) != UN_OPK_SOURCE || !shape ||
        shape->rank < 0 || shape->rank > UN_MAX_DIMS)
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: not a source op or a bad shape",
                            name ? name : "input");
    const un_op_spec *os = un_spec_op(g->spec, op);
    if (!os)
        return un_ctx_error(ctx, UN_ERR_SPEC, "op '%s' has no spec", un_op_name(op));
    un_param p[UN_MAX_PARAMS];
    memset(p, 0, sizeof p);
    un_spec_param_defaults(os, p);
    int ip = un_spec_param_index(os, "shape"), idt = un_spec_param_index(os, "dtype"),
        ish = un_spec_param_index(os, "shard"), isum = un_spec_param_index(os, "sum"),
        icp = un_spec_param_index(os, "copy");
    if (ip < 0)
        return un_ctx_error(ctx, UN_ERR_SPEC, "op '%s' has no 'shape' parameter", os->name);
    p[ip].len = shape->rank;
    bool sharded = false;
    for (int i = 0; i < shape->rank; i++) {
        p[ip].v[i] = shape->dim[i];
        sharded |= shape->shard[i] != 1;
    }
    if (idt >= 0)
        p[idt].v[0] = shape->dtype == UN_DT_INT;
    if (sharded || shape->sum != 1 || shape->copy != 1) {
        if (ish < 0 || isum < 0 || icp < 0)
            return un_ctx_error(ctx, UN_ERR_SPEC, "op '%s' has no layout parameters", os->name);
        p[ish].len = shape->rank;
        for (int i = 0; i < shape->rank; i++)
            p[ish].v[i] = shape->shard[i];
        p[isum].v[0] = shape->sum;
        p[icp].v[0] = shape->copy;
    }
    return un_graph_add(ctx, g, op, p, NULL, 0, name, out);
}

un_status un_graph_add_parallel(un_ctx *ctx, un_graph *g, un_op op, un_ref in, int64_t dim,
                                int64_t degree, const char *name, int32_t *out) {
    if ((unsigned)op >= UN_OP_COUNT || un_op_kind_of(op) != UN_OPK_PARALLEL) {
        if (out)
            *out = -1;
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: not a parallel op", name ? name : "node");
    }
    un_param p[UN_MAX_PARAMS];
    un_spec_parallel_params(g->spec, op, dim, degree, p);
    return un_graph_add(ctx, g, op, p, &in, 1, name, out);
}

int32_t un_view_device(const un_view *v, int64_t p, int32_t devices) {
    if (v->count > 0)
        return v->dev[p % v->count];
    return (int32_t)(p % (devices > 0 ? devices : 1));
}

void un_graph_node_set_view(un_graph *g, int32_t id, un_view v) {
    UN_ASSERT(id >= 0 && id < g->n_nodes && v.count >= 0 && (v.count == 0 || v.dev));
    un_view *w = &g->nodes[id].view;
    if (w->dev == v.dev && w->count == v.count)
        return;
    int32_t *dev = v.count ? un_xmalloc((size_t)v.count * sizeof *dev) : NULL;
    if (v.count)
        memcpy(dev, v.dev, (size_t)v.count * sizeof *dev);
    free(w->dev);
    *w = (un_view){v.count, dev};
}

void un_graph_node_set_view_range(un_graph *g, int32_t id, int32_t start, int32_t stride,
                                  int32_t count) {
    int32_t *dev = un_xmalloc(((size_t)count + 1) * sizeof *dev);
    for (int32_t k = 0; k < count; k++)
        dev[k] = start + k * stride;
    un_graph_node_set_view(g, id, (un_view){count, dev});
    free(dev);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Why node nd's view is illegal on `devices` devices (see un_graph_views_valid), or false. */
static bool view_invalid(const un_node *nd, int32_t devices, char *why, size_t n) {
    const un_view *v = &nd->view;
    int64_t pieces = 1;
    for (int o = 0; o < nd->inf.n_out; o++) {
        int64_t p = un_shape_npieces(&nd->inf.out[o]);
        pieces = p > pieces ? p : pieces;
    }
    for (int32_t k = 0; k < v->count; k++) {
        if (v->dev[k] < 0) {
            snprintf(why, n, "device %d in its machine view is negative", v->dev[k]);
            return true;
        }
        if (devices > 0 && v->dev[k] >= devices) {
            snprintf(why, n, "device %d in its machine view is not one of the %d device%s (0..%d)",
                     v->dev[k], devices, devices == 1 ? "" : "s", devices - 1);
            return true;
        }
    }
    int32_t *sorted = un_xmalloc(((size_t)v->count + 1) * sizeof *sorted);
    if (v->count)
        memcpy(sorted, v->dev, (size_t)v->count * sizeof *sorted);
    qsort(sorted, (size_t)v->count, sizeof *sorted, cmp_i32);
    for (int32_t k = 1; k < v->count; k++)
        if (sorted[k] == sorted[k - 1]) {
            snprintf(why, n, "device %d appears twice in its machine view", sorted[k]);
            free(sorted);
            return true;
        }
    free(sorted);
    if (v->count > pieces || (v->count > 0 && pieces % v->count != 0)) {
        snprintf(why, n,
                 "its machine view lists %d device%s for %lld piece%s (it needs as many devices "
                 "as pieces, or a divisor of them)",
                 v->count, v->count == 1 ? "" : "s", (long long)pieces, pieces == 1 ? "" : "s");
        return true;
    }
    return false;
}

bool un_graph_views_valid(const un_graph *g, int32_t devices, char *why, size_t n) {
    char reason[200];
    for (int32_t id = 0; id < g->n_nodes; id++)
        if (view_invalid(&g->nodes[id], devices, reason, sizeof reason)) {
            snprintf(why, n, "node '%s': %s", g->nodes[id].name ? g->nodes[id].name : "?", reason);
            return false;
        }
    return true;
}

un_status un_graph_set_outputs(un_ctx *ctx, un_graph *g, const un_ref *outs, int n) {
    if (n < 0 || (n > 0 && !outs))
        return un_ctx_error(ctx, UN_ERR_INVALID, "set_outputs: %d outputs", n);
    for (int i = 0; i < n; i++) {
        un_ref r = outs[i];
        if (r.node < 0 || r.node >= g->n_nodes)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "output %d refers to node %d, which does not exist (the graph has "
                                "%d nodes)",
                                i, (int)r.node, (int)g->n_nodes);
        if (r.out < 0 || r.out >= g->nodes[r.node].inf.n_out)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "output %d refers to output %d of node %d, which has %d", i,
                                (int)r.out, (int)r.node, g->nodes[r.node].inf.n_out);
    }
    free(g->outs);
    g->outs = NULL;
    g->n_outs = n;
    g->outs_explicit = n > 0;
    if (n) {
        g->outs = un_xmalloc((size_t)n * sizeof *g->outs);
        memcpy(g->outs, outs, (size_t)n * sizeof *outs);
    }
    graph_touch(g);
    return UN_OK;
}

/* ---- JSON writing -------------------------------------------------------------------------------
 */

/* Names for writing: a node's own name, or "n<id>" (made unique) for an unnamed one. Owned array
 * of owned strings: free with names_free. */
static char **names_make(const un_graph *g) {
    char **nm = un_xcalloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *nm);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].name) {
            nm[i] = un_xstrdup(g->nodes[i].name);
            continue;
        }
        char buf[64];
        snprintf(buf, sizeof buf, "n%d", (int)i);
        for (int k = 1; un_graph_find(g, buf) >= 0; k++)
            snprintf(buf, sizeof buf, "n%d_%d", (int)i, k);
        nm[i] = un_xstrdup(buf);
    }
    return nm;
}

static void names_free(char **nm, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        free(nm[i]);
    free(nm);
}

static void json_ref(un_buf *b, char *const *nm, un_ref r) {
    if (r.out == 0) {
        un_buf_json_str(b, nm[r.node]);
        return;
    }
    un_buf t = {0};
    un_buf_printf(&t, "%s:%d", nm[r.node], (int)r.out);
    un_buf_json_str(b, t.data);
    un_buf_deinit(&t);
}

static void json_param(un_buf *b, const un_param_spec *ps, const un_param *v) {
    switch (ps->type) {
    case UN_PT_BOOL:
        un_buf_printf(b, "%s", v->v[0] ? "true" : "false");
        break;
    case UN_PT_ENUM:
        un_buf_json_str(b, ps->enums[v->v[0]]);
        break;
    case UN_PT_LIST:
        un_buf_printf(b, "[");
        for (int k = 0; k < v->len; k++)
            un_buf_printf(b, "%s%lld", k ? ", " : "", (long long)v->v[k]);
        un_buf_printf(b, "]");
        break;
    default:
        un_buf_printf(b, "%lld", (long long)v->v[0]);
        break;
    }
}

static bool param_shown(const un_param_spec *ps, const un_param *v) {
    return !ps->has_default || !un_param_eq(v, &ps->dflt);
}

un_status un_graph_to_json(un_ctx *ctx, const un_graph *g, un_buf *out) {
    (void)ctx;
    char **nm = names_make(g);
    un_buf_printf(out, "{\"nodes\": [");
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const un_node *nd = &g->nodes[i];
        const un_op_spec *os = un_spec_op(g->spec, nd->op);
        un_buf_printf(out, "%s\n  {\"name\": ", i ? "," : "");
        un_buf_json_str(out, nm[i]);
        un_buf_printf(out, ", \"op\": ");
        un_buf_json_str(out, un_op_name(nd->op));
        if (nd->n_in) {
            un_buf_printf(out, ", \"in\": [");
            for (int32_t j = 0; j < nd->n_in; j++) {
                if (j)
                    un_buf_printf(out, ", ");
                json_ref(out, nm, nd->in[j]);
            }
            un_buf_printf(out, "]");
        }
        bool any = false;
        /* every parameter, defaults included: a stored graph must not change meaning when a
         * default in the spec does */
        for (int k = 0; k < os->n_params; k++) {
            un_buf_printf(out, "%s", any ? ", " : ", \"params\": {");
            any = true;
            un_buf_json_str(out, os->params[k].name);
            un_buf_printf(out, ": ");
            json_param(out, &os->params[k], &nd->params[k]);
        }
        un_buf_printf(out, "%s", any ? "}" : "");
        for (int32_t k = 0; k < nd->view.count; k++)
            un_buf_printf(out, "%s%d", k ? ", " : ", \"devices\": [", nd->view.dev[k]);
        un_buf_printf(out, "%s}", nd->view.count ? "]" : "");
    }
    un_buf_printf(out, "%s]", g->n_nodes ? "\n" : "");
    if (g->outs_explicit) {
        un_buf_printf(out, ",\n \"outputs\": [");
        for (int32_t p = 0; p < g->n_outs; p++) {
            if (p)
                un_buf_printf(out, ", ");
            json_ref(out, nm, g->outs[p]);
        }
        un_buf_printf(out, "]");
    }
    un_buf_printf(out, "}\n");
    names_free(nm, g->n_nodes);
    return UN_OK;
}

/* ---- JSON reading -------------------------------------------------------------------------------
 */

typedef struct jnode {
    const char *name; /* borrowed from the document */
    un_op op;
    un_view view;
    un_param params[UN_MAX_PARAMS];
    int n_in;
    int32_t src[UN_MAX_INPUTS]; /* producer's index in the file */
    int32_t src_out[UN_MAX_INPUTS];
    int32_t id; /* graph id once added, else -1 */
} jnode;

static const char *jnode_name_of(const void *owner, int32_t id) {
    const jnode *jn = owner;
    return jn[id].name;
}

/* Parses "name" or "name:k" against the file's node names. */
static un_status jref(un_ctx *ctx, const un_jcur *c, const jnode *jn, const name_table *t,
                      int32_t *node, int32_t *outk) {
    un_status st = un_jcur_need_type(ctx, c, UN_JSON_STRING);
    if (st != UN_OK)
        return st;
    const char *s = un_jcur_str(c);
    const char *colon = strchr(s, ':');
    size_t len = colon ? (size_t)(colon - s) : strlen(s);
    long k = 0;
    if (colon) {
        const char *d = colon + 1;
        bool ok = *d && strlen(d) <= 3;
        for (const char *q = d; *q; q++)
            ok &= *q >= '0' && *q <= '9';
        if (!ok)
            return un_jcur_error(ctx, UN_ERR_PARSE, c,
                                 "bad reference '%s' (expected \"name\" or \"name:k\")", s);
        k = strtol(d, NULL, 10);
    }
    int32_t id = table_find(t, s, len, jnode_name_of, jn);
    if (id < 0)
        return un_jcur_error(ctx, UN_ERR_INVALID, c, "unknown node '%.*s'", (int)len, s);
    *node = id;
    *outk = (int32_t)k;
    return UN_OK;
}

/* A node's "devices": a list of device ids ([3, 1, 2, 0]) or an object {"start": s, "stride": t,
 * "count": n} (stride default 1) that stands for the list s, s + t, ..., n of them. The list is
 * allocated into v->dev (the caller frees it); the devices are checked once the node's pieces are
 * known (view_invalid). */
static un_status jview(un_ctx *ctx, const un_jcur *nc, un_view *v) {
    un_jcur dc = un_jcur_member(nc, "devices");
    *v = (un_view){0};
    if (!un_jcur_present(&dc))
        return UN_OK;
    un_status st = UN_OK;
    if (un_jcur_type(&dc) == UN_JSON_OBJECT) {
        static const char *const keys[] = {"start", "stride", "count", NULL};
        int64_t x[3] = {0, 1, 0};
        if ((st = un_jcur_check_keys(ctx, &dc, keys)) != UN_OK ||
            (st = un_jcur_get_int(ctx, &dc, "start", true, &x[0])) != UN_OK ||
            (st = un_jcur_get_int(ctx, &dc, "stride", false, &x[1])) != UN_OK ||
            (st = un_jcur_get_int(ctx, &dc, "count", true, &x[2])) != UN_OK)
            return st;
        if (x[0] < 0 || x[0] > UN_MAX_DEGREE || x[1] < 1 || x[1] > UN_MAX_DEGREE || x[2] < 1 ||
            x[2] > UN_MAX_DEGREE || x[0] + (x[2] - 1) * x[1] > INT32_MAX)
            return un_jcur_error(ctx, UN_ERR_INVALID, &dc,
                                 "a machine view needs 0 <= start, 1 <= stride and 1 <= count, "
                                 "each at most %d, the last device below 2^31",
                                 UN_MAX_DEGREE);
        int32_t *dev = un_xmalloc((size_t)x[2] * sizeof *dev);
        for (int64_t k = 0; k < x[2]; k++)
            dev[k] = (int32_t)(x[0] + k * x[1]);
        *v = (un_view){(int32_t)x[2], dev};
        return UN_OK;
    }
    if ((st = un_jcur_need_type(ctx, &dc, UN_JSON_ARRAY)) != UN_OK)
        return st;
    int n = un_jcur_len(&dc);
    if (n < 1 || n > UN_MAX_DEGREE)
        return un_jcur_error(ctx, UN_ERR_INVALID, &dc,
                             "a machine view lists 1 to %d devices, not %d", UN_MAX_DEGREE, n);
    int32_t *dev = un_xmalloc((size_t)n * sizeof *dev);
    for (int i = 0; i < n; i++) {
        un_jcur it = un_jcur_item(&dc, i);
        int64_t d;
        if (!un_jcur_is_int(&it, &d) || d < INT32_MIN || d > INT32_MAX) {
            free(dev);
            return un_jcur_error(ctx, UN_ERR_INVALID, &it, "a device id must be an integer");
        }
        dev[i] = (int32_t)d;
    }
    *v = (un_view){n, dev};
    return UN_OK;
}

/* Reads one node object's name and op (pass 1: all names must be known before references). */
static un_status jnode_head(un_ctx *ctx, const un_jcur *nc, jnode *jn, int32_t j, name_table *t) {
    static const char *const keys[] = {"name", "op", "in", "params", "devices", NULL};
    un_status st = un_jcur_need_type(ctx, nc, UN_JSON_OBJECT);
    if (st == UN_OK)
        st = un_jcur_check_keys(ctx, nc, keys);
    if (st != UN_OK)
        return st;
    un_jcur nm = un_jcur_member(nc, "name"), op = un_jcur_member(nc, "op");
    if ((st = un_jcur_need_type(ctx, &nm, UN_JSON_STRING)) != UN_OK)
        return st;
    const char *name = un_jcur_str(&nm);
    if (!*name)
        return un_jcur_error(ctx, UN_ERR_INVALID, &nm, "empty node name");
    if (strchr(name, ':'))
        return un_jcur_error(ctx, UN_ERR_INVALID, &nm,
                             "node name '%s' contains ':' (reserved for output references)", name);
    int32_t prev = table_find(t, name, strlen(name), jnode_name_of, jn);
    if (prev >= 0)
        return un_jcur_error(ctx, UN_ERR_INVALID, &nm,
                             "duplicate node name '%s' (first at $.nodes[%d])", name, (int)prev);
    jn[j].name = name;
    jn[j].id = -1;
    table_insert(t, j, jnode_name_of, jn);
    if ((st = un_jcur_need_type(ctx, &op, UN_JSON_STRING)) != UN_OK)
        return st;
    if (!un_op_from_name(un_jcur_str(&op), &jn[j].op))
        return un_jcur_error(ctx, UN_ERR_INVALID, &op, "unknown op '%s' in node '%s'",
                             un_jcur_str(&op), name);
    return UN_OK;
}

/* Pass 2: references and parameters. */
static un_status jnode_body(un_ctx *ctx, const un_spec *spec, const un_jcur *nc, jnode *jn,
                            int32_t j, const name_table *t) {
    un_status st;
    jnode *x = &jn[j];
    const un_op_spec *os = un_spec_op(spec, x->op);
    if (!os)
        return un_jcur_error(ctx, UN_ERR_SPEC, nc, "op '%s' has no spec", un_op_name(x->op));
    un_jcur in = un_jcur_member(nc, "in");
    if (un_jcur_present(&in)) {
        if ((st = un_jcur_need_type(ctx, &in, UN_JSON_ARRAY)) != UN_OK)
            return st;
        x->n_in = un_jcur_len(&in);
        if (x->n_in > UN_MAX_INPUTS)
            return un_jcur_error(ctx, UN_ERR_INVALID, &in, "%d inputs (at most %d)", x->n_in,
                                 UN_MAX_INPUTS);
        for (int i = 0; i < x->n_in; i++) {
            un_jcur r = un_jcur_item(&in, i);
            if ((st = jref(ctx, &r, jn, t, &x->src[i], &x->src_out[i])) != UN_OK)
                return st;
        }
    }
    if ((st = jview(ctx, nc, &x->view)) != UN_OK)
        return st;
    un_jcur pc = un_jcur_member(nc, "params");
    bool given[UN_MAX_PARAMS] = {false};
    un_spec_param_defaults(os, x->params);
    if (un_jcur_present(&pc)) {
        if ((st = un_jcur_need_type(ctx, &pc, UN_JSON_OBJECT)) != UN_OK)
            return st;
        int n = un_jcur_len(&pc);
        for (int i = 0; i < n; i++) {
            un_jcur m = un_jcur_item(&pc, i);
            int k = un_spec_param_index(os, m.key);
            if (k < 0) {
                un_buf b = {0};
                for (int q = 0; q < os->n_params; q++)
                    un_buf_printf(&b, "%s%s", q ? ", " : "", os->params[q].name);
                st = un_jcur_error(ctx, UN_ERR_INVALID, &m,
                                   "unknown parameter '%s' of op '%s' (parameters: %s)", m.key,
                                   os->name, b.data ? b.data : "none");
                un_buf_deinit(&b);
                return st;
            }
            if (given[k])
                return un_jcur_error(ctx, UN_ERR_PARSE, &m, "duplicate parameter");
            given[k] = true;
            if ((st = un_spec_param_parse(ctx, &os->params[k], &m, &x->params[k])) != UN_OK)
                return st;
        }
    }
    for (int k = 0; k < os->n_params; k++)
        if (!given[k] && !os->params[k].has_default)
            return un_jcur_error(ctx, UN_ERR_INVALID, un_jcur_present(&pc) ? &pc : nc,
                                 "missing parameter '%s' of op '%s' (it has no default)",
                                 os->params[k].name, os->name);
    return UN_OK;
}

/* Orders the file's nodes so inputs come first, keeping file order where it already is topological
 * (depth-first from each node in file order, inputs before users). */
static un_status jtopo(un_ctx *ctx, const un_jcur *nodes, const jnode *jn, int32_t n,
                       int32_t *order) {
    uint8_t *state = un_xcalloc((size_t)(n ? n : 1), 1); /* 0 new, 1 on the stack, 2 done */
    int32_t *stk = un_xmalloc((size_t)(n ? n : 1) * sizeof *stk);
    int32_t *arg = un_xmalloc((size_t)(n ? n : 1) * sizeof *arg);
    int32_t m = 0;
    un_status st = UN_OK;
    for (int32_t r = 0; r < n && st == UN_OK; r++) {
        if (state[r])
            continue;
        int32_t sp = 0;
        stk[sp] = r;
        arg[sp++] = 0;
        state[r] = 1;
        while (sp > 0) {
            int32_t v = stk[sp - 1];
            if (arg[sp - 1] == jn[v].n_in) {
                state[v] = 2;
                order[m++] = v;
                sp--;
                continue;
            }
            int32_t w = jn[v].src[arg[sp - 1]++];
            if (state[w] == 2)
                continue;
            if (state[w] == 1) {
                int32_t at = sp - 1;
                while (stk[at] != w)
                    at--;
                un_buf b = {0};
                for (int32_t i = at; i < sp; i++)
                    un_buf_printf(&b, "'%s' <- ", jn[stk[i]].name);
                un_buf_printf(&b, "'%s'", jn[w].name);
                un_jcur item = un_jcur_item(nodes, w);
                un_jcur in = un_jcur_member(&item, "in");
                st = un_jcur_error(ctx, UN_ERR_INVALID, &in, "cycle: %s (each uses the next)",
                                   b.data);
                un_buf_deinit(&b);
                break;
            }
            state[w] = 1;
            stk[sp] = w;
            arg[sp++] = 0;
        }
    }
    free(arg);
    free(stk);
    free(state);
    return st;
}

un_status un_graph_from_jcur(un_ctx *ctx, const un_spec *spec, const un_jcur *c, un_graph **out) {
    static const char *const keys[] = {"nodes", "outputs", NULL};
    *out = NULL;
    un_status st = un_jcur_need_type(ctx, c, UN_JSON_OBJECT);
    if (st == UN_OK)
        st = un_jcur_check_keys(ctx, c, keys);
    if (st != UN_OK)
        return st;
    un_jcur nodes = un_jcur_member(c, "nodes");
    if ((st = un_jcur_need_type(ctx, &nodes, UN_JSON_ARRAY)) != UN_OK)
        return st;
    int32_t n = un_jcur_len(&nodes);
    size_t nn = (size_t)(n ? n : 1);
    jnode *jn = un_xcalloc(nn, sizeof *jn);
    int32_t *order = un_xmalloc(nn * sizeof *order);
    name_table t = {0};
    un_graph *g = NULL;
    un_ctx *tmp = NULL;

    for (int32_t j = 0; j < n && st == UN_OK; j++) {
        un_jcur nc = un_jcur_item(&nodes, j);
        st = jnode_head(ctx, &nc, jn, j, &t);
    }
    for (int32_t j = 0; j < n && st == UN_OK; j++) {
        un_jcur nc = un_jcur_item(&nodes, j);
        st = jnode_body(ctx, spec, &nc, jn, j, &t);
    }
    if (st == UN_OK)
        st = jtopo(ctx, &nodes, jn, n, order);
    if (st != UN_OK)
        goto done;

    g = un_graph_new(spec);
    tmp = un_ctx_new_child(ctx);
    for (int32_t i = 0; i < n; i++) {
        int32_t j = order[i];
        jnode *x = &jn[j];
        un_jcur nc = un_jcur_item(&nodes, j);
        un_ref refs[UN_MAX_INPUTS];
        for (int k = 0; k < x->n_in; k++) {
            const un_node *src = un_graph_node(g, jn[x->src[k]].id);
            if (x->src_out[k] >= src->inf.n_out) {
                un_jcur in = un_jcur_member(&nc, "in");
                un_jcur r = un_jcur_item(&in, k);
                st = un_jcur_error(
                    ctx, UN_ERR_INVALID, &r, "node '%s' has %d output%s, no output %d", src->name,
                    src->inf.n_out, src->inf.n_out == 1 ? "" : "s", (int)x->src_out[k]);
                goto done;
            }
            refs[k] = (un_ref){jn[x->src[k]].id, x->src_out[k]};
        }
        un_ctx_clear(tmp);
        st = un_graph_add(tmp, g, x->op, x->params, refs, x->n_in, x->name, &x->id);
        if (st != UN_OK) {
            st = un_jcur_error(ctx, st, &nc, "%s", un_ctx_errmsg(tmp));
            goto done;
        }
        un_graph_node_set_view(g, x->id, x->view);
        char why[256];
        if (view_invalid(&g->nodes[x->id], 0, why, sizeof why)) {
            un_jcur dc = un_jcur_member(&nc, "devices");
            st = un_jcur_error(ctx, UN_ERR_INVALID, &dc, "node '%s': %s", x->name, why);
            goto done;
        }
    }

    un_jcur oc = un_jcur_member(c, "outputs");
    if (un_jcur_present(&oc)) {
        if ((st = un_jcur_need_type(ctx, &oc, UN_JSON_ARRAY)) != UN_OK)
            goto done;
        int no = un_jcur_len(&oc);
        if (no == 0) {
            st = un_jcur_error(ctx, UN_ERR_INVALID, &oc,
                               "empty output list (omit it for the "
                               "implicit outputs)");
            goto done;
        }
        un_ref *refs = un_xmalloc((size_t)no * sizeof *refs);
        for (int p = 0; p < no && st == UN_OK; p++) {
            un_jcur r = un_jcur_item(&oc, p);
            int32_t node, k;
            st = jref(ctx, &r, jn, &t, &node, &k);
            if (st != UN_OK)
                break;
            refs[p] = (un_ref){jn[node].id, k};
            if (k >= g->nodes[refs[p].node].inf.n_out)
                st = un_jcur_error(ctx, UN_ERR_INVALID, &r,
                                   "node '%s' has %d output%s, no output %d", jn[node].name,
                                   g->nodes[refs[p].node].inf.n_out,
                                   g->nodes[refs[p].node].inf.n_out == 1 ? "" : "s", (int)k);
        }
        if (st == UN_OK)
            st = un_graph_set_outputs(ctx, g, refs, no);
        free(refs);
        if (st != UN_OK)
            goto done;
    }
    *out = g;
    g = NULL;
done:
    un_ctx_free(tmp);
    un_graph_free(g);
    free(t.slot);
    free(order);
    for (int32_t j = 0; j < n; j++)
        free(jn[j].view.dev);
    free(jn);
    return st;
}

un_status un_graph_from_json(un_ctx *ctx, const un_spec *spec, const char *name, const char *text,
                             size_t len, un_graph **out) {
    un_jdoc *doc;
    *out = NULL;
    un_status st = un_jdoc_parse(ctx, name, text, len, &doc);
    if (st != UN_OK)
        return st;
    un_jcur root = un_jdoc_root(doc);
    st = un_graph_from_jcur(ctx, spec, &root, out);
    un_jdoc_free(doc);
    return st;
}

un_status un_graph_load(un_ctx *ctx, const un_spec *spec, const char *path, un_graph **out) {
    un_jdoc *doc;
    *out = NULL;
    un_status st = un_jdoc_load(ctx, path, &doc);
    if (st != UN_OK)
        return st;
    un_jcur root = un_jdoc_root(doc);
    st = un_graph_from_jcur(ctx, spec, &root, out);
    un_jdoc_free(doc);
    return st;
}

/* ---- DOT ----------------------------------------------------------------------------------------
 */

/* Appends s escaped for a double-quoted DOT string. */
static void dot_str(un_buf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            un_buf_printf(b, "\\%c", *s);
        else if (*s == '\n')
            un_buf_printf(b, "\\n");
        else
            un_buf_printf(b, "%c", *s);
    }
}

un_status un_graph_to_dot(un_ctx *ctx, const un_graph *g, un_buf *out) {
    (void)ctx;
    un_buf_printf(out, "digraph pcg {\n"
                       "  node [fontname=\"Helvetica\", fontsize=10];\n"
                       "  edge [fontname=\"Helvetica\", fontsize=9];\n");
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const un_node *nd = &g->nodes[i];
        const un_op_spec *os = un_spec_op(g->spec, nd->op);
        un_buf t = {0};
        if (nd->name)
            un_buf_printf(&t, "%s\n", nd->name);
        un_buf_printf(&t, "%s", os->name);
        bool any = false;
        for (int k = 0; k < os->n_params; k++) {
            /* a parallel op's dim and degree are the point of it: always shown */
            if (os->kind != UN_OPK_PARALLEL && !param_shown(&os->params[k], &nd->params[k]))
                continue;
            if (nd->op == UN_OP_INPUT || nd->op == UN_OP_WEIGHT) {
                if (strcmp(os->params[k].name, "shape") == 0)
                    continue; /* the shape line says it */
            }
            un_buf_printf(&t, "%s%s=", any ? ", " : "(", os->params[k].name);
            any = true;
            un_spec_param_str(&os->params[k], &nd->params[k], &t);
        }
        if (any)
            un_buf_printf(&t, ")");
        for (int k = 0; k < nd->inf.n_out; k++) {
            char s[160];
            un_shape_str(&nd->inf.out[k], s, sizeof s);
            un_buf_printf(&t, "%s%s", k ? "; " : "\n", s);
        }
        un_buf_printf(out, "  n%d [label=\"", (int)i);
        dot_str(out, t.data);
        un_buf_deinit(&t);
        switch (un_op_kind_of(nd->op)) {
        case UN_OPK_SOURCE:
            un_buf_printf(out,
                          "\", shape=box, style=\"rounded,filled\", fillcolor=\"#e8e8e8\"];\n");
            break;
        case UN_OPK_PARALLEL:
            un_buf_printf(out, "\", shape=hexagon, style=filled, fillcolor=\"#ffd8a8\"];\n");
            break;
        default:
            un_buf_printf(out, "\", shape=box];\n");
            break;
        }
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const un_node *nd = &g->nodes[i];
        for (int32_t j = 0; j < nd->n_in; j++) {
            un_ref r = nd->in[j];
            char s[160];
            un_shape_str(un_graph_shape(g, r), s, sizeof s);
            un_buf_printf(out, "  n%d -> n%d [label=\"", (int)r.node, (int)i);
            if (g->nodes[r.node].inf.n_out > 1)
                un_buf_printf(out, "%d: ", (int)r.out);
            dot_str(out, s);
            un_buf_printf(out, "\"];\n");
        }
    }
    int32_t no = un_graph_output_count(g);
    for (int32_t p = 0; p < no; p++) {
        un_ref r = un_graph_output(g, p);
        char s[160];
        un_shape_str(un_graph_shape(g, r), s, sizeof s);
        un_buf_printf(out, "  out%d [label=\"out %d\", shape=plaintext];\n", (int)p, (int)p);
        un_buf_printf(out, "  n%d -> out%d [label=\"", (int)r.node, (int)p);
        if (g->nodes[r.node].inf.n_out > 1)
            un_buf_printf(out, "%d: ", (int)r.out);
        dot_str(out, s);
        un_buf_printf(out, "\"];\n");
    }
    un_buf_printf(out, "}\n");
    return UN_OK;
}

/* ---- copies with a remap ----------------------------------------------------------------------
 */

un_status un_graph_copy_node(un_ctx *ctx, const un_graph *g, int32_t id, const un_param *params,
                             un_graph *ng, un_ref *map, int32_t *nid) {
    UN_ASSERT(id >= 0 && id < g->n_nodes);
    const un_node *nd = &g->nodes[id];
    un_ref ins[UN_MAX_INPUTS];
    for (int t = 0; t < nd->n_in; t++) {
        ins[t] = map[nd->in[t].node * UN_MAX_OUTPUTS + nd->in[t].out];
        UN_ASSERT(ins[t].node >= 0);
    }
    int32_t k = -1;
    un_status st =
        un_graph_add(ctx, ng, nd->op, params ? params : nd->params, ins, nd->n_in, nd->name, &k);
    if (nid)
        *nid = k;
    if (st != UN_OK)
        return st;
    un_graph_node_set_view(ng, k, nd->view);
    for (int o = 0; o < ng->nodes[k].inf.n_out; o++)
        map[id * UN_MAX_OUTPUTS + o] = (un_ref){k, o};
    return UN_OK;
}

un_status un_graph_copy_remap(un_ctx *ctx, const un_graph *g, const int32_t *order, int32_t n_order,
                              un_graph_copy_fn fn, void *user, un_graph **out, un_ref **map_out) {
    *out = NULL;
    if (map_out)
        *map_out = NULL;
    int32_t n = g->n_nodes;
    un_graph *ng = un_graph_new(g->spec);
    un_ref *map = un_xmalloc(((size_t)n * UN_MAX_OUTPUTS + 1) * sizeof *map);
    for (size_t i = 0; i < (size_t)n * UN_MAX_OUTPUTS; i++)
        map[i] = (un_ref){-1, -1};
    un_status st = UN_OK;
    int32_t steps = order ? n_order : n;
    for (int32_t i = 0; i < steps && st == UN_OK; i++) {
        int32_t id = order ? order[i] : i;
        UN_ASSERT(id < n);
        st = fn ? fn(ctx, user, g, id, ng, map)
                : un_graph_copy_node(ctx, g, id, NULL, ng, map, NULL);
    }
    int32_t no = un_graph_output_count(g);
    un_ref *outs = un_xcalloc((size_t)no + 1, sizeof *outs);
    for (int32_t i = 0; i < no && st == UN_OK; i++) {
        un_ref r = un_graph_output(g, i);
        outs[i] = map[r.node * UN_MAX_OUTPUTS + r.out];
        if (outs[i].node < 0)
            st = un_ctx_error(ctx, UN_ERR_INVALID,
                              "copy: graph output %d (output %d of node %d) was dropped", (int)i,
                              (int)r.out, (int)r.node);
    }
    if (st == UN_OK)
        st = un_graph_set_outputs(ctx, ng, outs, no);
    free(outs);
    if (st != UN_OK) {
        free(map);
        un_graph_free(ng);
        return st;
    }
    *out = ng;
    if (map_out)
        *map_out = map;
    else
        free(map);
    return UN_OK;
}
