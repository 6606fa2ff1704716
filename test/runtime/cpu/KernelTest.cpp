//===- KernelTest.cpp - row and panel kernels against a double reference ---===//
//
// Every ActQ8 / float kernel of every ISA level this machine has (scalar; AVX2; the VNNI code paths with
// vpdpbusd emulated on AVX2; AVX-512 and AVX-512 VNNI where present) against the exact dot product of its quantized operands
// in double, within the derived bound of KernelRef.h. Weights are real quantizer output and random bytes
// (every quant value, negative and odd scales); activations are ActQ8 rows of random floats and rows of
// extreme quants. Also: a token's result does not depend on how many tokens a call takes or where it sits
// in the call (the property that keeps results independent of threading; for the kernels that take rows in
// lanes from two tokens on, in every call of two or more), padded panel rows give zeros, the row-range
// kernels give the row kernels' bits for every run of rows (whole and partial lane groups, nothing written
// outside the run), the SIMD ActQ8 quantizers give the reference quantizer's bytes, and every format of one
// scale times (q - offset) sums its signed integers exactly however a path stores the quants (OffsetsComeOffExactly).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/quant/ActQ8.h"
#include "runtime/cpu/quant/Kernels.h"
#include "test/runtime/cpu/KernelRef.h"
#include "test/runtime/cpu/TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <utility>

using namespace tpc;
using namespace tpc::rt::cpu;
using namespace tpc::rt::cpu::test;

namespace {

/// The kernel table of an ISA level by name, or nullptr where this machine cannot run it.
const KernelTable *levelTable(const std::string &level) {
  if (level == "scalar")
    return &kernelTable(Isa::Scalar);
  if (level == "avx2")
    return isaAvailable(Isa::AVX2) ? &kernelTable(Isa::AVX2) : nullptr;
  if (level == "vnni_emulated") {
    if (!isaAvailable(Isa::AVX2))
      return nullptr;
    static const KernelTable t = emulatedVnniKernelTable(kernelTable(Isa::AVX2));
    return &t;
  }
  if (level == "avx512")
    return isaAvailable(Isa::AVX512) ? &kernelTable(Isa::AVX512) : nullptr;
  if (level == "avx512vnni")
    return isaAvailable(Isa::AVX512VNNI) ? &kernelTable(Isa::AVX512VNNI) : nullptr;
  return nullptr;
}

/// The weight types with row and panel kernels.
const GGMLType kTypes[] = {GGMLType::F32,  GGMLType::F16,  GGMLType::BF16, GGMLType::Q4_0,
                           GGMLType::Q5_0, GGMLType::Q8_0, GGMLType::Q4_K, GGMLType::Q5_K,
                           GGMLType::Q6_K, GGMLType::IQ4_NL, GGMLType::IQ4_XS, GGMLType::MXFP4,
                           GGMLType::Q2_K, GGMLType::Q3_K, GGMLType::Q4_1, GGMLType::Q5_1,
                           GGMLType::IQ2_XXS, GGMLType::IQ2_XS, GGMLType::IQ2_S, GGMLType::IQ3_XXS,
                           GGMLType::IQ3_S, GGMLType::IQ1_S, GGMLType::IQ1_M};

/// Where a block keeps its half-precision scale(s) and its quant bytes (for raw random blocks).
struct BlockFields {
  size_t d;          ///< offset of the scale (an E8M0 byte for mxfp4)
  size_t dmin;       ///< offset of the half min scale, or 0 for none
  size_t qlo, qhi;   ///< quant bytes [qlo, qhi)
};
BlockFields blockFields(GGMLType t, size_t blockBytes) {
  switch (t) {
  case GGMLType::Q6_K:
    return {208, 0, 0, 192}; // ql and qh, not the int8 scales
  case GGMLType::Q4_K:
  case GGMLType::Q5_K:
  case GGMLType::Q4_1: // d, m, then (q5_1: qh and) the nibbles
  case GGMLType::Q5_1:
    return {0, 2, 4, blockBytes};
  case GGMLType::Q2_K:
    return {80, 82, 16, 80}; // scales|mins bytes stay random
  case GGMLType::Q3_K:
    return {108, 0, 0, 96}; // hmask and qs; the packed 6-bit scales stay random
  case GGMLType::MXFP4:
    return {0, 0, 1, blockBytes};
  case GGMLType::IQ1_M:
    return {0, 0, 0, 48}; // not the scale words that hold d (set by setGridHalf)
  default:
    return {0, 0, 2, blockBytes};
  }
}

void setHalf(uint8_t *p, float v) {
  const uint16_t h = fp32ToFp16(v);
  std::memcpy(p, &h, 2);
}

/// A weight row: `raw` = random bytes with sane random scales (every quant value, negative scales), else
/// the reference quantizer's output for Gaussian values (raw bytes for a type without a quantizer: iq4_nl).
std::vector<uint8_t> weightRow(GGMLType t, int64_t k, std::mt19937 &rng, bool raw) {
  std::vector<uint8_t> v(rowBytes(t, k));
  std::vector<float> f = randomFloats(k, rng(), 0.05f);
  if ((!raw && supportsQuantize(t)) || activationFormat(t) == ActFormat::F32) {
    quantizeRow(t, f.data(), v.data(), k);
    return v;
  }
  for (uint8_t &b : v)
    b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  const GGMLTypeInfo &info = ggmlTypeInfo(t);
  const BlockFields fields = blockFields(t, info.blockBytes);
  for (size_t off = 0; off < v.size(); off += info.blockBytes) {
    uint8_t *b = v.data() + off;
    if (t == GGMLType::MXFP4)
      b[fields.d] = static_cast<uint8_t>(112 + rng() % 16); // scales 2^-16 .. 2^-1
    else if (isGridType(t)) // every other bit pattern is a valid grid block
      setGridHalf(t, b, fp32ToFp16(scale(rng)));
    else
      setHalf(b + fields.d, scale(rng));
    if (fields.dmin)
      setHalf(b + fields.dmin, std::fabs(scale(rng)));
  }
  return v;
}

/// The same byte pattern in every quant byte of a row, scales kept: the largest integer sums.
std::vector<uint8_t> filledRow(GGMLType t, int64_t k, uint8_t fill, std::mt19937 &rng) {
  std::vector<uint8_t> v = weightRow(t, k, rng, true);
  const GGMLTypeInfo &info = ggmlTypeInfo(t);
  const BlockFields f = blockFields(t, info.blockBytes);
  for (size_t off = 0; off < v.size(); off += info.blockBytes)
    std::fill(v.data() + off + f.qlo, v.data() + off + f.qhi, fill);
  return v;
}

/// An ActQ8 row of k Gaussian floats (sigma varies per row), or with `extreme` every quant +-127.
std::vector<uint8_t> actRow(int64_t k, std::mt19937 &rng, bool extreme = false, bool allPositive = false) {
  std::vector<float> x = randomFloats(k, rng(), 0.1f + static_cast<float>(rng() % 100));
  if (extreme)
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = (allPositive || i % 3) ? 1.0f : -1.0f;
  std::vector<uint8_t> a(actQ8RowBytes(k));
  quantizeActQ8Row(x.data(), a.data(), k);
  return a;
}

/// A float activation row for the float kernels.
std::vector<uint8_t> floatRow(int64_t k, std::mt19937 &rng) {
  std::vector<float> x = randomFloats(k, rng());
  std::vector<uint8_t> a(static_cast<size_t>(k) * 4);
  std::memcpy(a.data(), x.data(), a.size());
  return a;
}

/// Activation values the kernels see, in double.
std::vector<double> actValues(GGMLType t, const std::vector<uint8_t> &a, int64_t k) {
  if (activationFormat(t) == ActFormat::Q8)
    return decodeActQ8(a.data(), k);
  std::vector<double> v(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    float f;
    std::memcpy(&f, a.data() + 4 * i, 4);
    v[static_cast<size_t>(i)] = f;
  }
  return v;
}

/// Row lengths to test: whole super-blocks; for the 32-block types also partial ActQ8 groups.
std::vector<int64_t> lengths(GGMLType t) {
  if (ggmlTypeInfo(t).blockElems == 256)
    return {256, 768};
  if (activationFormat(t) == ActFormat::F32)
    return {37, 256, 1000};
  return {32, 96, 160, 512};
}

class KernelLevel : public ::testing::TestWithParam<std::string> {
protected:
  const KernelTable *table() {
    const KernelTable *t = levelTable(GetParam());
    if (!t)
      ADD_FAILURE() << "no table";
    return t;
  }
  void SetUp() override {
    if (!levelTable(GetParam()))
      GTEST_SKIP() << "this CPU cannot run the " << GetParam() << " kernels";
  }
};

/// Checks a row kernel on `weights` against activations: every nt, each token against the reference, and
/// each token's bits equal in every call shape: in every call where the kernel has one path, and where
/// calls of `from` (> 1) or more tokens take another one (KernelTable::batchFrom), in every call of fewer
/// tokens and in every call of that many or more (both paths held to the reference).
void checkRowKernel(RowKernel row, int from, GGMLType t, int64_t k, const std::vector<uint8_t> &w,
                    const std::vector<std::vector<uint8_t>> &acts, const std::string &what) {
  const DecodedRow dw = decodeExact(t, w.data(), k);
  const void *ap[kMaxRowTokens];
  for (int j = 0; j < kMaxRowTokens; ++j)
    ap[j] = acts[static_cast<size_t>(j)].data();
  float alone[kMaxRowTokens], all[kMaxRowTokens];
  row(k, w.data(), ap, kMaxRowTokens, all);
  for (int j = 0; j < kMaxRowTokens; ++j) {
    row(k, w.data(), &ap[j], 1, &alone[j]);
    const RefDot r = refDot(t, dw, actValues(t, acts[static_cast<size_t>(j)], k));
    ASSERT_NEAR(alone[j], r.value, r.tol) << what << " token " << j;
    ASSERT_NEAR(all[j], r.value, r.tol) << what << " token " << j << " of " << kMaxRowTokens;
    if (from == 0)
      ASSERT_EQ(floatToBits(all[j]), floatToBits(alone[j])) << what << " token " << j;
  }
  for (int nt = 2; nt <= kMaxRowTokens; ++nt) {
    const float *want = from > 0 && nt >= from ? all : alone;
    // Tokens j..j+nt-1 (wrapping), so every token sits at several positions across the calls.
    for (int first = 0; first < kMaxRowTokens; first += 3) {
      const void *sub[kMaxRowTokens];
      for (int j = 0; j < nt; ++j)
        sub[j] = ap[(first + j) % kMaxRowTokens];
      float out[kMaxRowTokens];
      row(k, w.data(), sub, nt, out);
      for (int j = 0; j < nt; ++j)
        ASSERT_EQ(floatToBits(out[j]), floatToBits(want[(first + j) % kMaxRowTokens]))
            << what << " nt=" << nt << " position " << j;
    }
  }
}

TEST_P(KernelLevel, RowKernelsMatchDoubleReference) {
  const KernelTable *kt = table();
  std::mt19937 rng(11);
  for (GGMLType t : kTypes) {
    RowKernel row = kt->getRow(t);
    ASSERT_NE(row, nullptr) << ggmlTypeName(t);
    for (int64_t k : lengths(t))
      for (bool raw : {false, true}) {
        if (raw && activationFormat(t) == ActFormat::F32)
          continue;
        std::vector<uint8_t> w = weightRow(t, k, rng, raw);
        std::vector<std::vector<uint8_t>> acts;
        for (int j = 0; j < kMaxRowTokens; ++j)
          acts.push_back(activationFormat(t) == ActFormat::Q8 ? actRow(k, rng) : floatRow(k, rng));
        checkRowKernel(row, kt->batchFrom[static_cast<uint32_t>(t)], t, k, w, acts,
                       std::string(ggmlTypeName(t)) + " k=" + std::to_string(k) + (raw ? " raw" : " quantized"));
      }
  }
}

/// Checks a row-range kernel on `w` (rows of the same length, laid out `stride` bytes apart) against the row
/// kernel called with the same tokens: every output bit-identical to the row kernel's for its row and token,
/// whatever the run's start and length (so pairs, lane groups of eight, partial groups and the odd last row,
/// for every nt), and nothing written outside the run.
void checkRowsKernel(const KernelTable &kt, GGMLType t, int64_t k, const std::vector<std::vector<uint8_t>> &w,
                     const std::vector<std::vector<uint8_t>> &acts, const std::string &what) {
  const size_t stride = rowBytes(t, k) + 16; // a stride larger than a row, as a split gives
  const int n = static_cast<int>(w.size());
  std::vector<uint8_t> src(stride * static_cast<size_t>(n), 0xcd);
  for (int r = 0; r < n; ++r)
    std::copy(w[static_cast<size_t>(r)].begin(), w[static_cast<size_t>(r)].end(), src.begin() + stride * r);
  const void *ap[kMaxRowTokens];
  for (int j = 0; j < kMaxRowTokens; ++j)
    ap[j] = acts[static_cast<size_t>(j)].data();
  for (int nt = 1; nt <= kMaxRowTokens; ++nt) {
    std::vector<std::vector<float>> want(static_cast<size_t>(n), std::vector<float>(kMaxRowTokens));
    for (int r = 0; r < n; ++r)
      kt.getRow(t)(k, w[static_cast<size_t>(r)].data(), ap, nt, want[static_cast<size_t>(r)].data());
    for (int first = 0; first < n; ++first)
      for (int rows : {n - first, 1, 2, 8, 9, 13}) {
        if (first + rows > n)
          continue;
        std::vector<std::vector<float>> out(static_cast<size_t>(nt), std::vector<float>(n + 1, -7.0f));
        float *op[kMaxRowTokens];
        for (int j = 0; j < nt; ++j)
          op[j] = out[static_cast<size_t>(j)].data() + first;
        kt.getRows(t)(k, src.data() + stride * first, stride, rows, ap, nt, op);
        for (int j = 0; j < nt; ++j)
          for (int r = 0; r <= n; ++r) {
            const float got = out[static_cast<size_t>(j)][static_cast<size_t>(r)];
            if (r < first || r >= first + rows)
              ASSERT_EQ(got, -7.0f) << what << " wrote row " << r << " outside [" << first << ", "
                                    << first + rows << ")";
            else
              ASSERT_EQ(floatToBits(got), floatToBits(want[static_cast<size_t>(r)][static_cast<size_t>(j)]))
                  << what << " nt=" << nt << " rows [" << first << ", " << first + rows << ") row " << r
                  << " token " << j;
          }
      }
  }
}

TEST_P(KernelLevel, RowsKernelsMatchRowKernels) {
  const KernelTable *kt = table();
  std::mt19937 rng(14);
  for (GGMLType t : kTypes) {
    ASSERT_NE(kt->getRows(t), nullptr) << ggmlTypeName(t);
    for (int64_t k : lengths(t)) {
      std::vector<std::vector<uint8_t>> w, acts;
      for (int r = 0; r < 19; ++r) // two whole lane groups of eight and a partial one
        w.push_back(weightRow(t, k, rng, r % 2 == 1));
      for (int j = 0; j < kMaxRowTokens; ++j)
        acts.push_back(activationFormat(t) == ActFormat::Q8 ? actRow(k, rng) : floatRow(k, rng));
      checkRowsKernel(*kt, t, k, w, acts, std::string(ggmlTypeName(t)) + " k=" + std::to_string(k));
    }
  }
}

TEST_P(KernelLevel, BatchKernelsTakeAnotherPathFromBatchFrom) {
  // Where batchFrom is set, calls of that many tokens run the rows-in-lanes kernel: on Gemma 3's shapes
  // (k = 640; 768 for the 256-element K-quants) some outputs differ from the one-token kernel's bits (otherwise the flag, and the tests that
  // rely on it, would describe a path that never runs), both are within the bound, and a call of one token
  // fewer gives the one-token bits.
  const KernelTable *kt = table();
  std::mt19937 rng(15);
  int flagged = 0;
  for (GGMLType t : kTypes) {
    const int from = kt->batchFrom[static_cast<uint32_t>(t)];
    if (from == 0)
      continue;
    ++flagged;
    ASSERT_GE(from, 2) << ggmlTypeName(t);
    ASSERT_LE(from, kMaxRowTokens) << ggmlTypeName(t);
    const int64_t k = ggmlTypeInfo(t).blockElems == 256 ? 768 : 640;
    const int n = 24;
    std::vector<uint8_t> src;
    std::vector<std::vector<uint8_t>> rowsW;
    for (int r = 0; r < n; ++r) {
      rowsW.push_back(weightRow(t, k, rng, false));
      src.insert(src.end(), rowsW.back().begin(), rowsW.back().end());
    }
    std::vector<std::vector<uint8_t>> acts;
    const void *ap[kMaxRowTokens];
    for (int j = 0; j < from; ++j) {
      acts.push_back(actRow(k, rng));
      ap[j] = acts.back().data();
    }
    std::vector<std::vector<float>> one(1, std::vector<float>(n)), fewer(static_cast<size_t>(from - 1)),
        batch(static_cast<size_t>(from));
    float *o1[1] = {one[0].data()}, *oFewer[kMaxRowTokens], *oBatch[kMaxRowTokens];
    for (int j = 0; j < from; ++j) {
      batch[static_cast<size_t>(j)].resize(n);
      oBatch[j] = batch[static_cast<size_t>(j)].data();
      if (j + 1 < from) {
        fewer[static_cast<size_t>(j)].resize(n);
        oFewer[j] = fewer[static_cast<size_t>(j)].data();
      }
    }
    kt->getRows(t)(k, src.data(), rowBytes(t, k), n, ap, 1, o1);
    kt->getRows(t)(k, src.data(), rowBytes(t, k), n, ap, from, oBatch);
    if (from > 1)
      kt->getRows(t)(k, src.data(), rowBytes(t, k), n, ap, from - 1, oFewer);
    int differ = 0;
    for (int r = 0; r < n; ++r) {
      const RefDot ref = refDot(t, decodeExact(t, rowsW[static_cast<size_t>(r)].data(), k), actValues(t, acts[0], k));
      ASSERT_NEAR(one[0][static_cast<size_t>(r)], ref.value, ref.tol) << ggmlTypeName(t) << " row " << r;
      ASSERT_NEAR(batch[0][static_cast<size_t>(r)], ref.value, ref.tol) << ggmlTypeName(t) << " row " << r;
      differ += floatToBits(one[0][static_cast<size_t>(r)]) != floatToBits(batch[0][static_cast<size_t>(r)]);
      if (from > 2) // from = 2: the call of one fewer is the one-token call itself
        ASSERT_EQ(floatToBits(fewer[0][static_cast<size_t>(r)]), floatToBits(one[0][static_cast<size_t>(r)]))
            << ggmlTypeName(t) << " row " << r << ": " << from - 1 << " tokens left the one-token path";
    }
    EXPECT_GT(differ, 0) << ggmlTypeName(t) << ": " << from << " tokens gave the one-token kernel's bits everywhere";
  }
  if (GetParam() == "avx2") {
    EXPECT_GT(kt->batchFrom[static_cast<uint32_t>(GGMLType::Q8_0)], 0) << "q8_0 takes rows in lanes on AVX2";
  }
  if (flagged == 0)
    GTEST_SKIP() << GetParam() << " has no rows-in-lanes kernels";
}

/// Converts `rows` weight rows into a panel and checks every tile call shape against the reference; padded
/// rows must come out as zeros.
void checkPanel(const KernelTable &kt, GGMLType t, int64_t k, int rows, const std::vector<std::vector<uint8_t>> &w,
                const std::vector<std::vector<uint8_t>> &acts, const std::string &what) {
  const int R = kt.panelRows;
  const size_t groupBytes = panelGroupBytes(t, k, R);
  const size_t wb = rowBytes(t, k) + 16; // a stride larger than a row, as a split gives
  std::vector<uint8_t> src(wb * static_cast<size_t>(rows), 0xcd);
  for (int r = 0; r < rows; ++r)
    std::copy(w[static_cast<size_t>(r)].begin(), w[static_cast<size_t>(r)].end(), src.begin() + wb * r);
  std::vector<uint8_t> panel(groupBytes * (kPanelRows / R), 0xee);
  kt.getConvert(t)(k, src.data(), wb, rows, panel.data());
  const int ntok = static_cast<int>(acts.size());
  std::vector<std::vector<float>> alone(static_cast<size_t>(ntok), std::vector<float>(kPanelRows));
  for (int j = 0; j < ntok; ++j) {
    const void *a = acts[static_cast<size_t>(j)].data();
    const std::vector<double> av = actValues(t, acts[static_cast<size_t>(j)], k);
    for (int g = 0; g < kPanelRows / R; ++g) {
      float *o = alone[static_cast<size_t>(j)].data() + g * R;
      kt.getTile(t)(k, panel.data() + groupBytes * g, &a, 1, &o);
    }
    for (int r = 0; r < kPanelRows; ++r) {
      const float got = alone[static_cast<size_t>(j)][static_cast<size_t>(r)];
      if (r >= rows) {
        ASSERT_EQ(got, 0.0f) << what << " padded row " << r;
        continue;
      }
      const RefDot ref = refDot(t, decodeExact(t, w[static_cast<size_t>(r)].data(), k), av);
      ASSERT_NEAR(got, ref.value, ref.tol) << what << " row " << r << " token " << j;
    }
  }
  // Rows in lanes run the panel tiles' float operations per lane: from lanesFrom tokens (one on VNNI for
  // q8_0 and q4_0) the row kernel gives the tile's bits.
  if (const int from = kt.lanesFrom[static_cast<uint32_t>(t)]; from > 0)
    for (int j = 0; j < ntok; ++j)
      for (int r = 0; r < rows; ++r) {
        const void *same[kMaxRowTokens];
        for (int i = 0; i < from; ++i)
          same[i] = acts[static_cast<size_t>(j)].data();
        float out[kMaxRowTokens];
        kt.getRow(t)(k, w[static_cast<size_t>(r)].data(), same, from, out);
        ASSERT_EQ(floatToBits(out[0]), floatToBits(alone[static_cast<size_t>(j)][static_cast<size_t>(r)]))
            << what << ": rows in lanes at " << from << " token(s), row " << r << " token " << j;
      }
  for (int nt = 2; nt <= kMaxTileTokens; ++nt) {
    const void *ap[kMaxTileTokens];
    std::vector<std::vector<float>> outs(static_cast<size_t>(nt), std::vector<float>(R));
    float *op[kMaxTileTokens];
    for (int j = 0; j < nt; ++j) {
      ap[j] = acts[static_cast<size_t>((j + nt) % ntok)].data();
      op[j] = outs[static_cast<size_t>(j)].data();
    }
    for (int g = 0; g < kPanelRows / R; ++g) {
      kt.getTile(t)(k, panel.data() + groupBytes * g, ap, nt, op);
      for (int j = 0; j < nt; ++j)
        for (int r = 0; r < R; ++r)
          ASSERT_EQ(floatToBits(outs[static_cast<size_t>(j)][static_cast<size_t>(r)]),
                    floatToBits(alone[static_cast<size_t>((j + nt) % ntok)][static_cast<size_t>(g * R + r)]))
              << what << " nt=" << nt << " position " << j << " row " << g * R + r;
    }
  }
}

TEST_P(KernelLevel, PanelTilesMatchDoubleReference) {
  const KernelTable *kt = table();
  if (kt->panelRows == 0)
    GTEST_SKIP() << GetParam() << " has no panel kernels (the matmul driver uses its row kernels)";
  std::mt19937 rng(12);
  for (GGMLType t : kTypes) {
    ASSERT_TRUE(kt->getConvert(t) && kt->getTile(t)) << ggmlTypeName(t);
    for (int64_t k : lengths(t))
      for (int rows : {kPanelRows, 27}) {
        std::vector<std::vector<uint8_t>> w, acts;
        for (int r = 0; r < rows; ++r)
          w.push_back(weightRow(t, k, rng, r % 2 == 1));
        for (int j = 0; j < 9; ++j)
          acts.push_back(activationFormat(t) == ActFormat::Q8 ? actRow(k, rng) : floatRow(k, rng));
        checkPanel(*kt, t, k, rows, w, acts,
                   std::string(ggmlTypeName(t)) + " k=" + std::to_string(k) + " rows=" + std::to_string(rows));
      }
  }
}

/// The panel path's products of the kPanelRows rows `w` against the kMaxRowTokens activation rows `ap`:
/// tiles[token][row] (empty rows where the table has no panels).
std::vector<std::vector<float>> panelTiles(const KernelTable *kt, GGMLType t, int64_t k,
                                           const std::vector<std::vector<uint8_t>> &w, const void *const *ap) {
  std::vector<std::vector<float>> tiles(kMaxRowTokens, std::vector<float>(kPanelRows));
  if (kt->panelRows > 0) {
    const size_t groupBytes = panelGroupBytes(t, k, kt->panelRows);
    std::vector<uint8_t> src, panel(groupBytes * (kPanelRows / kt->panelRows));
    for (const auto &row : w)
      src.insert(src.end(), row.begin(), row.end());
    kt->getConvert(t)(k, src.data(), rowBytes(t, k), kPanelRows, panel.data());
    for (int g = 0; g < kPanelRows / kt->panelRows; ++g) {
      float *o[kMaxRowTokens];
      for (int j = 0; j < kMaxRowTokens; ++j)
        o[j] = tiles[static_cast<size_t>(j)].data() + g * kt->panelRows;
      kt->getTile(t)(k, panel.data() + groupBytes * g, ap, kMaxRowTokens, o);
    }
  }
  return tiles;
}

TEST_P(KernelLevel, Q8FamilyKeepsTheSignedSumsPrecision) {
  // The q8_0 family on VNNI runs on q + 128: a path that adds -128 d (d8 sum a) in float beside
  // (d d8) ((q + 128) . a) cancels two terms up to 128 / |q| times the product and keeps their rounding.
  // Small levels (q8_0: -1, 0, 1; IQ4_NL: 1 and -10) against all-positive activations (every block sum of
  // the same sign) make that loss visible: measured in units of u M (M = sum |w| |a|, u = 2^-24), the
  // signed sums' error here is below 1, the float offset's about 30. Every path (one token, rows in lanes,
  // panel tiles) must stay below 8 u M.
  const KernelTable *kt = table();
  std::mt19937 rng(16);
  const int64_t k = 4096;
  const double u = std::ldexp(1.0, -24);
  for (GGMLType t : {GGMLType::Q8_0, GGMLType::IQ4_NL}) {
    std::vector<std::vector<uint8_t>> w, acts;
    std::uniform_real_distribution<float> scale(0.005f, 0.02f), pos(0.5f, 1.0f);
    for (int r = 0; r < kPanelRows; ++r) {
      std::vector<uint8_t> row(rowBytes(t, k));
      const size_t bb = ggmlTypeInfo(t).blockBytes;
      for (size_t off = 0; off < row.size(); off += bb) {
        setHalf(row.data() + off, (rng() % 2 ? 1 : -1) * scale(rng));
        for (size_t i = 2; i < bb; ++i) // q8_0: -1, 0, 1; IQ4_NL: nibbles 7 / 8 (levels -10, 1)
          row[off + i] = t == GGMLType::Q8_0 ? static_cast<uint8_t>(static_cast<int8_t>(rng() % 3) - 1)
                                             : static_cast<uint8_t>((rng() % 2 ? 0x80 : 0x70) | (rng() % 2 ? 8 : 7));
      }
      w.push_back(std::move(row));
    }
    for (int j = 0; j < kMaxRowTokens; ++j) {
      std::vector<float> x(static_cast<size_t>(k));
      for (float &v : x)
        v = pos(rng);
      acts.emplace_back(actQ8RowBytes(k));
      quantizeActQ8Row(x.data(), acts.back().data(), k);
    }
    const void *ap[kMaxRowTokens];
    for (int j = 0; j < kMaxRowTokens; ++j)
      ap[j] = acts[static_cast<size_t>(j)].data();
    const std::vector<std::vector<float>> tiles = panelTiles(kt, t, k, w, ap);
    double worst = 0;
    for (int r = 0; r < kPanelRows; ++r) {
      const DecodedRow dw = decodeExact(t, w[static_cast<size_t>(r)].data(), k);
      float one[kMaxRowTokens], all[kMaxRowTokens];
      for (int j = 0; j < kMaxRowTokens; ++j)
        kt->getRow(t)(k, w[static_cast<size_t>(r)].data(), &ap[j], 1, &one[j]);
      kt->getRow(t)(k, w[static_cast<size_t>(r)].data(), ap, kMaxRowTokens, all);
      for (int j = 0; j < kMaxRowTokens; ++j) {
        const std::vector<double> av = decodeActQ8(ap[j], k);
        double exact = 0, m = 0;
        for (int64_t i = 0; i < k; ++i) {
          exact += dw.value[static_cast<size_t>(i)] * av[static_cast<size_t>(i)];
          m += std::fabs(dw.value[static_cast<size_t>(i)] * av[static_cast<size_t>(i)]);
        }
        std::vector<std::pair<const char *, float>> paths = {{"one token", one[j]}, {"eight tokens", all[j]}};
        if (kt->panelRows > 0)
          paths.push_back({"panel tile", tiles[static_cast<size_t>(j)][static_cast<size_t>(r)]});
        for (const auto &[path, got] : paths) {
          const double e = std::fabs(got - exact) / (u * m);
          worst = std::max(worst, e);
          ASSERT_LT(e, 8.0) << ggmlTypeName(t) << " " << path << " row " << r << " token " << j << ": " << got
                            << " vs " << exact;
        }
      }
    }
    std::printf("[ %-10s ] %s: worst error %.2f u M\n", GetParam().c_str(), ggmlTypeName(t), worst);
  }
}

/// An ActQ8 row of positive quants (every block sum large) tuned against the weight values w: per block, one
/// pass sets each quant (in 1..127) so that the block's exact dot sum w a comes close to zero, so the terms
/// a kernel sums are small and a block's offset term Off d (d8 sum a), where a path adds it in float, is
/// hundreds of times larger than they are. Block scales are bf16 powers of two times 1 + j / 128.
std::vector<uint8_t> tunedActRow(const std::vector<double> &w, int64_t k, std::mt19937 &rng) {
  std::vector<uint8_t> row(actQ8RowBytes(k), 0);
  auto *g = reinterpret_cast<ActQ8Group *>(row.data());
  for (int64_t b = 0; b < k / 32; ++b) {
    ActQ8Group &grp = g[b / 4];
    const int s = static_cast<int>(b % 4);
    int a[32];
    double sum = 0;
    for (int i = 0; i < 32; ++i) {
      a[i] = 20 + static_cast<int>(rng() % 100);
      sum += w[static_cast<size_t>(32 * b + i)] * a[i];
    }
    for (int n = 0; n < 32; ++n) {
      const int i = static_cast<int>((n * 7 + b) % 32);
      const double wi = w[static_cast<size_t>(32 * b + i)];
      if (wi == 0)
        continue;
      const int to = static_cast<int>(std::clamp(std::nearbyint(a[i] - sum / wi), 1.0, 127.0));
      sum += wi * (to - a[i]);
      a[i] = to;
    }
    int half[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      grp.qs[32 * s + i] = static_cast<int8_t>(a[i]);
      half[i / 16] += a[i];
    }
    grp.d[s] = std::ldexp(1.0f + static_cast<float>(rng() % 128) / 128, -6 - static_cast<int>(rng() % 4));
    grp.hs[2 * s] = static_cast<int16_t>(half[0]);
    grp.hs[2 * s + 1] = static_cast<int16_t>(half[1]);
    grp.ds[s] = grp.d[s] * static_cast<float>(half[0] + half[1]);
  }
  return row;
}

TEST_P(KernelLevel, OffsetsComeOffExactly) {
  // Every format whose value is one scale times (q - offset) sums the signed integers exactly on every path
  // (row kernels, rows in lanes, panel tiles), however its quants are stored (q4_0 / q5_0 nibbles, MXFP4
  // v + 12, VNNI's v + 128, q3_K folded + 127, the grid panels' q + 64): a kernel result then differs from
  // the exact product only by the rounding of the block terms t_b = (d d8)_b (integer sum)_b and of their
  // sum, |got - exact| <= (blocks + 4) u sum_b |t_b| (u = 2^-24; each term rounded at most twice, each
  // partial sum once). A path that adds the offset as a float term -Off d (d8 sum a) keeps that term's
  // rounding instead, up to u Off |d d8 sum a| per block: activations tuned so that the block terms nearly
  // cancel (tunedActRow) put that hundreds of times over the bound.
  const KernelTable *kt = table();
  std::mt19937 rng(17);
  const int64_t k = 1024;
  const double u = std::ldexp(1.0, -24);
  for (GGMLType t : {GGMLType::Q4_0, GGMLType::Q5_0, GGMLType::Q8_0, GGMLType::IQ4_NL, GGMLType::IQ4_XS,
                     GGMLType::MXFP4, GGMLType::Q3_K, GGMLType::Q6_K, GGMLType::IQ2_XXS, GGMLType::IQ2_XS,
                     GGMLType::IQ2_S, GGMLType::IQ3_XXS, GGMLType::IQ3_S, GGMLType::IQ1_S, GGMLType::IQ1_M}) {
    std::vector<std::vector<uint8_t>> w, acts;
    std::vector<DecodedRow> dw;
    for (int r = 0; r < kPanelRows; ++r) {
      w.push_back(weightRow(t, k, rng, r % 2 == 1));
      dw.push_back(decodeExact(t, w.back().data(), k));
    }
    for (int j = 0; j < kMaxRowTokens; ++j) // token j tuned against row j
      acts.push_back(tunedActRow(dw[static_cast<size_t>(j)].value, k, rng));
    const void *ap[kMaxRowTokens];
    for (int j = 0; j < kMaxRowTokens; ++j)
      ap[j] = acts[static_cast<size_t>(j)].data();
    const std::vector<std::vector<float>> tiles = panelTiles(kt, t, k, w, ap);
    const int lanesFrom = kt->lanesFrom[static_cast<uint32_t>(t)], batchFrom = kt->batchFrom[static_cast<uint32_t>(t)];
    double worst = 0;
    for (int r = 0; r < kPanelRows; ++r) {
      float one[kMaxRowTokens], all[kMaxRowTokens];
      for (int j = 0; j < kMaxRowTokens; ++j)
        kt->getRow(t)(k, w[static_cast<size_t>(r)].data(), &ap[j], 1, &one[j]);
      kt->getRow(t)(k, w[static_cast<size_t>(r)].data(), ap, kMaxRowTokens, all);
      for (int j = 0; j < kMaxRowTokens; ++j) {
        const std::vector<double> av = decodeActQ8(ap[j], k);
        double exact = 0, terms = 0;
        for (int64_t b = 0; b < k / 32; ++b) {
          double tb = 0;
          for (int64_t i = 32 * b; i < 32 * b + 32; ++i)
            tb += dw[static_cast<size_t>(r)].value[static_cast<size_t>(i)] * av[static_cast<size_t>(i)];
          exact += tb;
          terms += std::fabs(tb);
        }
        const double bound = (static_cast<double>(k / 32) + 4) * u * terms;
        const std::string what = std::string(ggmlTypeName(t)) + " row " + std::to_string(r) + " token " +
                                 std::to_string(j) + (r == j ? " (tuned)" : "");
        std::vector<std::pair<const char *, float>> paths = {{"one token", one[j]}, {"eight tokens", all[j]}};
        if (kt->panelRows > 0)
          paths.push_back({"panel tile", tiles[static_cast<size_t>(j)][static_cast<size_t>(r)]});
        for (const auto &[path, got] : paths) {
          const double e = std::fabs(got - exact);
          if (r == j)
            worst = std::max(worst, terms > 0 ? e / (u * terms) : e > 0 ? 1e30 : 0);
          ASSERT_LE(e, bound) << what << " " << path << ": " << got << " vs " << exact << ", bound " << bound;
        }
        // The designed bit-identities: eight tokens in lanes give the tile's bits; without another batch
        // path, the one-token bits.
        if (kt->panelRows > 0 && lanesFrom > 0) {
          ASSERT_EQ(floatToBits(all[j]), floatToBits(tiles[static_cast<size_t>(j)][static_cast<size_t>(r)])) << what;
        }
        if (batchFrom == 0) {
          ASSERT_EQ(floatToBits(all[j]), floatToBits(one[j])) << what;
        }
      }
    }
    std::printf("[ %-10s ] %s: worst tuned error %.2f u sum|t_b|\n", GetParam().c_str(), ggmlTypeName(t), worst);
  }
}

TEST_P(KernelLevel, ExtremeQuantsDoNotSaturate) {
  // The largest byte sums the pair instructions see: every quant at its maximum (or a pattern) against
  // activations of +-127; q8_0 also at -128.
  const KernelTable *kt = table();
  std::mt19937 rng(13);
  for (GGMLType t : kTypes) {
    if (activationFormat(t) != ActFormat::Q8)
      continue;
    const int64_t k = 256;
    for (uint8_t fill : {uint8_t(0xff), uint8_t(0x80), uint8_t(0x7f), uint8_t(0x00), uint8_t(0x88)}) {
      std::vector<std::vector<uint8_t>> w, acts;
      for (int r = 0; r < kPanelRows; ++r)
        w.push_back(filledRow(t, k, fill, rng));
      for (int j = 0; j < kMaxRowTokens; ++j)
        acts.push_back(actRow(k, rng, true, j % 2 == 0));
      const std::string what = std::string(ggmlTypeName(t)) + " fill=" + std::to_string(fill);
      checkRowKernel(kt->getRow(t), kt->batchFrom[static_cast<uint32_t>(t)], t, k, w[0], acts, what);
      checkRowsKernel(*kt, t, k, std::vector<std::vector<uint8_t>>(w.begin(), w.begin() + 11), acts, what);
      if (kt->panelRows > 0)
        checkPanel(*kt, t, k, kPanelRows, w, acts, what);
    }
  }
}

TEST_P(KernelLevel, ActQ8QuantizerEqualsReference) {
  const KernelTable *kt = table();
  ASSERT_NE(kt->quantizeQ8, nullptr);
  for (int64_t k : {32, 96, 128, 256, 4128}) {
    for (uint32_t seed = 0; seed < 6; ++seed) {
      std::vector<float> x = randomFloats(k, seed, seed % 2 ? 1e-3f : 10.0f);
      if (seed == 3)
        std::fill(x.begin(), x.begin() + 32, 0.0f); // an all-zero block
      for (int64_t j = 0; j < k; j += 7)
        x[static_cast<size_t>(j)] = std::nearbyint(x[static_cast<size_t>(j)]) + 0.5f;
      std::vector<uint8_t> ref(actQ8RowBytes(k), 0x11), got(actQ8RowBytes(k), 0xee);
      quantizeActQ8Row(x.data(), ref.data(), k);
      kt->quantizeQ8(x.data(), got.data(), k);
      ASSERT_EQ(ref, got) << "k=" << k << " seed " << seed;
    }
  }
  // Ties: scale exactly 1 (amax 127) with values at j + 0.5 round half to even.
  std::vector<float> x(256);
  for (int j = 0; j < 256; ++j)
    x[static_cast<size_t>(j)] = (j % 2 ? 1 : -1) * (static_cast<float>(j % 100) + 0.5f);
  for (int b = 0; b < 256; b += 32)
    x[static_cast<size_t>(b)] = 127.0f;
  std::vector<uint8_t> ref(actQ8RowBytes(256)), got(actQ8RowBytes(256));
  quantizeActQ8Row(x.data(), ref.data(), 256);
  kt->quantizeQ8(x.data(), got.data(), 256);
  ASSERT_EQ(ref, got) << "ties";
}

INSTANTIATE_TEST_SUITE_P(Cpu, KernelLevel, ::testing::Values("scalar", "avx2", "vnni_emulated", "avx512", "avx512vnni"),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

TEST(ActQ8, BlocksHoldScalesQuantsAndSums) {
  const int64_t k = 96 + 32; // four blocks: one whole group
  std::vector<float> x = randomFloats(k * 3, 3, 2.0f);
  std::vector<uint8_t> row(actQ8RowBytes(k * 3));
  quantizeActQ8Row(x.data(), row.data(), k * 3);
  const auto *g = reinterpret_cast<const ActQ8Group *>(row.data());
  for (int64_t b = 0; b < 3 * k / 32; ++b) {
    const ActQ8Group &grp = g[b / 4];
    const int s = static_cast<int>(b % 4);
    const float d = grp.d[s];
    EXPECT_EQ(floatToBits(d) & 0xffffu, 0u) << "scale of block " << b << " is not a bf16 value";
    float amax = 0;
    for (int j = 0; j < 32; ++j)
      amax = std::max(amax, std::fabs(x[static_cast<size_t>(32 * b + j)]));
    EXPECT_NEAR(d, amax / 127, amax / 127 / 256) << b;
    int half[2] = {0, 0};
    for (int j = 0; j < 32; ++j) {
      const int q = grp.qs[32 * s + j];
      half[j / 16] += q;
      ASSERT_GE(q, -127);
      // |x - d q| <= d / 2: the rounding error every activation carries.
      ASSERT_LE(std::fabs(x[static_cast<size_t>(32 * b + j)] - d * q), d / 2 * (1 + 1e-6)) << b << " " << j;
    }
    EXPECT_EQ(grp.hs[2 * s], half[0]);
    EXPECT_EQ(grp.hs[2 * s + 1], half[1]);
    EXPECT_EQ(grp.ds[s], d * static_cast<float>(half[0] + half[1]));
  }
  // A row that ends inside a group: the missing blocks are zero.
  std::vector<uint8_t> tail(actQ8RowBytes(64), 0x55);
  quantizeActQ8Row(x.data(), tail.data(), 64);
  const auto *tg = reinterpret_cast<const ActQ8Group *>(tail.data());
  for (int s = 2; s < 4; ++s) {
    EXPECT_EQ(tg->d[s], 0.0f);
    EXPECT_EQ(tg->ds[s], 0.0f);
    for (int j = 0; j < 32; ++j)
      ASSERT_EQ(tg->qs[32 * s + j], 0);
  }
}

} // namespace
