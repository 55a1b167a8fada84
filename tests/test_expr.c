/* tests/test_expr.c - the expression language: precedence, floor division, names, errors. */
#include "pcg/expr.h"
#include "tests/test.h"

static un_name_kind resolve(const void *user, const char *name, int32_t *ref) {
    (void)user;
    if (strcmp(name, "stride") == 0)
        return *ref = 0, UN_NAME_PARAM;
    if (strcmp(name, "shape") == 0)
        return *ref = 1, UN_NAME_LIST_PARAM;
    if (strcmp(name, "k") == 0)
        return *ref = 0, UN_NAME_VAR;
    if (strcmp(name, "in0") == 0)
        return *ref = 0, UN_NAME_TENSOR;
    if (strcmp(name, "out0") == 0)
        return *ref = UN_EX_OUT, UN_NAME_TENSOR;
    return UN_NAME_NONE;
}

static int64_t eval(const char *text, un_status *st_out) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_arena *a = un_arena_new(1024);
    un_expr_scope sc = {.resolve = resolve, .user = NULL};
    un_param params[2] = {un_param_int(2), {.len = 3, .v = {4, 5, 6}}};
    int64_t vars[1] = {3};
    un_shape x = un_shape_make(3, (int64_t[]){8, 16, 32}, UN_DT_FLOAT);
    un_shape y = un_shape_make(1, (int64_t[]){7}, UN_DT_FLOAT);
    const un_shape *in[1] = {&x}, *out[1] = {&y};
    un_expr_env env = {.params = params,
                       .n_params = 2,
                       .vars = vars,
                       .n_vars = 1,
                       .in = in,
                       .n_in = 1,
                       .out = out,
                       .n_out = 1};
    un_expr *e = NULL;
    int64_t v = -999;
    un_status st = un_expr_parse(ctx, text, &sc, a, &e);
    if (st == UN_OK)
        st = un_expr_eval(ctx, e, &env, &v);
    if (st_out)
        *st_out = st;
    un_arena_free(a);
    un_ctx_free(ctx);
    return v;
}

static void test_arith(void) {
    EXPECT_EQ(eval("1 + 2 * 3", NULL), 7);
    EXPECT_EQ(eval("(1 + 2) * 3", NULL), 9);
    EXPECT_EQ(eval("7 / 2", NULL), 3);
    EXPECT_EQ(eval("-7 / 2", NULL), -4);
    EXPECT_EQ(eval("-7 % 3", NULL), 2);
    EXPECT_EQ(eval("10 - 3 - 2", NULL), 5);
    EXPECT_EQ(eval("min(3, 9) + max(3, 9)", NULL), 12);
    EXPECT_EQ(eval("1 < 2 && 2 <= 2 && 3 > 2 && 3 >= 3 && 1 != 2 && 2 == 2", NULL), 1);
    EXPECT_EQ(eval("!1 || 0", NULL), 0);
    EXPECT_EQ(eval("--3", NULL), 3);
}

static void test_names(void) {
    EXPECT_EQ(eval("stride", NULL), 2);
    EXPECT_EQ(eval("shape[1] + len(shape)", NULL), 8);
    EXPECT_EQ(eval("shape[-1]", NULL), 6);
    EXPECT_EQ(eval("k * 2", NULL), 6);
    EXPECT_EQ(eval("in0[0] + in0[-1]", NULL), 40);
    EXPECT_EQ(eval("in0.rank", NULL), 3);
    EXPECT_EQ(eval("numel(in0)", NULL), 8 * 16 * 32);
    EXPECT_EQ(eval("(in0[2] + 2 * 1 - 3) / stride + 1", NULL), 16);
    EXPECT_EQ(eval("out0[0]", NULL), 7);
}

static void test_errors(void) {
    un_status st;
    eval("1 +", &st);
    EXPECT_EQ(st, UN_ERR_PARSE);
    eval("stridd + 1", &st);
    EXPECT_EQ(st, UN_ERR_PARSE);
    eval("in0", &st);
    EXPECT_EQ(st, UN_ERR_PARSE);
    eval("(1 + 2", &st);
    EXPECT_EQ(st, UN_ERR_PARSE);
    eval("1 / 0", &st);
    EXPECT_EQ(st, UN_ERR_SHAPE);
    eval("in0[3]", &st);
    EXPECT_EQ(st, UN_ERR_SHAPE);
    eval("shape[5]", &st);
    EXPECT_EQ(st, UN_ERR_SHAPE);
    eval("1 2", &st);
    EXPECT_EQ(st, UN_ERR_PARSE);
    /* the message names the column */
    un_ctx *ctx = un_ctx_new(NULL);
    un_arena *a = un_arena_new(256);
    un_expr_scope sc = {.resolve = resolve, .user = NULL};
    un_expr *e;
    EXPECT_EQ(un_expr_parse(ctx, "stride + bogus", &sc, a, &e), UN_ERR_PARSE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "column 10") != NULL);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "unknown name 'bogus'") != NULL);
    un_arena_free(a);
    un_ctx_free(ctx);
}

static void test_print(void) {
    un_arena *a = un_arena_new(256);
    un_ctx *ctx = un_ctx_new(NULL);
    un_expr_scope sc = {.resolve = resolve, .user = NULL};
    un_expr *e;
    EXPECT_OK(ctx, un_expr_parse(ctx, "in0[-1] * k + 1", &sc, a, &e));
    un_buf b = {0};
    un_expr_str(e, &b);
    EXPECT_STR_EQ(b.data, "((in0[-1] * v0) + 1)");
    EXPECT_TRUE(un_expr_uses_var(e, 0));
    un_buf_deinit(&b);
    un_ctx_free(ctx);
    un_arena_free(a);
}

int main(void) {
    static const test_case cases[] = {{"arith", test_arith},
                                      {"names", test_names},
                                      {"errors", test_errors},
                                      {"print", test_print}};
    return TEST_RUN_ALL(cases);
}
