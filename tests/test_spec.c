/* tests/test_spec.c - the operator specs: the loader and its errors, layout inference and its
 * errors, every sharding rule of every operator checked by piecewise execution against the
 * logical op (both number domains), and every axiom checked on random concrete inputs. */
#include "pcg/eval.h"
#include "tests/fuzz.h"
#include "tests/test.h"
#include "verify/axcheck.h"

#include <stdlib.h>

static const char *SPEC_PATH = "specs/ops.json";

static un_spec *load_spec(un_ctx *ctx) {
    un_spec *spec = NULL;
    un_status st = un_spec_load(ctx, SPEC_PATH, &spec);
    EXPECT_OK(ctx, st);
    return spec;
}

__attribute__((noinline)) static char *read_text(const char *path, size_t *len) {
    un_ctx *ctx = un_ctx_new(NULL);
    char *text = NULL;
    un_read_file(ctx, path, &text, len);
    un_ctx_free(ctx);
    return text;
}

/* text with [at, at + cut) replaced by insert; *len is updated. Owned: free(). */
static char *splice(const char *text, size_t *len, const char *at, size_t cut, const char *insert) {
    size_t pre = (size_t)(at - text), n = strlen(insert);
    char *m = un_xmalloc(*len - cut + n + 1);
    memcpy(m, text, pre);
    memcpy(m + pre, insert, n);
    memcpy(m + pre + n, at + cut, *len - pre - cut);
    *len = *len - cut + n;
    m[*len] = '\0';
    return m;
}

/* The spec with `insert` placed right after the first `anchor` that follows `start` (NULL: the
 * beginning); NULL (and a failed expectation) when the anchor is missing or the result does not
 * load. Owned: un_spec_free. */
static un_spec *load_planted(un_ctx *ctx, const char *start, const char *anchor,
                             const char *insert) {
    size_t len = 0;
    char *text = read_text(SPEC_PATH, &len);
    EXPECT_TRUE(text != NULL);
    if (!text)
        return NULL;
    const char *from = start ? strstr(text, start) : text;
    const char *at = from ? strstr(from, anchor) : NULL;
    size_t off = at ? (size_t)(at - text) + strlen(anchor) : 0;
    EXPECT_TRUE(at != NULL);
    un_spec *spec = NULL;
    if (off) {
        char *m = splice(text, &len, text + off, 0, insert);
        EXPECT_OK(ctx, un_spec_parse(ctx, "planted.json", m, len, &spec));
        free(m);
    }
    free(text);
    return spec;
}

/* ---- loading ---- */

static void test_load(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_spec *spec = load_spec(ctx);
    if (spec) {
        int rules = un_spec_total_rules(spec), axioms = un_spec_total_axioms(spec);
        printf("    %d operators, %d sharding rules (+1 implicit copy rule each), %d axioms\n",
               UN_OP_COUNT, rules, axioms);
        EXPECT_TRUE(rules >= 40);
        EXPECT_TRUE(axioms >= 20);
        for (int op = 0; op < UN_OP_COUNT; op++) {
            const un_op_spec *os = un_spec_op(spec, (un_op)op);
            EXPECT_STR_EQ(os->name, un_op_name((un_op)op));
            if (os->kind == UN_OPK_REGULAR) {
                EXPECT_TRUE(os->n_examples > 0);
                EXPECT_TRUE(os->flops != NULL || os->bytes != NULL);
            }
        }
    }
    un_spec_free(spec);
    un_ctx_free(ctx);
}

/* Replaces the first occurrence of `from` (which must exist) and parses; expects failure with a
 * message containing every `want` fragment. */
static void expect_spec_error(const char *text, size_t len, const char *from, const char *to,
                              const char *const *want) {
    const char *at = strstr(text, from);
    EXPECT_TRUE(at != NULL);
    if (!at) {
        printf("    pattern not found in %s: %s\n", SPEC_PATH, from);
        return;
    }
    size_t mlen = len;
    char *m = splice(text, &mlen, at, strlen(from), to);
    un_ctx *ctx = un_ctx_new(NULL);
    un_spec *spec = NULL;
    un_status st = un_spec_parse(ctx, "mutant.json", m, mlen, &spec);
    EXPECT_TRUE(st != UN_OK);
    EXPECT_TRUE(spec == NULL);
    const char *msg = un_ctx_errmsg(ctx);
    for (const char *const *w = want; *w; w++) {
        bool ok = strstr(msg, *w) != NULL;
        EXPECT_TRUE(ok);
        if (!ok)
            printf("    message lacks \"%s\": %s\n", *w, msg);
    }
    un_spec_free(spec);
    un_ctx_free(ctx);
    free(m);
}

static void test_load_errors(void) {
    size_t len = 0;
    char *text = read_text(SPEC_PATH, &len);
    EXPECT_TRUE(text != NULL);
    if (!text)
        return;
    /* bad JSON: truncated, with the offset */
    {
        un_ctx *ctx = un_ctx_new(NULL);
        un_spec *spec = NULL;
        EXPECT_EQ(un_spec_parse(ctx, "cut.json", text, len / 2, &spec), UN_ERR_PARSE);
        EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "cut.json: offset") != NULL);
        un_ctx_free(ctx);
    }
    expect_spec_error(
        text, len, "\"name\": \"relu\"", "\"name\": \"relux\"",
        (const char *[]){"mutant.json", "$.ops[", "].name", "unknown operator 'relux'", NULL});
    expect_spec_error(text, len, "\"name\": \"relu\"", "\"name\": \"gelu\"",
                      (const char *[]){"mutant.json", "].name", "duplicate operator 'gelu'", NULL});
    expect_spec_error(text, len, "\"name\": \"relu\"", "\"nmae\": \"relu\"",
                      (const char *[]){"mutant.json", "$.ops[", "name: missing", NULL});
    expect_spec_error(
        text, len, "\"rank\": 2", "\"rank\": \"2\"",
        (const char *[]){"mutant.json", ".inputs[", "].rank", "expected an integer", NULL});
    expect_spec_error(text, len, "\"outputs\"", "\"outputz\"",
                      (const char *[]){"mutant.json", "$.ops[", "unknown field", NULL});
    expect_spec_error(
        text, len, "\"shard(d)\"", "\"shard(d +)\"",
        (const char *[]){"mutant.json", ".sharding[", "bad dim expression", "column", NULL});
    expect_spec_error(text, len, "\"shard(d)\"", "\"shard(q)\"",
                      (const char *[]){"mutant.json", ".sharding[", "unknown name 'q'", NULL});
    expect_spec_error(
        text, len, "{\"name\": \"sum\", \"in\": [\"sum\", \"sum\"]",
        "{\"name\": \"dims\", \"in\": [\"sum\", \"sum\"]",
        (const char *[]){"mutant.json", ".sharding[", "duplicate rule name 'dims'", NULL});
    expect_spec_error(text, len, "\"use_bias\": {\"type\": \"bool\"",
                      "\"activation\": {\"type\": \"bool\"",
                      (const char *[]){"mutant.json", ".params.activation", "duplicate", NULL});
    expect_spec_error(
        text, len, "{\"name\": \"y\", \"min_rank\": 1}", "{\"name\": \"x\", \"min_rank\": 1}",
        (const char *[]){"mutant.json", ".inputs[1].name", "duplicate input name 'x'", NULL});
    expect_spec_error(text, len, "\"version\": 1", "\"version\": 7",
                      (const char *[]){"mutant.json", "$.version", "unsupported version 7", NULL});
    expect_spec_error(
        text, len, "\"lhs\": \"(", "\"lhs\": \"(ew_frob ",
        (const char *[]){"mutant.json", ".axioms[", "unknown operator 'ew_frob'", NULL});
    /* an empty document and a missing file */
    {
        un_ctx *ctx = un_ctx_new(NULL);
        un_spec *spec = NULL;
        EXPECT_TRUE(un_spec_load(ctx, "specs/does-not-exist.json", &spec) == UN_ERR_IO);
        EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "does-not-exist.json") != NULL);
        un_ctx_clear(ctx);
        EXPECT_TRUE(un_spec_parse(ctx, "empty.json", "{}", 2, &spec) != UN_OK);
        EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "empty.json: $.version") != NULL);
        un_ctx_free(ctx);
    }
    free(text);
}

/* ---- inference ---- */

static void test_infer_layout_errors(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_spec *spec = load_spec(ctx);
    if (!spec)
        goto done;
    un_param p[UN_MAX_PARAMS];
    un_infer inf;
    un_shape x = un_shape_make(2, (int64_t[]){8, 16}, UN_DT_FLOAT);
    /* relu of a partial sum is illegal: nonlinear */
    un_spec_param_defaults(un_spec_op(spec, UN_OP_RELU), p);
    x.sum = 2;
    EXPECT_EQ(un_spec_infer(ctx, spec, UN_OP_RELU, p, &x, 1, "node 7", &inf), UN_ERR_SHAPE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "node 7 (relu)") != NULL);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "input 0") != NULL);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "sum") != NULL);
    printf("    %s\n", un_ctx_errmsg(ctx));
    un_ctx_clear(ctx);
    /* without a context the same verdict, no message (the generator's fast path) */
    EXPECT_EQ(un_spec_infer(NULL, spec, UN_OP_RELU, p, &x, 1, NULL, &inf), UN_ERR_SHAPE);
    /* ew_add with one sharded and one whole input: the rule needs both */
    un_shape a = un_shape_make(2, (int64_t[]){8, 16}, UN_DT_FLOAT), b = a;
    a.shard[0] = 2;
    un_shape ab[2] = {a, b};
    un_spec_param_defaults(un_spec_op(spec, UN_OP_EW_ADD), p);
    EXPECT_EQ(un_spec_infer(ctx, spec, UN_OP_EW_ADD, p, ab, 2, NULL, &inf), UN_ERR_SHAPE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "input 1") != NULL);
    printf("    %s\n", un_ctx_errmsg(ctx));
    un_ctx_clear(ctx);
    /* a shard degree that does not divide the dim */
    un_shape c = un_shape_make(2, (int64_t[]){6, 16}, UN_DT_FLOAT);
    c.shard[0] = 4;
    un_spec_param_defaults(un_spec_op(spec, UN_OP_RELU), p);
    EXPECT_EQ(un_spec_infer(ctx, spec, UN_OP_RELU, p, &c, 1, NULL, &inf), UN_ERR_SHAPE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "not divisible") != NULL);
    un_ctx_clear(ctx);
    /* parallel ops */
    const un_op_spec *part = un_spec_op(spec, UN_OP_PARTITION);
    un_spec_param_defaults(part, p);
    p[un_spec_param_index(part, "dim")].v[0] = 1;
    p[un_spec_param_index(part, "degree")].v[0] = 2;
    EXPECT_OK(ctx, un_spec_infer(ctx, spec, UN_OP_PARTITION, p, &b, 1, NULL, &inf));
    EXPECT_EQ(inf.out[0].shard[1], 2);
    p[un_spec_param_index(part, "degree")].v[0] = 3;
    EXPECT_EQ(un_spec_infer(ctx, spec, UN_OP_PARTITION, p, &b, 1, "p", &inf), UN_ERR_SHAPE);
    un_ctx_clear(ctx);
    un_spec_param_defaults(un_spec_op(spec, UN_OP_REDUCE), p);
    EXPECT_EQ(un_spec_infer(ctx, spec, UN_OP_REDUCE, p, &b, 1, "r", &inf), UN_ERR_SHAPE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "sum degree 1") != NULL);
    un_ctx_clear(ctx);
    /* linear: batch sharding on x with copies of W gives a row-sharded output */
    const un_op_spec *lin = un_spec_op(spec, UN_OP_LINEAR);
    un_spec_param_defaults(lin, p);
    un_shape xw[2] = {un_shape_make(2, (int64_t[]){8, 16}, UN_DT_FLOAT),
                      un_shape_make(2, (int64_t[]){16, 4}, UN_DT_FLOAT)};
    xw[0].shard[0] = 2;
    xw[1].copy = 2;
    EXPECT_OK(ctx, un_spec_infer(ctx, spec, UN_OP_LINEAR, p, xw, 2, NULL, &inf));
    EXPECT_EQ(inf.out[0].dim[1], 4);
    EXPECT_EQ(inf.out[0].shard[0], 2);
    EXPECT_EQ(inf.out[0].copy, 1);
    /* tensor parallel: contraction dim sharded on both gives a partial sum */
    xw[0].shard[0] = 1;
    xw[0].shard[1] = 2;
    xw[1].copy = 1;
    xw[1].shard[0] = 2;
    EXPECT_OK(ctx, un_spec_infer(ctx, spec, UN_OP_LINEAR, p, xw, 2, NULL, &inf));
    EXPECT_EQ(inf.out[0].sum, 2);
    /* ... but not under relu */
    p[un_spec_param_index(lin, "activation")].v[0] = 1;
    EXPECT_EQ(un_spec_infer(ctx, spec, UN_OP_LINEAR, p, xw, 2, "fc1", &inf), UN_ERR_SHAPE);
    printf("    %s\n", un_ctx_errmsg(ctx));
    un_ctx_clear(ctx);
    /* sizes and degrees far out of range are errors, not overflows */
    const un_op_spec *inp = un_spec_op(spec, UN_OP_INPUT);
    un_spec_param_defaults(inp, p);
    p[un_spec_param_index(inp, "shape")] =
        (un_param){.len = 6, .v = {1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30}};
    EXPECT_EQ(un_spec_infer(ctx, spec, UN_OP_INPUT, p, NULL, 0, "huge", &inf), UN_ERR_SHAPE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "2^48") != NULL);
    un_ctx_clear(ctx);
    un_shape wide = un_shape_make(1, (int64_t[]){(int64_t)1 << 40}, UN_DT_FLOAT);
    wide.copy = 65536;
    un_spec_param_defaults(un_spec_op(spec, UN_OP_REPLICATE), p);
    EXPECT_EQ(un_spec_infer(ctx, spec, UN_OP_REPLICATE, p, &wide, 1, "rep", &inf), UN_ERR_SHAPE);
    un_ctx_clear(ctx);
    wide.copy = 1;
    un_spec_param_defaults(part, p);
    p[un_spec_param_index(part, "degree")].v[0] = 65536;
    wide.shard[0] = 4;
    EXPECT_EQ(un_spec_infer(ctx, spec, UN_OP_PARTITION, p, &wide, 1, "part", &inf), UN_ERR_SHAPE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "more than 65536") != NULL);
    un_ctx_clear(ctx);
    /* wrong arity and a failing requirement */
    un_spec_param_defaults(lin, p);
    EXPECT_EQ(un_spec_infer(ctx, spec, UN_OP_LINEAR, p, xw, 1, NULL, &inf), UN_ERR_SHAPE);
    un_ctx_clear(ctx);
    xw[1] = un_shape_make(2, (int64_t[]){15, 4}, UN_DT_FLOAT);
    xw[0] = un_shape_make(2, (int64_t[]){8, 16}, UN_DT_FLOAT);
    EXPECT_EQ(un_spec_infer(ctx, spec, UN_OP_LINEAR, p, xw, 2, NULL, &inf), UN_ERR_SHAPE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "requirement") != NULL);
    un_ctx_clear(ctx);
done:
    un_spec_free(spec);
    un_ctx_free(ctx);
}

/* ---- sharding rules: piecewise execution equals the logical op ---- */

typedef struct {
    int rule, fe;
} rinst;

static int rule_instances(const un_op_spec *os, const un_example *ex, rinst *out) {
    int n = 0;
    for (int r = -1; r < os->n_rules; r++) {
        int nfe = r >= 0 && os->rules[r].foreach >= 0 ? ex->in[0].rank : 1;
        for (int fe = 0; fe < nfe; fe++)
            out[n++] = (rinst){r, r >= 0 && os->rules[r].foreach >= 0 ? fe : -1};
    }
    return n;
}

/* Runs op on dense inputs in the given layouts and compares with the logical result. Returns
 * false (without failing) when the layouts are not accepted. */
static bool check_layouts(un_ctx *ctx, const un_spec *spec, const un_op_spec *os,
                          const un_example *ex, const un_shape *lay, un_dom dom, const char *what) {
    un_infer linf, pinf;
    un_status st = un_spec_infer(ctx, spec, os->op, ex->params, ex->in, ex->n_in, NULL, &linf);
    EXPECT_OK(ctx, st);
    if (st != UN_OK)
        return false;
    st = un_spec_infer(ctx, spec, os->op, ex->params, lay, ex->n_in, NULL, &pinf);
    if (st != UN_OK) {
        printf("    %s: %s: layouts rejected: %s\n", os->name, what, un_ctx_errmsg(ctx));
        EXPECT_OK(ctx, st);
        return false;
    }
    un_rng rng;
    un_rng_seed(&rng, 1234);
    un_ptensor lin[UN_MAX_INPUTS], pin[UN_MAX_INPUTS], lout[UN_MAX_OUTPUTS], pout[UN_MAX_OUTPUTS];
    for (int t = 0; t < ex->n_in; t++) {
        EXPECT_OK(ctx, un_ptensor_init(ctx, &lin[t], &ex->in[t]));
        EXPECT_OK(ctx, un_ptensor_init(ctx, &pin[t], &lay[t]));
        un_ptensor_random_dense(dom, ex->in[t].dtype, ex->range[t], un_shape_numel(&ex->in[t]),
                                &rng, lin[t].data);
        EXPECT_OK(ctx, un_ptensor_scatter(ctx, &pin[t], dom, lin[t].data, &rng));
    }
    st = un_eval_op(ctx, spec, os->op, ex->params, &linf, dom, lin, ex->n_in, lout);
    EXPECT_OK(ctx, st);
    un_status st2 = un_eval_op(ctx, spec, os->op, ex->params, &pinf, dom, pin, ex->n_in, pout);
    EXPECT_OK(ctx, st2);
    bool ok = st == UN_OK && st2 == UN_OK;
    for (int o = 0; ok && o < linf.n_out; o++) {
        int64_t n = un_shape_numel(&linf.out[o]), where = -1;
        un_val *g = un_xmalloc(sizeof(un_val) * (size_t)n);
        EXPECT_OK(ctx, un_ptensor_gather(ctx, &pout[o], dom, g));
        bool eq = un_dense_equal(dom, g, lout[o].data, n, 1e-9, &where);
        EXPECT_TRUE(eq);
        if (!eq)
            printf("    %s: %s (%s): output %d differs at %lld\n", os->name, what,
                   dom == UN_DOM_FIELD ? "field" : "f64", o, (long long)where);
        free(g);
    }
    for (int t = 0; t < ex->n_in; t++) {
        un_ptensor_deinit(&lin[t]);
        un_ptensor_deinit(&pin[t]);
    }
    if (st == UN_OK)
        for (int o = 0; o < linf.n_out; o++)
            un_ptensor_deinit(&lout[o]);
    if (st2 == UN_OK)
        for (int o = 0; o < pinf.n_out; o++)
            un_ptensor_deinit(&pout[o]);
    return ok;
}

static void test_sharding_rules(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_spec *spec = load_spec(ctx);
    if (!spec)
        goto done;
    int checked = 0, pairs = 0;
    for (int op = 0; op < UN_OP_COUNT; op++) {
        const un_op_spec *os = un_spec_op(spec, (un_op)op);
        if (os->kind != UN_OPK_REGULAR)
            continue;
        bool exercised[UN_MAX_RULES + 1] = {false};
        for (int e = 0; e < os->n_examples; e++) {
            const un_example *ex = &os->examples[e];
            rinst ri[UN_MAX_RULES * UN_MAX_DIMS + 1];
            int n = rule_instances(os, ex, ri);
            for (int i = 0; i < n; i++) {
                un_shape lay[UN_MAX_INPUTS];
                memcpy(lay, ex->in, sizeof lay);
                if (un_spec_rule_apply(ctx, spec, os->op, ex->params, ri[i].rule, ri[i].fe, 2, lay,
                                       ex->n_in) != UN_OK) {
                    un_ctx_clear(ctx);
                    continue;
                }
                char what[96];
                snprintf(what, sizeof what, "rule %s[%d] example %d",
                         ri[i].rule < 0 ? "copy" : os->rules[ri[i].rule].name, ri[i].fe, e);
                bool ok = true;
                for (int dom = 0; dom < UN_DOM_COUNT; dom++)
                    ok = check_layouts(ctx, spec, os, ex, lay, (un_dom)dom, what) && ok;
                if (ok)
                    exercised[ri[i].rule + 1] = true;
                checked++;
                /* and in combination with every later rule instance */
                for (int j = i + 1; j < n; j++) {
                    un_shape lay2[UN_MAX_INPUTS];
                    memcpy(lay2, lay, sizeof lay2);
                    if (un_spec_rule_apply(ctx, spec, os->op, ex->params, ri[j].rule, ri[j].fe, 2,
                                           lay2, ex->n_in) != UN_OK) {
                        un_ctx_clear(ctx);
                        continue;
                    }
                    /* two rules may also explain the layouts differently; all that matters is that
                     * the piecewise result is the logical one */
                    un_infer tmp;
                    if (un_spec_infer(ctx, spec, os->op, ex->params, lay2, ex->n_in, NULL, &tmp) !=
                        UN_OK) {
                        un_ctx_clear(ctx);
                        continue;
                    }
                    char what2[160];
                    snprintf(what2, sizeof what2, "%s + %s[%d]", what,
                             ri[j].rule < 0 ? "copy" : os->rules[ri[j].rule].name, ri[j].fe);
                    for (int dom = 0; dom < UN_DOM_COUNT; dom++)
                        check_layouts(ctx, spec, os, ex, lay2, (un_dom)dom, what2);
                    pairs++;
                }
            }
        }
        for (int r = -1; r < os->n_rules; r++) {
            EXPECT_TRUE(exercised[r + 1]);
            if (!exercised[r + 1])
                printf("    %s: rule %s is not exercised by any example\n", os->name,
                       r < 0 ? "copy" : os->rules[r].name);
        }
    }
    printf("    %d single-rule layouts and %d two-rule layouts checked, each in the field and in "
           "float64\n",
           checked, pairs);
done:
    un_spec_free(spec);
    un_ctx_free(ctx);
}

/* ---- axioms hold on random concrete inputs ----
 * The check is verify/axcheck.h's (the one unity-verify runs before any proof): both sides built
 * on random sizes, evaluated on random inputs in the field and in float64, and compared. */

static void test_axioms(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_spec *spec = load_spec(ctx);
    if (!spec)
        goto done;
    int total = 0, instances = 0;
    for (int op = 0; op < UN_OP_COUNT; op++) {
        const un_op_spec *os = un_spec_op(spec, (un_op)op);
        for (int a = 0; a < os->n_axioms; a++) {
            int good = 0;
            un_status st = un_axcheck_axiom(ctx, spec, &os->axioms[a], 77, 40, 6, &good);
            EXPECT_OK(ctx, st);
            un_ctx_clear(ctx);
            total++;
            instances += good;
        }
    }
    printf("    %d axioms checked on %d random instances, each in the field and in float64\n",
           total, instances);
done:
    un_spec_free(spec);
    un_ctx_free(ctx);
}

/* A deliberately wrong axiom is caught by the same check. */
static void test_wrong_axiom_caught(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_spec *spec = load_planted(
        ctx, NULL, "\"axioms\": [",
        "{\"name\": \"planted_wrong\", \"vars\": {\"x\": [\"a\", \"b\"], \"y\": [\"a\", \"b\"]}, "
        "\"lhs\": \"(ew_sub x y)\", \"rhs\": \"(ew_sub y x)\"}, ");
    if (spec) {
        const un_axiom *found = NULL;
        for (int op = 0; op < UN_OP_COUNT && !found; op++) {
            const un_op_spec *os = un_spec_op(spec, (un_op)op);
            for (int a = 0; a < os->n_axioms; a++)
                if (strcmp(os->axioms[a].name, "planted_wrong") == 0)
                    found = &os->axioms[a];
        }
        EXPECT_TRUE(found != NULL);
        if (found) {
            EXPECT_EQ(un_axcheck_axiom(ctx, spec, found, 5, 40, 6, NULL), UN_ERR_MISMATCH);
            const char *m = un_ctx_errmsg(ctx);
            EXPECT_TRUE(m && strstr(m, "planted_wrong") != NULL);
        }
    }
    un_spec_free(spec);
    un_ctx_free(ctx);
}

/* A deliberately unsound sharding rule (relu accepting partial sums) is caught by the same check.
 */
static void test_wrong_rule_caught(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_spec *spec =
        load_planted(ctx, "\"name\": \"relu\"", "\"sharding\": [",
                     "{\"name\": \"planted\", \"in\": [\"sum\"], \"out\": [\"sum\"]}, ");
    if (spec) {
        const un_op_spec *os = un_spec_op(spec, UN_OP_RELU);
        const un_example *ex = &os->examples[0];
        un_shape lay[UN_MAX_INPUTS];
        memcpy(lay, ex->in, sizeof lay);
        EXPECT_OK(ctx,
                  un_spec_rule_apply(ctx, spec, UN_OP_RELU, ex->params, 0, -1, 2, lay, ex->n_in));
        EXPECT_EQ(lay[0].sum, 2);
        for (int dom = 0; dom < UN_DOM_COUNT; dom++) {
            int before = test__failed;
            printf("    (the next mismatch is expected)\n");
            check_layouts(ctx, spec, os, ex, lay, (un_dom)dom, "planted");
            bool caught = test__failed > before;
            test__failed = before;
            EXPECT_TRUE(caught);
        }
    }
    un_spec_free(spec);
    un_ctx_free(ctx);
}

/* Random mutants of the real spec file (bytes flipped, deleted, duplicated; truncations): each
 * either loads or fails with a message; none may crash, hang or leak (the sanitizer build). */
static void test_fuzz_loader(void) {
    size_t len = 0;
    char *text = read_text(SPEC_PATH, &len);
    EXPECT_TRUE(text != NULL);
    if (!text)
        return;
    un_rng rng;
    un_rng_seed(&rng, 2024);
    int failed = 0, loaded = 0;
    for (int i = 0; i < 400; i++) {
        char *m = un_xmalloc(len * 2 + 1);
        memcpy(m, text, len);
        size_t n = fuzz_mutate(&rng, m, len, len * 2);
        un_ctx *ctx = un_ctx_new(NULL);
        un_spec *spec = NULL;
        un_status st = un_spec_parse(ctx, "fuzz.json", m, n, &spec);
        if (st == UN_OK) {
            loaded++;
            EXPECT_TRUE(spec != NULL);
            /* inference over the (possibly changed) examples must not crash either */
            for (int op = 0; op < UN_OP_COUNT; op++) {
                const un_op_spec *os = un_spec_op(spec, (un_op)op);
                for (int x = 0; x < os->n_examples; x++) {
                    un_infer inf;
                    un_spec_infer(ctx, spec, os->op, os->examples[x].params, os->examples[x].in,
                                  os->examples[x].n_in, NULL, &inf);
                    un_ctx_clear(ctx);
                }
            }
        } else {
            failed++;
            EXPECT_TRUE(spec == NULL);
            EXPECT_TRUE(strncmp(un_ctx_errmsg(ctx), "fuzz.json", 9) == 0);
        }
        un_spec_free(spec);
        un_ctx_free(ctx);
        free(m);
    }
    printf("    400 mutants: %d rejected with a message, %d still valid\n", failed, loaded);
    free(text);
}

int main(void) {
    static const test_case cases[] = {
        {"load", test_load},
        {"load_errors", test_load_errors},
        {"infer_layout_errors", test_infer_layout_errors},
        {"sharding_rules", test_sharding_rules},
        {"axioms", test_axioms},
        {"wrong_axiom_caught", test_wrong_axiom_caught},
        {"wrong_rule_caught", test_wrong_rule_caught},
        {"fuzz_loader", test_fuzz_loader},
    };
    return TEST_RUN_ALL(cases);
}
