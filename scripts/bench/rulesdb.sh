#!/usr/bin/env bash
# Benchmark of the rule database (rulesdb/): importing FlexFlow's 640-rule file, inserting N
# generator-like rules (two ops a side, distinct canonical hashes) in batches of 1000, recording a
# verdict for each, and loading every verified rule the way unity-train does (each row parsed and
# checked against its checksum and canonical hash). The database is a temporary file in /tmp.
#   scripts/bench/rulesdb.sh [BUILD_DIR] [N]     (default build/default and 100000; builds it first)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build/default}
n=${2:-100000}
make -s BUILD="$build" "$build/bin/unity-rules" >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "sqlite $(sqlite3 --version 2>/dev/null | cut -d' ' -f1 || echo '?'), WAL, synchronous=NORMAL, /tmp on $(df -T /tmp | awk 'NR==2 {print $2}')"
"$build/bin/unity-rules" bench --n "$n"
