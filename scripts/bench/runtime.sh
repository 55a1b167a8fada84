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
# Env: ROUNDS (default 3), STEPS per run (default 6; step 1 untimed), THREADS (default "1 2").
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/default}
make -s -j2 BUILD="$build" >/dev/null
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "runtime.sh: PyTorch is not installed for /usr/bin/python3 (Debian python3-torch)" >&2
    exit 1
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "load at start: $(uptime | sed 's/.*load/load/')"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} in the environment; PyTorch" \
    "$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
echo "runtime $("$build/bin/unity-train" --model mlp --tiny --steps 1 | sed -n 's/^blas: //p')"
graphs="$build/bench_graphs"
mkdir -p "$graphs"
/usr/bin/python3 scripts/bench/mid_graphs.py "$graphs"
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
echo "load at end: $(uptime | sed 's/.*load/load/')"
