//===- Activation.cpp - the CPU backend's activation rows ------------------===//
//
// Activation rows are quantized before the integer dot kernels read them: ActQ8 (ActQ8.h) for the fast
// kernels' weight types, and for the legacy types Q8_0 / Q8_1 with the reference engine's rounding (a
// bf16-rounded scale, see activationScale) or Q8_K with the reference quantizer. This file holds the portable
// quantizers; the SIMD ones (Kernels*.cpp) give the same bytes.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/quant/ActQ8.h"
#include "runtime/cpu/quant/Quant.h"
#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/BlocksIQ.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace tpc::rt::cpu {
namespace {

/// Activation version of Q8_0 / Q8_1 (see activationScale): what matmul feeds the 32-block kernels.
template <typename Block, bool Sum> void quantActivation(const float *x, Block *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j)
      amax = std::max(amax, std::fabs(x[j]));
    float d = activationScale(amax);
    float id = d > 0 ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::clamp(roundEven(x[j] * id), -127, 127));
      sum += y[i].qs[j];
    }
    y[i].d = fp32ToFp16(d);
    if constexpr (Sum)
      y[i].s = fp32ToFp16(d * static_cast<float>(sum));
  }
}

} // namespace

ActFormat activationFormat(GGMLType t) {
  switch (t) {
  case GGMLType::F32:
  case GGMLType::F16:
  case GGMLType::BF16:
    return ActFormat::F32;
  case GGMLType::Q4_0: // 32-block activations like the reference engine's (its Q8_0_X4 / Q8_2_X4)
  case GGMLType::Q5_0:
  case GGMLType::Q4_1: // q4_0's / q5_0's kernels with the block's own offset against d8 sum(a)
  case GGMLType::Q5_1:
  case GGMLType::Q8_0:
  case GGMLType::Q4_K:
  case GGMLType::Q5_K:
  case GGMLType::Q6_K:
  case GGMLType::IQ4_NL: // q8_0's kernels through its level lookup (X86Common.inc signed32)
  case GGMLType::IQ4_XS: // the same per 32-element sub-block, with its float scale
  case GGMLType::MXFP4:  // the same with its E2M1 levels and E8M0 scale
  case GGMLType::Q2_K:   // q6_K's per-16 kernels; the mins from the halves' sums
  case GGMLType::Q3_K:
    return ActFormat::Q8;
  default: // the grid formats: int8 values and scales per 16 (GridX86.inc)
    return isGridType(t) ? ActFormat::Q8 : ActFormat::Legacy;
  }
}

GGMLType vecDotType(GGMLType t) {
  switch (t) {
  case GGMLType::Q8_K:
    return GGMLType::Q8_K;
  default:
    return GGMLType::F32;
  }
}

void quantizeActQ8Row(const float *x, void *dst, int64_t k) {
  if (k < 0 || k % kQK != 0)
    throw std::invalid_argument("quantize activations: row of " + std::to_string(k) +
                                " elements is not a whole number of 32-element blocks");
  ActQ8Group *g = static_cast<ActQ8Group *>(dst);
  const int64_t nb = k / kQK;
  for (int64_t b = 0; b < 4 * actQ8Groups(k); ++b) {
    ActQ8Group &grp = g[b / 4];
    const int s = static_cast<int>(b % 4);
    if (b >= nb) { // the zero tail of the last group
      grp.d[s] = grp.ds[s] = 0;
      grp.hs[2 * s] = grp.hs[2 * s + 1] = 0;
      std::memset(grp.qs + 32 * s, 0, 32);
      continue;
    }
    const float *xb = x + b * kQK;
    float amax = 0;
    for (int j = 0; j < kQK; ++j)
      amax = std::max(amax, std::fabs(xb[j]));
    const float d = activationScale(amax);
    const float id = d > 0 ? 1.0f / d : 0.0f;
    int half[2] = {0, 0};
    for (int j = 0; j < kQK; ++j) {
      const int q = std::clamp(roundEven(xb[j] * id), -127, 127);
      grp.qs[32 * s + j] = static_cast<int8_t>(q);
      half[j / 16] += q;
    }
    grp.d[s] = d;
    grp.ds[s] = d * static_cast<float>(half[0] + half[1]);
    grp.hs[2 * s] = static_cast<int16_t>(half[0]);
    grp.hs[2 * s + 1] = static_cast<int16_t>(half[1]);
  }
}

void quantizeActivationRow(GGMLType t, const float *src, void *dst, int64_t n) {
  if (n < 0 || n % kQK != 0)
    throw std::invalid_argument("quantize activations: row of " + std::to_string(n) +
                                " elements is not a whole number of 32-element blocks");
  switch (t) {
  case GGMLType::Q8_0:
    return quantActivation<BlockQ8_0, false>(src, static_cast<BlockQ8_0 *>(dst), n / kQK);
  case GGMLType::Q8_1:
    return quantActivation<BlockQ8_1, true>(src, static_cast<BlockQ8_1 *>(dst), n / kQK);
  default:
    return quantizeRow(t, src, dst, n);
  }
}

uint64_t activationRowBytes(GGMLType wType, int64_t k) {
  switch (activationFormat(wType)) {
  case ActFormat::F32:
    return static_cast<uint64_t>(k) * sizeof(float);
  case ActFormat::Q8:
    return actQ8RowBytes(k);
  case ActFormat::Legacy:
    break;
  }
  return ggmlRowBytes(vecDotType(wType), static_cast<uint64_t>(k)).value_or(0);
}

} // namespace tpc::rt::cpu
