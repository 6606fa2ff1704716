//===- CudaPluginLoader.h - finding and opening libtpc_cuda.so ----*- C++ -*-===//
//
// The CUDA backend lives in a module (runtime/cuda/CudaPlugin.h) that is opened with dlopen the first time
// something asks for it, so that a CPU run of a CUDA build never maps cudart, cuBLAS or NCCL (~150 MiB
// resident when the loader relocates them at start, in every MPI rank).
//
// When it is opened: `--backend cuda` (Backend::usable or open of "cuda"), or `--backend auto` on a
// machine where an NVIDIA driver may be present (nvidiaDriverPresent: /dev/nvidiactl, /dev/nvidia0..
// or /proc/driver/nvidia exist); the plugin then counts the GPUs. A machine without them never opens it.
//
// Where it is found (cudaPluginPath): $TPC_CUDA_PLUGIN when set (a path to the .so); otherwise
// libtpc_cuda.so next to the executable, then in ../lib from it (build/bin + build/lib, or an install's
// bin + lib). A missing file, a library that is not the plugin, or a plugin of another build is a one-line
// error naming the path, dlerror() or the two builds, and what to do.
//
// Usage:
//   Expected<const cuda::CudaPluginApi *> api = loadCudaPlugin();   // opened once per process
//   if (!api) fail(api.message());
//   int gpus = (*api)->deviceCount();
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_BACKENDS_CUDAPLUGINLOADER_H
#define TPC_RUNTIME_BACKENDS_CUDAPLUGINLOADER_H

#include "runtime/cuda/CudaPlugin.h"

#include <string>
#include <vector>

namespace tpc::rt {

/// The plugin's table, opening and checking the module on the first call (thread-safe; the outcome, error
/// included, is kept for the process). In a build without CUDA, an error saying so.
Expected<const cuda::CudaPluginApi *> loadCudaPlugin();

/// The path loadCudaPlugin opens (see the file comment); `candidates` gets every path that was considered.
std::string cudaPluginPath(std::vector<std::string> *candidates = nullptr);

/// Whether an NVIDIA driver may be present: its device nodes or /proc/driver/nvidia exist. Cheap, and
/// loads nothing: `auto` opens the plugin only when this holds.
bool nvidiaDriverPresent();

} // namespace tpc::rt

#endif // TPC_RUNTIME_BACKENDS_CUDAPLUGINLOADER_H
