//===- CommunicatorTest.cpp - MpiCommunicator against the in-process one -----===//
//
// Runs as every rank of `mpirun -np N` (N = 2 and 3 in ctest, over shared memory and over TCP). Each rank
// makes every rank's inputs from seeds, so it can compute the expected result itself: the same collective
// on an InProcessCommunicator of N threads. Checked: the bucketed all-reduce in rank order is bit for bit
// the in-process sum (at N = 3 too, where MPI's own MPI_Allreduce may group the addends differently), the
// native MPI_Allreduce is within float rounding of it and the same on every rank, all-gather and
// reduce-scatter along a middle axis with unequal and empty parts (f32, and an f16/i32 gather) equal the
// in-process results exactly, a broadcast from the last rank, and refusals: a call for another rank, a
// layout that disagrees with the buffers, an f16 sum, and every later call after an abort. With bf16
// payloads the all-reduce is the in-process bf16 sum bit for bit, at N = 2 as at 3.
//===----------------------------------------------------------------------===//
#include "test/common/TestSupport.h"
#include "test/mpi/MpiTestUtil.h"

#include "runtime/comm/InProcessCommunicator.h"
#include "runtime/comm/MpiCommunicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <thread>

using namespace tpc;
using namespace tpc::rt::comm;

namespace {

/// Runs fn(rank) for every rank of an n-rank in-process communicator, one thread each.
void inProcess(int n, const std::function<Expected<void>(Communicator &, int)> &fn,
               Payload payload = Payload::F32) {
  InProcessCommunicator c(n);
  c.setPayload(payload);
  std::vector<std::thread> th;
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      if (Expected<void> ok = fn(c, r); !ok)
        errors[r] = ok.message();
    });
  for (std::thread &t : th)
    t.join();
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(errors[r], "") << "in-process rank " << r;
}

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

/// A bucket of three tensors: 1037 elements (not a multiple of 2 or 3), none, 5; rank r's from seeds.
std::vector<std::vector<float>> addends(int r) {
  return {tpc::test::uniformFloats(1037, 100 * r + 1), {}, tpc::test::uniformFloats(5, 100 * r + 3)};
}
std::vector<Buffer> bufs(std::vector<std::vector<float>> &ts) {
  std::vector<Buffer> b;
  for (std::vector<float> &t : ts)
    b.push_back({t.data(), int64_t(t.size())});
  return b;
}

/// The in-process bucketed all-reduce of every rank's addends (rank r's result).
std::vector<std::vector<float>> expectedSum(int n, int rank) {
  std::vector<std::vector<std::vector<float>>> all(n);
  for (int r = 0; r < n; ++r)
    all[r] = addends(r);
  inProcess(n, [&](Communicator &c, int r) { return c.allReduce(r, bufs(all[r])); });
  return all[rank];
}

TEST(Mpi, AllReduceInRankOrderIsTheInProcessSumBitForBit) {
  auto world = tpc::test::testWorld();
  const int n = world->size(), me = world->rank();
  MpiCommunicator comm(world, MpiSums::RankOrder);
  std::vector<std::vector<float>> mine = addends(me);
  Expected<void> ok = comm.allReduce(me, bufs(mine));
  ASSERT_TRUE(ok) << ok.message();
  const std::vector<std::vector<float>> want = expectedSum(n, me);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(sameBits(mine[i], want[i])) << "tensor " << i << " on " << world->who();
  // The addends were not all zero: the sum moved the values.
  EXPECT_NE(mine[0][0], addends(me)[0][0]);
}

TEST(Mpi, NativeAllReduceIsTheSameOnEveryRankAndWithinRounding) {
  auto world = tpc::test::testWorld();
  const int n = world->size(), me = world->rank();
  MpiCommunicator comm(world, MpiSums::Native);
  std::vector<std::vector<float>> mine = addends(me);
  Expected<void> ok = comm.allReduce(me, bufs(mine));
  ASSERT_TRUE(ok) << ok.message();
  const std::vector<std::vector<float>> want = expectedSum(n, me);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(mine[i].size(), want[i].size());
    for (size_t j = 0; j < want[i].size(); ++j)
      EXPECT_NEAR(mine[i][j], want[i][j], 1e-6f) << "tensor " << i << " element " << j;
    if (n == 2) { // one addition per element: the same bits in either order
      EXPECT_TRUE(sameBits(mine[i], want[i])) << "tensor " << i;
    }
  }
  // Every rank holds the same bits (mirrored values must not drift apart between ranks).
  auto all = world->allGather(std::string(reinterpret_cast<const char *>(mine[0].data()), mine[0].size() * 4));
  ASSERT_TRUE(all) << all.message();
  for (int r = 1; r < n; ++r)
    EXPECT_EQ((*all)[r], (*all)[0]) << "rank " << r << " differs from rank 0";
}

// bf16 payloads (Bf16Wire.h) take the rank-order exchange at every N, including N = 2, in both sums
// settings, on a small bucket (decode) and one large enough for the in-process split path: bit for bit the
// in-process communicator's bf16 result, which differs from the f32 sum.
TEST(Mpi, Bf16AllReduceIsTheInProcessBf16SumBitForBit) {
  auto world = tpc::test::testWorld();
  const int n = world->size(), me = world->rank();
  for (MpiSums sums : {MpiSums::RankOrder, MpiSums::Native})
    for (int64_t count : {int64_t(1037), int64_t(40000)}) {
      SCOPED_TRACE("count " + std::to_string(count));
      MpiCommunicator comm(world, sums);
      ASSERT_TRUE(comm.supportsPayload(Payload::BF16));
      comm.setPayload(Payload::BF16);
      std::vector<float> mine = tpc::test::uniformFloats(size_t(count), 100 * me + 7);
      Expected<void> ok = comm.allReduce(me, {{mine.data(), count}});
      ASSERT_TRUE(ok) << ok.message();
      std::vector<std::vector<float>> all(n);
      for (int r = 0; r < n; ++r)
        all[r] = tpc::test::uniformFloats(size_t(count), 100 * r + 7);
      std::vector<std::vector<float>> f32 = all;
      inProcess(
          n, [&](Communicator &c, int r) { return c.allReduce(r, {{all[r].data(), count}}); }, Payload::BF16);
      inProcess(n, [&](Communicator &c, int r) { return c.allReduce(r, {{f32[r].data(), count}}); });
      EXPECT_TRUE(sameBits(mine, all[me])) << world->who();
      EXPECT_FALSE(sameBits(mine, f32[me])) << "bf16 payloads gave the f32 sum";
    }
}

/// Parts along axis 1 of [outer = 3, Σ parts, inner = 2]: unequal, one empty at N >= 3.
AxisParts layoutFor(int n) {
  AxisParts l;
  l.outer = 3;
  l.inner = 2;
  l.parts = n == 2 ? std::vector<int64_t>{5, 2} : std::vector<int64_t>{4, 0, 3};
  for (int r = 3; r < n; ++r)
    l.parts.push_back(r);
  return l;
}

TEST(Mpi, AllGatherWithUnequalAndEmptyPartsMatchesInProcess) {
  auto world = tpc::test::testWorld();
  const int n = world->size(), me = world->rank();
  MpiCommunicator comm(world);
  for (int64_t outer : {int64_t(1), int64_t(3)}) {
    AxisParts l = layoutFor(n);
    l.outer = outer;
    auto partOf = [&](int r) { return tpc::test::uniformFloats(size_t(l.outer * l.parts[r] * l.inner), 7 + r); };
    std::vector<float> part = partOf(me), whole(size_t(l.outer * l.total() * l.inner), -9.f);
    Expected<void> ok = comm.allGather(me, {part.data(), int64_t(part.size())},
                                       {whole.data(), int64_t(whole.size())}, l);
    ASSERT_TRUE(ok) << ok.message();
    std::vector<std::vector<float>> parts(n), wholes(n, std::vector<float>(whole.size()));
    for (int r = 0; r < n; ++r)
      parts[r] = partOf(r);
    inProcess(n, [&](Communicator &c, int r) {
      return c.allGather(r, {parts[r].data(), int64_t(parts[r].size())}, {wholes[r].data(), int64_t(whole.size())},
                         l);
    });
    EXPECT_TRUE(sameBits(whole, wholes[me])) << "outer " << outer;
  }
  // Any element type moves: i32 ids, gathered as bytes.
  AxisParts l = layoutFor(n);
  std::vector<int32_t> ids(size_t(l.outer * l.parts[me] * l.inner), 1000 * me + 1),
      all(size_t(l.outer * l.total() * l.inner), -1);
  Expected<void> ok =
      comm.allGather({AllGatherEntry{me, {ids.data(), int64_t(ids.size())}, {all.data(), int64_t(all.size())}}}, l,
                     ElemType::I32);
  ASSERT_TRUE(ok) << ok.message();
  for (int64_t o = 0; o < l.outer; ++o)
    for (int r = 0; r < n; ++r)
      for (int64_t k = 0; k < l.parts[r] * l.inner; ++k)
        EXPECT_EQ(all[size_t((o * l.total() + l.offset(r)) * l.inner + k)], 1000 * r + 1);
}

TEST(Mpi, ReduceScatterWithUnequalAndEmptyPartsMatchesInProcess) {
  auto world = tpc::test::testWorld();
  const int n = world->size(), me = world->rank();
  MpiCommunicator comm(world);
  for (int64_t outer : {int64_t(1), int64_t(3)}) {
    AxisParts l = layoutFor(n);
    l.outer = outer;
    const size_t wholeN = size_t(l.outer * l.total() * l.inner);
    auto wholeOf = [&](int r) { return tpc::test::uniformFloats(wholeN, 50 + r); };
    std::vector<float> whole = wholeOf(me), part(size_t(l.outer * l.parts[me] * l.inner), -9.f);
    Expected<void> ok = comm.reduceScatter(me, {whole.data(), int64_t(wholeN)}, {part.data(), int64_t(part.size())}, l);
    ASSERT_TRUE(ok) << ok.message();
    std::vector<std::vector<float>> wholes(n), parts(n);
    for (int r = 0; r < n; ++r)
      wholes[r] = wholeOf(r), parts[r].assign(size_t(l.outer * l.parts[r] * l.inner), 0.f);
    inProcess(n, [&](Communicator &c, int r) {
      return c.reduceScatter(r, {wholes[r].data(), int64_t(wholeN)}, {parts[r].data(), int64_t(parts[r].size())}, l);
    });
    EXPECT_TRUE(sameBits(part, parts[me])) << "outer " << outer;
  }
}

TEST(Mpi, BroadcastFromTheLastRankAndBarrier) {
  auto world = tpc::test::testWorld();
  const int n = world->size(), me = world->rank();
  MpiCommunicator comm(world);
  std::vector<int32_t> v(6, me == n - 1 ? 77 : me);
  Expected<void> ok = comm.broadcast(me, {v.data(), 6}, n - 1, ElemType::I32);
  ASSERT_TRUE(ok) << ok.message();
  EXPECT_EQ(v, std::vector<int32_t>(6, 77));
  ok = comm.barrier(me);
  EXPECT_TRUE(ok) << ok.message();
  EXPECT_EQ(comm.size(), n);
  EXPECT_EQ(comm.localRanks(), std::vector<int>{me});
  EXPECT_FALSE(comm.streamOrdered());
}

TEST(Mpi, RefusesBadCallsWithoutEnteringMpiAndStaysAborted) {
  auto world = tpc::test::testWorld();
  const int n = world->size(), me = world->rank();
  float x[4] = {1, 2, 3, 4};
  { // another rank's entry: refused on this rank before any MPI call (every rank makes the same mistake)
    MpiCommunicator comm(world);
    Expected<void> ok = comm.allReduce((me + 1) % n, {{x, 4}});
    ASSERT_FALSE(ok);
    EXPECT_NE(ok.message().find("exactly this process's rank"), std::string::npos) << ok.message();
    EXPECT_TRUE(comm.aborted());
    Expected<void> later = comm.barrier(me); // aborted: at once, without waiting for the peers
    ASSERT_FALSE(later);
    EXPECT_NE(later.message().find("aborted"), std::string::npos) << later.message();
    EXPECT_EQ(x[0], 1.f); // nothing was summed
  }
  { // a layout whose sizes disagree with the buffers
    MpiCommunicator comm(world);
    AxisParts l = layoutFor(n);
    std::vector<float> part(1), whole(2);
    Expected<void> ok = comm.allGather(me, {part.data(), 1}, {whole.data(), 2}, l);
    ASSERT_FALSE(ok);
    EXPECT_NE(ok.message().find("the layout says"), std::string::npos) << ok.message();
  }
  { // sums of f16 are not defined
    MpiCommunicator comm(world);
    Expected<void> ok = comm.allReduce({AllReduceEntry{me, {{x, 4}}, nullptr}}, ElemType::F16);
    ASSERT_FALSE(ok);
    EXPECT_NE(ok.message().find("f32 only"), std::string::npos) << ok.message();
  }
  // The world is still usable: a fresh communicator sums.
  MpiCommunicator comm(world);
  float one = 1;
  Expected<void> ok = comm.allReduce(me, {{&one, 1}});
  ASSERT_TRUE(ok) << ok.message();
  EXPECT_EQ(one, float(n));
}

} // namespace
