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

/* Checks one axiom on up to `trials` random instances (sizes drawn from {1,2,3,4,5,6,8} per size
 * variable, parameter variables cycling through their listed values) until `want` of them are well
 * formed. *n_good (may be NULL) receives the number of well-formed instances checked.
 * UN_ERR_MISMATCH when the sides differ (message: axiom, domain, sizes, parameters, element and
 * values); UN_ERR_SPEC when fewer than 2 instances were well formed. */
un_status un_axcheck_axiom(un_ctx *ctx, const un_spec *spec, const un_axiom *ax, uint64_t seed,
                           int trials, int want, int *n_good);

/* Checks every axiom of every operator (40 trials, 4 well-formed instances each); stops at the
 * first failure. stats may be NULL. */
un_status un_axcheck_all(un_ctx *ctx, const un_spec *spec, uint64_t seed, un_axcheck_stats *stats);

#endif
