//===- Activation.cpp - the CPU backend's activation rows ------------------===//
//
// Activation rows are quantized before the integer dot kernels read them: Q8_0 / Q8_1 with the reference
// engine's rounding (a bf16-rounded scale, see activationScale), Q8_K with the reference quantizer, and for
// Q4_K/Q5_K weights a trailer of per-block scales and scaled sums that the kernels would otherwise
// recompute for every weight row.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/quant/Quant.h"
#include "runtime/ggml/Blocks.h"

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

GGMLType vecDotType(GGMLType t) {
  switch (t) {
  case GGMLType::Q4_0:
  case GGMLType::Q5_0:
  case GGMLType::Q8_0:
  case GGMLType::IQ4_NL:
  case GGMLType::MXFP4:
    return GGMLType::Q8_0;
  case GGMLType::Q4_1:
  case GGMLType::Q5_1:
  case GGMLType::Q4_K: // 32-block activations like the reference engine (its Q8_2), not Q8_K
  case GGMLType::Q5_K:
    return GGMLType::Q8_1;
  case GGMLType::Q2_K:
  case GGMLType::Q3_K:
  case GGMLType::Q6_K:
  case GGMLType::Q8_K:
    return GGMLType::Q8_K;
  default:
    return GGMLType::F32;
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
  const uint64_t base = ggmlRowBytes(vecDotType(wType), static_cast<uint64_t>(k)).value_or(0);
  if (wType == GGMLType::Q4_K || wType == GGMLType::Q5_K)
    return base + static_cast<uint64_t>(k / kQKK) * 16 * sizeof(float);
  return base;
}

void completeActivationRow(GGMLType wType, void *row, int64_t k) {
  if (wType != GGMLType::Q4_K && wType != GGMLType::Q5_K)
    return;
  const BlockQ8_1 *y = static_cast<const BlockQ8_1 *>(row);
  // The trailer follows the blocks; its floats are read unaligned by the kernels.
  uint8_t *trailer = static_cast<uint8_t *>(row) + static_cast<size_t>(k / kQK) * sizeof(BlockQ8_1);
  for (int64_t i = 0; i < k / kQKK; ++i) {
    float f[16];
    for (int g = 0; g < 8; ++g) {
      const BlockQ8_1 &b = y[8 * i + g];
      int sum = 0;
      for (int8_t q : b.qs)
        sum += q;
      f[g] = fp16ToFp32(b.d);
      f[8 + g] = f[g] * static_cast<float>(sum);
    }
    std::memcpy(trailer + static_cast<size_t>(i) * sizeof(f), f, sizeof(f));
  }
}

} // namespace tpc::rt::cpu
