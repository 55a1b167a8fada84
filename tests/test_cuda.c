/* tests/test_cuda.c - what of the CUDA backend and the NCCL data plane can be checked on every
 * machine: with no GPU (or a build without CUDA/NCCL) the constructors answer
 * UN_ERR_UNAVAILABLE with one line naming why, on every rank of a group, and nothing is left
 * allocated; with a GPU every op the CUDA backend supports runs forward and backward on it and
 * matches the CPU kernels (float32, 1e-4 relative), and the NCCL communicator comes up over local
 * thread ranks. The kernels' logic is tested on the CPU by test_cuda_index.c. */
#include "runtime/comm_nccl.h"

#include <pthread.h>
#include <unistd.h>

#include "runtime/backend_cuda.h"
#include "runtime/backend_cuda_rt.h"
#include "runtime/backend_impl.h"
#include "runtime/comm_nccl_rt.h"
#include "runtime/zoo.h"
#include "search/profile.h"

#include "tests/test.h"
#include "tests/train_run.h"

enum { MAX_RANKS = 4 };

/* Whether a library whose path contains `lib` is mapped into this process. */
static bool mapped(const char *lib) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, lib) != NULL;
    if (f)
        fclose(f);
    return found;
}

/* The CUDA libraries are plugins loaded on first GPU use, never linked: CPU and opaque training
 * in this process maps none of them; the loader's failures are one line naming the library; in a
 * build with CUDA the plugins load when asked and bring their libraries (cuBLAS, NCCL) with them.
 */
static void test_lazy_libraries(void) {
    static const char *const backends[2] = {"cpu", "opaque"};
    char why[512];
    for (int b = 0; b < 2; b++) {
        un_train_result r;
        EXPECT_OK(NULL,
                  test_train_on(backends[b], "mlp", "data", 2, 1, NULL, NULL, &r, why, sizeof why));
        un_train_result_deinit(&r);
    }
    un_backend_cuda_devices(NULL); /* asks for GPUs: loads the plugin only where a driver is */
    bool driver = access("/dev/nvidiactl", F_OK) == 0;
    static const char *const libs[4] = {"libcublas", "libcudart", "libnccl", "libunity_cuda"};
    for (int i = 0; i < 4 && !driver; i++)
        test__check(!mapped(libs[i]), TEST__AT, "%s mapped by a CPU-only run", libs[i]);
    EXPECT_TRUE(un__plugin_open("libunity_absent.so", "un__cu_fns_get", why, sizeof why) == NULL);
    EXPECT_TRUE(strstr(why, "cannot load libunity_absent.so: ") && !strchr(why, '\n'));
    EXPECT_TRUE(un__plugin_open("libm.so.6", "un__cu_fns_get", why, sizeof why) == NULL);
    EXPECT_STR_EQ(why, "libm.so.6 has no un__cu_fns_get");
    const char *w = NULL;
    const un__cu_fns *cu = un__cu_seam(&w);
    if (!cu) {
        printf("  cuda plugin: not built (%s)\n", w);
        EXPECT_TRUE(w && strstr(w, "no CUDA"));
        return;
    }
    EXPECT_TRUE(mapped("libunity_cuda.so") && mapped("libcublas") && mapped("libcudart"));
    int n = cu->device_count(&w);
    printf("  cuda plugin loaded: %d device%s%s%s\n", n, n == 1 ? "" : "s", n ? "" : ": ",
           n ? "" : w);
    const un__nccl_fns *nc =
        un__plugin_open("libunity_nccl.so", "un__nccl_fns_get", why, sizeof why);
    if (nc)
        EXPECT_TRUE(mapped("libnccl"));
    else /* a build without nccl.h: only the plugin itself is missing */
        test__check(strstr(why, "libunity_nccl.so: cannot open") != NULL, TEST__AT, "%s", why);
}

typedef struct rank_job {
    un_comm *c;
    un_status st;
    char msg[256];
    bool made;
} rank_job;

static void *nccl_rank(void *arg) {
    rank_job *j = arg;
    un_ctx *ctx = un_ctx_new(NULL);
    un_comm_dev *d = NULL;
    j->st = un_comm_nccl_new(ctx, j->c, un_comm_rank(j->c), NULL, &d);
    snprintf(j->msg, sizeof j->msg, "%s", un_ctx_errmsg(ctx));
    j->made = d != NULL;
    if (d) {
        j->st = un_comm_dev_allreduce(ctx, d, UN_RED_F32, NULL, 0); /* nothing to move */
        if (j->st == UN_OK)
            j->st = un_comm_dev_synchronize(ctx, d);
    }
    un_comm_dev_free(d);
    un_ctx_free(ctx);
    return NULL;
}

/* n thread ranks each open the NCCL data plane on device `rank`. */
static void run_group(int n, rank_job *jobs) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_comm_group *grp = NULL;
    EXPECT_OK(ctx, un_comm_local_group_new(ctx, n, &grp));
    if (!grp) {
        un_ctx_free(ctx);
        return;
    }
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < n; r++) {
        jobs[r] = (rank_job){.c = un_comm_local_get(grp, r)};
        pthread_create(&th[r], NULL, nccl_rank, &jobs[r]);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    un_comm_local_group_free(grp);
    un_ctx_free(ctx);
}

static void test_nccl(void) {
    rank_job jobs[MAX_RANKS];
    /* one rank first: tells whether this machine and build have NCCL and a GPU */
    run_group(1, jobs);
    if (jobs[0].st == UN_ERR_UNAVAILABLE) {
        printf("  nccl: skipped (%s)\n", jobs[0].msg);
        EXPECT_TRUE(strncmp(jobs[0].msg, "nccl: ", 6) == 0 && !strchr(jobs[0].msg, '\n'));
        EXPECT_TRUE(!jobs[0].made);
        /* a group: every rank gets the same answer, none hangs in NCCL */
        run_group(3, jobs);
        for (int r = 0; r < 3; r++) {
            EXPECT_EQ(jobs[r].st, UN_ERR_UNAVAILABLE);
            EXPECT_TRUE(!jobs[r].made);
        }
        return;
    }
    EXPECT_OK(NULL, jobs[0].st);
    EXPECT_TRUE(jobs[0].made);
    if (jobs[0].st != UN_OK)
        printf("  nccl: %s\n", jobs[0].msg);
}

/* ---- every op on the CUDA backend against the CPU kernels ------------------------------------ */

enum { MAXT = 7 };

typedef struct shp {
    int rank;
    int64_t dim[UN_MAX_DIMS];
    int64_t int_range; /* > 0: an INT tensor of values in [0, int_range) */
} shp;

typedef struct opcase {
    const char *name;
    un_op op;
    int np;
    int64_t par[UN_MAX_PARAMS]; /* scalar params in order */
    int n_in, n_out;
    shp in[MAXT], out[MAXT];
} opcase;

/* The list parameters of some cases (split's sizes, reshape's shape), by case name. */
static const struct {
    const char *name;
    int at, len;
    int64_t v[UN_MAX_DIMS];
} LISTS[] = {{"split", 1, 2, {2, 4}}, {"reshape", 0, 2, {18, 5}}};

#define S1(a)                                                                                      \
    { 1, {a}, 0 }
#define S2(a, b)                                                                                   \
    { 2, {a, b}, 0 }
#define S3(a, b, c)                                                                                \
    { 3, {a, b, c}, 0 }
#define I2(a, b, r)                                                                                \
    { 2, {a, b}, r }
#define I1(a, r)                                                                                   \
    { 1, {a}, r }

static const opcase CASES[] = {
    {"linear", UN_OP_LINEAR, 2, {0, 1}, 3, 1, {S3(2, 5, 33), S2(33, 17), S1(17)}, {S3(2, 5, 17)}},
    {"linear relu", UN_OP_LINEAR, 2, {1, 1}, 3, 1, {S2(9, 33), S2(33, 17), S1(17)}, {S2(9, 17)}},
    {"linear gelu", UN_OP_LINEAR, 2, {4, 0}, 2, 1, {S2(9, 33), S2(33, 17)}, {S2(9, 17)}},
    {"linear tanh", UN_OP_LINEAR, 2, {3, 1}, 3, 1, {S2(9, 33), S2(33, 17), S1(17)}, {S2(9, 17)}},
    {"batch_matmul", UN_OP_BATCH_MATMUL, 0, {0}, 2, 1, {S3(3, 7, 11), S3(3, 11, 5)}, {S3(3, 7, 5)}},
    {"ew_add", UN_OP_EW_ADD, 0, {0}, 2, 1, {S2(13, 70), S2(13, 70)}, {S2(13, 70)}},
    {"ew_sub", UN_OP_EW_SUB, 0, {0}, 2, 1, {S2(13, 70), S2(13, 70)}, {S2(13, 70)}},
    {"ew_mul", UN_OP_EW_MUL, 0, {0}, 2, 1, {S2(13, 70), S2(13, 70)}, {S2(13, 70)}},
    {"scalar_mul", UN_OP_SCALAR_MUL, 2, {3, 4}, 1, 1, {S2(13, 70)}, {S2(13, 70)}},
    {"relu", UN_OP_RELU, 0, {0}, 1, 1, {S2(13, 70)}, {S2(13, 70)}},
    {"gelu", UN_OP_GELU, 0, {0}, 1, 1, {S2(13, 70)}, {S2(13, 70)}},
    {"sigmoid", UN_OP_SIGMOID, 0, {0}, 1, 1, {S2(13, 70)}, {S2(13, 70)}},
    {"tanh", UN_OP_TANH, 0, {0}, 1, 1, {S2(13, 70)}, {S2(13, 70)}},
    {"dropout", UN_OP_DROPOUT, 2, {30, 5}, 1, 1, {S2(13, 70)}, {S2(13, 70)}},
    {"split", UN_OP_SPLIT, 1, {1}, 1, 2, {S3(3, 6, 5)}, {S3(3, 2, 5), S3(3, 4, 5)}},
    {"reshape", UN_OP_RESHAPE, 0, {0}, 1, 1, {S3(3, 6, 5)}, {S2(18, 5)}},
    {"flat", UN_OP_FLAT, 0, {0}, 1, 1, {S3(3, 6, 5)}, {S2(3, 30)}},
    {"identity", UN_OP_IDENTITY, 0, {0}, 1, 1, {S2(13, 70)}, {S2(13, 70)}},
    {"softmax last", UN_OP_SOFTMAX, 1, {-1}, 1, 1, {S3(4, 6, 300)}, {S3(4, 6, 300)}},
    {"softmax mid", UN_OP_SOFTMAX, 1, {1}, 1, 1, {S3(4, 6, 30)}, {S3(4, 6, 30)}},
    {"layer_norm", UN_OP_LAYER_NORM, 0, {0}, 3, 1, {S2(12, 500), S1(500), S1(500)}, {S2(12, 500)}},
    {"concat", UN_OP_CONCAT, 1, {1}, 2, 1, {S3(3, 4, 5), S3(3, 2, 5)}, {S3(3, 6, 5)}},
    {"transpose", UN_OP_TRANSPOSE, 2, {0, 2}, 1, 1, {S3(3, 4, 5)}, {S3(5, 4, 3)}},
    {"embedding sum", UN_OP_EMBEDDING, 1, {0}, 2, 1, {I2(8, 3, 20), S2(20, 16)}, {S2(8, 16)}},
    {"embedding mean", UN_OP_EMBEDDING, 1, {1}, 2, 1, {I2(8, 3, 20), S2(20, 16)}, {S2(8, 16)}},
    {"reduce_sum", UN_OP_REDUCE_SUM, 2, {1, 1}, 1, 1, {S3(4, 7, 5)}, {S3(4, 1, 5)}},
    {"reduce_mean", UN_OP_REDUCE_MEAN, 2, {2, 1}, 1, 1, {S3(4, 7, 5)}, {S3(4, 7, 1)}},
    {"attention",
     UN_OP_MULTIHEAD_ATTENTION,
     2,
     {2, 0},
     7,
     1,
     {S3(2, 5, 6), S3(2, 7, 6), S3(2, 7, 6), S2(6, 8), S2(6, 8), S2(6, 8), S2(8, 3)},
     {S3(2, 5, 3)}},
    {"attention causal",
     UN_OP_MULTIHEAD_ATTENTION,
     2,
     {2, 1},
     7,
     1,
     {S3(2, 5, 6), S3(2, 5, 6), S3(2, 5, 6), S2(6, 8), S2(6, 8), S2(6, 8), S2(8, 3)},
     {S3(2, 5, 3)}},
    {"conv2d relu groups",
     UN_OP_CONV2D,
     7,
     {2, 1, 1, 0, 2, 1, 1},
     3,
     1,
     {{4, {2, 4, 7, 6}, 0}, {4, {6, 2, 3, 3}, 0}, S1(6)},
     {{4, {2, 6, 4, 4}, 0}}},
    {"conv2d gelu",
     UN_OP_CONV2D,
     7,
     {1, 2, 0, 1, 1, 4, 0},
     2,
     1,
     {{4, {1, 3, 5, 5}, 0}, {4, {4, 3, 3, 2}, 0}},
     {{4, {1, 4, 3, 3}, 0}}},
    {"pool2d max",
     UN_OP_POOL2D,
     7,
     {3, 2, 2, 2, 1, 0, 0},
     1,
     1,
     {{4, {2, 3, 7, 6}, 0}},
     {{4, {2, 3, 4, 3}, 0}}},
    {"pool2d avg",
     UN_OP_POOL2D,
     7,
     {3, 2, 2, 2, 1, 0, 1},
     1,
     1,
     {{4, {2, 3, 7, 6}, 0}},
     {{4, {2, 3, 4, 3}, 0}}},
    {"batch_norm",
     UN_OP_BATCH_NORM,
     0,
     {0},
     3,
     1,
     {{4, {5, 3, 6, 7}, 0}, S1(3), S1(3)},
     {{4, {5, 3, 6, 7}, 0}}},
    {"cross_entropy", UN_OP_CROSS_ENTROPY, 0, {0}, 2, 1, {S2(10, 300), I1(10, 300)}, {S1(10)}},
};

static int64_t shp_numel(const shp *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dim[i];
    return n;
}

static size_t shp_bytes(const shp *s) {
    return (size_t)shp_numel(s) * (s->int_range ? sizeof(int64_t) : sizeof(float));
}

static uint64_t rng = 99;

static void fill(const shp *s, void *p) {
    for (int64_t i = 0; i < shp_numel(s); i++) {
        rng = un_mix64(rng);
        if (s->int_range)
            ((int64_t *)p)[i] = (int64_t)(rng % (uint64_t)s->int_range);
        else
            ((float *)p)[i] = (float)((double)(rng >> 11) / 4503599627370496.0 - 1.0);
    }
}

static un_kt as_kt(const shp *s, void *data) {
    un_kt t = {.dtype = s->int_range ? UN_DT_INT : UN_DT_FLOAT, .rank = s->rank, .data = data};
    memcpy(t.dim, s->dim, sizeof t.dim);
    return t;
}

static bool same(const float *a, const float *b, int64_t n, const char *what, const char *name) {
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - b[i]) <= 1e-4 * (1 + fabs((double)b[i])))) {
            printf("  cuda %s %s: element %lld: %.9g vs cpu %.9g\n", name, what, (long long)i,
                   (double)a[i], (double)b[i]);
            return false;
        }
    return true;
}

/* One case: host buffers h[slot], device buffers d[slot]; slots: in, out, dout, din. */
static void run_case(un_ctx *ctx, un_backend *be, const opcase *c) {
    un_param p[UN_MAX_PARAMS] = {0};
    for (int i = 0; i < c->np; i++)
        p[i].len = -1, p[i].v[0] = c->par[i];
    for (size_t k = 0; k < sizeof LISTS / sizeof LISTS[0]; k++)
        if (strcmp(LISTS[k].name, c->name) == 0) {
            p[LISTS[k].at].len = LISTS[k].len;
            memcpy(p[LISTS[k].at].v, LISTS[k].v, sizeof LISTS[k].v);
        }
    void *hin[MAXT] = {0}, *hout[MAXT] = {0}, *hdout[MAXT] = {0}, *hdin[MAXT] = {0};
    void *din_dev[MAXT] = {0}, *in_dev[MAXT] = {0}, *out_dev[MAXT] = {0}, *dout_dev[MAXT] = {0};
    un_kt ki[MAXT], ko[MAXT], kdo[MAXT], kdi[MAXT], gi[MAXT], go[MAXT], gdo[MAXT], gdi[MAXT];
    bool ok = true;
    for (int i = 0; i < c->n_in; i++) {
        size_t b = shp_bytes(&c->in[i]);
        hin[i] = malloc(b), fill(&c->in[i], hin[i]);
        ki[i] = as_kt(&c->in[i], hin[i]);
        ok &= un_backend_alloc(ctx, be, b, &in_dev[i]) == UN_OK;
        gi[i] = as_kt(&c->in[i], in_dev[i]);
        kdi[i] = gdi[i] = as_kt(&c->in[i], NULL);
        if (!c->in[i].int_range) { /* gradients start non-zero: backward accumulates */
            hdin[i] = malloc(b), fill(&c->in[i], hdin[i]);
            ok &= un_backend_alloc(ctx, be, b, &din_dev[i]) == UN_OK;
            kdi[i].data = hdin[i], gdi[i].data = din_dev[i];
        }
    }
    for (int j = 0; j < c->n_out; j++) {
        size_t b = shp_bytes(&c->out[j]);
        hout[j] = calloc(1, b), hdout[j] = malloc(b), fill(&c->out[j], hdout[j]);
        ko[j] = as_kt(&c->out[j], hout[j]), kdo[j] = as_kt(&c->out[j], hdout[j]);
        ok &= un_backend_alloc(ctx, be, b, &out_dev[j]) == UN_OK;
        ok &= un_backend_alloc(ctx, be, b, &dout_dev[j]) == UN_OK;
        go[j] = as_kt(&c->out[j], out_dev[j]), gdo[j] = as_kt(&c->out[j], dout_dev[j]);
    }
    EXPECT_TRUE(ok);
    if (ok) {
        for (int i = 0; i < c->n_in; i++) {
            EXPECT_OK(ctx, un_backend_write(ctx, be, in_dev[i], hin[i], shp_bytes(&c->in[i])));
            if (din_dev[i])
                EXPECT_OK(ctx,
                          un_backend_write(ctx, be, din_dev[i], hdin[i], shp_bytes(&c->in[i])));
        }
        for (int j = 0; j < c->n_out; j++)
            EXPECT_OK(ctx, un_backend_write(ctx, be, dout_dev[j], hdout[j], shp_bytes(&c->out[j])));
        un_kexec ex = {.prec = UN_PREC_F32, .seed = 7, .training = true};
        EXPECT_OK(ctx, un_kern_forward(ctx, &ex, c->op, p, ki, c->n_in, ko, c->n_out));
        EXPECT_OK(ctx, un_kern_backward(ctx, &ex, c->op, p, ki, c->n_in, ko, c->n_out, kdo, kdi));
        EXPECT_OK(ctx, un_backend_op_forward(ctx, be, c->op, p, gi, c->n_in, go, c->n_out, 7, NULL,
                                             NULL));
        EXPECT_OK(ctx, un_backend_op_backward(ctx, be, c->op, p, gi, c->n_in, go, c->n_out, gdo,
                                              gdi, 7, NULL, NULL));
        EXPECT_OK(ctx, un_backend_synchronize(ctx, be));
        for (int j = 0; j < c->n_out; j++) {
            int64_t n = shp_numel(&c->out[j]);
            float *got = malloc((size_t)n * sizeof *got);
            EXPECT_OK(ctx, un_backend_read(ctx, be, got, out_dev[j], (size_t)n * sizeof *got));
            EXPECT_TRUE(same(got, hout[j], n, "forward", c->name));
            free(got);
        }
        for (int i = 0; i < c->n_in; i++) {
            if (!din_dev[i])
                continue;
            int64_t n = shp_numel(&c->in[i]);
            float *got = malloc((size_t)n * sizeof *got);
            EXPECT_OK(ctx, un_backend_read(ctx, be, got, din_dev[i], (size_t)n * sizeof *got));
            EXPECT_TRUE(same(got, hdin[i], n, "backward", c->name));
            free(got);
        }
        EXPECT_OK(ctx, un_backend_synchronize(ctx, be));
    }
    for (int i = 0; i < MAXT; i++) {
        free(hin[i]), free(hout[i]), free(hdout[i]), free(hdin[i]);
        un_backend_release(be, in_dev[i]), un_backend_release(be, out_dev[i]);
        un_backend_release(be, dout_dev[i]), un_backend_release(be, din_dev[i]);
    }
}

static void test_cuda_ops(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    const char *why = NULL;
    size_t n = sizeof CASES / sizeof CASES[0];
    if (un_backend_cuda_devices(&why) == 0) {
        un_backend *be = NULL;
        /* the constructor still answers, with one line, and makes nothing */
        EXPECT_EQ(un_backend_cuda_new(ctx, UN_PREC_F32, 0, &be), UN_ERR_UNAVAILABLE);
        EXPECT_TRUE(be == NULL && strncmp(un_ctx_errmsg(ctx), "cuda backend: ", 14) == 0);
        for (size_t k = 0; k < n; k++)
            printf("  cuda %s: skipped (%s)\n", CASES[k].name, why);
        un_ctx_free(ctx);
        return;
    }
    un_backend *be = NULL;
    EXPECT_EQ(un_backend_cuda_new(ctx, UN_PREC_F64, 0, &be), UN_ERR_UNAVAILABLE);
    EXPECT_OK(ctx, un_backend_cuda_new(ctx, UN_PREC_F32, 0, &be));
    if (be) {
        EXPECT_EQ(un_backend_kind(be), UN_DEV_CUDA);
        EXPECT_TRUE(!un_backend_host_visible(be));
        for (size_t k = 0; k < n; k++) {
            EXPECT_TRUE(un_backend_supports_op(be, CASES[k].op));
            int before = test__failed;
            run_case(ctx, be, &CASES[k]);
            printf("  cuda %s: %s\n", CASES[k].name, test__failed == before ? "ok" : "FAILED");
        }
        /* a bad embedding index is one error line, not a device fault */
        int64_t ids[2] = {3, 25};
        void *id_dev = NULL, *tab_dev = NULL, *y_dev = NULL;
        EXPECT_OK(ctx, un_backend_alloc(ctx, be, sizeof ids, &id_dev));
        EXPECT_OK(ctx, un_backend_alloc(ctx, be, 20 * 4 * sizeof(float), &tab_dev));
        EXPECT_OK(ctx, un_backend_alloc(ctx, be, 2 * 4 * sizeof(float), &y_dev));
        if (id_dev && tab_dev && y_dev) {
            EXPECT_OK(ctx, un_backend_write(ctx, be, id_dev, ids, sizeof ids));
            un_param p[UN_MAX_PARAMS] = {{-1, {0}}};
            un_kt in[2] = {{UN_DT_INT, 2, {2, 1}, id_dev}, {UN_DT_FLOAT, 2, {20, 4}, tab_dev}};
            un_kt y = {UN_DT_FLOAT, 2, {2, 4}, y_dev};
            un_ctx_clear(ctx); /* the float64 refusal above is the context's first error */
            EXPECT_EQ(
                un_backend_op_forward(ctx, be, UN_OP_EMBEDDING, p, in, 2, &y, 1, 0, NULL, NULL),
                UN_ERR_INVALID);
            test__check(strstr(un_ctx_errmsg(ctx), "index 25 at position 1") != NULL, TEST__AT,
                        "bad embedding index: got '%s'", un_ctx_errmsg(ctx));
            EXPECT_OK(ctx, un_backend_synchronize(ctx, be));
        }
        un_backend_release(be, id_dev), un_backend_release(be, tab_dev);
        un_backend_release(be, y_dev);
        un_backend_free(be);
    }
    un_ctx_free(ctx);
}

/* The executor's exchanges on NCCL: with a GPU per rank, data parallel training on 2 GPUs carries
 * every exchange on the NCCL plane and gives the CPU backend's losses (1e-3); skipped (one line)
 * without 2 GPUs and NCCL. */
static void test_nccl_training(void) {
    const char *why = NULL;
    int gpus = un_backend_cuda_devices(&why);
    if (gpus < 2 || !un_comm_nccl_ready(1, &why)) {
        printf("  cuda nccl training: skipped (%s)\n",
               gpus < 2 && gpus > 0 ? "fewer than 2 GPUs" : why);
        return;
    }
    un_train_result r[2];
    static const char *const backends[2] = {"cpu", "cuda"};
    char err[512];
    for (int b = 0; b < 2; b++)
        EXPECT_OK(NULL, test_train_on(backends[b], "mlp", "data", 2, 5, NULL, NULL, &r[b], err,
                                      sizeof err));
    if (r[0].losses && r[1].losses) {
        for (int s = 0; s < 5; s++)
            EXPECT_NEAR(r[1].losses[s], r[0].losses[s], 1e-3 * (1 + fabs(r[0].losses[s])));
        for (int d = 0; d < 2; d++)
            EXPECT_TRUE(r[1].dev[d].plane_exchanges > 0 && r[1].dev[d].staged_exchanges == 0);
    }
    un_train_result_deinit(&r[0]);
    un_train_result_deinit(&r[1]);
}

/* The profiler on CUDA: measured costs of every op of the tiny transformer stored under the GPU's
 * device kind; with no GPU, one error line and nothing stored. */
static void test_profile_cuda(void) {
    un_spec *spec = NULL;
    if (!test_spec_load(&spec))
        return;
    char dir[64];
    if (!test_tmpdir_make(dir, sizeof dir, "/tmp/un_cuda_XXXXXX")) {
        un_spec_free(spec);
        return;
    }
    char path[128];
    snprintf(path, sizeof path, "%s/costs.db", dir);
    un_ctx *ctx = un_ctx_new(NULL);
    un_rulesdb *db = NULL;
    un_model m;
    memset(&m, 0, sizeof m);
    EXPECT_OK(ctx, un_rulesdb_open(ctx, path, spec, UN_RULESDB_CREATE, &db));
    EXPECT_OK(ctx, un_zoo_build(ctx, spec, "transformer", true, 4, &m));
    if (db && m.graph) {
        un_profile_params pp = un_profile_params_default();
        pp.device = "gpu-test";
        pp.cuda_device = 0;
        pp.min_reps = 2;
        pp.min_seconds = 0;
        int64_t n = 0;
        un_status st = un_profile_graph(ctx, db, m.graph, &pp, NULL, &n);
        if (un_backend_cuda_devices(NULL) == 0) {
            printf("  cuda profile: skipped (%s)\n", un_ctx_errmsg(ctx));
            EXPECT_EQ(st, UN_ERR_UNAVAILABLE);
            EXPECT_EQ(n, 0);
        } else {
            EXPECT_OK(ctx, st);
            EXPECT_TRUE(n > 0);
        }
    }
    un_model_deinit(&m);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
    EXPECT_TRUE(test_tmpdir_remove(dir));
    un_spec_free(spec);
}

int main(void) {
    static const test_case cases[] = {
        {"lazy_libraries", test_lazy_libraries}, /* first: before anything loads a plugin */
        {"cuda_ops", test_cuda_ops},
        {"nccl", test_nccl},
        {"nccl_training", test_nccl_training},
        {"profile_cuda", test_profile_cuda},
    };
    return TEST_RUN_ALL(cases);
}
