/* closure_main.c - `unity-closure`: the closure pruning stage (search/closure.h) between unity-gen
 * and unity-verify, and the reach test of a pruned set against the full one on the zoo models.
 * Argument parsing and printing only. It lives in search/ because it rewrites with the search's
 * matcher, which gen/ may not use (DESIGN.md section 2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pcg/cli.h"
#include "pcg/specpath.h"
#include "runtime/zoo.h"
#include "search/closure.h"

static const char *USAGE =
    "usage: unity-closure IN.db -o OUT.db [--depth D] [--threads T] [--basis-ops K] [--max-graphs "
    "M]\n"
    "                     [--verified-basis] [--spec S]\n"
    "       unity-closure --reach FULL.db PRUNED.db [--depth D] [--step S] [--model NAME]...\n"
    "  Closure pruning: reads the rules of IN.db in id order (unity-gen's, smallest first) and\n"
    "  drops each candidate or verified rule whose target is reachable from its source within D\n"
    "  rewrites (default 2) with the rules kept before it, used in either direction; writes the\n"
    "  kept rules, with their status and verdict, and the others (refuted, unknown, rejected) to\n"
    "  OUT.db, and prints the counts.\n"
    "  --reach: every graph reachable from each tiny zoo model (or each --model) within D "
    "rewrites\n"
    "  (default 3) of FULL.db's verified rules, used both ways, must be reachable with "
    "PRUNED.db's;\n"
    "  a rewrite by a rule PRUNED.db lacks must be within S rewrites (default 2) of it. Prints "
    "the\n"
    "  counts per model; exit status 3 when a graph is missing.\n"
    "  --threads T     worker threads (default 1)\n"
    "  --verified-basis only verified rules derive others (candidates are checked against them\n"
    "                  but never used), so no rule is dropped on the strength of one the\n"
    "                  verifier may still refute\n"
    "  --basis-ops K   only rules of at most K operators per side derive others (default: all;\n"
    "                  the basis rules are held in memory, so a bound keeps an N=4 set\n"
    "                  affordable: 3 there)\n"
    "  --max-graphs M  graphs explored per side of a derivation, or per model with --reach\n"
    "                  (default 4096 and 20000)\n"
    "  --spec S        operator specs, a directory holding ops.json or the file (alias --ops;\n"
    "                  default: $UNITY_SPECS, ./specs, the installed share/unity/specs)\n";

#define PROG "unity-closure"

typedef struct {
    const char *spec, *out, *pos[2], *models[16];
    int npos, n_models;
    int64_t depth, step, threads, max_graphs, basis_ops;
    bool reach, verified_basis;
} opts;

static int usage_error(const char *what, const char *arg) {
    fprintf(stderr, PROG ": %s%s (" PROG " --help)\n", what, arg);
    return 2;
}

static int parse_args(int argc, char **argv, opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-') {
            if (o->npos == 2)
                return usage_error("unexpected argument ", a);
            o->pos[o->npos++] = a;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(USAGE, stdout);
            fputs(un_cli_help_footer(), stdout);
            return -1;
        }
        if (!strcmp(a, "--reach")) {
            o->reach = true;
            continue;
        }
        if (!strcmp(a, "--verified-basis")) {
            o->verified_basis = true;
            continue;
        }
        bool known = !strcmp(a, "-o") || !strcmp(a, "--depth") || !strcmp(a, "--step") ||
                     !strcmp(a, "--threads") || !strcmp(a, "--max-graphs") ||
                     !strcmp(a, "--basis-ops") || !strcmp(a, "--spec") || !strcmp(a, "--ops") ||
                     !strcmp(a, "--model");
        if (!known)
            return usage_error("unknown option ", a);
        if (!v)
            return usage_error("option needs a value: ", a);
        i++;
        bool ok = true;
        if (!strcmp(a, "-o"))
            o->out = v;
        else if (!strcmp(a, "--depth"))
            ok = un_cli_int(PROG, a, v, 1, 4, &o->depth);
        else if (!strcmp(a, "--step"))
            ok = un_cli_int(PROG, a, v, 1, 4, &o->step);
        else if (!strcmp(a, "--threads"))
            ok = un_cli_int(PROG, a, v, 1, 64, &o->threads);
        else if (!strcmp(a, "--basis-ops"))
            ok = un_cli_int(PROG, a, v, 1, 16, &o->basis_ops);
        else if (!strcmp(a, "--max-graphs"))
            ok = un_cli_int(PROG, a, v, 1, 100000000, &o->max_graphs);
        else if (!strcmp(a, "--model")) {
            if (o->n_models == 16)
                return usage_error("too many --model flags (16 at most): ", v);
            o->models[o->n_models++] = v;
        } else
            o->spec = v;
        if (!ok)
            return 2;
    }
    if (o->reach) {
        if (o->npos != 2)
            return usage_error("--reach wants two rule databases: FULL.db PRUNED.db", "");
        if (o->out)
            return usage_error("-o does not go with --reach", "");
    } else {
        if (o->npos != 1)
            return usage_error("wants one rule database (IN.db)", "");
        if (!o->out)
            return usage_error("wants -o OUT.db", "");
        if (!strcmp(o->out, o->pos[0]))
            return usage_error("-o must name another database than IN.db: ", o->out);
        if (o->n_models || o->step)
            return usage_error("--model and --step go with --reach", "");
    }
    if (o->reach && (o->basis_ops || o->verified_basis))
        return usage_error("--basis-ops and --verified-basis do not go with --reach", "");
    return 0;
}

/* Copies row (of any status) into out: the rule, then its verdict. */
static un_status copy_row(un_ctx *ctx, un_rulesdb *out, const un_rulesdb_row *row, int64_t run) {
    un_rulesdb_origin origin = {.kind = row->origin_kind ? row->origin_kind : "generated",
                                .file = row->origin_file,
                                .name = row->origin_name,
                                .run = run};
    int32_t id = 0;
    bool inserted = false;
    bool rejected = row->status == UN_RULE_REJECTED;
    un_status st =
        un_rulesdb_rule_insert(ctx, out, row->rule, rejected ? UN_RULE_REJECTED : UN_RULE_CANDIDATE,
                               rejected ? row->detail : NULL, &origin, &id, &inserted);
    if (st != UN_OK || !inserted || rejected || row->status == UN_RULE_CANDIDATE)
        return st;
    if (row->status == UN_RULE_VERIFIED && !row->trusted)
        return UN_OK; /* verified against another spec set: a candidate again */
    un_rulesdb_verdict v = {.status = row->status,
                            .detail = row->detail,
                            .proof_ms = row->proof_ms,
                            .axioms = row->axioms};
    return un_rulesdb_rule_set_verdict(ctx, out, id, &v);
}

/* Adds b's counts to a. */
static void stats_add(un_closure_stats *a, const un_closure_stats *b) {
    a->rules += b->rules;
    a->too_big += b->too_big;
    a->not_basis += b->not_basis;
    a->dropped += b->dropped;
    a->kept += b->kept;
    for (int i = 0; i < 5; i++)
        a->by_depth[i] += b->by_depth[i];
    a->capped += b->capped;
    a->unbuilt += b->unbuilt;
    a->seconds += b->seconds;
}

enum { BATCH = 4096 }; /* rules over --basis-ops decided and written at a time */

/* Memory holds the basis rules and one batch of rows (decided, then copied); basis rows are read
 * twice (decisions, then copying). kind[i]: 0 copied as it is, 1 a basis rule (decided in order),
 * 2 decided against the basis. */
static int prune(un_ctx *ctx, const un_spec *spec, const opts *o) {
    un_rulesdb *in = NULL, *out = NULL;
    int32_t *ids = NULL;
    int64_t n = 0, n_basis = 0, run = 0, written = 0;
    int8_t *kind = NULL;
    un_rule **basis = NULL, **batch = NULL;
    un_rulesdb_row **rows = NULL;
    bool *drop = NULL, *bdrop = NULL;
    un_closure *c = NULL;
    un_closure_stats cs = {0}, part = {0};
    un_rulesdb_filter f = un_rulesdb_filter_default();
    un_closure_params p = un_closure_params_default();
    p.depth = o->depth ? (int)o->depth : 2;
    p.threads = o->threads ? (int)o->threads : 1;
    p.max_graphs = o->max_graphs ? (int)o->max_graphs : p.max_graphs;
    p.basis_ops = (int)o->basis_ops;
    p.progress = un_ctx_has_progress(ctx);
    un_status st = un_rulesdb_open(ctx, o->pos[0], spec, UN_RULESDB_READONLY, &in);
    if (st == UN_OK)
        st = un_rulesdb_rule_ids(ctx, in, &f, &ids, &n);
    if (st == UN_OK) {
        kind = un_xcalloc((size_t)n + 1, 1);
        basis = un_xcalloc((size_t)n + 1, sizeof *basis);
        drop = un_xcalloc((size_t)n + 1, 1);
    }
    for (int64_t i = 0; st == UN_OK && i < n; i++) {
        un_rulesdb_row *r = NULL;
        if ((st = un_rulesdb_rule_meta(ctx, in, ids[i], &r)) != UN_OK)
            break;
        bool use = r->status == UN_RULE_CANDIDATE || (r->status == UN_RULE_VERIFIED && r->trusted);
        int ops = r->n_src > r->n_dst ? r->n_src : r->n_dst;
        bool derives = (p.basis_ops == 0 || ops <= p.basis_ops) &&
                       (!o->verified_basis || r->status == UN_RULE_VERIFIED);
        kind[i] = !use ? 0 : derives ? 1 : 2;
        un_rulesdb_row_free(r);
        if (kind[i] == 1) {
            if ((st = un_rulesdb_rule_get(ctx, in, ids[i], &r)) != UN_OK)
                break;
            if (!r->rule)
                kind[i] = 0;
            else
                basis[n_basis++] = r->rule;
            r->rule = NULL;
            un_rulesdb_row_free(r);
        }
    }
    if (st == UN_OK)
        st = un_closure_new(ctx, spec, basis, n_basis, &p, drop, &cs, &c);
    for (int64_t i = 0; i < n_basis; i++)
        un_rule_free(basis[i]);
    if (st == UN_OK)
        st = un_rulesdb_open(ctx, o->out, spec, UN_RULESDB_CREATE, &out);
    char args[256];
    snprintf(args, sizeof args, "%s --depth %d --basis-ops %d", o->pos[0], p.depth, p.basis_ops);
    if (st == UN_OK)
        st = un_rulesdb_run_begin(ctx, out, PROG, args, &run);
    batch = un_xcalloc(BATCH, sizeof *batch);
    rows = un_xcalloc(BATCH, sizeof *rows);
    bdrop = un_xcalloc(BATCH, 1);
    int64_t next_basis = 0; /* basis rules' decisions, in id order */
    for (int64_t lo = 0; st == UN_OK && lo < n; lo += BATCH) {
        int64_t hi = lo + BATCH < n ? lo + BATCH : n, nb = 0;
        for (int64_t i = lo; st == UN_OK && i < hi; i++) {
            if (kind[i] != 2 || (st = un_rulesdb_rule_get(ctx, in, ids[i], &rows[nb])) != UN_OK)
                continue;
            batch[nb] = rows[nb]->rule;
            nb++;
        }
        memset(bdrop, 0, BATCH);
        if (st == UN_OK && nb > 0 &&
            (st = un_closure_check(ctx, c, batch, nb, bdrop, &part)) == UN_OK)
            stats_add(&cs, &part);
        if (st == UN_OK)
            st = un_rulesdb_begin(ctx, out);
        for (int64_t i = lo, k = 0; st == UN_OK && i < hi; i++) {
            bool skip = kind[i] == 1 ? drop[next_basis++] : kind[i] == 2 ? bdrop[k] : false;
            un_rulesdb_row *r = kind[i] == 2 ? rows[k++] : NULL;
            if (skip || (!r && (st = un_rulesdb_rule_get(ctx, in, ids[i], &r)) != UN_OK))
                continue;
            st = copy_row(ctx, out, r, run);
            written += st == UN_OK;
            if (kind[i] != 2)
                un_rulesdb_row_free(r);
        }
        for (int64_t k = 0; k < nb; k++)
            un_rulesdb_row_free(rows[k]);
        if (st == UN_OK)
            st = un_rulesdb_commit(ctx, out);
        else if (out)
            un_rulesdb_rollback(out);
        if (st == UN_OK && p.progress)
            un_ctx_progress(ctx, "closure: %lld/%lld rules written or dropped", (long long)hi,
                            (long long)n);
    }
    if (p.progress)
        un_ctx_progress_done(ctx);
    char counts[512];
    snprintf(counts, sizeof counts,
             "{\"rules\": %lld, \"considered\": %lld, \"dropped\": %lld, \"dropped_1\": %lld, "
             "\"dropped_2\": %lld, \"dropped_3\": %lld, \"dropped_4\": %lld, \"capped\": %lld, "
             "\"too_big\": %lld, \"not_basis\": %lld, \"written\": %lld, \"seconds\": %.3f}",
             (long long)n, (long long)cs.rules, (long long)cs.dropped, (long long)cs.by_depth[1],
             (long long)cs.by_depth[2], (long long)cs.by_depth[3], (long long)cs.by_depth[4],
             (long long)cs.capped, (long long)cs.too_big, (long long)cs.not_basis,
             (long long)written, cs.seconds);
    if (st == UN_OK)
        st = un_rulesdb_run_end(ctx, out, run, counts);
    if (st == UN_OK) {
        printf(
            "rules read          %lld (%lld candidate or verified, the rest copied as they are)\n",
            (long long)n, (long long)cs.rules);
        printf("closure (depth %d)   %lld dropped (by 1 / 2 / 3 / 4 rewrites: %lld / %lld / %lld / "
               "%lld), %lld kept\n",
               p.depth, (long long)cs.dropped, (long long)cs.by_depth[1], (long long)cs.by_depth[2],
               (long long)cs.by_depth[3], (long long)cs.by_depth[4],
               (long long)(cs.rules - cs.dropped));
        if (p.basis_ops)
            printf("  basis             %lld rules of <= %d operators decided in order, %lld more "
                   "checked against those kept\n",
                   (long long)n_basis, p.basis_ops, (long long)(cs.rules - n_basis));
        if (cs.capped || cs.too_big)
            printf("  not fully explored %lld (the --max-graphs bound); too big to match %lld\n",
                   (long long)cs.capped, (long long)cs.too_big);
        printf("  rewrites skipped  %lld (their result's operators are no target-side graph's)\n",
               (long long)cs.unbuilt);
        printf("database            %s: %lld rules written\n", o->out, (long long)written);
        printf("time                %.1f s (%d threads)\n", cs.seconds, p.threads);
    }
    free(batch);
    free(rows);
    free(bdrop);
    free(basis);
    free(drop);
    free(kind);
    free(ids);
    un_closure_free(c);
    un_rulesdb_free(in);
    un_rulesdb_free(out);
    return st == UN_OK ? 0 : -1;
}

static un_status load_set(un_ctx *ctx, const un_spec *spec, const char *path, un_ruleset **set) {
    un_rulesdb *db = NULL;
    un_ruleset_params p = un_ruleset_params_default();
    p.reversed = true;
    p.cache = false;
    un_status st = un_rulesdb_open(ctx, path, spec, UN_RULESDB_READONLY, &db);
    if (st == UN_OK)
        st = un_ruleset_load(ctx, db, &p, set, NULL);
    if (st == UN_OK && un_ruleset_count(*set) == 0)
        st = un_ctx_error(ctx, UN_ERR_INVALID, "%s: no verified rules (run unity-verify on it)",
                          path);
    un_rulesdb_free(db);
    return st;
}

static int reach(un_ctx *ctx, const un_spec *spec, const opts *o) {
    un_ruleset *full = NULL, *pruned = NULL;
    un_status st = load_set(ctx, spec, o->pos[0], &full);
    if (st == UN_OK)
        st = load_set(ctx, spec, o->pos[1], &pruned);
    int n_names = 0;
    const char *const *names = un_zoo_names(&n_names);
    int n_models = o->n_models ? o->n_models : n_names;
    int depth = o->depth ? (int)o->depth : 3, step = o->step ? (int)o->step : 2;
    int64_t max_graphs = o->max_graphs ? o->max_graphs : 20000, missing = 0;
    if (st == UN_OK)
        printf("reach within %d rewrites: %lld entries (full), %lld (pruned), step %d\n", depth,
               (long long)un_ruleset_count(full), (long long)un_ruleset_count(pruned), step);
    for (int i = 0; st == UN_OK && i < n_models; i++) {
        const char *name = o->n_models ? o->models[i] : names[i];
        un_model m = {0};
        st = un_zoo_build(ctx, spec, name, true, 0, &m);
        un_closure_reach_stats rs = {0};
        if (st == UN_OK)
            st = un_closure_reach_check(ctx, full, pruned, m.graph, depth, step, max_graphs, &rs);
        if (st == UN_OK)
            printf("  %-14s %lld graphs: %lld by a kept rule, %lld derived, %lld missing%s\n", name,
                   (long long)rs.graphs, (long long)rs.direct, (long long)rs.derived,
                   (long long)rs.missing, rs.capped ? " (capped by --max-graphs)" : "");
        missing += rs.missing;
        un_model_deinit(&m);
    }
    un_ruleset_free(full);
    un_ruleset_free(pruned);
    if (st != UN_OK)
        return -1;
    printf("reach %s: %lld graphs missing\n", missing ? "FAILED" : "kept", (long long)missing);
    return missing ? 3 : 0;
}

int main(int argc, char **argv) {
    opts o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    un_ctx *ctx = un_ctx_new(NULL);
    un_spec *spec = NULL;
    char path[4096];
    un_status st = un_specpath_find(ctx, o.spec, path, sizeof path);
    if (st == UN_OK)
        st = un_spec_load(ctx, path, &spec);
    rc = st != UN_OK ? -1 : o.reach ? reach(ctx, spec, &o) : prune(ctx, spec, &o);
    if (rc < 0) {
        fprintf(stderr, PROG ": %s: %s\n", un_status_str(un_ctx_status(ctx)), un_ctx_errmsg(ctx));
        rc = 1;
    }
    un_spec_free(spec);
    un_ctx_free(ctx);
    return rc;
}
