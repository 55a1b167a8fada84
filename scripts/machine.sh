#!/usr/bin/env bash
# Measures this CPU box (sgemm flop/s on one core and memcpy bandwidth, both in thread CPU time;
# thread-to-thread copy bandwidth and barrier latency, medians; per-operator overhead) and writes
# the machine file, whose "source" names the CPU, the OpenBLAS kernel, the date and the load.
#   scripts/machine.sh [OUT.json]        (default specs/machines/cpu.json; BUILD_DIR=build/default)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build/default}/bin
out=${1:-specs/machines/cpu.json}
[ -x "$B/unity-profile" ] || { echo "machine.sh: $B/unity-profile missing (run make)" >&2; exit 1; }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
"$B/unity-profile" machine -o "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "machine.sh: wrote $out ($(lscpu | sed -n 's/^Model name: *//p'), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
