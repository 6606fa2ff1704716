#!/usr/bin/env bash
# Builds the reference engine's CUDA llama-bench (ik_llama.cpp) for Hopper on this machine, which has nvcc
# but no GPU, so that no GPU minute is spent compiling it: release, sm_90 only, static ggml, stripped, only
# the llama-bench target. Takes ~1.5 h on 2 cores (228 CUDA files); ccache makes a rebuild cheap.
#
#   bench/gpu/build-reference.sh SRC BUILD      # SRC: an ik_llama.cpp work tree, BUILD: its build folder
#
# Get SRC with the project's fetch tool (github:ikawrakow/ik_llama.cpp) and
#   git --git-dir=REPO --work-tree=SRC restore --source=HEAD -- ':/'
# Prints the path of the stripped binary. Its CPU code is built for AVX2 (GGML_NATIVE off): the GPU
# machine's processor is not this one.
#
# The quantized matmul kernels are one file per weight type (mmq, mmvq: 120 of the 228 CUDA files, the
# slowest ones), and the flash-attention kernels one file per KV-cache type pair. KEEP_TYPES (default:
# q8_0 and the K-quants, the types of the Q4_K_M benchmark models) keeps the matmul files of those types
# and, for attention, the f16-cache kernels (its defaults: f16 KV, flash attention on; the WMMA kernels
# serve pre-Ampere GPUs and unequal K/V head sizes), renaming the others' files out of the build in SRC (a
# scratch work tree). The functions of the pruned files become stubs that abort with their name, so **a
# model holding a pruned weight type, or a quantized KV cache, stops this llama-bench**: use it on files of
# the kept types with an f16 cache only. The point is size as much as time: the whole fatbin is ~45 MB compressed,
# more than the GPU machine's 64 MiB carry leaves beside tpc. KEEP_TYPES=all keeps everything.
set -euo pipefail
src=${1:?usage: build-reference.sh SRC BUILD}
build=${2:?usage: build-reference.sh SRC BUILD}
keep=${KEEP_TYPES:-q8_0,q4_k,q5_k,q6_k}
[ -d "$src/ggml/src/ggml-cuda/template-instances" ] || { echo "build-reference.sh: $src is not an ik_llama.cpp tree" >&2; exit 1; }
command -v nvcc >/dev/null || { echo "build-reference.sh: nvcc is not on PATH" >&2; exit 1; }
if [ "$keep" != all ]; then
  for f in "$src"/ggml/src/ggml-cuda/template-instances/{mmq,mmvq}-instance-*.cu; do
    [ -e "$f" ] || continue
    t=$(basename "$f" .cu | sed 's/^mmv*q-instance-//; s/_id$//' | tr 'A-Z' 'a-z')
    case ",$keep," in *",$t,"*) ;; *) mv "$f" "$f.pruned" ;; esac
  done
  for f in "$src"/ggml/src/ggml-cuda/template-instances/fattn-{vec,wmma}-*.cu; do
    [ -e "$f" ] || continue
    case $(basename "$f") in fattn-vec-*-f16-f16.cu) ;; *) mv "$f" "$f.pruned" ;; esac
  done
fi
mkdir -p "$build"
configure() { # LINKER_FLAGS
  # CMake 3.25 does not know nvcc 13's C++20 flag; the reference's CUDA target asks for C++20.
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_IQK_FA_ALL_QUANTS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DGGML_BUILD_TESTS=OFF -DCMAKE_EXE_LINKER_FLAGS="$1" \
    -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 >/dev/null
}
configure "-Wl,--no-demangle"
if ! cmake --build "$build" --target llama-bench -j "$(nproc)" >"$build/link.log" 2>&1; then
  # The pruned files' functions are still named by the dispatch code: each becomes a stub that aborts
  # (a model of a pruned type stops with a message instead of running something else).
  syms=$(grep -o "undefined reference to \`[^']*'" "$build/link.log" | sed "s/undefined reference to \`//; s/'$//" | sort -u)
  [ -n "$syms" ] || { cat "$build/link.log" >&2; exit 1; }
  {
    echo '#include <stdio.h>'
    echo '#include <stdlib.h>'
    i=0
    for sym in $syms; do
      echo "void pruned_$i(void) __asm__(\"$sym\");"
      echo "void pruned_$i(void) { fputs(\"llama-bench: $sym was pruned by build-reference.sh\\n\", stderr); abort(); }"
      i=$((i + 1))
    done
  } >"$build/pruned.c"
  cc -O1 -c "$build/pruned.c" -o "$build/pruned.o"
  configure "$build/pruned.o"
  cmake --build "$build" --target llama-bench -j "$(nproc)"
fi
strip -o "$build/llama-bench.stripped" "$build/bin/llama-bench"
echo "$build/llama-bench.stripped"
