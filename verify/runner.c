/* runner.c - the per-rule verification pipeline and the database driver (runner.h). */
#include "verify/runner.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rulesdb/rulesdb.h"
#include "verify/axcheck.h"

static const int64_t try_degrees[] = {2, 3, 4, 6, 8};
#define N_TRY ((int)(sizeof try_degrees / sizeof try_degrees[0]))
/* Values tried for a rule's own variables (degrees, but also dims: 0 and 1 too); where a side is
 * not well formed at a value, that value is skipped. */
static const int64_t try_values[] = {0, 1, 2, 3, 4, 6, 8};
#define N_TRY_VALUES ((int)(sizeof try_values / sizeof try_values[0]))

un_runner_opts un_runner_opts_default(void) {
    return (un_runner_opts){.timeout_ms = 2000,
                            .jobs = 1,
                            .seed = 1234,
                            .batch = 16,
                            .shard_n = 0,
                            .shard_i = 0,
                            .lease_s = 60};
}

void un_verify_verdict_deinit(un_verify_verdict *v) {
    if (!v)
        return;
    un_rule_free(v->general);
    v->general = NULL;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* CPU time of the calling thread, ms. */
static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- random tests --------------------------------------------------------------------------- */

/* Checks r (already instantiated) in the given domains: 1 holds, -1 differs (message in ctx),
 * 0 could not be evaluated (message in ctx). */
static int check_doms(un_ctx *ctx, const un_rule *r, uint64_t seed, bool both) {
    for (int d = 0; d < (both ? UN_DOM_COUNT : 1); d++) {
        un_status st = un_rule_check_random(ctx, r, (un_dom)d, seed + (uint64_t)d, NULL);
        if (st == UN_ERR_MISMATCH) {
            /* name the domain and the seed, so the counterexample can be replayed */
            char msg[512];
            snprintf(msg, sizeof msg, "%s (%s, inputs seeded %llu)", un_ctx_errmsg(ctx),
                     d == UN_DOM_FIELD ? "prime field" : "float64",
                     (unsigned long long)(seed + (uint64_t)d));
            un_ctx_clear(ctx);
            un_ctx_error(ctx, UN_ERR_MISMATCH, "%s", msg);
            return -1;
        }
        if (st != UN_OK)
            return 0;
    }
    return 1;
}

/* The rule at variable values `values` and input shapes `shapes` (NULL: as is): 1 holds, 0 not
 * applicable there (a side is not well formed), -1 differs (message in ctx). */
static int check_instance(un_ctx *ctx, const un_rule *r, const int64_t *values,
                          const un_shape *shapes, uint64_t seed) {
    un_rule *inst = NULL;
    un_status st = un_rule_instantiate(ctx, r, values, shapes, &inst);
    if (st == UN_ERR_MISMATCH)
        return -1; /* both sides well formed, outputs of different shapes or layouts */
    if (st != UN_OK) {
        un_ctx_clear(ctx);
        return 0;
    }
    int res = check_doms(ctx, inst, seed, false);
    if (res == 0)
        un_ctx_clear(ctx);
    un_rule_free(inst);
    return res;
}

static void values_str(const un_rule *r, const int64_t *values, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < r->n_vars && len < n; i++) {
        int w = snprintf(buf + len, n - len, "%s%s=%lld", i ? "," : "", r->vars[i].name,
                         (long long)values[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

/* Random tests: at the witness (both domains), at other values of each variable, at doubled input
 * sizes. 1 passed; -1 refuted (out->detail set); 0 the witness cannot be evaluated. */
static int random_tests(un_ctx *ctx, const un_rule *r, uint64_t seed, un_verify_verdict *out) {
    int res = check_doms(ctx, r, seed, true);
    if (res <= 0) {
        snprintf(out->detail, sizeof out->detail, "%s%s",
                 res < 0 ? "random test at the witness: " : "cannot evaluate the witness: ",
                 un_ctx_errmsg(ctx));
        un_ctx_clear(ctx);
        return res;
    }
    int64_t values[UN_RULE_MAX_VARS];
    for (int i = 0; i < r->n_vars; i++)
        values[i] = r->vars[i].value;
    for (int i = 0; i < r->n_vars; i++) {
        for (int t = 0; t < N_TRY_VALUES; t++) {
            if (try_values[t] == r->vars[i].value)
                continue;
            values[i] = try_values[t];
            if (check_instance(ctx, r, values, NULL, seed + 7) < 0) {
                char vs[128];
                values_str(r, values, vs, sizeof vs);
                snprintf(out->detail, sizeof out->detail, "random test at %s: %s", vs,
                         un_ctx_errmsg(ctx));
                un_ctx_clear(ctx);
                return -1;
            }
        }
        values[i] = r->vars[i].value;
    }
    int n_in = un_rule_input_count(r);
    un_shape *shapes = un_xcalloc((size_t)(n_in ? n_in : 1), sizeof *shapes);
    for (int i = 0; i < n_in; i++) {
        shapes[i] = *un_graph_shape(r->src, (un_ref){un_rule_input_src(r, i), 0});
        for (int j = 0; j < shapes[i].rank; j++)
            shapes[i].dim[j] *= 2;
    }
    res = check_instance(ctx, r, values, shapes, seed + 11);
    free(shapes);
    if (res < 0) {
        snprintf(out->detail, sizeof out->detail, "random test at doubled input sizes: %s",
                 un_ctx_errmsg(ctx));
        un_ctx_clear(ctx);
        return -1;
    }
    return 1;
}

/* ---- generalization over degrees ------------------------------------------------------------ */

/* Positions holding a concrete degree (parallel ops' degree; input layouts' shard, sum and copy
 * degrees) of value w that no variable binds yet. Returns how many were written to binds. */
static int degree_binds(const un_rule *r, int64_t w, un_rule_bind *binds, int max) {
    int n = 0;
    for (int side = 0; side < 2; side++) {
        const un_graph *g = side ? r->dst : r->src;
        const un_spec *spec = un_graph_spec(g);
        for (int32_t id = 0; id < un_graph_node_count(g); id++) {
            const un_node *nd = un_graph_node(g, id);
            const un_op_spec *os = un_spec_op(spec, nd->op);
            un_op_kind kind = un_op_kind_of(nd->op);
            static const char *const names[] = {"degree", "shard", "sum", "copy"};
            for (int k = 0; k < 4; k++) {
                if ((kind == UN_OPK_PARALLEL) != (k == 0) || kind == UN_OPK_REGULAR)
                    continue;
                int p = un_spec_param_index(os, names[k]);
                if (p < 0)
                    continue;
                const un_param *pv = &nd->params[p];
                int items = pv->len < 0 ? 1 : pv->len;
                for (int it = 0; it < items; it++) {
                    int item = pv->len < 0 ? -1 : it;
                    if (pv->v[it] != w || un_rule_var_at(r, side, id, p, item) >= 0)
                        continue;
                    if (n == max)
                        return -1;
                    binds[n++] = (un_rule_bind){(int8_t)side, id, (int8_t)p, (int8_t)item};
                }
            }
        }
    }
    return n;
}

static void fresh_var_name(const un_rule *r, char *name, size_t n) {
    static const char *const cands[] = {"k", "j", "m", "k2", "k3", "k4", "k5", "k6"};
    for (size_t c = 0; c < sizeof cands / sizeof cands[0]; c++) {
        bool used = false;
        for (int i = 0; i < r->n_vars; i++)
            used = used || strcmp(r->vars[i].name, cands[c]) == 0;
        if (!used) {
            snprintf(name, n, "%s", cands[c]);
            return;
        }
    }
    snprintf(name, n, "v%d", r->n_vars);
}

/* Turns each concrete degree into a variable when the rule holds at every tried degree where it
 * is well formed (at least two besides the witness). Returns the general rule (owned) or NULL. */
static un_rule *generalize(un_ctx *ctx, const un_rule *r, uint64_t seed, int *n_new) {
    un_rule *cur = NULL;
    *n_new = 0;
    int64_t seen[16];
    int n_seen = 0;
    for (int round = 0; round < 8; round++) {
        const un_rule *base = cur ? cur : r;
        if (base->n_vars >= UN_RULE_MAX_VARS)
            break;
        /* the next unbound degree value */
        int64_t w = 0;
        for (int64_t cand = 2; cand <= UN_MAX_DEGREE && !w; cand++) {
            bool done = false;
            for (int i = 0; i < n_seen; i++)
                done = done || seen[i] == cand;
            un_rule_bind tmp[1];
            if (!done && degree_binds(base, cand, tmp, 1) != 0)
                w = cand;
            if (cand > 64)
                break;
        }
        if (!w || n_seen == 16)
            break;
        seen[n_seen++] = w;
        un_rule_bind binds[UN_RULE_MAX_BINDS];
        int nb = degree_binds(base, w, binds, UN_RULE_MAX_BINDS);
        if (nb <= 0)
            continue;
        un_rule *cand = un_rule_clone(base);
        char name[16];
        fresh_var_name(cand, name, sizeof name);
        if (un_rule_var_add(ctx, cand, name, binds, nb) != UN_OK) {
            un_ctx_clear(ctx);
            un_rule_free(cand);
            continue;
        }
        int64_t values[UN_RULE_MAX_VARS];
        for (int i = 0; i < cand->n_vars; i++)
            values[i] = cand->vars[i].value;
        int ok = 0, bad = 0;
        /* the claim with the new variable must be exact: its side conditions computed, and
         * wherever the source and they hold, the target well formed (un_rule_check_claim) */
        if (un_rule_conds_compute(ctx, cand) != UN_OK || un_rule_check_claim(ctx, cand, 8, NULL))
            bad++;
        for (int t = 0; t < N_TRY && !bad; t++) {
            if (try_degrees[t] == w)
                continue;
            values[cand->n_vars - 1] = try_degrees[t];
            int res = check_instance(ctx, cand, values, NULL, seed + 13);
            ok += res > 0;
            bad += res < 0;
        }
        un_ctx_clear(ctx);
        if (bad || ok < 2) {
            un_rule_free(cand);
            continue;
        }
        un_rule_free(cur);
        cur = cand;
        (*n_new)++;
    }
    return cur;
}

/* ---- one rule ------------------------------------------------------------------------------- */

/* Adds a proof's work to the verdict's counters. */
static void add_work(un_verify_verdict *out, const un_proof *p) {
    out->proof_ms += p->ms;
    out->work += p->work;
    for (int k = 0; k < UN_WORK_COUNT; k++) {
        out->work_by[k] += p->work_by[k];
        out->calls_by[k] += p->calls_by[k];
    }
    out->audit_unsat += p->audit_unsat;
}

/* Whether r's claim for every input size holds on the re-check grid (un_rule_check_claim with
 * any_shape); a failure is cleared. */
static bool claim_holds(un_ctx *ctx, const un_rule *r) {
    un_rule *c = un_rule_clone(r);
    c->any_shape = true;
    bool ok = un_rule_check_claim(ctx, c, 8, NULL) == UN_OK;
    if (!ok)
        un_ctx_clear(ctx);
    un_rule_free(c);
    return ok;
}

un_status un_runner_rule(un_ctx *ctx, un_verifier *v, const un_rule *r, const un_runner_opts *o,
                         un_verify_verdict *out) {
    memset(out, 0, sizeof *out);
    un_runner_opts def = un_runner_opts_default();
    if (!o)
        o = &def;
    double t0 = now_ms();
    double c0 = cpu_ms();
    out->status = UN_RULE_UNKNOWN;
    int res = random_tests(ctx, r, o->seed, out);
    double c1 = cpu_ms();
    out->cpu_ms[UN_VERIFY_PHASE_TESTS] = c1 - c0;
    if (res < 0) {
        out->status = UN_RULE_REFUTED;
        out->ms = now_ms() - t0;
        return UN_OK;
    }
    if (res == 0) {
        out->ms = now_ms() - t0;
        return UN_OK;
    }
    /* The claim is proven under the rule's side conditions (what the target needs beyond the
     * source); where they cannot be followed the rule has none and the proof must do without. */
    un_rule *rc = un_rule_clone(r);
    if (un_rule_conds_compute(ctx, rc) != UN_OK) {
        un_ctx_clear(ctx);
        rc->n_conds = 0;
    }
    r = rc;
    un_proof p;
    memset(&p, 0, sizeof p);
    un_prove_opts po = {
        .timeout_ms = o->timeout_ms, .symbolic = true, .audit_model = o->audit_model};
    if (!o->wall_clock) {
        uint64_t rl = (uint64_t)o->timeout_ms * UN_VERIFY_RLIMIT_PER_MS;
        po.rlimit = rl < UINT32_MAX ? (unsigned)rl : UINT32_MAX;
        po.timeout_ms = o->timeout_ms < UINT32_MAX / 10 ? 10 * o->timeout_ms : UINT32_MAX;
    }
    un_status st = UN_OK;
    /* Generalization over dims, first: sizes the rule fixes (split sizes, reshape targets) become
     * variables tied to the input dims they equal; that form is the rule's proof when it passes
     * the random tests at other sizes and Z3 proves it for every size (one proof, not two, for the
     * rules it serves). Otherwise the rule as it is goes on. A form whose claim for every size
     * fails the concrete re-check (source well formed, target not, at some sizes) cannot be
     * proven: Z3 is not asked (on the N=3 set these were 80 of 81 failed dims attempts). */
    bool has_dims = false, proven = false;
    for (int a = 0; a < r->n_vars; a++)
        has_dims = has_dims || un_rule_var_is_dim(r, a);
    un_rule *dr = NULL;
    if (!has_dims && (st = un_rule_dims_generalize(ctx, r, &dr)) == UN_OK && dr) {
        un_verify_verdict scratch;
        memset(&scratch, 0, sizeof scratch);
        if (random_tests(ctx, dr, o->seed, &scratch) > 0 && claim_holds(ctx, dr) &&
            (st = un_verifier_prove(ctx, v, dr, &po, &p)) == UN_OK) {
            add_work(out, &p);
            out->work_dims += p.work;
            if (p.verdict == UN_VERDICT_VALID) {
                proven = out->any_shape = true;
                for (int a = 0; a < dr->n_vars; a++)
                    out->n_dim_vars += un_rule_var_is_dim(dr, a);
                un_rule_free(rc);
                r = rc = dr;
                dr = NULL;
            }
        }
        un_rule_free(dr);
    }
    if (st == UN_OK && !proven) {
        un_ctx_clear(ctx);
        /* without a proof for every size, the witness sizes in the same solver scope (or, where
         * the verifier cannot, in a fresh proof) */
        po.witness_retry = true;
        st = un_verifier_prove(ctx, v, r, &po, &p);
        add_work(out, &p);
        out->work_witness += p.work_witness;
        if (st == UN_OK && p.verdict == UN_VERDICT_VALID && !p.retried) {
            out->any_shape = true;
        } else if (st == UN_OK && !p.retried) {
            po.symbolic = false;
            st = un_verifier_prove(ctx, v, r, &po, &p);
            add_work(out, &p);
            out->work_witness += p.work;
        }
    }
    c0 = cpu_ms();
    out->cpu_ms[UN_VERIFY_PHASE_Z3] = c0 - c1;
    if (st != UN_OK) {
        out->ms = now_ms() - t0;
        un_rule_free(rc);
        return st;
    }
    if (p.verdict != UN_VERDICT_VALID) {
        snprintf(
            out->detail, sizeof out->detail, "%s%s",
            p.verdict == UN_VERDICT_INVALID ? "not implied by the axioms: " : "z3: ", p.detail);
        out->ms = now_ms() - t0;
        un_rule_free(rc);
        return UN_OK;
    }
    out->status = UN_RULE_VERIFIED;
    out->outputs = r->n_out;
    out->narrow = p.narrow;
    snprintf(out->axioms, sizeof out->axioms, "%s", p.axioms);
    un_rule *g = generalize(ctx, r, o->seed, &out->n_new_vars);
    if (!g)
        g = un_rule_clone(r);
    g->any_shape = out->any_shape;
    /* A dim variable claims every size: without a proof for any input size it goes (the rule is
     * then claimed at its witness sizes). */
    if (!g->any_shape)
        out->dropped_vars += un_rule_dims_drop(g);
    /* The stored claim must hold on the re-check grid; a variable it fails for (a degree bound
     * by the generator where no side condition can be followed) is dropped: the rule is then
     * claimed at its witness degrees only. A dims form proven as it was re-checked before its
     * proof (claim_holds, any_shape) is that same claim. */
    bool checked = out->n_dim_vars > 0 && out->n_new_vars == 0;
    if (!checked && un_rule_check_claim(ctx, g, 8, NULL) != UN_OK) {
        un_ctx_clear(ctx);
        out->n_new_vars = 0;
        out->dropped_vars = g->n_vars;
        g->n_vars = 0;
        if (un_rule_conds_compute(ctx, g) != UN_OK)
            g->n_conds = 0;
        if (un_rule_check_claim(ctx, g, 8, NULL) != UN_OK) {
            out->status = UN_RULE_UNKNOWN;
            snprintf(out->detail, sizeof out->detail, "proven, but its claim fails a re-check: %s",
                     un_ctx_errmsg(ctx));
            un_ctx_clear(ctx);
            un_rule_free(g);
            g = NULL;
        }
    }
    out->general = g;
    out->ms = now_ms() - t0;
    out->cpu_ms[UN_VERIFY_PHASE_GENERAL] = cpu_ms() - c0;
    un_rule_free(rc);
    return UN_OK;
}

un_status un_runner_verifier(un_ctx *ctx, const un_spec *spec, uint64_t seed, un_verifier **out,
                             int *n_lifted) {
    *out = NULL;
    if (n_lifted)
        *n_lifted = 0;
    un_status st = un_axcheck_all(ctx, spec, seed, NULL);
    un_axlift *lifts = NULL;
    int n = 0;
    if (st == UN_OK)
        st = un_axcheck_lifts(ctx, spec, seed, &lifts, &n);
    if (st == UN_OK)
        st = un_verifier_new_ex(ctx, spec, lifts, n, out);
    if (st == UN_OK && n_lifted)
        *n_lifted = n;
    free(lifts);
    return st;
}

/* ---- the database driver -------------------------------------------------------------------- */

typedef struct pending {
    int32_t id;
    un_verify_verdict v;
} pending;

typedef struct shared {
    const un_ctx *parent; /* workers' contexts inherit from it */
    const un_spec *spec;
    const un_axlift *lifts;
    int n_lifts;
    const char *path;
    const un_runner_opts *o;
    const int32_t *ids;
    int64_t n;
    pthread_mutex_t mu;
    int64_t next, finished;
    int running;
    un_runner_stats stats;
    double *ms; /* per rule */
    int64_t n_ms;
    un_status st; /* first error */
    char err[768];
    bool claims;  /* workers claim their rules in the database (not with --rule) */
    double since; /* unix time the run started: rules decided since are done */
    int n_workers;
} shared;

static void record_error(shared *sh, un_status st, const char *msg) {
    pthread_mutex_lock(&sh->mu);
    if (sh->st == UN_OK) {
        sh->st = st;
        snprintf(sh->err, sizeof sh->err, "%s", msg);
    }
    pthread_mutex_unlock(&sh->mu);
}

/* Writes the pending verdicts and drops owner's claims (NULL: none) in one transaction. */
static un_status flush(un_ctx *ctx, un_rulesdb *db, pending *pd, int *n, const char *owner) {
    un_status st = un_rulesdb_begin(ctx, db);
    if (st == UN_OK && owner)
        st = un_rulesdb_claim_release(ctx, db, owner);
    for (int i = 0; i < *n && st == UN_OK; i++) {
        un_verify_verdict *v = &pd[i].v;
        un_rulesdb_verdict rv = {.status = v->status,
                                 .detail = v->detail[0] ? v->detail : NULL,
                                 .proof_ms = v->proof_ms,
                                 .axioms = v->status == UN_RULE_VERIFIED ? v->axioms : NULL,
                                 .general = v->general};
        st = un_rulesdb_rule_set_verdict(ctx, db, pd[i].id, &rv);
    }
    if (st == UN_OK)
        st = un_rulesdb_commit(ctx, db);
    else
        un_rulesdb_rollback(db);
    for (int i = 0; i < *n; i++)
        un_verify_verdict_deinit(&pd[i].v);
    *n = 0;
    return st;
}

/* The next rule id for a worker: from the fixed list (--rule), or from the claims it holds,
 * claiming a new batch when they are used up. Claims of other verifiers that are still live are
 * waited for (their work comes back when they die and the lease expires). 0 when done.
 * A batch is looked for after the worker's last claimed id (*cursor), so a claim reads only the
 * rows up to its batch, not every row decided before it; when nothing is left there, from the
 * start again (work another verifier held and gave back), and only that can end the work. */
static un_status next_rule(un_ctx *ctx, shared *sh, un_rulesdb *db, const char *owner,
                           int32_t *cursor, int32_t *claimed, int *n_claimed, int *at,
                           int32_t *id) {
    *id = 0;
    if (!sh->claims) {
        pthread_mutex_lock(&sh->mu);
        int64_t i = sh->st == UN_OK ? sh->next++ : sh->n;
        pthread_mutex_unlock(&sh->mu);
        *id = i < sh->n ? sh->ids[i] : 0;
        return UN_OK;
    }
    while (*at == *n_claimed) {
        pthread_mutex_lock(&sh->mu);
        bool stop = sh->st != UN_OK;
        pthread_mutex_unlock(&sh->mu);
        if (stop)
            return UN_OK;
        un_rulesdb_filter f = un_rulesdb_filter_default();
        f.needs_verify = !sh->o->recheck;
        f.shard_i = sh->o->shard_i;
        f.shard_n = sh->o->shard_n;
        f.max_ops = sh->o->max_ops;
        f.undecided_since = sh->since;
        f.after_id = *cursor;
        int64_t others = 0;
        int batch = sh->o->batch > 0 ? sh->o->batch : 16;
        un_status st = un_rulesdb_claim(ctx, db, &f, owner, sh->o->lease_s, batch, claimed,
                                        n_claimed, &others);
        *at = 0;
        if (st != UN_OK)
            return st;
        *cursor = *n_claimed > 0 ? claimed[*n_claimed - 1] : 0;
        if (*n_claimed > 0)
            break;
        if (f.after_id > 0)
            continue;
        if (others == 0)
            return UN_OK;
        struct timespec ts = {0, 250 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    *id = claimed[(*at)++];
    return UN_OK;
}

static void *worker(void *arg) {
    shared *sh = arg;
    un_ctx *ctx = un_ctx_new_child(sh->parent);
    un_rulesdb *db = NULL;
    un_verifier *v = NULL;
    int batch = sh->o->batch > 0 ? sh->o->batch : 16;
    pending *pd = un_xcalloc((size_t)batch, sizeof *pd);
    int32_t *claimed = un_xcalloc((size_t)batch, sizeof *claimed);
    int np = 0, n_claimed = 0, at = 0;
    int32_t cursor = 0;
    char owner[160], host[64] = "";
    gethostname(host, sizeof host - 1);
    pthread_mutex_lock(&sh->mu);
    int wi = sh->n_workers++;
    pthread_mutex_unlock(&sh->mu);
    snprintf(owner, sizeof owner, "%s:%ld:%d", host, (long)getpid(), wi);
    const char *own = sh->claims ? owner : NULL;
    double renewed = now_ms();
    double c0 = cpu_ms();
    un_status st = un_rulesdb_open(ctx, sh->path, sh->spec, 0, &db);
    if (st == UN_OK)
        st = un_verifier_new_ex(ctx, sh->spec, sh->lifts, sh->n_lifts, &v);
    double setup_ms = cpu_ms() - c0;
    double db_ms[UN_VERIFY_PHASE_COUNT] = {0}; /* the database phases */
    while (st == UN_OK) {
        int32_t id;
        c0 = cpu_ms();
        st = next_rule(ctx, sh, db, owner, &cursor, claimed, &n_claimed, &at, &id);
        db_ms[UN_VERIFY_PHASE_CLAIM] += cpu_ms() - c0;
        if (st != UN_OK || !id)
            break;
        un_rulesdb_row *row = NULL;
        c0 = cpu_ms();
        st = un_rulesdb_rule_get(ctx, db, id, &row);
        db_ms[UN_VERIFY_PHASE_READ] += cpu_ms() - c0;
        if (st != UN_OK)
            break;
        if (!row->rule) {
            un_rulesdb_row_free(row);
            pthread_mutex_lock(&sh->mu);
            sh->stats.skipped++;
            sh->finished++;
            pthread_mutex_unlock(&sh->mu);
            c0 = cpu_ms();
            if (own && at == n_claimed)
                st = flush(ctx, db, pd, &np, own);
            db_ms[UN_VERIFY_PHASE_WRITE] += cpu_ms() - c0;
            continue;
        }
        pending *p = &pd[np];
        p->id = id;
        st = un_runner_rule(ctx, v, row->rule, sh->o, &p->v);
        int had_vars = row->rule->n_vars;
        un_rulesdb_row_free(row);
        if (st != UN_OK)
            break;
        pthread_mutex_lock(&sh->mu);
        sh->stats.total++;
        sh->stats.verified += p->v.status == UN_RULE_VERIFIED;
        sh->stats.refuted += p->v.status == UN_RULE_REFUTED;
        sh->stats.unknown += p->v.status == UN_RULE_UNKNOWN;
        sh->stats.any_shape += p->v.status == UN_RULE_VERIFIED && p->v.any_shape;
        sh->stats.generalized += p->v.status == UN_RULE_VERIFIED && p->v.n_new_vars > 0;
        sh->stats.dim_generic += p->v.status == UN_RULE_VERIFIED && p->v.n_dim_vars > 0;
        sh->stats.with_vars +=
            p->v.status == UN_RULE_VERIFIED && (p->v.general ? p->v.general->n_vars : had_vars) > 0;
        for (int k = 0; k < UN_VERIFY_PHASE_COUNT; k++)
            sh->stats.cpu_ms[k] += p->v.cpu_ms[k];
        sh->stats.outputs += p->v.outputs;
        sh->stats.narrow += p->v.narrow;
        sh->stats.work += p->v.work;
        for (int k = 0; k < UN_WORK_COUNT; k++) {
            sh->stats.work_by[k] += p->v.work_by[k];
            sh->stats.calls_by[k] += p->v.calls_by[k];
        }
        sh->stats.audit_unsat += p->v.audit_unsat;
        sh->stats.work_dims += p->v.work_dims;
        sh->stats.work_witness += p->v.work_witness;
        sh->ms[sh->n_ms++] = p->v.ms;
        sh->finished++;
        pthread_mutex_unlock(&sh->mu);
        /* a batch ends where the claims end, so verdicts and releases commit together */
        c0 = cpu_ms();
        if (++np == batch || (own && at == n_claimed)) {
            st = flush(ctx, db, pd, &np, own);
            db_ms[UN_VERIFY_PHASE_WRITE] += cpu_ms() - c0;
        } else if (own && now_ms() - renewed > sh->o->lease_s * 1e3 / 4) {
            st = un_rulesdb_claim_renew(ctx, db, owner, sh->o->lease_s);
            renewed = now_ms();
            db_ms[UN_VERIFY_PHASE_CLAIM] += cpu_ms() - c0;
        }
    }
    if (np || own) {
        c0 = cpu_ms();
        un_status fs = db ? flush(ctx, db, pd, &np, own) : UN_OK;
        db_ms[UN_VERIFY_PHASE_WRITE] += cpu_ms() - c0;
        if (st == UN_OK)
            st = fs;
    }
    free(claimed);
    if (st != UN_OK)
        record_error(sh, st, un_ctx_errmsg(ctx));
    pthread_mutex_lock(&sh->mu);
    for (int k = UN_VERIFY_PHASE_CLAIM; k < UN_VERIFY_PHASE_COUNT; k++)
        sh->stats.cpu_ms[k] += db_ms[k];
    sh->stats.setup_ms += setup_ms;
    sh->stats.claim_steps += db ? un_rulesdb_claim_steps(db) : 0;
    pthread_mutex_unlock(&sh->mu);
    free(pd);
    un_verifier_free(v);
    un_rulesdb_free(db);
    un_ctx_free(ctx);
    pthread_mutex_lock(&sh->mu);
    sh->running--;
    pthread_mutex_unlock(&sh->mu);
    return NULL;
}

static void progress_line(un_ctx *ctx, shared *sh, double t0) {
    if (!un_ctx_has_progress(ctx))
        return;
    pthread_mutex_lock(&sh->mu);
    un_runner_stats s = sh->stats;
    int64_t done = sh->finished;
    pthread_mutex_unlock(&sh->mu);
    double secs = (now_ms() - t0) / 1e3;
    un_ctx_progress(
        ctx, "verify: %lld/%lld rules  %lld verified  %lld refuted  %lld unknown  %.1f rules/s",
        (long long)done, (long long)sh->n, (long long)s.verified, (long long)s.refuted,
        (long long)s.unknown, secs > 0 ? (double)done / secs : 0.0);
}

un_status un_runner_run(un_ctx *ctx, const un_spec *spec, const char *db_path,
                        const un_runner_opts *o, un_runner_stats *stats) {
    if (stats)
        memset(stats, 0, sizeof *stats);
    un_runner_opts def = un_runner_opts_default();
    if (!o)
        o = &def;
    double t0 = now_ms();
    un_axcheck_stats ac;
    un_status st = un_axcheck_all(ctx, spec, o->seed, &ac);
    if (st != UN_OK)
        return st;
    un_axlift *lifts = NULL;
    int n_lifts = 0;
    if ((st = un_axcheck_lifts(ctx, spec, o->seed, &lifts, &n_lifts)) != UN_OK)
        return st;
    double ac_ms = now_ms() - t0;
    un_rulesdb *db = NULL;
    int32_t *ids = NULL;
    int64_t n = 0, run = 0;
    shared sh = {.parent = ctx,
                 .spec = spec,
                 .lifts = lifts,
                 .n_lifts = n_lifts,
                 .path = db_path,
                 .o = o,
                 .st = UN_OK};
    pthread_mutex_init(&sh.mu, NULL);
    if ((st = un_rulesdb_open(ctx, db_path, spec, 0, &db)) != UN_OK)
        goto done;
    if (o->rule_id > 0) {
        un_rulesdb_row *row = NULL;
        if ((st = un_rulesdb_rule_get(ctx, db, o->rule_id, &row)) != UN_OK)
            goto done;
        un_rulesdb_row_free(row);
        ids = un_xmalloc(sizeof *ids);
        ids[0] = o->rule_id;
        n = 1;
    } else {
        un_rulesdb_filter f = un_rulesdb_filter_default();
        f.needs_verify = !o->recheck;
        f.shard_i = o->shard_i;
        f.shard_n = o->shard_n;
        f.max_ops = o->max_ops;
        if ((st = un_rulesdb_rule_ids(ctx, db, &f, &ids, &n)) != UN_OK)
            goto done;
    }
    char args[160], max_ops[32] = "";
    if (o->max_ops > 0)
        snprintf(max_ops, sizeof max_ops, " --max-ops %d", o->max_ops);
    snprintf(args, sizeof args, "--timeout-ms %u --jobs %d%s%s%s", o->timeout_ms, o->jobs,
             o->wall_clock ? " --wall-clock" : "", o->recheck ? " --recheck" : "", max_ops);
    if ((st = un_rulesdb_run_begin(ctx, db, "unity-verify", args, &run)) != UN_OK)
        goto done;
    sh.ids = ids;
    sh.n = n;
    sh.claims = o->rule_id <= 0;
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        sh.since = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    }
    sh.ms = un_xcalloc((size_t)(n ? n : 1), sizeof(double));
    int jobs = o->jobs > 0 ? o->jobs : 1;
    if (jobs > n)
        jobs = n > 0 ? (int)n : 1;
    pthread_t th[64];
    if (jobs > 64)
        jobs = 64;
    int started = 0;
    if (n > 0) {
        sh.running = jobs;
        for (int i = 0; i < jobs; i++) {
            if (pthread_create(&th[i], NULL, worker, &sh) != 0) {
                pthread_mutex_lock(&sh.mu);
                sh.running -= jobs - i;
                pthread_mutex_unlock(&sh.mu);
                record_error(&sh, UN_ERR_INVALID, "cannot start a worker thread");
                break;
            }
            started++;
        }
        for (;;) {
            pthread_mutex_lock(&sh.mu);
            int running = sh.running;
            pthread_mutex_unlock(&sh.mu);
            if (running == 0)
                break;
            progress_line(ctx, &sh, t0);
            struct timespec ts = {0, 200 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        for (int i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        un_ctx_progress_done(ctx);
    }
    if (sh.st != UN_OK) {
        st = un_ctx_error(ctx, sh.st, "%s", sh.err);
        goto done;
    }
    sh.stats.wall_ms = now_ms() - t0;
    sh.stats.n_axioms = ac.n_axioms;
    sh.stats.n_lifted = n_lifts;
    sh.stats.axcheck_ms = ac_ms;
    if (sh.n_ms) {
        qsort(sh.ms, (size_t)sh.n_ms, sizeof(double), un_cmp_double);
        sh.stats.median_ms = sh.ms[sh.n_ms / 2];
        int64_t k = (int64_t)((double)sh.n_ms * 0.99);
        sh.stats.p99_ms = sh.ms[k < sh.n_ms ? k : sh.n_ms - 1];
    }
    char counts[256];
    snprintf(counts, sizeof counts,
             "{\"rules\": %lld, \"verified\": %lld, \"refuted\": %lld, \"unknown\": %lld, "
             "\"any_shape\": %lld, \"generalized\": %lld}",
             (long long)sh.stats.total, (long long)sh.stats.verified, (long long)sh.stats.refuted,
             (long long)sh.stats.unknown, (long long)sh.stats.any_shape,
             (long long)sh.stats.generalized);
    st = un_rulesdb_run_end(ctx, db, run, counts);
    if (stats)
        *stats = sh.stats;
done:
    pthread_mutex_destroy(&sh.mu);
    free(sh.ms);
    free(lifts);
    free(ids);
    un_rulesdb_free(db);
    return st;
}
