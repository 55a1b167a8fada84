#!/usr/bin/env bash
# Training step time and peak memory, the runtime against PyTorch (issue 16): for the mid MLP
# (2 towers x 8 linear 1344, 29M parameters, batch 64, CE), the mid transformer (4 post-LN
# layers, hidden 256, 4 heads, FFN 1024, seq 128, batch 8, MSE) and the zoo's full charlm (T 64,
# D 128, 2 blocks, batch 32 sequences), unity-train and the same model in PyTorch
# (scripts/bench/torch_models.py: same layers, no biases, Adam) run alternately, ROUNDS times
# each, on 1 and 2 threads, under the environment as it is (OPENBLAS_CORETYPE untouched: both
# sides load the same OpenBLAS; the runtime then picks its kernel set, runtime/blas.h).
# Prints ms/step min/median of each side, ours/PyTorch, and each process's peak RSS.
# The mid graphs are written by scripts/bench/mid_graphs.py (pcg graph JSON).
#
#   scripts/bench/runtime.sh [BUILD_DIR]     (default build/default; builds it first)
# When OPENBLAS_CORETYPE is unset a second table runs both sides with it set to the kernel the
# runtime chose, so that the comparison is of everything but the kernel choice (SAME_KERNEL=0
# skips it).
# Env: ROUNDS (default 3), STEPS per run (default 6; step 1 untimed), THREADS (default "1 2");
# ONLY=pytorch runs just this comparison, ONLY=strategies just the section below, ONLY=profile
# just the per-op profile (scripts/bench/runtime_prof.py: where one step's time goes by kind of
# work, ours by perf samples, PyTorch by its autograd profiler; PROFILE_MODELS, default
# "transformer_mid charlm"; needs perf), ONLY=gemm just the GEMM-side choices of the mid
# transformer (scripts/bench/runtime_gemm.c: Q/K/V merged into one product or not, the four
# transpose combinations of its products, attention's query-row blocks; GEMM_ROUNDS, default 20).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/default}
make -s -j2 BUILD="$build" >/dev/null
if [[ ${ONLY:-} != strategies && ${ONLY:-} != gemm ]] && ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "runtime.sh: PyTorch is not installed for /usr/bin/python3 (Debian python3-torch)" >&2
    exit 1
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "load at start: $(uptime | sed 's/.*load/load/')"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} in the environment"
echo "runtime $("$build/bin/unity-train" --model mlp --tiny --steps 1 | sed -n 's/^blas: //p')"
graphs="$build/bench_graphs"
mid_graphs() {
    mkdir -p "$graphs"
    /usr/bin/python3 scripts/bench/mid_graphs.py "$graphs"
}
if [[ ${ONLY:-} == gemm ]]; then
    libs="$build/libruntime.a $build/libpcg.a -lopenblas -lcjson -lm -ldl -pthread"
    # shellcheck disable=SC2086 # $libs is a list of words
    cc -std=gnu17 -O2 -D_GNU_SOURCE -I. scripts/bench/runtime_gemm.c $libs -o "$build/bench_runtime_gemm"
    "$build/bench_runtime_gemm" "${GEMM_ROUNDS:-20}"
    echo "load at end: $(uptime | sed 's/.*load/load/')"
    exit 0
fi
if [[ ${ONLY:-} == profile ]]; then
    mid_graphs
    echo "PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), per-op profile, 1 thread"
    # shellcheck disable=SC2086
    /usr/bin/python3 scripts/bench/runtime_prof.py "$build" "$graphs" ${PROFILE_MODELS:-transformer_mid charlm}
    echo "load at end: $(uptime | sed 's/.*load/load/')"
    exit 0
fi
torch_cmp() {
    echo "PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
    mid_graphs
    echo
    echo "== the environment as it is (PyTorch's OpenBLAS picks its own kernel)"
    # shellcheck disable=SC2086
    /usr/bin/python3 scripts/bench/runtime_cmp.py "$build" "$graphs" ${THREADS:-1 2}
    kernel=$("$build/bin/unity-train" --model mlp --tiny --steps 1 | sed -n 's/^blas: OpenBLAS [^ ]* kernel \([^ ]*\).*/\1/p')
    if [[ -z ${OPENBLAS_CORETYPE:-} && -n $kernel && ${SAME_KERNEL:-1} == 1 ]]; then
        echo
        echo "== both sides on the runtime's kernel: OPENBLAS_CORETYPE=$kernel (the kernels' own speed)"
        # shellcheck disable=SC2086
        OPENBLAS_CORETYPE=$kernel /usr/bin/python3 scripts/bench/runtime_cmp.py "$build" "$graphs" ${THREADS:-1 2}
    fi
}

# ---- strategies on mid-size models (h14's section, h21's sharded update; issue 14 item 6) ----
# Serial on 1 device, data parallel on 2 devices and the mixed data x tensor plans 1x2 (tensor
# parallel by the ops' sharding rules) and 2x1 on 2 devices of the same machine, all with the same
# total threads (STRAT_THREADS, default 2), for the mid MLP, the mid transformer of issue 16 and
# a smaller transformer, sized by --config (the same strings the cost bench and unity-train
# take): step time, time per sample and what device 0 holds (the runtime's own accounting,
# --stats: weights, optimizer state, peak). Data parallelism updates each weight sharded over its
# two copies (ZeRO 1/2: optimizer state halved, weights all-gathered). All plans alternate,
# best of STRAT_ROUNDS (default 3) rounds, since the machine is shared; the last column is the
# plan's time per sample over serial's (target for data parallel <= 1). STRAT_PLANS picks plans
# ("DEVICES:STRATEGY" words, default "1:serial 2:data 2:mixed:1x2 2:mixed:2x1").
# ONLY=strategies runs just this section. BASE_BUILD=DIR (a build of another commit, e.g. main's:
# `git archive COMMIT | tar -x -C /tmp/base && make -C /tmp/base build/default/bin/unity-train`,
# then BASE_BUILD=/tmp/base/build/default) runs its unity-train too, alternating with this build's
# in every round, and prints its rows (marked base) under this build's, each against its own serial.
strategies() {
    local th=${STRAT_THREADS:-2} rounds=${STRAT_ROUNDS:-3} steps=${STRAT_STEPS:-10}
    local -a models=("mlp --config layers=4,hidden=1024,batch=64"
                     "transformer --config layers=4,hidden=256,heads=4,ffn=1024,seq=128,batch=8"
                     "transformer --tiny --config layers=2,hidden=256,heads=4,ffn=1024,seq=32,batch=32")
    local -a plans
    read -r -a plans <<<"${STRAT_PLANS:-1:serial 2:data 2:mixed:1x2 2:mixed:2x1}"
    echo
    echo "== strategies: ${plans[*]} (devices:plan), $th threads in all, best of $rounds, load: $(cut -d' ' -f1-3 /proc/loadavg)"
    printf '%-80s %-11s %9s %10s %12s %12s %12s %8s\n' model dev:plan ms/step us/sample weights/dev0 optim/dev0 peak/dev0 /serial
    local -a builds=("$build")
    if [[ -n ${BASE_BUILD:-} ]]; then
        builds+=("$BASE_BUILD")
        echo "base: $BASE_BUILD/bin/unity-train, alternating with $build's in every round"
    fi
    local m p r b k line ms batch serial_us us
    for m in "${models[@]}"; do
        local -A best=() st=()
        for ((r = 0; r < rounds; r++)); do
            for b in "${builds[@]}"; do
                for p in "${plans[@]}"; do
                    k="$b|$p"
                    # shellcheck disable=SC2086 # $m is the model and its flags
                    line=$("$b/bin/unity-train" --model $m --devices "${p%%:*}" --strategy "${p#*:}" --threads "$th" --steps "$steps" --stats | grep -E '^trained|^ +0 ')
                    ms=$(sed -n 's/.* \([0-9.]*\) ms\/step.*/\1/p' <<<"$line")
                    if [[ -z ${best[$k]:-} ]] || awk -v a="$ms" -v b="${best[$k]}" 'BEGIN{exit !(a<b)}'; then
                        best[$k]=$ms
                        st[$k]=$(awk '/^ +0 /{printf "%9.1f MiB %8.1f MiB %8.1f MiB", $2/1048576, $3/1048576, $4/1048576}' <<<"$line")
                    fi
                done
            done
        done
        batch=${m##*batch=}
        batch=${batch%% *}
        for b in "${builds[@]}"; do
            serial_us=$(awk -v t="${best[$b|${plans[0]}]}" -v b="$batch" 'BEGIN{print 1000*t/b}')
            for p in "${plans[@]}"; do
                k="$b|$p"
                us=$(awk -v t="${best[$k]}" -v b="$batch" 'BEGIN{print 1000*t/b}')
                printf '%-80s %-11s %9s %10.1f %s %8.3f\n' "$m$([[ $b == "$build" ]] || echo ' (base)')" "$p" \
                    "${best[$k]}" "$us" "${st[$k]}" "$(awk -v a="$us" -v b="$serial_us" 'BEGIN{print a/b}')"
            done
        done
        unset best st
    done
}
[[ ${ONLY:-} == strategies ]] || torch_cmp
[[ ${ONLY:-} == pytorch ]] || strategies
echo "load at end: $(uptime | sed 's/.*load/load/')"
