/* runner.h - verifying rules end to end: the per-rule pipeline (random tests first, then the Z3
 * proof, then generalization over degrees) and the database driver behind `unity-verify` (worker
 * threads with one Z3 context and one database connection each, verdicts committed in small
 * batches so a killed run resumes where it stopped, shards for several machines).
 *
 *   un_runner_opts o = un_runner_opts_default();
 *   o.jobs = 2;
 *   un_runner_stats s;
 *   st = un_runner_run(ctx, spec, "rules.db", &o, &s);
 *   printf("%lld verified, %lld refuted, %lld unknown\n", s.verified, s.refuted, s.unknown);
 */
#ifndef UN_RUNNER_H
#define UN_RUNNER_H

#include "verify/verify.h"

typedef struct un_runner_opts {
    unsigned timeout_ms;  /* per Z3 call (default 2000): a budget of timeout_ms *
                           * UN_VERIFY_RLIMIT_PER_MS rlimit units, with 10x the time as a
                           * wall-clock backstop, so verdicts do not depend on the load */
    bool wall_clock;      /* the budget in wall-clock ms instead (before: load-dependent) */
    int jobs;             /* worker threads (default 1) */
    int shard_i, shard_n; /* only rule ids with id % shard_n == shard_i (shard_n 0 = all) */
    int32_t rule_id;      /* only this rule (0 = every rule that needs it) */
    int max_ops;          /* only rules of at most this many operators per side (0 = any): the
                           * small rules first, so unity-closure --verified-basis can use them */
    bool recheck;         /* re-verify every rule, verified ones included */
    bool audit_model;     /* run Z3's consistency checks where the shape model discharges them
                           * too (un_prove_opts.audit_model) */
    uint64_t seed;        /* random tests */
    int batch;            /* verdicts per transaction, and rules claimed at once (default 16) */
    double lease_s;       /* a claim's lease, seconds (default 60): a killed verifier's claims
                           * are free again this long after its last renewal */
} un_runner_opts;

un_runner_opts un_runner_opts_default(void);

/* Where a rule's verification time goes (CPU time of the worker thread, so it stays meaningful
 * on a loaded machine): random tests, Z3 (encoding and solving), generalization over degrees with
 * the claim re-checks, and the database: claiming work, reading and parsing rules, writing
 * verdicts. A worker's setup (its connection and its verifier's first Z3 context) is counted
 * apart, in un_runner_stats.setup_ms. */
typedef enum {
    UN_VERIFY_PHASE_TESTS,
    UN_VERIFY_PHASE_Z3,
    UN_VERIFY_PHASE_GENERAL,
    UN_VERIFY_PHASE_CLAIM,
    UN_VERIFY_PHASE_READ,
    UN_VERIFY_PHASE_WRITE,
    UN_VERIFY_PHASE_COUNT
} un_verify_phase;

/* The outcome for one rule. */
typedef struct un_verify_verdict {
    un_rule_status status; /* VERIFIED, REFUTED or UNKNOWN */
    char detail[1024];     /* counterexample (refuted) or reason (unknown) */
    char axioms[2048];     /* axioms the proof used (verified) */
    double ms;             /* time for this rule: random tests, proof and generalization */
    double proof_ms;       /* of which in Z3 */
    uint64_t work;         /* Z3 resource units of the proofs (un_proof.work) */
    uint64_t work_by[UN_WORK_COUNT]; /* of it, per kind of check (un_proof.work_by), summed */
    int calls_by[UN_WORK_COUNT];     /* solver calls per kind, summed */
    int audit_unsat;                 /* un_proof.audit_unsat, summed */
    uint64_t work_dims;              /* of it, in the dims form's proof (un_rule_dims_generalize) */
    uint64_t work_witness;           /* of it, in the retry at the witness sizes */
    double cpu_ms[UN_VERIFY_PHASE_COUNT]; /* this thread's CPU time per phase (un_verify_phase) */
    int outputs, narrow; /* outputs proven (last proof), of them by the narrow axiom set */
    bool any_shape;      /* proven with symbolic input sizes */
    int n_new_vars;      /* degrees turned into variables by generalization */
    int n_dim_vars;      /* sizes turned into dim variables (un_rule_dims_generalize) */
    int dropped_vars;    /* variables dropped because the claim failed its re-check */
    un_rule *general;    /* owned (free with un_verify_verdict_deinit): the most general form
                          * proven when it differs from the rule, else NULL */
} un_verify_verdict;

void un_verify_verdict_deinit(un_verify_verdict *v);

/* Verifies one rule with verifier v: random tests in the field and in float64 at the witness, at
 * the values 0, 1, 2, 3, 4, 6, 8 of each variable (where well formed) and at doubled input sizes (a
 * mismatch refutes, with the counterexample); then the Z3 proof, with symbolic input sizes first
 * (any_shape) and at the witness sizes otherwise; then, for a proven rule, every concrete degree is
 * tried as a new variable, kept when the rule holds (layouts included) at each of the degrees 2, 3,
 * 4, 6, 8 where both sides are well formed. UN_OK with the verdict in *out; other statuses are Z3
 * failures. */
un_status un_runner_rule(un_ctx *ctx, un_verifier *v, const un_rule *r, const un_runner_opts *o,
                         un_verify_verdict *out);

/* A verifier whose axioms were checked first: every declared axiom on concrete tensors (a wrong one
 * is UN_ERR_MISMATCH naming it and the counterexample), plus the lifted forms that pass the same
 * check (axcheck.h). *n_lifted (may be NULL) receives their number. Owned: un_verifier_free. */
un_status un_runner_verifier(un_ctx *ctx, const un_spec *spec, uint64_t seed, un_verifier **out,
                             int *n_lifted);

typedef struct un_runner_stats {
    int64_t total; /* rules attempted in this run */
    int64_t verified, refuted, unknown;
    int64_t any_shape;   /* verified for every input size */
    int64_t generalized; /* verified with degrees turned into variables */
    int64_t dim_generic; /* verified with sizes turned into dim variables here */
    int64_t with_vars;   /* verified with a variable (e.g. a degree k): proven for every value */
    int64_t skipped;     /* rows without a rule (rejected imports) */
    double wall_ms;
    double median_ms, p99_ms;             /* per-rule verification time */
    int n_axioms, n_lifted;               /* declared axioms checked, lifted forms that passed */
    double axcheck_ms;                    /* time of those checks */
    double cpu_ms[UN_VERIFY_PHASE_COUNT]; /* summed over the workers' threads */
    double setup_ms;                      /* the workers' setup CPU time, summed */
    int64_t claim_steps;                  /* SQLite VM steps of the workers' claims, summed
                                           * (un_rulesdb_claim_steps): rows they read */
    int64_t outputs, narrow;              /* outputs proven, and of them by the narrow axiom set */
    uint64_t work;                        /* Z3 resource units, summed (un_verify_verdict.work) */
    uint64_t work_by[UN_WORK_COUNT];      /* per kind of check, summed */
    int64_t calls_by[UN_WORK_COUNT];      /* solver calls per kind, summed */
    int64_t audit_unsat;                  /* un_proof.audit_unsat, summed (must be 0) */
    uint64_t work_dims, work_witness;     /* in dims forms' proofs, in witness-size retries */
} un_runner_stats;

/* Checks every spec axiom on concrete tensors (axcheck.h), then verifies the rules of the database
 * at db_path that need it (or all with o->recheck, or one with o->rule_id) and writes each verdict
 * back. A wrong axiom stops everything before any proof (UN_ERR_MISMATCH naming it). Errors name
 * the database. stats may be NULL. */
un_status un_runner_run(un_ctx *ctx, const un_spec *spec, const char *db_path,
                        const un_runner_opts *o, un_runner_stats *stats);

#endif
