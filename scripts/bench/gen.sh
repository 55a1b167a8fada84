#!/usr/bin/env bash
# Benchmark of unity-gen (issue 4): for N = 2, 3, 4 with the default menu, wall time, graphs/s,
# peak RSS and the candidates left after each pruning stage, then after the closure stage
# (unity-closure, issue 17 item 2: rules derivable by 2 rewrites of rules kept before them are
# dropped); then the recall against FlexFlow's
# published rules (../shared/external/flexflow_graph_subst_3_v2.json) with the menu that speaks
# FlexFlow's vocabulary in the shapes our import gives those rules (specs/menus/flexflow.json).
#
#   scripts/bench/gen.sh [BUILD_DIR] [N4_TIME_LIMIT_SECONDS]
#
# Then, for the CNN and attention menus (specs/menus/cnn.json, attention.json) at N = 2 and 3: the
# same counts, the closure stage, unity-verify on the pruned set (verified / refuted / unknown, %
# decided) and which classic rewrites are among the rules (MENUS=0 skips this). With E2E=1: the
# issue-17 pipeline, staged: `unity-gen --max-ops 4` on the default menu with no time limit;
# (a) `unity-verify --max-ops 3` (only the rules of at most 3 operators per side); (b)
# `unity-closure --verified-basis --basis-ops 3` (only those verified rules derive, in their proven
# general form: any size, dim and degree variables; CLOSURE_BASIS=K sets both 3s; CLOSURE_BASIS=4,
# every rule, needs ~8 GB at N=4: gen/README.md; CLOSURE_DEPTH=D, default 3: a rule that 3
# rewrites derive is dropped; at N=4 depth 3 costs (b) ~80 s more wall than depth 2 and keeps
# 13,463 fewer rules, ~160 s of (c)'s wall: gen/README.md "Deeper closure at N=4"; CLOSURE_DEPTH=2
# is the old default); (c) `unity-verify --jobs T` on the pruned
# database, the rest (VERIFY_LIMIT=S stops it after S seconds and projects the rest from its
# rate), with the wall time and peak RSS of each step and their sum (targets: under 15 minutes and
# 2 GB, >= 98% decided). With REACH=1: the full
# reach check on the default menu at N=3 (both sets verified, then `unity-closure --reach`: every
# graph reachable from each tiny zoo model within 3 rewrites of the full set must be reachable with
# the pruned one, closure and reach step at CLOSURE_DEPTH, default 3). `uptime` is printed first:
# the machine is shared. E2E_N=n runs that pipeline at n operators instead of 4 (E2E_N=3: the
# same steps in a minute), and E2E_ONLY=1 skips every other block:
#   E2E=1 E2E_ONLY=1 E2E_N=3 scripts/bench/gen.sh
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
closure=$build/bin/unity-closure
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
                /User time/ {u = $2} /System time/ {s = $2}
                /Elapsed \(wall clock\)/ {print "wall time           " $2}
                END {printf "cpu time            %.1f s (user + sys: less load-dependent)\n", u + s}' \
        "$out/time.txt"
}

# The closure stage on database $2 into $3 (label $1, more unity-closure flags after).
crun() {
    local label=$1 in=$2 outdb=$3
    shift 3
    rm -f "$outdb"*
    echo "== closure: $label"
    /usr/bin/time -v "$closure" "$in" -o "$outdb" --threads "$threads" "$@" >"$out/crun.txt" \
        2>"$out/ctime.txt" || {
        cat "$out/crun.txt" "$out/ctime.txt"
        return 1
    }
    grep -E '^(closure|  not fully|  successor|database|time)' "$out/crun.txt"
    awk -F': ' '/Maximum resident set size/ {printf "peak RSS            %.0f MiB\n", $2 / 1024}
                /Elapsed \(wall clock\)/ {print "wall time           " $2}' "$out/ctime.txt"
}

only_e2e=${E2E_ONLY:-0}
[[ $only_e2e == 1 ]] && MENUS=0
for n in 2 3; do
    [[ $only_e2e == 1 ]] && break
    rm -f "$out/n$n.db"
    run "default menu, N=$n" --ops specs/ --max-ops "$n" --threads "$threads" -o "$out/n$n.db"
    crun "default menu, N=$n" "$out/n$n.db" "$out/n${n}p.db"
done
if [[ $only_e2e != 1 ]]; then
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
fi # E2E_ONLY

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
            crun "$m menu, N=$n" "$out/$m$n.db" "$out/$m${n}p.db"
            vrun "$m menu, N=$n, after the closure stage" "$out/$m${n}p.db"
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

# Wall time and peak RSS (KiB) of a /usr/bin/time -v output $1, as "WALL KIB".
wallrss() { awk -F': ' '/Elapsed \(wall clock\)/ {w = $2} /Maximum resident set size/ {m = $2}
                        END {print w, m}' "$1"; }

if [[ ${E2E:-0} == 1 ]]; then
    en=${E2E_N:-4}
    basis=${CLOSURE_BASIS:-3}
    cdepth=${CLOSURE_DEPTH:-3}
    echo "== end to end: default menu, N=$en: generate, verify the rules of <= $basis operators," \
        "closure (depth $cdepth) over them (verified, general forms), verify the rest" \
        "(uptime:$(uptime))"
    rm -f "$out/e2e4.db"* "$out/e2e4p.db"*
    run "unity-gen --max-ops $en (no time limit)" --ops specs/ --max-ops "$en" --threads "$threads" \
        -o "$out/e2e4.db"
    read -r gw gm < <(wallrss "$out/time.txt")
    echo "== stage a: unity-verify --max-ops $basis (the rules that will derive the others)"
    /usr/bin/time -v "$verify" "$out/e2e4.db" --jobs "$threads" --max-ops "$basis" \
        >"$out/arun.txt" 2>"$out/atime.txt" || { cat "$out/arun.txt" "$out/atime.txt"; exit 1; }
    vsummary "$out/arun.txt"
    grep -E '^(cpu time per phase)' "$out/arun.txt" || true
    read -r aw am < <(wallrss "$out/atime.txt")
    echo "peak RSS            $((am / 1024)) MiB"
    echo "wall time           $aw"
    crun "stage b: N=$en set, only the verified rules of up to $basis operators derive" \
        "$out/e2e4.db" "$out/e2e4p.db" --basis-ops "$basis" --verified-basis --depth "$cdepth"
    read -r cw cm < <(wallrss "$out/ctime.txt")
    "$build/bin/unity-rules" stats "$out/e2e4p.db" | sed -n 2p >"$out/bstat.txt"
    limit=${VERIFY_LIMIT:-0}
    echo "== stage c: unity-verify the rest of the pruned N=$en set (VERIFY_LIMIT=$limit s, 0 = none)"
    rc=0
    if [[ $limit != 0 ]]; then
        /usr/bin/time -v timeout "$limit" "$verify" "$out/e2e4p.db" --jobs "$threads" \
            >"$out/vrun.txt" 2>"$out/vtime.txt" || rc=$?
    else
        /usr/bin/time -v "$verify" "$out/e2e4p.db" --jobs "$threads" >"$out/vrun.txt" \
            2>"$out/vtime.txt" || rc=$?
    fi
    [[ $rc == 0 || $rc == 124 ]] || { cat "$out/vrun.txt" "$out/vtime.txt"; exit 1; }
    grep -E '^(cpu time per phase)' "$out/vrun.txt" || true
    read -r vw vm < <(wallrss "$out/vtime.txt")
    "$build/bin/unity-rules" stats "$out/e2e4p.db" | sed -n 2p >"$out/vstat.txt"
    python3 - "$gw" "$aw" "$cw" "$vw" "$gm" "$am" "$cm" "$vm" "$(cat "$out/bstat.txt")" \
        "$(cat "$out/vstat.txt")" <<'EOF'
import re, sys
def secs(t):
    s = 0.0
    for part in t.split(":"):
        s = s * 60 + float(part)
    return s
g, a, c, v = (secs(x) for x in sys.argv[1:5])
peak = max(int(x) for x in sys.argv[5:9]) / 1024
def counts(line):
    return {k: int(n) for k, n in re.findall(r"(\w+) (\d+)", line)}
before, st = counts(sys.argv[9]), counts(sys.argv[10])
done = st.get("verified", 0) + st.get("refuted", 0) + st.get("unknown", 0)
left = st.get("candidate", 0)
total = done + left
dec = st.get("verified", 0) + st.get("refuted", 0)
todo = before.get("candidate", 0)  # stage c's work: the candidates the closure kept
done_c = todo - left
print(f"verified            {st.get('verified', 0)}, refuted {st.get('refuted', 0)}, unknown "
      f"{st.get('unknown', 0)}, not reached {left} of {total}: "
      f"{100.0 * dec / (done or 1):.1f}% of those tried decided")
proj = v * todo / done_c if left and done_c else v
if left:
    print(f"verify rate         {done_c / (v or 1):.1f} rules/s: the {todo} kept candidates "
          f"would take {proj / 60:.0f} min")
print(f"end to end          {(g + a + c + v) / 60:.1f} min (gen {g / 60:.1f}, verify <= ops "
      f"{a / 60:.1f}, closure {c / 60:.1f}, verify the rest {v / 60:.1f}"
      f"{' so far' if left else ''}); {(g + a + c + proj) / 60:.1f} min with the whole verify "
      f"(target < 15); peak RSS {peak:.0f} MiB (target < 2048)")
EOF
    echo "uptime:$(uptime)"
fi

if [[ ${REACH:-0} == 1 ]]; then
    echo "== reach: default menu, N=3, full set against the pruned one (both verified)"
    rm -f "$out/r3.db"* "$out/r3p.db"*
    "$gen" --ops specs/ --max-ops 3 --threads "$threads" -o "$out/r3.db" >/dev/null
    "$verify" "$out/r3.db" --jobs "$threads" >/dev/null
    rdepth=${CLOSURE_DEPTH:-3}
    crun "default menu, N=3, verified, depth $rdepth" "$out/r3.db" "$out/r3p.db" --depth "$rdepth"
    /usr/bin/time -f "wall time           %e s" "$closure" --reach "$out/r3.db" "$out/r3p.db" \
        --depth 3 --step "$rdepth"
fi
