/* spec_impl.h - internals shared by the spec loader (pcg/spec.c) and the axiom-term parser
 * (pcg/term.c). Not API. */
#ifndef UN_SPEC_IMPL_H
#define UN_SPEC_IMPL_H

#include "pcg/spec.h"

struct un_spec {
    un_arena *arena;
    uint64_t hash;
    bool present[UN_OP_COUNT];
    un_op_spec ops[UN_OP_COUNT];
};

/* Resolves an axiom's names in its expressions: parameter variables, then tensor variables. */
un_name_kind un__axiom_resolve(const void *user, const char *name, int32_t *ref);

/* Parses the term text at JSON cursor c for axiom ax (whose vars and parameter variables are
 * loaded) into sp's arena; *text is the term's text, copied into the arena. Errors name the JSON
 * path and the column. */
un_status un__term_parse(un_ctx *ctx, un_spec *sp, const un_jcur *c, un_axiom *ax,
                         const un_term **out, const char **text);

#endif
