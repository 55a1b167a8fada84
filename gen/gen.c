/* gen.c - a unity-gen run end to end (gen.h): find the rules, then write them to the database in
 * batches of GEN_BATCH per transaction, bracketed by a run row. */
#include "gen/gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rulesdb/rulesdb.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

un_status gen_run(un_ctx *ctx, gen_enum *e, const gen_params *p, const char *db_path,
                  const char *args, gen_summary *out, gen_rules *rules_out) {
    memset(out, 0, sizeof *out);
    if (rules_out)
        memset(rules_out, 0, sizeof *rules_out);
    const gen_menu *m = gen_enum_menu(e);
    rulesdb *db = NULL;
    gen_rules rs = {0};
    un_buf counts = {0};
    bool in_batch = false;
    /* open first: a bad database fails before minutes of enumeration */
    un_status st = rulesdb_open(ctx, db_path, m->spec, RULESDB_CREATE, &db);
    if (st != UN_OK)
        goto done;
    if ((st = rulesdb_run_begin(ctx, db, "unity-gen", args, &out->run_id)) != UN_OK)
        goto done;
    if ((st = gen_find(ctx, e, p, &rs)) != UN_OK)
        goto done;
    out->stats = rs.stats;
    double t0 = now_s();
    rulesdb_origin origin = {.kind = "generated", .run = out->run_id};
    for (int64_t i = 0; i < rs.n; i++) {
        if (!in_batch) {
            if ((st = rulesdb_begin(ctx, db)) != UN_OK)
                goto done;
            in_batch = true;
        }
        bool inserted = false;
        st = rulesdb_rule_insert(ctx, db, rs.rules[i], UN_RULE_CANDIDATE, NULL, &origin, NULL,
                                 &inserted);
        if (st != UN_OK)
            goto done;
        out->inserted += inserted;
        out->present += !inserted;
        if ((i + 1) % GEN_BATCH == 0 || i + 1 == rs.n) {
            if ((st = rulesdb_commit(ctx, db)) != UN_OK)
                goto done;
            in_batch = false;
        }
    }
    out->db_seconds = now_s() - t0;
    gen_stats_json(&rs.stats, &counts);
    /* the run row's counts: the stage counts plus what the database took */
    if (counts.len > 0)
        counts.data[--counts.len] = '\0'; /* drop the closing brace */
    un_buf_printf(&counts,
                  ", \"inserted\": %lld, \"present\": %lld, \"menu\": ", (long long)out->inserted,
                  (long long)out->present);
    un_buf_json_str(&counts, m->path);
    un_buf_printf(&counts, ", \"max_ops\": %d, \"seed\": %llu, \"shard\": \"%d/%d\"}", p->max_ops,
                  (unsigned long long)p->seed, p->shard_i, p->shard_n);
    st = rulesdb_run_end(ctx, db, out->run_id, counts.data);
    if (st == UN_OK && rules_out) {
        *rules_out = rs;
        memset(&rs, 0, sizeof rs);
    }
done:
    if (in_batch)
        rulesdb_rollback(db);
    un_buf_free(&counts);
    gen_rules_deinit(&rs);
    rulesdb_free(db);
    return st;
}
