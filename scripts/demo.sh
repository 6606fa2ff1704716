#!/usr/bin/env bash
# make demo: the main job on a model the repository holds (never needs ../shared).
# For now: inspect examples/models/tiny-demo.gguf (a one-layer llama with Q8_0 weights, written by
# test/gguf/malformed/generate.py), as text and as JSON. A later step replaces this with compile + run.
set -euo pipefail
tpc=$1; out=$2
root=$(cd "$(dirname "$0")/.." && pwd)
model="$root/examples/models/tiny-demo.gguf"
mkdir -p "$out"
echo "demo: $("$tpc" --version)"
echo "demo: tpc inspect $model"
"$tpc" inspect "$model"
"$tpc" inspect --json "$model" > "$out/tiny-demo.inspect.json"
echo "demo: JSON summary written to $out/tiny-demo.inspect.json"
