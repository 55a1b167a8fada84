/* un.h - cross-cutting basics shared by every part: status codes, the context that carries
 * the first detailed error, allocation hooks, a seeded RNG, and an arena allocator.
 * It knows nothing about graphs or operators.
 *
 *   un_ctx *ctx = un_ctx_new(NULL);
 *   un_status st = un_spec_load(ctx, "specs/ops.json", &spec);
 *   if (st != UN_OK) fprintf(stderr, "%s: %s\n", un_status_str(st), un_ctx_errmsg(ctx));
 *   un_ctx_free(ctx);
 */
#ifndef UN_UN_H
#define UN_UN_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- status codes ---------------------------------------------------------------------------- */

#define UN_STATUS_LIST(X)                                                                          \
    X(OK, "ok")                                                                                    \
    X(ERR_INVALID, "invalid argument")                                                             \
    X(ERR_PARSE, "parse error")                                                                    \
    X(ERR_SPEC, "invalid spec")                                                                    \
    X(ERR_SHAPE, "shape or layout error")                                                          \
    X(ERR_IO, "i/o error")                                                                         \
    X(ERR_NOMEM, "out of memory")                                                                  \
    X(ERR_DB, "database error")                                                                    \
    X(ERR_MISMATCH, "values differ")                                                               \
    X(ERR_UNAVAILABLE, "not available in this build")                                              \
    X(ERR_DEVICE, "device error")                                                                  \
    X(ERR_LIMIT, "limit exceeded")

typedef enum {
#define X(n, s) UN_##n,
    UN_STATUS_LIST(X)
#undef X
        UN_STATUS_COUNT
} un_status;

/* Short static description of a status code; never NULL. */
const char *un_status_str(un_status st);

/* ---- invariants and host allocation ---------------------------------------------------------- */

_Noreturn void un_abort(const char *file, int line, const char *what);
#define UN_ASSERT(x)                                                                               \
    do {                                                                                           \
        if (!(x))                                                                                  \
            un_abort(__FILE__, __LINE__, "UN_ASSERT(" #x ") failed");                              \
    } while (0)

/* Allocation hooks; a test allocator can fail on purpose. */
typedef struct un_alloc {
    void *(*malloc)(size_t n, void *user);
    void *(*realloc)(void *p, size_t n, void *user);
    void (*free)(void *p, void *user);
    void *user;
} un_alloc;

/* Small host objects: abort on failure (like Redis zmalloc). */
void *un_xmalloc(size_t n);
void *un_xcalloc(size_t n, size_t size);
void *un_xrealloc(void *p, size_t n);
char *un_xstrdup(const char *s);

/* Seconds on the monotonic clock (for durations; not a time of day). */
double un_now_s(void);
/* qsort comparator of doubles, ascending. */
int un_cmp_double(const void *a, const void *b);
/* The median of v[0..n) (the upper one for even n; v is sorted in place); 0 when n <= 0. */
double un_median(double *v, int n);

/* ---- context --------------------------------------------------------------------------------- */

typedef struct un_ctx un_ctx;

typedef struct un_ctx_params {
    un_alloc alloc; /* all fields NULL = libc */
    uint64_t seed;  /* RNG seed, default 1234 */
    int log_level;  /* 0 quiet, 1 info, 2 debug */
} un_ctx_params;

un_ctx_params un_ctx_params_default(void);

/* New context; params may be NULL for defaults. Owned: free with un_ctx_free. */
un_ctx *un_ctx_new(const un_ctx_params *params);
/* A context for a worker thread or a scratch attempt: it keeps the parent's allocator, seed, log
 * level and progress callback, with an error state of its own. parent may be NULL (= defaults).
 * Owned: free with un_ctx_free; the parent must outlive it. */
un_ctx *un_ctx_new_child(const un_ctx *parent);
void un_ctx_free(un_ctx *ctx);

/* Records the first error (later ones do not overwrite it) and returns st. */
un_status un_ctx_error(un_ctx *ctx, un_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
un_status un_ctx_verror(un_ctx *ctx, un_status st, const char *fmt, va_list ap);
/* The first recorded message, "" when none. Borrowed, valid until un_ctx_clear/un_ctx_free. */
const char *un_ctx_errmsg(const un_ctx *ctx);
un_status un_ctx_status(const un_ctx *ctx);
void un_ctx_clear(un_ctx *ctx);
int un_ctx_log_level(const un_ctx *ctx);

/* Progress of long-running library work. Library code never writes to the terminal: it reports a
 * one-line status through the context's callback, and a program's main decides where it goes
 * (un_progress_stderr redraws one line on a terminal). line is NULL when the work is done and the
 * line should be cleared. Without a callback (the default) reports cost nothing. */
typedef void (*un_progress_fn)(void *user, const char *line);
void un_ctx_set_progress(un_ctx *ctx, un_progress_fn fn, void *user);
bool un_ctx_has_progress(const un_ctx *ctx);
void un_ctx_progress(un_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void un_ctx_progress_done(un_ctx *ctx);
/* A callback for mains: redraws the line in place on stderr, clears it when done. */
void un_progress_stderr(void *user, const char *line);

/* Allocation through the context's hooks; these may return NULL (tests inject failures). */
void *un_ctx_malloc(un_ctx *ctx, size_t n);
void *un_ctx_calloc(un_ctx *ctx, size_t n, size_t size);
void *un_ctx_realloc(un_ctx *ctx, void *p, size_t n);
void un_ctx_free_mem(un_ctx *ctx, void *p);

/* ---- random numbers (xoshiro256**, seeded from the context) ---------------------------------- */

typedef struct un_rng {
    uint64_t s[4];
} un_rng;

void un_rng_seed(un_rng *r, uint64_t seed);
uint64_t un_rng_next(un_rng *r);
/* Uniform in [0, n); n > 0. */
uint64_t un_rng_below(un_rng *r, uint64_t n);
/* Uniform in [0, 1). */
double un_rng_double(un_rng *r);
/* The context's seed (for deriving reproducible streams). */
uint64_t un_ctx_seed(const un_ctx *ctx);

/* 64-bit mixing and hashing helpers (splitmix64 finalizer and FNV-1a), stable across runs.
 * un_mix64 and un_hash_combine are inline: the generator's value hashes and every graph hash call
 * them per element (as out-of-line calls they took 12 % of unity-gen's time). */
static inline uint64_t un_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
uint64_t un_hash_bytes(const void *p, size_t n, uint64_t h);
static inline uint64_t un_hash_combine(uint64_t h, uint64_t v) {
    return un_mix64(h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)));
}

/* ---- a hash map of 64-bit keys to doubles (open addressing, linear probing) ------------------ */

/* Zero-initialise ({0}) to use; un_hmap_deinit frees. Any 64-bit key may be stored, 0 included.
 * Used as a set (every value 0), it holds no value array. */
typedef struct un_hmap {
    uint64_t *key;  /* cap slots; 0 marks an empty one (the key 0 is held apart: has_zero) */
    double *val;    /* cap values, NULL until a value other than 0 is stored */
    int64_t n, cap; /* n: keys held, 0 included; cap: 0 or a power of two */
    bool has_zero;
    double zero; /* the key 0's value */
} un_hmap;

/* Whether k is in m; its value into *val when val is not NULL. */
bool un_hmap_get(const un_hmap *m, uint64_t k, double *val);
/* Adds k with value v when k is absent (a present key keeps its value); true when it was added. */
bool un_hmap_add(un_hmap *m, uint64_t k, double v);
/* Sets k's value to v, adding k when absent. */
void un_hmap_put(un_hmap *m, uint64_t k, double v);
/* The keys of m into keys (room for m->n of them), in no particular order; returns m->n. */
int64_t un_hmap_keys(const un_hmap *m, uint64_t *keys);
void un_hmap_deinit(un_hmap *m);

/* ---- arena ----------------------------------------------------------------------------------- */

typedef struct un_arena un_arena;

/* An arena grows in chunks of at least chunk bytes. Owned: free with un_arena_free. */
un_arena *un_arena_new(size_t chunk);
void un_arena_free(un_arena *a);
/* Zeroed memory valid until un_arena_reset/un_arena_free; aborts on host OOM. */
void *un_arena_alloc(un_arena *a, size_t size, size_t align);
char *un_arena_strdup(un_arena *a, const char *s);
void un_arena_reset(un_arena *a);
size_t un_arena_used(const un_arena *a);

/* ---- files ---------------------------------------------------------------------------------- */

/* Reads a whole file; *out is NUL-terminated, owned (free with free()). An unreadable or empty file
 * is an error naming the path (UN_ERR_IO / UN_ERR_PARSE). */
un_status un_read_file(un_ctx *ctx, const char *path, char **out, size_t *len);

/* Where temporary files go: $TMPDIR when set and shorter than max_len, else "/tmp". Static. */
const char *un_tmp_dir(size_t max_len);

/* ---- small string buffer used for messages and serialisation --------------------------------- */

typedef struct un_buf {
    char *data; /* NUL-terminated, owned */
    size_t len;
    size_t cap;
} un_buf;

void un_buf_printf(un_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void un_buf_deinit(un_buf *b);

#endif
