#!/usr/bin/env bash
# Waits at meet points (issue 13): small multi-device steps with the spin-then-block waits of
# runtime/pool.c and comm_local.c against an older unity-train (BASELINE_BIN, e.g. main's before
# them) and against this build with spinning off (UN_SPIN_US=0): tiny mlp, transformer and charlm,
# data parallel on 2 devices (one thread each), the binaries alternating in every round; per
# binary the median over ROUNDS runs of a run's ms/step (STEPS steps) and the range. Then the
# poll bound (SPINS: UN_SPIN_US values, tiny mlp data x2), the measurement that chose
# UN_POOL_SPIN_NS. Last, one meet of 2 ranks alone (scripts/bench/waits_meet.c: W us of work
# each, then an 8-byte exchange; MEET_ROUNDS rounds, default 2000), the poll forced to 0 and to
# 50 us in alternating blocks: the wake-up cost itself. With LOAD=N, N busy loops run beside every run (an oversubscribed box: the
# waits must not get slower than sleeping at once).
#   scripts/bench/waits.sh [BUILD_DIR]   Env: BASELINE_BIN, ROUNDS (default 7), STEPS (default
#                                        1000), LOAD (default 0), SPINS (default "0 5 20 50 200";
#                                        empty skips), MODELS (default "mlp transformer charlm")
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/default}
make -s -j2 BUILD="$build" >/dev/null
rounds=${ROUNDS:-7}
steps=${STEPS:-1000}
load=${LOAD:-0}
spins=${SPINS-0 5 20 50 200}
read -r -a models <<<"${MODELS:-mlp transformer charlm}"
new=$build/bin/unity-train
base=${BASELINE_BIN:-}
pids=()
stop_load() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_load EXIT
for ((i = 0; i < load; i++)); do
    (while :; do :; done) &
    pids+=($!)
done
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $load busy loops beside, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%H:%M UTC')"
# ms/step of one run: BIN MODEL [ENV...]
run() {
    local bin=$1 model=$2
    shift 2
    env "$@" "$bin" --model "$model" --tiny --devices 2 --threads 2 --steps "$steps" |
        sed -n 's/.* \([0-9.]*\) ms\/step.*/\1/p'
}
# median and range of the numbers on stdin
stats() { sort -g | awk '{v[NR] = $1} END {printf "%8.4f [%.4f-%.4f]", v[int((NR + 1) / 2)], v[1], v[NR]}'; }
printf '%-12s %-30s %-30s %-30s\n' "data x2" "this build" "this build, UN_SPIN_US=0" "${base:+baseline}"
for m in "${models[@]}"; do
    a=() b=() c=()
    for ((r = 0; r < rounds; r++)); do
        a+=("$(run "$new" "$m")")
        b+=("$(run "$new" "$m" UN_SPIN_US=0)")
        [[ -z $base ]] || c+=("$(run "$base" "$m")")
    done
    printf '%-12s %-30s %-30s %-30s\n' "$m tiny" "$(printf '%s\n' "${a[@]}" | stats)" \
        "$(printf '%s\n' "${b[@]}" | stats)" "$([[ -z $base ]] || printf '%s\n' "${c[@]}" | stats)"
done
if [[ -n $spins ]]; then
    read -r -a sp <<<"$spins"
    declare -A t=()
    for ((r = 0; r < rounds; r++)); do
        for s in "${sp[@]}"; do t[$s]+="$(run "$new" mlp UN_SPIN_US="$s") "; done
    done
    for s in "${sp[@]}"; do
        printf 'mlp tiny data x2, UN_SPIN_US=%-5s %s ms/step\n' "$s" "$(tr ' ' '\n' <<<"${t[$s]}" | grep . | stats)"
    done
fi
libs="$build/libruntime.a $build/libpcg.a -lopenblas -lcjson -lm -ldl -pthread"
# shellcheck disable=SC2086 # $libs is a list of words
cc -std=gnu17 -O2 -D_GNU_SOURCE -I. scripts/bench/waits_meet.c $libs -o "$build/bench_waits_meet"
"$build/bench_waits_meet" "${MEET_ROUNDS:-2000}"
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
