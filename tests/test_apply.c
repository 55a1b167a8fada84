/* tests/test_apply.c - application of matches (search/apply.h) as a property test: on random
 * PCGs and the zoo's tiny models, chains of 1-20 random verified rewrites (N=2 rules, forwards and
 * backwards) keep every model output's value (exact in the prime field, 1e-9 in f64) and layout,
 * checked by the reference evaluator; a wrong rule forced to "verified" is caught; the copy with
 * remap keeps a graph; bad matches are refused. */
#include "runtime/zoo.h"
#include "tests/rewrite.h"

static un_spec *spec;

static void test_random_chains(void) {
    un_ruleset *set = rw_ruleset(spec, true);
    if (!set)
        return;
    un_ctx *ctx = un_ctx_new(NULL);
    un_rng rng;
    un_rng_seed(&rng, 99);
    int64_t applied = 0, wrong = 0;
    for (int gi = 0; gi < 60; gi++) {
        un_graph *g = rw_random_graph(spec, &rng, 6 + gi % 6);
        applied += rw_chains(ctx, set, g, &rng, 4, &wrong, NULL, NULL);
        un_graph_free(g);
    }
    static const char *models[] = {"mlp", "transformer", "dlrm", "xdl", "candle_uno", "charlm"};
    int64_t zoo = 0;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        un_model m;
        if (un_zoo_build(ctx, spec, models[i], true, 2, &m) != UN_OK) {
            EXPECT_OK(ctx, un_ctx_status(ctx));
            continue;
        }
        zoo += rw_chains(ctx, set, m.graph, &rng, 3, &wrong, NULL, NULL);
        un_model_deinit(&m);
    }
    applied += zoo;
    printf("    %lld rewrites in chains of 1-20 (%lld on tiny zoo models), %lld wrong\n",
           (long long)applied, (long long)zoo, (long long)wrong);
    EXPECT_EQ(wrong, 0);
    EXPECT_TRUE(applied > 1000);
    EXPECT_TRUE(zoo > 0);
    un_ctx_free(ctx);
    un_ruleset_free(set);
}

/* A wrong rule, ew_add(x0, x1) => ew_mul(x0, x1), stored and forced to "verified": loaded like
 * any other and applied, the reference evaluator catches it. */
static void test_planted_wrong_rule(void) {
    if (!rw_db_make())
        return;
    un_ctx *ctx = un_ctx_new(NULL);
    char path[160];
    snprintf(path, sizeof path, "%s/planted.db", rw_dir);
    un_graph *s = un_graph_new(spec), *d = un_graph_new(spec);
    int32_t a, b;
    for (int k = 0; k < 2; k++) {
        un_graph *h = k ? d : s;
        un_graph_add_input(ctx, h, "x0", UN_OP_INPUT, 3, (int64_t[]){2, 4, 4}, NULL);
        un_graph_add_input(ctx, h, "x1", UN_OP_INPUT, 3, (int64_t[]){2, 4, 4}, NULL);
    }
    un_graph_add(ctx, s, UN_OP_EW_ADD, NULL, (un_ref[]){{0, 0}, {1, 0}}, 2, NULL, &a);
    un_graph_add(ctx, d, UN_OP_EW_MUL, NULL, (un_ref[]){{0, 0}, {1, 0}}, 2, NULL, &b);
    un_rule *r = NULL;
    un_rulesdb *db = NULL;
    un_ruleset *set = NULL;
    int32_t id = 0;
    EXPECT_OK(ctx, un_rule_make(ctx, s, d, (un_ref[]){{a, 0}}, (un_ref[]){{b, 0}}, 1, &r));
    EXPECT_OK(ctx, un_rulesdb_open(ctx, path, spec, UN_RULESDB_CREATE, &db));
    if (r && db) {
        r->any_shape = true;
        EXPECT_OK(ctx,
                  un_rulesdb_rule_insert(ctx, db, r, UN_RULE_CANDIDATE, NULL,
                                         &(un_rulesdb_origin){.kind = "generated"}, &id, NULL));
        un_rulesdb_verdict v = {.status = UN_RULE_VERIFIED, .proof_ms = 1};
        EXPECT_OK(ctx, un_rulesdb_rule_set_verdict(ctx, db, id, &v));
        EXPECT_OK(ctx, un_ruleset_load(ctx, db, NULL, &set, NULL));
    }
    int64_t wrong = 0, applied = 0;
    int32_t culprit = -1;
    if (set) {
        EXPECT_EQ(un_ruleset_count(set), 1);
        un_rng rng;
        un_rng_seed(&rng, 5);
        for (int gi = 0; gi < 10; gi++) {
            un_graph *g = rw_random_graph(spec, &rng, 8);
            applied += rw_chains(ctx, set, g, &rng, 2, &wrong, &culprit, NULL);
            un_graph_free(g);
        }
    }
    EXPECT_TRUE(applied > 0);
    EXPECT_EQ(wrong, applied); /* every application of it changes the value */
    EXPECT_EQ(culprit, id);
    un_ruleset_free(set);
    un_rulesdb_free(db);
    un_rule_free(r);
    un_graph_free(s);
    un_graph_free(d);
    un_ctx_free(ctx);
}

/* un_graph_copy_remap with the default step gives the same graph. */
static void test_copy_remap(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_model m;
    EXPECT_OK(ctx, un_zoo_build(ctx, spec, "transformer", true, 2, &m));
    un_graph *c = NULL;
    un_ref *map = NULL;
    EXPECT_OK(ctx, un_graph_copy_remap(ctx, m.graph, NULL, 0, NULL, NULL, &c, &map));
    if (c) {
        EXPECT_EQ(un_graph_hash(c), un_graph_hash(m.graph));
        EXPECT_EQ(un_graph_node_count(c), un_graph_node_count(m.graph));
        EXPECT_EQ(map[5 * UN_MAX_OUTPUTS].node, 5);
    }
    free(map);
    un_graph_free(c);
    /* dropping the output's node is refused */
    int32_t order[1] = {0};
    EXPECT_TRUE(un_graph_copy_remap(NULL, m.graph, order, 1, NULL, NULL, &c, NULL) ==
                UN_ERR_INVALID);
    EXPECT_TRUE(c == NULL);
    un_model_deinit(&m);
    un_ctx_free(ctx);
}

/* A match that does not fit the graph or the rule is refused with a message. */
static void test_bad_match(void) {
    un_ruleset *set = rw_ruleset(spec, false);
    if (!set)
        return;
    un_ctx *ctx = un_ctx_new(NULL);
    un_rng rng;
    un_rng_seed(&rng, 3);
    un_graph *g = NULL;
    un_match_list ms = {0};
    for (int tries = 0; tries < 50 && ms.n == 0; tries++) {
        un_graph_free(g);
        g = rw_random_graph(spec, &rng, 8);
        un_matcher *m = NULL;
        EXPECT_OK(ctx, un_matcher_new(ctx, set, g, &m));
        EXPECT_OK(ctx, un_match_all(ctx, m, &ms));
        un_matcher_free(m);
    }
    EXPECT_TRUE(ms.n > 0);
    if (ms.n > 0) {
        un_graph *out = NULL;
        un_match bad = ms.v[0];
        bad.rule = (int32_t)un_ruleset_count(set);
        EXPECT_EQ(un_apply(NULL, set, g, &bad, &out, NULL), UN_ERR_INVALID);
        bad = ms.v[0];
        bad.input[0].node = 1 << 20;
        EXPECT_EQ(un_apply(NULL, set, g, &bad, &out, NULL), UN_ERR_INVALID);
        bad = ms.v[0];
        for (int v = 0; v < bad.n_nodes; v++)
            if (bad.node[v] >= 0)
                bad.node[v] = un_graph_node_count(g) + 3;
        EXPECT_EQ(un_apply(ctx, set, g, &bad, &out, NULL), UN_ERR_INVALID);
        EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "not in the graph") != NULL);
        EXPECT_TRUE(out == NULL);
    }
    un_match_list_deinit(&ms);
    un_graph_free(g);
    un_ctx_free(ctx);
    un_ruleset_free(set);
}

/* Frees what a test over one hand-made rule (sides sd) and graph g holds. */
static void rule_case_free(un_ctx *ctx, un_graph *g, un_ruleset *set, un_rule *r, un_graph **sd) {
    un_graph_free(g);
    un_ruleset_free(set);
    un_rule_free(r);
    un_graph_free(sd[0]);
    un_graph_free(sd[1]);
    un_ctx_free(ctx);
}

/* A two-output rule relu(x0), relu(x1) => relu(x0), relu(x1) (a disconnected pattern) on a graph
 * whose only output is the second relu: the first one is dead, and after the rewrite neither it
 * nor the target's copy of it is there. */
static void test_dangling_removed(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *sd[2];
    int32_t a[2], b[2];
    for (int k = 0; k < 2; k++) {
        sd[k] = un_graph_new(spec);
        un_graph_add_input(ctx, sd[k], "x0", UN_OP_INPUT, 2, (int64_t[]){4, 4}, NULL);
        un_graph_add_input(ctx, sd[k], "x1", UN_OP_INPUT, 2, (int64_t[]){4, 4}, NULL);
        un_graph_add(ctx, sd[k], UN_OP_RELU, NULL, (un_ref[]){{0, 0}}, 1, NULL, &a[k]);
        un_graph_add(ctx, sd[k], UN_OP_RELU, NULL, (un_ref[]){{1, 0}}, 1, NULL, &b[k]);
    }
    un_rule *r = NULL;
    un_ruleset *set = NULL;
    EXPECT_OK(ctx, un_rule_make(ctx, sd[0], sd[1], (un_ref[]){{a[0], 0}, {b[0], 0}},
                                (un_ref[]){{a[1], 0}, {b[1], 0}}, 2, &r));
    if (r)
        EXPECT_OK(ctx, un_ruleset_from_rules(ctx, spec, &r, NULL, 1, NULL, &set));
    un_graph *g = un_graph_new(spec);
    int32_t A, B;
    un_graph_add_input(ctx, g, "x", UN_OP_INPUT, 2, (int64_t[]){4, 4}, NULL);
    un_graph_add_input(ctx, g, "y", UN_OP_INPUT, 2, (int64_t[]){4, 4}, NULL);
    un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{0, 0}}, 1, "A", &A);
    un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{1, 0}}, 1, "B", &B);
    EXPECT_OK(ctx, un_graph_set_outputs(ctx, g, (un_ref[]){{B, 0}}, 1));
    un_matcher *m = NULL;
    un_match_list ms = {0};
    if (set) {
        EXPECT_OK(ctx, un_matcher_new(ctx, set, g, &m));
        EXPECT_OK(ctx, un_match_all(ctx, m, &ms));
    }
    EXPECT_EQ(ms.n, 2); /* relu(x0) at A and relu(x1) at B, and the other way round */
    for (int64_t i = 0; i < ms.n; i++) {
        un_graph *g2 = NULL;
        int32_t *origin = NULL;
        EXPECT_OK(ctx, un_apply(ctx, set, g, &ms.v[i], &g2, &origin));
        if (g2) {
            EXPECT_EQ(un_graph_node_count(g2), 3); /* x, y and the new relu of y */
            EXPECT_TRUE(rw_same_model(ctx, g, g2, 3));
        }
        free(origin);
        un_graph_free(g2);
    }
    un_match_list_deinit(&ms);
    un_matcher_free(m);
    rule_case_free(ctx, g, set, r, sd);
}

/* The new nodes' names: "<anchor>~r<id>.<target node>", deterministic, not growing over a chain
 * of rewrites at one place, and "#2" when the name is taken by a kept node. */
static void test_new_node_names(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *sd[2];
    int32_t a[2];
    for (int k = 0; k < 2; k++) { /* relu(x0) => relu(x0), target node named "t1" */
        sd[k] = un_graph_new(spec);
        un_graph_add_input(ctx, sd[k], "x0", UN_OP_INPUT, 2, (int64_t[]){4, 4}, NULL);
        un_graph_add(ctx, sd[k], UN_OP_RELU, NULL, (un_ref[]){{0, 0}}, 1, k ? "t1" : "s1", &a[k]);
    }
    un_rule *r = NULL;
    un_ruleset *set = NULL;
    EXPECT_OK(ctx,
              un_rule_make(ctx, sd[0], sd[1], (un_ref[]){{a[0], 0}}, (un_ref[]){{a[1], 0}}, 1, &r));
    if (r)
        EXPECT_OK(ctx, un_ruleset_from_rules(ctx, spec, &r, NULL, 1, NULL, &set));
    un_graph *g = un_graph_new(spec);
    int32_t A, B;
    un_graph_add_input(ctx, g, "x", UN_OP_INPUT, 2, (int64_t[]){4, 4}, NULL);
    un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{0, 0}}, 1, "act", &A);
    char want[64], taken[80];
    snprintf(want, sizeof want, "act~r%d.t1", set ? (int)un_ruleset_rule_id(set, 0) : 0);
    snprintf(taken, sizeof taken, "%s#2", want);
    un_graph_add(ctx, g, UN_OP_EW_ADD, NULL, (un_ref[]){{A, 0}, {0, 0}}, 2, want, &B);
    EXPECT_OK(ctx, un_graph_set_outputs(ctx, g, (un_ref[]){{B, 0}}, 1));
    un_graph *cur = un_graph_clone(g);
    for (int step = 0; set && step < 3; step++) { /* rewrite the relu again and again */
        un_matcher *m = NULL;
        un_match_list ms = {0};
        EXPECT_OK(ctx, un_matcher_new(ctx, set, cur, &m));
        EXPECT_OK(ctx, un_match_all(ctx, m, &ms));
        EXPECT_EQ(ms.n, 1);
        un_graph *next = NULL, *again = NULL;
        if (ms.n == 1) {
            EXPECT_OK(ctx, un_apply(ctx, set, cur, &ms.v[0], &next, NULL));
            EXPECT_OK(ctx, un_apply(ctx, set, cur, &ms.v[0], &again, NULL));
        }
        if (next && again) {
            /* "act~rN.t1" is the ew_add's name, so the relu gets "#2"; the anchor was
             * "act" then "act~rN.t1#2": the name stays the same */
            int32_t v = un_graph_find(next, taken);
            EXPECT_TRUE(v >= 0 && un_graph_node(next, v)->op == UN_OP_RELU);
            EXPECT_TRUE(un_graph_find(again, taken) == v);
            EXPECT_TRUE(un_graph_find(next, want) >= 0);
            EXPECT_EQ(un_graph_hash(next), un_graph_hash(g)); /* names are not in the hash */
            EXPECT_TRUE(rw_same_model(ctx, g, next, 5));
        }
        un_graph_free(again);
        un_graph_free(cur);
        cur = next ? next : un_graph_clone(g);
        un_match_list_deinit(&ms);
        un_matcher_free(m);
    }
    un_graph_free(cur);
    rule_case_free(ctx, g, set, r, sd);
}

int main(void) {
    if (!test_spec_load(&spec))
        return 1;
    static const test_case cases[] = {
        {"copy_remap", test_copy_remap},
        {"bad_match", test_bad_match},
        {"dangling_removed", test_dangling_removed},
        {"new_node_names", test_new_node_names},
        {"random_chains", test_random_chains},
        {"planted_wrong_rule", test_planted_wrong_rule},
    };
    int rc = TEST_RUN_ALL(cases);
    rw_db_remove();
    un_spec_free(spec);
    return rc;
}
