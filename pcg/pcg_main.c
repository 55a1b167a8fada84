/* unity-pcg - inspect operator specs and parallel computation graphs: print the operator table,
 * show, draw, evaluate and compare PCGs (JSON), and write sample graphs. Argument parsing only;
 * the work is in libpcg. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pcg/cli.h"
#include "pcg/eval.h"
#include "pcg/onnx.h"
#include "pcg/report.h"
#include "pcg/sample.h"
#include "pcg/specpath.h"

static const char *USAGE =
    "unity-pcg - inspect operator specs and parallel computation graphs (PCGs)\n\n"
    "usage: unity-pcg [--spec FILE] COMMAND ...\n"
    "  ops                          the operator table of the spec\n"
    "  show GRAPH.json              nodes with shapes and layouts, hash, cost\n"
    "  dot GRAPH.json               Graphviz DOT on stdout\n"
    "  eval GRAPH.json [--dump]     evaluate on random inputs; print each output's checksum\n"
    "                               (--dump: every input and output value as JSON)\n"
    "  compare A.json B.json        evaluate both on the same inputs; exit 1 if outputs differ\n"
    "  sample mlp [--strategy serial|data|tensor] [--degree K] [--batch B] [--in N] [--hidden H] "
    "[--out M]\n"
    "                               write a sample graph as JSON on stdout\n"
    "  bench [--iters N]            time graph building, hashing and evaluation (sample MLPs)\n"
    "  run MODEL.onnx --input X --output Y   forward pass (float64 reference evaluator) with the\n"
    "                               model's initializers: X, Y raw float32 of input 0 / output 0\n"
    "show, dot, eval and run read ONNX models (*.onnx) too; --input-shape 2x3x64x64[,...] fixes\n"
    "their dynamic input dims\n"
    "options: --spec FILE|DIR  operator specs (alias --ops; default: $UNITY_SPECS, ./specs, else\n"
    "                          the installed share/unity/specs)\n"
    "         --domain field|f64 (default both)  --seed S\n";

typedef struct {
    const char *spec;
    const char *domain;
    uint64_t seed;
    const char *strategy;
    int64_t degree, batch, in, hidden, out, iters;
    bool dump;
    const char *input_shape, *input, *output; /* ONNX models */
    const char *pos[4];
    int npos;
} opts;

static int fail(un_ctx *ctx, un_status st) {
    fprintf(stderr, "unity-pcg: %s: %s\n", un_status_str(st), un_ctx_errmsg(ctx));
    return 1;
}

static int parse_args(int argc, char **argv, opts *o) {
    static const char *const P = "unity-pcg";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-' || strcmp(a, "-") == 0) {
            if (o->npos == 4) {
                fprintf(stderr, "unity-pcg: too many arguments ('%s')\n", a);
                return UN_EXIT_USAGE;
            }
            o->pos[o->npos++] = a;
            continue;
        }
        if (strcmp(a, "--dump") == 0) {
            o->dump = true;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE, stdout);
            fputs(un_cli_help_footer(), stdout);
            return -1;
        }
        static const char *const with_value[] = {
            "--spec",   "--ops",         "--domain", "--strategy", "--seed",
            "--degree", "--batch",       "--in",     "--hidden",   "--out",
            "--iters",  "--input-shape", "--input",  "--output"};
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            known |= strcmp(a, with_value[k]) == 0;
        if (!known) {
            fprintf(stderr, "unity-pcg: unknown flag %s (see unity-pcg --help)\n", a);
            return UN_EXIT_USAGE;
        }
        if (!v) {
            fprintf(stderr, "unity-pcg: %s needs a value\n", a);
            return UN_EXIT_USAGE;
        }
        i++;
        bool ok = true;
        if (strcmp(a, "--spec") == 0 || strcmp(a, "--ops") == 0) {
            o->spec = v;
        } else if (strcmp(a, "--input-shape") == 0) {
            o->input_shape = v;
        } else if (strcmp(a, "--input") == 0) {
            o->input = v;
        } else if (strcmp(a, "--output") == 0) {
            o->output = v;
        } else if (strcmp(a, "--domain") == 0) {
            ok = strcmp(v, "field") == 0 || strcmp(v, "f64") == 0;
            if (ok)
                o->domain = v;
            else
                fprintf(stderr, "unity-pcg: --domain: '%s' is not field or f64\n", v);
        } else if (strcmp(a, "--strategy") == 0) {
            o->strategy = v;
        } else if (strcmp(a, "--seed") == 0) {
            ok = un_cli_u64(P, a, v, &o->seed);
        } else if (strcmp(a, "--degree") == 0) {
            ok = un_cli_int(P, a, v, 1, 65536, &o->degree);
        } else {
            int64_t *slot = strcmp(a, "--batch") == 0    ? &o->batch
                            : strcmp(a, "--in") == 0     ? &o->in
                            : strcmp(a, "--hidden") == 0 ? &o->hidden
                            : strcmp(a, "--out") == 0    ? &o->out
                                                         : &o->iters;
            ok = un_cli_int(P, a, v, 1, slot == &o->iters ? 100000000 : (int64_t)1 << 30, slot);
        }
        if (!ok)
            return UN_EXIT_USAGE;
    }
    return 0;
}

static void print_buf(un_buf *b) {
    if (b->data)
        fputs(b->data, stdout);
    un_buf_deinit(b);
}

static int cmd_eval(un_ctx *ctx, const un_graph *g, const opts *o) {
    for (int dom = 0; dom < UN_DOM_COUNT; dom++) {
        if (o->domain ? strcmp(o->domain, dom == UN_DOM_FIELD ? "field" : "f64") != 0
                      : o->dump && dom == UN_DOM_FIELD)
            continue; /* --dump without --domain dumps float64 */
        un_buf b = {0};
        un_status st = un_report_eval(ctx, g, dom, o->seed, o->dump, &b);
        if (st != UN_OK) {
            un_buf_deinit(&b);
            return fail(ctx, st);
        }
        print_buf(&b);
    }
    return 0;
}

/* A graph from JSON or ONNX (then m holds the initial weights; m->graph is g). */
static un_status load(un_ctx *ctx, const un_spec *spec, const char *path, const opts *o,
                      un_graph **g, un_onnx *m) {
    memset(m, 0, sizeof *m);
    if (!un_onnx_is_path(path))
        return un_graph_load(ctx, spec, path, g);
    un_status st = un_onnx_import(ctx, spec, path, o->input_shape, m);
    *g = m->graph;
    return st;
}

/* Forward pass of an ONNX model with its initializers on input 0 read from o->input. */
static int cmd_run(un_ctx *ctx, const un_onnx *m, const opts *o) {
    const un_graph *g = m->graph;
    un_eval *ev = NULL;
    un_val *v = NULL;
    float *f = NULL;
    char *text = NULL;
    size_t len = 0;
    int32_t in0 = -1;
    for (int32_t id = 0; id < un_graph_node_count(g) && in0 < 0; id++)
        if (un_graph_node(g, id)->op == UN_OP_INPUT)
            in0 = id;
    un_status st = un_eval_new(ctx, g, UN_DOM_F64, &ev);
    int64_t at = 0;
    for (int32_t id = 0; st == UN_OK && id < un_graph_node_count(g); id++) {
        if (un_graph_node(g, id)->op != UN_OP_WEIGHT)
            continue;
        int64_t n = un_shape_numel(un_graph_shape(g, (un_ref){id, 0}));
        v = un_xrealloc(v, (size_t)n * sizeof *v);
        for (int64_t i = 0; i < n; i++)
            v[i].f = m->values[at + i];
        at += n;
        st = un_eval_set(ev, id, v);
    }
    int64_t n = in0 >= 0 ? un_shape_numel(un_graph_shape(g, (un_ref){in0, 0})) : 0;
    bool is_int = in0 >= 0 && un_graph_shape(g, (un_ref){in0, 0})->dtype == UN_DT_INT;
    if (st == UN_OK)
        st = un_read_file(ctx, o->input, &text, &len);
    if (st == UN_OK && (in0 < 0 || len != (size_t)n * (is_int ? 8 : 4)))
        st = un_ctx_error(ctx, UN_ERR_INVALID, "%s: %zu bytes; input 0 takes %lld %s", o->input,
                          len, (long long)n, is_int ? "int64" : "float32");
    if (st == UN_OK) {
        v = un_xrealloc(v, (size_t)(n ? n : 1) * sizeof *v);
        for (int64_t i = 0; i < n; i++) {
            if (is_int) {
                int64_t x;
                memcpy(&x, text + 8 * i, 8);
                v[i].f = (double)x;
            } else {
                float x;
                memcpy(&x, text + 4 * i, 4);
                v[i].f = x;
            }
        }
        st = un_eval_set(ev, in0, v);
    }
    if (st == UN_OK)
        st = un_eval_fill_random(ev, o->seed);
    if (st == UN_OK)
        st = un_eval_run(ev);
    const un_shape *os = un_graph_shape(g, un_graph_output(g, 0));
    int64_t no = un_shape_numel(os);
    if (st == UN_OK) {
        v = un_xrealloc(v, (size_t)(no ? no : 1) * sizeof *v);
        st = un_ptensor_gather(ctx, un_eval_value(ev, un_graph_output(g, 0)), UN_DOM_F64, v);
    }
    FILE *fp = NULL;
    if (st == UN_OK) {
        f = un_xmalloc((size_t)(no ? no : 1) * sizeof *f);
        for (int64_t i = 0; i < no; i++)
            f[i] = (float)v[i].f;
        fp = fopen(o->output, "wb");
        if (!fp || fwrite(f, sizeof *f, (size_t)no, fp) != (size_t)no)
            st = un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write", o->output);
    }
    if (fp && fclose(fp) != 0 && st == UN_OK)
        st = un_ctx_error(ctx, UN_ERR_IO, "%s: cannot write", o->output);
    free(text);
    free(v);
    free(f);
    un_eval_free(ev);
    if (st != UN_OK)
        return fail(ctx, st);
    printf("%s: output 0 [%lld values] written to %s\n", o->pos[1], (long long)no, o->output);
    return 0;
}

static int cmd_compare(un_ctx *ctx, const un_spec *spec, const opts *o) {
    un_graph *a = NULL, *b = NULL;
    un_status st = un_graph_load(ctx, spec, o->pos[1], &a);
    if (st == UN_OK)
        st = un_graph_load(ctx, spec, o->pos[2], &b);
    int rc = 0;
    for (int dom = 0; st == UN_OK && dom < UN_DOM_COUNT; dom++) {
        if (o->domain && strcmp(o->domain, dom == UN_DOM_FIELD ? "field" : "f64") != 0)
            continue;
        double err = 0;
        un_status cs = un_eval_compare(ctx, a, b, (un_dom)dom, o->seed, 1e-9, &err);
        const char *dn = dom == UN_DOM_FIELD ? "field" : "f64";
        if (cs == UN_OK) {
            if (dom == UN_DOM_FIELD)
                printf("%-6s equal: every output element identical (exact, mod 2^61-1)\n", dn);
            else
                printf("%-6s equal: max |difference| %.3g\n", dn, err);
        } else if (cs == UN_ERR_MISMATCH) {
            printf("%-6s DIFFERENT: %s\n", dn, un_ctx_errmsg(ctx));
            un_ctx_clear(ctx);
            rc = 1;
        } else {
            st = cs;
        }
    }
    un_graph_free(a);
    un_graph_free(b);
    if (st != UN_OK)
        return fail(ctx, st);
    return rc;
}

int main(int argc, char **argv) {
    opts o = {.seed = 1,
              .strategy = "serial",
              .degree = 2,
              .batch = 8,
              .in = 16,
              .hidden = 32,
              .out = 4,
              .iters = 20000};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (o.npos == 0) {
        fprintf(stderr, "unity-pcg: no command given (see unity-pcg --help)\n");
        return 2;
    }
    const char *cmd = o.pos[0];
    static const struct {
        const char *name;
        int npos;
    } cmds[] = {{"ops", 1},     {"show", 2},   {"dot", 2},   {"eval", 2},
                {"compare", 3}, {"sample", 2}, {"bench", 1}, {"run", 2}};
    bool known = false;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(cmd, cmds[i].name) == 0) {
            known = true;
            if (o.npos != cmds[i].npos) {
                fprintf(stderr, "unity-pcg: '%s' takes %d argument%s (see unity-pcg --help)\n", cmd,
                        cmds[i].npos - 1, cmds[i].npos == 2 ? "" : "s");
                return 2;
            }
        }
    if (!known) {
        fprintf(stderr, "unity-pcg: unknown command '%s' (see unity-pcg --help)\n", cmd);
        return 2;
    }
    un_ctx *ctx = un_ctx_new(NULL);
    un_spec *spec = NULL;
    un_graph *g = NULL;
    un_onnx om = {0};
    un_buf b = {0};
    char spec_path[4096];
    un_status st = un_specpath_find(ctx, o.spec, spec_path, sizeof spec_path);
    if (st == UN_OK)
        st = un_spec_load(ctx, spec_path, &spec);
    if (st != UN_OK) {
        rc = fail(ctx, st);
        goto done;
    }
    if (strcmp(cmd, "ops") == 0) {
        un_report_ops(spec, &b);
        print_buf(&b);
    } else if (strcmp(cmd, "sample") == 0) {
        int s = -1;
        for (int i = 0; i < UN_SAMPLE_COUNT; i++)
            if (strncmp(un_sample_strategy_name((un_sample_strategy)i), o.strategy,
                        strlen(o.strategy)) == 0 &&
                o.strategy[0])
                s = i;
        if (strcmp(o.pos[1], "mlp") != 0 || s < 0) {
            fprintf(stderr,
                    "unity-pcg: sample: only 'mlp' with --strategy serial, data or tensor\n");
            rc = 2;
            goto done;
        }
        un_sample_mlp_cfg cfg = {o.batch, o.in, o.hidden, o.out};
        st = un_sample_mlp(ctx, spec, cfg, (un_sample_strategy)s, (int32_t)o.degree, &g);
        if (st == UN_OK)
            st = un_graph_to_json(ctx, g, &b);
        if (st != UN_OK) {
            rc = fail(ctx, st);
            goto done;
        }
        print_buf(&b);
    } else if (strcmp(cmd, "bench") == 0) {
        st = un_sample_bench(ctx, spec, (int)o.iters, &b);
        if (st != UN_OK) {
            rc = fail(ctx, st);
            goto done;
        }
        print_buf(&b);
    } else if (strcmp(cmd, "compare") == 0) {
        rc = cmd_compare(ctx, spec, &o);
    } else {
        if (strcmp(cmd, "run") == 0 && (!un_onnx_is_path(o.pos[1]) || !o.input || !o.output)) {
            fprintf(stderr, "unity-pcg: run takes MODEL.onnx --input X --output Y\n");
            rc = 2;
            goto done;
        }
        st = load(ctx, spec, o.pos[1], &o, &g, &om);
        if (om.graph)
            g = NULL; /* om owns it */
        const un_graph *gg = om.graph ? om.graph : g;
        if (st == UN_OK && strcmp(cmd, "run") == 0) {
            rc = cmd_run(ctx, &om, &o);
            goto done;
        }
        if (st == UN_OK && strcmp(cmd, "show") == 0)
            st = un_report_graph(ctx, gg, &b);
        if (st == UN_OK && strcmp(cmd, "show") == 0 && om.graph) {
            un_buf_printf(&b,
                          "onnx: opset %d, %lld parameters from the initializers (%lld weight "
                          "values)\n",
                          om.opset, (long long)om.onnx_params, (long long)om.n_values);
        }
        if (st == UN_OK && strcmp(cmd, "dot") == 0)
            st = un_graph_to_dot(ctx, gg, &b);
        if (st != UN_OK) {
            rc = fail(ctx, st);
            goto done;
        }
        print_buf(&b);
        if (strcmp(cmd, "eval") == 0)
            rc = cmd_eval(ctx, gg, &o);
    }
done:
    un_buf_deinit(&b);
    un_graph_free(g);
    un_onnx_deinit(&om);
    un_spec_free(spec);
    un_ctx_free(ctx);
    return rc;
}
