/* expr.h - the one small arithmetic language of the specs, for shapes, conditions and costs:
 *   integers, + - * / % (floor division and modulo), unary -, comparisons == != < <= > >=,
 *   ! && ||, parentheses, min(a,b), max(a,b), and names resolved when the text is parsed:
 *   parameters (`stride`), list parameter items (`shape[1]`), list lengths (`len(shape)`),
 *   variables (`k`, `d`, `i`), tensor dims (`in0[-1]` counts from the end), ranks (`in0.rank`)
 *   and element counts (`numel(out0)`).
 * The tree is public so the verifier can translate it to Z3; evaluation here is concrete.
 *
 *   un_expr *e;
 *   st = un_expr_parse(ctx, "(in0[2] + 2*pad - in1[2]) / stride + 1", &scope, arena, &e);
 *   st = un_expr_eval(ctx, e, &env, &v);
 */
#ifndef UN_EXPR_H
#define UN_EXPR_H

#include "pcg/op.h"

typedef enum {
    UN_EX_INT,      /* value */
    UN_EX_PARAM,    /* ref = parameter index (scalar) */
    UN_EX_PARAM_AT, /* ref = list parameter index, a = item index */
    UN_EX_LEN,      /* ref = list parameter index */
    UN_EX_VAR,      /* ref = variable slot */
    UN_EX_DIM,      /* ref = tensor id, a = dim index (negative: from the end) */
    UN_EX_RANK,     /* ref = tensor id */
    UN_EX_NUMEL,    /* ref = tensor id */
    UN_EX_BIN,      /* op, a, b */
    UN_EX_NEG,      /* a */
    UN_EX_NOT,      /* a */
    UN_EX_MIN,      /* a, b */
    UN_EX_MAX,      /* a, b */
    UN_EX_KIND_COUNT
} un_ex_kind;

typedef enum {
    UN_BIN_ADD,
    UN_BIN_SUB,
    UN_BIN_MUL,
    UN_BIN_DIV,
    UN_BIN_MOD,
    UN_BIN_EQ,
    UN_BIN_NE,
    UN_BIN_LT,
    UN_BIN_LE,
    UN_BIN_GT,
    UN_BIN_GE,
    UN_BIN_AND,
    UN_BIN_OR,
    UN_BIN_COUNT
} un_bin_op;

/* Tensor ids: inputs are 0..UN_EX_OUT-1, outputs UN_EX_OUT + i. */
#define UN_EX_OUT 64

typedef struct un_expr {
    un_ex_kind kind;
    un_bin_op op;
    int32_t ref;
    int64_t value;
    struct un_expr *a, *b;
} un_expr;

typedef enum {
    UN_NAME_NONE,
    UN_NAME_PARAM,
    UN_NAME_LIST_PARAM,
    UN_NAME_VAR,
    UN_NAME_TENSOR
} un_name_kind;

/* Resolves a name while parsing; returns UN_NAME_NONE for an unknown name. */
typedef struct un_expr_scope {
    un_name_kind (*resolve)(const void *user, const char *name, int32_t *ref);
    const void *user;
} un_expr_scope;

/* Values seen while evaluating. Shapes may be NULL when an expression does not use them. */
typedef struct un_expr_env {
    const un_param *params;
    int n_params;
    const int64_t *vars;
    int n_vars;
    const un_shape *const *in;
    int n_in;
    const un_shape *const *out;
    int n_out;
} un_expr_env;

/* Parses text; nodes live in the arena. Errors give the column and reason. */
un_status un_expr_parse(un_ctx *ctx, const char *text, const un_expr_scope *scope, un_arena *arena,
                        un_expr **out);
/* Evaluates; division by zero, an unknown tensor or an out-of-range index is UN_ERR_SHAPE.
 * ctx may be NULL when the caller needs only the status (no message is recorded then). */
un_status un_expr_eval(un_ctx *ctx, const un_expr *e, const un_expr_env *env, int64_t *out);
/* Writes the expression back as text (fully parenthesised names resolved by number). */
void un_expr_str(const un_expr *e, un_buf *b);
/* True when e mentions variable slot v / tensor shapes at all. */
bool un_expr_uses_var(const un_expr *e, int32_t slot);

#endif
