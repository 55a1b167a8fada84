/* axcheck.h - checking the spec axioms on concrete tensors before any proof uses them (DESIGN.md
 * section 7): each axiom's two sides are built (pcg/term.h) on random sizes for its size variables
 * and each value of its parameter variables, evaluated on random inputs (pcg/eval.h) in the prime
 * field and in float64, and compared: shapes, layouts and values. A wrong axiom is a bug that could
 * prove a wrong rule, so a failure names the axiom and the counterexample.
 *
 *   un_axcheck_stats s;
 *   st = un_axcheck_all(ctx, spec, 1234, &s);   // UN_ERR_MISMATCH: un_ctx_errmsg says which/where
 *   printf("%d axioms, %d instances\n", s.n_axioms, s.n_instances);
 */
#ifndef UN_AXCHECK_H
#define UN_AXCHECK_H

#include "pcg/spec.h"

typedef struct un_axcheck_stats {
    int n_axioms;    /* axioms checked */
    int n_instances; /* well-formed instances evaluated (each in both domains) */
} un_axcheck_stats;

/* An axiom lifted to higher ranks: the tensor variables in `mask` get k extra leading dims, shared
 * by all of them (like batch dims); parameters keep their values, so they may then address other
 * dims. k = 0 is the axiom as declared. A lifted axiom is a conjecture until checked like any. */
typedef struct un_axlift {
    const un_axiom *ax; /* borrowed from the spec */
    int k;              /* extra leading dims */
    uint32_t mask;      /* which tensor variables get them */
    int shift;          /* added to the literal dim parameters (axis, dim, dim0, dim1) >= 0 of
                         * every op applied to a lifted tensor: 0 or k */
} un_axlift;

/* The shift the lift applies to the dim parameters of application t: l->shift when one of t's
 * arguments involves a lifted variable, else 0. */
int un_axlift_shift_of(const un_axlift *l, const un_term *t);

/* True for the parameters `shift` moves: a regular op's axis, dim, dim0 or dim1. */
bool un_axlift_is_dim_param(const un_op_spec *os, int param);

/* Checks one axiom on up to `trials` random instances (sizes drawn from {1,2,3,4,5,6,8} per size
 * variable, parameter variables cycling through their listed values) until `want` of them are well
 * formed. *n_good (may be NULL) receives the number of well-formed instances checked.
 * UN_ERR_MISMATCH when the sides differ (message: axiom, domain, sizes, parameters, element and
 * values); UN_ERR_SPEC when fewer than 2 instances were well formed. */
un_status un_axcheck_axiom(un_ctx *ctx, const un_spec *spec, const un_axiom *ax, uint64_t seed,
                           int trials, int want, int *n_good);
/* The same for a lifted axiom; a lifted form that is never well formed is UN_ERR_SPEC. */
un_status un_axcheck_lift(un_ctx *ctx, const un_spec *spec, const un_axlift *l, uint64_t seed,
                          int trials, int want, int *n_good);

/* Lifted forms of every axiom that hold on every well-formed random instance tried (at least 3 of
 * them, in both domains): k = 1 for each non-empty subset of the variables (axioms with up to 4
 * variables; all of them otherwise) and k = 2 for all variables, each also with its literal dim
 * parameters shifted by k when it has some. A lifted form that fails is left
 * out (it is not an error: the declared axiom makes no claim there). The declared axioms are not in
 * the list. Owned: free(*out). */
un_status un_axcheck_lifts(un_ctx *ctx, const un_spec *spec, uint64_t seed, un_axlift **out,
                           int *n);

/* Checks every axiom of every operator (40 trials, 4 well-formed instances each); stops at the
 * first failure. stats may be NULL. */
un_status un_axcheck_all(un_ctx *ctx, const un_spec *spec, uint64_t seed, un_axcheck_stats *stats);

#endif
