/* rules.c - verified rules loaded for the search, each with its compiled matcher (rules_impl.h)
 * and indexed by the operator of its pattern's root. Loading goes through rulesdb (which checks
 * every row against its hash); compiling is a pass over the source pattern. */
#include "search/rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "search/rules_impl.h"

struct un_ruleset {
    const un_spec *spec;
    int64_t n, cap;
    un_rule **rules;   /* owned */
    int32_t *ids;      /* rules.db ids */
    bool *reversed;
    un__pat *pats;     /* compiled matchers */
    int32_t *by_root[UN_OP_COUNT];
    int64_t n_by_root[UN_OP_COUNT];
    un_ruleset_stats stats;
};

un_ruleset_params un_ruleset_params_default(void) {
    return (un_ruleset_params){.reversed = false, .max_size = 0};
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool is_source(const un_graph *g, int32_t v) {
    return un_op_kind_of(un_graph_node(g, v)->op) == UN_OPK_SOURCE;
}

/* Whether pattern node u is placed or is an input some placed node reads (its tensor is known). */
static bool known(const un_graph *src, const bool *placed, int32_t u) {
    if (!is_source(src, u))
        return placed[u];
    for (int32_t w = 0; w < un_graph_node_count(src); w++) {
        const un_node *nd = un_graph_node(src, w);
        for (int s = 0; placed[w] && s < nd->n_in; s++)
            if (nd->in[s].node == u)
                return true;
    }
    return false;
}

/* Compiles r's source pattern: the search plan, the variable occurrences and the mapped outputs.
 * false when the pattern is too big. */
static bool pat_compile(const un_rule *r, un__pat *p) {
    const un_graph *src = r->src;
    const un_spec *spec = un_graph_spec(src);
    int32_t n = un_graph_node_count(src);
    memset(p, 0, sizeof *p);
    if (n > UN_MATCH_MAX_NODES)
        return false;
    p->n_nodes = (int8_t)n;
    for (int32_t v = 0; v < n; v++)
        p->input_of[v] = -1;
    for (int i = 0; i < un_rule_input_count(r); i++)
        p->input_of[un_rule_input_src(r, i)] = (int8_t)i;
    for (int i = 0; i < r->n_out; i++)
        p->is_mapped[r->src_out[i].node][r->src_out[i].out] = true;
    for (int a = 0; a < r->n_vars; a++) {
        for (int b = 0; b < r->vars[a].n_binds; b++) {
            const un_rule_bind *bd = &r->vars[a].binds[b];
            if (bd->side != UN_RULE_SRC)
                continue;
            p->var_in_src[a] = true;
            un__bind *x = &p->binds[p->n_binds++];
            *x = (un__bind){(int8_t)bd->node, bd->param, bd->item, (int8_t)a, UN__COMP_NONE};
            p->bound[bd->node][bd->param] |= (uint8_t)(bd->item < 0 ? 0x80 : 1u << bd->item);
            const un_node *nd = un_graph_node(src, bd->node);
            if (un_op_kind_of(nd->op) == UN_OPK_SOURCE) {
                const char *pn = un_spec_op(spec, nd->op)->params[bd->param].name;
                int it = bd->item < 0 ? 0 : bd->item;
                x->comp = !strcmp(pn, "shape")   ? (int8_t)(UN__COMP_DIM + it)
                          : !strcmp(pn, "shard") ? (int8_t)(UN__COMP_SHARD + it)
                          : !strcmp(pn, "sum")   ? UN__COMP_SUM
                          : !strcmp(pn, "copy")  ? UN__COMP_COPY
                                                 : UN__COMP_NONE;
            }
        }
    }
    /* The plan: the root is the last operator node (a sink); then producers of placed nodes,
     * then consumers of known tensors, then (a disconnected part) a scan. */
    bool placed[UN_MATCH_MAX_NODES] = {0};
    int n_ops = 0;
    for (int32_t v = 0; v < n; v++)
        n_ops += !is_source(src, v);
    for (int32_t v = n - 1; v >= 0; v--)
        if (!is_source(src, v)) {
            p->steps[p->n_steps++] = (un__step){UN__STEP_SCAN, (int8_t)v, -1, -1};
            placed[v] = true;
            break;
        }
    while (p->n_steps < n_ops) {
        un__step st = {.kind = -1};
        for (int k = 0; k < p->n_steps && st.kind < 0; k++) {
            const un_node *nd = un_graph_node(src, p->steps[k].node);
            for (int s = 0; s < nd->n_in && st.kind < 0; s++) {
                int32_t u = nd->in[s].node;
                if (!is_source(src, u) && !placed[u])
                    st = (un__step){UN__STEP_PRODUCER, (int8_t)u, p->steps[k].node, (int8_t)s};
            }
        }
        for (int32_t u = 0; u < n && st.kind < 0; u++) {
            if (is_source(src, u) || placed[u])
                continue;
            const un_node *nd = un_graph_node(src, u);
            for (int s = 0; s < nd->n_in && st.kind < 0; s++)
                if (known(src, placed, nd->in[s].node))
                    st = (un__step){UN__STEP_CONSUMER, (int8_t)u, -1, (int8_t)s};
        }
        for (int32_t u = 0; u < n && st.kind < 0; u++)
            if (!is_source(src, u) && !placed[u])
                st = (un__step){UN__STEP_SCAN, (int8_t)u, -1, -1};
        placed[st.node] = true;
        p->steps[p->n_steps++] = st;
    }
    return true;
}

static size_t graph_bytes(const un_graph *g) {
    return (size_t)un_graph_node_count(g) * (sizeof(un_node) + 16) + 256;
}

/* Adds rule r (taken over) as a new entry. false when its pattern is too big (r is freed). */
static bool set_add(un_ruleset *set, un_rule *r, int32_t id, bool reversed) {
    un__pat pat;
    if (!pat_compile(r, &pat)) {
        un_rule_free(r);
        return false;
    }
    if (set->n == set->cap) {
        set->cap = set->cap ? set->cap * 2 : 64;
        set->rules = un_xrealloc(set->rules, (size_t)set->cap * sizeof *set->rules);
        set->ids = un_xrealloc(set->ids, (size_t)set->cap * sizeof *set->ids);
        set->reversed = un_xrealloc(set->reversed, (size_t)set->cap * sizeof *set->reversed);
        set->pats = un_xrealloc(set->pats, (size_t)set->cap * sizeof *set->pats);
    }
    set->rules[set->n] = r;
    set->ids[set->n] = id;
    set->reversed[set->n] = reversed;
    set->pats[set->n] = pat;
    set->n++;
    set->stats.bytes += sizeof(un_rule) + graph_bytes(r->src) + graph_bytes(r->dst) +
                        sizeof(un__pat) + sizeof(int32_t) * 2 + 1;
    return true;
}

/* Takes over rules[0..n) (each freed or kept), adds them and their reverses, builds the index. */
static void set_fill(un_ruleset *set, un_rule **rules, const int32_t *ids, int64_t n,
                     const un_ruleset_params *p) {
    for (int64_t i = 0; i < n; i++) {
        un_rule *r = rules[i];
        int32_t id = ids ? ids[i] : (int32_t)(i + 1);
        if (p->max_size > 0 &&
            un_rule_size(r, UN_RULE_SRC) + un_rule_size(r, UN_RULE_DST) > p->max_size) {
            set->stats.too_big++;
            un_rule_free(r);
            continue;
        }
        un_rule *back = NULL;
        if (p->reversed && un_rule_reverse(NULL, r, &back) != UN_OK) {
            set->stats.not_reversed++;
            back = NULL;
        }
        if (!set_add(set, r, id, false))
            set->stats.too_big++;
        if (back && !set_add(set, back, id, true))
            set->stats.too_big++;
    }
    for (int64_t i = 0; i < set->n; i++) {
        const un__pat *pt = &set->pats[i];
        set->n_by_root[un_graph_node(set->rules[i]->src, pt->steps[0].node)->op]++;
    }
    for (int o = 0; o < UN_OP_COUNT; o++) {
        set->by_root[o] = un_xmalloc((size_t)(set->n_by_root[o] + 1) * sizeof(int32_t));
        set->stats.bytes += (size_t)(set->n_by_root[o] + 1) * sizeof(int32_t);
        set->n_by_root[o] = 0;
    }
    for (int64_t i = 0; i < set->n; i++) {
        un_op o = un_graph_node(set->rules[i]->src, set->pats[i].steps[0].node)->op;
        set->by_root[o][set->n_by_root[o]++] = (int32_t)i;
    }
    set->stats.loaded = set->n;
}

static un_ruleset *set_new(const un_spec *spec) {
    un_ruleset *set = un_xcalloc(1, sizeof *set);
    set->spec = spec;
    set->stats.bytes = sizeof *set;
    return set;
}

un_status un_ruleset_load(un_ctx *ctx, rulesdb *db, const un_ruleset_params *params,
                          un_ruleset **out, un_ruleset_stats *stats) {
    *out = NULL;
    if (stats)
        memset(stats, 0, sizeof *stats);
    un_ruleset_params p = params ? *params : un_ruleset_params_default();
    double t0 = now_s();
    un_rule **rules = NULL;
    int32_t *ids = NULL;
    int64_t n = 0, stale = 0;
    un_status st = rulesdb_load_verified_ids(ctx, db, &rules, &ids, &n, &stale);
    if (st != UN_OK)
        return st;
    un_ruleset *set = set_new(rulesdb_spec(db));
    set->stats.verified = n;
    set->stats.stale = stale;
    set_fill(set, rules, ids, n, &p);
    free(rules);
    free(ids);
    set->stats.load_s = now_s() - t0;
    if (stats)
        *stats = set->stats;
    *out = set;
    return UN_OK;
}

un_status un_ruleset_from_rules(un_ctx *ctx, const un_spec *spec, un_rule *const *rules,
                                const int32_t *ids, int64_t n, const un_ruleset_params *params,
                                un_ruleset **out) {
    *out = NULL;
    un_ruleset_params p = params ? *params : un_ruleset_params_default();
    for (int64_t i = 0; i < n; i++)
        if (un_graph_node_count(rules[i]->src) > UN_MATCH_MAX_NODES ||
            un_graph_node_count(rules[i]->dst) > UN_MATCH_MAX_NODES)
            return un_ctx_error(ctx, UN_ERR_LIMIT, "rule %lld: more than %d pattern nodes",
                                (long long)(ids ? ids[i] : i + 1), UN_MATCH_MAX_NODES);
    double t0 = now_s();
    un_rule **copy = un_xmalloc((size_t)(n + 1) * sizeof *copy);
    for (int64_t i = 0; i < n; i++)
        copy[i] = un_rule_clone(rules[i]);
    un_ruleset *set = set_new(spec);
    set->stats.verified = n;
    set_fill(set, copy, ids, n, &p);
    free(copy);
    set->stats.load_s = now_s() - t0;
    *out = set;
    return UN_OK;
}

void un_ruleset_free(un_ruleset *set) {
    if (!set)
        return;
    for (int64_t i = 0; i < set->n; i++)
        un_rule_free(set->rules[i]);
    for (int o = 0; o < UN_OP_COUNT; o++)
        free(set->by_root[o]);
    free(set->rules);
    free(set->ids);
    free(set->reversed);
    free(set->pats);
    free(set);
}

int64_t un_ruleset_count(const un_ruleset *set) { return set->n; }
const un_spec *un_ruleset_spec(const un_ruleset *set) { return set->spec; }

const un_rule *un_ruleset_rule(const un_ruleset *set, int64_t i) {
    UN_ASSERT(i >= 0 && i < set->n);
    return set->rules[i];
}

int32_t un_ruleset_rule_id(const un_ruleset *set, int64_t i) {
    UN_ASSERT(i >= 0 && i < set->n);
    return set->ids[i];
}

bool un_ruleset_rule_reversed(const un_ruleset *set, int64_t i) {
    UN_ASSERT(i >= 0 && i < set->n);
    return set->reversed[i];
}

const int32_t *un_ruleset_by_root(const un_ruleset *set, un_op op, int64_t *n) {
    UN_ASSERT((unsigned)op < UN_OP_COUNT);
    *n = set->n_by_root[op];
    return set->by_root[op];
}

un_ruleset_stats un_ruleset_stats_get(const un_ruleset *set) { return set->stats; }

const un__pat *un__ruleset_pat(const un_ruleset *set, int64_t i) {
    UN_ASSERT(i >= 0 && i < set->n);
    return &set->pats[i];
}
