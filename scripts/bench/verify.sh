#!/usr/bin/env bash
# Benchmark of unity-verify (issue 5).
#  1. The generated N=3 set: unity-gen with the default menu, then unity-verify --jobs J (default 2)
#     on it: rules/s, median and p99 time per rule, the fraction decided (verified + refuted), and
#     the unknown rules grouped by the operators they use (what the spec's axioms cannot prove).
#  2. FlexFlow's 640 published rules (../shared/external/flexflow_graph_subst_3_v2.json): imported
#     with `unity-rules import`, then verified: how many are proven, refuted and unknown, with the
#     reason for each refuted and unknown rule.
#
#   scripts/bench/verify.sh [BUILD_DIR] [JOBS] [TIMEOUT_MS]
#
# With BASE_BUILD=DIR (another build, e.g. a worktree of main): the same N=3 set is verified by
# that build's unity-verify too, with both times, and the status of every rule is compared (by
# canonical hash): the step fails, listing them, if any status, stored body or side condition
# differs. ONLY_N3=1 skips FlexFlow. N4_DB=FILE (a database from `unity-gen --max-ops 4`) also
# verifies a fixed sample of it, every N4_SAMPLE-th rule id (default 100), with BASE_BUILD (if
# given) and this build, and compares them the same way; SKIP_N3=1 runs that sample alone.
#
# The databases stay in $OUT (default: a temporary directory). Timings depend on the load of the
# machine (other jobs share its cores); say so when you quote them.
set -euo pipefail
build=${1:-build/default}
jobs=${2:-2}
timeout_ms=${3:-2000}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
for p in unity-gen unity-verify unity-rules; do
    [[ -x $build/bin/$p ]] || { echo "verify.sh: $build/bin/$p not found (run make BUILD=$build)" >&2; exit 1; }
done
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/unity-verify-bench.XXXXXX")}
mkdir -p "$out"
ff=../shared/external/flexflow_graph_subst_3_v2.json
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load $(cut -d' ' -f1-3 /proc/loadavg)"

# Prints the summary numbers of a unity-verify run (its stdout in $1, wall seconds in $2).
summary() {
    python3 - "$1" "$2" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
wall = float(sys.argv[2])
m = re.search(r': (\d+) rules: (\d+) verified \((\d+) for any input size, (\d+) for every value of '
              r'their variables, (\d+) generalized over degrees here\), (\d+) refuted, (\d+) unknown'
              r'.*median ([\d.]+) ms, p99 ([\d.]+) ms', text)
if not m:
    print("  could not read the summary:\n" + text)
    sys.exit(1)
n, ver, anys, allk, gen, ref, unk = (int(m.group(i)) for i in range(1, 8))
med, p99 = float(m.group(8)), float(m.group(9))
print(f"  rules {n}: verified {ver} (any input size {anys}, every value of their variables {allk}, "
      f"generalized over degrees here {gen}), "
      f"refuted {ref}, unknown {unk}")
if n:
    print(f"  decided {100.0 * (ver + ref) / n:.1f}%   wall {wall:.1f} s   {n / wall:.1f} rules/s   "
          f"median {med:.1f} ms   p99 {p99:.1f} ms per rule")
EOF
}

timed() { # output file, then the command; prints wall seconds
    local f=$1
    shift
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >"$f" 2>&1 || { cat "$f"; return 1; }
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1 - $t0:.2f}')"
}

# Compares the verdicts of two databases (base, new) rule by rule (by canonical hash): status,
# stored body (general form, any-shape flag, dim variables) and side conditions; fails if any
# rule decided in both differs.
compare() {
    python3 - "$1" "$2" <<'EOF'
import sqlite3, sys
q = "select hash, status, body, conds from rules where status != 'candidate'"
base, new = (dict((r[0], r[1:]) for r in sqlite3.connect(p).execute(q)) for p in sys.argv[1:3])
st = sorted(h for h in base if h in new and base[h][0] != new[h][0])
bd = sorted(h for h in base if h in new and base[h][0] == new[h][0] and base[h] != new[h])
print(f"  verdicts compared: {len(base)} rules, {len(st)} statuses differ, "
      f"{len(bd)} stored bodies or side conditions differ")
for h in st[:20]:
    print(f"    hash {h}: {base[h][0]} with the base build, {new[h][0]} with this one")
for h in bd[:20]:
    print(f"    hash {h}: {base[h][0]} with a different stored form")
sys.exit(1 if st or bd or len(base) != len(new) else 0)
EOF
}

if [[ ${SKIP_N3:-0} != 1 ]]; then
    echo "== generated N=3 set (default menu)"
    rm -f "$out/gen3.db"*
    secs=$(timed "$out/gen.txt" "$build/bin/unity-gen" --ops specs -o "$out/gen3.db" --max-ops 3)
    echo "  unity-gen: $(grep -m1 'after random test' "$out/gen.txt" | sed 's/^ *//') in $secs s"
    [[ -n ${BASE_BUILD:-} ]] && cp "$out/gen3.db" "$out/gen3_base.db"
    secs=$(timed "$out/verify3.txt" "$build/bin/unity-verify" "$out/gen3.db" --jobs "$jobs" --timeout-ms "$timeout_ms")
    echo "  unity-verify --jobs $jobs --timeout-ms $timeout_ms (load $(cut -d' ' -f1-3 /proc/loadavg)):"
    head -1 "$out/verify3.txt" | sed 's/^/  /'
    summary "$out/verify3.txt" "$secs"
    grep '^cpu time per phase\|^z3 work' "$out/verify3.txt" | sed 's/^/  /' || true
    if [[ -n ${BASE_BUILD:-} ]]; then
        secs=$(timed "$out/verify3_base.txt" "$BASE_BUILD/bin/unity-verify" "$out/gen3_base.db" --jobs "$jobs" \
            --timeout-ms "$timeout_ms" --spec specs)
        echo "  the same set with $BASE_BUILD/bin/unity-verify (load $(cut -d' ' -f1-3 /proc/loadavg)):"
        summary "$out/verify3_base.txt" "$secs"
        grep '^cpu time per phase\|^z3 work' "$out/verify3_base.txt" | sed 's/^/  /' || true
        compare "$out/gen3_base.db" "$out/gen3.db"
    fi
fi
if [[ -n ${N4_DB:-} ]]; then
    # A fixed sample of an N=4 database (unity-gen --max-ops 4): every N4_SAMPLE-th rule id
    # (--shard 0/N4_SAMPLE), verified by BASE_BUILD (when given) and by this build, each on its
    # own copy, back to back; Z3's resource units are the load-independent figure, CPU times
    # grow with the load. The database phase includes scanning for the shard's rules.
    sample=${N4_SAMPLE:-100}
    echo "== N=4 sample: every ${sample}th rule of $N4_DB (--shard 0/$sample, --jobs $jobs)"
    for b in ${BASE_BUILD:+"$BASE_BUILD"} "$build"; do
        tag=$([[ $b == "$build" ]] && echo new || echo base)
        rm -f "$out/n4s_$tag.db"*
        cp "$N4_DB" "$out/n4s_$tag.db"
        echo "  $b/bin/unity-verify (load $(cut -d' ' -f1-3 /proc/loadavg)):"
        /usr/bin/time -f "  %e s wall, %U s user, %S s sys, peak RSS %M KB" \
            "$b/bin/unity-verify" "$out/n4s_$tag.db" --jobs "$jobs" --timeout-ms "$timeout_ms" \
            --shard "0/$sample" --spec specs >"$out/n4s_$tag.txt" 2>&1 || {
            cat "$out/n4s_$tag.txt"
            exit 1
        }
        grep ' rules: \|^cpu time per phase\|^z3 work\|wall,' "$out/n4s_$tag.txt" | sed 's/^ */  /'
    done
    [[ -n ${BASE_BUILD:-} ]] && compare "$out/n4s_base.db" "$out/n4s_new.db"
fi
[[ ${ONLY_N3:-0} == 1 || ${SKIP_N3:-0} == 1 ]] && { echo "databases and logs: $out"; exit 0; }
echo "  unknown rules by operators used (top 10):"
"$build/bin/unity-rules" list "$out/gen3.db" --status unknown >"$out/unknown3.txt" || true
"$build/bin/unity-rules" stats "$out/gen3.db" >"$out/stats3.txt" 2>&1 || true
python3 - "$out/gen3.db" <<'EOF' || true
import sqlite3, sys, collections
db = sqlite3.connect(sys.argv[1])
rows = db.execute("select ops, count(*) from rules where status = 'unknown' group by ops "
                  "order by 2 desc limit 10").fetchall()
for ops, n in rows:
    print(f"    {n:6d}  {ops}")
EOF

echo "== FlexFlow's published rules ($ff)"
rm -f "$out/ff.db"*
"$build/bin/unity-rules" import "$out/ff.db" "$ff" --quiet | tail -1 | sed 's/^/  /'
secs=$(timed "$out/verify_ff.txt" "$build/bin/unity-verify" "$out/ff.db" --jobs "$jobs" --timeout-ms "$timeout_ms")
summary "$out/verify_ff.txt" "$secs"
for s in refuted unknown; do
    echo "  $s:"
    "$build/bin/unity-rules" list "$out/ff.db" --status "$s" | while IFS=$'\t' read -r id _ _ _ rest; do
        name=${rest%%:*}
        detail=$("$build/bin/unity-rules" show "$out/ff.db" "$id" | sed -n 's/^detail *//p' | head -1)
        echo "    $id $name: ${detail:0:300}"
    done
done
echo "databases and logs: $out"
