#!/usr/bin/env bash
# Parallel branches on disjoint devices (issue 14 "Must show", issue 15 layer 3): the zoo MLP's
# two towers (tiny base scaled by CONFIG, default layers=4,hidden=512,batch=64) planned by the
# search for this box's 2 cores as 2 devices (specs/machines/cpu.json), which puts the towers on
# devices 0 and 1; then, ROUNDS times alternately, training STEPS steps with
#   serial: 1 device, 1 thread (both towers one after the other: the serial sum)
#   plan:   the searched plan on 2 devices, 1 thread each (the towers concurrently)
#   data:   data parallelism on 2 devices, 1 thread each
# Prints the plan's placement, each run's ms/step (unity-train's own average over the steps) and
# process CPU time (the same work on both sides: the plan gains wall time only when its two rank
# threads get a core each), the median per side, serial/plan, and the final losses (equal).
#   scripts/bench/branches.sh [BUILD_DIR]        Env: CONFIG, ROUNDS (default 3), STEPS (20).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/default}
make -s -j2 BUILD="$build" >/dev/null
B=$build/bin
config=${CONFIG:-layers=4,hidden=512,batch=64}
rounds=${ROUNDS:-3}
steps=${STEPS:-20}
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "runtime $("$B/unity-train" --model mlp --tiny --steps 1 | sed -n 's/^blas: //p')"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model="--model mlp --tiny --config $config"
# shellcheck disable=SC2086
"$B/unity-train" $model --machine specs/machines/cpu.json --devices 2 --plan-only \
    --export "$tmp/plan.json" >"$tmp/search.txt"
echo "plan (mlp --tiny --config $config, searched for specs/machines/cpu.json, 2 devices):"
grep -E '^plan:|^  t[12]\.l1 ' "$tmp/search.txt" | sed 's/^/  /'
declare -A all
loss=()
for r in $(seq 1 "$rounds"); do
    for side in serial plan data; do
        case $side in
        serial) args="--devices 1 --threads 1" ;;
        plan) args="--devices 2 --threads 2 --strategy $tmp/plan.json" ;;
        data) args="--devices 2 --threads 2 --strategy data" ;;
        esac
        # shellcheck disable=SC2086
        /usr/bin/time -f '%U %S' -o "$tmp/time" "$B/unity-train" $model --steps "$steps" $args >"$tmp/out" 2>&1
        ms=$(sed -n 's/^trained .*, \([0-9.]*\) ms\/step.*/\1/p' "$tmp/out")
        cpu=$(awk '{printf "%.0f", ($1 + $2) * 1000}' "$tmp/time")
        all[$side]="${all[$side]:-} $ms"
        loss+=("$side $(sed -n 's/^trained .*loss [0-9.]* -> \([0-9.]*\),.*/\1/p' "$tmp/out")")
        echo "round $r $side: $ms ms/step (process CPU $cpu ms for $steps steps and set-up; load $(cut -d' ' -f1 /proc/loadavg))"
    done
done
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
s=$(echo "${all[serial]}" | median)
p=$(echo "${all[plan]}" | median)
d=$(echo "${all[data]}" | median)
echo
echo "median ms/step: serial (1 device) $s, plan (towers on devices 0 and 1) $p, data parallel (2 devices) $d"
awk -v s="$s" -v p="$p" 'BEGIN{printf "serial / plan: %.2fx (the towers run concurrently when > 1)\n", s/p}'
finals=$(printf '%s\n' "${loss[@]}" | awk '{print $2}' | sort -u | wc -l)
echo "final losses: $(printf '%s\n' "${loss[@]}" | sort -u | tr '\n' ' ')($finals distinct)"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
