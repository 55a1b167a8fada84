#!/usr/bin/env bash
# The CPU kernels' small matrix-product kernel against OpenBLAS, alone and with two threads
# calling at once (scripts/bench/small_gemm.c says what it measures): the bound of
# runtime/kernels_cpu.c's SMALL_GEMM_MACS comes from this table.
#   scripts/bench/small_gemm.sh [BUILD_DIR]      Env: ROUNDS (default 5), PREC (f64: float64
#                                                products; default float32)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/default}
make -s -j2 BUILD="$build" >/dev/null
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
libs="$build/libruntime.a $build/libpcg.a -lopenblas -lcjson -lm -ldl -pthread"
# shellcheck disable=SC2086 # $libs is a list of words
cc -std=gnu17 -O2 -D_GNU_SOURCE -I. scripts/bench/small_gemm.c $libs -o "$build/bench_small_gemm"
# shellcheck disable=SC2086 # PREC is empty or one word
"$build/bench_small_gemm" "${ROUNDS:-5}" ${PREC:-}
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
