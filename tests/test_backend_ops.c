/* tests/test_backend_ops.c - every regular operator's forward and backward run through the
 * backend interface (runtime/backend.h: buffers in, op_forward / op_backward, buffers out) on
 * every backend of the list below, against pcg's float64 reference evaluator (ggml's
 * test-backend-ops is the model). Cases: each op's spec examples and a few extra shapes, each in
 * the trivial layout and in every layout one sharding rule of degree 2 gives it (the backend then
 * runs one device tuple's pieces with the rule's local parameters, as the executor does).
 * Forward: each output piece equals the reference's (float64 1e-9, float32 1e-4, relative to
 * 1 + |ref|). Backward: the float64 CPU backend's input gradients equal central differences of
 * the reference evaluator on the piece (1e-6), and every backend's equal the float64 CPU
 * backend's (1e-9 / 1e-4). A backend that cannot be made here (CUDA in a build without it)
 * prints one `skip` line per case; adding a backend is one entry in `backends`.
 *
 * The opaque backend (backend.h: the CPU kernels behind memory the host cannot reach) stands in
 * for a GPU on machines without one: it must catch a host dereference of its memory and a host
 * pointer passed as a device address (checked in child processes), and the whole runtime on it
 * (executor, loss, optimizer, checkpoints; serial, data and tensor parallel, local threads) must
 * give the CPU backend's losses bit for bit. This is the test the CUDA backend inherits. */
#include "runtime/backend.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pcg/eval.h"
#include "pcg/infer.h"
#include "runtime/backend_cuda.h"
#include "runtime/optim.h"
#include "runtime/train.h"
#include "runtime/zoo.h"
#include "tests/test.h"
#include "tests/train_run.h"

static un_spec *S;

/* ---- the backends under test ----------------------------------------------------------------- */

typedef struct bentry {
    const char *name;
    un_prec prec;
    un_status (*make)(un_ctx *ctx, un_prec prec, un_backend **out);
    double tol; /* forward and backward against the float64 references */
} bentry;

static un_status cpu1(un_ctx *ctx, un_prec prec, un_backend **out) {
    return un_backend_cpu_new(ctx, prec, 1, out);
}
static un_status cpu2(un_ctx *ctx, un_prec prec, un_backend **out) {
    return un_backend_cpu_new(ctx, prec, 2, out);
}
static un_status opaque1(un_ctx *ctx, un_prec prec, un_backend **out) {
    return un_backend_opaque_new(ctx, prec, 1, out);
}
static un_status cuda0(un_ctx *ctx, un_prec prec, un_backend **out) {
    return un_backend_cuda_new(ctx, prec, 0, out);
}

/* The first entry is the float64 CPU backend: the backward reference of the others. */
static const bentry backends[] = {
    {"cpu-f64", UN_PREC_F64, cpu1, 1e-9},          {"cpu-f32", UN_PREC_F32, cpu1, 1e-4},
    {"cpu-f32-2threads", UN_PREC_F32, cpu2, 1e-4}, {"opaque-f64", UN_PREC_F64, opaque1, 1e-9},
    {"opaque-f32", UN_PREC_F32, opaque1, 1e-4},    {"cuda-f64", UN_PREC_F64, cuda0, 1e-9},
    {"cuda-f32", UN_PREC_F32, cuda0, 1e-4},
};
enum { NB = sizeof backends / sizeof backends[0] };

static un_backend *live[NB]; /* NULL: unavailable */
static char why[NB][256];    /* the reason when unavailable */
static int n_cases, n_skips, n_fd_elems, n_layout_cases;
static int ran_fwd[NB], ran_bwd[NB];
static bool covered[UN_OP_COUNT];

static bool close_to(double a, double b, double tol) {
    return fabs(a - b) <= tol * (1 + fabs(b)) || (isnan(a) && isnan(b));
}

/* ---- one piece-level instance: the op on concrete local pieces ------------------------------ */

typedef struct lcase {
    un_op op;
    const un_param *params; /* the local (per piece) parameters */
    int n_in, n_out;
    un_shape in[UN_MAX_INPUTS], out[UN_MAX_OUTPUTS]; /* local, trivial layouts */
    int64_t nin[UN_MAX_INPUTS], nout[UN_MAX_OUTPUTS];
    double *x[UN_MAX_INPUTS];                    /* values (int inputs as whole numbers) */
    double *ref[UN_MAX_OUTPUTS];                 /* the reference's output pieces */
    double *dy[UN_MAX_OUTPUTS];                  /* output gradients (random) */
    int64_t off[UN_MAX_DIMS], full[UN_MAX_DIMS]; /* input 0's block (dropout masks) */
    const char *label;
} lcase;

static size_t esize(un_prec prec, un_dtype dt) {
    return dt == UN_DT_INT ? sizeof(int64_t) : prec == UN_PREC_F32 ? sizeof(float) : sizeof(double);
}

/* A buffer on be holding n values in the backend's element type (NULL x: zeroed). */
static un_buffer *upload(un_ctx *ctx, un_backend *be, un_dtype dt, const double *x, int64_t n) {
    un_prec prec = un_backend_prec(be);
    size_t es = esize(prec, dt), bytes = (size_t)n * es;
    un_buffer *b = NULL;
    EXPECT_OK(ctx, un_buffer_new(ctx, be, bytes, &b));
    if (!b || !x)
        return b;
    void *h = un_xmalloc(bytes);
    for (int64_t e = 0; e < n; e++) {
        if (dt == UN_DT_INT)
            ((int64_t *)h)[e] = (int64_t)x[e];
        else if (prec == UN_PREC_F32)
            ((float *)h)[e] = (float)x[e];
        else
            ((double *)h)[e] = x[e];
    }
    EXPECT_OK(ctx, un_buffer_write(ctx, b, 0, h, bytes));
    free(h);
    return b;
}

/* n float values of b into y (double). */
static void download(un_ctx *ctx, const un_buffer *b, double *y, int64_t n) {
    un_prec prec = un_backend_prec(un_buffer_backend(b));
    size_t bytes = (size_t)n * esize(prec, UN_DT_FLOAT);
    void *h = un_xmalloc(bytes);
    EXPECT_OK(ctx, un_buffer_read(ctx, b, 0, h, bytes));
    for (int64_t e = 0; e < n; e++)
        y[e] = prec == UN_PREC_F32 ? (double)((float *)h)[e] : ((double *)h)[e];
    free(h);
}

static un_kt kt_of(const un_shape *s, const un_buffer *b) {
    un_kt k = {.dtype = s->dtype, .rank = s->rank, .data = b ? un_buffer_at(b, 0) : NULL};
    for (int i = 0; i < s->rank; i++)
        k.dim[i] = s->dim[i];
    return k;
}

/* Runs the case's forward and backward on be: y[o] the outputs, g[i] the float inputs'
 * gradients (NULL for int inputs). Returns false when a call failed (reported). */
static bool run_on(un_ctx *ctx, un_backend *be, const lcase *c, double **y, double **g) {
    un_buffer *bx[UN_MAX_INPUTS] = {0}, *by[UN_MAX_OUTPUTS] = {0}, *bdy[UN_MAX_OUTPUTS] = {0};
    un_buffer *bg[UN_MAX_INPUTS] = {0};
    un_kt in[UN_MAX_INPUTS], out[UN_MAX_OUTPUTS], dout[UN_MAX_OUTPUTS], din[UN_MAX_INPUTS];
    bool ok = true;
    for (int i = 0; i < c->n_in; i++) {
        bx[i] = upload(ctx, be, c->in[i].dtype, c->x[i], c->nin[i]);
        if (c->in[i].dtype == UN_DT_FLOAT)
            bg[i] = upload(ctx, be, UN_DT_FLOAT, NULL, c->nin[i]);
        in[i] = kt_of(&c->in[i], bx[i]);
        din[i] = kt_of(&c->in[i], bg[i]);
        ok &= bx[i] != NULL;
    }
    for (int o = 0; o < c->n_out; o++) {
        by[o] = upload(ctx, be, UN_DT_FLOAT, NULL, c->nout[o]);
        bdy[o] = upload(ctx, be, UN_DT_FLOAT, c->dy[o], c->nout[o]);
        out[o] = kt_of(&c->out[o], by[o]);
        dout[o] = kt_of(&c->out[o], bdy[o]);
        ok &= by[o] && bdy[o];
    }
    un_status st = UN_ERR_INVALID;
    if (ok) {
        st = un_backend_op_forward(ctx, be, c->op, c->params, in, c->n_in, out, c->n_out, 0, c->off,
                                   c->full);
        if (st == UN_OK)
            st = un_backend_op_backward(ctx, be, c->op, c->params, in, c->n_in, out, c->n_out, dout,
                                        din, 0, c->off, c->full);
        if (st == UN_OK)
            st = un_backend_synchronize(ctx, be);
        EXPECT_OK(ctx, st);
        if (st != UN_OK)
            printf("    (%s on %s)\n", c->label, un_backend_name(be));
    }
    for (int o = 0; o < c->n_out && st == UN_OK; o++)
        download(ctx, by[o], y[o], c->nout[o]);
    for (int i = 0; i < c->n_in && st == UN_OK; i++)
        if (bg[i])
            download(ctx, bg[i], g[i], c->nin[i]);
    for (int i = 0; i < c->n_in; i++) {
        un_buffer_free(bx[i]);
        un_buffer_free(bg[i]);
    }
    for (int o = 0; o < c->n_out; o++) {
        un_buffer_free(by[o]);
        un_buffer_free(bdy[o]);
    }
    un_ctx_clear(ctx);
    return st == UN_OK;
}

/* sum_o dy[o] . reference(x)[o] for the piece-level instance, by the reference evaluator. */
static double ref_loss(un_ctx *ctx, const lcase *c, const un_infer *linf) {
    un_ptensor in[UN_MAX_INPUTS], out[UN_MAX_OUTPUTS];
    for (int i = 0; i < c->n_in; i++) {
        EXPECT_OK(ctx, un_ptensor_init(ctx, &in[i], &c->in[i]));
        for (int64_t e = 0; e < c->nin[i]; e++)
            in[i].data[e].f = c->x[i][e];
    }
    double l = 0;
    un_status st = un_eval_op(ctx, S, c->op, c->params, linf, UN_DOM_F64, in, c->n_in, out);
    EXPECT_OK(ctx, st);
    for (int o = 0; o < c->n_out && st == UN_OK; o++) {
        for (int64_t e = 0; e < c->nout[o]; e++)
            l += c->dy[o][e] * out[o].data[e].f;
        un_ptensor_deinit(&out[o]);
    }
    for (int i = 0; i < c->n_in; i++)
        un_ptensor_deinit(&in[i]);
    return l;
}

/* Checks g (the float64 CPU backend's input gradients) against central differences of the
 * reference evaluator on up to 24 elements of each float input. The op on a piece is an op
 * instance of its own (local parameters, local shapes); dropout keeps its mask (the reference
 * draws it from the seed parameter and the global index, which the local instance shares only
 * when the piece is whole, so sharded dropout is checked against the whole-tensor cases). */
static void check_fd(un_ctx *ctx, lcase *c, double **g) {
    un_infer linf; /* the piece as a whole tensor: no rules applied, the local parameters */
    memset(&linf, 0, sizeof linf);
    linf.n_out = c->n_out;
    for (int o = 0; o < c->n_out; o++)
        linf.out[o] = c->out[o];
    memcpy(linf.local, c->params, sizeof linf.local);
    for (int i = 0; i < c->n_in; i++) {
        if (c->in[i].dtype != UN_DT_FLOAT)
            continue;
        int64_t step = c->nin[i] <= 24 ? 1 : c->nin[i] / 24 + 1;
        for (int64_t e = 0; e < c->nin[i]; e += step) {
            double h = 1e-6, x0 = c->x[i][e];
            c->x[i][e] = x0 + h;
            double lp = ref_loss(ctx, c, &linf);
            c->x[i][e] = x0 - h;
            double lm = ref_loss(ctx, c, &linf);
            c->x[i][e] = x0;
            double num = (lp - lm) / (2 * h);
            n_fd_elems++;
            if (!(fabs(g[i][e] - num) <= 1e-6 * (1 + fabs(num)))) {
                EXPECT_TRUE(fabs(g[i][e] - num) <= 1e-6 * (1 + fabs(num)));
                printf("    %s: d input %d [%lld]: backend %.12g, central differences %.12g\n",
                       c->label, i, (long long)e, g[i][e], num);
                return;
            }
        }
    }
}

static double **outs_alloc(const int64_t *n, int k) {
    double **y =
        un_xcalloc(UN_MAX_INPUTS > UN_MAX_OUTPUTS ? UN_MAX_INPUTS : UN_MAX_OUTPUTS, sizeof *y);
    for (int j = 0; j < k; j++)
        y[j] = un_xcalloc((size_t)n[j] + 1, sizeof(double));
    return y;
}

static void outs_free(double **y, int k) {
    for (int j = 0; j < k; j++)
        free(y[j]);
    free(y);
}

/* Runs the piece-level case on every backend and compares. */
static void run_case(un_ctx *ctx, lcase *c, bool whole) {
    n_cases++;
    covered[c->op] = true;
    double **g64 = NULL;
    for (int b = 0; b < NB; b++) {
        if (!live[b]) {
            printf("  skip %s %s: %s\n", backends[b].name, c->label, why[b]);
            n_skips++;
            continue;
        }
        double **y = outs_alloc(c->nout, c->n_out), **g = outs_alloc(c->nin, c->n_in);
        if (run_on(ctx, live[b], c, y, g)) {
            double tol = backends[b].tol;
            ran_fwd[b]++;
            for (int o = 0; o < c->n_out; o++)
                for (int64_t e = 0; e < c->nout[o]; e++)
                    if (!close_to(y[o][e], c->ref[o][e], tol)) {
                        EXPECT_TRUE(close_to(y[o][e], c->ref[o][e], tol));
                        printf("    %s on %s: output %d [%lld]: %.12g, reference %.12g\n", c->label,
                               backends[b].name, o, (long long)e, y[o][e], c->ref[o][e]);
                        break;
                    }
            if (b == 0) {
                if (whole || c->op != UN_OP_DROPOUT)
                    check_fd(ctx, c, g);
                g64 = g;
                g = NULL;
            } else if (g64) {
                ran_bwd[b]++;
                for (int i = 0; i < c->n_in; i++)
                    for (int64_t e = 0; c->in[i].dtype == UN_DT_FLOAT && e < c->nin[i]; e++)
                        if (!close_to(g[i][e], g64[i][e], tol)) {
                            EXPECT_TRUE(close_to(g[i][e], g64[i][e], tol));
                            printf("    %s on %s: d input %d [%lld]: %.12g, cpu-f64 %.12g\n",
                                   c->label, backends[b].name, i, (long long)e, g[i][e], g64[i][e]);
                            break;
                        }
            }
        }
        outs_free(y, c->n_out);
        if (g)
            outs_free(g, c->n_in);
    }
    if (g64) {
        ran_bwd[0]++;
        outs_free(g64, c->n_in);
    }
}

/* ---- cases: an op instance in a layout --------------------------------------------------------
 */

/* The op on inputs of shapes sh (layouts included): reference outputs, then the pieces of up to
 * two device tuples run as piece-level cases on every backend. */
static void layout_case(un_ctx *ctx, un_op op, const un_param *p, int n_in, const un_shape *sh,
                        const int64_t *range, uint64_t seed, const char *label) {
    un_infer inf;
    un_status st = un_spec_infer(ctx, S, op, p, sh, n_in, label, &inf);
    EXPECT_OK(ctx, st);
    if (st != UN_OK) {
        un_ctx_clear(ctx);
        return;
    }
    un_rng rng;
    un_rng_seed(&rng, seed);
    un_ptensor in[UN_MAX_INPUTS], out[UN_MAX_OUTPUTS];
    for (int i = 0; i < n_in; i++) {
        int64_t n = un_shape_numel(&sh[i]);
        un_val *dense = un_xcalloc((size_t)n, sizeof *dense);
        un_ptensor_random_dense(UN_DOM_F64, sh[i].dtype, range[i], n, &rng, dense);
        EXPECT_OK(ctx, un_ptensor_init(ctx, &in[i], &sh[i]));
        EXPECT_OK(ctx, un_ptensor_scatter(ctx, &in[i], UN_DOM_F64, dense, &rng));
        free(dense);
    }
    st = un_eval_op(ctx, S, op, p, &inf, UN_DOM_F64, in, n_in, out);
    EXPECT_OK(ctx, st);
    if (st == UN_OK) {
        int64_t ntup = 1;
        for (int j = 0; j < inf.n_uses; j++)
            ntup *= inf.uses[j].degree;
        int32_t u[UN_MAX_USES] = {0}, blk[UN_MAX_DIMS], sum, copy;
        for (int64_t q = 0; q < ntup && q < 2; q++) {
            lcase c;
            memset(&c, 0, sizeof c);
            char lab[256];
            snprintf(lab, sizeof lab, "%s, tuple %lld", label, (long long)q);
            c.label = lab;
            c.op = op;
            c.params = inf.local;
            c.n_in = n_in;
            c.n_out = inf.n_out;
            for (int i = 0; i < n_in; i++) {
                un_infer_piece(&inf, u, false, i, blk, &sum, &copy);
                int64_t ld[UN_MAX_DIMS];
                un_shape_piece_dims(&sh[i], ld);
                c.in[i] = un_shape_make(sh[i].rank, ld, sh[i].dtype);
                c.nin[i] = un_shape_numel(&c.in[i]);
                c.x[i] = un_xmalloc(sizeof(double) * (size_t)c.nin[i]);
                const un_val *pv = un_ptensor_piece(&in[i], blk, sum, copy);
                for (int64_t e = 0; e < c.nin[i]; e++)
                    c.x[i][e] = pv[e].f;
                if (i == 0) {
                    un_shape_piece_offset(&sh[0], blk, c.off);
                    for (int d = 0; d < sh[0].rank; d++)
                        c.full[d] = sh[0].dim[d];
                }
            }
            for (int o = 0; o < c.n_out; o++) {
                un_infer_piece(&inf, u, true, o, blk, &sum, &copy);
                int64_t ld[UN_MAX_DIMS];
                un_shape_piece_dims(&inf.out[o], ld);
                c.out[o] = un_shape_make(inf.out[o].rank, ld, inf.out[o].dtype);
                c.nout[o] = un_shape_numel(&c.out[o]);
                c.ref[o] = un_xmalloc(sizeof(double) * (size_t)c.nout[o]);
                c.dy[o] = un_xmalloc(sizeof(double) * (size_t)c.nout[o]);
                const un_val *pv = un_ptensor_piece(&out[o], blk, sum, copy);
                for (int64_t e = 0; e < c.nout[o]; e++) {
                    c.ref[o][e] = pv[e].f;
                    c.dy[o][e] = 2 * un_rng_double(&rng) - 1;
                }
            }
            run_case(ctx, &c, ntup == 1);
            for (int i = 0; i < n_in; i++)
                free(c.x[i]);
            for (int o = 0; o < c.n_out; o++) {
                free(c.ref[o]);
                free(c.dy[o]);
            }
            for (int j = inf.n_uses - 1; j >= 0 && ++u[j] == inf.uses[j].degree; j--)
                u[j] = 0;
        }
        for (int o = 0; o < inf.n_out; o++)
            un_ptensor_deinit(&out[o]);
    }
    un_ctx_clear(ctx);
    for (int i = 0; i < n_in; i++)
        un_ptensor_deinit(&in[i]);
}

/* The op instance in its trivial layout, then in each layout a sharding rule of degree 2 (each
 * foreach value; the implicit copy rule too) gives it. */
static void op_case(un_ctx *ctx, un_op op, const un_param *p, int n_in, const un_shape *sh,
                    const int64_t *range, const char *label) {
    uint64_t seed = un_hash_bytes(label, strlen(label), 1234);
    layout_case(ctx, op, p, n_in, sh, range, seed, label);
    const un_op_spec *os = un_spec_op(S, op);
    char lab[200];
    for (int r = -1; r < os->n_rules; r++) {
        int nfe = r >= 0 && os->rules[r].foreach >= 0 ? sh[0].rank : 1;
        for (int fe = 0; fe < nfe; fe++) {
            un_shape l[UN_MAX_INPUTS];
            memcpy(l, sh, sizeof l[0] * (size_t)n_in);
            if (un_spec_rule_apply(NULL, S, op, p, r, fe, 2, l, n_in) != UN_OK)
                continue;
            un_infer inf;
            if (un_spec_infer(NULL, S, op, p, l, n_in, NULL, &inf) != UN_OK)
                continue;
            snprintf(lab, sizeof lab, "%s, rule %s%s%.0d", label,
                     r < 0 ? "copy" : os->rules[r].name, nfe > 1 ? " dim " : "", nfe > 1 ? fe : 0);
            if (nfe > 1 && fe == 0)
                snprintf(lab, sizeof lab, "%s, rule %s dim 0", label, os->rules[r].name);
            n_layout_cases++;
            layout_case(ctx, op, p, n_in, l, range,
                        seed + 1 + (uint64_t)(r + 1) * 16 + (uint64_t)fe, lab);
        }
    }
}

/* Extra shapes beyond the spec's examples: op, params "name=value ...", input dims "2,3;3,4". */
typedef struct xcase {
    const char *op, *params, *dims;
} xcase;

static const xcase extra[] = {
    {"linear", "activation=relu use_bias=true", "4,6,8;8,6;6"},
    {"linear", "activation=gelu use_bias=true", "8,4;4,6;6"},
    {"batch_matmul", "", "2,4,6,4;2,4,4,2"},
    {"ew_mul", "", "4,6;4,6"},
    {"softmax", "dim=0", "4,2,6"},
    {"layer_norm", "", "4,2,6;6;6"},
    {"batch_norm", "", "4,2,2,2;2;2"},
    {"dropout", "rate_pct=30 seed=5", "4,6"},
    {"conv2d", "groups=2 activation=relu use_bias=true", "2,4,6,6;4,2,3,3;4"},
    {"conv2d", "groups=4 stride_h=2 stride_w=2 pad_h=1 pad_w=1 activation=relu use_bias=true",
     "3,8,7,7;8,2,3,3;8"},
    {"pool2d", "type=max kernel_h=2 kernel_w=2 stride_h=2 stride_w=2", "2,2,4,4"},
    {"concat", "axis=1", "2,4,2;2,2,2"},
    {"transpose", "dim0=0 dim1=2", "2,4,6"},
    {"embedding", "aggr=sum", "4,2;6,4"},
    {"multihead_attention", "heads=2", "2,4,4;2,4,4;2,4,4;4,4;4,4;4,4;4,4"},
    {"reduce_mean", "dim=1 keep=true", "4,4,2"},
    {"cross_entropy", "", "4,6;4"},
};

/* Parses "name=value ..." (ints, true/false, enum names) into params. */
static bool parse_params(const un_op_spec *os, const char *text, un_param *p) {
    un_spec_param_defaults(os, p);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok;
         tok = strtok_r(NULL, " ", &save)) {
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
        if (strcmp(v, "true") == 0 || strcmp(v, "false") == 0) {
            p[k].v[0] = v[0] == 't';
            continue;
        }
        if (ps->type == UN_PT_ENUM) {
            bool found = false;
            for (int e = 0; e < ps->n_enum; e++)
                if (strcmp(ps->enums[e], v) == 0) {
                    p[k].v[0] = e;
                    found = true;
                }
            if (!found)
                return false;
            continue;
        }
        p[k].v[0] = strtoll(v, NULL, 10);
    }
    return true;
}

/* Input shapes "2,3;3,4"; int inputs get their range (embedding rows, classes). */
static int parse_dims(const un_op_spec *os, const char *dims, un_shape *sh, int64_t *range) {
    int n = 0, r = 0;
    int64_t d[UN_MAX_DIMS];
    for (const char *s = dims;;) {
        char *end;
        d[r++] = strtoll(s, &end, 10);
        s = end;
        if (*s == ',') {
            s++;
            continue;
        }
        sh[n] = un_shape_make(r, d, os->inputs[n].dtype);
        range[n] = 0;
        n++;
        r = 0;
        if (!*s)
            break;
        s++;
    }
    if (os->op == UN_OP_EMBEDDING)
        range[0] = sh[1].dim[0];
    if (os->op == UN_OP_CROSS_ENTROPY)
        range[1] = sh[0].dim[1];
    return n;
}

/* ---- tests ------------------------------------------------------------------------------------
 */

static void backends_open(un_ctx *ctx) {
    for (int b = 0; b < NB; b++) {
        un_status st = backends[b].make(ctx, backends[b].prec, &live[b]);
        if (st != UN_OK)
            snprintf(why[b], sizeof why[b], "%s (%s)", un_status_str(st), un_ctx_errmsg(ctx));
        un_ctx_clear(ctx);
    }
    /* The CPU backends must be there: the suite is meaningless without them. */
    EXPECT_TRUE(live[0] != NULL && live[1] != NULL);
}

static void backends_close(void) {
    for (int b = 0; b < NB; b++) {
        un_backend_free(live[b]);
        live[b] = NULL;
    }
}

static void test_every_op(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    backends_open(ctx);
    char label[200];
    for (int op = 0; op < UN_OP_COUNT; op++) {
        if (un_op_kind_of((un_op)op) != UN_OPK_REGULAR)
            continue;
        const un_op_spec *os = un_spec_op(S, (un_op)op);
        for (int e = 0; e < os->n_examples; e++) {
            const un_example *ex = &os->examples[e];
            snprintf(label, sizeof label, "%s example %d", os->name, e);
            op_case(ctx, (un_op)op, ex->params, ex->n_in, ex->in, ex->range, label);
        }
    }
    for (size_t k = 0; k < sizeof extra / sizeof extra[0]; k++) {
        un_op op;
        EXPECT_TRUE(un_op_from_name(extra[k].op, &op));
        const un_op_spec *os = un_spec_op(S, op);
        un_param p[UN_MAX_PARAMS];
        un_shape sh[UN_MAX_INPUTS];
        int64_t range[UN_MAX_INPUTS];
        EXPECT_TRUE(parse_params(os, extra[k].params, p));
        int n_in = parse_dims(os, extra[k].dims, sh, range);
        snprintf(label, sizeof label, "%s [%s] %s", extra[k].op, extra[k].params, extra[k].dims);
        op_case(ctx, op, p, n_in, sh, range, label);
    }
    /* Every regular op ran, in more than one layout somewhere. */
    for (int op = 0; op < UN_OP_COUNT; op++)
        if (un_op_kind_of((un_op)op) == UN_OPK_REGULAR && !covered[op]) {
            EXPECT_TRUE(covered[op]);
            printf("    %s: no case\n", un_op_name((un_op)op));
        }
    EXPECT_TRUE(n_layout_cases > 0);
    printf("    %d piece cases (%d layouts from sharding rules), %d gradient elements by central "
           "differences, %d skipped\n",
           n_cases, n_layout_cases, n_fd_elems, n_skips);
    for (int b = 0; b < NB; b++)
        if (live[b])
            printf("    %s: %d forward, %d backward checked\n", backends[b].name, ran_fwd[b],
                   ran_bwd[b]);
    backends_close();
    un_ctx_free(ctx);
}

/* A wrong kernel result must be caught: the same comparison with one output value perturbed. */
static void test_planted_error(void) {
    EXPECT_TRUE(!close_to(1.0 + 3e-9, 1.0, 1e-9));
    EXPECT_TRUE(!close_to(1.0 + 3e-4, 1.0, 1e-4));
    EXPECT_TRUE(close_to(1.0 + 1e-10, 1.0, 1e-9));
    /* ... and through the whole path: relu on a backend compared with a wrong reference. */
    un_ctx *ctx = un_ctx_new(NULL);
    un_backend *be = NULL;
    EXPECT_OK(ctx, un_backend_cpu_new(ctx, UN_PREC_F64, 1, &be));
    double x[4] = {-1, 0.5, 2, -3}, dy[4] = {1, 1, 1, 1}, y[4], g[4];
    lcase c;
    memset(&c, 0, sizeof c);
    c.op = UN_OP_RELU;
    un_param p[UN_MAX_PARAMS];
    un_spec_param_defaults(un_spec_op(S, UN_OP_RELU), p);
    c.params = p;
    c.n_in = c.n_out = 1;
    c.in[0] = c.out[0] = un_shape_make(1, (int64_t[]){4}, UN_DT_FLOAT);
    c.nin[0] = c.nout[0] = 4;
    c.x[0] = x;
    c.dy[0] = dy;
    c.label = "relu (planted)";
    double *ys[UN_MAX_OUTPUTS] = {y}, *gs[UN_MAX_INPUTS] = {g};
    EXPECT_TRUE(run_on(ctx, be, &c, ys, gs));
    EXPECT_TRUE(y[0] == 0 && y[1] == 0.5 && g[0] == 0 && g[2] == 1);
    double wrong = 0.5 + 1e-6;
    EXPECT_TRUE(!close_to(y[1], wrong, 1e-9));
    un_backend_free(be);
    un_ctx_free(ctx);
}

/* Buffers: sized, zeroed, status-returning, copies within and between backends. */
static void test_buffers(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_backend *a = NULL, *b = NULL;
    EXPECT_OK(ctx, un_backend_cpu_new(ctx, UN_PREC_F32, 1, &a));
    EXPECT_OK(ctx, un_backend_cpu_new(ctx, UN_PREC_F64, 2, &b));
    un_buffer *x = NULL, *y = NULL, *z = NULL;
    EXPECT_OK(ctx, un_buffer_new(ctx, a, 64, &x));
    EXPECT_OK(ctx, un_buffer_new(ctx, a, 64, &y));
    EXPECT_OK(ctx, un_buffer_new(ctx, b, 32, &z));
    EXPECT_EQ(un_buffer_size(x), 64);
    EXPECT_TRUE(un_buffer_backend(z) == b);
    unsigned char h[64], r[64];
    EXPECT_OK(ctx, un_buffer_read(ctx, x, 0, r, 64));
    bool zero = true;
    for (int i = 0; i < 64; i++)
        zero &= r[i] == 0;
    EXPECT_TRUE(zero);
    for (int i = 0; i < 64; i++)
        h[i] = (unsigned char)(i * 7 + 1);
    EXPECT_OK(ctx, un_buffer_write(ctx, x, 8, h, 40));
    EXPECT_OK(ctx, un_buffer_copy(ctx, y, 0, x, 8, 40));  /* same backend */
    EXPECT_OK(ctx, un_buffer_copy(ctx, z, 4, y, 10, 20)); /* across backends */
    EXPECT_OK(ctx, un_buffer_read(ctx, z, 0, r, 32));
    EXPECT_TRUE(r[0] == 0 && r[3] == 0 && memcmp(r + 4, h + 10, 20) == 0 && r[24] == 0);
    EXPECT_OK(ctx, un_buffer_zero(ctx, z, 4, 4));
    EXPECT_OK(ctx, un_buffer_read(ctx, z, 0, r, 12));
    EXPECT_TRUE(r[4] == 0 && r[7] == 0 && r[8] == h[14]);
#ifndef __SANITIZE_ADDRESS__ /* ASan aborts on such a request instead of returning NULL */
    /* An impossible size is a status, not a crash. */
    un_buffer *huge = NULL;
    EXPECT_EQ(un_buffer_new(ctx, a, (size_t)1 << 62, &huge), UN_ERR_NOMEM);
    EXPECT_TRUE(huge == NULL && strstr(un_ctx_errmsg(ctx), "cannot allocate") != NULL);
    un_ctx_clear(ctx);
#endif
    /* The CUDA constructor exists in every build; without CUDA it is one clear error. */
    un_backend *cu = NULL;
    un_status st = un_backend_cuda_new(ctx, UN_PREC_F32, 0, &cu);
    if (st != UN_OK) {
        EXPECT_EQ(st, UN_ERR_UNAVAILABLE);
        EXPECT_TRUE(cu == NULL && strstr(un_ctx_errmsg(ctx), "cuda") != NULL);
    }
    un_backend_free(cu);
    un_buffer_free(x);
    un_buffer_free(y);
    un_buffer_free(z);
    un_buffer_free(NULL);
    un_backend_free(a);
    un_backend_free(b);
    un_ctx_free(ctx);
}

/* The loss and the optimizer step through the backend equal the host paths. */
static void test_loss_and_optim(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_backend *be = NULL;
    EXPECT_OK(ctx, un_backend_cpu_new(ctx, UN_PREC_F64, 1, &be));
    /* CE on rows 2..3 of a [4, 3] output: loss sum and gradient / 4 rows. */
    double logits[6] = {0.5, -1, 2, 0, 0, 0}, grad[6];
    int64_t labels[4] = {0, 1, 2, 1};
    un_kt y = {UN_DT_FLOAT, 2, {2, 3}, logits}, gy = {UN_DT_FLOAT, 2, {2, 3}, grad};
    un_kt t = {UN_DT_INT, 1, {4}, labels};
    double loss;
    EXPECT_OK(ctx, un_backend_loss(ctx, be, UN_LOSS_CE, &y, (int64_t[]){2, 0}, (int64_t[]){4, 3},
                                   &t, &gy, &loss));
    double lse0 = log(exp(0.5) + exp(-1) + exp(2)), lse1 = log(3.0);
    EXPECT_NEAR(loss, (lse0 - 2) + (lse1 - 0), 1e-12);
    EXPECT_NEAR(grad[2], (exp(2 - lse0) - 1) / 4, 1e-12);
    EXPECT_NEAR(grad[3], (1.0 / 3) / 4, 1e-12);
    /* A piece holding part of a row cannot take cross-entropy: one clear error. */
    un_kt half = {UN_DT_FLOAT, 2, {2, 1}, logits};
    EXPECT_EQ(un_backend_loss(ctx, be, UN_LOSS_CE, &half, (int64_t[]){0, 0}, (int64_t[]){4, 3}, &t,
                              &gy, &loss),
              UN_ERR_INVALID);
    un_ctx_clear(ctx);
    /* MSE of block [1..2] x [1] of a [3, 2] output. */
    double v[2] = {1, 2}, tgt[6] = {0, 0, 0, 0.5, 0, 3}, gm[2];
    un_kt ym = {UN_DT_FLOAT, 2, {2, 1}, v}, gmk = {UN_DT_FLOAT, 2, {2, 1}, gm};
    un_kt tm = {UN_DT_FLOAT, 2, {3, 2}, tgt};
    EXPECT_OK(ctx, un_backend_loss(ctx, be, UN_LOSS_MSE, &ym, (int64_t[]){1, 1}, (int64_t[]){3, 2},
                                   &tm, &gmk, &loss));
    EXPECT_NEAR(loss, 0.25 + 1, 1e-15);
    EXPECT_NEAR(gm[0], 2 * 0.5 / 6, 1e-15);
    EXPECT_NEAR(gm[1], 2 * -1.0 / 6, 1e-15);
    /* Adam: three steps on the backend equal three host steps. */
    un_optim *oh = NULL, *ob = NULL;
    un_optim_params p = un_optim_params_default(UN_OPTIM_ADAM);
    EXPECT_OK(ctx, un_optim_new(ctx, p, 3, UN_PREC_F64, &oh));
    EXPECT_OK(ctx, un_optim_new_on(ctx, p, 3, be, &ob));
    double wh[3] = {1, -2, 0.5}, wb[3] = {1, -2, 0.5}, gg[3] = {0.3, -0.1, 2};
    un_buffer *bw = NULL, *bg = NULL;
    EXPECT_OK(ctx, un_buffer_new(ctx, be, sizeof wb, &bw));
    EXPECT_OK(ctx, un_buffer_new(ctx, be, sizeof gg, &bg));
    EXPECT_OK(ctx, un_buffer_write(ctx, bw, 0, wb, sizeof wb));
    EXPECT_OK(ctx, un_buffer_write(ctx, bg, 0, gg, sizeof gg));
    for (int s = 0; s < 3; s++) {
        un_optim_step(oh, wh, gg);
        EXPECT_OK(ctx, un_optim_step_on(ctx, ob, be, un_buffer_at(bw, 0), un_buffer_at(bg, 0)));
    }
    EXPECT_OK(ctx, un_buffer_read(ctx, bw, 0, wb, sizeof wb));
    EXPECT_TRUE(memcmp(wh, wb, sizeof wh) == 0 && wh[0] != 1);
    EXPECT_EQ(un_optim_steps(ob), 3);
    /* Bad optimizer parameters are refused on a backend too. */
    un_optim *bad = NULL;
    p.lr = -1;
    EXPECT_EQ(un_optim_new_on(ctx, p, 3, be, &bad), UN_ERR_INVALID);
    EXPECT_TRUE(bad == NULL);
    un_buffer_free(bw);
    un_buffer_free(bg);
    un_optim_free(oh);
    un_optim_free(ob);
    un_backend_free(be);
    un_ctx_free(ctx);
}

/* The sharded update (un_optim_step_segs): segments of every length 1-17 with gaps between them
 * (the AVX-512 Adam's full blocks and masked last blocks), state compact, on every live backend,
 * Adam and SGD, three steps: the CPU and opaque backends equal a per-element reference in their
 * precision (the scalar loop's arithmetic) bit for bit, CUDA within its tolerance; the gaps'
 * elements are not touched. */
static void test_optim_segments(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    backends_open(ctx);
    enum { NSEG = 17, CAP = 256 };
    un_optim_seg segs[NSEG];
    int64_t off = 0, n = 0;
    for (int k = 0; k < NSEG; k++) { /* lengths 17, 1, 16, 2, ... : every one of 1-17 */
        int64_t len = k % 2 ? (k + 1) / 2 : NSEG - k / 2;
        segs[k] = (un_optim_seg){off + k % 3, len};
        off += k % 3 + len;
        n += len;
    }
    UN_ASSERT(off <= CAP);
    for (int algo = 0; algo < 2; algo++) {
        un_optim_params p = un_optim_params_default(algo ? UN_OPTIM_SGD : UN_OPTIM_ADAM);
        for (int b = 0; b < NB; b++) {
            if (!live[b])
                continue;
            bool f32 = backends[b].prec == UN_PREC_F32,
                 exact = strncmp(backends[b].name, "cuda", 4);
            size_t es = f32 ? sizeof(float) : sizeof(double);
            double w[CAP], g[CAP], m[CAP] = {0}, v[CAP] = {0}, got[CAP];
            for (int i = 0; i < CAP; i++) {
                w[i] = f32 ? (float)(0.5 - 0.01 * i) : 0.5 - 0.01 * i;
                g[i] = f32 ? (float)(0.3 * sin(i)) : 0.3 * sin(i);
            }
            char raw[CAP * sizeof(double)];
            un_optim *o = NULL;
            un_buffer *bw = NULL, *bg = NULL;
            EXPECT_OK(ctx, un_optim_new_on(ctx, p, n, live[b], &o));
            EXPECT_OK(ctx, un_buffer_new(ctx, live[b], CAP * es, &bw));
            EXPECT_OK(ctx, un_buffer_new(ctx, live[b], CAP * es, &bg));
            if (!o || !bw || !bg) {
                un_optim_free(o), un_buffer_free(bw), un_buffer_free(bg);
                continue;
            }
            for (int pass = 0; pass < 2; pass++) { /* w, then g */
                const double *src = pass ? g : w;
                for (int i = 0; i < CAP; i++)
                    if (f32)
                        ((float *)raw)[i] = (float)src[i];
                    else
                        ((double *)raw)[i] = src[i];
                EXPECT_OK(ctx, un_buffer_write(ctx, pass ? bg : bw, 0, raw, CAP * es));
            }
            for (int64_t t = 1; t <= 3; t++) {
                EXPECT_OK(ctx, un_optim_step_segs(ctx, o, live[b], un_buffer_at(bw, 0),
                                                  un_buffer_at(bg, 0), segs, NSEG));
                double c1 = 1 - pow(p.beta1, (double)t), c2 = 1 - pow(p.beta2, (double)t);
                double step = p.lr * sqrt(c2) / c1, eps = p.eps * sqrt(c2);
                /* the reference keeps each element's state at its weight's index */
                for (int k = 0; k < NSEG; k++)
                    for (int64_t i = segs[k].off; i < segs[k].off + segs[k].n; i++) {
#define RND(x) (f32 ? (double)(float)(x) : (x))
                        if (algo) {
                            m[i] = RND(p.momentum * m[i] + g[i]);
                            w[i] = RND(w[i] - p.lr * m[i]);
                        } else {
                            m[i] = RND(p.beta1 * m[i] + (1 - p.beta1) * g[i]);
                            v[i] = RND(p.beta2 * v[i] + (1 - p.beta2) * g[i] * g[i]);
                            w[i] = RND(w[i] - step * m[i] / (sqrt(v[i]) + eps));
                        }
#undef RND
                    }
            }
            EXPECT_OK(ctx, un_buffer_read(ctx, bw, 0, raw, CAP * es));
            int bad = 0;
            for (int i = 0; i < CAP; i++) {
                got[i] = f32 ? (double)((float *)raw)[i] : ((double *)raw)[i];
                bad += exact ? got[i] != w[i] : !close_to(got[i], w[i], backends[b].tol);
            }
            if (bad)
                printf("    %s %s: %d of %d weights differ from the reference\n", backends[b].name,
                       algo ? "sgd" : "adam", bad, CAP);
            EXPECT_EQ(bad, 0);
            EXPECT_EQ(un_optim_steps(o), 3);
            un_optim_free(o);
            un_buffer_free(bw);
            un_buffer_free(bg);
        }
    }
    backends_close();
    un_ctx_free(ctx);
}

/* ---- the opaque backend ------------------------------------------------------------------------
 */

/* Runs fn in a child process; returns its wait status. */
static int in_child(void (*fn)(void)) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY); /* the assertion's message is expected */
        if (devnull >= 0)
            dup2(devnull, 2);
        fn();
        _exit(0);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    return ws;
}

static un_buffer *child_buf(un_backend **be) {
    un_buffer *b = NULL;
    if (un_backend_opaque_new(NULL, UN_PREC_F32, 1, be) != UN_OK ||
        un_buffer_new(NULL, *be, 64, &b) != UN_OK)
        _exit(3);
    return b;
}

static void deref_device_address(void) { /* host code reading backend memory directly */
    un_backend *be;
    un_buffer *b = child_buf(&be);
    volatile float *p = un_buffer_at(b, 0);
    float x = p[1];
    (void)x;
}

static void host_pointer_as_device(void) { /* a host array given where a device address belongs */
    un_backend *be;
    un_buffer *b = child_buf(&be);
    float host[16] = {0};
    un_region r;
    memset(&r, 0, sizeof r);
    r.rank = 1;
    r.len[0] = r.src_dim[0] = r.dst_dim[0] = 16;
    un_backend_copy_region(be, un_buffer_at(b, 0), host, sizeof(float), &r, false);
}

static void read_past_buffer(void) { /* a range beyond what was allocated */
    un_backend *be;
    un_buffer *b = child_buf(&be);
    float host[64];
    un_backend_read(NULL, be, host, un_buffer_at(b, 0), 64 * sizeof(float));
}

static void through_the_interface(void) { /* the same memory through the buffer API: fine */
    un_backend *be;
    un_buffer *b = child_buf(&be);
    float w[4] = {1, 2, 3, 4}, r[4] = {0};
    if (un_buffer_write(NULL, b, 0, w, sizeof w) != UN_OK ||
        un_buffer_read(NULL, b, 0, r, sizeof r) != UN_OK || memcmp(w, r, sizeof w) != 0)
        _exit(4);
    un_buffer_free(b);
    un_backend_free(be);
}

/* Whether a child was stopped by signal sig (a sanitizer build reports it and exits non-zero
 * instead; exit status 3 is a failed set-up, not a detection). */
static bool stopped(int ws, int sig) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__) || defined(__SANITIZE_THREAD__)
    if (WIFEXITED(ws) && WEXITSTATUS(ws) != 0 && WEXITSTATUS(ws) != 3)
        return true;
#endif
    return WIFSIGNALED(ws) && WTERMSIG(ws) == sig;
}

/* Host access to the opaque backend's memory is caught: a dereference faults, a host pointer or
 * a range beyond the buffers given to a slot fails its assertion; the buffer API works. */
static void test_opaque_guards(void) {
    int ws = in_child(deref_device_address);
    test__check(stopped(ws, SIGSEGV), TEST__AT,
                "reading an opaque device address on the host: wait status %#x, not SIGSEGV", ws);
    ws = in_child(host_pointer_as_device);
    test__check(stopped(ws, SIGABRT), TEST__AT,
                "a host pointer as a device address: wait status %#x, not SIGABRT", ws);
    ws = in_child(read_past_buffer);
    test__check(stopped(ws, SIGABRT), TEST__AT,
                "a read past every buffer: wait status %#x, not SIGABRT", ws);
    ws = in_child(through_the_interface);
    test__check(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, TEST__AT,
                "the buffer API on the opaque backend: wait status %#x", ws);
    un_ctx *ctx = un_ctx_new(NULL);
    un_backend *be = NULL;
    EXPECT_OK(ctx, un_backend_opaque_new(ctx, UN_PREC_F64, 1, &be));
    EXPECT_TRUE(!un_backend_host_visible(be));
    EXPECT_STR_EQ(un_backend_name(be), "opaque-f64");
    /* across backends: opaque -> cpu -> opaque through un_buffer_copy */
    un_backend *cpu = NULL;
    EXPECT_OK(ctx, un_backend_cpu_new(ctx, UN_PREC_F64, 1, &cpu));
    un_buffer *a = NULL, *c = NULL, *d = NULL;
    double v[3] = {1.5, -2, 3}, r[3] = {0};
    EXPECT_OK(ctx, un_buffer_new(ctx, be, sizeof v, &a));
    EXPECT_OK(ctx, un_buffer_new(ctx, cpu, sizeof v, &c));
    EXPECT_OK(ctx, un_buffer_new(ctx, be, sizeof v, &d));
    EXPECT_OK(ctx, un_buffer_write(ctx, a, 0, v, sizeof v));
    EXPECT_OK(ctx, un_buffer_copy(ctx, c, 0, a, 0, sizeof v));
    EXPECT_OK(ctx, un_buffer_copy(ctx, d, 0, c, 0, sizeof v));
    EXPECT_OK(ctx, un_buffer_read(ctx, d, 0, r, sizeof r));
    EXPECT_TRUE(memcmp(v, r, sizeof v) == 0);
    un_buffer_free(a);
    un_buffer_free(c);
    un_buffer_free(d);
    un_backend_free(cpu);
    un_backend_free(be);
    un_ctx_free(ctx);
}

/* The backend timer: the time of the work between start and stop, on every backend there is
 * (host clock on cpu and opaque, CUDA events on a GPU): a 256^3 product takes more than nothing
 * and less than a few seconds, and twice the work takes longer than none. */
static void test_timer(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    for (int b = 0; b < NB; b++) {
        un_backend *be = NULL;
        if (backends[b].make(ctx, UN_PREC_F32, &be) != UN_OK) {
            printf("  skip timer on %s: %s\n", backends[b].name, un_ctx_errmsg(ctx));
            un_ctx_clear(ctx);
            continue;
        }
        un_param lp[UN_MAX_PARAMS];
        un_spec_param_defaults(un_spec_op(S, UN_OP_LINEAR), lp);
        un_shape sh = un_shape_make(2, (int64_t[]){256, 256}, UN_DT_FLOAT);
        double *x = un_xcalloc(256 * 256, sizeof *x);
        for (int i = 0; i < 256 * 256; i++)
            x[i] = (double)(i % 7) - 3;
        un_buffer *a = upload(ctx, be, UN_DT_FLOAT, x, 256 * 256);
        un_buffer *w = upload(ctx, be, UN_DT_FLOAT, x, 256 * 256);
        un_buffer *y = upload(ctx, be, UN_DT_FLOAT, NULL, 256 * 256);
        un_kt in[2] = {kt_of(&sh, a), kt_of(&sh, w)}, out = kt_of(&sh, y);
        un_backend_timer tm;
        double empty = -1, work = -1;
        EXPECT_OK(ctx, un_backend_timer_start(ctx, be, &tm));
        EXPECT_OK(ctx, un_backend_timer_stop(ctx, be, &tm, &empty));
        EXPECT_OK(ctx, un_backend_timer_start(ctx, be, &tm));
        for (int r = 0; r < 4; r++)
            EXPECT_OK(ctx, un_backend_op_forward(ctx, be, UN_OP_LINEAR, lp, in, 2, &out, 1, 0, NULL,
                                                 NULL));
        EXPECT_OK(ctx, un_backend_timer_stop(ctx, be, &tm, &work));
        test__check(empty >= 0 && work > 0 && work < 5 && work > empty, TEST__AT,
                    "timer on %s: nothing %.3g s, four 256^3 products %.3g s", backends[b].name,
                    empty, work);
        un_buffer_free(a);
        un_buffer_free(w);
        un_buffer_free(y);
        free(x);
        un_backend_free(be);
    }
    un_ctx_free(ctx);
}

/* The same losses from backend `other` and the CPU backend (tol 0: bit for bit, else relative to
 * 1 + |cpu|): returns false (reported) when they differ or one run failed where the other did
 * not. */
static bool same_run(const char *other, double tol, const char *model, const char *strategy,
                     int devices, int steps) {
    un_train_result rc, ro;
    char ec[512], eo[512];
    memset(&rc, 0, sizeof rc);
    memset(&ro, 0, sizeof ro);
    un_status sc =
        test_train_on("cpu", model, strategy, devices, steps, NULL, NULL, &rc, ec, sizeof ec);
    un_status so =
        test_train_on(other, model, strategy, devices, steps, NULL, NULL, &ro, eo, sizeof eo);
    bool ok = sc == so;
    for (int i = 0; ok && sc == UN_OK && i < steps; i++)
        ok = tol == 0 ? memcmp(&rc.losses[i], &ro.losses[i], sizeof(double)) == 0
                      : close_to(ro.losses[i], rc.losses[i], tol);
    test__check(ok, TEST__AT, "%s %s on %d: cpu %s (%s) %.9g, %s %s (%s) %.9g", model, strategy,
                devices, un_status_str(sc), ec, sc == UN_OK ? rc.losses[steps - 1] : 0, other,
                un_status_str(so), eo, so == UN_OK ? ro.losses[steps - 1] : 0);
    un_train_result_deinit(&rc);
    un_train_result_deinit(&ro);
    return ok && sc == UN_OK;
}

/* Every tiny zoo model trains on the opaque backend to exactly the CPU backend's losses: serial,
 * data parallel on 2 devices and the tensor plan on 2 (where the model allows one), the mixed
 * data x tensor plans of tests/data/plans, and a checkpoint saved on the opaque backend and loaded
 * on the CPU one continues the uninterrupted run exactly. */
static int train_all(const char *other, double tol) {
    int n, ran = 0;
    const char *const *names = un_zoo_names(&n);
    for (int i = 0; i < n; i++) {
        ran += same_run(other, tol, names[i], "serial", 1, 3);
        ran += same_run(other, tol, names[i], "data", 2, 3);
        ran += same_run(other, tol, names[i], "tensor", 2, 3);
    }
    const char *ms = "tests/data/plans/mlp_sample.json";
    ran += same_run(other, tol, ms, "tests/data/plans/mlp_mixed2.json", 2, 3);
    ran += same_run(other, tol, ms, "tests/data/plans/mlp_mixed4.json", 4, 3);
    EXPECT_TRUE(ran >= 2 * n + 2);
    return ran;
}

static void test_opaque_training(void) {
    printf("    %d runs on the opaque backend equal the cpu backend's bit for bit\n",
           train_all("opaque", 0));
    /* checkpoints: 2 steps saved on the opaque backend, 2 more loaded on cpu = 4 steps on cpu */
    char ck[256];
    snprintf(ck, sizeof ck, "/tmp/un_opaque_%d.ckpt", (int)getpid());
    un_train_result r4, ra, rb;
    char e[512];
    memset(&r4, 0, sizeof r4);
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    EXPECT_OK(NULL,
              test_train_on("cpu", "transformer", "data", 2, 4, NULL, NULL, &r4, e, sizeof e));
    EXPECT_OK(NULL,
              test_train_on("opaque", "transformer", "data", 2, 2, ck, NULL, &ra, e, sizeof e));
    EXPECT_OK(NULL,
              test_train_on("cpu", "transformer", "tensor", 2, 2, NULL, ck, &rb, e, sizeof e));
    if (r4.losses && ra.losses && rb.losses) {
        EXPECT_TRUE(memcmp(r4.losses, ra.losses, 2 * sizeof(double)) == 0);
        for (int s = 0; s < 2; s++)
            EXPECT_NEAR(rb.losses[s], r4.losses[2 + s], 1e-5);
    }
    /* ... and the other way: saved on cpu, loaded on the opaque backend */
    un_train_result_deinit(&ra);
    un_train_result_deinit(&rb);
    EXPECT_OK(NULL, test_train_on("cpu", "transformer", "data", 2, 2, ck, NULL, &ra, e, sizeof e));
    EXPECT_OK(NULL,
              test_train_on("opaque", "transformer", "data", 2, 2, NULL, ck, &rb, e, sizeof e));
    if (r4.losses && rb.losses)
        EXPECT_TRUE(memcmp(rb.losses, r4.losses + 2, 2 * sizeof(double)) == 0);
    remove(ck);
    un_train_result_deinit(&r4);
    un_train_result_deinit(&ra);
    un_train_result_deinit(&rb);
}

/* The same runs on CUDA (one GPU shared by the ranks when there is one): the CPU's losses within
 * 1e-3 (float32, other summation orders). One skip line without a GPU. */
static void test_cuda_training(void) {
    const char *reason = NULL;
    if (un_backend_cuda_devices(&reason) == 0) {
        printf("  skip cuda training: %s\n", reason ? reason : "no GPU");
        return;
    }
    printf("    %d runs on cuda within 1e-3 of the cpu backend's losses\n",
           train_all("cuda", 1e-3));
}

/* The element of a region's source (or destination) at its coordinate c: the flat index. */
static int64_t region_at(const un_region *r, const int64_t *c, bool dst) {
    int64_t at = 0;
    for (int i = 0; i < r->rank; i++)
        at = at * (dst ? r->dst_dim[i] : r->src_dim[i]) + (dst ? r->dst_off[i] : r->src_off[i]) +
             c[i];
    return at;
}

/* un_region_copy_host against an element at a time: 400 random regions of rank 1-4 (dims 1-5,
 * each dim whole on both sides half the time, so trailing dims fold into one row, or not, at
 * every depth), copied and accumulated in both precisions; elements outside the region stay. */
static void test_region_copy(void) {
    un_rng seed;
    un_rng_seed(&seed, 12345);
    int bad = 0, folded = 0;
    for (int it = 0; it < 400; it++) {
        un_region r;
        memset(&r, 0, sizeof r);
        r.rank = 1 + (int)un_rng_below(&seed, 4);
        int64_t ns = 1, nd = 1, n = 1;
        for (int i = 0; i < r.rank; i++) {
            bool whole = un_rng_below(&seed, 2);
            r.len[i] = 1 + (int64_t)un_rng_below(&seed, 5);
            r.src_dim[i] = r.len[i] + (whole ? 0 : (int64_t)un_rng_below(&seed, 3));
            r.dst_dim[i] = r.len[i] + (whole ? 0 : (int64_t)un_rng_below(&seed, 3));
            r.src_off[i] = (int64_t)un_rng_below(&seed, (uint64_t)(r.src_dim[i] - r.len[i] + 1));
            r.dst_off[i] = (int64_t)un_rng_below(&seed, (uint64_t)(r.dst_dim[i] - r.len[i] + 1));
            ns *= r.src_dim[i], nd *= r.dst_dim[i], n *= r.len[i];
        }
        folded += r.rank > 1 && r.len[r.rank - 1] == r.src_dim[r.rank - 1] &&
                  r.len[r.rank - 1] == r.dst_dim[r.rank - 1];
        for (int pr = 0; pr < 2; pr++)
            for (int acc = 0; acc < 2; acc++) {
                size_t es = pr ? sizeof(double) : sizeof(float);
                double *src = un_xcalloc((size_t)ns, sizeof *src),
                       *want = un_xcalloc((size_t)nd, sizeof *want);
                char *sb = un_xcalloc((size_t)ns, es), *db = un_xcalloc((size_t)nd, es);
                for (int64_t k = 0; k < ns; k++) {
                    src[k] = (double)(k + 1);
                    pr ? (void)(((double *)sb)[k] = src[k])
                       : (void)(((float *)sb)[k] = (float)src[k]);
                }
                for (int64_t k = 0; k < nd; k++) {
                    want[k] = -(double)k;
                    pr ? (void)(((double *)db)[k] = want[k])
                       : (void)(((float *)db)[k] = (float)want[k]);
                }
                int64_t c[UN_MAX_DIMS] = {0};
                for (int64_t q = 0; q < n; q++) {
                    int64_t t = region_at(&r, c, true);
                    want[t] = (acc ? want[t] : 0) + src[region_at(&r, c, false)];
                    for (int i = r.rank - 1; i >= 0 && ++c[i] == r.len[i]; i--)
                        c[i] = 0;
                }
                un_region_copy_host(pr ? UN_PREC_F64 : UN_PREC_F32, db, sb, es, &r, acc);
                for (int64_t k = 0; k < nd; k++) {
                    double got = pr ? ((double *)db)[k] : (double)((float *)db)[k];
                    bad += got != want[k];
                }
                free(src), free(want), free(sb), free(db);
            }
    }
    EXPECT_TRUE(bad == 0);
    EXPECT_TRUE(folded > 50); /* the folding path ran */
    printf("    400 regions (%d with a trailing dim to fold), copy and add, f32 and f64: %d wrong "
           "elements\n",
           folded, bad);
}

int main(void) {
    static const test_case cases[] = {
        {"region_copy", test_region_copy},       {"buffers", test_buffers},
        {"opaque_guards", test_opaque_guards},   {"opaque_training", test_opaque_training},
        {"cuda_training", test_cuda_training},   {"timer", test_timer},
        {"loss_and_optim", test_loss_and_optim}, {"optim_segments", test_optim_segments},
        {"planted_error", test_planted_error},   {"every_op", test_every_op},
    };
    return TEST_RUN_WITH_SPEC(cases, &S);
}
