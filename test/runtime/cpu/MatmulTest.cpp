//===- MatmulTest.cpp - matmul and matmulId against double references ------===//
//
// The driver over the kernels: every supported type at every ISA level this machine has, token counts on
// both sides of the panel threshold and of the 8-token tiles (1, 4, 7, 9, 31, 32, 33, 70), a row count that
// is no multiple of a panel group (67), 1-3 threads. The reference is the exact product of the quantized
// operands (activations quantized by the reference quantizer, which every ISA's quantizer matches byte for
// byte) with the derived tolerance of KernelRef.h; the legacy types keep their own reference (their
// activation blocks carry an fp16-rounded d * sum). Results must not change with the thread count.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Matmul.h"
#include "runtime/cpu/quant/ActQ8.h"
#include "runtime/cpu/quant/Kernels.h"
#include "runtime/cpu/quant/Quant.h"
#include "runtime/ggml/Blocks.h"
#include "test/runtime/cpu/KernelRef.h"
#include "test/runtime/cpu/TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

using namespace tpc;
using namespace tpc::rt::cpu;
using namespace tpc::rt::cpu::test;

namespace {

/// A random weight matrix, inputs and the reference outputs with their tolerances.
struct Problem {
  GGMLType t;
  int64_t n, k, m;
  std::vector<uint8_t> w;
  std::vector<float> x;
  size_t wStride;
  std::vector<double> ref, tol; ///< [m][n]

  /// `xIn`: the inputs to use (m x k), else random ones.
  Problem(GGMLType type, int64_t n_, int64_t k_, int64_t m_, uint32_t seed, const std::vector<float> *xIn = nullptr)
      : t(type), n(n_), k(k_), m(m_) {
    wStride = rowBytes(t, k) + 64; // a padded stride, as a split or a view would give
    w.assign(wStride * n, 0xcd);
    std::vector<float> src = randomFloats(n * k, seed, 0.1f);
    for (int64_t r = 0; r < n; ++r)
      quantizeOrCopy(src.data() + r * k, w.data() + r * wStride, seed + static_cast<uint32_t>(r));
    x = xIn ? *xIn : randomFloats(m * k, seed + 1);
    ref.assign(static_cast<size_t>(m * n), 0.0);
    tol.assign(static_cast<size_t>(m * n), 0.0);
    if (activationFormat(t) == ActFormat::Legacy)
      legacyReference();
    else
      exactReference();
  }

  void quantizeOrCopy(const float *src, uint8_t *dst, uint32_t seed) {
    if (supportsQuantize(t)) {
      quantizeRow(t, src, dst, k);
      return;
    }
    // IQ4_NL / MXFP4 have no quantizer here: random nibbles with a sane scale.
    std::mt19937 rng(seed ^ 77u);
    const GGMLTypeInfo &info = ggmlTypeInfo(t);
    for (size_t off = 0; off < rowBytes(t, k); off += info.blockBytes) {
      for (uint32_t b = 0; b < info.blockBytes; ++b)
        dst[off + b] = static_cast<uint8_t>(rng());
      if (t == GGMLType::MXFP4)
        dst[off] = static_cast<uint8_t>(120 + rng() % 4);
      else if (isGridType(t)) // IQ1_M keeps d in its scale words
        setGridHalf(t, dst + off, fp32ToFp16(0.001f * (1 + rng() % 8)));
      else {
        uint16_t d = fp32ToFp16(0.001f * (1 + rng() % 8));
        std::memcpy(dst + off, &d, 2);
      }
    }
  }

  /// ActQ8 and float types: the exact product of the quantized operands (KernelRef.h).
  void exactReference() {
    std::vector<uint8_t> act(actQ8RowBytes(k));
    for (int64_t i = 0; i < m; ++i) {
      std::vector<double> a(static_cast<size_t>(k));
      if (activationFormat(t) == ActFormat::Q8) {
        quantizeActQ8Row(x.data() + i * k, act.data(), k);
        a = decodeActQ8(act.data(), k);
      } else {
        for (int64_t j = 0; j < k; ++j)
          a[static_cast<size_t>(j)] = x[static_cast<size_t>(i * k + j)];
      }
      for (int64_t r = 0; r < n; ++r) {
        const RefDot d = refDot(t, decodeExact(t, w.data() + r * wStride, k), a);
        ref[static_cast<size_t>(i * n + r)] = d.value;
        tol[static_cast<size_t>(i * n + r)] = d.tol;
      }
    }
  }

  /// Legacy types: W dequantized, x quantized to vecDotType and back, with the Q8_1 blocks' stored
  /// fp16(d * sum q) used for the offset term as the kernels do.
  void legacyReference() {
    const GGMLType act = vecDotType(t);
    std::vector<float> wf(static_cast<size_t>(n * k)), xq(static_cast<size_t>(k));
    for (int64_t r = 0; r < n; ++r)
      dequantizeRow(t, w.data() + r * wStride, wf.data() + r * k, k);
    std::vector<uint8_t> tmp(rowBytes(act, k));
    for (int64_t i = 0; i < m; ++i) {
      quantizeActivationRow(act, x.data() + i * k, tmp.data(), k);
      dequantizeRow(act, tmp.data(), xq.data(), k);
      for (int64_t r = 0; r < n; ++r) {
        double s = 0, mag = 0;
        for (int64_t j = 0; j < k; ++j) {
          const double p = double(wf[static_cast<size_t>(r * k + j)]) * xq[static_cast<size_t>(j)];
          s += p;
          mag += std::fabs(p);
        }
        if (act == GGMLType::Q8_1) {
          const auto *b = reinterpret_cast<const BlockQ8_1 *>(tmp.data());
          for (int64_t blk = 0; blk < k / 32; ++blk) {
            int sum = 0;
            for (int8_t q : b[blk].qs)
              sum += q;
            uint16_t mw;
            std::memcpy(&mw, w.data() + r * wStride + blk * ggmlTypeInfo(t).blockBytes + 2, 2);
            s += double(fp16ToFp32(mw)) * (double(fp16ToFp32(b[blk].s)) - double(fp16ToFp32(b[blk].d)) * sum);
          }
        }
        ref[static_cast<size_t>(i * n + r)] = s;
        tol[static_cast<size_t>(i * n + r)] = 2e-5 * mag + 1e-6;
      }
    }
  }

  /// Runs matmul with the given options into y (rows of yStride floats), on `xIn` (same values as x) if given.
  void run(ThreadGroup &g, const MatmulOptions &opts, std::vector<float> &y, size_t yStride,
           const float *xIn = nullptr) const {
    MatmulArgs a;
    static_cast<MatmulOptions &>(a) = opts;
    a.w = w.data();
    a.wType = t;
    a.n = n;
    a.k = k;
    a.wRowStride = wStride;
    a.x = xIn ? xIn : x.data();
    a.m = m;
    a.xRowStride = static_cast<size_t>(k);
    a.y = y.data();
    a.yRowStride = yStride;
    matmul(a, g);
  }
};

std::vector<Isa> isasHere() {
  std::vector<Isa> v = {Isa::Scalar};
  for (Isa isa : {Isa::AVX2, Isa::AVX512, Isa::AVX512VNNI})
    if (isaAvailable(isa))
      v.push_back(isa);
  return v;
}

} // namespace

class MatmulType : public ::testing::TestWithParam<GGMLType> {};

TEST_P(MatmulType, MatchesReferenceForOddShapesThreadsAndIsas) {
  GGMLType t = GetParam();
  const int64_t k = 512, n = 67;
  for (int64_t m : {1, 4, 7, 9, 31, 32, 33, 70}) {
    Problem p(t, n, k, m, static_cast<uint32_t>(m) * 31 + static_cast<uint32_t>(t));
    for (Isa isa : isasHere()) {
      std::vector<float> first;
      for (int threads : {1, 2, 3}) {
        ThreadGroup g(threads);
        const size_t yStride = static_cast<size_t>(n) + 3;
        std::vector<float> y(yStride * m, std::nanf(""));
        MatmulOptions o;
        o.isa = isa;
        p.run(g, o, y, yStride);
        const std::string what = std::string(ggmlTypeName(t)) + " " + isaName(isa) + " m=" + std::to_string(m) +
                                 " threads=" + std::to_string(threads);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t r = 0; r < n; ++r)
            ASSERT_NEAR(y[i * yStride + r], p.ref[static_cast<size_t>(i * n + r)], p.tol[static_cast<size_t>(i * n + r)])
                << what << " token " << i << " row " << r;
          for (size_t r = n; r < yStride; ++r)
            ASSERT_TRUE(std::isnan(y[i * yStride + r])) << what << ": wrote past n";
        }
        // Units are claimed dynamically, but a (row, token) result never depends on who computed it.
        if (first.empty())
          first = y;
        else
          for (size_t j = 0; j < y.size(); ++j)
            ASSERT_EQ(floatToBits(y[j]), floatToBits(first[j])) << what << ": threads changed output " << j;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, MatmulType, ::testing::ValuesIn(supportedTypes()),
                         [](const ::testing::TestParamInfo<GGMLType> &i) {
                           return std::string(ggmlTypeName(i.param));
                         });

TEST(Matmul, PanelAndRowPathsAgreeWithinTheBound) {
  // The two paths sum the same exact terms in another order: at 40 tokens both must meet the bound, and
  // they differ (otherwise the panel path would not have run).
  for (GGMLType t : {GGMLType::Q4_K, GGMLType::Q6_K, GGMLType::Q8_0, GGMLType::Q5_0, GGMLType::F16}) {
    Problem p(t, 64, 1024, 40, 5);
    ThreadGroup g(2);
    std::vector<float> panels(64 * 40), rows(64 * 40);
    MatmulOptions o;
    p.run(g, o, panels, 64);
    o.allowPanels = false;
    p.run(g, o, rows, 64);
    int differ = 0;
    for (size_t j = 0; j < panels.size(); ++j) {
      ASSERT_NEAR(panels[j], p.ref[j], p.tol[j]) << ggmlTypeName(t) << " panels " << j;
      ASSERT_NEAR(rows[j], p.ref[j], p.tol[j]) << ggmlTypeName(t) << " rows " << j;
      differ += floatToBits(panels[j]) != floatToBits(rows[j]);
    }
    const KernelTable &kt = kernelTable(activeIsa());
    if (kt.panelRows > 0 && kt.lanesFrom[static_cast<uint32_t>(t)] > 0) {
      // The rows-in-lanes kernels run the panel tiles' float operations per lane: the same bits, so a
      // token's result does not change where the batch reaches kPanelMinTokens.
      EXPECT_EQ(differ, 0) << ggmlTypeName(t) << ": the lanes and panel paths differ";
    } else if (kt.panelRows > 0) {
      EXPECT_GT(differ, 0) << ggmlTypeName(t) << ": the panel path gave the row path's bits everywhere";
    }
  }
}

namespace {

/// Experts packed into one [E][n][k] tensor (each expert a Problem sharing x's seed).
struct Experts {
  std::vector<Problem> ex;
  std::vector<uint8_t> w;
  Experts(GGMLType t, int64_t e, int64_t n, int64_t k, int64_t xRows) {
    const std::vector<float> x = randomFloats(xRows * k, 299);
    for (int64_t i = 0; i < e; ++i)
      ex.emplace_back(t, n, k, xRows, 300 + static_cast<uint32_t>(i), &x);
    for (auto &p : ex)
      w.insert(w.end(), p.w.begin(), p.w.end());
  }
  MatmulIdArgs args(const Problem &x0, float *y, int64_t n) const {
    MatmulIdArgs a;
    a.w = w.data();
    a.wType = ex[0].t;
    a.n = n;
    a.k = ex[0].k;
    a.wRowStride = ex[0].wStride;
    a.wExpertStride = ex[0].wStride * static_cast<size_t>(n);
    a.nExperts = static_cast<int64_t>(ex.size());
    a.x = x0.x.data();
    a.xRowStride = static_cast<size_t>(x0.k);
    a.xRowCount = x0.m;
    a.y = y;
    a.yRowStride = static_cast<size_t>(n);
    return a;
  }
};

} // namespace

// Entries in any order; experts with 40 entries (panels) and with 1-3 (rows); each entry must equal what
// matmul gives for its expert's rows in entry order, bit for bit, and every entry the reference.
TEST(MatmulId, EntriesEqualPerExpertMatmuls) {
  for (GGMLType t : {GGMLType::Q4_K, GGMLType::Q8_0, GGMLType::Q6_K, GGMLType::F32, GGMLType::Q4_1}) {
    SCOPED_TRACE(ggmlTypeName(t));
    const int64_t k = 256, n = 37, xCount = 50;
    Experts ex(t, 5, n, k, xCount);
    std::vector<int32_t> exps, xRows, yRows;
    std::mt19937 rng(3);
    for (int i = 0; i < 40; ++i) { // expert 2: many tokens
      exps.push_back(2);
      xRows.push_back(static_cast<int32_t>(rng() % xCount));
    }
    for (int32_t e : {3, 0, 3, 4, 4, 4}) { // a few tokens each, interleaved
      exps.push_back(e);
      xRows.push_back(static_cast<int32_t>(rng() % xCount));
    }
    std::shuffle(exps.begin(), exps.end(), rng); // xRows stay random per entry
    for (size_t i = 0; i < exps.size(); ++i)
      yRows.push_back(static_cast<int32_t>(i));
    ThreadGroup g(3);
    std::vector<float> got(exps.size() * n, -1.0f);
    MatmulIdArgs a = ex.args(ex.ex[0], got.data(), n);
    a.experts = exps.data();
    a.xRows = xRows.data();
    a.yRows = yRows.data();
    a.count = static_cast<int64_t>(exps.size());
    matmulId(a, g);
    for (int32_t e = 0; e < 5; ++e) {
      std::vector<float> xs;
      std::vector<size_t> entries;
      for (size_t i = 0; i < exps.size(); ++i)
        if (exps[i] == e) {
          entries.push_back(i);
          xs.insert(xs.end(), ex.ex[0].x.begin() + xRows[i] * k, ex.ex[0].x.begin() + (xRows[i] + 1) * k);
        }
      if (entries.empty())
        continue;
      std::vector<float> want(entries.size() * n);
      MatmulArgs one;
      one.w = ex.w.data() + static_cast<size_t>(e) * ex.ex[0].wStride * n;
      one.wType = t;
      one.n = n;
      one.k = k;
      one.wRowStride = ex.ex[0].wStride;
      one.x = xs.data();
      one.m = static_cast<int64_t>(entries.size());
      one.xRowStride = k;
      one.y = want.data();
      one.yRowStride = n;
      matmul(one, g);
      for (size_t j = 0; j < entries.size(); ++j)
        for (int64_t r = 0; r < n; ++r) {
          const float v = got[entries[j] * n + r];
          ASSERT_EQ(floatToBits(v), floatToBits(want[j * n + r])) << "expert " << e << " entry " << entries[j];
          const size_t refAt = static_cast<size_t>(xRows[entries[j]] * n + r);
          ASSERT_NEAR(v, ex.ex[static_cast<size_t>(e)].ref[refAt], ex.ex[static_cast<size_t>(e)].tol[refAt]);
        }
    }
    std::vector<int32_t> badExp = exps;
    badExp[2] = 5;
    a.experts = badExp.data();
    EXPECT_THROW(matmulId(a, g), std::invalid_argument);
    a.experts = exps.data();
    std::vector<int32_t> badX = xRows;
    badX[1] = static_cast<int32_t>(xCount);
    a.xRows = badX.data();
    EXPECT_THROW(matmulId(a, g), std::invalid_argument);
  }
}

// A MoE prefill as the fixtures run it (tiny-qwen3moe: 8 experts of 256 x 256, 12 tokens, top 2, so 0-6
// tokens per expert: the row and rows-in-lanes kernels, no panels) at every level this machine has, for the
// weight types of the Q8_0 and Q4_K_M experts: every entry within the exact product's bound of KernelRef.h.
// The levels then differ from each other by float order only (at most the sum of two bounds): a larger
// difference between two levels' models is a rounding flip downstream (an 8-bit activation or an f16 cache
// element on the other side of its rounding boundary), never a kernel. The test would catch a kernel or
// driver path of one level (VNNI's q + 128 lanes from one token, the AVX2 sign-trick lanes) that sums
// anything but the exact terms.
TEST(MatmulId, MoePrefillAtEveryLevelIsTheExactProduct) {
  const int64_t k = 256, n = 256, xCount = 12, experts = 8;
  std::vector<int32_t> exps, xRows, yRows;
  std::mt19937 rng(11);
  for (int64_t i = 0; i < xCount; ++i) {
    const int32_t a = static_cast<int32_t>(rng() % experts);
    const int32_t b = static_cast<int32_t>((a + 1 + rng() % (experts - 1)) % experts); // two distinct experts
    for (int32_t e : {a, b}) {
      exps.push_back(e);
      xRows.push_back(static_cast<int32_t>(i));
      yRows.push_back(static_cast<int32_t>(exps.size() - 1));
    }
  }
  for (GGMLType t : {GGMLType::Q8_0, GGMLType::Q4_K, GGMLType::Q5_0, GGMLType::Q6_K}) {
    Experts ex(t, experts, n, k, xCount);
    for (Isa isa : isasHere()) {
      SCOPED_TRACE(std::string(ggmlTypeName(t)) + " " + isaName(isa));
      ThreadGroup g(2);
      std::vector<float> got(exps.size() * n, std::nanf(""));
      MatmulIdArgs a = ex.args(ex.ex[0], got.data(), n);
      a.isa = isa;
      a.experts = exps.data();
      a.xRows = xRows.data();
      a.yRows = yRows.data();
      a.count = static_cast<int64_t>(exps.size());
      matmulId(a, g);
      for (size_t j = 0; j < exps.size(); ++j)
        for (int64_t r = 0; r < n; ++r) {
          const Problem &p = ex.ex[static_cast<size_t>(exps[j])];
          const size_t at = static_cast<size_t>(xRows[j] * n + r);
          ASSERT_NEAR(got[j * n + r], p.ref[at], p.tol[at])
              << "entry " << j << " (expert " << exps[j] << ") row " << r;
        }
    }
  }
}

// Gate and up: two matmulIds on one input and one routing as one job equal the two separate calls.
TEST(MatmulIdBatch, GateAndUpTogetherEqualSeparateCalls) {
  const int64_t k = 256, n = 40, xCount = 48;
  Experts gate(GGMLType::Q4_K, 4, n, k, xCount), up(GGMLType::Q5_K, 4, n, k, xCount);
  std::vector<int32_t> exps, xRows, yRows;
  for (int i = 0; i < xCount; ++i)
    for (int s = 0; s < 2; ++s) { // 2 slots per token; expert 1 gets every token (panels), the others few
      exps.push_back(s == 0 ? 1 : (i % 7 == 0 ? 3 : i % 5 == 0 ? 0 : 2));
      xRows.push_back(i);
      yRows.push_back(2 * i + s);
    }
  ThreadGroup g(2);
  ActivationCache cache;
  std::vector<float> yg(exps.size() * n), yu(exps.size() * n), wg(exps.size() * n), wu(exps.size() * n);
  MatmulIdArgs parts[2] = {gate.args(gate.ex[0], yg.data(), n), up.args(gate.ex[0], yu.data(), n)};
  for (MatmulIdArgs &a : parts) {
    a.cache = &cache;
    a.experts = exps.data();
    a.xRows = xRows.data();
    a.yRows = yRows.data();
    a.count = static_cast<int64_t>(exps.size());
  }
  matmulIdBatch(parts, 2, g);
  EXPECT_EQ(cache.conversions(), 1u);
  MatmulIdArgs one = parts[0];
  one.cache = nullptr;
  one.y = wg.data();
  matmulId(one, g);
  one = parts[1];
  one.cache = nullptr;
  one.y = wu.data();
  matmulId(one, g);
  for (size_t j = 0; j < yg.size(); ++j) {
    ASSERT_EQ(floatToBits(yg[j]), floatToBits(wg[j])) << "gate " << j;
    ASSERT_EQ(floatToBits(yu[j]), floatToBits(wu[j])) << "up " << j;
  }
}

// Q/K/V-like parts of different types and sizes on one input as one job: each part equals its own matmul,
// and the input is converted once (through the shared cache); the same for two matmulId parts (gate, up).
TEST(MatmulBatch, PartsEqualSeparateProductsAndShareTheConversion) {
  for (int64_t m : {3, 40}) {
    SCOPED_TRACE(m);
    Problem q(GGMLType::Q4_K, 64, 512, m, 1), k(GGMLType::Q8_0, 24, 512, m, 2, &q.x), v(GGMLType::Q6_K, 24, 512, m, 3, &q.x);
    ThreadGroup g(2);
    ActivationCache cache;
    std::vector<float> yq(64 * m), yk(24 * m), yv(24 * m), wq(64 * m), wk(24 * m), wv(24 * m);
    MatmulArgs parts[3];
    const Problem *ps[3] = {&q, &k, &v};
    std::vector<float> *ys[3] = {&yq, &yk, &yv}, *ws[3] = {&wq, &wk, &wv};
    for (int i = 0; i < 3; ++i) {
      MatmulArgs &a = parts[i];
      a.cache = &cache;
      a.w = ps[i]->w.data();
      a.wType = ps[i]->t;
      a.n = ps[i]->n;
      a.k = 512;
      a.wRowStride = ps[i]->wStride;
      a.x = q.x.data();
      a.m = m;
      a.xRowStride = 512;
      a.y = ys[i]->data();
      a.yRowStride = static_cast<size_t>(ps[i]->n);
      ps[i]->run(g, MatmulOptions{}, *ws[i], static_cast<size_t>(ps[i]->n));
    }
    matmulBatch(parts, 3, g);
    EXPECT_EQ(cache.conversions(), 1u);
    EXPECT_EQ(cache.hits(), 2u);
    for (int i = 0; i < 3; ++i)
      for (size_t j = 0; j < ys[i]->size(); ++j)
        ASSERT_EQ(floatToBits((*ys[i])[j]), floatToBits((*ws[i])[j])) << "part " << i << " " << j;
  }
}

TEST(MatmulErrors, BadArgumentsAreClearErrors) {
  ThreadGroup g(2);
  std::vector<uint8_t> w(4096);
  std::vector<float> x(512), y(64);
  MatmulArgs a;
  a.w = w.data();
  a.wType = GGMLType::Q4_K;
  a.n = 2;
  a.k = 100; // not a multiple of 256
  a.wRowStride = 144;
  a.x = x.data();
  a.m = 1;
  a.xRowStride = 100;
  a.y = y.data();
  a.yRowStride = 2;
  try {
    matmul(a, g);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument &e) {
    EXPECT_NE(std::string(e.what()).find("q4_K"), std::string::npos) << e.what();
  }
  a.k = 256;
  a.wRowStride = 100; // smaller than a 144-byte row
  EXPECT_THROW(matmul(a, g), std::invalid_argument);
  a.wRowStride = 144;
  a.wType = GGMLType::TQ1_0; // a type the CPU backend cannot run
  EXPECT_THROW(matmul(a, g), std::invalid_argument);
}

// A device's share of a split dimension can be empty: k = 0 is an empty partial sum (zeros must be
// written, the output buffer holds stale values), n = 0 and m = 0 write nothing, for every type.
TEST(MatmulEmpty, ZeroSizedDimensions) {
  ThreadGroup g(2);
  for (GGMLType t : {GGMLType::F32, GGMLType::Q8_0, GGMLType::Q4_K, GGMLType::Q6_K}) {
    SCOPED_TRACE(ggmlTypeName(t));
    const int64_t n = 5, m = 40;
    std::vector<float> y(m * n, -3.0f);
    MatmulArgs a;
    a.w = nullptr; // no weight bytes at all: a [n, 0] slice is empty
    a.wType = t;
    a.n = n;
    a.k = 0;
    a.wRowStride = 0;
    a.x = nullptr;
    a.m = m;
    a.xRowStride = 0;
    a.y = y.data();
    a.yRowStride = n;
    matmul(a, g);
    for (float v : y)
      ASSERT_EQ(v, 0.0f);
    // n = 0: nothing to write (y may be the end of an arena).
    std::fill(y.begin(), y.end(), -3.0f);
    Problem p(t, 3, ggmlTypeInfo(t).blockElems, m, 7);
    a.w = p.w.data();
    a.k = ggmlTypeInfo(t).blockElems;
    a.wRowStride = p.wStride;
    a.x = p.x.data();
    a.xRowStride = static_cast<size_t>(a.k);
    a.n = 0;
    a.yRowStride = 0;
    matmul(a, g);
    a.n = 3;
    a.m = 0;
    a.yRowStride = 3;
    matmul(a, g);
    for (float v : y)
      ASSERT_EQ(v, -3.0f);
  }
  // matmulId with k = 0 zeroes only the routed rows.
  std::vector<float> y(4 * 6, -3.0f);
  const std::vector<int32_t> exps = {1, 1}, xRows = {1, 0}, yRows = {2, 0};
  MatmulIdArgs id;
  id.wType = GGMLType::Q4_K;
  id.n = 6;
  id.k = 0;
  id.nExperts = 2;
  id.xRowCount = 2;
  id.experts = exps.data();
  id.xRows = xRows.data();
  id.y = y.data();
  id.yRowStride = 6;
  id.yRows = yRows.data();
  id.count = 2;
  matmulId(id, g);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 6; ++c)
      ASSERT_EQ(y[r * 6 + c], (r == 0 || r == 2) ? 0.0f : -3.0f) << r;
  // k < 0 stays an error.
  MatmulArgs bad;
  bad.wType = GGMLType::F32;
  bad.n = 1;
  bad.k = -32;
  bad.m = 1;
  bad.y = y.data();
  EXPECT_THROW(matmul(bad, g), std::invalid_argument);
}

TEST(ActivationCache, ConvertsOnceUntilTheInputIsWritten) {
  ThreadGroup g(2);
  ActivationCache cache;
  Problem q(GGMLType::Q4_K, 16, 256, 5, 1);
  Problem v(GGMLType::Q6_K, 8, 256, 5, 2, &q.x); // Q and V read one input: one ActQ8 conversion for both
  std::vector<float> y1(16 * 5), y2(8 * 5), y3(16 * 5);
  MatmulOptions o;
  o.cache = &cache;
  q.run(g, o, y1, 16);
  v.run(g, o, y2, 8, q.x.data());
  EXPECT_EQ(cache.conversions(), 1u);
  EXPECT_EQ(cache.hits(), 1u);
  // A write elsewhere keeps the copy; a write into the input drops it, and the next reader converts the new
  // values (a stale copy would give the old outputs).
  cache.invalidate(y1.data(), y1.size() * 4);
  q.run(g, o, y3, 16);
  EXPECT_EQ(cache.conversions(), 1u);
  for (float &f : q.x)
    f = -f;
  cache.invalidate(q.x.data() + 700, 4);
  q.run(g, o, y3, 16);
  EXPECT_EQ(cache.conversions(), 2u);
  for (size_t j = 0; j < y1.size(); ++j)
    ASSERT_EQ(y3[j], -y1[j]) << j; // the quantizer is odd: negated inputs give negated outputs
  // A legacy type converts to its own format, not ActQ8.
  Problem l(GGMLType::Q8_K, 4, 256, 5, 3, &q.x);
  std::vector<float> y4(4 * 5);
  l.run(g, o, y4, 4, q.x.data());
  EXPECT_EQ(cache.conversions(), 3u);
}
