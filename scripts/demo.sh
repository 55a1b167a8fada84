#!/usr/bin/env bash
# The end-to-end demo on the embedded default: specs -> unity-gen -> unity-verify -> rules.db ->
# unity-train (CPU threads as devices) on a text file, plus a look at FlexFlow's published rules.
# Usage: scripts/demo.sh BUILD_DIR   (run by `make demo` after setup and build)
set -euo pipefail
build=${1:-build/default}
B="$build/bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
db="$work/rules.db"
text=/usr/share/common-licenses/GPL-3
[[ -r $text ]] || text=README.md

step() { printf '\n== %s\n' "$*"; }

step "1. The operator specs (specs/ops.json): loaded, validated, every sharding rule and axiom parsed"
"$B/unity-pcg" ops | tail -n 4

step "2. unity-gen: every graph of up to 3 operators over the default menu (specs/menu.json),"
echo "   fingerprinted piece by piece in a prime field, equal ones paired, pruned, stored as candidates"
"$B/unity-gen" --spec specs/ -o "$db" --max-ops 3

step "3. unity-verify: the spec axioms checked on concrete tensors, then every candidate"
echo "   random-tested and proven by Z3 (parallel degrees generalized to a variable k where it holds)"
"$B/unity-verify" "$db" --jobs 2

step "4. rules.db: what it holds (unity-rules stats), and a few verified rules"
"$B/unity-rules" stats "$db"
"$B/unity-rules" list "$db" --status verified --op partition --limit 5

step "5. FlexFlow's 640 published rules: imported (malformed ones kept as rejected, with the reason)"
ff=${UNITY_FF:-../shared/external/flexflow_graph_subst_3_v2.json} # UNITY_FF: for tests
ff_ran="FlexFlow's published rule file imported into the same format"
if [[ -r $ff ]]; then
    "$B/unity-rules" import "$work/ff.db" "$ff" --quiet
    "$B/unity-rules" stats "$work/ff.db" | head -n 3
else
    echo "(skipped: $ff is not present in this checkout)"
    ff_ran="(not FlexFlow's rule file: $ff is not in this checkout)"
fi

step "6. unity-train: a character-level transformer learns $text on 2 CPU devices (data parallel)"
"$B/unity-train" --model charlm --tiny --data "$text" --steps 150 --devices 2 --seed 1 --log-every 25 |
    awk 'NR <= 2 || /^step (25|50|75|100|125|150)\// || !/^step/'

step "7. Data parallelism keeps the losses: the tiny MLP on 1 and 4 devices, last step of each"
for d in 1 4; do
    printf 'devices %d: ' "$d"
    "$B/unity-train" --model mlp --tiny --devices "$d" --steps 20 --seed 3 | grep '^step 20/'
done

step "8. The joint search (rewrites with the verified rules x parallelization x device mapping):
   the paper-size MLP planned for Unity's 4 x V100 box (estimated by the cost model, not run)"
"$B/unity-train" --model mlp --rules "$db" --machine specs/machines/v100x4.json --plan-only |
    awk '/^(rules|search|op costs|plan|data parallel|rewrites applied|without rewrites|layer [123]):/'

step "9. On this CPU (specs/machines/cpu.json): op costs profiled into rules.db (serial and data
   parallel pieces; the search scales the roofline of pieces nobody profiled by them), then the
   search, and 300 training steps with the plan found: its estimated step against the median step"
for sd in serial:1 data:2; do
    "$B/unity-train" --model transformer --tiny --strategy "${sd%:*}" --devices "${sd#*:}" \
        --threads "${sd#*:}" --profile --machine specs/machines/cpu.json --rules "$db" --quiet |
        sed -n "s/^stored/${sd%:*}: stored/p"
done
"$B/unity-train" --model transformer --tiny --rules "$db" --machine specs/machines/cpu.json \
    --steps 300 --seed 3 | awk '/^(search|op costs|plan|data parallel|training|step (1|300)\/|median step|trained)/'

step "What ran"
cat <<TXT
Ran: spec validation; generation of candidate substitutions from the specs (including the
parallelization operators partition/combine/replicate/reduce); their proof by Z3 under the specs'
axioms, with verdicts, timings and axioms used stored in an SQLite rules.db;
$ff_ran;
training on CPU threads as devices with reverse-mode autodiff through the parallel graph;
and Unity's three-layer search inside unity-train (verified algebraic rewrites from rules.db,
splitting at cut nodes, device mapping by dynamic programming, costed by the machine file).
Not in this demo: the CUDA backend (unity-train --backend cuda on an NVIDIA GPU; run on one H200
and one H100, never on several GPUs - runtime/README.md says what ran).
TXT
