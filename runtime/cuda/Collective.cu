//===- Collective.cu - loopback all-reduce for logical devices on one GPU ---===//
//
// Each thread reads element i of every peer before writing it anywhere, so in-place buffers are safe.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/Collective.cuh"
#include "runtime/comm/Bf16Wire.h"
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/Launch.cuh"

#include <algorithm>

namespace tpc::rt::cuda {
namespace {

__global__ void loopbackKernel(LoopbackArgs a) {
  pdlEnter();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.count;
       i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0;
    if (a.bf16) {
      s = comm::roundBf16(a.in[0][i]);
      for (int r = 1; r < a.n; ++r)
        s += comm::roundBf16(a.in[r][i]);
      s = comm::roundBf16(s);
    } else {
      for (int r = 0; r < a.n; ++r)
        s += a.in[r][i];
    }
    for (int d = 0; d < a.n; ++d)
      a.out[d][i] = s;
  }
}

} // namespace

void launchLoopbackAllReduce(const LoopbackArgs &a, cudaStream_t s) {
  TPC_CUDA_ASSERT(a.n >= 1 && a.n <= kMaxLoopback, "loopback all-reduce: 1..16 devices");
  if (a.count == 0)
    return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((a.count + 255) / 256, 4096));
  launchKernel(loopbackKernel, blocks, 256, 0, s, a);
  TPC_CUDA_CHECK(cudaGetLastError());
}

} // namespace tpc::rt::cuda
