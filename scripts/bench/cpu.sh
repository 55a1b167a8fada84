#!/usr/bin/env bash
# sgemm of every OpenBLAS kernel set ("core type") this CPU can run, and the one the runtime
# chooses (runtime/blas.h), in GFLOP/s for [n,n]x[n,n] at n = 256..2048, on 1 and 2 threads.
# Each candidate runs in its own process with OPENBLAS_CORETYPE set (OpenBLAS reads it when it
# loads); "chosen" runs with the environment as it is and un_blas_init() choosing. Best of
# ROUNDS (default 5) timed rounds of >= 0.3 s each, alternating: the machine may be shared.
#
#   scripts/bench/cpu.sh [BUILD_DIR]     (default build/default; builds it first)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/default}
rounds=${ROUNDS:-5}
make -s -j2 BUILD="$build" >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
    "$(grep -m1 -o 'avx512f' /proc/cpuinfo || echo 'no avx512f')"
echo "load: $(uptime | sed 's/.*load/load/')"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} in the environment"

src="$build/bench_cpu_gemm.c"
cat >"$src" <<'CEOF'
/* argv: threads rounds choose(0/1). Prints: kernel g256 g512 g1024 g2048. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "runtime/blas.h"
void openblas_set_num_threads(int n);
char *openblas_get_corename(void);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: bench_cpu_gemm THREADS ROUNDS CHOOSE\n"); return 2; }
    int threads = atoi(argv[1]), rounds = atoi(argv[2]);
    if (atoi(argv[3])) un_blas_init();
    openblas_set_num_threads(threads);
    printf("%-12s", openblas_get_corename());
    int sizes[] = {256, 512, 1024, 2048};
    for (int z = 0; z < 4; z++) {
        int n = sizes[z];
        float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
        for (long i = 0; i < (long)n * n; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; c[i] = 0; }
        double flops = 2.0 * n * n * n, best = 0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        for (int r = 0; r < rounds; r++) {
            int reps = 0;
            double t0 = now(), t;
            do {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
                reps++;
            } while ((t = now() - t0) < 0.3);
            double g = flops * reps / t / 1e9;
            best = g > best ? g : best;
        }
        printf(" %8.1f", best);
        free(a); free(b); free(c);
    }
    printf("\n");
    return 0;
}
CEOF
libs="$build/libruntime.a -lopenblas -lm -ldl -pthread"
cc -std=c17 -O2 -D_GNU_SOURCE -I. "$src" $libs -o "$build/bench_cpu_gemm"

flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
cands=(Prescott)
has avx && cands+=(Sandybridge)
has avx2 fma && cands+=(Haswell Zen)
has avx512f avx512cd avx512bw avx512dq avx512vl && cands+=(SkylakeX)
has avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16 && cands+=(Cooperlake)

# Rounds alternate between the runs (one timed round per process start), so that the load of
# other processes falls on all of them alike; each cell is the best round.
runs=("${cands[@]}" unset chosen)
run_one() { # name threads -> "kernel g256 g512 g1024 g2048"
    case $1 in
    unset) env -u OPENBLAS_CORETYPE "$build/bench_cpu_gemm" "$2" 1 0 ;;
    chosen) "$build/bench_cpu_gemm" "$2" 1 1 ;;
    *) OPENBLAS_CORETYPE=$1 "$build/bench_cpu_gemm" "$2" 1 0 ;;
    esac
}
label() {
    case $1 in
    unset) echo "unset: OpenBLAS alone" ;;
    chosen) echo "chosen: un_blas_init()" ;;
    *) echo "OPENBLAS_CORETYPE=$1" ;;
    esac
}
for th in 1 2; do
    declare -A best=() kern=()
    for ((r = 0; r < rounds; r++)); do
        for c in "${runs[@]}"; do
            read -r k g1 g2 g3 g4 < <(run_one "$c" "$th")
            kern[$c]=$k
            i=0
            for g in $g1 $g2 $g3 $g4; do
                cur=${best[$c,$i]:-0}
                best[$c,$i]=$(awk -v a="$cur" -v b="$g" 'BEGIN { print (b > a ? b : a) }')
                i=$((i + 1))
            done
        done
    done
    echo
    echo "== sgemm GFLOP/s, [n,n]x[n,n], $th thread(s), best of $rounds alternating rounds"
    printf '%-32s %-12s %8s %8s %8s %8s\n' "run" "kernel" 256 512 1024 2048
    for c in "${runs[@]}"; do
        printf '%-32s %-12s %8s %8s %8s %8s\n' "$(label "$c")" "${kern[$c]}" \
            "${best[$c,0]}" "${best[$c,1]}" "${best[$c,2]}" "${best[$c,3]}"
    done
    printf '%-32s %-12s' "chosen / best candidate" ""
    for i in 0 1 2 3; do
        top=0
        for c in "${cands[@]}"; do
            top=$(awk -v a="$top" -v b="${best[$c,$i]}" 'BEGIN { print (b > a ? b : a) }')
        done
        awk -v a="${best[chosen,$i]}" -v b="$top" 'BEGIN { printf " %7.0f%%", 100 * a / b }'
    done
    echo
    unset best kern
done
