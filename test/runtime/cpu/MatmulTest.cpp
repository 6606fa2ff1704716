//===- MatmulTest.cpp - matmul and matmulId against a naive reference ------===//
//
// The reference dequantizes W to floats and applies the same activation quantization the kernels use
// (quantize then dequantize x to vecDotType), then sums in double: the only difference left is float
// rounding, so the tolerance is relative to sum |w*x|. Shapes are odd on purpose (n not a multiple of the
// thread count, m = 1, 4, 7, 64 and 70: decode with one and four tokens, prefill, a second token tile).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Matmul.h"
#include "runtime/ggml/Blocks.h"
#include "runtime/cpu/quant/Quant.h"
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

struct Problem {
  GGMLType t;
  int64_t n, k, m;
  std::vector<uint8_t> w;
  std::vector<float> wf; // dequantized W
  std::vector<float> x, xq;
  std::vector<double> q81Fix; // per (token, row): m * (s - d * sum q) of the Q8_1 blocks (fp16 rounding of s)
  size_t wStride;

  Problem(GGMLType type, int64_t n_, int64_t k_, int64_t m_, uint32_t seed) : t(type), n(n_), k(k_), m(m_) {
    wStride = rowBytes(t, k) + 64; // a padded stride, as a split or a view would give
    w.assign(wStride * n, 0xcd);
    wf.resize(static_cast<size_t>(n * k));
    std::vector<float> src = randomFloats(n * k, seed, 0.1f);
    for (int64_t r = 0; r < n; ++r) {
      quantizeOrCopy(src.data() + r * k, w.data() + r * wStride);
      dequantizeRow(t, w.data() + r * wStride, wf.data() + r * k, k);
    }
    x = randomFloats(m * k, seed + 1);
    xq = x;
    GGMLType act = vecDotType(t);
    if (act != GGMLType::F32) {
      std::vector<uint8_t> tmp(rowBytes(act, k));
      q81Fix.assign(static_cast<size_t>(m * n), 0.0);
      for (int64_t i = 0; i < m; ++i) {
        quantizeActivationRow(act, x.data() + i * k, tmp.data(), k);
        dequantizeRow(act, tmp.data(), xq.data() + i * k, k);
        if (act != GGMLType::Q8_1 || ggmlTypeInfo(t).blockElems != 32)
          continue; // the K-quant kernels take the min term from the quants, not from s
        // The kernel uses the block's stored s = fp16(d * sum q) for the offset term, as ggml does.
        const auto *b = reinterpret_cast<const BlockQ8_1 *>(tmp.data());
        for (int64_t r = 0; r < n; ++r)
          for (int64_t blk = 0; blk < k / 32; ++blk) {
            int sum = 0;
            for (int8_t q : b[blk].qs)
              sum += q;
            uint16_t mw;
            std::memcpy(&mw, w.data() + r * wStride + blk * ggmlTypeInfo(t).blockBytes + 2, 2);
            q81Fix[i * n + r] +=
                double(fp16ToFp32(mw)) * (double(fp16ToFp32(b[blk].s)) - double(fp16ToFp32(b[blk].d)) * sum);
          }
      }
    }
  }

  void quantizeOrCopy(const float *src, uint8_t *dst) {
    if (supportsQuantize(t)) {
      quantizeRow(t, src, dst, k);
      return;
    }
    // IQ4_NL / MXFP4 have no quantizer here: random nibbles with a sane scale.
    std::mt19937 rng(static_cast<uint32_t>(src[0] * 1e6f) ^ 77u);
    const GGMLTypeInfo &info = ggmlTypeInfo(t);
    for (size_t off = 0; off < rowBytes(t, k); off += info.blockBytes) {
      for (uint32_t b = 0; b < info.blockBytes; ++b)
        dst[off + b] = static_cast<uint8_t>(rng());
      if (t == GGMLType::MXFP4)
        dst[off] = static_cast<uint8_t>(120 + rng() % 4);
      else {
        uint16_t d = fp32ToFp16(0.001f * (1 + rng() % 8));
        std::memcpy(dst + off, &d, 2);
      }
    }
  }

  double refAt(int64_t i, int64_t r, double &mag) const {
    double s = 0;
    mag = 0;
    for (int64_t j = 0; j < k; ++j) {
      double p = double(wf[r * k + j]) * xq[i * k + j];
      s += p;
      mag += std::fabs(p);
    }
    return q81Fix.empty() ? s : s + q81Fix[i * n + r];
  }
};

void expectMatches(const Problem &p, const std::vector<float> &y, size_t yStride, const std::string &what) {
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t r = 0; r < p.n; ++r) {
      double mag;
      double ref = p.refAt(i, r, mag);
      ASSERT_NEAR(y[i * yStride + r], ref, 2e-5 * mag + 1e-6)
          << what << " type " << ggmlTypeName(p.t) << " token " << i << " row " << r;
    }
}

} // namespace

class MatmulType : public ::testing::TestWithParam<GGMLType> {};

TEST_P(MatmulType, MatchesReferenceForOddShapesAndThreadCounts) {
  GGMLType t = GetParam();
  const int64_t k = 512, n = 67;
  for (int64_t m : {1, 4, 7, 64, 70}) {
    Problem p(t, n, k, m, static_cast<uint32_t>(m) * 31 + static_cast<uint32_t>(t));
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      ThreadGroup g(threads);
      size_t yStride = static_cast<size_t>(n) + 3;
      std::vector<float> y(yStride * m, std::nanf(""));
      MatmulArgs a;
      a.w = p.w.data();
      a.wType = t;
      a.n = n;
      a.k = k;
      a.wRowStride = p.wStride;
      a.x = p.x.data();
      a.m = m;
      a.xRowStride = static_cast<size_t>(k);
      a.y = y.data();
      a.yRowStride = yStride;
      matmul(a, g);
      expectMatches(p, y, yStride, "m=" + std::to_string(m) + " threads=" + std::to_string(threads));
      for (int64_t i = 0; i < m; ++i)
        for (size_t r = n; r < yStride; ++r)
          ASSERT_TRUE(std::isnan(y[i * yStride + r])) << "wrote past n";
      // The split never changes a result: each (row, token) is one kernel call.
      if (first.empty())
        first = y;
      else
        for (size_t j = 0; j < y.size(); ++j)
          ASSERT_TRUE(floatToBits(y[j]) == floatToBits(first[j])) << "threads changed output " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, MatmulType, ::testing::ValuesIn(supportedTypes()),
                         [](const ::testing::TestParamInfo<GGMLType> &i) {
                           return std::string(ggmlTypeName(i.param));
                         });

TEST(MatmulId, SelectedRowsAgainstOneExpert) {
  const GGMLType t = GGMLType::Q4_K;
  const int64_t k = 256, n = 40, experts = 3, rows = 10;
  std::vector<Problem> ex;
  for (int e = 0; e < experts; ++e)
    ex.emplace_back(t, n, k, rows, 100 + e);
  // Pack the experts into one 3-D tensor; all problems share x (same seed + 1? no: use expert 0's x).
  size_t expertStride = ex[0].wStride * n;
  std::vector<uint8_t> w;
  for (auto &p : ex)
    w.insert(w.end(), p.w.begin(), p.w.end());
  const std::vector<int32_t> xRows = {5, 2, 9}, yRows = {0, 3, 1};
  std::vector<float> y(4 * n, -7.0f);
  ThreadGroup g(2);
  MatmulIdArgs a;
  a.w = w.data();
  a.wType = t;
  a.n = n;
  a.k = k;
  a.wRowStride = ex[0].wStride;
  a.wExpertStride = expertStride;
  a.nExperts = experts;
  a.expert = 1;
  a.x = ex[0].x.data();
  a.xRowStride = k;
  a.xRows = xRows.data();
  a.y = y.data();
  a.yRowStride = n;
  a.yRows = yRows.data();
  a.count = 3;
  matmulId(a, g);
  for (size_t i = 0; i < xRows.size(); ++i)
    for (int64_t r = 0; r < n; ++r) {
      double ref = 0, mag = 0;
      for (int64_t j = 0; j < k; ++j) {
        double pr = double(ex[1].wf[r * k + j]) * ex[0].xq[xRows[i] * k + j];
        ref += pr;
        mag += std::fabs(pr);
      }
      ASSERT_NEAR(y[yRows[i] * n + r], ref, 2e-5 * mag + 1e-6) << i << " " << r;
    }
  for (int64_t r = 0; r < n; ++r)
    EXPECT_EQ(y[2 * n + r], -7.0f) << "row 2 was not routed here";
  a.expert = 3;
  EXPECT_THROW(matmulId(a, g), std::invalid_argument);
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
  a.wType = GGMLType::IQ2_XS;
  EXPECT_THROW(matmul(a, g), std::invalid_argument);
}

// A device's share of a split dimension can be empty: k = 0 is an empty partial sum (zeros must be
// written, the output buffer holds stale values), n = 0 and m = 0 write nothing, for every type.
TEST(MatmulEmpty, ZeroSizedDimensions) {
  ThreadGroup g(2);
  for (GGMLType t : {GGMLType::F32, GGMLType::Q8_0, GGMLType::Q4_K, GGMLType::Q6_K}) {
    SCOPED_TRACE(ggmlTypeName(t));
    const int64_t n = 5, m = 7;
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
  const std::vector<int32_t> xRows = {1, 0}, yRows = {2, 0};
  MatmulIdArgs id;
  id.wType = GGMLType::Q4_K;
  id.n = 6;
  id.k = 0;
  id.nExperts = 2;
  id.expert = 1;
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

// The grouped (decode) expert product must give the per-expert product's bits, for a shared x row and for
// x rows per slot, with experts used by several entries; bad experts and rows are clear errors.
TEST(MatmulIdGrouped, EqualsPerExpertProducts) {
  for (GGMLType t : {GGMLType::Q4_K, GGMLType::Q8_0, GGMLType::Q6_K, GGMLType::F32}) {
    SCOPED_TRACE(ggmlTypeName(t));
    const int64_t k = 512, n = 37, experts = 5, xCount = 4;
    std::vector<Problem> ex;
    for (int e = 0; e < experts; ++e)
      ex.emplace_back(t, n, k, xCount, 300 + e);
    std::vector<uint8_t> w;
    for (auto &p : ex)
      w.insert(w.end(), p.w.begin(), p.w.end());
    // Entries grouped by expert: expert 3 twice, 0 once, 4 three times.
    const std::vector<int32_t> exps = {3, 3, 0, 4, 4, 4}, xRows = {0, 2, 1, 3, 0, 1},
                               yRows = {0, 1, 2, 3, 4, 5};
    ThreadGroup g(3);
    std::vector<float> got(6 * n, -1.0f), want(6 * n, -2.0f);
    MatmulIdGroupedArgs a;
    a.w = w.data();
    a.wType = t;
    a.n = n;
    a.k = k;
    a.wRowStride = ex[0].wStride;
    a.wExpertStride = ex[0].wStride * n;
    a.nExperts = experts;
    a.x = ex[0].x.data();
    a.xRowStride = k;
    a.xRowCount = xCount;
    a.y = got.data();
    a.yRowStride = n;
    a.experts = exps.data();
    a.xRows = xRows.data();
    a.yRows = yRows.data();
    a.count = 6;
    matmulIdGrouped(a, g);
    for (size_t i = 0; i < exps.size(); ++i) {
      MatmulIdArgs one;
      one.w = w.data();
      one.wType = t;
      one.n = n;
      one.k = k;
      one.wRowStride = ex[0].wStride;
      one.wExpertStride = ex[0].wStride * n;
      one.nExperts = experts;
      one.expert = exps[i];
      one.x = ex[0].x.data();
      one.xRowStride = k;
      one.xRows = &xRows[i];
      one.y = want.data();
      one.yRowStride = n;
      one.yRows = &yRows[i];
      one.count = 1;
      matmulId(one, g);
    }
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << i;
    std::vector<int32_t> badExp = exps;
    badExp[2] = experts;
    a.experts = badExp.data();
    EXPECT_THROW(matmulIdGrouped(a, g), std::invalid_argument);
    a.experts = exps.data();
    std::vector<int32_t> badX = xRows;
    badX[1] = xCount;
    a.xRows = badX.data();
    EXPECT_THROW(matmulIdGrouped(a, g), std::invalid_argument);
  }
}
