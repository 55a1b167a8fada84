#!/usr/bin/env bash
# Installs the built programs and the files they read (`make install` runs it):
#
#   scripts/install.sh BUILD_DIR PREFIX [DESTDIR]
#
#   DESTDIR PREFIX/bin/unity-*                    the programs of BUILD_DIR/bin
#   DESTDIR PREFIX/lib/libunity_{cuda,nccl}.so     the CUDA plugins of a CUDA build (BUILD_DIR/lib),
#                                                  loaded from <program dir>/../lib on first GPU use
#   DESTDIR PREFIX/share/unity/specs/             ops.json, menu.json, FORMAT.md, menus/, machines/
#   DESTDIR PREFIX/share/unity/scripts/mpirun.sh  mpirun with --oversubscribe (and root allowed)
#
# An installed program finds its specs at <its directory>/../share/unity/specs when neither
# --spec, $UNITY_SPECS nor ./specs/ops.json names others (pcg/specpath.h); DESTDIR (staging for
# a package) is not part of that path. Installing again replaces the files.
set -euo pipefail
if [[ $# -lt 2 || $# -gt 3 ]]; then
    echo "usage: $0 BUILD_DIR PREFIX [DESTDIR]" >&2
    exit 2
fi
build=$1
prefix=$2
destdir=${3:-}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ $prefix != /* ]]; then
    echo "install: PREFIX must be an absolute path, not '$prefix'" >&2
    exit 2
fi
progs=("$build"/bin/unity-*)
if [[ ! -x ${progs[0]} ]]; then
    echo "install: no programs in $build/bin (run make first)" >&2
    exit 1
fi
bin=$destdir$prefix/bin
share=$destdir$prefix/share/unity
install -d "$bin" "$share/specs/menus" "$share/specs/machines" "$share/scripts"
install -m 755 "${progs[@]}" "$bin/"
plugins=("$build"/lib/libunity_*.so)
if [[ -e ${plugins[0]} ]]; then
    install -d "$destdir$prefix/lib"
    install -m 755 "${plugins[@]}" "$destdir$prefix/lib/"
fi
install -m 644 "$root"/specs/ops.json "$root"/specs/menu.json "$root"/specs/FORMAT.md "$share/specs/"
install -m 644 "$root"/specs/menus/*.json "$share/specs/menus/"
install -m 644 "$root"/specs/machines/*.json "$share/specs/machines/"
install -m 755 "$root"/scripts/mpirun.sh "$share/scripts/"
echo "installed ${#progs[@]} programs in $bin and the specs in $share/specs"
