/* axcheck.c - concrete checks of the spec axioms by the reference evaluator (axcheck.h). */
#include "verify/axcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pcg/eval.h"

#define MAX_SIZES 32

typedef struct sizes {
    const char *names[MAX_SIZES];
    int64_t values[MAX_SIZES];
    int n;
} sizes;

static int64_t size_of(sizes *sz, const char *name, un_rng *rng) {
    char *end;
    long long lit = strtoll(name, &end, 10);
    if (*end == '\0')
        return lit;
    for (int i = 0; i < sz->n; i++)
        if (strcmp(sz->names[i], name) == 0)
            return sz->values[i];
    static const int64_t choice[] = {1, 2, 3, 4, 5, 6, 8};
    int64_t v = choice[un_rng_below(rng, sizeof choice / sizeof choice[0])];
    if (sz->n < MAX_SIZES) {
        sz->names[sz->n] = name;
        sz->values[sz->n++] = v;
    }
    return v;
}

/* "a=4 b=6, ax=1" for messages. */
static void instance_str(const un_axiom *ax, const sizes *sz, const int64_t *pv, un_buf *b) {
    for (int i = 0; i < sz->n; i++)
        un_buf_printf(b, "%s%s=%lld", i ? " " : "", sz->names[i], (long long)sz->values[i]);
    for (int i = 0; i < ax->n_pvars; i++)
        un_buf_printf(b, "%s%s=%lld", i || sz->n ? " " : "", ax->pvar_names[i], (long long)pv[i]);
}

bool un_axlift_is_dim_param(const un_op_spec *os, int param) {
    if (os->kind != UN_OPK_REGULAR || param < 0 || param >= os->n_params ||
        os->params[param].type != UN_PT_INT)
        return false;
    const char *n = os->params[param].name;
    return strcmp(n, "axis") == 0 || strcmp(n, "dim") == 0 || strcmp(n, "dim0") == 0 ||
           strcmp(n, "dim1") == 0;
}

static bool term_lifted(const un_axlift *l, const un_term *t) {
    if (t->kind == UN_TERM_VAR)
        return t->var < 32 && ((l->mask >> t->var) & 1);
    for (int i = 0; i < t->n_args; i++)
        if (term_lifted(l, t->args[i]))
            return true;
    return false;
}

int un_axlift_shift_of(const un_axlift *l, const un_term *t) {
    return l->shift && t->kind == UN_TERM_APP && term_lifted(l, t) ? l->shift : 0;
}

static bool has_dim_literal(const un_spec *spec, const un_term *t) {
    if (t->kind != UN_TERM_APP)
        return false;
    const un_op_spec *os = un_spec_op(spec, t->op);
    for (int i = 0; i < t->n_params; i++) {
        const un_term_param *tp = &t->params[i];
        if (tp->n_items < 0 && un_axlift_is_dim_param(os, tp->param) &&
            tp->items[0]->kind == UN_EX_INT && tp->items[0]->value >= 0)
            return true;
    }
    for (int i = 0; i < t->n_args; i++)
        if (has_dim_literal(spec, t->args[i]))
            return true;
    return false;
}

/* un_term_build (pcg/term.h) with the lift's parameter shift applied. */
static un_status build_term(un_graph *g, const un_axlift *l, const un_term *t, const int64_t *pvals,
                            const int32_t *var_nodes, un_ref *out) {
    const un_axiom *ax = l->ax;
    if (t->kind == UN_TERM_VAR) {
        *out = (un_ref){var_nodes[t->var], 0};
        return UN_OK;
    }
    const un_op_spec *os = un_spec_op(un_graph_spec(g), t->op);
    un_ref args[UN_MAX_INPUTS];
    un_status st;
    if (t->n_args > UN_MAX_INPUTS)
        return UN_ERR_SHAPE;
    for (int i = 0; i < t->n_args; i++)
        if ((st = build_term(g, l, t->args[i], pvals, var_nodes, &args[i])) != UN_OK)
            return st;
    const un_shape *vs[32];
    int nvs = ax->n_vars < 32 ? ax->n_vars : 32;
    for (int i = 0; i < nvs; i++)
        vs[i] = un_graph_shape(g, (un_ref){var_nodes[i], 0});
    un_expr_env env = {.vars = pvals, .n_vars = ax->n_pvars, .in = vs, .n_in = nvs};
    un_param params[UN_MAX_PARAMS];
    un_spec_param_defaults(os, params);
    int shift = un_axlift_shift_of(l, t);
    for (int i = 0; i < t->n_params; i++) {
        const un_term_param *tp = &t->params[i];
        un_param *p = &params[tp->param];
        int n = tp->n_items < 0 ? 1 : tp->n_items;
        p->len = tp->n_items;
        for (int j = 0; j < n && j < UN_MAX_DIMS; j++)
            if ((st = un_expr_eval(NULL, tp->items[j], &env, &p->v[j])) != UN_OK)
                return st;
        if (shift && tp->n_items < 0 && un_axlift_is_dim_param(os, tp->param) &&
            tp->items[0]->kind == UN_EX_INT && tp->items[0]->value >= 0)
            p->v[0] += shift;
    }
    int32_t id;
    if ((st = un_graph_add(NULL, g, t->op, params, args, t->n_args, NULL, &id)) != UN_OK)
        return st;
    if (t->out_index >= un_graph_node(g, id)->inf.n_out)
        return UN_ERR_SHAPE;
    *out = (un_ref){id, t->out_index};
    return UN_OK;
}

/* One instance: 1 holds, 0 not well formed, -1 differs (message recorded in ctx). */
static int check_once(un_ctx *ctx, const un_spec *spec, const un_axlift *lift, int trial,
                      uint64_t seed, un_rng *rng, un_status *err) {
    const un_axiom *ax = lift->ax;
    static const char *const lead[] = {"_l0", "_l1", "_l2"};
    int64_t pv[32] = {0};
    int combo = trial;
    for (int i = 0; i < ax->n_pvars && i < 32; i++) {
        int nv = ax->pvar_nvalues[i] > 0 ? ax->pvar_nvalues[i] : 1;
        pv[i] = ax->pvar_nvalues[i] > 0 ? ax->pvar_values[i][combo % nv].v[0] : 0;
        combo /= nv;
    }
    sizes sz = {.n = 0};
    un_graph *g = un_graph_new(spec);
    int32_t vars[32];
    int ok = 0;
    un_val *a = NULL, *b = NULL;
    un_eval *ev = NULL;
    const un_op_spec *is = un_spec_op(spec, UN_OP_INPUT);
    int i_shape = un_spec_param_index(is, "shape"), i_dtype = un_spec_param_index(is, "dtype"),
        i_range = un_spec_param_index(is, "range");
    for (int v = 0; v < ax->n_vars && v < 32; v++) {
        const un_axiom_var *av = &ax->vars[v];
        un_param p[UN_MAX_PARAMS];
        un_spec_param_defaults(is, p);
        int k = (lift->mask >> v) & 1 ? lift->k : 0;
        if (av->rank + k > UN_MAX_DIMS || k > 3)
            goto done;
        p[i_shape].len = av->rank + k;
        for (int d = 0; d < k; d++)
            p[i_shape].v[d] = size_of(&sz, lead[d], rng);
        for (int d = 0; d < av->rank; d++)
            p[i_shape].v[k + d] = size_of(&sz, av->dims[d], rng);
        if (av->dtype == UN_DT_INT) {
            p[i_dtype].v[0] = 1;
            p[i_range].v[0] = av->range ? size_of(&sz, av->range, rng) : 1;
        }
        if (un_graph_add(NULL, g, UN_OP_INPUT, p, NULL, 0, av->name, &vars[v]) != UN_OK)
            goto done;
    }
    if (ax->require) {
        const un_shape *vs[32];
        for (int v = 0; v < ax->n_vars && v < 32; v++)
            vs[v] = un_graph_shape(g, (un_ref){vars[v], 0});
        un_expr_env env = {.vars = pv, .n_vars = ax->n_pvars, .in = vs, .n_in = ax->n_vars};
        int64_t holds = 0;
        if (un_expr_eval(NULL, ax->require, &env, &holds) != UN_OK || !holds)
            goto done;
    }
    un_ref l, r;
    if (build_term(g, lift, ax->lhs, pv, vars, &l) != UN_OK ||
        build_term(g, lift, ax->rhs, pv, vars, &r) != UN_OK)
        goto done;
    const un_shape *ls = un_graph_shape(g, l), *rs = un_graph_shape(g, r);
    un_buf inst = {0};
    instance_str(ax, &sz, pv, &inst);
    if (!un_shape_eq(ls, rs)) {
        char sa[96], sb[96];
        un_shape_str(ls, sa, sizeof sa);
        un_shape_str(rs, sb, sizeof sb);
        *err = un_ctx_error(ctx, UN_ERR_MISMATCH,
                            "axiom %s%s is wrong: at %s the sides have shapes %s and %s", ax->name,
                            lift->k ? " (lifted)" : "", inst.data ? inst.data : "", sa, sb);
        un_buf_deinit(&inst);
        ok = -1;
        goto done;
    }
    int64_t n = un_shape_numel(ls);
    a = un_xmalloc(sizeof(un_val) * (size_t)(n ? n : 1));
    b = un_xmalloc(sizeof(un_val) * (size_t)(n ? n : 1));
    ok = 1;
    for (int dom = 0; dom < UN_DOM_COUNT && ok == 1; dom++) {
        un_status st = un_eval_new(ctx, g, (un_dom)dom, &ev);
        if (st == UN_OK)
            st = un_eval_fill_random(ev, seed + (uint64_t)trial);
        if (st == UN_OK)
            st = un_eval_run(ev);
        if (st == UN_OK)
            st = un_ptensor_gather(ctx, un_eval_value(ev, l), (un_dom)dom, a);
        if (st == UN_OK)
            st = un_ptensor_gather(ctx, un_eval_value(ev, r), (un_dom)dom, b);
        int64_t where = -1;
        if (st != UN_OK) {
            *err = st;
            ok = -1;
        } else if (!un_dense_equal((un_dom)dom, a, b, n, 1e-9, &where)) {
            char va[48], vb[48];
            if (dom == UN_DOM_FIELD) {
                snprintf(va, sizeof va, "%llu", (unsigned long long)a[where].u);
                snprintf(vb, sizeof vb, "%llu", (unsigned long long)b[where].u);
            } else {
                snprintf(va, sizeof va, "%.17g", a[where].f);
                snprintf(vb, sizeof vb, "%.17g", b[where].f);
            }
            *err = un_ctx_error(ctx, UN_ERR_MISMATCH,
                                "axiom %s%s is wrong: at %s (%s, random inputs seed %llu) element "
                                "%lld of the sides differs: %s vs %s",
                                ax->name, lift->k ? " (lifted)" : "", inst.data ? inst.data : "",
                                dom == UN_DOM_FIELD ? "prime field" : "float64",
                                (unsigned long long)(seed + (uint64_t)trial), (long long)where, va,
                                vb);
            ok = -1;
        }
        un_eval_free(ev);
        ev = NULL;
    }
    un_buf_deinit(&inst);
done:
    free(a);
    free(b);
    un_graph_free(g);
    return ok;
}

un_status un_axcheck_lift(un_ctx *ctx, const un_spec *spec, const un_axlift *l, uint64_t seed,
                          int trials, int want, int *n_good) {
    un_rng rng;
    un_rng_seed(&rng, un_hash_combine(un_hash_bytes(l->ax->name, strlen(l->ax->name), seed),
                                      (uint64_t)l->k * 1000 + l->mask));
    int good = 0;
    un_status st = UN_OK;
    if (n_good)
        *n_good = 0;
    for (int t = 0; t < trials && good < want; t++) {
        int r = check_once(ctx, spec, l, t, seed, &rng, &st);
        if (r < 0)
            return st != UN_OK ? st : UN_ERR_MISMATCH;
        good += r > 0;
    }
    if (n_good)
        *n_good = good;
    if (good < 2 && good < want)
        return un_ctx_error(ctx, UN_ERR_SPEC,
                            "axiom %s is well formed in only %d of %d random instances",
                            l->ax->name, good, trials);
    return UN_OK;
}

un_status un_axcheck_axiom(un_ctx *ctx, const un_spec *spec, const un_axiom *ax, uint64_t seed,
                           int trials, int want, int *n_good) {
    un_axlift l = {ax, 0, 0, 0};
    return un_axcheck_lift(ctx, spec, &l, seed, trials, want, n_good);
}

un_status un_axcheck_lifts(un_ctx *ctx, const un_spec *spec, uint64_t seed, un_axlift **out,
                           int *n) {
    int cap = 64, cnt = 0;
    un_axlift *ls = un_xmalloc(sizeof *ls * (size_t)cap);
    for (int op = 0; op < UN_OP_COUNT; op++) {
        const un_op_spec *os = un_spec_op(spec, (un_op)op);
        for (int a = 0; a < os->n_axioms; a++) {
            const un_axiom *ax = &os->axioms[a];
            if (ax->n_vars < 1 || ax->n_vars > 30)
                continue;
            uint32_t full = (1u << ax->n_vars) - 1;
            un_axlift cands[40];
            int nc = 0;
            bool shifts = has_dim_literal(spec, ax->lhs) || has_dim_literal(spec, ax->rhs);
            for (int sh = 0; sh < (shifts ? 2 : 1); sh++) {
                if (ax->n_vars <= 4)
                    for (uint32_t m = 1; m <= full; m++)
                        cands[nc++] = (un_axlift){ax, 1, m, sh};
                else
                    cands[nc++] = (un_axlift){ax, 1, full, sh};
                cands[nc++] = (un_axlift){ax, 2, full, 2 * sh};
            }
            for (int c = 0; c < nc; c++) {
                int good = 0;
                un_status st = un_axcheck_lift(ctx, spec, &cands[c], seed, 24, 4, &good);
                un_ctx_clear(ctx);
                if (st != UN_OK || good < 3)
                    continue;
                if (cnt == cap)
                    ls = un_xrealloc(ls, sizeof *ls * (size_t)(cap *= 2));
                ls[cnt++] = cands[c];
            }
        }
    }
    *out = ls;
    *n = cnt;
    return UN_OK;
}

un_status un_axcheck_all(un_ctx *ctx, const un_spec *spec, uint64_t seed, un_axcheck_stats *stats) {
    un_axcheck_stats s = {0, 0};
    un_status st = UN_OK;
    for (int op = 0; op < UN_OP_COUNT && st == UN_OK; op++) {
        const un_op_spec *os = un_spec_op(spec, (un_op)op);
        for (int a = 0; a < os->n_axioms && st == UN_OK; a++) {
            int good = 0;
            st = un_axcheck_axiom(ctx, spec, &os->axioms[a], seed, 40, 4, &good);
            s.n_axioms++;
            s.n_instances += good;
        }
    }
    if (stats)
        *stats = s;
    return st;
}
