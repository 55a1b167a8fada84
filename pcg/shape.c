/* shape.c - parallel tensor shapes: counts, equality, validity, printing. */
#include "pcg/shape.h"

#include <stdio.h>
#include <string.h>

const char *un_dtype_name(un_dtype t) {
    switch (t) {
    case UN_DT_FLOAT:
        return "float";
    case UN_DT_INT:
        return "int";
    default:
        return "?";
    }
}

un_shape un_shape_make(int rank, const int64_t *dims, un_dtype dtype) {
    un_shape s;
    memset(&s, 0, sizeof s);
    UN_ASSERT(rank >= 0 && rank <= UN_MAX_DIMS);
    s.rank = rank;
    s.dtype = dtype;
    for (int i = 0; i < rank; i++) {
        s.dim[i] = dims[i];
        s.shard[i] = 1;
    }
    s.sum = 1;
    s.copy = 1;
    return s;
}

un_shape un_shape_logical(const un_shape *s) { return un_shape_make(s->rank, s->dim, s->dtype); }

int64_t un_shape_numel(const un_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dim[i];
    return n;
}

int64_t un_shape_piece_numel(const un_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dim[i] / s->shard[i];
    return n;
}

int64_t un_shape_npieces(const un_shape *s) {
    int64_t n = (int64_t)s->sum * s->copy;
    for (int i = 0; i < s->rank; i++)
        n *= s->shard[i];
    return n;
}

bool un_shape_same_dims(const un_shape *a, const un_shape *b) {
    if (a->rank != b->rank || a->dtype != b->dtype)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dim[i] != b->dim[i])
            return false;
    return true;
}

bool un_shape_eq(const un_shape *a, const un_shape *b) {
    if (!un_shape_same_dims(a, b) || a->sum != b->sum || a->copy != b->copy)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->shard[i] != b->shard[i])
            return false;
    return true;
}

bool un_shape_is_trivial(const un_shape *s) {
    if (s->sum != 1 || s->copy != 1)
        return false;
    for (int i = 0; i < s->rank; i++)
        if (s->shard[i] != 1)
            return false;
    return true;
}

bool un_shape_valid(const un_shape *s, char *why, size_t n) {
    if (s->rank < 0 || s->rank > UN_MAX_DIMS) {
        snprintf(why, n, "rank %d outside 0..%d", s->rank, UN_MAX_DIMS);
        return false;
    }
    for (int i = 0; i < s->rank; i++) {
        if (s->dim[i] <= 0) {
            snprintf(why, n, "dim %d has size %lld", i, (long long)s->dim[i]);
            return false;
        }
        if (s->shard[i] < 1) {
            snprintf(why, n, "dim %d has shard degree %d", i, s->shard[i]);
            return false;
        }
        if (s->dim[i] % s->shard[i] != 0) {
            snprintf(why, n, "dim %d of size %lld is not divisible by shard degree %d", i,
                     (long long)s->dim[i], s->shard[i]);
            return false;
        }
    }
    int64_t numel = 1;
    for (int i = 0; i < s->rank; i++)
        if (__builtin_mul_overflow(numel, s->dim[i], &numel) || numel > UN_MAX_NUMEL) {
            snprintf(why, n, "more than 2^48 elements");
            return false;
        }
    int64_t pieces = 1;
    bool ovf = s->sum > UN_MAX_DEGREE || s->copy > UN_MAX_DEGREE;
    for (int i = 0; i < s->rank && !ovf; i++)
        ovf =
            __builtin_mul_overflow(pieces, (int64_t)s->shard[i], &pieces) || pieces > UN_MAX_DEGREE;
    if (ovf || pieces * s->sum * s->copy > UN_MAX_DEGREE) { /* each factor <= 2^16: no overflow */
        snprintf(why, n, "more than %d pieces", UN_MAX_DEGREE);
        return false;
    }
    if (s->sum < 1 || s->copy < 1) {
        snprintf(why, n, "sum degree %d, copy degree %d", s->sum, s->copy);
        return false;
    }
    return true;
}

void un_shape_str(const un_shape *s, char *buf, size_t n) {
    un_buf b = {0};
    un_buf_printf(&b, "%s[", un_dtype_name(s->dtype));
    for (int i = 0; i < s->rank; i++) {
        un_buf_printf(&b, "%s%lld", i ? "," : "", (long long)s->dim[i]);
        if (s->shard[i] != 1)
            un_buf_printf(&b, "/%d", s->shard[i]);
    }
    un_buf_printf(&b, "]");
    if (s->sum != 1)
        un_buf_printf(&b, "+s%d", s->sum);
    if (s->copy != 1)
        un_buf_printf(&b, "*c%d", s->copy);
    snprintf(buf, n, "%s", b.data);
    un_buf_deinit(&b);
}

uint64_t un_shape_hash(const un_shape *s, uint64_t h) {
    h = un_hash_combine(h, (uint64_t)s->rank * 31u + (uint64_t)s->dtype);
    for (int i = 0; i < s->rank; i++) {
        h = un_hash_combine(h, (uint64_t)s->dim[i]);
        h = un_hash_combine(h, (uint64_t)s->shard[i]);
    }
    h = un_hash_combine(h, (uint64_t)s->sum);
    return un_hash_combine(h, (uint64_t)s->copy);
}

int64_t un_shape_piece_index(const un_shape *s, const int32_t *block, int32_t sum, int32_t copy) {
    int64_t idx = 0;
    for (int i = 0; i < s->rank; i++)
        idx = idx * s->shard[i] + block[i];
    idx = idx * s->sum + sum;
    return idx * s->copy + copy;
}

void un_shape_piece_coords(const un_shape *s, int64_t idx, int32_t *block, int32_t *sum,
                           int32_t *copy) {
    *copy = (int32_t)(idx % s->copy);
    idx /= s->copy;
    *sum = (int32_t)(idx % s->sum);
    idx /= s->sum;
    for (int i = s->rank - 1; i >= 0; i--) {
        block[i] = (int32_t)(idx % s->shard[i]);
        idx /= s->shard[i];
    }
}

void un_shape_piece_dims(const un_shape *s, int64_t *dim) {
    for (int i = 0; i < s->rank; i++)
        dim[i] = s->dim[i] / s->shard[i];
}

void un_shape_piece_offset(const un_shape *s, const int32_t *block, int64_t *off) {
    for (int i = 0; i < s->rank; i++)
        off[i] = (int64_t)block[i] * (s->dim[i] / s->shard[i]);
}

int64_t un_shape_block_index(const un_shape *s, const int64_t *off, const int64_t *len, int64_t x,
                             int64_t *run) {
    int last = s->rank - 1;
    *run = 1;
    if (last < 0)
        return 0;
    int64_t c[UN_MAX_DIMS], e = 0; /* the logical coordinates of block element x */
    for (int d = last; d >= 0; d--) {
        c[d] = off[d] + x % len[d];
        x /= len[d];
    }
    for (int d = 0; d <= last; d++)
        e = e * s->dim[d] + c[d];
    *run = len[last] - (c[last] - off[last]);
    return e;
}
