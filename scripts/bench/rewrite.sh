#!/usr/bin/env bash
# Benchmark of rule loading, matching and rewriting (issue 12), all measured in this run:
#   1. the N=3 rule set (default menu; generated and verified here unless N3_DB names one):
#      load time and peak memory as whole rules (the form before, rulesdb_load_verified), compiled
#      (no cache) and from the compiled cache, forwards and with every rule also reversed;
#   2. matches found per second and rewrites applied per second on BERT-Large (zoo transformer,
#      paper size) and Inception-v3 (paper size) with that set, forwards and with reverses, as
#      built (serial) and data parallel on 2 devices (partition/replicate/combine in the graph);
#   3. a large set: the candidates of `unity-gen --max-ops 4` (time-limited; N4_DB names an
#      existing one) in a scratch copy whose statuses are FORCED to verified without proving
#      them (a load-time and memory test only; these rules are never applied): load time and
#      peak memory compiled, then from the cache.
#
#   scripts/bench/rewrite.sh [BUILD_DIR]        (env: N3_DB, N4_DB, N4_TIME (s, default 600), OUT)
#
# Timings depend on the load of the machine: the script prints `uptime` and the CPU; say so.
set -euo pipefail
build=${1:-build/default}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
B=$build/bin
for p in unity-gen unity-verify unity-rewrite; do
    [[ -x $B/$p ]] || { echo "rewrite.sh: $B/$p not found (run make)" >&2; exit 1; }
done
command -v sqlite3 >/dev/null || { echo "rewrite.sh: the sqlite3 program is needed" >&2; exit 1; }
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/unity-rewrite-bench.XXXXXX")}
mkdir -p "$out"
echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $(uptime)"

timed() { # label, then a command: its output, then wall time and peak RSS
    local label=$1
    shift
    echo "-- $label"
    /usr/bin/time -f "   wall %e s, peak RSS %M KB" "$@" 2>"$out/time.txt" | sed 's/^/   /' || {
        cat "$out/time.txt"
        return 1
    }
    grep -v '^rule ' "$out/time.txt" | sed 's/^ *//; s/^/   /'
}

n3=${N3_DB:-}
if [[ -z $n3 ]]; then
    n3=$out/n3.db
    echo "== generating and verifying the N=3 set into $n3"
    "$B/unity-gen" --ops specs/ --max-ops 3 -o "$n3" | tail -1
    "$B/unity-verify" "$n3" --jobs "$(nproc)" | tail -1
fi
rm -f "$n3.compiled"

echo "== 1. loading the N=3 set ($n3)"
timed "whole rules (rulesdb_load_verified, the form before)" "$B/unity-rewrite" "$n3" --load-only --baseline
timed "compact, compiled (no cache)" "$B/unity-rewrite" "$n3" --load-only --no-cache
timed "compact + reversed, compiled, cache written" "$B/unity-rewrite" "$n3" --load-only --reversed
timed "compact + reversed, from the cache" "$B/unity-rewrite" "$n3" --load-only --reversed

echo "== 2. matching and rewriting with the N=3 set"
for model in transformer inception_v3; do
    for dir in "" --reversed; do
        timed "$model (paper size) ${dir:-forwards}" \
            "$B/unity-rewrite" "$n3" --model "$model" $dir --apply-each 2000
    done
    timed "$model (paper size), data parallel x2, --reversed" \
        "$B/unity-rewrite" "$n3" --model "$model" --data-parallel 2 --reversed --apply-each 2000
done

echo "== 3. a large set: unity-gen --max-ops 4 candidates, statuses forced to verified (scratch copy)"
n4=${N4_DB:-}
if [[ -z $n4 ]]; then
    n4=$out/n4.db
    "$B/unity-gen" --ops specs/ --max-ops 4 --time-limit "${N4_TIME:-600}" -o "$n4" | tail -2
fi
cp "$n4" "$out/n4-forced.db"
sqlite3 "$out/n4-forced.db" \
    "UPDATE rules SET status = 'verified', verify_spec = gen_spec WHERE status <> 'rejected';"
echo "   $(sqlite3 "$out/n4-forced.db" "SELECT count(*) FROM rules WHERE status = 'verified'") rules forced to verified"
rm -f "$out/n4-forced.db.compiled"
timed "compact, compiled, cache written" "$B/unity-rewrite" "$out/n4-forced.db" --load-only
timed "compact, from the cache" "$B/unity-rewrite" "$out/n4-forced.db" --load-only
echo "== done ($out)"
