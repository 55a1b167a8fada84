/* test_sp.c - graph analyses (search/sp.h): consumer lists, dominators and post-dominators against
 * brute force (a node dominates another when removing it cuts every path from the root), cut
 * nodes, and the series-parallel decomposition's invariants (every node once; series children
 * only feed later ones; parallel children share no edge) on hand-built graphs, including one
 * that is not series-parallel, and on every zoo model, tiny and paper-sized. */
#include <stdlib.h>

#include "runtime/zoo.h"
#include "search/sp.h"
#include "tests/test.h"

static un_spec *S;

static int32_t in2(un_ctx *ctx, un_graph *g, const char *name) {
    int32_t id = -1;
    EXPECT_OK(ctx, un_graph_add_input(ctx, g, name, UN_OP_INPUT, 2, (int64_t[]){8, 16}, &id));
    return id;
}

static int32_t op1(un_ctx *ctx, un_graph *g, un_op op, int32_t a, const char *name) {
    int32_t id = -1;
    EXPECT_OK(ctx, un_graph_add(ctx, g, op, NULL, (un_ref[]){{a, 0}}, 1, name, &id));
    return id;
}

static int32_t op2(un_ctx *ctx, un_graph *g, un_op op, int32_t a, int32_t b, const char *name) {
    int32_t id = -1;
    EXPECT_OK(ctx, un_graph_add(ctx, g, op, NULL, (un_ref[]){{a, 0}, {b, 0}}, 2, name, &id));
    return id;
}

/* Is v reachable from a root (node without inputs taking part) without passing `cut`? */
static bool reach_without(const un_sp_info *a, int32_t cut, int32_t v, bool forward) {
    int32_t n = a->n;
    bool *seen = calloc((size_t)n + 1, 1);
    int32_t *stack = malloc(((size_t)n + 1) * sizeof *stack);
    int32_t sp = 0;
    for (int32_t u = 0; u < n; u++) {
        if (!a->in[u] || u == cut)
            continue;
        bool start = true;
        if (forward) {
            const un_node *nd = un_graph_node(a->g, u);
            for (int t = 0; t < nd->n_in; t++)
                if (a->in[nd->in[t].node])
                    start = false;
        } else {
            start = a->cons_at[u] == a->cons_at[u + 1];
        }
        if (start) {
            seen[u] = true;
            stack[sp++] = u;
        }
    }
    while (sp > 0) {
        int32_t u = stack[--sp];
        if (forward) {
            for (int32_t k = a->cons_at[u]; k < a->cons_at[u + 1]; k++) {
                int32_t c = a->cons[k];
                if (c != cut && !seen[c]) {
                    seen[c] = true;
                    stack[sp++] = c;
                }
            }
        } else {
            const un_node *nd = un_graph_node(a->g, u);
            for (int t = 0; t < nd->n_in; t++) {
                int32_t p = nd->in[t].node;
                if (a->in[p] && p != cut && !seen[p]) {
                    seen[p] = true;
                    stack[sp++] = p;
                }
            }
        }
    }
    bool r = seen[v];
    free(seen);
    free(stack);
    return r;
}

static bool edge(const un_sp_info *a, int32_t u, int32_t v) {
    for (int32_t k = a->cons_at[u]; k < a->cons_at[u + 1]; k++)
        if (a->cons[k] == v)
            return true;
    return false;
}

/* Checks the tree below id; returns false at the first broken invariant. */
static bool check_node(const un_sp_info *a, const un_sp_tree *t, int32_t id) {
    const un_sp_node *x = &t->nodes[id];
    if (x->kind == UN_SP_LEAF)
        return x->end == x->begin + 1 && t->order[x->begin] == x->node && x->n_child == 0;
    if (x->n_child < 2)
        return false;
    int32_t at = x->begin;
    for (int32_t i = 0; i < x->n_child; i++) {
        const un_sp_node *c = &t->nodes[t->child[x->child_at + i]];
        if (c->begin != at || !check_node(a, t, t->child[x->child_at + i]))
            return false;
        at = c->end;
    }
    if (at != x->end)
        return false;
    for (int32_t i = 0; i < x->n_child; i++)
        for (int32_t j = 0; j < x->n_child; j++) {
            if (i == j)
                continue;
            const un_sp_node *ci = &t->nodes[t->child[x->child_at + i]];
            const un_sp_node *cj = &t->nodes[t->child[x->child_at + j]];
            for (int32_t p = ci->begin; p < ci->end; p++)
                for (int32_t q = cj->begin; q < cj->end; q++) {
                    bool e = edge(a, t->order[p], t->order[q]);
                    if (e && (x->kind == UN_SP_PARALLEL || i > j))
                        return false;
                }
        }
    return true;
}

/* Every invariant of a, and of its decomposition; returns the number of forced series. */
static int32_t check_all(un_ctx *ctx, const un_graph *g, const bool *mask, const char *what) {
    un_sp_info a;
    EXPECT_OK(ctx, un_sp_analyse(ctx, g, mask, &a));
    int32_t n = a.n;
    bool ok = true;
    /* consumers: exactly the inputs, seen from the other side */
    for (int32_t v = 0; v < n && ok; v++) {
        if (!a.in[v])
            continue;
        const un_node *nd = un_graph_node(g, v);
        for (int t = 0; t < nd->n_in; t++)
            if (a.in[nd->in[t].node] && !edge(&a, nd->in[t].node, v))
                ok = false;
    }
    for (int32_t v = 0; v < n && ok; v++)
        for (int32_t k = a.cons_at[v]; k < a.cons_at[v + 1] && ok; k++) {
            const un_node *nd = un_graph_node(g, a.cons[k]);
            bool found = false;
            for (int t = 0; t < nd->n_in; t++)
                found |= nd->in[t].node == v;
            ok = found && (k == a.cons_at[v] || a.cons[k - 1] < a.cons[k]);
        }
    test__check(ok, TEST__AT, "%s: consumer lists", what);
    /* dominators against removal (on graphs small enough for n^2 searches) */
    if (a.n_in <= 400) {
        ok = true;
        for (int32_t d = 0; d < n && ok; d++)
            for (int32_t v = 0; v < n && ok; v++) {
                if (!a.in[d] || !a.in[v] || d == v)
                    continue;
                bool dom = !reach_without(&a, d, v, true);
                bool pdom = !reach_without(&a, d, v, false);
                if (dom != un_sp_dominates(&a, d, v) || pdom != un_sp_postdominates(&a, d, v)) {
                    printf("  %s: node %d vs %d: dominates %d/%d, post-dominates %d/%d\n", what, d,
                           v, dom, un_sp_dominates(&a, d, v), pdom, un_sp_postdominates(&a, d, v));
                    ok = false;
                }
            }
        test__check(ok, TEST__AT, "%s: dominators equal brute force", what);
    }
    /* immediate dominators dominate, and are dominated by every other dominator */
    ok = true;
    for (int32_t v = 0; v < n && ok; v++)
        if (a.in[v] && a.idom[v] >= 0)
            ok = un_sp_dominates(&a, a.idom[v], v) && a.idom[v] < v;
    test__check(ok, TEST__AT, "%s: immediate dominators", what);
    /* cut nodes: both dominators of all later and post-dominators of all earlier nodes */
    int32_t *cuts = calloc((size_t)n + 1, sizeof *cuts);
    int32_t k = un_sp_cut_nodes(&a, cuts);
    ok = true;
    for (int32_t i = 0; i < k && ok; i++)
        for (int32_t v = 0; v < n && ok; v++)
            if (a.in[v] && v != cuts[i])
                ok = v < cuts[i] ? un_sp_postdominates(&a, cuts[i], v)
                                 : un_sp_dominates(&a, cuts[i], v);
    test__check(ok, TEST__AT, "%s: cut nodes", what);
    free(cuts);
    un_sp_tree t;
    EXPECT_OK(ctx, un_sp_decompose(ctx, &a, &t));
    EXPECT_EQ(t.n_order, a.n_in);
    bool *seen = calloc((size_t)n + 1, 1);
    ok = true;
    for (int32_t i = 0; i < t.n_order && ok; i++) {
        int32_t v = t.order[i];
        ok = v >= 0 && v < n && a.in[v] && !seen[v];
        seen[v] = true;
    }
    free(seen);
    test__check(ok, TEST__AT, "%s: every node once in the tree", what);
    test__check(check_node(&a, &t, t.root), TEST__AT, "%s: tree invariants", what);
    int32_t forced = t.n_forced;
    un_sp_tree_deinit(&t);
    un_sp_info_deinit(&a);
    return forced;
}

static char *tree_text(un_ctx *ctx, const un_graph *g) {
    un_sp_info a;
    un_sp_tree t;
    EXPECT_OK(ctx, un_sp_analyse(ctx, g, NULL, &a));
    EXPECT_OK(ctx, un_sp_decompose(ctx, &a, &t));
    un_buf b = {0};
    un_sp_tree_str(&t, g, &b);
    un_sp_tree_deinit(&t);
    un_sp_info_deinit(&a);
    return b.data;
}

static void test_chain(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = un_graph_new(S);
    int32_t x = in2(ctx, g, "x");
    int32_t a = op1(ctx, g, UN_OP_RELU, x, "a");
    int32_t b = op1(ctx, g, UN_OP_GELU, a, "b");
    int32_t c = op1(ctx, g, UN_OP_TANH, b, "c");
    un_sp_info i;
    EXPECT_OK(ctx, un_sp_analyse(ctx, g, NULL, &i));
    EXPECT_EQ(i.idom[x], UN_SP_ROOT);
    EXPECT_EQ(i.idom[c], b);
    EXPECT_EQ(i.ipdom[a], b);
    EXPECT_EQ(i.ipdom[c], UN_SP_SINK);
    EXPECT_EQ(i.cons_at[x + 1] - i.cons_at[x], 1);
    int32_t cuts[4];
    EXPECT_EQ(un_sp_cut_nodes(&i, cuts), 4);
    un_sp_info_deinit(&i);
    char *s = tree_text(ctx, g);
    EXPECT_STR_EQ(s, "series\n  x\n  a\n  b\n  c\n");
    free(s);
    EXPECT_EQ(check_all(ctx, g, NULL, "chain"), 0);
    un_graph_free(g);
    un_ctx_free(ctx);
}

static void test_diamond(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = un_graph_new(S);
    int32_t x = in2(ctx, g, "x");
    int32_t a = op1(ctx, g, UN_OP_RELU, x, "a");
    int32_t b = op1(ctx, g, UN_OP_GELU, x, "b");
    int32_t b2 = op1(ctx, g, UN_OP_TANH, b, "b2");
    int32_t c = op2(ctx, g, UN_OP_EW_ADD, a, b2, "c");
    un_sp_info i;
    EXPECT_OK(ctx, un_sp_analyse(ctx, g, NULL, &i));
    EXPECT_EQ(i.idom[c], x);
    EXPECT_EQ(i.idom[b2], b);
    EXPECT_EQ(i.ipdom[x], c);
    EXPECT_EQ(i.ipdom[a], c);
    EXPECT_EQ(i.ipdom[b], b2);
    EXPECT_EQ(i.cons_at[x + 1] - i.cons_at[x], 2);
    int32_t cuts[5];
    EXPECT_EQ(un_sp_cut_nodes(&i, cuts), 2);
    EXPECT_EQ(cuts[0], x);
    EXPECT_EQ(cuts[1], c);
    un_sp_info_deinit(&i);
    char *s = tree_text(ctx, g);
    EXPECT_STR_EQ(s, "series\n  x\n  parallel\n    a\n    series\n      b\n      b2\n  c\n");
    free(s);
    EXPECT_EQ(check_all(ctx, g, NULL, "diamond"), 0);
    /* the same node used twice by one consumer is one consumer */
    int32_t d = op2(ctx, g, UN_OP_EW_MUL, c, c, "d");
    EXPECT_OK(ctx, un_sp_analyse(ctx, g, NULL, &i));
    EXPECT_EQ(i.cons_at[c + 1] - i.cons_at[c], 1);
    EXPECT_EQ(i.ipdom[c], d);
    un_sp_info_deinit(&i);
    un_graph_free(g);
    un_ctx_free(ctx);
}

/* x -> c, x -> d, y -> d: the "N" graph, the smallest that is not series-parallel. */
static void test_not_sp(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = un_graph_new(S);
    int32_t x = in2(ctx, g, "x");
    int32_t y = in2(ctx, g, "y");
    int32_t c = op1(ctx, g, UN_OP_RELU, x, "c");
    int32_t d = op2(ctx, g, UN_OP_EW_ADD, x, y, "d");
    un_sp_info i;
    EXPECT_OK(ctx, un_sp_analyse(ctx, g, NULL, &i));
    EXPECT_EQ(i.idom[d], UN_SP_ROOT);
    EXPECT_EQ(i.idom[c], x);
    EXPECT_EQ(i.ipdom[x], UN_SP_SINK);
    EXPECT_EQ(i.ipdom[y], d);
    int32_t cuts[4];
    EXPECT_EQ(un_sp_cut_nodes(&i, cuts), 0);
    un_sp_info_deinit(&i);
    EXPECT_TRUE(check_all(ctx, g, NULL, "N graph") >= 1);
    char *s = tree_text(ctx, g);
    EXPECT_TRUE(s && strstr(s, "series (forced)"));
    free(s);
    /* a mask: without y the rest is a series-parallel graph */
    bool mask[4] = {true, false, true, true};
    EXPECT_EQ(check_all(ctx, g, mask, "N graph without y"), 0);
    (void)c;
    un_graph_free(g);
    un_ctx_free(ctx);
}

/* Every zoo model, tiny and paper-sized, whole and without its weights (as the search sees it). */
static void test_zoo(void) {
    int nm;
    const char *const *names = un_zoo_names(&nm);
    for (int i = 0; i < nm; i++)
        for (int tiny = 1; tiny >= 0; tiny--) {
            un_ctx *ctx = un_ctx_new(NULL);
            un_model m;
            EXPECT_OK(ctx, un_zoo_build(ctx, S, names[i], tiny, 0, &m));
            if (!m.graph) {
                un_ctx_free(ctx);
                continue;
            }
            char what[96];
            snprintf(what, sizeof what, "%s%s", names[i], tiny ? " tiny" : "");
            check_all(ctx, m.graph, NULL, what);
            int32_t n = un_graph_node_count(m.graph);
            bool *mask = calloc((size_t)n, 1);
            for (int32_t v = 0; v < n; v++)
                mask[v] = un_graph_node(m.graph, v)->op != UN_OP_WEIGHT;
            snprintf(what, sizeof what, "%s%s without weights", names[i], tiny ? " tiny" : "");
            int32_t forced = check_all(ctx, m.graph, mask, what);
            /* these models are series-parallel once weights are attributes of their ops */
            if (strcmp(names[i], "mlp") == 0 || strcmp(names[i], "transformer") == 0 ||
                strcmp(names[i], "resnext50") == 0)
                test__check(forced == 0, TEST__AT, "%s: %d forced series", what, (int)forced);
            free(mask);
            un_model_deinit(&m);
            un_ctx_free(ctx);
        }
}

int main(void) {
    static const test_case cases[] = {
        {"chain", test_chain},
        {"diamond", test_diamond},
        {"not_sp", test_not_sp},
        {"zoo", test_zoo},
    };
    return TEST_RUN_WITH_SPEC(cases, &S);
}
