//===- CudaSession.h - run a device plan on NVIDIA GPUs -----------*- C++ -*-===//
//
// The CUDA twin of tpc::rt::Session (runtime/exec/Executor.h): same open/evaluate surface and the same
// per-op semantics, every step on a GPU. Logical devices of the plan map to GPUs round-robin over
// CudaOptions::gpus (default: every visible GPU). Per logical device: one cudaMalloc per arena (weights,
// activations, KV, scratch + I/O), one stream, one cuBLAS handle. Weights are uploaded slice by slice
// from the mmapped GGUF through pinned staging buffers (progress on stderr when asked).
//
// Collectives: logical devices on distinct GPUs use NCCL (one communicator per session, loaded with
// dlopen on first use, so single-GPU machines need no libnccl); several logical devices on one GPU use
// the loopback all-reduce kernel. Either way the order against compute is kept with events, never a host
// sync. AllGather and ReduceScatter are all-reduces of zero-padded or full buffers (exact, since the
// padding adds zeros). Mixing (some GPUs hosting several logical devices) is refused at open.
//
// Decode calls (one token) are captured once as a CUDA graph and replayed when every logical device sits
// on the same GPU (the loopback collective is an ordinary kernel inside the graph); with NCCL over
// several GPUs each step is launched directly.
//
// Usage:
//   auto s = tpc::rt::cuda::CudaSession::open(std::move(plan), sessionOptions, cudaOptions);
//   if (!s) fail(s.message());
//   auto logits = (*s)->evaluate(tokens, positions);
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_CUDASESSION_H
#define TPC_RUNTIME_CUDA_CUDASESSION_H

#include "runtime/exec/Executor.h"

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

/// A plan loaded on GPUs. One caller at a time.
class CudaSession {
public:
  /// Opens `plan` (checks as Session::open, plus GPU capacity and weight types); the error is one line.
  static Expected<std::unique_ptr<CudaSession>> open(Plan plan, const SessionOptions &opts,
                                                     const CudaOptions &cuda = {});
  ~CudaSession();

  /// As Session::evaluate.
  Expected<std::vector<float>> evaluate(const std::vector<int32_t> &tokens,
                                        const std::vector<int32_t> &positions);

  const Plan &plan() const;
  int64_t ctxSize() const;
  int64_t nVocab() const;
  /// Bytes allocated per logical device (weights + activations + KV + scratch).
  std::vector<uint64_t> deviceBytes() const;
  /// GPU ordinal of each logical device.
  std::vector<int> gpuOf() const;
  /// Device-to-device copy bandwidth of GPU `gpu` in bytes per second, read + write counted (the decode
  /// roofline's denominator): the best of 5 copies of up to 512 MiB, timed with events. 0 when it cannot be
  /// measured (no memory to spare, a CUDA error).
  double copyBandwidth(int gpu) const;
  /// True when decode steps replay a captured CUDA graph.
  bool usesGraphs() const;
  /// As Session::tensorData (copied back from the GPU).
  std::vector<float> tensorData(size_t device, int32_t id, int64_t tokens) const;
  /// Per-step timing of device 0 (synchronises after each step while on, so it slows runs down).
  void setProfiling(bool on);
  std::vector<StepProfile> profile() const;

private:
  CudaSession();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_CUDASESSION_H
