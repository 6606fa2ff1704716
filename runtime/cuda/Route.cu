//===- Route.cu - grouping mul_mat_id's (token, slot) pairs by expert, and which form runs them ---===//
//
// A routed mul_mat_id (more than kPairGridMax pairs) first groups its pairs by expert on the GPU, so
// nothing reads the router's choices back to the host: one block counts per expert, writes the offsets,
// the tile GEMM's table of 64-pair tiles, and the pair list; pairs routed to no expert of the share are
// zeroed by a grid of one block per pair. moePath decides between the per-pair decode blocks, the routed
// batched GEMV (Matmul.cu) and the routed tile GEMM (TileGemm.cu).
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/Launch.cuh"
#include "runtime/cuda/Matmul.cuh"

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace tpc::rt::cuda {
namespace {

/// One block: counts per expert, offsets (and the tile GEMM's tile table), then every valid pair placed in
/// its expert's range (the order inside a range does not matter: each pair's result is computed on its
/// own). Pairs of no expert here are zeroed by zeroForeignPairsKernel.
__global__ void routeKernel(RouteArgs a) {
  pdlEnter();
  extern __shared__ int cursor[];
  for (int64_t e = threadIdx.x; e < a.experts; e += blockDim.x)
    cursor[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < a.count; p += blockDim.x) {
    const int64_t id = int64_t(a.ids[p]) - a.firstExpert;
    if (id >= 0 && id < a.experts)
      atomicAdd(&cursor[id], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int s = 0, tiles = 0;
    for (int64_t e = 0; e < a.experts; ++e) {
      const int c = cursor[e];
      a.offsets[e] = s;
      cursor[e] = s;
      for (int i = 0; a.tiles && i < c; i += int(kTileGemmRows), ++tiles) {
        a.tiles[2 * tiles] = int32_t(e);
        a.tiles[2 * tiles + 1] = s + i;
      }
      s += c;
    }
    a.offsets[a.experts] = s;
    if (a.tiles)
      *a.tileCount = tiles;
  }
  __syncthreads();
  for (int64_t p = threadIdx.x; p < a.count; p += blockDim.x) {
    const int64_t id = int64_t(a.ids[p]) - a.firstExpert;
    if (id >= 0 && id < a.experts)
      a.list[atomicAdd(&cursor[id], 1)] = static_cast<int32_t>(p);
  }
}

/// One block per pair: zeros the output row of a pair routed to no expert of this share (another device's
/// experts under --moe-split expert, or a broken router); the others exit at once. Apart from the routing
/// block, so the zeroing of half the pairs of an expert-parallel share runs on the whole GPU.
__global__ void zeroForeignPairsKernel(RouteArgs a) {
  pdlEnter();
  const int64_t p = blockIdx.x, id = int64_t(a.ids[p]) - a.firstExpert;
  if (id >= 0 && id < a.experts)
    return;
  for (int64_t c = threadIdx.x; c < a.n; c += blockDim.x)
    a.y[p * a.n + c] = 0.0f;
}

} // namespace

int64_t moeGemvMaxPairs(int64_t experts) {
  // TPC_CUDA_MOE_GEMM_FROM=N: the tile GEMM from N pairs per expert on average (A/B runs); 0 turns it off.
  static const int64_t perExpert = [] {
    const char *env = std::getenv("TPC_CUDA_MOE_GEMM_FROM");
    return env ? std::max<int64_t>(0, std::atoll(env)) : int64_t(4);
  }();
  return perExpert == 0 ? std::numeric_limits<int64_t>::max() : std::max(kPairGridMax, perExpert * experts);
}

MoePath moePath(GGMLType type, int64_t count, int64_t experts, int64_t k) {
  if (count <= kPairGridMax)
    return MoePath::PerPair;
  return tileGemmSupports(type, k) && count > moeGemvMaxPairs(experts) ? MoePath::RoutedGemm : MoePath::RoutedGemv;
}

void launchRouteExperts(const RouteArgs &a, cudaStream_t s) {
  TPC_CUDA_ASSERT(a.experts >= 1 && a.experts <= 8192, "mul_mat_id: experts must be 1..8192");
  launchKernel(routeKernel, 1, 1024, a.experts * sizeof(int), s, a);
  launchZeroForeignPairs(a, s);
}

void launchZeroForeignPairs(const RouteArgs &a, cudaStream_t s) {
  TPC_CUDA_ASSERT(a.count <= 0x7fffffff, "mul_mat_id: too many pairs");
  if (a.count > 0)
    launchKernel(zeroForeignPairsKernel, static_cast<unsigned>(a.count), 128, 0, s, a);
  TPC_CUDA_CHECK(cudaGetLastError());
}

} // namespace tpc::rt::cuda
