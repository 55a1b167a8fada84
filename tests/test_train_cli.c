/* tests/test_train_cli.c - `unity-train` as a user runs it: a character LM learning a text file,
 * plans, checkpoints, MPI runs whose losses equal the single device's for every tiny model, and
 * bad input (unknown model, bad plans, missing or empty data, bad flags), each of which must give
 * one clear error line, a non-zero exit and no crash. Programs are found in $UNITY_BUILD/bin. */
#include "tests/cli.h"
#include "tests/test.h"

#include <stdlib.h>
#include <unistd.h>

#include "runtime/backend_cuda.h"

/* Runs "PREFIX unity-train --log-every 1 ARGS" (a line every step, which losses() reads)
 * through the shell with stdout and stderr captured. */
static const cli_result *run_with(const char *prefix, const char *args) {
    char a[3072];
    snprintf(a, sizeof a, "--log-every 1 %s", args);
    return cli_run_with(prefix, "unity-train", a);
}

static const cli_result *run(const char *args) { return run_with(NULL, args); }

/* The per-step losses printed ("step i/n  loss X ..."), up to max; returns how many. */
static int losses(const char *out, double *l, int max) {
    int n = 0;
    for (const char *p = strstr(out, "step "); p && n < max; p = strstr(p + 1, "\nstep ")) {
        const char *q = strstr(p, "loss ");
        if (!q)
            break;
        l[n++] = atof(q + 5);
    }
    return n;
}

/* The largest relative difference of a[i] against b[i], i < n. */
static double worst_rel(const double *a, const double *b, int n) {
    double worst = 0;
    for (int i = 0; i < n; i++)
        worst = fmax(worst, fabs(a[i] - b[i]) / fabs(b[i]));
    return worst;
}

/* A bad input: non-zero exit below 128 (no crash), exactly one stderr line, containing want. */
static void expect_clean_error(const char *args, const char *want) {
    const cli_result *r = run(args);
    bool ok = cli_is_clean_error(r, want) && r->out[0] == '\0';
    EXPECT_TRUE(ok);
    if (!ok)
        printf("    unity-train %s -> exit %d, stderr: %s", args, r->code, r->err);
}

static void test_charlm_learns_text(void) {
    const char *text = "/usr/share/common-licenses/GPL-3";
    if (access(text, R_OK) != 0)
        TEST_SKIP("/usr/share/common-licenses/GPL-3 missing");
    char args[512];
    snprintf(args, sizeof args, "--model charlm --tiny --data %s --steps 150 --threads 2", text);
    const cli_result *r = run(args);
    EXPECT_EQ(r->code, 0);
    double l[150];
    int n = losses(r->out, l, 150);
    EXPECT_EQ(n, 150);
    double first = 0, last = 0;
    for (int i = 0; n == 150 && i < 10; i++) {
        first += l[i] / 10;
        last += l[140 + i] / 10;
    }
    test__check(n == 150 && last < 0.6 * first, TEST__AT, "charlm loss %g -> %g", first, last);
    EXPECT_TRUE(strstr(r->out, "samples/s") != NULL);
    EXPECT_TRUE(r->err[0] == '\0'); /* no progress bar when stderr is not a terminal */
}

static void test_plan_and_checkpoint(void) {
    /* the data-parallel graph written by the sample tool is a plan for the sample-shaped model */
    char args[1024];
    cli_write_file(
        "mlp.json",
        "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [8, 6]}},"
        " {\"name\": \"w\", \"op\": \"weight\", \"params\": {\"shape\": [6, 4]}},"
        " {\"name\": \"y\", \"op\": \"linear\", \"in\": [\"x\", \"w\"]}]}");
    cli_write_file(
        "plan2.json",
        "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [8, 6]}},"
        " {\"name\": \"w\", \"op\": \"weight\", \"params\": {\"shape\": [6, 4]}},"
        " {\"name\": \"xs\", \"op\": \"partition\", \"in\": [\"x\"], \"params\": {\"dim\": "
        "0, \"degree\": 2}},"
        " {\"name\": \"wc\", \"op\": \"replicate\", \"in\": [\"w\"], \"params\": "
        "{\"degree\": 2}},"
        " {\"name\": \"y\", \"op\": \"linear\", \"in\": [\"xs\", \"wc\"]}]}");
    snprintf(args, sizeof args, "--model %s/mlp.json --steps 8 --optimizer sgd", cli_tmp);
    const cli_result *r = run(args);
    EXPECT_EQ(r->code, 0);
    double l1[8], l2[5];
    EXPECT_EQ(losses(r->out, l1, 8), 8);
    snprintf(args, sizeof args,
             "--model %s/mlp.json --steps 5 --optimizer sgd --devices 2 --strategy %s/plan2.json "
             "--save %s/ck",
             cli_tmp, cli_tmp, cli_tmp);
    r = run(args);
    EXPECT_EQ(r->code, 0);
    EXPECT_EQ(losses(r->out, l2, 5), 5);
    for (int i = 0; i < 5; i++)
        EXPECT_NEAR(l2[i], l1[i], 1e-5 * fabs(l1[i]));
    snprintf(args, sizeof args, "--model %s/mlp.json --steps 3 --optimizer sgd --load %s/ck",
             cli_tmp, cli_tmp);
    r = run(args);
    EXPECT_EQ(r->code, 0);
    /* the loaded run continues the uninterrupted one (steps 6-8; the data resumes at step 6) */
    EXPECT_EQ(losses(r->out, l2, 3), 3);
    for (int i = 0; i < 3; i++)
        EXPECT_NEAR(l2[i], l1[5 + i], 1e-5 * fabs(l1[5 + i]));
}

/* Plans written by unity-pcg: tensor parallelism (split columns, split rows, reduce) on 2 devices
 * and data parallelism on 4 train the serial graph's losses. */
static void test_pcg_plans(void) {
    const char *kinds[] = {"serial --degree 1", "tensor --degree 2", "data --degree 4"};
    const char *files[] = {"s.json", "t.json", "d4.json"};
    char cmd[1024], args[1024];
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s/unity-pcg sample mlp --strategy %s >%s/%s", cli_bin, kinds[i],
                 cli_tmp, files[i]);
        EXPECT_EQ(system(cmd), 0);
    }
    double ref[20], l[20];
    snprintf(args, sizeof args, "--model %s/s.json --loss ce --steps 20 --optimizer sgd", cli_tmp);
    const cli_result *r = run(args);
    EXPECT_EQ(r->code, 0);
    EXPECT_EQ(losses(r->out, ref, 20), 20);
    EXPECT_TRUE(ref[19] < ref[0]);
    for (int i = 1; i < 3; i++) {
        snprintf(args, sizeof args,
                 "--model %s/s.json --loss ce --steps 20 --optimizer sgd --devices %d --strategy "
                 "%s/%s",
                 cli_tmp, i == 1 ? 2 : 4, cli_tmp, files[i]);
        r = run(args);
        EXPECT_EQ(r->code, 0);
        int n = losses(r->out, l, 20);
        double worst = worst_rel(l, ref, n);
        test__check(n == 20 && worst <= 1e-5, TEST__AT, "plan %s: %d steps, difference %g",
                    files[i], n, worst);
    }
}

static void test_bad_input(void) {
    expect_clean_error("--model nosuchmodel --tiny", "nosuchmodel");
    /* issue 10 item 6: a directory; a batch that cannot fit, refused before allocating */
    expect_clean_error("--model /tmp --tiny", "--model /tmp: is a directory");
    expect_clean_error("--model mlp --tiny --batch 100000000 --steps 1",
                       "--batch 100000000: training mlp needs at least");
    expect_clean_error("--model mlp --tiny --steps 1 --save /dev/full",
                       "--save /dev/full: not a regular file");
    expect_clean_error("--model mlp --tiny --steps 1 --save /tmp", "--save /tmp: not a regular");
    /* a write that fails says why: a file size limit stands in for a full disk (unprivileged) */
    char args[512];
    snprintf(args, sizeof args, "--model mlp --tiny --steps 1 --quiet --save %s/limited.ck",
             cli_tmp);
    const cli_result *r = run_with("trap '' XFSZ; ulimit -f 16;", args);
    test__check(cli_is_clean_error(r, "cannot write the checkpoint: writing in ") &&
                    strstr(r->err, "File too large") && strstr(r->err, "MiB free there"),
                TEST__AT, "--save under ulimit -f 16: exit %d, stderr: %s", r->code, r->err);
    EXPECT_TRUE(!cli_exists("limited.ck"));
    expect_clean_error("--tiny", "--model is required");
    expect_clean_error("--model mlp --tiny --devices 0", "--devices: '0'");
    expect_clean_error("--model mlp --tiny --devices 3 --batch 16", "not a multiple of 3");
    expect_clean_error("--model mlp --tiny --steps x", "--steps: 'x'");
    expect_clean_error("--model mlp --tiny --bogus 3", "unknown argument '--bogus'");
    expect_clean_error("--model mlp --tiny --steps", "--steps needs a value");
    expect_clean_error("--model mlp --tiny --optimizer rmsprop", "not sgd or adam");
    expect_clean_error("--model mlp --tiny --comm carrier-pigeon", "not local or mpi");
    expect_clean_error("--model mlp --tiny --strategy zigzag", "'zigzag' is not serial, data");
    expect_clean_error("--model mlp --tiny --devices 2 --strategy mixed:2", "is not mixed:DxT");
    expect_clean_error("--model mlp --tiny --devices 2 --strategy mixed:2x2",
                       "runs on 4 devices, but --devices is 2");
    expect_clean_error(cli_fmt("--model charlm --tiny --data %s/missing.txt"), "missing.txt");
    cli_write_file("empty.txt", "");
    expect_clean_error(cli_fmt("--model charlm --tiny --data %s/empty.txt"), "empty.txt");
    cli_write_file("short.txt", "too short");
    expect_clean_error(cli_fmt("--model charlm --tiny --data %s/short.txt"), "short.txt: 9 bytes");
    expect_clean_error(cli_fmt("--model mlp --tiny --data %s/short.txt"),
                       "text trains a token model");
    expect_clean_error(cli_fmt("--model %s/missing.json"), "missing.json");
    /* plans: another model, another device count, an illegal layout */
    expect_clean_error(cli_fmt("--model mlp --tiny --devices 2 --strategy %s/plan2.json"),
                       "not the model's graph");
    expect_clean_error(cli_fmt("--model %s/mlp.json --devices 4 --strategy %s/plan2.json"),
                       "runs on 2 devices");
    cli_write_file(
        "illegal.json",
        "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [8, 6]}},"
        " {\"name\": \"w\", \"op\": \"weight\", \"params\": {\"shape\": [6, 4]}},"
        " {\"name\": \"xs\", \"op\": \"partition\", \"in\": [\"x\"], \"params\": {\"dim\": "
        "1, \"degree\": 2}},"
        " {\"name\": \"y\", \"op\": \"linear\", \"in\": [\"xs\", \"w\"], \"params\": "
        "{\"activation\": \"relu\"}}]}");
    expect_clean_error(cli_fmt("--model %s/mlp.json --devices 2 --strategy %s/illegal.json"),
                       "illegal.json");
    cli_write_file(
        "psum.json",
        "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [8, 6]}},"
        " {\"name\": \"w\", \"op\": \"weight\", \"params\": {\"shape\": [6, 4]}},"
        " {\"name\": \"xs\", \"op\": \"partition\", \"in\": [\"x\"], \"params\": {\"dim\": "
        "1, \"degree\": 2}},"
        " {\"name\": \"ws\", \"op\": \"partition\", \"in\": [\"w\"], \"params\": {\"dim\": "
        "0, \"degree\": 2}},"
        " {\"name\": \"y\", \"op\": \"linear\", \"in\": [\"xs\", \"ws\"]}]}");
    expect_clean_error(cli_fmt("--model %s/mlp.json --devices 2 --strategy %s/psum.json"),
                       "partial sums");
    expect_clean_error(cli_fmt("--model mlp --tiny --load %s/missing.ckpt"), "missing.ckpt");
    expect_clean_error("--model mlp --tiny --save /nonexistent-dir/x.ckpt", "cannot write");
    /* a checkpoint of another model */
    expect_clean_error(cli_fmt("--model mlp --tiny --load %s/ck"), "in the checkpoint");
    /* --config: bad keys and values, keys a model does not take, JSON models, a model too big
     * for this machine (refused before anything is allocated, naming need and availability) */
    expect_clean_error("--model mlp --tiny --config width=3", "unknown key 'width'");
    expect_clean_error("--model mlp --tiny --config hidden=0", "hidden=0 is not a positive");
    expect_clean_error("--model mlp --tiny --config hidden", "'hidden' is not key=value");
    expect_clean_error("--model mlp --tiny --config heads=2", "model mlp does not take 'heads'");
    expect_clean_error("--model mlp --tiny --config batch=8 --batch 8", "give one");
    expect_clean_error(cli_fmt("--model %s/mlp.json --config layers=2"),
                       "apply to zoo models only");
    expect_clean_error("--model transformer --tiny --config heads=3", "% heads == 0");
    expect_clean_error("--model mlp --config hidden=1000000", "GiB are available");
}

/* --config scales a zoo model: the graph has the sizes asked for, and it trains the same on 1 and
 * 2 devices. */
static void test_config_sizes(void) {
    const char *cfg = "--model transformer --tiny --config layers=1,hidden=48,heads=3,ffn=64,"
                      "seq=4,batch=8 --steps 5 --threads 1 --precision f64";
    const cli_result *r = run(cfg);
    double l1[5], l2[5];
    EXPECT_EQ(r->code, 0);
    int n1 = losses(r->out, l1, 5);
    char args[512];
    snprintf(args, sizeof args, "%s --devices 2", cfg);
    r = run(args);
    EXPECT_EQ(r->code, 0);
    int n2 = losses(r->out, l2, 5);
    EXPECT_TRUE(n1 == 5 && n2 == 5);
    for (int s = 0; s < n1 && s < n2; s++)
        EXPECT_NEAR(l1[s], l2[s], 1e-9 * fabs(l1[s]));
    /* the sizes: 1 layer of 4 attention weights [48,48] + ffn [48,64] [64,48] + 2 layer norms
     * (gamma, beta of 48) + head [48,1] */
    r = run("--model transformer --tiny --config layers=1,hidden=48,heads=3,ffn=64,seq=4,batch=8 "
            "--steps 1 --threads 1 --stats");
    EXPECT_EQ(r->code, 0);
    long long w = 0;
    const char *p = strstr(r->out, "\n     0 ");
    EXPECT_TRUE(p && sscanf(p, "%*d %lld", &w) == 1);
    EXPECT_EQ(w, (4 * 48 * 48 + 48 * 64 + 64 * 48 + 4 * 48 + 48) * 4);
}

/* --node-times: a row per regular node with its forward and backward (positive), the zeroing
 * and the phases of a step; the nodes' medians add up to at most about the step's (the phases
 * hold the loss, the update and what lies between the nodes); on 2 devices device 0's. */
static void test_node_times(void) {
    for (int d = 1; d <= 2; d++) {
        char args[256];
        snprintf(args, sizeof args,
                 "--model mlp --tiny --steps 20 --quiet --node-times --devices %d", d);
        const cli_result *r = run(args);
        EXPECT_EQ(r->code, 0);
        double f = 0, b = 0, sf = 0, sb = 0, step = 0;
        const char *p = strstr(r->out, "t1.l1 ");
        EXPECT_TRUE(p && sscanf(p, "%*s linear %lf %lf", &f, &b) == 2);
        p = strstr(r->out, "(sum of node medians)");
        EXPECT_TRUE(p && sscanf(p, "(sum of node medians) - %lf %lf", &sf, &sb) == 2);
        p = strstr(r->out, "phase step");
        EXPECT_TRUE(p && sscanf(p, "phase step %lf", &step) == 1);
        test__check(f > 0 && b > 0 && sf >= f && sb >= b && step > 0 && sf + sb < 2 * step,
                    TEST__AT, "%d devices: t1.l1 %.3f / %.3f us, nodes %.3f / %.3f, step %.3f", d,
                    f, b, sf, sb, step);
        EXPECT_TRUE(strstr(r->out, "(zeroing gradients)") && strstr(r->out, "phase update"));
    }
    cli_expect_clean_error("unity-train", "--model mlp --tiny --node-times=1", "--node-times=1");
}

/* --node-times' phases are the meet trace's marks (one clock): with UN_MEET_TRACE on, each
 * phase's median over the trace's steps is the one --node-times prints; the step line's phase
 * (report) and the batch's are there too. */
static void test_node_times_trace(void) {
    const cli_result *r = run_with(cli_fmt("UN_MEET_TRACE=%s/nt"),
                                   "--model mlp --tiny --steps 200 --quiet --node-times");
    EXPECT_EQ(r->code, 0);
    static const char *const mark[] = {"batch",    "forward", "loss",  "backward",
                                       "loss-sum", "update",  "report"};
    static const char *const phase[] = {"batch",           "forward", "loss",  "backward",
                                        "loss all-reduce", "update",  "report"};
    enum { K = 7, S = 200 };
    static double len[K][S]; /* per phase, per traced step */
    int steps = 0;
    FILE *f = fopen(cli_fmt("%s/nt.0"), "r");
    EXPECT_TRUE(f != NULL);
    double t, prev_t = 0;
    char what[64];
    int prev = -1;
    while (f && fscanf(f, "%lf %63s", &t, what) == 2) {
        int k = -1;
        for (int i = 0; i < K; i++)
            k = strcmp(what, mark[i]) == 0 ? i : k;
        if (k < 0 && strcmp(what, "end") != 0)
            continue;                   /* a meet's arrival or release */
        if (prev == K - 1 && steps > 0) /* a report runs to the next step's batch */
            len[K - 1][steps - 1] = t - prev_t;
        else if (prev >= 0 && steps > 0 && steps <= S)
            len[prev][steps - 1] = t - prev_t;
        if (k == 0)
            steps++;
        prev = k;
        prev_t = t;
    }
    if (f)
        fclose(f);
    /* --node-times' rows are the steps after the first, as the trace's; the last step's report
     * ends at "end" in the trace, at no next batch in --node-times: compare the others */
    EXPECT_EQ(steps, S - 1);
    for (int k = 0; k < K && steps == S - 1; k++) {
        int n = k == K - 1 ? steps - 1 : steps;
        double want = 1e6 * un_median(len[k], n), got = -1;
        char key[64];
        snprintf(key, sizeof key, "phase %s ", phase[k]);
        const char *p = strstr(r->out, key);
        if (p)
            sscanf(p + strlen(key), "%lf", &got);
        /* the report's median: the trace has the first step's (step 0's report is not a row) */
        double tol = k == K - 1 ? 0.25 * want + 0.05 : 0.0015;
        test__check(fabs(got - want) <= tol, TEST__AT,
                    "phase %s: --node-times %.3f us, the trace's %.4f us", phase[k], got, want);
    }
}

/* The step lines: without --log-every one every UN_TRAIN_LINE_S (a step of the tiny MLP takes
 * ~20 us: a few lines for 3,000 steps), the first and the last always; --log-every N every N
 * steps; the median step after the summary. */
static void test_step_lines(void) {
    const cli_result *r = cli_run("unity-train", "--model mlp --tiny --steps 3000");
    EXPECT_EQ(r->code, 0);
    int lines = 0;
    for (const char *p = strstr(r->out, "\nstep "); p; p = strstr(p + 1, "\nstep "))
        lines++;
    test__check(lines >= 2 && lines < 1500, TEST__AT, "3000 steps, %d step lines", lines);
    EXPECT_TRUE(strstr(r->out, "\nstep 1/3000 ") && strstr(r->out, "\nstep 3000/3000 "));
    double med = 0;
    const char *p = strstr(r->out, "\nmedian step: ");
    EXPECT_TRUE(p && sscanf(p, "\nmedian step: %lf ms", &med) == 1 && med > 0);
    r = cli_run("unity-train", "--model mlp --tiny --steps 3000 --log-every 1000");
    EXPECT_EQ(r->code, 0);
    double l[8];
    EXPECT_EQ(losses(r->out, l, 8), 4);
    EXPECT_TRUE(strstr(r->out, "\nstep 1/3000 ") && strstr(r->out, "\nstep 1000/3000 ") &&
                strstr(r->out, "\nstep 2000/3000 ") && strstr(r->out, "\nstep 3000/3000 "));
    cli_expect_clean_error("unity-train", "--model mlp --tiny --log-every 0", "--log-every");
    cli_expect_clean_error("unity-train", "--model mlp --tiny --log-every x", "--log-every");
}

/* OpenMPI's libraries leak at exit (their own allocations, not ours): LeakSanitizer is off inside
 * the MPI processes of a sanitizer build; the local-mode runs keep it. */
#define MPI_ENV "-x ASAN_OPTIONS=detect_leaks=0"

/* `model` (its flags) under --strategy `strategy` on mpirun -np np gives the 1-device losses
 * (float64, 1e-9, as printed) for `steps` steps. */
static void mpi_like_serial(const char *model, int np, const char *strategy, int steps) {
    char prefix[256], a[512];
    double ls[16], lm[16];
    snprintf(a, sizeof a, "%s --steps %d --threads 1 --precision f64", model, steps);
    const cli_result *rs = run(a);
    EXPECT_EQ(rs->code, 0);
    if (losses(rs->out, ls, steps) != steps)
        return;
    snprintf(prefix, sizeof prefix, "scripts/mpirun.sh --mca mpi_yield_when_idle 1 %s -np %d",
             MPI_ENV, np);
    snprintf(a, sizeof a, "%s --steps %d --threads 1 --precision f64 --comm mpi --strategy %s",
             model, steps, strategy);
    const cli_result *rm = run_with(prefix, a);
    int n = losses(rm->out, lm, steps);
    double worst = worst_rel(lm, ls, n);
    test__check(rm->code == 0 && n == steps && worst <= 1e-9, TEST__AT,
                "mpi %s %s on %d processes: exit %d, %d steps, difference %g: %s", strategy, model,
                np, rm->code, n, worst, rm->err);
}

/* Every tiny model, data parallel under mpirun on 2 and 4 processes, gives the 1-device losses. */
static void test_mpi_equal_losses(void) {
    if (system("command -v mpirun >/dev/null 2>&1") != 0)
        TEST_SKIP("mpirun not found");
    const char *names[] = {"mlp",        "transformer", "dlrm",         "xdl",
                           "candle_uno", "resnext50",   "inception_v3", "charlm"};
    char prefix[256], args[512];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        bool bn = strcmp(names[i], "resnext50") == 0 || strcmp(names[i], "inception_v3") == 0;
        double tol = bn ? 1e-3 : 1e-4; /* see test_runtime.c: float32 rounding, amplified */
        snprintf(args, sizeof args, "--model %s --tiny --steps 20 --threads 1", names[i]);
        const cli_result *r = run(args);
        double l1[20], ld[20];
        EXPECT_EQ(r->code, 0);
        if (losses(r->out, l1, 20) != 20)
            continue;
        for (int np = 2; np <= 4; np *= 2) {
            /* scripts/mpirun.sh adds --oversubscribe and, as root, --allow-run-as-root */
            snprintf(prefix, sizeof prefix,
                     "scripts/mpirun.sh --mca mpi_yield_when_idle 1 %s -np %d", MPI_ENV, np);
            snprintf(args, sizeof args, "--model %s --tiny --steps 20 --threads 1 --comm mpi",
                     names[i]);
            r = run_with(prefix, args);
            int n = losses(r->out, ld, 20);
            double worst = worst_rel(ld, l1, n);
            test__check(r->code == 0 && n == 20 && worst <= tol, TEST__AT,
                        "mpi %s on %d processes: exit %d, %d steps, relative difference %g",
                        names[i], np, r->code, n, worst);
        }
    }
    /* linear weights of 1 MiB and more, whose copy-group sums local ranks compute in chunks in
     * place (exec.c): processes keep the reduce-scatter, the serial losses on 2 and 4 */
    for (int np = 2; np <= 4; np *= 2)
        mpi_like_serial("--model mlp --config layers=2,hidden=513,batch=8", np, "data", 4);
    /* mixed plans (data and tensor parallelism in one plan, tests/data/plans) under mpirun: the
     * serial losses */
    for (int np = 2; np <= 4; np *= 2) {
        char plan[64];
        snprintf(plan, sizeof plan, "tests/data/plans/mlp_mixed%d.json", np);
        mpi_like_serial("--model tests/data/plans/mlp_sample.json", np, plan, 10);
    }
    /* --strategy tensor under mpirun on 2 and 4 processes, and mixed:2x2 on 4 for every tiny
     * model: the serial losses */
    for (int np = 2; np <= 4; np *= 2) {
        mpi_like_serial("--model mlp --tiny", np, "tensor", 10);
        mpi_like_serial("--model transformer --tiny", np, "tensor", 10);
    }
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(args, sizeof args, "--model %s --tiny", names[i]);
        mpi_like_serial(args, 4, "mixed:2x2", 6);
    }
    /* --devices must match the processes */
    snprintf(prefix, sizeof prefix, "scripts/mpirun.sh %s -np 2", MPI_ENV);
    const cli_result *r = run_with(prefix, "--model mlp --tiny --steps 2 --comm mpi --devices 3");
    int ours = 0; /* mpirun adds its own report; ours is one line, from rank 0 only */
    for (const char *p = strstr(r->err, "unity-train:"); p; p = strstr(p + 1, "unity-train:"))
        ours++;
    EXPECT_TRUE(r->code != 0 && r->code < 128 && ours == 1 &&
                strstr(r->err, "mpirun started 2 processes") != NULL);
}

/* A checkpoint saved under data parallelism on 2 MPI processes is one file per rank (each its
 * half of every weight and of Adam's moments, nothing gathered); it loads under serial on 1
 * device, under tensor parallelism on 4 local devices and data parallel on 2 (re-sharded), and
 * the 4 more steps are the uninterrupted 10-step run's (float64, 1e-9). A damaged or missing rank
 * file is one clear error. */
static void test_mpi_checkpoint(void) {
    if (system("command -v mpirun >/dev/null 2>&1") != 0)
        TEST_SKIP("mpirun not found");
    const char *base = "--model mlp --tiny --threads 1 --precision f64 --optimizer adam";
    char prefix[256], a[1024];
    double l10[10], l4[4];
    snprintf(a, sizeof a, "%s --steps 10", base);
    const cli_result *r = run(a);
    EXPECT_EQ(r->code, 0);
    if (losses(r->out, l10, 10) != 10)
        return;
    snprintf(prefix, sizeof prefix, "scripts/mpirun.sh --mca mpi_yield_when_idle 1 %s -np 2",
             MPI_ENV);
    snprintf(a, sizeof a, "%s --steps 6 --comm mpi --save %s/mpi.ckpt", base, cli_tmp);
    r = run_with(prefix, a);
    test__check(r->code == 0, TEST__AT, "save under mpirun -np 2: exit %d: %s", r->code, r->err);
    char f0[600], f1[600], one[600];
    snprintf(f0, sizeof f0, "%s/mpi.ckpt.rank0", cli_tmp);
    snprintf(f1, sizeof f1, "%s/mpi.ckpt.rank1", cli_tmp);
    snprintf(one, sizeof one, "%s/mpi.ckpt", cli_tmp);
    EXPECT_TRUE(access(f0, R_OK) == 0 && access(f1, R_OK) == 0 && access(one, F_OK) != 0);
    const char *after[] = {"--devices 1", "--devices 4 --strategy tensor", "--devices 2"};
    for (int i = 0; r->code == 0 && i < 3; i++) {
        snprintf(a, sizeof a, "%s --steps 4 %s --load %s/mpi.ckpt", base, after[i], cli_tmp);
        const cli_result *rl = run(a);
        int n = losses(rl->out, l4, 4);
        double worst = worst_rel(l4, l10 + 6, n);
        test__check(rl->code == 0 && n == 4 && worst <= 1e-9, TEST__AT,
                    "saved on 2 mpi processes, loaded with %s: exit %d, %d steps, difference %g",
                    after[i], rl->code, n, worst);
    }
    /* damaged, then missing: rank 1's file */
    FILE *f = fopen(f1, "r+b");
    if (f) {
        fseek(f, 40, SEEK_SET);
        int c = fgetc(f);
        fseek(f, 40, SEEK_SET);
        fputc(c ^ 0xff, f);
        fclose(f);
    }
    snprintf(a, sizeof a, "%s --steps 1 --load %s/mpi.ckpt", base, cli_tmp);
    expect_clean_error(a, "mpi.ckpt.rank1: damaged checkpoint");
    remove(f1);
    expect_clean_error(a, "mpi.ckpt.rank1");
}

/* --backend: a bad name, and cuda where it cannot run (no GPU, or a build without CUDA, or
 * float64), are one error line each; opaque (the CPU kernels behind memory the host cannot
 * reach) prints the CPU backend's losses; every run names its backend. */
static void test_backend_flag(void) {
    expect_clean_error("--model mlp --tiny --backend tpu", "--backend: 'tpu' is not cpu, cuda");
    expect_clean_error("--model mlp --tiny --backend", "--backend needs a value");
    /* the opaque backend's options: a bad one, and a memory limit the model does not fit */
    expect_clean_error("--model mlp --tiny --backend opaque:fast",
                       "--backend: 'fast' in 'opaque:fast' is not 'staged' or 'mem=SIZE'");
    expect_clean_error("--model mlp --tiny --steps 1 --backend opaque:mem=16K",
                       "GiB are available");
    const char *why = NULL;
    int gpus = un_backend_cuda_devices(&why);
    if (gpus == 0) {
        expect_clean_error("--model mlp --tiny --steps 2 --backend cuda",
                           "--backend cuda: no usable GPU");
        printf("    no GPU (%s): --backend cuda refused\n", why ? why : "?");
    } else {
        expect_clean_error("--model mlp --tiny --steps 2 --backend cuda --precision f64",
                           "--backend cuda: float32 only");
    }
    double l[3][4];
    const char *names[3] = {"cpu", "opaque", gpus ? "cuda" : NULL};
    for (int b = 0; b < 3 && names[b]; b++) {
        char args[128], want[64];
        snprintf(args, sizeof args,
                 "--model transformer --tiny --devices 2 --steps 4 --threads 2 --backend %s",
                 names[b]);
        const cli_result *r = run(args);
        snprintf(want, sizeof want, "backend: %s-f32", names[b]);
        test__check(r->code == 0 && strstr(r->out, want) && losses(r->out, l[b], 4) == 4, TEST__AT,
                    "--backend %s: exit %d, stdout %s, stderr %s", names[b], r->code, r->out,
                    r->err);
    }
    for (int s = 0; s < 4; s++) {
        EXPECT_TRUE(l[1][s] == l[0][s]); /* printed with 6 decimals: the same numbers */
        if (gpus)
            EXPECT_NEAR(l[2][s], l[0][s], 1e-3);
    }
    /* the run says how pieces move between devices the host cannot reach */
    const cli_result *rp = run("--model mlp --tiny --devices 2 --steps 1 --backend opaque");
    EXPECT_TRUE(rp->code == 0 && strstr(rp->out, "exchanges on the device plane opaque"));
    rp = run("--model mlp --tiny --devices 2 --steps 1 --backend opaque:staged");
    EXPECT_TRUE(rp->code == 0 && strstr(rp->out, "exchanges staged through host memory"));
    /* the default is cpu without a GPU */
    const cli_result *r = run("--model mlp --tiny --steps 1");
    EXPECT_TRUE(r->code == 0 && strstr(r->out, gpus ? "backend: cuda-f32" : "backend: cpu-f32"));
    /* under mpirun (exchanges on the opaque plane: MPI moves the memory behind its addresses):
     * the same losses */
    if (system("command -v mpirun >/dev/null 2>&1") != 0) {
        printf("    skip --backend opaque under mpirun: mpirun not found\n");
        return;
    }
    char prefix[256];
    snprintf(prefix, sizeof prefix, "scripts/mpirun.sh --mca mpi_yield_when_idle 1 %s -np 2",
             MPI_ENV);
    double lm[4];
    r = run_with(prefix, "--model transformer --tiny --steps 4 --threads 2 --comm mpi --strategy "
                         "tensor --backend opaque");
    test__check(r->code == 0 && losses(r->out, lm, 4) == 4, TEST__AT,
                "mpirun -np 2 --backend opaque: exit %d, stderr %s", r->code, r->err);
    r = run_with(prefix, "--model transformer --tiny --steps 4 --threads 2 --comm mpi --strategy "
                         "tensor --backend cpu");
    test__check(r->code == 0 && losses(r->out, l[0], 4) == 4, TEST__AT,
                "mpirun -np 2 --backend cpu: exit %d, stderr %s", r->code, r->err);
    for (int s = 0; s < 4; s++)
        EXPECT_TRUE(lm[s] == l[0][s]);
    /* one checkpoint file per process, saved from the opaque backend, continues on the cpu one */
    char args[512];
    snprintf(args, sizeof args,
             "--model transformer --tiny --steps 2 --threads 2 --comm mpi --strategy tensor "
             "--backend opaque --save %s/opq.ck",
             cli_tmp);
    r = run_with(prefix, args);
    EXPECT_EQ(r->code, 0);
    snprintf(args, sizeof args,
             "--model transformer --tiny --devices 2 --steps 2 --threads 2 --strategy tensor "
             "--backend cpu --load %s/opq.ck",
             cli_tmp);
    r = run(args);
    test__check(r->code == 0 && losses(r->out, lm, 2) == 2 && lm[0] == l[0][2] && lm[1] == l[0][3],
                TEST__AT, "mpi opaque checkpoint loaded on cpu: exit %d, stdout %s, stderr %s",
                r->code, r->out, r->err);
}

int main(void) {
    if (!cli_init("/tmp/unity_train_cli.XXXXXX"))
        return 1;
    static const test_case cases[] = {
        {"charlm_learns_text", test_charlm_learns_text},
        {"plan_and_checkpoint", test_plan_and_checkpoint},
        {"pcg_plans", test_pcg_plans},
        {"bad_input", test_bad_input},
        {"config_sizes", test_config_sizes},
        {"node_times", test_node_times},
        {"node_times_trace", test_node_times_trace},
        {"step_lines", test_step_lines},
        {"mpi_equal_losses", test_mpi_equal_losses},
        {"mpi_checkpoint", test_mpi_checkpoint},
        {"backend_flag", test_backend_flag},
    };
    int rc = TEST_RUN_ALL(cases);
    if (!cli_cleanup())
        printf("    could not remove %s\n", cli_tmp);
    return rc;
}
