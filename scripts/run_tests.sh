#!/usr/bin/env bash
# Runs the test binaries of one build and prints the total the CI harness reads.
#
#   scripts/run_tests.sh BUILD_DIR [TEST_BINARY...]
#
# With no binaries given it runs every executable BUILD_DIR/tests/test_*. Each runs from the
# repository root (tests read specs/ relative to it) and must end its output with the line
# `N passed, N failed` or `N passed, N failed, N skipped` (cases that lacked something they need:
# tests/test.h TEST_SKIP). A binary that crashes, times out, exits non-zero or prints no summary
# counts as one more failure and is named. The last line is the sum, `N passed, N failed`, with
# `, N skipped` when something skipped; the exit status is 1 if anything failed.
#
# Environment: TEST_WRAPPER (e.g. "valgrind -q --error-exitcode=1") runs each binary under a tool;
# TEST_TIMEOUT (seconds, default 600, 0 = none) stops a binary that hangs.
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 BUILD_DIR [TEST_BINARY...]" >&2
    exit 2
fi
build=$1
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

tests=("$@")
if [[ ${#tests[@]} -eq 0 ]]; then
    for t in "$build"/tests/test_*; do
        [[ -f $t && -x $t && $(basename "$t") != *.* ]] && tests+=("$t")
    done
fi

export UNITY_BUILD=$build  # tests that run the programs find them here
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# make tsan: the uninstrumented libraries' reports suppressed; a test asks for 2^62 bytes and wants NULL
export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$root/scripts/tsan.supp allocator_may_return_null=1}
timeout_s=${TEST_TIMEOUT:-600}
read -r -a wrapper <<<"${TEST_WRAPPER:-}"
if [[ $timeout_s != 0 ]] && command -v timeout >/dev/null; then
    wrapper=(timeout -k 10 "$timeout_s" "${wrapper[@]}")
fi

log=$(mktemp "${TMPDIR:-/tmp}/unity-test.XXXXXX")
trap 'rm -f "$log"' EXIT

passed=0
failed=0
skipped=0
broken=()
for t in "${tests[@]}"; do
    name=$(basename "$t")
    echo "== $name"
    if [[ ! -x $t ]]; then
        echo "$name: not built"
        failed=$((failed + 1))
        broken+=("$name (not built)")
        continue
    fi
    [[ $t == /* ]] || t=./${t#./}
    set +e
    { "${wrapper[@]}" "$t" 2>&1 | tee "$log"; } 2>/dev/null # no "Aborted" from bash
    rc=${PIPESTATUS[0]}
    set -e
    last=$(tail -n 1 "$log" | tr -d '\r')
    if [[ $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed(,\ ([0-9]+)\ skipped)?$ ]]; then
        passed=$((passed + BASH_REMATCH[1]))
        failed=$((failed + BASH_REMATCH[2]))
        skipped=$((skipped + ${BASH_REMATCH[4]:-0}))
        if [[ $rc -ne 0 && ${BASH_REMATCH[2]} -eq 0 ]]; then
            failed=$((failed + 1))
            broken+=("$name (exit status $rc)")
        fi
    else
        failed=$((failed + 1))
        if [[ $rc -eq 124 || $rc -eq 137 ]] && [[ $timeout_s != 0 ]]; then
            broken+=("$name (timed out after ${timeout_s}s, no summary)")
        elif [[ $rc -gt 128 ]]; then
            broken+=("$name (killed by signal $((rc - 128)), no summary)")
        else
            broken+=("$name (exit status $rc, no summary)")
        fi
    fi
done

for b in "${broken[@]+"${broken[@]}"}"; do
    echo "FAILED: $b"
done
if [[ $skipped -gt 0 ]]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[[ $failed -eq 0 ]]
