#!/usr/bin/env bash
# The one call on a lent GPU machine (H100/H200), run from the repository root with build/gpu/stage.tar.xz
# carried (bench/gpu/prepare.sh made it here):
#   bash bench/gpu/run.sh [PHASE...]        phases: tests types quick bench serve ncu ref (default: tests bench serve)
# tests: tpc-cuda-tests (every kernel against the CPU backend and exact references, the fixtures through
#        the hand-built plans and through `tpc compile` plans, incl. several sequences and expert
#        parallelism), GemvBandwidth excepted;
# bench: llama3-8b and qwen3-30b-a3b Q4_K_M (`tpc synth --seed 0`, written here: the plans' bytes) through
#        the reference engine's llama-bench (pp512, tg128, its defaults: all layers on the GPU, flash
#        attention, fused MoE) and `tpc run --bench` of this tree ("new") at 1 and 2 devices and of the base
#        ref ("base") at 1, with --parallel 1,2,4,8 at 1 device;
# types: the weight-type models of plans/types.txt (cut llama3-8b per type, gpt-oss-20b MXFP4 experts):
#        pp512 / tg128 of `tpc run --bench` at 1 device, and of the reference's llama-bench where carried;
# serve: `tpc serve --backend cuda -np 4` on llama3-8b, 1 and 4 streaming clients (bench/serve);
# quick: a first look (one repetition): llama3-8b batched decode, qwen3-30b-a3b at 2 devices;
# ncu:   Nsight Compute's speed-of-light of the biggest kernels of a qwen3-30b-a3b prefill and decode;
# ref:   only keeps the carried parts of the reference's archive (prepare.sh --reference-apart:
#        build/gpu/ref.part.K-of-N, one per call) in /tmp/refparts and, once all N are there, unpacks
#        /tmp/ref/llama-bench, then stops. The machine keeps /tmp while it stays warm, so the next call (the
#        stage's, within the idle release time) finds it; the phases use the stage's ref/ first.
# Everything (logs, JSON) lands in one archive, $OUT/gpu-run.tgz (the device tool brings back 8 files at
# most); the last lines printed are the tables (bench/gpu/summarize.py).
set -uo pipefail
cd "$(dirname "$0")/../.."
FINAL=${OUT:-/tmp/gpu-out}
OUT=$FINAL/gpu-run
mkdir -p "$OUT"
phases=${*:-tests bench serve}
t0=$(date +%s)
mark() { echo "== $1 at +$(($(date +%s) - t0)) s" | tee -a "$OUT/phases.txt"; }
# The archive is rewritten after every phase: a call cut off at its limit still brings back the phases done.
pack() { tar -C "$FINAL" -czf "$FINAL/gpu-run.tgz.part" gpu-run && mv "$FINAL/gpu-run.tgz.part" "$FINAL/gpu-run.tgz"; }
if [[ " $phases " == *" ref "* ]]; then
  mkdir -p /tmp/refparts
  ls build/gpu/ref.part.*-of-* >/dev/null 2>&1 || { echo "ref: no build/gpu/ref.part.K-of-N carried" >&2; exit 1; }
  cp build/gpu/ref.part.*-of-* /tmp/refparts/
  parts=(/tmp/refparts/ref.part.*-of-*)
  want=${parts[0]##*-of-}
  if [ ${#parts[@]} -lt "$want" ]; then
    echo "ref: ${#parts[@]} of $want parts here; carry the next one"
    exit 0
  fi
  # Parts in order (single-digit K: split -a 1), then the archive whole.
  cat $(printf '%s
' "${parts[@]}" | sort) | tar -C /tmp -xJf - || { echo "ref: the parts do not unpack" >&2; exit 1; }
  /tmp/ref/llama-bench --help >/dev/null 2>&1
  echo "ref: /tmp/ref/llama-bench unpacked from $want parts (--help: rc $?)"
  exit 0
fi
S=/tmp/stage
[ -d $S/new ] || tar -C /tmp -xJf build/gpu/stage.tar.xz || { echo "no build/gpu/stage.tar.xz: carry it" >&2; exit 1; }
# The reference's llama-bench: the stage's, else the one a `ref` call unpacked on this warm machine.
REF=$S/ref/llama-bench
[ -x $REF ] || REF=/tmp/ref/llama-bench
L=$S/syslib:${LD_LIBRARY_PATH:-} # our binaries' libraries (fmt, cpp-httplib): for them only
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "new $(cat $S/new/REF) base $(cat $S/base/REF 2>/dev/null)" | tee -a "$OUT/gpu.txt"
M=/tmp/models
mkdir -p $M
synth() { # the benchmark models, written while the tests run (CPU and disk only)
  for m in qwen3-30b-a3b llama3-8b; do
    [ -f $M/$m.gguf ] || LD_LIBRARY_PATH=$L $S/new/bin/tpc synth --preset $m --type Q4_K_M --seed 0 -o $M/$m.gguf.part >/dev/null &&
      mv $M/$m.gguf.part $M/$m.gguf
  done
}
typeSynth() { # the weight-type models, 4 at a time
  [ -f $S/plans/types.txt ] || return 0
  while read -r name preset type layers; do
    [ -f $M/$name.gguf ] && continue
    (LD_LIBRARY_PATH=$L $S/new/bin/tpc synth --preset $preset --type $type --layers $layers --seed 0 --no-progress \
      -o $M/$name.gguf.part >/dev/null && mv $M/$name.gguf.part $M/$name.gguf) &
    while [ "$(jobs -rp | wc -l)" -ge 4 ]; do sleep 0.2; done
  done <$S/plans/types.txt
  wait
}
case " $phases " in *" types "*) typeSynth >"$OUT/type-synth.log" 2>&1 & typePid=$! ;; *) typePid= ;; esac
case " $phases " in *" bench "* | *" quick "* | *" serve "* | *" ncu "*) synth >"$OUT/synth.log" 2>&1 & synthPid=$! ;; *) synthPid= ;; esac

if [[ " $phases " == *" tests "* ]]; then
  mark tests
  export TPC_SHARED_DIR=$S
  # The hand-built plans of the carried fixtures (max batch 64), then the `tpc compile` plans (fplans/).
  mkdir -p /tmp/fixture-plans
  LD_LIBRARY_PATH=$L $S/new/bin/tpc-cuda-fixture-plans /tmp/fixture-plans >"$OUT/fixture-plans.log" 2>&1
  LD_LIBRARY_PATH=$L TPC_CUDA_PLANS=/tmp/fixture-plans timeout 300 $S/new/bin/tpc-cuda-tests --gtest_filter=-CudaKernels.GemvBandwidth \
    >"$OUT/tests.log" 2>&1
  echo "tests: rc $? ($(grep -c '^\[       OK \]' "$OUT/tests.log") ok, $(grep -c '^\[  FAILED  \]' "$OUT/tests.log") failed lines)"
  LD_LIBRARY_PATH=$L TPC_CUDA_PLANS=$S/fplans timeout 120 $S/new/bin/tpc-cuda-tests --gtest_filter='CudaFixture.*' \
    >"$OUT/tests-compiled-plans.log" 2>&1
  echo "compiled fixture plans: rc $?"
  grep -E '^\[  FAILED  \]|Failure|error' "$OUT/tests.log" "$OUT/tests-compiled-plans.log" | head -30
  grep -E '^\[ fixture' "$OUT/tests.log" "$OUT/tests-compiled-plans.log" | sed 's/^.*\[ fixture  \] //' | cut -c1-200
  unset TPC_SHARED_DIR
  pack
fi
[ -n "$synthPid" ] && wait $synthPid

run() { # NAME TIMEOUT COMMAND...: output into $OUT/NAME (JSON where the tool writes it)
  local name=$1 limit=$2
  shift 2
  LD_LIBRARY_PATH=$L timeout "$limit" "$@" >"$OUT/$name" 2>"$OUT/$name.err"
  echo "$name: rc $?, $(($(date +%s) - t0)) s"
}
tpcBench() { # WHICH MODEL DEVICES [extra flags]
  local which=$1 m=$2 d=$3
  shift 3
  run "$which-$m-d$d.json" 240 $S/$which/bin/tpc run $S/plans/$m-d$d.plan --gguf $M/$m.gguf --backend cuda \
    --bench -pp 512 -tg 128 -r 3 -c 1024 --json "$@"
}
if [[ " $phases " == *" types "* ]]; then
  mark types
  wait $typePid
  cp $S/plans/types.txt "$OUT/"
  while read -r name preset type layers; do
    [ -f $M/$name.gguf ] || { echo "types: $name was not written (type-synth.log)"; continue; }
    tpcBench new $name 1 </dev/null
    [ -x $REF ] && run "ref-$name.json" 240 $REF -m $M/$name.gguf -p 512 -n 128 -r 3 -o json </dev/null
    rm -f $M/$name.gguf # the disk holds the benchmark models too
  done <$S/plans/types.txt
  pack
fi
if [[ " $phases " == *" bench "* ]]; then
  mark bench
  for m in qwen3-30b-a3b llama3-8b; do
    par=(--parallel 1,2,4,8)
    run "ref-$m.json" 240 $REF -m $M/$m.gguf -p 512 -n 128 -r 3 -o json
    tpcBench new $m 1 "${par[@]}"
    tpcBench new $m 2
    [ -x $S/base/bin/tpc ] && tpcBench base $m 1 "${par[@]}"
  done
  python3 bench/gpu/summarize.py "$OUT" >"$OUT/summary.md"
  pack
fi
if [[ " $phases " == *" quick "* ]]; then # a first look: batched decode on llama3-8b, 2 devices of qwen3-30b-a3b
  mark quick
  run new-llama3-8b-d1.json 120 $S/new/bin/tpc run $S/plans/llama3-8b-d1.plan --gguf $M/llama3-8b.gguf \
    --backend cuda --bench -pp 512 -tg 32 -r 1 -c 1024 --json --parallel 1,2,4,8
  run new-qwen3-30b-a3b-d2.json 120 $S/new/bin/tpc run $S/plans/qwen3-30b-a3b-d2.plan \
    --gguf $M/qwen3-30b-a3b.gguf --backend cuda --bench -pp 512 -tg 32 -r 1 -c 1024 --json
fi

if [[ " $phases " == *" serve "* ]]; then
  mark serve
  LD_LIBRARY_PATH=$L $S/new/bin/tpc serve $S/plans/llama3-8b-d1.plan --gguf $M/llama3-8b.gguf --backend cuda -np 4 --port 8181 \
    -c 4096 >"$OUT/serve-server.log" 2>&1 &
  server=$!
  for _ in $(seq 120); do grep -q "listening" "$OUT/serve-server.log" && break; sleep 1; done
  timeout 90 python3 bench/serve/serve_bench.py --url http://127.0.0.1:8181 --pid $server --clients 1,4 \
    --requests 2 --max-tokens 64 >"$OUT/serve.txt" 2>&1
  echo "serve: rc $?"
  kill $server 2>/dev/null
  wait $server 2>/dev/null
  pack
fi

if [[ " $phases " == *" ncu "* ]]; then
  mark ncu
  # The first layers of a qwen3-30b-a3b prefill (tile GEMMs, tensor-core attention), then a batched decode
  # step of 8 llama3-8b sequences (the batched GEMVs), without changing the clocks.
  LD_LIBRARY_PATH=$L timeout 80 ncu --clock-control none --section SpeedOfLight \
    --kernel-name regex:'tileGemm|flashPrefill' --launch-count 8 \
    $S/new/bin/tpc run $S/plans/qwen3-30b-a3b-d1.plan --gguf $M/qwen3-30b-a3b.gguf --backend cuda --bench \
    -pp 512 -tg 0 -r 1 -c 1024 >"$OUT/ncu-prefill.txt" 2>&1
  echo "ncu prefill: rc $?"
  LD_LIBRARY_PATH=$L timeout 80 ncu --clock-control none --section SpeedOfLight \
    --kernel-name regex:'gemvBatch' --launch-count 8 \
    $S/new/bin/tpc run $S/plans/llama3-8b-d1.plan --gguf $M/llama3-8b.gguf --backend cuda --bench \
    -pp 0 -tg 4 -r 1 -c 1024 --parallel 8 >"$OUT/ncu-batched.txt" 2>&1
  echo "ncu batched: rc $?"
  grep -E "^  [a-zA-Z_].*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput" \
    "$OUT/ncu-prefill.txt" "$OUT/ncu-batched.txt" | cut -c1-160 | head -80
fi
mark done
python3 bench/gpu/summarize.py "$OUT" | tee "$OUT/summary.md"
pack && rm -rf "$OUT"
