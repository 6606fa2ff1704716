//===- Matmul.cuh - launchers of the matmul, expert-matmul and row-lookup kernels -*- C++ -*-===//
//
// Weights stay in their ggml layout on the GPU. Decode runs the own GEMV kernels with the activation row
// held in registers: for the types with an integer unit (q4_0, q8_0, q2_K..q6_K, iq4_nl, iq4_xs, mxfp4;
// hasIntDot) the row is quantized to 8 bits first and the dot products are integer (dp4a), the other types
// dot float chunks. Batches of 2..8 tokens of those
// types run the batched integer GEMV (each weight block read once for all tokens, x through L1); the
// other types one warp per two weight rows, 32-element chunks dequantized in registers and dotted with up
// to four token rows at a time. Larger batches call cuBLAS on f16 weights (see Session).
// MUL_MAT_ID groups its (token, slot) pairs by expert on the GPU (launchRouteExperts) and runs one grouped
// launch over all experts, so nothing reads the router's choices back to the host: the batched GEMV for
// a few pairs per expert, the tile GEMM on tensor cores (TileGemm.cuh) for many (prefill).
//
// Supported weight types: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K,
// iq4_nl, iq4_xs, mxfp4 (cudaSupportsType). Weight rows must start 16-byte aligned (the session aligns every slice to 256).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_MATMUL_CUH
#define TPC_RUNTIME_CUDA_MATMUL_CUH

#include "runtime/cuda/TileGemm.cuh"
#include "runtime/ggml/GGMLTypes.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpc::rt::cuda {

/// True for the weight types the CUDA kernels read.
bool cudaSupportsType(GGMLType t);

struct XQBlock; // Quant.cuh: an activation block's scale and sums
constexpr uint64_t kXQBlockBytes = 16;

/// Grouped GEMV: y[p] = W_e · x[xRow(p)] for the pairs p of each expert e. Without `list`, one expert
/// (E = 1) and pairs 0..count-1 (a plain matmul of count rows). xRow(p) = p / xDiv.
struct GemvArgs {
  GGMLType type = GGMLType::F32;
  const void *w = nullptr;
  uint64_t rowBytes = 0;     ///< bytes of one weight row
  uint64_t expertStride = 0; ///< bytes between experts
  int64_t n = 0, k = 0;      ///< rows per expert, row length
  int64_t experts = 1;
  const float *x = nullptr;
  int64_t xDiv = 1;
  float *y = nullptr;
  int64_t count = 0;                ///< pairs (tokens for a plain matmul; T * slots for mul_mat_id)
  const int32_t *list = nullptr;    ///< pairs sorted by expert (mul_mat_id), or null
  const int32_t *offsets = nullptr; ///< experts + 1 offsets into list
  /// Decode form of mul_mat_id (few pairs): one block row per pair, its expert read from ids[p]; no
  /// routing pass, and no blocks launched for the unused experts. Out-of-range ids give zero rows.
  const int32_t *ids = nullptr;
  /// mul_mat_id of an expert-parallel share (--moe-split expert): ids are global, w holds experts
  /// [firstExpert, firstExpert + experts); pairs routed elsewhere are out of range, so zero rows.
  int64_t firstExpert = 0;
  /// x quantized by launchQuantizeX (int8 rows of k, one XQBlock per 32): set exactly when
  /// gemvUsesIntDot(*this), for the integer (dp4a) decode kernels.
  const int8_t *xq = nullptr;
  const XQBlock *xs = nullptr;
  /// Decode of several matrices on one x (the same type and k; Q, K, V or gate, up) in one launch, so the
  /// small ones do not each pay a launch and a partial wave: parts > 1 replaces w, y, n by the parts'.
  static constexpr int kMaxParts = 4;
  int parts = 1;
  const void *wPart[kMaxParts] = {};
  float *yPart[kMaxParts] = {};
  int64_t nPart[kMaxParts] = {};
};
void launchGemv(const GemvArgs &a, cudaStream_t s);

/// True where launchGemv can run a's matrices as parts of one launch (decode: one token, or mul_mat_id's
/// per-pair form; a row the decode kernel holds in registers).
bool gemvCanGroup(const GemvArgs &a);

/// True where launchGemv runs an integer kernel, which needs a.xq / a.xs: a weight type with an integer
/// unit (hasIntDot: q4_0, q8_0, the K-quants, iq4_nl, iq4_xs, mxfp4) and either the decode form (one token, or ids; a row whose units
/// fit the registers) or the batched form (2..kGemvBatchMax tokens, or routed pairs with a list).
bool gemvUsesIntDot(const GemvArgs &a);

/// Token rows up to which a plain matmul runs the batched integer GEMV (each weight read once for all of
/// them: batched decode of up to this many sequences); from CudaOptions::cublasMinRows cuBLAS takes over.
constexpr int64_t kGemvBatchMax = 8;
/// mul_mat_id with at most this many (token, slot) pairs (decode) runs one block row per pair.
constexpr int64_t kPairGridMax = 16;

/// How mul_mat_id of `count` (token, slot) pairs runs: one decode block row per pair (no routing pass);
/// routed (pairs grouped by expert on the GPU) into the batched GEMV, which reads each expert's weights
/// once per few pairs; or routed into the tile GEMM on tensor cores (TileGemm.cuh), which reads them once
/// per 64 pairs, from moeGemvMaxPairs(experts) pairs on (a few pairs per expert on average).
enum class MoePath { PerPair, RoutedGemv, RoutedGemm };
MoePath moePath(GGMLType type, int64_t count, int64_t experts, int64_t k);
/// The most pairs the routed GEMV takes before the tile GEMM does (TPC_CUDA_MOE_GEMM_FROM: per expert).
int64_t moeGemvMaxPairs(int64_t experts);

/// xq[rows * k] and xs[rows * k / 32] from the f32 rows x (k a multiple of 32): per 32 elements, int8
/// values rounded to nearest with the block's scale, and the block's float half sums.
void launchQuantizeX(const float *x, int64_t rows, int64_t k, int8_t *xq, XQBlock *xs, cudaStream_t s);

/// Groups pairs p = t * slots + j by ids[p] - firstExpert into offsets[experts + 1] and list[count]; pairs
/// whose id is out of range get zero output rows (y rows of n).
struct RouteArgs {
  const int32_t *ids = nullptr;
  int64_t count = 0, experts = 0;
  int64_t firstExpert = 0; ///< as GemvArgs::firstExpert: ids - firstExpert index the share's experts
  int32_t *offsets = nullptr, *list = nullptr;
  float *y = nullptr;
  int64_t n = 0;
  /// For the tile GEMM (optional): (expert, first index into list) of each tile of up to kTileGemmRows
  /// pairs of one expert, in tiles[2 * j], tiles[2 * j + 1], and their number in *tileCount (at most
  /// tileGemmMaxTiles(count, experts)).
  int32_t *tiles = nullptr, *tileCount = nullptr;
};
void launchRouteExperts(const RouteArgs &a, cudaStream_t s);
/// The zeroing half of launchRouteExperts alone: for a step that reuses the grouping of an earlier step on
/// the same ids (gate, up and down of one MoE layer) but writes its own y.
void launchZeroForeignPairs(const RouteArgs &a, cudaStream_t s);

/// Dequantizes rows [row0, row0 + rows) of a weight into f16 (dense rows of k) for cuBLAS.
struct DequantArgs {
  GGMLType type = GGMLType::F32;
  const void *w = nullptr;
  uint64_t rowBytes = 0;
  int64_t row0 = 0, rows = 0, k = 0;
  void *out = nullptr; ///< __half[rows, k]
};
void launchDequantF16(const DequantArgs &a, cudaStream_t s);

/// GET_ROWS: y[i] = table[ids[i]] as f32 rows of k (zeros for out-of-range ids).
struct GetRowsArgs {
  GGMLType type = GGMLType::F32;
  const void *table = nullptr;
  uint64_t rowBytes = 0;
  int64_t rows = 0, k = 0;
  const int32_t *ids = nullptr;
  int64_t idOffset = 0; ///< the table's first row id (vocabulary-parallel share); other ids give zero rows
  int64_t count = 0;
  float *y = nullptr;
};
void launchGetRows(const GetRowsArgs &a, cudaStream_t s);

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_MATMUL_CUH
