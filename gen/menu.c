/* menu.c - reading the generator's menu file (menu.h): input tensors with shapes and layouts,
 * operator entries expanded into instances (the cartesian product of their parameter values).
 * Every value is checked against the op spec here, so the enumerator never sees a bad one. */
#include "gen/menu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void un_gen_menu_free(un_gen_menu *m) {
    if (!m)
        return;
    free(m->insts);
    free(m);
}

int un_gen_menu_input_group(const un_gen_menu *m, int i) {
    for (int j = 0; j < i; j++)
        if (m->inputs[j].op == m->inputs[i].op &&
            un_shape_eq(&m->inputs[j].shape, &m->inputs[i].shape))
            return j;
    return i;
}

bool un_gen_menu_prefix_ok(const un_gen_menu *m, uint32_t mask) {
    for (int i = 0; i < m->n_inputs; i++) {
        if (!(mask & (1u << i)))
            continue;
        int grp = un_gen_menu_input_group(m, i);
        for (int j = grp; j < i; j++)
            if (un_gen_menu_input_group(m, j) == grp && !(mask & (1u << j)))
                return false;
    }
    return true;
}

/* An integer list member (e.g. "shape": [2, 4]) of at most UN_MAX_DIMS items in [lo, hi]. */
static un_status get_list(un_ctx *ctx, const un_jcur *obj, const char *key, int64_t lo, int64_t hi,
                          int64_t *v, int *n) {
    un_jcur c = un_jcur_member(obj, key);
    un_status st = un_jcur_need_type(ctx, &c, UN_JSON_ARRAY);
    if (st != UN_OK)
        return st;
    *n = un_jcur_len(&c);
    if (*n < 1 || *n > UN_MAX_DIMS)
        return un_jcur_error(ctx, UN_ERR_SPEC, &c, "expected 1 to %d integers", UN_MAX_DIMS);
    for (int i = 0; i < *n; i++) {
        un_jcur it = un_jcur_item(&c, i);
        if (!un_jcur_is_int(&it, &v[i]) || v[i] < lo || v[i] > hi)
            return un_jcur_error(ctx, UN_ERR_SPEC, &it, "expected an integer in [%lld, %lld]",
                                 (long long)lo, (long long)hi);
    }
    return UN_OK;
}

static un_status load_input(un_ctx *ctx, un_gen_menu *m, const un_jcur *c) {
    static const char *const keys[] = {"name", "op", "shape", "shard", "sum", "copy", NULL};
    un_status st;
    if ((st = un_jcur_need_type(ctx, c, UN_JSON_OBJECT)) != UN_OK ||
        (st = un_jcur_check_keys(ctx, c, keys)) != UN_OK)
        return st;
    if (m->n_inputs == UN_GEN_MAX_INPUTS)
        return un_jcur_error(ctx, UN_ERR_SPEC, c, "at most %d inputs", UN_GEN_MAX_INPUTS);
    un_gen_input *in = &m->inputs[m->n_inputs];
    const char *name = NULL, *op = "input";
    if ((st = un_jcur_get_str(ctx, c, "name", true, &name)) != UN_OK ||
        (st = un_jcur_get_str(ctx, c, "op", false, &op)) != UN_OK)
        return st;
    un_jcur nc = un_jcur_member(c, "name");
    if (!*name || strlen(name) >= sizeof in->name || strchr(name, ':'))
        return un_jcur_error(ctx, UN_ERR_SPEC, &nc,
                             "an input name is 1 to %zu characters without ':'",
                             sizeof in->name - 1);
    for (int j = 0; j < m->n_inputs; j++)
        if (strcmp(m->inputs[j].name, name) == 0)
            return un_jcur_error(ctx, UN_ERR_SPEC, &nc, "duplicate input name '%s'", name);
    snprintf(in->name, sizeof in->name, "%s", name);
    if (strcmp(op, "input") == 0)
        in->op = UN_OP_INPUT;
    else if (strcmp(op, "weight") == 0)
        in->op = UN_OP_WEIGHT;
    else {
        un_jcur oc = un_jcur_member(c, "op");
        return un_jcur_error(ctx, UN_ERR_SPEC, &oc, "expected \"input\" or \"weight\", not '%s'",
                             op);
    }
    int64_t dims[UN_MAX_DIMS];
    int rank;
    if ((st = get_list(ctx, c, "shape", 1, 1 << 16, dims, &rank)) != UN_OK)
        return st;
    in->shape = un_shape_make(rank, dims, UN_DT_FLOAT);
    un_jcur sc = un_jcur_member(c, "shard");
    if (un_jcur_present(&sc)) {
        int64_t sh[UN_MAX_DIMS];
        int n;
        if ((st = get_list(ctx, c, "shard", 1, UN_MAX_DEGREE, sh, &n)) != UN_OK)
            return st;
        if (n != rank)
            return un_jcur_error(ctx, UN_ERR_SPEC, &sc, "needs one degree per dim (%d)", rank);
        for (int i = 0; i < n; i++)
            in->shape.shard[i] = (int32_t)sh[i];
    }
    int64_t sum = 1, copy = 1;
    if ((st = un_jcur_get_int(ctx, c, "sum", false, &sum)) != UN_OK ||
        (st = un_jcur_get_int(ctx, c, "copy", false, &copy)) != UN_OK)
        return st;
    if (sum < 1 || sum > UN_MAX_DEGREE || copy < 1 || copy > UN_MAX_DEGREE) {
        un_jcur bc = un_jcur_member(c, sum < 1 || sum > UN_MAX_DEGREE ? "sum" : "copy");
        return un_jcur_error(ctx, UN_ERR_SPEC, &bc, "a degree lies in [1, %d]", UN_MAX_DEGREE);
    }
    in->shape.sum = (int32_t)sum;
    in->shape.copy = (int32_t)copy;
    char why[160];
    if (!un_shape_valid(&in->shape, why, sizeof why))
        return un_jcur_error(ctx, UN_ERR_SPEC, c, "input '%s': %s", name, why);
    if (un_shape_piece_numel(&in->shape) * un_shape_npieces(&in->shape) > 4096)
        return un_jcur_error(ctx, UN_ERR_SPEC, c,
                             "input '%s' is too big for generation (at most 4096 values)", name);
    m->n_inputs++;
    return UN_OK;
}

/* The values one parameter takes: the menu's list (or single value), else the spec's try values. */
static un_status param_values(un_ctx *ctx, const un_op_spec *os, int p, const un_jcur *params,
                              un_param *vals, int *n) {
    const un_param_spec *ps = &os->params[p];
    un_jcur c = un_jcur_member(params, ps->name);
    *n = 0;
    if (!un_jcur_present(&c)) {
        if (ps->n_try == 0)
            return un_jcur_error(ctx, UN_ERR_SPEC, params,
                                 "parameter '%s' of %s has no values to try in the spec; list them "
                                 "here",
                                 ps->name, os->name);
        if (ps->n_try > 64)
            return un_jcur_error(ctx, UN_ERR_SPEC, params, "too many values for '%s'", ps->name);
        memcpy(vals, ps->try_vals, sizeof(un_param) * (size_t)ps->n_try);
        *n = ps->n_try;
        return UN_OK;
    }
    /* A list parameter's values are a list of lists; any other a list of scalars (or a scalar). */
    un_jcur first = un_jcur_item(&c, 0);
    bool many = un_jcur_type(&c) == UN_JSON_ARRAY &&
                (ps->type != UN_PT_LIST || un_jcur_type(&first) == UN_JSON_ARRAY);
    int cnt = many ? un_jcur_len(&c) : 1;
    if (cnt < 1 || cnt > 64)
        return un_jcur_error(ctx, UN_ERR_SPEC, &c, "give 1 to 64 values");
    for (int i = 0; i < cnt; i++) {
        un_jcur it = many ? un_jcur_item(&c, i) : c;
        un_status st = un_spec_param_parse(ctx, ps, &it, &vals[i]);
        if (st != UN_OK)
            return st;
        for (int j = 0; j < i; j++)
            if (un_param_eq(&vals[j], &vals[i]))
                return un_jcur_error(ctx, UN_ERR_SPEC, &it, "duplicate value");
    }
    *n = cnt;
    return UN_OK;
}

static un_status load_op(un_ctx *ctx, un_gen_menu *m, const un_jcur *c) {
    static const char *const keys[] = {"op", "params", "min_rank", NULL};
    un_status st;
    if ((st = un_jcur_need_type(ctx, c, UN_JSON_OBJECT)) != UN_OK ||
        (st = un_jcur_check_keys(ctx, c, keys)) != UN_OK)
        return st;
    int64_t min_rank = 0;
    if ((st = un_jcur_get_int(ctx, c, "min_rank", false, &min_rank)) != UN_OK)
        return st;
    if (min_rank < 0 || min_rank > UN_MAX_DIMS) {
        un_jcur rc = un_jcur_member(c, "min_rank");
        return un_jcur_error(ctx, UN_ERR_SPEC, &rc, "min_rank %lld is not in 0..%d",
                             (long long)min_rank, UN_MAX_DIMS);
    }
    const char *name;
    if ((st = un_jcur_get_str(ctx, c, "op", true, &name)) != UN_OK)
        return st;
    un_jcur oc = un_jcur_member(c, "op");
    un_op op;
    if (!un_op_from_name(name, &op))
        return un_jcur_error(ctx, UN_ERR_SPEC, &oc, "unknown operator '%s'", name);
    if (un_op_kind_of(op) == UN_OPK_SOURCE)
        return un_jcur_error(ctx, UN_ERR_SPEC, &oc,
                             "'%s' is a source; list graph inputs under \"inputs\"", name);
    const un_op_spec *os = un_spec_op(m->spec, op);
    un_jcur pc = un_jcur_member(c, "params");
    if (un_jcur_present(&pc)) {
        if ((st = un_jcur_need_type(ctx, &pc, UN_JSON_OBJECT)) != UN_OK)
            return st;
        for (int i = 0; i < un_jcur_len(&pc); i++) {
            un_jcur it = un_jcur_item(&pc, i);
            if (un_spec_param_index(os, it.key) < 0)
                return un_jcur_error(ctx, UN_ERR_SPEC, &it, "%s has no parameter '%s'", name,
                                     it.key);
        }
    }
    un_param(*vals)[64] = un_xcalloc(UN_MAX_PARAMS, sizeof *vals);
    int nv[UN_MAX_PARAMS];
    int64_t total = 1;
    for (int p = 0; p < os->n_params; p++) {
        if ((st = param_values(ctx, os, p, &pc, vals[p], &nv[p])) != UN_OK)
            goto done;
        total *= nv[p];
    }
    if (m->n_insts + total > UN_GEN_MAX_INSTS) {
        st = un_jcur_error(ctx, UN_ERR_SPEC, c, "more than %d operator instances in the menu",
                           UN_GEN_MAX_INSTS);
        goto done;
    }
    int idx[UN_MAX_PARAMS] = {0};
    for (int64_t t = 0; t < total; t++) {
        un_gen_inst *in = &m->insts[m->n_insts];
        memset(in, 0, sizeof *in);
        in->op = op;
        in->min_rank = (int)min_rank;
        un_buf lb = {0};
        un_buf_printf(&lb, "%s", name);
        for (int p = 0; p < os->n_params; p++) {
            in->params[p] = vals[p][idx[p]];
            if (os->n_params) {
                un_buf_printf(&lb, "%s%s=", p ? "," : "[", os->params[p].name);
                un_spec_param_str(&os->params[p], &in->params[p], &lb);
            }
        }
        if (os->n_params)
            un_buf_printf(&lb, "]");
        snprintf(in->label, sizeof in->label, "%s", lb.data);
        un_buf_deinit(&lb);
        in->n_in = un_spec_n_present_inputs(os, in->params);
        for (int j = 0; j < m->n_insts; j++)
            if (m->insts[j].op == op &&
                memcmp(m->insts[j].params, in->params, sizeof in->params) == 0) {
                st = un_jcur_error(ctx, UN_ERR_SPEC, c, "%s is listed twice", in->label);
                goto done;
            }
        m->n_insts++;
        for (int p = os->n_params - 1; p >= 0; p--) {
            if (++idx[p] < nv[p])
                break;
            idx[p] = 0;
        }
    }
done:
    free(vals);
    return st;
}

un_status un_gen_menu_parse(un_ctx *ctx, const un_spec *spec, const char *name, const char *text,
                            size_t len, un_gen_menu **out) {
    *out = NULL;
    un_jdoc *doc = NULL;
    un_gen_menu *m = NULL;
    un_status st = un_jdoc_parse(ctx, name, text, len, &doc);
    if (st != UN_OK)
        return st;
    m = un_xcalloc(1, sizeof *m);
    m->spec = spec;
    snprintf(m->path, sizeof m->path, "%s", name);
    m->insts = un_xcalloc(UN_GEN_MAX_INSTS, sizeof *m->insts);
    m->hash = un_hash_bytes(text, len, 0x6e6d);
    un_jcur root = un_jdoc_root(doc);
    static const char *const keys[] = {"version", "max_ops", "inputs", "ops", "doc", NULL};
    if ((st = un_jcur_need_type(ctx, &root, UN_JSON_OBJECT)) != UN_OK ||
        (st = un_jcur_check_keys(ctx, &root, keys)) != UN_OK)
        goto done;
    int64_t version = 0, max_ops = 3;
    if ((st = un_jcur_get_int(ctx, &root, "version", true, &version)) != UN_OK)
        goto done;
    if (version != 1) {
        un_jcur vc = un_jcur_member(&root, "version");
        st = un_jcur_error(ctx, UN_ERR_SPEC, &vc, "unsupported menu version %lld (this is 1)",
                           (long long)version);
        goto done;
    }
    if ((st = un_jcur_get_int(ctx, &root, "max_ops", false, &max_ops)) != UN_OK)
        goto done;
    if (max_ops < 1 || max_ops > 5) {
        un_jcur mc = un_jcur_member(&root, "max_ops");
        st = un_jcur_error(ctx, UN_ERR_SPEC, &mc, "max_ops lies in [1, 5]");
        goto done;
    }
    m->max_ops = (int)max_ops;
    un_jcur ins = un_jcur_member(&root, "inputs");
    if ((st = un_jcur_need_type(ctx, &ins, UN_JSON_ARRAY)) != UN_OK)
        goto done;
    if (un_jcur_len(&ins) == 0) {
        st = un_jcur_error(ctx, UN_ERR_SPEC, &ins, "the menu needs at least one input");
        goto done;
    }
    for (int i = 0; i < un_jcur_len(&ins); i++) {
        un_jcur c = un_jcur_item(&ins, i);
        if ((st = load_input(ctx, m, &c)) != UN_OK)
            goto done;
    }
    un_jcur ops = un_jcur_member(&root, "ops");
    if ((st = un_jcur_need_type(ctx, &ops, UN_JSON_ARRAY)) != UN_OK)
        goto done;
    if (un_jcur_len(&ops) == 0) {
        st = un_jcur_error(ctx, UN_ERR_SPEC, &ops, "the menu needs at least one operator");
        goto done;
    }
    for (int i = 0; i < un_jcur_len(&ops); i++) {
        un_jcur c = un_jcur_item(&ops, i);
        if ((st = load_op(ctx, m, &c)) != UN_OK)
            goto done;
    }
done:
    un_jdoc_free(doc);
    if (st != UN_OK) {
        un_gen_menu_free(m);
        return st;
    }
    *out = m;
    return UN_OK;
}

un_status un_gen_menu_load(un_ctx *ctx, const un_spec *spec, const char *path, un_gen_menu **out) {
    *out = NULL;
    char *text;
    size_t len;
    un_status st = un_read_file(ctx, path, &text, &len);
    if (st != UN_OK)
        return st;
    st = un_gen_menu_parse(ctx, spec, path, text, len, out);
    free(text);
    return st;
}
