#!/usr/bin/env bash
# Bounded libFuzzer runs of the GGUF reader, the plan loader and the compile path (`make fuzz`; not part of
# `make check`).
#   scripts/fuzz.sh [BUILD_DIR]          BUILD_DIR defaults to build-fuzz
#   FUZZ_SECONDS=120 (default)           time budget per target
# Configures a clang build with TPC_FUZZ=ON (the compile target needs MLIR 19), builds tpc-fuzz-gguf,
# tpc-fuzz-plan and tpc-fuzz-compile, seeds the GGUF corpus from the malformed-GGUF files, the demo model
# and (when present) the shared fixtures' headers, the plan corpus from plans the normal build's
# `tpc compile` writes (when BUILD_DIR's sibling `build` has one), and the compile corpus from whole
# models (the demo model, the import-error inputs, the shared fixtures when present); every corpus also
# gets test/fuzz/regressions/<target>/, the inputs of earlier findings. Runs each target and prints the
# executions done. Crash inputs are left in BUILD_DIR/fuzz/ (the run then fails).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-fuzz}
[[ "$build" = /* ]] || build="$root/$build"
seconds=${FUZZ_SECONDS:-120}
shared=${TPC_SHARED_DIR:-$root/../shared}

command -v clang++-19 >/dev/null || { echo "fuzz.sh: clang++-19 is missing; run scripts/install-deps.sh --fuzz" >&2; exit 1; }

CC=clang-19 CXX=clang++-19 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTPC_FUZZ=ON -DTPC_ENABLE_COMPILER=ON -DTPC_ENABLE_TESTS=ON -DTPC_ENABLE_CUDA=OFF >/dev/null
cmake --build "$build" --target tpc-fuzz-gguf tpc-fuzz-plan tpc-fuzz-compile -j "$(nproc)"

# run_fuzzer NAME CORPUS MAXLEN [LIBFUZZER FLAGS...]: one bounded run; fails the script on any finding.
run_fuzzer() {
  local name=$1 corpus=$2 maxlen=$3 work="$build/fuzz/$1"
  shift 3
  mkdir -p "$work/artifacts"
  cp "$root/test/fuzz/regressions/$name"/* "$corpus"/ 2>/dev/null || true
  echo "fuzz.sh: tpc-fuzz-$name for ${seconds}s, corpus (seeds + earlier finds) $(ls "$corpus" | wc -l) files"
  local log="$work/run.log" status
  set +e
  "$build/bin/tpc-fuzz-$name" "$corpus" -max_total_time="$seconds" -max_len="$maxlen" -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$@" >"$log" 2>&1
  status=$?
  set -e
  local execs
  execs=$(grep -h "stat::number_of_executed_units" "$log" | awk '{s += $2} END {print s + 0}')
  echo "fuzz.sh: tpc-fuzz-$name: $execs executions in ${seconds}s, exit status $status"
  grep -h -E "^#[0-9]+ +DONE|cov:" "$log" | tail -1 || true
  if [[ $status -ne 0 ]] || ls "$work"/artifacts/crash-* "$work"/artifacts/leak-* "$work"/artifacts/timeout-* >/dev/null 2>&1; then
    echo "fuzz.sh: FINDINGS in $work/artifacts (log: $log):" >&2
    ls "$work/artifacts" >&2
    grep -m5 -E "ERROR|runtime error" "$log" >&2 || true
    exit 1
  fi
}

corpus="$build/fuzz/gguf/corpus"
mkdir -p "$corpus"
cp "$root"/test/gguf/malformed/*.gguf "$corpus"/ 2>/dev/null || true
cp "$root"/examples/models/*.gguf "$corpus"/ 2>/dev/null || true
# The fixtures are MBs; their first 64 KiB (header, metadata, tensor infos) are what the reader parses.
if [[ -d "$shared/fixtures" ]]; then
  for f in "$shared"/fixtures/*.gguf; do
    head -c 65536 "$f" > "$corpus/fixture-head-$(basename "$f")"
  done
fi
run_fuzzer gguf "$corpus" 65536

# Plan seeds: the demo model compiled for 1-3 devices by a normal build, when there is one.
pcorpus="$build/fuzz/plan/corpus"
mkdir -p "$pcorpus"
tpc="$root/build/bin/tpc"
if [[ -x "$tpc" ]]; then
  for d in 1 2 3; do
    "$tpc" compile "$root/examples/models/tiny-demo.gguf" --devices "$d" -o "$pcorpus/demo-d$d.plan" >/dev/null 2>&1 || true
  done
fi
printf 'TPCPLAN1' > "$pcorpus/magic-only"
run_fuzzer plan "$pcorpus" 262144

# Compile seeds: whole models (the mutator rewrites them, so they must be complete files); the shared
# fixtures are up to 23 MB, hence the length limit. Inputs are that large, so this run's finds go to a
# fresh directory (findings are kept as crash files and belong in test/fuzz/regressions/compile). Byte-level
# cross-over of two models is almost never a model, so it is off, and so is re-reading the corpus (libFuzzer
# hashes every file again, which for 20 MB seeds costs more than compiling).
cseeds="$build/fuzz/compile/seeds" ccorpus="$build/fuzz/compile/corpus"
rm -rf "$ccorpus"
mkdir -p "$cseeds" "$ccorpus"
cp "$root"/examples/models/*.gguf "$root"/test/import/Inputs/*.gguf "$cseeds"/ 2>/dev/null || true
if [[ -d "$shared/fixtures" ]]; then
  cp "$shared"/fixtures/*.gguf "$cseeds"/
fi
run_fuzzer compile "$ccorpus" 25000000 -cross_over=0 -reload=0 -timeout=60 -rss_limit_mb=4096 "$cseeds"
echo "fuzz.sh: no findings"
