//===- QuantGrid.cuh - the IQ grid types on the device -------------*- CUDA -*-===//
//
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M (runtime/ggml/BlocksIQ.h) for the CUDA kernels:
// their chunk decoder (gridChunk, which loadChunk<T> calls) and their integer decode units (IntDot<T>).
// Included by Quant.cuh after its helpers; everything is __host__ __device__ so QuantChunkTest checks it
// on the host against the CPU's dequantization.
//
// A chunk of 32 elements is one block ib of a super-block: per 8 elements a grid index (for IQ3 two, each
// of 4 values) and 8 signs (7 stored, the eighth their parity, or a sign byte), per 16 or 32 a scale. The
// grids are the expansion of IQGridCodes.h (the CPU's tables come from the same codes): on the device as
// global __device__ arrays read through the read-only cache. Not __constant__: the lanes of a warp look up
// different indices, and the constant cache serves a warp's different addresses one after the other.
// On the host the decoder reads the CPU's tables (BlocksIQ.h).
//
// Every value is x = D * sc * q exactly (BlocksIQ.h), so the decoder computes (D * sc) * q as the CPU's
// dequantization does and the chunks match it bit for bit. The integer unit builds the 32 q as signed dp4a
// words ((g ^ m) + (m & 1) per byte, m = 0xff for a negative sign: carry-free as no grid value is 0) and
// applies sc per 16-element half to the integer sums; IQ1's q = 8 g +- 1 is dotted as 8 (g . x) +- sum(x),
// the group sums of x taken once per activation block (loadX).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_QUANTGRID_CUH
#define TPC_RUNTIME_CUDA_QUANTGRID_CUH

#include "runtime/ggml/BlocksIQ.h"
#include "runtime/ggml/IQGridCodes.h"

namespace tpc::rt::cuda {

#define TPC_GRID_TRAITS(T, bytes)                                                                            \
  template <> struct QuantTraits<GGMLType::T> {                                                              \
    static constexpr int kElems = 256, kBytes = bytes;                                                       \
    static constexpr bool kPlain = false;                                                                    \
  };
TPC_GRID_TRAITS(IQ2_XXS, 66)
TPC_GRID_TRAITS(IQ2_XS, 74)
TPC_GRID_TRAITS(IQ2_S, 82)
TPC_GRID_TRAITS(IQ3_XXS, 98)
TPC_GRID_TRAITS(IQ3_S, 110)
TPC_GRID_TRAITS(IQ1_S, 50)
TPC_GRID_TRAITS(IQ1_M, 56)
#undef TPC_GRID_TRAITS
static_assert(QuantTraits<GGMLType::IQ2_XXS>::kBytes == sizeof(BlockIQ2_XXS) &&
                  QuantTraits<GGMLType::IQ2_XS>::kBytes == sizeof(BlockIQ2_XS) &&
                  QuantTraits<GGMLType::IQ2_S>::kBytes == sizeof(BlockIQ2_S) &&
                  QuantTraits<GGMLType::IQ3_XXS>::kBytes == sizeof(BlockIQ3_XXS) &&
                  QuantTraits<GGMLType::IQ3_S>::kBytes == sizeof(BlockIQ3_S) &&
                  QuantTraits<GGMLType::IQ1_S>::kBytes == sizeof(BlockIQ1_S) &&
                  QuantTraits<GGMLType::IQ1_M>::kBytes == sizeof(BlockIQ1_M),
              "grid block sizes");

/// The device's grids: element j of entry i in byte j (IQ1_S's as int8), as the CPU's kIQ*Grid.
struct DeviceGrids {
  uint64_t iq2xxs[256], iq2xs[512], iq2s[1024], iq1s[2048];
  uint32_t iq3xxs[256], iq3s[512];
};
template <typename Word, int W, int Bits, size_t N>
constexpr void expandGrid(Word (&out)[N], const uint16_t (&codes)[N], const uint8_t *levels) {
  for (size_t i = 0; i < N; ++i)
    out[i] = iqgrid::expandEntry<Word, W, Bits>(codes, levels, i);
}
constexpr DeviceGrids deviceGrids() {
  DeviceGrids g{};
  expandGrid<uint64_t, 8, 2>(g.iq2xxs, iqgrid::kIQ2XXSCodes, iqgrid::kIQ2Levels);
  expandGrid<uint64_t, 8, 2>(g.iq2xs, iqgrid::kIQ2XSCodes, iqgrid::kIQ2Levels);
  expandGrid<uint64_t, 8, 2>(g.iq2s, iqgrid::kIQ2SCodes, iqgrid::kIQ2Levels);
  expandGrid<uint64_t, 8, 2>(g.iq1s, iqgrid::kIQ1SCodes, iqgrid::kIQ1Levels);
  expandGrid<uint32_t, 4, 3>(g.iq3xxs, iqgrid::kIQ3XXSCodes, iqgrid::kIQ3XXSLevels);
  expandGrid<uint32_t, 4, 3>(g.iq3s, iqgrid::kIQ3SCodes, iqgrid::kIQ3SLevels);
  return g;
}
#ifdef __CUDACC__
/// Evaluated by the compiler (33 KB of initialized global data per translation unit that includes this).
static __device__ const DeviceGrids kDeviceGrids = deviceGrids();
#endif

/// Entry i of the 8-value grid of T (IQ2_*, IQ1_*) as two words: elements 0-3, 4-7.
template <GGMLType T> __host__ __device__ __forceinline__ uint2 grid8(uint32_t i) {
#ifdef __CUDA_ARCH__
  const uint64_t *g = T == GGMLType::IQ2_XXS  ? kDeviceGrids.iq2xxs
                      : T == GGMLType::IQ2_XS ? kDeviceGrids.iq2xs
                      : T == GGMLType::IQ2_S  ? kDeviceGrids.iq2s
                                              : kDeviceGrids.iq1s;
  const uint64_t v = __ldg(g + i);
#else
  const uint64_t v = T == GGMLType::IQ2_XXS  ? kIQ2XXSGrid[i]
                     : T == GGMLType::IQ2_XS ? kIQ2XSGrid[i]
                     : T == GGMLType::IQ2_S  ? kIQ2SGrid[i]
                                             : kIQ1SGrid[i];
#endif
  return uint2{uint32_t(v), uint32_t(v >> 32)};
}
/// Entry i of the 4-value grid of T (IQ3_XXS, IQ3_S).
template <GGMLType T> __host__ __device__ __forceinline__ uint32_t grid4(uint32_t i) {
#ifdef __CUDA_ARCH__
  return __ldg((T == GGMLType::IQ3_XXS ? kDeviceGrids.iq3xxs : kDeviceGrids.iq3s) + i);
#else
  return T == GGMLType::IQ3_XXS ? kIQ3XXSGrid[i] : kIQ3SGrid[i];
#endif
}

/// The sign byte of a 7-bit sign code (bit 7 the parity of the seven: BlocksIQ.h iqSigns).
__host__ __device__ __forceinline__ uint32_t signs8(uint32_t code) {
  code &= 127;
#ifdef __CUDA_ARCH__
  return code | ((__popc(code) & 1) << 7);
#else
  return code | ((__builtin_popcount(code) & 1) << 7);
#endif
}

/// The bytes of a chunk that its decoding reads (fetch apart from the grid lookups, so the GEMVs can have
/// many rows' loads in flight): per type up to four words, and d as f16 bits.
struct GridRaw {
  uint32_t w[4];
  uint32_t d;
};
/// Chunk c of a row of grid type T (block c % 8 of super-block c / 8). The blocks are 2-byte aligned
/// (IQ1_M's 8-byte aligned), so words are joined from half-words.
template <GGMLType T> __host__ __device__ __forceinline__ GridRaw gridFetch(const uint8_t *row, int64_t c) {
  const uint8_t *b = row + (c >> 3) * QuantTraits<T>::kBytes;
  const int ib = int(c & 7);
  GridRaw r{{0, 0, 0, 0}, 0};
  if constexpr (T == GGMLType::IQ1_M) {
    r.w[0] = ld32(b + 4 * ib);      // qs: 8 low index bits per group
    r.w[1] = ld16(b + 32 + 2 * ib); // qh: a nibble per group
    r.w[2] = ld32(b + 48);          // the four scale words (d in their top nibbles)
    r.w[3] = ld32(b + 52);
    // iq1mHalf: the top nibble of scale word w is bits 4w..4w+3 of d.
    r.d = ((r.w[2] >> 12) & 0xf) | ((r.w[2] >> 24) & 0xf0) | ((r.w[3] >> 4) & 0xf00) |
          ((r.w[3] >> 16) & 0xf000);
    return r;
  } else {
    r.d = ld16(b);
  }
  if constexpr (T == GGMLType::IQ2_XXS) { // 4 index bytes, the sign/scale word
    r.w[0] = ld32h(b + 2 + 8 * ib);
    r.w[1] = ld32h(b + 6 + 8 * ib);
  } else if constexpr (T == GGMLType::IQ2_XS) { // 4 index/sign half-words, the scale byte
    r.w[0] = ld32h(b + 2 + 8 * ib);
    r.w[1] = ld32h(b + 6 + 8 * ib);
    r.w[2] = b[66 + ib];
  } else if constexpr (T == GGMLType::IQ2_S) { // 4 index bytes, 4 sign bytes, qh | scales << 8
    r.w[0] = ld32h(b + 2 + 4 * ib);
    r.w[1] = ld32h(b + 34 + 4 * ib);
    r.w[2] = b[66 + ib] | (uint32_t(b[74 + ib]) << 8);
  } else if constexpr (T == GGMLType::IQ3_XXS) { // 8 index bytes, the sign/scale word
    r.w[0] = ld32h(b + 2 + 8 * ib);
    r.w[1] = ld32h(b + 6 + 8 * ib);
    r.w[2] = ld32h(b + 66 + 4 * ib);
  } else if constexpr (T == GGMLType::IQ3_S) { // 8 index bytes, 4 sign bytes, qh | the block's scale << 8
    r.w[0] = ld32h(b + 2 + 8 * ib);
    r.w[1] = ld32h(b + 6 + 8 * ib);
    r.w[2] = ld32h(b + 74 + 4 * ib);
    r.w[3] = b[66 + ib] | (((uint32_t(b[106 + ib / 2]) >> (4 * (ib % 2))) & 0xf) << 8);
  } else if constexpr (T == GGMLType::IQ1_S) { // 4 index bytes, qh
    r.w[0] = ld32h(b + 2 + 4 * ib);
    r.w[1] = ld16(b + 34 + 2 * ib);
  }
  return r;
}

/// A decoded chunk: q[e] = +-(byte e % 4 of g[e / 4]) with bit e of `signs` the sign, or for IQ1
/// q[e] = 8 g +- 1 (g int8, bit e / 8 of negDelta set: -1); x[e] = d * sc * q[e], sc0 for e < 16.
struct GridBlock {
  uint32_t g[8];
  uint32_t signs, negDelta;
  int sc0, sc1;
  float d;
};
template <GGMLType T> __host__ __device__ __forceinline__ GridBlock gridBlock(const GridRaw &r, int ib) {
  GridBlock k;
  k.signs = k.negDelta = 0;
  const float d = halfBits(uint16_t(r.d));
  if constexpr (T == GGMLType::IQ2_XXS || T == GGMLType::IQ3_XXS) {
    const uint32_t ss = T == GGMLType::IQ2_XXS ? r.w[1] : r.w[2];
    k.sc0 = k.sc1 = int(2 * (ss >> 28) + 1);
    k.d = d * (T == GGMLType::IQ2_XXS ? 0.125f : 0.25f);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      k.signs |= signs8(ss >> (7 * l)) << (8 * l);
      if constexpr (T == GGMLType::IQ2_XXS) {
        const uint2 g = grid8<T>(byteOf(r.w[0], l));
        k.g[2 * l] = g.x, k.g[2 * l + 1] = g.y;
      } else {
        const uint32_t idx = l < 2 ? r.w[0] : r.w[1];
        k.g[2 * l] = grid4<T>(byteOf(idx, 2 * (l & 1)));
        k.g[2 * l + 1] = grid4<T>(byteOf(idx, 2 * (l & 1) + 1));
      }
    }
  } else if constexpr (T == GGMLType::IQ2_XS) {
    k.sc0 = int(2 * (r.w[2] & 0xf) + 1), k.sc1 = int(2 * (r.w[2] >> 4) + 1);
    k.d = d * 0.125f;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t e = ((l < 2 ? r.w[0] : r.w[1]) >> (16 * (l & 1))) & 0xffff;
      const uint2 g = grid8<T>(e & 511);
      k.g[2 * l] = g.x, k.g[2 * l + 1] = g.y;
      k.signs |= signs8(e >> 9) << (8 * l);
    }
  } else if constexpr (T == GGMLType::IQ2_S) {
    k.sc0 = int(2 * ((r.w[2] >> 8) & 0xf) + 1), k.sc1 = int(2 * ((r.w[2] >> 12) & 0xf) + 1);
    k.d = d * 0.125f;
    k.signs = r.w[1];
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint2 g = grid8<T>(byteOf(r.w[0], l) | (((r.w[2] >> (2 * l)) & 3) << 8));
      k.g[2 * l] = g.x, k.g[2 * l + 1] = g.y;
    }
  } else if constexpr (T == GGMLType::IQ3_S) {
    k.sc0 = k.sc1 = int(2 * (r.w[3] >> 8) + 1);
    k.d = d;
    k.signs = r.w[2];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      k.g[i] = grid4<T>(byteOf(i < 4 ? r.w[0] : r.w[1], i & 3) | (((r.w[3] >> i) & 1) << 8));
  } else if constexpr (T == GGMLType::IQ1_S) {
    const uint32_t h = r.w[1];
    k.sc0 = k.sc1 = int(2 * ((h >> 12) & 7) + 1);
    k.d = d * 0.125f;
    k.negDelta = h & 0x8000 ? 0xf : 0;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint2 g = grid8<T>(byteOf(r.w[0], l) | (((h >> (3 * l)) & 7) << 8));
      k.g[2 * l] = g.x, k.g[2 * l + 1] = g.y;
    }
  } else if constexpr (T == GGMLType::IQ1_M) {
    const uint32_t scw = ((ib < 4 ? r.w[2] : r.w[3]) >> (16 * ((ib >> 1) & 1))) >> (6 * (ib & 1));
    k.sc0 = int(2 * (scw & 7) + 1), k.sc1 = int(2 * ((scw >> 3) & 7) + 1);
    k.d = d * 0.125f;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t nib = (r.w[1] >> (4 * l)) & 0xf;
      const uint2 g = grid8<T>(byteOf(r.w[0], l) | ((nib & 7) << 8));
      k.g[2 * l] = g.x, k.g[2 * l + 1] = g.y;
      k.negDelta |= (nib >> 3) << l;
    }
  }
  return k;
}

/// Elements [32c, 32c + 32) of a row of grid type T, as floats (loadChunk's grid branch).
template <GGMLType T>
__host__ __device__ __forceinline__ void gridChunk(const uint8_t *row, int64_t c, float w[32]) {
  const GridBlock k = gridBlock<T>(gridFetch<T>(row, c), int(c & 7));
  const float d0 = k.d * float(k.sc0), d1 = k.d * float(k.sc1);
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int e = 4 * i + j;
      float q;
      if constexpr (T == GGMLType::IQ1_S || T == GGMLType::IQ1_M)
        q = float(8 * sbyte(k.g[i], j) + ((k.negDelta >> (i / 2)) & 1 ? -1 : 1));
      else
        q = (k.signs >> e) & 1 ? -byteF(k.g[i], j) : byteF(k.g[i], j);
      w[e] = (i < 4 ? d0 : d1) * q;
    }
}

/// Four grid bytes g with the signs of the low 4 bits of s (bit j: byte j negative) as a signed dp4a word:
/// m spreads bit j to 0xff in byte j (the four shifted copies do not overlap), then (g ^ m) + 1 = -g per
/// negative byte, without a carry since no grid value is 0.
__host__ __device__ __forceinline__ int signedWord(uint32_t g, uint32_t s) {
  const uint32_t m = (((s & 0xf) * 0x00204081u) & 0x01010101u) * 0xffu;
  return int((g ^ m) + (m & 0x01010101u));
}

/// The integer decode unit of a grid type: one 32-element block (chunk), its activations one XQBlock.
template <GGMLType T> struct IntDotGrid {
  static constexpr bool kIQ1 = T == GGMLType::IQ1_S || T == GGMLType::IQ1_M;
  static constexpr int kUnit = 32, kFetchRows = 4;
  /// The block's 32 int8 activations, their scale and (IQ1) the sums of each group of 8.
  struct X {
    int q[8];
    int gs[4];
    float d;
  };
  __host__ __device__ static X loadX(const int8_t *q, const XQBlock *s, int64_t u) {
    X x;
    loadX16(q + 32 * u, x.q);
    loadX16(q + 32 * u + 16, x.q + 4);
    x.d = s[u].d;
#pragma unroll
    for (int l = 0; l < 4; ++l)
      x.gs[l] = kIQ1 ? dp4a(x.q[2 * l + 1], 0x01010101, dp4a(x.q[2 * l], 0x01010101, 0)) : 0;
    return x;
  }
  using Raw = GridRaw;
  __host__ __device__ static Raw fetch(const uint8_t *row, int64_t u) { return gridFetch<T>(row, u); }
  /// The 32 q as signed dp4a words (IQ1: the int8 grid values g), the half scales, d and IQ1's deltas.
  struct W {
    int q[8];
    int sc0, sc1;
    uint32_t negDelta;
    float d;
  };
  __host__ __device__ static W prep(const Raw &r, int64_t u) {
    const GridBlock k = gridBlock<T>(r, int(u & 7));
    W w;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      w.q[i] = kIQ1 ? int(k.g[i]) : signedWord(k.g[i], k.signs >> (4 * i));
    w.sc0 = k.sc0, w.sc1 = k.sc1, w.negDelta = k.negDelta, w.d = k.d;
    return w;
  }
  __host__ __device__ static float dot(const W &w, const X &x) {
    int half[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int sum = 0;
#pragma unroll
      for (int l = 2 * h; l < 2 * h + 2; ++l) {
        const int gq = dp4a(w.q[2 * l + 1], x.q[2 * l + 1], dp4a(w.q[2 * l], x.q[2 * l], 0));
        sum += kIQ1 ? 8 * gq + ((w.negDelta >> l) & 1 ? -x.gs[l] : x.gs[l]) : gq;
      }
      half[h] = sum;
    }
    // |sc * sum| < 2^23: exact as a float.
    return w.d * x.d * float(w.sc0 * half[0] + w.sc1 * half[1]);
  }
  __host__ __device__ static float dot(const Raw &r, int64_t u, const X &x) { return dot(prep(r, u), x); }
  __host__ __device__ static float dot(const uint8_t *row, int64_t u, const X &x) {
    return dot(fetch(row, u), u, x);
  }
};
template <> struct IntDot<GGMLType::IQ2_XXS> : IntDotGrid<GGMLType::IQ2_XXS> {};
template <> struct IntDot<GGMLType::IQ2_XS> : IntDotGrid<GGMLType::IQ2_XS> {};
template <> struct IntDot<GGMLType::IQ2_S> : IntDotGrid<GGMLType::IQ2_S> {};
template <> struct IntDot<GGMLType::IQ3_XXS> : IntDotGrid<GGMLType::IQ3_XXS> {};
template <> struct IntDot<GGMLType::IQ3_S> : IntDotGrid<GGMLType::IQ3_S> {};
template <> struct IntDot<GGMLType::IQ1_S> : IntDotGrid<GGMLType::IQ1_S> {};
template <> struct IntDot<GGMLType::IQ1_M> : IntDotGrid<GGMLType::IQ1_M> {};

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_QUANTGRID_CUH
