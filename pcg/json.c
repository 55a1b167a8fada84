/* json.c - the cJSON facade: parsing with positions, cursors with paths, typed getters. */
#include "pcg/json.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct un_jdoc {
    char *name;
    cJSON *root;
};

static void un__pos(const char *text, size_t off, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* The length of the valid UTF-8 sequence at s[0..n) (no overlong forms, surrogates or code
 * points above U+10FFFF), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    size_t len = s[0] < 0x80                    ? 1
                 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2
                 : (s[0] & 0xf0) == 0xe0        ? 3
                 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
                                                : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) ||
        (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return len;
}

un_status un_jdoc_parse(un_ctx *ctx, const char *name, const char *text, size_t len,
                        un_jdoc **out) {
    *out = NULL;
    if (memchr(text, '\0', len)) {
        size_t off = (size_t)((const char *)memchr(text, '\0', len) - text);
        return un_ctx_error(ctx, UN_ERR_PARSE, "%s: offset %zu: NUL byte in JSON text", name, off);
    }
    /* Strings are C strings here: a \u0000 escape would cut one short, and every name must be
     * valid UTF-8 to be printed and stored. */
    for (size_t i = 0; i < len;) {
        int line, col;
        if (text[i] == '\\' && i + 6 <= len && memcmp(text + i + 1, "u0000", 5) == 0) {
            un__pos(text, i, &line, &col);
            return un_ctx_error(ctx, UN_ERR_PARSE,
                                "%s: offset %zu (line %d, column %d): \\u0000 (a NUL character) "
                                "in a string",
                                name, i, line, col);
        }
        if (text[i] == '\\') {
            i += i + 1 < len ? 2 : 1; /* the escaped character, which may be a backslash */
            continue;
        }
        if ((unsigned char)text[i] < 0x80) { /* ASCII, the usual case */
            i++;
            continue;
        }
        size_t n = utf8_seq((const unsigned char *)text + i, len - i);
        if (n == 0) {
            un__pos(text, i, &line, &col);
            return un_ctx_error(ctx, UN_ERR_PARSE,
                                "%s: offset %zu (line %d, column %d): invalid UTF-8 (byte 0x%02x)",
                                name, i, line, col, (unsigned char)text[i]);
        }
        i += n;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t off = end ? (size_t)(end - text) : 0;
        int line, col;
        un__pos(text, off, &line, &col);
        if (off >= len)
            return un_ctx_error(
                ctx, UN_ERR_PARSE,
                "%s: offset %zu (line %d, column %d): invalid JSON: unexpected end of input", name,
                off, line, col);
        char near[16];
        size_t nn = len - off < 12 ? len - off : 12; /* text is not NUL-terminated */
        memcpy(near, text + off, nn);
        near[nn] = '\0';
        for (size_t i = 0; i < nn; i++)
            if (near[i] == '\n' || near[i] == '\r' || near[i] == '\t')
                near[i] = ' ';
        return un_ctx_error(ctx, UN_ERR_PARSE,
                            "%s: offset %zu (line %d, column %d): invalid JSON near '%s'", name,
                            off, line, col, near);
    }
    /* only whitespace may follow the value */
    size_t off = (size_t)(end - text);
    while (off < len &&
           (text[off] == ' ' || text[off] == '\n' || text[off] == '\r' || text[off] == '\t'))
        off++;
    if (off < len) {
        int line, col;
        un__pos(text, off, &line, &col);
        cJSON_Delete(root);
        return un_ctx_error(
            ctx, UN_ERR_PARSE,
            "%s: offset %zu (line %d, column %d): trailing text after the JSON value", name, off,
            line, col);
    }
    un_jdoc *d = un_xcalloc(1, sizeof *d);
    d->name = un_xstrdup(name);
    d->root = root;
    *out = d;
    return UN_OK;
}

un_status un_jdoc_load(un_ctx *ctx, const char *path, un_jdoc **out) {
    *out = NULL;
    char *buf;
    size_t len;
    un_status st = un_read_file(ctx, path, &buf, &len);
    if (st != UN_OK)
        return st;
    st = un_jdoc_parse(ctx, path, buf, len, out);
    free(buf);
    return st;
}

void un_jdoc_free(un_jdoc *doc) {
    if (!doc)
        return;
    cJSON_Delete(doc->root);
    free(doc->name);
    free(doc);
}

const char *un_jdoc_name(const un_jdoc *doc) { return doc->name; }

un_jcur un_jdoc_root(const un_jdoc *doc) {
    un_jcur c = {.doc = doc, .node = doc->root, .parent = NULL, .key = NULL, .index = -1};
    return c;
}

un_jtype un_jcur_type(const un_jcur *c) {
    const cJSON *n = c->node;
    if (!n)
        return UN_JSON_MISSING;
    if (cJSON_IsNull(n))
        return UN_JSON_NULL;
    if (cJSON_IsBool(n))
        return UN_JSON_BOOL;
    if (cJSON_IsNumber(n))
        return UN_JSON_NUMBER;
    if (cJSON_IsString(n))
        return UN_JSON_STRING;
    if (cJSON_IsArray(n))
        return UN_JSON_ARRAY;
    if (cJSON_IsObject(n))
        return UN_JSON_OBJECT;
    return UN_JSON_MISSING;
}

const char *un_jtype_name(un_jtype t) {
    static const char *const names[UN_JSON_TYPE_COUNT] = {
        "nothing", "null", "a boolean", "a number", "a string", "an array", "an object"};
    return (unsigned)t < UN_JSON_TYPE_COUNT ? names[t] : "?";
}

bool un_jcur_present(const un_jcur *c) { return c->node != NULL; }

un_jcur un_jcur_member(const un_jcur *c, const char *key) {
    un_jcur r = {.doc = c->doc, .node = NULL, .parent = c, .key = key, .index = -1};
    const cJSON *n = c->node;
    if (n && cJSON_IsObject(n))
        r.node = cJSON_GetObjectItemCaseSensitive(n, key);
    return r;
}

int un_jcur_len(const un_jcur *c) {
    const cJSON *n = c->node;
    if (!n || !(cJSON_IsArray(n) || cJSON_IsObject(n)))
        return 0;
    return cJSON_GetArraySize(n);
}

un_jcur un_jcur_item(const un_jcur *c, int i) {
    un_jcur r = {.doc = c->doc, .node = NULL, .parent = c, .key = NULL, .index = i};
    const cJSON *n = c->node;
    if (!n)
        return r;
    const cJSON *it = cJSON_GetArrayItem(n, i);
    r.node = it;
    if (it && cJSON_IsObject(n)) {
        r.key = it->string;
        r.index = -1;
    }
    return r;
}

const char *un_jcur_str(const un_jcur *c) {
    const cJSON *n = c->node;
    return (n && cJSON_IsString(n)) ? n->valuestring : "";
}

double un_jcur_num(const un_jcur *c) {
    const cJSON *n = c->node;
    return (n && cJSON_IsNumber(n)) ? n->valuedouble : 0.0;
}

bool un_jcur_bool(const un_jcur *c) {
    const cJSON *n = c->node;
    return n && cJSON_IsTrue(n);
}

bool un_jcur_is_int(const un_jcur *c, int64_t *out) {
    const cJSON *n = c->node;
    if (!n || !cJSON_IsNumber(n))
        return false;
    double v = n->valuedouble;
    if (!(v >= -9007199254740992.0 && v <= 9007199254740992.0) || floor(v) != v)
        return false;
    if (out)
        *out = (int64_t)v;
    return true;
}

static void un__path_rec(const un_jcur *c, un_buf *b) {
    if (!c->parent) {
        un_buf_printf(b, "$");
        return;
    }
    un__path_rec(c->parent, b);
    if (c->key)
        un_buf_printf(b, ".%s", c->key);
    else
        un_buf_printf(b, "[%d]", c->index);
}

void un_jcur_path(const un_jcur *c, char *buf, size_t n) {
    un_buf b = {0};
    un__path_rec(c, &b);
    snprintf(buf, n, "%s", b.data ? b.data : "$");
    un_buf_deinit(&b);
}

un_status un_jcur_error(un_ctx *ctx, un_status st, const un_jcur *c, const char *fmt, ...) {
    char path[512], msg[768];
    un_jcur_path(c, path, sizeof path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return un_ctx_error(ctx, st, "%s: %s: %s", un_jdoc_name(c->doc), path, msg);
}

un_status un_jcur_need_type(un_ctx *ctx, const un_jcur *c, un_jtype t) {
    un_jtype have = un_jcur_type(c);
    if (have == t)
        return UN_OK;
    if (have == UN_JSON_MISSING)
        return un_jcur_error(ctx, UN_ERR_PARSE, c, "missing (expected %s)", un_jtype_name(t));
    return un_jcur_error(ctx, UN_ERR_PARSE, c, "expected %s, found %s", un_jtype_name(t),
                         un_jtype_name(have));
}

un_status un_jcur_get_str(un_ctx *ctx, const un_jcur *obj, const char *key, bool required,
                          const char **out) {
    un_jcur m = un_jcur_member(obj, key);
    if (!un_jcur_present(&m) && !required)
        return UN_OK;
    un_status st = un_jcur_need_type(ctx, &m, UN_JSON_STRING);
    if (st != UN_OK)
        return st;
    *out = un_jcur_str(&m);
    return UN_OK;
}

un_status un_jcur_get_int(un_ctx *ctx, const un_jcur *obj, const char *key, bool required,
                          int64_t *out) {
    un_jcur m = un_jcur_member(obj, key);
    if (!un_jcur_present(&m) && !required)
        return UN_OK;
    if (!un_jcur_present(&m))
        return un_jcur_error(ctx, UN_ERR_PARSE, &m, "missing (expected an integer)");
    if (!un_jcur_is_int(&m, out))
        return un_jcur_error(ctx, UN_ERR_PARSE, &m, "expected an integer, found %s",
                             un_jcur_type(&m) == UN_JSON_NUMBER ? "a fractional number"
                                                                : un_jtype_name(un_jcur_type(&m)));
    return UN_OK;
}

un_status un_jcur_get_bool(un_ctx *ctx, const un_jcur *obj, const char *key, bool required,
                           bool *out) {
    un_jcur m = un_jcur_member(obj, key);
    if (!un_jcur_present(&m) && !required)
        return UN_OK;
    un_status st = un_jcur_need_type(ctx, &m, UN_JSON_BOOL);
    if (st != UN_OK)
        return st;
    *out = un_jcur_bool(&m);
    return UN_OK;
}

un_status un_jcur_check_keys(un_ctx *ctx, const un_jcur *obj, const char *const *allowed) {
    un_status st = un_jcur_need_type(ctx, obj, UN_JSON_OBJECT);
    if (st != UN_OK)
        return st;
    int n = un_jcur_len(obj);
    for (int i = 0; i < n; i++) {
        un_jcur m = un_jcur_item(obj, i);
        bool ok = false;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(*a, m.key) == 0)
                ok = true;
        if (!ok) {
            un_buf b = {0};
            for (const char *const *a = allowed; *a; a++)
                un_buf_printf(&b, "%s%s", a == allowed ? "" : ", ", *a);
            st = un_jcur_error(ctx, UN_ERR_PARSE, &m, "unknown field (allowed: %s)",
                               b.data ? b.data : "none");
            un_buf_deinit(&b);
            return st;
        }
        for (int j = 0; j < i; j++) {
            un_jcur p = un_jcur_item(obj, j);
            if (strcmp(p.key, m.key) == 0)
                return un_jcur_error(ctx, UN_ERR_PARSE, &m, "duplicate field");
        }
    }
    return UN_OK;
}

void un_buf_json_str(un_buf *b, const char *s) {
    un_buf_printf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            un_buf_printf(b, "\\\"");
            break;
        case '\\':
            un_buf_printf(b, "\\\\");
            break;
        case '\n':
            un_buf_printf(b, "\\n");
            break;
        case '\t':
            un_buf_printf(b, "\\t");
            break;
        case '\r':
            un_buf_printf(b, "\\r");
            break;
        default:
            if (*p < 0x20)
                un_buf_printf(b, "\\u%04x", *p);
            else
                un_buf_printf(b, "%c", *p);
        }
    }
    un_buf_printf(b, "\"");
}
