//===- VectorOpsTest.cpp - f32 dot and axpy against double references -------===//
//
// Lengths around the vector widths (tails of 0..15 elements). The SIMD choice is fixed per process, so
// this checks the path this CPU takes (AVX2 or portable) against a double-precision reference, with a
// tolerance relative to sum |a * b|.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/VectorOps.h"
#include "test/runtime/cpu/TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace tpc::rt::cpu;
using namespace tpc::rt::cpu::test;

namespace {

TEST(VectorOps, DotAndAxpyMatchReferenceForEveryTail) {
  for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 64, 100, 129}) {
    std::vector<float> a = randomFloats(n, 1 + static_cast<uint32_t>(n)), b = randomFloats(n, 500);
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      ref += double(a[i]) * b[i];
      mag += std::fabs(double(a[i]) * b[i]);
    }
    EXPECT_NEAR(dotF32(a.data(), b.data(), n), ref, 1e-6 * mag + 1e-7) << "n=" << n;
    std::vector<float> y = randomFloats(n, 900), want = y;
    for (int64_t i = 0; i < n; ++i)
      want[i] = static_cast<float>(double(want[i]) + 0.75 * double(a[i]));
    axpyF32(0.75f, a.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(y[i], want[i], 1e-6f * (std::fabs(want[i]) + 1)) << "n=" << n << " i=" << i;
  }
}

} // namespace
