/* checkpoint.h - checkpoints of a training run: every weight of the graph, whole (logical, by
 * name and shape, in node order), plus the optimizer state, in one file. Logical state loads into
 * any plan and device count: the trainer streams the pieces to rank 0, one weight at a time
 * (un_checkpoint_save_exec), and loads straight into each rank's pieces (un_checkpoint_load_exec).
 *
 *   st = un_checkpoint_save(ctx, "run.ckpt", g, UN_PREC_F32, logical_w, logical_opt);
 *   st = un_checkpoint_load(ctx, "run.ckpt", g, UN_PREC_F32, logical_w, logical_opt);
 */
#ifndef UN_CHECKPOINT_H
#define UN_CHECKPOINT_H

#include "pcg/graph.h"
#include "runtime/exec.h"
#include "runtime/optim.h"

/* Writes the weights of g (w: un_exec_lparam_count elements in prec, node order) and the
 * optimizer state (may be NULL) to path, through a temporary file renamed at the end (never a
 * half-written checkpoint). */
un_status un_checkpoint_save(un_ctx *ctx, const char *path, const un_graph *g, un_prec prec,
                             const void *w, const un_optim *o);
/* Reads a checkpoint into w (and the optimizer state into o when the file has one and o is not
 * NULL). Every weight of g must be in the file with the same shape; errors name the path and the
 * weight; a truncated or damaged file (checksum) is UN_ERR_PARSE and loads nothing usable. */
un_status un_checkpoint_load(un_ctx *ctx, const char *path, const un_graph *g, un_prec prec,
                             void *w, un_optim *o);
/* The same file written from an executor's pieces (every rank of ex calls it; collective over
 * comm): rank 0 writes the weights and the optimizer state (o: this rank's shard, may be NULL)
 * one weight at a time, each rank sending it its chunks of that weight (un_exec_blocks), so no
 * rank holds more than one logical weight (rank 0 two: the weight and what it receives);
 * *host_bytes (may be NULL) says how much. Any rank's failure fails every rank; no file is left
 * half-written. */
un_status un_checkpoint_save_exec(un_ctx *ctx, const char *path, const un_graph *g, un_exec *ex,
                                  un_backend *be, const un_optim *o, un_comm *comm,
                                  int64_t *host_bytes);

/* ---- one file per rank (MPI) ----
 * Each rank writes PATH.rankR with its own weight blocks (copy 0's values) and its optimizer
 * shard (un_exec_blocks), nothing gathered. Either kind loads into the logical arrays
 * (un_checkpoint_load, un_checkpoint_load_ranks) or straight into one rank's pieces of any plan
 * and device count (un_checkpoint_load_exec). */

/* Writes this rank's file (be: the executor's backend, read through un_backend_read). */
un_status un_checkpoint_save_rank(un_ctx *ctx, const char *path, const un_graph *g, un_exec *ex,
                                  un_backend *be, const un_optim *o, int rank, int ranks);
/* Whether path names a per-rank checkpoint: no file path, but a file path.rank0. */
bool un_checkpoint_is_ranks(const char *path);
/* Reads every rank's file (the count from rank 0's) into the logical w and o, as
 * un_checkpoint_load; every weight of g must be whole over the files. */
un_status un_checkpoint_load_ranks(un_ctx *ctx, const char *path, const un_graph *g, un_prec prec,
                                   void *w, un_optim *o);

/* Loads a checkpoint (one file, or PATH.rankR files: un_checkpoint_is_ranks) straight into this
 * rank's pieces of executor ex over graph g (the weights, written through backend be) and its
 * optimizer shard into o (un_exec_shard_count elements, backend memory; NULL: weights only). Only
 * the saved elements that fall in the rank's blocks (un_exec_blocks) are read, seeking into the
 * files in bounded chunks, so any saved plan or device count re-shards on the fly and the host
 * holds the rank's pieces and shard plus a bounded buffer, never the whole model; *host_bytes
 * (may be NULL) says how much. Errors as un_checkpoint_load; on error nothing is written to the
 * backend. Not collective. */
un_status un_checkpoint_load_exec(un_ctx *ctx, const char *path, const un_graph *g, un_exec *ex,
                                  un_backend *be, un_optim *o, int64_t *host_bytes);

#endif
