//===- QuantChunkTest.cu - the CUDA dequantizers, run on the host -----------===//
//
// loadChunk<T> and the integer units IntDot<T> (runtime/cuda/Quant.cuh) are __host__ __device__, so their
// bit manipulation (prmt table lookups included, through bytePerm's host form) is checked here against the
// CPU backend's dequantizeRow on random and edge-value blocks of every type, bit for bit, on any machine
// (no GPU needed; this is the part of the CUDA backend that CI without a GPU exercises).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/quant/ActQ8.h"
#include "runtime/cuda/Quant.cuh"
#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/Quant.h"
#include "test/common/GridBlocks.h"
#include "test/cuda/HalfFields.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace tpc;
using namespace tpc::rt;
using tpc::rt::test::halfFields;

namespace {


/// Random rows of type T (every quant bit pattern; scale fields set to finite halves); compares every
/// 32-element chunk with the CPU dequantization.
template <GGMLType T> void checkType(int64_t k) {
  std::mt19937 rng(static_cast<uint32_t>(T) + 7);
  const GGMLTypeInfo &info = ggmlTypeInfo(T);
  const uint64_t rb = *ggmlRowBytes(T, k);
  const int64_t rows = 5;
  std::vector<uint8_t> bytes(rows * rb);
  for (uint8_t &b : bytes)
    b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (uint64_t blk = 0; info.quantized && blk < bytes.size() / info.blockBytes; ++blk) {
    for (int off : halfFields(T)) {
      uint16_t h = fp32ToFp16(scale(rng));
      std::memcpy(&bytes[blk * info.blockBytes + off], &h, 2);
    }
    if (T == GGMLType::MXFP4) // E8M0 2^(e - 128) around 1 (checkEdges takes every exponent)
      bytes[blk * info.blockBytes] = static_cast<uint8_t>(116 + rng() % 16);
  }
  if (T == GGMLType::F16 || T == GGMLType::F32) // random bits would include NaNs
    for (int64_t i = 0; i < rows * k; ++i) {
      float v = scale(rng) * 100;
      if (T == GGMLType::F32)
        std::memcpy(&bytes[i * 4], &v, 4);
      else {
        uint16_t h = fp32ToFp16(v);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
  std::vector<float> want(k);
  for (int64_t r = 0; r < rows; ++r) {
    dequantizeRow(T, &bytes[r * rb], want.data(), k);
    for (int64_t c = 0; c < (k + 31) / 32; ++c) {
      float got[32];
      rt::cuda::loadChunk<T>(&bytes[r * rb], c, k, got);
      // dotChunk (the decode GEMV's fused form) against the plain dot of the same values.
      float xv[32];
      double ref = 0;
      for (int j = 0; j < 32; ++j) {
        xv[j] = c * 32 + j < k ? float(int(rng() % 2001) - 1000) / 1000.0f : 0.0f;
        ref += double(c * 32 + j < k ? got[j] : 0.0f) * xv[j];
      }
      const float dot = rt::cuda::dotChunk<T>(&bytes[r * rb], c, k, xv, rt::cuda::xSums(xv));
      if (!std::isnan(ref))
        ASSERT_NEAR(dot, ref, 1e-4 * (1 + std::fabs(ref))) << ggmlTypeName(T) << " dot of chunk " << c;
      for (int j = 0; j < 32 && c * 32 + j < k; ++j) {
        const float w = want[c * 32 + j];
        if (std::isnan(w))
          continue; // bf16 rows of random bits
        ASSERT_EQ(got[j], w) << ggmlTypeName(T) << " row " << r << " element " << c * 32 + j;
      }
    }
  }
}

TEST(CudaQuant, ChunksMatchCpuDequantizeEveryType) {
  checkType<GGMLType::F32>(100); // plain types: rows need not be whole chunks
  checkType<GGMLType::F16>(70);
  checkType<GGMLType::BF16>(512);
  checkType<GGMLType::Q4_0>(512);
  checkType<GGMLType::Q4_1>(512);
  checkType<GGMLType::Q5_0>(512);
  checkType<GGMLType::Q5_1>(512);
  checkType<GGMLType::Q8_0>(512);
  checkType<GGMLType::Q4_K>(768);
  checkType<GGMLType::Q5_K>(768);
  checkType<GGMLType::Q6_K>(768);
  checkType<GGMLType::Q2_K>(768);
  checkType<GGMLType::Q3_K>(768);
  checkType<GGMLType::IQ4_NL>(512);
  checkType<GGMLType::IQ4_XS>(768);
  checkType<GGMLType::MXFP4>(512);
}

/// Edge values, bit for bit: one row of 256 blocks whose byte at offset o of block b is o + 37b (mod 256),
/// so every offset takes all 256 values (every nibble, bit pair and hmask bit in every position), then
/// the f16 scale fields cycle through the extremes (largest finite, smallest subnormal and normal, zero,
/// their negatives) and MXFP4's E8M0 exponent through 0..254 (255 is NaN in the format; the products
/// with 2^126 overflow to infinity alike on both sides).
template <GGMLType T> void checkEdges() {
  const GGMLTypeInfo &info = ggmlTypeInfo(T);
  const int64_t blocks = 256, k = blocks * info.blockElems;
  const uint64_t rb = *ggmlRowBytes(T, k);
  std::vector<uint8_t> bytes(rb + 16); // loadWords may read the aligned word holding the last byte
  for (int64_t b = 0; b < blocks; ++b)
    for (int o = 0; o < int(info.blockBytes); ++o)
      bytes[b * info.blockBytes + o] = static_cast<uint8_t>(o + 37 * b);
  const uint16_t extremes[] = {0x7bff, 0xfbff, 0x0001, 0x8001, 0x03ff,
                               0x0400, 0x8400, 0x0000, 0x8000, 0x3c00};
  const int ne = int(sizeof(extremes) / sizeof(extremes[0]));
  for (int64_t b = 0; b < blocks; ++b) {
    const std::vector<int> fields = halfFields(T);
    for (size_t f = 0; f < fields.size(); ++f) // fields of one block take different extremes
      std::memcpy(&bytes[b * info.blockBytes + fields[f]], &extremes[(b + 3 * f) % ne], 2);
    if (T == GGMLType::MXFP4)
      bytes[b * info.blockBytes] = static_cast<uint8_t>(b % 255);
  }
  std::vector<float> want(k);
  dequantizeRow(T, bytes.data(), want.data(), k);
  for (int64_t c = 0; c < k / 32; ++c) {
    float got[32];
    rt::cuda::loadChunk<T>(bytes.data(), c, k, got);
    for (int j = 0; j < 32; ++j) {
      const float w = want[c * 32 + j];
      if (std::isnan(w) && std::isnan(got[j]))
        continue;
      ASSERT_EQ(std::memcmp(&got[j], &w, 4), 0)
          << ggmlTypeName(T) << " element " << c * 32 + j << ": " << got[j] << " != " << w;
    }
  }
}

TEST(CudaQuant, ChunksMatchCpuDequantizeAtEdgeValues) {
  checkEdges<GGMLType::Q2_K>();
  checkEdges<GGMLType::Q3_K>();
  checkEdges<GGMLType::IQ4_NL>();
  checkEdges<GGMLType::IQ4_XS>();
  checkEdges<GGMLType::MXFP4>();
  checkEdges<GGMLType::Q4_K>(); // the older formats at the same extremes
  checkEdges<GGMLType::Q6_K>();
  checkEdges<GGMLType::Q4_0>();
}

/// The prmt table lookup of the nibble formats: every byte value in every byte position of the word, each
/// nibble's level against Blocks.h's table.
template <GGMLType T> void checkLookup(const int8_t *levels) {
  for (uint32_t v = 0; v < 256; ++v) {
    const uint32_t q = v | ((v + 85) & 0xff) << 8 | ((v + 170) & 0xff) << 16 | ((255 - v) & 0xff) << 24;
    uint32_t lo, hi;
    rt::cuda::lookupNibbles<T>(q, lo, hi);
    for (int j = 0; j < 4; ++j) {
      const uint32_t byte = (q >> (8 * j)) & 0xff;
      ASSERT_EQ(int8_t(lo >> (8 * j)), levels[byte & 0xf])
          << ggmlTypeName(T) << " word " << q << " byte " << j;
      ASSERT_EQ(int8_t(hi >> (8 * j)), levels[byte >> 4])
          << ggmlTypeName(T) << " word " << q << " byte " << j;
    }
  }
}

TEST(CudaQuant, NibbleLookupGivesEveryLevel) {
  checkLookup<GGMLType::IQ4_NL>(kIQ4NLValues);
  checkLookup<GGMLType::IQ4_XS>(kIQ4NLValues);
  checkLookup<GGMLType::MXFP4>(kMXFP4Values);
}

/// d values of the grid test blocks: the smallest subnormal and normal halves, 1, a negative, the largest
/// half and an ordinary one (every product d * sc * q stays exact in float).
const uint16_t kGridHalves[6] = {0x0001, 0x0400, 0x3c00, 0xb800, 0x7bff, 0x2e66};

/// A grid type's chunks (loadChunk<T> on the host, reading the CPU's grid tables) against dequantizeRow, bit
/// for bit, on rows of super-blocks that use every grid index, sign code (IQ1 delta) and scale value
/// (GridBlocks.h); and dotChunk against the plain dot of the decoded chunk.
template <GGMLType T> void checkGridType() {
  std::mt19937 rng(static_cast<uint32_t>(T) + 11);
  const int blocks = std::max(64, tpc::gridtest::gridSize(T) / tpc::gridtest::indicesPerBlock(T));
  const int64_t k = int64_t(blocks) * 256;
  std::vector<uint8_t> bytes(*ggmlRowBytes(T, k));
  tpc::gridtest::fillGridBlocks(T, bytes.data(), blocks, rng, kGridHalves, 6);
  std::vector<float> want(k);
  dequantizeRow(T, bytes.data(), want.data(), k);
  int negative = 0;
  for (int64_t c = 0; c < k / 32; ++c) {
    float got[32], xv[32];
    rt::cuda::loadChunk<T>(bytes.data(), c, k, got);
    double ref = 0, mag = 0;
    for (int j = 0; j < 32; ++j) {
      ASSERT_EQ(got[j], want[c * 32 + j]) << ggmlTypeName(T) << " element " << c * 32 + j;
      negative += got[j] < 0;
      xv[j] = float(int(rng() % 2001) - 1000) / 1000.0f;
      ref += double(got[j]) * xv[j];
      mag += std::fabs(double(got[j]) * xv[j]);
    }
    const float dot = rt::cuda::dotChunk<T>(bytes.data(), c, k, xv, rt::cuda::xSums(xv));
    ASSERT_NEAR(dot, ref, 1e-6 * mag) << ggmlTypeName(T) << " dot of chunk " << c;
  }
  EXPECT_GT(negative, k / 4) << ggmlTypeName(T); // signs (IQ1: deltas) reach the values
}

TEST(CudaQuant, GridChunksMatchCpuDequantize) {
  checkGridType<GGMLType::IQ2_XXS>();
  checkGridType<GGMLType::IQ2_XS>();
  checkGridType<GGMLType::IQ2_S>();
  checkGridType<GGMLType::IQ3_XXS>();
  checkGridType<GGMLType::IQ3_S>();
  checkGridType<GGMLType::IQ1_S>();
  checkGridType<GGMLType::IQ1_M>();
}

/// The integer decode units (IntDot<T>) over whole rows against the double dot product of the
/// dequantized weights. x is built exactly representable in 8 bits per block (x = d * q with |q| <= 127 and
/// 127 reached), so quantizeBlock32 must give back q and the unit dots must match to float rounding: a
/// wrong nibble, scale or quadrant mapping shows as a large error. A second pass with plain random x checks
/// that 8-bit rounding of x stays within 1% of the exact product.
template <GGMLType T> void checkIntDot(int64_t k) {
  using U = rt::cuda::IntDot<T>;
  std::mt19937 rng(static_cast<uint32_t>(T) + 99);
  const GGMLTypeInfo &info = ggmlTypeInfo(T);
  const uint64_t rb = *ggmlRowBytes(T, k);
  const int64_t rows = 3;
  std::vector<uint8_t> bytes(rows * rb + 16); // loadWords may read the aligned word holding the last byte
  for (uint8_t &b : bytes)
    b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (uint64_t blk = 0; blk < rows * rb / info.blockBytes; ++blk) {
    for (int off : halfFields(T)) {
      uint16_t h = fp32ToFp16(scale(rng));
      std::memcpy(&bytes[blk * info.blockBytes + off], &h, 2);
    }
    if (T == GGMLType::MXFP4)
      bytes[blk * info.blockBytes] = static_cast<uint8_t>(116 + rng() % 8);
  }
  if constexpr (rt::cuda::isGridQuant(T)) // every grid index, sign code and scale over the rows
    tpc::gridtest::fillGridBlocks(T, bytes.data(), int(rows * rb / info.blockBytes), rng, kGridHalves, 6);
  for (bool exact : {true, false}) {
    std::vector<float> x(k);
    std::vector<int> want(k);
    for (int64_t b = 0; b < k / 32; ++b) {
      const float d = std::ldexp(1.0f, -int(rng() % 8)); // a power of two: d * q is exact
      for (int i = 0; i < 32; ++i) {
        want[b * 32 + i] = i == int(b % 32) ? (b % 2 ? 127 : -127) : int(rng() % 255) - 127;
        x[b * 32 + i] = exact ? d * float(want[b * 32 + i]) : float(int(rng() % 20001) - 10000) / 1e4f;
      }
    }
    std::vector<int8_t> xq(k);
    std::vector<rt::cuda::XQBlock> xs(k / 32);
    for (int64_t b = 0; b < k / 32; ++b) {
      rt::cuda::quantizeBlock32(&x[b * 32], &xq[b * 32], xs[b]);
      int lo = 0, hi = 0;
      float amax = 0;
      for (int i = 0; i < 32; ++i) {
        if (exact)
          ASSERT_EQ(xq[b * 32 + i], want[b * 32 + i])
              << ggmlTypeName(T) << " block " << b << " element " << i;
        (i < 16 ? lo : hi) += xq[b * 32 + i];
        amax = std::max(amax, std::fabs(x[b * 32 + i]));
        // Each value within half a step (bf16 and f16 rounding of the scale aside).
        ASSERT_NEAR(xs[b].d * xq[b * 32 + i], x[b * 32 + i], 0.51f * xs[b].d + 0.01f * amax);
      }
      ASSERT_FLOAT_EQ(xs[b].lo, xs[b].d * float(lo));
      ASSERT_FLOAT_EQ(xs[b].hi, xs[b].d * float(hi));
    }
    std::vector<float> w(k);
    for (int64_t r = 0; r < rows; ++r) {
      dequantizeRow(T, &bytes[r * rb], w.data(), k);
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < k; ++i) {
        ref += double(w[i]) * x[i];
        mag += std::fabs(double(w[i]) * x[i]);
      }
      double got = 0;
      for (int64_t u = 0; u < k / U::kUnit; ++u)
        got += U::dot(&bytes[r * rb], u, U::loadX(xq.data(), xs.data(), u));
      EXPECT_NEAR(got, ref, (exact ? 1e-5 : 1e-2) * mag)
          << ggmlTypeName(T) << " row " << r << (exact ? " (exact x)" : " (rounded x)");
    }
  }
}

// The CUDA activation blocks are the CPU's ActQ8 blocks, bit for bit (scale, quants, scaled half sums), at
// every magnitude: also below amax 2^-7, where an f16 copy of the scale would be subnormal and lose bits (it
// did, and flipped router near-ties of the quantized MoE fixtures on CUDA that the CPU and the reference
// engine agree on).
TEST(CudaQuant, ActivationBlocksEqualTheCpuActQ8) {
  std::mt19937 rng(11);
  constexpr int64_t k = 128; // one ActQ8 group: four blocks
  for (int e = -30; e <= 10; ++e) {
    std::vector<float> x(k);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float &v : x)
      v = std::ldexp(u(rng), e);
    rt::cpu::ActQ8Group g;
    rt::cpu::quantizeActQ8Row(x.data(), &g, k);
    for (int b = 0; b < 4; ++b) {
      int8_t q[32];
      rt::cuda::XQBlock xb;
      rt::cuda::quantizeBlock32(&x[32 * b], q, xb);
      ASSERT_EQ(xb.d, g.d[b]) << "amax ~2^" << e << " block " << b;
      for (int i = 0; i < 32; ++i)
        ASSERT_EQ(q[i], g.qs[32 * b + i]) << "amax ~2^" << e << " block " << b << " element " << i;
      ASSERT_EQ(xb.lo, g.d[b] * float(g.hs[2 * b])) << "amax ~2^" << e << " block " << b;
      ASSERT_EQ(xb.hi, g.d[b] * float(g.hs[2 * b + 1])) << "amax ~2^" << e << " block " << b;
    }
  }
}

TEST(CudaQuant, IntegerDecodeUnitsMatchTheExactDot) {
  checkIntDot<GGMLType::Q4_0>(512);
  checkIntDot<GGMLType::Q8_0>(512);
  checkIntDot<GGMLType::Q4_K>(768);
  checkIntDot<GGMLType::Q5_K>(768);
  checkIntDot<GGMLType::Q6_K>(768);
  checkIntDot<GGMLType::Q2_K>(768);
  checkIntDot<GGMLType::Q3_K>(768);
  checkIntDot<GGMLType::IQ4_NL>(512);
  checkIntDot<GGMLType::IQ4_XS>(768);
  checkIntDot<GGMLType::MXFP4>(512);
}

TEST(CudaQuant, GridIntegerDecodeUnitsMatchTheExactDot) {
  // 3 rows of 64 super-blocks: every grid index, sign code and scale value (GridBlocks.h).
  checkIntDot<GGMLType::IQ2_XXS>(64 * 256);
  checkIntDot<GGMLType::IQ2_XS>(64 * 256);
  checkIntDot<GGMLType::IQ2_S>(64 * 256);
  checkIntDot<GGMLType::IQ3_XXS>(64 * 256);
  checkIntDot<GGMLType::IQ3_S>(64 * 256);
  checkIntDot<GGMLType::IQ1_S>(64 * 256);
  checkIntDot<GGMLType::IQ1_M>(64 * 256);
}

/// Checks, per dispatched type, that the runtime unit size the GEMV plans with is the unit's.
struct Probe {
  template <GGMLType T> void operator()() {
    if constexpr (rt::cuda::hasIntDot(T))
      EXPECT_EQ(rt::cuda::intDotUnit(T), rt::cuda::IntDot<T>::kUnit) << ggmlTypeName(T);
  }
};

TEST(CudaQuant, SupportedTypesAreTheDispatchedOnes) {
  for (GGMLType t : {GGMLType::Q2_K, GGMLType::Q3_K, GGMLType::Q4_K, GGMLType::Q5_K, GGMLType::Q6_K,
                     GGMLType::IQ4_NL, GGMLType::IQ4_XS, GGMLType::MXFP4, GGMLType::Q4_0, GGMLType::Q8_0}) {
    Probe p;
    EXPECT_TRUE(rt::cuda::dispatchType(t, p)) << ggmlTypeName(t);
    EXPECT_TRUE(rt::cuda::hasIntDot(t)) << ggmlTypeName(t);
  }
  // Activation-only formats have no decoder here.
  for (GGMLType t : {GGMLType::Q8_K, GGMLType::Q8_1}) {
    Probe p;
    EXPECT_FALSE(rt::cuda::dispatchType(t, p)) << ggmlTypeName(t);
    EXPECT_FALSE(rt::cuda::hasIntDot(t)) << ggmlTypeName(t);
  }
}

TEST(CudaQuant, GridTypesAreDispatchedWithIntegerUnits) {
  for (GGMLType t : {GGMLType::IQ2_XXS, GGMLType::IQ2_XS, GGMLType::IQ2_S, GGMLType::IQ3_XXS, GGMLType::IQ3_S,
                     GGMLType::IQ1_S, GGMLType::IQ1_M}) {
    Probe p;
    EXPECT_TRUE(rt::cuda::dispatchType(t, p)) << ggmlTypeName(t);
    EXPECT_TRUE(rt::cuda::hasIntDot(t)) << ggmlTypeName(t);
    EXPECT_TRUE(rt::cuda::isGridQuant(t)) << ggmlTypeName(t);
  }
  EXPECT_FALSE(rt::cuda::isGridQuant(GGMLType::IQ4_XS));
}

} // namespace
