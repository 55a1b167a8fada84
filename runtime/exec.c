/* exec.c - the SPMD executor: placement of pieces on ranks, piece transfers, regular ops through
 * the backend, parallel ops as block copies and sums, reverse-mode backward, and the weight
 * gradient all-reduce. Every rank computes the same plan (placement and transfer lists) from the
 * graph alone, so ranks agree on every collective call without talking. */
#include "runtime/exec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm_dev.h"
#include "runtime/kernels.h"

/* ---- the plan's data ---- */

typedef struct xt { /* one node output on this rank */
    int32_t id;     /* its node */
    un_shape shape;
    int64_t np, pn; /* pieces, elements per piece */
    size_t es;      /* bytes per element */
    bool is_float, needs_grad;
    int32_t *owner; /* per piece: its rank, or -1 (inputs: every rank holds every piece) */
    void **val;     /* per piece: its buffer when held here */
    void **grad;    /* per piece: its gradient when held here and needs_grad */
    bool *borrowed; /* val[p] points into another buffer (not freed here) */
    bool *gborrowed;
    void *full;    /* inputs: the logical value */
    int64_t *loff; /* weights: per piece, its first element in this rank's flat buffers, or -1 */
    int64_t *soff; /* weights: per piece, where its chunk starts in this rank's shard */
    void *sync;    /* weights in copies: scratch of the gradient sum over the copies (where the
                    * ranks do not share memory: a local add reads the sender's buffer) */
    bool chunked;  /* weights in copies: each copy's owner computes its chunk of the summed
                    * gradient itself (plan_chunked): no reduce-scatter */
} xt;

typedef struct xfer { /* an input piece, or the block of it a consumer reads, sent from its
                       * owner to the rank that runs the consumer */
    int32_t t;        /* input slot of the consumer */
    int64_t piece;
    int32_t from, to;
    un_region r;      /* the block sent: piece (src side) -> packed buffer (dst side) */
    int64_t numel;    /* its elements */
    void *buf, *gbuf; /* on `to`: the received block and its gradient */
    void *gret;       /* on `from`: the returned gradient before it is added */
    void *pack;       /* on `from`: the block packed, where it is not one contiguous run */
} xfer;

typedef struct rtask { /* one device tuple of a regular op, run on this rank */
    un_kt in[UN_MAX_INPUTS], out[UN_MAX_OUTPUTS], din[UN_MAX_INPUTS], dout[UN_MAX_OUTPUTS];
    int64_t off[UN_MAX_DIMS], full[UN_MAX_DIMS]; /* input 0's place (dropout masks) */
} rtask;

typedef struct pmove { /* a parallel op: one source block into one output piece */
    int64_t out_piece;
    void *src, *src_grad;
    un_region r;
    bool add, alias;
} pmove;

typedef struct xnode {
    int n_out;
    xt *outs;
    int n_xfer;
    xfer *xfers;
    int n_task;
    rtask *tasks;
    int n_move, cap_move;
    pmove *moves;
    bool needs_grad;
    /* a linear layer whose weight (cw_w) is chunked: per copy g of the weight, the input, output
     * and output gradient of the piece that reads it (cw[g], cw[c + g], cw[2c + g]; other ranks'
     * buffers), so that copy g's owner computes chunk g of the weight's gradient over the whole
     * batch (plan_chunked) */
    un_kt *cw;
    int32_t cw_w;
} xnode;

/* The step's clock, for lifetimes in the arena: the forward of node j runs at time j, the loss at
 * n, the backward of node j at 2n - j (so the loss is the "backward" of node n). */
#define T_FWD(j)    ((int32_t)(j))
#define T_BWD(n, j) ((int32_t)(2 * (n) - (j)))
#define T_NEVER     INT32_MAX /* a value read after the step: it lives to its end */

typedef struct greq { /* a buffer in the arena, live over times t0..t1 (inclusive) */
    int64_t bytes, off;
    int32_t t0, t1;
} greq;

struct un_exec {
    const un_graph *g;
    const un_spec *spec;
    un_comm *comm;
    un_backend *be;
    int rank, size;
    size_t fes; /* float element bytes */
    int32_t n;
    xnode *nodes;
    int64_t n_params;           /* elements of this rank's weight pieces */
    void *params, *param_grads; /* this rank's weight pieces and their gradients, flat */
    int64_t n_lparams;          /* elements of all weights (logical) */
    int64_t *lparam_off;        /* per node: first element in the logical flat order, or -1 */
    /* Activations and their gradients share one arena by lifetime (times: T_FWD, T_BWD). The
     * gradient of node i's output is live from the backward of its last consumer gfirst[i]
     * (ex->n: a graph output, written by the loss) to i's own backward; transfer gradients only
     * during their consumer's backward. The values of node i's output (not a weight's, not a
     * graph output's: those are held for good) are live from its forward to vlast[i], the last
     * time anything reads them: a consumer's forward, the backward of a regular consumer that
     * needs gradients and reads its inputs, i's own backward when it reads its outputs
     * (un_exec_bwd_reads), and whatever reads a view of them (a parallel consumer's aliasing
     * output). */
    int32_t *gfirst;
    int32_t *vlast;
    int32_t *until;          /* per node: a chunked linear layer's pieces live to this time, or -1
                              * (un_exec_chunked_until) */
    int32_t *zstart, *zlist; /* per node j: zlist[zstart[j]..zstart[j+1]) start at j's backward */
    greq *greqs;             /* the arena's requests in planning order, with their offsets */
    int n_greq, cap_greq, greq_at;
    bool collect; /* the first planning pass: records the requests, allocates nothing */
    void *garena;
    int64_t garena_bytes;
    un_optim_seg *segs; /* this rank's shard: the runs of the flat buffers it updates */
    int n_segs, cap_segs;
    int64_t n_shard; /* their elements (the optimizer's count) */
    int n_outputs;
    un_exec_piece **opieces;
    int *n_opieces;
    uint64_t seed;
    un_exec_stats stats;
    bool dry;    /* planning only (un_exec_estimate_bytes): no backend, no communicator */
    bool hv;     /* the host may address the backend's memory (the communicator then moves it) */
    bool shared; /* the ranks are threads of one process on host-visible memory (local): one
                  * rank may read another's buffers in place */
    un_optim_seg *zsegs; /* the runs of param_grads zeroed before each step (not chunked weights':
                          * their chunks are written whole) */
    int n_zsegs;
    un_comm_dev *plane; /* the backend's device data plane (un_exec_plane_open), or NULL */
    double *node_s;     /* un_exec_time_nodes: per node its forward's and backward's seconds,
                         * then the zeroing's (2 n + 2); NULL: not timed */
    char *stage;        /* host staging of pieces moved between the host and the backend */
    size_t stage_cap;   /* its bytes */
    struct sync_cached *scache; /* sync_run's message lists of the steps' collectives, made once
                                 * (a tiny model's whole step is 10 us here) */
    int n_scache;
    un_comm_msg *sync_sm, *sync_rm; /* sync_run's lists of other calls, kept between calls */
    int64_t sync_cap;               /* the messages each has room for */
};

static int32_t max32(int32_t a, int32_t b) { return a > b ? a : b; }

/* ---- piece geometry (pcg/shape.h) ---- */

#define piece_index  un_shape_piece_index
#define piece_coords un_shape_piece_coords
#define local_dims   un_shape_piece_dims

static un_kt make_kt(const xt *t, void *data) {
    un_kt k;
    memset(&k, 0, sizeof k);
    k.dtype = t->shape.dtype;
    k.rank = t->shape.rank;
    local_dims(&t->shape, k.dim);
    k.data = data;
    return k;
}

/* ---- placement ---- */

static int place(const un_exec *ex, int32_t id, int64_t p);

/* The node id of an executor node. */
static int32_t xn_id(const un_exec *ex, const xnode *xn) { return (int32_t)(xn - ex->nodes); }

/* ---- allocation ---- */

/* A dry run (un_exec_estimate_bytes) plans without a backend: its "buffers" are distinct fake
 * addresses, never dereferenced, never released. */
static void xrelease(un_exec *ex, void *p) {
    if (!ex->dry)
        un_backend_release(ex->be, p);
}

static un_status xalloc(un_ctx *ctx, un_exec *ex, size_t bytes, void **out) {
    un_status st = UN_OK;
    if (ex->dry) {
        static const char fake[1];
        *out = (void *)(uintptr_t)fake;
    } else {
        st = un_backend_alloc(ctx, ex->be, bytes ? bytes : 1, out);
    }
    if (st == UN_OK) { /* every buffer is taken once, while planning: the peak is the total */
        ex->stats.alloc_bytes += (int64_t)bytes;
        if (ex->stats.alloc_bytes > ex->stats.peak_bytes)
            ex->stats.peak_bytes = ex->stats.alloc_bytes;
    }
    return st;
}

/* A buffer in the arena live over times t0..t1: the first planning pass records it, the second
 * gets its place (the same requests in the same order). */
static un_status galloc(un_ctx *ctx, un_exec *ex, size_t bytes, int32_t t0, int32_t t1,
                        void **out) {
    (void)ctx;
    static const char fake[1];
    if (ex->collect) {
        if (ex->n_greq == ex->cap_greq) {
            ex->cap_greq = ex->cap_greq ? 2 * ex->cap_greq : 64;
            ex->greqs = un_xrealloc(ex->greqs, sizeof *ex->greqs * (size_t)ex->cap_greq);
        }
        ex->greqs[ex->n_greq++] = (greq){(int64_t)bytes, 0, t0, t1};
        *out = (void *)(uintptr_t)fake;
        return UN_OK;
    }
    UN_ASSERT(ex->greq_at < ex->n_greq && ex->greqs[ex->greq_at].bytes == (int64_t)bytes);
    int64_t off = ex->greqs[ex->greq_at++].off;
    *out = ex->dry ? (void *)(uintptr_t)fake : (char *)ex->garena + off;
    return UN_OK;
}

/* Places the recorded requests in the arena: largest first, each at the lowest offset free of
 * every placed request whose lifetime overlaps its own (64-byte aligned). Returns the size. */
static int greq_cmp(const void *a, const void *b) {
    const greq *x = *(const greq *const *)a, *y = *(const greq *const *)b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int range_cmp(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

static int64_t greq_layout(greq *r, int n) {
    greq **by = un_xcalloc((size_t)n + 1, sizeof *by);
    int64_t(*busy)[2] = un_xcalloc((size_t)n + 1, sizeof *busy);
    int64_t top = 0;
    for (int i = 0; i < n; i++)
        by[i] = &r[i];
    qsort(by, (size_t)n, sizeof *by, greq_cmp);
    for (int i = 0; i < n; i++) {
        greq *q = by[i];
        int64_t len = (q->bytes + 63) / 64 * 64, at = 0;
        int nb = 0;
        for (int k = 0; k < i; k++) /* placed and live at the same time */
            if (by[k]->t0 <= q->t1 && q->t0 <= by[k]->t1) {
                busy[nb][0] = by[k]->off;
                busy[nb++][1] = by[k]->off + (by[k]->bytes + 63) / 64 * 64;
            }
        qsort(busy, (size_t)nb, sizeof *busy, range_cmp);
        for (int k = 0; k < nb && busy[k][0] < at + len; k++)
            if (busy[k][1] > at)
                at = busy[k][1];
        q->off = at;
        if (at + len > top)
            top = at + len;
    }
    free(busy);
    free(by);
    return top;
}

/* Host scratch of at least n bytes for one transfer between the host and the backend (grown,
 * kept until un_exec_free; each use ends before the next begins). */
static char *stage_get(un_exec *ex, size_t n) {
    if (n > ex->stage_cap) {
        free(ex->stage);
        ex->stage_cap = n > 2 * ex->stage_cap ? n : 2 * ex->stage_cap;
        ex->stage = un_xmalloc(ex->stage_cap);
    }
    return ex->stage;
}

static un_region region_1d(int64_t n, int64_t src_off, int64_t dst_off);

/* The add receives of rm that landed in their stage (backend memory): added into their data, in
 * list order (comm.h's order for adds). Part of the receive, not counted as a copy. */
static void stage_adds(un_exec *ex, const un_comm_msg *rm, int nr) {
    for (int i = 0; i < nr; i++) {
        if (!rm[i].add)
            continue;
        size_t es = rm[i].type == UN_RED_F32 ? sizeof(float) : sizeof(double);
        un_region r = region_1d((int64_t)(rm[i].bytes / es), 0, 0);
        un_backend_copy_region(ex->be, rm[i].data, rm[i].stage, es, &r, true);
    }
}

/* The one exchange of the executor: un_comm_exchange of messages whose data are backend memory
 * (dev_send, dev_recv: the sends', the receives'), carried by the plane that fits. Both sides on
 * the backend and a device data plane open (un_exec_plane_open): the plane moves them; the host
 * can address the backend's memory, or none is backend memory: the communicator moves them;
 * otherwise the sends are read into host staging first and the receives written from it
 * afterwards. Every rank of a message's pair picks the same plane (the plane is open on all or
 * none, dev_send and dev_recv are the same on every rank). An add receive (backend memory, with
 * a stage of as many bytes in backend memory) is added by the communicator where it reaches the
 * backend's memory (`local` from the sender's buffer, in place); the plane and host staging land
 * it in its stage and add it from there. */
static un_status dev_exchange(un_ctx *ctx, un_exec *ex, const un_comm_msg *sm, int ns,
                              bool dev_send, const un_comm_msg *rm, int nr, bool dev_recv) {
    if (ex->plane && dev_send && dev_recv) {
        ex->stats.plane_exchanges++;
        un_comm_msg *pr = un_xcalloc((size_t)nr + 1, sizeof *pr);
        for (int i = 0; i < nr; i++) {
            pr[i] = rm[i];
            if (rm[i].add)
                pr[i] = (un_comm_msg){.peer = rm[i].peer,
                                      .tag = rm[i].tag,
                                      .data = rm[i].stage,
                                      .bytes = rm[i].bytes};
        }
        un_status st = un_comm_dev_exchange(ctx, ex->plane, sm, ns, pr, nr);
        free(pr);
        if (st == UN_OK)
            stage_adds(ex, rm, nr);
        return st;
    }
    if (ex->hv || (!dev_send && !dev_recv))
        return un_comm_exchange(ctx, ex->comm, sm, ns, rm, nr);
    ex->stats.staged_exchanges++;
    size_t total = 0;
    for (int i = 0; dev_send && i < ns; i++)
        total += sm[i].bytes;
    for (int i = 0; dev_recv && i < nr; i++)
        total += rm[i].bytes;
    char *host = stage_get(ex, total + 1);
    un_comm_msg *hs = un_xcalloc((size_t)ns + 1, sizeof *hs);
    un_comm_msg *hr = un_xcalloc((size_t)nr + 1, sizeof *hr);
    un_status st = UN_OK;
    size_t at = 0;
    for (int i = 0; i < ns; i++) {
        hs[i] = sm[i];
        if (!dev_send)
            continue;
        hs[i].data = host + at;
        at += sm[i].bytes;
        if (st == UN_OK)
            st = un_backend_read(ctx, ex->be, hs[i].data, sm[i].data, sm[i].bytes);
    }
    for (int i = 0; i < nr; i++) {
        hr[i] = rm[i];
        if (dev_recv) {
            hr[i] = (un_comm_msg){
                .peer = rm[i].peer, .tag = rm[i].tag, .data = host + at, .bytes = rm[i].bytes};
            at += rm[i].bytes;
        }
    }
    /* a failed read still takes part in the exchange's rendezvous (the peers are in it) */
    un_status xs = un_comm_exchange(ctx, ex->comm, hs, ns, hr, nr);
    if (st == UN_OK)
        st = xs;
    for (int i = 0; dev_recv && i < nr && st == UN_OK; i++)
        st = un_backend_write(ctx, ex->be, rm[i].add ? rm[i].stage : rm[i].data, hr[i].data,
                              rm[i].bytes);
    if (st == UN_OK && dev_recv)
        stage_adds(ex, rm, nr);
    free(hs);
    free(hr);
    return st;
}

static un_status tensor_init(un_ctx *ctx, un_exec *ex, xt *t, const un_shape *s) {
    t->shape = *s;
    t->np = un_shape_npieces(s);
    t->pn = un_shape_piece_numel(s);
    t->is_float = s->dtype == UN_DT_FLOAT;
    t->es = t->is_float ? ex->fes : sizeof(int64_t);
    if (t->np > UN_MAX_DEGREE * 64)
        return un_ctx_error(ctx, UN_ERR_LIMIT, "a tensor of %lld pieces", (long long)t->np);
    t->owner = un_xcalloc((size_t)t->np, sizeof *t->owner);
    t->val = un_xcalloc((size_t)t->np, sizeof *t->val);
    t->grad = un_xcalloc((size_t)t->np, sizeof *t->grad);
    t->borrowed = un_xcalloc((size_t)t->np, sizeof *t->borrowed);
    t->gborrowed = un_xcalloc((size_t)t->np, sizeof *t->gborrowed);
    t->loff = un_xcalloc((size_t)t->np, sizeof *t->loff);
    for (int64_t p = 0; p < t->np; p++)
        t->loff[p] = -1;
    return UN_OK;
}

static void tensor_deinit(un_exec *ex, xt *t) {
    for (int64_t p = 0; p < t->np; p++) {
        if (!t->borrowed[p])
            xrelease(ex, t->val[p]);
        if (!t->gborrowed[p])
            xrelease(ex, t->grad[p]);
    }
    free(t->owner);
    free(t->val);
    free(t->grad);
    free(t->borrowed);
    free(t->gborrowed);
    free(t->loff);
    free(t->soff);
    xrelease(ex, t->sync);
}

void un_exec_bwd_reads(const un_graph *g, const un_node *nd, bool *ins, bool *outs) {
    *ins = *outs = true;
    switch (nd->op) {
    case UN_OP_EW_ADD:
    case UN_OP_EW_SUB:
        *ins = *outs = false;
        break;
    case UN_OP_LINEAR: {
        int a = un_spec_param_index(un_spec_op(un_graph_spec(g), nd->op), "activation");
        *outs = a >= 0 && nd->params[a].v[0] != 0; /* enum index 0: none */
        break;
    }
    case UN_OP_MULTIHEAD_ATTENTION:
        *outs = false;
        break;
    default:
        break;
    }
}

/* Weights of at least this many logical bytes, in copies on shared memory, have their copy-group
 * sum computed in chunks in place (plan_chunked); smaller ones go in the bucketed reduce-scatter,
 * where one exchange sums many of them (two meets per weight would cost more than their bytes). */
#define CHUNKED_MIN_BYTES ((int64_t)1 << 20)

/* The only consumer of node id in g, or -1 (none, or several). */
static int32_t only_consumer(const un_graph *g, int32_t id) {
    int32_t found = -1;
    for (int32_t c = id + 1; c < un_graph_node_count(g); c++) {
        const un_node *nd = un_graph_node(g, c);
        for (int t = 0; t < nd->n_in; t++)
            if (nd->in[t].node == id) {
                if (found >= 0 && found != c)
                    return -1;
                found = c;
            }
    }
    return found;
}

bool un_exec_chunked_weight(const un_graph *g, int32_t id, int64_t elem_bytes) {
    const un_node *nd = un_graph_node(g, id);
    const un_shape *s = &nd->inf.out[0];
    if (nd->op != UN_OP_WEIGHT || s->copy < 2 || s->sum != 1 || s->rank != 2 ||
        un_shape_npieces(s) != s->copy || un_shape_numel(s) * elem_bytes < CHUNKED_MIN_BYTES)
        return false;
    int32_t c = only_consumer(g, id);
    const un_node *ln = c >= 0 ? un_graph_node(g, c) : NULL;
    if (!ln || ln->op != UN_OP_LINEAR || ln->n_in < 2 || ln->in[1].node != id ||
        ln->in[0].node == id || (ln->n_in > 2 && ln->in[2].node == id))
        return false;
    const un_op_spec *os = un_spec_op(un_graph_spec(g), ln->op);
    int a = un_spec_param_index(os, "activation");
    int64_t act = a >= 0 ? ln->params[a].v[0] : -1;
    return act >= 0 && act < os->params[a].n_enum && strcmp(os->params[a].enums[act], "gelu") != 0;
}

void un_exec_chunked_until(const un_graph *g, int64_t elem_bytes, int32_t *until) {
    int32_t n = un_graph_node_count(g), next = T_BWD(n, 0); /* the backward's end */
    for (int32_t id = 0; id < n; id++) {
        const un_node *nd = un_graph_node(g, id);
        until[id] = nd->op == UN_OP_LINEAR && nd->n_in > 1 &&
                            un_exec_chunked_weight(g, nd->in[1].node, elem_bytes)
                        ? 0
                        : -1;
    }
    for (int32_t id = 0; id < n; id++)
        if (until[id] == 0) {
            until[id] = next;
            next = T_BWD(n, id);
        }
}

/* Buffers of a piece this rank owns: values in the arena unless they are read after the step,
 * the gradient in the arena. */
static un_status piece_alloc(un_ctx *ctx, un_exec *ex, xt *t, int64_t p) {
    un_status st = UN_OK;
    size_t bytes = (size_t)t->pn * t->es;
    int32_t last = ex->vlast[t->id];
    if (!t->val[p]) {
        if (last == T_NEVER) {
            st = xalloc(ctx, ex, bytes, &t->val[p]);
        } else {
            st = galloc(ctx, ex, bytes, T_FWD(t->id), last, &t->val[p]);
            t->borrowed[p] = true;
        }
        if (st != UN_OK)
            return st;
    }
    if (t->needs_grad && !t->grad[p]) {
        st = galloc(ctx, ex, bytes, T_BWD(ex->n, ex->gfirst[t->id]),
                    max32(T_BWD(ex->n, t->id), ex->until[t->id]), &t->grad[p]);
        t->gborrowed[p] = true; /* in the arena */
    }
    return st;
}

/* ---- planning ---- */

/* Whether a block copy reads one contiguous run of the source (then it can be a view): every dim
 * after the last partial one is whole, and every dim before it has length 1. */
static bool region_contiguous(const un_region *r, int64_t *first) {
    int m = r->rank - 1;
    while (m >= 0 && r->len[m] == r->src_dim[m])
        m--;
    for (int d = 0; d < m; d++)
        if (r->len[d] != 1)
            return false;
    int64_t off = 0;
    for (int d = 0; d < r->rank; d++)
        off = off * r->src_dim[d] + r->src_off[d];
    *first = off;
    return true;
}

/* The block of a piece of src that a consumer reads, as a region from the piece into a packed
 * buffer: the block of `part` (its src side), or the whole piece (part NULL). */
static un_region piece_block(const xt *src, const un_region *part) {
    un_region b;
    memset(&b, 0, sizeof b);
    b.rank = src->shape.rank;
    local_dims(&src->shape, b.src_dim);
    for (int d = 0; d < b.rank; d++) {
        b.len[d] = part ? part->len[d] : b.src_dim[d];
        b.src_off[d] = part ? part->src_off[d] : 0;
        b.dst_dim[d] = b.len[d];
    }
    return b;
}

/* Transfer i of slot t: of block b of piece p to rank `to`? */
static bool xfer_is(const xfer *x, int t, int64_t p, int to, const un_region *b) {
    return x->t == t && x->piece == p && x->to == to &&
           memcmp(x->r.len, b->len, sizeof b->len) == 0 &&
           memcmp(x->r.src_off, b->src_off, sizeof b->src_off) == 0;
}

/* The index of the transfer of the block of piece p of input slot t (part: the block a parallel op
 * reads, NULL: the whole piece) to rank `to`, or -1 when there is none. */
static int find_xfer(const xnode *xn, const xt *src, int t, int64_t p, int to,
                     const un_region *part) {
    un_region b = piece_block(src, part);
    for (int i = 0; i < xn->n_xfer; i++)
        if (xfer_is(&xn->xfers[i], t, p, to, &b))
            return i;
    return -1;
}

/* The transfer of that block to rank `to`: finds or adds it (every rank adds the same list).
 * Returns its index, or -1 when the piece is already there. Only the block read travels. */
static int need_piece(xnode *xn, const xt *src, int t, int64_t p, int to, const un_region *part,
                      int *cap) {
    int from = src->owner[p];
    if (from == -1 || from == to)
        return -1;
    int i = find_xfer(xn, src, t, p, to, part);
    if (i >= 0)
        return i;
    if (xn->n_xfer == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        xn->xfers = un_xrealloc(xn->xfers, sizeof *xn->xfers * (size_t)*cap);
    }
    xfer *x = &xn->xfers[xn->n_xfer];
    *x =
        (xfer){.t = t, .piece = p, .from = from, .to = to, .r = piece_block(src, part), .numel = 1};
    for (int d = 0; d < x->r.rank; d++)
        x->numel *= x->r.len[d];
    return xn->n_xfer++;
}

static xt *input_tensor(un_exec *ex, const un_node *nd, int t) {
    return &ex->nodes[nd->in[t].node].outs[nd->in[t].out];
}

static un_status local_piece(un_ctx *ctx, un_exec *ex, un_ref src, int64_t p);

/* Buffers of the input piece (slot t, piece p) as this rank sees them: its own, or the received
 * copy of transfer xi. */
static void input_buffers(un_exec *ex, xnode *xn, const un_node *nd, int t, int64_t p, int xi,
                          void **val, void **grad) {
    xt *src = input_tensor(ex, nd, t);
    if (xi < 0) {
        *val = src->val[p];
        *grad = src->needs_grad ? src->grad[p] : NULL;
    } else {
        *val = xn->xfers[xi].buf;
        *grad = xn->xfers[xi].gbuf;
    }
}

/* Allocates the receive side of transfers to this rank and the return side of those from it,
 * in the arena: a received piece lives from this node's forward to its backward when it needs
 * gradients (a regular op is handed its inputs) or, for a parallel op, as long as its output
 * (a view may alias it); the gradients only during this node's backward. */
static un_status plan_xfer_buffers(un_ctx *ctx, un_exec *ex, xnode *xn, const un_node *nd) {
    un_status st = UN_OK;
    int32_t id = xn_id(ex, xn), n = ex->n, last = T_FWD(id);
    bool ins, outs;
    un_exec_bwd_reads(ex->g, nd, &ins, &outs);
    if (un_op_kind_of(nd->op) == UN_OPK_PARALLEL)
        last = ex->vlast[id];
    else if (xn->needs_grad && ins)
        last = T_BWD(n, id);
    for (int i = 0; i < xn->n_xfer && st == UN_OK; i++) {
        xfer *x = &xn->xfers[i];
        xt *src = input_tensor(ex, nd, x->t);
        size_t bytes = (size_t)x->numel * src->es;
        int64_t first;
        if (x->to == ex->rank) {
            st = galloc(ctx, ex, bytes, T_FWD(id), last, &x->buf);
            if (st == UN_OK && src->needs_grad)
                st = galloc(ctx, ex, bytes, T_BWD(n, id), T_BWD(n, id), &x->gbuf);
        } else if (x->from == ex->rank) {
            if (!region_contiguous(&x->r, &first))
                st = galloc(ctx, ex, bytes, T_FWD(id), T_FWD(id), &x->pack);
            if (st == UN_OK && src->needs_grad)
                st = galloc(ctx, ex, bytes, T_BWD(n, id), T_BWD(n, id), &x->gret);
        }
    }
    return st;
}

static un_status plan_regular(un_ctx *ctx, un_exec *ex, const un_node *nd, xnode *xn) {
    const un_infer *inf = &nd->inf;
    int64_t ntup = 1;
    for (int j = 0; j < inf->n_uses; j++)
        ntup *= inf->uses[j].degree;
    int32_t u[UN_MAX_USES];
    int32_t blk[UN_MAX_DIMS], sum, copy;
    int cap = 0;
    /* Pass 1: owners of the output pieces, and the transfers (the same on every rank). */
    int32_t *dev = un_xcalloc((size_t)ntup, sizeof *dev);
    memset(u, 0, sizeof u);
    for (int64_t q = 0; q < ntup; q++) {
        un_infer_piece(inf, u, true, 0, blk, &sum, &copy);
        int d = place(ex, xn_id(ex, xn), piece_index(&xn->outs[0].shape, blk, sum, copy));
        dev[q] = d;
        for (int o = 0; o < xn->n_out; o++) {
            un_infer_piece(inf, u, true, o, blk, &sum, &copy);
            xn->outs[o].owner[piece_index(&xn->outs[o].shape, blk, sum, copy)] = d;
        }
        for (int t = 0; t < nd->n_in; t++) {
            xt *src = input_tensor(ex, nd, t);
            un_infer_piece(inf, u, false, t, blk, &sum, &copy);
            need_piece(xn, src, t, piece_index(&src->shape, blk, sum, copy), d, NULL, &cap);
        }
        for (int j = inf->n_uses - 1; j >= 0 && ++u[j] == inf->uses[j].degree; j--)
            u[j] = 0;
    }
    un_status st = plan_xfer_buffers(ctx, ex, xn, nd);
    /* Pass 2: this rank's tasks. */
    memset(u, 0, sizeof u);
    xn->tasks = un_xcalloc((size_t)ntup, sizeof *xn->tasks);
    for (int64_t q = 0; q < ntup && st == UN_OK; q++) {
        if (dev[q] == ex->rank) {
            rtask *tk = &xn->tasks[xn->n_task++];
            for (int o = 0; o < xn->n_out && st == UN_OK; o++) {
                xt *ot = &xn->outs[o];
                un_infer_piece(inf, u, true, o, blk, &sum, &copy);
                int64_t p = piece_index(&ot->shape, blk, sum, copy);
                if ((st = piece_alloc(ctx, ex, ot, p)) != UN_OK)
                    break;
                tk->out[o] = make_kt(ot, ot->val[p]);
                tk->dout[o] = make_kt(ot, ot->needs_grad ? ot->grad[p] : NULL);
            }
            for (int t = 0; t < nd->n_in && st == UN_OK; t++) {
                xt *src = input_tensor(ex, nd, t);
                un_infer_piece(inf, u, false, t, blk, &sum, &copy);
                int64_t p = piece_index(&src->shape, blk, sum, copy);
                int xi = find_xfer(xn, src, t, p, ex->rank, NULL);
                if (xi < 0 && (st = local_piece(ctx, ex, nd->in[t], p)) != UN_OK)
                    break;
                void *v, *gr;
                input_buffers(ex, xn, nd, t, p, xi, &v, &gr);
                UN_ASSERT(v != NULL);
                tk->in[t] = make_kt(src, v);
                tk->din[t] = make_kt(src, gr);
                if (t == 0) {
                    un_shape_piece_offset(&src->shape, blk, tk->off);
                    for (int i = 0; i < src->shape.rank; i++)
                        tk->full[i] = src->shape.dim[i];
                }
            }
        }
        for (int j = inf->n_uses - 1; j >= 0 && ++u[j] == inf->uses[j].degree; j--)
            u[j] = 0;
    }
    free(dev);
    return st;
}

static void add_move(xnode *xn, pmove m) {
    if (xn->n_move == xn->cap_move) {
        xn->cap_move = xn->cap_move ? 2 * xn->cap_move : 8;
        xn->moves = un_xrealloc(xn->moves, sizeof *xn->moves * (size_t)xn->cap_move);
    }
    xn->moves[xn->n_move++] = m;
}

/* Visits the (input piece, region) pairs that make output piece p of a parallel op. */
typedef void (*src_fn)(un_exec *ex, xnode *xn, const un_node *nd, int64_t p, int64_t q,
                       const un_region *r, bool add, void *arg);

static void parallel_sources(un_exec *ex, xnode *xn, const un_node *nd, int64_t k, int64_t p,
                             src_fn fn, void *arg) {
    const xt *si = input_tensor(ex, nd, 0), *so = &xn->outs[0];
    int32_t blk[UN_MAX_DIMS], sum, copy;
    piece_coords(&so->shape, p, blk, &sum, &copy);
    int rank = so->shape.rank;
    un_region r;
    memset(&r, 0, sizeof r);
    r.rank = rank;
    local_dims(&si->shape, r.src_dim);
    local_dims(&so->shape, r.dst_dim);
    switch (nd->op) {
    case UN_OP_REPLICATE:
        for (int i = 0; i < rank; i++)
            r.len[i] = r.dst_dim[i];
        fn(ex, xn, nd, p, piece_index(&si->shape, blk, sum, (int32_t)(copy / k)), &r, false, arg);
        break;
    case UN_OP_REDUCE:
        for (int i = 0; i < rank; i++)
            r.len[i] = r.dst_dim[i];
        for (int64_t t = 0; t < k; t++)
            fn(ex, xn, nd, p, piece_index(&si->shape, blk, (int32_t)(sum * k + t), copy), &r, t > 0,
               arg);
        break;
    default: { /* partition, combine: the input blocks that overlap this output block */
        int64_t lo[UN_MAX_DIMS], hi[UN_MAX_DIMS];
        int32_t ib[UN_MAX_DIMS];
        for (int i = 0; i < rank; i++) {
            int64_t g0 = blk[i] * r.dst_dim[i], g1 = g0 + r.dst_dim[i];
            lo[i] = g0 / r.src_dim[i];
            hi[i] = (g1 - 1) / r.src_dim[i];
            ib[i] = (int32_t)lo[i];
        }
        for (;;) {
            for (int i = 0; i < rank; i++) {
                int64_t g0 = blk[i] * r.dst_dim[i], s0 = ib[i] * r.src_dim[i];
                int64_t a = g0 > s0 ? g0 : s0;
                int64_t b0 = g0 + r.dst_dim[i], b1 = s0 + r.src_dim[i];
                int64_t b = b0 < b1 ? b0 : b1;
                r.len[i] = b - a;
                r.src_off[i] = a - s0;
                r.dst_off[i] = a - g0;
            }
            fn(ex, xn, nd, p, piece_index(&si->shape, ib, sum, copy), &r, false, arg);
            int i = rank - 1;
            while (i >= 0 && ++ib[i] > hi[i]) {
                ib[i] = (int32_t)lo[i];
                i--;
            }
            if (i < 0)
                break;
        }
    }
    }
}

typedef struct plan_arg {
    int cap;    /* capacity of the transfer list */
    int32_t to; /* the rank that computes the output piece */
    un_ctx *ctx;
    un_status st;
} plan_arg;

static void count_xfer(un_exec *ex, xnode *xn, const un_node *nd, int64_t p, int64_t q,
                       const un_region *r, bool add, void *arg) {
    (void)p, (void)r, (void)add;
    plan_arg *a = arg;
    need_piece(xn, input_tensor(ex, nd, 0), 0, q, a->to, r, &a->cap);
}

static void make_move(un_exec *ex, xnode *xn, const un_node *nd, int64_t p, int64_t q,
                      const un_region *r, bool add, void *arg) {
    (void)arg;
    int xi = find_xfer(xn, input_tensor(ex, nd, 0), 0, q, ex->rank, r);
    pmove m = {.out_piece = p, .r = *r, .add = add};
    if (xi >= 0) { /* the block arrived packed */
        memcpy(m.r.src_dim, m.r.len, sizeof m.r.src_dim);
        memset(m.r.src_off, 0, sizeof m.r.src_off);
    }
    input_buffers(ex, xn, nd, 0, q, xi, &m.src, &m.src_grad);
    UN_ASSERT(m.src != NULL);
    add_move(xn, m);
}

static int64_t parallel_degree(const un_exec *ex, const un_node *nd) {
    const un_op_spec *os = un_spec_op(ex->spec, nd->op);
    return nd->params[un_spec_param_index(os, "degree")].v[0];
}

static void local_source(un_exec *ex, xnode *xn, const un_node *nd, int64_t p, int64_t q,
                         const un_region *r, bool add, void *arg) {
    (void)xn, (void)p, (void)r, (void)add;
    plan_arg *a = arg;
    if (a->st == UN_OK)
        a->st = local_piece(a->ctx, ex, nd->in[0], q);
}

/* Makes output piece p of parallel op nd on this rank: its moves (after those of the pieces of a
 * local source it reads, local_piece), a view where it is one contiguous source block. */
static un_status make_parallel_piece(un_ctx *ctx, un_exec *ex, const un_node *nd, xnode *xn,
                                     int64_t p) {
    int64_t k = parallel_degree(ex, nd);
    xt *so = &xn->outs[0];
    plan_arg a = {.ctx = ctx, .st = UN_OK};
    if (input_tensor(ex, nd, 0)->owner[0] == -1)
        parallel_sources(ex, xn, nd, k, p, local_source, &a);
    if (a.st != UN_OK)
        return a.st;
    int first = xn->n_move;
    parallel_sources(ex, xn, nd, k, p, make_move, NULL);
    pmove *m = &xn->moves[first];
    int64_t off;
    /* A single whole or contiguous source block is a view: no copy, no buffer. */
    if (xn->n_move == first + 1 && region_contiguous(&m->r, &off)) {
        m->alias = true;
        so->val[p] = (char *)m->src + (size_t)off * so->es;
        so->borrowed[p] = true;
    }
    return piece_alloc(ctx, ex, so, p);
}

/* Piece p of output src as this rank reads it without a transfer: a local tensor's (owner -1: the
 * step's data, every piece on every rank, and the parallel ops over it that are not graph
 * outputs) is made here the first time a consumer here reads it; any other is there already. */
static un_status local_piece(un_ctx *ctx, un_exec *ex, un_ref src, int64_t p) {
    xnode *sn = &ex->nodes[src.node];
    xt *t = &sn->outs[src.out];
    if (t->owner[p] != -1 || t->val[p])
        return UN_OK;
    return make_parallel_piece(ctx, ex, un_graph_node(ex->g, src.node), sn, p);
}

static bool is_output(const un_graph *g, int32_t id) {
    for (int32_t i = 0; i < un_graph_output_count(g); i++)
        if (un_graph_output(g, i).node == id)
            return true;
    return false;
}

/* A parallel op over a local tensor (every rank has its every piece, owner -1) is local too when
 * it is not a graph output: each rank makes the pieces its consumers read (local_piece), nothing
 * is sent. Otherwise its pieces live where the plan places them and are made there, after the
 * transfers of the source pieces they need. */
static un_status plan_parallel(un_ctx *ctx, un_exec *ex, const un_node *nd, xnode *xn) {
    int64_t k = parallel_degree(ex, nd);
    xt *so = &xn->outs[0];
    int32_t id = xn_id(ex, xn);
    if (input_tensor(ex, nd, 0)->owner[0] == -1 && !is_output(ex->g, id)) {
        for (int64_t p = 0; p < so->np; p++)
            so->owner[p] = -1;
        return UN_OK;
    }
    plan_arg a = {0};
    for (int64_t p = 0; p < so->np; p++) {
        so->owner[p] = place(ex, id, p);
        a.to = so->owner[p];
        parallel_sources(ex, xn, nd, k, p, count_xfer, &a);
    }
    un_status st = plan_xfer_buffers(ctx, ex, xn, nd);
    for (int64_t p = 0; p < so->np && st == UN_OK; p++)
        if (so->owner[p] == ex->rank)
            st = make_parallel_piece(ctx, ex, nd, xn, p);
    return st;
}

/* The device of piece p of node id's output (the plan's machine view; default p mod D). */
static int place(const un_exec *ex, int32_t id, int64_t p) {
    return un_view_device(&un_graph_node(ex->g, id)->view, p, ex->size);
}

/* Inputs: the logical value on every rank (the data of a step), and its pieces (views when the
 * layout is trivial). */
static un_status plan_input(un_ctx *ctx, un_exec *ex, xnode *xn) {
    xt *t = &xn->outs[0];
    int64_t numel = un_shape_numel(&t->shape);
    un_status st = xalloc(ctx, ex, (size_t)numel * t->es, &t->full);
    for (int64_t p = 0; p < t->np; p++)
        t->owner[p] = -1;
    if (st != UN_OK || t->np == 1) {
        t->val[0] = t->full;
        t->borrowed[0] = true;
        return st;
    }
    for (int64_t p = 0; p < t->np && st == UN_OK; p++)
        st = piece_alloc(ctx, ex, t, p);
    return st;
}

/* The pieces of weight node id's copy group (block b, sum 0): piece b * sum * copy + g. */
static int64_t group_piece(const xt *t, int64_t b, int32_t g) {
    return b * t->shape.sum * t->shape.copy + g;
}

/* The gradient sum over a weight's copies is a reduce-scatter and an all-gather over each copy
 * group: copy g's owner sums chunk g of every copy's gradient (in copy order, so every copy gets
 * the same bits) and sends the sum back to the other copies' owners. The chunk of copy g. */
static void sync_chunk(const xt *t, int32_t g, int64_t *lo, int64_t *hi) {
    *lo = t->pn * g / t->shape.copy;
    *hi = t->pn * (g + 1) / t->shape.copy;
}

/* Scratch elements this rank needs for the sum: the chunks it receives (the sum is made in place
 * in the reducer's own copy). */
static int64_t sync_need(const un_exec *ex, const xt *t) {
    int32_t c = t->shape.copy;
    int64_t nb = t->np / ((int64_t)t->shape.sum * c), need = 0, lo, hi;
    for (int64_t b = 0; b < nb; b++)
        for (int32_t g = 0; g < c; g++) {
            if (t->owner[group_piece(t, b, g)] != ex->rank)
                continue;
            sync_chunk(t, g, &lo, &hi);
            for (int32_t m = 0; m < c; m++)
                if (t->owner[group_piece(t, b, m)] != ex->rank)
                    need += hi - lo;
        }
    return need;
}

/* The scratch of weight t's add receives, where they land before they are added (mpi, a device
 * plane, host staging; a local add on shared memory reads the sender's buffer in place). */
static un_status sync_scratch(un_ctx *ctx, un_exec *ex, xt *t) {
    int64_t need = t->shape.copy > 1 && !t->sync ? sync_need(ex, t) : 0;
    return need ? xalloc(ctx, ex, (size_t)need * t->es, &t->sync) : UN_OK;
}

/* Adds elements [off, off + n) of the flat buffers to this rank's shard (runs merged). */
static void shard_add(un_exec *ex, int64_t off, int64_t n) {
    if (n == 0)
        return;
    ex->n_shard += n;
    un_optim_seg *last = ex->n_segs ? &ex->segs[ex->n_segs - 1] : NULL;
    if (last && last->off + last->n == off) {
        last->n += n;
        return;
    }
    if (ex->n_segs == ex->cap_segs) {
        ex->cap_segs = ex->cap_segs ? 2 * ex->cap_segs : 16;
        ex->segs = un_xrealloc(ex->segs, sizeof *ex->segs * (size_t)ex->cap_segs);
    }
    ex->segs[ex->n_segs++] = (un_optim_seg){off, n};
}

/* Weights: only the pieces placed on this rank, in the rank's flat buffers (the optimizer's),
 * and this rank's shard of them: whole pieces, or of a weight in copies chunk g of copy g. */
static un_status plan_weight(un_ctx *ctx, un_exec *ex, int32_t id, xnode *xn, int64_t *next) {
    xt *t = &xn->outs[0];
    t->soff = un_xcalloc((size_t)t->np, sizeof *t->soff);
    for (int64_t p = 0; p < t->np; p++) {
        t->owner[p] = place(ex, id, p);
        if (t->owner[p] != ex->rank)
            continue;
        t->loff[p] = *next;
        *next += t->pn;
        t->val[p] = (char *)ex->params + (size_t)t->loff[p] * t->es;
        t->grad[p] = (char *)ex->param_grads + (size_t)t->loff[p] * t->es;
        t->borrowed[p] = t->gborrowed[p] = true;
        int32_t blk[UN_MAX_DIMS], sum, copy;
        int64_t lo = 0, hi = t->pn;
        piece_coords(&t->shape, p, blk, &sum, &copy);
        if (sum != 0) /* a zero summand is a constant (its gradient is dropped): no update */
            continue;
        if (t->shape.copy > 1) /* copy g's holder updates chunk g of the block */
            sync_chunk(t, copy, &lo, &hi);
        t->soff[p] = ex->n_shard;
        shard_add(ex, t->loff[p] + lo, hi - lo);
    }
    return ex->shared ? UN_OK : sync_scratch(ctx, ex, t);
}

/* The region of the logical tensor that piece p covers. */
static void source_region(const xt *t, int64_t p, un_region *r, int32_t *sum) {
    int32_t blk[UN_MAX_DIMS], copy;
    piece_coords(&t->shape, p, blk, sum, &copy);
    memset(r, 0, sizeof *r);
    r->rank = t->shape.rank;
    local_dims(&t->shape, r->len);
    un_shape_piece_offset(&t->shape, blk, r->src_off);
    for (int i = 0; i < r->rank; i++) {
        r->src_dim[i] = t->shape.dim[i];
        r->dst_dim[i] = r->len[i];
    }
}

/* The reverse of a region: piece -> logical. */
static un_region region_reverse(const un_region *r) {
    un_region b = *r;
    memcpy(b.src_dim, r->dst_dim, sizeof b.src_dim);
    memcpy(b.src_off, r->dst_off, sizeof b.src_off);
    memcpy(b.dst_dim, r->src_dim, sizeof b.dst_dim);
    memcpy(b.dst_off, r->src_off, sizeof b.dst_off);
    return b;
}

static un_region region_1d(int64_t n, int64_t src_off, int64_t dst_off) {
    un_region r;
    memset(&r, 0, sizeof r);
    r.rank = 1;
    r.len[0] = r.src_dim[0] = r.dst_dim[0] = n;
    r.len[0] = n;
    r.src_dim[0] = src_off + n;
    r.dst_dim[0] = dst_off + n;
    r.src_off[0] = src_off;
    r.dst_off[0] = dst_off;
    return r;
}

static void copy_bytes(un_exec *ex, void *dst, const void *src, size_t es, int64_t n, bool add) {
    un_region r = region_1d(n, 0, 0);
    un_backend_copy_region(ex->be, dst, src, es, &r, add);
    ex->stats.copied += n * (int64_t)es;
}

static void source_scatter(un_exec *ex, xt *t) {
    if (t->np == 1)
        return;
    for (int64_t p = 0; p < t->np; p++) {
        un_region r;
        int32_t sum;
        source_region(t, p, &r, &sum);
        if (sum == 0) /* partial sums: piece 0 holds the value, the others zero */
            un_backend_copy_region(ex->be, t->val[p], t->full, t->es, &r, false);
        else
            un_backend_zero(ex->be, t->val[p], (size_t)t->pn * t->es);
    }
}

/* Element `at` of copy g of block b in a flat per-rank array (the weights, their gradients). */
static void *fpiece(const xt *t, void *flat, int64_t b, int32_t g, int64_t at) {
    return (char *)flat + (size_t)(t->loff[group_piece(t, b, g)] + at) * t->es;
}

/* The zero summands of a weight with partial sums are constants: their gradients are dropped. */
static void weight_drop_summands(un_exec *ex, xt *t) {
    int32_t blk[UN_MAX_DIMS], sum, copy;
    for (int64_t p = 0; p < t->np; p++) {
        if (t->owner[p] != ex->rank)
            continue;
        piece_coords(&t->shape, p, blk, &sum, &copy);
        if (sum != 0)
            un_backend_zero(ex->be, t->grad[p], (size_t)t->pn * t->es);
    }
}

/* Messages of one weight's copy-group sum in the shared lists (tags from `base`). */
typedef struct sync_msgs {
    un_comm_msg *sm, *rm;
    int ns, nr;
} sync_msgs;

/* One pass of the copy-group collectives for weight t over the flat array `flat`. */
typedef void (*sync_fn)(un_exec *ex, xt *t, int base, sync_msgs *q, void *flat);

/* The message lists of one exchanging pass of sync_run over the weights among nodes [lo, hi) of
 * a flat array that lives as long as the executor (its weights or their gradients): the same
 * every step, so made once (the lists of 12 weights took 0.3-0.6 us of dlrm tiny's 12 us
 * data-parallel step to make), with the bytes they add to the step's statistics. Not a pass that
 * also copies locally (an all-gather where a rank holds several copies): that one runs every
 * time. */
typedef struct sync_cached {
    sync_fn fn;
    const void *flat;
    int32_t lo, hi;
    bool chunked;
    bool pure; /* the pass only made messages: q holds them */
    sync_msgs q;
    int64_t sent, recv;
} sync_cached;

/* Blocks of a weight in copies, and the tags its passes use. */
static int64_t sync_blocks(const xt *t) { return t->np / ((int64_t)t->shape.sum * t->shape.copy); }
static int64_t sync_tags(const xt *t) { return sync_blocks(t) * t->shape.copy * t->shape.copy; }

/* Reduce-scatter, phase 1 (replicate's backward for weight t, copy degree c > 1): every copy's
 * gradient chunk g goes to copy g's owner, which adds it into its own copy's chunk g as it
 * receives it (in copy order; locally straight from the sender's buffer, elsewhere through the
 * weight's scratch, comm.h). */
static void sync_scatter(un_exec *ex, xt *t, int base, sync_msgs *q, void *flat) {
    int32_t c = t->shape.copy;
    int64_t nb = sync_blocks(t), lo, hi, off = 0;
    size_t es = t->es;
    int me = ex->rank;
    char *scratch = t->sync;
    for (int64_t b = 0; b < nb; b++)
        for (int32_t g = 0; g < c; g++) {
            int red = t->owner[group_piece(t, b, g)];
            sync_chunk(t, g, &lo, &hi);
            size_t bytes = (size_t)(hi - lo) * es;
            for (int32_t m = 0; m < c && hi > lo; m++) {
                int mem = t->owner[group_piece(t, b, m)];
                int tag = base + (int)((b * c + g) * c + m);
                if (red == me && mem != me) {
                    q->rm[q->nr++] =
                        (un_comm_msg){.peer = mem,
                                      .tag = tag,
                                      .data = fpiece(t, flat, b, g, lo),
                                      .bytes = bytes,
                                      .add = true,
                                      .type = es == sizeof(float) ? UN_RED_F32 : UN_RED_F64,
                                      .stage = scratch + (size_t)off * es};
                    off += hi - lo;
                    ex->stats.recv += (int64_t)bytes;
                } else if (mem == me && red != me) {
                    q->sm[q->ns++] = (un_comm_msg){
                        .peer = red, .tag = tag, .data = fpiece(t, flat, b, m, lo), .bytes = bytes};
                    ex->stats.sent += (int64_t)bytes;
                }
            }
        }
}

/* Reduce-scatter, phase 2 (local): each chunk's owner (the owner of copy g) adds the chunks of
 * the other copies it holds itself, in copy order, after the received ones, so the sum has the
 * same bits whoever makes it and whichever plane carried them. The other chunks of its copies
 * keep partial sums until the all-gather. */
static void sync_reduce(un_exec *ex, xt *t, int base, sync_msgs *q, void *flat) {
    (void)base, (void)q;
    int32_t c = t->shape.copy;
    int64_t nb = sync_blocks(t), lo, hi;
    int me = ex->rank;
    for (int64_t b = 0; b < nb; b++)
        for (int32_t g = 0; g < c; g++) {
            sync_chunk(t, g, &lo, &hi);
            if (hi == lo || t->owner[group_piece(t, b, g)] != me)
                continue;
            for (int32_t m = 0; m < c; m++)
                if (m != g && t->owner[group_piece(t, b, m)] == me)
                    copy_bytes(ex, fpiece(t, flat, b, g, lo), fpiece(t, flat, b, m, lo), t->es,
                               hi - lo, true);
        }
}

/* All-gather: chunk g of copy g (its owner's) is copied into chunk g of every other copy, locally
 * or by a message, so every copy ends with the same bits. */
static void sync_allgather(un_exec *ex, xt *t, int base, sync_msgs *q, void *flat) {
    int32_t c = t->shape.copy;
    int64_t nb = sync_blocks(t), lo, hi;
    size_t es = t->es;
    int me = ex->rank;
    for (int64_t b = 0; b < nb; b++)
        for (int32_t g = 0; g < c; g++) {
            int red = t->owner[group_piece(t, b, g)];
            sync_chunk(t, g, &lo, &hi);
            size_t bytes = (size_t)(hi - lo) * es;
            for (int32_t m = 0; m < c && hi > lo; m++) {
                int mem = t->owner[group_piece(t, b, m)];
                int tag = base + (int)((b * c + g) * c + m);
                if (m == g || (red != me && mem != me))
                    continue;
                if (red == me && mem == me) {
                    copy_bytes(ex, fpiece(t, flat, b, m, lo), fpiece(t, flat, b, g, lo), es,
                               hi - lo, false);
                } else if (red == me) {
                    q->sm[q->ns++] = (un_comm_msg){
                        .peer = mem, .tag = tag, .data = fpiece(t, flat, b, g, lo), .bytes = bytes};
                    ex->stats.sent += (int64_t)bytes;
                } else {
                    q->rm[q->nr++] = (un_comm_msg){
                        .peer = red, .tag = tag, .data = fpiece(t, flat, b, m, lo), .bytes = bytes};
                    ex->stats.recv += (int64_t)bytes;
                }
            }
        }
}

/* Runs the passes fns[0..n) over every weight held in copies among nodes [lo, hi), each pass one
 * exchange when exchange[i] (all those weights together: with many small weights the rendezvous,
 * not the bytes, cost the time). Collective. */
static un_status sync_run(un_ctx *ctx, un_exec *ex, void *flat, const sync_fn *fns,
                          const bool *exchange, int n, int32_t lo, int32_t hi, bool chunked) {
    int64_t total = 0;
    for (int32_t id = lo; id < hi; id++) {
        xt *t = ex->lparam_off[id] >= 0 ? &ex->nodes[id].outs[0] : NULL;
        if (t && t->shape.copy > 1 && (chunked || !t->chunked))
            total += sync_tags(t);
    }
    if (total == 0)
        return UN_OK;
    if (total > INT32_MAX)
        return un_ctx_error(ctx, UN_ERR_LIMIT, "weight sync: %lld messages", (long long)total);
    if (total > ex->sync_cap) {
        free(ex->sync_sm);
        free(ex->sync_rm);
        ex->sync_sm = un_xcalloc((size_t)total, sizeof *ex->sync_sm);
        ex->sync_rm = un_xcalloc((size_t)total, sizeof *ex->sync_rm);
        ex->sync_cap = total;
    }
    bool keep = flat == ex->params || flat == ex->param_grads;
    un_status st = UN_OK;
    for (int pass = 0; pass < n && st == UN_OK; pass++) {
        sync_cached *c = NULL;
        for (int i = 0; keep && exchange[pass] && i < ex->n_scache && !c; i++) {
            sync_cached *e = &ex->scache[i];
            if (e->fn == fns[pass] && e->flat == flat && e->lo == lo && e->hi == hi &&
                e->chunked == chunked)
                c = e;
        }
        sync_msgs q = {.sm = ex->sync_sm, .rm = ex->sync_rm};
        if (c && c->pure) {
            q = c->q;
            ex->stats.sent += c->sent;
            ex->stats.recv += c->recv;
        } else {
            int64_t sent = ex->stats.sent, recv = ex->stats.recv, copied = ex->stats.copied;
            int base = 0;
            for (int32_t id = lo; id < hi; id++) {
                xt *t = ex->lparam_off[id] >= 0 ? &ex->nodes[id].outs[0] : NULL;
                if (!t || t->shape.copy == 1 || (t->chunked && !chunked))
                    continue;
                fns[pass](ex, t, base, &q, flat);
                base += (int)sync_tags(t);
            }
            if (keep && exchange[pass] && !c) {
                ex->scache =
                    un_xrealloc(ex->scache, sizeof *ex->scache * (size_t)(ex->n_scache + 1));
                c = &ex->scache[ex->n_scache++];
                *c = (sync_cached){.fn = fns[pass],
                                   .flat = flat,
                                   .lo = lo,
                                   .hi = hi,
                                   .chunked = chunked,
                                   .pure = ex->stats.copied == copied,
                                   .sent = ex->stats.sent - sent,
                                   .recv = ex->stats.recv - recv};
                if (c->pure) {
                    c->q = (sync_msgs){.sm = un_xcalloc((size_t)q.ns + 1, sizeof *q.sm),
                                       .rm = un_xcalloc((size_t)q.nr + 1, sizeof *q.rm),
                                       .ns = q.ns,
                                       .nr = q.nr};
                    memcpy(c->q.sm, q.sm, sizeof *q.sm * (size_t)q.ns);
                    memcpy(c->q.rm, q.rm, sizeof *q.rm * (size_t)q.nr);
                }
            }
        }
        if (exchange[pass])
            st = dev_exchange(ctx, ex, q.sm, q.ns, true, q.rm, q.nr, true);
    }
    return st;
}

/* Replicate's backward for the weights held in copies among nodes [lo, hi) (DESIGN.md section
 * 3), the reduce-scatter half: each chunk's owner ends with the gradient summed over the copy
 * group, which is all its sharded update needs (un_exec_update all-gathers the updated weights
 * instead). Not the chunked weights: their owners computed their chunks' sums (chunked_grad). */
static un_status grads_reduce_scatter(un_ctx *ctx, un_exec *ex, int32_t lo, int32_t hi) {
    static const sync_fn fns[2] = {sync_scatter, sync_reduce};
    static const bool exchange[2] = {true, false};
    return sync_run(ctx, ex, ex->param_grads, fns, exchange, 2, lo, hi, false);
}

un_status un_exec_allgather(un_ctx *ctx, un_exec *ex, void *flat) {
    static const sync_fn fns[1] = {sync_allgather};
    static const bool exchange[1] = {true};
    return sync_run(ctx, ex, flat, fns, exchange, 1, 0, ex->n, true);
}

/* The values' lifetimes from the graph: vlast (see struct un_exec). */
static void plan_value_lifetimes(un_exec *ex) {
    int32_t n = ex->n;
    ex->vlast = un_xcalloc((size_t)n + 1, sizeof *ex->vlast);
    ex->until = un_xcalloc((size_t)n + 1, sizeof *ex->until);
    if (ex->shared && ex->size > 1)
        un_exec_chunked_until(ex->g, (int64_t)ex->fes, ex->until);
    else
        for (int32_t id = 0; id < n; id++)
            ex->until[id] = -1;
    bool *ng = un_xcalloc((size_t)n + 1, sizeof *ng); /* as xnode.needs_grad */
    for (int32_t id = 0; id < n; id++) {
        const un_node *nd = un_graph_node(ex->g, id);
        ng[id] = nd->op == UN_OP_WEIGHT;
        for (int t = 0; t < nd->n_in; t++)
            ng[id] |= ng[nd->in[t].node];
        bool regular = un_op_kind_of(nd->op) == UN_OPK_REGULAR, ins = false, outs = false;
        if (regular)
            un_exec_bwd_reads(ex->g, nd, &ins, &outs);
        ex->vlast[id] = outs && ng[id] ? T_BWD(n, id) : T_FWD(id);
        if (outs && ng[id])
            ex->vlast[id] = max32(ex->vlast[id], ex->until[id]);
    }
    for (int32_t i = 0; i < un_graph_output_count(ex->g); i++)
        ex->vlast[un_graph_output(ex->g, i).node] = T_NEVER;
    for (int32_t c = n - 1; c >= 0; c--) { /* consumers come after their inputs */
        const un_node *nd = un_graph_node(ex->g, c);
        int32_t use = T_FWD(c);
        bool ins = false, outs;
        if (un_op_kind_of(nd->op) == UN_OPK_PARALLEL)
            use = ex->vlast[c]; /* its output may be a view of its input */
        else if (un_op_kind_of(nd->op) == UN_OPK_REGULAR)
            un_exec_bwd_reads(ex->g, nd, &ins, &outs);
        if (ins && ng[c])
            use = max32(T_BWD(n, c), ex->until[c]);
        for (int t = 0; t < nd->n_in; t++)
            ex->vlast[nd->in[t].node] = max32(ex->vlast[nd->in[t].node], use);
    }
    free(ng);
}

/* Gradient lifetimes from the graph: gfirst (see struct un_exec) and, per node j, the nodes
 * whose gradients start at j's backward; then the values' (plan_value_lifetimes). */
static void plan_lifetimes(un_exec *ex) {
    plan_value_lifetimes(ex);
    int32_t n = ex->n;
    ex->gfirst = un_xcalloc((size_t)n + 1, sizeof *ex->gfirst);
    ex->zstart = un_xcalloc((size_t)n + 2, sizeof *ex->zstart);
    ex->zlist = un_xcalloc((size_t)n + 1, sizeof *ex->zlist);
    for (int32_t id = 0; id < n; id++) {
        const un_node *nd = un_graph_node(ex->g, id);
        ex->gfirst[id] = id;
        for (int t = 0; t < nd->n_in; t++)
            if (ex->gfirst[nd->in[t].node] < id)
                ex->gfirst[nd->in[t].node] = id;
    }
    for (int32_t i = 0; i < un_graph_output_count(ex->g); i++)
        ex->gfirst[un_graph_output(ex->g, i).node] = n;
    for (int32_t id = 0; id < n; id++)
        if (ex->gfirst[id] < n)
            ex->zstart[ex->gfirst[id] + 1]++;
    for (int32_t j = 0; j < n; j++)
        ex->zstart[j + 1] += ex->zstart[j];
    int32_t *fill = un_xcalloc((size_t)n + 1, sizeof *fill);
    for (int32_t id = 0; id < n; id++)
        if (ex->gfirst[id] < n) {
            int32_t j = ex->gfirst[id];
            ex->zlist[ex->zstart[j] + fill[j]++] = id;
        }
    free(fill);
}

static un_status plan_pass(un_ctx *ctx, const un_graph *g, un_comm *comm, int rank, int size,
                           un_backend *be, un_prec prec, bool shared, greq *reqs, int n_reqs,
                           int64_t arena, un_exec **out);

/* Plans g for `rank` of `size`; be NULL = a dry run (prec gives the element size). Two passes:
 * the first (dry) records the activation gradients' sizes and lifetimes, which are then laid out
 * in one arena; the second plans for real with them in place. */
static un_status exec_plan(un_ctx *ctx, const un_graph *g, un_comm *comm, int rank, int size,
                           un_backend *be, un_prec prec, bool shared, un_exec **out) {
    un_exec *first = NULL;
    *out = NULL;
    un_status st = plan_pass(ctx, g, comm, rank, size, be, prec, shared, NULL, 0, 0, &first);
    if (st != UN_OK)
        return st;
    greq *reqs = first->greqs;
    int n_reqs = first->n_greq;
    first->greqs = NULL;
    un_exec_free(first);
    if (!reqs) /* none: still the second pass */
        reqs = un_xcalloc(1, sizeof *reqs);
    int64_t arena = greq_layout(reqs, n_reqs);
    return plan_pass(ctx, g, comm, rank, size, be, prec, shared, reqs, n_reqs, arena, out);
}

/* One planning pass: reqs NULL = the recording pass (dry whatever be is); otherwise reqs (taken
 * over) with their offsets in an arena of `arena` bytes. */
static un_status plan_pass(un_ctx *ctx, const un_graph *g, un_comm *comm, int rank, int size,
                           un_backend *be, un_prec prec, bool shared, greq *reqs, int n_reqs,
                           int64_t arena, un_exec **out) {
    *out = NULL;
    un_exec *ex = un_xcalloc(1, sizeof *ex);
    ex->g = g;
    ex->spec = un_graph_spec(g);
    ex->comm = comm;
    ex->be = be;
    ex->collect = reqs == NULL;
    ex->dry = be == NULL || ex->collect;
    ex->greqs = reqs;
    ex->n_greq = ex->cap_greq = n_reqs;
    ex->garena_bytes = ex->stats.arena_bytes = arena;
    ex->hv = be == NULL || un_backend_host_visible(be);
    ex->shared = shared;
    ex->rank = rank;
    ex->size = size;
    ex->fes = prec == UN_PREC_F32 ? sizeof(float) : sizeof(double);
    ex->n = un_graph_node_count(g);
    ex->nodes = un_xcalloc((size_t)ex->n, sizeof *ex->nodes);
    ex->lparam_off = un_xcalloc((size_t)ex->n, sizeof *ex->lparam_off);
    plan_lifetimes(ex);
    un_status st = UN_OK;
    char why[300];
    if (!un_graph_views_valid(g, size, why, sizeof why)) {
        st = un_ctx_error(ctx, UN_ERR_INVALID, "%s", why);
        goto fail;
    }
    /* Weights: their logical order (node order) and this rank's pieces of them, flat. */
    for (int32_t id = 0; id < ex->n; id++) {
        const un_node *nd = un_graph_node(g, id);
        ex->lparam_off[id] = -1;
        if (nd->op == UN_OP_WEIGHT) {
            const un_shape *s = &nd->inf.out[0];
            if (s->dtype != UN_DT_FLOAT) {
                st = un_ctx_error(ctx, UN_ERR_INVALID, "weight '%s' is not a float tensor",
                                  nd->name ? nd->name : "?");
                goto fail;
            }
            ex->lparam_off[id] = ex->n_lparams;
            ex->n_lparams += un_shape_numel(s);
            for (int64_t p = 0; p < un_shape_npieces(s); p++)
                if (place(ex, id, p) == ex->rank)
                    ex->n_params += un_shape_piece_numel(s);
        }
    }
    if ((st = xalloc(ctx, ex, (size_t)ex->n_params * ex->fes, &ex->params)) != UN_OK ||
        (st = xalloc(ctx, ex, (size_t)ex->n_params * ex->fes, &ex->param_grads)) != UN_OK ||
        (!ex->collect && (st = xalloc(ctx, ex, (size_t)arena, &ex->garena)) != UN_OK))
        goto fail;
    ex->stats.weight_bytes = ex->n_params * (int64_t)ex->fes;
    ex->zsegs = un_xcalloc(1, sizeof *ex->zsegs);
    ex->zsegs[0] = (un_optim_seg){0, ex->n_params};
    ex->n_zsegs = 1;
    int64_t next = 0;
    for (int32_t i = 0; i < ex->n && st == UN_OK; i++) {
        int32_t id = i;
        const un_node *nd = un_graph_node(g, id);
        xnode *xn = &ex->nodes[id];
        xn->n_out = nd->inf.n_out;
        xn->outs = un_xcalloc((size_t)xn->n_out, sizeof *xn->outs);
        bool ng = nd->op == UN_OP_WEIGHT;
        for (int t = 0; t < nd->n_in; t++)
            ng |= input_tensor(ex, nd, t)->needs_grad;
        xn->needs_grad = ng;
        for (int o = 0; o < xn->n_out && st == UN_OK; o++) {
            xn->outs[o].id = id;
            st = tensor_init(ctx, ex, &xn->outs[o], &nd->inf.out[o]);
            xn->outs[o].needs_grad = ng && xn->outs[o].is_float;
        }
        if (st != UN_OK)
            break;
        switch (un_op_kind_of(nd->op)) {
        case UN_OPK_SOURCE:
            st = nd->op == UN_OP_WEIGHT ? plan_weight(ctx, ex, id, xn, &next)
                                        : plan_input(ctx, ex, xn);
            break;
        case UN_OPK_PARALLEL:
            st = plan_parallel(ctx, ex, nd, xn);
            break;
        default:
            if (be && !un_backend_supports_op(be, nd->op))
                st = un_ctx_error(ctx, UN_ERR_UNAVAILABLE, "backend %s has no kernel for %s",
                                  un_backend_name(be), un_op_name(nd->op));
            else
                st = plan_regular(ctx, ex, nd, xn);
        }
    }
    if (st != UN_OK)
        goto fail;
    ex->n_outputs = un_graph_output_count(g);
    ex->opieces = un_xcalloc((size_t)ex->n_outputs + 1, sizeof *ex->opieces);
    ex->n_opieces = un_xcalloc((size_t)ex->n_outputs + 1, sizeof *ex->n_opieces);
    for (int32_t i = 0; i < ex->n_outputs; i++) {
        un_ref r = un_graph_output(g, i);
        xt *t = &ex->nodes[r.node].outs[r.out];
        ex->opieces[i] = un_xcalloc((size_t)t->np, sizeof **ex->opieces);
        for (int64_t p = 0; p < t->np; p++) {
            bool mine = t->owner[p] == ex->rank || (t->owner[p] == -1 && ex->rank == 0);
            if (!mine)
                continue;
            un_exec_piece *ep = &ex->opieces[i][ex->n_opieces[i]++];
            int32_t blk[UN_MAX_DIMS];
            piece_coords(&t->shape, p, blk, &ep->sum, &ep->copy);
            ep->index = p;
            local_dims(&t->shape, ep->dim);
            un_shape_piece_offset(&t->shape, blk, ep->off);
            ep->val = t->val[p];
            ep->grad = t->needs_grad ? t->grad[p] : NULL;
            if (t->is_float && !ep->grad) { /* the loss still writes a gradient */
                if ((st = xalloc(ctx, ex, (size_t)t->pn * t->es, &t->grad[p])) != UN_OK)
                    goto fail;
                ep->grad = t->grad[p];
            }
        }
    }
    *out = ex;
    return UN_OK;
fail:
    un_exec_free(ex);
    return st;
}

/* One rank's view of a chunked candidate (plan_chunked): whether its part holds, the copy it
 * holds (-1: none), and that copy's piece: input, output, output gradient. */
typedef struct cw_entry {
    int64_t ok, copy;
    un_kt kt[3];
} cw_entry;

/* This rank's entry for linear layer id over weight w. */
static cw_entry chunked_entry(un_exec *ex, int32_t id, int32_t w) {
    const xt *t = &ex->nodes[w].outs[0];
    const xnode *xn = &ex->nodes[id];
    cw_entry e = {.ok = 1, .copy = -1};
    for (int64_t p = 0; p < t->np; p++)
        if (t->owner[p] == ex->rank) {
            e.ok &= e.copy < 0; /* one copy per rank */
            e.copy = p;
        }
    if (e.copy < 0)
        return e;
    const rtask *tk = xn->n_task == 1 ? &xn->tasks[0] : NULL;
    const un_node *nd = un_graph_node(ex->g, id);
    e.ok &= tk && xn->n_xfer == 0 && tk->in[1].data == t->val[e.copy] && tk->dout[0].data &&
            tk->din[1].data == t->grad[e.copy] &&
            un_backend_linear_wgrad(NULL, ex->be, nd->inf.local, 0, NULL, NULL, NULL, 0, 0, NULL) ==
                UN_OK; /* asked without a context: a backend without it records nothing */
    if (e.ok) {
        e.kt[0] = tk->in[0];
        e.kt[1] = tk->out[0];
        e.kt[2] = tk->dout[0];
    }
    return e;
}

/* Weights in copies on shared memory (un_exec_chunked_weight): every rank tells every other its
 * entries (pointers: the ranks are threads of one process); where every copy's owner can, its
 * linear layer's backward computes no weight gradient, and copy g's owner then computes chunk g
 * of the sum over the whole batch from every copy's piece in place (un_exec_backward), instead
 * of each rank the whole weight's gradient over its rows and the reduce-scatter. Collective. */
static un_status plan_chunked(un_ctx *ctx, un_exec *ex) {
    int nc = 0;
    int32_t *ids = un_xcalloc((size_t)ex->n + 1, sizeof *ids);
    for (int32_t w = 0; w < ex->n; w++)
        if (un_exec_chunked_weight(ex->g, w, (int64_t)ex->fes))
            ids[nc++] = w;
    if (nc == 0) {
        free(ids);
        return UN_OK;
    }
    int size = ex->size, me = ex->rank;
    cw_entry *all = un_xcalloc((size_t)size * (size_t)nc, sizeof *all);
    for (int j = 0; j < nc; j++)
        all[(size_t)me * (size_t)nc + (size_t)j] =
            chunked_entry(ex, only_consumer(ex->g, ids[j]), ids[j]);
    un_comm_msg *sm = un_xcalloc((size_t)size, sizeof *sm),
                *rm = un_xcalloc((size_t)size, sizeof *rm);
    int ns = 0, nr = 0;
    size_t bytes = sizeof *all * (size_t)nc;
    for (int r = 0; r < size; r++) {
        if (r == me)
            continue;
        sm[ns++] = (un_comm_msg){.peer = r, .data = &all[(size_t)me * (size_t)nc], .bytes = bytes};
        rm[nr++] = (un_comm_msg){.peer = r, .data = &all[(size_t)r * (size_t)nc], .bytes = bytes};
    }
    un_status st = un_comm_exchange(ctx, ex->comm, sm, ns, rm, nr);
    free(sm);
    free(rm);
    for (int j = 0; j < nc && st == UN_OK; j++) {
        xt *t = &ex->nodes[ids[j]].outs[0];
        int32_t c = t->shape.copy, held = 0;
        bool ok = true;
        un_kt *cw = un_xcalloc(3 * (size_t)c, sizeof *cw);
        for (int r = 0; r < size; r++) {
            const cw_entry *e = &all[(size_t)r * (size_t)nc + (size_t)j];
            ok &= e->ok != 0;
            if (!e->ok || e->copy < 0)
                continue;
            held++;
            for (int k = 0; k < 3; k++) /* inputs, outputs, output gradients, by copy */
                cw[k * c + e->copy] = e->kt[k];
        }
        if (!ok || held != c) { /* every copy on its own rank, every one able */
            free(cw);
            continue;
        }
        t->chunked = true;
        xnode *ln = &ex->nodes[only_consumer(ex->g, ids[j])];
        ln->cw = cw;
        ln->cw_w = ids[j];
        for (int i = 0; i < ln->n_task; i++)
            ln->tasks[i].din[1].data = NULL; /* its chunk is computed after the meet */
    }
    free(all);
    free(ids);
    /* the gradients zeroed each step: all but the chunked weights' */
    ex->n_zsegs = 0;
    for (int32_t id = 0; id < ex->n && st == UN_OK; id++) {
        xt *t = ex->lparam_off[id] >= 0 ? &ex->nodes[id].outs[0] : NULL;
        for (int64_t p = 0; t && !t->chunked && p < t->np; p++) {
            if (t->loff[p] < 0)
                continue;
            un_optim_seg *last = ex->n_zsegs ? &ex->zsegs[ex->n_zsegs - 1] : NULL;
            if (last && last->off + last->n == t->loff[p]) {
                last->n += t->pn;
                continue;
            }
            ex->zsegs = un_xrealloc(ex->zsegs, sizeof *ex->zsegs * (size_t)(ex->n_zsegs + 1));
            ex->zsegs[ex->n_zsegs++] = (un_optim_seg){t->loff[p], t->pn};
        }
    }
    return st;
}

un_status un_exec_new(un_ctx *ctx, const un_graph *g, un_comm *comm, un_backend *be,
                      un_exec **out) {
    int size = un_comm_size(comm);
    bool shared = strcmp(un_comm_name(comm), "local") == 0 && un_backend_host_visible(be);
    un_status st =
        exec_plan(ctx, g, comm, un_comm_rank(comm), size, be, un_backend_prec(be), shared, out);
    bool cand = false;
    for (int32_t id = 0; shared && size > 1 && id < un_graph_node_count(g) && !cand; id++)
        cand = un_exec_chunked_weight(g, id, un_backend_prec(be) == UN_PREC_F32 ? 4 : 8);
    if (!cand)
        return st;
    if ((st = un_comm_agree(ctx, comm, st)) == UN_OK)
        st = plan_chunked(ctx, *out);
    if (st != UN_OK) {
        un_exec_free(*out);
        *out = NULL;
    }
    return st;
}

void un_exec_free(un_exec *ex) {
    if (!ex)
        return;
    for (int32_t id = 0; id < ex->n; id++) {
        xnode *xn = &ex->nodes[id];
        const un_node *nd = un_graph_node(ex->g, id);
        for (int o = 0; o < xn->n_out && xn->outs; o++) {
            if (nd->op == UN_OP_INPUT)
                xrelease(ex, xn->outs[o].full);
            tensor_deinit(ex, &xn->outs[o]);
        }
        free(xn->outs);
        free(xn->xfers);
        free(xn->tasks);
        free(xn->moves);
        free(xn->cw);
    }
    for (int32_t i = 0; i < ex->n_outputs; i++)
        free(ex->opieces[i]);
    free(ex->opieces);
    free(ex->n_opieces);
    free(ex->nodes);
    free(ex->lparam_off);
    free(ex->segs);
    free(ex->zsegs);
    free(ex->sync_sm);
    free(ex->sync_rm);
    for (int i = 0; i < ex->n_scache; i++) {
        free(ex->scache[i].q.sm);
        free(ex->scache[i].q.rm);
    }
    free(ex->scache);
    free(ex->gfirst);
    free(ex->vlast);
    free(ex->until);
    free(ex->zstart);
    free(ex->zlist);
    free(ex->greqs);
    if (ex->garena)
        xrelease(ex, ex->garena);
    xrelease(ex, ex->params);
    xrelease(ex, ex->param_grads);
    free(ex->stage);
    free(ex->node_s);
    un_comm_dev_free(ex->plane);
    free(ex);
}

/* After a local failure: the other ranks' pending and later exchanges fail instead of waiting
 * (the device plane's pending transfers end too). */
static void exec_abort(un_exec *ex) {
    if (ex->plane)
        un_comm_dev_abort(ex->plane);
    else
        un_comm_abort(ex->comm);
}

un_status un_exec_plane_open(un_ctx *ctx, un_exec *ex) {
    UN_ASSERT(!ex->dry && !ex->plane);
    un_status st = un_comm_dev_new(ctx, ex->comm, ex->be, &ex->plane);
    for (int32_t id = 0; id < ex->n && st == UN_OK && ex->plane; id++)
        if (ex->lparam_off[id] >= 0) /* a plane's add receives land in the scratch */
            st = sync_scratch(ctx, ex, &ex->nodes[id].outs[0]);
    return st;
}

const char *un_exec_plane_name(const un_exec *ex) {
    return ex->plane ? un_comm_dev_name(ex->plane) : NULL;
}

size_t un_exec_kern_scratch(const un_node *nd, un_prec prec, const un_kt *in, const un_kt *out,
                            const bool *grads, int threads) {
    un_kt tin[UN_MAX_INPUTS];
    for (int t = 0; t < nd->n_in; t++) {
        int u = 0; /* the first input that names the same tensor */
        while (nd->in[u].node != nd->in[t].node || nd->in[u].out != nd->in[t].out)
            u++;
        tin[t] = in[t];
        tin[t].data = (void *)(uintptr_t)(u + 1); /* compared, never read */
    }
    return un_kern_scratch_bytes(prec, nd->op, nd->inf.local, tin, nd->n_in, out, grads, threads,
                                 true);
}

int64_t un_exec_estimate_bytes(const un_graph *g, int rank, int size, un_prec prec, bool shared,
                               int opt_arrays, int kernel_threads) {
    un_exec *ex = NULL;
    if (exec_plan(NULL, g, NULL, rank, size, NULL, prec, shared, &ex) != UN_OK)
        return -1;
    int64_t bytes = ex->stats.alloc_bytes + (int64_t)opt_arrays * ex->n_shard * (int64_t)ex->fes;
    size_t scratch = 0; /* one kernel call at a time on the device's thread */
    for (int32_t id = 0; kernel_threads > 0 && id < ex->n; id++) {
        const un_node *nd = un_graph_node(g, id);
        const xnode *xn = &ex->nodes[id];
        bool grads[UN_MAX_INPUTS]; /* the runtime passes a gradient where its input needs one */
        for (int t = 0; t < nd->n_in; t++)
            grads[t] = input_tensor(ex, nd, t)->needs_grad;
        for (int i = 0; i < xn->n_task; i++) {
            bytes += (int64_t)un_kern_stash_bytes(prec, nd->op, nd->inf.local, xn->tasks[i].in,
                                                  nd->n_in, xn->tasks[i].out);
            size_t k = un_exec_kern_scratch(nd, prec, xn->tasks[i].in, xn->tasks[i].out, grads,
                                            kernel_threads);
            scratch = k > scratch ? k : scratch;
        }
    }
    un_exec_free(ex);
    return bytes + (int64_t)scratch;
}

/* ---- queries ---- */

void *un_exec_source(un_exec *ex, int32_t node) {
    UN_ASSERT(node >= 0 && node < ex->n);
    UN_ASSERT(un_graph_node(ex->g, node)->op == UN_OP_INPUT);
    return ex->nodes[node].outs[0].full;
}

int64_t un_exec_param_count(const un_exec *ex) { return ex->n_params; }
int64_t un_exec_lparam_count(const un_exec *ex) { return ex->n_lparams; }
int64_t un_exec_lparam_offset(const un_exec *ex, int32_t node) {
    return node >= 0 && node < ex->n ? ex->lparam_off[node] : -1;
}
void *un_exec_params(un_exec *ex) { return ex->params; }
void *un_exec_param_grads(un_exec *ex) { return ex->param_grads; }
const un_exec_stats *un_exec_stats_get(const un_exec *ex) { return &ex->stats; }

const un_exec_piece *un_exec_output_pieces(const un_exec *ex, int32_t i, int *n) {
    UN_ASSERT(i >= 0 && i < ex->n_outputs);
    *n = ex->n_opieces[i];
    return ex->opieces[i];
}

const un_shape *un_exec_output_shape(const un_exec *ex, int32_t i) {
    UN_ASSERT(i >= 0 && i < ex->n_outputs);
    return un_graph_shape(ex->g, un_graph_output(ex->g, i));
}

/* ---- running ---- */

/* Sends the pieces this node's ranks need (forward) or returns their gradients (backward). */
static un_status run_xfers(un_ctx *ctx, un_exec *ex, int32_t id, bool backward) {
    xnode *xn = &ex->nodes[id];
    const un_node *nd = un_graph_node(ex->g, id);
    if (xn->n_xfer == 0)
        return UN_OK;
    un_comm_msg *s = un_xcalloc((size_t)xn->n_xfer, sizeof *s);
    un_comm_msg *r = un_xcalloc((size_t)xn->n_xfer, sizeof *r);
    int ns = 0, nr = 0;
    for (int i = 0; i < xn->n_xfer; i++) {
        xfer *x = &xn->xfers[i];
        xt *src = input_tensor(ex, nd, x->t);
        size_t bytes = (size_t)x->numel * src->es;
        if (backward && !src->needs_grad)
            continue;
        int sender = backward ? x->to : x->from, receiver = backward ? x->from : x->to;
        if (sender == ex->rank) {
            void *data = x->gbuf;
            int64_t first = 0;
            if (!backward && x->pack) { /* the block, packed */
                un_backend_copy_region(ex->be, x->pack, src->val[x->piece], src->es, &x->r, false);
                ex->stats.copied += (int64_t)bytes;
                data = x->pack;
            } else if (!backward) { /* one run of the piece */
                region_contiguous(&x->r, &first);
                data = (char *)src->val[x->piece] + (size_t)first * src->es;
            }
            s[ns++] = (un_comm_msg){.peer = receiver, .tag = i, .data = data, .bytes = bytes};
            ex->stats.sent += (int64_t)bytes;
        }
        if (receiver == ex->rank) {
            ex->stats.recv += (int64_t)bytes;
            r[nr++] = (un_comm_msg){
                .peer = sender, .tag = i, .data = backward ? x->gret : x->buf, .bytes = bytes};
        }
    }
    un_status st = dev_exchange(ctx, ex, s, ns, true, r, nr, true);
    if (st == UN_OK && backward) {
        for (int i = 0; i < xn->n_xfer; i++) {
            xfer *x = &xn->xfers[i];
            xt *src = input_tensor(ex, nd, x->t);
            if (x->from != ex->rank || !src->needs_grad)
                continue;
            un_region back = region_reverse(&x->r); /* the block's gradient into the piece's */
            un_backend_copy_region(ex->be, src->grad[x->piece], x->gret, src->es, &back, true);
        }
    }
    free(s);
    free(r);
    return st;
}

/* Node times (un_exec_time_nodes): the clock when they are on (else 0), and the seconds since t0
 * added to slot k. */
static double clock_on(const un_exec *ex) { return ex->node_s ? un_now_s() : 0; }

static void clock_add(un_exec *ex, double t0, int32_t k) {
    if (ex->node_s)
        ex->node_s[k] += un_now_s() - t0;
}

void un_exec_time_nodes(un_exec *ex, bool on) {
    free(ex->node_s);
    ex->node_s = on ? un_xcalloc(2 * (size_t)ex->n + 2, sizeof *ex->node_s) : NULL;
}

double un_exec_node_seconds(const un_exec *ex, int32_t id, bool bwd) {
    UN_ASSERT(id >= 0 && id <= ex->n);
    return ex->node_s ? ex->node_s[2 * id + bwd] : 0;
}

/* Zeroes the gradients of node id's outputs held here (not a weight's: those are flat). */
static void zero_node_grads(un_exec *ex, int32_t id) {
    xnode *xn = &ex->nodes[id];
    if (ex->lparam_off[id] >= 0)
        return;
    for (int o = 0; o < xn->n_out; o++) {
        xt *t = &xn->outs[o];
        for (int64_t p = 0; p < t->np; p++)
            if (t->grad[p])
                un_backend_zero(ex->be, t->grad[p], (size_t)t->pn * t->es);
    }
}

/* After the forward, when their lifetime starts: the graph outputs' gradients (the loss writes
 * them); every other gradient is zeroed when its lifetime starts (zero_starting). */
static void zero_output_grads(un_exec *ex) {
    for (int32_t id = 0; id < ex->n; id++)
        if (ex->gfirst[id] == ex->n)
            zero_node_grads(ex, id);
}

/* Before node id's backward: the gradients that start there (its inputs' whose last consumer it
 * is, its own when nothing consumes it, its transfers'), which may share memory with gradients
 * that died before. */
static void zero_starting(un_exec *ex, int32_t id) {
    xnode *xn = &ex->nodes[id];
    double t0 = clock_on(ex);
    for (int32_t k = ex->zstart[id]; k < ex->zstart[id + 1]; k++)
        zero_node_grads(ex, ex->zlist[k]);
    for (int i = 0; i < xn->n_xfer; i++)
        if (xn->xfers[i].gbuf) {
            xt *src = input_tensor(ex, un_graph_node(ex->g, id), xn->xfers[i].t);
            un_backend_zero(ex->be, xn->xfers[i].gbuf, (size_t)xn->xfers[i].numel * src->es);
        }
    clock_add(ex, t0, 2 * ex->n + 1);
}

static un_status forward_node(un_ctx *ctx, un_exec *ex, int32_t id) {
    const un_node *nd = un_graph_node(ex->g, id);
    xnode *xn = &ex->nodes[id];
    un_status st = UN_OK;
    switch (un_op_kind_of(nd->op)) {
    case UN_OPK_SOURCE: /* weights are in place; inputs are cut into their pieces */
        if (nd->op == UN_OP_INPUT)
            source_scatter(ex, &xn->outs[0]);
        return UN_OK;
    case UN_OPK_PARALLEL: {
        if ((st = run_xfers(ctx, ex, id, false)) != UN_OK)
            return st;
        xt *so = &xn->outs[0];
        for (int i = 0; i < xn->n_move; i++) {
            const pmove *m = &xn->moves[i];
            if (!m->alias)
                un_backend_copy_region(ex->be, so->val[m->out_piece], m->src, so->es, &m->r,
                                       m->add);
        }
        return UN_OK;
    }
    default:
        if ((st = run_xfers(ctx, ex, id, false)) != UN_OK)
            return st;
        for (int i = 0; i < xn->n_task && st == UN_OK; i++) {
            rtask *tk = &xn->tasks[i];
            st = un_backend_op_forward(ctx, ex->be, nd->op, nd->inf.local, tk->in, nd->n_in,
                                       tk->out, xn->n_out, ex->seed, tk->off, tk->full);
        }
        return st;
    }
}

un_status un_exec_forward(un_ctx *ctx, un_exec *ex, uint64_t dropout_seed) {
    ex->seed = dropout_seed;
    ex->stats.sent = ex->stats.recv = ex->stats.copied = 0;
    ex->stats.plane_exchanges = ex->stats.staged_exchanges = 0;
    if (ex->node_s)
        memset(ex->node_s, 0, (2 * (size_t)ex->n + 2) * sizeof *ex->node_s);
    double t0 = clock_on(ex);
    for (int i = 0; i < ex->n_zsegs; i++)
        un_backend_zero(ex->be, (char *)ex->param_grads + (size_t)ex->zsegs[i].off * ex->fes,
                        (size_t)ex->zsegs[i].n * ex->fes);
    clock_add(ex, t0, 2 * ex->n);
    un_status st = UN_OK;
    for (int32_t i = 0; i < ex->n && st == UN_OK; i++) {
        t0 = clock_on(ex);
        st = forward_node(ctx, ex, i);
        clock_add(ex, t0, 2 * i);
    }
    if (st != UN_OK)
        exec_abort(ex);
    else {
        t0 = clock_on(ex);
        zero_output_grads(ex);
        clock_add(ex, t0, 2 * ex->n);
    }
    return st;
}

static un_status backward_node(un_ctx *ctx, un_exec *ex, int32_t id) {
    const un_node *nd = un_graph_node(ex->g, id);
    xnode *xn = &ex->nodes[id];
    un_status st = UN_OK;
    if (!xn->needs_grad)
        return UN_OK;
    zero_starting(ex, id);
    switch (un_op_kind_of(nd->op)) {
    case UN_OPK_SOURCE:
        if (nd->op == UN_OP_WEIGHT)
            weight_drop_summands(ex, &xn->outs[0]);
        return UN_OK;
    case UN_OPK_PARALLEL: {
        xt *so = &xn->outs[0];
        for (int i = 0; i < xn->n_move; i++) {
            const pmove *m = &xn->moves[i];
            if (!m->src_grad)
                continue;
            un_region b = m->r; /* the transposed block: output piece -> source piece */
            memcpy(b.src_dim, m->r.dst_dim, sizeof b.src_dim);
            memcpy(b.src_off, m->r.dst_off, sizeof b.src_off);
            memcpy(b.dst_dim, m->r.src_dim, sizeof b.dst_dim);
            memcpy(b.dst_off, m->r.src_off, sizeof b.dst_off);
            un_backend_copy_region(ex->be, m->src_grad, so->grad[m->out_piece], so->es, &b, true);
        }
        return run_xfers(ctx, ex, id, true);
    }
    default:
        for (int i = 0; i < xn->n_task && st == UN_OK; i++) {
            rtask *tk = &xn->tasks[i];
            bool any = false;
            for (int t = 0; t < nd->n_in; t++)
                any |= tk->din[t].data != NULL;
            if (any)
                st = un_backend_op_backward(ctx, ex->be, nd->op, nd->inf.local, tk->in, nd->n_in,
                                            tk->out, xn->n_out, tk->dout, tk->din, ex->seed,
                                            tk->off, tk->full);
        }
        if (st != UN_OK)
            return st;
        return run_xfers(ctx, ex, id, true);
    }
}

/* Weights in copies are summed over their groups in buckets of at least this many logical bytes,
 * each as soon as the backward has passed its weight nodes (their consumers' backwards all ran),
 * while their gradients are fresh in cache, instead of all at the end. */
#define SYNC_BUCKET_BYTES ((int64_t)4 << 20)

/* After linear layer id's backward on every rank and a meet, copy g's owner computes chunk g of the
 * weight's gradient summed over the whole batch, from every copy's piece in place (rows of the
 * weight [in, out]: those holding elements [lo, hi) of the chunk; a row it shares with the next
 * chunk is computed by both, each into its own copy), copy g's product first, then the others'
 * added in copy order: the reduce-scatter's sum, bit for bit. The pieces read live until the next
 * meet (ex->until: the next such layer's, or the one that ends the backward), so no rank reuses
 * their memory while another reads them. Collective. */
static un_status chunked_grad(un_ctx *ctx, un_exec *ex, int32_t id) {
    xnode *xn = &ex->nodes[id];
    xt *t = &ex->nodes[xn->cw_w].outs[0];
    int32_t c = t->shape.copy;
    un_status st = UN_OK;
    for (int32_t g = 0; g < c && st == UN_OK; g++) {
        if (t->owner[g] != ex->rank)
            continue;
        int64_t lo, hi, out = t->shape.dim[1];
        sync_chunk(t, g, &lo, &hi);
        if (hi == lo)
            continue;
        const un_node *nd = un_graph_node(ex->g, id);
        bool ins, outs;
        un_exec_bwd_reads(ex->g, nd, &ins, &outs);
        for (int32_t m = 0; m < c; m++)
            if (t->owner[m] != ex->rank) /* read in place from its rank */
                ex->stats.recv +=
                    (un_kt_numel(&xn->cw[m]) + (outs ? 2 : 1) * un_kt_numel(&xn->cw[c + m])) *
                    (int64_t)t->es;
        /* copy g's piece first, then the others in copy order: the reduce-scatter's sum */
        un_kt *kt = un_xcalloc(3 * (size_t)c, sizeof *kt);
        for (int k = 0; k < 3; k++)
            for (int32_t m = 0, at = 1; m < c; m++)
                kt[k * c + (m == g ? 0 : at++)] = xn->cw[k * c + m];
        int64_t r0 = lo / out, r1 = (hi + out - 1) / out;
        st = un_backend_linear_wgrad(ctx, ex->be, nd->inf.local, c, kt, kt + c, kt + 2 * c, r0, r1,
                                     (char *)t->grad[g] + (size_t)(r0 * out) * t->es);
        free(kt);
    }
    return st;
}

un_status un_exec_backward(un_ctx *ctx, un_exec *ex) {
    un_status st = UN_OK;
    int32_t hi = ex->n; /* the bucket: the weights among nodes [i, hi) */
    int64_t pending = 0;
    bool met = false; /* a chunked layer's meet: another one ends the backward */
    for (int32_t i = ex->n - 1; i >= 0 && st == UN_OK; i--) {
        double t0 = clock_on(ex), z = ex->node_s ? ex->node_s[2 * ex->n + 1] : 0;
        st = backward_node(ctx, ex, i);
        if (ex->node_s) /* less its zeroing (zero_starting), timed apart */
            ex->node_s[2 * i + 1] = un_now_s() - t0 - (ex->node_s[2 * ex->n + 1] - z);
        /* every layer whose pieces live to the next meet meets (ex->until), chunked or not */
        if (st == UN_OK && ex->until[i] >= 0) {
            st = un_comm_barrier(ctx, ex->comm);
            met = true;
        }
        if (st == UN_OK && ex->nodes[i].cw)
            st = chunked_grad(ctx, ex, i);
        const xt *t = ex->lparam_off[i] >= 0 ? &ex->nodes[i].outs[0] : NULL;
        if (st != UN_OK || !t || t->shape.copy == 1 || t->chunked)
            continue;
        pending += un_shape_numel(&t->shape) * (int64_t)t->es; /* the same on every rank */
        if (pending >= SYNC_BUCKET_BYTES) {
            st = grads_reduce_scatter(ctx, ex, i, hi);
            hi = i;
            pending = 0;
        }
    }
    if (st == UN_OK)
        st = grads_reduce_scatter(ctx, ex, 0, hi);
    if (st == UN_OK && met) /* the last chunked layer's pieces are read until here */
        st = un_comm_barrier(ctx, ex->comm);
    if (st != UN_OK) {
        exec_abort(ex);
        return st;
    }
    return UN_OK;
}

/* ---- weights between their logical order and this rank's pieces ---- */

un_status un_exec_params_scatter(un_ctx *ctx, un_exec *ex, const void *logical, void *local) {
    un_status st = UN_OK;
    for (int32_t id = 0; id < ex->n && st == UN_OK; id++) {
        if (ex->lparam_off[id] < 0)
            continue;
        xt *t = &ex->nodes[id].outs[0];
        const char *full = (const char *)logical + (size_t)ex->lparam_off[id] * t->es;
        size_t bytes = (size_t)t->pn * t->es;
        for (int64_t p = 0; p < t->np && st == UN_OK; p++) {
            if (t->loff[p] < 0)
                continue;
            char *dst = (char *)local + (size_t)t->loff[p] * t->es;
            un_region r;
            int32_t sum;
            source_region(t, p, &r, &sum);
            if (sum != 0) { /* partial sums: summand 0 holds the value, the others zero */
                un_backend_zero(ex->be, dst, bytes);
                continue;
            }
            char *host = stage_get(ex, bytes);
            un_region_copy_host(un_backend_prec(ex->be), host, full, t->es, &r, false);
            st = un_backend_write(ctx, ex->be, dst, host, bytes);
        }
    }
    return st;
}

un_status un_exec_params_gather(un_ctx *ctx, un_exec *ex, const void *local, void *logical) {
    /* Summand 0, copy 0 of every block goes to rank 0. */
    int64_t nmsg = 0, recv = 0;
    for (int32_t id = 0; id < ex->n; id++)
        if (ex->lparam_off[id] >= 0)
            nmsg += ex->nodes[id].outs[0].np;
    un_comm_msg *sm = un_xcalloc((size_t)nmsg + 1, sizeof *sm);
    un_comm_msg *rm = un_xcalloc((size_t)nmsg + 1, sizeof *rm);
    int ns = 0, nr = 0, tag = 0;
    un_status st = UN_OK;
    for (int pass = 0; pass < 2; pass++) {
        char *buf = NULL;
        if (pass == 1 && ex->rank == 0)
            buf = un_xmalloc((size_t)recv * ex->fes + 1);
        int64_t off = 0;
        tag = 0;
        for (int32_t id = 0; id < ex->n; id++) {
            if (ex->lparam_off[id] < 0)
                continue;
            xt *t = &ex->nodes[id].outs[0];
            for (int64_t p = 0; p < t->np; p++, tag++) {
                un_region r;
                int32_t sum, blk[UN_MAX_DIMS], copy;
                piece_coords(&t->shape, p, blk, &sum, &copy);
                if (sum != 0 || copy != 0)
                    continue;
                source_region(t, p, &r, &sum);
                un_region b = region_reverse(&r);
                char *full = (char *)logical + (size_t)ex->lparam_off[id] * t->es;
                const char *mine =
                    t->loff[p] >= 0 ? (const char *)local + (size_t)t->loff[p] * t->es : NULL;
                if (ex->rank == 0 && mine) {
                    size_t bytes = (size_t)t->pn * t->es;
                    char *host = pass == 1 ? stage_get(ex, bytes) : NULL;
                    if (host && st == UN_OK &&
                        (st = un_backend_read(ctx, ex->be, host, mine, bytes)) == UN_OK)
                        un_region_copy_host(un_backend_prec(ex->be), full, host, t->es, &b, false);
                } else if (ex->rank == 0) {
                    if (pass == 0)
                        recv += t->pn;
                    else
                        rm[nr++] = (un_comm_msg){.peer = t->owner[p],
                                                 .tag = tag,
                                                 .data = buf + (size_t)off * t->es,
                                                 .bytes = (size_t)t->pn * t->es};
                    off += t->pn;
                } else if (mine && pass == 1) {
                    sm[ns++] = (un_comm_msg){.peer = 0,
                                             .tag = tag,
                                             .data = (void *)(uintptr_t)mine,
                                             .bytes = (size_t)t->pn * t->es};
                }
            }
        }
        if (pass == 0)
            continue;
        /* a failed read on rank 0 still takes part in the exchange (the peers are in it) */
        un_status xs = dev_exchange(ctx, ex, sm, ns, true, rm, nr, false);
        if (st == UN_OK)
            st = xs;
        /* Place the received pieces. */
        off = 0;
        for (int32_t id = 0; st == UN_OK && ex->rank == 0 && id < ex->n; id++) {
            if (ex->lparam_off[id] < 0)
                continue;
            xt *t = &ex->nodes[id].outs[0];
            for (int64_t p = 0; p < t->np; p++) {
                un_region r;
                int32_t sum, blk[UN_MAX_DIMS], copy;
                piece_coords(&t->shape, p, blk, &sum, &copy);
                if (sum != 0 || copy != 0 || t->loff[p] >= 0)
                    continue;
                source_region(t, p, &r, &sum);
                un_region b = region_reverse(&r);
                un_region_copy_host(un_backend_prec(ex->be),
                                    (char *)logical + (size_t)ex->lparam_off[id] * t->es,
                                    buf + (size_t)off * t->es, t->es, &b, false);
                off += t->pn;
            }
        }
        free(buf);
        free(sm);
        free(rm);
        return st;
    }
    return UN_OK;
}

/* ---- the sharded update ---- */

int64_t un_exec_shard_count(const un_exec *ex) { return ex->n_shard; }

un_status un_exec_update(un_ctx *ctx, un_exec *ex, un_optim *opt) {
    UN_ASSERT(un_optim_count(opt) == ex->n_shard);
    un_status st =
        un_optim_step_segs(ctx, opt, ex->be, ex->params, ex->param_grads, ex->segs, ex->n_segs);
    if (st == UN_OK)
        st = un_exec_allgather(ctx, ex, ex->params);
    if (st != UN_OK)
        exec_abort(ex);
    return st;
}

un_exec_block *un_exec_blocks(const un_exec *ex, int *n) {
    int cap = 16;
    un_exec_block *out = un_xcalloc((size_t)cap, sizeof *out);
    *n = 0;
    for (int32_t id = 0; id < ex->n; id++) {
        if (ex->lparam_off[id] < 0)
            continue;
        const xt *t = &ex->nodes[id].outs[0];
        for (int64_t p = 0; p < t->np; p++) {
            int32_t blk[UN_MAX_DIMS], sum, copy;
            piece_coords(&t->shape, p, blk, &sum, &copy);
            if (t->loff[p] < 0 || sum != 0)
                continue;
            if (*n == cap)
                out = un_xrealloc(out, sizeof *out * (size_t)(cap *= 2));
            un_exec_block *b = &out[(*n)++];
            memset(b, 0, sizeof *b);
            b->node = id;
            un_shape_piece_offset(&t->shape, blk, b->off);
            local_dims(&t->shape, b->len);
            b->at = t->loff[p];
            b->lo = 0;
            b->hi = t->pn;
            if (t->shape.copy > 1)
                sync_chunk(t, copy, &b->lo, &b->hi);
            b->shard_at = t->soff[p];
        }
    }
    return out;
}

/* A flat per-rank array (un_exec_param_count elements) on the backend, for moving a shard. */
static un_status flat_new(un_ctx *ctx, un_exec *ex, void **out) {
    return un_backend_alloc(ctx, ex->be, (size_t)(ex->n_params ? ex->n_params : 1) * ex->fes, out);
}

/* Copies between a shard (compact) and a flat array: to_flat, or back. */
static void shard_move(un_exec *ex, void *flat, void *shard, bool to_flat) {
    int64_t at = 0;
    for (int k = 0; k < ex->n_segs; k++) {
        const un_optim_seg *s = &ex->segs[k];
        un_region r = to_flat ? region_1d(s->n, at, s->off) : region_1d(s->n, s->off, at);
        un_backend_copy_region(ex->be, to_flat ? flat : shard, to_flat ? shard : flat, ex->fes, &r,
                               false);
        at += s->n;
    }
}

un_status un_exec_shard_scatter(un_ctx *ctx, un_exec *ex, const void *logical, void *shard) {
    void *flat = NULL;
    un_status st = flat_new(ctx, ex, &flat);
    if (st != UN_OK)
        return st;
    st = un_exec_params_scatter(ctx, ex, logical, flat);
    if (st == UN_OK)
        shard_move(ex, flat, shard, false);
    un_backend_release(ex->be, flat);
    return st;
}

un_status un_exec_shard_gather(un_ctx *ctx, un_exec *ex, const void *shard, void *logical) {
    void *flat = NULL;
    un_status st = un_comm_agree(ctx, ex->comm, flat_new(ctx, ex, &flat));
    if (st != UN_OK) {
        if (flat)
            un_backend_release(ex->be, flat);
        return st;
    }
    un_exec_stats keep = ex->stats; /* not a step's traffic */
    un_backend_zero(ex->be, flat, (size_t)ex->n_params * ex->fes);
    shard_move(ex, flat, (void *)(uintptr_t)shard, true);
    st = un_exec_allgather(ctx, ex, flat);
    if (st == UN_OK)
        st = un_exec_params_gather(ctx, ex, flat, logical);
    ex->stats = keep;
    un_backend_release(ex->be, flat);
    return st;
}

un_status un_exec_output_gather(un_ctx *ctx, un_exec *ex, int32_t i, void *dense) {
    UN_ASSERT(i >= 0 && i < ex->n_outputs);
    un_ref ref = un_graph_output(ex->g, i);
    xt *t = &ex->nodes[ref.node].outs[ref.out];
    if (!t->is_float)
        return un_ctx_error(ctx, UN_ERR_INVALID, "gather: output %d is not a float tensor", i);
    int64_t numel = un_shape_numel(&t->shape);
    memset(dense, 0, (size_t)numel * t->es);
    un_status st = UN_OK;
    for (int k = 0; k < ex->n_opieces[i] && st == UN_OK; k++) {
        const un_exec_piece *ep = &ex->opieces[i][k];
        if (ep->copy != 0)
            continue;
        size_t bytes = (size_t)t->pn * t->es;
        char *host = stage_get(ex, bytes);
        if ((st = un_backend_read(ctx, ex->be, host, ep->val, bytes)) != UN_OK)
            break;
        un_region r;
        memset(&r, 0, sizeof r);
        r.rank = t->shape.rank;
        for (int d = 0; d < r.rank; d++) {
            r.src_dim[d] = r.len[d] = ep->dim[d];
            r.dst_dim[d] = t->shape.dim[d];
            r.dst_off[d] = ep->off[d];
        }
        un_region_copy_host(un_backend_prec(ex->be), dense, host, t->es, &r, true);
    }
    /* a failed read still takes part in the all-reduce (the other ranks are in it) */
    un_status rs = un_comm_allreduce(
        ctx, ex->comm, ex->fes == sizeof(float) ? UN_RED_F32 : UN_RED_F64, dense, numel);
    return st != UN_OK ? st : rs;
}
