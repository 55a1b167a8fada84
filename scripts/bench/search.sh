#!/usr/bin/env bash
# Search ablation (issue 15): for the seven paper models at paper size on 4 (specs/machines/
# v100x4.json), 16, 64 and 192 devices (specs/machines/v100x192.json), unity-train --plan-only
# in each mode: (a) data parallel, (d) mcmc (FlexFlow SysML'19, default budget), (b) par-only:
# joint --no-rewrites (layer 3 alone), (c) taso: rewrites by the serial 1-device cost, then
# layer 3, (e) joint: layers 2+3 with the rules. Every mode gets the same --rules DB (the
# verified N=3 set: generated and verified into BUILD_DIR/bench-rules-n3.db once, ~6 minutes,
# unless RULES=path names one). Prints a markdown table: search wall time, the simulator's
# estimated step time, speedup over data parallel, the fullest device's memory (or "no fit"),
# the rewrites applied, the process's peak RSS and CPU time (user + system: what a loaded box
# inflates least), why it ended (layer 3; layer 2 after the /) and
# layer 3's memo across calls (piece solves answered by the memo / piece solves asked of it,
# + those started from a kept frontier; the nodes whose DP the memo saved of the nodes solved;
# the nodes' configuration lists copied from another map of those looked up).
# Every estimate is the simulator's (plan semantics).
#   scripts/bench/search.sh [BUILD_DIR]  Env: MODELS, DEVICES, MODES, RULES, QUICK, BEFORE, UNITY_TRAIN.
# QUICK=1: a subset for iterating (mlp, transformer, candle_uno, inception_v3 on 16 and 192
# devices; par-only and joint). BEFORE=path/to/unity-train adds the mode joint-before: joint run
# by that binary (e.g. main's build) in the same run, for a before/after comparison.
# UNITY_TRAIN=path: run that binary (a copy) instead of BUILD_DIR's, without building.
#
# ONLY=measured: searched plans measured against data parallelism on this CPU box (issue 15's
# "measured step time no worse than data parallelism's where the estimate says it is better").
# For each model (MEAS_MODELS: the eight tiny zoo models and the mid MLP and mid transformer of
# scripts/bench/runtime.sh) on D devices (MEAS_DEVICES, default "2 4"; 4 devices on this 2-core
# box are oversubscribed threads, 2 per core, from the machine file with devices_per_node = 4):
# the op costs are profiled on this box (unity-train --profile into a fresh cost DB per D: data
# parallelism on D devices, serial on 1), the joint search runs with the measured machine file
# (MACHINE, default specs/machines/cpu.json, scripts/machine.sh's output; MEASURE_MACHINE=1
# reruns scripts/machine.sh first) and exports its plan; the plan's own pieces are profiled and
# the search rerun until its plan stops changing (at most 3 searches: a plan chosen on analytic
# costs of unprofiled pieces is re-searched with them measured); then the plan and data
# parallelism (1 thread per device each) train alternately MEAS_ROUNDS times (default 3) for
# MEAS_STEPS steps (default 40; 8 for the mid models). Prints per case: the estimates (the
# search's, plan semantics, and --estimate --sim runtime, what the runtime executes) and the
# measured ms/step min / median of both, and flags a case where the estimate ranks the plan
# better but its measured min is worse than data parallelism's. The search runs twice, ranking
# plans under plan semantics (the default) and under the runtime's (--sim runtime; MEAS_SIMS
# picks). RULES=path adds layer 2 (the DB is copied; op costs go into the copy).
# MEAS_PLAN_THREADS=all: a plan on fewer devices than D trains with D threads (as many as data
# parallelism; its devices share them) instead of 1 per device (what the estimate assumes). On a
# loaded box a process with fewer threads gets a smaller share of the cores, so a 1-device plan
# measured against 2-device data parallelism at 1 thread per device is at a disadvantage that
# the estimate (CPU time per op) does not see.
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

# ---- ONLY=measured: searched plans against data parallelism, measured on this box ----
# ms_of FILE: the ms/step of a training run's output
ms_of() { sed -n 's/^trained .* \([0-9.]*\) ms\/step.*/\1/p' "$1"; }
# meas_search SEM: the joint search ranking by SEM semantics, its plan's pieces profiled and the
# search rerun until the plan stops changing (at most 3 searches); sets plan_<SEM>.json in $tmpm
# and the globals used, est_p, est_d, desc, note, planrun (reads m, mm, d, mf, db, tmpm, train).
meas_search() {
    local sem=$1 out=$tmpm/out-$1 plan=$tmpm/plan-$1.json prev="" searches rw winner
    note=""
    for ((searches = 1; searches <= 3; searches++)); do
        "$train" --model "${mflags[@]}" --devices "$d" --threads "$d" --machine "$mf" --rules "$db" --sim "$sem" \
            --plan-only --export "$plan" >"$out" 2>"$tmpm/err" ||
            { note="  $mm on $d ($sem): search failed: $(tail -1 "$tmpm/err")"; return 1; }
        used=$(sed -n 's/^plan: runs on \([0-9]*\) device.*/\1/p' "$out")
        if [ -n "$prev" ] && cmp -s "$prev" "$plan"; then break; fi
        cp "$plan" "$tmpm/prev.json"
        prev=$tmpm/prev.json
        rw=$(sed -n 's/^rewrites applied: \([0-9][0-9]*\).*/\1/p' "$out")
        [ -z "$rw" ] || break # a rewritten graph's plan cannot be profiled as the zoo model's
        # no search follows the third: profiling again would change the op costs under the
        # estimates printed below (the search's and --estimate's must come from one cost DB)
        ((searches < 3)) || break
        if ! "$train" --model "${mflags[@]}" --strategy "$plan" --devices "$used" --threads "$used" \
            --profile --quiet --machine "$mf" --rules "$db" >/dev/null 2>"$tmpm/err"; then
            note="  $mm on $d ($sem): the plan's pieces were not profiled: $(tail -1 "$tmpm/err")"
            break
        fi
    done
    ((searches > 3)) && searches=3
    est_p=$(sed -n 's/^plan: .*estimated step \([0-9.e+-]*\) s.*/\1/p' "$out")
    est_d=$(sed -n 's/^data parallel: estimated step \([0-9.e+-]*\) s.*/\1/p' "$out")
    winner=$(sed -n 's/^layer 3: .*winner: \(.*\)$/\1/p' "$out")
    desc="${winner// /_}${rw:+ +${rw}rw} s$searches"
    pthreads=$used
    [ "${MEAS_PLAN_THREADS:-}" = all ] && pthreads=$d
    if [ -n "$rw" ]; then # search again and train the rewritten graph with its plan
        planrun=(--model "${mflags[@]}" --machine "$mf" --rules "$db" --sim "$sem" --devices "$d" --threads "$pthreads")
    else
        planrun=(--model "${mflags[@]}" --strategy "$plan" --devices "$used" --threads "$pthreads")
    fi
}
measured() {
    local mach=${MACHINE:-specs/machines/cpu.json} rounds=${MEAS_ROUNDS:-3}
    tmpm=$(mktemp -d)
    trap 'rm -rf "$tmpm"' EXIT
    if [ "${MEASURE_MACHINE:-0}" = 1 ]; then
        BUILD_DIR=$build scripts/machine.sh "$tmpm/cpu.json" >/dev/null
        mach=$tmpm/cpu.json
    fi
    [ -s "$mach" ] || { echo "search.sh: MACHINE=$mach: no such file" >&2; exit 2; }
    local -a mlist sems
    if [ -n "${MEAS_MODELS:-}" ]; then
        IFS=';' read -r -a mlist <<<"$MEAS_MODELS"
    else
        mlist=("mlp --tiny" "transformer --tiny" "dlrm --tiny" "xdl --tiny" "candle_uno --tiny"
                "resnext50 --tiny" "inception_v3 --tiny" "charlm --tiny"
                "mlp --config layers=4,hidden=1024,batch=64"
                "transformer --config layers=4,hidden=256,heads=4,ffn=1024,seq=128,batch=8")
    fi
    read -r -a sems <<<"${MEAS_SIMS:-plan runtime}"
    echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}, load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "runtime $("$train" --model mlp --tiny --steps 1 | sed -n 's/^blas: //p')"
    echo "machine file: $mach ($(sed -n 's/.*"source": *"\([^"]*\)".*/\1/p' "$mach"))"
    echo "rules: ${RULES:-none (layer 3 only; op costs in a fresh DB)}; rounds ${rounds}, alternating; 1 thread per device"
    echo
    printf '%-58s %2s %-7s %-18s %3s %9s %9s %17s %9s %9s %17s %6s %6s %s\n' model D ranking plan dev \
        est_plan rt_plan "meas_plan min/med" est_dp rt_dp "meas_dp min/med" est_x meas_x verdict
    local d m mm db mf steps r sem used est_p est_d desc note
    local -a planrun ms_d mflags
    local -A ms_p est rt rtd dsc nt run
    for d in ${MEAS_DEVICES:-2 4}; do
        mf=$tmpm/machine-$d.json
        sed -e "s/\"devices_per_node\": *[0-9]*/\"devices_per_node\": $d/" \
            -e "s/\"nodes\": *[0-9]*/\"nodes\": 1/" "$mach" >"$mf"
        db=$tmpm/costs-$d.db
        if [ -n "${RULES:-}" ]; then cp "$RULES" "$db"; fi
        for m in "${mlist[@]}"; do
            mm=$m
            read -r -a mflags <<<"$m" # the model and its flags
            steps=${MEAS_STEPS:-40}
            case $mm in *--config*) steps=${MEAS_STEPS:-8} ;; esac
            "$train" --model "${mflags[@]}" --devices "$d" --threads "$d" --profile --quiet --machine "$mf" --rules "$db" >/dev/null
            "$train" --model "${mflags[@]}" --devices 1 --threads 1 --profile --quiet --machine "$mf" --rules "$db" >/dev/null
            ms_p=() est=() rt=() rtd=() dsc=() nt=() run=()
            for sem in "${sems[@]}"; do
                meas_search "$sem" || { echo "$note"; continue; }
                dsc[$sem]="$desc"
                nt[$sem]="$note"
                est[$sem]="$est_p $est_d $used"
                run[$sem]="${planrun[*]}"
                rt[$sem]=$("$train" --model "${mflags[@]}" --strategy "$tmpm/plan-$sem.json" --devices "$used" --estimate \
                    --sim runtime --machine "$mf" --rules "$db" 2>/dev/null |
                    sed -n 's/^estimated step time: \([0-9.]*\) ms.*/\1/p')
                # data parallelism with the op costs of this search (the next one profiles again)
                rtd[$sem]=$("$train" --model "${mflags[@]}" --devices "$d" --estimate --sim runtime --machine "$mf" \
                    --rules "$db" 2>/dev/null | sed -n 's/^estimated step time: \([0-9.]*\) ms.*/\1/p')
            done
            ms_d=()
            for ((r = 0; r < rounds; r++)); do
                for sem in "${!run[@]}"; do
                    # shellcheck disable=SC2086 # the plan's flags, words without spaces
                    "$train" ${run[$sem]} --steps "$steps" >"$tmpm/tp" 2>&1 || true
                    ms_p[$sem]="${ms_p[$sem]:-} $(ms_of "$tmpm/tp")"
                done
                "$train" --model "${mflags[@]}" --devices "$d" --threads "$d" --steps "$steps" >"$tmpm/td" 2>&1 || true
                ms_d+=("$(ms_of "$tmpm/td")")
            done
            for sem in "${sems[@]}"; do
                [ -n "${run[$sem]:-}" ] || continue
                read -r est_p est_d used <<<"${est[$sem]}"
                awk -v m="$mm" -v d="$d" -v sem="$sem" -v plan="${dsc[$sem]}" -v used="$used" -v ep="$est_p" \
                    -v ed="$est_d" -v rp="${rt[$sem]:-nan}" -v rd="${rtd[$sem]:-nan}" -v mp="${ms_p[$sem]}" -v md="${ms_d[*]}" '
                    function mn(s,  a, n, i, x) { n = split(s, a, " "); x = a[1]; for (i = 2; i <= n; i++) if (a[i] + 0 < x + 0) x = a[i]; return x }
                    function med(s,  a, n, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }; return a[int((n + 1) / 2)] }
                    BEGIN {
                        pm = mn(mp); dm = mn(md); ex = ed / ep; mx = (pm > 0 ? dm / pm : 0)
                        v = "ok"
                        if (pm == "" || dm == "") v = "no measurement"
                        else if (ex > 1.0001 && mx < 1) v = sprintf("EST BETTER, MEASURED %.0f%% WORSE", 100 * (pm / dm - 1))
                        else if (ex < 0.9999 && mx > 1) v = "est worse, measured better"
                        printf "%-58s %2s %-7s %-18s %3s %9.4f %9.4f %8.4f/%-8.4f %9.4f %9.4f %8.4f/%-8.4f %6.2f %6.2f %s\n",
                            m, d, sem, plan, used, ep * 1e3, rp, pm, med(mp), ed * 1e3, rd, dm, med(md), ex, mx, v
                    }'
                [ -z "${nt[$sem]}" ] || echo "${nt[$sem]}"
            done
        done
    done
    echo "(ms. ranking: the semantics the search ranked plans by (--sim); est_*: the search's estimates under them; rt_*: --estimate --sim runtime, what the runtime executes; meas: min/median over the rounds; est_x, meas_x: data parallel / plan; plan: the search's winner, +Nrw rewrites, sN searches until the plan stopped changing)"
    echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
}
if [ "${ONLY:-}" = measured ]; then
    measured
    exit 0
fi
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
echo "| model | devices | mode | wall s | est. step s | speedup vs data | fullest device GB | rewrites | peak RSS MB | CPU s | ended | L3 memo hits / solves |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
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
            /usr/bin/time -f '%e %M %U %S' -o "$tmp/time" "$bin" --model "$m" --machine "$mach" \
                --devices "$d" --plan-only --rules "$rules" "${flags[@]}" >"$tmp/out" 2>"$tmp/err"
            rc=$?
            set -e
            read -r wall rss usr sys < <(tail -1 "$tmp/time") || true
            cpu=$(awk -v u="$usr" -v s="$sys" 'BEGIN{printf "%.2f", u + s}')
            wall=$(sed -n 's/^search: .*: \([0-9.]*\) s wall.*/\1/p' "$tmp/out")
            ended=$(sed -n 's/^search: .*ended: \(.*\)$/\1/p' "$tmp/out")
            if [ "$rc" != 0 ]; then
                why=$(grep -o 'needs [0-9.e+]* GB' "$tmp/err" | head -1 || true)
                echo "| $m | $d | $mode | - | - | - | no fit (${why:-$(tail -1 "$tmp/err")}) | - | $((rss / 1024)) | $cpu | - | - |"
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
            memo=$(sed -n 's/^layer 3 memo: \([0-9]*\) piece solves over the search, \([0-9]*\) from.*, \([0-9]*\) more started from a kept frontier; \([0-9]*\) of \([0-9]*\) nodes.* configurations: \([0-9]*\) of \([0-9]*\) copied.*/\2 \/ \1 (+\3 from a frontier; \4 of \5 nodes; configs \6 of \7)/p' "$tmp/out")
            echo "| $m | $d | $mode | $wall | $step | $sp | $gb | ${rw:--} | $((rss / 1024)) | $cpu | $ended | ${memo:--} |"
        done
    done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
