/* rulesdb.h - the rule database over SQLite (DESIGN.md section 5, issue 3): rules with their
 * canonical hash (unique), status and verdict, provenance and the spec set they were generated and
 * verified against; runs; and the measured op-cost cache. The generator inserts candidates, the
 * verifier writes verdicts and unity-train reads verified rules, possibly all at the same time
 * (WAL, busy timeout). Batches are transactions: a killed writer leaves whole batches only.
 * sqlite3.h is included by rulesdb.c alone.
 *
 *   un_rulesdb *db;
 *   st = un_rulesdb_open(ctx, "rules.db", spec, UN_RULESDB_CREATE, &db);
 *   st = un_rulesdb_run_begin(ctx, db, "unity-gen", "--max-ops 3", &run);
 *   st = un_rulesdb_begin(ctx, db);
 *   st = un_rulesdb_rule_insert(ctx, db, rule, &(un_rulesdb_origin){.kind = "generated", .run =
 * run}, &id, &inserted); st = un_rulesdb_commit(ctx, db); st = un_rulesdb_run_end(ctx, db, run,
 * "{\"candidates\": 12}"); un_rulesdb_free(db);
 */
#ifndef UN_RULESDB_H
#define UN_RULESDB_H

#include "pcg/rule.h"

typedef struct un_rulesdb un_rulesdb;

enum {
    UN_RULESDB_READONLY = 1 << 0, /* never writes (fails on a database that needs migrating) */
    UN_RULESDB_CREATE = 1 << 1,   /* creates the file and schema when missing */
};

/* Opens (or creates) a rule database. spec is the spec set in use (borrowed, outlives db): its
 * content hash (un_spec_hash) is registered, and rules are trusted as verified only when verified
 * against it. Errors: UN_ERR_IO (cannot open), UN_ERR_DB ("not a rule database", "schema version
 * N is newer than this program's M", corrupt file), each naming the path. An older schema is
 * upgraded in place (READONLY: an error instead). The handle's memory comes from ctx, which must
 * outlive it; other calls may pass any context. One handle serves one thread at a time.
 * Owned: un_rulesdb_free. */
un_status un_rulesdb_open(un_ctx *ctx, const char *path, const un_spec *spec, int flags,
                          un_rulesdb **out);
void un_rulesdb_free(un_rulesdb *db);
const char *un_rulesdb_path(const un_rulesdb *db);    /* borrowed */
const un_spec *un_rulesdb_spec(const un_rulesdb *db); /* the spec set in use (borrowed) */
uint64_t un_rulesdb_spec_hash(const un_rulesdb *db);  /* its content hash */
int un_rulesdb_schema_version(void);                  /* the schema version this program writes */

/* ---- batches (one transaction each; nesting is an error) ---- */
un_status un_rulesdb_begin(un_ctx *ctx, un_rulesdb *db);
un_status un_rulesdb_commit(un_ctx *ctx, un_rulesdb *db);
void un_rulesdb_rollback(un_rulesdb *db); /* no-op outside a batch */

/* ---- runs: one row per tool invocation ---- */
un_status un_rulesdb_run_begin(un_ctx *ctx, un_rulesdb *db, const char *tool, const char *args,
                               int64_t *run_id);
/* counts_json: a JSON object of counts (the tool's summary), stored as text. */
un_status un_rulesdb_run_end(un_ctx *ctx, un_rulesdb *db, int64_t run_id, const char *counts_json);

/* ---- rules ---- */

typedef struct un_rulesdb_origin {
    const char *kind; /* "generated" or "imported" */
    const char *file; /* imported: the file it came from, else NULL */
    const char *name; /* imported: the rule's name in that file, else NULL */
    int64_t run;      /* the run that produced it, or 0 */
} un_rulesdb_origin;

/* Inserts r in canonical form with status CANDIDATE (REJECTED with `detail` as the reason when
 * status == UN_RULE_REJECTED; r may then be NULL and the rule is stored by origin name only).
 * A rule whose canonical hash is already present is not inserted again: *inserted = false and
 * *id is the existing row. id and inserted may be NULL. */
un_status un_rulesdb_rule_insert(un_ctx *ctx, un_rulesdb *db, const un_rule *r,
                                 un_rule_status status, const char *detail,
                                 const un_rulesdb_origin *origin, int32_t *id, bool *inserted);

/* The columns un_rulesdb_rule_insert stores for r (canonical body, counts, operators, side
 * conditions; hash = un_rule_hash(r)), made with no database, so on any thread: the generator
 * makes them on its worker threads, then inserts them in order with un_rulesdb_rule_insert_cols
 * (the same row as un_rulesdb_rule_insert(r) with status CANDIDATE). Owned: free with
 * un_rulesdb_cols_free. */
typedef struct un_rulesdb_cols un_rulesdb_cols;
un_status un_rulesdb_cols_new(un_ctx *ctx, const un_rule *r, uint64_t hash, un_rulesdb_cols **out);
void un_rulesdb_cols_free(un_rulesdb_cols *c);
un_status un_rulesdb_rule_insert_cols(un_ctx *ctx, un_rulesdb *db, const un_rulesdb_cols *c,
                                      const un_rulesdb_origin *origin, int32_t *id, bool *inserted);

/* Row of a rule. */
typedef struct un_rulesdb_row {
    int32_t id;
    uint64_t hash;         /* canonical hash */
    un_rule_status status; /* as stored; see `trusted` */
    bool trusted;          /* status VERIFIED and verified against the spec set in use */
    char *detail;          /* counterexample (refuted), reason (unknown, rejected), or NULL */
    double proof_ms;       /* verification time, ms (0 when never verified) */
    char *axioms;          /* axioms used by the proof, comma-separated, or NULL */
    uint64_t gen_spec;     /* spec-set hash it was generated against (0 for imports) */
    uint64_t verify_spec;  /* spec-set hash it was last verified against, or 0 */
    char *origin_kind, *origin_file, *origin_name; /* NULL when absent */
    int n_src, n_dst;                              /* sizes (non-source nodes per side) */
    char *ops;     /* operators used, comma-separated and sorted, e.g. "combine,relu" */
    un_rule *rule; /* parsed rule (NULL for a rejected import without a rule) */
} un_rulesdb_row;
void un_rulesdb_row_free(un_rulesdb_row *row);

/* Reads row id. The stored text is checked against its stored hash: a mismatch is UN_ERR_DB
 * ("rule N: content does not match its hash"), never silently used. Owned: un_rulesdb_row_free. */
un_status un_rulesdb_rule_get(un_ctx *ctx, un_rulesdb *db, int32_t id, un_rulesdb_row **out);

/* Reads row id without parsing or checking its body (row->rule is NULL): for listings and
 * statistics over many rows. Owned: un_rulesdb_row_free. */
un_status un_rulesdb_rule_meta(un_ctx *ctx, un_rulesdb *db, int32_t id, un_rulesdb_row **out);

typedef struct un_rulesdb_filter {
    int status;   /* an un_rule_status, or -1 for any */
    int op;       /* an un_op that must occur on either side, or -1 */
    int min_size; /* total size n_src + n_dst bounds (0 = none) */
    int max_size;
    int max_ops;      /* at most this many operators on either side, max(n_src, n_dst) (0 = any) */
    int32_t after_id; /* only ids > after_id (paging), 0 = from the start */
    int64_t limit;    /* at most this many, 0 = all */
    int shard_i, shard_n; /* only ids with id % shard_n == shard_i (shard_n 0 = all) */
    bool needs_verify;    /* candidates, unknowns, and verified rules not trusted under this spec */
    double undecided_since; /* un_rulesdb_claim only: no verdict recorded since this unix time (0 =
                             * any), so each rule is decided once per run of concurrent verifiers */
} un_rulesdb_filter;
un_rulesdb_filter un_rulesdb_filter_default(void); /* any status, everything */

/* Ids matching f, ascending. Owned: free(*ids). */
un_status un_rulesdb_rule_ids(un_ctx *ctx, un_rulesdb *db, const un_rulesdb_filter *f,
                              int32_t **ids, int64_t *n);

typedef struct un_rulesdb_verdict {
    un_rule_status status; /* VERIFIED, REFUTED or UNKNOWN */
    const char *detail;    /* counterexample / reason unknown, or NULL */
    double proof_ms;
    const char *axioms;     /* comma-separated axiom names (unsat core), or NULL */
    const un_rule *general; /* the most general form proven (more variables, any_shape), or NULL
                             * to keep the stored rule; must have the same canonical hash once
                             * its variables are fixed to their witness values */
} un_rulesdb_verdict;
/* Records a verdict against the spec set in use (may run inside or outside a batch). */
un_status un_rulesdb_rule_set_verdict(un_ctx *ctx, un_rulesdb *db, int32_t id,
                                      const un_rulesdb_verdict *v);

/* ---- work claims: concurrent verifiers split the work (schema 3) ---- */

/* Claims up to max rules matching f (its shard, max_ops and needs_verify parts) that hold no live
 * claim, for owner (e.g. "host:pid:worker") until now + lease_s seconds, in one transaction;
 * expired claims are dropped first. Writes their ids to ids[max] and the count to *n; *others (may
 * be NULL) receives the number of live claims held by other owners (work that may still come back
 * if they die). Must be called outside a batch. */
un_status un_rulesdb_claim(un_ctx *ctx, un_rulesdb *db, const un_rulesdb_filter *f,
                           const char *owner, double lease_s, int max, int32_t *ids, int *n,
                           int64_t *others);
/* The work of this handle's claims so far: SQLite VM steps of their searches for free rules,
 * which grow with the rows they read. */
int64_t un_rulesdb_claim_steps(const un_rulesdb *db);
/* Extends owner's claims to now + lease_s. */
un_status un_rulesdb_claim_renew(un_ctx *ctx, un_rulesdb *db, const char *owner, double lease_s);
/* Drops owner's claims (inside the caller's batch when one is open, so a batch of verdicts and
 * the release of their claims commit together). */
un_status un_rulesdb_claim_release(un_ctx *ctx, un_rulesdb *db, const char *owner);

/* Every trusted verified rule (for unity-train). Rules verified against another spec set are
 * skipped and counted in *n_stale (may be NULL) so the caller can say "N rules need re-verifying".
 * Owned: free each with un_rule_free, then free(*rules). */
un_status un_rulesdb_load_verified(un_ctx *ctx, un_rulesdb *db, un_rule ***rules, int64_t *n,
                                   int64_t *n_stale);

/* un_rulesdb_load_verified that also returns each rule's id (*ids owned, free(); may be NULL). */
un_status un_rulesdb_load_verified_ids(un_ctx *ctx, un_rulesdb *db, un_rule ***rules, int32_t **ids,
                                       int64_t *n, int64_t *n_stale);

/* Streams the trusted verified rules, in id order, without holding them all: for each, skip
 * (may be NULL) may decline it by id and canonical hash (e.g. a caller's cache has it; its body
 * is then not parsed); otherwise the rule, parsed and checked against its hash, goes to take,
 * which owns it (un_rule_free). A status other than UN_OK from take stops the walk and is
 * returned. Stale rules are counted in *n_stale (may be NULL). */
typedef bool (*un_rulesdb_skip_fn)(void *user, int32_t id, uint64_t hash);
typedef un_status (*un_rulesdb_take_fn)(void *user, int32_t id, uint64_t hash, un_rule *r);
un_status un_rulesdb_verified_each(un_ctx *ctx, un_rulesdb *db, un_rulesdb_skip_fn skip,
                                   un_rulesdb_take_fn take, void *user, int64_t *n_stale);

/* The same walk, pulled in steps, for a caller that parses the rules itself (on worker threads,
 * while it reads the next rows): un_rulesdb_walk_next visits up to max more trusted verified rows
 * (declined ones included; stale ones are counted, not visited) and gives each row skip does not
 * decline to take_raw as stored: its body (borrowed until take_raw returns; NUL-terminated) and
 * the body's checksum; un_rulesdb_body_parse then does what un_rulesdb_verified_each does with
 * it. A status other than UN_OK (from take_raw, a row without a body, SQLite) ends the walk and is
 * returned. un_rulesdb_walk_done tells when the walk has reached its end. One walk per handle at a
 * time, and no un_rulesdb_verified_each / un_rulesdb_load_verified on it meanwhile.
 * un_rulesdb_body_parse reads only db's spec and path, so calls on different threads (each with
 * its own ctx, e.g. un_ctx_new_child) may run at once while the walk goes on. */
typedef struct un_rulesdb_walk un_rulesdb_walk;
typedef un_status (*un_rulesdb_raw_fn)(void *user, int32_t id, uint64_t hash, const char *body,
                                       size_t len, uint64_t sum);
un_rulesdb_walk *un_rulesdb_walk_new(un_rulesdb *db); /* owned: un_rulesdb_walk_free */
void un_rulesdb_walk_free(un_rulesdb_walk *w);
bool un_rulesdb_walk_done(const un_rulesdb_walk *w);
int64_t un_rulesdb_walk_stale(const un_rulesdb_walk *w); /* stale rows passed so far */
un_status un_rulesdb_walk_next(un_ctx *ctx, un_rulesdb_walk *w, int64_t max,
                               un_rulesdb_skip_fn skip, un_rulesdb_raw_fn take_raw, void *user);
un_status un_rulesdb_body_parse(un_ctx *ctx, un_rulesdb *db, int32_t id, uint64_t hash,
                                const char *body, size_t len, uint64_t sum, un_rule **out);

/* Counts by status (counts[UN_RULE_STATUS_COUNT]). */
un_status un_rulesdb_count(un_ctx *ctx, un_rulesdb *db, int64_t *counts);

/* ---- op-cost cache (measured op costs, for the search's cost model) ---- */

typedef struct un_rulesdb_cost {
    char op_sig[128]; /* op and its parameters, e.g. "linear[activation=relu,use_bias=0]" */
    char shape[128];  /* input shapes with layouts (un_shape_str), ';'-separated */
    char device[32];  /* device kind, e.g. "cpu", "h100" */
    double fwd_ms, bwd_ms;
    double bytes;        /* memory moved or held */
    int64_t measured_at; /* unix time */
} un_rulesdb_cost;
un_status un_rulesdb_cost_put(un_ctx *ctx, un_rulesdb *db, const un_rulesdb_cost *c);
/* *found = false when no entry matches (op_sig, shape, device). */
un_status un_rulesdb_cost_get(un_ctx *ctx, un_rulesdb *db, const char *op_sig, const char *shape,
                              const char *device, un_rulesdb_cost *out, bool *found);
/* Every entry of (op_sig, device), by shape: *out owned (free; NULL when *n is 0). */
un_status un_rulesdb_cost_list(un_ctx *ctx, un_rulesdb *db, const char *op_sig, const char *device,
                               un_rulesdb_cost **out, int64_t *n);

/* PRAGMA integrity_check plus per-row checks (hash matches content, status valid, verified rows
 * carry a spec hash, the derived columns recomputed from the body agree, the row checksum over
 * the derived and provenance columns holds). Problems are counted in *n_bad and described, one per
 * line, in report (may be NULL). */
un_status un_rulesdb_check(un_ctx *ctx, un_rulesdb *db, int64_t *n_bad, un_buf *report);

/* The spec set's source text, stored in the database (table spec_texts, with a checksum; checked
 * by un_rulesdb_check) so a tool reading it later needs no spec file: unity-gen stores the text it
 * loaded. text[len] must parse to the spec set db was opened with. */
un_status un_rulesdb_spec_text_put(un_ctx *ctx, un_rulesdb *db, const char *text, size_t len);
/* The spec text most recently stored in the database at path, read without a spec set: *text
 * NULL (UN_OK) when there is none or path is no readable database; UN_ERR_DB when the text does
 * not match its checksum. Owned: free(*text). */
un_status un_rulesdb_spec_text_get(un_ctx *ctx, const char *path, char **text, size_t *len);

/* A fast pass over every row's checksums (body_sum and the row checksum; no parsing): UN_ERR_DB
 * naming the first damaged row and their number, for writers that refuse to add to a damaged
 * database (unity-gen). */
un_status un_rulesdb_check_sums(un_ctx *ctx, un_rulesdb *db);

/* Copies every rule of src into db (dedup by canonical hash; a verdict from src replaces a
 * candidate in db; conflicting verdicts keep the verified-under-current-spec one and are counted).
 * One transaction (unless a batch is open): on failure db is unchanged. Every src row is checked
 * against its hash first. n_added / n_updated may be NULL. */
un_status un_rulesdb_merge(un_ctx *ctx, un_rulesdb *db, un_rulesdb *src, int64_t *n_added,
                           int64_t *n_updated);

typedef struct un_rulesdb_merge_stats {
    int64_t added;      /* rows new to db */
    int64_t duplicates; /* rows db already held (same canonical hash, or same rejected origin) */
    int64_t updated;    /* duplicates whose verdict src improved */
    int64_t conflicts;  /* duplicates with a different definitive verdict (verified vs refuted) */
} un_rulesdb_merge_stats;
/* un_rulesdb_merge with every count. */
un_status un_rulesdb_merge_ex(un_ctx *ctx, un_rulesdb *db, un_rulesdb *src,
                              un_rulesdb_merge_stats *stats);

/* ---- for tests only: raw access that bypasses every check ---- */

/* Runs constant SQL on the file at path as it is (e.g. to plant a damaged row). */
un_status un_rulesdb__test_exec(un_ctx *ctx, const char *path, const char *sql);
/* Creates a database at an older schema version (to test upgrades). */
un_status un_rulesdb__test_create_at(un_ctx *ctx, const char *path, int version);

#endif
