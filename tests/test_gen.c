/* tests/test_gen.c - the generator (gen/): menus and their errors, small menus whose rules are
 * known by hand, the classics (associativity, distributivity, merged linears, partition -> op ->
 * combine, data and tensor parallelism), each pruning stage, determinism across thread counts,
 * shards whose union is the full run, and an idempotent rerun into a database. */
#include "tests/test.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gen/gen.h"
#include "rulesdb/rulesdb.h"

static un_spec *spec;

static un_gen_menu *menu_at(un_ctx *ctx, const char *path) {
    un_gen_menu *m = NULL;
    EXPECT_OK(ctx, un_gen_menu_load(ctx, spec, path, &m));
    return m;
}

/* Runs the generator on a menu file; rs must be deinit by the caller. */
static bool find(const char *path, int max_ops, int threads, int si, int sn, un_gen_rules *rs) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_gen_menu *m = menu_at(ctx, path);
    un_gen_enum *e = NULL;
    bool ok = false;
    memset(rs, 0, sizeof *rs);
    if (m && un_gen_enum_new(ctx, m, 1234, &e) == UN_OK) {
        un_gen_params p = un_gen_params_default();
        p.max_ops = max_ops ? max_ops : m->max_ops;
        p.threads = threads;
        p.shard_i = si;
        p.shard_n = sn;
        un_status st = un_gen_find(ctx, e, &p, rs);
        EXPECT_OK(ctx, st);
        ok = st == UN_OK;
    }
    un_gen_enum_free(e);
    un_gen_menu_free(m);
    un_ctx_free(ctx);
    return ok;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t *hashes(const un_gen_rules *rs) {
    uint64_t *h = un_xmalloc(sizeof(uint64_t) * (size_t)(rs->n + 1));
    for (int64_t i = 0; i < rs->n; i++)
        h[i] = un_rule_hash(rs->rules[i]);
    qsort(h, (size_t)rs->n, sizeof *h, cmp_u64);
    return h;
}

/* A rule from two graph texts (outputs in order), oriented as the generator stores it. */
static uint64_t hand_rule(const char *src, const char *dst) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *a = NULL, *b = NULL;
    un_rule *r = NULL, *c = NULL;
    uint64_t h = 0;
    EXPECT_OK(ctx, un_graph_from_json(ctx, spec, "src", src, strlen(src), &a));
    EXPECT_OK(ctx, un_graph_from_json(ctx, spec, "dst", dst, strlen(dst), &b));
    if (a && b) {
        int n = un_graph_output_count(a);
        un_ref oa[4], ob[4];
        for (int i = 0; i < n && i < 4; i++) {
            oa[i] = un_graph_output(a, i);
            ob[i] = un_graph_output(b, i);
        }
        EXPECT_OK(ctx, un_rule_make(ctx, a, b, oa, ob, n, &r));
        if (r) {
            EXPECT_OK(ctx, un_gen_rule_add_degree_var(ctx, r));
            EXPECT_OK(ctx, un_gen_rule_orient(ctx, r, &c));
        }
        if (c)
            h = un_rule_hash(c);
    }
    un_rule_free(c);
    un_rule_free(r);
    un_graph_free(a);
    un_graph_free(b);
    un_ctx_free(ctx);
    return h;
}

static bool has_rule(const un_gen_rules *rs, uint64_t h) {
    for (int64_t i = 0; i < rs->n; i++)
        if (un_rule_hash(rs->rules[i]) == h)
            return true;
    return false;
}

/* ---- menus ---- */

static void test_menu_default(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_gen_menu *m = menu_at(ctx, "specs/menu.json");
    if (m) {
        EXPECT_EQ(m->max_ops, 3);
        EXPECT_EQ(m->n_inputs, 7);
        EXPECT_EQ(m->n_insts, 25); /* 2 linear, relu, ew_add, ew_mul, 3 concat, 9 split, 3+3+1+1 */
        EXPECT_EQ(m->inputs[5].shape.shard[2], 2);
        EXPECT_EQ(un_gen_menu_input_group(m, 2), 0); /* x3 is interchangeable with x1 */
        EXPECT_EQ(un_gen_menu_input_group(m, 4), 3);
        EXPECT_EQ(un_gen_menu_input_group(m, 5), 5);
    }
    un_gen_menu_free(m);
    un_ctx_free(ctx);
}

static void expect_menu_error(const char *text, const char *want) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_gen_menu *m = (un_gen_menu *)1;
    un_status st = un_gen_menu_parse(ctx, spec, "bad.json", text, strlen(text), &m);
    EXPECT_TRUE(st != UN_OK);
    EXPECT_TRUE(m == NULL);
    const char *msg = un_ctx_errmsg(ctx);
    bool ok = strstr(msg, want) != NULL && strstr(msg, "bad.json") != NULL && !strchr(msg, '\n');
    if (!ok)
        printf("  message: %s (wanted '%s')\n", msg, want);
    EXPECT_TRUE(ok);
    un_ctx_free(ctx);
}

static void test_menu_errors(void) {
    const char *in = "\"inputs\": [{\"name\": \"x\", \"shape\": [2, 2]}]";
    char buf[512];
    expect_menu_error("{\"version\": 1,", "bad.json");
    expect_menu_error("[]", "expected an object");
    snprintf(buf, sizeof buf, "{\"version\": 2, %s, \"ops\": [{\"op\": \"relu\"}]}", in);
    expect_menu_error(buf, "$.version: unsupported menu version 2");
    snprintf(buf, sizeof buf, "{\"version\": 1, %s, \"ops\": [{\"op\": \"frobnicate\"}]}", in);
    expect_menu_error(buf, "$.ops[0].op: unknown operator 'frobnicate'");
    snprintf(buf, sizeof buf, "{\"version\": 1, %s, \"ops\": [{\"op\": \"split\"}]}", in);
    expect_menu_error(buf, "parameter 'sizes' of split has no values to try");
    snprintf(buf, sizeof buf,
             "{\"version\": 1, %s, \"ops\": [{\"op\": \"partition\", \"params\": {\"dim\": "
             "[0, 9]}}]}",
             in);
    expect_menu_error(buf, "$.ops[0].params.dim[1]");
    snprintf(buf, sizeof buf,
             "{\"version\": 1, %s, \"ops\": [{\"op\": \"relu\", \"params\": {\"axis\": 0}}]}", in);
    expect_menu_error(buf, "relu has no parameter 'axis'");
    expect_menu_error("{\"version\": 1, \"inputs\": [{\"name\": \"x\", \"shape\": [2, 2]}, "
                      "{\"name\": \"x\", \"shape\": [2]}], \"ops\": [{\"op\": \"relu\"}]}",
                      "$.inputs[1].name: duplicate input name 'x'");
    expect_menu_error("{\"version\": 1, \"inputs\": [{\"name\": \"x\", \"shape\": [3, 2], "
                      "\"shard\": [2, 1]}], \"ops\": [{\"op\": \"relu\"}]}",
                      "$.inputs[0]: input 'x'");
    expect_menu_error("{\"version\": 1, \"inputs\": [{\"name\": \"x\", \"shape\": [0]}], "
                      "\"ops\": [{\"op\": \"relu\"}]}",
                      "$.inputs[0].shape[0]: expected an integer");
    snprintf(buf, sizeof buf, "{\"version\": 1, %s, \"ops\": [], \"extra\": 1}", in);
    expect_menu_error(buf, "extra");
    snprintf(buf, sizeof buf, "{\"version\": 1, %s, \"ops\": [{\"op\": \"input\"}]}", in);
    expect_menu_error(buf, "is a source");
    snprintf(buf, sizeof buf, "{\"version\": 1, \"max_ops\": 9, %s, \"ops\": [{\"op\": \"relu\"}]}",
             in);
    expect_menu_error(buf, "$.max_ops: max_ops lies in [1, 5]");
    snprintf(buf, sizeof buf,
             "{\"version\": 1, %s, \"ops\": [{\"op\": \"relu\", \"min_rank\": 9}]}", in);
    expect_menu_error(buf, "$.ops[0].min_rank: min_rank 9 is not in 0..6");
    snprintf(buf, sizeof buf,
             "{\"version\": 1, %s, \"ops\": [{\"op\": \"relu\", \"min_rank\": \"2\"}]}", in);
    expect_menu_error(buf, "$.ops[0].min_rank");
    /* a missing file names the path */
    un_ctx *ctx = un_ctx_new(NULL);
    un_gen_menu *m = NULL;
    EXPECT_TRUE(un_gen_menu_load(ctx, spec, "no/such/menu.json", &m) == UN_ERR_IO);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "no/such/menu.json") != NULL);
    un_ctx_free(ctx);
}

/* ---- known answers ---- */

/* An op entry's min_rank keeps it off lower-rank first inputs: layer_norm over [2, 4] activations
 * only, never over its own rank-1 gamma and beta. */
static void test_menu_min_rank(void) {
    const char *text[2] = {
        "{\"version\": 1, \"inputs\": [{\"name\": \"x\", \"shape\": [2, 4]}, {\"name\": \"g\", "
        "\"op\": \"weight\", \"shape\": [4]}, {\"name\": \"b\", \"op\": \"weight\", \"shape\": "
        "[4]}], \"ops\": [{\"op\": \"layer_norm\"}]}",
        "{\"version\": 1, \"inputs\": [{\"name\": \"x\", \"shape\": [2, 4]}, {\"name\": \"g\", "
        "\"op\": \"weight\", \"shape\": [4]}, {\"name\": \"b\", \"op\": \"weight\", \"shape\": "
        "[4]}], \"ops\": [{\"op\": \"layer_norm\", \"min_rank\": 2}]}"};
    int64_t graphs[2] = {0, 0};
    for (int v = 0; v < 2; v++) {
        un_ctx *ctx = un_ctx_new(NULL);
        un_gen_menu *m = NULL;
        un_gen_enum *e = NULL;
        EXPECT_OK(ctx, un_gen_menu_parse(ctx, spec, "mr.json", text[v], strlen(text[v]), &m));
        if (m && un_gen_enum_new(ctx, m, 1234, &e) == UN_OK) {
            EXPECT_EQ(m->insts[0].min_rank, 2 * v);
            un_gen_params p = un_gen_params_default();
            p.max_ops = 1;
            p.threads = 1;
            un_gen_rules rs;
            EXPECT_OK(ctx, un_gen_find(ctx, e, &p, &rs));
            graphs[v] = rs.stats.graphs;
            un_gen_rules_deinit(&rs);
        }
        un_gen_enum_free(e);
        un_gen_menu_free(m);
        un_ctx_free(ctx);
    }
    /* one operator: layer_norm(x, g|b, g|b) always; layer_norm(g|b, ., .) only without min_rank */
    EXPECT_TRUE(graphs[1] > 0);
    EXPECT_TRUE(graphs[0] > graphs[1]);
}

/* {ew_add} over three interchangeable inputs at N=2: commutativity and associativity only. */
static void test_ew_add_classes(void) {
    un_gen_rules rs;
    if (!find("specs/menus/ew_add.json", 2, 1, 0, 1, &rs))
        return;
    EXPECT_EQ(rs.n, 3);
    int comm = 0, assoc = 0;
    for (int64_t i = 0; i < rs.n; i++) {
        const un_rule *r = rs.rules[i];
        int a = un_rule_size(r, UN_RULE_SRC), b = un_rule_size(r, UN_RULE_DST);
        comm += a == 1 && b == 1 && un_rule_input_count(r) == 2;
        assoc += a == 2 && b == 2 && un_rule_input_count(r) == 3;
    }
    EXPECT_EQ(comm, 1);
    EXPECT_EQ(assoc, 2);
    const char *g2 = "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": "
                     "[2, 2]}}, {\"name\": \"y\", \"op\": \"input\", \"params\": {\"shape\": [2, "
                     "2]}}, {\"name\": \"s\", \"op\": \"ew_add\", \"in\": [\"%s\", \"%s\"]}]}";
    char a[512], b[512];
    snprintf(a, sizeof a, g2, "x", "y");
    snprintf(b, sizeof b, g2, "y", "x");
    EXPECT_TRUE(has_rule(&rs, hand_rule(a, b)));
    /* the stages each removed something, and the counts are consistent */
    const un_gen_stats *s = &rs.stats;
    EXPECT_EQ(s->graphs, 72); /* 9 single ops, 63 of two (3 + (3 inputs + 1)^2 ... deduped) */
    EXPECT_TRUE(s->graphs_naming > 0);  /* e.g. ew_add(x2, x3): a renaming of ew_add(x1, x2) */
    EXPECT_TRUE(s->graphs_same_nf > 0); /* e.g. ew_add(ew_add(x2, x1), x3) next to (x1 + x2) + x3 */
    EXPECT_TRUE(s->pairs >= s->after_naming);
    EXPECT_TRUE(s->after_naming >= s->after_super);
    EXPECT_TRUE(s->after_super > s->after_compose);
    EXPECT_TRUE(s->after_compose > s->after_rename);
    EXPECT_EQ(s->after_check, rs.n);
    un_gen_rules_deinit(&rs);
}

static const char *MM =
    "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [2, 4]}}, "
    "{\"name\": \"w1\", \"op\": \"weight\", \"params\": {\"shape\": [4, 4]}}, "
    "{\"name\": \"w2\", \"op\": \"weight\", \"params\": {\"shape\": [4, 4]}}, %s]}";

static uint64_t hand_mm(const char *src_nodes, const char *dst_nodes) {
    char a[1024], b[1024];
    snprintf(a, sizeof a, MM, src_nodes);
    snprintf(b, sizeof b, MM, dst_nodes);
    return hand_rule(a, b);
}

static void test_classics_matmul(void) {
    un_gen_rules rs;
    if (!find("specs/menus/matmul.json", 3, 2, 0, 1, &rs))
        return;
    /* associativity: (x w1) w2 = x (w1 w2) */
    EXPECT_TRUE(
        has_rule(&rs, hand_mm("{\"name\": \"a\", \"op\": \"linear\", \"in\": [\"x\", \"w1\"]}, "
                              "{\"name\": \"b\", \"op\": \"linear\", \"in\": [\"a\", \"w2\"]}",
                              "{\"name\": \"a\", \"op\": \"linear\", \"in\": [\"w1\", \"w2\"]}, "
                              "{\"name\": \"b\", \"op\": \"linear\", \"in\": [\"x\", \"a\"]}")));
    /* distributivity: x (w1 + w2) = x w1 + x w2 (found in one of its commuted forms) */
    bool dist = false;
    for (int v = 0; v < 4 && !dist; v++) {
        char src[256], dst[512];
        snprintf(src, sizeof src,
                 "{\"name\": \"a\", \"op\": \"ew_add\", \"in\": [%s]}, "
                 "{\"name\": \"b\", \"op\": \"linear\", \"in\": [\"x\", \"a\"]}",
                 v & 1 ? "\"w2\", \"w1\"" : "\"w1\", \"w2\"");
        snprintf(dst, sizeof dst,
                 "{\"name\": \"a\", \"op\": \"linear\", \"in\": [\"x\", \"w1\"]}, "
                 "{\"name\": \"c\", \"op\": \"linear\", \"in\": [\"x\", \"w2\"]}, "
                 "{\"name\": \"b\", \"op\": \"ew_add\", \"in\": [%s]}",
                 v & 2 ? "\"c\", \"a\"" : "\"a\", \"c\"");
        dist = has_rule(&rs, hand_mm(src, dst));
    }
    EXPECT_TRUE(dist);
    un_gen_rules_deinit(&rs);
}

static void test_classics_merge_linears(void) {
    un_gen_rules rs;
    if (!find("specs/menus/merge.json", 3, 2, 0, 1, &rs))
        return;
    /* two linears sharing x = one linear over concatenated weights, split (2 outputs) */
    EXPECT_TRUE(has_rule(
        &rs, hand_mm("{\"name\": \"a\", \"op\": \"linear\", \"in\": [\"x\", \"w1\"]}, "
                     "{\"name\": \"b\", \"op\": \"linear\", \"in\": [\"x\", \"w2\"]}",
                     "{\"name\": \"c\", \"op\": \"concat\", \"in\": [\"w1\", \"w2\"], \"params\": "
                     "{\"axis\": 1}}, "
                     "{\"name\": \"l\", \"op\": \"linear\", \"in\": [\"x\", \"c\"]}, "
                     "{\"name\": \"s\", \"op\": \"split\", \"in\": [\"l\"], \"params\": {\"axis\": "
                     "1, \"sizes\": [4, 4]}}")));
    un_gen_rules_deinit(&rs);
}

static const char *PX =
    "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [4, 4]}}, "
    "{\"name\": \"w\", \"op\": \"weight\", \"params\": {\"shape\": [4, 4]}}, %s]}";

static uint64_t hand_px(const char *src_nodes, const char *dst_nodes) {
    char a[1024], b[1024];
    snprintf(a, sizeof a, PX, src_nodes);
    snprintf(b, sizeof b, PX, dst_nodes);
    return hand_rule(a, b);
}

static void test_classics_parallel(void) {
    un_gen_rules rs;
    if (!find("specs/menus/parallel.json", 3, 2, 0, 1, &rs))
        return;
    /* partition -> relu -> combine */
    EXPECT_TRUE(
        has_rule(
            &rs,
            hand_px("{\"name\": \"r\", \"op\": \"relu\", \"in\": [\"x\"]}, {\"name\": \"l\", "
                    "\"op\": \"linear\", \"in\": [\"r\", \"w\"]}",
                    "{\"name\": \"p\", \"op\": \"partition\", \"in\": [\"x\"]}, {\"name\": \"r\", "
                    "\"op\": \"relu\", \"in\": [\"p\"]}, {\"name\": \"c\", \"op\": \"combine\", "
                    "\"in\": [\"r\"]}, {\"name\": \"l\", \"op\": \"linear\", \"in\": [\"c\", "
                    "\"w\"]}")) ||
        has_rule(&rs, hand_rule("{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": "
                                "{\"shape\": [4, 4]}}, {\"name\": \"r\", \"op\": \"relu\", \"in\": "
                                "[\"x\"]}]}",
                                "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": "
                                "{\"shape\": [4, 4]}}, {\"name\": \"p\", \"op\": \"partition\", "
                                "\"in\": [\"x\"]}, {\"name\": \"r\", \"op\": \"relu\", \"in\": "
                                "[\"p\"]}, {\"name\": \"c\", \"op\": \"combine\", \"in\": "
                                "[\"r\"]}]}")));
    /* data parallelism: partition the batch, replicate the weight */
    EXPECT_TRUE(has_rule(
        &rs, hand_px("{\"name\": \"l\", \"op\": \"linear\", \"in\": [\"x\", \"w\"]}, {\"name\": "
                     "\"p\", \"op\": \"partition\", \"in\": [\"l\"]}",
                     "{\"name\": \"p\", \"op\": \"partition\", \"in\": [\"x\"]}, {\"name\": \"r\", "
                     "\"op\": \"replicate\", \"in\": [\"w\"]}, {\"name\": \"l\", \"op\": "
                     "\"linear\", \"in\": [\"p\", \"r\"]}")));
    int with_k = 0;
    for (int64_t i = 0; i < rs.n; i++)
        with_k += rs.rules[i]->n_vars == 1 && strcmp(rs.rules[i]->vars[0].name, "k") == 0;
    EXPECT_TRUE(with_k > 0);
    EXPECT_EQ(with_k, rs.stats.with_var);
    un_gen_rules_deinit(&rs);
}

static void test_classics_tensor_parallel(void) {
    un_gen_rules rs;
    if (!find("specs/menus/tensor.json", 4, 2, 0, 1, &rs))
        return;
    const char *g = "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": "
                    "[2, 4]}}, {\"name\": \"w\", \"op\": \"weight\", \"params\": {\"shape\": [4, "
                    "4]}}, %s]}";
    char a[1024], b[1024];
    snprintf(a, sizeof a, g, "{\"name\": \"l\", \"op\": \"linear\", \"in\": [\"x\", \"w\"]}");
    snprintf(b, sizeof b, g,
             "{\"name\": \"p\", \"op\": \"partition\", \"in\": [\"x\"], \"params\": {\"dim\": 1}}, "
             "{\"name\": \"q\", \"op\": \"partition\", \"in\": [\"w\"], \"params\": {\"dim\": 0}}, "
             "{\"name\": \"l\", \"op\": \"linear\", \"in\": [\"p\", \"q\"]}, "
             "{\"name\": \"r\", \"op\": \"reduce\", \"in\": [\"l\"]}");
    EXPECT_TRUE(has_rule(&rs, hand_rule(a, b)));
    un_gen_rules_deinit(&rs);
}

/* Node lists over fixed inputs, as JSON graphs. */
static uint64_t hand_nodes(const char *inputs, const char *src_nodes, const char *dst_nodes) {
    char a[2048], b[2048];
    snprintf(a, sizeof a, "{\"nodes\": [%s, %s]}", inputs, src_nodes);
    snprintf(b, sizeof b, "{\"nodes\": [%s, %s]}", inputs, dst_nodes);
    return hand_rule(a, b);
}

static const char *CV =
    "{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [1, 2, 3, 3]}}, "
    "{\"name\": \"w1\", \"op\": \"weight\", \"params\": {\"shape\": [2, 2, 1, 1]}}, "
    "{\"name\": \"w2\", \"op\": \"weight\", \"params\": {\"shape\": [2, 2, 1, 1]}}";

static const char *CV1 =
    "{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [1, 2, 3, 3]}}, "
    "{\"name\": \"w1\", \"op\": \"weight\", \"params\": {\"shape\": [2, 2, 1, 1]}}";

static void test_classics_conv(void) {
    un_gen_rules rs;
    if (!find("specs/menus/conv.json", 3, 2, 0, 1, &rs))
        return;
    /* two convs over one input = one conv over concatenated kernels, split (2 outputs) */
    EXPECT_TRUE(has_rule(
        &rs,
        hand_nodes(CV,
                   "{\"name\": \"a\", \"op\": \"conv2d\", \"in\": [\"x\", \"w1\"]}, "
                   "{\"name\": \"b\", \"op\": \"conv2d\", \"in\": [\"x\", \"w2\"]}",
                   "{\"name\": \"c\", \"op\": \"concat\", \"in\": [\"w1\", \"w2\"], \"params\": "
                   "{\"axis\": 0}}, {\"name\": \"l\", \"op\": \"conv2d\", \"in\": [\"x\", \"c\"]}, "
                   "{\"name\": \"s\", \"op\": \"split\", \"in\": [\"l\"], \"params\": {\"axis\": "
                   "1, \"sizes\": [2, 2]}}")));
    /* conv + relu = conv with a fused relu */
    EXPECT_TRUE(has_rule(
        &rs,
        hand_nodes(CV1,
                   "{\"name\": \"a\", \"op\": \"conv2d\", \"in\": [\"x\", \"w1\"]}, "
                   "{\"name\": \"r\", \"op\": \"relu\", \"in\": [\"a\"]}",
                   "{\"name\": \"a\", \"op\": \"conv2d\", \"in\": [\"x\", \"w1\"], \"params\": "
                   "{\"activation\": \"relu\"}}")));
    /* conv distributes over ew_add of kernels (in one of its commuted forms) */
    bool dist = false;
    for (int v = 0; v < 4 && !dist; v++) {
        char src[256], dst[512];
        snprintf(src, sizeof src,
                 "{\"name\": \"a\", \"op\": \"ew_add\", \"in\": [%s]}, "
                 "{\"name\": \"b\", \"op\": \"conv2d\", \"in\": [\"x\", \"a\"]}",
                 v & 1 ? "\"w2\", \"w1\"" : "\"w1\", \"w2\"");
        snprintf(dst, sizeof dst,
                 "{\"name\": \"a\", \"op\": \"conv2d\", \"in\": [\"x\", \"w1\"]}, "
                 "{\"name\": \"c\", \"op\": \"conv2d\", \"in\": [\"x\", \"w2\"]}, "
                 "{\"name\": \"b\", \"op\": \"ew_add\", \"in\": [%s]}",
                 v & 2 ? "\"c\", \"a\"" : "\"a\", \"c\"");
        dist = has_rule(&rs, hand_nodes(CV, src, dst));
    }
    EXPECT_TRUE(dist);
    un_gen_rules_deinit(&rs);
}

static const char *QKV = "{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [2, 4]}}, "
                         "{\"name\": \"wq\", \"op\": \"weight\", \"params\": {\"shape\": [4, 2]}}, "
                         "{\"name\": \"wk\", \"op\": \"weight\", \"params\": {\"shape\": [4, 2]}}, "
                         "{\"name\": \"wv\", \"op\": \"weight\", \"params\": {\"shape\": [4, 2]}}";

static void test_classics_qkv(void) {
    un_gen_rules rs;
    if (!find("specs/menus/qkv.json", 4, 2, 0, 1, &rs))
        return;
    /* Q, K and V projections of one input = one linear over the concatenated weights, split in
     * three (3 outputs, 4 operators; either nesting of the two concats) */
    bool found = false;
    for (int v = 0; v < 2 && !found; v++) {
        char dst[1024];
        snprintf(dst, sizeof dst,
                 "{\"name\": \"c\", \"op\": \"concat\", \"in\": [%s], \"params\": {\"axis\": 1}}, "
                 "{\"name\": \"d\", \"op\": \"concat\", \"in\": [%s], \"params\": {\"axis\": 1}}, "
                 "{\"name\": \"l\", \"op\": \"linear\", \"in\": [\"x\", \"d\"]}, "
                 "{\"name\": \"s\", \"op\": \"split\", \"in\": [\"l\"], \"params\": {\"axis\": 1, "
                 "\"sizes\": [2, 2, 2]}}",
                 v ? "\"wk\", \"wv\"" : "\"wq\", \"wk\"", v ? "\"wq\", \"c\"" : "\"c\", \"wv\"");
        found = has_rule(
            &rs, hand_nodes(QKV,
                            "{\"name\": \"q\", \"op\": \"linear\", \"in\": [\"x\", \"wq\"]}, "
                            "{\"name\": \"k\", \"op\": \"linear\", \"in\": [\"x\", \"wk\"]}, "
                            "{\"name\": \"v\", \"op\": \"linear\", \"in\": [\"x\", \"wv\"]}",
                            dst));
    }
    EXPECT_TRUE(found);
    un_gen_rules_deinit(&rs);
}

static const char *HD = "{\"name\": \"q\", \"op\": \"input\", \"params\": {\"shape\": [4, 2, 2]}}, "
                        "{\"name\": \"k\", \"op\": \"input\", \"params\": {\"shape\": [4, 2, 2]}}";

static const char *HD1 = "{\"name\": \"q\", \"op\": \"input\", \"params\": {\"shape\": [4, 2, 2]}}";

static void test_classics_heads(void) {
    un_gen_rules rs;
    if (!find("specs/menus/heads.json", 3, 2, 0, 1, &rs))
        return;
    /* head parallelism: batch_matmul per partition of the head dim (the degree is the variable k;
     * partition -> combine around it follows from partition(combine(x)) = x) */
    EXPECT_TRUE(has_rule(
        &rs, hand_nodes(HD,
                        "{\"name\": \"s\", \"op\": \"batch_matmul\", \"in\": [\"q\", \"k\"]}, "
                        "{\"name\": \"c\", \"op\": \"partition\", \"in\": [\"s\"]}",
                        "{\"name\": \"p\", \"op\": \"partition\", \"in\": [\"q\"]}, "
                        "{\"name\": \"r\", \"op\": \"partition\", \"in\": [\"k\"]}, "
                        "{\"name\": \"s\", \"op\": \"batch_matmul\", \"in\": [\"p\", \"r\"]}")));
    /* and softmax over the last dim, partitioned on the head dim and combined */
    EXPECT_TRUE(
        has_rule(&rs, hand_nodes(HD1, "{\"name\": \"s\", \"op\": \"softmax\", \"in\": [\"q\"]}",
                                 "{\"name\": \"p\", \"op\": \"partition\", \"in\": [\"q\"]}, "
                                 "{\"name\": \"s\", \"op\": \"softmax\", \"in\": [\"p\"]}, "
                                 "{\"name\": \"c\", \"op\": \"combine\", \"in\": [\"s\"]}")));
    un_gen_rules_deinit(&rs);
}

/* ---- behaviour ---- */

static void test_deterministic_and_threads(void) {
    un_gen_rules a, b;
    if (!find("specs/menus/parallel.json", 3, 1, 0, 1, &a))
        return;
    if (find("specs/menus/parallel.json", 3, 2, 0, 1, &b)) {
        EXPECT_EQ(a.n, b.n);
        EXPECT_TRUE(a.n > 0);
        /* same rules in the same order, as canonical JSON */
        bool same = a.n == b.n;
        for (int64_t i = 0; same && i < a.n; i++) {
            un_buf x = {0}, y = {0};
            un_rule_to_json(NULL, a.rules[i], &x);
            un_rule_to_json(NULL, b.rules[i], &y);
            same = x.data && y.data && strcmp(x.data, y.data) == 0;
            un_buf_deinit(&x);
            un_buf_deinit(&y);
        }
        EXPECT_TRUE(same);
        un_gen_rules_deinit(&b);
    }
    un_gen_rules_deinit(&a);
}

static void test_shards_union(void) {
    un_gen_rules full, s0, s1;
    if (!find("specs/menus/parallel.json", 2, 1, 0, 1, &full))
        return;
    find("specs/menus/parallel.json", 2, 1, 0, 2, &s0);
    find("specs/menus/parallel.json", 2, 1, 1, 2, &s1);
    EXPECT_TRUE(s0.n > 0 && s1.n > 0);
    /* the union of the shards' rules, deduplicated, is the full run's set */
    un_gen_rules u = {0};
    u.n = s0.n + s1.n;
    u.rules = un_xmalloc(sizeof(un_rule *) * (size_t)(u.n + 1));
    if (s0.n)
        memcpy(u.rules, s0.rules, sizeof(un_rule *) * (size_t)s0.n);
    if (s1.n)
        memcpy(u.rules + s0.n, s1.rules, sizeof(un_rule *) * (size_t)s1.n);
    uint64_t *hu = hashes(&u), *hf = hashes(&full);
    int64_t k = 0;
    for (int64_t i = 0; i < u.n; i++)
        if (k == 0 || hu[i] != hu[k - 1])
            hu[k++] = hu[i];
    /* every full-run rule is in the union; the union holds at most the renamings the shards
     * could not see of each other */
    int64_t missing = 0;
    for (int64_t i = 0; i < full.n; i++)
        missing += !bsearch(&hf[i], hu, (size_t)k, sizeof *hu, cmp_u64);
    EXPECT_EQ(missing, 0);
    EXPECT_TRUE(k >= full.n);
    free(hu);
    free(hf);
    free(u.rules);
    un_gen_rules_deinit(&s0);
    un_gen_rules_deinit(&s1);
    un_gen_rules_deinit(&full);
}

static void test_db_rerun_idempotent(void) {
    char path[] = "/tmp/unity-test-gen-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0)
        close(fd);
    unlink(path);
    un_ctx *ctx = un_ctx_new(NULL);
    un_gen_menu *m = menu_at(ctx, "specs/menus/ew_add.json");
    un_gen_enum *e = NULL;
    if (m && un_gen_enum_new(ctx, m, 1234, &e) == UN_OK) {
        un_gen_params p = un_gen_params_default();
        p.max_ops = 2;
        un_gen_summary s1, s2;
        EXPECT_OK(ctx, un_gen_run(ctx, e, &p, path, "--test", &s1, NULL));
        EXPECT_EQ(s1.inserted, 3);
        EXPECT_EQ(s1.present, 0);
        EXPECT_OK(ctx, un_gen_run(ctx, e, &p, path, "--test", &s2, NULL));
        EXPECT_EQ(s2.inserted, 0);
        EXPECT_EQ(s2.present, 3);
        EXPECT_TRUE(s2.run_id > s1.run_id);
        un_rulesdb *db = NULL;
        EXPECT_OK(ctx, un_rulesdb_open(ctx, path, spec, UN_RULESDB_READONLY, &db));
        if (db) {
            int64_t counts[UN_RULE_STATUS_COUNT] = {0};
            EXPECT_OK(ctx, un_rulesdb_count(ctx, db, counts));
            EXPECT_EQ(counts[UN_RULE_CANDIDATE], 3);
            un_rulesdb_row *row = NULL;
            EXPECT_OK(ctx, un_rulesdb_rule_get(ctx, db, 1, &row));
            if (row)
                EXPECT_STR_EQ(row->origin_kind, "generated");
            un_rulesdb_row_free(row);
        }
        un_rulesdb_free(db);
        /* a database that is not one: an error naming it, nothing generated */
        un_gen_summary s3;
        un_ctx_clear(ctx);
        EXPECT_TRUE(un_gen_run(ctx, e, &p, "/nonexistent/dir/rules.db", "", &s3, NULL) != UN_OK);
        EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "/nonexistent/dir/rules.db") != NULL);
    }
    un_gen_enum_free(e);
    un_gen_menu_free(m);
    un_ctx_free(ctx);
    unlink(path);
    char side[300];
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
}

static void test_bad_params(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_gen_menu *m = menu_at(ctx, "specs/menus/ew_add.json");
    un_gen_enum *e = NULL;
    if (m && un_gen_enum_new(ctx, m, 1, &e) == UN_OK) {
        un_gen_params p = un_gen_params_default();
        un_gen_rules rs;
        p.max_ops = 9;
        EXPECT_TRUE(un_gen_find(ctx, e, &p, &rs) == UN_ERR_INVALID);
        EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "--max-ops") != NULL);
        un_ctx_clear(ctx);
        p = un_gen_params_default();
        p.shard_i = 2;
        p.shard_n = 2;
        EXPECT_TRUE(un_gen_find(ctx, e, &p, &rs) == UN_ERR_INVALID);
        EXPECT_TRUE(rs.n == 0 && rs.rules == NULL);
    }
    un_gen_enum_free(e);
    un_gen_menu_free(m);
    un_ctx_free(ctx);
}

int main(void) {
    static const test_case cases[] = {
        {"menu_default", test_menu_default},
        {"menu_errors", test_menu_errors},
        {"menu_min_rank", test_menu_min_rank},
        {"ew_add_classes", test_ew_add_classes},
        {"classics_matmul", test_classics_matmul},
        {"classics_merge_linears", test_classics_merge_linears},
        {"classics_parallel", test_classics_parallel},
        {"classics_tensor_parallel", test_classics_tensor_parallel},
        {"classics_conv", test_classics_conv},
        {"classics_qkv", test_classics_qkv},
        {"classics_heads", test_classics_heads},
        {"deterministic_and_threads", test_deterministic_and_threads},
        {"shards_union", test_shards_union},
        {"db_rerun_idempotent", test_db_rerun_idempotent},
        {"bad_params", test_bad_params},
    };
    return TEST_RUN_WITH_SPEC(cases, &spec);
}
