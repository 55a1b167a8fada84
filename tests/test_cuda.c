/* tests/test_cuda.c - what of the CUDA backend and the NCCL data plane can be checked on every
 * machine: with no GPU (or a build without CUDA/NCCL) the constructors answer
 * UN_ERR_UNAVAILABLE with one line naming why, on every rank of a group, and nothing is left
 * allocated; with a GPU the NCCL communicator comes up over local thread ranks. The kernels'
 * logic is tested on the CPU by test_cuda_index.c. */
#include "runtime/comm_nccl.h"

#include <pthread.h>

#include "tests/test.h"

enum { MAX_RANKS = 4 };

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

int main(void) {
    static const test_case cases[] = {
        {"nccl", test_nccl},
    };
    return TEST_RUN_ALL(cases);
}
