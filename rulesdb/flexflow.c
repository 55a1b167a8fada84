/* flexflow.c - FlexFlow's JSON rule format (flexflow.h): parse a RuleCollection into an op list
 * per side, check it under our specs, choose input dims (a linear system over the input dims,
 * solved for small positive multiples) and input layouts (the least parallel assignment under
 * which both sides are well formed and the outputs agree), build the rule, and write rules back.
 */
#include "rulesdb/flexflow.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FF_MAX_OPS   16
#define FF_MAX_INS   8
#define FF_MAX_VARS  (FF_MAX_INS * UN_MAX_DIMS)
#define FF_MAX_ROWS  256
#define FF_MAX_TRIES 5000 /* layout assignments tried per rule */

static const char *const ff_reject_names[UN_FLEXFLOW_REJECT_COUNT] = {
#define X(n, s) s,
    UN_FLEXFLOW_REJECT_LIST(X)
#undef X
};

const char *un_flexflow_reject_name(un_flexflow_reject r) {
    return (unsigned)r < UN_FLEXFLOW_REJECT_COUNT ? ff_reject_names[r] : "?";
}

/* FlexFlow operator names we map (as FlexFlow's JSON spells them: its OP_REPARTITION is
 * "OP_PARTITION" and OP_REDUCTION "OP_REDUCE"), with their input counts. */
static const struct {
    const char *name;
    un_op op;
    int n_in;
} ff_ops[] = {
    {"OP_PARTITION", UN_OP_PARTITION, 1}, {"OP_COMBINE", UN_OP_COMBINE, 1},
    {"OP_REPLICATE", UN_OP_REPLICATE, 1}, {"OP_REDUCE", UN_OP_REDUCE, 1},
    {"OP_LINEAR", UN_OP_LINEAR, 2},       {"OP_RELU", UN_OP_RELU, 1},
    {"OP_SIGMOID", UN_OP_SIGMOID, 1},     {"OP_TANH", UN_OP_TANH, 1},
    {"OP_GELU", UN_OP_GELU, 1},           {"OP_EW_ADD", UN_OP_EW_ADD, 2},
    {"OP_EW_SUB", UN_OP_EW_SUB, 2},       {"OP_EW_MUL", UN_OP_EW_MUL, 2},
    {"OP_CONCAT", UN_OP_CONCAT, 2},       {"OP_SPLIT", UN_OP_SPLIT, 1},
};

/* TASO's activation codes (PM_ACTI) and our linear's activation enum names. */
static const char *const ff_acti[] = {"none", "sigmoid", "relu", "tanh"};

enum { PM_DIM, PM_DEGREE, PM_ACTI, PM_AXIS, PM_NUMDIM, PM_NUM_INPUTS, PM_NUM_OUTPUTS, PM_COUNT };
static const char *const pm_names[PM_COUNT] = {
    "PM_PARALLEL_DIM", "PM_PARALLEL_DEGREE", "PM_ACTI",        "PM_AXIS",
    "PM_NUMDIM",       "PM_NUM_INPUTS",      "PM_NUM_OUTPUTS",
};

typedef struct ff_ref {
    int op; /* >= 0: an op of the same side; < 0: rule input (FlexFlow's negative opId) */
    int ts;
} ff_ref;

typedef struct ff_op {
    const char *type;
    un_op op;
    int n_in, n_out;
    ff_ref in[4];
    bool has[PM_COUNT];
    int64_t pm[PM_COUNT];
} ff_op;

typedef struct ff_ir {
    int n_ops[2];
    ff_op ops[2][FF_MAX_OPS];
    int n_map;
    ff_ref map[UN_RULE_MAX_OUTS][2];
    int n_inputs;
    int input_id[FF_MAX_INS]; /* FlexFlow ids of the rule inputs, in order of first use */
    int rank;                 /* logical rank of every tensor */
    int degree;               /* the largest parallel degree (layout candidates use it) */
} ff_ir;

/* ---- rejection ---------------------------------------------------------------------------- */

__attribute__((format(printf, 3, 4))) static bool reject(un_flexflow_rule *fr, un_flexflow_reject k,
                                                         const char *fmt, ...) {
    fr->kind = k;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fr->reason, sizeof fr->reason, fmt, ap);
    va_end(ap);
    return false;
}

/* ---- parsing -------------------------------------------------------------------------------- */

static bool get_int(const un_jcur *obj, const char *key, int64_t *out) {
    un_jcur c = un_jcur_member(obj, key);
    return un_jcur_is_int(&c, out);
}

static int input_index(const ff_ir *ir, int id) {
    for (int i = 0; i < ir->n_inputs; i++)
        if (ir->input_id[i] == id)
            return i;
    return -1;
}

static bool parse_op(un_flexflow_rule *fr, ff_ir *ir, int side, int idx, const un_jcur *o,
                     bool *seen_in) {
    const char *sname = side ? "dstOp" : "srcOp";
    ff_op *op = &ir->ops[side][idx];
    memset(op, 0, sizeof *op);
    un_jcur t = un_jcur_member(o, "type");
    if (un_jcur_type(&t) != UN_JSON_STRING)
        return reject(fr, UN_FLEXFLOW_REJECT_MALFORMED, "%s[%d]: no \"type\" string", sname, idx);
    op->type = un_jcur_str(&t);
    int k = -1;
    for (int i = 0; i < (int)(sizeof ff_ops / sizeof ff_ops[0]); i++)
        if (strcmp(ff_ops[i].name, op->type) == 0)
            k = i;
    if (k < 0)
        return reject(fr, UN_FLEXFLOW_REJECT_UNKNOWN_OP, "%s[%d]: unknown operator %s", sname, idx,
                      op->type);
    op->op = ff_ops[k].op;
    op->n_out = 1;
    un_jcur para = un_jcur_member(o, "para");
    if (un_jcur_present(&para) && un_jcur_type(&para) != UN_JSON_ARRAY)
        return reject(fr, UN_FLEXFLOW_REJECT_MALFORMED, "%s[%d]: \"para\" is not an array", sname,
                      idx);
    for (int i = 0; i < un_jcur_len(&para); i++) {
        un_jcur p = un_jcur_item(&para, i), key = un_jcur_member(&p, "key");
        int64_t v;
        if (un_jcur_type(&key) != UN_JSON_STRING || !get_int(&p, "value", &v))
            return reject(fr, UN_FLEXFLOW_REJECT_MALFORMED,
                          "%s[%d] (%s): parameter %d needs a \"key\" and an integer \"value\"",
                          sname, idx, op->type, i);
        int pm = -1;
        for (int j = 0; j < PM_COUNT; j++)
            if (strcmp(pm_names[j], un_jcur_str(&key)) == 0)
                pm = j;
        bool ok = pm >= 0;
        switch (op->op) {
        case UN_OP_PARTITION:
        case UN_OP_COMBINE:
        case UN_OP_REPLICATE:
        case UN_OP_REDUCE:
            ok = ok && (pm == PM_DIM || pm == PM_DEGREE);
            break;
        case UN_OP_LINEAR:
            ok = ok && pm == PM_ACTI;
            break;
        case UN_OP_CONCAT:
            ok = ok && (pm == PM_AXIS || pm == PM_NUMDIM || pm == PM_NUM_INPUTS);
            break;
        case UN_OP_SPLIT:
            ok = ok && (pm == PM_AXIS || pm == PM_NUM_OUTPUTS);
            break;
        default:
            ok = false;
        }
        if (!ok)
            return reject(fr, UN_FLEXFLOW_REJECT_UNKNOWN_PARAM, "%s[%d]: %s takes no parameter %s",
                          sname, idx, op->type, un_jcur_str(&key));
        if (op->has[pm])
            return reject(fr, UN_FLEXFLOW_REJECT_MALFORMED, "%s[%d] (%s): %s given twice", sname,
                          idx, op->type, pm_names[pm]);
        op->has[pm] = true;
        op->pm[pm] = v;
    }
    /* Required parameters and their values. */
    int need[2] = {-1, -1};
    if (op->op == UN_OP_PARTITION || op->op == UN_OP_COMBINE || op->op == UN_OP_REPLICATE ||
        op->op == UN_OP_REDUCE) {
        need[0] = PM_DIM;
        need[1] = PM_DEGREE;
    } else if (op->op == UN_OP_CONCAT) {
        need[0] = PM_AXIS;
    } else if (op->op == UN_OP_SPLIT) {
        need[0] = PM_AXIS;
        need[1] = PM_NUM_OUTPUTS;
    }
    for (int j = 0; j < 2; j++)
        if (need[j] >= 0 && !op->has[need[j]])
            return reject(fr, UN_FLEXFLOW_REJECT_UNKNOWN_PARAM, "%s[%d]: %s needs %s", sname, idx,
                          op->type, pm_names[need[j]]);
    if (op->has[PM_DEGREE] && (op->pm[PM_DEGREE] < 1 || op->pm[PM_DEGREE] > UN_MAX_DEGREE))
        return reject(fr, UN_FLEXFLOW_REJECT_UNKNOWN_PARAM, "%s[%d]: %s: degree %lld out of range",
                      sname, idx, op->type, (long long)op->pm[PM_DEGREE]);
    if (op->has[PM_ACTI] && (op->pm[PM_ACTI] < 0 || op->pm[PM_ACTI] > 3))
        return reject(fr, UN_FLEXFLOW_REJECT_UNKNOWN_PARAM,
                      "%s[%d]: %s: PM_ACTI %lld is not none (0), sigmoid (1), relu (2) or tanh "
                      "(3)",
                      sname, idx, op->type, (long long)op->pm[PM_ACTI]);
    if (op->op == UN_OP_SPLIT) {
        if (op->pm[PM_NUM_OUTPUTS] != 2)
            return reject(fr, UN_FLEXFLOW_REJECT_ARITY,
                          "%s[%d]: OP_SPLIT with %lld outputs (only 2, equal halves)", sname, idx,
                          (long long)op->pm[PM_NUM_OUTPUTS]);
        op->n_out = 2;
    }
    /* Inputs. */
    un_jcur in = un_jcur_member(o, "input");
    if (un_jcur_type(&in) != UN_JSON_ARRAY)
        return reject(fr, UN_FLEXFLOW_REJECT_MALFORMED, "%s[%d]: no \"input\" array", sname, idx);
    op->n_in = un_jcur_len(&in);
    int want = ff_ops[k].n_in;
    if (op->op == UN_OP_CONCAT && op->has[PM_NUM_INPUTS] && op->pm[PM_NUM_INPUTS] != op->n_in)
        return reject(fr, UN_FLEXFLOW_REJECT_ARITY,
                      "%s[%d]: OP_CONCAT has PM_NUM_INPUTS %lld but %d "
                      "inputs",
                      sname, idx, (long long)op->pm[PM_NUM_INPUTS], op->n_in);
    if (op->n_in != want)
        return reject(fr, UN_FLEXFLOW_REJECT_ARITY, "%s[%d]: %s takes %d input%s, not %d", sname,
                      idx, op->type, want, want == 1 ? "" : "s", op->n_in);
    for (int i = 0; i < op->n_in; i++) {
        un_jcur tc = un_jcur_item(&in, i);
        int64_t oid, ts;
        if (!get_int(&tc, "opId", &oid) || !get_int(&tc, "tsId", &ts))
            return reject(fr, UN_FLEXFLOW_REJECT_MALFORMED,
                          "%s[%d]: input %d needs integer \"opId\" and \"tsId\"", sname, idx, i);
        if (oid < 0) {
            if (ts != 0 || oid < -1000)
                return reject(fr, UN_FLEXFLOW_REJECT_BAD_REF,
                              "%s[%d]: input %d: rule input %lld:%lld", sname, idx, i,
                              (long long)oid, (long long)ts);
            int ii = input_index(ir, (int)oid);
            if (ii < 0) {
                if (ir->n_inputs == FF_MAX_INS)
                    return reject(fr, UN_FLEXFLOW_REJECT_MALFORMED, "more than %d rule inputs",
                                  FF_MAX_INS);
                ii = ir->n_inputs++;
                ir->input_id[ii] = (int)oid;
            }
            seen_in[side * FF_MAX_INS + ii] = true;
        } else if (oid >= idx || ts < 0 || ts >= ir->ops[side][oid].n_out) {
            return reject(fr, UN_FLEXFLOW_REJECT_BAD_REF,
                          "%s[%d]: input %d refers to op %lld output %lld, which %s", sname, idx, i,
                          (long long)oid, (long long)ts,
                          oid >= idx ? "does not come earlier" : "does not exist");
        }
        op->in[i] = (ff_ref){(int)oid, (int)ts};
    }
    return true;
}

static bool parse_rule(un_flexflow_rule *fr, ff_ir *ir, const un_jcur *rc) {
    memset(ir, 0, sizeof *ir);
    if (un_jcur_type(rc) != UN_JSON_OBJECT)
        return reject(fr, UN_FLEXFLOW_REJECT_MALFORMED, "not an object");
    bool seen_in[2 * FF_MAX_INS] = {false};
    for (int side = 0; side < 2; side++) {
        un_jcur ops = un_jcur_member(rc, side ? "dstOp" : "srcOp");
        if (un_jcur_type(&ops) != UN_JSON_ARRAY || un_jcur_len(&ops) == 0)
            return reject(fr, UN_FLEXFLOW_REJECT_MALFORMED, "no \"%s\" ops",
                          side ? "dstOp" : "srcOp");
        if (un_jcur_len(&ops) > FF_MAX_OPS)
            return reject(fr, UN_FLEXFLOW_REJECT_MALFORMED, "more than %d ops on a side",
                          FF_MAX_OPS);
        ir->n_ops[side] = un_jcur_len(&ops);
        for (int i = 0; i < ir->n_ops[side]; i++) {
            un_jcur o = un_jcur_item(&ops, i);
            if (!parse_op(fr, ir, side, i, &o, seen_in))
                return false;
        }
    }
    for (int i = 0; i < ir->n_inputs; i++)
        if (seen_in[i] != seen_in[FF_MAX_INS + i])
            return reject(fr, UN_FLEXFLOW_REJECT_ONE_SIDE, "input %d is used by %s only",
                          ir->input_id[i], seen_in[i] ? "srcOp" : "dstOp");
    un_jcur map = un_jcur_member(rc, "mappedOutput");
    if (un_jcur_type(&map) != UN_JSON_ARRAY || un_jcur_len(&map) < 1)
        return reject(fr, UN_FLEXFLOW_REJECT_MALFORMED, "no \"mappedOutput\"");
    if (un_jcur_len(&map) > UN_RULE_MAX_OUTS)
        return reject(fr, UN_FLEXFLOW_REJECT_MALFORMED, "more than %d mapped outputs",
                      UN_RULE_MAX_OUTS);
    ir->n_map = un_jcur_len(&map);
    for (int i = 0; i < ir->n_map; i++) {
        un_jcur m = un_jcur_item(&map, i);
        int64_t v[4];
        static const char *const keys[4] = {"srcOpId", "srcTsId", "dstOpId", "dstTsId"};
        for (int j = 0; j < 4; j++)
            if (!get_int(&m, keys[j], &v[j]))
                return reject(fr, UN_FLEXFLOW_REJECT_MALFORMED, "mappedOutput[%d]: no integer %s",
                              i, keys[j]);
        for (int side = 0; side < 2; side++) {
            int64_t op = v[2 * side], ts = v[2 * side + 1];
            if (op < 0 || op >= ir->n_ops[side] || ts < 0 || ts >= ir->ops[side][op].n_out)
                return reject(fr, UN_FLEXFLOW_REJECT_BAD_REF,
                              "mappedOutput[%d]: %s op %lld output %lld does not exist", i,
                              side ? "dst" : "src", (long long)op, (long long)ts);
            ir->map[i][side] = (ff_ref){(int)op, (int)ts};
        }
    }
    /* The rank: concat's PM_NUMDIM counts the replica dim; without a concat, rank 2 (the file's
     * tensors are matrices: linear's weight is one). */
    ir->rank = 0;
    ir->degree = 2;
    int maxdeg = 0;
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < ir->n_ops[side]; i++) {
            const ff_op *op = &ir->ops[side][i];
            if (op->has[PM_NUMDIM]) {
                int r = (int)op->pm[PM_NUMDIM] - 1;
                if (r < 1 || r > UN_MAX_DIMS || (ir->rank && ir->rank != r))
                    return reject(fr, UN_FLEXFLOW_REJECT_UNKNOWN_PARAM,
                                  "%s[%d]: PM_NUMDIM %lld (other tensors have %d dims)",
                                  side ? "dstOp" : "srcOp", i, (long long)op->pm[PM_NUMDIM],
                                  ir->rank + 1);
                ir->rank = r;
            }
            if (op->has[PM_DEGREE] && op->pm[PM_DEGREE] > maxdeg)
                maxdeg = (int)op->pm[PM_DEGREE];
        }
    if (!ir->rank)
        ir->rank = 2;
    if (maxdeg > 1)
        ir->degree = maxdeg;
    /* Dims: Legion order, the replica dim last (index rank). */
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < ir->n_ops[side]; i++) {
            const ff_op *op = &ir->ops[side][i];
            const char *sname = side ? "dstOp" : "srcOp";
            int pm = op->has[PM_DIM] ? PM_DIM : op->has[PM_AXIS] ? PM_AXIS : -1;
            if (pm < 0)
                continue;
            int64_t d = op->pm[pm];
            if (d < 0 || d > ir->rank)
                return reject(fr, UN_FLEXFLOW_REJECT_UNKNOWN_PARAM,
                              "%s[%d]: %s: %s %lld is not a dim of a %d-dim tensor", sname, i,
                              op->type, pm_names[pm], (long long)d, ir->rank + 1);
            bool parallel_sum_copy = op->op == UN_OP_REPLICATE || op->op == UN_OP_REDUCE;
            if (d == ir->rank && !parallel_sum_copy)
                return reject(fr, UN_FLEXFLOW_REJECT_REPLICA_DIM,
                              "%s[%d]: %s along dim %lld, the replica dim: it holds copies or "
                              "partial sums, not data to split (DESIGN section 3)",
                              sname, i, op->type, (long long)d);
            if (op->op == UN_OP_REDUCE && op->in[0].op >= 0 &&
                ir->ops[side][op->in[0].op].op == UN_OP_REPLICATE)
                return reject(fr, UN_FLEXFLOW_REJECT_REDUCE_COPIES,
                              "%s[%d]: reduce(replicate(x)) sums copies (k*x in FlexFlow's "
                              "replica dim); here reduce sums partial sums and replicate makes "
                              "copies, so the term is ill-formed",
                              sname, i);
        }
    return true;
}

/* ---- dims: a linear system over the input dims ---------------------------------------------- */

typedef struct ff_form {
    double c[FF_MAX_VARS];
} ff_form;

typedef struct ff_solver {
    int nv;
    int n_rows;
    ff_form rows[FF_MAX_ROWS];
    ff_form t[2][FF_MAX_OPS][2][UN_MAX_DIMS]; /* side, op, output, dim */
    double val[FF_MAX_VARS];
} ff_solver;

static void form_var(ff_form *f, int v) {
    memset(f, 0, sizeof *f);
    f->c[v] = 1;
}

static void add_eq(ff_solver *s, const ff_form *a, const ff_form *b) {
    if (s->n_rows == FF_MAX_ROWS)
        return;
    ff_form *r = &s->rows[s->n_rows++];
    for (int i = 0; i < s->nv; i++)
        r->c[i] = a->c[i] - b->c[i];
}

static const ff_form *tensor(ff_solver *s, const ff_ir *ir, int side, ff_ref ref, ff_form *tmp) {
    if (ref.op >= 0)
        return s->t[side][ref.op][ref.ts];
    int ii = input_index(ir, ref.op);
    for (int d = 0; d < ir->rank; d++)
        form_var(&tmp[d], ii * ir->rank + d);
    return tmp;
}

static void build_system(ff_solver *s, const ff_ir *ir) {
    int R = ir->rank;
    s->nv = ir->n_inputs * R;
    s->n_rows = 0;
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < ir->n_ops[side]; i++) {
            const ff_op *op = &ir->ops[side][i];
            ff_form ta[UN_MAX_DIMS], tb[UN_MAX_DIMS];
            const ff_form *a = tensor(s, ir, side, op->in[0], ta);
            const ff_form *b = op->n_in > 1 ? tensor(s, ir, side, op->in[1], tb) : NULL;
            ff_form *o0 = s->t[side][i][0], *o1 = s->t[side][i][1];
            memcpy(o0, a, sizeof(ff_form) * (size_t)R);
            int ax = op->has[PM_AXIS] ? R - 1 - (int)op->pm[PM_AXIS] : -1;
            switch (op->op) {
            case UN_OP_EW_ADD:
            case UN_OP_EW_SUB:
            case UN_OP_EW_MUL:
                for (int d = 0; d < R; d++)
                    add_eq(s, &a[d], &b[d]);
                break;
            case UN_OP_LINEAR:
                add_eq(s, &a[R - 1], &b[0]);
                o0[R - 1] = b[R > 1 ? 1 : 0];
                break;
            case UN_OP_CONCAT:
                for (int d = 0; d < R; d++)
                    if (d != ax)
                        add_eq(s, &a[d], &b[d]);
                for (int v = 0; v < s->nv; v++)
                    o0[ax].c[v] = a[ax].c[v] + b[ax].c[v];
                break;
            case UN_OP_SPLIT:
                for (int v = 0; v < s->nv; v++)
                    o0[ax].c[v] *= 0.5;
                memcpy(o1, o0, sizeof(ff_form) * (size_t)R);
                break;
            default:
                break;
            }
        }
    for (int m = 0; m < ir->n_map; m++) {
        const ff_form *a = s->t[0][ir->map[m][0].op][ir->map[m][0].ts];
        const ff_form *b = s->t[1][ir->map[m][1].op][ir->map[m][1].ts];
        for (int d = 0; d < R; d++)
            add_eq(s, &a[d], &b[d]);
    }
}

/* Reduced row echelon form; pivot[r] is row r's pivot column. Returns the rank. */
static int rref(ff_solver *s, int *pivot) {
    int r = 0;
    for (int c = 0; c < s->nv && r < s->n_rows; c++) {
        int best = -1;
        double bv = 1e-9;
        for (int i = r; i < s->n_rows; i++)
            if (fabs(s->rows[i].c[c]) > bv) {
                bv = fabs(s->rows[i].c[c]);
                best = i;
            }
        if (best < 0)
            continue;
        ff_form t = s->rows[best];
        s->rows[best] = s->rows[r];
        s->rows[r] = t;
        double p = s->rows[r].c[c];
        for (int j = 0; j < s->nv; j++)
            s->rows[r].c[j] /= p;
        for (int i = 0; i < s->n_rows; i++) {
            if (i == r || fabs(s->rows[i].c[c]) < 1e-12)
                continue;
            double f = s->rows[i].c[c];
            for (int j = 0; j < s->nv; j++)
                s->rows[i].c[j] -= f * s->rows[r].c[j];
        }
        pivot[r++] = c;
    }
    return r;
}

static bool is_pos_int(double v, int64_t unit) {
    double rv = nearbyint(v);
    return fabs(v - rv) < 1e-6 && rv >= 1 && ((int64_t)rv % unit) == 0;
}

/* Small positive dims for every input, multiples of unit (so partitions and halves divide). */
static bool solve_dims(ff_solver *s, const ff_ir *ir, uint64_t seed) {
    int pivot[FF_MAX_ROWS];
    int rank = rref(s, pivot);
    bool is_pivot[FF_MAX_VARS] = {false};
    for (int r = 0; r < rank; r++)
        is_pivot[pivot[r]] = true;
    int64_t unit = ir->degree;
    int64_t base = 4 * (int64_t)ir->degree * ir->degree;
    un_rng rng;
    un_rng_seed(&rng, seed);
    for (int t = 0; t < 200; t++) {
        int nf = 0;
        for (int v = 0; v < s->nv; v++) {
            if (is_pivot[v])
                continue;
            int64_t m = t == 0   ? 2
                        : t == 1 ? nf + 1
                        : t == 2 ? s->nv - nf
                                 : 1 + (int64_t)un_rng_below(&rng, 8);
            s->val[v] = (double)(base * m);
            nf++;
        }
        for (int r = 0; r < rank; r++) {
            double x = 0;
            for (int v = 0; v < s->nv; v++)
                if (!is_pivot[v])
                    x -= s->rows[r].c[v] * s->val[v];
            s->val[pivot[r]] = x;
        }
        bool ok = true;
        for (int v = 0; v < s->nv && ok; v++)
            ok = is_pos_int(s->val[v], unit);
        /* Every intermediate tensor too (split halves must stay whole and divisible). */
        for (int side = 0; side < 2 && ok; side++)
            for (int i = 0; i < ir->n_ops[side] && ok; i++)
                for (int o = 0; o < ir->ops[side][i].n_out && ok; o++)
                    for (int d = 0; d < ir->rank && ok; d++) {
                        double x = 0;
                        for (int v = 0; v < s->nv; v++)
                            x += s->t[side][i][o][d].c[v] * s->val[v];
                        ok = is_pos_int(x, unit);
                    }
        if (ok)
            return true;
    }
    return false;
}

/* ---- building the two sides ------------------------------------------------------------------ */

static un_status build_side(un_ctx *ctx, const un_spec *spec, const ff_ir *ir, int side,
                            const un_shape *in_shapes, un_graph **out, un_ref *outs) {
    *out = NULL;
    un_graph *g = un_graph_new(spec);
    int32_t in_node[FF_MAX_INS], node[FF_MAX_OPS];
    int R = ir->rank;
    un_status st = UN_OK;
    for (int i = 0; i < ir->n_inputs && st == UN_OK; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", -ir->input_id[i]);
        st = un_graph_add_input_shape(ctx, g, name, UN_OP_INPUT, &in_shapes[i], &in_node[i]);
    }
    for (int i = 0; i < ir->n_ops[side] && st == UN_OK; i++) {
        const ff_op *op = &ir->ops[side][i];
        const un_op_spec *os = un_spec_op(spec, op->op);
        un_param p[UN_MAX_PARAMS];
        un_spec_param_defaults(os, p);
        un_ref in[4];
        for (int j = 0; j < op->n_in; j++)
            in[j] = op->in[j].op < 0 ? (un_ref){in_node[input_index(ir, op->in[j].op)], 0}
                                     : (un_ref){node[op->in[j].op], op->in[j].ts};
        switch (op->op) {
        case UN_OP_PARTITION:
        case UN_OP_COMBINE:
            p[un_spec_param_index(os, "dim")] = un_param_int(R - 1 - op->pm[PM_DIM]);
            p[un_spec_param_index(os, "degree")] = un_param_int(op->pm[PM_DEGREE]);
            break;
        case UN_OP_REPLICATE:
        case UN_OP_REDUCE:
            p[un_spec_param_index(os, "degree")] = un_param_int(op->pm[PM_DEGREE]);
            break;
        case UN_OP_LINEAR: {
            const char *a = ff_acti[op->has[PM_ACTI] ? op->pm[PM_ACTI] : 0];
            const un_param_spec *ps = &os->params[un_spec_param_index(os, "activation")];
            for (int e = 0; e < ps->n_enum; e++)
                if (strcmp(ps->enums[e], a) == 0)
                    p[un_spec_param_index(os, "activation")] = un_param_int(e);
            break;
        }
        case UN_OP_CONCAT:
            p[un_spec_param_index(os, "axis")] = un_param_int(R - 1 - op->pm[PM_AXIS]);
            break;
        case UN_OP_SPLIT: {
            int ax = R - 1 - (int)op->pm[PM_AXIS];
            int64_t d = un_graph_shape(g, in[0])->dim[ax];
            p[un_spec_param_index(os, "axis")] = un_param_int(ax);
            un_param *sz = &p[un_spec_param_index(os, "sizes")];
            sz->len = 2;
            sz->v[0] = sz->v[1] = d / 2;
            if (d % 2)
                sz->v[0]++; /* the shape check then names the split */
            break;
        }
        default:
            break;
        }
        char name[16];
        snprintf(name, sizeof name, "%s%d", side ? "t" : "s", i);
        st = un_graph_add(ctx, g, op->op, p, in, op->n_in, name, &node[i]);
    }
    if (st != UN_OK) {
        un_graph_free(g);
        return st;
    }
    for (int m = 0; m < ir->n_map; m++)
        outs[m] = (un_ref){node[ir->map[m][side].op], ir->map[m][side].ts};
    *out = g;
    return UN_OK;
}

/* Layout candidates of one input: trivial, one component, two components (degree k each). */
typedef struct ff_layout {
    int8_t shard[2]; /* dims sharded (-1 none) */
    bool sum, copy;
    int weight;
} ff_layout;

static int layout_options(int rank, ff_layout *opt) {
    int n = 0;
    opt[n++] = (ff_layout){{-1, -1}, false, false, 0};
    for (int d = 0; d < rank; d++)
        opt[n++] = (ff_layout){{(int8_t)d, -1}, false, false, 1};
    opt[n++] = (ff_layout){{-1, -1}, true, false, 1};
    opt[n++] = (ff_layout){{-1, -1}, false, true, 1};
    for (int d = 0; d < rank; d++) {
        opt[n++] = (ff_layout){{(int8_t)d, -1}, true, false, 2};
        opt[n++] = (ff_layout){{(int8_t)d, -1}, false, true, 2};
    }
    opt[n++] = (ff_layout){{-1, -1}, true, true, 2};
    for (int a = 0; a < rank; a++)
        for (int b = a + 1; b < rank; b++)
            opt[n++] = (ff_layout){{(int8_t)a, (int8_t)b}, false, false, 2};
    return n;
}

typedef struct ff_search {
    const un_spec *spec;
    const ff_ir *ir;
    const int64_t *dims; /* per input, rank each */
    ff_layout opt[64];
    int n_opt;
    int choice[FF_MAX_INS];
    int tries;
    un_rule *found;
    char why[3][256]; /* first make failure, first dst failure, first src failure */
} ff_search;

static bool try_layouts(ff_search *s) {
    const ff_ir *ir = s->ir;
    un_shape sh[FF_MAX_INS];
    for (int i = 0; i < ir->n_inputs; i++) {
        sh[i] = un_shape_make(ir->rank, &s->dims[i * ir->rank], UN_DT_FLOAT);
        const ff_layout *l = &s->opt[s->choice[i]];
        for (int j = 0; j < 2; j++)
            if (l->shard[j] >= 0)
                sh[i].shard[l->shard[j]] = ir->degree;
        if (l->sum)
            sh[i].sum = ir->degree;
        if (l->copy)
            sh[i].copy = ir->degree;
    }
    s->tries++;
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g[2] = {NULL, NULL};
    un_ref outs[2][UN_RULE_MAX_OUTS];
    un_status st = build_side(ctx, s->spec, ir, 0, sh, &g[0], outs[0]);
    int cat = 2;
    if (st == UN_OK) {
        cat = 1;
        st = build_side(ctx, s->spec, ir, 1, sh, &g[1], outs[1]);
    }
    if (st == UN_OK) {
        cat = 0;
        st = un_rule_make(ctx, g[0], g[1], outs[0], outs[1], ir->n_map, &s->found);
    }
    if (st != UN_OK && !s->why[cat][0])
        snprintf(s->why[cat], sizeof s->why[cat], "%s", un_ctx_errmsg(ctx));
    un_graph_free(g[0]);
    un_graph_free(g[1]);
    un_ctx_free(ctx);
    return st == UN_OK;
}

/* Assignments of total weight exactly w to inputs i.. (least parallel first). */
static bool search_weight(ff_search *s, int i, int w) {
    if (s->tries >= FF_MAX_TRIES)
        return false;
    if (i == s->ir->n_inputs)
        return w == 0 && try_layouts(s);
    for (int o = 0; o < s->n_opt; o++) {
        if (s->opt[o].weight > w)
            continue;
        s->choice[i] = o;
        if (search_weight(s, i + 1, w - s->opt[o].weight))
            return true;
    }
    return false;
}

/* Degree occurrences become variables where one value appears on both sides. */
static void add_degree_vars(un_rule *r) {
    typedef struct {
        int64_t value;
        int n;
        bool side[2];
        un_rule_bind b[UN_RULE_MAX_BINDS + 1];
    } group;
    group gs[8];
    int ng = 0;
    for (int side = 0; side < 2; side++) {
        const un_graph *g = side ? r->dst : r->src;
        for (int32_t v = 0; v < un_graph_node_count(g); v++) {
            const un_node *nd = un_graph_node(g, v);
            const un_op_spec *os = un_spec_op(un_graph_spec(g), nd->op);
            un_rule_bind cand[UN_MAX_DIMS + 2];
            int64_t val[UN_MAX_DIMS + 2];
            int nc = 0;
            if (un_op_kind_of(nd->op) == UN_OPK_PARALLEL) {
                int pi = un_spec_param_index(os, "degree");
                cand[nc] = (un_rule_bind){(int8_t)side, v, (int8_t)pi, -1};
                val[nc++] = nd->params[pi].v[0];
            } else if (un_op_kind_of(nd->op) == UN_OPK_SOURCE) {
                int ish = un_spec_param_index(os, "shard"), isum = un_spec_param_index(os, "sum"),
                    icp = un_spec_param_index(os, "copy");
                for (int j = 0; ish >= 0 && j < nd->params[ish].len; j++)
                    if (nd->params[ish].v[j] != 1) {
                        cand[nc] = (un_rule_bind){(int8_t)side, v, (int8_t)ish, (int8_t)j};
                        val[nc++] = nd->params[ish].v[j];
                    }
                if (isum >= 0 && nd->params[isum].v[0] != 1) {
                    cand[nc] = (un_rule_bind){(int8_t)side, v, (int8_t)isum, -1};
                    val[nc++] = nd->params[isum].v[0];
                }
                if (icp >= 0 && nd->params[icp].v[0] != 1) {
                    cand[nc] = (un_rule_bind){(int8_t)side, v, (int8_t)icp, -1};
                    val[nc++] = nd->params[icp].v[0];
                }
            }
            for (int c = 0; c < nc; c++) {
                int k = 0;
                while (k < ng && gs[k].value != val[c])
                    k++;
                if (k == ng) {
                    if (ng == 8)
                        continue;
                    memset(&gs[ng], 0, sizeof gs[ng]);
                    gs[ng++].value = val[c];
                }
                gs[k].side[side] = true;
                if (gs[k].n <= UN_RULE_MAX_BINDS)
                    gs[k].b[gs[k].n++] = cand[c];
            }
        }
    }
    int nv = 0;
    for (int k = 0; k < ng && r->n_vars < UN_RULE_MAX_VARS; k++) {
        if (!gs[k].side[0] || !gs[k].side[1] || gs[k].n > UN_RULE_MAX_BINDS)
            continue;
        char name[16];
        snprintf(name, sizeof name, nv ? "k%d" : "k", nv + 1);
        if (un_rule_var_add(NULL, r, name, gs[k].b, gs[k].n) == UN_OK)
            nv++;
    }
}

static uint64_t name_seed(const char *s) { return un_hash_bytes(s, strlen(s), 0x5eed); }

static void convert(const un_spec *spec, const un_jcur *rc, un_flexflow_rule *fr) {
    ff_ir *ir = un_xcalloc(1, sizeof *ir);
    ff_solver *sv = NULL;
    ff_search *se = NULL;
    if (!parse_rule(fr, ir, rc))
        goto done;
    sv = un_xcalloc(1, sizeof *sv);
    build_system(sv, ir);
    if (!solve_dims(sv, ir, name_seed(fr->name))) {
        bool sum_copy = false;
        for (int side = 0; side < 2; side++)
            for (int i = 0; i < ir->n_ops[side]; i++)
                sum_copy |=
                    ir->ops[side][i].op == UN_OP_REPLICATE || ir->ops[side][i].op == UN_OP_REDUCE;
        reject(fr, UN_FLEXFLOW_REJECT_NO_SHAPES,
               "no positive dims satisfy the shape equations of both sides (%d equations over "
               "%d input dims)%s",
               sv->n_rows, sv->nv,
               sum_copy ? "; FlexFlow's replicate and reduce resize a dim, ours keep the shape"
                        : "");
        goto done;
    }
    int64_t dims[FF_MAX_VARS];
    for (int v = 0; v < sv->nv; v++)
        dims[v] = (int64_t)nearbyint(sv->val[v]);
    se = un_xcalloc(1, sizeof *se);
    se->spec = spec;
    se->ir = ir;
    se->dims = dims;
    se->n_opt = layout_options(ir->rank, se->opt);
    bool ok = false;
    for (int w = 0; w <= 2 * ir->n_inputs && !ok && se->tries < FF_MAX_TRIES; w++)
        ok = search_weight(se, 0, w);
    if (!ok) {
        const char *why = se->why[0][0] ? se->why[0] : se->why[1][0] ? se->why[1] : se->why[2];
        reject(fr, UN_FLEXFLOW_REJECT_ILL_FORMED,
               "no input layouts make both sides well formed "
               "with equal outputs: %s",
               why);
        goto done;
    }
    fr->rule = se->found;
    snprintf(fr->rule->name, sizeof fr->rule->name, "%s", fr->name);
    add_degree_vars(fr->rule);
done:
    free(se);
    free(sv);
    free(ir);
}

un_status un_flexflow_parse(un_ctx *ctx, const un_spec *spec, const char *name, const char *text,
                            size_t len, un_flexflow_rule **out, int *n) {
    *out = NULL;
    *n = 0;
    un_jdoc *doc = NULL;
    un_status st = un_jdoc_parse(ctx, name, text, len, &doc);
    if (st != UN_OK)
        return st;
    un_jcur root = un_jdoc_root(doc);
    un_jcur rules = un_jcur_member(&root, "rule");
    if (un_jcur_type(&root) != UN_JSON_OBJECT || un_jcur_type(&rules) != UN_JSON_ARRAY) {
        st = un_ctx_error(ctx, UN_ERR_PARSE,
                          "%s: not a FlexFlow rule collection (no \"rule\" array)", name);
        un_jdoc_free(doc);
        return st;
    }
    int cnt = un_jcur_len(&rules);
    un_flexflow_rule *rs = un_xcalloc((size_t)(cnt ? cnt : 1), sizeof *rs);
    for (int i = 0; i < cnt; i++) {
        un_jcur rc = un_jcur_item(&rules, i);
        un_jcur nm = un_jcur_member(&rc, "name");
        if (un_jcur_type(&nm) == UN_JSON_STRING && un_jcur_str(&nm)[0])
            snprintf(rs[i].name, sizeof rs[i].name, "%s", un_jcur_str(&nm));
        else
            snprintf(rs[i].name, sizeof rs[i].name, "rule[%d]", i);
        convert(spec, &rc, &rs[i]);
    }
    un_jdoc_free(doc);
    *out = rs;
    *n = cnt;
    return UN_OK;
}

un_status un_flexflow_load(un_ctx *ctx, const un_spec *spec, const char *path,
                           un_flexflow_rule **out, int *n) {
    *out = NULL;
    *n = 0;
    char *text = NULL;
    size_t len = 0;
    un_status st = un_read_file(ctx, path, &text, &len);
    if (st == UN_OK)
        st = un_flexflow_parse(ctx, spec, path, text, len, out, n);
    free(text);
    return st;
}

void un_flexflow_rules_free(un_flexflow_rule *rules, int n) {
    if (!rules)
        return;
    for (int i = 0; i < n; i++)
        un_rule_free(rules[i].rule);
    free(rules);
}

un_status un_flexflow_import(un_ctx *ctx, un_rulesdb *db, const char *path,
                             un_flexflow_import_stats *stats, un_buf *report) {
    memset(stats, 0, sizeof *stats);
    un_flexflow_rule *rs = NULL;
    int n = 0;
    un_flexflow_import_stats s = {0};
    un_status st = un_flexflow_load(ctx, un_rulesdb_spec(db), path, &rs, &n);
    if (st != UN_OK)
        return st;
    st = un_rulesdb_begin(ctx, db);
    for (int i = 0; i < n && st == UN_OK; i++) {
        un_rulesdb_origin o = {.kind = "imported", .file = path, .name = rs[i].name};
        bool ins = false;
        s.parsed++;
        if (rs[i].rule) {
            st = un_rulesdb_rule_insert(ctx, db, rs[i].rule, UN_RULE_CANDIDATE, NULL, &o, NULL,
                                        &ins);
            s.imported += ins;
            s.duplicates += !ins;
        } else {
            char detail[320];
            snprintf(detail, sizeof detail, "%s: %s", un_flexflow_reject_name(rs[i].kind),
                     rs[i].reason);
            st = un_rulesdb_rule_insert(ctx, db, NULL, UN_RULE_REJECTED, detail, &o, NULL, &ins);
            s.rejected++;
            s.by_reason[rs[i].kind]++;
            if (report)
                un_buf_printf(report, "%s: rejected: %s\n", rs[i].name, detail);
        }
    }
    if (st == UN_OK)
        st = un_rulesdb_commit(ctx, db);
    else
        un_rulesdb_rollback(db);
    un_flexflow_rules_free(rs, n);
    if (st == UN_OK)
        *stats = s;
    return st;
}

/* ---- export --------------------------------------------------------------------------------- */

static const char *ff_type_of(un_op op) {
    switch (op) {
    case UN_OP_PARTITION:
        return "OP_PARTITION";
    case UN_OP_COMBINE:
        return "OP_COMBINE";
    case UN_OP_REPLICATE:
        return "OP_REPLICATE";
    case UN_OP_REDUCE:
        return "OP_REDUCE";
    case UN_OP_LINEAR:
        return "OP_LINEAR";
    case UN_OP_RELU:
        return "OP_RELU";
    case UN_OP_SIGMOID:
        return "OP_SIGMOID";
    case UN_OP_TANH:
        return "OP_TANH";
    case UN_OP_GELU:
        return "OP_GELU";
    case UN_OP_EW_ADD:
        return "OP_EW_ADD";
    case UN_OP_EW_SUB:
        return "OP_EW_SUB";
    case UN_OP_EW_MUL:
        return "OP_EW_MUL";
    case UN_OP_CONCAT:
        return "OP_CONCAT";
    case UN_OP_SPLIT:
        return "OP_SPLIT";
    default:
        return NULL;
    }
}

static int64_t param_of(const un_graph *g, const un_node *nd, const char *name, int item) {
    const un_op_spec *os = un_spec_op(un_graph_spec(g), nd->op);
    int i = un_spec_param_index(os, name);
    return i < 0 ? 0 : nd->params[i].v[item];
}

static void emit_param(un_buf *b, bool *first, const char *key, int64_t v) {
    un_buf_printf(b,
                  "%s\n            {\n              \"_t\": \"Parameter\",\n              \"key\": "
                  "\"%s\",\n              \"value\": %lld\n            }",
                  *first ? "" : ",", key, (long long)v);
    *first = false;
}

/* One side's "Operator" list; ids[] receives each node's FlexFlow id (inputs negative). */
static un_status emit_side(un_ctx *ctx, const un_rule *r, int side, int rank, int32_t *ids,
                           un_buf *b) {
    const un_graph *g = side ? r->dst : r->src;
    int32_t n = un_graph_node_count(g);
    for (int i = 0; i < un_rule_input_count(r); i++)
        ids[side ? un_rule_input_dst(r, i) : un_rule_input_src(r, i)] = -(i + 1);
    int next = 0;
    un_buf_printf(b, "[");
    bool first_op = true;
    for (int32_t k = 0; k < n; k++) {
        int32_t v = k;
        const un_node *nd = un_graph_node(g, v);
        if (un_op_kind_of(nd->op) == UN_OPK_SOURCE)
            continue;
        ids[v] = next++;
        un_buf_printf(b, "%s\n        {\n          \"_t\": \"Operator\",\n          \"input\": [",
                      first_op ? "" : ",");
        first_op = false;
        for (int j = 0; j < nd->n_in; j++)
            un_buf_printf(b,
                          "%s\n            {\n              \"_t\": \"Tensor\",\n              "
                          "\"opId\": %d,\n              \"tsId\": %d\n            }",
                          j ? "," : "", (int)ids[nd->in[j].node], (int)nd->in[j].out);
        un_buf_printf(b, "\n          ],\n          \"para\": [");
        bool first = true;
        switch (nd->op) {
        case UN_OP_PARTITION:
        case UN_OP_COMBINE:
            emit_param(b, &first, "PM_PARALLEL_DIM", rank - 1 - param_of(g, nd, "dim", 0));
            emit_param(b, &first, "PM_PARALLEL_DEGREE", param_of(g, nd, "degree", 0));
            break;
        case UN_OP_REPLICATE:
        case UN_OP_REDUCE:
            emit_param(b, &first, "PM_PARALLEL_DIM", rank); /* the replica dim */
            emit_param(b, &first, "PM_PARALLEL_DEGREE", param_of(g, nd, "degree", 0));
            break;
        case UN_OP_LINEAR: {
            const un_op_spec *os = un_spec_op(un_graph_spec(g), nd->op);
            int ia = un_spec_param_index(os, "activation");
            const char *a = os->params[ia].enums[nd->params[ia].v[0]];
            int code = -1;
            for (int c = 0; c < 4; c++)
                if (strcmp(ff_acti[c], a) == 0)
                    code = c;
            if (code < 0 || param_of(g, nd, "use_bias", 0))
                return un_ctx_error(ctx, UN_ERR_UNAVAILABLE,
                                    "linear with %s%s: FlexFlow's rules have no such linear", a,
                                    param_of(g, nd, "use_bias", 0) ? " and a bias" : "");
            emit_param(b, &first, "PM_ACTI", code);
            break;
        }
        case UN_OP_CONCAT:
            emit_param(b, &first, "PM_NUM_INPUTS", 2);
            emit_param(b, &first, "PM_AXIS", rank - 1 - param_of(g, nd, "axis", 0));
            emit_param(b, &first, "PM_NUMDIM", rank + 1);
            break;
        case UN_OP_SPLIT: {
            const un_op_spec *os = un_spec_op(un_graph_spec(g), nd->op);
            const un_param *sz = &nd->params[un_spec_param_index(os, "sizes")];
            if (sz->len != 2 || sz->v[0] != sz->v[1])
                return un_ctx_error(ctx, UN_ERR_UNAVAILABLE,
                                    "split into unequal or more than 2 parts: FlexFlow's split "
                                    "has only PM_NUM_OUTPUTS");
            emit_param(b, &first, "PM_NUM_OUTPUTS", 2);
            emit_param(b, &first, "PM_AXIS", rank - 1 - param_of(g, nd, "axis", 0));
            break;
        }
        default:
            break;
        }
        un_buf_printf(b, "%s],\n          \"type\": \"%s\"\n        }", first ? "" : "\n          ",
                      ff_type_of(nd->op));
    }
    un_buf_printf(b, "\n      ]");
    return UN_OK;
}

un_status un_flexflow_rule_to_json(un_ctx *ctx, const un_rule *r, const char *name, un_buf *out) {
    int rank = -1;
    bool concat = false;
    for (int side = 0; side < 2; side++) {
        const un_graph *g = side ? r->dst : r->src;
        for (int32_t v = 0; v < un_graph_node_count(g); v++) {
            const un_node *nd = un_graph_node(g, v);
            if (un_op_kind_of(nd->op) != UN_OPK_SOURCE && !ff_type_of(nd->op))
                return un_ctx_error(ctx, UN_ERR_UNAVAILABLE,
                                    "%s: FlexFlow's rule format has no operator for it",
                                    un_op_name(nd->op));
            concat |= nd->op == UN_OP_CONCAT;
            for (int o = 0; o < nd->inf.n_out; o++) {
                int rk = nd->inf.out[o].rank;
                if (rank >= 0 && rk != rank)
                    return un_ctx_error(ctx, UN_ERR_UNAVAILABLE,
                                        "tensors of ranks %d and %d: the format gives one rank "
                                        "per rule",
                                        rank, rk);
                rank = rk;
            }
        }
    }
    if (rank != 2 && !concat)
        return un_ctx_error(ctx, UN_ERR_UNAVAILABLE,
                            "rank %d tensors: without a concat (PM_NUMDIM) the format implies "
                            "rank 2",
                            rank);
    un_buf b = {0};
    int32_t *ids[2];
    ids[0] = un_xcalloc((size_t)un_graph_node_count(r->src) + 1, sizeof(int32_t));
    ids[1] = un_xcalloc((size_t)un_graph_node_count(r->dst) + 1, sizeof(int32_t));
    un_buf dst = {0}, src = {0};
    un_status st = emit_side(ctx, r, 0, rank, ids[0], &src);
    if (st == UN_OK)
        st = emit_side(ctx, r, 1, rank, ids[1], &dst);
    if (st == UN_OK) {
        un_buf_printf(&b, "    {\n      \"_t\": \"Rule\",\n      \"dstOp\": %s,\n", dst.data);
        un_buf_printf(&b, "      \"mappedOutput\": [");
        for (int i = 0; i < r->n_out; i++)
            un_buf_printf(&b,
                          "%s\n        {\n          \"_t\": \"MapOutput\",\n          \"dstOpId\": "
                          "%d,\n          \"dstTsId\": %d,\n          \"srcOpId\": %d,\n          "
                          "\"srcTsId\": %d\n        }",
                          i ? "," : "", (int)ids[1][r->dst_out[i].node], (int)r->dst_out[i].out,
                          (int)ids[0][r->src_out[i].node], (int)r->src_out[i].out);
        un_buf_printf(&b, "\n      ],\n      \"name\": ");
        un_buf_json_str(&b, name ? name : r->name);
        un_buf_printf(&b, ",\n      \"srcOp\": %s\n    }", src.data);
        un_buf_printf(out, "%s", b.data);
    }
    un_buf_deinit(&b);
    un_buf_deinit(&src);
    un_buf_deinit(&dst);
    free(ids[0]);
    free(ids[1]);
    return st;
}

un_status un_flexflow_export(un_ctx *ctx, const un_rule *const *rules, const char *const *names,
                             int64_t n, un_buf *out, int64_t *n_skipped, un_buf *report) {
    int64_t skipped = 0, written = 0;
    un_buf_printf(out, "{\n  \"_t\": \"RuleCollection\",\n  \"rule\": [");
    for (int64_t i = 0; i < n; i++) {
        char fallback[32];
        const char *name = names && names[i] ? names[i] : rules[i]->name;
        if (!name || !name[0]) {
            snprintf(fallback, sizeof fallback, "rule_%lld", (long long)i);
            name = fallback;
        }
        un_buf one = {0};
        un_ctx *tmp = un_ctx_new_child(ctx);
        un_status st = un_flexflow_rule_to_json(tmp, rules[i], name, &one);
        if (st == UN_OK) {
            un_buf_printf(out, "%s\n%s", written ? "," : "", one.data);
            written++;
        } else {
            skipped++;
            if (report)
                un_buf_printf(report, "%s: not exported: %s\n", name, un_ctx_errmsg(tmp));
        }
        un_buf_deinit(&one);
        un_ctx_free(tmp);
    }
    un_buf_printf(out, "\n  ]\n}\n");
    if (n_skipped)
        *n_skipped = skipped;
    (void)ctx;
    return UN_OK;
}
