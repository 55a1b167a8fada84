#!/usr/bin/env bash
# Dimension variables (issue 17 item 3): what they change in the N=3 default rule set.
#  1. unity-gen (default menu, N=3) then unity-verify --jobs J, once with a baseline checkout
#     (BASE: its build/default binaries and its specs/, e.g. /work/main before dim variables) and
#     once with this checkout (BUILD, and ./specs): wall times,
#     peak memory, verdicts, and how many rules the verifier made dimension-generic (split sizes
#     tied to input dims, proven for every size).
#  2. The two-linears merge (linear(x0, w0), linear(x0, w1) => split(linear(x0, concat(w0, w1))),
#     rule 301 of the N=3 set) of each database, matched by unity-rewrite on Q/K-style graphs at
#     two sizes that are not the generator's (x [2,3,8] with wq, wk [8,8]; x [1,5,6] with wq
#     [6,12], wk [6,2]): the fixed-shape rule matches neither, the dimension-generic one both.
#
#   scripts/bench/dims.sh BASE [BUILD] [JOBS]
#
# REUSE=1 with an $OUT of an earlier run only repeats the matching. The databases stay in $OUT (default: a temporary directory). Timings depend on the load of the
# machine (other jobs share its cores); the load is printed before and after each run.
set -euo pipefail
basedir=$(cd "${1:?usage: dims.sh BASE [BUILD] [JOBS]}" && pwd)
base=$basedir/build/default
build=${2:-build/default}
jobs=${3:-2}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
for b in "$base" "$build"; do
    for p in unity-gen unity-verify unity-rules unity-rewrite; do
        [[ -x $b/bin/$p ]] || { echo "dims.sh: $b/bin/$p not found" >&2; exit 1; }
    done
done
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/unity-dims-bench.XXXXXX")}
mkdir -p "$out"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"

qk() { # name b s h dq dk: a Q/K graph JSON
    cat >"$out/$1.json" <<JSON
{"nodes": [{"name": "x", "op": "input", "params": {"shape": [$2, $3, $4]}},
           {"name": "wq", "op": "weight", "params": {"shape": [$4, $5]}},
           {"name": "wk", "op": "weight", "params": {"shape": [$4, $6]}},
           {"name": "q", "op": "linear", "in": ["x", "wq"], "params": {"activation": "relu"}},
           {"name": "k", "op": "linear", "in": ["x", "wk"], "params": {"activation": "relu"}}],
 "outputs": ["q", "k"]}
JSON
}
qk qk1 2 3 8 8 8
qk qk2 1 5 6 12 2

for side in base new; do
    b=$base
    specs=$basedir/specs
    [[ $side == new ]] && b=$build && specs=specs
    db=$out/$side.db
    echo "== $side ($b); load $(cut -d' ' -f1-3 /proc/loadavg)"
    if [[ -n ${REUSE:-} && -f $db ]]; then # REUSE=1: keep $OUT's databases, only match
        echo "  (reusing $db)"
    else
    rm -f "$db"*
    /usr/bin/time -f "  unity-gen: %e s wall, %M KB peak" "$b/bin/unity-gen" --ops "$specs" -o "$db" \
        --max-ops 3 --threads "$jobs" >"$out/$side-gen.txt" 2>"$out/$side-gen.time" ||
        { cat "$out/$side-gen.txt" "$out/$side-gen.time"; exit 1; }
    tail -1 "$out/$side-gen.time"
    /usr/bin/time -f "  unity-verify --jobs $jobs: %e s wall, %M KB peak" "$b/bin/unity-verify" "$db" \
        --spec "$specs" --jobs "$jobs" >"$out/$side-verify.txt" 2>"$out/$side-verify.time" ||
        { cat "$out/$side-verify.txt" "$out/$side-verify.time"; exit 1; }
    tail -1 "$out/$side-verify.time"
    fi
    tail -1 "$out/$side-verify.txt" | sed 's/^[^:]*: /  /'
    # the merge rule (rule 301: its linears have a fused relu, as the graphs' do): two linears
    # sharing x0 => a split of one linear over concatenated weights
    id=$("$b/bin/unity-rules" --spec "$specs" list "$db" --status verified --op split |
        grep -P '^\d+\tverified\t5\t\w+\tlinear\[activation=relu\]\(x0, w[01]\) => split\[axis=2,sizes=\[[^\]]*\]\]\(linear\[activation=relu\]\(x0, concat\[axis=1\]\(w0, w1\)\)\)' |
        head -1 | cut -f1 || true)
    if [[ -z $id ]]; then
        echo "  merge rule: not found"
        continue
    fi
    echo "  merge rule $id: $("$b/bin/unity-rules" --spec "$specs" list "$db" --status verified --op split |
        awk -F'\t' -v id="$id" '$1 == id {print $5; exit}' | cut -c1-150)"
    for g in qk1 qk2; do
        n=$("$b/bin/unity-rewrite" "$db" "$out/$g.json" --rule "$id" --list --no-cache \
            --ops "$specs/ops.json" 2>&1 |
            grep -c '^  match ' || true)
        echo "    on $g ($(tr -d '\n ' <"$out/$g.json" | grep -o '"shape":\[[0-9,]*\]' | head -3 |
            sed 's/"shape"://' | tr '\n' ' ')): $n matches"
    done
done
echo "end load $(cut -d' ' -f1-3 /proc/loadavg); databases and logs: $out"
