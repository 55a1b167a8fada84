#!/usr/bin/env bash
# Cost model benchmarks (issue 13):
#  1. estimate vs measurement on this machine: for every zoo model (tiny; mid-size: the tiny
#     structure widened with --config (below), the CNNs at an 8x / 4x batch, and charlm's larger
#     default), serial on 1 device and
#     data parallel on 2, plus the sample MLP serial and tensor parallel (unity-pcg sample mlp
#     --strategy tensor): the estimated step time (specs/machines/cpu.json + costs profiled into a
#     rules.db by unity-train --profile, each op's median time in the least of the profile's own
#     3 rounds over 2 s, search/README.md "Measured costs") against the measured step time
#     (a unity-train run's median step over at least RUN_S seconds of steps, at least STEPS
#     of them; each device one thread: --threads = --devices), each the
#     least over REPS rounds that profile, estimate and run the model's strategies in turn; and the
#     estimated memory (all devices) against the runtime's own accounting of what it allocated
#     (--stats: every device's peak, weights, gradients, optimizer state, activations, transfer
#     buffers) plus the CPU kernels' forward stash (model_cases below), with the peak RSS (/usr/bin/time) minus a baseline run's RSS beside it for reference (kernel
#     scratch is in the estimate and in the runtime's memory check; the host batch in the RSS only; tiny models are within the RSS noise);
#     meets_ms: device 0's median time per step inside communicator calls that meet the other
#     device (--stats' meets table; of the run whose median step is the least); unpolled: its
#     waits per step that slept without polling first (the waits' load rule said no:
#     runtime/pool.h un_pool_spin_allowed; same run); xchg_us: the profile's comm:exchange of
#     the round whose estimate is the least (the rendezvous of an exchange of the D device
#     threads at that moment, measured as a step meets: 0.58-0.78 us or 1.5-2.4 us idle here
#     (back to back, before 2026-11-28 07:30 UTC: 0.75-0.9 or 2.9-6.4), as the host places this
#     guest's two vCPUs: search/README.md "The idle 2-device tiny steps"); est_x, meas_x: the largest over the least of
#     the rounds' estimates and of their measured steps (1.00 with REPS=1): this guest has moments
#     when a step's compute-bound ops run 1.3-1.55x slower (search/README.md, "Speed regimes"), and
#     an error near such a spread is one side's round falling in a slow moment, not a cost.
#  2. estimates per second for BERT-Large (the zoo transformer, batch 192) data parallel on 192
#     V100s (specs/machines/v100x192.json): cached cost queries per second (the DP inner loop) and
#     whole-plan simulations per second.
#   scripts/bench/cost.sh [BUILD_DIR]      Env: STEPS (default 40), RUN_S (default 1: a run
#                                          is at least STEPS steps and at least RUN_S seconds
#                                          of them at the estimated step; the cores' speed to
#                                          meet changes every few tenths of a second here, so a
#                                          millisecond's run measures one such moment),
#                                          REPS (rounds, default 5: this guest runs its ops
#                                          1.3-1.5x slower for seconds at a time; a side whose
#                                          every round falls in such a moment misses by that,
#                                          (share of slow moments)^REPS of the time, about 0.4^3
#                                          = 6 % a side with 3 rounds, 1 % with 5),
#                                          ONLY (a regex: only the cases whose label matches,
#                                          e.g. ONLY='tiny\)'), BASELINE_BIN (an older
#                                          unity-train: in every round it also profiles into a
#                                          database of its own and estimates, right before the
#                                          run, so both estimates meet the same measurement at
#                                          the same load; its error is the base_err column),
#                                          BASELINE_MACHINE (another machine file: in every
#                                          round the same profile is also estimated on it; its
#                                          error is the base_err column; with BASELINE_BIN, that
#                                          binary's estimate is on it), MACHINE (the machine file
#                                          of the estimates, default specs/machines/cpu.json).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/default}
steps=${STEPS:-40}
run_s=${RUN_S:-1}
REPS=${REPS:-5}
make -s -j2 BUILD="$build" >/dev/null
B=$build/bin
M=${MACHINE:-specs/machines/cpu.json}
MB=${BASELINE_MACHINE:-$M}
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
"$B/unity-train" --model mlp --tiny --steps 1 | sed -n 's/^blas: /BLAS: /p'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
db=$tmp/costs.db
dbb=$tmp/base.db
base_bin=${BASELINE_BIN:-}
[ -n "$base_bin" ] || [ -z "${BASELINE_MACHINE:-}" ] || base_bin=same
base_label=$base_bin
[ "$base_bin" != same ] || base_label="the same profiles estimated on $MB"
[ "$base_bin" = same ] || [ -z "${BASELINE_MACHINE:-}" ] || base_label="$base_bin on $MB"
"$B/unity-pcg" sample mlp --strategy serial >"$tmp/mlp.json"
"$B/unity-pcg" sample mlp --strategy tensor >"$tmp/tp.json"

rss() { # peak RSS in bytes of a command
    /usr/bin/time -f '%M' -o "$tmp/rss" "$@" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; return 1; }
    echo $(($(tail -1 "$tmp/rss") * 1024))
}
base1=$(rss "$B/unity-train" --model mlp --tiny --steps 2 --threads 1 --quiet)
base2=$(rss "$B/unity-train" --model mlp --tiny --steps 2 --devices 2 --threads 2 --quiet)
echo "baseline peak RSS (tiny mlp, 2 steps): $((base1 / 1024)) KiB on 1 device, $((base2 / 1024)) KiB on 2, subtracted from the runs' on as many devices"
printf '%-26s %-8s %3s %10s %10s %7s %5s %12s %12s %7s %5s %12s %9s %8s %7s %5s %6s%s\n' model strategy dev est_ms meas_ms err ok est_mem meas_mem err ok rss_delta meets_ms unpolled xchg_us est_x meas_x "${base_bin:+ base_err}"
# the median step of a run's steps after the first (unity-train's "median step" line)
median_step() { sed -n 's/^median step: \([0-9.]*\) ms$/\1/p' "$1"; }
# model_cases LABEL MODEL-ARGS STRATEGY:DEVICES...: REPS rounds; in each, every case of the model
# in turn is profiled into the op-cost cache (the ops, and the rendezvous and stretches of work of
# that moment), estimated, and run (alternating: a burst of other jobs hits one round, not one
# strategy). Both sides are the least over the rounds: the estimate of the quietest profile, the
# measured step the least of the runs' medians. Memory: the estimate (all devices) against the
# runtime's own accounting (--stats: every device's peak, weights, gradients, optimizer state,
# activations, transfer buffers) plus the CPU kernels' forward stash, which --stats does not
# report: its size is un_kern_stash_bytes of each forward's shapes, what the runtime's memory
# check counts and what a forward holds (tests/test_kernels.c stash; tests/test_cost.c sim_stash
# checks the simulator counts the same per device), taken from the estimate's "kernel stash" line;
# and the largest scratch of one kernel call per device (im2col; un_kern_scratch_bytes, counted
# through a counting allocator in tests/test_kernels.c scratch), from its "kernel scratch" line.
model_cases() {
    local label=$1 margs=$2
    shift 2
    [[ -z "${ONLY:-}" || "$label" =~ $ONLY ]] || return 0
    local -a cases=("$@") strat dev est mem stash meas acct rssd estb scr inmeet unpol estx measx xus measr
    local n=${#cases[@]} i r
    for ((r = 0; r < REPS; r++)); do
        for ((i = 0; i < n; i++)); do
            local c=${cases[i]}
            strat[i]=${c%:*}
            dev[i]=${c##*:}
            local sargs="--strategy ${strat[i]} --devices ${dev[i]} --threads ${dev[i]}"
            local peak m e
            "$B/unity-train" $margs $sargs --profile --machine $M --rules "$db" --quiet >/dev/null
            "$B/unity-train" $margs $sargs --estimate --machine $M --rules "$db" >"$tmp/est" 2>/dev/null
            e=$(sed -n 's/^estimated step time: \([0-9.]*\) ms.*/\1/p' "$tmp/est")
            local xu
            xu=$(sqlite3 "$db" "select printf('%.2f', fwd_ms * 1000) from op_costs where op_sig = 'comm:exchange' and shape = 'devices[${dev[i]}]'" 2>/dev/null || true)
            xu=${xu:--}
            local eb=0
            if [ "$base_bin" = same ]; then
                eb=$("$B/unity-train" $margs $sargs --estimate --machine "$MB" --rules "$db" 2>/dev/null |
                     sed -n 's/^estimated step time: \([0-9.]*\) ms.*/\1/p')
            elif [ -n "$base_bin" ]; then
                "$base_bin" $margs $sargs --profile --machine $M --rules "$dbb" --quiet >/dev/null
                eb=$("$base_bin" $margs $sargs --estimate --machine "$MB" --rules "$dbb" 2>/dev/null |
                     sed -n 's/^estimated step time: \([0-9.]*\) ms.*/\1/p')
            fi
            # at least RUN_S seconds of steps: a small model's 40 steps are a millisecond of
            # this guest's time, in one placement of its cores by the host (below)
            local ns
            ns=$(awk -v e="$e" -v s="$steps" -v t="$run_s" 'BEGIN { n = (e > 0 ? int(t * 1000 / e) + 1 : s); print (n > s ? n : s) }')
            peak=$(rss "$B/unity-train" $margs $sargs --steps "$ns" --log-every 100000000 --stats)
            m=$(median_step "$tmp/out")
            # device 0's time in communicator calls that meet the other device, its median step's
            # (--stats)
            local im up
            im=$(awk '/^device +meets/ { on = 1; next } on && $1 == 0 { print $4; exit }' "$tmp/out")
            up=$(awk '/^device +meets/ { on = 1; next } on && $1 == 0 { print $5; exit }' "$tmp/out")
            measr[i]="${measr[i]:-}${measr[i]:+ }$m"
            if ((r == 0)); then
                est[i]=$e
                xus[i]=$xu
                estx[i]=$e
                estb[i]=$eb
                meas[i]=$m
                measx[i]=$m
                inmeet[i]=${im:--}
                unpol[i]=${up:--}
                mem[i]=$(sed -n 's/^memory, all devices: \([0-9]*\) bytes/\1/p' "$tmp/est")
                stash[i]=$(sed -n 's/^kernel stash, all devices: \([0-9]*\) bytes/\1/p' "$tmp/est")
                stash[i]=${stash[i]:-0}
                scr=$(sed -n 's/^kernel scratch, all devices: \([0-9]*\) bytes/\1/p' "$tmp/est")
                stash[i]=$((stash[i] + ${scr:-0}))
                acct[i]=$(awk '/^device +weights/ { on = 1; next } /^device / { on = 0 } on && $1 ~ /^[0-9]+$/ { s += $4 } END { printf "%.0f", s }' "$tmp/out")
                local base=$base1
                [ "${dev[i]}" = 1 ] || base=$base2
                # the peak RSS of a run of STEPS steps: a longer run's holds its per-step
                # records too (runtime/train.c: each step's loss and times)
                ((ns == steps)) || peak=$(rss "$B/unity-train" $margs $sargs --steps "$steps" --quiet)
                rssd[i]=$((peak - base))
            else
                if awk -v a="${est[i]}" -v b="$e" 'BEGIN { exit !(b < a) }'; then
                    xus[i]=$xu
                fi
                est[i]=$(awk -v a="${est[i]}" -v b="$e" 'BEGIN { print (b < a ? b : a) }')
                estx[i]=$(awk -v a="${estx[i]}" -v b="$e" 'BEGIN { print (b > a ? b : a) }')
                measx[i]=$(awk -v a="${measx[i]}" -v b="$m" 'BEGIN { print (b > a ? b : a) }')
                estb[i]=$(awk -v a="${estb[i]}" -v b="$eb" 'BEGIN { print (b < a ? b : a) }')
                if awk -v a="${meas[i]}" -v b="$m" 'BEGIN { exit !(b < a) }'; then
                    meas[i]=$m
                    inmeet[i]=${im:--}
                    unpol[i]=${up:--}
                fi
            fi
        done
    done
    for ((i = 0; i < n; i++)); do
        awk -v l="$label" -v s="$(basename "${strat[i]}" .json)" -v d="${dev[i]}" -v e="${est[i]}" -v m="${meas[i]}" \
            -v em="${mem[i]}" -v mm="$((acct[i] + stash[i]))" -v rd="${rssd[i]}" -v eb="${estb[i]}" -v hb="$base_bin" -v im="${inmeet[i]}" -v up="${unpol[i]}" -v xu="${xus[i]}" -v ex="${estx[i]}" -v mx="${measx[i]}" -v mr="${measr[i]}" 'BEGIN {
            te = 100 * (e - m) / m; me = (mm > 0 ? 100 * (em - mm) / mm : 0)
            printf "%-26s %-8s %3d %10.4f %10.4f %+6.0f%% %5s %10.0fK %10.0fK %+6.0f%% %5s %10.0fK", l, s, d, e, m, te,
                   (te <= 25 && te >= -25 ? "yes" : "NO"), em / 1024, mm / 1024, me, (me <= 20 && me >= -20 ? "yes" : "NO"), rd / 1024
            printf " %9s %8s %7s %5.2f %6.2f", im, up, (d > 1 ? xu : "-"), ex / e, mx / m
            if (hb != "")
                printf " %+7.0f%%", 100 * (eb - m) / m
            printf "\n"
            printf "%s|%s|%s|%s|%d|%d|%s|%s\n", l, s, e, m, (te <= 25 && te >= -25), (me <= 20 && me >= -20), eb, mr >> "'"$tmp/rows"'" }'
    done
}
for m in mlp transformer dlrm xdl candle_uno resnext50 inception_v3 charlm; do
    model_cases "$m (tiny)" "--model $m --tiny" serial:1 data:2
done
# mid-size: the models that take a width at one between tiny and paper (--config: megabytes of
# weights, so a data-parallel step moves them between the devices: mlp 8.7 MB, transformer 6.3,
# dlrm 2.2, xdl 1.1, candle_uno 47; steps of 3-80 ms here), the CNNs (which take only a batch) at
# an 8x / 4x batch, and charlm's own larger configuration
for mc in "mlp:hidden=1024,batch=64" "transformer:hidden=256,heads=4,ffn=1024,seq=64,batch=8" \
    "dlrm:hidden=512,batch=256" "xdl:hidden=512,batch=256" "candle_uno:hidden=1024,batch=64"; do
    model_cases "${mc%%:*} (mid)" "--model ${mc%%:*} --tiny --config ${mc#*:}" serial:1 data:2
done
for mb in resnext50:64 inception_v3:32; do
    model_cases "${mb%%:*} (tiny, b${mb#*:})" "--model ${mb%%:*} --tiny --batch ${mb#*:}" serial:1 data:2
done
model_cases "charlm (default)" "--model charlm" serial:1 data:2
model_cases "sample mlp" "--model $tmp/mlp.json" serial:1 data:2 "$tmp/tp.json:2"
# the summary, and whether each model's strategies keep their order (estimated vs measured): every
# pair of a model's strategies, the order of their least estimates against that of their least
# measured steps. A pair is a tie when the rounds' runs do not agree on its order (each round runs
# the model's strategies one after the other, so a round's two medians meet the same moment of the
# guest: the pair is ordered only where every round orders it the same way); "where the runs
# agree" counts the models whose every ordered pair is kept.
awk -F'|' -v hb="$base_label" '{ n++; t += $5; m += $6; k = $1; c[k]++; e[k, c[k]] = $3; x[k, c[k]] = $4; b[k, c[k]] = $7
       r[k, c[k]] = $8; sn[k, c[k]] = $2
       tb += ($7 - $4 <= 0.25 * $4 && $4 - $7 <= 0.25 * $4) }
     END { for (k in c) { if (c[k] < 2) continue; models++; ok = 1; okb = 1; okt = 1
               for (i = 1; i <= c[k]; i++) for (j = i + 1; j <= c[k]; j++) {
                   flip = (e[k, i] < e[k, j]) != (x[k, i] < x[k, j])
                   if (flip) ok = 0
                   if ((b[k, i] < b[k, j]) != (x[k, i] < x[k, j])) okb = 0
                   ni = split(r[k, i], ri, " "); split(r[k, j], rj, " "); lt = 0; gt = 0
                   for (q = 1; q <= ni; q++) { lt += (ri[q] < rj[q]); gt += (ri[q] > rj[q]) }
                   if (lt > 0 && gt > 0 || lt + gt < ni)
                       ties = ties sprintf(" [%s %s/%s: rounds %s faster %d, %s faster %d, equal %d]", k, sn[k, i], sn[k, j], sn[k, i], lt, sn[k, j], gt, ni - lt - gt)
                   else if (flip)
                       okt = 0 }
               kept += ok; keptb += okb; keptt += okt; if (!ok) bad = bad " [" k "]" }
           printf "summary: step time within 25%% in %d/%d cases, memory within 20%% in %d/%d, strategy ranking kept for %d/%d models%s\n",
                  t, n, m, n, kept, models, bad ? "; not for" bad : ""
           printf "ranking where the runs of every round agree on the order: kept for %d/%d models%s\n", keptt, models,
                  ties ? "; ties (the rounds did not all order the pair the same way):" ties : "; no ties"
           if (hb != "")
               printf "baseline %s against the same runs: step time within 25%% in %d/%d cases, ranking kept for %d/%d models\n", hb, tb, n, keptb, models }' "$tmp/rows"

# ---- 2. estimates per second at 192 devices ----
bench_c="$build/bench_cost.c"
cat >"$bench_c" <<'CEOF'
/* Cost queries and plan simulations per second: BERT-Large data parallel on 192 V100s. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runtime/train.h"
#include "search/sim.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
    un_ctx *ctx = un_ctx_new(NULL);
    un_spec *spec = NULL;
    un_graph *g = NULL;
    un_cost_model *cm = NULL;
    un_machine m;
    int d = 0;
    un_train_opts o = un_train_opts_default();
    o.model = "transformer";
    o.batch = 192;
    o.devices = 192;
    o.strategy = "data";
    if (un_machine_load(ctx, "specs/machines/v100x192.json", &m) != UN_OK ||
        un_spec_load(ctx, "specs/ops.json", &spec) != UN_OK ||
        un_train_graph(ctx, spec, &o, &g, &d) != UN_OK ||
        un_cost_model_new(ctx, spec, &m, UN_MPREC_F32, NULL, &cm) != UN_OK) {
        fprintf(stderr, "bench_cost: %s\n", un_ctx_errmsg(ctx));
        return 1;
    }
    int32_t n = un_graph_node_count(g);
    int64_t q = 0;
    double t0 = now(), sink = 0;
    while (now() - t0 < 1.0)
        for (int32_t id = 0; id < n; id++)
            if (un_op_kind_of(un_graph_node(g, id)->op) == UN_OPK_REGULAR) {
                un_op_cost c;
                un_cost_node(ctx, cm, g, id, &c);
                sink += c.fwd;
                q++;
            }
    double qs = (double)q / (now() - t0);
    un_sim_params sp = un_sim_params_default();
    sp.devices = d;
    int sims = 0;
    un_sim_result r;
    memset(&r, 0, sizeof r);
    t0 = now();
    while (now() - t0 < 2.0 || sims < 2) {
        un_sim_result_deinit(&r);
        if (un_sim_run(ctx, cm, g, &sp, &r) != UN_OK) {
            fprintf(stderr, "bench_cost: %s\n", un_ctx_errmsg(ctx));
            return 1;
        }
        sims++;
    }
    double ss = sims / (now() - t0);
    printf("BERT-Large (%d nodes), batch 192, data parallel on 192 V100s: estimated step %.1f ms\n",
           n, r.step * 1e3);
    printf("cost queries (cached, the DP inner loop): %.0f per second (target > 10000: %s)\n", qs,
           qs > 10000 ? "met" : "NOT met");
    printf("whole-plan simulations (every piece of every op on 192 devices): %.2f per second\n", ss);
    un_sim_result_deinit(&r);
    un_cost_model_free(cm);
    un_graph_free(g);
    un_spec_free(spec);
    un_ctx_free(ctx);
    return sink < 0;
}
CEOF
# the libraries the Makefile links (MPI, CUDA, protobuf-c where this build has them)
mklibs=$(printf 'un-print-libs:\n\t@echo $(runtime_LDLIBS) $(rulesdb_LDLIBS) $(pcg_LDLIBS)\n' |
         make -s --no-print-directory BUILD="$build" -f Makefile -f - un-print-libs | tail -1)
libs="$build/libsearch.a $build/libruntime.a $build/librulesdb.a $build/libpcg.a $mklibs -ldl -pthread"
cc -std=c17 -O2 -D_GNU_SOURCE -I. "$bench_c" $libs -o "$build/bench_cost"
"$build/bench_cost"
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
