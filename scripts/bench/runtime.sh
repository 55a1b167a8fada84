#!/usr/bin/env bash
# Runtime benchmarks (issue 6):
#  1. sgemm efficiency: the runtime's linear kernel (un_kern_forward, which calls OpenBLAS sgemm
#     on one piece) against OpenBLAS's own cblas_sgemm on the same sizes, same thread count, in
#     the same process and under the same OPENBLAS_CORETYPE (this environment sets it, which picks
#     a slower kernel: about 115 vs 218 GFLOP/s a core on this machine).
#  2. training step time of the tiny MLP and the tiny transformer (forward, backward, Adam)
#     against PyTorch on the CPU with the same model, batch and thread count.
#
#   scripts/bench/runtime.sh [BUILD_DIR]     (default build/default; builds it first)
# Env: THREADS (default 1), STEPS (default 300).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/default}
threads=${THREADS:-1}
steps=${STEPS:-300}
make -s -j2 BUILD="$build" >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} (both sides of every comparison run under it)"
echo "threads: $threads (OPENBLAS_NUM_THREADS, torch.set_num_threads and --threads)"
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads

# ---- 1. sgemm ----
bench_c="$build/bench_runtime_gemm.c"
cat >"$bench_c" <<'CEOF'
/* Times the runtime's linear kernel against cblas_sgemm on [n,n] x [n,n]. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "runtime/kernels.h"
#include "runtime/pool.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    un_ctx *ctx = un_ctx_new(NULL);
    un_pool *pool = threads > 1 ? un_pool_new(threads) : NULL;
    int sizes[] = {256, 512, 1024, 2048};
    printf("%6s %16s %16s %8s\n", "n", "openblas GFLOP/s", "runtime GFLOP/s", "ratio");
    for (int z = 0; z < 4; z++) {
        int n = sizes[z];
        float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
        for (long i = 0; i < (long)n * n; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; }
        double flops = 2.0 * n * n * n;
        int reps = (int)(1e9 / flops) + 1;
        un_param p[UN_MAX_PARAMS] = {{0}};
        p[0].len = -1; p[1].len = -1; /* activation none, no bias */
        un_kexec ex = {.prec = UN_PREC_F32, .pool = pool, .training = true};
        un_kt in[2] = {{UN_DT_FLOAT, 2, {n, n}, a}, {UN_DT_FLOAT, 2, {n, n}, b}};
        un_kt out = {UN_DT_FLOAT, 2, {n, n}, c};
        if (un_kern_forward(ctx, &ex, UN_OP_LINEAR, p, in, 2, &out, 1) != UN_OK) { printf("kernel: %s\n", un_ctx_errmsg(ctx)); return 1; }
        /* Alternate the two, best of 7 rounds each: the machine is shared, load comes and goes. */
        double blas = 0, ours = 0;
        for (int round = 0; round < 7; round++) {
            double t0 = now();
            for (int r = 0; r < reps; r++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
            double g = flops * reps / (now() - t0) / 1e9;
            blas = g > blas ? g : blas;
            t0 = now();
            for (int r = 0; r < reps; r++)
                un_kern_forward(ctx, &ex, UN_OP_LINEAR, p, in, 2, &out, 1);
            g = flops * reps / (now() - t0) / 1e9;
            ours = g > ours ? g : ours;
        }
        printf("%6d %16.1f %16.1f %8.2f\n", n, blas, ours, ours / blas);
        free(a); free(b); free(c);
    }
    un_pool_free(pool);
    un_ctx_free(ctx);
    return 0;
}
CEOF
libs="$build/libruntime.a $build/libpcg.a -lopenblas -lcjson -lm $(pkg-config --libs ompi-c 2>/dev/null) -pthread"
cc -std=c17 -O2 -D_GNU_SOURCE -I. "$bench_c" $libs -o "$build/bench_runtime_gemm"
echo
echo "== sgemm: the runtime's linear kernel vs OpenBLAS cblas_sgemm, [n,n]x[n,n], $threads thread(s), best of 7 alternating rounds"
"$build/bench_runtime_gemm" "$threads"
if [[ -n ${OPENBLAS_CORETYPE:-} ]]; then
    echo "-- the same with OPENBLAS_CORETYPE unset (OpenBLAS picks its kernel for this CPU)"
    env -u OPENBLAS_CORETYPE "$build/bench_runtime_gemm" "$threads"
fi

# ---- 2. training steps ----
echo
echo "== training step (forward + backward + Adam), tiny models, batch 16, $threads thread(s)"
for m in mlp transformer; do
    "$build/bin/unity-train" --model "$m" --tiny --steps "$steps" --threads "$threads" --quiet >/dev/null
    line=$("$build/bin/unity-train" --model "$m" --tiny --steps "$steps" --threads "$threads" | tail -1)
    ms=$(sed -n 's/.* \([0-9.]*\) ms\/step.*/\1/p' <<<"$line")
    printf 'unity-train %-12s %8s ms/step\n' "$m" "$ms"
done
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    /usr/bin/python3 - "$threads" "$steps" <<'PYEOF'
import sys, time, torch
th, n = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
torch.set_num_threads(th)
B = 16
def mlp():  # zoo tiny mlp: 2 towers of 2 linear 32 (relu, none), no bias, added; CE over 32
    class M(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.t = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(32, 32, bias=False), torch.nn.ReLU(),
                                                           torch.nn.Linear(32, 32, bias=False)) for _ in range(2)])
        def forward(s, a, b):
            return s.t[0](a) + s.t[1](b)
    m = M(); x1 = torch.randn(B, 32); x2 = torch.randn(B, 32); y = torch.randint(0, 32, (B,))
    return m, lambda: torch.nn.functional.cross_entropy(m(x1, x2), y)
def transformer():  # zoo tiny transformer: [B,8,32], 2 post-LN layers, 4 heads, FFN 128, no biases, head 32->1, MSE
    class L(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.att = torch.nn.MultiheadAttention(32, 4, bias=False, batch_first=True)
            s.ln1 = torch.nn.LayerNorm(32); s.ln2 = torch.nn.LayerNorm(32)
            s.f1 = torch.nn.Linear(32, 128, bias=False); s.f2 = torch.nn.Linear(128, 32, bias=False)
        def forward(s, x):
            x = s.ln1(x + s.att(x, x, x, need_weights=False)[0])
            return s.ln2(x + s.f2(torch.nn.functional.gelu(s.f1(x))))
    m = torch.nn.Sequential(L(), L(), torch.nn.Linear(32, 1, bias=False))
    x = torch.randn(B, 8, 32); y = torch.randn(B, 8, 1)
    return m, lambda: torch.nn.functional.mse_loss(m(x), y)
for name, f in (("mlp", mlp), ("transformer", transformer)):
    m, loss = f()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    def step():
        opt.zero_grad(); l = loss(); l.backward(); opt.step()
    for _ in range(20):
        step()
    t = time.perf_counter()
    for _ in range(n):
        step()
    print(f"pytorch {torch.__version__:<7} {name:<12} {1e3 * (time.perf_counter() - t) / n:8.3f} ms/step")
PYEOF
else
    echo "pytorch: not installed for /usr/bin/python3 - comparison skipped"
fi

# ---- 3. strategies on mid-size models (h14's section; issue 14 item 6) ----
# Serial on 1 device and data parallel on 2 devices of the same machine, both with the same
# total threads (STRAT_THREADS, default 2), for a mid-size MLP and transformer sized by --config
# (the same strings the cost bench and unity-train take): step time, time per sample and what
# each device holds (the runtime's own accounting, --stats). Both sides alternate, best of
# STRAT_ROUNDS (default 3) rounds, since the machine is shared. A tensor-parallel column needs a
# plan for the zoo model (unity-train has no `--strategy tensor` yet), so there is none.
strategies() {
    local th=${STRAT_THREADS:-2} rounds=${STRAT_ROUNDS:-3} steps=${STRAT_STEPS:-10}
    local -a models=("mlp --config layers=4,hidden=1024,batch=64"
                     "transformer --tiny --config layers=2,hidden=256,heads=4,ffn=1024,seq=32,batch=32")
    echo
    echo "== strategies: serial (1 device) vs data parallel (2 devices), $th threads in all, best of $rounds, load: $(cut -d' ' -f1-3 /proc/loadavg)"
    printf '%-82s %-8s %10s %12s %14s %14s\n' model strategy ms/step us/sample weights+opt/dev peak/dev
    local m s best line ms stats
    for m in "${models[@]}"; do
        for s in "--devices 1" "--devices 2"; do
            best=
            for ((r = 0; r < rounds; r++)); do
                line=$("$build/bin/unity-train" --model $m $s --threads "$th" --steps "$steps" --stats | grep -E '^trained|^ +0 ')
                ms=$(sed -n 's/.* \([0-9.]*\) ms\/step.*/\1/p' <<<"$line")
                if [[ -z $best ]] || awk -v a="$ms" -v b="$best" 'BEGIN{exit !(a<b)}'; then
                    best=$ms
                    stats=$(awk '/^ +0 /{printf "%.1f MiB %.1f MiB", ($2+$3)/1048576, $4/1048576}' <<<"$line")
                fi
            done
            local batch=${m##*batch=}
            batch=${batch%% *}
            printf '%-82s %-8s %10s %12.1f %29s\n' "$m" "${s#--devices }dev" "$best" \
                "$(awk -v t="$best" -v b="$batch" 'BEGIN{print 1000*t/b}')" "$stats"
        done
    done
}
strategies
