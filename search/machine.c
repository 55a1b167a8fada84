/* machine.c - loading machine descriptions (through pcg/json.h) and the link between two devices.
 */
#include "search/machine.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pcg/json.h"

static const char *const prec_names[UN_MPREC_COUNT] = {"f32", "f16", "f64"};
static const char *const algo_names[UN_COLL_COUNT] = {"ring", "tree"};

const char *un_coll_algo_name(un_coll_algo a) {
    return a >= 0 && a < UN_COLL_COUNT ? algo_names[a] : "?";
}

/* A required or optional positive (or >= 0 when zero_ok) finite number. */
static un_status get_num(un_ctx *ctx, const un_jcur *obj, const char *key, bool required,
                         bool zero_ok, double *out) {
    un_jcur c = un_jcur_member(obj, key);
    if (!un_jcur_present(&c)) {
        if (required)
            return un_jcur_error(ctx, UN_ERR_PARSE, obj, "missing member '%s'", key);
        return UN_OK;
    }
    if (un_jcur_type(&c) != UN_JSON_NUMBER)
        return un_jcur_error(ctx, UN_ERR_PARSE, &c, "expected a number, not %s",
                             un_jtype_name(un_jcur_type(&c)));
    double v = un_jcur_num(&c);
    if (!isfinite(v) || v < 0 || (!zero_ok && v == 0))
        return un_jcur_error(ctx, UN_ERR_PARSE, &c, "must be %s (got %g)",
                             zero_ok ? "at least 0" : "greater than 0", v);
    *out = v;
    return UN_OK;
}

static un_status get_count(un_ctx *ctx, const un_jcur *obj, const char *key, int *out) {
    int64_t v = 0;
    un_status st = un_jcur_get_int(ctx, obj, key, true, &v);
    if (st != UN_OK)
        return st;
    if (v < 1 || v > 65536) {
        un_jcur c = un_jcur_member(obj, key);
        return un_jcur_error(ctx, UN_ERR_PARSE, &c, "must be in 1..65536 (got %lld)", (long long)v);
    }
    *out = (int)v;
    return UN_OK;
}

static un_status parse_link(un_ctx *ctx, const un_jcur *c, un_link *l) {
    static const char *const keys[] = {"bw", "latency", "collective", NULL};
    un_status st;
    if ((st = un_jcur_need_type(ctx, c, UN_JSON_OBJECT)) != UN_OK ||
        (st = un_jcur_check_keys(ctx, c, keys)) != UN_OK ||
        (st = get_num(ctx, c, "bw", true, false, &l->bw)) != UN_OK ||
        (st = get_num(ctx, c, "latency", true, true, &l->latency)) != UN_OK)
        return st;
    const char *algo = "ring";
    if ((st = un_jcur_get_str(ctx, c, "collective", false, &algo)) != UN_OK)
        return st;
    for (int a = 0; a < UN_COLL_COUNT; a++)
        if (strcmp(algo, algo_names[a]) == 0) {
            l->algo = (un_coll_algo)a;
            return UN_OK;
        }
    un_jcur ac = un_jcur_member(c, "collective");
    return un_jcur_error(ctx, UN_ERR_PARSE, &ac, "unknown collective '%s' (ring or tree)", algo);
}

static un_status parse_gpu(un_ctx *ctx, const un_jcur *c, un_gpu_kernels *g) {
    static const char *const keys[] = {"launch",    "gemm_launch",  "sms",
                                       "gemm_tile", "gemm_latency", "mem_latency",
                                       "reserve",   "optimizer_bw", NULL};
    un_status st;
    if ((st = un_jcur_need_type(ctx, c, UN_JSON_OBJECT)) != UN_OK ||
        (st = un_jcur_check_keys(ctx, c, keys)) != UN_OK ||
        (st = get_num(ctx, c, "launch", true, true, &g->launch)) != UN_OK ||
        (st = get_num(ctx, c, "gemm_launch", true, true, &g->gemm_launch)) != UN_OK ||
        (st = get_num(ctx, c, "sms", true, false, &g->sms)) != UN_OK ||
        (st = get_num(ctx, c, "gemm_tile", true, false, &g->gemm_tile)) != UN_OK ||
        (st = get_num(ctx, c, "gemm_latency", true, true, &g->gemm_latency)) != UN_OK ||
        (st = get_num(ctx, c, "mem_latency", true, false, &g->mem_latency)) != UN_OK ||
        (st = get_num(ctx, c, "reserve", false, true, &g->reserve)) != UN_OK ||
        (st = get_num(ctx, c, "optimizer_bw", false, false, &g->optimizer_bw)) != UN_OK)
        return st;
    static const char *const whole[] = {"sms", "gemm_tile"};
    for (int i = 0; i < 2; i++) {
        double v = i ? g->gemm_tile : g->sms;
        if (v != floor(v) || v > 65536) {
            un_jcur wc = un_jcur_member(c, whole[i]);
            return un_jcur_error(ctx, UN_ERR_PARSE, &wc,
                                 "must be a whole number in 1..65536 (got %g)", v);
        }
    }
    g->on = true;
    return UN_OK;
}

static un_status parse_device(un_ctx *ctx, const un_jcur *c, un_device_kind *d) {
    static const char *const keys[] = {"kind",        "flops", "mem_bw", "memory",
                                       "op_overhead", "gpu",   NULL};
    un_status st;
    const char *kind = NULL;
    if ((st = un_jcur_need_type(ctx, c, UN_JSON_OBJECT)) != UN_OK ||
        (st = un_jcur_check_keys(ctx, c, keys)) != UN_OK ||
        (st = un_jcur_get_str(ctx, c, "kind", true, &kind)) != UN_OK)
        return st;
    size_t n = strlen(kind);
    if (n == 0 || n >= sizeof d->kind ||
        strspn(kind, "abcdefghijklmnopqrstuvwxyz0123456789_-") != n) {
        un_jcur kc = un_jcur_member(c, "kind");
        return un_jcur_error(ctx, UN_ERR_PARSE, &kc,
                             "'%s' is not a device kind (1-31 of a-z 0-9 _ -)", kind);
    }
    memcpy(d->kind, kind, n + 1);
    un_jcur fl = un_jcur_member(c, "flops");
    if (!un_jcur_present(&fl))
        return un_jcur_error(ctx, UN_ERR_PARSE, c, "missing member 'flops'");
    if ((st = un_jcur_need_type(ctx, &fl, UN_JSON_OBJECT)) != UN_OK)
        return st;
    static const char *const pkeys[] = {"f32", "f16", "f64", NULL};
    if ((st = un_jcur_check_keys(ctx, &fl, pkeys)) != UN_OK ||
        (st = get_num(ctx, &fl, "f32", true, false, &d->flops[UN_MPREC_F32])) != UN_OK ||
        (st = get_num(ctx, &fl, "f16", false, false, &d->flops[UN_MPREC_F16])) != UN_OK ||
        (st = get_num(ctx, &fl, "f64", false, false, &d->flops[UN_MPREC_F64])) != UN_OK)
        return st;
    if ((st = get_num(ctx, c, "mem_bw", true, false, &d->mem_bw)) != UN_OK ||
        (st = get_num(ctx, c, "memory", true, false, &d->memory)) != UN_OK ||
        (st = get_num(ctx, c, "op_overhead", false, true, &d->op_overhead)) != UN_OK)
        return st;
    un_jcur gc = un_jcur_member(c, "gpu");
    return un_jcur_present(&gc) ? parse_gpu(ctx, &gc, &d->gpu) : UN_OK;
}

static un_status parse_machine(un_ctx *ctx, const un_jdoc *doc, un_machine *m) {
    static const char *const keys[] = {
        "version", "name",       "source",     "nodes", "devices_per_node",
        "device",  "intra_node", "inter_node", NULL};
    un_jcur root = un_jdoc_root(doc);
    un_status st;
    int64_t version = 0;
    const char *name = NULL, *source = NULL;
    if ((st = un_jcur_need_type(ctx, &root, UN_JSON_OBJECT)) != UN_OK ||
        (st = un_jcur_check_keys(ctx, &root, keys)) != UN_OK ||
        (st = un_jcur_get_int(ctx, &root, "version", true, &version)) != UN_OK)
        return st;
    if (version != 1) {
        un_jcur vc = un_jcur_member(&root, "version");
        return un_jcur_error(ctx, UN_ERR_PARSE, &vc, "unsupported version %lld (expected 1)",
                             (long long)version);
    }
    if ((st = un_jcur_get_str(ctx, &root, "name", true, &name)) != UN_OK ||
        (st = un_jcur_get_str(ctx, &root, "source", false, &source)) != UN_OK ||
        (st = get_count(ctx, &root, "nodes", &m->nodes)) != UN_OK ||
        (st = get_count(ctx, &root, "devices_per_node", &m->devices_per_node)) != UN_OK)
        return st;
    snprintf(m->name, sizeof m->name, "%s", name);
    snprintf(m->source, sizeof m->source, "%s", source ? source : "");
    if ((int64_t)m->nodes * m->devices_per_node > 65536) {
        un_jcur nc = un_jcur_member(&root, "nodes");
        return un_jcur_error(ctx, UN_ERR_PARSE, &nc, "more than 65536 devices in all");
    }
    un_jcur dev = un_jcur_member(&root, "device");
    if (!un_jcur_present(&dev))
        return un_jcur_error(ctx, UN_ERR_PARSE, &root, "missing member 'device'");
    if ((st = parse_device(ctx, &dev, &m->dev)) != UN_OK)
        return st;
    un_jcur intra = un_jcur_member(&root, "intra_node"),
            inter = un_jcur_member(&root, "inter_node");
    if (!un_jcur_present(&intra))
        return un_jcur_error(ctx, UN_ERR_PARSE, &root, "missing member 'intra_node'");
    if ((st = parse_link(ctx, &intra, &m->intra)) != UN_OK)
        return st;
    if (!un_jcur_present(&inter)) {
        if (m->nodes > 1)
            return un_jcur_error(ctx, UN_ERR_PARSE, &root,
                                 "missing member 'inter_node' (the machine has %d nodes)",
                                 m->nodes);
        m->inter = m->intra;
        return UN_OK;
    }
    return parse_link(ctx, &inter, &m->inter);
}

/* Validates a parsed (or failed: doc NULL) document into *out, which is zeroed on failure. */
static un_status from_doc(un_ctx *ctx, un_status st, un_jdoc *doc, un_machine *out) {
    memset(out, 0, sizeof *out);
    if (st == UN_OK)
        st = parse_machine(ctx, doc, out);
    un_jdoc_free(doc);
    if (st != UN_OK)
        memset(out, 0, sizeof *out);
    return st;
}

un_status un_machine_parse(un_ctx *ctx, const char *name, const char *text, size_t len,
                           un_machine *out) {
    un_jdoc *doc = NULL;
    un_status st = un_jdoc_parse(ctx, name, text, len, &doc);
    return from_doc(ctx, st, doc, out);
}

un_status un_machine_load(un_ctx *ctx, const char *path, un_machine *out) {
    un_jdoc *doc = NULL;
    un_status st = un_jdoc_load(ctx, path, &doc);
    return from_doc(ctx, st, doc, out);
}

int un_machine_devices(const un_machine *m) { return m->nodes * m->devices_per_node; }

const un_link *un_machine_link(const un_machine *m, int a, int b) {
    return a / m->devices_per_node == b / m->devices_per_node ? &m->intra : &m->inter;
}

double un_machine_flops(const un_machine *m, un_mprec p) {
    return m->dev.flops[p] > 0 ? m->dev.flops[p] : m->dev.flops[UN_MPREC_F32];
}

static void link_json(un_buf *b, const char *key, const un_link *l) {
    un_buf_printf(b, "  \"%s\": {\"bw\": %.6g, \"latency\": %.6g, \"collective\": \"%s\"}", key,
                  l->bw, l->latency, un_coll_algo_name(l->algo));
}

void un_machine_to_json(const un_machine *m, un_buf *b) {
    un_buf_printf(b, "{\n  \"version\": 1,\n  \"name\": ");
    un_buf_json_str(b, m->name);
    if (m->source[0]) {
        un_buf_printf(b, ",\n  \"source\": ");
        un_buf_json_str(b, m->source);
    }
    un_buf_printf(b, ",\n  \"nodes\": %d,\n  \"devices_per_node\": %d,\n", m->nodes,
                  m->devices_per_node);
    un_buf_printf(b, "  \"device\": {\"kind\": ");
    un_buf_json_str(b, m->dev.kind);
    un_buf_printf(b, ", \"flops\": {");
    const char *sep = "";
    for (int p = 0; p < UN_MPREC_COUNT; p++)
        if (m->dev.flops[p] > 0) {
            un_buf_printf(b, "%s\"%s\": %.6g", sep, prec_names[p], m->dev.flops[p]);
            sep = ", ";
        }
    un_buf_printf(b, "},\n             \"mem_bw\": %.6g, \"memory\": %.6g, \"op_overhead\": %.6g",
                  m->dev.mem_bw, m->dev.memory, m->dev.op_overhead);
    const un_gpu_kernels *g = &m->dev.gpu;
    if (g->on) {
        un_buf_printf(
            b,
            ",\n             \"gpu\": {\"launch\": %.6g, \"gemm_launch\": %.6g, \"sms\": %.0f, "
            "\"gemm_tile\": %.0f, \"gemm_latency\": %.6g, \"mem_latency\": %.6g, "
            "\"reserve\": %.6g",
            g->launch, g->gemm_launch, g->sms, g->gemm_tile, g->gemm_latency, g->mem_latency,
            g->reserve);
        if (g->optimizer_bw > 0)
            un_buf_printf(b, ", \"optimizer_bw\": %.6g", g->optimizer_bw);
        un_buf_printf(b, "}");
    }
    un_buf_printf(b, "},\n");
    link_json(b, "intra_node", &m->intra);
    if (m->nodes > 1) {
        un_buf_printf(b, ",\n");
        link_json(b, "inter_node", &m->inter);
    }
    un_buf_printf(b, "\n}\n");
}
