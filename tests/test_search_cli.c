/* test_search_cli.c - unity-train's search (search/train_main.c): search then train, --plan-only
 * with --export and --dot, the exported plan trained by --strategy with serial's losses, the
 * modes, layer 2 (--rules: a rewritten plan trained on 2 devices with serial's losses, --budget
 * and --search-time end it and it says why, --no-rewrites, --search taso), and bad input (machine
 * file, rules file, device counts, no plan fits, flags, --alpha, --budget): one error line each,
 * exit status 1. --sim: which semantics the search ranks plans by. */
#include "tests/cli.h"
#include "tests/rewrite.h"

static const char tiny_machine[] =
    "{\"version\": 1, \"name\": \"small\", \"nodes\": 1, \"devices_per_node\": 4,"
    " \"device\": {\"kind\": \"x\", \"flops\": {\"f32\": 1e12}, \"mem_bw\": 1e11, \"memory\": "
    "1000},"
    " \"intra_node\": {\"bw\": 1e11, \"latency\": 1e-6},"
    " \"inter_node\": {\"bw\": 1e10, \"latency\": 1e-5}}";

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    EXPECT_TRUE(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Runs "unity-train --log-every 1 ARGS" (a line every step, which loss_at reads). */
static const cli_result *train(const char *args) {
    char a[3072];
    snprintf(a, sizeof a, "--log-every 1 %s", args);
    return cli_run("unity-train", a);
}

/* The loss of step `step` in unity-train's per-step lines, or NAN. */
static double loss_at(const char *out, int step) {
    char key[32];
    snprintf(key, sizeof key, "step %d/", step);
    const char *p = strstr(out, key);
    p = p ? strstr(p, "loss ") : NULL;
    return p ? strtod(p + 5, NULL) : NAN;
}

static void test_search_train(void) {
    const cli_result *r = train("--model mlp --tiny --machine "
                                "specs/machines/v100x4.json --steps 3");
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "ended: exhausted") != NULL);
    EXPECT_TRUE(strstr(r->out, "parallelization per operator") != NULL);
    EXPECT_TRUE(strstr(r->out, "data parallel: estimated step") != NULL);
    EXPECT_TRUE(strstr(r->out, "training with the plan") != NULL);
    EXPECT_TRUE(strstr(r->out, "step 3/3") != NULL);
    /* a plan trained right after the search is ranked by what the runtime executes; a plan only
     * planned by the plan semantics; --sim says otherwise */
    EXPECT_TRUE(strstr(r->out, "(runtime semantics)") != NULL);
    r = cli_run("unity-train",
                "--model mlp --tiny --machine specs/machines/v100x4.json --plan-only");
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "(plan semantics)") != NULL);
    r = train("--model mlp --tiny --machine specs/machines/v100x4.json "
              "--plan-only --sim runtime");
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "(runtime semantics)") != NULL);
}

/* The search says where its op costs came from: with the serial pieces of the tiny MLP profiled,
 * a search on 2 devices finds them measured and scales the roofline of the halves nobody timed;
 * without a database every piece is the roofline's. */
static void test_search_cost_sources(void) {
    const cli_result *r = train(cli_fmt("--model mlp --tiny --profile --machine "
                                        "specs/machines/cpu.json --rules %s/src.db --quiet"));
    EXPECT_EQ(r->code, 0);
    r = train(cli_fmt("--model mlp --tiny --machine specs/machines/cpu.json --rules %s/src.db "
                      "--devices 2 --plan-only"));
    EXPECT_EQ(r->code, 0);
    long long n = 0, m = 0, sc = 0, a = 0;
    const char *l = strstr(r->out, "op costs: ");
    EXPECT_TRUE(l && sscanf(l,
                            "op costs: %lld distinct pieces, %lld measured, %lld scaled from "
                            "measured pieces of the same op, %lld from the roofline alone",
                            &n, &m, &sc, &a) == 4);
    EXPECT_TRUE(n == m + sc + a && m > 0 && sc > 0);
    r = train("--model mlp --tiny --machine specs/machines/cpu.json --devices 2 --plan-only");
    EXPECT_EQ(r->code, 0);
    l = strstr(r->out, "op costs: ");
    EXPECT_TRUE(l && sscanf(l,
                            "op costs: %lld distinct pieces, %lld measured, %lld scaled from "
                            "measured pieces of the same op, %lld from the roofline alone",
                            &n, &m, &sc, &a) == 4);
    EXPECT_TRUE(n > 0 && m == 0 && sc == 0 && a == n);
}

/* The paper-size MLP on 4 V100s: a plan that splits the weights; exported, it loads. Then a
 * tiny model's plans for every mode, exported and trained by --strategy, give serial's losses. */
static void test_export(void) {
    const cli_result *r =
        train(cli_fmt("--model mlp --machine specs/machines/v100x4.json --plan-only "
                      "--export %s/mlp.json --dot %s/mlp.dot"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "out_features/") != NULL); /* towers on halves since h26 */
    EXPECT_TRUE(strstr(r->out, "(fits)") != NULL);
    EXPECT_TRUE(strstr(r->out, "plan written to") != NULL);
    r = train(cli_fmt("--model mlp --strategy %s/mlp.json --devices 4 --estimate "
                      "--sim plan --machine specs/machines/v100x4.json"));
    EXPECT_EQ(r->code, 0);
    r = train("--model transformer --tiny --devices 1 --steps 3 --precision f64");
    EXPECT_EQ(r->code, 0);
    double serial[3];
    for (int s = 0; s < 3; s++)
        serial[s] = loss_at(r->out, s + 1);
    const char *modes[] = {"joint", "data", "mcmc", "serial"};
    for (int i = 0; i < 4; i++)
        for (int d = 2; d <= 4; d += 2) {
            char args[512];
            snprintf(args, sizeof args,
                     "--model transformer --tiny --machine specs/machines/v100x4.json --devices %d "
                     "--search %s --plan-only --export %%s/t.json",
                     d, modes[i]);
            r = train(cli_fmt(args));
            EXPECT_EQ(r->code, 0);
            const char *u = strstr(r->out, "--devices ");
            int used = u ? atoi(u + 10) : 0;
            EXPECT_TRUE(used >= 1 && used <= d);
            snprintf(args, sizeof args,
                     "--model transformer --tiny --strategy %%s/t.json --devices %d --steps 3 "
                     "--precision f64",
                     used);
            r = train(cli_fmt(args));
            EXPECT_EQ(r->code, 0);
            for (int s = 0; s < 3; s++)
                test__check(fabs(loss_at(r->out, s + 1) - serial[s]) <= 1e-9 * fabs(serial[s]),
                            TEST__AT, "%s on %d: step %d loss %.12g vs serial %.12g", modes[i], d,
                            s + 1, loss_at(r->out, s + 1), serial[s]);
        }
}

/* A model with relu(linear) unfused, and this box's measured machine (specs/machines/cpu.json's
 * numbers, copied so that a re-measurement does not change the test): the search fuses the relu
 * (an N=2 rule read backwards), plans the result on 2 devices, and trains it with the serial
 * graph's losses. */
static const char unfused_model[] =
    "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [64, 256]}},"
    " {\"name\": \"w1\", \"op\": \"weight\", \"params\": {\"shape\": [256, 256]}},"
    " {\"name\": \"w2\", \"op\": \"weight\", \"params\": {\"shape\": [256, 8]}},"
    " {\"name\": \"h\", \"op\": \"linear\", \"in\": [\"x\", \"w1\"]},"
    " {\"name\": \"r\", \"op\": \"relu\", \"in\": [\"h\"]},"
    " {\"name\": \"y\", \"op\": \"linear\", \"in\": [\"r\", \"w2\"]}]}";
static const char cpu2_machine[] =
    "{\"version\": 1, \"name\": \"cpu2\", \"nodes\": 1, \"devices_per_node\": 2,"
    " \"device\": {\"kind\": \"cpu\", \"flops\": {\"f32\": 7.68914e+10}, \"mem_bw\": 8.91754e+09,"
    " \"memory\": 1.26383e+10, \"op_overhead\": 5.23515e-08},"
    " \"intra_node\": {\"bw\": 1.55616e+10, \"latency\": 6.71751e-06, \"collective\": \"ring\"}}";

/* Three units [linear, relu, ew_add(., x)]: every ew_add is a cut node. */
static const char chain_model[] =
    "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [64, 256]}},"
    " {\"name\": \"w0\", \"op\": \"weight\", \"params\": {\"shape\": [256, 256]}},"
    " {\"name\": \"w1\", \"op\": \"weight\", \"params\": {\"shape\": [256, 256]}},"
    " {\"name\": \"w2\", \"op\": \"weight\", \"params\": {\"shape\": [256, 256]}},"
    " {\"name\": \"l0\", \"op\": \"linear\", \"in\": [\"x\", \"w0\"]},"
    " {\"name\": \"r0\", \"op\": \"relu\", \"in\": [\"l0\"]},"
    " {\"name\": \"s0\", \"op\": \"ew_add\", \"in\": [\"r0\", \"x\"]},"
    " {\"name\": \"l1\", \"op\": \"linear\", \"in\": [\"s0\", \"w1\"]},"
    " {\"name\": \"r1\", \"op\": \"relu\", \"in\": [\"l1\"]},"
    " {\"name\": \"s1\", \"op\": \"ew_add\", \"in\": [\"r1\", \"x\"]},"
    " {\"name\": \"l2\", \"op\": \"linear\", \"in\": [\"s1\", \"w2\"]},"
    " {\"name\": \"r2\", \"op\": \"relu\", \"in\": [\"l2\"]},"
    " {\"name\": \"s2\", \"op\": \"ew_add\", \"in\": [\"r2\", \"x\"]}]}";

static void test_rewrites(void) {
    if (!rw_db_make())
        return;
    write_text(cli_path("m.json"), unfused_model);
    write_text(cli_path("cpu2.json"), cpu2_machine);
    char args[1024];
    const cli_result *r =
        train(cli_fmt("--model %s/m.json --steps 5 --optimizer sgd --precision f64"));
    EXPECT_EQ(r->code, 0);
    double serial[5];
    for (int s = 0; s < 5; s++)
        serial[s] = loss_at(r->out, s + 1);
    snprintf(args, sizeof args,
             "--model %%s/m.json --machine %%s/cpu2.json --rules %s/r.db --steps 5 --optimizer sgd "
             "--precision f64 --dot %%s/opt.dot",
             rw_dir);
    r = train(cli_fmt(args));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "rewrites applied: 1") != NULL);
    EXPECT_TRUE(strstr(r->out, "(reversed): relu(linear(") != NULL);
    EXPECT_TRUE(strstr(r->out, "without rewrites: estimated step") != NULL);
    EXPECT_TRUE(strstr(r->out, "training with the plan on 2 devices") != NULL);
    if (!strstr(r->out, "training with the plan on 2 devices"))
        printf("    %s", r->out);
    for (int s = 0; s < 5; s++)
        test__check(fabs(loss_at(r->out, s + 1) - serial[s]) <= 1e-9 * fabs(serial[s]), TEST__AT,
                    "rewritten plan: step %d loss %.12g vs serial %.12g", s + 1,
                    loss_at(r->out, s + 1), serial[s]);
    /* the DOT is the optimized PCG: one linear (with the relu in it) feeds the other */
    char *dot = NULL;
    size_t len = 0;
    EXPECT_OK(NULL, un_read_file(NULL, cli_path("opt.dot"), &dot, &len));
    EXPECT_TRUE(dot && strstr(dot, "relu") != NULL);
    free(dot);
    /* a tiny zoo model (CANDLE-Uno, hidden 1024) on 2 of the 4 V100s: layer 2 unfuses one
     * linear[relu] (1.02x by the estimate); the rewritten graph trains as a JSON model with the
     * zoo model's loss, weights and data: serial's losses (f32) */
    const char *zoo = "--model candle_uno --tiny --config hidden=1024 --steps 5";
    snprintf(args, sizeof args, "%s", zoo);
    r = train(args);
    EXPECT_EQ(r->code, 0);
    for (int s = 0; s < 5; s++)
        serial[s] = loss_at(r->out, s + 1);
    snprintf(args, sizeof args,
             "%s --machine specs/machines/v100x4.json --devices 2 --rules %s/r.db --budget 200",
             zoo, rw_dir);
    r = train(args);
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "rewrites applied: 1") != NULL);
    EXPECT_TRUE(strstr(r->out, "training with the plan on 2 devices") != NULL);
    for (int s = 0; s < 5; s++)
        test__check(fabs(loss_at(r->out, s + 1) - serial[s]) <= 1e-5 * fabs(serial[s]), TEST__AT,
                    "candle_uno rewritten plan: step %d loss %.9g vs serial %.9g", s + 1,
                    loss_at(r->out, s + 1), serial[s]);
    /* layer 2 per layer-1 piece: a chain of 3 units [linear, relu, ew_add(., x)] cut at the
     * ew_adds (--split-size 3); each piece's relu is fused into its linear, the stitched graph
     * is planned on 2 devices and trains with serial's losses (f64) */
    write_text(cli_path("chain.json"), chain_model);
    r = train(cli_fmt("--model %s/chain.json --steps 5 --optimizer sgd "
                      "--precision f64"));
    EXPECT_EQ(r->code, 0);
    for (int s = 0; s < 5; s++)
        serial[s] = loss_at(r->out, s + 1);
    snprintf(args, sizeof args,
             "--model %%s/chain.json --machine %%s/cpu2.json --rules %s/r.db --steps 5 "
             "--optimizer sgd --precision f64 --split-size 3",
             rw_dir);
    r = train(cli_fmt(args));
    EXPECT_EQ(r->code, 0);
    test__check(strstr(r->out, "layer 2 per piece: 3 layer-1 pieces") != NULL, TEST__AT,
                "no per-piece line in %s", r->out);
    EXPECT_TRUE(strstr(r->out, "rewrites applied: 3") != NULL);
    EXPECT_TRUE(strstr(r->out, "training with the plan on 2 devices") != NULL);
    for (int s = 0; s < 5; s++)
        test__check(fabs(loss_at(r->out, s + 1) - serial[s]) <= 1e-9 * fabs(serial[s]), TEST__AT,
                    "per-piece plan: step %d loss %.12g vs serial %.12g", s + 1,
                    loss_at(r->out, s + 1), serial[s]);
    /* the search ends and says why: budget, time; taso and --no-rewrites */
    const char *runs[][2] = {
        {"--budget 1", "ended: budget"},
        {"--search taso", "layer 2 (serial cost on 1 device)"},
        {"--no-rewrites", "rewrites off"},
        {"--alpha 1", "alpha 1:"},
    };
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args,
                 "--model %%s/m.json --machine %%s/cpu2.json --rules %s/r.db "
                 "--plan-only %s",
                 rw_dir, runs[i][0]);
        r = train(cli_fmt(args));
        EXPECT_EQ(r->code, 0);
        test__check(strstr(r->out, runs[i][1]) != NULL, TEST__AT, "%s: no '%s' in %s", runs[i][0],
                    runs[i][1], r->out);
    }
    snprintf(args, sizeof args,
             "--model %%s/m.json --machine %%s/cpu2.json --rules %s/r.db "
             "--plan-only --search-time 0.000001",
             rw_dir);
    r = train(cli_fmt(args));
    EXPECT_TRUE((r->code == 0 && strstr(r->out, "ended: time") != NULL) ||
                (r->code == 1 && strstr(r->err, "search time") != NULL));
}

static void test_bad_input(void) {
    const char *T = "--model mlp --tiny ";
    char args[512];
#define BAD(extra, want)                                                                           \
    do {                                                                                           \
        snprintf(args, sizeof args, "%s%s", T, extra);                                             \
        cli_expect_clean_error("unity-train", cli_fmt(args), want);                                \
    } while (0)
    BAD("--machine nope.json", "nope.json");
    write_text(cli_path("bad.json"), "{\"version\": 1, \"nodes\": 0}");
    BAD("--machine %s/bad.json", "bad.json");
    BAD("--machine specs/machines/v100x4.json --devices 8", "8");
    write_text(cli_path("small.json"), tiny_machine);
    BAD("--machine %s/small.json --plan-only", "no plan fits");
    BAD("--machine specs/machines/v100x4.json --search greedy", "--search");
    BAD("--machine specs/machines/v100x4.json --sim fast", "--sim");
    BAD("--machine specs/machines/v100x4.json --search-time 0", "--search-time");
    BAD("--machine specs/machines/v100x4.json --budget x", "--budget");
    BAD("--machine specs/machines/v100x4.json --split-size 0", "--split-size");
    BAD("--split-size 4", "--split-size go with --machine");
    BAD("--machine specs/machines/v100x4.json --strategy data --devices 2", "pick one");
    BAD("--machine specs/machines/v100x4.json --only-data-parallel --search mcmc", "contradicts");
    BAD("--plan-only", "--machine");
    BAD("--machine specs/machines/v100x4.json --estimate --export x.json", "--export");
    write_text(cli_path("rules.db"), "not a database");
    BAD("--machine specs/machines/v100x4.json --rules %s/rules.db --plan-only", "rules.db");
    BAD("--machine specs/machines/v100x4.json --alpha 0.5", "--alpha");
    BAD("--machine specs/machines/v100x4.json --alpha nan", "--alpha");
    BAD("--machine specs/machines/v100x4.json --alpha", "--alpha");
    BAD("--machine specs/machines/v100x4.json --budget 0", "--budget");
    BAD("--machine specs/machines/v100x4.json --search taso", "--rules");
    BAD("--machine specs/machines/v100x4.json --rules %s/rules.db --search taso --no-rewrites",
        "contradicts");
    BAD("--estimate --machine specs/machines/v100x4.json --alpha 2", "--alpha");
    BAD("--machine specs/machines/v100x4.json --plan-only --export /nonexistent/dir/p.json",
        "/nonexistent/dir/p.json");
#undef BAD
}

/* A model file whose nodes carry machine views is searched on the machine's devices: views
 * naming devices the search has are accepted (the search places every node itself), a view
 * beyond them is one error naming the file. Before, the model was loaded for one device and any
 * view naming device 1 or more was refused. */
static void test_model_views(void) {
    static const char model[] =
        "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": "
        "[16, 32]}}, {\"name\": \"w1\", \"op\": \"weight\", \"params\": {\"shape\": [32, "
        "8]}}, {\"name\": \"fc1\", \"op\": \"linear\", \"in\": [\"x\", \"w1\"], "
        "\"devices\": [%d]}]}";
    char text[400], args[600];
    snprintf(text, sizeof text, model, 1);
    write_text(cli_path("viewed.json"), text);
    snprintf(args, sizeof args,
             "--model %s --loss mse --machine specs/machines/v100x4.json --devices 2 --steps 2",
             cli_path("viewed.json"));
    const cli_result *r = train(args);
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "step 2/2") != NULL);
    snprintf(text, sizeof text, model, 2);
    write_text(cli_path("viewed.json"), text);
    char want[400];
    snprintf(want, sizeof want, "%s: node 'fc1': device 2 in its machine view",
             cli_path("viewed.json"));
    cli_expect_clean_error("unity-train", args, want);
}

int main(void) {
    if (!cli_init("/tmp/unity-search-cli-XXXXXX"))
        return 1;
    static const test_case c[] = {{"search_train", test_search_train},
                                  {"search_cost_sources", test_search_cost_sources},
                                  {"export", test_export},
                                  {"rewrites", test_rewrites},
                                  {"bad_input", test_bad_input},
                                  {"model_views", test_model_views}};
    int rc = TEST_RUN_ALL(c);
    rw_db_remove();
    return cli_cleanup() ? rc : 1;
}
