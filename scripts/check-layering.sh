#!/usr/bin/env bash
# scripts/check-layering.sh [ROOT] - the include rules of docs/architecture.md ("Layout"), checked on the
# sources. Prints each offending include as FILE:LINE: INCLUDE (rule) and exits 1; prints a summary and exits 0
# when every rule holds. Run by `make check` (ctest test `layering`).
#
# Rules (a folder may include only what it depends on):
#   runtime/            nothing from MLIR/LLVM, compiler/, dialects/, passes/, server/, tools/
#   runtime/exec        no backend (runtime/cpu, runtime/cuda)
#   runtime/comm        no backend
#   runtime/plan, runtime/ggml, runtime/support   nothing above them (exec, comm, cpu, cuda, tokenizer, sampler)
#   runtime/cpu         never runtime/cuda;  runtime/cuda never runtime/cpu
#   passes/             never compiler/
#   compiler/           no backend (runtime/cpu, runtime/cuda, runtime/exec, runtime/comm)
#   dialects/           never passes/ or compiler/
#   tools/, server/, runtime/backends   nothing from runtime/cuda but CudaPlugin.h: the CUDA backend is a
#                       plugin opened with dlopen (runtime/backends/CudaPluginLoader.h), never linked
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2

fail=0
checked=0
# rule DIR REGEX WHY [EXCEPT]: every include line under DIR matching REGEX (and not EXCEPT) is a violation.
rule() {
  local dir=$1 re=$2 why=$3 except=${4:-} hits
  [ -d "$dir" ] || return 0
  checked=$((checked + 1))
  hits=$(grep -rnE --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' --include='*.inc' \
    "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($re)" "$dir" 2>/dev/null)
  if [ -n "$except" ] && [ -n "$hits" ]; then
    hits=$(grep -vE "include[[:space:]]*[<\"]($except)[>\"]" <<<"$hits")
  fi
  if [ -n "$hits" ]; then
    while IFS= read -r h; do echo "$h  ($why)"; done <<<"$hits"
    fail=1
  fi
}

rule runtime 'mlir/|llvm/|compiler/|dialects/|passes/|server/|tools/' "the runtime includes no MLIR/LLVM or compiler code"
rule runtime/exec 'runtime/(cpu|cuda)/' "the executor is backend-neutral"
rule runtime/comm 'runtime/(cpu|cuda)/' "communicators include no backend"
for low in runtime/plan runtime/ggml runtime/support; do
  rule "$low" 'runtime/(exec|comm|cpu|cuda|tokenizer|sampler)/' "$low sits below the executor and the backends"
done
rule runtime/cpu 'runtime/cuda/' "the CPU and CUDA backends never include each other"
rule runtime/cuda 'runtime/cpu/' "the CPU and CUDA backends never include each other"
rule passes 'compiler/' "passes never depend on the compiler driver or emitter"
rule compiler 'runtime/(cpu|cuda|exec|comm)/' "the compiler includes no backend"
rule dialects 'passes/|compiler/' "the dialect depends on MLIR only"
for prog in tools server runtime/backends; do
  rule "$prog" 'runtime/cuda/' "the CUDA backend is a plugin: only its ABI header, runtime/cuda/CudaPlugin.h" \
    'runtime/cuda/CudaPlugin\.h'
done

if [ $fail -ne 0 ]; then
  echo "check-layering: the includes above break the layering rules (docs/architecture.md, Layout)" >&2
  exit 1
fi
echo "check-layering: $checked rules hold"
