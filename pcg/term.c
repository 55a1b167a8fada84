/* term.c - the axiom term language: parsing a term's text (for the spec loader, pcg/spec.c),
 * building a term into a graph, and writing it back as text. */
#include "pcg/term.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pcg/spec_impl.h"

/* ---- parsing ---- */

typedef struct {
    un_ctx *ctx;
    un_spec *sp;
    const un_jcur *c; /* JSON position for messages */
    const char *text;
    const char *p;
    un_axiom *ax;
    un_status st;
} term_parser;

un_name_kind un__axiom_resolve(const void *user, const char *name, int32_t *ref) {
    const un_axiom *ax = user;
    for (int i = 0; i < ax->n_pvars; i++)
        if (strcmp(ax->pvar_names[i], name) == 0) {
            *ref = i;
            return UN_NAME_VAR;
        }
    for (int i = 0; i < ax->n_vars; i++)
        if (strcmp(ax->vars[i].name, name) == 0) {
            *ref = i;
            return UN_NAME_TENSOR;
        }
    return UN_NAME_NONE;
}

static void *terr(term_parser *tp, const char *fmt, const char *a) {
    if (tp->st == UN_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, fmt, a);
        tp->st = un_jcur_error(tp->ctx, UN_ERR_SPEC, tp->c, "term \"%s\": column %d: %s", tp->text,
                               (int)(tp->p - tp->text) + 1, msg);
    }
    return NULL;
}

static void tskip(term_parser *tp) {
    while (*tp->p == ' ' || *tp->p == '\t' || *tp->p == '\n')
        tp->p++;
}

static bool tatom(term_parser *tp, char *buf, size_t n) {
    tskip(tp);
    size_t i = 0;
    while (*tp->p && !strchr(" \t\n()[]{}:", *tp->p)) {
        if (i + 1 < n)
            buf[i++] = *tp->p;
        tp->p++;
    }
    buf[i] = '\0';
    return i > 0;
}

/* A parameter value item: integer, enum name, parameter variable or {expr}. */
static const un_expr *tvalue(term_parser *tp, const un_param_spec *ps) {
    tskip(tp);
    un_expr_scope scope = {.resolve = un__axiom_resolve, .user = tp->ax};
    if (*tp->p == '{') {
        const char *end = strchr(tp->p, '}');
        if (!end)
            return terr(tp, "unclosed '{'%s", "");
        char buf[256];
        size_t n = (size_t)(end - tp->p - 1);
        if (n >= sizeof buf)
            return terr(tp, "expression too long%s", "");
        memcpy(buf, tp->p + 1, n);
        buf[n] = '\0';
        un_ctx *tmp = un_ctx_new(NULL);
        un_expr *e = NULL;
        if (un_expr_parse(tmp, buf, &scope, tp->sp->arena, &e) != UN_OK)
            terr(tp, "%s", un_ctx_errmsg(tmp));
        un_ctx_free(tmp);
        tp->p = end + 1;
        return e;
    }
    char atom[64];
    if (!tatom(tp, atom, sizeof atom))
        return terr(tp, "expected a parameter value%s", "");
    if (ps->type == UN_PT_ENUM)
        for (int i = 0; i < ps->n_enum; i++)
            if (strcmp(ps->enums[i], atom) == 0) {
                un_expr *e = un_arena_alloc(tp->sp->arena, sizeof *e, 8);
                e->kind = UN_EX_INT;
                e->value = i;
                return e;
            }
    if (ps->type == UN_PT_BOOL && (strcmp(atom, "true") == 0 || strcmp(atom, "false") == 0)) {
        un_expr *e = un_arena_alloc(tp->sp->arena, sizeof *e, 8);
        e->kind = UN_EX_INT;
        e->value = atom[0] == 't';
        return e;
    }
    un_ctx *tmp = un_ctx_new(NULL);
    un_expr *e = NULL;
    if (un_expr_parse(tmp, atom, &scope, tp->sp->arena, &e) != UN_OK)
        terr(tp, "%s", un_ctx_errmsg(tmp));
    un_ctx_free(tmp);
    return e;
}

static un_term *parse_term(term_parser *tp) {
    tskip(tp);
    if (tp->st != UN_OK)
        return NULL;
    un_term *t = un_arena_alloc(tp->sp->arena, sizeof *t, 8);
    if (*tp->p != '(') {
        char atom[64];
        if (!tatom(tp, atom, sizeof atom))
            return terr(tp, "expected a term%s", "");
        for (int i = 0; i < tp->ax->n_vars; i++)
            if (strcmp(tp->ax->vars[i].name, atom) == 0) {
                t->kind = UN_TERM_VAR;
                t->var = i;
                return t;
            }
        return terr(tp, "unknown tensor variable '%s' (declare it in vars)", atom);
    }
    tp->p++;
    char opname[64];
    if (!tatom(tp, opname, sizeof opname))
        return terr(tp, "expected an operator name%s", "");
    t->kind = UN_TERM_APP;
    char *dot = strchr(opname, '.');
    if (dot) {
        *dot = '\0';
        t->out_index = atoi(dot + 1);
    }
    if (!un_op_from_name(opname, &t->op))
        return terr(tp, "unknown operator '%s'", opname);
    const un_op_spec *os = &tp->sp->ops[t->op];
    if (!tp->sp->present[t->op])
        return terr(tp, "operator '%s' is used before its entry", opname);
    un_term_param params[UN_MAX_PARAMS];
    un_term *args[UN_MAX_INPUTS];
    int np = 0, na = 0;
    for (;;) {
        tskip(tp);
        if (tp->st != UN_OK)
            return NULL;
        if (*tp->p == ')') {
            tp->p++;
            break;
        }
        if (!*tp->p)
            return terr(tp, "unclosed '('%s", "");
        if (*tp->p == ':') {
            tp->p++;
            char pname[64];
            if (!tatom(tp, pname, sizeof pname))
                return terr(tp, "expected a parameter name after ':'%s", "");
            int p = un_spec_param_index(os, pname);
            if (p < 0)
                return terr(tp, "unknown parameter '%s'", pname);
            if (np >= UN_MAX_PARAMS)
                return terr(tp, "too many parameters%s", "");
            un_term_param *tpar = &params[np++];
            memset(tpar, 0, sizeof *tpar);
            tpar->param = p;
            tskip(tp);
            if (*tp->p == '[') {
                tp->p++;
                tpar->n_items = 0;
                for (;;) {
                    tskip(tp);
                    if (*tp->p == ']') {
                        tp->p++;
                        break;
                    }
                    if (!*tp->p)
                        return terr(tp, "unclosed '['%s", "");
                    if (tpar->n_items >= UN_MAX_DIMS)
                        return terr(tp, "list too long%s", "");
                    if (!(tpar->items[tpar->n_items++] = tvalue(tp, &os->params[p])))
                        return NULL;
                }
            } else {
                tpar->n_items = -1;
                if (!(tpar->items[0] = tvalue(tp, &os->params[p])))
                    return NULL;
            }
            continue;
        }
        if (na >= UN_MAX_INPUTS)
            return terr(tp, "too many arguments%s", "");
        if (!(args[na++] = parse_term(tp)))
            return NULL;
    }
    t->n_params = np;
    t->params = un_arena_alloc(tp->sp->arena, sizeof(un_term_param) * (size_t)(np ? np : 1), 8);
    memcpy(t->params, params, sizeof(un_term_param) * (size_t)np);
    t->n_args = na;
    t->args = un_arena_alloc(tp->sp->arena, sizeof(un_term *) * (size_t)(na ? na : 1), 8);
    memcpy(t->args, args, sizeof(un_term *) * (size_t)na);
    return t;
}

un_status un__term_parse(un_ctx *ctx, un_spec *sp, const un_jcur *c, un_axiom *ax,
                         const un_term **out, const char **text) {
    un_status st = un_jcur_need_type(ctx, c, UN_JSON_STRING);
    if (st != UN_OK)
        return st;
    term_parser tp = {.ctx = ctx, .sp = sp, .c = c, .text = un_jcur_str(c), .ax = ax, .st = UN_OK};
    tp.p = tp.text;
    un_term *t = parse_term(&tp);
    if (tp.st != UN_OK)
        return tp.st;
    tskip(&tp);
    if (*tp.p) {
        terr(&tp, "unexpected text after the term%s", "");
        return tp.st;
    }
    *out = t;
    *text = un_arena_strdup(sp->arena, tp.text);
    return UN_OK;
}

/* ---- building and printing ---- */

un_status un_term_build(un_ctx *ctx, un_graph *g, const un_axiom *ax, const un_term *t,
                        const int64_t *pvals, const int32_t *var_nodes, un_ref *out) {
    if (t->kind == UN_TERM_VAR) {
        out->node = var_nodes[t->var];
        out->out = 0;
        return UN_OK;
    }
    const un_spec *spec = un_graph_spec(g);
    const un_op_spec *os = un_spec_op(spec, t->op);
    un_ref args[UN_MAX_INPUTS];
    un_status st;
    for (int i = 0; i < t->n_args; i++)
        if ((st = un_term_build(ctx, g, ax, t->args[i], pvals, var_nodes, &args[i])) != UN_OK)
            return st;
    const un_shape *vs[UN_MAX_INPUTS * 2];
    int nvs = ax->n_vars < UN_MAX_INPUTS * 2 ? ax->n_vars : UN_MAX_INPUTS * 2;
    for (int i = 0; i < nvs; i++)
        vs[i] = un_graph_shape(g, (un_ref){var_nodes[i], 0});
    un_expr_env env = {
        .params = NULL, .n_params = 0, .vars = pvals, .n_vars = ax->n_pvars, .in = vs, .n_in = nvs};
    un_param params[UN_MAX_PARAMS];
    un_spec_param_defaults(os, params);
    for (int i = 0; i < t->n_params; i++) {
        const un_term_param *tp = &t->params[i];
        un_param *p = &params[tp->param];
        int n = tp->n_items < 0 ? 1 : tp->n_items;
        p->len = tp->n_items;
        for (int j = 0; j < n; j++)
            if ((st = un_expr_eval(ctx, tp->items[j], &env, &p->v[j])) != UN_OK)
                return st;
    }
    int32_t id;
    if ((st = un_graph_add(ctx, g, t->op, params, args, t->n_args, NULL, &id)) != UN_OK)
        return st;
    if (t->out_index >= un_graph_node(g, id)->inf.n_out)
        return un_ctx_error(ctx, UN_ERR_SHAPE, "%s has no output %d", os->name, t->out_index);
    out->node = id;
    out->out = t->out_index;
    return UN_OK;
}

void un_term_str(const un_spec *spec, const un_term *t, const un_axiom *ax, un_buf *b) {
    if (t->kind == UN_TERM_VAR) {
        un_buf_printf(b, "%s", ax->vars[t->var].name);
        return;
    }
    const un_op_spec *os = un_spec_op(spec, t->op);
    un_buf_printf(b, "(%s", os->name);
    if (t->out_index)
        un_buf_printf(b, ".%d", t->out_index);
    for (int i = 0; i < t->n_params; i++) {
        un_buf_printf(b, " :%s ", os->params[t->params[i].param].name);
        int n = t->params[i].n_items;
        if (n >= 0)
            un_buf_printf(b, "[");
        for (int j = 0; j < (n < 0 ? 1 : n); j++) {
            if (j)
                un_buf_printf(b, " ");
            un_buf_printf(b, "{");
            un_expr_str(t->params[i].items[j], b);
            un_buf_printf(b, "}");
        }
        if (n >= 0)
            un_buf_printf(b, "]");
    }
    for (int i = 0; i < t->n_args; i++) {
        un_buf_printf(b, " ");
        un_term_str(spec, t->args[i], ax, b);
    }
    un_buf_printf(b, ")");
}
