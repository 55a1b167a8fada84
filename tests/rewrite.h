/* tests/rewrite.h - what test_match.c and test_apply.c share: a small verified rule database made
 * by the programs (unity-gen --max-ops 2, unity-verify) in a temporary directory, and random PCGs
 * over the operators those rules use, at the shapes they were found at.
 *   un_ruleset *set = rw_ruleset(spec, true);   // forwards and reversed; NULL on failure
 *   un_graph *g = rw_random_graph(spec, &rng, 10);
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

#endif
