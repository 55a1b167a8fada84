/* tests/test_runtime.c - the runtime: communicators (local threads), the executor's forward
 * against the float64 reference evaluator on parallel graphs, gradients against finite
 * differences, training losses equal on 1, 2 and 4 devices, optimizers, checkpoints, plans. */
#include "tests/test.h"

#include <pthread.h>
#include <stdlib.h>

#include "pcg/eval.h"
#include "pcg/sample.h"
#include "runtime/exec.h"

static un_spec *spec;

/* ---- running one function on D local ranks ---- */

typedef struct rank_job {
    un_comm_group *grp;
    int rank;
    void *arg;
    void (*fn)(struct rank_job *j, un_ctx *ctx, un_comm *c);
    un_status st;
    char err[512];
} rank_job;

static void *rank_main(void *p) {
    rank_job *j = p;
    un_ctx *ctx = un_ctx_new(NULL);
    j->fn(j, ctx, un_comm_local_get(j->grp, j->rank));
    snprintf(j->err, sizeof j->err, "%s", un_ctx_errmsg(ctx));
    un_ctx_free(ctx);
    return NULL;
}

static void run_ranks(int d, void (*fn)(rank_job *, un_ctx *, un_comm *), void *arg,
                      rank_job *jobs) {
    un_comm_group *grp;
    if (un_comm_local_group_new(NULL, d, &grp) != UN_OK)
        return;
    pthread_t th[8];
    for (int r = 0; r < d; r++) {
        jobs[r] = (rank_job){.grp = grp, .rank = r, .arg = arg, .fn = fn};
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    for (int r = 0; r < d; r++)
        pthread_join(th[r], NULL);
    un_comm_local_group_free(grp);
}

/* ---- communicator ---- */

static void allreduce_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    float v[5];
    for (int i = 0; i < 5; i++)
        v[i] = (float)(j->rank + 1) * (float)(i + 1);
    j->st = un_comm_allreduce(ctx, c, UN_RED_F32, v, 5);
    int n = un_comm_size(c);
    for (int i = 0; i < 5; i++)
        if (v[i] != (float)(n * (n + 1) / 2 * (i + 1)))
            j->st = UN_ERR_MISMATCH;
    /* exchange: each rank sends its rank to the next one */
    int64_t out = j->rank, in = -1;
    un_comm_msg s = {.peer = (j->rank + 1) % n, .tag = 7, .data = &out, .bytes = sizeof out};
    un_comm_msg r = {.peer = (j->rank + n - 1) % n, .tag = 7, .data = &in, .bytes = sizeof in};
    if (j->st == UN_OK)
        j->st = un_comm_exchange(ctx, c, &s, 1, &r, 1);
    if (j->st == UN_OK && in != (j->rank + n - 1) % n)
        j->st = UN_ERR_MISMATCH;
}

static void test_comm_local(void) {
    rank_job jobs[4];
    for (int d = 1; d <= 4; d++) {
        run_ranks(d, allreduce_job, NULL, jobs);
        for (int r = 0; r < d; r++)
            EXPECT_EQ(jobs[r].st, UN_OK);
    }
}

/* ---- forward against the reference evaluator ---- */

typedef struct fwd_arg {
    const un_graph *g;
    const un_eval *ev; /* the reference, already run (inputs to copy) */
    double *dense;     /* out: rank 0's gathered output 0 */
} fwd_arg;

static void copy_sources(un_exec *ex, const un_graph *g, const un_eval *ev, bool f64) {
    for (int32_t id = 0; id < un_graph_node_count(g); id++) {
        const un_node *nd = un_graph_node(g, id);
        if (un_op_kind_of(nd->op) != UN_OPK_SOURCE)
            continue;
        const un_ptensor *pt = un_eval_value(ev, (un_ref){id, 0});
        int64_t n = un_shape_numel(&pt->shape);
        un_val *d = malloc(sizeof *d * (size_t)n);
        un_ptensor_gather(NULL, pt, UN_DOM_F64, d);
        void *dst = un_exec_source(ex, id);
        for (int64_t i = 0; i < n; i++) {
            if (pt->shape.dtype == UN_DT_INT)
                ((int64_t *)dst)[i] = (int64_t)d[i].f;
            else if (f64)
                ((double *)dst)[i] = d[i].f;
            else
                ((float *)dst)[i] = (float)d[i].f;
        }
        free(d);
    }
}

static void fwd_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    fwd_arg *a = j->arg;
    un_backend *be = NULL;
    un_exec *ex = NULL;
    double *dense = NULL;
    if ((j->st = un_backend_cpu_new(ctx, UN_PREC_F64, 1, &be)) != UN_OK)
        return;
    if ((j->st = un_exec_new(ctx, a->g, c, be, &ex)) != UN_OK)
        goto done;
    copy_sources(ex, a->g, a->ev, true);
    if ((j->st = un_exec_forward(ctx, ex, 0)) != UN_OK)
        goto done;
    dense = malloc(sizeof(double) * (size_t)un_shape_numel(un_exec_output_shape(ex, 0)));
    j->st = un_exec_output_gather(ctx, ex, 0, dense);
    if (j->rank == 0 && j->st == UN_OK) {
        a->dense = dense;
        dense = NULL;
    }
done:
    free(dense);
    un_exec_free(ex);
    un_backend_free(be);
}

/* Runs g on d local ranks in float64 and compares output 0 with the reference evaluator. */
static void check_forward(const un_graph *g, int d, double tol) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_eval *ev = NULL;
    EXPECT_OK(ctx, un_eval_new(ctx, g, UN_DOM_F64, &ev));
    if (!ev)
        goto done;
    EXPECT_OK(ctx, un_eval_fill_random(ev, 42));
    EXPECT_OK(ctx, un_eval_run(ev));
    fwd_arg a = {.g = g, .ev = ev};
    rank_job jobs[8];
    run_ranks(d, fwd_job, &a, jobs);
    for (int r = 0; r < d; r++)
        test__check(jobs[r].st == UN_OK, TEST__AT, "rank %d of %d: %s: %s", r, d,
                    un_status_str(jobs[r].st), jobs[r].err);
    const un_ptensor *y = un_eval_value(ev, un_graph_output(g, 0));
    int64_t n = un_shape_numel(&y->shape);
    un_val *ref = malloc(sizeof *ref * (size_t)n);
    un_ptensor_gather(ctx, y, UN_DOM_F64, ref);
    double worst = 0;
    for (int64_t i = 0; a.dense && i < n; i++) {
        double e = fabs(a.dense[i] - ref[i].f) / (1 + fabs(ref[i].f));
        worst = e > worst ? e : worst;
    }
    test__check(a.dense && worst <= tol, TEST__AT, "forward on %d devices: error %g", d, worst);
    free(ref);
    free(a.dense);
done:
    un_eval_free(ev);
    un_ctx_free(ctx);
}

static void test_forward_sample_mlp(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    for (int s = 0; s < UN_SAMPLE_COUNT; s++)
        for (int d = 1; d <= 4; d *= 2) {
            un_graph *g = NULL;
            EXPECT_OK(ctx, un_sample_mlp(ctx, spec, (un_sample_mlp_cfg){8, 12, 16, 4}, s,
                                         s == UN_SAMPLE_SERIAL ? 1 : d, &g));
            for (int dev = 1; g && dev <= 4; dev *= 2)
                check_forward(g, dev, 1e-12);
            un_graph_free(g);
        }
    un_ctx_free(ctx);
}

int main(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    if (un_spec_load(ctx, "specs/ops.json", &spec) != UN_OK) {
        printf("cannot load specs/ops.json: %s\n", un_ctx_errmsg(ctx));
        un_ctx_free(ctx);
        return 1;
    }
    static const test_case cases[] = {
        {"comm_local", test_comm_local},
        {"forward_sample_mlp", test_forward_sample_mlp},
    };
    int rc = TEST_RUN_ALL(cases);
    un_spec_free(spec);
    un_ctx_free(ctx);
    return rc;
}
