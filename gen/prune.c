/* prune.c - pairing equal graphs and pruning the pairs (prune.h). Pairs are processed one at a
 * time in a fixed order, so the kept set, and with it every later decision, is deterministic. */
#include "gen/prune.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void un_gen_rules_deinit(un_gen_rules *rs) {
    if (!rs)
        return;
    for (int64_t i = 0; rs->rules && i < rs->n; i++)
        un_rule_free(rs->rules[i]);
    free(rs->rules);
    free(rs->kept_hash);
    free(rs->classes);
    free(rs->comm);
    free(rs->known);
    memset(rs, 0, sizeof *rs);
}

void un_gen_stats_json(const un_gen_stats *s, un_buf *b) {
    un_buf_printf(b,
                  "{\"graphs\": %lld, \"graphs_naming\": %lld, \"graphs_same_nf\": %lld, "
                  "\"records\": %lld, \"unions\": %lld, \"buckets\": %lld, "
                  "\"pairs\": %lld, \"after_naming\": %lld, \"after_supergraph\": %lld, "
                  "\"after_compose\": %lld, \"after_rename\": %lld, \"after_subgraph\": %lld, "
                  "\"kept\": %lld, \"with_var\": %lld, \"enum_seconds\": %.3f, "
                  "\"pair_seconds\": %.3f, \"group_seconds\": %.3f, \"info_seconds\": %.3f, "
                  "\"stopped\": %s}",
                  (long long)s->graphs, (long long)s->graphs_naming, (long long)s->graphs_same_nf,
                  (long long)s->records, (long long)s->unions, (long long)s->buckets,
                  (long long)s->pairs, (long long)s->after_naming, (long long)s->after_super,
                  (long long)s->after_compose, (long long)s->after_rename, (long long)s->after_sub,
                  (long long)s->after_check, (long long)s->with_var, s->enum_seconds,
                  s->pair_seconds, s->group_seconds, s->info_seconds,
                  s->stopped ? "true" : "false");
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- rules: orientation and the degree variable ---- */

un_status un_gen_rule_orient(un_ctx *ctx, const un_rule *r, un_rule **out) {
    *out = NULL;
    uint64_t h, h_rev;
    un_rule *rev = NULL, *c = NULL;
    un_status st = UN_OK;
    /* the reverse is built only when it is the one stored (or to report why it cannot be) */
    if (!un_rule_hash_both(r, &h, &h_rev) || h_rev < h) {
        un_ref so[UN_RULE_MAX_OUTS], dout[UN_RULE_MAX_OUTS];
        for (int i = 0; i < r->n_out; i++) {
            so[i] = r->src_out[i];
            dout[i] = r->dst_out[i];
        }
        st = un_rule_make(ctx, r->dst, r->src, dout, so, r->n_out, &rev);
        if (st == UN_OK && r->n_vars > 0)
            st = un_gen_rule_add_degree_var(ctx, rev); /* the reversed rule keeps the variable */
        if (st != UN_OK) {
            un_rule_free(rev);
            return st;
        }
    }
    st = un_rule_canonical(ctx, rev ? rev : r, &c);
    un_rule_free(rev);
    if (st != UN_OK)
        return st;
    *out = c;
    return UN_OK;
}

/* Occurrences of parallel degrees on one side: parallel ops' "degree", inputs' layout degrees. */
static int degree_binds(const un_graph *g, int side, un_rule_bind *b, int nb, int64_t *val,
                        bool *mixed, int *n_par) {
    const un_spec *spec = un_graph_spec(g);
    for (int32_t v = 0; v < un_graph_node_count(g); v++) {
        const un_node *nd = un_graph_node(g, v);
        const un_op_spec *os = un_spec_op(spec, nd->op);
        un_op_kind kind = un_op_kind_of(nd->op);
        int pars[UN_MAX_DIMS + 2], items[UN_MAX_DIMS + 2], n = 0;
        if (kind == UN_OPK_PARALLEL) {
            pars[n] = un_spec_param_index(os, "degree");
            items[n++] = -1;
            (*n_par)++;
        } else if (kind == UN_OPK_SOURCE) {
            int ish = un_spec_param_index(os, "shard"), isum = un_spec_param_index(os, "sum"),
                icp = un_spec_param_index(os, "copy");
            for (int i = 0; ish >= 0 && i < nd->params[ish].len; i++)
                if (nd->params[ish].v[i] > 1) {
                    pars[n] = ish;
                    items[n++] = i;
                }
            if (isum >= 0 && nd->params[isum].v[0] > 1) {
                pars[n] = isum;
                items[n++] = -1;
            }
            if (icp >= 0 && nd->params[icp].v[0] > 1) {
                pars[n] = icp;
                items[n++] = -1;
            }
        }
        for (int i = 0; i < n; i++) {
            int64_t x = nd->params[pars[i]].v[items[i] < 0 ? 0 : items[i]];
            if (*val == 0)
                *val = x;
            else if (*val != x)
                *mixed = true;
            if (nb < UN_RULE_MAX_BINDS)
                b[nb] = (un_rule_bind){(int8_t)side, v, (int8_t)pars[i], (int8_t)items[i]};
            nb++;
        }
    }
    return nb;
}

un_status un_gen_rule_add_degree_var(un_ctx *ctx, un_rule *r) {
    un_rule_bind b[UN_RULE_MAX_BINDS];
    int64_t val = 0;
    bool mixed = false;
    int n_par = 0;
    int nb = degree_binds(r->src, UN_RULE_SRC, b, 0, &val, &mixed, &n_par);
    nb = degree_binds(r->dst, UN_RULE_DST, b, nb, &val, &mixed, &n_par);
    if (nb == 0 || n_par == 0 || mixed || nb > UN_RULE_MAX_BINDS)
        return UN_OK;
    return un_rule_var_add(ctx, r, "k", b, nb);
}

/* ---- pairing ---- */

typedef struct member {
    un_gen_graph g;
    int32_t bucket;
} member;

typedef struct pair {
    un_gen_graph a, b; /* a = the group's smallest graph */
    int32_t bucket;
    uint8_t max_ops, sum_ops, n_inputs;
} pair;

static int cmp_graph_size(const void *x, const void *y) {
    const un_gen_graph *a = x, *b = y;
    if (a->n_ops != b->n_ops)
        return a->n_ops < b->n_ops ? -1 : 1;
    return memcmp(a, b, sizeof *a);
}

static int cmp_pair(const void *x, const void *y) {
    const pair *a = x, *b = y;
    if (a->max_ops != b->max_ops)
        return a->max_ops < b->max_ops ? -1 : 1;
    if (a->sum_ops != b->sum_ops)
        return a->sum_ops < b->sum_ops ? -1 : 1;
    if (a->n_inputs != b->n_inputs) /* general rules before their instances */
        return a->n_inputs > b->n_inputs ? -1 : 1;
    if (a->bucket != b->bucket)
        return a->bucket < b->bucket ? -1 : 1;
    int c = memcmp(&a->a, &b->a, sizeof a->a);
    return c ? c : memcmp(&a->b, &b->b, sizeof a->b);
}

/* The class of (vh, mask), or NULL. */
static const un_gen_class *class_find(const un_gen_enum_result *r, uint64_t vh, uint32_t mask) {
    int64_t lo = 0, hi = r->n_classes;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        const un_gen_class *c = &r->classes[mid];
        if (c->vh < vh || (c->vh == vh && c->mask < mask))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < r->n_classes && r->classes[lo].vh == vh && r->classes[lo].mask == mask)
        return &r->classes[lo];
    return NULL;
}

/* The smallest class of value vh whatever the inputs it names (a split output may name more
 * inputs than its value depends on), or NULL. */
static const un_gen_class *class_find_value(const un_gen_enum_result *r, uint64_t vh) {
    int64_t lo = 0, hi = r->n_classes;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (r->classes[mid].vh < vh)
            lo = mid + 1;
        else
            hi = mid;
    }
    const un_gen_class *best = NULL;
    for (int64_t i = lo; i < r->n_classes && r->classes[i].vh == vh; i++)
        if (!best || r->classes[i].n_ops < best->n_ops)
            best = &r->classes[i];
    return best;
}

/* Number of tensors each operator of g adds, from a replay (the menu fixes output counts only
 * through inference, so the caller passes an evaluated graph). */
static int append_graph(un_gen_graph *dst, int *n_t, const un_gen_graph *src,
                        const un_gen_geval *ev, int n_inputs, int keep_out_t) {
    (void)keep_out_t;
    /* src's tensors >= n_inputs shift to start at *n_t */
    int shift = *n_t - n_inputs;
    for (int j = 0; j < src->n_ops; j++) {
        if (dst->n_ops >= UN_GEN_MAX_OPS)
            return -1;
        un_gen_op op = src->ops[j];
        for (int k = 0; k < op.n_in; k++)
            if (op.in[k] >= n_inputs)
                op.in[k] = (uint8_t)(op.in[k] + shift);
        dst->ops[dst->n_ops++] = op;
    }
    *n_t += ev->n_t - n_inputs;
    return 0;
}

/* A disconnected partner for a multi-output group: one smallest single-output graph per output,
 * side by side. Returns false when some output has no class or the sizes exceed max_ops. */
static bool make_union(un_ctx *ctx, const un_gen_enum *e, const un_gen_enum_result *r,
                       const un_gen_geval *ev, int max_ops, un_gen_graph *u) {
    const un_gen_menu *m = un_gen_enum_menu(e);
    memset(u, 0, sizeof *u);
    int n_t = m->n_inputs, total = 0;
    for (int i = 0; i < ev->n_out; i++) {
        const un_gen_class *c = class_find_value(r, ev->vh[ev->out[i]]);
        if (!c)
            return false;
        total += (int)c->n_ops;
        if (total > max_ops)
            return false;
        un_gen_geval cev;
        if (un_gen_enum_eval(ctx, e, &c->g, &cev) != UN_OK) {
            un_ctx_clear(ctx);
            return false;
        }
        int rc = append_graph(u, &n_t, &c->g, &cev, m->n_inputs, 0);
        un_gen_geval_deinit(&cev);
        if (rc != 0 || n_t > UN_GEN_MAX_T)
            return false;
    }
    return true;
}

/* NF key of a graph: structural keys with every inner tensor replaced by its class. */
static uint64_t nf_key(const un_gen_enum_result *r, const un_gen_graph *g, const un_gen_geval *ev,
                       int n_inputs, const bool *comm) {
    uint64_t nf[UN_GEN_MAX_T];
    for (int t = 0; t < n_inputs; t++)
        nf[t] = ev->key[t];
    int t = n_inputs;
    for (int j = 0; j < g->n_ops; j++) {
        uint64_t key = un_mix64(0x6f70ull + (uint64_t)g->ops[j].inst);
        if (comm[g->ops[j].inst] && g->ops[j].n_in == 2) {
            /* a kept commutativity rule: the argument order does not matter */
            uint64_t x = nf[g->ops[j].in[0]], y = nf[g->ops[j].in[1]];
            key = un_mix64(key ^ (x < y ? x : y)) + 0;
            key = un_mix64(key ^ (x < y ? y : x)) + 1;
        } else
            for (int k = 0; k < g->ops[j].n_in; k++)
                key = un_mix64(key ^ nf[g->ops[j].in[k]]) + (uint64_t)k;
        for (; t < ev->n_t && ev->prod[t] == j; t++) {
            nf[t] = un_mix64(key + 0x6f7574ull * (uint64_t)(ev->prod_out[t] + 1));
            if (ev->uses[t] > 0) {
                const un_gen_class *c = class_find(r, ev->vh[t], ev->mask[t]);
                if (c)
                    nf[t] = un_mix64(c->key ^ 0x636c617373ull);
            }
        }
    }
    uint64_t h = 0x6e66ull;
    for (int i = 0; i < ev->n_out; i++)
        h = un_mix64(h ^ nf[ev->out[i]]);
    return h;
}

static bool outputs_equal(const un_gen_geval *a, const un_gen_geval *b) {
    if (a->n_out != b->n_out || a->mask_all != b->mask_all)
        return false;
    for (int i = 0; i < a->n_out; i++) {
        if (a->vh[a->out[i]] != b->vh[b->out[i]] || a->numel[i] != b->numel[i] ||
            !un_shape_eq(&a->shape[a->out[i]], &b->shape[b->out[i]]) ||
            memcmp(a->dense[i], b->dense[i], sizeof(un_val) * (size_t)a->numel[i]) != 0)
            return false;
    }
    return true;
}

/* The sides of the rule A => B as graphs (outputs matched in value-hash order), optionally with
 * tensors abstracted into fresh inputs and output pairs left out (skip_out bit i). Every caller
 * drops the error text, so none is formatted: no context below, the status says it all. */
typedef struct sides {
    un_graph *a, *b;
    un_ref ra[UN_GEN_MAX_GOUTS], rb[UN_GEN_MAX_GOUTS];
    int n;
} sides;

static void sides_free(sides *s) {
    un_graph_free(s->a);
    un_graph_free(s->b);
    s->a = s->b = NULL;
}

static un_status sides_build(const un_gen_enum *e, const un_gen_graph *ga, const un_gen_geval *ea,
                             const un_gen_graph *gb, const un_gen_geval *eb, const uint8_t *abs_a,
                             const uint8_t *abs_b, int n_abs, unsigned skip_out, sides *s) {
    memset(s, 0, sizeof *s);
    uint8_t oa[UN_GEN_MAX_GOUTS], ob[UN_GEN_MAX_GOUTS];
    for (int i = 0; i < ea->n_out; i++)
        if (!(skip_out & (1u << i))) {
            oa[s->n] = ea->out[i];
            ob[s->n++] = eb->out[i];
        }
    if (s->n == 0)
        return UN_ERR_INVALID;
    un_status st = un_gen_enum_to_graph(NULL, e, ga, ea, abs_a, n_abs, oa, s->n, &s->a, s->ra);
    if (st == UN_OK)
        st = un_gen_enum_to_graph(NULL, e, gb, eb, abs_b, n_abs, ob, s->n, &s->b, s->rb);
    if (st != UN_OK)
        sides_free(s);
    return st;
}

/* Canonical hash of the stored direction of the rule the sides make (min over both directions),
 * or the error un_rule_make would give. */
static un_status sides_hash(const sides *s, uint64_t *h) {
    uint64_t fwd, rev;
    bool has_rev;
    un_status st = un_rule_hash_sides(NULL, s->a, s->b, s->ra, s->rb, s->n, &fwd, &rev, &has_rev);
    if (st == UN_OK)
        *h = has_rev && rev < fwd ? rev : fwd;
    return st;
}

/* sides_hash of the rule A => B (sides_build's sides), without making the rule. */
static un_status rule_hash(const un_gen_enum *e, const un_gen_graph *ga, const un_gen_geval *ea,
                           const un_gen_graph *gb, const un_gen_geval *eb, const uint8_t *abs_a,
                           const uint8_t *abs_b, int n_abs, unsigned skip_out, uint64_t *h) {
    sides s;
    un_status st = sides_build(e, ga, ea, gb, eb, abs_a, abs_b, n_abs, skip_out, &s);
    if (st == UN_OK)
        st = sides_hash(&s, h);
    sides_free(&s);
    return st;
}

/* Where candidate hashes go: looked up in a known set (true on a hit), or collected for a later
 * lookup (never a hit; overflow is remembered). */
#define UN_GEN_SINK_CAP 12
typedef struct hsink {
    const un_hmap *known;
    uint64_t h[UN_GEN_SINK_CAP];
    int n;
    bool overflow;
} hsink;

static bool sink_hit(hsink *s, uint64_t h) {
    if (s->known)
        return un_hmap_get(s->known, h, NULL);
    if (s->n < UN_GEN_SINK_CAP)
        s->h[s->n++] = h;
    else
        s->overflow = true;
    return false;
}

static bool sink_any(const hsink *s, const un_hmap *known) {
    for (int i = 0; i < s->n; i++)
        if (un_hmap_get(known, s->h[i], NULL))
            return true;
    return false;
}

static bool try_abstract(un_ctx *ctx, const un_gen_enum *e, hsink *known, const un_gen_graph *ga,
                         const un_gen_geval *ea, const un_gen_graph *gb, const un_gen_geval *eb,
                         const uint8_t *xa, const uint8_t *xb, int n) {
    uint64_t h;
    if (rule_hash(e, ga, ea, gb, eb, xa, xb, n, 0, &h) == UN_OK)
        return sink_hit(known, h);
    un_ctx_clear(ctx);
    return false;
}

/* Common subgraph: a tensor both sides compute identically (same structural key) abstracted into
 * a fresh input, or an output pair computed identically left out, gives a known rule. */
static bool implied_by_subgraph(un_ctx *ctx, const un_gen_enum *e, hsink *known,
                                const un_gen_graph *ga, const un_gen_geval *ea,
                                const un_gen_graph *gb, const un_gen_geval *eb, int n_inputs) {
    for (int i = 0; i < ea->n_out; i++)
        if (ea->key[ea->out[i]] == eb->key[eb->out[i]]) {
            uint64_t h;
            if (rule_hash(e, ga, ea, gb, eb, NULL, NULL, 0, 1u << i, &h) != UN_OK)
                un_ctx_clear(ctx);
            else if (sink_hit(known, h))
                return true;
        }
    /* every tensor both compute identically, one at a time, then the whole frontier at once */
    uint8_t fa[UN_GEN_MAX_T], fb[UN_GEN_MAX_T];
    int nf = 0;
    for (int ta = n_inputs; ta < ea->n_t; ta++) {
        if (ea->uses[ta] == 0)
            continue;
        for (int tb = n_inputs; tb < eb->n_t; tb++) {
            if (eb->uses[tb] == 0 || ea->key[ta] != eb->key[tb])
                continue;
            uint8_t xa = (uint8_t)ta, xb = (uint8_t)tb;
            if (try_abstract(ctx, e, known, ga, ea, gb, eb, &xa, &xb, 1))
                return true;
            /* frontier: consumed by an operator whose output is not common */
            bool frontier = false;
            for (int j = 0; j < ga->n_ops && !frontier; j++)
                for (int k = 0; k < ga->ops[j].n_in; k++)
                    if (ga->ops[j].in[k] == ta) {
                        bool out_common = false;
                        for (int t = n_inputs; t < ea->n_t; t++)
                            if (ea->prod[t] == j)
                                for (int u = n_inputs; u < eb->n_t; u++)
                                    out_common |= eb->key[u] == ea->key[t];
                        frontier |= !out_common;
                    }
            if (frontier) {
                fa[nf] = (uint8_t)ta;
                fb[nf++] = (uint8_t)tb;
            }
            break;
        }
    }
    if (nf >= 2 && try_abstract(ctx, e, known, ga, ea, gb, eb, fa, fb, nf))
        return true;
    return false;
}

/* An instance of a kept rule with two inputs identified: some uses of input i, renamed to an
 * unused interchangeable input j, give an equal pair whose rule is known. */
static bool implied_by_diagonal(un_ctx *ctx, const un_gen_enum *e, hsink *known,
                                const un_gen_graph *ga, const un_gen_geval *ea,
                                const un_gen_graph *gb, const un_gen_geval *eb) {
    const un_gen_menu *m = un_gen_enum_menu(e);
    uint32_t used = ea->mask_all | eb->mask_all;
    for (int i = 0; i < m->n_inputs; i++) {
        if (!(used & (1u << i)))
            continue;
        int j = -1, grp = un_gen_menu_input_group(m, i);
        for (int q = 0; q < m->n_inputs && j < 0; q++)
            if (!(used & (1u << q)) && un_gen_menu_input_group(m, q) == grp)
                j = q;
        if (j < 0)
            continue;
        int pos[16][3], np = 0; /* (side, op, slot) of every use of i */
        const un_gen_graph *gs[2] = {ga, gb};
        for (int s2 = 0; s2 < 2; s2++)
            for (int o = 0; o < gs[s2]->n_ops; o++)
                for (int k = 0; k < gs[s2]->ops[o].n_in; k++)
                    if (gs[s2]->ops[o].in[k] == i && np < 16) {
                        pos[np][0] = s2;
                        pos[np][1] = o;
                        pos[np++][2] = k;
                    }
        if (np < 2 || np > 8)
            continue;
        for (unsigned sub = 1; sub + 1 < (1u << np); sub++) {
            un_gen_graph g2[2] = {*ga, *gb};
            for (int q = 0; q < np; q++)
                if (sub & (1u << q))
                    g2[pos[q][0]].ops[pos[q][1]].in[pos[q][2]] = (uint8_t)j;
            un_gen_geval e2[2];
            if (un_gen_enum_eval(ctx, e, &g2[0], &e2[0]) != UN_OK) {
                un_ctx_clear(ctx);
                continue;
            }
            if (un_gen_enum_eval(ctx, e, &g2[1], &e2[1]) != UN_OK) {
                un_ctx_clear(ctx);
                un_gen_geval_deinit(&e2[0]);
                continue;
            }
            bool hit = false;
            if (e2[0].fp == e2[1].fp && e2[0].n_out == e2[1].n_out) {
                uint64_t h;
                if (rule_hash(e, &g2[0], &e2[0], &g2[1], &e2[1], NULL, NULL, 0, 0, &h) == UN_OK)
                    hit = sink_hit(known, h);
                else
                    un_ctx_clear(ctx);
            }
            un_gen_geval_deinit(&e2[0]);
            un_gen_geval_deinit(&e2[1]);
            if (hit)
                return true;
        }
    }
    return false;
}

typedef struct vecp {
    void *data;
    int64_t n, cap;
    size_t elem;
} vecp;

static void vecp_push(vecp *v, const void *x) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 256;
        v->data = un_xrealloc(v->data, (size_t)v->cap * v->elem);
    }
    memcpy((char *)v->data + (size_t)v->n * v->elem, x, v->elem);
    v->n++;
}

/* One group of equal graphs: evaluated members, split by full values, paired with the smallest. */
static int cmp_graph_size_q(const void *x, const void *y) { return cmp_graph_size(x, y); }

static un_status pair_bucket(un_ctx *ctx, const un_gen_enum *e, const un_gen_enum_result *r,
                             const un_gen_params *p, const un_gen_rec *recs, int64_t n,
                             int32_t bucket, vecp *pairs, un_gen_stats *stats) {
    /* memory stays O(members) graphs plus one evaluation per group of equal values */
    un_gen_graph *g = un_xmalloc(sizeof(un_gen_graph) * (size_t)(n + 1));
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        g[k++] = recs[i].g;
    un_gen_geval first;
    if (un_gen_enum_eval(ctx, e, &g[0], &first) == UN_OK) {
        un_gen_graph u;
        if (first.n_out >= 2 && make_union(ctx, e, r, &first, p->max_ops, &u)) {
            g[k++] = u;
            stats->unions++;
        }
        un_gen_geval_deinit(&first);
    }
    un_ctx_clear(ctx);
    qsort(g, (size_t)k, sizeof *g, cmp_graph_size_q);
    int cap = 4, nrep = 0;
    un_gen_geval *rep = un_xmalloc(sizeof(un_gen_geval) * (size_t)cap);
    int64_t *rep_at = un_xmalloc(sizeof(int64_t) * (size_t)cap), *members = NULL;
    members = un_xcalloc((size_t)cap, sizeof *members);
    for (int64_t i = 0; i < k; i++) {
        un_gen_geval ev;
        if (un_gen_enum_eval(ctx, e, &g[i], &ev) != UN_OK) {
            un_ctx_clear(ctx); /* a union partner that does not replay: skip it */
            continue;
        }
        int j = 0;
        while (j < nrep && !outputs_equal(&rep[j], &ev))
            j++;
        if (j == nrep) {
            if (nrep == cap) {
                cap *= 2;
                rep = un_xrealloc(rep, sizeof(un_gen_geval) * (size_t)cap);
                rep_at = un_xrealloc(rep_at, sizeof(int64_t) * (size_t)cap);
                members = un_xrealloc(members, sizeof(int64_t) * (size_t)cap);
            }
            rep[nrep] = ev;
            rep_at[nrep] = i;
            members[nrep++] = 1;
            continue;
        }
        const un_gen_graph *ra = &g[rep_at[j]];
        pair pr;
        memset(&pr, 0, sizeof pr);
        pr.a = *ra;
        pr.b = g[i];
        pr.bucket = bucket;
        pr.max_ops = g[i].n_ops > ra->n_ops ? g[i].n_ops : ra->n_ops;
        pr.sum_ops = (uint8_t)(g[i].n_ops + ra->n_ops);
        pr.n_inputs = (uint8_t)__builtin_popcount(rep[j].mask_all);
        vecp_push(pairs, &pr);
        members[j]++;
        un_gen_geval_deinit(&ev);
    }
    for (int j = 0; j < nrep; j++) {
        stats->buckets += members[j] >= 2;
        un_gen_geval_deinit(&rep[j]);
    }
    free(rep);
    free(rep_at);
    free(members);
    free(g);
    return UN_OK;
}

/* Bucket-local record of NF keys already decided (kept or implied). */
static uint64_t compose_key(int32_t bucket, uint64_t nf) {
    return un_mix64(nf ^ un_mix64((uint64_t)bucket + 0x636f6dull));
}

/* What the sequential decisions need of one pair, computed by worker threads beforehand. */
typedef struct pair_info {
    uint64_t nfa, nfb, h; /* normal forms of both sides; the pair's hash (h_ok) */
    uint32_t mask;        /* inputs used */
    bool evaluated;       /* both sides evaluated */
    bool prefix, h_ok, check_ok;
    hsink diag, sub; /* hashes that would make the pair an instance of a known rule */
    /* composition through an earlier member m of the group: hashes of (m, b) instances and the
     * pair index of m; the pair follows when the hash is known and m's pair was decided */
    int nm;
    uint64_t mh[8];
    int64_t mj[8];
    bool msuper[8]; /* m is congruent to the group's smallest graph: no decision needed */
    /* the rule as it would be stored (degree variable, orientation, canonical form), built when
     * no stage is settled yet and the random test passes; owned until the decision */
    un_rule *canon;
    uint64_t canon_h;   /* un_rule_hash(canon) */
    un_status canon_st; /* its error when it could not be built (the decision reports it) */
    void *prepared;     /* the sink's prep of canon, or NULL */
} pair_info;

typedef struct pinfo_job {
    const un_ctx *parent; /* workers' contexts inherit from it */
    const un_gen_enum *e;
    const un_gen_enum_result *r;
    const un_gen_params *p;
    const bool *comm;
    const pair *pairs;
    pair_info *info;
    int64_t begin, end;
    _Atomic int64_t next;
    const int64_t *by_bucket;    /* pair indices grouped by bucket, ascending within one */
    const int64_t *bucket_start; /* [bucket] -> first position in by_bucket; [n_buckets] end */
    /* the decisions' sets as they stand before this chunk (frozen while the workers run; they
     * only grow): a fact whose stage is already settled by them is not computed */
    const un_hmap *known, *decided;
    const un_gen_sink *sink; /* its prep runs on the likely keepers, or NULL */
} pinfo_job;

/* True when some operator output of ga has the structural key of one of gb's. */
static bool share_key(const un_gen_geval *ea, const un_gen_geval *eb, int n_inputs) {
    for (int ta = n_inputs; ta < ea->n_t; ta++)
        for (int tb = n_inputs; tb < eb->n_t; tb++)
            if (ea->key[ta] == eb->key[tb])
                return true;
    return false;
}

/* A worker's memo of the group members it evaluated for the composition scan (the first members
 * of a group are scanned for every pair of the group): the replay without its output values, and
 * the member's normal form. Lives for one chunk, during which the normal forms' inputs (the
 * commutative operators) are frozen. Direct mapped by pair index. */
#define MEMBER_MEMO 64
typedef struct member_memo {
    int64_t pair; /* -1: empty */
    bool ok;      /* the member replays */
    uint64_t nf;
    un_gen_geval ev; /* dense left out (NULL) */
} member_memo;

static const member_memo *member_get(un_ctx *ctx, const pinfo_job *job, member_memo *memo,
                                     int64_t q) {
    member_memo *mm = &memo[q & (MEMBER_MEMO - 1)];
    if (mm->pair == q)
        return mm;
    mm->pair = q;
    mm->ok = un_gen_enum_eval(ctx, job->e, &job->pairs[q].b, &mm->ev) == UN_OK;
    if (!mm->ok) {
        un_ctx_clear(ctx);
        return mm;
    }
    for (int k = 0; k < UN_GEN_MAX_GOUTS; k++) { /* the scan reads structure and keys only */
        free(mm->ev.dense[k]);
        mm->ev.dense[k] = NULL;
    }
    mm->nf =
        nf_key(job->r, &job->pairs[q].b, &mm->ev, un_gen_enum_menu(job->e)->n_inputs, job->comm);
    return mm;
}

static void pair_info_compute(un_ctx *ctx, const pinfo_job *job, member_memo *memo, int64_t i) {
    const pair *pr = &job->pairs[i];
    pair_info *pi = &job->info[i - job->begin];
    const un_gen_menu *m = un_gen_enum_menu(job->e);
    memset(pi, 0, sizeof *pi);
    un_gen_geval ea, eb;
    if (un_gen_enum_eval(ctx, job->e, &pr->a, &ea) != UN_OK) {
        un_ctx_clear(ctx);
        return;
    }
    if (un_gen_enum_eval(ctx, job->e, &pr->b, &eb) != UN_OK) {
        un_ctx_clear(ctx);
        un_gen_geval_deinit(&ea);
        return;
    }
    pi->evaluated = true;
    pi->mask = ea.mask_all;
    pi->prefix = un_gen_menu_prefix_ok(m, ea.mask_all);
    pi->nfa = nf_key(job->r, &pr->a, &ea, m->n_inputs, job->comm);
    pi->nfb = nf_key(job->r, &pr->b, &eb, m->n_inputs, job->comm);
    un_rule *rule = NULL;
    sides sd = {0};
    /* The decision tries the stages in order and the sets only grow, so once a stage is settled
     * by the sets before this chunk, the facts of the later stages can never be read: they are
     * left out (zero), which saves most of the work on the later chunks and changes no decision.
     * Composition settled: nothing past the normal forms is read. */
    if (pi->prefix && pi->nfa != pi->nfb &&
        !un_hmap_get(job->decided, compose_key(pr->bucket, pi->nfb), NULL) &&
        sides_build(job->e, &pr->a, &ea, &pr->b, &eb, NULL, NULL, 0, 0, &sd) == UN_OK &&
        sides_hash(&sd, &pi->h) == UN_OK) {
        pi->h_ok = true;
        /* renaming settled by the hash, then by the diagonal instances; subgraph settled */
        bool settled = un_hmap_get(job->known, pi->h, NULL);
        if (!settled) {
            implied_by_diagonal(ctx, job->e, &pi->diag, &pr->a, &ea, &pr->b, &eb);
            settled = sink_any(&pi->diag, job->known);
        }
        if (!settled) {
            implied_by_subgraph(ctx, job->e, &pi->sub, &pr->a, &ea, &pr->b, &eb, m->n_inputs);
            settled = sink_any(&pi->sub, job->known);
        }
        /* the rule itself only for the random test and the stored form */
        if (!settled)
            pi->check_ok = un_rule_make(ctx, sd.a, sd.b, sd.ra, sd.rb, sd.n, &rule) == UN_OK &&
                           un_rule_check_random(ctx, rule, UN_DOM_FIELD,
                                                job->p->seed ^ 0x636865636bull, NULL) == UN_OK;
        /* earlier members of the group sharing a subterm with b */
        const int64_t *bb = job->by_bucket;
        int scanned = 0; /* bounded: groups can hold thousands of graphs at N=4 */
        for (int64_t q = job->bucket_start[pr->bucket];
             !settled && q < job->bucket_start[pr->bucket + 1] && pi->nm < 8 && scanned < 24; q++) {
            if (bb[q] == i)
                continue;
            scanned++;
            const pair *pm = &job->pairs[bb[q]];
            const member_memo *mm = member_get(ctx, job, memo, bb[q]);
            if (!mm->ok)
                continue;
            bool sup = mm->nf == pi->nfa;
            if ((sup || bb[q] < i) && share_key(&mm->ev, &eb, m->n_inputs)) {
                hsink sk = {0};
                implied_by_subgraph(ctx, job->e, &sk, &pm->b, &mm->ev, &pr->b, &eb, m->n_inputs);
                for (int k = 0; k < sk.n && pi->nm < 8; k++) {
                    pi->mh[pi->nm] = sk.h[k];
                    pi->msuper[pi->nm] = sup;
                    pi->mj[pi->nm++] = bb[q];
                }
            }
        }
        /* a likely keeper: its stored form, here rather than in the sequential decisions */
        if (!settled && pi->check_ok) {
            un_status st = un_gen_rule_add_degree_var(ctx, rule);
            if (st == UN_OK)
                st = un_gen_rule_orient(ctx, rule, &pi->canon);
            if (st == UN_OK)
                pi->canon_h = un_rule_hash(pi->canon);
            pi->canon_st = st;
            if (st == UN_OK && job->sink && job->sink->prep)
                pi->prepared = job->sink->prep(job->sink->user, ctx, pi->canon, pi->canon_h);
        }
    }
    un_ctx_clear(ctx);
    un_rule_free(rule);
    sides_free(&sd);
    un_gen_geval_deinit(&ea);
    un_gen_geval_deinit(&eb);
}

static void *pinfo_worker(void *arg) {
    pinfo_job *job = arg;
    un_ctx *ctx = un_ctx_new_child(job->parent);
    member_memo *memo = un_xcalloc(MEMBER_MEMO, sizeof *memo);
    for (int k = 0; k < MEMBER_MEMO; k++)
        memo[k].pair = -1;
    for (;;) {
        int64_t i = atomic_fetch_add(&job->next, 16);
        if (i >= job->end)
            break;
        for (int64_t k = i; k < i + 16 && k < job->end; k++)
            pair_info_compute(ctx, job, memo, k);
    }
    free(memo); /* the memo holds no output values: nothing else to free */
    un_ctx_free(ctx);
    return NULL;
}

/* Fills info[begin, end) with the given number of threads. */
static void pair_info_run(pinfo_job *job, int threads) {
    atomic_store(&job->next, job->begin);
    pthread_t tid[256];
    int started = 0;
    for (int t = 1; t < threads && t < 256; t++)
        if (pthread_create(&tid[started], NULL, pinfo_worker, job) == 0)
            started++;
    pinfo_worker(job);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
}

/* The diagonal (which 0) or subgraph (1) test with lookups, for a pair whose candidate list
 * overflowed. */
static bool slow_check(un_ctx *ctx, const un_gen_enum *e, const un_hmap *known, const pair *pr,
                       int which) {
    un_gen_geval ea, eb;
    bool hit = false;
    if (un_gen_enum_eval(ctx, e, &pr->a, &ea) != UN_OK) {
        un_ctx_clear(ctx);
        return false;
    }
    if (un_gen_enum_eval(ctx, e, &pr->b, &eb) == UN_OK) {
        hsink sink = {.known = known};
        hit = which == 0 ? implied_by_diagonal(ctx, e, &sink, &pr->a, &ea, &pr->b, &eb)
                         : implied_by_subgraph(ctx, e, &sink, &pr->a, &ea, &pr->b, &eb,
                                               un_gen_enum_menu(e)->n_inputs);
        un_gen_geval_deinit(&eb);
    }
    un_ctx_clear(ctx);
    un_gen_geval_deinit(&ea);
    return hit;
}

/* Pairing of the groups of equal fingerprints (pair_bucket each), on p->threads threads. */
typedef struct group_job {
    const un_ctx *parent;
    const un_gen_enum *e;
    const un_gen_enum_result *r;
    const un_gen_params *p;
    const int64_t (*groups)[2]; /* first record, count */
    int64_t n_groups;
    _Atomic int64_t next;
    un_ctx *tty; /* the calling thread shows progress there, or NULL */
} group_job;

typedef struct group_worker {
    group_job *job;
    vecp pairs;
    un_gen_stats stats; /* unions and buckets */
    bool main;
} group_worker;

static void *group_work(void *arg) {
    group_worker *w = arg;
    group_job *job = w->job;
    un_ctx *ctx = un_ctx_new_child(job->parent);
    double last = un_now_s();
    for (;;) {
        int64_t g = atomic_fetch_add(&job->next, 1);
        if (g >= job->n_groups)
            break;
        (void)pair_bucket(ctx, job->e, job->r, job->p, &job->r->recs[job->groups[g][0]],
                          job->groups[g][1], (int32_t)g, &w->pairs, &w->stats);
        un_ctx_clear(ctx);
        if (w->main && job->tty && un_now_s() - last > 0.5) {
            last = un_now_s();
            un_ctx_progress(job->tty, "unity-gen: pairing: %lld/%lld groups", (long long)g,
                            (long long)job->n_groups);
        }
    }
    un_ctx_free(ctx);
    return NULL;
}

static void group_pairing(un_ctx *ctx, const un_gen_enum *e, const un_gen_enum_result *r,
                          const un_gen_params *p, const int64_t (*groups)[2], int64_t n_groups,
                          bool tty, vecp *pairs, un_gen_stats *stats) {
    group_job job = {.parent = ctx,
                     .e = e,
                     .r = r,
                     .p = p,
                     .groups = groups,
                     .n_groups = n_groups,
                     .tty = tty ? ctx : NULL};
    atomic_store(&job.next, 0);
    int nt = p->threads < 1 ? 1 : p->threads > 256 ? 256 : p->threads;
    group_worker *w = un_xcalloc((size_t)nt, sizeof *w);
    pthread_t tid[256];
    bool started[256] = {0};
    for (int t = 0; t < nt; t++) {
        w[t] = (group_worker){.job = &job, .pairs = {.elem = sizeof(pair)}, .main = t == 0};
        if (t > 0)
            started[t] = pthread_create(&tid[t], NULL, group_work, &w[t]) == 0;
    }
    group_work(&w[0]);
    for (int t = 0; t < nt; t++) {
        if (t > 0 && started[t])
            pthread_join(tid[t], NULL);
        for (int64_t i = 0; i < w[t].pairs.n; i++)
            vecp_push(pairs, (char *)w[t].pairs.data + (size_t)i * sizeof(pair));
        free(w[t].pairs.data);
        stats->unions += w[t].stats.unions;
        stats->buckets += w[t].stats.buckets;
    }
    free(w);
    if (tty)
        un_ctx_progress_done(ctx);
}

un_status un_gen_find(un_ctx *ctx, un_gen_enum *e, const un_gen_params *p, un_gen_rules *out) {
    return un_gen_find_stream(ctx, e, p, NULL, out);
}

/* Frees what the workers built for pair info *pi and no decision took. */
static void pair_info_drop(const un_gen_sink *sink, pair_info *pi) {
    un_rule_free(pi->canon);
    pi->canon = NULL;
    if (pi->prepared && sink && sink->drop)
        sink->drop(pi->prepared);
    pi->prepared = NULL;
}

un_status un_gen_find_stream(un_ctx *ctx, un_gen_enum *e, const un_gen_params *p,
                             const un_gen_sink *sink, un_gen_rules *out) {
    memset(out, 0, sizeof *out);
    vecp kept_h = {.elem = sizeof(uint64_t)};
    int64_t n_kept = 0;
    un_gen_stats *stats = &out->stats;
    un_gen_enum_result r;
    un_status st = un_gen_enum_run(ctx, e, p, &r);
    if (st != UN_OK)
        return st;
    const un_gen_menu *m = un_gen_enum_menu(e);
    stats->graphs = r.n_graphs;
    stats->records = r.n_recs;
    stats->graphs_naming = r.n_naming;
    stats->graphs_same_nf = r.n_same_nf;
    stats->enum_seconds = r.seconds;
    stats->stopped = r.stopped;
    stats->work_done = r.n_roots_done;
    stats->work_total = r.n_roots;
    double t0 = un_now_s(), last = t0;
    bool tty = un_ctx_has_progress(ctx);
    /* the groups to pair (in fingerprint order, which numbers them), then paired by the workers:
     * the pairs are sorted below by a total order, so which worker made which does not matter */
    vecp groups = {.elem = sizeof(int64_t[2])};
    for (int64_t i = 0; i < r.n_recs;) {
        int64_t j = i;
        while (j < r.n_recs && r.recs[j].fp == r.recs[i].fp)
            j++;
        /* singletons matter only when a disconnected partner may exist (>= 2 outputs) */
        bool multi = false;
        if (j - i == 1) {
            const un_gen_graph *g = &r.recs[i].g;
            uint64_t consumed = 0;
            for (int q = 0; q < g->n_ops && !multi; q++) {
                multi = m->insts[g->ops[q].inst].op == UN_OP_SPLIT; /* several outputs */
                for (int x = 0; x < g->ops[q].n_in; x++)
                    if (g->ops[q].in[x] >= m->n_inputs)
                        consumed |= 1ull << g->ops[q].in[x];
            }
            /* without split every operator has one output: n_ops - consumed are unconsumed */
            multi = multi || g->n_ops - __builtin_popcountll(consumed) >= 2;
        }
        if (j - i >= 2 || multi)
            vecp_push(&groups, (int64_t[2]){i, j - i});
        i = j;
    }
    int32_t bucket = (int32_t)groups.n;
    vecp pairs = {.elem = sizeof(pair)};
    group_pairing(ctx, e, &r, p, groups.data, groups.n, tty, &pairs, stats);
    free(groups.data);
    stats->pairs = pairs.n;
    stats->group_seconds = un_now_s() - t0;
    pair *pv = pairs.data;
    if (pairs.n > 1)
        qsort(pv, (size_t)pairs.n, sizeof(pair), cmp_pair);
    /* pair indices by bucket (a counting sort keeps them ascending within a bucket) */
    int64_t *bucket_start = un_xcalloc((size_t)bucket + 2, sizeof *bucket_start);
    int64_t *by_bucket = un_xmalloc(sizeof(int64_t) * (size_t)(pairs.n + 1));
    for (int64_t i = 0; i < pairs.n; i++)
        bucket_start[pv[i].bucket + 1]++;
    for (int32_t b = 0; b < bucket; b++)
        bucket_start[b + 1] += bucket_start[b];
    {
        int64_t *fill = un_xmalloc(sizeof(int64_t) * ((size_t)bucket + 1));
        memcpy(fill, bucket_start, sizeof(int64_t) * ((size_t)bucket + 1));
        for (int64_t i = 0; i < pairs.n; i++)
            by_bucket[fill[pv[i].bucket]++] = i;
        free(fill);
    }
    bool *pair_done = un_xcalloc((size_t)(pairs.n + 1), 1);
    un_hmap known = {0}, decided = {0};
    bool *comm = un_xcalloc((size_t)m->n_insts, sizeof *comm);
    vecp kept = {.elem = sizeof(un_rule *)};
    int64_t c_naming = 0, c_super = 0, c_compose = 0, c_rename = 0, c_sub = 0, c_check = 0;
    /* waves of equal largest side: the workers compute what each pair needs, then the
     * decisions run in order (commutativity rules, learnt from one-operator pairs, shape the
     * normal forms of the later waves) */
    enum { CHUNK = 1 << 10 }; /* a chunk holds its likely keepers' rules: ~35 MiB */
    /* the one-operator pairs (sorted first) are one chunk however many: the commutativity their
     * decisions learn must not reach some of their own normal forms, so that the chunk size
     * changes no decision (later waves see every one-operator decision either way) */
    int64_t n_one = 0;
    while (n_one < pairs.n && pv[n_one].max_ops == 1)
        n_one++;
    pair_info *info = un_xcalloc((size_t)(n_one > CHUNK ? n_one : CHUNK), sizeof *info);
    pinfo_job job = {.parent = ctx,
                     .e = e,
                     .r = &r,
                     .p = p,
                     .comm = comm,
                     .pairs = pv,
                     .info = info,
                     .by_bucket = by_bucket,
                     .bucket_start = bucket_start,
                     .known = &known,
                     .decided = &decided,
                     .sink = sink};
    int64_t wave_end = 0;
    for (int64_t i = 0; i < pairs.n && st == UN_OK; i++) {
        const pair *pr = &pv[i];
        if (i == wave_end) { /* a chunk of pairs of one largest-side size */
            wave_end = i;
            while (wave_end < pairs.n && (wave_end - i < CHUNK || pr->max_ops == 1) &&
                   pv[wave_end].max_ops == pr->max_ops)
                wave_end++;
            job.begin = i;
            job.end = wave_end;
            double ti = un_now_s();
            pair_info_run(&job, p->threads);
            stats->info_seconds += un_now_s() - ti;
        }
        if (tty && un_now_s() - last > 0.5) {
            last = un_now_s();
            double rate = (double)i / (last - t0 + 1e-9);
            un_ctx_progress(ctx, "unity-gen: pruning: %lld/%lld pairs, %lld rules, %.0f pairs/s",
                            (long long)i, (long long)pairs.n, (long long)n_kept, rate);
        }
        pair_info *pi = &info[i - job.begin];
        if (!pi->evaluated) {
            st = un_ctx_error(ctx, UN_ERR_INVALID, "pairing: a recorded graph does not evaluate");
            break;
        }
        uint64_t ck = compose_key(pr->bucket, pi->nfb);
        bool member_hit = false;
        for (int k = 0; k < pi->nm && !member_hit; k++)
            member_hit = (pi->msuper[k] || (pi->mj[k] < i && pair_done[pi->mj[k]])) &&
                         un_hmap_get(&known, pi->mh[k], NULL);
        if (!pi->prefix) {
            c_naming++;
        } else if (pi->nfa == pi->nfb) {
            c_super++;
            pair_done[i] = true;
        } else if (un_hmap_get(&decided, ck, NULL)) {
            c_compose++;
            pair_done[i] = true;
        } else if (!pi->h_ok) {
            c_check++; /* a pair our rules cannot express (e.g. differing inputs) */
        } else if (un_hmap_get(&known, pi->h, NULL) || sink_any(&pi->diag, &known) ||
                   (pi->diag.overflow && slow_check(ctx, e, &known, pr, 0))) {
            c_rename++;
            un_hmap_add(&known, pi->h, 0);
            un_hmap_add(&decided, ck, 0);
            pair_done[i] = true;
        } else if (sink_any(&pi->sub, &known) ||
                   (pi->sub.overflow && slow_check(ctx, e, &known, pr, 1))) {
            c_sub++;
            un_hmap_add(&known, pi->h, 0);
            un_hmap_add(&decided, ck, 0);
            pair_done[i] = true;
        } else if (member_hit) {
            /* b is an instance of a known rule away from a member already shown equal */
            c_compose++;
            un_hmap_add(&known, pi->h, 0);
            un_hmap_add(&decided, ck, 0);
            pair_done[i] = true;
        } else if (!pi->check_ok) {
            c_check++;
        } else {
            /* kept: the stored form was built by the workers */
            un_rule *canon = pi->canon;
            pi->canon = NULL;
            if (!canon) {
                un_status why = pi->canon_st != UN_OK ? pi->canon_st : UN_ERR_INVALID;
                st = un_ctx_error(ctx, why, "pairing: a kept pair gives no rule (%s)",
                                  un_status_str(why));
                break;
            }
            un_hmap_add(&known, pi->h, 0);
            un_hmap_add(&decided, ck, 0);
            pair_done[i] = true;
            stats->with_var += canon->n_vars > 0;
            vecp_push(&kept_h, &pi->canon_h);
            n_kept++;
            /* op(a, b) => op(b, a): later normal forms ignore that op's argument order */
            if (pr->a.n_ops == 1 && pr->b.n_ops == 1 && pr->a.ops[0].inst == pr->b.ops[0].inst &&
                pr->a.ops[0].n_in == 2 && pr->a.ops[0].in[0] == pr->b.ops[0].in[1] &&
                pr->a.ops[0].in[1] == pr->b.ops[0].in[0])
                comm[pr->a.ops[0].inst] = true;
            if (sink) {
                st = sink->emit(sink->user, ctx, canon, pi->prepared); /* canon is freed below */
            } else {
                vecp_push(&kept, &canon);
                canon = NULL;
            }
            un_rule_free(canon);
        }
        pair_info_drop(sink, pi); /* what was built for a pair not kept after all, or emitted */
    }
    for (int64_t i = job.begin; i < job.end; i++) /* after an error: the rest of the chunk */
        pair_info_drop(sink, &info[i - job.begin]);
    free(info);
    free(pair_done);
    free(by_bucket);
    free(bucket_start);
    if (tty)
        un_ctx_progress_done(ctx);
    stats->after_naming = pairs.n - c_naming;
    stats->after_super = stats->after_naming - c_super;
    stats->after_compose = stats->after_super - c_compose;
    stats->after_rename = stats->after_compose - c_rename;
    stats->after_sub = stats->after_rename - c_sub;
    stats->after_check = stats->after_sub - c_check;
    stats->pair_seconds = un_now_s() - t0;
    /* keep what explains pairs later (recall) */
    out->known = un_xmalloc(sizeof(uint64_t) * (size_t)(known.n + 1));
    out->n_known = un_hmap_keys(&known, out->known);
    if (out->n_known > 1)
        qsort(out->known, (size_t)out->n_known, sizeof(uint64_t), cmp_u64);
    out->comm = comm;
    out->classes = r.classes;
    out->n_classes = r.n_classes;
    r.classes = NULL;
    r.n_classes = 0;
    un_hmap_deinit(&known);
    un_hmap_deinit(&decided);
    free(pairs.data);
    un_gen_enum_result_deinit(&r);
    out->rules = kept.data;
    out->n = n_kept;
    out->kept_hash = kept_h.data;
    if (st != UN_OK) {
        un_gen_rules_deinit(out);
        return st;
    }
    return UN_OK;
}

bool un_gen_pair_explain(un_ctx *ctx, const un_gen_enum *e, const un_gen_rules *rs,
                         const un_gen_graph *a, const un_gen_graph *b, char *why, size_t n) {
    const un_gen_menu *m = un_gen_enum_menu(e);
    un_gen_enum_result r;
    memset(&r, 0, sizeof r);
    r.classes = rs->classes;
    r.n_classes = rs->n_classes;
    bool *no_comm = un_xcalloc((size_t)m->n_insts, sizeof *no_comm);
    const bool *comm = rs->comm ? rs->comm : no_comm;
    un_hmap known = {0};
    for (int64_t i = 0; i < rs->n_known; i++)
        un_hmap_add(&known, rs->known[i], 0);
    un_gen_geval ea, eb;
    bool res = false, have_a = false, have_b = false;
    if (un_gen_enum_eval(ctx, e, a, &ea) == UN_OK)
        have_a = true;
    if (have_a && un_gen_enum_eval(ctx, e, b, &eb) == UN_OK)
        have_b = true;
    un_ctx_clear(ctx);
    if (have_a && have_b && ea.n_out == eb.n_out) {
        uint64_t h;
        if (nf_key(&r, a, &ea, m->n_inputs, comm) == nf_key(&r, b, &eb, m->n_inputs, comm)) {
            snprintf(why, n,
                     "implied: a congruence of smaller rules (equal once inner tensors are "
                     "replaced by the smallest graph of their value)");
            res = true;
        } else if (rule_hash(e, a, &ea, b, &eb, NULL, NULL, 0, 0, &h) == UN_OK &&
                   un_hmap_get(&known, h, NULL)) {
            snprintf(why, n, "implied: a renaming of a rule kept or implied");
            res = true;
        } else if (implied_by_subgraph(ctx, e, &(hsink){.known = &known}, a, &ea, b, &eb,
                                       m->n_inputs)) {
            snprintf(why, n, "implied: an instance of a kept rule on a common subgraph");
            res = true;
        } else if (implied_by_diagonal(ctx, e, &(hsink){.known = &known}, a, &ea, b, &eb)) {
            snprintf(why, n, "implied: an instance of a kept rule with two inputs identified");
            res = true;
        }
        un_ctx_clear(ctx);
    }
    if (have_a)
        un_gen_geval_deinit(&ea);
    if (have_b)
        un_gen_geval_deinit(&eb);
    un_hmap_deinit(&known);
    free(no_comm);
    return res;
}
