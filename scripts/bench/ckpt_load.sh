#!/usr/bin/env bash
# Peak memory per rank of loading a checkpoint into another plan (issue 14): the mid MLP
# (--config layers=4,hidden=1024,batch=64, Adam, float32) saved under data parallelism on
# `mpirun -np 2` (one file per rank) and as one file, each loaded under tensor parallelism on
# `mpirun -np 4` for one step. Prints each process's peak RSS (/usr/bin/time -v "Maximum resident
# set size") for: the load with this build's unity-train, the same with BASE_BIN (another build,
# e.g. one from before un_checkpoint_load_exec, whose load assembled the whole logical state on
# every rank) when given, and a run of the same plan without --load (fresh initialisation), plus
# the logical state's size (weights + Adam's two moments).
#
#   scripts/bench/ckpt_load.sh [BUILD_DIR]        (default build/default; builds it first)
#   BASE_BIN=/path/to/old/unity-train scripts/bench/ckpt_load.sh
# Env: CONFIG (the --config string), STRATEGY (the load's plan, default tensor).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/default}
make -s -j2 BUILD="$build" >/dev/null
config=${CONFIG:-layers=4,hidden=1024,batch=64}
strategy=${STRATEGY:-tensor}
bin="$root/$build/bin/unity-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ckpt_load.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "load at start: $(uptime | sed 's/.*load/load/')"
model=(--model mlp --config "$config" --threads 1 --quiet)
scripts/mpirun.sh -np 2 "$bin" "${model[@]}" --steps 1 --comm mpi --save "$tmp/ranks.ckpt" >/dev/null
"$bin" "${model[@]}" --steps 1 --devices 2 --save "$tmp/one.ckpt" >/dev/null
params=$("$bin" --model mlp --config "$config" --steps 1 --stats | awk '/^ +0 /{print $2}')
echo "mid MLP ($config): weights $(awk -v b="$params" 'BEGIN{printf "%.1f", b/1048576}') MiB float32, logical state with Adam $(awk -v b="$params" 'BEGIN{printf "%.1f", 3*b/1048576}') MiB"
echo "checkpoints: $(du -b "$tmp"/ranks.ckpt.rank* | awk '{s+=$1} END{printf "%.1f MiB", s/1048576}') in 2 rank files (data x2, mpirun -np 2), $(du -b "$tmp/one.ckpt" | awk '{printf "%.1f MiB", $1/1048576}') in one file"
# peak RSS (MiB) of each of 4 processes running BIN with ARGS under mpirun -np 4: "min max"
rss4() {
    local b=$1
    shift
    rm -f "$tmp"/rss.*
    scripts/mpirun.sh -np 4 sh -c '/usr/bin/time -v -o "$0/rss.$OMPI_COMM_WORLD_RANK" "$@" >/dev/null' \
        "$tmp" "$b" "${model[@]}" --steps 1 --comm mpi --strategy "$strategy" "$@"
    awk -F: '/Maximum resident/{v=$2/1024; if (n==0||v<lo) lo=v; if (v>hi) hi=v; n++} END{printf "%7.1f %7.1f %d", lo, hi, n}' "$tmp"/rss.*
}
printf '%-44s %-24s %9s %9s %6s\n' "run (mpirun -np 4, --strategy $strategy)" binary "min MiB" "max MiB" ranks
for src in ranks one; do
    printf '%-44s %-24s %s\n' "--load $src.ckpt" "this build" "$(rss4 "$bin" --load "$tmp/$src.ckpt")"
    if [[ -n ${BASE_BIN:-} ]]; then
        printf '%-44s %-24s %s\n' "--load $src.ckpt" "BASE_BIN" "$(rss4 "$BASE_BIN" --load "$tmp/$src.ckpt")"
    fi
done
printf '%-44s %-24s %s\n' "no --load (fresh initialisation)" "this build" "$(rss4 "$bin")"
echo "load at end: $(uptime | sed 's/.*load/load/')"
