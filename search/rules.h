/* rules.h - the verified rules, loaded for use by the search (issue 12): every trusted verified
 * rule of a rules.db (optionally each also read backwards, un_rule_reverse) with a compiled matcher
 * beside it (search/match.h), indexed by the operator of the pattern's root so that a graph node
 * is tried only against the rules whose root has its operator. It does not match or apply anything
 * itself; match.h and apply.h do.
 *
 *   un_ruleset *set;
 *   un_ruleset_params p = un_ruleset_params_default();
 *   p.reversed = true;
 *   st = un_ruleset_load(ctx, db, &p, &set);          // db from un_rulesdb_open
 *   for (int64_t i = 0; i < un_ruleset_count(set); i++) ... un_ruleset_rule(set, i) ...
 *   un_ruleset_free(set);
 */
#ifndef UN_RULES_H
#define UN_RULES_H

#include "rulesdb/rulesdb.h"

/* Patterns larger than this (nodes of the source side, inputs included) are skipped at load. */
#define UN_MATCH_MAX_NODES 16

typedef struct un_ruleset un_ruleset;

typedef struct un_ruleset_params {
    bool reversed; /* also every rule backwards (those un_rule_reverse accepts) */
    int max_size;  /* skip rules with more nodes than this on both sides together (0 = no bound) */
    bool cache;    /* use and refresh the compiled cache DB.compiled beside the database */
    int threads;   /* rules not in the cache are parsed and compiled on this many threads
                    * (0: the online CPUs; 1: the caller only); the result is the same */
} un_ruleset_params;

un_ruleset_params un_ruleset_params_default(void); /* forwards only, every size, cache on,
                                                    * threads 0 */

/* What a load saw. */
typedef struct un_ruleset_stats {
    int64_t verified;     /* trusted verified rules read */
    int64_t stale;        /* verified against another spec set: skipped (need re-verifying) */
    int64_t too_big;      /* skipped: over max_size or UN_MATCH_MAX_NODES */
    int64_t not_reversed; /* params.reversed: rules un_rule_reverse refused (used forwards only) */
    int64_t loaded;       /* entries in the set (forwards plus reversed) */
    int64_t cache_hits;   /* rules taken from the compiled cache */
    int64_t cache_misses; /* rules parsed and compiled (then written to the cache) */
    bool cache_written;   /* the cache file was (re)written */
    double load_s;        /* wall time of the load */
    /* CPU seconds by phase (parse and compile summed over the threads): reading the database and
     * the cache, parsing and checking bodies (un_rulesdb_body_parse), compiling them (matcher and
     * compact form), adding the entries to the set, writing the cache */
    double read_s, parse_s, compile_s, add_s, write_s;
    int threads;  /* threads that parsed and compiled */
    size_t bytes; /* memory the set holds (rules and matchers), estimated */
} un_ruleset_stats;

/* Loads every trusted verified rule of db (un_rulesdb_verified_each: each row checked against its
 * hash; a row that no longer parses under the current specs is an error naming the row) and
 * compiles its matcher. Stale rules are counted, never used. With params.cache, compiled rules are
 * taken from DB.compiled (a file beside the database, keyed by spec set, rule id and canonical
 * hash, each record checksummed; one that does not fit is ignored) and the file is rewritten
 * when rules had to be compiled (silently skipped where the folder is not writable). params may
 * be NULL for defaults; stats may be NULL. Owned: free with un_ruleset_free; db may be closed
 * afterwards. */
un_status un_ruleset_load(un_ctx *ctx, un_rulesdb *db, const un_ruleset_params *params,
                          un_ruleset **out, un_ruleset_stats *stats);

/* A set from rules in memory (cloned; the caller keeps its own): ids[i] is reported as rule i's
 * database id (ids may be NULL: 1..n). For tests and tools. Rules over UN_MATCH_MAX_NODES are
 * UN_ERR_LIMIT. Owned: free with un_ruleset_free. */
un_status un_ruleset_from_rules(un_ctx *ctx, const un_spec *spec, un_rule *const *rules,
                                const int32_t *ids, int64_t n, const un_ruleset_params *params,
                                un_ruleset **out);
void un_ruleset_free(un_ruleset *set);

int64_t un_ruleset_count(const un_ruleset *set);
const un_spec *un_ruleset_spec(const un_ruleset *set); /* borrowed */
/* Entry i's rule as it is applied (a reversed entry holds the reversed rule). The set keeps each
 * rule in a compact form (a few hundred bytes) beside its matcher and builds the un_rule on the
 * first call for it (so the first call is not safe from two threads at once; call it once per
 * entry before sharing a set between threads). Borrowed, valid until un_ruleset_free. */
const un_rule *un_ruleset_rule(const un_ruleset *set, int64_t i);
/* Entry i's rule decoded afresh and not kept by the set (owned: un_rule_free): for one pass over
 * every entry without keeping every rule built (tens of KB each). */
un_rule *un_ruleset_rule_decode(const un_ruleset *set, int64_t i);
int32_t un_ruleset_rule_id(const un_ruleset *set, int64_t i); /* its rules.db id */
bool un_ruleset_rule_reversed(const un_ruleset *set, int64_t i);
/* The entries whose pattern root has operator op: *n of them, borrowed (valid until free). */
const int32_t *un_ruleset_by_root(const un_ruleset *set, un_op op, int64_t *n);
/* The load's statistics. */
un_ruleset_stats un_ruleset_stats_get(const un_ruleset *set);

#endif
