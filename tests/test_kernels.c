/* tests/test_kernels.c - the runtime's CPU kernels (runtime/kernels.h) and thread pool: every
 * regular op's float64 forward against pcg's reference evaluator on its spec examples and extra
 * variants, float32 against float64, every differentiable input's backward against finite
 * differences (with a planted wrong gradient that must be caught), accumulation, absent inputs and
 * gradients, threads against no threads, dropout on shards, and one-line errors. */
#include "runtime/blas.h"
#include "runtime/kernels.h"
#include "runtime/pool.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pcg/eval.h"
#include "tests/test.h"

static un_spec *S;

/* Totals printed at the end: gradient checks that ran. */
static int n_grad_cases, n_grad_inputs, n_grad_elems, n_planted_caught;

/* ---- one operator instance ------------------------------------------------------------------- */

typedef struct inst {
    un_op op;
    const un_op_spec *os;
    un_param p[UN_MAX_PARAMS];
    un_infer inf;
    int n_in, n_out;
    un_shape in_shape[UN_MAX_INPUTS];
    int64_t n[UN_MAX_INPUTS], nout[UN_MAX_OUTPUTS];
    double *x[UN_MAX_INPUTS];   /* float inputs (NULL for int) */
    int64_t *xi[UN_MAX_INPUTS]; /* int inputs */
} inst;

static void inst_free(inst *t) {
    for (int i = 0; i < t->n_in; i++) {
        free(t->x[i]);
        free(t->xi[i]);
    }
}

/* Parses "name=value ..." (ints, true/false, enum names, [a,b] lists) into op params. */
static bool parse_params(const un_op_spec *os, const char *text, un_param *p) {
    un_spec_param_defaults(os, p);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return false;
        *eq = 0;
        int k = un_spec_param_index(os, tok);
        if (k < 0)
            return false;
        const un_param_spec *ps = &os->params[k];
        const char *v = eq + 1;
        p[k].len = -1;
        if (*v == '[') {
            p[k].len = 0;
            for (char *s = (char *)(uintptr_t)(v + 1); *s && *s != ']';) {
                p[k].v[p[k].len++] = strtoll(s, &s, 10);
                if (*s == ',')
                    s++;
            }
        } else if (!strcmp(v, "true") || !strcmp(v, "false")) {
            p[k].v[0] = v[0] == 't';
        } else if (ps->type == UN_PT_ENUM) {
            int e = -1;
            for (int i = 0; i < ps->n_enum; i++)
                if (!strcmp(ps->enums[i], v))
                    e = i;
            if (e < 0)
                return false;
            p[k].v[0] = e;
        } else {
            p[k].v[0] = strtoll(v, NULL, 10);
        }
    }
    return true;
}

/* Builds an instance: shapes inferred by pcg, inputs random (floats in [-1, 1), ints in
 * [0, range)). Returns false (after a failed expectation) when the spec refuses it. */
static bool inst_make(un_ctx *ctx, un_op op, const un_param *p, int n_in, const un_shape *shapes,
                      const int64_t *range, un_rng *rng, inst *t) {
    memset(t, 0, sizeof *t);
    t->op = op;
    t->os = un_spec_op(S, op);
    memcpy(t->p, p, sizeof t->p);
    t->n_in = n_in;
    un_status st = un_spec_infer(ctx, S, op, p, shapes, n_in, "case", &t->inf);
    EXPECT_OK(ctx, st);
    if (st != UN_OK) {
        un_ctx_clear(ctx);
        return false;
    }
    t->n_out = t->inf.n_out;
    for (int i = 0; i < n_in; i++) {
        t->in_shape[i] = shapes[i];
        t->n[i] = un_shape_numel(&shapes[i]);
        if (shapes[i].dtype == UN_DT_INT) {
            t->xi[i] = un_xmalloc(sizeof(int64_t) * (size_t)t->n[i]);
            for (int64_t e = 0; e < t->n[i]; e++)
                t->xi[i][e] = (int64_t)un_rng_below(rng, (uint64_t)range[i]);
        } else {
            t->x[i] = un_xmalloc(sizeof(double) * (size_t)t->n[i]);
            for (int64_t e = 0; e < t->n[i]; e++)
                t->x[i][e] = 2 * un_rng_double(rng) - 1;
        }
    }
    for (int o = 0; o < t->n_out; o++)
        t->nout[o] = un_shape_numel(&t->inf.out[o]);
    return true;
}

static un_kt kt_of(const un_shape *s, void *data) {
    un_kt k = {.dtype = s->dtype, .rank = s->rank, .data = data};
    for (int i = 0; i < s->rank; i++)
        k.dim[i] = s->dim[i];
    return k;
}

/* Input tensors in float64 (or float32 copies in f32[], allocated by the caller). */
static void inst_inputs(const inst *t, un_prec prec, float **f32, un_kt *in) {
    for (int i = 0; i < t->n_in; i++) {
        void *d = t->xi[i];
        if (t->x[i]) {
            d = t->x[i];
            if (prec == UN_PREC_F32) {
                f32[i] = un_xmalloc(sizeof(float) * (size_t)t->n[i]);
                for (int64_t e = 0; e < t->n[i]; e++)
                    f32[i][e] = (float)t->x[i][e];
                d = f32[i];
            }
        }
        in[i] = kt_of(&t->in_shape[i], d);
    }
}

static un_kexec exec_default(un_prec prec) {
    return (un_kexec){.prec = prec, .pool = NULL, .seed = 0, .training = true};
}

/* Forward in float64 into y[o] (nout[o] values each). */
static un_status inst_forward(un_ctx *ctx, const inst *t, const un_kexec *ex, double **y) {
    un_kt in[UN_MAX_INPUTS], out[UN_MAX_OUTPUTS];
    inst_inputs(t, UN_PREC_F64, NULL, in);
    for (int o = 0; o < t->n_out; o++)
        out[o] = kt_of(&t->inf.out[o], y[o]);
    return un_kern_forward(ctx, ex, t->op, t->inf.local, in, t->n_in, out, t->n_out);
}

/* The reference evaluator's float64 outputs into y[o]. */
static void inst_reference(un_ctx *ctx, const inst *t, double **y) {
    un_ptensor in[UN_MAX_INPUTS], out[UN_MAX_OUTPUTS];
    for (int i = 0; i < t->n_in; i++) {
        EXPECT_OK(ctx, un_ptensor_init(ctx, &in[i], &t->in_shape[i]));
        for (int64_t e = 0; e < t->n[i]; e++)
            in[i].data[e].f = t->x[i] ? t->x[i][e] : (double)t->xi[i][e];
    }
    EXPECT_OK(ctx, un_eval_op(ctx, S, t->op, t->p, &t->inf, UN_DOM_F64, in, t->n_in, out));
    for (int o = 0; o < t->n_out; o++) {
        for (int64_t e = 0; e < t->nout[o]; e++)
            y[o][e] = out[o].data[e].f;
        un_ptensor_deinit(&out[o]);
    }
    for (int i = 0; i < t->n_in; i++)
        un_ptensor_deinit(&in[i]);
}

static double **alloc_outs(const inst *t) {
    double **y = un_xcalloc(UN_MAX_OUTPUTS, sizeof *y);
    for (int o = 0; o < t->n_out; o++)
        y[o] = un_xcalloc((size_t)t->nout[o], sizeof(double));
    return y;
}

static void free_outs(double **y) {
    for (int o = 0; o < UN_MAX_OUTPUTS; o++)
        free(y[o]);
    free(y);
}

static bool close_to(double a, double b, double tol) {
    return fabs(a - b) <= tol * (1 + fabs(b)) || (isnan(a) && isnan(b));
}

/* ---- the cases ------------------------------------------------------------------------------- */

/* An extra case: op, params "name=value ...", input dims "2,3;3,4" (int inputs get their range
 * from the table or class count), exec training flag. */
typedef struct kcase {
    const char *op, *params, *dims;
    bool eval_mode; /* dropout with training = false */
} kcase;

static const kcase extra_cases[] = {
    {"linear", "activation=none", "5,7;7,3", false},
    {"linear", "activation=relu use_bias=true", "2,3,7;7,4;4", false},
    {"linear", "activation=sigmoid use_bias=true", "5,7;7,3;3", false},
    {"linear", "activation=tanh", "2,3,7;7,4", false},
    {"linear", "activation=gelu use_bias=true", "4,6;6,5;5", false},
    {"batch_matmul", "", "2,3,4,5;2,3,5,2", false},
    {"batch_matmul", "", "1,7;7,1", false},
    {"ew_add", "", "7;7", false},
    {"ew_sub", "", "2,3,2,2;2,3,2,2", false},
    {"ew_mul", "", "3,5;3,5", false},
    {"scalar_mul", "num=7 den=3", "2,5", false},
    {"relu", "", "17", false},
    {"gelu", "", "2,2,2,3", false},
    {"sigmoid", "", "3,5", false},
    {"tanh", "", "3,5", false},
    {"softmax", "dim=0", "3,4,5", false},
    {"softmax", "dim=1", "3,4,5", false},
    {"layer_norm", "", "2,3,6;6;6", false},
    {"layer_norm", "", "5,1;1;1", false},
    {"batch_norm", "", "3,2,2,3;2;2", false},
    {"dropout", "rate_pct=50 seed=3", "6,7", false},
    {"dropout", "rate_pct=0", "4,5", false},
    {"dropout", "rate_pct=30 seed=5", "4,5", true},
    {"conv2d", "stride_h=2 stride_w=1 pad_h=1 pad_w=2 use_bias=true", "2,3,5,6;4,3,3,3;4", false},
    {"conv2d", "groups=4 activation=relu use_bias=true", "1,4,5,5;8,1,2,3;8", false},
    {"conv2d", "groups=2 stride_h=2 stride_w=2", "2,4,6,5;2,2,2,2", false},
    {"pool2d", "type=avg kernel_h=3 kernel_w=2 stride_h=2 stride_w=1 pad_h=1 pad_w=1", "2,3,5,4",
     false},
    {"pool2d", "type=max kernel_h=3 kernel_w=3 stride_h=1 stride_w=2 pad_h=1 pad_w=1", "1,2,5,6",
     false},
    {"concat", "axis=2", "2,3,4;2,3,2", false},
    {"split", "axis=2 sizes=[1,3,2]", "2,3,6", false},
    {"split", "axis=0 sizes=[5]", "5,2", false},
    {"transpose", "dim0=0 dim1=3", "2,3,4,5", false},
    {"transpose", "dim0=1 dim1=1", "3,4", false},
    {"reshape", "shape=[3,2,4]", "4,6", false},
    {"flat", "", "2,3,4,2", false},
    {"identity", "", "3,4,5", false},
    {"embedding", "aggr=sum", "5,4;3,6", false},
    {"embedding", "aggr=mean", "3,7;4,2", false},
    {"multihead_attention", "heads=1", "2,3,4;2,5,4;2,5,4;4,4;4,4;4,4;4,4", false},
    {"multihead_attention", "heads=3", "1,4,6;1,2,6;1,2,6;6,6;6,6;6,6;6,6", false},
    /* several batches through the batched projections, causal */
    {"multihead_attention", "heads=2 causal=true", "3,5,4;3,5,4;3,5,4;4,4;4,4;4,4;4,4", false},
    {"reduce_sum", "dim=-1 keep=true", "3,4,5", false},
    {"reduce_sum", "dim=0", "3,4", false},
    {"reduce_sum", "dim=0", "5", false},
    {"reduce_mean", "dim=1", "3,4,5", false},
    {"reduce_mean", "dim=-3 keep=true", "3,4,5", false},
    {"cross_entropy", "", "5,7;5", false},
};

/* Shapes of an extra case; int inputs (embedding indices, labels) get their range. */
static bool case_shapes(const kcase *k, const un_op_spec *os, const un_param *p, int *n_in,
                        un_shape *sh, int64_t *range) {
    (void)p;
    int n = 0, r = 0;
    int64_t d[UN_MAX_DIMS];
    for (char *s = (char *)(uintptr_t)k->dims;;) {
        d[r++] = strtoll(s, &s, 10);
        if (*s == ',') {
            s++;
            continue;
        }
        sh[n] = un_shape_make(r, d, os->inputs[n].dtype);
        n++;
        r = 0;
        if (!*s)
            break;
        s++;
    }
    *n_in = n;
    for (int i = 0; i < n; i++)
        range[i] = 0;
    if (os->op == UN_OP_EMBEDDING)
        range[0] = sh[1].dim[0];
    if (os->op == UN_OP_CROSS_ENTROPY)
        range[1] = sh[0].dim[1];
    return true;
}

/* Calls fn on every spec example and every extra case. */
typedef void (*case_fn)(un_ctx *ctx, inst *t, const un_kexec *ex, const char *label);

/* An instance of case k (random inputs from rng); false after a failed expectation. */
static bool inst_of_case(un_ctx *ctx, const kcase *k, un_rng *rng, inst *t) {
    un_op op;
    EXPECT_TRUE(un_op_from_name(k->op, &op));
    const un_op_spec *os = un_spec_op(S, op);
    un_param p[UN_MAX_PARAMS];
    un_shape sh[UN_MAX_INPUTS];
    int64_t range[UN_MAX_INPUTS];
    int n_in;
    EXPECT_TRUE(parse_params(os, k->params, p));
    case_shapes(k, os, p, &n_in, sh, range);
    return inst_make(ctx, op, p, n_in, sh, range, rng, t);
}

static int for_each_case(un_ctx *ctx, case_fn fn) {
    un_rng rng;
    un_rng_seed(&rng, 1234);
    int ran = 0;
    char label[160];
    for (int op = 0; op < UN_OP_COUNT; op++) {
        if (un_op_kind_of((un_op)op) != UN_OPK_REGULAR)
            continue;
        const un_op_spec *os = un_spec_op(S, (un_op)op);
        for (int e = 0; e < os->n_examples; e++) {
            const un_example *ex = &os->examples[e];
            inst t;
            if (!inst_make(ctx, (un_op)op, ex->params, ex->n_in, ex->in, ex->range, &rng, &t))
                continue;
            un_kexec kx = exec_default(UN_PREC_F64);
            snprintf(label, sizeof label, "%s example %d", os->name, e);
            fn(ctx, &t, &kx, label);
            inst_free(&t);
            ran++;
        }
    }
    for (size_t c = 0; c < sizeof extra_cases / sizeof extra_cases[0]; c++) {
        const kcase *k = &extra_cases[c];
        inst t;
        if (!inst_of_case(ctx, k, &rng, &t))
            continue;
        un_kexec kx = exec_default(UN_PREC_F64);
        kx.training = !k->eval_mode;
        snprintf(label, sizeof label, "%s [%s] %s%s", k->op, k->params, k->dims,
                 k->eval_mode ? " (eval mode)" : "");
        fn(ctx, &t, &kx, label);
        inst_free(&t);
        ran++;
    }
    return ran;
}

/* ---- forward against the reference ----------------------------------------------------------- */

static int n_fwd_cases;
static bool covered[UN_OP_COUNT];

static void fwd_case(un_ctx *ctx, inst *t, const un_kexec *ex, const char *label) {
    double **y = alloc_outs(t), **ref = alloc_outs(t);
    EXPECT_OK(ctx, inst_forward(ctx, t, ex, y));
    if (ex->training) {
        inst_reference(ctx, t, ref);
    } else { /* dropout in eval mode is the identity */
        memcpy(ref[0], t->x[0], sizeof(double) * (size_t)t->nout[0]);
    }
    for (int o = 0; o < t->n_out; o++)
        for (int64_t e = 0; e < t->nout[o]; e++)
            if (!close_to(y[o][e], ref[o][e], 1e-12)) {
                EXPECT_TRUE(!"f64 forward differs from the reference");
                printf("    %s: output %d [%lld]: %.17g vs reference %.17g\n", label, o,
                       (long long)e, y[o][e], ref[o][e]);
                break;
            }
    /* float32 against float64 */
    un_kt in[UN_MAX_INPUTS], out[UN_MAX_OUTPUTS];
    float *f32[UN_MAX_INPUTS] = {0}, *yf[UN_MAX_OUTPUTS] = {0};
    inst_inputs(t, UN_PREC_F32, f32, in);
    for (int o = 0; o < t->n_out; o++) {
        yf[o] = un_xcalloc((size_t)t->nout[o], sizeof(float));
        out[o] = kt_of(&t->inf.out[o], yf[o]);
    }
    un_kexec e32 = *ex;
    e32.prec = UN_PREC_F32;
    EXPECT_OK(ctx, un_kern_forward(ctx, &e32, t->op, t->inf.local, in, t->n_in, out, t->n_out));
    for (int o = 0; o < t->n_out; o++) {
        for (int64_t e = 0; e < t->nout[o]; e++)
            if (!close_to(yf[o][e], y[o][e], 1e-5)) {
                EXPECT_TRUE(!"f32 forward differs from f64");
                printf("    %s: output %d [%lld]: f32 %.9g vs f64 %.17g\n", label, o, (long long)e,
                       yf[o][e], y[o][e]);
                break;
            }
        free(yf[o]);
    }
    for (int i = 0; i < t->n_in; i++)
        free(f32[i]);
    free_outs(y);
    free_outs(ref);
    covered[t->op] = true;
    n_fwd_cases++;
}

static void test_forward_vs_reference(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    int ran = for_each_case(ctx, fwd_case);
    EXPECT_EQ(ran, n_fwd_cases);
    for (int op = 0; op < UN_OP_COUNT; op++)
        if (un_op_kind_of((un_op)op) == UN_OPK_REGULAR && !covered[op]) {
            EXPECT_TRUE(!"an operator has no forward case");
            printf("    %s not covered\n", un_op_name((un_op)op));
        }
    printf("    forward: %d cases (f64 vs reference, f32 vs f64), every regular op\n", ran);
    un_ctx_free(ctx);
}

/* ---- backward against finite differences ----------------------------------------------------- */

/* L = sum_o <r_o, y_o> for the current inputs. */
static double loss_of(un_ctx *ctx, const inst *t, const un_kexec *ex, double **r, double **y) {
    EXPECT_OK(ctx, inst_forward(ctx, t, ex, y));
    double l = 0;
    for (int o = 0; o < t->n_out; o++)
        for (int64_t e = 0; e < t->nout[o]; e++)
            l += r[o][e] * y[o][e];
    return l;
}

/* 4-point central difference of L in input i, element e. */
static double numeric_grad(un_ctx *ctx, inst *t, const un_kexec *ex, double **r, double **y, int i,
                           int64_t e) {
    const double h = 1e-5;
    double x0 = t->x[i][e], f[4];
    static const double off[4] = {-2, -1, 1, 2};
    for (int k = 0; k < 4; k++) {
        t->x[i][e] = x0 + off[k] * h;
        f[k] = loss_of(ctx, t, ex, r, y);
    }
    t->x[i][e] = x0;
    return (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * h);
}

/* Relative 1e-6, with an absolute floor of 1e-7: the 4-point difference of a loss summed over a
 * few thousand outputs carries about that much rounding (BLAS kernels differ in summation order
 * between machines). A planted error of 1e-4 stays far above it. */
static bool grad_close(double a, double n) {
    return fabs(a - n) <= 1e-6 * fmax(1e-1, fabs(a) + fabs(n));
}

/* The elements of an input the gradient check looks at: all of up to 48, else every step-th. */
static int64_t grad_step(int64_t n) { return n <= 48 ? 1 : n / 48 + 1; }

/* Finite differences of input i at the checked elements, into num[e / step]. */
static int grad_numeric(un_ctx *ctx, inst *t, const un_kexec *ex, double **r, double **y, int i,
                        double *num) {
    int k = 0;
    for (int64_t e = 0; e < t->n[i]; e += grad_step(t->n[i]))
        num[k++] = numeric_grad(ctx, t, ex, r, y, i, e);
    return k;
}

/* Compares analytic gradient g (of input i) with the finite differences num; returns the
 * elements that differ (printing the first unless quiet). */
static int grad_compare(const inst *t, int i, const double *g, const double *num, const char *label,
                        bool quiet) {
    int bad = 0, k = 0;
    for (int64_t e = 0; e < t->n[i]; e += grad_step(t->n[i]), k++)
        if (!grad_close(g[e], num[k])) {
            if (!bad && !quiet)
                printf("    %s: d input %d [%lld]: analytic %.12g vs numeric %.12g\n", label, i,
                       (long long)e, g[e], num[k]);
            bad++;
        }
    return bad;
}

static void grad_case(un_ctx *ctx, inst *t, const un_kexec *ex, const char *label) {
    un_rng rng;
    un_rng_seed(&rng, 99);
    double **r = alloc_outs(t), **y = alloc_outs(t);
    for (int o = 0; o < t->n_out; o++)
        for (int64_t e = 0; e < t->nout[o]; e++)
            r[o][e] = 2 * un_rng_double(&rng) - 1;
    /* analytic: din starts from a random base, so this also checks din += ... */
    double *base[UN_MAX_INPUTS] = {0}, *g[UN_MAX_INPUTS] = {0};
    un_kt in[UN_MAX_INPUTS], out[UN_MAX_OUTPUTS], dout[UN_MAX_OUTPUTS], din[UN_MAX_INPUTS];
    EXPECT_OK(ctx, inst_forward(ctx, t, ex, y));
    inst_inputs(t, UN_PREC_F64, NULL, in);
    for (int o = 0; o < t->n_out; o++) {
        out[o] = kt_of(&t->inf.out[o], y[o]);
        dout[o] = kt_of(&t->inf.out[o], r[o]);
    }
    for (int i = 0; i < t->n_in; i++) {
        din[i] = kt_of(&t->in_shape[i], NULL);
        if (!t->x[i])
            continue;
        base[i] = un_xmalloc(sizeof(double) * (size_t)t->n[i]);
        g[i] = un_xmalloc(sizeof(double) * (size_t)t->n[i]);
        for (int64_t e = 0; e < t->n[i]; e++)
            g[i][e] = base[i][e] = 2 * un_rng_double(&rng) - 1;
        din[i].data = g[i];
    }
    EXPECT_OK(
        ctx, un_kern_backward(ctx, ex, t->op, t->inf.local, in, t->n_in, out, t->n_out, dout, din));
    for (int i = 0; i < t->n_in; i++) {
        if (!t->x[i])
            continue;
        for (int64_t e = 0; e < t->n[i]; e++)
            g[i][e] -= base[i][e];
        double num[64];
        int checked = grad_numeric(ctx, t, ex, r, y, i, num);
        int bad = grad_compare(t, i, g[i], num, label, false);
        EXPECT_EQ(bad, 0);
        n_grad_inputs++;
        n_grad_elems += checked;
        /* a planted wrong gradient must be caught */
        int64_t at = (int64_t)un_rng_below(&rng, (uint64_t)t->n[i]);
        at -= at % grad_step(t->n[i]); /* an element the check looks at */
        g[i][at] += 1e-4 * (1 + fabs(g[i][at]));
        int bad2 = grad_compare(t, i, g[i], num, label, true);
        EXPECT_TRUE(bad2 > 0);
        n_planted_caught += bad2 > 0;
    }
    for (int i = 0; i < t->n_in; i++) {
        free(base[i]);
        free(g[i]);
    }
    free_outs(r);
    free_outs(y);
    n_grad_cases++;
}

static void test_backward_vs_finite_differences(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    for_each_case(ctx, grad_case);
    printf("    gradient checks: %d op/variant cases, %d inputs, %d elements (f64, 4-point "
           "differences, rel 1e-6); planted wrong gradients caught: %d of %d\n",
           n_grad_cases, n_grad_inputs, n_grad_elems, n_planted_caught, n_grad_inputs);
    EXPECT_TRUE(n_grad_cases >= 60);
    un_ctx_free(ctx);
}

/* ---- float32 backward against float64 -------------------------------------------------------- */

static void bwd32_case(un_ctx *ctx, inst *t, const un_kexec *ex, const char *label) {
    un_rng rng;
    un_rng_seed(&rng, 5);
    double **y = alloc_outs(t), **r = alloc_outs(t);
    float *f32[UN_MAX_INPUTS] = {0}, *yf[UN_MAX_OUTPUTS] = {0}, *rf[UN_MAX_OUTPUTS] = {0},
          *gf[UN_MAX_INPUTS] = {0};
    double *g[UN_MAX_INPUTS] = {0};
    un_kt in[UN_MAX_INPUTS], in32[UN_MAX_INPUTS], out[UN_MAX_OUTPUTS], out32[UN_MAX_OUTPUTS],
        dout[UN_MAX_OUTPUTS], dout32[UN_MAX_OUTPUTS], din[UN_MAX_INPUTS], din32[UN_MAX_INPUTS];
    EXPECT_OK(ctx, inst_forward(ctx, t, ex, y));
    inst_inputs(t, UN_PREC_F64, NULL, in);
    inst_inputs(t, UN_PREC_F32, f32, in32);
    for (int o = 0; o < t->n_out; o++) {
        yf[o] = un_xmalloc(sizeof(float) * (size_t)t->nout[o]);
        rf[o] = un_xmalloc(sizeof(float) * (size_t)t->nout[o]);
        for (int64_t e = 0; e < t->nout[o]; e++) {
            r[o][e] = 2 * un_rng_double(&rng) - 1;
            rf[o][e] = (float)r[o][e];
            yf[o][e] = (float)y[o][e];
        }
        out[o] = kt_of(&t->inf.out[o], y[o]);
        out32[o] = kt_of(&t->inf.out[o], yf[o]);
        dout[o] = kt_of(&t->inf.out[o], r[o]);
        dout32[o] = kt_of(&t->inf.out[o], rf[o]);
    }
    for (int i = 0; i < t->n_in; i++) {
        din[i] = din32[i] = kt_of(&t->in_shape[i], NULL);
        if (t->x[i]) {
            din[i].data = g[i] = un_xcalloc((size_t)t->n[i], sizeof(double));
            din32[i].data = gf[i] = un_xcalloc((size_t)t->n[i], sizeof(float));
        }
    }
    un_kexec e32 = *ex;
    e32.prec = UN_PREC_F32;
    EXPECT_OK(
        ctx, un_kern_backward(ctx, ex, t->op, t->inf.local, in, t->n_in, out, t->n_out, dout, din));
    EXPECT_OK(ctx, un_kern_backward(ctx, &e32, t->op, t->inf.local, in32, t->n_in, out32, t->n_out,
                                    dout32, din32));
    for (int i = 0; i < t->n_in; i++) {
        for (int64_t e = 0; g[i] && e < t->n[i]; e++)
            if (!close_to(gf[i][e], g[i][e], 1e-4)) {
                EXPECT_TRUE(!"f32 backward differs from f64");
                printf("    %s: d input %d [%lld]: f32 %.9g vs f64 %.17g\n", label, i, (long long)e,
                       gf[i][e], g[i][e]);
                break;
            }
        free(f32[i]);
        free(gf[i]);
        free(g[i]);
    }
    for (int o = 0; o < t->n_out; o++) {
        free(yf[o]);
        free(rf[o]);
    }
    free_outs(y);
    free_outs(r);
}

static void test_backward_f32(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    for_each_case(ctx, bwd32_case);
    un_ctx_free(ctx);
}

/* ---- specific semantics ---------------------------------------------------------------------- */

/* ---- random shapes --------------------------------------------------------------------------- */

static int64_t rnd(un_rng *r, int64_t lo, int64_t hi) { /* in [lo, hi] */
    return lo + (int64_t)un_rng_below(r, (uint64_t)(hi - lo + 1));
}

/* A random well-formed instance of op: params text and dims text (as in extra_cases). */
static void random_case(un_op op, un_rng *r, char *params, char *dims, size_t n) {
    static const char *const acts[] = {"none", "relu", "sigmoid", "tanh", "gelu"};
    int64_t a = rnd(r, 1, 4), b = rnd(r, 1, 4), c = rnd(r, 1, 5), d = rnd(r, 1, 4);
    params[0] = 0;
    switch (op) {
    case UN_OP_LINEAR: {
        bool bias = rnd(r, 0, 1);
        snprintf(params, n, "activation=%s use_bias=%s", acts[rnd(r, 0, 4)],
                 bias ? "true" : "false");
        snprintf(dims, n, "%lld,%lld,%lld;%lld,%lld", (long long)a, (long long)b, (long long)c,
                 (long long)c, (long long)d);
        if (bias)
            snprintf(dims + strlen(dims), n - strlen(dims), ";%lld", (long long)d);
        break;
    }
    case UN_OP_BATCH_MATMUL:
        snprintf(dims, n, "%lld,%lld,%lld;%lld,%lld,%lld", (long long)a, (long long)b, (long long)c,
                 (long long)a, (long long)c, (long long)d);
        break;
    case UN_OP_CONV2D: {
        int64_t g = rnd(r, 1, 2), kh = rnd(r, 1, 3), kw = rnd(r, 1, 3), ph = rnd(r, 0, 1),
                pw = rnd(r, 0, 1), h = kh + rnd(r, 0, 3), w = kw + rnd(r, 0, 3);
        bool bias = rnd(r, 0, 1);
        snprintf(params, n,
                 "stride_h=%lld stride_w=%lld pad_h=%lld pad_w=%lld groups=%lld activation=%s "
                 "use_bias=%s",
                 (long long)rnd(r, 1, 2), (long long)rnd(r, 1, 2), (long long)ph, (long long)pw,
                 (long long)g, rnd(r, 0, 1) ? "relu" : "none", bias ? "true" : "false");
        int64_t cin = g * rnd(r, 1, 2), cout = g * rnd(r, 1, 2);
        snprintf(dims, n, "%lld,%lld,%lld,%lld;%lld,%lld,%lld,%lld", (long long)rnd(r, 1, 2),
                 (long long)cin, (long long)h, (long long)w, (long long)cout, (long long)(cin / g),
                 (long long)kh, (long long)kw);
        if (bias)
            snprintf(dims + strlen(dims), n - strlen(dims), ";%lld", (long long)cout);
        break;
    }
    case UN_OP_POOL2D: {
        int64_t kh = rnd(r, 1, 3), kw = rnd(r, 1, 3);
        snprintf(params, n,
                 "type=%s kernel_h=%lld kernel_w=%lld stride_h=%lld stride_w=%lld pad_h=%lld "
                 "pad_w=%lld",
                 rnd(r, 0, 1) ? "avg" : "max", (long long)kh, (long long)kw,
                 (long long)rnd(r, 1, 2), (long long)rnd(r, 1, 2), (long long)rnd(r, 0, kh / 2),
                 (long long)rnd(r, 0, kw / 2));
        snprintf(dims, n, "%lld,%lld,%lld,%lld", (long long)a, (long long)b,
                 (long long)(kh + rnd(r, 0, 3)), (long long)(kw + rnd(r, 0, 3)));
        break;
    }
    case UN_OP_SOFTMAX:
        snprintf(params, n, "dim=%lld", (long long)rnd(r, -3, 2));
        snprintf(dims, n, "%lld,%lld,%lld", (long long)a, (long long)b, (long long)c);
        break;
    case UN_OP_REDUCE_SUM:
    case UN_OP_REDUCE_MEAN:
        snprintf(params, n, "dim=%lld keep=%s", (long long)rnd(r, -3, 2),
                 rnd(r, 0, 1) ? "true" : "false");
        snprintf(dims, n, "%lld,%lld,%lld", (long long)a, (long long)b, (long long)c);
        break;
    case UN_OP_TRANSPOSE:
        snprintf(params, n, "dim0=%lld dim1=%lld", (long long)rnd(r, 0, 3),
                 (long long)rnd(r, 0, 3));
        snprintf(dims, n, "%lld,%lld,%lld,%lld", (long long)a, (long long)b, (long long)c,
                 (long long)d);
        break;
    case UN_OP_CONCAT: {
        int64_t ax = rnd(r, 0, 2), e[3] = {a, b, c};
        snprintf(params, n, "axis=%lld", (long long)ax);
        e[ax] = d;
        snprintf(dims, n, "%lld,%lld,%lld;%lld,%lld,%lld", (long long)a, (long long)b, (long long)c,
                 (long long)e[0], (long long)e[1], (long long)e[2]);
        break;
    }
    case UN_OP_LAYER_NORM:
        snprintf(dims, n, "%lld,%lld,%lld;%lld;%lld", (long long)a, (long long)b,
                 (long long)(c + 1), (long long)(c + 1), (long long)(c + 1));
        break;
    case UN_OP_BATCH_NORM:
        snprintf(dims, n, "%lld,%lld,%lld,%lld;%lld;%lld", (long long)(a + 1), (long long)b,
                 (long long)c, (long long)d, (long long)b, (long long)b);
        break;
    case UN_OP_MULTIHEAD_ATTENTION: {
        int64_t heads = rnd(r, 1, 3), e = heads * rnd(r, 1, 2);
        snprintf(params, n, "heads=%lld", (long long)heads);
        snprintf(
            dims, n,
            "%lld,%lld,%lld;%lld,%lld,%lld;%lld,%lld,%lld;%lld,%lld;%lld,%lld;%lld,%lld;%lld,%lld",
            (long long)a, (long long)b, (long long)e, (long long)a, (long long)c, (long long)e,
            (long long)a, (long long)c, (long long)e, (long long)e, (long long)e, (long long)e,
            (long long)e, (long long)e, (long long)e, (long long)e, (long long)e);
        break;
    }
    case UN_OP_EMBEDDING:
        snprintf(params, n, "aggr=%s", rnd(r, 0, 1) ? "mean" : "sum");
        snprintf(dims, n, "%lld,%lld;%lld,%lld", (long long)a, (long long)b, (long long)c,
                 (long long)d);
        break;
    case UN_OP_CROSS_ENTROPY:
        snprintf(dims, n, "%lld,%lld;%lld", (long long)a, (long long)(b + 1), (long long)a);
        break;
    case UN_OP_SPLIT: {
        int64_t s0 = rnd(r, 1, 3), s1 = rnd(r, 1, 3);
        snprintf(params, n, "axis=1 sizes=[%lld,%lld]", (long long)s0, (long long)s1);
        snprintf(dims, n, "%lld,%lld,%lld", (long long)a, (long long)(s0 + s1), (long long)c);
        break;
    }
    case UN_OP_RESHAPE:
        snprintf(params, n, "shape=[%lld,%lld]", (long long)(a * c), (long long)b);
        snprintf(dims, n, "%lld,%lld,%lld", (long long)a, (long long)b, (long long)c);
        break;
    case UN_OP_SCALAR_MUL:
        snprintf(params, n, "num=%lld den=%lld", (long long)rnd(r, -9, 9), (long long)rnd(r, 1, 9));
        snprintf(dims, n, "%lld,%lld", (long long)a, (long long)b);
        break;
    case UN_OP_DROPOUT:
        snprintf(params, n, "rate_pct=%lld seed=%lld", (long long)rnd(r, 0, 99),
                 (long long)rnd(r, 0, 1000));
        snprintf(dims, n, "%lld,%lld", (long long)a, (long long)c);
        break;
    case UN_OP_EW_ADD:
    case UN_OP_EW_SUB:
    case UN_OP_EW_MUL:
        snprintf(dims, n, "%lld,%lld;%lld,%lld", (long long)a, (long long)c, (long long)a,
                 (long long)c);
        break;
    default: /* unary ops */
        snprintf(dims, n, "%lld,%lld,%lld", (long long)a, (long long)b, (long long)c);
        break;
    }
}

/* Three random instances of every regular op: forward vs the reference, backward vs finite
 * differences. */
static void test_random_shapes(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rng rng, data;
    un_rng_seed(&rng, 2024);
    un_rng_seed(&data, 4048);
    int before_f = n_fwd_cases, before_g = n_grad_cases;
    for (int op = 0; op < UN_OP_COUNT; op++) {
        if (un_op_kind_of((un_op)op) != UN_OPK_REGULAR)
            continue;
        const un_op_spec *os = un_spec_op(S, (un_op)op);
        for (int rep = 0; rep < 3; rep++) {
            char params[256], dims[256], label[600];
            random_case((un_op)op, &rng, params, dims, sizeof params);
            kcase k = {os->name, params, dims, false};
            un_param p[UN_MAX_PARAMS];
            un_shape sh[UN_MAX_INPUTS];
            int64_t range[UN_MAX_INPUTS];
            int n_in;
            EXPECT_TRUE(parse_params(os, params, p));
            case_shapes(&k, os, p, &n_in, sh, range);
            inst t;
            snprintf(label, sizeof label, "%s [%s] %s", os->name, params, dims);
            if (!inst_make(ctx, (un_op)op, p, n_in, sh, range, &data, &t)) {
                printf("    %s: refused by the spec\n", label);
                continue;
            }
            un_kexec ex = exec_default(UN_PREC_F64);
            fwd_case(ctx, &t, &ex, label);
            grad_case(ctx, &t, &ex, label);
            inst_free(&t);
        }
    }
    printf("    random shapes: %d forward and %d gradient cases\n", n_fwd_cases - before_f,
           n_grad_cases - before_g);
    un_ctx_free(ctx);
}

/* Shapes big enough for OpenBLAS's blocked and threaded paths: forward vs the reference and f32,
 * backward vs finite differences at sampled elements. */
static void test_larger_shapes(void) {
    static const kcase big[] = {
        {"linear", "activation=gelu use_bias=true", "3,40,300;300,130;130", false},
        {"batch_matmul", "", "3,70,90;3,90,110", false},
        {"conv2d", "stride_h=2 pad_h=1 pad_w=1 use_bias=true groups=2", "2,8,19,17;12,4,3,3;12",
         false},
        {"multihead_attention", "heads=4", "2,33,32;2,41,32;2,41,32;32,32;32,32;32,32;32,32",
         false},
    };
    un_ctx *ctx = un_ctx_new(NULL);
    un_rng rng;
    un_rng_seed(&rng, 77);
    for (size_t c = 0; c < sizeof big / sizeof big[0]; c++) {
        inst t;
        if (!inst_of_case(ctx, &big[c], &rng, &t))
            continue;
        un_kexec ex = exec_default(UN_PREC_F64);
        fwd_case(ctx, &t, &ex, big[c].op);
        grad_case(ctx, &t, &ex, big[c].op);
        inst_free(&t);
    }
    un_ctx_free(ctx);
}

static void test_param_names_match_spec(void) {
    for (int op = 0; op < UN_OP_COUNT; op++) {
        EXPECT_EQ(un_kern_supports((un_op)op), un_op_kind_of((un_op)op) == UN_OPK_REGULAR);
        if (!un_kern_supports((un_op)op))
            continue;
        const un_op_spec *os = un_spec_op(S, (un_op)op);
        const char *const *names = un_kern_param_names((un_op)op);
        int n = 0;
        for (; names[n]; n++)
            EXPECT_STR_EQ(names[n], n < os->n_params ? os->params[n].name : NULL);
        EXPECT_EQ(n, os->n_params);
    }
}

/* A gradient that is not wanted stays untouched, a NULL output gradient adds nothing, and split's
 * outputs with a NULL gradient contribute nothing. */
static void test_absent_gradients(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_kexec ex = exec_default(UN_PREC_F64);
    double x[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 0, 0, 1, 1, 1}, y[4], dy[4] = {1, 1, 1, 1};
    double dx[6] = {7, 7, 7, 7, 7, 7}, dw[6] = {0};
    un_param p[UN_MAX_PARAMS];
    un_spec_param_defaults(un_spec_op(S, UN_OP_LINEAR), p);
    un_kt in[2] = {{UN_DT_FLOAT, 2, {2, 3}, x}, {UN_DT_FLOAT, 2, {3, 2}, w}};
    un_kt out = {UN_DT_FLOAT, 2, {2, 2}, y}, dout = {UN_DT_FLOAT, 2, {2, 2}, NULL};
    un_kt din[2] = {{UN_DT_FLOAT, 2, {2, 3}, dx}, {UN_DT_FLOAT, 2, {3, 2}, NULL}};
    EXPECT_OK(ctx, un_kern_forward(ctx, &ex, UN_OP_LINEAR, p, in, 2, &out, 1));
    EXPECT_NEAR(y[0], 1 + 3, 0);
    EXPECT_NEAR(y[1], 2 + 3, 0);
    EXPECT_OK(ctx, un_kern_backward(ctx, &ex, UN_OP_LINEAR, p, in, 2, &out, 1, &dout, din));
    EXPECT_NEAR(dx[0], 7, 0); /* dout NULL: zero gradient */
    dout.data = dy;
    EXPECT_OK(ctx, un_kern_backward(ctx, &ex, UN_OP_LINEAR, p, in, 2, &out, 1, &dout, din));
    EXPECT_NEAR(dx[0], 7 + 1, 0); /* dx = dy W^T: row 0 of W sums to 1 */
    EXPECT_NEAR(dx[2], 7 + 2, 0);
    EXPECT_NEAR(dw[0], 0, 0); /* not wanted, not touched */
    /* twice accumulates twice */
    din[1].data = dw;
    EXPECT_OK(ctx, un_kern_backward(ctx, &ex, UN_OP_LINEAR, p, in, 2, &out, 1, &dout, din));
    EXPECT_OK(ctx, un_kern_backward(ctx, &ex, UN_OP_LINEAR, p, in, 2, &out, 1, &dout, din));
    EXPECT_NEAR(dw[0], 2 * (1 + 4), 0);
    EXPECT_NEAR(dx[0], 7 + 3, 0);

    /* split: only output 1 has a gradient */
    un_spec_param_defaults(un_spec_op(S, UN_OP_SPLIT), p);
    p[1].len = 2, p[1].v[0] = 1, p[1].v[1] = 2; /* axis 0, sizes [1, 2] */
    double s[6] = {1, 2, 3, 4, 5, 6}, o0[2], o1[4], d1[4] = {1, 2, 3, 4}, ds[6] = {0};
    un_kt sin = {UN_DT_FLOAT, 2, {3, 2}, s};
    un_kt sout[2] = {{UN_DT_FLOAT, 2, {1, 2}, o0}, {UN_DT_FLOAT, 2, {2, 2}, o1}};
    un_kt sdout[2] = {{UN_DT_FLOAT, 2, {1, 2}, NULL}, {UN_DT_FLOAT, 2, {2, 2}, d1}};
    un_kt sdin = {UN_DT_FLOAT, 2, {3, 2}, ds};
    EXPECT_OK(ctx, un_kern_forward(ctx, &ex, UN_OP_SPLIT, p, &sin, 1, sout, 2));
    EXPECT_NEAR(o1[0], 3, 0);
    EXPECT_OK(ctx, un_kern_backward(ctx, &ex, UN_OP_SPLIT, p, &sin, 1, sout, 2, sdout, &sdin));
    EXPECT_NEAR(ds[0], 0, 0);
    EXPECT_NEAR(ds[1], 0, 0);
    EXPECT_NEAR(ds[2], 1, 0);
    EXPECT_NEAR(ds[5], 4, 0);
    un_ctx_free(ctx);
}

/* conv2d with the activations beyond the spec's none/relu (the kernels share linear's list):
 * act(conv) equals the unary op applied to the plain conv, and the gradient (whose gelu form
 * recomputes the pre-activations) matches finite differences. */
static void test_conv2d_all_activations(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rng rng;
    un_rng_seed(&rng, 31);
    static const un_op unary[] = {UN_OP_RELU, UN_OP_SIGMOID, UN_OP_TANH, UN_OP_GELU};
    const un_op_spec *os = un_spec_op(S, UN_OP_CONV2D);
    int act_at = un_spec_param_index(os, "activation");
    un_param p[UN_MAX_PARAMS];
    EXPECT_TRUE(parse_params(os, "stride_h=2 pad_w=1 use_bias=true groups=2", p));
    un_shape sh[3] = {un_shape_make(4, (int64_t[]){2, 4, 5, 4}, UN_DT_FLOAT),
                      un_shape_make(4, (int64_t[]){4, 2, 3, 2}, UN_DT_FLOAT),
                      un_shape_make(1, (int64_t[]){4}, UN_DT_FLOAT)};
    int64_t range[3] = {0};
    inst t;
    if (!inst_make(ctx, UN_OP_CONV2D, p, 3, sh, range, &rng, &t)) {
        un_ctx_free(ctx);
        return;
    }
    un_kexec ex = exec_default(UN_PREC_F64);
    double **plain = alloc_outs(&t), **y = alloc_outs(&t), **z = alloc_outs(&t);
    EXPECT_OK(ctx, inst_forward(ctx, &t, &ex, plain));
    for (int a = 1; a <= 4; a++) {
        t.inf.local[act_at].v[0] = a;
        EXPECT_OK(ctx, inst_forward(ctx, &t, &ex, y));
        un_kt ui = kt_of(&t.inf.out[0], plain[0]), uo = kt_of(&t.inf.out[0], z[0]);
        EXPECT_OK(ctx, un_kern_forward(ctx, &ex, unary[a - 1], NULL, &ui, 1, &uo, 1));
        for (int64_t e = 0; e < t.nout[0]; e++)
            EXPECT_TRUE(close_to(y[0][e], z[0][e], 1e-14));
        char label[64];
        snprintf(label, sizeof label, "conv2d activation %d", a);
        grad_case(ctx, &t, &ex, label);
    }
    free_outs(plain);
    free_outs(y);
    free_outs(z);
    inst_free(&t);
    un_ctx_free(ctx);
}

/* Inputs given twice (x * x, self-attention) with one shared gradient buffer get the sum of both
 * contributions. */
static void test_aliased_inputs(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_kexec ex = exec_default(UN_PREC_F64);
    double x[3] = {1, -2, 3}, y[3], dy[3] = {1, 1, 2}, dx[3] = {0};
    un_kt in[2] = {{UN_DT_FLOAT, 1, {3}, x}, {UN_DT_FLOAT, 1, {3}, x}};
    un_kt out = {UN_DT_FLOAT, 1, {3}, y}, dout = {UN_DT_FLOAT, 1, {3}, dy};
    un_kt din[2] = {{UN_DT_FLOAT, 1, {3}, dx}, {UN_DT_FLOAT, 1, {3}, dx}};
    EXPECT_OK(ctx, un_kern_forward(ctx, &ex, UN_OP_EW_MUL, NULL, in, 2, &out, 1));
    EXPECT_OK(ctx, un_kern_backward(ctx, &ex, UN_OP_EW_MUL, NULL, in, 2, &out, 1, &dout, din));
    for (int i = 0; i < 3; i++)
        EXPECT_NEAR(dx[i], 2 * x[i] * dy[i], 0);
    /* self-attention: q = k = v; the shared gradient equals the sum of the three separate ones */
    un_param p[UN_MAX_PARAMS];
    un_spec_param_defaults(un_spec_op(S, UN_OP_MULTIHEAD_ATTENTION), p);
    p[0].v[0] = 2;
    un_rng rng;
    un_rng_seed(&rng, 17);
    double q[2 * 3 * 4], w[4][16], o[2 * 3 * 4], d[2 * 3 * 4], g[3][24] = {{0}}, gs[24] = {0};
    for (int i = 0; i < 24; i++)
        q[i] = 2 * un_rng_double(&rng) - 1, d[i] = 2 * un_rng_double(&rng) - 1;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 16; i++)
            w[k][i] = 2 * un_rng_double(&rng) - 1;
    un_kt m[7], mg[7], ms[7];
    for (int i = 0; i < 7; i++) {
        m[i] = i < 3 ? (un_kt){UN_DT_FLOAT, 3, {2, 3, 4}, q}
                     : (un_kt){UN_DT_FLOAT, 2, {4, 4}, w[i - 3]};
        mg[i] = ms[i] = m[i];
        mg[i].data = i < 3 ? g[i] : NULL;
        ms[i].data = i < 3 ? gs : NULL;
    }
    un_kt mo = {UN_DT_FLOAT, 3, {2, 3, 4}, o}, md = {UN_DT_FLOAT, 3, {2, 3, 4}, d};
    EXPECT_OK(ctx, un_kern_forward(ctx, &ex, UN_OP_MULTIHEAD_ATTENTION, p, m, 7, &mo, 1));
    EXPECT_OK(ctx, un_kern_backward(ctx, &ex, UN_OP_MULTIHEAD_ATTENTION, p, m, 7, &mo, 1, &md, mg));
    EXPECT_OK(ctx, un_kern_backward(ctx, &ex, UN_OP_MULTIHEAD_ATTENTION, p, m, 7, &mo, 1, &md, ms));
    for (int i = 0; i < 24; i++)
        EXPECT_NEAR(gs[i], g[0][i] + g[1][i] + g[2][i], 1e-14);
    un_ctx_free(ctx);
}

/* The same results with a thread pool as without, on tensors big enough to be split. */
static void test_threads_match(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_pool *pool = un_pool_new(4);
    static const kcase big[] = {
        {"gelu", "", "300,200", false},
        {"dropout", "rate_pct=20 seed=9", "300,200", false},
        {"softmax", "dim=0", "200,300", false},
        {"layer_norm", "", "200,300;300;300", false},
        {"batch_norm", "", "8,6,30,30;6;6", false},
        {"pool2d", "type=max kernel_h=2 kernel_w=2", "4,8,40,40", false},
        {"reduce_mean", "dim=0", "300,200", false},
        {"embedding", "aggr=mean", "200,8;50,64", false},
        {"cross_entropy", "", "300,100;300", false},
        {"ew_mul", "", "300,200;300,200", false},
        {"transpose", "dim0=0 dim1=2", "40,30,50", false},
        {"conv2d", "pad_h=1 pad_w=1", "2,16,20,20;16,16,3,3", false},
        {"reduce_sum", "dim=-1", "300,200", false},
        {"multihead_attention", "heads=2", "2,70,32;2,70,32;2,70,32;32,32;32,32;32,32;32,32",
         false},
        {"multihead_attention", "heads=4 causal=true",
         "3,90,32;3,90,32;3,90,32;32,32;32,32;32,32;32,32", false},
    };
    un_rng rng;
    un_rng_seed(&rng, 8);
    for (size_t c = 0; c < sizeof big / sizeof big[0]; c++) {
        inst t;
        if (!inst_of_case(ctx, &big[c], &rng, &t))
            continue;
        un_op op = t.op;
        int n_in = t.n_in;
        for (int prec = 0; prec < 2; prec++) {
            un_kexec e1 = exec_default((un_prec)prec), e4 = e1;
            e4.pool = pool;
            size_t esz = prec == UN_PREC_F32 ? sizeof(float) : sizeof(double);
            float *f32[UN_MAX_INPUTS] = {0};
            un_kt in[UN_MAX_INPUTS], o1 = kt_of(&t.inf.out[0], NULL), o4 = o1, d = o1;
            inst_inputs(&t, (un_prec)prec, f32, in);
            o1.data = un_xcalloc((size_t)t.nout[0], esz);
            o4.data = un_xcalloc((size_t)t.nout[0], esz);
            d.data = un_xcalloc((size_t)t.nout[0], esz);
            memset(d.data, 0x3f, (size_t)t.nout[0] * esz); /* some positive gradient */
            EXPECT_OK(ctx, un_kern_forward(ctx, &e1, op, t.inf.local, in, n_in, &o1, 1));
            EXPECT_OK(ctx, un_kern_forward(ctx, &e4, op, t.inf.local, in, n_in, &o4, 1));
            EXPECT_TRUE(memcmp(o1.data, o4.data, (size_t)t.nout[0] * esz) == 0);
            un_kt g1 = kt_of(&t.in_shape[0], un_xcalloc((size_t)t.n[0], esz)), g4 = g1;
            g4.data = un_xcalloc((size_t)t.n[0], esz);
            un_kt din1[UN_MAX_INPUTS], din4[UN_MAX_INPUTS];
            for (int i = 0; i < n_in; i++) {
                din1[i] = din4[i] = kt_of(&t.in_shape[i], NULL);
                if (i == 0 && t.x[0])
                    din1[0] = g1, din4[0] = g4;
            }
            EXPECT_OK(ctx, un_kern_backward(ctx, &e1, op, t.inf.local, in, n_in, &o1, 1, &d, din1));
            EXPECT_OK(ctx, un_kern_backward(ctx, &e4, op, t.inf.local, in, n_in, &o4, 1, &d, din4));
            EXPECT_TRUE(memcmp(g1.data, g4.data, (size_t)t.n[0] * esz) == 0);
            if (op == UN_OP_EMBEDDING) { /* the table's gradient, split by columns */
                din1[0].data = din4[0].data = NULL;
                din1[1] = kt_of(&t.in_shape[1], un_xcalloc((size_t)t.n[1], esz));
                din4[1] = kt_of(&t.in_shape[1], un_xcalloc((size_t)t.n[1], esz));
                EXPECT_OK(ctx,
                          un_kern_backward(ctx, &e1, op, t.inf.local, in, n_in, &o1, 1, &d, din1));
                EXPECT_OK(ctx,
                          un_kern_backward(ctx, &e4, op, t.inf.local, in, n_in, &o4, 1, &d, din4));
                EXPECT_TRUE(memcmp(din1[1].data, din4[1].data, (size_t)t.n[1] * esz) == 0);
                free(din1[1].data);
                free(din4[1].data);
            }
            free(g1.data);
            free(g4.data);
            free(o1.data);
            free(o4.data);
            free(d.data);
            for (int i = 0; i < n_in; i++)
                free(f32[i]);
        }
        inst_free(&t);
    }
    un_pool_free(pool);
    un_ctx_free(ctx);
}

/* Forward then backward of t with ex: the output into y, every float input's gradient into g[i]
 * (from a varying positive gradient); `change` adds 0.25 to input 0's last value between the
 * two (a causal attention's last query sees every key). */
static void stash_run(un_ctx *ctx, const inst *t, const un_kexec *ex, bool fwd, bool change,
                      void *y, void **g) {
    size_t esz = ex->prec == UN_PREC_F32 ? sizeof(float) : sizeof(double);
    float *f32[UN_MAX_INPUTS] = {0};
    un_kt in[UN_MAX_INPUTS], din[UN_MAX_INPUTS], out = kt_of(&t->inf.out[0], y), d = out;
    inst_inputs(t, ex->prec, f32, in);
    d.data = un_xmalloc((size_t)t->nout[0] * esz);
    for (int64_t e = 0; e < t->nout[0]; e++)
        if (ex->prec == UN_PREC_F32)
            ((float *)d.data)[e] = 1.0f + (float)(e % 7) / 8;
        else
            ((double *)d.data)[e] = 1.0 + (double)(e % 7) / 8;
    int64_t last = t->n[0] - 1;
    double x0 = t->x[0][last];
    if (fwd)
        EXPECT_OK(ctx, un_kern_forward(ctx, ex, t->op, t->inf.local, in, t->n_in, &out, 1));
    if (change) {
        if (ex->prec == UN_PREC_F32)
            f32[0][last] += 0.25f;
        else
            t->x[0][last] += 0.25;
    }
    for (int i = 0; i < t->n_in; i++) {
        memset(g[i], 0, (size_t)t->n[i] * esz);
        din[i] = kt_of(&t->in_shape[i], g[i]);
    }
    EXPECT_OK(ctx, un_kern_backward(ctx, ex, t->op, t->inf.local, in, t->n_in, &out, 1, &d, din));
    t->x[0][last] = x0;
    free(d.data);
    for (int i = 0; i < t->n_in; i++)
        free(f32[i]);
}

/* Scratch (un_kern_scratch_bytes): the most bytes a call holds at once through ctx's allocator,
 * counted by a context whose allocator keeps the live and the peak bytes. */
typedef struct scratch_count {
    _Atomic size_t live, peak;
} scratch_count;

static void *count_malloc(size_t n, void *user) {
    scratch_count *c = user;
    size_t *p = malloc(n + 16);
    if (!p)
        return NULL;
    p[0] = n;
    size_t live = atomic_fetch_add(&c->live, n) + n, peak = atomic_load(&c->peak);
    while (live > peak && !atomic_compare_exchange_weak(&c->peak, &peak, live))
        ;
    return (char *)p + 16;
}

static void count_free(void *q, void *user) {
    scratch_count *c = user;
    size_t *p = (size_t *)(void *)((char *)q - 16);
    atomic_fetch_sub(&c->live, p[0]);
    free(p);
}

static void *count_realloc(void *q, size_t n, void *user) {
    void *r = count_malloc(n, user);
    if (r && q) {
        size_t old = ((size_t *)(void *)((char *)q - 16))[0];
        memcpy(r, q, old < n ? old : n);
        count_free(q, user);
    }
    return r;
}

/* Every op with kernel scratch (linear with each activation kind, conv2d with and without
 * activation and groups, layer_norm, cross- and self-attention of one and several query blocks),
 * float32 and float64, on 1 and 2 threads, with and without a stash: a forward, then a backward
 * with every input gradient (and conv2d also without the gradient of its input x, as the runtime
 * calls a model's first conv); the peak of each call's scratch is what un_kern_scratch_bytes says
 * of the backward, and the forward's at most that; ops without scratch take none. */
static void test_scratch(void) {
    scratch_count cnt = {0};
    un_ctx_params cp = un_ctx_params_default();
    cp.alloc = (un_alloc){count_malloc, count_realloc, count_free, &cnt};
    un_ctx *ctx = un_ctx_new(&cp);
    un_pool *pool = un_pool_new(2);
    static const kcase cases[] = {
        {"linear", "activation=relu use_bias=true", "3,40,30;30,50;50", false},
        {"linear", "activation=gelu", "40,30;30,50", false},
        {"linear", "activation=tanh", "40,30;30,50", false},
        {"linear", "activation=none", "40,30;30,50", false},
        {"conv2d", "stride_h=2 stride_w=1 pad_h=1 pad_w=2 activation=relu use_bias=true",
         "2,3,9,8;4,3,3,3;4", false},
        {"conv2d", "groups=2", "2,4,6,5;6,2,2,3", false},
        {"layer_norm", "", "2,70,30;30;30", false},
        {"multihead_attention", "heads=2", "2,300,32;2,200,32;2,200,32;32,32;32,32;32,32;32,32",
         false},
        {"multihead_attention", "heads=4 causal=true",
         "2,30,32;2,30,32;2,30,32;32,32;32,32;32,32;32,32", false}, /* run as self-attention */
        {"relu", "", "17", false},
        {"softmax", "dim=1", "3,4,5", false},
    };
    un_rng rng;
    un_rng_seed(&rng, 12);
    int n_checked = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        inst t;
        if (!inst_of_case(ctx, &cases[k], &rng, &t))
            continue;
        int n_in = t.n_in;
        bool self = t.op == UN_OP_MULTIHEAD_ATTENTION && k == 8;
        for (int prec = 0; prec < 2; prec++)
            for (int th = 0; th < 2; th++)
                for (int sg = 0; sg < (t.op == UN_OP_CONV2D ? 4 : 2); sg++) {
                    int stash = sg & 1;
                    bool grads[UN_MAX_INPUTS]; /* sg >= 2: no gradient for input 0 */
                    size_t esz = prec == UN_PREC_F32 ? sizeof(float) : sizeof(double);
                    un_kexec ex = exec_default((un_prec)prec);
                    ex.pool = th ? pool : NULL;
                    ex.stash = stash ? un_kstash_new() : NULL;
                    float *f32[UN_MAX_INPUTS] = {0};
                    void *g[UN_MAX_INPUTS];
                    un_kt in[UN_MAX_INPUTS], din[UN_MAX_INPUTS];
                    inst_inputs(&t, (un_prec)prec, f32, in);
                    if (self)
                        in[1].data = in[2].data = in[0].data;
                    un_kt out = kt_of(&t.inf.out[0], un_xcalloc((size_t)t.nout[0], esz)),
                          d = kt_of(&t.inf.out[0], un_xcalloc((size_t)t.nout[0], esz));
                    for (int i = 0; i < n_in; i++) {
                        g[i] = un_xcalloc((size_t)t.n[i], esz);
                        grads[i] = t.in_shape[i].dtype != UN_DT_INT && !(i == 0 && sg >= 2);
                        din[i] = kt_of(&t.in_shape[i], grads[i] ? g[i] : NULL);
                    }
                    atomic_store(&cnt.peak, 0);
                    EXPECT_OK(ctx, un_kern_forward(ctx, &ex, t.op, t.inf.local, in, n_in, &out, 1));
                    size_t fwd = atomic_load(&cnt.peak);
                    atomic_store(&cnt.peak, 0);
                    EXPECT_OK(ctx, un_kern_backward(ctx, &ex, t.op, t.inf.local, in, n_in, &out, 1,
                                                    &d, din));
                    size_t bwd = atomic_load(&cnt.peak);
                    size_t want = un_kern_scratch_bytes((un_prec)prec, t.op, t.inf.local, in, n_in,
                                                        &out, grads, th ? 2 : 1, stash);
                    test__check(bwd == want && fwd <= want && atomic_load(&cnt.live) == 0, TEST__AT,
                                "%s %s (%s, %d threads, stash %d%s): scratch %zu / %zu, "
                                "un_kern_scratch_bytes %zu",
                                cases[k].op, cases[k].params, prec ? "f64" : "f32", th ? 2 : 1,
                                stash, sg >= 2 ? ", no dx" : "", fwd, bwd, want);
                    if (t.op == UN_OP_RELU || t.op == UN_OP_SOFTMAX)
                        EXPECT_EQ((long long)want, 0);
                    else if (!(stash &&
                               (t.op == UN_OP_LAYER_NORM || (t.op == UN_OP_LINEAR && k == 1))) &&
                             !(t.op == UN_OP_LINEAR && k == 3))
                        EXPECT_TRUE(want > 0);
                    n_checked++;
                    un_kstash_free(ex.stash);
                    free(out.data);
                    free(d.data);
                    for (int i = 0; i < n_in; i++) {
                        free(g[i]);
                        free(f32[i]);
                    }
                }
        inst_free(&t);
    }
    EXPECT_EQ(n_checked, (int)(sizeof cases / sizeof cases[0]) * 8 + 2 * 8); /* 2 convs */
    un_pool_free(pool);
    un_ctx_free(ctx);
}

/* The stash (kernels.h): a forward keeps gelu derivatives, attention's projections and
 * probabilities and layer_norm's row statistics; the backward from them gives the same bits as
 * recomputing, on 1 and 2 threads; inputs changed after the forward, or a backward without a
 * forward, recompute. */
static void test_stash(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_pool *pool = un_pool_new(2);
    static const kcase cases[] = {
        {"linear", "activation=gelu", "3,40,30;30,50", false},
        {"linear", "activation=gelu use_bias=true", "40,30;30,50;50", false},
        {"multihead_attention", "heads=2", "2,300,32;2,200,32;2,200,32;32,32;32,32;32,32;32,32",
         false}, /* several query blocks per head (mha_rows), the last one short; P kept (3.75x
                    the projections) */
        {"multihead_attention", "heads=4 causal=true",
         "2,300,32;2,300,32;2,300,32;32,32;32,32;32,32;32,32",
         false}, /* P not kept (9.4x the projections): the backward recomputes it per block */
        {"layer_norm", "", "2,70,30;30;30", false}, /* each row's mean and rs (doubles) */
    };
    un_rng rng;
    un_rng_seed(&rng, 11);
    int n_checked = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        inst t;
        if (!inst_of_case(ctx, &cases[k], &rng, &t))
            continue;
        int n_in = t.n_in;
        for (int prec = 0; prec < 2; prec++)
            for (int th = 0; th < 2; th++) {
                size_t esz = prec == UN_PREC_F32 ? sizeof(float) : sizeof(double);
                un_kexec plain = exec_default((un_prec)prec), st = plain;
                plain.pool = st.pool = th ? pool : NULL;
                st.stash = un_kstash_new();
                void *y[4], *g[4][UN_MAX_INPUTS];
                for (int r = 0; r < 4; r++) {
                    y[r] = un_xcalloc((size_t)t.nout[0], esz);
                    for (int i = 0; i < n_in; i++)
                        g[r][i] = un_xcalloc((size_t)t.n[i], esz);
                }
                size_t ny = (size_t)t.nout[0] * esz;
                /* 0: without a stash; 1: with one; both forward then backward */
                stash_run(ctx, &t, &plain, true, false, y[0], g[0]);
                stash_run(ctx, &t, &st, true, false, y[1], g[1]);
                size_t held = un_kstash_bytes(st.stash), want = (size_t)t.nout[0] * esz;
                if (t.op == UN_OP_MULTIHEAD_ATTENTION) /* Q, K, V, O [+ P]; E == HL here */
                    want =
                        (size_t)(2 * t.n[0] + 2 * t.n[1] + (k == 2 ? 2 * 2 * 300 * 200 : 0)) * esz;
                if (t.op == UN_OP_LAYER_NORM) /* mean and rs of each row */
                    want = (size_t)(2 * (t.n[0] / t.n[1])) * sizeof(double);
                EXPECT_EQ((long long)held, (long long)want);
                /* the executor's memory estimate counts the same bytes from shapes alone */
                un_kt sin[UN_MAX_INPUTS], sout = kt_of(&t.inf.out[0], NULL);
                for (int i = 0; i < n_in; i++)
                    sin[i] = kt_of(&t.in_shape[i], NULL);
                EXPECT_EQ((long long)un_kern_stash_bytes((un_prec)prec, t.op, t.inf.local, sin,
                                                         n_in, &sout),
                          (long long)held);
                EXPECT_TRUE(memcmp(y[0], y[1], ny) == 0);
                for (int i = 0; i < n_in; i++)
                    EXPECT_TRUE(memcmp(g[0][i], g[1][i], (size_t)t.n[i] * esz) == 0);
                /* a second backward of the same forward (linear's gelu' was overwritten by the
                 * first one, which took the entry) recomputes: the same bits */
                stash_run(ctx, &t, &st, false, false, y[1], g[3]);
                for (int i = 0; i < n_in; i++)
                    EXPECT_TRUE(memcmp(g[0][i], g[3][i], (size_t)t.n[i] * esz) == 0);
                EXPECT_EQ((long long)un_kstash_bytes(st.stash), (long long)held);
                /* 2: input 0 changed between forward and backward, with the stash; 3: the
                 * backward of the changed input without one (its forward output unused) */
                stash_run(ctx, &t, &st, true, true, y[2], g[2]);
                stash_run(ctx, &t, &plain, false, true, y[2], g[3]);
                for (int i = 0; i < n_in; i++)
                    EXPECT_TRUE(memcmp(g[2][i], g[3][i], (size_t)t.n[i] * esz) == 0);
                EXPECT_TRUE(memcmp(g[2][1], g[1][1], (size_t)t.n[1] * esz) != 0);
                /* a backward without any forward on a fresh stash recomputes */
                un_kstash_free(st.stash);
                st.stash = un_kstash_new();
                stash_run(ctx, &t, &st, false, false, y[3], g[3]);
                for (int i = 0; i < n_in; i++)
                    EXPECT_TRUE(memcmp(g[0][i], g[3][i], (size_t)t.n[i] * esz) == 0);
                n_checked++;
                un_kstash_free(st.stash);
                for (int r = 0; r < 4; r++) {
                    free(y[r]);
                    for (int i = 0; i < n_in; i++)
                        free(g[r][i]);
                }
            }
        inst_free(&t);
    }
    printf("    stash: %d op/precision/thread cases, the same bits as recomputing\n", n_checked);
    /* Two attention forwards on different inputs into one output buffer (an executor's arena
     * reuses an output's memory once nothing reads it) keep two entries, and each backward gets
     * the bits of recomputing. */
    un_kexec plain = exec_default(UN_PREC_F64), st = plain;
    st.stash = un_kstash_new();
    inst t;
    if (inst_of_case(ctx, &cases[2], &rng, &t)) {
        double *x2 = un_xmalloc(sizeof(double) * (size_t)t.n[0]);
        memcpy(x2, t.x[0], sizeof(double) * (size_t)t.n[0]);
        x2[0] += 0.5;
        un_kt in[2][UN_MAX_INPUTS], din[UN_MAX_INPUTS];
        inst_inputs(&t, UN_PREC_F64, NULL, in[0]);
        inst_inputs(&t, UN_PREC_F64, NULL, in[1]);
        in[1][0].data = x2;
        double *y = un_xcalloc((size_t)t.nout[0], sizeof(double));
        double *dy = un_xcalloc((size_t)t.nout[0], sizeof(double));
        double *g[2] = {un_xcalloc((size_t)t.n[3], sizeof(double)),
                        un_xcalloc((size_t)t.n[3], sizeof(double))};
        for (int64_t e = 0; e < t.nout[0]; e++)
            dy[e] = 1.0 + (double)(e % 5) / 4;
        un_kt out = kt_of(&t.inf.out[0], y), d = kt_of(&t.inf.out[0], dy);
        for (int k = 0; k < 2; k++)
            EXPECT_OK(ctx, un_kern_forward(ctx, &st, t.op, t.inf.local, in[k], t.n_in, &out, 1));
        size_t one = (size_t)(2 * t.n[0] + 2 * t.n[1] + 2 * 2 * 300 * 200) * sizeof(double);
        EXPECT_EQ((long long)un_kstash_bytes(st.stash), (long long)(2 * one));
        for (int k = 0; k < 2; k++) { /* input k's Wq gradient: with the stash, then without */
            for (int r = 0; r < 2; r++) {
                memset(din, 0, sizeof din);
                memset(g[r], 0, sizeof(double) * (size_t)t.n[3]);
                din[3] = kt_of(&t.in_shape[3], g[r]);
                EXPECT_OK(ctx, un_kern_backward(ctx, r ? &plain : &st, t.op, t.inf.local, in[k],
                                                t.n_in, &out, 1, &d, din));
            }
            EXPECT_TRUE(memcmp(g[0], g[1], sizeof(double) * (size_t)t.n[3]) == 0);
        }
        free(x2);
        free(y);
        free(dy);
        free(g[0]);
        free(g[1]);
        inst_free(&t);
    }
    un_kstash_free(st.stash);
    EXPECT_EQ(n_checked, 20);
    un_pool_free(pool);
    un_ctx_free(ctx);
}

/* The training loss's cross-entropy rows (un_kern_ce_loss) against a float64 loop: float64 to
 * 1e-12, float32 (vectorised exp) to 1e-6; a NaN logit makes its row's loss and gradient NaN. */
static void test_ce_loss(void) {
    enum { R = 37, C = 301 };
    static double x[R * C], g[R * C];
    static float xf[R * C], gf[R * C];
    int64_t lab[R];
    un_rng rng;
    un_rng_seed(&rng, 5);
    for (int i = 0; i < R * C; i++)
        xf[i] = (float)(x[i] = (float)(20 * un_rng_double(&rng) - 10));
    for (int r = 0; r < R; r++)
        lab[r] = (int64_t)un_rng_below(&rng, C);
    double f = 1.0 / 100, ref = 0, err64 = 0, err32 = 0;
    double l64 = un_kern_ce_loss(UN_PREC_F64, x, R, C, lab, f, g);
    double l32 = un_kern_ce_loss(UN_PREC_F32, xf, R, C, lab, f, gf);
    for (int r = 0; r < R; r++) {
        double mx = x[r * C], s = 0;
        for (int j = 0; j < C; j++)
            mx = fmax(mx, x[r * C + j]);
        for (int j = 0; j < C; j++)
            s += exp(x[r * C + j] - mx);
        double lse = mx + log(s);
        ref += lse - x[r * C + lab[r]];
        for (int j = 0; j < C; j++) {
            double want = (exp(x[r * C + j] - lse) - (j == lab[r])) * f;
            err64 = fmax(err64, fabs(g[r * C + j] - want));
            err32 = fmax(err32, fabs(gf[r * C + j] - want));
        }
    }
    printf("    ce loss: float64 loss error %.1e, gradient %.1e; float32 %.1e, %.1e\n",
           fabs(l64 - ref) / ref, err64, fabs(l32 - ref) / ref, err32);
    EXPECT_TRUE(fabs(l64 - ref) <= 1e-12 * ref && err64 <= 1e-15);
    EXPECT_TRUE(fabs(l32 - ref) <= 1e-6 * ref && err32 <= 1e-8);
    xf[3 * C + 7] = NAN;
    l32 = un_kern_ce_loss(UN_PREC_F32, xf, R, C, lab, f, gf);
    EXPECT_TRUE(isnan(l32) && isnan(gf[3 * C]) && !isnan(gf[2 * C]) && !isnan(gf[4 * C]));
}

/* Dropout on a row block of a tensor, given its offset, equals that block of the whole tensor's
 * dropout (the reference's mask is global); without the offset it is the local mask. */
static void test_dropout_shard(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_param p[UN_MAX_PARAMS];
    un_spec_param_defaults(un_spec_op(S, UN_OP_DROPOUT), p);
    p[0].v[0] = 40, p[1].v[0] = 11;
    enum { R = 8, C = 10 };
    double x[R * C], y[R * C], yp[R / 2 * C], ys[R * C];
    for (int i = 0; i < R * C; i++)
        x[i] = i + 1;
    un_kexec ex = exec_default(UN_PREC_F64);
    un_kt in = {UN_DT_FLOAT, 2, {R, C}, x}, out = {UN_DT_FLOAT, 2, {R, C}, y};
    EXPECT_OK(ctx, un_kern_forward(ctx, &ex, UN_OP_DROPOUT, p, &in, 1, &out, 1));
    int dropped = 0;
    for (int i = 0; i < R * C; i++) {
        EXPECT_TRUE(y[i] == 0 || fabs(y[i] - x[i] / 0.6) < 1e-12);
        dropped += y[i] == 0;
    }
    EXPECT_TRUE(dropped > 15 && dropped < 50);
    int64_t off[2] = {R / 2, 0}, full[2] = {R, C};
    un_kexec exs = ex;
    exs.off = off, exs.full = full;
    un_kt pin = {UN_DT_FLOAT, 2, {R / 2, C}, x + R / 2 * C},
          pout = {UN_DT_FLOAT, 2, {R / 2, C}, yp};
    EXPECT_OK(ctx, un_kern_forward(ctx, &exs, UN_OP_DROPOUT, p, &pin, 1, &pout, 1));
    EXPECT_TRUE(memcmp(yp, y + R / 2 * C, sizeof yp) == 0);
    /* another executor seed gives another mask, the same in backward */
    un_kexec ex2 = ex;
    ex2.seed = 77;
    un_kt sout = {UN_DT_FLOAT, 2, {R, C}, ys};
    EXPECT_OK(ctx, un_kern_forward(ctx, &ex2, UN_OP_DROPOUT, p, &in, 1, &sout, 1));
    EXPECT_TRUE(memcmp(ys, y, sizeof ys) != 0);
    double dy[R * C], dx[R * C] = {0};
    for (int i = 0; i < R * C; i++)
        dy[i] = 1;
    un_kt dout = {UN_DT_FLOAT, 2, {R, C}, dy}, din = {UN_DT_FLOAT, 2, {R, C}, dx};
    EXPECT_OK(ctx, un_kern_backward(ctx, &ex2, UN_OP_DROPOUT, p, &in, 1, &sout, 1, &dout, &din));
    for (int i = 0; i < R * C; i++)
        EXPECT_TRUE((ys[i] == 0) == (dx[i] == 0));
    un_ctx_free(ctx);
}

/* Non-finite values: relu and max pooling propagate NaN, dropout gives NaN for a dropped inf. */
static void test_nonfinite(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_kexec ex = exec_default(UN_PREC_F32);
    float x[4] = {NAN, -1, 2, -INFINITY}, y[4];
    un_kt in = {UN_DT_FLOAT, 1, {4}, x}, out = {UN_DT_FLOAT, 1, {4}, y};
    EXPECT_OK(ctx, un_kern_forward(ctx, &ex, UN_OP_RELU, NULL, &in, 1, &out, 1));
    EXPECT_TRUE(isnan(y[0]));
    EXPECT_NEAR(y[1], 0, 0);
    EXPECT_NEAR(y[3], 0, 0);
    un_param p[UN_MAX_PARAMS];
    un_spec_param_defaults(un_spec_op(S, UN_OP_POOL2D), p); /* max 2x2 stride 2 */
    float px[16], py[4];
    for (int i = 0; i < 16; i++)
        px[i] = (float)i;
    px[1] = NAN;
    un_kt pin = {UN_DT_FLOAT, 4, {1, 1, 4, 4}, px}, pout = {UN_DT_FLOAT, 4, {1, 1, 2, 2}, py};
    EXPECT_OK(ctx, un_kern_forward(ctx, &ex, UN_OP_POOL2D, p, &pin, 1, &pout, 1));
    EXPECT_TRUE(isnan(py[0]));
    EXPECT_NEAR(py[3], 15, 0);
    un_ctx_free(ctx);
}

/* relu's forward costs the same whatever the signs: a branch on each sign made random signs
 * (the profiler's values) several times slower than a step's predictable ones (a trained relu
 * linear of xdl at batch 256: 19.8 us profiled, 8.6 in the step). The least of 40 alternating
 * runs each on 64 Ki floats, random signs against the same values all positive. */
static void test_relu_signs(void) {
    /* relu over random signs, zeros and signed zeros included: every element max(x, 0). Its
     * cost not depending on the signs (the branch-free loop) is a timing, so it is shown by the
     * step measurements in runtime/README.md, not asserted here. */
    un_ctx *ctx = un_ctx_new(NULL);
    un_kexec ex = exec_default(UN_PREC_F32);
    enum { N = 1 << 12 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint64_t r = 7;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        float m = 1.0f + (float)(r >> 41) / (float)(1 << 23);
        x[i] = i % 17 == 0 ? 0.0f : i % 19 == 0 ? -0.0f : (r >> 40) & 1 ? m : -m;
    }
    un_kt in = {UN_DT_FLOAT, 1, {N}, x}, out = {UN_DT_FLOAT, 1, {N}, y};
    EXPECT_OK(ctx, un_kern_forward(ctx, &ex, UN_OP_RELU, NULL, &in, 1, &out, 1));
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += y[i] != (x[i] > 0 ? x[i] : 0.0f);
    EXPECT_TRUE(bad == 0);
    free(x);
    free(y);
    un_ctx_free(ctx);
}

/* Bad calls: one error line naming the op and the reason; nothing crashes. */
static void test_errors(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_kexec ex = exec_default(UN_PREC_F64);
    double a[12] = {0}, b[12] = {0}, y[12] = {0};
    un_param p[UN_MAX_PARAMS];
    un_spec_param_defaults(un_spec_op(S, UN_OP_LINEAR), p);
    un_kt in[3] = {
        {UN_DT_FLOAT, 2, {3, 4}, a}, {UN_DT_FLOAT, 2, {4, 3}, b}, {UN_DT_FLOAT, 1, {3}, b}};
    un_kt out = {UN_DT_FLOAT, 2, {3, 3}, y};
    /* parallel op */
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_PARTITION, p, in, 1, &out, 1), UN_ERR_INVALID);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "partition") != NULL);
    un_ctx_clear(ctx);
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_INPUT, p, in, 1, &out, 1), UN_ERR_INVALID);
    un_ctx_clear(ctx);
    /* wrong output shape */
    out.dim[1] = 4;
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_LINEAR, p, in, 2, &out, 1), UN_ERR_INVALID);
    EXPECT_STR_EQ(un_ctx_errmsg(ctx), "linear: output 0 has dims [3,4], expected [3,3]");
    un_ctx_clear(ctx);
    out.dim[1] = 3;
    /* bias given but use_bias false, and the other way round */
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_LINEAR, p, in, 3, &out, 1), UN_ERR_INVALID);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "use_bias") != NULL);
    un_ctx_clear(ctx);
    p[1].v[0] = 1;
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_LINEAR, p, in, 2, &out, 1), UN_ERR_INVALID);
    un_ctx_clear(ctx);
    EXPECT_OK(ctx, un_kern_forward(ctx, &ex, UN_OP_LINEAR, p, in, 3, &out, 1));
    /* mismatched inner dims, missing data, wrong dtype, bad rank */
    in[1].dim[0] = 5;
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_LINEAR, p, in, 3, &out, 1), UN_ERR_INVALID);
    un_ctx_clear(ctx);
    in[1].dim[0] = 4;
    in[1].data = NULL;
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_LINEAR, p, in, 3, &out, 1), UN_ERR_INVALID);
    EXPECT_STR_EQ(un_ctx_errmsg(ctx), "linear: input 1 has no data");
    un_ctx_clear(ctx);
    in[1].data = b;
    in[1].dtype = UN_DT_INT;
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_LINEAR, p, in, 3, &out, 1), UN_ERR_INVALID);
    un_ctx_clear(ctx);
    in[1].dtype = UN_DT_FLOAT;
    in[0].rank = 9;
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_LINEAR, p, in, 3, &out, 1), UN_ERR_INVALID);
    un_ctx_clear(ctx);
    in[0].rank = 2;
    in[0].dim[0] = (int64_t)1 << 40; /* too many elements */
    in[0].dim[1] = (int64_t)1 << 20;
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_LINEAR, p, in, 3, &out, 1), UN_ERR_INVALID);
    un_ctx_clear(ctx);
    in[0].dim[0] = 3, in[0].dim[1] = 4;
    /* embedding index and cross_entropy label out of range */
    un_spec_param_defaults(un_spec_op(S, UN_OP_EMBEDDING), p);
    int64_t idx[4] = {0, 1, 2, 3};
    un_kt ein[2] = {{UN_DT_INT, 2, {2, 2}, idx}, {UN_DT_FLOAT, 2, {3, 4}, a}};
    un_kt eout = {UN_DT_FLOAT, 2, {2, 4}, y};
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_EMBEDDING, p, ein, 2, &eout, 1), UN_ERR_INVALID);
    EXPECT_STR_EQ(un_ctx_errmsg(ctx),
                  "embedding: index 3 at [1, 1] is outside the table of 3 rows");
    un_ctx_clear(ctx);
    /* a gradient for the int input is refused */
    idx[3] = 2;
    un_kt eg[2] = {{UN_DT_FLOAT, 2, {2, 2}, b}, {UN_DT_FLOAT, 2, {3, 4}, NULL}};
    EXPECT_EQ(un_kern_backward(ctx, &ex, UN_OP_EMBEDDING, p, ein, 2, &eout, 1, &eout, eg),
              UN_ERR_INVALID);
    un_ctx_clear(ctx);
    int64_t lab[3] = {0, 4, 1};
    un_kt cin[2] = {{UN_DT_FLOAT, 2, {3, 4}, a}, {UN_DT_INT, 1, {3}, lab}};
    un_kt cout = {UN_DT_FLOAT, 1, {3}, y};
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_CROSS_ENTROPY, NULL, cin, 2, &cout, 1),
              UN_ERR_INVALID);
    EXPECT_STR_EQ(un_ctx_errmsg(ctx), "cross_entropy: label 4 of sample 1 is outside [0, 4)");
    un_ctx_clear(ctx);
    /* an input gradient of the wrong shape, an output gradient of the wrong shape */
    un_spec_param_defaults(un_spec_op(S, UN_OP_LINEAR), p);
    un_kt lg[2] = {{UN_DT_FLOAT, 2, {4, 3}, b}, {UN_DT_FLOAT, 2, {4, 3}, NULL}};
    un_kt ld = {UN_DT_FLOAT, 2, {3, 3}, y};
    EXPECT_EQ(un_kern_backward(ctx, &ex, UN_OP_LINEAR, p, in, 2, &out, 1, &ld, lg), UN_ERR_INVALID);
    EXPECT_STR_EQ(un_ctx_errmsg(ctx), "linear: input gradient 0 has dims [4,3], expected [3,4]");
    un_ctx_clear(ctx);
    lg[0].dim[0] = 3, lg[0].dim[1] = 4, ld.dim[0] = 2;
    EXPECT_EQ(un_kern_backward(ctx, &ex, UN_OP_LINEAR, p, in, 2, &out, 1, &ld, lg), UN_ERR_INVALID);
    EXPECT_STR_EQ(un_ctx_errmsg(ctx), "linear: output gradient 0 has dims [2,3], expected [3,3]");
    un_ctx_clear(ctx);
    /* the backward of softmax needs the forward output */
    un_spec_param_defaults(un_spec_op(S, UN_OP_SOFTMAX), p);
    un_kt sx = {UN_DT_FLOAT, 2, {3, 4}, a}, sy = {UN_DT_FLOAT, 2, {3, 4}, NULL};
    un_kt sd = {UN_DT_FLOAT, 2, {3, 4}, b}, sdx = {UN_DT_FLOAT, 2, {3, 4}, y};
    EXPECT_EQ(un_kern_backward(ctx, &ex, UN_OP_SOFTMAX, p, &sx, 1, &sy, 1, &sd, &sdx),
              UN_ERR_INVALID);
    un_ctx_clear(ctx);
    /* a bad precision, an out-of-range dim parameter */
    un_kexec bad = ex;
    bad.prec = (un_prec)7;
    EXPECT_EQ(un_kern_forward(ctx, &bad, UN_OP_SOFTMAX, p, &sx, 1, &sdx, 1), UN_ERR_INVALID);
    un_ctx_clear(ctx);
    p[0].v[0] = 2;
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_SOFTMAX, p, &sx, 1, &sdx, 1), UN_ERR_INVALID);
    EXPECT_STR_EQ(un_ctx_errmsg(ctx), "softmax: dim 2 is outside [-2, 2)");
    un_ctx_clear(ctx);
    /* attention whose score matrix alone would hold 2^48 values: refused before any work */
    un_spec_param_defaults(un_spec_op(S, UN_OP_MULTIHEAD_ATTENTION), p);
    int64_t big = (int64_t)1 << 24;
    un_kt m[7], mo = {UN_DT_FLOAT, 3, {1, big, 2}, y};
    for (int i = 0; i < 7; i++)
        m[i] = i < 3 ? (un_kt){UN_DT_FLOAT, 3, {1, big, 2}, a} : (un_kt){UN_DT_FLOAT, 2, {2, 2}, a};
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_MULTIHEAD_ATTENTION, p, m, 7, &mo, 1), UN_ERR_LIMIT);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "exceeds 2^48") != NULL);
    un_ctx_free(ctx);
}

/* A failing scratch allocation is UN_ERR_NOMEM, not a crash. */
static int fail_after;
static void *fail_malloc(size_t n, void *user) {
    (void)user;
    return fail_after-- > 0 ? malloc(n) : NULL;
}
static void *plain_realloc(void *p, size_t n, void *user) {
    (void)user;
    return realloc(p, n);
}
static void plain_free(void *p, void *user) {
    (void)user;
    free(p);
}

static void test_alloc_failure(void) {
    un_ctx_params cp = un_ctx_params_default();
    cp.alloc = (un_alloc){fail_malloc, plain_realloc, plain_free, NULL};
    fail_after = 1 << 30;
    un_ctx *ctx = un_ctx_new(&cp);
    un_param p[UN_MAX_PARAMS];
    un_spec_param_defaults(un_spec_op(S, UN_OP_MULTIHEAD_ATTENTION), p);
    double v[16] = {0}, y[8];
    un_kt in[7];
    for (int i = 0; i < 7; i++)
        in[i] = i < 3 ? (un_kt){UN_DT_FLOAT, 3, {1, 2, 4}, v} : (un_kt){UN_DT_FLOAT, 2, {4, 4}, v};
    un_kt out = {UN_DT_FLOAT, 3, {1, 2, 4}, y};
    un_kexec ex = exec_default(UN_PREC_F64);
    fail_after = 0;
    EXPECT_EQ(un_kern_forward(ctx, &ex, UN_OP_MULTIHEAD_ATTENTION, p, in, 7, &out, 1),
              UN_ERR_NOMEM);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "multihead_attention") != NULL);
    un_ctx_clear(ctx);
    fail_after = 1 << 30;
    EXPECT_OK(ctx, un_kern_forward(ctx, &ex, UN_OP_MULTIHEAD_ATTENTION, p, in, 7, &out, 1));
    un_ctx_free(ctx);
}

/* Every case under a context whose Nth allocation fails, for N = 0, 1, ... until forward and
 * backward both succeed: each call is UN_OK or UN_ERR_NOMEM, and nothing leaks (ASan). */
static int n_oom_failures;

static void oom_case(un_ctx *ctx, inst *t, const un_kexec *ex, const char *label) {
    (void)ctx;
    un_ctx_params cp = un_ctx_params_default();
    cp.alloc = (un_alloc){fail_malloc, plain_realloc, plain_free, NULL};
    fail_after = 1 << 30;
    un_ctx *f = un_ctx_new(&cp);
    double **y = alloc_outs(t), **r = alloc_outs(t), *g[UN_MAX_INPUTS] = {0};
    un_kt in[UN_MAX_INPUTS], out[UN_MAX_OUTPUTS], dout[UN_MAX_OUTPUTS], din[UN_MAX_INPUTS];
    inst_inputs(t, UN_PREC_F64, NULL, in);
    for (int o = 0; o < t->n_out; o++) {
        out[o] = kt_of(&t->inf.out[o], y[o]);
        dout[o] = kt_of(&t->inf.out[o], r[o]);
    }
    for (int i = 0; i < t->n_in; i++) {
        din[i] = kt_of(&t->in_shape[i], NULL);
        if (t->x[i])
            din[i].data = g[i] = un_xcalloc((size_t)t->n[i], sizeof(double));
    }
    for (int n = 0; n < 16; n++) {
        fail_after = n;
        un_status s1 = un_kern_forward(f, ex, t->op, t->inf.local, in, t->n_in, out, t->n_out);
        un_status s2 =
            un_kern_backward(f, ex, t->op, t->inf.local, in, t->n_in, out, t->n_out, dout, din);
        fail_after = 1 << 30;
        bool ok1 = s1 == UN_OK || s1 == UN_ERR_NOMEM, ok2 = s2 == UN_OK || s2 == UN_ERR_NOMEM;
        EXPECT_TRUE(ok1 && ok2);
        if (!ok1 || !ok2)
            printf("    %s: failing allocation %d gives %s / %s\n", label, n, un_status_str(s1),
                   un_status_str(s2));
        if (s1 == UN_OK && s2 == UN_OK)
            break;
        n_oom_failures++;
        un_ctx_clear(f);
    }
    for (int i = 0; i < t->n_in; i++)
        free(g[i]);
    free_outs(y);
    free_outs(r);
    un_ctx_free(f);
}

static void test_alloc_failure_every_case(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    for_each_case(ctx, oom_case);
    printf("    %d injected allocation failures, each a clean UN_ERR_NOMEM\n", n_oom_failures);
    EXPECT_TRUE(n_oom_failures >= 20);
    un_ctx_free(ctx);
}

/* ---- pool ------------------------------------------------------------------------------------ */

typedef struct cover {
    int *hits;
    int calls;
    int64_t min_block;
} cover;

static void cover_body(void *arg, int64_t b, int64_t e) {
    cover *c = arg;
    for (int64_t i = b; i < e; i++)
        __atomic_fetch_add(&c->hits[i], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->calls, 1, __ATOMIC_RELAXED);
    int64_t len = e - b, cur = __atomic_load_n(&c->min_block, __ATOMIC_RELAXED);
    while (len < cur && !__atomic_compare_exchange_n(&c->min_block, &cur, len, false,
                                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static void test_pool_covers_each_index_once(void) {
    static const int threads[] = {0, 1, 2, 4, 7};
    static const int64_t sizes[] = {0, 1, 3, 5, 7, 100, 100003};
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        un_pool *p = threads[t] ? un_pool_new(threads[t]) : NULL;
        EXPECT_EQ(un_pool_size(p), threads[t] < 1 ? 1 : threads[t]);
        for (int rep = 0; rep < 3; rep++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
                int64_t n = sizes[s];
                cover c = {un_xcalloc((size_t)n + 1, sizeof(int)), 0, INT64_MAX};
                un_pool_for(p, n, cover_body, &c);
                int once = 0;
                for (int64_t i = 0; i < n; i++)
                    once += c.hits[i] == 1;
                EXPECT_EQ(once, n);
                EXPECT_EQ(c.calls, n == 0 ? 0 : n < un_pool_size(p) ? n : un_pool_size(p));
                EXPECT_TRUE(n == 0 || c.min_block >= 1);
                free(c.hits);
            }
        un_pool_free(p);
    }
    un_pool_free(NULL);
}

/* The pool's spin-then-block waits lose no wake-up (pool.h): 3 threads run 4,000 loops of 1-8
 * blocks each, a block busy for 0-80 us at random (around the longest poll, 50 us), with the
 * poll forced to 50 us, 2 us, none and the rule; every index once, within 60 s (a lost wake-up
 * leaves the caller or a worker asleep for ever: the loops run on a thread of their own, and
 * the test fails instead of hanging). */
typedef struct wake_loops {
    un_pool *p;
    _Atomic int done;
    bool ok;
} wake_loops;

static void wake_body(void *arg, int64_t b, int64_t e) {
    cover *c = arg;
    uint64_t x = (uint64_t)b * 0x9e3779b97f4a7c15ull +
                 (uint64_t)__atomic_load_n(&c->calls, __ATOMIC_RELAXED);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double us = (double)(x >> 58) * 1.25; /* 0-80 us */
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((double)(t.tv_sec - t0.tv_sec) * 1e6 + (double)(t.tv_nsec - t0.tv_nsec) / 1e3 < us);
    cover_body(arg, b, e);
}

static void *wake_loops_main(void *arg) {
    wake_loops *w = arg;
    w->ok = true;
    for (int k = 0; k < 4000; k++) {
        int64_t n = 1 + k % 8;
        int hits[8] = {0};
        cover c = {hits, k, INT64_MAX};
        un_pool_for(w->p, n, wake_body, &c);
        for (int64_t i = 0; i < n; i++)
            w->ok &= hits[i] == 1;
    }
    atomic_store(&w->done, 1);
    return NULL;
}

static void test_pool_wakeups(void) {
    static const int64_t polls[] = {50000, 2000, 0, -1};
    for (size_t q = 0; q < sizeof polls / sizeof *polls; q++) {
        un_pool_spin_force(polls[q]);
        wake_loops w = {.p = un_pool_new(3)};
        pthread_t th;
        EXPECT_EQ(pthread_create(&th, NULL, wake_loops_main, &w), 0);
        for (int i = 0; i < 6000 && !atomic_load(&w.done); i++)
            usleep(10000);
        if (!atomic_load(&w.done)) {
            fprintf(stderr, "pool_wakeups: poll %lld ns: the loops did not finish within 60 s\n",
                    (long long)polls[q]);
            exit(1); /* a thread is asleep for ever: nothing to join */
        }
        pthread_join(th, NULL);
        test__check(w.ok, TEST__AT, "poll %lld ns: an index not covered once", (long long)polls[q]);
        un_pool_free(w.p);
    }
    un_pool_spin_force(-1);
}

/* linear's fused gelu in float32 (a vectorised erfc/exp, not libm's) against the float64
 * formula, forward and derivative, over [-12, 12] and zero: W = identity, so y = gelu(x) and
 * dx = dy gelu'(x) exactly up to the activation. The value within 3e-5 relative everywhere (the
 * float32 exp's argument -x^2/2 carries 1e-5 at the far tail; libm's 1 + erff loses everything
 * there), the derivative - a difference of two O(1) terms, 0 near x = -0.75 - within 1e-6
 * absolute. */
static void test_gelu_f32_accuracy(void) {
    enum { K = 481 };
    static float x[K], w[K * K], y[K], dy[K], dx[K], dw[K * K];
    for (int i = 0; i < K; i++) {
        x[i] = i == K / 2 ? 0.0f : -12.0f + 24.0f * (float)i / (K - 1);
        dy[i] = 1.0f;
        w[i * K + i] = 1.0f;
    }
    un_ctx *ctx = un_ctx_new(NULL);
    un_param p[UN_MAX_PARAMS] = {{0}};
    un_spec_param_defaults(un_spec_op(S, UN_OP_LINEAR), p);
    p[0].v[0] = 4; /* ACT_GELU */
    un_kexec ex = {.prec = UN_PREC_F32, .training = true};
    un_kt in[2] = {{UN_DT_FLOAT, 2, {1, K}, x}, {UN_DT_FLOAT, 2, {K, K}, w}};
    un_kt out = {UN_DT_FLOAT, 2, {1, K}, y}, dout = {UN_DT_FLOAT, 2, {1, K}, dy};
    un_kt din[2] = {{UN_DT_FLOAT, 2, {1, K}, dx}, {UN_DT_FLOAT, 2, {K, K}, dw}};
    EXPECT_OK(ctx, un_kern_forward(ctx, &ex, UN_OP_LINEAR, p, in, 2, &out, 1));
    EXPECT_OK(ctx, un_kern_backward(ctx, &ex, UN_OP_LINEAR, p, in, 2, &out, 1, &dout, din));
    double worst_y = 0, worst_d = 0;
    for (int i = 0; i < K; i++) {
        double v = x[i], c = erfc(-v / sqrt(2.0)); /* 1 + erf, without cancellation */
        double g = 0.5 * v * c, d = 0.5 * c + v * exp(-0.5 * v * v) / sqrt(2 * M_PI);
        double ey = fabs(y[i] - g) / fmax(fabs(g), 1e-30);
        double ed = fabs(dx[i] - d);
        worst_y = fmax(worst_y, ey);
        worst_d = fmax(worst_d, ed);
    }
    printf("    gelu f32: max relative error %.2g (value), max absolute error %.2g (derivative)\n",
           worst_y, worst_d);
    EXPECT_TRUE(worst_y <= 3e-5);
    EXPECT_TRUE(worst_d <= 1e-6);
    un_ctx_free(ctx);
}

/* The BLAS kernel choice (runtime/blas.h): the running kernel passed its self-check; with
 * OPENBLAS_CORETYPE unset on an AVX-512 CPU it is SkylakeX; a child process started with
 * OPENBLAS_CORETYPE=Haswell keeps Haswell and says so (the environment is never overridden). */
static void test_blas_choice(void) {
    EXPECT_TRUE(un_blas_ok());
    const char *k = un_blas_kernel(), *line = un_blas_describe();
    printf("    blas: %s\n", line);
    EXPECT_TRUE(k[0] != '\0' && strstr(line, k) != NULL);
    EXPECT_TRUE(strstr(line, "self-check passed") != NULL);
    const char *forced = getenv("OPENBLAS_CORETYPE");
    if (forced && *forced) {
        EXPECT_TRUE(strstr(line, "kept") != NULL);
        return;
    }
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512cd") && strstr(line, "not a DYNAMIC_ARCH") == NULL)
        EXPECT_STR_EQ(k, "SkylakeX");
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return; /* the child's forced Haswell needs AVX2 */
    char cmd[600];
    char self[512];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    EXPECT_TRUE(n > 0);
    if (n <= 0)
        return;
    self[n] = '\0';
    snprintf(cmd, sizeof cmd, "OPENBLAS_CORETYPE=Haswell '%s' --blas-line", self);
    FILE *f = popen(cmd, "r");
    EXPECT_TRUE(f != NULL);
    if (!f)
        return;
    char got[512] = "";
    if (!fgets(got, sizeof got, f))
        got[0] = '\0';
    int rc = pclose(f);
    printf("    child with OPENBLAS_CORETYPE=Haswell: %s", got);
    EXPECT_EQ(rc, 0);
    EXPECT_TRUE(strstr(got, "kernel Haswell (OPENBLAS_CORETYPE=Haswell set in the environment, "
                            "kept; self-check passed") != NULL);
}

/* The kernels' matrix product (un_kern_gemm_*) on every path (the kernels' choice, the small
 * kernel as this CPU runs it and its portable version, OpenBLAS) against a triple loop in double:
 * shapes below, at and above the small kernel's bound (rows and columns not multiples of 4 or of
 * a vector), every transpose combination, leading dims larger than the matrix, alpha 1 and
 * 0.5, beta 0 over a C of NaN (which must not be read) and beta 1; float32 within a few ulps of
 * k, float64 within 1e-13. A forced small kernel refuses alpha 0 and an op(B) beyond its
 * buffer. */
static void test_gemm_paths(void) {
    int64_t bound = un_kern_gemm_small_macs();
    printf("    small kernel bound: %lld multiply-adds (blas kernel %s)\n", (long long)bound,
           un_blas_kernel());
    EXPECT_TRUE(bound == (int64_t)1 << 15 || bound == (int64_t)1 << 12);
    static const int dims[][3] = {{1, 1, 1},    {3, 5, 7},   {4, 8, 8},    {5, 9, 3},
                                  {8, 8, 8},    {7, 17, 9},  {13, 31, 6},  {16, 32, 64},
                                  {33, 33, 33}, {64, 64, 8}, {65, 70, 40}, {2, 129, 30},
                                  {9, 3, 300}};
    int checked = 0, bad = 0;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        for (int t = 0; t < 4; t++)
            for (int v = 0; v < 3; v++) { /* v: beta 0 alpha 1, beta 1 alpha 1, beta 1 alpha .5 */
                int64_t m = dims[d][0], n = dims[d][1], k = dims[d][2];
                bool ta = t & 1, tb = t & 2;
                int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
                int64_t ra = ta ? k : m, rb = tb ? n : k;
                double alpha = v == 2 ? 0.5 : 1, beta = v == 0 ? 0 : 1;
                double *a = malloc(sizeof(double) * (size_t)(ra * lda));
                double *b = malloc(sizeof(double) * (size_t)(rb * ldb));
                double *c0 = malloc(sizeof(double) * (size_t)(m * ldc));
                double *ref = malloc(sizeof(double) * (size_t)(m * ldc));
                double *cd = malloc(sizeof(double) * (size_t)(m * ldc));
                float *af = malloc(sizeof(float) * (size_t)(ra * lda));
                float *bf = malloc(sizeof(float) * (size_t)(rb * ldb));
                float *cf = malloc(sizeof(float) * (size_t)(m * ldc));
                if (!a || !b || !c0 || !ref || !cd || !af || !bf || !cf) {
                    EXPECT_TRUE(false);
                    free(a), free(b), free(c0), free(ref), free(cd), free(af), free(bf), free(cf);
                    return;
                }
                un_rng rng;
                un_rng_seed(&rng, 0x1234567u + (uint64_t)(d * 16 + (size_t)t * 4 + (size_t)v));
                for (int64_t i = 0; i < ra * lda; i++)
                    af[i] = (float)(a[i] = 2 * un_rng_double(&rng) - 1);
                for (int64_t i = 0; i < rb * ldb; i++)
                    bf[i] = (float)(b[i] = 2 * un_rng_double(&rng) - 1);
                for (int64_t i = 0; i < m * ldc; i++)
                    c0[i] = 2 * un_rng_double(&rng) - 1;
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < ldc; j++) {
                        double acc = 0;
                        for (int64_t p = 0; p < k && j < n; p++)
                            acc += (ta ? a[p * lda + i] : a[i * lda + p]) *
                                   (tb ? b[j * ldb + p] : b[p * ldb + j]);
                        ref[i * ldc + j] =
                            j < n ? alpha * acc + beta * c0[i * ldc + j] : c0[i * ldc + j];
                    }
                for (int path = UN_GEMM_AUTO; path <= UN_GEMM_SMALL_PORTABLE; path++) {
                    for (int64_t i = 0; i < m * ldc; i++) {
                        bool pad = i % ldc >= n;
                        cd[i] = beta == 0 && !pad ? NAN : c0[i];
                        cf[i] = (float)cd[i];
                    }
                    bool okd = un_kern_gemm_f64((un_gemm_path)path, ta, tb, m, n, k, alpha, a, lda,
                                                b, ldb, beta, cd, ldc);
                    bool okf = un_kern_gemm_f32((un_gemm_path)path, ta, tb, m, n, k, (float)alpha,
                                                af, lda, bf, ldb, (float)beta, cf, ldc);
                    EXPECT_TRUE(okd && okf);
                    double worst_d = 0, worst_f = 0;
                    for (int64_t i = 0; i < m * ldc; i++) {
                        worst_d = fmax(worst_d, fabs(cd[i] - ref[i]));
                        worst_f = fmax(worst_f, fabs((double)cf[i] - ref[i]));
                        if (isnan(cd[i]) || isnan(cf[i]))
                            worst_d = INFINITY;
                    }
                    double tol_f = 4e-7 * (double)(k + 2) * 2; /* |terms| <= 1 each */
                    bool ok = worst_d <= 1e-13 && worst_f <= tol_f;
                    bad += !ok;
                    checked++;
                    test__check(ok, TEST__AT,
                                "gemm %lldx%lldx%lld ta %d tb %d alpha %g beta %g path %d: error "
                                "%g (f64), %g (f32, tolerance %g)",
                                (long long)m, (long long)n, (long long)k, ta, tb, alpha, beta, path,
                                worst_d, worst_f, tol_f);
                }
                free(a), free(b), free(c0), free(ref), free(cd), free(af), free(bf), free(cf);
            }
    printf("    %d products checked on 4 paths x 2 precisions, %d wrong\n", checked, bad);
    float x[4] = {1, 2, 3, 4}, y[4] = {0};
    EXPECT_TRUE(!un_kern_gemm_f32(UN_GEMM_SMALL, false, false, 2, 2, 1, 0, x, 1, x, 2, 0, y, 2));
    EXPECT_TRUE(
        !un_kern_gemm_f32(UN_GEMM_SMALL_PORTABLE, false, false, 2, 2, 1, 0, x, 1, x, 2, 0, y, 2));
    float *big = calloc(128 * 129, sizeof(float)), *cbig = calloc(129, sizeof(float));
    EXPECT_TRUE(big && cbig);
    if (big && cbig) { /* op(B) 128 x 129 floats (packed to 136 columns): over 32 KiB */
        EXPECT_TRUE(!un_kern_gemm_f32(UN_GEMM_SMALL, false, false, 1, 129, 128, 1, big, 128, big,
                                      129, 0, cbig, 129));
        EXPECT_TRUE(un_kern_gemm_f32(UN_GEMM_AUTO, false, false, 1, 129, 128, 1, big, 128, big, 129,
                                     0, cbig, 129));
    }
    free(big), free(cbig);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--blas-line") == 0) { /* test_blas_choice's child */
        printf("%s\n", un_blas_describe());
        return un_blas_ok() ? 0 : 1;
    }
    static const test_case cases[] = {
        {"param_names_match_spec", test_param_names_match_spec},
        {"forward_vs_reference", test_forward_vs_reference},
        {"backward_vs_finite_differences", test_backward_vs_finite_differences},
        {"backward_f32", test_backward_f32},
        {"random_shapes", test_random_shapes},
        {"larger_shapes", test_larger_shapes},
        {"absent_gradients", test_absent_gradients},
        {"aliased_inputs", test_aliased_inputs},
        {"conv2d_all_activations", test_conv2d_all_activations},
        {"threads_match", test_threads_match},
        {"stash", test_stash},
        {"scratch", test_scratch},
        {"ce_loss", test_ce_loss},
        {"dropout_shard", test_dropout_shard},
        {"nonfinite", test_nonfinite},
        {"relu_signs", test_relu_signs},
        {"errors", test_errors},
        {"alloc_failure", test_alloc_failure},
        {"alloc_failure_every_case", test_alloc_failure_every_case},
        {"pool_covers_each_index_once", test_pool_covers_each_index_once},
        {"pool_wakeups", test_pool_wakeups},
        {"gelu_f32_accuracy", test_gelu_f32_accuracy},
        {"blas_choice", test_blas_choice},
        {"gemm_paths", test_gemm_paths},
    };
    return TEST_RUN_WITH_SPEC(cases, &S);
}
