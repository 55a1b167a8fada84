/* comm_local.c - the `local` communicator: n threads of one process are the ranks. Collectives
 * are shared-memory copies between barriers; sums run in rank order, so every rank gets the same
 * bits. Exchanges are point to point (a mailbox under the group's lock): only ranks with
 * messages meet, and a receiver copies (or adds) straight from the sender's buffer, outside the
 * lock, so the ranks' copies run at once; small messages go as copies, so that their sender does
 * not wait for the receiver (EAGER_BYTES). A rank that fails calls un_comm_abort, and every later
 * barrier fails instead of hanging. Every wait polls the group's version for a while, then sleeps
 * on its condition variable (group_wait: spin-then-block, runtime/pool.h); taking the group's lock
 * polls it the same way (group_lock), and the sleepers are woken after the lock is let go
 * (group_unlock). */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm_impl.h"
#include "runtime/pool.h"

/* A meet's hand-offs: each time a rank waits on the others, the one that wakes it pays a
 * wake-up on their side (tens of us when it slept: runtime/README.md "Waits at meet points"),
 * and the step's critical path pays it. A small all-reduce therefore meets once (a copy of each
 * rank's values in the group's keeping, then one barrier, then every rank sums them all in rank
 * order) instead of three times, and a small message of an exchange is copied when posted, so its
 * sender does not wait for the receiver to take it (MPI's eager protocol). Small: up to this
 * many bytes (a call's first messages up to this many in all): a copy of 64 KiB takes ~20 us at
 * this box's measured thread copy bandwidth (specs/machines/cpu.json intra_node.bw 3.1 GB/s),
 * below the wake-up it saves (22-56 us, scripts/bench/waits.sh; 24-43 us at the median per meet
 * in tiny mlp data x2's meet trace, scripts/bench/meet_skew.py), and holds little memory. */
#define EAGER_BYTES 65536

/* A block of an eager message's copy, owned by its sender (runtime/comm_local.c keeps them, so a
 * small message costs no malloc and no free on the other rank's thread: in tiny mlp data x2 the
 * per-message malloc, the receiver's free and glibc's arena lock between the two threads were 21 %
 * of the samples). Only the sender's thread walks or changes its list; the receiver, done
 * reading, only clears `busy` (release), which the sender reads (acquire) before reusing it. */
typedef struct eager_blk {
    _Atomic bool busy;
    size_t cap;
    struct eager_blk *next;
    max_align_t data[]; /* cap bytes */
} eager_blk;

typedef struct post {
    eager_blk *blks; /* this rank's eager blocks (its sends') */
    void *buf;       /* allreduce / bcast: this rank's buffer */
    void *slot[2];   /* a small all-reduce's copy of this rank's values, by the call's parity */
    size_t cap[2];   /* their sizes */
    uint64_t small;  /* small all-reduces this rank made */
} post;

/* A message of an exchange waiting for its receiver: exchanges are point to point (only the
 * ranks with messages meet, so ops on disjoint device sets do not wait for each other). The
 * k-th exchange with messages between two ranks pairs with the k-th on the other side. */
typedef struct mail {
    int from, to, tag;
    uint64_t epoch;
    const void *data;
    size_t bytes;
    eager_blk *own; /* an eager message's copy (data): its receiver releases it, drops the mail */
    bool busy;      /* its receiver is reading it (outside the lock) */
    bool taken;     /* read: the sender's buffer is free again */
} mail;

struct un_comm_group {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic uint64_t version; /* bumped under mu, with a broadcast, whenever a waiter may go on */
    bool wake; /* under mu: the version moved, the broadcast is owed (group_unlock) */
    int waiting;
    uint64_t generation;
    bool aborted;
    post *posts;
    un_comm *comms;
    mail *mail; /* posted messages not yet copied */
    int n_mail, cap_mail;
    uint64_t *sent, *recvd; /* [n * n]: exchanges with messages from rank a to rank b so far */
};

static const char *local_name(const un_comm *c) {
    (void)c;
    return "local";
}

/* A meet's release, as a step sees it (the meet trace of xdl tiny data x2, 2,000 steps: each
 * rank let go ~10 us after the last arrival, while the work in between is well under 1 us): the
 * waker broadcast under the lock, so a sleeper it woke went straight to sleep again on the lock
 * the waker still held, and the waker's unlock paid a second wake-up (5 us for the broadcast,
 * then 8 us for the unlock at the median, other jobs running); a poller that saw the version move
 * slept on the same lock. So the lock is polled before a sleep, as the version is, and the
 * broadcast waits until the lock is let go: a woken sleeper then finds it free. A broadcast after
 * the unlock loses no wake-up: the version moved under the lock, so a waiter either saw it move
 * or was asleep on the condition variable before the waker took the lock. */

static bool mutex_taken(const void *arg) {
    return pthread_mutex_trylock((pthread_mutex_t *)(uintptr_t)arg) == 0;
}

/* Takes the group's lock for rank c: tries it for as long as a wait would poll
 * (un_pool_spin_ns), then sleeps on it (counted in c's sleeps; c NULL: an abort, which may come
 * from another thread than the rank's). */
static void group_lock(un_comm_group *g, un_comm *c) {
    if (mutex_taken(&g->mu))
        return;
    int64_t ns = un_pool_spin_ns(g->n);
    if (un_pool_spin_until(mutex_taken, &g->mu, ns))
        return;
    if (c) {
        c->stats.sleeps++;
        c->stats.lock_sleeps++;
        c->stats.unpolled += ns <= 0;
    }
    pthread_mutex_lock(&g->mu);
}

/* Under mu: a change a waiter may be waiting for (a barrier's last arrival, a posted or taken
 * message, an abort); the waiters are woken when the lock is let go (group_unlock, group_wait). */
static void group_notify(un_comm_group *g) {
    atomic_fetch_add_explicit(&g->version, 1, memory_order_release);
    g->wake = true;
}

/* Lets the group's lock go, then wakes the sleepers if a group_notify under it owes them that. */
static void group_unlock(un_comm_group *g) {
    bool wake = g->wake;
    g->wake = false;
    pthread_mutex_unlock(&g->mu);
    if (wake)
        pthread_cond_broadcast(&g->cv);
}

typedef struct version_wait {
    const un_comm_group *g;
    uint64_t seen;
} version_wait;

static bool version_moved(const void *arg) {
    const version_wait *w = arg;
    return atomic_load_explicit(&w->g->version, memory_order_acquire) != w->seen;
}

/* Under mu, for rank c's caller that loops on its condition: returns after a group_notify since
 * the call (or spuriously). Polls the version outside the lock first; then sleeps unless the
 * version moved meanwhile (it moves only under mu, so the sleep misses no broadcast). */
static void group_wait(un_comm_group *g, un_comm *c) {
    version_wait w = {g, atomic_load_explicit(&g->version, memory_order_relaxed)};
    int64_t ns = un_pool_spin_ns(g->n);
    if (ns > 0) {
        group_unlock(g);
        bool moved = un_pool_spin_until(version_moved, &w, ns);
        group_lock(g, c);
        if (moved)
            return;
    }
    if (!version_moved(&w)) {
        if (g->wake) { /* this rank's own notify: the sleep lets the lock go without group_unlock */
            g->wake = false;
            pthread_cond_broadcast(&g->cv);
        }
        c->stats.sleeps++;
        c->stats.unpolled += ns <= 0;
        pthread_cond_wait(&g->cv, &g->mu);
    }
}

static un_status local_barrier(un_ctx *ctx, un_comm *c) {
    un_comm_group *g = c->context;
    group_lock(g, c);
    if (!g->aborted) {
        uint64_t gen = g->generation;
        if (++g->waiting == g->n) {
            g->waiting = 0;
            g->generation++;
            group_notify(g);
        } else {
            while (gen == g->generation && !g->aborted)
                group_wait(g, c);
        }
    }
    bool aborted = g->aborted;
    group_unlock(g);
    if (aborted)
        return un_ctx_error(ctx, UN_ERR_DEVICE, "local rank %d: another rank failed", c->rank);
    return UN_OK;
}

static void local_abort(un_comm *c) {
    un_comm_group *g = c->context;
    group_lock(g, NULL);
    g->aborted = true;
    group_notify(g);
    group_unlock(g);
}

/* o[0 .. e - b) = the sum over ranks, in rank order, of their elements [b, e): each rank's
 * buffer (slot < 0) or its copy in that slot. */
static void sum_ranks(const un_comm_group *g, un_red_type t, int slot, void *o, int64_t b,
                      int64_t e) {
    for (int r = 0; r < g->n; r++) {
        const void *x = slot < 0 ? g->posts[r].buf : g->posts[r].slot[slot];
        if (t == UN_RED_F32)
            for (int64_t i = b; i < e; i++)
                ((float *)o)[i - b] = (r ? ((float *)o)[i - b] : 0.0f) + ((const float *)x)[i];
        else
            for (int64_t i = b; i < e; i++)
                ((double *)o)[i - b] = (r ? ((double *)o)[i - b] : 0.0) + ((const double *)x)[i];
    }
}

/* A small all-reduce: this rank's copy goes into its slot of the call's parity (a rank that
 * writes that slot again has passed the next call's barrier, so every rank has read it), one
 * barrier, then every rank sums every slot in rank order. */
static un_status small_allreduce(un_ctx *ctx, un_comm *c, un_red_type t, void *buf, int64_t n) {
    un_comm_group *g = c->context;
    size_t bytes = (size_t)n * (t == UN_RED_F32 ? sizeof(float) : sizeof(double));
    post *me = &g->posts[c->rank];
    int k = (int)(me->small++ & 1);
    if (me->cap[k] < bytes) {
        me->slot[k] = un_xrealloc(me->slot[k], bytes);
        me->cap[k] = bytes;
    }
    memcpy(me->slot[k], buf, bytes);
    un_status st = local_barrier(ctx, c);
    if (st == UN_OK)
        sum_ranks(g, t, k, buf, 0, n);
    return st;
}

static un_status local_allreduce(un_ctx *ctx, un_comm *c, un_red_type t, void *buf, int64_t n) {
    un_comm_group *g = c->context;
    size_t es = t == UN_RED_F32 ? sizeof(float) : sizeof(double);
    if ((size_t)n * es <= EAGER_BYTES)
        return small_allreduce(ctx, c, t, buf, n);
    int64_t b = n * c->rank / c->size, e = n * (c->rank + 1) / c->size;
    void *tmp = malloc((size_t)(e > b ? e - b : 1) * es);
    if (!tmp) {
        local_abort(c);
        return un_ctx_error(ctx, UN_ERR_NOMEM, "allreduce: out of memory");
    }
    g->posts[c->rank].buf = buf;
    un_status st = local_barrier(ctx, c);
    if (st == UN_OK) {
        sum_ranks(g, t, -1, tmp, b, e); /* this rank's chunk */
        st = local_barrier(ctx, c);     /* everyone has read every input */
    }
    if (st == UN_OK) {
        for (int r = 0; r < g->n; r++)
            memcpy((char *)g->posts[r].buf + (size_t)b * es, tmp, (size_t)(e - b) * es);
        st = local_barrier(ctx, c);
    }
    free(tmp);
    return st;
}

static un_status local_bcast(un_ctx *ctx, un_comm *c, int root, void *buf, size_t bytes) {
    un_comm_group *g = c->context;
    g->posts[c->rank].buf = buf;
    un_status st = local_barrier(ctx, c);
    if (st != UN_OK)
        return st;
    if (c->rank != root)
        memcpy(buf, g->posts[root].buf, bytes);
    return local_barrier(ctx, c);
}

/* A free block of this rank's of at least `bytes` (post.blks): one whose receiver is done with
 * it, grown if it is too small, else a new one. Owned by the calling rank's thread. */
static eager_blk *eager_get(post *me, size_t bytes) {
    eager_blk **at = NULL;
    for (eager_blk **b = &me->blks; *b; b = &(*b)->next) {
        if (atomic_load_explicit(&(*b)->busy, memory_order_acquire))
            continue;
        if ((*b)->cap >= bytes) {
            at = b;
            break;
        }
        at = at ? at : b; /* the first free one, to grow if none is large enough */
    }
    eager_blk *k;
    if (at && (*at)->cap >= bytes) {
        k = *at;
    } else if (at) { /* free, so no receiver reads it: it may move */
        eager_blk *next = (*at)->next;
        k = *at = un_xrealloc(*at, sizeof *k + bytes);
        k->cap = bytes;
        k->next = next;
    } else {
        k = un_xmalloc(sizeof *k + (bytes ? bytes : 1));
        k->cap = bytes;
        k->next = me->blks;
        me->blks = k;
    }
    atomic_store_explicit(&k->busy, true, memory_order_relaxed);
    return k;
}

/* The receiver is done reading block k: its sender may reuse it. */
static void eager_put(eager_blk *k) {
    atomic_store_explicit(&k->busy, false, memory_order_release);
}

/* Up to this many messages a call, the exchange's bookkeeping lives on the stack. */
#define STACK_MSGS 16

static un_status local_exchange(un_ctx *ctx, un_comm *c, const un_comm_msg *sends, int n_sends,
                                const un_comm_msg *recvs, int n_recvs) {
    un_comm_group *g = c->context;
    int me = c->rank, n = g->n;
    un_status st = UN_OK;
    /* the call's first messages to other ranks, up to EAGER_BYTES in all, go as copies */
    eager_blk *own_s[STACK_MSGS] = {0};
    eager_blk **own = n_sends <= STACK_MSGS ? own_s : un_xcalloc((size_t)n_sends, sizeof *own);
    size_t eager = 0;
    for (int i = 0; i < n_sends; i++) {
        if (sends[i].peer == me || eager + sends[i].bytes > EAGER_BYTES)
            continue;
        eager += sends[i].bytes;
        own[i] = eager_get(&g->posts[me], sends[i].bytes);
        memcpy(own[i]->data, sends[i].data, sends[i].bytes);
    }
    group_lock(g, c);
    /* post the sends, numbered by this call's epoch with each receiver */
    for (int i = 0; i < n_sends; i++) {
        if (g->n_mail == g->cap_mail) {
            g->cap_mail = g->cap_mail ? 2 * g->cap_mail : 64;
            g->mail = un_xrealloc(g->mail, (size_t)g->cap_mail * sizeof *g->mail);
        }
        g->mail[g->n_mail++] = (mail){me,
                                      sends[i].peer,
                                      sends[i].tag,
                                      g->sent[(size_t)me * (size_t)n + (size_t)sends[i].peer],
                                      own[i] ? (const void *)own[i]->data : sends[i].data,
                                      sends[i].bytes,
                                      own[i],
                                      false,
                                      false};
    }
    for (int i = 0; i < n_sends; i++) { /* one epoch per peer and call */
        bool first = true;
        for (int j = 0; j < i && first; j++)
            first = sends[j].peer != sends[i].peer;
        if (first)
            g->sent[(size_t)me * (size_t)n + (size_t)sends[i].peer]++;
    }
    group_notify(g);
    /* take the receives, in list order, a run at a time: the run of them posted by now is found
     * under the lock (an eager message leaves the mailbox with its copy, now this rank's), read
     * outside it (the sender of any other waits until it is taken, so its buffer stays put), and
     * its other messages are marked taken under the lock again: two lock round trips a run, not
     * two a message */
    const void *src_s[STACK_MSGS] = {0};
    const void **src = n_recvs <= STACK_MSGS ? src_s : un_xcalloc((size_t)n_recvs, sizeof *src);
    eager_blk *got_s[STACK_MSGS] = {0}; /* eager copies */
    eager_blk **got = n_recvs <= STACK_MSGS ? got_s : un_xcalloc((size_t)n_recvs, sizeof *got);
    for (int i = 0; i < n_recvs && st == UN_OK;) {
        int k = i;
        for (;;) {
            for (; k < n_recvs && st == UN_OK; k++) {
                const un_comm_msg *rv = &recvs[k];
                uint64_t epoch = g->recvd[(size_t)rv->peer * (size_t)n + (size_t)me];
                int j = 0;
                while (j < g->n_mail && !(g->mail[j].from == rv->peer && g->mail[j].to == me &&
                                          g->mail[j].tag == rv->tag && g->mail[j].epoch == epoch &&
                                          !g->mail[j].taken && !g->mail[j].busy))
                    j++;
                if (j == g->n_mail)
                    break;
                if (g->mail[j].bytes != rv->bytes) {
                    g->aborted = true;
                    st = un_ctx_error(ctx, UN_ERR_DEVICE,
                                      "local rank %d: message from rank %d (tag %d) has %zu bytes, "
                                      "%zu expected",
                                      me, rv->peer, rv->tag, g->mail[j].bytes, rv->bytes);
                    break;
                }
                src[k] = g->mail[j].data;
                got[k] = g->mail[j].own;
                if (got[k]) /* an eager message: no sender waits for it */
                    memmove(&g->mail[j], &g->mail[j + 1],
                            (size_t)(g->n_mail - j - 1) * sizeof *g->mail);
                else
                    g->mail[j].busy = true;
                g->n_mail -= got[k] != NULL;
            }
            if (k > i || st != UN_OK || g->aborted)
                break;
            group_wait(g, c);
        }
        if (k == i) {
            if (st == UN_OK)
                st = un_ctx_error(ctx, UN_ERR_DEVICE, "local rank %d: another rank failed", me);
            break;
        }
        group_unlock(g);
        for (int m = i; m < k; m++) {
            if (recvs[m].add)
                un__comm_add(recvs[m].type, recvs[m].data, src[m], recvs[m].bytes);
            else
                memcpy(recvs[m].data, src[m], recvs[m].bytes);
            if (got[m])
                eager_put(got[m]);
        }
        group_lock(g, c);
        bool taken = false;
        for (int m = i; m < k; m++) {
            if (got[m])
                continue;
            const un_comm_msg *rv = &recvs[m];
            uint64_t epoch = g->recvd[(size_t)rv->peer * (size_t)n + (size_t)me];
            int j = 0; /* found again: the array may have moved, the message has not gone */
            while (!(g->mail[j].from == rv->peer && g->mail[j].to == me &&
                     g->mail[j].tag == rv->tag && g->mail[j].epoch == epoch && g->mail[j].busy))
                j++;
            g->mail[j].busy = false;
            g->mail[j].taken = taken = true;
        }
        if (taken)
            group_notify(g);
        i = k;
    }
    if (src != src_s)
        free(src);
    if (got != got_s)
        free(got);
    for (int i = 0; i < n_recvs; i++) {
        bool first = true;
        for (int j = 0; j < i && first; j++)
            first = recvs[j].peer != recvs[i].peer;
        if (first)
            g->recvd[(size_t)recvs[i].peer * (size_t)n + (size_t)me]++;
    }
    /* wait until this rank's sends are copied (its buffers may then be reused), drop them; after
     * an abort only until no receiver is still reading one */
    for (;;) {
        bool pending = false;
        for (int j = 0; j < g->n_mail && !pending; j++)
            pending = g->mail[j].from == me && !g->mail[j].own &&
                      (g->mail[j].busy || (!g->mail[j].taken && !g->aborted));
        if (!pending)
            break;
        group_wait(g, c);
    }
    int k = 0;
    for (int j = 0; j < g->n_mail; j++)
        if (!(g->mail[j].from == me && g->mail[j].taken))
            g->mail[k++] = g->mail[j];
    g->n_mail = k;
    if (st == UN_OK && g->aborted)
        st = un_ctx_error(ctx, UN_ERR_DEVICE, "local rank %d: another rank failed", me);
    if (st != UN_OK)
        group_notify(g);
    group_unlock(g);
    if (own != own_s)
        free(own);
    return st;
}

static const struct un_comm_i local_iface = {
    .name = local_name,
    .free = NULL,
    .barrier = local_barrier,
    .allreduce = local_allreduce,
    .bcast = local_bcast,
    .exchange = local_exchange,
    .abort = local_abort,
};

un_status un_comm_local_group_new(un_ctx *ctx, int n, un_comm_group **out) {
    *out = NULL;
    if (n < 1 || n > 4096)
        return un_ctx_error(ctx, UN_ERR_INVALID, "local communicator: %d ranks (1..4096)", n);
    un_comm_group *g = un_xcalloc(1, sizeof *g);
    g->n = n;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->posts = un_xcalloc((size_t)n, sizeof *g->posts);
    g->comms = un_xcalloc((size_t)n, sizeof *g->comms);
    g->sent = un_xcalloc((size_t)n * (size_t)n, sizeof *g->sent);
    g->recvd = un_xcalloc((size_t)n * (size_t)n, sizeof *g->recvd);
    for (int r = 0; r < n; r++)
        g->comms[r] = (un_comm){.api_version = UN_COMM_API_VERSION,
                                .iface = &local_iface,
                                .rank = r,
                                .size = n,
                                .node_size = n,
                                .node_rank = r,
                                .context = g};
    *out = g;
    return UN_OK;
}

void un_comm_local_group_free(un_comm_group *g) {
    if (!g)
        return;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    for (int r = 0; r < g->n; r++) {
        free(g->posts[r].slot[0]);
        free(g->posts[r].slot[1]);
        free(g->comms[r].trace);
    }
    for (int r = 0; r < g->n; r++) /* every block, read or not: the ranks are gone */
        for (eager_blk *k = g->posts[r].blks, *next; k; k = next) {
            next = k->next;
            free(k);
        }
    free(g->posts);
    free(g->comms);
    free(g->mail);
    free(g->sent);
    free(g->recvd);
    free(g);
}

un_comm *un_comm_local_get(un_comm_group *g, int r) {
    UN_ASSERT(r >= 0 && r < g->n);
    return &g->comms[r];
}
