#!/usr/bin/env bash
# bench/compare.sh [MODEL.gguf...] - tpc against the reference engine (ik_llama.cpp's llama-bench) on the
# same GGUFs, paired and interleaved, one table of ratios (see bench/compare.py for the method).
#
# Tests: pp512 and tg128 at devices=1 and devices=2 (same thread count in total), and tg128 at a depth of
# 4096 tokens (`llama-bench -gp 4096,128` against `tpc run --bench --depth 4096`) when `tpc run --help`
# has --depth. Ratios: tpc/reference per device count and devices=2/devices=1.
#
# Default models: bench-llama and bench-qwen3moe Q4_K_M (`tpc synth`, written once into BENCH_CACHE) and
# Gemma 3 270M Q4_K_M from build/demo/models (`make demo` fetches it); BENCH_MODELS=DIR takes every
# *.gguf in DIR instead.
#
# Environment: TPC (build/bin/tpc), IK_BIN (/work/ik/build/bin: the reference built with
# `cmake -DGGML_CUDA=OFF -DLLAMA_CURL=OFF`, target llama-bench), ROUNDS (3), PP (512), TG (128),
# DEPTH (4096; 0 = off), THREADS (2), DEVICES ("1,2"), BENCH_CACHE (build/bench-models), REF_ARGS,
# BASE (an older tpc run in the same rounds, for before/after columns "base-d1", "base-d2").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tpc=${TPC:-$root/build/bin/tpc}
ik=${IK_BIN:-/work/ik/build/bin}
cache=${BENCH_CACHE:-$root/build/bench-models}
if [ ! -x "$tpc" ]; then
  echo "bench/compare.sh: no tpc at $tpc; build it (cmake --build build --target tpc) or set TPC" >&2
  exit 2
fi
if [ ! -x "$ik/llama-bench" ]; then
  echo "bench/compare.sh: no llama-bench in $ik; build the reference (cmake --build BUILD --target" \
       "llama-bench) and set IK_BIN to its bin folder" >&2
  exit 2
fi
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  if [ -n "${BENCH_MODELS:-}" ]; then
    models=("$BENCH_MODELS"/*.gguf)
  else
    mkdir -p "$cache"
    for preset in bench-llama bench-qwen3moe; do
      gguf="$cache/$preset-Q4_K_M.gguf"
      [ -f "$gguf" ] || "$tpc" synth --preset "$preset" --type Q4_K_M -o "$gguf" >&2
      models+=("$gguf")
    done
    gemma=$(ls "$root"/build/demo/models/*gemma*3*270*.gguf 2>/dev/null | head -1 || true)
    if [ -n "$gemma" ]; then
      models+=("$gemma")
    else
      echo "bench/compare.sh: Gemma 3 270M not found in build/demo/models (make demo fetches it); skipped" >&2
    fi
  fi
fi
for m in "${models[@]}"; do
  [ -f "$m" ] || { echo "bench/compare.sh: model $m not found; pass existing GGUF paths" >&2; exit 2; }
done
exec python3 "$root/bench/compare.py" --tpc "$tpc" --ref "$ik/llama-bench" --rounds "${ROUNDS:-3}" \
  --pp "${PP:-512}" --tg "${TG:-128}" --depth "${DEPTH:-4096}" --threads "${THREADS:-2}" \
  --devices "${DEVICES:-1,2}" --ref-args "${REF_ARGS:-}" ${BASE:+--base "$BASE"} "${models[@]}"
