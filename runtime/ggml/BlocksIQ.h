//===- BlocksIQ.h - the ggml "grid" quantization formats ----------*- C++ -*-===//
//
// The block structs of the lattice ("grid") formats IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M
// (byte for byte ggml-common.h's layout, re-derived), their grids (IQGrids.cpp) and one decoder shared by
// dequantization, the scalar kernels and the tests' layout checks.
//
// Every element of these formats is a grid value (8 or 4 bytes per grid index) times a sign times a per-32
// or per-16 scale (2 ls + 1) times the super-block's half d times a power of two; IQ1_S / IQ1_M add a
// +-1/8 "delta" to the grid value (-1, 0 or 1). So a super-block decodes exactly into integers:
//   x[e] = D * sc[e / 16] * q[e],   D = d * 2^-3 (IQ2_*, IQ1_*), d * 2^-2 (IQ3_XXS) or d (IQ3_S),
// with q = grid * sign (|q| <= 62: IQ2 grids hold 8, 25, 43; IQ3_XXS 4..62; IQ3_S 1..15) or, for IQ1,
// q = 8 grid -+ 1 (the delta times 8: |q| <= 9), and sc = 2 ls + 1 <= 31. Each product is exact in float
// (an 11-bit d times at most 5 + 6 bits), so kernels can take the integer dot of q with 8-bit activations,
// scale it by sc per 16-element half, and convert once per 32-element block (GridUnpacked).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_GGML_BLOCKSIQ_H
#define TPC_RUNTIME_GGML_BLOCKSIQ_H

#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/GGMLTypes.h"

#include <array>
#include <cstdint>
#include <cstring>

namespace tpc {

/// IQ2_XXS: per 32-element block 8 bytes: 4 grid indices (bytes 0-3) into kIQ2XXSGrid, then a 32-bit word of
/// four 7-bit sign codes (bits 7l..7l+6 for the l-th 8 elements, see iqSigns) and the 4-bit scale in bits
/// 28-31.
struct BlockIQ2_XXS {
  uint16_t d;
  uint16_t qs[kQKK / 8];
};
/// IQ2_XS: per 8 elements a 16-bit word: grid index (9 bits, kIQ2XSGrid) and a 7-bit sign code; per 32
/// elements a byte of two 4-bit scales (low nibble the first 16 elements).
struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[kQKK / 8];
  uint8_t scales[kQKK / 32];
};
/// IQ2_S: qs[0..31] low 8 bits of the 10-bit grid indices (kIQ2SGrid), qs[32..63] a full sign byte per 8
/// elements, qh[ib] bits 2l..2l+1 the index's top bits for group l of block ib, scales as IQ2_XS.
struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[kQKK / 4];
  uint8_t qh[kQKK / 32];
  uint8_t scales[kQKK / 32];
};
/// IQ3_XXS: qs[0..63] one grid index (kIQ3XXSGrid, 4 values) per 4 elements, then per 32-element block a
/// 32-bit word of four 7-bit sign codes and the 4-bit scale (bits 28-31), as IQ2_XXS.
struct BlockIQ3_XXS {
  uint16_t d;
  uint8_t qs[3 * kQKK / 8];
};
/// IQ3_S: 9-bit grid indices (kIQ3SGrid, 4 values): low 8 bits in qs, bit 8 of index 8 ib + j in bit j of
/// qh[ib]; a full sign byte per 8 elements; two 4-bit scales per byte (even block in the low nibble).
struct BlockIQ3_S {
  uint16_t d;
  uint8_t qs[kQKK / 4];
  uint8_t qh[kQKK / 32];
  uint8_t signs[kQKK / 8];
  uint8_t scales[kQKK / 64];
};
/// IQ1_S: 11-bit indices into kIQ1SGrid (values -1, 0, 1): low 8 bits in qs, per 32-element block a 16-bit
/// qh: bits 3l..3l+2 the top bits of group l, bits 12-14 the 3-bit scale, bit 15 the delta's sign (set:
/// -1/8).
struct BlockIQ1_S {
  uint16_t d;
  uint8_t qs[kQKK / 8];
  uint16_t qh[kQKK / 32];
};
/// IQ1_M: indices as IQ1_S with the top 3 bits per group of 8 in a nibble of qh (block ib: qh[2 ib] low
/// nibble group 0, high nibble group 1, qh[2 ib + 1] groups 2 and 3; bit 3 of each nibble the group's delta
/// sign), a 3-bit scale per 16 elements (block ib: bits 6 (ib % 2) .. + 5 of the 16-bit word ib / 2) and the
/// super-block's half d in the top nibbles of the four scale words (word w's top nibble = bits 4w..4w+3).
struct BlockIQ1_M {
  uint8_t qs[kQKK / 8];
  uint8_t qh[kQKK / 16];
  uint8_t scales[kQKK / 32];
};

static_assert(sizeof(BlockIQ2_XXS) == 66 && sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82,
              "ggml block size");
static_assert(sizeof(BlockIQ3_XXS) == 98 && sizeof(BlockIQ3_S) == 110, "ggml block size");
static_assert(sizeof(BlockIQ1_S) == 50 && sizeof(BlockIQ1_M) == 56, "ggml block size");

/// The grids (IQGrids.cpp): one 64-bit word per index holding 8 bytes (element j in byte j), or one 32-bit
/// word holding 4; kIQ1SGrid's bytes are int8 (-1, 0, 1), the others unsigned.
extern const std::array<uint64_t, 256> kIQ2XXSGrid;
extern const std::array<uint64_t, 512> kIQ2XSGrid;
extern const std::array<uint64_t, 1024> kIQ2SGrid;
extern const std::array<uint32_t, 256> kIQ3XXSGrid;
extern const std::array<uint32_t, 512> kIQ3SGrid;
extern const std::array<uint64_t, 2048> kIQ1SGrid;

/// The sign byte of a 7-bit sign code (IQ2_XXS, IQ2_XS, IQ3_XXS): bit j set = element j negative; the eighth
/// sign is the parity of the other seven (the formats keep an even count of negative signs).
constexpr uint8_t iqSigns(uint32_t code7) {
  return static_cast<uint8_t>((code7 & 127) | ((__builtin_popcount(code7 & 127) & 1) << 7));
}

/// The half d of an IQ1_M block (the top nibbles of its four scale words).
inline uint16_t iq1mHalf(const BlockIQ1_M &b) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                               (sc[3] & 0xf000));
}

/// A grid super-block as integers: x[e] = scale * sc[e / 16] * q[e] (see the file comment).
struct GridUnpacked {
  float scale;
  int8_t sc[16];
  int8_t q[kQKK];
};

/// True for the seven grid types.
bool isGridType(GGMLType t);

/// Decodes one super-block of grid type t (isGridType) at `block`.
void unpackGridBlock(GGMLType t, const void *block, GridUnpacked &out);

} // namespace tpc

#endif // TPC_RUNTIME_GGML_BLOCKSIQ_H
