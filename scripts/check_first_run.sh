#!/usr/bin/env bash
# Proves that `make demo` works on its first run on a machine that lacks the MPI package (issue 10
# item 1), without removing anything: fake pkg-config, dpkg-query, apt-get and sudo first in PATH
# report libopenmpi-dev (ompi-c) missing until the fake apt-get "installs" it, then defer to the
# real tools. The demo builds the one object that needs the MPI flags (runtime/comm_mpi.o) into a
# scratch build directory and runs a stand-in for scripts/demo.sh.
#
#   scripts/check_first_run.sh        prints "first run: ok" or the failure; exit status 1 on failure
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
work=$(mktemp -d "${TMPDIR:-/tmp}/unity-first-run.XXXXXX")
trap 'rm -rf "$work"' EXIT
fake=$work/bin
mkdir -p "$fake"
marker=$work/installed
real_pkg_config=$(command -v pkg-config) || { echo "first run: pkg-config not found" >&2; exit 1; }
real_dpkg_query=$(command -v dpkg-query) || { echo "first run: dpkg-query not found" >&2; exit 1; }

cat >"$fake/pkg-config" <<SH
#!/bin/sh
for a in "\$@"; do [ "\$a" = ompi-c ] && [ ! -e '$marker' ] && exit 1; done
exec '$real_pkg_config' "\$@"
SH
cat >"$fake/dpkg-query" <<SH
#!/bin/sh
for a in "\$@"; do [ "\$a" = libopenmpi-dev ] && [ ! -e '$marker' ] && { printf 'unknown ok not-installed'; exit 1; }; done
exec '$real_dpkg_query' "\$@"
SH
cat >"$fake/apt-get" <<SH
#!/bin/sh
for a in "\$@"; do [ "\$a" = install ] && { echo "fake apt-get \$*"; touch '$marker'; }; done
exit 0
SH
printf '#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n' >"$fake/sudo"
printf '#!/bin/sh\necho "demo ran with $1"\n' >"$work/demo.sh"
chmod +x "$fake"/* "$work/demo.sh"

if PATH=$fake:$PATH pkg-config --cflags ompi-c >/dev/null 2>&1; then
    echo "first run: the fake pkg-config does not hide ompi-c" >&2
    exit 1
fi
build=$work/build
if ! PATH=$fake:$PATH make --no-print-directory BUILD="$build" demo \
    DEMO_GOALS="$build/runtime/comm_mpi.o" DEMO_SCRIPT="$work/demo.sh" >"$work/log" 2>&1; then
    cat "$work/log" >&2
    echo "first run: make demo failed with the package missing at the start" >&2
    exit 1
fi
for want in "$marker" "$build/runtime/comm_mpi.o"; do
    if [[ ! -e $want ]]; then
        cat "$work/log" >&2
        echo "first run: $want missing after make demo" >&2
        exit 1
    fi
done
grep -q "^demo ran with $build\$" "$work/log" || { cat "$work/log" >&2; echo "first run: demo did not run" >&2; exit 1; }
echo "first run: ok"
