#!/usr/bin/env bash
# Benchmark of unity-gen (issue 4): for N = 2, 3, 4 with the default menu, wall time, graphs/s,
# peak RSS and the candidates left after each pruning stage; then the recall against FlexFlow's
# published rules (../shared/external/flexflow_graph_subst_3_v2.json) with the menu that speaks
# FlexFlow's vocabulary in the shapes our import gives those rules (specs/menus/flexflow.json).
#
#   scripts/bench/gen.sh [BUILD_DIR] [N4_TIME_LIMIT_SECONDS]
#
# Output: one block per run; the detailed recall report (every published rule not found, with its
# category and reason) goes to $OUT/recall.txt (OUT defaults to a temporary directory).
# Timings depend on the load of the machine; say so when you quote them.
set -euo pipefail
build=${1:-build/default}
n4_limit=${2:-240}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
gen=$build/bin/unity-gen
[[ -x $gen ]] || { echo "gen.sh: $gen not found (run make BUILD=$build)" >&2; exit 1; }
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/unity-gen-bench.XXXXXX")}
mkdir -p "$out"
threads=$(nproc)

run() { # label, then unity-gen arguments
    local label=$1
    shift
    echo "== $label (threads $threads)"
    /usr/bin/time -v "$gen" "$@" >"$out/run.txt" 2>"$out/time.txt" || {
        cat "$out/run.txt" "$out/time.txt"
        return 1
    }
    cat "$out/run.txt"
    awk -F': ' '/Maximum resident set size/ {printf "peak RSS            %.0f MiB\n", $2 / 1024}
                /Elapsed \(wall clock\)/ {print "wall time           " $2}' "$out/time.txt"
}

for n in 2 3; do
    rm -f "$out/n$n.db"
    run "default menu, N=$n" --ops specs/ --max-ops "$n" --threads "$threads" -o "$out/n$n.db"
done
# the classics, in the rules of the default menu at N=3 (canonical names: inputs x0, x1, ..., weights w0, w1, ...)
"$gen" --ops specs/ --max-ops 3 --threads "$threads" --dry-run --list >"$out/list3.txt"
echo "== classics in the default menu's rules at N=3"
while IFS='|' read -r name pat; do
    if grep -qF -- "$pat" "$out/list3.txt"; then echo "  found    $name"; else echo "  MISSING  $name"; fi
done <<'CLASSICS'
ew_add commutativity|ew_add(x0, x1) => ew_add(x1, x0)
ew_add associativity|ew_add(x2, ew_add(x0, x1)) => ew_add(x
linear (matmul) associativity|linear(linear(x0, w0), w1) => linear(x0, linear(w0, w1))
ew_mul distributes over ew_add|ew_mul(x2, ew_add(x0, x1)) => ew_add(ew_mul
linear distributes over ew_add|linear(ew_add(x0, x1), w0) => ew_add(linear
two linears sharing an input merged|split[axis=2,sizes=[4,4]](linear(x0, concat[axis=1](w1, w0))):0 => linear(x0, w1)
partition -> relu -> combine|relu(x0) => combine[dim=0,degree=k](relu(partition[dim=0,degree=k](x0)))
partition -> ew_add -> combine (pushed through)|partition[dim=0,degree=k](ew_add(x0, x1)) => ew_add(partition
data parallelism (partition batch, replicate weight)|partition[dim=0,degree=k](linear(x0, w0)) => linear(partition[dim=0,degree=k](x0), replicate[degree=k](w0))
tensor parallelism (contraction dim, then reduce)|linear(combine[dim=2,degree=k](x0), combine[dim=0,degree=k](w0)) => reduce[degree=k](linear(x0, w0))
CLASSICS

rm -f "$out/n4.db"
run "default menu, N=4 (time limit ${n4_limit}s)" --ops specs/ --max-ops 4 --threads "$threads" \
    --time-limit "$n4_limit" -o "$out/n4.db"

ff=../shared/external/flexflow_graph_subst_3_v2.json
if [[ -f $ff ]]; then
    run "recall: FlexFlow menu, N=3" --ops specs/ --menu specs/menus/flexflow.json --dry-run \
        --threads "$threads" --recall "$ff" >"$out/recall.txt"
    sed -n '/^==/,/^recall against/p;/^  rejected/,/^  missed/p' "$out/recall.txt"
    grep -E '^(peak RSS|wall time)' "$out/recall.txt"
    echo "(details: $out/recall.txt)"
else
    echo "== recall: $ff not found, skipped"
fi
