//===- BackendTest.cpp - the CUDA backend in the registry, and what its open refuses ---===//
//
// The registry's "cuda" entry is the plugin (libtpc_cuda.so) in a CUDA build: usable exactly when a GPU
// is visible (otherwise selecting it says why and `auto` falls back to the CPU), no host-step runner of
// its own. Its open refuses, before looking for a GPU (so these run on machines without one): a
// communicator that takes host buffers (for the whole plan or a subset), and weights its kernels cannot
// read; a subset of the plan's devices with a communicator gets past every check that needs no GPU. With a GPU, a session opened
// through the registry is an rt::Session with the CUDA answers to the roofline questions, profiles every
// step of device 0 (collectives included) and matches the CPU backend; and two sessions of one device each
// (the ranks of `mpirun -np 2` sharing the GPU: MPI on host-staged buffers, here an in-process host
// communicator standing in for MPI) give the one session's logits, from rank 0 only.
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include "runtime/comm/InProcessCommunicator.h"
#include "runtime/backends/CudaPluginLoader.h"

#include <thread>

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

/// A host communicator's rank that claims to be stream-ordered: gets a subset past the CUDA backend's
/// communicator check on a machine without a GPU (never called: open stops at the GPU lookup).
class StreamOrderedStandIn final : public OneRankOf {
public:
  using OneRankOf::OneRankOf;
  bool streamOrdered() const override { return true; }
};

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

TEST(CudaBackend, OpenRefusesHostCommunicatorsAndBadSubsetsBeforeAnyGpu) {
  PlanMaker mk = twoDevicePlan();
  const Backend &cuda = *builtinBackends().find("cuda");
  SessionOptions o = mk.options(2, 8);
  o.comm = std::make_shared<comm::InProcessCommunicator>(2);
  o.devices = {1}; // a rank's subset: prepareOpen accepts it, the CUDA backend needs device buffers
  auto subset = cuda.open(mk.plan, o);
  ASSERT_FALSE(subset);
  EXPECT_NE(subset.message().find("the in-process communicator takes host buffers"), std::string::npos)
      << subset.message();
  EXPECT_EQ(subset.message().find('\n'), std::string::npos) << subset.message();

  // A subset without a communicator, or naming a device the plan lacks: prepareOpen's errors, first.
  o.comm = nullptr;
  auto alone = cuda.open(mk.plan, o);
  ASSERT_FALSE(alone);
  EXPECT_NE(alone.message().find("needs a communicator"), std::string::npos) << alone.message();
  o.comm = std::make_shared<comm::InProcessCommunicator>(2);
  o.devices = {2};
  auto missing = cuda.open(mk.plan, o);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.message().find("2 is not a device of the plan"), std::string::npos) << missing.message();

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
    // The subset of one rank, with a communicator that passes the backend's checks (the host-staged one
    // cannot be made without a GPU: a stand-in that says it is stream-ordered), also gets this far.
    o.devices = {1};
    o.comm = std::make_shared<StreamOrderedStandIn>(std::make_shared<comm::InProcessCommunicator>(2), 1);
    auto rank = cuda.open(mk.plan, o);
    ASSERT_FALSE(rank);
    EXPECT_NE(rank.message().find("no CUDA GPU is visible"), std::string::npos) << rank.message();
  }
}

// A pipeline plan (tpc compile --stages) has Send/Recv steps the CUDA backend does not run: refused by
// name, before any GPU is looked for.
TEST(CudaBackend, OpenRefusesPipelinePlans) {
  PlanMaker mk = twoDevicePlan();
  mk.plan.stages = 2;
  const Backend &cuda = *builtinBackends().find("cuda");
  auto staged = cuda.open(mk.plan, mk.options(2, 8));
  ASSERT_FALSE(staged);
  EXPECT_NE(staged.message().find("the plan has 2 pipeline stages; the CUDA backend runs one-stage plans only"),
            std::string::npos)
      << staged.message();
}

TEST(CudaBackend, TwoRankSessionsOnOneGpuMatchTheOneSession) {
  TPC_REQUIRE_GPU();
  PlanMaker mk = twoDevicePlan();
  SessionOptions o = mk.options(2, 8);
  o.ordinals = {0};
  auto one = builtinBackends().open("cuda", mk.plan, o);
  ASSERT_TRUE(one) << one.message();
  // A prefill of two tokens, then three decode steps (the one-token path a CUDA graph would take: off on
  // the host-staged communicator, whose calls block on the host).
  const std::vector<std::vector<int32_t>> toks = {{1, 0}, {2}, {3}, {1}}, pos = {{0, 1}, {2}, {3}, {4}};
  std::vector<std::vector<float>> want;
  for (size_t c = 0; c < toks.size(); ++c) {
    auto r = (*one)->evaluate(toks[c], pos[c]);
    ASSERT_TRUE(r) << r.message();
    want.push_back(*r);
  }

  // The registry's sessions run in the plugin: its communicator comes from the plugin too, so the session
  // and the communicator share one copy of cudart (this binary also links the backend statically).
  auto plugin = loadCudaPlugin();
  ASSERT_TRUE(plugin) << plugin.message();
  auto host = std::make_shared<comm::InProcessCommunicator>(2);
  std::vector<std::unique_ptr<Session>> ranks;
  for (int r = 0; r < 2; ++r) {
    auto c = (*plugin)->makeHostStagedCommunicator(std::make_shared<OneRankOf>(host, r), 0);
    ASSERT_TRUE(c) << c.message();
    SessionOptions ro = o;
    ro.devices = {r};
    ro.comm = *c;
    auto s = builtinBackends().open("cuda", mk.plan, ro);
    ASSERT_TRUE(s) << "rank " << r << ": " << s.message();
    EXPECT_EQ((*s)->devices(), std::vector<int>{r});
    std::vector<int> mem = {-1, -1};
    mem[r] = 0;
    EXPECT_EQ((*s)->memoryOf(), mem) << "only its own device is on a GPU";
    ASSERT_EQ((*s)->deviceBytes().size(), 1u);
    EXPECT_EQ((*s)->deviceBytes()[0], (*one)->deviceBytes()[r]) << "rank " << r << " allocates its share";
    ranks.push_back(s.take());
  }
  for (size_t c = 0; c < toks.size(); ++c) {
    Expected<std::vector<float>> got0 = Error{"not run"}, got1 = Error{"not run"};
    std::thread peer([&] { got1 = ranks[1]->evaluate(toks[c], pos[c]); }); // each rank on its own thread
    got0 = ranks[0]->evaluate(toks[c], pos[c]);
    peer.join();
    ASSERT_TRUE(got0) << "call " << c << ": " << got0.message();
    ASSERT_TRUE(got1) << "call " << c << ": " << got1.message();
    EXPECT_EQ(*got0, want[c]) << "call " << c << ": a rank-order sum of two addends is exact on both paths";
    EXPECT_TRUE(got1->empty()) << "call " << c << ": only the session running device 0 returns logits";
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
