/* verify.h - proving rules with Z3 (DESIGN.md section 7). Tensors are an uninterpreted sort with
 * integer functions rank(T) and dim(T, i); each regular operator output is an uninterpreted
 * function of its input tensors and its (flattened) integer parameters; parallel operators are
 * identities on values. The spec's shape rules become quantified axioms giving each function's
 * output rank and dims, and every spec axiom becomes a quantified formula with patterns, guarded
 * by its variables' declared ranks and sizes and by the well-formedness (parameter domains,
 * input ranks, `require`) of every operator it applies. This is the only module that includes
 * z3.h; one verifier (one Z3 context) per thread.
 *
 *   un_verifier *v;
 *   st = un_verifier_new(ctx, spec, &v);
 *   un_proof p;
 *   st = un_verifier_prove(ctx, v, rule, &(un_prove_opts){.timeout_ms = 2000, .symbolic = true},
 * &p); if (p.verdict == UN_VERDICT_VALID) printf("proved with %s\n", p.axioms);
 *   un_verifier_free(v);
 */
#ifndef UN_VERIFY_H
#define UN_VERIFY_H

#include "pcg/rule.h"

typedef enum { UN_VERDICT_VALID, UN_VERDICT_INVALID, UN_VERDICT_UNKNOWN } un_verdict;

const char *un_verdict_name(un_verdict v); /* static: "valid", "invalid", "unknown" */

typedef struct un_verifier un_verifier;

/* Z3 rlimit units per millisecond of Z3 CPU time, measured on the verifier's own checks (2-core
 * AMD EPYC development machine, N=4 sample: median 3,000-4,000 per check type). Only converts the
 * documented budgets (a `timeout` of T ms is an rlimit of T * this); the verdicts do not depend on
 * the machine it runs on. */
#define UN_VERIFY_RLIMIT_PER_MS 3500u

typedef struct un_prove_opts {
    unsigned timeout_ms; /* per solver call, wall clock; 0 = 10000 (a backstop with rlimit) */
    bool symbolic;       /* input sizes as integer variables (else the witness sizes) */
    bool witness_retry;  /* symbolic: without a proof for every size, try the witness sizes in
                          * the same solver scope (un_proof.retried) */
    unsigned rlimit;     /* Z3 resource limit per solver call (0 = none, the timeout alone): the
                          * same on any machine and load. The narrow-set attempt gets a quarter,
                          * the consistency check twice what the proof used plus 20 ms' worth */
    bool audit_model;    /* run the consistency check with Z3 also where the shape model
                          * discharges it (un_proof.audit_unsat counts an unsat there) */
} un_prove_opts;

/* Where a proof's Z3 work goes (un_proof.work_by): the narrow-set attempts that proved an output
 * and those that did not, the full-set checks, the consistency check, the consistency checks the
 * shape model discharged (no work: calls_by counts them), the shape-correctness proofs of spec
 * axioms (once per axiom and verifier, in the first proof that needs one), and the rest
 * (encoding, push/pop, internalizing axioms in a fresh context). */
typedef enum {
    UN_WORK_NARROW,
    UN_WORK_NARROW_FAILED,
    UN_WORK_FULL,
    UN_WORK_CONSISTENCY,
    UN_WORK_MODEL,
    UN_WORK_SHAPE,
    UN_WORK_OTHER,
    UN_WORK_COUNT
} un_work_kind;

typedef struct un_proof {
    un_verdict verdict;
    double ms;         /* wall time of the solver calls */
    char detail[512];  /* INVALID: the model; UNKNOWN: Z3's reason and which output */
    char axioms[2048]; /* VALID: spec axioms in the unsat cores, comma-separated, sorted */
    int narrow;        /* outputs proven with the narrow axiom set (un_verifier_prove) */
    uint64_t work;     /* Z3 resource units (rlimit) the solver calls used: machine-independent */
    bool retried;      /* the witness sizes were tried (witness_retry): the verdict is theirs */
    uint64_t work_witness;           /* of work, in that retry */
    uint64_t work_by[UN_WORK_COUNT]; /* of it, per kind of check (sums to work) */
    int calls_by[UN_WORK_COUNT];     /* solver calls per kind (UN_WORK_OTHER: proofs) */
    int audit_unsat; /* audit_model: consistency checks the shape model discharged that Z3 found
                      * unsat (the argument of verify/README.md step 4 says none can be) */
} un_proof;

/* A verifier over spec (borrowed, outlives it): a Z3 context with the shape axioms and every spec
 * axiom encoded. Z3's error handler is replaced (Z3 never exits the process). Axioms that cannot be
 * encoded are left out and listed by un_verifier_skipped. Owned: free with un_verifier_free. */
un_status un_verifier_new(un_ctx *ctx, const un_spec *spec, un_verifier **out);
void un_verifier_free(un_verifier *v);

struct un_axlift; /* verify/axcheck.h */
/* The same, also encoding lifted axioms (each must have passed un_axcheck_lift; copied). */
un_status un_verifier_new_ex(un_ctx *ctx, const un_spec *spec, const struct un_axlift *lifts,
                             int n_lifts, un_verifier **out);

/* Number of spec axioms encoded, and the names of those left out with the reason ("" if none;
 * borrowed until un_verifier_free). */
int un_verifier_axiom_count(const un_verifier *v);
/* Of them, those asserted in the current context's solver: an axiom is asserted when a rule first
 * finds it relevant (an axiom asserted but switched off still costs every check; 0 after a
 * rebuild). */
int un_verifier_axioms_asserted(const un_verifier *v);
const char *un_verifier_skipped(const un_verifier *v);
/* How many quantifiers (one per pattern) encode the axiom of that name (a lifted form: its
 * tracking name, `ew_add_assoc+1.7`): 2 for both sides as patterns, 1 for an axiom used as a
 * rewrite from its lhs (associativity of a commutative op, distributivity), 0 if not encoded. */
int un_verifier_axiom_patterns(const un_verifier *v, const char *name);
/* Whether the encoded axiom of that name holds in the shape model (verify/README.md step 4):
 * wherever its guard holds, its two sides have the same rank and the same dim at every index, from
 * the shape axioms alone. 1 proven, 0 not (disproven or undecided within a budget of timeout_ms
 * and rlimit as in un_prove_opts), -1 no such axiom. Proven once per axiom and verifier. */
int un_verifier_shape_correct(un_verifier *v, const char *name, unsigned timeout_ms,
                              unsigned rlimit);

/* Proves, for every mapped output pair of r: whenever the source side is well formed (and its
 * layouts divide its dims), the target side is well formed, its output has the same rank and dims,
 * and the same value. Each output is tried first with the narrow axiom set (the axioms that apply
 * only the rule's own operators, and those an earlier full-set proof of this verifier needed
 * beyond its narrow set; with several outputs, first all of them in one check) and then,
 * unless that proved it, with every axiom that can matter. Parameters bound to rule variables on
 * regular operators are integer variables; everything else takes the witness values. With
 * opts->symbolic the input sizes are integer variables too. VALID also requires a consistency check
 * (the same formulas without the goal must not be unsat), so a proof never rests on contradictory
 * axiom instances; it is discharged without Z3 where every spec axiom the proof used is
 * shape-correct (un_verifier_shape_correct) and the rule's side conditions hold at its witness:
 * the shape model then satisfies all of it (verify/README.md step 4). UN_OK with the verdict in
 * *out; a Z3 failure is UN_ERR_INVALID with Z3's message. */
un_status un_verifier_prove(un_ctx *ctx, un_verifier *v, const un_rule *r,
                            const un_prove_opts *opts, un_proof *out);

#endif
