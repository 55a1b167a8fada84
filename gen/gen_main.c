/* unity-gen - the superoptimizer: enumerates graphs over a menu of operators, pairs equal ones,
 * prunes them and stores candidate rules in a rule database. Argument parsing and exit codes only;
 * the work is in libgen. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gen/gen.h"
#include "gen/recall.h"
#include "pcg/cli.h"
#include "pcg/specpath.h"
#include "rulesdb/rulesdb.h"

static const char *USAGE =
    "unity-gen - generate candidate rewrite rules from the operator specs into a rule database\n\n"
    "usage: unity-gen [--spec SPECS] [-o rules.db] [--menu FILE]... [--max-ops N] [--seed S]\n"
    "                 [--threads T] [--shard I/N] [--time-limit SECONDS] [--list] [--dry-run]\n"
    "  --spec SPECS     the operator specs: a directory (SPECS/ops.json) or a file (alias --ops;\n"
    "                   default: $UNITY_SPECS, ./specs, else the installed share/unity/specs)\n"
    "  -o DB            the rule database to add candidates to (default rules.db; created)\n"
    "  --menu FILE      a generation menu (default: menu.json beside the spec file); repeat it to "
    "run several\n"
    "                   menus one after the other into the same database\n"
    "  --max-ops N      operators per graph (default: the menu's max_ops, 3)\n"
    "  --seed S         random input values (default 1234); same seed, same rules\n"
    "  --threads T      worker threads (default: every online core)\n"
    "  --shard I/N      keep only the I-th of N fingerprint shards (0 <= I < N); run every\n"
    "                   shard and combine the databases with `unity-rules merge`\n"
    "  --time-limit S   stop enumerating after S seconds (the rules found so far are kept)\n"
    "  --list           print every rule found on stdout\n"
    "  --recall FILE    compare the rules found with a published FlexFlow rule file: how many\n"
    "                   it contains up to renaming, and why each other one is not\n"
    "  --dry-run        do not touch a database (with --list: just print)\n";

#define MAX_MENUS 16

typedef struct {
    const char *ops, *db, *recall;
    const char *menus[MAX_MENUS];
    int n_menus;
    int max_ops, threads, shard_i, shard_n;
    uint64_t seed;
    double time_limit;
    bool list, dry_run;
} opts;

static bool parse_long(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static int bad(const char *flag, const char *v, const char *why) {
    fprintf(stderr, "unity-gen: %s '%s': %s\n", flag, v, why);
    return 2;
}

static int parse_args(int argc, char **argv, opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE, stdout);
            fputs(un_cli_help_footer(), stdout);
            return -1;
        }
        if (strcmp(a, "--list") == 0) {
            o->list = true;
            continue;
        }
        if (strcmp(a, "--dry-run") == 0) {
            o->dry_run = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool known = strcmp(a, "--spec") == 0 || strcmp(a, "--ops") == 0 || strcmp(a, "-o") == 0 ||
                     strcmp(a, "--menu") == 0 || strcmp(a, "--max-ops") == 0 ||
                     strcmp(a, "--seed") == 0 || strcmp(a, "--threads") == 0 ||
                     strcmp(a, "--shard") == 0 || strcmp(a, "--time-limit") == 0 ||
                     strcmp(a, "--recall") == 0;
        if (!known) {
            fprintf(stderr, "unity-gen: unknown argument '%s' (see --help)\n", a);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "unity-gen: option %s needs a value\n", a);
            return 2;
        }
        i++;
        long long n;
        if (strcmp(a, "--spec") == 0 || strcmp(a, "--ops") == 0)
            o->ops = v;
        else if (strcmp(a, "-o") == 0)
            o->db = v;
        else if (strcmp(a, "--menu") == 0) {
            if (o->n_menus == MAX_MENUS)
                return bad(a, v, "at most 16 menus in one run");
            o->menus[o->n_menus++] = v;
        } else if (strcmp(a, "--recall") == 0)
            o->recall = v;
        else if (strcmp(a, "--max-ops") == 0) {
            if (!parse_long(v, 1, UN_GEN_MAX_OPS, &n))
                return bad(a, v, "expected an integer from 1 to 5");
            o->max_ops = (int)n;
        } else if (strcmp(a, "--seed") == 0) {
            if (!un_cli_u64("unity-gen", a, v, &o->seed))
                return UN_EXIT_USAGE;
        } else if (strcmp(a, "--threads") == 0) {
            if (!parse_long(v, 1, 256, &n))
                return bad(a, v, "expected an integer from 1 to 256");
            o->threads = (int)n;
        } else if (strcmp(a, "--shard") == 0) {
            long long si, sn;
            char buf[64];
            const char *slash = strchr(v, '/');
            if (!slash || (size_t)(slash - v) >= sizeof buf)
                return bad(a, v, "expected I/N, e.g. 0/4");
            memcpy(buf, v, (size_t)(slash - v));
            buf[slash - v] = '\0';
            if (!parse_long(buf, 0, 1 << 20, &si) || !parse_long(slash + 1, 1, 1 << 20, &sn) ||
                si >= sn)
                return bad(a, v, "expected I/N with 0 <= I < N");
            o->shard_i = (int)si;
            o->shard_n = (int)sn;
        } else if (strcmp(a, "--time-limit") == 0) {
            char *end;
            double t = strtod(v, &end);
            if (!*v || *end || !(t > 0))
                return bad(a, v, "expected a positive number of seconds");
            o->time_limit = t;
        }
    }
    return 0;
}

static void print_summary(const un_gen_stats *s, const un_gen_summary *sum, double secs) {
    printf("graphs enumerated   %lld (%.0f graphs/s)%s\n", (long long)s->graphs,
           (double)s->graphs / (s->enum_seconds > 0 ? s->enum_seconds : 1),
           s->stopped ? " - stopped by the time limit" : "");
    if (s->stopped)
        printf("  work items done   %lld of %lld top-level operators\n", (long long)s->work_done,
               (long long)s->work_total);
    printf("  not prefix-named  %lld (renamings of others)\n", (long long)s->graphs_naming);
    printf("  same normal form  %lld (a common supergraph with a smaller graph)\n",
           (long long)s->graphs_same_nf);
    printf("graphs kept         %lld connected, %lld disconnected partners\n",
           (long long)s->records, (long long)s->unions);
    printf("groups of equals    %lld\n", (long long)s->buckets);
    printf("candidate pairs     %lld\n", (long long)s->pairs);
    printf("  after naming      %lld\n", (long long)s->after_naming);
    printf("  after supergraph  %lld\n", (long long)s->after_super);
    printf("  after composition %lld\n", (long long)s->after_compose);
    printf("  after renaming    %lld\n", (long long)s->after_rename);
    printf("  after subgraph    %lld\n", (long long)s->after_sub);
    printf("  after random test %lld rules (%lld with a degree variable k)\n",
           (long long)s->after_check, (long long)s->with_var);
    if (sum)
        printf("database            %lld new, %lld already present (run %lld)\n",
               (long long)sum->inserted, (long long)sum->present, (long long)sum->run_id);
    printf("time                %.1f s (enumeration %.1f s, pairing and pruning %.1f s: grouping "
           "%.1f s, per-pair facts %.1f s, decisions in order %.1f s)\n",
           secs, s->enum_seconds, s->pair_seconds, s->group_seconds, s->info_seconds,
           s->pair_seconds - s->group_seconds - s->info_seconds);
}

/* Dry runs print (--list) or just count the rules as they are found. */
static un_status print_rule(void *user, un_ctx *ctx, const un_rule *r, void *prepared) {
    (void)user;
    (void)ctx;
    (void)prepared;
    un_buf b = {0};
    un_rule_str(r, &b);
    printf("%s\n", b.data ? b.data : "");
    un_buf_deinit(&b);
    return UN_OK;
}

static un_status count_rule(void *user, un_ctx *ctx, const un_rule *r, void *prepared) {
    (void)user;
    (void)ctx;
    (void)prepared;
    (void)r;
    return UN_OK;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Stores the spec file's text in the database, so unity-rules reads it from any directory. */
static un_status store_spec_text(un_ctx *ctx, const un_spec *spec, const char *spec_path,
                                 const char *db_path) {
    char *text = NULL;
    size_t len = 0;
    un_rulesdb *db = NULL;
    un_status st = un_read_file(ctx, spec_path, &text, &len);
    if (st == UN_OK)
        st = un_rulesdb_open(ctx, db_path, spec, 0, &db);
    if (st == UN_OK)
        st = un_rulesdb_spec_text_put(ctx, db, text, len);
    un_rulesdb_free(db);
    free(text);
    return st;
}

/* One menu's run: enumerate, prune, store (or list) and print its summary. */
static un_status run_menu(un_ctx *ctx, const un_spec *spec, const opts *o, const char *menu_path,
                          const char *spec_path, const char *args) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    un_gen_menu *menu = NULL;
    un_gen_enum *e = NULL;
    un_status st = un_gen_menu_load(ctx, spec, menu_path, &menu);
    un_gen_params p = un_gen_params_default();
    if (st == UN_OK) {
        p.max_ops = o->max_ops ? o->max_ops : menu->max_ops;
        p.threads = o->threads ? o->threads : (int)(cores > 0 ? (cores > 256 ? 256 : cores) : 1);
        p.seed = o->seed;
        p.shard_i = o->shard_i;
        p.shard_n = o->shard_n;
        p.time_limit = o->time_limit;
        st = un_gen_enum_new(ctx, menu, o->seed, &e);
    }
    double t0 = now();
    un_gen_summary sum;
    memset(&sum, 0, sizeof sum);
    un_gen_rules rs = {0};
    if (st == UN_OK) {
        if (o->dry_run)
            st = un_gen_find_stream(ctx, e, &p,
                                    &(un_gen_sink){.emit = o->list ? print_rule : count_rule}, &rs);
        else
            st = un_gen_run(ctx, e, &p, o->db, args, &sum, &rs);
    }
    if (st == UN_OK && !o->dry_run)
        st = store_spec_text(ctx, spec, spec_path, o->db);
    if (st == UN_OK) {
        double secs = now() - t0;
        if (o->n_menus > 1)
            printf("menu                %s (N=%d)\n", menu_path, p.max_ops);
        print_summary(o->dry_run ? &rs.stats : &sum.stats, o->dry_run ? NULL : &sum, secs);
        if (o->recall) {
            un_gen_recall rec;
            un_buf rep = {0};
            st = un_gen_recall_run(ctx, e, p.max_ops, &rs, o->recall, &rec, &rep);
            if (st == UN_OK) {
                printf("recall against %s: %lld of %lld rules found (%.1f%%)\n", o->recall,
                       (long long)rec.by_kind[UN_GEN_RECALL_FOUND], (long long)rec.total,
                       100.0 * (double)rec.by_kind[UN_GEN_RECALL_FOUND] /
                           (double)(rec.total ? rec.total : 1));
                for (int k = 1; k < UN_GEN_RECALL_COUNT; k++)
                    printf("  %-9s %lld\n", un_gen_recall_kind_name((un_gen_recall_kind)k),
                           (long long)rec.by_kind[k]);
                printf("%s", rep.data ? rep.data : "");
            }
            un_buf_deinit(&rep);
        }
    }
    un_gen_rules_deinit(&rs);
    un_gen_enum_free(e);
    un_gen_menu_free(menu);
    return st;
}

int main(int argc, char **argv) {
    opts o = {.db = "rules.db", .seed = 1234, .shard_n = 1};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    /* Freed memory stays with the process: the workers allocate and free small graphs millions of
     * times, and glibc's default trim (128 KiB) handed their arenas' tops back to the kernel only
     * to fault them in again (~5 % of the run in page faults at N=3; 16 MiB more peak). */
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    char spec_path[4096], menu_path[4200], args[2048];
    un_ctx *pc = un_ctx_new(NULL);
    bool found = un_specpath_find(pc, o.ops, spec_path, sizeof spec_path) == UN_OK;
    if (!found)
        fprintf(stderr, "unity-gen: %s\n", un_ctx_errmsg(pc));
    un_ctx_free(pc);
    if (!found)
        return UN_EXIT_INPUT;
    if (o.n_menus == 0) { /* the default menu lies beside the spec file */
        const char *slash = strrchr(spec_path, '/');
        if (slash)
            snprintf(menu_path, sizeof menu_path, "%.*s/menu.json", (int)(slash - spec_path),
                     spec_path);
        else
            snprintf(menu_path, sizeof menu_path, "menu.json");
        o.menus[o.n_menus++] = menu_path;
    }
    size_t off = 0;
    args[0] = '\0';
    for (int i = 1; i < argc && off < sizeof args; i++)
        off += (size_t)snprintf(args + off, sizeof args - off, "%s%s", i > 1 ? " " : "", argv[i]);
    un_ctx *ctx = un_ctx_new(NULL);
    if (isatty(STDERR_FILENO))
        un_ctx_set_progress(ctx, un_progress_stderr, NULL);
    un_spec *spec = NULL;
    un_status st = un_spec_load(ctx, spec_path, &spec);
    for (int i = 0; i < o.n_menus && st == UN_OK; i++) { /* every menu's errors before any work */
        un_gen_menu *m = NULL;
        st = un_gen_menu_load(ctx, spec, o.menus[i], &m);
        un_gen_menu_free(m);
    }
    for (int i = 0; i < o.n_menus && st == UN_OK; i++) {
        st = run_menu(ctx, spec, &o, o.menus[i], spec_path, args);
        if (o.n_menus > 1 && i + 1 < o.n_menus && st == UN_OK)
            printf("\n");
    }
    if (st != UN_OK)
        fprintf(stderr, "unity-gen: %s: %s\n", un_status_str(st), un_ctx_errmsg(ctx));
    un_spec_free(spec);
    un_ctx_free(ctx);
    return st == UN_OK ? 0 : 1;
}
