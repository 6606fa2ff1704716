//===- StageCommunicatorTest.cpp - collectives per stage, send/recv between stages ---===//
//
// StageCommunicator::inProcess(4, 2): ranks 0-1 are stage 0, 2-3 stage 1. Each stage's all-reduce sums its
// own two ranks only (both stages run one at the same time, with different data, on one thread per rank);
// an all-gather uses the stage's parts; messages between stages arrive in order with their bytes; a call
// that mixes stages, a size mismatch and abort() fail with one line instead of hanging.
//===----------------------------------------------------------------------===//
#include "runtime/comm/StageCommunicator.h"

#include <gtest/gtest.h>

#include <thread>

using namespace tpc;
using namespace tpc::rt::comm;

namespace {

std::vector<Expected<void>> onThreads(int n, const std::function<Expected<void>(int)> &fn) {
  std::vector<Expected<void>> res(n);
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] { res[r] = fn(r); });
  for (std::thread &t : th)
    t.join();
  return res;
}

TEST(StageCommunicator, CollectivesStayInsideAStage) {
  auto comm = StageCommunicator::inProcess(4, 2);
  EXPECT_EQ(comm->size(), 4);
  std::vector<std::vector<float>> x(4);
  for (int r = 0; r < 4; ++r)
    x[r] = {float(r + 1), float(10 * (r + 1))};
  auto res = onThreads(4, [&](int r) { return comm->allReduce(r, {Buffer{x[r].data(), 2}}); });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(res[r]) << res[r].message();
    // Stage 0: 1 + 2, stage 1: 3 + 4.
    const float want = r < 2 ? 3.f : 7.f;
    EXPECT_EQ(x[r][0], want) << "rank " << r;
    EXPECT_EQ(x[r][1], 10 * want) << "rank " << r;
  }
  // An all-gather with the stage's parts (1 and 2 elements): each stage gathers its own ranks' parts.
  AxisParts layout;
  layout.parts = {1, 2};
  std::vector<std::vector<float>> part(4), whole(4, std::vector<float>(3, -1));
  for (int r = 0; r < 4; ++r)
    part[r].assign(size_t(layout.parts[r % 2]), float(100 * r));
  res = onThreads(4, [&](int r) {
    return comm->allGather(r, Buffer{part[r].data(), int64_t(part[r].size())}, Buffer{whole[r].data(), 3},
                           layout);
  });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(res[r]) << res[r].message();
    const float a = r < 2 ? 0.f : 200.f, b = r < 2 ? 100.f : 300.f;
    EXPECT_EQ(whole[r], (std::vector<float>{a, b, b})) << "rank " << r;
  }
}

TEST(StageCommunicator, MessagesCrossStagesInOrder) {
  auto comm = StageCommunicator::inProcess(4, 2);
  std::vector<float> got1(3), got2(3);
  auto res = onThreads(4, [&](int r) -> Expected<void> {
    if (r == 1) { // two messages to its peer on stage 1, sent before the peer looks
      std::vector<float> a = {1, 2, 3}, b = {4, 5, 6};
      if (auto ok = comm->send(1, 3, Buffer{a.data(), 3}); !ok)
        return ok;
      a.assign(3, 0); // the send copied: the buffer is free at once
      return comm->send(1, 3, Buffer{b.data(), 3});
    }
    if (r == 3) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (auto ok = comm->recv(3, 1, Buffer{got1.data(), 3}); !ok)
        return ok;
      return comm->recv(3, 1, Buffer{got2.data(), 3});
    }
    return {};
  });
  for (int r = 0; r < 4; ++r)
    ASSERT_TRUE(res[r]) << res[r].message();
  EXPECT_EQ(got1, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(got2, (std::vector<float>{4, 5, 6}));
}

TEST(StageCommunicator, MistakesFailWithOneLine) {
  {
    auto comm = StageCommunicator::inProcess(4, 2);
    float a = 0, b = 0;
    auto mixed = comm->allReduce(
        {AllReduceEntry{1, {Buffer{&a, 1}}, nullptr}, AllReduceEntry{2, {Buffer{&b, 1}}, nullptr}});
    ASSERT_FALSE(mixed);
    EXPECT_NE(mixed.message().find("mixes ranks of stages 0 and 1"), std::string::npos) << mixed.message();
    EXPECT_TRUE(comm->aborted());
  }
  {
    auto comm = StageCommunicator::inProcess(4, 2);
    std::vector<float> two(2), three(3);
    ASSERT_TRUE(comm->send(0, 2, Buffer{two.data(), 2}));
    auto wrong = comm->recv(2, 0, Buffer{three.data(), 3});
    ASSERT_FALSE(wrong);
    EXPECT_NE(wrong.message().find("expected 12 bytes from rank 0, got 8"), std::string::npos)
        << wrong.message();
  }
  {
    // A receive waiting for a peer that failed is released by abort().
    auto comm = StageCommunicator::inProcess(2, 2);
    float v = 0;
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      comm->abort("device 0 failed");
    });
    auto waited = comm->recv(1, 0, Buffer{&v, 1});
    t.join();
    ASSERT_FALSE(waited);
    EXPECT_NE(waited.message().find("device 0 failed"), std::string::npos) << waited.message();
  }
}

} // namespace
