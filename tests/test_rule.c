/* test_rule.c - pcg/rule.h: construction checks, canonical hash and form, variables and
 * instantiation, random checks in both domains, JSON round trips and errors. */
#include "pcg/rule.h"
#include "tests/test.h"

static un_spec *spec;

/* relu(combine(x)) => combine(relu(x)) over x of the given dims sharded 2 ways on dim 0, with
 * input name `xn`, and the combine degree as variable k when with_var. */
static const char *relu_combine_fmt =
    "{\"name\": \"relu_combine\","
    " \"src\": {\"nodes\": [{\"name\": \"%s\", \"op\": \"input\", \"params\": {\"shape\": [%d, 4], "
    "\"shard\": [2, 1]}},"
    "   {\"name\": \"c\", \"op\": \"combine\", \"in\": [\"%s\"], \"params\": {\"dim\": 0, "
    "\"degree\": 2}},"
    "   {\"name\": \"r\", \"op\": \"relu\", \"in\": [\"c\"]}], \"outputs\": [\"r\"]},"
    " \"dst\": {\"nodes\": [{\"name\": \"%s\", \"op\": \"input\", \"params\": {\"shape\": [%d, 4], "
    "\"shard\": [2, 1]}},"
    "   {\"name\": \"r\", \"op\": \"relu\", \"in\": [\"%s\"]},"
    "   {\"name\": \"c\", \"op\": \"combine\", \"in\": [\"r\"], \"params\": {\"dim\": 0, "
    "\"degree\": 2}}],"
    "   \"outputs\": [\"c\"]}"
    "%s}";

static un_rule *relu_combine(const char *xn, int d0, bool with_var) {
    char text[2048];
    snprintf(text, sizeof text, relu_combine_fmt, xn, d0, xn, xn, d0, xn,
             with_var
                 ? ", \"vars\": [{\"name\": \"k\", \"value\": 2, \"at\": [[\"src\", \"c\", "
                   "\"degree\"], [\"dst\", \"c\", \"degree\"], [\"src\", \"x\", \"shard\", 0], "
                   "[\"dst\", \"x\", \"shard\", 0]]}]"
                 : "");
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *r = NULL;
    un_status st = un_rule_from_json(ctx, spec, "relu_combine", text, strlen(text), &r);
    EXPECT_OK(ctx, st);
    un_ctx_free(ctx);
    return r;
}

static un_rule *rule_text(un_ctx *ctx, const char *text, un_status *st) {
    un_rule *r = NULL;
    *st = un_rule_from_json(ctx, spec, "t", text, strlen(text), &r);
    return r;
}

static void test_sound_rule(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *r = relu_combine("x", 8, true);
    if (!r)
        goto done;
    EXPECT_EQ(un_rule_input_count(r), 1);
    EXPECT_EQ(un_rule_size(r, UN_RULE_SRC), 2);
    EXPECT_EQ(un_rule_size(r, UN_RULE_DST), 2);
    double err = -1;
    EXPECT_OK(ctx, un_rule_check_random(ctx, r, UN_DOM_FIELD, 1, &err));
    EXPECT_EQ(err, 0);
    EXPECT_OK(ctx, un_rule_check_random(ctx, r, UN_DOM_F64, 2, &err));
    un_buf b = {0};
    un_rule_str(r, &b);
    EXPECT_STR_EQ(b.data, "relu(combine[dim=0,degree=k](x)) => combine[dim=0,degree=k](relu(x))\n");
    un_buf_deinit(&b);
done:
    un_rule_free(r);
    un_ctx_free(ctx);
}

static void test_wrong_rule_refuted(void) {
    /* ew_sub is not commutative: the field check must see it. */
    const char *text =
        "{\"src\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"b\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"s\", \"op\": \"ew_sub\", \"in\": [\"a\", \"b\"]}]},"
        " \"dst\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"b\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"s\", \"op\": \"ew_sub\", \"in\": [\"b\", \"a\"]}]}}";
    un_ctx *ctx = un_ctx_new(NULL);
    un_status st;
    un_rule *r = rule_text(ctx, text, &st);
    EXPECT_OK(ctx, st);
    if (r) {
        EXPECT_EQ(un_rule_check_random(ctx, r, UN_DOM_FIELD, 1, NULL), UN_ERR_MISMATCH);
        un_ctx_clear(ctx);
        EXPECT_EQ(un_rule_check_random(ctx, r, UN_DOM_F64, 1, NULL), UN_ERR_MISMATCH);
        EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "differs") != NULL);
    }
    un_rule_free(r);
    un_ctx_free(ctx);
}

static void test_hash_canonical(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *a = relu_combine("x", 8, false), *b = relu_combine("zz", 8, false),
            *c = relu_combine("x", 16, false);
    if (!a || !b || !c)
        goto done;
    EXPECT_EQ(un_rule_hash(a), un_rule_hash(b)); /* renaming */
    EXPECT_EQ(un_rule_hash(a), un_rule_hash(c)); /* input dims do not enter */
    /* Reversed direction differs. */
    un_rule *rev = NULL;
    EXPECT_OK(ctx, un_rule_make(ctx, a->dst, a->src, a->dst_out, a->src_out, 1, &rev));
    if (rev)
        EXPECT_TRUE(un_rule_hash(rev) != un_rule_hash(a));
    un_rule_free(rev);
    /* Canonical forms of renamed rules are the same text, and parse back to it. */
    un_rule *ca = NULL, *cb = NULL, *back = NULL;
    EXPECT_OK(ctx, un_rule_canonical(ctx, a, &ca));
    EXPECT_OK(ctx, un_rule_canonical(ctx, b, &cb));
    if (ca && cb) {
        un_buf ja = {0}, jb = {0}, jc = {0};
        EXPECT_OK(ctx, un_rule_to_json(ctx, ca, &ja));
        EXPECT_OK(ctx, un_rule_to_json(ctx, cb, &jb));
        EXPECT_STR_EQ(ja.data, jb.data);
        EXPECT_TRUE(strstr(ja.data, "\"x0\"") != NULL);
        EXPECT_OK(ctx, un_rule_from_json(ctx, spec, "canon", ja.data, ja.len, &back));
        if (back) {
            EXPECT_OK(ctx, un_rule_to_json(ctx, back, &jc));
            EXPECT_STR_EQ(ja.data, jc.data);
            EXPECT_EQ(un_rule_hash(back), un_rule_hash(a));
        }
        un_buf_deinit(&ja);
        un_buf_deinit(&jb);
        un_buf_deinit(&jc);
    }
    un_rule_free(ca);
    un_rule_free(cb);
    un_rule_free(back);
done:
    un_rule_free(a);
    un_rule_free(b);
    un_rule_free(c);
    un_ctx_free(ctx);
}

/* un_rule_hash_both: the reverse's hash without building the reverse equals un_rule_hash of the
 * reverse un_rule_make builds, for one and two outputs (the output-pair order searched on the
 * swapped sides); a rule whose target has no operator has no reverse. */
static void test_hash_both(void) {
    const char *two =
        "{\"src\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": "
        "[4]}}, {\"name\": \"b\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"p\", \"op\": \"ew_add\", \"in\": [\"a\", \"b\"]},"
        " {\"name\": \"q\", \"op\": \"relu\", \"in\": [\"p\"]},"
        " {\"name\": \"m\", \"op\": \"ew_mul\", \"in\": [\"a\", \"b\"]}], \"outputs\": [\"q\", "
        "\"m\"]},"
        " \"dst\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": "
        "[4]}}, {\"name\": \"b\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"m\", \"op\": \"ew_mul\", \"in\": [\"b\", \"a\"]},"
        " {\"name\": \"p\", \"op\": \"ew_add\", \"in\": [\"b\", \"a\"]},"
        " {\"name\": \"q\", \"op\": \"relu\", \"in\": [\"p\"]}], \"outputs\": [\"q\", \"m\"]}}";
    const char *to_input =
        "{\"src\": {\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": "
        "[4, 4]}}, {\"name\": \"s\", \"op\": \"split\", \"in\": [\"x\"], \"params\": "
        "{\"axis\": 0, \"sizes\": [2, 2]}}, {\"name\": \"c\", \"op\": \"concat\", \"in\": "
        "[\"s:0\", "
        "\"s:1\"], \"params\": {\"axis\": 0}}], \"outputs\": [\"c\"]},"
        " \"dst\": {\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [4, "
        "4]}}], \"outputs\": [\"x\"]}}";
    un_ctx *ctx = un_ctx_new(NULL);
    un_status st;
    un_rule *rs[3] = {relu_combine("x", 8, true), rule_text(ctx, two, &st),
                      rule_text(ctx, to_input, &st)};
    EXPECT_OK(ctx, st);
    for (int i = 0; i < 3; i++) {
        un_rule *r = rs[i], *rev = NULL;
        if (!r) {
            EXPECT_TRUE(false);
            continue;
        }
        uint64_t fwd = 0, back = 0;
        bool has = un_rule_hash_both(r, &fwd, &back);
        EXPECT_TRUE(fwd == un_rule_hash(r));
        st = un_rule_make(ctx, r->dst, r->src, r->dst_out, r->src_out, r->n_out, &rev);
        EXPECT_EQ(has, st == UN_OK);
        EXPECT_EQ(has, i < 2);
        if (rev)
            EXPECT_TRUE(back == un_rule_hash(rev) && (i > 0 || back != fwd));
        un_ctx_clear(ctx);
        un_rule_free(rev);
        un_rule_free(r);
    }
    un_ctx_free(ctx);
}

/* A side with unnamed operators over input a, and b when use_b: ew_add(a, b) (swapped: (b, a))
 * or relu(a) when ops >= 1, under a relu when ops >= 2, else the input; *out is its output. */
static un_graph *unnamed_side(un_ctx *ctx, bool use_b, bool swap, int ops, un_ref *out) {
    un_graph *g = un_graph_new(spec);
    un_shape s = un_shape_make(1, (int64_t[]){4}, UN_DT_FLOAT);
    int32_t a, b = -1, v;
    EXPECT_OK(ctx, un_graph_add_input_shape(ctx, g, "a", UN_OP_INPUT, &s, &a));
    if (use_b)
        EXPECT_OK(ctx, un_graph_add_input_shape(ctx, g, "b", UN_OP_INPUT, &s, &b));
    *out = (un_ref){use_b ? b : a, 0};
    if (ops >= 1) {
        un_ref in[2] = {{swap ? b : a, 0}, {swap ? a : b, 0}};
        EXPECT_OK(ctx, use_b ? un_graph_add(ctx, g, UN_OP_EW_ADD, NULL, in, 2, NULL, &v)
                             : un_graph_add(ctx, g, UN_OP_RELU, NULL, in, 1, NULL, &v));
        *out = (un_ref){v, 0};
    }
    if (ops >= 2) {
        EXPECT_OK(ctx, un_graph_add(ctx, g, UN_OP_RELU, NULL, out, 1, NULL, &v));
        *out = (un_ref){v, 0};
    }
    return g;
}

/* un_rule_hash_sides on sides with unnamed operators: the hashes un_rule_hash_both gives on the
 * rule un_rule_make makes of them, no reverse when the target has no operator, and un_rule_make's
 * error when it would fail (an input on one side only; a source without an operator). */
static void test_hash_sides(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    /* {src: use_b, swap, ops}, {dst: ...}, whether un_rule_make succeeds */
    static const int cases[][7] = {
        {1, 0, 2, 1, 1, 2, 1}, /* relu(a + b) => relu(b + a) */
        {1, 0, 1, 1, 1, 1, 1}, /* a + b => b + a */
        {0, 0, 2, 0, 0, 1, 1}, /* relu(relu(a)) => relu(a) */
        {0, 0, 1, 0, 0, 0, 1}, /* relu(a) => a: no reverse */
        {1, 0, 1, 0, 0, 1, 0}, /* a + b => relu(a): b on one side only */
        {0, 0, 0, 0, 0, 1, 0}, /* a => relu(a): no operator in the source */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *c = cases[i];
        un_ref so, dout;
        un_graph *src = unnamed_side(ctx, c[0], c[1], c[2], &so),
                 *dst = unnamed_side(ctx, c[3], c[4], c[5], &dout);
        un_rule *r = NULL;
        un_status made = un_rule_make(ctx, src, dst, &so, &dout, 1, &r);
        un_ctx_clear(ctx);
        uint64_t fwd = 0, rev = 0, want_fwd = 0, want_rev = 0;
        bool has_rev = true;
        un_status st = un_rule_hash_sides(ctx, src, dst, &so, &dout, 1, &fwd, &rev, &has_rev);
        un_ctx_clear(ctx);
        EXPECT_EQ(st, made);
        EXPECT_EQ(made == UN_OK, c[6] == 1);
        if (r) {
            bool want_has = un_rule_hash_both(r, &want_fwd, &want_rev);
            EXPECT_TRUE(fwd == want_fwd);
            EXPECT_EQ(has_rev, want_has);
            EXPECT_EQ(has_rev, c[5] > 0);
            if (has_rev)
                EXPECT_TRUE(rev == want_rev);
        }
        un_rule_free(r);
        un_graph_free(src);
        un_graph_free(dst);
    }
    un_ctx_free(ctx);
}

/* Two outputs: the pair order must not change the hash. */
static void test_hash_output_order(void) {
    const char *fmt =
        "{\"src\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"b\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"p\", \"op\": \"ew_add\", \"in\": [\"a\", \"b\"]},"
        " {\"name\": \"q\", \"op\": \"ew_mul\", \"in\": [\"a\", \"b\"]}], \"outputs\": [%s]},"
        " \"dst\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"b\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"p\", \"op\": \"ew_add\", \"in\": [\"b\", \"a\"]},"
        " {\"name\": \"q\", \"op\": \"ew_mul\", \"in\": [\"b\", \"a\"]}], \"outputs\": [%s]}}";
    char t1[1500], t2[1500];
    snprintf(t1, sizeof t1, fmt, "\"p\", \"q\"", "\"p\", \"q\"");
    snprintf(t2, sizeof t2, fmt, "\"q\", \"p\"", "\"q\", \"p\"");
    un_ctx *ctx = un_ctx_new(NULL);
    un_status st;
    un_rule *a = rule_text(ctx, t1, &st), *b = rule_text(ctx, t2, &st);
    if (a && b) {
        EXPECT_EQ(un_rule_hash(a), un_rule_hash(b));
        EXPECT_OK(ctx, un_rule_check_random(ctx, a, UN_DOM_FIELD, 3, NULL));
    } else {
        EXPECT_TRUE(false);
    }
    un_rule_free(a);
    un_rule_free(b);
    un_ctx_free(ctx);
}

static void test_instantiate(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *r = relu_combine("x", 8, true), *r4 = NULL, *r3 = NULL, *rs = NULL;
    if (!r)
        goto done;
    EXPECT_EQ(r->n_vars, 1);
    EXPECT_EQ(r->vars[0].value, 2);
    EXPECT_OK(ctx, un_rule_instantiate(ctx, r, (int64_t[]){4}, NULL, &r4));
    if (r4) {
        EXPECT_EQ(un_graph_shape(r4->src, (un_ref){0, 0})->shard[0], 4);
        EXPECT_EQ(r4->vars[0].value, 4);
        EXPECT_OK(ctx, un_rule_check_random(ctx, r4, UN_DOM_FIELD, 5, NULL));
    }
    EXPECT_EQ(un_rule_instantiate(ctx, r, (int64_t[]){3}, NULL, &r3), UN_ERR_SHAPE);
    EXPECT_TRUE(r3 == NULL);
    un_ctx_clear(ctx);
    un_shape s = un_shape_make(3, (int64_t[]){6, 4, 2}, UN_DT_FLOAT);
    s.shard[0] = 3;
    EXPECT_OK(ctx, un_rule_instantiate(ctx, r, (int64_t[]){3}, &s, &rs));
    if (rs)
        EXPECT_OK(ctx, un_rule_check_random(ctx, rs, UN_DOM_F64, 5, NULL));
done:
    un_rule_free(r);
    un_rule_free(r4);
    un_rule_free(r3);
    un_rule_free(rs);
    un_ctx_free(ctx);
}

/* Inputs already parallel: a partial-sum input (sum degree 2) and one sharded on dim 1 with
 * copies. Linear ops commute with reduce; relu does not. */
static void test_parallel_inputs(void) {
    const char *fmt =
        "{\"src\": {\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [4, "
        "6], "
        "%s}}, {\"name\": \"p\", \"op\": \"%s\", \"in\": [\"x\"], \"params\": {\"degree\": 2%s}},"
        " {\"name\": \"f\", \"op\": \"%s\", \"in\": [\"p\"]}]},"
        " \"dst\": {\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [4, "
        "6], "
        "%s}}, {\"name\": \"f\", \"op\": \"%s\", \"in\": [\"x\"]},"
        " {\"name\": \"p\", \"op\": \"%s\", \"in\": [\"f\"], \"params\": {\"degree\": 2%s}}]}}";
    static const struct {
        const char *layout, *pop, *pextra, *op;
        un_status want;
    } cases[] = {
        {"\"sum\": 2", "reduce", "", "scalar_mul", UN_OK},
        {"\"sum\": 2", "reduce", "", "relu", UN_ERR_MISMATCH},
        {"\"shard\": [1, 2], \"copy\": 2", "combine", ", \"dim\": 1", "tanh", UN_OK},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2048];
        snprintf(text, sizeof text, fmt, cases[i].layout, cases[i].pop, cases[i].pextra,
                 cases[i].op, cases[i].layout, cases[i].op, cases[i].pop, cases[i].pextra);
        un_ctx *ctx = un_ctx_new(NULL);
        un_status st;
        un_rule *r = rule_text(ctx, text, &st);
        if (cases[i].want == UN_ERR_MISMATCH && !r) {
            /* relu refuses partial sums: ill formed is also a refusal */
            EXPECT_EQ(st, UN_ERR_SHAPE);
        } else {
            EXPECT_OK(ctx, st);
        }
        for (int d = 0; r && d < 2; d++) {
            un_ctx_clear(ctx);
            EXPECT_EQ(un_rule_check_random(ctx, r, d ? UN_DOM_F64 : UN_DOM_FIELD, 7, NULL),
                      cases[i].want);
        }
        un_rule_free(r);
        un_ctx_free(ctx);
    }
}

static void expect_bad(const char *text, const char *needle) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_status st;
    un_rule *r = rule_text(ctx, text, &st);
    EXPECT_TRUE(st != UN_OK);
    EXPECT_TRUE(r == NULL);
    const char *m = un_ctx_errmsg(ctx);
    test__check(m && strstr(m, needle) != NULL, __FILE__, __LINE__, "error '%s' lacks '%s'",
                m ? m : "(none)", needle);
    un_rule_free(r);
    un_ctx_free(ctx);
}

static void test_errors(void) {
    expect_bad(
        "{\"src\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"r\", \"op\": \"relu\", \"in\": [\"a\"]}]},"
        " \"dst\": {\"nodes\": [{\"name\": \"b\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"r\", \"op\": \"relu\", \"in\": [\"b\"]}]}}",
        "one side only");
    expect_bad(
        "{\"src\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"r\", \"op\": \"relu\", \"in\": [\"a\"]}]},"
        " \"dst\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"r\", \"op\": \"partition\", \"in\": [\"a\"], \"params\": {\"dim\": 0, "
        "\"degree\": 2}}]}}",
        "shape");
    expect_bad(
        "{\"src\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"r\", \"op\": \"relu\", \"in\": [\"a\"]},"
        " {\"name\": \"s\", \"op\": \"tanh\", \"in\": [\"a\"]}], \"outputs\": [\"r\"]},"
        " \"dst\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"r\", \"op\": \"relu\", \"in\": [\"a\"]}]}}",
        "reaches no mapped output");
    expect_bad("{\"src\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": "
               "{\"shape\": [4]}}]},"
               " \"dst\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": "
               "{\"shape\": [4]}}]}}",
               "no operator");
    expect_bad(
        "{\"src\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"r\", \"op\": \"relu\", \"in\": [\"a\"]}]},"
        " \"dst\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"r\", \"op\": \"relu\", \"in\": [\"a\"]}]},"
        " \"vars\": [{\"name\": \"k\", \"at\": [[\"src\", \"r\", \"degree\"]]}]}",
        "no parameter 'degree'");
    expect_bad("{\"src\": {\"nodes\": []}, \"dst\": 3}", "$.");
    expect_bad(
        "{\"src\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"r\", \"op\": \"relu\", \"in\": [\"a\"]}]},"
        " \"dst\": {\"nodes\": [{\"name\": \"a\", \"op\": \"input\", \"params\": {\"shape\": [4]}},"
        " {\"name\": \"r\", \"op\": \"relu\", \"in\": [\"a\"]}]}, \"extra\": 1}",
        "extra");
}

static void test_status_names(void) {
    for (int i = 0; i < UN_RULE_STATUS_COUNT; i++) {
        un_rule_status s;
        EXPECT_TRUE(un_rule_status_from_name(un_rule_status_name((un_rule_status)i), &s));
        EXPECT_EQ(s, i);
    }
    un_rule_status s;
    EXPECT_TRUE(!un_rule_status_from_name("proven", &s));
}

int main(void) {
    static const test_case cases[] = {
        {"sound_rule", test_sound_rule},
        {"wrong_rule_refuted", test_wrong_rule_refuted},
        {"hash_canonical", test_hash_canonical},
        {"hash_output_order", test_hash_output_order},
        {"hash_both", test_hash_both},
        {"hash_sides", test_hash_sides},
        {"instantiate", test_instantiate},
        {"parallel_inputs", test_parallel_inputs},
        {"errors", test_errors},
        {"status_names", test_status_names},
    };
    return TEST_RUN_WITH_SPEC(cases, &spec);
}
