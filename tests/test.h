/* tests/test.h - the in-house test header (STYLE rule 28), after libuv's task.h. EXPECT_* record a
 * failure and go on; test_run_all() runs a table of cases and prints `N passed, N failed` last.
 *   static void test_add(void) { EXPECT_EQ(1 + 1, 2); }
 *   int main(void) { static const test_case c[] = {{"add", test_add}}; return TEST_RUN_ALL(c); }
 */
#ifndef UN_TEST_H
#define UN_TEST_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pcg/spec.h"
#include "pcg/un.h"

#define TEST__FN __attribute__((unused)) static

/* Expectations that held and that failed so far, over the whole binary (atomic: some tests check
 * from several rank threads at once). */
TEST__FN _Atomic int test__passed, test__failed;
/* Why the running case skipped itself (TEST_SKIP), or NULL. */
TEST__FN const char *test__skip_why;

/* Each EXPECT_* evaluates its arguments once and, on failure, prints `file:line: what failed`. */
#define TEST__AT               __FILE__, __LINE__
#define EXPECT_TRUE(x)         test__check(!!(x), TEST__AT, "EXPECT_TRUE(%s) failed", #x)
#define EXPECT_EQ(a, b)        test__eq((long long)(a), (long long)(b), #a, #b, TEST__AT)
#define EXPECT_STR_EQ(a, b)    test__str_eq((a), (b), #a, #b, TEST__AT) /* NULL equals only NULL */
#define EXPECT_NEAR(a, b, tol) test__near((a), (b), (tol), #a ", " #b ", " #tol, TEST__AT)
#define EXPECT_OK(ctx, st)     test__ok((ctx), (st), #st, TEST__AT) /* st must be UN_OK */

/* Ends the running case (a void function) as skipped, saying why: for checks that need something
 * this checkout lacks. A skipped case counts neither as passed nor as failed; the summary line
 * becomes `N passed, N failed, N skipped`.   if (!have_it) TEST_SKIP("../shared missing"); */
#define TEST_SKIP(why)                                                                             \
    do {                                                                                           \
        test__skip_why = (why);                                                                    \
        return;                                                                                    \
    } while (0)

__attribute__((format(printf, 4, 5))) TEST__FN void test__check(int ok, const char *file, int line,
                                                                const char *fmt, ...) {
    va_list ap;
    if (ok) {
        test__passed++;
        return;
    }
    test__failed++;
    printf("%s:%d: ", file, line);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

TEST__FN void test__eq(long long a, long long b, const char *sa, const char *sb, const char *file,
                       int line) {
    test__check(a == b, file, line, "EXPECT_EQ(%s, %s) failed (%lld vs %lld)", sa, sb, a, b);
}

TEST__FN void test__str_eq(const char *a, const char *b, const char *sa, const char *sb,
                           const char *file, int line) {
    test__check(a == b || (a && b && strcmp(a, b) == 0), file, line,
                "EXPECT_STR_EQ(%s, %s) failed (\"%s\" vs \"%s\")", sa, sb, a ? a : "(null)",
                b ? b : "(null)");
}

/* NaN never passes. */
TEST__FN void test__near(double a, double b, double tol, const char *args, const char *file,
                         int line) {
    test__check(fabs(a - b) <= tol, file, line, "EXPECT_NEAR(%s) failed (%.17g vs %.17g)", args, a,
                b);
}

TEST__FN void test__ok(const un_ctx *ctx, un_status st, const char *sst, const char *file,
                       int line) {
    const char *msg = ctx ? un_ctx_errmsg(ctx) : NULL;
    test__check(st == UN_OK, file, line, "EXPECT_OK(%s) failed: %s: %s", sst, un_status_str(st),
                msg && *msg ? msg : "(no message)");
}

/* An allocator that fails from the fail_at-th call on (STYLE rule 18), for loops that try every
 * failure point:  test_failing f = {0, n};  un_ctx_params p = un_ctx_params_default();
 *                 p.alloc = test_failing_alloc(&f);  un_ctx *ctx = un_ctx_new(&p); */
typedef struct {
    int calls, fail_at;
} test_failing;

TEST__FN void *test__f_malloc(size_t n, void *user) {
    test_failing *f = user;
    return ++f->calls >= f->fail_at ? NULL : malloc(n);
}
TEST__FN void *test__f_realloc(void *p, size_t n, void *user) {
    test_failing *f = user;
    return ++f->calls >= f->fail_at ? NULL : realloc(p, n);
}
TEST__FN void test__f_free(void *p, void *user) {
    (void)user;
    free(p);
}
TEST__FN un_alloc test_failing_alloc(test_failing *f) {
    return (un_alloc){test__f_malloc, test__f_realloc, test__f_free, f};
}

typedef struct {
    const char *name; /* printed as `  ok name` or `  FAIL name` */
    void (*fn)(void); /* the case; it fails if any EXPECT_* in it failed */
} test_case;

/* Runs n cases in order and prints `N passed, N failed` last, with `, N skipped` added when a case
 * skipped itself (TEST_SKIP; a case that failed before skipping counts as failed). Returns 0 if
 * none failed, else 1. */
TEST__FN int test_run_all(const test_case *cases, size_t n) {
    int passed = 0, failed = 0, skipped = 0;
    setvbuf(stdout, NULL, _IOLBF, 0); /* keeps order with sanitizer reports on stderr */
    for (size_t i = 0; i < n; i++) {
        int before = test__failed;
        test__skip_why = NULL;
        cases[i].fn();
        if (test__failed != before) {
            failed++;
            printf("  FAIL %s\n", cases[i].name);
        } else if (test__skip_why) {
            skipped++;
            printf("  skip %s (%s)\n", cases[i].name, test__skip_why);
        } else {
            passed++;
            printf("  ok %s\n", cases[i].name);
        }
    }
    if (skipped)
        printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else
        printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#define TEST_RUN_ALL(cases) test_run_all((cases), sizeof(cases) / sizeof((cases)[0]))

/* Makes a temporary directory from tmpl (ending in XXXXXX) into dir[n]. On failure prints why, as
 * a failed run, and returns false. */
TEST__FN bool test_tmpdir_make(char *dir, size_t n, const char *tmpl) {
    snprintf(dir, n, "%s", tmpl);
    if (!mkdtemp(dir)) {
        printf("cannot make a temporary directory from %s\n0 passed, 1 failed\n", tmpl);
        return false;
    }
    return true;
}

/* Removes a temporary directory and what it holds; false if that failed. */
TEST__FN bool test_tmpdir_remove(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0;
}

/* Loads specs/ops.json (tests run from the repository root). On failure prints the reason and the
 * summary line of one failed case, and returns false. Free *spec with un_spec_free. */
TEST__FN bool test_spec_load(un_spec **spec) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_status st = un_spec_load(ctx, "specs/ops.json", spec);
    if (st != UN_OK)
        printf("cannot load specs/ops.json: %s: %s\n0 passed, 1 failed\n", un_status_str(st),
               un_ctx_errmsg(ctx));
    un_ctx_free(ctx);
    return st == UN_OK;
}

/* test_run_all with *spec loaded from specs/ops.json for the cases, freed after them. */
TEST__FN int test_run_with_spec(const test_case *cases, size_t n, un_spec **spec) {
    if (!test_spec_load(spec))
        return 1;
    int rc = test_run_all(cases, n);
    un_spec_free(*spec);
    *spec = NULL;
    return rc;
}

#define TEST_RUN_WITH_SPEC(cases, spec)                                                            \
    test_run_with_spec((cases), sizeof(cases) / sizeof((cases)[0]), (spec))

#endif /* UN_TEST_H */
