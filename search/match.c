/* match.c - the matcher: a backtracking search over a rule's compiled plan (rules_impl.h) from
 * its root, then the whole-match checks (inputs not inside the match, interior tensors not used
 * outside it, no path out of the match and back in, the rule instantiated at the match). */
#include "search/match.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/rules_impl.h"

/* ---- instantiations, cached ---- */

/* A rule's instantiation is a function of its entry, the matched values and the inputs' layouts:
 * slots hashed by those, a slot's old one replaced. */
#define INST_SLOTS 512

typedef struct inst_slot {
    bool used;
    int32_t rule;
    int64_t values[UN_RULE_MAX_VARS];
    un_shape shapes[UN_MATCH_MAX_NODES];
    un_rule *inst; /* NULL when it failed with st */
    un_status st;
} inst_slot;

struct un_inst_cache {
    const un_ruleset *set; /* the entries' */
    inst_slot slot[INST_SLOTS];
    int64_t hits, misses;
};

un_inst_cache *un_inst_cache_new(void) { return un_xcalloc(1, sizeof(un_inst_cache)); }

static void inst_cache_clear(un_inst_cache *c) {
    for (int i = 0; i < INST_SLOTS; i++) {
        un_rule_free(c->slot[i].inst);
        c->slot[i] = (inst_slot){0};
    }
}

void un_inst_cache_free(un_inst_cache *c) {
    if (c)
        inst_cache_clear(c);
    free(c);
}

un_status un_inst_cache_instantiate(un_ctx *ctx, un_inst_cache *c, const un_ruleset *set, int32_t e,
                                    const int64_t *values, const un_shape *shapes, un_rule **inst,
                                    bool *own) {
    const un_rule *r = un_ruleset_rule(set, e);
    *own = !c;
    if (!c)
        return un_rule_instantiate(ctx, r, values, shapes, inst);
    if (c->set != set) {
        inst_cache_clear(c);
        c->set = set;
    }
    int n_in = un_rule_input_count(r);
    size_t nv = sizeof(int64_t) * (size_t)r->n_vars, ns = sizeof(un_shape) * (size_t)n_in;
    uint64_t h = un_hash_bytes(shapes, ns, un_hash_bytes(values, nv, un_mix64((uint64_t)e)));
    inst_slot *sl = &c->slot[h % INST_SLOTS];
    if (sl->used && sl->rule == e && !memcmp(sl->values, values, nv) &&
        !memcmp(sl->shapes, shapes, ns)) {
        c->hits++;
        *inst = sl->inst;
        return sl->inst ? UN_OK
                        : un_ctx_error(ctx, sl->st,
                                       "apply: rule entry %d does not instantiate "
                                       "here (as before)",
                                       (int)e);
    }
    c->misses++;
    un_rule_free(sl->inst);
    *sl = (inst_slot){.used = true, .rule = e};
    memcpy(sl->values, values, nv);
    memcpy(sl->shapes, shapes, ns);
    sl->st = un_rule_instantiate(ctx, r, values, shapes, &sl->inst);
    *inst = sl->inst;
    return sl->st;
}

struct un_matcher {
    const un_ruleset *set;
    const un_graph *g;
    int32_t n;
    int32_t *cons_at; /* consumers of node v: cons[cons_at[v] .. cons_at[v + 1]) */
    un_ref *cons;     /* (consumer node, its input slot) */
    int32_t *op_at;   /* nodes with op o: by_op[op_at[o] .. op_at[o + 1]) */
    int32_t *by_op;
    uint8_t *is_out; /* per node: bit k set when output k is a graph output */
    uint32_t *mark;  /* == epoch: in the current match */
    uint32_t *seen;  /* == epoch: visited by the cycle search */
    uint32_t epoch;
    int32_t *queue;
    const bool *entry_ok; /* un_matcher_restrict: entries that may match, or NULL (all) */
    un_inst_cache *cache; /* un_matcher_use_cache: where instantiations are kept, or NULL */
    uint64_t *labels;     /* un_match_all: the graph's labels (rules_impl.h), sorted, distinct */
    int32_t *label_n;     /* nodes with each */
    int64_t n_labels;     /* -1 until computed */
    uint64_t *cand;       /* un_match_all's entries to try: root operator << 32 | entry */
    int64_t cand_cap;
    un_match_stats stats;
};

/* The search state: images of pattern nodes, tensors bound to pattern inputs, variable values. */
typedef struct mstate {
    int32_t img[UN_MATCH_MAX_NODES]; /* graph node, -1 unplaced (operator nodes) */
    un_ref bind[UN_MATCH_MAX_NODES]; /* pattern input node -> tensor ({-1,-1} unbound) */
    int64_t val[UN_RULE_MAX_VARS];
    bool has_val[UN_RULE_MAX_VARS];
} mstate;

void un_match_list_deinit(un_match_list *l) {
    free(l->v);
    *l = (un_match_list){0};
}

static void list_push(un_match_list *l, const un_match *m) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = un_xrealloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = *m;
}

un_status un_matcher_new(un_ctx *ctx, const un_ruleset *set, const un_graph *g, un_matcher **out) {
    (void)ctx;
    *out = NULL;
    un_matcher *m = un_xcalloc(1, sizeof *m);
    int32_t n = un_graph_node_count(g);
    m->set = set;
    m->g = g;
    m->n = n;
    m->cons_at = un_xcalloc((size_t)n + 1, sizeof *m->cons_at);
    m->op_at = un_xcalloc(UN_OP_COUNT + 1, sizeof *m->op_at);
    int64_t edges = 0;
    for (int32_t v = 0; v < n; v++) {
        const un_node *nd = un_graph_node(g, v);
        for (int s = 0; s < nd->n_in; s++)
            m->cons_at[nd->in[s].node + 1]++;
        edges += nd->n_in;
        m->op_at[nd->op + 1]++;
    }
    for (int32_t v = 0; v < n; v++)
        m->cons_at[v + 1] += m->cons_at[v];
    for (int o = 0; o < UN_OP_COUNT; o++)
        m->op_at[o + 1] += m->op_at[o];
    m->cons = un_xmalloc((size_t)(edges + 1) * sizeof *m->cons);
    m->by_op = un_xmalloc((size_t)(n + 1) * sizeof *m->by_op);
    int32_t *fill = un_xcalloc((size_t)n + 1, sizeof *fill);
    int32_t ofill[UN_OP_COUNT] = {0};
    for (int32_t v = 0; v < n; v++) {
        const un_node *nd = un_graph_node(g, v);
        for (int s = 0; s < nd->n_in; s++) {
            int32_t p = nd->in[s].node;
            m->cons[m->cons_at[p] + fill[p]++] = (un_ref){v, s};
        }
        m->by_op[m->op_at[nd->op] + ofill[nd->op]++] = v;
    }
    free(fill);
    m->is_out = un_xcalloc((size_t)n + 1, 1);
    for (int32_t i = 0; i < un_graph_output_count(g); i++) {
        un_ref r = un_graph_output(g, i);
        m->is_out[r.node] |= (uint8_t)(1u << r.out);
    }
    m->mark = un_xcalloc((size_t)n + 1, sizeof *m->mark);
    m->seen = un_xcalloc((size_t)n + 1, sizeof *m->seen);
    m->queue = un_xmalloc(((size_t)n + 1) * sizeof *m->queue);
    m->n_labels = -1;
    *out = m;
    return UN_OK;
}

void un_matcher_free(un_matcher *m) {
    if (!m)
        return;
    free(m->cons_at);
    free(m->cons);
    free(m->op_at);
    free(m->by_op);
    free(m->is_out);
    free(m->mark);
    free(m->seen);
    free(m->queue);
    free(m->labels);
    free(m->label_n);
    free(m->cand);
    free(m);
}

void un_matcher_restrict(un_matcher *m, const bool *entry_ok) { m->entry_ok = entry_ok; }

void un_matcher_use_cache(un_matcher *m, un_inst_cache *c) { m->cache = c; }

un_match_stats un_matcher_stats(const un_matcher *m) { return m->stats; }

/* ---- the structural search ---- */

static bool ref_eq(un_ref a, un_ref b) { return a.node == b.node && a.out == b.out; }

/* Binds variable a to v, or checks it against its value. */
static bool var_set(mstate *s, int a, int64_t v) {
    if (s->has_val[a])
        return s->val[a] == v;
    s->has_val[a] = true;
    s->val[a] = v;
    return true;
}

/* Binds pattern input node u to tensor t: same rank, dtype and layout (up to the variables), and
 * the same dims unless the rule holds for every size. */
static bool input_bind(const un_matcher *m, const un__pat *p, mstate *s, int32_t u, un_ref t) {
    if (s->bind[u].node >= 0)
        return ref_eq(s->bind[u], t);
    const un_shape *ps = &p->in_shape[p->input_of[u]];
    const un_shape *ts = un_graph_shape(m->g, t);
    if (ps->rank != ts->rank || ps->dtype != ts->dtype)
        return false;
    bool free_dim[UN_MAX_DIMS] = {0}, free_shard[UN_MAX_DIMS] = {0}, free_sum = false,
         free_copy = false;
    for (int b = 0; b < p->n_binds; b++) {
        const un__bind *x = &p->binds[b];
        if (x->node != u || x->comp == UN__COMP_NONE)
            continue;
        int64_t v;
        if (x->comp >= UN__COMP_DIM && x->comp < UN__COMP_DIM + UN_MAX_DIMS) {
            if (x->comp - UN__COMP_DIM >= ts->rank)
                return false;
            v = ts->dim[x->comp - UN__COMP_DIM];
            free_dim[x->comp - UN__COMP_DIM] = true;
        } else if (x->comp >= UN__COMP_SHARD && x->comp < UN__COMP_SHARD + UN_MAX_DIMS) {
            if (x->comp - UN__COMP_SHARD >= ts->rank)
                return false;
            v = ts->shard[x->comp - UN__COMP_SHARD];
            free_shard[x->comp - UN__COMP_SHARD] = true;
        } else if (x->comp == UN__COMP_SUM) {
            v = ts->sum;
            free_sum = true;
        } else {
            v = ts->copy;
            free_copy = true;
        }
        if (!var_set(s, x->var, v))
            return false;
    }
    for (int i = 0; i < ps->rank; i++) {
        if (!p->any_shape && !free_dim[i] && ps->dim[i] != ts->dim[i])
            return false;
        if (!free_shard[i] && ps->shard[i] != ts->shard[i])
            return false;
    }
    if ((!free_sum && ps->sum != ts->sum) || (!free_copy && ps->copy != ts->copy))
        return false;
    s->bind[u] = t;
    return true;
}

/* Places pattern operator node u at graph node x, checking everything that involves u and nodes
 * already placed. */
static bool place(const un_matcher *m, const un__pat *p, mstate *s, int32_t u, int32_t x) {
    if (x < 0 || x >= m->n)
        return false;
    const un__pnode *pn = &p->nodes[u];
    const un_node *gn = un_graph_node(m->g, x);
    if (pn->op != gn->op || pn->n_in != gn->n_in || pn->n_out != gn->inf.n_out)
        return false;
    for (int v = 0; v < p->n_nodes; v++)
        if (s->img[v] == x)
            return false;
    const un_param *pp = &p->params[pn->param_at];
    for (int i = 0; i < pn->n_params; i++) {
        uint8_t bm = p->bound[u][i];
        if (!bm) {
            if (!un_param_eq(&pp[i], &gn->params[i]))
                return false;
            continue;
        }
        if (pp[i].len != gn->params[i].len)
            return false;
        for (int k = 0; k < (pp[i].len < 0 ? 1 : pp[i].len); k++) {
            bool b = pp[i].len < 0 ? (bm & 0x80) : (bm & (1u << k));
            if (!b && pp[i].v[k] != gn->params[i].v[k])
                return false;
        }
    }
    for (int b = 0; b < p->n_binds; b++) {
        const un__bind *x2 = &p->binds[b];
        if (x2->node == u &&
            !var_set(s, x2->var, gn->params[x2->param].v[x2->item < 0 ? 0 : x2->item]))
            return false;
    }
    for (int k = 0; k < pn->n_in; k++) {
        int32_t pin = pn->in_node[k];
        un_ref gin = gn->in[k];
        if (p->input_of[pin] >= 0) {
            if (!input_bind(m, p, s, pin, gin))
                return false;
        } else if (s->img[pin] >= 0 && !ref_eq(gin, (un_ref){s->img[pin], pn->in_out[k]})) {
            return false;
        }
    }
    for (int32_t w = 0; w < p->n_nodes; w++) { /* placed consumers of u read x */
        if (s->img[w] < 0)
            continue;
        const un__pnode *wn = &p->nodes[w];
        const un_node *wg = un_graph_node(m->g, s->img[w]);
        for (int k = 0; k < wn->n_in; k++)
            if (wn->in_node[k] == u && !ref_eq(wg->in[k], (un_ref){x, wn->in_out[k]}))
                return false;
    }
    s->img[u] = x;
    return true;
}

/* ---- whole-match checks ---- */

/* Whether some path leaves the match (marked nodes) through a node outside it and comes back. */
static bool cyclic(un_matcher *m, int32_t lo, int32_t hi) {
    int32_t head = 0, tail = 0;
    for (int32_t x = lo; x <= hi; x++) {
        if (m->mark[x] != m->epoch)
            continue;
        for (int32_t e = m->cons_at[x]; e < m->cons_at[x + 1]; e++) {
            int32_t c = m->cons[e].node;
            if (m->mark[c] != m->epoch && m->seen[c] != m->epoch && c < hi) {
                m->seen[c] = m->epoch;
                m->queue[tail++] = c;
            }
        }
    }
    while (head < tail) {
        int32_t v = m->queue[head++];
        for (int32_t e = m->cons_at[v]; e < m->cons_at[v + 1]; e++) {
            int32_t c = m->cons[e].node;
            if (m->mark[c] == m->epoch)
                return true;
            if (m->seen[c] != m->epoch && c < hi) {
                m->seen[c] = m->epoch;
                m->queue[tail++] = c;
            }
        }
    }
    return false;
}

/* The checks on a complete structural match, and the instantiation; fills *out. */
static bool finish(un_matcher *m, int64_t rule, const un__pat *p, mstate *s, un_match *out) {
    m->stats.structural++;
    if (++m->epoch == 0) { /* wrapped: clear the stamps */
        memset(m->mark, 0, ((size_t)m->n + 1) * sizeof *m->mark);
        memset(m->seen, 0, ((size_t)m->n + 1) * sizeof *m->seen);
        m->epoch = 1;
    }
    int32_t lo = m->n, hi = -1;
    for (int v = 0; v < p->n_nodes; v++) {
        int32_t x = s->img[v];
        if (x < 0)
            continue;
        m->mark[x] = m->epoch;
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
    }
    int n_in = p->n_inputs;
    un_shape shapes[UN_MATCH_MAX_NODES];
    for (int i = 0; i < n_in; i++) {
        un_ref t = s->bind[p->input_node[i]];
        UN_ASSERT(t.node >= 0);            /* every rule input is used (un_rule_make) */
        if (m->mark[t.node] == m->epoch) { /* an input computed inside the match */
            m->stats.cyclic++;
            return false;
        }
        shapes[i] = *un_graph_shape(m->g, t);
    }
    for (int v = 0; v < p->n_nodes; v++) {
        int32_t x = s->img[v];
        if (x < 0)
            continue;
        int n_out = un_graph_node(m->g, x)->inf.n_out;
        for (int o = 0; o < n_out; o++) {
            if ((p->is_mapped[v] >> o) & 1)
                continue;
            bool outside = (m->is_out[x] >> o) & 1;
            for (int32_t e = m->cons_at[x]; e < m->cons_at[x + 1] && !outside; e++) {
                un_ref c = m->cons[e];
                outside =
                    un_graph_node(m->g, c.node)->in[c.out].out == o && m->mark[c.node] != m->epoch;
            }
            if (outside) {
                m->stats.outside_use++;
                return false;
            }
        }
    }
    if (cyclic(m, lo, hi)) {
        m->stats.cyclic++;
        return false;
    }
    int64_t values[UN_RULE_MAX_VARS] = {0};
    for (int a = 0; a < p->n_vars; a++)
        values[a] = s->has_val[a] ? s->val[a] : p->var_value[a];
    un_rule *inst = NULL;
    bool own = false;
    if (un_inst_cache_instantiate(NULL, m->cache, m->set, (int32_t)rule, values, shapes, &inst,
                                  &own) != UN_OK) {
        m->stats.inst_failed++;
        return false;
    }
    if (own)
        un_rule_free(inst);
    memset(out, 0, sizeof *out);
    out->rule = (int32_t)rule;
    out->n_nodes = p->n_nodes;
    for (int v = 0; v < p->n_nodes; v++)
        out->node[v] = s->img[v];
    out->n_inputs = n_in;
    for (int i = 0; i < n_in; i++)
        out->input[i] = s->bind[p->input_node[i]];
    memcpy(out->values, values, sizeof values);
    m->stats.matches++;
    return true;
}

static void state_init(mstate *s) {
    for (int v = 0; v < UN_MATCH_MAX_NODES; v++) {
        s->img[v] = -1;
        s->bind[v] = (un_ref){-1, -1};
    }
    memset(s->has_val, 0, sizeof s->has_val);
    memset(s->val, 0, sizeof s->val);
}

typedef struct search {
    un_matcher *m;
    int64_t rule;
    const un__pat *p;
    int32_t root; /* graph node for step 0, or -1 for every node with the root's op */
    un_match_list *out;
} search;

static void try_place(search *q, const mstate *s, int k, int32_t x);

static void step(search *q, const mstate *s, int k) {
    if (k == q->p->n_steps) {
        un_match mt;
        mstate t = *s;
        if (finish(q->m, q->rule, q->p, &t, &mt))
            list_push(q->out, &mt);
        return;
    }
    const un__step *st = &q->p->steps[k];
    const un_matcher *m = q->m;
    switch (st->kind) {
    case UN__STEP_PRODUCER:
        try_place(q, s, k, un_graph_node(m->g, s->img[st->from])->in[st->slot].node);
        break;
    case UN__STEP_CONSUMER: {
        const un__pnode *pn = &q->p->nodes[st->node];
        un_ref pin = {pn->in_node[st->slot], pn->in_out[st->slot]};
        un_ref t =
            q->p->input_of[pin.node] >= 0 ? s->bind[pin.node] : (un_ref){s->img[pin.node], pin.out};
        UN_ASSERT(t.node >= 0);
        for (int32_t e = m->cons_at[t.node]; e < m->cons_at[t.node + 1]; e++) {
            un_ref c = m->cons[e];
            if (c.out == st->slot && un_graph_node(m->g, c.node)->in[c.out].out == t.out)
                try_place(q, s, k, c.node);
        }
        break;
    }
    default: {
        un_op op = (un_op)q->p->nodes[st->node].op;
        if (k == 0 && q->root >= 0) {
            try_place(q, s, k, q->root);
            break;
        }
        for (int32_t e = m->op_at[op]; e < m->op_at[op + 1]; e++)
            try_place(q, s, k, m->by_op[e]);
    }
    }
}

static void try_place(search *q, const mstate *s, int k, int32_t x) {
    mstate t = *s;
    if (place(q->m, q->p, &t, q->p->steps[k].node, x))
        step(q, &t, k + 1);
}

static void run(un_matcher *m, int64_t rule, int32_t root, un_match_list *out) {
    search q = {m, rule, un__ruleset_pat(m->set, rule), root, out};
    mstate s;
    state_init(&s);
    if (root >= 0) {
        m->stats.roots_tried++;
    } else {
        un_op op = (un_op)q.p->nodes[q.p->steps[0].node].op;
        m->stats.roots_tried += m->op_at[op + 1] - m->op_at[op];
    }
    step(&q, &s, 0);
}

un_status un_match_rule(un_ctx *ctx, un_matcher *m, int64_t rule, un_match_list *out) {
    if (rule < 0 || rule >= un_ruleset_count(m->set))
        return un_ctx_error(ctx, UN_ERR_INVALID, "match: rule entry %lld of %lld", (long long)rule,
                            (long long)un_ruleset_count(m->set));
    run(m, rule, -1, out);
    return UN_OK;
}

un_status un_match_at(un_ctx *ctx, un_matcher *m, int32_t node, un_match_list *out) {
    if (node < 0 || node >= m->n)
        return un_ctx_error(ctx, UN_ERR_INVALID, "match: node %d of %d", (int)node, (int)m->n);
    int64_t n;
    const int32_t *rs = un_ruleset_by_root(m->set, un_graph_node(m->g, node)->op, &n);
    for (int64_t i = 0; i < n; i++)
        if (!m->entry_ok || m->entry_ok[rs[i]])
            run(m, rs[i], node, out);
    return UN_OK;
}

static int cmp_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

/* The graph's labels with their counts (rules_impl.h), once. */
static void labels_make(un_matcher *m) {
    if (m->n_labels >= 0)
        return;
    uint64_t *l = un_xmalloc(sizeof(uint64_t) * (2 * (size_t)m->n + 1));
    int64_t n = 0;
    const un_spec *spec = un_graph_spec(m->g);
    for (int32_t v = 0; v < m->n; v++) {
        const un_node *nd = un_graph_node(m->g, v);
        if (un_op_kind_of(nd->op) == UN_OPK_SOURCE)
            continue;
        l[n++] = un__label_op(nd->op);
        l[n++] = un__label_params(nd->op, nd->params, un_spec_op(spec, nd->op)->n_params);
    }
    qsort(l, (size_t)n, sizeof *l, cmp_u64);
    m->labels = un_xmalloc(sizeof(uint64_t) * ((size_t)n + 1));
    m->label_n = un_xmalloc(sizeof(int32_t) * ((size_t)n + 1));
    m->n_labels = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 || l[i] != l[i - 1]) {
            m->labels[m->n_labels] = l[i];
            m->label_n[m->n_labels++] = 0;
        }
        m->label_n[m->n_labels - 1]++;
    }
    free(l);
}

/* Nodes of the graph with label x. */
static int32_t label_count(const un_matcher *m, uint64_t x) {
    int64_t lo = un__u64_lower_bound(m->labels, m->n_labels, x);
    return lo < m->n_labels && m->labels[lo] == x ? m->label_n[lo] : 0;
}

/* Whether the graph has every label entry e needs, as many times. */
static bool labels_cover(const un_matcher *m, int64_t e) {
    int64_t n;
    const uint64_t *need = un__ruleset_need(m->set, e, &n);
    for (int64_t a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && need[b] == need[a]; b++)
            ;
        if (label_count(m, need[a]) < b - a)
            return false;
    }
    return true;
}

un_status un_match_all(un_ctx *ctx, un_matcher *m, un_match_list *out) {
    (void)ctx;
    labels_make(m);
    int64_t nc = 0;
    for (int64_t k = 0; k < m->n_labels; k++) {
        int64_t nb;
        const int32_t *es = un__ruleset_by_key(m->set, m->labels[k], &nb);
        for (int64_t i = 0; i < nb; i++) {
            int32_t e = es[i];
            if ((m->entry_ok && !m->entry_ok[e]) || !labels_cover(m, e))
                continue;
            if (nc == m->cand_cap) {
                m->cand_cap = m->cand_cap ? 2 * m->cand_cap : 64;
                m->cand = un_xrealloc(m->cand, sizeof(uint64_t) * (size_t)m->cand_cap);
            }
            const un__pat *p = un__ruleset_pat(m->set, e);
            m->cand[nc++] = (uint64_t)p->nodes[p->steps[0].node].op << 32 | (uint64_t)e;
        }
    }
    if (nc > 1) /* the order of the full scan by root operator */
        qsort(m->cand, (size_t)nc, sizeof(uint64_t), cmp_u64);
    for (int64_t i = 0; i < nc; i++)
        run(m, (int64_t)(m->cand[i] & 0xffffffffu), -1, out);
    return UN_OK;
}

bool un_match_check(un_matcher *m, int64_t rule, const int32_t *node_map, un_match *out) {
    if (rule < 0 || rule >= un_ruleset_count(m->set))
        return false;
    const un__pat *p = un__ruleset_pat(m->set, rule);
    mstate s;
    state_init(&s);
    for (int32_t u = 0; u < p->n_nodes; u++)
        if (p->input_of[u] < 0 && !place(m, p, &s, u, node_map[u]))
            return false;
    return finish(m, rule, p, &s, out);
}

void un_match_str(const un_matcher *m, const un_match *mt, un_buf *out) {
    const un_rule *r = un_ruleset_rule(m->set, mt->rule);
    un_buf_printf(out, "rule %d%s at [", (int)un_ruleset_rule_id(m->set, mt->rule),
                  un_ruleset_rule_reversed(m->set, mt->rule) ? " (reversed)" : "");
    bool first = true;
    for (int v = 0; v < mt->n_nodes; v++) {
        int32_t x = mt->node[v];
        if (x < 0)
            continue;
        const char *nm = un_graph_node(m->g, x)->name;
        if (nm)
            un_buf_printf(out, "%s%s", first ? "" : ", ", nm);
        else
            un_buf_printf(out, "%snode %d", first ? "" : ", ", (int)x);
        first = false;
    }
    un_buf_printf(out, "]");
    for (int a = 0; a < r->n_vars; a++)
        un_buf_printf(out, "%s%s=%lld", a ? ", " : ": ", r->vars[a].name, (long long)mt->values[a]);
}
