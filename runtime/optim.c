/* optim.c - weight initialisation, SGD with momentum and Adam (checkpoints: checkpoint.c). */
#include "runtime/optim.h"

#include "runtime/backend_impl.h"
#include "runtime/exec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct un_optim {
    un_optim_params p;
    un_prec prec;
    int64_t n, t;
    void *m, *v;    /* SGD: m is the velocity; Adam: first and second moments (in prec) */
    un_backend *be; /* where m and v live (NULL: host memory) */
};

un_optim_params un_optim_params_default(un_optim_algo kind) {
    if (kind == UN_OPTIM_ADAM)
        return (un_optim_params){
            .kind = UN_OPTIM_ADAM, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    return (un_optim_params){.kind = UN_OPTIM_SGD, .lr = 0.05, .momentum = 0.9};
}

const char *un_optim_algo_name(un_optim_algo kind) {
    return kind == UN_OPTIM_ADAM ? "adam" : kind == UN_OPTIM_SGD ? "sgd" : "?";
}

bool un_optim_algo_from_name(const char *name, un_optim_algo *out) {
    for (int k = 0; k < UN_OPTIM_COUNT; k++)
        if (strcmp(name, un_optim_algo_name((un_optim_algo)k)) == 0) {
            *out = (un_optim_algo)k;
            return true;
        }
    return false;
}

un_status un_optim_new(un_ctx *ctx, un_optim_params p, int64_t n, un_prec prec, un_optim **out) {
    *out = NULL;
    if ((unsigned)p.kind >= UN_OPTIM_COUNT || !(p.lr > 0) || !isfinite(p.lr) || p.momentum < 0 ||
        p.momentum >= 1 || p.beta1 < 0 || p.beta1 >= 1 || p.beta2 < 0 || p.beta2 >= 1 || n < 0)
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "optimizer: bad parameters (lr %g must be > 0, momentum and betas in "
                            "[0, 1))",
                            p.lr);
    un_optim *o = un_xcalloc(1, sizeof *o);
    o->p = p;
    o->prec = prec;
    o->n = n;
    size_t es = prec == UN_PREC_F32 ? sizeof(float) : sizeof(double);
    o->m = calloc((size_t)(n ? n : 1), es);
    o->v = p.kind == UN_OPTIM_ADAM ? calloc((size_t)(n ? n : 1), es) : NULL;
    if (!o->m || (p.kind == UN_OPTIM_ADAM && !o->v)) {
        un_optim_free(o);
        return un_ctx_error(ctx, UN_ERR_NOMEM, "optimizer: no memory for %lld parameters",
                            (long long)n);
    }
    *out = o;
    return UN_OK;
}

un_status un_optim_new_on(un_ctx *ctx, un_optim_params p, int64_t n, un_backend *be,
                          un_optim **out) {
    un_optim *o;
    un_status st = un_optim_new(ctx, p, n < 0 ? n : 0, un_backend_prec(be), &o); /* checks p, n */
    *out = NULL;
    if (st != UN_OK)
        return st;
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
    o->be = be;
    o->n = n;
    size_t bytes = (size_t)(n ? n : 1) * (o->prec == UN_PREC_F32 ? sizeof(float) : sizeof(double));
    st = un_backend_alloc(ctx, be, bytes, &o->m);
    if (st == UN_OK && p.kind == UN_OPTIM_ADAM)
        st = un_backend_alloc(ctx, be, bytes, &o->v);
    if (st != UN_OK) {
        un_optim_free(o);
        return st;
    }
    *out = o;
    return UN_OK;
}

void un_optim_free(un_optim *o) {
    if (!o)
        return;
    if (o->be) {
        un_backend_release(o->be, o->m);
        un_backend_release(o->be, o->v);
    } else {
        free(o->m);
        free(o->v);
    }
    free(o);
}

int64_t un_optim_steps(const un_optim *o) { return o->t; }
void un_optim_set_steps(un_optim *o, int64_t t) { o->t = t; }
int64_t un_optim_count(const un_optim *o) { return o->n; }
un_optim_algo un_optim_kind(const un_optim *o) { return o->p.kind; }
void *un_optim_state(const un_optim *o, int i) { return i == 0 ? o->m : i == 1 ? o->v : NULL; }
un_prec un_optim_prec(const un_optim *o) { return o->prec; }

void un_optim_step(un_optim *o, void *w, const void *g) {
    UN_ASSERT(o->be == NULL); /* state made by un_optim_new_on is updated by un_optim_step_on */
    o->t++;
    double step, eps_hat;
    un__optim_bias(&o->p, o->t, &step, &eps_hat);
    un__optim_update_host(o->prec, &o->p, step, eps_hat, o->n, w, g, o->m, o->v);
}

un_status un_optim_step_on(un_ctx *ctx, un_optim *o, un_backend *be, void *w, const void *g) {
    un_optim_seg all = {0, o->n};
    return un_optim_step_segs(ctx, o, be, w, g, &all, 1);
}

un_status un_optim_step_segs(un_ctx *ctx, un_optim *o, un_backend *be, void *w, const void *g,
                             const un_optim_seg *segs, int n_segs) {
    UN_ASSERT(o->be == be); /* its state lives on the backend that updates it */
    UN_ASSERT(un_backend_prec(be) == o->prec);
    int64_t at = 0; /* the segments' elements */
    for (int k = 0; k < n_segs; k++)
        at += segs[k].n;
    UN_ASSERT(at == o->n);
    o->t++;
    return un_backend_optim_step(ctx, be, &o->p, o->t, segs, n_segs, w, g, o->m, o->v);
}

/* ---- initialisation ---- */

static inline void setv(void *a, un_prec prec, int64_t i, double x) {
    if (prec == UN_PREC_F32)
        ((float *)a)[i] = (float)x;
    else
        ((double *)a)[i] = x;
}

/* The first regular op that reads weight w (through parallel ops), and at which input slot. */
static bool weight_use(const un_graph *g, int32_t w, un_op *op, int *slot) {
    int32_t n = un_graph_node_count(g);
    int32_t cur = w;
    for (int hops = 0; hops < n; hops++) {
        int32_t next = -1;
        for (int32_t id = 0; id < n && next < 0; id++) {
            const un_node *nd = un_graph_node(g, id);
            for (int t = 0; t < nd->n_in; t++) {
                if (nd->in[t].node != cur)
                    continue;
                if (un_op_kind_of(nd->op) == UN_OPK_PARALLEL) {
                    next = id;
                } else {
                    *op = nd->op;
                    *slot = t;
                    return true;
                }
                break;
            }
        }
        if (next < 0)
            return false;
        cur = next;
    }
    return false;
}

/* How weight node w starts: its element e is fill (>= 0) or bound * (2 u(e) - 1), u(e) uniform in
 * [0, 1) from a counter-based generator (splitmix64 at position e of the weight's stream), so any
 * element's value is computed alone: each rank initialises only its pieces. */
typedef struct init_rule {
    uint64_t seed;
    double fill, bound;
} init_rule;

static init_rule init_rule_of(const un_graph *g, int32_t w, uint64_t seed) {
    const un_node *nd = un_graph_node(g, w);
    const un_shape *s = &nd->inf.out[0];
    un_op op = UN_OP_LINEAR;
    int slot = 1;
    const char *role = "w";
    if (weight_use(g, w, &op, &slot)) {
        const un_op_spec *os = un_spec_op(un_graph_spec(g), op);
        role = slot < os->n_inputs ? os->inputs[slot].name : "w";
    }
    const char *name = nd->name ? nd->name : "";
    init_rule r = {un_hash_bytes(s->dim, sizeof(int64_t) * (size_t)s->rank,
                                 un_hash_bytes(name, strlen(name), seed)),
                   -1, 1};
    if (strcmp(role, "gamma") == 0)
        r.fill = 1;
    else if (strcmp(role, "beta") == 0 || strcmp(role, "b") == 0)
        r.fill = 0;
    int64_t fan_in = s->rank >= 1 ? s->dim[0] : 1;
    if (s->rank == 4) /* conv2d [cout, cin/groups, kh, kw] */
        fan_in = s->dim[1] * s->dim[2] * s->dim[3];
    if (op != UN_OP_EMBEDDING)
        r.bound = 1.0 / sqrt((double)(fan_in > 0 ? fan_in : 1));
    return r;
}

static inline double init_value(const init_rule *r, int64_t e) {
    if (r->fill >= 0)
        return r->fill;
    uint64_t x = un_mix64(r->seed + (uint64_t)e * 0x9e3779b97f4a7c15ull);
    return r->bound * (2 * ((double)(x >> 11) * (1.0 / 9007199254740992.0)) - 1);
}

/* Elements lo..hi (row-major) of the block off/len of weight node w of g into out (prec): given's
 * values (the whole weight, logical order) where given is not NULL, else the seeded ones. */
static void init_block(const un_graph *g, int32_t w, uint64_t seed, const float *given,
                       un_prec prec, const int64_t *off, const int64_t *len, int64_t lo, int64_t hi,
                       void *out) {
    const un_shape *s = &un_graph_node(g, w)->inf.out[0];
    init_rule r = {0, 0, 0};
    if (!given)
        r = init_rule_of(g, w, seed);
    for (int64_t x = lo; x < hi;) {
        int64_t run, e = un_shape_block_index(s, off, len, x, &run);
        run = run < hi - x ? run : hi - x;
        for (int64_t k = 0; k < run; k++)
            setv(out, prec, x - lo + k, given ? given[e + k] : init_value(&r, e + k));
        x += run;
    }
}

void un_optim_init_weights(const un_graph *g, uint64_t seed, un_prec prec, void *w, int64_t n) {
    int64_t off = 0;
    size_t es = prec == UN_PREC_F32 ? sizeof(float) : sizeof(double);
    for (int32_t id = 0; id < un_graph_node_count(g); id++) {
        const un_node *nd = un_graph_node(g, id);
        if (nd->op != UN_OP_WEIGHT)
            continue;
        const un_shape *s = &nd->inf.out[0];
        int64_t numel = un_shape_numel(s), zero[UN_MAX_DIMS] = {0};
        UN_ASSERT(off + numel <= n);
        init_block(g, id, seed, NULL, prec, zero, s->dim, 0, numel, (char *)w + (size_t)off * es);
        off += numel;
    }
}

un_status un_optim_init_exec(un_ctx *ctx, const un_graph *g, uint64_t seed,
                             const float *const *given, un_exec *ex, un_backend *be) {
    enum { CHUNK = 1 << 16 }; /* elements staged on the host at a time */
    un_prec prec = un_backend_prec(be);
    size_t es = prec == UN_PREC_F32 ? sizeof(float) : sizeof(double);
    char *params = un_exec_params(ex);
    /* partial-sum pieces beyond summand 0 hold zero; every block below is then written whole */
    un_backend_zero(be, params, (size_t)un_exec_param_count(ex) * es);
    int nb;
    un_exec_block *blk = un_exec_blocks(ex, &nb);
    void *host = un_xmalloc((size_t)CHUNK * es);
    un_status st = UN_OK;
    for (int b = 0; b < nb && st == UN_OK; b++) {
        const un_exec_block *k = &blk[b];
        int64_t n = 1;
        for (int d = 0; d < un_graph_node(g, k->node)->inf.out[0].rank; d++)
            n *= k->len[d];
        for (int64_t lo = 0; lo < n && st == UN_OK; lo += CHUNK) {
            int64_t hi = lo + CHUNK < n ? lo + CHUNK : n;
            init_block(g, k->node, seed, given ? given[k->node] : NULL, prec, k->off, k->len, lo,
                       hi, host);
            st = un_backend_write(ctx, be, params + (size_t)(k->at + lo) * es, host,
                                  (size_t)(hi - lo) * es);
        }
    }
    free(host);
    free(blk);
    return st;
}
