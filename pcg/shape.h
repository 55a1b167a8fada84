/* shape.h - parallel tensor shapes (DESIGN.md section 3): a logical shape and dtype plus a layout:
 * a shard degree per dimension, a sum degree and a copy degree. Pure value types, no allocation.
 *
 *   un_shape s = un_shape_make(2, (int64_t[]){8, 16}, UN_DT_FLOAT);
 *   s.shard[0] = 2;                      // rows split in two blocks
 *   char buf[96]; un_shape_str(&s, buf, sizeof buf);   // "float[8/2,16]"
 */
#ifndef UN_SHAPE_H
#define UN_SHAPE_H

#include "pcg/un.h"

#define UN_MAX_DIMS   6
#define UN_MAX_NUMEL  ((int64_t)1 << 48) /* elements in one tensor */
#define UN_MAX_DEGREE 65536              /* pieces of one tensor (devices) */

typedef enum { UN_DT_FLOAT, UN_DT_INT, UN_DT_COUNT } un_dtype;

typedef struct un_shape {
    int32_t rank;
    un_dtype dtype;
    int64_t dim[UN_MAX_DIMS];   /* logical sizes */
    int32_t shard[UN_MAX_DIMS]; /* shard degree per dim, divides dim */
    int32_t sum;                /* sum degree: the value is the sum of this many partial tensors */
    int32_t copy;               /* copy degree: identical copies */
} un_shape;

const char *un_dtype_name(un_dtype t);

/* A shape with the trivial layout (every degree 1). Unused dims are zeroed. */
un_shape un_shape_make(int rank, const int64_t *dims, un_dtype dtype);
/* Same shape with every degree reset to 1. */
un_shape un_shape_logical(const un_shape *s);
int64_t un_shape_numel(const un_shape *s);                     /* logical elements */
int64_t un_shape_piece_numel(const un_shape *s);               /* elements in one piece */
int64_t un_shape_npieces(const un_shape *s);                   /* prod shard * sum * copy */
bool un_shape_eq(const un_shape *a, const un_shape *b);        /* dims, dtype and layout */
bool un_shape_same_dims(const un_shape *a, const un_shape *b); /* dims and dtype only */
bool un_shape_is_trivial(const un_shape *s);                   /* every degree 1 */
/* Checks sizes > 0, degrees >= 1 and shard[i] | dim[i]; on failure writes the reason. */
bool un_shape_valid(const un_shape *s, char *why, size_t n);
/* "float[8/2,16]+s2*c2": sizes, "/k" shard degrees, "+sN" sum degree, "*cN" copy degree. */
void un_shape_str(const un_shape *s, char *buf, size_t n);
uint64_t un_shape_hash(const un_shape *s, uint64_t h);
/* A piece's index in the tensor's piece order (block indices row-major, then sum, then copy; the
 * order of pcg/eval.h), and back. */
int64_t un_shape_piece_index(const un_shape *s, const int32_t *block, int32_t sum, int32_t copy);
void un_shape_piece_coords(const un_shape *s, int64_t idx, int32_t *block, int32_t *sum,
                           int32_t *copy);
/* A piece's local sizes: dim[i] / shard[i] for every dim. */
void un_shape_piece_dims(const un_shape *s, int64_t *dim);
/* Where the block of block indices `block` starts in the logical tensor: block[i] * (dim[i] /
 * shard[i]) for every dim (the runtime's piece geometry and this file's index order agree). */
void un_shape_piece_offset(const un_shape *s, const int32_t *block, int64_t *off);
/* Element x (row-major) of the block of s's logical tensor that starts at off with extent len:
 * its row-major index in the logical tensor, and in *run how many elements from x on are
 * consecutive there too (to the end of x's row of the block, along the last dim). A scalar: 0, 1.
 */
int64_t un_shape_block_index(const un_shape *s, const int64_t *off, const int64_t *len, int64_t x,
                             int64_t *run);

#endif
