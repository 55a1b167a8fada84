/* apply.c - a match replaced by the rule's instantiated target, through un_graph_copy_remap:
 * the old graph's kept nodes in an order where the target fits (the nodes that do not depend on
 * the match and come before its last input, then the target, then the rest), dead nodes
 * dropped, every kept node's layout checked against the old one. */
#include "search/apply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TARGET (-1) /* the marker in the copy order where the target goes */

typedef struct apply_state {
    const un_rule *inst; /* the rule instantiated at the match */
    int32_t rule_id;     /* its rules.db id and direction, for the new nodes' names */
    bool reversed;
    const un_match *mt;
    const bool *removed;             /* the match's operator nodes */
    bool out_used[UN_RULE_MAX_OUTS]; /* the mapped output is read by a kept node or is a graph
                                      * output (the target nodes only it needs are not added) */
    int32_t *origin;                 /* new id -> old id, -1 for the target's nodes */
    int32_t origin_cap;
    un_ref tmap[UN_MATCH_MAX_NODES * UN_MAX_OUTPUTS]; /* target node output -> new ref */
} apply_state;

static void origin_set(apply_state *a, int32_t nid, int32_t old) {
    if (nid >= a->origin_cap) {
        int32_t cap = a->origin_cap ? a->origin_cap * 2 : 64;
        while (cap <= nid)
            cap *= 2;
        a->origin = un_xrealloc(a->origin, (size_t)cap * sizeof *a->origin);
        a->origin_cap = cap;
    }
    a->origin[nid] = old;
}

/* The name of target node v: "<anchor>~r<id>[R].<target node>", the anchor being the name of the
 * graph node the rule's first output replaces, up to its first '~' (so a chain of rewrites at one
 * place keeps names short), "n<id>" when unnamed; the target node's own name in the rule, "t<v>"
 * when it has none. A name already taken by a kept node of g or a node of ng gets "#2", "#3", ...
 */
static void target_name(const apply_state *a, const un_graph *g, const un_graph *ng, int32_t v,
                        un_buf *out) {
    int32_t x = a->mt->node[a->inst->src_out[0].node];
    const char *anchor = un_graph_node(g, x)->name;
    const char *tn = un_graph_node(a->inst->dst, v)->name;
    un_buf base = {0};
    if (anchor)
        un_buf_printf(&base, "%.*s", (int)strcspn(anchor, "~"), anchor);
    else
        un_buf_printf(&base, "n%d", (int)x);
    un_buf_printf(&base, "~r%d%s.", (int)a->rule_id, a->reversed ? "R" : "");
    if (tn && *tn && !strchr(tn, ':'))
        un_buf_printf(&base, "%s", tn);
    else
        un_buf_printf(&base, "t%d", (int)v);
    for (int k = 1;; k++) {
        out->len = 0;
        un_buf_printf(out, k == 1 ? "%s" : "%s#%d", base.data, k);
        int32_t old = un_graph_find(g, out->data);
        if ((old < 0 || a->removed[old]) && un_graph_find(ng, out->data) < 0)
            break;
    }
    un_buf_deinit(&base);
}

/* need[v]: target node v of r leads to a mapped output in use (out_used). */
static void target_needed(const un_rule *r, const bool *out_used, bool *need) {
    memset(need, 0, sizeof(bool) * UN_MATCH_MAX_NODES);
    for (int i = 0; i < r->n_out; i++)
        need[r->dst_out[i].node] |= out_used[i];
    for (int32_t v = un_graph_node_count(r->dst) - 1; v >= 0; v--) {
        const un_node *nd = un_graph_node(r->dst, v);
        for (int k = 0; need[v] && k < nd->n_in; k++)
            need[nd->in[k].node] = true;
    }
}

/* Adds the target's nodes over the bound inputs and points the mapped outputs at them. */
static un_status add_target(un_ctx *ctx, apply_state *a, const un_graph *g, un_graph *ng,
                            un_ref *map) {
    const un_rule *r = a->inst;
    const un_graph *dst = r->dst;
    bool need[UN_MATCH_MAX_NODES];
    target_needed(r, a->out_used, need);
    for (int i = 0; i < un_rule_input_count(r); i++) {
        un_ref t = a->mt->input[i];
        un_ref nt = map[t.node * UN_MAX_OUTPUTS + t.out];
        if (nt.node < 0)
            return un_ctx_error(ctx, UN_ERR_INVALID, "apply: input %d of the match is not there",
                                i);
        a->tmap[un_rule_input_dst(r, i) * UN_MAX_OUTPUTS] = nt;
    }
    for (int32_t v = 0; v < un_graph_node_count(dst); v++) {
        const un_node *nd = un_graph_node(dst, v);
        if (un_op_kind_of(nd->op) == UN_OPK_SOURCE || !need[v])
            continue;
        un_ref ins[UN_MAX_INPUTS];
        for (int k = 0; k < nd->n_in; k++)
            ins[k] = a->tmap[nd->in[k].node * UN_MAX_OUTPUTS + nd->in[k].out];
        int32_t nid;
        un_buf name = {0};
        target_name(a, g, ng, v, &name);
        un_status st = un_graph_add(ctx, ng, nd->op, nd->params, ins, nd->n_in, name.data, &nid);
        un_buf_deinit(&name);
        if (st != UN_OK)
            return st;
        origin_set(a, nid, -1);
        for (int o = 0; o < un_graph_node(ng, nid)->inf.n_out; o++)
            a->tmap[v * UN_MAX_OUTPUTS + o] = (un_ref){nid, o};
    }
    const un_match *mt = a->mt;
    for (int i = 0; i < r->n_out; i++) { /* the instantiated source keeps the pattern's ids */
        un_ref so = r->src_out[i], to = r->dst_out[i];
        int32_t x = mt->node[so.node];
        UN_ASSERT(x >= 0);
        map[x * UN_MAX_OUTPUTS + so.out] = a->tmap[to.node * UN_MAX_OUTPUTS + to.out];
    }
    return UN_OK;
}

static un_status apply_node(un_ctx *ctx, void *user, const un_graph *g, int32_t id, un_graph *ng,
                            un_ref *map) {
    apply_state *a = user;
    if (id == TARGET)
        return add_target(ctx, a, g, ng, map);
    int32_t nid;
    un_status st = un_graph_copy_node(ctx, g, id, NULL, ng, map, &nid);
    if (st != UN_OK)
        return st;
    origin_set(a, nid, id);
    const un_node *old = un_graph_node(g, id), *nw = un_graph_node(ng, nid);
    for (int o = 0; o < old->inf.n_out; o++)
        if (!un_shape_eq(&old->inf.out[o], &nw->inf.out[o])) {
            char sa[128], sb[128];
            un_shape_str(&old->inf.out[o], sa, sizeof sa);
            un_shape_str(&nw->inf.out[o], sb, sizeof sb);
            return un_ctx_error(ctx, UN_ERR_MISMATCH,
                                "apply: node %d (%s) output %d was %s and is now %s", (int)id,
                                old->name ? old->name : un_op_name(old->op), o, sa, sb);
        }
    return UN_OK;
}

/* What a rewrite does to g, found before anything is built: the rule instantiated at the match,
 * the removed nodes, and the order the new graph's nodes come in (kept nodes by id, TARGET). */
typedef struct apply_plan {
    un_rule *inst;
    bool own_inst; /* else the cache's */
    bool *removed, *dep, *live;
    int32_t *order, n_order;
    bool out_used[UN_RULE_MAX_OUTS];
} apply_plan;

static void plan_deinit(apply_plan *p) {
    if (p->own_inst)
        un_rule_free(p->inst);
    free(p->removed);
    free(p->dep);
    free(p->live);
    free(p->order);
    *p = (apply_plan){0};
}

static un_status plan(un_ctx *ctx, const un_ruleset *set, const un_graph *g, const un_match *mt,
                      un_inst_cache *cache, apply_plan *p) {
    *p = (apply_plan){0};
    int32_t n = un_graph_node_count(g);
    if (mt->rule < 0 || mt->rule >= un_ruleset_count(set))
        return un_ctx_error(ctx, UN_ERR_INVALID, "apply: no rule entry %d", (int)mt->rule);
    const un_rule *r = un_ruleset_rule(set, mt->rule);
    int n_in = un_rule_input_count(r);
    if (mt->n_nodes != un_graph_node_count(r->src) || mt->n_inputs != n_in)
        return un_ctx_error(ctx, UN_ERR_INVALID, "apply: the match does not fit rule entry %d",
                            (int)mt->rule);
    un_shape shapes[UN_MATCH_MAX_NODES];
    for (int i = 0; i < n_in; i++) {
        un_ref t = mt->input[i];
        if (t.node < 0 || t.node >= n || t.out < 0 || t.out >= un_graph_node(g, t.node)->inf.n_out)
            return un_ctx_error(ctx, UN_ERR_INVALID, "apply: match input %d is not in the graph",
                                i);
        shapes[i] = *un_graph_shape(g, t);
    }
    bool *removed = p->removed = un_xcalloc((size_t)n + 1, sizeof *removed);
    for (int v = 0; v < mt->n_nodes; v++) {
        int32_t x = mt->node[v];
        bool op_node = un_op_kind_of(un_graph_node(r->src, v)->op) != UN_OPK_SOURCE;
        if (op_node != (x >= 0) || x >= n || (x >= 0 && removed[x])) {
            plan_deinit(p);
            return un_ctx_error(ctx, UN_ERR_INVALID, "apply: match node %d is not in the graph", v);
        }
        if (x >= 0)
            removed[x] = true;
    }
    un_status st = un_inst_cache_instantiate(ctx, cache, set, mt->rule, mt->values, shapes,
                                             &p->inst, &p->own_inst);
    if (st != UN_OK) {
        plan_deinit(p);
        return st;
    }
    /* The order: nodes that do not depend on the match and come before its last input; the
     * target; the rest. Then liveness over that order, backwards from the graph outputs. */
    int32_t last_in = -1;
    for (int i = 0; i < n_in; i++)
        last_in = mt->input[i].node > last_in ? mt->input[i].node : last_in;
    bool *dep = p->dep = un_xcalloc((size_t)n + 1, sizeof *dep);
    bool *live = p->live = un_xcalloc((size_t)n + 1, 1);
    int32_t *order = p->order = un_xmalloc(((size_t)n + 2) * sizeof *order);
    for (int32_t x = 0; x < n; x++) {
        const un_node *nd = un_graph_node(g, x);
        for (int k = 0; k < nd->n_in && !dep[x]; k++)
            dep[x] = removed[nd->in[k].node] || dep[nd->in[k].node];
    }
    bool live_target = false;
    for (int32_t i = 0; i < un_graph_output_count(g); i++) {
        int32_t x = un_graph_output(g, i).node;
        live[x] = true;
        live_target |= removed[x];
    }
    for (int32_t x = n - 1; x >= 0; x--) {
        const un_node *nd = un_graph_node(g, x);
        if (un_op_kind_of(nd->op) == UN_OPK_SOURCE)
            live[x] = true;
        if (!live[x] || removed[x])
            continue;
        for (int k = 0; k < nd->n_in; k++) {
            live[nd->in[k].node] = true;
            live_target |= removed[nd->in[k].node];
        }
    }
    for (int i = 0; live_target && i < n_in; i++) /* the target reads the inputs */
        live[mt->input[i].node] = true;
    /* and so do the inputs' own producers: propagate again over the prefix */
    for (int32_t x = last_in; x >= 0; x--) {
        const un_node *nd = un_graph_node(g, x);
        if (!live[x] || removed[x])
            continue;
        for (int k = 0; k < nd->n_in; k++)
            live[nd->in[k].node] = true;
    }
    for (int32_t x = 0; x <= last_in; x++)
        if (live[x] && !removed[x] && !dep[x])
            order[p->n_order++] = x;
    if (live_target)
        order[p->n_order++] = TARGET;
    for (int32_t x = 0; x < n; x++)
        if (live[x] && !removed[x] && (dep[x] || x > last_in))
            order[p->n_order++] = x;
    for (int i = 0; i < r->n_out; i++) {
        un_ref so = r->src_out[i];
        int32_t x = mt->node[so.node];
        for (int32_t k = 0; k < un_graph_output_count(g) && !p->out_used[i]; k++) {
            un_ref o = un_graph_output(g, k);
            p->out_used[i] = o.node == x && o.out == so.out;
        }
        for (int32_t y = x + 1; y < n && !p->out_used[i]; y++) {
            const un_node *nd = un_graph_node(g, y);
            for (int k = 0; live[y] && !removed[y] && k < nd->n_in; k++)
                p->out_used[i] |= nd->in[k].node == x && nd->in[k].out == so.out;
        }
    }
    for (int i = 0; i < n_in; i++)
        if (dep[mt->input[i].node] || removed[mt->input[i].node]) {
            plan_deinit(p);
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "apply: input %d of the match depends on the match (a cycle)", i);
        }
    return UN_OK;
}

un_status un_apply(un_ctx *ctx, const un_ruleset *set, const un_graph *g, const un_match *mt,
                   un_graph **out, int32_t **origin) {
    *out = NULL;
    if (origin)
        *origin = NULL;
    apply_plan p;
    un_status st = plan(ctx, set, g, mt, NULL, &p);
    if (st != UN_OK)
        return st;
    apply_state a = {.inst = p.inst,
                     .rule_id = un_ruleset_rule_id(set, mt->rule),
                     .reversed = un_ruleset_rule_reversed(set, mt->rule),
                     .mt = mt,
                     .removed = p.removed};
    memcpy(a.out_used, p.out_used, sizeof a.out_used);
    for (int i = 0; i < UN_MATCH_MAX_NODES * UN_MAX_OUTPUTS; i++)
        a.tmap[i] = (un_ref){-1, -1};
    un_graph *ng = NULL;
    st = un_graph_copy_remap(ctx, g, p.order, p.n_order, apply_node, &a, &ng, NULL);
    plan_deinit(&p);
    if (st != UN_OK) {
        free(a.origin);
        return st;
    }
    *out = ng;
    if (origin) {
        int32_t nn = un_graph_node_count(ng);
        if (nn > a.origin_cap) /* cannot happen: every new node set its origin */
            origin_set(&a, nn - 1, -1);
        *origin = a.origin;
    } else {
        free(a.origin);
    }
    return UN_OK;
}

/* ---- sketches ---- */

static un_sketch_node *sketch_push(un_sketch *s) {
    if (s->n_nodes == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->node = un_xrealloc(s->node, sizeof *s->node * (size_t)s->cap);
    }
    return &s->node[s->n_nodes++];
}

static void sketch_outputs(un_sketch *s, int32_t n) {
    if (n > s->out_cap) {
        s->out_cap = n;
        s->out = un_xrealloc(s->out, sizeof *s->out * (size_t)n);
    }
    s->n_out = n;
}

static void sketch_reset(un_sketch *s, const un_spec *spec) {
    un_rule_free(s->inst);
    s->inst = NULL;
    s->spec = spec;
    s->n_nodes = 0;
    s->n_out = 0;
}

/* Appends node nd (of any graph) with inputs ins. */
static void sketch_add(un_sketch *s, const un_node *nd, const un_shape *shape, const un_ref *ins) {
    un_sketch_node *v = sketch_push(s);
    v->op = nd->op;
    v->params = nd->params;
    v->name = nd->name;
    v->shape = shape;
    v->n_in = nd->n_in;
    memcpy(v->in, ins, sizeof *ins * (size_t)nd->n_in);
}

void un_sketch_of_graph(const un_graph *g, un_sketch *s) {
    sketch_reset(s, un_graph_spec(g));
    for (int32_t v = 0; v < un_graph_node_count(g); v++) {
        const un_node *nd = un_graph_node(g, v);
        sketch_add(s, nd, &nd->inf.out[0], nd->in);
    }
    sketch_outputs(s, un_graph_output_count(g));
    for (int32_t i = 0; i < s->n_out; i++)
        s->out[i] = un_graph_output(g, i);
}

void un_sketch_deinit(un_sketch *s) {
    un_rule_free(s->inst);
    free(s->node);
    free(s->out);
    *s = (un_sketch){0};
}

/* The nodes un_apply's add_target would add, into s, with map updated like it. */
static bool sketch_target(un_sketch *s, const apply_plan *p, const un_graph *g, const un_match *mt,
                          un_ref *map) {
    const un_rule *r = p->inst;
    const un_graph *dst = r->dst;
    bool need[UN_MATCH_MAX_NODES];
    target_needed(r, p->out_used, need);
    un_ref tmap[UN_MATCH_MAX_NODES * UN_MAX_OUTPUTS];
    for (int i = 0; i < UN_MATCH_MAX_NODES * UN_MAX_OUTPUTS; i++)
        tmap[i] = (un_ref){-1, -1};
    for (int i = 0; i < un_rule_input_count(r); i++) {
        un_ref t = mt->input[i];
        un_ref nt = map[t.node * UN_MAX_OUTPUTS + t.out];
        if (nt.node < 0)
            return false;
        tmap[un_rule_input_dst(r, i) * UN_MAX_OUTPUTS] = nt;
    }
    for (int32_t v = 0; v < un_graph_node_count(dst); v++) {
        const un_node *nd = un_graph_node(dst, v);
        if (un_op_kind_of(nd->op) == UN_OPK_SOURCE || !need[v])
            continue;
        un_ref ins[UN_MAX_INPUTS];
        for (int k = 0; k < nd->n_in; k++) {
            ins[k] = tmap[nd->in[k].node * UN_MAX_OUTPUTS + nd->in[k].out];
            if (ins[k].node < 0)
                return false;
        }
        sketch_add(s, nd, &nd->inf.out[0], ins);
        for (int o = 0; o < nd->inf.n_out; o++)
            tmap[v * UN_MAX_OUTPUTS + o] = (un_ref){s->n_nodes - 1, o};
    }
    for (int i = 0; i < r->n_out; i++) {
        un_ref so = r->src_out[i], to = r->dst_out[i];
        int32_t x = mt->node[so.node];
        map[x * UN_MAX_OUTPUTS + so.out] = tmap[to.node * UN_MAX_OUTPUTS + to.out];
        /* a kept node reading it must see the shape it had, or un_apply's checks decide */
        if (p->out_used[i] &&
            !un_shape_eq(un_graph_shape(dst, to), un_graph_shape(g, (un_ref){x, so.out})))
            return false;
    }
    return true;
}

un_status un_apply_sketch(un_ctx *ctx, const un_ruleset *set, const un_graph *g, const un_match *mt,
                          un_inst_cache *cache, un_sketch *s, bool *exact) {
    *exact = false;
    sketch_reset(s, un_graph_spec(g));
    apply_plan p;
    un_status st = plan(ctx, set, g, mt, cache, &p);
    if (st != UN_OK)
        return st;
    int32_t n = un_graph_node_count(g);
    un_ref *map = un_xmalloc(((size_t)n * UN_MAX_OUTPUTS + 1) * sizeof *map);
    for (size_t i = 0; i < (size_t)n * UN_MAX_OUTPUTS; i++)
        map[i] = (un_ref){-1, -1};
    bool ok = true;
    for (int32_t i = 0; i < p.n_order && ok; i++) {
        int32_t x = p.order[i];
        if (x == TARGET) {
            ok = sketch_target(s, &p, g, mt, map);
            continue;
        }
        const un_node *nd = un_graph_node(g, x);
        un_ref ins[UN_MAX_INPUTS];
        for (int k = 0; k < nd->n_in && ok; k++) {
            ins[k] = map[nd->in[k].node * UN_MAX_OUTPUTS + nd->in[k].out];
            ok = ins[k].node >= 0;
        }
        if (!ok)
            break;
        sketch_add(s, nd, &nd->inf.out[0], ins);
        for (int o = 0; o < nd->inf.n_out; o++)
            map[x * UN_MAX_OUTPUTS + o] = (un_ref){s->n_nodes - 1, o};
    }
    sketch_outputs(s, ok ? un_graph_output_count(g) : 0);
    for (int32_t i = 0; i < s->n_out && ok; i++) {
        un_ref o = un_graph_output(g, i);
        s->out[i] = map[o.node * UN_MAX_OUTPUTS + o.out];
        ok = s->out[i].node >= 0;
    }
    free(map);
    if (p.own_inst) { /* the target's nodes point into it */
        s->inst = p.inst;
        p.inst = NULL;
    }
    plan_deinit(&p);
    *exact = ok;
    return UN_OK;
}

un_status un_apply_dot(un_ctx *ctx, const un_graph *g, const bool *highlight, un_buf *out) {
    un_buf b = {0};
    un_status st = un_graph_to_dot(ctx, g, &b);
    if (st != UN_OK) {
        un_buf_deinit(&b);
        return st;
    }
    /* Each node line starts with "  n<id> [label="; a highlighted one gets its fill replaced. */
    const char *s = b.data;
    while (*s) {
        const char *e = strchr(s, '\n');
        size_t len = e ? (size_t)(e - s) + 1 : strlen(s);
        int id = -1, used = 0;
        if (highlight && sscanf(s, "  n%d [label=%n", &id, &used) == 1 && used > 0 && id >= 0 &&
            id < un_graph_node_count(g) && highlight[id]) {
            /* write the line up to its final "];" and add the colour */
            const char *end = s + len;
            while (end > s && (end[-1] == '\n' || end[-1] == ';' || end[-1] == ']'))
                end--;
            un_buf_printf(out,
                          "%.*s, color=\"#d62728\", penwidth=2.5, style=\"filled\", "
                          "fillcolor=\"#ffd8a8\"];\n",
                          (int)(end - s), s);
        } else {
            un_buf_printf(out, "%.*s", (int)len, s);
        }
        s += len;
    }
    un_buf_deinit(&b);
    return UN_OK;
}
