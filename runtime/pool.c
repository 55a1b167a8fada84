/* pool.c - the kernels' thread pool: nthreads - 1 pthread workers that wait on a condition
 * variable for a new loop (a generation counter), run their static block and report back. */
#include "runtime/pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "pcg/un.h"

struct un_pool {
    int n;              /* threads in all, the caller included */
    pthread_t *workers; /* n - 1 */
    pthread_mutex_t mu;
    pthread_cond_t go;   /* a new loop, or stop */
    pthread_cond_t done; /* the last worker finished */
    uint64_t gen;        /* loop generation */
    int pending;         /* workers still running the current loop */
    int parts;           /* blocks of the current loop */
    bool stop;
    int64_t len; /* current loop */
    void (*fn)(void *arg, int64_t begin, int64_t end);
    void *arg;
};

typedef struct worker_arg {
    un_pool *p;
    int id; /* 1 .. n-1; the caller is 0 */
} worker_arg;

static void block_of(int64_t n, int parts, int i, int64_t *b, int64_t *e) {
    int64_t q = n / parts, r = n % parts;
    *b = i * q + (i < r ? i : r);
    *e = *b + q + (i < r ? 1 : 0);
}

static void *worker_main(void *argp) {
    worker_arg *wa = argp;
    un_pool *p = wa->p;
    int id = wa->id;
    free(wa);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        int parts = p->parts;
        int64_t len = p->len;
        void (*fn)(void *, int64_t, int64_t) = p->fn;
        void *arg = p->arg;
        pthread_mutex_unlock(&p->mu);
        if (id < parts) {
            int64_t b, e;
            block_of(len, parts, id, &b, &e);
            fn(arg, b, e);
        }
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

un_pool *un_pool_new(int nthreads) {
    un_pool *p = un_xcalloc(1, sizeof *p);
    p->n = nthreads < 1 ? 1 : nthreads;
    if (p->n == 1)
        return p;
    UN_ASSERT(pthread_mutex_init(&p->mu, NULL) == 0);
    UN_ASSERT(pthread_cond_init(&p->go, NULL) == 0);
    UN_ASSERT(pthread_cond_init(&p->done, NULL) == 0);
    p->workers = un_xcalloc((size_t)(p->n - 1), sizeof *p->workers);
    for (int i = 1; i < p->n; i++) {
        worker_arg *wa = un_xmalloc(sizeof *wa);
        wa->p = p;
        wa->id = i;
        UN_ASSERT(pthread_create(&p->workers[i - 1], NULL, worker_main, wa) == 0);
    }
    return p;
}

void un_pool_free(un_pool *p) {
    if (!p)
        return;
    if (p->n > 1) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n - 1; i++)
            pthread_join(p->workers[i], NULL);
        free(p->workers);
        pthread_cond_destroy(&p->go);
        pthread_cond_destroy(&p->done);
        pthread_mutex_destroy(&p->mu);
    }
    free(p);
}

int un_pool_size(const un_pool *p) { return p ? p->n : 1; }

void un_pool_for(un_pool *p, int64_t n, void (*fn)(void *arg, int64_t begin, int64_t end),
                 void *arg) {
    if (n <= 0)
        return;
    if (!p || p->n == 1 || n == 1) {
        fn(arg, 0, n);
        return;
    }
    int parts = n < p->n ? (int)n : p->n;
    pthread_mutex_lock(&p->mu);
    p->len = n;
    p->parts = parts;
    p->fn = fn;
    p->arg = arg;
    p->pending = p->n - 1; /* every worker wakes up and checks in, even without a block */
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    int64_t b, e;
    block_of(n, parts, 0, &b, &e);
    fn(arg, b, e);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

int un_pool_part(const un_pool *p, int64_t n, int64_t begin) {
    int parts = !p || n < 1 ? 1 : n < p->n ? (int)n : p->n;
    int64_t q = n / parts, r = n % parts;
    /* block i starts at i q + min(i, r): the first r blocks have q + 1 indices */
    if (begin < r * (q + 1))
        return (int)(begin / (q + 1));
    return q ? (int)(r + (begin - r * (q + 1)) / q) : 0;
}
