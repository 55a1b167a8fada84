/* rule.c - graph substitutions: construction and checks, variables, the canonical hash and form
 * (through one merged graph whose explicit outputs interleave the source and target outputs),
 * instantiation at other parameter values and shapes, random checking by the reference evaluator,
 * JSON and a readable form. Every side graph is rebuilt with a name on every node, so JSON text
 * and variable bindings refer to nodes by name. */
#include "pcg/rule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_names[UN_RULE_STATUS_COUNT] = {"candidate", "verified", "refuted",
                                                               "unknown", "rejected"};

const char *un_rule_status_name(un_rule_status s) {
    return (unsigned)s < UN_RULE_STATUS_COUNT ? status_names[s] : "?";
}

bool un_rule_status_from_name(const char *name, un_rule_status *out) {
    for (int i = 0; i < UN_RULE_STATUS_COUNT; i++)
        if (name && strcmp(name, status_names[i]) == 0) {
            *out = (un_rule_status)i;
            return true;
        }
    return false;
}

static bool is_source(const un_graph *g, int32_t v) {
    return un_op_kind_of(un_graph_node(g, v)->op) == UN_OPK_SOURCE;
}

void un_rule_free(un_rule *r) {
    if (!r)
        return;
    un_graph_free(r->src);
    un_graph_free(r->dst);
    free(r);
}

un_rule *un_rule_clone(const un_rule *r) {
    un_rule *c = un_xmalloc(sizeof *c);
    *c = *r;
    c->src = un_graph_clone(r->src);
    c->dst = un_graph_clone(r->dst);
    return c;
}

/* ---- rebuilding a side ----------------------------------------------------------------------- */

/* How to copy one side: node order (ids of the old graph, topological), a name per old node,
 * parameter overrides from variables and input shapes, and the outputs. */
typedef struct side_copy {
    const un_rule *r;         /* variables to apply (NULL: none) */
    int side;                 /* UN_RULE_SRC or UN_RULE_DST */
    const int64_t *values;    /* variable values, or NULL for the witness values */
    const un_shape *in_shape; /* per old source node id: new shape, or NULL */
    const int32_t *order;     /* old ids in the order to add them, n of them */
    int32_t n;
    char **names;       /* per old id */
    const un_ref *outs; /* outputs, in old ids */
    int n_out;
    int32_t *new_id;      /* per old id, filled */
    const int64_t *cvals; /* check r's side conditions on this side at these values (or NULL) */
    bool cond_failed;     /* set when a side condition failed */
} side_copy;

static un_status cond_check_node(un_ctx *ctx, const un_rule *r, int side, int32_t old,
                                 const un_graph *ng, int32_t nid, const int64_t *vals);

static void source_params(const un_op_spec *os, const un_shape *s, un_param *p) {
    int ip = un_spec_param_index(os, "shape"), idt = un_spec_param_index(os, "dtype"),
        ish = un_spec_param_index(os, "shard"), isum = un_spec_param_index(os, "sum"),
        icp = un_spec_param_index(os, "copy");
    p[ip].len = s->rank;
    memset(p[ip].v, 0, sizeof p[ip].v);
    for (int i = 0; i < s->rank; i++)
        p[ip].v[i] = s->dim[i];
    if (idt >= 0)
        p[idt].v[0] = s->dtype == UN_DT_INT;
    if (ish >= 0) {
        bool sharded = false;
        for (int i = 0; i < s->rank; i++)
            sharded |= s->shard[i] != 1;
        memset(p[ish].v, 0, sizeof p[ish].v);
        p[ish].len = sharded ? s->rank : 0;
        for (int i = 0; sharded && i < s->rank; i++)
            p[ish].v[i] = s->shard[i];
    }
    if (isum >= 0)
        p[isum].v[0] = s->sum;
    if (icp >= 0)
        p[icp].v[0] = s->copy;
}

static un_status copy_side(un_ctx *ctx, const un_graph *g, side_copy *sc, un_graph **out) {
    un_status st = UN_OK;
    un_graph *ng = un_graph_new(un_graph_spec(g));
    const un_spec *spec = un_graph_spec(g);
    for (int32_t i = 0; i < un_graph_node_count(g); i++)
        sc->new_id[i] = -1;
    for (int32_t k = 0; k < sc->n; k++) {
        int32_t v = sc->order[k];
        const un_node *nd = un_graph_node(g, v);
        un_param p[UN_MAX_PARAMS];
        memcpy(p, nd->params, sizeof p);
        for (int a = 0; sc->r && a < sc->r->n_vars; a++) {
            const un_rule_var *var = &sc->r->vars[a];
            for (int b = 0; b < var->n_binds; b++) {
                const un_rule_bind *bd = &var->binds[b];
                if (bd->side == sc->side && bd->node == v)
                    p[bd->param].v[bd->item < 0 ? 0 : bd->item] =
                        sc->values ? sc->values[a] : var->value;
            }
        }
        if (sc->in_shape && un_op_kind_of(nd->op) == UN_OPK_SOURCE)
            source_params(un_spec_op(spec, nd->op), &sc->in_shape[v], p);
        un_ref in[UN_MAX_INPUTS];
        for (int j = 0; j < nd->n_in; j++) {
            in[j] = nd->in[j];
            in[j].node = sc->new_id[nd->in[j].node];
            UN_ASSERT(in[j].node >= 0);
        }
        if ((st = un_graph_add(ctx, ng, nd->op, p, in, nd->n_in, sc->names[v], &sc->new_id[v])) !=
            UN_OK)
            goto fail;
        if (sc->cvals && (st = cond_check_node(ctx, sc->r, sc->side, v, ng, sc->new_id[v],
                                               sc->cvals)) != UN_OK) {
            sc->cond_failed = true;
            goto fail;
        }
    }
    un_ref outs[UN_RULE_MAX_OUTS];
    for (int i = 0; i < sc->n_out; i++)
        outs[i] = (un_ref){sc->new_id[sc->outs[i].node], sc->outs[i].out};
    if ((st = un_graph_set_outputs(ctx, ng, outs, sc->n_out)) != UN_OK)
        goto fail;
    *out = ng;
    return UN_OK;
fail:
    un_graph_free(ng);
    *out = NULL;
    return st;
}

static char **names_new(int32_t n) { return un_xcalloc((size_t)(n ? n : 1), sizeof(char *)); }

static void names_free(char **nm, int32_t n) {
    for (int32_t i = 0; nm && i < n; i++)
        free(nm[i]);
    free(nm);
}

/* Names for one side: kept where present and unique, else "<prefix><id>". */
static char **names_for(const un_graph *g, char prefix) {
    int32_t n = un_graph_node_count(g);
    char **nm = names_new(n);
    for (int32_t i = 0; i < n; i++) {
        const char *have = un_graph_node(g, i)->name;
        if (have) {
            nm[i] = un_xstrdup(have);
            continue;
        }
        char buf[32];
        for (int s = 0;; s++) {
            snprintf(buf, sizeof buf, s ? "%c%d_%d" : "%c%d", prefix, (int)i, s);
            if (un_graph_find(g, buf) < 0)
                break;
        }
        nm[i] = un_xstrdup(buf);
    }
    return nm;
}

/* ---- construction ------------------------------------------------------------------------------
 */

/* Marks in `live` every node whose value reaches one of the outputs. */
static void mark_live(const un_graph *g, const un_ref *outs, int n_out, bool *live) {
    int32_t n = un_graph_node_count(g);
    memset(live, 0, (size_t)(n ? n : 1) * sizeof *live);
    for (int i = 0; i < n_out; i++)
        live[outs[i].node] = true;
    for (int32_t v = n - 1; v >= 0; v--)
        if (live[v])
            for (int j = 0; j < un_graph_node(g, v)->n_in; j++)
                live[un_graph_node(g, v)->in[j].node] = true;
}

static un_status check_side(un_ctx *ctx, const un_graph *g, const un_graph *other,
                            const un_ref *outs, int n_out, const char *side, bool *live) {
    int32_t n = un_graph_node_count(g);
    for (int i = 0; i < n_out; i++)
        if (outs[i].node < 0 || outs[i].node >= n || outs[i].out < 0 ||
            outs[i].out >= un_graph_node(g, outs[i].node)->inf.n_out)
            return un_ctx_error(ctx, UN_ERR_INVALID, "rule %s: output %d refers to no node output",
                                side, i);
    mark_live(g, outs, n_out, live);
    for (int32_t v = 0; v < n; v++) {
        const un_node *nd = un_graph_node(g, v);
        if (un_op_kind_of(nd->op) != UN_OPK_SOURCE) {
            if (!live[v])
                return un_ctx_error(ctx, UN_ERR_INVALID,
                                    "rule %s: node %s (%s) reaches no mapped output", side,
                                    nd->name ? nd->name : "(unnamed)", un_op_name(nd->op));
            continue;
        }
        if (!nd->name)
            return un_ctx_error(ctx, UN_ERR_INVALID, "rule %s: an input has no name", side);
        int32_t o = un_graph_find(other, nd->name);
        if (o < 0 || un_op_kind_of(un_graph_node(other, o)->op) != UN_OPK_SOURCE)
            return un_ctx_error(ctx, UN_ERR_INVALID, "rule %s: input '%s' is on one side only",
                                side, nd->name);
        const un_node *od = un_graph_node(other, o);
        if (od->op != nd->op || !un_shape_eq(&od->inf.out[0], &nd->inf.out[0]))
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "rule: input '%s' differs between the sides (op, shape or layout)",
                                nd->name);
        if (!live[v])
            return un_ctx_error(ctx, UN_ERR_INVALID, "rule %s: input '%s' reaches no output", side,
                                nd->name);
    }
    return UN_OK;
}

static int32_t *iota(int32_t n) {
    int32_t *o = un_xmalloc((size_t)(n ? n : 1) * sizeof *o);
    for (int32_t i = 0; i < n; i++)
        o[i] = i;
    return o;
}

/* The checks of un_rule_make (rule.h) on the sides as given. */
static un_status make_check(un_ctx *ctx, const un_graph *src, const un_graph *dst,
                            const un_ref *src_out, const un_ref *dst_out, int n_out) {
    if (!src || !dst || n_out < 1 || n_out > UN_RULE_MAX_OUTS)
        return un_ctx_error(ctx, UN_ERR_INVALID, "rule: %d mapped outputs (1..%d)", n_out,
                            UN_RULE_MAX_OUTS);
    if (un_graph_spec(src) != un_graph_spec(dst))
        return un_ctx_error(ctx, UN_ERR_INVALID, "rule: the sides use different specs");
    int32_t ns = un_graph_node_count(src), nd = un_graph_node_count(dst);
    bool *live = un_xmalloc((size_t)(ns > nd ? ns : nd) + 1);
    un_status st = check_side(ctx, src, dst, src_out, n_out, "source", live);
    if (st == UN_OK)
        st = check_side(ctx, dst, src, dst_out, n_out, "target", live);
    free(live);
    if (st != UN_OK)
        return st;
    int n_ops = 0;
    for (int32_t v = 0; v < ns; v++)
        n_ops += !is_source(src, v);
    if (n_ops == 0)
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "rule source: no operator (it would match any tensor)");
    for (int i = 0; i < n_out; i++) {
        const un_shape *a = un_graph_shape(src, src_out[i]), *b = un_graph_shape(dst, dst_out[i]);
        if (!un_shape_eq(a, b)) {
            char sa[96] = "", sb[96] = "";
            if (ctx && un_ctx_status(ctx) == UN_OK) { /* formatted only when it is kept */
                un_shape_str(a, sa, sizeof sa);
                un_shape_str(b, sb, sizeof sb);
            }
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "rule: output %d has shape %s in the source but %s in the target",
                                i, sa, sb);
        }
    }
    return UN_OK;
}

un_status un_rule_make(un_ctx *ctx, const un_graph *src, const un_graph *dst, const un_ref *src_out,
                       const un_ref *dst_out, int n_out, un_rule **out) {
    *out = NULL;
    un_status st = make_check(ctx, src, dst, src_out, dst_out, n_out);
    if (st != UN_OK)
        return st;
    un_rule *r = un_xcalloc(1, sizeof *r);
    r->n_out = n_out;
    const un_graph *gs[2] = {src, dst};
    const un_ref *os[2] = {src_out, dst_out};
    un_graph **ng[2] = {&r->src, &r->dst};
    for (int s = 0; s < 2 && st == UN_OK; s++) {
        int32_t n = un_graph_node_count(gs[s]);
        char **nm = names_for(gs[s], s ? 't' : 's');
        int32_t *order = iota(n), *nid = un_xmalloc((size_t)(n ? n : 1) * sizeof *nid);
        side_copy sc = {.side = s,
                        .order = order,
                        .n = n,
                        .names = nm,
                        .outs = os[s],
                        .n_out = n_out,
                        .new_id = nid};
        st = copy_side(ctx, gs[s], &sc, ng[s]);
        for (int i = 0; st == UN_OK && i < n_out; i++)
            (s ? r->dst_out : r->src_out)[i] = (un_ref){nid[os[s][i].node], os[s][i].out};
        free(order);
        free(nid);
        names_free(nm, n);
    }
    if (st != UN_OK) {
        un_rule_free(r);
        return st;
    }
    *out = r;
    return UN_OK;
}

un_status un_rule_var_add(un_ctx *ctx, un_rule *r, const char *name, const un_rule_bind *binds,
                          int n_binds) {
    if (r->n_vars >= UN_RULE_MAX_VARS)
        return un_ctx_error(ctx, UN_ERR_INVALID, "rule: more than %d variables", UN_RULE_MAX_VARS);
    if (!name || !*name || strlen(name) >= sizeof r->vars[0].name)
        return un_ctx_error(ctx, UN_ERR_INVALID, "rule: variable name must have 1..%d characters",
                            (int)sizeof r->vars[0].name - 1);
    for (int i = 0; i < r->n_vars; i++)
        if (strcmp(r->vars[i].name, name) == 0)
            return un_ctx_error(ctx, UN_ERR_INVALID, "rule: variable '%s' declared twice", name);
    if (n_binds < 1 || n_binds > UN_RULE_MAX_BINDS)
        return un_ctx_error(ctx, UN_ERR_INVALID, "rule: variable '%s' has %d occurrences (1..%d)",
                            name, n_binds, UN_RULE_MAX_BINDS);
    int64_t value = 0;
    for (int b = 0; b < n_binds; b++) {
        const un_rule_bind *bd = &binds[b];
        const un_graph *g = bd->side == UN_RULE_SRC   ? r->src
                            : bd->side == UN_RULE_DST ? r->dst
                                                      : NULL;
        if (!g || bd->node < 0 || bd->node >= un_graph_node_count(g))
            return un_ctx_error(ctx, UN_ERR_INVALID, "rule: variable '%s': no such node", name);
        const un_node *nd = un_graph_node(g, bd->node);
        const un_op_spec *os = un_spec_op(un_graph_spec(g), nd->op);
        if (bd->param < 0 || bd->param >= os->n_params)
            return un_ctx_error(ctx, UN_ERR_INVALID, "rule: variable '%s': %s has no parameter %d",
                                name, os->name, bd->param);
        const un_param *p = &nd->params[bd->param];
        bool list = os->params[bd->param].type == UN_PT_LIST;
        if (list ? bd->item < 0 || bd->item >= p->len : bd->item != -1)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "rule: variable '%s': bad item %d of parameter '%s' of %s", name,
                                bd->item, os->params[bd->param].name, nd->name);
        int64_t v = p->v[list ? bd->item : 0];
        if (b && v != value)
            return un_ctx_error(
                ctx, UN_ERR_INVALID,
                "rule: variable '%s' binds parameters of different values (%lld, %lld)", name,
                (long long)value, (long long)v);
        value = v;
        for (int a = 0; a < r->n_vars; a++)
            for (int c = 0; c < r->vars[a].n_binds; c++)
                if (!memcmp(&r->vars[a].binds[c], bd, sizeof *bd))
                    return un_ctx_error(ctx, UN_ERR_INVALID,
                                        "rule: a parameter of %s is bound to '%s' and '%s'",
                                        nd->name, r->vars[a].name, name);
    }
    /* A dim of an input is one size on both sides: a variable binding it binds it on both. */
    for (int b = 0; b < n_binds; b++) {
        const un_graph *g = binds[b].side == UN_RULE_SRC ? r->src : r->dst,
                       *o = binds[b].side == UN_RULE_SRC ? r->dst : r->src;
        const un_node *nd = un_graph_node(g, binds[b].node);
        const un_op_spec *os = un_spec_op(un_graph_spec(g), nd->op);
        if (un_op_kind_of(nd->op) != UN_OPK_SOURCE ||
            strcmp(os->params[binds[b].param].name, "shape") != 0)
            continue;
        int32_t twin = un_graph_find(o, nd->name);
        bool found = false;
        for (int c = 0; c < n_binds && !found; c++)
            found = binds[c].side != binds[b].side && binds[c].node == twin &&
                    binds[c].param == binds[b].param && binds[c].item == binds[b].item;
        if (!found)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "rule: variable '%s' binds dim %d of input '%s' on one side only",
                                name, binds[b].item, nd->name);
    }
    un_rule_var *var = &r->vars[r->n_vars++];
    memset(var, 0, sizeof *var);
    snprintf(var->name, sizeof var->name, "%s", name);
    var->value = value;
    var->n_binds = n_binds;
    for (int b = 0; b < n_binds; b++) {
        var->binds[b] = binds[b];
    }
    return UN_OK;
}

/* ---- queries -----------------------------------------------------------------------------------
 */

int un_rule_input_count(const un_rule *r) {
    int n = 0;
    for (int32_t v = 0; v < un_graph_node_count(r->src); v++)
        n += is_source(r->src, v);
    return n;
}

int32_t un_rule_input_src(const un_rule *r, int i) {
    for (int32_t v = 0; v < un_graph_node_count(r->src); v++)
        if (is_source(r->src, v) && i-- == 0)
            return v;
    return -1;
}

int32_t un_rule_input_dst(const un_rule *r, int i) {
    int32_t v = un_rule_input_src(r, i);
    return v < 0 ? -1 : un_graph_find(r->dst, un_graph_node(r->src, v)->name);
}

int un_rule_size(const un_rule *r, int side) {
    const un_graph *g = side == UN_RULE_DST ? r->dst : r->src;
    int n = 0;
    for (int32_t v = 0; v < un_graph_node_count(g); v++)
        n += !is_source(g, v);
    return n;
}

/* ---- canonical hash and form -------------------------------------------------------------------
 */

/* The merged graph of one direction of a rule: all of a (the source of that direction), then b's
 * operators wired to a's inputs; its explicit outputs are a_out[perm[0]], b_out[perm[0]],
 * a_out[perm[1]], ... b_id maps b's ids to merged ids. */
static un_graph *merged_new(const un_graph *a, const un_graph *b, const un_ref *a_out,
                            const un_ref *b_out, int n_out, const int *perm, int32_t *b_id) {
    un_graph *m = un_graph_clone(a);
    for (int32_t v = 0; v < un_graph_node_count(b); v++) {
        const un_node *nd = un_graph_node(b, v);
        if (un_op_kind_of(nd->op) == UN_OPK_SOURCE) {
            b_id[v] = un_graph_find(a, nd->name);
            continue;
        }
        un_ref in[UN_MAX_INPUTS];
        for (int j = 0; j < nd->n_in; j++)
            in[j] = (un_ref){b_id[nd->in[j].node], nd->in[j].out};
        /* the same op on the same shapes as in b: its inference */
        un_status st = un_graph_add_inferred(NULL, m, nd->op, nd->params, in, nd->n_in, NULL,
                                             &nd->inf, &b_id[v]);
        UN_ASSERT(st == UN_OK);
    }
    un_ref outs[2 * UN_RULE_MAX_OUTS];
    for (int i = 0; i < n_out; i++) {
        outs[2 * i] = a_out[perm[i]];
        outs[2 * i + 1] = (un_ref){b_id[b_out[perm[i]].node], b_out[perm[i]].out};
    }
    un_status st = un_graph_set_outputs(NULL, m, outs, 2 * n_out);
    UN_ASSERT(st == UN_OK);
    un_graph_hash_ignore_dims(m, true);
    return m;
}

/* Next permutation in lexicographic order; false after the last. */
static bool perm_next(int *p, int n) {
    int i = n - 2;
    while (i >= 0 && p[i] >= p[i + 1])
        i--;
    if (i < 0)
        return false;
    int j = n - 1;
    while (p[j] <= p[i])
        j--;
    int t = p[i];
    p[i] = p[j];
    p[j] = t;
    for (int a = i + 1, b = n - 1; a < b; a++, b--)
        t = p[a], p[a] = p[b], p[b] = t;
    return true;
}

/* The output-pair order of least merged hash of the direction a => b, and that hash. */
static uint64_t best_perm(const un_graph *a, const un_graph *b, const un_ref *a_out,
                          const un_ref *b_out, int n_out, int *best) {
    int p[UN_RULE_MAX_OUTS];
    for (int i = 0; i < n_out; i++)
        p[i] = best[i] = i;
    int32_t *b_id = un_xmalloc((size_t)un_graph_node_count(b) * sizeof *b_id + 1);
    uint64_t h_best = 0;
    bool first = true;
    do {
        un_graph *m = merged_new(a, b, a_out, b_out, n_out, p, b_id);
        uint64_t h = un_graph_hash(m);
        un_graph_free(m);
        if (first || h < h_best) {
            h_best = h;
            memcpy(best, p, sizeof p);
        }
        first = false;
    } while (perm_next(p, n_out));
    free(b_id);
    return h_best;
}

uint64_t un_rule_hash(const un_rule *r) {
    int perm[UN_RULE_MAX_OUTS];
    return best_perm(r->src, r->dst, r->src_out, r->dst_out, r->n_out, perm);
}

bool un_rule_hash_both(const un_rule *r, uint64_t *fwd, uint64_t *rev) {
    int perm[UN_RULE_MAX_OUTS];
    *fwd = best_perm(r->src, r->dst, r->src_out, r->dst_out, r->n_out, perm);
    if (un_rule_size(r, UN_RULE_DST) == 0) /* the reverse would have a source of no operator */
        return false;
    *rev = best_perm(r->dst, r->src, r->dst_out, r->src_out, r->n_out, perm);
    return true;
}

un_status un_rule_hash_sides(un_ctx *ctx, const un_graph *src, const un_graph *dst,
                             const un_ref *src_out, const un_ref *dst_out, int n_out, uint64_t *fwd,
                             uint64_t *rev, bool *has_rev) {
    /* un_rule_make's copy differs from the sides only in its operators' names, which the merged
     * graphs' hashes do not read */
    un_status st = make_check(ctx, src, dst, src_out, dst_out, n_out);
    if (st != UN_OK)
        return st;
    int perm[UN_RULE_MAX_OUTS];
    *fwd = best_perm(src, dst, src_out, dst_out, n_out, perm);
    int n_ops = 0;
    for (int32_t v = 0; v < un_graph_node_count(dst); v++)
        n_ops += !is_source(dst, v);
    *has_rev = n_ops > 0;
    if (*has_rev)
        *rev = best_perm(dst, src, dst_out, src_out, n_out, perm);
    return UN_OK;
}

static int cmp_bind(const void *a, const void *b) {
    const un_rule_bind *x = a, *y = b;
    if (x->side != y->side)
        return x->side - y->side;
    if (x->node != y->node)
        return x->node < y->node ? -1 : 1;
    if (x->param != y->param)
        return x->param - y->param;
    return x->item - y->item;
}

static int cmp_var(const void *a, const void *b) {
    return cmp_bind(&((const un_rule_var *)a)->binds[0], &((const un_rule_var *)b)->binds[0]);
}

un_status un_rule_canonical(un_ctx *ctx, const un_rule *r, un_rule **out) {
    *out = NULL;
    int perm[UN_RULE_MAX_OUTS];
    best_perm(r->src, r->dst, r->src_out, r->dst_out, r->n_out, perm);
    int32_t ns = un_graph_node_count(r->src), nd = un_graph_node_count(r->dst);
    int32_t *dst_id = un_xmalloc((size_t)nd * sizeof *dst_id + 1);
    un_graph *m = merged_new(r->src, r->dst, r->src_out, r->dst_out, r->n_out, perm, dst_id);
    int32_t nm = un_graph_node_count(m);
    int32_t *ord = un_xmalloc((size_t)nm * sizeof *ord);
    un_graph_canonical_order(m, ord);
    int32_t *merged_to_dst = un_xmalloc((size_t)nm * sizeof *merged_to_dst);
    for (int32_t i = 0; i < nm; i++)
        merged_to_dst[i] = -1;
    for (int32_t v = 0; v < nd; v++)
        merged_to_dst[dst_id[v]] = v;
    /* Orders and names per side; inputs first (canonical order), then ops. */
    char **nms = names_new(ns), **nmd = names_new(nd);
    int32_t *os = un_xmalloc((size_t)ns * sizeof *os), *od = un_xmalloc((size_t)nd * sizeof *od);
    int32_t n_os = 0, n_od = 0, xi = 0, wi = 0, si = 0, ti = 0;
    char buf[32];
    for (int32_t k = 0; k < nm; k++) {
        int32_t v = ord[k];
        if (v < ns && is_source(r->src, v)) {
            bool is_w = un_graph_node(r->src, v)->op == UN_OP_WEIGHT;
            snprintf(buf, sizeof buf, "%c%d", is_w ? 'w' : 'x', (int)(is_w ? wi++ : xi++));
            nms[v] = un_xstrdup(buf);
            os[n_os++] = v;
            int32_t w = merged_to_dst[v];
            nmd[w] = un_xstrdup(buf);
            od[n_od++] = w;
        } else if (v < ns) {
            snprintf(buf, sizeof buf, "s%d", (int)si++);
            nms[v] = un_xstrdup(buf);
            os[n_os++] = v;
        } else {
            int32_t w = merged_to_dst[v];
            snprintf(buf, sizeof buf, "t%d", (int)ti++);
            nmd[w] = un_xstrdup(buf);
            od[n_od++] = w;
        }
    }
    UN_ASSERT(n_os == ns && n_od == nd);
    un_ref so[UN_RULE_MAX_OUTS], dso[UN_RULE_MAX_OUTS];
    for (int i = 0; i < r->n_out; i++) {
        so[i] = r->src_out[perm[i]];
        dso[i] = r->dst_out[perm[i]];
    }
    un_rule *c = un_xcalloc(1, sizeof *c);
    memcpy(c->name, r->name, sizeof c->name);
    c->n_out = r->n_out;
    c->any_shape = r->any_shape;
    int32_t *nid_s = un_xmalloc((size_t)ns * sizeof *nid_s),
            *nid_d = un_xmalloc((size_t)nd * sizeof *nid_d);
    side_copy a = {.side = UN_RULE_SRC,
                   .order = os,
                   .n = ns,
                   .names = nms,
                   .outs = so,
                   .n_out = r->n_out,
                   .new_id = nid_s};
    side_copy b = {.side = UN_RULE_DST,
                   .order = od,
                   .n = nd,
                   .names = nmd,
                   .outs = dso,
                   .n_out = r->n_out,
                   .new_id = nid_d};
    un_status st = copy_side(ctx, r->src, &a, &c->src);
    if (st == UN_OK)
        st = copy_side(ctx, r->dst, &b, &c->dst);
    if (st == UN_OK) {
        for (int i = 0; i < r->n_out; i++) {
            c->src_out[i] = (un_ref){nid_s[so[i].node], so[i].out};
            c->dst_out[i] = (un_ref){nid_d[dso[i].node], dso[i].out};
        }
        c->n_vars = r->n_vars;
        for (int a2 = 0; a2 < r->n_vars; a2++) {
            c->vars[a2] = r->vars[a2];
            for (int k = 0; k < c->vars[a2].n_binds; k++) {
                un_rule_bind *bd = &c->vars[a2].binds[k];
                bd->node = bd->side == UN_RULE_SRC ? nid_s[bd->node] : nid_d[bd->node];
            }
            qsort(c->vars[a2].binds, (size_t)c->vars[a2].n_binds, sizeof(un_rule_bind), cmp_bind);
        }
        qsort(c->vars, (size_t)c->n_vars, sizeof(un_rule_var), cmp_var);
        c->n_conds = r->n_conds;
        for (int i = 0; i < r->n_conds; i++) {
            un_rule_cond *cd = &c->conds[i];
            *cd = r->conds[i];
            cd->node = cd->side == UN_RULE_SRC ? nid_s[cd->node] : nid_d[cd->node];
            for (int a2 = 0; a2 < c->n_vars; a2++) /* the variables' new order, by name */
                for (int b2 = 0; b2 < r->n_vars; b2++)
                    if (!strcmp(c->vars[a2].name, r->vars[b2].name))
                        cd->exp[a2] = r->conds[i].exp[b2];
        }
    }
    free(nid_s);
    free(nid_d);
    free(os);
    free(od);
    names_free(nms, ns);
    names_free(nmd, nd);
    free(merged_to_dst);
    free(ord);
    un_graph_free(m);
    free(dst_id);
    if (st != UN_OK) {
        un_rule_free(c);
        return st;
    }
    *out = c;
    return UN_OK;
}

/* ---- side conditions ------------------------------------------------------------------------ */

/* A product coef * prod(var^e) of the rule's variables; known = false when it could not be
 * followed (e.g. a combine whose degree does not divide the shard degree as a product). */
typedef struct mono {
    bool known;
    int64_t c;
    int8_t e[UN_RULE_MAX_VARS];
} mono;

static mono mono_const(int64_t c) { return (mono){.known = true, .c = c}; }

static mono mono_mul(mono a, mono b) {
    mono m = {.known = a.known && b.known, .c = a.c * b.c};
    if (a.c > UN_MAX_DEGREE || b.c > UN_MAX_DEGREE)
        m.known = false;
    for (int i = 0; i < UN_RULE_MAX_VARS; i++)
        m.e[i] = (int8_t)(a.e[i] + b.e[i]);
    return m;
}

/* a / b when exact as products, else unknown. */
static mono mono_div(mono a, mono b) {
    mono m = {.known = a.known && b.known && b.c > 0 && a.c % b.c == 0};
    m.c = m.known ? a.c / b.c : 1;
    for (int i = 0; i < UN_RULE_MAX_VARS; i++) {
        m.e[i] = (int8_t)(a.e[i] - b.e[i]);
        if (m.e[i] < 0)
            m.known = false;
    }
    return m;
}

static bool mono_is_one(mono a) {
    bool one = a.known && a.c == 1;
    for (int i = 0; i < UN_RULE_MAX_VARS; i++)
        one = one && a.e[i] == 0;
    return one;
}

/* a divides b for every value of the variables. */
static bool mono_divides(mono a, mono b) {
    bool d = a.known && b.known && b.c % a.c == 0;
    for (int i = 0; i < UN_RULE_MAX_VARS; i++)
        d = d && a.e[i] <= b.e[i];
    return d;
}

int un_rule_var_at(const un_rule *r, int side, int32_t node, int param, int item) {
    for (int a = 0; a < r->n_vars; a++)
        for (int b = 0; b < r->vars[a].n_binds; b++) {
            const un_rule_bind *bd = &r->vars[a].binds[b];
            if (bd->side == side && bd->node == node && bd->param == param && bd->item == item)
                return a;
        }
    return -1;
}

/* A parameter's value as a product: its variable, or the concrete value. */
static mono param_mono(const un_rule *r, int side, int32_t node, int param, int item,
                       int64_t value) {
    int a = un_rule_var_at(r, side, node, param, item);
    mono m = mono_const(a >= 0 ? 1 : value);
    if (a >= 0)
        m.e[a] = 1;
    return m;
}

/* Per tensor dim: where its size comes from (a rule input's dim, named on the source side, or
 * the tensor itself) and its shard degree as a product. */
typedef struct dinfo {
    int8_t side, out, dim;
    int32_t node;
    mono m;
} dinfo;

/* A divisibility a side's well-formedness needs: m divides the dim at root. */
typedef struct dreq {
    dinfo at;
} dreq;

#define DI(n, o, j) (((size_t)(n)*UN_MAX_OUTPUTS + (size_t)(o)) * UN_MAX_DIMS + (size_t)(j))

/* Where an output dim of a regular op takes its size from: a copy of input *t's dim *j (returns
 * 1), item *item of list parameter *param (returns 2: split's sizes[i], reshape's shape[e]), or
 * something else (0: a sum, a product, a constant). */
static int out_dim_from(const un_graph *g, const un_node *nd, int o, int e, int *t, int *j,
                        int *param, int *item) {
    const un_op_spec *os = un_spec_op(un_graph_spec(g), nd->op);
    const un_output_spec *sp = &os->outputs[os->n_outputs ? o : 0];
    const un_shape *ins[UN_MAX_INPUTS];
    for (int i = 0; i < nd->n_in; i++)
        ins[i] = un_graph_shape(g, nd->in[i]);
    int64_t vars[UN_VAR_COUNT] = {1, 0, o};
    un_expr_env env = {.params = nd->params,
                       .n_params = os->n_params,
                       .vars = vars,
                       .n_vars = UN_VAR_COUNT,
                       .in = ins,
                       .n_in = nd->n_in};
    const un_expr *val = NULL;
    if (sp->like >= 0) {
        int rank = ins[sp->like]->rank, src = e;
        if (sp->drop && un_when_holds(&sp->drop_when, nd->params)) {
            int64_t at;
            if (un_expr_eval(NULL, sp->drop, &env, &at) != UN_OK)
                return 0;
            if (at < 0)
                at += rank;
            src = e >= at ? e + 1 : e;
        }
        for (int k = 0; k < sp->n_set; k++) {
            int64_t at;
            if (un_expr_eval(NULL, sp->set_at[k], &env, &at) != UN_OK)
                return 0;
            if (at < 0)
                at += rank;
            if (at == src)
                val = sp->set_val[k];
        }
        if (!val) {
            *t = sp->like;
            *j = src;
            return src < rank;
        }
    } else if (sp->dims_param >= 0) {
        *param = sp->dims_param;
        *item = e;
        return e < nd->params[sp->dims_param].len ? 2 : 0;
    } else if (e < sp->n_dims) {
        val = sp->dims[e];
    }
    if (val && val->kind == UN_EX_PARAM_AT && val->ref < os->n_params) {
        int64_t at;
        int len = nd->params[val->ref].len;
        if (un_expr_eval(NULL, val->a, &env, &at) != UN_OK)
            return 0;
        if (at < 0)
            at += len;
        *param = val->ref;
        *item = (int)at;
        return at >= 0 && at < len ? 2 : 0;
    }
    if (!val || val->kind != UN_EX_DIM || val->ref >= nd->n_in)
        return 0;
    int rank = ins[val->ref]->rank;
    int64_t at;
    if (!val->a || un_expr_eval(NULL, val->a, &env, &at) != UN_OK)
        return 0;
    int jj = (int)(at < 0 ? at + rank : at);
    if (jj < 0 || jj >= rank)
        return 0;
    *t = val->ref;
    *j = jj;
    return 1;
}

/* Which input dim an output dim of a regular op is a copy of: input *t, dim *j; false if none. */
static bool out_dim_source(const un_graph *g, const un_node *nd, int o, int e, int *t, int *j) {
    int p, it;
    return out_dim_from(g, nd, o, e, t, j, &p, &it) == 1;
}

/* Follows dims and shard degrees through one side; appends its divisibility needs to reqs. */
static void side_reqs(const un_rule *r, int side, dinfo *di, dreq *reqs, int *n_req, int max) {
    const un_graph *g = side ? r->dst : r->src;
    const un_spec *spec = un_graph_spec(g);
    int32_t n = un_graph_node_count(g);
    for (int32_t k = 0; k < n; k++) {
        int32_t id = k;
        const un_node *nd = un_graph_node(g, id);
        const un_op_spec *os = un_spec_op(spec, nd->op);
        un_op_kind kind = un_op_kind_of(nd->op);
        for (int o = 0; o < nd->inf.n_out && o < UN_MAX_OUTPUTS; o++) {
            const un_shape *sh = &nd->inf.out[o];
            for (int e = 0; e < sh->rank; e++) {
                dinfo *d = &di[DI(id, o, e)];
                *d = (dinfo){.side = (int8_t)side,
                             .node = id,
                             .out = (int8_t)o,
                             .dim = (int8_t)e,
                             .m = mono_const(sh->shard[e])};
                if (kind == UN_OPK_SOURCE) {
                    d->side = UN_RULE_SRC;
                    d->node = side ? un_graph_find(r->src, nd->name) : id;
                    d->m =
                        param_mono(r, side, id, un_spec_param_index(os, "shard"), e, sh->shard[e]);
                } else if (kind == UN_OPK_PARALLEL) {
                    *d = di[DI(nd->in[0].node, nd->in[0].out, e)];
                    int ip = un_spec_param_index(os, "dim"), ig = un_spec_param_index(os, "degree");
                    if (ip < 0 || nd->params[ip].v[0] != e)
                        continue;
                    mono g2 = param_mono(r, side, id, ig, -1, nd->params[ig].v[0]);
                    d->m = nd->op == UN_OP_PARTITION ? mono_mul(d->m, g2) : mono_div(d->m, g2);
                } else {
                    int t, j;
                    if (out_dim_source(g, nd, o, e, &t, &j)) {
                        const dinfo *from = &di[DI(nd->in[t].node, nd->in[t].out, j)];
                        const un_shape *ish = un_graph_shape(g, nd->in[t]);
                        d->side = from->side;
                        d->node = from->node;
                        d->out = from->out;
                        d->dim = from->dim;
                        if (ish->shard[j] == sh->shard[e])
                            d->m = from->m;
                        else if (sh->shard[e] != 1)
                            d->m.known = false;
                    } else if (sh->shard[e] != 1) {
                        d->m.known = false;
                    }
                    continue;
                }
                if ((kind == UN_OPK_SOURCE || nd->op == UN_OP_PARTITION) && !mono_is_one(d->m)) {
                    if (*n_req < max)
                        reqs[*n_req].at = *d;
                    (*n_req)++;
                }
            }
        }
    }
}

static bool same_root(const dinfo *a, const dinfo *b) {
    return a->side == b->side && a->node == b->node && a->out == b->out && a->dim == b->dim;
}

un_status un_rule_conds_compute(un_ctx *ctx, un_rule *r) {
    r->n_conds = 0;
    int32_t ns = un_graph_node_count(r->src), nd = un_graph_node_count(r->dst);
    int32_t nmax = ns > nd ? ns : nd;
    dinfo *di = un_xcalloc((size_t)nmax * UN_MAX_OUTPUTS * UN_MAX_DIMS + 1, sizeof *di);
    enum { MAXR = 64 };
    dreq rs[MAXR], rd[MAXR];
    int n_rs = 0, n_rd = 0;
    side_reqs(r, UN_RULE_SRC, di, rs, &n_rs, MAXR);
    side_reqs(r, UN_RULE_DST, di, rd, &n_rd, MAXR);
    free(di);
    if (n_rs > MAXR || n_rd > MAXR)
        return un_ctx_error(ctx, UN_ERR_INVALID, "rule: more than %d layout conditions", MAXR);
    un_rule_cond cs[UN_RULE_MAX_CONDS];
    int n = 0;
    for (int i = 0; i < n_rd; i++) {
        const dinfo *t = &rd[i].at;
        if (!t->m.known)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "rule: the target's shard degree of a dim cannot be followed "
                                "as a product of the rule's variables");
        bool implied = false;
        for (int j = 0; j < n_rs && !implied; j++)
            implied = same_root(t, &rs[j].at) && mono_divides(t->m, rs[j].at.m);
        for (int j = 0; j < n_rd && !implied; j++) /* a stronger target need on the same dim */
            implied = j != i && same_root(t, &rd[j].at) && mono_divides(t->m, rd[j].at.m) &&
                      (!mono_divides(rd[j].at.m, t->m) || j < i);
        for (int j = 0; j < n && !implied; j++)
            implied = cs[j].side == t->side && cs[j].node == t->node && cs[j].out == t->out &&
                      cs[j].dim == t->dim && cs[j].coef == t->m.c &&
                      !memcmp(cs[j].exp, t->m.e, sizeof cs[j].exp);
        if (implied)
            continue;
        if (n == UN_RULE_MAX_CONDS)
            return un_ctx_error(ctx, UN_ERR_INVALID, "rule: more than %d side conditions",
                                UN_RULE_MAX_CONDS);
        cs[n] = (un_rule_cond){
            .side = t->side, .node = t->node, .out = t->out, .dim = t->dim, .coef = t->m.c};
        memcpy(cs[n].exp, t->m.e, sizeof cs[n].exp);
        n++;
    }
    memcpy(r->conds, cs, sizeof cs[0] * (size_t)n);
    r->n_conds = n;
    return UN_OK;
}

/* The product at these values; 0 when it overflows UN_MAX_NUMEL (no dim is that large). */
static int64_t cond_value(const un_rule *r, const un_rule_cond *c, const int64_t *values) {
    int64_t m = c->coef;
    for (int a = 0; a < r->n_vars; a++)
        for (int p = 0; p < c->exp[a]; p++) {
            int64_t v = values ? values[a] : r->vars[a].value;
            if (v < 1 || m > UN_MAX_NUMEL / v)
                return v < 1 ? -1 : 0;
            m *= v;
        }
    return m;
}

bool un_rule_cond_holds(const un_rule *r, const un_rule_cond *c, const int64_t *values, int64_t d) {
    int64_t m = cond_value(r, c, values);
    return m > 0 && d % m == 0;
}

static void expr_str(const un_rule *r, int side, un_ref ref, un_buf *b);

void un_rule_cond_str(const un_rule *r, const un_rule_cond *c, un_buf *out) {
    bool any = false;
    if (c->coef != 1) {
        un_buf_printf(out, "%lld", (long long)c->coef);
        any = true;
    }
    for (int a = 0; a < r->n_vars; a++)
        if (c->exp[a] > 0) {
            un_buf_printf(out, "%s%s", any ? "*" : "", r->vars[a].name);
            if (c->exp[a] > 1)
                un_buf_printf(out, "^%d", c->exp[a]);
            any = true;
        }
    if (!any)
        un_buf_printf(out, "1");
    un_buf_printf(out, " | dim %d of ", c->dim);
    expr_str(r, c->side, (un_ref){c->node, c->out}, out);
}

/* Checks the conditions on node `old` of side `side` once built (as nid in ng). */
static un_status cond_check_node(un_ctx *ctx, const un_rule *r, int side, int32_t old,
                                 const un_graph *ng, int32_t nid, const int64_t *vals) {
    for (int i = 0; i < r->n_conds; i++) {
        const un_rule_cond *c = &r->conds[i];
        if (c->side != side || c->node != old)
            continue;
        int64_t d = un_graph_shape(ng, (un_ref){nid, c->out})->dim[c->dim];
        if (un_rule_cond_holds(r, c, vals, d))
            continue;
        un_buf b = {0};
        un_rule_cond_str(r, c, &b);
        un_buf_printf(&b, " fails at");
        for (int a = 0; a < r->n_vars; a++)
            un_buf_printf(&b, "%s %s=%lld", a ? "," : "", r->vars[a].name, (long long)vals[a]);
        un_status st =
            un_ctx_error(ctx, UN_ERR_SHAPE, "side condition %s%s: the dim is %lld",
                         b.data ? b.data : "", r->n_vars ? "" : " the witness", (long long)d);
        un_buf_deinit(&b);
        return st;
    }
    return UN_OK;
}

/* ---- dimension variables -------------------------------------------------------------------- */

/* Whether parameter `param` of a node of op `os` (kind `kind`) holds sizes: an input's "shape",
 * or a regular op's list parameter that sizes its outputs (split's sizes, reshape's shape). */
static bool param_is_size(const un_op_spec *os, un_op_kind kind, int param) {
    if (param < 0 || param >= os->n_params || os->params[param].type != UN_PT_LIST)
        return false;
    return kind == UN_OPK_REGULAR ||
           (kind == UN_OPK_SOURCE && !strcmp(os->params[param].name, "shape"));
}

bool un_rule_var_is_dim(const un_rule *r, int a) {
    for (int b = 0; a >= 0 && a < r->n_vars && b < r->vars[a].n_binds; b++) {
        const un_rule_bind *bd = &r->vars[a].binds[b];
        const un_graph *g = bd->side == UN_RULE_SRC ? r->src : r->dst;
        const un_node *nd = un_graph_node(g, bd->node);
        if (param_is_size(un_spec_op(un_graph_spec(g), nd->op), un_op_kind_of(nd->op), bd->param))
            return true;
    }
    return false;
}

int un_rule_dims_drop(un_rule *r) {
    int keep = 0, dropped = 0;
    int8_t map[UN_RULE_MAX_VARS];
    for (int a = 0; a < r->n_vars; a++) {
        if (un_rule_var_is_dim(r, a)) {
            map[a] = -1;
            dropped++;
            continue;
        }
        map[a] = (int8_t)keep;
        r->vars[keep++] = r->vars[a];
    }
    for (int i = 0; dropped && i < r->n_conds; i++) {
        int8_t e[UN_RULE_MAX_VARS] = {0};
        for (int a = 0; a < r->n_vars; a++)
            if (map[a] >= 0)
                e[map[a]] = r->conds[i].exp[a];
        memcpy(r->conds[i].exp, e, sizeof e);
    }
    r->n_vars = keep;
    return dropped;
}

/* A size-holding parameter item (side, node, param, item): one atom of the dim classes. */
typedef struct patom {
    int8_t side, param, item;
    int32_t node;
} patom;

static int uf_find(int *uf, int x) {
    while (uf[x] != x)
        x = uf[x] = uf[uf[x]];
    return x;
}

/* The dim classes of r: per tensor dim of each side, the atom its size is: a rule input's dim
 * (input node id on the source side * UN_MAX_DIMS + dim) or a size parameter item (n_in_atoms
 * + its index in pa), followed through the ops that copy a dim; the two dims of each mapped
 * output pair are one class. Returns the number of parameter atoms (at most max). */
static int dim_classes(const un_rule *r, int *uf, int n_in_atoms, patom *pa, int max) {
    int n_pa = 0;
    int32_t nmax = un_graph_node_count(r->src);
    if (un_graph_node_count(r->dst) > nmax)
        nmax = un_graph_node_count(r->dst);
    int *at[2];
    for (int side = 0; side < 2; side++) {
        const un_graph *g = side ? r->dst : r->src;
        size_t sz = (size_t)nmax * UN_MAX_OUTPUTS * UN_MAX_DIMS + 1;
        at[side] = un_xmalloc(sz * sizeof(int));
        for (size_t i = 0; i < sz; i++)
            at[side][i] = -1;
        for (int32_t id = 0; id < un_graph_node_count(g); id++) {
            const un_node *nd = un_graph_node(g, id);
            un_op_kind kind = un_op_kind_of(nd->op);
            for (int o = 0; o < nd->inf.n_out && o < UN_MAX_OUTPUTS; o++)
                for (int e = 0; e < nd->inf.out[o].rank; e++) {
                    int *a = &at[side][DI(id, o, e)], t, j, param, item;
                    if (kind == UN_OPK_SOURCE) {
                        int32_t v = side ? un_graph_find(r->src, nd->name) : id;
                        *a = v * UN_MAX_DIMS + e;
                    } else if (kind == UN_OPK_PARALLEL) {
                        *a = at[side][DI(nd->in[0].node, nd->in[0].out, e)];
                    } else {
                        int k = out_dim_from(g, nd, o, e, &t, &j, &param, &item);
                        if (k == 1)
                            *a = at[side][DI(nd->in[t].node, nd->in[t].out, j)];
                        if (k != 2)
                            continue;
                        int p = 0;
                        while (p < n_pa && !(pa[p].side == side && pa[p].node == id &&
                                             pa[p].param == param && pa[p].item == item))
                            p++;
                        if (p == n_pa && n_pa == max)
                            continue;
                        if (p == n_pa)
                            pa[n_pa++] = (patom){(int8_t)side, (int8_t)param, (int8_t)item, id};
                        *a = n_in_atoms + p;
                    }
                }
        }
    }
    for (int i = 0; i < r->n_out; i++)
        for (int e = 0; e < un_graph_shape(r->src, r->src_out[i])->rank; e++) {
            int a = at[0][DI(r->src_out[i].node, r->src_out[i].out, e)],
                b = at[1][DI(r->dst_out[i].node, r->dst_out[i].out, e)];
            if (a >= 0 && b >= 0)
                uf[uf_find(uf, a)] = uf_find(uf, b);
        }
    free(at[0]);
    free(at[1]);
    return n_pa;
}

un_status un_rule_dims_generalize(un_ctx *ctx, const un_rule *r, un_rule **out) {
    *out = NULL;
    enum { MAX_PA = 64 };
    int32_t ns = un_graph_node_count(r->src);
    int n_in_atoms = ns * UN_MAX_DIMS, total = n_in_atoms + MAX_PA;
    int *uf = un_xmalloc((size_t)total * sizeof *uf);
    for (int i = 0; i < total; i++)
        uf[i] = i;
    patom pa[MAX_PA];
    int n_pa = dim_classes(r, uf, n_in_atoms, pa, MAX_PA);
    un_rule *c = un_rule_clone(r);
    bool *done = un_xcalloc((size_t)total, sizeof *done);
    int added = 0;
    for (int p = 0; p < n_pa && c->n_vars < UN_RULE_MAX_VARS; p++) {
        int root = uf_find(uf, n_in_atoms + p);
        if (done[root])
            continue;
        done[root] = true;
        if (un_rule_var_at(c, pa[p].side, pa[p].node, pa[p].param, pa[p].item) >= 0)
            continue;
        un_rule_bind bd[UN_RULE_MAX_BINDS];
        int nb = 0;
        bool on_src = false, fits = true;
        for (int32_t v = 0; v < ns && fits; v++) {
            if (!is_source(r->src, v))
                continue;
            const un_node *nd = un_graph_node(r->src, v);
            int ip = un_spec_param_index(un_spec_op(un_graph_spec(r->src), nd->op), "shape");
            for (int e = 0; e < nd->inf.out[0].rank && ip >= 0; e++) {
                if (uf_find(uf, v * UN_MAX_DIMS + e) != root)
                    continue;
                fits = nb + 2 <= UN_RULE_MAX_BINDS;
                if (!fits)
                    break;
                bd[nb++] = (un_rule_bind){UN_RULE_SRC, v, (int8_t)ip, (int8_t)e};
                bd[nb++] = (un_rule_bind){UN_RULE_DST, un_graph_find(r->dst, nd->name), (int8_t)ip,
                                          (int8_t)e};
                on_src = true;
            }
        }
        for (int q = 0; q < n_pa && fits; q++) {
            if (uf_find(uf, n_in_atoms + q) != root)
                continue;
            fits = nb < UN_RULE_MAX_BINDS;
            if (fits)
                bd[nb++] = (un_rule_bind){pa[q].side, pa[q].node, pa[q].param, pa[q].item};
            on_src = on_src || pa[q].side == UN_RULE_SRC;
        }
        /* a class the source never fixes (a target's split size alone) stays concrete: the
         * matcher could not bind it */
        if (!fits || !on_src)
            continue;
        char name[16];
        for (int i = 1;; i++) {
            snprintf(name, sizeof name, "n%d", i);
            bool used = false;
            for (int a = 0; a < c->n_vars; a++)
                used = used || !strcmp(c->vars[a].name, name);
            if (!used)
                break;
        }
        if (un_rule_var_add(ctx, c, name, bd, nb) != UN_OK) {
            if (ctx)
                un_ctx_clear(ctx);
            continue;
        }
        added++;
    }
    free(done);
    free(uf);
    if (!added) {
        un_rule_free(c);
        return UN_OK;
    }
    *out = c;
    return UN_OK;
}

/* ---- instantiation and random checks --------------------------------------------------------- */

/* un_rule_instantiate; *stage (may be NULL) tells where it stopped: 0 the source, 1 a side
 * condition, 2 the target or the outputs, 3 it succeeded. */
static un_status instantiate(un_ctx *ctx, const un_rule *r, const int64_t *values,
                             const un_shape *in_shapes, un_rule **out, int *stage) {
    *out = NULL;
    int stage_ = 0;
    if (!stage)
        stage = &stage_;
    *stage = 0;
    un_status st = UN_OK;
    un_rule *c = un_xcalloc(1, sizeof *c);
    memcpy(c->name, r->name, sizeof c->name);
    c->n_out = r->n_out;
    c->any_shape = r->any_shape;
    c->n_vars = r->n_vars;
    memcpy(c->vars, r->vars, sizeof c->vars);
    c->n_conds = r->n_conds;
    memcpy(c->conds, r->conds, sizeof c->conds);
    int n_in = un_rule_input_count(r);
    /* The values the rule is built and its conditions checked at: a variable bound in an input's
     * dims or layout takes the value in_shapes gives it. */
    int64_t eff[UN_RULE_MAX_VARS];
    for (int a = 0; a < r->n_vars; a++) {
        eff[a] = values ? values[a] : r->vars[a].value;
        for (int b = 0; in_shapes && b < r->vars[a].n_binds; b++) {
            const un_rule_bind *bd = &r->vars[a].binds[b];
            const un_node *nd = un_graph_node(bd->side ? r->dst : r->src, bd->node);
            if (un_op_kind_of(nd->op) != UN_OPK_SOURCE)
                continue;
            const un_op_spec *ps = un_spec_op(un_graph_spec(r->src), nd->op);
            const char *pn = ps->params[bd->param].name;
            for (int i = 0; i < n_in; i++) {
                int32_t v = bd->side ? un_rule_input_dst(r, i) : un_rule_input_src(r, i);
                if (v != bd->node)
                    continue;
                const un_shape *sh = &in_shapes[i];
                if (!strcmp(pn, "shape"))
                    eff[a] = bd->item < sh->rank ? sh->dim[bd->item] : eff[a];
                else if (!strcmp(pn, "shard"))
                    eff[a] = bd->item < sh->rank ? sh->shard[bd->item] : eff[a];
                else if (!strcmp(pn, "sum"))
                    eff[a] = sh->sum;
                else if (!strcmp(pn, "copy"))
                    eff[a] = sh->copy;
            }
        }
    }
    for (int a = 0; a < r->n_vars; a++)
        c->vars[a].value = eff[a];
    const un_graph *gs[2] = {r->src, r->dst};
    const un_ref *os[2] = {r->src_out, r->dst_out};
    un_graph **ng[2] = {&c->src, &c->dst};
    for (int s = 0; s < 2 && st == UN_OK; s++) {
        int32_t n = un_graph_node_count(gs[s]);
        int32_t *order = iota(n), *nid = un_xmalloc((size_t)(n ? n : 1) * sizeof *nid);
        char **nm = names_for(gs[s], s ? 't' : 's');
        un_shape *shp = NULL;
        if (in_shapes) {
            shp = un_xcalloc((size_t)(n ? n : 1), sizeof *shp);
            for (int i = 0; i < n_in; i++) {
                int32_t v = s ? un_rule_input_dst(r, i) : un_rule_input_src(r, i);
                shp[v] = in_shapes[i];
            }
        }
        side_copy sc = {.r = r,
                        .side = s,
                        .values = eff,
                        .in_shape = shp,
                        .order = order,
                        .n = n,
                        .names = nm,
                        .outs = os[s],
                        .n_out = r->n_out,
                        .new_id = nid,
                        .cvals = eff};
        st = copy_side(ctx, gs[s], &sc, ng[s]);
        *stage = sc.cond_failed ? 1 : s == 0 ? 0 : 2;
        for (int i = 0; st == UN_OK && i < r->n_out; i++)
            (s ? c->dst_out : c->src_out)[i] = (un_ref){nid[os[s][i].node], os[s][i].out};
        free(shp);
        free(order);
        free(nid);
        names_free(nm, n);
    }
    for (int i = 0; st == UN_OK && i < r->n_out; i++) {
        const un_shape *a = un_graph_shape(c->src, c->src_out[i]),
                       *b = un_graph_shape(c->dst, c->dst_out[i]);
        if (!un_shape_eq(a, b)) {
            char sa[96], sb[96];
            un_shape_str(a, sa, sizeof sa);
            un_shape_str(b, sb, sizeof sb);
            st = un_ctx_error(ctx, UN_ERR_MISMATCH,
                              "output %d has shape %s in the source but %s in the target", i, sa,
                              sb);
        }
    }
    if (st != UN_OK) {
        un_rule_free(c);
        return st;
    }
    *stage = 3;
    *out = c;
    return UN_OK;
}

un_status un_rule_instantiate(un_ctx *ctx, const un_rule *r, const int64_t *values,
                              const un_shape *in_shapes, un_rule **out) {
    return instantiate(ctx, r, values, in_shapes, out, NULL);
}

/* Input size variants for the claim check: the witness sizes, each class of equal witness dims
 * times 2, 3 and 5, everything times 2 and 6, and a few random per-dim multiples. */
static int size_variants(const un_rule *r, un_shape *base, int n_in, un_shape *out, int max) {
    int n = 0;
    for (int i = 0; i < n_in; i++)
        base[i] = *un_graph_shape(r->src, (un_ref){un_rule_input_src(r, i), 0});
    memcpy(out, base, sizeof *out * (size_t)n_in);
    n++;
    if (!r->any_shape)
        return n;
    int64_t classes[UN_MAX_DIMS * 8];
    int n_cls = 0;
    for (int i = 0; i < n_in; i++)
        for (int j = 0; j < base[i].rank; j++) {
            bool seen = false;
            for (int c = 0; c < n_cls; c++)
                seen = seen || classes[c] == base[i].dim[j];
            if (!seen && n_cls < (int)(sizeof classes / sizeof classes[0]))
                classes[n_cls++] = base[i].dim[j];
        }
    static const int64_t f_cls[] = {2, 3, 5};
    for (int c = 0; c <= n_cls; c++)
        for (int f = 0; f < (c == n_cls ? 2 : 3) && n < max; f++) {
            un_shape *v = out + (size_t)n * (size_t)n_in;
            memcpy(v, base, sizeof *v * (size_t)n_in);
            for (int i = 0; i < n_in; i++)
                for (int j = 0; j < v[i].rank; j++)
                    if (c == n_cls || base[i].dim[j] == classes[c])
                        v[i].dim[j] *= c == n_cls ? (f ? 6 : 2) : f_cls[f];
            n++;
        }
    un_rng rng;
    un_rng_seed(&rng, 99);
    for (int t = 0; t < 8 && n < max; t++) {
        un_shape *v = out + (size_t)n * (size_t)n_in;
        memcpy(v, base, sizeof *v * (size_t)n_in);
        for (int i = 0; i < n_in; i++)
            for (int j = 0; j < v[i].rank; j++)
                v[i].dim[j] *= 1 + (int64_t)un_rng_below(&rng, 4);
        n++;
    }
    return n;
}

/* Sets the input layout degrees bound to variables to their values in vals. */
static void layouts_follow(const un_rule *r, const int64_t *vals, un_shape *sz, int n_in) {
    for (int a = 0; a < r->n_vars; a++)
        for (int b = 0; b < r->vars[a].n_binds; b++) {
            const un_rule_bind *bd = &r->vars[a].binds[b];
            if (bd->side != UN_RULE_SRC)
                continue;
            const un_node *nd = un_graph_node(r->src, bd->node);
            if (un_op_kind_of(nd->op) != UN_OPK_SOURCE)
                continue;
            const char *pn = un_spec_op(un_graph_spec(r->src), nd->op)->params[bd->param].name;
            for (int i = 0; i < n_in; i++) {
                if (un_rule_input_src(r, i) != bd->node)
                    continue;
                if (!strcmp(pn, "shard") && bd->item >= 0 && bd->item < sz[i].rank)
                    sz[i].shard[bd->item] = (int32_t)vals[a];
                else if (!strcmp(pn, "sum"))
                    sz[i].sum = (int32_t)vals[a];
                else if (!strcmp(pn, "copy"))
                    sz[i].copy = (int32_t)vals[a];
            }
        }
}

un_status un_rule_check_claim(un_ctx *ctx, const un_rule *r, int max_value,
                              un_rule_claim_stats *stats) {
    un_rule_claim_stats s0 = {0};
    if (!stats)
        stats = &s0;
    memset(stats, 0, sizeof *stats);
    int n_in = un_rule_input_count(r);
    enum { MAXV = 32 };
    un_shape *base = un_xcalloc((size_t)n_in + 1, sizeof *base);
    un_shape *vars_sz = un_xcalloc((size_t)MAXV * ((size_t)n_in + 1), sizeof *vars_sz);
    int n_sz = size_variants(r, base, n_in, vars_sz, MAXV);
    /* every variable over 1..max_value, as long as that is at most 4096 combinations */
    int hi = max_value < 1 ? 1 : max_value;
    for (;;) {
        int64_t combos = 1;
        for (int a = 0; a < r->n_vars; a++)
            combos *= hi;
        if (combos <= 4096 || hi <= 2)
            break;
        hi--;
    }
    int64_t vals[UN_RULE_MAX_VARS];
    for (int a = 0; a < r->n_vars; a++)
        vals[a] = 1;
    /* A dim variable bound to an input's dim takes the sizes' value at the other input sizes;
     * one bound only to size parameters (split sizes whose sum is the input's dim) does not,
     * so it is enumerated there like any variable. */
    bool tied[UN_RULE_MAX_VARS], is_dim[UN_RULE_MAX_VARS];
    for (int a = 0; a < r->n_vars; a++) {
        tied[a] = false;
        is_dim[a] = un_rule_var_is_dim(r, a);
        for (int b = 0; b < r->vars[a].n_binds && is_dim[a]; b++) {
            const un_rule_bind *bd = &r->vars[a].binds[b];
            const un_node *nd = un_graph_node(bd->side ? r->dst : r->src, bd->node);
            tied[a] = tied[a] ||
                      (un_op_kind_of(nd->op) == UN_OPK_SOURCE &&
                       !strcmp(un_spec_op(un_graph_spec(r->src), nd->op)->params[bd->param].name,
                               "shape"));
        }
    }
    un_status st = UN_OK;
    char first[900] = "";
    for (bool more = true; more;) {
        /* at the other input sizes a tied dim variable takes the sizes' value: one value there;
         * the other dim variables go to 4 there (a wrong claim shows at small sizes) */
        bool dims_first = true;
        for (int a = 0; a < r->n_vars; a++)
            dims_first = dims_first && (tied[a] ? vals[a] == 1 : !is_dim[a] || vals[a] <= 4);
        for (int z = 0; z < (dims_first ? n_sz : 1) && (st == UN_OK || stats != &s0); z++) {
            un_shape *sz = vars_sz + (size_t)z * (size_t)n_in;
            layouts_follow(r, vals, sz, n_in);
            un_rule *inst = NULL;
            int stage;
            un_status is = instantiate(ctx, r, vals, z ? sz : NULL, &inst, &stage);
            un_rule_free(inst);
            if (is == UN_OK) {
                stats->held++;
                continue;
            }
            if (stage == 0)
                stats->no_source++;
            else if (stage == 1)
                stats->cond_failed++;
            else if (is == UN_ERR_MISMATCH)
                stats->outputs_differ++;
            else
                stats->target_ill++;
            if (stage >= 2 && st == UN_OK) {
                char msg[512], vs[128] = "", ds[256] = "";
                snprintf(msg, sizeof msg, "%s", un_ctx_errmsg(ctx) ? un_ctx_errmsg(ctx) : "");
                for (int a = 0, len = 0; a < r->n_vars && len < (int)sizeof vs; a++)
                    len += snprintf(vs + len, sizeof vs - (size_t)len, "%s%s=%lld", a ? "," : "",
                                    r->vars[a].name, (long long)vals[a]);
                for (int i = 0, len = 0; z && i < n_in && len < (int)sizeof ds; i++) {
                    char b[96];
                    un_shape_str(&sz[i], b, sizeof b);
                    len += snprintf(ds + len, sizeof ds - (size_t)len, " %s", b);
                }
                st = UN_ERR_MISMATCH;
                snprintf(
                    first, sizeof first,
                    "the source is well formed and the side conditions hold at %s%s%s, but: %s",
                    vs[0] ? vs : "the witness", z ? ", inputs" : "", ds, msg);
            }
            un_ctx_clear(ctx);
        }
        /* without stats to count, the first failure decides */
        more = st == UN_OK || stats != &s0;
        for (int a = 0; a < r->n_vars && more; a++) {
            if (vals[a] < hi) {
                vals[a]++;
                break;
            }
            vals[a] = 1;
            more = a + 1 < r->n_vars;
        }
        if (!r->n_vars)
            more = false;
    }
    free(base);
    free(vars_sz);
    /* the first instance that failed (later ones were only counted) */
    return st == UN_OK ? UN_OK : un_ctx_error(ctx, st, "%s", first);
}

un_status un_rule_check_random(un_ctx *ctx, const un_rule *r, un_dom dom, uint64_t seed,
                               double *max_err) {
    double err = 0;
    if (max_err)
        *max_err = 0;
    for (int i = 0; i < r->n_out; i++) {
        const un_shape *a = un_graph_shape(r->src, r->src_out[i]),
                       *b = un_graph_shape(r->dst, r->dst_out[i]);
        if (!un_shape_eq(a, b)) {
            char sa[96], sb[96];
            un_shape_str(a, sa, sizeof sa);
            un_shape_str(b, sb, sizeof sb);
            return un_ctx_error(ctx, UN_ERR_MISMATCH, "output %d: shape %s versus %s", i, sa, sb);
        }
    }
    un_status st = un_eval_compare(ctx, r->src, r->dst, dom, seed, 1e-9, &err);
    if (max_err)
        *max_err = err;
    return st;
}

/* ---- JSON --------------------------------------------------------------------------------------
 */

un_status un_rule_to_json(un_ctx *ctx, const un_rule *r, un_buf *out) {
    un_buf_printf(out, "{\"name\": ");
    un_buf_json_str(out, r->name);
    un_buf_printf(out, ",\n\"src\": ");
    un_status st = un_graph_to_json(ctx, r->src, out);
    if (st != UN_OK)
        return st;
    un_buf_printf(out, ",\n\"dst\": ");
    if ((st = un_graph_to_json(ctx, r->dst, out)) != UN_OK)
        return st;
    un_buf_printf(out, ",\n\"vars\": [");
    for (int a = 0; a < r->n_vars; a++) {
        const un_rule_var *v = &r->vars[a];
        un_buf_printf(out, "%s{\"name\": ", a ? ", " : "");
        un_buf_json_str(out, v->name);
        un_buf_printf(out, ", \"value\": %lld, \"at\": [", (long long)v->value);
        for (int b = 0; b < v->n_binds; b++) {
            const un_rule_bind *bd = &v->binds[b];
            const un_graph *g = bd->side == UN_RULE_SRC ? r->src : r->dst;
            const un_node *nd = un_graph_node(g, bd->node);
            const un_op_spec *os = un_spec_op(un_graph_spec(g), nd->op);
            un_buf_printf(out, "%s[\"%s\", ", b ? ", " : "",
                          bd->side == UN_RULE_SRC ? "src" : "dst");
            un_buf_json_str(out, nd->name);
            un_buf_printf(out, ", ");
            un_buf_json_str(out, os->params[bd->param].name);
            if (bd->item >= 0)
                un_buf_printf(out, ", %d", bd->item);
            un_buf_printf(out, "]");
        }
        un_buf_printf(out, "]}");
    }
    un_buf_printf(out, "],\n\"any_shape\": %s", r->any_shape ? "true" : "false");
    if (r->n_conds)
        un_buf_printf(out, ",\n\"conds\": [");
    for (int i = 0; i < r->n_conds; i++) {
        const un_rule_cond *c = &r->conds[i];
        const un_graph *g = c->side == UN_RULE_SRC ? r->src : r->dst;
        un_buf_printf(out, "%s{\"coef\": %lld, \"pow\": {", i ? ", " : "", (long long)c->coef);
        bool any = false;
        for (int a = 0; a < r->n_vars; a++)
            if (c->exp[a]) {
                un_buf_printf(out, "%s", any ? ", " : "");
                un_buf_json_str(out, r->vars[a].name);
                un_buf_printf(out, ": %d", c->exp[a]);
                any = true;
            }
        un_buf_printf(out, "}, \"of\": [\"%s\", ", c->side == UN_RULE_SRC ? "src" : "dst");
        un_buf_json_str(out, un_graph_node(g, c->node)->name);
        un_buf_printf(out, ", %d, %d]}", c->out, c->dim);
    }
    un_buf_printf(out, "%s}\n", r->n_conds ? "]" : "");
    return UN_OK;
}

static un_status parse_bind(un_ctx *ctx, const un_jcur *at, const un_graph *src,
                            const un_graph *dst, un_rule_bind *bd) {
    int n = un_jcur_len(at);
    if (un_jcur_type(at) != UN_JSON_ARRAY || n < 3 || n > 4)
        return un_jcur_error(ctx, UN_ERR_PARSE, at,
                             "expected [side, node, parameter] or [side, node, parameter, item]");
    un_jcur c0 = un_jcur_item(at, 0), c1 = un_jcur_item(at, 1), c2 = un_jcur_item(at, 2);
    if (un_jcur_type(&c0) != UN_JSON_STRING || un_jcur_type(&c1) != UN_JSON_STRING ||
        un_jcur_type(&c2) != UN_JSON_STRING)
        return un_jcur_error(ctx, UN_ERR_PARSE, at, "side, node and parameter must be strings");
    const char *side = un_jcur_str(&c0);
    if (strcmp(side, "src") && strcmp(side, "dst"))
        return un_jcur_error(ctx, UN_ERR_PARSE, &c0, "side must be \"src\" or \"dst\"");
    bd->side = strcmp(side, "src") ? UN_RULE_DST : UN_RULE_SRC;
    const un_graph *g = bd->side == UN_RULE_SRC ? src : dst;
    bd->node = un_graph_find(g, un_jcur_str(&c1));
    if (bd->node < 0)
        return un_jcur_error(ctx, UN_ERR_PARSE, &c1, "no node '%s' on that side", un_jcur_str(&c1));
    const un_op_spec *os = un_spec_op(un_graph_spec(g), un_graph_node(g, bd->node)->op);
    int p = un_spec_param_index(os, un_jcur_str(&c2));
    if (p < 0)
        return un_jcur_error(ctx, UN_ERR_PARSE, &c2, "%s has no parameter '%s'", os->name,
                             un_jcur_str(&c2));
    bd->param = (int8_t)p;
    bd->item = -1;
    if (n == 4) {
        un_jcur c3 = un_jcur_item(at, 3);
        int64_t it;
        if (!un_jcur_is_int(&c3, &it) || it < 0 || it >= UN_MAX_DIMS)
            return un_jcur_error(ctx, UN_ERR_PARSE, &c3, "item must be an integer 0..%d",
                                 UN_MAX_DIMS - 1);
        bd->item = (int8_t)it;
    }
    return UN_OK;
}

static un_status parse_conds(un_ctx *ctx, const un_jcur *cc, un_rule *r) {
    static const char *const ckeys[] = {"coef", "pow", "of", NULL};
    int n = un_jcur_len(cc);
    if (n > UN_RULE_MAX_CONDS)
        return un_jcur_error(ctx, UN_ERR_PARSE, cc, "%d side conditions (at most %d)", n,
                             UN_RULE_MAX_CONDS);
    un_status st;
    for (int i = 0; i < n; i++) {
        un_jcur it = un_jcur_item(cc, i), pw, of;
        un_rule_cond *cd = &r->conds[i];
        memset(cd, 0, sizeof *cd);
        int64_t coef = 1;
        if ((st = un_jcur_need_type(ctx, &it, UN_JSON_OBJECT)) != UN_OK ||
            (st = un_jcur_check_keys(ctx, &it, ckeys)) != UN_OK ||
            (st = un_jcur_get_int(ctx, &it, "coef", false, &coef)) != UN_OK)
            return st;
        if (coef < 1 || coef > UN_MAX_DEGREE)
            return un_jcur_error(ctx, UN_ERR_PARSE, &it, "coef must be 1..%d", UN_MAX_DEGREE);
        cd->coef = coef;
        pw = un_jcur_member(&it, "pow");
        if (un_jcur_present(&pw)) {
            if ((st = un_jcur_need_type(ctx, &pw, UN_JSON_OBJECT)) != UN_OK)
                return st;
            for (int a = 0; a < r->n_vars; a++) {
                int64_t e = 0;
                if ((st = un_jcur_get_int(ctx, &pw, r->vars[a].name, false, &e)) != UN_OK)
                    return st;
                if (e < 0 || e > 8)
                    return un_jcur_error(ctx, UN_ERR_PARSE, &pw, "power of '%s' must be 0..8",
                                         r->vars[a].name);
                cd->exp[a] = (int8_t)e;
            }
            const char *names[UN_RULE_MAX_VARS + 1];
            for (int a = 0; a < r->n_vars; a++)
                names[a] = r->vars[a].name;
            names[r->n_vars] = NULL;
            if ((st = un_jcur_check_keys(ctx, &pw, names)) != UN_OK)
                return st;
        }
        of = un_jcur_member(&it, "of");
        if (un_jcur_type(&of) != UN_JSON_ARRAY || un_jcur_len(&of) != 4)
            return un_jcur_error(ctx, UN_ERR_PARSE, &it,
                                 "\"of\" must be [side, node, output, dim]");
        un_jcur o0 = un_jcur_item(&of, 0), o1 = un_jcur_item(&of, 1), o2 = un_jcur_item(&of, 2),
                o3 = un_jcur_item(&of, 3);
        int64_t oo, dd;
        if (un_jcur_type(&o0) != UN_JSON_STRING || un_jcur_type(&o1) != UN_JSON_STRING ||
            (strcmp(un_jcur_str(&o0), "src") && strcmp(un_jcur_str(&o0), "dst")) ||
            !un_jcur_is_int(&o2, &oo) || !un_jcur_is_int(&o3, &dd))
            return un_jcur_error(ctx, UN_ERR_PARSE, &of,
                                 "\"of\" must be [\"src\" or \"dst\", node, output, dim]");
        cd->side = strcmp(un_jcur_str(&o0), "src") ? UN_RULE_DST : UN_RULE_SRC;
        const un_graph *g = cd->side == UN_RULE_SRC ? r->src : r->dst;
        cd->node = un_graph_find(g, un_jcur_str(&o1));
        if (cd->node < 0)
            return un_jcur_error(ctx, UN_ERR_PARSE, &o1, "no node '%s' on that side",
                                 un_jcur_str(&o1));
        const un_node *nd = un_graph_node(g, cd->node);
        if (oo < 0 || oo >= nd->inf.n_out || dd < 0 || dd >= nd->inf.out[oo].rank)
            return un_jcur_error(ctx, UN_ERR_PARSE, &of, "%s has no output %lld dim %lld",
                                 un_jcur_str(&o1), (long long)oo, (long long)dd);
        cd->out = (int8_t)oo;
        cd->dim = (int8_t)dd;
        r->n_conds = i + 1;
    }
    return UN_OK;
}

un_status un_rule_from_jcur(un_ctx *ctx, const un_spec *spec, const un_jcur *c, un_rule **out) {
    static const char *const keys[] = {"name", "src", "dst", "vars", "any_shape", "conds", NULL};
    *out = NULL;
    un_graph *src = NULL, *dst = NULL;
    un_rule *r = NULL;
    un_status st;
    if ((st = un_jcur_need_type(ctx, c, UN_JSON_OBJECT)) != UN_OK ||
        (st = un_jcur_check_keys(ctx, c, keys)) != UN_OK)
        return st;
    const char *name = "";
    bool any_shape = false;
    if ((st = un_jcur_get_str(ctx, c, "name", false, &name)) != UN_OK ||
        (st = un_jcur_get_bool(ctx, c, "any_shape", false, &any_shape)) != UN_OK)
        return st;
    un_jcur cs = un_jcur_member(c, "src"), cd = un_jcur_member(c, "dst");
    if (!un_jcur_present(&cs) || !un_jcur_present(&cd))
        return un_jcur_error(ctx, UN_ERR_PARSE, c, "a rule needs \"src\" and \"dst\" graphs");
    if ((st = un_graph_from_jcur(ctx, spec, &cs, &src)) != UN_OK ||
        (st = un_graph_from_jcur(ctx, spec, &cd, &dst)) != UN_OK)
        goto done;
    int n_out = un_graph_output_count(src);
    if (n_out != un_graph_output_count(dst) || n_out < 1 || n_out > UN_RULE_MAX_OUTS) {
        st = un_jcur_error(ctx, UN_ERR_PARSE, c,
                           "the sides have %d and %d outputs (must be equal, 1..%d)", n_out,
                           un_graph_output_count(dst), UN_RULE_MAX_OUTS);
        goto done;
    }
    un_ref so[UN_RULE_MAX_OUTS], dso[UN_RULE_MAX_OUTS];
    for (int i = 0; i < n_out; i++) {
        so[i] = un_graph_output(src, i);
        dso[i] = un_graph_output(dst, i);
    }
    if ((st = un_rule_make(ctx, src, dst, so, dso, n_out, &r)) != UN_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", un_ctx_errmsg(ctx) ? un_ctx_errmsg(ctx) : "invalid rule");
        un_ctx_clear(ctx);
        st = un_jcur_error(ctx, st, c, "%s", msg);
        goto done;
    }
    snprintf(r->name, sizeof r->name, "%s", name);
    r->any_shape = any_shape;
    un_jcur vs = un_jcur_member(c, "vars");
    if (un_jcur_present(&vs) && (st = un_jcur_need_type(ctx, &vs, UN_JSON_ARRAY)) != UN_OK)
        goto done;
    for (int a = 0; a < un_jcur_len(&vs); a++) {
        static const char *const vkeys[] = {"name", "value", "at", NULL};
        un_jcur v = un_jcur_item(&vs, a);
        const char *vn = NULL;
        int64_t value = 0;
        if ((st = un_jcur_need_type(ctx, &v, UN_JSON_OBJECT)) != UN_OK ||
            (st = un_jcur_check_keys(ctx, &v, vkeys)) != UN_OK ||
            (st = un_jcur_get_str(ctx, &v, "name", true, &vn)) != UN_OK ||
            (st = un_jcur_get_int(ctx, &v, "value", false, &value)) != UN_OK)
            goto done;
        un_jcur at = un_jcur_member(&v, "at");
        if ((st = un_jcur_need_type(ctx, &at, UN_JSON_ARRAY)) != UN_OK)
            goto done;
        un_rule_bind bd[UN_RULE_MAX_BINDS];
        int nb = un_jcur_len(&at);
        if (nb < 1 || nb > UN_RULE_MAX_BINDS) {
            st = un_jcur_error(ctx, UN_ERR_PARSE, &at, "%d occurrences (1..%d)", nb,
                               UN_RULE_MAX_BINDS);
            goto done;
        }
        for (int b = 0; b < nb; b++) {
            un_jcur it = un_jcur_item(&at, b);
            if ((st = parse_bind(ctx, &it, r->src, r->dst, &bd[b])) != UN_OK)
                goto done;
        }
        /* Node ids of r's sides equal those of src/dst: un_rule_make keeps the node order. */
        if ((st = un_rule_var_add(ctx, r, vn, bd, nb)) != UN_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s",
                     un_ctx_errmsg(ctx) ? un_ctx_errmsg(ctx) : "bad variable");
            un_ctx_clear(ctx);
            st = un_jcur_error(ctx, st, &v, "%s", msg);
            goto done;
        }
        un_jcur vc = un_jcur_member(&v, "value");
        if (un_jcur_present(&vc) && value != r->vars[r->n_vars - 1].value) {
            st = un_jcur_error(ctx, UN_ERR_PARSE, &vc,
                               "value %lld differs from the bound parameters' %lld",
                               (long long)value, (long long)r->vars[r->n_vars - 1].value);
            goto done;
        }
    }
    un_jcur cc = un_jcur_member(c, "conds");
    if (un_jcur_present(&cc) && ((st = un_jcur_need_type(ctx, &cc, UN_JSON_ARRAY)) != UN_OK ||
                                 (st = parse_conds(ctx, &cc, r)) != UN_OK))
        goto done;
    *out = r;
    r = NULL;
done:
    un_rule_free(r);
    un_graph_free(src);
    un_graph_free(dst);
    return st;
}

un_status un_rule_from_json(un_ctx *ctx, const un_spec *spec, const char *doc_name,
                            const char *text, size_t len, un_rule **out) {
    un_jdoc *doc = NULL;
    *out = NULL;
    un_status st = un_jdoc_parse(ctx, doc_name, text, len, &doc);
    if (st != UN_OK)
        return st;
    un_jcur root = un_jdoc_root(doc);
    st = un_rule_from_jcur(ctx, spec, &root, out);
    un_jdoc_free(doc);
    return st;
}

/* ---- readable form -----------------------------------------------------------------------------
 */

static const un_rule_var *var_at(const un_rule *r, int side, int32_t node, int param) {
    for (int a = 0; a < r->n_vars; a++)
        for (int b = 0; b < r->vars[a].n_binds; b++) {
            const un_rule_bind *bd = &r->vars[a].binds[b];
            if (bd->side == side && bd->node == node && bd->param == param)
                return &r->vars[a];
        }
    return NULL;
}

static void expr_str(const un_rule *r, int side, un_ref ref, un_buf *b) {
    const un_graph *g = side == UN_RULE_SRC ? r->src : r->dst;
    const un_node *nd = un_graph_node(g, ref.node);
    if (un_op_kind_of(nd->op) == UN_OPK_SOURCE) {
        un_buf_printf(b, "%s", nd->name ? nd->name : "?");
        return;
    }
    const un_op_spec *os = un_spec_op(un_graph_spec(g), nd->op);
    un_buf_printf(b, "%s", os->name);
    un_param dflt[UN_MAX_PARAMS];
    memset(dflt, 0, sizeof dflt);
    un_spec_param_defaults(os, dflt);
    bool any = false;
    for (int i = 0; i < os->n_params; i++) {
        const un_rule_var *v = var_at(r, side, ref.node, i);
        bool parallel = os->kind == UN_OPK_PARALLEL;
        if (!v && !parallel && os->params[i].has_default &&
            !memcmp(&dflt[i], &nd->params[i], sizeof dflt[i]))
            continue;
        un_buf_printf(b, "%s%s=", any ? "," : "[", os->params[i].name);
        any = true;
        if (v && os->params[i].type == UN_PT_LIST) { /* [n1,n2]: a variable per item */
            const un_param *p = &nd->params[i];
            for (int it = 0; it < (p->len < 0 ? 1 : p->len); it++) {
                int a = un_rule_var_at(r, side, ref.node, i, it);
                un_buf_printf(b, "%s", it ? "," : "[");
                if (a >= 0)
                    un_buf_printf(b, "%s", r->vars[a].name);
                else
                    un_buf_printf(b, "%lld", (long long)p->v[it]);
            }
            un_buf_printf(b, "]");
        } else if (v) {
            un_buf_printf(b, "%s", v->name);
        } else {
            un_spec_param_str(&os->params[i], &nd->params[i], b);
        }
    }
    un_buf_printf(b, "%s(", any ? "]" : "");
    for (int j = 0; j < nd->n_in; j++) {
        if (j)
            un_buf_printf(b, ", ");
        expr_str(r, side, nd->in[j], b);
    }
    un_buf_printf(b, ")");
    if (nd->inf.n_out > 1)
        un_buf_printf(b, ":%d", ref.out);
}

void un_rule_str(const un_rule *r, un_buf *out) {
    for (int i = 0; i < r->n_out; i++) {
        expr_str(r, UN_RULE_SRC, r->src_out[i], out);
        un_buf_printf(out, " => ");
        expr_str(r, UN_RULE_DST, r->dst_out[i], out);
        un_buf_printf(out, "\n");
    }
}

/* ---- direction ------------------------------------------------------------------------------ */

un_status un_rule_reverse(un_ctx *ctx, const un_rule *r, un_rule **out) {
    *out = NULL;
    un_rule *b = NULL;
    /* un_rule_make keeps every node's name and id, so the binds carry over with sides swapped */
    un_status st = un_rule_make(ctx, r->dst, r->src, r->dst_out, r->src_out, r->n_out, &b);
    for (int a = 0; st == UN_OK && a < r->n_vars; a++) {
        un_rule_bind bd[UN_RULE_MAX_BINDS];
        for (int i = 0; i < r->vars[a].n_binds; i++) {
            bd[i] = r->vars[a].binds[i];
            bd[i].side = bd[i].side == UN_RULE_SRC ? UN_RULE_DST : UN_RULE_SRC;
        }
        st = un_rule_var_add(ctx, b, r->vars[a].name, bd, r->vars[a].n_binds);
    }
    if (st == UN_OK) {
        snprintf(b->name, sizeof b->name, "%s", r->name);
        b->any_shape = r->any_shape;
        st = un_rule_conds_compute(ctx, b);
    }
    if (st != UN_OK) {
        un_rule_free(b);
        return st;
    }
    *out = b;
    return UN_OK;
}
