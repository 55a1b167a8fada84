/* exec.h - the executor: runs a PCG on one rank of a communicator (SPMD: every rank walks the same
 * graph in topological order and holds the pieces mapped to it), forward and reverse-mode
 * backward. Placement: piece p of an operator's output lives on rank p mod D; a regular op runs
 * each device tuple of its sharding rules on the rank owning that tuple's output piece; input
 * pieces held elsewhere are sent there before the op, and their gradients sent back after its
 * backward. Parallel ops are block copies and sums of pieces (their backward per DESIGN.md
 * section 3: partition <-> combine, replicate <-> reduce), and they are the only communication.
 * A weight lives only as its pieces, each on the rank that holds it, with its gradient; a weight
 * in copies (copy degree c) is the output of an implicit replicate, so its gradient is summed over
 * the copy group (replicate's backward) and nothing else is synchronised. Inputs (the step's
 * data) are given whole on every rank. Host code reaches backend memory only through the
 * backend (un_backend_write/read, buffers), so any backend runs it, host-visible or not. An
 * exchange of pieces between ranks goes over the backend's device data plane when every rank's
 * backend offers one (un_exec_plane_open: NCCL on cuda, comm_dev.h), else the communicator moves
 * them, staged through host memory when the host cannot address the backend's.
 *
 *   un_exec *ex;
 *   st = un_exec_new(ctx, g, comm, be, &ex);
 *   st = un_exec_plane_open(ctx, ex);          // collective: the device data plane, if offered
 *   st = un_exec_params_scatter(ctx, ex, logical_weights, un_exec_params(ex)); // its pieces
 *   st = un_backend_write(ctx, be, un_exec_source(ex, x_node), batch, bytes); // every rank
 *   st = un_exec_forward(ctx, ex, step_seed);
 *   ... loss from un_exec_output_pieces(), writing each piece's grad ...
 *   st = un_exec_backward(ctx, ex);            // this rank's shard's gradients
 *   st = un_exec_update(ctx, ex, opt);         // opt over un_exec_shard_count(ex) elements
 *   un_exec_free(ex);
 */
#ifndef UN_EXEC_H
#define UN_EXEC_H

#include "pcg/graph.h"
#include "runtime/backend.h"
#include "runtime/comm.h"
#include "runtime/optim.h"

typedef struct un_exec un_exec;

/* One piece of a graph output held by this rank (val and grad in backend memory). */
typedef struct un_exec_piece {
    int64_t index;            /* piece index in the tensor's piece order (pcg/eval.h) */
    int32_t sum, copy;        /* its partial-sum and copy index */
    int64_t dim[UN_MAX_DIMS]; /* local sizes */
    int64_t off[UN_MAX_DIMS]; /* global offset of the block in each dim */
    void *val;                /* the values (backend memory) */
    void *grad;               /* its gradient, zeroed by the forward; NULL for INT tensors */
} un_exec_piece;

/* What one rank held and moved (bytes). Traffic counts the last forward + backward. */
typedef struct un_exec_stats {
    int64_t sent, recv;       /* to / from other ranks (the communicator's links) */
    int64_t copied;           /* block copies and sums between buffers of this rank */
    int64_t weight_bytes;     /* this rank's weight pieces (their gradients take as much again) */
    int64_t alloc_bytes;      /* every buffer the executor holds (taken once, while planning) */
    int64_t arena_bytes;      /* of which the arena activations and their gradients share by
                                 lifetime (exec.c: all but weights, inputs and graph outputs) */
    int64_t peak_bytes;       /* the most it held at once */
    int64_t plane_exchanges;  /* exchanges with messages of backend memory carried by the
                                 device data plane ... */
    int64_t staged_exchanges; /* ... and staged through host memory (last forward + backward +
                                 update; exchanges of host-visible memory count in neither) */
} un_exec_stats;

/* ---- lifecycle ---- */

/* Plans the graph for this rank (placement, transfers) and allocates every buffer once. The
 * graph, comm and backend are borrowed and must outlive the executor. Weights start at zero
 * (un_exec_param). Owned: free with un_exec_free. */
un_status un_exec_new(un_ctx *ctx, const un_graph *g, un_comm *comm, un_backend *be, un_exec **out);
void un_exec_free(un_exec *ex);
/* Opens the device data plane of ex's backend for its exchanges (comm_dev.h): collective over
 * ex's communicator, once, after every rank's un_exec_new succeeded. Leaves the host path in
 * place (UN_OK) when not every rank's backend offers one; a plane that fails to come up is an
 * error on every rank. */
un_status un_exec_plane_open(un_ctx *ctx, un_exec *ex);
/* The open plane's name ("nccl", "opaque"), NULL without one (static). */
const char *un_exec_plane_name(const un_exec *ex);

/* Whether the backward of node nd (a regular op) reads its inputs' values and its outputs' (what
 * the arena keeps for it; the simulator models the same lifetimes). The ops listed are the ones
 * whose backward reads less on every backend (kernels_cpu.inc, backend_cuda.c; the opaque backend
 * runs the CPU's): an addition or subtraction reads only its output gradient, a linear layer
 * without activation and attention read their inputs (the gradient of an activation reads its
 * output; attention's backward recomputes or finds in the CPU kernels' stash what it needs besides
 * its inputs). Every other op reads both. */
void un_exec_bwd_reads(const un_graph *g, const un_node *nd, bool *ins, bool *outs);

/* Whether weight node id of g (elements of elem_bytes) may have its copy-group gradient sum
 * computed in chunks in place where the ranks share memory: a 2-D weight in c > 1 copies of one
 * block, of at least 1 MiB, whose only consumer is a linear layer reading it as its weight, with an
 * activation other than gelu. On a local run of a host-visible backend whose every copy's owner
 * runs the one piece reading it (data parallelism), the linear layer's backward then computes no
 * weight gradient; after a meet, copy g's owner computes chunk g of the sum over the whole batch,
 * reading the other ranks' inputs and output gradients in place (kept live until the next meet,
 * un_exec_chunked_until): no
 * whole-weight gradient per rank, no reduce-scatter (the all-gather of the update stays). The
 * simulator's runtime model asks the same (search/sim.c). */
bool un_exec_chunked_weight(const un_graph *g, int32_t id, int64_t elem_bytes);

/* Per node of g (until[node count]): for the linear layer of a weight un_exec_chunked_weight
 * names, the time on the executor's step clock (node j's forward at j, its backward at 2n - j)
 * until which the pieces that other ranks read in place after its backward (its input and output
 * values, its output gradient) stay live: the backward of the next such layer, where all ranks
 * meet again, else the backward's end (2n, another meet); -1 for every other node. On shared
 * memory the executor's arena keeps them that long; the simulator models the same. */
void un_exec_chunked_until(const un_graph *g, int64_t elem_bytes, int32_t *until);

/* What un_exec_new would allocate on `rank` of `size` ranks for g in precision prec (bytes), plus
 * opt_arrays arrays of optimizer state per element of the rank's shard (SGD 1, Adam 2), plus,
 * with kernel_threads > 0 (the CPU kernels on a pool of that many threads: the cpu and opaque
 * backends; cuda passes 0), what they keep from each forward of the rank's pieces for their
 * backward (un_kern_stash_bytes) and the largest scratch one of their calls takes
 * (un_exec_kern_scratch): the executor's own planning run dry (no backend, no communicator,
 * nothing allocated). shared: the ranks share memory (the local communicator on a host-visible
 * backend): no scratch for the weights' add receives, which read the sender's buffer. -1 when g
 * cannot be planned (e.g. a machine view beyond the devices). */
int64_t un_exec_estimate_bytes(const un_graph *g, int rank, int size, un_prec prec, bool shared,
                               int opt_arrays, int kernel_threads);

/* The scratch of the CPU kernels' call of node nd on one device tuple (pieces in[nd->n_in],
 * out; data not read) on a pool of `threads` threads with the backend's stash:
 * un_kern_scratch_bytes, with the inputs told apart as the graph names them (attention whose
 * three inputs are one tensor is self-attention) and grads[t]: input t needs a gradient. The
 * runtime's memory check and the simulator both count it. */
size_t un_exec_kern_scratch(const un_node *nd, un_prec prec, const un_kt *in, const un_kt *out,
                            const bool *grads, int threads);

/* ---- sources ---- */

/* The logical value of an input node, given whole on every rank: numel elements (float in the
 * backend's precision, or int64_t) in backend memory, written with un_backend_write. Borrowed,
 * valid until un_exec_free. */
void *un_exec_source(un_exec *ex, int32_t node);
/* This rank's weight pieces are one flat buffer: values and gradients, un_exec_param_count
 * elements each in backend memory (borrowed until un_exec_free). The logical weights (UN_OP_WEIGHT
 * nodes in node order, each whole, un_exec_lparam_count elements) are what initialisation and
 * checkpoints see; un_exec_lparam_offset gives a weight's first element there (-1 for a
 * non-weight). */
int64_t un_exec_param_count(const un_exec *ex);
void *un_exec_params(un_exec *ex);
void *un_exec_param_grads(un_exec *ex);
int64_t un_exec_lparam_count(const un_exec *ex);
int64_t un_exec_lparam_offset(const un_exec *ex, int32_t node);
/* Cuts this rank's pieces out of logical weights (any per-weight array in that order, e.g.
 * optimizer moments; host memory) into local (un_exec_param_count elements in backend memory,
 * e.g. un_exec_params or an optimizer's state), writing through the backend. Not collective. */
un_status un_exec_params_scatter(un_ctx *ctx, un_exec *ex, const void *logical, void *local);
/* The inverse: assembles the logical array (host memory) on rank 0 from every rank's local array
 * (backend memory), read through the backend (other ranks may pass logical = NULL). Collective. */
un_status un_exec_params_gather(un_ctx *ctx, un_exec *ex, const void *local, void *logical);

/* ---- running ---- */

/* Forward pass; zeroes every gradient. dropout_seed (0 = the graph's own dropout seeds, as the
 * reference evaluator) varies the dropout masks per step. Collective. */
un_status un_exec_forward(un_ctx *ctx, un_exec *ex, uint64_t dropout_seed);
/* The pieces of graph output i held by this rank (borrowed until un_exec_free). */
const un_exec_piece *un_exec_output_pieces(const un_exec *ex, int32_t i, int *n);
const un_shape *un_exec_output_shape(const un_exec *ex, int32_t i);
/* Backward from the output pieces' gradients; ends with this rank's shard (below) of its weight
 * pieces holding the gradient: the gradients of a weight in copies (copy degree c) are summed
 * over the copy group by a reduce-scatter (replicate's backward), so chunk g of copy g holds the
 * sum and the other chunks partial sums (un_exec_allgather(ctx, ex, un_exec_param_grads(ex))
 * completes them). Collective. */
un_status un_exec_backward(un_ctx *ctx, un_exec *ex);
/* Gathers graph output i's logical value on every rank into dense (host memory, numel elements;
 * partial sums added, copy 0 read through the backend). Collective. */
un_status un_exec_output_gather(un_ctx *ctx, un_exec *ex, int32_t i, void *dense);

/* ---- the sharded update (ZeRO stage 1/2 over each copy group) ---- */

/* This rank's shard: the elements of its weight pieces it updates: whole pieces of weights not
 * in copies, and of a weight in c copies chunk g (1/c of the piece) of copy g. Copies are
 * updated by their chunks' owners and all-gathered, so the optimizer state of a weight in copies
 * is held once over its copy group. An optimizer for this rank has un_exec_shard_count elements
 * (its state compact, in the shard's order). */
int64_t un_exec_shard_count(const un_exec *ex);
/* One optimizer step of this rank's shard after un_exec_backward, then the all-gather of the
 * updated chunks into every copy (copies end bitwise identical). Collective. */
un_status un_exec_update(un_ctx *ctx, un_exec *ex, un_optim *opt);
/* Completes the copies of a flat per-rank array (un_exec_param_count elements in this rank's
 * weight-piece order, backend memory): chunk g of copy g is copied into chunk g of the other
 * copies. Collective. */
un_status un_exec_allgather(un_ctx *ctx, un_exec *ex, void *flat);
/* Cuts this rank's shard out of a logical per-weight array (e.g. loaded optimizer moments) into
 * shard (un_exec_shard_count elements, backend memory). Not collective. */
un_status un_exec_shard_scatter(un_ctx *ctx, un_exec *ex, const void *logical, void *shard);
/* The inverse: assembles the logical array on rank 0 from every rank's shard (other ranks may
 * pass logical = NULL). Collective. */
un_status un_exec_shard_gather(un_ctx *ctx, un_exec *ex, const void *shard, void *logical);

/* One weight piece this rank holds (summand 0; zero summands hold nothing to keep): its block of
 * the logical weight, where its values start in the rank's flat weight buffers, and the chunk of
 * it (piece-local elements lo..hi, row-major) that the rank's shard holds, at shard_at there. The
 * chunks of a block's copies partition it, so the ranks' chunks hold every weight element (and
 * its optimizer state) exactly once: a per-rank checkpoint of them is complete. */
typedef struct un_exec_block {
    int32_t node;
    int64_t off[UN_MAX_DIMS], len[UN_MAX_DIMS];
    int64_t at, lo, hi, shard_at;
} un_exec_block;
/* This rank's weight blocks in node and piece order (n of them). Owned: free(). */
un_exec_block *un_exec_blocks(const un_exec *ex, int *n);

/* ---- statistics ---- */

/* This rank's accounting (borrowed until un_exec_free). */
const un_exec_stats *un_exec_stats_get(const un_exec *ex);

/* Node times (unity-train --node-times): with on, every later un_exec_forward and
 * un_exec_backward records the wall seconds of each node's forward and backward on this rank
 * (two clock reads a node; nothing is read while off, the default), without the zeroing of
 * gradient buffers, which is timed as a whole. */
void un_exec_time_nodes(un_exec *ex, bool on);
/* Node id's seconds in the last forward (bwd false) or backward; id == the node count: the
 * gradient zeroing of the last forward and backward. 0 while not timed. */
double un_exec_node_seconds(const un_exec *ex, int32_t id, bool bwd);

#endif
