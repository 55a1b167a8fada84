/* enum.c - depth-first enumeration of graphs over a menu with incremental prime-field evaluation
 * (enum.h). Each worker thread owns a path state (the current graph's tensors and their values)
 * and private record arrays; the top-level operators are the work items the threads share. The
 * records are sorted at the end, so the result does not depend on the thread count. */
#include "gen/enum.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

un_gen_params un_gen_params_default(void) {
    return (un_gen_params){.max_ops = 3, .threads = 1, .seed = 1234, .shard_i = 0, .shard_n = 1};
}

void un_gen_enum_result_deinit(un_gen_enum_result *r) {
    if (!r)
        return;
    free(r->recs);
    free(r->classes);
    memset(r, 0, sizeof *r);
}

/* Shape inference memoised per (menu instance, input shapes): the enumeration and every replay
 * (un_gen_enum_eval) ask the same few thousand questions millions of times. Entries are immutable
 * once published in a fixed open-addressing table of atomic pointers, so the threads share it
 * without locks; a full probe window just computes without memoising. un_spec_infer with ctx
 * NULL is a pure function of these inputs, so results cannot depend on the table. */
#define MEMO_SLOTS (1 << 20) /* power of 2; the default menu asks 21,807 questions at N=3 */
#define MEMO_PROBE 32

typedef struct infer_answer {
    uint64_t out_sh[UN_MAX_OUTPUTS];  /* shape_key of each output */
    uint64_t out_vh0[UN_MAX_OUTPUTS]; /* value_hash_seed of each output */
    un_infer inf;
} infer_answer;

typedef struct infer_memo {
    uint16_t inst;
    uint8_t n_in;
    infer_answer *ok; /* owned; NULL: ill-formed (most answers, so they stay small) */
    un_shape in[];    /* n_in input shapes */
} infer_memo;

/* Key of a shape for the memo (equal bytes give equal keys). */
static uint64_t shape_key(const un_shape *s) { return un_shape_hash(s, 0x73686170ull); }

struct un_gen_enum {
    _Atomic(infer_memo *) *memo; /* MEMO_SLOTS; written through const un_gen_enum (memoisation) */
    const un_gen_class *classes; /* during a run: value classes of cones below the size bound */
    int64_t n_classes;
    const un_gen_menu *m;
    const un_spec *spec;
    uint64_t seed;
    un_ptensor in_val[UN_GEN_MAX_INPUTS];
    uint64_t in_vh[UN_GEN_MAX_INPUTS];
    uint64_t in_key[UN_GEN_MAX_INPUTS];
};

const un_gen_menu *un_gen_enum_menu(const un_gen_enum *e) { return e->m; }

/* Hash of a tensor's logical shape, layout and logical value: value_hash_from(value_hash_seed(s),
 * ...), the seed a function of the shape alone (memoised with the shape inference). */
static uint64_t value_hash_seed(const un_shape *s) { return un_shape_hash(s, 0x76616c7565ull); }

static uint64_t value_hash_from(uint64_t h, const un_val *dense, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        h = un_mix64(h ^ dense[i].u) + (uint64_t)i;
    return un_mix64(h);
}

void un_gen_enum_free(un_gen_enum *e) {
    if (!e)
        return;
    for (int i = 0; i < MEMO_SLOTS; i++) {
        infer_memo *m = atomic_load_explicit(&e->memo[i], memory_order_relaxed);
        if (m)
            free(m->ok);
        free(m);
    }
    free(e->memo);
    for (int i = 0; i < UN_GEN_MAX_INPUTS; i++)
        un_ptensor_deinit(&e->in_val[i]);
    free(e);
}

un_status un_gen_enum_new(un_ctx *ctx, const un_gen_menu *menu, uint64_t seed, un_gen_enum **out) {
    *out = NULL;
    un_gen_enum *e = un_xcalloc(1, sizeof *e);
    e->memo = un_xcalloc(MEMO_SLOTS, sizeof *e->memo); /* all-zero bytes: NULL pointers */
    e->m = menu;
    e->spec = menu->spec;
    e->seed = seed;
    un_status st = UN_OK;
    for (int i = 0; i < menu->n_inputs; i++) {
        const un_gen_input *in = &menu->inputs[i];
        int64_t n = un_shape_numel(&in->shape);
        un_val *dense = un_xmalloc(sizeof(un_val) * (size_t)n);
        un_rng rng;
        un_rng_seed(&rng, un_hash_bytes(in->name, strlen(in->name), seed));
        un_ptensor_random_dense(UN_DOM_FIELD, UN_DT_FLOAT, 0, n, &rng, dense);
        if ((st = un_ptensor_init(ctx, &e->in_val[i], &in->shape)) == UN_OK)
            st = un_ptensor_scatter(ctx, &e->in_val[i], UN_DOM_FIELD, dense, &rng);
        e->in_vh[i] = value_hash_from(value_hash_seed(&in->shape), dense, n);
        /* structural key of an input: its menu index (inputs are never renamed here) */
        e->in_key[i] = un_mix64(0x696e707574ull + (uint64_t)i);
        free(dense);
        if (st != UN_OK) {
            un_gen_enum_free(e);
            return st;
        }
    }
    *out = e;
    return UN_OK;
}

/* ---- growable arrays ---- */

typedef struct {
    void *data;
    int64_t n, cap;
    size_t elem;
} vec;

static bool vec_push(vec *v, const void *x) {
    if (v->n == v->cap) {
        int64_t cap = v->cap ? v->cap + v->cap / 2 : 1024; /* 1.5x: less slack at N=4 */
        void *d = realloc(v->data, (size_t)cap * v->elem);
        if (!d)
            return false;
        v->data = d;
        v->cap = cap;
    }
    memcpy((char *)v->data + (size_t)v->n * v->elem, x, v->elem);
    v->n++;
    return true;
}

/* ---- the path state of one worker ---- */

typedef struct wstate {
    un_ctx *ctx; /* private to the worker */
    const un_gen_enum *e;
    const un_gen_params *p;
    int n_ops, n_t;
    un_gen_op ops[UN_GEN_MAX_OPS];
    uint64_t opkey[UN_GEN_MAX_OPS];
    un_ptensor val[UN_GEN_MAX_T]; /* menu inputs: shallow copies of e->in_val */
    uint64_t vh[UN_GEN_MAX_T], key[UN_GEN_MAX_T];
    uint64_t sh[UN_GEN_MAX_T]; /* shape_key of each tensor's shape (the inference memo's key) */
    uint32_t mask[UN_GEN_MAX_T], anc[UN_GEN_MAX_T];
    int16_t prod[UN_GEN_MAX_T], uses[UN_GEN_MAX_T];
    int8_t prod_out[UN_GEN_MAX_T];
    un_val *dense;
    int64_t dense_cap;
    vec recs, classes;
    int64_t n_graphs, n_by_size[UN_GEN_MAX_OPS + 1], n_dup, n_ill, n_disconnected, n_cut;
    int max_in; /* most inputs of a menu operator */
    _Atomic int64_t progress_graphs;
    _Atomic int64_t progress_recs; /* records kept so far (candidate graphs for pairing) */
    un_status err;                 /* first hard error (allocation) */
    int class_max; /* record classes of cones with at most this many operators (0: none) */
    bool no_recs;  /* collect classes only */
    int64_t n_naming, n_same_nf;
    int64_t *map; /* (fp, nf) -> index in recs + 1; open addressing */
    int64_t map_cap;
    bool record; /* false while replaying one graph (un_gen_enum_eval) */
    const atomic_bool *stop;
} wstate;

static void ws_init(wstate *w, un_ctx *ctx, const un_gen_enum *e, const un_gen_params *p) {
    memset(w, 0, sizeof *w);
    w->ctx = ctx;
    w->e = e;
    w->p = p;
    w->recs.elem = sizeof(un_gen_rec);
    w->classes.elem = sizeof(un_gen_class);
    w->n_t = e->m->n_inputs;
    w->max_in = 1;
    for (int i = 0; i < e->m->n_insts; i++)
        if (e->m->insts[i].n_in > w->max_in)
            w->max_in = e->m->insts[i].n_in;
    for (int i = 0; i < w->n_t; i++) {
        w->val[i] = e->in_val[i];
        w->vh[i] = e->in_vh[i];
        w->key[i] = e->in_key[i];
        w->sh[i] = shape_key(&e->in_val[i].shape);
        w->mask[i] = 1u << i;
        w->prod[i] = -1;
        w->prod_out[i] = 0;
    }
}

static void ws_deinit(wstate *w) {
    for (int t = w->e->m->n_inputs; t < w->n_t; t++)
        un_ptensor_deinit(&w->val[t]);
    free(w->dense);
    free(w->map);
    free(w->recs.data);
    free(w->classes.data);
}

static un_val *scratch(wstate *w, int64_t n) {
    if (n > w->dense_cap) {
        free(w->dense);
        w->dense_cap = n > 4096 ? n : 4096;
        w->dense = un_xmalloc(sizeof(un_val) * (size_t)w->dense_cap);
    }
    return w->dense;
}

/* Fingerprint of the current graph from its sorted output value hashes and input mask. */
static int graph_outputs(const wstate *w, uint8_t *outs, uint32_t *mask_all) {
    int n = 0;
    *mask_all = 0;
    for (int t = w->e->m->n_inputs; t < w->n_t; t++) {
        *mask_all |= w->mask[t];
        if (w->uses[t] == 0) {
            if (n == UN_GEN_MAX_GOUTS)
                return UN_GEN_MAX_GOUTS + 1;
            outs[n++] = (uint8_t)t;
        }
    }
    /* sort by value hash (insertion sort, n <= 4) */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && w->vh[outs[j - 1]] > w->vh[outs[j]]; j--) {
            uint8_t x = outs[j];
            outs[j] = outs[j - 1];
            outs[j - 1] = x;
        }
    return n;
}

static uint64_t graph_fp(const uint64_t *vh, const uint8_t *outs, int n) {
    uint64_t h = un_mix64(0x6670ull);
    for (int i = 0; i < n; i++)
        h = un_mix64(h ^ vh[outs[i]]);
    return h;
}

/* Number of components of the operators linked by operator-to-operator edges. */
static int components(const wstate *w) {
    int comp[UN_GEN_MAX_OPS], n = w->n_ops, nc = n;
    for (int j = 0; j < n; j++)
        comp[j] = j;
    for (int j = 0; j < n; j++)
        for (int k = 0; k < w->ops[j].n_in; k++) {
            int p = w->prod[w->ops[j].in[k]];
            if (p < 0)
                continue;
            int a = comp[p], b = comp[j];
            if (a == b)
                continue;
            for (int q = 0; q < n; q++)
                if (comp[q] == b)
                    comp[q] = a;
            nc--;
        }
    return nc;
}

/* The class of a tensor value (vh, mask) among the cones below the size bound, or NULL. */
static const un_gen_class *class_of(const un_gen_enum *e, uint64_t vh, uint32_t mask) {
    int64_t lo = 0, hi = e->n_classes;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        const un_gen_class *c = &e->classes[mid];
        if (c->vh < vh || (c->vh == vh && c->mask < mask))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < e->n_classes && e->classes[lo].vh == vh && e->classes[lo].mask == mask)
        return &e->classes[lo];
    return NULL;
}

static uint64_t normal_form(const wstate *w, const uint8_t *outs, int n) {
    uint64_t nf[UN_GEN_MAX_T];
    int ni = w->e->m->n_inputs, t = ni;
    for (int i = 0; i < ni; i++)
        nf[i] = w->key[i];
    for (int j = 0; j < w->n_ops; j++) {
        uint64_t key = un_mix64(0x6f70ull + (uint64_t)w->ops[j].inst);
        for (int k = 0; k < w->ops[j].n_in; k++)
            key = un_mix64(key ^ nf[w->ops[j].in[k]]) + (uint64_t)k;
        for (; t < w->n_t && w->prod[t] == j; t++) {
            nf[t] = un_mix64(key + 0x6f7574ull * (uint64_t)(w->prod_out[t] + 1));
            const un_gen_class *c = w->uses[t] > 0 ? class_of(w->e, w->vh[t], w->mask[t]) : NULL;
            if (c)
                nf[t] = un_mix64(c->key ^ 0x636c617373ull);
        }
    }
    uint64_t h = 0x6e66ull;
    for (int i = 0; i < n; i++)
        h = un_mix64(h ^ nf[outs[i]]);
    return h;
}

static int cmp_graph(const un_gen_graph *a, const un_gen_graph *b) {
    if (a->n_ops != b->n_ops)
        return a->n_ops < b->n_ops ? -1 : 1;
    return memcmp(a, b, sizeof *a);
}

/* Keeps r unless a smaller graph of the same value and normal form is kept (then it replaces
 * nothing); one record per (fp, nf) whatever the visiting order. */
static void keep_rec(wstate *w, const un_gen_rec *r) {
    if (2 * (w->recs.n + 1) > w->map_cap) {
        int64_t cap = w->map_cap ? 2 * w->map_cap : 4096;
        int64_t *map = calloc((size_t)cap, sizeof *map);
        if (!map) {
            w->err = UN_ERR_NOMEM;
            return;
        }
        const un_gen_rec *rv = w->recs.data;
        for (int64_t i = 0; i < w->recs.n; i++) {
            uint64_t h = un_mix64(rv[i].fp ^ un_mix64(rv[i].nf));
            int64_t s = (int64_t)(h & (uint64_t)(cap - 1));
            while (map[s])
                s = (s + 1) & (cap - 1);
            map[s] = i + 1;
        }
        free(w->map);
        w->map = map;
        w->map_cap = cap;
    }
    uint64_t h = un_mix64(r->fp ^ un_mix64(r->nf));
    int64_t s = (int64_t)(h & (uint64_t)(w->map_cap - 1));
    un_gen_rec *rv = w->recs.data;
    while (w->map[s]) {
        un_gen_rec *o = &rv[w->map[s] - 1];
        if (o->fp == r->fp && o->nf == r->nf) {
            w->n_same_nf++;
            if (cmp_graph(&r->g, &o->g) < 0)
                o->g = r->g;
            return;
        }
        s = (s + 1) & (w->map_cap - 1);
    }
    if (!vec_push(&w->recs, r)) {
        w->err = UN_ERR_NOMEM;
        return;
    }
    w->map[s] = w->recs.n;
}

static void record(wstate *w) {
    w->n_graphs++;
    w->n_by_size[w->n_ops]++;
    if ((w->n_graphs & 255) == 0) {
        atomic_store_explicit(&w->progress_graphs, w->n_graphs, memory_order_relaxed);
        atomic_store_explicit(&w->progress_recs, w->recs.n, memory_order_relaxed);
    }
    uint8_t outs[UN_GEN_MAX_GOUTS + 1];
    uint32_t mask_all;
    int n = graph_outputs(w, outs, &mask_all);
    bool connected = components(w) == 1;
    w->n_disconnected += !connected;
    bool prefix = connected && un_gen_menu_prefix_ok(w->e->m, mask_all);
    w->n_naming += connected && !prefix;
    if (prefix && n >= 1 && n <= UN_GEN_MAX_GOUTS && !w->no_recs) {
        un_gen_rec r;
        memset(&r, 0, sizeof r);
        r.fp = graph_fp(w->vh, outs, n);
        if (w->p->shard_n <= 1 || r.fp % (uint64_t)w->p->shard_n == (uint64_t)w->p->shard_i) {
            r.nf = normal_form(w, outs, n);
            r.g.n_ops = (uint8_t)w->n_ops;
            memcpy(r.g.ops, w->ops, sizeof(un_gen_op) * (size_t)w->n_ops);
            keep_rec(w, &r);
        }
    }
    /* the last operator's outputs are class members when the graph is exactly their cone; only
     * cones smaller than the size bound can sit inside a bigger graph */
    int last = w->n_ops - 1;
    if (w->n_ops <= w->class_max) {
        uint32_t all = (1u << w->n_ops) - 1;
        for (int t = w->n_t - 1; t >= 0 && w->prod[t] == last; t--) {
            if (w->anc[t] != all)
                break;
            un_gen_class c;
            memset(&c, 0, sizeof c);
            c.vh = w->vh[t];
            c.mask = w->mask[t];
            c.n_ops = (uint32_t)w->n_ops;
            c.key = w->key[t];
            c.g.n_ops = (uint8_t)w->n_ops;
            memcpy(c.g.ops, w->ops, sizeof(un_gen_op) * (size_t)w->n_ops);
            c.out = (uint8_t)w->prod_out[t];
            if (!vec_push(&w->classes, &c))
                w->err = UN_ERR_NOMEM;
        }
    }
}

/* Result of trying one operator on the current path. */
enum { TRY_OK, TRY_ORDER, TRY_ILL, TRY_DUP, TRY_ERR };

static void pop_op(wstate *w) {
    int d = --w->n_ops;
    const un_gen_op *op = &w->ops[d];
    while (w->n_t > w->e->m->n_inputs && w->prod[w->n_t - 1] == d) {
        w->n_t--;
        un_ptensor_deinit(&w->val[w->n_t]);
    }
    for (int j = 0; j < op->n_in; j++)
        w->uses[op->in[j]]--;
}

/* Shape inference of menu instance inst over shapes in[] (sh[j] = shape_key(&in[j])) through the
 * memo: returns the result (borrowed from the memo, or written to *scratch when it is full) and
 * the output shapes' keys in out_sh[] and value hash seeds in out_vh0[], or NULL when ill-formed.
 */
static const un_infer *infer_memo_get(const un_gen_enum *e, int inst, const un_shape *in,
                                      const uint64_t *sh, int n_in, un_infer *scratch,
                                      uint64_t *out_sh, uint64_t *out_vh0) {
    size_t bytes = sizeof(un_shape) * (size_t)n_in;
    uint64_t h = un_mix64(0x696e66ull + (uint64_t)inst);
    for (int j = 0; j < n_in; j++)
        h = un_mix64(h ^ sh[j]) + (uint64_t)j;
    size_t slot = (size_t)h & (MEMO_SLOTS - 1), free_slot = MEMO_SLOTS;
    for (int k = 0; k < MEMO_PROBE; k++, slot = (slot + 1) & (MEMO_SLOTS - 1)) {
        const infer_memo *m = atomic_load_explicit(&e->memo[slot], memory_order_acquire);
        if (!m) {
            free_slot = slot;
            break;
        }
        if (m->inst == inst && m->n_in == n_in && memcmp(m->in, in, bytes) == 0) {
            if (!m->ok)
                return NULL;
            memcpy(out_sh, m->ok->out_sh, sizeof(uint64_t) * (size_t)m->ok->inf.n_out);
            memcpy(out_vh0, m->ok->out_vh0, sizeof(uint64_t) * (size_t)m->ok->inf.n_out);
            return &m->ok->inf;
        }
    }
    const un_gen_inst *gi = &e->m->insts[inst];
    bool ok = un_spec_infer(NULL, e->spec, gi->op, gi->params, in, n_in, NULL, scratch) == UN_OK;
    if (ok)
        for (int o = 0; o < scratch->n_out; o++) {
            out_sh[o] = shape_key(&scratch->out[o]);
            out_vh0[o] = value_hash_seed(&scratch->out[o]);
        }
    if (free_slot == MEMO_SLOTS)
        return ok ? scratch : NULL;
    infer_memo *m = un_xmalloc(sizeof *m + bytes);
    m->inst = (uint16_t)inst;
    m->n_in = (uint8_t)n_in;
    m->ok = NULL;
    memcpy(m->in, in, bytes);
    if (ok) {
        m->ok = un_xmalloc(sizeof *m->ok);
        memcpy(m->ok->out_sh, out_sh, sizeof(uint64_t) * (size_t)scratch->n_out);
        memcpy(m->ok->out_vh0, out_vh0, sizeof(uint64_t) * (size_t)scratch->n_out);
        m->ok->inf = *scratch;
    }
    infer_memo *expected = NULL;
    if (!atomic_compare_exchange_strong_explicit(&e->memo[free_slot], &expected, m,
                                                 memory_order_acq_rel, memory_order_acquire)) {
        free(m->ok); /* another thread took the slot first: its entry serves the next ask */
        free(m);
    }
    return ok ? scratch : NULL;
}

/* Appends operator (inst, in[]) to the path: order check, inference, evaluation, duplicate check.
 * On TRY_OK the operator is pushed (pop with pop_op). */
static int push_op(wstate *w, int inst, const uint8_t *in, bool check_order) {
    const un_gen_menu *m = w->e->m;
    const un_gen_inst *gi = &m->insts[inst];
    int d = w->n_ops;
    if (d >= UN_GEN_MAX_OPS)
        return TRY_ILL;
    uint64_t key = un_mix64(0x6f70ull + (uint64_t)inst);
    int ready = 0;
    for (int j = 0; j < gi->n_in; j++) {
        key = un_mix64(key ^ w->key[in[j]]) + (uint64_t)j;
        if (w->prod[in[j]] + 1 > ready)
            ready = w->prod[in[j]] + 1;
    }
    if (check_order)
        for (int j = ready; j < d; j++)
            if (w->opkey[j] >= key)
                return TRY_ORDER;
    if (gi->min_rank && gi->n_in > 0 && w->val[in[0]].shape.rank < gi->min_rank)
        return TRY_ILL;
    un_shape shapes[UN_GEN_MAX_OP_IN];
    un_ptensor vals[UN_GEN_MAX_OP_IN];
    uint64_t sh[UN_GEN_MAX_OP_IN], out_sh[UN_MAX_OUTPUTS], out_vh0[UN_MAX_OUTPUTS];
    for (int j = 0; j < gi->n_in; j++) {
        shapes[j] = w->val[in[j]].shape;
        vals[j] = w->val[in[j]];
        sh[j] = w->sh[in[j]];
    }
    un_infer inf_scratch;
    const un_infer *infp =
        infer_memo_get(w->e, inst, shapes, sh, gi->n_in, &inf_scratch, out_sh, out_vh0);
    if (!infp)
        return TRY_ILL;
    if (w->n_t + infp->n_out > UN_GEN_MAX_T)
        return TRY_ILL;
    for (int o = 0; o < infp->n_out; o++)
        if (un_shape_piece_numel(&infp->out[o]) * un_shape_npieces(&infp->out[o]) > (1 << 16))
            return TRY_ILL; /* keep generation on small tensors */
    un_ptensor outv[UN_MAX_OUTPUTS];
    un_status st = un_eval_op(w->ctx, w->e->spec, gi->op, gi->params, infp, UN_DOM_FIELD, vals,
                              gi->n_in, outv);
    if (st != UN_OK) {
        w->err = st;
        return TRY_ERR;
    }
    uint64_t vh[UN_MAX_OUTPUTS];
    int res = TRY_OK;
    for (int o = 0; o < infp->n_out && res == TRY_OK; o++) {
        int64_t n = un_shape_numel(&infp->out[o]);
        /* one piece (no layout) holds the logical value as it is, in row-major order */
        un_val *dense = outv[o].data;
        if (un_shape_npieces(&infp->out[o]) > 1 &&
            un_ptensor_gather(NULL, &outv[o], UN_DOM_FIELD, dense = scratch(w, n)) != UN_OK) {
            res = TRY_ILL; /* copies that differ: not a well-defined value */
            break;
        }
        vh[o] = value_hash_from(out_vh0[o], dense, n);
        for (int t = 0; t < w->n_t && res == TRY_OK; t++)
            if (w->vh[t] == vh[o])
                res = TRY_DUP;
        for (int q = 0; q < o && res == TRY_OK; q++)
            if (vh[q] == vh[o])
                res = TRY_DUP;
    }
    if (res != TRY_OK) {
        for (int o = 0; o < infp->n_out; o++)
            un_ptensor_deinit(&outv[o]);
        return res;
    }
    un_gen_op *op = &w->ops[d];
    memset(op, 0, sizeof *op);
    op->inst = (uint16_t)inst;
    op->n_in = (uint8_t)gi->n_in;
    uint32_t mask = 0, anc = 1u << d;
    for (int j = 0; j < gi->n_in; j++) {
        op->in[j] = in[j];
        w->uses[in[j]]++;
        mask |= w->mask[in[j]];
        anc |= w->anc[in[j]];
    }
    w->opkey[d] = key;
    for (int o = 0; o < infp->n_out; o++) {
        int t = w->n_t++;
        w->val[t] = outv[o];
        w->vh[t] = vh[o];
        w->sh[t] = out_sh[o];
        w->key[t] = un_mix64(key + 0x6f7574ull * (uint64_t)(o + 1));
        w->mask[t] = mask;
        w->anc[t] = anc;
        w->prod[t] = (int16_t)d;
        w->prod_out[t] = (int8_t)o;
        w->uses[t] = 0;
    }
    w->n_ops++;
    return TRY_OK;
}

static void extend(wstate *w);

static void try_and_recurse(wstate *w, int inst, const uint8_t *in) {
    int r = push_op(w, inst, in, true);
    if (r == TRY_ILL)
        w->n_ill++;
    else if (r == TRY_DUP)
        w->n_dup++;
    if (r != TRY_OK)
        return;
    /* a graph whose components cannot all be joined by the operators still allowed is useless */
    int nc = components(w);
    if (nc - 1 > (w->p->max_ops - w->n_ops) * (w->max_in - 1)) {
        w->n_cut++;
        pop_op(w);
        return;
    }
    record(w);
    if (w->n_ops < w->p->max_ops && w->err == UN_OK &&
        !atomic_load_explicit(w->stop, memory_order_relaxed))
        extend(w);
    pop_op(w);
}

/* Every operator instance over every tuple of the current tensors. */
static void extend(wstate *w) {
    const un_gen_menu *m = w->e->m;
    int nt = w->n_t;
    for (int i = 0; i < m->n_insts && w->err == UN_OK; i++) {
        int k = m->insts[i].n_in;
        uint8_t in[UN_GEN_MAX_OP_IN] = {0};
        for (;;) {
            try_and_recurse(w, i, in);
            int j = k - 1;
            while (j >= 0 && ++in[j] == nt)
                in[j--] = 0;
            if (j < 0)
                break;
        }
    }
}

/* ---- the threads ---- */

typedef struct root {
    uint16_t inst;
    uint8_t in[UN_GEN_MAX_OP_IN];
} root;

typedef struct shared {
    const root *roots;
    int64_t n_roots;
    _Atomic int64_t next;
    _Atomic int64_t done;
    atomic_bool stop;
} shared;

typedef struct worker {
    wstate w;
    shared *sh;
    pthread_t tid;
} worker;

static void *worker_main(void *arg) {
    worker *wk = arg;
    for (;;) {
        if (atomic_load(&wk->sh->stop) || wk->w.err != UN_OK)
            break;
        int64_t i = atomic_fetch_add(&wk->sh->next, 1);
        if (i >= wk->sh->n_roots)
            break;
        try_and_recurse(&wk->w, wk->sh->roots[i].inst, wk->sh->roots[i].in);
        atomic_fetch_add(&wk->sh->done, 1);
    }
    atomic_store(&wk->w.progress_graphs, wk->w.n_graphs);
    free(wk->w.map); /* the dedupe map is not needed once the worker is done */
    wk->w.map = NULL;
    wk->w.map_cap = 0;
    return NULL;
}

static int cmp_rec(const void *a, const void *b) {
    const un_gen_rec *x = a, *y = b;
    if (x->fp != y->fp)
        return x->fp < y->fp ? -1 : 1;
    if (x->nf != y->nf)
        return x->nf < y->nf ? -1 : 1;
    return cmp_graph(&x->g, &y->g);
}

static int cmp_class(const void *a, const void *b) {
    const un_gen_class *x = a, *y = b;
    if (x->vh != y->vh)
        return x->vh < y->vh ? -1 : 1;
    if (x->mask != y->mask)
        return x->mask < y->mask ? -1 : 1;
    if (x->n_ops != y->n_ops)
        return x->n_ops < y->n_ops ? -1 : 1;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return memcmp(&x->g, &y->g, sizeof x->g);
}

static void fmt_eta(double s, char *buf, size_t n) {
    if (s < 0 || s > 1e7)
        snprintf(buf, n, "?");
    else if (s < 120)
        snprintf(buf, n, "%.0fs", s);
    else
        snprintf(buf, n, "%.0fm", s / 60);
}

static un_status run_phase(un_ctx *ctx, un_gen_enum *e, const un_gen_params *p, int class_max,
                           bool no_recs, un_gen_enum_result *out);

un_status un_gen_enum_run(un_ctx *ctx, un_gen_enum *e, const un_gen_params *p,
                          un_gen_enum_result *out) {
    memset(out, 0, sizeof *out);
    if (p->max_ops < 1 || p->max_ops > UN_GEN_MAX_OPS)
        return un_ctx_error(ctx, UN_ERR_INVALID, "--max-ops must lie in [1, %d], not %d",
                            UN_GEN_MAX_OPS, p->max_ops);
    if (p->threads < 1 || p->threads > 256)
        return un_ctx_error(ctx, UN_ERR_INVALID, "--threads must lie in [1, 256], not %d",
                            p->threads);
    if (p->shard_n < 1 || p->shard_i < 0 || p->shard_i >= p->shard_n)
        return un_ctx_error(ctx, UN_ERR_INVALID, "--shard I/N needs 0 <= I < N (got %d/%d)",
                            p->shard_i, p->shard_n);
    /* phase 1: the value classes of every cone below the size bound (cheap: one size less);
     * phase 2: every graph, recorded once per (value, normal form) */
    double t0 = un_now_s();
    un_gen_enum_result a;
    memset(&a, 0, sizeof a);
    un_status st = UN_OK;
    if (p->max_ops >= 2) {
        un_gen_params pa = *p;
        pa.max_ops = p->max_ops - 1;
        if ((st = run_phase(ctx, e, &pa, pa.max_ops, true, &a)) != UN_OK)
            return st;
    }
    e->classes = a.classes;
    e->n_classes = a.n_classes;
    st = run_phase(ctx, e, p, 0, false, out);
    e->classes = NULL;
    e->n_classes = 0;
    if (st != UN_OK) {
        un_gen_enum_result_deinit(&a);
        return st;
    }
    free(out->classes);
    free(a.recs); /* phase 1 records nothing */
    out->classes = a.classes;
    out->n_classes = a.n_classes;
    out->stopped |= a.stopped;
    /* threads may each hold a record of one (fp, nf): keep the smallest */
    int64_t k = 0;
    for (int64_t i = 0; i < out->n_recs; i++) {
        if (k > 0 && out->recs[k - 1].fp == out->recs[i].fp &&
            out->recs[k - 1].nf == out->recs[i].nf) {
            out->n_same_nf++;
            continue;
        }
        out->recs[k++] = out->recs[i];
    }
    out->n_recs = k;
    out->seconds = un_now_s() - t0;
    return UN_OK;
}

static un_status run_phase(un_ctx *ctx, un_gen_enum *e, const un_gen_params *p, int class_max,
                           bool no_recs, un_gen_enum_result *out) {
    memset(out, 0, sizeof *out);
    double t0 = un_now_s();
    const un_gen_menu *m = e->m;
    /* the top-level operators: every well-formed single operator over the menu inputs */
    vec roots = {.elem = sizeof(root)};
    {
        wstate w;
        atomic_bool no_stop = false;
        ws_init(&w, ctx, e, p);
        w.stop = &no_stop;
        for (int i = 0; i < m->n_insts; i++) {
            int k = m->insts[i].n_in;
            uint8_t in[UN_GEN_MAX_OP_IN] = {0};
            for (;;) {
                if (push_op(&w, i, in, true) == TRY_OK) {
                    pop_op(&w);
                    root r = {.inst = (uint16_t)i};
                    memcpy(r.in, in, sizeof r.in);
                    vec_push(&roots, &r);
                }
                int j = k - 1;
                while (j >= 0 && ++in[j] == m->n_inputs)
                    in[j--] = 0;
                if (j < 0)
                    break;
            }
        }
        un_status st = w.err;
        ws_deinit(&w);
        if (st != UN_OK) {
            free(roots.data);
            return un_ctx_error(ctx, st, "enumeration: %s", un_status_str(st));
        }
    }
    shared sh = {.roots = roots.data, .n_roots = roots.n};
    atomic_init(&sh.next, 0);
    atomic_init(&sh.done, 0);
    atomic_init(&sh.stop, false);
    int nt = p->threads;
    worker *wk = un_xcalloc((size_t)nt, sizeof *wk);
    un_ctx **ctxs = un_xcalloc((size_t)nt, sizeof *ctxs);
    int started = 0;
    for (int i = 0; i < nt; i++) {
        ctxs[i] = un_ctx_new_child(ctx);
        ws_init(&wk[i].w, ctxs[i], e, p);
        wk[i].w.class_max = class_max;
        wk[i].w.no_recs = no_recs;
        wk[i].w.stop = &sh.stop;
        wk[i].sh = &sh;
    }
    for (int i = 0; i < nt; i++) {
        if (pthread_create(&wk[i].tid, NULL, worker_main, &wk[i]) != 0)
            break;
        started++;
    }
    if (started == 0)
        worker_main(&wk[0]); /* no threads available: run here */
    bool tty = un_ctx_has_progress(ctx);
    double last = t0;
    while (started > 0 && atomic_load(&sh.done) < sh.n_roots) {
        bool all_err = true;
        for (int i = 0; i < started; i++)
            all_err &= wk[i].w.err != UN_OK;
        if (all_err)
            break;
        usleep(50000);
        double t = un_now_s();
        if (p->time_limit > 0 && t - t0 > p->time_limit) {
            atomic_store(&sh.stop, true);
            break;
        }
        if (tty && t - last >= 0.5) {
            last = t;
            int64_t g = 0, nrec = 0, done = atomic_load(&sh.done);
            for (int i = 0; i < started; i++) {
                g += atomic_load_explicit(&wk[i].w.progress_graphs, memory_order_relaxed);
                nrec += atomic_load_explicit(&wk[i].w.progress_recs, memory_order_relaxed);
            }
            char eta[32];
            double frac = (double)done / (double)(sh.n_roots ? sh.n_roots : 1);
            fmt_eta(frac > 0.02 ? (t - t0) * (1 - frac) / frac : -1, eta, sizeof eta);
            un_ctx_progress(ctx,
                            "unity-gen: %s: %lld graphs, %.0f graphs/s, %lld candidates, "
                            "%lld/%lld work items, ETA %s",
                            no_recs ? "value classes" : "enumerating", (long long)g,
                            (double)g / (t - t0), (long long)nrec, (long long)done,
                            (long long)sh.n_roots, eta);
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(wk[i].tid, NULL);
    if (tty)
        un_ctx_progress_done(ctx);
    un_status st = UN_OK;
    vec recs = {.elem = sizeof(un_gen_rec)}, classes = {.elem = sizeof(un_gen_class)};
    for (int i = 0; i < nt; i++) {
        wstate *w = &wk[i].w;
        if (w->err != UN_OK && st == UN_OK)
            st = un_ctx_error(ctx, w->err, "enumeration: %s%s%s", un_status_str(w->err),
                              *un_ctx_errmsg(ctxs[i]) ? ": " : "", un_ctx_errmsg(ctxs[i]));
        out->n_graphs += w->n_graphs;
        out->n_dup += w->n_dup;
        out->n_ill += w->n_ill;
        out->n_disconnected += w->n_disconnected;
        out->n_cut += w->n_cut;
        out->n_naming += w->n_naming;
        out->n_same_nf += w->n_same_nf;
        for (int s = 0; s <= UN_GEN_MAX_OPS; s++)
            out->n_by_size[s] += w->n_by_size[s];
        recs.n += w->recs.n;
        classes.n += w->classes.n;
    }
    /* merge: grow the largest thread's arrays and move the others in, one at a time, so the
     * peak is the total plus one thread's share rather than twice the total */
    int big = 0;
    for (int i = 1; i < nt; i++)
        if (wk[i].w.recs.n > wk[big].w.recs.n)
            big = i;
    if (st == UN_OK) {
        wstate *w = &wk[big].w;
        recs.data = realloc(w->recs.data, (size_t)(recs.n ? recs.n : 1) * sizeof(un_gen_rec));
        classes.data =
            realloc(w->classes.data, (size_t)(classes.n ? classes.n : 1) * sizeof(un_gen_class));
        if (recs.data)
            w->recs.data = NULL;
        if (classes.data)
            w->classes.data = NULL;
        if (!recs.data || !classes.data)
            st = un_ctx_error(ctx, UN_ERR_NOMEM, "enumeration: cannot hold %lld graph records",
                              (long long)recs.n);
    }
    int64_t ro = st == UN_OK ? wk[big].w.recs.n : 0, co = st == UN_OK ? wk[big].w.classes.n : 0;
    for (int i = 0; i < nt; i++) {
        wstate *w = &wk[i].w;
        if (st == UN_OK && i != big) {
            if (w->recs.n)
                memcpy((un_gen_rec *)recs.data + ro, w->recs.data,
                       sizeof(un_gen_rec) * (size_t)w->recs.n);
            if (w->classes.n)
                memcpy((un_gen_class *)classes.data + co, w->classes.data,
                       sizeof(un_gen_class) * (size_t)w->classes.n);
            ro += w->recs.n;
            co += w->classes.n;
        }
        ws_deinit(w);
        un_ctx_free(ctxs[i]);
    }
    out->n_roots = sh.n_roots;
    out->n_roots_done = atomic_load(&sh.done);
    out->stopped = out->n_roots_done < out->n_roots;
    free(wk);
    free(ctxs);
    free(roots.data);
    if (st != UN_OK) {
        free(recs.data);
        free(classes.data);
        memset(out, 0, sizeof *out);
        return st;
    }
    qsort(recs.data, (size_t)recs.n, sizeof(un_gen_rec), cmp_rec);
    qsort(classes.data, (size_t)classes.n, sizeof(un_gen_class), cmp_class);
    /* one class per (vh, mask): the first after sorting is the smallest representative */
    un_gen_class *c = classes.data;
    int64_t k = 0;
    for (int64_t i = 0; i < classes.n; i++)
        if (k == 0 || c[i].vh != c[k - 1].vh || c[i].mask != c[k - 1].mask)
            c[k++] = c[i];
    out->recs = recs.data;
    out->n_recs = recs.n;
    out->classes = classes.data;
    out->n_classes = k;
    out->seconds = un_now_s() - t0;
    return UN_OK;
}

/* ---- one graph at a time ---- */

void un_gen_geval_deinit(un_gen_geval *ev) {
    if (!ev)
        return;
    for (int i = 0; i < UN_GEN_MAX_GOUTS; i++)
        free(ev->dense[i]);
    memset(ev, 0, sizeof *ev);
}

un_status un_gen_enum_eval(un_ctx *ctx, const un_gen_enum *e, const un_gen_graph *g,
                           un_gen_geval *out) {
    memset(out, 0, sizeof *out);
    un_gen_params p = un_gen_params_default();
    p.max_ops = UN_GEN_MAX_OPS;
    atomic_bool no_stop = false;
    wstate w;
    ws_init(&w, ctx, e, &p);
    w.stop = &no_stop;
    un_status st = UN_OK;
    for (int j = 0; j < g->n_ops && st == UN_OK; j++) {
        int r = push_op(&w, g->ops[j].inst, g->ops[j].in, false);
        if (r != TRY_OK)
            st = r == TRY_ERR ? w.err
                              : un_ctx_error(ctx, UN_ERR_INVALID, "graph operator %d: %s", j,
                                             r == TRY_DUP ? "duplicate tensor" : "ill-formed");
    }
    if (st == UN_OK) {
        out->n_t = w.n_t;
        for (int t = 0; t < w.n_t; t++) {
            out->vh[t] = w.vh[t];
            out->key[t] = w.key[t];
            out->mask[t] = w.mask[t];
            out->anc[t] = w.anc[t];
            out->prod[t] = w.prod[t];
            out->prod_out[t] = w.prod_out[t];
            out->uses[t] = w.uses[t];
            out->shape[t] = w.val[t].shape;
        }
        int n = graph_outputs(&w, out->out, &out->mask_all);
        if (n < 1 || n > UN_GEN_MAX_GOUTS)
            st = un_ctx_error(ctx, UN_ERR_INVALID, "graph has %d outputs", n);
        else {
            out->n_out = n;
            out->fp = graph_fp(w.vh, out->out, n);
            for (int i = 0; i < n; i++) {
                int t = out->out[i];
                int64_t cnt = un_shape_numel(&w.val[t].shape);
                out->numel[i] = cnt;
                out->dense[i] = un_xmalloc(sizeof(un_val) * (size_t)(cnt ? cnt : 1));
                if ((st = un_ptensor_gather(ctx, &w.val[t], UN_DOM_FIELD, out->dense[i])) != UN_OK)
                    break;
            }
        }
    }
    while (w.n_ops > 0)
        pop_op(&w);
    ws_deinit(&w);
    if (st != UN_OK)
        un_gen_geval_deinit(out);
    return st;
}

un_status un_gen_enum_to_graph(un_ctx *ctx, const un_gen_enum *e, const un_gen_graph *g,
                               const un_gen_geval *ev, const uint8_t *abstract, int n_abs,
                               const uint8_t *outs, int n_out, un_graph **out, un_ref *refs) {
    *out = NULL;
    const un_gen_menu *m = e->m;
    bool is_abs[UN_GEN_MAX_T] = {false}, need_t[UN_GEN_MAX_T] = {false},
         need_op[UN_GEN_MAX_OPS] = {false};
    for (int i = 0; i < n_abs; i++)
        is_abs[abstract[i]] = true;
    /* walk back from the outputs, stopping at abstracted tensors */
    for (int i = 0; i < n_out; i++)
        need_t[outs[i]] = true;
    for (int t = ev->n_t - 1; t >= 0; t--) {
        if (!need_t[t] || is_abs[t] || ev->prod[t] < 0)
            continue;
        const un_gen_op *op = &g->ops[ev->prod[t]];
        need_op[ev->prod[t]] = true;
        for (int j = 0; j < op->n_in; j++)
            need_t[op->in[j]] = true;
    }
    un_graph *gr = un_graph_new(e->spec);
    un_ref tref[UN_GEN_MAX_T];
    un_status st = UN_OK;
    for (int i = 0; i < m->n_inputs && st == UN_OK; i++) {
        if (!need_t[i])
            continue;
        st = un_graph_add_input_shape(ctx, gr, m->inputs[i].name, m->inputs[i].op,
                                      &m->inputs[i].shape, &tref[i].node);
        tref[i].out = 0;
    }
    for (int i = 0; i < n_abs && st == UN_OK; i++) {
        char name[16];
        snprintf(name, sizeof name, "_a%d", i);
        un_shape s = ev->shape[abstract[i]];
        st = un_graph_add_input_shape(ctx, gr, name, UN_OP_INPUT, &s, &tref[abstract[i]].node);
        tref[abstract[i]].out = 0;
    }
    for (int j = 0; j < g->n_ops && st == UN_OK; j++) {
        if (!need_op[j])
            continue;
        const un_gen_op *op = &g->ops[j];
        const un_gen_inst *gi = &m->insts[op->inst];
        un_ref in[UN_GEN_MAX_OP_IN];
        for (int k = 0; k < op->n_in; k++)
            in[k] = tref[op->in[k]];
        int32_t id;
        /* the inference through the memo (a pure function of these shapes) */
        un_shape shapes[UN_GEN_MAX_OP_IN];
        uint64_t sh[UN_GEN_MAX_OP_IN], out_sh[UN_MAX_OUTPUTS], out_vh0[UN_MAX_OUTPUTS];
        for (int k = 0; k < op->n_in; k++) {
            shapes[k] = ev->shape[op->in[k]];
            sh[k] = shape_key(&shapes[k]);
        }
        un_infer scratch;
        const un_infer *inf =
            infer_memo_get(e, op->inst, shapes, sh, op->n_in, &scratch, out_sh, out_vh0);
        st = inf ? un_graph_add_inferred(ctx, gr, gi->op, gi->params, in, op->n_in, NULL, inf, &id)
                 : un_graph_add(ctx, gr, gi->op, gi->params, in, op->n_in, NULL, &id);
        for (int t = 0; t < ev->n_t && st == UN_OK; t++)
            if (ev->prod[t] == j && !is_abs[t])
                tref[t] = (un_ref){id, ev->prod_out[t]};
    }
    for (int i = 0; i < n_out && st == UN_OK; i++)
        refs[i] = tref[outs[i]];
    if (st == UN_OK)
        st = un_graph_set_outputs(ctx, gr, refs, n_out);
    if (st != UN_OK) {
        un_graph_free(gr);
        return st;
    }
    *out = gr;
    return UN_OK;
}

static void tensor_str(const un_gen_enum *e, const un_gen_graph *g, const un_gen_geval *ev, int t,
                       un_buf *b) {
    const un_gen_menu *m = e->m;
    if (t < m->n_inputs) {
        un_buf_printf(b, "%s", m->inputs[t].name);
        return;
    }
    const un_gen_op *op = &g->ops[ev->prod[t]];
    un_buf_printf(b, "%s(", m->insts[op->inst].label);
    for (int j = 0; j < op->n_in; j++) {
        if (j)
            un_buf_printf(b, ", ");
        tensor_str(e, g, ev, op->in[j], b);
    }
    un_buf_printf(b, ")");
    if (ev->prod_out[t] || (t + 1 < ev->n_t && ev->prod[t + 1] == ev->prod[t]))
        un_buf_printf(b, ".%d", ev->prod_out[t]);
}

void un_gen_graph_str(const un_gen_enum *e, const un_gen_graph *g, un_buf *b) {
    /* the producer table without evaluating: recompute tensor ids from the menu's output counts */
    un_gen_geval ev;
    memset(&ev, 0, sizeof ev);
    int nt = e->m->n_inputs;
    for (int t = 0; t < nt; t++)
        ev.prod[t] = -1;
    int16_t uses[UN_GEN_MAX_T] = {0};
    for (int j = 0; j < g->n_ops; j++) {
        const un_gen_inst *gi = &e->m->insts[g->ops[j].inst];
        un_shape shapes[UN_GEN_MAX_OP_IN];
        for (int k = 0; k < g->ops[j].n_in; k++) {
            shapes[k] = g->ops[j].in[k] < e->m->n_inputs ? e->m->inputs[g->ops[j].in[k]].shape
                                                         : ev.shape[g->ops[j].in[k]];
            uses[g->ops[j].in[k]]++;
        }
        un_infer inf;
        memset(&inf, 0, sizeof inf);
        int n_out = 1;
        if (un_spec_infer(NULL, e->spec, gi->op, gi->params, shapes, g->ops[j].n_in, NULL, &inf) ==
            UN_OK)
            n_out = inf.n_out;
        for (int o = 0; o < n_out && nt < UN_GEN_MAX_T; o++, nt++) {
            ev.prod[nt] = (int16_t)j;
            ev.prod_out[nt] = (int8_t)o;
            ev.shape[nt] = o < inf.n_out ? inf.out[o] : ev.shape[nt];
        }
    }
    ev.n_t = nt;
    bool first = true;
    for (int t = e->m->n_inputs; t < nt; t++) {
        if (uses[t])
            continue;
        if (!first)
            un_buf_printf(b, "; ");
        first = false;
        tensor_str(e, g, &ev, t, b);
    }
}
