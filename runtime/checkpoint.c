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
        for (int64_t x = 0; x < numel; x++) {
            double v;
            if (es == 4) {
                float fv;
                memcpy(&fv, q + 4 * x, 4);
                v = fv;
            } else {
                memcpy(&v, q + 8 * x, 8);
            }
            setv(w, prec, off + x, v);
        }
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
            for (int64_t x = 0; x < n; x++) {
                double v;
                if (es == 4) {
                    float fv;
                    memcpy(&fv, p + 4 * ((size_t)n * a + (size_t)x), 4);
                    v = fv;
                } else {
                    memcpy(&v, p + 8 * ((size_t)n * a + (size_t)x), 8);
                }
                setv(un_optim_state(o, (int)a), un_optim_prec(o), x, v);
            }
        un_optim_set_steps(o, t);
    }
#undef NEED
done:
    free(at);
    free(text);
    return st;
}
