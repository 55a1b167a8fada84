/* verify.c - the Z3 encoding of operators, shape rules, spec axioms and rules (verify.h). The only
 * file that includes z3.h. Z3 runs in a non-reference-counted context (ASTs live as long as the
 * context), so the context is rebuilt every REBUILD_EVERY proofs to bound memory; solvers, params,
 * models and AST vectors are reference counted and released in the function that made them. */
#include "verify/verify.h"
#include "verify/axcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <z3.h>

#define NPV_MAX       (UN_MAX_PARAMS * (1 + UN_MAX_DIMS)) /* flattened parameters of one op */
#define REBUILD_EVERY 512
#define MAX_CONDS     512

struct un_verifier {
    const un_spec *spec;
    Z3_context z;
    Z3_sort T, I, B;
    Z3_func_decl rank, dim;
    Z3_func_decl fn[UN_OP_COUNT][UN_MAX_OUTPUTS][UN_MAX_INPUTS + 1];
    int np[UN_OP_COUNT];                  /* flattened parameter count */
    int poff[UN_OP_COUNT][UN_MAX_PARAMS]; /* offset of each parameter in the flat vector */
    int n_bg;
    Z3_ast *bg;      /* shape axioms */
    uint64_t *bg_op; /* the operator each is about (bit mask) */
    int n_ax;
    Z3_ast *ax;    /* one formula per encoded spec axiom */
    Z3_ast *track; /* its tracking literal (named after the axiom) */
    const char **ax_name;
    un_axlift *ax_lift;  /* what each encodes (its shape-correctness proof re-encodes it) */
    uint64_t *ax_ops[2]; /* operators of each side (bit masks) */
    int n_trivial;       /* axioms that hold trivially once parallel ops are identities */
    un_buf skipped;      /* "name: reason; " for axioms left out */
    un_axlift *lifts;    /* checked lifted axioms to encode too */
    int n_lifts;
    char **names; /* tracking names of lifted axioms (owned) */
    int n_names;
    int uses;      /* proofs since the context was built */
    bool *learned; /* per axiom: a full-set proof of an earlier rule needed it beyond its narrow
                    * set (n_learned entries; kept across context rebuilds, which encode the
                    * same axioms in the same order) */
    int n_learned;
    signed char *shape_ok; /* per axiom: holds in the shape model (1), not proven to (-1), not
                            * tried yet (0); n_learned entries, kept across rebuilds like learned */
    Z3_solver solver;      /* every shape axiom and spec axiom, each behind an activation literal */
    Z3_ast op_lit[UN_OP_COUNT]; /* activates an operator's shape axioms */
    Z3_ast op_off[UN_OP_COUNT]; /* their negations, and those of track[] (each check assumes one
                                 * of the two for every literal), made on first use: once per
                                 * context, when they were made (their ids order Z3's search) */
    Z3_ast *track_off;
    bool *ax_in;        /* per axiom: asserted in the solver (on first use) */
    uint64_t bg_in_ops; /* operators whose shape axioms are asserted */
    bool failed;        /* a Z3 call failed since the last check */
    char msg[256];
};

/* ---- Z3 errors ------------------------------------------------------------------------------ */

/* Replaces the default handler (which exits): errors are polled with z3_ok. */
static void on_z3_error(Z3_context c, Z3_error_code e) {
    (void)c;
    (void)e;
}

static bool z3_ok(un_verifier *v) {
    Z3_error_code e = Z3_get_error_code(v->z);
    if (e != Z3_OK && !v->failed) {
        v->failed = true;
        snprintf(v->msg, sizeof v->msg, "z3: %s", Z3_get_error_msg(v->z, e));
    }
    return !v->failed;
}

/* ---- small AST helpers ---------------------------------------------------------------------- */

static Z3_ast mk_int(un_verifier *v, int64_t x) { return Z3_mk_int64(v->z, x, v->I); }
static Z3_ast mk_true(un_verifier *v) { return Z3_mk_true(v->z); }
static Z3_ast mk_eq(un_verifier *v, Z3_ast a, Z3_ast b) { return Z3_mk_eq(v->z, a, b); }
static Z3_ast mk_not(un_verifier *v, Z3_ast a) { return Z3_mk_not(v->z, a); }
static Z3_ast mk_ite(un_verifier *v, Z3_ast c, Z3_ast a, Z3_ast b) {
    return Z3_mk_ite(v->z, c, a, b);
}
static Z3_ast mk_and2(un_verifier *v, Z3_ast a, Z3_ast b) {
    if (!a)
        return b;
    Z3_ast x[2] = {a, b};
    return Z3_mk_and(v->z, 2, x);
}
static Z3_ast mk_or2(un_verifier *v, Z3_ast a, Z3_ast b) {
    Z3_ast x[2] = {a, b};
    return Z3_mk_or(v->z, 2, x);
}
static Z3_ast mk_add2(un_verifier *v, Z3_ast a, Z3_ast b) {
    Z3_ast x[2] = {a, b};
    return Z3_mk_add(v->z, 2, x);
}
static Z3_ast mk_sub2(un_verifier *v, Z3_ast a, Z3_ast b) {
    Z3_ast x[2] = {a, b};
    return Z3_mk_sub(v->z, 2, x);
}
static Z3_ast mk_mul2(un_verifier *v, Z3_ast a, Z3_ast b) {
    Z3_ast x[2] = {a, b};
    return Z3_mk_mul(v->z, 2, x);
}
static Z3_ast mk_lt(un_verifier *v, Z3_ast a, Z3_ast b) { return Z3_mk_lt(v->z, a, b); }
static Z3_ast mk_le(un_verifier *v, Z3_ast a, Z3_ast b) { return Z3_mk_le(v->z, a, b); }
static Z3_ast mk_rank(un_verifier *v, Z3_ast t) { return Z3_mk_app(v->z, v->rank, 1, &t); }
static Z3_ast mk_dim(un_verifier *v, Z3_ast t, Z3_ast i) {
    Z3_ast x[2] = {t, i};
    return Z3_mk_app(v->z, v->dim, 2, x);
}
static Z3_ast mk_fresh(un_verifier *v, const char *prefix, Z3_sort s) {
    return Z3_mk_fresh_const(v->z, prefix, s);
}
/* A negative index counts from the end of a list or tensor of length n. */
static Z3_ast mk_norm(un_verifier *v, Z3_ast i, Z3_ast n) {
    return mk_ite(v, mk_lt(v, i, mk_int(v, 0)), mk_add2(v, i, n), i);
}

/* A list of conditions (conjoined at the end). */
typedef struct conds {
    int n;
    Z3_ast c[MAX_CONDS];
    bool overflow;
} conds;

static void conds_add(conds *cs, Z3_ast c) {
    if (cs->n < MAX_CONDS)
        cs->c[cs->n++] = c;
    else
        cs->overflow = true;
}

static Z3_ast conds_and(un_verifier *v, const conds *cs) {
    return cs->n ? Z3_mk_and(v->z, (unsigned)cs->n, cs->c) : mk_true(v);
}

/* ---- expressions (pcg/expr.h) to Z3 integers and booleans -------------------------------------
 */

typedef struct xenv {
    un_verifier *v;
    const Z3_ast *in; /* tensor id -> tensor (inputs, or an axiom's tensor variables) */
    int n_in;
    const Z3_ast *out; /* UN_EX_OUT + j -> output tensor */
    int n_out;
    const un_op_spec *os; /* parameters: os->params, flattened in pv at poff */
    const Z3_ast *pv;
    const int *poff;
    const Z3_ast *vars; /* variable slots */
    int n_vars;
    Z3_ast pc;   /* path condition of the current subexpression, NULL = true */
    conds *defs; /* definedness conditions (index in range, no division by zero), or NULL */
    bool bad;    /* the expression refers to something this environment lacks */
} xenv;

static Z3_ast tr_bool(xenv *e, const un_expr *x);
static Z3_ast bool_as_int(xenv *e, const un_expr *x);

static void add_def(xenv *e, Z3_ast c) {
    if (!e->defs)
        return;
    un_verifier *v = e->v;
    conds_add(e->defs, e->pc ? Z3_mk_implies(v->z, e->pc, c) : c);
}

static Z3_ast tensor_of(xenv *e, int32_t ref) {
    if (ref < UN_EX_OUT && ref < e->n_in && e->in)
        return e->in[ref];
    if (ref < UN_EX_OUT && e->os && ref < e->os->n_inputs) {
        /* an optional input that is absent: defined nowhere on this path */
        add_def(e, Z3_mk_false(e->v->z));
        return Z3_mk_const(e->v->z, Z3_mk_string_symbol(e->v->z, "absent"), e->v->T);
    }
    if (ref >= UN_EX_OUT && ref - UN_EX_OUT < e->n_out && e->out)
        return e->out[ref - UN_EX_OUT];
    e->bad = true;
    return NULL;
}

static bool param_is_list(const xenv *e, int32_t ref) {
    return e->os && ref < e->os->n_params && e->os->params[ref].type == UN_PT_LIST;
}

static Z3_ast tr_int(xenv *e, const un_expr *x) {
    un_verifier *v = e->v;
    switch (x->kind) {
    case UN_EX_INT:
        return mk_int(v, x->value);
    case UN_EX_PARAM:
        if (!e->os || x->ref >= e->os->n_params)
            break;
        return e->pv[e->poff[x->ref]];
    case UN_EX_LEN:
        if (!e->os || x->ref >= e->os->n_params)
            break;
        return param_is_list(e, x->ref) ? e->pv[e->poff[x->ref]] : mk_int(v, 1);
    case UN_EX_PARAM_AT: {
        if (!e->os || x->ref >= e->os->n_params)
            break;
        int off = e->poff[x->ref];
        bool list = param_is_list(e, x->ref);
        Z3_ast len = list ? e->pv[off] : mk_int(v, 1);
        Z3_ast idx = tr_int(e, x->a);
        if (!idx)
            return NULL;
        Z3_ast n = mk_norm(v, idx, len);
        add_def(e, mk_and2(v, mk_le(v, mk_int(v, 0), n), mk_lt(v, n, len)));
        if (!list)
            return e->pv[off];
        Z3_ast acc = mk_int(v, 0);
        for (int j = UN_MAX_DIMS - 1; j >= 0; j--)
            acc = mk_ite(v, mk_eq(v, n, mk_int(v, j)), e->pv[off + 1 + j], acc);
        return acc;
    }
    case UN_EX_VAR:
        if (!e->vars || x->ref >= e->n_vars)
            break;
        return e->vars[x->ref];
    case UN_EX_DIM:
    case UN_EX_RANK:
    case UN_EX_NUMEL: {
        Z3_ast t = tensor_of(e, x->ref);
        if (!t)
            return NULL;
        Z3_ast r = mk_rank(v, t);
        if (x->kind == UN_EX_RANK)
            return r;
        if (x->kind == UN_EX_NUMEL) {
            Z3_ast acc = mk_int(v, 1);
            for (int n = UN_MAX_DIMS; n >= 1; n--) {
                Z3_ast prod = mk_dim(v, t, mk_int(v, 0));
                for (int j = 1; j < n; j++)
                    prod = mk_mul2(v, prod, mk_dim(v, t, mk_int(v, j)));
                acc = mk_ite(v, mk_eq(v, r, mk_int(v, n)), prod, acc);
            }
            return acc;
        }
        if (x->a->kind == UN_EX_INT) {
            int64_t c = x->a->value;
            if (c >= 0) {
                add_def(e, mk_lt(v, mk_int(v, c), r));
                return mk_dim(v, t, mk_int(v, c));
            }
            Z3_ast n = mk_add2(v, r, mk_int(v, c));
            add_def(e, mk_le(v, mk_int(v, 0), n));
            return mk_dim(v, t, n);
        }
        Z3_ast idx = tr_int(e, x->a);
        if (!idx)
            return NULL;
        Z3_ast n = mk_norm(v, idx, r);
        add_def(e, mk_and2(v, mk_le(v, mk_int(v, 0), n), mk_lt(v, n, r)));
        return mk_dim(v, t, n);
    }
    case UN_EX_NEG: {
        Z3_ast a = tr_int(e, x->a);
        return a ? Z3_mk_unary_minus(v->z, a) : NULL;
    }
    case UN_EX_MIN:
    case UN_EX_MAX: {
        Z3_ast a = tr_int(e, x->a), b = a ? tr_int(e, x->b) : NULL;
        if (!b)
            return NULL;
        Z3_ast lt = mk_lt(v, a, b);
        return x->kind == UN_EX_MIN ? mk_ite(v, lt, a, b) : mk_ite(v, lt, b, a);
    }
    case UN_EX_BIN:
        if (x->op <= UN_BIN_MOD) {
            Z3_ast a = tr_int(e, x->a), b = a ? tr_int(e, x->b) : NULL;
            if (!b)
                return NULL;
            switch (x->op) {
            case UN_BIN_ADD:
                return mk_add2(v, a, b);
            case UN_BIN_SUB:
                return mk_sub2(v, a, b);
            case UN_BIN_MUL:
                return mk_mul2(v, a, b);
            default: {
                /* floor division as pcg/expr.c computes it; Z3's div is Euclidean */
                Z3_ast zero = mk_int(v, 0);
                add_def(e, mk_not(v, mk_eq(v, b, zero)));
                Z3_ast q =
                    mk_ite(v, mk_lt(v, zero, b), Z3_mk_div(v->z, a, b),
                           Z3_mk_div(v->z, Z3_mk_unary_minus(v->z, a), Z3_mk_unary_minus(v->z, b)));
                return x->op == UN_BIN_DIV ? q : mk_sub2(v, a, mk_mul2(v, b, q));
            }
            }
        }
        return bool_as_int(e, x);
    case UN_EX_NOT:
        return bool_as_int(e, x);
    default:
        break;
    }
    e->bad = true;
    return NULL;
}

static Z3_ast bool_as_int(xenv *e, const un_expr *x) {
    un_verifier *v = e->v;
    {
        Z3_ast c = tr_bool(e, x);
        return c ? mk_ite(v, c, mk_int(v, 1), mk_int(v, 0)) : NULL;
    }
}

static Z3_ast tr_bool(xenv *e, const un_expr *x) {
    un_verifier *v = e->v;
    if (x->kind == UN_EX_NOT) {
        Z3_ast a = tr_bool(e, x->a);
        return a ? mk_not(v, a) : NULL;
    }
    if (x->kind != UN_EX_BIN || x->op <= UN_BIN_MOD) {
        Z3_ast a = tr_int(e, x);
        return a ? mk_not(v, mk_eq(v, a, mk_int(v, 0))) : NULL;
    }
    if (x->op == UN_BIN_AND || x->op == UN_BIN_OR) {
        Z3_ast a = tr_bool(e, x->a);
        if (!a)
            return NULL;
        Z3_ast saved = e->pc;
        e->pc = mk_and2(v, saved, x->op == UN_BIN_AND ? a : mk_not(v, a));
        Z3_ast b = tr_bool(e, x->b);
        e->pc = saved;
        if (!b)
            return NULL;
        return x->op == UN_BIN_AND ? mk_and2(v, a, b) : mk_or2(v, a, b);
    }
    Z3_ast a = tr_int(e, x->a), b = a ? tr_int(e, x->b) : NULL;
    if (!b)
        return NULL;
    switch (x->op) {
    case UN_BIN_EQ:
        return mk_eq(v, a, b);
    case UN_BIN_NE:
        return mk_not(v, mk_eq(v, a, b));
    case UN_BIN_LT:
        return mk_lt(v, a, b);
    case UN_BIN_LE:
        return mk_le(v, a, b);
    case UN_BIN_GT:
        return mk_lt(v, b, a);
    default:
        return mk_le(v, b, a);
    }
}

/* ---- operators ------------------------------------------------------------------------------ */

static Z3_ast when_z3(un_verifier *v, un_op op, const un_when *w, const Z3_ast *pv) {
    Z3_ast c = mk_true(v);
    for (int j = 0; j < w->n; j++)
        c = mk_and2(v, c, mk_eq(v, pv[v->poff[op][w->param[j]]], mk_int(v, w->value[j])));
    return c;
}

/* Conditions under which op applied to args (n of them) with flat parameters pv is well formed:
 * parameter domains, which optional inputs are present, input ranks, and every `require` with its
 * definedness conditions. Appended to cs; false when the op cannot take n inputs at all. */
static bool op_wf(un_verifier *v, un_op op, int n, const Z3_ast *args, const Z3_ast *pv,
                  conds *cs) {
    const un_op_spec *os = un_spec_op(v->spec, op);
    for (int i = 0; i < os->n_params; i++) {
        const un_param_spec *ps = &os->params[i];
        const Z3_ast *p = &pv[v->poff[op][i]];
        if (ps->type == UN_PT_LIST) {
            conds_add(cs, mk_le(v, mk_int(v, 0), p[0]));
            conds_add(cs, mk_le(v, p[0], mk_int(v, UN_MAX_DIMS)));
            for (int j = 0; j < UN_MAX_DIMS; j++)
                conds_add(cs, Z3_mk_implies(v->z, mk_lt(v, mk_int(v, j), p[0]),
                                            mk_and2(v, mk_le(v, mk_int(v, ps->min), p[1 + j]),
                                                    mk_le(v, p[1 + j], mk_int(v, ps->max)))));
            continue;
        }
        int64_t lo = ps->min, hi = ps->max;
        if (ps->type == UN_PT_BOOL)
            lo = 0, hi = 1;
        else if (ps->type == UN_PT_ENUM)
            lo = 0, hi = ps->n_enum - 1;
        conds_add(cs, mk_le(v, mk_int(v, lo), p[0]));
        conds_add(cs, mk_le(v, p[0], mk_int(v, hi)));
    }
    for (int j = 0; j < os->n_inputs; j++) {
        const un_input_spec *is = &os->inputs[j];
        if (is->when.n == 0 && j >= n)
            return false;
        if (is->when.n > 0) {
            Z3_ast w = when_z3(v, op, &is->when, pv);
            conds_add(cs, j < n ? w : mk_not(v, w));
        }
        if (j < n) {
            Z3_ast r = mk_rank(v, args[j]);
            conds_add(cs, is->rank >= 0 ? mk_eq(v, r, mk_int(v, is->rank))
                                        : mk_le(v, mk_int(v, is->min_rank), r));
        }
    }
    if (n > os->n_inputs)
        return false;
    xenv e = {.v = v, .in = args, .n_in = n, .os = os, .pv = pv, .poff = v->poff[op], .defs = cs};
    int64_t vars_i[UN_VAR_COUNT] = {1, 0, 0};
    Z3_ast vars[UN_VAR_COUNT];
    for (int i = 0; i < UN_VAR_COUNT; i++)
        vars[i] = mk_int(v, vars_i[i]);
    e.vars = vars;
    e.n_vars = UN_VAR_COUNT;
    for (int i = 0; i < os->n_require; i++) {
        Z3_ast c = tr_bool(&e, os->require[i]);
        if (!c)
            return false;
        conds_add(cs, c);
    }
    return !e.bad;
}

static Z3_ast op_app(un_verifier *v, un_op op, int out, int n, const Z3_ast *args,
                     const Z3_ast *pv) {
    Z3_func_decl f = out < UN_MAX_OUTPUTS && n <= UN_MAX_INPUTS ? v->fn[op][out][n] : NULL;
    if (!f)
        return NULL;
    Z3_ast all[UN_MAX_INPUTS + NPV_MAX];
    memcpy(all, args, sizeof(Z3_ast) * (size_t)n);
    memcpy(all + n, pv, sizeof(Z3_ast) * (size_t)v->np[op]);
    return Z3_mk_app(v->z, f, (unsigned)(n + v->np[op]), all);
}

/* Whether 0 <= i < n. */
static Z3_ast mk_in_range(un_verifier *v, Z3_ast i, Z3_ast n) {
    return mk_and2(v, mk_le(v, mk_int(v, 0), i), mk_lt(v, i, n));
}

/* The dims of output spec `o` at index i (before a drop), as a Z3 term. A dim is set only in
 * range: an index out of range keeps the input's dim there (the shape model of README step 4
 * needs every output's dims out of range to be its inputs', or 0). */
static Z3_ast out_dim_set(xenv *e, const un_output_spec *os, Z3_ast like, Z3_ast i) {
    un_verifier *v = e->v;
    Z3_ast rl = mk_rank(v, like);
    Z3_ast acc = mk_dim(v, like, i);
    for (int j = 0; j < os->n_set; j++) {
        Z3_ast at = tr_int(e, os->set_at[j]), val = tr_int(e, os->set_val[j]);
        if (!at || !val)
            return NULL;
        acc =
            mk_ite(v, mk_and2(v, mk_eq(v, i, mk_norm(v, at, rl)), mk_in_range(v, i, rl)), val, acc);
    }
    return acc;
}

/* Shape axioms of fn[op][o][n]: the rank and every dim of the output, from the spec's output rule.
 */
static bool shape_axioms(un_verifier *v, un_op op, int o, int n) {
    const un_op_spec *os = un_spec_op(v->spec, op);
    const un_output_spec *spec = &os->outputs[os->outputs_count ? 0 : o];
    Z3_ast a[UN_MAX_INPUTS], p[NPV_MAX], i = mk_fresh(v, "i", v->I);
    Z3_app bound[UN_MAX_INPUTS + NPV_MAX + 1];
    int nb = 0;
    for (int j = 0; j < n; j++)
        bound[nb++] = Z3_to_app(v->z, a[j] = mk_fresh(v, "a", v->T));
    for (int j = 0; j < v->np[op]; j++)
        bound[nb++] = Z3_to_app(v->z, p[j] = mk_fresh(v, "p", v->I));
    Z3_ast app = op_app(v, op, o, n, a, p);
    Z3_ast vars[UN_VAR_COUNT] = {mk_int(v, 1), mk_int(v, 0), mk_int(v, o)};
    xenv e = {.v = v,
              .in = a,
              .n_in = n,
              .os = os,
              .pv = p,
              .poff = v->poff[op],
              .vars = vars,
              .n_vars = UN_VAR_COUNT};
    Z3_ast rank, dim;
    if (spec->like >= 0) {
        if (spec->like >= n)
            return true; /* this input count cannot produce the output */
        Z3_ast like = a[spec->like], rl = mk_rank(v, like);
        rank = rl;
        dim = out_dim_set(&e, spec, like, i);
        if (spec->drop) {
            Z3_ast dropping = when_z3(v, op, &spec->drop_when, p);
            Z3_ast at = tr_int(&e, spec->drop);
            Z3_ast next = out_dim_set(&e, spec, like, mk_add2(v, i, mk_int(v, 1)));
            if (!at || !next || !dim)
                return false;
            Z3_ast nat = mk_norm(v, at, rl);
            rank = mk_ite(v, dropping, mk_sub2(v, rl, mk_int(v, 1)), rl);
            /* the same as `i < nat` for nat in range; with nat out of range too, every dim out of
             * the output's range is an input's dim out of its range (README step 4) */
            Z3_ast before =
                mk_or2(v, mk_lt(v, i, mk_int(v, 0)),
                       mk_and2(v, mk_lt(v, i, nat), mk_lt(v, i, mk_sub2(v, rl, mk_int(v, 1)))));
            dim = mk_ite(v, dropping, mk_ite(v, before, dim, next), dim);
        }
    } else if (spec->dims_param >= 0) {
        const Z3_ast *lp = &p[v->poff[op][spec->dims_param]];
        rank = lp[0];
        dim = mk_int(v, 0);
        for (int j = UN_MAX_DIMS - 1; j >= 0; j--) /* items past the length are not dims */
            dim = mk_ite(v, mk_and2(v, mk_eq(v, i, mk_int(v, j)), mk_lt(v, mk_int(v, j), rank)),
                         lp[1 + j], dim);
    } else {
        rank = mk_int(v, spec->n_dims);
        dim = mk_int(v, 0);
        for (int j = spec->n_dims - 1; j >= 0; j--) {
            Z3_ast d = tr_int(&e, spec->dims[j]);
            if (!d)
                return false;
            dim = mk_ite(v, mk_eq(v, i, mk_int(v, j)), d, dim);
        }
    }
    if (!dim || e.bad)
        return false;
    Z3_pattern pat1 = Z3_mk_pattern(v->z, 1, &app);
    Z3_ast q1 =
        Z3_mk_forall_const(v->z, 0, (unsigned)nb, bound, 1, &pat1, mk_eq(v, mk_rank(v, app), rank));
    Z3_ast dapp = mk_dim(v, app, i);
    Z3_pattern pat2 = Z3_mk_pattern(v->z, 1, &dapp);
    bound[nb] = Z3_to_app(v->z, i);
    Z3_ast q2 = Z3_mk_forall_const(v->z, 0, (unsigned)nb + 1, bound, 1, &pat2, mk_eq(v, dapp, dim));
    v->bg = un_xrealloc(v->bg, sizeof(Z3_ast) * (size_t)(v->n_bg + 2));
    v->bg_op = un_xrealloc(v->bg_op, sizeof(uint64_t) * (size_t)(v->n_bg + 2));
    v->bg_op[v->n_bg] = v->bg_op[v->n_bg + 1] = (uint64_t)1 << op;
    v->bg[v->n_bg++] = q1;
    v->bg[v->n_bg++] = q2;
    return z3_ok(v);
}

/* ---- spec axioms ---------------------------------------------------------------------------- */

typedef struct axb {
    un_verifier *v;
    const un_axiom *ax;
    int k;         /* lifted: extra leading dims ... */
    uint32_t mask; /* ... of these variables */
    const un_axlift *lift;
    const Z3_ast *X, *P;
    bool abstract; /* replace compound parameter expressions by fresh variables */
    bool used_x[32], used_p[32];
    Z3_app qv[64]; /* the fresh variables */
    int n_qv;
    conds *guard;
    bool bad;
    char why[128];
} axb;

static Z3_ast ax_term(axb *b, const un_term *t) {
    un_verifier *v = b->v;
    if (t->kind == UN_TERM_VAR) {
        if (t->var < 32)
            b->used_x[t->var] = true;
        return b->X[t->var];
    }
    if (un_op_kind_of(t->op) == UN_OPK_PARALLEL)
        return t->n_args == 1 ? ax_term(b, t->args[0]) : NULL;
    if (un_op_kind_of(t->op) != UN_OPK_REGULAR || t->n_args > UN_MAX_INPUTS) {
        snprintf(b->why, sizeof b->why, "operator %s cannot appear in a term", un_op_name(t->op));
        return NULL;
    }
    const un_op_spec *os = un_spec_op(v->spec, t->op);
    Z3_ast args[UN_MAX_INPUTS], pv[NPV_MAX];
    for (int i = 0; i < t->n_args; i++)
        if (!(args[i] = ax_term(b, t->args[i])))
            return NULL;
    un_param dflt[UN_MAX_PARAMS];
    un_spec_param_defaults(os, dflt);
    int shift = un_axlift_shift_of(b->lift, t);
    for (int i = 0; i < os->n_params; i++) {
        int off = v->poff[t->op][i];
        if (os->params[i].type == UN_PT_LIST) {
            pv[off] = mk_int(v, dflt[i].len < 0 ? 0 : dflt[i].len);
            for (int j = 0; j < UN_MAX_DIMS; j++)
                pv[off + 1 + j] = mk_int(v, j < dflt[i].len ? dflt[i].v[j] : 0);
        } else {
            pv[off] = mk_int(v, dflt[i].v[0]);
        }
    }
    xenv e = {.v = v,
              .in = b->X,
              .n_in = b->ax->n_vars,
              .vars = b->P,
              .n_vars = b->ax->n_pvars,
              .defs = b->guard};
    for (int i = 0; i < t->n_params; i++) {
        const un_term_param *tp = &t->params[i];
        int off = v->poff[t->op][tp->param];
        bool list = os->params[tp->param].type == UN_PT_LIST;
        int n = tp->n_items < 0 ? 1 : tp->n_items;
        if (list) {
            pv[off] = mk_int(v, tp->n_items < 0 ? 1 : tp->n_items);
            for (int j = 0; j < UN_MAX_DIMS; j++)
                pv[off + 1 + j] = mk_int(v, 0);
        }
        for (int j = 0; j < n && j < UN_MAX_DIMS; j++) {
            const un_expr *x = tp->items[j];
            Z3_ast val;
            if (x->kind == UN_EX_VAR && x->ref < b->ax->n_pvars) {
                if (x->ref < 32)
                    b->used_p[x->ref] = true;
                val = b->P[x->ref];
            } else if (shift && tp->n_items < 0 && x->kind == UN_EX_INT && x->value >= 0 &&
                       un_axlift_is_dim_param(os, tp->param)) {
                val = mk_int(v, x->value + shift);
            } else {
                val = tr_int(&e, x);
                if (!val || e.bad) {
                    snprintf(b->why, sizeof b->why, "cannot translate a parameter of %s", os->name);
                    return NULL;
                }
                if (b->abstract && x->kind != UN_EX_INT && b->n_qv < 64) {
                    Z3_ast q = mk_fresh(v, "q", v->I);
                    b->qv[b->n_qv++] = Z3_to_app(v->z, q);
                    conds_add(b->guard, mk_eq(v, q, val));
                    val = q;
                }
            }
            pv[off + (list ? 1 + j : 0)] = val;
        }
    }
    if (!op_wf(v, t->op, t->n_args, args, pv, b->guard)) {
        snprintf(b->why, sizeof b->why, "%s cannot take %d inputs", os->name, t->n_args);
        return NULL;
    }
    Z3_ast app = op_app(v, t->op, t->out_index, t->n_args, args, pv);
    if (!app)
        snprintf(b->why, sizeof b->why, "%s has no output %d", os->name, t->out_index);
    return app;
}

/* The guard on an axiom's variables: declared ranks, sizes (equal names equal, literals fixed,
 * every size >= 1) and the side condition. */
static bool ax_var_guard(axb *b, conds *cs) {
    un_verifier *v = b->v;
    const un_axiom *ax = b->ax;
    const char *names[64];
    Z3_ast first[64];
    int n_names = 0;
    Z3_ast lead[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < ax->n_vars; i++) {
        const un_axiom_var *av = &ax->vars[i];
        int k = (b->mask >> i) & 1 ? b->k : 0;
        conds_add(cs, mk_eq(v, mk_rank(v, b->X[i]), mk_int(v, av->rank + k)));
        for (int d = 0; d < k && d < 4; d++) {
            Z3_ast dz = mk_dim(v, b->X[i], mk_int(v, d));
            conds_add(cs, mk_le(v, mk_int(v, 1), dz));
            if (lead[d])
                conds_add(cs, mk_eq(v, dz, lead[d]));
            else
                lead[d] = dz;
        }
        for (int d = 0; d < av->rank; d++) {
            Z3_ast dz = mk_dim(v, b->X[i], mk_int(v, k + d));
            conds_add(cs, mk_le(v, mk_int(v, 1), dz));
            char *end;
            long long lit = strtoll(av->dims[d], &end, 10);
            if (*end == '\0') {
                conds_add(cs, mk_eq(v, dz, mk_int(v, lit)));
                continue;
            }
            int j = 0;
            while (j < n_names && strcmp(names[j], av->dims[d]) != 0)
                j++;
            if (j < n_names) {
                conds_add(cs, mk_eq(v, dz, first[j]));
            } else if (n_names < 64) {
                names[n_names] = av->dims[d];
                first[n_names++] = dz;
            }
        }
    }
    if (ax->require) {
        xenv e = {.v = v,
                  .in = b->X,
                  .n_in = ax->n_vars,
                  .vars = b->P,
                  .n_vars = ax->n_pvars,
                  .defs = cs};
        Z3_ast c = tr_bool(&e, ax->require);
        if (!c || e.bad)
            return false;
        conds_add(cs, c);
    }
    return true;
}

/* One quantified form of the axiom with side `pat` (0 lhs, 1 rhs, -1 none) as its pattern. Returns
 * NULL with b->why when it cannot be encoded; *no_pattern when that side cannot serve. */
static Z3_ast ax_quant(un_verifier *v, const un_axlift *l, const Z3_ast *X, const Z3_ast *P,
                       int pat, bool *unusable, bool *trivial, char *why, size_t nwhy) {
    const un_axiom *ax = l->ax;
    conds *guard = un_xcalloc(1, sizeof *guard);
    axb b = {
        .v = v, .ax = ax, .k = l->k, .mask = l->mask, .lift = l, .X = X, .P = P, .guard = guard};
    Z3_ast side[2] = {NULL, NULL}, q = NULL;
    *unusable = false;
    *trivial = false;
    for (int s = 0; s < 2; s++) {
        b.abstract = s == pat;
        if (s == pat) {
            memset(b.used_x, 0, sizeof b.used_x);
            memset(b.used_p, 0, sizeof b.used_p);
        }
        side[s] = ax_term(&b, s == 0 ? ax->lhs : ax->rhs);
        if (!side[s])
            goto done;
        if (s == pat) {
            bool covered = Z3_get_ast_kind(v->z, side[s]) == Z3_APP_AST &&
                           Z3_get_arity(v->z, Z3_get_app_decl(v->z, Z3_to_app(v->z, side[s]))) > 0;
            for (int i = 0; i < ax->n_vars; i++)
                covered = covered && b.used_x[i];
            for (int i = 0; i < ax->n_pvars; i++)
                covered = covered && b.used_p[i];
            /* a bare tensor variable is a 0-ary app: not a pattern */
            for (int i = 0; i < ax->n_vars; i++)
                covered = covered && side[s] != X[i];
            if (!covered) {
                *unusable = true;
                goto done;
            }
        }
    }
    if (side[0] == side[1]) {
        *trivial = true;
        goto done;
    }
    if (!ax_var_guard(&b, guard) || guard->overflow) {
        snprintf(b.why, sizeof b.why, "cannot translate its side condition");
        goto done;
    }
    Z3_app bound[32 + 32 + 64];
    int nb = 0;
    for (int i = 0; i < ax->n_vars; i++)
        bound[nb++] = Z3_to_app(v->z, X[i]);
    for (int i = 0; i < ax->n_pvars; i++)
        bound[nb++] = Z3_to_app(v->z, P[i]);
    for (int i = 0; i < b.n_qv; i++)
        bound[nb++] = b.qv[i];
    Z3_ast body = Z3_mk_implies(v->z, conds_and(v, guard), mk_eq(v, side[0], side[1]));
    if (pat >= 0) {
        Z3_pattern p = Z3_mk_pattern(v->z, 1, &side[pat]);
        q = Z3_mk_forall_const(v->z, 0, (unsigned)nb, bound, 1, &p, body);
    } else {
        q = Z3_mk_forall_const(v->z, 0, (unsigned)nb, bound, 0, NULL, body);
    }
    if (!z3_ok(v))
        q = NULL;
done:
    if (!q && !*unusable && !*trivial)
        snprintf(why, nwhy, "%.150s", b.why[0] ? b.why : v->msg);
    free(guard);
    return q;
}

/* The regular operators a term applies, as a bit mask. */
static uint64_t term_ops(const un_term *t) {
    uint64_t m = 0;
    if (t->kind != UN_TERM_APP)
        return 0;
    if (un_op_kind_of(t->op) == UN_OPK_REGULAR)
        m |= (uint64_t)1 << t->op;
    for (int i = 0; i < t->n_args; i++)
        m |= term_ops(t->args[i]);
    return m;
}

/* Whether t applies op, without parameters, to two arguments. */
static bool term_bin(const un_term *t, un_op op) {
    return t->kind == UN_TERM_APP && t->op == op && t->n_params == 0 && t->n_args == 2;
}

/* The tensor variable t is, or -1. */
static int term_var(const un_term *t) { return t->kind == UN_TERM_VAR ? t->var : -1; }

/* Whether op has a declared commutativity axiom `op x y = op y x` (x, y of one shape). */
static bool op_commutative(const un_verifier *v, un_op op) {
    const un_op_spec *os = un_spec_op(v->spec, op);
    for (int i = 0; i < os->n_axioms; i++) {
        const un_axiom *ax = &os->axioms[i];
        if (ax->n_pvars || ax->require || !term_bin(ax->lhs, op) || !term_bin(ax->rhs, op))
            continue;
        int x = term_var(ax->lhs->args[0]), y = term_var(ax->lhs->args[1]);
        if (x < 0 || y < 0 || x == y || term_var(ax->rhs->args[0]) != y ||
            term_var(ax->rhs->args[1]) != x)
            continue;
        const un_axiom_var *a = &ax->vars[x], *c = &ax->vars[y];
        bool same = a->dtype == c->dtype && a->rank == c->rank;
        for (int d = 0; same && d < a->rank; d++)
            same = strcmp(a->dims[d], c->dims[d]) == 0;
        if (same)
            return true;
    }
    return false;
}

/* Whether the axiom is encoded with its lhs as the only pattern (a rewrite lhs -> rhs), the rhs's
 * instances being what the lhs's give on terms that other instances make:
 * - associativity of a commutative op, `f (f x y) z = f x (f y z)`: right-associating with
 *   commutativity reaches every bracketing of every order, as both directions did;
 * - distributivity, `f (g x y) w = g (f x w) (f y w)` and `f w (g x y) = g (f w x) (f w y)`
 *   (linear and ew_mul over ew_add): the factored form, where a rule has it, is expanded by the
 *   lhs; the rhs's pattern factored every sum of two products that share an operand.
 * Measured on stage (c) of the N=4 pipeline and the N=3 set: the same verdicts, fewer units
 * (verify/README.md). Only terms without parameters, no require. */
static bool ax_oriented(const un_verifier *v, const un_axlift *l) {
    const un_axiom *ax = l->ax;
    const un_term *a = ax->lhs, *b = ax->rhs;
    if (ax->n_pvars || ax->require || a->kind != UN_TERM_APP || b->kind != UN_TERM_APP)
        return false;
    un_op f = a->op, g = b->op;
    if (!term_bin(a, f) || !term_bin(b, g))
        return false;
    if (f == g && term_bin(a->args[0], f) && term_bin(b->args[1], f)) {
        int x = term_var(a->args[0]->args[0]), y = term_var(a->args[0]->args[1]);
        int z = term_var(a->args[1]);
        return x >= 0 && y >= 0 && z >= 0 && x != y && x != z && y != z &&
               term_var(b->args[0]) == x && term_var(b->args[1]->args[0]) == y &&
               term_var(b->args[1]->args[1]) == z && op_commutative(v, f);
    }
    if (f == g || !term_bin(b->args[0], f) || !term_bin(b->args[1], f))
        return false;
    for (int side = 0; side < 2; side++) { /* side: where g sits among f's arguments */
        const un_term *sum = a->args[side];
        int w = term_var(a->args[1 - side]);
        if (!term_bin(sum, g) || w < 0)
            continue;
        int x = term_var(sum->args[0]), y = term_var(sum->args[1]);
        const un_term *p = b->args[0], *q = b->args[1];
        if (x >= 0 && y >= 0 && x != y && w != x && w != y && term_var(p->args[side]) == x &&
            term_var(p->args[1 - side]) == w && term_var(q->args[side]) == y &&
            term_var(q->args[1 - side]) == w)
            return true;
    }
    return false;
}

static void encode_axiom(un_verifier *v, const un_axlift *l) {
    const un_axiom *ax = l->ax;
    if (ax->n_vars > 32 || ax->n_pvars > 32) {
        un_buf_printf(&v->skipped, "%s: too many variables; ", ax->name);
        return;
    }
    Z3_ast X[32], P[32];
    for (int i = 0; i < ax->n_vars; i++)
        X[i] = mk_fresh(v, ax->vars[i].name, v->T);
    for (int i = 0; i < ax->n_pvars; i++)
        P[i] = mk_fresh(v, ax->pvar_names[i], v->I);
    Z3_ast qs[2];
    int nq = 0;
    char why[160] = "";
    bool unusable, trivial;
    int n_sides = ax_oriented(v, l) ? 1 : 2;
    for (int s = 0; s < n_sides; s++) {
        Z3_ast q = ax_quant(v, l, X, P, s, &unusable, &trivial, why, sizeof why);
        if (trivial) {
            v->n_trivial++;
            return;
        }
        if (q)
            qs[nq++] = q;
        else if (!unusable)
            break;
    }
    if (nq == 0 && !why[0]) {
        Z3_ast q = ax_quant(v, l, X, P, -1, &unusable, &trivial, why, sizeof why);
        if (trivial) {
            v->n_trivial++;
            return;
        }
        if (q)
            qs[nq++] = q;
    }
    if (nq == 0) {
        un_buf_printf(&v->skipped, "%s: %s; ", ax->name, why[0] ? why : "no encoding");
        return;
    }
    v->ax = un_xrealloc(v->ax, sizeof(Z3_ast) * (size_t)(v->n_ax + 1));
    v->track = un_xrealloc(v->track, sizeof(Z3_ast) * (size_t)(v->n_ax + 1));
    v->ax_name = un_xrealloc(v->ax_name, sizeof(char *) * (size_t)(v->n_ax + 1));
    v->ax_lift = un_xrealloc(v->ax_lift, sizeof(un_axlift) * (size_t)(v->n_ax + 1));
    v->ax_lift[v->n_ax] = *l;
    for (int k = 0; k < 2; k++) {
        v->ax_ops[k] = un_xrealloc(v->ax_ops[k], sizeof(uint64_t) * (size_t)(v->n_ax + 1));
        v->ax_ops[k][v->n_ax] = term_ops(k == 0 ? ax->lhs : ax->rhs);
    }
    const char *name = ax->name;
    if (l->k) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s+%d%s.%x", ax->name, l->k, l->shift ? "s" : "",
                 (unsigned)l->mask);
        v->names = un_xrealloc(v->names, sizeof(char *) * (size_t)(v->n_names + 1));
        name = v->names[v->n_names++] = un_xstrdup(buf);
    }
    v->ax[v->n_ax] = nq == 1 ? qs[0] : Z3_mk_and(v->z, 2, qs);
    v->track[v->n_ax] = Z3_mk_const(v->z, Z3_mk_string_symbol(v->z, name), v->B);
    v->ax_name[v->n_ax] = name;
    v->n_ax++;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

/* rlimit: Z3's resource limit per check (0 = none): unlike the timeout, machine-independent. */
static void set_limits(un_verifier *v, Z3_solver s, unsigned timeout_ms, unsigned rlimit) {
    Z3_params p = Z3_mk_params(v->z);
    Z3_params_inc_ref(v->z, p);
    Z3_params_set_uint(v->z, p, Z3_mk_string_symbol(v->z, "timeout"), timeout_ms);
    Z3_params_set_uint(v->z, p, Z3_mk_string_symbol(v->z, "rlimit"), rlimit);
    Z3_params_set_bool(v->z, p, Z3_mk_string_symbol(v->z, "smt.mbqi"), false);
    Z3_solver_set_params(v->z, s, p);
    Z3_params_dec_ref(v->z, p);
}

/* Z3's resource counter (the work done by this context so far, in rlimit units). */
static uint64_t rlimit_count(un_verifier *v, Z3_solver s) {
    Z3_stats st = Z3_solver_get_statistics(v->z, s);
    Z3_stats_inc_ref(v->z, st);
    uint64_t n = 0;
    unsigned size = Z3_stats_size(v->z, st);
    for (unsigned i = 0; i < size; i++)
        if (strcmp(Z3_stats_get_key(v->z, st, i), "rlimit count") == 0)
            n = Z3_stats_is_uint(v->z, st, i) ? Z3_stats_get_uint_value(v->z, st, i)
                                              : (uint64_t)Z3_stats_get_double_value(v->z, st, i);
    Z3_stats_dec_ref(v->z, st);
    return n;
}

/* One solver per context, kept across rules (each proof pushes and pops its own scope): it holds
 * the axioms as `literal -> axiom`, each asserted when a rule first finds it relevant
 * (assert_used), and a proof switches on the relevant ones by assumptions, so the quantifiers are
 * internalized once rather than per rule. The simple solver skips the
 * preprocessing tactics, which made quantified checks run to their timeout instead of
 * saturating. */
static void make_solver(un_verifier *v) {
    v->solver = Z3_mk_simple_solver(v->z);
    Z3_solver_inc_ref(v->z, v->solver);
    set_limits(v, v->solver, 10000, 0);
    for (int op = 0; op < UN_OP_COUNT; op++) {
        char name[64];
        snprintf(name, sizeof name, "shape:%s", un_op_name((un_op)op));
        v->op_lit[op] = Z3_mk_const(v->z, Z3_mk_string_symbol(v->z, name), v->B);
        v->op_off[op] = NULL;
    }
    v->track_off = un_xcalloc((size_t)v->n_ax + 1, sizeof(Z3_ast));
    v->ax_in = un_xcalloc((size_t)v->n_ax + 1, sizeof(bool));
    v->bg_in_ops = 0;
}

/* Asserts (at the solver's base level, for every later rule) the shape axioms of the operators
 * in ops and the spec axioms of use not asserted yet: an axiom no rule switches on is never
 * internalized. */
static void assert_used(un_verifier *v, uint64_t ops, const bool *use) {
    for (int i = 0; i < v->n_bg; i++)
        if (v->bg_op[i] & ops & ~v->bg_in_ops) {
            int op = __builtin_ctzll(v->bg_op[i]);
            Z3_solver_assert(v->z, v->solver, Z3_mk_implies(v->z, v->op_lit[op], v->bg[i]));
        }
    v->bg_in_ops |= ops;
    for (int i = 0; i < v->n_ax; i++)
        if (use[i] && !v->ax_in[i]) {
            Z3_solver_assert(v->z, v->solver, Z3_mk_implies(v->z, v->track[i], v->ax[i]));
            v->ax_in[i] = true;
        }
}

static void teardown(un_verifier *v) {
    if (v->solver)
        Z3_solver_dec_ref(v->z, v->solver);
    v->solver = NULL;
    if (v->z)
        Z3_del_context(v->z);
    v->z = NULL;
    free(v->bg);
    free(v->ax);
    free(v->track);
    free(v->track_off);
    v->track_off = NULL;
    free(v->ax_in);
    v->ax_in = NULL;
    free(v->ax_name);
    free(v->ax_lift);
    v->ax_lift = NULL;
    free(v->bg_op);
    free(v->ax_ops[0]);
    free(v->ax_ops[1]);
    v->bg_op = v->ax_ops[0] = v->ax_ops[1] = NULL;
    v->bg = v->ax = v->track = NULL;
    v->ax_name = NULL;
    v->n_bg = v->n_ax = v->n_trivial = 0;
    un_buf_deinit(&v->skipped);
    for (int i = 0; i < v->n_names; i++)
        free(v->names[i]);
    free(v->names);
    v->names = NULL;
    v->n_names = 0;
    memset(v->fn, 0, sizeof v->fn);
    v->uses = 0;
}

static un_status build(un_ctx *ctx, un_verifier *v) {
    Z3_config cfg = Z3_mk_config();
    Z3_set_param_value(cfg, "model", "true");
    v->z = Z3_mk_context(cfg);
    Z3_del_config(cfg);
    if (!v->z)
        return un_ctx_error(ctx, UN_ERR_INVALID, "z3: cannot create a context");
    Z3_set_error_handler(v->z, on_z3_error);
    v->failed = false;
    v->T = Z3_mk_uninterpreted_sort(v->z, Z3_mk_string_symbol(v->z, "Tensor"));
    v->I = Z3_mk_int_sort(v->z);
    v->B = Z3_mk_bool_sort(v->z);
    Z3_sort d2[2] = {v->T, v->I};
    v->rank = Z3_mk_func_decl(v->z, Z3_mk_string_symbol(v->z, "rank"), 1, &v->T, v->I);
    v->dim = Z3_mk_func_decl(v->z, Z3_mk_string_symbol(v->z, "dim"), 2, d2, v->I);
    un_buf_printf(&v->skipped, "%s", "");
    _Static_assert(UN_OP_COUNT <= 64, "operator masks are 64 bits");
    for (int op = 0; op < UN_OP_COUNT; op++) {
        const un_op_spec *os = un_spec_op(v->spec, (un_op)op);
        int np = 0;
        for (int i = 0; i < os->n_params; i++) {
            v->poff[op][i] = np;
            np += os->params[i].type == UN_PT_LIST ? 1 + UN_MAX_DIMS : 1;
        }
        v->np[op] = np;
        if (os->kind != UN_OPK_REGULAR)
            continue;
        int min_in = 0;
        for (int j = 0; j < os->n_inputs; j++)
            min_in += os->inputs[j].when.n == 0;
        int n_out = os->outputs_count ? UN_MAX_DIMS : os->n_outputs;
        for (int n = min_in; n <= os->n_inputs; n++) {
            Z3_sort dom[UN_MAX_INPUTS + NPV_MAX];
            for (int j = 0; j < n; j++)
                dom[j] = v->T;
            for (int j = 0; j < np; j++)
                dom[n + j] = v->I;
            for (int o = 0; o < n_out && o < UN_MAX_OUTPUTS; o++) {
                char name[64];
                snprintf(name, sizeof name, "%s.%d/%d", os->name, o, n);
                v->fn[op][o][n] = Z3_mk_func_decl(v->z, Z3_mk_string_symbol(v->z, name),
                                                  (unsigned)(n + np), dom, v->T);
            }
        }
    }
    for (int op = 0; op < UN_OP_COUNT; op++) {
        const un_op_spec *os = un_spec_op(v->spec, (un_op)op);
        if (os->kind != UN_OPK_REGULAR)
            continue;
        for (int n = 0; n <= UN_MAX_INPUTS; n++)
            for (int o = 0; o < UN_MAX_OUTPUTS; o++)
                if (v->fn[op][o][n] && !shape_axioms(v, (un_op)op, o, n))
                    return un_ctx_error(ctx, UN_ERR_SPEC,
                                        "verify: cannot translate the output shape of %s: %s",
                                        os->name, v->failed ? v->msg : "unsupported expression");
    }
    for (int op = 0; op < UN_OP_COUNT; op++) {
        const un_op_spec *os = un_spec_op(v->spec, (un_op)op);
        for (int a = 0; a < os->n_axioms; a++)
            encode_axiom(v, &(un_axlift){&os->axioms[a], 0, 0, 0});
    }
    for (int i = 0; i < v->n_lifts; i++)
        encode_axiom(v, &v->lifts[i]);
    make_solver(v);
    if (!z3_ok(v))
        return un_ctx_error(ctx, UN_ERR_INVALID, "verify: %s", v->msg);
    return UN_OK;
}

un_status un_verifier_new(un_ctx *ctx, const un_spec *spec, un_verifier **out) {
    return un_verifier_new_ex(ctx, spec, NULL, 0, out);
}

un_status un_verifier_new_ex(un_ctx *ctx, const un_spec *spec, const un_axlift *lifts, int n_lifts,
                             un_verifier **out) {
    *out = NULL;
    un_verifier *v = un_xcalloc(1, sizeof *v);
    v->spec = spec;
    if (n_lifts > 0) {
        v->lifts = un_xmalloc(sizeof *lifts * (size_t)n_lifts);
        memcpy(v->lifts, lifts, sizeof *lifts * (size_t)n_lifts);
        v->n_lifts = n_lifts;
    }
    un_status st = build(ctx, v);
    if (st != UN_OK) {
        un_verifier_free(v);
        return st;
    }
    v->n_learned = v->n_ax;
    v->learned = un_xcalloc((size_t)v->n_ax + 1, sizeof(bool));
    v->shape_ok = un_xcalloc((size_t)v->n_ax + 1, sizeof(signed char));
    *out = v;
    return UN_OK;
}

void un_verifier_free(un_verifier *v) {
    if (!v)
        return;
    teardown(v);
    free(v->lifts);
    free(v->learned);
    free(v->shape_ok);
    free(v);
}

int un_verifier_axiom_count(const un_verifier *v) { return v->n_ax; }

int un_verifier_axiom_patterns(const un_verifier *v, const char *name) {
    for (int i = 0; i < v->n_ax; i++)
        if (strcmp(v->ax_name[i], name) == 0)
            return Z3_get_ast_kind(v->z, v->ax[i]) == Z3_QUANTIFIER_AST
                       ? 1
                       : (int)Z3_get_app_num_args(v->z, Z3_to_app(v->z, v->ax[i]));
    return 0;
}

int un_verifier_axioms_asserted(const un_verifier *v) {
    int n = 0;
    for (int i = 0; i < v->n_ax; i++)
        n += v->ax_in[i];
    return n;
}

const char *un_verifier_skipped(const un_verifier *v) {
    return v->skipped.data ? v->skipped.data : "";
}

const char *un_verdict_name(un_verdict x) {
    return x == UN_VERDICT_VALID ? "valid" : x == UN_VERDICT_INVALID ? "invalid" : "unknown";
}

/* ---- rules ---------------------------------------------------------------------------------- */

typedef struct renc {
    un_verifier *v;
    const un_rule *r;
    Z3_ast *X; /* rule inputs */
    Z3_ast K[UN_RULE_MAX_VARS];
    Z3_ast *term[2];   /* per side: node * UN_MAX_OUTPUTS */
    conds *hyp, *goal; /* hypotheses (source side) and target-side conditions */
    char why[160];
} renc;

static void layout_conds(renc *e, Z3_ast t, const un_shape *s, conds *cs) {
    un_verifier *v = e->v;
    for (int j = 0; j < s->rank; j++)
        if (s->shard[j] > 1) {
            Z3_ast d = mk_dim(v, t, mk_int(v, j));
            conds_add(cs, mk_eq(v, Z3_mk_mod(v->z, d, mk_int(v, s->shard[j])), mk_int(v, 0)));
        }
}

static bool encode_side(renc *e, int side) {
    un_verifier *v = e->v;
    const un_rule *r = e->r;
    const un_graph *g = side == UN_RULE_SRC ? r->src : r->dst;
    int32_t n = un_graph_node_count(g);
    Z3_ast *T = e->term[side] = un_xcalloc((size_t)n * UN_MAX_OUTPUTS, sizeof(Z3_ast));
    conds *cs = side == UN_RULE_SRC ? e->hyp : e->goal;
    int n_in = un_rule_input_count(r);
    for (int k = 0; k < n; k++) {
        int32_t id = k;
        const un_node *nd = un_graph_node(g, id);
        un_op_kind kind = un_op_kind_of(nd->op);
        if (kind == UN_OPK_SOURCE) {
            for (int i = 0; i < n_in; i++)
                if ((side == UN_RULE_SRC ? un_rule_input_src(r, i) : un_rule_input_dst(r, i)) == id)
                    T[id * UN_MAX_OUTPUTS] = e->X[i];
            if (!T[id * UN_MAX_OUTPUTS]) {
                snprintf(e->why, sizeof e->why, "input node %d is not a rule input", id);
                return false;
            }
        } else if (kind == UN_OPK_PARALLEL) {
            T[id * UN_MAX_OUTPUTS] = T[nd->in[0].node * UN_MAX_OUTPUTS + nd->in[0].out];
        } else {
            const un_op_spec *os = un_spec_op(v->spec, nd->op);
            Z3_ast args[UN_MAX_INPUTS], pv[NPV_MAX];
            for (int i = 0; i < nd->n_in; i++)
                args[i] = T[nd->in[i].node * UN_MAX_OUTPUTS + nd->in[i].out];
            for (int i = 0; i < os->n_params; i++) {
                int off = v->poff[nd->op][i];
                const un_param *p = &nd->params[i];
                if (os->params[i].type == UN_PT_LIST) {
                    int len = p->len < 0 ? 0 : p->len;
                    pv[off] = mk_int(v, len);
                    for (int j = 0; j < UN_MAX_DIMS; j++) {
                        int bv = j < len ? un_rule_var_at(r, side, id, i, j) : -1;
                        pv[off + 1 + j] = bv >= 0 ? e->K[bv] : mk_int(v, j < len ? p->v[j] : 0);
                    }
                } else {
                    int bv = un_rule_var_at(r, side, id, i, -1);
                    pv[off] = bv >= 0 ? e->K[bv] : mk_int(v, p->v[0]);
                }
            }
            if (!op_wf(v, nd->op, nd->n_in, args, pv, cs)) {
                snprintf(e->why, sizeof e->why, "%s with %d inputs cannot be encoded", os->name,
                         nd->n_in);
                return false;
            }
            for (int o = 0; o < nd->inf.n_out; o++) {
                T[id * UN_MAX_OUTPUTS + o] = op_app(v, nd->op, o, nd->n_in, args, pv);
                if (!T[id * UN_MAX_OUTPUTS + o]) {
                    snprintf(e->why, sizeof e->why, "%s output %d cannot be encoded", os->name, o);
                    return false;
                }
            }
        }
        for (int o = 0; o < nd->inf.n_out && o < UN_MAX_OUTPUTS; o++)
            if (T[id * UN_MAX_OUTPUTS + o])
                layout_conds(e, T[id * UN_MAX_OUTPUTS + o], &nd->inf.out[o], cs);
    }
    return !e->hyp->overflow && !e->goal->overflow;
}

/* Names the rank and every dim of each tensor of the first `sides` sides by a fresh integer:
 * always satisfiable, and it makes those terms relevant, so E-matching instantiates the shape
 * axioms on them (a contradiction among shapes is then found, not hidden). */
static void name_shapes(un_verifier *v, Z3_solver s, const un_rule *r, const renc *e, int side0,
                        int sides) {
    for (int side = side0; side < sides; side++) {
        const un_graph *g = side ? r->dst : r->src;
        for (int32_t id = 0; id < un_graph_node_count(g); id++) {
            const un_node *nd = un_graph_node(g, id);
            for (int o = 0; o < nd->inf.n_out && o < UN_MAX_OUTPUTS; o++) {
                Z3_ast t = e->term[side][id * UN_MAX_OUTPUTS + o];
                if (!t)
                    continue;
                Z3_solver_assert(v->z, s, mk_eq(v, mk_rank(v, t), mk_fresh(v, "r", v->I)));
                for (int j = 0; j < nd->inf.out[o].rank; j++)
                    Z3_solver_assert(v->z, s,
                                     mk_eq(v, mk_dim(v, t, mk_int(v, j)), mk_fresh(v, "d", v->I)));
            }
        }
    }
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Adds the names in the solver's unsat core to used[]. */
static void core_names(un_verifier *v, Z3_solver s, bool *used) {
    Z3_ast_vector core = Z3_solver_get_unsat_core(v->z, s);
    Z3_ast_vector_inc_ref(v->z, core);
    unsigned n = Z3_ast_vector_size(v->z, core);
    for (unsigned i = 0; i < n; i++) {
        Z3_ast a = Z3_ast_vector_get(v->z, core, i);
        for (int k = 0; k < v->n_ax; k++)
            if (v->track[k] == a)
                used[k] = true;
    }
    Z3_ast_vector_dec_ref(v->z, core);
}

/* The axioms that can matter for terms over the operators in `ops`: an axiom whose one side
 * applies only operators present can fire, and then brings in the other side's operators; repeated
 * to a fixpoint. Leaving the others out only weakens the solver (never unsound) and keeps it fast.
 */
static uint64_t relevant(const un_verifier *v, uint64_t ops, bool *use) {
    for (bool grew = true; grew;) {
        grew = false;
        for (int i = 0; i < v->n_ax; i++) {
            if (use[i])
                continue;
            uint64_t l = v->ax_ops[0][i], r = v->ax_ops[1][i];
            if ((l & ~ops) == 0 || (r & ~ops) == 0) {
                use[i] = true;
                if ((ops | l | r) != ops)
                    grew = true;
                ops |= l | r;
            }
        }
    }
    return ops;
}

/* The negation of literal lit, made once (*off caches it). */
static Z3_ast negation(un_verifier *v, Z3_ast *off, Z3_ast lit) {
    if (!*off)
        *off = mk_not(v, lit);
    return *off;
}

/* Assumptions switching on the shape axioms of the operators in ops and the spec axioms marked in
 * use (and off every other one). Returns their number; a[] holds UN_OP_COUNT + n_ax. */
static unsigned assumptions(un_verifier *v, uint64_t ops, const bool *use, Z3_ast *a) {
    unsigned n = 0;
    for (int op = 0; op < UN_OP_COUNT; op++)
        a[n++] = (ops >> op) & 1 ? v->op_lit[op] : negation(v, &v->op_off[op], v->op_lit[op]);
    for (int i = 0; i < v->n_ax; i++)
        a[n++] = use[i] ? v->track[i] : negation(v, &v->track_off[i], v->track[i]);
    return n;
}

/* The narrow set: the axioms of use whose two sides apply only operators of the rule itself
 * (ops), none that relevant() brought in, and those of use that a full-set proof of an earlier
 * rule needed beyond its narrow set (v->learned: linear with a fused relu proven through
 * relu_linear_fuse, ...). *nops: ops and the operators of the learned axioms taken (their shape
 * axioms on). Returns whether the set is smaller than use. */
static bool narrow_set(const un_verifier *v, uint64_t ops, const bool *use, bool *narrow,
                       uint64_t *nops) {
    bool smaller = false;
    *nops = ops;
    for (int i = 0; i < v->n_ax; i++) {
        uint64_t m = v->ax_ops[0][i] | v->ax_ops[1][i];
        narrow[i] = use[i] && ((m & ~ops) == 0 || (i < v->n_learned && v->learned[i]));
        if (narrow[i])
            *nops |= m;
        smaller = smaller || narrow[i] != use[i];
    }
    return smaller;
}

/* The narrow set's assumptions (0: the narrow set is every relevant axiom, no narrow attempt). */
static unsigned narrow_assumptions(un_verifier *v, uint64_t rule_ops, const bool *use, bool *narrow,
                                   Z3_ast *nasm) {
    uint64_t nops = rule_ops;
    return narrow_set(v, rule_ops, use, narrow, &nops) ? assumptions(v, nops, narrow, nasm) : 0;
}

/* Marks the axioms of a full-set proof's core (used) that its narrow set lacked as learned. */
static void learn(un_verifier *v, const bool *used, const bool *narrow) {
    for (int i = 0; i < v->n_ax && i < v->n_learned; i++)
        if (used[i] && !narrow[i])
            v->learned[i] = true;
}

static uint64_t graph_ops(const un_graph *g) {
    uint64_t m = 0;
    for (int32_t i = 0; i < un_graph_node_count(g); i++) {
        un_op op = un_graph_node(g, i)->op;
        if (un_op_kind_of(op) == UN_OPK_REGULAR)
            m |= (uint64_t)1 << op;
    }
    return m;
}

/* One solver call under assumptions, its work counted in out->work_by (kind: UN_WORK_NARROW
 * counts a call that does not prove as UN_WORK_NARROW_FAILED). */
static Z3_lbool check(un_verifier *v, Z3_solver s, unsigned n, const Z3_ast *a, un_work_kind kind,
                      un_proof *out) {
    uint64_t w0 = rlimit_count(v, s);
    Z3_lbool res = Z3_solver_check_assumptions(v->z, s, n, a);
    if (kind == UN_WORK_NARROW && res != Z3_L_FALSE)
        kind = UN_WORK_NARROW_FAILED;
    out->work_by[kind] += rlimit_count(v, s) - w0;
    out->calls_by[kind]++;
    return res;
}

/* The modulus side condition c requires of its dim, at the rule's witness values. */
static int64_t cond_modulus(const un_rule *r, const un_rule_cond *c) {
    int64_t m = c->coef;
    for (int a = 0; a < r->n_vars; a++)
        for (int p = 0; p < c->exp[a]; p++)
            m *= r->vars[a].value;
    return m;
}

/* Whether encoded axiom k holds in the shape model (verify/README.md step 4): from the shape axioms
 * of its operators alone, wherever its guard holds (variable ranks and sizes, side condition, every
 * operator well formed) its sides have the same rank and the same dim at a symbolic index i (any
 * integer, in range or not). Unsat proves it; sat or unknown leaves it out. Proven once per axiom
 * and verifier, in a solver of its own; the work counts as UN_WORK_SHAPE in out. */
static bool shape_correct(un_verifier *v, int k, unsigned timeout, unsigned rlimit, un_proof *out) {
    if (k >= v->n_learned)
        return false;
    if (v->shape_ok[k])
        return v->shape_ok[k] > 0;
    const un_axlift *l = &v->ax_lift[k];
    const un_axiom *ax = l->ax;
    if (ax->n_vars > 32 || ax->n_pvars > 32) /* never encoded (encode_axiom), so in no core */
        return false;
    Z3_ast X[32], P[32];
    for (int i = 0; i < ax->n_vars; i++)
        X[i] = mk_fresh(v, ax->vars[i].name, v->T);
    for (int i = 0; i < ax->n_pvars; i++)
        P[i] = mk_fresh(v, ax->pvar_names[i], v->I);
    conds *guard = un_xcalloc(1, sizeof *guard);
    axb b = {
        .v = v, .ax = ax, .k = l->k, .mask = l->mask, .lift = l, .X = X, .P = P, .guard = guard};
    Z3_ast lhs = ax_term(&b, ax->lhs), rhs = lhs ? ax_term(&b, ax->rhs) : NULL;
    bool ok = false;
    if (rhs && ax_var_guard(&b, guard) && !guard->overflow) {
        Z3_solver s = Z3_mk_simple_solver(v->z);
        Z3_solver_inc_ref(v->z, s);
        set_limits(v, s, timeout, rlimit);
        uint64_t ops = v->ax_ops[0][k] | v->ax_ops[1][k];
        for (int j = 0; j < v->n_bg; j++)
            if (v->bg_op[j] & ops)
                Z3_solver_assert(v->z, s, v->bg[j]);
        Z3_solver_assert(v->z, s, conds_and(v, guard));
        for (int x = 0; x < ax->n_vars; x++) { /* the model's tensors: dims 0 out of range */
            Z3_ast j = mk_fresh(v, "j", v->I), dj = mk_dim(v, X[x], j);
            Z3_app bj = Z3_to_app(v->z, j);
            Z3_pattern pj = Z3_mk_pattern(v->z, 1, &dj);
            Z3_ast out_of_range = mk_not(v, mk_in_range(v, j, mk_rank(v, X[x])));
            Z3_solver_assert(
                v->z, s,
                Z3_mk_forall_const(v->z, 0, 1, &bj, 1, &pj,
                                   Z3_mk_implies(v->z, out_of_range, mk_eq(v, dj, mk_int(v, 0)))));
        }
        Z3_ast i = mk_fresh(v, "i", v->I);
        Z3_ast same = mk_and2(v, mk_eq(v, mk_rank(v, lhs), mk_rank(v, rhs)),
                              mk_eq(v, mk_dim(v, lhs, i), mk_dim(v, rhs, i)));
        Z3_solver_assert(v->z, s, mk_not(v, same));
        ok = check(v, s, 0, NULL, UN_WORK_SHAPE, out) == Z3_L_FALSE;
        Z3_solver_dec_ref(v->z, s);
    }
    free(guard);
    if (!z3_ok(v))
        return false; /* not recorded: the context is rebuilt and the next proof tries again */
    v->shape_ok[k] = ok ? 1 : -1;
    return ok;
}

int un_verifier_shape_correct(un_verifier *v, const char *name, unsigned timeout_ms,
                              unsigned rlimit) {
    un_proof scratch;
    memset(&scratch, 0, sizeof scratch);
    for (int k = 0; k < v->n_ax; k++)
        if (strcmp(v->ax_name[k], name) == 0)
            return shape_correct(v, k, timeout_ms ? timeout_ms : 10000, rlimit, &scratch);
    return -1;
}

/* Whether the shape model satisfies a consistency check's formulas (verify/README.md step 4):
 * every spec axiom the proof used (used[]) is shape-correct, and the rule's side conditions hold
 * at its witness (the shapes its graphs were built with), where the rest of the hypotheses hold
 * as the source is well formed there. */
static bool model_consistent(un_verifier *v, const un_rule *r, const bool *used, unsigned timeout,
                             unsigned rlimit, un_proof *out) {
    for (int i = 0; i < r->n_conds; i++) {
        const un_rule_cond *c = &r->conds[i];
        int64_t m = cond_modulus(r, c);
        const un_shape *sh =
            un_graph_shape(c->side == UN_RULE_SRC ? r->src : r->dst, (un_ref){c->node, c->out});
        if (m < 1 || c->dim >= sh->rank || sh->dim[c->dim] % m != 0)
            return false;
    }
    for (int k = 0; k < v->n_ax; k++)
        if (used[k] && !shape_correct(v, k, timeout, rlimit, out))
            return false;
    return true;
}

/* A narrow-set attempt: a quarter of the budget. */
static Z3_lbool narrow_check(un_verifier *v, Z3_solver s, unsigned timeout, unsigned rlimit,
                             unsigned n, const Z3_ast *a, un_proof *out) {
    if (rlimit)
        set_limits(v, s, timeout, rlimit / 4 + 1);
    else
        set_limits(v, s, timeout / 4 + 1, 0);
    Z3_lbool res = check(v, s, n, a, UN_WORK_NARROW, out);
    set_limits(v, s, timeout, rlimit);
    return res;
}

/* The rule's inputs at their witness sizes (every dim of each, equal to the source's). */
static Z3_ast witness_sizes(un_verifier *v, const un_rule *r, const Z3_ast *X) {
    conds *w = un_xcalloc(1, sizeof *w);
    for (int i = 0; i < un_rule_input_count(r); i++) {
        const un_shape *sh = un_graph_shape(r->src, (un_ref){un_rule_input_src(r, i), 0});
        for (int j = 0; j < sh->rank; j++)
            conds_add(w, mk_eq(v, mk_dim(v, X[i], mk_int(v, j)), mk_int(v, sh->dim[j])));
    }
    Z3_ast a = conds_and(v, w);
    free(w);
    return a;
}

static void reason_unknown(un_verifier *v, Z3_solver s, const char *what, un_proof *out) {
    snprintf(out->detail, sizeof out->detail, "%s: %s", what,
             Z3_solver_get_reason_unknown(v->z, s));
}

un_status un_verifier_prove(un_ctx *ctx, un_verifier *v, const un_rule *r,
                            const un_prove_opts *opts, un_proof *out) {
    memset(out, 0, sizeof *out);
    out->verdict = UN_VERDICT_UNKNOWN;
    unsigned timeout = opts && opts->timeout_ms ? opts->timeout_ms : 10000;
    unsigned rlimit = opts ? opts->rlimit : 0;
    bool symbolic = opts && opts->symbolic;
    un_status st = UN_OK;
    if (v->uses >= REBUILD_EVERY || v->failed) {
        teardown(v);
        if ((st = build(ctx, v)) != UN_OK)
            return st;
    }
    v->uses++;
    double t0 = now_ms();
    int n_in = un_rule_input_count(r);
    renc e = {.v = v, .r = r};
    e.X = un_xcalloc((size_t)(n_in ? n_in : 1), sizeof(Z3_ast));
    e.hyp = un_xcalloc(1, sizeof *e.hyp);
    e.goal = un_xcalloc(1, sizeof *e.goal);
    Z3_solver s = NULL;
    Z3_ast *asm_ = NULL, *nasm = NULL, *negs = NULL;
    bool pushed = false;
    bool *used = un_xcalloc((size_t)v->n_ax + 1, sizeof(bool));
    bool *use = un_xcalloc((size_t)v->n_ax + 1, sizeof(bool));
    bool *narrow = un_xcalloc((size_t)v->n_ax + 1, sizeof(bool));
    uint64_t rule_ops = graph_ops(r->src) | graph_ops(r->dst);
    uint64_t ops = relevant(v, rule_ops, use);
    for (int i = 0; i < r->n_vars; i++)
        e.K[i] = mk_fresh(v, r->vars[i].name, v->I);
    for (int i = 0; i < n_in; i++) {
        int32_t in = un_rule_input_src(r, i);
        const un_shape *sh = un_graph_shape(r->src, (un_ref){in, 0});
        int ip = un_spec_param_index(un_spec_op(v->spec, un_graph_node(r->src, in)->op), "shape");
        e.X[i] = mk_fresh(v, "x", v->T);
        conds_add(e.hyp, mk_eq(v, mk_rank(v, e.X[i]), mk_int(v, sh->rank)));
        for (int j = 0; j < sh->rank; j++) {
            Z3_ast d = mk_dim(v, e.X[i], mk_int(v, j));
            /* a dim variable is this dim's size wherever else it occurs (split sizes, ...) */
            int a = ip >= 0 ? un_rule_var_at(r, UN_RULE_SRC, in, ip, j) : -1;
            if (a >= 0) { /* ... and within the input's shape domain, as every size is */
                const un_param_spec *ps =
                    &un_spec_op(v->spec, un_graph_node(r->src, in)->op)->params[ip];
                conds_add(e.hyp, mk_eq(v, d, e.K[a]));
                conds_add(e.hyp, mk_le(v, d, mk_int(v, ps->max)));
            }
            if (symbolic) {
                conds_add(e.hyp, mk_le(v, mk_int(v, 1), d));
                conds_add(e.hyp, mk_le(v, d, mk_int(v, (int64_t)1 << 40)));
            } else {
                conds_add(e.hyp, mk_eq(v, d, mk_int(v, sh->dim[j])));
            }
        }
    }
    if (!encode_side(&e, UN_RULE_SRC) || !encode_side(&e, UN_RULE_DST)) {
        snprintf(out->detail, sizeof out->detail, "not encodable: %s",
                 e.why[0] ? e.why : "too many conditions");
        goto done;
    }
    /* The rule's side conditions (at the witness values) are hypotheses: the claim is that the
     * target is well formed and equal wherever the source is well formed and they hold. */
    for (int i = 0; i < r->n_conds; i++) {
        const un_rule_cond *c = &r->conds[i];
        int64_t m = cond_modulus(r, c);
        Z3_ast t = e.term[c->side][c->node * UN_MAX_OUTPUTS + c->out];
        if (!t || m < 1) {
            snprintf(out->detail, sizeof out->detail, "not encodable: side condition %d", i);
            goto done;
        }
        conds_add(e.hyp, mk_eq(v, Z3_mk_mod(v->z, mk_dim(v, t, mk_int(v, c->dim)), mk_int(v, m)),
                               mk_int(v, 0)));
    }
    if (e.hyp->overflow) {
        snprintf(out->detail, sizeof out->detail, "not encodable: too many conditions");
        goto done;
    }
    if (!z3_ok(v)) {
        st = un_ctx_error(ctx, UN_ERR_INVALID, "verify: %s", v->msg);
        goto done;
    }
    s = v->solver;
    asm_ = un_xmalloc(sizeof(Z3_ast) * (size_t)(UN_OP_COUNT + v->n_ax + 2));
    unsigned n_asm = assumptions(v, ops, use, asm_);
    /* Each output is tried first with the narrow axiom set (on average a few percent of the
     * relevant ones at N=4, and nearly every proof needs no other), under a quarter of the
     * timeout; only an unsat there counts, anything else goes on with every relevant axiom, as
     * before. A proof from fewer axioms is the same proof, so verdicts do not change; the
     * E-matching over fewer quantifiers is what it saves. */
    nasm = un_xmalloc(sizeof(Z3_ast) * (size_t)(UN_OP_COUNT + v->n_ax + 2));
    unsigned n_nasm = narrow_assumptions(v, rule_ops, use, narrow, nasm);
    /* With a resource limit the budgets are in rlimit units (the same on a busy machine as on
     * an idle one) and the wall-clock timeout is only a backstop; without one, as before, in ms. */
    uint64_t rl0 = rlimit_count(v, s);
    assert_used(v, ops, use);
    set_limits(v, s, timeout, rlimit);
    Z3_solver_push(v->z, s);
    pushed = true;
    Z3_solver_assert(v->z, s, conds_and(v, e.hyp));
    name_shapes(v, s, r, &e, 0, 1);
    Z3_ast dst_ok = conds_and(v, e.goal);
    bool all = true;
    negs = un_xmalloc(sizeof(Z3_ast) * (size_t)(r->n_out ? r->n_out : 1));
    for (int i = 0; i < r->n_out; i++) {
        Z3_ast S = e.term[0][r->src_out[i].node * UN_MAX_OUTPUTS + r->src_out[i].out];
        Z3_ast D = e.term[1][r->dst_out[i].node * UN_MAX_OUTPUTS + r->dst_out[i].out];
        const un_shape *sh = un_graph_shape(r->src, r->src_out[i]);
        conds g = {.n = 0};
        conds_add(&g, dst_ok);
        conds_add(&g, mk_eq(v, mk_rank(v, S), mk_rank(v, D)));
        for (int j = 0; j < sh->rank; j++)
            conds_add(&g, mk_eq(v, mk_dim(v, S, mk_int(v, j)), mk_dim(v, D, mk_int(v, j))));
        conds_add(&g, mk_eq(v, S, D));
        negs[i] = mk_not(v, conds_and(v, &g));
    }
    /* Without a proof for every size (opts->witness_retry), the witness sizes are tried in the
     * same scope, as extra hypotheses behind their own literal assumed by every check of the
     * retry: the same claim as a fresh proof at those sizes (the symbolic bounds are implied),
     * without encoding the rule again; its consistency check's budget counts the whole proof's
     * work, so it is no smaller than a fresh proof's. Not after a consistency check, whose
     * assertions (the target's conditions among them) are then in the scope: the caller proves
     * afresh. */
    Z3_ast wit = NULL;
    Z3_lbool cres = Z3_L_UNDEF;
    uint64_t rl_retry = 0;
    for (;;) {
        /* A rule with several outputs is first tried with the narrow set for all of them in
         * one check (the goals' conjunction: unsat proves each); else output by output below. */
        bool narrow_all = false;
        if (n_nasm && r->n_out > 1) {
            Z3_ast glit = mk_fresh(v, "goal", v->B);
            Z3_solver_assert(v->z, s,
                             Z3_mk_implies(v->z, glit, Z3_mk_or(v->z, (unsigned)r->n_out, negs)));
            nasm[n_nasm] = glit;
            nasm[n_nasm + 1] = wit;
            narrow_all =
                narrow_check(v, s, timeout, rlimit, n_nasm + 1 + !!wit, nasm, out) == Z3_L_FALSE;
            if (narrow_all) {
                core_names(v, s, used);
                out->narrow = r->n_out;
            }
        }
        for (int i = 0; i < r->n_out && all && !narrow_all; i++) {
            /* the negated goal behind its own literal, assumed by this output's checks only: the
             * axiom instances found stay for the next checks of the rule */
            Z3_ast glit = mk_fresh(v, "goal", v->B);
            Z3_solver_assert(v->z, s, Z3_mk_implies(v->z, glit, negs[i]));
            if (n_nasm) {
                nasm[n_nasm] = glit;
                nasm[n_nasm + 1] = wit;
                if (narrow_check(v, s, timeout, rlimit, n_nasm + 1 + !!wit, nasm, out) ==
                    Z3_L_FALSE) {
                    core_names(v, s, used);
                    out->narrow++;
                    continue;
                }
            }
            asm_[n_asm] = glit;
            asm_[n_asm + 1] = wit;
            Z3_lbool res = check(v, s, n_asm + 1 + !!wit, asm_, UN_WORK_FULL, out);
            char what[64];
            snprintf(what, sizeof what, "output %d", i);
            if (res == Z3_L_FALSE) {
                core_names(v, s, used);
                if (n_nasm)
                    learn(v, used, narrow);
            } else if (res == Z3_L_TRUE) {
                Z3_model m = Z3_solver_get_model(v->z, s);
                if (m) {
                    Z3_model_inc_ref(v->z, m);
                    snprintf(out->detail, sizeof out->detail, "%s: counter-model of the axioms: %s",
                             what, Z3_model_to_string(v->z, m));
                    Z3_model_dec_ref(v->z, m);
                }
                out->verdict = UN_VERDICT_INVALID;
                all = false;
            } else {
                reason_unknown(v, s, what, out);
                all = false;
            }
        }
        /* Consistency: the hypotheses and the axioms the proof used, without the goal, must not
         * be unsat: a proof never rests on contradictory axiom instances, nor on a source-side
         * condition that cannot hold (which would also flag a mistranslated `require`). Where
         * the shape model satisfies them (model_consistent) Z3 is not asked, unless to audit. */
        bool model = all && model_consistent(v, r, used, timeout, rlimit, out);
        out->calls_by[UN_WORK_MODEL] += model;
        if (all && (!model || (opts && opts->audit_model))) {
            if (rlimit) { /* the shape-correctness proofs are not the proof's work */
                uint64_t cr = 2 * (rlimit_count(v, s) - rl0 - out->work_by[UN_WORK_SHAPE]) +
                              20 * (uint64_t)UN_VERIFY_RLIMIT_PER_MS;
                set_limits(v, s, timeout, cr < rlimit ? (unsigned)cr : rlimit);
            } else {
                double spent = now_ms() - t0;
                unsigned ct = (unsigned)(2 * spent) + 20;
                set_limits(v, s, ct < timeout ? ct : timeout, 0);
            }
            n_asm = assumptions(v, ops, used, asm_);
            if (wit)
                asm_[n_asm++] = wit;
            for (int i = 0; i < r->n_out; i++) {
                Z3_ast S = e.term[0][r->src_out[i].node * UN_MAX_OUTPUTS + r->src_out[i].out];
                Z3_ast D = e.term[1][r->dst_out[i].node * UN_MAX_OUTPUTS + r->dst_out[i].out];
                Z3_solver_assert(v->z, s, mk_not(v, mk_eq(v, S, mk_fresh(v, "c", v->T))));
                Z3_solver_assert(v->z, s, mk_not(v, mk_eq(v, D, mk_fresh(v, "c", v->T))));
            }
            /* The target side's conditions (implied by the source's, as just proven) and the rank
             * and dims of every tensor on both sides, named by fresh integers: satisfiable in the
             * intended semantics, and they make those terms relevant, so E-matching sees what they
             * imply. */
            Z3_solver_assert(v->z, s, dst_ok);
            name_shapes(v, s, r, &e, 1, 2);
            cres = check(v, s, n_asm, asm_, UN_WORK_CONSISTENCY, out);
            out->audit_unsat += model && cres == Z3_L_FALSE;
        }
        if (all || wit || !symbolic || !opts->witness_retry)
            break;
        wit = mk_fresh(v, "witness", v->B);
        Z3_solver_assert(v->z, s, Z3_mk_implies(v->z, wit, witness_sizes(v, r, e.X)));
        out->retried = true;
        out->verdict = UN_VERDICT_UNKNOWN;
        out->detail[0] = '\0';
        out->narrow = 0;
        memset(used, 0, sizeof(bool) * ((size_t)v->n_ax + 1));
        n_nasm = narrow_assumptions(v, rule_ops, use, narrow, nasm); /* with what it learned */
        rl_retry = rlimit_count(v, s);
        all = true;
    }
    if (all) {
        if (cres == Z3_L_FALSE) {
            snprintf(out->detail, sizeof out->detail,
                     "vacuous: the axioms contradict each other on this rule's terms");
        } else {
            out->verdict = UN_VERDICT_VALID;
            const char *names[512];
            int nn = 0;
            for (int k = 0; k < v->n_ax && nn < 512; k++)
                if (used[k])
                    names[nn++] = v->ax_name[k];
            qsort(names, (size_t)nn, sizeof names[0], cmp_str);
            size_t len = 0;
            for (int k = 0; k < nn; k++) {
                int w = snprintf(out->axioms + len, sizeof out->axioms - len, "%s%s", k ? "," : "",
                                 names[k]);
                if (w < 0 || (size_t)w >= sizeof out->axioms - len)
                    break;
                len += (size_t)w;
            }
        }
    }
    out->work = rlimit_count(v, s) - rl0;
    if (out->retried)
        out->work_witness = rlimit_count(v, s) - rl_retry;
    out->work_by[UN_WORK_OTHER] = out->work;
    for (int k = 0; k < UN_WORK_OTHER; k++)
        out->work_by[UN_WORK_OTHER] -= out->work_by[k];
    out->calls_by[UN_WORK_OTHER] = 1;
    if (!z3_ok(v))
        st = un_ctx_error(ctx, UN_ERR_INVALID, "verify: %s", v->msg);
done:
    if (pushed)
        Z3_solver_pop(v->z, s, 1);
    free(asm_);
    free(nasm);
    free(negs);
    out->ms = now_ms() - t0;
    free(used);
    free(use);
    free(narrow);
    free(e.term[0]);
    free(e.term[1]);
    free(e.X);
    free(e.hyp);
    free(e.goal);
    return st;
}
