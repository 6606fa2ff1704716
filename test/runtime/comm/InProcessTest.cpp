//===- InProcessTest.cpp - the in-process communicator at 1, 2 and 3 ranks ---===//
//
// Each collective runs with one thread per rank (the CPU backend's pattern), with one thread driving every
// rank in one call (a GPU backend's group call) and with a mix, and is checked against results computed
// here: bucketed all-reduce (sums in rank order, so exact), all-gather and reduce-scatter along a middle
// axis with unequal parts including empty ones, broadcast of i32 from a non-zero root, a barrier that
// really waits, abort releasing a rank that waits for peers that never come, and bad arguments failing
// on every rank instead of hanging.
//===----------------------------------------------------------------------===//
#include "runtime/comm/InProcessCommunicator.h"

#include "test/common/TestSupport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <thread>

using namespace tpc;
using namespace tpc::rt::comm;

namespace {

/// Runs fn(rank) on one thread per rank and returns each rank's result.
std::vector<Expected<void>> onThreads(int n, const std::function<Expected<void>(int)> &fn) {
  std::vector<Expected<void>> res(n);
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] { res[r] = fn(r); });
  for (std::thread &t : th)
    t.join();
  return res;
}

void expectAllOk(const std::vector<Expected<void>> &res) {
  for (size_t r = 0; r < res.size(); ++r)
    EXPECT_TRUE(res[r]) << "rank " << r << ": " << res[r].message();
}

/// How one collective call is issued.
enum class Calls { ThreadPerRank, OneGroupCall, Mixed };

TEST(InProcess, AllReduceBucketSumsInRankOrder) {
  for (int n : {1, 2, 3})
    for (Calls calls : {Calls::ThreadPerRank, Calls::OneGroupCall, Calls::Mixed}) {
      SCOPED_TRACE("ranks " + std::to_string(n) + " calls " + std::to_string(int(calls)));
      // A bucket of three tensors: 37 elements (not a multiple of n), 0 elements, 5 elements.
      const std::vector<int64_t> counts = {37, 0, 5};
      std::vector<std::vector<std::vector<float>>> data(n), orig(n);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < counts.size(); ++i)
          data[r].push_back(test::uniformFloats(counts[i], 100 * r + i));
      orig = data;
      auto bucket = [&](int r) {
        std::vector<Buffer> b;
        for (std::vector<float> &t : data[r])
          b.push_back({t.data(), int64_t(t.size())});
        return b;
      };
      InProcessCommunicator comm(n);
      Communicator &c = comm;
      if (calls == Calls::ThreadPerRank || n == 1) {
        expectAllOk(onThreads(n, [&](int r) { return c.allReduce(r, bucket(r)); }));
      } else if (calls == Calls::OneGroupCall) {
        std::vector<AllReduceEntry> all;
        for (int r = 0; r < n; ++r)
          all.push_back({r, bucket(r), nullptr});
        Expected<void> ok = c.allReduce(all);
        EXPECT_TRUE(ok) << ok.message();
      } else { // ranks 0..n-2 in one call on one thread, the last rank on another
        std::vector<AllReduceEntry> group;
        for (int r = 0; r + 1 < n; ++r)
          group.push_back({r, bucket(r), nullptr});
        Expected<void> a, b;
        std::thread t([&] { b = c.allReduce(n - 1, bucket(n - 1)); });
        a = c.allReduce(group);
        t.join();
        EXPECT_TRUE(a) << a.message();
        EXPECT_TRUE(b) << b.message();
      }
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < counts.size(); ++i)
          for (int64_t j = 0; j < counts[i]; ++j) {
            float want = orig[0][i][j];
            for (int d = 1; d < n; ++d)
              want += orig[d][i][j];
            ASSERT_EQ(data[r][i][j], want) << "rank " << r << " tensor " << i << " element " << j;
          }
    }
}

// Many all-reduces back to back on one thread per rank, small buckets (one barrier, staging slots of
// alternating parity) mixed with large ones (split over the ranks, three barriers), each call's addends
// different: a rank that overwrote a staging slot a slower peer still reads, or a path that dropped or
// reordered an addend, gives a sum that differs from the rank-order sum computed here.
TEST(InProcess, AllReduceSmallAndLargeBucketsBackToBack) {
  for (int n : {2, 3}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    InProcessCommunicator comm(n);
    Communicator &c = comm;
    const std::vector<int64_t> sizes = {7, 2048, 40000, 1, 16384, 16385, 3000};
    const int calls = 200;
    std::vector<std::string> errors(n);
    onThreads(n, [&](int r) -> Expected<void> {
      for (int k = 0; k < calls; ++k) {
        const int64_t count = sizes[k % sizes.size()];
        std::vector<float> x(count);
        for (int64_t j = 0; j < count; ++j)
          x[j] = float((k * 31 + j * 7 + r * 13) % 97) / 8.0f - 6.0f;
        if (Expected<void> ok = c.allReduce(r, {{x.data(), count}}); !ok)
          return ok;
        for (int64_t j = 0; j < count; ++j) {
          float want = 0;
          for (int d = 0; d < n; ++d)
            want = d == 0 ? float((k * 31 + j * 7) % 97) / 8.0f - 6.0f
                          : want + (float((k * 31 + j * 7 + d * 13) % 97) / 8.0f - 6.0f);
          if (x[j] != want && errors[r].empty()) // keep calling: the peers wait for this rank
            errors[r] = "call " + std::to_string(k) + " element " + std::to_string(j) + ": " +
                        std::to_string(x[j]) + " != " + std::to_string(want);
        }
      }
      return {};
    });
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(errors[r], "") << "rank " << r;
  }
}

// A rank whose bucket takes the other path (small here, large there) must not hang or read a peer's
// entries: the staged counts disagree, so every rank fails.
TEST(InProcess, AllReduceWithDifferentCountsFailsOnEveryRank) {
  InProcessCommunicator comm(2);
  Communicator &c = comm;
  std::vector<float> a(8), b(20000);
  auto res = onThreads(2, [&](int r) {
    return r == 0 ? c.allReduce(0, {{a.data(), 8}}) : c.allReduce(1, {{b.data(), 20000}});
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(res[r]) << "rank " << r;
    const std::string &m = res[r].message();
    EXPECT_TRUE(m.find("reduces tensors of") != std::string::npos || m.find("aborted") != std::string::npos)
        << m;
  }
}

TEST(InProcess, AllGatherAndReduceScatterWithUnequalAndEmptyParts) {
  // [outer=3, parts, inner=2]: rank 1 of three holds nothing along the axis.
  const std::vector<std::vector<int64_t>> partsFor = {{4}, {3, 0}, {2, 0, 5}};
  for (int n : {1, 2, 3}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    AxisParts layout;
    layout.outer = 3;
    layout.inner = 2;
    layout.parts = partsFor[n - 1];
    const int64_t total = layout.total(), whole = layout.outer * total * layout.inner;
    std::vector<std::vector<float>> part(n), gathered(n, std::vector<float>(whole, -7.0f)), x(n),
        scattered(n);
    for (int r = 0; r < n; ++r) {
      part[r] = test::uniformFloats(layout.outer * layout.parts[r] * layout.inner, 10 + r);
      x[r] = test::uniformFloats(whole, 20 + r);
      scattered[r].assign(layout.outer * layout.parts[r] * layout.inner, -7.0f);
    }
    InProcessCommunicator comm(n);
    Communicator &c = comm;
    expectAllOk(onThreads(n, [&](int r) {
      Expected<void> g = c.allGather(r, {part[r].data(), int64_t(part[r].size())},
                                     {gathered[r].data(), int64_t(gathered[r].size())}, layout);
      if (!g)
        return g;
      return c.reduceScatter(r, {x[r].data(), int64_t(x[r].size())},
                             {scattered[r].data(), int64_t(scattered[r].size())}, layout);
    }));
    for (int r = 0; r < n; ++r)
      for (int64_t o = 0; o < layout.outer; ++o)
        for (int d = 0; d < n; ++d) {
          const int64_t at = layout.offset(d), p = layout.parts[d];
          for (int64_t j = 0; j < p * layout.inner; ++j) {
            ASSERT_EQ(gathered[r][(o * total + at) * layout.inner + j], part[d][o * p * layout.inner + j])
                << "rank " << r << " gathered part of " << d;
            if (d != r)
              continue;
            float want = x[0][(o * total + at) * layout.inner + j];
            for (int e = 1; e < n; ++e)
              want += x[e][(o * total + at) * layout.inner + j];
            ASSERT_EQ(scattered[r][o * p * layout.inner + j], want) << "rank " << r << " scattered";
          }
        }
  }
}

TEST(InProcess, AllGatherIntoTheWantedWholesOnly) {
  // Three ranks, [outer=2, parts 3/1/2, inner=1]; ranks 1 and 2 need no whole (null), rank 0 gets all parts,
  // twice in a row (the second call's parts must not be read before the first is complete everywhere).
  AxisParts layout;
  layout.outer = 2;
  layout.parts = {3, 1, 2};
  InProcessCommunicator comm(3);
  Communicator &c = comm;
  EXPECT_TRUE(c.wholeOptional());
  std::vector<std::vector<float>> part(3);
  std::vector<float> whole(12, -1.0f), first;
  for (int call = 0; call < 2; ++call) {
    for (int r = 0; r < 3; ++r)
      part[r] = test::uniformFloats(layout.outer * layout.parts[r], 40 + 3 * call + r);
    expectAllOk(onThreads(3, [&](int r) {
      return c.allGather(r, {part[r].data(), int64_t(part[r].size())}, {r == 0 ? whole.data() : nullptr, 12},
                         layout);
    }));
    for (int64_t o = 0; o < 2; ++o)
      for (int d = 0; d < 3; ++d)
        for (int64_t j = 0; j < layout.parts[d]; ++j)
          ASSERT_EQ(whole[o * 6 + layout.offset(d) + j], part[d][o * layout.parts[d] + j]) << call << " " << d;
    if (call == 0)
      first = whole;
  }
  EXPECT_NE(first, whole);
}

TEST(InProcess, BroadcastFromANonZeroRoot) {
  for (int n : {1, 2, 3}) {
    const int root = n - 1;
    std::vector<std::vector<int32_t>> buf(n, std::vector<int32_t>(4, -1));
    buf[root] = {7, 11, 13, 2147483647};
    InProcessCommunicator comm(n);
    Communicator &c = comm;
    expectAllOk(onThreads(n, [&](int r) { return c.broadcast(r, {buf[r].data(), 4}, root, ElemType::I32); }));
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(buf[r], buf[root]) << "ranks " << n << " rank " << r;
  }
}

TEST(InProcess, BarrierWaitsForEveryRank) {
  for (int n : {1, 2, 3}) {
    InProcessCommunicator comm(n);
    Communicator &c = comm;
    std::atomic<int> before{0};
    std::atomic<bool> early{false};
    expectAllOk(onThreads(n, [&](int r) {
      if (r == n - 1)
        std::this_thread::sleep_for(std::chrono::milliseconds(50)); // the last rank is late
      ++before;
      Expected<void> ok = c.barrier(r);
      if (before.load() != n)
        early = true;
      return ok;
    }));
    EXPECT_FALSE(early) << "a rank left the barrier before every rank had arrived (" << n << " ranks)";
  }
}

TEST(InProcess, AbortReleasesAWaitingRankAndFailsLaterCalls) {
  for (int n : {2, 3}) {
    InProcessCommunicator comm(n);
    Communicator &c = comm;
    std::vector<float> x(8, 1.0f);
    Expected<void> waiting;
    std::atomic<bool> returned{false};
    std::thread t([&] { // rank 0 arrives; its peers never do
      waiting = c.allReduce(0, {{x.data(), 8}});
      returned = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(returned.load()) << "the all-reduce returned without its peers";
    c.abort("device 1 failed: test");
    t.join();
    ASSERT_FALSE(waiting);
    EXPECT_NE(waiting.message().find("device 1 failed: test"), std::string::npos) << waiting.message();
    EXPECT_TRUE(c.aborted());
    Expected<void> later = c.barrier(1);
    ASSERT_FALSE(later);
    EXPECT_NE(later.message().find("aborted"), std::string::npos) << later.message();
    EXPECT_EQ(x, std::vector<float>(8, 1.0f)) << "an aborted all-reduce wrote into the buffer";
  }
}

TEST(InProcess, BadArgumentsFailOnEveryRankInsteadOfHanging) {
  InProcessCommunicator comm(2);
  Communicator &c = comm;
  std::vector<float> a(6), b(4);
  AxisParts layout;
  layout.parts = {3, 3};
  // Rank 1 passes a part of 4 elements where the layout says 3: it fails, and rank 0 is released.
  auto res = onThreads(2, [&](int r) {
    return c.allGather(r, {b.data(), r == 1 ? 4 : 3}, {a.data(), 6}, layout);
  });
  ASSERT_FALSE(res[1]);
  EXPECT_NE(res[1].message().find("rank 1 passes 4 / 6 elements"), std::string::npos) << res[1].message();
  ASSERT_FALSE(res[0]);
  EXPECT_NE(res[0].message().find("aborted"), std::string::npos) << res[0].message();

  InProcessCommunicator other(2);
  Expected<void> bad = static_cast<Communicator &>(other).barrier(std::vector<int>{0, 0});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("rank 0 appears twice"), std::string::npos) << bad.message();
  InProcessCommunicator f16(2);
  Expected<void> sum =
      static_cast<Communicator &>(f16).allReduce({{0, {}, nullptr}, {1, {}, nullptr}}, ElemType::F16);
  ASSERT_FALSE(sum);
  EXPECT_NE(sum.message().find("f32 only"), std::string::npos) << sum.message();
}

} // namespace
