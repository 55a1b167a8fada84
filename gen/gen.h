/* gen.h - one unity-gen run: enumerate and prune (prune.h), then store the kept rules in a rule
 * database as candidates, with origin "generated" and the run's id, in batched transactions, and a
 * run row whose counts are the pruning stats.
 *
 * Resuming: the run is idempotent rather than checkpointed. The database dedupes rules by their
 * canonical hash, so rerunning after a kill inserts only what the killed run had not committed
 * (a killed run leaves whole batches), and the enumeration is cheap to redo (seconds at N=3).
 *
 *   un_gen_summary sum;
 *   st = un_gen_run(ctx, e, &params, "rules.db", "--max-ops 3", &sum);   // sum.inserted new rules
 */
#ifndef UN_GEN_GEN_H
#define UN_GEN_GEN_H

#include "gen/prune.h"

typedef struct un_gen_summary {
    un_gen_stats stats;
    int64_t inserted; /* rules new to the database */
    int64_t present;  /* rules the database already held */
    int64_t run_id;
    double db_seconds;
} un_gen_summary;

#define UN_GEN_BATCH 256 /* rules per transaction */

/* Runs the generator over e and stores the rules in db_path (created when missing) as they are
 * found, never holding them all in memory. args is recorded in the run row. Errors name the
 * database or the stage that failed. When rules_out is not NULL it receives the stats and the
 * kept rules' hashes (rules_out->rules stays NULL; un_gen_rules_deinit it). */
un_status un_gen_run(un_ctx *ctx, un_gen_enum *e, const un_gen_params *p, const char *db_path,
                     const char *args, un_gen_summary *out, un_gen_rules *rules_out);

#endif
