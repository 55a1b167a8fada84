#!/usr/bin/env bash
# Placeholder: the end-to-end demo (gen -> verify -> train) goes here. Usage: scripts/demo.sh BUILD_DIR
set -euo pipefail
echo "demo: nothing yet"
