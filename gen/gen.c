/* gen.c - a unity-gen run end to end (gen.h): find the rules, then write them to the database in
 * batches of UN_GEN_BATCH per transaction, bracketed by a run row. */
#include "gen/gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rulesdb/rulesdb.h"

typedef struct db_sink {
    un_rulesdb *db;
    un_rulesdb_origin origin;
    bool in_batch;
    int64_t in_this_batch;
    un_gen_summary *sum;
} db_sink;

/* The rule's columns, made on a worker thread (NULL when that fails: db_emit then reports it). */
static void *db_prep(void *user, un_ctx *ctx, const un_rule *r, uint64_t hash) {
    (void)user;
    un_rulesdb_cols *c = NULL;
    (void)un_rulesdb_cols_new(ctx, r, hash, &c);
    return c;
}

static void db_drop(void *prepared) { un_rulesdb_cols_free(prepared); }

/* Stores one rule; a transaction holds UN_GEN_BATCH of them. */
static un_status db_emit(void *user, un_ctx *ctx, const un_rule *r, void *prepared) {
    db_sink *s = user;
    un_status st;
    if (!s->in_batch) {
        if ((st = un_rulesdb_begin(ctx, s->db)) != UN_OK)
            return st;
        s->in_batch = true;
        s->in_this_batch = 0;
    }
    bool inserted = false;
    if (prepared)
        st = un_rulesdb_rule_insert_cols(ctx, s->db, prepared, &s->origin, NULL, &inserted);
    else
        st = un_rulesdb_rule_insert(ctx, s->db, r, UN_RULE_CANDIDATE, NULL, &s->origin, NULL,
                                    &inserted);
    if (st != UN_OK)
        return st;
    s->sum->inserted += inserted;
    s->sum->present += !inserted;
    if (++s->in_this_batch == UN_GEN_BATCH) {
        if ((st = un_rulesdb_commit(ctx, s->db)) != UN_OK)
            return st;
        s->in_batch = false;
    }
    return UN_OK;
}

un_status un_gen_run(un_ctx *ctx, un_gen_enum *e, const un_gen_params *p, const char *db_path,
                     const char *args, un_gen_summary *out, un_gen_rules *rules_out) {
    memset(out, 0, sizeof *out);
    if (rules_out)
        memset(rules_out, 0, sizeof *rules_out);
    const un_gen_menu *m = un_gen_enum_menu(e);
    un_gen_rules rs = {0};
    un_buf counts = {0};
    db_sink sink = {.sum = out};
    /* open first: a bad database fails before minutes of enumeration */
    un_status st = un_rulesdb_open(ctx, db_path, m->spec, UN_RULESDB_CREATE, &sink.db);
    if (st == UN_OK) /* never add to a damaged database */
        st = un_rulesdb_check_sums(ctx, sink.db);
    if (st != UN_OK)
        goto done;
    if ((st = un_rulesdb_run_begin(ctx, sink.db, "unity-gen", args, &out->run_id)) != UN_OK)
        goto done;
    sink.origin = (un_rulesdb_origin){.kind = "generated", .run = out->run_id};
    double t0 = un_now_s();
    /* rules go to the database as they are kept (batches of UN_GEN_BATCH), never all in memory */
    un_gen_sink gs = {.emit = db_emit, .prep = db_prep, .drop = db_drop, .user = &sink};
    if ((st = un_gen_find_stream(ctx, e, p, &gs, &rs)) != UN_OK)
        goto done;
    if (sink.in_batch) {
        if ((st = un_rulesdb_commit(ctx, sink.db)) != UN_OK)
            goto done;
        sink.in_batch = false;
    }
    out->stats = rs.stats;
    out->db_seconds = un_now_s() - t0 - rs.stats.enum_seconds - rs.stats.pair_seconds;
    un_gen_stats_json(&rs.stats, &counts);
    /* the run row's counts: the stage counts plus what the database took */
    if (counts.len > 0)
        counts.data[--counts.len] = '\0'; /* drop the closing brace */
    un_buf_printf(&counts,
                  ", \"inserted\": %lld, \"present\": %lld, \"menu\": ", (long long)out->inserted,
                  (long long)out->present);
    un_buf_json_str(&counts, m->path);
    un_buf_printf(&counts, ", \"max_ops\": %d, \"seed\": %llu, \"shard\": \"%d/%d\"}", p->max_ops,
                  (unsigned long long)p->seed, p->shard_i, p->shard_n);
    st = un_rulesdb_run_end(ctx, sink.db, out->run_id, counts.data);
    if (st == UN_OK && rules_out) {
        *rules_out = rs;
        memset(&rs, 0, sizeof rs);
    }
done:
    if (sink.in_batch)
        un_rulesdb_rollback(sink.db);
    un_buf_deinit(&counts);
    un_gen_rules_deinit(&rs);
    un_rulesdb_free(sink.db);
    return st;
}
