/* specpath.h - where every program finds the operator specs (specs/ops.json and the files beside
 * it: menus, machines), in this order:
 *   1. the --spec argument (a file, or a directory holding ops.json), when given;
 *   2. $UNITY_SPECS (the same), when set and not empty;
 *   3. ./specs/ops.json, when it exists (a source tree);
 *   4. <the program's directory>/../share/unity/specs/ops.json (an installed tree, `make install`).
 * A path given by 1 or 2 is used as it is even if missing, so the error names it.
 *
 *   char ops[4096];
 *   if (un_specpath_find(ctx, o.spec, ops, sizeof ops) != UN_OK) ... un_ctx_errmsg(ctx) ...
 *   st = un_spec_load(ctx, ops, &spec);
 */
#ifndef UN_SPECPATH_H
#define UN_SPECPATH_H

#include <stddef.h>

#include "pcg/un.h"

/* Writes the path of the spec file (ops.json) to out[n]. arg: the --spec value or NULL. Fails
 * (UN_ERR_IO) only if none of the places has one, naming them. */
un_status un_specpath_find(un_ctx *ctx, const char *arg, char *out, size_t n);

#endif
