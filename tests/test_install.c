/* test_install.c - an installed tree works from any directory (issue 10 item 4): scripts/install.sh
 * (what `make install` runs) into a staging DESTDIR; the installed programs find the installed
 * specs relative to themselves, $UNITY_SPECS and --spec (or its alias --ops) take precedence,
 * and unity-rules reads the spec set unity-gen stored in the database, so it needs no spec file. */
#include "tests/cli.h"
#include "tests/test.h"

#include <stdlib.h>
#include <unistd.h>

static char stage[300]; /* DESTDIR; the prefix is /usr */

/* Runs a shell command from / (no ./specs there) with UNITY_SPECS unset and output captured;
 * every %s in fmt is the temporary directory. */
static const cli_result *sh(const char *fmt) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd / && env -u UNITY_SPECS sh -c '%s'", cli_fmt(fmt));
    return cli_run_shell(cmd);
}

static void expect(const char *fmt, int code, const char *want_out, const char *want_err) {
    const cli_result *r = sh(fmt);
    bool ok = r->code == code && (!want_out || strstr(r->out, want_out)) &&
              (!want_err || strstr(r->err, want_err));
    EXPECT_TRUE(ok);
    if (!ok)
        printf("    %s -> exit %d (want %d), stdout: %.200s, stderr: %.300s\n", cli_fmt(fmt),
               r->code, code, r->out, r->err);
}

static void test_installed_tree(void) {
    char cmd[1024];
    snprintf(stage, sizeof stage, "%s/stage", cli_tmp);
    const char *b = getenv("UNITY_BUILD");
    snprintf(cmd, sizeof cmd, "bash scripts/install.sh %s /usr %s >/dev/null",
             b && *b ? b : "build/default", stage);
    EXPECT_EQ(system(cmd), 0);
    expect("ls %s/stage/usr/share/unity/specs/menus/ew_add.json "
           "%s/stage/usr/share/unity/specs/machines/cpu.json",
           0, NULL, NULL);
    /* the installed specs, found relative to the program */
    expect("%s/stage/usr/bin/unity-pcg ops", 0, "33 operators", NULL);
    expect("%s/stage/usr/bin/unity-gen -o %s/r.db --max-ops 2", 0, "187 new", NULL);
    expect("%s/stage/usr/bin/unity-rules list %s/r.db --limit 3", 0, "candidate", NULL);
    /* $UNITY_SPECS and --spec / --ops come first, and a missing one is named */
    expect("UNITY_SPECS=%s/nowhere %s/stage/usr/bin/unity-pcg ops", 1, NULL, "nowhere");
    expect("%s/stage/usr/bin/unity-pcg --spec %s/nowhere ops", 1, NULL, "nowhere");
    expect("%s/stage/usr/bin/unity-verify --ops %s/nowhere %s/r.db", 1, NULL, "nowhere");
    /* with the installed specs gone: unity-rules reads the stored spec set, others say why */
    expect("mv %s/stage/usr/share/unity/specs %s/stage/usr/share/unity/specs.off", 0, NULL, NULL);
    expect("%s/stage/usr/bin/unity-rules list %s/r.db --limit 3", 0, "candidate", NULL);
    expect("%s/stage/usr/bin/unity-rules stats %s/r.db", 0, "187", NULL);
    expect("%s/stage/usr/bin/unity-rules check %s/r.db --spec %s/stage/usr/share/unity/specs.off",
           0, "ok", NULL);
    expect("%s/stage/usr/bin/unity-pcg ops", 1, NULL, "operator specs not found");
    expect("%s/stage/usr/bin/unity-train --model mlp --tiny --steps 1", 1, NULL,
           "operator specs not found");
}

/* The stored spec text is checked: an edit shows in `unity-rules check` and stops `list`. */
static void test_stored_spec_damaged(void) {
    if (system("command -v sqlite3 >/dev/null 2>&1") != 0)
        TEST_SKIP("the sqlite3 program is not installed");
    expect("cp %s/r.db %s/bad.db && sqlite3 %s/bad.db "
           "\"UPDATE spec_texts SET text = replace(text, \\\"relu\\\", \\\"reLU\\\")\"",
           0, NULL, NULL);
    expect("%s/stage/usr/bin/unity-rules list %s/bad.db", 1, NULL, "does not match its checksum");
    expect("%s/stage/usr/bin/unity-rules check %s/bad.db --spec %s/stage/usr/share/unity/specs.off",
           1, "spec text", NULL);
}

/* scripts/demo.sh's closing text says whether FlexFlow's rule file was imported (issue 10 item
 * 8): run with stand-ins for the programs, once with the file and once without. */
static void test_demo_closing_text(void) {
    expect("mkdir -p %s/fake/bin && cd %s/fake/bin && for p in pcg gen verify rules; do "
           "printf \"#!/bin/sh\\nexit 0\\n\" > unity-$p; done && "
           "printf \"#!/bin/sh\\necho step 20/20 loss 1\\n\" > unity-train && chmod +x unity-*",
           0, NULL, NULL);
    char fmt[600], root[400];
    if (!getcwd(root, sizeof root)) /* the repository root (scripts/run_tests.sh) */
        snprintf(root, sizeof root, ".");
    snprintf(fmt, sizeof fmt, "cd %s && UNITY_FF=%%s/nowhere.json bash scripts/demo.sh %%s/fake",
             root);
    const cli_result *r = sh(fmt);
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "(skipped: ") && strstr(r->out, "not FlexFlow's rule file") &&
                !strstr(r->out, "rule file imported"));
    snprintf(fmt, sizeof fmt, "cd %s && UNITY_FF=specs/ops.json bash scripts/demo.sh %%s/fake",
             root);
    r = sh(fmt);
    EXPECT_EQ(r->code, 0);
    EXPECT_TRUE(strstr(r->out, "FlexFlow's published rule file imported") != NULL);
}

int main(void) {
    if (!cli_init("/tmp/unity-install-XXXXXX"))
        return 1;
    static const test_case cases[] = {{"installed_tree", test_installed_tree},
                                      {"stored_spec_damaged", test_stored_spec_damaged},
                                      {"demo_closing_text", test_demo_closing_text}};
    int rc = TEST_RUN_ALL(cases);
    if (!cli_cleanup())
        rc = 1;
    return rc;
}
