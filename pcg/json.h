/* json.h - reading JSON documents with error messages that name the file, the JSON path and the
 * reason ("specs/ops.json: $.ops[3].params.stride: expected an integer"). This is the only place
 * cJSON is used; no cJSON type leaks out. Writing JSON is plain text through un_buf. (STYLE rule 2
 * names spec.c as cJSON's one user; graphs and rule files read JSON too, so the one user is this
 * facade instead, and every JSON error message has the same form.)
 *
 *   un_jdoc *doc; un_jcur root, ops;
 *   if (un_jdoc_load(ctx, path, &doc) != UN_OK) return;
 *   root = un_jdoc_root(doc);
 *   ops = un_jcur_member(&root, "ops");
 *   for (int i = 0; i < un_jcur_len(&ops); i++) { un_jcur op = un_jcur_item(&ops, i); ... }
 *   un_jdoc_free(doc);
 */
#ifndef UN_JSON_H
#define UN_JSON_H

#include "pcg/un.h"

typedef struct un_jdoc un_jdoc;

typedef enum {
    UN_JSON_MISSING, /* cursor points at nothing (absent member) */
    UN_JSON_NULL,
    UN_JSON_BOOL,
    UN_JSON_NUMBER,
    UN_JSON_STRING,
    UN_JSON_ARRAY,
    UN_JSON_OBJECT,
    UN_JSON_TYPE_COUNT
} un_jtype;

/* A position in a document; cursors live on the stack and chain to their parent for paths. */
typedef struct un_jcur {
    const un_jdoc *doc;
    const void *node;             /* opaque; NULL when missing */
    const struct un_jcur *parent; /* NULL at the root */
    const char *key;              /* member name in the parent object, or NULL */
    int index;                    /* index in the parent array, or -1 */
} un_jcur;

/* Parse text (name is used in messages). Errors give the byte offset, line and column. */
un_status un_jdoc_parse(un_ctx *ctx, const char *name, const char *text, size_t len, un_jdoc **out);
/* Read and parse a file. Owned: free with un_jdoc_free. */
un_status un_jdoc_load(un_ctx *ctx, const char *path, un_jdoc **out);
void un_jdoc_free(un_jdoc *doc);
const char *un_jdoc_name(const un_jdoc *doc);
un_jcur un_jdoc_root(const un_jdoc *doc);

un_jtype un_jcur_type(const un_jcur *c);
const char *un_jtype_name(un_jtype t);
bool un_jcur_present(const un_jcur *c);
/* Member of an object (type MISSING if absent or c is not an object). */
un_jcur un_jcur_member(const un_jcur *c, const char *key);
/* Number of items of an array or members of an object; 0 otherwise. */
int un_jcur_len(const un_jcur *c);
/* Item i of an array or member i of an object (then .key is its name). */
un_jcur un_jcur_item(const un_jcur *c, int i);
/* Scalar values; defined only for the matching type. Borrowed strings live as long as the doc. */
const char *un_jcur_str(const un_jcur *c);
double un_jcur_num(const un_jcur *c);
bool un_jcur_bool(const un_jcur *c);
/* True when the value is a number with an exact int64 value. */
bool un_jcur_is_int(const un_jcur *c, int64_t *out);

/* Writes "$.a.b[2]" into buf. */
void un_jcur_path(const un_jcur *c, char *buf, size_t n);
/* Records "<file>: <path>: <message>" in ctx with status st and returns st. */
un_status un_jcur_error(un_ctx *ctx, un_status st, const un_jcur *c, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Typed member getters. A missing required member, or one of the wrong type, is an error naming
 * its path. For optional members *out keeps its prior value (the default) when absent. */
un_status un_jcur_need_type(un_ctx *ctx, const un_jcur *c, un_jtype t);
un_status un_jcur_get_str(un_ctx *ctx, const un_jcur *obj, const char *key, bool required,
                          const char **out);
un_status un_jcur_get_int(un_ctx *ctx, const un_jcur *obj, const char *key, bool required,
                          int64_t *out);
un_status un_jcur_get_bool(un_ctx *ctx, const un_jcur *obj, const char *key, bool required,
                           bool *out);
/* Every member of obj must be one of the NULL-terminated allowed names, and appear once. */
un_status un_jcur_check_keys(un_ctx *ctx, const un_jcur *obj, const char *const *allowed);

/* Appends s as a JSON string literal (quoted, escaped). */
void un_buf_json_str(un_buf *b, const char *s);

#endif
