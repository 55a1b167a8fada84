/* closure.c - closure pruning with the rewriting engine (closure.h). */
#include "search/closure.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

un_closure_params un_closure_params_default(void) {
    return (un_closure_params){.depth = 2, .max_graphs = 4096, .threads = 1};
}

uint64_t un_closure_sketch_key(const un_sketch *s) {
    uint64_t small[64],
        *key = s->n_nodes <= 64 ? small : un_xmalloc(sizeof(uint64_t) * (size_t)s->n_nodes);
    for (int32_t v = 0; v < s->n_nodes; v++) {
        const un_sketch_node *nd = &s->node[v];
        uint64_t h = un_mix64(0x636c6f73ull + (uint64_t)nd->op);
        int np = un_spec_op(s->spec, nd->op)->n_params;
        for (int q = 0; q < np && q < UN_MAX_PARAMS; q++) {
            int32_t len = nd->params[q].len; /* -1 for a scalar: v[0] holds it */
            len = len < 0 ? 1 : len > UN_MAX_DIMS ? UN_MAX_DIMS : len;
            h = un_hash_bytes(nd->params[q].v, sizeof(int64_t) * (size_t)len,
                              un_mix64(h + (uint64_t)nd->params[q].len));
        }
        if (un_op_kind_of(nd->op) == UN_OPK_SOURCE) {
            if (nd->name)
                h = un_hash_bytes(nd->name, strlen(nd->name), h);
            else
                h = un_mix64(h ^ (0x6e6f6e616d65ull + (uint64_t)v));
            h = un_hash_bytes(nd->shape, sizeof *nd->shape, h);
        }
        for (int k = 0; k < nd->n_in; k++)
            h = un_mix64(h ^ un_mix64(key[nd->in[k].node] + (uint64_t)nd->in[k].out)) + (uint64_t)k;
        key[v] = h;
    }
    uint64_t h = 0x6f757473ull;
    for (int32_t i = 0; i < s->n_out; i++) {
        un_ref o = s->out[i];
        h = un_mix64(h ^ un_mix64(key[o.node] + (uint64_t)o.out));
    }
    if (key != small)
        free(key);
    return h;
}

uint64_t un_closure_graph_key(const un_graph *g) {
    un_sketch s = {0};
    un_sketch_of_graph(g, &s);
    uint64_t h = un_closure_sketch_key(&s);
    un_sketch_deinit(&s);
    return h;
}

/* A list of graphs (owned): a level of a breadth-first search. */
typedef struct glist {
    un_graph **v;
    int64_t n, cap;
} glist;

static void glist_push(glist *l, un_graph *g) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->v = un_xrealloc(l->v, sizeof(un_graph *) * (size_t)l->cap);
    }
    l->v[l->n++] = g;
}

static void glist_clear(glist *l) {
    for (int64_t i = 0; i < l->n; i++)
        un_graph_free(l->v[i]);
    free(l->v);
    *l = (glist){0};
}

/* The level (rewrites) at which key k was first reached in s (a map of keys to levels), -1 when it
 * was not. */
static int level_of(const un_hmap *s, uint64_t k) {
    double v;
    return un_hmap_get(s, k, &v) ? (int)v : -1;
}

/* A growable list of keys. */
typedef struct keylist {
    uint64_t *v;
    int64_t n, cap;
} keylist;

static void keylist_add(keylist *l, uint64_t k) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = un_xrealloc(l->v, sizeof(uint64_t) * (size_t)l->cap);
    }
    l->v[l->n++] = k;
}

static int cmp_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

/* ---- operator kinds ---- */

/* Which operators a graph's nodes on a path to an output have, as a bit mask. Two graphs with one
 * un_closure_graph_key compute the same expression, so they have the same mask (the key does not
 * tell a shared node from two copies, so counts would not do). A rewrite that removes only the
 * match leaves the graph's counts minus its rule's source's plus its target's, so the last level
 * of a source's exploration skips a rewrite whose result's mask no graph of the target's side has,
 * without building it. */
typedef struct opcount {
    int32_t n[UN_OP_COUNT];
} opcount;

/* s's operator nodes on a path to an output, counted; *dead (may be NULL) tells whether s has
 * others. */
static void sketch_opcount(const un_sketch *s, opcount *c, bool *dead) {
    int32_t n = s->n_nodes;
    bool small[64], *on = n < 64 ? small : un_xmalloc((size_t)n + 1);
    memset(on, 0, (size_t)n + 1);
    for (int32_t i = 0; i < s->n_out; i++)
        on[s->out[i].node] = true;
    memset(c, 0, sizeof *c);
    bool off = false;
    for (int32_t v = n - 1; v >= 0; v--) { /* nodes come in topological order */
        const un_sketch_node *nd = &s->node[v];
        bool source = un_op_kind_of(nd->op) == UN_OPK_SOURCE;
        off = off || (!on[v] && !source);
        if (!on[v] || source)
            continue;
        c->n[nd->op]++;
        for (int k = 0; k < nd->n_in; k++)
            on[nd->in[k].node] = true;
    }
    if (on != small)
        free(on);
    if (dead)
        *dead = off;
}

static uint64_t opcount_mask(const opcount *c) {
    uint64_t m = 0;
    for (int op = 0; op < UN_OP_COUNT; op++)
        m |= (uint64_t)(c->n[op] > 0) << (op % 64);
    return m;
}

static uint64_t sketch_opmask(const un_sketch *s) {
    opcount c;
    sketch_opcount(s, &c, NULL);
    return opcount_mask(&c);
}

/* Per entry of a rule set, what its rewrite does to the counts (target's minus source's), found by
 * the first thread to need it. state: 0 not yet, 1 exact, 2 not (several mapped outputs, one
 * maybe used only inside the match; a target node off its output's path; or an input the target
 * does not use: the rewrite may drop more than the match), 3 being found (taken as not exact:
 * the filter only saves work, it never changes what is found). */
typedef struct opdelta_table {
    opcount *delta;
    _Atomic uint8_t *state;
} opdelta_table;

static opdelta_table opdelta_table_new(const un_ruleset *set) {
    size_t n = (size_t)un_ruleset_count(set) + 1;
    return (opdelta_table){un_xcalloc(n, sizeof(opcount)), un_xcalloc(n, sizeof(_Atomic uint8_t))};
}

static void opdelta_table_deinit(opdelta_table *t) {
    free(t->delta);
    free((void *)(uintptr_t)t->state);
    *t = (opdelta_table){0};
}

/* Whether a rewrite by r removes exactly the match's nodes and adds exactly its target's. */
static bool rule_exact(const un_rule *r) {
    if (r->n_out != 1)
        return false;
    int32_t n = un_graph_node_count(r->dst);
    bool *on = un_xcalloc((size_t)n + 1, 1);
    on[r->dst_out[0].node] = true;
    for (int32_t v = n - 1; v >= 0; v--) {
        const un_node *nd = un_graph_node(r->dst, v);
        for (int k = 0; on[v] && k < nd->n_in; k++)
            on[nd->in[k].node] = true;
    }
    bool exact = true;
    int src_in = 0, dst_in = 0;
    for (int32_t v = 0; v < n; v++) {
        exact = exact && on[v];
        dst_in += un_op_kind_of(un_graph_node(r->dst, v)->op) == UN_OPK_SOURCE;
    }
    for (int32_t v = 0; v < un_graph_node_count(r->src); v++)
        src_in += un_op_kind_of(un_graph_node(r->src, v)->op) == UN_OPK_SOURCE;
    free(on);
    return exact && dst_in >= src_in;
}

/* Entry e's change to the counts, or NULL when its rewrite is not exact (or not known yet). */
static const opcount *opdelta_get(const opdelta_table *t, const un_ruleset *set, int64_t e) {
    uint8_t state = atomic_load(&t->state[e]), none = 0;
    if (state == 0 && atomic_compare_exchange_strong(&t->state[e], &none, 3)) {
        const un_rule *r = un_ruleset_rule(set, e);
        opcount *d = &t->delta[e];
        memset(d, 0, sizeof *d);
        for (int side = 0; side < 2; side++) {
            const un_graph *g = side ? r->dst : r->src;
            for (int32_t v = 0; v < un_graph_node_count(g); v++) {
                const un_node *nd = un_graph_node(g, v);
                if (un_op_kind_of(nd->op) != UN_OPK_SOURCE)
                    d->n[nd->op] += side ? 1 : -1;
            }
        }
        state = rule_exact(r) ? 1 : 2;
        atomic_store(&t->state[e], state);
    }
    return state == 1 ? &t->delta[e] : NULL;
}

/* ---- exploration ---- */

/* The graphs one rewrite from g with the entries e of set with allowed[e] (NULL: all): their keys
 * appended to keys, when graphs is given the graphs to it (owned), when masks is given their
 * operator masks to it; rewrites that do not apply are skipped. Without graphs a result is only
 * sketched (un_apply_sketch), not built, where the sketch is exact. With want (and ot), a rewrite
 * whose exact result's mask want lacks is skipped too, unsketched, and counted in *skipped. sk is
 * scratch; cache (may be NULL) the instantiations. */
static un_status successors(un_ctx *ctx, const un_ruleset *set, const bool *allowed,
                            const un_graph *g, const opdelta_table *ot, const un_hmap *want,
                            int64_t *skipped, glist *graphs, keylist *keys, un_hmap *masks,
                            un_inst_cache *cache, un_sketch *sk) {
    un_matcher *m = NULL;
    un_status st = un_matcher_new(ctx, set, g, &m);
    if (st != UN_OK)
        return st;
    un_matcher_restrict(m, allowed);
    un_matcher_use_cache(m, cache);
    un_match_list ms = {0};
    st = un_match_all(ctx, m, &ms);
    opcount gc;
    bool dead = false; /* a match on dead nodes need not change the counts: no filter then */
    if (want) {
        un_sketch_of_graph(g, sk);
        sketch_opcount(sk, &gc, &dead);
    }
    for (int64_t i = 0; i < ms.n && st == UN_OK; i++) {
        const opcount *d = want && !dead ? opdelta_get(ot, set, ms.v[i].rule) : NULL;
        if (d) {
            opcount rc;
            for (int op = 0; op < UN_OP_COUNT; op++)
                rc.n[op] = gc.n[op] + d->n[op];
            if (!un_hmap_get(want, opcount_mask(&rc), NULL)) {
                ++*skipped;
                continue;
            }
        }
        bool exact = false;
        if (!graphs && un_apply_sketch(ctx, set, g, &ms.v[i], cache, sk, &exact) != UN_OK) {
            un_ctx_clear(ctx);
            continue;
        }
        un_graph *ng = NULL;
        if (!exact && un_apply(ctx, set, g, &ms.v[i], &ng, NULL) != UN_OK) {
            un_ctx_clear(ctx);
            continue;
        }
        if (ng)
            un_sketch_of_graph(ng, sk);
        keylist_add(keys, un_closure_sketch_key(sk));
        if (masks)
            un_hmap_add(masks, sketch_opmask(sk), 0);
        if (graphs)
            glist_push(graphs, ng);
        else
            un_graph_free(ng);
    }
    un_match_list_deinit(&ms);
    un_matcher_free(m);
    return st;
}

/* Where an exploration meets another side's (explore's target): best, the fewest rewrites of both
 * sides together over the keys in common (0: none with at least one), and met, any key in common.
 */
typedef struct meeting {
    int best;
    bool met;
} meeting;

/* What an exploration rewrites with: set's entries with allowed[e] (NULL: all), a level expanded
 * only while at most max_graphs graphs were seen (0: no bound), ot (NULL: none) for the
 * operator mask filter, and where instantiations are kept. */
typedef struct explorer {
    const un_ruleset *set;
    const bool *allowed;
    int64_t max_graphs;
    const opdelta_table *ot;
    un_inst_cache *cache; /* the thread's (may be NULL) */
} explorer;

/* Every graph within depth rewrites of g, into seen (each key at its first level), breadth first;
 * the bound on levels makes what is explored a function of g, not of the order of matches
 * (*capped: the bound cut it). masks (may be NULL) gets the operator masks of the graphs reached.
 * With target (another side's exploration, target_masks its masks), each new key updates *mt, the
 * last level skips rewrites whose result target_masks rules out (counted in *skipped), and the
 * search stops once nothing closer can come: a key target had at level 0, or a level as deep as
 * mt->best. */
static un_status explore(un_ctx *ctx, const explorer *x, const un_graph *g, int depth,
                         const un_hmap *target, const un_hmap *target_masks, un_hmap *seen,
                         un_hmap *masks, bool *capped, meeting *mt, int64_t *skipped) {
    *seen = (un_hmap){0};
    *capped = false;
    glist cur = {0}, next = {0}, gs = {0};
    keylist ks = {0};
    un_sketch sk = {0};
    un_sketch_of_graph(g, &sk);
    uint64_t k0 = un_closure_sketch_key(&sk);
    un_hmap_add(seen, k0, 0);
    if (masks)
        un_hmap_add(masks, sketch_opmask(&sk), 0);
    bool stop = false;
    if (target) {
        int lt = level_of(target, k0);
        mt->met = lt >= 0;
        mt->best = lt > 0 ? lt : 0;
    }
    glist_push(&cur, un_graph_clone(g));
    un_status st = UN_OK;
    for (int level = 1; level <= depth && cur.n > 0 && st == UN_OK && !stop; level++) {
        if (target && mt->best > 0 && mt->best <= level)
            break;
        if (x->max_graphs > 0 && seen->n > x->max_graphs) {
            *capped = true;
            break;
        }
        bool last = level == depth;
        const un_hmap *want = last && target && x->ot ? target_masks : NULL;
        for (int64_t c = 0; c < cur.n && st == UN_OK && !stop; c++) {
            ks.n = gs.n = 0;
            st = successors(ctx, x->set, x->allowed, cur.v[c], x->ot, want, skipped,
                            last ? NULL : &gs, &ks, masks, x->cache, &sk);
            for (int64_t i = 0; i < ks.n && st == UN_OK; i++) {
                bool fresh = !stop && un_hmap_add(seen, ks.v[i], level);
                if (fresh && !last)
                    glist_push(&next, gs.v[i]);
                else if (!last)
                    un_graph_free(gs.v[i]);
                int lt = fresh && target ? level_of(target, ks.v[i]) : -1;
                if (lt >= 0) {
                    mt->met = true;
                    if (mt->best == 0 || level + lt < mt->best)
                        mt->best = level + lt;
                    stop = lt == 0;
                }
            }
        }
        glist_clear(&cur);
        cur = next;
        next = (glist){0};
    }
    glist_clear(&cur);
    free(gs.v);
    free(ks.v);
    un_sketch_deinit(&sk);
    if (st != UN_OK)
        un_hmap_deinit(seen);
    return st;
}

un_status un_closure_reach(un_ctx *ctx, const un_ruleset *set, const un_graph *g, int depth,
                           int64_t max_graphs, uint64_t **keys, int64_t *n, bool *capped) {
    *keys = NULL;
    *n = 0;
    un_hmap s;
    bool cut = false;
    explorer x = {.set = set, .max_graphs = max_graphs};
    un_status st = explore(ctx, &x, g, depth, NULL, NULL, &s, NULL, &cut, NULL, NULL);
    if (st != UN_OK)
        return st;
    uint64_t *k = un_xmalloc(sizeof(uint64_t) * ((size_t)s.n + 1));
    int64_t u = un_hmap_keys(&s, k);
    qsort(k, (size_t)u, sizeof(uint64_t), cmp_u64);
    un_hmap_deinit(&s);
    *keys = k;
    *n = u;
    if (capped)
        *capped = cut;
    return UN_OK;
}

/* Meet in the middle: what of g's neighbourhood within a rewrites meets h's within b (each side
 * bounded by x->max_graphs; *capped when either was cut). */
static un_status meet(un_ctx *ctx, const explorer *x, const un_graph *g, const un_graph *h, int a,
                      int b, meeting *mt, bool *capped, int64_t *skipped) {
    un_hmap th = {0}, tg = {0}, masks = {0};
    bool ch = false, cg = false;
    *mt = (meeting){0};
    un_status st = explore(ctx, x, h, b, NULL, NULL, &th, x->ot ? &masks : NULL, &ch, NULL, NULL);
    if (st == UN_OK)
        st = explore(ctx, x, g, a, &th, &masks, &tg, NULL, &cg, mt, skipped);
    un_hmap_deinit(&tg);
    un_hmap_deinit(&th);
    un_hmap_deinit(&masks);
    *capped = ch || cg;
    return st;
}

/* ---- pruning ---- */

typedef struct prune_job {
    const un_ctx *parent;
    const un_ruleset *set;
    un_rule *const *rules; /* the rules decided */
    const un_closure_params *p;
    const bool *entry_ok;    /* per entry of set: its rule was kept in an earlier chunk (read only
                              * during a chunk); NULL: every entry */
    const opdelta_table *ot; /* set's entries' changes to operator counts */
    _Atomic int64_t skipped;
    int8_t *level; /* per rule: rewrites of the derivation found, 0 = none */
    bool *capped;
    int64_t begin, end;
    _Atomic int64_t next;
    _Atomic int failed; /* an error (other than a rewrite that does not apply) */
} prune_job;

/* g with its outputs fixed to outs (a rule side as a graph whose outputs are the mapped ones). */
static un_graph *side_graph(un_ctx *ctx, const un_graph *g, const un_ref *outs, int n) {
    un_graph *c = un_graph_clone(g);
    if (un_graph_set_outputs(ctx, c, outs, n) != UN_OK) {
        un_graph_free(c);
        return NULL;
    }
    return c;
}

static un_status decide(un_ctx *ctx, prune_job *job, un_inst_cache *cache, int64_t i) {
    const un_rule *r = job->rules[i];
    int a = (job->p->depth + 1) / 2, b = job->p->depth / 2;
    un_graph *gs = side_graph(ctx, r->src, r->src_out, r->n_out);
    un_graph *gd = side_graph(ctx, r->dst, r->dst_out, r->n_out);
    un_status st = gs && gd ? UN_OK : UN_ERR_INVALID;
    meeting mt = {0};
    bool capped = false;
    explorer x = {.set = job->set,
                  .allowed = job->entry_ok,
                  .max_graphs = job->p->max_graphs,
                  .ot = job->ot,
                  .cache = cache};
    int64_t skipped = 0;
    if (st == UN_OK)
        st = meet(ctx, &x, gs, gd, a, b, &mt, &capped, &skipped);
    atomic_fetch_add(&job->skipped, skipped);
    if (st == UN_OK) {
        job->level[i] = (int8_t)mt.best;
        job->capped[i] = capped && mt.best == 0;
    }
    un_graph_free(gs);
    un_graph_free(gd);
    return st;
}

static void *prune_worker(void *arg) {
    prune_job *job = arg;
    un_ctx *ctx = un_ctx_new_child(job->parent);
    un_inst_cache *cache = un_inst_cache_new();
    for (;;) {
        int64_t i = atomic_fetch_add(&job->next, 1);
        if (i >= job->end || atomic_load(&job->failed))
            break;
        if (decide(ctx, job, cache, i) != UN_OK) {
            un_ctx_clear(ctx);
            atomic_store(&job->failed, 1);
        }
    }
    un_inst_cache_free(cache);
    un_ctx_free(ctx);
    return NULL;
}

/* Operators of a rule's larger side. */
static int rule_ops(const un_rule *r) {
    int n[2] = {0, 0};
    const un_graph *g[2] = {r->src, r->dst};
    for (int s = 0; s < 2; s++)
        for (int32_t v = 0; v < un_graph_node_count(g[s]); v++)
            n[s] += un_op_kind_of(un_graph_node(g[s], v)->op) != UN_OPK_SOURCE;
    return n[0] > n[1] ? n[0] : n[1];
}

struct un_closure {
    un_closure_params p;
    un_ruleset *set;  /* the kept basis rules given to un_closure_new, forwards and reversed */
    opdelta_table ot; /* set's entries' changes to operator counts */
};

/* Decides job's rules [begin, end) on p->threads threads. */
static un_status run_chunk(un_ctx *ctx, prune_job *job, int threads) {
    atomic_store(&job->next, job->begin);
    atomic_store(&job->failed, 0);
    pthread_t tid[64];
    int started = 0;
    for (int t = 1; t < threads && t < 64; t++)
        if (pthread_create(&tid[started], NULL, prune_worker, job) == 0)
            started++;
    prune_worker(job);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    if (atomic_load(&job->failed))
        return un_ctx_error(ctx, UN_ERR_INVALID, "closure: rewriting failed in rules %lld..%lld",
                            (long long)job->begin + 1, (long long)job->end);
    return UN_OK;
}

/* Counts job's decisions [begin, end) into drop and s. */
static void tally(const prune_job *job, bool *drop, un_closure_stats *s) {
    for (int64_t i = job->begin; i < job->end; i++) {
        drop[i] = job->level[i] > 0;
        s->dropped += drop[i];
        s->by_depth[job->level[i] < 5 ? job->level[i] : 4] += drop[i];
        s->capped += job->capped[i];
    }
}

/* The set (forwards and reversed, rule id = index + 1) of the rules that may derive others: at most
 * UN_MATCH_MAX_NODES nodes a side, at most p->basis_ops operators, and kept[i] when kept is given;
 * s (may be NULL) counts the others. */
static un_status basis_set(un_ctx *ctx, const un_spec *spec, un_rule *const *rules, int64_t n,
                           const un_closure_params *p, const bool *kept, un_ruleset **set,
                           un_closure_stats *s) {
    un_rule **in = un_xmalloc(sizeof(un_rule *) * ((size_t)n + 1));
    int32_t *ids = un_xmalloc(sizeof(int32_t) * ((size_t)n + 1));
    int64_t n_in = 0;
    for (int64_t i = 0; i < n; i++) {
        bool big = un_graph_node_count(rules[i]->src) > UN_MATCH_MAX_NODES ||
                   un_graph_node_count(rules[i]->dst) > UN_MATCH_MAX_NODES;
        bool over = !big && p->basis_ops > 0 && rule_ops(rules[i]) > p->basis_ops;
        if (s) {
            s->too_big += big;
            s->not_basis += over;
        }
        if (!big && !over && (!kept || kept[i])) {
            in[n_in] = rules[i];
            ids[n_in++] = (int32_t)(i + 1);
        }
    }
    un_ruleset_params rp = un_ruleset_params_default();
    rp.reversed = true;
    rp.cache = false;
    un_status st = un_ruleset_from_rules(ctx, spec, in, ids, n_in, &rp, set);
    free(in);
    free(ids);
    return st; /* its rules are built as the threads first match them (un_ruleset_rule) */
}

un_status un_closure_new(un_ctx *ctx, const un_spec *spec, un_rule *const *rules, int64_t n,
                         const un_closure_params *p, bool *drop, un_closure_stats *stats,
                         un_closure **out) {
    *out = NULL;
    un_closure_params def = un_closure_params_default();
    if (!p)
        p = &def;
    if (p->depth < 1 || p->depth > 4)
        return un_ctx_error(ctx, UN_ERR_INVALID, "closure: depth %d is not in 1..4", p->depth);
    double t0 = un_now_s();
    un_closure_stats s = {.rules = n};
    bool *kept = un_xcalloc((size_t)n + 1, 1);
    bool *capped = un_xcalloc((size_t)n + 1, 1);
    int8_t *level = un_xcalloc((size_t)n + 1, 1);
    un_ruleset *set = NULL;
    un_status st = basis_set(ctx, spec, rules, n, p, NULL, &set, &s);
    int64_t n_entries = st == UN_OK ? un_ruleset_count(set) : 0, next_entry = 0;
    bool *entry_ok = un_xcalloc((size_t)n_entries + 1, 1);
    opdelta_table ot = st == UN_OK ? opdelta_table_new(set) : (opdelta_table){0};
    prune_job job = {.parent = ctx,
                     .set = set,
                     .rules = rules,
                     .p = p,
                     .entry_ok = entry_ok,
                     .ot = &ot,
                     .level = level,
                     .capped = capped};
    double last = t0;
    for (int64_t done = 0; st == UN_OK && done < n;) {
        int64_t size = done / 16;
        size = size < 1 ? 1 : size > 256 ? 256 : size;
        job.begin = done;
        job.end = done + size < n ? done + size : n;
        if ((st = run_chunk(ctx, &job, p->threads)) != UN_OK)
            break;
        tally(&job, drop, &s);
        for (int64_t i = job.begin; i < job.end; i++)
            kept[i] = !drop[i];
        /* entries come in rule order (rule id = index + 1) */
        for (; next_entry < n_entries && un_ruleset_rule_id(set, next_entry) <= job.end;
             next_entry++)
            entry_ok[next_entry] = kept[un_ruleset_rule_id(set, next_entry) - 1];
        done = job.end;
        if (p->progress && un_now_s() - last > 0.5) {
            last = un_now_s();
            un_ctx_progress(ctx, "closure: %lld/%lld rules, %lld dropped", (long long)done,
                            (long long)n, (long long)s.dropped);
        }
    }
    if (p->progress)
        un_ctx_progress_done(ctx);
    s.kept = n - s.dropped;
    s.unbuilt = atomic_load(&job.skipped);
    s.seconds = un_now_s() - t0;
    if (stats)
        *stats = s;
    free(capped);
    free(level);
    free(entry_ok);
    if (st == UN_OK && s.dropped > 0) {
        /* later checks match the kept rules only: rebuilt without the dropped ones */
        un_ruleset_free(set);
        set = NULL;
        opdelta_table_deinit(&ot);
        st = basis_set(ctx, spec, rules, n, p, kept, &set, NULL);
        if (st == UN_OK)
            ot = opdelta_table_new(set);
    }
    free(kept);
    if (st != UN_OK) {
        un_ruleset_free(set);
        opdelta_table_deinit(&ot);
        return st;
    }
    un_closure *c = un_xcalloc(1, sizeof *c);
    c->p = *p;
    c->set = set;
    c->ot = ot;
    *out = c;
    return UN_OK;
}

un_status un_closure_check(un_ctx *ctx, un_closure *c, un_rule *const *rules, int64_t n, bool *drop,
                           un_closure_stats *stats) {
    double t0 = un_now_s();
    un_closure_stats s = {.rules = n};
    prune_job job = {.parent = ctx,
                     .set = c->set,
                     .rules = rules,
                     .p = &c->p,
                     .entry_ok = NULL, /* the set holds the kept rules only */
                     .ot = &c->ot,
                     .level = un_xcalloc((size_t)n + 1, 1),
                     .capped = un_xcalloc((size_t)n + 1, 1),
                     .begin = 0,
                     .end = n};
    un_status st = run_chunk(ctx, &job, c->p.threads);
    if (st == UN_OK)
        tally(&job, drop, &s);
    s.unbuilt = atomic_load(&job.skipped);
    s.kept = n - s.dropped;
    s.seconds = un_now_s() - t0;
    if (stats)
        *stats = s;
    free(job.level);
    free(job.capped);
    return st;
}

void un_closure_free(un_closure *c) {
    if (!c)
        return;
    un_ruleset_free(c->set);
    opdelta_table_deinit(&c->ot);
    free(c);
}

un_status un_closure_prune(un_ctx *ctx, const un_spec *spec, un_rule *const *rules, int64_t n,
                           const un_closure_params *p, bool *drop, un_closure_stats *stats) {
    un_closure *c = NULL;
    un_status st = un_closure_new(ctx, spec, rules, n, p, drop, stats, &c);
    un_closure_free(c);
    return st;
}

/* ---- the reach test ---- */

static bool u64_has(const uint64_t *v, int64_t n, uint64_t x) {
    return n > 0 && bsearch(&x, v, (size_t)n, sizeof x, cmp_u64) != NULL;
}

/* Called for each graph ng that a rewrite (match mt) makes of `from` at `level`: 1 keeps it (it is
 * expanded at the next level while level < depth), 0 drops it, -1 drops it and ends the search.
 * An error goes to *st (and ends it). */
typedef int (*visit_fn)(void *user, un_ctx *ctx, const un_graph *from, const un_graph *ng,
                        const un_match *mt, int level, un_status *st);

/* Breadth first from g within depth rewrites with the entries e of set with allowed[e] (NULL:
 * all; the others are never matched); rewrites that do not apply are skipped. */
static un_status bfs(un_ctx *ctx, const un_ruleset *set, const un_graph *g, int depth,
                     const bool *allowed, visit_fn visit, void *user) {
    glist cur = {0}, next = {0};
    glist_push(&cur, un_graph_clone(g));
    un_status st = UN_OK;
    bool stop = false;
    for (int level = 1; level <= depth && cur.n > 0 && st == UN_OK && !stop; level++) {
        for (int64_t c = 0; c < cur.n && st == UN_OK && !stop; c++) {
            un_matcher *m = NULL;
            if ((st = un_matcher_new(ctx, set, cur.v[c], &m)) != UN_OK)
                break;
            un_matcher_restrict(m, allowed);
            un_match_list ms = {0};
            st = un_match_all(ctx, m, &ms);
            for (int64_t i = 0; i < ms.n && st == UN_OK && !stop; i++) {
                un_graph *ng = NULL;
                if (un_apply(ctx, set, cur.v[c], &ms.v[i], &ng, NULL) != UN_OK) {
                    un_ctx_clear(ctx);
                    continue;
                }
                int keep = visit(user, ctx, cur.v[c], ng, &ms.v[i], level, &st);
                stop = keep < 0;
                if (keep > 0 && level < depth)
                    glist_push(&next, ng);
                else
                    un_graph_free(ng);
            }
            un_match_list_deinit(&ms);
            un_matcher_free(m);
        }
        glist_clear(&cur);
        cur = next;
        next = (glist){0};
    }
    glist_clear(&cur);
    return st;
}

/* Whether `to` is within step rewrites of pruned from `from` (meet in the middle). */
static un_status derivable(un_ctx *ctx, const un_ruleset *pruned, const un_graph *from,
                           const un_graph *to, int step, int64_t max_graphs, bool *yes) {
    meeting mt;
    bool capped;
    explorer x = {.set = pruned, .max_graphs = max_graphs};
    un_status st = meet(ctx, &x, from, to, (step + 1) / 2, step / 2, &mt, &capped, NULL);
    *yes = st == UN_OK && mt.met;
    return st;
}

typedef struct reach_state {
    const un_ruleset *full, *pruned;
    const uint64_t *ph; /* sorted rule hashes of pruned's entries */
    int64_t np, max_graphs;
    int step;
    un_hmap seen, failed;
    un_closure_reach_stats *out;
} reach_state;

static int reach_visit(void *user, un_ctx *ctx, const un_graph *from, const un_graph *ng,
                       const un_match *mt, int level, un_status *st) {
    (void)level;
    reach_state *x = user;
    uint64_t k = un_closure_graph_key(ng);
    if (un_hmap_get(&x->seen, k, NULL))
        return 0;
    if (x->max_graphs > 0 && x->seen.n >= x->max_graphs) {
        x->out->capped = true;
        return -1;
    }
    bool ok = u64_has(x->ph, x->np, un_rule_hash(un_ruleset_rule(x->full, mt->rule)));
    if (ok) {
        x->out->direct++;
    } else {
        *st = derivable(ctx, x->pruned, from, ng, x->step, x->max_graphs, &ok);
        x->out->derived += ok;
    }
    if (*st != UN_OK || !ok) {
        if (*st == UN_OK)
            un_hmap_add(&x->failed, k, 0);
        return 0;
    }
    un_hmap_add(&x->seen, k, 0);
    x->out->graphs++;
    return 1;
}

un_status un_closure_reach_check(un_ctx *ctx, const un_ruleset *full, const un_ruleset *pruned,
                                 const un_graph *g, int depth, int step, int64_t max_graphs,
                                 un_closure_reach_stats *out) {
    memset(out, 0, sizeof *out);
    int64_t np = un_ruleset_count(pruned);
    uint64_t *ph = un_xmalloc(sizeof(uint64_t) * ((size_t)np + 1));
    for (int64_t e = 0; e < np; e++)
        ph[e] = un_rule_hash(un_ruleset_rule(pruned, e));
    qsort(ph, (size_t)np, sizeof(uint64_t), cmp_u64);
    reach_state x = {.full = full,
                     .pruned = pruned,
                     .ph = ph,
                     .np = np,
                     .max_graphs = max_graphs,
                     .step = step,
                     .out = out};
    un_hmap_add(&x.seen, un_closure_graph_key(g), 0);
    out->graphs = 1;
    un_status st = bfs(ctx, full, g, depth, NULL, reach_visit, &x);
    uint64_t *fk = un_xmalloc(sizeof(uint64_t) * ((size_t)x.failed.n + 1));
    for (int64_t i = 0, nf = un_hmap_keys(&x.failed, fk); i < nf; i++)
        out->missing += !un_hmap_get(&x.seen, fk[i], NULL);
    free(fk);
    out->graphs += out->missing;
    un_hmap_deinit(&x.seen);
    un_hmap_deinit(&x.failed);
    free(ph);
    return st;
}
