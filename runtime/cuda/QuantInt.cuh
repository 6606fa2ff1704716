//===- QuantInt.cuh - integer (dp4a) dot products of weight units -*- CUDA -*-===//
//
// The activation side (quantizeBlock32, warpQuantize32: x as int8 blocks of 32 with their scale and half
// sums) and the per-type weight units of the integer decode GEMV (IntDot<T>); included through Quant.cuh.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_QUANTINT_CUH
#define TPC_RUNTIME_CUDA_QUANTINT_CUH

#include "runtime/cuda/QuantChunk.cuh"

namespace tpc::rt::cuda {

//===----------------------------------------------------------------------===//
// Integer dot products (decode GEMV)
//
// Decode multiplies each weight once per token, so the GEMV is bound by instructions as much as by
// bytes unless the inner loop is short. The activations are quantized once per row to 8 bits per
// 32-element block (quantizeBlock32) and the quant nibbles are multiplied four at a time by dp4a: about
// half an instruction per weight instead of three. The block's sums (halves of 16) carry the offset
// terms (Q2_K's and Q4_K's mins, Q3_K's 4, Q6_K's 32, Q4_0's 8); the non-linear formats (IQ4_NL, IQ4_XS,
// MXFP4) look their nibbles up into int8 levels first (lookupNibbles). A unit's weight side is unpacked once (prep: dp4a words and
// the scales) and dotted with any number of activation rows (the batched GEMV dots it with each token's).
// Every unit below is __host__ __device__ so the CPU-side test checks the bit manipulation without a GPU.
//===----------------------------------------------------------------------===//

/// Scale and sums of one 32-element activation block: x ~= d * q; lo, hi = d * (sum of q over [0, 16),
/// [16, 32)).
struct XQBlock {
  float d, lo, hi, pad;
};

/// Quantizes 32 floats to int8 the way the reference engine and the CPU backend (quantActivation) do:
/// d = amax / 127 rounded to bf16 and kept as that bf16 value (the CPU's ActQ8 does the same; rounding it
/// further to f16, as the reference's CUDA q8_1 blocks do, loses bits wherever amax < 2^-7, where f16 is
/// subnormal: a tiny model's expert inputs, and enough there to flip router near-ties the CPU and the
/// reference agree on), q = round-to-even(x / d) clamped to +-127. The offset
/// terms use the quantized sums, as theirs do; matching their rounding keeps the logits nearer theirs
/// than exact f32 activations would (runtime/cpu/quant/Quant.h).
__host__ __device__ __forceinline__ void quantizeBlock32(const float x[32], int8_t q[32], XQBlock &b) {
  float amax = 0;
#pragma unroll
  for (int i = 0; i < 32; ++i)
    amax = fmaxf(amax, fabsf(x[i]));
  const float d = __bfloat162float(__float2bfloat16_rn(amax / 127.0f)), id = d > 0 ? 1.0f / d : 0.0f;
  int lo = 0, hi = 0;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int v = static_cast<int>(fminf(fmaxf(rintf(x[i] * id), -127.0f), 127.0f));
    q[i] = static_cast<int8_t>(v);
    (i < 16 ? lo : hi) += v;
  }
  b = XQBlock{d, d * float(lo), d * float(hi), 0}; // exact: 8 significant bits times an 11-bit sum
}

#ifdef __CUDACC__
/// quantizeBlock32 by a warp whose lane i holds element i of the block (bit-identical to it): for the
/// producers that write a GEMV's x and its quantized copy in one pass (rms_norm, glu).
__device__ __forceinline__ void warpQuantize32(float v, int8_t *q, XQBlock *b) {
  const int lane = threadIdx.x % 32;
  float amax = fabsf(v);
  for (int o = 16; o > 0; o >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = __bfloat162float(__float2bfloat16_rn(amax / 127.0f)), id = d > 0 ? 1.0f / d : 0.0f;
  const int qv = static_cast<int>(fminf(fmaxf(rintf(v * id), -127.0f), 127.0f));
  q[lane] = static_cast<int8_t>(qv);
  int sum = qv; // sums within each half-warp (elements 0..15, 16..31)
  for (int o = 8; o > 0; o >>= 1)
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const int hi = __shfl_sync(0xffffffffu, sum, 16);
  if (lane == 0) {
    *b = XQBlock{d, d * float(sum), d * float(hi), 0};
  }
}
#endif

/// Sum of the four signed byte products plus c.
__host__ __device__ __forceinline__ int dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; ++i)
    c += int(int8_t(uint32_t(a) >> (8 * i))) * int(int8_t(uint32_t(b) >> (8 * i)));
  return c;
#endif
}

/// Four words of 16 int8 activations (16-byte aligned).
__host__ __device__ __forceinline__ void loadX16(const int8_t *p, int x[4]) {
  const int4 v = *reinterpret_cast<const int4 *>(p);
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}

/// Signed byte j of v.
__host__ __device__ __forceinline__ int sbyte(uint32_t v, int j) { return int(int8_t(v >> (8 * j))); }

/// Per-type unit of the integer decode GEMV: kUnit weights of a row, X the matching activation data a
/// thread keeps in registers across rows, loadX/dot as the name says. `q` is the row's int8
/// activations, `s` its block records.
template <GGMLType T> struct IntDot;

/// Q4_K/Q5_K: a unit is 16 quant bytes of one group pair (p = pair, h = which half of the 32 bytes): the
/// low nibbles are elements [16h, 16h + 16) of group 2p, the high nibbles the same of group 2p + 1.
template <GGMLType T> struct IntDotK45 {
  static constexpr int kUnit = 32;
  struct X {
    int lo[4], hi[4];
    float dlo, dhi, slo, shi;
  };
  __host__ __device__ static X loadX(const int8_t *q, const XQBlock *s, int64_t u) {
    const int64_t sb = u >> 3;
    const int i = int(u & 7), p = i >> 1, h = i & 1;
    X x;
    loadX16(q + sb * 256 + 64 * p + 16 * h, x.lo);
    loadX16(q + sb * 256 + 64 * p + 32 + 16 * h, x.hi);
    const XQBlock &a = s[sb * 8 + 2 * p], &b = s[sb * 8 + 2 * p + 1];
    x.dlo = a.d, x.dhi = b.d, x.slo = h ? a.hi : a.lo, x.shi = h ? b.hi : b.lo;
    return x;
  }
  /// The unit's weight bytes: the super-block head (d, dmin, 12 scale bytes), its 16 quant bytes (and
  /// Q5_K's 16 high-bit bytes). fetch/dot are split so the GEMV can issue many rows' loads at once.
  struct Raw {
    uint4 hd, qv, hv;
  };
  static constexpr int kFetchRows = T == GGMLType::Q4_K ? 8 : 4; // rows of Raw a thread keeps in flight
  __host__ __device__ static Raw fetch(const uint8_t *row, int64_t u) {
    constexpr int kBytes = QuantTraits<T>::kBytes;
    const uint8_t *b = row + (u >> 3) * kBytes;
    const int i = int(u & 7), p = i >> 1, h = i & 1;
    Raw r;
    r.hd = *reinterpret_cast<const uint4 *>(b);
    r.qv = *reinterpret_cast<const uint4 *>(b + (T == GGMLType::Q4_K ? 16 : 48) + 32 * p + 16 * h);
    r.hv = T == GGMLType::Q5_K ? *reinterpret_cast<const uint4 *>(b + 16 + 16 * h) : uint4{0, 0, 0, 0};
    return r;
  }
  /// The unit's weights ready for any number of activation rows (prep once per row unit, dot per token):
  /// the 16 low-nibble and 16 high-nibble quants as dp4a words, and the two groups' scales and offsets.
  struct W {
    int lo[4], hi[4];
    float dl, dh, ml, mh; ///< d * sc and dmin * m of groups 2p and 2p + 1
  };
  __host__ __device__ static W prep(const Raw &r, int64_t u) {
    const int i = int(u & 7), p = i >> 1;
    const uint32_t qw[4] = {r.qv.x, r.qv.y, r.qv.z, r.qv.w};
    const uint32_t hw[4] = {r.hv.x, r.hv.y, r.hv.z, r.hv.w};
    W w;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t l = qw[j] & 0x0F0F0F0Fu, hh = (qw[j] >> 4) & 0x0F0F0F0Fu;
      if constexpr (T == GGMLType::Q5_K) {
        l |= ((hw[j] >> (2 * p)) & 0x01010101u) << 4;
        hh |= ((hw[j] >> (2 * p + 1)) & 0x01010101u) << 4;
      }
      w.lo[j] = int(l);
      w.hi[j] = int(hh);
    }
    uint32_t sc0, m0, sc1, m1;
    scaleMinK4(r.hd.y, r.hd.z, r.hd.w, 2 * p, sc0, m0);
    scaleMinK4(r.hd.y, r.hd.z, r.hd.w, 2 * p + 1, sc1, m1);
    const float d = halfBits(r.hd.x & 0xffff), dmin = halfBits(r.hd.x >> 16);
    w.dl = d * float(sc0), w.dh = d * float(sc1), w.ml = dmin * float(m0), w.mh = dmin * float(m1);
    return w;
  }
  __host__ __device__ static float dot(const W &w, const X &x) {
    int dl = 0, dh = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      dl = dp4a(w.lo[j], x.lo[j], dl);
      dh = dp4a(w.hi[j], x.hi[j], dh);
    }
    return w.dl * x.dlo * float(dl) + w.dh * x.dhi * float(dh) - (w.ml * x.slo + w.mh * x.shi);
  }
  __host__ __device__ static float dot(const Raw &r, int64_t u, const X &x) { return dot(prep(r, u), x); }
  __host__ __device__ static float dot(const uint8_t *row, int64_t u, const X &x) {
    return dot(fetch(row, u), u, x);
  }
};
template <> struct IntDot<GGMLType::Q4_K> : IntDotK45<GGMLType::Q4_K> {};
template <> struct IntDot<GGMLType::Q5_K> : IntDotK45<GGMLType::Q5_K> {};

/// The K-quants of 16-element groups (Q2_K, Q3_K, Q6_K): a unit is the 64 weights at one 16-byte offset
/// of a half's 32-byte rows, elements 128H + 32qd + [e0, e0 + 16) of super-block sb for the four quadrants
/// qd (u = 4 sb + 2H + e0 / 16): their bit planes (Q2_K, Q3_K) or nibbles and 2-bit pairs (Q6_K) share
/// those bytes, so one fetch feeds four dp4a groups. Each quadrant has its own scale; Q3_K and Q6_K offset
/// their unsigned quants by a constant (4, 32), Q2_K by a min per group (d * q - m), both through the
/// activation block's half sums as in the 32-element units. D supplies prep and dot(W, X) (CRTP); RawT its
/// bytes and their fetch.
template <class D, class RawT> struct IntDotQuad {
  static constexpr int kUnit = 64, kFetchRows = 4;
  struct X {
    int q[4][4];
    float d[4], s[4];
  };
  __host__ __device__ static X loadX(const int8_t *q, const XQBlock *s, int64_t u) {
    const int64_t sb = u >> 2;
    const int H = int(u >> 1) & 1, e0 = 16 * int(u & 1);
    X x;
#pragma unroll
    for (int qd = 0; qd < 4; ++qd) {
      loadX16(q + sb * 256 + 128 * H + 32 * qd + e0, x.q[qd]);
      const XQBlock &b = s[sb * 8 + 4 * H + qd];
      x.d[qd] = b.d;
      x.s[qd] = e0 ? b.hi : b.lo;
    }
    return x;
  }
  using Raw = RawT;
  __host__ __device__ static Raw fetch(const uint8_t *row, int64_t u) { return Raw::fetch(row, u); }
  /// The unit's 64 quants as dp4a words per quadrant (unsigned), and each quadrant's scale.
  struct W {
    int q[4][4];
    float s[4];
  };
  /// Sum of quadrant qd's 16 quant products.
  __host__ __device__ static int dotQuadrant(const W &w, const X &x, int qd) {
    int dq = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      dq = dp4a(w.q[qd][j], x.q[qd][j], dq);
    return dq;
  }
  /// The constant-offset form: sum over quadrants of s * (sum(q x) - kOff * sum(x)).
  template <int kOff> __host__ __device__ static float dotOffset(const W &w, const X &x) {
    float sum = 0;
#pragma unroll
    for (int qd = 0; qd < 4; ++qd)
      sum += w.s[qd] * (x.d[qd] * float(dotQuadrant(w, x, qd)) - float(kOff) * x.s[qd]);
    return sum;
  }
  __host__ __device__ static float dot(const Raw &r, int64_t u, const X &x) {
    return D::dot(D::prep(r, u), x);
  }
  __host__ __device__ static float dot(const uint8_t *row, int64_t u, const X &x) {
    return dot(fetch(row, u), u, x);
  }
};

/// Q6_K's unit bytes: ql of two quarter pairs, qh, the 8 scales of its half and d.
struct Q6Raw {
  uint32_t ql0[4], ql1[4], qh[4], sc[2];
  uint16_t d;
  __host__ __device__ static Q6Raw fetch(const uint8_t *row, int64_t u) {
    const uint8_t *b = row + (u >> 2) * 210;
    const int H = int(u >> 1) & 1, e0 = 16 * int(u & 1);
    Q6Raw r;
    loadWords<4>(b + 64 * H + e0, r.ql0);
    loadWords<4>(b + 64 * H + 32 + e0, r.ql1);
    loadWords<4>(b + 128 + 32 * H + e0, r.qh);
    loadWords<2>(b + 192 + 8 * H, r.sc); // scales[8H .. 8H + 8)
    r.d = ld16(b + 208);
    return r;
  }
};
/// Q6_K: quadrant qd is nibble qd / 2 of ql row qd % 2 with bits 2qd, 2qd + 1 of qh; offset 32.
template <> struct IntDot<GGMLType::Q6_K> : IntDotQuad<IntDot<GGMLType::Q6_K>, Q6Raw> {
  using IntDotQuad::dot;
  __host__ __device__ static W prep(const Raw &r, int64_t u) {
    W w;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t h = r.qh[j];
      w.q[0][j] = int((r.ql0[j] & 0x0F0F0F0Fu) | ((h << 4) & 0x30303030u));
      w.q[1][j] = int((r.ql1[j] & 0x0F0F0F0Fu) | ((h << 2) & 0x30303030u));
      w.q[2][j] = int(((r.ql0[j] >> 4) & 0x0F0F0F0Fu) | (h & 0x30303030u));
      w.q[3][j] = int(((r.ql1[j] >> 4) & 0x0F0F0F0Fu) | ((h >> 2) & 0x30303030u));
    }
    const int e = int(u & 1); // scale of quadrant qd: scales[8H + e + 2qd]
    const float d = halfBits(r.d);
#pragma unroll
    for (int qd = 0; qd < 4; ++qd) {
      const int idx = e + 2 * qd; // byte within sc[0..1]
      w.s[qd] = d * float(sbyte(r.sc[idx >> 2], idx & 3));
    }
    return w;
  }
  __host__ __device__ static float dot(const W &w, const X &x) { return dotOffset<32>(w, x); }
};

/// Q3_K's unit bytes: the 16 qs bytes of its four planes, the 16 hmask bytes of its third bits, all 12
/// scale bytes (a quadrant's scale is spread over three of them) and d. 110-byte blocks: 2-byte aligned.
struct Q3Raw {
  uint32_t q[4], hm[4], sc[3];
  uint16_t d;
  __host__ __device__ static Q3Raw fetch(const uint8_t *row, int64_t u) {
    const uint8_t *b = row + (u >> 2) * 110;
    const int H = int(u >> 1) & 1, e0 = 16 * int(u & 1);
    Q3Raw r;
    loadWords<4>(b + 32 + 32 * H + e0, r.q);
    loadWords<4>(b + e0, r.hm);
    loadWords<3>(b + 96, r.sc);
    r.d = ld16(b + 108);
    return r;
  }
};
/// Q3_K: quadrant qd is bits 2qd, 2qd + 1 of qs with bit 4H + qd of hmask as the third (set: no -4), so
/// the quants are unsigned 0..7 with offset 4.
template <> struct IntDot<GGMLType::Q3_K> : IntDotQuad<IntDot<GGMLType::Q3_K>, Q3Raw> {
  using IntDotQuad::dot;
  __host__ __device__ static W prep(const Raw &r, int64_t u) {
    const int H = int(u >> 1) & 1, e = int(u & 1);
    W w;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int qd = 0; qd < 4; ++qd)
        w.q[qd][j] =
            int(((r.q[j] >> (2 * qd)) & 0x03030303u) | (((r.hm[j] >> (4 * H + qd)) & 0x01010101u) << 2));
    const float d = halfBits(r.d);
#pragma unroll
    for (int qd = 0; qd < 4; ++qd)
      w.s[qd] = d * float(q3Scale(r.sc[0], r.sc[1], r.sc[2], 8 * H + 2 * qd + e));
    return w;
  }
  __host__ __device__ static float dot(const W &w, const X &x) { return dotOffset<4>(w, x); }
};

/// Q2_K's unit bytes: the 16 qs bytes of its four planes, the 8 scale/min bytes of its half, d and dmin.
/// 84-byte blocks: 4-byte aligned.
struct Q2Raw {
  uint32_t q[4], sc[2], dm;
  __host__ __device__ static Q2Raw fetch(const uint8_t *row, int64_t u) {
    const uint8_t *b = row + (u >> 2) * 84;
    const int H = int(u >> 1) & 1, e0 = 16 * int(u & 1);
    Q2Raw r;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      r.q[j] = ld32(b + 16 + 32 * H + e0 + 4 * j);
    r.sc[0] = ld32(b + 8 * H), r.sc[1] = ld32(b + 8 * H + 4);
    r.dm = ld32(b + 80);
    return r;
  }
};
/// Q2_K: quadrant qd is bits 2qd, 2qd + 1 of qs; x = d sc q - dmin m, the min term through the half sums
/// as Q4_K's.
template <> struct IntDot<GGMLType::Q2_K> : IntDotQuad<IntDot<GGMLType::Q2_K>, Q2Raw> {
  using IntDotQuad::dot;
  /// W plus each quadrant's dmin * m.
  struct WM : IntDotQuad::W {
    float m[4];
  };
  using W = WM;
  __host__ __device__ static WM prep(const Raw &r, int64_t u) {
    const int e = int(u & 1);
    WM w;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int qd = 0; qd < 4; ++qd)
        w.q[qd][j] = int((r.q[j] >> (2 * qd)) & 0x03030303u);
    const float d = halfBits(r.dm & 0xffff), dmin = halfBits(r.dm >> 16);
#pragma unroll
    for (int qd = 0; qd < 4; ++qd) { // scales[8H + e + 2qd]: scale | min << 4
      const int idx = e + 2 * qd;
      const uint32_t sc = byteOf(r.sc[idx >> 2], idx & 3);
      w.s[qd] = d * float(sc & 0xf);
      w.m[qd] = dmin * float(sc >> 4);
    }
    return w;
  }
  __host__ __device__ static float dot(const WM &w, const X &x) {
    float sum = 0;
#pragma unroll
    for (int qd = 0; qd < 4; ++qd)
      sum += w.s[qd] * x.d[qd] * float(dotQuadrant(w, x, qd)) - w.m[qd] * x.s[qd];
    return sum;
  }
};

/// The 32-element block formats: a unit is one block (IQ4_XS: one 32-element sub-block); X is its 32
/// activations, scale and sum. D supplies prep and dot(W, X) (CRTP); RawT its bytes and their fetch.
template <class D, class RawT, int kRows> struct IntDotBlock32 {
  static constexpr int kUnit = 32, kFetchRows = kRows;
  struct X {
    int q[8];
    float d, s;
  };
  using Raw = RawT;
  /// The block's 32 quants as 8 signed dp4a words and its scale (D::prep makes it from Raw).
  struct W {
    int q[8];
    float d;
  };
  /// Sum of the block's quants times the activations' (D::dot applies the scales).
  __host__ __device__ static int dotQ(const W &w, const X &x) {
    int sum = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      sum = dp4a(w.q[j], x.q[j], sum);
    return sum;
  }
  __host__ __device__ static X loadX(const int8_t *q, const XQBlock *s, int64_t u) {
    X x;
    loadX16(q + 32 * u, x.q);
    loadX16(q + 32 * u + 16, x.q + 4);
    x.d = s[u].d;
    x.s = s[u].lo + s[u].hi;
    return x;
  }
  __host__ __device__ static Raw fetch(const uint8_t *row, int64_t u) { return Raw::fetch(row, u); }
  __host__ __device__ static float dot(const Raw &r, int64_t u, const X &x) {
    return D::dot(D::prep(r, u), x);
  }
  __host__ __device__ static float dot(const uint8_t *row, int64_t u, const X &x) {
    return dot(fetch(row, u), u, x);
  }
};

/// The bytes of an f16-scaled 32-block (Q8_0, Q4_0, IQ4_NL): d, then kWords words of quants.
template <int kWords> struct HalfBlockRaw {
  uint32_t w[kWords];
  uint16_t d;
  __host__ __device__ static HalfBlockRaw fetch(const uint8_t *row, int64_t u) {
    const uint8_t *b = row + u * (2 + 4 * kWords);
    HalfBlockRaw r;
    loadWords<kWords>(b + 2, r.w);
    r.d = ld16(b);
    return r;
  }
};

/// Q8_0: signed quants straight into dp4a.
template <> struct IntDot<GGMLType::Q8_0> : IntDotBlock32<IntDot<GGMLType::Q8_0>, HalfBlockRaw<8>, 4> {
  using IntDotBlock32::dot;
  __host__ __device__ static W prep(const Raw &r, int64_t) {
    W w;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      w.q[j] = int(r.w[j]);
    w.d = halfBits(r.d);
    return w;
  }
  __host__ __device__ static float dot(const W &w, const X &x) { return w.d * x.d * float(dotQ(w, x)); }
};

/// Q4_0: low nibbles are elements 0..15, high nibbles 16..31, offset 8.
template <> struct IntDot<GGMLType::Q4_0> : IntDotBlock32<IntDot<GGMLType::Q4_0>, HalfBlockRaw<4>, 8> {
  using IntDotBlock32::dot;
  __host__ __device__ static W prep(const Raw &r, int64_t) {
    W w;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      w.q[j] = int(r.w[j] & 0x0F0F0F0Fu);
      w.q[j + 4] = int((r.w[j] >> 4) & 0x0F0F0F0Fu);
    }
    w.d = halfBits(r.d);
    return w;
  }
  __host__ __device__ static float dot(const W &w, const X &x) {
    return w.d * (x.d * float(dotQ(w, x)) - 8.0f * x.s);
  }
};

/// The bytes of a nibble-table unit: its 16 quant bytes and the scale's bits (IQ4_NL: the f16 d; MXFP4: the
/// E8M0 byte; IQ4_XS: the super-block head d | scales_h << 16, scales_l, one 8-byte load).
template <GGMLType T> struct TableRaw {
  uint32_t w[4], s0, s1;
  __host__ __device__ static TableRaw fetch(const uint8_t *row, int64_t u) {
    TableRaw r;
    r.s1 = 0;
    if constexpr (T == GGMLType::IQ4_NL) {
      const uint8_t *b = row + u * 18;
      loadWords<4>(b + 2, r.w);
      r.s0 = ld16(b);
    } else if constexpr (T == GGMLType::MXFP4) {
      const uint8_t *b = row + u * 17;
      loadWords<4>(b + 1, r.w);
      r.s0 = b[0];
    } else { // IQ4_XS: 136-byte blocks, 8-byte aligned, sub-block u % 8 at 8 + 16 (u % 8)
      const uint8_t *b = row + (u >> 3) * 136;
      const uint2 h = *reinterpret_cast<const uint2 *>(b);
      const uint2 q0 = reinterpret_cast<const uint2 *>(b + 8 + 16 * (u & 7))[0];
      const uint2 q1 = reinterpret_cast<const uint2 *>(b + 8 + 16 * (u & 7))[1];
      r.s0 = h.x, r.s1 = h.y;
      r.w[0] = q0.x, r.w[1] = q0.y, r.w[2] = q1.x, r.w[3] = q1.y;
    }
    return r;
  }
};
/// IQ4_NL, IQ4_XS, MXFP4: the nibbles are looked up into their int8 levels (lookupNibbles, eight prmt per
/// 8 weights) and multiplied like Q8_0's; MXFP4's levels are doubled E2M1 values, its scale halved.
template <GGMLType T> struct IntDotTable : IntDotBlock32<IntDotTable<T>, TableRaw<T>, 8> {
  using Base = IntDotBlock32<IntDotTable<T>, TableRaw<T>, 8>;
  using Base::dot;
  using typename Base::Raw;
  using typename Base::W;
  using typename Base::X;
  __host__ __device__ static W prep(const Raw &r, int64_t u) {
    W w;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t lo, hi;
      lookupNibbles<T>(r.w[j], lo, hi);
      w.q[j] = int(lo);
      w.q[j + 4] = int(hi);
    }
    if constexpr (T == GGMLType::IQ4_NL)
      w.d = halfBits(uint16_t(r.s0));
    else if constexpr (T == GGMLType::MXFP4)
      w.d = e8m0Half(r.s0);
    else
      w.d = halfBits(uint16_t(r.s0 & 0xffff)) * float(iq4xsScaleOf(r.s0, r.s1, int(u & 7)));
    return w;
  }
  __host__ __device__ static float dot(const W &w, const X &x) { return w.d * x.d * float(Base::dotQ(w, x)); }
};
template <> struct IntDot<GGMLType::IQ4_NL> : IntDotTable<GGMLType::IQ4_NL> {};
template <> struct IntDot<GGMLType::IQ4_XS> : IntDotTable<GGMLType::IQ4_XS> {};
template <> struct IntDot<GGMLType::MXFP4> : IntDotTable<GGMLType::MXFP4> {};

} // namespace tpc::rt::cuda

#include "runtime/cuda/QuantGrid.cuh"

namespace tpc::rt::cuda {

/// True for the types with an integer decode unit.
constexpr bool hasIntDot(GGMLType t) {
  return t == GGMLType::Q4_0 || t == GGMLType::Q8_0 || t == GGMLType::Q4_K || t == GGMLType::Q5_K ||
         t == GGMLType::Q6_K || t == GGMLType::Q2_K || t == GGMLType::Q3_K || t == GGMLType::IQ4_NL ||
         t == GGMLType::IQ4_XS || t == GGMLType::MXFP4 || isGridQuant(t);
}
/// Weights per integer unit (IntDot<T>::kUnit) for a runtime type: 64 for the 16-element-group K-quants.
constexpr int intDotUnit(GGMLType t) {
  return t == GGMLType::Q2_K || t == GGMLType::Q3_K || t == GGMLType::Q6_K ? 64 : 32;
}

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_QUANTINT_CUH
