//===- StepParams.cpp - parameter counts per op and their layout checks ----===//
//
// The counts come from the parameter structs of StepParams.h, so the loader's check and the accessors
// cannot disagree.
//===----------------------------------------------------------------------===//
#include "runtime/plan/StepParams.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace tpc::rt {

namespace {
template <typename P> constexpr ParamCounts countsOf() { return {P::kInts, P::kFloats}; }
} // namespace

ParamCounts paramCountsOf(OpKind op) {
  switch (op) {
  case OpKind::GetRows:
    return countsOf<GetRowsParams>();
  case OpKind::MulMatId:
    return countsOf<MulMatIdParams>();
  case OpKind::AddId:
    return countsOf<AddIdParams>();
  case OpKind::RmsNorm:
  case OpKind::L2Norm:
  case OpKind::GatedRmsNorm:
    return countsOf<RmsNormParams>();
  case OpKind::SsmConv:
    return countsOf<SsmConvParams>();
  case OpKind::DeltaNet:
    return countsOf<DeltaNetParams>();
  case OpKind::Scale:
    return countsOf<ScaleParams>();
  case OpKind::Unary:
  case OpKind::Glu:
    return countsOf<UnaryParams>();
  case OpKind::TopK:
    return countsOf<TopKParams>();
  case OpKind::Sum:
    return countsOf<SumParams>();
  case OpKind::Permute:
    return countsOf<PermuteParams>();
  case OpKind::View:
  case OpKind::Slice:
    return countsOf<NarrowParams>();
  case OpKind::Concat:
  case OpKind::ReduceScatter:
  case OpKind::AllGather:
    return countsOf<AxisParams>();
  case OpKind::Rope:
    return countsOf<RopeParams>();
  case OpKind::Softcap:
    return countsOf<SoftcapParams>();
  case OpKind::Attention:
    return countsOf<AttentionParams>();
  case OpKind::AllReduceRmsNorm:
    return countsOf<AllReduceRmsNormParams>();
  case OpKind::Matmul:
    return countsOf<MatmulParams>();
  case OpKind::Send:
  case OpKind::Recv:
    return countsOf<TransferParams>();
  case OpKind::TakeAlong:
  case OpKind::Add:
  case OpKind::Mul:
  case OpKind::Div:
  case OpKind::Softmax:
  case OpKind::Reshape:
  case OpKind::ExpertCombine:
  case OpKind::AllReduce:
  case OpKind::Copy:
    return {};
  }
  return {};
}

std::string checkParamLayout(const Step &s) {
  const ParamCounts need = paramCountsOf(s.op);
  if (s.ints.size() < size_t(need.ints) || s.floats.size() < size_t(need.floats))
    return fmt::format("needs {} ints and {} floats", need.ints, need.floats);
  if (s.op == OpKind::AllReduceRmsNorm) {
    // Read raw: the typed view maps anything but 1 to false, and a 2 must not pass as "no residual".
    const int64_t r = s.ints[0], w = s.ints[1];
    if (r < 0 || r > 1 || w < 0 || w > 1 || s.inputs.size() != size_t(1 + r + w))
      return fmt::format("ints (residual {}, weight {}) must be 0/1 and match the {} inputs", r, w,
                         s.inputs.size());
  }
  if (s.op == OpKind::Attention && s.ints.size() > 2 && s.ints[2] != 0 && s.ints[2] != 1)
    return "ints[2] (gate) must be 0 or 1";
  if (s.op == OpKind::Matmul && (s.ints.size() > 1 || (s.ints.size() == 1 && s.ints[0] != 1)))
    return "ints must be {} or {1} (replicated)";
  if (s.op == OpKind::Rope && (s.ints.size() > 2 || s.floats.size() > 2) && (s.ints.size() != 3 || s.floats.size() != 6))
    return "YaRN needs ints {mode, nDims, origCtx} and floats {base, freqScale, extFactor, attnFactor, betaFast, "
           "betaSlow}";
  return "";
}

void ropeYarnCorrDims(const RopeParams &p, float dims[2]) {
  // In float, as the reference engine, so the ramp's integer ends agree with it.
  auto corr = [&](float beta) {
    return float(p.nDims) * std::log(float(p.origCtx) / (beta * 2 * float(M_PI))) / (2 * std::log(p.base));
  };
  dims[0] = std::max(0.0f, std::floor(corr(p.betaFast)));
  dims[1] = std::min(float(p.nDims - 1), std::ceil(corr(p.betaSlow)));
}

double ropeYarnInvFreq(const RopeParams &p, const float corrDims[2], int64_t i) {
  const double extrap = std::pow(double(p.base), -2.0 * double(i) / double(p.nDims));
  if (p.extFactor == 0)
    return p.freqScale * extrap;
  // The ramp is 1 below lo (extrapolate: high frequencies keep their angle), 0 above hi (interpolate).
  const float y = (float(i) - corrDims[0]) / std::max(0.001f, corrDims[1] - corrDims[0]);
  const double mix = double(1 - std::min(1.0f, std::max(0.0f, y))) * p.extFactor;
  return extrap * (double(p.freqScale) * (1 - mix) + mix);
}

float ropeYarnMscale(const RopeParams &p) {
  return p.extFactor != 0 ? p.attnFactor * (1.0f + 0.1f * std::log(1.0f / p.freqScale)) : p.attnFactor;
}

} // namespace tpc::rt
