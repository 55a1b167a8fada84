/* test_cost.c - machine descriptions, the cost model and the simulator (search/machine.h,
 * search/cost.h, search/sim.h), and unity-train --estimate / --profile on bad input. */
#include "runtime/backend_cuda.h"
#include "runtime/train.h"
#include "search/profile.h"
#include "search/sim.h"
#include "tests/cli.h"

static un_spec *spec;

static const char *const machine_files[] = {"specs/machines/cpu.json", "specs/machines/v100x4.json",
                                            "specs/machines/a100x8.json",
                                            "specs/machines/h100x8.json",
                                            "specs/machines/v100x192.json"};

static const char good[] =
    "{\"version\": 1, \"name\": \"t\", \"nodes\": 2, \"devices_per_node\": 2,"
    " \"device\": {\"kind\": \"x\", \"flops\": {\"f32\": 1e12}, \"mem_bw\": 1e11, \"memory\": %s},"
    " \"intra_node\": {\"bw\": 1e11, \"latency\": 1e-6},"
    " \"inter_node\": {\"bw\": 1e10, \"latency\": 1e-5, \"collective\": \"tree\"}}";

static un_machine machine_mem(const char *memory) {
    char text[1024];
    snprintf(text, sizeof text, good, memory);
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine m;
    EXPECT_OK(ctx, un_machine_parse(ctx, "t.json", text, strlen(text), &m));
    un_ctx_free(ctx);
    return m;
}

static void test_machine_files(void) {
    int devs[] = {2, 4, 8, 8, 192};
    for (size_t i = 0; i < sizeof machine_files / sizeof *machine_files; i++) {
        un_ctx *ctx = un_ctx_new(NULL);
        un_machine m;
        EXPECT_OK(ctx, un_machine_load(ctx, machine_files[i], &m));
        EXPECT_TRUE(m.dev.flops[UN_MPREC_F32] > 0 && m.dev.mem_bw > 0 && m.dev.memory > 0);
        if (i > 0)
            EXPECT_EQ(un_machine_devices(&m), devs[i]);
        un_ctx_free(ctx);
    }
    un_machine m = machine_mem("1e9");
    EXPECT_TRUE(un_machine_link(&m, 0, 1) == &m.intra);
    EXPECT_TRUE(un_machine_link(&m, 1, 2) == &m.inter);
    EXPECT_EQ(m.inter.algo, UN_COLL_TREE);
    /* the JSON the measuring tool writes reads back */
    un_buf b = {0};
    un_machine_to_json(&m, &b);
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine m2;
    EXPECT_OK(ctx, un_machine_parse(ctx, "back.json", b.data, b.len, &m2));
    EXPECT_NEAR(m2.inter.bw, m.inter.bw, 1);
    un_ctx_free(ctx);
    un_buf_deinit(&b);
}

static void expect_bad(const char *text, const char *want) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_machine m;
    un_status st = un_machine_parse(ctx, "bad.json", text, strlen(text), &m);
    EXPECT_TRUE(st != UN_OK);
    const char *msg = un_ctx_errmsg(ctx);
    bool ok = strstr(msg, "bad.json") && strstr(msg, want) && !strchr(msg, '\n');
    if (!ok)
        printf("  message: %s (want '%s')\n", msg, want);
    EXPECT_TRUE(ok);
    EXPECT_EQ(m.nodes, 0);
    un_ctx_free(ctx);
}

static void test_machine_bad(void) {
    char t[1024];
    snprintf(t, sizeof t, good, "-1");
    expect_bad(t, "$.device.memory: must be greater than 0");
    snprintf(t, sizeof t, good, "\"lots\"");
    expect_bad(t, "$.device.memory: expected a number");
    expect_bad("{\"version\": 1, \"name\": \"t\", \"nodes\": 2, \"devices_per_node\": 2,"
               " \"device\": {\"kind\": \"x\", \"flops\": {\"f32\": 1e12}, \"mem_bw\": 1,"
               " \"memory\": 1}, \"intra_node\": {\"bw\": 1, \"latency\": 0}}",
               "missing member 'inter_node'");
    expect_bad("{\"version\": 1, \"name\": \"t\", \"nodes\": 1, \"devices_per_node\": 2,"
               " \"device\": {\"kind\": \"x\", \"flops\": {\"f16\": 1e12}, \"mem_bw\": 1,"
               " \"memory\": 1}, \"intra_node\": {\"bw\": 1, \"latency\": 0}}",
               "$.device.flops: missing member 'f32'");
    expect_bad("{\"version\": 1, \"name\": \"t\", \"nodes\": 1, \"devices_per_node\": 2,"
               " \"device\": {\"kind\": \"x\", \"flops\": {\"f32\": 1}, \"mem_bw\": 1,"
               " \"memory\": 1}, \"intra_node\": {\"bw\": 1, \"latency\": 0, \"collective\": "
               "\"star\"}}",
               "$.intra_node.collective: unknown collective 'star'");
    expect_bad("{\"version\": 1, \"name\": \"t\", \"nodes\": 0}", "$.nodes: must be in 1..65536");
    expect_bad("{\"version\": 2}", "$.version: unsupported version 2");
    expect_bad("{\"version\": 1, \"name\": \"t\", \"nodes\": 1, \"devices_per_node\": 1, "
               "\"speed\": 3}",
               "speed");
    expect_bad("[1,", "bad.json");
}

static un_cost_model *model_on(const un_machine *m, un_rulesdb *db) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_cost_model *cm = NULL;
    EXPECT_OK(ctx, un_cost_model_new(ctx, spec, m, UN_MPREC_F32, db, &cm));
    un_ctx_free(ctx);
    return cm;
}

/* Every regular op on its first example, and on the example with input 0's dim 0 doubled: both
 * costs positive, and the larger piece costs more. */
static void test_op_costs_grow(void) {
    un_machine m = machine_mem("1e9");
    un_cost_model *cm = model_on(&m, NULL);
    int checked = 0, ops = 0;
    for (int op = 0; op < UN_OP_COUNT; op++) {
        const un_op_spec *os = un_spec_op(spec, (un_op)op);
        if (os->kind != UN_OPK_REGULAR || os->n_examples == 0)
            continue;
        ops++;
        const un_example *ex = &os->examples[0];
        un_ctx *ctx = un_ctx_new(NULL);
        un_op_cost a, b;
        EXPECT_OK(ctx, un_cost_piece(ctx, cm, (un_op)op, ex->params, ex->in, ex->n_in, &a));
        EXPECT_TRUE(a.fwd > 0 && a.bwd > 0);
        /* grow every input's dim 0 that is the same size as input 0's (the batch), twice */
        un_shape in[UN_MAX_INPUTS];
        memcpy(in, ex->in, sizeof in);
        int64_t d0 = in[0].dim[0];
        for (int t = 0; t < ex->n_in; t++)
            if (in[t].rank > 0 && in[t].dim[0] == d0 && (t == 0 || !os->inputs[t].weight))
                in[t].dim[0] *= 2;
        un_ctx *c2 = un_ctx_new(NULL);
        if (un_cost_piece(c2, cm, (un_op)op, ex->params, in, ex->n_in, &b) == UN_OK) {
            bool ok = b.fwd > a.fwd && b.bwd > a.bwd;
            if (!ok)
                printf("  %s: %g -> %g (fwd), %g -> %g (bwd)\n", os->name, a.fwd, b.fwd, a.bwd,
                       b.bwd);
            EXPECT_TRUE(ok);
            checked++;
        }
        un_ctx_free(c2);
        un_ctx_free(ctx);
    }
    printf("  %d of %d regular ops checked on a larger piece\n", checked, ops);
    EXPECT_TRUE(checked * 4 >= ops * 3);
    EXPECT_STR_EQ(un_cost_warnings(cm), "");
    /* the second query of a piece is a cache hit */
    int64_t q, c, meas;
    un_cost_stats(cm, &q, &c, &meas);
    const un_op_spec *os = un_spec_op(spec, UN_OP_LINEAR);
    un_ctx *ctx = un_ctx_new(NULL);
    un_op_cost x;
    EXPECT_OK(ctx, un_cost_piece(ctx, cm, UN_OP_LINEAR, os->examples[0].params,
                                 os->examples[0].in, os->examples[0].n_in, &x));
    int64_t q2, c2, m2;
    un_cost_stats(cm, &q2, &c2, &m2);
    EXPECT_EQ(q2, q + 1);
    EXPECT_EQ(c2, c + 1);
    un_ctx_free(ctx);
    un_cost_model_free(cm);
}

/* An op whose spec lost its cost gets the default and one warning, never an error. */
static void test_cost_default(void) {
    static const char cost[] = "\"cost\": {\"flops\": \"numel(out0)\", \"bytes\": "
                               "\"4 * 2 * numel(out0)\", \"bwd_flops\": \"numel(out0)\", "
                               "\"bwd_bytes\": \"3 * (4 * 2 * numel(out0)) / 2\"},";
    un_ctx *ctx = un_ctx_new(NULL);
    char *text = NULL;
    size_t len = 0;
    EXPECT_OK(ctx, un_read_file(ctx, "specs/ops.json", &text, &len));
    char *at = text ? strstr(text, cost) : NULL;
    EXPECT_TRUE(at != NULL);
    if (!at) {
        free(text);
        un_ctx_free(ctx);
        return;
    }
    memset(at, ' ', sizeof cost - 1);
    un_spec *sp = NULL;
    EXPECT_OK(ctx, un_spec_parse(ctx, "nocost.json", text, len, &sp));
    un_machine m = machine_mem("1e9");
    un_cost_model *cm = NULL;
    EXPECT_OK(ctx, un_cost_model_new(ctx, sp, &m, UN_MPREC_F32, NULL, &cm));
    int costless = 0;
    for (int op = 0; cm && op < UN_OP_COUNT; op++) {
        const un_op_spec *os = un_spec_op(sp, (un_op)op);
        if (os->kind != UN_OPK_REGULAR || os->flops)
            continue;
        costless++;
        un_op_cost c;
        const un_example *ex = &os->examples[0];
        EXPECT_OK(ctx, un_cost_piece(ctx, cm, (un_op)op, ex->params, ex->in, ex->n_in, &c));
        EXPECT_TRUE(c.fwd > 0 && c.bwd > 0 && c.bytes > 0);
        EXPECT_TRUE(strstr(un_cost_warnings(cm), os->name) != NULL);
    }
    EXPECT_EQ(costless, 1);
    EXPECT_TRUE(strstr(un_cost_warnings(cm), "has no cost expression") != NULL);
    un_cost_model_free(cm);
    un_spec_free(sp);
    free(text);
    un_ctx_free(ctx);
}

static void test_collectives(void) {
    un_machine m = machine_mem("1e9");
    un_cost_model *cm = model_on(&m, NULL);
    int devs[4] = {0, 1, 2, 3};
    EXPECT_TRUE(un_cost_allreduce(cm, devs, 1, 1e6) == 0);
    EXPECT_TRUE(un_cost_p2p(cm, 1, 1, 1e6) == 0);
    double intra = un_cost_allreduce(cm, devs, 2, 1e6), inter = un_cost_allreduce(cm, devs, 4, 1e6);
    EXPECT_TRUE(intra > 0 && inter > intra);
    EXPECT_TRUE(un_cost_p2p(cm, 0, 2, 1e6) > un_cost_p2p(cm, 0, 1, 1e6));
    EXPECT_TRUE(un_cost_allreduce(cm, devs, 2, 2e6) > intra);
    un_cost_model_free(cm);
}

/* x -> relu -> partition(0, 2) -> combine(0, 2) -> relu on one device: no communication. */
static void test_roundtrip_one_device(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = un_graph_new(spec);
    int32_t x, h, p, c, y;
    EXPECT_OK(ctx, un_graph_add_input(ctx, g, "x", UN_OP_INPUT, 2, (int64_t[]){8, 16}, &x));
    EXPECT_OK(ctx, un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{x, 0}}, 1, "h", &h));
    EXPECT_OK(ctx, un_graph_add_parallel(ctx, g, UN_OP_PARTITION, (un_ref){h, 0}, 0, 2, "p", &p));
    EXPECT_OK(ctx, un_graph_add_parallel(ctx, g, UN_OP_COMBINE, (un_ref){p, 0}, 0, 2, "c", &c));
    EXPECT_OK(ctx, un_graph_add(ctx, g, UN_OP_RELU, NULL, (un_ref[]){{c, 0}}, 1, "y", &y));
    un_machine m = machine_mem("1e9");
    un_cost_model *cm = model_on(&m, NULL);
    for (int mirror = 0; mirror < 2; mirror++) {
        un_sim_params sp = un_sim_params_default();
        sp.devices = 1;
        sp.mirror_sources = mirror;
        un_sim_result r;
        EXPECT_OK(ctx, un_sim_run(ctx, cm, g, &sp, &r));
        EXPECT_TRUE(r.comm_bytes == 0 && r.comm_total == 0 && r.crit_comm == 0);
        EXPECT_TRUE(r.step > 0);
        un_sim_result_deinit(&r);
        /* on two devices the pieces move */
        sp.devices = 2;
        EXPECT_OK(ctx, un_sim_run(ctx, cm, g, &sp, &r));
        EXPECT_TRUE(r.comm_bytes > 0);
        un_sim_result_deinit(&r);
    }
    un_cost_model_free(cm);
    un_graph_free(g);
    un_ctx_free(ctx);
}

/* The tiny MLP data parallel: the step is a schedule (less than the sum of all devices' work),
 * memory is reported, and a machine with too little memory says the plan does not fit. */
static void test_sim_mlp(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = NULL;
    un_train_opts o = un_train_opts_default();
    o.model = "mlp";
    o.tiny = true;
    o.devices = 2;
    int d = 0;
    EXPECT_OK(ctx, un_train_graph(ctx, spec, &o, &g, &d));
    EXPECT_EQ(d, 2);
    for (int big = 0; big < 2 && g; big++) {
        un_machine m = machine_mem(big ? "1e12" : "1e4");
        un_cost_model *cm = model_on(&m, NULL);
        un_sim_params sp = un_sim_params_default();
        sp.devices = 2;
        un_sim_result r;
        EXPECT_OK(ctx, un_sim_run(ctx, cm, g, &sp, &r));
        EXPECT_TRUE(r.step > 0 && r.step < r.compute_total + r.comm_total + 1.0);
        EXPECT_TRUE(r.mem[0] > 0 && r.mem_weights > 0 && r.mem_acts > 0);
        EXPECT_EQ(r.fits, big);
        un_buf b = {0};
        un_sim_report(g, &r, cm, &b);
        EXPECT_EQ(strstr(b.data, "DOES NOT FIT") != NULL, !big);
        EXPECT_TRUE(strstr(b.data, "critical path's top operators") != NULL);
        un_buf_deinit(&b);
        un_sim_result_deinit(&r);
        /* more devices than the machine has */
        sp.devices = 5;
        EXPECT_TRUE(un_sim_run(ctx, cm, g, &sp, &r) == UN_ERR_INVALID);
        un_cost_model_free(cm);
    }
    un_graph_free(g);
    un_ctx_free(ctx);
}

/* A measured cost in rules.db replaces the analytic one for its device kind only. */
static void test_measured(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/costs.db", cli_tmp);
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    EXPECT_OK(ctx, un_rulesdb_open(ctx, path, spec, UN_RULESDB_CREATE, &db));
    const un_op_spec *os = un_spec_op(spec, UN_OP_RELU);
    const un_example *ex = &os->examples[0];
    un_rulesdb_cost c;
    memset(&c, 0, sizeof c);
    EXPECT_TRUE(un_cost_key(spec, UN_OP_RELU, ex->params, ex->in, ex->n_in, c.op_sig,
                            sizeof c.op_sig, c.shape, sizeof c.shape));
    snprintf(c.device, sizeof c.device, "x");
    c.fwd_ms = 3;
    c.bwd_ms = 5;
    EXPECT_OK(ctx, un_rulesdb_cost_put(ctx, db, &c));
    un_machine m = machine_mem("1e9");
    for (int other = 0; other < 2; other++) {
        if (other)
            snprintf(m.dev.kind, sizeof m.dev.kind, "y");
        un_cost_model *cm = model_on(&m, db);
        un_op_cost oc;
        EXPECT_OK(ctx, un_cost_piece(ctx, cm, UN_OP_RELU, ex->params, ex->in, ex->n_in, &oc));
        EXPECT_EQ(oc.measured, !other);
        if (!other)
            EXPECT_TRUE(oc.fwd == 3e-3 && oc.bwd == 5e-3);
        un_cost_model_free(cm);
    }
    un_rulesdb_free(db);
    un_ctx_free(ctx);
}

static void test_cli(void) {
    const cli_result *r =
        cli_run("unity-train", "--model mlp --tiny --devices 2 --estimate "
                               "--machine specs/machines/cpu.json");
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "estimated step time") != NULL);
    cli_expect_clean_error("unity-train", "--model mlp --tiny --estimate", "needs --machine");
    cli_expect_clean_error("unity-train", "--model mlp --tiny --estimate --machine nope.json",
                           "nope.json");
    cli_expect_clean_error("unity-train", "--model mlp --tiny --profile --machine "
                           "specs/machines/cpu.json", "--profile needs --rules");
    cli_expect_clean_error("unity-train", "--model mlp --tiny --sim fast --estimate --machine "
                           "specs/machines/cpu.json", "--sim");
    cli_expect_clean_error("unity-train", "--model mlp --tiny --devices 4 --estimate --machine "
                           "specs/machines/cpu.json", "machine");
    /* profile into a database, then the estimate uses the measured costs */
    r = cli_run("unity-train", cli_fmt("--model mlp --tiny --profile --machine "
                                       "specs/machines/cpu.json --rules %s/p.db --quiet"));
    EXPECT_EQ(r->code, 0);
    r = cli_run("unity-train", cli_fmt("--model mlp --tiny --estimate --machine "
                                       "specs/machines/cpu.json --rules %s/p.db"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, " 0 measured") == NULL && strstr(r->out, "measured (rules.db") != NULL);
}

/* The profiler runs on the run's backend: on the opaque one (backend memory reached only through
 * the backend, as on a GPU) it stores the same entries as on the CPU one; --backend cuda without a
 * GPU, and a machine file whose device kind does not name the GPU, are one error line. */
static void test_profile_backends(void) {
    const char *args = "--model transformer --tiny --profile --machine specs/machines/cpu.json "
                       "--rules %s/%s.db";
    char a[256], b[256];
    snprintf(a, sizeof a, args, "%s", "cpu");
    snprintf(b, sizeof b, args, "%s", "opq");
    const cli_result *r = cli_run("unity-train", cli_fmt(a));
    EXPECT_EQ(r->code, 0);
    const char *at = strstr(r->out, "stored ");
    long long n_cpu = at ? atoll(at + 7) : -1;
    EXPECT_TRUE(strstr(r->out, "(backend cpu)") != NULL);
    char opq[2200];
    snprintf(opq, sizeof opq, "%s --backend opaque", cli_fmt(b));
    r = cli_run("unity-train", opq);
    EXPECT_EQ(r->code, 0);
    at = strstr(r->out, "stored ");
    long long n_opq = at ? atoll(at + 7) : -2;
    EXPECT_TRUE(strstr(r->out, "(backend opaque)") != NULL && strstr(r->out, "loss:ce") != NULL &&
                strstr(r->out, "optimizer:adam") != NULL);
    EXPECT_TRUE(n_cpu > 3 && n_cpu == n_opq);
    if (un_backend_cuda_devices(NULL) == 0)
        cli_expect_clean_error("unity-train",
                               cli_fmt("--model mlp --tiny --profile --machine "
                                       "specs/machines/h100x8.json --rules "
                                       "%s/g.db --backend cuda"),
                               "--backend cuda: no GPU");
    EXPECT_TRUE(un_profile_kind_matches("h100", "NVIDIA H100 80GB HBM3"));
    EXPECT_TRUE(un_profile_kind_matches("A100", "NVIDIA A100-SXM4-40GB"));
    EXPECT_TRUE(!un_profile_kind_matches("h100", "NVIDIA A100-SXM4-40GB"));
    EXPECT_TRUE(!un_profile_kind_matches("cpu", "NVIDIA H100"));
    EXPECT_TRUE(!un_profile_kind_matches("", "NVIDIA H100"));
}

int main(void) {
    if (!cli_init("/tmp/unity-cost-XXXXXX"))
        return 1;
    static const test_case c[] = {{"machine_files", test_machine_files},
                                  {"machine_bad", test_machine_bad},
                                  {"op_costs_grow", test_op_costs_grow},
                                  {"cost_default", test_cost_default},
                                  {"collectives", test_collectives},
                                  {"roundtrip_one_device", test_roundtrip_one_device},
                                  {"sim_mlp", test_sim_mlp},
                                  {"measured", test_measured},
                                  {"cli", test_cli},
                                  {"profile_backends", test_profile_backends}};
    int rc = TEST_RUN_WITH_SPEC(c, &spec);
    return cli_cleanup() ? rc : 1;
}
