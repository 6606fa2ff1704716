//===- Launch.cuh - kernel launches with programmatic dependent launch -*- CUDA -*-===//
//
// Decode is hundreds of kernels of a few microseconds per token, and each kernel's launch and ramp-up
// cost as much as its work. Every kernel of this backend is therefore launched through launchKernel(),
// with programmatic stream serialization (Hopper and newer): the next kernel of a stream is scheduled
// once every block of the running one has started, runs what does not depend on it (the decode GEMV
// issues its first weight loads: weights never change), then waits in pdlWait() until the previous
// kernel has finished and its writes are visible. So every kernel must call pdlEnter() (or pdlTrigger()
// and pdlWait()) before it reads or writes anything another kernel touches. Without the attribute (older
// GPUs, TPC_CUDA_NO_PDL=1 for A/B runs) the calls are no-ops and launches are ordinary.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_LAUNCH_CUH
#define TPC_RUNTIME_CUDA_LAUNCH_CUH

#include "runtime/cuda/CudaCheck.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <utility>

namespace tpc::rt::cuda {

/// Lets the stream's next kernel be scheduled (it still waits for this one in pdlWait()).
__device__ __forceinline__ void pdlTrigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
/// Waits until the kernels this one depends on have finished and their writes are visible.
__device__ __forceinline__ void pdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
/// The first statement of a kernel that has nothing to do before its inputs are ready.
__device__ __forceinline__ void pdlEnter() {
  pdlTrigger();
  pdlWait();
}

/// Programmatic dependent launch is used: compute capability 9.0 or newer, not turned off by
/// TPC_CUDA_NO_PDL=1.
inline bool pdlEnabled() {
  static const bool on = [] {
    const char *env = std::getenv("TPC_CUDA_NO_PDL");
    if (env && std::atoi(env) > 0)
      return false;
    int dev = 0, major = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9;
  }();
  return on;
}

/// kernel<<<grid, block, smem, s>>>(args...), with programmatic stream serialization where enabled.
template <typename... P, typename... A>
void launchKernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A &&...args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = pdlEnabled() ? 1 : 0;
  TPC_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...));
}

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_LAUNCH_CUH
