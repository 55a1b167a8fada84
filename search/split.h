/* split.h - layer 1 of the search (DESIGN.md section 8; Unity's first layer): a PCG is cut at
 * its cut nodes (search/sp.h: nodes that every path crosses and no edge passes around) into a
 * chain of pieces of at most k regular nodes where the cut nodes allow it (a stretch between
 * two consecutive cut nodes longer than k stays one piece); each piece is solved by layer 3
 * (search/mapping.h) once per configuration of the cut node it starts from, for every
 * configuration of the cut node it ends at (the layouts of the cut tensors); the pieces'
 * results are joined by a dynamic programme along the chain. Pieces that are the same
 * subproblem (a transformer's layers: the same ops, parameters, shapes and wiring, entered from
 * equal cut nodes) are solved once: the results are memoized per (piece class, entry
 * configuration) for one memory price.
 *
 *   un_split s;
 *   st = un_split_make(ctx, m, 10, &s);              // m: un_map_new over the graph
 *   for (int32_t i = 0; i < s.n; i++) ... s.first[i], s.size[i] ...  // a piece's nodes
 *   st = un_split_solve(ctx, m, &s, lambda, a, &stats);
 *   un_split_deinit(&s);
 *
 * Per piece (for layer 2, which rewrites a piece and maps it again): un_split_piece_nodes lists
 * a piece's graph nodes; the entry and exit cut nodes are its boundary. */
#ifndef UN_SPLIT_H
#define UN_SPLIT_H

#include "search/mapping.h"

typedef struct un_split {
    int32_t n;       /* pieces */
    int32_t *child;  /* [n + 1] piece i: the SP root's children [child[i], child[i + 1]) */
    int32_t *entry;  /* [n] the cut node before the piece (-1: none, the first) */
    int32_t *exit;   /* [n] the cut node that ends it (-1: the last) */
    int32_t *size;   /* [n] its regular nodes */
    int32_t cuts;    /* cut nodes of the graph */
    int32_t largest; /* the largest piece's nodes */
    int32_t k;       /* the bound asked for */
    const un_map *m; /* borrowed */
} un_split;

typedef struct un_split_stats {
    int32_t pieces, largest, cuts;
    int64_t piece_solves; /* layer 3 runs: one per piece class and entry configuration */
    int32_t memo_hits;    /* pieces equal to an earlier one (same nodes, shapes, wiring): its
                           * results reused, configuration by configuration */
    un_map_stats map;     /* layer 3's counters over every run */
} un_split_stats;

/* The pieces of m's graph for bound k (>= 1). Release with un_split_deinit. */
un_status un_split_make(un_ctx *ctx, const un_map *m, int k, un_split *out);
void un_split_deinit(un_split *s);

/* Piece i's regular graph nodes (in the DP's order), written to out (room for size[i]). */
void un_split_piece_nodes(const un_split *s, int32_t i, int32_t *out);

/* Solves every piece for every entry configuration and joins the pieces along the chain:
 * a[v] for every node (-1: sources), st (may be NULL) the statistics; the cost (as
 * un_map_cost) in st->map.cost. Equals un_map_solve when neither beams. */
un_status un_split_solve(un_ctx *ctx, un_map *m, const un_split *s, double lambda, int32_t *a,
                         un_split_stats *st);

#endif
