/* rules.c - verified rules loaded for the search, each with its compiled matcher (rules_impl.h)
 * and indexed by the operator of its pattern's root. Loading goes through rulesdb (which checks
 * every row against its hash); compiling is a pass over the source pattern. */
#include "search/rules.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/pool.h"
#include "search/rules_impl.h"

struct un_ruleset {
    const un_spec *spec;
    int64_t n, cap;
    un_arena *arena; /* patterns' parameters, shapes and variable occurrences; blobs */
    uint8_t **blob;  /* the compact form of each rule (rules.c's encoding), in the arena */
    uint32_t *blob_len;
    un_rule *_Atomic *rules; /* decoded on first use (un_ruleset_rule), owned; NULL until then */
    int32_t *ids;            /* rules.db ids */
    bool *reversed;
    un__pat *pats; /* compiled matchers */
    int32_t *by_root[UN_OP_COUNT];
    int64_t n_by_root[UN_OP_COUNT];
    /* The label index (rules_impl.h): each entry's labels, sorted, need[need_at[i] ..
     * need_at[i + 1]); the entries under each key label (its rarest), key[k] sorted with its
     * entries by_key[key_at[k] .. key_at[k + 1]) in entry order. */
    uint64_t *need, *key;
    int64_t *need_at, *key_at, n_keys;
    int32_t *by_key;
    un_ruleset_stats stats;
};

un_ruleset_params un_ruleset_params_default(void) {
    return (un_ruleset_params){.reversed = false, .max_size = 0, .cache = true};
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

/* Compiles r's source pattern: the nodes as the matcher reads them, the search plan, the
 * variable occurrences and the mapped outputs, into p (arrays in arena). false when the pattern is
 * too big. */
static bool pat_compile(const un_rule *r, un__pat *p, un_arena *arena) {
    const un_graph *src = r->src;
    const un_spec *spec = un_graph_spec(src);
    int32_t n = un_graph_node_count(src);
    memset(p, 0, sizeof *p);
    if (n > UN_MATCH_MAX_NODES || un_graph_node_count(r->dst) > UN_MATCH_MAX_NODES)
        return false;
    p->n_nodes = (int8_t)n;
    p->any_shape = r->any_shape;
    p->n_vars = (int8_t)r->n_vars;
    for (int a = 0; a < r->n_vars; a++)
        p->var_value[a] = r->vars[a].value;
    for (int32_t v = 0; v < n; v++)
        p->input_of[v] = -1;
    p->n_inputs = (int8_t)un_rule_input_count(r);
    p->in_shape = un_arena_alloc(arena, sizeof(un_shape) * (size_t)(p->n_inputs + 1), 8);
    for (int i = 0; i < p->n_inputs; i++) {
        int32_t v = un_rule_input_src(r, i);
        p->input_of[v] = (int8_t)i;
        p->input_node[i] = (int8_t)v;
        p->in_shape[i] = un_graph_node(src, v)->inf.out[0];
    }
    int n_par = 0;
    for (int32_t v = 0; v < n; v++) {
        const un_node *nd = un_graph_node(src, v);
        un__pnode *pn = &p->nodes[v];
        pn->op = (uint8_t)nd->op;
        pn->n_in = (uint8_t)nd->n_in;
        pn->n_out = (uint8_t)nd->inf.n_out;
        for (int k = 0; k < nd->n_in; k++) {
            pn->in_node[k] = (int8_t)nd->in[k].node;
            pn->in_out[k] = (int8_t)nd->in[k].out;
        }
        if (un_op_kind_of(nd->op) != UN_OPK_SOURCE) {
            pn->n_params = (uint8_t)un_spec_op(spec, nd->op)->n_params;
            pn->param_at = (uint16_t)n_par;
            n_par += pn->n_params;
        }
    }
    p->params = un_arena_alloc(arena, sizeof(un_param) * (size_t)(n_par + 1), 8);
    for (int32_t v = 0; v < n; v++)
        memcpy(&p->params[p->nodes[v].param_at], un_graph_node(src, v)->params,
               sizeof(un_param) * p->nodes[v].n_params);
    for (int i = 0; i < r->n_out; i++)
        p->is_mapped[r->src_out[i].node] |= (uint8_t)(1u << r->src_out[i].out);
    int n_b = 0;
    for (int a = 0; a < r->n_vars; a++)
        for (int b = 0; b < r->vars[a].n_binds; b++)
            n_b += r->vars[a].binds[b].side == UN_RULE_SRC;
    p->binds = un_arena_alloc(arena, sizeof(un__bind) * (size_t)(n_b + 1), 8);
    for (int a = 0; a < r->n_vars; a++) {
        for (int b = 0; b < r->vars[a].n_binds; b++) {
            const un_rule_bind *bd = &r->vars[a].binds[b];
            if (bd->side != UN_RULE_SRC)
                continue;
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

/* ---- the compact form of a rule: bytes, varints (zigzag for signed values) ---- */

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
} wbuf;

static void w_u(wbuf *b, uint64_t v) {
    if (b->n + 10 > b->cap) {
        b->cap = b->cap ? b->cap * 2 : 256;
        b->p = un_xrealloc(b->p, b->cap);
    }
    while (v >= 0x80) {
        b->p[b->n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b->p[b->n++] = (uint8_t)v;
}
static void w_i(wbuf *b, int64_t v) { w_u(b, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)); }
static void w_s(wbuf *b, const char *s) {
    size_t n = s ? strlen(s) : 0;
    w_u(b, n);
    for (size_t i = 0; i < n; i++)
        w_u(b, (uint8_t)s[i]);
}

typedef struct rbuf {
    const uint8_t *p, *end;
    bool bad;
} rbuf;

static uint64_t r_u(rbuf *b) {
    uint64_t v = 0;
    for (int sh = 0; sh < 64; sh += 7) {
        if (b->p >= b->end) {
            b->bad = true;
            return 0;
        }
        uint8_t c = *b->p++;
        v |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80))
            return v;
    }
    b->bad = true;
    return 0;
}
static int64_t r_i(rbuf *b) {
    uint64_t u = r_u(b);
    return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}
static void r_s(rbuf *b, char *s, size_t cap) {
    uint64_t n = r_u(b);
    size_t k = 0;
    for (uint64_t i = 0; i < n; i++) {
        char c = (char)r_u(b);
        if (k + 1 < cap)
            s[k++] = c;
    }
    s[k] = '\0';
    b->bad |= n >= cap;
}

enum { BLOB_VERSION = 1 };

static void encode_graph(wbuf *b, const un_graph *g) {
    const un_spec *spec = un_graph_spec(g);
    int32_t n = un_graph_node_count(g);
    w_u(b, (uint64_t)n);
    for (int32_t v = 0; v < n; v++) {
        const un_node *nd = un_graph_node(g, v);
        w_u(b, (uint64_t)nd->op);
        w_s(b, nd->name);
        w_u(b, (uint64_t)nd->n_in);
        for (int k = 0; k < nd->n_in; k++) {
            w_u(b, (uint64_t)nd->in[k].node);
            w_u(b, (uint64_t)nd->in[k].out);
        }
        int np = un_spec_op(spec, nd->op)->n_params;
        for (int i = 0; i < np; i++) {
            const un_param *pr = &nd->params[i];
            w_i(b, pr->len);
            for (int k = 0; k < (pr->len < 0 ? 1 : pr->len); k++)
                w_i(b, pr->v[k]);
        }
    }
}

/* The compact form of r (owned, free()). */
static uint8_t *rule_encode(const un_rule *r, uint32_t *len) {
    wbuf b = {0};
    w_u(&b, BLOB_VERSION);
    w_s(&b, r->name);
    w_u(&b, r->any_shape);
    encode_graph(&b, r->src);
    encode_graph(&b, r->dst);
    w_u(&b, (uint64_t)r->n_out);
    for (int i = 0; i < r->n_out; i++) {
        w_u(&b, (uint64_t)r->src_out[i].node);
        w_u(&b, (uint64_t)r->src_out[i].out);
        w_u(&b, (uint64_t)r->dst_out[i].node);
        w_u(&b, (uint64_t)r->dst_out[i].out);
    }
    w_u(&b, (uint64_t)r->n_vars);
    for (int a = 0; a < r->n_vars; a++) {
        const un_rule_var *v = &r->vars[a];
        w_s(&b, v->name);
        w_i(&b, v->value);
        w_u(&b, (uint64_t)v->n_binds);
        for (int k = 0; k < v->n_binds; k++) {
            w_u(&b, (uint64_t)v->binds[k].side);
            w_u(&b, (uint64_t)v->binds[k].node);
            w_u(&b, (uint64_t)v->binds[k].param);
            w_i(&b, v->binds[k].item);
        }
    }
    w_u(&b, (uint64_t)r->n_conds);
    for (int c = 0; c < r->n_conds; c++) {
        const un_rule_cond *cd = &r->conds[c];
        w_u(&b, (uint64_t)cd->side);
        w_u(&b, (uint64_t)cd->node);
        w_u(&b, (uint64_t)cd->out);
        w_u(&b, (uint64_t)cd->dim);
        w_i(&b, cd->coef);
        for (int a = 0; a < UN_RULE_MAX_VARS; a++)
            w_i(&b, cd->exp[a]);
    }
    *len = (uint32_t)b.n;
    return b.p;
}

static un_status decode_graph(un_ctx *ctx, rbuf *b, const un_spec *spec, un_graph **out) {
    un_graph *g = un_graph_new(spec);
    un_status st = UN_OK;
    uint64_t n = r_u(b);
    for (uint64_t v = 0; v < n && st == UN_OK && !b->bad; v++) {
        uint64_t op = r_u(b);
        char name[64];
        r_s(b, name, sizeof name);
        uint64_t n_in = r_u(b);
        if (op >= UN_OP_COUNT || n_in > UN_MAX_INPUTS) {
            b->bad = true;
            break;
        }
        un_ref in[UN_MAX_INPUTS];
        for (uint64_t k = 0; k < n_in; k++) {
            in[k].node = (int32_t)r_u(b);
            in[k].out = (int32_t)r_u(b);
        }
        const un_op_spec *os = un_spec_op(spec, (un_op)op);
        un_param p[UN_MAX_PARAMS];
        un_spec_param_defaults(os, p);
        for (int i = 0; i < os->n_params && !b->bad; i++) {
            int64_t len = r_i(b);
            if (len < -1 || len > UN_MAX_DIMS) {
                b->bad = true;
                break;
            }
            memset(p[i].v, 0, sizeof p[i].v);
            p[i].len = (int32_t)len;
            for (int k = 0; k < (len < 0 ? 1 : len); k++)
                p[i].v[k] = r_i(b);
        }
        if (!b->bad)
            st = un_graph_add(ctx, g, (un_op)op, p, in, (int)n_in, name[0] ? name : NULL, NULL);
    }
    if (st == UN_OK && b->bad)
        st = un_ctx_error(ctx, UN_ERR_PARSE, "compact rule: truncated or damaged");
    if (st != UN_OK) {
        un_graph_free(g);
        g = NULL;
    }
    *out = g;
    return st;
}

/* The rule from its compact form. Owned: un_rule_free. */
static un_status rule_decode(un_ctx *ctx, const un_spec *spec, const uint8_t *p, size_t len,
                             un_rule **out) {
    *out = NULL;
    rbuf b = {p, p + len, false};
    un_graph *src = NULL, *dst = NULL;
    un_rule *r = NULL;
    char name[64];
    un_status st = UN_OK;
    if (r_u(&b) != BLOB_VERSION)
        return un_ctx_error(ctx, UN_ERR_PARSE, "compact rule: unknown version");
    r_s(&b, name, sizeof name);
    bool any = r_u(&b) != 0;
    st = decode_graph(ctx, &b, spec, &src);
    if (st == UN_OK)
        st = decode_graph(ctx, &b, spec, &dst);
    un_ref so[UN_RULE_MAX_OUTS], to[UN_RULE_MAX_OUTS];
    uint64_t n_out = st == UN_OK ? r_u(&b) : 0;
    if (n_out > UN_RULE_MAX_OUTS)
        b.bad = true;
    for (uint64_t i = 0; i < n_out && !b.bad; i++) {
        so[i].node = (int32_t)r_u(&b);
        so[i].out = (int32_t)r_u(&b);
        to[i].node = (int32_t)r_u(&b);
        to[i].out = (int32_t)r_u(&b);
    }
    if (st == UN_OK && !b.bad)
        st = un_rule_make(ctx, src, dst, so, to, (int)n_out, &r);
    if (st == UN_OK && !b.bad) {
        memcpy(r->name, name, sizeof r->name);
        r->any_shape = any;
        uint64_t nv = r_u(&b);
        b.bad |= nv > UN_RULE_MAX_VARS;
        for (uint64_t a = 0; a < nv && !b.bad; a++) {
            un_rule_var *v = &r->vars[a];
            r_s(&b, v->name, sizeof v->name);
            v->value = r_i(&b);
            uint64_t nb = r_u(&b);
            b.bad |= nb > UN_RULE_MAX_BINDS;
            for (uint64_t k = 0; k < nb && !b.bad; k++) {
                v->binds[k].side = (int8_t)r_u(&b);
                v->binds[k].node = (int32_t)r_u(&b);
                v->binds[k].param = (int8_t)r_u(&b);
                v->binds[k].item = (int8_t)r_i(&b);
            }
            v->n_binds = (int)nb;
        }
        r->n_vars = (int)nv;
        uint64_t nc = r_u(&b);
        b.bad |= nc > UN_RULE_MAX_CONDS;
        for (uint64_t c = 0; c < nc && !b.bad; c++) {
            un_rule_cond *cd = &r->conds[c];
            cd->side = (int8_t)r_u(&b);
            cd->node = (int32_t)r_u(&b);
            cd->out = (int8_t)r_u(&b);
            cd->dim = (int8_t)r_u(&b);
            cd->coef = r_i(&b);
            for (int a = 0; a < UN_RULE_MAX_VARS; a++)
                cd->exp[a] = (int8_t)r_i(&b);
        }
        r->n_conds = (int)nc;
    }
    if (st == UN_OK && b.bad)
        st = un_ctx_error(ctx, UN_ERR_PARSE, "compact rule: truncated or damaged");
    un_graph_free(src);
    un_graph_free(dst);
    if (st != UN_OK) {
        un_rule_free(r);
        return st;
    }
    *out = r;
    return UN_OK;
}

/* Room for one more entry. */
static void set_grow(un_ruleset *set) {
    if (set->n == set->cap) {
        set->cap = set->cap ? set->cap * 2 : 64;
        set->rules = un_xrealloc(set->rules, (size_t)set->cap * sizeof *set->rules);
        set->blob = un_xrealloc(set->blob, (size_t)set->cap * sizeof *set->blob);
        set->blob_len = un_xrealloc(set->blob_len, (size_t)set->cap * sizeof *set->blob_len);
        set->ids = un_xrealloc(set->ids, (size_t)set->cap * sizeof *set->ids);
        set->reversed = un_xrealloc(set->reversed, (size_t)set->cap * sizeof *set->reversed);
        set->pats = un_xrealloc(set->pats, (size_t)set->cap * sizeof *set->pats);
    }
}

/* What became of one rule (the compiled cache keeps it). */
enum {
    RF_REV_TRIED = 1,  /* its reverse was tried */
    RF_NOT_REV = 2,    /* un_rule_reverse refused it */
    RF_FWD_BIG = 4,    /* the rule is over UN_MATCH_MAX_NODES */
    RF_REV_BIG = 8,    /* its reverse is */
    RF_OVER_SIZE = 16, /* over params.max_size: skipped */
};

uint64_t un__label_op(int op) { return un_mix64(0x6c6f70ull + (uint64_t)op); }

uint64_t un__label_params(int op, const un_param *params, int n) {
    uint64_t h = un_mix64(0x6c706172ull + (uint64_t)op);
    for (int q = 0; q < n; q++) {
        int len = params[q].len < 0 ? 1 : params[q].len > UN_MAX_DIMS ? UN_MAX_DIMS : params[q].len;
        h = un_hash_bytes(params[q].v, sizeof(int64_t) * (size_t)len,
                          un_mix64(h + (uint64_t)(int64_t)params[q].len));
    }
    return h;
}

static int cmp_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

/* A label and an entry, for sorting. */
typedef struct lab_entry {
    uint64_t label;
    int64_t entry;
} lab_entry;

static int cmp_lab_entry(const void *x, const void *y) {
    const lab_entry *a = x, *b = y;
    if (a->label != b->label)
        return a->label < b->label ? -1 : 1;
    return (a->entry > b->entry) - (a->entry < b->entry);
}

/* Builds the label index: every entry's labels (its operator nodes' un__label_op, and
 * un__label_params for a node none of whose parameters carries a variable), then each entry under
 * its key: the one of its labels that the fewest entries have. */
static void set_index_labels(un_ruleset *set) {
    set->need_at = un_xmalloc(sizeof(int64_t) * ((size_t)set->n + 1));
    int64_t total = 0;
    for (int64_t i = 0; i < set->n; i++)
        total += 2 * set->pats[i].n_steps;
    set->need = un_xmalloc(sizeof(uint64_t) * ((size_t)total + 1));
    lab_entry *le = un_xmalloc(sizeof(lab_entry) * ((size_t)total + 1));
    int64_t n = 0, n_le = 0;
    for (int64_t i = 0; i < set->n; i++) {
        const un__pat *p = &set->pats[i];
        set->need_at[i] = n;
        for (int k = 0; k < p->n_steps; k++) {
            int u = p->steps[k].node;
            const un__pnode *pn = &p->nodes[u];
            set->need[n++] = un__label_op(pn->op);
            bool fixed = true;
            for (int q = 0; q < pn->n_params; q++)
                fixed = fixed && !p->bound[u][q];
            if (fixed)
                set->need[n++] = un__label_params(pn->op, &p->params[pn->param_at], pn->n_params);
        }
        qsort(set->need + set->need_at[i], (size_t)(n - set->need_at[i]), sizeof(uint64_t),
              cmp_u64);
        for (int64_t q = set->need_at[i]; q < n; q++)
            if (q == set->need_at[i] || set->need[q] != set->need[q - 1])
                le[n_le++] = (lab_entry){set->need[q], i};
    }
    set->need_at[set->n] = n;
    /* how many entries have each label */
    qsort(le, (size_t)n_le, sizeof *le, cmp_lab_entry);
    int64_t *key_of = un_xmalloc(sizeof(int64_t) * ((size_t)set->n + 1)); /* entry -> le index */
    int64_t *best = un_xmalloc(sizeof(int64_t) * ((size_t)set->n + 1));   /* its label's count */
    for (int64_t i = 0; i < set->n; i++)
        best[i] = INT64_MAX;
    for (int64_t a = 0, b; a < n_le; a = b) {
        for (b = a; b < n_le && le[b].label == le[a].label; b++)
            ;
        for (int64_t q = a; q < b; q++)
            if (b - a < best[le[q].entry]) {
                best[le[q].entry] = b - a;
                key_of[le[q].entry] = a;
            }
    }
    /* the entries by key label: (key label, entry) pairs sorted */
    lab_entry *ke = un_xmalloc(sizeof(lab_entry) * ((size_t)set->n + 1));
    for (int64_t i = 0; i < set->n; i++)
        ke[i] = (lab_entry){le[key_of[i]].label, i};
    qsort(ke, (size_t)set->n, sizeof *ke, cmp_lab_entry);
    set->key = un_xmalloc(sizeof(uint64_t) * ((size_t)set->n + 1));
    set->key_at = un_xmalloc(sizeof(int64_t) * ((size_t)set->n + 2));
    set->by_key = un_xmalloc(sizeof(int32_t) * ((size_t)set->n + 1));
    set->n_keys = 0;
    for (int64_t i = 0; i < set->n; i++) {
        if (i == 0 || ke[i].label != ke[i - 1].label) {
            set->key[set->n_keys] = ke[i].label;
            set->key_at[set->n_keys++] = i;
        }
        set->by_key[i] = (int32_t)ke[i].entry;
    }
    set->key_at[set->n_keys] = set->n;
    free(ke);
    free(best);
    free(key_of);
    free(le);
}

/* Builds the index by root operator and the label index once every entry is in. */
static void set_index(un_ruleset *set) {
    for (int64_t i = 0; i < set->n; i++) {
        const un__pat *pt = &set->pats[i];
        set->n_by_root[pt->nodes[pt->steps[0].node].op]++;
    }
    for (int o = 0; o < UN_OP_COUNT; o++) {
        set->by_root[o] = un_xmalloc((size_t)(set->n_by_root[o] + 1) * sizeof(int32_t));
        set->n_by_root[o] = 0;
    }
    for (int64_t i = 0; i < set->n; i++) {
        un_op o = (un_op)set->pats[i].nodes[set->pats[i].steps[0].node].op;
        set->by_root[o][set->n_by_root[o]++] = (int32_t)i;
    }
    set_index_labels(set);
    set->stats.loaded = set->n;
    set->stats.bytes =
        sizeof *set + un_arena_used(set->arena) +
        (size_t)set->cap * (sizeof(un_rule *) + sizeof(uint8_t *) + sizeof(uint32_t) +
                            sizeof(int32_t) + sizeof(bool) + sizeof(un__pat)) +
        (size_t)set->n * sizeof(int32_t) + (size_t)set->need_at[set->n] * sizeof(uint64_t) +
        (size_t)set->n * (2 * sizeof(int64_t) + sizeof(uint64_t) + sizeof(int32_t));
}

static un_ruleset *set_new(const un_spec *spec) {
    un_ruleset *set = un_xcalloc(1, sizeof *set);
    set->spec = spec;
    set->arena = un_arena_new(1 << 20);
    return set;
}

/* ---- the compiled cache: DB.compiled beside the database ----
 * Loading parses each rule's JSON body, checks it against its hash and compiles it: most of the
 * time of a load. The compiled entries (compact form, matcher) are written to a cache file keyed by
 * the spec set and, per rule, by id and canonical hash, so the next load of the same rules copies
 * them instead. Every record carries a checksum; a cache that does not fit (other spec set,
 * other build's struct layout, damage) is ignored and rewritten. */

enum { CACHE_MAGIC = 0x31435255, CACHE_VERSION = 1 };

typedef struct cache_hdr {
    uint32_t magic, version;
    uint64_t spec;
    uint32_t pat_size, param_size, shape_size, bind_size;
    uint64_t n_rules;
} cache_hdr;

/* One rule's record: its length (uint32, of what follows), this header, then n_entries entries
 * (uint8 reversed, uint32 blob length, the blob, the un__pat with its pointers zeroed, uint16
 * n_params, the params, the input shapes, the variable occurrences), then a checksum (uint64) over
 * all of it. */
typedef struct cache_rec {
    int32_t id;
    uint8_t flags, n_entries;
    uint16_t size; /* n_src + n_dst */
    uint64_t hash;
} cache_rec;

typedef struct rinfo {
    int32_t id;
    uint8_t flags;
    uint16_t size;
    uint64_t hash;
    int64_t first; /* its entries: first .. first + n - 1 */
    int32_t n;
} rinfo;

/* One row of a batch being loaded, and what came of it. */
typedef struct lrow {
    int32_t id;
    uint64_t hash, sum;
    size_t body_at, len; /* its body in the batch's text (not cached) */
    bool cached;         /* its entries came from the cache */
    bool over;           /* cached, and over params.max_size: skipped */
    wbuf out;            /* its entries in the cache's form (capacity kept across batches) */
    int flags, n_entries;
    uint16_t size;
    un_status st;
    char *err; /* owned: the parse error */
} lrow;

/* LOAD_BATCH rows read from the database, in id order. */
typedef struct lbatch {
    lrow *rows;
    int64_t n;
    wbuf text;            /* the rows' bodies, each NUL-terminated */
    _Atomic int64_t next; /* the next row a thread takes to compile */
} lbatch;

typedef struct load_state {
    un_ruleset *set;
    const un_ruleset_params *p;
    un_ctx *ctx;
    un_rulesdb *db;
    un_rulesdb_walk *walk;
    un_status read_st; /* how the walk ended (after the rows read) */
    lbatch batch[2];   /* the one being compiled, the one being read */
    lbatch *reading;
    un_pool *pool;               /* NULL: the caller alone */
    int n_parts;                 /* threads (un_pool_size) */
    un_ctx **wctx;               /* per thread: a child context */
    un_arena **scratch;          /* per thread: the patterns' scratch arena */
    double *t_parse, *t_compile; /* per thread: CPU seconds */
    double t_read, t_add;
    FILE *cache;         /* the cache file, read record by record in id order; NULL: none */
    uint64_t cache_left; /* records not read yet */
    uint8_t *buf;        /* owned: room for one record */
    uint8_t *rec;        /* the current record (checked; in buf), or NULL */
    size_t rec_len, rec_cap;
    int32_t rec_id;
    rinfo *info;
    int64_t n_info, cap_info;
    int64_t hits, misses;
} load_state;

static void info_push(load_state *ls, rinfo ri) {
    if (ls->n_info == ls->cap_info) {
        ls->cap_info = ls->cap_info ? ls->cap_info * 2 : 1024;
        ls->info = un_xrealloc(ls->info, (size_t)ls->cap_info * sizeof *ls->info);
    }
    ls->info[ls->n_info++] = ri;
}

/* Reads one entry at *q (bounds-checked against end), into the set when add. */
static bool entry_read(un_ruleset *set, const uint8_t **q, const uint8_t *end, int32_t id,
                       bool add) {
    const uint8_t *c = *q;
    uint8_t rev;
    uint32_t len;
    un__pat pat;
    uint16_t n_par;
    if ((size_t)(end - c) < 1 + 4)
        return false;
    memcpy(&rev, c, 1);
    memcpy(&len, c + 1, 4);
    c += 5;
    if ((size_t)(end - c) < (size_t)len + sizeof pat + 2)
        return false;
    const uint8_t *blob = c;
    c += len;
    memcpy(&pat, c, sizeof pat);
    c += sizeof pat;
    memcpy(&n_par, c, 2);
    c += 2;
    if (pat.n_inputs < 0 || pat.n_inputs > UN_MATCH_MAX_NODES || pat.n_binds < 0 ||
        pat.n_nodes < 0 || pat.n_nodes > UN_MATCH_MAX_NODES || pat.n_steps < 1 ||
        pat.n_steps > UN_MATCH_MAX_NODES)
        return false;
    size_t rest = (size_t)n_par * sizeof(un_param) + (size_t)pat.n_inputs * sizeof(un_shape) +
                  (size_t)pat.n_binds * sizeof(un__bind);
    if ((size_t)(end - c) < rest)
        return false;
    if (add) {
        pat.params = un_arena_alloc(set->arena, (size_t)n_par * sizeof(un_param) + 1, 8);
        memcpy(pat.params, c, (size_t)n_par * sizeof(un_param));
        c += (size_t)n_par * sizeof(un_param);
        pat.in_shape = un_arena_alloc(set->arena, (size_t)pat.n_inputs * sizeof(un_shape) + 1, 8);
        memcpy(pat.in_shape, c, (size_t)pat.n_inputs * sizeof(un_shape));
        c += (size_t)pat.n_inputs * sizeof(un_shape);
        pat.binds = un_arena_alloc(set->arena, (size_t)pat.n_binds * sizeof(un__bind) + 1, 8);
        memcpy(pat.binds, c, (size_t)pat.n_binds * sizeof(un__bind));
        c += (size_t)pat.n_binds * sizeof(un__bind);
        set_grow(set);
        set->blob[set->n] = un_arena_alloc(set->arena, len + 1, 1);
        memcpy(set->blob[set->n], blob, len);
        set->blob_len[set->n] = len;
        set->rules[set->n] = NULL;
        set->ids[set->n] = id;
        set->reversed[set->n] = rev != 0;
        set->pats[set->n] = pat;
        set->n++;
    } else {
        c += rest;
    }
    *q = c;
    return true;
}

static void wb_bytes(wbuf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        while (b->n + n > b->cap)
            b->cap = b->cap ? b->cap * 2 : 512;
        b->p = un_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

/* One entry in the cache's form (entry_read reads it back): reversed, the blob's length and
 * bytes, the pattern without its pointers, its parameters' count, then its parameters, input
 * shapes and variable occurrences. */
static void entry_write(wbuf *b, bool reversed, const uint8_t *blob, uint32_t len,
                        const un__pat *pat) {
    const un__pnode *last = NULL;
    for (int v = 0; v < pat->n_nodes; v++)
        if (pat->nodes[v].n_params && (!last || pat->nodes[v].param_at >= last->param_at))
            last = &pat->nodes[v];
    uint16_t n_par = last ? (uint16_t)(last->param_at + last->n_params) : 0;
    uint8_t rev = reversed;
    wb_bytes(b, &rev, 1);
    wb_bytes(b, &len, 4);
    wb_bytes(b, blob, len);
    un__pat z = *pat;
    z.params = NULL;
    z.in_shape = NULL;
    z.binds = NULL;
    wb_bytes(b, &z, sizeof z);
    wb_bytes(b, &n_par, 2);
    wb_bytes(b, pat->params, (size_t)n_par * sizeof(un_param));
    wb_bytes(b, pat->in_shape, (size_t)pat->n_inputs * sizeof(un_shape));
    wb_bytes(b, pat->binds, (size_t)pat->n_binds * sizeof(un__bind));
}

/* Compiles rule r (taken over and freed) and, when asked, its reverse into entries in the
 * cache's form appended to b (the patterns' arrays go through scratch, which is reset);
 * *n_entries counts them. Touches no set, so it runs on worker threads. Returns RF_* flags. */
static int rule_compile(un_rule *r, const un_ruleset_params *p, un_arena *scratch, wbuf *b,
                        int *n_entries) {
    *n_entries = 0;
    if (p->max_size > 0 &&
        un_rule_size(r, UN_RULE_SRC) + un_rule_size(r, UN_RULE_DST) > p->max_size) {
        un_rule_free(r);
        return RF_OVER_SIZE;
    }
    int fl = 0;
    un_rule *side[2] = {r, NULL};
    if (p->reversed) {
        fl |= RF_REV_TRIED;
        if (un_rule_reverse(NULL, r, &side[1]) != UN_OK) {
            fl |= RF_NOT_REV;
            side[1] = NULL;
        }
    }
    for (int k = 0; k < 2; k++) {
        if (!side[k])
            continue;
        un__pat pat;
        un_arena_reset(scratch);
        if (pat_compile(side[k], &pat, scratch)) {
            uint32_t len;
            uint8_t *blob = rule_encode(side[k], &len);
            entry_write(b, k == 1, blob, len, &pat);
            free(blob);
            (*n_entries)++;
        } else {
            fl |= k ? RF_REV_BIG : RF_FWD_BIG;
        }
        un_rule_free(side[k]);
    }
    return fl;
}

/* The load statistics a rule's RF_* flags stand for. */
static void stats_add(un_ruleset *set, int flags, bool reversed) {
    if (flags & RF_OVER_SIZE) {
        set->stats.too_big++;
        return;
    }
    set->stats.too_big += ((flags & RF_FWD_BIG) != 0) + (reversed && (flags & RF_REV_BIG) != 0);
    set->stats.not_reversed += reversed && (flags & RF_NOT_REV) != 0;
}

/* Reads the next record of the cache into ls->rec and checks it (checksum, entries); on any
 * failure the rest of the cache is ignored. */
static bool cache_next(load_state *ls) {
    ls->rec = NULL;
    if (!ls->cache || ls->cache_left == 0)
        return false;
    uint32_t len;
    bool ok = fread(&len, sizeof len, 1, ls->cache) == 1 && len >= sizeof(cache_rec) + 8 &&
              len < (1u << 24);
    if (ok && len > ls->rec_cap) {
        ls->rec_cap = len;
        ls->buf = un_xrealloc(ls->buf, len);
    }
    ok = ok && fread(ls->buf, 1, len, ls->cache) == len;
    if (ok) {
        uint64_t sum;
        memcpy(&sum, ls->buf + len - 8, 8);
        ok = sum == un_hash_bytes(ls->buf, len - 8, 0x75726331u);
    }
    cache_rec rec;
    if (ok) {
        memcpy(&rec, ls->buf, sizeof rec);
        const uint8_t *q = ls->buf + sizeof rec, *end = ls->buf + len - 8;
        for (int e = 0; e < rec.n_entries && ok; e++)
            ok = entry_read(ls->set, &q, end, rec.id, false);
        ok = ok && q == end && (ls->rec_id < 0 || rec.id > ls->rec_id);
    }
    if (!ok) {
        fclose(ls->cache);
        ls->cache = NULL;
        return false;
    }
    ls->cache_left--;
    ls->rec = ls->buf;
    ls->rec_len = len - 8;
    ls->rec_id = rec.id;
    return true;
}

/* Room for one more row in the batch being read; returns it, emptied. */
static lrow *row_next(lbatch *b) {
    lrow *row = &b->rows[b->n++];
    wbuf out = row->out;
    out.n = 0;
    *row = (lrow){.out = out, .st = UN_OK};
    return row;
}

/* un_rulesdb_skip_fn: takes the rule from the cache when it holds it (same id and hash, and its
 * reverse when reverses are wanted): its entries (those wanted) go into the batch being read as
 * they are. Rules come in id order, and so does the cache. */
static bool cache_skip(void *user, int32_t id, uint64_t hash) {
    load_state *ls = user;
    while ((!ls->rec || ls->rec_id < id) && cache_next(ls))
        ;
    if (!ls->rec || ls->rec_id != id)
        return false;
    const uint8_t *q = ls->rec;
    cache_rec rec;
    memcpy(&rec, q, sizeof rec);
    if (rec.hash != hash || (ls->p->reversed && !(rec.flags & RF_REV_TRIED)) ||
        (rec.flags & RF_OVER_SIZE))
        return false;
    lrow *row = row_next(ls->reading);
    row->id = id;
    row->hash = hash;
    row->cached = true;
    row->flags = rec.flags;
    row->size = rec.size;
    row->over = ls->p->max_size > 0 && rec.size > ls->p->max_size;
    q += sizeof rec;
    const uint8_t *end = ls->rec + ls->rec_len;
    for (int e = 0; e < rec.n_entries; e++) {
        const uint8_t *at = q;
        bool rev = q < end && q[0];
        bool ok = entry_read(ls->set, &q, end, id, false);
        UN_ASSERT(ok); /* cache_next checked it */
        if (!row->over && (!rev || ls->p->reversed)) {
            wb_bytes(&row->out, at, (size_t)(q - at));
            row->n_entries++;
        }
    }
    ls->hits++;
    return true;
}

/* Adds the n entries of rule id that rule_compile wrote to b. */
static void entries_add(un_ruleset *set, int32_t id, const wbuf *b, int n) {
    const uint8_t *q = b->p, *end = b->p + b->n;
    for (int e = 0; e < n; e++) {
        bool ok = entry_read(set, &q, end, id, true);
        UN_ASSERT(ok); /* written just now */
    }
}

/* Compiles rule r (taken over) and, when asked, its reverse into the set; returns RF_* flags. */
static int set_add_rule(un_ruleset *set, un_rule *r, int32_t id, const un_ruleset_params *p,
                        un_arena *scratch) {
    wbuf b = {0};
    int n;
    int fl = rule_compile(r, p, scratch, &b, &n);
    entries_add(set, id, &b, n);
    stats_add(set, fl, p->reversed);
    free(b.p);
    return fl;
}

/* ---- loading in batches: the caller reads, every thread compiles ----
 * The caller walks the database (un_rulesdb_walk_next) LOAD_BATCH rows at a time: a row the cache
 * holds becomes its cached entries (cache_skip), any other row its body. While the caller reads
 * batch i + 1, the other threads parse (un_rulesdb_body_parse) and compile (rule_compile) batch
 * i's bodies, taking rows from a shared counter, each with its own context and scratch arena; the
 * caller joins them once it has read. Then batch i is added to the set in id order, so the set and
 * the cache are what one thread makes, and the first bad row in id order is the error reported. */

enum { LOAD_BATCH = 64 };

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* un_rulesdb_raw_fn: a row the cache does not hold, its body kept for compiling. */
static un_status take_raw(void *user, int32_t id, uint64_t hash, const char *body, size_t len,
                          uint64_t sum) {
    load_state *ls = user;
    lbatch *b = ls->reading;
    lrow *row = row_next(b);
    row->id = id;
    row->hash = hash;
    row->sum = sum;
    row->body_at = b->text.n;
    row->len = len;
    wb_bytes(&b->text, body, len);
    wb_bytes(&b->text, "", 1);
    return UN_OK;
}

/* Reads the next batch into ls->reading (on the caller). */
static void batch_read(load_state *ls) {
    double t0 = cpu_s();
    lbatch *b = ls->reading;
    b->n = 0;
    b->text.n = 0;
    atomic_store(&b->next, 0);
    if (ls->read_st == UN_OK && !un_rulesdb_walk_done(ls->walk))
        ls->read_st = un_rulesdb_walk_next(ls->ctx, ls->walk, LOAD_BATCH,
                                           ls->cache ? cache_skip : NULL, take_raw, ls);
    ls->t_read += cpu_s() - t0;
}

/* Parses and compiles the batch's rows that thread `part` takes. Its CPU time is split between
 * the two phases by their wall time (a CPU clock per row would cost a system call each). */
static void batch_compile(load_state *ls, lbatch *b, int part) {
    un_ctx *c = ls->wctx[part];
    double cpu0 = cpu_s(), wp = 0, wc = 0;
    for (int64_t i; (i = atomic_fetch_add(&b->next, 1)) < b->n;) {
        lrow *row = &b->rows[i];
        if (row->cached)
            continue;
        double t0 = un_now_s();
        un_rule *r = NULL;
        row->st =
            un_rulesdb_body_parse(c, ls->db, row->id, row->hash,
                                  (const char *)b->text.p + row->body_at, row->len, row->sum, &r);
        double t1 = un_now_s();
        wp += t1 - t0;
        if (row->st != UN_OK) {
            row->err = un_xstrdup(un_ctx_errmsg(c));
            un_ctx_clear(c);
            continue;
        }
        row->size = (uint16_t)(un_rule_size(r, UN_RULE_SRC) + un_rule_size(r, UN_RULE_DST));
        row->flags = rule_compile(r, ls->p, ls->scratch[part], &row->out, &row->n_entries);
        wc += un_now_s() - t1;
    }
    double cpu = cpu_s() - cpu0, share = wp + wc > 0 ? wp / (wp + wc) : 1;
    ls->t_parse[part] += cpu * share;
    ls->t_compile[part] += cpu * (1 - share);
}

/* un_pool_for body, one call per thread: the caller (part 0) reads the next batch first. */
static void load_step(void *arg, int64_t part, int64_t end) {
    (void)end;
    load_state *ls = arg;
    lbatch *b = ls->reading == &ls->batch[0] ? &ls->batch[1] : &ls->batch[0];
    if (part == 0)
        batch_read(ls);
    batch_compile(ls, b, (int)part);
}

/* Adds the batch's rows to the set in order; the first row that failed is the error. */
static un_status batch_add(load_state *ls, lbatch *b) {
    double t0 = cpu_s();
    un_ruleset *set = ls->set;
    un_status st = UN_OK;
    for (int64_t i = 0; i < b->n && st == UN_OK; i++) {
        lrow *row = &b->rows[i];
        if (row->st != UN_OK) {
            st = un_ctx_error(ls->ctx, row->st, "%s", row->err);
            break;
        }
        rinfo ri = {row->id, (uint8_t)row->flags, row->size, row->hash, set->n, 0};
        entries_add(set, row->id, &row->out, row->n_entries);
        if (row->over)
            set->stats.too_big++;
        else
            stats_add(set, row->flags, ls->p->reversed);
        if (row->cached && !ls->p->reversed) /* the record's reverse is not wanted: not kept */
            ri.flags &= (uint8_t) ~(RF_REV_TRIED | RF_NOT_REV | RF_REV_BIG);
        ri.n = (int32_t)(set->n - ri.first);
        info_push(ls, ri);
        ls->misses += !row->cached;
    }
    for (int64_t i = 0; i < b->n; i++) {
        free(b->rows[i].err);
        b->rows[i].err = NULL;
    }
    ls->t_add += cpu_s() - t0;
    return st;
}

/* The walk: read, compile and add batch after batch until the end or the first error. */
static un_status load_rows(load_state *ls) {
    int threads = ls->p->threads > 0 ? ls->p->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    ls->pool = threads > 1 ? un_pool_new(threads) : NULL;
    ls->n_parts = un_pool_size(ls->pool);
    ls->wctx = un_xcalloc((size_t)ls->n_parts, sizeof *ls->wctx);
    ls->scratch = un_xcalloc((size_t)ls->n_parts, sizeof *ls->scratch);
    ls->t_parse = un_xcalloc((size_t)ls->n_parts, sizeof *ls->t_parse);
    ls->t_compile = un_xcalloc((size_t)ls->n_parts, sizeof *ls->t_compile);
    for (int k = 0; k < ls->n_parts; k++) {
        ls->wctx[k] = un_ctx_new_child(ls->ctx);
        ls->scratch[k] = un_arena_new(1 << 14);
    }
    for (int k = 0; k < 2; k++)
        ls->batch[k].rows = un_xcalloc(LOAD_BATCH, sizeof(lrow));
    ls->walk = un_rulesdb_walk_new(ls->db);
    ls->reading = &ls->batch[0];
    batch_read(ls);
    un_status st = UN_OK;
    while (st == UN_OK && ls->reading->n > 0) {
        lbatch *b = ls->reading;
        ls->reading = b == &ls->batch[0] ? &ls->batch[1] : &ls->batch[0];
        un_pool_for(ls->pool, ls->n_parts, load_step, ls);
        st = batch_add(ls, b);
    }
    if (st == UN_OK)
        st = ls->read_st;
    for (int k = 0; k < ls->n_parts; k++) {
        ls->set->stats.parse_s += ls->t_parse[k];
        ls->set->stats.compile_s += ls->t_compile[k];
        un_ctx_free(ls->wctx[k]);
        un_arena_free(ls->scratch[k]);
    }
    ls->set->stats.read_s = ls->t_read;
    ls->set->stats.add_s = ls->t_add;
    ls->set->stats.threads = ls->n_parts;
    ls->set->stats.stale = un_rulesdb_walk_stale(ls->walk);
    un_rulesdb_walk_free(ls->walk);
    for (int k = 0; k < 2; k++) {
        for (int64_t i = 0; i < LOAD_BATCH; i++)
            free(ls->batch[k].rows[i].out.p);
        free(ls->batch[k].rows);
        free(ls->batch[k].text.p);
    }
    free(ls->wctx);
    free(ls->scratch);
    free(ls->t_parse);
    free(ls->t_compile);
    un_pool_free(ls->pool);
    return st;
}

/* Opens the cache at path when it fits this spec set and build (records are checked as they
 * are read). */
static void cache_open(load_state *ls, const char *path, uint64_t spec) {
    ls->rec_id = -1;
    FILE *f = fopen(path, "rb");
    cache_hdr h;
    if (!f)
        return;
    if (fread(&h, sizeof h, 1, f) == 1 && h.magic == CACHE_MAGIC && h.version == CACHE_VERSION &&
        h.spec == spec && h.pat_size == sizeof(un__pat) && h.param_size == sizeof(un_param) &&
        h.shape_size == sizeof(un_shape) && h.bind_size == sizeof(un__bind)) {
        ls->cache = f;
        ls->cache_left = h.n_rules;
        return;
    }
    fclose(f);
}

/* Writes the cache for the set's rules (temporary file, then rename); false when it cannot. */
static bool cache_write(const load_state *ls, const char *path, uint64_t spec) {
    const un_ruleset *set = ls->set;
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return false;
    cache_hdr h = {CACHE_MAGIC,      CACHE_VERSION,       spec,
                   sizeof(un__pat),  sizeof(un_param),    sizeof(un_shape),
                   sizeof(un__bind), (uint64_t)ls->n_info};
    bool ok = fwrite(&h, sizeof h, 1, f) == 1;
    wbuf b = {0}; /* one record at a time (the whole file is hundreds of MB at 230k rules) */
    for (int64_t k = 0; k < ls->n_info && ok; k++) {
        const rinfo *ri = &ls->info[k];
        uint32_t rec_len = 0;
        b.n = 0;
        wb_bytes(&b, &rec_len, sizeof rec_len);
        cache_rec rec = {ri->id, ri->flags, (uint8_t)ri->n, ri->size, ri->hash};
        wb_bytes(&b, &rec, sizeof rec);
        for (int64_t i = ri->first; i < ri->first + ri->n; i++)
            entry_write(&b, set->reversed[i], set->blob[i], set->blob_len[i], &set->pats[i]);
        uint64_t sum = un_hash_bytes(b.p + sizeof rec_len, b.n - sizeof rec_len, 0x75726331u);
        wb_bytes(&b, &sum, sizeof sum);
        rec_len = (uint32_t)(b.n - sizeof rec_len);
        memcpy(b.p, &rec_len, sizeof rec_len);
        ok = fwrite(b.p, 1, b.n, f) == b.n;
    }
    free(b.p);
    ok &= fclose(f) == 0;
    ok = ok && rename(tmp, path) == 0;
    if (!ok)
        remove(tmp);
    return ok;
}

un_status un_ruleset_load(un_ctx *ctx, un_rulesdb *db, const un_ruleset_params *params,
                          un_ruleset **out, un_ruleset_stats *stats) {
    *out = NULL;
    if (stats)
        memset(stats, 0, sizeof *stats);
    un_ruleset_params p = params ? *params : un_ruleset_params_default();
    double t0 = un_now_s();
    un_ruleset *set = set_new(un_rulesdb_spec(db));
    load_state ls = {.set = set, .p = &p, .ctx = ctx, .db = db};
    char cpath[4200];
    snprintf(cpath, sizeof cpath, "%s.compiled", un_rulesdb_path(db));
    if (p.cache)
        cache_open(&ls, cpath, un_rulesdb_spec_hash(db));
    un_status st = load_rows(&ls);
    if (st == UN_OK) {
        set->stats.verified = ls.n_info;
        set->stats.cache_hits = ls.hits;
        set->stats.cache_misses = ls.misses;
        set_index(set);
        if (p.cache && ls.misses > 0 && p.max_size == 0) {
            double tw = cpu_s();
            set->stats.cache_written = cache_write(&ls, cpath, un_rulesdb_spec_hash(db));
            set->stats.write_s = cpu_s() - tw;
        }
    }
    if (ls.cache)
        fclose(ls.cache);
    free(ls.buf);
    free(ls.info);
    if (st != UN_OK) {
        un_ruleset_free(set);
        return st;
    }
    set->stats.load_s = un_now_s() - t0;
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
    double t0 = un_now_s();
    un_ruleset *set = set_new(spec);
    set->stats.verified = n;
    un_arena *scratch = un_arena_new(1 << 14);
    for (int64_t i = 0; i < n; i++)
        set_add_rule(set, un_rule_clone(rules[i]), ids ? ids[i] : (int32_t)(i + 1), &p, scratch);
    un_arena_free(scratch);
    set_index(set);
    set->stats.load_s = un_now_s() - t0;
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
    free(set->need);
    free(set->need_at);
    free(set->key);
    free(set->key_at);
    free(set->by_key);
    un_arena_free(set->arena);
    free(set->rules);
    free(set->blob);
    free(set->blob_len);
    free(set->ids);
    free(set->reversed);
    free(set->pats);
    free(set);
}

int64_t un_ruleset_count(const un_ruleset *set) { return set->n; }
const un_spec *un_ruleset_spec(const un_ruleset *set) { return set->spec; }

const un_rule *un_ruleset_rule(const un_ruleset *set, int64_t i) {
    UN_ASSERT(i >= 0 && i < set->n);
    un_rule *r = atomic_load_explicit(&set->rules[i], memory_order_acquire);
    if (r)
        return r;
    /* it was encoded from a rule that parsed and built under this spec: decoding cannot fail
     * unless memory was damaged */
    un_status st = rule_decode(NULL, set->spec, set->blob[i], set->blob_len[i], &r);
    UN_ASSERT(st == UN_OK);
    un_rule *none = NULL; /* another thread may have built it meanwhile: the first one stays */
    if (!atomic_compare_exchange_strong_explicit(&set->rules[i], &none, r, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        un_rule_free(r);
        r = none;
    }
    return r;
}

un_rule *un_ruleset_rule_decode(const un_ruleset *set, int64_t i) {
    UN_ASSERT(i >= 0 && i < set->n);
    const un_rule *built = atomic_load_explicit(&set->rules[i], memory_order_acquire);
    if (built)
        return un_rule_clone(built);
    un_rule *r = NULL;
    un_status st = rule_decode(NULL, set->spec, set->blob[i], set->blob_len[i], &r);
    UN_ASSERT(st == UN_OK); /* as in un_ruleset_rule */
    return r;
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

const uint64_t *un__ruleset_need(const un_ruleset *set, int64_t i, int64_t *n) {
    UN_ASSERT(i >= 0 && i < set->n);
    *n = set->need_at[i + 1] - set->need_at[i];
    return set->need + set->need_at[i];
}

int64_t un__u64_lower_bound(const uint64_t *v, int64_t n, uint64_t x) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (v[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const int32_t *un__ruleset_by_key(const un_ruleset *set, uint64_t label, int64_t *n) {
    int64_t lo = un__u64_lower_bound(set->key, set->n_keys, label);
    if (lo == set->n_keys || set->key[lo] != label) {
        *n = 0;
        return NULL;
    }
    *n = set->key_at[lo + 1] - set->key_at[lo];
    return set->by_key + set->key_at[lo];
}
