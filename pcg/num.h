/* num.h - the two number domains of the reference evaluator, as inline helpers over un_val:
 * UN_DOM_FIELD, the prime field Z/(2^61-1) (exact; fingerprints and axiom checks), and
 * UN_DOM_F64, float64 (ground truth for the runtime). Nonlinear functions in the field are
 * fixed random surrogates: un_num_surrogate(salt, x), a different one per operator salt. */
#ifndef UN_NUM_H
#define UN_NUM_H

#include <math.h>

#include "pcg/un.h"

typedef enum { UN_DOM_FIELD, UN_DOM_F64, UN_DOM_COUNT } un_dom;

typedef union un_val {
    uint64_t u; /* field element in [0, UN_P) */
    double f;   /* float64 value */
} un_val;

#define UN_P ((uint64_t)0x1fffffffffffffffull) /* 2^61 - 1 */

__extension__ typedef unsigned __int128 un_u128;

static inline uint64_t un_fp_reduce(un_u128 x) {
    uint64_t lo = (uint64_t)(x & UN_P), hi = (uint64_t)(x >> 61);
    uint64_t r = lo + hi;
    r = (r & UN_P) + (r >> 61);
    return r >= UN_P ? r - UN_P : r;
}
static inline uint64_t un_fp_add(uint64_t a, uint64_t b) {
    uint64_t r = a + b;
    return r >= UN_P ? r - UN_P : r;
}
static inline uint64_t un_fp_sub(uint64_t a, uint64_t b) { return a >= b ? a - b : a + UN_P - b; }
static inline uint64_t un_fp_mul(uint64_t a, uint64_t b) { return un_fp_reduce((un_u128)a * b); }
static inline uint64_t un_fp_pow(uint64_t a, uint64_t e) {
    uint64_t r = 1;
    while (e) {
        if (e & 1)
            r = un_fp_mul(r, a);
        a = un_fp_mul(a, a);
        e >>= 1;
    }
    return r;
}
/* Inverse by Fermat; the inverse of 0 is defined as 0. */
static inline uint64_t un_fp_inv(uint64_t a) { return un_fp_pow(a, UN_P - 2); }
static inline uint64_t un_fp_from_int(int64_t v) {
    if (v >= 0)
        return (uint64_t)v % UN_P;
    return un_fp_sub(0, (uint64_t)(-(v + 1)) % UN_P + 1);
}

static inline un_val un_num_from_int(un_dom d, int64_t v) {
    un_val r;
    if (d == UN_DOM_FIELD)
        r.u = un_fp_from_int(v);
    else
        r.f = (double)v;
    return r;
}
static inline un_val un_num_zero(un_dom d) { return un_num_from_int(d, 0); }
static inline un_val un_num_add(un_dom d, un_val a, un_val b) {
    un_val r;
    if (d == UN_DOM_FIELD)
        r.u = un_fp_add(a.u, b.u);
    else
        r.f = a.f + b.f;
    return r;
}
static inline un_val un_num_sub(un_dom d, un_val a, un_val b) {
    un_val r;
    if (d == UN_DOM_FIELD)
        r.u = un_fp_sub(a.u, b.u);
    else
        r.f = a.f - b.f;
    return r;
}
static inline un_val un_num_mul(un_dom d, un_val a, un_val b) {
    un_val r;
    if (d == UN_DOM_FIELD)
        r.u = un_fp_mul(a.u, b.u);
    else
        r.f = a.f * b.f;
    return r;
}
static inline un_val un_num_neg(un_dom d, un_val a) { return un_num_sub(d, un_num_zero(d), a); }
/* a / b; in the field a * b^-1 (0 when b is 0). */
static inline un_val un_num_div(un_dom d, un_val a, un_val b) {
    un_val r;
    if (d == UN_DOM_FIELD)
        r.u = un_fp_mul(a.u, un_fp_inv(b.u));
    else
        r.f = a.f / b.f;
    return r;
}
static inline bool un_num_eq(un_dom d, un_val a, un_val b) {
    return d == UN_DOM_FIELD ? a.u == b.u : a.f == b.f;
}
/* An index stored in a tensor of dtype int: exact small integer in both domains. */
static inline int64_t un_num_to_index(un_dom d, un_val a) {
    return d == UN_DOM_FIELD ? (int64_t)a.u : (int64_t)a.f;
}
/* The field surrogate of a nonlinear function: a fixed pseudo-random map, one per salt. */
static inline uint64_t un_num_surrogate(uint64_t salt, uint64_t x) {
    uint64_t h = x ^ (salt * 0x9e3779b97f4a7c15ull);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    return h % UN_P;
}

#endif
