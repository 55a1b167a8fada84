/* rule.h - a graph substitution (DESIGN.md section 5): a source and a target pattern graph over the
 * same external inputs, the mapping of source outputs to target outputs, and parameter variables
 * shared by both sides (a degree k, a dim d). The witness graphs hold concrete values (those the
 * generator found the rule at); a variable records which parameters carry it, so the verifier can
 * prove the rule for every value and the search can instantiate it at another one.
 * This module is shared by rulesdb, gen, verify and search; it does no I/O besides JSON text.
 *
 *   un_rule *r;
 *   st = un_rule_make(ctx, src, dst, (un_ref[]){{c, 0}}, (un_ref[]){{r2, 0}}, 1, &r);
 *   st = un_rule_var_add(ctx, r, "k", (un_rule_bind[]){{0, p1, 1, -1}, {1, p2, 1, -1}}, 2);
 *   uint64_t h = un_rule_hash(r);               // canonical: invariant under renaming
 *   st = un_rule_check_random(ctx, r, UN_DOM_FIELD, seed, &err);   // UN_ERR_MISMATCH if wrong
 *   st = un_rule_to_json(ctx, r, &buf);
 *   un_rule_free(r);
 */
#ifndef UN_RULE_H
#define UN_RULE_H

#include "pcg/eval.h"
#include "pcg/graph.h"

#define UN_RULE_MAX_OUTS  4  /* mapped outputs */
#define UN_RULE_MAX_VARS  6  /* parameter variables */
#define UN_RULE_MAX_BINDS 16 /* occurrences of one variable */
#define UN_RULE_MAX_CONDS 8  /* side conditions */

/* Verdict of a rule in the database. Only VERIFIED rules are ever applied. REJECTED: an imported
 * rule that is malformed under our specs (never verified, kept with its reason). */
typedef enum {
    UN_RULE_CANDIDATE,
    UN_RULE_VERIFIED,
    UN_RULE_REFUTED,
    UN_RULE_UNKNOWN,
    UN_RULE_REJECTED,
    UN_RULE_STATUS_COUNT
} un_rule_status;

const char *un_rule_status_name(un_rule_status s); /* static: "candidate", "verified", ... */
bool un_rule_status_from_name(const char *name, un_rule_status *out);

enum { UN_RULE_SRC = 0, UN_RULE_DST = 1 };

/* One parameter occurrence carrying a variable: side (UN_RULE_SRC/DST), node id in that side's
 * graph, parameter index in the node's op spec, and the list item (-1 for a scalar parameter;
 * e.g. item i of an input's "shard" list). */
typedef struct un_rule_bind {
    int8_t side;
    int32_t node;
    int8_t param;
    int8_t item;
} un_rule_bind;

typedef struct un_rule_var {
    char name[16]; /* "k", "d", ... unique within the rule */
    int64_t value; /* the value in the witness graphs */
    int n_binds;
    un_rule_bind binds[UN_RULE_MAX_BINDS];
} un_rule_var;

/* A side condition: coef * prod(vars[a]^exp[a]) divides dim `dim` of output `out` of node `node`
 * on side `side` (a rule input is named on the source side). The target needs it beyond what the
 * source's well-formedness gives (un_rule_conds_compute), e.g. "k | dim 1 of x0" for
 * relu(x0) => combine[dim=1,degree=k](relu(partition[dim=1,degree=k](x0))), or "k^2 | dim 2 of x0"
 * when k is also x0's own shard degree on dim 2. */
typedef struct un_rule_cond {
    int8_t side;
    int32_t node;
    int8_t out;
    int8_t dim;
    int64_t coef;                 /* >= 1 */
    int8_t exp[UN_RULE_MAX_VARS]; /* power of each variable, in vars order */
} un_rule_cond;

/* The body is public (read-only for users; build with the functions below). */
typedef struct un_rule {
    char name[64]; /* label (e.g. the FlexFlow rule name), may be empty */
    un_graph *src; /* owned; its source nodes are the rule's inputs */
    un_graph *dst; /* owned; uses the same inputs, by name, with equal shapes and layouts */
    int n_out;
    un_ref src_out[UN_RULE_MAX_OUTS]; /* mapped outputs: src_out[i] is replaced by dst_out[i] */
    un_ref dst_out[UN_RULE_MAX_OUTS];
    int n_vars;
    un_rule_var vars[UN_RULE_MAX_VARS];
    bool any_shape; /* proven for every input shape on which src is well formed (set by verify) */
    int n_conds;    /* side conditions (set by un_rule_conds_compute; the verifier stores them) */
    un_rule_cond conds[UN_RULE_MAX_CONDS];
} un_rule;

/* Makes a rule from two graphs (cloned; the caller keeps its own). Checks: both sides have the
 * same source nodes by name (same op, shape, dtype and layout), every source node is used, the
 * outputs exist and each mapped pair has equal logical shape, dtype and layout; 1..MAX_OUTS pairs.
 * An input on one side only, a dangling node (a non-source node on either side whose value
 * reaches no mapped output), or mismatched outputs are UN_ERR_INVALID with the reason.
 * Owned: free with un_rule_free. */
un_status un_rule_make(un_ctx *ctx, const un_graph *src, const un_graph *dst, const un_ref *src_out,
                       const un_ref *dst_out, int n_out, un_rule **out);
void un_rule_free(un_rule *r);
un_rule *un_rule_clone(const un_rule *r);

/* Adds a variable bound at the given parameter occurrences; all must currently hold the same
 * value, which becomes var.value. UN_ERR_INVALID otherwise. */
un_status un_rule_var_add(un_ctx *ctx, un_rule *r, const char *name, const un_rule_bind *binds,
                          int n_binds);

/* The index of the variable bound at (side, node, parameter, item), or -1. */
int un_rule_var_at(const un_rule *r, int side, int32_t node, int param, int item);

/* Number of rule inputs and the i-th one's node id in src / dst (inputs in src node order). */
int un_rule_input_count(const un_rule *r);
int32_t un_rule_input_src(const un_rule *r, int i);
int32_t un_rule_input_dst(const un_rule *r, int i);
/* Non-source node counts of each side (the rule's size is their sum). */
int un_rule_size(const un_rule *r, int side);

/* Canonical hash: equal for rules equal up to renaming of inputs and nodes, node insertion order
 * and the order of the output pairs. Direction matters (src => dst differs from dst => src).
 * The inputs' concrete dims do not enter it (their ranks, dtypes and layouts do), so one rule
 * found at two menu shapes, or imported without shapes, is one rule; operator parameters do. */
uint64_t un_rule_hash(const un_rule *r);
/* un_rule_hash of r (*fwd) and of its reverse (*rev: the rule un_rule_make gives with the sides
 * swapped, the same graphs and outputs), without building the reverse. False, *rev unset, when r
 * has no reverse (its target has no operator, so it could not be a source). */
bool un_rule_hash_both(const un_rule *r, uint64_t *fwd, uint64_t *rev);
/* un_rule_hash_both of the rule un_rule_make(ctx, src, dst, src_out, dst_out, n_out) would make,
 * without making it (no copy of the sides): UN_OK with *fwd, *has_rev and, when the reverse
 * exists, *rev; or the error un_rule_make would return. */
un_status un_rule_hash_sides(un_ctx *ctx, const un_graph *src, const un_graph *dst,
                             const un_ref *src_out, const un_ref *dst_out, int n_out, uint64_t *fwd,
                             uint64_t *rev, bool *has_rev);
/* The canonical form: inputs renamed x0, x1, ... and weights w0, w1, ... in canonical order of
 * first use (over both sides), other nodes s0.. (source side) and t0.. (target side) in canonical
 * topological order, output pairs in canonical order. Equal rules up to renaming give identical
 * JSON text. Owned: free with un_rule_free. */
un_status un_rule_canonical(un_ctx *ctx, const un_rule *r, un_rule **out);

/* Rebuilds the rule with its variables set to values[n_vars] (and, when in_shapes is non-NULL, its
 * inputs given these parallel shapes, in un_rule_input order; variables bound inside an input's
 * layout are then taken from in_shapes). The source is built first; then every side condition is
 * checked (UN_ERR_SHAPE "side condition k^2 | dim 2 of x0 fails: k=3, dim 4"), then the target.
 * UN_ERR_SHAPE when a side is not well formed there, with the reason; UN_ERR_MISMATCH when both
 * are but a mapped pair differs in shape or layout. This is the check every application of a
 * rule goes through, forwards or reversed (un_rule_reverse). Owned: free with un_rule_free. */
un_status un_rule_instantiate(un_ctx *ctx, const un_rule *r, const int64_t *values,
                              const un_shape *in_shapes, un_rule **out);

/* ---- dimension variables ---- */

/* A variable is a dim variable when it binds a size: an item of an input's "shape" or of a
 * regular op's list parameter (split's sizes, reshape's shape), e.g. n1 and n2 in
 *   linear(x0, w0), linear(x0, w1) => split[axis=2,sizes=[n1,n2]](linear(x0, concat[axis=1](w0,
 * w1))) with n1 bound to dim 1 of w0 (on both sides) and sizes[0], n2 to dim 1 of w1 and sizes[1].
 * The matcher binds it from the matched tensors' dims and parameters (one value per symbol), and
 * un_rule_instantiate builds both sides at its value (from in_shapes when given). It stays in a
 * rule only when the rule is proven for any input size (any_shape) with it. */
bool un_rule_var_is_dim(const un_rule *r, int a);

/* Proposes r's dim variables: per mapped output pair, each dim of the source output and of the
 * target output is followed back through the ops that copy a dim to where its size comes from (a
 * rule input's dim, or a size parameter item such as split's sizes[i]); sizes so found equal are
 * one class, and each class holding a size parameter and something the source fixes (an input
 * dim or a source-side parameter) becomes one variable n1, n2, ... binding all of them. *out:
 * the rule with the new variables (owned), or NULL when there is none. Nothing is proven here:
 * the verifier decides (random tests at other sizes, then Z3 over symbolic sizes). */
un_status un_rule_dims_generalize(un_ctx *ctx, const un_rule *r, un_rule **out);

/* Removes r's dim variables (their parameters keep the witness values); returns how many. */
int un_rule_dims_drop(un_rule *r);

/* ---- side conditions and direction ---- */

/* Computes r's side conditions: the divisibilities the target's layouts need (each partition's
 * output shard degree must divide its dim; an input's own shard degree counts) that the source's
 * do not already give. Shard degrees are followed as products of the rule's variables and
 * constants; a dim is followed back through the operators that keep it (relu, ew ops, a `like`
 * output) to a rule input where it can be, so the condition names the input ("k | dim 1 of x0");
 * otherwise it names the target's inner tensor. Replaces r->conds. UN_ERR_INVALID when more than
 * UN_RULE_MAX_CONDS are needed or a shard degree cannot be followed (the verifier then keeps
 * the rule at its concrete degrees). */
un_status un_rule_conds_compute(un_ctx *ctx, un_rule *r);
/* Whether condition c holds at variable values (NULL: the witness values) for a dim of size d. */
bool un_rule_cond_holds(const un_rule *r, const un_rule_cond *c, const int64_t *values, int64_t d);
/* "k^2 | dim 2 of x0", one condition; the tensor is named by its expression (un_rule_str). */
void un_rule_cond_str(const un_rule *r, const un_rule_cond *c, un_buf *out);

/* What un_rule_check_claim saw: instances that held, those skipped because the source was not
 * well formed there or a side condition failed, and the failures: the target not well formed, or
 * both sides well formed but a mapped pair of outputs of another shape or layout. */
typedef struct un_rule_claim_stats {
    int64_t held, no_source, cond_failed;
    int64_t target_ill, outputs_differ;
} un_rule_claim_stats;

/* Re-checks r's claim on a grid: each variable at 1..max_value (all combinations, the range cut
 * so there are at most 4096), at the witness input sizes and, when r->any_shape, at sizes scaled
 * per class of equal witness dims (x2, x3, x5), scaled as a whole (x2, x6) and at random per-dim
 * multiples (x1..x4) (where a dim variable bound to an input dim takes the sizes' value, and one
 * bound only to size parameters, such as split sizes, goes over 1..4). Wherever the source is well
 * formed and the side conditions hold, the target must be well formed with mapped outputs of
 * equal shape and layout; otherwise
 * UN_ERR_MISMATCH naming the first such instance (values, sizes, reason), after the whole grid
 * has been counted in stats (may be NULL: then the first failure ends the check). */
un_status un_rule_check_claim(un_ctx *ctx, const un_rule *r, int max_value,
                              un_rule_claim_stats *stats);

/* Rules are proven and stored one way, source => target; the search may also use them backwards.
 * The reversed rule (target => source) is the same equation read the other way, and its claim is
 * weaker: it holds wherever BOTH sides are well formed (the proof covers every input on which the
 * source and the side conditions hold, and a well-formed target satisfies its own conditions).
 * Its side conditions are recomputed for the new target (the old source), but they are only the
 * divisibilities: the new target may also need sizes the new source does not give (split sizes,
 * equal dims of an ew op: of the 5,261 verified N=3 rules, 51 have instances where the target is
 * well formed and the source is not, 17 of them also where the reversed conditions hold). So a
 * reversed rule, like every rule, is applied only through un_rule_instantiate, which builds the new
 * source, checks the conditions and builds the new target, and fails with UN_ERR_SHAPE where the
 * new side is not well formed, never producing an ill-formed graph. any_shape carries over (in
 * that weaker sense). UN_ERR_INVALID when the conditions cannot be followed (the rule is then not
 * used backwards). Owned: free with un_rule_free.
 *
 *   un_rule *back;
 *   st = un_rule_reverse(ctx, r, &back);
 *   st = un_rule_instantiate(ctx, back, values, matched_input_shapes, &inst);  // checks it */
un_status un_rule_reverse(un_ctx *ctx, const un_rule *r, un_rule **out);

/* Evaluates both sides on the same random inputs (seeded; inputs matched by name) and compares
 * every mapped pair: logical shape, layout and value (exact in the field, relative 1e-9 in f64).
 * UN_ERR_MISMATCH with the output pair and first differing element when they differ. *max_err
 * (may be NULL) receives the largest difference seen. */
un_status un_rule_check_random(un_ctx *ctx, const un_rule *r, un_dom dom, uint64_t seed,
                               double *max_err);

/* JSON: {"name": "...", "src": GRAPH, "dst": GRAPH, "outputs": [["s", "t"], ...],
 *        "vars": [{"name": "k", "value": 2, "at": [["src", "node", "param"], ["dst", "n", "shard",
 * 1]]}], "any_shape": false, "conds": [{"coef": 1, "pow": {"k": 2}, "of": ["src", "x0", 0, 2]}]}
 * GRAPH is pcg's graph JSON (graph.h); each side lists the input nodes it shares; "conds" (side
 * conditions: [side, node, output, dim]) is written only when there are some. Errors name the
 * document, the JSON path and the reason. */
un_status un_rule_to_json(un_ctx *ctx, const un_rule *r, un_buf *out);
un_status un_rule_from_json(un_ctx *ctx, const un_spec *spec, const char *doc_name,
                            const char *text, size_t len, un_rule **out);
un_status un_rule_from_jcur(un_ctx *ctx, const un_spec *spec, const un_jcur *c, un_rule **out);

/* Readable form, one line per mapped output: "relu(combine[dim=0,degree=k](x0)) => ...". */
void un_rule_str(const un_rule *r, un_buf *out);

#endif
