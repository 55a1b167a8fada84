/* test_flexflow.c - rulesdb/flexflow.h: FlexFlow's published rule file (every rule parsed, each
 * imported or rejected with its reason), import -> export -> import identity, the reasons for
 * malformed rules, bad files, and import into a rule database (counts, re-import, all-or-nothing).
 */
#include "rulesdb/flexflow.h"
#include "tests/test.h"

#include <stdlib.h>
#include <unistd.h>

static un_spec *spec;
static const char *ff_file = "../shared/external/flexflow_graph_subst_3_v2.json";
static char dir[256];

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static const un_flexflow_rule *find(const un_flexflow_rule *rs, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(rs[i].name, name) == 0)
            return &rs[i];
    return NULL;
}

static void test_real_file(void) {
    if (access(ff_file, R_OK) != 0)
        TEST_SKIP("../shared/external/flexflow_graph_subst_3_v2.json not found");
    un_ctx *ctx = un_ctx_new(NULL);
    un_flexflow_rule *rs = NULL;
    int n = 0;
    EXPECT_OK(ctx, un_flexflow_load(ctx, spec, ff_file, &rs, &n));
    EXPECT_EQ(n, 640);
    int ok = 0, by[UN_FLEXFLOW_REJECT_COUNT] = {0}, checked = 0, passed = 0;
    for (int i = 0; i < n; i++) {
        if (rs[i].rule) {
            ok++;
            EXPECT_STR_EQ(rs[i].rule->name, rs[i].name);
            un_ctx *c2 = un_ctx_new(NULL);
            checked++;
            passed += un_rule_check_random(c2, rs[i].rule, UN_DOM_FIELD, 7, NULL) == UN_OK;
            un_ctx_free(c2);
        } else {
            EXPECT_TRUE(rs[i].reason[0] != '\0');
            by[rs[i].kind]++;
        }
    }
    printf("    %d parsed: %d imported, %d rejected (", n, ok, n - ok);
    const char *sep = "";
    for (int k = 0; k < UN_FLEXFLOW_REJECT_COUNT; k++)
        if (by[k]) {
            printf("%s%s %d", sep, un_flexflow_reject_name(k), by[k]);
            sep = ", ";
        }
    printf("); %d of %d imported rules agree on random inputs\n", passed, checked);
    EXPECT_TRUE(ok >= 150);
    EXPECT_EQ(passed, checked); /* every imported rule holds at its witness shapes */
    /* Known cases. */
    const un_flexflow_rule *r19 = find(rs, n, "taso_rule_19"), *r300 = find(rs, n, "taso_rule_300");
    EXPECT_TRUE(r19 && r19->rule);
    if (r19 && r19->rule) {
        un_buf b = {0};
        un_rule_str(r19->rule, &b);
        EXPECT_STR_EQ(b.data, "replicate[degree=k](partition[dim=0,degree=k](x1)) => "
                              "partition[dim=0,degree=k](replicate[degree=k](x1))\n");
        un_buf_deinit(&b);
        EXPECT_OK(ctx, un_rule_check_random(ctx, r19->rule, UN_DOM_F64, 1, NULL));
        EXPECT_EQ(r19->rule->n_vars, 1);
    }
    EXPECT_TRUE(r300 && !r300->rule && r300->kind == UN_FLEXFLOW_REJECT_REDUCE_COPIES);
    const un_flexflow_rule *r0 = find(rs, n, "taso_rule_0");
    EXPECT_TRUE(r0 && !r0->rule && r0->kind == UN_FLEXFLOW_REJECT_REPLICA_DIM);
    un_flexflow_rules_free(rs, n);
    un_ctx_free(ctx);
}

/* import -> export -> import is the identity on rule content (canonical hashes, in order). */
static void test_round_trip(void) {
    if (access(ff_file, R_OK) != 0)
        TEST_SKIP("../shared/external/flexflow_graph_subst_3_v2.json not found");
    un_ctx *ctx = un_ctx_new(NULL);
    un_flexflow_rule *rs = NULL, *rs2 = NULL;
    int n = 0, n2 = 0;
    EXPECT_OK(ctx, un_flexflow_load(ctx, spec, ff_file, &rs, &n));
    const un_rule **good = calloc((size_t)n + 1, sizeof *good);
    int ng = 0;
    for (int i = 0; i < n; i++)
        if (rs[i].rule)
            good[ng++] = rs[i].rule;
    un_buf out = {0}, rep = {0};
    int64_t skipped = -1;
    EXPECT_OK(ctx, un_flexflow_export(ctx, good, NULL, ng, &out, &skipped, &rep));
    EXPECT_EQ(skipped, 0);
    if (rep.data)
        printf("%s", rep.data);
    EXPECT_OK(ctx, un_flexflow_parse(ctx, spec, "exported", out.data, out.len, &rs2, &n2));
    EXPECT_EQ(n2, ng);
    int same = 0;
    for (int i = 0; i < n2 && i < ng; i++) {
        bool eq = rs2[i].rule && un_rule_hash(rs2[i].rule) == un_rule_hash(good[i]) &&
                  rs2[i].rule->n_vars == good[i]->n_vars;
        same += eq;
        if (!eq && same + 3 > i)
            printf("    %s: %s\n", rs2[i].name, rs2[i].rule ? "differs" : rs2[i].reason);
        EXPECT_STR_EQ(rs2[i].name, good[i]->name);
    }
    EXPECT_EQ(same, ng);
    un_flexflow_rules_free(rs2, n2);
    un_buf_deinit(&out);
    un_buf_deinit(&rep);
    free(good);
    un_flexflow_rules_free(rs, n);
    un_ctx_free(ctx);
}

/* One rule collection around one rule body. */
static void one_rule(const char *body, un_flexflow_reject want, const char *needle) {
    char text[4096];
    snprintf(text, sizeof text, "{\"_t\": \"RuleCollection\", \"rule\": [%s]}", body);
    un_ctx *ctx = un_ctx_new(NULL);
    un_flexflow_rule *rs = NULL;
    int n = 0;
    EXPECT_OK(ctx, un_flexflow_parse(ctx, spec, "t.json", text, strlen(text), &rs, &n));
    EXPECT_EQ(n, 1);
    if (n == 1) {
        EXPECT_TRUE(rs[0].rule == NULL);
        EXPECT_EQ(rs[0].kind, want);
        test__check(strstr(rs[0].reason, needle) != NULL, __FILE__, __LINE__,
                    "reason '%s' should contain '%s'", rs[0].reason, needle);
    }
    un_flexflow_rules_free(rs, n);
    un_ctx_free(ctx);
}

#define T(op, ts)  "{\"opId\": " #op ", \"tsId\": " #ts "}"
#define PARA(k, v) "{\"key\": \"" k "\", \"value\": " #v "}"
#define OPR(type, ins, paras)                                                                      \
    "{\"type\": \"" type "\", \"input\": [" ins "], \"para\": [" paras "]}"
#define MAP(s, d)                                                                                  \
    "\"mappedOutput\": [{\"srcOpId\": " #s ", \"srcTsId\": 0, \"dstOpId\": " #d ", \"dstTsId\": "  \
    "0}]"

static void test_malformed_rules(void) {
    one_rule("{\"name\": \"u\", \"srcOp\": [" OPR("OP_CONV2D", T(-1, 0), "") "], \"dstOp\": [" OPR(
                 "OP_RELU", T(-1, 0), "") "], " MAP(0, 0) "}",
             UN_FLEXFLOW_REJECT_UNKNOWN_OP, "unknown operator OP_CONV2D");
    one_rule("{\"name\": \"a\", \"srcOp\": [" OPR(
                 "OP_RELU", T(-1, 0) "," T(-2, 0),
                 "") "], "
                     "\"dstOp\": [" OPR("OP_EW_ADD", T(-1, 0) "," T(-2, 0), "") "], " MAP(0, 0) "}",
             UN_FLEXFLOW_REJECT_ARITY, "OP_RELU takes 1 input, not 2");
    one_rule(
        "{\"name\": \"p\", \"srcOp\": [" OPR(
            "OP_RELU", T(-1, 0), PARA("PM_AXIS", 1)) "], "
                                                     "\"dstOp\": [" OPR("OP_RELU", T(-1, 0),
                                                                        "") "], " MAP(0, 0) "}",
        UN_FLEXFLOW_REJECT_UNKNOWN_PARAM, "OP_RELU takes no parameter PM_AXIS");
    one_rule("{\"name\": \"q\", \"srcOp\": [" OPR(
                 "OP_PARTITION", T(-1, 0),
                 PARA("PM_PARALLEL_DIM", 0)) "], "
                                             "\"dstOp\": [" OPR("OP_RELU", T(-1, 0),
                                                                "") "], " MAP(0, 0) "}",
             UN_FLEXFLOW_REJECT_UNKNOWN_PARAM, "needs PM_PARALLEL_DEGREE");
    one_rule("{\"name\": \"o\", \"srcOp\": [" OPR("OP_EW_ADD", T(-1, 0) "," T(-2, 0),
                                                  "") "], "
                                                      "\"dstOp\": [" OPR("OP_RELU", T(-1, 0),
                                                                         "") "], " MAP(0, 0) "}",
             UN_FLEXFLOW_REJECT_ONE_SIDE, "input -2 is used by srcOp only");
    one_rule("{\"name\": \"r\", \"srcOp\": [" OPR("OP_RELU", T(3, 0),
                                                  "") "], "
                                                      "\"dstOp\": [" OPR("OP_RELU", T(-1, 0),
                                                                         "") "], " MAP(0, 0) "}",
             UN_FLEXFLOW_REJECT_BAD_REF, "does not come earlier");
    one_rule("{\"name\": \"m\", \"srcOp\": [" OPR("OP_RELU", T(-1, 0),
                                                  "") "], "
                                                      "\"dstOp\": [" OPR("OP_RELU", T(-1, 0),
                                                                         "") "], " MAP(0, 4) "}",
             UN_FLEXFLOW_REJECT_BAD_REF, "dst op 4");
    one_rule("{\"name\": \"x\", \"srcOp\": [" OPR(
                 "OP_PARTITION", T(-1, 0),
                 PARA("PM_PARALLEL_DIM", 2) "," PARA("PM_PARALLEL_DEGREE",
                                                     2)) "], "
                                                         "\"dstOp\": [" OPR("OP_RELU", T(-1, 0),
                                                                            "") "], " MAP(0, 0) "}",
             UN_FLEXFLOW_REJECT_REPLICA_DIM, "the replica dim");
    /* relu(combine(x)) => combine(x): outputs differ in value but not in form; but relu(reduce(x))
     * is ill-formed for every input layout (a nonlinear op never takes partial sums). */
    one_rule("{\"name\": \"i\", \"srcOp\": [" OPR(
                 "OP_REDUCE", T(-1, 0),
                 PARA("PM_PARALLEL_DIM", 2) "," PARA("PM_PARALLEL_DEGREE",
                                                     2)) "], "
                                                         "\"dstOp\": [" OPR("OP_RELU", T(-1, 0),
                                                                            "") "], " MAP(0, 0) "}",
             UN_FLEXFLOW_REJECT_ILL_FORMED, "no input layouts");
    one_rule("{\"srcOp\": 3}", UN_FLEXFLOW_REJECT_MALFORMED, "no \"srcOp\" ops");
    one_rule("{\"name\": \"s\", \"srcOp\": [" OPR(
                 "OP_CONCAT", T(-1, 0) "," T(-2, 0),
                 PARA("PM_AXIS", 0)) "], "
                                     "\"dstOp\": [" OPR("OP_CONCAT", T(-2, 0) "," T(-1, 0),
                                                        PARA("PM_AXIS", 1)) "], " MAP(0, 0) "}",
             UN_FLEXFLOW_REJECT_NO_SHAPES, "no positive dims");
}

static void test_bad_files(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_flexflow_rule *rs = NULL;
    int n = -1;
    const char *trunc = "{\"_t\": \"RuleCollection\", \"rule\": [{\"name\": \"a\", \"srcOp\": [";
    EXPECT_EQ(un_flexflow_parse(ctx, spec, "trunc.json", trunc, strlen(trunc), &rs, &n),
              UN_ERR_PARSE);
    EXPECT_TRUE(rs == NULL && n == 0);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "trunc.json") != NULL);
    un_ctx_clear(ctx);
    const char *norule = "{\"_t\": \"RuleCollection\", \"rules\": []}";
    EXPECT_EQ(un_flexflow_parse(ctx, spec, "x.json", norule, strlen(norule), &rs, &n),
              UN_ERR_PARSE);
    EXPECT_TRUE(strstr(un_ctx_errmsg(ctx), "no \"rule\" array") != NULL);
    un_ctx_clear(ctx);
    EXPECT_EQ(un_flexflow_load(ctx, spec, "/nonexistent/ff.json", &rs, &n), UN_ERR_IO);
    un_ctx_free(ctx);
}

/* Rules the format cannot express are refused with the reason, and skipped by a whole export. */
static void test_export_unavailable(void) {
    static const char *texts[2] = {
        "{\"src\": {\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": "
        "{\"shape\": [8, 4]}}, {\"name\": \"w\", \"op\": \"input\", \"params\": "
        "{\"shape\": [4, 4]}}, {\"name\": \"l\", \"op\": \"linear\", \"in\": [\"x\", "
        "\"w\"], \"params\": {\"activation\": \"gelu\"}}]}, \"dst\": {\"nodes\": "
        "[{\"name\": \"x\", \"op\": \"input\", \"params\": {\"shape\": [8, 4]}}, "
        "{\"name\": \"w\", \"op\": \"input\", \"params\": {\"shape\": [4, 4]}}, "
        "{\"name\": \"m\", \"op\": \"linear\", \"in\": [\"x\", \"w\"], \"params\": "
        "{\"activation\": \"gelu\"}}, {\"name\": \"r\", \"op\": \"identity\", \"in\": "
        "[\"m\"]}]}}",
        "{\"src\": {\"nodes\": [{\"name\": \"x\", \"op\": \"input\", \"params\": "
        "{\"shape\": [8, 4, 2]}}, {\"name\": \"r\", \"op\": \"relu\", \"in\": "
        "[\"x\"]}]}, \"dst\": {\"nodes\": [{\"name\": \"x\", \"op\": \"input\", "
        "\"params\": {\"shape\": [8, 4, 2]}}, {\"name\": \"r\", \"op\": \"relu\", "
        "\"in\": [\"x\"]}, {\"name\": \"s\", \"op\": \"relu\", \"in\": [\"r\"]}]}}",
    };
    static const char *want[2] = {"identity", "rank 3"};
    un_ctx *ctx = un_ctx_new(NULL);
    const un_rule *rules[2] = {NULL, NULL};
    un_rule *owned[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        EXPECT_OK(ctx, un_rule_from_json(ctx, spec, "t", texts[i], strlen(texts[i]), &owned[i]));
        rules[i] = owned[i];
        if (!owned[i])
            goto done;
        un_ctx *c2 = un_ctx_new(NULL);
        un_buf b = {0};
        EXPECT_EQ(un_flexflow_rule_to_json(c2, owned[i], "r", &b), UN_ERR_UNAVAILABLE);
        test__check(strstr(un_ctx_errmsg(c2), want[i]) != NULL, __FILE__, __LINE__,
                    "message '%s' should mention '%s'", un_ctx_errmsg(c2), want[i]);
        EXPECT_TRUE(b.len == 0);
        un_buf_deinit(&b);
        un_ctx_free(c2);
    }
    un_buf out = {0}, rep = {0};
    int64_t skipped = 0;
    EXPECT_OK(ctx, un_flexflow_export(ctx, rules, NULL, 2, &out, &skipped, &rep));
    EXPECT_EQ(skipped, 2);
    EXPECT_TRUE(rep.data && strstr(rep.data, "not exported") != NULL);
    un_flexflow_rule *rs = NULL;
    int n = -1;
    EXPECT_OK(ctx, un_flexflow_parse(ctx, spec, "empty", out.data, out.len, &rs, &n));
    EXPECT_EQ(n, 0);
    un_flexflow_rules_free(rs, n);
    un_buf_deinit(&out);
    un_buf_deinit(&rep);
done:
    un_rule_free(owned[0]);
    un_rule_free(owned[1]);
    un_ctx_free(ctx);
}

static void test_import_db(void) {
    if (access(ff_file, R_OK) != 0)
        TEST_SKIP("../shared/external/flexflow_graph_subst_3_v2.json not found");
    un_ctx *ctx = un_ctx_new(NULL);
    const char *path = tmp_path("ff.db");
    un_rulesdb *db = NULL;
    EXPECT_OK(ctx, un_rulesdb_open(ctx, path, spec, UN_RULESDB_CREATE, &db));
    if (!db)
        goto done;
    un_flexflow_import_stats s;
    un_buf rep = {0};
    EXPECT_OK(ctx, un_flexflow_import(ctx, db, ff_file, &s, &rep));
    EXPECT_EQ(s.parsed, 640);
    EXPECT_EQ(s.imported + s.duplicates + s.rejected, 640);
    int64_t sum = 0;
    for (int k = 0; k < UN_FLEXFLOW_REJECT_COUNT; k++)
        sum += s.by_reason[k];
    EXPECT_EQ(sum, s.rejected);
    EXPECT_TRUE(rep.data && strstr(rep.data, "taso_rule_300: rejected: ") != NULL);
    un_buf_deinit(&rep);
    int64_t counts[UN_RULE_STATUS_COUNT];
    EXPECT_OK(ctx, un_rulesdb_count(ctx, db, counts));
    EXPECT_EQ(counts[UN_RULE_CANDIDATE], s.imported);
    EXPECT_EQ(counts[UN_RULE_REJECTED], s.rejected);
    printf("    imported %lld, duplicates %lld, rejected %lld\n", (long long)s.imported,
           (long long)s.duplicates, (long long)s.rejected);
    /* Again: nothing new. */
    un_flexflow_import_stats s2;
    EXPECT_OK(ctx, un_flexflow_import(ctx, db, ff_file, &s2, NULL));
    EXPECT_EQ(s2.imported, 0);
    EXPECT_EQ(s2.duplicates, s.imported + s.duplicates);
    EXPECT_OK(ctx, un_rulesdb_count(ctx, db, counts));
    EXPECT_EQ(counts[UN_RULE_CANDIDATE] + counts[UN_RULE_REJECTED], s.imported + s.rejected);
    /* A bad file changes nothing. */
    EXPECT_EQ(un_flexflow_import(ctx, db, "/nonexistent.json", &s2, NULL), UN_ERR_IO);
    un_ctx_clear(ctx);
    un_rulesdb_free(db);
done:
    un_ctx_free(ctx);
}

int main(void) {
    if (!test_spec_load(&spec))
        return 1;
    if (!test_tmpdir_make(dir, sizeof dir, "/tmp/test_flexflow.XXXXXX"))
        return 1;
    static const test_case cases[] = {
        {"real_file", test_real_file},
        {"round_trip", test_round_trip},
        {"malformed_rules", test_malformed_rules},
        {"bad_files", test_bad_files},
        {"export_unavailable", test_export_unavailable},
        {"import_db", test_import_db},
    };
    int rc = TEST_RUN_ALL(cases);
    if (!test_tmpdir_remove(dir))
        rc = 1;
    un_spec_free(spec);
    return rc;
}
