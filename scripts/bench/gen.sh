#!/usr/bin/env bash
# Benchmark of unity-gen (issue 4): for N = 2, 3, 4 with the default menu, wall time, graphs/s,
# peak RSS and the candidates left after each pruning stage; then the recall against FlexFlow's
# published rules (../shared/external/flexflow_graph_subst_3_v2.json) with the menu that speaks
# FlexFlow's vocabulary in the shapes our import gives those rules (specs/menus/flexflow.json).
#
#   scripts/bench/gen.sh [BUILD_DIR] [N4_TIME_LIMIT_SECONDS]
#
# Then, for the CNN and attention menus (specs/menus/cnn.json, attention.json) at N = 2 and 3: the
# same counts, unity-verify on each set (verified / refuted / unknown, % decided) and which classic
# rewrites are among the rules (MENUS=0 skips this). With E2E=1: the issue-17 pipeline,
# `unity-gen --max-ops 4` on the default menu with no time limit, then `unity-verify --jobs T` on
# its database, with the wall time and peak RSS of each step and their sum (targets: under 15
# minutes and 2 GB, >= 98% decided). `uptime` is printed first: the machine is shared.
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
verify=$build/bin/unity-verify
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); uptime:$(uptime)"

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

# Verified / refuted / unknown of a database just verified (its unity-verify stdout in $1).
vsummary() {
    python3 - "$1" <<'EOF'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r': (\d+) rules: (\d+) verified .*?, (\d+) refuted, (\d+) unknown', t)
if not m:
    print("  could not read the verifier's summary:\n" + t)
    sys.exit(1)
n, v, r, u = (int(m.group(i)) for i in range(1, 5))
print(f"verified            {v} of {n}, refuted {r}, unknown {u}: "
      f"{100.0 * (v + r) / (n or 1):.1f}% decided")
EOF
}

vrun() { # label, database
    echo "== unity-verify: $1"
    /usr/bin/time -v "$verify" "$2" --jobs "$threads" >"$out/vrun.txt" 2>"$out/vtime.txt" || {
        cat "$out/vrun.txt" "$out/vtime.txt"
        return 1
    }
    vsummary "$out/vrun.txt"
    awk -F': ' '/Maximum resident set size/ {printf "peak RSS            %.0f MiB\n", $2 / 1024}
                /Elapsed \(wall clock\)/ {print "wall time           " $2}' "$out/vtime.txt"
}

classics() { # listing file, then name|pattern lines on stdin
    while IFS='|' read -r name pat; do
        if grep -qF -- "$pat" "$1"; then echo "  found    $name"; else echo "  MISSING  $name"; fi
    done
}

if [[ ${MENUS:-1} == 1 ]]; then
    for m in cnn attention; do
        for n in 2 3; do
            rm -f "$out/$m$n.db"*
            run "$m menu, N=$n" --ops specs/ --menu "specs/menus/$m.json" --max-ops "$n" \
                --threads "$threads" -o "$out/$m$n.db"
            vrun "$m menu, N=$n" "$out/$m$n.db"
        done
    done
    "$gen" --ops specs/ --menu specs/menus/cnn.json --threads "$threads" --dry-run --list >"$out/cnn3.txt"
    echo "== classics in the CNN menu's rules at N=3"
    classics "$out/cnn3.txt" <<'CLASSICS'
two convs over one input fused (concatenated kernels, channel split)|conv2d(x0, x1) => split[axis=1,sizes=[2,2]](conv2d(x0, concat(x1, x2))):0
conv + relu fused|relu(conv2d(x0, w0)) => conv2d[activation=relu](x0, w0)
conv distributes over ew_add of kernels|ew_add(conv2d(x0, w1), conv2d(x0, w0)) => conv2d(x0, ew_add(w0, w1))
conv distributes over ew_add of inputs|conv2d(ew_add(x0, x1), w0) => conv2d(concat[axis=1](x0, x1), concat[axis=1](w0, w0))
convs over two inputs, one kernel, fused along the batch|conv2d(x0, x1) => split[sizes=[2,2]](conv2d(concat(x0, x2), x1)):0
CLASSICS
    "$gen" --ops specs/ --menu specs/menus/attention.json --threads "$threads" --dry-run --list >"$out/attention3.txt"
    echo "== classics in the attention menu's rules at N=3"
    classics "$out/attention3.txt" <<'CLASSICS'
two projections of one input merged (Q/K/V, applied twice)|split[axis=2,sizes=[4,4]](linear(x0, concat[axis=1](w1, w0))):0 => linear(x0, w1)
head-parallel batch_matmul, any degree k|partition[dim=0,degree=k](batch_matmul(x0, x1)) => batch_matmul(partition[dim=0,degree=k](x0), partition[dim=0,degree=k](x1))
head-parallel softmax, any degree k|softmax(x0) => combine[dim=0,degree=k](softmax(partition[dim=0,degree=k](x0)))
batch_matmul over concatenated columns|batch_matmul(x0, x1) => split[axis=2,sizes=[4,4]](batch_matmul(x0, concat[axis=2](x1, x2))):0
CLASSICS
fi

if [[ ${E2E:-0} == 1 ]]; then
    echo "== end to end: default menu, N=4, generate then verify (uptime:$(uptime))"
    rm -f "$out/e2e4.db"*
    run "unity-gen --max-ops 4 (no time limit)" --ops specs/ --max-ops 4 --threads "$threads" -o "$out/e2e4.db"
    gw=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$out/time.txt")
    gm=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$out/time.txt")
    vrun "N=4 set" "$out/e2e4.db"
    vw=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$out/vtime.txt")
    vm=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$out/vtime.txt")
    python3 - "$gw" "$vw" "$gm" "$vm" <<'EOF'
import sys
def secs(t):
    s = 0.0
    for part in t.split(":"):
        s = s * 60 + float(part)
    return s
total = secs(sys.argv[1]) + secs(sys.argv[2])
peak = max(int(sys.argv[3]), int(sys.argv[4])) / 1024
print(f"end to end          {total / 60:.1f} min (target < 15), peak RSS {peak:.0f} MiB (target < 2048)")
EOF
    echo "uptime:$(uptime)"
fi
