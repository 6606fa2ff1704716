//===- GridQuantTest.cpp - the grid formats' tables and dequantization -----===//
//
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M: the compile-time expanded grids against hashes of
// ggml's tables (ggml-common.h), and dequantizeRow against the double-precision element-by-element reference
// of KernelRef.h (gridElement, written from ggml's dequantize_row_iq*) on blocks that use every grid index,
// random signs and scales, both delta signs and d from the smallest subnormal to the largest half.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/quant/Quant.h"
#include "runtime/ggml/BlocksIQ.h"
#include "test/common/GridBlocks.h"
#include "test/runtime/cpu/KernelRef.h"
#include "test/runtime/cpu/TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

using namespace tpc;
using namespace tpc::rt::cpu;
using namespace tpc::rt::cpu::test;
using namespace tpc::gridtest;

namespace {

/// FNV-1a over the table's words, as computed from ggml-common.h's tables when the codes were written.
template <typename Word, size_t N> uint64_t tableHash(const std::array<Word, N> &t) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (Word w : t)
    h = (h ^ static_cast<uint64_t>(w)) * 0x100000001b3ull;
  return h;
}

const GGMLType kGridTypes[] = {GGMLType::IQ2_XXS, GGMLType::IQ2_XS, GGMLType::IQ2_S, GGMLType::IQ3_XXS,
                               GGMLType::IQ3_S,   GGMLType::IQ1_S,  GGMLType::IQ1_M};

} // namespace

TEST(GridLayout, GridsMatchGgmlTables) {
  EXPECT_EQ(tableHash(kIQ2XXSGrid), 0xd8556d755db7ee40ull);
  EXPECT_EQ(tableHash(kIQ2XSGrid), 0x7328de7db0e6bc0aull);
  EXPECT_EQ(tableHash(kIQ2SGrid), 0x46217f96b769fad5ull);
  EXPECT_EQ(tableHash(kIQ3XXSGrid), 0xad67a04de7629a07ull);
  EXPECT_EQ(tableHash(kIQ3SGrid), 0x046782a8383af15bull);
  EXPECT_EQ(tableHash(kIQ1SGrid), 0xadf8b14fb25dfee9ull);
  // A few entries as ggml-common.h spells them.
  EXPECT_EQ(kIQ2XXSGrid[1], 0x080808080808082bull);
  EXPECT_EQ(kIQ2XXSGrid[255], 0x2b2b2b1908081908ull);
  EXPECT_EQ(kIQ2XSGrid[259], 0x190808080819082bull);
  EXPECT_EQ(kIQ2SGrid[515], 0x190808191908192bull);
  EXPECT_EQ(kIQ3XXSGrid[131], 0x14242c1cu);
  EXPECT_EQ(kIQ3SGrid[259], 0x05090903u);
  EXPECT_EQ(kIQ1SGrid[1027], 0x000000000000ff01ull);
  EXPECT_EQ(kIQ1SGrid[2047], 0x0101010101010101ull);
  // ggml's ksigns_iq2xs: the seven bits and their parity.
  EXPECT_EQ(iqSigns(0), 0);
  EXPECT_EQ(iqSigns(1), 129);
  EXPECT_EQ(iqSigns(3), 3);
  EXPECT_EQ(iqSigns(64), 192);
  EXPECT_EQ(iqSigns(126), 126);
  EXPECT_EQ(iqSigns(127), 255);
}

TEST(GridLayout, DequantizeMatchesDefinition) {
  const uint16_t halves[] = {0x0001, 0x0400, 0x3c00, 0xb800, 0x7bff, 0x2e66};
  for (GGMLType t : kGridTypes) {
    const std::string name = ggmlTypeName(t);
    ASSERT_TRUE(supportsDequantize(t)) << name;
    ASSERT_EQ(activationFormat(t), ActFormat::Q8) << name;
    const size_t bytes = ggmlTypeInfo(t).blockBytes;
    const int per = indicesPerBlock(t), blocks = std::max(64, gridSize(t) / per);
    std::mt19937 rng(static_cast<uint32_t>(t));
    std::vector<uint8_t> row(bytes * blocks);
    fillGridBlocks(t, row.data(), blocks, rng, halves, 6);
    const int64_t n = static_cast<int64_t>(blocks) * kQKK;
    std::vector<float> y(static_cast<size_t>(n));
    dequantizeRow(t, row.data(), y.data(), n);
    int negDelta = 0, posDelta = 0;
    for (int64_t e = 0; e < n; ++e) {
      const GridElement want = gridElement(t, row.data() + bytes * (e / kQKK), static_cast<int>(e % kQKK));
      // Every value is exact in float (BlocksIQ.h), so the float result equals the double reference.
      ASSERT_EQ(double(y[static_cast<size_t>(e)]), want.value) << name << " element " << e;
      if (t == GGMLType::IQ1_S || t == GGMLType::IQ1_M) {
        const double frac = want.value / (8 * want.unit) - std::round(want.value / (8 * want.unit));
        negDelta += frac < 0;
        posDelta += frac > 0;
      }
    }
    if (t == GGMLType::IQ1_S || t == GGMLType::IQ1_M) {
      EXPECT_GT(negDelta, 0) << name;
      EXPECT_GT(posDelta, 0) << name;
    }
  }
}

TEST(GridLayout, UnpackedIntegersStayInKernelRanges) {
  // The kernels rely on |q| <= 62 (the sign trick and q + 64 < 128 in the panels) and scales <= 31.
  for (GGMLType t : kGridTypes) {
    const size_t bytes = ggmlTypeInfo(t).blockBytes;
    std::mt19937 rng(3);
    std::vector<uint8_t> blk(bytes);
    int maxQ = 0, maxSc = 0;
    for (int i = 0; i < 400; ++i) {
      for (uint8_t &b : blk)
        b = static_cast<uint8_t>(i < 2 ? (i ? 0xff : 0x00) : rng());
      setGridHalf(t, blk.data(), 0x3c00);
      GridUnpacked u;
      unpackGridBlock(t, blk.data(), u);
      for (int e = 0; e < kQKK; ++e) {
        maxQ = std::max(maxQ, std::abs(int(u.q[e])));
        ASSERT_EQ(double(u.scale) * u.sc[e / 16] * u.q[e], gridElement(t, blk.data(), e).value)
            << ggmlTypeName(t);
      }
      for (int h = 0; h < 16; ++h) {
        ASSERT_EQ(u.sc[h] % 2, 1) << ggmlTypeName(t);
        maxSc = std::max(maxSc, int(u.sc[h]));
      }
    }
    EXPECT_LE(maxQ, 62) << ggmlTypeName(t);
    EXPECT_LE(maxSc, 31) << ggmlTypeName(t);
    EXPECT_GE(maxSc, t == GGMLType::IQ1_S || t == GGMLType::IQ1_M ? 15 : 31) << ggmlTypeName(t);
  }
}
