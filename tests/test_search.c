/* test_search.c - layer 3 (search/mapping.h): the variable elimination equals exhaustive
 * enumeration of every mapping on graphs of up to 6 operators and 4 devices (with and without a
 * memory price); its plans are legal PCGs that strip back to the model; data parallelism is one
 * of the assignments; every zoo model maps on 2 and 4 devices with a plan the runtime's loader
 * accepts. */
#include <stdlib.h>
#include <unistd.h>

#include "runtime/strategy.h"
#include "runtime/train.h"
#include "runtime/zoo.h"
#include "search/cost.h"
#include "search/mapping.h"
#include "search/profile.h"
#include "search/search.h"
#include "search/split.h"
#include "tests/test.h"

static un_spec *S;

static un_cost_model *model_for(un_ctx *ctx, const char *machine, un_machine *m) {
    un_cost_model *cm = NULL;
    EXPECT_OK(ctx, un_machine_load(ctx, machine, m));
    EXPECT_OK(ctx, un_cost_model_new(ctx, S, m, UN_MPREC_F32, NULL, &cm));
    return cm;
}

static int32_t input(un_ctx *ctx, un_graph *g, const char *name, un_op op, int64_t a, int64_t b) {
    int32_t id = -1;
    EXPECT_OK(ctx, un_graph_add_input(ctx, g, name, op, 2, (int64_t[]){a, b}, &id));
    return id;
}

static int32_t linear(un_ctx *ctx, un_graph *g, int32_t x, int64_t in, int64_t out,
                      const char *name) {
    char wn[64];
    snprintf(wn, sizeof wn, "%s.w", name);
    int32_t w = input(ctx, g, wn, UN_OP_WEIGHT, in, out), id = -1;
    EXPECT_OK(ctx,
              un_graph_add(ctx, g, UN_OP_LINEAR, NULL, (un_ref[]){{x, 0}, {w, 0}}, 2, name, &id));
    return id;
}

static int32_t op1(un_ctx *ctx, un_graph *g, un_op op, int32_t a, const char *name) {
    int32_t id = -1;
    EXPECT_OK(ctx, un_graph_add(ctx, g, op, NULL, (un_ref[]){{a, 0}}, 1, name, &id));
    return id;
}

static int32_t op2(un_ctx *ctx, un_graph *g, un_op op, int32_t a, int32_t b, const char *name) {
    int32_t id = -1;
    EXPECT_OK(ctx, un_graph_add(ctx, g, op, NULL, (un_ref[]){{a, 0}, {b, 0}}, 2, name, &id));
    return id;
}

/* Small graphs: a chain of linears, a residual block, two branches joined, a wide MLP. */
static un_graph *small_graph(un_ctx *ctx, int which, int64_t batch, int64_t width) {
    un_graph *g = un_graph_new(S);
    int32_t x = input(ctx, g, "x", UN_OP_INPUT, batch, width);
    if (which == 0) {
        int32_t a = linear(ctx, g, x, width, 4 * width, "fc1");
        int32_t r = op1(ctx, g, UN_OP_RELU, a, "relu");
        int32_t b = linear(ctx, g, r, 4 * width, width, "fc2");
        op1(ctx, g, UN_OP_TANH, b, "out");
    } else if (which == 1) {
        int32_t a = linear(ctx, g, x, width, width, "fc1");
        int32_t r = op1(ctx, g, UN_OP_GELU, a, "gelu");
        int32_t b = linear(ctx, g, r, width, width, "fc2");
        int32_t s = op2(ctx, g, UN_OP_EW_ADD, x, b, "res");
        linear(ctx, g, s, width, 8, "head");
    } else if (which == 2) {
        int32_t a = linear(ctx, g, x, width, width, "left");
        int32_t b = linear(ctx, g, x, width, width, "right");
        int32_t ra = op1(ctx, g, UN_OP_RELU, a, "ra");
        int32_t m = op2(ctx, g, UN_OP_EW_MUL, ra, b, "mul");
        linear(ctx, g, m, width, 16, "head");
    } else {
        int32_t a = linear(ctx, g, x, width, 8 * width, "up");
        int32_t b = linear(ctx, g, a, 8 * width, 8 * width, "mid");
        int32_t c = op1(ctx, g, UN_OP_RELU, b, "act");
        int32_t d = linear(ctx, g, c, 8 * width, 8 * width, "mid2");
        int32_t e = op1(ctx, g, UN_OP_SIGMOID, d, "act2");
        linear(ctx, g, e, 8 * width, width, "down");
    }
    return g;
}

static void test_exhaustive(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine mach;
    un_cost_model *cm = model_for(ctx, "specs/machines/v100x4.json", &mach);
    int64_t sizes[][2] = {{64, 32}, {8, 1024}, {4096, 256}};
    int checked = 0;
    for (int which = 0; which < 4; which++)
        for (int si = 0; si < 3; si++)
            for (int devices = 1; devices <= 4; devices *= 2) {
                un_graph *g = small_graph(ctx, which, sizes[si][0], sizes[si][1]);
                un_map_params p = un_map_params_default(devices);
                un_map *m = NULL;
                EXPECT_OK(ctx, un_map_new(ctx, cm, g, &p, &m));
                if (!m) {
                    un_graph_free(g);
                    continue;
                }
                int32_t n = un_graph_node_count(g);
                int32_t *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
                double lambdas[] = {0, 1e-9, 1e-6};
                for (int li = 0; li < 3; li++) {
                    un_map_stats st;
                    double best = 0;
                    EXPECT_OK(ctx, un_map_solve(ctx, m, lambdas[li], a, &st));
                    EXPECT_OK(ctx, un_map_exhaustive(ctx, m, lambdas[li], b, &best));
                    double got = un_map_cost(m, a, lambdas[li], NULL, NULL);
                    test__check(fabs(got - best) <= 1e-9 * best &&
                                    fabs(st.cost - got) <= 1e-9 * got,
                                TEST__AT,
                                "graph %d size %d devices %d lambda %g: solve %.9g (%.9g) vs "
                                "exhaustive %.9g",
                                which, si, devices, lambdas[li], got, st.cost, best);
                    EXPECT_TRUE(!st.beam);
                    checked++;
                }
                /* data parallel is one of the assignments, so never cheaper */
                un_map_data_parallel(m, b);
                un_map_stats st;
                EXPECT_OK(ctx, un_map_solve(ctx, m, 0, a, &st));
                EXPECT_TRUE(un_map_cost(m, b, 0, NULL, NULL) >= st.cost * (1 - 1e-12));
                /* the plan is a legal PCG that strips back to the model */
                un_graph *plan = NULL, *bare = NULL;
                EXPECT_OK(ctx, un_map_plan(ctx, m, a, &plan));
                if (plan) {
                    EXPECT_OK(ctx, un_strategy_strip(ctx, plan, &bare));
                    if (bare)
                        EXPECT_EQ(un_graph_node_count(bare), n);
                    EXPECT_TRUE(un_strategy_devices(plan) <= devices);
                }
                un_graph_free(bare);
                un_graph_free(plan);
                free(a);
                free(b);
                un_map_free(m);
                un_graph_free(g);
            }
    EXPECT_TRUE(checked >= 100);
    un_cost_model_free(cm);
    un_ctx_free(ctx);
}

/* Graphs with parallel branches (h26): two branches of two ops, three single-op branches, a
 * branch with its own inner fork, and a heavy branch next to a light one; <= 6 regular ops. */
static un_graph *branch_graph(un_ctx *ctx, int which, int64_t batch, int64_t width) {
    un_graph *g = un_graph_new(S);
    int32_t x = input(ctx, g, "x", UN_OP_INPUT, batch, width);
    if (which == 0) {
        int32_t a = op1(ctx, g, UN_OP_RELU, linear(ctx, g, x, width, width, "left"), "ra");
        int32_t b = op1(ctx, g, UN_OP_TANH, linear(ctx, g, x, width, width, "right"), "tb");
        op2(ctx, g, UN_OP_EW_ADD, a, b, "join");
    } else if (which == 1) {
        int32_t a = linear(ctx, g, x, width, width, "b0");
        int32_t b = linear(ctx, g, x, width, width, "b1");
        int32_t c = linear(ctx, g, x, width, width, "b2");
        op2(ctx, g, UN_OP_EW_ADD, op2(ctx, g, UN_OP_EW_ADD, a, b, "j1"), c, "j2");
    } else if (which == 3) {
        int32_t a = linear(ctx, g, x, width, width, "heavy1");
        int32_t b = linear(ctx, g, op1(ctx, g, UN_OP_RELU, a, "hr"), width, width, "heavy2");
        op2(ctx, g, UN_OP_EW_ADD, b, op1(ctx, g, UN_OP_TANH, x, "light"), "join");
    } else {
        int32_t a = linear(ctx, g, x, width, width, "left");
        int32_t l = op1(ctx, g, UN_OP_RELU, a, "l1");
        int32_t r = op1(ctx, g, UN_OP_TANH, a, "l2");
        int32_t j = op2(ctx, g, UN_OP_EW_MUL, l, r, "lj");
        int32_t b = linear(ctx, g, x, width, width, "right");
        op2(ctx, g, UN_OP_EW_ADD, j, b, "join");
    }
    return g;
}

/* Layer 3 over the SP tree with parallel branches on disjoint device sets: the DP equals the
 * exhaustive minimum over every mapping (configurations and device starts, at every split point:
 * 1 + 1 on 2 devices, 1 + 2 and 2 + 1 on 3, 1 + 3, 2 + 2 and 3 + 1 on 4, with degrees that divide
 * a part but not D, 3 of 4) on 2, 3 and 4 devices; where the DP puts branches on disjoint
 * devices, the simulator (which honours the views) estimates the plan below the best plan whose
 * branches share the devices. */
static void test_branches(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine mach;
    un_cost_model *cm = model_for(ctx, "specs/machines/v100x4.json", &mach);
    int64_t sizes[][2] = {{48, 24}, {12, 1536}, {2048, 512}};
    int checked = 0, disjoint = 0, uneven = 0;
    for (int which = 0; which < 5; which++)
        for (int si = 0; si < 3; si++)
            for (int devices = 2; devices <= 4; devices++) {
                un_graph *g = branch_graph(ctx, which, sizes[si][0], sizes[si][1]);
                un_map_params p = un_map_params_default(devices);
                un_map *m = NULL;
                EXPECT_OK(ctx, un_map_new(ctx, cm, g, &p, &m));
                int32_t n = un_graph_node_count(g);
                int32_t *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
                bool placed = false; /* some configuration starts past device 0 */
                for (int32_t v = 0; m && v < n; v++)
                    for (int32_t c = 0; c < un_map_config_count(m, v); c++) {
                        const un_map_config *k = un_map_config_get(m, v, c);
                        placed |= k->start > 0;
                        /* a split other than halves: a start off D / 2, or 3 of 4 devices */
                        uneven += k->start > 0 && (2 * k->start != devices || k->part_only);
                    }
                EXPECT_TRUE(placed);
                double lambdas[] = {0, 1e-9};
                for (int li = 0; m && li < 2; li++) {
                    un_map_stats st;
                    double best = 0;
                    EXPECT_OK(ctx, un_map_solve(ctx, m, lambdas[li], a, &st));
                    EXPECT_OK(ctx, un_map_exhaustive(ctx, m, lambdas[li], b, &best));
                    double got = un_map_cost(m, a, lambdas[li], NULL, NULL);
                    test__check(fabs(got - best) <= 1e-9 * best &&
                                    fabs(st.cost - got) <= 1e-9 * got,
                                TEST__AT,
                                "branch graph %d size %d devices %d lambda %g: solve %.9g (%.9g) "
                                "vs exhaustive %.9g",
                                which, si, devices, lambdas[li], got, st.cost, best);
                    EXPECT_TRUE(!st.beam && st.parallels > 0 && st.splits > 0);
                    checked++;
                }
                if (m && si == 2) { /* heavy branches: disjoint device sets win */
                    un_map_stats st;
                    EXPECT_OK(ctx, un_map_solve(ctx, m, 0, a, &st));
                    bool hi = false;
                    for (int32_t v = 0; v < n; v++)
                        hi |= a[v] >= 0 && un_map_config_get(m, v, a[v])->start > 0;
                    disjoint += hi;
                    un_map_params ps = p;
                    ps.shared_branches = true;
                    un_map *ms = NULL;
                    EXPECT_OK(ctx, un_map_new(ctx, cm, g, &ps, &ms));
                    EXPECT_OK(ctx, un_map_solve(ctx, ms, 0, b, &st));
                    un_graph *plan = NULL, *plan_s = NULL;
                    EXPECT_OK(ctx, un_map_plan(ctx, m, a, &plan));
                    EXPECT_OK(ctx, un_map_plan(ctx, ms, b, &plan_s));
                    /* the plan carries the high half in its machine views */
                    bool viewed = false;
                    for (int32_t v = 0; plan && v < un_graph_node_count(plan); v++)
                        viewed |= un_graph_node(plan, v)->view.count > 0 &&
                                  un_graph_node(plan, v)->view.dev[0] > 0;
                    EXPECT_TRUE(!hi || viewed);
                    un_sim_params sp = un_sim_params_default();
                    sp.devices = devices;
                    un_sim_result r1, r2;
                    EXPECT_OK(ctx, un_sim_run(ctx, cm, plan, &sp, &r1));
                    EXPECT_OK(ctx, un_sim_run(ctx, cm, plan_s, &sp, &r2));
                    test__check(!hi || r1.step < r2.step, TEST__AT,
                                "branch graph %d devices %d: disjoint plan %g s, shared %g s",
                                which, devices, r1.step, r2.step);
                    un_sim_result_deinit(&r1);
                    un_sim_result_deinit(&r2);
                    un_graph_free(plan);
                    un_graph_free(plan_s);
                    un_map_free(ms);
                }
                free(a);
                free(b);
                un_map_free(m);
                un_graph_free(g);
            }
    EXPECT_TRUE(checked == 90);
    EXPECT_TRUE(disjoint >= 1); /* v100x4: two-op branches of 2048 x 512 on halves */
    EXPECT_TRUE(uneven > 0);
    un_cost_model_free(cm);
    un_ctx_free(ctx);
}

/* Layer 1 (h26): split at cut nodes into pieces of at most k nodes, each solved per entry
 * configuration (equal pieces once), joined along the chain: the same cost as the unsplit DP
 * (and so, on the small graphs, as exhaustive enumeration) for every k, on the small graphs and
 * the tiny zoo models; pieces respect k where cut nodes allow; k < 1 is refused. */
static void test_split(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine mach;
    un_cost_model *cm = model_for(ctx, "specs/machines/v100x4.json", &mach);
    int nm;
    const char *const *names = un_zoo_names(&nm);
    int checked = 0, multi = 0, hits = 0;
    for (int gi = 0; gi < 7 + nm; gi++) {
        un_graph *g = NULL;
        un_model md = {0};
        if (gi < 4)
            g = small_graph(ctx, gi, 64, 256);
        else if (gi < 7)
            g = branch_graph(ctx, gi - 4, 64, 256);
        else if (un_zoo_build(ctx, S, names[gi - 7], true, 0, &md) == UN_OK)
            g = md.graph;
        if (!g)
            continue;
        for (int devices = 2; devices <= 4; devices *= 2) {
            un_map_params p = un_map_params_default(devices);
            un_map *m = NULL;
            EXPECT_OK(ctx, un_map_new(ctx, cm, g, &p, &m));
            if (!m)
                continue;
            int32_t n = un_graph_node_count(g);
            int32_t *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
            un_map_stats ms;
            EXPECT_OK(ctx, un_map_solve(ctx, m, 1e-9, a, &ms));
            int ks[] = {1, 2, 3, 10};
            for (int ki = 0; ki < 4; ki++) {
                un_split sp;
                EXPECT_OK(ctx, un_split_make(ctx, m, ks[ki], &sp));
                un_split_stats ss;
                EXPECT_OK(ctx, un_split_solve(ctx, m, &sp, 1e-9, b, &ss));
                double got = un_map_cost(m, b, 1e-9, NULL, NULL);
                bool beam = ms.beam || ss.map.beam;
                test__check(beam || fabs(got - ms.cost) <= 1e-9 * ms.cost, TEST__AT,
                            "graph %d devices %d k %d: split %.9g (%d pieces) vs unsplit %.9g", gi,
                            devices, ks[ki], got, sp.n, ms.cost);
                /* pieces cover every regular node once; each within k unless no cut allows */
                int32_t total = 0;
                bool *cut = calloc((size_t)n + 1, sizeof *cut);
                int32_t *cn = calloc((size_t)n + 1, sizeof *cn),
                        *pn = calloc((size_t)n + 1, sizeof *pn);
                for (int32_t i = 0, nc = un_sp_cut_nodes(un_map_sp(m), cn); i < nc; i++)
                    cut[cn[i]] = true;
                for (int32_t i = 0; i < sp.n; i++) {
                    total += sp.size[i];
                    un_split_piece_nodes(&sp, i, pn);
                    int32_t inner = 0; /* cut nodes before its last node: where it could end */
                    for (int32_t j = 0; j + 1 < sp.size[i]; j++)
                        inner += cut[pn[j]];
                    test__check(sp.size[i] <= ks[ki] || inner == 0, TEST__AT,
                                "graph %d k %d: piece %d has %d nodes and %d inner cuts", gi,
                                ks[ki], i, sp.size[i], inner);
                }
                free(cut);
                free(cn);
                free(pn);
                int32_t regular = 0;
                for (int32_t v = 0; v < n; v++)
                    regular += un_op_kind_of(un_graph_node(g, v)->op) == UN_OPK_REGULAR;
                EXPECT_EQ(total, regular);
                multi += sp.n > 1;
                hits += ss.memo_hits;
                checked++;
                un_split_deinit(&sp);
            }
            un_split bad;
            EXPECT_TRUE(un_split_make(ctx, m, 0, &bad) == UN_ERR_INVALID);
            free(a);
            free(b);
            un_map_free(m);
        }
        if (gi < 7)
            un_graph_free(g);
        else
            un_model_deinit(&md);
    }
    EXPECT_TRUE(checked >= 100 && multi >= 40);
    EXPECT_TRUE(hits > 0); /* repeated layers reuse their pieces' results (checked equal above) */
    un_cost_model_free(cm);
    un_ctx_free(ctx);
}

/* A wide layer pays for splitting its weight; a tiny one stays data parallel or serial. */
static void test_choices(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine mach;
    un_cost_model *cm = model_for(ctx, "specs/machines/v100x4.json", &mach);
    un_graph *g = small_graph(ctx, 3, 8, 2048); /* 16384-wide weights, batch 8 */
    un_map_params p = un_map_params_default(4);
    un_map *m = NULL;
    EXPECT_OK(ctx, un_map_new(ctx, cm, g, &p, &m));
    int32_t n = un_graph_node_count(g);
    int32_t *a = calloc((size_t)n, sizeof *a), *dp = calloc((size_t)n, sizeof *dp);
    un_map_stats st;
    EXPECT_OK(ctx, un_map_solve(ctx, m, 0, a, &st));
    un_map_data_parallel(m, dp);
    double t_dp, t_best, mem_dp, mem_best;
    un_map_cost(m, dp, 0, &t_dp, &mem_dp);
    un_map_cost(m, a, 0, &t_best, &mem_best);
    EXPECT_TRUE(t_best < t_dp);
    int32_t mid = un_graph_find(g, "mid");
    EXPECT_TRUE(strstr(un_map_config_get(m, mid, a[mid])->name, "batch") == NULL);
    free(a);
    free(dp);
    un_map_free(m);
    un_graph_free(g);
    un_cost_model_free(cm);
    un_ctx_free(ctx);
}

static void test_bad(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine mach;
    un_cost_model *cm = model_for(ctx, "specs/machines/v100x4.json", &mach);
    un_graph *g = small_graph(ctx, 0, 16, 32);
    un_map_params p = un_map_params_default(8);
    un_map *m = NULL;
    un_status st = un_map_new(ctx, cm, g, &p, &m);
    EXPECT_TRUE(st != UN_OK && m == NULL && strstr(un_ctx_errmsg(ctx), "8 devices"));
    un_graph_free(g);
    un_cost_model_free(cm);
    un_ctx_free(ctx);
}

/* Every zoo model, tiny and paper-sized, maps on 2 and 4 devices; the tiny plans load. */
static void test_zoo(void) {
    int nm;
    const char *const *names = un_zoo_names(&nm);
    for (int i = 0; i < nm; i++)
        for (int tiny = 1; tiny >= 0; tiny--)
            for (int devices = 2; devices <= 4; devices *= 2) {
                un_ctx *ctx = un_ctx_new(NULL);
                un_machine mach;
                un_cost_model *cm = model_for(ctx, "specs/machines/v100x4.json", &mach);
                un_model md;
                EXPECT_OK(ctx, un_zoo_build(ctx, S, names[i], tiny, 0, &md));
                un_map_params p = un_map_params_default(devices);
                un_map *m = NULL;
                EXPECT_OK(ctx, un_map_new(ctx, cm, md.graph, &p, &m));
                int32_t n = un_graph_node_count(md.graph);
                int32_t *a = calloc((size_t)n, sizeof *a);
                un_map_stats st;
                un_graph *plan = NULL;
                if (m)
                    EXPECT_OK(ctx, un_map_solve(ctx, m, 0, a, &st));
                if (m)
                    EXPECT_OK(ctx, un_map_plan(ctx, m, a, &plan));
                if (plan) {
                    un_buf b = {0};
                    EXPECT_OK(ctx, un_graph_to_json(ctx, plan, &b));
                    char path[] = "/tmp/unity-test-search-XXXXXX";
                    int fd = mkstemp(path);
                    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
                    if (f) {
                        fwrite(b.data, 1, b.len, f);
                        fclose(f);
                        un_graph *back = NULL;
                        un_status s2 = un_strategy_plan_load(ctx, S, path, md.graph,
                                                             (int)un_strategy_devices(plan), &back);
                        test__check(s2 == UN_OK, TEST__AT, "%s%s on %d: plan does not load: %s",
                                    names[i], tiny ? " tiny" : "", devices, un_ctx_errmsg(ctx));
                        un_graph_free(back);
                        remove(path);
                    }
                    un_buf_deinit(&b);
                }
                un_graph_free(plan);
                free(a);
                un_map_free(m);
                un_model_deinit(&md);
                un_cost_model_free(cm);
                un_ctx_free(ctx);
            }
}

static un_train_opts tiny_opts(const char *model, int devices, const char *strategy) {
    un_train_opts o = un_train_opts_default();
    o.model = model;
    o.tiny = true;
    o.devices = devices;
    o.strategy = strategy;
    o.steps = 4;
    o.threads = 1;
    o.quiet = true;
    o.out = stdout;
    o.prec = UN_PREC_F64;
    o.optimizer = "adam";
    return o;
}

/* Writes a plan to a temporary file; returns its path (static buffer) or NULL. */
static const char *plan_file(un_ctx *ctx, const un_graph *plan, char *path, size_t n) {
    snprintf(path, n, "/tmp/unity-test-plan-XXXXXX.json");
    int fd = mkstemps(path, 5);
    if (fd < 0)
        return NULL;
    un_buf b = {0};
    EXPECT_OK(ctx, un_graph_to_json(ctx, plan, &b));
    FILE *f = fdopen(fd, "w");
    fwrite(b.data, 1, b.len, f);
    fclose(f);
    un_buf_deinit(&b);
    return path;
}

/* Trains plan (owned, freed) on the devices it uses and compares its first losses with serial's
 * (r1): within 1e-9 relative in float64. Returns whether it ran. */
static bool plan_trains(const char *model, const un_train_result *r1, un_graph *plan, int devices,
                        const char *what) {
    un_ctx *ctx = un_ctx_new(NULL);
    char path[64];
    test__check(!plan || un_strategy_devices(plan) <= devices, TEST__AT,
                "%s: plan for %d devices uses %lld", model, devices,
                plan ? (long long)un_strategy_devices(plan) : 0LL);
    bool ran = false;
    if (plan && plan_file(ctx, plan, path, sizeof path)) {
        int used = (int)un_strategy_devices(plan);
        un_train_opts po = tiny_opts(model, used, path);
        un_train_result rp;
        un_status st = un_train_run(ctx, &po, &rp);
        double worst = 0;
        for (int s = 0; st == UN_OK && s < 4; s++)
            worst = fmax(worst, fabs(rp.losses[s] - r1->losses[s]) / fabs(r1->losses[s]));
        test__check(st == UN_OK && worst <= 1e-9, TEST__AT,
                    "%s on %d devices, %s (plan on %d): %s, loss diff %g", model, devices, what,
                    used, st == UN_OK ? "ran" : un_ctx_errmsg(ctx), worst);
        ran = st == UN_OK;
        if (ran)
            un_train_result_deinit(&rp);
        remove(path);
    }
    un_graph_free(plan);
    un_ctx_free(ctx);
    return ran;
}

/* Mapped plans run on the runtime with serial's losses (float64, 1e-9): every tiny model on 2
 * and 4 devices, under data parallelism, the widest configuration of every node, random
 * assignments, layer 3's plan on a machine where parallelism pays and on this box's cpu.json,
 * and the joint search's own plan (un_search_run: layer 1, the memory price, the candidates) on
 * v100x4 and, for 2 devices, cpu.json, ranked under plan and under runtime semantics. */
static void test_plans_train(void) {
    int nm;
    const char *const *names = un_zoo_names(&nm);
    int runs = 0, searched = 0;
    for (int i = 0; i < nm; i++) {
        un_ctx *ctx = un_ctx_new(NULL);
        un_train_opts so = tiny_opts(names[i], 1, "serial");
        un_train_result r1;
        EXPECT_OK(ctx, un_train_run(ctx, &so, &r1));
        un_graph *g = NULL;
        int one;
        EXPECT_OK(ctx, un_train_graph(ctx, S, &so, &g, &one));
        for (int devices = 2; devices <= 4 && g; devices *= 2) {
            un_machine mach;
            un_cost_model *cm = model_for(ctx, "specs/machines/v100x4.json", &mach);
            un_map_params p = un_map_params_default(devices);
            un_map *m = NULL;
            EXPECT_OK(ctx, un_map_new(ctx, cm, g, &p, &m));
            int32_t n = un_graph_node_count(g);
            int32_t *a = calloc((size_t)n, sizeof *a);
            un_rng rng;
            un_rng_seed(&rng, 99 + (uint64_t)i);
            /* kinds 4 and 5 (h26): the searched plan (layer 3, branches on disjoint devices
             * allowed) for v100x4 and for this box's cpu.json */
            un_machine mcpu;
            un_cost_model *ccpu = model_for(ctx, "specs/machines/cpu.json", &mcpu);
            un_map *mc = NULL;
            bool cpu_ok = devices <= un_machine_devices(&mcpu); /* cpu.json: this box's 2 cores */
            if (cpu_ok)
                EXPECT_OK(ctx, un_map_new(ctx, ccpu, g, &p, &mc));
            for (int kind = 0; kind < (mc ? 6 : 5) && m; kind++) {
                un_map_stats mst;
                if (kind == 0)
                    un_map_data_parallel(m, a);
                if (kind >= 4)
                    EXPECT_OK(ctx, un_map_solve(ctx, kind == 4 ? m : mc, 0, a, &mst));
                for (int32_t v = 0; v < n && kind > 0 && kind < 4; v++) {
                    int32_t nc = un_map_config_count(m, v);
                    a[v] = nc == 0     ? -1
                           : kind == 1 ? nc - 1
                                       : (int32_t)un_rng_below(&rng, (uint64_t)nc);
                }
                un_graph *plan = NULL;
                EXPECT_OK(ctx, un_map_plan(ctx, kind == 5 ? mc : m, a, &plan));
                char what[48];
                snprintf(what, sizeof what, "assignment kind %d", kind);
                runs += plan_trains(names[i], &r1, plan, devices, what);
            }
            /* the joint search's plans (no rules: the zoo model itself is trained) */
            for (int k = 0; k < (cpu_ok ? 4 : 2); k++) {
                un_search_params sp = un_search_params_default(devices);
                sp.sim_runtime = k % 2 == 1;
                sp.budget = 2000;
                un_search_result sr;
                un_ctx *c2 = un_ctx_new(NULL);
                un_status st = un_search_run(c2, k < 2 ? cm : ccpu, g, &sp, &sr);
                test__check(st == UN_OK, TEST__AT, "%s: search on %d devices (%s, %s): %s",
                            names[i], devices, k < 2 ? "v100x4" : "cpu.json",
                            sp.sim_runtime ? "runtime" : "plan", un_ctx_errmsg(c2));
                if (st == UN_OK) {
                    char what[64];
                    snprintf(what, sizeof what, "joint search, %s, %s semantics",
                             k < 2 ? "v100x4" : "cpu.json", sp.sim_runtime ? "runtime" : "plan");
                    searched += plan_trains(names[i], &r1, sr.plan, devices, what);
                    sr.plan = NULL;
                    un_search_result_deinit(&sr);
                }
                un_ctx_free(c2);
            }
            free(a);
            un_map_free(m);
            un_map_free(mc);
            un_cost_model_free(cm);
            un_cost_model_free(ccpu);
        }
        un_graph_free(g);
        un_train_result_deinit(&r1);
        un_ctx_free(ctx);
    }
    EXPECT_TRUE(runs >= 60);
    /* every tiny model: 2 devices x 4 searches + 4 devices x 2 */
    test__check(searched == 6 * nm, TEST__AT, "searched plans trained: %d of %d", searched, 6 * nm);
}

/* Joint is never estimated worse than any other mode (every zoo model, tiny and paper-sized, on 4
 * V100s; a mode that finds no fitting plan is skipped), and says why it ended. */
static void test_modes(void) {
    int nm;
    const char *const *names = un_zoo_names(&nm);
    for (int i = 0; i < nm; i++)
        for (int tiny = 1; tiny >= 0; tiny--) {
            if (!tiny && strcmp(names[i], "inception_v3") == 0)
                continue; /* no plan fits 4 x 16 GB at batch 64 (search.sh shows it) */
            un_ctx *ctx = un_ctx_new(NULL);
            un_machine mach;
            un_cost_model *cm = model_for(ctx, "specs/machines/v100x4.json", &mach);
            un_model md;
            EXPECT_OK(ctx, un_zoo_build(ctx, S, names[i], tiny, 0, &md));
            double step[UN_SEARCH_COUNT];
            for (int mode = 0; mode < UN_SEARCH_COUNT; mode++) {
                un_search_params p = un_search_params_default(4);
                p.mode = (un_search_mode)mode;
                p.budget = 2000;
                un_search_result r;
                un_ctx *c2 = un_ctx_new(NULL);
                un_status st = un_search_run(c2, cm, md.graph, &p, &r);
                step[mode] = st == UN_OK ? r.sim.step : INFINITY;
                if (mode == UN_SEARCH_JOINT) {
                    EXPECT_OK(c2, st);
                    EXPECT_TRUE(st != UN_OK || (r.sim.fits && r.ended && r.plan));
                }
                if (st == UN_OK)
                    un_search_result_deinit(&r);
                un_ctx_free(c2);
            }
            /* data parallel, serial and mcmc's plan are joint's candidates (and, with rules,
             * taso's graph): joint is never worse than any of them */
            for (int mode = 1; mode < UN_SEARCH_COUNT; mode++)
                test__check(step[UN_SEARCH_JOINT] <= step[mode] * (1 + 1e-9), TEST__AT,
                            "%s%s: joint %g s, %s %g s", names[i], tiny ? " tiny" : "",
                            step[UN_SEARCH_JOINT], un_search_mode_name((un_search_mode)mode),
                            step[mode]);
            un_model_deinit(&md);
            un_cost_model_free(cm);
            un_ctx_free(ctx);
        }
}

/* Every piece of a plan can be profiled and is then costed as measured: for every tiny model on 2
 * and 4 devices, the joint search's plan (v100x4) and the widest configuration of every node
 * (attention split by heads: its pieces fail the op's requirements on piece shapes, but they run)
 * are profiled into a fresh op-cost cache (one quick repetition each), and a cost model over that
 * cache answers every regular node of the plan from it. */
static void test_profile_plans(void) {
    char dir[64];
    if (!test_tmpdir_make(dir, sizeof dir, "/tmp/unity-test-profile-XXXXXX"))
        return;
    int nm;
    const char *const *names = un_zoo_names(&nm);
    int profiled = 0, refused = 0;
    for (int i = 0; i < nm; i++) {
        un_ctx *ctx = un_ctx_new(NULL);
        un_train_opts so = tiny_opts(names[i], 1, "serial");
        un_graph *g = NULL;
        int one;
        EXPECT_OK(ctx, un_train_graph(ctx, S, &so, &g, &one));
        for (int k = 0; k < 4 && g; k++) {
            int devices = k % 2 ? 4 : 2;
            un_machine mach;
            un_cost_model *cm = model_for(ctx, "specs/machines/v100x4.json", &mach);
            un_graph *plan = NULL;
            if (k < 2) { /* the joint search's plan */
                un_search_params sp = un_search_params_default(devices);
                un_search_result sr;
                if (un_search_run(ctx, cm, g, &sp, &sr) == UN_OK) {
                    plan = sr.plan;
                    sr.plan = NULL;
                    un_search_result_deinit(&sr);
                }
            } else { /* the widest configuration of every node */
                un_map_params p = un_map_params_default(devices);
                un_map *m = NULL;
                EXPECT_OK(ctx, un_map_new(ctx, cm, g, &p, &m));
                int32_t n = un_graph_node_count(g);
                int32_t *a = calloc((size_t)n + 1, sizeof *a);
                for (int32_t v = 0; v < n && m; v++)
                    a[v] = un_map_config_count(m, v) - 1;
                if (m)
                    EXPECT_OK(ctx, un_map_plan(ctx, m, a, &plan));
                free(a);
                un_map_free(m);
            }
            un_cost_model_free(cm);
            test__check(plan != NULL, TEST__AT, "%s on %d devices: no plan (%s)", names[i], devices,
                        un_ctx_errmsg(ctx));
            if (!plan)
                continue;
            char path[96];
            snprintf(path, sizeof path, "%s/%s-%d.db", dir, names[i], k);
            un_rulesdb *db = NULL;
            EXPECT_OK(ctx, un_rulesdb_open(ctx, path, S, UN_RULESDB_CREATE, &db));
            un_profile_params pp = un_profile_params_default();
            pp.device = "cpu";
            pp.threads = 2; /* (1 thread would also time the meet points: slow here) */
            pp.warmup = 0;
            pp.min_reps = 1;
            pp.min_seconds = 0;
            int64_t stored = 0;
            un_status st = db ? un_profile_graph(ctx, db, plan, &pp, NULL, &stored) : UN_ERR_IO;
            test__check(st == UN_OK, TEST__AT, "%s: %s plan on %d devices not profiled: %s",
                        names[i], k < 2 ? "the searched" : "the widest", devices,
                        un_ctx_errmsg(ctx));
            profiled += st == UN_OK;
            un_machine mcpu;
            EXPECT_OK(ctx, un_machine_load(ctx, "specs/machines/cpu.json", &mcpu));
            EXPECT_OK(ctx, un_cost_model_new(ctx, S, &mcpu, UN_MPREC_F32, db, &cm));
            for (int32_t id = 0; id < un_graph_node_count(plan) && st == UN_OK && cm; id++) {
                const un_node *nd = un_graph_node(plan, id);
                if (un_op_kind_of(nd->op) != UN_OPK_REGULAR)
                    continue;
                un_op_cost c;
                EXPECT_OK(ctx, un_cost_node(ctx, cm, plan, id, &c));
                test__check(c.measured, TEST__AT,
                            "%s: node %s of the %s plan on %d devices: not measured", names[i],
                            nd->name ? nd->name : "?", k < 2 ? "searched" : "widest", devices);
                un_shape in[UN_MAX_INPUTS];
                un_cost_piece_shapes(plan, id, in);
                un_infer inf;
                refused += un_spec_infer(NULL, S, nd->op, nd->inf.local, in, nd->n_in, NULL,
                                         &inf) != UN_OK;
            }
            un_cost_model_free(cm);
            un_rulesdb_free(db);
            remove(path);
            un_graph_free(plan);
        }
        un_graph_free(g);
        un_ctx_free(ctx);
    }
    test__check(profiled == 4 * nm, TEST__AT, "plans profiled: %d of %d", profiled, 4 * nm);
    /* pieces the op's requirements refuse (attention split by heads) were among them */
    EXPECT_TRUE(refused > 0);
    rmdir(dir);
}

/* The search's estimate of its plan equals --estimate's of the exported plan (one costing
 * path, un_search_estimate): every tiny model on 2 and 4 devices (v100x4; cpu.json on 2), ranked
 * under plan and under runtime semantics, to 1e-9 relative. */
static void test_estimate_agrees(void) {
    int nm;
    const char *const *names = un_zoo_names(&nm);
    int checked = 0;
    for (int i = 0; i < nm; i++)
        for (int k = 0; k < 6; k++) {
            int devices = k < 4 ? 2 : 4;
            const char *machine = k < 2 ? "specs/machines/cpu.json" : "specs/machines/v100x4.json";
            un_ctx *ctx = un_ctx_new(NULL);
            un_machine mach;
            un_cost_model *cm = model_for(ctx, machine, &mach);
            un_train_opts so = tiny_opts(names[i], 1, "serial");
            so.prec = UN_PREC_F32;
            un_graph *g = NULL, *loaded = NULL;
            int one;
            EXPECT_OK(ctx, un_train_graph(ctx, S, &so, &g, &one));
            un_search_params sp = un_search_params_default(devices);
            sp.sim_runtime = k % 2 == 1;
            un_search_result sr;
            memset(&sr, 0, sizeof sr);
            EXPECT_OK(ctx, un_search_run(ctx, cm, g, &sp, &sr));
            char path[64];
            if (sr.plan && plan_file(ctx, sr.plan, path, sizeof path)) {
                un_train_opts eo = so;
                eo.strategy = path;
                eo.devices = sr.devices_used;
                int used;
                EXPECT_OK(ctx, un_train_graph(ctx, S, &eo, &loaded, &used));
                un_sim_result r; /* what unity-train --estimate does with the plan file */
                if (loaded && un_search_estimate(ctx, cm, loaded, sp.sim_runtime, eo.optimizer,
                                                 used, &r) == UN_OK) {
                    test__check(fabs(r.step - sr.sim.step) <= 1e-9 * sr.sim.step, TEST__AT,
                                "%s on %d devices of %s (%s semantics): search %.9g s, estimate "
                                "of its plan %.9g s",
                                names[i], devices, machine, sp.sim_runtime ? "runtime" : "plan",
                                sr.sim.step, r.step);
                    checked++;
                    un_sim_result_deinit(&r);
                }
                remove(path);
            }
            if (sr.plan)
                un_search_result_deinit(&sr);
            un_graph_free(loaded);
            un_graph_free(g);
            un_cost_model_free(cm);
            un_ctx_free(ctx);
        }
    test__check(checked == 6 * nm, TEST__AT, "estimates compared: %d of %d", checked, 6 * nm);
}

/* Beyond 8 devices, plans with uneven splits (the quarters on whole nodes, a degree filling the
 * larger part) are joint's candidates too: never worse than the halves alone (the simulator
 * picks), and better where a heavy branch gets the larger part: two branches of the branch
 * graphs on 16 and 24 devices of the 192-V100 machine (6 per node: 6 + 18 of 24). */
static void test_uneven(void) {
    int wins = 0;
    for (int which = 0; which < 4; which++)
        for (int size = 0; size < 2; size++)
            for (int devices = 16; devices <= 24; devices += 8) {
                un_ctx *ctx = un_ctx_new(NULL);
                un_machine mach;
                un_cost_model *cm = model_for(ctx, "specs/machines/v100x192.json", &mach);
                un_graph *g = branch_graph(ctx, which, 72, size ? 2304 : 144);
                double step[2];
                for (int k = 0; k < 2; k++) {
                    un_search_params p = un_search_params_default(devices);
                    p.halves_only = k == 0;
                    un_search_result r;
                    un_status st = un_search_run(ctx, cm, g, &p, &r);
                    EXPECT_OK(ctx, st);
                    step[k] = st == UN_OK ? r.sim.step : INFINITY;
                    if (st == UN_OK)
                        un_search_result_deinit(&r);
                }
                test__check(step[1] <= step[0] * (1 + 1e-9), TEST__AT,
                            "graph %d, size %d, %d devices: with uneven splits %g s, halves %g s",
                            which, size, devices, step[1], step[0]);
                wins += step[1] < step[0] * (1 - 1e-6);
                un_graph_free(g);
                un_cost_model_free(cm);
                un_ctx_free(ctx);
            }
    EXPECT_TRUE(wins > 0);
}

int main(void) {
    static const test_case cases[] = {
        {"exhaustive", test_exhaustive},
        {"branches", test_branches},
        {"split", test_split},
        {"choices", test_choices},
        {"bad", test_bad},
        {"zoo", test_zoo},
        {"plans_train", test_plans_train},
        {"modes", test_modes},
        {"profile_plans", test_profile_plans},
        {"estimate_agrees", test_estimate_agrees},
        {"uneven", test_uneven},
    };
    return TEST_RUN_WITH_SPEC(cases, &S);
}
