#!/usr/bin/env bash
# Installs the Debian packages the build needs; silent and quick when they are all present.
#
#   scripts/setup.sh
#
# Missing packages are installed with apt-get, as root or through passwordless sudo, with apt's
# output kept in a log that is printed only if the install fails. Without either, it prints the
# command to run and exits 1. Running it again changes nothing.
set -euo pipefail

packages=(build-essential pkg-config libz3-dev libsqlite3-dev libcjson-dev libopenblas-dev
          libopenmpi-dev openmpi-bin libprotobuf-c-dev protobuf-c-compiler libonnx-dev)

if ! command -v dpkg-query >/dev/null; then
    echo "setup: not a Debian system (no dpkg-query); install by hand: ${packages[*]}" >&2
    exit 0
fi

installed() {
    [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]
}

missing=()
for p in "${packages[@]}"; do
    if installed "$p"; then
        continue
    fi
    # A working compiler and make stand in for the build-essential meta-package.
    if [[ $p == build-essential ]] && command -v cc >/dev/null && command -v make >/dev/null &&
        installed libc6-dev; then
        continue
    fi
    missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -eq 0 ]]; then
    as_root=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
else
    echo "setup: missing packages: ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi

log=$(mktemp "${TMPDIR:-/tmp}/unity-setup.XXXXXX.log")
apt() {
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get -q -y -o DPkg::Lock::Timeout=600 "$@" >>"$log" 2>&1
}
install() {
    apt install --no-install-recommends "${missing[@]}"
}

echo "setup: installing ${missing[*]} (log: $log)"
if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null || ! install; then
    if ! apt update || ! install; then
        echo "setup: apt-get failed; its output follows" >&2
        cat "$log" >&2
        exit 1
    fi
fi
rm -f "$log"
