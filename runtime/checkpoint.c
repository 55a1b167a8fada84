/* checkpoint.c - checkpoints of training state: the logical weights by name and shape plus the
 * optimizer state, one file, written through a temporary file and checksummed. */
#include "runtime/checkpoint.h"

#include "runtime/comm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

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

/* The file's header: magic, element bytes, g's weight count. */
static bool ckpt_head(FILE *f, uint64_t *h, const un_graph *g, uint32_t es) {
    uint32_t nw = 0;
    for (int32_t id = 0; id < un_graph_node_count(g); id++)
        nw += un_graph_node(g, id)->op == UN_OP_WEIGHT;
    return ckpt_write(ckpt_magic, 1, 8, f, h) == 8 && ckpt_write(&es, 4, 1, f, h) == 1 &&
           ckpt_write(&nw, 4, 1, f, h) == 1;
}

/* A weight's name and shape (its values follow). */
static bool ckpt_weight_head(FILE *f, uint64_t *h, const un_node *nd) {
    const char *name = nd->name ? nd->name : "";
    uint32_t len = (uint32_t)strlen(name), rank = (uint32_t)nd->inf.out[0].rank;
    return ckpt_write(&len, 4, 1, f, h) == 1 && ckpt_write(name, 1, len, f, h) == len &&
           ckpt_write(&rank, 4, 1, f, h) == 1 &&
           ckpt_write(nd->inf.out[0].dim, 8, rank, f, h) == rank;
}

/* The optimizer's kind (~0 for none, o NULL: nothing follows), steps and element count n. */
static bool ckpt_optim_head(FILE *f, uint64_t *h, const un_optim *o, int64_t n) {
    uint32_t kind = o ? (uint32_t)un_optim_kind(o) : ~0u;
    int64_t steps = o ? un_optim_steps(o) : 0;
    return ckpt_write(&kind, 4, 1, f, h) == 1 &&
           (!o || (ckpt_write(&steps, 8, 1, f, h) == 1 && ckpt_write(&n, 8, 1, f, h) == 1));
}

un_status un_checkpoint_save(un_ctx *ctx, const char *path, const un_graph *g, un_prec prec,
                             const void *w, const un_optim *o) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write", path);
    uint32_t es = prec == UN_PREC_F32 ? 4 : 8;
    uint64_t h = CKPT_SUM_INIT;
    bool ok = ckpt_head(f, &h, g, es);
    int64_t off = 0;
    for (int32_t id = 0; ok && id < un_graph_node_count(g); id++) {
        const un_node *nd = un_graph_node(g, id);
        if (nd->op != UN_OP_WEIGHT)
            continue;
        int64_t numel = un_shape_numel(&nd->inf.out[0]);
        ok = ckpt_weight_head(f, &h, nd) && ckpt_write((const char *)w + (size_t)off * es, es,
                                                       (size_t)numel, f, &h) == (size_t)numel;
        off += numel;
    }
    ok = ok && (!o || (un_optim_prec(o) == UN_PREC_F32 ? 4u : 8u) == es) &&
         ckpt_optim_head(f, &h, o, o ? un_optim_count(o) : 0);
    if (ok && o) {
        size_t n = (size_t)un_optim_count(o);
        const void *m = un_optim_state(o, 0), *v = un_optim_state(o, 1);
        ok = ckpt_write(m, es, n, f, &h) == n && (!v || ckpt_write(v, es, n, f, &h) == n);
    }
    ok = ok && fwrite(&h, 8, 1, f) == 1;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write the checkpoint", path);
    }
    return UN_OK;
}

/* ---- one file from the pieces, streamed ----
 * The format above, written by rank 0 weight by weight: for each array (values, then each
 * optimizer array) and each weight in node order, every rank sends rank 0 its chunks of the
 * weight's blocks (un_exec_blocks: the chunks of all ranks hold each element once), rank 0 places
 * them into the weight's logical array and appends it. No rank holds more than one weight. */

typedef struct sv_rank {
    un_exec_block *blk; /* a rank's blocks (rank 0 knows every rank's) */
    int nb;
} sv_rank;

/* The elements rank q holds of weight node id (the chunks of its blocks of it). */
static int64_t sv_count(const sv_rank *q, int32_t id) {
    int64_t n = 0;
    for (int b = 0; b < q->nb; b++)
        if (q->blk[b].node == id)
            n += q->blk[b].hi - q->blk[b].lo;
    return n;
}

un_status un_checkpoint_save_exec(un_ctx *ctx, const char *path, const un_graph *g, un_exec *ex,
                                  un_backend *be, const un_optim *o, un_comm *comm,
                                  int64_t *host_bytes) {
    int me = un_comm_rank(comm), d = un_comm_size(comm);
    bool root = me == 0;
    uint32_t es = un_backend_prec(be) == UN_PREC_F32 ? 4 : 8;
    int arrays = o ? (un_optim_state(o, 1) ? 2 : 1) : 0;
    sv_rank *rk = un_xcalloc((size_t)d, sizeof *rk);
    rk[me].blk = un_exec_blocks(ex, &rk[me].nb);
    /* rank 0 learns every rank's blocks */
    double *cnt = un_xcalloc((size_t)d, sizeof *cnt);
    cnt[me] = rk[me].nb;
    un_status st = un_comm_allreduce(ctx, comm, UN_RED_F64, cnt, d);
    un_comm_msg *rm = un_xcalloc((size_t)d, sizeof *rm);
    int nr = 0;
    for (int q = 1; st == UN_OK && root && q < d; q++) {
        rk[q].nb = (int)cnt[q];
        rk[q].blk = un_xcalloc((size_t)rk[q].nb + 1, sizeof *rk[q].blk);
        if (rk[q].nb)
            rm[nr++] = (un_comm_msg){.peer = q,
                                     .tag = 0,
                                     .data = rk[q].blk,
                                     .bytes = sizeof *rk[q].blk * (size_t)rk[q].nb};
    }
    un_comm_msg sm = {
        .peer = 0, .tag = 0, .data = rk[me].blk, .bytes = sizeof *rk[me].blk * (size_t)rk[me].nb};
    if (st == UN_OK)
        st = un_comm_exchange(ctx, comm, &sm, !root && rk[me].nb > 0, rm, nr);
    char tmp[4200];
    FILE *f = NULL;
    if (st == UN_OK && root) {
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        if (strlen(path) >= 4096)
            st = un_ctx_error(ctx, UN_ERR_INVALID, "%s: path too long", path);
        else if (!(f = fopen(tmp, "wb")))
            st = un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write", path);
    }
    st = un_comm_agree(ctx, comm, st); /* every rank agrees before the data moves */
    int64_t big = 0, nl = 0;           /* the largest weight's elements, all weights' */
    for (int32_t id = 0; id < un_graph_node_count(g); id++)
        if (un_graph_node(g, id)->op == UN_OP_WEIGHT) {
            int64_t n = un_shape_numel(&un_graph_node(g, id)->inf.out[0]);
            big = n > big ? n : big;
            nl += n;
        }
    /* rank 0: the weight's logical array, then what the others send; others: their chunks */
    char *lw = un_xmalloc((size_t)(root ? 2 * big : big) * es + 1), *in = lw + (size_t)big * es;
    if (host_bytes)
        *host_bytes = (root ? 2 * big : big) * es;
    uint64_t h = CKPT_SUM_INIT;
    bool ok = st == UN_OK;
    if (ok && root)
        ok = ckpt_head(f, &h, g, es);
    un_status rd = UN_OK; /* a failed read still takes part in the exchanges */
    for (int a = 0; st == UN_OK && a < 1 + arrays; a++) {
        const char *src = a == 0 ? un_exec_params(ex) : un_optim_state(o, a - 1);
        if (a == 1 && root && ok)
            ok = ckpt_optim_head(f, &h, o, nl);
        for (int32_t id = 0; st == UN_OK && id < un_graph_node_count(g); id++) {
            const un_node *nd = un_graph_node(g, id);
            if (nd->op != UN_OP_WEIGHT)
                continue;
            const un_shape *s = &nd->inf.out[0];
            char *mine = root ? in : lw; /* this rank's chunks, packed */
            int64_t at = 0;
            for (int b = 0; b < rk[me].nb; b++) {
                const un_exec_block *k = &rk[me].blk[b];
                size_t n = (size_t)(k->hi - k->lo);
                if (k->node != id || !n)
                    continue;
                int64_t from = a == 0 ? k->at + k->lo : k->shard_at;
                if (rd == UN_OK)
                    rd = un_backend_read(ctx, be, mine + (size_t)at * es, src + (size_t)from * es,
                                         n * es);
                at += (int64_t)n;
            }
            nr = 0;
            int64_t off = at; /* rank 0: the others' chunks follow its own in `in` */
            for (int q = 1; root && q < d; q++) {
                int64_t n = sv_count(&rk[q], id);
                if (n)
                    rm[nr++] = (un_comm_msg){.peer = q,
                                             .tag = id,
                                             .data = in + (size_t)off * es,
                                             .bytes = (size_t)n * es};
                off += n;
            }
            sm = (un_comm_msg){.peer = 0, .tag = id, .data = mine, .bytes = (size_t)at * es};
            st = un_comm_exchange(ctx, comm, &sm, !root && at > 0, rm, nr);
            if (!root || st != UN_OK)
                continue;
            UN_ASSERT(off == un_shape_numel(s)); /* the chunks partition the weight */
            off = 0;
            for (int q = 0; q < d; q++)
                for (int b = 0; b < rk[q].nb; b++) {
                    const un_exec_block *k = &rk[q].blk[b];
                    if (k->node != id)
                        continue;
                    for (int64_t x = k->lo; x < k->hi;) {
                        int64_t run, e = un_shape_block_index(s, k->off, k->len, x, &run);
                        run = run < k->hi - x ? run : k->hi - x;
                        memcpy(lw + (size_t)e * es, in + (size_t)off * es, (size_t)run * es);
                        off += run;
                        x += run;
                    }
                }
            size_t numel = (size_t)un_shape_numel(s);
            ok = ok && (a > 0 || ckpt_weight_head(f, &h, nd)) &&
                 ckpt_write(lw, es, numel, f, &h) == numel;
        }
    }
    if (root && f) {
        ok = ok && (o || ckpt_optim_head(f, &h, NULL, 0)) && fwrite(&h, 8, 1, f) == 1;
        ok = fclose(f) == 0 && ok;
        if (st == UN_OK && rd == UN_OK && (!ok || rename(tmp, path) != 0))
            st = un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write the checkpoint", path);
        if (st != UN_OK || rd != UN_OK)
            remove(tmp);
    }
    for (int q = 0; q < d; q++)
        free(rk[q].blk);
    free(rk);
    free(cnt);
    free(rm);
    free(lw);
    return un_comm_agree(ctx, comm, st == UN_OK ? rd : st);
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

enum { SV_CHUNK = 1 << 16 }; /* elements of backend memory staged on the host at a time */

/* Writes n es-byte elements of backend memory src to f, read through be into buf (SV_CHUNK
 * elements) chunk by chunk; false on a failed read (its status in *rd) or write. */
static bool ckpt_write_dev(un_ctx *ctx, un_backend *be, const char *src, size_t n, uint32_t es,
                           char *buf, FILE *f, uint64_t *h, un_status *rd) {
    for (size_t at = 0; at < n; at += SV_CHUNK) {
        size_t k = n - at < SV_CHUNK ? n - at : SV_CHUNK;
        if ((*rd = un_backend_read(ctx, be, buf, src + at * es, k * es)) != UN_OK ||
            ckpt_write(buf, es, k, f, h) != k)
            return false;
    }
    return true;
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
    char *buf = un_xmalloc((size_t)SV_CHUNK * es); /* backend memory read in bounded chunks */
    un_status s = UN_OK;
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
                 ckpt_write_dev(ctx, be,
                                (const char *)un_exec_params(ex) +
                                    (size_t)(blk[b].at + blk[b].lo) * es,
                                nst, es, buf, f, &h, &s);
            for (int i = 0; ok && o && i < 2; i++)
                if (un_optim_state(o, i))
                    ok = ckpt_write_dev(
                        ctx, be, (const char *)un_optim_state(o, i) + (size_t)blk[b].shard_at * es,
                        nst, es, buf, f, &h, &s);
        }
        ok = ok && fwrite(&h, 8, 1, f) == 1;
        ok = fclose(f) == 0 && ok;
        if (!ok || rename(tmp, file) != 0) {
            remove(tmp);
            if (s == UN_OK) /* else a failed read, said already */
                s = un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write the checkpoint", file);
        }
    }
    free(blk);
    free(buf);
    return s;
}

/* ---- loading: only what the target blocks hold ----
 * Both formats are read the same way: the file's checksum is checked streaming (a bounded
 * buffer), its headers are indexed by seeking past the data, and each saved segment (a block of a
 * weight, its elements lo..hi row-major, then the optimizer arrays of the same elements) is read
 * in bounded chunks, run by run along the last dim, into the target blocks it overlaps. A target
 * is a list of blocks (un_exec_block): one rank's pieces and optimizer shard (load into an
 * executor), or every weight whole (the logical loads). */

#define CK_CHUNK ((int64_t)1 << 16) /* elements per read */

/* A sequential, bounds-checked reader of one file. */
typedef struct ckf {
    FILE *f;
    int64_t pos, end; /* end: the checksum's offset */
    bool ok;
} ckf;

static bool ckf_at(ckf *r, int64_t pos, void *buf, size_t n) {
    if (!r->ok || pos < 0 || pos > r->end || (int64_t)n > r->end - pos ||
        fseeko(r->f, (off_t)pos, SEEK_SET) != 0 || fread(buf, 1, n, r->f) != n)
        r->ok = false;
    return r->ok;
}

static void ckf_take(ckf *r, void *buf, size_t n) {
    if (ckf_at(r, r->pos, buf, n))
        r->pos += (int64_t)n;
}

static uint32_t ckf_u32(ckf *r) {
    uint32_t v = 0;
    ckf_take(r, &v, 4);
    return v;
}

static int64_t ckf_i64(ckf *r) {
    int64_t v = 0;
    ckf_take(r, &v, 8);
    return v;
}

static void ckf_skip(ckf *r, int64_t n) {
    if (n < 0 || n > r->end - r->pos)
        r->ok = false;
    else
        r->pos += n;
}

/* Opens path: its magic, and a length of at least min_len bytes before the checksum. */
static un_status ckf_open(un_ctx *ctx, const char *path, int64_t min_len, const char *magic,
                          const char *what, ckf *r) {
    *r = (ckf){.f = fopen(path, "rb"), .ok = true};
    if (!r->f)
        return un_ctx_error(ctx, UN_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    int64_t len = fseeko(r->f, 0, SEEK_END) == 0 ? (int64_t)ftello(r->f) : -1;
    char head[8] = {0};
    if (len < 8 || fseeko(r->f, 0, SEEK_SET) != 0 || fread(head, 1, 8, r->f) != 8 ||
        memcmp(head, magic, 8) != 0)
        return un_ctx_error(ctx, UN_ERR_PARSE, "%s: not a unity %s (bad magic)", path, what);
    if (len < min_len + 8)
        return un_ctx_error(ctx, UN_ERR_PARSE, "%s: truncated checkpoint", path);
    r->end = len - 8;
    r->pos = 8;
    return UN_OK;
}

/* Checks the trailing checksum over every byte before it, streaming (bounded memory). */
static un_status ckf_verify(un_ctx *ctx, const char *path, ckf *r) {
    uint64_t h = CKPT_SUM_INIT, sum = 0;
    unsigned char *buf = un_xmalloc(1 << 20);
    bool ok = fseeko(r->f, 0, SEEK_SET) == 0;
    for (int64_t at = 0; ok && at < r->end;) {
        size_t n = (size_t)(r->end - at < (1 << 20) ? r->end - at : (1 << 20));
        ok = fread(buf, 1, n, r->f) == n;
        h = ckpt_sum(h, buf, n);
        at += (int64_t)n;
    }
    free(buf);
    ok = ok && fread(&sum, 8, 1, r->f) == 1;
    if (!ok)
        return un_ctx_error(ctx, UN_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    if (h != sum)
        return un_ctx_error(ctx, UN_ERR_PARSE,
                            "%s: damaged checkpoint (its checksum does not match)", path);
    return UN_OK;
}

static void ckf_close(ckf *r) {
    if (r->f)
        fclose(r->f);
    r->f = NULL;
}

/* Where loaded elements go: blocks[nb] in node order (first[id] .. first[id + 1] those of node
 * id), values into w (prec), the optimizer arrays into st[] (oprec; NULL = not loaded). */
typedef struct ck_target {
    const un_graph *g;
    const un_exec_block *blk;
    int nb;
    int *first; /* per node + 1 */
    un_prec prec, oprec;
    void *w, *st[2];
    int64_t *cover_v, *cover_s; /* per block: values and optimizer elements loaded */
    unsigned char *seen[2];     /* bit per element of w and of st[0]: loaded already */
    int32_t twice;              /* a weight node with an element given twice, or -1 */
    unsigned char *buf;         /* CK_CHUNK elements of 8 bytes */
} ck_target;

/* Marks element i of seen; false when it was marked already. */
static bool ck_mark(unsigned char *seen, int64_t i) {
    unsigned char bit = (unsigned char)(1u << (i & 7));
    bool fresh = !(seen[i >> 3] & bit);
    seen[i >> 3] |= bit;
    return fresh;
}

/* nv, ns: the elements of w and of each st[] array. */
static void ck_target_init(ck_target *t, const un_graph *g, const un_exec_block *blk, int nb,
                           int64_t nv, int64_t ns) {
    int32_t n = un_graph_node_count(g);
    t->g = g;
    t->blk = blk;
    t->nb = nb;
    t->first = un_xcalloc((size_t)n + 2, sizeof *t->first);
    for (int b = 0; b < nb; b++)
        t->first[blk[b].node + 1]++;
    for (int32_t id = 0; id < n; id++)
        t->first[id + 1] += t->first[id];
    t->cover_v = un_xcalloc((size_t)nb + 1, sizeof *t->cover_v);
    t->cover_s = un_xcalloc((size_t)nb + 1, sizeof *t->cover_s);
    t->buf = un_xmalloc((size_t)CK_CHUNK * 8);
    t->seen[0] = un_xcalloc((size_t)nv / 8 + 1, 1);
    t->seen[1] = un_xcalloc((size_t)ns / 8 + 1, 1);
    t->twice = -1;
}

static void ck_target_deinit(ck_target *t) {
    free(t->seen[0]);
    free(t->seen[1]);
    free(t->first);
    free(t->cover_v);
    free(t->cover_s);
    free(t->buf);
}

/* Copies elements [x0, x1) of array a (0 values, 1.. optimizer) of a saved segment of weight
 * node id (the block off/len of it, buf holding elements x0.. in es-byte floats) into the target
 * blocks they fall in, run by run along the last dim. */
static void ck_runs(ck_target *t, int32_t id, const int64_t *off, const int64_t *len, int a,
                    int64_t x0, int64_t x1, uint32_t es) {
    const un_shape *s = &un_graph_node(t->g, id)->inf.out[0];
    int last = s->rank - 1;
    for (int64_t x = x0; x < x1;) {
        int64_t c[UN_MAX_DIMS], rest = x; /* global coordinates of element x */
        for (int d = last; d >= 0; d--) {
            c[d] = off[d] + rest % len[d];
            rest /= len[d];
        }
        int64_t run = len[last] - (c[last] - off[last]);
        run = run < x1 - x ? run : x1 - x;
        for (int b = t->first[id]; b < t->first[id + 1]; b++) {
            const un_exec_block *k = &t->blk[b];
            bool in = true;
            for (int d = 0; in && d < last; d++)
                in = c[d] >= k->off[d] && c[d] < k->off[d] + k->len[d];
            int64_t lo = c[last] > k->off[last] ? c[last] : k->off[last];
            int64_t hi = c[last] + run < k->off[last] + k->len[last] ? c[last] + run
                                                                     : k->off[last] + k->len[last];
            if (!in || lo >= hi)
                continue;
            int64_t li = 0; /* the block-local index of global (c[0..last-1], lo) */
            for (int d = 0; d < last; d++)
                li = li * k->len[d] + (c[d] - k->off[d]);
            li = li * k->len[last] + (lo - k->off[last]);
            int64_t src = x - x0 + (lo - c[last]), n = hi - lo;
            if (a == 0) {
                for (int64_t e = 0; e < n; e++) {
                    setv(t->w, t->prec, k->at + li + e, rd_val(t->buf, es, src + e));
                    if (ck_mark(t->seen[0], k->at + li + e))
                        t->cover_v[b]++;
                    else
                        t->twice = id;
                }
                continue;
            }
            int64_t p = li > k->lo ? li : k->lo, q = li + n < k->hi ? li + n : k->hi;
            for (int64_t e = p; e < q; e++) {
                setv(t->st[a - 1], t->oprec, k->shard_at + e - k->lo,
                     rd_val(t->buf, es, src + e - li));
                if (a > 1)
                    continue;
                if (ck_mark(t->seen[1], k->shard_at + e - k->lo))
                    t->cover_s[b]++;
                else
                    t->twice = id;
            }
        }
        x += run;
    }
}

/* One saved segment of weight node id: the block off/len of it, its elements lo..hi, values at
 * pos[0] and optimizer array i at pos[1 + i] (arrays of them). */
static bool ck_segment(ck_target *t, ckf *r, int32_t id, const int64_t *off, const int64_t *len,
                       int64_t lo, int64_t hi, const int64_t *pos, int arrays, uint32_t es) {
    if (t->first[id] == t->first[id + 1])
        return true; /* nothing of it is wanted */
    for (int a = 0; a < 1 + arrays; a++) {
        if (a > 0 && !t->st[a - 1])
            continue;
        for (int64_t x0 = lo; x0 < hi; x0 += CK_CHUNK) {
            int64_t x1 = hi - x0 < CK_CHUNK ? hi : x0 + CK_CHUNK;
            if (!ckf_at(r, pos[a] + (x0 - lo) * (int64_t)es, t->buf, (size_t)(x1 - x0) * es))
                return false;
            ck_runs(t, id, off, len, a, x0, x1, es);
        }
    }
    return true;
}

/* Whether dims[rank] are the shape of weight id of g (else one error naming file and weight). */
static un_status ck_same_shape(un_ctx *ctx, const char *file, const un_graph *g, int32_t id,
                               uint32_t rank, const int64_t *dims) {
    const un_shape *s = &un_graph_node(g, id)->inf.out[0];
    bool same = (int)rank == s->rank;
    for (int d = 0; same && d < s->rank; d++)
        same = dims[d] == s->dim[d];
    if (same)
        return UN_OK;
    const char *name = un_graph_node(g, id)->name;
    return un_ctx_error(ctx, UN_ERR_MISMATCH, "%s: weight '%s' has another shape in the checkpoint",
                        file, name ? name : "");
}

/* The logical element count of g's weights. */
static int64_t ck_lparams(const un_graph *g) {
    int64_t n = 0;
    for (int32_t id = 0; id < un_graph_node_count(g); id++)
        if (un_graph_node(g, id)->op == UN_OP_WEIGHT)
            n += un_shape_numel(&un_graph_node(g, id)->inf.out[0]);
    return n;
}

static un_status ck_optim_kind(un_ctx *ctx, const char *path, uint32_t kind, int64_t n,
                               const un_graph *g, const un_optim *o) {
    if (!o || kind == ~0u || (kind == (uint32_t)un_optim_kind(o) && n == ck_lparams(g)))
        return UN_OK;
    return un_ctx_error(ctx, UN_ERR_MISMATCH,
                        "%s: optimizer state is for %s over %lld parameters, not %s over %lld",
                        path, un_optim_algo_name((un_optim_algo)kind), (long long)n,
                        un_optim_algo_name(un_optim_kind(o)), (long long)ck_lparams(g));
}

/* The single-file format into t. */
static un_status ck_load_file(un_ctx *ctx, const char *path, ck_target *t, uint32_t *kind,
                              int64_t *steps, const un_optim *o) {
    ckf r;
    un_status st = ckf_open(ctx, path, 16, ckpt_magic, "checkpoint", &r);
    uint32_t es = 0, nw = 0;
    typedef struct {
        char name[256];
        uint32_t rank;
        int64_t dims[UN_MAX_DIMS], pos, foff;
    } entry;
    entry *ix = NULL;
    uint32_t *which = NULL; /* per node of g: its entry */
    if (st != UN_OK)
        goto done;
    es = ckf_u32(&r);
    nw = ckf_u32(&r);
    if (es != 4 && es != 8) {
        st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: element size %u", path, es);
        goto done;
    }
    if (nw > (uint64_t)(r.end - r.pos) / 8) { /* each weight takes at least 8 bytes */
        st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: truncated checkpoint", path);
        goto done;
    }
    ix = un_xcalloc((size_t)nw + 1, sizeof *ix);
    int64_t foff = 0;
    for (uint32_t i = 0; i < nw && r.ok; i++) {
        uint32_t nl = ckf_u32(&r);
        if (nl < sizeof ix[i].name)
            ckf_take(&r, ix[i].name, nl);
        else
            r.ok = false;
        ix[i].rank = ckf_u32(&r);
        if (r.ok && ix[i].rank > UN_MAX_DIMS) {
            st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: weight %u has rank %u", path, i, ix[i].rank);
            goto done;
        }
        int64_t numel = 1;
        for (uint32_t d = 0; d < ix[i].rank && r.ok; d++) {
            int64_t v = ckf_i64(&r);
            if (r.ok && (v < 1 || v > UN_MAX_NUMEL || numel > UN_MAX_NUMEL / v)) {
                st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: weight %u has a bad size", path, i);
                goto done;
            }
            ix[i].dims[d] = v;
            numel *= v;
        }
        ix[i].pos = r.pos;
        ix[i].foff = foff;
        foff += numel;
        ckf_skip(&r, numel * (int64_t)es);
    }
    *kind = ckf_u32(&r);
    int64_t n = 0, apos[2] = {0, 0};
    int arrays = 0;
    if (r.ok && *kind != ~0u) {
        *steps = ckf_i64(&r);
        n = ckf_i64(&r);
        arrays = *kind == (uint32_t)UN_OPTIM_ADAM ? 2 : 1;
        if (r.ok && n != foff) {
            st = un_ctx_error(ctx, UN_ERR_PARSE,
                              "%s: optimizer state over %lld of its %lld parameters", path,
                              (long long)n, (long long)foff);
            goto done;
        }
        for (int a = 0; a < arrays; a++) {
            apos[a] = r.pos;
            ckf_skip(&r, n * (int64_t)es);
        }
    }
    if (!r.ok) {
        st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: truncated checkpoint", path);
        goto done;
    }
    if ((st = ckf_verify(ctx, path, &r)) != UN_OK)
        goto done;
    /* every weight of g by name and shape, then the optimizer, then the reads */
    which = un_xcalloc((size_t)un_graph_node_count(t->g) + 1, sizeof *which);
    for (int32_t id = 0; id < un_graph_node_count(t->g) && st == UN_OK; id++) {
        const un_node *nd = un_graph_node(t->g, id);
        if (nd->op != UN_OP_WEIGHT)
            continue;
        const char *name = nd->name ? nd->name : "";
        uint32_t i = 0;
        while (i < nw && strcmp(ix[i].name, name) != 0)
            i++;
        if (i == nw)
            st = un_ctx_error(ctx, UN_ERR_MISMATCH, "%s: no weight '%s' in the checkpoint", path,
                              name);
        else
            st = ck_same_shape(ctx, path, t->g, id, ix[i].rank, ix[i].dims);
        which[id] = i;
    }
    if (st == UN_OK && *kind != ~0u)
        st = ck_optim_kind(ctx, path, *kind, n, t->g, o);
    for (int32_t id = 0; id < un_graph_node_count(t->g) && st == UN_OK; id++) {
        const un_node *nd = un_graph_node(t->g, id);
        if (nd->op != UN_OP_WEIGHT)
            continue;
        const entry *e = &ix[which[id]];
        int64_t zero[UN_MAX_DIMS] = {0}, numel = un_shape_numel(&nd->inf.out[0]);
        int64_t pos[3] = {e->pos, apos[0] + e->foff * (int64_t)es, apos[1] + e->foff * (int64_t)es};
        if (!ck_segment(t, &r, id, zero, e->dims, 0, numel, pos, o ? arrays : 0, es))
            st = un_ctx_error(ctx, UN_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    }
done:
    free(which);
    free(ix);
    ckf_close(&r);
    return st;
}

/* Rank r's file of a per-rank checkpoint into t; hdr (es, ranks, kind) and steps from rank 0's. */
static un_status ck_load_rank(un_ctx *ctx, const char *file, int r, uint32_t *hdr, int64_t *steps,
                              ck_target *t, const un_optim *o) {
    ckf in;
    un_status st = ckf_open(ctx, file, 8 + 28, rank_magic, "rank checkpoint", &in);
    if (st == UN_OK)
        st = ckf_verify(ctx, file, &in);
    in.pos = 8;
    if (st != UN_OK) {
        ckf_close(&in);
        return st;
    }
    uint32_t es = ckf_u32(&in), rank = ckf_u32(&in), ranks = ckf_u32(&in), kind = ckf_u32(&in);
    int64_t ts = ckf_i64(&in);
    uint32_t nb = ckf_u32(&in);
    if (r == 0) {
        hdr[0] = es, hdr[1] = ranks, hdr[2] = kind;
        *steps = ts;
    }
    if (!in.ok || (es != 4 && es != 8) || rank != (uint32_t)r || ranks != hdr[1] || es != hdr[0] ||
        kind != hdr[2] || ts != *steps || ranks < 1) {
        ckf_close(&in);
        return un_ctx_error(ctx, UN_ERR_PARSE,
                            "%s: not rank %d of the %u-rank checkpoint its rank 0 file starts",
                            file, r, hdr[1]);
    }
    int arrays = kind == (uint32_t)UN_OPTIM_ADAM ? 2 : kind == ~0u ? 0 : 1;
    if (r == 0 && o && kind != ~0u && kind != (uint32_t)un_optim_kind(o))
        st = un_ctx_error(ctx, UN_ERR_MISMATCH, "%s: optimizer state is for %s, not %s", file,
                          un_optim_algo_name((un_optim_algo)kind),
                          un_optim_algo_name(un_optim_kind(o)));
    for (uint32_t b = 0; b < nb && in.ok && st == UN_OK; b++) {
        char name[256] = {0};
        uint32_t nl = ckf_u32(&in);
        if (nl < sizeof name)
            ckf_take(&in, name, nl);
        else
            in.ok = false;
        uint32_t rk = ckf_u32(&in);
        if (!in.ok || rk > UN_MAX_DIMS)
            break;
        int64_t dims[UN_MAX_DIMS], off[UN_MAX_DIMS], ln[UN_MAX_DIMS], pn = 1, numel = 1;
        for (uint32_t d = 0; d < rk; d++)
            dims[d] = ckf_i64(&in);
        for (uint32_t d = 0; d < rk; d++)
            off[d] = ckf_i64(&in);
        for (uint32_t d = 0; d < rk; d++) {
            ln[d] = ckf_i64(&in);
            bool good = dims[d] >= 1 && dims[d] <= UN_MAX_NUMEL && ln[d] >= 1 && off[d] >= 0 &&
                        off[d] + ln[d] <= dims[d] && numel <= UN_MAX_NUMEL / dims[d];
            in.ok = in.ok && good;
            pn *= good ? ln[d] : 1;
            numel *= good ? dims[d] : 1;
        }
        int64_t lo = ckf_i64(&in), hi = ckf_i64(&in);
        in.ok = in.ok && lo >= 0 && lo <= hi && hi <= pn;
        int64_t pos[3] = {in.pos, in.pos + (hi - lo) * (int64_t)es,
                          in.pos + 2 * (hi - lo) * (int64_t)es};
        ckf_skip(&in, in.ok ? (hi - lo) * (int64_t)es * (1 + arrays) : 0);
        if (!in.ok)
            break;
        int32_t id = un_graph_find(t->g, name);
        if (id < 0 || un_graph_node(t->g, id)->op != UN_OP_WEIGHT)
            continue; /* a weight the graph does not have */
        if ((st = ck_same_shape(ctx, file, t->g, id, rk, dims)) != UN_OK)
            break;
        if (!ck_segment(t, &in, id, off, ln, lo, hi, pos, o ? arrays : 0, es))
            st = un_ctx_error(ctx, UN_ERR_IO, "%s: cannot read: %s", file, strerror(errno));
    }
    if (st == UN_OK && !in.ok)
        st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: truncated or malformed checkpoint", file);
    ckf_close(&in);
    return st;
}

/* Loads path (one file, or PATH.rankR files) into t, then checks that every target block got
 * all its values (and its optimizer chunk when loaded) exactly once. */
static un_status ck_load(un_ctx *ctx, const char *path, bool ranks, ck_target *t, un_optim *o) {
    uint32_t hdr[3] = {0, 1, ~0u};
    int64_t steps = 0;
    un_status st = UN_OK;
    if (!ranks) {
        st = ck_load_file(ctx, path, t, &hdr[2], &steps, o);
    } else {
        char file[4096];
        for (int r = 0; st == UN_OK && r < (int)hdr[1]; r++) {
            rank_path(file, sizeof file, path, r);
            st = ck_load_rank(ctx, file, r, hdr, &steps, t, o);
        }
    }
    bool opt = st == UN_OK && o && hdr[2] != ~0u;
    if (st == UN_OK && t->twice >= 0) {
        const char *name = un_graph_node(t->g, t->twice)->name;
        st = un_ctx_error(ctx, UN_ERR_PARSE, "%s: weight '%s' has elements more than once in it",
                          path, name ? name : "");
    }
    for (int b = 0; st == UN_OK && b < t->nb; b++) {
        const un_exec_block *k = &t->blk[b];
        int64_t n = 1;
        for (int d = 0; d < un_graph_node(t->g, k->node)->inf.out[0].rank; d++)
            n *= k->len[d];
        if (t->cover_v[b] != n || (opt && t->cover_s[b] != k->hi - k->lo)) {
            const char *name = un_graph_node(t->g, k->node)->name;
            if (ranks)
                st = un_ctx_error(ctx, UN_ERR_MISMATCH,
                                  "%s: weight '%s' is not whole in the %u rank files", path,
                                  name ? name : "", hdr[1]);
            else
                st = un_ctx_error(ctx, UN_ERR_MISMATCH, "%s: weight '%s' is not whole in it", path,
                                  name ? name : "");
        }
    }
    if (opt)
        un_optim_set_steps(o, steps);
    return st;
}

/* Every weight of g whole: the logical loads' target. Owned: free(). */
static un_exec_block *ck_whole_blocks(const un_graph *g, int *nb) {
    un_exec_block *b = un_xcalloc((size_t)un_graph_node_count(g) + 1, sizeof *b);
    int64_t at = 0;
    *nb = 0;
    for (int32_t id = 0; id < un_graph_node_count(g); id++) {
        const un_node *nd = un_graph_node(g, id);
        if (nd->op != UN_OP_WEIGHT)
            continue;
        un_exec_block *k = &b[(*nb)++];
        k->node = id;
        for (int d = 0; d < nd->inf.out[0].rank; d++)
            k->len[d] = nd->inf.out[0].dim[d];
        k->at = k->shard_at = at;
        k->hi = un_shape_numel(&nd->inf.out[0]);
        at += k->hi;
    }
    return b;
}

/* The logical loads: every weight whole into w, the optimizer state into o (host). */
static un_status ck_load_logical(un_ctx *ctx, const char *path, bool ranks, const un_graph *g,
                                 un_prec prec, void *w, un_optim *o) {
    int nb;
    un_exec_block *blk = ck_whole_blocks(g, &nb);
    ck_target t = {0};
    int64_t nl = ck_lparams(g);
    ck_target_init(&t, g, blk, nb, nl, nl);
    t.prec = prec;
    t.w = w;
    t.oprec = o ? un_optim_prec(o) : prec;
    for (int i = 0; o && i < 2; i++)
        t.st[i] = un_optim_state(o, i);
    un_status st = ck_load(ctx, path, ranks, &t, o);
    ck_target_deinit(&t);
    free(blk);
    return st;
}

un_status un_checkpoint_load(un_ctx *ctx, const char *path, const un_graph *g, un_prec prec,
                             void *w, un_optim *o) {
    return ck_load_logical(ctx, path, false, g, prec, w, o);
}

un_status un_checkpoint_load_ranks(un_ctx *ctx, const char *path, const un_graph *g, un_prec prec,
                                   void *w, un_optim *o) {
    return ck_load_logical(ctx, path, true, g, prec, w, o);
}

un_status un_checkpoint_load_exec(un_ctx *ctx, const char *path, const un_graph *g, un_exec *ex,
                                  un_backend *be, un_optim *o, int64_t *host_bytes) {
    size_t es = un_backend_prec(be) == UN_PREC_F32 ? 4 : 8;
    int64_t np = un_exec_param_count(ex), ns = o ? un_optim_count(o) : 0;
    int nb;
    un_exec_block *blk = un_exec_blocks(ex, &nb);
    ck_target t = {0};
    ck_target_init(&t, g, blk, nb, np, ns);
    t.prec = t.oprec = un_backend_prec(be);
    t.w = un_xcalloc((size_t)np + 1, es);
    int64_t held = (np + 1) * (int64_t)es + CK_CHUNK * 8 + np / 8 + ns / 8 + 2;
    for (int i = 0; o && i < 2; i++)
        if (un_optim_state(o, i)) {
            t.st[i] = un_xcalloc((size_t)ns + 1, es);
            held += (ns + 1) * (int64_t)es;
        }
    un_status st = ck_load(ctx, path, un_checkpoint_is_ranks(path), &t, o);
    if (st == UN_OK)
        st = un_backend_write(ctx, be, un_exec_params(ex), t.w, (size_t)np * es);
    for (int i = 0; st == UN_OK && i < 2; i++)
        if (t.st[i])
            st = un_backend_write(ctx, be, un_optim_state(o, i), t.st[i], (size_t)ns * es);
    if (host_bytes)
        *host_bytes = held;
    free(t.w);
    free(t.st[0]);
    free(t.st[1]);
    ck_target_deinit(&t);
    free(blk);
    return st;
}
