/* spec.c - loading specs/ops.json into the operator registry, and layout inference: applying an
 * operator's output-shape rule and explaining its input layouts by its sharding rules. */
#include "pcg/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    un_op_kind kind;
} un__ops[UN_OP_COUNT] = {
#define SOURCE     UN_OPK_SOURCE
#define REGULAR    UN_OPK_REGULAR
#define PARALLEL   UN_OPK_PARALLEL
#define X(n, s, k) {s, k},
#include "pcg/ops.def"
#undef X
#undef SOURCE
#undef REGULAR
#undef PARALLEL
};

const char *un_op_name(un_op op) { return (unsigned)op < UN_OP_COUNT ? un__ops[op].name : "?"; }
un_op_kind un_op_kind_of(un_op op) { return un__ops[op].kind; }

bool un_op_from_name(const char *name, un_op *out) {
    for (int i = 0; i < UN_OP_COUNT; i++)
        if (strcmp(un__ops[i].name, name) == 0) {
            *out = (un_op)i;
            return true;
        }
    return false;
}

struct un_spec {
    un_arena *arena;
    uint64_t hash;
    bool present[UN_OP_COUNT];
    un_op_spec ops[UN_OP_COUNT];
};

/* ---- scopes for expressions ---- */

typedef struct {
    const un_op_spec *os;
    const char *foreach_name; /* or NULL */
} op_scope;

static un_name_kind op_resolve(const void *user, const char *name, int32_t *ref) {
    const op_scope *sc = user;
    for (int i = 0; i < sc->os->n_params; i++)
        if (strcmp(sc->os->params[i].name, name) == 0) {
            *ref = i;
            return sc->os->params[i].type == UN_PT_LIST ? UN_NAME_LIST_PARAM : UN_NAME_PARAM;
        }
    if (strcmp(name, "k") == 0) {
        *ref = UN_VAR_K;
        return UN_NAME_VAR;
    }
    if (strcmp(name, "i") == 0) {
        *ref = UN_VAR_OUT;
        return UN_NAME_VAR;
    }
    if (sc->foreach_name && strcmp(name, sc->foreach_name) == 0) {
        *ref = UN_VAR_FOREACH;
        return UN_NAME_VAR;
    }
    int n;
    char tail;
    if (sscanf(name, "in%d%c", &n, &tail) == 1 && n >= 0 && n < UN_MAX_INPUTS) {
        *ref = n;
        return UN_NAME_TENSOR;
    }
    if (sscanf(name, "out%d%c", &n, &tail) == 1 && n >= 0 && n < UN_MAX_OUTPUTS) {
        *ref = UN_EX_OUT + n;
        return UN_NAME_TENSOR;
    }
    return UN_NAME_NONE;
}

/* Parses the string at cursor c as an expression; errors name the JSON path. */
static un_status parse_expr_at(un_ctx *ctx, un_spec *sp, const un_jcur *c, const op_scope *sc,
                               const un_expr **out) {
    un_status st = un_jcur_need_type(ctx, c, UN_JSON_STRING);
    if (st != UN_OK)
        return st;
    un_ctx *tmp = un_ctx_new(NULL);
    un_expr_scope scope = {.resolve = op_resolve, .user = sc};
    un_expr *e = NULL;
    st = un_expr_parse(tmp, un_jcur_str(c), &scope, sp->arena, &e);
    if (st != UN_OK)
        un_jcur_error(ctx, UN_ERR_SPEC, c, "bad expression: %s", un_ctx_errmsg(tmp));
    un_ctx_free(tmp);
    if (st != UN_OK)
        return UN_ERR_SPEC;
    *out = e;
    return UN_OK;
}

static const char *adup(un_spec *sp, const char *s) { return un_arena_strdup(sp->arena, s); }

/* ---- parameters ---- */

static const char *const ptype_names[UN_PT_COUNT] = {"int", "bool", "enum", "list"};

bool un_spec_param_valid(const un_param_spec *ps, const un_param *v, char *why, size_t n) {
    if (ps->type == UN_PT_LIST) {
        if (v->len < 0 || v->len > UN_MAX_DIMS) {
            snprintf(why, n, "parameter '%s' must be a list of at most %d integers", ps->name,
                     UN_MAX_DIMS);
            return false;
        }
        for (int i = 0; i < v->len; i++)
            if (v->v[i] < ps->min || v->v[i] > ps->max) {
                snprintf(why, n, "parameter '%s' item %d = %lld outside [%lld, %lld]", ps->name, i,
                         (long long)v->v[i], (long long)ps->min, (long long)ps->max);
                return false;
            }
        return true;
    }
    if (v->len != -1) {
        snprintf(why, n, "parameter '%s' must be a single value, not a list", ps->name);
        return false;
    }
    int64_t x = v->v[0];
    switch (ps->type) {
    case UN_PT_BOOL:
        if (x != 0 && x != 1) {
            snprintf(why, n, "parameter '%s' must be a boolean", ps->name);
            return false;
        }
        return true;
    case UN_PT_ENUM:
        if (x < 0 || x >= ps->n_enum) {
            snprintf(why, n, "parameter '%s' = %lld is not one of its %d enum values", ps->name,
                     (long long)x, ps->n_enum);
            return false;
        }
        return true;
    default:
        if (x < ps->min || x > ps->max) {
            snprintf(why, n, "parameter '%s' = %lld outside [%lld, %lld]", ps->name, (long long)x,
                     (long long)ps->min, (long long)ps->max);
            return false;
        }
        return true;
    }
}

un_status un_spec_param_parse(un_ctx *ctx, const un_param_spec *ps, const un_jcur *c,
                              un_param *out) {
    un_param v;
    memset(&v, 0, sizeof v);
    v.len = -1;
    un_jtype t = un_jcur_type(c);
    switch (ps->type) {
    case UN_PT_BOOL:
        if (t != UN_JSON_BOOL)
            return un_jcur_error(ctx, UN_ERR_INVALID, c, "parameter '%s' expects true or false",
                                 ps->name);
        v.v[0] = un_jcur_bool(c);
        break;
    case UN_PT_ENUM: {
        if (t != UN_JSON_STRING)
            return un_jcur_error(ctx, UN_ERR_INVALID, c, "parameter '%s' expects one of its names",
                                 ps->name);
        const char *s = un_jcur_str(c);
        int found = -1;
        for (int i = 0; i < ps->n_enum; i++)
            if (strcmp(ps->enums[i], s) == 0)
                found = i;
        if (found < 0) {
            un_buf b = {0};
            for (int i = 0; i < ps->n_enum; i++)
                un_buf_printf(&b, "%s%s", i ? ", " : "", ps->enums[i]);
            un_status st = un_jcur_error(ctx, UN_ERR_INVALID, c,
                                         "'%s' is not a value of parameter '%s' (one of: %s)", s,
                                         ps->name, b.data);
            un_buf_free(&b);
            return st;
        }
        v.v[0] = found;
        break;
    }
    case UN_PT_LIST: {
        if (t != UN_JSON_ARRAY)
            return un_jcur_error(ctx, UN_ERR_INVALID, c,
                                 "parameter '%s' expects an array of integers", ps->name);
        int n = un_jcur_len(c);
        if (n > UN_MAX_DIMS)
            return un_jcur_error(ctx, UN_ERR_INVALID, c, "parameter '%s' has %d items (at most %d)",
                                 ps->name, n, UN_MAX_DIMS);
        v.len = n;
        for (int i = 0; i < n; i++) {
            un_jcur it = un_jcur_item(c, i);
            if (!un_jcur_is_int(&it, &v.v[i]))
                return un_jcur_error(ctx, UN_ERR_INVALID, &it, "expected an integer");
        }
        break;
    }
    default:
        if (!un_jcur_is_int(c, &v.v[0]))
            return un_jcur_error(ctx, UN_ERR_INVALID, c, "parameter '%s' expects an integer",
                                 ps->name);
        break;
    }
    char why[256];
    if (!un_spec_param_valid(ps, &v, why, sizeof why))
        return un_jcur_error(ctx, UN_ERR_INVALID, c, "%s", why);
    *out = v;
    return UN_OK;
}

static un_status load_param(un_ctx *ctx, un_spec *sp, const un_jcur *c, un_param_spec *ps) {
    static const char *const keys[] = {"type", "enum", "min", "max", "default", "try", "doc", NULL};
    un_status st;
    if ((st = un_jcur_need_type(ctx, c, UN_JSON_OBJECT)) != UN_OK)
        return st;
    if ((st = un_jcur_check_keys(ctx, c, keys)) != UN_OK)
        return st;
    ps->name = adup(sp, c->key);
    un_jcur en = un_jcur_member(c, "enum");
    const char *type = un_jcur_present(&en) ? "enum" : "int";
    if ((st = un_jcur_get_str(ctx, c, "type", false, &type)) != UN_OK)
        return st;
    ps->type = UN_PT_COUNT;
    for (int i = 0; i < UN_PT_COUNT; i++)
        if (strcmp(ptype_names[i], type) == 0)
            ps->type = (un_ptype)i;
    un_jcur tc = un_jcur_member(c, "type");
    if (ps->type == UN_PT_COUNT)
        return un_jcur_error(ctx, UN_ERR_SPEC, &tc,
                             "unknown parameter type '%s' (int, bool, enum, list)", type);
    if (ps->type == UN_PT_ENUM) {
        if ((st = un_jcur_need_type(ctx, &en, UN_JSON_ARRAY)) != UN_OK)
            return st;
        int n = un_jcur_len(&en);
        if (n == 0)
            return un_jcur_error(ctx, UN_ERR_SPEC, &en, "an enum needs at least one name");
        const char **names = un_arena_alloc(sp->arena, sizeof(char *) * (size_t)n, 8);
        for (int i = 0; i < n; i++) {
            un_jcur it = un_jcur_item(&en, i);
            if ((st = un_jcur_need_type(ctx, &it, UN_JSON_STRING)) != UN_OK)
                return st;
            names[i] = adup(sp, un_jcur_str(&it));
            for (int j = 0; j < i; j++)
                if (strcmp(names[j], names[i]) == 0)
                    return un_jcur_error(ctx, UN_ERR_SPEC, &it, "duplicate enum name '%s'",
                                         names[i]);
        }
        ps->enums = names;
        ps->n_enum = n;
    } else if (un_jcur_present(&en)) {
        return un_jcur_error(ctx, UN_ERR_SPEC, &en, "only enum parameters have names");
    }
    ps->min = ps->type == UN_PT_LIST ? 1 : 0;
    ps->max = 2147483647;
    if ((st = un_jcur_get_int(ctx, c, "min", false, &ps->min)) != UN_OK)
        return st;
    if ((st = un_jcur_get_int(ctx, c, "max", false, &ps->max)) != UN_OK)
        return st;
    if (ps->min > ps->max) {
        un_jcur mc = un_jcur_member(c, "min");
        return un_jcur_error(ctx, UN_ERR_SPEC, &mc, "min %lld exceeds max %lld", (long long)ps->min,
                             (long long)ps->max);
    }
    un_jcur dc = un_jcur_member(c, "default");
    if (un_jcur_present(&dc)) {
        if ((st = un_spec_param_parse(ctx, ps, &dc, &ps->dflt)) != UN_OK)
            return st;
        ps->has_default = true;
    } else {
        memset(&ps->dflt, 0, sizeof ps->dflt);
        ps->dflt.len = ps->type == UN_PT_LIST ? 0 : -1;
    }
    un_jcur tr = un_jcur_member(c, "try");
    if (un_jcur_present(&tr)) {
        if ((st = un_jcur_need_type(ctx, &tr, UN_JSON_ARRAY)) != UN_OK)
            return st;
        int n = un_jcur_len(&tr);
        un_param *vals = un_arena_alloc(sp->arena, sizeof(un_param) * (size_t)(n ? n : 1), 8);
        for (int i = 0; i < n; i++) {
            un_jcur it = un_jcur_item(&tr, i);
            if ((st = un_spec_param_parse(ctx, ps, &it, &vals[i])) != UN_OK)
                return st;
        }
        ps->try_vals = vals;
        ps->n_try = n;
    } else if (ps->has_default) {
        ps->try_vals = &ps->dflt;
        ps->n_try = 1;
    }
    return UN_OK;
}

/* "when": {"param": value, ...} */
static un_status load_when(un_ctx *ctx, const un_op_spec *os, const un_jcur *c, un_when *w) {
    memset(w, 0, sizeof *w);
    if (!un_jcur_present(c))
        return UN_OK;
    un_status st = un_jcur_need_type(ctx, c, UN_JSON_OBJECT);
    if (st != UN_OK)
        return st;
    int n = un_jcur_len(c);
    if (n > UN_MAX_PARAMS)
        return un_jcur_error(ctx, UN_ERR_SPEC, c, "too many conditions");
    for (int i = 0; i < n; i++) {
        un_jcur m = un_jcur_item(c, i);
        int p = un_spec_param_index(os, m.key);
        if (p < 0)
            return un_jcur_error(ctx, UN_ERR_SPEC, &m, "unknown parameter '%s'", m.key);
        un_param v;
        if ((st = un_spec_param_parse(ctx, &os->params[p], &m, &v)) != UN_OK)
            return st;
        if (v.len >= 0)
            return un_jcur_error(ctx, UN_ERR_SPEC, &m, "conditions compare scalar parameters only");
        w->param[w->n] = p;
        w->value[w->n] = v.v[0];
        w->n++;
    }
    return UN_OK;
}

bool un_when_holds(const un_when *w, const un_param *params) {
    for (int i = 0; i < w->n; i++)
        if (params[w->param[i]].v[0] != w->value[i])
            return false;
    return true;
}

static un_status load_inputs(un_ctx *ctx, un_spec *sp, const un_jcur *c, un_op_spec *os) {
    static const char *const keys[] = {"name",   "rank", "min_rank", "dtype",
                                       "weight", "when", "doc",      NULL};
    un_status st;
    if (!un_jcur_present(c))
        return UN_OK;
    if ((st = un_jcur_need_type(ctx, c, UN_JSON_ARRAY)) != UN_OK)
        return st;
    int n = un_jcur_len(c);
    if (n > UN_MAX_INPUTS)
        return un_jcur_error(ctx, UN_ERR_SPEC, c, "%d inputs (at most %d)", n, UN_MAX_INPUTS);
    bool optional_seen = false;
    for (int i = 0; i < n; i++) {
        un_jcur it = un_jcur_item(c, i);
        un_input_spec *in = &os->inputs[i];
        if ((st = un_jcur_need_type(ctx, &it, UN_JSON_OBJECT)) != UN_OK)
            return st;
        if ((st = un_jcur_check_keys(ctx, &it, keys)) != UN_OK)
            return st;
        const char *name = NULL;
        if ((st = un_jcur_get_str(ctx, &it, "name", true, &name)) != UN_OK)
            return st;
        for (int j = 0; j < i; j++)
            if (strcmp(os->inputs[j].name, name) == 0) {
                un_jcur nc = un_jcur_member(&it, "name");
                return un_jcur_error(ctx, UN_ERR_SPEC, &nc, "duplicate input name '%s'", name);
            }
        in->name = adup(sp, name);
        int64_t rank = -1, min_rank = 0;
        if ((st = un_jcur_get_int(ctx, &it, "rank", false, &rank)) != UN_OK)
            return st;
        if ((st = un_jcur_get_int(ctx, &it, "min_rank", false, &min_rank)) != UN_OK)
            return st;
        if (rank > UN_MAX_DIMS || rank < -1 || min_rank < 0 || min_rank > UN_MAX_DIMS) {
            un_jcur rc = un_jcur_member(&it, rank > UN_MAX_DIMS || rank < -1 ? "rank" : "min_rank");
            return un_jcur_error(ctx, UN_ERR_SPEC, &rc, "rank outside 0..%d", UN_MAX_DIMS);
        }
        in->rank = (int32_t)rank;
        in->min_rank = (int32_t)min_rank;
        const char *dt = "float";
        if ((st = un_jcur_get_str(ctx, &it, "dtype", false, &dt)) != UN_OK)
            return st;
        if (strcmp(dt, "float") == 0)
            in->dtype = UN_DT_FLOAT;
        else if (strcmp(dt, "int") == 0)
            in->dtype = UN_DT_INT;
        else if (strcmp(dt, "any") == 0)
            in->dtype = UN_DT_COUNT; /* either: data movement that never looks at values */
        else {
            un_jcur dc = un_jcur_member(&it, "dtype");
            return un_jcur_error(ctx, UN_ERR_SPEC, &dc, "unknown dtype '%s' (float, int, any)", dt);
        }
        if ((st = un_jcur_get_bool(ctx, &it, "weight", false, &in->weight)) != UN_OK)
            return st;
        un_jcur wc = un_jcur_member(&it, "when");
        if ((st = load_when(ctx, os, &wc, &in->when)) != UN_OK)
            return st;
        if (in->when.n > 0)
            optional_seen = true;
        else if (optional_seen)
            return un_jcur_error(ctx, UN_ERR_SPEC, &it, "a required input follows an optional one");
    }
    os->n_inputs = n;
    return UN_OK;
}

static un_status load_output(un_ctx *ctx, un_spec *sp, const un_jcur *c, un_op_spec *os,
                             un_output_spec *o) {
    static const char *const keys[] = {"like",       "set",   "drop",        "drop_when", "dims",
                                       "dims_param", "dtype", "dtype_param", "doc",       NULL};
    un_status st;
    op_scope sc = {.os = os, .foreach_name = NULL};
    if ((st = un_jcur_need_type(ctx, c, UN_JSON_OBJECT)) != UN_OK)
        return st;
    if ((st = un_jcur_check_keys(ctx, c, keys)) != UN_OK)
        return st;
    memset(o, 0, sizeof *o);
    o->like = -1;
    o->dims_param = -1;
    o->dtype_param = -1;
    un_jcur like = un_jcur_member(c, "like"), dims = un_jcur_member(c, "dims"),
            dp = un_jcur_member(c, "dims_param");
    int forms = un_jcur_present(&like) + un_jcur_present(&dims) + un_jcur_present(&dp);
    if (forms != 1)
        return un_jcur_error(ctx, UN_ERR_SPEC, c,
                             "an output needs exactly one of like, dims, dims_param");
    if (un_jcur_present(&like)) {
        int64_t l;
        if (!un_jcur_is_int(&like, &l) || l < 0 || l >= os->n_inputs)
            return un_jcur_error(ctx, UN_ERR_SPEC, &like, "expected an input index below %d",
                                 os->n_inputs);
        o->like = (int32_t)l;
        un_jcur set = un_jcur_member(c, "set");
        if (un_jcur_present(&set)) {
            if ((st = un_jcur_need_type(ctx, &set, UN_JSON_OBJECT)) != UN_OK)
                return st;
            int n = un_jcur_len(&set);
            if (n > UN_MAX_DIMS)
                return un_jcur_error(ctx, UN_ERR_SPEC, &set, "too many entries");
            for (int i = 0; i < n; i++) {
                un_jcur m = un_jcur_item(&set, i);
                un_expr *at = NULL;
                un_ctx *tmp = un_ctx_new(NULL);
                un_expr_scope scope = {.resolve = op_resolve, .user = &sc};
                st = un_expr_parse(tmp, m.key, &scope, sp->arena, &at);
                if (st != UN_OK)
                    un_jcur_error(ctx, UN_ERR_SPEC, &m, "bad dim expression: %s",
                                  un_ctx_errmsg(tmp));
                un_ctx_free(tmp);
                if (st != UN_OK)
                    return UN_ERR_SPEC;
                o->set_at[i] = at;
                if ((st = parse_expr_at(ctx, sp, &m, &sc, &o->set_val[i])) != UN_OK)
                    return st;
            }
            o->n_set = n;
        }
        un_jcur drop = un_jcur_member(c, "drop"), dw = un_jcur_member(c, "drop_when");
        if (un_jcur_present(&drop) && (st = parse_expr_at(ctx, sp, &drop, &sc, &o->drop)) != UN_OK)
            return st;
        if (un_jcur_present(&dw) && !un_jcur_present(&drop))
            return un_jcur_error(ctx, UN_ERR_SPEC, &dw, "drop_when without drop");
        if ((st = load_when(ctx, os, &dw, &o->drop_when)) != UN_OK)
            return st;
    } else {
        un_jcur set = un_jcur_member(c, "set"), drop = un_jcur_member(c, "drop"),
                dw = un_jcur_member(c, "drop_when");
        if (un_jcur_present(&set) || un_jcur_present(&drop) || un_jcur_present(&dw))
            return un_jcur_error(ctx, UN_ERR_SPEC, c, "set and drop apply to a 'like' output only");
    }
    if (un_jcur_present(&dims)) {
        if ((st = un_jcur_need_type(ctx, &dims, UN_JSON_ARRAY)) != UN_OK)
            return st;
        int n = un_jcur_len(&dims);
        if (n > UN_MAX_DIMS)
            return un_jcur_error(ctx, UN_ERR_SPEC, &dims, "rank %d above %d", n, UN_MAX_DIMS);
        for (int i = 0; i < n; i++) {
            un_jcur it = un_jcur_item(&dims, i);
            if ((st = parse_expr_at(ctx, sp, &it, &sc, &o->dims[i])) != UN_OK)
                return st;
        }
        o->n_dims = n;
    }
    if (un_jcur_present(&dp)) {
        if ((st = un_jcur_need_type(ctx, &dp, UN_JSON_STRING)) != UN_OK)
            return st;
        int p = un_spec_param_index(os, un_jcur_str(&dp));
        if (p < 0 || os->params[p].type != UN_PT_LIST)
            return un_jcur_error(ctx, UN_ERR_SPEC, &dp, "'%s' is not a list parameter",
                                 un_jcur_str(&dp));
        o->dims_param = p;
    }
    const char *dt = "float";
    if ((st = un_jcur_get_str(ctx, c, "dtype", false, &dt)) != UN_OK)
        return st;
    un_jcur dtc = un_jcur_member(c, "dtype");
    if (strcmp(dt, "float") == 0)
        o->dtype = UN_DT_FLOAT;
    else if (strcmp(dt, "int") == 0)
        o->dtype = UN_DT_INT;
    else if (strcmp(dt, "same") == 0)
        o->dtype = UN_DT_COUNT; /* that of input 0 */
    else
        return un_jcur_error(ctx, UN_ERR_SPEC, &dtc, "unknown dtype '%s' (float, int, same)", dt);
    un_jcur dtp = un_jcur_member(c, "dtype_param");
    if (un_jcur_present(&dtp)) {
        if ((st = un_jcur_need_type(ctx, &dtp, UN_JSON_STRING)) != UN_OK)
            return st;
        int p = un_spec_param_index(os, un_jcur_str(&dtp));
        if (p < 0 || os->params[p].type != UN_PT_ENUM || os->params[p].n_enum != 2 ||
            strcmp(os->params[p].enums[0], "float") != 0 ||
            strcmp(os->params[p].enums[1], "int") != 0)
            return un_jcur_error(ctx, UN_ERR_SPEC, &dtp,
                                 "'%s' is not an enum parameter [\"float\", \"int\"]",
                                 un_jcur_str(&dtp));
        o->dtype_param = p;
    }
    return UN_OK;
}

static un_status load_outputs(un_ctx *ctx, un_spec *sp, const un_jcur *c, un_op_spec *os) {
    un_status st;
    if (!un_jcur_present(c))
        return un_jcur_error(ctx, UN_ERR_SPEC, c, "missing (every operator has outputs)");
    if (un_jcur_type(c) == UN_JSON_OBJECT) {
        static const char *const keys[] = {"count", "each", NULL};
        if ((st = un_jcur_check_keys(ctx, c, keys)) != UN_OK)
            return st;
        un_jcur cnt = un_jcur_member(c, "count"), each = un_jcur_member(c, "each");
        op_scope sc = {.os = os, .foreach_name = NULL};
        if ((st = parse_expr_at(ctx, sp, &cnt, &sc, &os->outputs_count)) != UN_OK)
            return st;
        if ((st = un_jcur_need_type(ctx, &each, UN_JSON_OBJECT)) != UN_OK)
            return st;
        os->n_outputs = 0;
        return load_output(ctx, sp, &each, os, &os->outputs[0]);
    }
    if ((st = un_jcur_need_type(ctx, c, UN_JSON_ARRAY)) != UN_OK)
        return st;
    int n = un_jcur_len(c);
    if (n < 1 || n > UN_MAX_OUTPUTS)
        return un_jcur_error(ctx, UN_ERR_SPEC, c, "1 to %d outputs expected, found %d",
                             UN_MAX_OUTPUTS, n);
    for (int i = 0; i < n; i++) {
        un_jcur it = un_jcur_item(c, i);
        if ((st = load_output(ctx, sp, &it, os, &os->outputs[i])) != UN_OK)
            return st;
    }
    os->n_outputs = n;
    return UN_OK;
}

/* "shard(<expr>)", "sum" or "copy" */
static un_status load_comp(un_ctx *ctx, un_spec *sp, const un_jcur *c, const op_scope *sc,
                           un_comp *out) {
    un_status st = un_jcur_need_type(ctx, c, UN_JSON_STRING);
    if (st != UN_OK)
        return st;
    const char *s = un_jcur_str(c);
    memset(out, 0, sizeof *out);
    if (strcmp(s, "sum") == 0) {
        out->kind = UN_COMP_SUM;
        return UN_OK;
    }
    if (strcmp(s, "copy") == 0) {
        out->kind = UN_COMP_COPY;
        return UN_OK;
    }
    size_t n = strlen(s);
    if (strncmp(s, "shard(", 6) != 0 || n < 8 || s[n - 1] != ')')
        return un_jcur_error(ctx, UN_ERR_SPEC, c,
                             "expected \"shard(<dim>)\", \"sum\" or \"copy\", found \"%s\"", s);
    char inner[256];
    if (n - 7 >= sizeof inner)
        return un_jcur_error(ctx, UN_ERR_SPEC, c, "dim expression too long");
    memcpy(inner, s + 6, n - 7);
    inner[n - 7] = '\0';
    un_ctx *tmp = un_ctx_new(NULL);
    un_expr_scope scope = {.resolve = op_resolve, .user = sc};
    un_expr *e = NULL;
    st = un_expr_parse(tmp, inner, &scope, sp->arena, &e);
    if (st != UN_OK)
        un_jcur_error(ctx, UN_ERR_SPEC, c, "bad dim expression: %s", un_ctx_errmsg(tmp));
    un_ctx_free(tmp);
    if (st != UN_OK)
        return UN_ERR_SPEC;
    out->kind = UN_COMP_SHARD;
    out->dim = e;
    return UN_OK;
}

static un_status load_rule(un_ctx *ctx, un_spec *sp, const un_jcur *c, un_op_spec *os,
                           un_shard_rule *r) {
    static const char *const keys[] = {"name", "foreach", "when", "require", "in",
                                       "out",  "params",  "doc",  NULL};
    un_status st;
    if ((st = un_jcur_need_type(ctx, c, UN_JSON_OBJECT)) != UN_OK)
        return st;
    if ((st = un_jcur_check_keys(ctx, c, keys)) != UN_OK)
        return st;
    memset(r, 0, sizeof *r);
    const char *name = NULL, *fe = NULL;
    if ((st = un_jcur_get_str(ctx, c, "name", true, &name)) != UN_OK)
        return st;
    r->name = adup(sp, name);
    if ((st = un_jcur_get_str(ctx, c, "foreach", false, &fe)) != UN_OK)
        return st;
    op_scope sc = {.os = os, .foreach_name = fe};
    if (fe) {
        int32_t ref;
        if (un_spec_param_index(os, fe) >= 0 || strcmp(fe, "k") == 0 || strcmp(fe, "i") == 0 ||
            op_resolve(&(op_scope){.os = os, .foreach_name = NULL}, fe, &ref) != UN_NAME_NONE) {
            un_jcur fc = un_jcur_member(c, "foreach");
            return un_jcur_error(ctx, UN_ERR_SPEC, &fc,
                                 "foreach variable '%s' shadows another name", fe);
        }
    }
    r->foreach = fe ? UN_VAR_FOREACH : -1;
    un_jcur wc = un_jcur_member(c, "when");
    if ((st = load_when(ctx, os, &wc, &r->when)) != UN_OK)
        return st;
    un_jcur rq = un_jcur_member(c, "require");
    if (un_jcur_present(&rq) && (st = parse_expr_at(ctx, sp, &rq, &sc, &r->require)) != UN_OK)
        return st;
    un_jcur in = un_jcur_member(c, "in"), out = un_jcur_member(c, "out");
    if ((st = un_jcur_need_type(ctx, &in, UN_JSON_ARRAY)) != UN_OK)
        return st;
    if ((st = un_jcur_need_type(ctx, &out, UN_JSON_ARRAY)) != UN_OK)
        return st;
    if (un_jcur_len(&in) != os->n_inputs)
        return un_jcur_error(ctx, UN_ERR_SPEC, &in,
                             "%d components for %d inputs (one per input, optional ones included)",
                             un_jcur_len(&in), os->n_inputs);
    int n_out = os->outputs_count ? 1 : os->n_outputs;
    if (un_jcur_len(&out) != n_out)
        return un_jcur_error(ctx, UN_ERR_SPEC, &out, "%d components for %d outputs",
                             un_jcur_len(&out), n_out);
    for (int i = 0; i < os->n_inputs; i++) {
        un_jcur it = un_jcur_item(&in, i);
        if ((st = load_comp(ctx, sp, &it, &sc, &r->in[i])) != UN_OK)
            return st;
    }
    for (int i = 0; i < n_out; i++) {
        un_jcur it = un_jcur_item(&out, i);
        if ((st = load_comp(ctx, sp, &it, &sc, &r->out[i])) != UN_OK)
            return st;
    }
    un_jcur pc = un_jcur_member(c, "params");
    if (un_jcur_present(&pc)) {
        if ((st = un_jcur_need_type(ctx, &pc, UN_JSON_OBJECT)) != UN_OK)
            return st;
        int n = un_jcur_len(&pc);
        if (n > UN_MAX_PARAMS)
            return un_jcur_error(ctx, UN_ERR_SPEC, &pc, "too many rewrites");
        for (int i = 0; i < n; i++) {
            un_jcur m = un_jcur_item(&pc, i);
            char pname[64];
            int item = -1;
            snprintf(pname, sizeof pname, "%s", m.key);
            char *br = strchr(pname, '[');
            if (br) {
                if (sscanf(br, "[%d]", &item) != 1 || item < 0 || item >= UN_MAX_DIMS)
                    return un_jcur_error(ctx, UN_ERR_SPEC, &m,
                                         "expected name or name[index] with 0 <= index < %d",
                                         UN_MAX_DIMS);
                *br = '\0';
            }
            int p = un_spec_param_index(os, pname);
            if (p < 0)
                return un_jcur_error(ctx, UN_ERR_SPEC, &m, "unknown parameter '%s'", pname);
            if ((os->params[p].type == UN_PT_LIST) != (item >= 0))
                return un_jcur_error(
                    ctx, UN_ERR_SPEC, &m, "%s",
                    item >= 0 ? "only list parameters take [index]"
                              : "a list parameter is rewritten item by item: name[index]");
            r->rewrite[i].param = p;
            r->rewrite[i].item = item;
            if ((st = parse_expr_at(ctx, sp, &m, &sc, &r->rewrite[i].value)) != UN_OK)
                return st;
        }
        r->n_rewrite = n;
    }
    return UN_OK;
}

/* ---- examples ---- */

static un_status load_example(un_ctx *ctx, const un_jcur *c, const un_op_spec *os, un_example *ex) {
    static const char *const keys[] = {"params", "inputs", "doc", NULL};
    static const char *const ikeys[] = {"dims", "dtype", "range", NULL};
    un_status st;
    if ((st = un_jcur_need_type(ctx, c, UN_JSON_OBJECT)) != UN_OK)
        return st;
    if ((st = un_jcur_check_keys(ctx, c, keys)) != UN_OK)
        return st;
    memset(ex, 0, sizeof *ex);
    un_spec_param_defaults(os, ex->params);
    un_jcur pc = un_jcur_member(c, "params");
    if (un_jcur_present(&pc)) {
        if ((st = un_jcur_need_type(ctx, &pc, UN_JSON_OBJECT)) != UN_OK)
            return st;
        for (int i = 0; i < un_jcur_len(&pc); i++) {
            un_jcur m = un_jcur_item(&pc, i);
            int p = un_spec_param_index(os, m.key);
            if (p < 0)
                return un_jcur_error(ctx, UN_ERR_SPEC, &m, "unknown parameter '%s'", m.key);
            if ((st = un_spec_param_parse(ctx, &os->params[p], &m, &ex->params[p])) != UN_OK)
                return st;
        }
    }
    un_jcur in = un_jcur_member(c, "inputs");
    if ((st = un_jcur_need_type(ctx, &in, UN_JSON_ARRAY)) != UN_OK)
        return st;
    int n = un_jcur_len(&in);
    if (n > UN_MAX_INPUTS)
        return un_jcur_error(ctx, UN_ERR_SPEC, &in, "too many inputs");
    for (int i = 0; i < n; i++) {
        un_jcur it = un_jcur_item(&in, i);
        un_jcur dims = it;
        un_dtype dt = UN_DT_FLOAT;
        int64_t range = 0;
        if (un_jcur_type(&it) == UN_JSON_OBJECT) {
            if ((st = un_jcur_check_keys(ctx, &it, ikeys)) != UN_OK)
                return st;
            dims = un_jcur_member(&it, "dims");
            const char *dts = "float";
            if ((st = un_jcur_get_str(ctx, &it, "dtype", false, &dts)) != UN_OK)
                return st;
            dt = strcmp(dts, "int") == 0 ? UN_DT_INT : UN_DT_FLOAT;
            if ((st = un_jcur_get_int(ctx, &it, "range", false, &range)) != UN_OK)
                return st;
        }
        if ((st = un_jcur_need_type(ctx, &dims, UN_JSON_ARRAY)) != UN_OK)
            return st;
        int r = un_jcur_len(&dims);
        if (r > UN_MAX_DIMS)
            return un_jcur_error(ctx, UN_ERR_SPEC, &dims, "rank %d above %d", r, UN_MAX_DIMS);
        int64_t d[UN_MAX_DIMS];
        for (int j = 0; j < r; j++) {
            un_jcur dj = un_jcur_item(&dims, j);
            if (!un_jcur_is_int(&dj, &d[j]) || d[j] < 1)
                return un_jcur_error(ctx, UN_ERR_SPEC, &dj, "expected a size >= 1");
        }
        ex->in[i] = un_shape_make(r, d, dt);
        ex->range[i] = range;
    }
    ex->n_in = n;
    return UN_OK;
}

/* ---- axioms and their term language ---- */

typedef struct {
    un_ctx *ctx;
    un_spec *sp;
    const un_jcur *c; /* JSON position for messages */
    const char *text;
    const char *p;
    un_axiom *ax;
    un_status st;
} term_parser;

static un_name_kind ax_resolve(const void *user, const char *name, int32_t *ref) {
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
    un_expr_scope scope = {.resolve = ax_resolve, .user = tp->ax};
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

static un_status parse_term_at(un_ctx *ctx, un_spec *sp, const un_jcur *c, un_axiom *ax,
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
    *text = adup(sp, tp.text);
    return UN_OK;
}

static un_status load_axiom(un_ctx *ctx, un_spec *sp, const un_jcur *c, un_axiom *ax) {
    static const char *const keys[] = {"name", "vars", "for", "require", "lhs", "rhs", "doc", NULL};
    un_status st;
    if ((st = un_jcur_need_type(ctx, c, UN_JSON_OBJECT)) != UN_OK)
        return st;
    if ((st = un_jcur_check_keys(ctx, c, keys)) != UN_OK)
        return st;
    memset(ax, 0, sizeof *ax);
    const char *name = NULL;
    if ((st = un_jcur_get_str(ctx, c, "name", true, &name)) != UN_OK)
        return st;
    ax->name = adup(sp, name);
    un_jcur vars = un_jcur_member(c, "vars");
    if ((st = un_jcur_need_type(ctx, &vars, UN_JSON_OBJECT)) != UN_OK)
        return st;
    int nv = un_jcur_len(&vars);
    un_axiom_var *av = un_arena_alloc(sp->arena, sizeof *av * (size_t)(nv ? nv : 1), 8);
    for (int i = 0; i < nv; i++) {
        un_jcur m = un_jcur_item(&vars, i);
        un_jcur dims = m;
        av[i].name = adup(sp, m.key);
        av[i].dtype = UN_DT_FLOAT;
        if (un_jcur_type(&m) == UN_JSON_OBJECT) {
            static const char *const vkeys[] = {"dims", "dtype", "range", NULL};
            if ((st = un_jcur_check_keys(ctx, &m, vkeys)) != UN_OK)
                return st;
            dims = un_jcur_member(&m, "dims");
            const char *dts = "float";
            if ((st = un_jcur_get_str(ctx, &m, "dtype", false, &dts)) != UN_OK)
                return st;
            av[i].dtype = strcmp(dts, "int") == 0 ? UN_DT_INT : UN_DT_FLOAT;
            un_jcur rc = un_jcur_member(&m, "range");
            int64_t lit;
            if (un_jcur_is_int(&rc, &lit) && lit >= 1) {
                char buf[24];
                snprintf(buf, sizeof buf, "%lld", (long long)lit);
                av[i].range = adup(sp, buf);
            } else if (un_jcur_type(&rc) == UN_JSON_STRING) {
                av[i].range = adup(sp, un_jcur_str(&rc));
            } else if (un_jcur_present(&rc)) {
                return un_jcur_error(ctx, UN_ERR_SPEC, &rc,
                                     "expected a size variable name or a size >= 1");
            }
        }
        if ((st = un_jcur_need_type(ctx, &dims, UN_JSON_ARRAY)) != UN_OK)
            return st;
        int r = un_jcur_len(&dims);
        if (r > UN_MAX_DIMS)
            return un_jcur_error(ctx, UN_ERR_SPEC, &dims, "rank above %d", UN_MAX_DIMS);
        av[i].rank = r;
        for (int j = 0; j < r; j++) {
            un_jcur dj = un_jcur_item(&dims, j);
            int64_t lit;
            if (un_jcur_is_int(&dj, &lit) && lit >= 1) {
                char buf[24];
                snprintf(buf, sizeof buf, "%lld", (long long)lit);
                av[i].dims[j] = adup(sp, buf);
            } else if (un_jcur_type(&dj) == UN_JSON_STRING && un_jcur_str(&dj)[0]) {
                av[i].dims[j] = adup(sp, un_jcur_str(&dj));
            } else {
                return un_jcur_error(ctx, UN_ERR_SPEC, &dj,
                                     "expected a size variable name or a size >= 1");
            }
        }
    }
    ax->vars = av;
    ax->n_vars = nv;
    un_jcur fc = un_jcur_member(c, "for");
    if (un_jcur_present(&fc)) {
        if ((st = un_jcur_need_type(ctx, &fc, UN_JSON_OBJECT)) != UN_OK)
            return st;
        int n = un_jcur_len(&fc);
        const char **names = un_arena_alloc(sp->arena, sizeof(char *) * (size_t)(n ? n : 1), 8);
        const un_param **vals =
            un_arena_alloc(sp->arena, sizeof(un_param *) * (size_t)(n ? n : 1), 8);
        int *nvals = un_arena_alloc(sp->arena, sizeof(int) * (size_t)(n ? n : 1), 8);
        for (int i = 0; i < n; i++) {
            un_jcur m = un_jcur_item(&fc, i);
            names[i] = adup(sp, m.key);
            for (int j = 0; j < nv; j++)
                if (strcmp(av[j].name, m.key) == 0)
                    return un_jcur_error(ctx, UN_ERR_SPEC, &m, "'%s' is also a tensor variable",
                                         m.key);
            if ((st = un_jcur_need_type(ctx, &m, UN_JSON_ARRAY)) != UN_OK)
                return st;
            int k = un_jcur_len(&m);
            if (k == 0)
                return un_jcur_error(ctx, UN_ERR_SPEC, &m, "give at least one value to try");
            un_param *pv = un_arena_alloc(sp->arena, sizeof(un_param) * (size_t)k, 8);
            for (int j = 0; j < k; j++) {
                un_jcur it = un_jcur_item(&m, j);
                if (!un_jcur_is_int(&it, &pv[j].v[0]))
                    return un_jcur_error(ctx, UN_ERR_SPEC, &it, "expected an integer");
                pv[j].len = -1;
            }
            vals[i] = pv;
            nvals[i] = k;
        }
        ax->pvar_names = names;
        ax->pvar_values = vals;
        ax->pvar_nvalues = nvals;
        ax->n_pvars = n;
    }
    un_jcur rq = un_jcur_member(c, "require");
    if (un_jcur_present(&rq)) {
        if ((st = un_jcur_need_type(ctx, &rq, UN_JSON_STRING)) != UN_OK)
            return st;
        un_ctx *tmp = un_ctx_new(NULL);
        un_expr_scope scope = {.resolve = ax_resolve, .user = ax};
        un_expr *e = NULL;
        st = un_expr_parse(tmp, un_jcur_str(&rq), &scope, sp->arena, &e);
        if (st != UN_OK)
            un_jcur_error(ctx, UN_ERR_SPEC, &rq, "bad expression: %s", un_ctx_errmsg(tmp));
        un_ctx_free(tmp);
        if (st != UN_OK)
            return UN_ERR_SPEC;
        ax->require = e;
    }
    un_jcur lhs = un_jcur_member(c, "lhs"), rhs = un_jcur_member(c, "rhs");
    if ((st = parse_term_at(ctx, sp, &lhs, ax, &ax->lhs, &ax->lhs_text)) != UN_OK)
        return st;
    if ((st = parse_term_at(ctx, sp, &rhs, ax, &ax->rhs, &ax->rhs_text)) != UN_OK)
        return st;
    return UN_OK;
}

/* ---- operator entries ---- */

static un_status load_op(un_ctx *ctx, un_spec *sp, const un_jcur *c, un_op_spec *os) {
    static const char *const keys[] = {"name",     "doc",     "params",   "inputs",
                                       "require",  "outputs", "sharding", "cost",
                                       "examples", "axioms",  NULL};
    un_status st;
    op_scope sc = {.os = os, .foreach_name = NULL};
    if ((st = un_jcur_check_keys(ctx, c, keys)) != UN_OK)
        return st;
    const char *doc = "";
    if ((st = un_jcur_get_str(ctx, c, "doc", false, &doc)) != UN_OK)
        return st;
    os->doc = adup(sp, doc);
    un_jcur params = un_jcur_member(c, "params");
    if (un_jcur_present(&params)) {
        if ((st = un_jcur_need_type(ctx, &params, UN_JSON_OBJECT)) != UN_OK)
            return st;
        int n = un_jcur_len(&params);
        if (n > UN_MAX_PARAMS)
            return un_jcur_error(ctx, UN_ERR_SPEC, &params, "%d parameters (at most %d)", n,
                                 UN_MAX_PARAMS);
        for (int i = 0; i < n; i++) {
            un_jcur m = un_jcur_item(&params, i);
            if (strcmp(m.key, "k") == 0 || strcmp(m.key, "i") == 0 ||
                strncmp(m.key, "in", 2) == 0 || strncmp(m.key, "out", 3) == 0 ||
                strcmp(m.key, "min") == 0 || strcmp(m.key, "max") == 0 ||
                strcmp(m.key, "len") == 0 || strcmp(m.key, "numel") == 0)
                return un_jcur_error(ctx, UN_ERR_SPEC, &m, "parameter name '%s' is reserved",
                                     m.key);
            if ((st = load_param(ctx, sp, &m, &os->params[i])) != UN_OK)
                return st;
            for (int j = 0; j < i; j++)
                if (strcmp(os->params[j].name, m.key) == 0)
                    return un_jcur_error(ctx, UN_ERR_SPEC, &m, "duplicate parameter");
            os->n_params = i + 1;
        }
    }
    un_jcur inputs = un_jcur_member(c, "inputs");
    if ((st = load_inputs(ctx, sp, &inputs, os)) != UN_OK)
        return st;
    if (os->kind == UN_OPK_SOURCE && os->n_inputs)
        return un_jcur_error(ctx, UN_ERR_SPEC, &inputs, "a source operator takes no inputs");
    if (os->kind != UN_OPK_SOURCE && os->n_inputs == 0)
        return un_jcur_error(ctx, UN_ERR_SPEC, &inputs, "missing (operator '%s' takes inputs)",
                             os->name);
    un_jcur req = un_jcur_member(c, "require");
    if (un_jcur_present(&req)) {
        if ((st = un_jcur_need_type(ctx, &req, UN_JSON_ARRAY)) != UN_OK)
            return st;
        int n = un_jcur_len(&req);
        if (n > 8)
            return un_jcur_error(ctx, UN_ERR_SPEC, &req, "at most 8 requirements");
        for (int i = 0; i < n; i++) {
            un_jcur it = un_jcur_item(&req, i);
            if ((st = parse_expr_at(ctx, sp, &it, &sc, &os->require[i])) != UN_OK)
                return st;
            os->require_text[i] = adup(sp, un_jcur_str(&it));
        }
        os->n_require = n;
    }
    un_jcur outputs = un_jcur_member(c, "outputs");
    if ((st = load_outputs(ctx, sp, &outputs, os)) != UN_OK)
        return st;
    if (os->kind == UN_OPK_SOURCE && (os->outputs_count || os->outputs[0].dims_param < 0))
        return un_jcur_error(ctx, UN_ERR_SPEC, &outputs,
                             "a source operator's output takes its dims from a list parameter");
    un_jcur sh = un_jcur_member(c, "sharding");
    if (un_jcur_present(&sh)) {
        if (os->kind != UN_OPK_REGULAR)
            return un_jcur_error(ctx, UN_ERR_SPEC, &sh,
                                 "only regular operators have sharding rules");
        if ((st = un_jcur_need_type(ctx, &sh, UN_JSON_ARRAY)) != UN_OK)
            return st;
        int n = un_jcur_len(&sh);
        if (n > UN_MAX_RULES)
            return un_jcur_error(ctx, UN_ERR_SPEC, &sh, "%d rules (at most %d)", n, UN_MAX_RULES);
        for (int i = 0; i < n; i++) {
            un_jcur it = un_jcur_item(&sh, i);
            if ((st = load_rule(ctx, sp, &it, os, &os->rules[i])) != UN_OK)
                return st;
            for (int j = 0; j < i; j++)
                if (strcmp(os->rules[j].name, os->rules[i].name) == 0) {
                    un_jcur nc = un_jcur_member(&it, "name");
                    return un_jcur_error(ctx, UN_ERR_SPEC, &nc, "duplicate rule name '%s'",
                                         os->rules[i].name);
                }
            os->n_rules = i + 1;
        }
    }
    un_jcur cost = un_jcur_member(c, "cost");
    if (un_jcur_present(&cost)) {
        static const char *const ckeys[] = {"flops", "bytes", "bwd_flops", "bwd_bytes", NULL};
        if ((st = un_jcur_need_type(ctx, &cost, UN_JSON_OBJECT)) != UN_OK)
            return st;
        if ((st = un_jcur_check_keys(ctx, &cost, ckeys)) != UN_OK)
            return st;
        un_jcur fl = un_jcur_member(&cost, "flops"), by = un_jcur_member(&cost, "bytes");
        if (un_jcur_present(&fl) && (st = parse_expr_at(ctx, sp, &fl, &sc, &os->flops)) != UN_OK)
            return st;
        if (un_jcur_present(&by) && (st = parse_expr_at(ctx, sp, &by, &sc, &os->bytes)) != UN_OK)
            return st;
        un_jcur bf = un_jcur_member(&cost, "bwd_flops"), bb = un_jcur_member(&cost, "bwd_bytes");
        if (un_jcur_present(&bf) &&
            (st = parse_expr_at(ctx, sp, &bf, &sc, &os->bwd_flops)) != UN_OK)
            return st;
        if (un_jcur_present(&bb) &&
            (st = parse_expr_at(ctx, sp, &bb, &sc, &os->bwd_bytes)) != UN_OK)
            return st;
    }
    un_jcur exs = un_jcur_member(c, "examples");
    if (un_jcur_present(&exs)) {
        if ((st = un_jcur_need_type(ctx, &exs, UN_JSON_ARRAY)) != UN_OK)
            return st;
        int n = un_jcur_len(&exs);
        un_example *ex = un_arena_alloc(sp->arena, sizeof *ex * (size_t)(n ? n : 1), 16);
        for (int i = 0; i < n; i++) {
            un_jcur it = un_jcur_item(&exs, i);
            if ((st = load_example(ctx, &it, os, &ex[i])) != UN_OK)
                return st;
        }
        os->examples = ex;
        os->n_examples = n;
    }
    return UN_OK;
}

static un_status load_axioms_of(un_ctx *ctx, un_spec *sp, const un_jcur *c, un_op_spec *os) {
    un_jcur axs = un_jcur_member(c, "axioms");
    if (!un_jcur_present(&axs))
        return UN_OK;
    un_status st = un_jcur_need_type(ctx, &axs, UN_JSON_ARRAY);
    if (st != UN_OK)
        return st;
    int n = un_jcur_len(&axs);
    un_axiom *ax = un_arena_alloc(sp->arena, sizeof *ax * (size_t)(n ? n : 1), 8);
    for (int i = 0; i < n; i++) {
        un_jcur it = un_jcur_item(&axs, i);
        if ((st = load_axiom(ctx, sp, &it, &ax[i])) != UN_OK)
            return st;
    }
    os->axioms = ax;
    os->n_axioms = n;
    return UN_OK;
}

static un_status parse_root(un_ctx *ctx, un_spec *sp, const un_jdoc *doc) {
    static const char *const keys[] = {"version", "doc", "ops", NULL};
    un_jcur root = un_jdoc_root(doc);
    un_status st;
    if ((st = un_jcur_need_type(ctx, &root, UN_JSON_OBJECT)) != UN_OK)
        return st;
    if ((st = un_jcur_check_keys(ctx, &root, keys)) != UN_OK)
        return st;
    int64_t version = 0;
    if ((st = un_jcur_get_int(ctx, &root, "version", true, &version)) != UN_OK)
        return st;
    if (version != 1) {
        un_jcur vc = un_jcur_member(&root, "version");
        return un_jcur_error(ctx, UN_ERR_SPEC, &vc, "unsupported version %lld (this build reads 1)",
                             (long long)version);
    }
    un_jcur ops = un_jcur_member(&root, "ops");
    if ((st = un_jcur_need_type(ctx, &ops, UN_JSON_ARRAY)) != UN_OK)
        return st;
    int n = un_jcur_len(&ops);
    int index[UN_OP_COUNT];
    /* pass 1: entries without axioms (terms may name any operator) */
    for (int i = 0; i < n; i++) {
        un_jcur it = un_jcur_item(&ops, i);
        if ((st = un_jcur_need_type(ctx, &it, UN_JSON_OBJECT)) != UN_OK)
            return st;
        const char *name = NULL;
        if ((st = un_jcur_get_str(ctx, &it, "name", true, &name)) != UN_OK)
            return st;
        un_op op;
        un_jcur nc = un_jcur_member(&it, "name");
        if (!un_op_from_name(name, &op))
            return un_jcur_error(ctx, UN_ERR_SPEC, &nc,
                                 "unknown operator '%s' (not in pcg/ops.def)", name);
        if (sp->present[op])
            return un_jcur_error(ctx, UN_ERR_SPEC, &nc, "duplicate operator '%s'", name);
        un_op_spec *os = &sp->ops[op];
        os->op = op;
        os->name = un__ops[op].name;
        os->kind = un__ops[op].kind;
        if ((st = load_op(ctx, sp, &it, os)) != UN_OK)
            return st;
        sp->present[op] = true;
        index[op] = i;
    }
    for (int op = 0; op < UN_OP_COUNT; op++)
        if (!sp->present[op])
            return un_jcur_error(ctx, UN_ERR_SPEC, &ops,
                                 "no entry for operator '%s' (listed in pcg/ops.def)",
                                 un__ops[op].name);
    /* pass 2: axioms */
    for (int op = 0; op < UN_OP_COUNT; op++) {
        un_jcur it = un_jcur_item(&ops, index[op]);
        if ((st = load_axioms_of(ctx, sp, &it, &sp->ops[op])) != UN_OK)
            return st;
    }
    return UN_OK;
}

un_status un_spec_parse(un_ctx *ctx, const char *name, const char *text, size_t len,
                        un_spec **out) {
    *out = NULL;
    un_jdoc *doc = NULL;
    un_status st = un_jdoc_parse(ctx, name, text, len, &doc);
    if (st != UN_OK)
        return st;
    un_spec *sp = un_xcalloc(1, sizeof *sp);
    sp->arena = un_arena_new(1 << 16);
    sp->hash = un_hash_bytes(text, len, 0);
    st = parse_root(ctx, sp, doc);
    un_jdoc_free(doc);
    if (st != UN_OK) {
        un_spec_free(sp);
        return st;
    }
    *out = sp;
    return UN_OK;
}

un_status un_spec_load(un_ctx *ctx, const char *path, un_spec **out) {
    *out = NULL;
    char *buf;
    size_t len;
    un_status st = un_read_file(ctx, path, &buf, &len);
    if (st != UN_OK)
        return st;
    st = un_spec_parse(ctx, path, buf, len, out);
    free(buf);
    return st;
}

void un_spec_free(un_spec *spec) {
    if (!spec)
        return;
    un_arena_free(spec->arena);
    free(spec);
}

const un_op_spec *un_spec_op(const un_spec *spec, un_op op) {
    UN_ASSERT((unsigned)op < UN_OP_COUNT);
    return &spec->ops[op];
}

int un_spec_param_index(const un_op_spec *os, const char *name) {
    for (int i = 0; i < os->n_params; i++)
        if (strcmp(os->params[i].name, name) == 0)
            return i;
    return -1;
}

void un_spec_param_defaults(const un_op_spec *os, un_param *params) {
    memset(params, 0, sizeof(un_param) * UN_MAX_PARAMS);
    for (int i = 0; i < UN_MAX_PARAMS; i++)
        params[i].len = -1;
    for (int i = 0; i < os->n_params; i++)
        params[i] = os->params[i].dflt;
}

uint64_t un_spec_hash(const un_spec *spec) { return spec->hash; }

int un_spec_total_rules(const un_spec *spec) {
    int n = 0;
    for (int i = 0; i < UN_OP_COUNT; i++)
        n += spec->ops[i].n_rules;
    return n;
}

int un_spec_total_axioms(const un_spec *spec) {
    int n = 0;
    for (int i = 0; i < UN_OP_COUNT; i++)
        n += spec->ops[i].n_axioms;
    return n;
}

int un_spec_n_present_inputs(const un_op_spec *os, const un_param *params) {
    int n = 0;
    for (int i = 0; i < os->n_inputs; i++)
        if (un_when_holds(&os->inputs[i].when, params))
            n++;
    return n;
}

void un_spec_param_str(const un_param_spec *ps, const un_param *v, un_buf *b) {
    if (ps->type == UN_PT_LIST) {
        un_buf_printf(b, "[");
        for (int i = 0; i < v->len; i++)
            un_buf_printf(b, "%s%lld", i ? "," : "", (long long)v->v[i]);
        un_buf_printf(b, "]");
    } else if (ps->type == UN_PT_ENUM && v->v[0] >= 0 && v->v[0] < ps->n_enum) {
        un_buf_printf(b, "%s", ps->enums[v->v[0]]);
    } else if (ps->type == UN_PT_BOOL) {
        un_buf_printf(b, "%s", v->v[0] ? "true" : "false");
    } else {
        un_buf_printf(b, "%lld", (long long)v->v[0]);
    }
}

/* ---- inference ---- */

#define NCOMP    (UN_MAX_DIMS + 2)
#define MAX_INST (UN_MAX_RULES * UN_MAX_DIMS + 1)

typedef struct {
    int32_t rule; /* -1: implicit copy */
    int32_t fe;
    int8_t in_comp[UN_MAX_INPUTS];
    int8_t out_comp[UN_MAX_OUTPUTS];
} inst;

typedef struct {
    un_ctx *ctx;
    const un_op_spec *os;
    const un_param *params;
    un_expr_env env;
    int n_in, n_out;
    const un_shape *in;
    un_shape lout[UN_MAX_OUTPUTS]; /* logical outputs */
    int n_inst;
    inst insts[MAX_INST];
    int32_t rem[UN_MAX_INPUTS][NCOMP];
    int32_t deg[MAX_INST];
    un_shape out[UN_MAX_OUTPUTS];
} solver;

/* A shape as text in buf (96 bytes), for messages: called only on the error path. */
static const char *shape_s(const un_shape *sh, char *buf) {
    un_shape_str(sh, buf, 96);
    return buf;
}

static void comp_str(int c, char *buf, size_t n) {
    if (c == UN_COMP_SUM_AT)
        snprintf(buf, n, "sum");
    else if (c == UN_COMP_COPY_AT)
        snprintf(buf, n, "copy");
    else
        snprintf(buf, n, "shard(%d)", c);
}

static int32_t comp_of(const un_shape *s, int c) {
    if (c == UN_COMP_SUM_AT)
        return s->sum;
    if (c == UN_COMP_COPY_AT)
        return s->copy;
    return c < s->rank ? s->shard[c] : 1;
}

static void comp_mul(un_shape *s, int c, int32_t k) {
    if (c == UN_COMP_SUM_AT)
        s->sum *= k;
    else if (c == UN_COMP_COPY_AT)
        s->copy *= k;
    else
        s->shard[c] *= k;
}

/* Resolves a rule component to a component index for a tensor of rank `rank`; -1 if invalid. */
static int resolve_comp(solver *s, const un_comp *c, int rank, int64_t fe) {
    if (c->kind == UN_COMP_SUM)
        return UN_COMP_SUM_AT;
    if (c->kind == UN_COMP_COPY)
        return UN_COMP_COPY_AT;
    int64_t vars[UN_VAR_COUNT] = {0, fe, 0};
    un_expr_env env = s->env;
    env.vars = vars;
    env.n_vars = UN_VAR_COUNT;
    int64_t d;
    if (un_expr_eval(NULL, c->dim, &env, &d) != UN_OK)
        return -1;
    if (d < 0)
        d += rank;
    if (d < 0 || d >= rank)
        return -1;
    return (int)d;
}

static bool rule_require_ok(solver *s, const inst *in, int32_t k) {
    if (in->rule < 0)
        return true;
    const un_shard_rule *r = &s->os->rules[in->rule];
    if (!r->require)
        return true;
    int64_t vars[UN_VAR_COUNT] = {k, in->fe, 0};
    un_expr_env env = s->env;
    env.vars = vars;
    env.n_vars = UN_VAR_COUNT;
    int64_t v = 0;
    return un_expr_eval(NULL, r->require, &env, &v) == UN_OK && v != 0;
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static bool solve(solver *s, int j) {
    if (j == s->n_inst) {
        for (int t = 0; t < s->n_in; t++)
            for (int c = 0; c < NCOMP; c++)
                if (s->rem[t][c] != 1)
                    return false;
        for (int o = 0; o < s->n_out; o++)
            s->out[o] = s->lout[o];
        for (int i = 0; i < s->n_inst; i++) {
            if (s->deg[i] == 1)
                continue;
            for (int o = 0; o < s->n_out; o++)
                comp_mul(&s->out[o], s->insts[i].out_comp[o], s->deg[i]);
        }
        char why[128];
        for (int o = 0; o < s->n_out; o++)
            if (!un_shape_valid(&s->out[o], why, sizeof why))
                return false;
        return true;
    }
    const inst *in = &s->insts[j];
    int64_t g = 0;
    for (int t = 0; t < s->n_in; t++)
        g = gcd64(g, s->rem[t][in->in_comp[t]]);
    for (int64_t k = g; k >= 1; k--) {
        if (g % k)
            continue;
        if (k > 1 && !rule_require_ok(s, in, (int32_t)k))
            continue;
        for (int t = 0; t < s->n_in; t++)
            s->rem[t][in->in_comp[t]] /= (int32_t)k;
        s->deg[j] = (int32_t)k;
        if (solve(s, j + 1))
            return true;
        for (int t = 0; t < s->n_in; t++)
            s->rem[t][in->in_comp[t]] *= (int32_t)k;
    }
    s->deg[j] = 1;
    return false;
}

static const char *inst_name(const solver *s, const inst *in, char *buf, size_t n) {
    if (in->rule < 0)
        snprintf(buf, n, "copy");
    else if (s->os->rules[in->rule].foreach >= 0)
        snprintf(buf, n, "%s[%d]", s->os->rules[in->rule].name, in->fe);
    else
        snprintf(buf, n, "%s", s->os->rules[in->rule].name);
    return buf;
}

/* Explains why no combination of rules fits. */
static un_status layout_error(solver *s, const char *label) {
    if (!s->ctx)
        return UN_ERR_SHAPE; /* no one reads the message: skip building it */
    un_buf b = {0};
    un_buf_printf(&b, "%s (%s): ", label, s->os->name);
    for (int t = 0; t < s->n_in; t++)
        for (int c = 0; c < NCOMP; c++) {
            int32_t have = comp_of(&s->in[t], c);
            if (have == 1)
                continue;
            char cn[32], rn[64];
            comp_str(c, cn, sizeof cn);
            int touching = 0;
            for (int i = 0; i < s->n_inst; i++) {
                const inst *in = &s->insts[i];
                if (in->in_comp[t] != c)
                    continue;
                touching++;
                for (int u = 0; u < s->n_in; u++) {
                    int32_t other = comp_of(&s->in[u], in->in_comp[u]);
                    if (u == t || gcd64(have, other) > 1)
                        continue;
                    char cn2[32];
                    comp_str(in->in_comp[u], cn2, sizeof cn2);
                    un_buf_printf(&b,
                                  "input %d (%s) has %s degree %d; rule '%s' would account for it "
                                  "but needs input %d (%s) "
                                  "%s degree %d too, which is %d",
                                  t, s->os->inputs[t].name, cn, have,
                                  inst_name(s, in, rn, sizeof rn), u, s->os->inputs[u].name, cn2,
                                  have, other);
                    goto done;
                }
            }
            if (touching == 0) {
                un_buf_printf(&b,
                              "input %d (%s) has %s degree %d, but no sharding rule of %s gives "
                              "input %d a %s component",
                              t, s->os->inputs[t].name, cn, have, s->os->name, t, cn);
                /* rules switched off by their conditions */
                for (int r = 0; r < s->os->n_rules; r++) {
                    const un_shard_rule *rule = &s->os->rules[r];
                    if (un_when_holds(&rule->when, s->params))
                        continue;
                    un_buf_printf(&b, "; rule '%s' is off (needs", rule->name);
                    for (int w = 0; w < rule->when.n; w++) {
                        const un_param_spec *ps = &s->os->params[rule->when.param[w]];
                        un_param v = un_param_int(rule->when.value[w]);
                        un_buf_printf(&b, " %s=", ps->name);
                        un_spec_param_str(ps, &v, &b);
                    }
                    un_buf_printf(&b, ")");
                }
                goto done;
            }
        }
    un_buf_printf(&b, "the input layouts fit no combination of its sharding rules");
done:
    un_buf_printf(&b, " [inputs:");
    for (int t = 0; t < s->n_in; t++) {
        char sb[96];
        un_shape_str(&s->in[t], sb, sizeof sb);
        un_buf_printf(&b, " %s", sb);
    }
    un_buf_printf(&b, "]");
    un_status st = un_ctx_error(s->ctx, UN_ERR_SHAPE, "%s", b.data);
    un_buf_free(&b);
    return st;
}

static un_status logical_output(solver *s, int o, const un_output_spec *spec, const char *label,
                                un_shape *out) {
    un_ctx *ctx = s->ctx;
    int64_t vars[UN_VAR_COUNT] = {1, 0, o};
    un_expr_env env = s->env;
    env.vars = vars;
    env.n_vars = UN_VAR_COUNT;
    int64_t dims[UN_MAX_DIMS];
    int rank = 0;
    un_status st;
    if (spec->like >= 0) {
        const un_shape *l = &s->in[spec->like];
        rank = l->rank;
        memcpy(dims, l->dim, sizeof dims);
        for (int j = 0; j < spec->n_set; j++) {
            int64_t at, v;
            if ((st = un_expr_eval(ctx, spec->set_at[j], &env, &at)) != UN_OK)
                return st;
            if ((st = un_expr_eval(ctx, spec->set_val[j], &env, &v)) != UN_OK)
                return st;
            if (at < 0)
                at += rank;
            if (at < 0 || at >= rank)
                return un_ctx_error(ctx, UN_ERR_SHAPE,
                                    "%s (%s): output %d sets dim %lld of a rank-%d tensor", label,
                                    s->os->name, o, (long long)at, rank);
            dims[at] = v;
        }
        if (spec->drop && un_when_holds(&spec->drop_when, s->params)) {
            int64_t at;
            if ((st = un_expr_eval(ctx, spec->drop, &env, &at)) != UN_OK)
                return st;
            if (at < 0)
                at += rank;
            if (at < 0 || at >= rank)
                return un_ctx_error(ctx, UN_ERR_SHAPE,
                                    "%s (%s): output %d drops dim %lld of a rank-%d tensor", label,
                                    s->os->name, o, (long long)at, rank);
            for (int j = (int)at; j + 1 < rank; j++)
                dims[j] = dims[j + 1];
            rank--;
        }
    } else if (spec->dims_param >= 0) {
        const un_param *p = &s->params[spec->dims_param];
        rank = p->len;
        for (int j = 0; j < rank; j++)
            dims[j] = p->v[j];
    } else {
        rank = spec->n_dims;
        for (int j = 0; j < rank; j++)
            if ((st = un_expr_eval(ctx, spec->dims[j], &env, &dims[j])) != UN_OK)
                return st;
    }
    for (int j = 0; j < rank; j++)
        if (dims[j] < 1)
            return un_ctx_error(ctx, UN_ERR_SHAPE,
                                "%s (%s): output %d would have size %lld in dim %d", label,
                                s->os->name, o, (long long)dims[j], j);
    un_dtype dt = spec->dtype == UN_DT_COUNT ? s->in[0].dtype : spec->dtype;
    if (spec->dtype_param >= 0)
        dt = s->params[spec->dtype_param].v[0] == 1 ? UN_DT_INT : UN_DT_FLOAT;
    *out = un_shape_make(rank, dims, dt);
    return UN_OK;
}

static un_status infer_parallel(un_ctx *ctx, const un_op_spec *os, const un_param *params,
                                const un_shape *in, const char *label, un_infer *out) {
    un_shape s = *in;
    int pd = un_spec_param_index(os, "dim"), pk = un_spec_param_index(os, "degree");
    UN_ASSERT(pk >= 0);
    int64_t k = params[pk].v[0];
    int64_t d = pd >= 0 ? params[pd].v[0] : 0;
    char sb[96];
    if (k < 1)
        return un_ctx_error(ctx, UN_ERR_SHAPE, "%s (%s): degree %lld < 1", label, os->name,
                            (long long)k);
    if (pd >= 0 && (d < 0 || d >= in->rank))
        return un_ctx_error(ctx, UN_ERR_SHAPE, "%s (%s): input 0 %s has no dim %lld", label,
                            os->name, shape_s(in, sb), (long long)d);
    switch (os->op) {
    case UN_OP_PARTITION:
        if ((int64_t)in->shard[d] * k > UN_MAX_DEGREE)
            return un_ctx_error(ctx, UN_ERR_SHAPE,
                                "%s (partition): input 0 %s: more than %d blocks", label,
                                shape_s(in, sb), UN_MAX_DEGREE);
        if (in->dim[d] % ((int64_t)in->shard[d] * k) != 0)
            return un_ctx_error(ctx, UN_ERR_SHAPE,
                                "%s (partition): input 0 %s: dim %lld of size %lld is not "
                                "divisible into %lld blocks",
                                label, shape_s(in, sb), (long long)d, (long long)in->dim[d],
                                (long long)(in->shard[d] * k));
        s.shard[d] *= (int32_t)k;
        break;
    case UN_OP_COMBINE:
        if (in->shard[d] % k != 0)
            return un_ctx_error(
                ctx, UN_ERR_SHAPE,
                "%s (combine): input 0 %s: dim %lld has shard degree %d, not a multiple of %lld",
                label, shape_s(in, sb), (long long)d, in->shard[d], (long long)k);
        s.shard[d] /= (int32_t)k;
        break;
    case UN_OP_REPLICATE:
        if ((int64_t)in->copy * k > UN_MAX_DEGREE)
            return un_ctx_error(ctx, UN_ERR_SHAPE,
                                "%s (replicate): input 0 %s: more than %d copies", label,
                                shape_s(in, sb), UN_MAX_DEGREE);
        s.copy *= (int32_t)k;
        break;
    case UN_OP_REDUCE:
        if (in->sum % k != 0)
            return un_ctx_error(ctx, UN_ERR_SHAPE,
                                "%s (reduce): input 0 %s has sum degree %d, not a multiple of %lld",
                                label, shape_s(in, sb), in->sum, (long long)k);
        s.sum /= (int32_t)k;
        break;
    default:
        UN_ASSERT(0);
    }
    out->n_out = 1;
    char why[128];
    if (!un_shape_valid(&s, why, sizeof why))
        return un_ctx_error(ctx, UN_ERR_SHAPE, "%s (%s): output of input 0 %s: %s", label, os->name,
                            shape_s(in, sb), why);
    out->out[0] = s;
    return UN_OK;
}

/* The optional layout parameters of a source op (shard list, sum, copy): an input of a rule
 * pattern may already be parallel. */
static un_status source_layout(un_ctx *ctx, const un_op_spec *os, const un_param *params,
                               const char *label, un_shape *s) {
    int ish = un_spec_param_index(os, "shard"), isum = un_spec_param_index(os, "sum"),
        icp = un_spec_param_index(os, "copy");
    if (ish >= 0 && params[ish].len > 0) {
        if (params[ish].len != s->rank)
            return un_ctx_error(ctx, UN_ERR_SHAPE,
                                "%s (%s): parameter 'shard' lists %d degrees for rank %d", label,
                                os->name, (int)params[ish].len, s->rank);
        for (int i = 0; i < s->rank; i++)
            s->shard[i] = (int32_t)params[ish].v[i];
    }
    if (isum >= 0)
        s->sum = (int32_t)params[isum].v[0];
    if (icp >= 0)
        s->copy = (int32_t)params[icp].v[0];
    return UN_OK;
}

void un_spec_parallel_params(const un_spec *spec, un_op op, int64_t dim, int64_t degree,
                             un_param *p) {
    const un_op_spec *os = un_spec_op(spec, op);
    memset(p, 0, sizeof(un_param) * UN_MAX_PARAMS);
    un_spec_param_defaults(os, p);
    int pd = un_spec_param_index(os, "dim"), pk = un_spec_param_index(os, "degree");
    if (pd >= 0)
        p[pd].v[0] = dim;
    UN_ASSERT(pk >= 0);
    p[pk].v[0] = degree;
}

void un_infer_piece(const un_infer *inf, const int32_t *u, bool is_out, int t, int32_t *block,
                    int32_t *sum, int32_t *copy) {
    memset(block, 0, sizeof(int32_t) * UN_MAX_DIMS);
    *sum = 0;
    *copy = 0;
    for (int j = 0; j < inf->n_uses; j++) {
        const un_rule_use *use = &inf->uses[j];
        int c = is_out ? use->out_comp[t] : use->in_comp[t];
        int32_t k = use->degree;
        if (c == UN_COMP_SUM_AT)
            *sum = *sum * k + u[j];
        else if (c == UN_COMP_COPY_AT)
            *copy = *copy * k + u[j];
        else
            block[c] = block[c] * k + u[j];
    }
}

un_status un_spec_infer(un_ctx *ctx, const un_spec *spec, un_op op, const un_param *params,
                        const un_shape *in, int n_in, const char *label, un_infer *out) {
    memset(out, 0, sizeof *out);
    const un_op_spec *os = un_spec_op(spec, op);
    if (!label)
        label = os->name;
    char why[256];
    for (int i = 0; i < os->n_params; i++)
        if (!un_spec_param_valid(&os->params[i], &params[i], why, sizeof why))
            return un_ctx_error(ctx, UN_ERR_SHAPE, "%s (%s): %s", label, os->name, why);
    memcpy(out->local, params, sizeof out->local);
    if (os->kind == UN_OPK_SOURCE) {
        if (n_in != 0)
            return un_ctx_error(ctx, UN_ERR_SHAPE, "%s (%s): takes no inputs, got %d", label,
                                os->name, n_in);
        const un_output_spec *o = &os->outputs[0];
        const un_param *p = &params[o->dims_param];
        if (p->len < 0 || p->len > UN_MAX_DIMS)
            return un_ctx_error(ctx, UN_ERR_SHAPE, "%s (%s): parameter '%s' must list the dims",
                                label, os->name, os->params[o->dims_param].name);
        un_dtype dt = o->dtype;
        if (o->dtype_param >= 0)
            dt = params[o->dtype_param].v[0] == 1 ? UN_DT_INT : UN_DT_FLOAT;
        out->out[0] = un_shape_make(p->len, p->v, dt);
        out->n_out = 1;
        un_status st = source_layout(ctx, os, params, label, &out->out[0]);
        if (st != UN_OK)
            return st;
        if (!un_shape_valid(&out->out[0], why, sizeof why))
            return un_ctx_error(ctx, UN_ERR_SHAPE, "%s (%s): %s", label, os->name, why);
        return UN_OK;
    }
    int n_present = un_spec_n_present_inputs(os, params);
    if (n_in != n_present)
        return un_ctx_error(ctx, UN_ERR_SHAPE,
                            "%s (%s): expects %d inputs under these parameters, got %d", label,
                            os->name, n_present, n_in);
    for (int t = 0; t < n_in; t++) {
        const un_input_spec *is = &os->inputs[t];
        char sb[96];
        if (!un_shape_valid(&in[t], why, sizeof why))
            return un_ctx_error(ctx, UN_ERR_SHAPE, "%s (%s): input %d (%s) %s: %s", label, os->name,
                                t, is->name, shape_s(&in[t], sb), why);
        if (is->rank >= 0 ? in[t].rank != is->rank : in[t].rank < is->min_rank)
            return un_ctx_error(
                ctx, UN_ERR_SHAPE, "%s (%s): input %d (%s) %s has rank %d, expected %s%d", label,
                os->name, t, is->name, shape_s(&in[t], sb), in[t].rank,
                is->rank >= 0 ? "" : "at least ", is->rank >= 0 ? is->rank : is->min_rank);
        if (is->dtype != UN_DT_COUNT && in[t].dtype != is->dtype)
            return un_ctx_error(ctx, UN_ERR_SHAPE,
                                "%s (%s): input %d (%s) %s has dtype %s, expected %s", label,
                                os->name, t, is->name, shape_s(&in[t], sb),
                                un_dtype_name(in[t].dtype), un_dtype_name(is->dtype));
    }
    if (os->kind == UN_OPK_PARALLEL)
        return infer_parallel(ctx, os, params, &in[0], label, out);

    solver *s = un_xcalloc(1, sizeof *s);
    un_status st = UN_OK;
    s->ctx = ctx;
    s->os = os;
    s->params = params;
    s->in = in;
    s->n_in = n_in;
    const un_shape *inp[UN_MAX_INPUTS], *outp[UN_MAX_OUTPUTS];
    un_shape lin[UN_MAX_INPUTS];
    for (int t = 0; t < n_in; t++) {
        lin[t] = un_shape_logical(&in[t]);
        inp[t] = &lin[t];
    }
    s->env = (un_expr_env){.params = params, .n_params = os->n_params, .in = inp, .n_in = n_in};
    for (int r = 0; r < os->n_require; r++) {
        int64_t v = 0;
        if (un_expr_eval(NULL, os->require[r], &s->env, &v) == UN_OK && v)
            continue;
        if (!ctx) {
            st = UN_ERR_SHAPE;
            goto done;
        }
        /* evaluate again to capture the reason */
        un_ctx *tmp = un_ctx_new(NULL);
        un_status est = un_expr_eval(tmp, os->require[r], &s->env, &v);
        {
            un_buf b = {0};
            for (int t = 0; t < n_in; t++) {
                char sb[96];
                un_shape_str(&lin[t], sb, sizeof sb);
                un_buf_printf(&b, " %s", sb);
            }
            st = un_ctx_error(ctx, UN_ERR_SHAPE, "%s (%s): requirement \"%s\" %s [inputs:%s]",
                              label, os->name, os->require_text[r],
                              est != UN_OK ? un_ctx_errmsg(tmp) : "fails", b.data ? b.data : "");
            un_buf_free(&b);
        }
        un_ctx_free(tmp);
        if (st != UN_OK)
            goto done;
    }
    int n_out = os->n_outputs;
    if (os->outputs_count) {
        int64_t v = 0;
        if ((st = un_expr_eval(ctx, os->outputs_count, &s->env, &v)) != UN_OK)
            goto done;
        if (v < 1 || v > UN_MAX_OUTPUTS) {
            st = un_ctx_error(ctx, UN_ERR_SHAPE, "%s (%s): %lld outputs (1 to %d allowed)", label,
                              os->name, (long long)v, UN_MAX_OUTPUTS);
            goto done;
        }
        n_out = (int)v;
    }
    s->n_out = n_out;
    for (int o = 0; o < n_out; o++) {
        const un_output_spec *ospec = &os->outputs[os->outputs_count ? 0 : o];
        if ((st = logical_output(s, o, ospec, label, &s->lout[o])) != UN_OK)
            goto done;
        outp[o] = &s->lout[o];
    }
    s->env.out = outp;
    s->env.n_out = n_out;
    out->n_out = n_out;
    bool trivial = true;
    for (int t = 0; t < n_in; t++)
        trivial = trivial && un_shape_is_trivial(&in[t]);
    if (trivial) {
        for (int o = 0; o < n_out; o++)
            out->out[o] = s->lout[o];
        goto done;
    }
    /* rule instances */
    for (int r = 0; r <= os->n_rules; r++) {
        bool copy = r == os->n_rules;
        const un_shard_rule *rule = copy ? NULL : &os->rules[r];
        if (rule && !un_when_holds(&rule->when, params))
            continue;
        int nfe = rule && rule->foreach >= 0 ? in[0].rank : 1;
        for (int fe = 0; fe < nfe; fe++) {
            inst *it = &s->insts[s->n_inst];
            memset(it, 0, sizeof *it);
            it->rule = copy ? -1 : r;
            it->fe = rule && rule->foreach >= 0 ? fe : -1;
            bool ok = true;
            for (int t = 0; t < n_in && ok; t++) {
                int c = copy ? UN_COMP_COPY_AT : resolve_comp(s, &rule->in[t], in[t].rank, fe);
                ok = c >= 0;
                it->in_comp[t] = (int8_t)c;
            }
            for (int o = 0; o < n_out && ok; o++) {
                int c = copy ? UN_COMP_COPY_AT
                             : resolve_comp(s, &rule->out[os->outputs_count ? 0 : o],
                                            s->lout[o].rank, fe);
                ok = c >= 0;
                it->out_comp[o] = (int8_t)c;
            }
            if (ok && rule && rule->foreach >= 0 && rule->require) {
                /* a foreach family filtered by a condition on the variable alone: test with k = 2
                 */
                ok = rule_require_ok(s, it, 2) || un_expr_uses_var(rule->require, UN_VAR_K);
            }
            if (ok)
                s->n_inst++;
        }
    }
    for (int t = 0; t < n_in; t++)
        for (int c = 0; c < NCOMP; c++)
            s->rem[t][c] = c < in[t].rank || c >= UN_MAX_DIMS ? comp_of(&in[t], c) : 1;
    for (int i = 0; i < s->n_inst; i++)
        s->deg[i] = 1;
    if (!solve(s, 0)) {
        st = layout_error(s, label);
        goto done;
    }
    for (int o = 0; o < n_out; o++)
        out->out[o] = s->out[o];
    for (int i = 0; i < s->n_inst; i++) {
        if (s->deg[i] == 1)
            continue;
        if (out->n_uses == UN_MAX_USES) {
            st = un_ctx_error(ctx, UN_ERR_LIMIT, "%s (%s): more than %d sharding rules at once",
                              label, os->name, UN_MAX_USES);
            goto done;
        }
        un_rule_use *u = &out->uses[out->n_uses++];
        u->rule = s->insts[i].rule;
        u->foreach = s->insts[i].fe;
        u->degree = s->deg[i];
        memcpy(u->in_comp, s->insts[i].in_comp, sizeof u->in_comp);
        memcpy(u->out_comp, s->insts[i].out_comp, sizeof u->out_comp);
        for (int t = n_in; t < UN_MAX_INPUTS; t++)
            u->in_comp[t] = -1;
        for (int o = n_out; o < UN_MAX_OUTPUTS; o++)
            u->out_comp[o] = -1;
        if (u->rule < 0)
            continue;
        const un_shard_rule *rule = &os->rules[u->rule];
        for (int w = 0; w < rule->n_rewrite; w++) {
            int64_t vars[UN_VAR_COUNT] = {u->degree, u->foreach, 0};
            un_expr_env env = s->env;
            env.params = out->local;
            env.vars = vars;
            env.n_vars = UN_VAR_COUNT;
            int64_t v;
            if ((st = un_expr_eval(ctx, rule->rewrite[w].value, &env, &v)) != UN_OK)
                goto done;
            const un_rewrite *rw = &rule->rewrite[w];
            out->local[rw->param].v[rw->item < 0 ? 0 : rw->item] = v;
        }
    }
done:
    free(s);
    return st;
}

un_status un_spec_cost(un_ctx *ctx, const un_spec *spec, un_op op, const un_param *params,
                       const un_shape *in, int n_in, const un_infer *inf, double *flops,
                       double *bytes) {
    double c[4];
    un_status st = un_spec_cost_all(ctx, spec, op, params, in, n_in, inf, c);
    *flops = st == UN_OK && c[0] > 0 ? c[0] : 0;
    *bytes = st == UN_OK && c[1] > 0 ? c[1] : 0;
    return st;
}

un_status un_spec_cost_all(un_ctx *ctx, const un_spec *spec, un_op op, const un_param *params,
                           const un_shape *in, int n_in, const un_infer *inf, double *cost) {
    const un_op_spec *os = un_spec_op(spec, op);
    for (int i = 0; i < 4; i++)
        cost[i] = -1;
    const un_shape *inp[UN_MAX_INPUTS], *outp[UN_MAX_OUTPUTS];
    un_shape lin[UN_MAX_INPUTS], lout[UN_MAX_OUTPUTS];
    for (int t = 0; t < n_in; t++) {
        lin[t] = un_shape_logical(&in[t]);
        inp[t] = &lin[t];
    }
    for (int o = 0; o < inf->n_out; o++) {
        lout[o] = un_shape_logical(&inf->out[o]);
        outp[o] = &lout[o];
    }
    int64_t vars[UN_VAR_COUNT] = {1, 0, 0};
    un_expr_env env = {.params = params,
                       .n_params = os->n_params,
                       .vars = vars,
                       .n_vars = UN_VAR_COUNT,
                       .in = inp,
                       .n_in = n_in,
                       .out = outp,
                       .n_out = inf->n_out};
    const un_expr *e[4] = {os->flops, os->bytes, os->bwd_flops, os->bwd_bytes};
    for (int i = 0; i < 4; i++) {
        int64_t v;
        un_status st;
        if (!e[i])
            continue;
        if ((st = un_expr_eval(ctx, e[i], &env, &v)) != UN_OK)
            return st;
        cost[i] = (double)v;
    }
    return UN_OK;
}

un_status un_spec_rule_apply(un_ctx *ctx, const un_spec *spec, un_op op, const un_param *params,
                             int rule, int fe, int32_t k, un_shape *in, int n_in) {
    const un_op_spec *os = un_spec_op(spec, op);
    UN_ASSERT(os->kind == UN_OPK_REGULAR && rule >= -1 && rule < os->n_rules);
    const un_shard_rule *r = rule >= 0 ? &os->rules[rule] : NULL;
    if (r && !un_when_holds(&r->when, params))
        return un_ctx_error(ctx, UN_ERR_SHAPE,
                            "%s: rule '%s' does not apply under these parameters", os->name,
                            r->name);
    solver *s = un_xcalloc(1, sizeof *s);
    const un_shape *inp[UN_MAX_INPUTS];
    un_shape lin[UN_MAX_INPUTS];
    for (int t = 0; t < n_in; t++) {
        lin[t] = un_shape_logical(&in[t]);
        inp[t] = &lin[t];
    }
    s->ctx = ctx;
    s->os = os;
    s->params = params;
    s->in = in;
    s->n_in = n_in;
    s->env = (un_expr_env){.params = params, .n_params = os->n_params, .in = inp, .n_in = n_in};
    un_status st = UN_OK;
    inst it = {.rule = rule, .fe = fe};
    if (r && !rule_require_ok(s, &it, k)) {
        st = un_ctx_error(ctx, UN_ERR_SHAPE, "%s: rule '%s' requirement fails for degree %d",
                          os->name, r->name, k);
        goto done;
    }
    un_shape tmp[UN_MAX_INPUTS];
    char why[128];
    for (int t = 0; t < n_in; t++) {
        int c = r ? resolve_comp(s, &r->in[t], in[t].rank, fe) : UN_COMP_COPY_AT;
        if (c < 0) {
            st = un_ctx_error(ctx, UN_ERR_SHAPE, "%s: rule '%s' names a dim input %d does not have",
                              os->name, r->name, t);
            goto done;
        }
        tmp[t] = in[t];
        comp_mul(&tmp[t], c, k);
        if (!un_shape_valid(&tmp[t], why, sizeof why)) {
            st = un_ctx_error(ctx, UN_ERR_SHAPE, "%s: rule %s on input %d: %s", os->name,
                              r ? r->name : "copy", t, why);
            goto done;
        }
    }
    memcpy(in, tmp, sizeof(un_shape) * (size_t)n_in);
done:
    free(s);
    return st;
}
