#!/usr/bin/env bash
# bench/weight-types.sh - the weight types of issue 29 beside the reference engine: bench-llama and
# bench-qwen3moe written by `tpc synth` in F16 and quantized by the reference engine's own llama-quantize
# (Q3_K_M, Q2_K, IQ4_XS, IQ4_NL, MXFP4; bench-qwen3moe's MXFP4 only in the experts, as gpt-oss files hold it,
# the rest Q8_0), then bench/compare.sh on them (pp512 / tg128 at devices 1 and 2, paired rounds).
#
# Environment: as bench/compare.sh (TPC, IK_BIN with llama-bench and llama-quantize, ROUNDS, DEPTH (0
# here by default), ...), TYPES (the list above), MODELS ("bench-llama bench-qwen3moe"), BENCH_CACHE
# (build/bench-models). Files are written once and reused.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tpc=${TPC:-$root/build/bin/tpc}
ik=${IK_BIN:-/work/ik/build/bin}
cache=${BENCH_CACHE:-$root/build/bench-models}
types=${TYPES:-Q3_K_M Q2_K IQ4_XS IQ4_NL MXFP4}
if [ ! -x "$ik/llama-quantize" ]; then
  echo "bench/weight-types.sh: no llama-quantize in $ik; build the reference's target llama-quantize and set" \
       "IK_BIN to its bin folder" >&2
  exit 2
fi
mkdir -p "$cache"
files=()
for preset in ${MODELS:-bench-llama bench-qwen3moe}; do
  f16="$cache/$preset-F16.gguf"
  [ -f "$f16" ] || "$tpc" synth --preset "$preset" --type F16 -o "$f16" >&2
  for t in $types; do
    out="$cache/$preset-$t.gguf"
    if [ ! -f "$out" ]; then
      if [ "$t" = MXFP4 ] && [ "$preset" = bench-qwen3moe ]; then
        "$ik/llama-quantize" --custom-q "ffn_.*_exps=mxfp4" "$f16" "$out" Q8_0 "$(nproc)" >&2
      else
        "$ik/llama-quantize" "$f16" "$out" "$t" "$(nproc)" >&2
      fi
    fi
    files+=("$out")
  done
done
DEPTH=${DEPTH:-0} exec "$root/bench/compare.sh" "${files[@]}"
