/* checkpoint.c - checkpoints of training state: the logical weights by name and shape plus the
 * optimizer state, one file, written through a temporary file and checksummed. */
#include "runtime/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void setv(void *a, un_prec prec, int64_t i, double x) {
    if (prec == UN_PREC_F32)
        ((float *)a)[i] = (float)x;
    else
        ((double *)a)[i] = x;
}

/* Element i of a file's array of es-byte floats. */
static double rd_val(const unsigned char *p, uint32_t es, int64_t i) {
    if (es == 4) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    double v;
    memcpy(&v, p + 8 * i, 8);
    return v;
}

/* ---- checkpoints ----
 * Binary, little-endian host order: "UNCKPT03", u32 element bytes, u32 weights, then per weight
 * u32 name length, name, u32 rank, i64 dims[rank], values; then u32 optimizer kind (or ~0 for
 * none), i64 steps, i64 n, m[n], v[n] (Adam) in the weights' element type; last a u64 checksum
 * (FNV-1a, 64 bit) of every byte before it, so a damaged file is refused, never loaded.
 * Everything is logical (whole weights in node order), so a checkpoint loads into any plan and
 * device count. */

static const char ckpt_magic[8] = {'U', 'N', 'C', 'K', 'P', 'T', '0', '3'};

#define CKPT_SUM_INIT 0xcbf29ce484222325ull

static uint64_t ckpt_sum(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* fwrite that also adds what it writes to the checksum *h. */
static size_t ckpt_write(const void *p, size_t size, size_t n, FILE *f, uint64_t *h) {
    size_t done = fwrite(p, size, n, f);
    *h = ckpt_sum(*h, p, size * done);
    return done;
}

un_status un_checkpoint_save(un_ctx *ctx, const char *path, const un_graph *g, un_prec prec,
                             const void *w, const un_optim *o) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write", path);
    uint32_t es = prec == UN_PREC_F32 ? 4 : 8, nw = 0;
    uint64_t h = CKPT_SUM_INIT;
    for (int32_t id = 0; id < un_graph_node_count(g); id++)
        nw += un_graph_node(g, id)->op == UN_OP_WEIGHT;
    bool ok = ckpt_write(ckpt_magic, 1, 8, f, &h) == 8 && ckpt_write(&es, 4, 1, f, &h) == 1 &&
              ckpt_write(&nw, 4, 1, f, &h) == 1;
    int64_t off = 0;
    for (int32_t id = 0; ok && id < un_graph_node_count(g); id++) {
        const un_node *nd = un_graph_node(g, id);
        if (nd->op != UN_OP_WEIGHT)
            continue;
        const char *name = nd->name ? nd->name : "";
        uint32_t len = (uint32_t)strlen(name), rank = (uint32_t)nd->inf.out[0].rank;
        int64_t numel = un_shape_numel(&nd->inf.out[0]);
        ok = ckpt_write(&len, 4, 1, f, &h) == 1 && ckpt_write(name, 1, len, f, &h) == len &&
             ckpt_write(&rank, 4, 1, f, &h) == 1 &&
             ckpt_write(nd->inf.out[0].dim, 8, rank, f, &h) == rank &&
             ckpt_write((const char *)w + (size_t)off * es, es, (size_t)numel, f, &h) ==
                 (size_t)numel;
        off += numel;
    }
    uint32_t kind = o ? (uint32_t)un_optim_kind(o) : ~0u;
    ok = ok && ckpt_write(&kind, 4, 1, f, &h) == 1;
    if (ok && o) {
        int64_t steps = un_optim_steps(o), n = un_optim_count(o);
        const void *m = un_optim_state(o, 0), *v = un_optim_state(o, 1);
        ok = (un_optim_prec(o) == UN_PREC_F32 ? 4u : 8u) == es &&
             ckpt_write(&steps, 8, 1, f, &h) == 1 && ckpt_write(&n, 8, 1, f, &h) == 1 &&
             ckpt_write(m, es, (size_t)n, f, &h) == (size_t)n &&
             (!v || ckpt_write(v, es, (size_t)n, f, &h) == (size_t)n);
    }
    ok = ok && fwrite(&h, 8, 1, f) == 1;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write the checkpoint", path);
    }
    return UN_OK;
}

un_status un_checkpoint_load(un_ctx *ctx, const char *path, const un_graph *g, un_prec prec,
                             void *w, un_optim *o) {
    char *text = NULL;
    size_t len = 0;
    un_status st = un_read_file(ctx, path, &text, &len);
    if (st != UN_OK)
        return st;
    const unsigned char *p = (const unsigned char *)text, *end = p + len;
    const unsigned char **at = NULL;
    uint64_t sum = 0; /* the trailing checksum, checked once the layout has been read */
    if (len >= 16 + 8) {
        end -= 8;
        memcpy(&sum, end, 8);
    }
#define NEED(n)                                                                                    \
    do {                                                                                           \
        if ((size_t)(end - p) < (size_t)(n)) {                                                     \
            st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: truncated checkpoint", path);                \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)
    uint32_t es, nw;
    NEED(16);
    if (memcmp(p, ckpt_magic, 8) != 0) {
        st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: not a unity checkpoint (bad magic)", path);
        goto done;
    }
    memcpy(&es, p + 8, 4);
    memcpy(&nw, p + 12, 4);
    p += 16;
    if (es != 4 && es != 8) {
        st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: element size %u", path, es);
        goto done;
    }
    /* Index the file's weights, then copy each weight of g by name. */
    at = un_xcalloc(nw ? nw : 1, sizeof *at);
    for (uint32_t i = 0; i < nw; i++) {
        at[i] = p;
        uint32_t nl, rank;
        NEED(4);
        memcpy(&nl, p, 4);
        NEED(4 + (size_t)nl + 4);
        memcpy(&rank, p + 4 + nl, 4);
        if (rank > UN_MAX_DIMS) {
            st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: weight %u has rank %u", path, i, rank);
            goto done;
        }
        p += 8 + nl;
        NEED(8 * (size_t)rank);
        int64_t numel = 1;
        for (uint32_t d = 0; d < rank; d++) {
            int64_t v;
            memcpy(&v, p + 8 * d, 8);
            if (v < 1 || v > UN_MAX_NUMEL || numel > UN_MAX_NUMEL / v) {
                st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: weight %u has a bad size", path, i);
                goto done;
            }
            numel *= v;
        }
        p += 8 * rank;
        if ((size_t)(end - p) / es < (size_t)numel) {
            st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: truncated checkpoint", path);
            goto done;
        }
        p += (size_t)numel * es;
    }
    if (ckpt_sum(CKPT_SUM_INIT, text, (size_t)(end - (const unsigned char *)text)) != sum) {
        st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: damaged checkpoint (its checksum does not match)",
                          path);
        goto done;
    }
    int64_t off = 0;
    for (int32_t id = 0; id < un_graph_node_count(g) && st == UN_OK; id++) {
        const un_node *nd = un_graph_node(g, id);
        if (nd->op != UN_OP_WEIGHT)
            continue;
        const char *name = nd->name ? nd->name : "";
        const un_shape *s = &nd->inf.out[0];
        int64_t numel = un_shape_numel(s);
        uint32_t i = 0;
        for (; i < nw; i++) {
            uint32_t nl;
            memcpy(&nl, at[i], 4);
            if (nl == strlen(name) && memcmp(at[i] + 4, name, nl) == 0)
                break;
        }
        if (i == nw) {
            st = un_ctx_error(ctx, UN_ERR_MISMATCH, "%s: no weight '%s' in the checkpoint", path,
                              name);
            break;
        }
        uint32_t nl, rank;
        memcpy(&nl, at[i], 4);
        memcpy(&rank, at[i] + 4 + nl, 4);
        const unsigned char *q = at[i] + 8 + nl;
        bool same = (int)rank == s->rank;
        for (uint32_t d = 0; same && d < rank; d++) {
            int64_t v;
            memcpy(&v, q + 8 * d, 8);
            same = v == s->dim[d];
        }
        if (!same) {
            st = un_ctx_error(ctx, UN_ERR_MISMATCH,
                              "%s: weight '%s' has another shape in the checkpoint", path, name);
            break;
        }
        q += 8 * rank;
        for (int64_t x = 0; x < numel; x++)
            setv(w, prec, off + x, rd_val(q, es, x));
        off += numel;
    }
    if (st != UN_OK)
        goto done;
    uint32_t kind;
    NEED(4);
    memcpy(&kind, p, 4);
    p += 4;
    if (kind != ~0u && o) {
        int64_t t, n;
        NEED(16);
        memcpy(&t, p, 8);
        memcpy(&n, p + 8, 8);
        p += 16;
        if (kind != (uint32_t)un_optim_kind(o) || n != un_optim_count(o)) {
            st = un_ctx_error(ctx, UN_ERR_MISMATCH,
                              "%s: optimizer state is for %s over %lld parameters, not %s over "
                              "%lld",
                              path, un_optim_algo_name((un_optim_algo)kind), (long long)n,
                              un_optim_algo_name(un_optim_kind(o)), (long long)un_optim_count(o));
            goto done;
        }
        size_t arrays = un_optim_state(o, 1) ? 2 : 1;
        NEED(es * (size_t)n * arrays);
        for (size_t a = 0; a < arrays; a++)
            for (int64_t x = 0; x < n; x++)
                setv(un_optim_state(o, (int)a), un_optim_prec(o), x,
                     rd_val(p, es, (int64_t)((size_t)n * a) + x));
        un_optim_set_steps(o, t);
    }
#undef NEED
done:
    free(at);
    free(text);
    return st;
}

/* ---- per-rank checkpoints (one file per MPI process) ----
 * "PATH.rankR", binary like the above: "UNCKPR01", u32 element bytes, u32 rank, u32 ranks, u32
 * optimizer kind (~0 none), i64 steps, u32 blocks; per block (un_exec_blocks): u32 name length,
 * name, u32 rank, i64 dims[rank] (the logical shape), i64 off[rank], i64 len[rank], i64 lo, i64
 * hi; then of the block's elements lo..hi (row-major: the rank's chunk of it) the values and the
 * optimizer state (m, then v for Adam); last the u64 checksum. The chunks of a block's copies
 * partition it, so every rank writes an equal share and the files together hold each element
 * once. */

static const char rank_magic[8] = {'U', 'N', 'C', 'K', 'P', 'R', '0', '1'};

static void rank_path(char *buf, size_t n, const char *path, int r) {
    snprintf(buf, n, "%s.rank%d", path, r);
}

bool un_checkpoint_is_ranks(const char *path) {
    char p0[4096];
    rank_path(p0, sizeof p0, path, 0);
    FILE *f = fopen(path, "rb");
    if (f) {
        fclose(f);
        return false;
    }
    f = fopen(p0, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

un_status un_checkpoint_save_rank(un_ctx *ctx, const char *path, const un_graph *g, un_exec *ex,
                                  un_backend *be, const un_optim *o, int rank, int ranks) {
    char file[4096], tmp[4200];
    if (snprintf(file, sizeof file, "%s.rank%d", path, rank) >= (int)sizeof file)
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: path too long", path);
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    uint32_t es = un_backend_prec(be) == UN_PREC_F32 ? 4 : 8;
    int nb = 0;
    un_exec_block *blk = un_exec_blocks(ex, &nb);
    int64_t np = un_exec_param_count(ex), ns = o ? un_optim_count(o) : 0;
    char *w = un_xmalloc((size_t)(np + 1) * es), *st[2] = {NULL, NULL};
    un_status s = un_backend_read(ctx, be, w, un_exec_params(ex), (size_t)np * es);
    for (int i = 0; o && i < 2 && s == UN_OK; i++)
        if (un_optim_state(o, i)) {
            st[i] = un_xmalloc((size_t)(ns + 1) * es);
            s = un_backend_read(ctx, be, st[i], un_optim_state(o, i), (size_t)ns * es);
        }
    FILE *f = s == UN_OK ? fopen(tmp, "wb") : NULL;
    if (s == UN_OK && !f)
        s = un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write", file);
    if (f) {
        uint64_t h = CKPT_SUM_INIT;
        uint32_t hdr[3] = {es, (uint32_t)rank, (uint32_t)ranks};
        uint32_t kind = o ? (uint32_t)un_optim_kind(o) : ~0u, n32 = (uint32_t)nb;
        int64_t steps = o ? un_optim_steps(o) : 0;
        bool ok = ckpt_write(rank_magic, 1, 8, f, &h) == 8 && ckpt_write(hdr, 4, 3, f, &h) == 3 &&
                  ckpt_write(&kind, 4, 1, f, &h) == 1 && ckpt_write(&steps, 8, 1, f, &h) == 1 &&
                  ckpt_write(&n32, 4, 1, f, &h) == 1;
        for (int b = 0; ok && b < nb; b++) {
            const un_node *nd = un_graph_node(g, blk[b].node);
            const char *name = nd->name ? nd->name : "";
            const un_shape *sh = &nd->inf.out[0];
            uint32_t len = (uint32_t)strlen(name), rk = (uint32_t)sh->rank;
            int64_t lohi[2] = {blk[b].lo, blk[b].hi};
            size_t nst = (size_t)(blk[b].hi - blk[b].lo);
            ok = ckpt_write(&len, 4, 1, f, &h) == 1 && ckpt_write(name, 1, len, f, &h) == len &&
                 ckpt_write(&rk, 4, 1, f, &h) == 1 && ckpt_write(sh->dim, 8, rk, f, &h) == rk &&
                 ckpt_write(blk[b].off, 8, rk, f, &h) == rk &&
                 ckpt_write(blk[b].len, 8, rk, f, &h) == rk && ckpt_write(lohi, 8, 2, f, &h) == 2 &&
                 ckpt_write(w + (size_t)(blk[b].at + blk[b].lo) * es, es, nst, f, &h) == nst;
            for (int i = 0; ok && i < 2; i++)
                if (st[i])
                    ok = ckpt_write(st[i] + (size_t)blk[b].shard_at * es, es, nst, f, &h) == nst;
        }
        ok = ok && fwrite(&h, 8, 1, f) == 1;
        ok = fclose(f) == 0 && ok;
        if (!ok || rename(tmp, file) != 0) {
            remove(tmp);
            s = un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write the checkpoint", file);
        }
    }
    free(blk);
    free(w);
    free(st[0]);
    free(st[1]);
    return s;
}

/* A bounds-checked reader over one file's bytes. */
typedef struct rd {
    const unsigned char *p, *end;
    bool ok;
} rd;

static const void *rd_take(rd *r, size_t n) {
    if (!r->ok || (size_t)(r->end - r->p) < n) {
        r->ok = false;
        return NULL;
    }
    const void *at = r->p;
    r->p += n;
    return at;
}

static uint32_t rd_u32(rd *r) {
    uint32_t v = 0;
    const void *p = rd_take(r, 4);
    if (p)
        memcpy(&v, p, 4);
    return v;
}

static int64_t rd_i64(rd *r) {
    int64_t v = 0;
    const void *p = rd_take(r, 8);
    if (p)
        memcpy(&v, p, 8);
    return v;
}

/* Element x (row-major) of a block [off, off + len) of a tensor of dims, in the tensor. */
static int64_t block_elem(int rank, const int64_t *dims, const int64_t *off, const int64_t *len,
                          int64_t x) {
    int64_t idx = 0, c[UN_MAX_DIMS];
    for (int d = rank - 1; d >= 0; d--) {
        c[d] = off[d] + x % len[d];
        x /= len[d];
    }
    for (int d = 0; d < rank; d++)
        idx = idx * dims[d] + c[d];
    return idx;
}

/* One rank's file into the logical arrays; cover[id] counts the elements of weight node id it
 * gave (values and optimizer state alike). */
static un_status load_rank_file(un_ctx *ctx, const char *file, int r, uint32_t *hdr, int64_t *steps,
                                const un_graph *g, const int64_t *loff, un_prec prec, void *w,
                                un_optim *o, int64_t *cover) {
    char *text = NULL;
    size_t len = 0;
    un_status st = un_read_file(ctx, file, &text, &len);
    if (st != UN_OK)
        return st;
    uint64_t sum = 0;
    rd in = {(const unsigned char *)text, (const unsigned char *)text + len, len >= 8 + 28 + 8};
    if (in.ok) {
        in.end -= 8;
        memcpy(&sum, in.end, 8);
    }
    const void *magic = rd_take(&in, 8);
    if (!magic || memcmp(magic, rank_magic, 8) != 0) {
        st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: not a unity rank checkpoint (bad magic)", file);
        goto done;
    }
    if (ckpt_sum(CKPT_SUM_INIT, text, (size_t)(in.end - (const unsigned char *)text)) != sum) {
        st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: damaged checkpoint (its checksum does not match)",
                          file);
        goto done;
    }
    uint32_t es = rd_u32(&in), rank = rd_u32(&in), ranks = rd_u32(&in), kind = rd_u32(&in);
    int64_t t = rd_i64(&in);
    uint32_t nb = rd_u32(&in);
    if (r == 0) {
        hdr[0] = es, hdr[1] = ranks, hdr[2] = kind;
        *steps = t;
    }
    if (!in.ok || (es != 4 && es != 8) || rank != (uint32_t)r || ranks != hdr[1] || es != hdr[0] ||
        kind != hdr[2] || t != *steps) {
        st = un_ctx_error(ctx, UN_ERR_PARSE,
                          "%s: not rank %d of the %u-rank checkpoint its rank 0 file starts", file,
                          r, hdr[1]);
        goto done;
    }
    int arrays = kind == (uint32_t)UN_OPTIM_ADAM ? 2 : kind == ~0u ? 0 : 1;
    for (uint32_t b = 0; b < nb && in.ok; b++) {
        uint32_t nl = rd_u32(&in);
        const char *name = rd_take(&in, nl);
        uint32_t rk = rd_u32(&in);
        if (!in.ok || rk > UN_MAX_DIMS)
            break;
        int64_t dims[UN_MAX_DIMS], off[UN_MAX_DIMS], ln[UN_MAX_DIMS], pn = 1, numel = 1;
        for (uint32_t d = 0; d < rk; d++)
            dims[d] = rd_i64(&in);
        for (uint32_t d = 0; d < rk; d++)
            off[d] = rd_i64(&in);
        for (uint32_t d = 0; d < rk; d++) {
            ln[d] = rd_i64(&in);
            bool good = dims[d] >= 1 && dims[d] <= UN_MAX_NUMEL && ln[d] >= 1 && off[d] >= 0 &&
                        off[d] + ln[d] <= dims[d];
            in.ok = in.ok && good;
            pn *= good ? ln[d] : 1;
            numel *= good ? dims[d] : 1;
        }
        int64_t lo = rd_i64(&in), hi = rd_i64(&in);
        in.ok = in.ok && lo >= 0 && lo <= hi && hi <= pn && numel <= UN_MAX_NUMEL;
        /* values, then the optimizer's arrays, of elements lo..hi of the block */
        const unsigned char *vals =
            in.ok ? rd_take(&in, (size_t)(hi - lo) * es * (size_t)(1 + arrays)) : NULL;
        if (!in.ok)
            break;
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(nl < 255 ? nl : 255), name);
        int32_t id = nl < 255 ? un_graph_find(g, key) : -1;
        if (id < 0 || loff[id] < 0) /* a weight the graph does not have */
            continue;
        const un_shape *s = &un_graph_node(g, id)->inf.out[0];
        bool same = (int)rk == s->rank;
        for (int d = 0; same && d < s->rank; d++)
            same = dims[d] == s->dim[d];
        if (!same) {
            st = un_ctx_error(ctx, UN_ERR_MISMATCH,
                              "%s: weight '%s' has another shape in the checkpoint", file, key);
            goto done;
        }
        for (int a = 0; a < 1 + (o ? arrays : 0); a++)
            for (int64_t x = lo; x < hi; x++)
                setv(a ? un_optim_state(o, a - 1) : w, a ? un_optim_prec(o) : prec,
                     loff[id] + block_elem(s->rank, s->dim, off, ln, x),
                     rd_val(vals, es, (hi - lo) * a + x - lo));
        cover[id] += hi - lo;
    }
    if (!in.ok)
        st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: truncated or malformed checkpoint", file);
done:
    free(text);
    return st;
}

un_status un_checkpoint_load_ranks(un_ctx *ctx, const char *path, const un_graph *g, un_prec prec,
                                   void *w, un_optim *o) {
    int32_t n = un_graph_node_count(g);
    int64_t *loff = un_xcalloc((size_t)n + 1, sizeof *loff), *cover;
    int64_t total = 0, steps = 0;
    for (int32_t id = 0; id < n; id++) {
        const un_node *nd = un_graph_node(g, id);
        loff[id] = nd->op == UN_OP_WEIGHT ? total : -1;
        total += nd->op == UN_OP_WEIGHT ? un_shape_numel(&nd->inf.out[0]) : 0;
    }
    cover = un_xcalloc((size_t)n + 1, sizeof *cover);
    uint32_t hdr[3] = {0, 1, 0};
    char file[4096];
    un_status st = UN_OK;
    for (int r = 0; st == UN_OK && r < (int)hdr[1]; r++) {
        rank_path(file, sizeof file, path, r);
        st = load_rank_file(ctx, file, r, hdr, &steps, g, loff, prec, w, o, cover);
    }
    if (st == UN_OK && o && hdr[2] != ~0u && hdr[2] != (uint32_t)un_optim_kind(o))
        st = un_ctx_error(ctx, UN_ERR_MISMATCH, "%s: optimizer state is for %s, not %s", path,
                          un_optim_algo_name((un_optim_algo)hdr[2]),
                          un_optim_algo_name(un_optim_kind(o)));
    for (int32_t id = 0; st == UN_OK && id < n; id++) {
        if (loff[id] < 0)
            continue;
        const un_node *nd = un_graph_node(g, id);
        int64_t numel = un_shape_numel(&nd->inf.out[0]);
        if (cover[id] != numel)
            st = un_ctx_error(ctx, UN_ERR_MISMATCH,
                              "%s: weight '%s' is not whole in the %u rank files", path,
                              nd->name ? nd->name : "", hdr[1]);
    }
    if (st == UN_OK && o && hdr[2] != ~0u)
        un_optim_set_steps(o, steps);
    free(loff);
    free(cover);
    return st;
}
