/* tests/test_match.c - the matcher (search/match.h): on random graphs its matches equal an
 * exhaustive search over every node map (un_match_check), for every verified N=2 rule forwards
 * and backwards; hand-built cases for shared inputs, interior tensors used outside, cycles and
 * layouts; and the loader's bad inputs through unity-rewrite. */
#include "tests/cli.h"
#include "tests/rewrite.h"

static un_spec *spec;

/* Sorted, comparable key of a match: rule entry then node map. */
static int match_cmp(const void *pa, const void *pb) {
    const un_match *a = pa, *b = pb;
    if (a->rule != b->rule)
        return a->rule < b->rule ? -1 : 1;
    for (int v = 0; v < a->n_nodes; v++)
        if (a->node[v] != b->node[v])
            return a->node[v] < b->node[v] ? -1 : 1;
    return 0;
}

/* Every map of the pattern's operator nodes to graph nodes of the same operator, checked. */
static void brute_force(un_matcher *m, const un_ruleset *set, int64_t rule, const un_graph *g,
                        un_match_list *out) {
    const un_rule *r = un_ruleset_rule(set, rule);
    int32_t pn = un_graph_node_count(r->src), n = un_graph_node_count(g);
    int32_t ops[UN_MATCH_MAX_NODES], n_ops = 0, map[UN_MATCH_MAX_NODES], cand[UN_MATCH_MAX_NODES];
    for (int32_t v = 0; v < pn; v++) {
        map[v] = -1;
        if (un_op_kind_of(un_graph_node(r->src, v)->op) != UN_OPK_SOURCE)
            ops[n_ops++] = v;
    }
    for (int i = 0; i < n_ops; i++)
        cand[i] = 0;
    for (;;) {
        for (int i = 0; i < n_ops; i++)
            map[ops[i]] = cand[i];
        un_match mt;
        if (un_match_check(m, rule, map, &mt)) {
            if (out->n == out->cap) {
                out->cap = out->cap ? out->cap * 2 : 16;
                out->v = realloc(out->v, (size_t)out->cap * sizeof *out->v);
            }
            out->v[out->n++] = mt;
        }
        int i = 0;
        while (i < n_ops && ++cand[i] == n)
            cand[i++] = 0;
        if (i == n_ops)
            break;
    }
}

static void test_brute_force(void) {
    un_ruleset *set = rw_ruleset(spec, true);
    if (!set)
        return;
    un_ctx *ctx = un_ctx_new(NULL);
    un_rng rng;
    un_rng_seed(&rng, 1234);
    int64_t total = 0, graphs = 0, differ = 0, rules_hit = 0;
    bool *hit = calloc((size_t)un_ruleset_count(set) + 1, 1);
    for (int gi = 0; gi < 80; gi++) {
        un_graph *g = rw_random_graph(spec, &rng, 5 + gi % 6);
        un_matcher *m = NULL;
        EXPECT_OK(ctx, un_matcher_new(ctx, set, g, &m));
        un_match_list all = {0}, at = {0};
        EXPECT_OK(ctx, un_match_all(ctx, m, &all));
        for (int32_t v = 0; v < un_graph_node_count(g); v++)
            EXPECT_OK(ctx, un_match_at(ctx, m, v, &at));
        EXPECT_EQ(at.n, all.n);
        for (int64_t rule = 0; rule < un_ruleset_count(set); rule++) {
            un_match_list fast = {0}, slow = {0};
            EXPECT_OK(ctx, un_match_rule(ctx, m, rule, &fast));
            brute_force(m, set, rule, g, &slow);
            if (fast.n)
                qsort(fast.v, (size_t)fast.n, sizeof *fast.v, match_cmp);
            if (slow.n)
                qsort(slow.v, (size_t)slow.n, sizeof *slow.v, match_cmp);
            bool same = fast.n == slow.n;
            for (int64_t i = 0; same && i < fast.n; i++)
                same = match_cmp(&fast.v[i], &slow.v[i]) == 0 &&
                       memcmp(fast.v[i].values, slow.v[i].values, sizeof fast.v[i].values) == 0;
            if (!same && differ++ < 5)
                printf("    graph %d rule entry %lld: matcher %lld, brute force %lld\n", gi,
                       (long long)rule, (long long)fast.n, (long long)slow.n);
            total += slow.n;
            if (slow.n && !hit[rule]) {
                hit[rule] = true;
                rules_hit++;
            }
            un_match_list_deinit(&fast);
            un_match_list_deinit(&slow);
        }
        un_match_list_deinit(&all);
        un_match_list_deinit(&at);
        un_matcher_free(m);
        un_graph_free(g);
        graphs++;
    }
    EXPECT_EQ(differ, 0);
    printf("    %lld graphs x %lld rule entries: %lld matches (of %lld distinct entries), equal\n",
           (long long)graphs, (long long)un_ruleset_count(set), (long long)total,
           (long long)rules_hit);
    EXPECT_TRUE(total > 50);
    EXPECT_TRUE(rules_hit > 10);
    free(hit);
    un_ctx_free(ctx);
    un_ruleset_free(set);
}

/* The compact form and the compiled cache: every entry's rule decodes to the stored rule (same
 * canonical JSON); a second load comes from DB.compiled and matches the same; a cache damaged
 * from some record on, or foreign, is used up to there (not at all) and rewritten. */
static void test_compact_and_cache(void) {
    if (!rw_db_make())
        return;
    un_ctx *ctx = un_ctx_new(NULL);
    char path[160], cpath[180];
    snprintf(path, sizeof path, "%s/r.db", rw_dir);
    snprintf(cpath, sizeof cpath, "%s/r.db.compiled", rw_dir);
    remove(cpath);
    un_rulesdb *db = NULL;
    un_rule **rules = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    EXPECT_OK(ctx, un_rulesdb_open(ctx, path, spec, UN_RULESDB_READONLY, &db));
    EXPECT_OK(ctx, un_rulesdb_load_verified_ids(ctx, db, &rules, &ids, &n, NULL));
    un_ruleset_params p = un_ruleset_params_default();
    p.reversed = true;
    un_ruleset *set[4] = {0};
    un_ruleset_stats st[4];
    for (int k = 0; k < 4; k++) {
        if (k == 2) { /* damage one byte in the middle of the cache */
            FILE *f = fopen(cpath, "r+b");
            EXPECT_TRUE(f != NULL);
            if (f) {
                fseek(f, 0, SEEK_END);
                long len = ftell(f);
                fseek(f, len / 2, SEEK_SET);
                int c = fgetc(f);
                fseek(f, len / 2, SEEK_SET);
                fputc(c ^ 0x5a, f);
                fclose(f);
            }
        }
        if (k == 3) { /* a cache that is not one */
            FILE *f = fopen(cpath, "w");
            if (f) {
                fputs("garbage", f);
                fclose(f);
            }
        }
        EXPECT_OK(ctx, un_ruleset_load(ctx, db, &p, &set[k], &st[k]));
    }
    EXPECT_EQ(st[0].cache_hits, 0);
    EXPECT_EQ(st[0].cache_misses, n);
    EXPECT_TRUE(st[0].cache_written);
    EXPECT_EQ(st[1].cache_hits, n);
    EXPECT_EQ(st[1].cache_misses, 0);
    /* records before the damage are used, the rest compiled again and the cache rewritten */
    EXPECT_TRUE(st[2].cache_hits < n && st[2].cache_misses > 0 && st[2].cache_written);
    EXPECT_EQ(st[3].cache_hits, 0);
    for (int k = 1; k < 4; k++)
        EXPECT_EQ(st[k].loaded, st[0].loaded);
    EXPECT_TRUE(st[0].bytes < (size_t)st[0].loaded * 4096);
    /* forward entries decode to the stored rules */
    int64_t fw = 0, same = 0;
    for (int64_t i = 0; set[1] && i < un_ruleset_count(set[1]); i++) {
        if (un_ruleset_rule_reversed(set[1], i))
            continue;
        int32_t id = un_ruleset_rule_id(set[1], i);
        for (int64_t j = 0; j < n; j++) {
            if (ids[j] != id)
                continue;
            un_buf a = {0}, b = {0};
            EXPECT_OK(ctx, un_rule_to_json(ctx, rules[j], &a));
            EXPECT_OK(ctx, un_rule_to_json(ctx, un_ruleset_rule(set[1], i), &b));
            same += a.data && b.data && strcmp(a.data, b.data) == 0;
            un_buf_deinit(&a);
            un_buf_deinit(&b);
        }
        fw++;
    }
    EXPECT_EQ(fw, n);
    EXPECT_EQ(same, n);
    /* the same matches from a compiled and a cached set */
    un_rng rng;
    un_rng_seed(&rng, 77);
    for (int gi = 0; gi < 10; gi++) {
        un_graph *g = rw_random_graph(spec, &rng, 9);
        un_match_list l[2] = {{0}, {0}};
        for (int k = 0; k < 2; k++) {
            un_matcher *m = NULL;
            EXPECT_OK(ctx, un_matcher_new(ctx, set[k], g, &m));
            EXPECT_OK(ctx, un_match_all(ctx, m, &l[k]));
            un_matcher_free(m);
        }
        EXPECT_EQ(l[0].n, l[1].n);
        for (int64_t i = 0; i < l[0].n && i < l[1].n; i++)
            EXPECT_EQ(memcmp(&l[0].v[i], &l[1].v[i], sizeof l[0].v[i]), 0);
        un_match_list_deinit(&l[0]);
        un_match_list_deinit(&l[1]);
        un_graph_free(g);
    }
    for (int k = 0; k < 4; k++)
        un_ruleset_free(set[k]);
    for (int64_t j = 0; j < n; j++)
        un_rule_free(rules[j]);
    free(rules);
    free(ids);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
}

/* A one-rule set from src => dst (single output each, both built over the same input names). */
static un_ruleset *one_rule(un_ctx *ctx, un_graph *src, un_ref so, un_graph *dst, un_ref to,
                            int n_out, const un_ref *so2, const un_ref *to2) {
    un_ref s[2] = {so, so2 ? *so2 : so}, t[2] = {to, to2 ? *to2 : to};
    un_rule *r = NULL;
    un_ruleset *set = NULL;
    EXPECT_OK(ctx, un_rule_make(ctx, src, dst, s, t, n_out, &r));
    if (r)
        EXPECT_OK(ctx, un_ruleset_from_rules(ctx, spec, &r, NULL, 1, NULL, &set));
    un_rule_free(r);
    un_graph_free(src);
    un_graph_free(dst);
    return set;
}

static int64_t count_matches(un_ctx *ctx, const un_ruleset *set, const un_graph *g,
                             un_match_stats *stats) {
    un_matcher *m = NULL;
    un_match_list l = {0};
    EXPECT_OK(ctx, un_matcher_new(ctx, set, g, &m));
    EXPECT_OK(ctx, un_match_all(ctx, m, &l));
    int64_t n = l.n;
    if (stats)
        *stats = un_matcher_stats(m);
    un_match_list_deinit(&l);
    un_matcher_free(m);
    return n;
}

static un_graph *in2(void) {
    un_graph *g = un_graph_new(spec);
    un_graph_add_input(NULL, g, "x0", UN_OP_INPUT, 2, (int64_t[]){4, 4}, NULL);
    un_graph_add_input(NULL, g, "x1", UN_OP_INPUT, 2, (int64_t[]){4, 4}, NULL);
    return g;
}

/* ew_add(x0, x0): a pattern input used twice binds one tensor. */
static void test_shared_input(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *s = un_graph_new(spec), *d = un_graph_new(spec);
    int32_t x, a, b;
    un_graph_add_input(ctx, s, "x0", UN_OP_INPUT, 2, (int64_t[]){4, 4}, &x);
    un_graph_add(ctx, s, UN_OP_EW_ADD, NULL, (un_ref[]){{x, 0}, {x, 0}}, 2, NULL, &a);
    un_graph_add_input(ctx, d, "x0", UN_OP_INPUT, 2, (int64_t[]){4, 4}, &x);
    un_graph_add(ctx, d, UN_OP_EW_ADD, NULL, (un_ref[]){{x, 0}, {x, 0}}, 2, NULL, &b);
    un_ruleset *set = one_rule(ctx, s, (un_ref){a, 0}, d, (un_ref){b, 0}, 1, NULL, NULL);
    un_graph *g = in2();
    un_graph_add(ctx, g, UN_OP_EW_ADD, NULL, (un_ref[]){{0, 0}, {0, 0}}, 2, "same", &a);
    un_graph_add(ctx, g, UN_OP_EW_ADD, NULL, (un_ref[]){{0, 0}, {1, 0}}, 2, "two", &b);
    un_graph_add(ctx, g, UN_OP_EW_ADD, NULL, (un_ref[]){{a, 0}, {b, 0}}, 2, "top", NULL);
    EXPECT_EQ(count_matches(ctx, set, g, NULL), 1);
    un_graph_free(g);
    /* another size: proven for this size only (any_shape false), so [8,4] does not match */
    g = un_graph_new(spec);
    un_graph_add_input(ctx, g, "y", UN_OP_INPUT, 2, (int64_t[]){8, 4}, &x);
    un_graph_add(ctx, g, UN_OP_EW_ADD, NULL, (un_ref[]){{x, 0}, {x, 0}}, 2, NULL, NULL);
    EXPECT_EQ(count_matches(ctx, set, g, NULL), 0);
    un_graph_free(g);
    un_ruleset_free(set);
    un_ctx_free(ctx);
}

/* relu(relu(x0)) with the inner relu also read outside: no match; and a layout mismatch. */
static void test_interior_and_layout(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *s = un_graph_new(spec), *d = un_graph_new(spec);
    int32_t x, a, b;
    un_graph_add_input(ctx, s, "x0", UN_OP_INPUT, 2, (int64_t[]){4, 4}, &x);
    un_graph_add(ctx, s, UN_OP_RELU, NULL, (un_ref[]){{x, 0}}, 1, NULL, &a);
    un_graph_add(ctx, s, UN_OP_RELU, NULL, (un_ref[]){{a, 0}}, 1, NULL, &a);
    un_graph_add_input(ctx, d, "x0", UN_OP_INPUT, 2, (int64_t[]){4, 4}, &x);
    un_graph_add(ctx, d, UN_OP_RELU, NULL, (un_ref[]){{x, 0}}, 1, NULL, &b);
    un_ruleset *set = one_rule(ctx, s, (un_ref){a, 0}, d, (un_ref){b, 0}, 1, NULL, NULL);
    un_graph *g = in2();
    int32_t r1, r2;
    un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{0, 0}}, 1, "r1", &r1);
    un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{r1, 0}}, 1, "r2", &r2);
    EXPECT_EQ(count_matches(ctx, set, g, NULL), 1);
    un_graph_add(ctx, g, UN_OP_EW_ADD, NULL, (un_ref[]){{r1, 0}, {r2, 0}}, 2, "uses_r1", NULL);
    un_match_stats st;
    EXPECT_EQ(count_matches(ctx, set, g, &st), 0);
    EXPECT_EQ(st.outside_use, 1);
    un_graph_free(g);
    /* the same chain over a sharded input: the pattern wants a whole one */
    g = un_graph_new(spec);
    un_graph_add_input(ctx, g, "x", UN_OP_INPUT, 2, (int64_t[]){4, 4}, &x);
    un_graph_add_parallel(ctx, g, UN_OP_PARTITION, (un_ref){x, 0}, 0, 2, NULL, &a);
    un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{a, 0}}, 1, NULL, &a);
    un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{a, 0}}, 1, NULL, &a);
    EXPECT_EQ(count_matches(ctx, set, g, NULL), 0);
    un_graph_free(g);
    un_ruleset_free(set);
    un_ctx_free(ctx);
}

/* Pattern a = relu(x0), b = ew_add(a, x1), both mapped. On a graph where x1 binds
 * c = ew_mul(A, A), computed from the match's own A, the rewrite would make a cycle. */
static void test_cycle(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *s = in2(), *d = in2();
    int32_t a, b, ta, tb;
    un_graph_add(ctx, s, UN_OP_RELU, NULL, (un_ref[]){{0, 0}}, 1, NULL, &a);
    un_graph_add(ctx, s, UN_OP_EW_ADD, NULL, (un_ref[]){{a, 0}, {1, 0}}, 2, NULL, &b);
    un_graph_add(ctx, d, UN_OP_RELU, NULL, (un_ref[]){{0, 0}}, 1, NULL, &ta);
    un_graph_add(ctx, d, UN_OP_EW_ADD, NULL, (un_ref[]){{1, 0}, {ta, 0}}, 2, NULL, &tb);
    un_ref so2 = {b, 0}, to2 = {tb, 0};
    un_ruleset *set = one_rule(ctx, s, (un_ref){a, 0}, d, (un_ref){ta, 0}, 2, &so2, &to2);
    un_graph *g = in2();
    int32_t A, C;
    un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{0, 0}}, 1, "A", &A);
    un_graph_add(ctx, g, UN_OP_EW_ADD, NULL, (un_ref[]){{A, 0}, {1, 0}}, 2, "B", NULL);
    EXPECT_EQ(count_matches(ctx, set, g, NULL), 1);
    un_graph_add(ctx, g, UN_OP_EW_MUL, NULL, (un_ref[]){{A, 0}, {A, 0}}, 2, "C", &C);
    un_graph_add(ctx, g, UN_OP_EW_ADD, NULL, (un_ref[]){{A, 0}, {C, 0}}, 2, "D", NULL);
    un_match_stats st;
    EXPECT_EQ(count_matches(ctx, set, g, &st), 1); /* A,B still; A,D is cyclic */
    EXPECT_EQ(st.cyclic, 1);
    un_graph_free(g);
    un_ruleset_free(set);
    un_ctx_free(ctx);
}

/* Bad input through unity-rewrite: one error line each, nothing written. */
/* Reads a whole file into *out (owned); its length, or -1. */
static long slurp(const char *path, char **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)len + 1);
    if (fread(*out, 1, (size_t)len, f) != (size_t)len)
        len = -1;
    fclose(f);
    return len;
}

/* Compiling on threads gives what one thread gives: the same entries in the same order, the same
 * cache file byte for byte; and on a database with damaged rows, the same first error. */
static void test_threads_same(void) {
    if (!rw_db_make())
        return;
    un_ctx *ctx = un_ctx_new(NULL);
    char path[160], cpath[180], bpath[180];
    snprintf(path, sizeof path, "%s/r.db", rw_dir);
    snprintf(cpath, sizeof cpath, "%s/r.db.compiled", rw_dir);
    snprintf(bpath, sizeof bpath, "%s/threads-broken.db", rw_dir);
    un_rulesdb *db = NULL;
    EXPECT_OK(ctx, un_rulesdb_open(ctx, path, spec, UN_RULESDB_READONLY, &db));
    static const int threads[] = {1, 2, 4, 7};
    char *cache[4] = {0};
    long clen[4];
    un_ruleset *set[4] = {0};
    for (int k = 0; k < 4 && db; k++) {
        un_ruleset_params p = un_ruleset_params_default();
        p.reversed = true;
        p.threads = threads[k];
        remove(cpath);
        un_ruleset_stats st;
        EXPECT_OK(ctx, un_ruleset_load(ctx, db, &p, &set[k], &st));
        EXPECT_TRUE(st.cache_misses > 128); /* more than one batch (LOAD_BATCH) */
        EXPECT_TRUE(st.cache_written);
        clen[k] = slurp(cpath, &cache[k]);
        EXPECT_TRUE(clen[k] > 0);
    }
    for (int k = 1; k < 4 && set[0] && set[k]; k++) {
        EXPECT_TRUE(clen[k] == clen[0] && memcmp(cache[k], cache[0], (size_t)clen[0]) == 0);
        EXPECT_EQ(un_ruleset_count(set[k]), un_ruleset_count(set[0]));
        int64_t differ = 0;
        for (int64_t i = 0; i < un_ruleset_count(set[0]) && i < un_ruleset_count(set[k]); i++)
            differ += un_ruleset_rule_id(set[k], i) != un_ruleset_rule_id(set[0], i) ||
                      un_ruleset_rule_reversed(set[k], i) != un_ruleset_rule_reversed(set[0], i);
        EXPECT_EQ(differ, 0);
    }
    for (int k = 0; k < 4; k++) {
        free(cache[k]);
        un_ruleset_free(set[k]);
    }
    un_rulesdb_free(db);
    /* rows from some id on damaged: the first one's error, whatever the threads */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp %s %s && rm -f %s.compiled", path, bpath, bpath);
    EXPECT_EQ(system(cmd), 0);
    EXPECT_OK(ctx, un_rulesdb__test_exec(ctx, bpath,
                                         "UPDATE rules SET body = replace(body, 'relu', 'frob') "
                                         "WHERE id > (SELECT max(id) / 2 FROM rules)"));
    char msg[2][512] = {{0}};
    for (int k = 0; k < 2; k++) {
        un_ctx *c = un_ctx_new(NULL);
        un_rulesdb *b = NULL;
        EXPECT_OK(c, un_rulesdb_open(c, bpath, spec, UN_RULESDB_READONLY, &b));
        un_ruleset_params p = un_ruleset_params_default();
        p.threads = k ? 4 : 1;
        un_ruleset *s = NULL;
        EXPECT_EQ(un_ruleset_load(c, b, &p, &s, NULL), UN_ERR_DB);
        EXPECT_TRUE(s == NULL);
        snprintf(msg[k], sizeof msg[k], "%s", un_ctx_errmsg(c));
        un_rulesdb_free(b);
        un_ctx_free(c);
    }
    EXPECT_TRUE(strstr(msg[0], "does not match") != NULL);
    EXPECT_STR_EQ(msg[0], msg[1]);
    un_ctx_free(ctx);
}

static void test_bad_input(void) {
    if (!rw_db_make() || !cli_init("/tmp/unity-rewrite-cli-XXXXXX"))
        return;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp %s/r.db %s/stale.db && cp %s/r.db %s/broken.db", rw_dir, cli_tmp,
             rw_dir, cli_tmp);
    EXPECT_EQ(system(cmd), 0);
    FILE *f = fopen(cli_path("junk.db"), "w");
    if (f) {
        fputs("this is not a database\n", f);
        fclose(f);
    }
    f = fopen(cli_path("bad.json"), "w");
    if (f) {
        fputs("{\"nodes\": [{\"name\": \"x\", \"op\": \"relu\", \"in\": [\"nope\"]}]}\n", f);
        fclose(f);
    }
    un_ctx *ctx = un_ctx_new(NULL);
    EXPECT_OK(ctx, un_rulesdb__test_exec(ctx, cli_path("stale.db"),
                                         "UPDATE rules SET verify_spec = 12345"));
    EXPECT_OK(ctx, un_rulesdb__test_exec(ctx, cli_path("broken.db"),
                                         "UPDATE rules SET body = replace(body, 'relu', 'frob')"));
    un_ctx_free(ctx);
    char good[300];
    snprintf(good, sizeof good, "%s/r.db", rw_dir);
    cli_expect_clean_error("unity-rewrite", cli_fmt("%s/junk.db --model mlp --tiny"), "junk.db");
    cli_expect_clean_error("unity-rewrite", cli_fmt("%s/broken.db --model mlp --tiny"),
                           "does not match");
    char args[1024];
    snprintf(args, sizeof args, "%s %s/bad.json", good, cli_tmp);
    cli_expect_clean_error("unity-rewrite", args, "bad.json");
    snprintf(args, sizeof args, "%s --model mlp --tiny --rule 999999", good);
    cli_expect_clean_error("unity-rewrite", args, "no such verified rule");
    snprintf(args, sizeof args, "%s --model nosuchmodel", good);
    cli_expect_clean_error("unity-rewrite", args, "nosuchmodel");
    cli_expect_clean_error("unity-rewrite", "--frobnicate", "unknown option");
    snprintf(args, sizeof args, "%s --load-only --threads 0", good);
    cli_expect_clean_error("unity-rewrite", args, "--threads");
    /* stale rules are counted, said once, and never used: nothing to apply */
    snprintf(args, sizeof args, "%s/stale.db --model mlp --tiny -o %s/out.json", cli_tmp, cli_tmp);
    const cli_result *r = cli_run("unity-rewrite", args);
    EXPECT_EQ(r->code, 1);
    EXPECT_TRUE(strstr(r->err, "another spec set") != NULL);
    EXPECT_TRUE(strstr(r->out, "0 matches") != NULL);
    struct stat sb;
    EXPECT_TRUE(stat(cli_path("out.json"), &sb) != 0);
    /* and a good run lists, applies and writes both files */
    snprintf(args, sizeof args, "%s --model transformer --tiny --list -o %s/t.json --dot %s/t.dot",
             good, cli_tmp, cli_tmp);
    r = cli_run("unity-rewrite", args);
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "applied match 0") != NULL);
    EXPECT_TRUE(stat(cli_path("t.json"), &sb) == 0 && stat(cli_path("t.dot"), &sb) == 0);
    EXPECT_TRUE(cli_cleanup());
}

int main(void) {
    if (!test_spec_load(&spec))
        return 1;
    static const test_case cases[] = {
        {"shared_input", test_shared_input},
        {"interior_and_layout", test_interior_and_layout},
        {"cycle", test_cycle},
        {"brute_force", test_brute_force},
        {"compact_and_cache", test_compact_and_cache},
        {"threads_same", test_threads_same},
        {"bad_input", test_bad_input},
    };
    int rc = TEST_RUN_ALL(cases);
    rw_db_remove();
    un_spec_free(spec);
    return rc;
}
