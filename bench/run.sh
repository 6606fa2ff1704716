#!/usr/bin/env bash
# bench/run.sh TPC [GGUF...] - llama-bench style numbers for `tpc run --bench`, 1/2/3 devices side by side.
#
# For each model: `tpc compile MODEL --devices N -o PLAN` for N = 1, 2, 3, then `tpc run PLAN --bench`,
# and finally the speed ratios against 1 device, all measured in this one run (numbers from different runs
# or machines are not comparable). Without arguments the models are the shared fixtures tiny-llama{,-Q8_0}.
# Until `tpc compile` emits plans, the plans come from the hand-built tiny-llama plans of the executor tests
# (tpc-exec-tests, TPC_KEEP_PLANS), next to TPC in the build tree.
#
# Environment: PP (512), TG (128), REPS (3), THREADS (all cores), TPC_SHARED_DIR (../shared), OUT (a temp dir).
set -euo pipefail
tpc=${1:?usage: bench/run.sh path/to/tpc [model.gguf...]}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${TPC_SHARED_DIR:-$root/../shared}
pp=${PP:-512}; tg=${TG:-128}; reps=${REPS:-3}; threads=${THREADS:-$(nproc)}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"

models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  for m in tiny-llama tiny-llama-Q8_0; do
    [ -f "$shared/fixtures/$m.gguf" ] && models+=("$shared/fixtures/$m.gguf")
  done
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

for model in "${models[@]}"; do
  name=$(basename "$model" .gguf)
  declare -A pp_ts=() tg_ts=()
  for n in 1 2 3; do
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
    for n in 2 3; do
      [ -n "${pp_ts[$n]:-}" ] || continue
      awk -v m="$name" -v n="$n" -v p1="${pp_ts[1]}" -v pn="${pp_ts[$n]}" -v t1="${tg_ts[1]}" -v tn="${tg_ts[$n]}" \
        'BEGIN { printf "bench: %s %d devices vs 1: pp x%.2f, tg x%.2f (same run, %s)\n", m, n, pn / p1, tn / t1, "CPU" }'
    done
  fi
  unset pp_ts tg_ts
done
echo "bench: results in $out"
