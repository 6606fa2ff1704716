//===- TileGemm.cuh - grouped GEMM on tensor cores over quantized weights -*- C++ -*-===//
//
// Prefill of mul_mat_id: y[p] = W_e · x[row(p)] for the pairs p of every expert e, many pairs per expert.
// The grouped GEMV reads an expert's weights once per few pairs, which made MoE prefill ~15x slower than
// the reference family; this kernel reads them once per tile of kTileGemmRows pairs. A block owns a
// 64-pair x 64-row output tile: each k-step dequantizes its 64 weight rows x 64 elements into f16 in
// shared memory (loadChunk, the decoders every CUDA kernel shares: no whole-matrix f16 copy), copies the
// pairs' f16 activation rows next to them, and its four warps multiply on the tensor cores (WMMA
// 16x16x16, f32 accumulation), double-buffered so one barrier per k-step suffices. The tiles of all experts
// come from the routing pass (launchRouteExperts with tiles): an (expert, first pair) table on the GPU, so
// one launch serves any routing and nothing is read back to the host.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_TILEGEMM_CUH
#define TPC_RUNTIME_CUDA_TILEGEMM_CUH

#include "runtime/ggml/GGMLTypes.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpc::rt::cuda {

/// Pairs per output tile (and per entry of the routing pass's tile table).
constexpr int64_t kTileGemmRows = 64;

/// True where the tile GEMM reads weights of type t with rows of k (whole 32-element chunks): every type
/// the CUDA kernels read but f32, which the float GEMV multiplies exactly (f32 experts are a precision
/// tool, not something to round to f16).
bool tileGemmSupports(GGMLType t, int64_t k);

/// Entries the tile table of `count` pairs over `experts` experts can need.
inline int64_t tileGemmMaxTiles(int64_t count, int64_t experts) {
  return (count + kTileGemmRows - 1) / kTileGemmRows + experts;
}

struct TileGemmArgs {
  GGMLType type = GGMLType::F32;
  const void *w = nullptr;
  uint64_t rowBytes = 0, expertStride = 0;
  int64_t n = 0, k = 0; ///< rows per expert, row length (a multiple of 32)
  const void *x = nullptr; ///< f16 activation rows of k (16-byte aligned)
  int64_t xDiv = 1;        ///< pair p reads x row p / xDiv
  float *y = nullptr;      ///< rows of n per pair
  int64_t count = 0;       ///< pairs
  /// From launchRouteExperts: pairs sorted by expert, offsets per expert, and the tile table ((expert,
  /// first index into list) per tile, *tileCount entries of at most maxTiles).
  const int32_t *list = nullptr, *offsets = nullptr, *tiles = nullptr, *tileCount = nullptr;
  int64_t maxTiles = 0;
};
void launchTileGemm(const TileGemmArgs &a, cudaStream_t s);

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_TILEGEMM_CUH
