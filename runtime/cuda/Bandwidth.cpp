//===- Bandwidth.cpp - copy and read bandwidth of a GPU ---------------------===//
//
// The decode roofline's denominator (`tpc run --bench`) is the read bandwidth (ReadProbe.cu); the copy
// figure printed beside it is the best of 5 timed device-to-device copies
// (after one warm-up) of up to 512 MiB, large enough to stream past the L2, read + write counted. Uses no
// session state; any CUDA failure gives 0 and is cleared so that it cannot surface as a later step's error.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/ReadProbe.cuh"
#include "runtime/cuda/SessionImpl.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace tpc::rt::cuda {

double CudaSession::copyBandwidth(int gpu) const {
  if (cudaSetDevice(gpu) != cudaSuccess)
    return 0;
  size_t freeBytes = 0, totalBytes = 0;
  if (cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess)
    return 0;
  // Two buffers of a quarter of what is free at most: large enough to stream past the 50 MiB L2.
  const size_t bytes = std::min<size_t>(size_t(512) << 20, freeBytes / 4) / 256 * 256;
  if (bytes < (size_t(64) << 20))
    return 0;
  void *a = nullptr, *b = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  double best = 0;
  if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess &&
      cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess &&
      cudaMemset(a, 1, bytes) == cudaSuccess) {
    for (int r = 0; r < 6; ++r) { // the first copy warms up
      float ms = 0;
      if (cudaEventRecord(start) != cudaSuccess ||
          cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice) != cudaSuccess ||
          cudaEventRecord(stop) != cudaSuccess || cudaEventSynchronize(stop) != cudaSuccess ||
          cudaEventElapsedTime(&ms, start, stop) != cudaSuccess)
        break;
      if (r > 0 && ms > 0)
        best = std::max(best, 2.0 * double(bytes) / (ms * 1e-3));
    }
  }
  cudaGetLastError(); // a failed allocation above must not surface as a later step's error
  if (start)
    cudaEventDestroy(start);
  if (stop)
    cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  return best;
}

double CudaSession::readBandwidth(int gpu) const { return deviceReadBandwidth(gpu); }

} // namespace tpc::rt::cuda
