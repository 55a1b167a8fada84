/* spec.c - loading specs/ops.json into the operator specs: parameters, inputs, outputs, sharding
 * rules, costs, examples and axioms (their terms are parsed by pcg/term.c), and queries on them. */
#include "pcg/spec_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    un_ctx *tmp = un_ctx_new_child(ctx);
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
            un_buf_deinit(&b);
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
                un_ctx *tmp = un_ctx_new_child(ctx);
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
    un_ctx *tmp = un_ctx_new_child(ctx);
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

/* ---- axioms ---- */

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
        un_ctx *tmp = un_ctx_new_child(ctx);
        un_expr_scope scope = {.resolve = un__axiom_resolve, .user = ax};
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
    if ((st = un__term_parse(ctx, sp, &lhs, ax, &ax->lhs, &ax->lhs_text)) != UN_OK)
        return st;
    if ((st = un__term_parse(ctx, sp, &rhs, ax, &ax->rhs, &ax->rhs_text)) != UN_OK)
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
        os->name = un_op_name(op);
        os->kind = un_op_kind_of(op);
        if ((st = load_op(ctx, sp, &it, os)) != UN_OK)
            return st;
        sp->present[op] = true;
        index[op] = i;
    }
    for (int op = 0; op < UN_OP_COUNT; op++)
        if (!sp->present[op])
            return un_jcur_error(ctx, UN_ERR_SPEC, &ops,
                                 "no entry for operator '%s' (listed in pcg/ops.def)",
                                 un_op_name(op));
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
