/* tests/test_un.c - the basics: status strings, first-error-wins context, arena, RNG, hash map,
 * JSON facade. */
#include "pcg/json.h"
#include "tests/test.h"

static void test_ctx(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    EXPECT_STR_EQ(un_ctx_errmsg(ctx), "");
    EXPECT_EQ(un_ctx_error(ctx, UN_ERR_PARSE, "first %d", 1), UN_ERR_PARSE);
    un_ctx_error(ctx, UN_ERR_IO, "second");
    EXPECT_STR_EQ(un_ctx_errmsg(ctx), "first 1");
    EXPECT_EQ(un_ctx_status(ctx), UN_ERR_PARSE);
    un_ctx_clear(ctx);
    EXPECT_EQ(un_ctx_status(ctx), UN_OK);
    for (int s = 0; s < UN_STATUS_COUNT; s++)
        EXPECT_TRUE(un_status_str((un_status)s)[0] != '\0');
    EXPECT_STR_EQ(un_status_str((un_status)99), "unknown status");
    un_ctx_free(ctx);
    un_ctx_free(NULL);
}

/* un_median: the middle value (the upper of two), whatever the order; 0 of nothing. */
static void test_median(void) {
    double odd[] = {3, 1, 2}, even[] = {4, 1, 3, 2}, one[] = {-5};
    EXPECT_NEAR(un_median(odd, 3), 2, 0);
    EXPECT_NEAR(un_median(even, 4), 3, 0);
    EXPECT_NEAR(un_median(one, 1), -5, 0);
    EXPECT_NEAR(un_median(NULL, 0), 0, 0);
}

static void test_arena(void) {
    un_arena *a = un_arena_new(64);
    for (int i = 0; i < 1000; i++) {
        char *p = un_arena_alloc(a, (size_t)(i % 37) + 1, 8);
        EXPECT_TRUE(((uintptr_t)p & 7) == 0);
        p[0] = 1;
    }
    char *big = un_arena_alloc(a, 100000, 16);
    big[99999] = 2;
    EXPECT_STR_EQ(un_arena_strdup(a, "hello"), "hello");
    un_arena_reset(a);
    EXPECT_EQ(un_arena_used(a), 0);
    un_arena_free(a);
    un_arena_free(NULL);
}

static void test_rng(void) {
    un_rng a, b;
    un_rng_seed(&a, 42);
    un_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++)
        EXPECT_EQ(un_rng_next(&a), un_rng_next(&b));
    int hist[6] = {0};
    for (int i = 0; i < 6000; i++)
        hist[un_rng_below(&a, 6)]++;
    for (int i = 0; i < 6; i++)
        EXPECT_TRUE(hist[i] > 800 && hist[i] < 1200);
    double d = un_rng_double(&a);
    EXPECT_TRUE(d >= 0 && d < 1);
}

/* un_hmap against a plain array: 20,000 adds, puts and lookups of keys from a small range (so
 * that most repeat; 0 among them) and of large ones; a set keeps no value array. */
static void test_hmap(void) {
    enum { RANGE = 3000 };
    static double ref[RANGE];
    static bool in[RANGE];
    un_hmap m = {0}, set = {0};
    un_rng r;
    un_rng_seed(&r, 7);
    int64_t n = 0;
    for (int i = 0; i < 20000; i++) {
        uint64_t k = un_rng_below(&r, RANGE);
        double v = (double)un_rng_below(&r, 100) - 50;
        int what = (int)un_rng_below(&r, 3);
        if (what == 0) {
            EXPECT_EQ(un_hmap_add(&m, k, v), !in[k]);
            if (!in[k])
                ref[k] = v;
        } else if (what == 1) {
            un_hmap_put(&m, k, v);
            ref[k] = v;
        }
        n += what < 2 && !in[k];
        in[k] |= what < 2;
        double got = 1e9;
        EXPECT_EQ(un_hmap_get(&m, k, &got), in[k]);
        if (in[k])
            EXPECT_NEAR(got, ref[k], 0);
        if (what < 2)
            un_hmap_add(&set, k * 0x9e3779b97f4a7c15ull, 0);
    }
    EXPECT_EQ(m.n, n);
    for (uint64_t k = 0; k < RANGE; k++) {
        double got = 1e9;
        EXPECT_EQ(un_hmap_get(&m, k, &got), in[k]);
        EXPECT_TRUE(!in[k] || got == ref[k]);
        EXPECT_EQ(un_hmap_get(&set, k * 0x9e3779b97f4a7c15ull, NULL), in[k]);
    }
    EXPECT_TRUE(set.val == NULL);
    uint64_t *keys = un_xmalloc(sizeof *keys * (size_t)(m.n + 1));
    int64_t nk = un_hmap_keys(&m, keys), sum = 0;
    EXPECT_EQ(nk, n);
    for (int64_t i = 0; i < nk; i++) {
        EXPECT_TRUE(keys[i] < RANGE && in[keys[i]]);
        sum += (int64_t)keys[i];
    }
    int64_t want = 0;
    for (uint64_t k = 0; k < RANGE; k++)
        want += in[k] ? (int64_t)k : 0;
    EXPECT_EQ(sum, want);
    EXPECT_TRUE(in[0] && m.has_zero);
    EXPECT_TRUE(!un_hmap_get(&m, 1ull << 40, NULL));
    free(keys);
    un_hmap_deinit(&m);
    un_hmap_deinit(&set);
    EXPECT_TRUE(!un_hmap_get(&m, 5, NULL));
}

static void test_json(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_jdoc *doc = NULL;
    const char *text = "{\"a\": {\"b\": [1, 2.5, \"x\"]}, \"n\": 3}";
    EXPECT_OK(ctx, un_jdoc_parse(ctx, "t.json", text, strlen(text), &doc));
    un_jcur root = un_jdoc_root(doc);
    un_jcur a = un_jcur_member(&root, "a");
    un_jcur b = un_jcur_member(&a, "b");
    EXPECT_EQ(un_jcur_len(&b), 3);
    un_jcur b1 = un_jcur_item(&b, 1);
    int64_t v;
    EXPECT_TRUE(!un_jcur_is_int(&b1, &v));
    char path[64];
    un_jcur_path(&b1, path, sizeof path);
    EXPECT_STR_EQ(path, "$.a.b[1]");
    int64_t n = 0;
    EXPECT_OK(ctx, un_jcur_get_int(ctx, &root, "n", true, &n));
    EXPECT_EQ(n, 3);
    EXPECT_EQ(un_jcur_get_int(ctx, &a, "missing", true, &n), UN_ERR_PARSE);
    EXPECT_STR_EQ(un_ctx_errmsg(ctx), "t.json: $.a.missing: missing (expected an integer)");
    un_ctx_clear(ctx);
    const char *const keys[] = {"b", NULL};
    EXPECT_OK(ctx, un_jcur_check_keys(ctx, &a, keys));
    EXPECT_EQ(un_jcur_check_keys(ctx, &root, keys), UN_ERR_PARSE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "$.a: unknown field") != NULL);
    un_ctx_clear(ctx);
    un_jdoc_free(doc);
    /* duplicate keys, syntax errors with offsets, trailing text */
    const char *dup = "{\"b\": 1, \"b\": 2}";
    EXPECT_OK(ctx, un_jdoc_parse(ctx, "d.json", dup, strlen(dup), &doc));
    root = un_jdoc_root(doc);
    EXPECT_EQ(un_jcur_check_keys(ctx, &root, keys), UN_ERR_PARSE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "duplicate field") != NULL);
    un_ctx_clear(ctx);
    un_jdoc_free(doc);
    const char *bad = "{\"a\": [1, 2,, 3]}";
    EXPECT_EQ(un_jdoc_parse(ctx, "bad.json", bad, strlen(bad), &doc), UN_ERR_PARSE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "bad.json: offset 12 (line 1, column 13)") != NULL);
    un_ctx_clear(ctx);
    EXPECT_EQ(un_jdoc_parse(ctx, "tr.json", "{} x", 4, &doc), UN_ERR_PARSE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "trailing text") != NULL);
    un_ctx_clear(ctx);
    EXPECT_EQ(un_jdoc_load(ctx, "/nonexistent/file.json", &doc), UN_ERR_IO);
    EXPECT_TRUE(doc == NULL);
    /* string escaping */
    un_buf s = {0};
    un_buf_json_str(&s, "a\"b\\c\n");
    EXPECT_STR_EQ(s.data, "\"a\\\"b\\\\c\\n\"");
    un_buf_deinit(&s);
    un_ctx_free(ctx);
}

typedef struct counting {
    int mallocs, lines, dones;
    char last[128];
} counting;

static void *count_malloc(size_t n, void *user) {
    ((counting *)user)->mallocs++;
    return malloc(n);
}
static void *count_realloc(void *p, size_t n, void *user) {
    (void)user;
    return realloc(p, n);
}
static void count_free(void *p, void *user) {
    (void)user;
    free(p);
}
static void count_progress(void *user, const char *line) {
    counting *c = user;
    if (line) {
        c->lines++;
        snprintf(c->last, sizeof c->last, "%s", line);
    } else {
        c->dones++;
    }
}

/* A worker's context keeps its parent's allocator, seed, log level and progress callback, and has
 * an error state of its own. */
static void test_ctx_child(void) {
    counting c = {0};
    un_ctx_params p = un_ctx_params_default();
    p.alloc = (un_alloc){
        .malloc = count_malloc, .realloc = count_realloc, .free = count_free, .user = &c};
    p.seed = 77;
    p.log_level = 2;
    un_ctx *parent = un_ctx_new(&p);
    EXPECT_TRUE(!un_ctx_has_progress(parent));
    un_ctx_progress(parent, "ignored %d", 1); /* no callback: nothing happens */
    un_ctx_set_progress(parent, count_progress, &c);
    un_ctx *child = un_ctx_new_child(parent);
    EXPECT_EQ(un_ctx_seed(child), 77);
    EXPECT_EQ(un_ctx_log_level(child), 2);
    EXPECT_TRUE(un_ctx_has_progress(child));
    void *mem = un_ctx_malloc(child, 16);
    EXPECT_EQ(c.mallocs, 1);
    un_ctx_free_mem(child, mem);
    un_ctx_progress(child, "step %d of %s", 3, "ten");
    EXPECT_EQ(c.lines, 1);
    EXPECT_STR_EQ(c.last, "step 3 of ten");
    un_ctx_progress_done(child);
    EXPECT_EQ(c.dones, 1);
    un_ctx_error(child, UN_ERR_INVALID, "only the child");
    EXPECT_EQ(un_ctx_status(parent), UN_OK);
    EXPECT_STR_EQ(un_ctx_errmsg(parent), "");
    un_ctx_free(child);
    un_ctx *orphan = un_ctx_new_child(NULL);
    EXPECT_EQ(un_ctx_seed(orphan), un_ctx_params_default().seed);
    EXPECT_TRUE(!un_ctx_has_progress(orphan));
    un_ctx_free(orphan);
    un_ctx_free(parent);
}

int main(void) {
    static const test_case cases[] = {{"ctx", test_ctx},     {"ctx_child", test_ctx_child},
                                      {"arena", test_arena}, {"median", test_median},
                                      {"rng", test_rng},     {"hmap", test_hmap},
                                      {"json", test_json}};
    return TEST_RUN_ALL(cases);
}
