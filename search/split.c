/* split.c - layer 1: the pieces between cut nodes and the join along the chain (search/split.h). */
#include "search/split.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

un_status un_split_make(un_ctx *ctx, const un_map *m, int k, un_split *out) {
    memset(out, 0, sizeof *out);
    if (k < 1)
        return un_ctx_error(ctx, UN_ERR_INVALID, "--split-size %d: a piece holds at least 1 node",
                            k);
    out->k = k;
    out->m = m;
    const un_sp_tree *t = un_map_tree(m);
    if (!t)
        return UN_OK;
    const un_sp_info *sa = un_map_sp(m);
    const un_sp_node *root = &t->nodes[t->root];
    int32_t nc = root->kind == UN_SP_SERIES ? root->n_child : 1;
    /* cut[i]: child i is a single cut node */
    bool *is_cut = un_xcalloc((size_t)sa->n + 1, sizeof *is_cut);
    int32_t *cuts = un_xmalloc(((size_t)sa->n + 1) * sizeof *cuts);
    out->cuts = un_sp_cut_nodes(sa, cuts);
    for (int32_t i = 0; i < out->cuts; i++)
        is_cut[cuts[i]] = true;
    free(cuts);
    int32_t *size = un_xmalloc(((size_t)nc + 1) * sizeof *size);
    int32_t *cut_node = un_xmalloc(((size_t)nc + 1) * sizeof *cut_node);
    for (int32_t i = 0; i < nc; i++) {
        const un_sp_node *c = root->kind == UN_SP_SERIES ? &t->nodes[t->child[root->child_at + i]]
                                                         : root;
        size[i] = c->end - c->begin;
        cut_node[i] = c->kind == UN_SP_LEAF && is_cut[c->node] ? c->node : -1;
    }
    free(is_cut);
    /* greedy: a piece ends at the last cut child that keeps it within k nodes (or, when the
     * next cut is already farther, at the first cut child) */
    out->child = un_xmalloc(((size_t)nc + 2) * sizeof *out->child);
    out->entry = un_xmalloc(((size_t)nc + 1) * sizeof *out->entry);
    out->exit = un_xmalloc(((size_t)nc + 1) * sizeof *out->exit);
    out->size = un_xmalloc(((size_t)nc + 1) * sizeof *out->size);
    int32_t begin = 0, entry = -1;
    while (begin < nc) {
        int32_t nodes = 0, end = -1, end_nodes = 0;
        for (int32_t i = begin; i < nc; i++) {
            nodes += size[i];
            if (nodes > k && end >= 0)
                break;
            if (cut_node[i] >= 0 && i + 1 < nc) {
                end = i + 1;
                end_nodes = nodes;
            }
        }
        if (end < 0 || nodes <= k) { /* no cut ahead, or the rest fits: the last piece */
            end = nc;
            end_nodes = nodes;
        }
        int32_t p = out->n++;
        out->child[p] = begin;
        out->entry[p] = entry;
        out->exit[p] = end < nc ? cut_node[end - 1] : -1;
        out->size[p] = end_nodes;
        if (end_nodes > out->largest)
            out->largest = end_nodes;
        entry = out->exit[p];
        begin = end;
    }
    out->child[out->n] = nc;
    free(size);
    free(cut_node);
    return UN_OK;
}

void un_split_deinit(un_split *s) {
    free(s->child);
    free(s->entry);
    free(s->exit);
    free(s->size);
    memset(s, 0, sizeof *s);
}

void un_split_piece_nodes(const un_split *s, int32_t i, int32_t *out) {
    const un_sp_tree *t = un_map_tree(s->m);
    const un_sp_node *root = &t->nodes[t->root];
    int32_t k = 0;
    for (int32_t c = s->child[i]; c < s->child[i + 1]; c++) {
        const un_sp_node *x = root->kind == UN_SP_SERIES ? &t->nodes[t->child[root->child_at + c]]
                                                         : root;
        for (int32_t j = x->begin; j < x->end; j++)
            out[k++] = t->order[j];
    }
}

un_status un_split_solve(un_ctx *ctx, un_map *m, const un_split *s, double lambda, int32_t *a,
                         un_split_stats *stp) {
    un_split_stats local;
    un_split_stats *st = stp ? stp : &local;
    memset(st, 0, sizeof *st);
    st->pieces = s->n;
    st->largest = s->largest;
    st->cuts = s->cuts;
    int32_t n = un_map_node_count(m);
    for (int32_t v = 0; v < n; v++) {
        a[v] = -1;
        if (un_op_kind_of(un_graph_node(un_map_graph(m), v)->op) == UN_OPK_REGULAR)
            st->map.configs += un_map_config_count(m, v);
    }
    if (s->n == 0) {
        un_map_stats ms;
        un_status st0 = un_map_solve(ctx, m, lambda, a, &ms);
        st->map = ms;
        return st0;
    }
    /* best[x]: the cheapest cost of the pieces so far ending with the cut at configuration x;
     * from[p][x]: the entry configuration it came from; rows[p]: per (entry, exit) pair the
     * piece's assignment (only the rows of the chosen entries are kept) */
    double *best = un_xmalloc(sizeof *best);
    best[0] = 0;
    int32_t n_best = 1;
    int32_t **from = un_xcalloc((size_t)s->n, sizeof *from);
    int32_t **rows = un_xcalloc((size_t)s->n, sizeof *rows);
    un_status status = UN_OK;
    for (int32_t p = 0; p < s->n && status == UN_OK; p++) {
        int32_t ne = s->entry[p] >= 0 ? un_map_config_count(m, s->entry[p]) : 1;
        int32_t nx = s->exit[p] >= 0 ? un_map_config_count(m, s->exit[p]) : 1;
        double *nb = un_xmalloc(((size_t)nx + 1) * sizeof *nb);
        for (int32_t x = 0; x < nx; x++)
            nb[x] = INFINITY;
        from[p] = un_xmalloc(((size_t)nx + 1) * sizeof *from[p]);
        rows[p] = un_xmalloc(((size_t)nx * (size_t)n + 1) * sizeof *rows[p]);
        /* the map's beam shared by the piece's runs (never below 256 states a run), so that
         * the whole search keeps the unsplit DP's state budget */
        int64_t beam = un_map_max_states(m) / ne > 256 ? un_map_max_states(m) / ne : 256;
        double *cost = un_xmalloc(((size_t)nx + 1) * sizeof *cost);
        int32_t *assign = un_xmalloc(((size_t)nx * (size_t)n + 1) * sizeof *assign);
        for (int32_t e = 0; e < ne && e < n_best && status == UN_OK; e++) {
            if (!isfinite(best[e]))
                continue;
            for (size_t i = 0; i < (size_t)nx * (size_t)n; i++)
                assign[i] = -1;
            status = un_map_solve_piece(ctx, m, lambda, s->child[p], s->child[p + 1], s->entry[p],
                                        e, s->exit[p], beam, cost, assign, &st->map);
            st->piece_solves++;
            for (int32_t x = 0; x < nx && status == UN_OK; x++)
                if (best[e] + cost[x] < nb[x]) {
                    nb[x] = best[e] + cost[x];
                    from[p][x] = e;
                    memcpy(rows[p] + (size_t)x * (size_t)n, assign + (size_t)x * (size_t)n,
                           (size_t)n * sizeof *assign);
                }
        }
        free(cost);
        free(assign);
        free(best);
        best = nb;
        n_best = nx;
    }
    if (status == UN_OK && !isfinite(best[0]))
        status = un_ctx_error(ctx, UN_ERR_INVALID, "mapping: no configuration of every node fits");
    if (status == UN_OK) {
        /* back along the chain from the last piece's single result */
        int32_t x = 0;
        for (int32_t p = s->n - 1; p >= 0; p--) {
            const int32_t *row = rows[p] + (size_t)x * (size_t)n;
            for (int32_t v = 0; v < n; v++)
                if (row[v] >= 0)
                    a[v] = row[v];
            x = from[p][x];
        }
        st->map.cost = un_map_cost(m, a, lambda, &st->map.time, &st->map.mem);
        st->map.pieces = s->n;
    }
    for (int32_t p = 0; p < s->n; p++) {
        free(from[p]);
        free(rows[p]);
    }
    free(from);
    free(rows);
    free(best);
    return status;
}
