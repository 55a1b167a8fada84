#!/usr/bin/env bash
# The analytic GPU cost model against every step time recorded on a GPU (issue 13): for each row
# of scripts/bench/gpu_measured.tsv (measured on one H200, 2026-11-27), `unity-train --estimate`
# on specs/machines/h200x1.json as it is (new: device.gpu given, an op costs the kernels our CUDA
# backend launches for it) and without its device.gpu, op_overhead 5e-6 (old: the roofline of the
# spec's flops and bytes per op, the model before device.gpu), and the error of each.
# Needs no GPU: estimates only.
#
#   scripts/bench/gpu_model.sh [BUILD_DIR]     (default build/default; builds it first)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/default}
make -s -j2 BUILD="$build" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 scripts/bench/mid_graphs.py "$tmp"
new=specs/machines/h200x1.json
old=$tmp/h200x1_roofline.json
python3 - "$new" "$old" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
del m["device"]["gpu"]
m["device"]["op_overhead"] = 5e-6
json.dump(m, open(sys.argv[2], "w"))
PY
est() { # machine args...
    local m=$1
    shift
    "$build/bin/unity-train" "$@" --estimate --machine "$m" 2>&1 |
        sed -n 's/^estimated step time: \([0-9.]*\) ms.*/\1/p'
}
python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))["device"]
print("machine:", sys.argv[1], "op_overhead", d["op_overhead"], "gpu", json.dumps(d["gpu"]))' "$new"
printf '%-20s %-5s %11s %11s %7s %11s %7s\n' case role "measured ms" "old ms" "old err" "new ms" "new err"
grep -v '^#' scripts/bench/gpu_measured.tsv | while IFS=$'\t' read -r name role meas args; do
    read -r -a a <<<"${args//GRAPHS/$tmp}"
    o=$(est "$old" "${a[@]}")
    n=$(est "$new" "${a[@]}")
    [[ -n $o && -n $n ]] || { echo "$name: estimate failed" >&2; exit 1; }
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$role" "$meas" "$o" "$n"
done | awk -F'\t' '
    function abs(v) { return v < 0 ? -v : v }
    { eo = $4 / $3 - 1; en = $5 / $3 - 1
      printf "%-20s %-5s %11.3f %11.3f %+6.0f%% %11.3f %+6.0f%%\n", $1, $2, $3, $4, 100 * eo, $5, 100 * en
      k = $2; n[k]++; if (abs(en) <= 0.25) ok[k]++; if (abs(eo) <= 0.25) okold[k]++
      if (abs(en) > mx[k]) mx[k] = abs(en); if (abs(eo) > mxo[k]) mxo[k] = abs(eo) }
    END { for (k in n)
            printf "%s: %d cases, within 25%%: old %d, new %d; largest error: old %.0f%%, new %.0f%%\n",
                   k, n[k], okold[k], ok[k], 100 * mxo[k], 100 * mx[k] }'
