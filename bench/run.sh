#!/usr/bin/env bash
# bench/run.sh TPC [GGUF...] - llama-bench style numbers for `tpc run --bench`, 1/2/3 devices side by side.
#
# For each model: `tpc compile MODEL --devices N -o PLAN` for each N in DEVICES, then `tpc run PLAN --bench`,
# the speed ratios against 1 device, and for the two issue #5 bar-shaped models the ratio to the bar (the
# fastest CPU engine for GGUF, ik_llama.cpp, at 2 threads on a 2-core AVX-512 machine). All ratios are
# measured in this one run (numbers from different runs or machines are not comparable; the bar is from
# another machine, so its ratio is indicative only).
#
# Without arguments the models are the shared fixtures (tiny-llama, -Q8_0, -Q4_K_M, tiny-qwen3moe-Q4_K_M)
# and, when `tpc synth` is available, the bar-shaped models `tpc synth --preset bench-llama|bench-qwen3moe
# --type Q4_K_M` (written once into BENCH_CACHE). Where `tpc compile` cannot make a plan, the fixture plans
# come from the hand-built tiny-llama plans of the executor tests (tpc-exec-tests, TPC_KEEP_PLANS).
#
# Environment: PP (512), TG (128), REPS (3), THREADS (2: the bar's thread count), DEVICES ("1 2 3"),
# BAR (1: synthesize and bench the bar-shaped models), BENCH_CACHE (OUT), TPC_SHARED_DIR (../shared),
# OUT (a temp dir).
set -euo pipefail
tpc=${1:?usage: bench/run.sh path/to/tpc [model.gguf...]}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${TPC_SHARED_DIR:-$root/../shared}
pp=${PP:-512}; tg=${TG:-128}; reps=${REPS:-3}; threads=${THREADS:-2}
devices=${DEVICES:-"1 2 3"}
out=${OUT:-$(mktemp -d)}
cache=${BENCH_CACHE:-$out}
mkdir -p "$out" "$cache"

# The bar (issue #5): ik_llama.cpp, 2 threads, 2-core AVX-512 machine, Q4_K_M.
declare -A bar_pp=([bench-llama-Q4_K_M]=410 [bench-qwen3moe-Q4_K_M]=2470)
declare -A bar_tg=([bench-llama-Q4_K_M]=72 [bench-qwen3moe-Q4_K_M]=525)

models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  for m in tiny-llama tiny-llama-Q8_0 tiny-llama-Q4_K_M tiny-qwen3moe-Q4_K_M; do
    [ -f "$shared/fixtures/$m.gguf" ] && models+=("$shared/fixtures/$m.gguf")
  done
  if [ "${BAR:-1}" = 1 ] && "$tpc" synth --help >/dev/null 2>&1; then
    for preset in bench-llama bench-qwen3moe; do
      gguf="$cache/$preset-Q4_K_M.gguf"
      if [ ! -f "$gguf" ]; then
        "$tpc" synth --preset "$preset" --type Q4_K_M -o "$gguf" >/dev/null ||
          { echo "bench: tpc synth --preset $preset failed" >&2; continue; }
      fi
      models+=("$gguf")
    done
  fi
fi
if [ ${#models[@]} -eq 0 ]; then
  echo "bench: no models given and no fixtures under $shared/fixtures; pass GGUF paths" >&2
  exit 1
fi

# plan_for MODEL N -> prints the plan path (or nothing when no plan can be made).
plan_for() {
  local model=$1 n=$2 name plan
  name=$(basename "$model" .gguf)
  plan="$out/$name-d$n.plan"
  if "$tpc" compile "$model" --devices "$n" -o "$plan" >/dev/null 2>"$out/compile.err"; then
    echo "$plan"; return
  fi
  # Fallback: the executor tests' hand-built llama plans (fixtures only).
  local tests
  tests="$(dirname "$tpc")/tpc-exec-tests"
  if [ -x "$tests" ] && [ ! -f "$out/$name-d$n.plan" ]; then
    TPC_KEEP_PLANS="$out" TPC_SHARED_DIR="$shared" "$tests" --gtest_filter='TpcRun.KeepPlansForBench' >/dev/null 2>&1 || true
  fi
  [ -f "$plan" ] && echo "$plan"
}

summary=()
for model in "${models[@]}"; do
  name=$(basename "$model" .gguf)
  declare -A pp_ts=() tg_ts=()
  for n in $devices; do
    plan=$(plan_for "$model" "$n" || true)
    if [ -z "$plan" ]; then
      echo "bench: $name on $n devices skipped: no plan (tpc compile: $(head -1 "$out/compile.err" 2>/dev/null))"
      continue
    fi
    "$tpc" run "$plan" --bench --pp "$pp" --tg "$tg" -r "$reps" -t "$threads" | tee "$out/$name-d$n.md"
    # The t/s column of the pp and tg rows ("| pp512 | 123.45 ± 1.20 |").
    pp_ts[$n]=$(awk -F'|' '$7 ~ /^ pp/ { split($8, a, " "); print a[1] }' "$out/$name-d$n.md")
    tg_ts[$n]=$(awk -F'|' '$7 ~ /^ tg/ { split($8, a, " "); print a[1] }' "$out/$name-d$n.md")
  done
  if [ -n "${pp_ts[1]:-}" ]; then
    for n in $devices; do
      [ "$n" != 1 ] && [ -n "${pp_ts[$n]:-}" ] || continue
      summary+=("$(awk -v m="$name" -v n="$n" -v p1="${pp_ts[1]}" -v pn="${pp_ts[$n]}" -v t1="${tg_ts[1]}" \
        -v tn="${tg_ts[$n]}" 'BEGIN { printf "bench: %s %d devices vs 1: pp x%.2f, tg x%.2f (same run, CPU)", m, n, pn / p1, tn / t1 }')")
    done
  fi
  if [ -n "${bar_pp[$name]:-}" ]; then
    for n in $devices; do
      [ -n "${pp_ts[$n]:-}" ] || continue
      summary+=("$(awk -v m="$name" -v n="$n" -v th="$threads" -v p="${pp_ts[$n]}" -v t="${tg_ts[$n]}" \
        -v bp="${bar_pp[$name]}" -v bt="${bar_tg[$name]}" -v pp="$pp" -v tg="$tg" \
        'BEGIN { printf "bench: %s %d device(s), %d threads: pp%d %.1f t/s = %.2f x bar (%d), tg%d %.1f t/s = %.2f x bar (%d)", m, n, th, pp, p, p / bp, bp, tg, t, t / bt, bt }')")
    done
  fi
  unset pp_ts tg_ts
done
printf '%s\n' "${summary[@]}"
echo "bench: results in $out (bar: ik_llama.cpp at 2 threads on a 2-core AVX-512 machine, issue #5)"
