/* infer.c - layout inference: applying an operator's output-shape rule and explaining its input
 * layouts by its sharding rules; piece placement and cost evaluation. */
#include "pcg/infer.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A shape as text in buf (96 bytes), for messages: called only on the error path; empty when
 * ctx is NULL, since no message is built then (the generator asks millions of times). */
static const char *shape_s(const un_ctx *ctx, const un_shape *sh, char *buf) {
    buf[0] = '\0';
    if (ctx)
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
    un_buf_deinit(&b);
    return st;
}

/* Evaluates a dim index of output o's rank-`rank` shape (negative: from the end) into *at; `verb`
 * says what the output does with the dim, for the message. */
static un_status output_dim(solver *s, const un_expr_env *env, const un_expr *e, int rank, int o,
                            const char *verb, const char *label, int64_t *at) {
    un_status st = un_expr_eval(s->ctx, e, env, at);
    if (st != UN_OK)
        return st;
    if (*at < 0)
        *at += rank;
    if (*at < 0 || *at >= rank)
        return un_ctx_error(s->ctx, UN_ERR_SHAPE,
                            "%s (%s): output %d %s dim %lld of a rank-%d tensor", label,
                            s->os->name, o, verb, (long long)*at, rank);
    return UN_OK;
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
            if ((st = output_dim(s, &env, spec->set_at[j], rank, o, "sets", label, &at)) != UN_OK)
                return st;
            if ((st = un_expr_eval(ctx, spec->set_val[j], &env, &v)) != UN_OK)
                return st;
            dims[at] = v;
        }
        if (spec->drop && un_when_holds(&spec->drop_when, s->params)) {
            int64_t at;
            if ((st = output_dim(s, &env, spec->drop, rank, o, "drops", label, &at)) != UN_OK)
                return st;
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
                            os->name, shape_s(ctx, in, sb), (long long)d);
    switch (os->op) {
    case UN_OP_PARTITION:
        if ((int64_t)in->shard[d] * k > UN_MAX_DEGREE)
            return un_ctx_error(ctx, UN_ERR_SHAPE,
                                "%s (partition): input 0 %s: more than %d blocks", label,
                                shape_s(ctx, in, sb), UN_MAX_DEGREE);
        if (in->dim[d] % ((int64_t)in->shard[d] * k) != 0)
            return un_ctx_error(ctx, UN_ERR_SHAPE,
                                "%s (partition): input 0 %s: dim %lld of size %lld is not "
                                "divisible into %lld blocks",
                                label, shape_s(ctx, in, sb), (long long)d, (long long)in->dim[d],
                                (long long)(in->shard[d] * k));
        s.shard[d] *= (int32_t)k;
        break;
    case UN_OP_COMBINE:
        if (in->shard[d] % k != 0)
            return un_ctx_error(
                ctx, UN_ERR_SHAPE,
                "%s (combine): input 0 %s: dim %lld has shard degree %d, not a multiple of %lld",
                label, shape_s(ctx, in, sb), (long long)d, in->shard[d], (long long)k);
        s.shard[d] /= (int32_t)k;
        break;
    case UN_OP_REPLICATE:
        if ((int64_t)in->copy * k > UN_MAX_DEGREE)
            return un_ctx_error(ctx, UN_ERR_SHAPE,
                                "%s (replicate): input 0 %s: more than %d copies", label,
                                shape_s(ctx, in, sb), UN_MAX_DEGREE);
        s.copy *= (int32_t)k;
        break;
    case UN_OP_REDUCE:
        if (in->sum % k != 0)
            return un_ctx_error(ctx, UN_ERR_SHAPE,
                                "%s (reduce): input 0 %s has sum degree %d, not a multiple of %lld",
                                label, shape_s(ctx, in, sb), in->sum, (long long)k);
        s.sum /= (int32_t)k;
        break;
    default:
        UN_ASSERT(0);
    }
    out->n_out = 1;
    char why[128];
    if (!un_shape_valid(&s, why, sizeof why))
        return un_ctx_error(ctx, UN_ERR_SHAPE, "%s (%s): output of input 0 %s: %s", label, os->name,
                            shape_s(ctx, in, sb), why);
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

/* A source op's output: its dims (and dtype) from its parameters, then its optional layout. */
static un_status infer_source(un_ctx *ctx, const un_op_spec *os, const un_param *params, int n_in,
                              const char *label, un_infer *out) {
    char why[256];
    if (n_in != 0)
        return un_ctx_error(ctx, UN_ERR_SHAPE, "%s (%s): takes no inputs, got %d", label, os->name,
                            n_in);
    const un_output_spec *o = &os->outputs[0];
    const un_param *p = &params[o->dims_param];
    if (p->len < 0 || p->len > UN_MAX_DIMS)
        return un_ctx_error(ctx, UN_ERR_SHAPE, "%s (%s): parameter '%s' must list the dims", label,
                            os->name, os->params[o->dims_param].name);
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

/* Checks the inputs against the op's input specs: count, validity, rank and dtype. */
static un_status check_inputs(un_ctx *ctx, const un_op_spec *os, const un_param *params,
                              const un_shape *in, int n_in, const char *label) {
    char why[256];
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
                                t, is->name, shape_s(ctx, &in[t], sb), why);
        if (is->rank >= 0 ? in[t].rank != is->rank : in[t].rank < is->min_rank)
            return un_ctx_error(
                ctx, UN_ERR_SHAPE, "%s (%s): input %d (%s) %s has rank %d, expected %s%d", label,
                os->name, t, is->name, shape_s(ctx, &in[t], sb), in[t].rank,
                is->rank >= 0 ? "" : "at least ", is->rank >= 0 ? is->rank : is->min_rank);
        if (is->dtype != UN_DT_COUNT && in[t].dtype != is->dtype)
            return un_ctx_error(ctx, UN_ERR_SHAPE,
                                "%s (%s): input %d (%s) %s has dtype %s, expected %s", label,
                                os->name, t, is->name, shape_s(ctx, &in[t], sb),
                                un_dtype_name(in[t].dtype), un_dtype_name(is->dtype));
    }
    return UN_OK;
}

/* Checks the op's requirements on the logical inputs lin; a failing one is reported with its
 * text and the input shapes. */
static un_status check_requirements(solver *s, const un_shape *lin, const char *label) {
    un_ctx *ctx = s->ctx;
    const un_op_spec *os = s->os;
    for (int r = 0; r < os->n_require; r++) {
        int64_t v = 0;
        if (un_expr_eval(NULL, os->require[r], &s->env, &v) == UN_OK && v)
            continue;
        if (!ctx)
            return UN_ERR_SHAPE;
        /* evaluate again to capture the reason */
        un_ctx *tmp = un_ctx_new(NULL);
        un_status est = un_expr_eval(tmp, os->require[r], &s->env, &v);
        un_buf b = {0};
        for (int t = 0; t < s->n_in; t++) {
            char sb[96];
            un_shape_str(&lin[t], sb, sizeof sb);
            un_buf_printf(&b, " %s", sb);
        }
        un_status st = un_ctx_error(
            ctx, UN_ERR_SHAPE, "%s (%s): requirement \"%s\" %s [inputs:%s]", label, os->name,
            os->require_text[r], est != UN_OK ? un_ctx_errmsg(tmp) : "fails", b.data ? b.data : "");
        un_buf_deinit(&b);
        un_ctx_free(tmp);
        return st;
    }
    return UN_OK;
}

/* Counts the outputs and infers their logical shapes into s->lout; exposes them to expressions. */
static un_status logical_outputs(solver *s, const char *label, const un_shape **outp) {
    const un_op_spec *os = s->os;
    un_status st;
    int n_out = os->n_outputs;
    if (os->outputs_count) {
        int64_t v = 0;
        if ((st = un_expr_eval(s->ctx, os->outputs_count, &s->env, &v)) != UN_OK)
            return st;
        if (v < 1 || v > UN_MAX_OUTPUTS)
            return un_ctx_error(s->ctx, UN_ERR_SHAPE, "%s (%s): %lld outputs (1 to %d allowed)",
                                label, os->name, (long long)v, UN_MAX_OUTPUTS);
        n_out = (int)v;
    }
    s->n_out = n_out;
    for (int o = 0; o < n_out; o++) {
        const un_output_spec *ospec = &os->outputs[os->outputs_count ? 0 : o];
        if ((st = logical_output(s, o, ospec, label, &s->lout[o])) != UN_OK)
            return st;
        outp[o] = &s->lout[o];
    }
    s->env.out = outp;
    s->env.n_out = n_out;
    return UN_OK;
}

/* Lists the rule instances that apply under the parameters (a foreach rule once per dim of input
 * 0; the implicit copy rule last), with the layout component each touches per tensor. */
static void rule_instances(solver *s) {
    const un_op_spec *os = s->os;
    const un_shape *in = s->in;
    for (int r = 0; r <= os->n_rules; r++) {
        bool copy = r == os->n_rules;
        const un_shard_rule *rule = copy ? NULL : &os->rules[r];
        if (rule && !un_when_holds(&rule->when, s->params))
            continue;
        int nfe = rule && rule->foreach >= 0 ? in[0].rank : 1;
        for (int fe = 0; fe < nfe; fe++) {
            inst *it = &s->insts[s->n_inst];
            memset(it, 0, sizeof *it);
            it->rule = copy ? -1 : r;
            it->fe = rule && rule->foreach >= 0 ? fe : -1;
            bool ok = true;
            for (int t = 0; t < s->n_in && ok; t++) {
                int c = copy ? UN_COMP_COPY_AT : resolve_comp(s, &rule->in[t], in[t].rank, fe);
                ok = c >= 0;
                it->in_comp[t] = (int8_t)c;
            }
            for (int o = 0; o < s->n_out && ok; o++) {
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
}

/* Records the solved rule instances of degree > 1 as uses, and applies their parameter rewrites
 * to out->local. */
static un_status record_uses(solver *s, const char *label, un_infer *out) {
    un_ctx *ctx = s->ctx;
    const un_op_spec *os = s->os;
    un_status st;
    for (int i = 0; i < s->n_inst; i++) {
        if (s->deg[i] == 1)
            continue;
        if (out->n_uses == UN_MAX_USES)
            return un_ctx_error(ctx, UN_ERR_LIMIT, "%s (%s): more than %d sharding rules at once",
                                label, os->name, UN_MAX_USES);
        un_rule_use *u = &out->uses[out->n_uses++];
        u->rule = s->insts[i].rule;
        u->foreach = s->insts[i].fe;
        u->degree = s->deg[i];
        memcpy(u->in_comp, s->insts[i].in_comp, sizeof u->in_comp);
        memcpy(u->out_comp, s->insts[i].out_comp, sizeof u->out_comp);
        for (int t = s->n_in; t < UN_MAX_INPUTS; t++)
            u->in_comp[t] = -1;
        for (int o = s->n_out; o < UN_MAX_OUTPUTS; o++)
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
                return st;
            const un_rewrite *rw = &rule->rewrite[w];
            out->local[rw->param].v[rw->item < 0 ? 0 : rw->item] = v;
        }
    }
    return UN_OK;
}

/* A regular op: requirements, logical outputs, then the input layouts explained by a product of
 * rule instances (solve), whose degrees give the output layouts. */
static un_status infer_regular(un_ctx *ctx, const un_op_spec *os, const un_param *params,
                               const un_shape *in, int n_in, const char *label, un_infer *out) {
    /* On the stack, and only its head zeroed: most nodes (every input unsharded) take the
     * trivial path, which needs nothing from insts on (5.8 KB of the solver's 6). */
    solver sv;
    solver *s = &sv;
    memset(s, 0, offsetof(solver, insts));
    un_status st;
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
    if ((st = check_requirements(s, lin, label)) != UN_OK)
        goto done;
    if ((st = logical_outputs(s, label, outp)) != UN_OK)
        goto done;
    out->n_out = s->n_out;
    bool trivial = true;
    for (int t = 0; t < n_in; t++)
        trivial = trivial && un_shape_is_trivial(&in[t]);
    if (trivial) {
        for (int o = 0; o < s->n_out; o++)
            out->out[o] = s->lout[o];
        goto done;
    }
    memset(&s->insts, 0, sizeof *s - offsetof(solver, insts));
    rule_instances(s);
    for (int t = 0; t < n_in; t++)
        for (int c = 0; c < NCOMP; c++)
            s->rem[t][c] = c < in[t].rank || c >= UN_MAX_DIMS ? comp_of(&in[t], c) : 1;
    for (int i = 0; i < s->n_inst; i++)
        s->deg[i] = 1;
    if (!solve(s, 0)) {
        st = layout_error(s, label);
        goto done;
    }
    for (int o = 0; o < s->n_out; o++)
        out->out[o] = s->out[o];
    st = record_uses(s, label, out);
done:
    return st;
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
    if (os->kind == UN_OPK_SOURCE)
        return infer_source(ctx, os, params, n_in, label, out);
    un_status st = check_inputs(ctx, os, params, in, n_in, label);
    if (st != UN_OK)
        return st;
    if (os->kind == UN_OPK_PARALLEL)
        return infer_parallel(ctx, os, params, &in[0], label, out);
    return infer_regular(ctx, os, params, in, n_in, label, out);
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
