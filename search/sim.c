/* sim.c - one training step of a plan as a list schedule over devices and links: tasks (compute,
 * communication, copies) with their devices, durations and the task that made each one wait, so
 * that the critical path can be walked back from the last task to finish. */
#include "search/sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "runtime/kernels.h"
#include "runtime/strategy.h"

enum { K_COMPUTE, K_COMM, K_OTHER };

typedef struct stamp { /* a time and the task that produced it (-1: the step's start) */
    double t;
    int32_t task;
} stamp;

typedef struct task {
    int32_t node;
    int8_t kind;
    double dur;
    int32_t pred; /* the task whose end this one waited for, or -1 */
} task;

typedef struct stensor {
    un_shape shape;
    int64_t np;
    double pbytes; /* bytes of one piece */
    bool needs_grad;
    bool is_static; /* plan semantics: a weight or a layout of one (resident, no movement) */
    bool leaf;      /* a regular op reads it (a static leaf is what devices hold and update) */
    bool weight;    /* a weight or a parallel op over one */
    int32_t *owner; /* per piece: device, -1 = every device (mirrored) */
    bool *view;     /* per piece: a view of its source (a parallel op's; no buffer of its own) */
    stamp *ready;   /* per piece: forward value available at its owner */
    stamp *gready;  /* per piece: gradient complete at its owner */
} stensor;

typedef struct xfer {
    int t;
    int64_t piece;
    int64_t blk; /* the output piece of a parallel op that reads a block of `piece`, else -1 */
    int from, to;
    double bytes;
    stamp at; /* arrival */
} xfer;

typedef struct sim {
    un_ctx *ctx;
    un_cost_model *cm;
    const un_graph *g;
    const un_sim_params *p;
    int D, es;
    stensor **ts; /* per node, per output */
    task *tasks;
    int32_t n_tasks, cap_tasks;
    stamp *clock; /* per device */
    stamp *net;   /* per device: its outgoing link is free (point to point) */
    un_sim_result *r;
    xfer *xf;
    int n_xf, cap_xf;
    double *xmem;    /* per device: transfer buffers (forward: received piece and its gradient) */
    double *gbytes;  /* per device: gradient bytes the runtime zeroes every step */
    int64_t *gbufs;  /* per device: the gradient buffers it zeroes (one call each) */
    double *stash;   /* per device: what the CPU kernels keep from the forwards for the backwards */
    double *scratch; /* per device: the most scratch one kernel call takes (one at a time; CPU
                      * kernels, or the CUDA backend's growable buffer with device.gpu) */
    bool stashes;    /* the device kind runs the CPU kernels (cpu): they hold a stash */
    /* runtime semantics on cpu devices: the ranks are threads of one process (unity-train's local
     * communicator on host memory), which read each other's buffers in place: no scratch for the
     * reduce-scatter's add receives, and the weights un_exec_chunked_weight names have their
     * gradient sums computed in chunks by their owners (runtime/exec.c) */
    bool shared;
    /* runtime semantics: activations, their gradients and transfer buffers that live only over
     * part of the step (times lo..hi of runtime/exec.c's arena: the forward of node j at j, the
     * loss at n, the backward of node j at 2n - j), and the gradient sync's receive scratch per
     * device */
    struct arena_req {
        int dev;
        int32_t lo, hi;
        double bytes;
        bool grad; /* a gradient (the runtime zeroes it every step) */
    } * areq;
    int32_t *vlast; /* runtime semantics, per node: the last time its output's values are read */
    int32_t *until; /* ... and a chunked linear layer's pieces live to (un_exec_chunked_until) */
    int n_areq, cap_areq;
    double *sync_recv;
    int64_t *sync_nmsg; /* per device: the messages of the weights' sync it receives */
    double *shard;      /* per device: bytes of the weights its optimizer updates */
    bool backward;
    double lat;  /* seconds of one barrier of the D ranks (runtime semantics) */
    double xlat; /* seconds of one exchange's rendezvous of the D ranks, without its bytes */
    double slat; /* the same for a one-way exchange (no rank both sends and receives) */
    /* [one way][point]: an exchange's measured seconds at un_sim_xchg_bytes; [0] 0: unmeasured */
    double xpts[2][UN_SIM_XCHG_POINTS];
    double xmsg;  /* seconds each message of an exchange past the first adds (measured; else 0) */
    int meets;    /* rendezvous of all D ranks in the step (runtime semantics) */
    double since; /* when the last rendezvous ended */
    double extra; /* the waits for cores the stretches of work so far meet (measured) */
    double work;  /* their work */
} sim;

static void stretch(sim *s, double work);
static double xchg_time(sim *s, double bytes, bool one_way, int64_t msgs);

/* Runtime semantics: whether weight node id's copy-group sum is made in chunks in place. */
static bool chunked(const sim *s, int32_t id) {
    return s->shared && un_exec_chunked_weight(s->g, id, (int64_t)s->es);
}

/* The bytes of device d's pieces of chunked weights (their gradients are not zeroed: the chunks
 * are written whole). */
static double chunked_bytes(const sim *s, int d) {
    double b = 0;
    for (int32_t id = 0; id < un_graph_node_count(s->g); id++) {
        const stensor *t = &s->ts[id][0];
        for (int64_t q = 0; chunked(s, id) && q < t->np; q++)
            b += t->owner[q] == d ? t->pbytes : 0;
    }
    return b;
}

static stamp later(stamp a, stamp b) { return a.t >= b.t ? a : b; }

static void arena_add(sim *s, int dev, int32_t lo, int32_t hi, double bytes, bool grad) {
    int32_t end = 2 * un_graph_node_count(s->g); /* the step's last time (T_NEVER: to the end) */
    hi = hi < end ? hi : end;
    if (s->n_areq == s->cap_areq) {
        s->cap_areq = s->cap_areq ? 2 * s->cap_areq : 256;
        s->areq = un_xrealloc(s->areq, sizeof *s->areq * (size_t)s->cap_areq);
    }
    s->areq[s->n_areq++] = (struct arena_req){dev, lo, hi, bytes, grad};
}

/* The arena's clock (runtime/exec.c): node j's forward at j, the loss at n, its backward at
 * 2n - j; a value read after the step (a graph output's) lives to its end. */
#define T_FWD(j)    ((int32_t)(j))
#define T_BWD(n, j) ((int32_t)(2 * (n) - (j)))
#define T_NEVER     INT32_MAX

/* Runtime semantics: per node the last time its output's values are read (runtime/exec.c's
 * plan_value_lifetimes): a consumer's forward, the backward of a regular consumer that needs
 * gradients and reads its inputs, its own backward when it reads its outputs, and whatever reads a
 * view of them (a parallel consumer's output); T_NEVER for graph outputs. */
static void value_lifetimes(sim *s) {
    int32_t n = un_graph_node_count(s->g);
    s->vlast = un_xcalloc((size_t)n + 1, sizeof *s->vlast);
    s->until = un_xcalloc((size_t)n + 1, sizeof *s->until);
    if (s->shared)
        un_exec_chunked_until(s->g, (int64_t)s->es, s->until);
    else
        for (int32_t id = 0; id < n; id++)
            s->until[id] = -1;
    bool *ng = un_xcalloc((size_t)n + 1, sizeof *ng);
    for (int32_t id = 0; id < n; id++) {
        const un_node *nd = un_graph_node(s->g, id);
        ng[id] = nd->op == UN_OP_WEIGHT;
        for (int t = 0; t < nd->n_in; t++)
            ng[id] |= ng[nd->in[t].node];
        bool ins = false, outs = false;
        if (un_op_kind_of(nd->op) == UN_OPK_REGULAR)
            un_exec_bwd_reads(s->g, nd, &ins, &outs);
        s->vlast[id] = outs && ng[id] ? T_BWD(n, id) : T_FWD(id);
        if (outs && ng[id] && s->until[id] > s->vlast[id])
            s->vlast[id] = s->until[id];
    }
    for (int32_t i = 0; i < un_graph_output_count(s->g); i++)
        s->vlast[un_graph_output(s->g, i).node] = T_NEVER;
    for (int32_t c = n - 1; c >= 0; c--) {
        const un_node *nd = un_graph_node(s->g, c);
        int32_t use = T_FWD(c);
        bool ins = false, outs;
        if (un_op_kind_of(nd->op) == UN_OPK_PARALLEL)
            use = s->vlast[c];
        else if (un_op_kind_of(nd->op) == UN_OPK_REGULAR)
            un_exec_bwd_reads(s->g, nd, &ins, &outs);
        if (ins && ng[c])
            use = T_BWD(n, c) > s->until[c] ? T_BWD(n, c) : s->until[c];
        for (int t = 0; t < nd->n_in; t++)
            if (s->vlast[nd->in[t].node] < use)
                s->vlast[nd->in[t].node] = use;
    }
    free(ng);
}

/* The elements of weight piece q (shape s) its holder updates in the runtime's sharded step: a
 * zero summand none, a piece in c copies its chunk (copy g: elements [pn g / c, pn (g+1) / c)),
 * else all. */
static int64_t piece_shard(const un_shape *s, int64_t q) {
    int32_t blk[UN_MAX_DIMS], sum, copy;
    un_shape_piece_coords(s, q, blk, &sum, &copy);
    int64_t pn = un_shape_piece_numel(s);
    if (sum != 0)
        return 0;
    if (s->copy <= 1)
        return pn;
    return pn * (copy + 1) / s->copy - pn * copy / s->copy;
}

static stamp run_task(sim *s, int dev, int32_t node, int kind, stamp ready, double dur) {
    if (s->n_tasks == s->cap_tasks) {
        s->cap_tasks = s->cap_tasks ? 2 * s->cap_tasks : 1024;
        s->tasks = un_xrealloc(s->tasks, sizeof *s->tasks * (size_t)s->cap_tasks);
    }
    stamp st = later(s->clock[dev], ready);
    task *tk = &s->tasks[s->n_tasks];
    *tk = (task){.node = node, .kind = (int8_t)kind, .dur = dur, .pred = st.task};
    stamp end = {st.t + dur, s->n_tasks++};
    s->clock[dev] = end;
    if (kind == K_COMPUTE)
        s->r->compute_total += dur;
    else if (kind == K_COMM)
        s->r->comm_total += dur;
    return end;
}

#define piece_index  un_shape_piece_index
#define piece_coords un_shape_piece_coords

static stensor *in_tensor(sim *s, const un_node *nd, int t) {
    return &s->ts[nd->in[t].node][nd->in[t].out];
}

/* ---- transfers ---- */

/* The transfer of piece `piece` of input slot t (or of the block of it that output piece blk of a
 * parallel op reads, blk >= 0) to device `to`: found or added; -1 when none is needed. */
static int need(sim *s, int t, int64_t piece, int64_t blk, int from, int to, double bytes) {
    if (from < 0 || from == to)
        return -1;
    for (int i = 0; i < s->n_xf; i++)
        if (s->xf[i].t == t && s->xf[i].piece == piece && s->xf[i].blk == blk && s->xf[i].to == to)
            return i;
    if (s->n_xf == s->cap_xf) {
        s->cap_xf = s->cap_xf ? 2 * s->cap_xf : 16;
        s->xf = un_xrealloc(s->xf, sizeof *s->xf * (size_t)s->cap_xf);
    }
    s->xf[s->n_xf] = (xfer){
        .t = t, .piece = piece, .blk = blk, .from = from, .to = to, .bytes = bytes, .at = {0, -1}};
    return s->n_xf++;
}

/* Runs the node's transfers. Mirror mode: one collective exchange (every device waits for every
 * other, then each receives its bytes); else point to point on the sender's link. ready(i) is when
 * transfer i's data is available at its sender. */
static void run_xfers(sim *s, int32_t node, const stamp *ready) {
    if (s->n_xf == 0)
        return;
    const un_node *nd = un_graph_node(s->g, node);
    for (int i = 0; i < s->n_xf; i++) {
        const xfer *x = &s->xf[i];
        s->r->comm_bytes += x->bytes;
        if (s->backward)
            continue;
        /* the receiver keeps the piece (runtime: in the arena from this node's forward to its
         * backward when that reads it, or as long as a parallel op's output, which may be a view
         * of it); its gradient there and the sender's return buffer live during this node's
         * backward */
        bool ng = in_tensor(s, nd, x->t)->needs_grad;
        if (s->p->mirror_sources) {
            int32_t n = un_graph_node_count(s->g), last = T_FWD(node);
            bool ins, outs;
            un_exec_bwd_reads(s->g, nd, &ins, &outs);
            if (un_op_kind_of(nd->op) == UN_OPK_PARALLEL)
                last = s->vlast[node];
            else if (s->ts[node][0].needs_grad && ins)
                last = T_BWD(n, node);
            arena_add(s, x->to, T_FWD(node), last, x->bytes, false);
            if (ng) {
                arena_add(s, x->to, T_BWD(n, node), T_BWD(n, node), x->bytes, true);
                arena_add(s, x->from, T_BWD(n, node), T_BWD(n, node), x->bytes, true);
            }
        } else {
            s->xmem[x->to] += x->bytes * (ng ? 2 : 1);
            if (ng)
                s->xmem[x->from] += x->bytes;
        }
    }
    if (s->p->mirror_sources) {
        stamp st = {0, -1};
        for (int d = 0; d < s->D; d++)
            st = later(st, s->clock[d]);
        for (int i = 0; i < s->n_xf; i++)
            st = later(st, ready[i]);
        double *in = un_xcalloc((size_t)s->D, sizeof *in), worst = 0;
        int wd = 0, nmsg = 0;
        for (int i = 0; i < s->n_xf; i++)
            in[s->xf[i].to] += s->xf[i].bytes;
        for (int d = 0; d < s->D; d++)
            if (in[d] >= worst)
                worst = in[d], wd = d;
        for (int i = 0; i < s->n_xf; i++)
            nmsg += s->xf[i].to == wd;
        /* one way (no device both sends and receives: a receiver waits for a sender that does
         * not wait for it) or both ways */
        bool one_way = true;
        for (int i = 0; i < s->n_xf && one_way; i++)
            for (int k = 0; k < s->n_xf && one_way; k++)
                one_way = s->xf[i].from == s->xf[i].to || s->xf[i].to != s->xf[k].from ||
                          s->xf[k].from == s->xf[k].to;
        /* the rendezvous and the largest receive, in its messages */
        double dur = xchg_time(s, worst, one_way, nmsg);
        stretch(s, st.t - s->since);
        stamp end = run_task(s, wd, node, K_COMM, st, dur);
        s->since = end.t;
        for (int d = 0; d < s->D; d++)
            s->clock[d] = end;
        for (int i = 0; i < s->n_xf; i++)
            s->xf[i].at = end;
        free(in);
        return;
    }
    for (int i = 0; i < s->n_xf; i++) {
        xfer *x = &s->xf[i];
        stamp st = later(s->net[x->from], ready[i]);
        double dur = un_cost_p2p(s->cm, x->from, x->to, x->bytes);
        /* the link is its own resource: account it like a task on the sender's link */
        stamp save = s->clock[x->from];
        s->clock[x->from] = s->net[x->from];
        x->at = run_task(s, x->from, node, K_COMM, st, dur);
        s->net[x->from] = x->at;
        s->clock[x->from] = save;
    }
}

/* ---- forward ---- */

/* The device of piece p of a node's output: the runtime's placement (un_view_device). */
static int32_t sim_place(const sim *s, const un_node *nd, int64_t p) {
    return un_view_device(&nd->view, p, s->D);
}

typedef struct tuple {
    int dev;
    int64_t in_piece[UN_MAX_INPUTS];
    int in_xf[UN_MAX_INPUTS];
} tuple;

static tuple *regular_tuples(sim *s, const un_node *nd, stensor *outs, int64_t *n) {
    const un_infer *inf = &nd->inf;
    int64_t nt = 1;
    for (int j = 0; j < inf->n_uses; j++)
        nt *= inf->uses[j].degree;
    tuple *tp = un_xcalloc((size_t)nt, sizeof *tp);
    int32_t u[UN_MAX_USES], blk[UN_MAX_DIMS], sum, copy;
    memset(u, 0, sizeof u);
    for (int64_t q = 0; q < nt; q++) {
        un_infer_piece(inf, u, true, 0, blk, &sum, &copy);
        int d = sim_place(s, nd, piece_index(&outs[0].shape, blk, sum, copy));
        tp[q].dev = d;
        for (int o = 0; o < inf->n_out; o++) {
            un_infer_piece(inf, u, true, o, blk, &sum, &copy);
            outs[o].owner[piece_index(&outs[o].shape, blk, sum, copy)] = d;
        }
        for (int t = 0; t < nd->n_in; t++) {
            stensor *src = in_tensor(s, nd, t);
            un_infer_piece(inf, u, false, t, blk, &sum, &copy);
            int64_t p = piece_index(&src->shape, blk, sum, copy);
            tp[q].in_piece[t] = p;
            tp[q].in_xf[t] = need(s, t, p, -1, src->owner[p], d, src->pbytes);
        }
        for (int j = inf->n_uses - 1; j >= 0 && ++u[j] == inf->uses[j].degree; j--)
            u[j] = 0;
    }
    *n = nt;
    return tp;
}

/* The source pieces of output piece p of a parallel op, and whether the copy is a view. */
static bool is_graph_output(const un_graph *g, int32_t id) {
    for (int32_t i = 0; i < un_graph_output_count(g); i++)
        if (un_graph_output(g, i).node == id)
            return true;
    return false;
}

/* What a parallel op's output piece p reads of a source piece travels (runtime/exec.c): the
 * block of it, that is the output piece where the op cuts pieces finer (partition), else the
 * whole source piece (combine, replicate, reduce). block_of keys the transfer by that block. */
static int64_t block_of(const stensor *si, const stensor *so, int64_t p) {
    return so->pbytes < si->pbytes ? p : -1;
}
static double block_bytes(const stensor *si, const stensor *so) {
    return so->pbytes < si->pbytes ? so->pbytes : si->pbytes;
}

static int parallel_sources(const un_node *nd, const stensor *si, const stensor *so, int64_t k,
                            int64_t p, int64_t *src, int max, bool *view) {
    int32_t blk[UN_MAX_DIMS], sum, copy;
    piece_coords(&so->shape, p, blk, &sum, &copy);
    int rank = so->shape.rank, n = 0;
    *view = false;
    if (nd->op == UN_OP_REPLICATE) {
        src[0] = piece_index(&si->shape, blk, sum, (int32_t)(copy / k));
        *view = true;
        return 1;
    }
    if (nd->op == UN_OP_REDUCE) {
        for (int64_t t = 0; t < k && n < max; t++)
            src[n++] = piece_index(&si->shape, blk, (int32_t)(sum * k + t), copy);
        return n;
    }
    int64_t lo[UN_MAX_DIMS], hi[UN_MAX_DIMS], sd[UN_MAX_DIMS], dd[UN_MAX_DIMS];
    int32_t ib[UN_MAX_DIMS];
    for (int i = 0; i < rank; i++) {
        sd[i] = si->shape.dim[i] / si->shape.shard[i];
        dd[i] = so->shape.dim[i] / so->shape.shard[i];
        int64_t g0 = blk[i] * dd[i];
        lo[i] = g0 / sd[i];
        hi[i] = (g0 + dd[i] - 1) / sd[i];
        ib[i] = (int32_t)lo[i];
    }
    for (;;) {
        if (n < max)
            src[n++] = piece_index(&si->shape, ib, sum, copy);
        int i = rank - 1;
        while (i >= 0 && ++ib[i] > hi[i]) {
            ib[i] = (int32_t)lo[i];
            i--;
        }
        if (i < 0)
            break;
    }
    if (n == 1) { /* one block: a view when its rows are contiguous in the source piece */
        int m = rank - 1;
        while (m >= 0 && dd[m] == sd[m])
            m--;
        bool ok = true;
        for (int d = 0; d < m; d++)
            ok &= dd[d] == 1;
        *view = ok;
    }
    return n;
}

#define MAX_SRC 4096

/* A piece as the kernels see it: dtype, rank and the piece's dims (no data). */
static un_kt piece_kt(const un_shape *sh) {
    un_kt k;
    memset(&k, 0, sizeof k);
    k.dtype = sh->dtype;
    k.rank = sh->rank;
    un_shape_piece_dims(sh, k.dim);
    return k;
}

/* Bytes the CPU kernels keep from the forward of one device tuple of node nd for its backward,
 * and the most scratch its calls take: the runtime's own counts (un_kern_stash_bytes and
 * un_exec_kern_scratch, what its memory check adds per task; one kernel thread per device, as
 * the profiled runs have). */
static void kernel_memory(sim *s, const un_node *nd, const stensor *outs, double *stash,
                          double *scratch) {
    un_kt in[UN_MAX_INPUTS], out[UN_MAX_OUTPUTS];
    for (int t = 0; t < nd->n_in; t++)
        in[t] = piece_kt(&in_tensor(s, nd, t)->shape);
    for (int o = 0; o < nd->inf.n_out; o++)
        out[o] = piece_kt(&outs[o].shape);
    un_prec prec = s->es == 4 ? UN_PREC_F32 : UN_PREC_F64;
    *stash = (double)un_kern_stash_bytes(prec, nd->op, nd->inf.local, in, nd->n_in, out);
    bool grads[UN_MAX_INPUTS];
    for (int t = 0; t < nd->n_in; t++)
        grads[t] = in_tensor(s, nd, t)->needs_grad;
    *scratch = (double)un_exec_kern_scratch(nd, prec, in, out, grads, 1);
}

static un_status forward_node(sim *s, int32_t id) {
    const un_node *nd = un_graph_node(s->g, id);
    stensor *outs = s->ts[id];
    un_op_kind kind = un_op_kind_of(nd->op);
    s->n_xf = 0;
    if (kind == UN_OPK_SOURCE) {
        stensor *t = &outs[0];
        for (int64_t p = 0; p < t->np; p++) {
            t->owner[p] = !t->is_static ? -1 : (int32_t)un_sim_device(s->g, id, p, s->D);
            t->ready[p] = (stamp){0, -1};
        }
        if (!t->is_static && t->np > 1) /* every device cuts every piece of the input */
            for (int d = 0; d < s->D; d++)
                run_task(s, d, id, K_OTHER, (stamp){0, -1},
                         un_cost_copy(s->cm, t->pbytes * (double)t->np));
        return UN_OK;
    }
    if (kind == UN_OPK_PARALLEL) {
        stensor *si = in_tensor(s, nd, 0), *so = &outs[0];
        const un_op_spec *os = un_spec_op(un_graph_spec(s->g), nd->op);
        int64_t k = nd->params[un_spec_param_index(os, "degree")].v[0];
        int64_t *src = un_xmalloc(sizeof *src * MAX_SRC);
        int *nsrc = un_xcalloc((size_t)so->np, sizeof *nsrc);
        bool *view = un_xcalloc((size_t)so->np, sizeof *view);
        bool local = !so->is_static && !si->is_static && !is_graph_output(s->g, id);
        for (int64_t p = 0; local && p < si->np; p++)
            local = si->owner[p] == -1;
        if (local) { /* over the step's data, which every device holds: runtime/exec.c makes the
                      * pieces where they are read, nothing is sent */
            for (int64_t p = 0; p < so->np; p++)
                so->owner[p] = -1, so->ready[p] = (stamp){0, -1}, so->view[p] = true;
            free(src), free(nsrc), free(view);
            return UN_OK;
        }
        for (int64_t p = 0; p < so->np; p++) {
            so->owner[p] = sim_place(s, nd, p);
            if (so->is_static)
                continue;
            nsrc[p] = parallel_sources(nd, si, so, k, p, src, MAX_SRC, &view[p]);
            for (int i = 0; i < nsrc[p]; i++)
                need(s, 0, src[i], block_of(si, so, p), si->owner[src[i]], so->owner[p],
                     block_bytes(si, so));
        }
        stamp *rd = un_xcalloc((size_t)s->n_xf + 1, sizeof *rd);
        for (int i = 0; i < s->n_xf; i++)
            rd[i] = si->ready[s->xf[i].piece];
        run_xfers(s, id, rd);
        free(rd);
        for (int64_t p = 0; p < so->np; p++) {
            if (so->is_static) {
                so->ready[p] = (stamp){0, -1};
                continue;
            }
            int d = so->owner[p];
            stamp r = {0, -1};
            nsrc[p] = parallel_sources(nd, si, so, k, p, src, MAX_SRC, &view[p]);
            for (int i = 0; i < nsrc[p]; i++) {
                int xi = -1;
                for (int j = 0; j < s->n_xf; j++)
                    if (s->xf[j].piece == src[i] && s->xf[j].blk == block_of(si, so, p) &&
                        s->xf[j].to == d)
                        xi = j;
                r = later(r, xi >= 0 ? s->xf[xi].at : si->ready[src[i]]);
            }
            double bytes = view[p] ? 0 : so->pbytes * (nd->op == UN_OP_REDUCE ? (double)k : 1.0);
            so->view[p] = view[p]; /* no buffer of its own (its gradient has one) */
            so->ready[p] =
                bytes > 0 ? run_task(s, d, id, K_OTHER, r, un_cost_copy(s->cm, bytes)) : r;
        }
        free(src);
        free(nsrc);
        free(view);
        return UN_OK;
    }
    un_op_cost c;
    un_status st = un_cost_node(s->ctx, s->cm, s->g, id, &c);
    if (st != UN_OK)
        return st;
    int64_t nt;
    tuple *tp = regular_tuples(s, nd, outs, &nt);
    double stash = 0, scratch = 0;
    if (s->stashes)
        kernel_memory(s, nd, outs, &stash, &scratch);
    else /* the CUDA backend's scratch (device.gpu; else 0), its backward's where that runs */
        scratch =
            outs[0].needs_grad && c.scratch_bwd > c.scratch_fwd ? c.scratch_bwd : c.scratch_fwd;
    for (int64_t q = 0; q < nt && (stash > 0 || scratch > 0); q++) {
        s->stash[tp[q].dev] += stash;
        if (scratch > s->scratch[tp[q].dev])
            s->scratch[tp[q].dev] = scratch;
    }
    stamp *rd = un_xcalloc((size_t)s->n_xf + 1, sizeof *rd);
    for (int i = 0; i < s->n_xf; i++)
        rd[i] = in_tensor(s, nd, s->xf[i].t)->ready[s->xf[i].piece];
    run_xfers(s, id, rd);
    free(rd);
    for (int64_t q = 0; q < nt; q++) {
        stamp r = {0, -1};
        for (int t = 0; t < nd->n_in; t++) {
            int xi = tp[q].in_xf[t];
            r = later(r, xi >= 0 ? s->xf[xi].at : in_tensor(s, nd, t)->ready[tp[q].in_piece[t]]);
        }
        stamp end = run_task(s, tp[q].dev, id, K_COMPUTE, r, c.fwd);
        for (int o = 0; o < nd->inf.n_out; o++)
            for (int64_t p = 0; p < outs[o].np; p++)
                if (outs[o].owner[p] == tp[q].dev)
                    outs[o].ready[p] = later(outs[o].ready[p], end);
    }
    free(tp);
    return UN_OK;
}

/* ---- backward ---- */

static void grad_arrive(stensor *t, int64_t p, stamp at) { t->gready[p] = later(t->gready[p], at); }

/* Runtime semantics: the linear layer of a chunked weight meets every rank after its backward (and
 * one more meet ends the backward); after it each copy's owner computes its chunk of the weight
 * gradient over the whole batch (the same products as a rank's whole-weight gradient over its own
 * rows, which the op's backward cost counts). */
static void chunked_meet(sim *s) {
    stamp all = {0, -1};
    for (int d = 0; d < s->D; d++)
        all = later(all, s->clock[d]);
    stretch(s, all.t - s->since);
    stamp end = run_task(s, 0, -1, K_COMM, all, s->lat);
    s->since = end.t;
    for (int d = 0; d < s->D; d++)
        s->clock[d] = end;
}

static un_status backward_node(sim *s, int32_t id) {
    const un_node *nd = un_graph_node(s->g, id);
    stensor *outs = s->ts[id];
    un_op_kind kind = un_op_kind_of(nd->op);
    if (!outs[0].needs_grad)
        return UN_OK;
    s->n_xf = 0;
    if (kind == UN_OPK_SOURCE) {
        stensor *t = &outs[0];
        if (!t->is_static && t->np > 1) /* fold the pieces' gradients into the whole */
            for (int d = 0; d < s->D; d++) {
                stamp r = {0, -1};
                for (int64_t p = 0; p < t->np; p++)
                    r = later(r, t->gready[p]);
                run_task(s, d, id, K_OTHER, r, un_cost_copy(s->cm, t->pbytes * (double)t->np));
            }
        return UN_OK;
    }
    if (kind == UN_OPK_PARALLEL) {
        stensor *si = in_tensor(s, nd, 0), *so = &outs[0];
        const un_op_spec *os = un_spec_op(un_graph_spec(s->g), nd->op);
        int64_t k = nd->params[un_spec_param_index(os, "degree")].v[0];
        if (so->is_static) { /* plan semantics: replicate's backward all-reduces the copies */
            if (nd->op != UN_OP_REPLICATE) {
                for (int64_t p = 0; p < si->np; p++)
                    grad_arrive(si, p, so->gready[p % so->np]);
                return UN_OK;
            }
            int devs[UN_MAX_DEGREE > 4096 ? 4096 : UN_MAX_DEGREE];
            for (int64_t q = 0; q < si->np; q++) {
                int n = 0;
                stamp r = {0, -1};
                for (int64_t c = 0; c < k && n < 4096; c++) {
                    int32_t blk[UN_MAX_DIMS], sum, copy;
                    piece_coords(&si->shape, q, blk, &sum, &copy);
                    int64_t p = piece_index(&so->shape, blk, sum, (int32_t)(copy * k + c));
                    int d = so->owner[p];
                    bool dup = false;
                    for (int i = 0; i < n; i++)
                        dup |= devs[i] == d;
                    if (!dup)
                        devs[n++] = d;
                    r = later(r, so->gready[p]);
                }
                double dur = un_cost_allreduce(s->cm, devs, n, si->pbytes);
                stamp end = r;
                if (n > 1) {
                    s->r->comm_bytes += 2.0 * (n - 1) / n * si->pbytes * n;
                    for (int i = 0; i < n; i++)
                        end = later(end, run_task(s, devs[i], id, K_COMM, r, dur));
                }
                grad_arrive(si, q, end);
            }
            return UN_OK;
        }
        if (so->np > 0 && so->owner[0] == -1) /* made from the step's data where read */
            return UN_OK;
        int64_t *src = un_xmalloc(sizeof *src * MAX_SRC);
        for (int64_t p = 0; p < so->np; p++) {
            bool view;
            int d = so->owner[p];
            int n = parallel_sources(nd, si, so, k, p, src, MAX_SRC, &view);
            stamp end = run_task(s, d, id, K_OTHER, so->gready[p],
                                 un_cost_copy(s->cm, so->pbytes * (double)n));
            for (int i = 0; i < n; i++) {
                int xi = need(s, 0, src[i], block_of(si, so, p), si->owner[src[i]], d,
                              block_bytes(si, so));
                if (xi < 0)
                    grad_arrive(si, src[i], end);
                else
                    s->xf[xi].at = later(s->xf[xi].at, end);
            }
        }
        free(src);
    } else {
        un_op_cost c;
        un_status st = un_cost_node(s->ctx, s->cm, s->g, id, &c);
        if (st != UN_OK)
            return st;
        int64_t nt;
        tuple *tp = regular_tuples(s, nd, outs, &nt);
        for (int i = 0; i < s->n_xf; i++)
            s->xf[i].at = (stamp){0, -1};
        for (int64_t q = 0; q < nt; q++) {
            stamp r = {0, -1};
            for (int o = 0; o < nd->inf.n_out; o++)
                for (int64_t p = 0; p < outs[o].np; p++)
                    if (outs[o].owner[p] == tp[q].dev)
                        r = later(r, outs[o].gready[p]);
            stamp end = run_task(s, tp[q].dev, id, K_COMPUTE, r, c.bwd);
            for (int t = 0; t < nd->n_in; t++) {
                stensor *src = in_tensor(s, nd, t);
                if (!src->needs_grad)
                    continue;
                int xi = tp[q].in_xf[t];
                if (xi < 0)
                    grad_arrive(src, tp[q].in_piece[t], end);
                else
                    s->xf[xi].at = later(s->xf[xi].at, end);
            }
        }
        free(tp);
        if (s->until && s->until[id] >= 0)
            chunked_meet(s);
    }
    /* gradients of pieces that came from elsewhere go back to their owners */
    int n = 0;
    for (int i = 0; i < s->n_xf; i++)
        if (in_tensor(s, nd, s->xf[i].t)->needs_grad)
            s->xf[n++] = s->xf[i];
    s->n_xf = n;
    stamp *rd = un_xcalloc((size_t)n + 1, sizeof *rd);
    for (int i = 0; i < n; i++) {
        rd[i] = s->xf[i].at;
        int f = s->xf[i].from;
        s->xf[i].from = s->xf[i].to;
        s->xf[i].to = f;
    }
    run_xfers(s, id, rd);
    for (int i = 0; i < n; i++)
        grad_arrive(in_tensor(s, nd, s->xf[i].t), s->xf[i].piece, s->xf[i].at);
    free(rd);
    return UN_OK;
}

/* ---- memory ---- */

/* Per-device memory of the plan, and the parts of the largest device. */
static void memory(sim *s) {
    int32_t n = un_graph_node_count(s->g);
    double opt_copies = s->p->optimizer && strcmp(s->p->optimizer, "sgd") == 0 ? 1 : 2;
    double *w = un_xcalloc((size_t)s->D, sizeof *w), *a = un_xcalloc((size_t)s->D, sizeof *a);
    bool arena = s->p->mirror_sources;
    /* runtime: an activation's gradient lives from the backward of its last consumer (a graph
     * output's: from the loss) to its own node's backward; its values from its forward to their
     * last reader (s->vlast) */
    int32_t *last = un_xcalloc((size_t)n + 1, sizeof *last);
    for (int32_t id = 0; id < n; id++) {
        const un_node *nd = un_graph_node(s->g, id);
        last[id] = last[id] > id ? last[id] : id;
        for (int t = 0; t < nd->n_in; t++)
            last[nd->in[t].node] = last[nd->in[t].node] > id ? last[nd->in[t].node] : id;
    }
    for (int32_t i = 0; i < un_graph_output_count(s->g); i++)
        last[un_graph_output(s->g, i).node] = n;
    for (int32_t id = 0; id < n; id++) {
        const un_node *nd = un_graph_node(s->g, id);
        un_op_kind kind = un_op_kind_of(nd->op);
        for (int o = 0; o < nd->inf.n_out; o++) {
            stensor *t = &s->ts[id][o];
            double per = t->pbytes * (t->needs_grad ? 2 : 1);
            /* runtime semantics: an input, whole on every device, and every piece of it there when
             * it has several */
            bool input = kind == UN_OPK_SOURCE && !t->is_static;
            for (int d = 0; input && d < s->D; d++)
                a[d] +=
                    (double)un_shape_numel(&t->shape) * (t->shape.dtype == UN_DT_FLOAT ? s->es : 8);
            if (input && t->np == 1)
                continue;
            for (int64_t p = 0; p < t->np; p++) {
                int d0 = input ? 0 : t->owner[p], d1 = input ? s->D : t->owner[p] + 1;
                for (int d = d0 < 0 ? d1 : d0; d < d1; d++) {
                    if (t->is_static) {
                        if ((t->leaf || (arena && nd->op == UN_OP_WEIGHT)) && t->weight)
                            w[d] += t->pbytes;
                        else if (t->leaf)
                            a[d] += t->pbytes;
                        continue;
                    }
                    if (!arena) {
                        a[d] += per - (t->view[p] ? t->pbytes : 0);
                        continue;
                    }
                    if (s->vlast[id] == T_NEVER)
                        a[d] += t->pbytes;
                    else if (!t->view[p])
                        arena_add(s, d, T_FWD(id), s->vlast[id], t->pbytes, false);
                    if (t->needs_grad)
                        s->gbufs[d]++;
                    if (t->needs_grad)
                        arena_add(s, d, T_BWD(n, last[id]),
                                  s->until[id] > T_BWD(n, id) ? s->until[id] : T_BWD(n, id),
                                  t->pbytes, true);
                }
            }
        }
    }
    /* the arena: per device the most bytes live at once, and of them gradients (a difference
     * array over the step's clock) */
    double *peak = un_xcalloc((size_t)s->D, sizeof *peak);
    double *gpeak = un_xcalloc((size_t)s->D, sizeof *gpeak);
    if (arena && s->n_areq > 0) {
        double *diff = un_xcalloc((size_t)(2 * n + 3), sizeof *diff);
        double *gdiff = un_xcalloc((size_t)(2 * n + 3), sizeof *gdiff);
        for (int d = 0; d < s->D; d++) {
            memset(diff, 0, sizeof *diff * (size_t)(2 * n + 3));
            memset(gdiff, 0, sizeof *gdiff * (size_t)(2 * n + 3));
            for (int i = 0; i < s->n_areq; i++)
                if (s->areq[i].dev == d) {
                    double *df = s->areq[i].grad ? gdiff : diff;
                    df[s->areq[i].lo] += s->areq[i].bytes;
                    df[s->areq[i].hi + 1] -= s->areq[i].bytes;
                }
            double live = 0, glive = 0;
            for (int32_t j = 0; j <= 2 * n; j++) {
                glive += gdiff[j];
                live += diff[j] + gdiff[j];
                peak[d] = live > peak[d] ? live : peak[d];
                gpeak[d] = glive > gpeak[d] ? glive : gpeak[d];
            }
        }
        free(diff);
        free(gdiff);
    }
    double reserve = un_cost_machine(s->cm)->dev.gpu.reserve;
    for (int d = 0; d < s->D; d++) {
        double opt = (arena ? s->shard[d] : w[d]) * opt_copies;
        s->r->mem[d] = w[d] + w[d] + opt + a[d] + s->xmem[d] + peak[d] + s->stash[d] +
                       s->scratch[d] + reserve +
                       (arena && s->D > 1 && !s->shared ? s->sync_recv[d] : 0);
        s->gbytes[d] = w[d] - chunked_bytes(s, d) + (arena ? gpeak[d] : a[d] / 2);
    }
    free(gpeak);
    int worst = 0;
    for (int d = 1; d < s->D; d++)
        if (s->r->mem[d] > s->r->mem[worst])
            worst = d;
    s->r->worst = worst;
    s->r->mem_weights = w[worst];
    s->r->mem_grads = w[worst];
    s->r->mem_optim = (arena ? s->shard[worst] : w[worst]) * opt_copies;
    s->r->mem_acts = a[worst] + peak[worst];
    s->r->mem_stash = s->stash[worst];
    s->r->mem_scratch = s->scratch[worst];
    s->r->mem_reserve = reserve;
    for (int d = 0; d < s->D; d++) {
        s->r->stash_all += s->stash[d];
        s->r->scratch_all += s->scratch[d];
    }
    free(peak);
    free(last);
    s->r->fits = s->r->mem[worst] <= un_cost_machine(s->cm)->dev.memory;
    free(w);
    free(a);
}

/* ---- the step ---- */

void un_sim_loss_rows(const un_shape *out, int64_t *rows, int64_t *classes) {
    int64_t c = out->rank ? out->dim[out->rank - 1] / out->shard[out->rank - 1] : 1;
    *rows = c ? un_shape_piece_numel(out) / c : 0;
    *classes = c;
}

void un_sim_loss_shape(const un_shape *out, char *buf, size_t n) {
    int64_t rows, c;
    un_sim_loss_rows(out, &rows, &c);
    snprintf(buf, n, "float[%lld,%lld]", (long long)rows, (long long)c);
}

un_sim_params un_sim_params_default(void) {
    return (un_sim_params){.mirror_sources = false, .optimizer = "adam", .devices = 0};
}

void un_sim_result_deinit(un_sim_result *r) {
    if (!r)
        return;
    free(r->mem);
    memset(r, 0, sizeof *r);
}

/* Plan semantics: sources (data is loaded as the pieces its layout asks for, weights live as
 * pieces) and parallel ops over them are resident: nothing moves in the forward. */
static bool static_tensor(const un_graph *g, const un_node *nd, sim *s) {
    if (un_op_kind_of(nd->op) == UN_OPK_SOURCE)
        return true;
    if (un_op_kind_of(nd->op) != UN_OPK_PARALLEL)
        return false;
    (void)g;
    return in_tensor(s, nd, 0)->is_static;
}

/* from 1 us: the stretches of a small model's step are a few microseconds of work each (the
 * tiny xdl on 2 devices: 2 us), and a meeting after that little work costs what it costs then,
 * not a share of one after 10 us */
const double un_sim_meet_work[UN_SIM_MEET_POINTS] = {1e-6,   3e-6, 10e-6, 30e-6, 100e-6,
                                                     300e-6, 1e-3, 3e-3,  10e-3, 30e-3};

void un_sim_meet_shape(int devices, int w, char *buf, size_t n) {
    snprintf(buf, n, "devices[%d],work[%.0f us]", devices, un_sim_meet_work[w] * 1e6);
}

/* 64 bytes is the rendezvous itself; 64 KiB the largest message the local communicator copies
 * when posted (runtime/comm_local.c EAGER_BYTES); 512 KiB a weight's gradient chunk of the mid
 * sizes. */
const double un_sim_xchg_bytes[UN_SIM_XCHG_POINTS] = {64, 1024, 8192, 65536, 524288};

void un_sim_xchg_shape(int devices, int b, char *buf, size_t n) {
    snprintf(buf, n, "devices[%d],bytes[%.0f]", devices, un_sim_xchg_bytes[b]);
}

void un_sim_xchg_msgs_shape(int devices, char *buf, size_t n) {
    snprintf(buf, n, "devices[%d],bytes[%d],messages[%d]", devices, UN_SIM_XCHG_MSGS_BYTES,
             UN_SIM_XCHG_MSGS);
}

/* Seconds of one exchange of the D devices in which the busiest receives `bytes` in `msgs`
 * messages (one_way: no device both sends and receives): the measured points
 * (un_sim_xchg_bytes) and what each message past the first adds (xmsg), else the measured
 * rendezvous plus the bytes at the link's bandwidth. */
static double xchg_time(sim *s, double bytes, bool one_way, int64_t msgs) {
    if (s->xpts[one_way][0] > 0) {
        const double *x = un_sim_xchg_bytes, *t = s->xpts[one_way];
        int n = UN_SIM_XCHG_POINTS;
        double more = msgs > 1 ? (double)(msgs - 1) * s->xmsg : 0;
        if (bytes <= x[0])
            return t[0] + more;
        if (bytes >= x[n - 1])
            return t[n - 1] + more +
                   (bytes - x[n - 1]) * fmax(t[n - 1] - t[n - 2], 0) / (x[n - 1] - x[n - 2]);
        return un_cost_interp(x, t, n, bytes) + more;
    }
    return (one_way ? s->slat : s->xlat) + bytes / un_cost_machine(s->cm)->intra.bw;
}

/* Seconds for the D devices to compute `work` each and meet, interpolated (log-log) between
 * the measured points ("comm:meet"), the time per work of the nearest end beyond them; 0 when
 * they are not all measured. */
static double meet_time(sim *s, double work) {
    double t[UN_SIM_MEET_POINTS];
    for (int w = 0; w < UN_SIM_MEET_POINTS; w++) {
        char shape[64];
        un_sim_meet_shape(s->D, w, shape, sizeof shape);
        if ((t[w] = un_cost_measured(s->ctx, s->cm, "comm:meet", shape, 0)) <= 0)
            return 0;
    }
    return un_cost_interp(un_sim_meet_work, t, UN_SIM_MEET_POINTS, work);
}

/* Runtime semantics: a stretch of `work` seconds that ends at a rendezvous of the D devices (or
 * at the step's end). Where it is measured (comm:meet), the stretch takes meet_time(work) on
 * this machine now; what that has beyond the work and an exchange is time waiting for cores. */
static void stretch(sim *s, double work) {
    s->meets++;
    work = work > 0 ? work : 0;
    s->work += work;
    double t = s->p->mirror_sources && work > 0 ? meet_time(s, work) : 0;
    /* the stretches were measured ending in an exchange (a relative 1e-9: the log-log
     * interpolation's rounding is no wait) */
    if (t > (work + s->xlat) * (1 + 1e-9))
        s->extra += t - work - s->xlat;
    if (t > 0)
        s->r->meet_time += t;
}

static void critical_path(sim *s, stamp last) {
    int32_t n = un_graph_node_count(s->g);
    double *per = un_xcalloc((size_t)n, sizeof *per);
    for (int32_t t = last.task; t >= 0; t = s->tasks[t].pred) {
        const task *tk = &s->tasks[t];
        if (tk->node >= 0) /* -1: the gradient all-reduce and the optimizer */
            per[tk->node] += tk->dur;
        if (tk->kind == K_COMPUTE)
            s->r->crit_compute += tk->dur;
        else if (tk->kind == K_COMM)
            s->r->crit_comm += tk->dur;
        else
            s->r->crit_other += tk->dur;
    }
    for (int32_t id = 0; id < n; id++) {
        if (per[id] <= 0)
            continue;
        int i = s->r->n_top < UN_SIM_TOP ? s->r->n_top++ : UN_SIM_TOP - 1;
        if (i == UN_SIM_TOP - 1 && s->r->n_top == UN_SIM_TOP && per[id] <= s->r->top[i].time)
            continue;
        while (i > 0 && s->r->top[i - 1].time < per[id]) {
            s->r->top[i] = s->r->top[i - 1];
            i--;
        }
        s->r->top[i].node = id;
        s->r->top[i].time = per[id];
    }
    free(per);
}

/* Runtime semantics: replicate's backward for every weight held in copies, as runtime/exec.c
 * does it: after backward one reduce-scatter exchange for all weights (each copy's chunk g to the
 * holder of copy g, who adds them up; phase 0), then each device's sharded optimizer step, then one
 * all-gather exchange of the updated chunks (phase 1); an exchange's rendezvous is measured
 * ("comm:exchange", else two barriers). Per phase a
 * device receives (c - 1) / c of each piece it holds of a weight with c copies (its scratch);
 * every device waits for the slowest. */
static void weights_sync(sim *s, int phase) {
    double worst = 0, total = 0;
    int wd = 0;
    bool any = false;
    memset(s->sync_recv, 0, sizeof *s->sync_recv * (size_t)s->D);
    memset(s->sync_nmsg, 0, sizeof *s->sync_nmsg * (size_t)s->D);
    for (int32_t id = 0; id < un_graph_node_count(s->g); id++) {
        const stensor *t = &s->ts[id][0];
        int32_t c = t->shape.copy;
        if (un_graph_node(s->g, id)->op != UN_OP_WEIGHT || c <= 1 || (phase == 0 && chunked(s, id)))
            continue;
        any = true;
        for (int64_t q = 0; q < t->np; q++)
            if (t->owner[q] >= 0) {
                s->sync_recv[t->owner[q]] += t->pbytes * (c - 1) / c;
                s->sync_nmsg[t->owner[q]] += c - 1; /* a chunk from each other copy */
            }
    }
    if (!any)
        return;
    stamp all = {0, -1};
    for (int d = 0; d < s->D; d++) {
        all = later(all, s->clock[d]);
        total += s->sync_recv[d];
        if (s->sync_recv[d] > worst)
            worst = s->sync_recv[d], wd = d;
    }
    double dur = xchg_time(s, worst, false, s->sync_nmsg[wd]) +
                 (phase == 0 ? un_cost_copy(s->cm, worst) : 0);
    stretch(s, all.t - s->since);
    s->r->comm_bytes += total;
    stamp end = run_task(s, wd, -1, K_COMM, all, dur);
    s->since = end.t;
    for (int d = 0; d < s->D; d++)
        s->clock[d] = end;
}

int un_sim_device(const un_graph *g, int32_t id, int64_t piece, int devices) {
    return un_view_device(&un_graph_node(g, id)->view, piece, devices);
}

un_status un_sim_rank_param_counts(un_ctx *ctx, const un_graph *g, int64_t *counts, int *n) {
    *n = 0;
    un_graph *f = NULL;
    un_status st = un_strategy_fold_weights(ctx, g, &f);
    if (st != UN_OK)
        return st;
    int D = (int)un_strategy_devices(f);
    int64_t *per = un_xcalloc((size_t)D, sizeof *per);
    for (int32_t id = 0; id < un_graph_node_count(f); id++) {
        const un_node *nd = un_graph_node(f, id);
        if (nd->op != UN_OP_WEIGHT)
            continue;
        for (int64_t q = 0; q < un_shape_npieces(&nd->inf.out[0]); q++) {
            int d = un_sim_device(f, id, q, D);
            if (d >= 0 && d < D)
                per[d] += piece_shard(&nd->inf.out[0], q);
        }
    }
    for (int d = 0; d < D; d++) {
        bool seen = per[d] == 0;
        for (int i = 0; i < *n && !seen; i++)
            seen = counts[i] == per[d];
        if (!seen && *n < UN_SIM_MAX_RANK_COUNTS)
            counts[(*n)++] = per[d];
    }
    free(per);
    un_graph_free(f);
    return UN_OK;
}

static un_status sim_graph(un_ctx *ctx, un_cost_model *cm, const un_graph *g,
                           const un_sim_params *p, un_sim_result *out) {
    memset(out, 0, sizeof *out);
    const un_machine *m = un_cost_machine(cm);
    int64_t need_dev = 1;
    int32_t n = un_graph_node_count(g);
    for (int32_t id = 0; id < n; id++) {
        const un_node *nd = un_graph_node(g, id);
        for (int o = 0; o < nd->inf.n_out; o++) {
            int64_t np = un_shape_npieces(&nd->inf.out[o]);
            need_dev = np > need_dev ? np : need_dev;
        }
    }
    int D = p->devices > 0 ? p->devices : (int)need_dev;
    if (D > un_machine_devices(m))
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "the plan runs on %d devices, but machine '%s' has %d", D, m->name,
                            un_machine_devices(m));
    sim s = {.ctx = ctx, .cm = cm, .g = g, .p = p, .D = D, .es = un_cost_elem_bytes(cm), .r = out};
    char dshape[32];
    snprintf(dshape, sizeof dshape, "devices[%d]", D);
    s.lat = D > 1 ? un_cost_measured(ctx, cm, "comm:barrier", dshape, m->intra.latency) : 0;
    /* an exchange: measured, else two barriers (its posts meet, then its copies are done) */
    s.xlat = D > 1 ? un_cost_measured(ctx, cm, "comm:exchange", dshape, 2 * s.lat) : 0;
    /* one way: measured ("comm:send"), else as an exchange */
    s.slat = D > 1 ? un_cost_measured(ctx, cm, "comm:send", dshape, s.xlat) : 0;
    for (int w = 0; w < 2 && D > 1; w++) { /* the exchange and the send by message size */
        for (int b = 0; b < UN_SIM_XCHG_POINTS; b++) {
            char shape[64];
            un_sim_xchg_shape(D, b, shape, sizeof shape);
            s.xpts[w][b] = un_cost_measured(ctx, cm, w ? "comm:send" : "comm:exchange", shape, 0);
        }
        for (int b = 0; b < UN_SIM_XCHG_POINTS; b++)
            if (s.xpts[w][b] <= 0)
                s.xpts[w][0] = 0;
    }
    if (D > 1) { /* UN_SIM_XCHG_MSGS messages of the same bytes against one */
        char shape[64];
        un_sim_xchg_msgs_shape(D, shape, sizeof shape);
        double many = un_cost_measured(ctx, cm, "comm:exchange", shape, 0);
        int b = 0;
        while (b < UN_SIM_XCHG_POINTS && un_sim_xchg_bytes[b] != UN_SIM_XCHG_MSGS_BYTES)
            b++;
        if (many > 0 && b < UN_SIM_XCHG_POINTS && s.xpts[0][b] > 0)
            s.xmsg = fmax(many - s.xpts[0][b], 0) / (UN_SIM_XCHG_MSGS - 1);
    }

    out->devices = D;
    out->mem = un_xcalloc((size_t)D, sizeof *out->mem);
    s.clock = un_xcalloc((size_t)D, sizeof *s.clock);
    s.net = un_xcalloc((size_t)D, sizeof *s.net);
    for (int d = 0; d < D; d++)
        s.clock[d] = s.net[d] = (stamp){0, -1};
    s.ts = un_xcalloc((size_t)n, sizeof *s.ts);
    s.xmem = un_xcalloc((size_t)D, sizeof *s.xmem);
    s.gbytes = un_xcalloc((size_t)D, sizeof *s.gbytes);
    s.gbufs = un_xcalloc((size_t)D, sizeof *s.gbufs);
    s.stash = un_xcalloc((size_t)D, sizeof *s.stash);
    s.scratch = un_xcalloc((size_t)D, sizeof *s.scratch);
    s.stashes = strncmp(m->dev.kind, "cpu", 3) == 0;
    s.shared = s.stashes && p->mirror_sources && D > 1;
    s.sync_recv = un_xcalloc((size_t)D, sizeof *s.sync_recv);
    s.sync_nmsg = un_xcalloc((size_t)D, sizeof *s.sync_nmsg);
    s.shard = un_xcalloc((size_t)D, sizeof *s.shard);
    int64_t n_params = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t id = i;
        const un_node *nd = un_graph_node(g, id);
        s.ts[id] = un_xcalloc((size_t)nd->inf.n_out, sizeof **s.ts);
        bool ng = nd->op == UN_OP_WEIGHT;
        for (int t = 0; t < nd->n_in; t++) {
            ng |= in_tensor(&s, nd, t)->needs_grad;
            if (un_op_kind_of(nd->op) == UN_OPK_REGULAR)
                in_tensor(&s, nd, t)->leaf = true;
        }
        /* runtime: weights live as their (folded) pieces; plan: every source and its layouts */
        bool stat = p->mirror_sources ? nd->op == UN_OP_WEIGHT : static_tensor(g, nd, &s);
        if (nd->op == UN_OP_WEIGHT)
            n_params += un_shape_numel(&nd->inf.out[0]);
        for (int o = 0; o < nd->inf.n_out; o++) {
            stensor *t = &s.ts[id][o];
            t->shape = nd->inf.out[o];
            t->np = un_shape_npieces(&t->shape);
            t->pbytes = (double)un_shape_piece_numel(&t->shape) *
                        (t->shape.dtype == UN_DT_FLOAT ? s.es : 8);
            t->needs_grad = ng && t->shape.dtype == UN_DT_FLOAT;
            t->is_static = stat;
            t->weight = nd->op == UN_OP_WEIGHT ||
                        (un_op_kind_of(nd->op) == UN_OPK_PARALLEL && in_tensor(&s, nd, 0)->weight);
            t->owner = un_xcalloc((size_t)t->np, sizeof *t->owner);
            t->view = un_xcalloc((size_t)t->np, sizeof *t->view);
            t->ready = un_xcalloc((size_t)t->np, sizeof *t->ready);
            t->gready = un_xcalloc((size_t)t->np, sizeof *t->gready);
            for (int64_t q = 0; q < t->np; q++)
                t->ready[q] = t->gready[q] = (stamp){0, -1};
        }
    }
    /* the step starts with its batch made (runtime/train.c times forward, loss, backward and
     * update, not the making of the batch, as a framework's loop fed by a loader) */
    un_status st = UN_OK;
    if (p->mirror_sources)
        value_lifetimes(&s);
    for (int32_t i = 0; i < n && st == UN_OK; i++)
        st = forward_node(&s, i);
    /* the loss: each output piece's gradient is ready after its device computed the loss */
    for (int32_t i = 0; i < un_graph_output_count(g) && st == UN_OK; i++) {
        un_ref r = un_graph_output(g, i);
        stensor *t = &s.ts[r.node][r.out];
        int64_t rows, c;
        un_sim_loss_rows(&t->shape, &rows, &c);
        double loss = un_cost_loss(ctx, cm, rows, c);
        for (int64_t q = 0; q < t->np; q++) {
            int d = t->owner[q] < 0 ? 0 : t->owner[q];
            if (t->shape.copy > 1 && q % t->shape.copy != 0)
                loss = un_cost_copy(s.cm, t->pbytes); /* copies count once; the rest zero */
            t->gready[q] = run_task(&s, d, r.node, K_OTHER, t->ready[q], loss);
        }
    }
    s.backward = true;
    for (int32_t i = n - 1; i >= 0 && st == UN_OK; i--)
        st = backward_node(&s, i);
    if (st == UN_OK) {
        bool met = false;
        for (int32_t id = 0; s.until && id < n; id++)
            met |= s.until[id] >= 0;
        if (met) /* the meet that ends the backward */
            chunked_meet(&s);
        /* runtime/train.c sums the loss over the devices only on the steps that report it
         * (about every UN_TRAIN_LINE_S, the first and the last): no meet in a step */
        if (p->mirror_sources && D > 1)
            weights_sync(&s, 0);
        /* the optimizer: the weight pieces each device holds (runtime: its shard of them) */
        for (int d = 0; d < D; d++) {
            int64_t mine = 0;
            for (int32_t id = 0; id < n; id++) {
                const un_node *nd = un_graph_node(g, id);
                const stensor *t = &s.ts[id][0];
                if (!t->is_static || !t->weight ||
                    !(p->mirror_sources ? nd->op == UN_OP_WEIGHT : t->leaf))
                    continue;
                for (int64_t q = 0; q < t->np; q++)
                    if (t->owner[q] == d)
                        mine += p->mirror_sources ? piece_shard(&t->shape, q)
                                                  : un_shape_piece_numel(&t->shape);
            }
            s.shard[d] = (double)mine * s.es;
            if (mine > 0 && p->optimizer)
                run_task(&s, d, -1, K_OTHER, s.clock[d],
                         un_cost_optimizer(ctx, cm, p->optimizer, mine));
        }
        if (p->mirror_sources && D > 1)
            weights_sync(&s, 1);
        memory(&s);
        if (p->mirror_sources)
            /* the runtime zeroes every gradient buffer each step (a serial task of each device,
             * placed here at the end, where it changes no dependency) */
            for (int d = 0; d < D; d++)
                run_task(&s, d, -1, K_OTHER, s.clock[d],
                         un_cost_zero(cm, s.gbytes[d], s.gbufs[d] + 1)); /* + the weights' */
        stamp last = {0, -1};
        for (int d = 0; d < D; d++)
            last = later(last, s.clock[d]);
        out->step = last.t;
        critical_path(&s, last);
        if (p->mirror_sources) { /* the last stretch, from the last rendezvous to the end */
            stretch(&s, last.t - s.since);
            s.meets--;
        }
        out->meets = s.meets;
        out->meet_work = s.work / (s.meets + 1);
        out->wait = s.extra;
        out->step += out->wait;
    }
    for (int32_t id = 0; id < n; id++) {
        const un_node *nd = un_graph_node(g, id);
        for (int o = 0; s.ts[id] && o < nd->inf.n_out; o++) {
            free(s.ts[id][o].owner);
            free(s.ts[id][o].view);
            free(s.ts[id][o].ready);
            free(s.ts[id][o].gready);
        }
        free(s.ts[id]);
    }
    free(s.ts);
    free(s.tasks);
    free(s.clock);
    free(s.net);
    free(s.xf);
    free(s.xmem);
    free(s.gbytes);
    free(s.gbufs);
    free(s.stash);
    free(s.scratch);
    free(s.sync_recv);
    free(s.sync_nmsg);
    free(s.shard);
    free(s.areq);
    free(s.vlast);
    free(s.until);
    if (st != UN_OK)
        un_sim_result_deinit(out);
    return st;
}

un_status un_sim_run(un_ctx *ctx, un_cost_model *cm, const un_graph *g, const un_sim_params *p,
                     un_sim_result *out) {
    if (!p->mirror_sources)
        return sim_graph(ctx, cm, g, p, out);
    /* the runtime stores each weight as the pieces its chain of parallel ops makes */
    un_graph *f = NULL;
    un_status st = un_strategy_fold_weights(ctx, g, &f);
    if (st == UN_OK)
        st = sim_graph(ctx, cm, f, p, out);
    if (st == UN_OK) { /* the top operators by g's ids (folding dropped only parallel ops) */
        int k = 0;
        for (int i = 0; i < out->n_top; i++) {
            const char *name = un_graph_node(f, out->top[i].node)->name;
            int32_t id = name ? un_graph_find(g, name) : -1;
            if (id >= 0) {
                out->top[k].node = id;
                out->top[k++].time = out->top[i].time;
            }
        }
        out->n_top = k;
    }
    un_graph_free(f);
    return st;
}

static void fmt_bytes(un_buf *b, double v) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (v >= 1024 && i < 4)
        v /= 1024, i++;
    un_buf_printf(b, "%.1f %s", v, u[i]);
}

void un_sim_report(const un_graph *g, const un_sim_result *r, const un_cost_model *cm, un_buf *b) {
    const un_machine *m = un_cost_machine(cm);
    double crit = r->crit_compute + r->crit_comm + r->crit_other;
    un_buf_printf(b, "estimated step time: %.4f ms on %d device%s of %s\n", r->step * 1e3,
                  r->devices, r->devices == 1 ? "" : "s", m->name);
    if (r->wait > 0)
        un_buf_printf(b,
                      "of which %.3f ms waiting for cores: other jobs share the machine (the "
                      "step's %d stretch%s of work between rendezvous, %.3f ms each on average, "
                      "take %.3f ms in all here, measured with the op costs)\n",
                      r->wait * 1e3, r->meets + 1, r->meets ? "es" : "", r->meet_work * 1e3,
                      r->meet_time * 1e3);
    un_buf_printf(b,
                  "critical path: compute %.3f ms (%.0f%%), communication %.3f ms (%.0f%%), "
                  "copies/optimizer %.3f ms (%.0f%%)\n",
                  r->crit_compute * 1e3, crit > 0 ? 100 * r->crit_compute / crit : 0,
                  r->crit_comm * 1e3, crit > 0 ? 100 * r->crit_comm / crit : 0, r->crit_other * 1e3,
                  crit > 0 ? 100 * r->crit_other / crit : 0);
    un_buf_printf(b, "all devices: compute %.3f ms, communication %.3f ms, ",
                  r->compute_total * 1e3, r->comm_total * 1e3);
    fmt_bytes(b, r->comm_bytes);
    un_buf_printf(b, " moved\ncritical path's top operators:\n");
    for (int i = 0; i < r->n_top; i++) {
        const un_node *nd = un_graph_node(g, r->top[i].node);
        un_buf_printf(b, "  %-24s %-20s %8.3f ms\n", nd->name ? nd->name : "?", un_op_name(nd->op),
                      r->top[i].time * 1e3);
    }
    un_buf_printf(b, "memory per device (of ");
    fmt_bytes(b, m->dev.memory);
    un_buf_printf(b, "):");
    for (int d = 0; d < r->devices && d < 16; d++) {
        un_buf_printf(b, " ");
        fmt_bytes(b, r->mem[d]);
    }
    if (r->devices > 16)
        un_buf_printf(b, " ...");
    double total = 0;
    for (int d = 0; d < r->devices; d++)
        total += r->mem[d];
    un_buf_printf(b, "\nmemory, all devices: %.0f bytes", total);
    un_buf_printf(b, "\nlargest (device %d): weights ", r->worst);
    fmt_bytes(b, r->mem_weights);
    un_buf_printf(b, ", gradients ");
    fmt_bytes(b, r->mem_grads);
    un_buf_printf(b, ", optimizer state ");
    fmt_bytes(b, r->mem_optim);
    un_buf_printf(b, ", activations and their gradients ");
    fmt_bytes(b, r->mem_acts);
    if (r->stash_all > 0) {
        un_buf_printf(b, ", kernel stash ");
        fmt_bytes(b, r->mem_stash);
        un_buf_printf(b, "\nkernel stash, all devices: %.0f bytes", r->stash_all);
    }
    if (r->mem_reserve > 0) {
        un_buf_printf(b, ", runtime reserve (CUDA context, cuBLAS) ");
        fmt_bytes(b, r->mem_reserve);
    }
    if (r->scratch_all > 0) {
        un_buf_printf(b, "\nkernel scratch (largest call): device %d ", r->worst);
        fmt_bytes(b, r->mem_scratch);
        un_buf_printf(b, "\nkernel scratch, all devices: %.0f bytes", r->scratch_all);
    }
    un_buf_printf(b, "\n%s\n",
                  r->fits ? "fits in device memory"
                          : "DOES NOT FIT: a device needs more memory than it has");
}
