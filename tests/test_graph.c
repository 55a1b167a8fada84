/* test_graph.c - the PCG module: building graphs with inferred shapes and layouts, name and
 * reference errors, the canonical hash (invariant under insertion order and renaming, sensitive to
 * every real change), JSON round trips and errors, and DOT output. Runs from the repository root.
 */
#include <stdlib.h>

#include "pcg/graph.h"
#include "pcg/sample.h"
#include "tests/fuzz.h"
#include "tests/test.h"

static un_spec *S; /* loaded once in main */

/* An error whose message contains both substrings (s2 may be NULL). */
#define EXPECT_ERR(ctx, st, s1, s2) expect_err((ctx), (st), (s1), (s2), TEST__AT)

static void expect_err(const un_ctx *ctx, un_status st, const char *s1, const char *s2,
                       const char *file, int line) {
    const char *msg = un_ctx_errmsg(ctx);
    test__check(st != UN_OK && strstr(msg, s1) && (!s2 || strstr(msg, s2)), file, line,
                "expected an error mentioning '%s'%s%s%s, got %s: %s", s1, s2 ? " and '" : "",
                s2 ? s2 : "", s2 ? "'" : "", un_status_str(st), *msg ? msg : "(no message)");
}

/* ---- building helpers
 * ---------------------------------------------------------------------------- */

static void defaults(un_op op, un_param *p) { un_spec_param_defaults(un_spec_op(S, op), p); }

static void pset(un_op op, un_param *p, const char *name, int64_t v) {
    int i = un_spec_param_index(un_spec_op(S, op), name);
    test__check(i >= 0, TEST__AT, "op %s has no parameter '%s'", un_op_name(op), name);
    if (i >= 0)
        p[i] = un_param_int(v);
}

static void plist(un_op op, un_param *p, const char *name, int n, const int64_t *v) {
    int i = un_spec_param_index(un_spec_op(S, op), name);
    test__check(i >= 0, TEST__AT, "op %s has no parameter '%s'", un_op_name(op), name);
    if (i < 0)
        return;
    memset(&p[i], 0, sizeof p[i]);
    p[i].len = n;
    for (int k = 0; k < n; k++)
        p[i].v[k] = v[k];
}

static void penum(un_op op, un_param *p, const char *name, const char *value) {
    const un_op_spec *os = un_spec_op(S, op);
    int i = un_spec_param_index(os, name);
    test__check(i >= 0, TEST__AT, "op %s has no parameter '%s'", un_op_name(op), name);
    if (i < 0)
        return;
    for (int k = 0; k < os->params[i].n_enum; k++)
        if (strcmp(os->params[i].enums[k], value) == 0)
            p[i] = un_param_int(k);
}

static int32_t add_src(un_ctx *ctx, un_graph *g, const char *name, un_op op, int64_t d0,
                       int64_t d1) {
    int32_t id = -1;
    EXPECT_OK(ctx, un_graph_add_input(ctx, g, name, op, 2, (int64_t[]){d0, d1}, &id));
    return id;
}

static int32_t add_n(un_ctx *ctx, un_graph *g, un_op op, const un_param *p, int n, const un_ref *in,
                     const char *name) {
    int32_t id = -1;
    EXPECT_OK(ctx, un_graph_add(ctx, g, op, p, in, n, name, &id));
    return id;
}

static int32_t add1(un_ctx *ctx, un_graph *g, un_op op, const un_param *p, int32_t a,
                    const char *name) {
    return add_n(ctx, g, op, p, 1, (un_ref[]){{a, 0}}, name);
}

static int32_t add2(un_ctx *ctx, un_graph *g, un_op op, const un_param *p, int32_t a, int32_t b,
                    const char *name) {
    return add_n(ctx, g, op, p, 2, (un_ref[]){{a, 0}, {b, 0}}, name);
}

static int32_t add_par(un_ctx *ctx, un_graph *g, un_op op, int32_t a, int dim, int k,
                       const char *name) {
    un_param p[UN_MAX_PARAMS];
    defaults(op, p);
    if (dim >= 0)
        pset(op, p, "dim", dim);
    pset(op, p, "degree", k);
    return add1(ctx, g, op, p, a, name);
}

static const un_shape *out0(const un_graph *g, int32_t id) {
    return un_graph_shape(g, (un_ref){id, 0});
}

static void expect_dims(const un_shape *s, int64_t d0, int64_t d1, const char *file, int line) {
    test__check(s->rank == 2 && s->dim[0] == d0 && s->dim[1] == d1, file, line,
                "expected [%lld,%lld], got rank %d [%lld,%lld]", (long long)d0, (long long)d1,
                s->rank, (long long)s->dim[0], (long long)s->dim[1]);
}
#define EXPECT_DIMS(s, d0, d1) expect_dims((s), (d0), (d1), TEST__AT)

/* x[8,16] -> linear(w1[16,32], relu) -> linear(w2[32,4]); order 0 adds weights first, names vary.
 */
static un_graph *build_mlp(un_ctx *ctx, int order, const char *const names[5]) {
    un_graph *g = un_graph_new(S);
    un_param pr[UN_MAX_PARAMS], pn[UN_MAX_PARAMS];
    defaults(UN_OP_LINEAR, pr);
    defaults(UN_OP_LINEAR, pn);
    penum(UN_OP_LINEAR, pr, "activation", "relu");
    int32_t x, w1, w2, h;
    if (order == 0) {
        w2 = add_src(ctx, g, names[2], UN_OP_WEIGHT, 32, 4);
        w1 = add_src(ctx, g, names[1], UN_OP_WEIGHT, 16, 32);
        x = add_src(ctx, g, names[0], UN_OP_INPUT, 8, 16);
    } else {
        x = add_src(ctx, g, names[0], UN_OP_INPUT, 8, 16);
        w1 = add_src(ctx, g, names[1], UN_OP_WEIGHT, 16, 32);
        w2 = add_src(ctx, g, names[2], UN_OP_WEIGHT, 32, 4);
    }
    h = add2(ctx, g, UN_OP_LINEAR, pr, x, w1, names[3]);
    add2(ctx, g, UN_OP_LINEAR, pn, h, w2, names[4]);
    return g;
}

/* ---- building and inference
 * ------------------------------------------------------------------------ */

static void test_mlp(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    static const char *const nm[5] = {"x", "w1", "w2", "h", "y"};
    un_graph *g = build_mlp(ctx, 1, nm);
    EXPECT_EQ(un_graph_node_count(g), 5);
    EXPECT_DIMS(out0(g, 3), 8, 32);
    EXPECT_DIMS(out0(g, 4), 8, 4);
    EXPECT_TRUE(un_shape_is_trivial(out0(g, 4)));
    EXPECT_EQ(un_graph_find(g, "h"), 3);
    EXPECT_EQ(un_graph_find(g, "nope"), -1);
    EXPECT_STR_EQ(un_graph_node(g, 4)->name, "y");
    EXPECT_EQ(un_graph_output_count(g), 1);
    EXPECT_EQ(un_graph_output(g, 0).node, 4);
    for (int i = 0; i < 5; i++) /* id order is topological: inputs come first */
        for (int j = 0; j < un_graph_node(g, i)->n_in; j++)
            EXPECT_TRUE(un_graph_node(g, i)->in[j].node < i);
    EXPECT_TRUE(un_graph_spec(g) == S);
    un_graph_free(g);
    un_ctx_free(ctx);
}

static void test_ew_chain(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = un_graph_new(S);
    int32_t x = add_src(ctx, g, "x", UN_OP_INPUT, 4, 6);
    int32_t y = add_src(ctx, g, "y", UN_OP_INPUT, 4, 6);
    int32_t a = add2(ctx, g, UN_OP_EW_ADD, NULL, x, y, "a");
    int32_t b = add2(ctx, g, UN_OP_EW_ADD, NULL, a, x, "b");
    int32_t c = add2(ctx, g, UN_OP_EW_MUL, NULL, b, a, NULL);
    int32_t d = add1(ctx, g, UN_OP_RELU, NULL, a, "d");
    EXPECT_DIMS(out0(g, c), 4, 6);
    EXPECT_DIMS(out0(g, d), 4, 6);
    EXPECT_TRUE(un_graph_node(g, c)->name == NULL);
    /* implicit outputs: c and d, in node order */
    EXPECT_EQ(un_graph_output_count(g), 2);
    EXPECT_EQ(un_graph_output(g, 0).node, c);
    EXPECT_EQ(un_graph_output(g, 1).node, d);
    /* explicit outputs override, and change the hash */
    uint64_t h = un_graph_hash(g);
    EXPECT_OK(ctx, un_graph_set_outputs(ctx, g, (un_ref[]){{d, 0}, {b, 0}}, 2));
    EXPECT_EQ(un_graph_output_count(g), 2);
    EXPECT_EQ(un_graph_output(g, 0).node, d);
    EXPECT_EQ(un_graph_output(g, 1).node, b);
    uint64_t h2 = un_graph_hash(g);
    EXPECT_TRUE(h2 != h);
    EXPECT_OK(ctx, un_graph_set_outputs(ctx, g, (un_ref[]){{b, 0}, {d, 0}}, 2));
    EXPECT_TRUE(un_graph_hash(g) != h2); /* output order matters */
    EXPECT_OK(ctx, un_graph_set_outputs(ctx, g, NULL, 0));
    EXPECT_EQ(un_graph_hash(g), h); /* back to implicit */
    EXPECT_EQ(un_graph_set_outputs(ctx, g, (un_ref[]){{99, 0}}, 1), UN_ERR_INVALID);
    un_graph_free(g);
    un_ctx_free(ctx);
}

static void test_parallel_chain(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = un_graph_new(S);
    int32_t x = add_src(ctx, g, "x", UN_OP_INPUT, 8, 16);
    int32_t p = add_par(ctx, g, UN_OP_PARTITION, x, 0, 2, "p");
    EXPECT_EQ(out0(g, p)->shard[0], 2);
    EXPECT_EQ(out0(g, p)->shard[1], 1);
    int32_t r = add1(ctx, g, UN_OP_RELU, NULL, p, "r");
    EXPECT_EQ(out0(g, r)->shard[0], 2);
    EXPECT_DIMS(out0(g, r), 8, 16);
    int32_t c = add_par(ctx, g, UN_OP_COMBINE, r, 0, 2, "c");
    EXPECT_TRUE(un_shape_is_trivial(out0(g, c)));
    int32_t rep = add_par(ctx, g, UN_OP_REPLICATE, c, -1, 4, "rep");
    EXPECT_EQ(out0(g, rep)->copy, 4);
    EXPECT_EQ(out0(g, rep)->sum, 1);
    /* combining a dim that is not sharded is a layout error */
    un_param pc[UN_MAX_PARAMS];
    defaults(UN_OP_COMBINE, pc);
    pset(UN_OP_COMBINE, pc, "dim", 1);
    pset(UN_OP_COMBINE, pc, "degree", 2);
    int32_t id = 7;
    un_status st = un_graph_add(ctx, g, UN_OP_COMBINE, pc, (un_ref[]){{r, 0}}, 1, "bad", &id);
    EXPECT_ERR(ctx, st, "bad", NULL);
    EXPECT_EQ(id, -1);
    EXPECT_EQ(un_graph_node_count(g), 5);
    un_graph_free(g);
    un_ctx_free(ctx);
}

static void test_split(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = un_graph_new(S);
    int32_t x = add_src(ctx, g, "x", UN_OP_INPUT, 4, 10);
    un_param ps[UN_MAX_PARAMS];
    defaults(UN_OP_SPLIT, ps);
    pset(UN_OP_SPLIT, ps, "axis", 1);
    plist(UN_OP_SPLIT, ps, "sizes", 2, (int64_t[]){3, 7});
    int32_t s = add1(ctx, g, UN_OP_SPLIT, ps, x, "s");
    EXPECT_EQ(un_graph_node(g, s)->inf.n_out, 2);
    EXPECT_DIMS(un_graph_shape(g, (un_ref){s, 0}), 4, 3);
    EXPECT_DIMS(un_graph_shape(g, (un_ref){s, 1}), 4, 7);
    int32_t r = add_n(ctx, g, UN_OP_RELU, NULL, 1, (un_ref[]){{s, 1}}, "r");
    EXPECT_DIMS(out0(g, r), 4, 7);
    EXPECT_EQ(un_graph_output_count(g), 2);
    EXPECT_EQ(un_graph_output(g, 0).node, s);
    EXPECT_EQ(un_graph_output(g, 0).out, 0);
    EXPECT_EQ(un_graph_output(g, 1).node, r);
    /* output 2 does not exist */
    un_status st = un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{s, 2}}, 1, "r2", NULL);
    EXPECT_EQ(st, UN_ERR_INVALID);
    EXPECT_ERR(ctx, st, "r2", "output 2");
    un_graph_free(g);
    un_ctx_free(ctx);
}

static void test_add_errors(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = un_graph_new(S);
    int32_t x = add_src(ctx, g, "x", UN_OP_INPUT, 4, 6);
    int32_t id = 5;
    un_status st = un_graph_add_input(ctx, g, "x", UN_OP_INPUT, 2, (int64_t[]){4, 6}, &id);
    EXPECT_EQ(st, UN_ERR_INVALID);
    EXPECT_ERR(ctx, st, "duplicate", "'x'");
    EXPECT_EQ(id, -1);
    un_ctx_clear(ctx);
    st = un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{3, 0}}, 1, "r", &id);
    EXPECT_EQ(st, UN_ERR_INVALID);
    EXPECT_ERR(ctx, st, "r (relu)", "node 3");
    un_ctx_clear(ctx);
    st = un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{x, 0}}, 1, "a:b", &id);
    EXPECT_ERR(ctx, st, "a:b", "':'");
    un_ctx_clear(ctx);
    st = un_graph_add_input(ctx, g, "y", UN_OP_RELU, 2, (int64_t[]){4, 6}, &id);
    EXPECT_ERR(ctx, st, "y", "source");
    un_ctx_clear(ctx);
    /* a shape error names the node and leaves the graph unchanged */
    int32_t w = add_src(ctx, g, "w", UN_OP_WEIGHT, 5, 3);
    uint64_t h = un_graph_hash(g);
    st = un_graph_add(ctx, g, UN_OP_LINEAR, NULL, (un_ref[]){{x, 0}, {w, 0}}, 2, "lin", &id);
    EXPECT_EQ(st, UN_ERR_SHAPE);
    EXPECT_ERR(ctx, st, "lin", NULL);
    EXPECT_EQ(un_graph_node_count(g), 2);
    EXPECT_EQ(un_graph_find(g, "lin"), -1);
    EXPECT_EQ(un_graph_hash(g), h);
    un_ctx_clear(ctx);
    /* unnamed nodes are labelled by their would-be id */
    st = un_graph_add(ctx, g, UN_OP_LINEAR, NULL, (un_ref[]){{x, 0}, {w, 0}}, 2, NULL, &id);
    EXPECT_ERR(ctx, st, "node 2", NULL);
    un_ctx_clear(ctx);
    /* a parameter outside its domain */
    un_param pp[UN_MAX_PARAMS];
    defaults(UN_OP_PARTITION, pp);
    pset(UN_OP_PARTITION, pp, "degree", -3);
    st = un_graph_add(ctx, g, UN_OP_PARTITION, pp, (un_ref[]){{x, 0}}, 1, "p", &id);
    EXPECT_ERR(ctx, st, "p (partition)", "'degree'");
    EXPECT_EQ(un_graph_node_count(g), 2);
    un_graph_free(g);
    un_ctx_free(ctx);
}

/* partition x on its last dim and w on dim 0: linear's contract rule gives a sum-degree output,
 * which relu (nonlinear) must reject. */
static void test_layout_error(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = un_graph_new(S);
    int32_t x = add_src(ctx, g, "x", UN_OP_INPUT, 8, 16);
    int32_t w = add_src(ctx, g, "w", UN_OP_WEIGHT, 16, 4);
    int32_t px = add_par(ctx, g, UN_OP_PARTITION, x, 1, 2, "px");
    int32_t pw = add_par(ctx, g, UN_OP_PARTITION, w, 0, 2, "pw");
    int32_t y = add2(ctx, g, UN_OP_LINEAR, NULL, px, pw, "y");
    if (y >= 0) {
        EXPECT_EQ(out0(g, y)->sum, 2);
        EXPECT_DIMS(out0(g, y), 8, 4);
        int32_t id;
        un_status st = un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{y, 0}}, 1, "act", &id);
        EXPECT_EQ(st, UN_ERR_SHAPE);
        EXPECT_ERR(ctx, st, "act", "input 0");
        EXPECT_EQ(un_graph_node_count(g), 5);
        /* reduce first, then relu is fine */
        un_ctx_clear(ctx);
        int32_t red = add_par(ctx, g, UN_OP_REDUCE, y, -1, 2, "red");
        int32_t act = add1(ctx, g, UN_OP_RELU, NULL, red, "act");
        EXPECT_TRUE(act >= 0 && un_shape_is_trivial(out0(g, act)));
    }
    un_graph_free(g);
    un_ctx_free(ctx);
}

#define SRC(name) "{\"name\": \"" name "\", \"op\": \"input\", \"params\": {\"shape\": [4, 4]}}"

/* ---- canonical hash
 * --------------------------------------------------------------------------------- */

static void test_hash_order_names(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    static const char *const n1[5] = {"x", "w1", "w2", "h", "y"};
    static const char *const n2[5] = {"input", "A", "B", NULL, "out"};
    un_graph *a = build_mlp(ctx, 0, n1), *b = build_mlp(ctx, 1, n2);
    EXPECT_EQ(un_graph_hash(a), un_graph_hash(b));
    /* canonical orders pick corresponding nodes */
    int32_t oa[5], ob[5];
    un_graph_canonical_order(a, oa);
    un_graph_canonical_order(b, ob);
    for (int i = 0; i < 5; i++) {
        const un_node *na = un_graph_node(a, oa[i]), *nb = un_graph_node(b, ob[i]);
        EXPECT_EQ(na->op, nb->op);
        EXPECT_TRUE(un_shape_eq(&na->inf.out[0], &nb->inf.out[0]));
    }
    /* inputs are numbered by first use: x, then w1, then w2 */
    EXPECT_STR_EQ(un_graph_node(a, oa[0])->name, "x");
    EXPECT_STR_EQ(un_graph_node(a, oa[1])->name, "w1");
    EXPECT_STR_EQ(un_graph_node(a, oa[2])->name, "w2");
    un_graph_free(a);
    un_graph_free(b);

    /* two symmetric branches, added in either order */
    un_graph *g[2];
    for (int v = 0; v < 2; v++) {
        g[v] = un_graph_new(S);
        int32_t x = add_src(ctx, g[v], v ? "q" : "x", UN_OP_INPUT, 4, 4);
        int32_t y = add_src(ctx, g[v], v ? "p" : "y", UN_OP_INPUT, 4, 4);
        int32_t r1, r2;
        if (v == 0) {
            r1 = add1(ctx, g[v], UN_OP_RELU, NULL, x, NULL);
            r2 = add1(ctx, g[v], UN_OP_TANH, NULL, y, NULL);
        } else {
            r2 = add1(ctx, g[v], UN_OP_TANH, NULL, y, NULL);
            r1 = add1(ctx, g[v], UN_OP_RELU, NULL, x, NULL);
        }
        int32_t s = add2(ctx, g[v], UN_OP_EW_SUB, NULL, r1, r2, NULL);
        add2(ctx, g[v], UN_OP_EW_ADD, NULL, s, x, NULL);
    }
    EXPECT_EQ(un_graph_hash(g[0]), un_graph_hash(g[1]));
    un_graph_free(g[0]);
    un_graph_free(g[1]);
    un_ctx_free(ctx);
}

/* ew_add(a, a) next to ew_add(b, c), ew_add(c, b): a, b and c look alike to colour refinement,
 * so the argument pattern must tell the first apart. Every file order gives one hash. */
static void test_hash_ties(void) {
    static const char *const lines[] = {
        SRC("n0"),
        SRC("n1"),
        SRC("n2"),
        SRC("n3"),
        "{\"name\": \"n4\", \"op\": \"ew_add\", \"in\": [\"n0\", \"n0\"]}",
        "{\"name\": \"n5\", \"op\": \"ew_add\", \"in\": [\"n2\", \"n3\"]}",
        "{\"name\": \"n6\", \"op\": \"ew_add\", \"in\": [\"n3\", \"n2\"]}",
        "{\"name\": \"n7\", \"op\": \"relu\", \"in\": [\"n1\"]}",
        "{\"name\": \"n8\", \"op\": \"relu\", \"in\": [\"n1\"]}",
    };
    enum { N = sizeof lines / sizeof lines[0] };
    un_ctx *ctx = un_ctx_new(NULL);
    un_rng r;
    un_rng_seed(&r, 77);
    uint64_t first = 0;
    int same = 0;
    for (int t = 0; t < 100; t++) {
        int p[N];
        for (int i = 0; i < N; i++)
            p[i] = i;
        for (int i = N - 1; i > 0; i--) {
            int j = (int)un_rng_below(&r, (uint64_t)i + 1), x = p[i];
            p[i] = p[j];
            p[j] = x;
        }
        un_buf b = {0};
        un_buf_printf(&b, "{\"nodes\": [");
        for (int i = 0; i < N; i++)
            un_buf_printf(&b, "%s%s", i ? ", " : "", lines[p[i]]);
        un_buf_printf(&b, "]}");
        un_graph *g = NULL;
        EXPECT_OK(ctx, un_graph_from_json(ctx, S, "ties.json", b.data, b.len, &g));
        if (g) {
            if (t == 0)
                first = un_graph_hash(g);
            same += un_graph_hash(g) == first;
        }
        un_graph_free(g);
        un_buf_deinit(&b);
    }
    EXPECT_EQ(same, 100);
    un_ctx_free(ctx);
}

/* A random DAG over [4,4] tensors: a few sources, then unary and binary ops on earlier nodes. */
typedef struct rnode {
    un_op op;
    int n_in;
    int src[2];
} rnode;

static const un_op unary_ops[] = {UN_OP_RELU, UN_OP_SIGMOID, UN_OP_TANH, UN_OP_GELU};
static const un_op binary_ops[] = {UN_OP_EW_ADD, UN_OP_EW_SUB, UN_OP_EW_MUL, UN_OP_LINEAR};

static int rdag_make(un_rng *r, rnode *rn) {
    int n_src = 1 + (int)un_rng_below(r, 3), n_ops = 1 + (int)un_rng_below(r, 10);
    int n = 0;
    for (int i = 0; i < n_src; i++)
        rn[n++] = (rnode){un_rng_below(r, 2) ? UN_OP_INPUT : UN_OP_WEIGHT, 0, {0, 0}};
    for (int i = 0; i < n_ops; i++, n++) {
        bool bin = un_rng_below(r, 2);
        rn[n].n_in = bin ? 2 : 1;
        rn[n].op = bin ? binary_ops[un_rng_below(r, 4)] : unary_ops[un_rng_below(r, 4)];
        for (int k = 0; k < rn[n].n_in; k++)
            rn[n].src[k] = (int)un_rng_below(r, (uint64_t)n);
    }
    return n;
}

/* Builds rn in a random topological order with random names (or none). */
static un_graph *rdag_build(un_ctx *ctx, const rnode *rn, int n, un_rng *r, int naming) {
    un_graph *g = un_graph_new(S);
    int32_t id[32];
    bool done[32] = {false};
    for (int added = 0; added < n; added++) {
        int ready[32], nr = 0;
        for (int v = 0; v < n; v++) {
            if (done[v])
                continue;
            bool ok = true;
            for (int k = 0; k < rn[v].n_in; k++)
                ok &= done[rn[v].src[k]];
            if (ok)
                ready[nr++] = v;
        }
        int v = ready[un_rng_below(r, (uint64_t)nr)];
        char name[32];
        snprintf(name, sizeof name, naming == 0 ? "n%d" : "%d_%d", v, added);
        const char *nm = naming == 2 ? NULL : name;
        if (rn[v].n_in == 0)
            id[v] = add_src(ctx, g, nm, rn[v].op, 4, 4);
        else
            id[v] = add_n(
                ctx, g, rn[v].op, NULL, rn[v].n_in,
                (un_ref[]){{id[rn[v].src[0]], 0}, {rn[v].n_in > 1 ? id[rn[v].src[1]] : 0, 0}}, nm);
        done[v] = true;
    }
    return g;
}

/* to_json -> from_json gives the same hash and the same text. */
static bool json_roundtrip_ok(un_ctx *ctx, const un_graph *g) {
    un_buf a = {0}, b = {0};
    un_graph *h = NULL;
    bool ok = un_graph_to_json(ctx, g, &a) == UN_OK &&
              un_graph_from_json(ctx, S, "rt.json", a.data, a.len, &h) == UN_OK &&
              un_graph_hash(h) == un_graph_hash(g) && un_graph_to_json(ctx, h, &b) == UN_OK &&
              strcmp(a.data, b.data) == 0;
    un_graph_free(h);
    un_buf_deinit(&a);
    un_buf_deinit(&b);
    return ok;
}

/* The canonical order is a permutation of the nodes with every input before its user, and the
 * sources come first. */
static bool canonical_order_ok(const un_graph *g) {
    int32_t n = un_graph_node_count(g), order[64], at[64];
    if (n > 64)
        return false;
    un_graph_canonical_order(g, order);
    for (int32_t i = 0; i < n; i++)
        at[i] = -1;
    for (int32_t i = 0; i < n; i++) {
        if (order[i] < 0 || order[i] >= n || at[order[i]] >= 0)
            return false;
        at[order[i]] = i;
    }
    bool ops_started = false;
    for (int32_t i = 0; i < n; i++) {
        const un_node *nd = un_graph_node(g, order[i]);
        bool src = un_op_kind_of(nd->op) == UN_OPK_SOURCE;
        if (src && ops_started)
            return false;
        ops_started |= !src;
        for (int32_t j = 0; j < nd->n_in; j++)
            if (at[nd->in[j].node] >= i)
                return false;
    }
    return true;
}

static void test_hash_random(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rng r;
    un_rng_seed(&r, 1234);
    int same = 0, differ = 0, roundtrip = 0, canon_ok = 0;
    for (int trial = 0; trial < 200; trial++) {
        rnode rn[32];
        int n = rdag_make(&r, rn);
        un_graph *a = rdag_build(ctx, rn, n, &r, 0);
        un_graph *b = rdag_build(ctx, rn, n, &r, 1 + trial % 2);
        same += un_graph_hash(a) == un_graph_hash(b);
        roundtrip += json_roundtrip_ok(ctx, b);
        canon_ok += canonical_order_ok(b);
        /* change one op to another of the same arity */
        int v = n - 1 - (int)un_rng_below(&r, 3);
        if (v < 0)
            v = 0;
        while (rn[v].n_in == 0)
            v++;
        const un_op *menu = rn[v].n_in == 1 ? unary_ops : binary_ops;
        int at = 0;
        while (menu[at] != rn[v].op)
            at++;
        rn[v].op = menu[(at + 1 + (int)un_rng_below(&r, 3)) % 4];
        un_graph *c = rdag_build(ctx, rn, n, &r, 0);
        differ += un_graph_hash(a) != un_graph_hash(c);
        un_graph_free(a);
        un_graph_free(b);
        un_graph_free(c);
    }
    EXPECT_EQ(same, 200);
    EXPECT_EQ(differ, 200);
    EXPECT_EQ(roundtrip, 200);
    EXPECT_EQ(canon_ok, 200);
    EXPECT_OK(ctx, un_ctx_status(ctx));
    un_ctx_free(ctx);
}

/* y = ew_sub(relu(x), x) built with one change at a time. */
static un_graph *build_variant(un_ctx *ctx, int variant) {
    un_graph *g = un_graph_new(S);
    int32_t x = add_src(ctx, g, "x", UN_OP_INPUT, variant == 4 ? 4 : 8, 6);
    un_param pl[UN_MAX_PARAMS];
    defaults(UN_OP_LINEAR, pl);
    if (variant == 2)
        penum(UN_OP_LINEAR, pl, "activation", "relu");
    int32_t w = add_src(ctx, g, "w", UN_OP_WEIGHT, 6, 6);
    int32_t l = add2(ctx, g, UN_OP_LINEAR, pl, x, w, "l");
    int32_t r = add1(ctx, g, variant == 1 ? UN_OP_TANH : UN_OP_RELU, NULL, l, "r");
    if (variant == 3)
        add2(ctx, g, UN_OP_EW_SUB, NULL, l, r, "y");
    else
        add2(ctx, g, UN_OP_EW_SUB, NULL, r, l, "y");
    if (variant == 5)
        EXPECT_OK(ctx, un_graph_set_outputs(ctx, g, (un_ref[]){{r, 0}}, 1));
    return g;
}

static void test_hash_mutations(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    uint64_t h[6];
    for (int v = 0; v < 6; v++) {
        un_graph *g = build_variant(ctx, v);
        h[v] = un_graph_hash(g);
        un_graph_free(g);
    }
    for (int i = 0; i < 6; i++)
        for (int j = i + 1; j < 6; j++)
            test__check(h[i] != h[j], TEST__AT, "variants %d and %d hash equal", i, j);
    /* layouts of parallel ops count: partition dim 0 vs dim 1, degree 2 vs 4 */
    uint64_t hp[3];
    for (int v = 0; v < 3; v++) {
        un_graph *g = un_graph_new(S);
        int32_t x = add_src(ctx, g, "x", UN_OP_INPUT, 8, 8);
        add_par(ctx, g, UN_OP_PARTITION, x, v == 1, v == 2 ? 4 : 2, NULL);
        hp[v] = un_graph_hash(g);
        un_graph_free(g);
    }
    EXPECT_TRUE(hp[0] != hp[1] && hp[0] != hp[2] && hp[1] != hp[2]);
    /* source dtype-free shape change only */
    un_graph *g1 = un_graph_new(S), *g2 = un_graph_new(S);
    add_src(ctx, g1, "x", UN_OP_INPUT, 4, 6);
    add_src(ctx, g2, "x", UN_OP_INPUT, 6, 4);
    EXPECT_TRUE(un_graph_hash(g1) != un_graph_hash(g2));
    /* input vs weight of the same shape */
    un_graph *g3 = un_graph_new(S);
    add_src(ctx, g3, "x", UN_OP_WEIGHT, 4, 6);
    EXPECT_TRUE(un_graph_hash(g1) != un_graph_hash(g3));
    un_graph_free(g1);
    un_graph_free(g2);
    un_graph_free(g3);
    un_ctx_free(ctx);
}

static void test_clone(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    static const char *const nm[5] = {"x", "w1", "w2", "h", "y"};
    un_graph *g = build_mlp(ctx, 1, nm);
    un_graph *c = un_graph_clone(g);
    EXPECT_EQ(un_graph_hash(c), un_graph_hash(g));
    EXPECT_EQ(un_graph_find(c, "h"), 3);
    add1(ctx, c, UN_OP_RELU, NULL, 4, "z");
    EXPECT_EQ(un_graph_node_count(c), 6);
    EXPECT_EQ(un_graph_node_count(g), 5);
    EXPECT_EQ(un_graph_find(g, "z"), -1);
    EXPECT_TRUE(un_graph_hash(c) != un_graph_hash(g));
    un_graph_free(c);
    un_graph_free(g);
    un_ctx_free(ctx);
}

/* ---- JSON and DOT
 * ------------------------------------------------------------------------------------ */

static un_graph *build_mixed(un_ctx *ctx) {
    un_graph *g = un_graph_new(S);
    int32_t x = add_src(ctx, g, "x", UN_OP_INPUT, 8, 10);
    int32_t w = add_src(ctx, g, "w \"quoted\"", UN_OP_WEIGHT, 10, 6);
    un_param pl[UN_MAX_PARAMS];
    defaults(UN_OP_LINEAR, pl);
    penum(UN_OP_LINEAR, pl, "activation", "relu");
    int32_t p = add_par(ctx, g, UN_OP_PARTITION, x, 0, 2, "p");
    int32_t rw = add_par(ctx, g, UN_OP_REPLICATE, w, -1, 2, "rw");
    int32_t l = add2(ctx, g, UN_OP_LINEAR, pl, p, rw, NULL);
    int32_t c = add_par(ctx, g, UN_OP_COMBINE, l, 0, 2, "c");
    un_param ps[UN_MAX_PARAMS];
    defaults(UN_OP_SPLIT, ps);
    pset(UN_OP_SPLIT, ps, "axis", 1);
    plist(UN_OP_SPLIT, ps, "sizes", 2, (int64_t[]){2, 4});
    int32_t s = add1(ctx, g, UN_OP_SPLIT, ps, c, "s");
    int32_t t = add_n(ctx, g, UN_OP_TANH, NULL, 1, (un_ref[]){{s, 1}}, "t");
    EXPECT_OK(ctx, un_graph_set_outputs(ctx, g, (un_ref[]){{t, 0}, {s, 0}}, 2));
    return g;
}

static void test_json_roundtrip(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = build_mixed(ctx);
    un_buf a = {0}, b = {0};
    EXPECT_OK(ctx, un_graph_to_json(ctx, g, &a));
    un_graph *h = NULL;
    EXPECT_OK(ctx, un_graph_from_json(ctx, S, "mixed.json", a.data, a.len, &h));
    if (h) {
        EXPECT_EQ(un_graph_hash(h), un_graph_hash(g));
        EXPECT_EQ(un_graph_node_count(h), un_graph_node_count(g));
        for (int32_t i = 0; i < un_graph_node_count(g); i++) {
            const un_node *x = un_graph_node(g, i), *y = un_graph_node(h, i);
            EXPECT_EQ(x->op, y->op);
            EXPECT_TRUE(memcmp(x->params, y->params, sizeof x->params) == 0);
            EXPECT_TRUE(un_shape_eq(&x->inf.out[0], &y->inf.out[0]));
            if (x->name)
                EXPECT_STR_EQ(x->name, y->name);
        }
        EXPECT_EQ(un_graph_output_count(h), 2);
        EXPECT_EQ(un_graph_output(h, 1).node, un_graph_find(h, "s"));
        EXPECT_OK(ctx, un_graph_to_json(ctx, h, &b));
        EXPECT_STR_EQ(a.data, b.data);
    }
    EXPECT_TRUE(strstr(a.data, "\"activation\": \"relu\"") != NULL);
    EXPECT_TRUE(strstr(a.data, "\"sizes\": [2, 4]") != NULL);
    EXPECT_TRUE(strstr(a.data, "\"s:1\"") != NULL);
    EXPECT_TRUE(strstr(a.data, "\\\"quoted\\\"") != NULL);
    un_buf_deinit(&a);
    un_buf_deinit(&b);
    un_graph_free(h);
    un_graph_free(g);

    /* implicit outputs stay implicit */
    static const char *const nm[5] = {"x", "w1", "w2", "h", "y"};
    g = build_mlp(ctx, 0, nm);
    EXPECT_OK(ctx, un_graph_to_json(ctx, g, &a));
    EXPECT_TRUE(strstr(a.data, "outputs") == NULL);
    EXPECT_OK(ctx, un_graph_from_json(ctx, S, "mlp.json", a.data, a.len, &h));
    if (h)
        EXPECT_EQ(un_graph_hash(h), un_graph_hash(g));
    un_buf_deinit(&a);
    un_graph_free(h);
    un_graph_free(g);
    un_ctx_free(ctx);
}

/* Nodes out of order, and a file on disk. */
static void test_json_any_order(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    static const char text[] =
        "{\"nodes\": [\n"
        "  {\"name\": \"y\", \"op\": \"linear\", \"in\": [\"h\", \"w2\"]},\n"
        "  {\"name\": \"h\", \"op\": \"linear\", \"in\": [\"x\", \"w1\"], \"params\": "
        "{\"activation\": \"relu\"}},\n"
        "  {\"name\": \"w2\", \"op\": \"weight\", \"params\": {\"shape\": [32, 4]}},\n"
        "  {\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [8, 16]}},\n"
        "  {\"name\": \"w1\", \"op\": \"weight\", \"params\": {\"shape\": [16, 32]}}\n"
        "]}\n";
    un_graph *g = NULL;
    EXPECT_OK(ctx, un_graph_from_json(ctx, S, "shuffled.json", text, strlen(text), &g));
    static const char *const nm[5] = {"x", "w1", "w2", "h", "y"};
    un_graph *m = build_mlp(ctx, 1, nm);
    if (g) {
        EXPECT_EQ(un_graph_hash(g), un_graph_hash(m));
        un_graph_canonicalize(g); /* the cached form gives the same hash */
        EXPECT_EQ(un_graph_hash(g), un_graph_hash(m));
        EXPECT_STR_EQ(un_graph_node(g, 4)->name, "y");
        EXPECT_DIMS(out0(g, un_graph_find(g, "y")), 8, 4);
    }
    char path[] = "/tmp/test_graph_XXXXXX";
    int fd = mkstemp(path);
    EXPECT_TRUE(fd >= 0);
    if (fd >= 0) {
        FILE *f = fdopen(fd, "w");
        fputs(text, f);
        fclose(f);
        un_graph *l = NULL;
        EXPECT_OK(ctx, un_graph_load(ctx, S, path, &l));
        if (l)
            EXPECT_EQ(un_graph_hash(l), un_graph_hash(m));
        un_graph_free(l);
        remove(path);
    }
    un_graph *none = (un_graph *)1;
    un_status st = un_graph_load(ctx, S, "/nonexistent/graph.json", &none);
    EXPECT_EQ(st, UN_ERR_IO);
    EXPECT_TRUE(none == NULL);
    un_graph_free(m);
    un_graph_free(g);
    un_ctx_free(ctx);
}

#define SRC_X "{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [4, 6]}}"

static void test_json_errors(void) {
    static const struct {
        const char *text, *s1, *s2;
    } cases[] = {
        {"{\"nodes\": [}", "offset", "bad.json"},
        {"[1]", "$", "expected an object"},
        {"{\"nodez\": []}", "$.nodez", "unknown field"},
        {"{\"nodes\": [{\"name\": \"x\", \"op\": \"relux\"}]}", "$.nodes[0].op",
         "unknown op 'relux'"},
        {"{\"nodes\": [" SRC_X ", {\"name\": \"y\", \"op\": \"relu\", \"in\": [\"z\"]}]}",
         "$.nodes[1].in[0]", "unknown node 'z'"},
        {"{\"nodes\": [{\"name\": \"a\", \"op\": \"relu\", \"in\": [\"b\"]},"
         " {\"name\": \"b\", \"op\": \"relu\", \"in\": [\"a\"]}]}",
         "cycle", "'a'"},
        {"{\"nodes\": [" SRC_X ", " SRC_X "]}", "$.nodes[1].name", "duplicate node name 'x'"},
        {"{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": \"4x6\"}}]}",
         "$.nodes[0].params.shape", "expects an array"},
        {"{\"nodes\": [" SRC_X ", {\"name\": \"y\", \"op\": \"relu\", \"in\": [\"x\"], "
         "\"params\": {\"slope\": 1}}]}",
         "$.nodes[1].params.slope", "unknown parameter 'slope'"},
        {"{\"nodes\": [" SRC_X ", {\"name\": \"p\", \"op\": \"partition\", \"in\": [\"x\"], "
         "\"params\": {\"dim\": 0, \"degree\": -2}}]}",
         "$.nodes[1].params.degree", "outside [1,"},
        {"{\"nodes\": [" SRC_X ", {\"name\": \"p\", \"op\": \"partition\", \"in\": [\"x\"], "
         "\"params\": {\"dim\": true, \"degree\": 2}}]}",
         "$.nodes[1].params.dim", "expects an integer"},
        {"{\"nodes\": [" SRC_X ", {\"name\": \"p\", \"op\": \"linear\", \"in\": [\"x\", \"x\"], "
         "\"params\": {\"activation\": \"relux\"}}]}",
         "$.nodes[1].params.activation", "'relux' is not a value"},
        {"{\"nodes\": [{\"name\": \"x\", \"op\": \"input\"}]}", "$.nodes[0]",
         "missing parameter 'shape'"},
        {"{\"nodes\": [" SRC_X ", {\"name\": \"y\", \"op\": \"relu\", \"in\": [\"x:1\"]}]}",
         "$.nodes[1].in[0]", "no output 1"},
        {"{\"nodes\": [" SRC_X ", {\"name\": \"y\", \"op\": \"relu\", \"in\": [\"x:a\"]}]}",
         "$.nodes[1].in[0]", "bad reference"},
        {"{\"nodes\": [" SRC_X "], \"outputs\": [\"q\"]}", "$.outputs[0]", "unknown node 'q'"},
        {"{\"nodes\": [" SRC_X ", {\"name\": \"l\", \"op\": \"linear\", \"in\": [\"x\", \"x\"]}]}",
         "$.nodes[1]", "l (linear)"},
        {"{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"extra\": 1}]}", "$.nodes[0].extra",
         "unknown field"},
        {"{\"nodes\": [{\"name\": 3, \"op\": \"input\"}]}", "$.nodes[0].name", "expected a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        un_ctx *ctx = un_ctx_new(NULL);
        un_graph *g = (un_graph *)1;
        un_status st =
            un_graph_from_json(ctx, S, "bad.json", cases[i].text, strlen(cases[i].text), &g);
        EXPECT_ERR(ctx, st, cases[i].s1, cases[i].s2);
        EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "bad.json") != NULL);
        EXPECT_TRUE(g == NULL);
        if (st == UN_OK)
            un_graph_free(g);
        un_ctx_free(ctx);
    }
}

/* A graph embedded in a larger document. */
static void test_json_jcur(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    static const char text[] = "{\"rule\": {\"src\": {\"nodes\": [" SRC_X ", {\"name\": \"y\", "
                               "\"op\": \"relux\", \"in\": [\"x\"]}]}}}";
    un_jdoc *doc = NULL;
    EXPECT_OK(ctx, un_jdoc_parse(ctx, "rules.json", text, strlen(text), &doc));
    if (doc) {
        un_jcur root = un_jdoc_root(doc), r = un_jcur_member(&root, "rule");
        un_jcur src = un_jcur_member(&r, "src");
        un_graph *g = NULL;
        un_status st = un_graph_from_jcur(ctx, S, &src, &g);
        EXPECT_ERR(ctx, st, "rules.json: $.rule.src.nodes[1].op", "relux");
        un_graph_free(g);
    }
    un_jdoc_free(doc);
    un_ctx_free(ctx);
}

static void test_dot(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = build_mixed(ctx);
    un_buf b = {0};
    EXPECT_OK(ctx, un_graph_to_dot(ctx, g, &b));
    EXPECT_TRUE(strncmp(b.data, "digraph", 7) == 0);
    for (int32_t i = 0; i < un_graph_node_count(g); i++) {
        char id[32];
        snprintf(id, sizeof id, "  n%d [label=\"", (int)i);
        test__check(strstr(b.data, id) != NULL, TEST__AT, "node %d missing from DOT", (int)i);
        const char *op = un_op_name(un_graph_node(g, i)->op);
        EXPECT_TRUE(strstr(b.data, op) != NULL);
    }
    EXPECT_TRUE(strstr(b.data, "w \\\"quoted\\\"") != NULL);
    EXPECT_TRUE(strstr(b.data, "activation=relu") != NULL);
    EXPECT_TRUE(strstr(b.data, "hexagon") != NULL); /* parallel ops stand out */
    EXPECT_TRUE(strstr(b.data, "n0 -> n2 [label=\"float[8,10]\"]") != NULL);
    EXPECT_TRUE(strstr(b.data, "float[8/2,10]") != NULL);
    EXPECT_TRUE(strstr(b.data, "out1") != NULL);
    un_buf_deinit(&b);
    un_graph_free(g);
    un_ctx_free(ctx);
}

/* Random mutants of a graph file: each loads or fails with a message naming the file; none may
 * crash or leak. */
static void test_json_fuzz(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = NULL;
    un_buf b = {0};
    EXPECT_OK(ctx,
              un_sample_mlp(ctx, S, (un_sample_mlp_cfg){8, 16, 32, 4}, UN_SAMPLE_TENSOR, 2, &g));
    if (g)
        EXPECT_OK(ctx, un_graph_to_json(ctx, g, &b));
    un_graph_free(g);
    un_rng rng;
    un_rng_seed(&rng, 99);
    int rejected = 0, loaded = 0;
    for (int i = 0; b.data && i < 2000; i++) {
        char *m = un_xmalloc(b.len * 2 + 1);
        memcpy(m, b.data, b.len);
        size_t n = fuzz_mutate(&rng, m, b.len, b.len * 2);
        un_graph *h = NULL;
        un_status st = un_graph_from_json(ctx, S, "fuzz.json", m, n, &h);
        if (st == UN_OK) {
            loaded++;
            EXPECT_TRUE(h != NULL);
        } else {
            rejected++;
            EXPECT_TRUE(h == NULL && strncmp(un_ctx_errmsg(ctx), "fuzz.json", 9) == 0);
        }
        un_graph_free(h);
        un_ctx_clear(ctx);
        free(m);
    }
    printf("    2000 mutants: %d rejected with a message, %d still valid\n", rejected, loaded);
    un_buf_deinit(&b);
    un_ctx_free(ctx);
}

int main(void) {
    static const test_case cases[] = {
        {"mlp", test_mlp},
        {"ew_chain", test_ew_chain},
        {"parallel_chain", test_parallel_chain},
        {"split", test_split},
        {"add_errors", test_add_errors},
        {"layout_error", test_layout_error},
        {"hash_order_names", test_hash_order_names},
        {"hash_ties", test_hash_ties},
        {"hash_random", test_hash_random},
        {"hash_mutations", test_hash_mutations},
        {"clone", test_clone},
        {"json_roundtrip", test_json_roundtrip},
        {"json_any_order", test_json_any_order},
        {"json_errors", test_json_errors},
        {"json_jcur", test_json_jcur},
        {"dot", test_dot},
        {"json_fuzz", test_json_fuzz},
    };
    return TEST_RUN_WITH_SPEC(cases, &S);
}
