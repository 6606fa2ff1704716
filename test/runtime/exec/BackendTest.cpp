//===- BackendTest.cpp - the backend registry and the built-in backends ------===//
//
// A registry of fake backends: unknown names are one-line errors listing what the build has (with why a
// backend cannot run), `auto` takes the first usable backend in the order they were added, a name added
// twice replaces the first. The built-in registry has "cpu" (usable, opens sessions, hands out a host-step
// runner) and "cuda" (usable only in a CUDA build with a GPU); Session::open defaults to the CPU.
//===----------------------------------------------------------------------===//
#include "runtime/backends/Backends.h"

#include "test/common/TestSupport.h"
#include "test/runtime/exec/ExecTestUtil.h"

#include <gtest/gtest.h>

#include <unistd.h>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

/// A backend that records whether it was opened.
class FakeBackend final : public Backend {
public:
  FakeBackend(std::string name, std::string whyNot, int *opened)
      : name_(std::move(name)), whyNot_(std::move(whyNot)), opened_(opened) {}
  std::string name() const override { return name_; }
  Expected<void> usable() const override {
    if (whyNot_.empty())
      return {};
    return Error{whyNot_};
  }
  Expected<std::unique_ptr<Session>> open(Plan, const SessionOptions &) const override {
    ++*opened_;
    return Error{"fake " + name_ + " opened"};
  }

private:
  std::string name_, whyNot_;
  int *opened_;
};

TEST(Backends, UnknownNameListsTheBackendsOfTheBuild) {
  int opened = 0;
  BackendRegistry r;
  r.add(std::make_unique<FakeBackend>("gpu", "no GPU is visible", &opened));
  r.add(std::make_unique<FakeBackend>("host", "", &opened));
  auto b = r.select("tpu");
  ASSERT_FALSE(b);
  EXPECT_EQ(b.message(),
            "unknown backend 'tpu'; this build has: auto, gpu (not usable here: no GPU is visible), host");
  auto s = r.open("tpu", Plan{}, SessionOptions{});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), b.message());
  EXPECT_EQ(opened, 0);
}

TEST(Backends, AutoTakesTheFirstUsableAndNamesAreExact) {
  int opened = 0;
  BackendRegistry r;
  r.add(std::make_unique<FakeBackend>("gpu", "no GPU is visible", &opened));
  r.add(std::make_unique<FakeBackend>("host", "", &opened));
  r.add(std::make_unique<FakeBackend>("other", "", &opened));
  EXPECT_EQ(r.names(), (std::vector<std::string>{"gpu", "host", "other"}));
  auto a = r.select("auto");
  ASSERT_TRUE(a) << a.message();
  EXPECT_EQ((*a)->name(), "host");
  auto g = r.select("gpu");
  ASSERT_FALSE(g);
  EXPECT_EQ(g.message(), "backend 'gpu' cannot run here: no GPU is visible");
  // open goes to the selected backend.
  auto s = r.open("other", Plan{}, SessionOptions{});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), "fake other opened");
  EXPECT_EQ(opened, 1);
  // The same name again replaces the first one, keeping its place in the auto order.
  r.add(std::make_unique<FakeBackend>("gpu", "", &opened));
  EXPECT_EQ(r.names(), (std::vector<std::string>{"gpu", "host", "other"}));
  EXPECT_EQ((*r.select("auto"))->name(), "gpu");
  // Nothing usable at all.
  BackendRegistry none;
  none.add(makeUnavailableBackend("gpu", "not built"));
  auto n = none.select("auto");
  ASSERT_FALSE(n);
  EXPECT_EQ(n.message(), "no backend can run here; this build has: gpu (not usable here: not built)");
  EXPECT_EQ(none.open("gpu", Plan{}, SessionOptions{}).message(), "backend 'gpu' cannot run here: not built");
}

TEST(Backends, BuiltinCpuOpensSessionsAndRunsHostSteps) {
  const BackendRegistry &r = builtinBackends();
  const Backend *cpu = r.find("cpu");
  ASSERT_NE(cpu, nullptr);
  EXPECT_TRUE(cpu->usable());
  std::unique_ptr<exec::HostStepRunner> host = cpu->hostStepRunner(3);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->threads(), 3);
  ASSERT_NE(r.find("cuda"), nullptr) << "cuda is listed in every build, usable or not";
#ifndef TPC_HAVE_CUDA
  auto cuda = r.select("cuda");
  ASSERT_FALSE(cuda);
  EXPECT_NE(cuda.message().find("built without CUDA"), std::string::npos) << cuda.message();
  EXPECT_EQ((*r.select("auto"))->name(), "cpu");
  EXPECT_EQ(r.find("cuda")->hostStepRunner(1), nullptr);
#endif

  // Session::open defaults to the CPU backend; a scale step runs there.
  PlanMaker mk(1, 2, 3);
  const int32_t x = mk.tokenInput(0, {4}, randomFloats(3 * 4, 5));
  const int32_t y = mk.act(0, {-1, 4});
  mk.b(0).step(OpKind::Scale, {x}, {y}, {}, {2.0f});
  const SessionOptions o = mk.options(2, 8); // sets the plan's GGUF size: before the plan is copied
  auto s = Session::open(mk.plan, o);
  ASSERT_TRUE(s) << s.message();
  EXPECT_STREQ((*s)->backendName(), "CPU");
  EXPECT_EQ((*s)->devices(), std::vector<int>{0});
  ASSERT_TRUE((*s)->evaluate({2, 0}, {0, 1}));
  const std::vector<float> xs = (*s)->tensorData(0, x, 2), ys = (*s)->tensorData(0, y, 2);
  ASSERT_EQ(ys.size(), 8u);
  for (size_t i = 0; i < ys.size(); ++i)
    EXPECT_EQ(ys[i], 2.0f * xs[i]);
  auto bad = Session::open(mk.plan, o, "quantum");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("unknown backend 'quantum'; this build has: auto, cuda"), std::string::npos)
      << bad.message();
}

TEST(Backends, TpcRunNamesTheBackendsOfTheBuild) {
  const std::string tpc = std::string(TPC_BINARY_DIR) + "/bin/tpc";
  if (::access(tpc.c_str(), X_OK) != 0)
    GTEST_SKIP() << tpc << " not built";
  PlanMaker mk(1, 1, 2);
  const int32_t x = mk.tokenInput(0, {2}, randomFloats(2 * 2, 7));
  mk.b(0).step(OpKind::Copy, {x}, {mk.logits[0]});
  mk.plan.ggufSize = mk.gguf.size(); // the backend is picked before the GGUF is opened
  const std::string plan = ::testing::TempDir() + "tpc-backend-" + std::to_string(::getpid()) + ".plan";
  ASSERT_TRUE(writePlan(mk.plan, plan));
  auto [rc, out] = tpc::test::runShell(tpc + " run " + plan + " --prompt-ids 0 --backend quantum 2>&1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("--backend: unknown backend 'quantum'; this build has: auto, cuda"), std::string::npos)
      << out;
  EXPECT_NE(out.find(", cpu\n"), std::string::npos) << out;
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line: " << out;
#ifndef TPC_HAVE_CUDA
  auto [rc2, cuda] = tpc::test::runShell(tpc + " run " + plan + " --prompt-ids 0 --backend cuda 2>&1");
  EXPECT_EQ(rc2, 1) << cuda;
  EXPECT_NE(cuda.find("--backend: backend 'cuda' cannot run here: this tpc was built without CUDA"),
            std::string::npos)
      << cuda;
#endif
  std::remove(plan.c_str());
}

} // namespace
