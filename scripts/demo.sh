#!/usr/bin/env bash
# make demo: the main job on a model the repository writes itself (never needs ../shared).
set -euo pipefail
tpc=$1; out=$2
mkdir -p "$out"
echo "demo: tpc --version: $("$tpc" --version)"
