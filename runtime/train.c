/* train.c - the training loop (train.h): model and strategy set-up, synthetic and text data,
 * losses, one SPMD worker per rank (threads for `local`, this process for `mpi`), reporting. */
#include "runtime/train.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pcg/onnx.h"
#include "runtime/backend.h"
#include "runtime/backend_cuda.h"
#include "runtime/backend_impl.h"
#include "runtime/blas.h"
#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/exec.h"
#include "runtime/optim.h"
#include "runtime/strategy.h"
#include "runtime/zoo.h"

un_train_opts un_train_opts_default(void) {
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    return (un_train_opts){.devices = 0,
                           .steps = 100,
                           .optimizer = "adam",
                           .comm = "local",
                           .seed = 1,
                           .threads = nc > 0 ? (int)nc : 1,
                           .spec = "specs/ops.json",
                           .prec = UN_PREC_F32};
}

void un_train_result_deinit(un_train_result *r) {
    if (!r)
        return;
    free(r->losses);
    free(r->dev);
    memset(r, 0, sizeof *r);
}

const char *un_train_usage(void) {
    return "usage: unity-train --model NAME|GRAPH.json|MODEL.onnx [options]\n"
           "  --model M          zoo model (mlp transformer dlrm xdl candle_uno resnext50\n"
           "                     inception_v3 charlm), a pcg graph JSON file or an ONNX model\n"
           "                     (*.onnx: its initializers are the initial weights)\n"
           "  --input-shape S    ONNX: dims of dynamic inputs, e.g. 8x3x64x64 (',' between "
           "inputs)\n"
           "  --tiny             the zoo model's tiny configuration\n"
           "  --devices D        devices (default 1; with --comm mpi the number of processes)\n"
           "  --strategy S       serial | data | tensor | mixed:DxT (data x tensor degrees) |\n"
           "                     PLAN.json (default: serial on 1 device, else data)\n"
           "  --steps N          training steps (default 100)\n"
           "  --batch B          batch size (default: the model's)\n"
           "  --config K=V,...   zoo model size over the base (tiny or paper) configuration:\n"
           "                     layers, hidden, heads, ffn, seq, batch (which a model takes:\n"
           "                     runtime/zoo.h); e.g. layers=8,hidden=2048,batch=64\n"
           "  --lr X             learning rate (default: sgd 0.05, adam 0.001)\n"
           "  --optimizer O      sgd | adam (default adam)\n"
           "  --data FILE        text to train a token model (charlm) on\n"
           "  --comm C           local (threads, default) | mpi (run under mpirun)\n"
           "  --seed S           seed of initialisation and data (default 1)\n"
           "  --threads T        CPU threads per machine, split over its devices (default: all "
           "cores)\n"
           "  --save CKPT        write a checkpoint at the end (--comm mpi: CKPT.rankR per "
           "process)\n"
           "  --load CKPT        start from a checkpoint\n"
           "  --loss ce|mse      loss of a JSON or ONNX model (default mse)\n"
           "  --precision f32|f64  float type (default f32)\n"
           "  --backend B        cpu | cuda (one GPU per rank: its rank on the machine mod the\n"
           "                     GPUs) | opaque (the CPU kernels behind memory the host cannot\n"
           "                     reach: checks the runtime; opaque:staged without its device\n"
           "                     data plane, opaque:mem=SIZE with that much memory);\n"
           "                     default cuda when built with CUDA and a GPU is there (f32),\n"
           "                     else cpu\n"
           "  --spec FILE|DIR    operator specs (alias --ops; default: $UNITY_SPECS, ./specs,\n"
           "                     else the installed share/unity/specs)\n"
           "  --quiet            no per-step lines\n"
           "  --log-every N      a step line every N steps (default: one every 0.1 s; 1: every\n"
           "                     step); the first and the last step's always (the loss is\n"
           "                     summed over the devices for these steps only)\n"
           "  --stats            per-device memory and bytes moved per step at the end\n"
           "  --node-times       device 0's median wall time per node (forward, backward) and\n"
           "                     per phase of a step (batch ... update, the step line) at the\n"
           "                     end (two clock reads a node)\n";
}

/* ---- argument parsing ---- */

static un_status parse_int(un_ctx *ctx, const char *flag, const char *v, int64_t lo, int64_t hi,
                           int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return un_ctx_error(ctx, UN_ERR_INVALID, "%s: '%s' is not an integer in [%lld, %lld]", flag,
                            v, (long long)lo, (long long)hi);
    *out = x;
    return UN_OK;
}

un_status un_train_parse_args(un_ctx *ctx, int argc, char **argv, un_train_opts *o) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--tiny") == 0) {
            o->tiny = true;
            continue;
        }
        if (strcmp(a, "--quiet") == 0) {
            o->quiet = true;
            continue;
        }
        if (strcmp(a, "--stats") == 0) {
            o->stats = true;
            continue;
        }
        if (strcmp(a, "--node-times") == 0) {
            o->node_times = true;
            continue;
        }
        static const char *const with_value[] = {
            "--model",     "--devices",   "--strategy",    "--steps",   "--batch",
            "--lr",        "--optimizer", "--data",        "--comm",    "--seed",
            "--threads",   "--save",      "--load",        "--spec",    "--loss",
            "--precision", "--config",    "--input-shape", "--backend", "--log-every"};
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            known |= strcmp(a, with_value[k]) == 0;
        if (!known)
            return un_ctx_error(ctx, UN_ERR_INVALID, "unknown argument '%s' (see --help)", a);
        if (i + 1 >= argc)
            return un_ctx_error(ctx, UN_ERR_INVALID, "%s needs a value", a);
        const char *v = argv[++i];
        int64_t x;
        un_status st = UN_OK;
        if (strcmp(a, "--model") == 0) {
            o->model = v;
        } else if (strcmp(a, "--devices") == 0) {
            if ((st = parse_int(ctx, a, v, 1, 4096, &x)) == UN_OK)
                o->devices = (int)x;
        } else if (strcmp(a, "--strategy") == 0) {
            o->strategy = v;
        } else if (strcmp(a, "--config") == 0) {
            un_zoo_config c;
            if ((st = un_zoo_config_parse(ctx, v, &c)) == UN_OK)
                o->config = v;
        } else if (strcmp(a, "--steps") == 0) {
            if ((st = parse_int(ctx, a, v, 1, 100000000, &x)) == UN_OK)
                o->steps = (int)x;
        } else if (strcmp(a, "--batch") == 0) {
            if ((st = parse_int(ctx, a, v, 1, (int64_t)1 << 30, &x)) == UN_OK)
                o->batch = x;
        } else if (strcmp(a, "--lr") == 0) {
            char *end;
            double d = strtod(v, &end);
            if (end == v || *end || !(d > 0) || !isfinite(d))
                return un_ctx_error(ctx, UN_ERR_INVALID, "--lr: '%s' is not a positive number", v);
            o->lr = d;
        } else if (strcmp(a, "--optimizer") == 0) {
            un_optim_algo k;
            if (!un_optim_algo_from_name(v, &k))
                return un_ctx_error(ctx, UN_ERR_INVALID, "--optimizer: '%s' is not sgd or adam", v);
            o->optimizer = v;
        } else if (strcmp(a, "--data") == 0) {
            o->data = v;
        } else if (strcmp(a, "--comm") == 0) {
            if (strcmp(v, "local") != 0 && strcmp(v, "mpi") != 0)
                return un_ctx_error(ctx, UN_ERR_INVALID, "--comm: '%s' is not local or mpi", v);
            o->comm = v;
        } else if (strcmp(a, "--seed") == 0) {
            if ((st = parse_int(ctx, a, v, 0, INT64_MAX, &x)) == UN_OK)
                o->seed = (uint64_t)x;
        } else if (strcmp(a, "--log-every") == 0) {
            if ((st = parse_int(ctx, a, v, 1, 100000000, &x)) == UN_OK)
                o->log_every = (int)x;
        } else if (strcmp(a, "--threads") == 0) {
            if ((st = parse_int(ctx, a, v, 1, 1024, &x)) == UN_OK)
                o->threads = (int)x;
        } else if (strcmp(a, "--input-shape") == 0) {
            o->input_shape = v;
        } else if (strcmp(a, "--save") == 0) {
            o->save = v;
        } else if (strcmp(a, "--load") == 0) {
            o->load = v;
        } else if (strcmp(a, "--spec") == 0) {
            o->spec = v;
        } else if (strcmp(a, "--loss") == 0) {
            if (strcmp(v, "ce") != 0 && strcmp(v, "mse") != 0)
                return un_ctx_error(ctx, UN_ERR_INVALID, "--loss: '%s' is not ce or mse", v);
            o->loss = v;
        } else if (strcmp(a, "--precision") == 0) {
            if (strcmp(v, "f32") != 0 && strcmp(v, "f64") != 0)
                return un_ctx_error(ctx, UN_ERR_INVALID, "--precision: '%s' is not f32 or f64", v);
            o->prec = strcmp(v, "f32") == 0 ? UN_PREC_F32 : UN_PREC_F64;
        } else if (strcmp(a, "--backend") == 0) {
            un_backend_opaque_opts oo;
            if (un_backend_is_opaque(v)) {
                if ((st = un_backend_opaque_opts_parse(ctx, v, &oo)) != UN_OK)
                    return st;
            } else if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0) {
                return un_ctx_error(ctx, UN_ERR_INVALID,
                                    "--backend: '%s' is not cpu, cuda or opaque[:OPTIONS]", v);
            }
            o->backend = v;
        }
        if (st != UN_OK)
            return st;
    }
    if (!o->model)
        return un_ctx_error(ctx, UN_ERR_INVALID, "--model is required (see --help)");
    return UN_OK;
}

/* ---- losses ---- */

static inline void st_(void *a, un_prec p, int64_t i, double x) {
    if (p == UN_PREC_F32)
        ((float *)a)[i] = (float)x;
    else
        ((double *)a)[i] = x;
}

double un_train_ce(un_prec prec, const void *logits, int64_t rows, int64_t c, int64_t r0,
                   int64_t n_total, const int64_t *labels, void *grad) {
    return un__loss_ce_host(prec, logits, rows, c, r0, n_total, labels, grad);
}

/* ---- the model as the trainer sees it ---- */

typedef struct tmodel {
    un_model zoo;   /* when a zoo model (zoo.graph owned) */
    un_graph *json; /* when a JSON or ONNX model (owned) */
    un_onnx onnx;   /* ONNX: the initializers as the initial weights (its graph moved to json) */
    const un_graph *g;
    int n_inputs;
    const char *in_name[UN_ZOO_MAX_INPUTS];
    bool in_int[UN_ZOO_MAX_INPUTS];
    int64_t in_range[UN_ZOO_MAX_INPUTS];
    un_loss_kind loss;
    int64_t classes, label_numel, batch, seqs; /* seqs: sequences per batch (text data) */
} tmodel;

/* Loads --model (a zoo name or a file) for a run on `devices` devices. */
static un_status model_load(un_ctx *ctx, const un_spec *spec, const un_train_opts *o, int devices,
                            tmodel *m) {
    memset(m, 0, sizeof *m);
    size_t len = strlen(o->model);
    bool is_onnx = un_onnx_is_path(o->model);
    bool is_file = is_onnx || (len > 5 && strcmp(o->model + len - 5, ".json") == 0);
    un_status st;
    if (o->input_shape && !is_onnx)
        return un_ctx_error(ctx, UN_ERR_INVALID, "--input-shape applies to ONNX models only");
    if (!is_file) {
        if (o->loss)
            return un_ctx_error(ctx, UN_ERR_INVALID, "--loss applies to JSON models only");
        un_zoo_config c;
        memset(&c, 0, sizeof c);
        if (o->config && (st = un_zoo_config_parse(ctx, o->config, &c)) != UN_OK)
            return st;
        if (o->batch && c.batch)
            return un_ctx_error(ctx, UN_ERR_INVALID, "--batch and --config batch=: give one");
        if (o->batch)
            c.batch = o->batch;
        if ((st = un_zoo_build_config(ctx, spec, o->model, o->tiny, &c, &m->zoo)) != UN_OK)
            return st;
        m->g = m->zoo.graph;
        m->n_inputs = m->zoo.n_inputs;
        for (int i = 0; i < m->n_inputs; i++) {
            m->in_name[i] = m->zoo.inputs[i].name;
            m->in_int[i] = m->zoo.inputs[i].is_int;
            m->in_range[i] = m->zoo.inputs[i].int_range;
        }
        m->loss = m->zoo.loss;
        m->classes = m->zoo.n_classes;
        m->label_numel = 1;
        for (int i = 0; i < m->zoo.label_rank; i++)
            m->label_numel *= m->zoo.label_dim[i];
        m->seqs = m->zoo.batch;
    } else {
        if (o->tiny || o->batch || o->config)
            return un_ctx_error(ctx, UN_ERR_INVALID,
                                "%s: --tiny, --batch and --config apply to zoo models only",
                                o->model);
        if (is_onnx) {
            if ((st = un_onnx_import(ctx, spec, o->model, o->input_shape, &m->onnx)) != UN_OK)
                return st;
            m->json = m->onnx.graph;
            m->onnx.graph = NULL;
        } else if ((st = un_graph_load(ctx, spec, o->model, &m->json)) != UN_OK) {
            return st;
        }
        m->g = m->json;
        /* the model's own views place it under serial and named strategies; a plan file
         * (--strategy PLAN.json, what a search trains with) places every node itself and its
         * views are checked by un_strategy_plan_load */
        char why[300];
        if (!un_strategy_is_plan_file(o->strategy) &&
            !un_graph_views_valid(m->g, devices, why, sizeof why)) {
            st = un_ctx_error(ctx, UN_ERR_INVALID, "%s: %s", o->model, why);
            goto fail;
        }
        if (un_graph_output_count(m->g) != 1) {
            st = un_ctx_error(ctx, UN_ERR_INVALID, "%s: a model needs exactly one output (has %d)",
                              o->model, un_graph_output_count(m->g));
            goto fail;
        }
        for (int32_t id = 0; id < un_graph_node_count(m->g); id++) {
            const un_node *nd = un_graph_node(m->g, id);
            if (nd->op != UN_OP_INPUT)
                continue;
            if (m->n_inputs == UN_ZOO_MAX_INPUTS || !nd->name) {
                st = un_ctx_error(ctx, UN_ERR_INVALID, "%s: too many or unnamed inputs", o->model);
                goto fail;
            }
            if (!un_shape_is_trivial(&nd->inf.out[0])) {
                st = un_ctx_error(ctx, UN_ERR_INVALID,
                                  "%s: input '%s' has a layout; a model is a serial graph (give "
                                  "parallel graphs with --strategy)",
                                  o->model, nd->name);
                goto fail;
            }
            const un_op_spec *os = un_spec_op(spec, UN_OP_INPUT);
            int ir = un_spec_param_index(os, "range");
            m->in_name[m->n_inputs] = nd->name;
            m->in_int[m->n_inputs] = nd->inf.out[0].dtype == UN_DT_INT;
            m->in_range[m->n_inputs] = ir >= 0 && nd->params[ir].v[0] > 0 ? nd->params[ir].v[0] : 2;
            m->n_inputs++;
        }
        const un_shape *os = un_graph_shape(m->g, un_graph_output(m->g, 0));
        m->loss = o->loss && strcmp(o->loss, "ce") == 0 ? UN_LOSS_CE : UN_LOSS_MSE;
        if (!un_shape_is_trivial(os) || os->dtype != UN_DT_FLOAT) {
            st = un_ctx_error(ctx, UN_ERR_INVALID,
                              "%s: the output must be a float tensor without a layout", o->model);
            goto fail;
        }
        if (m->loss == UN_LOSS_CE) {
            if (os->rank != 2) {
                st = un_ctx_error(ctx, UN_ERR_INVALID,
                                  "%s: --loss ce needs logits [N, C] as the output (rank %d)",
                                  o->model, os->rank);
                goto fail;
            }
            m->classes = os->dim[1];
            m->label_numel = os->dim[0];
        } else {
            m->label_numel = un_shape_numel(os);
        }
        m->seqs =
            m->n_inputs
                ? un_graph_shape(m->g, (un_ref){un_graph_find(m->g, m->in_name[0]), 0})->dim[0]
                : 1;
    }
    m->batch = m->seqs;
    return UN_OK;
fail:
    un_graph_free(m->json);
    m->json = NULL;
    un_onnx_deinit(&m->onnx);
    return st;
}

static void model_free(tmodel *m) {
    un_model_deinit(&m->zoo);
    un_graph_free(m->json);
    un_onnx_deinit(&m->onnx);
}

un_status un_train_graph(un_ctx *ctx, const un_spec *spec, const un_train_opts *o, un_graph **out,
                         int *devices) {
    *out = NULL;
    tmodel m;
    int d = o->devices ? o->devices : 1;
    un_status st = model_load(ctx, spec, o, d, &m);
    *devices = d;
    if (st == UN_OK)
        st = un_strategy_named(ctx, spec, m.g,
                               o->strategy ? o->strategy
                               : d == 1    ? "serial"
                                           : "data",
                               d, out);
    model_free(&m);
    return st;
}

un_status un_train_loss(un_ctx *ctx, const un_spec *spec, const un_train_opts *o,
                        un_loss_kind *out) {
    tmodel m;
    un_status st = model_load(ctx, spec, o, o->devices ? o->devices : 1, &m);
    if (st == UN_OK)
        *out = m.loss;
    model_free(&m);
    return st;
}

/* ---- the run shared by every rank ---- */

typedef struct shared {
    const un_ctx *parent; /* ranks' contexts inherit from it */
    const un_train_opts *o;
    const un_graph *g; /* the graph executed */
    const tmodel *m;
    int32_t in_node[UN_ZOO_MAX_INPUTS]; /* in g */
    unsigned char *text;
    size_t text_len;
    int threads;         /* per rank */
    const char *backend; /* resolved: "cpu", "cuda" or "opaque[:OPTIONS]" */
    const char *plane;   /* the device data plane the exchanges used (rank 0's), or NULL */
    int64_t *need;       /* per rank: what its executor and optimizer allocate (local: all d
                            ranks; mpi: this process's rank only) */
    int gpus;            /* cuda: the GPUs of this machine */
    double *losses;
    double *step_s;          /* rank 0: per step, its seconds */
    un_train_dev_stats *dev; /* per device, filled by rank 0 */
    double step_time_sum;
    int timed_steps;
    int devices;
    const char *strategy_name;
    const char *comm_name;
} shared;

/* Inputs and labels of one step, identical on every rank, made in host memory (host[i]: input
 * i's values, sized for it) and written into the executor's inputs through the backend. */
static un_status make_batch(un_ctx *ctx, const shared *sh, un_exec *ex, un_backend *be, int step,
                            un_prec prec, void **host, void *labels) {
    const tmodel *m = sh->m;
    uint64_t seed = sh->o->seed;
    size_t fes = prec == UN_PREC_F32 ? sizeof(float) : sizeof(double);
    if (sh->text) { /* windows of the text: tokens and the next tokens */
        int32_t node = sh->in_node[0];
        int64_t *tok = host[0];
        int64_t numel = un_shape_numel(un_graph_shape(sh->g, (un_ref){node, 0}));
        int64_t t = numel / m->seqs, range = m->in_range[0];
        un_rng rng;
        un_rng_seed(&rng, un_hash_combine(seed, 0x7e57 + (uint64_t)step));
        int64_t *lab = labels;
        for (int64_t s = 0; s < m->seqs; s++) {
            uint64_t o0 = un_rng_below(&rng, (uint64_t)(sh->text_len - (size_t)t));
            for (int64_t j = 0; j < t; j++) {
                tok[s * t + j] = sh->text[o0 + (uint64_t)j] % range;
                lab[s * t + j] = sh->text[o0 + (uint64_t)j + 1] % range;
            }
        }
        return un_backend_write(ctx, be, un_exec_source(ex, node), tok,
                                (size_t)numel * sizeof(int64_t));
    }
    /* Synthetic: a fixed pool of batches, so the loss falls as the model fits them. */
    uint64_t b = (uint64_t)step % UN_TRAIN_SYNTHETIC_BATCHES;
    un_status st = UN_OK;
    for (int i = 0; i < m->n_inputs && st == UN_OK; i++) {
        int32_t node = sh->in_node[i];
        void *dst = host[i];
        int64_t numel = un_shape_numel(un_graph_shape(sh->g, (un_ref){node, 0}));
        un_rng rng;
        un_rng_seed(&rng, un_hash_combine(un_hash_combine(seed, b), 1000 + (uint64_t)i));
        for (int64_t x = 0; x < numel; x++) {
            if (m->in_int[i])
                ((int64_t *)dst)[x] = (int64_t)un_rng_below(&rng, (uint64_t)m->in_range[i]);
            else
                st_(dst, prec, x, 2 * un_rng_double(&rng) - 1);
        }
        st = un_backend_write(ctx, be, un_exec_source(ex, node), dst,
                              (size_t)numel * (m->in_int[i] ? sizeof(int64_t) : fes));
    }
    un_rng rng;
    un_rng_seed(&rng, un_hash_combine(un_hash_combine(seed, b), 999));
    for (int64_t x = 0; x < m->label_numel; x++) {
        if (m->loss == UN_LOSS_CE)
            ((int64_t *)labels)[x] = (int64_t)un_rng_below(&rng, (uint64_t)m->classes);
        else
            st_(labels, prec, x, 2 * un_rng_double(&rng) - 1);
    }
    return st;
}

static void progress(un_ctx *ctx, const shared *sh, int step, double loss, double sps) {
    if (step == sh->o->steps) {
        un_ctx_progress_done(ctx);
        return;
    }
    char bar[31];
    int width = 30, done = (int)((int64_t)width * step / sh->o->steps);
    for (int i = 0; i < width; i++)
        bar[i] = i < done ? '#' : '.';
    bar[width] = '\0';
    un_ctx_progress(ctx, "[%s] %d/%d loss %.4f %.0f samples/s", bar, step, sh->o->steps, loss, sps);
}

/* The optimizer for o's flags over n parameters, its state on be (NULL: host memory). */
static un_status optim_make(un_ctx *ctx, const un_train_opts *o, int64_t n, un_backend *be,
                            un_optim **out) {
    un_optim_algo k = UN_OPTIM_ADAM;
    un_optim_algo_from_name(o->optimizer, &k);
    un_optim_params op = un_optim_params_default(k);
    if (o->lr > 0)
        op.lr = o->lr;
    return be ? un_optim_new_on(ctx, op, n, be, out) : un_optim_new(ctx, op, n, o->prec, out);
}

/* The initial weights, each rank writing only its own pieces (un_optim_init_exec: seeded values,
 * or an ONNX model's initializers where the executed graph has a weight of the same name and
 * size); or a checkpoint's weights and optimizer state read straight into this rank's pieces and
 * shard. No rank holds the logical weights: a checkpoint loads into any plan and device count,
 * and a fresh run starts, without the whole model in any rank's memory. */
static un_status setup_weights(un_ctx *ctx, shared *sh, un_exec *ex, un_backend *be,
                               un_optim **opt) {
    const un_train_opts *o = sh->o;
    un_status st = optim_make(ctx, o, un_exec_shard_count(ex), be, opt);
    if (st != UN_OK || o->load)
        return st == UN_OK ? un_checkpoint_load_exec(ctx, o->load, sh->g, ex, be, *opt, NULL) : st;
    const float **given = NULL;
    if (sh->m->onnx.values) { /* each weight of the executed graph takes the model's of its name */
        const un_graph *mg = sh->m->g;
        given = un_xcalloc((size_t)un_graph_node_count(sh->g) + 1, sizeof *given);
        int64_t at = 0;
        for (int32_t id = 0; id < un_graph_node_count(mg); id++) {
            const un_node *nd = un_graph_node(mg, id);
            if (nd->op != UN_OP_WEIGHT)
                continue;
            int64_t n = un_shape_numel(&nd->inf.out[0]);
            int32_t gid = nd->name ? un_graph_find(sh->g, nd->name) : -1;
            if (gid >= 0 && un_graph_node(sh->g, gid)->op == UN_OP_WEIGHT &&
                un_shape_numel(un_graph_shape(sh->g, (un_ref){gid, 0})) == n)
                given[gid] = sh->m->onnx.values + at;
            at += n;
        }
    }
    st = un_optim_init_exec(ctx, sh->g, o->seed, given, ex, be);
    free(given);
    return st;
}

/* Under MPI on several processes every rank writes its own file (its weight blocks and optimizer
 * shard, PATH.rankR; rank 0 removes a stale single file PATH, which a load would prefer);
 * otherwise rank 0 writes one file, the ranks streaming it their pieces one weight at a time. */
static un_status save_weights(un_ctx *ctx, shared *sh, un_comm *comm, un_exec *ex, un_backend *be,
                              un_optim *opt) {
    const un_train_opts *o = sh->o;
    if (strcmp(un_comm_name(comm), "mpi") == 0 && un_comm_size(comm) > 1) {
        un_status st = un_checkpoint_save_rank(ctx, o->save, sh->g, ex, be, opt, un_comm_rank(comm),
                                               un_comm_size(comm));
        if (st == UN_OK && un_comm_rank(comm) == 0)
            remove(o->save);
        return un_comm_agree(ctx, comm, st);
    }
    return un_checkpoint_save_exec(ctx, o->save, sh->g, ex, be, opt, comm, NULL);
}

/* Every rank's accounting, collected on rank 0 (collective); per: this rank's meets, the waits
 * in them that slept, their milliseconds and the sleeps with no poll before, per timed step. */
static un_status report_stats(un_ctx *ctx, shared *sh, un_comm *comm, un_exec *ex, un_optim *opt,
                              const double per[4]) {
    enum { K = 13 };
    int d = un_comm_size(comm), r = un_comm_rank(comm);
    double *all = un_xcalloc((size_t)d * K, sizeof *all);
    const un_exec_stats *es = un_exec_stats_get(ex);
    int64_t fes = sh->o->prec == UN_PREC_F32 ? 4 : 8;
    int64_t ob = un_optim_count(opt) * fes * (un_optim_state(opt, 1) ? 2 : 1);
    double *row = all + (size_t)r * K;
    row[0] = (double)es->weight_bytes;
    row[1] = (double)ob;
    row[2] = (double)(es->peak_bytes + ob);
    row[3] = (double)es->sent;
    row[4] = (double)es->recv;
    row[5] = (double)es->copied;
    row[6] = (double)es->plane_exchanges;
    row[7] = (double)es->staged_exchanges;
    row[8] = (double)sh->need[r];
    memcpy(row + 9, per, 4 * sizeof *per);
    un_status st = un_comm_allreduce(ctx, comm, UN_RED_F64, all, (int64_t)d * K);
    if (st == UN_OK && r == 0) {
        for (int i = 0; i < d; i++) {
            const double *x = all + (size_t)i * K;
            sh->dev[i] = (un_train_dev_stats){
                (int64_t)x[0], (int64_t)x[1], (int64_t)x[2], (int64_t)x[3], (int64_t)x[4],
                (int64_t)x[5], (int64_t)x[6], (int64_t)x[7], (int64_t)x[8], x[9],
                x[10],         x[11],         x[12]};
        }
    }
    free(all);
    return st;
}

un_status un_train_backend(un_ctx *ctx, const un_train_opts *o, const char **name, int *gpus) {
    const char *why = NULL;
    *gpus = un_backend_cuda_devices(&why);
    *name = o->backend ? o->backend : *gpus > 0 && o->prec == UN_PREC_F32 ? "cuda" : "cpu";
    if (strcmp(*name, "cuda") != 0)
        return UN_OK;
    if (*gpus == 0)
        return un_ctx_error(ctx, UN_ERR_UNAVAILABLE, "--backend cuda: no usable GPU (%s)",
                            why ? why : "no CUDA device");
    if (o->prec != UN_PREC_F32)
        return un_ctx_error(ctx, UN_ERR_UNAVAILABLE,
                            "--backend cuda: float32 only (--precision f64 runs on --backend cpu)");
    return UN_OK;
}

/* This rank's backend: under cuda the GPU of its rank on the machine modulo the GPUs there. */
static un_status backend_make(un_ctx *ctx, const shared *sh, un_comm *comm, un_backend **out) {
    if (strcmp(sh->backend, "cuda") == 0)
        return un_backend_cuda_new(ctx, sh->o->prec, un_comm_node_rank(comm) % sh->gpus, out);
    if (un_backend_is_opaque(sh->backend)) {
        un_backend_opaque_opts oo;
        un_status st = un_backend_opaque_opts_parse(ctx, sh->backend, &oo);
        return st == UN_OK ? un_backend_opaque_new_opts(ctx, sh->o->prec, sh->threads, &oo, out)
                           : st;
    }
    return un_backend_cpu_new(ctx, sh->o->prec, sh->threads, out);
}

/* Elements of g's logical weights. */
static int64_t weight_elements(const un_graph *g) {
    int64_t n = 0;
    for (int32_t id = 0; id < un_graph_node_count(g); id++)
        if (un_graph_node(g, id)->op == UN_OP_WEIGHT)
            n += un_shape_numel(&un_graph_node(g, id)->inf.out[0]);
    return n;
}

/* Refuses, before the executor allocates anything, a run whose ranks sharing this rank's memory
 * would need more than its backend has free (un_backend_memory: the machine's host memory for cpu,
 * shared by every rank on it; the GPU's for cuda, shared by the ranks on that GPU; an opaque
 * backend's limit, its own). Every rank checks; the caller's un_comm_agree keeps them in step. */
static un_status memory_check(un_ctx *ctx, const shared *sh, un_comm *comm, un_backend *be) {
    int64_t avail = 0;
    bool host = false;
    un_status st = un_backend_memory(ctx, be, &avail, &host);
    if (st != UN_OK || avail <= 0)
        return st; /* unknown: nothing to compare with */
    bool mpi = strcmp(un_comm_name(comm), "mpi") == 0, cuda = strcmp(sh->backend, "cuda") == 0;
    int me = un_comm_rank(comm), node = un_comm_node_size(comm), nr = un_comm_node_rank(comm);
    int64_t need = 0;
    int sharing = 0;
    for (int q = 0; q < node; q++) { /* the ranks on this machine, by their rank on it */
        bool shares = host || q == nr || (cuda && q % sh->gpus == nr % sh->gpus);
        if (!shares)
            continue;
        /* local: machine rank = rank; mpi: only this rank's need is known, the others' alike */
        need += sh->need[mpi ? me : q];
        sharing++;
    }
    if (need <= avail)
        return UN_OK;
    int64_t weights = weight_elements(sh->g);
    char where[128];
    if (host)
        snprintf(where, sizeof where, "this machine's %d device%s", sharing,
                 sharing == 1 ? "" : "s");
    else
        snprintf(where, sizeof where, "%s memory of device %d (%d rank%s on it)",
                 un_backend_name(be), cuda ? nr % sh->gpus : me, sharing, sharing == 1 ? "" : "s");
    un_optim_algo k = UN_OPTIM_ADAM;
    un_optim_algo_from_name(sh->o->optimizer, &k);
    return un_ctx_error(ctx, UN_ERR_NOMEM,
                        "model %s needs about %.2f GiB on %s (%lld weights: values, gradients and "
                        "%s state, activations and the forward values kept for backward), but "
                        "%.2f GiB are available; choose a smaller --config or more %s",
                        sh->o->model, (double)need / (1 << 30), where, (long long)weights,
                        un_optim_algo_name(k), (double)avail / (1 << 30),
                        host ? "machines" : "devices");
}

/* Whether step `step` of `steps` sums the loss over the ranks (every rank decides the same):
 * the first and the last step, and with --log-every N every N'th (their lines), else the step
 * the last sum agreed on (next_sum: rank 0's lines and progress bar about every UN_TRAIN_LINE_S).
 * A step that reports no loss does not meet the other ranks for it: on 2 idle cores that meet
 * cost the tiny MLP's data x2 step 1.5 us at the median and 3.3 on average of its 37.5 us
 * (search/README.md, "The idle 2-device tiny steps"). */
static bool loss_sum_due(int step, int steps, int log_every, int next_sum) {
    return step == 0 || step + 1 == steps ||
           (log_every > 0 ? (step + 1) % log_every == 0 : step == next_sum);
}

/* Rank 0's word on how many steps after this one the next loss sum is: about UN_TRAIN_LINE_S of
 * steps at the pace of the last `n` (`seconds` in all). */
static double loss_sum_every(int n, double seconds) {
    double k = n > 0 && seconds > 0 ? floor(UN_TRAIN_LINE_S * n / seconds) : 1;
    return k < 1 ? 1 : k > 1e8 ? 1e8 : k;
}

/* A step's phases, each begun by a mark of the meet trace (un_comm_mark, whose clock gives
 * --node-times its phase times): making the batch, forward, loss, backward, the loss all-reduce,
 * the update, and the report (the step line, until the next step's batch). */
enum { PH_BATCH, PH_FWD, PH_LOSS, PH_BWD, PH_ALLREDUCE, PH_UPDATE, PH_REPORT, PH_N };
static const char *const ph_mark[PH_N] = {"batch",    "forward", "loss",  "backward",
                                          "loss-sum", "update",  "report"};
/* --node-times' columns of a step: the phases, the step (forward to the report) last */
enum { PH_STEP = PH_N, PH_COLS };

/* --node-times: per timed step of device 0, each node's forward and backward seconds, the
 * gradient zeroing's (un_exec_node_seconds) and the step's phases (PH_*, PH_STEP). */
typedef struct node_times {
    int cols, rows, cap; /* cols: 2 (n + 1) + PH_COLS */
    double *v;           /* rows x cols */
} node_times;

/* A step's row from its phase marks `at`; prev_report: the previous step's report mark (its
 * report phase runs to this step's batch mark). */
static void node_times_add(node_times *nt, const un_exec *ex, int32_t n, const double *at,
                           double prev_report) {
    if (nt->rows == nt->cap)
        nt->v = un_xrealloc(nt->v, sizeof *nt->v * (size_t)nt->cols *
                                       (size_t)(nt->cap = nt->cap ? 2 * nt->cap : 64));
    double *r = nt->v + (size_t)nt->rows++ * (size_t)nt->cols;
    for (int32_t id = 0; id <= n; id++)
        for (int b = 0; b < 2; b++)
            r[2 * id + b] = un_exec_node_seconds(ex, id, b);
    double *ph = r + 2 * (n + 1);
    for (int k = 0; k < PH_REPORT; k++)
        ph[k] = at[k + 1] - at[k];
    ph[PH_REPORT] = at[PH_BATCH] - prev_report;
    ph[PH_STEP] = at[PH_REPORT] - at[PH_FWD];
}

/* The median of column c, in microseconds. */
static double node_times_median_us(const node_times *nt, int c, double *tmp) {
    for (int i = 0; i < nt->rows; i++)
        tmp[i] = nt->v[(size_t)i * (size_t)nt->cols + (size_t)c];
    return 1e6 * un_median(tmp, nt->rows);
}

static void node_times_print(FILE *f, const node_times *nt, const un_graph *g) {
    int32_t n = un_graph_node_count(g);
    double *tmp = un_xcalloc((size_t)nt->rows + 1, sizeof *tmp), fwd = 0, bwd = 0;
    fprintf(f, "node times, device 0, median of %d steps (us):\n", nt->rows);
    fprintf(f, "  %-24s %-14s %10s %10s\n", "node", "op", "forward", "backward");
    for (int32_t id = 0; id < n; id++) {
        const un_node *nd = un_graph_node(g, id);
        double a = node_times_median_us(nt, 2 * id, tmp),
               b = node_times_median_us(nt, 2 * id + 1, tmp);
        fwd += a;
        bwd += b;
        if (un_op_kind_of(nd->op) != UN_OPK_SOURCE || a + b > 0)
            fprintf(f, "  %-24s %-14s %10.3f %10.3f\n", nd->name ? nd->name : "-",
                    un_op_name(nd->op), a, b);
    }
    fprintf(f, "  %-24s %-14s %10.3f %10.3f\n", "(zeroing gradients)", "-",
            node_times_median_us(nt, 2 * n, tmp), node_times_median_us(nt, 2 * n + 1, tmp));
    fprintf(f, "  %-24s %-14s %10.3f %10.3f\n", "(sum of node medians)", "-", fwd, bwd);
    /* in the order of a step, the step before the report that follows it */
    static const int order[PH_COLS] = {PH_BATCH,     PH_FWD,    PH_LOSS, PH_BWD,
                                       PH_ALLREDUCE, PH_UPDATE, PH_STEP, PH_REPORT};
    static const char *const name[PH_COLS] = {[PH_BATCH] = "batch",
                                              [PH_FWD] = "forward",
                                              [PH_LOSS] = "loss",
                                              [PH_BWD] = "backward",
                                              [PH_ALLREDUCE] = "loss all-reduce",
                                              [PH_UPDATE] = "update",
                                              [PH_REPORT] = "report",
                                              [PH_STEP] = "step"};
    for (int k = 0; k < PH_COLS; k++)
        fprintf(f, "phase %-16s %10.3f\n", name[order[k]],
                node_times_median_us(nt, 2 * (n + 1) + order[k], tmp));
    free(tmp);
}

/* Room for a step's events in the meet trace: its marks and two per meet (a few meets a step
 * for the data strategy, more for chunked weights and tensor plans). */
#define TRACE_EVENTS_PER_STEP 256

/* UN_MEET_TRACE=PREFIX: this rank's meet trace (un_comm_trace: the timed steps' meets and the
 * phases between them) into PREFIX.RANK, one event a line, "SECONDS WHAT";
 * scripts/bench/meet_skew.py reads them. */
static un_status write_trace(un_ctx *ctx, un_comm *comm, const char *prefix) {
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", prefix, un_comm_rank(comm));
    FILE *f = fopen(path, "w");
    if (!f)
        return un_ctx_error(ctx, UN_ERR_IO, "UN_MEET_TRACE: cannot write '%s'", path);
    int64_t n, dropped;
    const un_comm_event *ev = un_comm_trace(comm, &n, &dropped);
    for (int64_t i = 0; i < n; i++)
        fprintf(f, "%.9f %s\n", ev[i].t, ev[i].what);
    if (dropped)
        fprintf(f, "# %lld events dropped\n", (long long)dropped);
    if (fclose(f) != 0)
        return un_ctx_error(ctx, UN_ERR_IO, "UN_MEET_TRACE: cannot write '%s'", path);
    return UN_OK;
}

static un_status rank_run(un_ctx *ctx, un_comm *comm, shared *sh) {
    const un_train_opts *o = sh->o;
    const tmodel *m = sh->m;
    un_prec prec = o->prec;
    size_t fes = prec == UN_PREC_F32 ? 4 : 8;
    un_backend *be = NULL;
    un_exec *ex = NULL;
    un_optim *opt = NULL;
    void *labels = NULL, *host[UN_ZOO_MAX_INPUTS] = {0};
    un_buffer *dlabels = NULL; /* the labels on the backend, where the loss reads them */
    int rank = un_comm_rank(comm);
    size_t lbytes = (size_t)m->label_numel * (m->loss == UN_LOSS_CE ? sizeof(int64_t) : fes);
    un_status st = backend_make(ctx, sh, comm, &be);
    if (st == UN_OK)
        st = memory_check(ctx, sh, comm, be);
    if (st == UN_OK)
        st = un_exec_new(ctx, sh->g, comm, be, &ex);
    if (st == UN_OK)
        st = setup_weights(ctx, sh, ex, be, &opt);
    if (st == UN_OK)
        st = un_buffer_new(ctx, be, lbytes, &dlabels);
    if (st == UN_OK) {
        labels = calloc(1, lbytes);
        for (int i = 0; i < m->n_inputs && labels; i++) {
            int64_t numel = un_shape_numel(un_graph_shape(sh->g, (un_ref){sh->in_node[i], 0}));
            host[i] = calloc((size_t)numel, m->in_int[i] ? sizeof(int64_t) : fes);
            if (!host[i]) {
                free(labels);
                labels = NULL;
            }
        }
        if (!labels)
            st = un_ctx_error(ctx, UN_ERR_NOMEM, "no memory for the inputs and labels");
    }
    st = un_comm_agree(ctx, comm, st);
    if (st == UN_OK)
        st = un_exec_plane_open(ctx, ex);
    if (st == UN_OK && rank == 0)
        sh->plane = un_exec_plane_name(ex);
    if (st == UN_OK && rank == 0 && !o->quiet) { /* once set-up succeeded: errors print nothing */
        fprintf(o->out, "blas: %s\n", un_blas_describe());
        /* how pieces move between devices when there are several and the host cannot reach them */
        char moves[96] = "";
        if (un_comm_size(comm) > 1 && !un_backend_host_visible(be))
            snprintf(moves, sizeof moves, "; exchanges %s%s",
                     sh->plane ? "on the device plane " : "staged through host memory",
                     sh->plane ? sh->plane : "");
        if (strcmp(sh->backend, "cuda") == 0) {
            char name[128] = "?";
            un_backend_cuda_device_name(0, name, sizeof name);
            fprintf(o->out,
                    "backend: %s, one GPU per rank (its rank on the machine mod %d GPUs; "
                    "GPU 0: %s)%s\n",
                    un_backend_name(be), sh->gpus, name, moves);
        } else {
            fprintf(o->out, "backend: %s%s\n", un_backend_name(be), moves);
        }
    }
    /* A loaded run continues where the checkpoint stopped: same data, same dropout masks. */
    int start = st == UN_OK ? (int)un_optim_steps(opt) : 0;
    const un_shape *os = st == UN_OK ? un_exec_output_shape(ex, 0) : NULL;
    int first_timed = o->steps == 1 ? 0 : 1; /* as the step times */
    un_comm_stats c0 = un_comm_stats_get(comm);
    node_times nt = {.cols = 2 * (un_graph_node_count(sh->g) + 1) + PH_COLS};
    if (st == UN_OK && o->node_times && rank == 0)
        un_exec_time_nodes(ex, true);
    const char *trace = getenv("UN_MEET_TRACE"); /* a path prefix: write_trace */
    trace = trace && *trace ? trace : NULL;
    /* this rank's seconds in meets per timed step (--stats takes their median) */
    double *meet_s = un_xcalloc((size_t)o->steps, sizeof *meet_s);
    double line_t = 0, bar_t = 0, report_at = 0; /* rank 0: when the last step line and the
                                                    last progress bar went out; the last step's
                                                    report mark */
    double since_s = 0;                          /* rank 0: step seconds since the last line */
    int since = 0;                               /* ... and steps */
    /* the loss sum over the ranks: only at a step that reports it (loss_sum_due), for every step
     * since the last such, in one all-reduce: this rank's part of each step's loss, and rank 0's
     * word on when the next sum is (the others add 0) */
    double *part = un_xcalloc((size_t)o->steps + 1, sizeof *part);
    int summed = 0, next_sum = 0, sum_step = 0; /* the first step not summed yet; the next
                                                   agreed sum; the last sum's step */
    double sum_at = 0;                          /* the batch mark of the last sum's step */
    for (int step = 0; st == UN_OK && step < o->steps; step++) {
        double at[PH_N]; /* when each phase began: the marks of the meet trace (one clock) */
        if (trace && step == first_timed)
            un_comm_trace_start(comm, (int64_t)(o->steps - step) * TRACE_EVENTS_PER_STEP);
        at[PH_BATCH] = un_comm_mark(comm, ph_mark[PH_BATCH]);
        /* The step's time excludes making the batch and writing it to the backend (as a
         * framework's loop that gets its batch from a loader does): forward, loss, backward,
         * update. */
        if ((st = make_batch(ctx, sh, ex, be, start + step, prec, host, labels)) != UN_OK ||
            (st = un_buffer_write(ctx, dlabels, 0, labels, lbytes)) != UN_OK) {
            un_comm_abort(comm); /* the other ranks may be waiting in a collective */
            break;
        }
        un_comm_stats s0 = un_comm_stats_get(comm);
        if (step == first_timed)
            c0 = s0;
        at[PH_FWD] = un_comm_mark(comm, ph_mark[PH_FWD]);
        uint64_t dseed = un_mix64(un_hash_combine(o->seed, (uint64_t)(start + step))) | 1;
        if ((st = un_exec_forward(ctx, ex, dseed)) != UN_OK)
            break;
        int np;
        const un_exec_piece *pc = un_exec_output_pieces(ex, 0, &np);
        at[PH_LOSS] = un_comm_mark(comm, ph_mark[PH_LOSS]);
        double loss = 0;
        un_kt target = {.dtype = m->loss == UN_LOSS_CE ? UN_DT_INT : UN_DT_FLOAT,
                        .rank = m->loss == UN_LOSS_CE ? 1 : os->rank,
                        .data = un_buffer_at(dlabels, 0)};
        memcpy(target.dim, os->dim, sizeof target.dim);
        for (int i = 0; i < np && st == UN_OK; i++) {
            if (pc[i].copy != 0)
                continue;
            un_kt y = {.dtype = UN_DT_FLOAT, .rank = os->rank, .data = pc[i].val};
            un_kt gy = {.dtype = UN_DT_FLOAT, .rank = os->rank, .data = pc[i].grad};
            memcpy(y.dim, pc[i].dim, sizeof y.dim);
            memcpy(gy.dim, pc[i].dim, sizeof gy.dim);
            double one;
            st = un_backend_loss(ctx, be, m->loss, &y, pc[i].off, os->dim, &target, &gy, &one);
            loss += one;
        }
        if (st != UN_OK) {
            un_comm_abort(comm);
            break;
        }
        at[PH_BWD] = un_comm_mark(comm, ph_mark[PH_BWD]);
        if ((st = un_exec_backward(ctx, ex)) != UN_OK)
            break;
        at[PH_ALLREDUCE] = un_comm_mark(comm, ph_mark[PH_ALLREDUCE]);
        part[step] = loss;
        bool sum = loss_sum_due(step, o->steps, o->log_every, next_sum);
        if (sum) {
            /* the pace: from the last sum's step (or this first one) to here */
            double since_sum = at[PH_ALLREDUCE] - (step == 0 ? at[PH_BATCH] : sum_at);
            part[step + 1] = rank == 0 ? loss_sum_every(step - sum_step + 1, since_sum) : 0;
            if ((st = un_comm_allreduce(ctx, comm, UN_RED_F64, part + summed, step + 2 - summed)) !=
                UN_OK)
                break;
            next_sum = step + (int)part[step + 1];
            double scale = (double)(m->loss == UN_LOSS_CE ? os->dim[0] : un_shape_numel(os));
            for (int k = summed; k <= step && rank == 0; k++)
                sh->losses[k] = part[k] / scale;
            loss = part[step] / scale;
            summed = step + 1;
            sum_step = step;
            sum_at = at[PH_BATCH];
        }
        at[PH_UPDATE] = un_comm_mark(comm, ph_mark[PH_UPDATE]);
        if ((st = un_exec_update(ctx, ex, opt)) != UN_OK)
            break;
        /* A step ends when its update has run: on an asynchronous backend (CUDA) the backward and
         * the update are still queued here, and the next write of a batch would wait for them
         * outside the clock. */
        if ((st = un_backend_synchronize(ctx, be)) != UN_OK)
            break;
        at[PH_REPORT] = un_comm_mark(comm, ph_mark[PH_REPORT]);
        double dt = at[PH_REPORT] - at[PH_FWD];
        meet_s[step] = un_comm_stats_get(comm).seconds - s0.seconds;
        if (o->node_times && rank == 0 && step >= first_timed)
            node_times_add(&nt, ex, un_graph_node_count(sh->g), at,
                           step > 0 ? report_at : at[PH_BATCH]);
        report_at = at[PH_REPORT];
        if (rank == 0) {
            sh->step_s[step] = dt;
            if (step > 0 || o->steps == 1) {
                sh->step_time_sum += dt;
                sh->timed_steps++;
            }
            since_s += dt;
            since++;
            /* a line every --log-every steps, else every UN_TRAIN_LINE_S; its samples/s over
             * the steps since the last line */
            bool due = sum && (step == 0 || step + 1 == o->steps ||
                               (o->log_every ? (step + 1) % o->log_every == 0
                                             : at[PH_REPORT] - line_t >= UN_TRAIN_LINE_S));
            double sps = (double)m->batch * since / since_s;
            if (due && !o->quiet) {
                un_ctx_progress(ctx, "%s", "");
                fprintf(o->out, "step %d/%d  loss %.6f  %.0f samples/s\n", step + 1, o->steps, loss,
                        sps);
                fflush(o->out);
            }
            if (due) {
                line_t = at[PH_REPORT];
                since_s = 0;
                since = 0;
            }
            if (sum &&
                (step == 0 || step + 1 == o->steps || at[PH_REPORT] - bar_t >= UN_TRAIN_LINE_S)) {
                progress(ctx, sh, step + 1, loss, sps); /* a terminal's bar: as often as a line */
                bar_t = at[PH_REPORT];
            }
        }
    }
    un_comm_mark(comm, "end");
    un_comm_stats c1 = un_comm_stats_get(comm); /* the steps' meets, not the trace's or save's */
    if (st == UN_OK && trace)                   /* a rank that cannot write it fails them all */
        st = un_comm_agree(ctx, comm, write_trace(ctx, comm, trace));
    if (st == UN_OK && o->save)
        st = save_weights(ctx, sh, comm, ex, be, opt);
    if (st == UN_OK) {
        int n = o->steps - first_timed;
        double per[4] = {(double)(c1.meets - c0.meets) / n, (double)(c1.sleeps - c0.sleeps) / n,
                         1e3 * un_median(meet_s + first_timed, n),
                         (double)(c1.unpolled - c0.unpolled) / n};
        st = report_stats(ctx, sh, comm, ex, opt, per);
    }
    free(meet_s);
    free(part);
    if (st == UN_OK && nt.rows > 0)
        node_times_print(o->out, &nt, sh->g);
    free(nt.v);
    free(labels);
    for (int i = 0; i < m->n_inputs; i++)
        free(host[i]);
    un_buffer_free(dlabels);
    un_optim_free(opt);
    un_exec_free(ex);
    un_backend_free(be);
    return st;
}

typedef struct local_job {
    shared *sh;
    un_comm_group *grp;
    int rank;
    un_status st;
    char err[1024];
} local_job;

static void *local_main(void *p) {
    local_job *j = p;
    un_ctx *ctx = un_ctx_new_child(j->sh->parent);
    un_comm *c = un_comm_local_get(j->grp, j->rank);
    j->st = rank_run(ctx, c, j->sh);
    if (j->st != UN_OK)
        un_comm_abort(c);
    snprintf(j->err, sizeof j->err, "%s", un_ctx_errmsg(ctx));
    un_ctx_free(ctx);
    return NULL;
}

static un_status run_local(un_ctx *ctx, shared *sh, int d) {
    if (d == 1) { /* no thread needed */
        un_comm_group *grp;
        un_status st = un_comm_local_group_new(ctx, 1, &grp);
        if (st != UN_OK)
            return st;
        st = rank_run(ctx, un_comm_local_get(grp, 0), sh);
        un_comm_local_group_free(grp);
        return st;
    }
    un_comm_group *grp;
    un_status st = un_comm_local_group_new(ctx, d, &grp);
    if (st != UN_OK)
        return st;
    local_job *jobs = un_xcalloc((size_t)d, sizeof *jobs);
    pthread_t *th = un_xcalloc((size_t)d, sizeof *th);
    int started = 0;
    for (int r = 0; r < d; r++) {
        jobs[r] = (local_job){.sh = sh, .grp = grp, .rank = r};
        if (pthread_create(&th[r], NULL, local_main, &jobs[r]) != 0) {
            un_comm_abort(un_comm_local_get(grp, 0));
            st = un_ctx_error(ctx, UN_ERR_DEVICE, "cannot start the thread of device %d", r);
            break;
        }
        started++;
    }
    for (int r = 0; r < started; r++)
        pthread_join(th[r], NULL);
    if (st == UN_OK) { /* the first real failure, not a rank that saw another one fail */
        int pick = -1;
        for (int r = 0; r < d; r++)
            if (jobs[r].st != UN_OK && (pick < 0 || jobs[pick].st == UN_ERR_DEVICE))
                pick = r;
        if (pick >= 0)
            st = un_ctx_error(ctx, jobs[pick].st, "%s", jobs[pick].err);
    }
    free(th);
    free(jobs);
    un_comm_local_group_free(grp);
    return st;
}

/* ---- the entry point ---- */

static un_status load_text(un_ctx *ctx, const char *path, int64_t need, unsigned char **out,
                           size_t *len) {
    char *text = NULL;
    un_status st = un_read_file(ctx, path, &text, len);
    if (st != UN_OK)
        return st;
    if ((int64_t)*len < need + 1) {
        free(text);
        return un_ctx_error(ctx, UN_ERR_INVALID,
                            "%s: %zu bytes of text, a training window needs at least %lld", path,
                            *len, (long long)need + 1);
    }
    *out = (unsigned char *)text;
    return UN_OK;
}

/* What each rank will allocate (sh->need), before anything is: every rank of a local run, this
 * process's under mpi. The executor's own estimate with the optimizer state (exec.h) and, on
 * backends running the CPU kernels, their forward stash and largest scratch; on cpu, whose device
 * memory is the host's, also the host arrays held beside them: while a one-file checkpoint is
 * streamed to rank 0, one weight (rank 0: two; save_weights). Initialisation holds no logical
 * weights (each rank computes its own pieces, setup_weights). */
static void need_fill(shared *sh, const un_graph *g, int d, un_comm *mpi) {
    un_optim_algo k = UN_OPTIM_ADAM;
    un_optim_algo_from_name(sh->o->optimizer, &k);
    int arrays = k == UN_OPTIM_ADAM ? 2 : 1;
    bool stash = strncmp(sh->backend, "cuda", 4) != 0, host = strcmp(sh->backend, "cpu") == 0;
    int64_t big = 0; /* the largest weight's bytes */
    for (int32_t id = 0; id < un_graph_node_count(g); id++)
        if (un_graph_node(g, id)->op == UN_OP_WEIGHT) {
            int64_t n = un_shape_numel(&un_graph_node(g, id)->inf.out[0]);
            big = n > big ? n : big;
        }
    big *= sh->o->prec == UN_PREC_F32 ? 4 : 8;
    bool stream = host && sh->o->save && (!mpi || un_comm_size(mpi) == 1);
    sh->need = un_xcalloc((size_t)d, sizeof *sh->need);
    for (int r = 0; r < d; r++) {
        if (mpi && r != un_comm_rank(mpi))
            continue;
        int64_t e = un_exec_estimate_bytes(g, r, d, sh->o->prec, host && !mpi, arrays,
                                           stash ? sh->threads : 0);
        sh->need[r] = e < 0 ? e : e + (stream ? (r == 0 ? 2 : 1) * big : 0);
    }
}

un_status un_train_run(un_ctx *ctx, const un_train_opts *o, un_train_result *res) {
    memset(res, 0, sizeof *res);
    un_spec *spec = NULL;
    tmodel m;
    memset(&m, 0, sizeof m);
    un_graph *run_g = NULL;
    un_comm *mpi = NULL;
    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.parent = ctx;
    bool use_mpi = strcmp(o->comm, "mpi") == 0, in_run = false;
    un_status st = UN_OK;
    if (use_mpi) { /* first, so that only rank 0 reports any error below */
        if ((st = un_comm_mpi_new(ctx, &mpi)) != UN_OK)
            goto done;
        res->rank = un_comm_rank(mpi);
        if (o->devices && o->devices != un_comm_size(mpi)) {
            st = un_ctx_error(ctx, UN_ERR_INVALID,
                              "--devices %d, but mpirun started %d processes (--comm mpi uses "
                              "one device per process)",
                              o->devices, un_comm_size(mpi));
            goto done;
        }
    }
    if ((st = un_train_backend(ctx, o, &sh.backend, &sh.gpus)) != UN_OK)
        goto done;
    if (o->save && res->rank == 0) { /* a checkpoint that cannot be written fails before training */
        char probe[4096];
        snprintf(probe, sizeof probe, "%s.tmp", o->save);
        FILE *f = fopen(probe, "wb");
        if (!f) {
            st = un_ctx_error(ctx, UN_ERR_IO, "--save %s: cannot write: %s", o->save,
                              strerror(errno));
            goto done;
        }
        fclose(f);
        remove(probe);
    }
    if ((st = un_spec_load(ctx, o->spec, &spec)) != UN_OK)
        goto done;
    int d = use_mpi ? un_comm_size(mpi) : o->devices ? o->devices : 1;
    if ((st = model_load(ctx, spec, o, d, &m)) != UN_OK)
        goto done;
    const char *strategy = o->strategy ? o->strategy : d == 1 ? "serial" : "data";
    if ((st = un_strategy_named(ctx, spec, m.g, strategy, d, &run_g)) != UN_OK)
        goto done;
    { /* weights stored as the pieces the plan uses (the estimate sees the plan as written) */
        un_graph *folded = NULL;
        st = un_strategy_fold_weights(ctx, run_g, &folded);
        un_graph_free(run_g);
        run_g = folded;
        if (st != UN_OK)
            goto done;
    }
    for (int i = 0; i < m.n_inputs; i++) {
        sh.in_node[i] = un_graph_find(run_g, m.in_name[i]);
        if (sh.in_node[i] < 0) {
            st = un_ctx_error(ctx, UN_ERR_INVALID, "input '%s' is missing from the graph run",
                              m.in_name[i]);
            goto done;
        }
    }
    const un_shape *os = un_graph_shape(run_g, un_graph_output(run_g, 0));
    if (os->sum != 1 || (m.loss == UN_LOSS_CE && os->rank == 2 && os->shard[1] != 1)) {
        st = un_ctx_error(ctx, UN_ERR_SHAPE, "the output's layout must have no partial sums%s",
                          m.loss == UN_LOSS_CE ? " and no split of the classes" : "");
        goto done;
    }
    if (o->data) {
        if (m.n_inputs != 1 || !m.in_int[0] || m.loss != UN_LOSS_CE) {
            st = un_ctx_error(ctx, UN_ERR_INVALID,
                              "--data %s: text trains a token model (one int input, "
                              "cross-entropy) such as charlm, not '%s'",
                              o->data, o->model);
            goto done;
        }
        int64_t numel =
            un_shape_numel(un_graph_shape(m.g, (un_ref){un_graph_find(m.g, m.in_name[0]), 0}));
        if (numel != m.label_numel) {
            st = un_ctx_error(ctx, UN_ERR_INVALID,
                              "--data: the model's %lld tokens and %lld labels differ",
                              (long long)numel, (long long)m.label_numel);
            goto done;
        }
        if ((st = load_text(ctx, o->data, numel / m.seqs, &sh.text, &sh.text_len)) != UN_OK)
            goto done;
    }
    sh.o = o;
    sh.g = run_g;
    sh.m = &m;
    int local_ranks = use_mpi ? un_comm_node_size(mpi) : d; /* ranks sharing the cores */
    sh.threads = o->threads / local_ranks > 1 ? o->threads / local_ranks : 1;
    sh.losses = un_xcalloc((size_t)o->steps, sizeof *sh.losses);
    sh.step_s = un_xcalloc((size_t)o->steps, sizeof *sh.step_s);
    sh.devices = d;
    sh.dev = un_xcalloc((size_t)d, sizeof *sh.dev);
    un_blas_init(); /* before the rank threads: the choice sets and unsets an environment variable
                     */
    need_fill(&sh, run_g, d, use_mpi ? mpi : NULL);
    in_run = true; /* from here a failure is agreed by the ranks or aborts the job */
    if (use_mpi)
        st = rank_run(ctx, mpi, &sh);
    else
        st = run_local(ctx, &sh, d);
    if (st != UN_OK)
        goto done;
    res->steps = o->steps;
    res->losses = sh.losses;
    sh.losses = NULL;
    res->devices = d;
    res->dev = sh.dev;
    sh.dev = NULL;
    res->batch = m.batch;
    res->step_ms = sh.timed_steps ? 1e3 * sh.step_time_sum / sh.timed_steps : 0;
    if (res->rank == 0) /* the steps after the first, as the mean */
        res->step_ms_median =
            1e3 * un_median(sh.step_s + (o->steps > 1), o->steps - (o->steps > 1));
    res->samples_per_s =
        sh.step_time_sum > 0 ? (double)m.batch * sh.timed_steps / sh.step_time_sum : 0;
    if (res->rank == 0 && !o->quiet) /* before the summary, which stays the last line */
        fprintf(o->out, "median step: %.4f ms\n", res->step_ms_median);
    if (res->rank == 0 && !o->quiet)
        fprintf(o->out,
                "trained %s: %d steps on %d device%s (%s, %s), loss %.4f -> %.4f, %.3f ms/step, "
                "%.0f samples/s\n",
                o->model, o->steps, d, d == 1 ? "" : "s", strategy, o->comm, res->losses[0],
                res->losses[o->steps - 1], res->step_ms, res->samples_per_s);
    if (res->rank == 0 && o->stats) {
        fprintf(o->out, "device  weights(B)  optimizer(B)  peak(B)  need(B)  sent/step(B)  "
                        "recv/step(B)  copied/step(B)  link\n");
        for (int i = 0; i < d; i++) {
            const un_train_dev_stats *x = &res->dev[i];
            fprintf(o->out, "%6d  %10lld  %12lld  %7lld  %7lld  %12lld  %12lld  %14lld  %s%s%s\n",
                    i, (long long)x->weight_bytes, (long long)x->optim_bytes,
                    (long long)x->peak_bytes, (long long)x->need_bytes, (long long)x->sent,
                    (long long)x->recv, (long long)x->copied, use_mpi ? "mpi" : "local",
                    sh.plane ? " + " : "", sh.plane ? sh.plane : "");
        }
        if (d > 1) {
            fprintf(o->out, "device  meets/step  slept/step  in meets(ms/step, median)  "
                            "unpolled/step\n");
            for (int i = 0; i < d; i++)
                fprintf(o->out, "%6d  %10.2f  %10.2f  %28.4f  %13.2f\n", i, res->dev[i].meets,
                        res->dev[i].sleeps, res->dev[i].meet_ms, res->dev[i].unpolled);
        }
    }
done:
    if (mpi && st != UN_OK && !in_run) {
        /* Every rank found the same failure (the same flags and files): rank 0 reports it while
         * the others wait, so that no process exits before the report is out. */
        if (res->rank == 0 && o->err) {
            fprintf(o->err, "unity-train: %s\n", un_ctx_errmsg(ctx));
            fflush(o->err);
            res->reported = true;
        }
        un_ctx *c2 = un_ctx_new_child(ctx);
        un_comm_barrier(c2, mpi);
        un_ctx_free(c2);
    }
    free(sh.dev);
    free(sh.need);
    free(sh.losses);
    free(sh.step_s);
    free(sh.text);
    un_graph_free(run_g);
    model_free(&m);
    un_spec_free(spec);
    un_comm_free(mpi);
    return st;
}
