//===- FixtureTest.cpp - fixture fidelity on CUDA ----------------------------===//
//
// For every `<fixture>-d<N>[-tag].plan` in $TPC_CUDA_PLANS (hand-built plans of the shared fixtures, e.g.
// from `TPC_KEEP_PLANS=DIR tpc-exec-tests --gtest_filter=TpcRun.KeepPlansForBench`, or `tpc compile`; a tag
// such as `-host` names a variant: `tpc compile ... --override-tensor 'ffn_.*_exps=cpu'`), runs
// the fixture's prompt teacher-forced on CUDA (all logical devices on GPU 0: loopback collectives, decode
// steps replayed from a CUDA graph) and compares the logits with the reference engine's within the
// fixture's tolerances (fixtures/README.md), and with the CPU backend on the same plan. Skips visibly
// without a GPU, without $TPC_CUDA_PLANS or without the shared fixtures.
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "test/common/FixtureReference.h"

#include <dirent.h>

#include <fstream>

using namespace tpc;
using namespace tpc::rt;

namespace {

using Reference = tpc::test::FixtureReference;
using tpc::test::readFixtureReference;

/// Prompt in one call, then one call per greedy token: the rows the reference holds.
template <typename S> Expected<std::vector<float>> teacherForced(S &s, const Reference &ref) {
  std::vector<int32_t> pos(ref.prompt.size());
  for (size_t i = 0; i < pos.size(); ++i)
    pos[i] = static_cast<int32_t>(i);
  auto rows = s.evaluate(ref.prompt, pos);
  if (!rows)
    return rows;
  std::vector<float> got = *rows;
  for (size_t k = 0; k < ref.greedy.size(); ++k) {
    auto r = s.evaluate({ref.greedy[k]}, {static_cast<int32_t>(ref.prompt.size() + k)});
    if (!r)
      return r;
    got.insert(got.end(), r->begin(), r->end());
  }
  return got;
}

void stats(const std::vector<float> &a, const std::vector<float> &b, double &maxAbs, double &rms) {
  maxAbs = 0;
  double sq = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - b[i]);
    maxAbs = std::max(maxAbs, d);
    sq += d * d;
  }
  rms = std::sqrt(sq / std::max<size_t>(1, a.size()));
}

TEST(CudaFixture, PlansMatchReferenceOnOneGpu) {
  TPC_REQUIRE_GPU();
  const char *dirEnv = std::getenv("TPC_CUDA_PLANS"), *shared = std::getenv("TPC_SHARED_DIR");
  if (!dirEnv || !shared)
    GTEST_SKIP()
        << "set TPC_CUDA_PLANS to a folder of <fixture>-d<N>.plan files and TPC_SHARED_DIR to ../shared";
  std::vector<std::string> plans;
  if (DIR *dir = ::opendir(dirEnv)) {
    while (dirent *e = ::readdir(dir)) {
      std::string f = e->d_name;
      if (f.size() > 5 && f.compare(f.size() - 5, 5, ".plan") == 0 && f.find("-d") != std::string::npos)
        plans.push_back(f);
    }
    ::closedir(dir);
  }
  std::sort(plans.begin(), plans.end());
  if (plans.empty())
    GTEST_SKIP() << "no <fixture>-d<N>.plan files in " << dirEnv;
  for (const std::string &f : plans) {
    const std::string name = f.substr(0, f.rfind("-d"));
    const std::string base = std::string(shared) + "/fixtures/" + name;
    if (!std::ifstream(base + ".gguf")) {
      std::printf("[ fixture  ] %s: no %s.gguf, skipped\n", f.c_str(), base.c_str());
      continue;
    }
    SCOPED_TRACE(f);
    Reference ref = readFixtureReference(base);
    ASSERT_FALSE(ref.logits.empty());
    auto plan = loadPlan(std::string(dirEnv) + "/" + f);
    ASSERT_TRUE(plan) << plan.message();
    SessionOptions o;
    o.threads = 4;
    o.ctxSize = 64;
    o.ggufPath = base + ".gguf";
    cuda::CudaOptions co;
    co.gpus = {0};
    auto gpu = cuda::CudaSession::open(*plan, o, co);
    ASSERT_TRUE(gpu) << gpu.message();
    auto cpu = Session::open(*plan, o);
    ASSERT_TRUE(cpu) << cpu.message();
    auto got = teacherForced(**gpu, ref);
    ASSERT_TRUE(got) << got.message();
    auto want = teacherForced(**cpu, ref);
    ASSERT_TRUE(want) << want.message();
    ASSERT_EQ(got->size(), ref.logits.size());
    double maxAbs, rms, cpuMax, cpuRms, vsCpuMax, vsCpuRms;
    stats(*got, ref.logits, maxAbs, rms);
    stats(*want, ref.logits, cpuMax, cpuRms);
    stats(*got, *want, vsCpuMax, vsCpuRms);
    EXPECT_LE(maxAbs, ref.tolMax);
    EXPECT_LE(rms, ref.tolRms);
    std::printf(
        "[ fixture  ] %s devices=%zu cuda: max|d|=%.5f rms=%.6f  cpu: max|d|=%.5f rms=%.6f  cuda-cpu: "
        "max|d|=%.5f (tol %.3g / %.3g)\n",
        f.c_str(), plan->devices.size(), maxAbs, rms, cpuMax, cpuRms, vsCpuMax, ref.tolMax, ref.tolRms);
  }
}

} // namespace
