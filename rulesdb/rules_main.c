/* unity-rules - inspect and exchange rule databases: list, show, stats, import (FlexFlow JSON),
 * export (FlexFlow or our JSON), check, merge. Argument parsing and printing only; the work is in
 * librulesdb. Outputs that are files (export -o, merge -o) are written to a temporary file in the
 * same folder and renamed, so a failure never leaves half a file. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pcg/cli.h"
#include "pcg/report.h"
#include "pcg/specpath.h"
#include "rulesdb/flexflow.h"

static const char *USAGE =
    "unity-rules - inspect, check, merge and exchange rule databases (rules.db)\n\n"
    "usage: unity-rules [--spec FILE] COMMAND ...\n"
    "  list DB [--status S] [--op OP] [--size N|A-B] [--limit N]\n"
    "                               one line per rule: id, status, size, hash, rule\n"
    "  show DB ID [--dot]           a rule with its verdict and provenance (--dot: Graphviz)\n"
    "  stats DB                     counts by status, size and operator; proof-time percentiles\n"
    "  import DB FILE [--quiet]     import a FlexFlow rule collection (JSON); creates DB\n"
    "  export DB --format flexflow|json [--status S] [-o FILE]\n"
    "                               write rules (default: every rule but rejected ones)\n"
    "  check DB                     integrity: SQLite's check plus every row against its hash\n"
    "  merge A.db B.db ... -o C.db  combine databases (dedup by canonical hash, best verdicts)\n"
    "  bench [--n N] [--ff FILE]    time a FlexFlow import, N inserts, verdicts, loading\n"
    "  (matching and applying rules on a graph: unity-rewrite)\n"
    "options: --spec FILE|DIR       the spec set in use (alias --ops; default: the one stored in\n"
    "                               DB by unity-gen, else $UNITY_SPECS, ./specs, else the\n"
    "                               installed share/unity/specs)\n";

/* bench's rule i has parallel degree 2 + i / 10, which must stay within 65536. */
#define BENCH_MAX_N ((int64_t)(65536 - 2) * 10)

typedef struct {
    const char *ops, *status, *op, *size, *format, *out, *ff;
    int64_t limit, bench_n;
    bool dot, quiet;
    const char *pos[16];
    int npos;
} opts;

static int fail(un_ctx *ctx, un_status st) {
    fprintf(stderr, "unity-rules: %s: %s\n", un_status_str(st), un_ctx_errmsg(ctx));
    return 1;
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "unity-rules: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (unity-rules --help)\n");
    return 2;
}

static int parse_args(int argc, char **argv, opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-' || strcmp(a, "-") == 0) {
            if (o->npos == 16)
                return usage_error("too many arguments%s", "");
            o->pos[o->npos++] = a;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE, stdout);
            fputs(un_cli_help_footer(), stdout);
            return -1;
        }
        if (strcmp(a, "--dot") == 0) {
            o->dot = true;
            continue;
        }
        if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            o->quiet = true;
            continue;
        }
        const char **slot = strcmp(a, "--ops") == 0 || strcmp(a, "--spec") == 0    ? &o->ops
                            : strcmp(a, "--ff") == 0                               ? &o->ff
                            : strcmp(a, "--status") == 0                           ? &o->status
                            : strcmp(a, "--op") == 0                               ? &o->op
                            : strcmp(a, "--size") == 0                             ? &o->size
                            : strcmp(a, "--format") == 0                           ? &o->format
                            : (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) ? &o->out
                                                                                   : NULL;
        bool is_limit = strcmp(a, "--limit") == 0 || strcmp(a, "--n") == 0;
        if (!slot && !is_limit)
            return usage_error("unknown option %s", a);
        if (!v)
            return usage_error("option %s needs a value", a);
        i++;
        if (strcmp(a, "--n") == 0) {
            /* bench's generated rules have degree 2 + i / 10, at most 65536 */
            if (!un_cli_int("unity-rules", a, v, 1, BENCH_MAX_N, &o->bench_n))
                return UN_EXIT_USAGE;
        } else if (is_limit) {
            if (!un_cli_int("unity-rules", a, v, 1, INT64_MAX, &o->limit))
                return UN_EXIT_USAGE;
        } else {
            *slot = v;
        }
    }
    return 0;
}

static un_status open_db(un_ctx *ctx, const char *path, const un_spec *spec, int flags,
                         un_rulesdb **db) {
    struct stat sb;
    *db = NULL;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return un_ctx_error(ctx, UN_ERR_IO, "%s: is a directory, not a rule database", path);
    return un_rulesdb_open(ctx, path, spec, flags, db);
}

/* "relu(x0) => x0" on one line (outputs separated by "; "). */
static void rule_line(const un_rule *r, un_buf *b) {
    un_buf t = {0};
    un_rule_str(r, &t);
    for (size_t i = 0; t.data && i < t.len; i++)
        if (t.data[i] == '\n')
            t.data[i] = i + 1 < t.len ? ';' : '\0';
    un_buf_printf(b, "%s", t.data ? t.data : "");
    un_buf_deinit(&t);
}

static bool parse_filter(un_ctx *ctx, const opts *o, un_rulesdb_filter *f) {
    *f = un_rulesdb_filter_default();
    if (o->status) {
        un_rule_status s;
        if (!un_rule_status_from_name(o->status, &s)) {
            un_ctx_error(ctx, UN_ERR_INVALID,
                         "--status %s: not one of candidate, verified, refuted, unknown, rejected",
                         o->status);
            return false;
        }
        f->status = (int)s;
    }
    if (o->op) {
        un_op op;
        if (!un_op_from_name(o->op, &op)) {
            un_ctx_error(ctx, UN_ERR_INVALID, "--op %s: no such operator (unity-pcg ops)", o->op);
            return false;
        }
        f->op = (int)op;
    }
    if (o->size) {
        int a = 0, b = 0, n = 0;
        char dash = 0;
        if (sscanf(o->size, "%d%n", &a, &n) == 1 && o->size[n] == '\0') {
            b = a;
        } else if (sscanf(o->size, "%d%c%d%n", &a, &dash, &b, &n) != 3 || dash != '-' ||
                   o->size[n] != '\0') {
            a = -1;
        }
        if (a < 1 || b < a) {
            un_ctx_error(ctx, UN_ERR_INVALID, "--size %s: want N or A-B (sizes >= 1)", o->size);
            return false;
        }
        f->min_size = a;
        f->max_size = b;
    }
    f->limit = o->limit;
    return true;
}

static int cmd_list(un_ctx *ctx, const un_spec *spec, const opts *o) {
    if (o->npos != 2)
        return usage_error("list wants one database%s", "");
    un_rulesdb_filter f;
    if (!parse_filter(ctx, o, &f))
        return fail(ctx, UN_ERR_INVALID);
    un_rulesdb *db = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    un_status st = open_db(ctx, o->pos[1], spec, UN_RULESDB_READONLY, &db);
    if (st == UN_OK)
        st = un_rulesdb_rule_ids(ctx, db, &f, &ids, &n);
    for (int64_t i = 0; st == UN_OK && i < n; i++) {
        un_rulesdb_row *row = NULL;
        st = un_rulesdb_rule_get(ctx, db, ids[i], &row);
        if (st != UN_OK)
            break;
        un_buf b = {0};
        un_buf_printf(&b, "%d\t%s%s\t%d\t%016llx\t", (int)row->id, un_rule_status_name(row->status),
                      row->status == UN_RULE_VERIFIED && !row->trusted ? "(stale)" : "",
                      row->n_src + row->n_dst, (unsigned long long)row->hash);
        if (row->rule)
            rule_line(row->rule, &b);
        else
            un_buf_printf(&b, "%s: %s", row->origin_name ? row->origin_name : "?",
                          row->detail ? row->detail : "");
        printf("%s\n", b.data);
        un_buf_deinit(&b);
        un_rulesdb_row_free(row);
    }
    free(ids);
    un_rulesdb_free(db);
    return st == UN_OK ? 0 : fail(ctx, st);
}

static int cmd_show(un_ctx *ctx, const un_spec *spec, const opts *o) {
    if (o->npos != 3)
        return usage_error("show wants a database and a rule id%s", "");
    char *end;
    long id = strtol(o->pos[2], &end, 10);
    if (!*o->pos[2] || *end || id < 1 || id > INT32_MAX)
        return usage_error("show: '%s' is not a rule id", o->pos[2]);
    un_rulesdb *db = NULL;
    un_rulesdb_row *row = NULL;
    un_status st = open_db(ctx, o->pos[1], spec, UN_RULESDB_READONLY, &db);
    if (st == UN_OK)
        st = un_rulesdb_rule_get(ctx, db, (int32_t)id, &row);
    un_buf b = {0};
    if (st == UN_OK && o->dot) {
        if (!row->rule) {
            st = un_ctx_error(ctx, UN_ERR_INVALID, "%s: rule %ld: rejected without a rule",
                              o->pos[1], id);
        } else {
            un_buf_printf(&b, "// rule %ld: source side\n", id);
            st = un_graph_to_dot(ctx, row->rule->src, &b);
            if (st == UN_OK) {
                un_buf_printf(&b, "// rule %ld: target side\n", id);
                st = un_graph_to_dot(ctx, row->rule->dst, &b);
            }
        }
    } else if (st == UN_OK) {
        uint64_t cur = un_rulesdb_spec_hash(db);
        un_buf_printf(&b, "rule %d  hash %016llx\n", (int)row->id, (unsigned long long)row->hash);
        un_buf_printf(&b, "status    %s%s\n", un_rule_status_name(row->status),
                      row->status == UN_RULE_VERIFIED
                          ? (row->trusted ? " (under the spec set in use)"
                                          : " (under another spec set: not trusted until "
                                            "re-verified)")
                          : "");
        if (row->detail)
            un_buf_printf(&b, "detail    %s\n", row->detail);
        if (row->status != UN_RULE_CANDIDATE && row->status != UN_RULE_REJECTED)
            un_buf_printf(&b, "proof     %.3f ms, axioms %s\n", row->proof_ms,
                          row->axioms && *row->axioms
                              ? row->axioms
                              : "none (equal once parallel ops are identities)");
        un_buf_printf(&b, "origin    %s%s%s%s%s\n", row->origin_kind ? row->origin_kind : "?",
                      row->origin_file ? " from " : "", row->origin_file ? row->origin_file : "",
                      row->origin_name ? " as " : "", row->origin_name ? row->origin_name : "");
        un_buf_printf(&b, "specs     generated %016llx, verified %016llx, in use %016llx\n",
                      (unsigned long long)row->gen_spec, (unsigned long long)row->verify_spec,
                      (unsigned long long)cur);
        un_buf_printf(&b, "size      %d => %d  ops %s\n", row->n_src, row->n_dst, row->ops);
        if (row->rule) {
            const un_rule *r = row->rule;
            for (int v = 0; v < r->n_vars; v++)
                un_buf_printf(&b, "variable  %s (witness %lld, %d occurrences)\n", r->vars[v].name,
                              (long long)r->vars[v].value, r->vars[v].n_binds);
            if (r->any_shape)
                un_buf_printf(&b, "shapes    proven for every input size at these ranks\n");
            for (int c = 0; c < r->n_conds; c++) {
                un_buf_printf(&b, "%s", c ? "          " : "if        ");
                un_rule_cond_str(r, &r->conds[c], &b);
                un_buf_printf(&b, "%s\n",
                              c == 0 ? "   (side condition: the target needs it, "
                                       "the source does not give it)"
                                     : "");
            }
            un_buf_printf(&b, "rule      ");
            un_rule_str(r, &b);
            for (int side = 0; side < 2 && st == UN_OK; side++) {
                un_buf_printf(&b, "%s:\n", side ? "target" : "source");
                st = un_report_graph(ctx, side ? r->dst : r->src, &b);
            }
        }
    }
    if (st == UN_OK)
        fputs(b.data ? b.data : "", stdout);
    un_buf_deinit(&b);
    un_rulesdb_row_free(row);
    un_rulesdb_free(db);
    return st == UN_OK ? 0 : fail(ctx, st);
}

static int cmd_stats(un_ctx *ctx, const un_spec *spec, const opts *o) {
    if (o->npos != 2)
        return usage_error("stats wants one database%s", "");
    un_rulesdb *db = NULL;
    int32_t *ids = NULL;
    int64_t n = 0, counts[UN_RULE_STATUS_COUNT] = {0}, by_op[UN_OP_COUNT] = {0}, sizes[64] = {0};
    int64_t stale = 0, nproof = 0;
    double *proof = NULL;
    un_status st = open_db(ctx, o->pos[1], spec, UN_RULESDB_READONLY, &db);
    if (st == UN_OK)
        st = un_rulesdb_count(ctx, db, counts);
    if (st == UN_OK)
        st = un_rulesdb_rule_ids(ctx, db, NULL, &ids, &n);
    if (st == UN_OK)
        proof = un_xcalloc((size_t)n + 1, sizeof *proof);
    for (int64_t i = 0; st == UN_OK && i < n; i++) {
        un_rulesdb_row *row = NULL;
        st = un_rulesdb_rule_meta(ctx, db, ids[i], &row);
        if (st != UN_OK)
            break;
        if (row->status != UN_RULE_REJECTED) {
            int sz = row->n_src + row->n_dst;
            sizes[sz < 63 ? sz : 63]++;
            char *save = NULL, *ops = un_xstrdup(row->ops);
            for (char *t = strtok_r(ops, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                un_op op;
                if (un_op_from_name(t, &op))
                    by_op[op]++;
            }
            free(ops);
        }
        if (row->status == UN_RULE_VERIFIED && !row->trusted)
            stale++;
        if (row->status == UN_RULE_VERIFIED || row->status == UN_RULE_REFUTED)
            proof[nproof++] = row->proof_ms;
        un_rulesdb_row_free(row);
    }
    if (st == UN_OK) {
        printf("%s: %lld rules\n", o->pos[1], (long long)n);
        printf("by status:");
        for (int s = 0; s < UN_RULE_STATUS_COUNT; s++)
            printf(" %s %lld", un_rule_status_name((un_rule_status)s), (long long)counts[s]);
        printf("\n");
        if (stale)
            printf("stale: %lld verified rules were verified under another spec set and need "
                   "re-verifying\n",
                   (long long)stale);
        printf("by size (nodes on both sides):");
        for (int s = 0; s < 64; s++)
            if (sizes[s])
                printf(" %d%s:%lld", s, s == 63 ? "+" : "", (long long)sizes[s]);
        printf("\nby operator (rules using it):");
        for (int op = 0; op < UN_OP_COUNT; op++)
            if (by_op[op])
                printf(" %s %lld", un_op_name((un_op)op), (long long)by_op[op]);
        printf("\n");
        if (nproof) {
            qsort(proof, (size_t)nproof, sizeof *proof, un_cmp_double);
            double p[4] = {50, 90, 99, 100};
            printf("proof time (verified and refuted, %lld):", (long long)nproof);
            for (int k = 0; k < 4; k++) {
                int64_t idx = (int64_t)((p[k] / 100.0) * (double)(nproof - 1) + 0.5);
                printf(" %s %.3f ms",
                       k == 3   ? "max"
                       : k == 0 ? "p50"
                       : k == 1 ? "p90"
                                : "p99",
                       proof[idx]);
            }
            printf("\n");
        } else {
            printf("proof time: no verdicts yet\n");
        }
    }
    free(proof);
    free(ids);
    un_rulesdb_free(db);
    return st == UN_OK ? 0 : fail(ctx, st);
}

static void remove_db_files(const char *path) {
    char b[4200];
    unlink(path);
    snprintf(b, sizeof b, "%s-journal", path);
    unlink(b);
    snprintf(b, sizeof b, "%s-wal", path);
    unlink(b);
    snprintf(b, sizeof b, "%s-shm", path);
    unlink(b);
}

static int cmd_import(un_ctx *ctx, const un_spec *spec, const opts *o) {
    if (o->npos != 3)
        return usage_error("import wants a database and a FlexFlow JSON file%s", "");
    un_rulesdb *db = NULL;
    un_flexflow_import_stats s;
    un_buf rep = {0};
    bool existed = access(o->pos[1], F_OK) == 0;
    un_status st = open_db(ctx, o->pos[1], spec, UN_RULESDB_CREATE, &db);
    if (st == UN_OK)
        st = un_flexflow_import(ctx, db, o->pos[2], &s, o->quiet ? NULL : &rep);
    if (st == UN_OK) {
        if (rep.data)
            fputs(rep.data, stdout);
        printf("%s: parsed %lld, imported %lld, duplicates %lld, rejected %lld", o->pos[2],
               (long long)s.parsed, (long long)s.imported, (long long)s.duplicates,
               (long long)s.rejected);
        const char *sep = " (";
        for (int k = 0; k < UN_FLEXFLOW_REJECT_COUNT; k++)
            if (s.by_reason[k]) {
                printf("%s%s %lld", sep, un_flexflow_reject_name((un_flexflow_reject)k),
                       (long long)s.by_reason[k]);
                sep = ", ";
            }
        printf("%s\n", s.rejected ? ")" : "");
    }
    un_buf_deinit(&rep);
    un_rulesdb_free(db);
    if (st != UN_OK && !existed)
        remove_db_files(o->pos[1]); /* a failed import creates nothing */
    return st == UN_OK ? 0 : fail(ctx, st);
}

/* Writes text to path through a temporary file in the same folder and a rename. */
static un_status write_atomic(un_ctx *ctx, const char *path, const char *text, size_t len) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    bool ok = fwrite(text, 1, len, f) == len;
    ok = fflush(f) == 0 && ok;
    ok = fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write: %s", path, strerror(e));
    }
    return UN_OK;
}

static int cmd_export(un_ctx *ctx, const un_spec *spec, const opts *o) {
    if (o->npos != 2)
        return usage_error("export wants one database%s", "");
    if (!o->format || (strcmp(o->format, "flexflow") && strcmp(o->format, "json")))
        return usage_error("export needs --format flexflow or --format json%s", "");
    un_rulesdb_filter f;
    if (!parse_filter(ctx, o, &f))
        return fail(ctx, UN_ERR_INVALID);
    bool flexflow = strcmp(o->format, "flexflow") == 0;
    un_rulesdb *db = NULL;
    int32_t *ids = NULL;
    int64_t n = 0, m = 0, skipped = 0;
    un_rule **rules = NULL;
    char **names = NULL;
    un_buf out = {0}, rep = {0};
    un_status st = open_db(ctx, o->pos[1], spec, UN_RULESDB_READONLY, &db);
    if (st == UN_OK)
        st = un_rulesdb_rule_ids(ctx, db, &f, &ids, &n);
    if (st == UN_OK) {
        rules = un_xcalloc((size_t)n + 1, sizeof *rules);
        names = un_xcalloc((size_t)n + 1, sizeof *names);
    }
    if (st == UN_OK && !flexflow)
        un_buf_printf(&out, "{\"spec\": \"%016llx\", \"rules\": [",
                      (unsigned long long)un_rulesdb_spec_hash(db));
    for (int64_t i = 0; st == UN_OK && i < n; i++) {
        un_rulesdb_row *row = NULL;
        st = un_rulesdb_rule_get(ctx, db, ids[i], &row);
        if (st != UN_OK)
            break;
        if (row->rule && (o->status || row->status != UN_RULE_REJECTED)) {
            if (flexflow) {
                names[m] = un_xstrdup(row->origin_name ? row->origin_name : row->rule->name);
                if (!names[m][0]) {
                    free(names[m]);
                    char nm[32];
                    snprintf(nm, sizeof nm, "rule_%d", (int)row->id);
                    names[m] = un_xstrdup(nm);
                }
                rules[m++] = row->rule;
                row->rule = NULL;
            } else {
                un_buf_printf(&out,
                              "%s\n  {\"id\": %d, \"status\": \"%s\", \"hash\": \"%016llx\", ",
                              m ? "," : "", (int)row->id, un_rule_status_name(row->status),
                              (unsigned long long)row->hash);
                un_buf_printf(&out,
                              "\"trusted\": %s, \"detail\": ", row->trusted ? "true" : "false");
                if (row->detail)
                    un_buf_json_str(&out, row->detail);
                else
                    un_buf_printf(&out, "null");
                un_buf_printf(&out, ", \"proof_ms\": %.6g, \"rule\": ", row->proof_ms);
                st = un_rule_to_json(ctx, row->rule, &out);
                un_buf_printf(&out, "}");
                m++;
            }
        }
        un_rulesdb_row_free(row);
    }
    if (st == UN_OK && flexflow)
        st = un_flexflow_export(ctx, (const un_rule *const *)rules, (const char *const *)names, m,
                                &out, &skipped, &rep);
    else if (st == UN_OK)
        un_buf_printf(&out, "\n]}\n");
    if (st == UN_OK) {
        if (o->out)
            st = write_atomic(ctx, o->out, out.data, out.len);
        else
            fwrite(out.data, 1, out.len, stdout);
    }
    if (st == UN_OK) {
        if (rep.data)
            fputs(rep.data, stderr);
        fprintf(stderr, "exported %lld rules%s%s", (long long)(m - skipped), o->out ? " to " : "",
                o->out ? o->out : "");
        if (skipped)
            fprintf(stderr, " (%lld not expressible in FlexFlow's format)", (long long)skipped);
        fprintf(stderr, "\n");
    }
    for (int64_t i = 0; i < m && flexflow; i++) {
        un_rule_free(rules[i]);
        free(names[i]);
    }
    free(rules);
    free(names);
    un_buf_deinit(&out);
    un_buf_deinit(&rep);
    free(ids);
    un_rulesdb_free(db);
    return st == UN_OK ? 0 : fail(ctx, st);
}

static int cmd_check(un_ctx *ctx, const un_spec *spec, const opts *o) {
    if (o->npos != 2)
        return usage_error("check wants one database%s", "");
    un_rulesdb *db = NULL;
    int64_t bad = 0, counts[UN_RULE_STATUS_COUNT] = {0};
    un_buf rep = {0};
    un_status st = open_db(ctx, o->pos[1], spec, UN_RULESDB_READONLY, &db);
    if (st == UN_OK)
        st = un_rulesdb_check(ctx, db, &bad, &rep);
    if (st == UN_OK)
        st = un_rulesdb_count(ctx, db, counts);
    int rc = 0;
    if (st == UN_OK) {
        int64_t total = 0;
        for (int s = 0; s < UN_RULE_STATUS_COUNT; s++)
            total += counts[s];
        if (bad) {
            fputs(rep.data ? rep.data : "", stdout);
            fprintf(stderr, "unity-rules: %s: %lld problem%s found (listed above)\n", o->pos[1],
                    (long long)bad, bad == 1 ? "" : "s");
            rc = 1;
        } else {
            printf("%s: ok (%lld rules, schema version %d)\n", o->pos[1], (long long)total,
                   un_rulesdb_schema_version());
        }
    }
    un_buf_deinit(&rep);
    un_rulesdb_free(db);
    return st == UN_OK ? rc : fail(ctx, st);
}

static int cmd_merge(un_ctx *ctx, const un_spec *spec, const opts *o) {
    if (o->npos < 3 || !o->out)
        return usage_error("merge wants two or more databases and -o OUT.db%s", "");
    char wal[4200];
    snprintf(wal, sizeof wal, "%s-wal", o->out);
    if (access(wal, F_OK) == 0) {
        un_ctx_error(ctx, UN_ERR_IO,
                     "%s: its write-ahead log %s exists (in use, or not closed "
                     "cleanly): not replacing it",
                     o->out, wal);
        return fail(ctx, UN_ERR_IO);
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", o->out, (long)getpid());
    remove_db_files(tmp);
    un_rulesdb *out = NULL;
    un_status st = open_db(ctx, tmp, spec, UN_RULESDB_CREATE, &out);
    un_rulesdb_merge_stats total = {0};
    for (int i = 1; st == UN_OK && i < o->npos; i++) {
        un_rulesdb *src = NULL;
        un_rulesdb_merge_stats ms;
        st = open_db(ctx, o->pos[i], spec, UN_RULESDB_READONLY, &src);
        if (st == UN_OK)
            st = un_rulesdb_merge_ex(ctx, out, src, &ms);
        un_rulesdb_free(src);
        if (st == UN_OK) {
            printf("%s: %lld added, %lld already present (%lld with a better verdict taken, %lld "
                   "conflicting verdicts)\n",
                   o->pos[i], (long long)ms.added, (long long)ms.duplicates, (long long)ms.updated,
                   (long long)ms.conflicts);
            total.added += ms.added;
        }
    }
    un_rulesdb_free(out);
    if (st == UN_OK && rename(tmp, o->out) != 0)
        st = un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write: %s", o->out, strerror(errno));
    if (st != UN_OK) {
        remove_db_files(tmp);
        return fail(ctx, st);
    }
    remove_db_files(tmp); /* the -wal/-shm of the temporary name, if any */
    printf("%s: %lld rules\n", o->out, (long long)total.added);
    return 0;
}

/* ---- bench ------------------------------------------------------------------------------------
 */

/* A generator-like rule, distinct per i: two ops a side, over one or two inputs, e.g.
 * partition[dim=d,degree=k](u(x)) => u(partition[dim=d,degree=k](x)) or its ew_add variant. */
static un_status bench_rule(un_ctx *ctx, const un_spec *spec, int64_t i, un_rule **out) {
    static const un_op unary[] = {UN_OP_RELU, UN_OP_GELU, UN_OP_TANH, UN_OP_SIGMOID};
    int32_t k = 2 + (int32_t)(i / 10);
    int c = (int)(i % 10);
    int dim = c < 8 ? c / 4 : c - 8;
    bool binary = c >= 8;
    un_op u = unary[c % 4];
    un_param p[UN_MAX_PARAMS];
    un_spec_parallel_params(spec, UN_OP_PARTITION, dim, k, p);
    un_graph *g[2] = {un_graph_new(spec), un_graph_new(spec)};
    un_ref outs[2];
    un_status st = UN_OK;
    int64_t dims[2] = {2 * (int64_t)k, 2 * (int64_t)k};
    for (int s = 0; s < 2 && st == UN_OK; s++) {
        int32_t x, y = -1, a, b;
        st = un_graph_add_input(ctx, g[s], "x", UN_OP_INPUT, 2, dims, &x);
        if (st == UN_OK && binary)
            st = un_graph_add_input(ctx, g[s], "y", UN_OP_INPUT, 2, dims, &y);
        un_op first = binary ? UN_OP_EW_ADD : u;
        un_ref in2[2] = {{x, 0}, {y, 0}};
        if (s == 0) {
            if (st == UN_OK)
                st = un_graph_add(ctx, g[s], first, NULL, in2, binary ? 2 : 1, NULL, &a);
            if (st == UN_OK)
                st = un_graph_add(ctx, g[s], UN_OP_PARTITION, p, (un_ref[]){{a, 0}}, 1, NULL, &b);
        } else {
            int32_t px = -1, py = -1;
            if (st == UN_OK)
                st = un_graph_add(ctx, g[s], UN_OP_PARTITION, p, (un_ref[]){{x, 0}}, 1, NULL, &px);
            if (st == UN_OK && binary)
                st = un_graph_add(ctx, g[s], UN_OP_PARTITION, p, (un_ref[]){{y, 0}}, 1, NULL, &py);
            un_ref pin[2] = {{px, 0}, {py, 0}};
            if (st == UN_OK)
                st = un_graph_add(ctx, g[s], first, NULL, pin, binary ? 2 : 1, NULL, &b);
        }
        outs[s] = (un_ref){b, 0};
    }
    if (st == UN_OK)
        st = un_rule_make(ctx, g[0], g[1], &outs[0], &outs[1], 1, out);
    un_graph_free(g[0]);
    un_graph_free(g[1]);
    return st;
}

/* bench's temporary database (and its -wal, -shm, -journal files), removed on SIGINT and SIGTERM
 * too. */
static char bench_files[4][96];

static void bench_on_signal(int sig) {
    for (int i = 0; i < 4; i++)
        unlink(bench_files[i]); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

static int cmd_bench(un_ctx *ctx, const un_spec *spec, const opts *o) {
    if (o->npos != 1)
        return usage_error("bench takes no arguments ('%s')", o->pos[1]);
    int64_t n = o->bench_n ? o->bench_n : 100000;
    const char *ff = o->ff ? o->ff : "../shared/external/flexflow_graph_subst_3_v2.json";
    if (o->ff && access(o->ff, R_OK) != 0) {
        fprintf(stderr, "unity-rules: --ff %s: %s\n", o->ff, strerror(errno));
        return UN_EXIT_INPUT;
    }
    char path[64];
    snprintf(path, sizeof path, "%s/unity-rules-bench-%ld.db", un_tmp_dir(40), (long)getpid());
    static const char *const suffix[4] = {"", "-wal", "-shm", "-journal"};
    for (int i = 0; i < 4; i++)
        snprintf(bench_files[i], sizeof bench_files[i], "%s%s", path, suffix[i]);
    struct sigaction sa = {.sa_handler = bench_on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    remove_db_files(path);
    un_rulesdb *db = NULL;
    un_status st = un_rulesdb_open(ctx, path, spec, UN_RULESDB_CREATE, &db);
    double t0, t_build = 0, t_ins = 0;
    if (st == UN_OK && access(ff, R_OK) == 0) {
        un_flexflow_import_stats s;
        t0 = un_now_s();
        st = un_flexflow_import(ctx, db, ff, &s, NULL);
        double t = un_now_s() - t0;
        if (st == UN_OK)
            printf("flexflow import: %lld rules in %.1f ms (%.0f rules/s): %lld imported, %lld "
                   "duplicates, %lld rejected\n",
                   (long long)s.parsed, t * 1e3, (double)s.parsed / t, (long long)s.imported,
                   (long long)s.duplicates, (long long)s.rejected);
    } else if (st == UN_OK) {
        printf("flexflow import: %s not found, skipped\n", ff);
    }
    int64_t inserted = 0;
    const int64_t batch = 1000;
    for (int64_t i = 0; st == UN_OK && i < n; i += batch) {
        double tb = un_now_s();
        un_rule *rs[1000];
        int64_t m = n - i < batch ? n - i : batch;
        for (int64_t j = 0; j < m; j++)
            rs[j] = NULL;
        for (int64_t j = 0; st == UN_OK && j < m; j++)
            st = bench_rule(ctx, spec, i + j, &rs[j]);
        t_build += un_now_s() - tb;
        t0 = un_now_s();
        if (st == UN_OK)
            st = un_rulesdb_begin(ctx, db);
        for (int64_t j = 0; st == UN_OK && j < m; j++) {
            bool ins = false;
            st = un_rulesdb_rule_insert(ctx, db, rs[j], UN_RULE_CANDIDATE, NULL,
                                        &(un_rulesdb_origin){.kind = "generated"}, NULL, &ins);
            inserted += ins;
        }
        if (st == UN_OK)
            st = un_rulesdb_commit(ctx, db);
        t_ins += un_now_s() - t0;
        for (int64_t j = 0; j < m; j++)
            un_rule_free(rs[j]);
    }
    if (st == UN_OK)
        printf("insert: %lld generated-like rules (%lld new) in batches of %lld: %.2f s, %.0f "
               "rules/s (building them: %.2f s more)\n",
               (long long)n, (long long)inserted, (long long)batch, t_ins, (double)n / t_ins,
               t_build);
    int32_t *ids = NULL;
    int64_t nid = 0;
    un_rulesdb_filter f = un_rulesdb_filter_default();
    f.status = UN_RULE_CANDIDATE;
    if (st == UN_OK) {
        t0 = un_now_s();
        st = un_rulesdb_rule_ids(ctx, db, &f, &ids, &nid);
        if (st == UN_OK)
            printf("list candidates: %lld ids in %.1f ms\n", (long long)nid,
                   (un_now_s() - t0) * 1e3);
    }
    if (st == UN_OK) {
        t0 = un_now_s();
        st = un_rulesdb_begin(ctx, db);
        for (int64_t i = 0; st == UN_OK && i < nid; i++)
            st = un_rulesdb_rule_set_verdict(
                ctx, db, ids[i],
                &(un_rulesdb_verdict){.status = UN_RULE_VERIFIED, .proof_ms = 1, .axioms = "a,b"});
        if (st == UN_OK)
            st = un_rulesdb_commit(ctx, db);
        double t = un_now_s() - t0;
        if (st == UN_OK)
            printf("verdicts: %lld in one batch: %.2f s, %.0f/s\n", (long long)nid, t,
                   (double)nid / t);
    }
    free(ids);
    if (st == UN_OK) {
        un_rule **rules = NULL;
        int64_t nr = 0, stale = 0;
        t0 = un_now_s();
        st = un_rulesdb_load_verified(ctx, db, &rules, &nr, &stale);
        double t = un_now_s() - t0;
        if (st == UN_OK)
            printf("load verified: %lld rules in %.2f s (%.0f rules/s, each checked against its "
                   "hash)\n",
                   (long long)nr, t, (double)nr / t);
        for (int64_t i = 0; i < nr; i++)
            un_rule_free(rules[i]);
        free(rules);
    }
    struct stat sb;
    if (st == UN_OK && stat(path, &sb) == 0)
        printf("database: %.1f MB\n", (double)sb.st_size / 1e6);
    un_rulesdb_free(db);
    remove_db_files(path);
    return st == UN_OK ? 0 : fail(ctx, st);
}

int main(int argc, char **argv) {
    opts o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (o.npos == 0)
        return usage_error("no command given%s", "");
    static const struct {
        const char *name;
        int (*fn)(un_ctx *, const un_spec *, const opts *);
    } cmds[] = {{"list", cmd_list},     {"show", cmd_show},     {"stats", cmd_stats},
                {"import", cmd_import}, {"export", cmd_export}, {"check", cmd_check},
                {"merge", cmd_merge},   {"bench", cmd_bench}};
    int k = -1;
    for (int i = 0; i < (int)(sizeof cmds / sizeof cmds[0]); i++)
        if (strcmp(cmds[i].name, o.pos[0]) == 0)
            k = i;
    if (k < 0 && strcmp(o.pos[0], "apply") == 0) { /* rulesdb may not depend on search/ */
        fprintf(stderr, "unity-rules: apply is unity-rewrite DB GRAPH.json [--rule ID] [--list] "
                        "[-o OUT.json] [--dot OUT.dot] (search/rewrite_main.c)\n");
        return 2;
    }
    if (k < 0)
        return usage_error("unknown command '%s'", o.pos[0]);
    un_ctx *ctx = un_ctx_new(NULL);
    un_spec *spec = NULL;
    /* Without --spec or $UNITY_SPECS: the spec set stored in the database (by unity-gen), else
     * the spec files found as every program finds them (pcg/specpath.h). */
    const char *env = getenv("UNITY_SPECS");
    char *stored = NULL, spec_path[4096], name[4200];
    size_t len = 0;
    un_status st = UN_OK;
    if (!o.ops && !(env && *env) && o.npos >= 2 && strcmp(o.pos[0], "bench") != 0)
        st = un_rulesdb_spec_text_get(ctx, o.pos[1], &stored, &len);
    if (st != UN_OK && strcmp(o.pos[0], "check") == 0) {
        un_ctx_clear(ctx); /* check reports a damaged spec text itself */
        st = UN_OK;
    }
    if (st == UN_OK && stored) {
        snprintf(name, sizeof name, "%s: the stored spec set", o.pos[1]);
        st = un_spec_parse(ctx, name, stored, len, &spec);
    } else if (st == UN_OK) {
        st = un_specpath_find(ctx, o.ops, spec_path, sizeof spec_path);
        if (st == UN_OK)
            st = un_spec_load(ctx, spec_path, &spec);
    }
    free(stored);
    if (st != UN_OK) {
        rc = fail(ctx, st);
    } else {
        rc = cmds[k].fn(ctx, spec, &o);
    }
    un_spec_free(spec);
    un_ctx_free(ctx);
    return rc;
}
