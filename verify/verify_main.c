/* verify_main.c - `unity-verify`: proves the candidate rules of a rule database with Z3 and writes
 * the verdicts back (verify/runner.h does the work; this file parses arguments and picks the exit
 * status: 0 done, 1 error, 2 usage). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pcg/cli.h"
#include "pcg/specpath.h"
#include "verify/runner.h"

static const char *usage =
    "unity-verify - prove the rules of a rule database with random tests and Z3\n\n"
    "usage: unity-verify RULES.DB [--spec DIR|FILE] [--timeout-ms T] [--wall-clock] [--jobs J]\n"
    "                    [--rule ID] [--max-ops K] [--recheck] [--shard I/N] [--lease S]\n"
    "                    [--audit-model]\n"
    "  Checks every spec axiom on concrete tensors, then verifies each rule that needs it:\n"
    "  random tests (refute), a Z3 proof (verify) and generalization over degrees.\n"
    "  --spec       operator specs: a directory holding ops.json, or the file (alias --ops;\n"
    "               default: $UNITY_SPECS, ./specs, else the installed share/unity/specs)\n"
    "  --timeout-ms Z3 budget per solver call (default 2000): counted in Z3's resource units\n"
    "               (T * 3500, about T ms of Z3 on the development machine), so verdicts do\n"
    "               not depend on the load; 10 T ms of wall clock stop a call in any case\n"
    "  --wall-clock the budget in wall-clock ms instead (verdicts then depend on the load)\n"
    "  --jobs       worker threads, one Z3 context each (default 1)\n"
    "  --rule       verify only this rule id\n"
    "  --max-ops    only rules of at most K operators per side (the stage before\n"
    "               unity-closure --verified-basis --basis-ops K; the rest stay candidates)\n"
    "  --recheck    re-verify every rule, verified ones included\n"
    "  --shard I/N  only rules with id %% N == I (to split the work over machines)\n"
    "  --lease S    claims on rules last S seconds unless renewed (default 60): verifiers\n"
    "               sharing a database split the work; a killed one's rules are free again\n"
    "               S seconds later\n"
    "  --audit-model run Z3's consistency check also where the shape model discharges it\n"
    "               (verify/README.md step 4) and count those that come back unsat (none\n"
    "               should; such a proof is then refused, as without the model)\n";

static bool parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static int fail_usage(const char *fmt, const char *arg) {
    fprintf(stderr, "unity-verify: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see --help)\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *db_path = NULL, *ops = NULL;
    un_runner_opts o = un_runner_opts_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long long v;
        bool has_val = i + 1 < argc;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            fputs(un_cli_help_footer(), stdout);
            return 0;
        } else if (strcmp(a, "--spec") == 0 || strcmp(a, "--ops") == 0) {
            if (!has_val)
                return fail_usage("%s needs a value", a);
            ops = argv[++i];
        } else if (strcmp(a, "--timeout-ms") == 0) {
            if (!has_val || !parse_int(argv[i + 1], 1, 3600000, &v))
                return fail_usage("--timeout-ms needs an integer in [1, 3600000], not '%s'",
                                  has_val ? argv[i + 1] : "");
            o.timeout_ms = (unsigned)v;
            i++;
        } else if (strcmp(a, "--wall-clock") == 0) {
            o.wall_clock = true;
        } else if (strcmp(a, "--jobs") == 0) {
            if (!has_val || !parse_int(argv[i + 1], 1, 64, &v))
                return fail_usage("--jobs needs an integer in [1, 64], not '%s'",
                                  has_val ? argv[i + 1] : "");
            o.jobs = (int)v;
            i++;
        } else if (strcmp(a, "--rule") == 0) {
            if (!has_val || !parse_int(argv[i + 1], 1, INT32_MAX, &v))
                return fail_usage("--rule needs a rule id (a positive integer), not '%s'",
                                  has_val ? argv[i + 1] : "");
            o.rule_id = (int32_t)v;
            i++;
        } else if (strcmp(a, "--max-ops") == 0) {
            if (!has_val || !parse_int(argv[i + 1], 1, 16, &v))
                return fail_usage("--max-ops needs an integer in [1, 16], not '%s'",
                                  has_val ? argv[i + 1] : "");
            o.max_ops = (int)v;
            i++;
        } else if (strcmp(a, "--lease") == 0) {
            if (!has_val || !parse_int(argv[i + 1], 1, 86400, &v))
                return fail_usage("--lease needs a number of seconds in [1, 86400], not '%s'",
                                  has_val ? argv[i + 1] : "");
            o.lease_s = (double)v;
            i++;
        } else if (strcmp(a, "--recheck") == 0) {
            o.recheck = true;
        } else if (strcmp(a, "--audit-model") == 0) {
            o.audit_model = true;
        } else if (strcmp(a, "--shard") == 0) {
            int si, sn;
            char extra;
            if (!has_val || sscanf(argv[i + 1], "%d/%d%c", &si, &sn, &extra) != 2 || sn < 1 ||
                si < 0 || si >= sn)
                return fail_usage("--shard needs I/N with 0 <= I < N, not '%s'",
                                  has_val ? argv[i + 1] : "");
            o.shard_i = si;
            o.shard_n = sn;
            i++;
        } else if (a[0] == '-' && a[1]) {
            return fail_usage("unknown option '%s'", a);
        } else if (!db_path) {
            db_path = a;
        } else {
            return fail_usage("more than one database given ('%s')", a);
        }
    }
    if (!db_path)
        return fail_usage("%s", "no rule database given");
    if (o.rule_id > 0 && o.max_ops > 0)
        return fail_usage("%s", "--max-ops does not go with --rule");

    char spec_path[4096];
    struct stat sb;
    if (access(db_path, F_OK) != 0) {
        fprintf(stderr, "unity-verify: %s: no such rule database\n", db_path);
        return 1;
    }
    if (stat(db_path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "unity-verify: %s: is a directory, not a rule database\n", db_path);
        return 1;
    }

    int rc = 1;
    un_ctx *ctx = un_ctx_new(NULL);
    if (isatty(STDERR_FILENO))
        un_ctx_set_progress(ctx, un_progress_stderr, NULL);
    un_spec *spec = NULL;
    un_runner_stats s;
    un_status st = un_specpath_find(ctx, ops, spec_path, sizeof spec_path);
    if (st == UN_OK)
        st = un_spec_load(ctx, spec_path, &spec);
    if (st == UN_OK)
        st = un_runner_run(ctx, spec, db_path, &o, &s);
    if (st != UN_OK) {
        fprintf(stderr, "unity-verify: %s: %s\n", un_status_str(st), un_ctx_errmsg(ctx));
        goto done;
    }
    double secs = s.wall_ms / 1e3;
    printf("axioms: %d checked on concrete tensors, %d lifted forms (extra leading dims) hold too "
           "(%.1f s)\n",
           s.n_axioms, s.n_lifted, s.axcheck_ms / 1e3);
    printf("%s: %lld rules: %lld verified (%lld for any input size, %lld for every value of their "
           "variables, %lld generalized over degrees here), %lld refuted, %lld unknown",
           db_path, (long long)s.total, (long long)s.verified, (long long)s.any_shape,
           (long long)s.with_vars, (long long)s.generalized, (long long)s.refuted,
           (long long)s.unknown);
    if (s.skipped)
        printf(", %lld skipped (no rule)", (long long)s.skipped);
    if (s.dim_generic)
        printf("; %lld made dimension-generic (sizes as dim variables)", (long long)s.dim_generic);
    printf("; %.1f s, %.1f rules/s, median %.1f ms, p99 %.1f ms per rule\n", secs,
           secs > 0 ? (double)s.total / secs : 0.0, s.median_ms, s.p99_ms);
    const double *ph = s.cpu_ms;
    printf("cpu time per phase: random tests %.1f s, z3 %.1f s (%lld of %lld outputs proven by "
           "the narrow axiom set), generalization %.1f s, database %.1f s (claims %.1f, reading "
           "%.1f, writing %.1f), worker setup %.1f s\n",
           ph[UN_VERIFY_PHASE_TESTS] / 1e3, ph[UN_VERIFY_PHASE_Z3] / 1e3, (long long)s.narrow,
           (long long)s.outputs, ph[UN_VERIFY_PHASE_GENERAL] / 1e3,
           (ph[UN_VERIFY_PHASE_CLAIM] + ph[UN_VERIFY_PHASE_READ] + ph[UN_VERIFY_PHASE_WRITE]) / 1e3,
           ph[UN_VERIFY_PHASE_CLAIM] / 1e3, ph[UN_VERIFY_PHASE_READ] / 1e3,
           ph[UN_VERIFY_PHASE_WRITE] / 1e3, s.setup_ms / 1e3);
    printf("z3 work: %.1f M resource units (%.0f k per rule; machine- and load-independent)\n",
           (double)s.work / 1e6, s.total ? (double)s.work / 1e3 / (double)s.total : 0.0);
    static const char *const kinds[UN_WORK_COUNT] = {"narrow proofs",
                                                     "narrow attempts that failed",
                                                     "full-set checks",
                                                     "consistency checks",
                                                     "consistency by the shape model",
                                                     "shape-correctness proofs",
                                                     "outside the checks (proofs)"};
    printf("z3 work by kind:");
    for (int k = 0; k < UN_WORK_COUNT; k++)
        printf("%s %s %.1f M (%lld)", k ? ";" : "", kinds[k], (double)s.work_by[k] / 1e6,
               (long long)s.calls_by[k]);
    printf("; of all, dims forms %.1f M, witness-size retries %.1f M\n", (double)s.work_dims / 1e6,
           (double)s.work_witness / 1e6);
    if (o.audit_model)
        printf("shape model audit: %lld consistency checks it discharged run by z3 too, %lld of "
               "them unsat\n",
               (long long)s.calls_by[UN_WORK_MODEL], (long long)s.audit_unsat);
    rc = 0;
done:
    un_spec_free(spec);
    un_ctx_free(ctx);
    return rc;
}
