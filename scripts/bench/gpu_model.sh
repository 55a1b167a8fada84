#!/usr/bin/env bash
# The analytic GPU cost model against step times measured on a GPU (issue 13).
#
# Without MEASURE (no GPU needed: estimates only): for each row of scripts/bench/gpu_measured.tsv
# (a case of gpu_cases.tsv measured on the GPU that specs/machines/MACHINE.json describes),
# `unity-train --estimate` on that machine file as it is (new: device.gpu given, an op costs the
# kernels our CUDA backend launches for it) and without its device.gpu, op_overhead 5e-6 (old:
# the roofline of the spec's flops and bytes per op, the model before device.gpu), the error of
# each, and the memory estimate against the most nvidia-smi saw in use where that was recorded
# (the runtime's own peak beside it: its buffers, without the CUDA backend's scratch and the
# process's reserve, which the estimate adds with device.gpu).
#
# With MEASURE=1 (on a machine with an NVIDIA GPU and a CUDA build): every case of
# gpu_cases.tsv is run here with --backend cuda (tiny cases 30 steps, others 10; ROUNDS runs each,
# the least mean kept), next to the estimate on the machine file of this GPU (MACHINE, default
# h100x1 or h200x1 by nvidia-smi's name), analytic and, with PROFILE=1, from the cases' operators
# timed on this GPU (unity-train --profile --backend cuda; the cases whose step measured under
# 10 ms: a paper-size profile took over 60 s on the H100, its inputs refilled from the host every
# repetition; PROFILE=all: every case). Memory: the estimate's bytes per device
# against the runtime's peak (--stats) and the most nvidia-smi saw in use during the run (less what
# was in use before; the CUDA context and cuBLAS's workspace included). The measured rows are
# written to MEASURE_OUT (default BUILD_DIR/gpu_measured_MACHINE.tsv) in gpu_measured.tsv's format.
# BUDGET (seconds, default 420): no run starts after it; the first round of every case comes
# first, then the profiles, then the other rounds.
#
#   scripts/bench/gpu_model.sh [BUILD_DIR]     (default build/default; builds it first
#                                               unless PREBUILT=1)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/default}
[[ -n "${PREBUILT:-}" ]] || make -s -j2 BUILD="$build" >/dev/null
train=$build/bin/unity-train
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 scripts/bench/mid_graphs.py "$tmp"
bench=scripts/bench
# case NAME -> its unity-train arguments, GRAPHS replaced
case_args() {
    awk -F'\t' -v n="$1" '!/^#/ && $1 == n { print $2; exit }' "$bench/gpu_cases.tsv" | sed "s|GRAPHS|$tmp|g"
}
# estimate MACHINE_FILE [--rules DB] ARGS... -> "ms bytes" (bytes: memory per device)
estimate() {
    local m=$1 out
    shift
    out=$("$train" "$@" --estimate --machine "$m" 2>&1) || { echo "estimate failed: $(tail -1 <<<"$out")" >&2; return 1; }
    awk '/^estimated step time:/ { ms = $4 } /^memory, all devices:/ { b = $4 } END { print ms, b }' <<<"$out"
}

if [[ -z "${MEASURE:-}" ]]; then
    printf '%-20s %-7s %-5s %11s %11s %7s %11s %7s %9s %9s %9s %6s\n' case machine role "measured ms" "old ms" "old err" \
        "new ms" "new err" "est MiB" "peak MiB" "smi MiB" "err"
    grep -v '^#' "$bench/gpu_measured.tsv" | while IFS=$'\t' read -r name machine role meas peak smi; do
        read -r -a a <<<"$(case_args "$name")"
        [[ ${#a[@]} -gt 0 ]] || { echo "$name: not a case of gpu_cases.tsv" >&2; exit 1; }
        new=specs/machines/$machine.json
        old=$tmp/${machine}_roofline.json
        [[ -f $old ]] || python3 - "$new" "$old" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
del m["device"]["gpu"]
m["device"]["op_overhead"] = 5e-6
json.dump(m, open(sys.argv[2], "w"))
PY
        read -r o _ < <(estimate "$old" "${a[@]}")
        read -r n nb < <(estimate "$new" "${a[@]}")
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$machine" "$role" "$meas" "$o" "$n" "$nb" "$peak" "$smi"
    done | awk -F'\t' '
        function abs(v) { return v < 0 ? -v : v }
        function mib(b) { return b == "-" ? "-" : sprintf("%.1f", b / 1048576) }
        { eo = $5 / $4 - 1; en = $6 / $4 - 1
          mem = sprintf("%9s %9s %9s %6s", mib($7), mib($8), $9, "-")
          if ($9 != "-") { em = $7 / 1048576 / $9 - 1; mem = sprintf("%9s %9s %9s %+5.0f%%", mib($7), mib($8), $9, 100 * em) }
          printf "%-20s %-7s %-5s %11.3f %11.3f %+6.0f%% %11.3f %+6.0f%% %s\n", $1, $2, $3, $4, $5, 100 * eo, $6, 100 * en, mem
          k = $2 " " $3; n[k]++; if (abs(en) <= 0.25) ok[k]++; if (abs(eo) <= 0.25) okold[k]++
          if (abs(en) > mx[k]) mx[k] = abs(en); if (abs(eo) > mxo[k]) mxo[k] = abs(eo)
          if ($9 != "-") { nm[k]++; if (abs(em) <= 0.2) okm[k]++; if (abs(em) > mxm[k]) mxm[k] = abs(em) } }
        END { for (k in n) {
                printf "%s: %d cases, within 25%%: old %d, new %d; largest error: old %.0f%%, new %.0f%%", \
                       k, n[k], okold[k], ok[k], 100 * mxo[k], 100 * mx[k]
                if (nm[k]) printf "; memory within 20%% of nvidia-smi: %d of %d (largest error %.0f%%)", okm[k], nm[k], 100 * mxm[k]
                printf "\n" } }'
    exit 0
fi

# ---- MEASURE=1: run the cases on this GPU ----
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_model.sh: MEASURE=1 needs an NVIDIA GPU (nvidia-smi missing or finds none) - nothing measured" >&2
    exit 2
fi
grep -q UN_USE_CUDA "$build/.flags" || { echo "gpu_model.sh: $build is not a CUDA build" >&2; exit 2; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "${MACHINE:-$gpu}" in
*H100*) machine=h100x1 ;;
*H200*) machine=h200x1 ;;
*) machine=${MACHINE:-} ;;
esac
[[ -n $machine && -f specs/machines/$machine.json ]] ||
    { echo "gpu_model.sh: no machine file for GPU '$gpu' (set MACHINE=NAME of specs/machines/NAME.json)" >&2; exit 2; }
mfile=specs/machines/$machine.json
out=${MEASURE_OUT:-$build/gpu_measured_$machine.tsv}
rounds=${ROUNDS:-2}
budget=${BUDGET:-420}
start=$SECONDS
echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1); machine file $mfile"
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(uptime)"
mapfile -t names < <(awk -F'\t' '!/^#/ { print $1 }' "$bench/gpu_cases.tsv")
declare -A best peak smi
smi_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
# run NAME: one timed run; keeps the least mean, the runtime's peak and nvidia-smi's most
run_case() {
    local name=$1 a steps=10 o ms pk base top
    read -r -a a <<<"$(case_args "$name")"
    [[ " ${a[*]} " == *" --tiny "* ]] && steps=30
    base=$(smi_used)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 50 >"$tmp/smi" 2>/dev/null &
    local sp=$!
    o=$(timeout 120 "$train" "${a[@]}" --backend cuda --steps "$steps" --stats 2>&1) || {
        kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null || true
        echo "$name: run failed: $(tail -1 <<<"$o")" >&2
        return 0
    }
    kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null || true
    ms=$(sed -n 's/^trained .* \([0-9.]*\) ms\/step.*/\1/p' <<<"$o")
    pk=$(awk '/^device  weights/ { getline; print $4; exit }' <<<"$o")
    top=$(sort -n "$tmp/smi" | tail -1)
    [[ -n $ms ]] || { echo "$name: no step time in the output" >&2; return 0; }
    if [[ -z ${best[$name]:-} ]] || awk -v a="$ms" -v b="${best[$name]}" 'BEGIN { exit !(a < b) }'; then
        best[$name]=$ms
    fi
    peak[$name]=$pk
    local d=$((${top:-0} - ${base:-0}))
    [[ -z ${smi[$name]:-} || $d -gt ${smi[$name]} ]] && smi[$name]=$d
    echo "  ran $name: $ms ms/step, peak ${pk} B, nvidia-smi +$d MiB ($((SECONDS - start)) s)" >&2
}
round() {
    for n in "${names[@]}"; do
        ((SECONDS - start < budget)) || return 0
        run_case "$n"
    done
}
declare -A prof
round
if [[ -n "${PROFILE:-}" ]]; then
    for n in "${names[@]}"; do
        ((SECONDS - start < budget)) || break
        [[ -n ${best[$n]:-} ]] || continue
        [[ $PROFILE == all ]] || awk -v m="${best[$n]}" 'BEGIN { exit !(m < 10) }' || continue
        read -r -a a <<<"$(case_args "$n")"
        db=$tmp/prof_${n// /_}.db
        local_out=$(timeout 60 "$train" "${a[@]}" --backend cuda --profile --machine "$mfile" --rules "$db" 2>&1) &&
            read -r pv _ < <(estimate "$mfile" --rules "$db" "${a[@]}") && [[ -n $pv ]] || {
            echo "$n: --profile --backend cuda failed or ran over 60 s: $(tail -1 <<<"$local_out")" >&2
            continue
        }
        prof[$n]=$pv
        echo "  profiled $n: estimate $pv ms ($(tail -1 <<<"$local_out"); $((SECONDS - start)) s)" >&2
    done
fi
for ((r = 1; r < rounds; r++)); do
    round
done
{
    echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $gpu; MEASURE=1 ROUNDS=$rounds scripts/bench/gpu_model.sh"
    for n in "${names[@]}"; do
        [[ -n ${best[$n]:-} ]] && printf '%s\t%s\theld\t%s\t%s\t%s\n' "$n" "$machine" "${best[$n]}" "${peak[$n]:--}" "${smi[$n]:--}"
    done
} >"$out"
for n in "${names[@]}"; do
    [[ -n ${best[$n]:-} ]] || { echo "$n: not measured (budget or failure)" >&2; continue; }
    read -r -a a <<<"$(case_args "$n")"
    read -r e eb < <(estimate "$mfile" "${a[@]}")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "${best[$n]}" "$e" "${prof[$n]:--}" "$eb" "${peak[$n]:--}" "${smi[$n]:--}"
done >"$tmp/rows"
echo
echo "== measured on this GPU vs estimated on $mfile (error = estimate / measured - 1; memory: estimate / nvidia-smi's most - 1)"
awk -F'\t' '
    function abs(v) { return v < 0 ? -v : v }
    function mib(b) { return b == "-" ? "-" : sprintf("%.1f", b / 1048576) }
    BEGIN { printf "%-20s %11s %11s %7s %11s %7s %9s %9s %8s %6s\n", "case", "measured ms", "est ms", "err",
                   "profiled ms", "err", "est MiB", "peak MiB", "smi MiB", "err" }
    { e = $3 / $2 - 1; n++; if (abs(e) <= 0.25) ok++; if (abs(e) > mx) mx = abs(e)
      pe = "-"; if ($4 != "-") { p = $4 / $2 - 1; pe = sprintf("%+.0f%%", 100 * p); np++; if (abs(p) <= 0.25) okp++ }
      me = "-"; if ($7 != "-" && $7 > 0) { m = $5 / 1048576 / $7 - 1; me = sprintf("%+.0f%%", 100 * m); nm++; if (abs(m) <= 0.2) okm++ }
      printf "%-20s %11.3f %11.3f %+6.0f%% %11s %7s %9s %9s %8s %6s\n", $1, $2, $3, 100 * e, $4, pe, mib($5), mib($6), $7, me }
    END { printf "%d cases: analytic within 25%% %d (largest error %.0f%%)", n, ok, 100 * mx
          if (np) printf ", profiled within 25%% %d of %d", okp, np
          if (nm) printf ", memory within 20%% of nvidia-smi %d of %d", okm, nm
          printf "\n" }' "$tmp/rows"
echo "measured rows: $out ($((SECONDS - start)) s)"
