/* op.c - the operator registry's static table (from pcg/ops.def) and parameter values. */
#include "pcg/op.h"

#include <string.h>

static const struct {
    const char *name;
    un_op_kind kind;
} un__ops[UN_OP_COUNT] = {
#define SOURCE     UN_OPK_SOURCE
#define REGULAR    UN_OPK_REGULAR
#define PARALLEL   UN_OPK_PARALLEL
#define X(n, s, k) {s, k},
#include "pcg/ops.def"
#undef X
#undef SOURCE
#undef REGULAR
#undef PARALLEL
};

const char *un_op_name(un_op op) { return (unsigned)op < UN_OP_COUNT ? un__ops[op].name : "?"; }
un_op_kind un_op_kind_of(un_op op) { return un__ops[op].kind; }

bool un_op_from_name(const char *name, un_op *out) {
    for (int i = 0; i < UN_OP_COUNT; i++)
        if (strcmp(un__ops[i].name, name) == 0) {
            *out = (un_op)i;
            return true;
        }
    return false;
}

un_param un_param_int(int64_t v) {
    un_param p;
    memset(&p, 0, sizeof p);
    p.len = -1;
    p.v[0] = v;
    return p;
}

bool un_param_eq(const un_param *a, const un_param *b) {
    if (a->len != b->len)
        return false;
    int n = a->len < 0 ? 1 : a->len;
    for (int i = 0; i < n; i++)
        if (a->v[i] != b->v[i])
            return false;
    return true;
}
