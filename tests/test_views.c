/* tests/test_views.c - machine views as explicit device lists (pcg/graph.h un_view): graph JSON
 * reads lists in any order and the start/stride shorthand into one representation and writes
 * lists back; bad views are one error naming the plan file, the node and the reason; a
 * hand-written plan placed on devices [3, 1, 2, 0] trains to the serial losses; and mixed:2x2
 * stores each weight piece where its op runs, so the runtime's per-device bytes per step
 * (--stats) are exactly those the plan's parallel ops imply, computed here from the plan's shapes
 * and views: every tiny zoo model locally, the MLP and the transformer under mpirun -np 4. */
#include "tests/cli.h"
#include "tests/test.h"
#include "tests/train_run.h"

#include "pcg/graph.h"
#include "runtime/strategy.h"
#include "runtime/train.h"
#include "runtime/zoo.h"

static un_spec *spec;

/* ---- what a plan's parallel ops move ---- */

/* The bytes one training step of plan g (weights folded, `devices` devices, element size es for
 * floats, 8 for ints) must move between devices, per sending device: each parallel op's source
 * pieces that lie on another device than an output piece they make (once per device; of a
 * partition or combine only the block of the piece that it reads), each piece a
 * regular op reads from another device than its tuple's (and their gradients back when the
 * source needs one), and the sharded update of each weight in copies (a reduce-scatter and an
 * all-gather of its chunks over each copy group). Nothing of the step's data moves: every device
 * holds the inputs whole and makes the pieces of the parallel ops over them (but a graph output's)
 * that it reads. Written from the layouts' definitions
 * (pcg/shape.h piece order, pcg/infer.h tuples), not from the runtime's code. *reads counts the
 * pieces regular ops read from another device (none when each op's inputs, weights above all,
 * are placed where it runs: then only the parallel ops move anything). */
static void plan_bytes(const un_graph *g, int devices, int64_t es, int64_t *sent, int64_t *reads) {
    int32_t n = un_graph_node_count(g);
    bool *grad = calloc((size_t)n, sizeof *grad);
    bool *data = calloc((size_t)n, sizeof *data); /* every device has it: nothing is sent */
    for (int32_t id = 0; id < n; id++) {
        const un_node *nd = un_graph_node(g, id);
        grad[id] = nd->op == UN_OP_WEIGHT;
        for (int k = 0; k < nd->n_in; k++)
            grad[id] |= grad[nd->in[k].node];
        bool output = false;
        for (int32_t i = 0; i < un_graph_output_count(g); i++)
            output |= un_graph_output(g, i).node == id;
        data[id] = nd->op == UN_OP_INPUT ||
                   (un_op_kind_of(nd->op) == UN_OPK_PARALLEL && data[nd->in[0].node] && !output);
    }
    for (int d = 0; d < devices; d++)
        sent[d] = 0;
    *reads = 0;
    for (int32_t id = 0; id < n; id++) {
        const un_node *nd = un_graph_node(g, id);
        const un_shape *so = &nd->inf.out[0];
        if (un_op_kind_of(nd->op) == UN_OPK_REGULAR) { /* each tuple's input pieces */
            const un_infer *inf = &nd->inf;
            int64_t ntup = 1;
            for (int j = 0; j < inf->n_uses; j++)
                ntup *= inf->uses[j].degree;
            int32_t u[UN_MAX_USES] = {0}, blk[UN_MAX_DIMS], sum, copy;
            for (int64_t q = 0; q < ntup; q++) {
                un_infer_piece(inf, u, true, 0, blk, &sum, &copy);
                int32_t at = un_view_device(
                    &nd->view, un_shape_piece_index(&inf->out[0], blk, sum, copy), devices);
                for (int k = 0; k < nd->n_in; k++) {
                    const un_node *src = un_graph_node(g, nd->in[k].node);
                    const un_shape *si = un_graph_shape(g, nd->in[k]);
                    if (data[nd->in[k].node])
                        continue;
                    un_infer_piece(inf, u, false, k, blk, &sum, &copy);
                    int64_t p = un_shape_piece_index(si, blk, sum, copy);
                    int32_t from = un_view_device(&src->view, p, devices);
                    int64_t b = un_shape_piece_numel(si) * (si->dtype == UN_DT_FLOAT ? es : 8);
                    if (from == at)
                        continue;
                    (*reads)++;
                    sent[from] += b;
                    if (grad[nd->in[k].node])
                        sent[at] += b;
                }
                for (int j = inf->n_uses - 1; j >= 0 && ++u[j] == inf->uses[j].degree; j--)
                    u[j] = 0;
            }
            continue;
        }
        int64_t np = un_shape_npieces(so), pn = un_shape_piece_numel(so);
        int64_t e = so->dtype == UN_DT_FLOAT ? es : 8;
        if (nd->op == UN_OP_WEIGHT && so->copy > 1) {
            int32_t c = so->copy;
            for (int64_t b = 0; b < np / c; b++)
                for (int32_t gi = 0; gi < c; gi++) { /* chunk gi, summed and sent by copy gi */
                    int64_t chunk = (pn * (gi + 1) / c - pn * gi / c) * e;
                    int32_t owner = un_view_device(&nd->view, b * c + gi, devices);
                    for (int32_t h = 0; h < c; h++) {
                        int32_t other = un_view_device(&nd->view, b * c + h, devices);
                        if (h != gi && other != owner) {
                            sent[other] += chunk; /* reduce-scatter */
                            sent[owner] += chunk; /* all-gather */
                        }
                    }
                }
            continue;
        }
        if (un_op_kind_of(nd->op) != UN_OPK_PARALLEL)
            continue;
        const un_node *src = un_graph_node(g, nd->in[0].node);
        if (data[nd->in[0].node]) /* the step's data, or parallel ops over it: on every device */
            continue;
        const un_shape *si = &src->inf.out[nd->in[0].out];
        int64_t sbytes = un_shape_piece_numel(si) * e, npairs = 0;
        /* (source piece, device, first and last element of the block read, logical index) */
        int64_t(*pairs)[4] = malloc((size_t)np * 64 * sizeof *pairs);
        for (int64_t p = 0; p < np; p++) {
            int32_t blk[UN_MAX_DIMS], sum, copy, sb[UN_MAX_DIMS];
            un_shape_piece_coords(so, p, blk, &sum, &copy);
            int32_t to = un_view_device(&nd->view, p, devices);
            int64_t srcs[64], bytes[64], first[64], last[64];
            int ns = 0;
            if (nd->op == UN_OP_REPLICATE) {
                srcs[ns++] = un_shape_piece_index(si, blk, sum, copy / (so->copy / si->copy));
            } else if (nd->op == UN_OP_REDUCE) {
                int32_t k = si->sum / so->sum;
                for (int32_t t = 0; t < k && ns < 64; t++)
                    srcs[ns++] = un_shape_piece_index(si, blk, sum * k + t, copy);
            }
            for (int k = 0; k < ns; k++) /* whole pieces */
                bytes[k] = sbytes, first[k] = 0, last[k] = -1;
            if (nd->op == UN_OP_PARTITION || nd->op == UN_OP_COMBINE) {
                /* the source blocks overlapping this block: only their overlap travels */
                int64_t lo[UN_MAX_DIMS], hi[UN_MAX_DIMS];
                for (int i = 0; i < so->rank; i++) {
                    int64_t od = so->dim[i] / so->shard[i], sd = si->dim[i] / si->shard[i];
                    lo[i] = blk[i] * od / sd;
                    hi[i] = (blk[i] * od + od - 1) / sd;
                    sb[i] = (int32_t)lo[i];
                }
                for (;;) {
                    if (ns < 64) {
                        srcs[ns] = un_shape_piece_index(si, sb, sum, copy);
                        bytes[ns] = e, first[ns] = last[ns] = 0;
                        for (int i = 0; i < so->rank; i++) {
                            int64_t od = so->dim[i] / so->shard[i], sd = si->dim[i] / si->shard[i];
                            int64_t a0 = blk[i] * od > sb[i] * sd ? blk[i] * od : sb[i] * sd;
                            int64_t a1 = (blk[i] + 1) * od < (sb[i] + 1) * sd ? (blk[i] + 1) * od
                                                                              : (sb[i] + 1) * sd;
                            bytes[ns] *= a1 - a0;
                            first[ns] = first[ns] * so->dim[i] + a0;
                            last[ns] = last[ns] * so->dim[i] + a1 - 1;
                        }
                        ns++;
                    }
                    int i = so->rank - 1;
                    while (i >= 0 && ++sb[i] > hi[i]) {
                        sb[i] = (int32_t)lo[i];
                        i--;
                    }
                    if (i < 0)
                        break;
                }
            }
            for (int k = 0; k < ns; k++) { /* a block of a source piece travels once per device */
                int32_t from = un_view_device(&src->view, srcs[k], devices);
                bool seen = from == to;
                for (int64_t m = 0; m < npairs && !seen; m++)
                    seen = pairs[m][0] == srcs[k] && pairs[m][1] == to && pairs[m][2] == first[k] &&
                           pairs[m][3] == last[k];
                if (seen)
                    continue;
                pairs[npairs][0] = srcs[k];
                pairs[npairs][1] = to;
                pairs[npairs][2] = first[k];
                pairs[npairs++][3] = last[k];
                sent[from] += bytes[k];
                if (grad[nd->in[0].node])
                    sent[to] += bytes[k];
            }
        }
        free(pairs);
    }
    free(grad);
    free(data);
}

/* ---- training runs ---- */

/* test_train_opts on 1 thread in float64 (the losses compared at 1e-9). */
static un_train_opts opts(const char *model, const char *strategy, int devices, int steps) {
    un_train_opts o = test_train_opts(model, strategy, devices, steps);
    o.threads = 1;
    o.prec = UN_PREC_F64;
    return o;
}

static un_status train(const un_train_opts *o, un_train_result *r) {
    un_ctx *ctx = un_ctx_new(NULL);
    memset(r, 0, sizeof *r);
    un_status st = un_train_run(ctx, o, r);
    if (st != UN_OK)
        printf("    %s under %s: %s\n", o->model, o->strategy, un_ctx_errmsg(ctx));
    un_ctx_free(ctx);
    return st;
}

/* The largest relative loss difference of a against b over the steps of both. */
static double loss_diff(const un_train_result *a, const un_train_result *b) {
    double worst = a->steps == b->steps ? 0 : 1;
    for (int s = 0; s < a->steps && s < b->steps; s++)
        worst = fmax(worst, fabs(a->losses[s] - b->losses[s]) / fabs(b->losses[s]));
    return worst;
}

/* The bytes the plan of o implies per device and the pieces its regular ops read from another
 * device (plan_bytes of its folded graph); false on error. */
static bool implied(const un_train_opts *o, int64_t *sent, int64_t *reads) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = NULL, *f = NULL;
    int d = 0;
    bool ok = un_train_graph(ctx, spec, o, &g, &d) == UN_OK &&
              un_strategy_fold_weights(ctx, g, &f) == UN_OK;
    if (ok)
        plan_bytes(f, d, sizeof(double), sent, reads);
    else
        printf("    %s: %s\n", o->model, un_ctx_errmsg(ctx));
    un_graph_free(f);
    un_graph_free(g);
    un_ctx_free(ctx);
    return ok;
}

/* ---- cases ---- */

#define MODEL                                                                                      \
    "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [16, 32]}},"        \
    " {\"name\": \"w1\", \"op\": \"weight\", \"params\": {\"shape\": [32, 64]}},"                  \
    " {\"name\": \"w2\", \"op\": \"weight\", \"params\": {\"shape\": [64, 8]}},"                   \
    " {\"name\": \"fc1\", \"op\": \"linear\", \"in\": [\"x\", \"w1\"], \"params\": "               \
    "{\"activation\": \"relu\"}},"                                                                 \
    " {\"name\": \"fc2\", \"op\": \"linear\", \"in\": [\"fc1\", \"w2\"]}]}"

/* The tensor-parallel sample MLP on 4 devices with each node's devices given by D1 (x's copies,
 * w1's columns, fc1), D2 (w2's rows, fc2) and DY (the reduce). */
#define PLAN(D1, D2, DY)                                                                           \
    "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [16, 32]}},"        \
    " {\"name\": \"w1\", \"op\": \"weight\", \"params\": {\"shape\": [32, 64]}},"                  \
    " {\"name\": \"w2\", \"op\": \"weight\", \"params\": {\"shape\": [64, 8]}},"                   \
    " {\"name\": \"xc\", \"op\": \"replicate\", \"in\": [\"x\"], \"params\": {\"degree\": 4}, "    \
    "\"devices\": " D1 "},"                                                                        \
    " {\"name\": \"w1c\", \"op\": \"partition\", \"in\": [\"w1\"], \"params\": {\"dim\": 1, "      \
    "\"degree\": 4}, \"devices\": " D1 "},"                                                        \
    " {\"name\": \"fc1\", \"op\": \"linear\", \"in\": [\"xc\", \"w1c\"], \"params\": "             \
    "{\"activation\": \"relu\"}, \"devices\": " D1 "},"                                            \
    " {\"name\": \"w2r\", \"op\": \"partition\", \"in\": [\"w2\"], \"params\": {\"dim\": 0, "      \
    "\"degree\": 4}, \"devices\": " D2 "},"                                                        \
    " {\"name\": \"fc2\", \"op\": \"linear\", \"in\": [\"fc1\", \"w2r\"], \"devices\": " D2 "},"   \
    " {\"name\": \"y\", \"op\": \"reduce\", \"in\": [\"fc2\"], \"params\": {\"degree\": 4}, "      \
    "\"devices\": " DY "}]}"

/* Lists in any order and the start/stride shorthand read into device lists, written as lists,
 * and read back the same. */
static void test_views_json(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    static const char *text = PLAN("[3, 1, 2, 0]", "{\"start\": 0, \"stride\": 1, \"count\": 4}",
                                   "{\"start\": 2, \"count\": 1}");
    un_graph *g = NULL, *back = NULL;
    EXPECT_OK(ctx, un_graph_from_json(ctx, spec, "plan", text, strlen(text), &g));
    if (!g) {
        un_ctx_free(ctx);
        return;
    }
    const un_node *fc1 = un_graph_node(g, un_graph_find(g, "fc1"));
    const un_node *fc2 = un_graph_node(g, un_graph_find(g, "fc2"));
    const un_node *y = un_graph_node(g, un_graph_find(g, "y"));
    EXPECT_EQ(fc1->view.count, 4);
    EXPECT_TRUE(fc1->view.count == 4 && fc1->view.dev[0] == 3 && fc1->view.dev[1] == 1 &&
                fc1->view.dev[2] == 2 && fc1->view.dev[3] == 0);
    for (int p = 0; p < 4; p++)
        EXPECT_EQ(un_view_device(&fc2->view, p, 4), p);
    EXPECT_TRUE(y->view.count == 1 && y->view.dev[0] == 2);
    EXPECT_EQ(un_view_device(&un_graph_node(g, 0)->view, 5, 4), 1); /* no view: p mod D */
    char why[256];
    EXPECT_TRUE(un_graph_views_valid(g, 4, why, sizeof why));
    EXPECT_TRUE(!un_graph_views_valid(g, 3, why, sizeof why) &&
                strstr(why, "device 3 in its machine view is not one of the 3 devices"));
    un_buf b = {0};
    EXPECT_OK(ctx, un_graph_to_json(ctx, g, &b));
    EXPECT_TRUE(b.data && strstr(b.data, "\"devices\": [3, 1, 2, 0]") &&
                strstr(b.data, "\"devices\": [0, 1, 2, 3]") && strstr(b.data, "\"devices\": [2]"));
    EXPECT_OK(ctx, un_graph_from_json(ctx, spec, "back", b.data, strlen(b.data), &back));
    for (int32_t id = 0; back && id < un_graph_node_count(g); id++) {
        const un_view *a = &un_graph_node(g, id)->view, *c = &un_graph_node(back, id)->view;
        EXPECT_TRUE(a->count == c->count &&
                    (a->count == 0 || memcmp(a->dev, c->dev, (size_t)a->count * 4) == 0));
    }
    /* a clone and a copy keep their own lists */
    un_graph *cl = un_graph_clone(g);
    un_graph_node_set_view_range(g, un_graph_find(g, "fc1"), 0, 1, 4);
    const un_node *cf = un_graph_node(cl, un_graph_find(cl, "fc1"));
    EXPECT_TRUE(cf->view.count == 4 && cf->view.dev[0] == 3);
    un_graph_free(cl);
    un_buf_deinit(&b);
    un_graph_free(back);
    un_graph_free(g);
    un_ctx_free(ctx);
}

/* Each bad view: un_strategy_plan_load fails with one message naming the file, the node and the
 * reason, and unity-train says it in one line with exit status 1. */
static void test_views_errors(void) {
    static const struct {
        const char *text, *node, *why;
    } bad[] = {
        {PLAN("[3, 1, 3, 0]", "[0, 1, 2, 3]", "[0]"), "'xc'", "device 3 appears twice"},
        {PLAN("[0, 1, 2, 3]", "[0, -1, 2, 3]", "[0]"), "'w2r'",
         "device -1 in its machine view "
         "is negative"},
        {PLAN("[0, 1, 2, 3]", "[0, 1, 2, 3]", "[4]"), "'y'",
         "device 4 in its machine view is not one of the 4 devices (0..3)"},
        {PLAN("[0, 1, 2]", "[0, 1, 2, 3]", "[0]"), "'xc'", "lists 3 devices for 4 pieces"},
        {PLAN("[0, 1, 2, 3]", "[0, 1, 2, 3]", "[0, 1]"), "'y'", "lists 2 devices for 1 piece ("},
        {PLAN("[0, 1, 2, 3]", "[0, 1, 2, \"3\"]", "[0]"), "devices[3]", "must be an integer"},
        {PLAN("[0, 1, 2, 3]", "[]", "[0]"), "devices", "lists 1 to"},
        {PLAN("[0, 1, 2, 3]", "{\"start\": 0, \"stride\": 0, \"count\": 4}", "[0]"), "devices",
         "1 <= stride"},
    };
    cli_write_file("model.json", MODEL);
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *model = NULL;
    EXPECT_OK(ctx, un_graph_load(ctx, spec, cli_path("model.json"), &model));
    for (size_t i = 0; model && i < sizeof bad / sizeof *bad; i++) {
        cli_write_file("bad.json", bad[i].text);
        un_graph *plan = NULL;
        un_ctx_clear(ctx);
        un_status st = un_strategy_plan_load(ctx, spec, cli_path("bad.json"), model, 4, &plan);
        const char *m = un_ctx_errmsg(ctx);
        bool ok = st != UN_OK && !plan && strstr(m, cli_path("bad.json")) &&
                  strstr(m, bad[i].node) && strstr(m, bad[i].why) && !strchr(m, '\n');
        test__check(ok, TEST__AT, "bad view %zu: status %d, message: %s", i, (int)st, m);
        un_graph_free(plan);
        cli_expect_clean_error(
            "unity-train",
            cli_fmt(
                "--model %s/model.json --strategy %s/bad.json --devices 4 --steps 1 --loss mse"),
            bad[i].why);
    }
    /* a bad view in the model file itself (serial, or transformed by a named strategy): one line
     * naming that file, the node and the reason */
    cli_write_file("badmodel.json",
                   "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": "
                   "[16, 32]}}, {\"name\": \"w1\", \"op\": \"weight\", \"params\": {\"shape\": "
                   "[32, 8]}}, {\"name\": \"fc1\", \"op\": \"linear\", \"in\": [\"x\", \"w1\"], "
                   "\"devices\": [5]}]}");
    char want[400];
    snprintf(want, sizeof want, "%s: node 'fc1': device 5 in its machine view",
             cli_path("badmodel.json"));
    static const char *runs[] = {"", "--devices 4", "--devices 4 --strategy mixed:2x2"};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char args[600];
        snprintf(args, sizeof args, "--model %s %s --steps 1 --loss mse", cli_path("badmodel.json"),
                 runs[i]);
        cli_expect_clean_error("unity-train", args, want);
    }
    un_graph_free(model);
    un_ctx_free(ctx);
}

/* A hand-written plan whose pieces live on devices [3, 1, 2, 0]: the serial losses, a quarter of
 * the weights on every device, and per step only the reduce's bytes: three partial [16, 8] pieces
 * to device 2 and their gradients back. Placing the weights in another order than their ops
 * (w1's columns on [0, 1, 2, 3], fc1 on [3, 1, 2, 0]) moves them to their ops every step, as
 * plan_bytes does not count: the runtime's traffic then exceeds the plan's. */
static void test_views_permuted_plan(void) {
    static const char *text = PLAN("[3, 1, 2, 0]", "[3, 1, 2, 0]", "[2]");
    char model[300], perm[300], apart[300];
    snprintf(model, sizeof model, "%s", cli_path("model.json"));
    snprintf(perm, sizeof perm, "%s", cli_path("perm.json"));
    snprintf(apart, sizeof apart, "%s", cli_path("apart.json"));
    cli_write_file("model.json", MODEL);
    cli_write_file("perm.json", text);
    un_train_opts o1 = opts(model, "serial", 1, 8), o4 = opts(model, perm, 4, 8);
    un_train_result r1, r4;
    un_status st1 = train(&o1, &r1), st4 = train(&o4, &r4);
    int64_t want[4], wr = -1;
    bool have = implied(&o4, want, &wr);
    EXPECT_EQ(wr, 0);
    if (st1 == UN_OK && st4 == UN_OK && have) {
        double worst = loss_diff(&r4, &r1);
        test__check(worst <= 1e-9, TEST__AT, "plan on [3, 1, 2, 0] vs serial: %g", worst);
        int64_t piece = 16 * 8 * (int64_t)sizeof(double);
        for (int d = 0; d < 4; d++) {
            EXPECT_EQ(4 * r4.dev[d].weight_bytes, r1.dev[0].weight_bytes);
            EXPECT_EQ(want[d], d == 2 ? 3 * piece : piece);
            test__check(r4.dev[d].sent == want[d], TEST__AT,
                        "device %d sent %lld B per step, the plan implies %lld", d,
                        (long long)r4.dev[d].sent, (long long)want[d]);
        }
    }
    un_train_result_deinit(&r1);
    un_train_result_deinit(&r4);
    /* w1's columns on [0, 1, 2, 3] under fc1 on [3, 1, 2, 0]: the weights travel to their op */
    char *t = un_xstrdup(text), *w1c = strstr(t, "\"w1c\"");
    char *dv = w1c ? strstr(w1c, "[3, 1, 2, 0]") : NULL;
    EXPECT_TRUE(dv != NULL);
    if (dv)
        memcpy(dv, "[0, 1, 2, 3]", 12);
    cli_write_file("apart.json", t);
    free(t);
    un_train_opts oa = opts(model, apart, 4, 8);
    un_train_result ra = {0};
    int64_t w[4], moved = 0, plan = 0;
    if (dv && train(&oa, &ra) == UN_OK && implied(&oa, w, &wr)) {
        for (int d = 0; d < 4; d++) {
            moved += ra.dev[d].sent;
            plan += w[d];
            EXPECT_EQ(ra.dev[d].sent, w[d]);
        }
        EXPECT_EQ(wr, 2); /* pieces 0 and 3 of w1 (devices 0 and 3) read on 3 and 0 */
        test__check(moved > 4 * 16 * 8 * (int64_t)sizeof(double), TEST__AT,
                    "weights apart from their op: %lld B sent per step", (long long)moved);
    }
    un_train_result_deinit(&ra);
}

/* mixed:2x2 on 4 devices, every tiny zoo model: the serial losses, no op reading a piece from
 * another device, and each device's bytes per step equal to what the plan's parallel ops imply
 * (plan_bytes); the MLP and the transformer also under mpirun -np 4. */
static void test_mixed_bytes(void) {
    int n;
    const char *const *models = un_zoo_names(&n);
    for (int i = 0; i < n; i++) {
        bool mpi = strcmp(models[i], "mlp") == 0 || strcmp(models[i], "transformer") == 0;
        un_train_opts o1 = opts(models[i], "serial", 1, 4), o4 = opts(models[i], "mixed:2x2", 4, 4);
        un_train_result r1, r4;
        un_status st1 = train(&o1, &r1), st4 = train(&o4, &r4);
        int64_t want[4], wr = -1;
        bool have = implied(&o4, want, &wr);
        test__check(wr == 0, TEST__AT, "%s mixed:2x2: its ops read %lld pieces from other devices",
                    models[i], (long long)wr);
        if (st1 == UN_OK && st4 == UN_OK && have) {
            double worst = loss_diff(&r4, &r1);
            test__check(worst <= 1e-9, TEST__AT, "%s mixed:2x2 vs serial: %g", models[i], worst);
            printf("    %-12s mixed 2x2 bytes sent per step by device 0..3:", models[i]);
            for (int d = 0; d < 4; d++) {
                printf(" %lld", (long long)r4.dev[d].sent);
                test__check(r4.dev[d].sent == want[d], TEST__AT,
                            "%s device %d sent %lld B per step, the plan implies %lld", models[i],
                            d, (long long)r4.dev[d].sent, (long long)want[d]);
            }
            printf("\n");
        }
        un_train_result_deinit(&r4);
        if (!mpi || st1 != UN_OK || !have || system("command -v mpirun >/dev/null 2>&1") != 0) {
            un_train_result_deinit(&r1);
            continue;
        }
        /* under mpirun: the serial losses as printed, and every rank's line of --stats */
        char args[256];
        snprintf(args, sizeof args,
                 "--model %s --tiny --steps 4 --log-every 1 --threads 1 --precision f64 --comm mpi "
                 "--strategy mixed:2x2 --stats",
                 models[i]);
        const cli_result *r = cli_run_with(
            "scripts/mpirun.sh --mca mpi_yield_when_idle 1 -x ASAN_OPTIONS=detect_leaks=0 -np 4",
            "unity-train", args);
        EXPECT_EQ(r->code, 0);
        int steps = 0;
        double worst = 0;
        for (const char *p = strstr(r->out, "step "); p && steps < 4;
             p = strstr(p + 1, "\nstep ")) {
            const char *l = strstr(p, "loss ");
            if (!l)
                break;
            worst = fmax(worst, fabs(atof(l + 5) - r1.losses[steps]));
            steps++;
        }
        /* printed with 6 decimals: the serial run's loss to that rounding */
        test__check(steps == 4 && worst <= 5.01e-7, TEST__AT,
                    "mpi %s mixed:2x2: %d steps, loss difference %g", models[i], steps, worst);
        un_train_result_deinit(&r1);
        EXPECT_TRUE(strstr(r->out, "weights(B)  optimizer(B)  peak(B)  need(B)  sent/step(B)"));
        for (int d = 0; d < 4; d++) {
            char key[32];
            snprintf(key, sizeof key, "\n     %d ", d);
            const char *p = strstr(r->out, key);
            long long wb, ob, pk, nd, sent = -1; /* device weights optimizer peak need sent */
            bool got =
                p && sscanf(p, "%*d %lld %lld %lld %lld %lld", &wb, &ob, &pk, &nd, &sent) == 5;
            test__check(got && sent == want[d], TEST__AT,
                        "mpi %s device %d: %lld B sent, the plan implies %lld", models[i], d,
                        got ? sent : -1LL, (long long)want[d]);
        }
    }
}

int main(void) {
    if (!cli_init("/tmp/unity_views.XXXXXX"))
        return 1;
    static const test_case cases[] = {
        {"views_json", test_views_json},
        {"views_errors", test_views_errors},
        {"views_permuted_plan", test_views_permuted_plan},
        {"mixed_bytes", test_mixed_bytes},
    };
    int rc = TEST_RUN_WITH_SPEC(cases, &spec);
    if (!cli_cleanup())
        printf("    could not remove %s\n", cli_tmp);
    return rc;
}
