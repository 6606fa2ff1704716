//===- Elementwise.cuh - launchers of the elementwise and row-wise kernels -*- C++ -*-===//
//
// Host launchers (STYLE.md §5: kernel -> launcher -> op entry) for the f32 elementwise ops, the row
// reductions (rms_norm, softmax, top-k, sum), the expert combine and the dtype/layout movers. Each takes an
// argument struct and a stream, checks its preconditions and launches; semantics are those of
// runtime/exec/Ops.h. Tensors are dense row-major device buffers; outputs may alias inputs where the CPU op
// allows it (same element read and written by one thread).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_ELEMENTWISE_CUH
#define TPC_RUNTIME_CUDA_ELEMENTWISE_CUH

#include "runtime/plan/PlanFormat.h" // UnaryFn: the plan's code is the kernels' code

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpc::rt::cuda {

/// Most dims an elementwise/permute launcher handles.
inline constexpr int kMaxRank = 8;

/// The operation of BinaryArgs.
enum class BinaryOp : int { Add, Mul, Div };

/// What MapArgs computes per element.
enum class MapKind : int {
  Scale,   ///< y = x * v
  Softcap, ///< y = v * tanh(x / v)
  Unary,   ///< y = fn(x)
};

/// ADD/MUL/DIV with b broadcast right-aligned: bStride[i] is b's element stride for a's dim i (0 where b
/// broadcasts).
struct BinaryArgs {
  BinaryOp op = BinaryOp::Add;
  const float *a = nullptr, *b = nullptr;
  float *y = nullptr;
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t bStride[kMaxRank] = {};
};
void launchBinary(const BinaryArgs &a, cudaStream_t s);

/// Map ops (MapKind): scale and softcap by v, or the unary function fn.
struct MapArgs {
  MapKind kind = MapKind::Scale;
  UnaryFn fn = UnaryFn::Silu; ///< for MapKind::Unary
  float v = 1;
  const float *x = nullptr;
  float *y = nullptr;
  int64_t n = 0;
};
void launchMap(const MapArgs &a, cudaStream_t s);

struct XQBlock; // Quant.cuh: an activation block's scale and sums

/// GLU: y[r, c] = fn(g[r * gStride + c]) * u[r * gStride + c] (u = g + f for the fused [gate | up] form).
/// With xq (f a multiple of 32): y also quantized for the integer GEMV (launchQuantizeX's layout).
struct GluArgs {
  UnaryFn fn = UnaryFn::Silu;
  const float *g = nullptr, *u = nullptr;
  float *y = nullptr;
  int64_t rows = 0, f = 0, gStride = 0;
  int8_t *xq = nullptr;
  XQBlock *xs = nullptr;
};
void launchGlu(const GluArgs &a, cudaStream_t s);

/// ADD_ID: y[r, :] = x[r, :] + b[ids[r] - firstExpert, :] over rows r = (token, slot) when the expert is
/// one of b's `experts` rows; x's row otherwise (another device's expert). y may alias x.
struct AddIdArgs {
  const float *x = nullptr, *b = nullptr;
  const int32_t *ids = nullptr;
  float *y = nullptr;
  int64_t rows = 0, n = 0, experts = 0, firstExpert = 0;
};
void launchAddId(const AddIdArgs &a, cudaStream_t s);

/// RMS_NORM over rows of n, times w when given. With r: the rows of x + r are normalized, and written to
/// sum (a residual add fused in front). With xq (n a multiple of 32): y also quantized for the integer
/// GEMV (launchQuantizeX's layout).
struct RmsNormArgs {
  const float *x = nullptr, *w = nullptr, *r = nullptr;
  float *y = nullptr, *sum = nullptr;
  int64_t rows = 0, n = 0;
  float eps = 0;
  int8_t *xq = nullptr;
  XQBlock *xs = nullptr;
};
void launchRmsNorm(const RmsNormArgs &a, cudaStream_t s);

/// SOFTMAX over rows of n.
struct SoftmaxArgs {
  const float *x = nullptr;
  float *y = nullptr;
  int64_t rows = 0, n = 0;
};
void launchSoftmax(const SoftmaxArgs &a, cudaStream_t s);

/// TOP_K: indices of the k largest per row of n, descending, ties to the lower index.
struct TopKArgs {
  const float *x = nullptr;
  int32_t *y = nullptr;
  int64_t rows = 0, n = 0, k = 0;
};
void launchTopK(const TopKArgs &a, cudaStream_t s);

/// The MoE router chain as one kernel, one warp per row of n <= kRouteMaxExperts logits: p = softmax(x),
/// ids = top_k(p, k) (descending, ties to the lower index), w = p[ids], s = sum(w), wn = w / s. Every
/// output of the five steps is written (wn may alias w).
constexpr int64_t kRouteMaxExperts = 256;
struct RouteTopKArgs {
  const float *x = nullptr;
  float *p = nullptr, *w = nullptr, *s = nullptr, *wn = nullptr;
  int32_t *ids = nullptr;
  int64_t rows = 0, n = 0, k = 0;
};
void launchRouteTopK(const RouteTopKArgs &a, cudaStream_t s);

/// TAKE_ALONG: y[r, j] = x[r, idx[r, j]] (0 when out of range).
struct TakeAlongArgs {
  const float *x = nullptr;
  const int32_t *idx = nullptr;
  float *y = nullptr;
  int64_t rows = 0, n = 0, k = 0;
};
void launchTakeAlong(const TakeAlongArgs &a, cudaStream_t s);

/// SUM over the middle of (outer, dim, inner).
struct SumArgs {
  const float *x = nullptr;
  float *y = nullptr;
  int64_t outer = 0, dim = 0, inner = 0;
};
void launchSum(const SumArgs &a, cudaStream_t s);

/// EXPERT_COMBINE: y[t, c] = sum_j prod_i m_i[t, j] * x[t, j, c] (at most 4 multiplier tensors).
struct ExpertCombineArgs {
  const float *x = nullptr;
  const float *m[4] = {};
  int nm = 0;
  float *y = nullptr;
  int64_t t = 0, k = 0, n = 0;
};
void launchExpertCombine(const ExpertCombineArgs &a, cudaStream_t s);

/// f32 <-> f16 conversion of n elements (toHalf: x f32 -> y f16, else x f16 -> y f32).
struct ConvertArgs {
  bool toHalf = true;
  const void *x = nullptr;
  void *y = nullptr;
  int64_t n = 0;
};
void launchConvert(const ConvertArgs &a, cudaStream_t s);

/// PERMUTE of elements of `elemBytes` (2 or 4): y.shape[i] = x.shape[perm[i]].
struct PermuteArgs {
  const void *x = nullptr;
  void *y = nullptr;
  int elemBytes = 4;
  int rank = 0;
  int64_t yShape[kMaxRank] = {};
  int64_t srcStride[kMaxRank] = {}; ///< x's element stride for each of y's dims
};
void launchPermute(const PermuteArgs &a, cudaStream_t s);

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_ELEMENTWISE_CUH
