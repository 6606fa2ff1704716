//===- BackendTest.cpp - the CUDA backend in the registry, and what its open refuses ---===//
//
// The registry's "cuda" entry is the real backend in a CUDA build: usable exactly when a GPU is visible
// (otherwise selecting it says why and `auto` falls back to the CPU), no host-step runner of its own. Its
// open refuses, before looking for a GPU (so these run on machines without one): a subset of the plan's
// devices, a communicator that takes host buffers, and weights its kernels cannot read. With a GPU, a
// session opened through the registry is an rt::Session with the CUDA answers to the roofline questions,
// profiles every step of device 0 (collectives included) and matches the CPU backend.
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include "runtime/comm/InProcessCommunicator.h"

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

/// Two devices: x (token rows) summed by an all-reduce, device 0's sum copied to the logits.
PlanMaker twoDevicePlan() {
  PlanMaker mk(2, 2, 4);
  for (int d = 0; d < 2; ++d) {
    const int32_t x = mk.tokenInput(d, {4}, randomFloats(4 * 4, 10 + d));
    const int32_t y = mk.act(d, {-1, 4});
    mk.b(d).step(OpKind::AllReduce, {x}, {y});
    if (d == 0)
      mk.b(d).step(OpKind::Copy, {y}, {mk.logits[0]});
  }
  return mk;
}

TEST(CudaBackend, RegistryListsCudaUsableOnlyWithAGpu) {
  const BackendRegistry &r = builtinBackends();
  const Backend *cuda = r.find("cuda");
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(r.names().front(), "cuda") << "auto prefers CUDA";
  EXPECT_EQ(cuda->hostStepRunner(1), nullptr) << "host steps are the CPU backend's";
  if (cuda::cudaDeviceCount() == 0) {
    auto sel = r.select("cuda");
    ASSERT_FALSE(sel);
    EXPECT_NE(sel.message().find("backend 'cuda' cannot run here: no CUDA GPU is visible"), std::string::npos)
        << sel.message();
    EXPECT_EQ(sel.message().find('\n'), std::string::npos) << sel.message();
    auto a = r.select("auto");
    ASSERT_TRUE(a) << a.message();
    EXPECT_EQ((*a)->name(), "cpu");
  } else {
    EXPECT_TRUE(cuda->usable());
    EXPECT_EQ((*r.select("auto"))->name(), "cuda");
  }
}

TEST(CudaBackend, OpenRefusesSubsetsAndHostCommunicators) {
  PlanMaker mk = twoDevicePlan();
  const Backend &cuda = *builtinBackends().find("cuda");
  SessionOptions o = mk.options(2, 8);
  o.comm = std::make_shared<comm::InProcessCommunicator>(2);
  o.devices = {0}; // prepareOpen accepts this (a communicator serves the subset); the CUDA backend does not
  auto subset = cuda.open(mk.plan, o);
  ASSERT_FALSE(subset);
  EXPECT_NE(subset.message().find("asks for 1 of the plan's 2 devices"), std::string::npos)
      << subset.message();
  EXPECT_EQ(subset.message().find('\n'), std::string::npos) << subset.message();

  o.devices = {};
  auto host = cuda.open(mk.plan, o);
  ASSERT_FALSE(host);
  EXPECT_NE(host.message().find("the in-process communicator takes host buffers"), std::string::npos)
      << host.message();

  // The common checks come first, in every backend's order: a bad context size is prepareOpen's error.
  o.comm = nullptr;
  o.ctxSize = int64_t(1) << 40;
  auto ctx = cuda.open(mk.plan, o);
  ASSERT_FALSE(ctx);
  EXPECT_NE(ctx.message().find("--ctx-size"), std::string::npos) << ctx.message();

  if (cuda::cudaDeviceCount() == 0) { // everything else is fine: only the GPU is missing
    o.ctxSize = 8;
    auto none = cuda.open(mk.plan, o);
    ASSERT_FALSE(none);
    EXPECT_NE(none.message().find("no CUDA GPU is visible"), std::string::npos) << none.message();
  }
}

TEST(CudaBackend, RegistrySessionAnswersAsCudaAndMatchesCpu) {
  TPC_REQUIRE_GPU();
  PlanMaker mk = twoDevicePlan();
  SessionOptions o = mk.options(2, 8);
  auto cpu = Session::open(mk.plan, o, "cpu");
  ASSERT_TRUE(cpu) << cpu.message();
  o.ordinals = {0}; // both logical devices on GPU 0: the loopback communicator
  auto s = builtinBackends().open("cuda", mk.plan, o);
  ASSERT_TRUE(s) << s.message();
  Session &g = **s;
  EXPECT_STREQ(g.backendName(), "CUDA");
  EXPECT_EQ(g.threadsPerDevice(), 0);
  EXPECT_EQ(g.devices(), (std::vector<int>{0, 1}));
  EXPECT_EQ(g.memoryOf(), (std::vector<int>{0, 0}));
  EXPECT_EQ(g.memoryName(0), "GPU 0");
  EXPECT_EQ(g.hostMemory(), -1);
  ASSERT_EQ(g.deviceBytes().size(), 2u);
  EXPECT_GT(g.deviceBytes()[1], 0u);
  g.setProfiling(true);
  auto got = g.evaluate({1, 0}, {0, 1});
  auto want = (*cpu)->evaluate({1, 0}, {0, 1});
  ASSERT_TRUE(got) << got.message();
  ASSERT_TRUE(want) << want.message();
  EXPECT_EQ(*got, *want) << "a rank-order sum of two addends is exact on both backends";
  const std::vector<StepProfile> prof = g.profile();
  ASSERT_EQ(prof.size(), mk.plan.devices[0].steps.size());
  for (const StepProfile &p : prof)
    EXPECT_EQ(p.calls, 1) << p.name << " (" << opKindName(p.op) << ")";
}

} // namespace
