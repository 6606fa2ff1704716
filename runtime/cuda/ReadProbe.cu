//===- ReadProbe.cu - the read bandwidth of a GPU's memory ------------------===//
//
// See ReadProbe.cuh. The kernel folds every word it loads into one value per thread and stores it only when
// it equals a value the buffer cannot produce, so no load can be dropped and nothing is written.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/ReadProbe.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace tpc::rt::cuda {
namespace {

__global__ void readProbeKernel(const uint4 *p, size_t n, unsigned *sink) {
  unsigned acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint4 v = __ldcs(p + i); // streaming: no reuse, keep the L2 out of the measurement
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) // the buffer is all zero bytes: never taken
    *sink = acc;
}

} // namespace

double deviceReadBandwidth(int gpu) {
  if (cudaSetDevice(gpu) != cudaSuccess)
    return 0;
  size_t freeBytes = 0, totalBytes = 0;
  int sms = 0;
  if (cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, gpu) != cudaSuccess || sms <= 0)
    return 0;
  const size_t bytes = std::min<size_t>(size_t(1) << 30, freeBytes / 4) / 256 * 256;
  if (bytes < (size_t(64) << 20))
    return 0;
  void *buf = nullptr;
  unsigned *sink = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  double best = 0;
  if (cudaMalloc(&buf, bytes) == cudaSuccess && cudaMalloc(&sink, sizeof(unsigned)) == cudaSuccess &&
      cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess &&
      cudaMemset(buf, 0, bytes) == cudaSuccess) {
    const size_t n = bytes / sizeof(uint4);
    for (int r = 0; r < 6; ++r) { // the first run warms up
      float ms = 0;
      if (cudaEventRecord(start) != cudaSuccess)
        break;
      readProbeKernel<<<4 * sms, 512>>>(static_cast<const uint4 *>(buf), n, sink);
      if (cudaGetLastError() != cudaSuccess || cudaEventRecord(stop) != cudaSuccess ||
          cudaEventSynchronize(stop) != cudaSuccess || cudaEventElapsedTime(&ms, start, stop) != cudaSuccess)
        break;
      if (r > 0 && ms > 0)
        best = std::max(best, double(bytes) / (ms * 1e-3));
    }
  }
  cudaGetLastError(); // a failure above must not surface as a later step's error
  if (start)
    cudaEventDestroy(start);
  if (stop)
    cudaEventDestroy(stop);
  cudaFree(buf);
  cudaFree(sink);
  return best;
}

} // namespace tpc::rt::cuda
