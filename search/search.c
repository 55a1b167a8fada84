/* search.c - the search modes, the memory price loop, mcmc and the report (search/search.h). */
#include "search/search.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/strategy.h"

static const char *const mode_names[UN_SEARCH_COUNT] = {"joint", "data", "serial", "mcmc", "taso"};

const char *un_search_mode_name(un_search_mode m) {
    return m >= 0 && m < UN_SEARCH_COUNT ? mode_names[m] : "?";
}

un_search_params un_search_params_default(int devices) {
    return (un_search_params){.devices = devices,
                              .mode = UN_SEARCH_JOINT,
                              .optimizer = "adam",
                              .time_limit = 60,
                              .budget = 20000,
                              .max_states = 4096,
                              .seed = 1234};
}

/* A candidate: an assignment's plan and its simulated step. */
typedef struct cand {
    int32_t *a;
    un_graph *plan;
    un_sim_result sim;
    bool ok;
} cand;

static void cand_free(cand *c) {
    free(c->a);
    un_graph_free(c->plan);
    un_sim_result_deinit(&c->sim);
    memset(c, 0, sizeof *c);
}

static un_status cand_eval(un_ctx *ctx, un_cost_model *cm, const un_map *m,
                           const un_search_params *p, const int32_t *a, int32_t n, cand *c) {
    memset(c, 0, sizeof *c);
    c->a = un_xmalloc(((size_t)n + 1) * sizeof *c->a);
    memcpy(c->a, a, (size_t)n * sizeof *a);
    un_status st = un_map_plan(ctx, m, a, &c->plan);
    if (st != UN_OK)
        return st;
    st = un_search_estimate(ctx, cm, c->plan, p->sim_runtime, p->optimizer, 0, &c->sim);
    c->ok = st == UN_OK;
    return st;
}

un_status un_search_estimate(un_ctx *ctx, un_cost_model *cm, const un_graph *plan, bool sim_runtime,
                             const char *optimizer, int devices, un_sim_result *out) {
    un_sim_params sp = un_sim_params_default();
    sp.optimizer = optimizer;
    sp.mirror_sources = sim_runtime;
    sp.devices = devices > 0 ? devices : (int)un_strategy_devices(plan);
    return un_sim_run(ctx, cm, plan, &sp, out);
}

/* Whether x is better than y: fitting first, then the step. */
static bool better(const cand *x, const cand *y) {
    if (!x->ok)
        return false;
    if (!y->ok)
        return true;
    if (x->sim.fits != y->sim.fits)
        return x->sim.fits;
    return x->sim.step < y->sim.step;
}

static void keep_better(cand *best, cand *c) {
    if (better(c, best)) {
        cand_free(best);
        *best = *c;
        memset(c, 0, sizeof *c);
    } else {
        cand_free(c);
    }
}

/* mcmc: Metropolis over per-node configurations from a, with memory over `cap` penalised. */
static double mcmc_energy(const un_map *m, const int32_t *a, double cap) {
    double t, mem;
    un_map_cost(m, a, 0, &t, &mem);
    return mem > cap ? t * (1 + 10 * (mem - cap) / cap) + 1 : t;
}

static void mcmc(const un_map *m, const un_graph *g, const un_search_params *p, double cap,
                 double deadline, int32_t *a, un_search_result *r) {
    int32_t n = un_graph_node_count(g);
    int32_t *cur = un_xmalloc(((size_t)n + 1) * sizeof *cur);
    memcpy(cur, a, (size_t)n * sizeof *cur);
    int32_t *nodes = un_xmalloc(((size_t)n + 1) * sizeof *nodes);
    int32_t nn = 0;
    for (int32_t v = 0; v < n; v++)
        if (cur[v] >= 0 && un_map_config_count(m, v) > 1)
            nodes[nn++] = v;
    un_rng rng;
    un_rng_seed(&rng, p->seed);
    double e = mcmc_energy(m, cur, cap), best = e;
    /* FlexFlow's acceptance exp(-beta * (new - old)) with beta relative to the start's cost */
    double beta = 20.0 / (e > 0 ? e : 1);
    r->ended = "budget";
    for (int64_t i = 0; i < p->budget && nn > 0; i++) {
        if ((i & 255) == 0 && un_search_clock() > deadline) {
            r->ended = "time";
            break;
        }
        int32_t v = nodes[un_rng_below(&rng, (uint64_t)nn)];
        int32_t old = cur[v];
        cur[v] = (int32_t)un_rng_below(&rng, (uint64_t)un_map_config_count(m, v));
        r->proposals++;
        double e2 = mcmc_energy(m, cur, cap);
        if (e2 <= e || un_rng_double(&rng) < exp(-beta * (e2 - e))) {
            e = e2;
            r->accepted++;
            if (e < best) {
                best = e;
                memcpy(a, cur, (size_t)n * sizeof *a);
            }
        } else {
            cur[v] = old;
        }
    }
    free(nodes);
    free(cur);
}

/* Data parallelism's estimate of g, for the report (out->dp_*). */
static void data_parallel_estimate(un_ctx *ctx, un_cost_model *cm, const un_graph *g,
                                   const un_map_params *mp, const un_search_params *p,
                                   un_search_result *out) {
    un_map *dm = NULL;
    un_map_params dpp = *mp;
    dpp.only_data = true;
    dpp.no_parallel = false;
    int32_t n = un_graph_node_count(g);
    int32_t *a = un_xcalloc((size_t)n + 1, sizeof *a);
    cand c = {0};
    out->dp_step = 0;
    if (un_map_new(ctx, cm, g, &dpp, &dm) == UN_OK) {
        un_map_data_parallel(dm, a);
        if (cand_eval(ctx, cm, dm, p, a, n, &c) == UN_OK) {
            out->dp_step = c.sim.step;
            out->dp_fits = c.sim.fits;
            out->dp_mem = c.sim.mem[c.sim.worst];
        }
        cand_free(&c);
    }
    un_ctx_clear(ctx);
    un_map_free(dm);
    free(a);
}

/* Layer 3 (and the data, serial and mcmc modes) on one serial graph, until `deadline`. */
static un_status plan_graph(un_ctx *ctx, un_cost_model *cm, const un_graph *g,
                            const un_search_params *p, un_map_memo *memo, double deadline,
                            double limit, un_search_result *out) {
    un_search_params q = *p;
    if (q.budget <= 0)
        q.budget = 20000;
    un_map_params mp = un_map_params_default(p->devices);
    mp.optimizer = p->optimizer;
    mp.max_states = p->max_states;
    mp.no_parallel = p->mode == UN_SEARCH_SERIAL;
    mp.only_data = p->mode == UN_SEARCH_DATA;
    mp.memo = memo;
    un_map *m = NULL;
    un_status st = un_map_new(ctx, cm, g, &mp, &m);
    if (st != UN_OK)
        return st;
    int32_t n = un_graph_node_count(g);
    int32_t *a = un_xcalloc((size_t)n + 1, sizeof *a);
    cand best = {0}, c = {0};
    un_map *um = NULL;    /* the plan with uneven split points (beyond 8 devices) */
    const un_map *bm = m; /* the map of the best plan's configuration indices */
    double cap = un_cost_machine(cm)->dev.memory;
    out->ended = "exhausted";
    data_parallel_estimate(ctx, cm, g, &mp, p, out);
    if (p->mode == UN_SEARCH_DATA) {
        un_map_data_parallel(m, a);
        st = cand_eval(ctx, cm, m, p, a, n, &best);
    } else if (p->mode == UN_SEARCH_MCMC) {
        un_map_data_parallel(m, a);
        mcmc(m, g, &q, cap, deadline, a, out);
        st = cand_eval(ctx, cm, m, p, a, n, &best);
    } else {
        /* memory priced in until the plan fits: lambda doubles (x8) from 0, then bisection
         * between the last that did not fit and the first that did */
        double lambda = 0, lo = 0, hi = -1, l3_start = un_search_clock();
        un_split split; /* layer 1: the pieces between cut nodes, joined along the chain */
        st = un_split_make(ctx, m, p->split_size > 0 ? p->split_size : 10, &split);
        for (int round = 0; round < 40 && st == UN_OK; round++) {
            if (un_search_clock() > deadline) {
                out->ended = "time";
                break;
            }
            un_split_stats ss;
            st = un_split_solve(ctx, m, &split, lambda, a, &ss);
            if (st != UN_OK)
                break;
            un_map_stats ms = ss.map;
            out->lambda_rounds++;
            st = cand_eval(ctx, cm, m, p, a, n, &c);
            if (st != UN_OK)
                break;
            bool fits = c.sim.fits;
            if (getenv("UN_SEARCH_DEBUG"))
                fprintf(stderr,
                        "lambda %.3g: additive %.4g s %.4g GB; sim %.4g s %.4g GB on %d "
                        "(w %.3g g %.3g o %.3g a %.3g)\n",
                        lambda, ms.time, ms.mem / 1e9, c.sim.step, c.sim.mem[c.sim.worst] / 1e9,
                        c.sim.worst, c.sim.mem_weights / 1e9, c.sim.mem_grads / 1e9,
                        c.sim.mem_optim / 1e9, c.sim.mem_acts / 1e9);
            if (better(&c, &best)) {
                out->stats = ms;
                out->split = ss;
                out->lambda = lambda;
            }
            keep_better(&best, &c);
            if (fits && lambda == 0)
                break;
            if (fits)
                hi = lambda;
            else
                lo = lambda;
            if (hi < 0)
                lambda = lambda == 0 ? 1e-3 / cap : lambda * 8;
            else if (hi - lo <= 0.05 * hi)
                break;
            else
                lambda = 0.5 * (lo + hi);
            if (lambda > 1e6 / cap)
                break;
        }
        un_split_deinit(&split);
        /* data parallel and serial are candidates too */
        const char *names[2] = {"data parallel", "serial"};
        for (int k = 0; k < 2 && st == UN_OK && p->mode == UN_SEARCH_JOINT; k++) {
            un_map *om = NULL;
            un_map_params op = mp;
            op.only_data = k == 0;
            op.no_parallel = k == 1;
            if (un_map_new(ctx, cm, g, &op, &om) != UN_OK)
                continue;
            if (k == 0)
                un_map_data_parallel(om, a);
            else
                for (int32_t v = 0; v < n; v++)
                    a[v] = un_map_config_count(om, v) > 0 ? 0 : -1;
            /* map back to this map's indices by configuration name and degree */
            bool found = true;
            for (int32_t v = 0; v < n && found; v++) {
                if (a[v] < 0)
                    continue;
                const un_map_config *oc = un_map_config_get(om, v, a[v]);
                found = false;
                for (int32_t i = 0; i < un_map_config_count(m, v) && !found; i++) {
                    const un_map_config *mc = un_map_config_get(m, v, i);
                    bool eq = mc->degree == oc->degree;
                    for (int t = 0; t < un_graph_node(g, v)->n_in && eq; t++)
                        eq = un_shape_eq(&mc->in[t], &oc->in[t]);
                    if (eq) {
                        a[v] = i;
                        found = true;
                    }
                }
            }
            un_map_free(om);
            if (!found || cand_eval(ctx, cm, m, p, a, n, &c) != UN_OK) {
                cand_free(&c);
                continue;
            }
            if (better(&c, &best))
                out->picked = names[k];
            keep_better(&best, &c);
        }
        /* and mcmc's plan (as --search mcmc finds it: the same map, seed and budget) */
        if (st == UN_OK && p->mode == UN_SEARCH_JOINT) {
            un_search_result mr;
            memset(&mr, 0, sizeof mr);
            un_map_data_parallel(m, a);
            mcmc(m, g, &q, cap, deadline, a, &mr);
            if (cand_eval(ctx, cm, m, p, a, n, &c) == UN_OK) {
                if (better(&c, &best))
                    out->picked = "mcmc";
                keep_better(&best, &c);
            } else {
                cand_free(&c);
                un_ctx_clear(ctx);
            }
        }
        /* beyond 8 devices, uneven splits (the quarters, on whole nodes), with the degree that
         * fills a part: a plan of its own at the chosen memory price, which wins only where the
         * simulator says it is better (the additive cost can prefer a plan the simulator finds
         * worse: Inception-v3 on 192 devices, 6 %). Only where some branch node can fill a part
         * (a degree that divides the larger part but not D): with degrees that divide D, the
         * larger part's branches get no more devices than in the halves. */
        double spent = un_search_clock() - l3_start;
        if (st == UN_OK && p->devices > 8 && p->mode == UN_SEARCH_JOINT && !p->halves_only &&
            un_search_clock() + 2 * spent > deadline - 0.5 * limit) {
            /* it costs about 1.5 x the halves' layer 3: only within the first half of the limit */
            out->uneven = "skipped (time)";
        } else if (st == UN_OK && p->devices > 8 && p->mode == UN_SEARCH_JOINT && !p->halves_only) {
            un_map_params up = mp;
            up.uneven_splits = true;
            bool fill = false;
            if (un_map_new(ctx, cm, g, &up, &um) == UN_OK)
                for (int32_t v = 0; v < n && !fill; v++)
                    for (int32_t i = 0; i < un_map_config_count(um, v) && !fill; i++)
                        fill = un_map_config_get(um, v, i)->part_only;
            un_split us;
            un_split_stats ss;
            out->uneven = fill ? "lost" : "no part to fill";
            if (fill &&
                un_split_make(ctx, um, p->split_size > 0 ? p->split_size : 10, &us) == UN_OK) {
                if (un_split_solve(ctx, um, &us, out->lambda, a, &ss) == UN_OK &&
                    cand_eval(ctx, cm, um, p, a, n, &c) == UN_OK && better(&c, &best)) {
                    out->picked = "uneven split";
                    out->uneven = "won";
                    out->stats = ss.map;
                    out->split = ss;
                    bm = um;
                }
                keep_better(&best, &c);
                un_split_deinit(&us);
            }
            un_ctx_clear(ctx);
        }
        if (!out->picked)
            out->picked = "search";
    }
    if (st == UN_OK && !best.ok && strcmp(out->ended, "time") == 0) {
        st = un_ctx_error(ctx, UN_ERR_INVALID,
                          "the search time (%g s) ran out before a plan was found", limit);
    } else if (st == UN_OK && (!best.ok || !best.sim.fits)) {
        double need = best.ok ? best.sim.mem[best.sim.worst] : 0;
        st = un_ctx_error(ctx, UN_ERR_INVALID,
                          "no plan fits: the best %s plan on %d devices needs %.3g GB on its "
                          "fullest device, the machine's devices have %.3g GB",
                          un_search_mode_name(p->mode), p->devices, need / 1e9, cap / 1e9);
    }
    if (st == UN_OK) {
        out->plan = best.plan;
        best.plan = NULL;
        out->sim = best.sim;
        memset(&best.sim, 0, sizeof best.sim);
        out->devices_used = (int)un_strategy_devices(out->plan);
        out->n_nodes = n;
        out->choice = un_xcalloc((size_t)n + 1, sizeof *out->choice);
        out->degree = un_xcalloc((size_t)n + 1, sizeof *out->degree);
        for (int32_t v = 0; v < n; v++)
            if (best.a[v] >= 0) {
                const un_map_config *k = un_map_config_get(bm, v, best.a[v]);
                snprintf(out->choice[v], sizeof out->choice[v], "%s", k->name);
                out->degree[v] = k->degree;
            }
    }
    cand_free(&best);
    cand_free(&c);
    free(a);
    un_map_free(m);
    un_map_free(um);
    if (st != UN_OK)
        un_search_result_deinit(out);
    return st;
}

/* Whether plan result x is better than y: fitting first, then the step. */
static bool better_result(const un_search_result *x, const un_search_result *y) {
    if (x->sim.fits != y->sim.fits)
        return x->sim.fits;
    return x->sim.step < y->sim.step;
}

/* Under UN_SEARCH_DEBUG: the memo's counters after a phase of the search. */
static void memo_debug(const un_map_memo *memo, const char *phase) {
    if (!getenv("UN_SEARCH_DEBUG") || !memo)
        return;
    un_map_memo_stats s = un_map_memo_get_stats(memo);
    fprintf(stderr,
            "layer 3 memo after %s: %lld piece solves, %lld from the memo (%lld solved on another "
            "map), %lld from a kept frontier; %lld of %lld nodes saved; configurations %lld of "
            "%lld copied; %lld kept (%.1f MB)\n",
            phase, (long long)s.solves, (long long)s.hits, (long long)s.hits_across,
            (long long)s.prefix_hits, (long long)s.nodes_saved, (long long)s.nodes,
            (long long)s.config_hits, (long long)s.config_lookups, (long long)s.entries,
            (double)s.bytes / 1e6);
}

static un_status search_run(un_ctx *ctx, un_cost_model *cm, const un_graph *g,
                            const un_search_params *p, un_map_memo *memo, un_search_result *out) {
    memset(out, 0, sizeof *out);
    double t0 = un_search_clock();
    double limit = p->time_limit > 0 ? p->time_limit : 60;
    double deadline = t0 + limit;
    un_search_params pj = *p; /* taso's last step is joint's layer 3 */
    if (pj.mode == UN_SEARCH_TASO)
        pj.mode = UN_SEARCH_JOINT;
    bool layer2 = p->mode == UN_SEARCH_JOINT || p->mode == UN_SEARCH_TASO;
    bool *use = NULL;
    int64_t used = 0;
    if (layer2 && p->rules) {
        use = un_xcalloc((size_t)un_ruleset_count(p->rules) + 1, sizeof *use);
        used = un_subst_rules_pick(p->rules, use);
    }
    if (!layer2 || used == 0) {
        free(use);
        un_status st = plan_graph(ctx, cm, g, &pj, memo, deadline, limit, out);
        out->rewrites_off = !layer2     ? "not in this mode"
                            : !p->rules ? "no rules (--rules DB)"
                            : un_ruleset_count(p->rules) == 0
                                ? "the rules DB has no verified rules"
                                : "no algebraic rules among those loaded";
        out->wall = un_search_clock() - t0;
        return st;
    }
    un_subst_params sp = un_subst_params_default(p->devices);
    sp.alpha = p->alpha > 0 ? p->alpha : 1.05;
    sp.budget = p->subst_budget;
    sp.map.optimizer = p->optimizer;
    sp.map.max_states = p->max_states;
    sp.use = use;
    sp.map.memo = memo;
    /* joint: the model graph's own plan first (the comparison, and the memory price) */
    un_search_result r0, r1;
    memset(&r0, 0, sizeof r0);
    memset(&r1, 0, sizeof r1);
    un_status st0 = UN_ERR_INVALID, st1 = UN_ERR_INVALID;
    char err0[512] = "";
    if (p->mode == UN_SEARCH_JOINT) {
        st0 = plan_graph(ctx, cm, g, &pj, memo, deadline, limit, &r0);
        memo_debug(memo, "the model graph's plan");
        if (st0 == UN_OK) {
            sp.lambda = r0.lambda;
        } else {
            snprintf(err0, sizeof err0, "%s", un_ctx_errmsg(ctx));
            un_ctx_clear(ctx);
        }
    } else { /* taso: the serial cost on one device */
        sp.map.devices = 1;
        sp.map.no_parallel = true;
    }
    double left = t0 + 0.5 * limit - un_search_clock();
    sp.time_limit = left > 1e-3 ? left : 1e-3;
    un_subst_result sr, sr2;
    memset(&sr2, 0, sizeof sr2);
    /* joint: layer 2 per layer-1 piece (Unity's order); taso rewrites the whole graph */
    un_status st = p->mode == UN_SEARCH_JOINT
                       ? un_subst_search_pieces(ctx, p->rules, cm, g, &sp, p->split_size, &sr)
                       : un_subst_search(ctx, p->rules, cm, g, &sp, &sr);
    if (st == UN_OK && p->mode == UN_SEARCH_JOINT) {
        /* taso's rewritten graph (layer 2 on the serial cost on one device, as --search taso
         * runs it) is joint's candidate too, so that joint is never estimated worse than taso;
         * it gets what is left of layer 2's half of the time, at least a tenth of the limit */
        un_subst_params tp = sp;
        tp.lambda = 0;
        tp.map.devices = 1;
        tp.map.no_parallel = true;
        left = t0 + 0.5 * limit - un_search_clock();
        tp.time_limit = left > 0.1 * limit ? left : 0.1 * limit;
        if (un_subst_search(ctx, p->rules, cm, g, &tp, &sr2) != UN_OK) {
            un_ctx_clear(ctx);
            memset(&sr2, 0, sizeof sr2);
        }
    }
    free(use);
    memo_debug(memo, "layer 2");
    if (st != UN_OK) {
        un_search_result_deinit(&r0);
        return st;
    }
    if (sr.n_steps > 0 || p->mode == UN_SEARCH_TASO) {
        st1 = plan_graph(ctx, cm, sr.best, &pj, memo, deadline, limit, &r1);
        memo_debug(memo, "layer 2's graph's plan");
        if (st1 != UN_OK && st0 != UN_OK && !err0[0])
            snprintf(err0, sizeof err0, "%s", un_ctx_errmsg(ctx));
        if (st1 != UN_OK)
            un_ctx_clear(ctx);
    }
    /* taso's graph, unless it is the model graph or layer 2's own best */
    un_search_result r2;
    memset(&r2, 0, sizeof r2);
    un_status st2 = UN_ERR_INVALID;
    if (sr2.best && sr2.n_steps > 0 &&
        (sr.n_steps == 0 || un_graph_hash(sr2.best) != un_graph_hash(sr.best))) {
        st2 = plan_graph(ctx, cm, sr2.best, &pj, memo, deadline, limit, &r2);
        memo_debug(memo, "taso's graph's plan");
        if (st2 != UN_OK)
            un_ctx_clear(ctx);
        else
            out->taso_step = r2.sim.step;
    }
    double taso_step = out->taso_step;
    if (st0 == UN_OK) {
        out->unrewritten_step = r0.sim.step;
        out->unrewritten_fits = r0.sim.fits;
    }
    /* the best of the three: the model graph's plan (r0), layer 2's (r1), taso's graph's (r2) */
    int take = st0 == UN_OK ? 0 : -1;
    if (st1 == UN_OK && (take < 0 || better_result(&r1, &r0)))
        take = 1;
    if (st2 == UN_OK && (take < 0 || better_result(&r2, take == 0 ? &r0 : &r1)))
        take = 2;
    /* data parallelism of the model graph, for the report: r0 has it (joint) */
    double dp_step = r0.dp_step, dp_mem = r0.dp_mem;
    bool dp_fits = r0.dp_fits, dp_known = st0 == UN_OK;
    double u_step = out->unrewritten_step;
    bool u_fits = out->unrewritten_fits;
    if (take < 0) {
        un_subst_result_deinit(&sr);
        un_subst_result_deinit(&sr2);
        un_search_result_deinit(&r1);
        un_search_result_deinit(&r2);
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s", err0);
    }
    un_search_result *rs[3] = {&r0, &r1, &r2};
    *out = *rs[take];
    memset(rs[take], 0, sizeof *rs[take]);
    for (int k = 0; k < 3; k++)
        un_search_result_deinit(rs[k]);
    if (take == 2) { /* the report shows taso's rewrites */
        out->graph = sr2.best;
        sr2.best = NULL;
        un_subst_result tmp = sr;
        sr = sr2;
        sr2 = tmp;
        out->taso_won = true;
    } else if (take == 1 && sr.n_steps > 0) {
        out->graph = sr.best;
        sr.best = NULL;
    }
    un_subst_result_deinit(&sr2);
    out->taso_step = taso_step;
    out->unrewritten_step = u_step;
    out->unrewritten_fits = u_fits;
    un_graph_free(sr.best);
    sr.best = NULL;
    out->subst = sr;
    out->rewrites = true;
    if (dp_known) {
        out->dp_step = dp_step;
        out->dp_fits = dp_fits;
        out->dp_mem = dp_mem;
    } else { /* taso: r1 has the rewritten graph's */
        un_map_params mp = un_map_params_default(p->devices);
        mp.optimizer = p->optimizer;
        mp.max_states = p->max_states;
        data_parallel_estimate(ctx, cm, g, &mp, p, out);
    }
    out->wall = un_search_clock() - t0;
    return UN_OK;
}

un_status un_search_run(un_ctx *ctx, un_cost_model *cm, const un_graph *g,
                        const un_search_params *p, un_search_result *out) {
    un_map_memo *memo = p->no_memo ? NULL : un_map_memo_new(cm, 0);
    un_status st = search_run(ctx, cm, g, p, memo, out);
    if (st == UN_OK)
        out->memo = un_map_memo_get_stats(memo);
    un_map_memo_free(memo);
    return st;
}

void un_search_result_deinit(un_search_result *r) {
    if (!r)
        return;
    un_graph_free(r->plan);
    un_sim_result_deinit(&r->sim);
    free(r->choice);
    free(r->degree);
    un_graph_free(r->graph);
    un_subst_result_deinit(&r->subst);
    memset(r, 0, sizeof *r);
}

void un_search_report(const un_search_result *r, const un_graph *g, const un_search_params *p,
                      const un_cost_model *cm, un_buf *out) {
    un_buf_printf(out, "search: %s on %d devices of %s: %.3f s wall, ended: %s\n",
                  un_search_mode_name(p->mode), p->devices, un_cost_machine(cm)->name, r->wall,
                  r->ended ? r->ended : "?");
    int64_t pm, ps, pa;
    un_cost_pieces(cm, &pm, &ps, &pa);
    un_buf_printf(out,
                  "op costs: %lld distinct pieces, %lld measured, %lld scaled from measured pieces "
                  "of the same op, %lld from the %s alone\n",
                  (long long)(pm + ps + pa), (long long)pm, (long long)ps, (long long)pa,
                  un_cost_machine(cm)->dev.gpu.on ? "kernel model" : "roofline");
    un_buf_printf(
        out,
        "plan: runs on %d device%s; estimated step %.6g s (%s semantics); fullest device %.4g GB "
        "(%s)\n",
        r->devices_used, r->devices_used == 1 ? "" : "s", r->sim.step,
        p->sim_runtime ? "runtime" : "plan", r->sim.mem ? r->sim.mem[r->sim.worst] / 1e9 : 0,
        r->sim.fits ? "fits" : "does not fit");
    if (r->dp_step > 0)
        un_buf_printf(out,
                      "data parallel: estimated step %.6g s; fullest device %.4g GB (%s); "
                      "plan speedup over it %.3gx\n",
                      r->dp_step, r->dp_mem / 1e9, r->dp_fits ? "fits" : "does not fit",
                      r->dp_step / (r->sim.step > 0 ? r->sim.step : 1));
    else
        un_buf_printf(out, "data parallel: cannot run this model on %d devices\n", p->devices);
    if (p->mode == UN_SEARCH_JOINT || p->mode == UN_SEARCH_TASO) {
        const un_subst_result *s = &r->subst;
        if (!r->rewrites)
            un_buf_printf(out, "layer 2: rewrites off: %s\n", r->rewrites_off);
        else
            un_buf_printf(
                out,
                "layer 2 (%s): %lld of %lld rules used (algebraic), alpha %g: %lld graphs popped, "
                "%lld matches, %lld generated, %lld costed by layer 3, %lld pruned by alpha, "
                "%lld duplicates, %lld failed to apply, %lld dropped at the queue cap; %.3f s "
                "(%.3f s matching and applying, "
                "%.3f s in layer 3); ended: %s\n",
                p->mode == UN_SEARCH_TASO ? "serial cost on 1 device" : "layer-3 cost",
                (long long)s->rules_used, (long long)s->rules_loaded,
                p->alpha > 0 ? p->alpha : 1.05, (long long)s->popped, (long long)s->matches,
                (long long)s->generated, (long long)s->costed, (long long)s->pruned_alpha,
                (long long)s->duplicates, (long long)s->apply_failed, (long long)s->queue_dropped,
                s->wall, s->match_s, s->map_s, s->ended ? s->ended : "?");
        if (r->rewrites && s->pieces > 0)
            un_buf_printf(out,
                          "layer 2 per piece: %d layer-1 pieces, %d distinct (searched once "
                          "each, budget per distinct piece), %d rewritten; %lld matches skipped "
                          "at piece boundaries; each candidate costed on its piece alone\n",
                          (int)s->pieces, (int)s->piece_classes, (int)s->pieces_rewritten,
                          (long long)s->boundary);
        else if (r->rewrites && p->mode == UN_SEARCH_JOINT)
            un_buf_printf(out, "layer 2 on the whole graph (it does not split into pieces)\n");
        if (r->rewrites && r->graph) {
            un_buf_printf(out, "rewrites applied: %d (cost %.6g -> %.6g)\n", (int)s->n_steps,
                          s->start_cost, s->best_cost);
            un_subst_report_steps(s, p->rules, out);
        } else if (r->rewrites && s->n_steps > 0) {
            un_buf_printf(out,
                          "rewrites applied: none (layer 2's best graph, %d rewrites, was not "
                          "better once planned and simulated)\n",
                          (int)s->n_steps);
        } else if (r->rewrites) {
            un_buf_printf(out, "rewrites applied: none (no rewrite lowered the cost)\n");
        }
        if (r->rewrites && r->taso_step > 0)
            un_buf_printf(out,
                          "taso's rewritten graph (rewrites by the serial cost), planned: "
                          "estimated step %.6g s%s\n",
                          r->taso_step,
                          r->taso_won ? " (the winner: the rewrites above are its)" : "");
        if (r->rewrites && r->unrewritten_step > 0)
            un_buf_printf(out,
                          "without rewrites: estimated step %.6g s (%s); with: %.6g s (%.3gx)\n",
                          r->unrewritten_step, r->unrewritten_fits ? "fits" : "does not fit",
                          r->sim.step, r->unrewritten_step / (r->sim.step > 0 ? r->sim.step : 1));
    }
    if (p->mode == UN_SEARCH_JOINT || p->mode == UN_SEARCH_TASO)
        un_buf_printf(out,
                      "layer 1: %d pieces of at most %d nodes where cut nodes allow (largest %d, "
                      "%d cut nodes), %lld layer-3 runs (one per piece and entry layout), %d "
                      "pieces equal to an earlier one (memoized)\n",
                      (int)r->split.pieces, p->split_size > 0 ? p->split_size : 10,
                      (int)r->split.largest, (int)r->split.cuts, (long long)r->split.piece_solves,
                      (int)r->split.memo_hits);
    if (p->mode == UN_SEARCH_JOINT)
        un_buf_printf(out,
                      "layer 3: %lld configurations, %lld states expanded, at most %lld alive, "
                      "%d parallel compositions, %lld device splits tried%s; %d memory prices "
                      "tried (chosen %.3g s/GB); winner: %s\n",
                      (long long)r->stats.configs, (long long)r->stats.states,
                      (long long)r->stats.max_frontier, (int)r->stats.parallels,
                      (long long)r->stats.splits,
                      r->stats.beam ? ", beam (states dropped)" : ", exact", r->lambda_rounds,
                      r->lambda * 1e9, r->picked ? r->picked : "?");
    if ((p->mode == UN_SEARCH_JOINT || p->mode == UN_SEARCH_TASO) && p->no_memo)
        un_buf_printf(out, "layer 3 memo: off\n");
    else if (p->mode == UN_SEARCH_JOINT || p->mode == UN_SEARCH_TASO)
        un_buf_printf(out,
                      "layer 3 memo: %lld piece solves over the search, %lld from the memo (%lld "
                      "solved first on another graph's or setting's map), %lld more started from a "
                      "kept frontier; %lld of %lld nodes' DP saved; nodes' configurations: %lld "
                      "of %lld copied from another map; %lld kept (%.3g MB)%s\n",
                      (long long)r->memo.solves, (long long)r->memo.hits,
                      (long long)r->memo.hits_across, (long long)r->memo.prefix_hits,
                      (long long)r->memo.nodes_saved, (long long)r->memo.nodes,
                      (long long)r->memo.config_hits, (long long)r->memo.config_lookups,
                      (long long)r->memo.entries, (double)r->memo.bytes / 1e6,
                      r->memo.not_kept ? ", at its bound" : "");
    if (p->mode == UN_SEARCH_JOINT && r->uneven)
        un_buf_printf(out,
                      "uneven splits (the quarters on whole nodes, a degree filling the larger "
                      "part): %s\n",
                      r->uneven);
    if (p->mode == UN_SEARCH_MCMC)
        un_buf_printf(out, "mcmc: %lld proposals, %lld accepted\n", (long long)r->proposals,
                      (long long)r->accepted);
    un_buf_printf(out, "parallelization per operator%s:\n",
                  r->graph ? " (of the rewritten graph)" : "");
    if (r->graph)
        g = r->graph;
    for (int32_t v = 0; v < r->n_nodes; v++) {
        if (r->degree[v] <= 0)
            continue;
        const un_node *nd = un_graph_node(g, v);
        char anon[32]; /* a rewrite's new nodes have no names */
        snprintf(anon, sizeof anon, "(new node %d)", (int)v);
        un_buf_printf(out, "  %-28s %-20s %s\n", nd->name ? nd->name : anon, un_op_name(nd->op),
                      r->choice[v]);
    }
}
