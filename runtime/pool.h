/* pool.h - a fixed pool of worker threads with a static-split parallel-for, used by the CPU
 * kernels for element-wise and reduction loops. Not a task scheduler: one loop at a time. Also
 * the spin-then-block wait that the pool and the local communicator (comm_local.c) share.
 *
 *   un_pool *p = un_pool_new(4);                  // the caller plus 3 workers
 *   un_pool_for(p, n, body, &args);               // body(&args, begin, end) on disjoint blocks
 *   un_pool_free(p);
 */
#ifndef UN_POOL_H
#define UN_POOL_H

#include <stdbool.h>
#include <stdint.h>

typedef struct un_pool un_pool;

/* A pool of nthreads threads in all, the caller included (nthreads - 1 workers are started);
 * nthreads <= 1: no threads, loops run on the caller. Owned: free with un_pool_free. Aborts if a
 * thread cannot be started (like a host malloc failure). */
un_pool *un_pool_new(int nthreads);
/* Stops and joins the workers; NULL is a no-op. */
void un_pool_free(un_pool *p);

/* Threads a loop is split over (>= 1; 1 for NULL). */
int un_pool_size(const un_pool *p);

/* Runs fn(arg, begin, end) over [0, n) split into at most un_pool_size(p) contiguous blocks of
 * near-equal size, one per thread (the caller runs the first); every index is covered exactly once
 * and no call gets an empty block. Returns when all are done. n <= 0 calls nothing; p NULL runs
 * fn(arg, 0, n) on the caller. One caller at a time per pool; fn must not call un_pool_for on the
 * same pool. */
void un_pool_for(un_pool *p, int64_t n, void (*fn)(void *arg, int64_t begin, int64_t end),
                 void *arg);

/* Which block of un_pool_for(p, n, ...) starts at begin: 0 .. un_pool_size(p) - 1 (0 for a loop
 * run whole on the caller, begin 0), so that a loop body can use per-thread scratch slots. */
int un_pool_part(const un_pool *p, int64_t n, int64_t begin);

/* ---- spin-then-block waits ----
 * A thread that waits for another thread of its group first polls its condition (a pause
 * instruction between polls) for at most un_pool_spin_ns, then sleeps on its condition variable
 * as before: a wake-up from a futex sleep costs tens of microseconds on another core, which the
 * meet points of a small multi-device step pay several times a step (OpenMP's GOMP_SPINCOUNT,
 * OpenBLAS and NCCL's proxies do the same). The poll reads only atomics the waker writes before
 * its broadcast, under the lock the sleeper holds, so the blocking path loses no wake-up. */

/* How long a thread of a group of `threads` busy threads may poll before it sleeps: 0 (do not
 * spin) unless un_pool_load_fits says yes for the cores this process may run on
 * (sched_getaffinity) and the other processes' runnable threads now (/proc/loadavg's running
 * count less this process's threads in state R, /proc/self/task; up to 3 reads a sample, a
 * sample at most every 20 ms);
 * else UN_POOL_SPIN_NS (pool.c, with the measurement that chose it), or UN_SPIN_US microseconds
 * from the environment (0 turns spinning off; read once). */
int64_t un_pool_spin_ns(int threads);

/* The load rule of un_pool_spin_ns: a group of `threads` threads may poll on `cores` cores, with
 * `runnable` threads runnable on the box of which `own` are this process's, when the group fits
 * the cores and the others (runnable - own) fit the cores it leaves free. Own threads are not
 * others: the group's ranks polling or running, and OpenBLAS's worker, which spins with
 * sched_yield for its first ~0.1 s at every start (counted as load, it turned polling off for
 * the whole of a short 2-rank run on 2 cores). Own threads beyond the group (pool workers when
 * --threads exceeds the cores) do not turn it off either; such pools do not poll themselves
 * (threads > cores). */
bool un_pool_spin_allowed(int threads, int cores, int runnable, int own);

/* The reads of one load sample: the box's runnable threads now (/proc/loadavg) and this
 * process's (un_pool_own_runnable), each called with arg. */
typedef struct un_pool_load_reader {
    int (*runnable)(void *arg);
    int (*own)(void *arg);
    void *arg;
} un_pool_load_reader;

/* Whether a group of `threads` may poll on `cores` cores: up to `reads` reads of the load, back
 * to back, and yes at the first that un_pool_spin_allowed accepts (own is read only where the
 * box's count alone does not fit: runnable > cores - threads); no when none does, or when the
 * group is larger than the cores (nothing read). A thread caught running in one read (another
 * process's passing thread, a rank of this process that slept between the two counts) does not
 * turn polling off; load that stays runnable does. */
bool un_pool_load_fits(int threads, int cores, int reads, const un_pool_load_reader *r);

/* This process's runnable threads now: those in state R in /proc/self/task/TID/stat, the caller
 * among them (as /proc/loadavg counts it); 0 where it cannot be read. */
int un_pool_own_runnable(void);

/* For tests and benchmarks: ns >= 0 makes un_pool_spin_ns return ns for every group, whatever
 * the cores and the load; ns < 0 goes back to the rule above. */
void un_pool_spin_force(int64_t ns);

/* Polls ready(arg) until it returns true (then true) or ns nanoseconds have passed (then false;
 * ns <= 0: one poll). ready must read only atomics. */
bool un_pool_spin_until(bool (*ready)(const void *arg), const void *arg, int64_t ns);

#endif
