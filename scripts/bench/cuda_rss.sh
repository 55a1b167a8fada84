#!/usr/bin/env bash
# Peak RSS of a CPU-only run with the CUDA libraries loaded lazily (the plugins of a CUDA build,
# runtime/README.md) against the same run with them mapped at start, as when the program linked
# them: the same binary with the plugins in LD_PRELOAD (which brings cudart, cuBLAS, cuBLASLt and
# NCCL in with them, as DT_NEEDED entries of the program used to). Both sides alternate in one
# run, best (lowest) of ROUNDS each, peak RSS and wall time from /usr/bin/time.
#
#   scripts/bench/cuda_rss.sh [BUILD_DIR]     (default build/default; builds it first)
# Env: ROUNDS (default 3), ARGS (default "--model mlp --tiny --quiet").
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/default}
rounds=${ROUNDS:-3}
args=${ARGS:---model mlp --tiny --quiet}
make -s -j2 BUILD="$build" >/dev/null
[[ -x /usr/bin/time ]] || { echo "cuda_rss.sh: /usr/bin/time is needed (apt-get install time)" >&2; exit 2; }
plugins=$(ls "$build"/lib/libunity_*.so 2>/dev/null | tr '\n' ':' | sed 's/:$//')
[[ -n $plugins ]] || { echo "cuda_rss.sh: $build has no CUDA plugins (not a CUDA build) - nothing to compare" >&2; exit 2; }
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'); $(uptime | sed 's/.*load/load/')"
echo "program: $build/bin/unity-train $args"
# peak RSS in kB and wall seconds of one run
measure() { /usr/bin/time -f '%M %e' "$@" 2>&1 >/dev/null | tail -1; }
best_lazy=0 best_linked=0 wall_lazy=999 wall_linked=999
for ((r = 0; r < rounds; r++)); do
    # shellcheck disable=SC2086
    read -r a ta < <(measure "$build/bin/unity-train" $args)
    # shellcheck disable=SC2086
    read -r b tb < <(LD_PRELOAD=$plugins measure "$build/bin/unity-train" $args)
    ((best_lazy == 0 || a < best_lazy)) && best_lazy=$a
    ((best_linked == 0 || b < best_linked)) && best_linked=$b
    (($(echo "$ta < $wall_lazy" | bc))) && wall_lazy=$ta
    (($(echo "$tb < $wall_linked" | bc))) && wall_linked=$tb
done
printf '%-52s %8s %10s\n' "" "peak RSS" "wall"
printf '%-52s %8.1f MiB %6.2f s\n' "CUDA libraries loaded on first GPU use (this build)" "$(echo "$best_lazy / 1024" | bc -l)" "$wall_lazy"
printf '%-52s %8.1f MiB %6.2f s\n' "CUDA libraries mapped at start (LD_PRELOAD plugins)" "$(echo "$best_linked / 1024" | bc -l)" "$wall_linked"
printf '%-52s %8.1f MiB\n' "saved per CPU-only process" "$(echo "($best_linked - $best_lazy) / 1024" | bc -l)"
