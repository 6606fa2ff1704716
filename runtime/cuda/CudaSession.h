//===- CudaSession.h - run a device plan on NVIDIA GPUs -----------*- C++ -*-===//
//
// The CUDA backend's tpc::rt::Session (runtime/exec/Session.h): the same evaluate surface and per-op
// semantics as the CPU backend, every step on a GPU. Programs open it through the backend registry
// (CudaBackend.h, "cuda"); tests that need CudaOptions open it with openCudaSession. Logical devices of
// the plan map to GPUs round-robin over CudaOptions::gpus (default: every visible GPU). Per logical
// device: one cudaMalloc per arena (weights, activations, KV, scratch + I/O), one stream, one cuBLAS
// handle. Weights are uploaded slice by slice from the mmapped GGUF through pinned staging buffers
// (progress on stderr when asked).
//
// Collectives go through exec::CollectiveRunner (the compositions of every backend) on a stream-ordered
// communicator (Communicators.h): logical devices on distinct GPUs use NCCL (loaded with dlopen on first
// use, so single-GPU machines need no libnccl); several logical devices on one GPU use the loopback
// all-reduce kernel. Mixing (some GPUs hosting several logical devices) is refused at open. A session runs
// every device of its plan (a subset of SessionOptions::devices is refused for now).
//
// Decode-sized calls (up to 8 tokens: one-token decode, batched decode steps of several sequences) are
// captured once per shape as CUDA graphs and replayed when every logical device sits on the same GPU
// (the loopback collective is an ordinary kernel inside the graph); with NCCL over several GPUs each step
// is launched directly.
//
// Usage:
//   auto s = builtinBackends().open("cuda", std::move(plan), sessionOptions);   // runtime/backends
//   auto t = cuda::openCudaSession(std::move(plan), sessionOptions, cudaOptions, cpuBackend);  // tests
//   if (!s) fail(s.message());
//   auto logits = (*s)->evaluate(tokens, positions);
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_CUDASESSION_H
#define TPC_RUNTIME_CUDA_CUDASESSION_H

#include "runtime/exec/Backend.h"

#include <memory>
#include <string>
#include <vector>

namespace tpc::rt::cuda {

/// CUDA-specific options.
struct CudaOptions {
  std::vector<int> gpus;     ///< CUDA ordinals to use (empty: all visible); logical device d -> gpus[d % n]
  bool graphs = true;        ///< capture decode steps as CUDA graphs where possible
  bool progress = false;     ///< weight upload progress bar on stderr
  int64_t cublasMinRows = 9; ///< token rows from which matmuls use cuBLAS instead of the GEMV kernels
  /// Keep an f16 copy of every matmul weight for the cuBLAS path when the GPU has room (one more
  /// allocation per device), instead of dequantizing weight tiles on every prefill call.
  bool f16Cache = true;
  /// Fuse where one kernel does the same work as two steps: residual add + rms_norm, and rms_norm / glu
  /// writing the quantized activations of the integer decode GEMV that reads them next.
  bool fuse = true;
};

/// Number of CUDA devices visible to this process (0 when there is no driver or GPU).
int cudaDeviceCount();
/// "NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90" for ordinal `gpu`, or the error.
std::string cudaDeviceName(int gpu);

/// Opens `plan` on GPUs: exec::prepareOpen's checks, then what only the GPU kernels refuse (weight types,
/// head dims above 256, more than 8 dims), GPU capacity, allocation, weights, the communicator. Host-placed
/// steps run on the HostStepRunner that `hostCpu` (the CPU Backend object) hands out here. The error is one
/// line.
Expected<std::unique_ptr<Session>> openCudaSession(Plan plan, const SessionOptions &opts,
                                                   const CudaOptions &cuda, const Backend &hostCpu);

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_CUDASESSION_H
