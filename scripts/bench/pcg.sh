#!/usr/bin/env bash
# Benchmark of the shared core: graph construction (with shape/layout inference) plus canonical
# hashing, and piecewise reference evaluation in the prime field and in float64, on the sample MLP
# (serial, data- and tensor-parallel) at 4x4 (the generator's tensor size) and 64x64.
# The evaluator is plain C (no BLAS), single-threaded. Usage: scripts/bench/pcg.sh [ITERS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
make -s all >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "kernel: reference evaluator (pcg/kernels.c, no BLAS), 1 thread"
build/default/bin/unity-pcg bench --iters "${1:-20000}"
