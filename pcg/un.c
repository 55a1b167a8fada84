/* un.c - status strings, the error-carrying context, host allocation, RNG, hashing, arena. */
#include "pcg/un.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct un_ctx {
    un_alloc alloc;
    uint64_t seed;
    int log_level;
    un_status status;
    char msg[1024];
    un_progress_fn progress;
    void *progress_user;
};

static const char *const un__status_names[UN_STATUS_COUNT] = {
#define X(n, s) s,
    UN_STATUS_LIST(X)
#undef X
};

const char *un_status_str(un_status st) {
    if ((int)st < 0 || st >= UN_STATUS_COUNT)
        return "unknown status";
    return un__status_names[st];
}

_Noreturn void un_abort(const char *file, int line, const char *what) {
    fflush(stdout);
    fprintf(stderr, "%s:%d: %s\n", file, line, what);
    abort();
}

void *un_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p)
        un_abort(__FILE__, __LINE__, "out of host memory");
    return p;
}

void *un_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        un_abort(__FILE__, __LINE__, "out of host memory");
    return p;
}

void *un_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q)
        un_abort(__FILE__, __LINE__, "out of host memory");
    return q;
}

double un_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double un_median(double *v, int n) {
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, un_cmp_double);
    return v[n / 2];
}

int un_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

char *un_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = un_xmalloc(n);
    memcpy(d, s, n);
    return d;
}

un_ctx_params un_ctx_params_default(void) {
    un_ctx_params p = {.alloc = {0}, .seed = 1234, .log_level = 0};
    return p;
}

un_ctx *un_ctx_new(const un_ctx_params *params) {
    un_ctx_params p = params ? *params : un_ctx_params_default();
    un_ctx *ctx = un_xcalloc(1, sizeof *ctx);
    ctx->alloc = p.alloc;
    ctx->seed = p.seed;
    ctx->log_level = p.log_level;
    ctx->status = UN_OK;
    return ctx;
}

un_ctx *un_ctx_new_child(const un_ctx *parent) {
    if (!parent)
        return un_ctx_new(NULL);
    un_ctx_params p = {
        .alloc = parent->alloc, .seed = parent->seed, .log_level = parent->log_level};
    un_ctx *ctx = un_ctx_new(&p);
    ctx->progress = parent->progress;
    ctx->progress_user = parent->progress_user;
    return ctx;
}

void un_ctx_free(un_ctx *ctx) { free(ctx); }

void un_ctx_set_progress(un_ctx *ctx, un_progress_fn fn, void *user) {
    ctx->progress = fn;
    ctx->progress_user = user;
}

bool un_ctx_has_progress(const un_ctx *ctx) { return ctx && ctx->progress; }

void un_ctx_progress(un_ctx *ctx, const char *fmt, ...) {
    if (!un_ctx_has_progress(ctx))
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    ctx->progress(ctx->progress_user, line);
}

void un_ctx_progress_done(un_ctx *ctx) {
    if (un_ctx_has_progress(ctx))
        ctx->progress(ctx->progress_user, NULL);
}

void un_progress_stderr(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "\r\033[K%s", line ? line : "");
    fflush(stderr);
}

un_status un_ctx_verror(un_ctx *ctx, un_status st, const char *fmt, va_list ap) {
    if (ctx && ctx->status == UN_OK && st != UN_OK) {
        ctx->status = st;
        vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
    }
    return st;
}

un_status un_ctx_error(un_ctx *ctx, un_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    un_ctx_verror(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}

const char *un_ctx_errmsg(const un_ctx *ctx) { return ctx ? ctx->msg : ""; }
un_status un_ctx_status(const un_ctx *ctx) { return ctx ? ctx->status : UN_OK; }
int un_ctx_log_level(const un_ctx *ctx) { return ctx ? ctx->log_level : 0; }
uint64_t un_ctx_seed(const un_ctx *ctx) { return ctx ? ctx->seed : 1234; }

void un_ctx_clear(un_ctx *ctx) {
    ctx->status = UN_OK;
    ctx->msg[0] = '\0';
}

void *un_ctx_malloc(un_ctx *ctx, size_t n) {
    if (ctx && ctx->alloc.malloc)
        return ctx->alloc.malloc(n ? n : 1, ctx->alloc.user);
    return malloc(n ? n : 1);
}

void *un_ctx_calloc(un_ctx *ctx, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size)
        return NULL;
    size_t total = n * size;
    void *p = un_ctx_malloc(ctx, total);
    if (p)
        memset(p, 0, total ? total : 1);
    return p;
}

void *un_ctx_realloc(un_ctx *ctx, void *p, size_t n) {
    if (ctx && ctx->alloc.realloc)
        return ctx->alloc.realloc(p, n ? n : 1, ctx->alloc.user);
    return realloc(p, n ? n : 1);
}

void un_ctx_free_mem(un_ctx *ctx, void *p) {
    if (!p)
        return;
    if (ctx && ctx->alloc.free) {
        ctx->alloc.free(p, ctx->alloc.user);
        return;
    }
    free(p);
}

/* ---- RNG and hashing ---- */

uint64_t un_hash_bytes(const void *p, size_t n, uint64_t h) {
    const unsigned char *c = p;
    h ^= 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 0x100000001b3ull;
    }
    return un_mix64(h);
}

void un_rng_seed(un_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {
        x = un_mix64(x + (uint64_t)i);
        r->s[i] = x;
    }
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t un_rng_next(un_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t un_rng_below(un_rng *r, uint64_t n) {
    UN_ASSERT(n > 0);
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = un_rng_next(r);
    } while (x >= lim);
    return x % n;
}

double un_rng_double(un_rng *r) {
    return (double)(un_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- arena ---- */

typedef struct un_chunk {
    struct un_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
} un_chunk;

struct un_arena {
    un_chunk *head;
    size_t chunk;
    size_t total;
};

un_arena *un_arena_new(size_t chunk) {
    un_arena *a = un_xcalloc(1, sizeof *a);
    a->chunk = chunk < 256 ? 256 : chunk;
    return a;
}

void un_arena_free(un_arena *a) {
    if (!a)
        return;
    un_chunk *c = a->head;
    while (c) {
        un_chunk *n = c->next;
        free(c);
        c = n;
    }
    free(a);
}

void *un_arena_alloc(un_arena *a, size_t size, size_t align) {
    if (align == 0)
        align = 8;
    UN_ASSERT((align & (align - 1)) == 0 && align <= 16);
    un_chunk *c = a->head;
    size_t off = c ? (c->used + align - 1) & ~(align - 1) : 0;
    if (!c || off + size > c->size) {
        size_t sz = size > a->chunk ? size : a->chunk;
        c = un_xmalloc(sizeof *c + sz);
        c->size = sz;
        c->used = 0;
        c->next = a->head;
        a->head = c;
        off = 0;
    }
    void *p = c->data + off;
    c->used = off + size;
    a->total += size;
    memset(p, 0, size);
    return p;
}

char *un_arena_strdup(un_arena *a, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = un_arena_alloc(a, n, 1);
    memcpy(d, s, n);
    return d;
}

void un_arena_reset(un_arena *a) {
    /* keep the newest chunk, drop the rest */
    un_chunk *c = a->head;
    if (!c)
        return;
    un_chunk *n = c->next;
    while (n) {
        un_chunk *nn = n->next;
        free(n);
        n = nn;
    }
    c->next = NULL;
    c->used = 0;
    a->total = 0;
}

size_t un_arena_used(const un_arena *a) { return a->total; }

/* ---- hash map ---- */

/* k's slot (k != 0, m->cap > 0): where it is, or the empty slot where it would go */
static int64_t hmap_slot(const un_hmap *m, uint64_t k) {
    int64_t i = (int64_t)(un_mix64(k) & (uint64_t)(m->cap - 1));
    while (m->key[i] && m->key[i] != k)
        i = (i + 1) & (m->cap - 1);
    return i;
}

bool un_hmap_get(const un_hmap *m, uint64_t k, double *val) {
    if (!k) {
        if (m->has_zero && val)
            *val = m->zero;
        return m->has_zero;
    }
    if (!m->cap)
        return false;
    int64_t i = hmap_slot(m, k);
    if (!m->key[i])
        return false;
    if (val)
        *val = m->val ? m->val[i] : 0;
    return true;
}

/* k's slot (k != 0), added with value 0 when absent (*added) */
static int64_t hmap_insert(un_hmap *m, uint64_t k, bool *added) {
    if (2 * (m->n + 1) > m->cap) {
        un_hmap old = *m;
        m->cap = old.cap ? 2 * old.cap : 64;
        m->key = un_xcalloc((size_t)m->cap, sizeof *m->key);
        m->val = old.val ? un_xcalloc((size_t)m->cap, sizeof *m->val) : NULL;
        for (int64_t i = 0; i < old.cap; i++)
            if (old.key[i]) {
                int64_t j = hmap_slot(m, old.key[i]);
                m->key[j] = old.key[i];
                if (old.val)
                    m->val[j] = old.val[i];
            }
        free(old.key);
        free(old.val);
    }
    int64_t i = hmap_slot(m, k);
    *added = !m->key[i];
    if (*added) {
        m->key[i] = k;
        m->n++;
    }
    return i;
}

static void hmap_set(un_hmap *m, int64_t i, double v) {
    if (!m->val && v != 0)
        m->val = un_xcalloc((size_t)m->cap, sizeof *m->val);
    if (m->val)
        m->val[i] = v;
}

bool un_hmap_add(un_hmap *m, uint64_t k, double v) {
    bool added;
    if (!k) {
        added = !m->has_zero;
        if (added) {
            m->has_zero = true;
            m->zero = v;
            m->n++;
        }
        return added;
    }
    int64_t i = hmap_insert(m, k, &added);
    if (added)
        hmap_set(m, i, v);
    return added;
}

void un_hmap_put(un_hmap *m, uint64_t k, double v) {
    if (!k) {
        m->n += !m->has_zero;
        m->has_zero = true;
        m->zero = v;
        return;
    }
    bool added;
    hmap_set(m, hmap_insert(m, k, &added), v);
}

int64_t un_hmap_keys(const un_hmap *m, uint64_t *keys) {
    int64_t u = 0;
    if (m->has_zero)
        keys[u++] = 0;
    for (int64_t i = 0; i < m->cap; i++)
        if (m->key[i])
            keys[u++] = m->key[i];
    return u;
}

void un_hmap_deinit(un_hmap *m) {
    free(m->key);
    free(m->val);
    *m = (un_hmap){0};
}

/* ---- buffer ---- */

void un_buf_printf(un_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_end(ap2);
        return;
    }
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        b->data = un_xrealloc(b->data, cap);
        b->cap = cap;
    }
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
}

void un_buf_deinit(un_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- files ---- */

const char *un_tmp_dir(size_t max_len) {
    const char *d = getenv("TMPDIR");
    return d && d[0] && strlen(d) < max_len ? d : "/tmp";
}

un_status un_read_file(un_ctx *ctx, const char *path, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return un_ctx_error(ctx, UN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0, got;
    char *buf = un_xmalloc(cap + 1);
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap)
            buf = un_xrealloc(buf, (cap *= 2) + 1);
    }
    int err = ferror(f);
    fclose(f);
    if (err || n == 0) {
        free(buf);
        return err ? un_ctx_error(ctx, UN_ERR_IO, "%s: read error", path)
                   : un_ctx_error(ctx, UN_ERR_PARSE, "%s: empty file", path);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return UN_OK;
}
