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
#include "runtime/comm.h"
#include "runtime/optim.h"
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
                               .cuda_device = -1};
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

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A tensor of shape s in backend memory: floats in [-1, 1), ints 0 (a valid index for every op). */
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
    un_rng r;
    un_rng_seed(&r, seed);
    void *host = un_xmalloc((size_t)n * fes); /* device memory is written, never dereferenced */
    for (int64_t i = 0; i < n; i++) {
        double v = 2 * un_rng_double(&r) - 1;
        if (fes == 4)
            ((float *)host)[i] = (float)v;
        else
            ((double *)host)[i] = v;
    }
    st = un_backend_write(ctx, be, out->data, host, (size_t)n * fes);
    free(host);
    return st;
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

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median seconds of one run after the warm-up: repetitions go on until min_reps and
 * min_seconds are both reached (the median resists the other jobs of a shared machine). Each run
 * is timed by the backend's timer: CUDA events on a GPU (kernel time), the host clock around a
 * synchronised run otherwise. */
static un_status time_op(un_ctx *ctx, un_backend *be, const un_node *nd, bufs *b, bool bwd,
                         const un_profile_params *p, double *sec) {
    un_status st = UN_OK;
    int reps = 0, cap = 64;
    double *t = un_xmalloc(sizeof *t * (size_t)cap), total = 0, wall0 = now_s();
    for (int i = 0; st == UN_OK; i++) {
        un_backend_timer tm;
        double dt = 0;
        st = un_backend_timer_start(ctx, be, &tm);
        if (st == UN_OK && bwd)
            st = un_backend_op_backward(ctx, be, nd->op, nd->inf.local, b->in, b->n_in, b->out,
                                        b->n_out, b->dout, b->din, 1, NULL, NULL);
        else if (st == UN_OK)
            st = un_backend_op_forward(ctx, be, nd->op, nd->inf.local, b->in, b->n_in, b->out,
                                       b->n_out, 1, NULL, NULL);
        if (st == UN_OK)
            st = un_backend_timer_stop(ctx, be, &tm, &dt);
        if (i < p->warmup)
            continue;
        if (reps == cap)
            t = un_xrealloc(t, sizeof *t * (size_t)(cap *= 2));
        t[reps++] = dt;
        total += dt;
        /* a device clock can read far below the wall time: stop on either */
        if ((reps >= p->min_reps &&
             (total >= p->min_seconds || now_s() - wall0 >= 10 * p->min_seconds)) ||
            reps >= 100000)
            break;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    *sec = reps ? t[reps / 2] : 0;
    free(t);
    return st;
}

static un_status profile_node(un_ctx *ctx, un_backend *be, const un_graph *g, int32_t id,
                              const un_profile_params *p, size_t fes, double *fwd, double *bwd) {
    const un_node *nd = un_graph_node(g, id);
    const un_spec *spec = un_graph_spec(g);
    bufs b;
    memset(&b, 0, sizeof b);
    un_shape in[UN_MAX_INPUTS];
    un_cost_piece_shapes(g, id, in);
    un_infer inf;
    un_status st = un_spec_infer(ctx, spec, nd->op, nd->inf.local, in, nd->n_in, NULL, &inf);
    b.n_in = nd->n_in;
    b.n_out = inf.n_out;
    for (int t = 0; t < nd->n_in && st == UN_OK; t++) {
        st = kt_new(ctx, be, &in[t], fes, (uint64_t)t + 1, true, &b.in[t]);
        if (st == UN_OK && in[t].dtype == UN_DT_FLOAT)
            st = kt_new(ctx, be, &in[t], fes, 0, false, &b.din[t]);
    }
    for (int o = 0; o < inf.n_out && st == UN_OK; o++) {
        st = kt_new(ctx, be, &inf.out[o], fes, 0, false, &b.out[o]);
        if (st == UN_OK && inf.out[o].dtype == UN_DT_FLOAT)
            st = kt_new(ctx, be, &inf.out[o], fes, (uint64_t)o + 99, true, &b.dout[o]);
    }
    if (st == UN_OK)
        st = time_op(ctx, be, nd, &b, false, p, fwd);
    if (st == UN_OK)
        st = time_op(ctx, be, nd, &b, true, p, bwd);
    bufs_free(be, &b);
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

/* The optimizer step over all the graph's weights on the backend, as the runtime runs it
 * (un_optim_step_on on backend memory). */
static un_status profile_optimizer(un_ctx *ctx, un_rulesdb *db, un_backend *be, const un_graph *g,
                                   const un_profile_params *p, const char *device, FILE *log,
                                   int64_t *n_stored) {
    int64_t n = 0;
    for (int32_t id = 0; id < un_graph_node_count(g); id++)
        if (un_graph_node(g, id)->op == UN_OP_WEIGHT)
            n += un_shape_numel(&un_graph_node(g, id)->inf.out[0]);
    un_optim_algo k;
    if (n == 0 || !un_optim_algo_from_name(p->optimizer, &k))
        return UN_OK;
    size_t fes = p->f64 ? 8 : 4;
    un_optim *o = NULL;
    un_buffer *w = NULL, *gr = NULL;
    un_status st = un_optim_new_on(ctx, un_optim_params_default(k), n, be, &o);
    if (st == UN_OK)
        st = un_buffer_new(ctx, be, (size_t)n * fes, &w);
    if (st == UN_OK)
        st = un_buffer_new(ctx, be, (size_t)n * fes, &gr);
    int reps = 0;
    double el = 0, wall0 = now_s();
    for (int i = 0; st == UN_OK; i++) {
        un_backend_timer tm;
        double dt = 0;
        if ((st = un_backend_timer_start(ctx, be, &tm)) == UN_OK &&
            (st = un_optim_step_on(ctx, o, be, un_buffer_at(w, 0), un_buffer_at(gr, 0))) == UN_OK)
            st = un_backend_timer_stop(ctx, be, &tm, &dt);
        if (i < p->warmup)
            continue;
        reps++;
        el += dt;
        if (reps >= p->min_reps && (el >= p->min_seconds || now_s() - wall0 >= 10 * p->min_seconds))
            break;
    }
    if (st == UN_OK) {
        char sig[48], shape[48];
        snprintf(sig, sizeof sig, "optimizer:%s", un_optim_algo_name(k));
        snprintf(shape, sizeof shape, "float[%lld]", (long long)n);
        st = store(ctx, db, sig, shape, device, el / reps, 0, (double)n * (double)fes);
        if (st == UN_OK) {
            ++*n_stored;
            if (log)
                fprintf(log, "  %-44s %-40s %10.4f ms\n", sig, shape, 1e3 * el / reps);
        }
    }
    un_optim_free(o);
    un_buffer_free(w);
    un_buffer_free(gr);
    return st;
}

/* The runtime's own per-step work besides operators, as runtime/train.c runs it: making the batch
 * (one random number per element on the host, written to the backend) and the cross-entropy
 * loss with its gradient on one output piece, on the backend. Median of repetitions, like the
 * ops. */
static un_status profile_step_parts(un_ctx *ctx, un_rulesdb *db, un_backend *be, const un_graph *g,
                                    const un_profile_params *p, const char *device, FILE *log,
                                    int64_t *n_stored) {
    size_t fes = p->f64 ? 8 : 4;
    int64_t n = un_sim_data_elements(g);
    char shape[64];
    double t[2] = {0, 0};
    const char *sig[2] = {"data:synthetic", "loss:ce"};
    char shapes[2][64];
    snprintf(shapes[0], sizeof shapes[0], "float[%lld]", (long long)n);
    const un_shape *o = un_graph_output_count(g) ? un_graph_shape(g, un_graph_output(g, 0)) : NULL;
    un_sim_loss_shape(o ? o : &(un_shape){0}, shape, sizeof shape);
    snprintf(shapes[1], sizeof shapes[1], "%s", shape);
    long long rows = 0, cls = 0;
    sscanf(shape, "float[%lld,%lld]", &rows, &cls);
    int64_t m = rows * cls;
    void *host = un_xcalloc((size_t)n + 1, fes);
    un_buffer *data = NULL, *logits = NULL, *grad = NULL, *labels = NULL;
    un_status st = un_buffer_new(ctx, be, ((size_t)(n > m ? n : m) + 1) * fes, &data);
    if (st == UN_OK)
        st = un_buffer_new(ctx, be, ((size_t)m + 1) * fes, &logits);
    if (st == UN_OK)
        st = un_buffer_new(ctx, be, ((size_t)m + 1) * fes, &grad);
    if (st == UN_OK)
        st = un_buffer_new(ctx, be, ((size_t)rows + 1) * sizeof(int64_t), &labels);
    un_kt y = {.dtype = UN_DT_FLOAT, .rank = 2, .dim = {rows, cls}},
          gy = {.dtype = UN_DT_FLOAT, .rank = 2, .dim = {rows, cls}},
          lab = {.dtype = UN_DT_INT, .rank = 1, .dim = {rows}};
    if (st == UN_OK) {
        y.data = un_buffer_at(logits, 0);
        gy.data = un_buffer_at(grad, 0);
        lab.data = un_buffer_at(labels, 0);
    }
    for (int part = 0; part < 2 && st == UN_OK; part++) {
        double *ts = un_xmalloc(sizeof *ts * 64);
        int reps = 0;
        double total = 0;
        for (int i = 0;
             st == UN_OK && i < p->warmup + 63 && !(reps >= p->min_reps && total >= p->min_seconds);
             i++) {
            double dt = 0;
            if (part == 0) { /* host clock: the generation is host work */
                double t0 = now_s();
                un_rng rng;
                un_rng_seed(&rng, (uint64_t)i);
                for (int64_t x = 0; x < n; x++) {
                    double v = 2 * un_rng_double(&rng) - 1;
                    if (fes == 4)
                        ((float *)host)[x] = (float)v;
                    else
                        ((double *)host)[x] = v;
                }
                st = un_buffer_write(ctx, data, 0, host, (size_t)n * fes);
                if (st == UN_OK)
                    st = un_backend_synchronize(ctx, be);
                dt = now_s() - t0;
            } else if (m > 0) {
                un_backend_timer tm;
                double loss;
                if ((st = un_backend_timer_start(ctx, be, &tm)) == UN_OK &&
                    (st = un_backend_loss(ctx, be, UN_LOSS_CE, &y, NULL, NULL, &lab, &gy, &loss)) ==
                        UN_OK)
                    st = un_backend_timer_stop(ctx, be, &tm, &dt);
            }
            if (i >= p->warmup) {
                ts[reps++] = dt;
                total += dt;
            }
        }
        qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
        t[part] = reps ? ts[reps / 2] : 0;
        free(ts);
    }
    for (int part = 0; part < 2 && st == UN_OK; part++) {
        if ((st = store(ctx, db, sig[part], shapes[part], device, t[part], 0, 0)) != UN_OK)
            break;
        ++*n_stored;
        if (log)
            fprintf(log, "  %-44s %-40s %10.4f ms\n", sig[part], shapes[part], t[part] * 1e3);
    }
    free(host);
    un_buffer_free(data);
    un_buffer_free(logits);
    un_buffer_free(grad);
    un_buffer_free(labels);
    return st;
}

un_status un_profile_graph(un_ctx *ctx, un_rulesdb *db, const un_graph *g, const un_profile_params *p,
                           FILE *log, int64_t *n_stored) {
    *n_stored = 0;
    un_backend *be = NULL;
    size_t fes = p->f64 ? 8 : 4;
    char device[48];
    snprintf(device, sizeof device, "%s%s", p->device, p->f64 ? "-f64" : "");
    un_prec prec = p->f64 ? UN_PREC_F64 : UN_PREC_F32;
    un_status st = p->cuda_device >= 0 ? un_backend_cuda_new(ctx, prec, p->cuda_device, &be)
                   : p->opaque         ? un_backend_opaque_new(ctx, prec, p->threads, &be)
                                       : un_backend_cpu_new(ctx, prec, p->threads, &be);
    int32_t n = un_graph_node_count(g);
    char(*seen)[256] = un_xcalloc((size_t)n, sizeof *seen);
    int n_seen = 0;
    if (st == UN_OK)
        st = un_rulesdb_begin(ctx, db);
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
        bool dup = false;
        for (int i = 0; i < n_seen && !dup; i++)
            dup = strcmp(seen[i], both) == 0;
        if (dup)
            continue;
        memcpy(seen[n_seen++], both, sizeof both);
        double fwd = 0, bwd = 0;
        if ((st = profile_node(ctx, be, g, id, p, fes, &fwd, &bwd)) != UN_OK)
            break;
        if ((st = store(ctx, db, sig, shape, device, fwd, bwd, 0)) != UN_OK)
            break;
        ++*n_stored;
        if (log)
            fprintf(log, "  %-44s %-40s %10.4f %10.4f ms\n", sig, shape, fwd * 1e3, bwd * 1e3);
    }
    /* the optimizer, data and loss as the runtime runs them on this backend */
    if (st == UN_OK && p->optimizer)
        st = profile_optimizer(ctx, db, be, g, p, device, log, n_stored);
    if (st == UN_OK)
        st = profile_step_parts(ctx, db, be, g, p, device, log, n_stored);
    if (st == UN_OK)
        st = un_rulesdb_commit(ctx, db);
    else
        un_rulesdb_rollback(db);
    free(seen);
    un_backend_free(be);
    return st;
}

/* ---- the machine ---- */

typedef struct xjob {
    un_comm *c;
    void *buf[2];
    size_t bytes;
    int reps;
    double sec;
    un_status st;
} xjob;

/* Rank 0 sends its buffer to rank 1 (and 1 nothing back), reps times; bytes 0 = barriers only. */
static void *xchg_main(void *arg) {
    xjob *j = arg;
    un_ctx *ctx = un_ctx_new(NULL);
    int r = un_comm_rank(j->c);
    un_comm_msg m = {.peer = 1 - r, .tag = 0, .data = j->buf[r], .bytes = j->bytes};
    double t0 = now_s();
    for (int i = 0; i < j->reps && j->st == UN_OK; i++)
        j->st = j->bytes ? un_comm_exchange(ctx, j->c, r == 0 ? &m : NULL, r == 0,
                                            r == 1 ? &m : NULL, r == 1)
                         : un_comm_barrier(ctx, j->c);
    j->sec = (now_s() - t0) / j->reps;
    un_ctx_free(ctx);
    return NULL;
}

static un_status xchg_time(un_ctx *ctx, size_t bytes, int reps, double *sec) {
    un_comm_group *grp = NULL;
    un_status st = un_comm_local_group_new(ctx, 2, &grp);
    if (st != UN_OK)
        return st;
    xjob j[2];
    void *b0 = un_xcalloc(bytes + 1, 1), *b1 = un_xcalloc(bytes + 1, 1);
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        j[r] =
            (xjob){.c = un_comm_local_get(grp, r), .buf = {b0, b1}, .bytes = bytes, .reps = reps};
        pthread_create(&th[r], NULL, xchg_main, &j[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    st = j[0].st != UN_OK ? j[0].st : j[1].st;
    *sec = j[1].sec;
    free(b0);
    free(b1);
    un_comm_local_group_free(grp);
    return st == UN_OK ? UN_OK : un_ctx_error(ctx, st, "machine: the thread exchange failed");
}

un_status un_profile_machine(un_ctx *ctx, un_machine *m) {
    memset(m, 0, sizeof *m);
    long nc = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES),
         psz = sysconf(_SC_PAGE_SIZE);
    snprintf(m->name, sizeof m->name, "this CPU box: %ld cores as devices (measured)", nc);
    snprintf(m->dev.kind, sizeof m->dev.kind, "cpu");
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
    if (st == UN_OK && (st = time_op(ctx, be, &nd, &b, false, &p, &sec)) == UN_OK)
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
        (st = time_op(ctx, be, &nd, &b, false, &p, &sec)) == UN_OK)
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
    double t0 = now_s(), el = 0;
    while (reps < 3 || el < 0.3) {
        memcpy(reps % 2 ? x : y, reps % 2 ? y : x, mb);
        reps++;
        el = now_s() - t0;
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
