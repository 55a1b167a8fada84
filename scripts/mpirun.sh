#!/usr/bin/env bash
# mpirun with what OpenMPI needs on this kind of machine, then the arguments as given:
#   --oversubscribe       more processes than cores (e.g. -np 4 on a 2-core box; OpenMPI refuses
#                         otherwise: "There are not enough slots available")
#   --allow-run-as-root   when run as root (containers, CI); OpenMPI refuses root otherwise
#
#   scripts/mpirun.sh -np 4 build/default/bin/unity-train --model transformer --tiny --comm mpi
set -euo pipefail
if ! command -v mpirun >/dev/null; then
    echo "mpirun.sh: mpirun not found (scripts/setup.sh installs openmpi-bin)" >&2
    exit 1
fi
extra=(--oversubscribe)
if [[ $(id -u) -eq 0 ]]; then
    extra+=(--allow-run-as-root)
fi
exec mpirun "${extra[@]}" "$@"
