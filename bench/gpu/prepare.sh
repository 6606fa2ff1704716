#!/usr/bin/env bash
# Prepares bench/gpu/run.sh's one call on a GPU machine, here, where it costs no GPU time. The GPU machine
# has nvcc, cmake and ninja but no MLIR, no libraries of ours and no network, so everything it runs is
# built here and carried in one archive, build/gpu/stage.tar.xz (the device tool's `carry`):
#   new/   `tpc` of this tree without the compiler (TPC_ENABLE_COMPILER=OFF, MPI off), the CUDA plugin
#          beside it, tpc-cuda-tests and tpc-cuda-fixture-plans
#   base/  the same `tpc` + plugin of git REF (--base REF): the "before" column, measured in the same call
#   ref/   the reference engine's CUDA llama-bench (--reference BIN, from bench/gpu/build-reference.sh); with
#          --reference-apart BIN it goes into an archive of its own instead, cut into parts of at most
#          REF_PART_MB MiB (default 40), build/gpu/ref.part.K-of-N, one carried per call (run.sh's `ref`
#          phase): the reference with every weight type's kernels is ~62 MB compressed, and a call carries
#          64 MiB with the ~6 MB tree, so it fits neither beside tpc's stage nor alone
#   plans/ `tpc compile` plans of the benchmark models (llama3-8b and qwen3-30b-a3b, Q4_K_M, synth seed 0,
#          1 and 2 devices): run.sh writes the same GGUFs there with `tpc synth` (same bytes)
#   plans/types.txt and its plans: the weight-type models ($TYPE_MODELS, "NAME:PRESET:TYPE:LAYERS" each;
#          cut to LAYERS layers so that five of them fit this disk and the GPU machine's minutes), which
#          run.sh's `types` phase writes there again with `tpc synth` and runs
#   fixtures/, fplans/  the quantized shared fixtures, and `tpc compile` plans of some of them (2 devices,
#          whole experts per device) for the CUDA fixture test's $TPC_CUDA_PLANS run
#   syslib/ the shared libraries of those binaries that a bare machine lacks (fmt, cpp-httplib, ...)
#
#   [FIXTURES="NAME ..."] bench/gpu/prepare.sh [--base REF] [--reference BIN | --reference-apart BIN] [--models DIR]
#
# Needs build/bin/tpc with the compiler (make build) and ../shared for the fixtures (skipped without it).
set -euo pipefail
cd "$(dirname "$0")/../.."
base="" reference="" apart="" models=build/gpu-models
while [ $# -gt 0 ]; do
  case $1 in
    --base) base=$2; shift 2 ;;
    --reference) reference=$2; shift 2 ;;
    --reference-apart) apart=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    *) echo "prepare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
tpc=build/bin/tpc
[ -x "$tpc" ] || { echo "prepare.sh: $tpc is missing: run make build first" >&2; exit 1; }
stage=build/gpu/stage
rm -rf "$stage" && mkdir -p "$stage"/{new/bin,new/lib,base/bin,base/lib,ref,plans,fixtures,fplans,syslib}

# A compiler-off build of a source tree into a build folder: tpc and its plugin (and the CUDA tests).
offBuild() { # SRC BUILD TARGETS...
  local src=$1 dir=$2
  shift 2
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPC_ENABLE_COMPILER=OFF -DTPC_ENABLE_MPI=OFF \
    -DTPC_ENABLE_CUDA=ON -DTPC_ENABLE_TESTS=ON >/dev/null
  cmake --build "$dir" --target "$@"
}
offBuild . build-gpu tpc tpc_cuda_plugin tpc-cuda-tests tpc-cuda-fixture-plans
cp build-gpu/bin/tpc build-gpu/bin/tpc-cuda-tests build-gpu/bin/tpc-cuda-fixture-plans "$stage/new/bin/"
cp build-gpu/lib/libtpc_cuda.so "$stage/new/lib/"
if [ -n "$base" ]; then
  rm -rf build-gpu-base/src
  mkdir -p build-gpu-base
  git worktree prune
  git worktree add --detach build-gpu-base/src "$base" >/dev/null
  offBuild build-gpu-base/src build-gpu-base/build tpc tpc_cuda_plugin
  cp build-gpu-base/build/bin/tpc "$stage/base/bin/"
  cp build-gpu-base/build/lib/libtpc_cuda.so "$stage/base/lib/"
  git -C build-gpu-base/src rev-parse --short HEAD >"$stage/base/REF"
fi
git describe --always --dirty >"$stage/new/REF"
if [ -n "$reference" ]; then
  cp "$reference" "$stage/ref/llama-bench"
fi
if [ -n "$apart" ]; then
  [ -x "$apart" ] || { echo "prepare.sh: --reference-apart $apart is not an executable" >&2; exit 2; }
  rm -rf build/gpu/ref && mkdir -p build/gpu/ref
  cp "$apart" build/gpu/ref/llama-bench
  tar -C build/gpu -cf - ref | xz -T0 -9 >build/gpu/ref.tar.xz
  rm -f build/gpu/ref.part.*
  split -b "${REF_PART_MB:-40}M" -d -a 1 build/gpu/ref.tar.xz build/gpu/ref.part.
  n=$(ls build/gpu/ref.part.? | wc -l)
  for f in build/gpu/ref.part.?; do mv "$f" "$f-of-$n"; done
  echo "carry apart, one per call, each with 'bash bench/gpu/run.sh ref', then the stage's call on the same" \
    "warm machine: $(cd build/gpu && ls ref.part.* | tr '\n' ' ')"
fi

# The benchmark models' plans (the GGUFs are written again on the GPU machine: same preset, type, seed).
mkdir -p "$models"
for m in llama3-8b qwen3-30b-a3b; do
  [ -f "$models/$m.gguf" ] || "$tpc" synth --preset "$m" --type Q4_K_M --seed 0 -o "$models/$m.gguf"
  for d in 1 2; do
    "$tpc" compile "$models/$m.gguf" --devices "$d" -o "$stage/plans/$m-d$d.plan" >/dev/null
  done
done

# The weight-type models: a cut llama3-8b per type, gpt-oss-20b with its MXFP4 experts.
typeModels=${TYPE_MODELS-llama3-8b-IQ4_XS:llama3-8b:IQ4_XS:8 llama3-8b-Q3_K:llama3-8b:Q3_K:8 llama3-8b-Q2_K:llama3-8b:Q2_K:8 llama3-8b-IQ2_XXS:llama3-8b:IQ2_XXS:8 llama3-8b-Q4_K_M:llama3-8b:Q4_K_M:8 gpt-oss-20b-MXFP4:gpt-oss-20b:MXFP4_MOE:6}
: >"$stage/plans/types.txt"
for spec in $typeModels; do
  IFS=: read -r name preset type layers <<<"$spec"
  [ -f "$models/$name.gguf" ] ||
    "$tpc" synth --preset "$preset" --type "$type" --layers "$layers" --seed 0 --no-progress -o "$models/$name.gguf"
  "$tpc" compile "$models/$name.gguf" --devices 1 -o "$stage/plans/$name-d1.plan" >/dev/null
  echo "$name $preset $type $layers" >>"$stage/plans/types.txt"
done

# Fixtures: the quantized ones ($FIXTURES; the F32 files are too large to carry with everything else) and
# `tpc compile` plans of them: max batch 512 (the hand-built plans have 64), and for the MoE ones 2 devices
# with whole experts per device (expert parallelism), which no hand-built plan has.
shared=${TPC_SHARED_DIR:-../shared}
fixtures=${FIXTURES:-tiny-llama-Q4_K_M tiny-llama-IQ4_XS tiny-llama-Q3_K_M tiny-llama-Q2_K tiny-qwen3moe-Q4_K_M tiny-qwen3moe-IQ4_NL tiny-qwen3moe-Q3_K_S tiny-gptoss tiny-glm4moe-Q4_K_M tiny-qwen35moe-Q4_K_M}
if [ -d "$shared/fixtures" ]; then
  for f in $fixtures; do
    cp "$shared/fixtures/$f".{gguf,logits.f32,ref.json} "$stage/fixtures/"
    "$tpc" compile "$shared/fixtures/$f.gguf" --devices 1 -o "$stage/fplans/$f-d1.plan" >/dev/null
    case $f in
      *qwen3moe*) "$tpc" compile "$shared/fixtures/$f.gguf" --devices 2 --moe-split expert \
        -o "$stage/fplans/$f-d2-ep.plan" >/dev/null ;;
      *) "$tpc" compile "$shared/fixtures/$f.gguf" --devices 2 -o "$stage/fplans/$f-d2.plan" >/dev/null ;;
    esac
  done
else
  echo "prepare.sh: no $shared/fixtures: the fixture tests will be skipped there" >&2
fi

# Shared libraries the binaries load that are neither the C/C++ runtime nor CUDA's (the GPU machine has
# those, and OpenSSL 3 and zlib): copied, so the binaries find them through LD_LIBRARY_PATH there
# (set for our binaries only: a system program must not load Debian's copies).
for b in "$stage"/new/bin/* "$stage"/new/lib/*.so "$stage"/base/bin/* "$stage"/ref/*; do
  [ -f "$b" ] || continue
  ldd "$b" 2>/dev/null | awk '/=> \// {print $3}' | while read -r lib; do
    case $(basename "$lib") in
      libc.so*|libm.so*|libstdc++*|libgcc_s*|libpthread*|libdl.so*|librt.so*|ld-linux*) ;;
      libcuda.so*|libcudart*|libcublas*|libnccl*) ;;
      libssl.so.3|libcrypto.so.3|libz.so.1) ;; # every distribution of the GPU images has them
      *) cp -n "$lib" "$stage/syslib/" ;;
    esac
  done
done

tar -C build/gpu -cf - stage | xz -T0 -9 >build/gpu/stage.tar.xz
du -sh "$stage"/* build/gpu/stage.tar.xz
echo "carry: build/gpu/stage.tar.xz ($(du -m build/gpu/stage.tar.xz | cut -f1) MiB; the device call's whole tree must stay under 64 MiB)"
