/* rulesdb.c - the rule database over SQLite (rulesdb.h). The only file that includes sqlite3.h
 * (STYLE rule 2). Every statement is prepared once per handle and bound (STYLE rule 22); the schema
 * is created by running the migrations from version 0, so the upgrade path runs on every create.
 * Integrity: the file must carry our application id and a schema version we know; each row's body
 * is checked against its checksum and its canonical hash whenever it is read.
 */
#include "rulesdb/rulesdb.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define UN_RULESDB_APP_ID   0x554e5231 /* "UNR1" in the header's application_id field */
#define UN_RULESDB_BUSY_MS  60000      /* a writer's batch may take a while; readers never block */
#define UN_RULESDB_SUM_SEED 0x52554c4553444231ULL

/* The row checksum: the SQL function un_rowsum over a row's body checksum and the columns derived
 * from it or recording its provenance, so an edit of any of them shows in `check`. */
#define ROW_SUM_OF(bs, ni, ns, nd, sz, ops, run, cd)                                               \
    "un_rowsum(" bs ", " ni ", " ns ", " nd ", " sz ", " ops ", " run ", " cd ")"
#define ROW_SUM_COLS ROW_SUM_OF("body_sum", "n_in", "n_src", "n_dst", "size", "ops", "run", "conds")

/* Migrations: migration[v] takes a database from schema version v to v + 1. A new file starts at
 * version 0 (no tables), so creating a database is running them all. */
static const char *const un_rulesdb_migrations[] = {
    /* 0 -> 1: rules, runs and spec sets. */
    "PRAGMA application_id = 1431196209;"
    "CREATE TABLE spec_sets ("
    "  hash INTEGER PRIMARY KEY," /* un_spec_hash, as a signed 64-bit pattern */
    "  n_ops INTEGER NOT NULL,"
    "  first_seen REAL NOT NULL);"
    "CREATE TABLE runs ("
    "  id INTEGER PRIMARY KEY,"
    "  tool TEXT NOT NULL,"
    "  args TEXT,"
    "  spec INTEGER,"
    "  started REAL NOT NULL," /* unix time, seconds */
    "  ended REAL,"
    "  counts TEXT);" /* JSON object */
    "CREATE TABLE rules ("
    "  id INTEGER PRIMARY KEY,"
    "  hash INTEGER UNIQUE," /* canonical hash; NULL only for a rejected import without a rule */
    "  body TEXT,"           /* canonical rule JSON */
    "  body_sum INTEGER,"    /* checksum of body */
    "  n_in INTEGER NOT NULL DEFAULT 0,"
    "  n_src INTEGER NOT NULL DEFAULT 0,"
    "  n_dst INTEGER NOT NULL DEFAULT 0,"
    "  size INTEGER NOT NULL DEFAULT 0,"
    "  ops TEXT NOT NULL DEFAULT '',"
    "  status TEXT NOT NULL CHECK (status IN "
    "    ('candidate', 'verified', 'refuted', 'unknown', 'rejected')),"
    "  detail TEXT,"
    "  proof_ms REAL NOT NULL DEFAULT 0,"
    "  axioms TEXT,"
    "  gen_spec INTEGER NOT NULL DEFAULT 0,"
    "  verify_spec INTEGER NOT NULL DEFAULT 0,"
    "  origin_kind TEXT,"
    "  origin_file TEXT,"
    "  origin_name TEXT,"
    "  run INTEGER REFERENCES runs(id),"
    "  created REAL NOT NULL,"
    "  CHECK (body IS NOT NULL OR status = 'rejected'),"
    "  CHECK (hash IS NOT NULL OR status = 'rejected'));"
    "CREATE UNIQUE INDEX rules_rejected ON rules(origin_file, origin_name) WHERE hash IS NULL;"
    "CREATE INDEX rules_status ON rules(status);"
    "PRAGMA user_version = 1;",
    /* 1 -> 2: the op-cost cache and the time of the last verdict. */
    "CREATE TABLE op_costs ("
    "  op_sig TEXT NOT NULL,"
    "  shape TEXT NOT NULL,"
    "  device TEXT NOT NULL,"
    "  fwd_ms REAL NOT NULL,"
    "  bwd_ms REAL NOT NULL,"
    "  bytes REAL NOT NULL,"
    "  measured_at INTEGER NOT NULL,"
    "  PRIMARY KEY (op_sig, shape, device)) WITHOUT ROWID;"
    "ALTER TABLE rules ADD COLUMN verified_at REAL;"
    "PRAGMA user_version = 2;",
    /* 2 -> 3: side conditions stored with the verdict; a checksum over the derived and provenance
     * columns (un_rowsum, registered on every connection); work claims of concurrent verifiers. */
    "ALTER TABLE rules ADD COLUMN conds TEXT;" /* the verified form's side conditions, readable */
    "ALTER TABLE rules ADD COLUMN row_sum INTEGER;"
    "UPDATE rules SET row_sum = " ROW_SUM_OF(
        "body_sum", "n_in", "n_src", "n_dst", "size", "ops", "run",
        "conds") ";"
                 "CREATE TABLE claims ("
                 "  rule INTEGER PRIMARY KEY," /* a rule id being verified */
                 "  owner TEXT NOT NULL,"      /* host:pid:worker */
                 "  expires REAL NOT NULL);"   /* unix time; an expired claim is free again */
                 "PRAGMA user_version = 3;",
};
#define UN_RULESDB_SCHEMA_VERSION                                                                  \
    ((int)(sizeof un_rulesdb_migrations / sizeof un_rulesdb_migrations[0]))

#define ROW_COLS                                                                                   \
    "id, hash, body, body_sum, status, detail, proof_ms, axioms, gen_spec, verify_spec, "          \
    "origin_kind, origin_file, origin_name, n_src, n_dst, ops, run"

/* Every statement a handle uses, prepared once at open. */
#define UN_RULESDB_STMTS(X)                                                                        \
    X(BEGIN, "BEGIN IMMEDIATE")                                                                    \
    X(COMMIT, "COMMIT")                                                                            \
    X(ROLLBACK, "ROLLBACK")                                                                        \
    X(SPEC_HAS, "SELECT 1 FROM spec_sets WHERE hash = ?1")                                         \
    X(SPEC_ADD, "INSERT INTO spec_sets(hash, n_ops, first_seen) VALUES (?1, ?2, ?3) "              \
                "ON CONFLICT DO NOTHING")                                                          \
    X(RUN_BEGIN, "INSERT INTO runs(tool, args, spec, started) VALUES (?1, ?2, ?3, ?4)")            \
    X(RUN_END, "UPDATE runs SET ended = ?2, counts = ?3 WHERE id = ?1")                            \
    X(RULE_INSERT,                                                                                 \
      "INSERT INTO rules(hash, body, body_sum, n_in, n_src, n_dst, size, ops, status, detail, "    \
      "proof_ms, axioms, gen_spec, verify_spec, origin_kind, origin_file, origin_name, run, "      \
      "created, verified_at, conds, row_sum) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "    \
      "?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, " ROW_SUM_OF(                        \
          "?3", "?4", "?5", "?6", "?7", "?8", "?18", "?21") ") ON CONFLICT DO NOTHING")            \
    X(RULE_BY_HASH, "SELECT id FROM rules WHERE hash = ?1")                                        \
    X(RULE_BY_ORIGIN, "SELECT id FROM rules WHERE hash IS NULL AND origin_file IS ?1 "             \
                      "AND origin_name IS ?2")                                                     \
    X(RULE_GET, "SELECT " ROW_COLS " FROM rules WHERE id = ?1")                                    \
    X(RULE_IDS, "SELECT id FROM rules WHERE id > ?1 AND (?2 IS NULL OR status = ?2) "              \
                "AND (?3 IS NULL OR instr(',' || ops || ',', ?3) > 0) AND (?4 = 0 OR size >= ?4) " \
                "AND (?5 = 0 OR size <= ?5) AND (?6 = 0 OR id % ?6 = ?7) "                         \
                "AND (?12 = 0 OR max(n_src, n_dst) <= ?12) "                                       \
                "AND (?8 = 0 OR status IN ('candidate', 'unknown') "                               \
                "     OR (status = 'verified' AND verify_spec != ?9)) "                            \
                "ORDER BY id LIMIT ?10")                                                           \
    X(RULE_VERDICT, "UPDATE rules SET status = ?2, detail = ?3, proof_ms = ?4, axioms = ?5, "      \
                    "verify_spec = ?6, verified_at = ?7 WHERE id = ?1 AND status != 'rejected'")   \
    X(RULE_BODY, "UPDATE rules SET body = ?2, body_sum = ?3, conds = ?4, row_sum = " ROW_SUM_OF(   \
                     "?3", "n_in", "n_src", "n_dst", "size", "ops", "run", "?4") " WHERE id = ?1") \
    X(RULE_ROWSUM_OK, "SELECT row_sum IS " ROW_SUM_COLS ", n_in, size, conds FROM rules "          \
                      "WHERE id = ?1")                                                             \
    X(RULE_SUMS_BAD, "SELECT id, count(*) OVER () FROM rules WHERE body_sum IS NOT "               \
                     "un_bodysum(body) OR row_sum IS NOT " ROW_SUM_COLS " ORDER BY id LIMIT 1")    \
    X(CLAIM_EXPIRE, "DELETE FROM claims WHERE expires < ?1")                                       \
    X(CLAIM_FREE, "SELECT id FROM rules WHERE id > ?1 AND (?6 = 0 OR id % ?6 = ?7) "               \
                  "AND (?12 = 0 OR max(n_src, n_dst) <= ?12) "                                     \
                  "AND (?8 = 0 OR status IN ('candidate', 'unknown') "                             \
                  "     OR (status = 'verified' AND verify_spec != ?9)) "                          \
                  "AND (?11 = 0 OR verified_at IS NULL OR verified_at < ?11) "                     \
                  "AND id NOT IN (SELECT rule FROM claims) ORDER BY id LIMIT ?10")                 \
    X(CLAIM_ADD, "INSERT INTO claims(rule, owner, expires) VALUES (?1, ?2, ?3)")                   \
    X(CLAIM_OTHERS, "SELECT count(*) FROM claims WHERE owner != ?1")                               \
    X(CLAIM_RENEW, "UPDATE claims SET expires = ?2 WHERE owner = ?1")                              \
    X(CLAIM_RELEASE, "DELETE FROM claims WHERE owner = ?1")                                        \
    X(RULE_STATE, "SELECT status, verify_spec FROM rules WHERE id = ?1")                           \
    X(RULE_VERIFIED, "SELECT " ROW_COLS " FROM rules WHERE status = 'verified' ORDER BY id")       \
    X(RULE_ALL, "SELECT " ROW_COLS " FROM rules ORDER BY id")                                      \
    X(RULE_COUNT, "SELECT status, count(*) FROM rules GROUP BY status")                            \
    X(COST_PUT,                                                                                    \
      "INSERT INTO op_costs(op_sig, shape, device, fwd_ms, bwd_ms, bytes, measured_at) "           \
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(op_sig, shape, device) DO UPDATE "          \
      "SET fwd_ms = excluded.fwd_ms, bwd_ms = excluded.bwd_ms, bytes = excluded.bytes, "           \
      "measured_at = excluded.measured_at")                                                        \
    X(COST_GET, "SELECT fwd_ms, bwd_ms, bytes, measured_at FROM op_costs "                         \
                "WHERE op_sig = ?1 AND shape = ?2 AND device = ?3")                                \
    X(COST_LIST, "SELECT shape, fwd_ms, bwd_ms, bytes, measured_at FROM op_costs "                 \
                 "WHERE op_sig = ?1 AND device = ?2 ORDER BY shape")                               \
    X(INTEGRITY, "PRAGMA integrity_check")

enum {
#define X(n, s) STMT_##n,
    UN_RULESDB_STMTS(X)
#undef X
        STMT_COUNT
};

static const char *const un_rulesdb_sql[STMT_COUNT] = {
#define X(n, s) s,
    UN_RULESDB_STMTS(X)
#undef X
};

/* Columns of ROW_COLS, in order. */
enum {
    COL_ID,
    COL_HASH,
    COL_BODY,
    COL_SUM,
    COL_STATUS,
    COL_DETAIL,
    COL_PROOF_MS,
    COL_AXIOMS,
    COL_GEN_SPEC,
    COL_VERIFY_SPEC,
    COL_ORIGIN_KIND,
    COL_ORIGIN_FILE,
    COL_ORIGIN_NAME,
    COL_N_SRC,
    COL_N_DST,
    COL_OPS,
    COL_RUN,
};

struct un_rulesdb {
    un_ctx *ctx; /* the context it was opened with (for freeing the handle); borrowed */
    sqlite3 *h;
    char *path;
    const un_spec *spec;
    uint64_t spec_hash;
    bool readonly;
    bool in_batch;
    int64_t claim_steps; /* SQLite VM steps of the claims' searches for work */
    bool spec_known;     /* the spec set in use is in spec_sets */
    sqlite3_stmt *stmt[STMT_COUNT];
};

/* ---- small helpers ----------------------------------------------------------------------------
 */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int64_t u2i(uint64_t v) {
    int64_t r;
    memcpy(&r, &v, sizeof r);
    return r;
}

static uint64_t i2u(int64_t v) {
    uint64_t r;
    memcpy(&r, &v, sizeof r);
    return r;
}

static uint64_t body_sum(const char *text, size_t len) {
    return un_hash_bytes(text, len, UN_RULESDB_SUM_SEED);
}

/* un_rowsum(...): a 64-bit checksum of its arguments (type and text of each, NULL distinct). */
static void sql_rowsum(sqlite3_context *c, int argc, sqlite3_value **argv) {
    uint64_t h = UN_RULESDB_SUM_SEED ^ 0x726f7773756dULL;
    for (int i = 0; i < argc; i++) {
        int t = sqlite3_value_type(argv[i]);
        h = un_hash_bytes(&t, sizeof t, h);
        if (t == SQLITE_NULL)
            continue;
        const unsigned char *txt = sqlite3_value_text(argv[i]);
        int n = sqlite3_value_bytes(argv[i]);
        h = un_hash_bytes(txt ? (const char *)txt : "", (size_t)n, h);
        h = un_hash_bytes(&n, sizeof n, h);
    }
    sqlite3_result_int64(c, u2i(h));
}

/* un_bodysum(body): body_sum of a stored body (NULL for NULL). */
static void sql_bodysum(sqlite3_context *c, int argc, sqlite3_value **argv) {
    (void)argc;
    if (sqlite3_value_type(argv[0]) == SQLITE_NULL) {
        sqlite3_result_null(c);
        return;
    }
    const unsigned char *t = sqlite3_value_text(argv[0]);
    size_t n = (size_t)sqlite3_value_bytes(argv[0]);
    sqlite3_result_int64(c, u2i(body_sum(t ? (const char *)t : "", n)));
}

static int rowsum_register(sqlite3 *h) {
    int fl = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_DIRECTONLY;
    int rc = sqlite3_create_function(h, "un_rowsum", 8, fl, NULL, sql_rowsum, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_create_function(h, "un_bodysum", 1, fl, NULL, sql_bodysum, NULL, NULL);
    return rc;
}

/* Converts a SQLite result code into a status with the connection's message (STYLE rule 12). */
static un_status db_fail(un_ctx *ctx, const un_rulesdb *db, int rc, const char *what) {
    const char *msg = db->h ? sqlite3_errmsg(db->h) : sqlite3_errstr(rc);
    switch (rc & 0xff) {
    case SQLITE_NOMEM:
        return un_ctx_error(ctx, UN_ERR_NOMEM, "%s: %s: out of memory", db->path, what);
    case SQLITE_CANTOPEN:
        return un_ctx_error(ctx, UN_ERR_IO, "%s: cannot open: %s", db->path, msg);
    case SQLITE_NOTADB:
        return un_ctx_error(ctx, UN_ERR_DB, "%s: not a rule database (not an SQLite file: %s)",
                            db->path, msg);
    case SQLITE_CORRUPT:
        return un_ctx_error(ctx, UN_ERR_DB, "%s: corrupt database (%s): %s", db->path, what, msg);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return un_ctx_error(ctx, UN_ERR_DB, "%s: %s: database is locked by another writer (%s)",
                            db->path, what, msg);
    case SQLITE_READONLY:
        return un_ctx_error(ctx, UN_ERR_DB, "%s: %s: database is read-only (%s)", db->path, what,
                            msg);
    default:
        return un_ctx_error(ctx, UN_ERR_DB, "%s: %s: %s", db->path, what, msg);
    }
}

static sqlite3_stmt *stmt_get(un_rulesdb *db, int which) {
    sqlite3_stmt *s = db->stmt[which];
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return s;
}

/* Steps a statement that returns no rows; resets it. */
static un_status stmt_done(un_ctx *ctx, un_rulesdb *db, sqlite3_stmt *s, const char *what) {
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return db_fail(ctx, db, rc, what);
    return UN_OK;
}

static void bind_text(sqlite3_stmt *s, int i, const char *t) {
    if (t)
        sqlite3_bind_text(s, i, t, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(s, i);
}

static char *col_strdup(sqlite3_stmt *s, int col) {
    const unsigned char *t = sqlite3_column_text(s, col);
    return t ? un_xstrdup((const char *)t) : NULL;
}

/* Runs constant SQL text holding several statements, each prepared and stepped in turn. */
static un_status exec_script(un_ctx *ctx, un_rulesdb *db, const char *sql, const char *what) {
    const char *tail = sql;
    while (tail && *tail) {
        sqlite3_stmt *s = NULL;
        int rc = sqlite3_prepare_v2(db->h, tail, -1, &s, &tail);
        if (rc != SQLITE_OK)
            return db_fail(ctx, db, rc, what);
        if (!s) /* trailing whitespace or comment */
            break;
        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        }
        sqlite3_finalize(s);
        if (rc != SQLITE_DONE)
            return db_fail(ctx, db, rc, what);
    }
    return UN_OK;
}

/* One integer from a one-row query (a PRAGMA or a count). */
static un_status query_int(un_ctx *ctx, un_rulesdb *db, const char *sql, int64_t *out) {
    sqlite3_stmt *s = NULL;
    *out = 0;
    int rc = sqlite3_prepare_v2(db->h, sql, -1, &s, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int64(s, 0);
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(s);
    return rc == SQLITE_OK ? UN_OK : db_fail(ctx, db, rc, "reading the header");
}

/* ---- open -------------------------------------------------------------------------------------
 */

typedef struct db_ident {
    int64_t app_id, version, n_objects, n_tables;
} db_ident;

static un_status identify(un_ctx *ctx, un_rulesdb *db, db_ident *id) {
    un_status st = query_int(ctx, db, "PRAGMA application_id", &id->app_id);
    if (st == UN_OK)
        st = query_int(ctx, db, "PRAGMA user_version", &id->version);
    if (st == UN_OK)
        st = query_int(ctx, db, "SELECT count(*) FROM sqlite_master", &id->n_objects);
    if (st == UN_OK)
        st = query_int(ctx, db,
                       "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                       "('rules', 'runs', 'spec_sets')",
                       &id->n_tables);
    return st;
}

/* Creates or upgrades the schema inside one write transaction (another process may be doing the
 * same: the state is read again once the write lock is held). */
static un_status migrate(un_ctx *ctx, un_rulesdb *db) {
    un_status st = exec_script(ctx, db, "BEGIN IMMEDIATE", "starting the schema upgrade");
    if (st != UN_OK)
        return st;
    db_ident id;
    st = identify(ctx, db, &id);
    if (st == UN_OK && id.app_id == 0 && id.n_objects != 0)
        st = un_ctx_error(ctx, UN_ERR_DB, "%s: not a rule database (it holds other tables)",
                          db->path);
    for (int64_t v = id.version; st == UN_OK && v < UN_RULESDB_SCHEMA_VERSION; v++)
        st = exec_script(ctx, db, un_rulesdb_migrations[v], "upgrading the schema");
    if (st == UN_OK)
        st = exec_script(ctx, db, "COMMIT", "committing the schema upgrade");
    if (st != UN_OK)
        exec_script(NULL, db, "ROLLBACK", "rolling back");
    return st;
}

static un_status check_ident(un_ctx *ctx, un_rulesdb *db, int flags, bool *needs_migrate) {
    db_ident id;
    un_status st = identify(ctx, db, &id);
    *needs_migrate = false;
    if (st != UN_OK)
        return st;
    if (id.app_id == 0 && id.version == 0 && id.n_objects == 0) {
        if (!(flags & UN_RULESDB_CREATE) || db->readonly)
            return un_ctx_error(ctx, UN_ERR_DB, "%s: not a rule database (empty file)", db->path);
        *needs_migrate = true;
        return UN_OK;
    }
    if (id.app_id != UN_RULESDB_APP_ID)
        return un_ctx_error(ctx, UN_ERR_DB,
                            "%s: not a rule database (an SQLite file with application id %lld)",
                            db->path, (long long)id.app_id);
    if (id.version > UN_RULESDB_SCHEMA_VERSION)
        return un_ctx_error(ctx, UN_ERR_DB,
                            "%s: schema version %lld is newer than this program's %d (update the "
                            "program)",
                            db->path, (long long)id.version, UN_RULESDB_SCHEMA_VERSION);
    if (id.version < 1 || id.n_tables != 3)
        return un_ctx_error(ctx, UN_ERR_DB,
                            "%s: damaged rule database (schema version %lld, %lld of 3 tables)",
                            db->path, (long long)id.version, (long long)id.n_tables);
    if (id.version < UN_RULESDB_SCHEMA_VERSION) {
        if (db->readonly)
            return un_ctx_error(ctx, UN_ERR_DB,
                                "%s: schema version %lld needs upgrading to %d; open it once "
                                "read-write",
                                db->path, (long long)id.version, UN_RULESDB_SCHEMA_VERSION);
        *needs_migrate = true;
    }
    return UN_OK;
}

static int spec_op_count(const un_spec *spec) {
    int n = 0;
    for (int op = 0; op < UN_OP_COUNT; op++)
        n += un_spec_op(spec, (un_op)op) != NULL;
    return n;
}

/* Records the spec set in use in spec_sets (once per handle). busy_ok: a locked database is
 * not an error (it is tried again at the next write). */
static un_status spec_register(un_ctx *ctx, un_rulesdb *db, bool busy_ok) {
    if (db->spec_known)
        return UN_OK;
    sqlite3_stmt *s = stmt_get(db, STMT_SPEC_ADD);
    sqlite3_bind_int64(s, 1, u2i(db->spec_hash));
    sqlite3_bind_int(s, 2, spec_op_count(db->spec));
    sqlite3_bind_double(s, 3, now_s());
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc == SQLITE_DONE) {
        db->spec_known = true;
        return UN_OK;
    }
    if (busy_ok && (rc & 0xff) == SQLITE_BUSY)
        return UN_OK;
    return db_fail(ctx, db, rc, "registering the spec set");
}

un_status un_rulesdb_open(un_ctx *ctx, const char *path, const un_spec *spec, int flags,
                          un_rulesdb **out) {
    *out = NULL;
    if (!path || !*path)
        return un_ctx_error(ctx, UN_ERR_INVALID, "rule database: empty path");
    if (!spec)
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: no spec set given", path);
    un_rulesdb *db = un_ctx_calloc(ctx, 1, sizeof *db);
    if (!db)
        return un_ctx_error(ctx, UN_ERR_NOMEM, "%s: out of memory", path);
    db->ctx = ctx;
    db->spec = spec;
    db->spec_hash = spec ? un_spec_hash(spec) : 0;
    db->readonly = (flags & UN_RULESDB_READONLY) != 0;
    size_t plen = strlen(path) + 1;
    db->path = un_ctx_malloc(ctx, plen);
    un_status st = UN_OK;
    if (!db->path) {
        st = un_ctx_error(ctx, UN_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    memcpy(db->path, path, plen);
    if (!(flags & UN_RULESDB_CREATE) || db->readonly) {
        if (access(path, F_OK) != 0) {
            st = un_ctx_error(ctx, UN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
            goto done;
        }
    }
    int oflags = db->readonly ? SQLITE_OPEN_READONLY
                              : SQLITE_OPEN_READWRITE |
                                    ((flags & UN_RULESDB_CREATE) ? SQLITE_OPEN_CREATE : 0);
    int rc = sqlite3_open_v2(path, &db->h, oflags, NULL);
    if (rc != SQLITE_OK) {
        st = db_fail(ctx, db, rc == SQLITE_NOMEM ? rc : SQLITE_CANTOPEN, "opening");
        goto done;
    }
    sqlite3_extended_result_codes(db->h, 1);
    sqlite3_busy_timeout(db->h, UN_RULESDB_BUSY_MS);
    if ((rc = rowsum_register(db->h)) != SQLITE_OK) {
        st = db_fail(ctx, db, rc, "registering un_rowsum");
        goto done;
    }
    bool needs_migrate;
    st = check_ident(ctx, db, flags, &needs_migrate);
    if (st != UN_OK)
        goto done;
    if (!db->readonly) {
        /* WAL: readers never block the writer; a killed writer leaves committed batches only. */
        st = exec_script(ctx, db, "PRAGMA journal_mode = WAL", "enabling WAL");
        if (st == UN_OK)
            st = exec_script(ctx, db, "PRAGMA synchronous = NORMAL", "setting synchronous");
        if (st == UN_OK && needs_migrate)
            st = migrate(ctx, db);
        if (st != UN_OK)
            goto done;
    }
    st = exec_script(ctx, db, "PRAGMA foreign_keys = ON", "enabling foreign keys");
    for (int i = 0; st == UN_OK && i < STMT_COUNT; i++) {
        rc = sqlite3_prepare_v3(db->h, un_rulesdb_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                &db->stmt[i], NULL);
        if (rc != SQLITE_OK)
            st = db_fail(ctx, db, rc, "preparing statements");
    }
    bool known = false;
    if (st == UN_OK && !db->readonly && spec) {
        /* Read first: a no-op insert would still wait for the write lock of a busy writer. */
        sqlite3_stmt *s = stmt_get(db, STMT_SPEC_HAS);
        sqlite3_bind_int64(s, 1, u2i(db->spec_hash));
        rc = sqlite3_step(s);
        known = rc == SQLITE_ROW;
        sqlite3_reset(s);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE)
            st = db_fail(ctx, db, rc, "reading the spec sets");
    }
    db->spec_known = known || db->readonly || !spec;
    if (st == UN_OK && !db->spec_known) {
        /* Without waiting: while another writer holds a batch, the next write registers it. */
        sqlite3_busy_timeout(db->h, 0);
        st = spec_register(ctx, db, true);
        sqlite3_busy_timeout(db->h, UN_RULESDB_BUSY_MS);
    }
done:
    if (st != UN_OK) {
        un_rulesdb_free(db);
        return st;
    }
    *out = db;
    return UN_OK;
}

void un_rulesdb_free(un_rulesdb *db) {
    if (!db)
        return;
    if (db->in_batch)
        un_rulesdb_rollback(db);
    for (int i = 0; i < STMT_COUNT; i++)
        sqlite3_finalize(db->stmt[i]);
    sqlite3_close_v2(db->h);
    un_ctx_free_mem(db->ctx, db->path);
    un_ctx_free_mem(db->ctx, db);
}

const char *un_rulesdb_path(const un_rulesdb *db) { return db->path; }

uint64_t un_rulesdb_spec_hash(const un_rulesdb *db) { return db->spec_hash; }

const un_spec *un_rulesdb_spec(const un_rulesdb *db) { return db->spec; }

/* ---- batches ----------------------------------------------------------------------------------
 */

un_status un_rulesdb_begin(un_ctx *ctx, un_rulesdb *db) {
    if (db->in_batch)
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: a batch is already open", db->path);
    un_status st = stmt_done(ctx, db, stmt_get(db, STMT_BEGIN), "starting a batch");
    if (st == UN_OK)
        db->in_batch = true;
    if (st == UN_OK)
        st = spec_register(ctx, db, false);
    if (st != UN_OK)
        un_rulesdb_rollback(db);
    return st;
}

un_status un_rulesdb_commit(un_ctx *ctx, un_rulesdb *db) {
    if (!db->in_batch)
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: commit without a batch", db->path);
    un_status st = stmt_done(ctx, db, stmt_get(db, STMT_COMMIT), "committing a batch");
    if (st != UN_OK) {
        un_rulesdb_rollback(db);
        return st;
    }
    db->in_batch = false;
    return UN_OK;
}

/* Ends a batch the caller opened: commits when st is UN_OK, else rolls back. Returns the status. */
static un_status batch_end(un_ctx *ctx, un_rulesdb *db, un_status st) {
    if (st == UN_OK)
        return un_rulesdb_commit(ctx, db);
    un_rulesdb_rollback(db);
    return st;
}

void un_rulesdb_rollback(un_rulesdb *db) {
    if (!db || !db->in_batch)
        return;
    db->in_batch = false;
    if (sqlite3_get_autocommit(db->h))
        return; /* SQLite already rolled back (e.g. after an I/O error) */
    sqlite3_stmt *s = stmt_get(db, STMT_ROLLBACK);
    sqlite3_step(s);
    sqlite3_reset(s);
}

/* ---- runs -------------------------------------------------------------------------------------
 */

un_status un_rulesdb_run_begin(un_ctx *ctx, un_rulesdb *db, const char *tool, const char *args,
                               int64_t *run_id) {
    *run_id = 0;
    un_status st0 = spec_register(ctx, db, false);
    if (st0 != UN_OK)
        return st0;
    sqlite3_stmt *s = stmt_get(db, STMT_RUN_BEGIN);
    bind_text(s, 1, tool ? tool : "?");
    bind_text(s, 2, args);
    sqlite3_bind_int64(s, 3, u2i(db->spec_hash));
    sqlite3_bind_double(s, 4, now_s());
    un_status st = stmt_done(ctx, db, s, "recording a run");
    if (st == UN_OK)
        *run_id = sqlite3_last_insert_rowid(db->h);
    return st;
}

un_status un_rulesdb_run_end(un_ctx *ctx, un_rulesdb *db, int64_t run_id, const char *counts_json) {
    sqlite3_stmt *s = stmt_get(db, STMT_RUN_END);
    sqlite3_bind_int64(s, 1, run_id);
    sqlite3_bind_double(s, 2, now_s());
    bind_text(s, 3, counts_json);
    un_status st = stmt_done(ctx, db, s, "ending a run");
    if (st == UN_OK && sqlite3_changes(db->h) != 1)
        st = un_ctx_error(ctx, UN_ERR_INVALID, "%s: no run %lld", db->path, (long long)run_id);
    return st;
}

/* ---- rules: derived columns -------------------------------------------------------------------
 */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "combine,linear,relu": the distinct non-source operators of both sides, sorted. */
static void rule_ops(const un_rule *r, un_buf *out) {
    const char *names[2 * 64];
    int n = 0;
    bool seen[UN_OP_COUNT] = {false};
    for (int side = 0; side < 2; side++) {
        const un_graph *g = side ? r->dst : r->src;
        for (int32_t i = 0; i < un_graph_node_count(g); i++) {
            un_op op = un_graph_node(g, i)->op;
            if (un_op_kind_of(op) == UN_OPK_SOURCE || seen[op])
                continue;
            seen[op] = true;
            names[n++] = un_op_name(op);
        }
    }
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    un_buf_printf(out, "%s", "");
    for (int i = 0; i < n; i++)
        un_buf_printf(out, "%s%s", i ? "," : "", names[i]);
}

/* The stored form of a rule: canonical JSON text plus the columns derived from it. */
typedef struct un_rulesdb_cols {
    uint64_t hash;
    un_buf body, ops, conds; /* conds: readable side conditions, empty when none */
    int n_in, n_src, n_dst;
} un_rulesdb_cols;

static void rule_cols_free(un_rulesdb_cols *c) {
    un_buf_deinit(&c->body);
    un_buf_deinit(&c->ops);
    un_buf_deinit(&c->conds);
}

/* "k | dim 1 of x0; k^2 | dim 2 of x1", or nothing. */
static void rule_conds_text(const un_rule *r, un_buf *out) {
    for (int i = 0; i < r->n_conds; i++) {
        if (i)
            un_buf_printf(out, "; ");
        un_rule_cond_str(r, &r->conds[i], out);
    }
}

static un_status rule_cols_make(un_ctx *ctx, const un_rule *r, uint64_t hash, un_rulesdb_cols *c) {
    memset(c, 0, sizeof *c);
    un_rule *canon = NULL;
    un_status st = un_rule_canonical(ctx, r, &canon);
    if (st == UN_OK)
        st = un_rule_to_json(ctx, canon, &c->body);
    if (st == UN_OK) {
        c->hash = hash;
        c->n_in = un_rule_input_count(canon);
        c->n_src = un_rule_size(canon, UN_RULE_SRC);
        c->n_dst = un_rule_size(canon, UN_RULE_DST);
        rule_ops(canon, &c->ops);
        rule_conds_text(canon, &c->conds);
    }
    un_rule_free(canon);
    if (st != UN_OK)
        rule_cols_free(c);
    return st;
}

/* ---- rules: insert ----------------------------------------------------------------------------
 */

typedef struct raw_rule {
    const un_rulesdb_cols *cols; /* NULL: rejected without a rule */
    un_rule_status status;
    const char *detail, *axioms;
    double proof_ms;
    uint64_t gen_spec, verify_spec;
    double verified_at; /* 0 = never */
    const un_rulesdb_origin *origin;
} raw_rule;

static un_status insert_raw(un_ctx *ctx, un_rulesdb *db, const raw_rule *rr, int32_t *id,
                            bool *inserted) {
    const un_rulesdb_origin none = {.kind = "generated"};
    const un_rulesdb_origin *o = rr->origin ? rr->origin : &none;
    sqlite3_stmt *s = stmt_get(db, STMT_RULE_INSERT);
    if (rr->cols) {
        sqlite3_bind_int64(s, 1, u2i(rr->cols->hash));
        sqlite3_bind_text(s, 2, rr->cols->body.data, (int)rr->cols->body.len, SQLITE_STATIC);
        sqlite3_bind_int64(s, 3, u2i(body_sum(rr->cols->body.data, rr->cols->body.len)));
        sqlite3_bind_int(s, 4, rr->cols->n_in);
        sqlite3_bind_int(s, 5, rr->cols->n_src);
        sqlite3_bind_int(s, 6, rr->cols->n_dst);
        sqlite3_bind_int(s, 7, rr->cols->n_src + rr->cols->n_dst);
        bind_text(s, 8, rr->cols->ops.data ? rr->cols->ops.data : "");
    } else {
        for (int i = 4; i <= 7; i++)
            sqlite3_bind_int(s, i, 0);
        bind_text(s, 8, "");
    }
    bind_text(s, 9, un_rule_status_name(rr->status));
    bind_text(s, 10, rr->detail);
    sqlite3_bind_double(s, 11, rr->proof_ms);
    bind_text(s, 12, rr->axioms);
    sqlite3_bind_int64(s, 13, u2i(rr->gen_spec));
    sqlite3_bind_int64(s, 14, u2i(rr->verify_spec));
    bind_text(s, 15, o->kind ? o->kind : "generated");
    bind_text(s, 16, o->file);
    bind_text(s, 17, o->name);
    if (o->run > 0)
        sqlite3_bind_int64(s, 18, o->run);
    sqlite3_bind_double(s, 19, now_s());
    if (rr->verified_at > 0)
        sqlite3_bind_double(s, 20, rr->verified_at);
    if (rr->cols && rr->cols->conds.len)
        sqlite3_bind_text(s, 21, rr->cols->conds.data, (int)rr->cols->conds.len, SQLITE_STATIC);
    un_status st = stmt_done(ctx, db, s, "inserting a rule");
    if (st != UN_OK)
        return st;
    if (sqlite3_changes(db->h) == 1) {
        *id = (int32_t)sqlite3_last_insert_rowid(db->h);
        *inserted = true;
        return UN_OK;
    }
    *inserted = false;
    if (rr->cols) {
        s = stmt_get(db, STMT_RULE_BY_HASH);
        sqlite3_bind_int64(s, 1, u2i(rr->cols->hash));
    } else {
        s = stmt_get(db, STMT_RULE_BY_ORIGIN);
        bind_text(s, 1, o->file);
        bind_text(s, 2, o->name);
    }
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        *id = (int32_t)sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    if (rc == SQLITE_ROW)
        return UN_OK;
    if (rc == SQLITE_DONE)
        return un_ctx_error(ctx, UN_ERR_DB, "%s: inserting a rule: conflicts with another row",
                            db->path);
    return db_fail(ctx, db, rc, "looking up a rule");
}

/* Inserts the columns made for a rule (NULL: rejected without a rule). */
static un_status insert_made(un_ctx *ctx, un_rulesdb *db, const un_rulesdb_cols *cols,
                             un_rule_status status, const char *detail,
                             const un_rulesdb_origin *origin, int32_t *id, bool *inserted) {
    int32_t id_ = 0;
    bool ins_ = false;
    bool imported = origin && origin->kind && strcmp(origin->kind, "imported") == 0;
    raw_rule rr = {.cols = cols,
                   .status = status,
                   .detail = detail,
                   .gen_spec = imported ? 0 : db->spec_hash,
                   .origin = origin};
    un_status st = insert_raw(ctx, db, &rr, &id_, &ins_);
    if (st == UN_OK) {
        if (id)
            *id = id_;
        if (inserted)
            *inserted = ins_;
    }
    return st;
}

un_status un_rulesdb_rule_insert(un_ctx *ctx, un_rulesdb *db, const un_rule *r,
                                 un_rule_status status, const char *detail,
                                 const un_rulesdb_origin *origin, int32_t *id, bool *inserted) {
    if (id)
        *id = 0;
    if (inserted)
        *inserted = false;
    if (status != UN_RULE_CANDIDATE && status != UN_RULE_REJECTED)
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "%s: a new rule is a candidate or rejected, not %s (record verdicts "
                            "with un_rulesdb_rule_set_verdict)",
                            db->path, un_rule_status_name(status));
    if (!r && status != UN_RULE_REJECTED)
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: inserting a candidate without a rule",
                            db->path);
    if (!r && !(origin && origin->name))
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "%s: a rejected rule without a rule needs an origin name", db->path);
    un_rulesdb_cols cols;
    un_status st = UN_OK;
    if (r)
        st = rule_cols_make(ctx, r, un_rule_hash(r), &cols);
    if (st != UN_OK)
        return st;
    st = insert_made(ctx, db, r ? &cols : NULL, status, detail, origin, id, inserted);
    if (r)
        rule_cols_free(&cols);
    return st;
}

un_status un_rulesdb_cols_new(un_ctx *ctx, const un_rule *r, uint64_t hash, un_rulesdb_cols **out) {
    un_rulesdb_cols *c = un_xmalloc(sizeof *c);
    un_status st = rule_cols_make(ctx, r, hash, c);
    if (st != UN_OK) {
        free(c);
        c = NULL;
    }
    *out = c;
    return st;
}

void un_rulesdb_cols_free(un_rulesdb_cols *c) {
    if (!c)
        return;
    rule_cols_free(c);
    free(c);
}

un_status un_rulesdb_rule_insert_cols(un_ctx *ctx, un_rulesdb *db, const un_rulesdb_cols *c,
                                      const un_rulesdb_origin *origin, int32_t *id,
                                      bool *inserted) {
    if (id)
        *id = 0;
    if (inserted)
        *inserted = false;
    return insert_made(ctx, db, c, UN_RULE_CANDIDATE, NULL, origin, id, inserted);
}

/* ---- rules: read ------------------------------------------------------------------------------
 */

void un_rulesdb_row_free(un_rulesdb_row *row) {
    if (!row)
        return;
    free(row->detail);
    free(row->axioms);
    free(row->origin_kind);
    free(row->origin_file);
    free(row->origin_name);
    free(row->ops);
    un_rule_free(row->rule);
    free(row);
}

/* Parses a stored body and checks it against its checksum and canonical hash. A rule stored in its
 * general form (variables proven for every value) is compared at its witness values. */
static un_status body_parse(un_ctx *ctx, un_rulesdb *db, int32_t id, const char *body, size_t len,
                            uint64_t sum, uint64_t hash, un_rule **out) {
    *out = NULL;
    if (body_sum(body, len) != sum)
        return un_ctx_error(ctx, UN_ERR_DB,
                            "%s: rule %d: content does not match its hash (checksum)", db->path,
                            (int)id);
    char name[64];
    snprintf(name, sizeof name, "rule %d", (int)id);
    un_rule *r = NULL;
    un_ctx *tmp = un_ctx_new_child(ctx);
    un_status st = un_rule_from_json(tmp, db->spec, name, body, len, &r);
    if (st != UN_OK) {
        st = un_ctx_error(ctx, UN_ERR_DB, "%s: rule %d: stored rule does not parse (%s)", db->path,
                          (int)id, un_ctx_errmsg(tmp));
        un_ctx_free(tmp);
        return st;
    }
    bool same = un_rule_hash(r) == hash;
    if (!same && r->n_vars > 0) {
        int64_t vals[UN_RULE_MAX_VARS];
        for (int i = 0; i < r->n_vars; i++)
            vals[i] = r->vars[i].value;
        un_rule *w = NULL;
        same = un_rule_instantiate(tmp, r, vals, NULL, &w) == UN_OK && un_rule_hash(w) == hash;
        un_rule_free(w);
    }
    un_ctx_free(tmp);
    if (!same) {
        un_rule_free(r);
        return un_ctx_error(ctx, UN_ERR_DB, "%s: rule %d: content does not match its hash",
                            db->path, (int)id);
    }
    *out = r;
    return UN_OK;
}

static bool status_parse(sqlite3_stmt *s, un_rule_status *out) {
    const unsigned char *t = sqlite3_column_text(s, COL_STATUS);
    return t && un_rule_status_from_name((const char *)t, out);
}

/* Fills a row from the current result of a ROW_COLS statement. parse: also parse and check the
 * body. body (may be NULL) receives a copy of the stored text. */
static un_status row_read(un_ctx *ctx, un_rulesdb *db, sqlite3_stmt *s, bool parse,
                          un_rulesdb_row **out, char **body) {
    *out = NULL;
    if (body)
        *body = NULL;
    un_rulesdb_row *row = un_xcalloc(1, sizeof *row);
    row->id = (int32_t)sqlite3_column_int64(s, COL_ID);
    row->hash = i2u(sqlite3_column_int64(s, COL_HASH));
    un_status st = UN_OK;
    if (!status_parse(s, &row->status))
        st = un_ctx_error(ctx, UN_ERR_DB, "%s: rule %d: invalid status '%s'", db->path,
                          (int)row->id, (const char *)sqlite3_column_text(s, COL_STATUS));
    row->detail = col_strdup(s, COL_DETAIL);
    row->proof_ms = sqlite3_column_double(s, COL_PROOF_MS);
    row->axioms = col_strdup(s, COL_AXIOMS);
    row->gen_spec = i2u(sqlite3_column_int64(s, COL_GEN_SPEC));
    row->verify_spec = i2u(sqlite3_column_int64(s, COL_VERIFY_SPEC));
    row->origin_kind = col_strdup(s, COL_ORIGIN_KIND);
    row->origin_file = col_strdup(s, COL_ORIGIN_FILE);
    row->origin_name = col_strdup(s, COL_ORIGIN_NAME);
    row->n_src = sqlite3_column_int(s, COL_N_SRC);
    row->n_dst = sqlite3_column_int(s, COL_N_DST);
    row->ops = col_strdup(s, COL_OPS);
    if (!row->ops)
        row->ops = un_xstrdup("");
    row->trusted =
        row->status == UN_RULE_VERIFIED && row->verify_spec == db->spec_hash && db->spec_hash != 0;
    const char *text = (const char *)sqlite3_column_text(s, COL_BODY);
    size_t len = (size_t)sqlite3_column_bytes(s, COL_BODY);
    if (st == UN_OK && !text && sqlite3_column_type(s, COL_HASH) != SQLITE_NULL)
        st = un_ctx_error(ctx, UN_ERR_DB, "%s: rule %d: hash without a body", db->path,
                          (int)row->id);
    if (st == UN_OK && text) {
        if (sqlite3_column_type(s, COL_HASH) == SQLITE_NULL)
            st = un_ctx_error(ctx, UN_ERR_DB, "%s: rule %d: body without a hash", db->path,
                              (int)row->id);
        else if (parse)
            st = body_parse(ctx, db, row->id, text, len, i2u(sqlite3_column_int64(s, COL_SUM)),
                            row->hash, &row->rule);
        if (st == UN_OK && body) {
            *body = un_xmalloc(len + 1);
            memcpy(*body, text, len);
            (*body)[len] = '\0';
        }
    }
    if (st != UN_OK) {
        un_rulesdb_row_free(row);
        return st;
    }
    *out = row;
    return UN_OK;
}

static un_status rule_read(un_ctx *ctx, un_rulesdb *db, int32_t id, bool parse,
                           un_rulesdb_row **out) {
    *out = NULL;
    sqlite3_stmt *s = stmt_get(db, STMT_RULE_GET);
    sqlite3_bind_int64(s, 1, id);
    int rc = sqlite3_step(s);
    un_status st;
    if (rc == SQLITE_ROW)
        st = row_read(ctx, db, s, parse, out, NULL);
    else if (rc == SQLITE_DONE)
        st = un_ctx_error(ctx, UN_ERR_INVALID, "%s: no rule %d", db->path, (int)id);
    else
        st = db_fail(ctx, db, rc, "reading a rule");
    sqlite3_reset(s);
    return st;
}

un_status un_rulesdb_rule_get(un_ctx *ctx, un_rulesdb *db, int32_t id, un_rulesdb_row **out) {
    return rule_read(ctx, db, id, true, out);
}

un_status un_rulesdb_rule_meta(un_ctx *ctx, un_rulesdb *db, int32_t id, un_rulesdb_row **out) {
    return rule_read(ctx, db, id, false, out);
}

un_rulesdb_filter un_rulesdb_filter_default(void) {
    return (un_rulesdb_filter){.status = -1, .op = -1};
}

un_status un_rulesdb_rule_ids(un_ctx *ctx, un_rulesdb *db, const un_rulesdb_filter *f,
                              int32_t **ids, int64_t *n) {
    *ids = NULL;
    *n = 0;
    un_rulesdb_filter d = un_rulesdb_filter_default();
    if (!f)
        f = &d;
    if (f->shard_n < 0 || (f->shard_n > 0 && (f->shard_i < 0 || f->shard_i >= f->shard_n)))
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: shard %d of %d is out of range", db->path,
                            f->shard_i, f->shard_n);
    if (f->status >= UN_RULE_STATUS_COUNT || f->op >= UN_OP_COUNT)
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: bad filter (status %d, op %d)", db->path,
                            f->status, f->op);
    sqlite3_stmt *s = stmt_get(db, STMT_RULE_IDS);
    char opkey[64];
    sqlite3_bind_int64(s, 1, f->after_id);
    if (f->status >= 0)
        bind_text(s, 2, un_rule_status_name((un_rule_status)f->status));
    if (f->op >= 0) {
        snprintf(opkey, sizeof opkey, ",%s,", un_op_name((un_op)f->op));
        bind_text(s, 3, opkey);
    }
    sqlite3_bind_int(s, 4, f->min_size > 0 ? f->min_size : 0);
    sqlite3_bind_int(s, 5, f->max_size > 0 ? f->max_size : 0);
    sqlite3_bind_int(s, 6, f->shard_n);
    sqlite3_bind_int(s, 7, f->shard_i);
    sqlite3_bind_int(s, 8, f->needs_verify ? 1 : 0);
    sqlite3_bind_int64(s, 9, u2i(db->spec_hash));
    sqlite3_bind_int64(s, 10, f->limit > 0 ? f->limit : -1);
    sqlite3_bind_int(s, 12, f->max_ops > 0 ? f->max_ops : 0);
    int32_t *v = NULL;
    int64_t cnt = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (cnt == cap) {
            cap = cap ? cap * 2 : 256;
            int32_t *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) {
                free(v);
                sqlite3_reset(s);
                return un_ctx_error(ctx, UN_ERR_NOMEM, "%s: out of memory listing rules", db->path);
            }
            v = nv;
        }
        v[cnt++] = (int32_t)sqlite3_column_int64(s, 0);
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        free(v);
        return db_fail(ctx, db, rc, "listing rules");
    }
    *ids = v;
    *n = cnt;
    return UN_OK;
}

/* ---- verdicts ---------------------------------------------------------------------------------
 */

static un_status verdict_write(un_ctx *ctx, un_rulesdb *db, int32_t id, un_rule_status status,
                               const char *detail, double proof_ms, const char *axioms,
                               uint64_t spec, double when) {
    sqlite3_stmt *s = stmt_get(db, STMT_RULE_VERDICT);
    sqlite3_bind_int64(s, 1, id);
    bind_text(s, 2, un_rule_status_name(status));
    bind_text(s, 3, detail);
    sqlite3_bind_double(s, 4, proof_ms);
    bind_text(s, 5, axioms);
    sqlite3_bind_int64(s, 6, u2i(spec));
    sqlite3_bind_double(s, 7, when);
    un_status st = stmt_done(ctx, db, s, "recording a verdict");
    if (st == UN_OK && sqlite3_changes(db->h) != 1)
        st = un_ctx_error(ctx, UN_ERR_INVALID,
                          "%s: no rule %d to record a verdict for "
                          "(or it is a rejected import)",
                          db->path, (int)id);
    return st;
}

static un_status body_write(un_ctx *ctx, un_rulesdb *db, int32_t id, const un_rulesdb_cols *c) {
    sqlite3_stmt *s = stmt_get(db, STMT_RULE_BODY);
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_text(s, 2, c->body.data, (int)c->body.len, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, u2i(body_sum(c->body.data, c->body.len)));
    if (c->conds.len)
        sqlite3_bind_text(s, 4, c->conds.data, (int)c->conds.len, SQLITE_STATIC);
    return stmt_done(ctx, db, s, "storing a rule's general form");
}

/* Reads the stored hash of rule id. */
static un_status stored_hash(un_ctx *ctx, un_rulesdb *db, int32_t id, uint64_t *hash) {
    sqlite3_stmt *s = stmt_get(db, STMT_RULE_GET);
    sqlite3_bind_int64(s, 1, id);
    int rc = sqlite3_step(s);
    un_status st = UN_OK;
    if (rc == SQLITE_ROW)
        *hash = i2u(sqlite3_column_int64(s, COL_HASH));
    else if (rc == SQLITE_DONE)
        st = un_ctx_error(ctx, UN_ERR_INVALID, "%s: no rule %d", db->path, (int)id);
    else
        st = db_fail(ctx, db, rc, "reading a rule");
    sqlite3_reset(s);
    return st;
}

un_status un_rulesdb_rule_set_verdict(un_ctx *ctx, un_rulesdb *db, int32_t id,
                                      const un_rulesdb_verdict *v) {
    if (v->status != UN_RULE_VERIFIED && v->status != UN_RULE_REFUTED &&
        v->status != UN_RULE_UNKNOWN)
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "%s: rule %d: a verdict is verified, refuted or "
                            "unknown, not %s",
                            db->path, (int)id, un_rule_status_name(v->status));
    if (db->readonly)
        return un_ctx_error(ctx, UN_ERR_DB, "%s: opened read-only", db->path);
    bool own = !db->in_batch;
    un_status st = UN_OK;
    un_rulesdb_cols cols = {0};
    bool have_cols = false;
    if (v->general) {
        uint64_t hash = 0;
        st = stored_hash(ctx, db, id, &hash);
        if (st != UN_OK)
            return st;
        int64_t vals[UN_RULE_MAX_VARS];
        for (int i = 0; i < v->general->n_vars; i++)
            vals[i] = v->general->vars[i].value;
        un_rule *w = NULL;
        uint64_t wh = un_rule_hash(v->general);
        if (wh != hash && v->general->n_vars > 0 &&
            un_rule_instantiate(ctx, v->general, vals, NULL, &w) == UN_OK)
            wh = un_rule_hash(w);
        un_rule_free(w);
        if (wh != hash)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "%s: rule %d: the general form is not the same rule at its "
                                "witness values",
                                db->path, (int)id);
        st = rule_cols_make(ctx, v->general, hash, &cols);
        if (st != UN_OK)
            return st;
        have_cols = true;
    }
    if (own)
        st = un_rulesdb_begin(ctx, db);
    if (st == UN_OK)
        st = verdict_write(ctx, db, id, v->status, v->detail, v->proof_ms, v->axioms, db->spec_hash,
                           now_s());
    if (st == UN_OK && have_cols)
        st = body_write(ctx, db, id, &cols);
    if (own)
        st = batch_end(ctx, db, st);
    if (have_cols)
        rule_cols_free(&cols);
    return st;
}

un_status un_rulesdb_check_sums(un_ctx *ctx, un_rulesdb *db) {
    sqlite3_stmt *s = stmt_get(db, STMT_RULE_SUMS_BAD);
    int rc = sqlite3_step(s);
    un_status st = UN_OK;
    if (rc == SQLITE_ROW)
        st = un_ctx_error(ctx, UN_ERR_DB,
                          "%s: rule %lld does not match its checksum (%lld damaged rows; "
                          "unity-rules check lists them)",
                          db->path, (long long)sqlite3_column_int64(s, 0),
                          (long long)sqlite3_column_int64(s, 1));
    else if (rc != SQLITE_DONE)
        st = db_fail(ctx, db, rc, "checking row checksums");
    sqlite3_reset(s);
    return st;
}

/* ---- work claims ------------------------------------------------------------------------------
 */

un_status un_rulesdb_claim(un_ctx *ctx, un_rulesdb *db, const un_rulesdb_filter *f,
                           const char *owner, double lease_s, int max, int32_t *ids, int *n,
                           int64_t *others) {
    *n = 0;
    if (others)
        *others = 0;
    if (db->readonly)
        return un_ctx_error(ctx, UN_ERR_DB, "%s: opened read-only", db->path);
    if (db->in_batch)
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: claiming inside a batch", db->path);
    un_rulesdb_filter d = un_rulesdb_filter_default();
    if (!f)
        f = &d;
    double now = now_s();
    un_status st = un_rulesdb_begin(ctx, db);
    if (st != UN_OK)
        return st;
    sqlite3_stmt *s = stmt_get(db, STMT_CLAIM_EXPIRE);
    sqlite3_bind_double(s, 1, now);
    st = stmt_done(ctx, db, s, "expiring claims");
    int got = 0, rc = SQLITE_DONE;
    if (st == UN_OK) {
        s = stmt_get(db, STMT_CLAIM_FREE);
        sqlite3_bind_int64(s, 1, f->after_id);
        sqlite3_bind_int(s, 6, f->shard_n);
        sqlite3_bind_int(s, 7, f->shard_i);
        sqlite3_bind_int(s, 8, f->needs_verify ? 1 : 0);
        sqlite3_bind_int64(s, 9, u2i(db->spec_hash));
        sqlite3_bind_int64(s, 10, max);
        sqlite3_bind_double(s, 11, f->undecided_since);
        sqlite3_bind_int(s, 12, f->max_ops > 0 ? f->max_ops : 0);
        while (got < max && (rc = sqlite3_step(s)) == SQLITE_ROW)
            ids[got++] = (int32_t)sqlite3_column_int64(s, 0);
        db->claim_steps += sqlite3_stmt_status(s, SQLITE_STMTSTATUS_VM_STEP, 1);
        sqlite3_reset(s);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE)
            st = db_fail(ctx, db, rc, "finding work to claim");
    }
    for (int i = 0; st == UN_OK && i < got; i++) {
        s = stmt_get(db, STMT_CLAIM_ADD);
        sqlite3_bind_int64(s, 1, ids[i]);
        bind_text(s, 2, owner);
        sqlite3_bind_double(s, 3, now + lease_s);
        st = stmt_done(ctx, db, s, "claiming a rule");
    }
    if (st == UN_OK && others) {
        s = stmt_get(db, STMT_CLAIM_OTHERS);
        bind_text(s, 1, owner);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW)
            *others = sqlite3_column_int64(s, 0);
        else
            st = db_fail(ctx, db, rc, "counting claims");
        sqlite3_reset(s);
    }
    st = batch_end(ctx, db, st);
    if (st == UN_OK)
        *n = got;
    return st;
}

int64_t un_rulesdb_claim_steps(const un_rulesdb *db) { return db->claim_steps; }

un_status un_rulesdb_claim_renew(un_ctx *ctx, un_rulesdb *db, const char *owner, double lease_s) {
    sqlite3_stmt *s = stmt_get(db, STMT_CLAIM_RENEW);
    bind_text(s, 1, owner);
    sqlite3_bind_double(s, 2, now_s() + lease_s);
    return stmt_done(ctx, db, s, "renewing claims");
}

un_status un_rulesdb_claim_release(un_ctx *ctx, un_rulesdb *db, const char *owner) {
    sqlite3_stmt *s = stmt_get(db, STMT_CLAIM_RELEASE);
    bind_text(s, 1, owner);
    return stmt_done(ctx, db, s, "releasing claims");
}

un_status un_rulesdb_load_verified(un_ctx *ctx, un_rulesdb *db, un_rule ***rules, int64_t *n,
                                   int64_t *n_stale) {
    return un_rulesdb_load_verified_ids(ctx, db, rules, NULL, n, n_stale);
}

typedef struct load_all {
    un_rule **v;
    int32_t *ids;
    int64_t n, cap;
} load_all;

static un_status load_all_take(void *user, int32_t id, uint64_t hash, un_rule *r) {
    (void)hash;
    load_all *l = user;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = un_xrealloc(l->v, (size_t)l->cap * sizeof *l->v);
        l->ids = un_xrealloc(l->ids, (size_t)l->cap * sizeof *l->ids);
    }
    l->ids[l->n] = id;
    l->v[l->n++] = r;
    return UN_OK;
}

un_status un_rulesdb_load_verified_ids(un_ctx *ctx, un_rulesdb *db, un_rule ***rules, int32_t **ids,
                                       int64_t *n, int64_t *n_stale) {
    *rules = NULL;
    if (ids)
        *ids = NULL;
    *n = 0;
    if (n_stale)
        *n_stale = 0;
    load_all l = {0};
    un_status st = un_rulesdb_verified_each(ctx, db, NULL, load_all_take, &l, n_stale);
    if (st != UN_OK) {
        for (int64_t i = 0; i < l.n; i++)
            un_rule_free(l.v[i]);
        free(l.v);
        free(l.ids);
        return st;
    }
    *rules = l.v;
    if (ids)
        *ids = l.ids;
    else
        free(l.ids);
    *n = l.n;
    return UN_OK;
}

struct un_rulesdb_walk {
    un_rulesdb *db;
    int64_t stale;
    bool done;
};

un_rulesdb_walk *un_rulesdb_walk_new(un_rulesdb *db) {
    un_rulesdb_walk *w = un_xcalloc(1, sizeof *w);
    w->db = db;
    stmt_get(db, STMT_RULE_VERIFIED);
    return w;
}

void un_rulesdb_walk_free(un_rulesdb_walk *w) {
    if (!w)
        return;
    sqlite3_reset(w->db->stmt[STMT_RULE_VERIFIED]);
    free(w);
}

bool un_rulesdb_walk_done(const un_rulesdb_walk *w) { return w->done; }

int64_t un_rulesdb_walk_stale(const un_rulesdb_walk *w) { return w->stale; }

un_status un_rulesdb_walk_next(un_ctx *ctx, un_rulesdb_walk *w, int64_t max,
                               un_rulesdb_skip_fn skip, un_rulesdb_raw_fn take_raw, void *user) {
    un_rulesdb *db = w->db;
    sqlite3_stmt *s = db->stmt[STMT_RULE_VERIFIED];
    un_status st = UN_OK;
    int64_t seen = 0;
    while (!w->done && seen < max) {
        int rc = sqlite3_step(s);
        if (rc != SQLITE_ROW) {
            w->done = true;
            if (rc != SQLITE_DONE)
                st = db_fail(ctx, db, rc, "loading verified rules");
            break;
        }
        if (i2u(sqlite3_column_int64(s, COL_VERIFY_SPEC)) != db->spec_hash || !db->spec_hash) {
            w->stale++;
            continue;
        }
        seen++;
        int32_t id = (int32_t)sqlite3_column_int64(s, COL_ID);
        uint64_t hash = i2u(sqlite3_column_int64(s, COL_HASH));
        if (skip && skip(user, id, hash))
            continue;
        const char *text = (const char *)sqlite3_column_text(s, COL_BODY);
        if (!text)
            st = un_ctx_error(ctx, UN_ERR_DB, "%s: rule %d: verified without a body", db->path,
                              (int)id);
        else
            st = take_raw(user, id, hash, text, (size_t)sqlite3_column_bytes(s, COL_BODY),
                          i2u(sqlite3_column_int64(s, COL_SUM)));
        if (st != UN_OK) {
            w->done = true;
            break;
        }
    }
    return st;
}

un_status un_rulesdb_body_parse(un_ctx *ctx, un_rulesdb *db, int32_t id, uint64_t hash,
                                const char *body, size_t len, uint64_t sum, un_rule **out) {
    return body_parse(ctx, db, id, body, len, sum, hash, out);
}

/* un_rulesdb_verified_each over the walk: each body parsed here, then given to take. */
typedef struct each_parse {
    un_ctx *ctx;
    un_rulesdb *db;
    un_rulesdb_skip_fn skip;
    un_rulesdb_take_fn take;
    void *user;
} each_parse;

static bool each_skip(void *user, int32_t id, uint64_t hash) {
    each_parse *e = user;
    return e->skip(e->user, id, hash);
}

static un_status each_parse_take(void *user, int32_t id, uint64_t hash, const char *body,
                                 size_t len, uint64_t sum) {
    each_parse *e = user;
    un_rule *r = NULL;
    un_status st = body_parse(e->ctx, e->db, id, body, len, sum, hash, &r);
    return st == UN_OK ? e->take(e->user, id, hash, r) : st;
}

un_status un_rulesdb_verified_each(un_ctx *ctx, un_rulesdb *db, un_rulesdb_skip_fn skip,
                                   un_rulesdb_take_fn take, void *user, int64_t *n_stale) {
    each_parse e = {ctx, db, skip, take, user};
    if (n_stale)
        *n_stale = 0;
    un_rulesdb_walk *w = un_rulesdb_walk_new(db);
    un_status st =
        un_rulesdb_walk_next(ctx, w, INT64_MAX, skip ? each_skip : NULL, each_parse_take, &e);
    if (st == UN_OK && n_stale)
        *n_stale = un_rulesdb_walk_stale(w);
    un_rulesdb_walk_free(w);
    return st;
}

un_status un_rulesdb_count(un_ctx *ctx, un_rulesdb *db, int64_t *counts) {
    for (int i = 0; i < UN_RULE_STATUS_COUNT; i++)
        counts[i] = 0;
    sqlite3_stmt *s = stmt_get(db, STMT_RULE_COUNT);
    int rc;
    un_status st = UN_OK;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        un_rule_status k;
        const unsigned char *t = sqlite3_column_text(s, 0);
        if (!t || !un_rule_status_from_name((const char *)t, &k)) {
            st = un_ctx_error(ctx, UN_ERR_DB, "%s: invalid status '%s'", db->path,
                              t ? (const char *)t : "NULL");
            break;
        }
        counts[k] = sqlite3_column_int64(s, 1);
    }
    if (st == UN_OK && rc != SQLITE_DONE)
        st = db_fail(ctx, db, rc, "counting rules");
    sqlite3_reset(s);
    if (st != UN_OK)
        for (int i = 0; i < UN_RULE_STATUS_COUNT; i++)
            counts[i] = 0;
    return st;
}

/* ---- op-cost cache ----------------------------------------------------------------------------
 */

un_status un_rulesdb_cost_put(un_ctx *ctx, un_rulesdb *db, const un_rulesdb_cost *c) {
    sqlite3_stmt *s = stmt_get(db, STMT_COST_PUT);
    bind_text(s, 1, c->op_sig);
    bind_text(s, 2, c->shape);
    bind_text(s, 3, c->device);
    sqlite3_bind_double(s, 4, c->fwd_ms);
    sqlite3_bind_double(s, 5, c->bwd_ms);
    sqlite3_bind_double(s, 6, c->bytes);
    sqlite3_bind_int64(s, 7, c->measured_at ? c->measured_at : (int64_t)time(NULL));
    return stmt_done(ctx, db, s, "storing an op cost");
}

static void copy_str(char *dst, size_t n, const unsigned char *src) {
    snprintf(dst, n, "%s", src ? (const char *)src : "");
}

un_status un_rulesdb_cost_get(un_ctx *ctx, un_rulesdb *db, const char *op_sig, const char *shape,
                              const char *device, un_rulesdb_cost *out, bool *found) {
    memset(out, 0, sizeof *out);
    *found = false;
    sqlite3_stmt *s = stmt_get(db, STMT_COST_GET);
    bind_text(s, 1, op_sig);
    bind_text(s, 2, shape);
    bind_text(s, 3, device);
    int rc = sqlite3_step(s);
    un_status st = UN_OK;
    if (rc == SQLITE_ROW) {
        copy_str(out->op_sig, sizeof out->op_sig, (const unsigned char *)op_sig);
        copy_str(out->shape, sizeof out->shape, (const unsigned char *)shape);
        copy_str(out->device, sizeof out->device, (const unsigned char *)device);
        out->fwd_ms = sqlite3_column_double(s, 0);
        out->bwd_ms = sqlite3_column_double(s, 1);
        out->bytes = sqlite3_column_double(s, 2);
        out->measured_at = sqlite3_column_int64(s, 3);
        *found = true;
    } else if (rc != SQLITE_DONE) {
        st = db_fail(ctx, db, rc, "reading an op cost");
    }
    sqlite3_reset(s);
    return st;
}

un_status un_rulesdb_cost_list(un_ctx *ctx, un_rulesdb *db, const char *op_sig, const char *device,
                               un_rulesdb_cost **out, int64_t *n) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s = stmt_get(db, STMT_COST_LIST);
    bind_text(s, 1, op_sig);
    bind_text(s, 2, device);
    int64_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            *out = un_xrealloc(*out, (size_t)cap * sizeof **out);
        }
        un_rulesdb_cost *c = &(*out)[(*n)++];
        memset(c, 0, sizeof *c);
        copy_str(c->op_sig, sizeof c->op_sig, (const unsigned char *)op_sig);
        copy_str(c->shape, sizeof c->shape, sqlite3_column_text(s, 0));
        copy_str(c->device, sizeof c->device, (const unsigned char *)device);
        c->fwd_ms = sqlite3_column_double(s, 1);
        c->bwd_ms = sqlite3_column_double(s, 2);
        c->bytes = sqlite3_column_double(s, 3);
        c->measured_at = sqlite3_column_int64(s, 4);
    }
    un_status st = UN_OK;
    if (rc != SQLITE_DONE) {
        st = db_fail(ctx, db, rc, "listing op costs");
        free(*out);
        *out = NULL;
        *n = 0;
    }
    sqlite3_reset(s);
    return st;
}

/* ---- integrity --------------------------------------------------------------------------------
 */

/* The columns derived from a row's body, recomputed, and its row checksum: NULL when they agree,
 * else the problem (in tmp's error slot). */
static const char *derived_check(un_ctx *tmp, un_rulesdb *db, const un_rulesdb_row *row) {
    sqlite3_stmt *s = stmt_get(db, STMT_RULE_ROWSUM_OK);
    sqlite3_bind_int64(s, 1, row->id);
    int rc = sqlite3_step(s);
    const char *problem = NULL;
    if (rc != SQLITE_ROW) {
        problem = "cannot be read again";
    } else if (!sqlite3_column_int(s, 0)) {
        problem = "its derived or provenance columns (ops, size, n_in, run, conds) were changed "
                  "(row checksum)";
    } else if (row->rule) {
        un_rulesdb_cols c;
        if (rule_cols_make(tmp, row->rule, row->hash, &c) != UN_OK) {
            problem = "its body cannot be put in canonical form";
        } else {
            const char *conds = (const char *)sqlite3_column_text(s, 3);
            if (c.n_src != row->n_src || c.n_dst != row->n_dst ||
                c.n_in != sqlite3_column_int(s, 1) ||
                c.n_src + c.n_dst != sqlite3_column_int(s, 2) ||
                strcmp(c.ops.data ? c.ops.data : "", row->ops) ||
                strcmp(c.conds.data ? c.conds.data : "", conds ? conds : ""))
                problem = "its derived columns (ops, size, n_in, n_src, n_dst, conds) do not "
                          "match its body";
            rule_cols_free(&c);
        }
    }
    sqlite3_reset(s);
    return problem;
}

/* ---- the spec sets' text -------------------------------------------------------------------
 * Table spec_texts (made when first written, so older databases need no migration): the source
 * text of a spec set keyed by its hash, with a checksum of the text. */

#define SPEC_TEXTS_SQL                                                                             \
    "CREATE TABLE IF NOT EXISTS spec_texts ("                                                      \
    "  hash INTEGER PRIMARY KEY," /* un_spec_hash of the parsed text */                            \
    "  text TEXT NOT NULL,"                                                                        \
    "  text_sum INTEGER NOT NULL," /* un_hash_bytes(text, 0) */                                    \
    "  stored REAL NOT NULL)"

static bool spec_texts_exist(sqlite3 *h) {
    sqlite3_stmt *s = NULL;
    bool yes = sqlite3_prepare_v2(h, "SELECT 1 FROM sqlite_master WHERE name = 'spec_texts'", -1,
                                  &s, NULL) == SQLITE_OK &&
               sqlite3_step(s) == SQLITE_ROW;
    sqlite3_finalize(s);
    return yes;
}

un_status un_rulesdb_spec_text_put(un_ctx *ctx, un_rulesdb *db, const char *text, size_t len) {
    if (db->readonly)
        return un_ctx_error(ctx, UN_ERR_DB, "%s: opened read-only", db->path);
    un_spec *parsed = NULL;
    un_status st = un_spec_parse(ctx, "spec text", text, len, &parsed);
    if (st != UN_OK)
        return st;
    bool same = un_spec_hash(parsed) == db->spec_hash;
    un_spec_free(parsed);
    if (!same)
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "%s: the spec text is not the spec set the database was opened with",
                            db->path);
    st = exec_script(ctx, db, SPEC_TEXTS_SQL, "making the spec_texts table");
    sqlite3_stmt *s = NULL;
    int rc = SQLITE_OK;
    if (st == UN_OK)
        rc = sqlite3_prepare_v2(db->h,
                                "INSERT INTO spec_texts(hash, text, text_sum, stored) "
                                "VALUES (?1, ?2, ?3, ?4) ON CONFLICT(hash) DO UPDATE SET "
                                "text = ?2, text_sum = ?3, stored = ?4",
                                -1, &s, NULL);
    if (st == UN_OK && rc == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, u2i(db->spec_hash));
        sqlite3_bind_text(s, 2, text, (int)len, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 3, u2i(un_hash_bytes(text, len, 0)));
        sqlite3_bind_double(s, 4, now_s());
        rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
            rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    if (st == UN_OK && rc != SQLITE_OK)
        st = db_fail(ctx, db, rc, "storing the spec text");
    return st;
}

un_status un_rulesdb_spec_text_get(un_ctx *ctx, const char *path, char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return UN_OK;
    sqlite3 *h = NULL;
    sqlite3_stmt *s = NULL;
    un_status st = UN_OK;
    if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_busy_timeout(h, UN_RULESDB_BUSY_MS) == SQLITE_OK && spec_texts_exist(h) &&
        sqlite3_prepare_v2(h, "SELECT text, text_sum FROM spec_texts ORDER BY stored DESC LIMIT 1",
                           -1, &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(s, 0);
        size_t n = (size_t)sqlite3_column_bytes(s, 0);
        if (!t || u2i(un_hash_bytes(t, n, 0)) != sqlite3_column_int64(s, 1)) {
            st = un_ctx_error(ctx, UN_ERR_DB,
                              "%s: the stored spec text does not match its checksum (unity-rules "
                              "check; or give --spec)",
                              path);
        } else {
            *text = un_xmalloc(n + 1);
            memcpy(*text, t, n);
            (*text)[n] = '\0';
            *len = n;
        }
    }
    sqlite3_finalize(s);
    sqlite3_close(h);
    return st;
}

/* Each stored spec text matches its checksum and parses to the spec set of its hash. */
static un_status spec_texts_check(un_ctx *ctx, un_rulesdb *db, int64_t *bad, un_buf *report) {
    if (!spec_texts_exist(db->h))
        return UN_OK;
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db->h, "SELECT hash, text, text_sum FROM spec_texts", -1, &s, NULL);
    while (rc != SQLITE_ERROR && s && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(s, 1);
        size_t n = (size_t)sqlite3_column_bytes(s, 1);
        const char *problem = NULL;
        un_ctx *tmp = un_ctx_new_child(ctx);
        un_spec *sp = NULL;
        if (!t || u2i(un_hash_bytes(t, n, 0)) != sqlite3_column_int64(s, 2))
            problem = "does not match its checksum";
        else if (un_spec_parse(tmp, "spec text", t, n, &sp) != UN_OK)
            problem = un_ctx_errmsg(tmp);
        else if (u2i(un_spec_hash(sp)) != sqlite3_column_int64(s, 0))
            problem = "parses to another spec set than its hash";
        if (problem) {
            (*bad)++;
            if (report)
                un_buf_printf(report, "spec text %016llx: %s\n",
                              (unsigned long long)i2u(sqlite3_column_int64(s, 0)), problem);
        }
        un_spec_free(sp);
        un_ctx_free(tmp);
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE)
        return db_fail(ctx, db, rc, "checking the spec texts");
    return UN_OK;
}

un_status un_rulesdb_check(un_ctx *ctx, un_rulesdb *db, int64_t *n_bad, un_buf *report) {
    *n_bad = 0;
    int64_t bad = 0;
    sqlite3_stmt *s = stmt_get(db, STMT_INTEGRITY);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(s, 0);
        if (t && strcmp(t, "ok") != 0) {
            bad++;
            if (report)
                un_buf_printf(report, "integrity_check: %s\n", t);
        }
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE)
        return db_fail(ctx, db, rc, "integrity check");
    s = stmt_get(db, STMT_RULE_ALL);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        un_ctx *tmp = un_ctx_new_child(ctx);
        un_rulesdb_row *row = NULL;
        un_status st = row_read(tmp, db, s, true, &row, NULL);
        const char *problem = NULL;
        if (st != UN_OK)
            problem = un_ctx_errmsg(tmp);
        else if (row->status == UN_RULE_VERIFIED && row->verify_spec == 0)
            problem = "verified without a spec-set hash";
        else if (row->status == UN_RULE_VERIFIED && row->verify_spec != db->spec_hash)
            problem = NULL; /* stale, not damaged: reported by stats and load_verified */
        else if (row->status != UN_RULE_REJECTED && !row->rule)
            problem = "no rule body";
        else
            problem = derived_check(tmp, db, row);
        if (problem) {
            bad++;
            if (report)
                un_buf_printf(report, "rule %lld: %s\n", (long long)sqlite3_column_int64(s, 0),
                              problem);
        }
        un_rulesdb_row_free(row);
        un_ctx_free(tmp);
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE)
        return db_fail(ctx, db, rc, "checking rules");
    un_status st = spec_texts_check(ctx, db, &bad, report);
    *n_bad = bad;
    return st;
}

/* ---- merge ------------------------------------------------------------------------------------
 */

/* How much a stored verdict is worth: a definitive verdict under the spec set in use beats one
 * under another spec set, which beats unknown, which beats candidate. */
static int verdict_rank(un_rule_status s, uint64_t spec, uint64_t cur) {
    switch (s) {
    case UN_RULE_VERIFIED:
    case UN_RULE_REFUTED:
        return spec == cur ? 3 : 2;
    case UN_RULE_UNKNOWN:
        return 1;
    default:
        return 0;
    }
}

static un_status merge_rows(un_ctx *ctx, un_rulesdb *db, un_rulesdb *src,
                            un_rulesdb_merge_stats *ms) {
    int32_t *ids = NULL;
    int64_t n = 0;
    un_status st = un_rulesdb_rule_ids(ctx, src, NULL, &ids, &n);
    for (int64_t i = 0; st == UN_OK && i < n; i++) {
        sqlite3_stmt *s = stmt_get(src, STMT_RULE_GET);
        sqlite3_bind_int64(s, 1, ids[i]);
        int rc = sqlite3_step(s);
        un_rulesdb_row *row = NULL;
        char *body = NULL;
        double verified_at = 0;
        if (rc == SQLITE_ROW) {
            st = row_read(ctx, src, s, true, &row, &body);
        } else {
            st = db_fail(ctx, src, rc == SQLITE_DONE ? SQLITE_CORRUPT : rc, "reading a rule");
        }
        sqlite3_reset(s);
        if (st != UN_OK)
            break;
        un_rulesdb_cols cols = {0};
        bool have = row->rule != NULL;
        if (have) {
            /* Keep the stored text (it may be a general form) and its identity hash. */
            st = rule_cols_make(ctx, row->rule, row->hash, &cols);
            if (st == UN_OK) {
                un_buf_deinit(&cols.body);
                un_buf_printf(&cols.body, "%s", body);
            }
        }
        un_rulesdb_origin o = {
            .kind = row->origin_kind, .file = row->origin_file, .name = row->origin_name};
        raw_rule rr = {.cols = have ? &cols : NULL,
                       .status = row->status,
                       .detail = row->detail,
                       .axioms = row->axioms,
                       .proof_ms = row->proof_ms,
                       .gen_spec = row->gen_spec,
                       .verify_spec = row->verify_spec,
                       .verified_at = row->status == UN_RULE_CANDIDATE ? 0 : now_s(),
                       .origin = &o};
        int32_t id = 0;
        bool inserted = false;
        if (st == UN_OK)
            st = insert_raw(ctx, db, &rr, &id, &inserted);
        if (st == UN_OK && inserted) {
            ms->added++;
        } else if (st == UN_OK) {
            ms->duplicates++;
            sqlite3_stmt *q = stmt_get(db, STMT_RULE_STATE);
            sqlite3_bind_int64(q, 1, id);
            rc = sqlite3_step(q);
            un_rule_status have_st = UN_RULE_CANDIDATE;
            uint64_t have_spec = 0;
            if (rc == SQLITE_ROW) {
                const unsigned char *t = sqlite3_column_text(q, 0);
                if (!t || !un_rule_status_from_name((const char *)t, &have_st))
                    have_st = UN_RULE_CANDIDATE;
                have_spec = i2u(sqlite3_column_int64(q, 1));
            } else {
                st = db_fail(ctx, db, rc == SQLITE_DONE ? SQLITE_CORRUPT : rc, "merging");
            }
            sqlite3_reset(q);
            int r_new = verdict_rank(row->status, row->verify_spec, db->spec_hash);
            int r_old = verdict_rank(have_st, have_spec, db->spec_hash);
            if (st == UN_OK && r_new >= 2 && r_old >= 2 && row->status != have_st)
                ms->conflicts++;
            if (st == UN_OK && have_st != UN_RULE_REJECTED && r_new > r_old) {
                st =
                    verdict_write(ctx, db, id, row->status, row->detail, row->proof_ms, row->axioms,
                                  row->verify_spec, verified_at ? verified_at : now_s());
                if (st == UN_OK && have)
                    st = body_write(ctx, db, id, &cols);
                if (st == UN_OK)
                    ms->updated++;
            }
        }
        if (have)
            rule_cols_free(&cols);
        free(body);
        un_rulesdb_row_free(row);
    }
    free(ids);
    return st;
}

un_status un_rulesdb_merge_ex(un_ctx *ctx, un_rulesdb *db, un_rulesdb *src,
                              un_rulesdb_merge_stats *stats) {
    un_rulesdb_merge_stats ms = {0};
    *stats = ms;
    if (db == src)
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: cannot merge a database into itself",
                            db->path);
    bool own = !db->in_batch;
    un_status st = own ? un_rulesdb_begin(ctx, db) : UN_OK;
    if (st == UN_OK)
        st = merge_rows(ctx, db, src, &ms);
    if (own)
        st = batch_end(ctx, db, st);
    if (st == UN_OK)
        *stats = ms;
    return st;
}

un_status un_rulesdb_merge(un_ctx *ctx, un_rulesdb *db, un_rulesdb *src, int64_t *n_added,
                           int64_t *n_updated) {
    un_rulesdb_merge_stats ms;
    un_status st = un_rulesdb_merge_ex(ctx, db, src, &ms);
    if (n_added)
        *n_added = ms.added;
    if (n_updated)
        *n_updated = ms.updated;
    return st;
}

/* ---- testing ----------------------------------------------------------------------------------
 */

un_status un_rulesdb__test_exec(un_ctx *ctx, const char *path, const char *sql) {
    un_rulesdb tmp = {.path = (char *)(uintptr_t)path};
    int rc = sqlite3_open_v2(path, &tmp.h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    un_status st = UN_OK;
    if (rc != SQLITE_OK)
        st = db_fail(ctx, &tmp, rc, "opening");
    if (st == UN_OK)
        st = exec_script(ctx, &tmp, sql, "running test SQL");
    sqlite3_close_v2(tmp.h);
    return st;
}

un_status un_rulesdb__test_create_at(un_ctx *ctx, const char *path, int version) {
    un_rulesdb tmp = {.path = (char *)(uintptr_t)path};
    int rc = sqlite3_open_v2(path, &tmp.h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    un_status st = UN_OK;
    if (rc != SQLITE_OK)
        st = db_fail(ctx, &tmp, rc, "opening");
    if (st == UN_OK && (rc = rowsum_register(tmp.h)) != SQLITE_OK)
        st = db_fail(ctx, &tmp, rc, "registering un_rowsum");
    for (int v = 0; st == UN_OK && v < version && v < UN_RULESDB_SCHEMA_VERSION; v++)
        st = exec_script(ctx, &tmp, un_rulesdb_migrations[v], "creating");
    sqlite3_close_v2(tmp.h);
    return st;
}

int un_rulesdb_schema_version(void) { return UN_RULESDB_SCHEMA_VERSION; }
