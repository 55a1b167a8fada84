/* train_main.c - `unity-train`: parses the flags and calls un_train_run (runtime/train.h). It lives in
 * search/ because the binary is the search plus the runtime; runtime/ never depends on search/.
 * Its own flags: --estimate (print the simulator's estimate of a step instead of training),
 * --profile (time every operator's pieces into --rules' op-cost cache), --machine FILE,
 * --rules DB, --sim runtime|plan (what the estimate models: the runtime today or DESIGN.md §9). */
#include <stdio.h>
#include <string.h>

#include "runtime/train.h"
#include "search/profile.h"
#include "search/sim.h"

static const char usage_extra[] =
    "\nestimating and profiling (search/):\n"
    "  --estimate         print the estimated step time, its compute/communication split, the\n"
    "                     critical path's top operators and memory per device; do not train\n"
    "  --machine FILE     machine description (specs/machines/*.json; needed by --estimate)\n"
    "  --rules DB         rules.db: --estimate uses its measured op costs, --profile writes them\n"
    "  --profile          time each operator per piece shape on this CPU (1 device's threads)\n"
    "                     and store the times in DB's op-cost cache for the machine's device kind\n"
    "  --sim runtime|plan what --estimate models: the runtime today (whole weights on every\n"
    "                     device, one gradient all-reduce; default) or a plan's own semantics\n";

typedef struct search_opts {
    bool estimate, profile;
    const char *machine, *rules, *sim;
} search_opts;

/* Takes this file's flags out of argv (in place); the rest goes to un_train_parse_args. */
static int take_flags(un_ctx *ctx, int argc, char **argv, search_opts *s, un_status *st) {
    int n = 0;
    *st = UN_OK;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char **val = strcmp(a, "--machine") == 0 ? &s->machine
                           : strcmp(a, "--rules") == 0 ? &s->rules
                           : strcmp(a, "--sim") == 0   ? &s->sim
                                                       : NULL;
        if (val) {
            if (i + 1 >= argc) {
                *st = un_ctx_error(ctx, UN_ERR_INVALID, "%s needs a value", a);
                return 0;
            }
            *val = argv[++i];
        } else if (strcmp(a, "--estimate") == 0) {
            s->estimate = true;
        } else if (strcmp(a, "--profile") == 0) {
            s->profile = true;
        } else {
            argv[n++] = argv[i];
        }
    }
    if (s->sim && strcmp(s->sim, "runtime") != 0 && strcmp(s->sim, "plan") != 0)
        *st = un_ctx_error(ctx, UN_ERR_INVALID, "--sim: '%s' is not runtime or plan", s->sim);
    else if ((s->estimate || s->profile) && !s->machine)
        *st = un_ctx_error(ctx, UN_ERR_INVALID, "--%s needs --machine FILE",
                           s->estimate ? "estimate" : "profile");
    else if (s->profile && !s->rules)
        *st = un_ctx_error(ctx, UN_ERR_INVALID, "--profile needs --rules DB (the op-cost cache)");
    else if (s->estimate && s->profile)
        *st = un_ctx_error(ctx, UN_ERR_INVALID, "--estimate and --profile: pick one");
    else if (!s->estimate && !s->profile && (s->machine || s->rules || s->sim))
        *st = un_ctx_error(ctx, UN_ERR_INVALID,
                           "--machine, --rules and --sim go with --estimate or --profile");
    return n;
}

static un_status estimate_or_profile(un_ctx *ctx, const un_train_opts *o, const search_opts *s) {
    un_machine m;
    un_spec *spec = NULL;
    un_graph *g = NULL;
    rulesdb *db = NULL;
    un_cost_model *cm = NULL;
    un_sim_result r;
    memset(&r, 0, sizeof r);
    un_buf text = {0};
    int devices = 1;
    un_status st = un_machine_load(ctx, s->machine, &m);
    if (st == UN_OK)
        st = un_spec_load(ctx, o->spec, &spec);
    if (st == UN_OK)
        st = un_train_graph(ctx, spec, o, &g, &devices);
    if (st == UN_OK && s->rules)
        st = rulesdb_open(ctx, s->rules, spec, s->profile ? RULESDB_CREATE : RULESDB_READONLY, &db);
    if (st != UN_OK)
        goto done;
    if (s->profile) {
        un_profile_params pp = un_profile_params_default();
        pp.device = m.dev.kind;
        pp.threads = o->threads / devices > 1 ? o->threads / devices : 1;
        pp.f64 = o->prec == UN_PREC_F64;
        pp.optimizer = o->optimizer;
        int64_t n = 0;
        if (!o->quiet)
            printf("profiling %s on %d thread%s as device kind '%s':\n", o->model, pp.threads,
                   pp.threads == 1 ? "" : "s", m.dev.kind);
        st = un_profile_graph(ctx, db, g, &pp, o->quiet ? NULL : stdout, &n);
        if (st == UN_OK)
            printf("stored %lld op costs in %s\n", (long long)n, s->rules);
        goto done;
    }
    if ((st = un_cost_model_new(ctx, spec, &m,
                                o->prec == UN_PREC_F64 ? UN_MPREC_F64 : UN_MPREC_F32, db, &cm)) !=
        UN_OK)
        goto done;
    un_sim_params sp = un_sim_params_default();
    sp.mirror_sources = !s->sim || strcmp(s->sim, "runtime") == 0;
    sp.optimizer = o->optimizer;
    sp.devices = devices;
    if ((st = un_sim_run(ctx, cm, g, &sp, &r)) != UN_OK)
        goto done;
    fputs(un_cost_warnings(cm), stderr);
    un_sim_report(g, &r, cm, &text);
    int64_t q, c, meas;
    un_cost_stats(cm, &q, &c, &meas);
    printf("%s: %s, %s strategy, %s semantics\n%s", o->model,
           o->tiny ? "tiny" : "full size", o->strategy ? o->strategy : devices == 1 ? "serial" : "data",
           sp.mirror_sources ? "runtime" : "plan", text.data);
    printf("op costs: %lld queries, %lld cached, %lld measured (%s)\n", (long long)q,
           (long long)c, (long long)meas, db ? "rules.db op-cost cache" : "analytic only");
done:
    un_buf_free(&text);
    un_sim_result_free(&r);
    un_cost_model_free(cm);
    rulesdb_free(db);
    un_graph_free(g);
    un_spec_free(spec);
    return st;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(un_train_usage(), stdout);
            fputs(usage_extra, stdout);
            return 0;
        }
    un_ctx *ctx = un_ctx_new(NULL);
    un_train_opts o = un_train_opts_default();
    o.out = stdout;
    o.err = stderr;
    un_train_result r;
    memset(&r, 0, sizeof r);
    search_opts s;
    memset(&s, 0, sizeof s);
    un_status st;
    int n = take_flags(ctx, argc - 1, argv + 1, &s, &st);
    if (st == UN_OK)
        st = un_train_parse_args(ctx, n, argv + 1, &o);
    if (st == UN_OK && (s.estimate || s.profile))
        st = estimate_or_profile(ctx, &o, &s);
    else if (st == UN_OK)
        st = un_train_run(ctx, &o, &r);
    if (st != UN_OK && r.rank == 0 && !r.reported)
        fprintf(stderr, "unity-train: %s\n", un_ctx_errmsg(ctx));
    un_train_result_free(&r);
    un_ctx_free(ctx);
    return st == UN_OK ? 0 : 1;
}
