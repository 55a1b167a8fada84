#!/usr/bin/env bash
# Memory of a fresh run now that each rank initialises only its own weight pieces (issue 14, h41):
#  1. peak RSS per process (/usr/bin/time -v) of the mid MLP (--config layers=4,hidden=1024,
#     batch=64 by default, Adam, float32) and a larger one under --strategy tensor and mixed:2x2 on mpirun -np 4,
#     STEPS steps, for this build and, when given, BASE_BIN (a build from before, whose ranks each
#     initialised the whole logical weights and cut their pieces out of them);
#  2. the same model on 4 local devices saving one checkpoint file (--save: streamed to rank 0 one
#     weight at a time; BASE_BIN gathered the logical weights and Adam state there);
#  3. the memory check's need (the sum of --stats' need column over the devices of the one
#     process) against the process's peak RSS, mid MLP and mid transformer, serial and tensor x2;
#  4. the paper-size transformer (BERT-Large) under mixed:2x2 and tensor on 4 devices: the check's
#     answer, under `ulimit -v` of ULIMIT_GB (default 4) so that a run the check lets start stops
#     at its first large allocation instead of growing on this shared machine; and the same model
#     with LAYERS encoder layers, small enough to run (need < 8 GB), where need and RSS are
#     compared.
#
#   scripts/bench/init_rss.sh [BUILD_DIR]          (default build/default; builds it first)
#   BASE_BIN=/path/to/old/unity-train scripts/bench/init_rss.sh
# Env: MLP and MLP_BIG (mlp --config strings; section 1 runs both, the second 8 x 2048: 256 MiB of
# float32 weights, where the logical copy BASE_BIN held shows in the peak), TR (mid transformer --config), STEPS (default 3), LAYERS
# (default 4), BERT_BATCH (default 2), ULIMIT_GB (default 4), ONLY (a section number).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/default}
make -s -j2 BUILD="$build" >/dev/null
bin="$root/$build/bin/unity-train"
mlp=${MLP:-layers=4,hidden=1024,batch=64}
mlp_big=${MLP_BIG:-layers=8,hidden=2048,batch=64}
tr=${TR:-layers=4,hidden=512,heads=8,ffn=2048,seq=256,batch=16}
steps=${STEPS:-3}
only=${ONLY:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/init_rss.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "blas: $("$bin" --model mlp --tiny --steps 1 | sed -n 's/^blas: //p')"
echo "load at start: $(uptime | sed 's/.*load/load/')"

# peak RSS (MiB) of each of 4 processes running BIN ARGS under mpirun -np 4: "min max"
rss4() {
    local b=$1
    shift
    rm -f "$tmp"/rss.*
    # shellcheck disable=SC2016 # $0 and $@ expand in the inner shell
    scripts/mpirun.sh -np 4 sh -c '/usr/bin/time -v -o "$0/rss.$OMPI_COMM_WORLD_RANK" "$@" >/dev/null' \
        "$tmp" "$b" "$@" --comm mpi --quiet
    awk -F: '/Maximum resident/{v=$2/1024; if (n==0||v<lo) lo=v; if (v>hi) hi=v; n++} END{printf "%8.1f %8.1f", lo, hi}' "$tmp"/rss.*
}
# peak RSS (MiB) of one process running BIN ARGS; its stdout in $tmp/out
rss1() {
    /usr/bin/time -v -o "$tmp/rss1" "$@" >"$tmp/out"
    awk -F: '/Maximum resident/{printf "%.1f", $2/1024}' "$tmp/rss1"
}

if [[ -z $only || $only == 1 ]]; then
    echo
    echo "1. fresh run, $steps steps, mpirun -np 4: peak RSS per process"
    printf '%-34s %-12s %-12s %8s %8s\n' "mlp --config" strategy binary "min MiB" "max MiB"
    for c in "$mlp" "$mlp_big"; do
        for s in tensor mixed:2x2; do
            for b in "$bin" ${BASE_BIN:+"$BASE_BIN"}; do
                printf '%-34s %-12s %-12s %s\n' "$c" "$s" "$([[ $b == "$bin" ]] && echo "this build" || echo BASE_BIN)" \
                    "$(rss4 "$b" --model mlp --config "$c" --steps "$steps" --threads 1 --strategy "$s")"
            done
        done
    done
fi

if [[ -z $only || $only == 2 ]]; then
    echo
    echo "2. one-file checkpoint, mlp --config $mlp, 4 local devices (--strategy tensor, 1 step, --save): peak RSS of the process"
    for b in "$bin" ${BASE_BIN:+"$BASE_BIN"}; do
        r=$(rss1 "$b" --model mlp --config "$mlp" --steps 1 --devices 4 --threads 4 --strategy tensor --quiet --save "$tmp/one.ckpt")
        r0=$(rss1 "$b" --model mlp --config "$mlp" --steps 1 --devices 4 --threads 4 --strategy tensor --quiet)
        printf '%-12s with --save %8s MiB, without %8s MiB\n' "$([[ $b == "$bin" ]] && echo "this build" || echo BASE_BIN)" "$r" "$r0"
    done
fi

# one process, D local devices: "need MiB (sum of the devices), peak RSS MiB, RSS/need"
need_vs_rss() {
    local r
    r=$(rss1 "$bin" "$@" --stats)
    awk -v r="$r" '/^device +weights/ { on = 1; next } on && $1 ~ /^[0-9]+$/ { n += $5 }
        END { printf "%10.1f %10.1f %7.3f", n / 1048576, r, r * 1048576 / n }' "$tmp/out"
}

if [[ -z $only || $only == 3 ]]; then
    echo
    echo "3. the memory check's need against peak RSS (one process, $steps steps)"
    printf '%-60s %10s %10s %7s\n' run "need MiB" "RSS MiB" RSS/need
    for m in "mlp --config $mlp" "transformer --config $tr"; do
        for p in 1:serial 2:tensor; do
            # shellcheck disable=SC2086 # $m is the model and its flags
            printf '%-60s %s\n' "$m ${p#*:} x${p%%:*}" "$(need_vs_rss --model $m --devices "${p%%:*}" --strategy "${p#*:}" --steps "$steps" --threads "${p%%:*}")"
        done
    done
fi

if [[ -z $only || $only == 4 ]]; then
    echo
    ulimit_gb=${ULIMIT_GB:-4}
    echo "4. BERT-Large (transformer, paper size) on 4 local devices, under ulimit -v ${ulimit_gb} GiB; MemAvailable $(awk '/MemAvailable/{printf "%.2f GiB", $2/1048576}' /proc/meminfo)"
    for s in mixed:2x2 tensor; do
        for b in "$bin" ${BASE_BIN:+"$BASE_BIN"}; do
            out=$( (ulimit -v $((ulimit_gb * 1048576)) && "$b" --model transformer --devices 4 --strategy "$s" --steps 1 --quiet 2>&1) || true)
            who=$([[ $b == "$bin" ]] && echo "this build" || echo BASE_BIN)
            if grep -q 'needs about' <<<"$out"; then
                echo "  $s, $who: refused: $(tail -1 <<<"$out")"
            else
                echo "  $s, $who: passed the memory check (then stopped by ulimit: $(tail -1 <<<"$out"))"
            fi
        done
    done
    layers=${LAYERS:-4}
    bb=${BERT_BATCH:-2}
    echo "   the same with layers=$layers,batch=$bb, mixed:2x2, 2 steps: need vs peak RSS"
    printf '%-60s %s\n' "transformer --config layers=$layers,batch=$bb mixed:2x2 x4" "$(need_vs_rss --model transformer --config "layers=$layers,batch=$bb" --devices 4 --strategy mixed:2x2 --steps 2 --threads 2)"
fi
echo "load at end: $(uptime | sed 's/.*load/load/')"
