/* test_soundness.c - the verifier must never prove a wrong rule. Known-true rules are mutated
 * (an operator swapped or dropped, a parameter, degree or dim changed, inputs or outputs permuted)
 * into many mutants; every mutant that random testing shows wrong is given to the Z3 proof alone
 * (no random test in front of it) and to the whole pipeline: neither may ever say verified.
 * A wrong axiom planted in a copy of specs/ops.json must be caught by the axiom check. */
#include "tests/test.h"
#include "verify/axcheck.h"
#include "verify/runner.h"

#include <stdlib.h>
#include <unistd.h>

static un_spec *spec;

#define IN(n, dims) "{\"name\": \"" n "\", \"op\": \"input\", \"params\": {\"shape\": " dims "}}"
#define INS(n, dims, sh)                                                                           \
    "{\"name\": \"" n "\", \"op\": \"input\", \"params\": {\"shape\": " dims ", \"shard\": " sh "}}"
#define NODE(n, op, in) "{\"name\": \"" n "\", \"op\": \"" op "\", \"in\": " in "}"
#define NODEP(n, op, in, p)                                                                        \
    "{\"name\": \"" n "\", \"op\": \"" op "\", \"in\": " in ", \"params\": " p "}"
#define RULE(src, dst) "{\"src\": {\"nodes\": [" src "]}, \"dst\": {\"nodes\": [" dst "]}}"

/* Rules the verifier proves (each checked below before it is mutated). */
static const char *base[] = {
    RULE(IN("a", "[4, 6]") ", " IN("b", "[4, 6]") ", " NODE("s", "ew_add", "[\"a\", \"b\"]"),
         IN("a", "[4, 6]") ", " IN("b", "[4, 6]") ", " NODE("s", "ew_add", "[\"b\", \"a\"]")),
    RULE(IN("a", "[4, 6]") ", " IN("b", "[4, 6]") ", " IN("c", "[4, 6]") ", " NODE(
             "s", "ew_mul", "[\"a\", \"b\"]") ", " NODE("t", "ew_mul", "[\"s\", \"c\"]"),
         IN("a", "[4, 6]") ", " IN("b", "[4, 6]") ", " IN("c", "[4, 6]") ", " NODE(
             "s", "ew_mul", "[\"b\", \"c\"]") ", " NODE("t", "ew_mul", "[\"a\", \"s\"]")),
    RULE(IN("x", "[4, 6]") ", " IN("y", "[6, 8]") ", " IN("z", "[8, 2]") ", " NODE(
             "p", "linear", "[\"x\", \"y\"]") ", " NODE("q", "linear", "[\"p\", \"z\"]"),
         IN("x", "[4, 6]") ", " IN("y", "[6, 8]") ", " IN("z", "[8, 2]") ", " NODE(
             "p", "linear", "[\"y\", \"z\"]") ", " NODE("q", "linear", "[\"x\", \"p\"]")),
    RULE(INS("x", "[8, 4]",
             "[2, 1]") ", " NODEP("c", "combine", "[\"x\"]",
                                  "{\"dim\": 0, \"degree\": 2}") ", " NODE("r", "relu", "[\"c\"]"),
         INS("x", "[8, 4]", "[2, 1]") ", " NODE("r", "relu", "[\"x\"]") ", " NODEP(
             "c", "combine", "[\"r\"]", "{\"dim\": 0, \"degree\": 2}")),
    RULE(INS("x", "[8, 6]", "[2, 1]") ", " IN("w", "[6, 4]") ", " NODEP(
             "r", "replicate", "[\"w\"]",
             "{\"degree\": 2}") ", " NODE("l", "linear",
                                          "[\"x\", \"r\"]") ", " NODEP("c", "combine", "[\"l\"]",
                                                                       "{\"dim\": 0, \"degree\": "
                                                                       "2}"),
         INS("x", "[8, 6]", "[2, 1]") ", " IN("w", "[6, 4]") ", " NODEP(
             "c", "combine", "[\"x\"]", "{\"dim\": 0, \"degree\": 2}") ", " NODE("l", "linear",
                                                                                 "[\"c\", \"w\"]")),
    RULE(
        IN("x", "[4, 6]") ", " IN("w", "[6, 8]") ", " NODEP("px", "partition", "[\"x\"]", "{\"dim\": 1, \"degree\": 2}") ", " NODEP(
            "pw", "partition", "[\"w\"]",
            "{\"dim\": 0, \"degree\": 2}") ", " NODE("l", "linear",
                                                     "[\"px\", \"pw\"]") ", " NODEP("r", "reduce",
                                                                                    "[\"l\"]",
                                                                                    "{\"degree\": "
                                                                                    "2}"),
        IN("x", "[4, 6]") ", " IN("w", "[6, 8]") ", " NODE("l", "linear", "[\"x\", \"w\"]")),
    RULE(IN("x", "[4, 6]") ", " IN("w", "[6, 2]") ", " IN("v", "[6, 4]") ", " NODEP(
             "c", "concat", "[\"w\", \"v\"]", "{\"axis\": 1}") ", " NODE("l", "linear",
                                                                         "[\"x\", \"c\"]"),
         IN("x", "[4, 6]") ", " IN("w", "[6, 2]") ", " IN("v", "[6, 4]") ", " NODE(
             "l", "linear",
             "[\"x\", \"w\"]") ", " NODE("m", "linear",
                                         "[\"x\", \"v\"]") ", " NODEP("c", "concat",
                                                                      "[\"l\", \"m\"]",
                                                                      "{\"axis\": 1}")),
    RULE(IN("a", "[4, 6]") ", " IN("b", "[4, 6]") ", " NODE(
             "s", "ew_add", "[\"a\", \"b\"]") ", " NODE("t", "transpose", "[\"s\"]"),
         IN("a", "[4, 6]") ", " IN("b", "[4, 6]") ", " NODE("p", "transpose", "[\"a\"]") ", " NODE(
             "q", "transpose", "[\"b\"]") ", " NODE("t", "ew_add", "[\"p\", \"q\"]")),
    RULE(IN("a", "[4, 6]") ", " IN("b", "[4, 6]") ", " NODE(
             "s", "ew_add", "[\"a\", \"b\"]") ", " NODEP("t", "scalar_mul", "[\"s\"]",
                                                         "{\"num\": 3}"),
         IN("a", "[4, 6]") ", " IN("b", "[4, 6]") ", " NODEP(
             "p", "scalar_mul", "[\"a\"]",
             "{\"num\": 3}") ", " NODEP("q", "scalar_mul", "[\"b\"]",
                                        "{\"num\": 3}") ", " NODE("t", "ew_add", "[\"p\", \"q\"]")),
    RULE(IN("x", "[4, 6]") ", " IN("y", "[2, 6]") ", " NODEP(
             "c", "concat", "[\"x\", \"y\"]", "{\"axis\": 0}") ", " NODE("r", "relu", "[\"c\"]"),
         IN("x", "[4, 6]") ", " IN("y", "[2, 6]") ", " NODE("p", "relu", "[\"x\"]") ", " NODE(
             "q", "relu", "[\"y\"]") ", " NODEP("r", "concat", "[\"p\", \"q\"]", "{\"axis\": 0}")),
    /* rank 3: proven by lifted axioms */
    RULE(IN("a", "[2, 4, 6]") ", " IN("b", "[2, 4, 6]") ", " IN("c", "[2, 4, 6]") ", " NODE(
             "s", "ew_add", "[\"a\", \"b\"]") ", " NODE("t", "ew_mul", "[\"s\", \"c\"]"),
         IN("a", "[2, 4, 6]") ", " IN("b", "[2, 4, 6]") ", " IN("c", "[2, 4, 6]") ", " NODE(
             "p", "ew_mul",
             "[\"a\", \"c\"]") ", " NODE("q", "ew_mul",
                                         "[\"b\", \"c\"]") ", " NODE("t", "ew_add",
                                                                     "[\"p\", \"q\"]")),
    RULE(IN("x", "[4, 6]") ", " IN("w", "[6, 8]") ", " NODE(
             "l", "linear", "[\"x\", \"w\"]") ", " NODE("r", "relu", "[\"l\"]"),
         IN("x", "[4, 6]") ", " IN("w", "[6, 8]") ", " NODEP("l", "linear", "[\"x\", \"w\"]",
                                                             "{\"activation\": \"relu\"}")),
    RULE(
        IN("a", "[4, 6]") ", " IN("b", "[4, 6]") ", " NODEP(
            "p", "partition", "[\"a\"]",
            "{\"dim\": 1, \"degree\": 2}") ", " NODEP("q", "partition", "[\"b\"]",
                                                      "{\"dim\": 1, \"degree\": 2}") ", " NODE("s",
                                                                                               "ew_"
                                                                                               "ad"
                                                                                               "d",
                                                                                               "[\""
                                                                                               "p\""
                                                                                               ", "
                                                                                               "\"q"
                                                                                               "\""
                                                                                               "]"),
        IN("a", "[4, 6]") ", " IN("b", "[4, 6]") ", " NODE(
            "s", "ew_add", "[\"a\", \"b\"]") ", " NODEP("p", "partition", "[\"s\"]",
                                                        "{\"dim\": 1, \"degree\": 2}")),
    "{\"src\": {\"nodes\": [" IN("x", "[4, 6]") ", " IN("y", "[4, 6]") ", " NODEP("c", "concat", "[\"x\", \"y\"]", "{\"axis\": 1}") ", " NODEP(
        "s", "split", "[\"c\"]",
        "{\"axis\": 1, \"sizes\": [6, 6]}") ", " NODE("r", "relu",
                                                      "[\"s:1\"]") "], \"outputs\": [\"s:0\", "
                                                                   "\"r\"]}, \"dst\": {\"nodes\": "
                                                                   "[" IN("x", "[4, 6]") ", " IN(
                                                                       "y",
                                                                       "[4, "
                                                                       "6]") ", " NODE("r", "relu",
                                                                                       "[\"y\""
                                                                                       "]") "]"
                                                                                            ","
                                                                                            " "
                                                                                            "\"outp"
                                                                                            "uts\":"
                                                                                            " ["
                                                                                            "\"x\","
                                                                                            " \"r\""
                                                                                            "]}}",
};
#define N_BASE ((int)(sizeof base / sizeof base[0]))

/* Operator swaps (same arity); "identity" drops a unary op. */
static const char *const swaps[][6] = {
    {"ew_add", "ew_sub", "ew_mul", NULL},
    {"ew_mul", "ew_add", "ew_sub", NULL},
    {"ew_sub", "ew_add", NULL},
    {"relu", "gelu", "tanh", "sigmoid", "identity", NULL},
    {"transpose", "identity", "relu", NULL},
    {"scalar_mul", "identity", "relu", NULL},
    {"linear", "batch_matmul", NULL},
    {"combine", "partition", NULL},
    {"partition", "combine", NULL},
    {"replicate", "reduce", NULL},
    {"reduce", "replicate", NULL},
    {"concat", "ew_add", NULL},
};

typedef struct mutants {
    char **text;
    int n, cap;
} mutants;

static void add(mutants *m, char *text) {
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        m->text = un_xrealloc(m->text, sizeof(char *) * (size_t)m->cap);
    }
    m->text[m->n++] = text;
}

/* text with [at, at+len) replaced by rep (owned). */
static char *splice(const char *text, size_t at, size_t len, const char *rep) {
    size_t n = strlen(text), r = strlen(rep);
    char *s = un_xmalloc(n - len + r + 1);
    memcpy(s, text, at);
    memcpy(s + at, rep, r);
    memcpy(s + at + r, text + at + len, n - at - len + 1);
    return s;
}

/* Every single-point mutant of text. */
static void mutate(const char *text, mutants *m) {
    /* operator swaps and drops */
    for (const char *p = text; (p = strstr(p, "\"op\": \"")) != NULL; p++) {
        const char *name = p + 7;
        size_t len = strcspn(name, "\"");
        for (size_t s = 0; s < sizeof swaps / sizeof swaps[0]; s++) {
            if (strlen(swaps[s][0]) != len || strncmp(name, swaps[s][0], len) != 0)
                continue;
            for (int k = 1; swaps[s][k]; k++)
                add(m, splice(text, (size_t)(name - text), len, swaps[s][k]));
        }
    }
    /* integer parameters: degree, dim, axis, num; shard lists */
    static const char *const keys[] = {"\"degree\": ", "\"dim\": ", "\"axis\": ", "\"num\": "};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        for (const char *p = text; (p = strstr(p, keys[k])) != NULL; p++) {
            const char *num = p + strlen(keys[k]);
            char *end;
            long v = strtol(num, &end, 10);
            for (long d = -1; d <= 2; d += 3) {
                char rep[24];
                snprintf(rep, sizeof rep, "%ld", v + d);
                add(m, splice(text, (size_t)(num - text), (size_t)(end - num), rep));
            }
        }
    for (const char *p = text; (p = strstr(p, "\"shard\": [2, 1]")) != NULL; p++)
        add(m, splice(text, (size_t)(p - text), 15, "\"shard\": [1, 2]"));
    for (const char *p = text; (p = strstr(p, "\"sizes\": [6, 6]")) != NULL; p++)
        add(m, splice(text, (size_t)(p - text), 16, "\"sizes\": [5, 7]"));
    static const char *const acts[] = {"none", "sigmoid", "tanh", "gelu"};
    for (const char *p = text; (p = strstr(p, "\"activation\": \"relu\"")) != NULL; p++)
        for (int k = 0; k < 4; k++) {
            char rep[40];
            snprintf(rep, sizeof rep, "\"activation\": \"%s\"", acts[k]);
            add(m, splice(text, (size_t)(p - text), 20, rep));
        }
    /* swapped outputs */
    for (const char *p = text; (p = strstr(p, "\"outputs\": [\"x\", \"r\"]")) != NULL; p++)
        add(m, splice(text, (size_t)(p - text), 22, "\"outputs\": [\"r\", \"x\"]"));
    /* permuted inputs */
    for (const char *p = text; (p = strstr(p, "\"in\": [\"")) != NULL; p++) {
        const char *a = p + 8, *ae = strchr(a, '"');
        if (!ae || strncmp(ae, "\", \"", 4) != 0)
            continue;
        const char *b = ae + 4, *be = strchr(b, '"');
        if (!be || be[1] != ']')
            continue;
        char rep[64];
        snprintf(rep, sizeof rep, "%.*s\", \"%.*s", (int)(be - b), b, (int)(ae - a), a);
        add(m, splice(text, (size_t)(a - text), (size_t)(be - a), rep));
    }
}

typedef struct tally {
    int mutants, parsed, wrong, z3_valid_wrong, pipeline_verified_wrong, still_true;
    int refuted, unknown_wrong;
    int true_proven; /* still-correct mutants the proof handles (completeness, for information) */
} tally;

static void check_mutant(un_verifier *v, const char *text, tally *t) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_rule *r = NULL;
    t->mutants++;
    if (un_rule_from_json(ctx, spec, "mutant", text, strlen(text), &r) != UN_OK)
        goto done;
    t->parsed++;
    un_ctx_clear(ctx);
    bool wrong = false;
    for (int d = 0; d < UN_DOM_COUNT && !wrong; d++) {
        un_status st = un_rule_check_random(ctx, r, (un_dom)d, 99, NULL);
        wrong = st == UN_ERR_MISMATCH;
        un_ctx_clear(ctx);
    }
    if (!wrong) {
        t->still_true++;
        un_proof p;
        un_prove_opts o = {.timeout_ms = 1000, .symbolic = false};
        EXPECT_OK(ctx, un_verifier_prove(ctx, v, r, &o, &p));
        t->true_proven += p.verdict == UN_VERDICT_VALID;
        goto done;
    }
    t->wrong++;
    for (int sym = 0; sym < 2; sym++) {
        un_proof p;
        un_prove_opts o = {.timeout_ms = 1000, .symbolic = sym};
        EXPECT_OK(ctx, un_verifier_prove(ctx, v, r, &o, &p));
        if (p.verdict == UN_VERDICT_VALID) {
            t->z3_valid_wrong++;
            printf("    Z3 PROVED A WRONG RULE (%s sizes) with [%s]: %s\n",
                   sym ? "symbolic" : "witness", p.axioms, text);
        }
    }
    un_runner_opts o = un_runner_opts_default();
    o.timeout_ms = 1000;
    un_verify_verdict rv;
    EXPECT_OK(ctx, un_runner_rule(ctx, v, r, &o, &rv));
    t->pipeline_verified_wrong += rv.status == UN_RULE_VERIFIED;
    t->refuted += rv.status == UN_RULE_REFUTED;
    t->unknown_wrong += rv.status == UN_RULE_UNKNOWN;
    un_verify_verdict_deinit(&rv);
done:
    un_rule_free(r);
    un_ctx_free(ctx);
}

static void test_mutants(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_verifier *v = NULL;
    int n_lifted = 0;
    /* as unity-verify runs: checked axioms and their checked lifted forms */
    EXPECT_OK(ctx, un_runner_verifier(ctx, spec, 1234, &v, &n_lifted));
    if (!v)
        goto done;
    mutants m = {0};
    int base_ok = 0;
    for (int i = 0; i < N_BASE; i++) {
        un_rule *r = NULL;
        EXPECT_OK(ctx, un_rule_from_json(ctx, spec, "base", base[i], strlen(base[i]), &r));
        if (r) {
            un_verify_verdict rv;
            EXPECT_OK(ctx, un_runner_rule(ctx, v, r, NULL, &rv));
            if (rv.status != UN_RULE_VERIFIED)
                printf("    base rule %d not verified: %s\n", i, rv.detail);
            base_ok += rv.status == UN_RULE_VERIFIED;
            un_verify_verdict_deinit(&rv);
        }
        un_rule_free(r);
        mutate(base[i], &m);
    }
    EXPECT_EQ(base_ok, N_BASE);
    /* Second-order mutants: a quarter of the mutants of each mutant. */
    int first = m.n;
    for (int i = 0; i < first; i++) {
        mutants m2 = {0};
        mutate(m.text[i], &m2);
        for (int j = 0; j < m2.n; j++)
            if (j % 4 == i % 4)
                add(&m, m2.text[j]);
            else
                free(m2.text[j]);
        free(m2.text);
    }
    tally t = {0};
    for (int i = 0; i < m.n; i++) {
        check_mutant(v, m.text[i], &t);
        free(m.text[i]);
    }
    free(m.text);
    printf(
        "    %d mutants of %d verified rules (verifier with %d lifted axioms): %d well formed, %d "
        "shown wrong by random tests, %d still correct\n",
        t.mutants, N_BASE, n_lifted, t.parsed, t.wrong, t.still_true);
    printf("    of the %d wrong ones: Z3 alone proved %d; the pipeline verified %d, refuted %d, "
           "unknown %d\n",
           t.wrong, t.z3_valid_wrong, t.pipeline_verified_wrong, t.refuted, t.unknown_wrong);
    printf("    of the %d still correct: Z3 proves %d at the witness sizes\n", t.still_true,
           t.true_proven);
    EXPECT_TRUE(t.wrong >= 200);
    EXPECT_EQ(t.z3_valid_wrong, 0);
    EXPECT_EQ(t.pipeline_verified_wrong, 0);
done:
    un_verifier_free(v);
    un_ctx_free(ctx);
}

/* A wrong axiom planted in a copy of the spec file is caught before any proof. */
static void test_planted_axiom(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    char *text = NULL;
    size_t len = 0;
    char path[64] = "/tmp/unity-soundness-XXXXXX";
    un_spec *bad = NULL;
    un_verifier *v = NULL;
    un_rule *r = NULL;
    EXPECT_OK(ctx, un_read_file(ctx, "specs/ops.json", &text, &len));
    const char *anchor = "\"axioms\": [";
    char *at = text ? strstr(text, anchor) : NULL;
    EXPECT_TRUE(at != NULL);
    if (!at)
        goto done;
    char *planted = splice(text, (size_t)(at - text) + strlen(anchor), 0,
                           "{\"name\": \"planted_sub_comm\", \"vars\": {\"x\": [\"a\", \"b\"], "
                           "\"y\": [\"a\", \"b\"]}, \"lhs\": \"(ew_sub x y)\", \"rhs\": "
                           "\"(ew_sub y x)\"}, ");
    int fd = mkstemp(path);
    EXPECT_TRUE(fd >= 0);
    if (fd >= 0) {
        size_t n = strlen(planted);
        EXPECT_EQ(write(fd, planted, n), (long long)n);
        close(fd);
    }
    free(planted);
    EXPECT_OK(ctx, un_spec_load(ctx, path, &bad));
    if (!bad)
        goto done;
    un_status st = un_axcheck_all(ctx, bad, 1234, NULL);
    EXPECT_EQ(st, UN_ERR_MISMATCH);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "planted_sub_comm") != NULL);
    printf("    caught: %s\n", un_ctx_errmsg(ctx));
    /* Why it matters: under the planted axiom, Z3 alone proves a wrong rule. */
    un_ctx_clear(ctx);
    const char *wrong =
        RULE(IN("a", "[4, 6]") ", " IN("b", "[4, 6]") ", " NODE("s", "ew_sub", "[\"a\", \"b\"]"),
             IN("a", "[4, 6]") ", " IN("b", "[4, 6]") ", " NODE("s", "ew_sub", "[\"b\", \"a\"]"));
    EXPECT_OK(ctx, un_verifier_new(ctx, bad, &v));
    EXPECT_OK(ctx, un_rule_from_json(ctx, bad, "wrong", wrong, strlen(wrong), &r));
    if (v && r) {
        un_proof p;
        EXPECT_OK(ctx, un_verifier_prove(ctx, v, r, &(un_prove_opts){.timeout_ms = 2000}, &p));
        EXPECT_EQ(p.verdict, UN_VERDICT_VALID);
        EXPECT_TRUE(strstr(p.axioms, "planted_sub_comm") != NULL);
    }
done:
    if (path[20] != 'X')
        unlink(path);
    un_rule_free(r);
    un_verifier_free(v);
    un_spec_free(bad);
    free(text);
    un_ctx_free(ctx);
}

/* An axiom that equates tensors of different shapes makes every proof over its terms vacuous
 * (false follows from the shape axioms); the consistency check must refuse such a proof. */
static void test_vacuous_proof(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    char *text = NULL;
    size_t len = 0;
    un_spec *bad = NULL;
    un_verifier *v = NULL;
    un_rule *r = NULL;
    EXPECT_OK(ctx, un_read_file(ctx, "specs/ops.json", &text, &len));
    const char *anchor = "\"axioms\": [";
    char *at = text ? strstr(text, anchor) : NULL;
    if (!at)
        goto done;
    char *planted = splice(text, (size_t)(at - text) + strlen(anchor), 0,
                           "{\"name\": \"planted_shape\", \"vars\": {\"x\": [\"a\", \"b\"]}, "
                           "\"lhs\": \"(relu x)\", \"rhs\": \"(concat :axis 0 x x)\"}, ");
    EXPECT_OK(ctx, un_spec_parse(ctx, "planted.json", planted, strlen(planted), &bad));
    free(planted);
    const char *wrong = RULE(IN("a", "[4, 6]") ", " NODE("s", "relu", "[\"a\"]"),
                             IN("a", "[4, 6]") ", " NODE("s", "gelu", "[\"a\"]"));
    if (bad) {
        EXPECT_OK(ctx, un_verifier_new(ctx, bad, &v));
        EXPECT_OK(ctx, un_rule_from_json(ctx, bad, "wrong", wrong, strlen(wrong), &r));
    }
    if (v && r) {
        un_proof p;
        EXPECT_OK(ctx, un_verifier_prove(ctx, v, r, &(un_prove_opts){.timeout_ms = 2000}, &p));
        EXPECT_TRUE(p.verdict != UN_VERDICT_VALID);
        EXPECT_TRUE(strstr(p.detail, "vacuous") != NULL);
        printf("    %s\n", p.detail);
    }
done:
    un_rule_free(r);
    un_verifier_free(v);
    un_spec_free(bad);
    free(text);
    un_ctx_free(ctx);
}

int main(void) {
    static const test_case cases[] = {{"mutants", test_mutants},
                                      {"planted_axiom", test_planted_axiom},
                                      {"vacuous_proof", test_vacuous_proof}};
    return TEST_RUN_WITH_SPEC(cases, &spec);
}
