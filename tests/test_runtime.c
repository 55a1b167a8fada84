/* tests/test_runtime.c - the runtime: communicators (local threads), the executor's forward
 * against the float64 reference evaluator on parallel graphs, gradients against finite
 * differences, training losses equal on 1, 2 and 4 devices, optimizers, checkpoints, plans. */
#include "tests/test.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "pcg/eval.h"
#include "pcg/sample.h"
#include "runtime/checkpoint.h"
#include "runtime/exec.h"
#include "runtime/optim.h"
#include "runtime/pool.h"
#include "runtime/strategy.h"
#include "runtime/train.h"
#include "runtime/zoo.h"

static un_spec *spec;

/* A file name of this process (parallel test runs must not share files). */
static void tmp_path(char *buf, size_t n, const char *suffix) {
    snprintf(buf, n, "/tmp/unity_test_runtime_%ld.%s", (long)getpid(), suffix);
}

/* ---- running one function on D local ranks ---- */

typedef struct rank_job {
    un_comm_group *grp;
    int rank;
    void *arg;
    void (*fn)(struct rank_job *j, un_ctx *ctx, un_comm *c);
    un_status st;
    char err[512];
    int64_t sent; /* bytes of piece transfers this rank sent */
} rank_job;

static int64_t last_sent; /* over all ranks of the last run_grads */

/* Ranks wait at this gate until every thread exists; if one could not be started, all return
 * without running (a rank alone would wait in a collective for ever). */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_state; /* 0 closed, 1 go, 2 abandon */

static void *rank_main(void *p) {
    rank_job *j = p;
    pthread_mutex_lock(&gate_mu);
    while (gate_state == 0)
        pthread_cond_wait(&gate_cv, &gate_mu);
    bool go = gate_state == 1;
    pthread_mutex_unlock(&gate_mu);
    if (!go)
        return NULL; /* keeps the "not run" status run_ranks gave it */
    un_ctx *ctx = un_ctx_new(NULL);
    j->st = UN_OK;
    j->fn(j, ctx, un_comm_local_get(j->grp, j->rank));
    snprintf(j->err, sizeof j->err, "%s", un_ctx_errmsg(ctx));
    un_ctx_free(ctx);
    return NULL;
}

/* Runs fn on d ranks, one thread each. Every jobs[0..d) has its status filled on return: a rank
 * that did not run (no group, no thread) has UN_ERR_INVALID and says why in err. */
static void run_ranks(int d, void (*fn)(rank_job *, un_ctx *, un_comm *), void *arg,
                      rank_job *jobs) {
    for (int r = 0; r < d; r++)
        jobs[r] = (rank_job){.rank = r, .arg = arg, .fn = fn, .st = UN_ERR_INVALID};
    un_comm_group *grp;
    if (un_comm_local_group_new(NULL, d, &grp) != UN_OK) {
        for (int r = 0; r < d; r++)
            snprintf(jobs[r].err, sizeof jobs[r].err, "not run: no local group of %d", d);
        return;
    }
    pthread_t th[8];
    int started = 0;
    gate_state = 0;
    for (int r = 0; r < d; r++) {
        jobs[r].grp = grp;
        snprintf(jobs[r].err, sizeof jobs[r].err, "not run: a rank's thread could not start");
    }
    for (; started < d && started < 8; started++)
        if (pthread_create(&th[started], NULL, rank_main, &jobs[started]) != 0)
            break;
    pthread_mutex_lock(&gate_mu);
    gate_state = started == d ? 1 : 2;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
    for (int r = 0; r < started; r++)
        pthread_join(th[r], NULL);
    un_comm_local_group_free(grp);
}

/* run_ranks with the waits' polling forced to poll_ns (un_pool_spin_force), whatever the load. */
static void run_ranks_polled(int64_t poll_ns, int d, void (*fn)(rank_job *, un_ctx *, un_comm *),
                             void *arg, rank_job *jobs) {
    un_pool_spin_force(poll_ns);
    run_ranks(d, fn, arg, jobs);
    un_pool_spin_force(-1);
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
    /* past a small all-reduce's size (comm_local.c EAGER_BYTES): the chunked one */
    enum { BIG = 20000 };
    double *big = un_xcalloc(BIG, sizeof *big);
    for (int i = 0; i < BIG; i++)
        big[i] = (double)(j->rank + 1) * i;
    if (j->st == UN_OK)
        j->st = un_comm_allreduce(ctx, c, UN_RED_F64, big, BIG);
    for (int i = 0; i < BIG && j->st == UN_OK; i++)
        if (big[i] != (double)(n * (n + 1) / 2) * i)
            j->st = UN_ERR_MISMATCH;
    free(big);
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

/* Exchanges are point to point (h26): ranks 0 and 1 swap values 200 times (tags reused, each
 * call pairs with the other side's call of the same number) while ranks 2 and 3 swap among
 * themselves a different number of times; no rank waits for the other pair (with the old
 * barrier-based exchange this deadlocked); a self-send still works. */
static void pairs_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    int me = j->rank, peer = me ^ 1, rounds = me < 2 ? 200 : 3;
    j->st = UN_OK;
    for (int k = 0; k < rounds && j->st == UN_OK; k++) {
        int64_t out[2] = {me * 1000 + k, -k}, in[2] = {-1, -1}, self = -1;
        un_comm_msg s[2] = {{.peer = peer, .tag = 1, .data = out, .bytes = sizeof out},
                            {.peer = me, .tag = 2, .data = &out[1], .bytes = sizeof out[1]}};
        un_comm_msg r[2] = {{.peer = peer, .tag = 1, .data = in, .bytes = sizeof in},
                            {.peer = me, .tag = 2, .data = &self, .bytes = sizeof self}};
        j->st = un_comm_exchange(ctx, c, s, 2, r, 2);
        if (j->st == UN_OK && (in[0] != peer * 1000 + k || in[1] != -k || self != -k))
            j->st = UN_ERR_MISMATCH;
    }
}

static void test_comm_pairs(void) {
    rank_job jobs[4];
    run_ranks(4, pairs_job, NULL, jobs);
    for (int r = 0; r < 4; r++)
        EXPECT_EQ(jobs[r].st, UN_OK);
}

/* Add receives (comm.h): rank 0 adds every other rank's vectors into its own as it receives
 * them: the bits of summing in its receive list's order (here descending ranks; on large bases,
 * each add rounding; float32 and float64; a length that is not a multiple of the vector width);
 * the senders' buffers stay as they were. */
static void add_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    enum { N = 37 };
    int n = un_comm_size(c), me = j->rank;
    float f[N];
    double d[N];
    for (int i = 0; i < N; i++) {
        f[i] = me == 0 ? 1e8f : (float)(me * (i + 1));
        d[i] = me == 0 ? 1e17 : 0.5 * me + i;
    }
    j->st = UN_OK;
    if (me != 0) {
        un_comm_msg s[2] = {{.peer = 0, .tag = 0, .data = f, .bytes = sizeof f},
                            {.peer = 0, .tag = 1, .data = d, .bytes = sizeof d}};
        j->st = un_comm_exchange(ctx, c, s, 2, NULL, 0);
        for (int i = 0; i < N && j->st == UN_OK; i++)
            if (f[i] != (float)(me * (i + 1)) || d[i] != 0.5 * me + i)
                j->st = UN_ERR_MISMATCH;
        return;
    }
    un_comm_msg r[8];
    int nr = 0;
    for (int p = n - 1; p >= 1; p--) {
        r[nr++] = (un_comm_msg){
            .peer = p, .tag = 0, .data = f, .bytes = sizeof f, .add = true, .type = UN_RED_F32};
        r[nr++] = (un_comm_msg){
            .peer = p, .tag = 1, .data = d, .bytes = sizeof d, .add = true, .type = UN_RED_F64};
    }
    j->st = un_comm_exchange(ctx, c, NULL, 0, r, nr);
    for (int i = 0; i < N && j->st == UN_OK; i++) {
        float ef = 1e8f;
        double ed = 1e17;
        for (int p = n - 1; p >= 1; p--) {
            ef += (float)(p * (i + 1));
            ed += 0.5 * p + i;
        }
        if (f[i] != ef || d[i] != ed)
            j->st = UN_ERR_MISMATCH;
    }
}

/* Spin-then-block waits lose no wake-up (runtime/pool.h, comm_local.c): 4 ranks run 2,000
 * rounds, each a barrier or an exchange with the next rank (chosen by the round, so every rank
 * makes the same call), polling for at most 50 us, 2 us, not at all and as the rule says (the
 * first two forced, whatever the load), each rank idle before it for a random time: none, 0-100 us
 * busy (around the longest poll, 50 us), or a 60-260 us sleep, so that waits end while polling,
 * asleep, and as the poll gives up. A watchdog (rank 0's thread) aborts the group when the rounds
 * have not finished within 60 s: a lost wake-up leaves a rank asleep for ever; the abort's
 * broadcast wakes it, and every rank fails. */
typedef struct wake_watch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int finished; /* ranks done with their rounds */
    int ranks;
    bool fired;
    un_comm *comm;
} wake_watch;

static void *wake_watchdog(void *arg) {
    wake_watch *w = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&w->mu);
    while (w->finished < w->ranks)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0 && w->finished < w->ranks) {
            w->fired = true;
            un_comm_abort(w->comm);
            break;
        }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void busy_us(double us) {
    double end = now_us() + us;
    while (now_us() < end)
        ;
}

static void wake_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    wake_watch *w = j->arg;
    if (j->rank == 0) {
        pthread_mutex_lock(&w->mu);
        w->comm = c;
        pthread_mutex_unlock(&w->mu);
    }
    pthread_t dog;
    bool dog_on = j->rank == 0 && pthread_create(&dog, NULL, wake_watchdog, w) == 0;
    int n = un_comm_size(c), me = j->rank;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(me + 1);
    j->st = j->rank == 0 && !dog_on ? UN_ERR_INVALID : UN_OK;
    for (int k = 0; k < 2000 && j->st == UN_OK; k++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        int idle = (int)(rng % 8);
        if (idle >= 6)
            usleep((useconds_t)(60 + rng % 200));
        else if (idle >= 2) /* busy for 0-100 us: around the longest poll (50 us) */
            busy_us((double)(rng >> 40 & 1023) / 10.24);
        if (k % 3 == 0) {
            j->st = un_comm_barrier(ctx, c);
            continue;
        }
        int64_t out = me * 100000 + k, in = -1;
        un_comm_msg s = {.peer = (me + 1) % n, .tag = k % 5, .data = &out, .bytes = sizeof out};
        un_comm_msg r = {.peer = (me + n - 1) % n, .tag = k % 5, .data = &in, .bytes = sizeof in};
        j->st = un_comm_exchange(ctx, c, &s, 1, &r, 1);
        if (j->st == UN_OK && in != ((me + n - 1) % n) * 100000 + k)
            j->st = UN_ERR_MISMATCH;
    }
    pthread_mutex_lock(&w->mu);
    w->finished++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (dog_on)
        pthread_join(dog, NULL);
}

static void test_comm_wakeups(void) {
    rank_job jobs[4];
    static const int64_t polls[] = {50000, 2000, 0, -1}; /* ns; -1: the rule (cores, load) */
    for (int d = 2; d <= 4; d += 2)
        for (size_t p = 0; p < sizeof polls / sizeof *polls; p++) {
            wake_watch w = {
                .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .ranks = d};
            un_pool_spin_force(polls[p]);
            run_ranks(d, wake_job, &w, jobs);
            test__check(!w.fired, TEST__AT, "%d ranks, poll %lld ns: not finished within 60 s", d,
                        (long long)polls[p]);
            for (int r = 0; r < d; r++)
                test__check(jobs[r].st == UN_OK, TEST__AT, "%d ranks, poll %lld ns, rank %d: %s", d,
                            (long long)polls[p], r, jobs[r].err);
        }
    un_pool_spin_force(-1);
}

/* A small message's sender goes on before its receiver has called (comm_local.c, eager
 * messages: no wait for a wake-up on the other side): rank 0 sends 8 bytes to rank 1, then
 * raises a flag; rank 1 waits up to 10 s for the flag before it receives. With a sender that
 * waits until its message is taken, the flag rises only after the receive (the test fails, 10 s
 * later). Then a message past the eager size, both ways, still arrives whole. */
static _Atomic int eager_flag;

static void eager_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    int64_t v = 42, in = -1;
    bool late = false; /* rank 1: the flag rose only after the receive (checked at the end, so
                          that both ranks still make the second exchange) */
    if (j->rank == 0) {
        un_comm_msg s = {.peer = 1, .tag = 3, .data = &v, .bytes = sizeof v};
        j->st = un_comm_exchange(ctx, c, &s, 1, NULL, 0);
        v = -7; /* the message went as a copy: its buffer is free */
        atomic_store(&eager_flag, 1);
    } else {
        double t0 = now_us();
        while (!atomic_load(&eager_flag) && now_us() - t0 < 10e6)
            usleep(100);
        un_comm_msg r = {.peer = 0, .tag = 3, .data = &in, .bytes = sizeof in};
        j->st = un_comm_exchange(ctx, c, NULL, 0, &r, 1);
        late = !atomic_load(&eager_flag);
        if (j->st == UN_OK && in != 42)
            j->st = UN_ERR_MISMATCH;
    }
    enum { BIG = 40000 }; /* 160 KB of int32 */
    int32_t *out = un_xcalloc(BIG, sizeof *out), *got = un_xcalloc(BIG, sizeof *got);
    for (int i = 0; i < BIG; i++)
        out[i] = j->rank * BIG + i;
    un_comm_msg s = {.peer = 1 - j->rank, .tag = 4, .data = out, .bytes = BIG * sizeof *out};
    un_comm_msg r = {.peer = 1 - j->rank, .tag = 4, .data = got, .bytes = BIG * sizeof *got};
    if (j->st == UN_OK)
        j->st = un_comm_exchange(ctx, c, &s, 1, &r, 1);
    for (int i = 0; i < BIG && j->st == UN_OK; i++)
        if (got[i] != (1 - j->rank) * BIG + i)
            j->st = UN_ERR_MISMATCH;
    free(out);
    free(got);
    if (late && j->st == UN_OK)
        j->st = un_ctx_error(ctx, UN_ERR_MISMATCH, "the sender waited for the receive");
}

static void test_comm_eager(void) {
    rank_job jobs[2];
    atomic_store(&eager_flag, 0);
    run_ranks(2, eager_job, NULL, jobs);
    for (int r = 0; r < 2; r++)
        test__check(jobs[r].st == UN_OK, TEST__AT, "rank %d: %s %s", r, un_status_str(jobs[r].st),
                    jobs[r].err);
}

/* Eager blocks (comm_local.c): 300 rounds of one-way exchanges from rank 0 to rank 1, each of
 * 1-24 messages (more than the 16 the call keeps on the stack, sometimes) of 1 byte to 4 KiB
 * (sizes growing and shrinking, so a free block is reused, grown or added; past 64 KiB a call's
 * later messages go without a copy, and their sender waits for them to be read), rank 1 pausing
 * every 50 rounds so that rank 0 sends on with its blocks unread, and rank 0 overwriting its
 * buffer as soon as each call returns: every byte received is the one sent. */
static void eager_blocks_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    enum { ROUNDS = 300, MAXM = 24, MAXB = 4096, AHEAD = 3 };
    unsigned char *buf = un_xcalloc(MAXM, MAXB);
    un_comm_msg m[MAXM];
    j->st = UN_OK;
    for (int k = 0; k < ROUNDS + AHEAD && j->st == UN_OK; k++) {
        int round = j->rank == 0 ? k : k - AHEAD; /* the receiver lags */
        if (round < 0 || round >= ROUNDS)
            continue;
        if (j->rank == 1 && round % 50 == 0)
            usleep(2000); /* the sender runs ahead, its blocks unread */
        int nm = 1 + (round * 7) % MAXM;
        for (int t = 0; t < nm; t++) {
            size_t b = 1 + (size_t)((round * 131 + t * 977) % MAXB);
            m[t] = (un_comm_msg){
                .peer = 1 - j->rank, .tag = t, .data = buf + (size_t)t * MAXB, .bytes = b};
            for (size_t i = 0; i < b && j->rank == 0; i++)
                buf[(size_t)t * MAXB + i] = (unsigned char)(round + t + i);
        }
        j->st = j->rank == 0 ? un_comm_exchange(ctx, c, m, nm, NULL, 0)
                             : un_comm_exchange(ctx, c, NULL, 0, m, nm);
        for (int t = 0; t < nm && j->st == UN_OK; t++)
            for (size_t i = 0; i < m[t].bytes; i++) {
                unsigned char *x = buf + (size_t)t * MAXB + i;
                if (j->rank == 1 && *x != (unsigned char)(round + t + i)) {
                    j->st = un_ctx_error(ctx, UN_ERR_MISMATCH, "round %d message %d byte %zu",
                                         round, t, i);
                    un_comm_abort(c); /* the sender may be waiting for a later receive */
                    break;
                }
                *x = 0xee; /* the sender's buffer is free again when the call returns */
            }
    }
    free(buf);
}

static void test_comm_eager_blocks(void) {
    rank_job jobs[2];
    run_ranks(2, eager_blocks_job, NULL, jobs);
    for (int r = 0; r < 2; r++)
        test__check(jobs[r].st == UN_OK, TEST__AT, "rank %d: %s %s", r, un_status_str(jobs[r].st),
                    jobs[r].err);
}

/* A small all-reduce meets once (comm_local.c): with polling off, the first rank to arrive at a
 * barrier sleeps once (the version moves only when the barrier completes), so 20 all-reduces of
 * one double, rank 1 arriving 1 ms late each time, sleep 20 times in all (a spurious wake-up may
 * add one); the three-barrier all-reduce slept 60 times. The meet trace (comm.h) holds each
 * call's arrival and release, in order, and counts what did not fit. */
static void small_allreduce_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    j->st = UN_OK;
    un_comm_trace_start(c, 40);
    for (int k = 0; k < 20 && j->st == UN_OK; k++) {
        if (j->rank == 1)
            usleep(1000);
        double v = j->rank + k;
        j->st = un_comm_allreduce(ctx, c, UN_RED_F64, &v, 1);
        if (j->st == UN_OK && v != 1 + 2 * k)
            j->st = UN_ERR_MISMATCH;
    }
    un_comm_mark(c, "over");
    int64_t n, dropped;
    const un_comm_event *ev = un_comm_trace(c, &n, &dropped);
    for (int64_t i = 0; i < n && j->st == UN_OK; i++)
        if (strcmp(ev[i].what, i % 2 ? "release" : "arrive") != 0 || (i && ev[i].t < ev[i - 1].t))
            j->st = UN_ERR_MISMATCH;
    if (n != 40 || dropped != 1)
        j->st = UN_ERR_MISMATCH;
    ((int64_t *)j->arg)[j->rank] = un_comm_stats_get(c).sleeps;
}

static void test_comm_small_allreduce(void) {
    rank_job jobs[2];
    int64_t sleeps[2] = {0};
    run_ranks_polled(0, 2, small_allreduce_job, sleeps, jobs);
    for (int r = 0; r < 2; r++)
        EXPECT_EQ(jobs[r].st, UN_OK);
    test__check(sleeps[0] + sleeps[1] <= 25, TEST__AT, "20 small all-reduces slept %lld times",
                (long long)(sleeps[0] + sleeps[1]));
}

/* A meet's lock hand-offs do not sleep (comm_local.c group_lock, group_unlock): 2 ranks polling
 * for up to 50 us (forced, whatever the load) run 2,000 rounds of what a small data-parallel step
 * does (an exchange of 7 small messages each way, as the gradient reduce-scatter and the weight
 * gather, then the loss's all-reduce of one double), in lockstep. With the lock taken without a
 * poll and the broadcast made under it, a rank that saw the other's change while polling could
 * find the lock still held and sleep on it: main's locking, counted the same way, slept on it
 * 4,680 times in 8,000 meets in one run of four, 0-15 times in the others (load 10); now 0 in
 * every run (a rank taken off its core while it holds the lock still makes the other sleep, hence
 * the margin). Now and then an exchange also carries two small messages of one tag and two past
 * the eager size of one tag (their sender waits until they are taken): each arrives in the order
 * sent. */
enum { LOCK_BIG = 20000 }; /* int32s: 80 KB, past comm_local.c's EAGER_BYTES */

static void lock_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    int me = j->rank;
    int32_t *big = un_xcalloc(4 * LOCK_BIG, sizeof *big), *bin = big + 2 * LOCK_BIG;
    for (int k = 0; k < 2000 && j->st == UN_OK; k++) {
        int64_t out[9][2], in[9][2];
        un_comm_msg s[11], r[11];
        /* tags 0-6; every 50th round also tag 7 twice, and two big messages of tag 9 */
        int m = k % 50 ? 7 : 9, n = k % 50 ? 7 : 11;
        for (int t = 0; t < m; t++) {
            out[t][0] = me * 1000000 + k * 10 + t, out[t][1] = -out[t][0];
            int tag = t < 7 ? t : 7;
            s[t] =
                (un_comm_msg){.peer = 1 - me, .tag = tag, .data = out[t], .bytes = sizeof out[t]};
            r[t] = (un_comm_msg){.peer = 1 - me, .tag = tag, .data = in[t], .bytes = sizeof in[t]};
        }
        for (int b = 0; b < n - m; b++) {
            big[b * LOCK_BIG + k % LOCK_BIG] = me * 1000000 + k * 10 + b;
            s[m + b] = (un_comm_msg){.peer = 1 - me,
                                     .tag = 9,
                                     .data = big + b * LOCK_BIG,
                                     .bytes = LOCK_BIG * sizeof *big};
            r[m + b] = (un_comm_msg){.peer = 1 - me,
                                     .tag = 9,
                                     .data = bin + b * LOCK_BIG,
                                     .bytes = LOCK_BIG * sizeof *bin};
        }
        j->st = un_comm_exchange(ctx, c, s, n, r, n);
        for (int t = 0; t < m && j->st == UN_OK; t++)
            if (in[t][0] != (1 - me) * 1000000 + k * 10 + t || in[t][1] != -in[t][0])
                j->st = UN_ERR_MISMATCH;
        for (int b = 0; b < n - m && j->st == UN_OK; b++)
            if (bin[b * LOCK_BIG + k % LOCK_BIG] != (1 - me) * 1000000 + k * 10 + b)
                j->st = UN_ERR_MISMATCH;
        double v = me + k;
        if (j->st == UN_OK)
            j->st = un_comm_allreduce(ctx, c, UN_RED_F64, &v, 1);
        if (j->st == UN_OK && v != 1 + 2 * k)
            j->st = UN_ERR_MISMATCH;
    }
    free(big);
    un_comm_stats cs = un_comm_stats_get(c);
    ((int64_t *)j->arg)[2 * me] = cs.meets;
    ((int64_t *)j->arg)[2 * me + 1] = cs.lock_sleeps;
}

static void test_comm_lock_polls(void) {
    rank_job jobs[2];
    int64_t n[4] = {0};
    run_ranks_polled(50000, 2, lock_job, n, jobs);
    for (int r = 0; r < 2; r++)
        test__check(jobs[r].st == UN_OK, TEST__AT, "rank %d: %s %s", r, un_status_str(jobs[r].st),
                    jobs[r].err);
    EXPECT_EQ(n[0] + n[2], 8000);
    test__check(n[1] + n[3] <= (n[0] + n[2]) / 20, TEST__AT,
                "%lld meets slept on the group's lock %lld times", (long long)(n[0] + n[2]),
                (long long)(n[1] + n[3]));
}

/* The waits' load rule (pool.h un_pool_spin_allowed): this process's own runnable threads are
 * not load. A 2-rank run on 2 cores has 3 runnable threads for its first ~0.13 s (the ranks and
 * OpenBLAS's worker spinning with sched_yield), so the old rule (runnable > cores: no polling)
 * kept polling off for the whole of a short run (an idle xdl tiny data x2 of 2,000 steps: 1.5
 * of its 3 meets a step slept). */
static atomic_int spinners_up;
static atomic_bool spinners_stop;

static void *spinner(void *arg) {
    (void)arg;
    atomic_fetch_add(&spinners_up, 1);
    while (!atomic_load(&spinners_stop))
        ;
    return NULL;
}

static void barriers_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    for (int i = 0; i < 200 && j->st == UN_OK; i++)
        j->st = un_comm_barrier(ctx, c);
    un_comm_stats cs = un_comm_stats_get(c);
    ((int64_t *)j->arg)[2 * j->rank] = cs.sleeps;
    ((int64_t *)j->arg)[2 * j->rank + 1] = cs.unpolled;
}

/* A scripted load for un_pool_load_fits: read k gives runnable[k] and own[k]. */
typedef struct load_script {
    const int *runnable, *own;
    int reads, owns; /* reads of each made so far */
} load_script;

static int script_runnable(void *arg) {
    load_script *s = arg;
    return s->runnable[s->reads++];
}

static int script_own(void *arg) {
    load_script *s = arg;
    return s->own[s->owns++];
}

static bool script_fits(int threads, int cores, int reads, const int *runnable, const int *own,
                        load_script *s) {
    *s = (load_script){runnable, own, 0, 0};
    un_pool_load_reader r = {script_runnable, script_own, s};
    return un_pool_load_fits(threads, cores, reads, &r);
}

static void test_spin_load_rule(void) {
    /* a sample: a rank counted running on the box, then asleep when the own count was read, or
     * another process's passing thread, in the first read only: the second read fits */
    load_script s;
    EXPECT_TRUE(script_fits(2, 2, 3, (int[]){3, 2, 9}, (int[]){2, 2, 9}, &s));
    EXPECT_EQ(s.reads, 2);
    EXPECT_TRUE(!script_fits(2, 2, 1, (int[]){3, 2}, (int[]){2, 2}, &s)); /* one read: no */
    /* load that stays: no after every read */
    EXPECT_TRUE(!script_fits(2, 2, 3, (int[]){4, 3, 4}, (int[]){2, 2, 2}, &s));
    EXPECT_EQ(s.reads, 3);
    /* the own count is read only where the box's count alone does not fit */
    EXPECT_TRUE(script_fits(1, 4, 3, (int[]){3}, (int[]){9}, &s));
    EXPECT_EQ(s.owns, 0);
    EXPECT_TRUE(!script_fits(3, 2, 3, (int[]){0}, (int[]){0}, &s)); /* larger than the cores */
    EXPECT_EQ(s.reads, 0);
    /* threads, cores, runnable, own: the 2 ranks alone, with OpenBLAS's spinner, with a third
     * own thread and one other, and with others beyond the free cores */
    EXPECT_TRUE(un_pool_spin_allowed(2, 2, 2, 2));
    EXPECT_TRUE(un_pool_spin_allowed(2, 2, 3, 3));
    EXPECT_TRUE(un_pool_spin_allowed(2, 4, 5, 3));  /* 2 others on the 2 free cores */
    EXPECT_TRUE(un_pool_spin_allowed(1, 2, 2, 1));  /* 1 other on the free core */
    EXPECT_TRUE(un_pool_spin_allowed(2, 2, 1, 2));  /* the counts are read apart */
    EXPECT_TRUE(!un_pool_spin_allowed(2, 2, 3, 2)); /* no free core for the other */
    EXPECT_TRUE(!un_pool_spin_allowed(2, 2, 4, 3));
    EXPECT_TRUE(!un_pool_spin_allowed(2, 4, 6, 3));
    EXPECT_TRUE(!un_pool_spin_allowed(3, 2, 3, 3)); /* a group larger than the cores */
    EXPECT_TRUE(!un_pool_spin_allowed(2, 2, 9, 0));
    /* --stats' unpolled: every sleep without a poll, none while polling is forced on */
    rank_job jobs[2];
    int64_t n[4] = {0};
    run_ranks_polled(0, 2, barriers_job, n, jobs);
    EXPECT_TRUE(n[0] + n[2] > 0);
    EXPECT_EQ(n[1] + n[3], n[0] + n[2]);
    run_ranks_polled(50000000, 2, barriers_job, n, jobs);
    EXPECT_EQ(n[1] + n[3], 0);
    for (int r = 0; r < 2; r++)
        EXPECT_EQ(jobs[r].st, UN_OK);
    if (access("/proc/self/task", R_OK) != 0)
        TEST_SKIP("no /proc/self/task: the own count reads it");
    /* the own count: this thread and two spinning ones are runnable (state R) */
    enum { S = 2 };
    pthread_t th[S];
    atomic_store(&spinners_up, 0);
    atomic_store(&spinners_stop, false);
    for (int i = 0; i < S; i++)
        UN_ASSERT(pthread_create(&th[i], NULL, spinner, NULL) == 0);
    while (atomic_load(&spinners_up) < S)
        sched_yield();
    int own = un_pool_own_runnable();
    atomic_store(&spinners_stop, true);
    for (int i = 0; i < S; i++)
        pthread_join(th[i], NULL);
    test__check(own >= S + 1, TEST__AT, "%d own runnable threads, not >= %d", own, S + 1);
}

/* This process's threads (the entries of /proc/self/task); -1 where it cannot be read. */
static int own_threads(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

int blas_thread_shutdown_(void) __attribute__((weak)); /* as runtime/backend_cpu.c */

/* ThreadSanitizer's runtime keeps a background thread of its own once the process has made a
 * thread (it shows in /proc/self/task beside the main one) */
#if defined(__SANITIZE_THREAD__)
enum { SANITIZER_THREADS = 1 };
#else
enum { SANITIZER_THREADS = 0 };
#endif

/* A one-thread CPU backend stops OpenBLAS's worker threads (which spin for ~0.1 s after they
 * start, beside the ranks), also after a two-thread backend started them again. */
static void test_blas_worker_stopped(void) {
    if (!blas_thread_shutdown_)
        TEST_SKIP("the BLAS library cannot stop its threads");
    if (own_threads() < 0)
        TEST_SKIP("no /proc/self/task");
    un_ctx *ctx = un_ctx_new(NULL);
    for (int k = 0; k < 2; k++) {
        un_backend *be = NULL;
        EXPECT_OK(ctx, un_backend_cpu_new(ctx, UN_PREC_F32, 1, &be));
        int n = own_threads();
        test__check(n >= 1 && n <= 1 + SANITIZER_THREADS, TEST__AT,
                    "%d threads with a one-thread CPU backend (round %d)", n, k);
        un_backend_free(be);
        EXPECT_OK(ctx, un_backend_cpu_new(ctx, UN_PREC_F32, 2, &be)); /* 2 BLAS threads */
        un_backend_free(be);
    }
    un_ctx_free(ctx);
}

static void test_comm_add(void) {
    rank_job jobs[4];
    for (int d = 2; d <= 4; d++) {
        run_ranks(d, add_job, NULL, jobs);
        for (int r = 0; r < d; r++)
            EXPECT_EQ(jobs[r].st, UN_OK);
    }
}

/* run_ranks fills every status even when the ranks cannot run: more ranks than it has threads
 * for (no rank runs, none waits for ever in a collective) and a group it cannot make. */
static void test_run_ranks_statuses(void) {
    rank_job jobs[9];
    memset(jobs, 0, sizeof jobs); /* 0 is UN_OK: a status left unfilled would read as success */
    run_ranks(9, allreduce_job, NULL, jobs);
    for (int r = 0; r < 9; r++)
        test__check(jobs[r].st != UN_OK && strstr(jobs[r].err, "not run"), TEST__AT,
                    "rank %d of 9: %s: %s", r, un_status_str(jobs[r].st), jobs[r].err);
    memset(jobs, 0, sizeof jobs);
    run_ranks(0, allreduce_job, NULL, jobs);
    run_ranks(1, allreduce_job, NULL, jobs);
    EXPECT_EQ(jobs[0].st, UN_OK);
}

/* ---- forward against the reference evaluator ---- */

typedef struct fwd_arg {
    const un_graph *g;
    const un_eval *ev; /* the reference, already run (inputs to copy) */
    double *dense;     /* out: rank 0's gathered output 0 */
} fwd_arg;

/* The reference's sources into the executor: inputs whole, weights cut into this rank's pieces. */
static void copy_sources(un_exec *ex, const un_graph *g, const un_eval *ev, bool f64) {
    size_t es = f64 ? sizeof(double) : sizeof(float);
    char *lw = calloc((size_t)un_exec_lparam_count(ex) + 1, es);
    for (int32_t id = 0; id < un_graph_node_count(g); id++) {
        const un_node *nd = un_graph_node(g, id);
        if (un_op_kind_of(nd->op) != UN_OPK_SOURCE)
            continue;
        const un_ptensor *pt = un_eval_value(ev, (un_ref){id, 0});
        int64_t n = un_shape_numel(&pt->shape);
        un_val *d = malloc(sizeof *d * (size_t)n);
        un_ptensor_gather(NULL, pt, UN_DOM_F64, d);
        void *dst = nd->op == UN_OP_WEIGHT ? lw + (size_t)un_exec_lparam_offset(ex, id) * es
                                           : un_exec_source(ex, id);
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
    EXPECT_OK(NULL, un_exec_params_scatter(NULL, ex, lw, un_exec_params(ex)));
    free(lw);
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

/* Every tiny zoo model, made data parallel for 2 devices, run on 2 ranks against the reference. */
static void test_forward_zoo_data(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    int n;
    const char *const *names = un_zoo_names(&n);
    for (int i = 0; i < n; i++) {
        un_model m;
        un_graph *dp = NULL;
        if (un_zoo_build(ctx, spec, names[i], true, 0, &m) != UN_OK) {
            EXPECT_OK(ctx, un_ctx_status(ctx));
            break;
        }
        EXPECT_OK(ctx, un_strategy_data(ctx, m.graph, 2, &dp));
        if (dp)
            check_forward(dp, 2, 1e-9);
        un_graph_free(dp);
        un_model_deinit(&m);
    }
    un_ctx_free(ctx);
}

/* ---- gradients ---- */

typedef struct grad_arg {
    const un_graph *g;
    const un_eval *ev;
    const double *r; /* d loss / d output (logical), loss = sum(out * r) */
    double *grads;   /* out: rank 0's parameter gradients */
    double loss;     /* out */
} grad_arg;

static void grad_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    grad_arg *a = j->arg;
    un_backend *be = NULL;
    un_exec *ex = NULL;
    if ((j->st = un_backend_cpu_new(ctx, UN_PREC_F64, 1, &be)) != UN_OK)
        return;
    if ((j->st = un_exec_new(ctx, a->g, c, be, &ex)) != UN_OK)
        goto done;
    copy_sources(ex, a->g, a->ev, true);
    if ((j->st = un_exec_forward(ctx, ex, 0)) != UN_OK)
        goto done;
    const un_shape *os = un_exec_output_shape(ex, 0);
    int np;
    const un_exec_piece *pc = un_exec_output_pieces(ex, 0, &np);
    double loss = 0;
    for (int k = 0; k < np; k++) {
        if (pc[k].copy != 0)
            continue;
        int64_t pn = 1;
        for (int d = 0; d < os->rank; d++)
            pn *= pc[k].dim[d];
        for (int64_t x = 0; x < pn; x++) {
            int64_t rest = x, gi = 0, co[UN_MAX_DIMS];
            for (int d = os->rank - 1; d >= 0; d--) {
                co[d] = pc[k].off[d] + rest % pc[k].dim[d];
                rest /= pc[k].dim[d];
            }
            for (int d = 0; d < os->rank; d++)
                gi = gi * os->dim[d] + co[d];
            loss += ((double *)pc[k].val)[x] * a->r[gi];
            ((double *)pc[k].grad)[x] = a->r[gi];
        }
    }
    if ((j->st = un_exec_backward(ctx, ex)) != UN_OK)
        goto done;
    if ((j->st = un_comm_allreduce(ctx, c, UN_RED_F64, &loss, 1)) != UN_OK)
        goto done;
    j->sent = un_exec_stats_get(ex)->sent;
    /* backward leaves each chunk's sum with its owner: complete every copy's gradient */
    if ((j->st = un_exec_allgather(ctx, ex, un_exec_param_grads(ex))) != UN_OK)
        goto done;
    double *grads =
        j->rank == 0 ? calloc((size_t)un_exec_lparam_count(ex) + 1, sizeof *grads) : NULL;
    if ((j->st = un_exec_params_gather(ctx, ex, un_exec_param_grads(ex), grads)) != UN_OK) {
        free(grads);
        goto done;
    }
    if (j->rank == 0) {
        a->grads = grads;
        a->loss = loss;
    }
done:
    un_exec_free(ex);
    un_backend_free(be);
}

/* Loss and parameter gradients of g on d ranks for the reference's random inputs and weights. */
static double *run_grads(const un_graph *g, const un_eval *ev, const double *r, int d,
                         double *loss) {
    grad_arg a = {.g = g, .ev = ev, .r = r};
    rank_job jobs[8];
    run_ranks(d, grad_job, &a, jobs);
    last_sent = 0;
    for (int k = 0; k < d; k++) {
        test__check(jobs[k].st == UN_OK, TEST__AT, "rank %d: %s", k, jobs[k].err);
        last_sent += jobs[k].sent;
    }
    *loss = a.loss;
    return a.grads;
}

/* Serial gradients against finite differences; every parallel version's against the serial. */
static void test_gradients(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_sample_mlp_cfg cfg = {8, 6, 8, 4};
    un_graph *gs = NULL;
    EXPECT_OK(ctx, un_sample_mlp(ctx, spec, cfg, UN_SAMPLE_SERIAL, 1, &gs));
    un_eval *ev = NULL;
    EXPECT_OK(ctx, un_eval_new(ctx, gs, UN_DOM_F64, &ev));
    if (!ev) {
        un_graph_free(gs);
        un_ctx_free(ctx);
        return;
    }
    un_eval_fill_random(ev, 7);
    un_eval_run(ev);
    double r[32];
    un_rng rng;
    un_rng_seed(&rng, 3);
    for (int i = 0; i < 32; i++)
        r[i] = 2 * un_rng_double(&rng) - 1;
    double loss;
    double *gref = run_grads(gs, ev, r, 1, &loss);
    /* finite differences through the reference evaluator */
    int32_t w1 = un_graph_find(gs, "w1");
    const un_ptensor *pw = un_eval_value(ev, (un_ref){w1, 0});
    double worst = 0;
    for (int x = 0; gref && x < 48; x += 5) {
        double save = pw->data[x].f, lp, lm;
        pw->data[x].f = save + 1e-6;
        un_eval_run(ev);
        free(run_grads(gs, ev, r, 1, &lp));
        pw->data[x].f = save - 1e-6;
        free(run_grads(gs, ev, r, 1, &lm));
        pw->data[x].f = save;
        double fd = (lp - lm) / 2e-6;
        worst = fmax(worst, fabs(fd - gref[x]) / (1 + fabs(fd)));
    }
    test__check(gref && worst < 1e-6, TEST__AT, "w1 gradient vs finite differences: %g", worst);
    for (int s = UN_SAMPLE_DATA; s < UN_SAMPLE_COUNT; s++)
        for (int d = 2; d <= 4; d *= 2) {
            un_graph *gp = NULL;
            EXPECT_OK(ctx, un_sample_mlp(ctx, spec, cfg, s, d, &gp));
            double lp;
            double *gg = gp ? run_grads(gp, ev, r, d, &lp) : NULL;
            double e = 0;
            for (int x = 0; gg && gref && x < 6 * 8 + 8 * 4; x++)
                e = fmax(e, fabs(gg[x] - gref[x]));
            test__check(gg && gref && e < 1e-12 && fabs(lp - loss) < 1e-12, TEST__AT,
                        "%s on %d devices: gradient error %g", un_sample_strategy_name(s), d, e);
            free(gg);
            un_graph_free(gp);
        }
    free(gref);
    un_eval_free(ev);
    un_graph_free(gs);
    un_ctx_free(ctx);
}

/* A plan whose pieces do not line up with the op's device tuples: the linear's weight pieces are
 * ordered (column block, copy) while its tuples run (batch block, column block), so pieces travel
 * between ranks before the op and gradients travel back after it. Forward and gradients must
 * still equal the serial graph's. */
static void test_piece_transfers(void) {
    static const char *serial =
        "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [8, 6]}},"
        " {\"name\": \"w\", \"op\": \"weight\", \"params\": {\"shape\": [6, 4]}},"
        " {\"name\": \"y\", \"op\": \"linear\", \"in\": [\"x\", \"w\"]}]}";
    static const char *crossed =
        "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [8, 6]}},"
        " {\"name\": \"w\", \"op\": \"weight\", \"params\": {\"shape\": [6, 4]}},"
        " {\"name\": \"xp\", \"op\": \"partition\", \"in\": [\"x\"], \"params\": {\"dim\": 0, "
        "\"degree\": 2}},"
        " {\"name\": \"xr\", \"op\": \"replicate\", \"in\": [\"xp\"], \"params\": {\"degree\": 2}},"
        " {\"name\": \"wr\", \"op\": \"replicate\", \"in\": [\"w\"], \"params\": {\"degree\": 2}},"
        " {\"name\": \"wp\", \"op\": \"partition\", \"in\": [\"wr\"], \"params\": {\"dim\": 1, "
        "\"degree\": 2}},"
        " {\"name\": \"yp\", \"op\": \"linear\", \"in\": [\"xr\", \"wp\"]},"
        " {\"name\": \"y1\", \"op\": \"combine\", \"in\": [\"yp\"], \"params\": {\"dim\": 1, "
        "\"degree\": 2}}]}";
    /* sources that already carry a layout (a split input, a weight in copies and partial sums) */
    static const char *laid_out =
        "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [8, 6], "
        "\"shard\": [2, 1]}},"
        " {\"name\": \"w\", \"op\": \"weight\", \"params\": {\"shape\": [6, 4], \"copy\": 2}},"
        " {\"name\": \"yp\", \"op\": \"linear\", \"in\": [\"x\", \"w\"]},"
        " {\"name\": \"y1\", \"op\": \"combine\", \"in\": [\"yp\"], \"params\": {\"dim\": 0, "
        "\"degree\": 2}}]}";
    static const char *sum_serial =
        "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [8, 4]}},"
        " {\"name\": \"w\", \"op\": \"weight\", \"params\": {\"shape\": [8, 4]}},"
        " {\"name\": \"y\", \"op\": \"ew_mul\", \"in\": [\"x\", \"w\"]}]}";
    static const char *sum_weight =
        "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [8, 4], "
        "\"copy\": 2}},"
        " {\"name\": \"w\", \"op\": \"weight\", \"params\": {\"shape\": [8, 4], \"sum\": 2}},"
        " {\"name\": \"yp\", \"op\": \"ew_mul\", \"in\": [\"x\", \"w\"]},"
        " {\"name\": \"y1\", \"op\": \"reduce\", \"in\": [\"yp\"], \"params\": {\"degree\": 2}}]}";
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *gs = NULL, *gc = NULL;
    EXPECT_OK(ctx, un_graph_from_json(ctx, spec, "serial", serial, strlen(serial), &gs));
    for (int v = 0; v < 2; v++) {
        un_graph *gv = NULL, *g0 = NULL;
        const char *txt = v ? sum_weight : laid_out, *txt0 = v ? sum_serial : serial;
        EXPECT_OK(ctx, un_graph_from_json(ctx, spec, "laid_out", txt, strlen(txt), &gv));
        EXPECT_OK(ctx, un_graph_from_json(ctx, spec, "serial", txt0, strlen(txt0), &g0));
        un_eval *e0 = NULL;
        if (gv && g0 && un_eval_new(ctx, g0, UN_DOM_F64, &e0) == UN_OK) {
            un_eval_fill_random(e0, 5);
            un_eval_run(e0);
            double r[32], l1, ld;
            for (int i = 0; i < 32; i++)
                r[i] = 0.05 * (i % 5) - 0.1;
            double *g1 = run_grads(g0, e0, r, 1, &l1);
            double *gd = run_grads(gv, e0, r, 2, &ld);
            double e = 0;
            for (int x = 0; g1 && gd && x < 24; x++)
                e = fmax(e, fabs(gd[x] - g1[x]));
            test__check(g1 && gd && e < 1e-12 && fabs(ld - l1) < 1e-12, TEST__AT,
                        "sources with a layout (%d): loss %g vs %g, gradient error %g", v, ld, l1,
                        e);
            free(g1);
            free(gd);
        }
        un_eval_free(e0);
        un_graph_free(gv);
        un_graph_free(g0);
    }
    EXPECT_OK(ctx, un_graph_from_json(ctx, spec, "crossed", crossed, strlen(crossed), &gc));
    un_eval *ev = NULL;
    if (gs && gc && un_eval_new(ctx, gs, UN_DOM_F64, &ev) == UN_OK) {
        un_eval_fill_random(ev, 11);
        un_eval_run(ev);
        for (int d = 2; d <= 4; d *= 2)
            check_forward(gc, d, 1e-12);
        double r[32], l1, ld;
        for (int i = 0; i < 32; i++)
            r[i] = 0.1 * (i % 7) - 0.3;
        double *g1 = run_grads(gs, ev, r, 1, &l1);
        for (int d = 2; d <= 4; d *= 2) {
            double *gd = run_grads(gc, ev, r, d, &ld);
            double e = 0;
            for (int x = 0; g1 && gd && x < 24; x++)
                e = fmax(e, fabs(gd[x] - g1[x]));
            test__check(g1 && gd && e < 1e-12 && fabs(ld - l1) < 1e-12, TEST__AT,
                        "crossed plan on %d devices: gradient error %g", d, e);
            test__check(last_sent > 0, TEST__AT, "crossed plan on %d devices: no piece moved",
                        d); /* the test must exercise transfers */
            free(gd);
        }
        free(g1);
    }
    un_eval_free(ev);
    un_graph_free(gs);
    un_graph_free(gc);
    un_ctx_free(ctx);
}

/* ---- training ---- */

static un_prec train_prec = UN_PREC_F32;

/* Options of the training tests: quiet, one thread, checkpoints as given. */
static un_train_opts test_opts(const char *model, int devices, int steps, const char *save,
                               const char *load) {
    un_train_opts o = un_train_opts_default();
    o.model = model;
    o.devices = devices;
    o.steps = steps;
    o.threads = 1;
    o.quiet = true;
    o.out = stdout;
    o.save = save;
    o.load = load;
    return o;
}

static un_train_result train_with(const un_train_opts *o, un_status *st) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_train_result r;
    *st = un_train_run(ctx, o, &r);
    if (*st != UN_OK)
        printf("    %s (%s) on %d devices: %s\n", o->model, o->strategy ? o->strategy : "default",
               o->devices, un_ctx_errmsg(ctx));
    un_ctx_free(ctx);
    return r;
}

static un_train_result train(const char *model, int devices, int steps, const char *opt,
                             const char *save, const char *load, un_status *st) {
    un_train_opts o = test_opts(model, devices, steps, save, load);
    o.tiny = true;
    o.optimizer = opt;
    o.prec = train_prec;
    return train_with(&o, st);
}

/* Data parallelism on 2 and 4 local devices gives the single device's losses, every tiny model:
 * in float64 to 1e-9 (the same function, up to rounding), in float32 to 1e-4. The two conv nets
 * with batch norm at batch 8 amplify float32 rounding (a different summation order of the weight
 * gradients) to ~2e-4 after 20 steps, so they get 1e-3 in float32; float64 shows they agree. */
static void equal_losses(un_prec prec) {
    int n;
    const char *const *names = un_zoo_names(&n);
    train_prec = prec;
    for (int i = 0; i < n; i++) {
        un_status st;
        un_train_result r1 = train(names[i], 1, 20, "adam", NULL, NULL, &st);
        EXPECT_OK(NULL, st);
        bool bn = strcmp(names[i], "resnext50") == 0 || strcmp(names[i], "inception_v3") == 0;
        double tol = prec == UN_PREC_F64 ? 1e-9 : bn ? 1e-3 : 1e-4;
        for (int d = 2; d <= 4 && st == UN_OK; d *= 2) {
            un_status sd;
            un_train_result rd = train(names[i], d, 20, "adam", NULL, NULL, &sd);
            EXPECT_OK(NULL, sd);
            double worst = 0;
            for (int s = 0; sd == UN_OK && s < 20; s++)
                worst = fmax(worst, fabs(rd.losses[s] - r1.losses[s]) / fabs(r1.losses[s]));
            test__check(sd == UN_OK && worst <= tol, TEST__AT,
                        "%s: %d devices vs 1: relative loss difference %g", names[i], d, worst);
            un_train_result_deinit(&rd);
        }
        bool learns = strcmp(names[i], "mlp") == 0 || strcmp(names[i], "transformer") == 0 ||
                      strcmp(names[i], "charlm") == 0 || strcmp(names[i], "resnext50") == 0;
        if (learns && st == UN_OK)
            test__check(r1.losses[19] < r1.losses[0], TEST__AT, "%s: loss %g -> %g", names[i],
                        r1.losses[0], r1.losses[19]);
        un_train_result_deinit(&r1);
    }
    train_prec = UN_PREC_F32;
}

static void test_train_equal_losses_f32(void) { equal_losses(UN_PREC_F32); }
static void test_train_equal_losses_f64(void) { equal_losses(UN_PREC_F64); }

/* UN_MEET_TRACE (train.c write_trace): each of 2 ranks writes its timed steps' events, every
 * step opened by "batch" and its meets (2 a step for the tiny MLP's data strategy: the gradient
 * exchange, the weight exchange; the loss all-reduce only on a step that reports the loss, with
 * --log-every past the run the first, which is not timed, and the last) an "arrive" then a
 * "release", times non-decreasing; and the meet counts of --stats do not count the trace's own
 * agreement. A path that cannot be written fails the run. */
static void test_meet_trace(void) {
    char prefix[64], path[80];
    tmp_path(prefix, sizeof prefix, "trace");
    setenv("UN_MEET_TRACE", prefix, 1);
    un_status st;
    un_train_opts o = test_opts("mlp", 2, 5, NULL, NULL);
    o.tiny = true;
    o.optimizer = "sgd";
    o.prec = train_prec;
    o.log_every = 1000;
    un_train_result r = train_with(&o, &st);
    EXPECT_OK(NULL, st);
    for (int k = 0; k < 2 && st == UN_OK; k++) {
        snprintf(path, sizeof path, "%s.%d", prefix, k);
        FILE *f = fopen(path, "r");
        EXPECT_TRUE(f != NULL);
        if (!f)
            continue;
        char what[32];
        double t, last = 0;
        int batches = 0, arrives = 0, releases = 0, n = 0;
        bool ordered = true, paired = true;
        while (fscanf(f, "%lf %31s", &t, what) == 2) {
            ordered = ordered && t >= last;
            last = t;
            if (n++ == 0)
                test__check(strcmp(what, "batch") == 0, TEST__AT, "rank %d opens with %s", k, what);
            batches += strcmp(what, "batch") == 0;
            arrives += strcmp(what, "arrive") == 0;
            releases += strcmp(what, "release") == 0;
            paired = paired && arrives - releases >= 0 && arrives - releases <= 1;
        }
        fclose(f);
        remove(path);
        test__check(ordered && paired && batches == 4 && arrives == 9 && releases == 9, TEST__AT,
                    "rank %d: %d steps, %d arrivals, %d releases, ordered %d, paired %d", k,
                    batches, arrives, releases, ordered, paired);
    }
    if (st == UN_OK)
        for (int k = 0; k < 2; k++)
            EXPECT_NEAR(r.dev[k].meets, 2.25, 0);
    un_train_result_deinit(&r);
    setenv("UN_MEET_TRACE", "/nonexistent-dir/trace", 1);
    r = train("mlp", 2, 2, "sgd", NULL, NULL, &st);
    EXPECT_EQ(st, UN_ERR_IO);
    un_train_result_deinit(&r);
    unsetenv("UN_MEET_TRACE");
}

/* Saving after 6 steps and loading for 4 more gives the 10-step run exactly (SGD and Adam). */
static void test_checkpoint_resume(void) {
    char path[64];
    tmp_path(path, sizeof path, "ckpt");
    const char *opts[] = {"sgd", "adam"};
    for (int k = 0; k < 2; k++) {
        un_status st;
        un_train_result full = train("mlp", 2, 10, opts[k], NULL, NULL, &st);
        un_train_result a = train("mlp", 2, 6, opts[k], path, NULL, &st);
        EXPECT_OK(NULL, st);
        un_train_result b = train("mlp", 2, 4, opts[k], NULL, path, &st);
        EXPECT_OK(NULL, st);
        for (int s = 0; st == UN_OK && s < 4; s++)
            EXPECT_NEAR(b.losses[s], full.losses[6 + s], 0);
        un_train_result_deinit(&full);
        un_train_result_deinit(&a);
        un_train_result_deinit(&b);
    }
    remove(path);
}

/* Flips bits of byte `at` of file path (a damaged file). */
static void flip_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    EXPECT_TRUE(f != NULL);
    if (!f)
        return;
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

static void test_checkpoint_errors(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *g = NULL;
    EXPECT_OK(ctx,
              un_sample_mlp(ctx, spec, (un_sample_mlp_cfg){4, 4, 4, 4}, UN_SAMPLE_SERIAL, 1, &g));
    float w[32] = {0};
    char path[64];
    tmp_path(path, sizeof path, "bad.ckpt");
    FILE *f = fopen(path, "wb");
    fputs("NOTACKPT and more bytes", f);
    fclose(f);
    EXPECT_EQ(un_checkpoint_load(ctx, path, g, UN_PREC_F32, w, NULL), UN_ERR_PARSE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "bad magic") != NULL);
    un_ctx_clear(ctx);
    EXPECT_OK(ctx, un_checkpoint_save(ctx, path, g, UN_PREC_F32, w, NULL));
    /* truncate it */
    f = fopen(path, "r+b");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fclose(f);
    EXPECT_EQ(truncate(path, len - 9), 0);
    EXPECT_EQ(un_checkpoint_load(ctx, path, g, UN_PREC_F32, w, NULL), UN_ERR_PARSE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "truncated") != NULL);
    un_ctx_clear(ctx);
    /* one byte flipped mid-file (a weight value): refused, w untouched (issue 10, item 5) */
    for (int i = 0; i < 32; i++)
        w[i] = (float)i;
    EXPECT_OK(ctx, un_checkpoint_save(ctx, path, g, UN_PREC_F32, w, NULL));
    f = fopen(path, "r+b");
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fclose(f);
    flip_byte(path, len / 2);
    float w3[32] = {0};
    EXPECT_EQ(un_checkpoint_load(ctx, path, g, UN_PREC_F32, w3, NULL), UN_ERR_PARSE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "damaged checkpoint") != NULL);
    EXPECT_TRUE(w3[0] == 0 && w3[31] == 0);
    un_ctx_clear(ctx);
    /* a model with other weights */
    un_graph *g2 = NULL;
    EXPECT_OK(ctx,
              un_sample_mlp(ctx, spec, (un_sample_mlp_cfg){4, 4, 8, 4}, UN_SAMPLE_SERIAL, 1, &g2));
    EXPECT_OK(ctx, un_checkpoint_save(ctx, path, g, UN_PREC_F32, w, NULL));
    float w2[64];
    EXPECT_EQ(un_checkpoint_load(ctx, path, g2, UN_PREC_F32, w2, NULL), UN_ERR_MISMATCH);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "another shape") != NULL);
    remove(path);
    un_graph_free(g2);
    un_graph_free(g);
    un_ctx_free(ctx);
}

static void test_optimizers(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    /* minimise sum (w - 3)^2 */
    for (int k = 0; k < UN_OPTIM_COUNT; k++) {
        un_optim_params p = un_optim_params_default((un_optim_algo)k);
        p.lr = k == UN_OPTIM_SGD ? 0.05 : 0.1;
        un_optim *o = NULL;
        EXPECT_OK(ctx, un_optim_new(ctx, p, 3, UN_PREC_F64, &o));
        double w[3] = {0, 1, -2}, g[3];
        for (int s = 0; o && s < 500; s++) {
            for (int i = 0; i < 3; i++)
                g[i] = 2 * (w[i] - 3);
            un_optim_step(o, w, g);
        }
        for (int i = 0; i < 3; i++)
            EXPECT_NEAR(w[i], 3, 1e-3);
        un_optim_free(o);
    }
    /* Adam's first step is lr * sign(g) */
    un_optim *o = NULL;
    EXPECT_OK(ctx, un_optim_new(ctx, un_optim_params_default(UN_OPTIM_ADAM), 2, UN_PREC_F32, &o));
    float w[2] = {1, 1}, g[2] = {0.5f, -4};
    un_optim_step(o, w, g);
    EXPECT_NEAR(w[0], 1 - 1e-3, 1e-6);
    EXPECT_NEAR(w[1], 1 + 1e-3, 1e-6);
    un_optim_free(o);
    un_optim_params bad = un_optim_params_default(UN_OPTIM_SGD);
    bad.lr = -1;
    EXPECT_EQ(un_optim_new(ctx, bad, 2, UN_PREC_F32, &o), UN_ERR_INVALID);
    EXPECT_TRUE(o == NULL);
    un_ctx_free(ctx);
}

/* Writes g as graph JSON to path. */
static void write_graph(const un_graph *g, const char *path) {
    un_buf b = {0};
    EXPECT_OK(NULL, un_graph_to_json(NULL, g, &b));
    FILE *f = fopen(path, "w");
    fputs(b.data ? b.data : "", f);
    fclose(f);
    un_buf_deinit(&b);
}

/* The largest relative difference of steps [0, n) of a against steps [off, off + n) of b. */
static double loss_diff(const un_train_result *a, const un_train_result *b, int n, int off) {
    double worst = 0;
    for (int s = 0; s < n; s++)
        worst = fmax(worst, fabs(a->losses[s] - b->losses[off + s]) / fabs(b->losses[off + s]));
    return worst;
}

static un_train_result train_json(const char *model, const char *strategy, int devices, int steps,
                                  const char *save, const char *load, un_status *st) {
    un_train_opts o = test_opts(model, devices, steps, save, load);
    o.strategy = strategy;
    o.loss = "mse";
    o.prec = UN_PREC_F64;
    return train_with(&o, st);
}

/* The tensor-parallel MLP (w1 split by columns, w2 by rows, the partial sums reduced) on 4
 * devices: the serial run's losses, a quarter of its weight and optimizer memory on every
 * device (the runtime's accounting), and per step exactly the bytes of the plan's one reduce:
 * three partial [16, 8] pieces to device 0 and their gradient back. A checkpoint saved under the
 * tensor plan loads under the serial and the data-parallel plan and continues the serial run. */
static void test_tensor_parallel_plan(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_sample_mlp_cfg cfg = {16, 32, 64, 8};
    un_graph *gs = NULL, *gt = NULL;
    EXPECT_OK(ctx, un_sample_mlp(ctx, spec, cfg, UN_SAMPLE_SERIAL, 1, &gs));
    EXPECT_OK(ctx, un_sample_mlp(ctx, spec, cfg, UN_SAMPLE_TENSOR, 4, &gt));
    char ms[64], mt[64], ck[64];
    tmp_path(ms, sizeof ms, "serial.json");
    tmp_path(mt, sizeof mt, "tensor.json");
    tmp_path(ck, sizeof ck, "tp.ckpt");
    if (gs && gt) {
        write_graph(gs, ms);
        write_graph(gt, mt);
    }
    un_status st, st4;
    un_train_result r1 = train_json(ms, "serial", 1, 10, NULL, NULL, &st);
    un_train_result r4 = train_json(ms, mt, 4, 10, NULL, NULL, &st4);
    EXPECT_OK(NULL, st);
    EXPECT_OK(NULL, st4);
    if (st == UN_OK && st4 == UN_OK) {
        double worst = loss_diff(&r4, &r1, 10, 0);
        test__check(worst <= 1e-9, TEST__AT, "tensor plan vs serial: loss difference %g", worst);
        int64_t sent = 0, want = 2 * 3 * cfg.batch * cfg.out * (int64_t)sizeof(double);
        for (int d = 0; d < 4; d++) {
            const un_train_dev_stats *x = &r4.dev[d];
            EXPECT_EQ(4 * x->weight_bytes, r1.dev[0].weight_bytes);
            EXPECT_EQ(4 * x->optim_bytes, r1.dev[0].optim_bytes);
            sent += x->sent;
        }
        printf("    tensor plan on 4 devices: weights %lld + optimizer %lld B per device (serial "
               "%lld + %lld), %lld B sent per step\n",
               (long long)r4.dev[0].weight_bytes, (long long)r4.dev[0].optim_bytes,
               (long long)r1.dev[0].weight_bytes, (long long)r1.dev[0].optim_bytes,
               (long long)sent);
        test__check(sent == want, TEST__AT,
                    "tensor plan: %lld bytes sent per step, the reduce "
                    "moves %lld",
                    (long long)sent, (long long)want);
    }
    /* saved under the tensor plan, loaded under others */
    un_train_result a = train_json(ms, mt, 4, 6, ck, NULL, &st);
    EXPECT_OK(NULL, st);
    const char *plans[] = {"serial", "data"};
    for (int k = 0; k < 2 && st == UN_OK; k++) {
        un_train_result b = train_json(ms, plans[k], k + 1, 4, NULL, ck, &st);
        EXPECT_OK(NULL, st);
        double worst = st == UN_OK ? loss_diff(&b, &r1, 4, 6) : 1;
        test__check(st == UN_OK && worst <= 1e-9, TEST__AT,
                    "saved under tensor/4, loaded under %s: loss difference %g", plans[k], worst);
        un_train_result_deinit(&b);
    }
    un_train_result_deinit(&a);
    un_train_result_deinit(&r1);
    un_train_result_deinit(&r4);
    remove(ms);
    remove(mt);
    remove(ck);
    un_graph_free(gs);
    un_graph_free(gt);
    un_ctx_free(ctx);
}

/* Two branches of one model, the second placed on device 1 by machine views ("devices"): the
 * serial losses, each device holding its branch's weights, one [16, 8] activation and its
 * gradient crossing per step; a view beyond the devices is refused with one error. */
static void test_machine_views(void) {
#define BR(b, dev)                                                                                 \
    " {\"name\": \"w" b "1\", \"op\": \"weight\", \"params\": {\"shape\": [32, 64]}" dev "},"      \
    " {\"name\": \"w" b "2\", \"op\": \"weight\", \"params\": {\"shape\": [64, 8]}" dev "},"       \
    " {\"name\": \"" b "1\", \"op\": \"linear\", \"in\": [\"x\", \"w" b "1\"]" dev "},"            \
    " {\"name\": \"" b "2\", \"op\": \"linear\", \"in\": [\"" b "1\", \"w" b "2\"]" dev "},"
#define TWO(dev)                                                                                   \
    "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [16, 32]}}," BR(    \
        "a", "") BR("b", dev) " {\"name\": \"y\", \"op\": \"ew_add\", \"in\": [\"a2\", \"b2\"]}]}"
    static const char *serial = TWO(""), *placed = TWO(", \"devices\": [1]"),
                      *beyond = TWO(", \"devices\": {\"start\": 3, \"count\": 1}");
#undef TWO
#undef BR
    char ms[64], mp[64], mb[64];
    tmp_path(ms, sizeof ms, "two.json");
    tmp_path(mp, sizeof mp, "two_placed.json");
    tmp_path(mb, sizeof mb, "two_beyond.json");
    const char *txt[] = {serial, placed, beyond}, *paths[] = {ms, mp, mb};
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(paths[i], "w");
        fputs(txt[i], f);
        fclose(f);
    }
    un_status st, st2;
    un_train_result r1 = train_json(ms, "serial", 1, 8, NULL, NULL, &st);
    un_train_result r2 = train_json(ms, mp, 2, 8, NULL, NULL, &st2);
    EXPECT_OK(NULL, st);
    EXPECT_OK(NULL, st2);
    if (st == UN_OK && st2 == UN_OK) {
        double worst = loss_diff(&r2, &r1, 8, 0);
        test__check(worst <= 1e-9, TEST__AT, "placed branches vs serial: loss difference %g",
                    worst);
        int64_t branch = (32 * 64 + 64 * 8) * (int64_t)sizeof(double);
        EXPECT_EQ(r2.dev[0].weight_bytes, branch);
        EXPECT_EQ(r2.dev[1].weight_bytes, branch);
        EXPECT_EQ(r2.dev[1].sent + r2.dev[0].sent, 2 * 16 * 8 * (int64_t)sizeof(double));
    }
    un_ctx *ctx = un_ctx_new(NULL);
    un_graph *mg = NULL, *pg = NULL;
    EXPECT_OK(ctx, un_graph_load(ctx, spec, ms, &mg));
    EXPECT_EQ(un_strategy_plan_load(ctx, spec, mb, mg, 2, &pg), UN_ERR_INVALID);
    EXPECT_TRUE(
        strstr(un_ctx_errmsg(ctx), mb) && strstr(un_ctx_errmsg(ctx), "node 'wb1'") &&
        strstr(un_ctx_errmsg(ctx), "device 3 in its machine view is not one of the 2 devices"));
    un_graph_free(mg);
    un_ctx_free(ctx);
    un_train_result_deinit(&r1);
    un_train_result_deinit(&r2);
    for (int i = 0; i < 3; i++)
        remove(paths[i]);
}

/* Plans: the data-parallel graph is a valid plan for 2 devices, not for 4 or for another model. */
static void test_plan_validation(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_model m, m2;
    EXPECT_OK(ctx, un_zoo_build(ctx, spec, "mlp", true, 0, &m));
    EXPECT_OK(ctx, un_zoo_build(ctx, spec, "xdl", true, 0, &m2));
    un_graph *dp = NULL, *plan = NULL;
    EXPECT_OK(ctx, un_strategy_data(ctx, m.graph, 2, &dp));
    EXPECT_EQ(un_strategy_devices(dp), 2);
    un_buf b = {0};
    EXPECT_OK(ctx, un_graph_to_json(ctx, dp, &b));
    char path[64];
    tmp_path(path, sizeof path, "plan.json");
    FILE *f = fopen(path, "w");
    fputs(b.data, f);
    fclose(f);
    un_buf_deinit(&b);
    EXPECT_OK(ctx, un_strategy_plan_load(ctx, spec, path, m.graph, 2, &plan));
    un_graph_free(plan);
    EXPECT_EQ(un_strategy_plan_load(ctx, spec, path, m.graph, 4, &plan), UN_ERR_MISMATCH);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "runs on 2 devices") != NULL);
    un_ctx_clear(ctx);
    EXPECT_EQ(un_strategy_plan_load(ctx, spec, path, m2.graph, 2, &plan), UN_ERR_MISMATCH);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "not the model's graph") != NULL);
    EXPECT_TRUE(plan == NULL);
    remove(path);
    un_graph_free(dp);
    un_model_deinit(&m);
    un_model_deinit(&m2);
    un_ctx_free(ctx);
}

/* ---- mixed plans ---- */

/* tests/data/plans: the sample MLP (x [16, 32] -> linear relu 64 -> linear 8) and two plans that
 * mix data and tensor parallelism: mlp_mixed2.json on 2 devices splits the first layer by columns
 * (x in copies), combines its output and splits it by rows for a data-parallel second layer;
 * mlp_mixed4.json on 4 devices is a 2 x 2 grid, the batch split 2 ways and both layers
 * tensor-parallel (columns, then rows and a reduce) within each half. */
/* Mixed plans train to the serial losses (1e-9, float64), every device holds only its weight
 * pieces and their optimizer state (half of all on 4 devices), and a checkpoint saved under the
 * 4-device plan loads under the 2-device one and continues the serial run. */
static void test_mixed_plans(void) {
    const char *ms = "tests/data/plans/mlp_sample.json", *m2 = "tests/data/plans/mlp_mixed2.json",
               *m4 = "tests/data/plans/mlp_mixed4.json";
    char ck[64];
    tmp_path(ck, sizeof ck, "mixed.ckpt");
    un_status st, st2, st4;
    un_train_result r1 = train_json(ms, "serial", 1, 10, NULL, NULL, &st);
    un_train_result r2 = train_json(ms, m2, 2, 10, NULL, NULL, &st2);
    un_train_result r4 = train_json(ms, m4, 4, 10, NULL, NULL, &st4);
    EXPECT_OK(NULL, st);
    EXPECT_OK(NULL, st2);
    EXPECT_OK(NULL, st4);
    if (st == UN_OK && st2 == UN_OK && st4 == UN_OK) {
        double w2 = loss_diff(&r2, &r1, 10, 0), w4 = loss_diff(&r4, &r1, 10, 0);
        test__check(w2 <= 1e-9 && w4 <= 1e-9, TEST__AT,
                    "mixed plans vs serial: loss difference %g (2 devices), %g (4 devices)", w2,
                    w4);
        for (int d = 0; d < 4; d++) {
            const un_train_dev_stats *x = d < 2 ? &r2.dev[d] : NULL, *y = &r4.dev[d];
            if (x) { /* half of w1, all of w2 (the data-parallel layer's weight in copies), and
                      * Adam's two moments of half of each (w2's sharded over its two copies) */
                EXPECT_EQ(x->weight_bytes, (32 * 64 / 2 + 64 * 8) * (int64_t)sizeof(double));
                EXPECT_EQ(x->optim_bytes, 2 * (32 * 64 / 2 + 64 * 8 / 2) * (int64_t)sizeof(double));
            }
            /* on the 2 x 2 grid: half the weights, a quarter of the optimizer state */
            EXPECT_EQ(2 * y->weight_bytes, r1.dev[0].weight_bytes);
            EXPECT_EQ(4 * y->optim_bytes, r1.dev[0].optim_bytes);
        }
        un_train_result a = train_json(ms, m4, 4, 6, ck, NULL, &st);
        EXPECT_OK(NULL, st);
        un_train_result b = train_json(ms, m2, 2, 4, NULL, ck, &st);
        EXPECT_OK(NULL, st);
        double w = st == UN_OK ? loss_diff(&b, &r1, 4, 6) : 1;
        test__check(st == UN_OK && w <= 1e-9, TEST__AT,
                    "saved under mixed/4, loaded under mixed/2: loss difference %g", w);
        un_train_result_deinit(&a);
        un_train_result_deinit(&b);
    }
    un_train_result_deinit(&r1);
    un_train_result_deinit(&r2);
    un_train_result_deinit(&r4);
    remove(ck);
}

/* Options of a 10-step float64 run of a tiny model on 1 device. */
static un_train_opts tiny_f64(const char *model) {
    un_train_opts o = test_opts(model, 1, 10, NULL, NULL);
    o.tiny = true;
    o.prec = UN_PREC_F64;
    return o;
}

/* --strategy tensor: every tiny model trains to the serial losses (float64, 1e-9, 10 steps) on 2
 * and 4 devices, except where no linear layer splits 4 ways (resnext50 and inception_v3 have 10
 * classes), which is one clear error; the tensor-parallel MLP holds a quarter of the weights per
 * device on 4. */
static void test_tensor_strategy(void) {
    int n;
    const char *const *names = un_zoo_names(&n);
    for (int i = 0; i < n; i++) {
        un_status st;
        un_train_opts o = tiny_f64(names[i]);
        un_train_result r1 = train_with(&o, &st);
        EXPECT_OK(NULL, st);
        for (int d = 2; d <= 4 && st == UN_OK; d *= 2) {
            un_status sd;
            un_train_opts od = o;
            od.devices = d;
            od.strategy = "tensor";
            un_train_result rd = train_with(&od, &sd);
            bool tens = strcmp(names[i], "resnext50") == 0 || strcmp(names[i], "inception_v3") == 0;
            if (d == 4 && tens) {
                EXPECT_EQ(sd, UN_ERR_INVALID);
            } else {
                EXPECT_OK(NULL, sd);
                double worst = sd == UN_OK ? loss_diff(&rd, &r1, 10, 0) : 1;
                test__check(sd == UN_OK && worst <= 1e-9, TEST__AT,
                            "%s: tensor on %d devices vs serial: loss difference %g", names[i], d,
                            worst);
                if (sd == UN_OK && d == 4 && strcmp(names[i], "mlp") == 0)
                    for (int k = 0; k < 4; k++)
                        EXPECT_EQ(4 * rd.dev[k].weight_bytes, r1.dev[0].weight_bytes);
            }
            un_train_result_deinit(&rd);
        }
        un_train_result_deinit(&r1);
    }
}

/* --strategy mixed:2x2 (un_strategy_mixed): every tiny model on 4 devices (batch split 2 ways,
 * tensor-partitionable ops split 2 ways within each half) trains to the serial losses (float64,
 * 1e-9, 10 steps), and each device holds exactly half of every tensor-partitioned weight (the
 * runtime's accounting = a count from the plan: pieces on the devices its views name, split
 * weights' pieces each 1/2 of the weight), so the tensor-partitioned weights take 1/T of
 * serial's memory per device. Bad names and device counts are one clear error. */
static void test_mixed_strategy(void) {
    int n;
    const char *const *names = un_zoo_names(&n);
    for (int i = 0; i < n; i++) {
        un_status st;
        un_train_opts o = tiny_f64(names[i]);
        un_train_result r1 = train_with(&o, &st);
        EXPECT_OK(NULL, st);
        un_train_opts om = o;
        om.devices = 4;
        om.strategy = "mixed:2x2";
        un_status sm;
        un_train_result rm = train_with(&om, &sm);
        EXPECT_OK(NULL, sm);
        double worst = st == UN_OK && sm == UN_OK ? loss_diff(&rm, &r1, 10, 0) : 1;
        test__check(worst <= 1e-9, TEST__AT, "%s: mixed 2x2 vs serial: loss difference %g",
                    names[i], worst);
        /* the plan as run (weights folded into their layouts): what each device must hold */
        un_ctx *ctx = un_ctx_new(NULL);
        un_graph *g = NULL, *f = NULL;
        int d;
        EXPECT_OK(ctx, un_train_graph(ctx, spec, &om, &g, &d));
        if (g)
            EXPECT_OK(ctx, un_strategy_fold_weights(ctx, g, &f));
        int64_t split = 0, whole = 0, want[4] = {0};
        for (int32_t id = 0; f && id < un_graph_node_count(f); id++) {
            const un_node *nd = un_graph_node(f, id);
            if (nd->op != UN_OP_WEIGHT)
                continue;
            const un_shape *s = &nd->inf.out[0];
            int64_t bytes = un_shape_numel(s) * (int64_t)sizeof(double);
            int64_t blocks = un_shape_npieces(s) / s->copy / s->sum;
            if (blocks == 2 && un_shape_npieces(s) == 4) { /* split 2 ways, 2 copies: half each */
                split += bytes;
                for (int k = 0; k < 4; k++)
                    want[k] += bytes / 2;
                continue;
            }
            whole += bytes; /* not tensor-partitioned: its pieces where they fall */
            for (int64_t p = 0; p < un_shape_npieces(s); p++)
                want[un_view_device(&nd->view, p, 4)] +=
                    un_shape_piece_numel(s) * (int64_t)sizeof(double);
        }
        if (sm == UN_OK && st == UN_OK && f) {
            test__check(split > 0 && split + whole == r1.dev[0].weight_bytes, TEST__AT,
                        "%s: %lld weight bytes tensor-partitioned, %lld not, serial %lld", names[i],
                        (long long)split, (long long)whole, (long long)r1.dev[0].weight_bytes);
            for (int k = 0; k < 4; k++) {
                test__check(rm.dev[k].weight_bytes == want[k], TEST__AT,
                            "%s: device %d holds %lld weight bytes, the plan says %lld", names[i],
                            k, (long long)rm.dev[k].weight_bytes, (long long)want[k]);
                /* and the memory check's estimate is what the device held */
                int64_t e = un_exec_estimate_bytes(f, k, 4, UN_PREC_F64, true, 2, 0);
                test__check(e == rm.dev[k].peak_bytes, TEST__AT,
                            "%s: device %d estimate %lld, peak %lld", names[i], k, (long long)e,
                            (long long)rm.dev[k].peak_bytes);
            }
            printf("    %-12s mixed 2x2: %5.1f%% of the weights tensor-partitioned; per device "
                   "%lld..%lld B of serial's %lld\n",
                   names[i], 100.0 * (double)split / (double)(split + whole),
                   (long long)rm.dev[3].weight_bytes, (long long)rm.dev[0].weight_bytes,
                   (long long)r1.dev[0].weight_bytes);
            if (strcmp(names[i], "mlp") == 0) /* every layer split: half of everything */
                for (int k = 0; k < 4; k++)
                    EXPECT_EQ(2 * rm.dev[k].weight_bytes, r1.dev[0].weight_bytes);
        }
        un_graph_free(f);
        un_graph_free(g);
        un_ctx_free(ctx);
        un_train_result_deinit(&rm);
        un_train_result_deinit(&r1);
    }
    /* 1 x 2 and 2 x 1 on 2 devices: the serial losses too (the MLP) */
    un_status st;
    un_train_opts o = tiny_f64("mlp");
    un_train_result r1 = train_with(&o, &st);
    const char *two[] = {"mixed:1x2", "mixed:2x1"};
    for (int k = 0; k < 2 && st == UN_OK; k++) {
        un_status s2;
        un_train_opts o2 = o;
        o2.devices = 2;
        o2.strategy = two[k];
        un_train_result r2 = train_with(&o2, &s2);
        EXPECT_OK(NULL, s2);
        double w = s2 == UN_OK ? loss_diff(&r2, &r1, 10, 0) : 1;
        test__check(w <= 1e-9, TEST__AT, "mlp %s vs serial: loss difference %g", two[k], w);
        un_train_result_deinit(&r2);
    }
    un_train_result_deinit(&r1);
    /* errors: devices that are not D x T, a name that is not mixed:DxT, a batch D does not divide
     */
    struct {
        const char *strategy;
        int devices, batch;
        un_status want;
        const char *msg;
    } bad[] = {
        {"mixed:2x2", 2, 0, UN_ERR_MISMATCH, "runs on 4 devices, but --devices is 2"},
        {"mixed:2x", 2, 0, UN_ERR_INVALID, "is not mixed:DxT"},
        {"mixed:0x2", 2, 0, UN_ERR_INVALID, "is not mixed:DxT"},
        {"mixed:2x2x1", 4, 0, UN_ERR_INVALID, "is not mixed:DxT"},
        {"mixed:3x1", 3, 16, UN_ERR_INVALID, "not a multiple of 3"},
        {"mixed:1x3", 3, 0, UN_ERR_INVALID, "no operator of the model can be split 1 x 3"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        un_ctx *ctx = un_ctx_new(NULL);
        un_train_opts ob = o;
        ob.devices = bad[k].devices;
        ob.strategy = bad[k].strategy;
        ob.batch = bad[k].batch;
        un_graph *g = NULL;
        int d;
        un_status sb = un_train_graph(ctx, spec, &ob, &g, &d);
        test__check(sb == bad[k].want && strstr(un_ctx_errmsg(ctx), bad[k].msg) != NULL, TEST__AT,
                    "%s on %d devices: status %d, message '%s'", bad[k].strategy, bad[k].devices,
                    sb, un_ctx_errmsg(ctx));
        un_graph_free(g);
        un_ctx_free(ctx);
    }
}

/* A block of a hand-made rank file: rows off0..off0+len0 of a [4, 4] weight, elements lo..hi. */
typedef struct ckb {
    const char *name;
    int64_t off0, len0, lo, hi;
} ckb;

static void put(unsigned char *buf, size_t *n, const void *p, size_t len) {
    memcpy(buf + *n, p, len);
    *n += len;
}

/* Writes PATH.rank0 of a 1-rank checkpoint (format of runtime/checkpoint.c: header, blocks with
 * values sin(element), FNV-1a checksum) saying it has `claimed` blocks. */
static void write_rank_file(const char *path, uint32_t claimed, const ckb *b, int n) {
    unsigned char *buf = calloc(4096, 1);
    size_t len = 0;
    uint32_t hdr[5] = {8, 0, 1, ~0u, 0};
    int64_t steps = 0;
    put(buf, &len, "UNCKPR01", 8);
    put(buf, &len, hdr, 16);
    put(buf, &len, &steps, 8);
    put(buf, &len, &claimed, 4);
    for (int i = 0; i < n; i++) {
        uint32_t nl = (uint32_t)strlen(b[i].name), rk = 2;
        int64_t dims[2] = {4, 4}, off[2] = {b[i].off0, 0}, ln[2] = {b[i].len0, 4};
        put(buf, &len, &nl, 4);
        put(buf, &len, b[i].name, nl);
        put(buf, &len, &rk, 4);
        put(buf, &len, dims, 16);
        put(buf, &len, off, 16);
        put(buf, &len, ln, 16);
        put(buf, &len, &b[i].lo, 8);
        put(buf, &len, &b[i].hi, 8);
        for (int64_t x = b[i].lo; x < b[i].hi; x++) {
            double v = sin((double)(b[i].off0 * 4 + x));
            put(buf, &len, &v, 8);
        }
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ buf[i]) * 0x100000001b3ull;
    put(buf, &len, &h, 8);
    char file[96];
    snprintf(file, sizeof file, "%s.rank0", path);
    FILE *f = fopen(file, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    free(buf);
}

/* Rank files whose checksum is right but whose blocks are not: a weight missing, elements twice,
 * a block beyond its weight, a chunk beyond its block, more blocks claimed than there are: one
 * clear error each, never a crash; the well-formed file loads its values. */
static void test_checkpoint_rank_blocks(void) {
    un_graph *g = NULL;
    EXPECT_OK(NULL,
              un_sample_mlp(NULL, spec, (un_sample_mlp_cfg){4, 4, 4, 4}, UN_SAMPLE_SERIAL, 1, &g));
    char path[64];
    tmp_path(path, sizeof path, "blocks.ckpt");
    const ckb whole1 = {"w1", 0, 4, 0, 16}, whole2 = {"w2", 0, 4, 0, 16};
    struct {
        ckb b[3];
        int n;
        uint32_t claimed;
        un_status want;
        const char *msg;
    } cases[] = {
        {{whole1, whole2}, 2, 2, UN_OK, ""},
        {{{"w1", 0, 2, 0, 8}, {"w1", 2, 2, 0, 8}, whole2}, 3, 3, UN_OK, ""},
        {{whole1}, 1, 1, UN_ERR_MISMATCH, "weight 'w2' is not whole in the 1 rank files"},
        {{{"w1", 0, 2, 0, 8}, {"w1", 0, 2, 0, 8}, whole2},
         3,
         3,
         UN_ERR_PARSE,
         "weight 'w1' has elements more than once"},
        {{{"w1", 0, 5, 0, 16}, whole2}, 2, 2, UN_ERR_PARSE, "truncated or malformed"},
        {{{"w1", 0, 4, 0, 17}, whole2}, 2, 2, UN_ERR_PARSE, "truncated or malformed"},
        {{whole1, whole2}, 2, 3, UN_ERR_PARSE, "truncated or malformed"},
    };
    for (size_t k = 0; g && k < sizeof cases / sizeof *cases; k++) {
        write_rank_file(path, cases[k].claimed, cases[k].b, cases[k].n);
        un_ctx *ctx = un_ctx_new(NULL);
        double w[32] = {0};
        un_status st = un_checkpoint_load_ranks(ctx, path, g, UN_PREC_F64, w, NULL);
        test__check(st == cases[k].want && strstr(un_ctx_errmsg(ctx), cases[k].msg), TEST__AT,
                    "case %zu: status %d, message '%s'", k, st, un_ctx_errmsg(ctx));
        for (int i = 0; st == UN_OK && i < 32; i++) /* w1 then w2, each sin(element) */
            test__check(w[i] == sin((double)(i % 16)), TEST__AT, "case %zu: w[%d] = %g", k, i,
                        w[i]);
        un_ctx_free(ctx);
    }
    char file[96];
    snprintf(file, sizeof file, "%s.rank0", path);
    remove(file);
    un_graph_free(g);
}

/* ---- checkpoints loaded straight into a rank's pieces ---- */

typedef struct ckx_arg {
    const un_graph *g;
    const char *path; /* save: per-rank files here; load: from here */
    bool save;        /* else load */
    const double *lw; /* the logical weights and Adam moments (host) */
    const double *lm[2];
    int64_t nl;           /* logical elements */
    int64_t held[8];      /* load: host bytes each rank held */
    int64_t np[8], ns[8]; /* its weight-piece and shard elements */
    bool same[8];         /* load: its pieces and shard = the logical state cut */
    bool untouched[8];    /* load that failed: its weights still zero */
} ckx_arg;

/* Save: the logical state cut into this rank's pieces and shard, written as its rank file. Load:
 * un_checkpoint_load_exec into fresh pieces and shard, compared bit for bit with the logical
 * state cut by un_exec_params_scatter / un_exec_shard_scatter. */
static void ckx_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    ckx_arg *a = j->arg;
    un_backend *be = NULL;
    un_exec *ex = NULL;
    un_optim *opt = NULL;
    double *want = NULL, *got = NULL;
    if ((j->st = un_backend_cpu_new(ctx, UN_PREC_F64, 1, &be)) != UN_OK)
        return;
    if ((j->st = un_exec_new(ctx, a->g, c, be, &ex)) != UN_OK ||
        (j->st = un_optim_new_on(ctx, un_optim_params_default(UN_OPTIM_ADAM),
                                 un_exec_shard_count(ex), be, &opt)) != UN_OK)
        goto done;
    int64_t np = un_exec_param_count(ex), ns = un_exec_shard_count(ex);
    a->np[j->rank] = np;
    a->ns[j->rank] = ns;
    if (a->save) {
        j->st = un_exec_params_scatter(ctx, ex, a->lw, un_exec_params(ex));
        for (int i = 0; i < 2 && j->st == UN_OK; i++)
            j->st = un_exec_shard_scatter(ctx, ex, a->lm[i], un_optim_state(opt, i));
        un_optim_set_steps(opt, 5);
        if (j->st == UN_OK)
            j->st =
                un_checkpoint_save_rank(ctx, a->path, a->g, ex, be, opt, j->rank, un_comm_size(c));
        goto done;
    }
    un_status st = un_checkpoint_load_exec(ctx, a->path, a->g, ex, be, opt, &a->held[j->rank]);
    if (st != UN_OK) {
        bool zero = true;
        for (int64_t i = 0; i < np; i++)
            zero = zero && ((double *)un_exec_params(ex))[i] == 0;
        a->untouched[j->rank] = zero;
        j->st = st;
        goto done;
    }
    want = calloc((size_t)np + (size_t)2 * ns + 1, sizeof *want);
    got = calloc((size_t)np + (size_t)2 * ns + 1, sizeof *got);
    memcpy(got, un_exec_params(ex), sizeof(double) * (size_t)np);
    for (int i = 0; i < 2; i++)
        memcpy(got + np + i * ns, un_optim_state(opt, i), sizeof(double) * (size_t)ns);
    if ((j->st = un_exec_params_scatter(ctx, ex, a->lw, un_exec_params(ex))) != UN_OK)
        goto done;
    memcpy(want, un_exec_params(ex), sizeof(double) * (size_t)np);
    for (int i = 0; i < 2 && j->st == UN_OK; i++) {
        j->st = un_exec_shard_scatter(ctx, ex, a->lm[i], un_optim_state(opt, i));
        memcpy(want + np + i * ns, un_optim_state(opt, i), sizeof(double) * (size_t)ns);
    }
    a->same[j->rank] =
        memcmp(want, got, sizeof(double) * (size_t)(np + 2 * ns)) == 0 && un_optim_steps(opt) == 5;
done:
    free(want);
    free(got);
    un_optim_free(opt);
    un_exec_free(ex);
    un_backend_free(be);
}

/* The run graph (weights folded) of the tiny MLP under a strategy on d devices. */
static un_graph *ckx_graph(const char *strategy, int d) {
    un_train_opts o = tiny_f64("mlp");
    o.devices = d;
    o.strategy = strategy;
    un_graph *g = NULL, *f = NULL;
    int dd;
    EXPECT_OK(NULL, un_train_graph(NULL, spec, &o, &g, &dd));
    if (g)
        EXPECT_OK(NULL, un_strategy_fold_weights(NULL, g, &f));
    un_graph_free(g);
    return f;
}

/* un_checkpoint_load_exec: the MLP's state saved under data parallelism on 2 ranks (one file per
 * rank) and as one file loads under tensor parallelism on 4 ranks, mixed 2 x 2 and serial, each
 * rank getting exactly the logical state's cut into its pieces and shard, and holding on the host
 * only those plus a bounded read buffer: under tensor x 4 a quarter of the logical weights and
 * Adam moments that a logical load holds on every rank. A damaged rank file writes nothing. */
static void test_checkpoint_load_exec(void) {
    un_graph *dp = ckx_graph("data", 2), *tp = ckx_graph("tensor", 4),
             *mx = ckx_graph("mixed:2x2", 4), *se = ckx_graph("serial", 1);
    if (!dp || !tp || !mx || !se)
        goto out;
    char ranks[64], one[64];
    tmp_path(ranks, sizeof ranks, "ckx");
    tmp_path(one, sizeof one, "ckx1");
    ckx_arg a = {.g = dp, .path = ranks, .save = true};
    int64_t nl = 0;
    for (int32_t id = 0; id < un_graph_node_count(se); id++)
        if (un_graph_node(se, id)->op == UN_OP_WEIGHT)
            nl += un_shape_numel(&un_graph_node(se, id)->inf.out[0]);
    double *lw = malloc(sizeof(double) * (size_t)nl), *lm = malloc(sizeof(double) * 2 * (size_t)nl);
    for (int64_t i = 0; i < nl; i++) {
        lw[i] = sin(0.1 * (double)i);
        lm[i] = cos(0.3 * (double)i);
        lm[nl + i] = 1 + 0.01 * (double)i;
    }
    a.lw = lw;
    a.lm[0] = lm;
    a.lm[1] = lm + nl;
    rank_job jobs[8];
    run_ranks(2, ckx_job, &a, jobs);
    for (int r = 0; r < 2; r++)
        test__check(jobs[r].st == UN_OK, TEST__AT, "save rank %d: %s", r, jobs[r].err);
    un_optim *lo = NULL;
    EXPECT_OK(NULL,
              un_optim_new(NULL, un_optim_params_default(UN_OPTIM_ADAM), nl, UN_PREC_F64, &lo));
    for (int i = 0; lo && i < 2; i++)
        memcpy(un_optim_state(lo, i), lm + i * nl, sizeof(double) * (size_t)nl);
    un_optim_set_steps(lo, 5);
    EXPECT_OK(NULL, un_checkpoint_save(NULL, one, se, UN_PREC_F64, lw, lo));
    un_optim_free(lo);
    struct {
        const un_graph *g;
        int d;
        const char *what;
    } into[] = {{tp, 4, "tensor x4"}, {mx, 4, "mixed 2x2"}, {se, 1, "serial"}, {dp, 2, "data x2"}};
    for (int f = 0; f < 2; f++)
        for (size_t k = 0; k < sizeof into / sizeof *into; k++) {
            ckx_arg b = a;
            b.save = false;
            b.g = into[k].g;
            b.path = f ? one : ranks;
            run_ranks(into[k].d, ckx_job, &b, jobs);
            for (int r = 0; r < into[k].d; r++) {
                /* the rank's pieces, 2 moment arrays over its shard, and a bounded buffer */
                int64_t staged = (b.np[r] + 1 + 2 * (b.ns[r] + 1)) * (int64_t)sizeof(double);
                test__check(jobs[r].st == UN_OK && b.same[r] && b.held[r] >= staged &&
                                b.held[r] <= staged + (1 << 20),
                            TEST__AT, "%s into %s, rank %d: %s, same %d, held %lld of %lld",
                            f ? "one file" : "rank files", into[k].what, r, jobs[r].err, b.same[r],
                            (long long)b.held[r], (long long)staged);
                if (into[k].g == tp) /* a quarter of the weights, a quarter of their moments */
                    test__check(4 * b.np[r] == nl && 4 * b.ns[r] == nl, TEST__AT,
                                "tensor x4 rank %d: %lld pieces, %lld shard of %lld", r,
                                (long long)b.np[r], (long long)b.ns[r], (long long)nl);
            }
            if (f == 0 && k == 0)
                printf("    rank files (data x2) into tensor x4: host %lld B per rank for the "
                       "state (+ %d B read buffer); a logical load holds %lld B\n",
                       (long long)((b.np[0] + 2 * b.ns[0]) * (int64_t)sizeof(double)), 1 << 19,
                       (long long)(3 * nl * (int64_t)sizeof(double)));
        }
    /* a damaged rank file: an error naming it, nothing written */
    char r1[80];
    snprintf(r1, sizeof r1, "%s.rank1", ranks);
    flip_byte(r1, 60);
    ckx_arg b = a;
    b.save = false;
    b.g = tp;
    run_ranks(4, ckx_job, &b, jobs);
    for (int r = 0; r < 4; r++)
        test__check(
            jobs[r].st == UN_ERR_PARSE && strstr(jobs[r].err, "rank1: damaged") && b.untouched[r],
            TEST__AT, "damaged rank file, rank %d: status %d, %s", r, jobs[r].st, jobs[r].err);
    char r0[80];
    snprintf(r0, sizeof r0, "%s.rank0", ranks);
    remove(r0);
    remove(r1);
    remove(one);
    free(lw);
    free(lm);
out:
    un_graph_free(dp);
    un_graph_free(tp);
    un_graph_free(mx);
    un_graph_free(se);
}

/* ---- the sharded update ---- */

typedef struct shard_arg {
    const un_graph *g;
    un_optim_algo algo;
    int64_t shard[8]; /* per rank: its shard's elements */
    int64_t nparam;   /* each rank's weight-piece elements */
    double *flat[8];  /* per rank: its weight pieces after the steps */
    double *logical;  /* rank 0: the logical weights after the steps */
} shard_arg;

/* Three steps of loss sum(y^2)/200 through the executor and un_exec_update (float64, 1 thread). */
static void shard_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    shard_arg *a = j->arg;
    un_backend *be = NULL;
    un_exec *ex = NULL;
    un_optim *opt = NULL;
    double *lw = NULL;
    if ((j->st = un_backend_cpu_new(ctx, UN_PREC_F64, 1, &be)) != UN_OK)
        return;
    if ((j->st = un_exec_new(ctx, a->g, c, be, &ex)) != UN_OK)
        goto done;
    int64_t nl = un_exec_lparam_count(ex);
    lw = calloc((size_t)nl + 1, sizeof *lw);
    un_optim_init_weights(a->g, 7, UN_PREC_F64, lw, nl);
    if ((j->st = un_exec_params_scatter(ctx, ex, lw, un_exec_params(ex))) != UN_OK)
        goto done;
    if ((j->st = un_optim_new_on(ctx, un_optim_params_default(a->algo), un_exec_shard_count(ex), be,
                                 &opt)) != UN_OK)
        goto done;
    for (int step = 0; step < 3; step++) {
        for (int32_t id = 0; id < un_graph_node_count(a->g); id++) {
            const un_node *nd = un_graph_node(a->g, id);
            if (nd->op != UN_OP_INPUT)
                continue;
            int64_t n = un_shape_numel(&nd->inf.out[0]);
            for (int64_t i = 0; i < n; i++)
                if (nd->inf.out[0].dtype == UN_DT_FLOAT)
                    ((double *)un_exec_source(ex, id))[i] = sin(0.37 * (double)(i + 13 * step));
                else
                    ((int64_t *)un_exec_source(ex, id))[i] = 0;
        }
        if ((j->st = un_exec_forward(ctx, ex, 0)) != UN_OK)
            goto done;
        int np;
        const un_exec_piece *pc = un_exec_output_pieces(ex, 0, &np);
        for (int k = 0; k < np; k++) {
            int64_t pn = 1;
            for (int d = 0; d < un_exec_output_shape(ex, 0)->rank; d++)
                pn *= pc[k].dim[d];
            for (int64_t x = 0; pc[k].copy == 0 && x < pn; x++)
                ((double *)pc[k].grad)[x] = 0.01 * ((double *)pc[k].val)[x];
        }
        if ((j->st = un_exec_backward(ctx, ex)) != UN_OK ||
            (j->st = un_exec_update(ctx, ex, opt)) != UN_OK)
            goto done;
    }
    a->shard[j->rank] = un_exec_shard_count(ex);
    int64_t nparam = un_exec_param_count(ex); /* every rank's; rank 0 reports it */
    if (j->rank == 0)
        a->nparam = nparam;
    a->flat[j->rank] = malloc(sizeof(double) * (size_t)(nparam + 1));
    memcpy(a->flat[j->rank], un_exec_params(ex), sizeof(double) * (size_t)nparam);
    if ((j->st = un_exec_params_gather(ctx, ex, un_exec_params(ex), lw)) == UN_OK && j->rank == 0) {
        a->logical = lw;
        lw = NULL;
    }
done:
    free(lw);
    un_optim_free(opt);
    un_exec_free(ex);
    un_backend_free(be);
}

/* Data parallelism with k copies of every weight on d ranks (k = d, and k = 4 on 2 ranks, two
 * copies on each): every weight element is updated by exactly one rank of its copy group (the
 * shards add up to the weights, each rank holding 1/k of the optimizer state per copy it holds),
 * the copies end bitwise identical, and the weights after three SGD or Adam steps are the serial
 * run's (1e-12). unity-train --stats reports optimizer state per device = serial's / d. */
static void test_sharded_update(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_model m;
    EXPECT_OK(ctx, un_zoo_build(ctx, spec, "mlp", true, 8, &m));
    static const int kd[4][2] = {{1, 1}, {2, 2}, {4, 4}, {4, 2}};
    for (int algo = 0; algo < UN_OPTIM_COUNT; algo++) {
        double *serial = NULL;
        int64_t nl = 0;
        for (int v = 0; v < 4; v++) {
            int k = kd[v][0], d = kd[v][1];
            un_graph *dp = NULL, *g = NULL;
            EXPECT_OK(ctx, un_strategy_data(ctx, m.graph, k, &dp));
            EXPECT_OK(ctx, un_strategy_fold_weights(ctx, dp, &g));
            shard_arg a = {.g = g, .algo = (un_optim_algo)algo};
            rank_job jobs[4];
            run_ranks(d, shard_job, &a, jobs);
            bool ok = true;
            for (int r = 0; r < d; r++) {
                test__check(jobs[r].st == UN_OK, TEST__AT, "k %d on %d ranks, rank %d: %s", k, d, r,
                            jobs[r].err);
                ok &= jobs[r].st == UN_OK && a.flat[r] != NULL;
            }
            if (ok) {
                int64_t total = 0, lp = 0;
                for (int32_t id = 0; id < un_graph_node_count(g); id++)
                    if (un_graph_node(g, id)->op == UN_OP_WEIGHT)
                        lp += un_shape_numel(&un_graph_node(g, id)->inf.out[0]);
                for (int r = 0; r < d; r++) {
                    total += a.shard[r];
                    EXPECT_TRUE(a.shard[r] <= a.nparam / k + 64); /* 1/k per weight, rounded */
                    EXPECT_TRUE(memcmp(a.flat[r], a.flat[0], sizeof(double) * (size_t)a.nparam) ==
                                0);
                }
                EXPECT_EQ(total, lp); /* the chunks of the k copies partition each weight */
                if (v == 0) {
                    serial = a.logical;
                    a.logical = NULL;
                    nl = lp;
                } else if (serial && a.logical) {
                    double worst = 0;
                    for (int64_t i = 0; i < nl; i++)
                        worst = fmax(worst, fabs(a.logical[i] - serial[i]) / (1 + fabs(serial[i])));
                    test__check(worst <= 1e-12, TEST__AT,
                                "%s, %d copies on %d ranks: weights differ from serial by %g",
                                un_optim_algo_name((un_optim_algo)algo), k, d, worst);
                }
            }
            for (int r = 0; r < d; r++)
                free(a.flat[r]);
            free(a.logical);
            un_graph_free(g);
            un_graph_free(dp);
        }
        free(serial);
    }
    un_model_deinit(&m);
    un_ctx_free(ctx);
    /* the trainer's accounting: optimizer state per device is the serial one's / d */
    for (int d = 2; d <= 4; d *= 2) {
        un_status s1, sd;
        un_train_result r1 = train("mlp", 1, 2, "adam", NULL, NULL, &s1);
        un_train_result rd = train("mlp", d, 2, "adam", NULL, NULL, &sd);
        EXPECT_OK(NULL, s1);
        EXPECT_OK(NULL, sd);
        for (int r = 0; s1 == UN_OK && sd == UN_OK && r < d; r++) {
            EXPECT_EQ(rd.dev[r].weight_bytes, r1.dev[0].weight_bytes);
            EXPECT_TRUE(llabs(d * rd.dev[r].optim_bytes - r1.dev[0].optim_bytes) <= 64 * d * 8);
        }
        un_train_result_deinit(&r1);
        un_train_result_deinit(&rd);
    }
}

/* Data parallelism on shared memory (local ranks, cpu backend) computes the summed gradient of
 * each big linear weight in chunks, each rank its own chunk over the whole batch, reading the
 * other ranks' pieces in place (exec.c, chunked_grad): no reduce-scatter. The MLP at
 * layers=2,hidden=513 (weights [1024, 513] and [513, 513] in each tower: with 513 rows the 2 and 4
 * chunks of the second cut rows, which two ranks then both compute) on 2 and 4 devices gives the
 * serial losses (f64 1e-9, f32 1e-4), the same bits twice and the bits of the reduce-scatter
 * (the opaque backend: the CPU kernels behind memory the host cannot reach, whose ranks do not
 * share it), and each device sends per step only the all-gather of the updated chunks, (d - 1)
 * times its chunk of each weight (with the reduce-scatter, each other chunk of every weight once
 * more). */
static void test_chunked_grad(void) {
    static const int64_t wn[2] = {1024 * 513, 513 * 513}; /* per tower */
    for (int prec = 0; prec < 2; prec++) {
        double tol = prec ? 1e-9 : 1e-4;
        un_train_opts o = test_opts("mlp", 1, 8, NULL, NULL);
        o.config = "layers=2,hidden=513,batch=8";
        o.optimizer = "adam";
        o.prec = prec ? UN_PREC_F64 : UN_PREC_F32;
        int64_t es = prec ? 8 : 4;
        un_status s1, sd, sa;
        un_train_result r1 = train_with(&o, &s1);
        EXPECT_OK(NULL, s1);
        for (int d = 2; d <= 4 && s1 == UN_OK; d *= 2) {
            o.devices = d;
            un_train_result rd = train_with(&o, &sd), ra = train_with(&o, &sa);
            o.backend = "opaque";
            un_status so;
            un_train_result ro = train_with(&o, &so);
            o.backend = NULL;
            EXPECT_TRUE(sd == UN_OK && sa == UN_OK && so == UN_OK);
            EXPECT_TRUE(sd == UN_OK && so == UN_OK && ro.dev[0].plane_exchanges > 0 &&
                        memcmp(rd.losses, ro.losses, 8 * sizeof *rd.losses) == 0);
            double worst = 0;
            for (int s = 0; sd == UN_OK && s < 8; s++)
                worst = fmax(worst, fabs(rd.losses[s] - r1.losses[s]) / fabs(r1.losses[s]));
            test__check(sd == UN_OK && worst <= tol, TEST__AT,
                        "%s on %d devices vs 1: relative loss difference %g", prec ? "f64" : "f32",
                        d, worst);
            EXPECT_TRUE(sd == UN_OK && sa == UN_OK &&
                        memcmp(rd.losses, ra.losses, 8 * sizeof *rd.losses) == 0);
            for (int r = 0; sd == UN_OK && r < d; r++) {
                int64_t want = 0;
                for (int k = 0; k < 2; k++)
                    want += 2 * (d - 1) * (wn[k] * (r + 1) / d - wn[k] * r / d) * es;
                test__check(rd.dev[r].sent == want, TEST__AT,
                            "%s on %d devices, device %d: sent %lld B per step, all-gather %lld",
                            prec ? "f64" : "f32", d, r, (long long)rd.dev[r].sent, (long long)want);
            }
            un_train_result_deinit(&rd);
            un_train_result_deinit(&ra);
            un_train_result_deinit(&ro);
        }
        un_train_result_deinit(&r1);
    }
}

/* Activations and their gradients share an arena by lifetime. A forward-only chain of relus (no
 * weight: nothing reads a value after its consumer's forward) needs two of its values at a time,
 * however long it is. On one rank, every tiny model's arena is at least its largest value and
 * its largest gradient, and below the sum of its activations and its gradients: gradients take
 * the memory of activations that their backward no longer needs; the estimate still equals the
 * allocation (test_memory_estimate). */
static void test_arena(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    for (int w = 0; w < 2; w++) { /* without, with a weight at the chain's start */
        char txt[2048];
        int at = snprintf(txt, sizeof txt,
                          "{\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": "
                          "{\"shape\": [64, 16]}}, {\"name\": \"w\", \"op\": \"weight\", "
                          "\"params\": {\"shape\": [64, 16]}}, {\"name\": \"r0\", \"op\": "
                          "\"ew_mul\", \"in\": [\"x\", \"%s\"]}",
                          w ? "w" : "x");
        for (int k = 1; k <= 8; k++)
            at += snprintf(txt + at, sizeof txt - (size_t)at,
                           ", {\"name\": \"r%d\", \"op\": \"relu\", \"in\": [\"r%d\"]}", k, k - 1);
        snprintf(txt + at, sizeof txt - (size_t)at, "], \"outputs\": [\"r8\"]}");
        un_graph *g = NULL;
        un_backend *be = NULL;
        un_exec *ex = NULL;
        un_comm_group *grp = NULL;
        EXPECT_OK(ctx, un_graph_from_json(ctx, spec, "chain", txt, strlen(txt), &g));
        EXPECT_OK(ctx, un_backend_cpu_new(ctx, UN_PREC_F32, 1, &be));
        EXPECT_OK(ctx, un_comm_local_group_new(ctx, 1, &grp));
        if (g)
            EXPECT_OK(ctx, un_exec_new(ctx, g, un_comm_local_get(grp, 0), be, &ex));
        int64_t arena = ex ? un_exec_stats_get(ex)->arena_bytes : -1, one = 64 * 16 * 4;
        /* with the weight: r0..r7 live to their consumers' backward, and at most two gradients
         * at a time besides the output's: 8 values + 3 gradients at the most */
        int64_t want = w ? 11 * one : 2 * one;
        test__check(w ? arena <= want && arena >= 8 * one : arena == want, TEST__AT,
                    "chain of 8 relus %s a weight: arena %lld bytes, want %s %lld",
                    w ? "after" : "without", (long long)arena, w ? "at most" : "", (long long)want);
        un_exec_free(ex);
        un_comm_local_group_free(grp);
        un_backend_free(be);
        un_graph_free(g);
    }
    int nn;
    const char *const *names = un_zoo_names(&nn);
    for (int i = 0; i < nn; i++) {
        un_model m;
        un_backend *be = NULL;
        un_exec *ex = NULL;
        EXPECT_OK(ctx, un_zoo_build(ctx, spec, names[i], true, 8, &m));
        EXPECT_OK(ctx, un_backend_cpu_new(ctx, UN_PREC_F32, 1, &be));
        un_comm_group *grp = NULL;
        EXPECT_OK(ctx, un_comm_local_group_new(ctx, 1, &grp));
        EXPECT_OK(ctx, un_exec_new(ctx, m.graph, un_comm_local_get(grp, 0), be, &ex));
        /* the gradients: every float output of a node that reads (through anything) a weight;
         * the activations in the arena: every regular op's output but the graph's outputs */
        int32_t n = un_graph_node_count(m.graph);
        bool *ng = calloc((size_t)n, sizeof *ng), *isout = calloc((size_t)n, sizeof *isout);
        for (int32_t k = 0; k < un_graph_output_count(m.graph); k++)
            isout[un_graph_output(m.graph, k).node] = true;
        int64_t gsum = 0, gbig = 0, asum = 0, abig = 0;
        for (int32_t id = 0; id < n; id++) {
            const un_node *nd = un_graph_node(m.graph, id);
            for (int t = 0; t < nd->n_in; t++)
                ng[id] |= ng[nd->in[t].node] ||
                          un_graph_node(m.graph, nd->in[t].node)->op == UN_OP_WEIGHT;
            for (int o = 0; o < nd->inf.n_out; o++) {
                bool fl = nd->inf.out[o].dtype == UN_DT_FLOAT;
                int64_t b = un_shape_numel(&nd->inf.out[o]) * (fl ? 4 : 8);
                if (ng[id] && fl) {
                    gsum += b;
                    gbig = b > gbig ? b : gbig;
                }
                if (un_op_kind_of(nd->op) == UN_OPK_REGULAR && !isout[id]) {
                    asum += b;
                    abig = b > abig ? b : abig;
                }
            }
        }
        int64_t arena = ex ? un_exec_stats_get(ex)->arena_bytes : -1;
        test__check(arena >= gbig && arena >= abig && arena < asum + gsum, TEST__AT,
                    "%s: arena %lld bytes, largest gradient %lld, largest activation %lld, all "
                    "gradients %lld, all activations %lld",
                    names[i], (long long)arena, (long long)gbig, (long long)abig, (long long)gsum,
                    (long long)asum);
        printf("    %s: arena %lld bytes = %.2f of all activations %lld + all gradients %lld\n",
               names[i], (long long)arena, (double)arena / (double)(asum + gsum), (long long)asum,
               (long long)gsum);
        free(ng);
        free(isout);
        un_exec_free(ex);
        un_comm_local_group_free(grp);
        un_backend_free(be);
        un_model_deinit(&m);
    }
    un_ctx_free(ctx);
}

/* ---- initialisation of each rank's own pieces ---- */

/* Elements of g's logical weights. */
static int64_t weight_count(const un_graph *g) {
    int64_t n = 0;
    for (int32_t id = 0; id < un_graph_node_count(g); id++)
        if (un_graph_node(g, id)->op == UN_OP_WEIGHT)
            n += un_shape_numel(&un_graph_node(g, id)->inf.out[0]);
    return n;
}

/* The plans the pieces are checked under (tensor x4 is refused where a head does not split).
 */
static const struct {
    const char *strategy;
    int d;
} piece_plans[] = {{"serial", 1}, {"data", 2}, {"tensor", 4}, {"mixed:2x2", 4}};

typedef struct init_arg {
    const un_graph *g;
    un_prec prec;
    const float *const *given; /* per node id: replacement values, or NULL */
    int32_t given_node;
    bool same[4];
    int64_t held[4]; /* weight-piece elements of each rank */
} init_arg;

/* un_optim_init_exec's pieces = the logical initialisation (un_optim_init_weights, the given
 * weight's values over it) cut by un_exec_params_scatter, bit for bit. */
static void init_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    init_arg *a = j->arg;
    un_backend *be = NULL;
    un_exec *ex = NULL;
    void *got = NULL, *lw = NULL;
    if ((j->st = un_backend_cpu_new(ctx, a->prec, 1, &be)) != UN_OK)
        return;
    if ((j->st = un_exec_new(ctx, a->g, c, be, &ex)) != UN_OK)
        goto done;
    size_t es = a->prec == UN_PREC_F32 ? 4 : 8;
    int64_t np = un_exec_param_count(ex), nl = un_exec_lparam_count(ex);
    a->held[j->rank] = np;
    /* garbage first: every element must be written (partial sums beyond summand 0 zeroed) */
    memset(un_exec_params(ex), 0x5a, (size_t)np * es);
    if ((j->st = un_optim_init_exec(ctx, a->g, 11, a->given, ex, be)) != UN_OK)
        goto done;
    got = malloc((size_t)np * es + 1);
    memcpy(got, un_exec_params(ex), (size_t)np * es);
    lw = calloc((size_t)nl + 1, es);
    un_optim_init_weights(a->g, 11, a->prec, lw, nl);
    if (a->given) {
        int64_t off = un_exec_lparam_offset(ex, a->given_node);
        const un_shape *s = &un_graph_node(a->g, a->given_node)->inf.out[0];
        for (int64_t i = 0; i < un_shape_numel(s); i++)
            if (a->prec == UN_PREC_F32)
                ((float *)lw)[off + i] = a->given[a->given_node][i];
            else
                ((double *)lw)[off + i] = a->given[a->given_node][i];
    }
    if ((j->st = un_exec_params_scatter(ctx, ex, lw, un_exec_params(ex))) != UN_OK)
        goto done;
    a->same[j->rank] = memcmp(got, un_exec_params(ex), (size_t)np * es) == 0;
done:
    free(got);
    free(lw);
    un_exec_free(ex);
    un_backend_free(be);
}

/* Each rank initialises only its own weight pieces, element by element from (seed, weight, index):
 * for every tiny model serial, data parallel on 2, tensor parallel on 4 and mixed 2 x 2, in float32
 * and float64, every rank's pieces are bit for bit the logical initialisation cut into them, also
 * with one weight's values given (an ONNX model's initializers), and under tensor x 4 the MLP's
 * ranks hold a quarter of its weights each. Seeded values are uniform within their bound. */
static void test_init_exec(void) {
    int n;
    const char *const *names = un_zoo_names(&n);
    int runs = 0;
    for (int i = 0; i < n; i++)
        for (size_t p = 0; p < sizeof piece_plans / sizeof piece_plans[0]; p++) {
            un_train_opts o = tiny_f64(names[i]);
            o.devices = piece_plans[p].d;
            o.strategy = piece_plans[p].strategy;
            un_ctx *ctx = un_ctx_new(NULL);
            un_graph *g = NULL, *f = NULL;
            int d;
            if (un_train_graph(ctx, spec, &o, &g, &d) != UN_OK) { /* e.g. 10 classes 4 ways */
                EXPECT_TRUE(piece_plans[p].d == 4);
                un_ctx_free(ctx);
                continue;
            }
            EXPECT_OK(ctx, un_strategy_fold_weights(ctx, g, &f));
            int32_t nn = f ? un_graph_node_count(f) : 0, big = -1;
            for (int32_t id = 0; id < nn; id++) /* the largest weight's values are given */
                if (un_graph_node(f, id)->op == UN_OP_WEIGHT &&
                    (big < 0 || un_shape_numel(&un_graph_node(f, id)->inf.out[0]) >
                                    un_shape_numel(&un_graph_node(f, big)->inf.out[0])))
                    big = id;
            const float **given = calloc((size_t)nn + 1, sizeof *given);
            float *vals = NULL;
            if (big >= 0) {
                int64_t k = un_shape_numel(&un_graph_node(f, big)->inf.out[0]);
                vals = malloc(sizeof *vals * (size_t)k);
                for (int64_t x = 0; x < k; x++)
                    vals[x] = (float)x * 0.25f - 3;
                given[big] = vals;
            }
            for (int prec = 0; f && prec < 2; prec++)
                for (int gv = 0; gv < 2; gv++) {
                    init_arg a = {.g = f,
                                  .prec = prec ? UN_PREC_F64 : UN_PREC_F32,
                                  .given = gv ? given : NULL,
                                  .given_node = big};
                    rank_job jobs[4];
                    run_ranks(d, init_job, &a, jobs);
                    for (int r = 0; r < d; r++) {
                        EXPECT_OK(NULL, jobs[r].st);
                        test__check(a.same[r], TEST__AT,
                                    "%s %s rank %d (%s%s): pieces differ from the logical cut",
                                    names[i], piece_plans[p].strategy, r, prec ? "f64" : "f32",
                                    gv ? ", a weight given" : "");
                    }
                    runs++;
                    if (strcmp(names[i], "mlp") == 0 &&
                        strcmp(piece_plans[p].strategy, "tensor") == 0)
                        for (int r = 0; r < d; r++) /* the MLP's weights split 4 ways */
                            EXPECT_EQ(4 * a.held[r], weight_count(f));
                }
            free(vals);
            free(given);
            un_graph_free(f);
            un_graph_free(g);
            un_ctx_free(ctx);
        }
    EXPECT_TRUE(runs >= 4 * 3 * n);
    /* the counter-based values: uniform within the bound, not constant, seed-dependent */
    un_model m;
    EXPECT_OK(NULL, un_zoo_build(NULL, spec, "mlp", true, 8, &m));
    int64_t nl = weight_count(m.graph);
    double *w1 = calloc((size_t)nl, sizeof *w1), *w2 = calloc((size_t)nl, sizeof *w2);
    un_optim_init_weights(m.graph, 1, UN_PREC_F64, w1, nl);
    un_optim_init_weights(m.graph, 2, UN_PREC_F64, w2, nl);
    int64_t differ = 0, out = 0;
    double lo = 1, hi = -1;
    for (int64_t x = 0; x < nl; x++) {
        differ += w1[x] != w2[x];
        out += fabs(w1[x]) > 1;
        lo = w1[x] < lo ? w1[x] : lo;
        hi = w1[x] > hi ? w1[x] : hi;
    }
    test__check(out == 0 && lo < -0.05 && hi > 0.05 && differ > nl / 2, TEST__AT,
                "mlp init: range [%g, %g], %lld beyond 1, %lld of %lld differ between seeds", lo,
                hi, (long long)out, (long long)differ, (long long)nl);
    free(w1);
    free(w2);
    un_model_deinit(&m);
}

/* ---- the one-file checkpoint streamed from the pieces ---- */

typedef struct sve_arg {
    const un_graph *g;
    const char *stream, *gathered; /* the two files written */
    const double *lm[2];           /* logical Adam moments to start from */
    int64_t held[4];               /* host bytes of each rank while streaming */
} sve_arg;

/* Seeded pieces and a shard of given moments; the one file written by un_checkpoint_save_exec
 * and by gathering the logical state on rank 0 (un_exec_params_gather, un_exec_shard_gather, then
 * un_checkpoint_save). */
static void sve_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    sve_arg *a = j->arg;
    un_backend *be = NULL;
    un_exec *ex = NULL;
    un_optim *opt = NULL, *lo = NULL;
    double *lw = NULL;
    if ((j->st = un_backend_cpu_new(ctx, UN_PREC_F64, 1, &be)) != UN_OK)
        return;
    if ((j->st = un_exec_new(ctx, a->g, c, be, &ex)) != UN_OK ||
        (j->st = un_optim_new_on(ctx, un_optim_params_default(UN_OPTIM_ADAM),
                                 un_exec_shard_count(ex), be, &opt)) != UN_OK ||
        (j->st = un_optim_init_exec(ctx, a->g, 3, NULL, ex, be)) != UN_OK)
        goto done;
    for (int i = 0; i < 2 && j->st == UN_OK; i++)
        j->st = un_exec_shard_scatter(ctx, ex, a->lm[i], un_optim_state(opt, i));
    un_optim_set_steps(opt, 4);
    if (j->st != UN_OK || (j->st = un_checkpoint_save_exec(ctx, a->stream, a->g, ex, be, opt, c,
                                                           &a->held[j->rank])) != UN_OK)
        goto done;
    int64_t nl = un_exec_lparam_count(ex);
    if (j->rank == 0) {
        lw = calloc((size_t)nl + 1, sizeof *lw);
        EXPECT_OK(ctx,
                  un_optim_new(ctx, un_optim_params_default(UN_OPTIM_ADAM), nl, UN_PREC_F64, &lo));
    }
    j->st = un_exec_params_gather(ctx, ex, un_exec_params(ex), lw);
    for (int i = 0; i < 2 && j->st == UN_OK; i++)
        j->st = un_exec_shard_gather(ctx, ex, un_optim_state(opt, i),
                                     lo ? un_optim_state(lo, i) : NULL);
    if (j->st == UN_OK && j->rank == 0) {
        un_optim_set_steps(lo, 4);
        j->st = un_checkpoint_save(ctx, a->gathered, a->g, UN_PREC_F64, lw, lo);
    }
done:
    free(lw);
    un_optim_free(lo);
    un_optim_free(opt);
    un_exec_free(ex);
    un_backend_free(be);
}

static bool same_file(const char *p, const char *q) {
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    bool same = un_read_file(NULL, p, &a, &na) == UN_OK &&
                un_read_file(NULL, q, &b, &nb) == UN_OK && na == nb && memcmp(a, b, na) == 0;
    free(a);
    free(b);
    return same;
}

/* un_checkpoint_save_exec: the tiny MLP and transformer under serial, data x2, tensor x4 and mixed
 * 2 x 2 stream the same bytes as the logical state gathered on rank 0 and saved, while rank 0
 * holds at most two weights' worth (the largest weight and what it receives) and the other ranks
 * one; a path that cannot be written is one error on every rank and leaves no file. */
static void test_checkpoint_save_exec(void) {
    static const char *const models[] = {"mlp", "transformer"};
    char stream[64], gathered[64];
    tmp_path(stream, sizeof stream, "sve");
    tmp_path(gathered, sizeof gathered, "sve1");
    for (int m = 0; m < 2; m++)
        for (size_t p = 0; p < sizeof piece_plans / sizeof piece_plans[0]; p++) {
            un_train_opts o = tiny_f64(models[m]);
            o.devices = piece_plans[p].d;
            o.strategy = piece_plans[p].strategy;
            un_graph *g = NULL, *f = NULL;
            int d;
            EXPECT_OK(NULL, un_train_graph(NULL, spec, &o, &g, &d));
            if (g)
                EXPECT_OK(NULL, un_strategy_fold_weights(NULL, g, &f));
            if (!f) {
                un_graph_free(g);
                continue;
            }
            int64_t nl = weight_count(f), big = 0;
            for (int32_t id = 0; id < un_graph_node_count(f); id++)
                if (un_graph_node(f, id)->op == UN_OP_WEIGHT &&
                    un_shape_numel(&un_graph_node(f, id)->inf.out[0]) > big)
                    big = un_shape_numel(&un_graph_node(f, id)->inf.out[0]);
            double *lm = malloc(sizeof *lm * (size_t)(2 * nl));
            for (int64_t x = 0; x < 2 * nl; x++)
                lm[x] = sin(0.1 * (double)x) * (x < nl ? 1 : 0.5);
            sve_arg a = {.g = f, .stream = stream, .gathered = gathered, .lm = {lm, lm + nl}};
            rank_job jobs[4];
            run_ranks(d, sve_job, &a, jobs);
            for (int r = 0; r < d; r++) {
                EXPECT_OK(NULL, jobs[r].st);
                EXPECT_TRUE(a.held[r] == (r == 0 ? 2 : 1) * big * (int64_t)sizeof(double));
            }
            test__check(same_file(stream, gathered), TEST__AT,
                        "%s %s: the streamed checkpoint differs from the gathered one", models[m],
                        piece_plans[p].strategy);
            if (strcmp(models[m], "transformer") == 0)
                EXPECT_TRUE(a.held[0] * 4 < 3 * nl * (int64_t)sizeof(double));
            if (p == 2) { /* a directory that does not exist: every rank fails, nothing written */
                a.stream = "/nonexistent_unity_dir/ck";
                run_ranks(d, sve_job, &a, jobs);
                for (int r = 0; r < d; r++)
                    EXPECT_TRUE(jobs[r].st != UN_OK);
                EXPECT_TRUE(strstr(jobs[0].err, "/nonexistent_unity_dir/ck") != NULL);
            }
            free(lm);
            un_graph_free(f);
            un_graph_free(g);
        }
    remove(stream);
    remove(gathered);
}

/* ---- the memory estimate ---- */

typedef struct est_arg {
    const un_graph *g;
    int64_t alloc[4];
} est_arg;

static void est_job(rank_job *j, un_ctx *ctx, un_comm *c) {
    est_arg *a = j->arg;
    un_backend *be = NULL;
    un_exec *ex = NULL;
    j->st = un_backend_cpu_new(ctx, UN_PREC_F32, 1, &be);
    if (j->st == UN_OK)
        j->st = un_exec_new(ctx, a->g, c, be, &ex);
    if (j->st == UN_OK)
        a->alloc[j->rank] = un_exec_stats_get(ex)->alloc_bytes;
    un_exec_free(ex);
    un_backend_free(be);
}

/* un_exec_estimate_bytes is the executor's planning run dry: for every tiny model, serial and
 * data parallel on 2 and 4 ranks, each rank's estimate (without optimizer state) is what its
 * executor really allocates; the optimizer arrays add exactly their bytes. */
static void test_memory_estimate(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    int nn;
    const char *const *names = un_zoo_names(&nn);
    for (int i = 0; i < nn; i++) {
        un_model m;
        EXPECT_OK(ctx, un_zoo_build(ctx, spec, names[i], true, 8, &m));
        for (int d = 1; d <= 4; d *= 2) {
            un_graph *dp = NULL, *g = NULL;
            EXPECT_OK(ctx, un_strategy_data(ctx, m.graph, d, &dp));
            EXPECT_OK(ctx, un_strategy_fold_weights(ctx, dp, &g));
            est_arg a = {.g = g};
            rank_job jobs[4];
            run_ranks(d, est_job, &a, jobs);
            for (int r = 0; r < d; r++) {
                EXPECT_OK(NULL, jobs[r].st);
                int64_t e0 = un_exec_estimate_bytes(g, r, d, UN_PREC_F32, true, 0, 0);
                int64_t e2 = un_exec_estimate_bytes(g, r, d, UN_PREC_F32, true, 2, 0);
                /* ranks that do not share memory (mpi, a device plane) land each add receive of
                 * the weights' reduce-scatter in a scratch; local ranks read it in place: the
                 * MLP's weights are in d copies, one per rank, so c - 1 chunks per weight */
                int64_t eu = un_exec_estimate_bytes(g, r, d, UN_PREC_F32, false, 0, 0);
                /* the CPU kernels' stash and scratch come on top: attention's projections,
                 * layer_norm's row statistics (the transformer), im2col (convolutions) */
                int64_t es = un_exec_estimate_bytes(g, r, d, UN_PREC_F32, true, 0, 1);
                EXPECT_TRUE(strcmp(names[i], "transformer") == 0 ? es > e0 : es >= e0);
                test__check(e0 == a.alloc[r], TEST__AT,
                            "%s on %d ranks, rank %d: estimate %lld, allocated %lld", names[i], d,
                            r, (long long)e0, (long long)a.alloc[r]);
                /* optimizer state for the rank's shard: of a piece in c copies, chunk `copy` */
                int64_t w = 0, scratch = 0;
                for (int32_t id = 0; id < un_graph_node_count(g); id++) {
                    const un_node *nd = un_graph_node(g, id);
                    const un_shape *s = &nd->inf.out[0];
                    int64_t pn = un_shape_piece_numel(s);
                    for (int64_t p = 0; nd->op == UN_OP_WEIGHT && p < un_shape_npieces(s); p++) {
                        int32_t blk[UN_MAX_DIMS], sum, copy;
                        un_shape_piece_coords(s, p, blk, &sum, &copy);
                        int64_t chunk = pn * (copy + 1) / s->copy - pn * copy / s->copy;
                        if (p % d == r && sum == 0)
                            w += chunk;
                        if (p % d == r && sum == 0 && s->copy == d)
                            scratch += (d - 1) * chunk;
                    }
                }
                EXPECT_EQ(e2 - e0, 2 * w * (int64_t)sizeof(float));
                if (strcmp(names[i], "mlp") == 0)
                    test__check(d == 1 || (scratch > 0 && eu - e0 == scratch * 4), TEST__AT,
                                "mlp on %d ranks, rank %d: not shared %lld B, shared %lld B, "
                                "scratch %lld B",
                                d, r, (long long)eu, (long long)e0, (long long)scratch * 4);
            }
            un_graph_free(g);
            un_graph_free(dp);
        }
        un_model_deinit(&m);
    }
    un_ctx_free(ctx);
}

int main(void) {
    static const test_case cases[] = {
        {"comm_local", test_comm_local},
        {"comm_pairs", test_comm_pairs},
        {"comm_add", test_comm_add},
        {"comm_eager", test_comm_eager},
        {"comm_eager_blocks", test_comm_eager_blocks},
        {"comm_small_allreduce", test_comm_small_allreduce},
        {"comm_lock_polls", test_comm_lock_polls},
        {"spin_load_rule", test_spin_load_rule},
        {"blas_worker_stopped", test_blas_worker_stopped},
        {"comm_wakeups", test_comm_wakeups},
        {"run_ranks_statuses", test_run_ranks_statuses},
        {"forward_sample_mlp", test_forward_sample_mlp},
        {"forward_zoo_data", test_forward_zoo_data},
        {"gradients", test_gradients},
        {"piece_transfers", test_piece_transfers},
        {"optimizers", test_optimizers},
        {"train_equal_losses_f32", test_train_equal_losses_f32},
        {"meet_trace", test_meet_trace},
        {"train_equal_losses_f64", test_train_equal_losses_f64},
        {"checkpoint_resume", test_checkpoint_resume},
        {"checkpoint_errors", test_checkpoint_errors},
        {"plan_validation", test_plan_validation},
        {"tensor_parallel_plan", test_tensor_parallel_plan},
        {"machine_views", test_machine_views},
        {"memory_estimate", test_memory_estimate},
        {"mixed_plans", test_mixed_plans},
        {"tensor_strategy", test_tensor_strategy},
        {"mixed_strategy", test_mixed_strategy},
        {"checkpoint_load_exec", test_checkpoint_load_exec},
        {"checkpoint_rank_blocks", test_checkpoint_rank_blocks},
        {"sharded_update", test_sharded_update},
        {"chunked_grad", test_chunked_grad},
        {"arena", test_arena},
        {"init_exec", test_init_exec},
        {"checkpoint_save_exec", test_checkpoint_save_exec},
    };
    return TEST_RUN_WITH_SPEC(cases, &spec);
}
