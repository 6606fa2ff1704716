//===- KernelsScalar.cpp - portable kernels and ISA dispatch ----------------===//
//
// The scalar kernels for every weight type (integer sums per block, exactly as the SIMD kernels compute
// them; the float combination in the natural order) and the run-time choice of kernel table. The SIMD
// tables live in KernelsAVX2.cpp / KernelsAVX512.cpp, compiled with per-function target attributes so the
// library needs no -march flag and runs on any x86-64.
//===----------------------------------------------------------------------===//
#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/BlocksIQ.h"
#include "runtime/cpu/quant/Quant.h"
#include "runtime/cpu/quant/ActQ8.h"
#include "runtime/cpu/quant/Kernels.h"

#include <atomic>
#include <cstdlib>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <cstring>
#include <type_traits>
#include <string>

namespace tpc::rt::cpu {
namespace {

/// Sum over a 32-element block of table-or-offset weights times int8 activations.
template <typename Decode> int dotBlock32(const uint8_t *qs, const int8_t *a, Decode decode) {
  int s = 0;
  for (int j = 0; j < kQK / 2; ++j)
    s += decode(qs[j] & 0xf, j) * a[j] + decode(qs[j] >> 4, j + 16) * a[j + 16];
  return s;
}

/// Q8_K weights . activations, scalar reference.
float dotQ8_K(int64_t k, const void *w, const void *a) {
  const BlockQ8_K *x = static_cast<const BlockQ8_K *>(w);
  const BlockQ8_K *y = static_cast<const BlockQ8_K *>(a);
  float s = 0;
  for (int64_t i = 0; i < k / kQKK; ++i) {
    int isum = 0;
    for (int j = 0; j < kQKK; ++j)
      isum += x[i].qs[j] * y[i].qs[j];
    s += x[i].d * y[i].d * static_cast<float>(isum);
  }
  return s;
}

//===-- ActQ8 and float row kernels ------------------------------------------===//
// Integer sums per block (or per 16-element half for q6_K) are exact; the float combination is the natural
// one: (weight scale * activation scale) * integer sum, plus the offset or min term times the activation
// block's d * sum(q). The SIMD kernels compute the same terms, summed in another order.

/// Quants of block b of an ActQ8 row.
inline const int8_t *actQs(const ActQ8Group *a, int64_t b) { return a[b >> 2].qs + 32 * (b & 3); }
/// Scale of block b.
inline float actD(const ActQ8Group *a, int64_t b) { return a[b >> 2].d[b & 3]; }
/// d * sum(q) of block b.
inline float actDs(const ActQ8Group *a, int64_t b) { return a[b >> 2].ds[b & 3]; }

/// IQ4_XS weights . an ActQ8 row: IQ4_NL levels per 32-element sub-block, scaled by d (ls - 32).
float dotIQ4XS(int64_t k, const void *w, const void *a) {
  const BlockIQ4_XS *x = static_cast<const BlockIQ4_XS *>(w);
  const ActQ8Group *y = static_cast<const ActQ8Group *>(a);
  float s = 0;
  for (int64_t b = 0; b < k / kQK; ++b) {
    const BlockIQ4_XS &xb = x[b / 8];
    const int ib = static_cast<int>(b % 8);
    const int is = dotBlock32(xb.qs + 16 * ib, actQs(y, b), [](int q, int) { return kIQ4NLValues[q]; });
    s += (fp16ToFp32(xb.d) * static_cast<float>(iq4xsScale(xb, ib)) * actD(y, b)) * static_cast<float>(is);
  }
  return s;
}

/// MXFP4 weights . an ActQ8 row: the doubled E2M1 values per 32-element block, scaled by 2^(e-128).
float dotMXFP4(int64_t k, const void *w, const void *a) {
  const BlockMXFP4 *x = static_cast<const BlockMXFP4 *>(w);
  const ActQ8Group *y = static_cast<const ActQ8Group *>(a);
  float s = 0;
  for (int64_t b = 0; b < k / kQK; ++b) {
    const int is = dotBlock32(x[b].qs, actQs(y, b), [](int q, int) { return kMXFP4Values[q]; });
    s += (e8m0ToFp32Half(x[b].e) * actD(y, b)) * static_cast<float>(is);
  }
  return s;
}

/// Quant of element e (0..255) of a Q2_K / Q3_K super-block's 2-bit planes.
inline int plane2(const uint8_t *qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

/// q3_K weights . an ActQ8 row: per block of 32, d d8 (sc_a sum_a(q a) + sc_b sum_b(q a)), q = 2 bits + 4 hmask
/// bit - 4.
float dotQ3KAct(int64_t k, const void *w, const void *a) {
  const BlockQ3_K *x = static_cast<const BlockQ3_K *>(w);
  const ActQ8Group *y = static_cast<const ActQ8Group *>(a);
  float s = 0;
  for (int64_t i = 0; i < k / kQKK; ++i) {
    int8_t sc[16];
    unpackScalesQ3K(x[i].scales, sc);
    const float d = fp16ToFp32(x[i].d);
    for (int c = 0; c < 8; ++c) {
      const int8_t *q8 = actQs(y, 8 * i + c);
      int is = 0;
      for (int h = 0; h < 2; ++h) {
        int hs = 0;
        for (int l = 16 * h; l < 16 * h + 16; ++l) {
          const int e = 32 * c + l;
          hs += (plane2(x[i].qs, e) + 4 * ((x[i].hmask[l] >> c) & 1) - 4) * q8[l];
        }
        is += sc[2 * c + h] * hs;
      }
      s += (d * actD(y, 8 * i + c)) * static_cast<float>(is);
    }
  }
  return s;
}

/// q2_K weights . an ActQ8 row: per block of 32, d d8 (sc_a sum_a(q a) + sc_b sum_b(q a)) - dmin d8 (m_a hs_a +
/// m_b hs_b), with hs the activation halves' sums.
float dotQ2KAct(int64_t k, const void *w, const void *a) {
  const BlockQ2_K *x = static_cast<const BlockQ2_K *>(w);
  const ActQ8Group *y = static_cast<const ActQ8Group *>(a);
  float s = 0;
  for (int64_t i = 0; i < k / kQKK; ++i) {
    const float d = fp16ToFp32(x[i].d), dmin = fp16ToFp32(x[i].dmin);
    for (int c = 0; c < 8; ++c) {
      const int64_t b = 8 * i + c;
      const ActQ8Group &g = y[b >> 2];
      const int8_t *q8 = actQs(y, b);
      int is = 0, ms = 0;
      for (int h = 0; h < 2; ++h) {
        const uint8_t sm = x[i].scales[2 * c + h];
        int hs = 0;
        for (int l = 16 * h; l < 16 * h + 16; ++l)
          hs += plane2(x[i].qs, 32 * c + l) * q8[l];
        is += (sm & 0xf) * hs;
        ms += (sm >> 4) * g.hs[2 * (b & 3) + h];
      }
      s += (d * actD(y, b)) * static_cast<float>(is) - (dmin * actD(y, b)) * static_cast<float>(ms);
    }
  }
  return s;
}

/// Blocks with their own offset m: x = d q + m.
template <typename Block> constexpr bool kHasMinS = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;

/// q4_0 / q5_0 / q8_0 weights (signed values q - offset) and q4_1 / q5_1 (d q + m) . an ActQ8 row.
template <typename Block, int Kind> float dotLegacy32(int64_t k, const void *w, const void *a) {
  const Block *x = static_cast<const Block *>(w);
  const ActQ8Group *y = static_cast<const ActQ8Group *>(a);
  float s = 0;
  for (int64_t b = 0; b < k / kQK; ++b) {
    const int8_t *q8 = actQs(y, b);
    int is = 0;
    if constexpr (std::is_same_v<Block, BlockIQ4_NL>) {
      is = dotBlock32(x[b].qs, q8, [](int q, int) { return kIQ4NLValues[q]; });
    } else if constexpr (Kind == 8) {
      for (int j = 0; j < kQK; ++j)
        is += x[b].qs[j] * q8[j];
    } else {
      uint32_t qh = 0;
      if constexpr (Kind == 5)
        std::memcpy(&qh, x[b].qh, 4);
      // q4_1 / q5_1 keep the quants unsigned; their offset m joins below against d8 sum(a).
      constexpr int off = kHasMinS<Block> ? 0 : Kind == 5 ? 16 : 8;
      is = dotBlock32(x[b].qs, q8, [qh](int q, int e) {
        return (Kind == 5 ? (q | (((qh >> e) & 1) << 4)) : q) - off;
      });
    }
    s += (fp16ToFp32(x[b].d) * actD(y, b)) * static_cast<float>(is);
    if constexpr (kHasMinS<Block>)
      s += fp16ToFp32(x[b].m) * actDs(y, b);
  }
  return s;
}

/// q4_K / q5_K weights . an ActQ8 row: per group of 32, (d sc) d8 sum(q a) - (dmin m) d8 sum(a).
template <typename Block, bool Five> float dotQ45K(int64_t k, const void *w, const void *a) {
  const Block *x = static_cast<const Block *>(w);
  const ActQ8Group *y = static_cast<const ActQ8Group *>(a);
  float s = 0;
  for (int64_t i = 0; i < k / kQKK; ++i) {
    const float d = fp16ToFp32(x[i].d), dmin = fp16ToFp32(x[i].dmin);
    for (int g = 0; g < 8; ++g) {
      uint8_t sc, m;
      scaleMinK4(g, x[i].scales, sc, m);
      const int64_t b = 8 * i + g;
      const int8_t *q8 = actQs(y, b);
      int is = 0;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = x[i].qs[32 * (g / 2) + l];
        int q = (g & 1) ? (byte >> 4) : (byte & 0xf);
        if constexpr (Five)
          q |= ((x[i].qh[l] >> g) & 1) << 4;
        is += q * q8[l];
      }
      s += ((d * sc) * actD(y, b)) * static_cast<float>(is) - (dmin * m) * actDs(y, b);
    }
  }
  return s;
}

/// q6_K weights . an ActQ8 row: per block of 32, d d8 (sc_a sum_a((q - 32) a) + sc_b sum_b(...)).
float dotQ6K(int64_t k, const void *w, const void *a) {
  const BlockQ6_K *x = static_cast<const BlockQ6_K *>(w);
  const ActQ8Group *y = static_cast<const ActQ8Group *>(a);
  float s = 0;
  for (int64_t i = 0; i < k / kQKK; ++i) {
    const float d = fp16ToFp32(x[i].d);
    for (int c = 0; c < 8; ++c) {
      const int64_t b = 8 * i + c;
      const int8_t *q8 = actQs(y, b);
      int is = 0;
      for (int h = 0; h < 2; ++h) {
        int hs = 0;
        for (int l = 16 * h; l < 16 * h + 16; ++l) {
          const int e = 32 * c + l, hh = e / 128, p = (e % 128) / 32, ll = e % 32;
          const int lo = (x[i].ql[64 * hh + ll + 32 * (p & 1)] >> (p >= 2 ? 4 : 0)) & 0xf;
          const int hi = (x[i].qh[32 * hh + ll] >> (2 * p)) & 3;
          hs += ((lo | (hi << 4)) - 32) * q8[l];
        }
        is += x[i].scales[2 * c + h] * hs;
      }
      s += (d * actD(y, b)) * static_cast<float>(is);
    }
  }
  return s;
}

/// Grid weights (BlocksIQ.h) . an ActQ8 row: per block of 32, (D d8) (sc_a sum_a(q a) + sc_b sum_b(q a)).
template <GGMLType T> float dotGrid(int64_t k, const void *w, const void *a) {
  const uint8_t *x = static_cast<const uint8_t *>(w);
  const ActQ8Group *y = static_cast<const ActQ8Group *>(a);
  const size_t blockBytes = ggmlTypeInfo(T).blockBytes;
  GridUnpacked u;
  float s = 0;
  for (int64_t i = 0; i < k / kQKK; ++i) {
    unpackGridBlock(T, x + static_cast<size_t>(i) * blockBytes, u);
    for (int c = 0; c < 8; ++c) {
      const int64_t b = 8 * i + c;
      const int8_t *q8 = actQs(y, b);
      int is = 0;
      for (int h = 0; h < 2; ++h) {
        int hs = 0;
        for (int l = 16 * h; l < 16 * h + 16; ++l)
          hs += u.q[32 * c + l] * q8[l];
        is += u.sc[2 * c + h] * hs;
      }
      s += (u.scale * actD(y, b)) * static_cast<float>(is);
    }
  }
  return s;
}

/// Float weights . f32 activations, in element order.
template <typename T, float (*Load)(T)> float dotFloat(int64_t k, const void *w, const void *a) {
  const T *x = static_cast<const T *>(w);
  const float *y = static_cast<const float *>(a);
  float s = 0;
  for (int64_t i = 0; i < k; ++i)
    s += Load(x[i]) * y[i];
  return s;
}
inline float loadF32(float v) { return v; }
inline float loadF16(uint16_t h) { return fp16ToFp32(h); }
inline float loadBF16(uint16_t h) { return bf16ToFp32(h); }

/// A row kernel from a one-token dot.
template <float (*Dot)(int64_t, const void *, const void *)>
void rowKernel(int64_t k, const void *w, const void *const *act, int nt, float *out) {
  for (int t = 0; t < nt; ++t)
    out[t] = Dot(k, w, act[t]);
}

/// A row-range kernel from a row kernel: the rows one after another.
template <RowKernel Row>
void rowsByRow(int64_t k, const void *w, size_t stride, int64_t rows, const void *const *act, int nt,
               float *const *out) {
  float o[kMaxRowTokens];
  for (int64_t r = 0; r < rows; ++r) {
    Row(k, static_cast<const uint8_t *>(w) + static_cast<size_t>(r) * stride, act, nt, o);
    for (int t = 0; t < nt; ++t)
      out[t][r] = o[t];
  }
}

/// Installs the scalar grid kernels of type T.
template <GGMLType T> void setGrid(KernelTable &t) {
  t.row[static_cast<uint32_t>(T)] = rowKernel<dotGrid<T>>;
  t.rows[static_cast<uint32_t>(T)] = rowsByRow<rowKernel<dotGrid<T>>>;
}

} // namespace

size_t panelGroupBytes(GGMLType t, int64_t k, int R) {
  if (activationFormat(t) == ActFormat::F32)
    return static_cast<size_t>(k) * sizeof(float) * static_cast<size_t>(R);
  // q2_K's blocks carry its mins and -dmin besides the common fields (PanelX86.inc kBlockBytesQ2K).
  return static_cast<size_t>(k / kQK) * (t == GGMLType::Q2_K ? 48 : 40) * static_cast<size_t>(R);
}

KernelTable scalarKernelTable() {
  KernelTable t;
  t.set(GGMLType::Q8_K, dotQ8_K);
  t.quantizeQ8 = quantizeActQ8Row;
  t.row[static_cast<uint32_t>(GGMLType::F32)] = rowKernel<dotFloat<float, loadF32>>;
  t.row[static_cast<uint32_t>(GGMLType::F16)] = rowKernel<dotFloat<uint16_t, loadF16>>;
  t.row[static_cast<uint32_t>(GGMLType::BF16)] = rowKernel<dotFloat<uint16_t, loadBF16>>;
  t.row[static_cast<uint32_t>(GGMLType::Q4_0)] = rowKernel<dotLegacy32<BlockQ4_0, 4>>;
  t.row[static_cast<uint32_t>(GGMLType::Q5_0)] = rowKernel<dotLegacy32<BlockQ5_0, 5>>;
  t.row[static_cast<uint32_t>(GGMLType::Q4_1)] = rowKernel<dotLegacy32<BlockQ4_1, 4>>;
  t.row[static_cast<uint32_t>(GGMLType::Q5_1)] = rowKernel<dotLegacy32<BlockQ5_1, 5>>;
  t.row[static_cast<uint32_t>(GGMLType::Q8_0)] = rowKernel<dotLegacy32<BlockQ8_0, 8>>;
  t.row[static_cast<uint32_t>(GGMLType::IQ4_NL)] = rowKernel<dotLegacy32<BlockIQ4_NL, 8>>;
  t.row[static_cast<uint32_t>(GGMLType::IQ4_XS)] = rowKernel<dotIQ4XS>;
  t.row[static_cast<uint32_t>(GGMLType::MXFP4)] = rowKernel<dotMXFP4>;
  t.row[static_cast<uint32_t>(GGMLType::Q2_K)] = rowKernel<dotQ2KAct>;
  t.row[static_cast<uint32_t>(GGMLType::Q3_K)] = rowKernel<dotQ3KAct>;
  t.row[static_cast<uint32_t>(GGMLType::Q4_K)] = rowKernel<dotQ45K<BlockQ4_K, false>>;
  t.row[static_cast<uint32_t>(GGMLType::Q5_K)] = rowKernel<dotQ45K<BlockQ5_K, true>>;
  t.row[static_cast<uint32_t>(GGMLType::Q6_K)] = rowKernel<dotQ6K>;
  t.rows[static_cast<uint32_t>(GGMLType::F32)] = rowsByRow<rowKernel<dotFloat<float, loadF32>>>;
  t.rows[static_cast<uint32_t>(GGMLType::F16)] = rowsByRow<rowKernel<dotFloat<uint16_t, loadF16>>>;
  t.rows[static_cast<uint32_t>(GGMLType::BF16)] = rowsByRow<rowKernel<dotFloat<uint16_t, loadBF16>>>;
  t.rows[static_cast<uint32_t>(GGMLType::Q4_0)] = rowsByRow<rowKernel<dotLegacy32<BlockQ4_0, 4>>>;
  t.rows[static_cast<uint32_t>(GGMLType::Q5_0)] = rowsByRow<rowKernel<dotLegacy32<BlockQ5_0, 5>>>;
  t.rows[static_cast<uint32_t>(GGMLType::Q4_1)] = rowsByRow<rowKernel<dotLegacy32<BlockQ4_1, 4>>>;
  t.rows[static_cast<uint32_t>(GGMLType::Q5_1)] = rowsByRow<rowKernel<dotLegacy32<BlockQ5_1, 5>>>;
  t.rows[static_cast<uint32_t>(GGMLType::Q8_0)] = rowsByRow<rowKernel<dotLegacy32<BlockQ8_0, 8>>>;
  t.rows[static_cast<uint32_t>(GGMLType::IQ4_NL)] = rowsByRow<rowKernel<dotLegacy32<BlockIQ4_NL, 8>>>;
  t.rows[static_cast<uint32_t>(GGMLType::IQ4_XS)] = rowsByRow<rowKernel<dotIQ4XS>>;
  t.rows[static_cast<uint32_t>(GGMLType::MXFP4)] = rowsByRow<rowKernel<dotMXFP4>>;
  t.rows[static_cast<uint32_t>(GGMLType::Q2_K)] = rowsByRow<rowKernel<dotQ2KAct>>;
  t.rows[static_cast<uint32_t>(GGMLType::Q3_K)] = rowsByRow<rowKernel<dotQ3KAct>>;
  t.rows[static_cast<uint32_t>(GGMLType::Q4_K)] = rowsByRow<rowKernel<dotQ45K<BlockQ4_K, false>>>;
  t.rows[static_cast<uint32_t>(GGMLType::Q5_K)] = rowsByRow<rowKernel<dotQ45K<BlockQ5_K, true>>>;
  t.rows[static_cast<uint32_t>(GGMLType::Q6_K)] = rowsByRow<rowKernel<dotQ6K>>;
  setGrid<GGMLType::IQ2_XXS>(t);
  setGrid<GGMLType::IQ2_XS>(t);
  setGrid<GGMLType::IQ2_S>(t);
  setGrid<GGMLType::IQ3_XXS>(t);
  setGrid<GGMLType::IQ3_S>(t);
  setGrid<GGMLType::IQ1_S>(t);
  setGrid<GGMLType::IQ1_M>(t);
  return t;
}

const char *isaName(Isa isa) {
  switch (isa) {
  case Isa::Scalar:
    return "scalar";
  case Isa::AVX2:
    return "avx2";
  case Isa::AVX512:
    return "avx512";
  case Isa::AVX512VNNI:
    return "avx512vnni";
  }
  return "?";
}

#if defined(__x86_64__)
namespace {
/// CPU features read once with cpuid; the OS must also save the wider registers (xgetbv), which is what
/// __builtin_cpu_supports checks too (clang's does not know "f16c", hence the hand-written version).
struct X86Features {
  bool avx2 = false, avx512 = false, vnni = false;
  X86Features() {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
      return;
    bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!osxsave || !avx)
      return;
    unsigned xlo, xhi;
    __asm__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    bool ymm = (xlo & 0x6) == 0x6, zmm = (xlo & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
      return;
    avx2 = ymm && fma && f16c && (b & (1u << 5));
    bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
    avx512 = avx2 && zmm && f && dq && bw && vl;
    vnni = avx512 && (c & (1u << 11));
  }
};
/// The features of this CPU (read once).
const X86Features &x86Features() {
  static const X86Features f;
  return f;
}
} // namespace
#endif

bool isaAvailable(Isa isa) {
  switch (isa) {
  case Isa::Scalar:
    return true;
  case Isa::AVX2:
#if defined(__x86_64__)
    return x86Features().avx2;
#else
    return false;
#endif
  case Isa::AVX512:
#if defined(__x86_64__)
    return x86Features().avx512;
#else
    return false;
#endif
  case Isa::AVX512VNNI:
#if defined(__x86_64__)
    return x86Features().vnni;
#else
    return false;
#endif
  }
  return false;
}

Isa bestAvailableIsa() {
  Isa best = Isa::Scalar;
  for (Isa i : {Isa::AVX2, Isa::AVX512, Isa::AVX512VNNI})
    if (isaAvailable(i))
      best = i;
  return best;
}

std::string isaOverrideProblem(const char *value) {
  if (!value)
    return {};
  const std::string v(value);
  for (Isa i : {Isa::Scalar, Isa::AVX2, Isa::AVX512, Isa::AVX512VNNI})
    if (v == isaName(i))
      return isaAvailable(i) ? std::string()
                             : "TPC_CPU_ISA=" + v + ": this CPU cannot run " + v + " kernels (the best it has is " +
                                   isaName(bestAvailableIsa()) + "); unset it or name a lower level";
  return "TPC_CPU_ISA=" + v + " is not a kernel level: use one of scalar, avx2, avx512, avx512vnni (or unset it)";
}

namespace {
/// The process's level as an Isa value; -1 until fixActiveIsa() or setActiveIsa() fixes it. An atomic
/// rather than a function-local static so a session can fix it after kernels ran (a calibration).
std::atomic<int> processIsa{-1};

/// What activeIsa() answers while no level is fixed: TPC_CPU_ISA when valid, else the best (read once: every
/// matmul call asks).
Isa defaultIsa() {
  static const Isa isa = [] {
    const char *env = std::getenv("TPC_CPU_ISA");
    if (env && isaOverrideProblem(env).empty())
      for (Isa i : {Isa::Scalar, Isa::AVX2, Isa::AVX512, Isa::AVX512VNNI})
        if (std::string(env) == isaName(i))
          return i;
    return bestAvailableIsa(); // a bad value is refused where sessions open; never silently used
  }();
  return isa;
}
} // namespace

Isa activeIsa() {
  const int v = processIsa.load(std::memory_order_acquire);
  return v >= 0 ? static_cast<Isa>(v) : defaultIsa();
}

Isa fixActiveIsa() {
  int v = processIsa.load(std::memory_order_acquire);
  if (v < 0) {
    int unset = -1;
    const int want = static_cast<int>(defaultIsa());
    v = processIsa.compare_exchange_strong(unset, want, std::memory_order_acq_rel) ? want : unset;
  }
  return static_cast<Isa>(v);
}

bool setActiveIsa(Isa isa) {
  if (!isaAvailable(isa))
    return false;
  int current = -1;
  if (processIsa.compare_exchange_strong(current, static_cast<int>(isa), std::memory_order_acq_rel))
    return true;
  return current == static_cast<int>(isa);
}

bool activeIsaFixed() { return processIsa.load(std::memory_order_acquire) >= 0; }

const KernelTable &kernelTable(Isa isa) {
  static const KernelTable scalar = scalarKernelTable();
#if defined(__x86_64__)
  static const KernelTable avx2 = isaAvailable(Isa::AVX2) ? avx2KernelTable(scalar) : scalar;
  static const KernelTable avx512 = isaAvailable(Isa::AVX512) ? avx512KernelTable(avx2) : avx2;
  static const KernelTable vnni = isaAvailable(Isa::AVX512VNNI) ? avx512VnniKernelTable(avx2) : avx512;
  if (isa == Isa::AVX512VNNI && isaAvailable(Isa::AVX512VNNI))
    return vnni;
  if (isa >= Isa::AVX512 && isaAvailable(Isa::AVX512))
    return avx512;
  if (isa != Isa::Scalar && isaAvailable(Isa::AVX2))
    return avx2;
#endif
  return scalar;
}

VecDotFn vecDotKernel(GGMLType t, Isa isa) { return kernelTable(isa).get(t); }

QuantizeFn activationQuantizer(GGMLType t, Isa isa) {
  if (QuantizeFn f = kernelTable(isa).getQuantize(t))
    return f;
  switch (t) {
  case GGMLType::Q8_0:
    return [](const float *s, void *d, int64_t n) { quantizeActivationRow(GGMLType::Q8_0, s, d, n); };
  case GGMLType::Q8_1:
    return [](const float *s, void *d, int64_t n) { quantizeActivationRow(GGMLType::Q8_1, s, d, n); };
  case GGMLType::Q8_K:
    return [](const float *s, void *d, int64_t n) { quantizeActivationRow(GGMLType::Q8_K, s, d, n); };
  default:
    return nullptr;
  }
}
} // namespace tpc::rt::cpu
