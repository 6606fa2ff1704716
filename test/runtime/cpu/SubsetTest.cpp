//===- SubsetTest.cpp - sessions that run some of a plan's devices -----------===//
//
// The seam a multi-process launcher will use, exercised in one process: a 2- or 3-device plan (a
// column-parallel matmul, a row-parallel one, an all-gather and an all-reduce into the logits) opened as
// one session per device (or a pair and a single), the sessions connected by one shared communicator and
// run on their own threads, gives the all-in-one session's logits bit for bit; only the session that runs
// device 0 returns rows, and each session loads and reports only its own devices. A subset without a
// communicator, or with one whose world is not the plan's devices, is a one-line error.
//===----------------------------------------------------------------------===//
#include "test/runtime/exec/ExecTestUtil.h"

#include "runtime/comm/InProcessCommunicator.h"
#include "runtime/plan/StepParams.h"

#include <thread>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

constexpr int64_t kE = 16, kF = 12, kV = 10, kRows = 7;

/// logits = W2 · gather(W1 · emb[tok]) split over `n` devices: device d holds W1 rows and W2 columns of
/// its share of F (the gathered hidden state is mirrored, so W2 is applied column-parallel, then summed).
PlanMaker splitPlan(int n) {
  const std::vector<int64_t> share = n == 2 ? std::vector<int64_t>{7, 5} : std::vector<int64_t>{5, 3, 4};
  const std::vector<float> emb = randomFloats(kRows * kE, 1), w1 = randomFloats(kF * kE, 2),
                           w2 = randomFloats(kV * kF, 3);
  PlanMaker mk(n, 4, kV);
  int64_t f0 = 0;
  for (int d = 0; d < n; ++d) {
    const int64_t f = share[d];
    const std::vector<float> w1d(w1.begin() + f0 * kE, w1.begin() + (f0 + f) * kE);
    std::vector<float> w2d;
    for (int64_t v = 0; v < kV; ++v)
      w2d.insert(w2d.end(), w2.begin() + v * kF + f0, w2.begin() + v * kF + f0 + f);
    const int32_t x = mk.tokenInput(d, {kE}, emb);
    const int32_t h = mk.act(d, {-1, f}), g = mk.act(d, {-1, kF}), p = mk.act(d, {-1, kV});
    mk.b(d).step(OpKind::Matmul, {x, mk.weightF32(d, {f, kE}, w1d)}, {h}, {}, {}, "up");
    mk.b(d).step(OpKind::AllGather, {h}, {g}, AxisParams{1}.pack().ints, {}, "gather");
    // Each device projects its own columns of the gathered state (the same values everywhere), then sums.
    const int32_t mine = mk.act(d, {-1, f});
    mk.b(d).step(OpKind::Slice, {g}, {mine}, NarrowParams{1, f0, f}.pack().ints, {}, "mine");
    mk.b(d).step(OpKind::Matmul, {mine, mk.weightF32(d, {kV, f}, w2d)}, {p}, {}, {}, "down");
    mk.b(d).step(OpKind::AllReduce, {p}, {p}, {}, {}, "sum");
    if (d == 0)
      mk.b(d).step(OpKind::Copy, {p}, {mk.logits[0]}, {}, {}, "logits");
    f0 += f;
  }
  return mk;
}

std::vector<int32_t> ids() { return {3, 1, 6, 0, 2, 5}; } // 6 tokens: two chunks of max_batch 4
std::vector<int32_t> positions() { return {0, 1, 2, 3, 4, 5}; }

TEST(Subset, SessionsPerDeviceMatchOneSessionBitForBit) {
  for (int n : {2, 3}) {
    SCOPED_TRACE("devices " + std::to_string(n));
    PlanMaker mk = splitPlan(n);
    SessionOptions all = mk.options(2 * n, 16);
    auto whole = Session::open(mk.plan, all);
    ASSERT_TRUE(whole) << whole.message();
    auto want = (*whole)->evaluate(ids(), positions());
    ASSERT_TRUE(want) << want.message();
    ASSERT_EQ(want->size(), ids().size() * kV);

    // One session per device, or devices {0, 1} together and {2} alone.
    std::vector<std::vector<int>> groups;
    for (int d = 0; d < n; ++d)
      groups.push_back({d});
    if (n == 3)
      groups = {{0, 1}, {2}};
    for (size_t pass = 0; pass < (n == 3 ? 2u : 1u); ++pass) {
      if (pass == 1)
        groups = {{0}, {1}, {2}};
      auto comm = std::make_shared<comm::InProcessCommunicator>(n);
      std::vector<std::unique_ptr<Session>> sessions;
      for (const std::vector<int> &g : groups) {
        SessionOptions o = all;
        o.threads = 2 * static_cast<int>(g.size());
        o.devices = g;
        o.comm = comm;
        auto s = Session::open(mk.plan, o);
        ASSERT_TRUE(s) << s.message();
        EXPECT_EQ((*s)->devices(), g);
        EXPECT_EQ((*s)->deviceBytes().size(), g.size());
        std::vector<int> mem((*s)->memoryOf());
        ASSERT_EQ(mem.size(), size_t(n));
        for (int d = 0; d < n; ++d)
          EXPECT_EQ(mem[d], (*s)->runsDevice(d) ? 0 : -1);
        sessions.push_back(std::move(*s));
      }
      std::vector<Expected<std::vector<float>>> got(sessions.size(), std::vector<float>{});
      std::vector<std::thread> threads;
      for (size_t i = 0; i < sessions.size(); ++i)
        threads.emplace_back([&, i] { got[i] = sessions[i]->evaluate(ids(), positions()); });
      for (std::thread &t : threads)
        t.join();
      for (size_t i = 0; i < sessions.size(); ++i) {
        ASSERT_TRUE(got[i]) << got[i].message();
        if (sessions[i]->runsDevice(0))
          EXPECT_EQ(*got[i], *want) << "the session with device 0 differs from one session";
        else
          EXPECT_TRUE(got[i]->empty()) << "only device 0's session returns logits";
      }
      // A session reads back only its own devices' tensors.
      EXPECT_TRUE(sessions.back()->tensorData(0, mk.logits[0], 2).empty());
    }
  }
}

TEST(Subset, ASubsetNeedsACommunicatorOfThePlansWorld) {
  PlanMaker mk = splitPlan(2);
  SessionOptions o = mk.options(2, 16);
  o.devices = {1};
  auto none = Session::open(mk.plan, o);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.message(),
            "a session running 1 of the plan's 2 devices needs a communicator that connects it "
            "to the others (SessionOptions::comm)");
  o.comm = std::make_shared<comm::InProcessCommunicator>(3);
  auto wrong = Session::open(mk.plan, o);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.message(), "the in-process communicator connects 3 ranks but the plan has 2 devices");
  o.comm = std::make_shared<comm::InProcessCommunicator>(2);
  o.devices = {1, 2};
  auto outside = Session::open(mk.plan, o);
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.message(), "session devices: 2 is not a device of the plan (0..1)");
  o.devices = {0, 0};
  auto twice = Session::open(mk.plan, o);
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.message(), "session devices: device 0 is listed twice");
}

} // namespace
