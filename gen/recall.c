/* recall.c - a published rule set against a generated one (recall.h). */
#include "gen/recall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rulesdb/flexflow.h"

const char *un_gen_recall_kind_name(un_gen_recall_kind k) {
    static const char *const names[UN_GEN_RECALL_COUNT] = {
        "found", "rejected", "wrong", "off-menu", "too-big", "implied", "missed"};
    return (unsigned)k < UN_GEN_RECALL_COUNT ? names[k] : "?";
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Both directions' hashes, smaller first. */
static uint64_t min_hash(un_ctx *ctx, const un_rule *r) {
    un_ref so[UN_RULE_MAX_OUTS], dout[UN_RULE_MAX_OUTS];
    for (int i = 0; i < r->n_out; i++) {
        so[i] = r->src_out[i];
        dout[i] = r->dst_out[i];
    }
    uint64_t h = un_rule_hash(r);
    un_rule *rev = NULL;
    if (un_rule_make(ctx, r->dst, r->src, dout, so, r->n_out, &rev) == UN_OK) {
        uint64_t h2 = un_rule_hash(rev);
        h = h2 < h ? h2 : h;
    } else
        un_ctx_clear(ctx);
    un_rule_free(rev);
    return h;
}

/* Why a side of r is outside the menu, or false. */
static bool off_menu(const un_gen_menu *m, const un_graph *g, char *why, size_t n) {
    const un_spec *spec = un_graph_spec(g);
    for (int32_t v = 0; v < un_graph_node_count(g); v++) {
        const un_node *nd = un_graph_node(g, v);
        if (un_op_kind_of(nd->op) == UN_OPK_SOURCE) {
            const un_shape *s = &nd->inf.out[0];
            bool ok = false;
            for (int i = 0; i < m->n_inputs && !ok; i++) {
                const un_shape *t = &m->inputs[i].shape;
                bool same = m->inputs[i].op == nd->op && t->rank == s->rank &&
                            t->dtype == s->dtype && t->sum == s->sum && t->copy == s->copy;
                for (int d = 0; same && d < s->rank; d++)
                    same = t->shard[d] == s->shard[d];
                ok = same;
            }
            if (!ok) {
                char sb[96];
                un_shape_str(s, sb, sizeof sb);
                snprintf(why, n, "no menu %s of rank %d with the layout of %s", un_op_name(nd->op),
                         s->rank, sb);
                return true;
            }
            continue;
        }
        bool ok = false;
        const un_op_spec *os = un_spec_op(spec, nd->op);
        for (int i = 0; i < m->n_insts && !ok; i++) {
            ok = m->insts[i].op == nd->op;
            for (int p = 0; ok && p < os->n_params; p++)
                ok = un_param_eq(&m->insts[i].params[p], &nd->params[p]);
        }
        if (!ok) {
            un_buf b = {0};
            un_buf_printf(&b, "%s", os->name);
            for (int p = 0; p < os->n_params; p++) {
                un_buf_printf(&b, "%s%s=", p ? "," : "[", os->params[p].name);
                un_spec_param_str(&os->params[p], &nd->params[p], &b);
            }
            snprintf(why, n, "%s%s is not in the menu", b.data ? b.data : "?",
                     os->n_params ? "]" : "");
            un_buf_deinit(&b);
            return true;
        }
    }
    return false;
}

/* The two sides of r as compact graphs over the menu: rule inputs become distinct menu inputs of
 * the same kind, rank and layout (lowest first), nodes become menu instances. */
static bool to_compact(const un_gen_menu *m, const un_rule *r, un_gen_graph *ga, un_gen_graph *gb,
                       bool *conn, char *why, size_t n) {
    int ni = un_rule_input_count(r);
    int map_in[64];
    bool taken[UN_GEN_MAX_INPUTS] = {false};
    for (int i = 0; i < ni && i < 64; i++) {
        const un_node *nd = un_graph_node(r->src, un_rule_input_src(r, i));
        const un_shape *s = &nd->inf.out[0];
        map_in[i] = -1;
        for (int j = 0; j < m->n_inputs && map_in[i] < 0; j++) {
            const un_shape *t = &m->inputs[j].shape;
            bool same = !taken[j] && m->inputs[j].op == nd->op && t->rank == s->rank &&
                        t->sum == s->sum && t->copy == s->copy;
            for (int d = 0; same && d < s->rank; d++)
                same = t->shard[d] == s->shard[d];
            if (same) {
                map_in[i] = j;
                taken[j] = true;
            }
        }
        if (map_in[i] < 0) {
            snprintf(why, n, "not enough menu inputs like %s", nd->name ? nd->name : "?");
            return false;
        }
    }
    const un_graph *gs[2] = {r->src, r->dst};
    un_gen_graph *out[2] = {ga, gb};
    for (int side = 0; side < 2; side++) {
        const un_graph *g = gs[side];
        un_gen_graph *c = out[side];
        memset(c, 0, sizeof *c);
        int32_t nn = un_graph_node_count(g);
        int *base = un_xcalloc((size_t)(nn + 1), sizeof *base);
        int nt = m->n_inputs;
        bool ok = true;
        for (int32_t q = 0; q < nn && ok; q++) {
            int32_t v = q;
            const un_node *nd = un_graph_node(g, v);
            if (un_op_kind_of(nd->op) == UN_OPK_SOURCE) {
                base[v] = -1;
                for (int i = 0; i < ni; i++)
                    if (strcmp(un_graph_node(r->src, un_rule_input_src(r, i))->name, nd->name) == 0)
                        base[v] = map_in[i];
                ok = base[v] >= 0;
                continue;
            }
            const un_op_spec *os = un_spec_op(m->spec, nd->op);
            int inst = -1;
            for (int i = 0; i < m->n_insts && inst < 0; i++) {
                bool same = m->insts[i].op == nd->op;
                for (int p = 0; same && p < os->n_params; p++)
                    same = un_param_eq(&m->insts[i].params[p], &nd->params[p]);
                if (same)
                    inst = i;
            }
            if (inst < 0 || c->n_ops >= UN_GEN_MAX_OPS || nd->n_in > UN_GEN_MAX_OP_IN) {
                snprintf(why, n, "%s is not a menu instance", os->name);
                ok = false;
                break;
            }
            un_gen_op *op = &c->ops[c->n_ops++];
            op->inst = (uint16_t)inst;
            op->n_in = (uint8_t)nd->n_in;
            for (int k = 0; k < nd->n_in; k++) {
                const un_node *in = un_graph_node(g, nd->in[k].node);
                op->in[k] = (uint8_t)(un_op_kind_of(in->op) == UN_OPK_SOURCE
                                          ? base[nd->in[k].node]
                                          : base[nd->in[k].node] + nd->in[k].out);
            }
            base[v] = nt;
            nt += nd->inf.n_out;
        }
        /* connected: every operator linked to every other through operator edges */
        int32_t *comp = un_xmalloc(sizeof(int32_t) * (size_t)(nn + 1));
        for (int32_t v = 0; v < nn; v++)
            comp[v] = v;
        int n_comp = 0;
        for (int32_t v = 0; v < nn; v++) {
            const un_node *nd = un_graph_node(g, v);
            if (un_op_kind_of(nd->op) == UN_OPK_SOURCE)
                continue;
            n_comp++;
            for (int k = 0; k < nd->n_in; k++) {
                int32_t u = nd->in[k].node;
                if (un_op_kind_of(un_graph_node(g, u)->op) == UN_OPK_SOURCE)
                    continue;
                int32_t a = comp[u], b = comp[v];
                if (a == b)
                    continue;
                for (int32_t x = 0; x < nn; x++)
                    if (comp[x] == b)
                        comp[x] = a;
                n_comp--;
            }
        }
        conn[side] = n_comp == 1;
        free(comp);
        free(base);
        if (!ok)
            return false;
    }
    return true;
}

un_status un_gen_recall_run(un_ctx *ctx, const un_gen_enum *e, int max_ops, const un_gen_rules *rs,
                            const char *path, un_gen_recall *out, un_buf *report) {
    memset(out, 0, sizeof *out);
    const un_gen_menu *menu = un_gen_enum_menu(e);
    int64_t n = rs->n;
    un_flexflow_rule *ff = NULL;
    int nff = 0;
    un_status st = un_flexflow_load(ctx, menu->spec, path, &ff, &nff);
    if (st != UN_OK)
        return st;
    /* kept rules are stored in their smaller-hash direction: their hash is the min of both */
    uint64_t *hs = un_xmalloc(sizeof(uint64_t) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++)
        hs[i] = rs->kept_hash[i];
    qsort(hs, (size_t)n, sizeof *hs, cmp_u64);
    out->total = nff;
    for (int i = 0; i < nff; i++) {
        un_gen_recall_kind k;
        char why[300] = "";
        const un_rule *r = ff[i].rule;
        if (!r) {
            k = UN_GEN_RECALL_REJECTED;
            snprintf(why, sizeof why, "%s", ff[i].reason);
        } else {
            uint64_t h = min_hash(ctx, r);
            if (bsearch(&h, hs, (size_t)n, sizeof *hs, cmp_u64))
                k = UN_GEN_RECALL_FOUND;
            else if (un_rule_check_random(ctx, r, UN_DOM_FIELD, 99, NULL) != UN_OK) {
                k = UN_GEN_RECALL_WRONG;
                snprintf(why, sizeof why, "%s", un_ctx_errmsg(ctx));
                un_ctx_clear(ctx);
            } else if (un_rule_size(r, UN_RULE_SRC) > max_ops ||
                       un_rule_size(r, UN_RULE_DST) > max_ops) {
                k = UN_GEN_RECALL_TOO_BIG;
                snprintf(why, sizeof why, "sides of %d and %d operators", un_rule_size(r, 0),
                         un_rule_size(r, 1));
            } else if (off_menu(menu, r->src, why, sizeof why) ||
                       off_menu(menu, r->dst, why, sizeof why))
                k = UN_GEN_RECALL_OFF_MENU;
            else {
                un_gen_graph ga, gb;
                un_gen_geval ea, eb;
                bool conn[2] = {false, false}, ok_a = false, ok_b = false;
                if (to_compact(menu, r, &ga, &gb, conn, why, sizeof why)) {
                    ok_a = un_gen_enum_eval(ctx, e, &ga, &ea) == UN_OK;
                    if (!ok_a)
                        snprintf(why, sizeof why, "source side at the menu's shapes: %s",
                                 un_ctx_errmsg(ctx));
                    ok_b = ok_a && un_gen_enum_eval(ctx, e, &gb, &eb) == UN_OK;
                    if (ok_a && !ok_b)
                        snprintf(why, sizeof why, "target side at the menu's shapes: %s",
                                 un_ctx_errmsg(ctx));
                    un_ctx_clear(ctx);
                }
                bool dup = strstr(why, "duplicate tensor") != NULL;
                if (ok_a)
                    un_gen_geval_deinit(&ea);
                if (ok_b)
                    un_gen_geval_deinit(&eb);
                if (!ok_b && dup) {
                    k = UN_GEN_RECALL_IMPLIED;
                    snprintf(why, sizeof why,
                             "implied: a side computes one tensor twice (e.g. combine of "
                             "partition), which smaller rules remove");
                } else if (!ok_b)
                    k = UN_GEN_RECALL_OFF_MENU;
                else if (un_gen_pair_explain(ctx, e, rs, &ga, &gb, why, sizeof why))
                    k = UN_GEN_RECALL_IMPLIED;
                else if (conn[0] && conn[1]) {
                    k = UN_GEN_RECALL_IMPLIED;
                    snprintf(why, sizeof why,
                             "implied: both sides are graphs of one group of equals, each kept "
                             "or implied equal to its smallest graph");
                } else {
                    k = UN_GEN_RECALL_MISSED;
                    snprintf(why, sizeof why, "a side is disconnected (no partner was built)");
                }
            }
        }
        out->by_kind[k]++;
        if (k != UN_GEN_RECALL_FOUND && report) {
            un_buf_printf(report, "%s: %s: %s", ff[i].name, un_gen_recall_kind_name(k), why);
            if (r && (k == UN_GEN_RECALL_MISSED || k == UN_GEN_RECALL_IMPLIED)) {
                un_buf_printf(report, ": ");
                un_rule_str(r, report);
            }
            un_buf_printf(report, "\n");
        }
    }
    free(hs);
    un_flexflow_rules_free(ff, nff);
    return UN_OK;
}
