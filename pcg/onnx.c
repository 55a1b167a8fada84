/* onnx.c - ONNX import (onnx.h): the only file that includes protobuf-c and the code protoc-c
 * generates from onnx.proto (UN_USE_ONNX, set by the Makefile when both are found). Each ONNX
 * value is either a graph tensor (a node output of the PCG being built), a constant (an
 * initializer or a folded shape computation, kept as doubles), or a pending zero Pad that the
 * next Conv or AveragePool takes as its padding. Nodes are mapped one by one in file order
 * (ONNX orders them topologically); a few patterns span nodes (MatMul + bias Add -> linear with
 * bias, the Erf form of Gelu, the ReduceMean form of LayerNormalization). */
#include "pcg/onnx.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool un_onnx_is_path(const char *path) {
    size_t n = path ? strlen(path) : 0;
    return n > 5 && strcmp(path + n - 5, ".onnx") == 0;
}

void un_onnx_deinit(un_onnx *m) {
    if (!m)
        return;
    un_graph_free(m->graph);
    free(m->values);
    memset(m, 0, sizeof *m);
}

#ifndef UN_USE_ONNX

bool un_onnx_available(void) { return false; }

un_status un_onnx_import(un_ctx *ctx, const un_spec *spec, const char *path,
                         const char *input_shape, un_onnx *out) {
    (void)spec;
    (void)input_shape;
    memset(out, 0, sizeof *out);
    return un_ctx_error(ctx, UN_ERR_UNAVAILABLE,
                        "%s: ONNX import is not in this build (protoc-c or protobuf-c missing)",
                        path);
}

#else

#include <protobuf-c/protobuf-c.h>

#include "onnx.pb-c.h"

bool un_onnx_available(void) { return true; }

enum { OV_GRAPH, OV_CONST, OV_PAD };

typedef struct oval {
    const char *name; /* borrowed from the model */
    int kind;
    un_ref ref; /* OV_GRAPH; OV_PAD: the padded tensor */
    int rank;   /* OV_CONST */
    int64_t dim[UN_MAX_DIMS];
    int64_t n;            /* OV_CONST: elements */
    double *d;            /* OV_CONST: values (owned) */
    bool is_int;          /* int tensor (OV_CONST, or a graph input of int type) */
    bool init;            /* an initializer (or one transposed): may become a weight */
    const char *label;    /* the initializer's name, for the weight made from it */
    int32_t weight;       /* the weight node made from it, or -1 */
    int64_t pad_h, pad_w; /* OV_PAD */
    int input;            /* a graph input not yet made: its index in the input list, else -1 */
} oval;

typedef struct imp {
    un_ctx *ctx;
    const un_spec *spec;
    const char *path;
    const Onnx__GraphProto *gp;
    un_graph *g;
    oval *v;
    int nv, cap;
    bool *skip;                 /* nodes consumed by a pattern */
    const Onnx__NodeProto *cur; /* the node being mapped (errors name it) */
    int32_t *wnode;             /* weight nodes in creation (= id) order */
    float **wdata;              /* their values (owned) */
    int nw, wcap;
    int64_t params; /* initializer elements used as parameters */
} imp;

/* An optional string of the model: protobuf-c leaves an absent one NULL. */
static const char *S(const char *s) { return s ? s : ""; }

/* A constant's value as an integer, clamped (a cast of a huge double or NaN is undefined). */
static int64_t toi(double x) {
    return x >= -4e18 && x <= 4e18 ? (int64_t)x
           : x > 0                 ? (int64_t)4e18
           : x < 0                 ? -(int64_t)4e18
                                   : 0;
}

/* ---- errors ---- */

__attribute__((format(printf, 2, 3))) static un_status fail(imp *m, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (!m->cur)
        return un_ctx_error(m->ctx, UN_ERR_INVALID, "%s: %s", m->path, why);
    const char *nm = m->cur->name && *m->cur->name            ? m->cur->name
                     : m->cur->n_output && *m->cur->output[0] ? m->cur->output[0]
                                                              : "?";
    return un_ctx_error(m->ctx, UN_ERR_INVALID, "%s: node '%s' (%s): %s", m->path, nm,
                        m->cur->op_type ? m->cur->op_type : "?", why);
}

/* ---- values ---- */

static int val_find(const imp *m, const char *name) {
    for (int i = m->nv - 1; i >= 0; i--)
        if (strcmp(m->v[i].name, name) == 0)
            return i;
    return -1;
}

/* The value array is sized once for every initializer, input and node output, so pointers into
 * it stay valid while a node adds its outputs. */
static oval *val_new(imp *m, const char *name) {
    UN_ASSERT(m->nv < m->cap);
    oval *o = &m->v[m->nv++];
    memset(o, 0, sizeof *o);
    o->name = name;
    o->weight = -1;
    o->input = -1;
    return o;
}

/* Input i of the current node: its value index, or -1 when absent ("" or beyond the list). */
static int in_idx(imp *m, int i, un_status *st) {
    if (i >= (int)m->cur->n_input || !*m->cur->input[i])
        return -1;
    int k = val_find(m, m->cur->input[i]);
    if (k < 0)
        *st = fail(m, "input '%s' is not produced by any earlier node", m->cur->input[i]);
    return k;
}

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *nd, const char *name) {
    for (size_t i = 0; i < nd->n_attribute; i++)
        if (strcmp(S(nd->attribute[i]->name), name) == 0)
            return nd->attribute[i];
    return NULL;
}

static int64_t attr_i(const Onnx__NodeProto *nd, const char *name, int64_t dflt) {
    const Onnx__AttributeProto *a = attr(nd, name);
    return a && a->has_i ? a->i : dflt;
}

static double attr_f(const Onnx__NodeProto *nd, const char *name, double dflt) {
    const Onnx__AttributeProto *a = attr(nd, name);
    return a && a->has_f ? a->f : dflt;
}

/* A list attribute into v (at most max items): its length, or -1 when absent. */
static int attr_ints(const Onnx__NodeProto *nd, const char *name, int64_t *v, int max) {
    const Onnx__AttributeProto *a = attr(nd, name);
    if (!a)
        return -1;
    int n = (int)a->n_ints < max ? (int)a->n_ints : max;
    for (int i = 0; i < n; i++)
        v[i] = a->ints[i];
    return (int)a->n_ints;
}

/* A TensorProto into a constant value. */
static un_status tensor_load(imp *m, const Onnx__TensorProto *t, oval *o) {
    const char *nm = t->name && *t->name ? t->name : o->name;
    if (t->n_dims > UN_MAX_DIMS)
        return fail(m, "tensor '%s' has rank %zu (at most %d)", nm, t->n_dims, UN_MAX_DIMS);
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return fail(m, "tensor '%s' keeps its data in an external file (not supported)", nm);
    o->kind = OV_CONST;
    o->rank = (int)t->n_dims;
    o->n = 1;
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0 || (t->dims[i] > 0 && o->n > ((int64_t)1 << 40) / t->dims[i]))
            return fail(m, "tensor '%s' has a bad dim %lld", nm, (long long)t->dims[i]);
        o->dim[i] = t->dims[i];
        o->n *= t->dims[i];
    }
    int dt = t->has_data_type ? t->data_type : 0;
    size_t es = dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT    ? 4
                : dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE ? 8
                : dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT64  ? 8
                : dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT32  ? 4
                : dt == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL   ? 1
                                                              : 0;
    if (!es)
        return fail(m, "tensor '%s' has data type %d (float, double, int32, int64, bool only)", nm,
                    dt);
    o->is_int =
        dt != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && dt != ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
    size_t have = t->has_raw_data                               ? t->raw_data.len / es
                  : dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT  ? t->n_float_data
                  : dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE ? t->n_double_data
                  : dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT64  ? t->n_int64_data
                                                                : t->n_int32_data;
    if (have != (size_t)o->n || (t->has_raw_data && t->raw_data.len != (size_t)o->n * es))
        return fail(m, "tensor '%s' holds %zu values for %lld elements", nm, have, (long long)o->n);
    o->d = un_xmalloc((size_t)(o->n ? o->n : 1) * sizeof(double));
    for (int64_t i = 0; i < o->n; i++) {
        if (t->has_raw_data) {
            const uint8_t *p = t->raw_data.data + (size_t)i * es;
            if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) {
                float f;
                memcpy(&f, p, 4);
                o->d[i] = f;
            } else if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE) {
                memcpy(&o->d[i], p, 8);
            } else if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT64) {
                int64_t x;
                memcpy(&x, p, 8);
                o->d[i] = (double)x;
            } else if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT32) {
                int32_t x;
                memcpy(&x, p, 4);
                o->d[i] = x;
            } else {
                o->d[i] = p[0] != 0;
            }
        } else {
            o->d[i] = dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT    ? t->float_data[i]
                      : dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE ? t->double_data[i]
                      : dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT64  ? (double)t->int64_data[i]
                                                                    : t->int32_data[i];
        }
    }
    return UN_OK;
}

/* ---- building the graph ---- */

static void pset(un_op op, const un_spec *spec, un_param *p, const char *name, int64_t v) {
    const un_op_spec *os = un_spec_op(spec, op);
    int i = un_spec_param_index(os, name);
    UN_ASSERT(i >= 0);
    p[i].len = -1; /* a single value, not a list */
    p[i].v[0] = v;
}

static void pset_list(un_op op, const un_spec *spec, un_param *p, const char *name, int n,
                      const int64_t *v) {
    const un_op_spec *os = un_spec_op(spec, op);
    int i = un_spec_param_index(os, name);
    UN_ASSERT(i >= 0 && n <= UN_MAX_DIMS);
    p[i].len = n;
    for (int k = 0; k < n; k++)
        p[i].v[k] = v[k];
}

static void params_default(imp *m, un_op op, un_param *p) {
    memset(p, 0, sizeof(un_param) * UN_MAX_PARAMS);
    un_spec_param_defaults(un_spec_op(m->spec, op), p);
}

/* A node name unique in the graph, from an ONNX name (':' would read as an output index). */
static char *uname(imp *m, const char *base, const char *suffix) {
    size_t n = strlen(base) + strlen(suffix) + 24;
    char *s = un_xmalloc(n);
    snprintf(s, n, "%s%s", base, suffix);
    for (char *c = s; *c; c++)
        if (*c == ':' || *c == '"' || *c == ' ')
            *c = '_';
    size_t l = strlen(s);
    for (int k = 2; un_graph_find(m->g, s) >= 0; k++)
        snprintf(s + l, n - l, "~%d", k);
    return s;
}

/* Adds one op; a shape error is reported against the current ONNX node. */
static un_status add(imp *m, un_op op, const un_param *p, const un_ref *in, int n_in,
                     const char *name, const char *suffix, un_ref *out) {
    char *nm = uname(m, name, suffix);
    int32_t id = -1;
    un_status st = un_graph_add(m->ctx, m->g, op, p, in, n_in, nm, &id);
    free(nm);
    if (st != UN_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", un_ctx_errmsg(m->ctx));
        un_ctx_clear(m->ctx); /* the reason again, with the ONNX node it comes from */
        return fail(m, "as %s: %s", un_op_name(op), why);
    }
    *out = (un_ref){id, 0};
    return UN_OK;
}

/* A weight node over values d (n floats, copied) named after `name`. */
static un_status weight_add(imp *m, const char *name, int rank, const int64_t *dims,
                            const double *d, int64_t n, int32_t *id) {
    char *nm = uname(m, name, "");
    un_status st = un_graph_add_input(m->ctx, m->g, nm, UN_OP_WEIGHT, rank, dims, id);
    free(nm);
    if (st != UN_OK)
        return st;
    if (m->nw == m->wcap) {
        m->wcap = m->wcap ? 2 * m->wcap : 64;
        m->wnode = un_xrealloc(m->wnode, (size_t)m->wcap * sizeof *m->wnode);
        m->wdata = un_xrealloc(m->wdata, (size_t)m->wcap * sizeof *m->wdata);
    }
    float *f = un_xmalloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)d[i];
    m->wnode[m->nw] = *id;
    m->wdata[m->nw++] = f;
    return UN_OK;
}

/* An initializer as a weight (made once, counted once as a parameter). */
static un_status as_weight(imp *m, int k, un_ref *r) {
    oval *o = &m->v[k];
    if (o->kind != OV_CONST || !o->init || o->is_int)
        return fail(m, "'%s' is a constant where a trainable float tensor is expected", o->name);
    if (o->weight < 0) {
        un_status st =
            weight_add(m, o->label ? o->label : o->name, o->rank, o->dim, o->d, o->n, &o->weight);
        if (st != UN_OK)
            return st;
        m->params += o->n;
    }
    *r = (un_ref){o->weight, 0};
    return UN_OK;
}

/* A graph input made on first use: float inputs with their dims, int ones by the Gather. */
static un_status graph_of(imp *m, int k, un_ref *r) {
    oval *o = &m->v[k];
    if (o->kind == OV_PAD)
        return fail(m, "a Pad feeds it (Pad is supported only in front of Conv or AveragePool)");
    if (o->kind == OV_CONST)
        return as_weight(m, k, r);
    if (o->input >= 0) {
        if (o->is_int)
            return fail(m, "int input '%s' is used other than as Gather indices", o->name);
        int32_t id;
        char *nm = uname(m, o->name, "");
        un_status st = un_graph_add_input(m->ctx, m->g, nm, UN_OP_INPUT, o->rank, o->dim, &id);
        free(nm);
        if (st != UN_OK)
            return st;
        o->input = -1;
        o->ref = (un_ref){id, 0};
    }
    *r = o->ref;
    return UN_OK;
}

static const un_shape *shape_of(imp *m, un_ref r) { return un_graph_shape(m->g, r); }

static un_status out_graph(imp *m, int i, un_ref r) {
    if (i >= (int)m->cur->n_output || !*m->cur->output[i])
        return UN_OK;
    oval *o = val_new(m, m->cur->output[i]);
    o->kind = OV_GRAPH;
    o->ref = r;
    return UN_OK;
}

static oval *out_const(imp *m, int i, int rank, const int64_t *dim, bool is_int) {
    oval *o = val_new(m, m->cur->n_output > (size_t)i ? m->cur->output[i] : "");
    o->kind = OV_CONST;
    o->rank = rank;
    o->n = 1;
    for (int k = 0; k < rank; k++) {
        o->dim[k] = dim[k];
        o->n *= dim[k];
    }
    o->is_int = is_int;
    o->d = un_xcalloc((size_t)(o->n ? o->n : 1), sizeof(double));
    return o;
}

/* Nodes reading value `name`, their indices into cons (at most max); returns the count. */
static int consumers(const imp *m, const char *name, int *cons, int max) {
    int n = 0;
    for (size_t j = 0; j < m->gp->n_node; j++) {
        const Onnx__NodeProto *nd = m->gp->node[j];
        for (size_t i = 0; i < nd->n_input; i++)
            if (strcmp(nd->input[i], name) == 0) {
                if (n < max)
                    cons[n] = (int)j;
                n++;
                break;
            }
    }
    for (size_t i = 0; i < m->gp->n_output; i++)
        if (strcmp(S(m->gp->output[i]->name), name) == 0)
            n++; /* a graph output is a consumer that no pattern may swallow */
    return n;
}

static const Onnx__NodeProto *single_consumer(const imp *m, const char *name, const char *op,
                                              int *idx) {
    int c[2];
    if (consumers(m, name, c, 2) != 1 || c[0] < 0)
        return NULL;
    const Onnx__NodeProto *nd = m->gp->node[c[0]];
    if (strcmp(nd->op_type, op) != 0 || nd->n_output < 1)
        return NULL;
    *idx = c[0];
    return nd;
}

/* The constant behind a node input by name (initializer or folded), or NULL. */
static const oval *const_of(const imp *m, const char *name) {
    int k = val_find(m, name);
    return k >= 0 && m->v[k].kind == OV_CONST ? &m->v[k] : NULL;
}

/* A scalar constant by name: known already, or the value of a later Constant node (patterns
 * look ahead of the node order). */
static bool const_scalar(const imp *m, const char *name, double *x) {
    const oval *o = const_of(m, name);
    if (o) {
        *x = o->d[0];
        return o->n == 1;
    }
    for (size_t j = 0; j < m->gp->n_node; j++) {
        const Onnx__NodeProto *nd = m->gp->node[j];
        if (strcmp(nd->op_type, "Constant") != 0 || nd->n_output != 1 ||
            strcmp(nd->output[0], name) != 0)
            continue;
        const Onnx__AttributeProto *a = attr(nd, "value");
        if (a && a->has_f) {
            *x = a->f;
            return true;
        }
        const Onnx__TensorProto *t = a ? a->t : NULL;
        int64_t n = 1;
        for (size_t i = 0; t && i < t->n_dims; i++)
            n *= t->dims[i];
        if (!t || n != 1)
            return false;
        if (t->has_raw_data && t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT &&
            t->raw_data.len == 4) {
            float f;
            memcpy(&f, t->raw_data.data, 4);
            *x = f;
            return true;
        }
        if (t->n_float_data == 1) {
            *x = t->float_data[0];
            return true;
        }
        return false;
    }
    return false;
}

/* x ~ num / den with den <= 10^6 (continued fractions), within 1e-7 relative: the first
 * convergent that close, so a float32 constant (known to 6e-8) gets its simplest ratio. */
static bool rational(double x, int64_t *num, int64_t *den) {
    int64_t h0 = 0, h1 = 1, k0 = 1, k1 = 0;
    double r = fabs(x);
    for (int it = 0; it < 40; it++) {
        double a = floor(r);
        if (a > 1e6)
            break;
        int64_t ai = (int64_t)a, h2 = ai * h1 + h0, k2 = ai * k1 + k0;
        if (k2 > 1000000 || h2 > 1000000)
            break;
        h0 = h1, h1 = h2, k0 = k1, k1 = k2;
        if (fabs((double)h1 / (double)k1 - fabs(x)) <= 1e-7 * fabs(x))
            break;
        if (r - a < 1e-12)
            break;
        r = 1.0 / (r - a);
    }
    if (k1 == 0 || fabs((double)h1 / (double)k1 - fabs(x)) > 1e-7 * (fabs(x) > 1e-30 ? fabs(x) : 1))
        return false;
    *num = x < 0 ? -h1 : h1;
    *den = k1;
    return true;
}

/* ---- constant folding (shape arithmetic) ---- */

/* Slice bounds [*b, *e) over n items as ONNX reads them: negative counts from the end, then
 * clamped to [0, n] with *e >= *b. */
static void clamp_range(int64_t n, int64_t *b, int64_t *e) {
    *b = *b < 0 ? *b + n : *b;
    *e = *e < 0 ? *e + n : *e;
    *b = *b < 0 ? 0 : *b > n ? n : *b;
    *e = *e < *b ? *b : *e > n ? n : *e;
}

/* The current Transpose's perm for a tensor of this rank (default: reversed dims). */
static un_status perm_of(imp *m, int rank, int64_t *perm) {
    int np = attr_ints(m->cur, "perm", perm, UN_MAX_DIMS);
    if (np < 0)
        for (int i = 0; i < rank; i++)
            perm[i] = rank - 1 - i;
    else if (np != rank)
        return fail(m, "perm of %d dims for rank %d", np, rank);
    bool seen[UN_MAX_DIMS] = {false};
    for (int i = 0; i < rank; i++) {
        if (perm[i] < 0 || perm[i] >= rank || seen[perm[i]])
            return fail(m, "perm is not a permutation of 0..%d", rank - 1);
        seen[perm[i]] = true;
    }
    return UN_OK;
}

/* The dims after the current Reshape (shape input: 0 copies a dim, -1 takes the rest), Unsqueeze
 * or Squeeze (axes input or attribute; Squeeze without axes drops every 1) of a tensor of dims
 * in[rank]: the new rank, or -1 when that is not possible. */
static int new_dims(imp *m, int rank, const int64_t *in, int64_t *dim) {
    const Onnx__NodeProto *nd = m->cur;
    const oval *s = nd->n_input > 1 && *nd->input[1] ? const_of(m, nd->input[1]) : NULL;
    int64_t numel = 1, nn = 1, v[UN_MAX_DIMS];
    for (int i = 0; i < rank; i++)
        numel *= in[i];
    int n = s                                     ? (int)s->n
            : strcmp(nd->op_type, "Reshape") == 0 ? -1
                                                  : attr_ints(nd, "axes", v, UN_MAX_DIMS);
    if (n > UN_MAX_DIMS || (n < 0 && nd->op_type[0] != 'S') || attr_i(nd, "allowzero", 0))
        return -1;
    for (int i = 0; s && i < n; i++)
        v[i] = toi(s->d[i]);
    int r = 0;
    if (nd->op_type[0] == 'R') {
        int neg = -1;
        for (r = 0; r < n; r++) {
            dim[r] = v[r] == 0 && r < rank ? in[r] : v[r];
            if (dim[r] < 0)
                neg = r;
            else
                nn *= dim[r];
        }
        if (neg >= 0)
            dim[neg] = nn ? numel / nn : 0, nn *= dim[neg];
    } else {
        bool unsq = nd->op_type[0] == 'U';
        int out_rank = unsq ? rank + n : rank;
        if ((unsq && n < 1) || out_rank > UN_MAX_DIMS || out_rank < 1)
            return -1;
        bool mark[UN_MAX_DIMS] = {false};
        for (int i = 0; i < n; i++)
            mark[((v[i] % out_rank) + out_rank) % out_rank] = true;
        for (int i = 0, src = 0; i < (unsq ? out_rank : rank); i++) {
            if (unsq)
                dim[r++] = mark[i] ? 1 : in[src++];
            else if (!(n > 0 ? mark[i] : in[i] == 1))
                dim[r++] = in[i];
        }
        for (int i = 0; i < r; i++)
            nn *= dim[i];
    }
    return nn == numel && r >= 0 ? r : -1;
}

static bool all_const(imp *m) {
    for (size_t i = 0; i < m->cur->n_input; i++) {
        if (!*m->cur->input[i])
            continue;
        const oval *o = const_of(m, m->cur->input[i]);
        if (!o)
            return false;
    }
    return m->cur->n_input > 0;
}

static double bin(const char *op, double a, double b, bool is_int) {
    if (strcmp(op, "Add") == 0)
        return a + b;
    if (strcmp(op, "Sub") == 0)
        return a - b;
    if (strcmp(op, "Mul") == 0)
        return a * b;
    if (strcmp(op, "Pow") == 0)
        return pow(a, b);
    if (strcmp(op, "Equal") == 0)
        return a == b;
    /* Div */
    return is_int ? (b != 0 ? trunc(a / b) : 0) : a / b;
}

/* Folds the current node when every input is a constant; *done says whether it did. */
static un_status fold(imp *m, bool *done) {
    const Onnx__NodeProto *nd = m->cur;
    const char *op = nd->op_type;
    un_status st = UN_OK;
    *done = false;
    if (!all_const(m))
        return UN_OK;
    const oval *a = const_of(m, nd->input[0]);
    if (strcmp(op, "Identity") == 0 || strcmp(op, "Cast") == 0) {
        oval *o = out_const(m, 0, a->rank, a->dim, a->is_int);
        memcpy(o->d, a->d, (size_t)a->n * sizeof(double));
        if (strcmp(op, "Cast") == 0) {
            int64_t to = attr_i(nd, "to", 1);
            o->is_int = to != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT &&
                        to != ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
            for (int64_t i = 0; o->is_int && i < o->n; i++)
                o->d[i] = trunc(o->d[i]);
        }
        *done = true;
    } else if (strcmp(op, "Sqrt") == 0 || strcmp(op, "Neg") == 0) {
        oval *o = out_const(m, 0, a->rank, a->dim, a->is_int);
        for (int64_t i = 0; i < a->n; i++)
            o->d[i] = op[0] == 'S' ? sqrt(a->d[i]) : -a->d[i];
        *done = true;
    } else if (strcmp(op, "Add") == 0 || strcmp(op, "Sub") == 0 || strcmp(op, "Mul") == 0 ||
               strcmp(op, "Div") == 0 || strcmp(op, "Pow") == 0 || strcmp(op, "Equal") == 0) {
        const oval *b = const_of(m, nd->input[1]);
        const oval *big = a->n >= b->n ? a : b;
        if (a->n != b->n && a->n != 1 && b->n != 1)
            return fail(m, "constant operands of %lld and %lld elements do not broadcast",
                        (long long)a->n, (long long)b->n);
        oval *o = out_const(m, 0, big->rank, big->dim, a->is_int && b->is_int);
        for (int64_t i = 0; i < o->n; i++)
            o->d[i] = bin(op, a->d[a->n == 1 ? 0 : i], b->d[b->n == 1 ? 0 : i], o->is_int);
        if (strcmp(op, "Equal") == 0)
            o->is_int = true;
        *done = true;
    } else if (strcmp(op, "Unsqueeze") == 0 || strcmp(op, "Squeeze") == 0 ||
               strcmp(op, "Reshape") == 0) {
        int64_t dim[UN_MAX_DIMS];
        int rank = new_dims(m, a->rank, a->dim, dim);
        if (rank < 0)
            return fail(m, "cannot reshape %lld elements that way", (long long)a->n);
        oval *o = out_const(m, 0, rank, dim, a->is_int);
        memcpy(o->d, a->d, (size_t)a->n * sizeof(double));
        *done = true;
    } else if (strcmp(op, "Concat") == 0) {
        int64_t n = 0;
        for (size_t i = 0; i < nd->n_input; i++) {
            const oval *c = const_of(m, nd->input[i]);
            if (c->rank > 1)
                return fail(m, "concat of constants of rank %d (1 only)", c->rank);
            n += c->n;
        }
        oval *o = out_const(m, 0, 1, (int64_t[]){n}, a->is_int);
        for (size_t i = 0, at = 0; i < nd->n_input; i++) {
            const oval *c = const_of(m, nd->input[i]);
            memcpy(o->d + at, c->d, (size_t)c->n * sizeof(double));
            at += (size_t)c->n;
        }
        *done = true;
    } else if (strcmp(op, "Gather") == 0) {
        const oval *ix = const_of(m, nd->input[1]);
        if (a->rank != 1 || ix->rank > 1 || attr_i(nd, "axis", 0) != 0)
            return UN_OK; /* a table lookup: mapped below (embedding) */
        oval *o = out_const(m, 0, ix->rank, ix->dim, a->is_int);
        for (int64_t i = 0; i < ix->n; i++) {
            int64_t j = toi(ix->d[i]);
            j = j < 0 ? j + a->n : j;
            if (j < 0 || j >= a->n)
                return fail(m, "index %lld out of range [0, %lld)", (long long)j, (long long)a->n);
            o->d[i] = a->d[j];
        }
        *done = true;
    } else if (strcmp(op, "Slice") == 0) {
        if (a->rank != 1)
            return fail(m, "slicing a constant of rank %d (1 only)", a->rank);
        const oval *s = const_of(m, nd->input[1]), *e = const_of(m, nd->input[2]);
        const oval *sp = nd->n_input > 4 && *nd->input[4] ? const_of(m, nd->input[4]) : NULL;
        if (s->n != 1 || e->n != 1 || (sp && (sp->n != 1 || sp->d[0] != 1)))
            return fail(m, "only one axis with step 1 is supported");
        int64_t b0 = toi(s->d[0]), e0 = toi(e->d[0]) > a->n ? a->n : toi(e->d[0]);
        clamp_range(a->n, &b0, &e0);
        oval *o = out_const(m, 0, 1, (int64_t[]){e0 - b0}, a->is_int);
        memcpy(o->d, a->d + b0, (size_t)(e0 - b0) * sizeof(double));
        *done = true;
    } else if (strcmp(op, "Transpose") == 0) {
        int64_t perm[UN_MAX_DIMS], dim[UN_MAX_DIMS], st_in[UN_MAX_DIMS], st_out[UN_MAX_DIMS];
        if ((st = perm_of(m, a->rank, perm)) != UN_OK)
            return st;
        for (int i = 0; i < a->rank; i++)
            dim[i] = a->dim[perm[i]];
        oval *o = out_const(m, 0, a->rank, dim, a->is_int);
        o->init = a->init;
        o->label = a->label ? a->label : a->name;
        for (int i = a->rank - 1, si = 1, so = 1; i >= 0; i--) {
            st_in[i] = si, st_out[i] = so;
            si *= a->dim[i], so *= dim[i];
        }
        for (int64_t j = 0; j < o->n; j++) {
            int64_t src = 0, r = j;
            for (int i = 0; i < a->rank; i++) {
                src += (r / st_out[i]) * st_in[perm[i]];
                r %= st_out[i];
            }
            o->d[j] = a->d[src];
        }
        *done = true;
    }
    return st;
}

/* ---- node mapping ---- */

/* Transpose by perm as a chain of two-dim swaps (our transpose swaps dim0 and dim1). */
static un_status transpose_perm(imp *m, un_ref x, int rank, const int64_t *perm, const char *name,
                                un_ref *out) {
    int64_t cur[UN_MAX_DIMS];
    for (int i = 0; i < rank; i++)
        cur[i] = i;
    un_status st = UN_OK;
    for (int i = 0; i < rank && st == UN_OK; i++) {
        int j = i;
        while (j < rank && cur[j] != perm[i])
            j++;
        if (j == rank)
            return fail(m, "perm is not a permutation of 0..%d", rank - 1);
        if (j == i)
            continue;
        int64_t t = cur[i];
        cur[i] = cur[j];
        cur[j] = t;
        un_param p[UN_MAX_PARAMS];
        params_default(m, UN_OP_TRANSPOSE, p);
        pset(UN_OP_TRANSPOSE, m->spec, p, "dim0", i);
        pset(UN_OP_TRANSPOSE, m->spec, p, "dim1", j);
        st = add(m, UN_OP_TRANSPOSE, p, &x, 1, name, ".t", &x);
    }
    *out = x;
    return st;
}

static un_status reshape_to(imp *m, un_ref x, int rank, const int64_t *dim, const char *name,
                            const char *suffix, un_ref *out) {
    const un_shape *s = shape_of(m, x);
    bool same = s->rank == rank;
    for (int i = 0; same && i < rank; i++)
        same = s->dim[i] == dim[i];
    if (same) {
        *out = x;
        return UN_OK;
    }
    un_param p[UN_MAX_PARAMS];
    params_default(m, UN_OP_RESHAPE, p);
    pset_list(UN_OP_RESHAPE, m->spec, p, "shape", rank, dim);
    return add(m, UN_OP_RESHAPE, p, &x, 1, name, suffix, out);
}

static const char *out_name(const imp *m) {
    return m->cur->n_output && *m->cur->output[0] ? m->cur->output[0] : S(m->cur->name);
}

static un_status scale_by(imp *m, un_ref x, double s, const char *name, const char *suffix,
                          un_ref *y);

/* Our batch_norm and layer_norm use epsilon 1e-5. Normalising s x with 1e-5 equals normalising x
 * with eps when s^2 = 1e-5 / eps (the statistics scale by s and s^2), so another epsilon is a
 * scalar_mul by s in front (s as a ratio of integers: exact for eps 1e-3, s = 1/10). */
static un_status eps_fix(imp *m, un_ref x, double eps, un_ref *y) {
    *y = x;
    if (!(eps > 0))
        return fail(m, "epsilon %g is not positive", eps);
    if (fabs(eps - 1e-5) <= 1e-12)
        return UN_OK;
    return scale_by(m, x, sqrt(1e-5 / eps), out_name(m), ".eps", y);
}

/* Conv: [n, c, h, w] only, symmetric zero padding, no dilation. */
static un_status map_conv(imp *m) {
    const Onnx__NodeProto *nd = m->cur;
    un_status st = UN_OK;
    int kx = in_idx(m, 0, &st), kw = in_idx(m, 1, &st), kb = in_idx(m, 2, &st);
    if (st != UN_OK)
        return st;
    if (kx < 0 || kw < 0 || m->v[kw].kind != OV_CONST || m->v[kw].rank != 4)
        return fail(m, "needs a 2-D convolution with an initializer weight [cout, cin, kh, kw]");
    int64_t pads[4] = {0, 0, 0, 0}, strides[2] = {1, 1}, dil[2] = {1, 1}, ph = 0, pw = 0;
    int np = attr_ints(nd, "pads", pads, 4), ns = attr_ints(nd, "strides", strides, 2),
        nd2 = attr_ints(nd, "dilations", dil, 2);
    const Onnx__AttributeProto *ap = attr(nd, "auto_pad");
    if (ap && ap->has_s && !(ap->s.len == 6 && memcmp(ap->s.data, "NOTSET", 6) == 0))
        return fail(m, "auto_pad is not supported (give explicit pads)");
    if ((np >= 0 && np != 4) || (ns >= 0 && ns != 2) || (nd2 >= 0 && nd2 != 2) || dil[0] != 1 ||
        dil[1] != 1)
        return fail(m, "only 2-D convolution without dilation is supported");
    if (pads[0] != pads[2] || pads[1] != pads[3])
        return fail(m, "asymmetric padding %lld,%lld,%lld,%lld is not supported",
                    (long long)pads[0], (long long)pads[1], (long long)pads[2], (long long)pads[3]);
    if (m->v[kx].kind == OV_PAD) {
        ph = m->v[kx].pad_h, pw = m->v[kx].pad_w;
    }
    un_ref x, w, b;
    if ((st = m->v[kx].kind == OV_PAD ? UN_OK : graph_of(m, kx, &x)) != UN_OK)
        return st;
    if (m->v[kx].kind == OV_PAD)
        x = m->v[kx].ref;
    if ((st = as_weight(m, kw, &w)) != UN_OK)
        return st;
    un_param p[UN_MAX_PARAMS];
    params_default(m, UN_OP_CONV2D, p);
    pset(UN_OP_CONV2D, m->spec, p, "stride_h", strides[0]);
    pset(UN_OP_CONV2D, m->spec, p, "stride_w", strides[1]);
    pset(UN_OP_CONV2D, m->spec, p, "pad_h", pads[0] + ph);
    pset(UN_OP_CONV2D, m->spec, p, "pad_w", pads[1] + pw);
    pset(UN_OP_CONV2D, m->spec, p, "groups", attr_i(nd, "group", 1));
    un_ref in[3] = {x, w, {0, 0}};
    if (kb >= 0) {
        if ((st = as_weight(m, kb, &b)) != UN_OK)
            return st;
        in[2] = b;
        pset(UN_OP_CONV2D, m->spec, p, "use_bias", 1);
    }
    un_ref y;
    if ((st = add(m, UN_OP_CONV2D, p, in, kb >= 0 ? 3 : 2, out_name(m), "", &y)) != UN_OK)
        return st;
    return out_graph(m, 0, y);
}

/* BatchNormalization: training mode -> batch_norm (batch statistics, gamma and beta trained);
 * inference mode -> the per-channel affine map it is, as a 1x1 depthwise conv with bias. */
static un_status map_bn(imp *m) {
    const Onnx__NodeProto *nd = m->cur;
    un_status st = UN_OK;
    int k[5];
    for (int i = 0; i < 5; i++)
        k[i] = in_idx(m, i, &st);
    if (st != UN_OK)
        return st;
    for (int i = 1; i < 5; i++)
        if (k[i] < 0 || m->v[k[i]].kind != OV_CONST || m->v[k[i]].rank != 1)
            return fail(m, "needs initializers for scale, bias, mean and var");
    double eps = attr_f(nd, "epsilon", 1e-5);
    bool training = attr_i(nd, "training_mode", 0) != 0 || nd->n_output > 1;
    un_ref x, y;
    if ((st = graph_of(m, k[0], &x)) != UN_OK)
        return st;
    const un_shape *xs = shape_of(m, x);
    if (xs->rank != 4)
        return fail(m, "input of rank %d ([n, c, h, w] only)", xs->rank);
    if (training) {
        if ((st = eps_fix(m, x, eps, &x)) != UN_OK)
            return st;
        for (size_t i = 1; i < nd->n_output; i++) {
            int c[1];
            if (*nd->output[i] && consumers(m, nd->output[i], c, 1) > 0)
                return fail(m, "its running statistics output %zu is used", i);
        }
        un_ref in[3] = {x, {0, 0}, {0, 0}};
        if ((st = as_weight(m, k[1], &in[1])) != UN_OK || (st = as_weight(m, k[2], &in[2])))
            return st;
        if ((st = add(m, UN_OP_BATCH_NORM, NULL, in, 3, out_name(m), "", &y)) != UN_OK)
            return st;
        return out_graph(m, 0, y);
    }
    int64_t c = xs->dim[1];
    for (int i = 1; i < 5; i++)
        if (m->v[k[i]].n != c)
            return fail(m, "statistics of %lld channels for %lld", (long long)m->v[k[i]].n,
                        (long long)c);
    double *ws = un_xmalloc((size_t)c * sizeof(double)),
           *bs = un_xmalloc((size_t)c * sizeof(double));
    for (int64_t i = 0; i < c; i++) {
        ws[i] = m->v[k[1]].d[i] / sqrt(m->v[k[4]].d[i] + eps);
        bs[i] = m->v[k[2]].d[i] - m->v[k[3]].d[i] * ws[i];
    }
    int32_t wid = -1, bid = -1;
    st = weight_add(m, m->v[k[1]].name, 4, (int64_t[]){c, 1, 1, 1}, ws, c, &wid);
    if (st == UN_OK)
        st = weight_add(m, m->v[k[2]].name, 1, (int64_t[]){c}, bs, c, &bid);
    free(ws);
    free(bs);
    if (st != UN_OK)
        return st;
    m->params += 2 * c;
    un_param p[UN_MAX_PARAMS];
    params_default(m, UN_OP_CONV2D, p);
    pset(UN_OP_CONV2D, m->spec, p, "groups", c);
    pset(UN_OP_CONV2D, m->spec, p, "use_bias", 1);
    if ((st = add(m, UN_OP_CONV2D, p, (un_ref[]){x, {wid, 0}, {bid, 0}}, 3, out_name(m), "", &y)) !=
        UN_OK)
        return st;
    return out_graph(m, 0, y);
}

static un_status map_pool(imp *m, bool avg, bool global) {
    const Onnx__NodeProto *nd = m->cur;
    un_status st = UN_OK;
    int kx = in_idx(m, 0, &st);
    if (st != UN_OK || kx < 0)
        return st != UN_OK ? st : fail(m, "no input");
    if (nd->n_output > 1 && *nd->output[1])
        return fail(m, "the indices output is not supported");
    int64_t ph = 0, pw = 0;
    un_ref x;
    if (m->v[kx].kind == OV_PAD) {
        if (!avg)
            return fail(m, "a Pad in front of MaxPool is not supported");
        ph = m->v[kx].pad_h, pw = m->v[kx].pad_w;
        x = m->v[kx].ref;
    } else if ((st = graph_of(m, kx, &x)) != UN_OK) {
        return st;
    }
    const un_shape *xs = shape_of(m, x);
    if (xs->rank != 4)
        return fail(m, "input of rank %d ([n, c, h, w] only)", xs->rank);
    int64_t ker[2] = {xs->dim[2], xs->dim[3]}, str[2] = {1, 1}, pads[4] = {0, 0, 0, 0},
            dil[2] = {1, 1};
    if (!global) {
        if (attr_ints(nd, "kernel_shape", ker, 2) != 2)
            return fail(m, "needs a 2-D kernel_shape");
        int ns = attr_ints(nd, "strides", str, 2), np = attr_ints(nd, "pads", pads, 4),
            nd2 = attr_ints(nd, "dilations", dil, 2);
        if ((ns >= 0 && ns != 2) || (np >= 0 && np != 4) || (nd2 >= 0 && nd2 != 2) || dil[0] != 1 ||
            dil[1] != 1)
            return fail(m, "only 2-D pooling without dilation is supported");
        if (attr_i(nd, "ceil_mode", 0))
            return fail(m, "ceil_mode is not supported");
        const Onnx__AttributeProto *ap = attr(nd, "auto_pad");
        if (ap && ap->has_s && !(ap->s.len == 6 && memcmp(ap->s.data, "NOTSET", 6) == 0))
            return fail(m, "auto_pad is not supported (give explicit pads)");
        if (pads[0] != pads[2] || pads[1] != pads[3])
            return fail(m, "asymmetric padding is not supported");
        if (avg && (pads[0] || pads[1]) && !attr_i(nd, "count_include_pad", 0))
            return fail(m, "average pooling over padding needs count_include_pad=1");
    } else {
        str[0] = ker[0], str[1] = ker[1];
    }
    un_param p[UN_MAX_PARAMS];
    params_default(m, UN_OP_POOL2D, p);
    pset(UN_OP_POOL2D, m->spec, p, "kernel_h", ker[0]);
    pset(UN_OP_POOL2D, m->spec, p, "kernel_w", ker[1]);
    pset(UN_OP_POOL2D, m->spec, p, "stride_h", str[0]);
    pset(UN_OP_POOL2D, m->spec, p, "stride_w", str[1]);
    pset(UN_OP_POOL2D, m->spec, p, "pad_h", pads[0] + ph);
    pset(UN_OP_POOL2D, m->spec, p, "pad_w", pads[1] + pw);
    pset(UN_OP_POOL2D, m->spec, p, "type", avg ? 1 : 0);
    un_ref y;
    if ((st = add(m, UN_OP_POOL2D, p, &x, 1, out_name(m), "", &y)) != UN_OK)
        return st;
    return out_graph(m, 0, y);
}

/* x [.., K] times initializer w [K, N] (transposed first when trans_b), plus an optional
 * initializer bias [N] (or [1, N]): linear. */
static un_status linear_of(imp *m, un_ref x, int kw, bool trans_b, int kb, const char *name,
                           un_ref *y) {
    oval *w = &m->v[kw];
    un_status st;
    if (w->kind != OV_CONST || w->rank != 2 || !w->init)
        return fail(m, "needs an initializer weight of rank 2");
    un_ref in[3];
    in[0] = x;
    if (!trans_b) {
        if ((st = as_weight(m, kw, &in[1])) != UN_OK)
            return st;
    } else {
        if (w->weight < 0) {
            int64_t r = w->dim[0], c = w->dim[1];
            double *t = un_xmalloc((size_t)(w->n ? w->n : 1) * sizeof(double));
            for (int64_t i = 0; i < r; i++)
                for (int64_t j = 0; j < c; j++)
                    t[j * r + i] = w->d[i * c + j];
            st = weight_add(m, w->name, 2, (int64_t[]){c, r}, t, w->n, &w->weight);
            free(t);
            if (st != UN_OK)
                return st;
            m->params += w->n;
        }
        in[1] = (un_ref){w->weight, 0};
    }
    un_param p[UN_MAX_PARAMS];
    params_default(m, UN_OP_LINEAR, p);
    int n_in = 2;
    if (kb >= 0) {
        oval *b = &m->v[kb];
        int64_t nout = shape_of(m, in[1])->dim[1];
        if (b->kind != OV_CONST || !b->init || b->n != nout || (b->rank == 2 && b->dim[0] != 1))
            return fail(m, "the bias must be an initializer of %lld values", (long long)nout);
        if (b->weight < 0) {
            if ((st = weight_add(m, b->name, 1, (int64_t[]){b->n}, b->d, b->n, &b->weight)))
                return st;
            m->params += b->n;
        }
        in[2] = (un_ref){b->weight, 0};
        n_in = 3;
        pset(UN_OP_LINEAR, m->spec, p, "use_bias", 1);
    }
    return add(m, UN_OP_LINEAR, p, in, n_in, name, "", y);
}

static un_status map_gemm(imp *m) {
    const Onnx__NodeProto *nd = m->cur;
    un_status st = UN_OK;
    int ka = in_idx(m, 0, &st), kb = in_idx(m, 1, &st), kc = in_idx(m, 2, &st);
    if (st != UN_OK)
        return st;
    if (attr_i(nd, "transA", 0) || attr_f(nd, "alpha", 1) != 1 || attr_f(nd, "beta", 1) != 1)
        return fail(m, "transA, alpha and beta other than 0, 1, 1 are not supported");
    un_ref x, y;
    if ((st = graph_of(m, ka, &x)) != UN_OK)
        return st;
    if ((st = linear_of(m, x, kb, attr_i(nd, "transB", 0) != 0, kc, out_name(m), &y)) != UN_OK)
        return st;
    return out_graph(m, 0, y);
}

/* MatMul: by an initializer -> linear (with the bias of a sole following Add fused in); of two
 * tensors -> batch_matmul. */
static un_status map_matmul(imp *m, int self) {
    un_status st = UN_OK;
    int ka = in_idx(m, 0, &st), kb = in_idx(m, 1, &st);
    if (st != UN_OK)
        return st;
    un_ref a, b, y;
    if ((st = graph_of(m, ka, &a)) != UN_OK)
        return st;
    if (m->v[kb].kind == OV_CONST) {
        int ia = -1, kbias = -1;
        const Onnx__NodeProto *add_nd = single_consumer(m, m->cur->output[0], "Add", &ia);
        if (add_nd && add_nd->n_input == 2) {
            const char *other = strcmp(add_nd->input[0], m->cur->output[0]) == 0 ? add_nd->input[1]
                                                                                 : add_nd->input[0];
            const oval *bc = const_of(m, other);
            if (bc && bc->init && bc->rank == 1 && bc->n == m->v[kb].dim[1] && ia > self)
                kbias = val_find(m, other);
        }
        const char *nm = kbias >= 0 ? add_nd->output[0] : out_name(m);
        if ((st = linear_of(m, a, kb, false, kbias, nm, &y)) != UN_OK)
            return st;
        if (kbias >= 0) {
            m->skip[ia] = true;
            oval *o = val_new(m, add_nd->output[0]);
            o->kind = OV_GRAPH;
            o->ref = y;
            return UN_OK;
        }
        return out_graph(m, 0, y);
    }
    if ((st = graph_of(m, kb, &b)) != UN_OK)
        return st;
    if ((st = add(m, UN_OP_BATCH_MATMUL, NULL, (un_ref[]){a, b}, 2, out_name(m), "", &y)) != UN_OK)
        return st;
    return out_graph(m, 0, y);
}

/* Mul or Div by a constant scalar -> scalar_mul num/den. */
static un_status scale_by(imp *m, un_ref x, double s, const char *name, const char *suffix,
                          un_ref *y) {
    int64_t num, den;
    if (!rational(s, &num, &den) || num < -1000000 || num > 1000000)
        return fail(m, "the factor %.9g is not a ratio of integers up to 10^6", s);
    un_param p[UN_MAX_PARAMS];
    params_default(m, UN_OP_SCALAR_MUL, p);
    pset(UN_OP_SCALAR_MUL, m->spec, p, "num", num);
    pset(UN_OP_SCALAR_MUL, m->spec, p, "den", den);
    return add(m, UN_OP_SCALAR_MUL, p, &x, 1, name, suffix, y);
}

/* The Erf form of Gelu, x * 0.5 * (1 + erf(x / sqrt 2)), starting at its Div (or Mul by
 * 1/sqrt 2): on a match, emits gelu and marks the other four nodes done. */
static bool gelu_match(imp *m, int self, int kx, un_status *st) {
    const Onnx__NodeProto *nd = m->cur;
    double c;
    bool div = strcmp(nd->op_type, "Div") == 0;
    if (strcmp(nd->input[0], m->v[kx].name) != 0 || !const_scalar(m, nd->input[1], &c) ||
        fabs((div ? c : 1 / c) - sqrt(2.0)) > 1e-4)
        return false;
    int i1, i2, i3, i4;
    const Onnx__NodeProto *erf = single_consumer(m, nd->output[0], "Erf", &i1);
    const Onnx__NodeProto *plus = erf ? single_consumer(m, erf->output[0], "Add", &i2) : NULL;
    double one, half;
    if (!plus || plus->n_input != 2 ||
        !const_scalar(m,
                      strcmp(plus->input[0], erf->output[0]) == 0 ? plus->input[1] : plus->input[0],
                      &one) ||
        one != 1)
        return false;
    const Onnx__NodeProto *mx = single_consumer(m, plus->output[0], "Mul", &i3);
    if (!mx || mx->n_input != 2)
        return false;
    const char *xo = strcmp(mx->input[0], plus->output[0]) == 0 ? mx->input[1] : mx->input[0];
    const Onnx__NodeProto *mh = single_consumer(m, mx->output[0], "Mul", &i4);
    if (strcmp(xo, m->v[kx].name) != 0 || !mh || mh->n_input != 2 ||
        !const_scalar(m, strcmp(mh->input[0], mx->output[0]) == 0 ? mh->input[1] : mh->input[0],
                      &half) ||
        half != 0.5 || i1 < self || i2 < i1 || i3 < i2 || i4 < i3)
        return false;
    un_ref x, y;
    if ((*st = graph_of(m, kx, &x)) != UN_OK ||
        (*st = add(m, UN_OP_GELU, NULL, &x, 1, mh->output[0], "", &y)) != UN_OK)
        return true;
    m->skip[i1] = m->skip[i2] = m->skip[i3] = m->skip[i4] = true;
    oval *o = val_new(m, mh->output[0]);
    o->kind = OV_GRAPH;
    o->ref = y;
    return true;
}

static un_status map_binary(imp *m, int self) {
    const Onnx__NodeProto *nd = m->cur;
    const char *op = nd->op_type;
    un_status st = UN_OK;
    int ka = in_idx(m, 0, &st), kb = in_idx(m, 1, &st);
    if (st != UN_OK)
        return st;
    if (ka < 0 || kb < 0)
        return fail(m, "needs two inputs");
    bool ca = m->v[ka].kind == OV_CONST && !m->v[ka].init;
    bool cb = m->v[kb].kind == OV_CONST && !m->v[kb].init;
    un_ref a, b, y;
    if ((strcmp(op, "Div") == 0 || strcmp(op, "Mul") == 0) && m->v[kb].kind == OV_CONST &&
        m->v[kb].n == 1 && gelu_match(m, self, ka, &st))
        return st;
    if ((strcmp(op, "Mul") == 0 && (ca || cb)) || (strcmp(op, "Div") == 0 && cb)) {
        int kc = cb ? kb : ka, kx = cb ? ka : kb;
        if (m->v[kc].n != 1)
            return fail(m, "multiplying by a constant of %lld elements is not supported",
                        (long long)m->v[kc].n);
        double s = m->v[kc].d[0];
        if (strcmp(op, "Div") == 0) {
            if (s == 0)
                return fail(m, "division by zero");
            s = 1 / s;
        }
        if ((st = graph_of(m, kx, &a)) != UN_OK ||
            (st = scale_by(m, a, s, out_name(m), "", &y)) != UN_OK)
            return st;
        return out_graph(m, 0, y);
    }
    if (strcmp(op, "Div") == 0 || strcmp(op, "Pow") == 0)
        return fail(m, "%s of two tensors is not supported (no such operator)", op);
    if (ca || cb)
        return fail(m, "%s with a constant tensor is not supported (no broadcasting operator)", op);
    if ((st = graph_of(m, ka, &a)) != UN_OK || (st = graph_of(m, kb, &b)) != UN_OK)
        return st;
    if (!un_shape_same_dims(shape_of(m, a), shape_of(m, b))) {
        char sa[128], sb[128];
        un_shape_str(shape_of(m, a), sa, sizeof sa);
        un_shape_str(shape_of(m, b), sb, sizeof sb);
        return fail(m, "operands %s and %s differ (broadcasting is not supported)", sa, sb);
    }
    un_op uop = op[0] == 'A' ? UN_OP_EW_ADD : op[0] == 'S' ? UN_OP_EW_SUB : UN_OP_EW_MUL;
    if ((st = add(m, uop, NULL, (un_ref[]){a, b}, 2, out_name(m), "", &y)) != UN_OK)
        return st;
    return out_graph(m, 0, y);
}

/* The ReduceMean form of LayerNormalization over the last dim, starting at its first
 * ReduceMean: mean, x - mean, (x - mean)^2, its mean + eps, sqrt, divide, * gamma, + beta. */
static bool ln_match(imp *m, int self, int kx, un_status *st) {
    const Onnx__NodeProto *nd = m->cur;
    int64_t axes[2];
    if (attr_ints(nd, "axes", axes, 2) != 1 || attr_i(nd, "keepdims", 1) != 1 ||
        m->v[kx].kind != OV_GRAPH)
        return false;
    const un_shape *xs = shape_of(m, m->v[kx].ref);
    if (axes[0] != -1 && axes[0] != xs->rank - 1)
        return false;
    int idx[9], c[3];
    if (consumers(m, nd->output[0], c, 3) != 1)
        return false;
    const Onnx__NodeProto *sub = single_consumer(m, nd->output[0], "Sub", &idx[0]);
    if (!sub || strcmp(sub->input[0], m->v[kx].name) != 0)
        return false;
    const char *d = sub->output[0];
    int nc = consumers(m, d, c, 3);
    if (nc != 2)
        return false;
    const Onnx__NodeProto *pw = NULL, *dv = NULL;
    for (int i = 0; i < 2; i++) {
        const Onnx__NodeProto *q = m->gp->node[c[i]];
        if (strcmp(q->op_type, "Pow") == 0)
            pw = q, idx[1] = c[i];
        else if (strcmp(q->op_type, "Div") == 0)
            dv = q, idx[6] = c[i];
    }
    double two, eps;
    if (!pw || !dv || !const_scalar(m, pw->input[1], &two) || two != 2 ||
        strcmp(dv->input[0], d) != 0)
        return false;
    const Onnx__NodeProto *rm = single_consumer(m, pw->output[0], "ReduceMean", &idx[2]);
    const Onnx__NodeProto *ad = rm ? single_consumer(m, rm->output[0], "Add", &idx[3]) : NULL;
    const Onnx__NodeProto *sq = ad ? single_consumer(m, ad->output[0], "Sqrt", &idx[4]) : NULL;
    if (!sq || !const_scalar(m, ad->input[1], &eps) || fabs(eps - 1e-5) > 1e-9 ||
        strcmp(dv->input[1], sq->output[0]) != 0)
        return false;
    const Onnx__NodeProto *mu = single_consumer(m, dv->output[0], "Mul", &idx[7]);
    const Onnx__NodeProto *pl = mu ? single_consumer(m, mu->output[0], "Add", &idx[8]) : NULL;
    if (!pl)
        return false;
    int kg = val_find(m, mu->input[1]), kbeta = val_find(m, pl->input[1]);
    if (kg < 0 || kbeta < 0 || m->v[kg].kind != OV_CONST || m->v[kbeta].kind != OV_CONST ||
        m->v[kg].n != xs->dim[xs->rank - 1] || m->v[kbeta].n != m->v[kg].n)
        return false;
    for (int i = 0; i < 9; i++)
        if (i != 5 && idx[i] <= self)
            return false;
    un_ref in[3], y;
    in[0] = m->v[kx].ref;
    if ((*st = as_weight(m, kg, &in[1])) != UN_OK || (*st = as_weight(m, kbeta, &in[2])) != UN_OK ||
        (*st = add(m, UN_OP_LAYER_NORM, NULL, in, 3, pl->output[0], "", &y)) != UN_OK)
        return true;
    for (int i = 0; i < 9; i++)
        if (i != 5)
            m->skip[idx[i]] = true;
    oval *o = val_new(m, pl->output[0]);
    o->kind = OV_GRAPH;
    o->ref = y;
    return true;
}

/* Slice of a tensor along one axis, step 1: a split into up to three parts, the middle kept. */
static un_status map_slice(imp *m) {
    const Onnx__NodeProto *nd = m->cur;
    un_status st = UN_OK;
    int kx = in_idx(m, 0, &st);
    if (st != UN_OK)
        return st;
    const oval *s = nd->n_input > 1 ? const_of(m, nd->input[1]) : NULL;
    const oval *e = nd->n_input > 2 ? const_of(m, nd->input[2]) : NULL;
    const oval *ax = nd->n_input > 3 && *nd->input[3] ? const_of(m, nd->input[3]) : NULL;
    const oval *sp = nd->n_input > 4 && *nd->input[4] ? const_of(m, nd->input[4]) : NULL;
    if (!s || !e || s->n != 1 || e->n != 1 || (ax && ax->n != 1) ||
        (sp && (sp->n != 1 || sp->d[0] != 1)))
        return fail(m, "only constant starts/ends on one axis with step 1 are supported");
    un_ref x, y;
    if ((st = graph_of(m, kx, &x)) != UN_OK)
        return st;
    const un_shape *xs = shape_of(m, x);
    int64_t a = ax ? toi(ax->d[0]) : 0;
    a = a < 0 ? a + xs->rank : a;
    if (a < 0 || a >= xs->rank)
        return fail(m, "axis out of range");
    int64_t n = xs->dim[a], b0 = toi(s->d[0]), e0 = toi(e->d[0]) > n ? n : toi(e->d[0]);
    clamp_range(n, &b0, &e0);
    if (e0 == b0)
        return fail(m, "an empty slice");
    if (b0 == 0 && e0 == n)
        return out_graph(m, 0, x);
    int64_t sizes[3];
    int ns = 0, keep = 0;
    if (b0 > 0)
        sizes[ns++] = b0;
    keep = ns;
    sizes[ns++] = e0 - b0;
    if (e0 < n)
        sizes[ns++] = n - e0;
    un_param p[UN_MAX_PARAMS];
    params_default(m, UN_OP_SPLIT, p);
    pset(UN_OP_SPLIT, m->spec, p, "axis", a);
    pset_list(UN_OP_SPLIT, m->spec, p, "sizes", ns, sizes);
    if ((st = add(m, UN_OP_SPLIT, p, &x, 1, out_name(m), "", &y)) != UN_OK)
        return st;
    y.out = keep;
    return out_graph(m, 0, y);
}

static un_status map_split(imp *m) {
    const Onnx__NodeProto *nd = m->cur;
    un_status st = UN_OK;
    int kx = in_idx(m, 0, &st);
    un_ref x, y;
    if (st != UN_OK || (st = graph_of(m, kx, &x)) != UN_OK)
        return st;
    const un_shape *xs = shape_of(m, x);
    int64_t a = attr_i(nd, "axis", 0), sizes[UN_MAX_DIMS];
    a = a < 0 ? a + xs->rank : a;
    int n = (int)nd->n_output;
    if (a < 0 || a >= xs->rank || n < 1 || n > UN_MAX_DIMS)
        return fail(m, "axis %lld or %d outputs out of range", (long long)a, n);
    const oval *sz = nd->n_input > 1 && *nd->input[1] ? const_of(m, nd->input[1]) : NULL;
    int ns = sz ? (int)sz->n : attr_ints(nd, "split", sizes, UN_MAX_DIMS);
    if (sz)
        for (int i = 0; i < ns && i < UN_MAX_DIMS; i++)
            sizes[i] = toi(sz->d[i]);
    if (ns < 0) {
        if (xs->dim[a] % n)
            return fail(m, "%lld does not split into %d equal parts", (long long)xs->dim[a], n);
        ns = n;
        for (int i = 0; i < n; i++)
            sizes[i] = xs->dim[a] / n;
    }
    if (ns != n)
        return fail(m, "%d sizes for %d outputs", ns, n);
    un_param p[UN_MAX_PARAMS];
    params_default(m, UN_OP_SPLIT, p);
    pset(UN_OP_SPLIT, m->spec, p, "axis", a);
    pset_list(UN_OP_SPLIT, m->spec, p, "sizes", ns, sizes);
    if ((st = add(m, UN_OP_SPLIT, p, &x, 1, out_name(m), "", &y)) != UN_OK)
        return st;
    for (int i = 0; i < n; i++)
        out_graph(m, i, (un_ref){y.node, i});
    return UN_OK;
}

static un_status map_gather(imp *m) {
    const Onnx__NodeProto *nd = m->cur;
    un_status st = UN_OK;
    int kt = in_idx(m, 0, &st), ki = in_idx(m, 1, &st);
    if (st != UN_OK)
        return st;
    oval *t = &m->v[kt], *ix = &m->v[ki];
    if (t->kind != OV_CONST || !t->init || t->rank != 2 || t->is_int || attr_i(nd, "axis", 0) != 0)
        return fail(m, "only a lookup in an initializer table [num, dim] on axis 0 is supported");
    if (ix->input < 0 || !ix->is_int)
        return fail(m, "the indices must be an int graph input");
    if (ix->rank < 1 || ix->rank > 2)
        return fail(m, "indices of rank %d (1 or 2 only)", ix->rank);
    int64_t rows = ix->rank == 1 ? ix->dim[0] : ix->dim[0] * ix->dim[1];
    const un_op_spec *os = un_spec_op(m->spec, UN_OP_INPUT);
    un_param p[UN_MAX_PARAMS];
    memset(p, 0, sizeof p);
    un_spec_param_defaults(os, p);
    pset_list(UN_OP_INPUT, m->spec, p, "shape", 2, (int64_t[]){rows, 1});
    pset(UN_OP_INPUT, m->spec, p, "dtype", 1);
    pset(UN_OP_INPUT, m->spec, p, "range", t->dim[0]);
    char *nm = uname(m, ix->name, "");
    int32_t id;
    st = un_graph_add(m->ctx, m->g, UN_OP_INPUT, p, NULL, 0, nm, &id);
    free(nm);
    if (st != UN_OK)
        return st;
    ix->input = -1;
    ix->kind = OV_GRAPH;
    ix->ref = (un_ref){id, 0};
    un_ref w, y;
    if ((st = as_weight(m, kt, &w)) != UN_OK)
        return st;
    params_default(m, UN_OP_EMBEDDING, p);
    if ((st = add(m, UN_OP_EMBEDDING, p, (un_ref[]){ix->ref, w}, 2, out_name(m), ".rows", &y)))
        return st;
    if (ix->rank == 2 && (st = reshape_to(m, y, 3, (int64_t[]){ix->dim[0], ix->dim[1], t->dim[1]},
                                          out_name(m), "", &y)) != UN_OK)
        return st;
    return out_graph(m, 0, y);
}

/* One node. */
static un_status map_node(imp *m, int self) {
    const Onnx__NodeProto *nd = m->cur;
    const char *op = nd->op_type;
    un_status st = UN_OK;
    if (nd->domain && *nd->domain && strcmp(nd->domain, "ai.onnx") != 0)
        return fail(m, "operator domain '%s' is not supported", nd->domain);
    if (strcmp(op, "Constant") == 0) {
        const Onnx__AttributeProto *a = attr(nd, "value");
        oval *o = val_new(m, nd->n_output ? nd->output[0] : "");
        if (a && a->t)
            return tensor_load(m, a->t, o);
        if ((a = attr(nd, "value_float")) != NULL && a->has_f) {
            o->kind = OV_CONST, o->n = 1, o->d = un_xmalloc(sizeof(double)), o->d[0] = a->f;
            return UN_OK;
        }
        if ((a = attr(nd, "value_int")) != NULL && a->has_i) {
            o->kind = OV_CONST, o->n = 1, o->is_int = true, o->d = un_xmalloc(sizeof(double));
            o->d[0] = (double)a->i;
            return UN_OK;
        }
        if ((a = attr(nd, "value_ints")) != NULL) {
            o->kind = OV_CONST, o->n = (int64_t)a->n_ints, o->rank = 1, o->dim[0] = o->n;
            o->is_int = true;
            o->d = un_xmalloc((a->n_ints ? a->n_ints : 1) * sizeof(double));
            for (size_t i = 0; i < a->n_ints; i++)
                o->d[i] = (double)a->ints[i];
            return UN_OK;
        }
        return fail(m, "a Constant without a tensor, float, int or ints value");
    }
    if (strcmp(op, "Shape") == 0) {
        int k = in_idx(m, 0, &st);
        if (st != UN_OK || k < 0)
            return st != UN_OK ? st : fail(m, "no input");
        const oval *x = &m->v[k];
        int64_t dim[UN_MAX_DIMS];
        int rank = x->kind == OV_CONST ? x->rank : x->input >= 0 ? x->rank : 0;
        if (x->kind == OV_CONST || x->input >= 0)
            memcpy(dim, x->dim, sizeof dim);
        else {
            const un_shape *s = shape_of(m, x->ref);
            rank = s->rank;
            memcpy(dim, s->dim, sizeof dim);
        }
        int64_t b0 = attr_i(nd, "start", 0), e0 = attr_i(nd, "end", rank); /* opset 15 */
        clamp_range(rank, &b0, &e0);
        oval *o = out_const(m, 0, 1, (int64_t[]){e0 - b0}, true);
        for (int64_t i = b0; i < e0; i++)
            o->d[i - b0] = (double)dim[i];
        return UN_OK;
    }
    bool done;
    if ((st = fold(m, &done)) != UN_OK || done)
        return st;
    if (strcmp(op, "Conv") == 0)
        return map_conv(m);
    if (strcmp(op, "BatchNormalization") == 0)
        return map_bn(m);
    if (strcmp(op, "MaxPool") == 0 || strcmp(op, "AveragePool") == 0 ||
        strcmp(op, "GlobalAveragePool") == 0)
        return map_pool(m, op[0] != 'M', op[0] == 'G');
    if (strcmp(op, "Gemm") == 0)
        return map_gemm(m);
    if (strcmp(op, "MatMul") == 0)
        return map_matmul(m, self);
    if (strcmp(op, "Add") == 0 || strcmp(op, "Sub") == 0 || strcmp(op, "Mul") == 0 ||
        strcmp(op, "Div") == 0 || strcmp(op, "Pow") == 0)
        return map_binary(m, self);
    if (strcmp(op, "Slice") == 0)
        return map_slice(m);
    if (strcmp(op, "Split") == 0)
        return map_split(m);
    if (strcmp(op, "Gather") == 0)
        return map_gather(m);
    int kx = in_idx(m, 0, &st);
    if (st != UN_OK)
        return st;
    if (kx < 0)
        return fail(m, "unsupported operator (no ONNX mapping)");
    if (strcmp(op, "ReduceMean") == 0 && ln_match(m, self, kx, &st))
        return st;
    if (strcmp(op, "Pad") == 0) {
        const oval *pd = nd->n_input > 1 ? const_of(m, nd->input[1]) : NULL;
        const oval *cv = nd->n_input > 2 && *nd->input[2] ? const_of(m, nd->input[2]) : NULL;
        const Onnx__AttributeProto *md = attr(nd, "mode");
        un_ref x;
        if ((md && md->has_s && !(md->s.len == 8 && memcmp(md->s.data, "constant", 8) == 0)) ||
            (cv && (cv->n != 1 || cv->d[0] != 0)))
            return fail(m, "only zero padding is supported");
        if ((st = graph_of(m, kx, &x)) != UN_OK)
            return st;
        if (!pd || pd->n != 8 || shape_of(m, x)->rank != 4 || pd->d[0] || pd->d[1] || pd->d[4] ||
            pd->d[5] || pd->d[2] != pd->d[6] || pd->d[3] != pd->d[7] || pd->d[2] < 0 ||
            pd->d[3] < 0)
            return fail(m, "only constant, symmetric padding of h and w of [n, c, h, w]");
        oval *o = val_new(m, nd->output[0]);
        o->kind = OV_PAD;
        o->ref = x;
        o->pad_h = toi(pd->d[2]), o->pad_w = toi(pd->d[3]);
        return UN_OK;
    }
    if (strcmp(op, "Identity") == 0) {
        un_ref x;
        if ((st = graph_of(m, kx, &x)) != UN_OK)
            return st;
        return out_graph(m, 0, x);
    }
    if (strcmp(op, "Dropout") == 0) {
        double ratio = 0.5, train = 0;
        if (nd->n_input > 1 && *nd->input[1] && !const_scalar(m, nd->input[1], &ratio))
            return fail(m, "the ratio must be a constant");
        if (nd->n_input > 2 && *nd->input[2] && !const_scalar(m, nd->input[2], &train))
            return fail(m, "training_mode must be a constant");
        if (nd->n_output > 1 && *nd->output[1]) {
            int c[1];
            if (consumers(m, nd->output[1], c, 1) > 0)
                return fail(m, "its mask output is used");
        }
        un_ref x, y;
        if ((st = graph_of(m, kx, &x)) != UN_OK)
            return st;
        if (!train || ratio == 0)
            return out_graph(m, 0, x);
        int64_t pct = (int64_t)llround(ratio * 100);
        if (fabs((double)pct - ratio * 100) > 1e-6 || pct < 0 || pct > 99)
            return fail(m, "ratio %g is not a whole percentage below 100", ratio);
        un_param p[UN_MAX_PARAMS];
        params_default(m, UN_OP_DROPOUT, p);
        pset(UN_OP_DROPOUT, m->spec, p, "rate_pct", pct);
        pset(UN_OP_DROPOUT, m->spec, p, "seed", self + 1);
        if ((st = add(m, UN_OP_DROPOUT, p, &x, 1, out_name(m), "", &y)) != UN_OK)
            return st;
        return out_graph(m, 0, y);
    }
    static const struct {
        const char *onnx;
        un_op op;
    } unary[] = {{"Relu", UN_OP_RELU},
                 {"Sigmoid", UN_OP_SIGMOID},
                 {"Tanh", UN_OP_TANH},
                 {"Gelu", UN_OP_GELU}};
    for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++)
        if (strcmp(op, unary[i].onnx) == 0) {
            un_ref x, y;
            if (strcmp(op, "Gelu") == 0 && attr(nd, "approximate") &&
                !(attr(nd, "approximate")->s.len == 4 &&
                  memcmp(attr(nd, "approximate")->s.data, "none", 4) == 0))
                return fail(m, "only the exact (erf) Gelu is supported");
            if ((st = graph_of(m, kx, &x)) != UN_OK ||
                (st = add(m, unary[i].op, NULL, &x, 1, out_name(m), "", &y)) != UN_OK)
                return st;
            return out_graph(m, 0, y);
        }
    un_ref x, y;
    if ((st = graph_of(m, kx, &x)) != UN_OK)
        return st;
    const un_shape *xs = shape_of(m, x);
    if (strcmp(op, "Softmax") == 0) {
        int64_t ax = attr_i(nd, "axis", -1);
        ax = ax < 0 ? ax + xs->rank : ax;
        un_param p[UN_MAX_PARAMS];
        params_default(m, UN_OP_SOFTMAX, p);
        pset(UN_OP_SOFTMAX, m->spec, p, "dim", ax);
        st = add(m, UN_OP_SOFTMAX, p, &x, 1, out_name(m), "", &y);
    } else if (strcmp(op, "LayerNormalization") == 0) {
        int kg = in_idx(m, 1, &st), kb = in_idx(m, 2, &st);
        int64_t ax = attr_i(nd, "axis", -1);
        if (st != UN_OK)
            return st;
        if (ax != -1 && ax != xs->rank - 1)
            return fail(m, "only normalisation over the last axis is supported");
        if (kb < 0 || nd->n_output > 1)
            return fail(m, "needs a bias and exactly one output");
        if ((st = eps_fix(m, x, attr_f(nd, "epsilon", 1e-5), &x)) != UN_OK)
            return st;
        un_ref in[3] = {x, {0, 0}, {0, 0}};
        if ((st = as_weight(m, kg, &in[1])) != UN_OK || (st = as_weight(m, kb, &in[2])) != UN_OK)
            return st;
        st = add(m, UN_OP_LAYER_NORM, NULL, in, 3, out_name(m), "", &y);
    } else if (strcmp(op, "Transpose") == 0) {
        int64_t perm[UN_MAX_DIMS];
        if ((st = perm_of(m, xs->rank, perm)) != UN_OK)
            return st;
        st = transpose_perm(m, x, xs->rank, perm, out_name(m), &y);
    } else if (strcmp(op, "Reshape") == 0 || strcmp(op, "Flatten") == 0 ||
               strcmp(op, "Unsqueeze") == 0 || strcmp(op, "Squeeze") == 0) {
        int64_t dim[UN_MAX_DIMS], numel = un_shape_numel(xs);
        int rank = 0;
        if (op[0] == 'F') {
            int64_t ax = attr_i(nd, "axis", 1), lead = 1;
            ax = ax < 0 ? ax + xs->rank : ax;
            for (int i = 0; i < ax; i++)
                lead *= xs->dim[i];
            if (ax == 1 && xs->rank > 2)
                st = add(m, UN_OP_FLAT, NULL, &x, 1, out_name(m), "", &y);
            else
                st = reshape_to(m, x, 2, (int64_t[]){lead, numel / lead}, out_name(m), "", &y);
            return st != UN_OK ? st : out_graph(m, 0, y);
        }
        if ((rank = new_dims(m, xs->rank, xs->dim, dim)) < 0)
            return fail(m, "cannot reshape %lld elements that way", (long long)numel);
        st = reshape_to(m, x, rank, dim, out_name(m), "", &y);
    } else if (strcmp(op, "Concat") == 0) {
        int64_t ax = attr_i(nd, "axis", 0);
        ax = ax < 0 ? ax + xs->rank : ax;
        un_param p[UN_MAX_PARAMS];
        params_default(m, UN_OP_CONCAT, p);
        pset(UN_OP_CONCAT, m->spec, p, "axis", ax);
        y = x;
        for (size_t i = 1; i < nd->n_input && st == UN_OK; i++) {
            int k = in_idx(m, (int)i, &st);
            un_ref z;
            if (st == UN_OK && k < 0)
                st = fail(m, "an empty input");
            if (st == UN_OK && (st = graph_of(m, k, &z)) == UN_OK)
                st = add(m, UN_OP_CONCAT, p, (un_ref[]){y, z}, 2, out_name(m),
                         i + 1 < nd->n_input ? ".part" : "", &y);
        }
    } else if (strcmp(op, "ReduceMean") == 0 || strcmp(op, "ReduceSum") == 0) {
        int64_t axes[2];
        int na = attr_ints(nd, "axes", axes, 2);
        const oval *s = nd->n_input > 1 && *nd->input[1] ? const_of(m, nd->input[1]) : NULL;
        if (s && s->n == 1)
            na = 1, axes[0] = toi(s->d[0]);
        if (na != 1)
            return fail(m, "only a reduction over one axis is supported");
        un_op rop = op[6] == 'M' ? UN_OP_REDUCE_MEAN : UN_OP_REDUCE_SUM;
        un_param p[UN_MAX_PARAMS];
        params_default(m, rop, p);
        pset(rop, m->spec, p, "dim", axes[0]);
        pset(rop, m->spec, p, "keep", attr_i(nd, "keepdims", 1) != 0);
        st = add(m, rop, p, &x, 1, out_name(m), "", &y);
    } else {
        return fail(m, "unsupported operator (no ONNX mapping)");
    }
    if (st != UN_OK)
        return st;
    return out_graph(m, 0, y);
}

/* ---- the model ---- */

/* Dims of graph input `which` from input_shape ("2x3x8x8,4x7"), into dim; its rank or -1. */
static int shape_arg(const char *s, int which, int64_t *dim) {
    for (int i = 0; i < which && s; i++) {
        s = strchr(s, ',');
        s = s ? s + 1 : NULL;
    }
    if (!s || !*s)
        return -1;
    int r = 0;
    while (*s && *s != ',') {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v <= 0 || r == UN_MAX_DIMS)
            return -2;
        dim[r++] = v;
        s = end;
        if (*s == 'x' && s[1] >= '0' && s[1] <= '9')
            s++;
        else if (*s && *s != ',')
            return -2;
    }
    return r;
}

static un_status import(imp *m, const Onnx__ModelProto *mp, const char *input_shape, un_onnx *out) {
    const Onnx__GraphProto *gp = mp->graph;
    un_status st = UN_OK;
    out->opset = -1;
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
        if (!o->domain || !*o->domain || strcmp(o->domain, "ai.onnx") == 0)
            out->opset = (int)o->version;
    }
    if (out->opset < 13 || out->opset > 17)
        return fail(m, "opset %d is not supported (13 to 17 are)", out->opset);
    m->gp = gp;
    m->cap = (int)(gp->n_initializer + gp->n_input) + 1;
    for (size_t i = 0; i < gp->n_node; i++)
        m->cap += (int)gp->node[i]->n_output + 1;
    m->v = un_xcalloc((size_t)m->cap, sizeof *m->v);
    for (size_t i = 0; i < gp->n_initializer; i++) {
        oval *o = val_new(m, gp->initializer[i]->name ? gp->initializer[i]->name : "");
        if ((st = tensor_load(m, gp->initializer[i], o)) != UN_OK)
            return st;
        o->init = true;
    }
    int n_in = 0;
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        const char *vname = S(vi->name);
        if (val_find(m, vname) >= 0)
            continue; /* an initializer listed as an input (IR < 4) */
        const Onnx__TypeProto *tp = vi->type;
        if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type ||
            !tp->tensor_type->shape)
            return fail(m, "input '%s' is not a tensor of known rank", vname);
        const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
        int et = tt->has_elem_type ? tt->elem_type : 0;
        oval *o = val_new(m, vname);
        o->kind = OV_GRAPH;
        o->input = n_in;
        o->is_int = et == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ||
                    et == ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
        if (!o->is_int && et != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
            return fail(m, "input '%s' has element type %d (float, int32, int64 only)", vname, et);
        o->rank = (int)tt->shape->n_dim;
        if (o->rank < 1 || o->rank > UN_MAX_DIMS)
            return fail(m, "input '%s' has rank %d (1 to %d)", vname, o->rank, UN_MAX_DIMS);
        int64_t given[UN_MAX_DIMS];
        int gr = input_shape ? shape_arg(input_shape, n_in, given) : -1;
        if (gr == -2 || (gr >= 0 && gr != o->rank))
            return fail(m, "--input-shape '%s' does not give input '%s' %d dims (like 2x3x8x8)",
                        input_shape, vname, o->rank);
        for (int d = 0; d < o->rank; d++) {
            const Onnx__TensorShapeProto__Dimension *dm = tt->shape->dim[d];
            bool fixed = dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                         dm->dim_value > 0;
            if (gr >= 0)
                o->dim[d] = given[d];
            else if (fixed)
                o->dim[d] = dm->dim_value;
            else
                return fail(m, "input '%s' has a dynamic dim %d ('%s'); give --input-shape", vname,
                            d,
                            dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                                ? S(dm->dim_param)
                                : "?");
            if (gr >= 0 && fixed && dm->dim_value != given[d])
                return fail(m, "--input-shape gives input '%s' dim %d = %lld, the file %lld", vname,
                            d, (long long)given[d], (long long)dm->dim_value);
        }
        n_in++;
    }
    if (n_in == 0)
        return fail(m, "the graph has no data input");
    m->skip = un_xcalloc(gp->n_node ? gp->n_node : 1, sizeof(bool));
    for (size_t i = 0; i < gp->n_node; i++) {
        if (m->skip[i])
            continue;
        m->cur = gp->node[i];
        if (!m->cur->op_type)
            return fail(m, "a node without an op type");
        if ((st = map_node(m, (int)i)) != UN_OK)
            return st;
    }
    m->cur = NULL;
    if (gp->n_output < 1 || gp->n_output > 8)
        return fail(m, "the graph has %zu outputs (1 to 8)", gp->n_output);
    un_ref outs[8];
    for (size_t i = 0; i < gp->n_output; i++) {
        int k = val_find(m, S(gp->output[i]->name));
        if (k < 0 || m->v[k].kind != OV_GRAPH || m->v[k].input >= 0)
            return fail(m, "output '%s' is not computed from the inputs", S(gp->output[i]->name));
        outs[i] = m->v[k].ref;
    }
    if ((st = un_graph_set_outputs(m->ctx, m->g, outs, (int)gp->n_output)) != UN_OK)
        return st;
    int64_t n = 0;
    for (int i = 0; i < m->nw; i++)
        n += un_shape_numel(un_graph_shape(m->g, (un_ref){m->wnode[i], 0}));
    out->values = un_xmalloc((size_t)(n ? n : 1) * sizeof(float));
    out->n_values = n;
    int64_t at = 0;
    for (int i = 0; i < m->nw; i++) {
        int64_t k = un_shape_numel(un_graph_shape(m->g, (un_ref){m->wnode[i], 0}));
        memcpy(out->values + at, m->wdata[i], (size_t)k * sizeof(float));
        at += k;
    }
    out->onnx_params = m->params;
    return UN_OK;
}

un_status un_onnx_import(un_ctx *ctx, const un_spec *spec, const char *path,
                         const char *input_shape, un_onnx *out) {
    memset(out, 0, sizeof *out);
    char *text = NULL;
    size_t len = 0;
    un_status st = un_read_file(ctx, path, &text, &len);
    if (st != UN_OK)
        return st;
    Onnx__ModelProto *mp = len ? onnx__model_proto__unpack(NULL, len, (const uint8_t *)text) : NULL;
    free(text);
    if (!mp)
        return un_ctx_error(ctx, UN_ERR_PARSE, "%s: not an ONNX model (protobuf does not parse)",
                            path);
    if (!mp->graph || !mp->has_ir_version) {
        onnx__model_proto__free_unpacked(mp, NULL);
        return un_ctx_error(ctx, UN_ERR_PARSE, "%s: not an ONNX model (no graph or IR version)",
                            path);
    }
    imp m = {.ctx = ctx, .spec = spec, .path = path, .g = un_graph_new(spec)};
    st = import(&m, mp, input_shape, out);
    for (int i = 0; i < m.nv; i++)
        free(m.v[i].d);
    for (int i = 0; i < m.nw; i++)
        free(m.wdata[i]);
    free(m.v);
    free(m.wnode);
    free(m.wdata);
    free(m.skip);
    onnx__model_proto__free_unpacked(mp, NULL);
    if (st != UN_OK) {
        un_graph_free(m.g);
        un_onnx_deinit(out);
        return st;
    }
    out->graph = m.g;
    return UN_OK;
}

#endif
