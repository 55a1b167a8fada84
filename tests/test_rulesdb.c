/* test_rulesdb.c - rulesdb/rulesdb.h: create and reopen, insert and dedup, verdicts and trust
 * under a spec set, filters, runs, the op-cost cache, merge, integrity (tampered rows, garbage and
 * truncated files, newer schema, foreign SQLite files), schema upgrade, allocation failures on
 * open, a writer killed mid-batch, and reads during a write. */
#include "rulesdb/rulesdb.h"
#include "tests/test.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static un_spec *spec, *spec2; /* spec2: the same ops with one edit, so another content hash */
static char dir[256];

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static void rm_db(const char *path) {
    char b[600];
    unlink(path);
    snprintf(b, sizeof b, "%s-wal", path);
    unlink(b);
    snprintf(b, sizeof b, "%s-shm", path);
    unlink(b);
}

static const un_op unary_ops[] = {UN_OP_RELU, UN_OP_GELU, UN_OP_TANH, UN_OP_SIGMOID};

/* A distinct rule per i: partition[dim=d,degree=k](u(x)) => u(partition[dim=d,degree=k](x)). */
static un_rule *make_rule(int i) {
    int32_t k = 2 + i / 8;
    int dim = (i / 4) % 2;
    un_op u = unary_ops[i % 4];
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g[2] = {un_graph_new(spec), un_graph_new(spec)};
    int64_t dims[2] = {2 * k, 2 * k};
    const un_op_spec *ps = un_spec_op(spec, UN_OP_PARTITION);
    un_param p[UN_MAX_PARAMS];
    un_spec_param_defaults(ps, p);
    p[un_spec_param_index(ps, "dim")] = un_param_int(dim);
    p[un_spec_param_index(ps, "degree")] = un_param_int(k);
    int32_t x, a, b;
    un_ref out[2];
    un_status st = UN_OK;
    for (int s = 0; s < 2 && st == UN_OK; s++) {
        st = un_graph_add_input(ctx, g[s], "x", UN_OP_INPUT, 2, dims, &x);
        if (st == UN_OK)
            st = un_graph_add(ctx, g[s], s ? UN_OP_PARTITION : u, s ? p : NULL, (un_ref[]){{x, 0}},
                              1, NULL, &a);
        if (st == UN_OK)
            st = un_graph_add(ctx, g[s], s ? u : UN_OP_PARTITION, s ? NULL : p, (un_ref[]){{a, 0}},
                              1, NULL, &b);
        out[s] = (un_ref){b, 0};
    }
    un_rule *r = NULL;
    if (st == UN_OK)
        st = un_rule_make(ctx, g[0], g[1], &out[0], &out[1], 1, &r);
    EXPECT_OK(ctx, st);
    un_graph_free(g[0]);
    un_graph_free(g[1]);
    un_ctx_free(ctx);
    return r;
}

static un_rulesdb *open_db(un_ctx *ctx, const char *path, const un_spec *sp, int flags) {
    un_rulesdb *db = NULL;
    EXPECT_OK(ctx, un_rulesdb_open(ctx, path, sp, flags, &db));
    return db;
}

static int64_t insert_n(un_ctx *ctx, un_rulesdb *db, int from, int n) {
    int64_t added = 0;
    EXPECT_OK(ctx, un_rulesdb_begin(ctx, db));
    for (int i = from; i < from + n; i++) {
        un_rule *r = make_rule(i);
        bool ins = false;
        EXPECT_OK(ctx,
                  un_rulesdb_rule_insert(ctx, db, r, UN_RULE_CANDIDATE, NULL,
                                         &(un_rulesdb_origin){.kind = "generated"}, NULL, &ins));
        added += ins;
        un_rule_free(r);
    }
    EXPECT_OK(ctx, un_rulesdb_commit(ctx, db));
    return added;
}

static void test_create_insert_get(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *path = tmp_path("a.db");
    rm_db(path);
    un_rulesdb *db = open_db(ctx, path, spec, UN_RULESDB_CREATE);
    if (!db)
        goto done;
    EXPECT_STR_EQ(un_rulesdb_path(db), path);
    int64_t run = 0;
    EXPECT_OK(ctx, un_rulesdb_run_begin(ctx, db, "test", "--x 1", &run));
    EXPECT_TRUE(run > 0);
    un_rule *r = make_rule(5);
    int32_t id = 0, id2 = 0;
    bool ins = false;
    EXPECT_OK(ctx, un_rulesdb_begin(ctx, db));
    EXPECT_EQ(un_rulesdb_begin(ctx, db), UN_ERR_INVALID); /* nesting */
    un_ctx_clear(ctx);
    EXPECT_OK(ctx, un_rulesdb_rule_insert(ctx, db, r, UN_RULE_CANDIDATE, NULL,
                                          &(un_rulesdb_origin){.kind = "generated", .run = run},
                                          &id, &ins));
    EXPECT_TRUE(ins);
    EXPECT_OK(ctx, un_rulesdb_rule_insert(ctx, db, r, UN_RULE_CANDIDATE, NULL, NULL, &id2, &ins));
    EXPECT_TRUE(!ins);
    EXPECT_EQ(id, id2);
    /* Columns made beforehand (the generator's workers) store the row un_rulesdb_rule_insert
     * would: the same dedupe by hash, a body that reads back under its checksum and hash. */
    un_rulesdb_cols *cols = NULL, *cols6 = NULL;
    un_rule *r6 = make_rule(6);
    int32_t id6 = 0, id6b = 0;
    EXPECT_OK(ctx, un_rulesdb_cols_new(ctx, r, un_rule_hash(r), &cols));
    EXPECT_OK(ctx, un_rulesdb_rule_insert_cols(ctx, db, cols, NULL, &id2, &ins));
    EXPECT_TRUE(!ins);
    EXPECT_EQ(id, id2);
    EXPECT_OK(ctx, un_rulesdb_cols_new(ctx, r6, un_rule_hash(r6), &cols6));
    EXPECT_OK(ctx, un_rulesdb_rule_insert_cols(
                       ctx, db, cols6, &(un_rulesdb_origin){.kind = "generated", .run = run}, &id6,
                       &ins));
    EXPECT_TRUE(ins && id6 == id + 1);
    EXPECT_OK(ctx, un_rulesdb_rule_insert(ctx, db, r6, UN_RULE_CANDIDATE, NULL, NULL, &id6b, &ins));
    EXPECT_TRUE(!ins);
    EXPECT_EQ(id6, id6b);
    un_rulesdb_cols_free(cols);
    un_rulesdb_cols_free(cols6);
    EXPECT_OK(ctx, un_rulesdb_commit(ctx, db));
    EXPECT_OK(ctx, un_rulesdb_run_end(ctx, db, run, "{\"candidates\": 2}"));
    un_rulesdb_row *row6 = NULL;
    EXPECT_OK(ctx, un_rulesdb_rule_get(ctx, db, id6, &row6));
    if (row6) {
        EXPECT_TRUE(row6->hash == un_rule_hash(r6));
        EXPECT_TRUE(row6->rule && un_rule_hash(row6->rule) == un_rule_hash(r6));
        EXPECT_EQ(row6->n_src, 2);
        EXPECT_STR_EQ(row6->ops, "partition,tanh");
        EXPECT_STR_EQ(row6->origin_kind, "generated");
        EXPECT_TRUE(row6->gen_spec == un_spec_hash(spec));
    }
    un_rulesdb_row_free(row6);
    un_rule_free(r6);
    un_rulesdb_row *row = NULL;
    EXPECT_OK(ctx, un_rulesdb_rule_get(ctx, db, id, &row));
    if (row) {
        EXPECT_EQ(row->id, id);
        EXPECT_EQ(row->status, UN_RULE_CANDIDATE);
        EXPECT_TRUE(!row->trusted);
        EXPECT_TRUE(row->hash == un_rule_hash(r));
        EXPECT_TRUE(row->rule && un_rule_hash(row->rule) == un_rule_hash(r));
        EXPECT_EQ(row->n_src, 2);
        EXPECT_EQ(row->n_dst, 2);
        EXPECT_STR_EQ(row->ops, "gelu,partition");
        EXPECT_STR_EQ(row->origin_kind, "generated");
        EXPECT_TRUE(row->gen_spec == un_spec_hash(spec));
        EXPECT_TRUE(row->verify_spec == 0);
    }
    un_rulesdb_row_free(row);
    EXPECT_EQ(un_rulesdb_rule_get(ctx, db, 999, &row), UN_ERR_INVALID);
    EXPECT_TRUE(row == NULL);
    un_ctx_clear(ctx);
    un_rule_free(r);
    un_rulesdb_free(db);
    /* Reopened: the rule is still there. */
    db = open_db(ctx, path, spec, 0);
    int64_t counts[UN_RULE_STATUS_COUNT];
    if (db) {
        EXPECT_OK(ctx, un_rulesdb_count(ctx, db, counts));
        EXPECT_EQ(counts[UN_RULE_CANDIDATE], 2);
        EXPECT_EQ(counts[UN_RULE_VERIFIED], 0);
    }
    un_rulesdb_free(db);
done:
    un_ctx_free(ctx);
}

static void test_verdicts_and_trust(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *path = tmp_path("v.db");
    rm_db(path);
    un_rulesdb *db = open_db(ctx, path, spec, UN_RULESDB_CREATE);
    if (!db)
        goto done;
    EXPECT_EQ(insert_n(ctx, db, 0, 10), 10);
    int32_t *ids = NULL;
    int64_t n = 0;
    EXPECT_OK(ctx, un_rulesdb_rule_ids(ctx, db, NULL, &ids, &n));
    EXPECT_EQ(n, 10);
    if (n == 10) {
        for (int i = 0; i < 4; i++)
            EXPECT_OK(ctx, un_rulesdb_rule_set_verdict(
                               ctx, db, ids[i],
                               &(un_rulesdb_verdict){.status = UN_RULE_VERIFIED,
                                                     .proof_ms = 1.5 + i,
                                                     .axioms = "relu_partition,partition_id"}));
        EXPECT_OK(ctx, un_rulesdb_rule_set_verdict(ctx, db, ids[4],
                                                   &(un_rulesdb_verdict){.status = UN_RULE_REFUTED,
                                                                         .detail = "x = [1, 2]"}));
        EXPECT_OK(ctx, un_rulesdb_rule_set_verdict(
                           ctx, db, ids[5],
                           &(un_rulesdb_verdict){.status = UN_RULE_UNKNOWN, .detail = "timeout"}));
        EXPECT_EQ(un_rulesdb_rule_set_verdict(ctx, db, ids[6],
                                              &(un_rulesdb_verdict){.status = UN_RULE_CANDIDATE}),
                  UN_ERR_INVALID);
        un_ctx_clear(ctx);
        un_rulesdb_row *row = NULL;
        EXPECT_OK(ctx, un_rulesdb_rule_get(ctx, db, ids[1], &row));
        if (row) {
            EXPECT_EQ(row->status, UN_RULE_VERIFIED);
            EXPECT_TRUE(row->trusted);
            EXPECT_NEAR(row->proof_ms, 2.5, 1e-12);
            EXPECT_STR_EQ(row->axioms, "relu_partition,partition_id");
            EXPECT_TRUE(row->verify_spec == un_spec_hash(spec));
        }
        un_rulesdb_row_free(row);
        EXPECT_OK(ctx, un_rulesdb_rule_get(ctx, db, ids[4], &row));
        if (row) {
            EXPECT_EQ(row->status, UN_RULE_REFUTED);
            EXPECT_STR_EQ(row->detail, "x = [1, 2]");
        }
        un_rulesdb_row_free(row);
    }
    free(ids);
    un_rule **rules = NULL;
    int64_t stale = -1;
    EXPECT_OK(ctx, un_rulesdb_load_verified(ctx, db, &rules, &n, &stale));
    EXPECT_EQ(n, 4);
    EXPECT_EQ(stale, 0);
    for (int64_t i = 0; i < n; i++)
        un_rule_free(rules[i]);
    free(rules);
    /* needs_verify: 4 candidates + 1 unknown. */
    un_rulesdb_filter f = un_rulesdb_filter_default();
    f.needs_verify = true;
    EXPECT_OK(ctx, un_rulesdb_rule_ids(ctx, db, &f, &ids, &n));
    EXPECT_EQ(n, 5);
    free(ids);
    un_rulesdb_free(db);

    /* Under another spec set the verified rules are stale: not loaded, not trusted, re-verified. */
    db = open_db(ctx, path, spec2, 0);
    if (!db)
        goto done;
    EXPECT_OK(ctx, un_rulesdb_load_verified(ctx, db, &rules, &n, &stale));
    EXPECT_EQ(n, 0);
    EXPECT_EQ(stale, 4);
    free(rules);
    EXPECT_OK(ctx, un_rulesdb_rule_ids(ctx, db, &f, &ids, &n));
    EXPECT_EQ(n, 9);
    if (n > 0) {
        un_rulesdb_row *row = NULL;
        EXPECT_OK(ctx, un_rulesdb_rule_get(ctx, db, ids[0], &row));
        if (row) {
            EXPECT_EQ(row->status, UN_RULE_VERIFIED);
            EXPECT_TRUE(!row->trusted);
        }
        un_rulesdb_row_free(row);
    }
    free(ids);
    un_rulesdb_free(db);
done:
    un_ctx_free(ctx);
}

static void test_filters(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *path = tmp_path("f.db");
    rm_db(path);
    un_rulesdb *db = open_db(ctx, path, spec, UN_RULESDB_CREATE);
    if (!db)
        goto done;
    EXPECT_EQ(insert_n(ctx, db, 0, 40), 40);
    EXPECT_EQ(insert_n(ctx, db, 30, 20), 10); /* 10 duplicates */
    int32_t *ids = NULL;
    int64_t n = 0;
    un_rulesdb_filter f = un_rulesdb_filter_default();
    f.op = UN_OP_RELU;
    EXPECT_OK(ctx, un_rulesdb_rule_ids(ctx, db, &f, &ids, &n));
    EXPECT_EQ(n, 13); /* i % 4 == 0 for i < 50 */
    free(ids);
    f = un_rulesdb_filter_default();
    f.op = UN_OP_LINEAR;
    EXPECT_OK(ctx, un_rulesdb_rule_ids(ctx, db, &f, &ids, &n));
    EXPECT_EQ(n, 0);
    free(ids);
    f = un_rulesdb_filter_default();
    f.min_size = 5;
    EXPECT_OK(ctx, un_rulesdb_rule_ids(ctx, db, &f, &ids, &n));
    EXPECT_EQ(n, 0);
    free(ids);
    f.min_size = 4;
    f.max_size = 4;
    f.limit = 7;
    f.after_id = 3;
    EXPECT_OK(ctx, un_rulesdb_rule_ids(ctx, db, &f, &ids, &n));
    EXPECT_EQ(n, 7);
    if (n == 7) {
        EXPECT_EQ(ids[0], 4);
        EXPECT_EQ(ids[6], 10);
    }
    free(ids);
    int64_t total = 0;
    for (int s = 0; s < 3; s++) {
        f = un_rulesdb_filter_default();
        f.shard_i = s;
        f.shard_n = 3;
        EXPECT_OK(ctx, un_rulesdb_rule_ids(ctx, db, &f, &ids, &n));
        for (int64_t i = 0; i < n; i++)
            EXPECT_EQ(ids[i] % 3, s);
        total += n;
        free(ids);
    }
    EXPECT_EQ(total, 50);
    f = un_rulesdb_filter_default();
    f.shard_i = 3;
    f.shard_n = 3;
    EXPECT_EQ(un_rulesdb_rule_ids(ctx, db, &f, &ids, &n), UN_ERR_INVALID);
    un_ctx_clear(ctx);
    f = un_rulesdb_filter_default();
    f.status = UN_RULE_VERIFIED;
    EXPECT_OK(ctx, un_rulesdb_rule_ids(ctx, db, &f, &ids, &n));
    EXPECT_EQ(n, 0);
    free(ids);
    un_rulesdb_free(db);
done:
    un_ctx_free(ctx);
}

static void test_rejected_and_costs(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *path = tmp_path("r.db");
    rm_db(path);
    un_rulesdb *db = open_db(ctx, path, spec, UN_RULESDB_CREATE);
    if (!db)
        goto done;
    un_rulesdb_origin o = {.kind = "imported", .file = "ff.json", .name = "taso_rule_300"};
    int32_t id = 0, id2 = 0;
    bool ins = false;
    EXPECT_OK(ctx, un_rulesdb_rule_insert(ctx, db, NULL, UN_RULE_REJECTED, "reduce of a copy", &o,
                                          &id, &ins));
    EXPECT_TRUE(ins);
    EXPECT_OK(ctx, un_rulesdb_rule_insert(ctx, db, NULL, UN_RULE_REJECTED, "reduce of a copy", &o,
                                          &id2, &ins));
    EXPECT_TRUE(!ins);
    EXPECT_EQ(id, id2);
    EXPECT_EQ(un_rulesdb_rule_insert(ctx, db, NULL, UN_RULE_CANDIDATE, NULL, &o, &id2, &ins),
              UN_ERR_INVALID);
    un_ctx_clear(ctx);
    un_rulesdb_row *row = NULL;
    EXPECT_OK(ctx, un_rulesdb_rule_get(ctx, db, id, &row));
    if (row) {
        EXPECT_EQ(row->status, UN_RULE_REJECTED);
        EXPECT_TRUE(row->rule == NULL);
        EXPECT_STR_EQ(row->detail, "reduce of a copy");
        EXPECT_STR_EQ(row->origin_name, "taso_rule_300");
        EXPECT_TRUE(row->gen_spec == 0);
    }
    un_rulesdb_row_free(row);
    /* A rejected import is never given a verdict. */
    EXPECT_EQ(
        un_rulesdb_rule_set_verdict(ctx, db, id, &(un_rulesdb_verdict){.status = UN_RULE_VERIFIED}),
        UN_ERR_INVALID);
    un_ctx_clear(ctx);

    un_rulesdb_cost c = {.fwd_ms = 1.25, .bwd_ms = 2.5, .bytes = 4096, .measured_at = 1700000000};
    snprintf(c.op_sig, sizeof c.op_sig, "linear[activation=relu,use_bias=0]");
    snprintf(c.shape, sizeof c.shape, "float[8,16];float[16,4]");
    snprintf(c.device, sizeof c.device, "cpu");
    EXPECT_OK(ctx, un_rulesdb_cost_put(ctx, db, &c));
    c.fwd_ms = 1.0;
    EXPECT_OK(ctx, un_rulesdb_cost_put(ctx, db, &c)); /* replaces */
    un_rulesdb_cost got;
    bool found = false;
    EXPECT_OK(ctx, un_rulesdb_cost_get(ctx, db, c.op_sig, c.shape, "cpu", &got, &found));
    EXPECT_TRUE(found);
    EXPECT_NEAR(got.fwd_ms, 1.0, 0);
    EXPECT_NEAR(got.bwd_ms, 2.5, 0);
    EXPECT_EQ(got.measured_at, 1700000000);
    EXPECT_STR_EQ(got.device, "cpu");
    EXPECT_OK(ctx, un_rulesdb_cost_get(ctx, db, c.op_sig, c.shape, "h100", &got, &found));
    EXPECT_TRUE(!found);
    un_rulesdb_free(db);
done:
    un_ctx_free(ctx);
}

static void test_general_form(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *path = tmp_path("g.db");
    rm_db(path);
    un_rulesdb *db = open_db(ctx, path, spec, UN_RULESDB_CREATE);
    un_rule *r = make_rule(3), *other = make_rule(4);
    if (!db || !r || !other)
        goto done;
    int32_t id = 0;
    EXPECT_OK(ctx, un_rulesdb_rule_insert(ctx, db, r, UN_RULE_CANDIDATE, NULL, NULL, &id, NULL));
    /* The degree as a variable k: the same rule at its witness value. */
    un_rule *g = un_rule_clone(r);
    int32_t ps = -1, pd = -1;
    for (int32_t i = 0; i < un_graph_node_count(g->src); i++)
        if (un_graph_node(g->src, i)->op == UN_OP_PARTITION)
            ps = i;
    for (int32_t i = 0; i < un_graph_node_count(g->dst); i++)
        if (un_graph_node(g->dst, i)->op == UN_OP_PARTITION)
            pd = i;
    int8_t deg = (int8_t)un_spec_param_index(un_spec_op(spec, UN_OP_PARTITION), "degree");
    EXPECT_OK(ctx,
              un_rule_var_add(
                  ctx, g, "k",
                  (un_rule_bind[]){{UN_RULE_SRC, ps, deg, -1}, {UN_RULE_DST, pd, deg, -1}}, 2));
    EXPECT_EQ(un_rulesdb_rule_set_verdict(
                  ctx, db, id, &(un_rulesdb_verdict){.status = UN_RULE_VERIFIED, .general = other}),
              UN_ERR_INVALID);
    un_ctx_clear(ctx);
    EXPECT_OK(ctx,
              un_rulesdb_rule_set_verdict(
                  ctx, db, id, &(un_rulesdb_verdict){.status = UN_RULE_VERIFIED, .general = g}));
    un_rule **rules = NULL;
    int64_t n = 0;
    EXPECT_OK(ctx, un_rulesdb_load_verified(ctx, db, &rules, &n, NULL));
    EXPECT_EQ(n, 1);
    if (n == 1)
        EXPECT_EQ(rules[0]->n_vars, 1);
    for (int64_t i = 0; i < n; i++)
        un_rule_free(rules[i]);
    free(rules);
    un_rule_free(g);
done:
    un_rule_free(r);
    un_rule_free(other);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
}

/* Opening fails with `want` and a message containing `needle`. */
static void expect_open_fails(const char *path, int flags, un_status want, const char *needle) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    un_status st = un_rulesdb_open(ctx, path, spec, flags, &db);
    EXPECT_EQ(st, want);
    EXPECT_TRUE(db == NULL);
    const char *msg = un_ctx_errmsg(ctx);
    test__check(strstr(msg, needle) != NULL && strstr(msg, path) != NULL, __FILE__, __LINE__,
                "message '%s' should name the path and say '%s'", msg, needle);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
}

static void test_bad_files(void) {
    const char *path = tmp_path("bad.db");
    rm_db(path);
    expect_open_fails(path, 0, UN_ERR_IO, "cannot open");
    write_file(path, "this is not a database at all, just some text that is long enough......", 72);
    expect_open_fails(path, 0, UN_ERR_DB, "not a rule database");
    expect_open_fails(path, UN_RULESDB_CREATE, UN_ERR_DB, "not a rule database");
    rm_db(path);
    write_file(path, "", 0);
    expect_open_fails(path, 0, UN_ERR_DB, "not a rule database");
    rm_db(path);
    /* A foreign SQLite file. */
    un_ctx *ctx = un_ctx_new(NULL);
    EXPECT_OK(ctx, un_rulesdb__test_exec(ctx, path,
                                         "CREATE TABLE t(a INTEGER); INSERT INTO t "
                                         "VALUES (1);"));
    expect_open_fails(path, UN_RULESDB_CREATE, UN_ERR_DB, "not a rule database");
    rm_db(path);
    /* A newer schema. */
    un_rulesdb *db = open_db(ctx, path, spec, UN_RULESDB_CREATE);
    un_rulesdb_free(db);
    EXPECT_OK(ctx, un_rulesdb__test_exec(ctx, path, "PRAGMA user_version = 99"));
    expect_open_fails(path, 0, UN_ERR_DB, "schema version 99 is newer");
    rm_db(path);
    /* A directory. */
    expect_open_fails(dir, 0, UN_ERR_IO, "cannot open");
    un_ctx_free(ctx);
}

static void test_corrupt_files(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *path = tmp_path("c.db");
    rm_db(path);
    un_rulesdb *db = open_db(ctx, path, spec, UN_RULESDB_CREATE);
    if (!db)
        goto done;
    EXPECT_EQ(insert_n(ctx, db, 0, 300), 300);
    un_rulesdb_free(db);
    struct stat sb;
    EXPECT_EQ(stat(path, &sb), 0);
    char *data = NULL;
    size_t len = 0;
    EXPECT_OK(ctx, un_read_file(ctx, path, &data, &len));
    EXPECT_TRUE(len > 16384);
    if (!data)
        goto done;
    /* Truncated: either open fails or a read over the whole file does; never silent. */
    for (int cut = 0; cut < 3; cut++) {
        size_t keep = cut == 0 ? 100 : cut == 1 ? 4096 + 100 : len / 2;
        rm_db(path);
        write_file(path, data, keep);
        un_ctx *c2 = un_ctx_new(NULL);
        un_rulesdb *d2 = NULL;
        un_status st = un_rulesdb_open(c2, path, spec, 0, &d2);
        if (st == UN_OK) {
            int64_t bad = 0;
            st = un_rulesdb_check(c2, d2, &bad, NULL);
            if (st == UN_OK && bad == 0) {
                int32_t *ids = NULL;
                int64_t n = 0;
                st = un_rulesdb_rule_ids(c2, d2, NULL, &ids, &n);
                free(ids);
                test__check(st != UN_OK, __FILE__, __LINE__,
                            "truncated to %zu bytes: no error (%lld rules)", keep, (long long)n);
            }
        }
        if (st != UN_OK)
            EXPECT_EQ(st, UN_ERR_DB);
        un_rulesdb_free(d2);
        un_ctx_free(c2);
    }
    /* Garbage bytes over the middle of the file. */
    rm_db(path);
    memset(data + len / 3, 0xA5, len / 3);
    write_file(path, data, len);
    {
        un_ctx *c2 = un_ctx_new(NULL);
        un_rulesdb *d2 = NULL;
        un_status st = un_rulesdb_open(c2, path, spec, 0, &d2);
        int64_t bad = 0;
        if (st == UN_OK)
            st = un_rulesdb_check(c2, d2, &bad, NULL);
        EXPECT_TRUE(st == UN_ERR_DB || bad > 0);
        un_rulesdb_free(d2);
        un_ctx_free(c2);
    }
    free(data);
done:
    un_ctx_free(ctx);
}

static void test_tampered_row(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *path = tmp_path("t.db");
    rm_db(path);
    un_rulesdb *db = open_db(ctx, path, spec, UN_RULESDB_CREATE);
    if (!db)
        goto done;
    EXPECT_EQ(insert_n(ctx, db, 0, 3), 3);
    EXPECT_OK(ctx, un_rulesdb_rule_set_verdict(ctx, db, 2,
                                               &(un_rulesdb_verdict){.status = UN_RULE_VERIFIED}));
    un_rulesdb_free(db);
    /* Change the body of rule 2 (relu -> tanh would be a different rule). */
    EXPECT_OK(ctx, un_rulesdb__test_exec(ctx, path,
                                         "UPDATE rules SET body = replace(body, 'gelu', 'tanh') "
                                         "WHERE id = 2"));
    db = open_db(ctx, path, spec, 0);
    if (!db)
        goto done;
    un_rulesdb_row *row = NULL;
    EXPECT_EQ(un_rulesdb_rule_get(ctx, db, 2, &row), UN_ERR_DB);
    test__check(strstr(un_ctx_errmsg(ctx), "rule 2: content does not match its hash") != NULL,
                __FILE__, __LINE__, "message: %s", un_ctx_errmsg(ctx));
    un_ctx_clear(ctx);
    un_rule **rules = NULL;
    int64_t n = 0;
    EXPECT_EQ(un_rulesdb_load_verified(ctx, db, &rules, &n, NULL), UN_ERR_DB);
    EXPECT_TRUE(rules == NULL && n == 0);
    un_ctx_clear(ctx);
    int64_t bad = 0;
    un_buf rep = {0};
    EXPECT_OK(ctx, un_rulesdb_check(ctx, db, &bad, &rep));
    EXPECT_EQ(bad, 1);
    EXPECT_TRUE(rep.data && strstr(rep.data, "rule 2:") != NULL);
    un_buf_deinit(&rep);
    un_rulesdb_free(db);
    /* Checksum kept consistent by a forger: the canonical hash still catches it. */
    EXPECT_OK(ctx, un_rulesdb__test_exec(ctx, path, "UPDATE rules SET body_sum = 0 WHERE id = 1"));
    db = open_db(ctx, path, spec, 0);
    if (db) {
        EXPECT_EQ(un_rulesdb_rule_get(ctx, db, 1, &row), UN_ERR_DB);
        un_ctx_clear(ctx);
        EXPECT_OK(ctx, un_rulesdb_rule_get(ctx, db, 3, &row));
        un_rulesdb_row_free(row);
    }
    un_rulesdb_free(db);
done:
    un_ctx_free(ctx);
}

/* Derived and provenance columns (ops, size, n_in, run) edited behind the library's back are found
 * by check: recomputed from the body, and covered by the row checksum (issue 10, item 5). */
static void test_derived_columns(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *path = tmp_path("d.db");
    rm_db(path);
    un_rulesdb *db = open_db(ctx, path, spec, UN_RULESDB_CREATE);
    if (!db)
        goto done;
    int64_t run = 0;
    EXPECT_OK(ctx, un_rulesdb_run_begin(ctx, db, "test", "", &run));
    EXPECT_OK(ctx, un_rulesdb_begin(ctx, db));
    for (int i = 0; i < 5; i++) {
        un_rule *r = make_rule(i);
        EXPECT_OK(ctx, un_rulesdb_rule_insert(ctx, db, r, UN_RULE_CANDIDATE, NULL,
                                              &(un_rulesdb_origin){.kind = "generated", .run = run},
                                              NULL, NULL));
        un_rule_free(r);
    }
    EXPECT_OK(ctx, un_rulesdb_commit(ctx, db));
    int64_t bad = -1;
    EXPECT_OK(ctx, un_rulesdb_check(ctx, db, &bad, NULL));
    EXPECT_EQ(bad, 0);
    un_rulesdb_free(db);
    static const char *const edits[] = {
        "UPDATE rules SET ops = 'relu' WHERE id = 1",
        "UPDATE rules SET size = size + 1 WHERE id = 2", "UPDATE rules SET n_in = 7 WHERE id = 3",
        "UPDATE rules SET run = NULL WHERE id = 4",
        "UPDATE rules SET n_src = n_src + 1, size = size + 1 WHERE id = 5"};
    for (int e = 0; e < 5; e++) {
        EXPECT_OK(ctx, un_rulesdb__test_exec(ctx, path, edits[e]));
        db = open_db(ctx, path, spec, 0);
        if (!db)
            goto done;
        un_buf rep = {0};
        EXPECT_OK(ctx, un_rulesdb_check(ctx, db, &bad, &rep));
        EXPECT_EQ(bad, e + 1);
        char want[32];
        snprintf(want, sizeof want, "rule %d:", e + 1);
        test__check(rep.data && strstr(rep.data, want) != NULL, __FILE__, __LINE__,
                    "edit %d not reported: %s", e, rep.data ? rep.data : "");
        un_buf_deinit(&rep);
        un_rulesdb_free(db);
    }
done:
    un_ctx_free(ctx);
}

/* A schema-2 file with rules is upgraded in place: the row checksums are computed for the rows it
 * holds, so check finds nothing wrong, and the claims table exists. */
static void test_upgrade_rows(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *path = tmp_path("u2.db");
    rm_db(path);
    un_rulesdb *db = open_db(ctx, path, spec, UN_RULESDB_CREATE);
    if (!db)
        goto done;
    EXPECT_EQ(insert_n(ctx, db, 0, 4), 4);
    un_rulesdb_free(db);
    EXPECT_OK(ctx,
              un_rulesdb__test_exec(ctx, path,
                                    "DROP TABLE claims; ALTER TABLE rules DROP COLUMN row_sum; "
                                    "ALTER TABLE rules DROP COLUMN conds; "
                                    "PRAGMA user_version = 2"));
    db = open_db(ctx, path, spec, 0);
    if (!db)
        goto done;
    int64_t bad = -1;
    EXPECT_OK(ctx, un_rulesdb_check(ctx, db, &bad, NULL));
    EXPECT_EQ(bad, 0);
    int32_t ids[8];
    int n = 0;
    EXPECT_OK(ctx, un_rulesdb_claim(ctx, db, NULL, "me", 10, 8, ids, &n, NULL));
    EXPECT_EQ(n, 4);
    un_rulesdb_free(db);
done:
    un_ctx_free(ctx);
}

/* Claims: taken once, skipped by another owner while live, free again once expired or released. */
static void test_claims(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *path = tmp_path("c.db");
    rm_db(path);
    un_rulesdb *db = open_db(ctx, path, spec, UN_RULESDB_CREATE), *db2 = NULL;
    if (!db)
        goto done;
    db2 = open_db(ctx, path, spec, 0);
    if (!db2)
        goto done;
    EXPECT_EQ(insert_n(ctx, db, 0, 6), 6);
    un_rulesdb_filter f = un_rulesdb_filter_default();
    f.needs_verify = true;
    int32_t a[8], b[8];
    int na = 0, nb = 0;
    int64_t others = -1;
    EXPECT_OK(ctx, un_rulesdb_claim(ctx, db, &f, "a", 60, 4, a, &na, &others));
    EXPECT_EQ(na, 4);
    EXPECT_EQ(others, 0);
    EXPECT_OK(ctx, un_rulesdb_claim(ctx, db2, &f, "b", 60, 8, b, &nb, &others));
    EXPECT_EQ(nb, 2); /* only the unclaimed ones */
    EXPECT_EQ(others, 4);
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            EXPECT_TRUE(a[i] != b[j]);
    /* a decides its rules and drops its claims; b's expire (lease 0): everything is free again
     * except a's decided rules, which no longer need verifying */
    EXPECT_OK(ctx, un_rulesdb_begin(ctx, db));
    for (int i = 0; i < na; i++)
        EXPECT_OK(ctx, un_rulesdb_rule_set_verdict(
                           ctx, db, a[i], &(un_rulesdb_verdict){.status = UN_RULE_VERIFIED}));
    EXPECT_OK(ctx, un_rulesdb_claim_release(ctx, db, "a"));
    EXPECT_OK(ctx, un_rulesdb_commit(ctx, db));
    EXPECT_OK(ctx, un_rulesdb_claim_renew(ctx, db2, "b", -1));
    EXPECT_OK(ctx, un_rulesdb_claim(ctx, db, &f, "c", 60, 8, a, &na, &others));
    EXPECT_EQ(na, 2);
    EXPECT_EQ(others, 0);
    EXPECT_TRUE(na == 2 && a[0] == b[0] && a[1] == b[1]);
done:
    un_rulesdb_free(db2);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
}

static void test_upgrade(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *path = tmp_path("u.db");
    rm_db(path);
    EXPECT_OK(ctx, un_rulesdb__test_create_at(ctx, path, 1));
    /* Read-only cannot upgrade. */
    expect_open_fails(path, UN_RULESDB_READONLY, UN_ERR_DB, "needs upgrading");
    un_rulesdb *db = open_db(ctx, path, spec, 0);
    if (db) {
        EXPECT_EQ(insert_n(ctx, db, 0, 2), 2);
        un_rulesdb_cost c = {.fwd_ms = 1, .measured_at = 1};
        snprintf(c.op_sig, sizeof c.op_sig, "relu");
        EXPECT_OK(ctx, un_rulesdb_cost_put(ctx, db, &c));
    }
    un_rulesdb_free(db);
    db = open_db(ctx, path, spec, UN_RULESDB_READONLY);
    if (db) {
        int64_t counts[UN_RULE_STATUS_COUNT];
        EXPECT_OK(ctx, un_rulesdb_count(ctx, db, counts));
        EXPECT_EQ(counts[UN_RULE_CANDIDATE], 2);
        EXPECT_TRUE(un_rulesdb_rule_insert(ctx, db, NULL, UN_RULE_REJECTED, "x",
                                           &(un_rulesdb_origin){.kind = "imported", .name = "n"},
                                           NULL, NULL) == UN_ERR_DB);
        un_ctx_clear(ctx);
    }
    un_rulesdb_free(db);
    un_ctx_free(ctx);
}

static void test_merge(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *pa = tmp_path("ma.db"), *pb = tmp_path("mb.db");
    rm_db(pa);
    rm_db(pb);
    un_rulesdb *a = open_db(ctx, pa, spec, UN_RULESDB_CREATE),
               *b = open_db(ctx, pb, spec, UN_RULESDB_CREATE);
    if (!a || !b)
        goto done;
    EXPECT_EQ(insert_n(ctx, a, 0, 10), 10);
    EXPECT_EQ(insert_n(ctx, b, 5, 10), 10); /* 5..14: 5 shared */
    /* b verified rule 5 (its id 1) and refuted rule 6 (id 2); a refuted rule 7 (id 8). */
    EXPECT_OK(ctx, un_rulesdb_rule_set_verdict(ctx, b, 1,
                                               &(un_rulesdb_verdict){.status = UN_RULE_VERIFIED}));
    EXPECT_OK(ctx, un_rulesdb_rule_set_verdict(ctx, b, 3,
                                               &(un_rulesdb_verdict){.status = UN_RULE_VERIFIED}));
    EXPECT_OK(ctx, un_rulesdb_rule_set_verdict(ctx, a, 8,
                                               &(un_rulesdb_verdict){.status = UN_RULE_REFUTED}));
    un_rulesdb_merge_stats ms;
    EXPECT_OK(ctx, un_rulesdb_merge_ex(ctx, a, b, &ms));
    EXPECT_EQ(ms.added, 5);
    EXPECT_EQ(ms.duplicates, 5);
    EXPECT_EQ(ms.updated, 1);
    EXPECT_EQ(ms.conflicts, 1);
    int64_t counts[UN_RULE_STATUS_COUNT];
    EXPECT_OK(ctx, un_rulesdb_count(ctx, a, counts));
    EXPECT_EQ(counts[UN_RULE_CANDIDATE], 13);
    EXPECT_EQ(counts[UN_RULE_VERIFIED], 1);
    EXPECT_EQ(counts[UN_RULE_REFUTED], 1);
    /* Merging again changes nothing. */
    int64_t added = -1, updated = -1;
    EXPECT_OK(ctx, un_rulesdb_merge(ctx, a, b, &added, &updated));
    EXPECT_EQ(added, 0);
    EXPECT_EQ(updated, 0);
    EXPECT_EQ(un_rulesdb_merge(ctx, a, a, &added, &updated), UN_ERR_INVALID);
    un_ctx_clear(ctx);
done:
    un_rulesdb_free(a);
    un_rulesdb_free(b);
    un_ctx_free(ctx);
}

static void test_alloc_failure(void) {
    const char *path = tmp_path("af.db");
    rm_db(path);
    int fails = 0, oks = 0;
    for (int n = 1; n < 50; n++) {
        test_failing f = {0, n};
        un_ctx_params p = un_ctx_params_default();
        p.alloc = test_failing_alloc(&f);
        un_ctx *ctx = un_ctx_new(&p);
        un_rulesdb *db = NULL;
        un_status st = un_rulesdb_open(ctx, path, spec, UN_RULESDB_CREATE, &db);
        EXPECT_TRUE(st == UN_OK || st == UN_ERR_NOMEM);
        EXPECT_TRUE((st == UN_OK) == (db != NULL));
        fails += st == UN_ERR_NOMEM;
        oks += st == UN_OK;
        un_rulesdb_free(db);
        un_ctx_free(ctx);
        if (st == UN_OK)
            break;
    }
    printf("    %d injected allocation failures handled, then a clean open\n", fails);
    EXPECT_TRUE(fails > 0);
    EXPECT_EQ(oks, 1);
}

/* Opening (read-write, under another spec set) while a writer holds a batch neither blocks nor
 * sees the open batch. */
static void test_open_during_batch(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *path = tmp_path("ob.db");
    rm_db(path);
    un_rulesdb *a = open_db(ctx, path, spec, UN_RULESDB_CREATE), *b = NULL;
    if (!a)
        goto done;
    EXPECT_EQ(insert_n(ctx, a, 0, 5), 5);
    EXPECT_OK(ctx, un_rulesdb_begin(ctx, a));
    un_rule *r = make_rule(99);
    EXPECT_OK(ctx, un_rulesdb_rule_insert(ctx, a, r, UN_RULE_CANDIDATE, NULL, NULL, NULL, NULL));
    un_rule_free(r);
    b = open_db(ctx, path, spec2, 0);
    int64_t counts[UN_RULE_STATUS_COUNT];
    if (b) {
        EXPECT_OK(ctx, un_rulesdb_count(ctx, b, counts));
        EXPECT_EQ(counts[UN_RULE_CANDIDATE], 5);
    }
    EXPECT_OK(ctx, un_rulesdb_commit(ctx, a));
    if (b) {
        EXPECT_OK(ctx, un_rulesdb_count(ctx, b, counts));
        EXPECT_EQ(counts[UN_RULE_CANDIDATE], 6);
    }
done:
    un_rulesdb_free(b);
    un_rulesdb_free(a);
    un_ctx_free(ctx);
}

/* Reads the database for about ms milliseconds: the count only grows and is always whole batches.
 * Returns the number of violations (-1 if it cannot read). */
static int read_while_writing(const char *path, int batch, int ms, int64_t *last) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *r = NULL;
    int bad = 0;
    *last = 0;
    if (un_rulesdb_open(ctx, path, spec, UN_RULESDB_READONLY, &r) != UN_OK) {
        un_ctx_free(ctx);
        return -1;
    }
    int64_t counts[UN_RULE_STATUS_COUNT];
    for (int k = 0; k < ms; k++) {
        if (un_rulesdb_count(ctx, r, counts) != UN_OK) {
            bad = -1;
            break;
        }
        bad += counts[UN_RULE_CANDIDATE] < *last || counts[UN_RULE_CANDIDATE] % batch != 0;
        *last = counts[UN_RULE_CANDIDATE];
        usleep(1000);
    }
    un_rulesdb_free(r);
    un_ctx_free(ctx);
    return bad;
}

/* A writer killed with SIGKILL mid-batch leaves a database that opens, passes the integrity check
 * and holds whole batches only; several readers (processes) read while it writes. Round 0 kills
 * the writer at a known point inside a batch; the other rounds at a random moment. */
static void test_kill_writer(void) {
    const char *path = tmp_path("k.db");
    rm_db(path);
    enum { BATCH = 25, STOP_BATCH = 4 };
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = open_db(ctx, path, spec, UN_RULESDB_CREATE);
    un_rulesdb_free(db);
    int64_t before = 0;
    for (int round = 0; round < 4; round++) {
        int fd[2];
        if (pipe(fd) != 0)
            break;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            close(fd[0]);
            un_ctx *c = un_ctx_new(NULL);
            un_rulesdb *w = NULL;
            if (un_rulesdb_open(c, path, spec, 0, &w) != UN_OK)
                _exit(2);
            for (int b = 0;; b++) {
                un_rulesdb_begin(c, w);
                for (int i = 0; i < BATCH; i++) {
                    un_rule *r = make_rule(round * 100000 + b * BATCH + i);
                    un_rulesdb_rule_insert(c, w, r, UN_RULE_CANDIDATE, NULL, NULL, NULL, NULL);
                    un_rule_free(r);
                    if (round == 0 && b == STOP_BATCH && i == BATCH / 2) {
                        if (write(fd[1], "x", 1) != 1)
                            _exit(4);
                        for (;;)
                            pause(); /* killed here, inside the batch */
                    }
                }
                if (un_rulesdb_commit(c, w) != UN_OK)
                    _exit(3);
            }
        }
        close(fd[1]);
        pid_t readers[2] = {-1, -1};
        int64_t last = 0;
        if (round == 0) {
            char x;
            EXPECT_EQ(read(fd[0], &x, 1), 1);
            EXPECT_EQ(read_while_writing(path, BATCH, 20, &last), 0);
            EXPECT_EQ(last, before + STOP_BATCH * BATCH); /* the open batch is invisible */
        } else {
            for (int k = 0; k < 2; k++) {
                fflush(stdout);
                readers[k] = fork();
                if (readers[k] == 0) {
                    int64_t l;
                    _exit(read_while_writing(path, BATCH, 150 + 100 * round, &l) == 0 ? 0 : 1);
                }
            }
            EXPECT_EQ(read_while_writing(path, BATCH, 100 + 100 * round, &last), 0);
        }
        close(fd[0]);
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        for (int k = 0; k < 2; k++)
            if (readers[k] > 0) {
                waitpid(readers[k], &status, 0);
                EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            }
        db = open_db(ctx, path, spec, 0);
        if (!db)
            break;
        int64_t bad = -1, counts[UN_RULE_STATUS_COUNT];
        EXPECT_OK(ctx, un_rulesdb_check(ctx, db, &bad, NULL));
        EXPECT_EQ(bad, 0);
        EXPECT_OK(ctx, un_rulesdb_count(ctx, db, counts));
        EXPECT_EQ(counts[UN_RULE_CANDIDATE] % BATCH, 0);
        EXPECT_TRUE(counts[UN_RULE_CANDIDATE] >= last);
        if (round == 0)
            EXPECT_EQ(counts[UN_RULE_CANDIDATE], before + STOP_BATCH * BATCH);
        printf("    round %d: %lld rules after the kill (readers saw %lld)\n", round,
               (long long)counts[UN_RULE_CANDIDATE], (long long)last);
        before = counts[UN_RULE_CANDIDATE];
        un_rulesdb_free(db);
    }
    un_ctx_free(ctx);
}

int main(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    char *text = NULL;
    size_t len = 0;
    if (un_spec_load(ctx, "specs/ops.json", &spec) != UN_OK ||
        un_read_file(ctx, "specs/ops.json", &text, &len) != UN_OK) {
        printf("%s\n0 passed, 1 failed\n", un_ctx_errmsg(ctx));
        un_ctx_free(ctx);
        return 1;
    }
    /* The same ops under another content hash (the text plus a trailing space). */
    char *t2 = un_xmalloc(len + 2);
    memcpy(t2, text, len);
    t2[len] = ' ';
    t2[len + 1] = '\0';
    un_status st = un_spec_parse(ctx, "ops2.json", t2, len + 1, &spec2);
    free(t2);
    if (st == UN_OK && un_spec_hash(spec2) == un_spec_hash(spec))
        st = un_ctx_error(ctx, UN_ERR_SPEC, "spec hash ignores the text");
    free(text);
    if (st != UN_OK) {
        printf("%s\n0 passed, 1 failed\n", un_ctx_errmsg(ctx));
        un_ctx_free(ctx);
        return 1;
    }
    un_ctx_free(ctx);
    if (!test_tmpdir_make(dir, sizeof dir, "/tmp/test_rulesdb.XXXXXX"))
        return 1;
    static const test_case cases[] = {
        {"create_insert_get", test_create_insert_get},
        {"verdicts_and_trust", test_verdicts_and_trust},
        {"filters", test_filters},
        {"rejected_and_costs", test_rejected_and_costs},
        {"general_form", test_general_form},
        {"bad_files", test_bad_files},
        {"corrupt_files", test_corrupt_files},
        {"tampered_row", test_tampered_row},
        {"derived_columns", test_derived_columns},
        {"upgrade_rows", test_upgrade_rows},
        {"claims", test_claims},
        {"upgrade", test_upgrade},
        {"merge", test_merge},
        {"alloc_failure", test_alloc_failure},
        {"open_during_batch", test_open_during_batch},
        {"kill_writer", test_kill_writer},
    };
    int rc = TEST_RUN_ALL(cases);
    if (!test_tmpdir_remove(dir))
        rc = 1;
    un_spec_free(spec);
    un_spec_free(spec2);
    return rc;
}
