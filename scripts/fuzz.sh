#!/usr/bin/env bash
# Bounded libFuzzer run of the GGUF reader (`make fuzz`; not part of `make check`).
#   scripts/fuzz.sh [BUILD_DIR]          BUILD_DIR defaults to build-fuzz
#   FUZZ_SECONDS=120 (default)           time budget per target
# Configures a clang build with TPC_FUZZ=ON (no MLIR needed), builds tpc-fuzz-gguf, seeds a corpus from
# the malformed-GGUF files, the demo model and (when present) the shared fixtures' headers, runs, and
# prints the executions done. Crash inputs are left in BUILD_DIR/fuzz/ (the run then fails).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-fuzz}
[[ "$build" = /* ]] || build="$root/$build"
seconds=${FUZZ_SECONDS:-120}
shared=${TPC_SHARED_DIR:-$root/../shared}

command -v clang++-19 >/dev/null || { echo "fuzz.sh: clang++-19 is missing; run scripts/install-deps.sh --fuzz" >&2; exit 1; }

CC=clang-19 CXX=clang++-19 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTPC_FUZZ=ON -DTPC_ENABLE_COMPILER=OFF -DTPC_ENABLE_TESTS=ON -DTPC_ENABLE_CUDA=OFF >/dev/null
cmake --build "$build" --target tpc-fuzz-gguf -j "$(nproc)"

work="$build/fuzz/gguf"
corpus="$work/corpus"
mkdir -p "$corpus" "$work/artifacts"
cp "$root"/test/gguf/malformed/*.gguf "$corpus"/ 2>/dev/null || true
cp "$root"/examples/models/*.gguf "$corpus"/ 2>/dev/null || true
# The fixtures are MBs; their first 64 KiB (header, metadata, tensor infos) are what the reader parses.
if [[ -d "$shared/fixtures" ]]; then
  for f in "$shared"/fixtures/*.gguf; do
    head -c 65536 "$f" > "$corpus/fixture-head-$(basename "$f")"
  done
fi
echo "fuzz.sh: tpc-fuzz-gguf for ${seconds}s, corpus (seeds + earlier finds) $(ls "$corpus" | wc -l) files"

log="$work/run.log"
set +e
"$build/bin/tpc-fuzz-gguf" "$corpus" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 >"$log" 2>&1
status=$?
set -e
execs=$(grep -h "stat::number_of_executed_units" "$log" | awk '{s += $2} END {print s + 0}')
echo "fuzz.sh: tpc-fuzz-gguf: $execs executions in ${seconds}s, exit status $status"
grep -h -E "^#[0-9]+ +DONE|cov:" "$log" | tail -1 || true
if [[ $status -ne 0 ]] || ls "$work"/artifacts/crash-* "$work"/artifacts/leak-* "$work"/artifacts/timeout-* >/dev/null 2>&1; then
  echo "fuzz.sh: FINDINGS in $work/artifacts (log: $log):" >&2
  ls "$work/artifacts" >&2
  grep -m5 -E "ERROR|runtime error" "$log" >&2 || true
  exit 1
fi
echo "fuzz.sh: no findings"
