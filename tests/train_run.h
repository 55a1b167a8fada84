/* tests/train_run.h - one quiet training run of a tiny zoo model (or of a pcg JSON model with a
 * plan file, MSE loss) through un_train_run, for the tests that compare backends and planes:
 *   un_train_result r;
 *   char err[512];
 *   st = test_train_on("opaque", "mlp", "data", 2, 3, NULL, NULL, &r, err, sizeof err);
 *   ... r.losses[0..steps), r.dev[0..devices) ...
 *   un_train_result_deinit(&r);
 */
#ifndef UN_TEST_TRAIN_RUN_H
#define UN_TEST_TRAIN_RUN_H

#include "runtime/train.h"
#include "tests/test.h"

/* The options of a quiet run of `model` (a tiny zoo model, or a pcg JSON model with MSE loss)
 * under `strategy` on `devices` devices for `steps` steps on 2 threads. */
TEST__FN un_train_opts test_train_opts(const char *model, const char *strategy, int devices,
                                       int steps) {
    un_train_opts o = un_train_opts_default();
    o.model = model;
    o.tiny = strstr(model, ".json") == NULL;
    o.loss = o.tiny ? NULL : "mse";
    o.strategy = strategy;
    o.devices = devices;
    o.steps = steps;
    o.threads = 2;
    o.quiet = true;
    o.out = stdout;
    return o;
}

/* Trains `model` under `strategy` on `devices` devices of `backend` for `steps` steps on 2
 * threads, saving to / loading from the checkpoints save / load (NULL: none); the error message
 * (or "") into err. *r is always set (un_train_result_deinit it). */
TEST__FN un_status test_train_on(const char *backend, const char *model, const char *strategy,
                                 int devices, int steps, const char *save, const char *load,
                                 un_train_result *r, char *err, size_t cap) {
    un_train_opts o = test_train_opts(model, strategy, devices, steps);
    o.backend = backend;
    o.save = save;
    o.load = load;
    un_ctx *ctx = un_ctx_new(NULL);
    memset(r, 0, sizeof *r);
    un_status st = un_train_run(ctx, &o, r);
    snprintf(err, cap, "%s", un_ctx_errmsg(ctx));
    un_ctx_free(ctx);
    return st;
}

#endif
