#!/usr/bin/env bash
# Search ablation (issue 15): for the seven paper models at paper size on 4 (specs/machines/
# v100x4.json), 16, 64 and 192 devices (specs/machines/v100x192.json), unity-train --plan-only
# in each mode: (a) data parallel, (d) mcmc (FlexFlow SysML'19, default budget), (b) par-only:
# joint --no-rewrites (layer 3 alone), (c) taso: rewrites by the serial 1-device cost, then
# layer 3, (e) joint: layers 2+3 with the rules. Every mode gets the same --rules DB (the
# verified N=3 set: generated and verified into BUILD_DIR/bench-rules-n3.db once, ~6 minutes,
# unless RULES=path names one). Prints a markdown table: search wall time, the simulator's
# estimated step time, speedup over data parallel, the fullest device's memory (or "no fit"),
# the rewrites applied, the search's peak RSS and why it ended (layer 3; layer 2 after the /).
# Every estimate is the simulator's (plan semantics).
#   scripts/bench/search.sh [BUILD_DIR]  Env: MODELS, DEVICES, MODES, RULES, QUICK, BEFORE, UNITY_TRAIN.
# QUICK=1: a subset for iterating (mlp, transformer, candle_uno, inception_v3 on 16 and 192
# devices; par-only and joint). BEFORE=path/to/unity-train adds the mode joint-before: joint run
# by that binary (e.g. main's build) in the same run, for a before/after comparison.
# UNITY_TRAIN=path: run that binary (a copy) instead of BUILD_DIR's, without building.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/default}
B=$build/bin
if [ -n "${UNITY_TRAIN:-}" ]; then # a copied binary: the build may change while this runs
    [ -x "$UNITY_TRAIN" ] || { echo "search.sh: UNITY_TRAIN=$UNITY_TRAIN: not an executable" >&2; exit 2; }
else
    make -s -j2 BUILD="$build" >/dev/null
fi
train=${UNITY_TRAIN:-$B/unity-train}
if [ "${QUICK:-0}" = 1 ]; then
    models=${MODELS:-"mlp transformer candle_uno inception_v3"}
    devices=${DEVICES:-"16 192"}
    modes=${MODES:-"par-only joint"}
else
    models=${MODELS:-"mlp transformer dlrm xdl candle_uno resnext50 inception_v3"}
    devices=${DEVICES:-"4 16 64 192"}
    modes=${MODES:-"data mcmc par-only taso joint"}
fi
if [ -n "${BEFORE:-}" ]; then
    [ -x "$BEFORE" ] || { echo "search.sh: BEFORE=$BEFORE: not an executable" >&2; exit 2; }
    case " $modes " in *" joint-before "*) ;; *) modes="joint-before $modes" ;; esac
fi
rules=${RULES:-$build/bench-rules-n3.db}
if [ ! -s "$rules" ]; then
    echo "generating and verifying the N=3 rule set into $rules (once)"
    rm -f "$rules" "$rules.compiled"
    "$B/unity-gen" --ops specs/ --max-ops 3 -o "$rules" | tail -1
    "$B/unity-verify" "$rules" --jobs "$(nproc)" | tail -1
fi
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}, load $(cut -d' ' -f1-3 /proc/loadavg)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo
echo "rules: $rules"
echo
echo "| model | devices | mode | wall s | est. step s | speedup vs data | fullest device GB | rewrites | peak RSS MB | ended |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for m in $models; do
    for d in $devices; do
        mach=specs/machines/v100x192.json
        [ "$d" = 4 ] && mach=specs/machines/v100x4.json
        dp=""
        for mode in $modes; do
            set +e
            bin=$train
            case $mode in
            par-only) flags=(--search joint --no-rewrites) ;;
            joint-before)
                flags=(--search joint)
                bin=${BEFORE:?joint-before needs BEFORE=path/to/unity-train}
                ;;
            *) flags=(--search "$mode") ;;
            esac
            /usr/bin/time -f '%e %M' -o "$tmp/time" "$bin" --model "$m" --machine "$mach" \
                --devices "$d" --plan-only --rules "$rules" "${flags[@]}" >"$tmp/out" 2>"$tmp/err"
            rc=$?
            set -e
            read -r wall rss < <(tail -1 "$tmp/time") || true
            wall=$(sed -n 's/^search: .*: \([0-9.]*\) s wall.*/\1/p' "$tmp/out")
            ended=$(sed -n 's/^search: .*ended: \(.*\)$/\1/p' "$tmp/out")
            if [ "$rc" != 0 ]; then
                why=$(grep -o 'needs [0-9.e+]* GB' "$tmp/err" | head -1 || true)
                echo "| $m | $d | $mode | - | - | - | no fit (${why:-$(tail -1 "$tmp/err")}) | - | $((rss / 1024)) | - |"
                continue
            fi
            step=$(sed -n 's/^plan: .*estimated step \([0-9.e+-]*\) s.*/\1/p' "$tmp/out")
            gb=$(sed -n 's/^plan: .*fullest device \([0-9.e+-]*\) GB.*/\1/p' "$tmp/out")
            dps=$(sed -n 's/^data parallel: estimated step \([0-9.e+-]*\) s; .*(\(fits\|does not fit\)).*/\1 \2/p' "$tmp/out")
            dstep=${dps%% *}
            dfit=${dps#* }
            sp="-"
            [ -n "$dstep" ] && sp=$(awk -v a="$dstep" -v b="$step" 'BEGIN{printf "%.2f", a/b}')
            [ "$dfit" = "does not fit" ] && sp="$sp (data: no fit)"
            rw=$(sed -n 's/^rewrites applied: \([0-9][0-9]*\).*/\1/p; s/^rewrites applied: none.*/0/p' "$tmp/out")
            e2=$(sed -n 's/^layer 2 (.*ended: \(.*\)$/\1/p' "$tmp/out")
            [ -n "$e2" ] && ended="$ended / $e2"
            echo "| $m | $d | $mode | $wall | $step | $sp | $gb | ${rw:--} | $((rss / 1024)) | $ended |"
        done
    done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
