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
        const un_sp_node *c =
            root->kind == UN_SP_SERIES ? &t->nodes[t->child[root->child_at + i]] : root;
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
        const un_sp_node *x =
            root->kind == UN_SP_SERIES ? &t->nodes[t->child[root->child_at + c]] : root;
        for (int32_t j = x->begin; j < x->end; j++)
            out[k++] = t->order[j];
    }
}

/* Whether two nodes do the same work on the same shapes (so they have the same configurations
 * and costs): op, parameters, input shapes and which inputs are weights. */
static bool same_node(const un_graph *g, int32_t u, int32_t v) {
    const un_node *a = un_graph_node(g, u), *b = un_graph_node(g, v);
    if (a->op != b->op || a->n_in != b->n_in || a->inf.n_out != b->inf.n_out)
        return false;
    for (int i = 0; i < UN_MAX_PARAMS; i++)
        if (!un_param_eq(&a->params[i], &b->params[i]))
            return false;
    for (int t = 0; t < a->n_in; t++)
        if (!un_shape_eq(un_graph_shape(g, a->in[t]), un_graph_shape(g, b->in[t])) ||
            a->in[t].out != b->in[t].out ||
            un_graph_node(g, a->in[t].node)->op != un_graph_node(g, b->in[t].node)->op)
            return false;
    return true;
}

/* Whether pieces p and q (their nodes in order: np, nq) are the same subproblem: the same nodes
 * position by position, read from the same positions (or from their entry cut nodes, or from
 * sources alike), the same graph outputs, and entries of the same work. Then one's results serve
 * the other, configuration by configuration (the map shares the configurations of equal nodes). */
static bool same_piece(const un_graph *g, const un_split *s, int32_t p, int32_t q,
                       const int32_t *np, const int32_t *nq, int32_t *at, const bool *is_out) {
    if (s->size[p] != s->size[q] || (s->entry[p] < 0) != (s->entry[q] < 0) ||
        (s->exit[p] < 0) != (s->exit[q] < 0))
        return false;
    if (s->entry[p] >= 0 && !same_node(g, s->entry[p], s->entry[q]))
        return false;
    int32_t k = s->size[p];
    for (int32_t i = 0; i < k; i++)
        at[np[i]] = at[nq[i]] = -1;
    for (int32_t i = 0; i < k; i++) {
        at[np[i]] = i;
        at[nq[i]] = i;
    }
    bool same = true;
    for (int32_t i = 0; i < k && same; i++) {
        int32_t u = np[i], v = nq[i];
        same = same_node(g, u, v) && is_out[u] == is_out[v] &&
               (s->exit[p] < 0 || (u == s->exit[p]) == (v == s->exit[q]));
        const un_node *a = un_graph_node(g, u), *b = un_graph_node(g, v);
        for (int t = 0; t < a->n_in && same; t++) {
            int32_t x = a->in[t].node, y = b->in[t].node;
            bool xe = x == s->entry[p], ye = y == s->entry[q];
            bool xs = un_op_kind_of(un_graph_node(g, x)->op) == UN_OPK_SOURCE;
            bool ys = un_op_kind_of(un_graph_node(g, y)->op) == UN_OPK_SOURCE;
            same = xe == ye && xs == ys && (xe || xs || (at[x] >= 0 && at[x] == at[y]));
        }
    }
    for (int32_t i = 0; i < k; i++)
        at[np[i]] = at[nq[i]] = -1;
    return same;
}

/* One class of equal pieces: the results per entry configuration, solved once. */
typedef struct piece_memo {
    int32_t owner; /* the first piece of the class */
    int32_t ne, nx, size;
    bool *done;      /* [ne] */
    double *cost;    /* [ne * nx] */
    int32_t *assign; /* [ne * nx * size]: configurations by position in the piece */
} piece_memo;

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
    /* classes of equal pieces (a transformer's layers): one memo per class */
    const un_graph *g = un_map_graph(m);
    int32_t **nodes = un_xcalloc((size_t)s->n, sizeof *nodes);
    int32_t *cls = un_xmalloc((size_t)s->n * sizeof *cls);
    piece_memo *memo = un_xcalloc((size_t)s->n, sizeof *memo);
    int32_t n_memo = 0;
    int32_t *at = un_xmalloc(((size_t)n + 1) * sizeof *at);
    bool *is_out = un_xcalloc((size_t)n + 1, sizeof *is_out);
    for (int32_t v = 0; v < n; v++)
        at[v] = -1;
    for (int32_t i = 0; i < un_graph_output_count(g); i++)
        is_out[un_graph_output(g, i).node] = true;
    for (int32_t p = 0; p < s->n; p++) {
        nodes[p] = un_xmalloc(((size_t)s->size[p] + 1) * sizeof *nodes[p]);
        un_split_piece_nodes(s, p, nodes[p]);
        cls[p] = -1;
        for (int32_t c = 0; c < n_memo && cls[p] < 0; c++)
            if (same_piece(g, s, p, memo[c].owner, nodes[p], nodes[memo[c].owner], at, is_out))
                cls[p] = c;
        if (cls[p] >= 0) {
            st->memo_hits++;
            continue;
        }
        piece_memo *pm = &memo[cls[p] = n_memo++];
        pm->owner = p;
        pm->ne = s->entry[p] >= 0 ? un_map_config_count(m, s->entry[p]) : 1;
        pm->nx = s->exit[p] >= 0 ? un_map_config_count(m, s->exit[p]) : 1;
        pm->size = s->size[p];
        pm->done = un_xcalloc((size_t)pm->ne + 1, sizeof *pm->done);
        pm->cost = un_xmalloc(((size_t)pm->ne * (size_t)pm->nx + 1) * sizeof *pm->cost);
        pm->assign = un_xmalloc(((size_t)pm->ne * (size_t)pm->nx * (size_t)pm->size + 1) *
                                sizeof *pm->assign);
    }
    un_status status = UN_OK;
    for (int32_t p = 0; p < s->n && status == UN_OK; p++) {
        piece_memo *pm = &memo[cls[p]];
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
            size_t base = (size_t)e * (size_t)nx;
            if (!pm->done[e]) { /* solve on this piece, keep by position for the class */
                for (size_t i = 0; i < (size_t)nx * (size_t)n; i++)
                    assign[i] = -1;
                status =
                    un_map_solve_piece(ctx, m, lambda, s->child[p], s->child[p + 1], s->entry[p], e,
                                       s->exit[p], beam, cost, assign, &st->map);
                st->piece_solves++;
                for (int32_t x = 0; x < nx; x++) {
                    pm->cost[base + (size_t)x] = cost[x];
                    for (int32_t i = 0; i < pm->size; i++)
                        pm->assign[(base + (size_t)x) * (size_t)pm->size + (size_t)i] =
                            assign[(size_t)x * (size_t)n + (size_t)nodes[p][i]];
                }
                pm->done[e] = true;
            }
            for (int32_t x = 0; x < nx && status == UN_OK; x++) {
                double c = pm->cost[base + (size_t)x];
                if (best[e] + c < nb[x]) {
                    nb[x] = best[e] + c;
                    from[p][x] = e;
                    int32_t *row = rows[p] + (size_t)x * (size_t)n;
                    for (int32_t v = 0; v < n; v++)
                        row[v] = -1;
                    for (int32_t i = 0; i < pm->size; i++)
                        row[nodes[p][i]] =
                            pm->assign[(base + (size_t)x) * (size_t)pm->size + (size_t)i];
                }
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
    for (int32_t c = 0; c < n_memo; c++) {
        free(memo[c].done);
        free(memo[c].cost);
        free(memo[c].assign);
    }
    free(memo);
    free(cls);
    free(at);
    free(is_out);
    for (int32_t p = 0; p < s->n; p++) {
        free(nodes[p]);
        free(from[p]);
        free(rows[p]);
    }
    free(nodes);
    free(from);
    free(rows);
    free(best);
    return status;
}
