//===- TestUtil.h - helpers shared by the CPU kernel tests -------*- C++ -*-===//
//
// Random data, error norms and the list of types under test. Test-only.
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_RUNTIME_CPU_TESTUTIL_H
#define TPC_TEST_RUNTIME_CPU_TESTUTIL_H

#include "runtime/cpu/quant/Quant.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace tpc::rt::cpu::test {

/// Types the CPU backend computes with.
inline std::vector<GGMLType> supportedTypes() {
  return {GGMLType::F32,  GGMLType::F16,  GGMLType::BF16,   GGMLType::Q4_0, GGMLType::Q4_1, GGMLType::Q5_0,
          GGMLType::Q5_1, GGMLType::Q8_0, GGMLType::Q2_K,   GGMLType::Q3_K, GGMLType::Q4_K, GGMLType::Q5_K,
          GGMLType::Q6_K, GGMLType::Q8_K, GGMLType::IQ4_NL, GGMLType::IQ4_XS, GGMLType::MXFP4,
          GGMLType::IQ2_XXS, GGMLType::IQ2_XS, GGMLType::IQ2_S, GGMLType::IQ3_XXS, GGMLType::IQ3_S,
          GGMLType::IQ1_S, GGMLType::IQ1_M};
}

/// The supported types whose kernels are the legacy one-row dots (Quant.h activationFormat).
inline std::vector<GGMLType> legacyTypes() {
  std::vector<GGMLType> v;
  for (GGMLType t : supportedTypes())
    if (activationFormat(t) == ActFormat::Legacy)
      v.push_back(t);
  return v;
}

/// n normally distributed floats.
inline std::vector<float> randomFloats(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float &x : v)
    x = dist(rng);
  return v;
}

/// ||a - b|| / ||b||.
inline double relRms(const float *a, const float *b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

/// Bytes of a row of k elements of type t.
inline size_t rowBytes(GGMLType t, int64_t k) { return static_cast<size_t>(*ggmlRowBytes(t, k)); }

} // namespace tpc::rt::cpu::test

#endif // TPC_TEST_RUNTIME_CPU_TESTUTIL_H
