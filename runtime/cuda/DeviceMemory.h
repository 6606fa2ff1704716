//===- DeviceMemory.h - RAII owners of GPU and pinned host memory -*- C++ -*-===//
//
// Internal to runtime/cuda: one cudaMalloc (freed on its GPU) and one pinned host allocation, non-copyable,
// and the 256-byte alignment every arena and scratch part starts at (the K-quant kernels use 16-byte
// loads). The session's arenas and the communicators' staging buffers are made of these.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_DEVICEMEMORY_H
#define TPC_RUNTIME_CUDA_DEVICEMEMORY_H

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace tpc::rt::cuda {

/// Every arena and scratch part starts 256-byte aligned (the K-quant kernels use 16-byte loads).
constexpr uint64_t kAlign = 256;

inline uint64_t alignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

/// One cudaMalloc, freed on its GPU.
struct GpuAlloc {
  uint8_t *p = nullptr;
  uint64_t size = 0;
  int gpu = 0;
  GpuAlloc() = default;
  GpuAlloc(const GpuAlloc &) = delete;
  GpuAlloc &operator=(const GpuAlloc &) = delete;
  GpuAlloc(GpuAlloc &&o) noexcept : p(o.p), size(o.size), gpu(o.gpu) { o.p = nullptr; }
  ~GpuAlloc() {
    if (p) {
      cudaSetDevice(gpu);
      cudaFree(p);
    }
  }
  /// Allocates `bytes` (at least kAlign) on GPU `g`; the caller checks the result.
  cudaError_t allocate(int g, uint64_t bytes) {
    gpu = g;
    size = bytes;
    void *q = nullptr;
    cudaError_t e = cudaSetDevice(g);
    if (e == cudaSuccess)
      e = cudaMalloc(&q, std::max<uint64_t>(bytes, kAlign));
    p = static_cast<uint8_t *>(q);
    return e;
  }
};

/// Pinned host memory.
struct HostAlloc {
  void *p = nullptr;
  HostAlloc() = default;
  HostAlloc(const HostAlloc &) = delete;
  HostAlloc &operator=(const HostAlloc &) = delete;
  HostAlloc(HostAlloc &&o) noexcept : p(o.p) { o.p = nullptr; }
  ~HostAlloc() {
    if (p)
      cudaFreeHost(p);
  }
};

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_DEVICEMEMORY_H
