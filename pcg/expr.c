/* expr.c - parser (recursive descent) and concrete evaluator of the spec expression language. */
#include "pcg/expr.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* ---- parser ---- */

typedef struct {
    un_ctx *ctx;
    const char *text;
    const char *p;
    const un_expr_scope *scope;
    un_arena *arena;
    un_status st;
} un__parser;

static un_expr *perr(un__parser *ps, const char *fmt, const char *detail) {
    if (ps->st == UN_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, fmt, detail);
        ps->st = un_ctx_error(ps->ctx, UN_ERR_PARSE, "expression \"%s\": column %d: %s", ps->text,
                              (int)(ps->p - ps->text) + 1, msg);
    }
    return NULL;
}

static void skip_ws(un__parser *ps) {
    while (*ps->p && isspace((unsigned char)*ps->p))
        ps->p++;
}

static bool accept(un__parser *ps, const char *tok) {
    skip_ws(ps);
    size_t n = strlen(tok);
    if (strncmp(ps->p, tok, n) != 0)
        return false;
    /* do not split "<=" into "<" and "=", or "==" into "=" */
    if (n == 1 && (tok[0] == '<' || tok[0] == '>' || tok[0] == '!') && ps->p[1] == '=')
        return false;
    ps->p += n;
    return true;
}

static un_expr *mk(un__parser *ps, un_ex_kind kind) {
    un_expr *e = un_arena_alloc(ps->arena, sizeof *e, 8);
    e->kind = kind;
    return e;
}

static un_expr *mk_bin(un__parser *ps, un_bin_op op, un_expr *a, un_expr *b) {
    if (!a || !b)
        return NULL;
    un_expr *e = mk(ps, UN_EX_BIN);
    e->op = op;
    e->a = a;
    e->b = b;
    return e;
}

static un_expr *parse_or(un__parser *ps);

static bool read_ident(un__parser *ps, char *buf, size_t n) {
    skip_ws(ps);
    if (!(isalpha((unsigned char)*ps->p) || *ps->p == '_'))
        return false;
    size_t i = 0;
    while (isalnum((unsigned char)*ps->p) || *ps->p == '_') {
        if (i + 1 < n)
            buf[i++] = *ps->p;
        ps->p++;
    }
    buf[i] = '\0';
    return true;
}

static un_expr *parse_name_arg(un__parser *ps, un_name_kind want, un_ex_kind kind, const char *fn) {
    char name[64];
    if (!accept(ps, "("))
        return perr(ps, "expected '(' after %s", fn);
    if (!read_ident(ps, name, sizeof name))
        return perr(ps, "expected a name in %s()", fn);
    int32_t ref = 0;
    un_name_kind k = ps->scope->resolve(ps->scope->user, name, &ref);
    if (k != want) {
        ps->p -= strlen(name);
        return perr(
            ps, want == UN_NAME_TENSOR ? "'%s' is not a tensor" : "'%s' is not a list parameter",
            name);
    }
    if (!accept(ps, ")"))
        return perr(ps, "expected ')' after %s(...", fn);
    un_expr *e = mk(ps, kind);
    e->ref = ref;
    return e;
}

static un_expr *parse_primary(un__parser *ps) {
    skip_ws(ps);
    if (ps->st != UN_OK)
        return NULL;
    if (accept(ps, "(")) {
        un_expr *e = parse_or(ps);
        if (!e)
            return NULL;
        if (!accept(ps, ")"))
            return perr(ps, "expected ')'%s", "");
        return e;
    }
    if (isdigit((unsigned char)*ps->p)) {
        int64_t v = 0;
        while (isdigit((unsigned char)*ps->p)) {
            if (v > (INT64_MAX - 9) / 10)
                return perr(ps, "integer too large%s", "");
            v = v * 10 + (*ps->p - '0');
            ps->p++;
        }
        un_expr *e = mk(ps, UN_EX_INT);
        e->value = v;
        return e;
    }
    const char *start = ps->p;
    char name[64];
    if (!read_ident(ps, name, sizeof name)) {
        if (!*ps->p)
            return perr(ps, "unexpected end of expression%s", "");
        return perr(ps, "unexpected '%.1s'", ps->p);
    }
    if (strcmp(name, "min") == 0 || strcmp(name, "max") == 0) {
        bool is_min = name[1] == 'i';
        if (!accept(ps, "("))
            return perr(ps, "expected '(' after %s", name);
        un_expr *a = parse_or(ps);
        if (!a)
            return NULL;
        if (!accept(ps, ","))
            return perr(ps, "expected ',' in %s(a, b)", name);
        un_expr *b = parse_or(ps);
        if (!b)
            return NULL;
        if (!accept(ps, ")"))
            return perr(ps, "expected ')' after %s(a, b", name);
        un_expr *e = mk(ps, is_min ? UN_EX_MIN : UN_EX_MAX);
        e->a = a;
        e->b = b;
        return e;
    }
    if (strcmp(name, "len") == 0)
        return parse_name_arg(ps, UN_NAME_LIST_PARAM, UN_EX_LEN, "len");
    if (strcmp(name, "numel") == 0)
        return parse_name_arg(ps, UN_NAME_TENSOR, UN_EX_NUMEL, "numel");
    int32_t ref = 0;
    un_name_kind k = ps->scope->resolve(ps->scope->user, name, &ref);
    switch (k) {
    case UN_NAME_PARAM: {
        un_expr *e = mk(ps, UN_EX_PARAM);
        e->ref = ref;
        return e;
    }
    case UN_NAME_VAR: {
        un_expr *e = mk(ps, UN_EX_VAR);
        e->ref = ref;
        return e;
    }
    case UN_NAME_LIST_PARAM:
    case UN_NAME_TENSOR: {
        if (k == UN_NAME_TENSOR && accept(ps, ".")) {
            char attr[32];
            if (!read_ident(ps, attr, sizeof attr) || strcmp(attr, "rank") != 0)
                return perr(ps, "expected 'rank' after '%s.'", name);
            un_expr *e = mk(ps, UN_EX_RANK);
            e->ref = ref;
            return e;
        }
        if (!accept(ps, "[")) {
            ps->p = start;
            return perr(ps,
                        k == UN_NAME_TENSOR ? "tensor '%s' needs [dim] or .rank"
                                            : "list parameter '%s' needs [index] or len()",
                        name);
        }
        un_expr *idx = parse_or(ps);
        if (!idx)
            return NULL;
        if (!accept(ps, "]"))
            return perr(ps, "expected ']'%s", "");
        un_expr *e = mk(ps, k == UN_NAME_TENSOR ? UN_EX_DIM : UN_EX_PARAM_AT);
        e->ref = ref;
        e->a = idx;
        return e;
    }
    default:
        ps->p = start;
        return perr(ps, "unknown name '%s'", name);
    }
}

static un_expr *parse_unary(un__parser *ps) {
    if (accept(ps, "-")) {
        un_expr *a = parse_unary(ps);
        if (!a)
            return NULL;
        if (a->kind == UN_EX_INT) {
            a->value = -a->value;
            return a;
        }
        un_expr *e = mk(ps, UN_EX_NEG);
        e->a = a;
        return e;
    }
    if (accept(ps, "!")) {
        un_expr *a = parse_unary(ps);
        if (!a)
            return NULL;
        un_expr *e = mk(ps, UN_EX_NOT);
        e->a = a;
        return e;
    }
    return parse_primary(ps);
}

static un_expr *parse_mul(un__parser *ps) {
    un_expr *e = parse_unary(ps);
    while (e) {
        if (accept(ps, "*"))
            e = mk_bin(ps, UN_BIN_MUL, e, parse_unary(ps));
        else if (accept(ps, "/"))
            e = mk_bin(ps, UN_BIN_DIV, e, parse_unary(ps));
        else if (accept(ps, "%"))
            e = mk_bin(ps, UN_BIN_MOD, e, parse_unary(ps));
        else
            break;
    }
    return e;
}

static un_expr *parse_add(un__parser *ps) {
    un_expr *e = parse_mul(ps);
    while (e) {
        if (accept(ps, "+"))
            e = mk_bin(ps, UN_BIN_ADD, e, parse_mul(ps));
        else if (accept(ps, "-"))
            e = mk_bin(ps, UN_BIN_SUB, e, parse_mul(ps));
        else
            break;
    }
    return e;
}

static un_expr *parse_cmp(un__parser *ps) {
    un_expr *e = parse_add(ps);
    if (!e)
        return NULL;
    static const struct {
        const char *tok;
        un_bin_op op;
    } ops[] = {{"==", UN_BIN_EQ}, {"!=", UN_BIN_NE}, {"<=", UN_BIN_LE},
               {">=", UN_BIN_GE}, {"<", UN_BIN_LT},  {">", UN_BIN_GT}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (accept(ps, ops[i].tok))
            return mk_bin(ps, ops[i].op, e, parse_add(ps));
    return e;
}

static un_expr *parse_and(un__parser *ps) {
    un_expr *e = parse_cmp(ps);
    while (e && accept(ps, "&&"))
        e = mk_bin(ps, UN_BIN_AND, e, parse_cmp(ps));
    return e;
}

static un_expr *parse_or(un__parser *ps) {
    un_expr *e = parse_and(ps);
    while (e && accept(ps, "||"))
        e = mk_bin(ps, UN_BIN_OR, e, parse_and(ps));
    return e;
}

un_status un_expr_parse(un_ctx *ctx, const char *text, const un_expr_scope *scope, un_arena *arena,
                        un_expr **out) {
    un__parser ps = {
        .ctx = ctx, .text = text, .p = text, .scope = scope, .arena = arena, .st = UN_OK};
    *out = NULL;
    un_expr *e = parse_or(&ps);
    if (ps.st != UN_OK)
        return ps.st;
    skip_ws(&ps);
    if (*ps.p) {
        perr(&ps, "unexpected '%s'", ps.p);
        return ps.st;
    }
    *out = e;
    return UN_OK;
}

/* ---- evaluation ---- */

static int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

static const un_shape *tensor_of(const un_expr_env *env, int32_t ref) {
    if (ref >= UN_EX_OUT) {
        int i = ref - UN_EX_OUT;
        return (env->out && i < env->n_out) ? env->out[i] : NULL;
    }
    return (env->in && ref < env->n_in) ? env->in[ref] : NULL;
}

static void tensor_name(int32_t ref, char *buf, size_t n) {
    if (ref >= UN_EX_OUT)
        snprintf(buf, n, "out%d", ref - UN_EX_OUT);
    else
        snprintf(buf, n, "in%d", ref);
}

un_status un_expr_eval(un_ctx *ctx, const un_expr *e, const un_expr_env *env, int64_t *out) {
    int64_t a = 0, b = 0;
    un_status st;
    char tn[16];
    *out = 0;
    switch (e->kind) {
    case UN_EX_INT:
        *out = e->value;
        return UN_OK;
    case UN_EX_PARAM:
        if (e->ref >= env->n_params)
            return un_ctx_error(ctx, UN_ERR_SHAPE, "parameter %d not available", e->ref);
        *out = env->params[e->ref].v[0];
        return UN_OK;
    case UN_EX_LEN:
        if (e->ref >= env->n_params)
            return un_ctx_error(ctx, UN_ERR_SHAPE, "parameter %d not available", e->ref);
        *out = env->params[e->ref].len < 0 ? 1 : env->params[e->ref].len;
        return UN_OK;
    case UN_EX_PARAM_AT: {
        if (e->ref >= env->n_params)
            return un_ctx_error(ctx, UN_ERR_SHAPE, "parameter %d not available", e->ref);
        if ((st = un_expr_eval(ctx, e->a, env, &a)) != UN_OK)
            return st;
        const un_param *p = &env->params[e->ref];
        int len = p->len < 0 ? 1 : p->len;
        if (a < 0)
            a += len;
        if (a < 0 || a >= len)
            return un_ctx_error(ctx, UN_ERR_SHAPE, "list index %lld out of range (length %d)",
                                (long long)a, len);
        *out = p->v[a];
        return UN_OK;
    }
    case UN_EX_VAR:
        if (!env->vars || e->ref >= env->n_vars)
            return un_ctx_error(ctx, UN_ERR_SHAPE, "variable %d not bound", e->ref);
        *out = env->vars[e->ref];
        return UN_OK;
    case UN_EX_DIM:
    case UN_EX_RANK:
    case UN_EX_NUMEL: {
        const un_shape *s = tensor_of(env, e->ref);
        if (!s) { /* the name is formatted for errors only: this is shape inference's hot path */
            tensor_name(e->ref, tn, sizeof tn);
            return un_ctx_error(ctx, UN_ERR_SHAPE, "tensor %s is not present", tn);
        }
        if (e->kind == UN_EX_RANK) {
            *out = s->rank;
            return UN_OK;
        }
        if (e->kind == UN_EX_NUMEL) {
            *out = un_shape_numel(s);
            return UN_OK;
        }
        if ((st = un_expr_eval(ctx, e->a, env, &a)) != UN_OK)
            return st;
        if (a < 0)
            a += s->rank;
        if (a < 0 || a >= s->rank) {
            tensor_name(e->ref, tn, sizeof tn);
            return un_ctx_error(ctx, UN_ERR_SHAPE, "%s has rank %d: no dim %lld", tn, s->rank,
                                (long long)a);
        }
        *out = s->dim[a];
        return UN_OK;
    }
    case UN_EX_NEG:
        if ((st = un_expr_eval(ctx, e->a, env, &a)) != UN_OK)
            return st;
        if (a == INT64_MIN)
            return un_ctx_error(ctx, UN_ERR_SHAPE, "integer overflow");
        *out = -a;
        return UN_OK;
    case UN_EX_NOT:
        if ((st = un_expr_eval(ctx, e->a, env, &a)) != UN_OK)
            return st;
        *out = !a;
        return UN_OK;
    case UN_EX_MIN:
    case UN_EX_MAX:
        if ((st = un_expr_eval(ctx, e->a, env, &a)) != UN_OK)
            return st;
        if ((st = un_expr_eval(ctx, e->b, env, &b)) != UN_OK)
            return st;
        *out = (e->kind == UN_EX_MIN) == (a < b) ? a : b;
        return UN_OK;
    case UN_EX_BIN:
        if ((st = un_expr_eval(ctx, e->a, env, &a)) != UN_OK)
            return st;
        if (e->op == UN_BIN_AND && !a)
            return UN_OK;
        if (e->op == UN_BIN_OR && a) {
            *out = 1;
            return UN_OK;
        }
        if ((st = un_expr_eval(ctx, e->b, env, &b)) != UN_OK)
            return st;
        switch (e->op) {
        case UN_BIN_ADD:
        case UN_BIN_SUB:
        case UN_BIN_MUL: {
            bool ovf = e->op == UN_BIN_ADD   ? __builtin_add_overflow(a, b, out)
                       : e->op == UN_BIN_SUB ? __builtin_sub_overflow(a, b, out)
                                             : __builtin_mul_overflow(a, b, out);
            if (ovf)
                return un_ctx_error(ctx, UN_ERR_SHAPE, "integer overflow");
            break;
        }
        case UN_BIN_DIV:
        case UN_BIN_MOD:
            if (b == 0)
                return un_ctx_error(ctx, UN_ERR_SHAPE, "division by zero");
            if (a == INT64_MIN && b == -1)
                return un_ctx_error(ctx, UN_ERR_SHAPE, "integer overflow");
            *out = e->op == UN_BIN_DIV ? floordiv(a, b) : a - floordiv(a, b) * b;
            break;
        case UN_BIN_EQ:
            *out = a == b;
            break;
        case UN_BIN_NE:
            *out = a != b;
            break;
        case UN_BIN_LT:
            *out = a < b;
            break;
        case UN_BIN_LE:
            *out = a <= b;
            break;
        case UN_BIN_GT:
            *out = a > b;
            break;
        case UN_BIN_GE:
            *out = a >= b;
            break;
        case UN_BIN_AND:
        case UN_BIN_OR:
            *out = b != 0;
            break;
        default:
            UN_ASSERT(0);
        }
        return UN_OK;
    default:
        UN_ASSERT(0);
    }
    return UN_OK;
}

void un_expr_str(const un_expr *e, un_buf *b) {
    static const char *const bin[UN_BIN_COUNT] = {
        "+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||"};
    char tn[16];
    switch (e->kind) {
    case UN_EX_INT:
        un_buf_printf(b, "%lld", (long long)e->value);
        break;
    case UN_EX_PARAM:
        un_buf_printf(b, "p%d", e->ref);
        break;
    case UN_EX_LEN:
        un_buf_printf(b, "len(p%d)", e->ref);
        break;
    case UN_EX_PARAM_AT:
        un_buf_printf(b, "p%d[", e->ref);
        un_expr_str(e->a, b);
        un_buf_printf(b, "]");
        break;
    case UN_EX_VAR:
        un_buf_printf(b, "v%d", e->ref);
        break;
    case UN_EX_DIM:
        tensor_name(e->ref, tn, sizeof tn);
        un_buf_printf(b, "%s[", tn);
        un_expr_str(e->a, b);
        un_buf_printf(b, "]");
        break;
    case UN_EX_RANK:
        tensor_name(e->ref, tn, sizeof tn);
        un_buf_printf(b, "%s.rank", tn);
        break;
    case UN_EX_NUMEL:
        tensor_name(e->ref, tn, sizeof tn);
        un_buf_printf(b, "numel(%s)", tn);
        break;
    case UN_EX_NEG:
    case UN_EX_NOT:
        un_buf_printf(b, "%s(", e->kind == UN_EX_NEG ? "-" : "!");
        un_expr_str(e->a, b);
        un_buf_printf(b, ")");
        break;
    case UN_EX_MIN:
    case UN_EX_MAX:
        un_buf_printf(b, "%s(", e->kind == UN_EX_MIN ? "min" : "max");
        un_expr_str(e->a, b);
        un_buf_printf(b, ", ");
        un_expr_str(e->b, b);
        un_buf_printf(b, ")");
        break;
    case UN_EX_BIN:
        un_buf_printf(b, "(");
        un_expr_str(e->a, b);
        un_buf_printf(b, " %s ", bin[e->op]);
        un_expr_str(e->b, b);
        un_buf_printf(b, ")");
        break;
    default:
        break;
    }
}

bool un_expr_uses_var(const un_expr *e, int32_t slot) {
    if (!e)
        return false;
    if (e->kind == UN_EX_VAR && e->ref == slot)
        return true;
    return un_expr_uses_var(e->a, slot) || un_expr_uses_var(e->b, slot);
}
