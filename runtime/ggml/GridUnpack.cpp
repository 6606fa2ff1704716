//===- GridUnpack.cpp - grid super-blocks decoded to integers --------------===//
//
// The scalar decoder of the seven grid formats (BlocksIQ.h), written from ggml's dequantize_row_iq* (the
// format definition): dequantization multiplies its integers out, the scalar kernels dot them with 8-bit
// activations. Clarity over speed: the SIMD kernels have their own unpackers (GridUnpackX86.inc).
//===----------------------------------------------------------------------===//
#include "runtime/ggml/BlocksIQ.h"

namespace tpc {
namespace {

/// Element j of a grid word.
template <typename Word> inline int gridByte(Word w, int j) { return static_cast<uint8_t>(w >> (8 * j)); }

/// Eight grid values with their signs (bit j of `signs` set: element j negative) into q.
inline void putSigned8(uint64_t grid, uint8_t signs, int8_t *q) {
  for (int j = 0; j < 8; ++j)
    q[j] = static_cast<int8_t>((signs >> j) & 1 ? -gridByte(grid, j) : gridByte(grid, j));
}

/// Two 4-value grid words (elements 0-3 and 4-7) with their signs into q.
inline void putSigned4x2(uint32_t lo, uint32_t hi, uint8_t signs, int8_t *q) {
  putSigned8(lo | static_cast<uint64_t>(hi) << 32, signs, q);
}

/// An IQ1 group of 8: 8 grid + delta (delta = -1 when `negDelta`, else +1); the grid bytes are int8.
inline void putIQ1(uint64_t grid, bool negDelta, int8_t *q) {
  for (int j = 0; j < 8; ++j)
    q[j] = static_cast<int8_t>(8 * static_cast<int8_t>(gridByte(grid, j)) + (negDelta ? -1 : 1));
}

void unpackIQ2XXS(const BlockIQ2_XXS &x, GridUnpacked &o) {
  o.scale = fp16ToFp32(x.d) * 0.125f;
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t idx, ss;
    std::memcpy(&idx, x.qs + 4 * ib, 4);
    std::memcpy(&ss, x.qs + 4 * ib + 2, 4);
    o.sc[2 * ib] = o.sc[2 * ib + 1] = static_cast<int8_t>(2 * (ss >> 28) + 1);
    for (int l = 0; l < 4; ++l)
      putSigned8(kIQ2XXSGrid[(idx >> (8 * l)) & 255], iqSigns(ss >> (7 * l)), o.q + 32 * ib + 8 * l);
  }
}

void unpackIQ2XS(const BlockIQ2_XS &x, GridUnpacked &o) {
  o.scale = fp16ToFp32(x.d) * 0.125f;
  for (int ib = 0; ib < 8; ++ib) {
    o.sc[2 * ib] = static_cast<int8_t>(2 * (x.scales[ib] & 0xf) + 1);
    o.sc[2 * ib + 1] = static_cast<int8_t>(2 * (x.scales[ib] >> 4) + 1);
    for (int l = 0; l < 4; ++l) {
      const uint16_t w = x.qs[4 * ib + l];
      putSigned8(kIQ2XSGrid[w & 511], iqSigns(w >> 9), o.q + 32 * ib + 8 * l);
    }
  }
}

void unpackIQ2S(const BlockIQ2_S &x, GridUnpacked &o) {
  o.scale = fp16ToFp32(x.d) * 0.125f;
  for (int ib = 0; ib < 8; ++ib) {
    o.sc[2 * ib] = static_cast<int8_t>(2 * (x.scales[ib] & 0xf) + 1);
    o.sc[2 * ib + 1] = static_cast<int8_t>(2 * (x.scales[ib] >> 4) + 1);
    for (int l = 0; l < 4; ++l) {
      const int idx = x.qs[4 * ib + l] | (((x.qh[ib] >> (2 * l)) & 3) << 8);
      putSigned8(kIQ2SGrid[idx], x.qs[32 + 4 * ib + l], o.q + 32 * ib + 8 * l);
    }
  }
}

void unpackIQ3XXS(const BlockIQ3_XXS &x, GridUnpacked &o) {
  o.scale = fp16ToFp32(x.d) * 0.25f;
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t ss;
    std::memcpy(&ss, x.qs + 64 + 4 * ib, 4);
    o.sc[2 * ib] = o.sc[2 * ib + 1] = static_cast<int8_t>(2 * (ss >> 28) + 1);
    for (int l = 0; l < 4; ++l)
      putSigned4x2(kIQ3XXSGrid[x.qs[8 * ib + 2 * l]], kIQ3XXSGrid[x.qs[8 * ib + 2 * l + 1]],
                   iqSigns(ss >> (7 * l)), o.q + 32 * ib + 8 * l);
  }
}

void unpackIQ3S(const BlockIQ3_S &x, GridUnpacked &o) {
  o.scale = fp16ToFp32(x.d);
  for (int ib = 0; ib < 8; ++ib) {
    o.sc[2 * ib] = o.sc[2 * ib + 1] =
        static_cast<int8_t>(2 * ((x.scales[ib / 2] >> (4 * (ib % 2))) & 0xf) + 1);
    for (int l = 0; l < 4; ++l) {
      const int i0 = x.qs[8 * ib + 2 * l] | (((x.qh[ib] >> (2 * l)) & 1) << 8);
      const int i1 = x.qs[8 * ib + 2 * l + 1] | (((x.qh[ib] >> (2 * l + 1)) & 1) << 8);
      putSigned4x2(kIQ3SGrid[i0], kIQ3SGrid[i1], x.signs[4 * ib + l], o.q + 32 * ib + 8 * l);
    }
  }
}

void unpackIQ1S(const BlockIQ1_S &x, GridUnpacked &o) {
  o.scale = fp16ToFp32(x.d) * 0.125f;
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t h = x.qh[ib];
    o.sc[2 * ib] = o.sc[2 * ib + 1] = static_cast<int8_t>(2 * ((h >> 12) & 7) + 1);
    for (int l = 0; l < 4; ++l)
      putIQ1(kIQ1SGrid[x.qs[4 * ib + l] | (((h >> (3 * l)) & 7) << 8)], h & 0x8000, o.q + 32 * ib + 8 * l);
  }
}

void unpackIQ1M(const BlockIQ1_M &x, GridUnpacked &o) {
  o.scale = fp16ToFp32(iq1mHalf(x)) * 0.125f;
  uint16_t sc[4];
  std::memcpy(sc, x.scales, 8);
  for (int ib = 0; ib < 8; ++ib) {
    const int bits = sc[ib / 2] >> (6 * (ib % 2));
    o.sc[2 * ib] = static_cast<int8_t>(2 * (bits & 7) + 1);
    o.sc[2 * ib + 1] = static_cast<int8_t>(2 * ((bits >> 3) & 7) + 1);
    for (int l = 0; l < 4; ++l) {
      const int nib = (x.qh[2 * ib + l / 2] >> (4 * (l % 2))) & 0xf;
      putIQ1(kIQ1SGrid[x.qs[4 * ib + l] | ((nib & 7) << 8)], nib & 8, o.q + 32 * ib + 8 * l);
    }
  }
}

} // namespace

bool isGridType(GGMLType t) {
  switch (t) {
  case GGMLType::IQ2_XXS:
  case GGMLType::IQ2_XS:
  case GGMLType::IQ2_S:
  case GGMLType::IQ3_XXS:
  case GGMLType::IQ3_S:
  case GGMLType::IQ1_S:
  case GGMLType::IQ1_M:
    return true;
  default:
    return false;
  }
}

void unpackGridBlock(GGMLType t, const void *block, GridUnpacked &out) {
  switch (t) {
  case GGMLType::IQ2_XXS:
    return unpackIQ2XXS(*static_cast<const BlockIQ2_XXS *>(block), out);
  case GGMLType::IQ2_XS:
    return unpackIQ2XS(*static_cast<const BlockIQ2_XS *>(block), out);
  case GGMLType::IQ2_S:
    return unpackIQ2S(*static_cast<const BlockIQ2_S *>(block), out);
  case GGMLType::IQ3_XXS:
    return unpackIQ3XXS(*static_cast<const BlockIQ3_XXS *>(block), out);
  case GGMLType::IQ3_S:
    return unpackIQ3S(*static_cast<const BlockIQ3_S *>(block), out);
  case GGMLType::IQ1_S:
    return unpackIQ1S(*static_cast<const BlockIQ1_S *>(block), out);
  case GGMLType::IQ1_M:
    return unpackIQ1M(*static_cast<const BlockIQ1_M *>(block), out);
  default:
    break;
  }
}

} // namespace tpc
