/* train_main.c - `unity-train`: parses the flags and calls un_train_run (runtime/train.h), or
 * first the search (search/search.h) when --machine comes without --estimate or --profile. It
 * lives in search/ because the binary is the search plus the runtime; runtime/ never depends on
 * search/. Its own flags: --estimate (print the simulator's estimate of a step instead of
 * training), --profile (time every operator's pieces into --rules' op-cost cache), --machine FILE,
 * --rules DB, --sim runtime|plan (what the estimate models: the runtime today or DESIGN.md §9),
 * and the search's: --search, --only-data-parallel, --no-parallel, --plan-only, --export, --dot,
 * --search-time, --budget, and layer 2's: --rules (the rewrites), --alpha, --no-rewrites. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "pcg/cli.h"
#include "pcg/onnx.h"
#include "pcg/specpath.h"
#include "runtime/backend_cuda.h"
#include "runtime/train.h"
#include "runtime/zoo.h"
#include "search/profile.h"
#include "search/search.h"
#include "search/sim.h"

static const char usage_extra[] =
    "\nestimating and profiling (search/):\n"
    "  --estimate         print the estimated step time, its compute/communication split, the\n"
    "                     critical path's top operators and memory per device; do not train\n"
    "  --machine FILE     machine description (specs/machines/*.json; needed by --estimate)\n"
    "  --rules DB         rules.db: --estimate uses its measured op costs, --profile writes them\n"
    "  --profile          time each operator per piece shape, the optimizer step and the loss\n"
    "                     on --backend as the run has them (cpu: its device threads; cuda: the\n"
    "                     GPU, whose name must match the machine's device kind) and store the\n"
    "                     times in DB's op-cost cache for that kind\n"
    "  --profile-rounds N replay the step's ops in N rounds spread over 2 s and keep the one\n"
    "                     that ran fastest, whole (1..16; default 3; 1: one replay): a shared\n"
    "                     machine runs work up to 1.4x slower for seconds at a time\n"
    "  --sim runtime|plan what --estimate models: the runtime today (whole weights on every\n"
    "                     device, one gradient all-reduce; default) or a plan's own semantics\n"
    "\nsearching (search/): --machine without --estimate or --profile searches, then trains\n"
    "  --search MODE      joint (default: with --rules, best-first rewriting by the verified\n"
    "                     algebraic rules, each graph costed by the parallelization layer;\n"
    "                     every operator's parallelization by dynamic programming, memory a\n"
    "                     constraint), data, serial, mcmc (FlexFlow's SysML'19 random walk\n"
    "                     over per-operator configurations), or taso (rewrites by the serial\n"
    "                     cost on one device first, then the parallelization)\n"
    "  --rules DB         searching: rewrite with DB's verified rules (forwards and backwards)\n"
    "  --sim plan|runtime searching: rank plans by the simulator under a plan's own semantics\n"
    "                     (default with --plan-only) or under what the runtime executes\n"
    "                     today (default when the plan is trained right after the search)\n"
    "  --alpha X          rewriting: drop graphs costlier than X times the best (>= 1; 1.05)\n"
    "  --no-rewrites      joint without rewriting (parallelization only; DB still gives op costs)\n"
    "  --only-data-parallel, --no-parallel   the same as --search data, --search serial\n"
    "  --devices D        devices to plan for (default: all of the machine's)\n"
    "  --plan-only        search and report; do not train\n"
    "  --export FILE      write the plan (pcg JSON with parallel ops and machine views) for\n"
    "                     --strategy FILE\n"
    "  --dot FILE         write the plan as Graphviz DOT\n"
    "  --search-time S    wall-clock limit of the whole search in seconds (default 60; the\n"
    "                     rewriting gets half)\n"
    "  --budget N         mcmc proposals (default 20000) and graphs the rewriting costs\n"
    "                     (default 1000; in joint per distinct piece)\n"
    "  --split-size K     layer 1: pieces of at most K nodes between cut nodes, which the\n"
    "                     rewriting searches one by one (default 10)\n"
    "\nruntime environment (runtime/README.md):\n"
    "  UN_SPIN_US=US      a wait for another device polls at most US microseconds before it\n"
    "                     sleeps (default 50; 0: sleep at once; no polling when other\n"
    "                     processes' runnable threads outnumber the cores left free)\n"
    "  UN_MEET_TRACE=P    write each rank's meets and step phases to P.RANK (one event a line;\n"
    "                     scripts/bench/meet_skew.py P reads them)\n";

typedef struct search_opts {
    bool estimate, profile, plan_only, no_rewrites;
    const char *machine, *rules, *sim, *mode, *export, *dot, *time, *budget, *alpha, *split;
    const char *rounds; /* --profile-rounds */
    const char *alias;  /* --only-data-parallel or --no-parallel */
} search_opts;

/* Takes this file's flags out of argv (in place); the rest goes to un_train_parse_args. */
static int take_flags(un_ctx *ctx, int argc, char **argv, search_opts *s, un_status *st) {
    int n = 0;
    *st = UN_OK;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char **val = strcmp(a, "--machine") == 0          ? &s->machine
                           : strcmp(a, "--rules") == 0          ? &s->rules
                           : strcmp(a, "--sim") == 0            ? &s->sim
                           : strcmp(a, "--search") == 0         ? &s->mode
                           : strcmp(a, "--export") == 0         ? &s->export
                           : strcmp(a, "--dot") == 0            ? &s->dot
                           : strcmp(a, "--search-time") == 0    ? &s->time
                           : strcmp(a, "--budget") == 0         ? &s->budget
                           : strcmp(a, "--alpha") == 0          ? &s->alpha
                           : strcmp(a, "--split-size") == 0     ? &s->split
                           : strcmp(a, "--profile-rounds") == 0 ? &s->rounds
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
        } else if (strcmp(a, "--plan-only") == 0) {
            s->plan_only = true;
        } else if (strcmp(a, "--no-rewrites") == 0) {
            s->no_rewrites = true;
        } else if (strcmp(a, "--only-data-parallel") == 0 || strcmp(a, "--no-parallel") == 0) {
            s->alias = a;
        } else if (strcmp(a, "--ops") == 0) {
            static char spec_flag[] = "--spec"; /* --ops is an alias */
            argv[n++] = spec_flag;
        } else {
            argv[n++] = argv[i];
        }
    }
    if (s->alias) {
        const char *m = s->alias[5] == 'o' ? "data" : "serial";
        if (s->mode && strcmp(s->mode, m) != 0) {
            *st =
                un_ctx_error(ctx, UN_ERR_INVALID, "%s contradicts --search %s", s->alias, s->mode);
            return 0;
        }
        s->mode = m;
    }
    if (s->sim && strcmp(s->sim, "runtime") != 0 && strcmp(s->sim, "plan") != 0)
        *st = un_ctx_error(ctx, UN_ERR_INVALID, "--sim: '%s' is not runtime or plan", s->sim);
    else if ((s->estimate || s->profile) && !s->machine)
        *st = un_ctx_error(ctx, UN_ERR_INVALID, "--%s needs --machine FILE",
                           s->estimate ? "estimate" : "profile");
    else if (s->rounds && !s->profile)
        *st = un_ctx_error(ctx, UN_ERR_INVALID, "--profile-rounds goes with --profile");
    else if (s->profile && !s->rules)
        *st = un_ctx_error(ctx, UN_ERR_INVALID, "--profile needs --rules DB (the op-cost cache)");
    else if (s->estimate && s->profile)
        *st = un_ctx_error(ctx, UN_ERR_INVALID, "--estimate and --profile: pick one");
    else if (!s->estimate && !s->profile && !s->machine && (s->rules || s->sim))
        *st = un_ctx_error(ctx, UN_ERR_INVALID,
                           "--rules and --sim go with --machine (search), --estimate or --profile");
    else if ((s->estimate || s->profile || !s->machine) &&
             (s->mode || s->export || s->dot || s->time || s->budget || s->plan_only || s->alpha ||
              s->no_rewrites || s->split))
        *st = un_ctx_error(ctx, UN_ERR_INVALID,
                           "--search, --export, --dot, --plan-only, --search-time, --budget, "
                           "--alpha, --no-rewrites and --split-size go with --machine and without "
                           "--estimate or --profile");
    return n;
}

static un_status estimate_or_profile(un_ctx *ctx, const un_train_opts *o, const search_opts *s) {
    un_machine m;
    un_spec *spec = NULL;
    un_graph *g = NULL;
    un_rulesdb *db = NULL;
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
    un_loss_kind loss = UN_LOSS_CE;
    if (st == UN_OK)
        st = un_train_loss(ctx, spec, o, &loss);
    if (st == UN_OK && s->rules)
        st = un_rulesdb_open(ctx, s->rules, spec,
                             s->profile ? UN_RULESDB_CREATE : UN_RULESDB_READONLY, &db);
    if (st != UN_OK)
        goto done;
    if (s->profile) {
        un_profile_params pp = un_profile_params_default();
        pp.device = m.dev.kind;
        pp.threads = o->threads / devices > 1 ? o->threads / devices : 1;
        pp.f64 = o->prec == UN_PREC_F64;
        pp.optimizer = o->optimizer;
        pp.value_sets = o->data ? 0 : UN_TRAIN_SYNTHETIC_BATCHES; /* as the run's batches */
        pp.loss = loss;
        if (s->rounds) {
            char *end;
            long k = strtol(s->rounds, &end, 10);
            if (*end || end == s->rounds || k < 1 || k > UN_PROFILE_MAX_ROUNDS) {
                st = un_ctx_error(ctx, UN_ERR_INVALID,
                                  "--profile-rounds: '%s' is not a whole number in 1..%d",
                                  s->rounds, UN_PROFILE_MAX_ROUNDS);
                goto done;
            }
            pp.rounds = (int)k;
        }
        const char *backend;
        int gpus;
        char where[192];
        un_train_opts ob = *o; /* by default a cpu machine file is profiled on the cpu */
        if (!ob.backend && strcmp(m.dev.kind, "cpu") == 0)
            ob.backend = "cpu";
        if ((st = un_train_backend(ctx, &ob, &backend, &gpus)) != UN_OK)
            goto done;
        snprintf(where, sizeof where, "%d thread%s", pp.threads, pp.threads == 1 ? "" : "s");
        pp.opaque = un_backend_is_opaque(backend);
        if (strcmp(backend, "cuda") == 0) {
            /* GPU 0's costs go under the machine file's device kind, which must name that GPU */
            char gpu[128];
            un_backend_cuda_device_name(0, gpu, sizeof gpu);
            if (!un_profile_kind_matches(m.dev.kind, gpu)) {
                st = un_ctx_error(ctx, UN_ERR_INVALID,
                                  "--profile on GPU 0 (%s): the device kind of --machine %s is "
                                  "'%s', which does not name this GPU (costs would be stored for "
                                  "another device)",
                                  gpu, s->machine, m.dev.kind);
                goto done;
            }
            pp.cuda_device = 0;
            snprintf(where, sizeof where, "GPU 0 (%s)", gpu);
        }
        int64_t n = 0;
        if (!o->quiet)
            printf("profiling %s on %s (backend %s) as device kind '%s':\n", o->model, where,
                   backend, m.dev.kind);
        st = un_profile_graph(ctx, db, g, &pp, o->quiet ? NULL : stdout, &n);
        if (st == UN_OK)
            printf("stored %lld op costs in %s\n", (long long)n, s->rules);
        goto done;
    }
    if ((st = un_cost_model_new(ctx, spec, &m, o->prec == UN_PREC_F64 ? UN_MPREC_F64 : UN_MPREC_F32,
                                db, &cm)) != UN_OK)
        goto done;
    un_cost_model_set_loss(cm, loss);
    bool runtime = !s->sim || strcmp(s->sim, "runtime") == 0;
    if ((st = un_search_estimate(ctx, cm, g, runtime, o->optimizer, devices, &r)) != UN_OK)
        goto done;
    fputs(un_cost_warnings(cm), stderr);
    un_sim_report(g, &r, cm, &text);
    int64_t q, c, meas, pm, scaled, pa;
    un_cost_stats(cm, &q, &c, &meas);
    un_cost_pieces(cm, &pm, &scaled, &pa);
    printf("%s: %s, %s strategy, %s semantics\n%s", o->model, o->tiny ? "tiny" : "full size",
           o->strategy    ? o->strategy
           : devices == 1 ? "serial"
                          : "data",
           runtime ? "runtime" : "plan", text.data);
    printf("op costs: %lld queries, %lld cached, %lld measured (%s)", (long long)q, (long long)c,
           (long long)meas, db ? "rules.db op-cost cache" : "analytic only");
    if (scaled)
        printf(", %lld scaled from measured pieces of the same op", (long long)scaled);
    printf("\n");
done:
    un_buf_deinit(&text);
    un_sim_result_deinit(&r);
    un_cost_model_free(cm);
    un_rulesdb_free(db);
    un_graph_free(g);
    un_spec_free(spec);
    return st;
}

/* Writes text to path; one error naming the file on failure. */
static un_status write_file(un_ctx *ctx, const char *path, const un_buf *b) {
    FILE *f = fopen(path, "w");
    if (!f)
        return un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    bool ok = fwrite(b->data, 1, b->len, f) == b->len;
    ok = fclose(f) == 0 && ok;
    return ok ? UN_OK : un_ctx_error(ctx, UN_ERR_IO, "%s: write failed", path);
}

/* The plan runs a rewritten graph: writes it to a temporary JSON file (name in path) and points
 * o at it as the model, with the zoo model's loss (a JSON model's default is MSE); the weights
 * (initialised by name and shape) and the synthetic data are the zoo model's. */
static un_status rewritten_model(un_ctx *ctx, const un_spec *spec, un_train_opts *o,
                                 const un_graph *g, char *path, size_t cap) {
    size_t len = strlen(o->model);
    bool is_json = len > 5 && strcmp(o->model + len - 5, ".json") == 0;
    if (!is_json) {
        un_zoo_config c;
        memset(&c, 0, sizeof c);
        un_model zm;
        memset(&zm, 0, sizeof zm);
        un_status st = o->config ? un_zoo_config_parse(ctx, o->config, &c) : UN_OK;
        if (st == UN_OK && o->batch)
            c.batch = o->batch;
        if (st == UN_OK)
            st = un_zoo_build_config(ctx, spec, o->model, o->tiny, &c, &zm);
        if (st != UN_OK)
            return st;
        o->loss = zm.loss == UN_LOSS_CE ? "ce" : "mse";
        un_model_deinit(&zm);
        o->tiny = false;
        o->batch = 0;
        o->config = NULL;
    }
    un_buf js = {0};
    snprintf(path, cap, "%s/unity-rewritten-XXXXXX.json", un_tmp_dir(4000));
    int fd = mkstemps(path, 5);
    if (fd < 0) {
        path[0] = '\0';
        return un_ctx_error(ctx, UN_ERR_IO, "cannot create a temporary graph file: %s",
                            strerror(errno));
    }
    close(fd);
    un_status st = un_graph_to_json(ctx, g, &js);
    if (st == UN_OK)
        st = write_file(ctx, path, &js);
    un_buf_deinit(&js);
    o->model = path;
    return st;
}

/* --machine without --estimate/--profile: search, report, export, then train with the plan. */
static un_status search_and_train(un_ctx *ctx, un_train_opts *o, const search_opts *s,
                                  un_train_result *res) {
    un_search_params p = un_search_params_default(0);
    if (s->mode) {
        int k = 0;
        while (k < UN_SEARCH_COUNT && strcmp(s->mode, un_search_mode_name((un_search_mode)k)) != 0)
            k++;
        if (k == UN_SEARCH_COUNT)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "--search: '%s' is not joint, data, serial, mcmc or taso", s->mode);
        p.mode = (un_search_mode)k;
    }
    if (s->alpha) {
        char *end;
        p.alpha = strtod(s->alpha, &end);
        if (!*s->alpha || *end || !(p.alpha >= 1) || p.alpha > 1e6)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "--alpha: '%s' is not a number in 1..1e6 (graphs costlier than "
                                "alpha x the best are dropped)",
                                s->alpha);
    }
    if (s->no_rewrites && p.mode == UN_SEARCH_TASO)
        return un_ctx_error(ctx, UN_ERR_INVALID, "--no-rewrites contradicts --search taso");
    if (p.mode == UN_SEARCH_TASO && !s->rules)
        return un_ctx_error(ctx, UN_ERR_INVALID, "--search taso needs --rules DB (the rewrites)");
    if (s->time) {
        char *end;
        p.time_limit = strtod(s->time, &end);
        if (*end || !(p.time_limit > 0) || p.time_limit > 1e6)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "--search-time: '%s' is not a number of seconds > 0", s->time);
    }
    if (s->budget) {
        char *end;
        long long b = strtoll(s->budget, &end, 10);
        if (*end || b < 1 || b > 1000000000LL)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "--budget: '%s' is not a whole number in 1..1e9", s->budget);
        p.budget = b;
        p.subst_budget = b;
    }
    if (s->split) {
        char *end;
        long k = strtol(s->split, &end, 10);
        if (*end || k < 1 || k > 1000000)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "--split-size: '%s' is not a whole number of nodes in 1..1e6",
                                s->split);
        p.split_size = (int)k;
    }
    /* a plan trained right after the search runs on this runtime: ranked by what it executes */
    p.sim_runtime = s->sim ? strcmp(s->sim, "runtime") == 0 : !s->plan_only;
    if (o->strategy)
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "--strategy and --machine (a search): pick one (--estimate "
                            "estimates a given strategy)");
    un_machine m;
    un_spec *spec = NULL;
    un_graph *g = NULL;
    un_rulesdb *db = NULL;
    un_ruleset *rules = NULL;
    un_cost_model *cm = NULL;
    un_search_result r;
    memset(&r, 0, sizeof r);
    un_buf text = {0}, js = {0};
    char tmp[4200] = "", gtmp[4200] = "";
    un_status st = un_machine_load(ctx, s->machine, &m);
    int devices = o->devices > 0 ? o->devices : st == UN_OK ? un_machine_devices(&m) : 1;
    p.devices = devices;
    p.optimizer = o->optimizer;
    if (st == UN_OK && devices > un_machine_devices(&m))
        st = un_ctx_error(ctx, UN_ERR_INVALID, "--devices %d: machine %s has %d devices", devices,
                          s->machine, un_machine_devices(&m));
    if (st == UN_OK)
        st = un_spec_load(ctx, o->spec, &spec);
    if (st == UN_OK) {
        un_train_opts so = *o; /* the model as given; its views checked against the devices */
        so.devices = devices;
        so.strategy = "serial";
        int one;
        st = un_train_graph(ctx, spec, &so, &g, &one);
    }
    if (st == UN_OK && s->rules)
        st = un_rulesdb_open(ctx, s->rules, spec, UN_RULESDB_READONLY, &db);
    bool layer2 = p.mode == UN_SEARCH_JOINT || p.mode == UN_SEARCH_TASO;
    if (st == UN_OK && s->rules && layer2 && !s->no_rewrites) {
        un_ruleset_params rp = un_ruleset_params_default();
        rp.reversed = true;
        un_ruleset_stats rs;
        st = un_ruleset_load(ctx, db, &rp, &rules, &rs);
        if (st == UN_OK && !o->quiet)
            printf("rules: %lld verified rules loaded from %s (%lld entries with the reversed "
                   "ones, %lld stale skipped) in %.3f s\n",
                   (long long)rs.verified, s->rules, (long long)rs.loaded, (long long)rs.stale,
                   rs.load_s);
        p.rules = rules;
    }
    if (st == UN_OK)
        st = un_cost_model_new(ctx, spec, &m, o->prec == UN_PREC_F64 ? UN_MPREC_F64 : UN_MPREC_F32,
                               db, &cm);
    un_loss_kind loss = UN_LOSS_CE; /* the run's: its profiled time is looked up */
    if (st == UN_OK && (st = un_train_loss(ctx, spec, o, &loss)) == UN_OK)
        un_cost_model_set_loss(cm, loss);
    if (st == UN_OK && !o->quiet && isatty(2))
        fprintf(stderr, "searching %s (%s) on %d devices of %s...\n", o->model,
                o->tiny ? "tiny" : "full size", devices, m.name);
    if (st == UN_OK)
        st = un_search_run(ctx, cm, g, &p, &r);
    if (st != UN_OK)
        goto done;
    fputs(un_cost_warnings(cm), stderr);
    un_search_report(&r, g, &p, cm, &text);
    fputs(text.data, stdout);
    if ((st = un_graph_to_json(ctx, r.plan, &js)) != UN_OK)
        goto done;
    if (s->export && (st = write_file(ctx, s->export, &js)) == UN_OK)
        printf("plan written to %s (train it: --strategy %s --devices %d)\n", s->export, s->export,
               r.devices_used);
    if (st == UN_OK && s->dot) {
        un_buf dot = {0}; /* the optimized PCG: the plan of the rewritten graph when rewritten */
        st = un_graph_to_dot(ctx, r.plan, &dot);
        if (st == UN_OK && (st = write_file(ctx, s->dot, &dot)) == UN_OK)
            printf("plan DOT written to %s\n", s->dot);
        un_buf_deinit(&dot);
    }
    if (st != UN_OK || s->plan_only)
        goto done;
    const char *path = s->export;
    if (!path) {
        snprintf(tmp, sizeof tmp, "%s/unity-plan-XXXXXX.json", un_tmp_dir(4000));
        int fd = mkstemps(tmp, 5);
        if (fd < 0) {
            st = un_ctx_error(ctx, UN_ERR_IO, "cannot create a temporary plan file: %s",
                              strerror(errno));
            tmp[0] = '\0';
            goto done;
        }
        close(fd);
        if ((st = write_file(ctx, tmp, &js)) != UN_OK)
            goto done;
        path = tmp;
    }
    if (r.graph) { /* the plan runs the rewritten graph: train that as a JSON model */
        if (un_onnx_is_path(o->model)) {
            st = un_ctx_error(ctx, UN_ERR_INVALID,
                              "%s: training an ONNX model with a rewritten graph is not supported "
                              "(its initializers belong to the original graph); use --plan-only or "
                              "--no-rewrites",
                              o->model);
            goto done;
        }
        if ((st = rewritten_model(ctx, spec, o, r.graph, gtmp, sizeof gtmp)) != UN_OK)
            goto done;
    }
    printf("training with the plan on %d device%s\n", r.devices_used,
           r.devices_used == 1 ? "" : "s");
    fflush(stdout);
    o->strategy = path;
    o->devices = r.devices_used;
    st = un_train_run(ctx, o, res);
done:
    if (tmp[0])
        remove(tmp);
    if (gtmp[0])
        remove(gtmp);
    un_buf_deinit(&text);
    un_buf_deinit(&js);
    un_search_result_deinit(&r);
    un_ruleset_free(rules);
    un_cost_model_free(cm);
    un_rulesdb_free(db);
    un_graph_free(g);
    un_spec_free(spec);
    return st;
}

/* Refuses a --batch whose training could not fit in this machine's memory before anything is
 * allocated: every tensor of the graph un_train_run would execute (logical sizes: a lower bound)
 * with its gradient, and two optimizer states per weight. */
static un_status check_memory(un_ctx *ctx, const un_train_opts *o) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (!o->batch || pages <= 0 || page <= 0)
        return UN_OK;
    un_spec *spec = NULL;
    un_graph *g = NULL;
    int devices = 1;
    un_status st = un_spec_load(ctx, o->spec, &spec);
    if (st == UN_OK)
        st = un_train_graph(ctx, spec, o, &g, &devices);
    double es = o->prec == UN_PREC_F32 ? 4 : 8, bytes = 0;
    for (int32_t id = 0; st == UN_OK && id < un_graph_node_count(g); id++) {
        const un_node *nd = un_graph_node(g, id);
        for (int k = 0; k < nd->inf.n_out; k++)
            bytes +=
                (double)un_shape_numel(&nd->inf.out[k]) * es * (nd->op == UN_OP_WEIGHT ? 4 : 2);
    }
    double phys = (double)pages * (double)page;
    if (st == UN_OK && bytes > phys)
        st = un_ctx_error(ctx, UN_ERR_INVALID,
                          "--batch %lld: training %s needs at least %.1f GiB (tensors, gradients, "
                          "optimizer state), more than this machine's %.1f GiB of memory",
                          (long long)o->batch, o->model, bytes / 1073741824.0, phys / 1073741824.0);
    un_graph_free(g);
    un_spec_free(spec);
    return st;
}

/* After --save failed: says why, by writing a probe file beside it (the checkpoint code reports
 * only that the write failed): e.g. "No space left on device", with the space left there. */
static void explain_save_failure(un_ctx *ctx, const char *save) {
    char msg[1024], probe[4200];
    snprintf(msg, sizeof msg, "%s", un_ctx_errmsg(ctx));
    snprintf(probe, sizeof probe, "%s.probe-XXXXXX", save);
    int err = 0, fd = mkstemp(probe);
    if (fd < 0) {
        err = errno;
    } else {
        static const char zeros[1 << 16];
        for (int i = 0; i < 64 && !err; i++)
            if (write(fd, zeros, sizeof zeros) != (ssize_t)sizeof zeros)
                err = errno ? errno : ENOSPC;
        if (!err && fsync(fd) != 0)
            err = errno;
        close(fd);
        unlink(probe);
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", save);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    un_ctx_clear(ctx); /* the first error would stay */
    struct statvfs vs;
    double free_mib =
        statvfs(dir, &vs) == 0 ? (double)vs.f_bavail * (double)vs.f_frsize / 1048576.0 : -1;
    if (err)
        un_ctx_error(ctx, UN_ERR_IO, "%s: writing in %s fails: %s (%.1f MiB free there)", msg, dir,
                     strerror(err), free_mib);
    else
        un_ctx_error(ctx, UN_ERR_IO, "%s (%.1f MiB free in %s)", msg, free_mib, dir);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs("unity-train - train a model on CPU threads or MPI processes as devices\n\n",
                  stdout);
            fputs(un_train_usage(), stdout);
            fputs(usage_extra, stdout);
            fputs(un_cli_help_footer(), stdout);
            return 0;
        }
    un_ctx *ctx = un_ctx_new(NULL);
    if (isatty(STDERR_FILENO))
        un_ctx_set_progress(ctx, un_progress_stderr, NULL);
    un_train_opts o = un_train_opts_default();
    o.out = stdout;
    o.err = stderr;
    un_train_result r;
    memset(&r, 0, sizeof r);
    search_opts s;
    memset(&s, 0, sizeof s);
    un_status st;
    int n = take_flags(ctx, argc - 1, argv + 1, &s, &st);
    o.spec = NULL;
    if (st == UN_OK)
        st = un_train_parse_args(ctx, n, argv + 1, &o);
    int rc = st == UN_OK ? UN_EXIT_INPUT : UN_EXIT_USAGE; /* if anything fails */
    static char spec_path[4096];
    if (st == UN_OK && (st = un_specpath_find(ctx, o.spec, spec_path, sizeof spec_path)) == UN_OK)
        o.spec = spec_path;
    struct stat sb;
    if (st == UN_OK && stat(o.model, &sb) == 0 && S_ISDIR(sb.st_mode))
        st = un_ctx_error(
            ctx, UN_ERR_INVALID,
            "--model %s: is a directory (want a zoo model name or a graph .json file)", o.model);
    /* A checkpoint is written beside --save and renamed over it: never over a device (as root,
     * --save /dev/full would replace the device with a file) or a directory. */
    if (st == UN_OK && o.save && stat(o.save, &sb) == 0 && !S_ISREG(sb.st_mode))
        st = un_ctx_error(ctx, UN_ERR_INVALID,
                          "--save %s: not a regular file (a checkpoint replaces a file; a device "
                          "or directory is never overwritten)",
                          o.save);
    if (st == UN_OK)
        st = check_memory(ctx, &o);
    if (st == UN_OK && (s.estimate || s.profile))
        st = estimate_or_profile(ctx, &o, &s);
    else if (st == UN_OK && s.machine)
        st = search_and_train(ctx, &o, &s, &r);
    else if (st == UN_OK)
        st = un_train_run(ctx, &o, &r);
    if (st != UN_OK && o.save && strstr(un_ctx_errmsg(ctx), "cannot write"))
        explain_save_failure(ctx, o.save);
    if (st != UN_OK && r.rank == 0 && !r.reported)
        fprintf(stderr, "unity-train: %s\n", un_ctx_errmsg(ctx));
    un_train_result_deinit(&r);
    un_ctx_free(ctx);
    return st == UN_OK ? UN_EXIT_OK : rc;
}
