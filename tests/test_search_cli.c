/* test_search_cli.c - unity-train's search (search/train_main.c): search then train, --plan-only
 * with --export and --dot, the exported plan trained by --strategy with serial's losses, the
 * modes, and bad input (machine file, rules file, device counts, no plan fits, flags): one error
 * line each, exit status 1. */
#include "tests/cli.h"

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

/* The loss of step `step` in unity-train's per-step lines, or NAN. */
static double loss_at(const char *out, int step) {
    char key[32];
    snprintf(key, sizeof key, "step %d/", step);
    const char *p = strstr(out, key);
    p = p ? strstr(p, "loss ") : NULL;
    return p ? strtod(p + 5, NULL) : NAN;
}

static void test_search_train(void) {
    const cli_result *r = cli_run("unity-train", "--model mlp --tiny --machine "
                                                 "specs/machines/v100x4.json --steps 3");
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "ended: exhausted") != NULL);
    EXPECT_TRUE(strstr(r->out, "parallelization per operator") != NULL);
    EXPECT_TRUE(strstr(r->out, "data parallel: estimated step") != NULL);
    EXPECT_TRUE(strstr(r->out, "training with the plan") != NULL);
    EXPECT_TRUE(strstr(r->out, "step 3/3") != NULL);
}

/* The paper-size MLP on 4 V100s: a plan that splits the weights; exported, it loads. Then a
 * tiny model's plans for every mode, exported and trained by --strategy, give serial's losses. */
static void test_export(void) {
    const cli_result *r = cli_run(
        "unity-train", cli_fmt("--model mlp --machine specs/machines/v100x4.json --plan-only "
                               "--export %s/mlp.json --dot %s/mlp.dot"));
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "out_features/") != NULL); /* towers on halves since h26 */
    EXPECT_TRUE(strstr(r->out, "(fits)") != NULL);
    EXPECT_TRUE(strstr(r->out, "plan written to") != NULL);
    r = cli_run("unity-train", cli_fmt("--model mlp --strategy %s/mlp.json --devices 4 --estimate "
                                       "--sim plan --machine specs/machines/v100x4.json"));
    EXPECT_EQ(r->code, 0);
    r = cli_run("unity-train", "--model transformer --tiny --devices 1 --steps 3 --precision f64");
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
            r = cli_run("unity-train", cli_fmt(args));
            EXPECT_EQ(r->code, 0);
            const char *u = strstr(r->out, "--devices ");
            int used = u ? atoi(u + 10) : 0;
            EXPECT_TRUE(used >= 1 && used <= d);
            snprintf(args, sizeof args,
                     "--model transformer --tiny --strategy %%s/t.json --devices %d --steps 3 "
                     "--precision f64",
                     used);
            r = cli_run("unity-train", cli_fmt(args));
            EXPECT_EQ(r->code, 0);
            for (int s = 0; s < 3; s++)
                test__check(fabs(loss_at(r->out, s + 1) - serial[s]) <= 1e-9 * fabs(serial[s]),
                            TEST__AT, "%s on %d: step %d loss %.12g vs serial %.12g", modes[i], d,
                            s + 1, loss_at(r->out, s + 1), serial[s]);
        }
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
    BAD("--machine specs/machines/v100x4.json --plan-only --export /nonexistent/dir/p.json",
        "/nonexistent/dir/p.json");
#undef BAD
}

int main(void) {
    if (!cli_init("/tmp/unity-search-cli-XXXXXX"))
        return 1;
    static const test_case c[] = {{"search_train", test_search_train},
                                  {"export", test_export},
                                  {"bad_input", test_bad_input}};
    int rc = TEST_RUN_ALL(c);
    return cli_cleanup() ? rc : 1;
}
