//===- RopeTest.cpp - RoPE tables and row kernels at every ISA level --------===//
//
// The rope row kernel of every table this CPU can run (scalar, AVX2, AVX-512; the others skip visibly), fed
// by RopeTable, against a double reference (cos/sin of the double theta): normal and NeoX layouts, n_dims
// around the vector widths (the tails), positions up to 131071, freq_scale and freq_factors. Bound
// (docs/architecture.md, "Element-wise kernels"): |y - ref| <= 2e-7 (|a| + |b|) for the pair (a, b): cos and
// sin rounded to float (2^-24 each, times |a c| + |b s| <= |a| + |b|), the product a c (2^-24 |a c|), the
// FMA or the scalar sum (2^-24 of the result): 1.8e-7 (|a| + |b|) at most.
// RopeTables must match by value (a position rewritten in the same buffer rebuilds), and opRope must give
// the same bits at 1, 2 and 3 threads, in place or not, with or without a device's kept tables.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/RopeTable.h"
#include "runtime/cpu/ThreadGroup.h"
#include "runtime/cpu/ew/Elementwise.h"
#include "runtime/cpu/ops/Ops.h"
#include "test/runtime/cpu/TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::cpu;
using namespace tpc::rt::cpu::test;

namespace {

class RopeIsa : public ::testing::TestWithParam<Isa> {};

TEST_P(RopeIsa, MatchesDoubleReference) {
  if (!isaAvailable(GetParam()))
    GTEST_SKIP() << "this CPU cannot run the " << isaName(GetParam()) << " element-wise kernels";
  const ElementwiseKernels &k = elementwiseKernels(GetParam());
  ThreadGroup tg(1);
  const std::vector<int32_t> pos = {0, 1, 7, 1000, 32767, 131071};
  const int64_t t = static_cast<int64_t>(pos.size());
  double worst = 0; // largest error / bound seen
  for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox})
    for (int64_t nDims : {2, 6, 8, 14, 16, 18, 24, 34, 64, 128, 256})
      for (auto [base, freqScale] : {std::pair<float, float>{10000.0f, 1.0f}, {1e6f, 0.25f}})
        for (bool useFf : {false, true}) {
          std::vector<float> ff = randomFloats(nDims / 2, 5, 0.5f);
          for (float &f : ff)
            f = 1.0f + std::fabs(f) * 4.0f;
          RopeTable tab;
          tab.params = RopeParams{mode, nDims, base, freqScale};
          tab.pos = pos;
          if (useFf)
            tab.freqFactors = ff;
          tab.build(tg);
          const bool neox = mode == RopeMode::Neox;
          const int64_t half = nDims / 2;
          for (int64_t ti = 0; ti < t; ++ti) {
            const std::vector<float> x = randomFloats(nDims, static_cast<uint32_t>(nDims * 131 + ti), 3.0f);
            std::vector<float> y(nDims), inPlace = x;
            k.rope(neox, x.data(), y.data(), tab.cos(ti), tab.sin(ti), nDims);
            k.rope(neox, inPlace.data(), inPlace.data(), tab.cos(ti), tab.sin(ti), nDims);
            ASSERT_EQ(inPlace, y) << "in place differs, nDims " << nDims;
            for (int64_t i = 0; i < half; ++i) {
              double th = double(freqScale) * pos[ti] * std::pow(double(base), -2.0 * i / nDims);
              if (useFf)
                th /= ff[i];
              const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
              const double a = x[i0], b = x[i1];
              const double r0 = a * std::cos(th) - b * std::sin(th), r1 = a * std::sin(th) + b * std::cos(th);
              const double tol = 2e-7 * (std::fabs(a) + std::fabs(b)) + 1e-37;
              ASSERT_NEAR(y[i0], r0, tol) << "mode " << int(mode) << " nDims " << nDims << " pos " << pos[ti];
              ASSERT_NEAR(y[i1], r1, tol) << "mode " << int(mode) << " nDims " << nDims << " pos " << pos[ti];
              worst = std::max({worst, std::fabs(y[i0] - r0) / tol, std::fabs(y[i1] - r1) / tol});
            }
          }
        }
  // The bound is derived, not tuned: the worst case must use a real part of it.
  EXPECT_GT(worst, 1.0 / 16) << "bound far looser than the measured error";
}

INSTANTIATE_TEST_SUITE_P(AllIsas, RopeIsa, ::testing::Values(Isa::Scalar, Isa::AVX2, Isa::AVX512),
                         [](const ::testing::TestParamInfo<Isa> &i) { return std::string(isaName(i.param)); });

TEST(RopeTables, MatchByValueAndRebuildOnChange) {
  ThreadGroup tg(2);
  RopeTables tables;
  std::vector<int32_t> pos = {3, 4, 5, 6};
  std::vector<float> ff(8, 1.0f);
  const RopeParams p{RopeMode::Neox, 16, 10000.0f, 1.0f};
  const RopeTable *a = &tables.get(p, pos.data(), 4, nullptr, tg);
  EXPECT_EQ(&tables.get(p, pos.data(), 4, nullptr, tg), a); // Q then K: one table
  EXPECT_EQ(tables.builds(), 1u);
  EXPECT_FLOAT_EQ(a->cos(1)[1], static_cast<float>(std::cos(4.0 * std::pow(10000.0, -2.0 / 16))));
  pos[1] = 40; // the next call's positions in the same buffer
  const RopeTable &b = tables.get(p, pos.data(), 4, nullptr, tg);
  EXPECT_EQ(tables.builds(), 2u);
  EXPECT_FLOAT_EQ(b.cos(1)[1], static_cast<float>(std::cos(40.0 * std::pow(10000.0, -2.0 / 16))));
  RopeParams global = p;
  global.base = 1e6f; // Gemma's other layers
  tables.get(global, pos.data(), 4, nullptr, tg);
  tables.get(p, pos.data(), 4, ff.data(), tg); // freq factors make another set
  EXPECT_EQ(tables.builds(), 4u);
  tables.get(p, pos.data(), 4, nullptr, tg);
  tables.get(global, pos.data(), 4, nullptr, tg);
  EXPECT_EQ(tables.builds(), 4u);
  ff[3] = 2.0f;
  tables.get(p, pos.data(), 4, ff.data(), tg);
  EXPECT_EQ(tables.builds(), 5u);
}

/// YaRN with gpt-oss's parameters (64 dims, base 150000, factor 32 over 4096, beta 32 / 1): the
/// correction dims are 8 and 18 (c(32) = 8.09, c(1) = 17.4), pairs below 8 keep the extrapolated angle
/// (pos base^(-2i/64)), pairs above 18 take the interpolated one (/ 32), those between the linear mix, and
/// cos/sin carry the magnitude 1 + 0.1 ln 32. A different extFactor or attnFactor is another table.
TEST(RopeTables, YarnRampAndMagnitude) {
  ThreadGroup tg(2);
  RopeTables tables;
  std::vector<int32_t> pos = {0, 7, 100, 4000};
  RopeParams p{RopeMode::Neox, 64, 150000.0f, 1.0f / 32};
  p.origCtx = 4096;
  p.extFactor = 1.0f;
  float dims[2];
  ropeYarnCorrDims(p, dims);
  EXPECT_EQ(dims[0], 8.0f);
  EXPECT_EQ(dims[1], 18.0f);
  const double mscale = 1.0 + 0.1 * std::log(32.0);
  EXPECT_NEAR(ropeYarnMscale(p), mscale, 1e-6);
  const RopeTable &tab = tables.get(p, pos.data(), 4, nullptr, tg);
  for (int64_t ti = 0; ti < 4; ++ti)
    for (int64_t i = 0; i < 32; ++i) {
      const double extrap = std::pow(150000.0, -2.0 * i / 64);
      // The ramp in float, as the reference computes it (at position 4000 its rounding moves angles by 3e-6).
      const double ramp = 1.0f - std::clamp((float(i) - 8.0f) / 10.0f, 0.0f, 1.0f);
      const double theta = pos[ti] * extrap * (ramp + (1.0 - ramp) / 32);
      // NEOX: element i and its partner i + 32 share the angle.
      EXPECT_NEAR(tab.cos(ti)[i], mscale * std::cos(theta), 2e-6) << "pos " << pos[ti] << " pair " << i;
      EXPECT_NEAR(tab.sin(ti)[i + 32], mscale * std::sin(theta), 2e-6) << "pos " << pos[ti] << " pair " << i;
    }
  EXPECT_NEAR(tab.cos(1)[0], mscale * std::cos(7.0), 1e-6);                                 // extrapolated
  EXPECT_NEAR(tab.cos(1)[31], mscale * std::cos(7.0 * std::pow(150000.0, -62.0 / 64) / 32), 1e-6); // interpolated
  RopeParams plain = p;
  plain.extFactor = 0; // linear scaling only, magnitude attnFactor = 1
  const RopeTable &lin = tables.get(plain, pos.data(), 4, nullptr, tg);
  EXPECT_EQ(tables.builds(), 2u);
  EXPECT_NEAR(lin.cos(1)[0], std::cos(7.0 / 32), 1e-6);
}

TEST(RopeOps, ResultsDoNotDependOnThreadsOrTables) {
  // A prefill (many tokens) and a decode step (one token: the heads are split over the threads), partial
  // rotation (dims past nDims pass through).
  for (auto [t, h] : {std::pair<int64_t, int64_t>{37, 3}, {1, 8}})
    for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox}) {
      const int64_t d = 72, nDims = 40;
      const std::vector<float> xv = randomFloats(t * h * d, 21, 2.0f);
      std::vector<int32_t> pos(t);
      for (int64_t i = 0; i < t; ++i)
        pos[i] = static_cast<int32_t>(100 + 3 * i);
      const RopeParams p{mode, nDims, 10000.0f, 1.0f};
      std::vector<float> want;
      for (int threads : {1, 2, 3})
        for (bool inPlace : {false, true}) {
          ThreadGroup tg(threads);
          ActivationCache cache;
          std::vector<float> x = xv, y(t * h * d);
          TensorRef xr{x.data(), DType::F32, false, GGMLType::F32, {t, h, d}};
          TensorRef yr{inPlace ? x.data() : y.data(), DType::F32, false, GGMLType::F32, {t, h, d}};
          TensorRef pr{pos.data(), DType::I32, false, GGMLType::I32, {t}};
          opRope(xr, pr, nullptr, yr, p, tg, threads == 2 ? &cache : nullptr);
          std::vector<float> got = inPlace ? x : y;
          if (want.empty())
            want = got;
          ASSERT_EQ(got, want) << "t " << t << " threads " << threads << " in place " << inPlace;
          for (int64_t r = 0; r < t * h; ++r)
            for (int64_t c = nDims; c < d; ++c)
              ASSERT_EQ(got[r * d + c], xv[r * d + c]);
        }
    }
}

} // namespace
