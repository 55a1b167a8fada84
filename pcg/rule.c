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
    int32_t *new_id; /* per old id, filled */
} side_copy;

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

static un_status copy_side(un_ctx *ctx, const un_graph *g, const side_copy *sc, un_graph **out) {
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

un_status un_rule_make(un_ctx *ctx, const un_graph *src, const un_graph *dst, const un_ref *src_out,
                       const un_ref *dst_out, int n_out, un_rule **out) {
    *out = NULL;
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
            char sa[96], sb[96];
            un_shape_str(a, sa, sizeof sa);
            un_shape_str(b, sb, sizeof sb);
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "rule: output %d has shape %s in the source but %s in the target",
                                i, sa, sb);
        }
    }
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

/* The merged graph: all of src, then dst's operators wired to src's inputs; its explicit outputs
 * are src_out[perm[0]], dst_out[perm[0]], src_out[perm[1]], ... dst_id maps dst ids to merged ids.
 */
static un_graph *merged_new(const un_rule *r, const int *perm, int32_t *dst_id) {
    un_graph *m = un_graph_clone(r->src);
    int32_t ns = un_graph_node_count(r->src);
    for (int32_t v = 0; v < un_graph_node_count(r->dst); v++) {
        const un_node *nd = un_graph_node(r->dst, v);
        if (un_op_kind_of(nd->op) == UN_OPK_SOURCE) {
            dst_id[v] = un_graph_find(r->src, nd->name);
            continue;
        }
        un_ref in[UN_MAX_INPUTS];
        for (int j = 0; j < nd->n_in; j++)
            in[j] = (un_ref){dst_id[nd->in[j].node], nd->in[j].out};
        un_status st = un_graph_add(NULL, m, nd->op, nd->params, in, nd->n_in, NULL, &dst_id[v]);
        UN_ASSERT(st == UN_OK); /* the same op on the same shapes as in dst */
    }
    (void)ns;
    un_ref outs[2 * UN_RULE_MAX_OUTS];
    for (int i = 0; i < r->n_out; i++) {
        outs[2 * i] = r->src_out[perm[i]];
        outs[2 * i + 1] = (un_ref){dst_id[r->dst_out[perm[i]].node], r->dst_out[perm[i]].out};
    }
    un_status st = un_graph_set_outputs(NULL, m, outs, 2 * r->n_out);
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

/* The output-pair order of least merged hash, and that hash. */
static uint64_t best_perm(const un_rule *r, int *best) {
    int p[UN_RULE_MAX_OUTS];
    for (int i = 0; i < r->n_out; i++)
        p[i] = best[i] = i;
    int32_t *dst_id = un_xmalloc((size_t)un_graph_node_count(r->dst) * sizeof *dst_id + 1);
    uint64_t h_best = 0;
    bool first = true;
    do {
        un_graph *m = merged_new(r, p, dst_id);
        uint64_t h = un_graph_hash(m);
        un_graph_free(m);
        if (first || h < h_best) {
            h_best = h;
            memcpy(best, p, sizeof p);
        }
        first = false;
    } while (perm_next(p, r->n_out));
    free(dst_id);
    return h_best;
}

uint64_t un_rule_hash(const un_rule *r) {
    int perm[UN_RULE_MAX_OUTS];
    return best_perm(r, perm);
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
    best_perm(r, perm);
    int32_t ns = un_graph_node_count(r->src), nd = un_graph_node_count(r->dst);
    int32_t *dst_id = un_xmalloc((size_t)nd * sizeof *dst_id + 1);
    un_graph *m = merged_new(r, perm, dst_id);
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

/* ---- instantiation and random checks --------------------------------------------------------- */

un_status un_rule_instantiate(un_ctx *ctx, const un_rule *r, const int64_t *values,
                              const un_shape *in_shapes, un_rule **out) {
    *out = NULL;
    un_status st = UN_OK;
    un_rule *c = un_xcalloc(1, sizeof *c);
    memcpy(c->name, r->name, sizeof c->name);
    c->n_out = r->n_out;
    c->any_shape = r->any_shape;
    c->n_vars = r->n_vars;
    memcpy(c->vars, r->vars, sizeof c->vars);
    for (int a = 0; values && a < r->n_vars; a++)
        c->vars[a].value = values[a];
    const un_graph *gs[2] = {r->src, r->dst};
    const un_ref *os[2] = {r->src_out, r->dst_out};
    un_graph **ng[2] = {&c->src, &c->dst};
    int n_in = un_rule_input_count(r);
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
                        .values = values,
                        .in_shape = shp,
                        .order = order,
                        .n = n,
                        .names = nm,
                        .outs = os[s],
                        .n_out = r->n_out,
                        .new_id = nid};
        st = copy_side(ctx, gs[s], &sc, ng[s]);
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
    *out = c;
    return UN_OK;
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
    un_buf_printf(out, "],\n\"any_shape\": %s}\n", r->any_shape ? "true" : "false");
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

un_status un_rule_from_jcur(un_ctx *ctx, const un_spec *spec, const un_jcur *c, un_rule **out) {
    static const char *const keys[] = {"name", "src", "dst", "vars", "any_shape", NULL};
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
        if (v)
            un_buf_printf(b, "%s", v->name);
        else
            un_spec_param_str(&os->params[i], &nd->params[i], b);
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
