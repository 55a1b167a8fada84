/* exec.h - the executor: runs a PCG on one rank of a communicator (SPMD: every rank walks the same
 * graph in topological order and holds the pieces mapped to it), forward and reverse-mode
 * backward. Placement: piece p of an operator's output lives on rank p mod D; a regular op runs
 * each device tuple of its sharding rules on the rank owning that tuple's output piece; input
 * pieces held elsewhere are sent there before the op, and their gradients sent back after its
 * backward. Parallel ops are block copies and sums of pieces (their backward per DESIGN.md
 * section 3: partition <-> combine, replicate <-> reduce). Source nodes (inputs, weights) are
 * mirrored: every rank holds their logical value, and after backward their gradients are summed
 * over ranks (the data-parallel all-reduce falls out of replicate's backward this way).
 *
 *   un_exec *ex;
 *   st = un_exec_new(ctx, g, comm, be, &ex);
 *   memcpy(un_exec_source(ex, x_node), batch, bytes);        // every rank, same values
 *   st = un_exec_forward(ctx, ex, step_seed);
 *   ... loss from un_exec_output_pieces(), writing each piece's grad ...
 *   st = un_exec_backward(ctx, ex);                            // weight grads summed over ranks
 *   un_exec_free(ex);
 */
#ifndef UN_EXEC_H
#define UN_EXEC_H

#include "pcg/graph.h"
#include "runtime/backend.h"
#include "runtime/comm.h"

typedef struct un_exec un_exec;

/* One piece of a graph output held by this rank. */
typedef struct un_exec_piece {
    int64_t index;            /* piece index in the tensor's piece order (pcg/eval.h) */
    int32_t sum, copy;        /* its partial-sum and copy index */
    int64_t dim[UN_MAX_DIMS]; /* local sizes */
    int64_t off[UN_MAX_DIMS]; /* global offset of the block in each dim */
    void *val;                /* the values (backend memory) */
    void *grad;               /* its gradient, zeroed by the forward; NULL for INT tensors */
} un_exec_piece;

/* ---- lifecycle ---- */

/* Plans the graph for this rank (placement, transfers) and allocates every buffer once. The
 * graph, comm and backend are borrowed and must outlive the executor. Weights start at zero
 * (un_exec_param). Owned: free with un_exec_free. */
un_status un_exec_new(un_ctx *ctx, const un_graph *g, un_comm *comm, un_backend *be, un_exec **out);
void un_exec_free(un_exec *ex);

/* ---- sources ---- */

/* The logical value of a source node (input or weight), mirrored on every rank: numel elements
 * (float in the backend's precision, or int64_t). Borrowed, valid until un_exec_free. */
void *un_exec_source(un_exec *ex, int32_t node);
/* All weights (UN_OP_WEIGHT nodes, in node order) are one flat buffer: values and gradients,
 * un_exec_param_count elements each; un_exec_param_offset gives a weight's first element. */
int64_t un_exec_param_count(const un_exec *ex);
int64_t un_exec_param_offset(const un_exec *ex, int32_t node); /* -1 for a non-weight */
void *un_exec_params(un_exec *ex);
void *un_exec_param_grads(un_exec *ex);

/* ---- running ---- */

/* Forward pass; zeroes every gradient. dropout_seed (0 = the graph's own dropout seeds, as the
 * reference evaluator) varies the dropout masks per step. Collective. */
un_status un_exec_forward(un_ctx *ctx, un_exec *ex, uint64_t dropout_seed);
/* The pieces of graph output i held by this rank (borrowed until un_exec_free). */
const un_exec_piece *un_exec_output_pieces(const un_exec *ex, int32_t i, int *n);
const un_shape *un_exec_output_shape(const un_exec *ex, int32_t i);
/* Backward from the output pieces' gradients; ends with the weights' gradients summed over all
 * ranks (identical everywhere). Collective. */
un_status un_exec_backward(un_ctx *ctx, un_exec *ex);
/* Gathers graph output i's logical value on every rank into dense (numel elements; partial sums
 * added, copy 0 read). Collective. */
un_status un_exec_output_gather(un_ctx *ctx, un_exec *ex, int32_t i, void *dense);

/* ---- statistics ---- */

/* Bytes this rank sent to other ranks in the last forward + backward (piece transfers and the
 * gradient all-reduce). */
int64_t un_exec_bytes_sent(const un_exec *ex);

#endif
