#!/usr/bin/env bash
# Benchmark of the rule database (rulesdb/): importing FlexFlow's 640-rule file, inserting N
# generator-like rules (two ops a side, distinct canonical hashes) in batches of 1000, recording a
# verdict for each, and loading every verified rule the way unity-train does (each row parsed and
# checked against its checksum and canonical hash). The database is a temporary file in /tmp.
# Usage: scripts/bench/rulesdb.sh [N] (default 100000)   BUILD=build/x to use another build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD=${BUILD:-build/default}
make -s BUILD="$BUILD" "$BUILD/bin/unity-rules" >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "sqlite $(sqlite3 --version 2>/dev/null | cut -d' ' -f1 || echo '?'), WAL, synchronous=NORMAL, /tmp on $(df -T /tmp | awk 'NR==2 {print $2}')"
"$BUILD/bin/unity-rules" bench --n "${1:-100000}"
