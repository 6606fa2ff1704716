//===- VecDotTest.cpp - legacy SIMD dot kernels against the scalar ones ----===//
//
// The legacy weight types (Quant.h: one row against one activation row of vecDotType). Blocks get random
// quant bytes but power-of-two scales (and small power-of-two offsets), so every float operation in both
// kernels is exact and the SIMD result must equal the scalar one bit for bit whatever the summation order;
// that isolates the integer part (unpacking, signs, saturation), which is where SIMD kernels go wrong.
// The ActQ8 and float kernels are KernelTest.cpp's.
//===----------------------------------------------------------------------===//
#include "runtime/ggml/Blocks.h"
#include "runtime/cpu/quant/Quant.h"
#include "test/runtime/cpu/TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

using namespace tpc;
using namespace tpc::rt::cpu;
using namespace tpc::rt::cpu::test;

namespace {

uint16_t randomPow2Half(std::mt19937 &rng) {
  // 1, 2, -1, -2: products of two scales are integers, so sums stay exact up to 2^24.
  static const uint16_t kVals[] = {0x3c00, 0x4000, 0xbc00, 0xc000};
  return kVals[rng() % 4];
}

void setHalf(uint8_t *p, uint16_t h) { std::memcpy(p, &h, 2); }

/// Random blocks of type t with power-of-two scales (see the file comment).
std::vector<uint8_t> randomBlocks(GGMLType t, int64_t k, std::mt19937 &rng) {
  const GGMLTypeInfo &info = ggmlTypeInfo(t);
  std::vector<uint8_t> v(rowBytes(t, k));
  for (uint8_t &b : v)
    b = static_cast<uint8_t>(rng());
  for (size_t off = 0; off < v.size(); off += info.blockBytes) {
    uint8_t *b = v.data() + off;
    switch (t) {
    case GGMLType::Q4_0:
    case GGMLType::Q5_0:
    case GGMLType::Q8_0:
    case GGMLType::IQ4_NL:
    case GGMLType::IQ4_XS: // d first; the 6-bit sub-block scales are any bits
      setHalf(b, randomPow2Half(rng));
      break;
    case GGMLType::Q4_1:
    case GGMLType::Q5_1:
    case GGMLType::Q4_K:
    case GGMLType::Q5_K:
      setHalf(b, randomPow2Half(rng));
      setHalf(b + 2, randomPow2Half(rng));
      break;
    case GGMLType::Q2_K:
      setHalf(b + 80, randomPow2Half(rng));
      setHalf(b + 82, randomPow2Half(rng));
      break;
    case GGMLType::Q3_K:
      setHalf(b + 108, randomPow2Half(rng));
      break;
    case GGMLType::Q6_K:
      setHalf(b + 208, randomPow2Half(rng));
      break;
    case GGMLType::Q8_K: {
      float d = (rng() & 1) ? 2.0f : -1.0f;
      std::memcpy(b, &d, 4);
      break;
    }
    case GGMLType::MXFP4:
      b[0] = static_cast<uint8_t>(127 + rng() % 3); // 0.5 .. 2
      break;
    default:
      break;
    }
  }
  return v;
}

/// A random activation row for weights of type t (of type vecDotType(t), completed for t's kernels), with
/// power-of-two scales and consistent sums.
std::vector<uint8_t> randomActivations(GGMLType t, int64_t k, std::mt19937 &rng) {
  const GGMLType act = vecDotType(t);
  std::vector<uint8_t> v(activationRowBytes(t, k));
  std::uniform_int_distribution<int> q(-127, 127);
  if (act == GGMLType::Q8_K) {
    // Smaller quants: a Q6_K block's integer sum with int8 scales would otherwise pass 2^24, where its
    // conversion to float rounds and the comparison stops being exact. Q8_0 / Q8_1 keep the full +-127.
    q = std::uniform_int_distribution<int>(-31, 31);
    auto *b = reinterpret_cast<BlockQ8_K *>(v.data());
    for (int64_t i = 0; i < k / kQKK; ++i) {
      b[i].d = (rng() & 1) ? 1.0f : 2.0f;
      for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int l = 0; l < 16; ++l)
          s += (b[i].qs[16 * g + l] = static_cast<int8_t>(q(rng)));
        b[i].bsums[g] = static_cast<int16_t>(s);
      }
    }
  } else if (act == GGMLType::Q8_1) {
    auto *b = reinterpret_cast<BlockQ8_1 *>(v.data());
    for (int64_t i = 0; i < k / kQK; ++i) {
      b[i].d = randomPow2Half(rng);
      b[i].s = randomPow2Half(rng);
      for (int8_t &x : b[i].qs)
        x = static_cast<int8_t>(q(rng));
    }
  } else {
    auto *b = reinterpret_cast<BlockQ8_0 *>(v.data());
    for (int64_t i = 0; i < k / kQK; ++i) {
      b[i].d = randomPow2Half(rng);
      for (int8_t &x : b[i].qs)
        x = static_cast<int8_t>(q(rng));
    }
  }
  return v;
}

} // namespace

class VecDotIsa : public ::testing::TestWithParam<Isa> {};

TEST_P(VecDotIsa, IntegerKernelsMatchScalarExactly) {
  Isa isa = GetParam();
  if (!isaAvailable(isa))
    GTEST_SKIP() << "this CPU has no " << isaName(isa);
  std::mt19937 rng(1234);
  for (GGMLType t : legacyTypes()) {
    for (int64_t k : {256, 512, 1024}) {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<uint8_t> w = randomBlocks(t, k, rng);
        std::vector<uint8_t> a = randomActivations(t, k, rng);
        float ref = vecDotKernel(t, Isa::Scalar)(k, w.data(), a.data());
        float got = vecDotKernel(t, isa)(k, w.data(), a.data());
        ASSERT_EQ(floatToBits(got), floatToBits(ref))
            << ggmlTypeName(t) << " k=" << k << " rep=" << rep << ": " << got << " vs " << ref;
      }
    }
  }
}

TEST_P(VecDotIsa, ExtremeQuantsDoNotSaturate) {
  // All-max weights against all +-127 activations: the largest sums the byte-pair instructions see.
  Isa isa = GetParam();
  if (!isaAvailable(isa))
    GTEST_SKIP() << "this CPU has no " << isaName(isa);
  const int64_t k = 256;
  for (GGMLType t : legacyTypes()) {
    std::mt19937 rng(9);
    std::vector<uint8_t> w = randomBlocks(t, k, rng);
    std::vector<uint8_t> a = randomActivations(t, k, rng);
    for (int fill : {0x00, 0xff, 0x80, 0x7f}) {
      std::vector<uint8_t> w2 = randomBlocks(t, k, rng);
      // Overwrite everything but the scale fields by copying scales from w2 over a filled block.
      std::vector<uint8_t> filled(w2.size(), static_cast<uint8_t>(fill));
      const GGMLTypeInfo &info = ggmlTypeInfo(t);
      for (size_t off = 0; off < w2.size(); off += info.blockBytes) {
        // Scales sit at the start or the end of the block; keep both ends' 4 bytes from w2.
        std::memcpy(filled.data() + off, w2.data() + off, 4);
        std::memcpy(filled.data() + off + info.blockBytes - 4, w2.data() + off + info.blockBytes - 4, 4);
      }
      float ref = vecDotKernel(t, Isa::Scalar)(k, filled.data(), a.data());
      float got = vecDotKernel(t, isa)(k, filled.data(), a.data());
      ASSERT_EQ(floatToBits(got), floatToBits(ref)) << ggmlTypeName(t) << " fill=" << fill;
    }
  }
}

TEST_P(VecDotIsa, ActivationQuantizersEqualReference) {
  Isa isa = GetParam();
  if (!isaAvailable(isa))
    GTEST_SKIP() << "this CPU has no " << isaName(isa);
  for (GGMLType t : {GGMLType::Q8_0, GGMLType::Q8_1, GGMLType::Q8_K}) {
    for (uint32_t seed = 0; seed < 10; ++seed) {
      const int64_t n = 1024;
      std::vector<float> x = randomFloats(n, seed, seed % 2 ? 1e-3f : 10.0f);
      if (seed == 3)
        std::fill(x.begin(), x.begin() + 256, 0.0f); // an all-zero block
      if (seed == 4) {
        x[7] = 50.0f; // equal magnitudes of opposite sign: the first one decides Q8_K's sign
        x[9] = -50.0f;
      }
      for (int64_t j = 0; j < n; j += 97)
        x[j] = std::nearbyint(x[j]) + 0.5f; // exact halves after scaling are rare; ties are covered below
      std::vector<uint8_t> ref(rowBytes(t, n)), got(rowBytes(t, n), 0xee);
      quantizeActivationRow(t, x.data(), ref.data(), n);
      activationQuantizer(t, isa)(x.data(), got.data(), n);
      ASSERT_EQ(ref, got) << ggmlTypeName(t) << " seed " << seed;
    }
    // Ties: a block whose scale is exactly 1 (amax 127) with values at k + 0.5 rounds half to even.
    std::vector<float> x(256);
    for (int j = 0; j < 256; ++j)
      x[j] = (j % 2 ? 1 : -1) * (static_cast<float>(j % 100) + 0.5f);
    for (int b = 0; b < 256; b += 32)
      x[b] = 127.0f;
    std::vector<uint8_t> ref(rowBytes(t, 256)), got(rowBytes(t, 256));
    quantizeActivationRow(t, x.data(), ref.data(), 256);
    activationQuantizer(t, isa)(x.data(), got.data(), 256);
    ASSERT_EQ(ref, got) << ggmlTypeName(t) << " ties";
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, VecDotIsa, ::testing::Values(Isa::AVX2, Isa::AVX512VNNI),
                         [](const ::testing::TestParamInfo<Isa> &i) {
                           return std::string(isaName(i.param));
                         });
