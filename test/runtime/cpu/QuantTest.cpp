//===- QuantTest.cpp - half floats, block layouts, quantize round trips ----===//
//
// Conversions are checked exhaustively (fp16) or on their rounding ties; block layouts on hand-built
// blocks; quantizers by round-trip error on Gaussian rows, with bounds per type.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/quant/Kernels.h"
#include "runtime/cpu/quant/Quant.h"
#include "runtime/ggml/Blocks.h"
#include "test/runtime/cpu/KernelRef.h"
#include "test/runtime/cpu/TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

using namespace tpc;
using namespace tpc::rt::cpu;
using namespace tpc::rt::cpu::test;

TEST(Half, Fp16RoundTripIsExactForEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = fp16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16ToFp32(fp32ToFp16(f)))) << h;
      continue;
    }
    ASSERT_EQ(fp32ToFp16(f), h) << "half 0x" << std::hex << h;
  }
  EXPECT_EQ(fp16ToFp32(0x3c00), 1.0f);
  EXPECT_EQ(fp16ToFp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16ToFp32(0x7bff), 65504.0f);
}

TEST(Half, Fp16RoundsToNearestEven) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1.0).
  EXPECT_EQ(fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(fp32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(fp32ToFp16(65519.0f), 0x7bff);
  EXPECT_EQ(fp32ToFp16(65520.0f), 0x7c00); // rounds to infinity
  EXPECT_EQ(fp32ToFp16(1e10f), 0x7c00);
  EXPECT_EQ(fp32ToFp16(-std::ldexp(1.0f, -25)), 0x8000); // tie to zero
  EXPECT_EQ(fp32ToFp16(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 ulp rounds up
}

TEST(Half, RowConversionMatchesScalar) {
  std::vector<float> v = randomFloats(4099, 7, 1000.0f);
  for (size_t i = 0; i < v.size(); i += 3)
    v[i] = std::ldexp(v[i], -30); // subnormal halves
  v[1] = 65520.0f;
  v[2] = -1e-30f;
  std::vector<uint16_t> row(v.size());
  fp32ToFp16Row(v.data(), row.data(), static_cast<int64_t>(v.size()));
  std::vector<float> back(v.size());
  fp16ToFp32Row(row.data(), back.data(), static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(row[i], fp32ToFp16(v[i])) << "value " << v[i];
    ASSERT_EQ(floatToBits(back[i]), floatToBits(fp16ToFp32(row[i])));
  }
}

TEST(Half, Bf16) {
  EXPECT_EQ(fp32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);     // tie to even
  EXPECT_EQ(fp32ToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82); // tie to even (up)
  EXPECT_TRUE(std::isnan(bf16ToFp32(fp32ToBf16(std::nanf("")))));
  for (uint32_t h = 0; h < 65536; h += 7) {
    float f = bf16ToFp32(static_cast<uint16_t>(h));
    if (!std::isnan(f))
      ASSERT_EQ(fp32ToBf16(f), h);
  }
}

TEST(Layout, Q4_0HandBuiltBlock) {
  BlockQ4_0 b{};
  b.d = fp32ToFp16(0.5f);
  for (int j = 0; j < 16; ++j)
    b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantizeRow(GGMLType::Q4_0, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * (j - 8));
    EXPECT_EQ(y[j + 16], 0.5f * (7 - j));
  }
}

TEST(Layout, Q5_0HighBitsComeFromLittleEndianQh) {
  BlockQ5_0 b{};
  b.d = fp32ToFp16(1.0f);
  uint32_t qh = (1u << 3) | (1u << 20); // element 3 and element 20 get bit 4
  std::memcpy(b.qh, &qh, 4);
  float y[32];
  dequantizeRow(GGMLType::Q5_0, &b, y, 32);
  for (int j = 0; j < 32; ++j)
    EXPECT_EQ(y[j], (j == 3 || j == 20) ? 0.0f : -16.0f) << j;
}

TEST(Layout, Q4_KScaleMinPacking) {
  // Pack known 6-bit scales/mins through the quantizer's layout and read them back.
  BlockQ4_K b{};
  b.d = fp32ToFp16(1.0f);
  b.dmin = fp32ToFp16(1.0f);
  const uint8_t sc[8] = {1, 2, 63, 17, 40, 5, 33, 62}, mn[8] = {0, 63, 1, 9, 48, 31, 7, 60};
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      b.scales[j] |= sc[j];
      b.scales[j + 4] |= mn[j];
    } else {
      b.scales[j + 4] = static_cast<uint8_t>((sc[j] & 0xf) | ((mn[j] & 0xf) << 4));
      b.scales[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      b.scales[j] |= static_cast<uint8_t>((mn[j] >> 4) << 6);
    }
  }
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    scaleMinK4(j, b.scales, s, m);
    EXPECT_EQ(s, sc[j]) << j;
    EXPECT_EQ(m, mn[j]) << j;
  }
  // All quants 1: group g decodes to sc[g] - mn[g].
  std::memset(b.qs, 0x11, sizeof(b.qs));
  float y[256];
  dequantizeRow(GGMLType::Q4_K, &b, y, 256);
  for (int e = 0; e < 256; ++e)
    ASSERT_EQ(y[e], float(sc[e / 32]) - float(mn[e / 32])) << e;
}

TEST(Layout, MXFP4ScaleIsHalvedE8M0) {
  BlockMXFP4 b{};
  b.e = 128; // 2^(128-128) = 1 for the doubled values
  for (int j = 0; j < 16; ++j)
    b.qs[j] = static_cast<uint8_t>(j | (j << 4));
  float y[32];
  dequantizeRow(GGMLType::MXFP4, &b, y, 32);
  EXPECT_EQ(y[7], 12.0f);
  EXPECT_EQ(y[16 + 13], -6.0f);
  EXPECT_EQ(e8m0ToFp32Half(130), 4.0f);
  EXPECT_GT(e8m0ToFp32Half(0), 0.0f); // denormal, not zero
}

// MXFP4 against OCP MX's definition in double: every E8M0 exponent (2^(e-127), both ends: subnormal floats
// at 0-1, overflow to infinity near 254) times every E2M1 nibble decoded from its bits (sign, 2-bit exponent,
// 1-bit mantissa; exponent 0 is subnormal: m / 2).
TEST(Layout, MXFP4EveryExponentAndNibble) {
  for (int e = 0; e < 256; ++e) {
    BlockMXFP4 b{};
    b.e = static_cast<uint8_t>(e);
    for (int j = 0; j < 16; ++j)
      b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    float y[32];
    dequantizeRow(GGMLType::MXFP4, &b, y, 32);
    for (int i = 0; i < 32; ++i) {
      const int nib = i < 16 ? i : 15 - (i - 16);
      const int ex = (nib >> 1) & 3, m = nib & 1;
      const double mag = ex == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, ex - 1);
      const double want = (nib & 8 ? -mag : mag) * std::ldexp(1.0, e - 127);
      ASSERT_EQ(y[i], static_cast<float>(want)) << "e=" << e << " nibble=" << nib;
    }
  }
}

// Q2_K and Q3_K against KernelRef.h's decoding of each format in double (written from the format's
// definition), on random blocks with scales from the smallest normal half to the largest.
TEST(Layout, Q2KAndQ3KMatchTheirDefinitions) {
  std::mt19937 rng(9);
  for (GGMLType t : {GGMLType::Q2_K, GGMLType::Q3_K}) {
    for (uint16_t dh : {uint16_t(0x0400), uint16_t(0x3c00), uint16_t(0xb555), uint16_t(0x7bff)}) {
      std::vector<uint8_t> row(rowBytes(t, 512));
      for (uint8_t &v : row)
        v = static_cast<uint8_t>(rng());
      const size_t bb = ggmlTypeInfo(t).blockBytes;
      for (size_t off = 0; off < row.size(); off += bb) {
        std::memcpy(row.data() + off + (t == GGMLType::Q2_K ? 80 : 108), &dh, 2);
        if (t == GGMLType::Q2_K) { // dmin at its own end of the range
          const uint16_t mh = dh == 0x7bff ? uint16_t(0x0400) : uint16_t(0x3800);
          std::memcpy(row.data() + off + 82, &mh, 2);
        }
      }
      std::vector<float> y(512);
      dequantizeRow(t, row.data(), y.data(), 512);
      const test::DecodedRow want = test::decodeExact(t, row.data(), 512);
      for (int e = 0; e < 512; ++e)
        ASSERT_NEAR(double(y[e]), want.value[e], 1e-6 * want.mag[e]) << ggmlTypeName(t) << " d=" << dh << " e=" << e;
    }
  }
}

// IQ4_XS against the format's definition computed here in double: every 6-bit sub-block scale (ls from 0 to
// 63 over the rows: -32..31, both ends), every nibble at both positions, d from a tiny to a large half.
TEST(Layout, IQ4XSSubBlockScalesAndNibbles) {
  std::mt19937 rng(5);
  for (uint16_t dh : {uint16_t(0x0400), uint16_t(0x3c00), uint16_t(0xb800), uint16_t(0x7bff)}) {
    for (int base = 0; base < 64; base += 8) {
      BlockIQ4_XS b{};
      b.d = dh;
      int ls[8];
      for (int ib = 0; ib < 8; ++ib) {
        ls[ib] = ib == 7 ? 63 - base : base + ib; // 0..63 across the loop, 63 and 0 in every block's last
        b.scales_l[ib / 2] |= static_cast<uint8_t>((ls[ib] & 0xf) << (4 * (ib % 2)));
        b.scales_h |= static_cast<uint16_t>(((ls[ib] >> 4) & 3) << (2 * ib));
      }
      for (uint8_t &q : b.qs)
        q = static_cast<uint8_t>(rng());
      float y[256];
      dequantizeRow(GGMLType::IQ4_XS, &b, y, 256);
      const double d = fp16ToFp32(dh);
      for (int e = 0; e < 256; ++e) {
        const int ib = e / 32, j = e % 32;
        const uint8_t byte = b.qs[ib * 16 + j % 16];
        const int q = j < 16 ? byte & 0xf : byte >> 4;
        const double want = d * (ls[ib] - 32) * kIQ4NLValues[q];
        ASSERT_EQ(double(y[e]), double(float(float(d * (ls[ib] - 32)) * kIQ4NLValues[q]))) << e;
        ASSERT_NEAR(double(y[e]), want, std::fabs(want) * 1e-6) << e;
        EXPECT_EQ(iq4xsScale(b, ib), ls[ib] - 32);
      }
    }
  }
}

/// Round-trip bounds (relative RMS on N(0,1) rows); ggml's own quantizers land at roughly these levels.
const std::map<GGMLType, double> kRoundTripBound = {
    {GGMLType::F16, 5e-4},  {GGMLType::BF16, 4e-3}, {GGMLType::Q8_0, 8e-3}, {GGMLType::Q8_1, 8e-3},
    {GGMLType::Q8_K, 8e-3}, {GGMLType::Q6_K, 0.03}, {GGMLType::Q5_0, 0.06}, {GGMLType::Q5_1, 0.05},
    {GGMLType::Q5_K, 0.06}, {GGMLType::Q4_0, 0.12}, {GGMLType::Q4_1, 0.1},  {GGMLType::Q4_K, 0.12},
    {GGMLType::Q3_K, 0.25}, {GGMLType::Q2_K, 0.5}};

TEST(Quantize, RoundTripErrorWithinTypeBound) {
  const int64_t n = 8192;
  std::vector<float> x = randomFloats(n, 42);
  x[5] = 7.5f; // an outlier: a block with a large range
  std::map<GGMLType, double> err;
  for (auto [t, bound] : kRoundTripBound) {
    ASSERT_TRUE(supportsQuantize(t)) << ggmlTypeName(t);
    std::vector<uint8_t> q(rowBytes(t, n));
    quantizeRow(t, x.data(), q.data(), n);
    std::vector<float> y(n);
    dequantizeRow(t, q.data(), y.data(), n);
    for (float v : y)
      ASSERT_TRUE(std::isfinite(v)) << ggmlTypeName(t);
    err[t] = relRms(y.data(), x.data(), n);
    EXPECT_LT(err[t], bound) << ggmlTypeName(t);
    EXPECT_GT(err[t], 0.0) << ggmlTypeName(t) << " should lose some precision";
  }
  // More bits, less error.
  EXPECT_LT(err[GGMLType::Q8_0], err[GGMLType::Q6_K]);
  EXPECT_LT(err[GGMLType::Q6_K], err[GGMLType::Q5_K]);
  EXPECT_LT(err[GGMLType::Q5_K], err[GGMLType::Q4_K]);
  EXPECT_LT(err[GGMLType::Q4_K], err[GGMLType::Q3_K]);
  EXPECT_LT(err[GGMLType::Q3_K], err[GGMLType::Q2_K]);
}

TEST(Quantize, ZeroAndConstantRows) {
  const int64_t n = 512;
  for (auto [t, bound] : kRoundTripBound) {
    std::vector<uint8_t> q(rowBytes(t, n));
    std::vector<float> zero(n, 0.0f), y(n, 1.0f);
    quantizeRow(t, zero.data(), q.data(), n);
    dequantizeRow(t, q.data(), y.data(), n);
    for (float v : y)
      ASSERT_EQ(v, 0.0f) << ggmlTypeName(t);
    std::vector<float> c(n, -0.75f);
    quantizeRow(t, c.data(), q.data(), n);
    dequantizeRow(t, q.data(), y.data(), n);
    for (float v : y)
      ASSERT_NEAR(v, -0.75f, 0.75 * bound * 2) << ggmlTypeName(t);
  }
}

TEST(Quantize, Q8KBlockSumsMatchQuants) {
  std::vector<float> x = randomFloats(512, 3);
  std::vector<BlockQ8_K> b(2);
  quantizeRow(GGMLType::Q8_K, x.data(), b.data(), 512);
  for (const BlockQ8_K &blk : b)
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) {
        s += blk.qs[16 * g + l];
        ASSERT_GE(blk.qs[16 * g + l], -127); // symmetric: the SIMD sign trick needs no -128
      }
      EXPECT_EQ(blk.bsums[g], s);
    }
}

TEST(Errors, UnsupportedTypesAreReportedNotCrashed) {
  EXPECT_FALSE(supportsDequantize(GGMLType::TQ1_0));
  EXPECT_FALSE(supportsDequantize(GGMLType::I32));
  float y[256];
  uint8_t buf[1024] = {};
  try {
    dequantizeRow(GGMLType::TQ1_0, buf, y, 256);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument &e) {
    EXPECT_NE(std::string(e.what()).find("tq1_0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(quantizeRow(GGMLType::IQ4_NL, y, buf, 32), std::invalid_argument);
  EXPECT_THROW(dequantizeRow(GGMLType::Q4_K, buf, y, 100), std::invalid_argument);
  EXPECT_THROW(quantizeRow(GGMLType::Q8_0, y, buf, 33), std::invalid_argument);
  EXPECT_EQ(vecDotKernel(GGMLType::TQ1_0, activeIsa()), nullptr);
}

TEST(Types, EverySupportedTypeHasKernelsAndActivationType) {
  int fast = 0;
  for (GGMLType t : supportedTypes()) {
    EXPECT_TRUE(supportsDequantize(t)) << ggmlTypeName(t);
    for (Isa isa : {Isa::Scalar, Isa::AVX2, Isa::AVX512, Isa::AVX512VNNI}) {
      const KernelTable &kt = kernelTable(isa);
      if (activationFormat(t) == ActFormat::Legacy) {
        EXPECT_NE(vecDotKernel(t, isa), nullptr) << ggmlTypeName(t) << " " << isaName(isa);
        EXPECT_TRUE(supportsQuantize(vecDotType(t))) << ggmlTypeName(t);
      } else {
        ++fast;
        EXPECT_NE(kt.getRow(t), nullptr) << ggmlTypeName(t) << " " << isaName(isa);
        EXPECT_EQ(vecDotKernel(t, isa), nullptr) << ggmlTypeName(t) << ": one kernel family per type";
        if (kt.panelRows > 0) {
          EXPECT_TRUE(kt.getConvert(t) && kt.getTile(t)) << ggmlTypeName(t) << " " << isaName(isa);
        }
      }
    }
  }
  EXPECT_EQ(fast, 23 * 4) << "f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, "
                             "mxfp4, q2_K, q3_K and the seven grid types run on the row/panel kernels";
}

TEST(Quantize, ActivationScalesAreBf16AndQuantsFollowThem) {
  std::vector<float> x = randomFloats(1024, 21, 3.0f);
  for (GGMLType t : {GGMLType::Q8_0, GGMLType::Q8_1}) {
    std::vector<uint8_t> q(rowBytes(t, 1024));
    quantizeActivationRow(t, x.data(), q.data(), 1024);
    size_t bytes = ggmlTypeInfo(t).blockBytes;
    for (int b = 0; b < 32; ++b) {
      uint16_t h;
      std::memcpy(&h, q.data() + b * bytes, 2);
      float d = fp16ToFp32(h);
      EXPECT_EQ(floatToBits(d) & 0xffffu, 0u) << "scale of block " << b << " is not a bf16 value";
      float amax = 0;
      for (int j = 0; j < 32; ++j)
        amax = std::max(amax, std::fabs(x[b * 32 + j]));
      EXPECT_NEAR(d, amax / 127, amax / 127 / 256) << b; // bf16 keeps 8 significant bits
      const int8_t *qs = reinterpret_cast<const int8_t *>(q.data() + b * bytes + bytes - 32);
      for (int j = 0; j < 32; ++j) // quants agree with the rounded scale, not with amax / 127
        ASSERT_EQ(qs[j], static_cast<int8_t>(std::nearbyint(x[b * 32 + j] * (1.0f / d)))) << b << " " << j;
    }
    std::vector<float> y(1024);
    dequantizeRow(t, q.data(), y.data(), 1024);
    EXPECT_LT(relRms(y.data(), x.data(), 1024), 8e-3) << ggmlTypeName(t);
  }
}

// TPC_CPU_ISA's check: the level names pass where the CPU has them, anything else is one line naming the
// variable and what to do.
TEST(CpuIsa, OverrideProblemNamesTheVariableAndTheLevels) {
  EXPECT_EQ(isaOverrideProblem(nullptr), "");
  EXPECT_EQ(isaOverrideProblem("scalar"), "");
  const std::string bad = isaOverrideProblem("avx9");
  EXPECT_NE(bad.find("TPC_CPU_ISA=avx9 is not a kernel level"), std::string::npos) << bad;
  EXPECT_NE(bad.find("scalar, avx2, avx512, avx512vnni"), std::string::npos) << bad;
  for (Isa i : {Isa::AVX2, Isa::AVX512, Isa::AVX512VNNI}) {
    const std::string p = isaOverrideProblem(isaName(i));
    if (isaAvailable(i))
      EXPECT_EQ(p, "") << isaName(i);
    else
      EXPECT_NE(p.find("this CPU cannot run"), std::string::npos) << p;
  }
}
