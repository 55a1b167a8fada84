/* spec.h - the operator registry loaded from specs/ops.json (format: specs/FORMAT.md): per operator
 * its parameters and domains, inputs, output-shape rule, sharding rules, cost expressions and
 * axioms; and layout inference, which applies the sharding rules to concrete input layouts.
 * The closed set of operators is pcg/ops.def; the loader checks the file against it both ways.
 *
 *   un_spec *spec;
 *   if (un_spec_load(ctx, "specs/ops.json", &spec) != UN_OK) ...;
 *   const un_op_spec *os = un_spec_op(spec, UN_OP_LINEAR);
 *   un_infer inf;
 *   st = un_spec_infer(ctx, spec, UN_OP_LINEAR, params, in_shapes, 2, &inf);   // inf.out[0]
 *   un_spec_free(spec);
 */
#ifndef UN_SPEC_H
#define UN_SPEC_H

#include "pcg/expr.h"
#include "pcg/json.h"

typedef enum {
#define X(n, s, k) UN_OP_##n,
#include "pcg/ops.def"
#undef X
    UN_OP_COUNT
} un_op;

typedef enum { UN_OPK_SOURCE, UN_OPK_REGULAR, UN_OPK_PARALLEL } un_op_kind;

#define UN_MAX_INPUTS  8
#define UN_MAX_OUTPUTS 8
#define UN_MAX_PARAMS  8
#define UN_MAX_RULES   24

const char *un_op_name(un_op op); /* static; from ops.def */
un_op_kind un_op_kind_of(un_op op);
bool un_op_from_name(const char *name, un_op *out);

/* ---- the spec tree (all of it lives in the spec's arena; borrowed until un_spec_free) ---- */

typedef enum { UN_PT_INT, UN_PT_BOOL, UN_PT_ENUM, UN_PT_LIST, UN_PT_COUNT } un_ptype;

typedef struct un_param_spec {
    const char *name;
    un_ptype type;
    int64_t min, max; /* INT domain (inclusive); LIST items' domain */
    int n_enum;
    const char *const *enums; /* ENUM names; the value is the index */
    bool has_default;
    un_param dflt;
    int n_try;
    const un_param *try_vals; /* values the generator tries */
} un_param_spec;

/* Parameter conditions "param == value" that must all hold (an empty list always holds). */
typedef struct un_when {
    int n;
    int32_t param[UN_MAX_PARAMS];
    int64_t value[UN_MAX_PARAMS];
} un_when;

typedef struct un_input_spec {
    const char *name;
    int32_t rank;     /* exact rank, or -1 */
    int32_t min_rank; /* when rank == -1 */
    un_dtype dtype;
    bool weight;  /* a trained parameter (documentation; search and runtime use it) */
    un_when when; /* present only when these hold (optional inputs) */
} un_input_spec;

typedef struct un_output_spec {
    int32_t like; /* start from input `like`'s dims, or -1 */
    int n_dims;   /* explicit dims when like == -1 and dims_param == -1 */
    const un_expr *dims[UN_MAX_DIMS];
    int32_t dims_param; /* dims from a list parameter, or -1 */
    int n_set;          /* on top of like: dim set_at[j] := set_val[j] */
    const un_expr *set_at[UN_MAX_DIMS];
    const un_expr *set_val[UN_MAX_DIMS];
    const un_expr *drop; /* on top of like: remove this dim, or NULL */
    un_when drop_when;   /* ... only when these parameter conditions hold */
    un_dtype dtype;      /* output dtype (or that of the dtype param) */
    int32_t dtype_param; /* ENUM param naming the dtype ("float"/"int"), or -1 */
} un_output_spec;

typedef enum { UN_COMP_SHARD, UN_COMP_SUM, UN_COMP_COPY, UN_COMP_COUNT } un_comp_kind;

/* What one rule of degree k does to one tensor: shard dim `dim` by k, or sum / copy degree by k. */
typedef struct un_comp {
    un_comp_kind kind;
    const un_expr *dim; /* SHARD only; may use the rule's foreach variable; negative from the end */
} un_comp;

typedef struct un_rewrite {
    int32_t param;        /* parameter rewritten for the local (per piece) op */
    int32_t item;         /* list item, or -1 for a scalar */
    const un_expr *value; /* may use k */
} un_rewrite;

/* A sharding rule of degree k: each input and output gets exactly one component, so every tensor's
 * piece count grows by k. Rule `copy` (all copy -> all copy) is implicit for every regular op. */
typedef struct un_shard_rule {
    const char *name;
    int32_t foreach; /* variable slot ranging over the dims of input 0, or -1 */
    un_when when;
    const un_expr *require; /* NULL or a condition that may use k and the foreach var */
    un_comp in[UN_MAX_INPUTS];
    un_comp out[UN_MAX_OUTPUTS]; /* if the op's output count varies, out[0] serves all */
    int n_rewrite;
    un_rewrite rewrite[UN_MAX_PARAMS];
} un_shard_rule;

/* Axiom terms: a tensor variable, or an operator applied to parameters and argument terms. */
typedef enum { UN_TERM_VAR, UN_TERM_APP } un_term_kind;

typedef struct un_term_param {
    int32_t param;                     /* the operator's parameter index */
    int n_items;                       /* -1: scalar in items[0]; else a list */
    const un_expr *items[UN_MAX_DIMS]; /* over the axiom's parameter variables and tensor dims */
} un_term_param;

typedef struct un_term {
    un_term_kind kind;
    int32_t var;       /* VAR: tensor variable index in the axiom */
    un_op op;          /* APP */
    int32_t out_index; /* APP: which output (`split.1`), default 0 */
    int n_params;
    un_term_param *params; /* unspecified parameters take their defaults */
    int n_args;
    struct un_term **args;
} un_term;

typedef struct un_axiom_var {
    const char *name;
    un_dtype dtype;
    int rank;
    const char *dims[UN_MAX_DIMS]; /* size-variable names, or decimal literals */
    const char *range; /* int tensors: values lie in [0, range) (size variable or literal) */
} un_axiom_var;

typedef struct un_axiom {
    const char *name;
    const char *lhs_text, *rhs_text;
    const un_term *lhs, *rhs;
    int n_vars;
    const un_axiom_var *vars; /* tensor variables; their var index is their position */
    int n_pvars;
    const char *const *pvar_names; /* integer parameter variables; expression var slot = position */
    const un_param *const *pvar_values; /* values the concrete check tries, per variable */
    const int *pvar_nvalues;
    const un_expr *require; /* side condition over the parameter variables, or NULL */
} un_axiom;

/* A concrete example used by the tests: parameter values and input shapes. */
typedef struct un_example {
    un_param params[UN_MAX_PARAMS]; /* every parameter, defaults filled in */
    int n_in;
    un_shape in[UN_MAX_INPUTS];
    int64_t range[UN_MAX_INPUTS]; /* int inputs: values in [0, range) */
} un_example;

typedef struct un_op_spec {
    un_op op;
    const char *name;
    const char *doc;
    un_op_kind kind;
    int n_params;
    un_param_spec params[UN_MAX_PARAMS];
    int n_inputs; /* the most inputs the op takes; optional ones have a `when` */
    un_input_spec inputs[UN_MAX_INPUTS];
    int n_outputs;                /* fixed count, or 0 when outputs_count is set */
    const un_expr *outputs_count; /* variable count (e.g. len(sizes)); outputs[0] then serves all */
    un_output_spec outputs[UN_MAX_OUTPUTS];
    int n_require;
    const un_expr *require[8];
    const char *require_text[8];
    int n_rules;
    un_shard_rule rules[UN_MAX_RULES];
    const un_expr *flops; /* forward flops; may be NULL (0) */
    const un_expr *bytes; /* bytes read + written by the forward op */
    const un_expr *bwd_flops, *bwd_bytes; /* the backward's (input gradients); may be NULL */
    int n_axioms;
    const un_axiom *axioms;
    int n_examples;
    const un_example *examples;
} un_op_spec;

typedef struct un_spec un_spec;

/* Expression variable slots every spec expression may use. */
enum { UN_VAR_K = 0, UN_VAR_FOREACH = 1, UN_VAR_OUT = 2, UN_VAR_COUNT = 3 };

/* ---- lifecycle ---- */

/* Loads and validates a spec file; errors name the file, the JSON path and the reason.
 * Owned: free with un_spec_free. */
un_status un_spec_load(un_ctx *ctx, const char *path, un_spec **out);
un_status un_spec_parse(un_ctx *ctx, const char *name, const char *text, size_t len, un_spec **out);
void un_spec_free(un_spec *spec);

/* ---- queries ---- */

const un_op_spec *un_spec_op(const un_spec *spec, un_op op);
/* The parameter index of `name` in op, or -1. */
int un_spec_param_index(const un_op_spec *os, const char *name);
/* Fills every parameter with its default (0 / empty list when it has none). */
void un_spec_param_defaults(const un_op_spec *os, un_param *params);
/* Content hash of the spec text (for provenance of rules). */
uint64_t un_spec_hash(const un_spec *spec);
int un_spec_total_rules(
    const un_spec *spec); /* sharding rules in the file (implicit copy excluded) */
int un_spec_total_axioms(const un_spec *spec);
/* Per-op scope used to parse expressions against op (params, k/d/i, in*, out*). */
bool un_when_holds(const un_when *w, const un_param *params);
/* Number of inputs present under these parameters (optional inputs excluded when absent). */
int un_spec_n_present_inputs(const un_op_spec *os, const un_param *params);

/* ---- inference ---- */

/* Layout components a rule touches, as indices: shard of dim i is i, sum UN_COMP_SUM_AT, copy
 * UN_COMP_COPY_AT, absent input -1. */
#define UN_COMP_SUM_AT  UN_MAX_DIMS
#define UN_COMP_COPY_AT (UN_MAX_DIMS + 1)
#define UN_MAX_USES     16

/* One applied sharding rule: which rule, its foreach value, its degree and what it touches. */
typedef struct un_rule_use {
    int32_t rule;    /* index in os->rules, or -1 for the implicit copy rule */
    int32_t foreach; /* value of the foreach variable (-1 if none) */
    int32_t degree;  /* > 1 */
    int8_t in_comp[UN_MAX_INPUTS];
    int8_t out_comp[UN_MAX_OUTPUTS];
} un_rule_use;

typedef struct un_infer {
    int n_out;
    un_shape out[UN_MAX_OUTPUTS];
    int n_uses; /* applied rules (degree > 1), in spec order, copy last */
    un_rule_use uses[UN_MAX_USES];
    un_param local[UN_MAX_PARAMS]; /* parameters of the per-piece op after rewrites */
} un_infer;

/* Shape and layout inference for a regular, source or parallel op. Checks parameter domains,
 * ranks, dtypes, requirements and divisibility, then explains the input layouts as a product of
 * sharding rules. An illegal layout is UN_ERR_SHAPE with a message naming the op, the input and
 * the rule that fails. `label` names the node in messages (may be NULL). With ctx NULL no message
 * is built (the generator's fast path). */
un_status un_spec_infer(un_ctx *ctx, const un_spec *spec, un_op op, const un_param *params,
                        const un_shape *in, int n_in, const char *label, un_infer *out);

/* Parameters of parallel op `op` (partition, combine, replicate, reduce): defaults, then its dim
 * (ops that have one) and its degree. p has UN_MAX_PARAMS entries. */
void un_spec_parallel_params(const un_spec *spec, un_op op, int64_t dim, int64_t degree,
                             un_param *p);

/* The piece of tensor t (input t, or output t when is_out) that device tuple u works on when an op
 * runs under the applied rules inf->uses: u holds one index per applied rule, and each index is a
 * mixed-radix digit of the layout component its rule touches. Writes the block index per dim, the
 * partial-sum index and the copy index. The reference evaluator and the runtime both place pieces
 * this way. */
void un_infer_piece(const un_infer *inf, const int32_t *u, bool is_out, int t, int32_t *block,
                    int32_t *sum, int32_t *copy);

/* Multiplies into the input layouts `in` what sharding rule `rule` (-1: the implicit copy rule)
 * with foreach value fe and degree k requires of them: one layout the rule accepts. UN_ERR_SHAPE
 * when the rule does not apply (its conditions fail or a dim does not divide). */
un_status un_spec_rule_apply(un_ctx *ctx, const un_spec *spec, un_op op, const un_param *params,
                             int rule, int fe, int32_t k, un_shape *in, int n_in);

/* Evaluates the op's cost expressions for concrete shapes (after inference). */
un_status un_spec_cost(un_ctx *ctx, const un_spec *spec, un_op op, const un_param *params,
                       const un_shape *in, int n_in, const un_infer *inf, double *flops,
                       double *bytes);

/* All four cost expressions (forward flops, bytes, backward flops, bytes) into cost[4]; an
 * expression the spec does not give is -1 (the caller picks a default). */
un_status un_spec_cost_all(un_ctx *ctx, const un_spec *spec, un_op op, const un_param *params,
                           const un_shape *in, int n_in, const un_infer *inf, double *cost);

/* Reads a parameter value from JSON (number, bool, enum name or array) and checks its domain;
 * errors name the JSON path. */
un_status un_spec_param_parse(un_ctx *ctx, const un_param_spec *ps, const un_jcur *c,
                              un_param *out);
/* Checks a value against the parameter's domain; writes the reason into why. */
bool un_spec_param_valid(const un_param_spec *ps, const un_param *v, char *why, size_t n);

/* Formats a parameter value as text ("relu", "2", "[4,8]"). */
void un_spec_param_str(const un_param_spec *ps, const un_param *v, un_buf *b);

#endif
