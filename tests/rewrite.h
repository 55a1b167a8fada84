/* tests/rewrite.h - what test_match.c and test_apply.c share: a small verified rule database made
 * by the programs (unity-gen --max-ops 2, unity-verify) in a temporary directory, and random PCGs
 * over the operators those rules use, at the shapes they were found at.
 *   un_ruleset *set = rw_ruleset(spec, true);   // forwards and reversed; NULL on failure
 *   un_graph *g = rw_random_graph(spec, &rng, 10);
 *   int64_t n = rw_chains(ctx, set, g, &rng, 4, &wrong, NULL, NULL);  // random rewrite chains
 */
#ifndef UN_TEST_REWRITE_H
#define UN_TEST_REWRITE_H

#include "search/apply.h"
#include "tests/test.h"

TEST__FN char rw_dir[64];

/* Makes rw_dir/r.db (N = 2, verified) once; false (after a failed expectation) when it cannot. */
TEST__FN bool rw_db_make(void) {
    if (rw_dir[0])
        return true;
    if (!test_tmpdir_make(rw_dir, sizeof rw_dir, "/tmp/unity-rewrite-XXXXXX"))
        return false;
    const char *b = getenv("UNITY_BUILD");
    b = b && *b ? b : "build/default";
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s/bin/unity-gen --ops specs/ --max-ops 2 --threads 1 -o %s/r.db >/dev/null 2>&1 && "
             "%s/bin/unity-verify %s/r.db --jobs 1 >/dev/null 2>&1",
             b, rw_dir, b, rw_dir);
    int rc = system(cmd);
    EXPECT_EQ(rc, 0);
    return rc == 0;
}

TEST__FN void rw_db_remove(void) {
    if (rw_dir[0])
        EXPECT_TRUE(test_tmpdir_remove(rw_dir));
}

/* The verified rules of rw_dir/r.db (and their reverses when `reversed`), or NULL. */
TEST__FN un_ruleset *rw_ruleset(const un_spec *spec, bool reversed) {
    if (!rw_db_make())
        return NULL;
    un_ctx *ctx = un_ctx_new(NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/r.db", rw_dir);
    un_rulesdb *db = NULL;
    un_ruleset *set = NULL;
    un_ruleset_params p = un_ruleset_params_default();
    p.reversed = reversed;
    un_status st = un_rulesdb_open(ctx, path, spec, UN_RULESDB_READONLY, &db);
    if (st == UN_OK)
        st = un_ruleset_load(ctx, db, &p, &set, NULL);
    EXPECT_OK(ctx, st);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
    return set;
}

/* A random PCG of about n operator nodes over inputs x [2,4,4] and weights w [4,4] (the shapes of
 * the N=2 menu), with the operators the rules use, parallel ones included; its outputs are the
 * unconsumed tensors. Every node is well formed (a draw that is not is skipped). */
TEST__FN un_graph *rw_random_graph(const un_spec *spec, un_rng *rng, int n) {
    un_graph *g = un_graph_new(spec);
    int32_t id;
    un_graph_add_input(NULL, g, "x0", UN_OP_INPUT, 3, (int64_t[]){2, 4, 4}, &id);
    un_graph_add_input(NULL, g, "x1", UN_OP_INPUT, 3, (int64_t[]){2, 4, 4}, &id);
    un_graph_add_input(NULL, g, "w0", UN_OP_WEIGHT, 2, (int64_t[]){4, 4}, &id);
    un_graph_add_input(NULL, g, "w1", UN_OP_WEIGHT, 2, (int64_t[]){4, 4}, &id);
    static const un_op ops[] = {UN_OP_LINEAR, UN_OP_EW_ADD,    UN_OP_EW_MUL,  UN_OP_RELU,
                                UN_OP_CONCAT, UN_OP_PARTITION, UN_OP_COMBINE, UN_OP_REPLICATE,
                                UN_OP_RELU,   UN_OP_EW_ADD,    UN_OP_LINEAR};
    int made = 0;
    for (int tries = 0; made < n && tries < 50 * n; tries++) {
        un_op op = ops[un_rng_below(rng, sizeof ops / sizeof ops[0])];
        int32_t nn = un_graph_node_count(g);
        /* prefer recent nodes, so the graph is deep rather than wide */
        un_ref a = {(int32_t)(nn - 1 - (int32_t)un_rng_below(rng, (uint64_t)(nn < 4 ? nn : 4))), 0};
        un_ref b = {(int32_t)un_rng_below(rng, (uint64_t)nn), 0};
        if (un_rng_below(rng, 4) == 0)
            b = a;
        un_status st;
        if (un_op_kind_of(op) == UN_OPK_PARALLEL) {
            const un_shape *s = un_graph_shape(g, a);
            int64_t dim = (int64_t)un_rng_below(rng, (uint64_t)s->rank);
            if (op == UN_OP_COMBINE) {
                int k = 0;
                while (k < s->rank && s->shard[k] == 1)
                    k++;
                if (k == s->rank)
                    continue;
                dim = k;
            }
            st = un_graph_add_parallel(NULL, g, op, a, dim, 2, NULL, &id);
        } else {
            un_param p[UN_MAX_PARAMS];
            const un_op_spec *os = un_spec_op(spec, op);
            un_spec_param_defaults(os, p);
            if (op == UN_OP_LINEAR && un_rng_below(rng, 3) == 0)
                p[un_spec_param_index(os, "activation")].v[0] = 1; /* relu */
            if (op == UN_OP_CONCAT)
                p[un_spec_param_index(os, "axis")].v[0] = (int64_t)un_rng_below(rng, 2);
            if (op == UN_OP_LINEAR && un_rng_below(rng, 2) == 0)
                b = (un_ref){2 + (int32_t)un_rng_below(rng, 2), 0};
            un_ref in[2] = {a, b};
            int n_in = op == UN_OP_RELU ? 1 : 2;
            st = un_graph_add(NULL, g, op, p, in, n_in, NULL, &id);
        }
        made += st == UN_OK;
    }
    return g;
}

/* Whether g2 computes what g does: the same outputs (count, shapes, layouts) and values. */
TEST__FN bool rw_same_model(un_ctx *ctx, const un_graph *g, const un_graph *g2, uint64_t seed) {
    if (un_graph_output_count(g) != un_graph_output_count(g2))
        return false;
    for (int32_t i = 0; i < un_graph_output_count(g); i++)
        if (!un_shape_eq(un_graph_shape(g, un_graph_output(g, i)),
                         un_graph_shape(g2, un_graph_output(g2, i))))
            return false;
    double err;
    return un_eval_compare(ctx, g, g2, UN_DOM_FIELD, seed, 0, &err) == UN_OK &&
           un_eval_compare(ctx, g, g2, UN_DOM_F64, seed, 1e-9, &err) == UN_OK;
}

/* Runs chains of random rewrites from g; returns rewrites applied, counts wrong ones (and in
 * *other_dims, may be NULL, those by a rule with a dim variable matched at another value than its
 * witness). */
TEST__FN int64_t rw_chains(un_ctx *ctx, const un_ruleset *set, const un_graph *g, un_rng *rng,
                           int n_chains, int64_t *wrong, int32_t *wrong_rule, int64_t *other_dims) {
    int64_t applied = 0;
    for (int c = 0; c < n_chains; c++) {
        int len = 1 + (int)un_rng_below(rng, 20);
        un_graph *cur = un_graph_clone(g);
        for (int k = 0; k < len; k++) {
            un_matcher *m = NULL;
            un_match_list ms = {0};
            EXPECT_OK(ctx, un_matcher_new(ctx, set, cur, &m));
            EXPECT_OK(ctx, un_match_all(ctx, m, &ms));
            if (ms.n == 0) {
                un_matcher_free(m);
                break;
            }
            const un_match *mt = &ms.v[un_rng_below(rng, (uint64_t)ms.n)];
            un_graph *next = NULL;
            int32_t *origin = NULL;
            un_status st = un_apply(ctx, set, cur, mt, &next, &origin);
            EXPECT_OK(ctx, st);
            if (st == UN_OK) {
                applied++;
                const un_rule *ar = un_ruleset_rule(set, mt->rule);
                bool other = false;
                for (int a = 0; a < ar->n_vars; a++)
                    other =
                        other || (un_rule_var_is_dim(ar, a) && mt->values[a] != ar->vars[a].value);
                if (other_dims)
                    *other_dims += other;
                int32_t fresh = 0;
                for (int32_t v = 0; v < un_graph_node_count(next); v++) {
                    fresh += origin[v] < 0;
                    const char *nm = un_graph_node(next, v)->name;
                    if (origin[v] < 0) /* a new node: named after the rule, unique */
                        EXPECT_TRUE(nm && strstr(nm, "~r") && un_graph_find(next, nm) == v);
                }
                EXPECT_TRUE(fresh <= un_rule_size(un_ruleset_rule(set, mt->rule), UN_RULE_DST));
                if (!rw_same_model(NULL, g, next, 7 + (uint64_t)applied)) {
                    if (wrong_rule)
                        *wrong_rule = un_ruleset_rule_id(set, mt->rule);
                    (*wrong)++;
                }
                un_graph_free(cur);
                cur = next;
            }
            free(origin);
            un_match_list_deinit(&ms);
            un_matcher_free(m);
            if (st != UN_OK)
                break;
        }
        un_graph_free(cur);
    }
    return applied;
}

#endif
