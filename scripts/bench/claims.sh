#!/usr/bin/env bash
# Benchmark and audit of issue 10, items 2, 3 and 9, on the generated N=3 set (default menu).
#  1. The re-check of every verified rule's claim: each variable at 1..8 and input sizes where the
#     source is well formed (the witness sizes; for rules proven for any input size, also sizes
#     scaled per class of equal dims and at random multiples): wherever the source is well formed
#     and the stored side conditions hold, the target must be well formed with outputs of equal
#     shape and layout. Printed: how many claims fail with the stored side conditions, and how
#     many would fail without them (the verdicts as they were before side conditions existed).
#  2. Rules used backwards: how many verified rules have sizes where the target is well formed and
#     the source is not (un_rule_reverse makes instantiation check the new side).
#  3. Work claims: unity-verify alone (--jobs 1) against two unity-verify processes (--jobs 1 each)
#     on copies of the same database: wall time, and whether each rule was decided exactly once.
#
#   scripts/bench/claims.sh [BUILD_DIR]
#
# The databases stay in $OUT (default: a temporary directory). Timings depend on the load of the
# machine (other jobs share its cores); say so when you quote them.
set -euo pipefail
build=${1:-build/default}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
for p in bin/unity-gen bin/unity-verify tests/test_rule_claim; do
    [[ -x $build/$p ]] || { echo "claims.sh: $build/$p not found (run make BUILD=$build)" >&2; exit 1; }
done
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/unity-claims-bench.XXXXXX")}
mkdir -p "$out"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load $(cut -d' ' -f1-3 /proc/loadavg)"

rm -f "$out"/n3.db*
"$build/bin/unity-gen" --ops specs/ -o "$out/n3.db" >"$out/gen.out" 2>&1
cp "$out/n3.db" "$out/two.db"
now() { date +%s.%N; }

t0=$(now)
"$build/bin/unity-verify" "$out/n3.db" --jobs 1 >"$out/one.out" 2>&1
t1=$(now)
"$build/bin/unity-verify" "$out/two.db" --jobs 1 >"$out/two_a.out" 2>&1 &
pa=$!
"$build/bin/unity-verify" "$out/two.db" --jobs 1 >"$out/two_b.out" 2>&1
wait $pa
t2=$(now)

echo "1. claims of the verified rules, re-checked (k in 1..8; sizes where the source is well formed)"
{ UNITY_CLAIM_DB="$out/n3.db" "$build/tests/test_rule_claim" || true; } | grep 'claims fail' | sed 's/^/   with the stored side conditions: /'
{ UNITY_CLAIM_DB="$out/n3.db" UNITY_CLAIM_STRIP=1 "$build/tests/test_rule_claim" || true; } | grep 'claims fail' | sed 's/^/   without them (as before):        /'
echo "2. rules used backwards"
{ UNITY_CLAIM_DB="$out/n3.db" UNITY_CLAIM_REVERSE=1 "$build/tests/test_rule_claim" || true; } | grep 'reversed' | sed 's/^/   /'
echo "3. work claims: one verifier against two on one database"
python3 - "$out" "$t0" "$t1" "$t2" <<'PY'
import re, sys
out, t0, t1, t2 = sys.argv[1], *map(float, sys.argv[2:])
def rules(f):
    m = re.search(r': (\d+) rules: (\d+) verified', open(f).read())
    return int(m.group(1)) if m else -1
one, a, b = rules(f"{out}/one.out"), rules(f"{out}/two_a.out"), rules(f"{out}/two_b.out")
print(f"   alone: {one} rules in {t1 - t0:.1f} s")
print(f"   two processes: {a} + {b} = {a + b} rules in {t2 - t1:.1f} s "
      f"({'each rule once' if a + b == one else 'NOT each rule once'})")
PY
