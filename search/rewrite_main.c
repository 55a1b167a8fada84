/* rewrite_main.c - `unity-rewrite`: the matches of verified rules on a graph, and one of them
 * applied (search/match.h, search/apply.h). Argument parsing and printing only. It lives in
 * search/ because rulesdb/ (unity-rules) may not depend on the search; `unity-rules apply` points
 * here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/strategy.h"
#include "runtime/zoo.h"
#include "search/apply.h"

static const char *USAGE =
    "usage: unity-rewrite DB GRAPH.json|--model NAME [--tiny] [--rule ID] [--list] [--reversed]\n"
    "                     [--match K] [-o OUT.json] [--dot OUT.dot] [--apply-each N] [--ops FILE]\n"
    "  Finds every match of the verified rules of DB (or of rule ID) on the graph: one line per\n"
    "  rule with matches and their count (--list: one line per match). With -o or --dot, applies\n"
    "  match K (default 0, in the order listed) and writes the rewritten graph as JSON and as DOT\n"
    "  with the new nodes highlighted.\n"
    "  --model M   a zoo model (runtime/zoo.h) at paper size instead of a file (--tiny: tiny)\n"
    "  --apply-each N  apply each of the first N matches to the graph, timed (rewrites/s)\n"
    "  --data-parallel K  match on the data-parallel version of the graph for K devices\n"
    "  --reversed  also use every rule backwards\n"
    "  --load-only load the rules, print the load's statistics and stop (no graph)\n"
    "  --no-cache  do not use or write the compiled cache DB.compiled\n"
    "  --threads N parse and compile the rules the cache lacks on N threads (default: the\n"
    "              online CPUs; the set and the cache are the same for every N)\n"
    "  --baseline  with --load-only: load every rule as a whole un_rule "
    "(un_rulesdb_load_verified),\n"
    "              the form before the compact one, for comparison\n"
    "  --ops FILE  the spec set in use (default specs/ops.json)\n";

typedef struct {
    const char *ops, *out, *dot, *model, *pos[2];
    int npos;
    int64_t rule, match, apply_each, dp, threads;
    bool list, reversed, tiny, load_only, no_cache, baseline;
} opts;

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "unity-rewrite: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (unity-rewrite --help)\n");
    return 2;
}

static int parse_int(const char *flag, const char *v, int64_t min, int64_t *out) {
    char *end;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || n < min) {
        fprintf(stderr, "unity-rewrite: %s wants an integer >= %lld, not '%s'\n", flag,
                (long long)min, v);
        return 2;
    }
    *out = n;
    return 0;
}

static int parse_args(int argc, char **argv, opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-' || strcmp(a, "-") == 0) {
            if (o->npos == 2)
                return usage_error("unexpected argument '%s'", a);
            o->pos[o->npos++] = a;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(USAGE, stdout);
            return -1;
        }
        if (!strcmp(a, "--list")) {
            o->list = true;
            continue;
        }
        if (!strcmp(a, "--reversed")) {
            o->reversed = true;
            continue;
        }
        if (!strcmp(a, "--tiny")) {
            o->tiny = true;
            continue;
        }
        if (!strcmp(a, "--load-only") || !strcmp(a, "--no-cache") || !strcmp(a, "--baseline")) {
            bool *f = !strcmp(a, "--load-only")  ? &o->load_only
                      : !strcmp(a, "--no-cache") ? &o->no_cache
                                                 : &o->baseline;
            *f = true;
            continue;
        }
        bool known = !strcmp(a, "--rule") || !strcmp(a, "--match") || !strcmp(a, "-o") ||
                     !strcmp(a, "--dot") || !strcmp(a, "--ops") || !strcmp(a, "--model") ||
                     !strcmp(a, "--apply-each") || !strcmp(a, "--data-parallel") ||
                     !strcmp(a, "--threads");
        if (!known)
            return usage_error("unknown option %s", a);
        if (!v)
            return usage_error("option %s needs a value", a);
        i++;
        int rc = 0;
        if (!strcmp(a, "--rule"))
            rc = parse_int(a, v, 1, &o->rule);
        else if (!strcmp(a, "--match"))
            rc = parse_int(a, v, 0, &o->match);
        else if (!strcmp(a, "-o"))
            o->out = v;
        else if (!strcmp(a, "--dot"))
            o->dot = v;
        else if (!strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "--apply-each"))
            rc = parse_int(a, v, 1, &o->apply_each);
        else if (!strcmp(a, "--data-parallel"))
            rc = parse_int(a, v, 2, &o->dp);
        else if (!strcmp(a, "--threads"))
            rc = parse_int(a, v, 1, &o->threads);
        else
            o->ops = v;
        if (rc)
            return rc;
    }
    if (o->threads > 256)
        return usage_error("--threads %s: at most 256", "wants a smaller number");
    if (o->baseline && !o->load_only)
        return usage_error("--baseline goes with --load-only%s", "");
    if (o->load_only && (o->npos != 1 || o->model))
        return usage_error("--load-only wants just a rule database%s", "");
    if (!o->load_only && o->npos != (o->model ? 1 : 2))
        return usage_error("wants a rule database and a graph (a file or --model NAME)%s", "");
    if (o->tiny && !o->model)
        return usage_error("--tiny goes with --model%s", "");
    return 0;
}

/* Writes b to path through a temporary file renamed into place. */
static un_status write_file(un_ctx *ctx, const char *path, const un_buf *b) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write", path);
    bool ok = fwrite(b->data ? b->data : "", 1, b->len, f) == b->len;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write", path);
    }
    return UN_OK;
}

static int run(un_ctx *ctx, const opts *o) {
    un_spec *spec = NULL;
    un_rulesdb *db = NULL;
    un_ruleset *set = NULL;
    un_graph *g = NULL, *ng = NULL;
    un_matcher *m = NULL;
    un_match_list ms = {0};
    int32_t *origin = NULL;
    bool *hl = NULL;
    un_buf b = {0};
    un_status st = un_spec_load(ctx, o->ops, &spec);
    if (st == UN_OK)
        st = un_rulesdb_open(ctx, o->pos[0], spec, UN_RULESDB_READONLY, &db);
    un_ruleset_params p = un_ruleset_params_default();
    p.reversed = o->reversed;
    p.cache = !o->no_cache;
    p.threads = (int)o->threads;
    un_ruleset_stats rs = {0};
    if (st == UN_OK && o->baseline) {
        un_rule **all = NULL;
        int64_t n = 0, stale = 0;
        double t0 = un_now_s();
        st = un_rulesdb_load_verified(ctx, db, &all, &n, &stale);
        if (st == UN_OK)
            printf("baseline: loaded %lld verified rules as whole rules in %.3f s\n", (long long)n,
                   un_now_s() - t0);
        for (int64_t i = 0; i < n; i++)
            un_rule_free(all[i]);
        free(all);
        goto done;
    }
    if (st == UN_OK)
        st = un_ruleset_load(ctx, db, &p, &set, &rs);
    if (st == UN_OK && o->load_only) {
        printf("loaded %lld verified rules as %lld entries in %.3f s (%lld from the compiled "
               "cache, %lld compiled%s), %.1f MB; %lld stale, %lld too big, %lld not reversible\n",
               (long long)rs.verified, (long long)rs.loaded, rs.load_s, (long long)rs.cache_hits,
               (long long)rs.cache_misses, rs.cache_written ? ", cache written" : "",
               (double)rs.bytes / 1e6, (long long)rs.stale, (long long)rs.too_big,
               (long long)rs.not_reversed);
        printf("CPU by phase: read %.2f s, parse+check %.2f s, compile %.2f s, add %.2f s, "
               "cache write %.2f s (parse and compile on %d threads)\n",
               rs.read_s, rs.parse_s, rs.compile_s, rs.add_s, rs.write_s, rs.threads);
        goto done;
    }
    un_model zm = {0};
    if (st == UN_OK && o->model) {
        st = un_zoo_build(ctx, spec, o->model, o->tiny, 0, &zm);
        if (st == UN_OK) {
            g = zm.graph;
            zm.graph = NULL;
        }
    } else if (st == UN_OK) {
        st = un_graph_load(ctx, spec, o->pos[1], &g);
    }
    un_model_deinit(&zm);
    if (st == UN_OK && o->dp) {
        un_graph *dpg = NULL;
        st = un_strategy_data(ctx, g, (int)o->dp, &dpg);
        un_graph_free(g);
        g = dpg;
    }
    if (st == UN_OK)
        printf(
            "loaded %lld verified rules as %lld entries in %.3f s (%lld from the compiled cache, "
            "%lld compiled%s), %.1f MB\n",
            (long long)rs.verified, (long long)rs.loaded, rs.load_s, (long long)rs.cache_hits,
            (long long)rs.cache_misses, rs.cache_written ? ", cache written" : "",
            (double)rs.bytes / 1e6);
    if (st == UN_OK && rs.stale)
        fprintf(stderr,
                "unity-rewrite: %s: %lld verified rules were verified against another "
                "spec set and are not used (re-run unity-verify)\n",
                o->pos[0], (long long)rs.stale);
    bool rule_found = !o->rule;
    for (int64_t i = 0; st == UN_OK && i < un_ruleset_count(set); i++)
        rule_found |= un_ruleset_rule_id(set, i) == o->rule;
    if (st == UN_OK && !rule_found)
        st = un_ctx_error(ctx, UN_ERR_INVALID,
                          "--rule %lld: no such verified rule in %s (unity-rules list %s)",
                          (long long)o->rule, o->pos[0], o->pos[0]);
    if (st == UN_OK)
        st = un_matcher_new(ctx, set, g, &m);
    double t0 = un_now_s();
    int64_t with = 0;
    for (int64_t i = 0; st == UN_OK && i < un_ruleset_count(set); i++) {
        if (o->rule && un_ruleset_rule_id(set, i) != o->rule)
            continue;
        int64_t before = ms.n;
        st = un_match_rule(ctx, m, i, &ms);
        if (st != UN_OK || ms.n == before)
            continue;
        with++;
        b.len = 0;
        if (b.data)
            b.data[0] = '\0';
        un_buf_printf(&b, "rule %d%s: %lld match%s: ", (int)un_ruleset_rule_id(set, i),
                      un_ruleset_rule_reversed(set, i) ? " (reversed)" : "",
                      (long long)(ms.n - before), ms.n - before == 1 ? "" : "es");
        un_buf t = {0};
        un_rule_str(un_ruleset_rule(set, i), &t);
        for (size_t k = 0; t.data && k < t.len; k++)
            if (t.data[k] == '\n')
                t.data[k] = k + 1 < t.len ? ';' : '\0';
        un_buf_printf(&b, "%s", t.data ? t.data : "");
        un_buf_deinit(&t);
        printf("%s\n", b.data);
        for (int64_t k = before; o->list && k < ms.n; k++) {
            b.len = 0;
            b.data[0] = '\0';
            un_match_str(m, &ms.v[k], &b);
            printf("  match %lld: %s\n", (long long)k, b.data);
        }
    }
    double dt = un_now_s() - t0;
    if (st == UN_OK) {
        un_match_stats mst = un_matcher_stats(m);
        printf("%lld matches of %lld rules (%lld entries%s) on %d nodes in %.3f s; %lld (rule, "
               "root node) pairs tried; rejected node maps: %lld interior tensor used outside, "
               "%lld cyclic, %lld not instantiable\n",
               (long long)ms.n, (long long)with, (long long)un_ruleset_count(set),
               o->reversed ? ", with reversed" : "", (int)un_graph_node_count(g), dt,
               (long long)mst.roots_tried, (long long)mst.outside_use, (long long)mst.cyclic,
               (long long)mst.inst_failed);
    }
    for (int64_t k = 0; st == UN_OK && o->apply_each && k < ms.n && k < o->apply_each; k++) {
        if (k == 0)
            t0 = un_now_s();
        un_graph *h = NULL;
        st = un_apply(ctx, set, g, &ms.v[k], &h, NULL);
        un_graph_free(h);
        if (st == UN_OK && (k + 1 == ms.n || k + 1 == o->apply_each)) {
            dt = un_now_s() - t0;
            printf("applied %lld matches one at a time in %.3f s: %.0f rewrites/s\n",
                   (long long)(k + 1), dt, (double)(k + 1) / (dt > 0 ? dt : 1e-9));
        }
    }
    if (st == UN_OK && (o->out || o->dot)) {
        if (o->match >= ms.n)
            st = un_ctx_error(ctx, UN_ERR_INVALID, "--match %lld: there %s %lld match%s",
                              (long long)o->match, ms.n == 1 ? "is" : "are", (long long)ms.n,
                              ms.n == 1 ? "" : "es");
        if (st == UN_OK)
            st = un_apply(ctx, set, g, &ms.v[o->match], &ng, &origin);
        if (st == UN_OK && o->out) {
            b.len = 0;
            if (b.data)
                b.data[0] = '\0';
            st = un_graph_to_json(ctx, ng, &b);
            if (st == UN_OK)
                st = write_file(ctx, o->out, &b);
        }
        if (st == UN_OK && o->dot) {
            int32_t nn = un_graph_node_count(ng);
            hl = calloc((size_t)nn + 1, sizeof *hl);
            for (int32_t k = 0; hl && k < nn; k++)
                hl[k] = origin[k] < 0;
            b.len = 0;
            if (b.data)
                b.data[0] = '\0';
            st = un_apply_dot(ctx, ng, hl, &b);
            if (st == UN_OK)
                st = write_file(ctx, o->dot, &b);
        }
        if (st == UN_OK) {
            b.len = 0;
            if (b.data)
                b.data[0] = '\0';
            un_match_str(m, &ms.v[o->match], &b);
            printf("applied match %lld (%s): %d nodes -> %d nodes\n", (long long)o->match, b.data,
                   (int)un_graph_node_count(g), (int)un_graph_node_count(ng));
        }
    }
done:
    if (st != UN_OK)
        fprintf(stderr, "unity-rewrite: %s: %s\n", un_status_str(st), un_ctx_errmsg(ctx));
    free(hl);
    free(origin);
    un_buf_deinit(&b);
    un_match_list_deinit(&ms);
    un_matcher_free(m);
    un_graph_free(ng);
    un_graph_free(g);
    un_ruleset_free(set);
    un_rulesdb_free(db);
    un_spec_free(spec);
    return st == UN_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    opts o = {.ops = "specs/ops.json"};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    un_ctx *ctx = un_ctx_new(NULL);
    rc = run(ctx, &o);
    un_ctx_free(ctx);
    return rc;
}
