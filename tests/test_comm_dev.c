/* tests/test_comm_dev.c - the device data plane (comm_dev.h) and the memory a backend reports,
 * without a GPU: the opaque backend's plane (the control plane's calls on the memory behind its
 * device addresses, standing in for NCCL) gives every collective's results on 2 and 4 local
 * ranks; a plane is offered only when every rank's backend offers one; the executor carries its
 * exchanges on it (counted) and trains every tiny zoo model under data, tensor and mixed plans
 * on 2 and 4 devices to exactly the losses of the same runs staged through host memory; and the
 * memory check refuses a run larger than the backend's memory (an opaque backend's small limit). */
#include "runtime/comm_dev.h"

#include <pthread.h>

#include "runtime/backend.h"
#include "runtime/train.h"
#include "runtime/zoo.h"

#include "tests/test.h"
#include "tests/train_run.h"

enum { MAX_RANKS = 4, N = 37 };

/* ---- the opaque plane's collectives ---------------------------------------------------------- */

typedef struct coll_job {
    un_comm *c;
    un_red_type t;
    int bad; /* elements that differ from what the collective must give */
    un_status st;
    char name[32];
} coll_job;

/* The value element i of rank r starts with (exact in float32 and float64). */
static double val(int r, int i) { return (double)(r * 1000 + i) * 0.25; }

static double ld(un_red_type t, const void *p, int i) {
    return t == UN_RED_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static void put(un_red_type t, void *p, int i, double x) {
    if (t == UN_RED_F32)
        ((float *)p)[i] = (float)x;
    else
        ((double *)p)[i] = x;
}

/* A buffer of n elements on be holding f(rank, i). */
static un_buffer *filled(un_ctx *ctx, un_backend *be, un_red_type t, int n, int r, int scale) {
    size_t es = t == UN_RED_F32 ? 4 : 8;
    char *h = calloc((size_t)n, es);
    for (int i = 0; i < n; i++)
        put(t, h, i, val(r, i) * scale);
    un_buffer *b = NULL;
    if (un_buffer_new(ctx, be, (size_t)n * es, &b) == UN_OK)
        un_buffer_write(ctx, b, 0, h, (size_t)n * es);
    free(h);
    return b;
}

/* Reads b back and counts the elements that differ from want(i). */
static int count_bad(un_ctx *ctx, un_buffer *b, un_red_type t, int n, double (*want)(int, int),
                     int arg) {
    size_t es = t == UN_RED_F32 ? 4 : 8;
    char *h = calloc((size_t)n, es);
    int bad = un_buffer_read(ctx, b, 0, h, (size_t)n * es) == UN_OK ? 0 : n;
    for (int i = 0; i < n && !bad; i++)
        bad += ld(t, h, i) != want(arg, i);
    free(h);
    return bad;
}

static int g_size; /* the group's size, for the expected values */
static double want_sum(int unused, int i) {
    (void)unused;
    double s = 0;
    for (int r = 0; r < g_size; r++)
        s += val(r, i);
    return s;
}
static double want_gather(int unused, int i) { return (void)unused, val(i / N, i % N); }
static double want_rs(int me, int i) { return want_sum(0, me * N + i); }
static double want_root(int root, int i) { return val(root, i); }
static double want_peer(int peer, int i) { return val(peer, i) * 3; }

static void *coll_rank(void *arg) {
    coll_job *j = arg;
    un_ctx *ctx = un_ctx_new(NULL);
    int me = un_comm_rank(j->c), size = un_comm_size(j->c);
    un_prec prec = j->t == UN_RED_F32 ? UN_PREC_F32 : UN_PREC_F64;
    un_backend *be = NULL;
    un_comm_dev *d = NULL;
    j->st = un_backend_opaque_new(ctx, prec, 1, &be);
    if (j->st == UN_OK)
        j->st = un_comm_dev_new(ctx, j->c, be, &d);
    if (!d) {
        j->bad = -1;
        goto done;
    }
    snprintf(j->name, sizeof j->name, "%s", un_comm_dev_name(d));
    /* allreduce in place */
    un_buffer *a = filled(ctx, be, j->t, N, me, 1);
    j->st = un_comm_dev_allreduce(ctx, d, j->t, un_buffer_at(a, 0), N);
    j->bad += count_bad(ctx, a, j->t, N, want_sum, 0);
    /* allgather: recv[size * N] = every rank's N, in rank order */
    un_buffer *s = filled(ctx, be, j->t, N, me, 1), *g = filled(ctx, be, j->t, size * N, 99, 0);
    if (j->st == UN_OK)
        j->st = un_comm_dev_allgather(ctx, d, j->t, un_buffer_at(s, 0), un_buffer_at(g, 0), N);
    j->bad += count_bad(ctx, g, j->t, size * N, want_gather, 0);
    /* reduce-scatter: block `me` of the sum of every rank's size * N */
    un_buffer *rs = filled(ctx, be, j->t, size * N, me, 0), *out = filled(ctx, be, j->t, N, 0, 0);
    {
        size_t es = j->t == UN_RED_F32 ? 4 : 8;
        char *h = calloc((size_t)(size * N), es);
        for (int i = 0; i < size * N; i++)
            put(j->t, h, i, val(me, i));
        un_buffer_write(ctx, rs, 0, h, (size_t)(size * N) * es);
        free(h);
    }
    if (j->st == UN_OK)
        j->st =
            un_comm_dev_reduce_scatter(ctx, d, j->t, un_buffer_at(rs, 0), un_buffer_at(out, 0), N);
    j->bad += count_bad(ctx, out, j->t, N, want_rs, me);
    /* broadcast from the last rank */
    un_buffer *bc = filled(ctx, be, j->t, N, me, 1);
    size_t bytes = (size_t)N * (j->t == UN_RED_F32 ? 4 : 8);
    if (j->st == UN_OK)
        j->st = un_comm_dev_bcast(ctx, d, size - 1, un_buffer_at(bc, 0), bytes);
    j->bad += count_bad(ctx, bc, j->t, N, want_root, size - 1);
    /* exchange: a ring, each rank sends 3 x its values to the next, tag = sender */
    un_buffer *tx = filled(ctx, be, j->t, N, me, 3), *rx = filled(ctx, be, j->t, N, 0, 0);
    int next = (me + 1) % size, prev = (me + size - 1) % size;
    un_comm_msg sm = {.peer = next, .tag = me, .data = un_buffer_at(tx, 0), .bytes = bytes};
    un_comm_msg rm = {.peer = prev, .tag = prev, .data = un_buffer_at(rx, 0), .bytes = bytes};
    if (j->st == UN_OK)
        j->st = un_comm_dev_exchange(ctx, d, &sm, 1, &rm, 1);
    if (j->st == UN_OK)
        j->st = un_comm_dev_synchronize(ctx, d);
    j->bad += count_bad(ctx, rx, j->t, N, want_peer, prev);
    un_buffer_free(a), un_buffer_free(s), un_buffer_free(g), un_buffer_free(rs);
    un_buffer_free(out), un_buffer_free(bc), un_buffer_free(tx), un_buffer_free(rx);
done:
    un_comm_dev_free(d);
    un_backend_free(be);
    un_ctx_free(ctx);
    return NULL;
}

/* Runs fn on n thread ranks of a local group. */
static void on_ranks(int n, void *(*fn)(void *), void *jobs, size_t job_size,
                     void (*bind)(void *job, un_comm *c, int r)) {
    un_comm_group *grp = NULL;
    EXPECT_OK(NULL, un_comm_local_group_new(NULL, n, &grp));
    if (!grp)
        return;
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < n; r++) {
        void *j = (char *)jobs + (size_t)r * job_size;
        bind(j, un_comm_local_get(grp, r), r);
        pthread_create(&th[r], NULL, fn, j);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    un_comm_local_group_free(grp);
}

static un_red_type g_type;
static void bind_coll(void *job, un_comm *c, int r) {
    (void)r;
    *(coll_job *)job = (coll_job){.c = c, .t = g_type};
}

static void test_opaque_plane(void) {
    for (int n = 2; n <= MAX_RANKS; n += 2)
        for (int t = 0; t < UN_RED_COUNT; t++) {
            coll_job jobs[MAX_RANKS];
            g_size = n;
            g_type = (un_red_type)t;
            on_ranks(n, coll_rank, jobs, sizeof jobs[0], bind_coll);
            for (int r = 0; r < n; r++) {
                test__check(jobs[r].st == UN_OK && jobs[r].bad == 0, TEST__AT,
                            "%d ranks, %s, rank %d: %s, %d wrong elements", n,
                            t == UN_RED_F32 ? "f32" : "f64", r, un_status_str(jobs[r].st),
                            jobs[r].bad);
                EXPECT_STR_EQ(jobs[r].name, "opaque");
            }
        }
}

/* ---- which backends offer a plane ------------------------------------------------------------ */

typedef struct offer_job {
    un_comm *c;
    const char *kind; /* this rank's backend: "cpu", "opaque" or "opaque:staged" */
    un_status st;
    bool got;
} offer_job;

static const char *g_kinds[MAX_RANKS];
static void bind_offer(void *job, un_comm *c, int r) {
    *(offer_job *)job = (offer_job){.c = c, .kind = g_kinds[r]};
}

static void *offer_rank(void *arg) {
    offer_job *j = arg;
    un_ctx *ctx = un_ctx_new(NULL);
    un_backend *be = NULL;
    un_backend_opaque_opts o;
    if (strcmp(j->kind, "cpu") == 0)
        j->st = un_backend_cpu_new(ctx, UN_PREC_F32, 1, &be);
    else if ((j->st = un_backend_opaque_opts_parse(ctx, j->kind, &o)) == UN_OK)
        j->st = un_backend_opaque_new_opts(ctx, UN_PREC_F32, 1, &o, &be);
    un_comm_dev *d = NULL;
    if (j->st == UN_OK)
        j->st = un_comm_dev_new(ctx, j->c, be, &d);
    j->got = d != NULL;
    un_comm_dev_free(d);
    un_backend_free(be);
    un_ctx_free(ctx);
    return NULL;
}

static void test_plane_offered(void) {
    static const struct {
        const char *kinds[3];
        bool plane;
    } cases[] = {
        {{"opaque", "opaque", "opaque"}, true},
        {{"cpu", "cpu", "cpu"}, false},                        /* host-visible: the comm moves it */
        {{"opaque:staged", "opaque:staged", "opaque"}, false}, /* asked not to */
        {{"opaque", "opaque:staged", "opaque"}, false},        /* one rank without: none */
        {{"opaque", "cpu", "opaque"}, false},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        offer_job jobs[3];
        for (int r = 0; r < 3; r++)
            g_kinds[r] = cases[k].kinds[r];
        on_ranks(3, offer_rank, jobs, sizeof jobs[0], bind_offer);
        for (int r = 0; r < 3; r++)
            test__check(jobs[r].st == UN_OK && jobs[r].got == cases[k].plane, TEST__AT,
                        "case %zu rank %d (%s): %s, plane %d", k, r, jobs[r].kind,
                        un_status_str(jobs[r].st), jobs[r].got);
    }
}

/* ---- the executor on the plane = staged, bit for bit ----------------------------------------- */

/* Sums of the per-device exchange counts of a run. */
static void exchanges(const un_train_result *r, int64_t *plane, int64_t *staged) {
    *plane = *staged = 0;
    for (int i = 0; r->dev && i < r->devices; i++) {
        *plane += r->dev[i].plane_exchanges;
        *staged += r->dev[i].staged_exchanges;
    }
}

/* One run on the plane and one staged: the same status, the same losses bit for bit, the plane
 * run's exchanges all on the plane and the staged run's all staged. Returns 1 when both ran. */
static int plane_vs_staged(const char *model, const char *strategy, int devices) {
    un_train_result rp, rs;
    char ep[512], es[512];
    un_status sp =
        test_train_on("opaque", model, strategy, devices, 3, NULL, NULL, &rp, ep, sizeof ep);
    un_status ss =
        test_train_on("opaque:staged", model, strategy, devices, 3, NULL, NULL, &rs, es, sizeof es);
    bool ok = sp == ss;
    int64_t pp = 0, ps = 0, sp_ = 0, ss_ = 0;
    if (ok && sp == UN_OK) {
        ok = memcmp(rp.losses, rs.losses, 3 * sizeof(double)) == 0;
        exchanges(&rp, &pp, &ps);
        exchanges(&rs, &sp_, &ss_);
        ok = ok && pp > 0 && ps == 0 && sp_ == 0 && ss_ == pp;
    }
    test__check(ok, TEST__AT,
                "%s %s on %d: plane %s (%s) loss %.9g, %lld plane / %lld staged exchanges; "
                "staged %s (%s) loss %.9g, %lld / %lld",
                model, strategy, devices, un_status_str(sp), ep, sp == UN_OK ? rp.losses[2] : 0.0,
                (long long)pp, (long long)ps, un_status_str(ss), es,
                ss == UN_OK ? rs.losses[2] : 0.0, (long long)sp_, (long long)ss_);
    un_train_result_deinit(&rp);
    un_train_result_deinit(&rs);
    return ok && sp == UN_OK;
}

static void test_exec_on_plane(void) {
    int n, ran = 0, tried = 0;
    const char *const *names = un_zoo_names(&n);
    for (int i = 0; i < n; i++)
        for (int d = 2; d <= 4; d += 2) {
            ran += plane_vs_staged(names[i], "data", d);
            ran += plane_vs_staged(names[i], "tensor", d);
            tried += 2;
        }
    const char *ms = "tests/data/plans/mlp_sample.json";
    ran += plane_vs_staged(ms, "tests/data/plans/mlp_mixed2.json", 2);
    ran += plane_vs_staged(ms, "tests/data/plans/mlp_mixed4.json", 4);
    tried += 2;
    /* only the 10-class heads of resnext50 and inception_v3 cannot be split 4 ways */
    EXPECT_TRUE(ran >= tried - 2);
    printf("    %d of %d runs: exchanges on the opaque device plane, losses = staged bit for bit\n",
           ran, tried);
}

/* ---- memory ---------------------------------------------------------------------------------- */

static void test_memory(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    int64_t avail = -1;
    bool host = false;
    un_backend *be = NULL;
    /* cpu: the machine's host memory */
    EXPECT_OK(ctx, un_backend_cpu_new(ctx, UN_PREC_F32, 1, &be));
    EXPECT_OK(ctx, un_backend_memory(ctx, be, &avail, &host));
    EXPECT_TRUE(host && avail > (1 << 20));
    un_backend_free(be);
    /* opaque with a limit: the limit minus what it holds; more is UN_ERR_NOMEM, naming the limit */
    un_backend_opaque_opts o;
    EXPECT_OK(ctx, un_backend_opaque_opts_parse(ctx, "opaque:mem=64K", &o));
    EXPECT_TRUE(o.mem_limit == 64 << 10 && !o.staged);
    EXPECT_OK(ctx, un_backend_opaque_new_opts(ctx, UN_PREC_F32, 1, &o, &be));
    un_buffer *a = NULL, *b = NULL;
    EXPECT_OK(ctx, un_buffer_new(ctx, be, 40 << 10, &a));
    EXPECT_OK(ctx, un_backend_memory(ctx, be, &avail, &host));
    EXPECT_TRUE(!host && avail == 24 << 10);
    un_ctx *c2 = un_ctx_new(NULL);
    EXPECT_EQ(un_buffer_new(c2, be, 32 << 10, &b), UN_ERR_NOMEM);
    EXPECT_TRUE(b == NULL && strstr(un_ctx_errmsg(c2), "limit of 65536 bytes"));
    un_ctx_free(c2);
    un_buffer_free(a); /* released: the room is back */
    EXPECT_OK(ctx, un_backend_memory(ctx, be, &avail, &host));
    EXPECT_EQ(avail, 64 << 10);
    EXPECT_OK(ctx, un_buffer_new(ctx, be, 60 << 10, &b));
    un_buffer_free(b);
    un_backend_free(be);
    /* without a limit: host memory */
    EXPECT_OK(ctx, un_backend_opaque_new(ctx, UN_PREC_F32, 1, &be));
    EXPECT_OK(ctx, un_backend_memory(ctx, be, &avail, &host));
    EXPECT_TRUE(host && avail > (1 << 20));
    un_backend_free(be);
    un_ctx_free(ctx);
    /* options: each bad one is one error naming it */
    static const char *const bad[] = {
        "opaque:mem=0",   "opaque:mem=", "opaque:mem=12X", "opaque:fast",
        "opaque:staged,", "opaquex",     "opaque:mem=-1",  "opaque:mem=99999999999G"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        un_ctx *c = un_ctx_new(NULL);
        un_status st = un_backend_opaque_opts_parse(c, bad[i], &o);
        test__check(st == UN_ERR_INVALID && strstr(un_ctx_errmsg(c), "--backend: ") &&
                        !strchr(un_ctx_errmsg(c), '\n'),
                    TEST__AT, "'%s': %s (%s)", bad[i], un_status_str(st), un_ctx_errmsg(c));
        un_ctx_free(c);
    }
    ctx = un_ctx_new(NULL);
    EXPECT_OK(ctx, un_backend_opaque_opts_parse(ctx, "opaque:staged,mem=2M", &o));
    EXPECT_TRUE(o.staged && o.mem_limit == 2 << 20);
    un_ctx_free(ctx);
}

/* The memory check asks the backend: a run that does not fit an opaque backend's limit is refused
 * on every rank before the executor allocates, naming what it needs and what there is; one that
 * fits trains to the unlimited run's losses. */
static void test_memory_check(void) {
    un_train_result r, big;
    char e[512];
    un_status st =
        test_train_on("opaque:mem=16K", "mlp", "data", 2, 3, NULL, NULL, &r, e, sizeof e);
    test__check(st == UN_ERR_NOMEM && strstr(e, "needs about") && strstr(e, "GiB are available") &&
                    strstr(e, "opaque-f32 memory of device"),
                TEST__AT, "16K: %s (%s)", un_status_str(st), e);
    un_train_result_deinit(&r);
    EXPECT_OK(NULL,
              test_train_on("opaque:mem=64M", "mlp", "data", 2, 3, NULL, NULL, &r, e, sizeof e));
    EXPECT_OK(NULL, test_train_on("opaque", "mlp", "data", 2, 3, NULL, NULL, &big, e, sizeof e));
    EXPECT_TRUE(r.losses && big.losses && memcmp(r.losses, big.losses, 3 * sizeof(double)) == 0);
    un_train_result_deinit(&r);
    un_train_result_deinit(&big);
}

int main(void) {
    static const test_case cases[] = {
        {"opaque_plane", test_opaque_plane},   {"plane_offered", test_plane_offered},
        {"exec_on_plane", test_exec_on_plane}, {"memory", test_memory},
        {"memory_check", test_memory_check},
    };
    return TEST_RUN_ALL(cases);
}
