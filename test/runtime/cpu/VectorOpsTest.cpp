//===- VectorOpsTest.cpp - f32 dot and axpy against double references -------===//
//
// Lengths around the vector widths (tails of 0..15 elements). The SIMD choice is fixed per process, so
// this checks the path this CPU takes (AVX2 or portable) against a double-precision reference, and bit for
// bit against the documented operation order (eight partial sums, no FMA), which keeps attention results
// independent of the ISA.
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
    const float got = dotF32(a.data(), b.data(), n);
    EXPECT_NEAR(got, ref, 1e-6 * mag + 1e-7) << "n=" << n;
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int l = 0; l < 8; ++l)
        part[l] += a[i + l] * b[i + l];
    float ordered = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    for (; i < n; ++i)
      ordered += a[i] * b[i];
    EXPECT_EQ(got, ordered) << "n=" << n;
    std::vector<float> y = randomFloats(n, 900), want = y;
    for (int64_t j = 0; j < n; ++j)
      want[j] += 0.75f * a[j]; // the kernel's two roundings: the product, then the sum
    axpyF32(0.75f, a.data(), y.data(), n);
    for (int64_t j = 0; j < n; ++j)
      ASSERT_EQ(y[j], want[j]) << "n=" << n << " j=" << j;
  }
}

} // namespace
