/* pool.c - the kernels' thread pool: nthreads - 1 pthread workers that wait for a new loop (a
 * generation counter), run their static block and report back; every wait spins, then sleeps on
 * a condition variable (un_pool_spin_until, below). */
#include "runtime/pool.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pcg/un.h"

/* ---- spin-then-block ---- */

/* The longest poll before a sleep: about one futex wake-up, which is what a poll saves. Measured
 * by scripts/bench/waits.sh (2-core AMD EPYC, other jobs running: no idle machine was had):
 * one meet of 2 ranks after 2 / 20 us of work costs 22 / 56 us at the median when the waiter
 * sleeps at once, 5 / 7 us with a 50 us poll (load 4-6, 12:08 UTC); the tiny MLP data x2 with
 * UN_SPIN_US 0 / 5 / 20 / 50 / 200: 0.311 / 0.232 / 0.212 / 0.146 / 0.161 ms/step (load 8-10,
 * 11:40) and 0 / 20 / 50 / 200: 0.135 / 0.149 / 0.152 / 0.155 (load 4-6, 12:08): within the
 * noise of a loaded box. Idle since the load rule below holds (2026-11-28 02:15 UTC, load < 1, 30
 * steps of 2-device tiny models, 6-12 runs each): with 50 us a run falls now and then into a
 * train of sleeps, each waking rank late for the next meet (dlrm b256: 5 of 22 runs at 0.26-0.33
 * ms/step against 0.070, 1.5 sleeps a step after a full poll); with 1 ms none of 10 did, and
 * outliers of mlp/resnext50/transformer tiny (0.22 / 0.73-0.83 / 1.22 ms against 0.04 / 0.55 /
 * 0.55) went too, typical steps unchanged. A poll only runs while the load rule says the others
 * leave this group its cores, so a longer one takes no core another thread wants. */
#define UN_POOL_SPIN_NS 1000000
/* How often the load is sampled again (by any waiter). */
#define LOAD_SAMPLE_NS 20000000
/* Reads of the load in a sample, back to back, before it says no: one read switched polling off
 * for the sample's 20 ms whenever a thread was caught running in it: another process's passing
 * thread, or one of this process's ranks counted running in /proc/loadavg and asleep by the time
 * /proc/self/task was read (the two are read apart, and a rank that does not poll sleeps within
 * microseconds). A short 2-device run (30 steps of a tiny model: a few ms) is one sample. Real
 * load is runnable in every read. */
#define UN_POOL_LOAD_READS 3

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static _Atomic int64_t spin_budget = -1; /* UN_SPIN_US or UN_POOL_SPIN_NS; -1: not read yet */
static _Atomic int64_t spin_forced = -1; /* un_pool_spin_force; -1: the rule */
static _Atomic int n_cores;              /* 0: not known yet */
static _Atomic int64_t load_at;          /* when load_verdict was made (0: never) */
static _Atomic int load_verdict = -1;    /* threads << 1 | may poll, for a group of threads */

static int cores_available(void) {
    int n = atomic_load_explicit(&n_cores, memory_order_relaxed);
    if (n > 0)
        return n;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
    if (n < 1) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    atomic_store_explicit(&n_cores, n, memory_order_relaxed);
    return n;
}

int un_pool_own_runnable(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[64], line[256];
        snprintf(path, sizeof path, "/proc/self/task/%.32s/stat", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue; /* the thread has just exited */
        ssize_t k = read(fd, line, sizeof line - 1);
        close(fd);
        line[k > 0 ? k : 0] = '\0';
        const char *q = strrchr(line, ')'); /* "TID (name) STATE ...": a name may hold ')' */
        n += q && q[1] == ' ' && q[2] == 'R';
    }
    closedir(d);
    return n;
}

bool un_pool_spin_allowed(int threads, int cores, int runnable, int own) {
    int others = runnable > own ? runnable - own : 0; /* the two counts are read apart */
    return threads <= cores && others <= cores - threads;
}

bool un_pool_load_fits(int threads, int cores, int reads, const un_pool_load_reader *r) {
    if (threads > cores)
        return false;
    for (int i = 0; i < reads; i++) {
        int running = r->runnable(r->arg);
        if (running <= cores - threads) /* no others beyond the free cores, whoever runs */
            return true;
        if (un_pool_spin_allowed(threads, cores, running, r->own(r->arg)))
            return true;
    }
    return false;
}

/* /proc/loadavg's running count ("running/total", its fourth field); 0 where it cannot be read. */
static int box_runnable(void *arg) {
    (void)arg;
    int running = 0, total = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        double a, b, c;
        if (fscanf(f, "%lf %lf %lf %d/%d", &a, &b, &c, &running, &total) != 5)
            running = 0;
        fclose(f);
    }
    return running;
}

static int own_runnable(void *arg) {
    (void)arg;
    return un_pool_own_runnable();
}

/* Whether a group of `threads` may poll now: un_pool_load_fits over UN_POOL_LOAD_READS reads of
 * /proc/loadavg's running count and un_pool_own_runnable (which reads a file per thread: ~50 us
 * for a 1-thread process at load 12, 2-core AMD EPYC; read only where the running count alone
 * does not fit), sampled at most every LOAD_SAMPLE_NS; the verdict is kept for the group size it
 * was made for. */
static bool load_allows(int threads, int cores) {
    if (threads > cores)
        return false;
    int64_t t = now_ns(), at = atomic_load_explicit(&load_at, memory_order_relaxed);
    int verdict = atomic_load_explicit(&load_verdict, memory_order_relaxed);
    if (!at || t - at >= LOAD_SAMPLE_NS || verdict >> 1 != threads) {
        atomic_store_explicit(&load_at, t, memory_order_relaxed);
        static const un_pool_load_reader proc = {box_runnable, own_runnable, NULL};
        verdict = threads << 1 | un_pool_load_fits(threads, cores, UN_POOL_LOAD_READS, &proc);
        atomic_store_explicit(&load_verdict, verdict, memory_order_relaxed);
    }
    return verdict & 1;
}

void un_pool_spin_force(int64_t ns) {
    atomic_store_explicit(&spin_forced, ns < 0 ? -1 : ns, memory_order_relaxed);
}

int64_t un_pool_spin_ns(int threads) {
    int64_t forced = atomic_load_explicit(&spin_forced, memory_order_relaxed);
    if (forced >= 0)
        return forced;
    int64_t budget = atomic_load_explicit(&spin_budget, memory_order_relaxed);
    if (budget < 0) {
        const char *env = getenv("UN_SPIN_US");
        char *end = NULL;
        double us = env && *env ? strtod(env, &end) : -1;
        budget = env && *env && end && *end == '\0' && us >= 0 && us <= 1e6 ? (int64_t)(us * 1e3)
                                                                            : UN_POOL_SPIN_NS;
        atomic_store_explicit(&spin_budget, budget, memory_order_relaxed);
    }
    int cores = cores_available();
    if (budget == 0 || !load_allows(threads, cores))
        return 0;
    return budget;
}

bool un_pool_spin_until(bool (*ready)(const void *arg), const void *arg, int64_t ns) {
    if (ready(arg))
        return true;
    if (ns <= 0)
        return false;
    int64_t end = now_ns() + ns;
    for (;;) {
        for (int i = 0; i < 32; i++) {
            cpu_relax();
            if (ready(arg))
                return true;
        }
        if (now_ns() >= end)
            return ready(arg);
    }
}

/* ---- the pool ---- */

struct un_pool {
    int n;              /* threads in all, the caller included */
    pthread_t *workers; /* n - 1 */
    pthread_mutex_t mu;
    pthread_cond_t go;    /* a new loop, or stop */
    pthread_cond_t done;  /* the last worker finished */
    _Atomic uint64_t gen; /* loop generation: written under mu, polled without it */
    _Atomic int pending;  /* workers still running the current loop (polled by the caller) */
    int parts;            /* blocks of the current loop */
    _Atomic bool stop;    /* written under mu, polled without it */
    int64_t len;          /* current loop */
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

typedef struct go_wait {
    un_pool *p;
    uint64_t seen; /* the last loop this worker ran */
} go_wait;

static bool go_ready(const void *arg) {
    const go_wait *w = arg;
    return atomic_load_explicit(&w->p->gen, memory_order_acquire) != w->seen ||
           atomic_load_explicit(&w->p->stop, memory_order_acquire);
}

static bool done_ready(const void *arg) {
    const un_pool *p = arg;
    return atomic_load_explicit(&p->pending, memory_order_acquire) == 0;
}

static void *worker_main(void *argp) {
    worker_arg *wa = argp;
    un_pool *p = wa->p;
    int id = wa->id;
    free(wa);
    uint64_t seen = 0;
    for (;;) {
        /* poll, then sleep under the lock (gen and stop change under it, with a broadcast) */
        un_pool_spin_until(go_ready, &(go_wait){p, seen}, un_pool_spin_ns(p->n));
        pthread_mutex_lock(&p->mu);
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
        /* the caller polls pending, or sleeps under the lock: the signal is sent under it */
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
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
    if (un_pool_spin_until(done_ready, p, un_pool_spin_ns(p->n)))
        return;
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
