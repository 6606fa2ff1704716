//===- Bf16WireTest.cpp - bf16 all-reduce payloads: rounding and the in-process sums ---===//
//
// The wire format (Bf16Wire.h) against values whose bf16 neighbours are known by construction: ties to
// even in both directions, just above and below a tie, carries into the exponent and up to infinity, NaNs
// (one whose payload lies only in the dropped bits included), infinities, signed zeros and subnormals; the
// rounding error bound the fidelity bound builds on (u = 2^-8, reached at a tie, so 2^-9 does not hold);
// and the in-process communicator with bf16 payloads at 2 and 3 ranks, small and split buckets, against
// bf16(sum of bf16(x_d) in rank order) computed here, on every rank.
//===----------------------------------------------------------------------===//
#include "runtime/comm/Bf16Wire.h"
#include "runtime/comm/InProcessCommunicator.h"

#include "test/common/TestSupport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <thread>

using namespace tpc;
using namespace tpc::rt::comm;

namespace {

float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Bf16Wire, ExactValuesPassUnchanged) {
  for (float x : {0.0f, 1.0f, -2.0f, 0.5f, 1.0f + 1.0f / 128, 3.0f, -65280.0f})
    EXPECT_EQ(roundBf16(x), x) << x;
  EXPECT_EQ(toBf16(1.0f), 0x3f80);
  EXPECT_EQ(toBf16(-2.0f), 0xc000);
}

TEST(Bf16Wire, TiesRoundToEven) {
  // bf16 keeps 7 fraction bits: near 1 its ulp is 2^-7, so 1 + 2^-8 is exactly half-way.
  EXPECT_EQ(toBf16(1.0f + 1.0f / 256), 0x3f80);    // tie, even neighbour below (fraction 0)
  EXPECT_EQ(toBf16(1.0f + 3.0f / 256), 0x3f82);    // tie between fractions 1 and 2: up to even 2
  EXPECT_EQ(toBf16(-(1.0f + 3.0f / 256)), 0xbf82); // the sign does not change the direction
  EXPECT_EQ(toBf16(fromBits(0x3f808001)), 0x3f81); // just above the tie: up
  EXPECT_EQ(toBf16(fromBits(0x3f817fff)), 0x3f81); // just below the next tie: down
  EXPECT_EQ(toBf16(fromBits(0x3f7fffff)), 0x3f80); // below 1: the carry runs into the exponent
}

TEST(Bf16Wire, OverflowInfinityAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(toBf16(inf), 0x7f80);
  EXPECT_EQ(toBf16(-inf), 0xff80);
  // The largest bf16 is 0x7f7f (3.3895e38); FLT_MAX lies beyond it + half an ulp, so it overflows.
  EXPECT_EQ(toBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(toBf16(fromBits(0x7f7f7fff)), 0x7f7f); // below the tie: the largest finite bf16
  EXPECT_EQ(toBf16(fromBits(0x7f7f8000)), 0x7f80); // the tie rounds to even: infinity
  // NaNs stay NaNs, sign kept, including one whose payload truncation alone would turn into infinity.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    const uint16_t b = toBf16(fromBits(nan));
    EXPECT_TRUE(std::isnan(fromBf16(b))) << std::hex << nan;
    EXPECT_EQ(b >> 15, nan >> 31) << std::hex << nan;
  }
}

TEST(Bf16Wire, ZerosAndSubnormals) {
  EXPECT_EQ(toBf16(0.0f), 0x0000);
  EXPECT_EQ(toBf16(-0.0f), 0x8000);
  EXPECT_EQ(toBf16(fromBits(0x00000001)), 0x0000);   // the smallest subnormal rounds to +0
  EXPECT_EQ(toBf16(fromBits(0x80000001)), 0x8000);   // ... and keeps its sign
  EXPECT_EQ(toBf16(fromBits(0x00008000)), 0x0000);   // a tie at the bottom: even (0)
  EXPECT_EQ(toBf16(fromBits(0x00018000)), 0x0002);   // a tie between 1 and 2: even (2)
  EXPECT_EQ(toBf16(fromBits(0x00010000)), 0x0001);   // the smallest bf16 subnormal is exact
  EXPECT_EQ(fromBf16(0x0001), fromBits(0x00010000)); // and widens to an f32 subnormal (no FTZ)
  EXPECT_EQ(toBf16(fromBits(0x007fffff)), 0x0080);   // the largest subnormal rounds up to the smallest normal
}

TEST(Bf16Wire, RelativeErrorIsAtMostTheUnitRoundoff) {
  const double u = std::ldexp(1.0, -8);
  double worst = 0;
  for (uint32_t bits = 0x00800000u; bits < 0x7f000000u; bits += 0x00012345u) { // normals of every exponent
    const float x = fromBits(bits);
    const double rel = std::fabs(double(roundBf16(x)) - x) / x;
    worst = std::max(worst, rel);
    ASSERT_LE(rel, u) << std::hex << bits;
  }
  // The bound is reached (up to 1/(1+u)) at a tie: 2^-9 would be too small.
  const float tie = 1.0f + 1.0f / 256;
  const double atTie = std::fabs(double(roundBf16(tie)) - tie) / tie;
  EXPECT_GT(atTie, std::ldexp(1.0, -9));
  EXPECT_DOUBLE_EQ(atTie, u / (1 + u));
  EXPECT_GT(worst, std::ldexp(1.0, -9));
}

TEST(Bf16Wire, PackAndUnpack) {
  const std::vector<float> x = {1.0f + 1.0f / 256, -3.5f, 1e-40f, 7.0f};
  std::vector<uint16_t> b(x.size());
  std::vector<float> back(x.size());
  packBf16(x.data(), b.data(), int64_t(x.size()));
  unpackBf16(b.data(), back.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(bitsOf(back[i]), bitsOf(roundBf16(x[i]))) << i;
}

/// bf16(x0 -> bf16, + bf16(x1), ...): the sum every path must produce (Bf16Wire.h).
float wireSum(const std::vector<std::vector<float>> &x, size_t j) {
  float s = roundBf16(x[0][j]);
  for (size_t d = 1; d < x.size(); ++d)
    s += roundBf16(x[d][j]);
  return roundBf16(s);
}

TEST(InProcessBf16, AllReduceSumsTheWireValuesInRankOrderOnEveryPath) {
  // 40 elements take the one-barrier path, 40000 the split one; both must give the same bits.
  for (int n : {2, 3})
    for (int64_t count : {int64_t(40), int64_t(40000)}) {
      SCOPED_TRACE("ranks " + std::to_string(n) + " count " + std::to_string(count));
      std::vector<std::vector<float>> data(n);
      for (int r = 0; r < n; ++r)
        data[r] = test::uniformFloats(count, 7 * r + 1);
      data[0][3] = 1.0f + 1.0f / 256; // a tie on the way out
      for (int r = 1; r < n; ++r)
        data[r][3] = 0.0f;
      const std::vector<std::vector<float>> orig = data;
      InProcessCommunicator comm(n);
      ASSERT_TRUE(comm.supportsPayload(Payload::BF16));
      comm.setPayload(Payload::BF16);
      std::vector<Expected<void>> res(n);
      std::vector<std::thread> th;
      for (int r = 0; r < n; ++r)
        th.emplace_back([&, r] { res[r] = comm.allReduce(r, {{data[r].data(), count}}); });
      for (std::thread &t : th)
        t.join();
      int differsFromF32 = 0;
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(res[r]) << res[r].message();
        for (int64_t j = 0; j < count; ++j) {
          ASSERT_EQ(bitsOf(data[r][j]), bitsOf(wireSum(orig, size_t(j)))) << "rank " << r << " element " << j;
          float f32 = orig[0][j];
          for (int d = 1; d < n; ++d)
            f32 += orig[d][j];
          differsFromF32 += data[r][j] != f32;
        }
      }
      EXPECT_EQ(data[0][3], 1.0f);  // the tie went to even
      EXPECT_GT(differsFromF32, 0); // the payload really was rounded
    }
}

} // namespace
