//===- GridQuantTest.cpp - the grid formats' tables and dequantization -----===//
//
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M: the compile-time expanded grids against hashes of
// ggml's tables (ggml-common.h), and dequantizeRow against the double-precision element-by-element reference
// of KernelRef.h (gridElement, written from ggml's dequantize_row_iq*) on blocks that use every grid index,
// random signs and scales, both delta signs and d from the smallest subnormal to the largest half.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/quant/Quant.h"
#include "runtime/ggml/BlocksIQ.h"
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

/// Grid entries of a type, and grid indices per super-block (one per 8 elements, per 4 for the IQ3 grids).
int gridSize(GGMLType t) {
  switch (t) {
  case GGMLType::IQ2_XXS:
  case GGMLType::IQ3_XXS:
    return 256;
  case GGMLType::IQ2_XS:
  case GGMLType::IQ3_S:
    return 512;
  case GGMLType::IQ2_S:
    return 1024;
  default:
    return 2048;
  }
}
int indicesPerBlock(GGMLType t) { return t == GGMLType::IQ3_XXS || t == GGMLType::IQ3_S ? 64 : 32; }

/// Sets grid index number g of a super-block to idx (the bit positions of ggml's block structs).
void setIndex(GGMLType t, uint8_t *b, int g, int idx) {
  const int ib = g / 4, l = g % 4;
  auto setBits = [](uint8_t &byte, int shift, int bits, int v) {
    const int mask = ((1 << bits) - 1) << shift;
    byte = static_cast<uint8_t>((byte & ~mask) | ((v << shift) & mask));
  };
  switch (t) {
  case GGMLType::IQ2_XXS:
    b[2 + 8 * ib + l] = static_cast<uint8_t>(idx);
    break;
  case GGMLType::IQ2_XS:
    b[2 + 2 * g] = static_cast<uint8_t>(idx);
    setBits(b[3 + 2 * g], 0, 1, idx >> 8);
    break;
  case GGMLType::IQ2_S:
    b[2 + g] = static_cast<uint8_t>(idx);
    setBits(b[66 + ib], 2 * l, 2, idx >> 8);
    break;
  case GGMLType::IQ3_XXS:
    b[2 + g] = static_cast<uint8_t>(idx);
    break;
  case GGMLType::IQ3_S:
    b[2 + g] = static_cast<uint8_t>(idx);
    setBits(b[66 + g / 8], g % 8, 1, idx >> 8);
    break;
  case GGMLType::IQ1_S: { // bits 3l..3l+2 of the 16-bit qh word of block ib
    b[2 + g] = static_cast<uint8_t>(idx);
    uint16_t h;
    std::memcpy(&h, b + 34 + 2 * ib, 2);
    h = static_cast<uint16_t>((h & ~(7 << (3 * l))) | ((idx >> 8) << (3 * l)));
    std::memcpy(b + 34 + 2 * ib, &h, 2);
    break;
  }
  case GGMLType::IQ1_M:
    b[g] = static_cast<uint8_t>(idx);
    setBits(b[32 + 2 * ib + l / 2], 4 * (l % 2), 3, idx >> 8);
    break;
  default:
    break;
  }
}

/// Writes `bits` bits of v at bit `shift` of the little-endian word of `bytes` (<= 4) bytes at b.
void putBits(uint8_t *b, int shift, int bits, uint32_t v, int bytes = 4) {
  uint32_t w = 0;
  std::memcpy(&w, b, static_cast<size_t>(bytes));
  const uint32_t mask = ((1u << bits) - 1) << shift;
  w = (w & ~mask) | ((v << shift) & mask);
  std::memcpy(b, &w, static_cast<size_t>(bytes));
}

/// Sets the sign code of group g (of 8 elements) of a super-block: 7 bits where the format stores seven (the
/// eighth is their parity), 8 where it stores a sign byte; for IQ1 the delta bit (of the group, or for IQ1_S of
/// its block).
void setSigns(GGMLType t, uint8_t *b, int g, uint32_t code) {
  const int ib = g / 4, l = g % 4;
  switch (t) {
  case GGMLType::IQ2_XXS:
    return putBits(b + 2 + 8 * ib + 4, 7 * l, 7, code);
  case GGMLType::IQ2_XS:
    return putBits(b + 2 + 2 * g, 9, 7, code);
  case GGMLType::IQ2_S:
    return putBits(b + 34 + g, 0, 8, code);
  case GGMLType::IQ3_XXS:
    return putBits(b + 66 + 4 * ib, 7 * l, 7, code);
  case GGMLType::IQ3_S:
    return putBits(b + 74 + g, 0, 8, code);
  case GGMLType::IQ1_S:
    return putBits(b + 34 + 2 * ib, 15, 1, code, 2);
  case GGMLType::IQ1_M:
    return putBits(b + 32 + 2 * ib + l / 2, 4 * (l % 2) + 3, 1, code, 1);
  default:
    return;
  }
}

/// Sets the scale field ls of half h (16 elements) of a super-block; the formats with one scale per 32 take
/// the even halves' values.
void setScale(GGMLType t, uint8_t *b, int h, uint32_t ls) {
  const int ib = h / 2;
  switch (t) {
  case GGMLType::IQ2_XXS:
    return putBits(b + 2 + 8 * ib + 4, 28, 4, ls);
  case GGMLType::IQ2_XS:
    return putBits(b + 66 + ib, 4 * (h % 2), 4, ls);
  case GGMLType::IQ2_S:
    return putBits(b + 74 + ib, 4 * (h % 2), 4, ls);
  case GGMLType::IQ3_XXS:
    return putBits(b + 66 + 4 * ib, 28, 4, ls);
  case GGMLType::IQ3_S:
    return putBits(b + 106 + ib / 2, 4 * (ib % 2), 4, ls);
  case GGMLType::IQ1_S:
    return putBits(b + 34 + 2 * ib, 12, 3, ls, 2);
  case GGMLType::IQ1_M:
    return putBits(b + 48 + 2 * (ib / 2), 6 * (ib % 2) + 3 * (h % 2), 3, ls, 2);
  default:
    return;
  }
}

/// Sets every sign, scale and delta bit of a super-block (grid index bits are set again by setIndex).
void setAllSignsAndScales(GGMLType t, uint8_t *b) {
  const size_t bytes = ggmlTypeInfo(t).blockBytes;
  for (size_t o = 0; o < bytes; ++o) {
    bool all = false;
    switch (t) {
    case GGMLType::IQ2_XXS:
      // the sign/scale words
      all = o >= 2 && (o - 2) % 8 >= 4;
      break;
    case GGMLType::IQ2_XS:
      // scales; signs in the high bytes
      all = o >= 66 || (o >= 2 && o % 2 == 1);
      break;
    case GGMLType::IQ2_S:
      // signs, scales
      all = o >= 34 && (o < 66 || o >= 74);
      break;
    case GGMLType::IQ3_XXS:
      all = o >= 66;
      break;
    case GGMLType::IQ3_S:
      all = o >= 74;
      break;
    case GGMLType::IQ1_S:
      // qh high bytes: scale, delta
      all = o >= 34 && o % 2 == 1;
      break;
    case GGMLType::IQ1_M:
      // delta bits (and index bits)
      all = o >= 32 && o < 48;
      break;
    default:
      break;
    }
    if (all)
      b[o] = 0xff;
  }
  if (t == GGMLType::IQ1_M)
    for (int w = 0; w < 4; ++w) { // the 3-bit scales, not the d nibbles
      b[48 + 2 * w] = 0xff;
      b[49 + 2 * w] |= 0x0f;
    }
}

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
    for (uint8_t &b : row)
      b = static_cast<uint8_t>(rng());
    for (int i = 0; i < blocks; ++i) {
      uint8_t *blk = row.data() + bytes * i;
      // Every grid index at least once, at every position over the blocks.
      // The first block: every sign and scale field at its maximum (all signs negative, largest scales, IQ1's
      // negative deltas); the others random.
      if (i == 0)
        setAllSignsAndScales(t, blk);
      // Every grid index, sign code (and IQ1 delta) and scale value at least once; the blocks after the
      // first two cycle through them, block 1 has every scale at its smallest.
      const bool iq1 = t == GGMLType::IQ1_S || t == GGMLType::IQ1_M;
      const bool byteSigns = t == GGMLType::IQ2_S || t == GGMLType::IQ3_S;
      // (An odd multiplier permutes the indices, so their high bits differ between neighbouring groups.)
      for (int g = 0; g < per; ++g)
        setIndex(t, blk, g, ((i * per + g) * 97) % gridSize(t));
      if (i >= 2) {
        for (int g = 0; g < 32; ++g)
          setSigns(t, blk, g, static_cast<uint32_t>(i * 32 + g) % (iq1 ? 2 : byteSigns ? 256 : 128));
        for (int h = 0; h < 16; ++h)
          setScale(t, blk, h, static_cast<uint32_t>(i + h) % (iq1 ? 8 : 16));
      } else if (i == 1) {
        for (int h = 0; h < 16; ++h)
          setScale(t, blk, h, 0);
      }
      setGridHalf(t, blk, halves[i % 6]);
    }
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
