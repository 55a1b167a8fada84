/* waits_meet.c - what one meet of 2 local ranks costs (scripts/bench/waits.sh): the ranks
 * compute W us each (a clock-bounded busy loop), then exchange 8 bytes through the local
 * communicator (runtime/comm_local.c), ROUNDS times; the median and the 90th percentile of a
 * round's time minus W, with the poll forced to 0 (sleep at once: the waits before
 * spin-then-block) and to 50 us (un_pool_spin_force), the two alternating block by block.
 *   waits_meet [ROUNDS]   prints one line per work size and poll */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/comm.h"
#include "runtime/pool.h"

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

typedef struct job {
    un_comm *c;
    int rounds;
    double work;
    double *t; /* rank 0: each round's time */
} job;

static void *rank_main(void *arg) {
    job *j = arg;
    int me = un_comm_rank(j->c);
    for (int k = 0; k < j->rounds; k++) {
        double t0 = now_us(), end = t0 + j->work;
        while (now_us() < end)
            ;
        long out = k, in = -1;
        un_comm_msg s = {.peer = 1 - me, .tag = 0, .data = &out, .bytes = sizeof out};
        un_comm_msg r = {.peer = 1 - me, .tag = 0, .data = &in, .bytes = sizeof in};
        if (un_comm_exchange(NULL, j->c, &s, 1, &r, 1) != UN_OK || in != k) {
            fprintf(stderr, "waits_meet: exchange %d failed\n", k);
            exit(1);
        }
        if (j->t)
            j->t[k] = now_us() - t0 - j->work;
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 2000;
    if (rounds < 10) {
        fprintf(stderr, "waits_meet: ROUNDS must be at least 10\n");
        return 1;
    }
    static const double works[] = {2, 20, 200};
    static const long polls[] = {0, 50000};
    double *t[2] = {malloc(sizeof(double) * (size_t)rounds * 10),
                    malloc(sizeof(double) * (size_t)rounds * 10)};
    for (size_t w = 0; w < sizeof works / sizeof *works; w++) {
        int n[2] = {0, 0};
        for (int block = 0; block < 20; block++) { /* the two polls alternate in 20 blocks */
            int p = block % 2, r = rounds / 10;
            un_pool_spin_force(polls[p]);
            un_comm_group *g;
            if (un_comm_local_group_new(NULL, 2, &g) != UN_OK)
                return 1;
            job j[2] = {{un_comm_local_get(g, 0), r, works[w], t[p] + n[p]},
                        {un_comm_local_get(g, 1), r, works[w], NULL}};
            pthread_t th;
            pthread_create(&th, NULL, rank_main, &j[1]);
            rank_main(&j[0]);
            pthread_join(th, NULL);
            un_comm_local_group_free(g);
            n[p] += r;
        }
        for (int p = 0; p < 2; p++) {
            qsort(t[p], (size_t)n[p], sizeof(double), cmp);
            printf("work %4.0f us, poll %2ld us: a meet costs %7.2f us (median), %7.2f us (90th "
                   "percentile) over %d rounds\n",
                   works[w], polls[p] / 1000, t[p][n[p] / 2], t[p][n[p] * 9 / 10], n[p]);
        }
    }
    un_pool_spin_force(-1);
    free(t[0]);
    free(t[1]);
    return 0;
}
