/* subst.c - layer 2: best-first search over verified rule applications (search/subst.h). */
#include "search/subst.h"

#include <math.h>
#include <stdio.h>
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

/* How the core costs a graph: the whole graph by layer 3 (un_subst_search) or one layer-1 piece
 * per cut configuration (un_subst_search_pieces). `at` is the path index the graph gets. */
typedef un_status (*cost_fn)(un_ctx *ctx, void *user, const un_graph *g, int32_t at, double *cost);

typedef struct whole_cost {
    un_cost_model *cm;
    const un_subst_params *p;
} whole_cost;

/* Layer 3's cost of g: un_map_new + un_map_solve at p->lambda. */
static un_status whole_cost_fn(un_ctx *ctx, void *user, const un_graph *g, int32_t at,
                               double *cost) {
    (void)at;
    const whole_cost *w = user;
    un_map *m = NULL;
    un_status st = un_map_new(ctx, w->cm, g, &w->p->map, &m);
    if (st == UN_OK) {
        int32_t *a = un_xcalloc((size_t)un_graph_node_count(g) + 1, sizeof *a);
        un_map_stats ms;
        st = un_map_solve(ctx, m, w->p->lambda, a, &ms);
        *cost = ms.cost;
        free(a);
    }
    un_map_free(m);
    return st;
}

/* The path of rewrites: per costed graph its parent's index and the entry applied. */
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

static void paths_deinit(paths *ps) {
    free(ps->parent);
    free(ps->entry);
    memset(ps, 0, sizeof *ps);
}

/* Appends the rewrites on the path to `at` (in order) to out->steps. */
static void steps_append(un_subst_result *out, const un_ruleset *set, const paths *ps, int32_t at) {
    int32_t k = 0;
    for (int32_t v = at; v > 0; v = ps->parent[v])
        k++;
    out->steps =
        un_xrealloc(out->steps, ((size_t)out->n_steps + (size_t)k + 1) * sizeof *out->steps);
    int32_t i = out->n_steps + k;
    for (int32_t v = at; v > 0; v = ps->parent[v]) {
        un_subst_step *s = &out->steps[--i];
        s->entry = ps->entry[v];
        s->rule_id = un_ruleset_rule_id(set, s->entry);
        s->reversed = un_ruleset_rule_reversed(set, s->entry);
    }
    out->n_steps += k;
}

/* Whether match m covers one of the nodes fz[0 .. n) (a piece's entry or exit). */
static bool touches_frozen(const un_match *m, const int32_t *fz, int n) {
    for (int32_t i = 0; i < m->n_nodes; i++)
        for (int f = 0; f < n; f++)
            if (m->node[i] >= 0 && m->node[i] == fz[f])
                return true;
    return false;
}

/* Whether g has a match of a rule in use that touches no node named in frozen[]. */
static bool has_match(un_ctx *ctx, const un_ruleset *set, const un_graph *g, const bool *use,
                      const char *const *frozen, int n_frozen) {
    int32_t fz[2] = {-1, -1};
    for (int i = 0; i < n_frozen && i < 2; i++)
        fz[i] = un_graph_find(g, frozen[i]);
    un_matcher *mt = NULL;
    un_match_list ms = {0};
    bool any = false;
    if (un_matcher_new(ctx, set, g, &mt) == UN_OK && un_match_all(ctx, mt, &ms) == UN_OK)
        for (int64_t k = 0; k < ms.n && !any; k++)
            any = use[ms.v[k].rule] && !touches_frozen(&ms.v[k], fz, n_frozen);
    un_ctx_clear(ctx);
    un_match_list_deinit(&ms);
    un_matcher_free(mt);
    return any;
}

/* The best-first search from g: costs by fn, adds its counters to *out, keeps the path of every
 * costed graph in *ps (index 0: g) and returns the best one's index in *best_at; out->best and
 * out->best_cost get the cheapest graph. Matches that touch a node named in frozen[] are
 * skipped (a piece's boundary). The start graph's cost failing is the error returned. */
static un_status search_core(un_ctx *ctx, const un_ruleset *set, const un_graph *g,
                             const un_subst_params *p, const bool *use, double deadline, cost_fn fn,
                             void *user, const char *const *frozen, int n_frozen,
                             un_subst_result *out, paths *ps, int32_t *best_at) {
    int64_t budget = p->budget > 0 ? p->budget : 1000;
    int64_t max_queue = p->max_queue > 0 ? p->max_queue : 256;
    int64_t costed = 0;
    un_hmap seen = {0}; /* canonical hash -> layer-3 cost */
    queue q = {0};
    int64_t seq = 0;
    double t = un_search_clock();
    int32_t best_path = path_add(ps, -1, -1);
    double start_cost = INFINITY;
    un_status st = fn(ctx, user, g, best_path, &start_cost);
    out->map_s += un_search_clock() - t;
    out->costed++;
    costed++;
    *best_at = best_path;
    if (st != UN_OK) {
        un_hmap_deinit(&seen);
        return st;
    }
    out->start_cost = out->best_cost = start_cost;
    un_graph_free(out->best);
    out->best = un_graph_clone(g);
    un_hmap_put(&seen, un_graph_hash(g), start_cost);
    bool any_use = false;
    for (int64_t i = 0; set && i < un_ruleset_count(set) && !any_use; i++)
        any_use = use[i];
    if (any_use)
        qpush(&q, (qitem){start_cost, seq++, un_graph_clone(g), best_path});
    bool stop = false;
    int32_t fz[2] = {-1, -1};
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
        for (int i = 0; i < n_frozen && i < 2; i++)
            fz[i] = un_graph_find(it.g, frozen[i]);
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
            if (touches_frozen(m, fz, n_frozen)) {
                out->boundary++;
                continue;
            }
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
            if (un_hmap_get(&seen, h, &c)) {
                out->duplicates++;
                un_graph_free(child);
                continue;
            }
            if (costed >= budget) {
                if (strcmp(out->ended, "time") != 0)
                    out->ended = "budget";
                stop = true;
                un_graph_free(child);
                break;
            }
            int32_t at = path_add(ps, it.path, m->rule);
            t = un_search_clock();
            as = fn(ctx, user, child, at, &c);
            out->map_s += un_search_clock() - t;
            out->costed++;
            costed++;
            if (as != UN_OK) {
                out->map_failed++;
                un_ctx_clear(ctx);
                un_hmap_put(&seen, h, INFINITY);
                un_graph_free(child);
                continue;
            }
            un_hmap_put(&seen, h, c);
            if (c > p->alpha * out->best_cost) {
                out->pruned_alpha++;
                un_graph_free(child);
                continue;
            }
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
    *best_at = best_path;
    un_hmap_deinit(&seen);
    queue_deinit(&q);
    return st;
}

/* The entries layer 2 uses (p->use, else picked), counted into out. */
static bool *rules_in_use(const un_ruleset *set, const un_subst_params *p, un_subst_result *out) {
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
    return use;
}

un_status un_subst_search(un_ctx *ctx, const un_ruleset *set, un_cost_model *cm, const un_graph *g,
                          const un_subst_params *p, un_subst_result *out) {
    memset(out, 0, sizeof *out);
    if (!(p->alpha >= 1) || isinf(p->alpha))
        return un_ctx_error(ctx, UN_ERR_INVALID, "alpha %g: want a number >= 1", p->alpha);
    double t0 = un_search_clock();
    double deadline = p->time_limit > 0 ? t0 + p->time_limit : INFINITY;
    bool *use = rules_in_use(set, p, out);
    out->ended = "exhausted";
    paths ps = {0};
    int32_t best_at = 0;
    whole_cost w = {cm, p};
    un_status st =
        search_core(ctx, set, g, p, use, deadline, whole_cost_fn, &w, NULL, 0, out, &ps, &best_at);
    if (st == UN_OK)
        steps_append(out, set, &ps, best_at);
    free(use);
    paths_deinit(&ps);
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

/* ---- layer 2 per layer-1 piece ---- */

/* One piece of g taken out as its own graph s: the entry cut node over fresh inputs ("__in<k>"),
 * the piece's nodes, the sources they read; every node named (g's name, else "__s<id>" for a
 * source, "__n<id>" for an operator). sg[v]: the g node of s's node v (-1: a fresh input). */
typedef struct piece_graph {
    un_graph *s;
    int32_t *sg;
    int32_t entry, exit;     /* in s (-1: none) */
    int32_t g_entry, g_exit; /* in g */
    int32_t n_exit_out;      /* s's first outputs are the exit's */
    int32_t n_gout;          /* then these of g's outputs, gout[k] their index among g's */
    int32_t *gout;
} piece_graph;

static void piece_graph_deinit(piece_graph *pg) {
    un_graph_free(pg->s);
    free(pg->sg);
    free(pg->gout);
    memset(pg, 0, sizeof *pg);
}

static const char *node_label(const un_graph *g, int32_t v, char *buf, size_t len) {
    const un_node *nd = un_graph_node(g, v);
    if (nd->name)
        return nd->name;
    snprintf(buf, len, "__%c%d", un_op_kind_of(nd->op) == UN_OPK_SOURCE ? 's' : 'n', (int)v);
    return buf;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static un_status piece_take(un_ctx *ctx, const un_graph *g, const un_split *sp, int32_t q,
                            piece_graph *pg) {
    memset(pg, 0, sizeof *pg);
    int32_t n = un_graph_node_count(g), size = sp->size[q];
    int32_t *nodes = un_xmalloc(((size_t)size + 1) * sizeof *nodes);
    un_split_piece_nodes(sp, q, nodes);
    qsort(nodes, (size_t)size, sizeof *nodes, cmp_i32);
    int32_t *gs = un_xmalloc(((size_t)n + 1) * sizeof *gs);
    bool *inside = un_xcalloc((size_t)n + 1, sizeof *inside);
    for (int32_t v = 0; v < n; v++)
        gs[v] = -1;
    for (int32_t i = 0; i < size; i++)
        inside[nodes[i]] = true;
    pg->s = un_graph_new(un_graph_spec(g));
    pg->sg = un_xmalloc(((size_t)n + UN_MAX_INPUTS + 2) * sizeof *pg->sg);
    pg->entry = pg->exit = -1;
    pg->g_entry = sp->entry[q];
    pg->g_exit = sp->exit[q];
    char buf[48];
    int32_t id = -1;
    un_status st = UN_OK;
    if (pg->g_entry >= 0) {
        const un_node *e = un_graph_node(g, pg->g_entry);
        un_ref in[UN_MAX_INPUTS];
        for (int t = 0; t < e->n_in && st == UN_OK; t++) {
            snprintf(buf, sizeof buf, "__in%d", t);
            st = un_graph_add_input_shape(ctx, pg->s, buf, UN_OP_INPUT, un_graph_shape(g, e->in[t]),
                                          &id);
            if (st == UN_OK) {
                pg->sg[id] = -1;
                in[t] = (un_ref){id, 0};
            }
        }
        if (st == UN_OK)
            st = un_graph_add(ctx, pg->s, e->op, e->params, in, e->n_in,
                              node_label(g, pg->g_entry, buf, sizeof buf), &id);
        if (st == UN_OK) {
            pg->sg[id] = pg->g_entry;
            gs[pg->g_entry] = pg->entry = id;
        }
    }
    for (int32_t i = 0; i < size && st == UN_OK; i++) {
        const un_node *nd = un_graph_node(g, nodes[i]);
        un_ref in[UN_MAX_INPUTS];
        for (int t = 0; t < nd->n_in && st == UN_OK; t++) {
            int32_t u = nd->in[t].node;
            if (gs[u] < 0 && un_op_kind_of(un_graph_node(g, u)->op) == UN_OPK_SOURCE) {
                st = un_graph_add_input_shape(ctx, pg->s, node_label(g, u, buf, sizeof buf),
                                              un_graph_node(g, u)->op,
                                              un_graph_shape(g, (un_ref){u, 0}), &id);
                if (st == UN_OK) {
                    pg->sg[id] = u;
                    gs[u] = id;
                }
            } else if (gs[u] < 0) {
                st = un_ctx_error(ctx, UN_ERR_INVALID, "piece %d reads node %d outside it", (int)q,
                                  (int)u);
            }
            in[t] = (un_ref){gs[u], nd->in[t].out};
        }
        if (st == UN_OK)
            st = un_graph_add(ctx, pg->s, nd->op, nd->params, in, nd->n_in,
                              node_label(g, nodes[i], buf, sizeof buf), &id);
        if (st == UN_OK) {
            pg->sg[id] = nodes[i];
            gs[nodes[i]] = id;
        }
    }
    int32_t no = un_graph_output_count(g);
    un_ref *outs = un_xmalloc(((size_t)no + UN_MAX_OUTPUTS + 1) * sizeof *outs);
    pg->gout = un_xmalloc(((size_t)no + 1) * sizeof *pg->gout);
    int32_t k = 0;
    if (st == UN_OK && pg->g_exit >= 0) {
        pg->exit = gs[pg->g_exit];
        pg->n_exit_out = un_graph_node(g, pg->g_exit)->inf.n_out;
        for (int32_t j = 0; j < pg->n_exit_out; j++)
            outs[k++] = (un_ref){pg->exit, j};
    }
    for (int32_t i = 0; i < no && st == UN_OK; i++) {
        un_ref r = un_graph_output(g, i);
        if (!inside[r.node] || r.node == pg->g_exit)
            continue;
        outs[k++] = (un_ref){gs[r.node], r.out};
        pg->gout[pg->n_gout++] = i;
    }
    if (st == UN_OK && k == 0)
        st = un_ctx_error(ctx, UN_ERR_INVALID, "piece %d has no output", (int)q);
    if (st == UN_OK)
        st = un_graph_set_outputs(ctx, pg->s, outs, k);
    free(outs);
    free(nodes);
    free(gs);
    free(inside);
    if (st != UN_OK)
        piece_graph_deinit(pg);
    return st;
}

/* Whether node u of map a and node v of map b have the same configurations, in the same order. */
static bool same_configs(const un_map *a, int32_t u, const un_map *b, int32_t v) {
    int32_t n = un_map_config_count(a, u);
    if (n != un_map_config_count(b, v))
        return false;
    for (int32_t i = 0; i < n; i++) {
        const un_map_config *x = un_map_config_get(a, u, i), *y = un_map_config_get(b, v, i);
        if (x->degree != y->degree || x->start != y->start || x->n_out != y->n_out ||
            strcmp(x->name, y->name) != 0)
            return false;
        for (int k = 0; k < x->n_out; k++)
            if (!un_shape_eq(&x->out[k], &y->out[k]))
                return false;
    }
    return true;
}

/* One distinct piece's search: per (entry, exit) configuration pair the cheapest candidate. */
typedef struct piece_cost {
    un_cost_model *cm;
    const un_subst_params *p;
    const piece_graph *pg;
    const un_map *gm; /* g's map: the boundary configurations are its */
    const char *entry_name, *exit_name;
    int32_t ne, nx;
    double *best;      /* [ne * nx] */
    double *orig;      /* [ne * nx] the piece as it is (NULL until costed) */
    double *pre, *suf; /* [ne], [nx] the chain's other pieces as they are (NULL: none yet) */
    int32_t *arg;      /* [ne * nx] candidate, -1: none */
    un_graph **cand;   /* owned; cand[0] is the piece as it is */
    int32_t *cand_at;  /* their path indices */
    int32_t n_cand, cap_cand;
} piece_cost;

static void piece_cost_deinit(piece_cost *pc) {
    for (int32_t i = 0; i < pc->n_cand; i++)
        un_graph_free(pc->cand[i]);
    free(pc->cand);
    free(pc->cand_at);
    free(pc->best);
    free(pc->orig);
    free(pc->pre);
    free(pc->suf);
    free(pc->arg);
    memset(pc, 0, sizeof *pc);
}

/* Layer 3 on the piece alone, once per entry configuration, for every exit configuration:
 * tab[e * nx + x]. */
static un_status piece_table(un_ctx *ctx, const piece_cost *pc, const un_graph *g, double *tab) {
    un_map_params mp = pc->p->map;
    mp.free_outputs = pc->pg->n_exit_out;
    un_map *m = NULL;
    un_status st = un_map_new(ctx, pc->cm, g, &mp, &m);
    if (st != UN_OK)
        return st;
    int32_t e = pc->entry_name ? un_graph_find(g, pc->entry_name) : -1;
    int32_t x = pc->exit_name ? un_graph_find(g, pc->exit_name) : -1;
    const un_sp_tree *t = un_map_tree(m);
    int32_t cb = 0, nc = 0;
    if (t) {
        const un_sp_node *root = &t->nodes[t->root];
        nc = root->kind == UN_SP_SERIES ? root->n_child : 1;
        if (e >= 0) {
            const un_sp_node *c0 =
                root->kind == UN_SP_SERIES ? &t->nodes[t->child[root->child_at]] : root;
            cb = root->kind == UN_SP_SERIES && c0->kind == UN_SP_LEAF && c0->node == e ? 1 : -1;
        }
    }
    if (!t || cb < 0 || cb >= nc || (pc->entry_name && e < 0) || (pc->exit_name && x < 0) ||
        (e >= 0 && !same_configs(m, e, pc->gm, pc->pg->g_entry)) ||
        (x >= 0 && !same_configs(m, x, pc->gm, pc->pg->g_exit))) {
        un_map_free(m);
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "layer 2: a piece's boundary does not map back to the graph's");
    }
    int32_t nn = un_graph_node_count(g);
    int32_t *assign = un_xmalloc(((size_t)pc->nx * (size_t)nn + 1) * sizeof *assign);
    un_map_stats ms;
    memset(&ms, 0, sizeof ms);
    for (int32_t i = 0; i < pc->ne && st == UN_OK; i++)
        st = un_map_solve_piece(ctx, m, pc->p->lambda, cb, nc, e, i, x, 0,
                                tab + (size_t)i * (size_t)pc->nx, assign, &ms);
    free(assign);
    un_map_free(m);
    return st;
}

/* Keeps candidate g (its table tab, path index at) where it is the cheapest so far. */
static void piece_record(piece_cost *pc, const un_graph *g, const double *tab, int32_t at) {
    size_t cells = (size_t)pc->ne * (size_t)pc->nx;
    if (pc->n_cand == pc->cap_cand) {
        pc->cap_cand = pc->cap_cand ? 2 * pc->cap_cand : 8;
        pc->cand = un_xrealloc(pc->cand, (size_t)pc->cap_cand * sizeof *pc->cand);
        pc->cand_at = un_xrealloc(pc->cand_at, (size_t)pc->cap_cand * sizeof *pc->cand_at);
    }
    int32_t c = pc->n_cand++;
    pc->cand[c] = un_graph_clone(g);
    pc->cand_at[c] = at;
    for (size_t i = 0; i < cells; i++)
        if (tab[i] < pc->best[i]) {
            pc->best[i] = tab[i];
            pc->arg[i] = c;
        }
}

/* The core's cost of a piece candidate: its table, the cheapest per cell kept; the priority is
 * the whole graph's chain cost with this piece changed (pre[e] + tab[e][x] + suf[x], the other
 * pieces as they are, at the class's first piece), so alpha prunes on the whole graph's scale. */
static un_status piece_cost_fn(un_ctx *ctx, void *user, const un_graph *g, int32_t at,
                               double *cost) {
    piece_cost *pc = user;
    size_t cells = (size_t)pc->ne * (size_t)pc->nx;
    double *tab = un_xmalloc((cells + 1) * sizeof *tab);
    un_status st = UN_OK;
    if (at == 0 && pc->orig) /* the start: the piece as it is, costed already */
        memcpy(tab, pc->orig, cells * sizeof *tab);
    else
        st = piece_table(ctx, pc, g, tab);
    if (st != UN_OK) {
        free(tab);
        return st;
    }
    double least = INFINITY;
    bool keep = false;
    for (size_t i = 0; i < cells; i++) {
        keep |= tab[i] < pc->best[i];
        double c = tab[i];
        if (pc->pre && pc->suf)
            c += pc->pre[i / (size_t)pc->nx] + pc->suf[i % (size_t)pc->nx];
        if (c < least)
            least = c;
    }
    if (keep)
        piece_record(pc, g, tab, at);
    free(tab);
    *cost = least;
    return UN_OK;
}

/* Whether a and b are the same graph node by node in canonical order (ca, cb): then node ca[i]
 * of a plays the part of node cb[i] of b. */
static bool same_canonical(const un_graph *a, const un_graph *b, const int32_t *ca,
                           const int32_t *cb) {
    int32_t n = un_graph_node_count(a);
    if (n != un_graph_node_count(b) || un_graph_output_count(a) != un_graph_output_count(b))
        return false;
    int32_t *pa = un_xmalloc(((size_t)n + 1) * sizeof *pa),
            *pb = un_xmalloc(((size_t)n + 1) * sizeof *pb);
    for (int32_t i = 0; i < n; i++) {
        pa[ca[i]] = i;
        pb[cb[i]] = i;
    }
    bool same = true;
    for (int32_t i = 0; i < n && same; i++) {
        const un_node *x = un_graph_node(a, ca[i]), *y = un_graph_node(b, cb[i]);
        same = x->op == y->op && x->n_in == y->n_in && x->inf.n_out == y->inf.n_out;
        for (int k = 0; k < UN_MAX_PARAMS && same; k++)
            same = un_param_eq(&x->params[k], &y->params[k]);
        for (int t = 0; t < x->n_in && same; t++)
            same = pa[x->in[t].node] == pb[y->in[t].node] && x->in[t].out == y->in[t].out;
        for (int k = 0; k < x->inf.n_out && same; k++)
            same = un_shape_eq(&x->inf.out[k], &y->inf.out[k]);
    }
    for (int32_t i = 0; i < un_graph_output_count(a) && same; i++) {
        un_ref r = un_graph_output(a, i), s = un_graph_output(b, i);
        same = pa[r.node] == pb[s.node] && r.out == s.out;
    }
    free(pa);
    free(pb);
    return same;
}

/* The name a node of the owner's candidate has in piece q: a name of the owner's piece graph
 * (or a rewrite's name anchored at one: "<anchor>~...") becomes the name of q's node in the same
 * canonical position. from/to: the two piece graphs' names by canonical position (n of them). */
static void name_translate(const char *name, const char *const *from, const char *const *to,
                           int32_t n, char *out, size_t len) {
    if (!from || !name) {
        snprintf(out, len, "%s", name ? name : "");
        return;
    }
    const char *tilde = strchr(name, '~');
    size_t an = tilde ? (size_t)(tilde - name) : strlen(name);
    for (int32_t i = 0; i < n; i++)
        if (strlen(from[i]) == an && strncmp(from[i], name, an) == 0) {
            snprintf(out, len, "%s%s", to[i], tilde ? tilde : "");
            return;
        }
    snprintf(out, len, "%s", name);
}

/* g with each piece q replaced by candidate choice[q] of its class (owner[q]'s piece graph). */
static un_status stitch(un_ctx *ctx, const un_graph *g, const piece_graph *pgs,
                        const piece_cost *pcs, const int32_t *cls, const int32_t *owner,
                        const int32_t *choice, int32_t n_pieces, un_graph **out) {
    *out = NULL;
    int32_t n = un_graph_node_count(g), no = un_graph_output_count(g);
    un_ref *gmap = un_xmalloc(((size_t)n * UN_MAX_OUTPUTS + 1) * sizeof *gmap);
    for (size_t i = 0; i < (size_t)n * UN_MAX_OUTPUTS; i++)
        gmap[i] = (un_ref){-1, -1};
    un_ref *outs = un_xmalloc(((size_t)no + 1) * sizeof *outs);
    for (int32_t i = 0; i < no; i++)
        outs[i] = (un_ref){-1, -1};
    un_graph *ng = un_graph_new(un_graph_spec(g));
    un_status st = UN_OK;
    for (int32_t v = 0; v < n && st == UN_OK; v++)
        if (un_op_kind_of(un_graph_node(g, v)->op) == UN_OPK_SOURCE)
            st = un_graph_copy_node(ctx, g, v, NULL, ng, gmap, NULL);
    for (int32_t i = 0; i < no; i++) {
        un_ref r = un_graph_output(g, i);
        if (un_op_kind_of(un_graph_node(g, r.node)->op) == UN_OPK_SOURCE)
            outs[i] = gmap[(size_t)r.node * UN_MAX_OUTPUTS + (size_t)r.out];
    }
    char tname[256], fresh[64];
    for (int32_t q = 0; q < n_pieces && st == UN_OK; q++) {
        const piece_graph *pq = &pgs[q], *po = &pgs[owner[q]];
        const un_graph *c = pcs[cls[q]].cand[choice[q]];
        int32_t ns = un_graph_node_count(pq->s);
        const char **from = NULL, **to = NULL;
        if (owner[q] != q) {
            int32_t *co = un_xmalloc(((size_t)ns + 1) * sizeof *co);
            int32_t *cq = un_xmalloc(((size_t)ns + 1) * sizeof *cq);
            un_graph_canonical_order(po->s, co);
            un_graph_canonical_order(pq->s, cq);
            from = un_xmalloc(((size_t)ns + 1) * sizeof *from);
            to = un_xmalloc(((size_t)ns + 1) * sizeof *to);
            for (int32_t i = 0; i < ns; i++) {
                from[i] = un_graph_node(po->s, co[i])->name;
                to[i] = un_graph_node(pq->s, cq[i])->name;
            }
            free(co);
            free(cq);
        }
        int32_t nc = un_graph_node_count(c);
        un_ref *cmap = un_xmalloc(((size_t)nc * UN_MAX_OUTPUTS + 1) * sizeof *cmap);
        for (size_t i = 0; i < (size_t)nc * UN_MAX_OUTPUTS; i++)
            cmap[i] = (un_ref){-1, -1};
        for (int32_t v = 0; v < nc && st == UN_OK; v++) {
            const un_node *nd = un_graph_node(c, v);
            name_translate(nd->name, from, to, ns, tname, sizeof tname);
            int32_t sid = un_graph_find(pq->s, tname);
            int32_t gid = sid >= 0 ? pq->sg[sid] : -1;
            if (un_op_kind_of(nd->op) == UN_OPK_SOURCE || (sid >= 0 && sid == pq->entry)) {
                for (int k = 0; gid >= 0 && k < nd->inf.n_out; k++)
                    cmap[(size_t)v * UN_MAX_OUTPUTS + (size_t)k] =
                        gmap[(size_t)gid * UN_MAX_OUTPUTS + (size_t)k];
                continue;
            }
            un_ref in[UN_MAX_INPUTS];
            for (int t = 0; t < nd->n_in && st == UN_OK; t++) {
                in[t] = cmap[(size_t)nd->in[t].node * UN_MAX_OUTPUTS + (size_t)nd->in[t].out];
                if (in[t].node < 0)
                    st = un_ctx_error(ctx, UN_ERR_INVALID,
                                      "layer 2: piece %d: node %d reads "
                                      "a tensor from outside the piece",
                                      (int)q, (int)v);
            }
            const char *name = NULL;
            if (gid >= 0)
                name = un_graph_node(g, gid)->name;
            else if (strncmp(tname, "__", 2) != 0 && un_graph_find(ng, tname) < 0 && tname[0])
                name = tname;
            else
                for (int k = 0; !name; k++) {
                    snprintf(fresh, sizeof fresh, "piece%d~n%d%s%d", (int)q, (int)v, k ? "." : "",
                             k);
                    if (un_graph_find(ng, fresh) < 0)
                        name = fresh;
                }
            int32_t nid = -1;
            if (st == UN_OK)
                st = un_graph_add(ctx, ng, nd->op, nd->params, in, nd->n_in, name, &nid);
            for (int k = 0; st == UN_OK && k < nd->inf.n_out; k++) {
                cmap[(size_t)v * UN_MAX_OUTPUTS + (size_t)k] = (un_ref){nid, k};
                if (gid >= 0)
                    gmap[(size_t)gid * UN_MAX_OUTPUTS + (size_t)k] = (un_ref){nid, k};
            }
        }
        for (int32_t j = 0; j < pq->n_gout && st == UN_OK; j++) {
            un_ref r = un_graph_output(c, pq->n_exit_out + j);
            outs[pq->gout[j]] = cmap[(size_t)r.node * UN_MAX_OUTPUTS + (size_t)r.out];
        }
        free(cmap);
        free(from);
        free(to);
    }
    for (int32_t i = 0; i < no && st == UN_OK; i++) {
        un_ref r = un_graph_output(g, i);
        if (outs[i].node < 0)
            outs[i] = gmap[(size_t)r.node * UN_MAX_OUTPUTS + (size_t)r.out];
        if (outs[i].node < 0)
            st = un_ctx_error(ctx, UN_ERR_INVALID, "layer 2: graph output %d lost in the pieces",
                              (int)i);
    }
    if (st == UN_OK)
        st = un_graph_set_outputs(ctx, ng, outs, no);
    free(gmap);
    free(outs);
    if (st != UN_OK)
        un_graph_free(ng);
    else
        *out = ng;
    return st;
}

static const char *ended_worse(const char *a, const char *b) {
    if (strcmp(a, "time") == 0 || strcmp(b, "time") == 0)
        return "time";
    if (strcmp(a, "budget") == 0 || strcmp(b, "budget") == 0)
        return "budget";
    return "exhausted";
}

static void counters_add(un_subst_result *to, const un_subst_result *r) {
    to->popped += r->popped;
    to->matches += r->matches;
    to->generated += r->generated;
    to->apply_failed += r->apply_failed;
    to->duplicates += r->duplicates;
    to->too_big += r->too_big;
    to->costed += r->costed;
    to->map_failed += r->map_failed;
    to->pruned_alpha += r->pruned_alpha;
    if (r->max_queue > to->max_queue)
        to->max_queue = r->max_queue;
    to->queue_dropped += r->queue_dropped;
    to->boundary += r->boundary;
    to->match_s += r->match_s;
    to->map_s += r->map_s;
    to->ended = ended_worse(to->ended, r->ended);
}

un_status un_subst_search_pieces(un_ctx *ctx, const un_ruleset *set, un_cost_model *cm,
                                 const un_graph *g, const un_subst_params *p, int split_size,
                                 un_subst_result *out) {
    memset(out, 0, sizeof *out);
    if (!(p->alpha >= 1) || isinf(p->alpha))
        return un_ctx_error(ctx, UN_ERR_INVALID, "alpha %g: want a number >= 1", p->alpha);
    double t0 = un_search_clock();
    double deadline = p->time_limit > 0 ? t0 + p->time_limit : INFINITY;
    un_map *gm = NULL;
    un_split sp;
    memset(&sp, 0, sizeof sp);
    un_status st = un_map_new(ctx, cm, g, &p->map, &gm);
    if (st == UN_OK)
        st = un_split_make(ctx, gm, split_size > 0 ? split_size : 10, &sp);
    if (st != UN_OK) {
        un_map_free(gm);
        return st;
    }
    int32_t n = un_graph_node_count(g), covered = 0;
    bool serial = true;
    for (int32_t v = 0; v < n; v++)
        serial &= un_op_kind_of(un_graph_node(g, v)->op) != UN_OPK_PARALLEL;
    for (int32_t q = 0; q < sp.n; q++)
        covered += sp.size[q];
    int32_t regular = 0;
    for (int32_t v = 0; v < n; v++)
        regular += un_op_kind_of(un_graph_node(g, v)->op) == UN_OPK_REGULAR;
    int32_t np = sp.n;
    piece_graph *pgs = un_xcalloc((size_t)np + 1, sizeof *pgs);
    piece_cost *pcs = un_xcalloc((size_t)np + 1, sizeof *pcs);
    paths *pps = un_xcalloc((size_t)np + 1, sizeof *pps);
    int32_t *cls = un_xcalloc((size_t)np + 1, sizeof *cls);
    int32_t *owner = un_xcalloc((size_t)np + 1, sizeof *owner);
    int32_t *choice = un_xcalloc((size_t)np + 1, sizeof *choice);
    int32_t **from = un_xcalloc((size_t)np + 1, sizeof *from);
    int32_t n_cls = 0;
    bool whole = np <= 1 || !serial || covered != regular;
    for (int32_t q = 0; q < np && !whole; q++)
        whole = piece_take(ctx, g, &sp, q, &pgs[q]) != UN_OK;
    bool *use = whole ? NULL : rules_in_use(set, p, out);
    out->ended = "exhausted";
    /* classes of equal pieces */
    for (int32_t q = 0; q < np && !whole; q++) {
        cls[q] = -1;
        un_graph_canonicalize(pgs[q].s);
        int32_t ns = un_graph_node_count(pgs[q].s);
        int32_t *cq = un_xmalloc(((size_t)ns + 1) * sizeof *cq);
        int32_t *co = un_xmalloc(((size_t)ns + 1) * sizeof *co);
        un_graph_canonical_order(pgs[q].s, cq);
        for (int32_t c = 0; c < n_cls && cls[q] < 0; c++) {
            const piece_graph *po = &pgs[pcs[c].pg - pgs];
            if (un_graph_hash(po->s) != un_graph_hash(pgs[q].s) ||
                un_graph_node_count(po->s) != ns || (po->entry < 0) != (pgs[q].entry < 0) ||
                (po->exit < 0) != (pgs[q].exit < 0))
                continue;
            un_graph_canonical_order(po->s, co);
            if (same_canonical(po->s, pgs[q].s, co, cq))
                cls[q] = c;
        }
        free(cq);
        free(co);
        if (cls[q] >= 0) {
            owner[q] = (int32_t)(pcs[cls[q]].pg - pgs);
            continue;
        }
        piece_cost *pc = &pcs[cls[q] = n_cls++];
        owner[q] = q;
        pc->cm = cm;
        pc->p = p;
        pc->pg = &pgs[q];
        pc->gm = gm;
        pc->entry_name = pgs[q].entry >= 0 ? un_graph_node(pgs[q].s, pgs[q].entry)->name : NULL;
        pc->exit_name = pgs[q].exit >= 0 ? un_graph_node(pgs[q].s, pgs[q].exit)->name : NULL;
        pc->ne = pgs[q].g_entry >= 0 ? un_map_config_count(gm, pgs[q].g_entry) : 1;
        pc->nx = pgs[q].g_exit >= 0 ? un_map_config_count(gm, pgs[q].g_exit) : 1;
        size_t cells = (size_t)pc->ne * (size_t)pc->nx;
        pc->best = un_xmalloc((cells + 1) * sizeof *pc->best);
        pc->arg = un_xmalloc((cells + 1) * sizeof *pc->arg);
        for (size_t i = 0; i < cells; i++) {
            pc->best[i] = INFINITY;
            pc->arg[i] = -1;
        }
    }
    /* each distinct piece searched, smallest first, each with an even share of the time left
     * (what a small piece leaves goes to the larger ones) */
    int32_t *by_size = un_xmalloc(((size_t)n_cls + 1) * sizeof *by_size);
    for (int32_t c = 0; c < n_cls; c++) {
        int32_t k = c;
        while (k > 0 &&
               un_graph_node_count(pcs[by_size[k - 1]].pg->s) > un_graph_node_count(pcs[c].pg->s)) {
            by_size[k] = by_size[k - 1];
            k--;
        }
        by_size[k] = c;
    }
    /* a piece no rule matches keeps its form: it is costed only when another piece changes */
    bool *fixed = un_xcalloc((size_t)n_cls + 1, sizeof *fixed);
    int32_t active = 0;
    for (int32_t c = 0; c < n_cls && !whole; c++) {
        const char *frozen[2] = {pcs[c].entry_name, pcs[c].exit_name};
        fixed[c] = !has_match(ctx, set, pcs[c].pg->s, use, frozen[0] ? frozen : frozen + 1,
                              (frozen[0] != NULL) + (frozen[1] != NULL));
        active += !fixed[c];
    }
    /* when some piece has a match: every piece as it is (its table; the only candidate of a piece
     * without matches), and along the chain the other pieces' cost before and after each class's
     * first piece (the priority of its candidates) */
    bool late = false; /* out of time before every piece was costed: g as it is */
    for (int32_t c = 0; c < n_cls && !whole && active > 0; c++) {
        if (un_search_clock() > deadline) {
            out->ended = "time";
            late = true;
            break;
        }
        piece_cost *pc = &pcs[c];
        size_t cells = (size_t)pc->ne * (size_t)pc->nx;
        pc->orig = un_xmalloc((cells + 1) * sizeof *pc->orig);
        double t = un_search_clock();
        st = piece_table(ctx, pc, pc->pg->s, pc->orig);
        out->map_s += un_search_clock() - t;
        out->costed++;
        if (st != UN_OK) { /* this piece cannot be costed alone */
            un_ctx_clear(ctx);
            st = UN_OK;
            whole = true;
        } else if (fixed[c]) {
            piece_record(pc, pc->pg->s, pc->orig, path_add(&pps[c], -1, -1));
        }
    }
    if (!whole && !late && active > 0) {
        /* pre[q]: the cheapest chain before piece q per entry configuration; suf likewise after */
        double **pre = un_xcalloc((size_t)np + 1, sizeof *pre);
        double **suf = un_xcalloc((size_t)np + 1, sizeof *suf);
        pre[0] = un_xcalloc(1, sizeof **pre);
        for (int32_t q = 0; q < np && !whole; q++) {
            const piece_cost *pc = &pcs[cls[q]];
            whole = q > 0 && pcs[cls[q - 1]].nx != pc->ne;
            pre[q + 1] = un_xmalloc(((size_t)pc->nx + 1) * sizeof **pre);
            for (int32_t x = 0; x < pc->nx; x++) {
                pre[q + 1][x] = INFINITY;
                for (int32_t e = 0; e < pc->ne && !whole; e++) {
                    double c = pre[q][e] + pc->orig[(size_t)e * (size_t)pc->nx + (size_t)x];
                    if (c < pre[q + 1][x])
                        pre[q + 1][x] = c;
                }
            }
        }
        for (int32_t q = np - 1; q >= 0 && !whole; q--) {
            const piece_cost *pc = &pcs[cls[q]];
            suf[q] = un_xmalloc(((size_t)pc->nx + 1) * sizeof **suf);
            for (int32_t x = 0; x < pc->nx; x++) {
                suf[q][x] = 0;
                if (q + 1 < np) {
                    const piece_cost *pn = &pcs[cls[q + 1]];
                    suf[q][x] = INFINITY;
                    for (int32_t y = 0; y < pn->nx; y++) {
                        double c = pn->orig[(size_t)x * (size_t)pn->nx + (size_t)y] + suf[q + 1][y];
                        if (c < suf[q][x])
                            suf[q][x] = c;
                    }
                }
            }
        }
        for (int32_t q = 0; q < np && !whole; q++) {
            piece_cost *pc = &pcs[cls[q]];
            if (owner[q] != q)
                continue;
            pc->pre = un_xmalloc(((size_t)pc->ne + 1) * sizeof *pc->pre);
            pc->suf = un_xmalloc(((size_t)pc->nx + 1) * sizeof *pc->suf);
            memcpy(pc->pre, pre[q], (size_t)pc->ne * sizeof *pc->pre);
            memcpy(pc->suf, suf[q], (size_t)pc->nx * sizeof *pc->suf);
        }
        for (int32_t q = 0; q <= np; q++) {
            free(pre[q]);
            free(suf[q]);
        }
        free(pre);
        free(suf);
    }
    for (int32_t i = 0, done = 0; i < n_cls && !whole && !late; i++) {
        int32_t c = by_size[i];
        piece_cost *pc = &pcs[c];
        if (fixed[c])
            continue;
        double now = un_search_clock();
        double share =
            isinf(deadline) ? INFINITY : now + (deadline - now) / (double)(active - done++);
        const char *frozen[2];
        int nf = 0;
        if (pc->entry_name)
            frozen[nf++] = pc->entry_name;
        if (pc->exit_name)
            frozen[nf++] = pc->exit_name;
        un_subst_result r;
        memset(&r, 0, sizeof r);
        r.ended = "exhausted";
        int32_t best_at = 0;
        st = search_core(ctx, set, pc->pg->s, p, use, share, piece_cost_fn, pc, frozen, nf, &r,
                         &pps[c], &best_at);
        if (getenv("UN_SEARCH_DEBUG"))
            fprintf(stderr,
                    "layer 2 piece class %d (piece %d, %d nodes, %dx%d boundary configs): %lld "
                    "costed in %.3f s (%.3f s layer 3), %d kept, ended %s\n",
                    (int)c, (int)(pc->pg - pgs), (int)un_graph_node_count(pc->pg->s), (int)pc->ne,
                    (int)pc->nx, (long long)r.costed, un_search_clock() - now, r.map_s,
                    (int)pc->n_cand, r.ended);
        counters_add(out, &r);
        un_subst_result_deinit(&r);
        if (st != UN_OK || pc->n_cand == 0) { /* this piece cannot be costed alone */
            un_ctx_clear(ctx);
            st = UN_OK;
            whole = true;
        }
    }
    free(by_size);
    free(fixed);
    /* no piece has a match (g as it is, nothing costed), or no time to join the pieces */
    bool untouched = !whole && (active == 0 || late);
    if (untouched) {
        out->best = un_graph_clone(g);
        out->pieces = np;
        out->piece_classes = n_cls;
    }
    /* the chain: best[x] over the pieces so far, from[q][x] the entry configuration */
    double *best = NULL;
    int32_t n_best = 1;
    if (!whole && !untouched) {
        best = un_xcalloc(1, sizeof *best);
        for (int32_t q = 0; q < np && !whole; q++) {
            const piece_cost *pc = &pcs[cls[q]];
            if (pc->ne != n_best) {
                whole = true;
                break;
            }
            double *nb = un_xmalloc(((size_t)pc->nx + 1) * sizeof *nb);
            from[q] = un_xcalloc((size_t)pc->nx + 1, sizeof *from[q]);
            for (int32_t x = 0; x < pc->nx; x++) {
                nb[x] = INFINITY;
                for (int32_t e = 0; e < pc->ne; e++) {
                    double c = best[e] + pc->best[(size_t)e * (size_t)pc->nx + (size_t)x];
                    if (c < nb[x]) {
                        nb[x] = c;
                        from[q][x] = e;
                    }
                }
            }
            free(best);
            best = nb;
            n_best = pc->nx;
        }
        if (!whole && (n_best != 1 || !isfinite(best[0])))
            whole = true;
    }
    un_graph *stitched = NULL;
    if (!whole && !untouched) {
        int32_t x = 0;
        for (int32_t q = np - 1; q >= 0; q--) {
            const piece_cost *pc = &pcs[cls[q]];
            int32_t e = from[q][x];
            choice[q] = pc->arg[(size_t)e * (size_t)pc->nx + (size_t)x];
            x = e;
        }
        if (stitch(ctx, g, pgs, pcs, cls, owner, choice, np, &stitched) != UN_OK) {
            un_ctx_clear(ctx);
            whole = true;
        }
    }
    if (!whole && !untouched) {
        whole_cost w = {cm, p};
        double t = un_search_clock();
        st = whole_cost_fn(ctx, &w, g, 0, &out->start_cost);
        out->best_cost = out->start_cost;
        double c = INFINITY;
        if (st == UN_OK && whole_cost_fn(ctx, &w, stitched, 0, &c) != UN_OK) {
            un_ctx_clear(ctx);
            c = INFINITY;
        }
        out->map_s += un_search_clock() - t;
        if (st == UN_OK && c < out->start_cost) {
            out->best_cost = c;
            out->best = stitched;
            stitched = NULL;
            for (int32_t q = 0; q < np; q++)
                if (choice[q] != 0) {
                    out->pieces_rewritten++;
                    steps_append(out, set, &pps[cls[q]], pcs[cls[q]].cand_at[choice[q]]);
                }
        } else if (st == UN_OK) {
            out->best = un_graph_clone(g);
        }
        out->pieces = np;
        out->piece_classes = n_cls;
    }
    un_graph_free(stitched);
    free(best);
    for (int32_t q = 0; q < np; q++) {
        piece_graph_deinit(&pgs[q]);
        piece_cost_deinit(&pcs[q]);
        paths_deinit(&pps[q]);
        free(from[q]);
    }
    free(pgs);
    free(pcs);
    free(pps);
    free(cls);
    free(owner);
    free(choice);
    free(from);
    free(use);
    un_split_deinit(&sp);
    un_map_free(gm);
    if (whole) { /* one piece, or a piece that cannot be searched alone: the whole graph */
        un_subst_result_deinit(out);
        double left = deadline - un_search_clock();
        un_subst_params wp = *p;
        wp.time_limit = isinf(deadline) ? 0 : (left > 1e-3 ? left : 1e-3);
        return un_subst_search(ctx, set, cm, g, &wp, out);
    }
    out->wall = un_search_clock() - t0;
    if (st != UN_OK)
        un_subst_result_deinit(out);
    return st;
}
