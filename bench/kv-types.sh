#!/usr/bin/env bash
# bench/kv-types.sh [MODEL.gguf...] - quantized KV caches (issue 37 part 1): peak RSS and tg128 at a depth of
# 8192 tokens with f16, q8_0 and q4_0 caches (K and V alike), tpc against the reference engine's llama-bench
# with the same cache types. A benchmark, not a test: it prints one table and asserts nothing.
#
# tpc: `tpc compile MODEL -ctk T -ctv T`, then `tpc run PLAN --bench -pp 0 -tg 128 --depth 8192 -c 16384`
# (the session sizes its caches for the 16k context). Reference: `llama-bench -gp 8192,128 -ctk T -ctv T`
# (flash attention on for every type: the reference quantizes a V cache only under flash attention, so
# f16 runs with it too and the rows compare like with like). llama-bench sizes its context to depth + n
# (8320 positions), so its RSS holds a cache about half the size of tpc's 16k one: the table prints tpc's
# KV bytes at both sizes (from `tpc compile --report --json`) beside the RSS, for the comparison.
# Peak RSS is /usr/bin/time's maximum resident set (weights, caches, activations, the binary). For tpc it
# comes from a generation run in the same state (`tpc run PLAN -c CTX --prompt-ids <DEPTH ids> -n TG
# --ignore-eos`), not from --bench, whose roofline line probes host bandwidth with a buffer of its own
# (~2 GB of RSS on any model); for the reference from its llama-bench run.
#
# Default models: bench-llama Q4_K_M (`tpc synth`, written once into BENCH_CACHE) and Gemma 3 270M Q4_K_M
# from build/demo/models (`make demo` fetches it).
#
# Environment: TPC (build/bin/tpc), IK_BIN (/work/ik/build/bin: llama-bench of the reference, CPU build),
# THREADS (2), DEPTH (8192), TG (128), CTX (16384), TYPES ("f16 q8_0 q4_0"), BENCH_CACHE
# (build/bench-models), REF_ARGS (more llama-bench flags).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tpc=${TPC:-$root/build/bin/tpc}
ik=${IK_BIN:-/work/ik/build/bin}
cache=${BENCH_CACHE:-$root/build/bench-models}
threads=${THREADS:-2}
depth=${DEPTH:-8192}
tg=${TG:-128}
ctx=${CTX:-16384}
types=${TYPES:-f16 q8_0 q4_0}
if [ ! -x "$tpc" ]; then
  echo "bench/kv-types.sh: no tpc at $tpc; build it (cmake --build build --target tpc) or set TPC" >&2
  exit 2
fi
ref=""
if [ -x "$ik/llama-bench" ]; then
  ref="$ik/llama-bench"
else
  echo "bench/kv-types.sh: no llama-bench in $ik (set IK_BIN); tpc rows only" >&2
fi
if [ ! -x /usr/bin/time ]; then
  echo "bench/kv-types.sh: /usr/bin/time is needed for peak RSS (apt-get install time)" >&2
  exit 2
fi
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  mkdir -p "$cache"
  gguf="$cache/bench-llama-Q4_K_M.gguf"
  [ -f "$gguf" ] || "$tpc" synth --preset bench-llama --type Q4_K_M -o "$gguf" >&2
  models+=("$gguf")
  gemma=$(ls "$root"/build/demo/models/*gemma*3*270*.gguf 2>/dev/null | head -1 || true)
  if [ -n "$gemma" ]; then
    models+=("$gemma")
  else
    echo "bench/kv-types.sh: Gemma 3 270M not found in build/demo/models (make demo fetches it); skipped" >&2
  fi
fi
for m in "${models[@]}"; do
  [ -f "$m" ] || { echo "bench/kv-types.sh: model $m not found; pass existing GGUF paths" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# KiB of the largest resident set of the command, its stdout in $work/out.
peak_rss() {
  /usr/bin/time -f "%M" -o "$work/rss" "$@" > "$work/out" 2> "$work/err" || {
    echo "bench/kv-types.sh: failed: $*" >&2
    tail -5 "$work/err" >&2
    return 1
  }
  cat "$work/rss"
}

# avg_ts of the last row of a llama-bench style JSON array on stdin.
avg_ts() { python3 -c 'import json,sys; t=sys.stdin.read(); print("%.2f" % json.loads(t[t.index("["):])[-1]["avg_ts"])'; }

# Device 0's KV bytes at N positions from `tpc compile --report --json` (kv_bytes_per_1k_tokens, one
# sequence; sliding-window layers as the report counts them).
kv_mib() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); n=int(sys.argv[2]); dev=d["devices"][0]; print("%.1f" % (dev["kv_bytes_per_1k_tokens"] * n / 1024 / 2**20))' "$1" "$2"
}

# The RSS run's prompt: DEPTH token ids (ids 1..100 cycled: any vocabulary has them).
ids=$(python3 -c 'import sys; print(",".join(str(1 + i % 100) for i in range(int(sys.argv[1]))))' "$depth")

printf "# %s, %s threads, tg%s at depth %s, tpc context %s\n" "$(date -u +%F)" "$threads" "$tg" "$depth" "$ctx"
printf "%-28s %-5s %12s %12s %14s %12s %14s %14s\n" model type "tpc t/s" "ref t/s" "tpc RSS MiB" "ref RSS MiB" \
  "KV MiB @ctx" "KV MiB @d+n"
for m in "${models[@]}"; do
  name=$(basename "$m" .gguf)
  for t in $types; do
    plan="$work/$name-$t.plan"
    "$tpc" compile "$m" -ctk "$t" -ctv "$t" -o "$plan" > /dev/null 2>&1
    "$tpc" compile "$m" -ctk "$t" -ctv "$t" --report --json > "$work/report.json" 2> /dev/null
    peak_rss "$tpc" run "$plan" --bench -pp 0 -tg "$tg" --depth "$depth" -c "$ctx" -t "$threads" -r 1 --json \
      > /dev/null
    ts=$(avg_ts < "$work/out")
    rss=$(peak_rss "$tpc" run "$plan" -c "$ctx" --prompt-ids "$ids" -n "$tg" --ignore-eos --greedy -t "$threads")
    rts="-" rrss="-"
    if [ -n "$ref" ]; then
      # shellcheck disable=SC2086
      if rrss=$(peak_rss "$ref" -m "$m" -p 0 -n 0 -gp "$depth,$tg" -t "$threads" -r 1 -fa 1 -ctk "$t" -ctv "$t" \
                  -o json ${REF_ARGS:-}); then
        rts=$(avg_ts < "$work/out")
        rrss=$((rrss / 1024))
      else
        rrss="-"
      fi
    fi
    printf "%-28s %-5s %12s %12s %14s %12s %14s %14s\n" "$name" "$t" "$ts" "$rts" "$((rss / 1024))" "$rrss" \
      "$(kv_mib "$work/report.json" "$ctx")" "$(kv_mib "$work/report.json" $((depth + tg)))"
  done
done
