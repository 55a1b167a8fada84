/* subst.c - layer 2: best-first search over verified rule applications (search/subst.h). */
#include "search/subst.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

un_subst_params un_subst_params_default(int devices) {
    return (un_subst_params){.map = un_map_params_default(devices), .alpha = 1.05, .budget = 1000};
}

bool un_subst_rule_algebraic(const un_rule *r) {
    const un_graph *side[2] = {r->src, r->dst};
    for (int s = 0; s < 2; s++)
        for (int32_t v = 0; v < un_graph_node_count(side[s]); v++)
            if (un_op_kind_of(un_graph_node(side[s], v)->op) == UN_OPK_PARALLEL)
                return false;
    return true;
}

int64_t un_subst_rules_pick(const un_ruleset *set, bool *use) {
    int64_t n = 0;
    for (int64_t i = 0; set && i < un_ruleset_count(set); i++) {
        un_rule *r = un_ruleset_rule_decode(set, i);
        bool ok = un_subst_rule_algebraic(r);
        un_rule_free(r);
        n += ok;
        if (use)
            use[i] = ok;
    }
    return n;
}

double un_search_clock(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- the memo: canonical hash -> layer-3 cost (open addressing; hash 0 stored as 1) ---- */

typedef struct memo {
    uint64_t *key;
    double *cost;
    int64_t n, cap;
} memo;

static uint64_t memo_key(uint64_t h) { return h ? h : 1; }

static int64_t memo_slot(const memo *m, uint64_t k) {
    int64_t i = (int64_t)(un_mix64(k) & (uint64_t)(m->cap - 1));
    while (m->key[i] && m->key[i] != k)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static bool memo_get(const memo *m, uint64_t h, double *cost) {
    if (!m->cap)
        return false;
    int64_t i = memo_slot(m, memo_key(h));
    if (!m->key[i])
        return false;
    *cost = m->cost[i];
    return true;
}

static void memo_put(memo *m, uint64_t h, double cost) {
    if (2 * (m->n + 1) > m->cap) {
        memo old = *m;
        m->cap = old.cap ? 2 * old.cap : 1024;
        m->key = un_xcalloc((size_t)m->cap, sizeof *m->key);
        m->cost = un_xcalloc((size_t)m->cap, sizeof *m->cost);
        m->n = 0;
        for (int64_t i = 0; i < old.cap; i++)
            if (old.key[i]) {
                int64_t j = memo_slot(m, old.key[i]);
                m->key[j] = old.key[i];
                m->cost[j] = old.cost[i];
                m->n++;
            }
        free(old.key);
        free(old.cost);
    }
    int64_t i = memo_slot(m, memo_key(h));
    if (!m->key[i])
        m->n++;
    m->key[i] = memo_key(h);
    m->cost[i] = cost;
}

static void memo_deinit(memo *m) {
    free(m->key);
    free(m->cost);
    memset(m, 0, sizeof *m);
}

/* ---- the queue: a binary min-heap on (cost, insertion order) ---- */

typedef struct qitem {
    double cost;
    int64_t seq;
    un_graph *g;  /* owned */
    int32_t path; /* index in the path arrays */
} qitem;

typedef struct queue {
    qitem *v;
    int64_t n, cap;
} queue;

static bool qless(const qitem *a, const qitem *b) {
    return a->cost < b->cost || (a->cost == b->cost && a->seq < b->seq);
}

static void qpush(queue *q, qitem it) {
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 64;
        q->v = un_xrealloc(q->v, (size_t)q->cap * sizeof *q->v);
    }
    int64_t i = q->n++;
    while (i > 0 && qless(&it, &q->v[(i - 1) / 2])) {
        q->v[i] = q->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q->v[i] = it;
}

static qitem qpop(queue *q) {
    qitem top = q->v[0], last = q->v[--q->n];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= q->n)
            break;
        if (c + 1 < q->n && qless(&q->v[c + 1], &q->v[c]))
            c++;
        if (!qless(&q->v[c], &last))
            break;
        q->v[i] = q->v[c];
        i = c;
    }
    if (q->n > 0)
        q->v[i] = last;
    return top;
}

/* Drops the costliest item (a leaf of the heap): O(n), n is bounded by max_queue. */
static void qdrop_worst(queue *q) {
    int64_t w = q->n / 2;
    for (int64_t i = q->n / 2; i < q->n; i++)
        if (qless(&q->v[w], &q->v[i]))
            w = i;
    un_graph_free(q->v[w].g);
    q->v[w] = q->v[--q->n]; /* the last leaf moved into a leaf's place: sift it up */
    for (int64_t i = w; i > 0 && i < q->n && qless(&q->v[i], &q->v[(i - 1) / 2]); i = (i - 1) / 2) {
        qitem t = q->v[i];
        q->v[i] = q->v[(i - 1) / 2];
        q->v[(i - 1) / 2] = t;
    }
}

static void queue_deinit(queue *q) {
    for (int64_t i = 0; i < q->n; i++)
        un_graph_free(q->v[i].g);
    free(q->v);
    memset(q, 0, sizeof *q);
}

/* ---- the search ---- */

/* Layer 3's cost of g: un_map_new + un_map_solve at p->lambda. */
static un_status cost_of(un_ctx *ctx, un_cost_model *cm, const un_graph *g,
                         const un_subst_params *p, double *cost) {
    un_map *m = NULL;
    un_status st = un_map_new(ctx, cm, g, &p->map, &m);
    if (st == UN_OK) {
        int32_t *a = un_xcalloc((size_t)un_graph_node_count(g) + 1, sizeof *a);
        un_map_stats ms;
        st = un_map_solve(ctx, m, p->lambda, a, &ms);
        *cost = ms.cost;
        free(a);
    }
    un_map_free(m);
    return st;
}

/* The path of rewrites: per queued graph its parent's index and the entry applied. */
typedef struct paths {
    int32_t *parent, *entry;
    int32_t n, cap;
} paths;

static int32_t path_add(paths *ps, int32_t parent, int32_t entry) {
    if (ps->n == ps->cap) {
        ps->cap = ps->cap ? 2 * ps->cap : 256;
        ps->parent = un_xrealloc(ps->parent, (size_t)ps->cap * sizeof *ps->parent);
        ps->entry = un_xrealloc(ps->entry, (size_t)ps->cap * sizeof *ps->entry);
    }
    ps->parent[ps->n] = parent;
    ps->entry[ps->n] = entry;
    return ps->n++;
}

un_status un_subst_search(un_ctx *ctx, const un_ruleset *set, un_cost_model *cm, const un_graph *g,
                          const un_subst_params *p, un_subst_result *out) {
    memset(out, 0, sizeof *out);
    if (!(p->alpha >= 1) || isinf(p->alpha))
        return un_ctx_error(ctx, UN_ERR_INVALID, "alpha %g: want a number >= 1", p->alpha);
    double t0 = un_search_clock();
    double deadline = p->time_limit > 0 ? t0 + p->time_limit : INFINITY;
    int64_t budget = p->budget > 0 ? p->budget : 1000;
    int64_t max_queue = p->max_queue > 0 ? p->max_queue : 256;
    int64_t n_entries = set ? un_ruleset_count(set) : 0;
    bool *use = un_xcalloc((size_t)n_entries + 1, sizeof *use);
    out->rules_loaded = n_entries;
    if (p->use) {
        memcpy(use, p->use, (size_t)n_entries * sizeof *use);
        for (int64_t i = 0; i < n_entries; i++)
            out->rules_used += use[i];
    } else {
        out->rules_used = un_subst_rules_pick(set, use);
    }
    out->ended = "exhausted";

    memo seen = {0};
    queue q = {0};
    paths ps = {0};
    int64_t seq = 0;
    double t = un_search_clock();
    un_status st = cost_of(ctx, cm, g, p, &out->start_cost);
    out->map_s += un_search_clock() - t;
    out->costed = 1;
    if (st != UN_OK)
        goto done;
    out->best_cost = out->start_cost;
    out->best = un_graph_clone(g);
    int32_t best_path = path_add(&ps, -1, -1);
    memo_put(&seen, un_graph_hash(g), out->start_cost);
    if (out->rules_used > 0)
        qpush(&q, (qitem){out->start_cost, seq++, un_graph_clone(g), best_path});
    bool stop = false;
    while (q.n > 0 && !stop) {
        if (un_search_clock() > deadline) {
            out->ended = "time";
            break;
        }
        qitem it = qpop(&q);
        out->popped++;
        if (it.cost > p->alpha * out->best_cost) { /* the best improved since it was queued */
            out->pruned_alpha++;
            un_graph_free(it.g);
            continue;
        }
        t = un_search_clock();
        un_matcher *mt = NULL;
        un_match_list ms = {0};
        st = un_matcher_new(ctx, set, it.g, &mt);
        if (st == UN_OK)
            st = un_match_all(ctx, mt, &ms);
        out->match_s += un_search_clock() - t;
        for (int64_t k = 0; st == UN_OK && k < ms.n && !stop; k++) {
            const un_match *m = &ms.v[k];
            if (!use[m->rule])
                continue;
            out->matches++;
            if (un_search_clock() > deadline) {
                out->ended = "time";
                stop = true;
                break;
            }
            t = un_search_clock();
            un_graph *child = NULL;
            un_status as = un_apply(ctx, set, it.g, m, &child, NULL);
            out->match_s += un_search_clock() - t;
            if (as != UN_OK) {
                out->apply_failed++;
                un_ctx_clear(ctx);
                continue;
            }
            out->generated++;
            if (p->max_nodes > 0 && un_graph_node_count(child) > p->max_nodes) {
                out->too_big++;
                un_graph_free(child);
                continue;
            }
            un_graph_canonicalize(child);
            uint64_t h = un_graph_hash(child);
            double c;
            if (memo_get(&seen, h, &c)) {
                out->duplicates++;
                un_graph_free(child);
                continue;
            }
            if (out->costed >= budget) {
                out->ended = "budget";
                stop = true;
                un_graph_free(child);
                break;
            }
            t = un_search_clock();
            as = cost_of(ctx, cm, child, p, &c);
            out->map_s += un_search_clock() - t;
            out->costed++;
            if (as != UN_OK) {
                out->map_failed++;
                un_ctx_clear(ctx);
                memo_put(&seen, h, INFINITY);
                un_graph_free(child);
                continue;
            }
            memo_put(&seen, h, c);
            if (c > p->alpha * out->best_cost) {
                out->pruned_alpha++;
                un_graph_free(child);
                continue;
            }
            int32_t at = path_add(&ps, it.path, m->rule);
            if (c < out->best_cost) {
                out->best_cost = c;
                un_graph_free(out->best);
                out->best = un_graph_clone(child);
                best_path = at;
            }
            qpush(&q, (qitem){c, seq++, child, at});
            if (q.n > max_queue) {
                qdrop_worst(&q);
                out->queue_dropped++;
            }
            if (q.n > out->max_queue)
                out->max_queue = q.n;
        }
        un_match_list_deinit(&ms);
        un_matcher_free(mt);
        un_graph_free(it.g);
    }
    if (st == UN_OK) {
        for (int32_t v = best_path; v > 0; v = ps.parent[v])
            out->n_steps++;
        out->steps = un_xcalloc((size_t)out->n_steps + 1, sizeof *out->steps);
        int32_t k = out->n_steps;
        for (int32_t v = best_path; v > 0; v = ps.parent[v]) {
            un_subst_step *s = &out->steps[--k];
            s->entry = ps.entry[v];
            s->rule_id = un_ruleset_rule_id(set, s->entry);
            s->reversed = un_ruleset_rule_reversed(set, s->entry);
        }
    }
done:
    free(use);
    memo_deinit(&seen);
    queue_deinit(&q);
    free(ps.parent);
    free(ps.entry);
    out->wall = un_search_clock() - t0;
    if (st != UN_OK)
        un_subst_result_deinit(out);
    return st;
}

void un_subst_result_deinit(un_subst_result *r) {
    if (!r)
        return;
    un_graph_free(r->best);
    free(r->steps);
    memset(r, 0, sizeof *r);
}

void un_subst_report_steps(const un_subst_result *r, const un_ruleset *set, un_buf *out) {
    for (int32_t i = 0; i < r->n_steps; i++) {
        const un_subst_step *s = &r->steps[i];
        un_buf text = {0};
        un_rule_str(un_ruleset_rule(set, s->entry), &text);
        while (text.len > 0 && text.data[text.len - 1] == '\n')
            text.data[--text.len] = '\0';
        un_buf_printf(out, "  rule %d%s: ", (int)s->rule_id, s->reversed ? " (reversed)" : "");
        for (size_t k = 0; k < text.len; k++) /* one line per step: outputs joined by "; " */
            un_buf_printf(out, "%s", text.data[k] == '\n' ? "; " : (char[2]){text.data[k], 0});
        un_buf_printf(out, "\n");
        un_buf_deinit(&text);
    }
}
