/* tests/test_rules_load.c - loading verified rules for use (search/rules.h) in batches over the
 * database walk (rulesdb.h un_rulesdb_walk_*): a body damaged at rule K is one error naming the
 * database and rule K, nothing loaded, whatever the threads and wherever K falls (first row, a
 * later batch, the last row); a compiled cache holding every other rule gives the set and the
 * cache bytes a load without a cache gives; the walk pulled in steps visits what
 * un_rulesdb_verified_each visits. */
#include "tests/cli.h"
#include "tests/rewrite.h"

static un_spec *spec;

static char *file_read(const char *path, size_t *len) {
    un_ctx *ctx = un_ctx_new(NULL);
    char *buf = NULL;
    *len = 0;
    if (un_read_file(ctx, path, &buf, len) != UN_OK)
        buf = NULL;
    un_ctx_free(ctx);
    return buf;
}

static bool sh(const char *fmt, const char *a, const char *b) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, fmt, a, b, b);
    return system(cmd) == 0;
}

/* Ids of the verified rules of path, ascending. */
static int64_t verified_ids(const char *path, int32_t **ids) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    int64_t n = 0;
    *ids = NULL;
    EXPECT_OK(ctx, un_rulesdb_open(ctx, path, spec, UN_RULESDB_READONLY, &db));
    un_rulesdb_filter f = un_rulesdb_filter_default();
    f.status = UN_RULE_VERIFIED;
    if (db)
        EXPECT_OK(ctx, un_rulesdb_rule_ids(ctx, db, &f, ids, &n));
    un_rulesdb_free(db);
    un_ctx_free(ctx);
    return n;
}

/* A copy of the test database whose verified rule ids[k] has a damaged body: the load fails with
 * one line naming the file and that rule, and returns no set, on 1, 2 and 4 threads, with and
 * without a cache of the rules before it; unity-rewrite --load-only says the same on one line. */
static void test_damaged_at_k(void) {
    if (!rw_db_make() || !cli_init("/tmp/unity-rules-load-XXXXXX"))
        return;
    char good[160];
    snprintf(good, sizeof good, "%s/r.db", rw_dir);
    int32_t *ids = NULL;
    int64_t n = verified_ids(good, &ids);
    EXPECT_TRUE(n > 2 * 64); /* three batches at least (LOAD_BATCH) */
    const int64_t at[] = {0, n / 2, n - 1};
    for (int a = 0; a < 3 && n > 0; a++) {
        int32_t id = ids[at[a]];
        char bad[300], cpath[320];
        snprintf(bad, sizeof bad, "%s", cli_path("damaged.db"));
        snprintf(cpath, sizeof cpath, "%s.compiled", bad);
        EXPECT_TRUE(sh("cp %s %s && rm -f %s.compiled", good, bad));
        char sql[160];
        snprintf(sql, sizeof sql,
                 "UPDATE rules SET body = replace(body, '\"src\"', '\"src \"') WHERE id = %d",
                 (int)id);
        un_ctx *ctx = un_ctx_new(NULL);
        EXPECT_OK(ctx, un_rulesdb__test_exec(ctx, bad, sql));
        char want[400];
        snprintf(want, sizeof want, "%s: rule %d: content does not match its hash", bad, (int)id);
        static const int threads[] = {1, 2, 4};
        for (int t = 0; t < 6; t++) {
            un_rulesdb *db = NULL;
            EXPECT_OK(ctx, un_rulesdb_open(ctx, bad, spec, UN_RULESDB_READONLY, &db));
            un_ruleset_params p = un_ruleset_params_default();
            p.threads = threads[t % 3];
            p.cache = t >= 3; /* no cache yet: the failed loads write none */
            un_ruleset *set = (un_ruleset *)1;
            EXPECT_EQ(un_ruleset_load(ctx, db, &p, &set, NULL), UN_ERR_DB);
            EXPECT_TRUE(set == NULL);
            const char *msg = un_ctx_errmsg(ctx);
            bool ok = msg && strstr(msg, want) == msg && !strchr(msg, '\n');
            EXPECT_TRUE(ok);
            if (!ok)
                printf("    rule %d, %d threads: '%s' (wanted '%s...')\n", (int)id, threads[t % 3],
                       msg ? msg : "(none)", want);
            un_ctx_clear(ctx);
            un_rulesdb_free(db);
        }
        struct stat sb;
        EXPECT_TRUE(stat(cpath, &sb) != 0);
        un_ctx_free(ctx);
        char args[512], rule[32];
        snprintf(args, sizeof args, "%s --load-only", bad);
        snprintf(rule, sizeof rule, "rule %d:", (int)id);
        cli_expect_clean_error("unity-rewrite", args, rule);
        snprintf(args, sizeof args, "%s --load-only --threads 1", bad);
        cli_expect_clean_error("unity-rewrite", args, "damaged.db");
    }
    free(ids);
    cli_cleanup();
}

/* A cache that holds every other rule (that of a copy where the others are not verified): the
 * load takes those from it, compiles the rest, and gives the entries, in the order and the cache
 * file, byte for byte, that a load without any cache gives. */
static void test_cache_interleaved(void) {
    if (!rw_db_make() || !cli_init("/tmp/unity-rules-load-XXXXXX"))
        return;
    char good[160];
    snprintf(good, sizeof good, "%s/r.db", rw_dir);
    char half[300], full[300], fresh[300];
    snprintf(half, sizeof half, "%s", cli_path("half.db"));
    snprintf(full, sizeof full, "%s", cli_path("full.db"));
    snprintf(fresh, sizeof fresh, "%s", cli_path("fresh.db"));
    EXPECT_TRUE(sh("cp %s %s && rm -f %s.compiled", good, half));
    EXPECT_TRUE(sh("cp %s %s && rm -f %s.compiled", good, full));
    EXPECT_TRUE(sh("cp %s %s && rm -f %s.compiled", good, fresh));
    un_ctx *ctx = un_ctx_new(NULL);
    EXPECT_OK(ctx, un_rulesdb__test_exec(ctx, half,
                                         "UPDATE rules SET status = 'unknown' WHERE id % 2 = 0"));
    const char *paths[3] = {half, full, fresh};
    un_ruleset *set[3] = {0};
    un_ruleset_stats st[3];
    for (int k = 0; k < 3; k++) {
        if (k == 1)
            EXPECT_TRUE(sh("cp %s.compiled %s.compiled", half, full));
        un_rulesdb *db = NULL;
        EXPECT_OK(ctx, un_rulesdb_open(ctx, paths[k], spec, UN_RULESDB_READONLY, &db));
        un_ruleset_params p = un_ruleset_params_default();
        p.reversed = true;
        p.threads = k == 1 ? 3 : 1;
        if (db)
            EXPECT_OK(ctx, un_ruleset_load(ctx, db, &p, &set[k], &st[k]));
        un_rulesdb_free(db);
    }
    EXPECT_TRUE(st[0].cache_misses > 0 && st[0].cache_written);
    EXPECT_EQ(st[1].cache_hits, st[0].cache_misses);
    EXPECT_EQ(st[1].cache_hits + st[1].cache_misses, st[2].cache_misses);
    EXPECT_TRUE(st[1].cache_written);
    EXPECT_EQ(st[1].verified, st[2].verified);
    EXPECT_EQ(st[1].loaded, st[2].loaded);
    EXPECT_EQ(st[1].not_reversed, st[2].not_reversed);
    EXPECT_EQ(st[1].too_big, st[2].too_big);
    int64_t differ = 0;
    for (int64_t i = 0; set[1] && set[2] && i < un_ruleset_count(set[2]); i++)
        differ += i >= un_ruleset_count(set[1]) ||
                  un_ruleset_rule_id(set[1], i) != un_ruleset_rule_id(set[2], i) ||
                  un_ruleset_rule_reversed(set[1], i) != un_ruleset_rule_reversed(set[2], i);
    EXPECT_EQ(differ, 0);
    char ca[320], cb[320];
    snprintf(ca, sizeof ca, "%s.compiled", full);
    snprintf(cb, sizeof cb, "%s.compiled", fresh);
    size_t la = 0, lb = 0;
    char *a = file_read(ca, &la), *b = file_read(cb, &lb);
    EXPECT_TRUE(a && b && la == lb && la > 0 && memcmp(a, b, la) == 0);
    free(a);
    free(b);
    for (int k = 0; k < 3; k++)
        un_ruleset_free(set[k]);
    un_ctx_free(ctx);
    cli_cleanup();
}

typedef struct seen {
    int32_t ids[4096];
    int64_t n;
    int64_t asked; /* rows skip was asked about */
} seen;

static un_status seen_take(void *user, int32_t id, uint64_t hash, un_rule *r) {
    (void)hash;
    seen *s = user;
    if (s->n < 4096)
        s->ids[s->n++] = id;
    un_rule_free(r);
    return UN_OK;
}

static un_status seen_raw(void *user, int32_t id, uint64_t hash, const char *body, size_t len,
                          uint64_t sum) {
    (void)hash;
    (void)sum;
    seen *s = user;
    EXPECT_TRUE(body[len] == '\0' && len > 0);
    if (s->n < 4096)
        s->ids[s->n++] = id;
    return UN_OK;
}

/* Declines every third id. */
static bool skip_third(void *user, int32_t id, uint64_t hash) {
    (void)hash;
    ((seen *)user)->asked++;
    return id % 3 == 0;
}

static un_status fail_take(void *user, int32_t id, uint64_t hash, const char *body, size_t len,
                           uint64_t sum) {
    (void)user;
    (void)hash;
    (void)body;
    (void)len;
    (void)sum;
    return id > 0 ? UN_ERR_LIMIT : UN_OK;
}

/* The walk pulled 7 rows at a time visits, in order, the rows un_rulesdb_verified_each visits
 * (a declined row counts as visited but reaches no take), counts the stale ones, and is done
 * right after its last row; a walk freed half way can be started again; a take that fails ends
 * the walk with its status. */
static void test_walk_steps(void) {
    if (!rw_db_make() || !cli_init("/tmp/unity-rules-load-XXXXXX"))
        return;
    char good[160], path[300];
    snprintf(good, sizeof good, "%s/r.db", rw_dir);
    snprintf(path, sizeof path, "%s", cli_path("walk.db"));
    EXPECT_TRUE(sh("cp %s %s && rm -f %s.compiled", good, path));
    un_ctx *ctx = un_ctx_new(NULL);
    EXPECT_OK(ctx, un_rulesdb__test_exec(ctx, path,
                                         "UPDATE rules SET verify_spec = 12345 WHERE id % 5 = 1 "
                                         "AND status = 'verified'"));
    un_rulesdb *db = NULL;
    EXPECT_OK(ctx, un_rulesdb_open(ctx, path, spec, UN_RULESDB_READONLY, &db));
    if (!db) {
        un_ctx_free(ctx);
        cli_cleanup();
        return;
    }
    static seen all, steps, first;
    memset(&all, 0, sizeof all);
    memset(&steps, 0, sizeof steps);
    memset(&first, 0, sizeof first);
    int64_t stale = -1;
    EXPECT_OK(ctx, un_rulesdb_verified_each(ctx, db, skip_third, seen_take, &all, &stale));
    EXPECT_TRUE(all.n > 0 && stale > 0 && all.asked > all.n);
    un_rulesdb_walk *w = un_rulesdb_walk_new(db);
    int64_t calls = 0;
    while (!un_rulesdb_walk_done(w) && calls++ < 100000)
        EXPECT_OK(ctx, un_rulesdb_walk_next(ctx, w, 7, skip_third, seen_raw, &steps));
    EXPECT_EQ(un_rulesdb_walk_stale(w), stale);
    un_rulesdb_walk_free(w);
    EXPECT_EQ(steps.n, all.n);
    EXPECT_EQ(steps.asked, all.asked);
    EXPECT_TRUE(memcmp(steps.ids, all.ids, (size_t)all.n * sizeof all.ids[0]) == 0);
    EXPECT_EQ(calls, all.asked / 7 + 1);
    /* started again after one freed half way: the same first rows */
    for (int k = 0; k < 2; k++) {
        seen *s = k ? &steps : &first;
        s->n = 0;
        w = un_rulesdb_walk_new(db);
        EXPECT_OK(ctx, un_rulesdb_walk_next(ctx, w, 3, NULL, seen_raw, s));
        EXPECT_EQ(s->n, 3);
        EXPECT_TRUE(!un_rulesdb_walk_done(w));
        un_rulesdb_walk_free(w);
    }
    EXPECT_TRUE(memcmp(steps.ids, first.ids, 3 * sizeof first.ids[0]) == 0);
    /* a failing take */
    w = un_rulesdb_walk_new(db);
    EXPECT_EQ(un_rulesdb_walk_next(ctx, w, 100, NULL, fail_take, NULL), UN_ERR_LIMIT);
    EXPECT_TRUE(un_rulesdb_walk_done(w));
    un_rulesdb_walk_free(w);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
    cli_cleanup();
}

int main(void) {
    if (!test_spec_load(&spec))
        return 1;
    static const test_case cases[] = {
        {"damaged_at_k", test_damaged_at_k},
        {"cache_interleaved", test_cache_interleaved},
        {"walk_steps", test_walk_steps},
    };
    int rc = TEST_RUN_ALL(cases);
    rw_db_remove();
    un_spec_free(spec);
    return rc;
}
