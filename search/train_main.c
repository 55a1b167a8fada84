/* train_main.c - `unity-train`: parses the flags and calls un_train_run (runtime/train.h). It lives in
 * search/ because the binary is the search plus the runtime; runtime/ never depends on search/. */
#include <stdio.h>
#include <string.h>

#include "runtime/train.h"

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(un_train_usage(), stdout);
            return 0;
        }
    un_ctx *ctx = un_ctx_new(NULL);
    un_train_opts o = un_train_opts_default();
    o.out = stdout;
    un_train_result r;
    memset(&r, 0, sizeof r);
    un_status st = un_train_parse_args(ctx, argc - 1, argv + 1, &o);
    if (st == UN_OK)
        st = un_train_run(ctx, &o, &r);
    if (st != UN_OK && r.rank == 0)
        fprintf(stderr, "unity-train: %s\n", un_ctx_errmsg(ctx));
    un_train_result_free(&r);
    un_ctx_free(ctx);
    return st == UN_OK ? 0 : 1;
}
