//===- TileGemm.cu - grouped GEMM on tensor cores over quantized weights --===//
//
// See TileGemm.cuh. Shared memory of a block: two buffers of the x tile (64 pairs x 64 f16) and the
// weight tile (64 rows x 64 f16), rows padded by 8 halves (16 bytes) so the fragment loads of
// consecutive rows start in different banks; after the k loop the same bytes hold the f32 output tile
// that the block writes out row by row (coalesced along the weight rows).
//===----------------------------------------------------------------------===//
#include "runtime/cuda/TileGemm.cuh"

#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/Launch.cuh"
#include "runtime/cuda/Matmul.cuh"
#include "runtime/cuda/Quant.cuh"

#include <mma.h>

#include <algorithm>
#include <string>

namespace tpc::rt::cuda {
namespace {

using namespace nvcuda;

constexpr int kBM = int(kTileGemmRows); // pairs per tile
constexpr int kBN = 64;                 // weight rows per tile
constexpr int kBK = 64;                 // elements per k-step: two 32-element chunks
constexpr int kLdH = kBK + 8;           // f16 row stride of the input tiles
constexpr int kLdC = kBN + 4;           // f32 row stride of the output tile
constexpr int kThreads = 128;           // 4 warps, 2 x 2, each a 32 x 32 part of the tile
constexpr int kInBytes = 2 * (kBM + kBN) * kLdH * 2;
constexpr int kOutBytes = kBM * kLdC * 4;
constexpr int kSmemBytes = kInBytes > kOutBytes ? kInBytes : kOutBytes;
static_assert(kThreads == 2 * kBN && kThreads == 2 * kBM, "one weight chunk and one x half-row per thread");

/// Packs 8 floats into 8 f16 (round to nearest).
__device__ __forceinline__ uint4 packHalf8(const float *v) {
  uint4 r;
  uint32_t *u = reinterpret_cast<uint32_t *>(&r);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 h = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
    u[i] = *reinterpret_cast<const uint32_t *>(&h);
  }
  return r;
}

template <GGMLType T> __global__ void __launch_bounds__(kThreads) tileGemmKernel(TileGemmArgs a) {
  __shared__ __align__(128) unsigned char smem[kSmemBytes];
  __half *xs = reinterpret_cast<__half *>(smem);  // [2][kBM][kLdH]
  __half *ws = xs + 2 * kBM * kLdH;               // [2][kBN][kLdH]
  float *cs = reinterpret_cast<float *>(smem);    // [kBM][kLdC], after the k loop
  const int tid = threadIdx.x, warp = tid / 32, wm = warp >> 1, wn = warp & 1;
  const int64_t n0 = int64_t(blockIdx.x) * kBN;
  pdlEnter();
  if (int(blockIdx.y) >= *a.tileCount)
    return;
  const int64_t e = a.tiles[2 * blockIdx.y], p0 = a.tiles[2 * blockIdx.y + 1];
  const int cnt = int(min(int64_t(kBM), int64_t(a.offsets[e + 1]) - p0));
  // This thread's share of each k-step: chunk `half` of weight row `r` and half-row `half` of pair `r`.
  const int r = tid >> 1, half = tid & 1;
  const uint8_t *wrow =
      static_cast<const uint8_t *>(a.w) + e * a.expertStride + min(n0 + r, a.n - 1) * a.rowBytes;
  const __half *xrow = nullptr;
  if (r < cnt) {
    const int64_t pair = a.list[p0 + r];
    xrow = static_cast<const __half *>(a.x) + (pair / a.xDiv) * a.k;
  }
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::fill_fragment(acc[i][j], 0.0f);
  const int64_t chunks = a.k / 32, steps = (chunks + 1) / 2;
  for (int64_t s = 0; s < steps; ++s) {
    const int b = int(s & 1);
    // Writes go to buffer b, last read by the multiply two steps ago: the barrier of the previous step
    // separates them, so one barrier per step suffices.
    const int64_t c = 2 * s + half;
    float wv[32];
    if (c < chunks)
      loadChunk<T>(wrow, c, a.k, wv);
    else
#pragma unroll
      for (int i = 0; i < 32; ++i)
        wv[i] = 0;
    uint4 *wd = reinterpret_cast<uint4 *>(ws + (b * kBN + r) * kLdH + 32 * half);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      wd[i] = packHalf8(wv + 8 * i);
    uint4 *xd = reinterpret_cast<uint4 *>(xs + (b * kBM + r) * kLdH + 32 * half);
    if (xrow && c < chunks) {
      const uint4 *src = reinterpret_cast<const uint4 *>(xrow + 32 * c);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        xd[i] = src[i];
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        xd[i] = make_uint4(0, 0, 0, 0);
    }
    __syncthreads();
    const __half *xb = xs + b * kBM * kLdH, *wb = ws + b * kBN * kLdH;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        wmma::load_matrix_sync(fa[i], xb + (wm * 32 + 16 * i) * kLdH + 16 * kk, kLdH);
#pragma unroll
      for (int j = 0; j < 2; ++j) // W rows are the columns of B = W^T: column-major with stride kLdH
        wmma::load_matrix_sync(fb[j], wb + (wn * 32 + 16 * j) * kLdH + 16 * kk, kLdH);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
          wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
  }
  __syncthreads(); // every warp is done with the input tiles before the output tile overwrites them
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(cs + (wm * 32 + 16 * i) * kLdC + wn * 32 + 16 * j, acc[i][j], kLdC,
                              wmma::mem_row_major);
  __syncthreads();
  for (int idx = tid; idx < cnt * kBN; idx += kThreads) {
    const int p = idx / kBN, col = idx % kBN;
    if (n0 + col < a.n) {
      const int64_t pair = a.list[p0 + p];
      a.y[pair * a.n + n0 + col] = cs[p * kLdC + col];
    }
  }
}

struct TileGemmLaunch {
  const TileGemmArgs &a;
  dim3 grid;
  cudaStream_t s;
  template <GGMLType T> void operator()() { launchKernel(tileGemmKernel<T>, grid, kThreads, 0, s, a); }
};

} // namespace

bool tileGemmSupports(GGMLType t, int64_t k) {
  return t != GGMLType::F32 && k > 0 && k % 32 == 0 && cudaSupportsType(t);
}

void launchTileGemm(const TileGemmArgs &a, cudaStream_t s) {
  TPC_CUDA_ASSERT(tileGemmSupports(a.type, a.k), std::string("tile gemm: ") + ggmlTypeName(a.type) +
                                                     " rows of " + std::to_string(a.k));
  TPC_CUDA_ASSERT(reinterpret_cast<uintptr_t>(a.x) % 16 == 0, "tile gemm: x must be 16-byte aligned");
  TPC_CUDA_ASSERT(a.list && a.tiles && a.offsets && a.tileCount, "tile gemm: needs the routing pass's tables");
  if (a.n == 0 || a.count == 0)
    return;
  TPC_CUDA_ASSERT(a.maxTiles >= 1 && a.maxTiles <= 65535, "tile gemm: too many pair tiles for one launch");
  const dim3 grid(static_cast<unsigned>((a.n + kBN - 1) / kBN), static_cast<unsigned>(a.maxTiles));
  TileGemmLaunch launch{a, grid, s};
  TPC_CUDA_ASSERT(dispatchType(a.type, launch), std::string("tile gemm: unsupported type ") + ggmlTypeName(a.type));
  TPC_CUDA_CHECK(cudaGetLastError());
}

} // namespace tpc::rt::cuda
