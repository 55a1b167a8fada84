#!/usr/bin/env bash
# Benchmark of rule loading, matching and rewriting (issue 12), all measured in this run:
#   1. the N=3 rule set (default menu; generated and verified here unless N3_DB names one):
#      load time and peak memory as whole rules (the form before, un_rulesdb_load_verified), compiled
#      (no cache) and from the compiled cache, forwards and with every rule also reversed;
#   2. matches found per second and rewrites applied per second on BERT-Large (zoo transformer,
#      paper size) and Inception-v3 (paper size) with that set, forwards and with reverses, as
#      built (serial) and data parallel on 2 devices (partition/replicate/combine in the graph);
#   3. a large set of 230k rules, load time and peak memory compiled on one thread and on every
#      CPU (the two caches compared byte for byte), then from the cache: by
#      default the verified N=3 rules stored 44 times each in a scratch copy (unity-gen
#      --max-ops 4 did not finish on the loaded 2-core machine this was written on); with
#      N4_DB=FILE, that database's candidates with their statuses FORCED to verified, never
#      proven (a load test only; these rules are never applied).
#
#   4. the merge of linears sharing an input (rule 301's shape) at BERT-Large size: layer 3's
#      estimate of the separate, merged and merged-with-stored-weight graphs on 1 and 4 V100s.
#
#   scripts/bench/rewrite.sh [BUILD_DIR]        (env: N3_DB, N4_DB, COPIES (44), OUT,
#                                                SECTIONS: which of "1 2 3 4" to run, all by default;
#                                                SECTIONS=3 N3_DB=... is the 230k-rule load alone;
#                                                BASELINE_BIN: an older unity-rewrite, timed on the
#                                                230k set beside this build, alternating)
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

want() { [[ " ${SECTIONS:-1 2 3 4} " == *" $1 "* ]]; }

timed() { # label, then a command: its output, then wall time and peak RSS
    local label=$1
    shift
    echo "-- $label"
    /usr/bin/time -f "   wall %e s (user %U s, sys %S s), peak RSS %M KB" "$@" 2>"$out/time.txt" | sed 's/^/   /' || {
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

if want 1; then
echo "== 1. loading the N=3 set ($n3)"
timed "whole rules (un_rulesdb_load_verified, the form before)" "$B/unity-rewrite" "$n3" --load-only --baseline
timed "compact, compiled (no cache)" "$B/unity-rewrite" "$n3" --load-only --no-cache
timed "compact + reversed, compiled, cache written" "$B/unity-rewrite" "$n3" --load-only --reversed
timed "compact + reversed, from the cache" "$B/unity-rewrite" "$n3" --load-only --reversed
fi

if want 2; then
echo "== 2. matching and rewriting with the N=3 set"
for model in transformer inception_v3; do
    for dir in "" --reversed; do
        timed "$model (paper size) ${dir:-forwards}" \
            "$B/unity-rewrite" "$n3" --model "$model" $dir --apply-each 2000
    done
    timed "$model (paper size), data parallel x2, --reversed" \
        "$B/unity-rewrite" "$n3" --model "$model" --data-parallel 2 --reversed --apply-each 2000
done
fi

if want 3; then
echo "== 3. a large set (230k rules)"
large=$out/large.db
if [[ -n ${N4_DB:-} ]]; then
    # unity-gen --max-ops 4 candidates, statuses FORCED to verified (never proven; load test only)
    cp "$N4_DB" "$large"
    sqlite3 "$large" \
        "UPDATE rules SET status = 'verified', verify_spec = gen_spec WHERE status <> 'rejected';"
    echo "   $N4_DB: $(sqlite3 "$large" "SELECT count(*) FROM rules WHERE status = 'verified'") candidates forced to verified"
else
    # the verified N=3 rules, each stored ${COPIES:-44} times (the copy's hash column loses its
    # UNIQUE constraint; every copy is a separate row that is read, checked against its hash,
    # parsed and compiled like any other): N=3-sized rules, not N=4-sized ones. The table keeps
    # the schema's other columns as they are, `id INTEGER PRIMARY KEY` included, so rows are read
    # in id order as from a database unity-gen wrote (a copy made with CREATE TABLE AS loses it,
    # and SQLite then sorts every body in a temporary B-tree before the first row comes)
    copies=${COPIES:-44}
    cp "$n3" "$large"
    schema=$(sqlite3 "$large" "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'rules'")
    copy=${schema/hash INTEGER UNIQUE/hash INTEGER}
    copy=${copy/CREATE TABLE rules/CREATE TABLE rules_copy}
    [[ $copy == *"CREATE TABLE rules_copy"* && $copy == *"id INTEGER PRIMARY KEY"* &&
        $copy != *"hash INTEGER UNIQUE"* ]] || {
        echo "rewrite.sh: $n3: unexpected rules schema: $schema" >&2
        exit 1
    }
    sqlite3 "$large" <<SQL
BEGIN;
$copy;
INSERT INTO rules_copy SELECT * FROM rules WHERE status = 'verified';
WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < $copies - 1)
INSERT INTO rules_copy SELECT o.id + k.i * 10000000, o.hash, o.body, o.body_sum, o.n_in, o.n_src,
    o.n_dst, o.size, o.ops, o.status, o.detail, o.proof_ms, o.axioms, o.gen_spec, o.verify_spec,
    o.origin_kind, o.origin_file, o.origin_name, o.run, o.created, o.verified_at, o.conds,
    o.row_sum FROM rules o, k WHERE o.status = 'verified';
DROP TABLE rules;
ALTER TABLE rules_copy RENAME TO rules;
CREATE INDEX rules_status ON rules(status);
COMMIT;
SQL
    echo "   $(sqlite3 "$large" "SELECT count(*) FROM rules") verified rows: $n3's verified rules x $copies"
fi
rm -f "$large.compiled"
if [[ -n ${BASELINE_BIN:-} ]]; then
    # the other side of the comparison: an older build's unity-rewrite on the same database, just
    # before this build's runs (no cache read or written)
    for t in 1 "$(nproc)"; do
        timed "BASELINE $BASELINE_BIN, compiled on $t thread(s), no cache" \
            "$BASELINE_BIN" "$large" --load-only --no-cache --threads "$t"
        timed "this build, compiled on $t thread(s), no cache" \
            "$B/unity-rewrite" "$large" --load-only --no-cache --threads "$t"
    done
fi
timed "compact, compiled on 1 thread, cache written" "$B/unity-rewrite" "$large" --load-only --threads 1
mv "$large.compiled" "$out/large-1thread.compiled"
timed "compact, compiled on $(nproc) threads, cache written" "$B/unity-rewrite" "$large" --load-only
if cmp -s "$large.compiled" "$out/large-1thread.compiled"; then
    echo "   the two caches are identical (same entries, same order)"
else
    echo "   the two caches DIFFER" && exit 1
fi
timed "compact, from the cache" "$B/unity-rewrite" "$large" --load-only
fi
if want 4; then
echo "== 4. merging linears that share an input (rule 301's shape), estimated by layer 3"
# x [8,512,1024] through three [1024,1024] linears summed (Q/K/V at BERT-Large size): separate;
# merged with the weight concat in the graph (what the rule makes); merged with the weight stored
# concatenated (what folding the weight-only concat would make)
x='{"name": "x", "op": "input", "params": {"shape": [8, 512, 1024]}}'
wqkv='{"name": "wq", "op": "weight", "params": {"shape": [1024, 1024]}},
  {"name": "wk", "op": "weight", "params": {"shape": [1024, 1024]}},
  {"name": "wv", "op": "weight", "params": {"shape": [1024, 1024]}}'
split='{"name": "s", "op": "split", "in": ["qkv"], "params": {"axis": 2, "sizes": [1024, 1024, 1024]}},
  {"name": "a", "op": "ew_add", "in": ["s:0", "s:1"]}, {"name": "y", "op": "ew_add", "in": ["a", "s:2"]}'
echo "{\"nodes\": [$x, $wqkv,
  {\"name\": \"q\", \"op\": \"linear\", \"in\": [\"x\", \"wq\"]},
  {\"name\": \"k\", \"op\": \"linear\", \"in\": [\"x\", \"wk\"]},
  {\"name\": \"v\", \"op\": \"linear\", \"in\": [\"x\", \"wv\"]},
  {\"name\": \"a\", \"op\": \"ew_add\", \"in\": [\"q\", \"k\"]},
  {\"name\": \"y\", \"op\": \"ew_add\", \"in\": [\"a\", \"v\"]}], \"outputs\": [\"y\"]}" >"$out/qkv-separate.json"
echo "{\"nodes\": [$x, $wqkv,
  {\"name\": \"c0\", \"op\": \"concat\", \"in\": [\"wq\", \"wk\"], \"params\": {\"axis\": 1}},
  {\"name\": \"c\", \"op\": \"concat\", \"in\": [\"c0\", \"wv\"], \"params\": {\"axis\": 1}},
  {\"name\": \"qkv\", \"op\": \"linear\", \"in\": [\"x\", \"c\"]}, $split], \"outputs\": [\"y\"]}" >"$out/qkv-merged.json"
echo "{\"nodes\": [$x, {\"name\": \"c\", \"op\": \"weight\", \"params\": {\"shape\": [1024, 3072]}},
  {\"name\": \"qkv\", \"op\": \"linear\", \"in\": [\"x\", \"c\"]}, $split], \"outputs\": [\"y\"]}" >"$out/qkv-stored.json"
for d in 1 4; do
    for g in separate merged stored; do
        printf '   %-9s on %d V100(s): ' "$g" "$d"
        "$B/unity-train" --model "$out/qkv-$g.json" --machine specs/machines/v100x4.json \
            --devices "$d" --plan-only --no-rewrites | grep -m1 '^plan:'
    done
done
fi
echo "== done ($out)"
