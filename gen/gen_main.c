/* unity-gen - the superoptimizer: enumerates graphs over a menu of operators, pairs equal ones,
 * prunes them and stores candidate rules in a rule database. Argument parsing and exit codes only;
 * the work is in libgen. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gen/gen.h"
#include "gen/recall.h"

static const char *USAGE =
    "usage: unity-gen --ops SPECS [-o rules.db] [--menu FILE] [--max-ops N] [--seed S]\n"
    "                 [--threads T] [--shard I/N] [--time-limit SECONDS] [--list] [--dry-run]\n"
    "  --ops SPECS      the operator specs: a directory (SPECS/ops.json) or a file\n"
    "  -o DB            the rule database to add candidates to (default rules.db; created)\n"
    "  --menu FILE      the generation menu (default specs/menu.json)\n"
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

typedef struct {
    const char *ops, *db, *menu, *recall;
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
        bool known = strcmp(a, "--ops") == 0 || strcmp(a, "-o") == 0 || strcmp(a, "--menu") == 0 ||
                     strcmp(a, "--max-ops") == 0 || strcmp(a, "--seed") == 0 ||
                     strcmp(a, "--threads") == 0 || strcmp(a, "--shard") == 0 ||
                     strcmp(a, "--time-limit") == 0 || strcmp(a, "--recall") == 0;
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
        if (strcmp(a, "--ops") == 0)
            o->ops = v;
        else if (strcmp(a, "-o") == 0)
            o->db = v;
        else if (strcmp(a, "--menu") == 0)
            o->menu = v;
        else if (strcmp(a, "--recall") == 0)
            o->recall = v;
        else if (strcmp(a, "--max-ops") == 0) {
            if (!parse_long(v, 1, GEN_MAX_OPS, &n))
                return bad(a, v, "expected an integer from 1 to 5");
            o->max_ops = (int)n;
        } else if (strcmp(a, "--seed") == 0) {
            char *end;
            unsigned long long s = strtoull(v, &end, 10);
            if (!*v || *end || *v == '-')
                return bad(a, v, "expected a non-negative integer");
            o->seed = s;
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
    if (!o->ops) {
        fprintf(stderr, "unity-gen: --ops SPECS is required (see --help)\n");
        return 2;
    }
    return 0;
}

static void print_summary(const gen_stats *s, const gen_summary *sum, double secs) {
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
    printf("time                %.1f s (enumeration %.1f s, pairing and pruning %.1f s)\n", secs,
           s->enum_seconds, s->pair_seconds);
}

/* Dry runs print (--list) or just count the rules as they are found. */
static un_status print_rule(void *user, un_ctx *ctx, const un_rule *r) {
    (void)user;
    (void)ctx;
    un_buf b = {0};
    un_rule_str(r, &b);
    printf("%s\n", b.data ? b.data : "");
    un_buf_free(&b);
    return UN_OK;
}

static un_status count_rule(void *user, un_ctx *ctx, const un_rule *r) {
    (void)user;
    (void)ctx;
    (void)r;
    return UN_OK;
}

int main(int argc, char **argv) {
    opts o = {.db = "rules.db", .seed = 1234, .shard_n = 1};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    char spec_path[1024], menu_path[1024], args[2048];
    struct stat sb;
    if (stat(o.ops, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(spec_path, sizeof spec_path, "%s/ops.json", o.ops);
    else
        snprintf(spec_path, sizeof spec_path, "%s", o.ops);
    snprintf(menu_path, sizeof menu_path, "%s", o.menu ? o.menu : "specs/menu.json");
    size_t off = 0;
    args[0] = '\0';
    for (int i = 1; i < argc && off < sizeof args; i++)
        off += (size_t)snprintf(args + off, sizeof args - off, "%s%s", i > 1 ? " " : "", argv[i]);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    un_ctx *ctx = un_ctx_new(NULL);
    if (isatty(STDERR_FILENO))
        un_ctx_set_progress(ctx, un_progress_stderr, NULL);
    un_spec *spec = NULL;
    gen_menu *menu = NULL;
    gen_enum *e = NULL;
    un_status st = un_spec_load(ctx, spec_path, &spec);
    if (st == UN_OK)
        st = gen_menu_load(ctx, spec, menu_path, &menu);
    gen_params p = gen_params_default();
    if (st == UN_OK) {
        p.max_ops = o.max_ops ? o.max_ops : menu->max_ops;
        p.threads = o.threads ? o.threads : (int)(cores > 0 ? (cores > 256 ? 256 : cores) : 1);
        p.seed = o.seed;
        p.shard_i = o.shard_i;
        p.shard_n = o.shard_n;
        p.time_limit = o.time_limit;
        st = gen_enum_new(ctx, menu, o.seed, &e);
    }
    double t0 = 0;
    {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    }
    gen_summary sum;
    memset(&sum, 0, sizeof sum);
    gen_rules rs = {0};
    if (st == UN_OK) {
        if (o.dry_run)
            st = gen_find_stream(ctx, e, &p, o.list ? print_rule : count_rule, NULL, &rs);
        else
            st = gen_run(ctx, e, &p, o.db, args, &sum, &rs);
    }
    if (st == UN_OK) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double secs = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - t0;
        print_summary(o.dry_run ? &rs.stats : &sum.stats, o.dry_run ? NULL : &sum, secs);
        if (o.recall) {
            gen_recall rec;
            un_buf rep = {0};
            st = gen_recall_run(ctx, e, p.max_ops, &rs, o.recall, &rec, &rep);
            if (st == UN_OK) {
                printf("recall against %s: %lld of %lld rules found (%.1f%%)\n", o.recall,
                       (long long)rec.by_kind[GEN_RECALL_FOUND], (long long)rec.total,
                       100.0 * (double)rec.by_kind[GEN_RECALL_FOUND] /
                           (double)(rec.total ? rec.total : 1));
                for (int k = 1; k < GEN_RECALL_COUNT; k++)
                    printf("  %-9s %lld\n", gen_recall_kind_name((gen_recall_kind)k),
                           (long long)rec.by_kind[k]);
                printf("%s", rep.data ? rep.data : "");
            } else
                fprintf(stderr, "unity-gen: %s: %s\n", un_status_str(st), un_ctx_errmsg(ctx));
            un_buf_free(&rep);
        }
    } else
        fprintf(stderr, "unity-gen: %s: %s\n", un_status_str(st), un_ctx_errmsg(ctx));
    gen_rules_deinit(&rs);
    gen_enum_free(e);
    gen_menu_free(menu);
    un_spec_free(spec);
    un_ctx_free(ctx);
    return st == UN_OK ? 0 : 1;
}
