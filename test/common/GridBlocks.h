//===- GridBlocks.h - writing the fields of grid super-blocks in tests -*- C++ -*-===//
//
// The bit positions of ggml's IQ2_XXS .. IQ1_M blocks (BlocksIQ.h), written from the format rather than
// from our decoders, and a generator of super-blocks that together use every grid index, sign code (IQ1
// delta) and scale value: shared by the CPU's GridQuantTest and the CUDA decoder test (QuantChunkTest).
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_COMMON_GRIDBLOCKS_H
#define TPC_TEST_COMMON_GRIDBLOCKS_H

#include "runtime/ggml/GGMLTypes.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>

namespace tpc::gridtest {

/// Writes the half d of a grid super-block (IQ1_M keeps it in the top nibbles of its four scale words).
inline void setGridHalf(GGMLType t, uint8_t *blk, uint16_t h) {
  if (t != GGMLType::IQ1_M) {
    std::memcpy(blk, &h, 2);
    return;
  }
  for (int w = 0; w < 4; ++w)
    blk[48 + 2 * w + 1] = static_cast<uint8_t>((blk[48 + 2 * w + 1] & 0x0f) | (((h >> (4 * w)) & 0xf) << 4));
}

/// Grid entries of a type, and grid indices per super-block (one per 8 elements, per 4 for the IQ3 grids).
inline int gridSize(GGMLType t) {
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
inline int indicesPerBlock(GGMLType t) { return t == GGMLType::IQ3_XXS || t == GGMLType::IQ3_S ? 64 : 32; }

/// Sets grid index number g of a super-block to idx (the bit positions of ggml's block structs).
inline void setIndex(GGMLType t, uint8_t *b, int g, int idx) {
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
inline void putBits(uint8_t *b, int shift, int bits, uint32_t v, int bytes = 4) {
  uint32_t w = 0;
  std::memcpy(&w, b, static_cast<size_t>(bytes));
  const uint32_t mask = ((1u << bits) - 1) << shift;
  w = (w & ~mask) | ((v << shift) & mask);
  std::memcpy(b, &w, static_cast<size_t>(bytes));
}

/// Sets the sign code of group g (of 8 elements) of a super-block: 7 bits where the format stores seven (the
/// eighth is their parity), 8 where it stores a sign byte; for IQ1 the delta bit (of the group, or for IQ1_S
/// of its block).
inline void setSigns(GGMLType t, uint8_t *b, int g, uint32_t code) {
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
inline void setScale(GGMLType t, uint8_t *b, int h, uint32_t ls) {
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
inline void setAllSignsAndScales(GGMLType t, uint8_t *b) {
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

/// Fills `blocks` super-blocks of grid type t at `row` so that together they use every grid index at least
/// once (permuted: the high index bits differ between neighbouring groups), every sign code and scale
/// value: block 0 has every sign negative and every scale at its largest (IQ1: negative deltas), block 1
/// every scale at its smallest, the others cycle through them; the other bits are random and d cycles
/// through `halves`. At least max(64, grid size / indices per block) blocks cover every index.
inline void fillGridBlocks(GGMLType t, uint8_t *row, int blocks, std::mt19937 &rng, const uint16_t *halves,
                           int nHalves) {
  const size_t bytes = ggmlTypeInfo(t).blockBytes;
  const int per = indicesPerBlock(t);
  for (size_t o = 0; o < bytes * static_cast<size_t>(blocks); ++o)
    row[o] = static_cast<uint8_t>(rng());
  const bool iq1 = t == GGMLType::IQ1_S || t == GGMLType::IQ1_M;
  const bool byteSigns = t == GGMLType::IQ2_S || t == GGMLType::IQ3_S;
  for (int i = 0; i < blocks; ++i) {
    uint8_t *blk = row + bytes * static_cast<size_t>(i);
    if (i == 0)
      setAllSignsAndScales(t, blk);
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
    setGridHalf(t, blk, halves[i % nHalves]);
  }
}

} // namespace tpc::gridtest

#endif // TPC_TEST_COMMON_GRIDBLOCKS_H
