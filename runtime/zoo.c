/* zoo.c - the model zoo (zoo.h): each model is a function over a small builder that adds nodes
 * through pcg/graph.h with sticky errors, so model code reads like a layer list. Parameters are
 * set by name from the spec (never by position), weights are explicit WEIGHT nodes, and every node
 * gets a unique name. Nothing here runs a graph.
 */
#include "runtime/zoo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the builder ------------------------------------------------------------------------------
 */

typedef struct zb {
    un_ctx *ctx;
    const un_spec *spec;
    un_graph *g;
    un_model *m;
    un_status st;      /* first error; once set, every helper does nothing and returns -1 */
    int n_dropout;     /* seeds distinct dropout masks */
    un_zoo_config cfg; /* sizes over the base configuration (0 = the base's) */
} zb;

/* A configured size, or the base value v. */
static int64_t zb_cfg(const zb *b, int64_t set, int64_t v) {
    (void)b;
    return set > 0 ? set : v;
}

#define ZB_NAME 96

/* dst = "base.suffix" into a ZB_NAME buffer; names are short, so a longer one is a bug. */
static char *zb_nm(char *dst, const char *base, const char *suffix) {
    int len = snprintf(dst, ZB_NAME, "%s.%s", base, suffix);
    UN_ASSERT(len > 0 && len < ZB_NAME);
    return dst;
}

typedef struct zp { /* parameters of one node being built */
    un_op op;
    un_param p[UN_MAX_PARAMS];
} zp;

static zp zp_new(un_op op, const zb *b) {
    zp z;
    memset(&z, 0, sizeof z);
    z.op = op;
    un_spec_param_defaults(un_spec_op(b->spec, op), z.p);
    return z;
}

static int zp_index(zb *b, const zp *z, const char *name) {
    int i = un_spec_param_index(un_spec_op(b->spec, z->op), name);
    if (i < 0 && b->st == UN_OK)
        b->st = un_ctx_error(b->ctx, UN_ERR_SPEC, "zoo: op %s has no parameter '%s'",
                             un_op_name(z->op), name);
    return i;
}

static void zp_int(zb *b, zp *z, const char *name, int64_t v) {
    int i = zp_index(b, z, name);
    if (i >= 0)
        z->p[i] = un_param_int(v);
}

static void zp_list(zb *b, zp *z, const char *name, int n, const int64_t *v) {
    int i = zp_index(b, z, name);
    if (i < 0)
        return;
    memset(&z->p[i], 0, sizeof z->p[i]);
    z->p[i].len = n;
    for (int k = 0; k < n; k++)
        z->p[i].v[k] = v[k];
}

static void zp_enum(zb *b, zp *z, const char *name, const char *value) {
    int i = zp_index(b, z, name);
    if (i < 0)
        return;
    const un_param_spec *ps = &un_spec_op(b->spec, z->op)->params[i];
    for (int k = 0; k < ps->n_enum; k++)
        if (strcmp(ps->enums[k], value) == 0) {
            z->p[i] = un_param_int(k);
            return;
        }
    if (b->st == UN_OK)
        b->st = un_ctx_error(b->ctx, UN_ERR_SPEC, "zoo: parameter '%s' of %s has no value '%s'",
                             name, un_op_name(z->op), value);
}

/* Adds the node; returns its id or -1 (the error is kept in b). */
static int32_t zb_add(zb *b, const zp *z, int n_in, const int32_t *in, const char *name) {
    if (b->st != UN_OK)
        return -1;
    un_ref refs[UN_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) {
        if (in[i] < 0)
            return -1;
        refs[i] = (un_ref){in[i], 0};
    }
    int32_t id = -1;
    b->st = un_graph_add(b->ctx, b->g, z->op, z->p, refs, n_in, name, &id);
    return b->st == UN_OK ? id : -1;
}

static const un_shape *zb_shape(const zb *b, int32_t x) {
    return un_graph_shape(b->g, (un_ref){x, 0});
}

/* Size of dim d (negative from the end) of node x's output; 0 after an error. */
static int64_t zb_dim(const zb *b, int32_t x, int d) {
    if (b->st != UN_OK || x < 0)
        return 0;
    const un_shape *s = zb_shape(b, x);
    return s->dim[d < 0 ? s->rank + d : d];
}

static int32_t zb_source(zb *b, un_op op, const char *name, int rank, const int64_t *dims,
                         bool is_int, int64_t range) {
    zp z = zp_new(op, b);
    zp_list(b, &z, "shape", rank, dims);
    if (is_int) {
        zp_enum(b, &z, "dtype", "int");
        zp_int(b, &z, "range", range);
    }
    return zb_add(b, &z, 0, NULL, name);
}

/* A data input, registered in the model. `name` must be a static string. */
static int32_t zb_input(zb *b, const char *name, int rank, const int64_t *dims, bool is_int,
                        int64_t range) {
    int32_t id = zb_source(b, UN_OP_INPUT, name, rank, dims, is_int, range);
    if (id < 0)
        return -1;
    un_model *m = b->m;
    UN_ASSERT(m->n_inputs < UN_ZOO_MAX_INPUTS);
    m->inputs[m->n_inputs++] =
        (un_model_input){.name = name, .node = id, .is_int = is_int, .int_range = range};
    return id;
}

static int32_t zb_weight(zb *b, const char *base, const char *suffix, int rank,
                         const int64_t *dims) {
    char name[ZB_NAME];
    return zb_source(b, UN_OP_WEIGHT, zb_nm(name, base, suffix), rank, dims, false, 0);
}

/* ---- layers -----------------------------------------------------------------------------------
 */

/* y = act(x W [+ bias]), W [in, out] named base.w (and base.b). */
static int32_t zb_linear(zb *b, int32_t x, int64_t out, const char *act, bool bias,
                         const char *base) {
    int32_t w = zb_weight(b, base, "w", 2, (int64_t[]){zb_dim(b, x, -1), out});
    int32_t bb = bias ? zb_weight(b, base, "b", 1, (int64_t[]){out}) : -1;
    zp z = zp_new(UN_OP_LINEAR, b);
    zp_enum(b, &z, "activation", act);
    zp_int(b, &z, "use_bias", bias);
    return zb_add(b, &z, bias ? 3 : 2, (int32_t[]){x, w, bb}, base);
}

static int32_t zb_unary(zb *b, un_op op, int32_t x, const char *name) {
    zp z = zp_new(op, b);
    return zb_add(b, &z, 1, &x, name);
}

static int32_t zb_binary(zb *b, un_op op, int32_t x, int32_t y, const char *name) {
    zp z = zp_new(op, b);
    return zb_add(b, &z, 2, (int32_t[]){x, y}, name);
}

static int32_t zb_dropout(zb *b, int32_t x, int rate_pct, const char *name) {
    zp z = zp_new(UN_OP_DROPOUT, b);
    zp_int(b, &z, "rate_pct", rate_pct);
    zp_int(b, &z, "seed", ++b->n_dropout);
    return zb_add(b, &z, 1, &x, name);
}

/* layer_norm over the last dim with gamma/beta named base.gamma, base.beta. */
static int32_t zb_layer_norm(zb *b, int32_t x, const char *base) {
    int64_t d = zb_dim(b, x, -1);
    int32_t g = zb_weight(b, base, "gamma", 1, (int64_t[]){d});
    int32_t be = zb_weight(b, base, "beta", 1, (int64_t[]){d});
    zp z = zp_new(UN_OP_LAYER_NORM, b);
    return zb_add(b, &z, 3, (int32_t[]){x, g, be}, base);
}

static int32_t zb_batch_norm(zb *b, int32_t x, const char *base) {
    int64_t c = zb_dim(b, x, 1);
    int32_t g = zb_weight(b, base, "gamma", 1, (int64_t[]){c});
    int32_t be = zb_weight(b, base, "beta", 1, (int64_t[]){c});
    zp z = zp_new(UN_OP_BATCH_NORM, b);
    b->m->batch_bn = true;
    return zb_add(b, &z, 3, (int32_t[]){x, g, be}, base);
}

/* Self-attention: q = k = v = x [b, s, h]; weights base.wq .. base.wo [h, h]; causal: position i
 * attends only to positions j <= i. */
static int32_t zb_attention(zb *b, int32_t x, int64_t heads, bool causal, const char *base) {
    int64_t h = zb_dim(b, x, -1);
    static const char *const wn[4] = {"wq", "wk", "wv", "wo"};
    int32_t in[7] = {x, x, x};
    for (int i = 0; i < 4; i++)
        in[3 + i] = zb_weight(b, base, wn[i], 2, (int64_t[]){h, h});
    zp z = zp_new(UN_OP_MULTIHEAD_ATTENTION, b);
    zp_int(b, &z, "heads", heads);
    zp_int(b, &z, "causal", causal);
    return zb_add(b, &z, 7, in, base);
}

static int32_t zb_reshape(zb *b, int32_t x, int rank, const int64_t *dims, const char *name) {
    zp z = zp_new(UN_OP_RESHAPE, b);
    zp_list(b, &z, "shape", rank, dims);
    if (b->st == UN_OK && x >= 0 && zb_dim(b, x, 0) != dims[0])
        b->m->batch_rs = true;
    return zb_add(b, &z, 1, &x, name);
}

static int32_t zb_concat(zb *b, int32_t x, int32_t y, int axis, const char *name) {
    zp z = zp_new(UN_OP_CONCAT, b);
    zp_int(b, &z, "axis", axis);
    return zb_add(b, &z, 2, (int32_t[]){x, y}, name);
}

/* Joins n tensors along axis by a left fold of binary concats base.cat1 .. base.cat{n-1}. */
static int32_t zb_concat_n(zb *b, const int32_t *xs, int n, int axis, const char *base) {
    int32_t t = xs[0];
    for (int i = 1; i < n; i++) {
        char name[ZB_NAME], sfx[16];
        snprintf(sfx, sizeof sfx, "cat%d", i);
        t = zb_concat(b, t, xs[i], axis, i == n - 1 ? base : zb_nm(name, base, sfx));
    }
    return t;
}

static int32_t zb_embedding(zb *b, int32_t idx, int64_t rows, int64_t dim, const char *base) {
    int32_t t = zb_weight(b, base, "table", 2, (int64_t[]){rows, dim});
    zp z = zp_new(UN_OP_EMBEDDING, b);
    zp_enum(b, &z, "aggr", "sum");
    return zb_add(b, &z, 2, (int32_t[]){idx, t}, base);
}

typedef struct conv_cfg {
    int64_t cout, kh, kw, sh, sw, ph, pw, groups;
} conv_cfg;

/* conv (no bias, weight base.w [cout, cin/groups, kh, kw]) + batch_norm (base.bn) [+ relu]. */
static int32_t zb_conv_bn(zb *b, int32_t x, conv_cfg c, bool relu, const char *base) {
    int64_t g = c.groups ? c.groups : 1;
    int32_t w = zb_weight(b, base, "w", 4, (int64_t[]){c.cout, zb_dim(b, x, 1) / g, c.kh, c.kw});
    zp z = zp_new(UN_OP_CONV2D, b);
    zp_int(b, &z, "stride_h", c.sh ? c.sh : 1);
    zp_int(b, &z, "stride_w", c.sw ? c.sw : 1);
    zp_int(b, &z, "pad_h", c.ph);
    zp_int(b, &z, "pad_w", c.pw);
    zp_int(b, &z, "groups", g);
    char name[ZB_NAME];
    int32_t y = zb_add(b, &z, 2, (int32_t[]){x, w}, base);
    y = zb_batch_norm(b, y, zb_nm(name, base, "bn"));
    if (relu)
        y = zb_unary(b, UN_OP_RELU, y, zb_nm(name, base, "relu"));
    return y;
}

/* Square conv + bn + relu: k x k, stride s, padding p. */
static int32_t zb_cbr(zb *b, int32_t x, int64_t cout, int64_t k, int64_t s, int64_t p,
                      const char *base) {
    return zb_conv_bn(b, x, (conv_cfg){cout, k, k, s, s, p, p, 1}, true, base);
}

static int32_t zb_pool(zb *b, int32_t x, const char *type, int64_t k, int64_t s, int64_t p,
                       const char *name) {
    zp z = zp_new(UN_OP_POOL2D, b);
    zp_int(b, &z, "kernel_h", k);
    zp_int(b, &z, "kernel_w", k);
    zp_int(b, &z, "stride_h", s);
    zp_int(b, &z, "stride_w", s);
    zp_int(b, &z, "pad_h", p);
    zp_int(b, &z, "pad_w", p);
    zp_enum(b, &z, "type", type);
    return zb_add(b, &z, 1, &x, name);
}

/* Classification head of the conv nets: global average pool, flat, [dropout], linear + bias. */
static int32_t zb_conv_head(zb *b, int32_t x, int dropout_pct, int64_t classes) {
    int32_t t = zb_pool(b, x, "avg", zb_dim(b, x, 2), 1, 0, "avgpool");
    t = zb_unary(b, UN_OP_FLAT, t, "flat");
    if (dropout_pct > 0)
        t = zb_dropout(b, t, dropout_pct, "dropout");
    return zb_linear(b, t, classes, "none", true, "fc");
}

static void zb_ce(zb *b, int64_t n, int64_t classes) {
    b->m->loss = UN_LOSS_CE;
    b->m->n_classes = classes;
    b->m->label_rank = 1;
    b->m->label_dim[0] = n;
}

static void zb_mse(zb *b, int32_t y) {
    b->m->loss = UN_LOSS_MSE;
    b->m->n_classes = 0;
    if (b->st != UN_OK || y < 0)
        return;
    const un_shape *s = zb_shape(b, y);
    b->m->label_rank = s->rank;
    for (int i = 0; i < s->rank; i++)
        b->m->label_dim[i] = s->dim[i];
}

/* ---- the models -------------------------------------------------------------------------------
 */

/* FlexFlow MLP_Unify: two towers of linear layers, added. */
static int32_t build_mlp(zb *b, bool tiny, int64_t B) {
    int64_t in = tiny ? 32 : 1024, width = zb_cfg(b, b->cfg.hidden, tiny ? 32 : 8192);
    int layers = (int)zb_cfg(b, b->cfg.layers, tiny ? 2 : 8);
    int32_t t[2];
    static const char *const inputs[2] = {"x1", "x2"};
    for (int k = 0; k < 2; k++) {
        t[k] = zb_input(b, inputs[k], 2, (int64_t[]){B, in}, false, 0);
        for (int i = 0; i < layers; i++) {
            char name[ZB_NAME];
            snprintf(name, sizeof name, "t%d.l%d", k + 1, i + 1);
            t[k] = zb_linear(b, t[k], width, i + 1 == layers ? "none" : "relu", false, name);
        }
    }
    int32_t y = zb_binary(b, UN_OP_EW_ADD, t[0], t[1], "logits");
    zb_ce(b, B, width);
    return y;
}

/* BERT-style post-LN encoder over an embedded input, per-token regression head. */
static int32_t build_transformer(zb *b, bool tiny, int64_t B) {
    int64_t S = zb_cfg(b, b->cfg.seq, tiny ? 8 : 512),
            H = zb_cfg(b, b->cfg.hidden, tiny ? 32 : 1024);
    int64_t heads = zb_cfg(b, b->cfg.heads, tiny ? 4 : 16),
            F = zb_cfg(b, b->cfg.ffn, tiny ? 128 : 4096);
    int layers = (int)zb_cfg(b, b->cfg.layers, tiny ? 2 : 24);
    int32_t x = zb_input(b, "x", 3, (int64_t[]){B, S, H}, false, 0);
    for (int i = 0; i < layers; i++) {
        char n[ZB_NAME];
#define NM(fmt) (snprintf(n, sizeof n, "l%d." fmt, i + 1), n)
        int32_t a = zb_attention(b, x, heads, false, NM("attn"));
        a = zb_binary(b, UN_OP_EW_ADD, x, a, NM("res1"));
        x = zb_layer_norm(b, a, NM("ln1"));
        int32_t f = zb_linear(b, x, F, "gelu", false, NM("ffn1"));
        f = zb_linear(b, f, H, "none", false, NM("ffn2"));
        f = zb_binary(b, UN_OP_EW_ADD, x, f, NM("res2"));
        x = zb_layer_norm(b, f, NM("ln2"));
#undef NM
    }
    int32_t y = zb_linear(b, x, 1, "none", false, "head");
    zb_mse(b, y);
    return y;
}

static int32_t zb_mlp_stack(zb *b, int32_t t, const int64_t *widths, int n, const char *last_act,
                            bool bias, const char *prefix) {
    for (int i = 0; i < n; i++) {
        char name[ZB_NAME];
        snprintf(name, sizeof name, "%s%d", prefix, i + 1);
        t = zb_linear(b, t, widths[i], i + 1 == n ? last_act : "relu", bias, name);
    }
    return t;
}

static const char *const sparse_names[4] = {"sparse1", "sparse2", "sparse3", "sparse4"};
static const char *const emb_names[4] = {"emb1", "emb2", "emb3", "emb4"};

/* DLRM: bottom MLP over dense features, embedding bags, concat interaction, top MLP. */
static int32_t build_dlrm(zb *b, bool tiny, int64_t B) {
    int64_t rows = tiny ? 100 : 1000000, dim = tiny ? 8 : 64, bag = tiny ? 2 : 1;
    int64_t h = zb_cfg(b, b->cfg.hidden, dim); /* the MLPs' width */
    int64_t bot[2] = {h, h}, top[2] = {h, 2};
    int32_t feats[5];
    int32_t dense = zb_input(b, "dense", 2, (int64_t[]){B, 4}, false, 0);
    feats[0] = zb_mlp_stack(b, dense, bot, 2, "relu", true, "bot");
    for (int i = 0; i < 4; i++) {
        int32_t s = zb_input(b, sparse_names[i], 2, (int64_t[]){B, bag}, true, rows);
        feats[1 + i] = zb_embedding(b, s, rows, dim, emb_names[i]);
    }
    int32_t z = zb_concat_n(b, feats, 5, 1, "interact");
    int32_t y = zb_mlp_stack(b, z, top, 2, "none", true, "top");
    zb_ce(b, B, 2);
    return y;
}

/* XDL: embeddings concatenated, then a wide MLP with a sigmoid output. */
static int32_t build_xdl(zb *b, bool tiny, int64_t B) {
    int64_t rows = tiny ? 100 : 1000000, dim = tiny ? 8 : 64;
    int64_t w = zb_cfg(b, b->cfg.hidden, tiny ? 16 : 256);
    int64_t top[3] = {w, w, 2};
    int32_t feats[4];
    for (int i = 0; i < 4; i++) {
        int32_t s = zb_input(b, sparse_names[i], 2, (int64_t[]){B, 1}, true, rows);
        feats[i] = zb_embedding(b, s, rows, dim, emb_names[i]);
    }
    int32_t z = zb_concat_n(b, feats, 4, 1, "interact");
    int32_t y = zb_mlp_stack(b, z, top, 3, "sigmoid", false, "top");
    zb_mse(b, y);
    return y;
}

/* CANDLE-Uno: per-input feature towers, concatenated, then a deep MLP to one output. */
static int32_t build_candle_uno(zb *b, bool tiny, int64_t B) {
    /* FlexFlow's std::map order of input names, which is also the concat order. */
    static const char *const names[7] = {"cell.rnaseq",
                                         "dose1",
                                         "dose2",
                                         "drug1.descriptors",
                                         "drug1.fingerprints",
                                         "drug2.descriptors",
                                         "drug2.fingerprints"};
    static const char kind[7] = {'c', 'd', 'd', 'e', 'f', 'e', 'f'};
    int64_t w = zb_cfg(b, b->cfg.hidden, tiny ? 32 : 4192);
    int tower = (int)zb_cfg(b, b->cfg.layers, tiny ? 2 : 8), head = tiny ? 2 : 4;
    int32_t enc[7];
    for (int i = 0; i < 7; i++) {
        int64_t f = kind[i] == 'd'   ? 1
                    : kind[i] == 'c' ? (tiny ? 16 : 942)
                    : kind[i] == 'e' ? (tiny ? 24 : 5270)
                                     : (tiny ? 20 : 2048);
        int32_t t = zb_input(b, names[i], 2, (int64_t[]){B, f}, false, 0);
        if (kind[i] != 'd')
            for (int l = 0; l < tower; l++) {
                char n[ZB_NAME];
                snprintf(n, sizeof n, "%s.l%d", names[i], l + 1);
                t = zb_linear(b, t, w, "relu", false, n);
                snprintf(n, sizeof n, "%s.l%d.drop", names[i], l + 1);
                t = zb_dropout(b, t, 10, n);
            }
        enc[i] = t;
    }
    int32_t t = zb_concat_n(b, enc, 7, 1, "concat");
    for (int l = 0; l < head; l++) {
        char n[ZB_NAME];
        snprintf(n, sizeof n, "dense%d", l + 1);
        t = zb_linear(b, t, w, "relu", false, n);
        snprintf(n, sizeof n, "dense%d.drop", l + 1);
        t = zb_dropout(b, t, 10, n);
    }
    int32_t y = zb_linear(b, t, 1, "none", false, "out");
    zb_mse(b, y);
    return y;
}

/* ResNeXt bottleneck: 1x1 -> grouped 3x3 (stride s) -> 1x1, plus the (projected) shortcut. */
static int32_t resnext_block(zb *b, int32_t x, int64_t width, int64_t out, int64_t groups,
                             int64_t s, bool project, const char *base) {
    char n[ZB_NAME];
#define NM(sfx) zb_nm(n, base, sfx)
    int32_t t = zb_cbr(b, x, width, 1, 1, 0, NM("conv1"));
    t = zb_conv_bn(b, t, (conv_cfg){width, 3, 3, s, s, 1, 1, groups}, true, NM("conv2"));
    t = zb_conv_bn(b, t, (conv_cfg){out, 1, 1, 1, 1, 0, 0, 1}, false, NM("conv3"));
    int32_t sc = x;
    if (project)
        sc = zb_conv_bn(b, x, (conv_cfg){out, 1, 1, s, s, 0, 0, 1}, false, NM("down"));
    t = zb_binary(b, UN_OP_EW_ADD, t, sc, NM("add"));
    return zb_unary(b, UN_OP_RELU, t, NM("relu"));
#undef NM
}

static int32_t build_resnext50(zb *b, bool tiny, int64_t B) {
    int64_t hw = tiny ? 8 : 224, stem = tiny ? 8 : 64, groups = tiny ? 4 : 32,
            gwidth = tiny ? 2 : 4, classes = tiny ? 10 : 1000;
    static const int paper_blocks[4] = {3, 4, 6, 3}, tiny_blocks[2] = {1, 1};
    const int *blocks = tiny ? tiny_blocks : paper_blocks;
    int stages = tiny ? 2 : 4;
    int32_t x = zb_input(b, "image", 4, (int64_t[]){B, 3, hw, hw}, false, 0);
    int32_t t = tiny ? zb_cbr(b, x, stem, 3, 1, 1, "stem") : zb_cbr(b, x, stem, 7, 2, 3, "stem");
    t = zb_pool(b, t, "max", 3, 2, 1, "stem.pool");
    for (int s = 0; s < stages; s++) {
        /* torchvision: width = planes * base_width / 64 * groups; out = planes * 4 */
        int64_t width = groups * gwidth << s, out = (tiny ? 16 : 256) << s;
        for (int i = 0; i < blocks[s]; i++) {
            char n[ZB_NAME];
            snprintf(n, sizeof n, "s%d.b%d", s + 1, i + 1);
            t = resnext_block(b, t, width, out, groups, i == 0 && s > 0 ? 2 : 1, i == 0, n);
        }
    }
    int32_t y = zb_conv_head(b, t, 0, classes);
    zb_ce(b, B, classes);
    return y;
}

/* Inception-v3 blocks (torchvision's InceptionA..E); every channel count is divided by `d`. */
static int32_t inception_a(zb *b, int32_t x, int64_t pool_features, int64_t d, const char *base) {
    char n[ZB_NAME];
#define NM(sfx) zb_nm(n, base, sfx)
    int32_t br[4];
    br[0] = zb_cbr(b, x, 64 / d, 1, 1, 0, NM("b1x1"));
    br[1] = zb_cbr(b, x, 48 / d, 1, 1, 0, NM("b5x5_1"));
    br[1] = zb_cbr(b, br[1], 64 / d, 5, 1, 2, NM("b5x5_2"));
    br[2] = zb_cbr(b, x, 64 / d, 1, 1, 0, NM("b3x3dbl_1"));
    br[2] = zb_cbr(b, br[2], 96 / d, 3, 1, 1, NM("b3x3dbl_2"));
    br[2] = zb_cbr(b, br[2], 96 / d, 3, 1, 1, NM("b3x3dbl_3"));
    br[3] = zb_pool(b, x, "avg", 3, 1, 1, NM("bpool_avg"));
    br[3] = zb_cbr(b, br[3], pool_features / d, 1, 1, 0, NM("bpool"));
    return zb_concat_n(b, br, 4, 1, base);
#undef NM
}

static int32_t inception_b(zb *b, int32_t x, int64_t d, const char *base) {
    char n[ZB_NAME];
#define NM(sfx) zb_nm(n, base, sfx)
    int32_t br[3];
    br[0] = zb_cbr(b, x, 384 / d, 3, 2, 0, NM("b3x3"));
    br[1] = zb_cbr(b, x, 64 / d, 1, 1, 0, NM("b3x3dbl_1"));
    br[1] = zb_cbr(b, br[1], 96 / d, 3, 1, 1, NM("b3x3dbl_2"));
    br[1] = zb_cbr(b, br[1], 96 / d, 3, 2, 0, NM("b3x3dbl_3"));
    br[2] = zb_pool(b, x, "max", 3, 2, 0, NM("bpool"));
    return zb_concat_n(b, br, 3, 1, base);
#undef NM
}

/* 1x7 (horizontal) or 7x1 (vertical) conv + bn + relu. */
static int32_t zb_c17(zb *b, int32_t x, int64_t cout, int64_t k, bool vertical, const char *n) {
    conv_cfg c = vertical ? (conv_cfg){cout, k, 1, 1, 1, k / 2, 0, 1}
                          : (conv_cfg){cout, 1, k, 1, 1, 0, k / 2, 1};
    return zb_conv_bn(b, x, c, true, n);
}

static int32_t inception_c(zb *b, int32_t x, int64_t c7, int64_t d, const char *base) {
    char n[ZB_NAME];
#define NM(sfx) zb_nm(n, base, sfx)
    int32_t br[4];
    c7 /= d;
    br[0] = zb_cbr(b, x, 192 / d, 1, 1, 0, NM("b1x1"));
    br[1] = zb_cbr(b, x, c7, 1, 1, 0, NM("b7x7_1"));
    br[1] = zb_c17(b, br[1], c7, 7, false, NM("b7x7_2"));
    br[1] = zb_c17(b, br[1], 192 / d, 7, true, NM("b7x7_3"));
    br[2] = zb_cbr(b, x, c7, 1, 1, 0, NM("b7x7dbl_1"));
    br[2] = zb_c17(b, br[2], c7, 7, true, NM("b7x7dbl_2"));
    br[2] = zb_c17(b, br[2], c7, 7, false, NM("b7x7dbl_3"));
    br[2] = zb_c17(b, br[2], c7, 7, true, NM("b7x7dbl_4"));
    br[2] = zb_c17(b, br[2], 192 / d, 7, false, NM("b7x7dbl_5"));
    br[3] = zb_pool(b, x, "avg", 3, 1, 1, NM("bpool_avg"));
    br[3] = zb_cbr(b, br[3], 192 / d, 1, 1, 0, NM("bpool"));
    return zb_concat_n(b, br, 4, 1, base);
#undef NM
}

static int32_t inception_d(zb *b, int32_t x, int64_t d, const char *base) {
    char n[ZB_NAME];
#define NM(sfx) zb_nm(n, base, sfx)
    int32_t br[3];
    br[0] = zb_cbr(b, x, 192 / d, 1, 1, 0, NM("b3x3_1"));
    br[0] = zb_cbr(b, br[0], 320 / d, 3, 2, 0, NM("b3x3_2"));
    br[1] = zb_cbr(b, x, 192 / d, 1, 1, 0, NM("b7x7x3_1"));
    br[1] = zb_c17(b, br[1], 192 / d, 7, false, NM("b7x7x3_2"));
    br[1] = zb_c17(b, br[1], 192 / d, 7, true, NM("b7x7x3_3"));
    br[1] = zb_cbr(b, br[1], 192 / d, 3, 2, 0, NM("b7x7x3_4"));
    br[2] = zb_pool(b, x, "max", 3, 2, 0, NM("bpool"));
    return zb_concat_n(b, br, 3, 1, base);
#undef NM
}

static int32_t inception_e(zb *b, int32_t x, int64_t d, const char *base) {
    char n[ZB_NAME];
#define NM(sfx) zb_nm(n, base, sfx)
    int32_t br[4], pair[2];
    br[0] = zb_cbr(b, x, 320 / d, 1, 1, 0, NM("b1x1"));
    int32_t t = zb_cbr(b, x, 384 / d, 1, 1, 0, NM("b3x3_1"));
    pair[0] = zb_conv_bn(b, t, (conv_cfg){384 / d, 1, 3, 1, 1, 0, 1, 1}, true, NM("b3x3_2a"));
    pair[1] = zb_conv_bn(b, t, (conv_cfg){384 / d, 3, 1, 1, 1, 1, 0, 1}, true, NM("b3x3_2b"));
    br[1] = zb_concat_n(b, pair, 2, 1, NM("b3x3"));
    t = zb_cbr(b, x, 448 / d, 1, 1, 0, NM("b3x3dbl_1"));
    t = zb_cbr(b, t, 384 / d, 3, 1, 1, NM("b3x3dbl_2"));
    pair[0] = zb_conv_bn(b, t, (conv_cfg){384 / d, 1, 3, 1, 1, 0, 1, 1}, true, NM("b3x3dbl_3a"));
    pair[1] = zb_conv_bn(b, t, (conv_cfg){384 / d, 3, 1, 1, 1, 1, 0, 1}, true, NM("b3x3dbl_3b"));
    br[2] = zb_concat_n(b, pair, 2, 1, NM("b3x3dbl"));
    br[3] = zb_pool(b, x, "avg", 3, 1, 1, NM("bpool_avg"));
    br[3] = zb_cbr(b, br[3], 192 / d, 1, 1, 0, NM("bpool"));
    return zb_concat_n(b, br, 4, 1, base);
#undef NM
}

static int32_t build_inception_v3(zb *b, bool tiny, int64_t B) {
    int64_t hw = tiny ? 11 : 299, classes = tiny ? 10 : 1000, d = tiny ? 16 : 1;
    int32_t x = zb_input(b, "image", 4, (int64_t[]){B, 3, hw, hw}, false, 0);
    int32_t t;
    if (tiny) {
        t = zb_cbr(b, x, 192 / d, 3, 1, 1, "stem");
        t = inception_a(b, t, 64, d, "mixed_5");
        t = inception_b(b, t, d, "mixed_6a");
        t = inception_c(b, t, 128, d, "mixed_6b");
        t = inception_d(b, t, d, "mixed_7a");
        t = inception_e(b, t, d, "mixed_7b");
    } else {
        t = zb_cbr(b, x, 32, 3, 2, 0, "conv1a");
        t = zb_cbr(b, t, 32, 3, 1, 0, "conv2a");
        t = zb_cbr(b, t, 64, 3, 1, 1, "conv2b");
        t = zb_pool(b, t, "max", 3, 2, 0, "pool1");
        t = zb_cbr(b, t, 80, 1, 1, 0, "conv3b");
        t = zb_cbr(b, t, 192, 3, 1, 0, "conv4a");
        t = zb_pool(b, t, "max", 3, 2, 0, "pool2");
        t = inception_a(b, t, 32, d, "mixed_5b");
        t = inception_a(b, t, 64, d, "mixed_5c");
        t = inception_a(b, t, 64, d, "mixed_5d");
        t = inception_b(b, t, d, "mixed_6a");
        t = inception_c(b, t, 128, d, "mixed_6b");
        t = inception_c(b, t, 160, d, "mixed_6c");
        t = inception_c(b, t, 160, d, "mixed_6d");
        t = inception_c(b, t, 192, d, "mixed_6e");
        t = inception_d(b, t, d, "mixed_7a");
        t = inception_e(b, t, d, "mixed_7b");
        t = inception_e(b, t, d, "mixed_7c");
    }
    int32_t y = zb_conv_head(b, t, 50, classes);
    zb_ce(b, B, classes);
    return y;
}

/* Byte-level pre-LN transformer LM. Its attention is causal: the label of position t is token
 * t + 1, so position t must not see it (without the mask the next byte leaks into the context). */
static int32_t build_charlm(zb *b, bool tiny, int64_t B) {
    int64_t T = zb_cfg(b, b->cfg.seq, tiny ? 32 : 64),
            D = zb_cfg(b, b->cfg.hidden, tiny ? 32 : 128);
    int64_t heads = zb_cfg(b, b->cfg.heads, 4), F = zb_cfg(b, b->cfg.ffn, tiny ? 128 : 512),
            V = 256;
    int blocks = (int)zb_cfg(b, b->cfg.layers, tiny ? 1 : 2);
    int32_t tok = zb_input(b, "tokens", 2, (int64_t[]){B * T, 1}, true, V);
    int32_t x = zb_embedding(b, tok, V, D, "embed");
    x = zb_reshape(b, x, 3, (int64_t[]){B, T, D}, "embed.seq");
    for (int i = 0; i < blocks; i++) {
        char n[ZB_NAME];
#define NM(fmt) (snprintf(n, sizeof n, "b%d." fmt, i + 1), n)
        int32_t h = zb_layer_norm(b, x, NM("ln1"));
        h = zb_attention(b, h, heads, true, NM("attn"));
        x = zb_binary(b, UN_OP_EW_ADD, x, h, NM("res1"));
        h = zb_layer_norm(b, x, NM("ln2"));
        h = zb_linear(b, h, F, "gelu", false, NM("ffn1"));
        h = zb_linear(b, h, D, "none", false, NM("ffn2"));
        x = zb_binary(b, UN_OP_EW_ADD, x, h, NM("res2"));
#undef NM
    }
    x = zb_layer_norm(b, x, "ln_f");
    x = zb_reshape(b, x, 2, (int64_t[]){B * T, D}, "flat_tokens");
    int32_t y = zb_linear(b, x, V, "none", false, "logits");
    zb_ce(b, B * T, V);
    return y;
}

/* ---- the table --------------------------------------------------------------------------------
 */

typedef struct zoo_entry {
    const char *name;
    int32_t (*build)(zb *b, bool tiny, int64_t batch);
    int64_t batch_paper, batch_tiny;
} zoo_entry;

static const zoo_entry zoo[] = {
    {"mlp", build_mlp, 64, 16},
    {"transformer", build_transformer, 8, 16},
    {"dlrm", build_dlrm, 64, 16},
    {"xdl", build_xdl, 64, 16},
    {"candle_uno", build_candle_uno, 64, 16},
    {"resnext50", build_resnext50, 16, 8},
    {"inception_v3", build_inception_v3, 64, 8},
    {"charlm", build_charlm, 32, 8},
};
#define ZOO_COUNT ((int)(sizeof zoo / sizeof zoo[0]))

static const char *const zoo_names[ZOO_COUNT] = {
    "mlp", "transformer", "dlrm", "xdl", "candle_uno", "resnext50", "inception_v3", "charlm",
};

const char *const *un_zoo_names(int *n) {
    if (n)
        *n = ZOO_COUNT;
    return zoo_names;
}

/* The config fields each model takes (bit i: field i of config_keys). */
static const char *const config_keys[6] = {"batch", "layers", "hidden", "heads", "ffn", "seq"};

static int64_t *config_field(un_zoo_config *c, int i) {
    int64_t *f[6] = {&c->batch, &c->layers, &c->hidden, &c->heads, &c->ffn, &c->seq};
    return f[i];
}

static unsigned config_takes(const char *model) {
    if (strcmp(model, "mlp") == 0 || strcmp(model, "candle_uno") == 0)
        return 1u | 2u | 4u;
    if (strcmp(model, "transformer") == 0 || strcmp(model, "charlm") == 0)
        return 63u;
    if (strcmp(model, "xdl") == 0 || strcmp(model, "dlrm") == 0)
        return 1u | 4u;
    return 1u;
}

un_status un_zoo_config_parse(un_ctx *ctx, const char *text, un_zoo_config *out) {
    memset(out, 0, sizeof *out);
    const char *p = text ? text : "";
    if (!*p)
        return un_ctx_error(ctx, UN_ERR_INVALID, "--config: empty (expected key=value,...)");
    for (;;) {
        const char *eq = strchr(p, '='), *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        if (!eq || eq > end || eq == p)
            return un_ctx_error(ctx, UN_ERR_INVALID, "--config: '%.*s' is not key=value",
                                (int)(end - p), p);
        int k = -1;
        for (int i = 0; i < 6; i++)
            if ((size_t)(eq - p) == strlen(config_keys[i]) &&
                strncmp(p, config_keys[i], (size_t)(eq - p)) == 0)
                k = i;
        if (k < 0)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "--config: unknown key '%.*s' (known: batch, layers, hidden, "
                                "heads, ffn, seq)",
                                (int)(eq - p), p);
        char *stop;
        long long v = strtoll(eq + 1, &stop, 10);
        if (stop != end || eq + 1 == end || v < 1 || v > (1LL << 30))
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "--config: %s=%.*s is not a positive integer up to 2^30",
                                config_keys[k], (int)(end - eq - 1), eq + 1);
        *config_field(out, k) = v;
        if (!comma)
            return UN_OK;
        p = comma + 1;
    }
}

un_status un_zoo_build(un_ctx *ctx, const un_spec *spec, const char *name, bool tiny, int64_t batch,
                       un_model *out) {
    un_zoo_config c = {.batch = batch > 0 ? batch : 0};
    if (batch > ((int64_t)1 << 30)) {
        if (out)
            memset(out, 0, sizeof *out);
        return un_ctx_error(ctx, UN_ERR_INVALID, "model %s: batch %lld too large",
                            name ? name : "?", (long long)batch);
    }
    return un_zoo_build_config(ctx, spec, name, tiny, &c, out);
}

un_status un_zoo_build_config(un_ctx *ctx, const un_spec *spec, const char *name, bool tiny,
                              const un_zoo_config *cfg, un_model *out) {
    if (!out)
        return un_ctx_error(ctx, UN_ERR_INVALID, "zoo: no output model");
    memset(out, 0, sizeof *out);
    if (!spec || !name)
        return un_ctx_error(ctx, UN_ERR_INVALID, "zoo: no spec or model name");
    const zoo_entry *e = NULL;
    for (int i = 0; i < ZOO_COUNT; i++)
        if (strcmp(zoo[i].name, name) == 0)
            e = &zoo[i];
    if (!e) {
        char known[256] = "";
        for (int i = 0; i < ZOO_COUNT; i++) {
            strncat(known, i ? ", " : "", sizeof known - strlen(known) - 1);
            strncat(known, zoo[i].name, sizeof known - strlen(known) - 1);
        }
        return un_ctx_error(ctx, UN_ERR_INVALID, "unknown model '%s' (known: %s)", name, known);
    }
    un_zoo_config c;
    memset(&c, 0, sizeof c);
    if (cfg)
        c = *cfg;
    for (int i = 0; i < 6; i++)
        if (*config_field(&c, i) > 0 && !(config_takes(e->name) >> i & 1u))
            return un_ctx_error(ctx, UN_ERR_INVALID, "--config: model %s does not take '%s'",
                                e->name, config_keys[i]);
    int64_t batch = c.batch > 0 ? c.batch : tiny ? e->batch_tiny : e->batch_paper;
    if (batch > ((int64_t)1 << 30))
        return un_ctx_error(ctx, UN_ERR_INVALID, "model %s: batch %lld too large", name,
                            (long long)batch);
    zb b = {.ctx = ctx, .spec = spec, .g = un_graph_new(spec), .m = out, .st = UN_OK, .cfg = c};
    snprintf(out->name, sizeof out->name, "%s", e->name);
    out->batch = batch;
    out->tiny = tiny;
    int32_t y = e->build(&b, tiny, batch);
    if (b.st == UN_OK && y < 0)
        b.st = un_ctx_error(ctx, UN_ERR_INVALID, "model %s: no output", name);
    if (b.st == UN_OK)
        b.st = un_graph_set_outputs(ctx, b.g, (un_ref[]){{y, 0}}, 1);
    if (b.st != UN_OK) {
        un_graph_free(b.g);
        memset(out, 0, sizeof *out);
        return b.st;
    }
    out->graph = b.g;
    return UN_OK;
}

void un_model_deinit(un_model *m) {
    if (!m)
        return;
    un_graph_free(m->graph);
    memset(m, 0, sizeof *m);
}

int64_t un_zoo_param_count(const un_model *m) {
    int64_t n = 0;
    int32_t nodes = m && m->graph ? un_graph_node_count(m->graph) : 0;
    for (int32_t i = 0; i < nodes; i++)
        if (un_graph_node(m->graph, i)->op == UN_OP_WEIGHT)
            n += un_shape_numel(un_graph_shape(m->graph, (un_ref){i, 0}));
    return n;
}

int32_t un_zoo_weight_count(const un_model *m) {
    int32_t n = 0, nodes = m && m->graph ? un_graph_node_count(m->graph) : 0;
    for (int32_t i = 0; i < nodes; i++)
        n += un_graph_node(m->graph, i)->op == UN_OP_WEIGHT;
    return n;
}

un_ref un_zoo_output(const un_model *m) {
    UN_ASSERT(m && m->graph && un_graph_output_count(m->graph) == 1);
    return un_graph_output(m->graph, 0);
}
