/* profile.c - timing operators on their piece shapes with the CPU or CUDA backend, into the op-cost
 * cache. */
#include "search/profile.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "runtime/backend.h"
#include "runtime/backend_cuda.h"
#include "runtime/blas.h"
#include "runtime/comm.h"
#include "runtime/optim.h"
#include "runtime/strategy.h"
#include "runtime/train.h"
#include "search/sim.h"

un_profile_params un_profile_params_default(void) {
    return (un_profile_params){.device = "cpu",
                               .threads = 1,
                               .f64 = false,
                               .warmup = 2,
                               .min_seconds = 0.02,
                               .min_reps = 5,
                               .optimizer = "adam",
                               .cuda_device = -1,
                               .rounds = 3,
                               .span_s = 2.0};
}

bool un_profile_kind_matches(const char *kind, const char *gpu_name) {
    size_t k = strlen(kind), n = strlen(gpu_name);
    if (k == 0 || strcasecmp(kind, "cpu") == 0)
        return false;
    for (size_t i = 0; i + k <= n; i++)
        if (strncasecmp(gpu_name + i, kind, k) == 0)
            return true;
    return false;
}

static double clock_s(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

void un_profile_values(void *host, int64_t n, un_dtype dtype, size_t fes, int64_t range,
                       uint64_t seed) {
    un_rng r;
    un_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) {
        if (dtype != UN_DT_FLOAT) {
            ((int64_t *)host)[i] = (int64_t)un_rng_below(&r, (uint64_t)(range > 0 ? range : 1));
            continue;
        }
        double v = 2 * un_rng_double(&r) - 1;
        if (fes == 4)
            ((float *)host)[i] = (float)v;
        else
            ((double *)host)[i] = v;
    }
}

/* Writes fresh values into tensor t (backend memory) from seed (un_profile_values). */
static un_status kt_fill(un_ctx *ctx, un_backend *be, const un_kt *t, size_t fes, int64_t range,
                         uint64_t seed) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dim[i];
    size_t es = t->dtype == UN_DT_FLOAT ? fes : sizeof(int64_t);
    void *host = un_xmalloc((size_t)n * es + 1); /* device memory is written, never dereferenced */
    un_profile_values(host, n, t->dtype, fes, range, seed);
    un_status st = un_backend_write(ctx, be, t->data, host, (size_t)n * es);
    free(host);
    return st;
}

/* A tensor of shape s in backend memory; with fill, floats in [-1, 1) (integers: 0). */
static un_status kt_new(un_ctx *ctx, un_backend *be, const un_shape *s, size_t fes, uint64_t seed,
                        bool fill, un_kt *out) {
    memset(out, 0, sizeof *out);
    out->dtype = s->dtype;
    out->rank = s->rank;
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= out->dim[i] = s->dim[i];
    size_t es = s->dtype == UN_DT_FLOAT ? fes : sizeof(int64_t);
    un_status st = un_backend_alloc(ctx, be, (size_t)n * es + 1, &out->data);
    if (st != UN_OK || !fill || s->dtype != UN_DT_FLOAT)
        return st;
    return kt_fill(ctx, be, out, fes, 0, seed);
}

typedef struct bufs {
    int n_in, n_out;
    un_kt in[UN_MAX_INPUTS], out[UN_MAX_OUTPUTS], dout[UN_MAX_OUTPUTS], din[UN_MAX_INPUTS];
} bufs;

static void bufs_free(un_backend *be, bufs *b) {
    for (int t = 0; t < UN_MAX_INPUTS; t++) {
        un_backend_release(be, b->in[t].data);
        un_backend_release(be, b->din[t].data);
    }
    for (int o = 0; o < UN_MAX_OUTPUTS; o++) {
        un_backend_release(be, b->out[o].data);
        un_backend_release(be, b->dout[o].data);
    }
}

/* A one-thread CPU device's op of a median wall time from CPU_TIME_MIN up is costed by its
 * thread's CPU time (un_profile_rep_cost). Reading that clock is a system call, and an op timed
 * right after one runs slower than inside a step, which makes no system call between its ops (this
 * guest's kernel has page-table isolation without PCID; a read of 64 pages, 0.13 us, took 0.19
 * us after a system call, any: the kernel's entry and exit leave the caches and predictors
 * colder; which of them costs the ops most was not measured: no PMU in the guest). Measured
 * (tiny MLP, serial; AMD EPYC guest, 2026-11-27, load 2-4): a [16,32]x[32,32] linear 1.22 / 2.00
 * us forward / backward after the read, 0.57 / 1.15 without, 0.57 / 1.24 inside the step
 * (unity-train --node-times); an ew_add 0.34 / 0.41, 0.08 / 0.12, 0.13 / 0.18. So the clock is
 * read only around repetitions of what took at least half of CPU_TIME_MIN before (warm-up). */
#define CPU_TIME_MIN 50e-6

bool un_profile_reads_cpu_clock(double warm_s) { return warm_s >= CPU_TIME_MIN / 2; }

/* What one run of an op costs from its repetitions' times (n of them; sorted here): a one-thread
 * CPU device's work is its thread's CPU time (what it computes, without the time other jobs of a
 * shared machine take the core away: that is measured apart, profile_meet), unless the op is so
 * short (median under CPU_TIME_MIN) that reading that clock (a system call) would weigh in: then,
 * and on any other CPU device, the wall time less the timer's own (p->timer_floor); on a GPU the
 * backend timer's (kernel time); the median either way (of the CPU times over the repetitions that
 * read them, at least half of them). */
double un_profile_rep_cost(un_profile_rep *t, int n, const un_profile_params *p) {
    if (n == 0)
        return 0;
    bool dev = p->cuda_device >= 0 && t[0].dev >= 0;
    double *v = un_xcalloc((size_t)n, sizeof *v), r;
    for (int i = 0; i < n; i++)
        v[i] = dev ? t[i].dev : t[i].wall;
    r = un_median(v, n);
    if (!dev) /* what the clocks and the timer's calls add (timer_floor) */
        r = r > p->timer_floor ? r - p->timer_floor : 0;
    int nc = 0;
    for (int i = 0; i < n; i++)
        if (t[i].cpu >= 0)
            v[nc++] = t[i].cpu;
    if (!dev && p->threads == 1 && p->cuda_device < 0 && r >= CPU_TIME_MIN && 2 * nc >= n) {
        r = un_median(v, nc);
    }
    free(v);
    return r;
}

/* One run of what is timed; *dev: the backend timer's seconds, or left < 0 (no timer). */
typedef un_status (*timed_fn)(un_ctx *ctx, void *arg, double *dev);

/* What the next repetition needs and is not timed (fresh inputs, an op's forward before its
 * backward); NULL: nothing. */
typedef un_status (*prep_fn)(un_ctx *ctx, void *arg);

/* cpu: also read the thread's CPU clock (CPU_TIME_MIN says when). */
static un_profile_rep rep_run(un_ctx *ctx, prep_fn prep, timed_fn fn, void *arg, bool cpu,
                              un_status *st) {
    if (fn && prep && *st == UN_OK)
        *st = prep(ctx, arg);
    double dev = -1, c0 = cpu ? clock_s(CLOCK_THREAD_CPUTIME_ID) : 0, w0 = now_s();
    if (fn && *st == UN_OK)
        *st = fn(ctx, arg, &dev);
    double w1 = now_s();
    return (un_profile_rep){w1 - w0, cpu ? clock_s(CLOCK_THREAD_CPUTIME_ID) - c0 : -1, dev};
}

/* The median seconds of one call of fn(arg) after the warm-up: repetitions go on until min_reps
 * and min_seconds are both reached (the median resists the other jobs of a shared machine). */
static un_status time_median(un_ctx *ctx, prep_fn prep, timed_fn fn, void *arg,
                             const un_profile_params *p, double *sec) {
    un_status st = UN_OK;
    int reps = 0, cap = 64;
    un_profile_rep *t = un_xmalloc(sizeof *t * (size_t)cap);
    double total = 0, wall0 = now_s(), last[2] = {0, 0}; /* the two repetitions before */
    for (int i = 0; st == UN_OK; i++) {
        bool cpu = un_profile_reads_cpu_clock(last[0] < last[1] ? last[0] : last[1]);
        un_profile_rep r = rep_run(ctx, prep, fn, arg, cpu, &st);
        last[i & 1] = r.wall;
        if (i < p->warmup)
            continue;
        if (reps == cap)
            t = un_xrealloc(t, sizeof *t * (size_t)(cap *= 2));
        t[reps++] = r;
        total += r.dev >= 0 ? r.dev : r.wall;
        /* a device clock can read far below the wall time: stop on either */
        if ((reps >= p->min_reps &&
             (total >= p->min_seconds || now_s() - wall0 >= 10 * p->min_seconds)) ||
            reps >= 100000)
            break;
    }
    *sec = un_profile_rep_cost(t, reps, p);
    free(t);
    return st;
}

static un_status timer_only(un_ctx *ctx, void *arg, double *dev) {
    un_backend *be = arg;
    un_backend_timer tm;
    un_status st = un_backend_timer_start(ctx, be, &tm);
    return st == UN_OK ? un_backend_timer_stop(ctx, be, &tm, dev) : st;
}

/* The wall seconds an empty timed region takes on be (the median of 20,000): the two clock reads
 * and the timer's start and stop that every op's, the optimizer's and the loss's wall time
 * includes and a step does not run. 0.09 us on the CPU backend here (AMD EPYC guest, 2026-11-27),
 * against ops of 0.3-2 us in a tiny model's step: 22 of them made the tiny MLP's serial step
 * 2 us (15 %) longer than measured. */
static double timer_floor(un_ctx *ctx, un_backend *be) {
    enum { N = 20000 };
    double *v = un_xcalloc(N, sizeof *v), r;
    un_status st = UN_OK;
    for (int i = 0; i < N; i++)
        v[i] = rep_run(ctx, NULL, timer_only, be, false, &st).wall;
    r = un_median(v, N);
    r = st == UN_OK ? r : 0;
    free(v);
    return r;
}

/* One op's piece as the runtime runs it (runtime/exec.c): a dropout seed that is new every step
 * and input 0's place in its whole tensor (off, full: dropout's masks are indexed by it). With
 * `fresh`, every repetition sees new values (prep): new inputs, and before a backward new output
 * gradients and the forward on those inputs (untimed). A step never runs an op twice on the same
 * values; repeating the same ones lets the branch predictor learn their branches (relu, dropout's
 * mask) and makes the op look faster than it is inside a step. */
typedef struct op_run {
    un_backend *be;
    const un_node *nd;
    bufs *b;
    bool bwd, fresh;
    int sets; /* value sets cycled through (un_profile_params.value_sets; 0: always new) */
    size_t fes;
    uint64_t seed; /* the repetition's dropout seed (as a step's: never 0) */
    const int64_t *off, *full;
    const int64_t *range; /* per input: integers are drawn from [0, range) (un_profile_int_range) */
    uint64_t node;        /* the values differ per node (a replay runs one op for several) */
} op_run;

static un_status op_call(un_ctx *ctx, op_run *r, bool bwd) {
    const un_node *nd = r->nd;
    bufs *b = r->b;
    return bwd ? un_backend_op_backward(ctx, r->be, nd->op, nd->inf.local, b->in, b->n_in, b->out,
                                        b->n_out, b->dout, b->din, r->seed, r->off, r->full)
               : un_backend_op_forward(ctx, r->be, nd->op, nd->inf.local, b->in, b->n_in, b->out,
                                       b->n_out, r->seed, r->off, r->full);
}

static un_status op_prep(un_ctx *ctx, void *arg) {
    op_run *r = arg;
    r->seed++;
    if (!r->fresh)
        return UN_OK;
    bufs *b = r->b;
    un_status st = UN_OK;
    uint64_t v = r->sets > 0 ? r->seed % (uint64_t)r->sets : r->seed; /* the value set */
    v = un_hash_combine(r->node, v);
    for (int t = 0; t < b->n_in && st == UN_OK; t++)
        st = kt_fill(ctx, r->be, &b->in[t], r->fes, r->range ? r->range[t] : 0,
                     v * 64 + (uint64_t)t);
    for (int o = 0; o < b->n_out && st == UN_OK && r->bwd; o++)
        if (b->dout[o].dtype == UN_DT_FLOAT)
            st = kt_fill(ctx, r->be, &b->dout[o], r->fes, 0, v * 64 + 32 + (uint64_t)o);
    if (st == UN_OK && r->bwd)
        st = op_call(ctx, r, false);
    return st == UN_OK ? un_backend_synchronize(ctx, r->be) : st;
}

static un_status op_once(un_ctx *ctx, void *arg, double *dev) {
    op_run *r = arg;
    un_backend_timer tm;
    un_status st = un_backend_timer_start(ctx, r->be, &tm);
    if (st == UN_OK)
        st = op_call(ctx, r, r->bwd);
    return st == UN_OK ? un_backend_timer_stop(ctx, r->be, &tm, dev) : st;
}

int64_t un_profile_int_range(const un_graph *g, int32_t id, int t) {
    const un_spec *spec = un_graph_spec(g);
    const un_node *nd = un_graph_node(g, id);
    const un_node *src = un_graph_node(g, nd->in[t].node);
    while (un_op_kind_of(src->op) == UN_OPK_PARALLEL)
        src = un_graph_node(g, src->in[0].node);
    int ir =
        src->op == UN_OP_INPUT ? un_spec_param_index(un_spec_op(spec, UN_OP_INPUT), "range") : -1;
    int64_t range = ir >= 0 && src->params[ir].v[0] > 0 ? src->params[ir].v[0] : 2;
    if (nd->op == UN_OP_EMBEDDING && t == 0 && nd->n_in > 1) {
        un_shape in[UN_MAX_INPUTS];
        un_cost_piece_shapes(g, id, in);
        if (in[1].dim[0] < range)
            range = in[1].dim[0];
    }
    return range > 0 ? range : 1;
}

/* One distinct operator of the graph as a replay runs it: its piece's buffers and its call. */
typedef struct rop {
    bufs b;
    int64_t off[UN_MAX_DIMS], full[UN_MAX_DIMS], range[UN_MAX_INPUTS];
    op_run r;
} rop;

/* Node id's piece on be: buffers of its piece shapes (values come with each run: op_prep), input
 * gradients only where the run has them (ng: per node, whether its output needs a gradient; the
 * backward kernels skip the others: a first convolution's backward computes no input gradient)
 * and input 0's place as the runtime passes it (the first piece of its whole tensor). */
static un_status rop_setup(un_ctx *ctx, un_backend *be, const un_graph *g, int32_t id,
                           const bool *ng, const un_profile_params *p, size_t fes, rop *o) {
    const un_node *nd = un_graph_node(g, id);
    bufs *b = &o->b;
    un_shape in[UN_MAX_INPUTS];
    un_cost_piece_shapes(g, id, in);
    /* the output pieces as the runtime allocates them: the plan's output layouts (the op on the
     * piece shapes may fail the op's requirements, as attention split by heads does) */
    un_shape out[UN_MAX_OUTPUTS];
    for (int k = 0; k < nd->inf.n_out; k++) {
        int64_t d[UN_MAX_DIMS];
        un_shape_piece_dims(&nd->inf.out[k], d);
        out[k] = un_shape_make(nd->inf.out[k].rank, d, nd->inf.out[k].dtype);
    }
    un_status st = UN_OK;
    b->n_in = nd->n_in;
    b->n_out = nd->inf.n_out;
    for (int t = 0; t < nd->n_in && st == UN_OK; t++) {
        o->range[t] = in[t].dtype == UN_DT_INT ? un_profile_int_range(g, id, t) : 0;
        st = kt_new(ctx, be, &in[t], fes, 0, false, &b->in[t]);
        if (st == UN_OK && in[t].dtype == UN_DT_FLOAT && ng[nd->in[t].node])
            st = kt_new(ctx, be, &in[t], fes, 0, false, &b->din[t]);
    }
    for (int k = 0; k < b->n_out && st == UN_OK; k++) {
        st = kt_new(ctx, be, &out[k], fes, 0, false, &b->out[k]);
        if (st == UN_OK && out[k].dtype == UN_DT_FLOAT)
            st = kt_new(ctx, be, &out[k], fes, 0, false, &b->dout[k]);
    }
    if (nd->n_in > 0) {
        const un_shape *s0 = un_graph_shape(g, nd->in[0]);
        for (int i = 0; i < s0->rank; i++)
            o->full[i] = s0->dim[i];
    }
    o->r = (op_run){.be = be,
                    .nd = nd,
                    .b = b,
                    .fresh = true,
                    .sets = p->value_sets,
                    .fes = fes,
                    .off = o->off,
                    .full = o->full,
                    .range = o->range};
    return st;
}

/* A replay of a step's operators: the graph's regular nodes run as a step runs them, every
 * forward in order, then every backward in reverse, pass after pass, on D
 * device threads (each with its backend of p->threads threads and its own buffers) in lockstep:
 * each call starts after a barrier of all D, so the devices' contention for the cores, the shared
 * cache and memory and with the machine's other jobs is in the time. Between two runs of one op
 * the others run, as in a step, so the branch predictor and the caches hold what a step leaves
 * them: a ReLU or a max pool of a step's size does not learn its inputs' signs from one run to the
 * next as one repeated alone does (4x faster, tiny ResNeXt), a small model's whole step does.
 * Nodes of one cost key (op, params, piece shapes) share one op's buffers, each with values of
 * its own. Thread k's time of the node at position x, direction b (0: forward), pass j is
 * t[((k * n + x) * 2 + b) * reps + j]. */
typedef struct replay {
    const un_graph *g;
    const un_profile_params *p;
    const int32_t *ids; /* per key: its first node */
    const int *key;     /* per position: the key of the node (positions in topological order) */
    const bool *fresh;  /* per position: its values are new every step (un_profile_graph) */
    const bool *ng;     /* per node: its output needs a gradient (as runtime/exec.c) */
    int n, nk, D;       /* positions, keys, devices */
    un_comm_group *grp; /* D > 1: the devices' local communicator, whose barrier they meet at */
    int reps;           /* timed passes: thread 0 sets them from its warm-up passes */
    double *wp; /* per key: thread 0's longest wall seconds of a run in this warm-up pass ... */
    double *wm; /* ... and the least of those over the warm-up passes (one preempted run is not
                 * a long op) */
    bool *cpu;  /* per key: read the CPU clock around its timed runs (thread 0 sets them from wm) */
    un_profile_rep *t;
} replay;

/* Thread k meets the others at the runtime's barrier (un_comm_barrier of a local group), as a
 * step's ranks meet: it polls before it sleeps (runtime/pool.h un_pool_spin_allowed). Before
 * 2026-11-28 a pthread barrier, whose every wait was a system call: the op timed right after one
 * ran colder (the note at CPU_TIME_MIN), so on 2 devices a [8,32] ew_add was profiled at 0.29 us
 * forward against 0.09 inside the run's step and 0.10 profiled on one device, a [8,32]x[32,32]
 * linear 0.36-0.38 against 0.24-0.31, and the tiny MLP's data-parallel step estimated 20 % over
 * (12.4 against 10.4 us; AMD EPYC guest, 2026-11-28 10:27 UTC, SkylakeX kernels). A failed barrier
 * is kept in *st (the others would wait for this thread in vain: it is a failure of the
 * communicator). */
static void meet(un_ctx *ctx, replay *rp, int k, un_status *st) {
    un_status s = un_comm_barrier(ctx, un_comm_local_get(rp->grp, k));
    if (*st == UN_OK)
        *st = s;
}

/* One pass over the ops; j >= 0: a timed pass, its times into rp->t. ok: this thread's ops are set
 * up (else it only passes the barriers, so no thread is left waiting). */
static void replay_pass(un_ctx *ctx, replay *rp, rop *ops, bool ok, int k, int j, un_status *st) {
    for (int b = 0; b < 2; b++)
        for (int y = 0; y < rp->n; y++) {
            int i = b ? rp->n - 1 - y : y;
            op_run *r = &ops[rp->key[i]].r;
            bool run = ok && *st == UN_OK;
            if (run) {
                r->bwd = b == 1;
                r->node = (uint64_t)i;
                r->sets = rp->fresh[i] ? 0 : rp->p->value_sets;
                *st = op_prep(ctx, r);
            }
            if (rp->D > 1)
                meet(ctx, rp, k, st);
            un_profile_rep t = rep_run(ctx, NULL, run && *st == UN_OK ? op_once : NULL, r,
                                       j >= 0 && rp->cpu[rp->key[i]], st);
            if (j < 0 && k == 0 && t.wall > rp->wp[rp->key[i]])
                rp->wp[rp->key[i]] = t.wall;
            if (j >= 0)
                rp->t[(((size_t)k * (size_t)rp->n + (size_t)i) * 2 + (size_t)b) * (size_t)rp->reps +
                      (size_t)j] = t;
        }
}

/* Thread k's part of the replay on be (NULL: this thread has no backend; it keeps step only). */
static un_status replay_run(un_ctx *ctx, un_backend *be, replay *rp, int k) {
    size_t fes = rp->p->f64 ? 8 : 4;
    rop *ops = un_xcalloc((size_t)rp->nk, sizeof *ops);
    un_status st = be ? UN_OK : UN_ERR_DEVICE;
    int set = 0;
    for (; set < rp->nk && st == UN_OK; set++)
        st = rop_setup(ctx, be, rp->g, rp->ids[set], rp->ng, rp->p, fes, &ops[set]);
    bool ok = st == UN_OK;
    double w0 = now_s();
    int warm = rp->p->warmup > 0 ? rp->p->warmup : 1;
    for (int j = 0; j < warm; j++) {
        if (k == 0) /* the warm-up passes' times decide where the CPU clock is read */
            memset(rp->wp, 0, (size_t)rp->nk * sizeof *rp->wp);
        replay_pass(ctx, rp, ops, ok, k, -1, &st);
        for (int i = 0; i < rp->nk && k == 0; i++)
            rp->wm[i] = j == 0 || rp->wp[i] < rp->wm[i] ? rp->wp[i] : rp->wm[i];
    }
    if (k == 0) { /* every op min_seconds forward and backward, as one timed alone: the passes */
        double pass = (now_s() - w0) / warm, want = 2.0 * rp->nk * rp->p->min_seconds;
        double reps = pass > 0 ? want / pass : 2000;
        rp->reps = reps < rp->p->min_reps ? rp->p->min_reps : reps > 2000 ? 2000 : (int)reps;
        rp->t = un_xcalloc((size_t)rp->D * (size_t)rp->n * 2 * (size_t)rp->reps, sizeof *rp->t);
        for (int i = 0; i < rp->nk; i++)
            rp->cpu[i] = un_profile_reads_cpu_clock(rp->wm[i]);
    }
    if (rp->D > 1)
        meet(ctx, rp, k, &st);
    for (int j = 0; j < rp->reps; j++)
        replay_pass(ctx, rp, ops, ok, k, j, &st);
    for (int i = 0; i < set && be; i++)
        bufs_free(be, &ops[i].b);
    free(ops);
    return st;
}

typedef struct replay_job {
    replay *rp;
    int k;
    un_status st;
    char err[256];
} replay_job;

/* A device thread k >= 1 of the replay, with a CPU (or opaque) backend of its own. */
static void *replay_main(void *arg) {
    replay_job *j = arg;
    const un_profile_params *p = j->rp->p;
    un_ctx *ctx = un_ctx_new(NULL);
    un_backend *be = NULL;
    un_prec prec = p->f64 ? UN_PREC_F64 : UN_PREC_F32;
    un_status st = p->opaque ? un_backend_opaque_new(ctx, prec, p->threads, &be)
                             : un_backend_cpu_new(ctx, prec, p->threads, &be);
    un_status st2 = replay_run(ctx, st == UN_OK ? be : NULL, j->rp, j->k);
    j->st = st != UN_OK ? st : st2;
    snprintf(j->err, sizeof j->err, "%s", un_ctx_errmsg(ctx));
    un_backend_free(be);
    un_ctx_free(ctx);
    return NULL;
}

/* Key i's seconds in direction b: per node of the key and pass the slowest device (the next
 * rendezvous waits for it), then un_profile_rep_cost over them all. */
static double replay_median(const replay *rp, int i, int b) {
    un_profile_rep *m = un_xcalloc((size_t)rp->reps * (size_t)rp->n + 1, sizeof *m);
    int c = 0;
    for (int x = 0; x < rp->n; x++)
        for (int j = 0; j < rp->reps && rp->key[x] == i; j++, c++)
            for (int k = 0; k < rp->D; k++) {
                un_profile_rep t = rp->t[(((size_t)k * (size_t)rp->n + (size_t)x) * 2 + (size_t)b) *
                                             (size_t)rp->reps +
                                         (size_t)j];
                m[c].wall = t.wall > m[c].wall ? t.wall : m[c].wall;
                m[c].cpu = k == 0 || t.cpu > m[c].cpu ? t.cpu : m[c].cpu;
                m[c].dev = k == 0 || t.dev > m[c].dev ? t.dev : m[c].dev;
            }
    double r = un_profile_rep_cost(m, c, rp->p);
    free(m);
    return r;
}

/* A dropout's mask is new every step (a new seed), so whatever follows it sees new values every
 * step, however few batches the run cycles through: inside a step of tiny CANDLE-Uno (unity-train
 * --node-times, 2026-11-27, load 2) a [16,32]x[32,32] relu linear after a dropout took 3.0 us
 * forward, profiled 1.9 on 4 value sets, 3.8 on new ones (the branch predictor learns the relu
 * pattern of 4 sets); one on the run's input batches 2.0 us in the step, 1.6-2.0 profiled on 4
 * sets. */
void un_profile_fresh_nodes(const un_graph *g, bool *fresh) {
    for (int32_t id = 0; id < un_graph_node_count(g); id++) {
        const un_node *nd = un_graph_node(g, id);
        fresh[id] = false;
        for (int t = 0; t < nd->n_in; t++)
            fresh[id] |=
                fresh[nd->in[t].node] || un_graph_node(g, nd->in[t].node)->op == UN_OP_DROPOUT;
    }
}

/* The replay of n nodes whose keys are key[0..n) (ids: each key's first node; fresh: per node,
 * new values every run) on D devices: this thread is device 0 on be, D - 1 threads the others;
 * fwd[i], bwd[i]: key i's seconds. */
static un_status replay_ops(un_ctx *ctx, un_backend *be, const un_graph *g, const int32_t *ids,
                            int nk, const int *key, const bool *fresh, int n,
                            const un_profile_params *p, int D, double *fwd, double *bwd) {
    int32_t nn = un_graph_node_count(g);
    bool *ng = un_xcalloc((size_t)nn + 1, sizeof *ng);
    for (int32_t id = 0; id < nn; id++) {
        const un_node *nd = un_graph_node(g, id);
        ng[id] = nd->op == UN_OP_WEIGHT;
        for (int t = 0; t < nd->n_in; t++)
            ng[id] |= ng[nd->in[t].node];
    }
    replay rp = {.g = g,
                 .p = p,
                 .ids = ids,
                 .key = key,
                 .fresh = fresh,
                 .ng = ng,
                 .n = n,
                 .nk = nk,
                 .D = D,
                 .wp = un_xcalloc((size_t)nk + 1, sizeof(double)),
                 .wm = un_xcalloc((size_t)nk + 1, sizeof(double)),
                 .cpu = un_xcalloc((size_t)nk + 1, sizeof(bool))};
    un_status st = D > 1 ? un_comm_local_group_new(ctx, D, &rp.grp) : UN_OK;
    if (st != UN_OK) {
        free(rp.wp);
        free(rp.wm);
        free(rp.cpu);
        free(ng);
        return st;
    }
    replay_job *j = un_xcalloc((size_t)D, sizeof *j);
    pthread_t *th = un_xcalloc((size_t)D, sizeof *th);
    for (int k = 1; k < D; k++) {
        j[k] = (replay_job){.rp = &rp, .k = k};
        pthread_create(&th[k], NULL, replay_main, &j[k]);
    }
    st = replay_run(ctx, be, &rp, 0);
    for (int k = 1; k < D; k++) {
        pthread_join(th[k], NULL);
        if (st == UN_OK && j[k].st != UN_OK)
            st = un_ctx_error(ctx, j[k].st, "profile: device %d of %d: %s", k, D, j[k].err);
    }
    for (int i = 0; i < nk && st == UN_OK; i++) {
        fwd[i] = replay_median(&rp, i, 0);
        bwd[i] = replay_median(&rp, i, 1);
    }
    if (rp.grp)
        un_comm_local_group_free(rp.grp);
    free(rp.t);
    free(rp.wp);
    free(rp.wm);
    free(rp.cpu);
    free(ng);
    free(j);
    free(th);
    return st;
}

static un_status store(un_ctx *ctx, un_rulesdb *db, const char *sig, const char *shape,
                       const char *device, double fwd, double bwd, double bytes) {
    un_rulesdb_cost c;
    memset(&c, 0, sizeof c);
    snprintf(c.op_sig, sizeof c.op_sig, "%s", sig);
    snprintf(c.shape, sizeof c.shape, "%s", shape);
    snprintf(c.device, sizeof c.device, "%s", device);
    c.fwd_ms = fwd * 1e3;
    c.bwd_ms = bwd * 1e3;
    c.bytes = bytes;
    c.measured_at = (int64_t)time(NULL);
    return un_rulesdb_cost_put(ctx, db, &c);
}

typedef struct optim_run {
    un_optim *o;
    un_backend *be;
    un_buffer *w, *g;
} optim_run;

static un_status optim_once(un_ctx *ctx, void *arg, double *dev) {
    optim_run *r = arg;
    un_backend_timer tm;
    un_status st = un_backend_timer_start(ctx, r->be, &tm);
    if (st == UN_OK)
        st = un_optim_step_on(ctx, r->o, r->be, un_buffer_at(r->w, 0), un_buffer_at(r->g, 0));
    return st == UN_OK ? un_backend_timer_stop(ctx, r->be, &tm, dev) : st;
}

/* The optimizer step as the runtime runs it (un_optim_step_on on the run's backend, its state in
 * backend memory) over each distinct count of parameters a rank of g's run updates (weights
 * folded as the runtime stores them, each rank its shard: un_sim_rank_param_counts). */
static un_status profile_optimizer(un_ctx *ctx, un_rulesdb *db, un_backend *be, const un_graph *g,
                                   const un_profile_params *p, const char *device, FILE *log,
                                   int64_t *n_stored) {
    un_optim_algo k;
    if (!un_optim_algo_from_name(p->optimizer, &k))
        return UN_OK;
    int64_t counts[UN_SIM_MAX_RANK_COUNTS];
    int nc = 0;
    un_status st = un_sim_rank_param_counts(ctx, g, counts, &nc);
    size_t fes = p->f64 ? 8 : 4;
    for (int i = 0; i < nc && st == UN_OK; i++) {
        int64_t n = counts[i];
        optim_run r = {.be = be};
        double sec = 0;
        if ((st = un_optim_new_on(ctx, un_optim_params_default(k), n, be, &r.o)) == UN_OK &&
            (st = un_buffer_new(ctx, be, (size_t)n * fes, &r.w)) == UN_OK &&
            (st = un_buffer_new(ctx, be, (size_t)n * fes, &r.g)) == UN_OK)
            st = time_median(ctx, NULL, optim_once, &r, p, &sec);
        char sig[48], shape[48];
        snprintf(sig, sizeof sig, "optimizer:%s", un_optim_algo_name(k));
        snprintf(shape, sizeof shape, "float[%lld]", (long long)n);
        if (st == UN_OK &&
            (st = store(ctx, db, sig, shape, device, sec, 0, (double)n * (double)fes)) == UN_OK) {
            ++*n_stored;
            if (log)
                fprintf(log, "  %-44s %-40s %10.4f ms\n", sig, shape, 1e3 * sec);
        }
        un_optim_free(r.o);
        un_buffer_free(r.w);
        un_buffer_free(r.g);
    }
    return st;
}

typedef struct loss_run {
    un_backend *be;
    un_loss_kind kind;
    un_kt y, gy, lab; /* lab: the labels (cross-entropy) or the whole target (mean squares) */
} loss_run;

static un_status loss_once(un_ctx *ctx, void *arg, double *dev) {
    loss_run *r = arg;
    if (un_kt_numel(&r->y) <= 0)
        return UN_OK;
    un_backend_timer tm;
    double loss;
    un_status st = un_backend_timer_start(ctx, r->be, &tm);
    if (st == UN_OK)
        st = un_backend_loss(ctx, r->be, r->kind, &r->y, NULL, NULL, &r->lab, &r->gy, &loss);
    return st == UN_OK ? un_backend_timer_stop(ctx, r->be, &tm, dev) : st;
}

/* The runtime's own per-step work besides operators, as runtime/train.c runs it in a step's time:
 * the run's loss (p->loss) with its gradient on one output piece, on the backend (the median of
 * repetitions, like the ops). Making the batch is not in a step's time. The loss was timed as
 * cross-entropy for every model: xdl, transformer and CANDLE-Uno train on mean squares, and tiny
 * xdl at batch 256's loss took 2.1 us in the step (unity-train --node-times), 9.0 us profiled as
 * cross-entropy over [256,2] (a log per row). */
static un_status profile_step_parts(un_ctx *ctx, un_rulesdb *db, un_backend *be, const un_graph *g,
                                    const un_profile_params *p, const char *device, FILE *log,
                                    int64_t *n_stored) {
    size_t fes = p->f64 ? 8 : 4;
    loss_run r = {.be = be};
    char shape[64];
    const un_shape *o = un_graph_output_count(g) ? un_graph_shape(g, un_graph_output(g, 0)) : NULL;
    un_sim_loss_shape(o ? o : &(un_shape){0}, shape, sizeof shape);
    long long rows = 0, cls = 0;
    sscanf(shape, "float[%lld,%lld]", &rows, &cls);
    int64_t m = rows * cls;
    un_buffer *logits = NULL, *grad = NULL, *labels = NULL;
    bool mse = p->loss == UN_LOSS_MSE;
    un_status st = un_buffer_new(ctx, be, ((size_t)m + 1) * fes, &logits);
    if (st == UN_OK)
        st = un_buffer_new(ctx, be, ((size_t)m + 1) * fes, &grad);
    if (st == UN_OK)
        st = un_buffer_new(ctx, be, ((size_t)(mse ? m : rows) + 1) * (mse ? fes : sizeof(int64_t)),
                           &labels);
    r.kind = p->loss;
    r.y = (un_kt){.dtype = UN_DT_FLOAT, .rank = 2, .dim = {rows, cls}};
    if (mse && o) /* the output piece's own rank: mean squares index it element by element */
        for (int i = r.y.rank = o->rank; i-- > 0;)
            r.y.dim[i] = o->dim[i] / o->shard[i];
    r.gy = r.y;
    r.lab = mse ? r.y : (un_kt){.dtype = UN_DT_INT, .rank = 1, .dim = {rows}};
    double sec = 0;
    if (st == UN_OK) {
        r.y.data = un_buffer_at(logits, 0);
        r.gy.data = un_buffer_at(grad, 0);
        r.lab.data = un_buffer_at(labels, 0);
        st = time_median(ctx, NULL, loss_once, &r, p, &sec);
    }
    const char *sig = mse ? "loss:mse" : "loss:ce";
    if (st == UN_OK && (st = store(ctx, db, sig, shape, device, sec, 0, 0)) == UN_OK) {
        ++*n_stored;
        if (log)
            fprintf(log, "  %-44s %-40s %10.4f ms\n", sig, shape, sec * 1e3);
    }
    un_buffer_free(logits);
    un_buffer_free(grad);
    un_buffer_free(labels);
    return st;
}

/* ---- the local communicator between threads ---- */

typedef struct xjob {
    un_comm *c;
    void *buf;
    size_t bytes;
    int reps;
    double sec;
    un_status st;
} xjob;

/* reps times: bytes 0: a barrier of the two ranks; else rank 0 sends `bytes` to rank 1 (one
 * un_comm_exchange each). */
static void *xchg_main(void *arg) {
    xjob *j = arg;
    un_ctx *ctx = un_ctx_new(NULL);
    int r = un_comm_rank(j->c);
    un_comm_msg m = {.peer = 1 - r, .tag = 0, .data = j->buf, .bytes = j->bytes};
    double *t = un_xcalloc((size_t)j->reps, sizeof *t);
    for (int i = 0; i < j->reps && j->st == UN_OK; i++) {
        double t0 = now_s();
        j->st = !j->bytes ? un_comm_barrier(ctx, j->c)
                          : un_comm_exchange(ctx, j->c, r == 0 ? &m : NULL, r == 0,
                                             r == 1 ? &m : NULL, r == 1);
        t[i] = now_s() - t0;
    }
    j->sec = un_median(t, j->reps);
    free(t);
    un_ctx_free(ctx);
    return NULL;
}

/* The machine's link between two threads: the median seconds of one barrier (bytes 0) or of one
 * message of `bytes` from thread 0 to thread 1, back to back (the bandwidth; a step's
 * rendezvous are measured as it meets: rdv_time). */
static un_status xchg_time(un_ctx *ctx, size_t bytes, int reps, double *sec) {
    un_comm_group *grp = NULL;
    un_status st = un_comm_local_group_new(ctx, 2, &grp);
    if (st != UN_OK)
        return st;
    xjob j[2];
    pthread_t th[2];
    void *buf[2] = {un_xcalloc(bytes + 1, 1), un_xcalloc(bytes + 1, 1)};
    for (int r = 0; r < 2; r++) {
        j[r] = (xjob){.c = un_comm_local_get(grp, r), .buf = buf[r], .bytes = bytes, .reps = reps};
        pthread_create(&th[r], NULL, xchg_main, &j[r]);
    }
    for (int r = 0; r < 2; r++) {
        pthread_join(th[r], NULL);
        st = st != UN_OK ? st : j[r].st;
    }
    *sec = j[1].sec;
    free(buf[0]);
    free(buf[1]);
    un_comm_local_group_free(grp);
    return st == UN_OK ? UN_OK : un_ctx_error(ctx, st, "profile: the thread exchange failed");
}

typedef struct meet_job {
    un_comm *c;
    double rate; /* spin_rate, measured once before the threads start */
    int reps[UN_SIM_MEET_POINTS];
    double *t[UN_SIM_MEET_POINTS]; /* per point, per rep: wall seconds of work + rendezvous */
    un_status st;
} meet_job;

/* n steps of a dependent floating-point chain: work that touches no memory and makes no call */
static void spin_steps(int64_t n) {
    volatile double x = 1;
    for (int64_t k = 0; k < n; k++)
        x = x * 1.0000001 + 1e-9;
}

/* spin_steps per second of this thread's CPU time: the best of 3 runs of about 10 ms. */
static double spin_rate(void) {
    double best = 0;
    for (int i = 0; i < 3; i++) {
        int64_t n = 2000000;
        double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        spin_steps(n);
        double el = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
        if (el > 0 && (double)n / el > best)
            best = (double)n / el;
    }
    return best > 0 ? best : 1e8;
}

/* sec seconds of CPU work at rate (spin_rate), with no clock read inside: reading the thread's
 * CPU clock is a system call that cost 1-3 us here, so a work loop that polled it did 2.9 us of
 * work when asked for 1 us and 6.4 for 3 (AMD EPYC guest, 2026-11-27, load 4), and the short
 * stretches of comm:meet measured that overshoot as time waiting for cores. */
static void spin_cpu(double sec, double rate) { spin_steps((int64_t)(sec * rate + 0.5)); }

/* First 0.3 s of computing (a new thread is favoured by the scheduler for a while; a training
 * run's threads are long past that), then the points' repetitions, interleaved in 5 rounds, each
 * ending in the runtime's rendezvous: an exchange of a small message with the next and the previous
 * thread (one thread: a barrier of itself). An exchange can block twice (for the peer's message,
 * then until its own is taken), a barrier once; where other jobs share the cores each block may
 * cost a wait for a core. */
static void *meet_main(void *arg) {
    meet_job *j = arg;
    un_ctx *ctx = un_ctx_new(NULL);
    int r = un_comm_rank(j->c), n = un_comm_size(j->c);
    char sb[64] = {0}, rb[64];
    un_comm_msg sm = {.peer = (r + 1) % n, .tag = 0, .data = sb, .bytes = sizeof sb};
    un_comm_msg rm = {.peer = (r + n - 1) % n, .tag = 0, .data = rb, .bytes = sizeof rb};
    for (double w0 = now_s(); now_s() - w0 < 0.3;)
        spin_cpu(1e-3, j->rate);
    /* the points interleaved, in 5 rounds (as the rendezvous: rdv_main) */
    for (int q = 0; q < 5; q++)
        for (int w = 0; w < UN_SIM_MEET_POINTS; w++)
            for (int i = j->reps[w] * q / 5; i < j->reps[w] * (q + 1) / 5 && j->st == UN_OK; i++) {
                double t0 = now_s();
                spin_cpu(un_sim_meet_work[w], j->rate);
                j->st = n > 1 ? un_comm_exchange(ctx, j->c, &sm, 1, &rm, 1)
                              : un_comm_barrier(ctx, j->c);
                j->t[w][i] = now_s() - t0;
            }
    un_ctx_free(ctx);
    return NULL;
}

/* How long D device threads take to compute W seconds of work each and meet in an exchange, as a
 * step's stretches between two rendezvous do ("comm:meet" devices[D],work[W in us]: the median
 * over repetitions), for W from 10 us to 30 ms (D = 1: a one-device step is one such stretch).
 * On a machine of its own that is W plus an exchange; where other jobs share the cores, a thread
 * is taken off its core now and then, and a thread that waited in the exchange waits for a core
 * again: the stretch takes up to several times W. */
static un_status profile_meet(un_ctx *ctx, un_rulesdb *db, const un_graph *g, const char *device,
                              FILE *log, int64_t *n_stored) {
    int d = (int)un_strategy_devices(g);
    un_comm_group *grp = NULL;
    un_status st = un_comm_local_group_new(ctx, d, &grp);
    if (st != UN_OK)
        return st;
    meet_job *j = un_xcalloc((size_t)d, sizeof *j);
    pthread_t *th = un_xcalloc((size_t)d, sizeof *th);
    double rate = spin_rate();
    for (int r = 0; r < d; r++) {
        j[r].c = un_comm_local_get(grp, r);
        j[r].rate = rate;
        for (int w = 0; w < UN_SIM_MEET_POINTS; w++) {
            int reps = (int)(0.05 / un_sim_meet_work[w]); /* 50 ms of work, 7 to 5000 times */
            j[r].reps[w] = reps < 7 ? 7 : reps > 5000 ? 5000 : reps;
            j[r].t[w] = un_xcalloc((size_t)j[r].reps[w], sizeof(double));
        }
        pthread_create(&th[r], NULL, meet_main, &j[r]);
    }
    for (int r = 0; r < d; r++) {
        pthread_join(th[r], NULL);
        st = st != UN_OK ? st : j[r].st;
    }
    for (int w = 0; w < UN_SIM_MEET_POINTS && st == UN_OK; w++) {
        double sec = un_median(j[0].t[w], j[0].reps[w]);
        char shape[64];
        un_sim_meet_shape(d, w, shape, sizeof shape);
        if ((st = store(ctx, db, "comm:meet", shape, device, sec, 0, 0)) == UN_OK) {
            ++*n_stored;
            if (log)
                fprintf(log, "  %-44s %-40s %10.4f ms\n", "comm:meet", shape, sec * 1e3);
        }
    }
    for (int r = 0; r < d; r++)
        for (int w = 0; w < UN_SIM_MEET_POINTS; w++)
            free(j[r].t[w]);
    free(j);
    free(th);
    un_comm_local_group_free(grp);
    return st;
}

enum { RDV_BARRIER, RDV_RING, RDV_SEND };

/* One kind of rendezvous the profiler times (profile_rendezvous), and its samples. */
typedef struct rdv_task {
    int kind;     /* RDV_* */
    size_t bytes; /* each sending rank's, to its peer */
    int msgs;     /* in this many messages (a ring; at most UN_SIM_XCHG_MSGS) */
    int reps;
    double *arrive;  /* [reps * n]: when rank r called in rep i (shared by the threads) */
    double *release; /* [reps * n]: when it returned */
} rdv_task;

typedef struct rdv_job {
    un_comm *c;
    double rate; /* spin_rate */
    rdv_task *tasks;
    int n_tasks, rounds;
    un_status st;
} rdv_job;

/* Rep i of task t as a step meets: every thread computes (spins) 1 us first, and the rep's late
 * thread 2 us more, so that the others are waiting when it arrives; then a barrier, a ring
 * exchange (every rank sends to the next and receives from the one before) or a one-way
 * exchange between ranks 0 and 1 whose sender is the late one (a piece another rank waits for;
 * any other rank calls with nothing to move, as the runtime's do). Back to back, with no work
 * between, a ring exchange measured 1.5-2.3x what the runs' meets cost (2026-11-28: 4.1-6.4 us
 * against 2.5-3.5 in the data-parallel sample MLP's meet trace), the threads meeting on the
 * group's lock at every call. */
static un_status rdv_rep(un_ctx *ctx, const rdv_job *j, const rdv_task *t, int i, char *sb,
                         char *rb) {
    int r = un_comm_rank(j->c), n = un_comm_size(j->c);
    int late_rank = i % (t->kind == RDV_SEND ? 2 : n);
    bool late = late_rank == r;
    un_comm_msg sm[UN_SIM_XCHG_MSGS], rm[UN_SIM_XCHG_MSGS];
    int ns = 0, nr = 0;
    if (t->kind == RDV_RING) {
        size_t part = t->bytes / (size_t)t->msgs;
        for (int k = 0; k < t->msgs; k++) {
            size_t b = k + 1 < t->msgs ? part : t->bytes - (size_t)k * part;
            sm[ns++] = (un_comm_msg){
                .peer = (r + 1) % n, .tag = k, .data = sb + (size_t)k * part, .bytes = b};
            rm[nr++] = (un_comm_msg){
                .peer = (r + n - 1) % n, .tag = k, .data = rb + (size_t)k * part, .bytes = b};
        }
    } else if (t->kind == RDV_SEND && r < 2) {
        if (late)
            sm[ns++] = (un_comm_msg){.peer = 1 - r, .data = sb, .bytes = t->bytes};
        else
            rm[nr++] = (un_comm_msg){.peer = 1 - r, .data = rb, .bytes = t->bytes};
    }
    if (ns)
        memset(sb, i & 0xff, t->bytes); /* written by its sender, as a step's pieces are */
    spin_cpu(late ? 3e-6 : 1e-6, j->rate);
    size_t k = (size_t)i * (size_t)n + (size_t)r;
    t->arrive[k] = now_s();
    un_status st = t->kind == RDV_BARRIER ? un_comm_barrier(ctx, j->c)
                                          : un_comm_exchange(ctx, j->c, sm, ns, rm, nr);
    t->release[k] = now_s();
    return st;
}

/* Every task's reps in `rounds` rounds, each round a share of every task's in turn: a guest's
 * cores change how fast they meet as the host places them, for a few tenths of a second at a
 * time (the data-parallel tiny MLP's 50 ms runs: 20, 13 or 10 us a step, 2026-11-28 10:22 UTC),
 * and measured one after another the points of one curve came from different such moments. */
static void *rdv_main(void *arg) {
    rdv_job *j = arg;
    un_ctx *ctx = un_ctx_new(NULL);
    size_t most = 0;
    for (int t = 0; t < j->n_tasks; t++)
        most = j->tasks[t].bytes > most ? j->tasks[t].bytes : most;
    char *sb = un_xcalloc(most + 1, 1), *rb = un_xcalloc(most + 1, 1);
    for (double w0 = now_s(); now_s() - w0 < 0.05;)
        spin_cpu(1e-3, j->rate);
    for (int q = 0; q < j->rounds && j->st == UN_OK; q++)
        for (int t = 0; t < j->n_tasks && j->st == UN_OK; t++) {
            const rdv_task *tk = &j->tasks[t];
            int lo = (int)((int64_t)tk->reps * q / j->rounds);
            int hi = (int)((int64_t)tk->reps * (q + 1) / j->rounds);
            for (int i = lo; i < hi && j->st == UN_OK; i++)
                j->st = rdv_rep(ctx, j, tk, i, sb, rb);
        }
    free(sb);
    free(rb);
    un_ctx_free(ctx);
    return NULL;
}

/* Each task's median over its reps (rdv_main, n threads) of the time from the last thread's
 * call to the last thread's return: what a meet adds to a step beyond the ranks' skew, which
 * the simulator's schedule has. */
static un_status rdv_time(un_ctx *ctx, int n, rdv_task *tasks, int n_tasks, int rounds,
                          double *sec) {
    un_comm_group *grp = NULL;
    un_status st = un_comm_local_group_new(ctx, n, &grp);
    if (st != UN_OK)
        return st;
    int most = 0;
    for (int t = 0; t < n_tasks; t++) {
        tasks[t].arrive = un_xcalloc((size_t)tasks[t].reps * (size_t)n, sizeof(double));
        tasks[t].release = un_xcalloc((size_t)tasks[t].reps * (size_t)n, sizeof(double));
        most = tasks[t].reps > most ? tasks[t].reps : most;
    }
    rdv_job *j = un_xcalloc((size_t)n, sizeof *j);
    pthread_t *th = un_xcalloc((size_t)n, sizeof *th);
    double rate = spin_rate();
    for (int r = 0; r < n; r++) {
        j[r] = (rdv_job){un_comm_local_get(grp, r), rate, tasks, n_tasks, rounds, UN_OK};
        pthread_create(&th[r], NULL, rdv_main, &j[r]);
    }
    for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
        st = st != UN_OK ? st : j[r].st;
    }
    double *w = un_xcalloc((size_t)most, sizeof *w);
    for (int t = 0; t < n_tasks; t++) {
        for (int i = 0; i < tasks[t].reps; i++) {
            double a = 0, b = 0;
            for (int r = 0; r < n; r++) {
                size_t k = (size_t)i * (size_t)n + (size_t)r;
                a = tasks[t].arrive[k] > a ? tasks[t].arrive[k] : a;
                b = tasks[t].release[k] > b ? tasks[t].release[k] : b;
            }
            w[i] = b - a;
        }
        sec[t] = un_median(w, tasks[t].reps);
        free(tasks[t].arrive);
        free(tasks[t].release);
    }
    free(w);
    free(j);
    free(th);
    un_comm_local_group_free(grp);
    return st == UN_OK ? UN_OK : un_ctx_error(ctx, st, "profile: the thread rendezvous failed");
}

/* The rendezvous of the run's D ranks, measured beside the operators so that those the runtime
 * makes are costed at this moment's load (rdv_time): "comm:barrier" devices[D] (un_comm_barrier),
 * "comm:exchange" devices[D] (one un_comm_exchange in which every rank sends a 64-byte message
 * to the next and receives one: a step's gradient sync and weight gather are such exchanges),
 * "comm:send" devices[D] (a one-way exchange between ranks 0 and 1, the others calling with
 * nothing to move: a sender's call to its waiting receiver's return; piece transfers where no
 * rank both sends and receives, such as a tensor-parallel reduce's partial sums to their
 * holder); the exchange and the send again by message size ("devices[D],bytes[B]",
 * un_sim_xchg_bytes, the 64-byte point the same measurement as devices[D]: the bytes cross
 * between the cores as the run's do, at this moment's placement of the threads; a 16 MiB
 * message moves at 24-30 GB/s here idle, an 8 KiB one of a step at a third of that or less,
 * about 30 ms of messages a point, 200 to 15,000 of them), and a ring exchange of 8 KiB in 8
 * messages (the runtime sends one per weight chunk or piece). All of them interleaved, in 20
 * rounds (rdv_main). The loss's sum over the ranks is no part of a step (runtime/train.c sums
 * it only on the steps that report it). */
static un_status profile_rendezvous(un_ctx *ctx, un_rulesdb *db, const un_graph *g,
                                    const char *device, FILE *log, int64_t *n_stored) {
    int64_t d = un_strategy_devices(g);
    if (d < 2)
        return UN_OK;
    static const char *sig[3] = {"comm:barrier", "comm:exchange", "comm:send"};
    enum { NT = 2 + 2 * UN_SIM_XCHG_POINTS };
    rdv_task tasks[NT];
    int nt = 0;
    /* 15,000 reps of the 64-byte rendezvous: at 2,000 one 20 ms load sample of the waits'
     * polling rule decided a whole measurement (2 of 9 one-way profiles at 8.9 us, every wait
     * asleep) */
    tasks[nt++] = (rdv_task){.kind = RDV_BARRIER, .bytes = 0, .msgs = 1, .reps = 15000};
    for (int k = RDV_RING; k <= RDV_SEND; k++)
        for (int b = 0; b < UN_SIM_XCHG_POINTS; b++) {
            double bytes = un_sim_xchg_bytes[b];
            int reps = b == 0 ? 15000 : (int)(0.03 / (3e-6 + bytes / 2e9));
            reps = reps < 200 ? 200 : reps > 15000 ? 15000 : reps;
            tasks[nt++] = (rdv_task){.kind = k, .bytes = (size_t)bytes, .msgs = 1, .reps = reps};
        }
    tasks[nt++] = (rdv_task){
        .kind = RDV_RING, .bytes = UN_SIM_XCHG_MSGS_BYTES, .msgs = UN_SIM_XCHG_MSGS, .reps = 5000};
    double sec[NT];
    un_status st = rdv_time(ctx, (int)d, tasks, nt, 20, sec);
    for (int t = 0; t < nt && st == UN_OK; t++) {
        /* each task's entries: the barrier; the 64-byte point under both its shapes */
        char shapes[2][64];
        int ns = 1;
        if (t == 0)
            snprintf(shapes[0], sizeof shapes[0], "devices[%lld]", (long long)d);
        else if (t == nt - 1)
            un_sim_xchg_msgs_shape((int)d, shapes[0], sizeof shapes[0]);
        else {
            int b = (t - 1) % UN_SIM_XCHG_POINTS;
            un_sim_xchg_shape((int)d, b, shapes[0], sizeof shapes[0]);
            if (b == 0)
                snprintf(shapes[ns++], sizeof shapes[1], "devices[%lld]", (long long)d);
        }
        for (int s = ns - 1; s >= 0 && st == UN_OK; s--)
            if ((st = store(ctx, db, sig[tasks[t].kind], shapes[s], device, sec[t], 0, 0)) ==
                UN_OK) {
                ++*n_stored;
                if (log)
                    fprintf(log, "  %-44s %-40s %10.4f ms\n", sig[tasks[t].kind], shapes[s],
                            sec[t] * 1e3);
            }
    }
    return st;
}

/* What a profile measures besides the ops: the optimizer and the loss as the runtime runs them on
 * this backend, then (CPU devices) the rendezvous and the stretches of work between meets. */
static un_status profile_rest(un_ctx *ctx, un_rulesdb *db, un_backend *be, const un_graph *g,
                              const un_profile_params *p, const char *device, FILE *log,
                              int64_t *n_stored) {
    un_status st = UN_OK;
    if (p->optimizer)
        st = profile_optimizer(ctx, db, be, g, p, device, log, n_stored);
    if (st == UN_OK)
        st = profile_step_parts(ctx, db, be, g, p, device, log, n_stored);
    if (st == UN_OK && p->cuda_device < 0)
        st = profile_rendezvous(ctx, db, g, device, log, n_stored);
    if (st == UN_OK && p->cuda_device < 0 && p->threads == 1)
        st = profile_meet(ctx, db, g, device, log, n_stored);
    return st;
}

int un_profile_least_round(const double *fwd, const double *bwd, int rounds, int nk, const int *key,
                           int n_pos, double *total) {
    int kept = 0;
    for (int r = 0; r < rounds; r++) {
        total[r] = 0;
        for (int i = 0; i < n_pos; i++)
            total[r] += fwd[(size_t)r * (size_t)nk + (size_t)key[i]] +
                        bwd[(size_t)r * (size_t)nk + (size_t)key[i]];
        if (total[r] < total[kept])
            kept = r;
    }
    return kept;
}

/* Sleeps until the monotonic clock reads t (at once if it is past). */
static void pause_until(double t) {
    for (double d; (d = t - now_s()) > 0;) {
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

un_status un_profile_graph(un_ctx *ctx, un_rulesdb *db, const un_graph *g,
                           const un_profile_params *pp, FILE *log, int64_t *n_stored) {
    *n_stored = 0;
    un_profile_params q = *pp;
    const un_profile_params *p = &q;
    un_backend *be = NULL;
    char device[48];
    snprintf(device, sizeof device, "%s%s", p->device, p->f64 ? "-f64" : "");
    un_prec prec = p->f64 ? UN_PREC_F64 : UN_PREC_F32;
    un_status st = p->cuda_device >= 0 ? un_backend_cuda_new(ctx, prec, p->cuda_device, &be)
                   : p->opaque         ? un_backend_opaque_new(ctx, prec, p->threads, &be)
                                       : un_backend_cpu_new(ctx, prec, p->threads, &be);
    if (st == UN_OK && p->cuda_device < 0)
        q.timer_floor = timer_floor(ctx, be);
    int32_t n = un_graph_node_count(g);
    /* CPU devices of a run on several: every op with all of them computing at once */
    int together = p->cuda_device < 0 ? (int)un_strategy_devices(g) : 1;
    char(*seen)[256] = un_xcalloc((size_t)n, sizeof *seen);
    int32_t *ids = un_xcalloc((size_t)n + 1, sizeof *ids);
    int *key = un_xcalloc((size_t)n + 1, sizeof *key), n_seen = 0, n_pos = 0;
    bool *dropped = un_xcalloc((size_t)n + 1, sizeof *dropped);
    bool *fresh = un_xcalloc((size_t)n + 1, sizeof *fresh);
    un_profile_fresh_nodes(g, dropped);
    for (int32_t id = 0; id < n && st == UN_OK; id++) {
        const un_node *nd = un_graph_node(g, id);
        if (un_op_kind_of(nd->op) != UN_OPK_REGULAR)
            continue;
        un_shape in[UN_MAX_INPUTS];
        un_cost_piece_shapes(g, id, in);
        char sig[128], shape[128];
        if (!un_cost_key(un_graph_spec(g), nd->op, nd->inf.local, in, nd->n_in, sig, sizeof sig,
                         shape, sizeof shape))
            continue; /* a key too long for the cache: the cost model stays analytic there */
        char both[256];
        snprintf(both, sizeof both, "%s|%s", sig, shape);
        int i = 0;
        while (i < n_seen && strcmp(seen[i], both) != 0)
            i++;
        if (i == n_seen) {
            memcpy(seen[n_seen], both, sizeof both);
            ids[n_seen++] = id;
        }
        fresh[n_pos] = dropped[id];
        key[n_pos++] = i;
    }
    int rounds = n_seen == 0                         ? 0
                 : p->rounds < 1                     ? 1
                 : p->rounds > UN_PROFILE_MAX_ROUNDS ? UN_PROFILE_MAX_ROUNDS
                                                     : p->rounds;
    size_t nr = rounds > 0 ? (size_t)rounds : 1;
    /* round r's key i: fwd[r * n_seen + i] */
    double *fwd = un_xcalloc(nr * (size_t)n_seen + 1, sizeof *fwd);
    double *bwd = un_xcalloc(nr * (size_t)n_seen + 1, sizeof *bwd);
    un_profile_params qr = q; /* a round's: the ops' min_seconds shared among the rounds */
    qr.min_seconds = p->min_seconds / (double)nr;
    double total[UN_PROFILE_MAX_ROUNDS], t0 = now_s();
    /* the rest's lines, printed after the ops' (it runs between the rounds) */
    char *rest_log = NULL;
    size_t rest_len = 0;
    FILE *rlog = log && rounds > 1 ? open_memstream(&rest_log, &rest_len) : log;
    bool rest = false;
    if (st == UN_OK)
        st = un_rulesdb_begin(ctx, db);
    for (int r = 0; r < rounds && st == UN_OK; r++) {
        if (r == 1) { /* the rest fills the first pause */
            st = profile_rest(ctx, db, be, g, p, device, rlog ? rlog : log, n_stored);
            rest = true;
            if (st != UN_OK)
                break;
        }
        pause_until(t0 + p->span_s * r / (rounds > 1 ? rounds - 1 : 1));
        st = replay_ops(ctx, be, g, ids, n_seen, key, fresh, n_pos, &qr, together,
                        fwd + (size_t)r * (size_t)n_seen, bwd + (size_t)r * (size_t)n_seen);
    }
    int kept =
        st == UN_OK ? un_profile_least_round(fwd, bwd, rounds, n_seen, key, n_pos, total) : 0;
    if (log && rounds > 1 && st == UN_OK) {
        fprintf(log, "  the step's ops in %d rounds over %.1f s, forward + backward:", rounds,
                now_s() - t0);
        for (int r = 0; r < rounds; r++)
            fprintf(log, "%s %.5g", r ? " /" : "", total[r] * 1e3);
        fprintf(log, " ms; kept round %d (the least)\n", kept + 1);
    }
    for (int i = 0; i < n_seen && st == UN_OK; i++) {
        char *shape = strchr(seen[i], '|');
        *shape++ = 0;
        double f = fwd[(size_t)kept * (size_t)n_seen + (size_t)i];
        double b = bwd[(size_t)kept * (size_t)n_seen + (size_t)i];
        if ((st = store(ctx, db, seen[i], shape, device, f, b, 0)) != UN_OK)
            break;
        ++*n_stored;
        if (log)
            fprintf(log, "  %-44s %-40s %10.4f %10.4f ms\n", seen[i], shape, f * 1e3, b * 1e3);
    }
    if (rlog && rlog != log) {
        fclose(rlog);
        if (st == UN_OK && rest_len)
            fwrite(rest_log, 1, rest_len, log);
        free(rest_log);
    }
    free(fwd);
    free(bwd);
    free(ids);
    free(key);
    free(fresh);
    free(dropped);
    if (st == UN_OK && !rest)
        st = profile_rest(ctx, db, be, g, p, device, log, n_stored);
    if (st == UN_OK)
        st = un_rulesdb_commit(ctx, db);
    else
        un_rulesdb_rollback(db);
    free(seen);
    un_backend_free(be);
    return st;
}

/* ---- the machine ---- */

un_status un_profile_machine(un_ctx *ctx, un_machine *m) {
    memset(m, 0, sizeof *m);
    long nc = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES),
         psz = sysconf(_SC_PAGE_SIZE);
    snprintf(m->name, sizeof m->name, "this CPU box: %ld cores as devices (measured)", nc);
    snprintf(m->dev.kind, sizeof m->dev.kind, "cpu");
    /* what was measured: the CPU's model name, the OpenBLAS kernel, when, and how loaded */
    char cpu[128] = "unknown CPU", line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
            cpu[strcspn(cpu, "\n")] = 0;
            break;
        }
    if (f)
        fclose(f);
    double load[1] = {0};
    getloadavg(load, 1);
    time_t now = time(NULL);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    snprintf(m->source, sizeof m->source,
             "measured by unity-profile machine on %.80s, OpenBLAS kernel %.32s, %s, load "
             "average %.1f over %ld cores",
             cpu, un_blas_kernel(), when, load[0], nc);
    m->nodes = 1;
    m->devices_per_node = nc > 0 ? (int)nc : 1;
    m->dev.memory = (double)pages * (double)psz / m->devices_per_node;
    un_backend *be = NULL;
    un_status st = un_backend_cpu_new(ctx, UN_PREC_F32, 1, &be);
    if (st != UN_OK)
        return st;
    /* sgemm: linear [512,512] x [512,512] (every parameter 0: no activation, no bias) */
    un_param lp[UN_MAX_PARAMS];
    memset(lp, 0, sizeof lp);
    for (int i = 0; i < UN_MAX_PARAMS; i++)
        lp[i].len = -1;
    int64_t n = 512;
    un_shape s = un_shape_make(2, (int64_t[]){n, n}, UN_DT_FLOAT);
    bufs b;
    memset(&b, 0, sizeof b);
    b.n_in = 2;
    b.n_out = 1;
    for (int t = 0; t < 2 && st == UN_OK; t++)
        st = kt_new(ctx, be, &s, 4, (uint64_t)t + 1, true, &b.in[t]);
    if (st == UN_OK)
        st = kt_new(ctx, be, &s, 4, 0, false, &b.out[0]);
    un_profile_params p = un_profile_params_default();
    p.min_seconds = 0.3;
    un_node nd;
    memset(&nd, 0, sizeof nd);
    nd.op = UN_OP_LINEAR;
    memcpy(nd.inf.local, lp, sizeof lp);
    double sec = 0;
    op_run r = {.be = be, .nd = &nd, .b = &b, .fes = 4};
    if (st == UN_OK && (st = time_median(ctx, op_prep, op_once, &r, &p, &sec)) == UN_OK)
        m->dev.flops[UN_MPREC_F32] = 2.0 * (double)(n * n * n) / sec;
    bufs_free(be, &b);
    /* one operator's fixed cost: relu on one element */
    memset(&b, 0, sizeof b);
    b.n_in = b.n_out = 1;
    s = un_shape_make(1, (int64_t[]){1}, UN_DT_FLOAT);
    nd.op = UN_OP_RELU;
    p.min_seconds = 0.05;
    if (st == UN_OK && (st = kt_new(ctx, be, &s, 4, 1, true, &b.in[0])) == UN_OK &&
        (st = kt_new(ctx, be, &s, 4, 0, false, &b.out[0])) == UN_OK &&
        (st = time_median(ctx, op_prep, op_once, &r, &p, &sec)) == UN_OK)
        m->dev.op_overhead = sec;
    bufs_free(be, &b);
    un_backend_free(be);
    if (st != UN_OK)
        return st;
    /* memory bandwidth: memcpy of 64 MiB counts 128 MiB moved */
    size_t mb = (size_t)64 << 20;
    char *x = un_xcalloc(mb, 1), *y = un_xcalloc(mb, 1);
    memcpy(y, x, mb);
    int reps = 0;
    double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID), el = 0; /* work, as the ops' times */
    while (reps < 3 || el < 0.3) {
        memcpy(reps % 2 ? x : y, reps % 2 ? y : x, mb);
        reps++;
        el = clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
    }
    m->dev.mem_bw = 2.0 * (double)mb * reps / el;
    free(x);
    free(y);
    /* the local communicator between two threads: latency of a barrier, bandwidth of 16 MiB */
    double lat = 0, big = 0;
    if ((st = xchg_time(ctx, 0, 2000, &lat)) != UN_OK ||
        (st = xchg_time(ctx, (size_t)16 << 20, 20, &big)) != UN_OK)
        return st;
    m->intra.latency = lat;
    m->intra.bw = (double)((size_t)16 << 20) / (big > 2 * lat ? big - 2 * lat : big);
    m->intra.algo = UN_COLL_RING;
    m->inter = m->intra;
    return UN_OK;
}
