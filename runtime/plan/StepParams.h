//===- StepParams.h - typed views of Step::ints and Step::floats --*- C++ -*-===//
//
// A step stores its scalar parameters positionally (Step::ints, Step::floats, as plan.fbs does). This
// header is the one place that knows which position holds what: every OpKind with parameters has a struct
// here whose pack() builds the two lists and whose read() takes them apart, side by side, so a layout is
// written once. The compiler's emitter packs, the loader's validation, the step checks and the backends
// read. Nothing else indexes Step::ints or Step::floats.
//
// read() assumes the counts validatePlan() checked (paramCountsOf() below: at least kInts ints and kFloats
// floats); values are taken as stored, range checks are the step checks' (a bad mode or axis is a clear
// error at session open, not here).
//
// Usage:
//   b.step(OpKind::Rope, in, out, RopeParams{RopeMode::Neox, 64, 1e6f, 1.0f}.pack());  // emitter
//   const RopeParams p = RopeParams::read(step);                                        // backend
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_PLAN_STEPPARAMS_H
#define TPC_RUNTIME_PLAN_STEPPARAMS_H

#include "runtime/plan/PlanFormat.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tpc::rt {

/// A step's parameters as the plan stores them.
struct PackedParams {
  std::vector<int64_t> ints;
  std::vector<float> floats;
};

/// GetRows: ints = {firstId} only for a vocabulary-parallel share of the table (ids outside
/// [firstId, firstId + rows) read zero rows); none for a whole table.
struct GetRowsParams {
  static constexpr int kInts = 0, kFloats = 0;
  std::optional<int64_t> firstId;
  PackedParams pack() const { return firstId ? PackedParams{{*firstId}, {}} : PackedParams{}; }
  static GetRowsParams read(const Step &s) {
    return s.ints.empty() ? GetRowsParams{} : GetRowsParams{s.ints[0]};
  }
};

/// Matmul: ints = {1} when every device computes this same product (its weight whole on each, its input
/// and result mirrored: an MQA model's K/V projection, a MoE router); none otherwise. Devices that share
/// memory may then each compute a share of the weight's rows and gather the rest (see CpuSession).
struct MatmulParams {
  static constexpr int kInts = 0, kFloats = 0;
  bool replicated = false;
  PackedParams pack() const { return replicated ? PackedParams{{1}, {}} : PackedParams{}; }
  static MatmulParams read(const Step &s) { return {!s.ints.empty() && s.ints[0] == 1}; }
};

/// MulMatId: ints = {firstExpert} only for an expert-parallel share of the experts (the weight holds experts
/// [firstExpert, firstExpert + local experts); ids outside it give zero rows and cost nothing); none for
/// every expert.
struct MulMatIdParams {
  static constexpr int kInts = 0, kFloats = 0;
  std::optional<int64_t> firstExpert;
  PackedParams pack() const { return firstExpert ? PackedParams{{*firstExpert}, {}} : PackedParams{}; }
  static MulMatIdParams read(const Step &s) {
    return s.ints.empty() ? MulMatIdParams{} : MulMatIdParams{s.ints[0]};
  }
};

/// AddId: ints = {firstExpert} only for an expert-parallel share of the bias rows (experts [firstExpert,
/// firstExpert + rows)); ids outside it add nothing (their rows are another device's); none for every expert.
struct AddIdParams {
  static constexpr int kInts = 0, kFloats = 0;
  std::optional<int64_t> firstExpert;
  PackedParams pack() const { return firstExpert ? PackedParams{{*firstExpert}, {}} : PackedParams{}; }
  static AddIdParams read(const Step &s) { return s.ints.empty() ? AddIdParams{} : AddIdParams{s.ints[0]}; }
};

/// RmsNorm: floats = {eps}.
struct RmsNormParams {
  static constexpr int kInts = 0, kFloats = 1;
  float eps = 0;
  PackedParams pack() const { return {{}, {eps}}; }
  static RmsNormParams read(const Step &s) { return {s.floats[0]}; }
};

/// Scale: floats = {value}.
struct ScaleParams {
  static constexpr int kInts = 0, kFloats = 1;
  float value = 1;
  PackedParams pack() const { return {{}, {value}}; }
  static ScaleParams read(const Step &s) { return {s.floats[0]}; }
};

/// Unary and Glu: ints = {fn} (a UnaryFn; the step checks refuse values outside the enum).
struct UnaryParams {
  static constexpr int kInts = 1, kFloats = 0;
  UnaryFn fn = UnaryFn::Silu;
  PackedParams pack() const { return {{static_cast<int64_t>(fn)}, {}}; }
  static UnaryParams read(const Step &s) { return {static_cast<UnaryFn>(s.ints[0])}; }
};
using GluParams = UnaryParams;

/// TopK: ints = {k}.
struct TopKParams {
  static constexpr int kInts = 1, kFloats = 0;
  int64_t k = 0;
  PackedParams pack() const { return {{k}, {}}; }
  static TopKParams read(const Step &s) { return {s.ints[0]}; }
};

/// Sum: ints = {axis, keepDim (0/1)}.
struct SumParams {
  static constexpr int kInts = 2, kFloats = 0;
  int64_t axis = 0;
  bool keepDim = false;
  PackedParams pack() const { return {{axis, keepDim ? 1 : 0}, {}}; }
  static SumParams read(const Step &s) { return {s.ints[0], s.ints[1] != 0}; }
};

/// Permute: ints = perm (y.shape[i] = x.shape[perm[i]]), one entry per axis.
struct PermuteParams {
  static constexpr int kInts = 1, kFloats = 0;
  std::vector<int64_t> perm;
  PackedParams pack() const { return {perm, {}}; }
  static PermuteParams read(const Step &s) { return {s.ints}; }
};

/// View and Slice: ints = {axis, offset, size}: x narrowed on axis to [offset, offset + size).
struct NarrowParams {
  static constexpr int kInts = 3, kFloats = 0;
  int64_t axis = 0, offset = 0, size = 0;
  PackedParams pack() const { return {{axis, offset, size}, {}}; }
  static NarrowParams read(const Step &s) { return {s.ints[0], s.ints[1], s.ints[2]}; }
};

/// Send and Recv: ints = {peer}: the plan device on the other stage (v9).
struct TransferParams {
  static constexpr int kInts = 1, kFloats = 0;
  int64_t peer = 0;
  PackedParams pack() const { return {{peer}, {}}; }
  static TransferParams read(const Step &s) { return {s.ints[0]}; }
};

/// Concat, ReduceScatter and AllGather: ints = {axis}.
struct AxisParams {
  static constexpr int kInts = 1, kFloats = 0;
  int64_t axis = 0;
  PackedParams pack() const { return {{axis}, {}}; }
  static AxisParams read(const Step &s) { return {s.ints[0]}; }
};

/// How Rope pairs the dimensions it rotates: adjacent pairs (normal) or the two halves (NeoX).
enum class RopeMode : int64_t { Normal = 0, Neox = 1 };

/// Rope: ints = {mode, nDims [, origCtx]}, floats = {base, freqScale [, extFactor, attnFactor, betaFast,
/// betaSlow]}: the YaRN entries only when extFactor > 0 or attnFactor != 1 (tpc.rope's description has the
/// formula; ropeYarnCorrDims below the correction dims).
struct RopeParams {
  static constexpr int kInts = 2, kFloats = 2;
  RopeMode mode = RopeMode::Normal;
  int64_t nDims = 0;
  float base = 10000, freqScale = 1;
  int64_t origCtx = 0;
  float extFactor = 0, attnFactor = 1, betaFast = 32, betaSlow = 1;
  bool yarn() const { return extFactor != 0 || attnFactor != 1; }
  PackedParams pack() const {
    if (!yarn())
      return {{static_cast<int64_t>(mode), nDims}, {base, freqScale}};
    return {{static_cast<int64_t>(mode), nDims, origCtx}, {base, freqScale, extFactor, attnFactor, betaFast, betaSlow}};
  }
  static RopeParams read(const Step &s) {
    RopeParams p{static_cast<RopeMode>(s.ints[0]), s.ints[1], s.floats[0], s.floats[1]};
    if (s.ints.size() > 2 && s.floats.size() > 5) {
      p.origCtx = s.ints[2];
      p.extFactor = s.floats[2], p.attnFactor = s.floats[3], p.betaFast = s.floats[4], p.betaSlow = s.floats[5];
    }
    return p;
  }
  /// Same table of angles and scales.
  bool sameAngles(const RopeParams &o) const {
    return mode == o.mode && nDims == o.nDims && base == o.base && freqScale == o.freqScale &&
           origCtx == o.origCtx && extFactor == o.extFactor && attnFactor == o.attnFactor &&
           betaFast == o.betaFast && betaSlow == o.betaSlow;
  }
};

/// YaRN's correction dims {lo, hi} of RopeParams p, in float as llama.cpp computes them
/// (ggml_rope_yarn_corr_dims): c(b) = nDims ln(origCtx / (2 pi b)) / (2 ln base), lo = max(0, floor(c(betaFast))),
/// hi = min(nDims - 1, ceil(c(betaSlow))).
void ropeYarnCorrDims(const RopeParams &p, float dims[2]);

/// The angle multiplier and magnitude of rotated pair i (i < nDims/2) under YaRN: theta = pos * invFreq_i
/// with invFreq_i from ropeYarnInvFreq, cos/sin scaled by ropeYarnMscale(p). Without YaRN, invFreq_i =
/// freqScale base^(-2i/nDims) and the magnitude is 1.
double ropeYarnInvFreq(const RopeParams &p, const float corrDims[2], int64_t i);
float ropeYarnMscale(const RopeParams &p);

/// Softcap: floats = {cap}.
struct SoftcapParams {
  static constexpr int kInts = 0, kFloats = 1;
  float cap = 0;
  PackedParams pack() const { return {{}, {cap}}; }
  static SoftcapParams read(const Step &s) { return {s.floats[0]}; }
};

/// Attention: ints = {kvCache (index into DevicePlan::kv), window (0: none) [, gated [, qHead0, group]]}
/// (v6 the last three), floats = {scale, softcap (0: none)}. Gated: the last input is the output gate
/// g[T,Hq,Dv] and the result is multiplied by sigmoid(g) (Qwen3.5's gated attention); the inputs are q, k,
/// v, pos [, sinks], g. group > 0: K/V hold every KV head (mirrored because the devices outnumber them) and
/// q holds query heads qHead0.. of the model, local head h reading KV head (qHead0 + h) / group; 0: query
/// head h reads KV head h / (Hq / Hkv) of the local heads.
struct AttentionParams {
  static constexpr int kInts = 2, kFloats = 2;
  int64_t kvCache = 0, window = 0;
  float scale = 1, softcap = 0;
  bool gated = false;
  int64_t qHead0 = 0, group = 0;
  PackedParams pack() const {
    if (group > 0)
      return {{kvCache, window, gated ? 1 : 0, qHead0, group}, {scale, softcap}};
    return gated ? PackedParams{{kvCache, window, 1}, {scale, softcap}} : PackedParams{{kvCache, window}, {scale, softcap}};
  }
  static AttentionParams read(const Step &s) {
    const bool heads = s.ints.size() > 4;
    return {s.ints[0],        s.ints[1],        s.floats[0], s.floats[1], s.ints.size() > 2 && s.ints[2] == 1,
            heads ? s.ints[3] : 0, heads ? s.ints[4] : 0};
  }
};

/// SsmConv: ints = {kvCache}, the recurrent cache whose conv state it reads and writes.
struct SsmConvParams {
  static constexpr int kInts = 1, kFloats = 0;
  int64_t kvCache = 0;
  PackedParams pack() const { return {{kvCache}, {}}; }
  static SsmConvParams read(const Step &s) { return {s.ints[0]}; }
};

/// DeltaNet: ints = {kvCache}, floats = {scale}: the recurrent cache whose delta-rule state it reads and
/// writes, and the factor applied to q.
struct DeltaNetParams {
  static constexpr int kInts = 1, kFloats = 1;
  int64_t kvCache = 0;
  float scale = 1;
  PackedParams pack() const { return {{kvCache}, {scale}}; }
  static DeltaNetParams read(const Step &s) { return {s.ints[0], s.floats[0]}; }
};

/// The cache a step reads and writes (Attention, SsmConv, DeltaNet), or none.
inline std::optional<int64_t> stepCache(const Step &s) {
  if (s.ints.empty())
    return std::nullopt;
  if (s.op == OpKind::Attention || s.op == OpKind::SsmConv || s.op == OpKind::DeltaNet)
    return s.ints[0];
  return std::nullopt;
}

/// AllReduceRmsNorm: ints = {residual (0/1), weight (0/1)}, floats = {eps}. The inputs are x, then the
/// residual r when `residual`, then the norm weight w when `weight`.
struct AllReduceRmsNormParams {
  static constexpr int kInts = 2, kFloats = 1;
  bool residual = false, weight = false;
  float eps = 0;
  PackedParams pack() const { return {{residual ? 1 : 0, weight ? 1 : 0}, {eps}}; }
  static AllReduceRmsNormParams read(const Step &s) { return {s.ints[0] == 1, s.ints[1] == 1, s.floats[0]}; }
};

/// The least number of ints and floats a step of `op` stores (its struct's kInts / kFloats; 0 for the
/// ops without parameters).
struct ParamCounts {
  int ints = 0, floats = 0;
};
ParamCounts paramCountsOf(OpKind op);

/// The checks of a step's stored parameters that need no operand (what validatePlan() reports): at least
/// paramCountsOf() values, and AllReduceRmsNorm's flags 0/1 matching its input count. "" when fine.
std::string checkParamLayout(const Step &s);

} // namespace tpc::rt

#endif // TPC_RUNTIME_PLAN_STEPPARAMS_H
