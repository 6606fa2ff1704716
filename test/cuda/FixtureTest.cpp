//===- FixtureTest.cpp - fixture fidelity on CUDA ----------------------------===//
//
// Writes the shared fixtures' hand-built plans into a temporary folder itself (tpc-cuda-fixture-plans:
// the CPU fixture test's builder; tiny-llama F32 / Q8_0 / Q4_K_M, tiny-qwen3moe F32 / Q8_0 / Q4_K_M and
// tiny-gemma3, at 1 and 2 devices where the split keeps quant blocks whole), or reads
// `<fixture>-d<N>[-tag].plan` files from $TPC_CUDA_PLANS when that is set (e.g. `tpc compile` plans; a
// tag such as `-host` names a variant: `--override-tensor 'ffn_.*_exps=cpu'`). Each plan runs the
// fixture's prompt teacher-forced on CUDA (all logical devices on GPU 0: loopback collectives, decode
// steps replayed from a CUDA graph) and on the CPU backend, and must pass (test/common/FixtureCheck.h, the
// comparison every fixture test makes):
//   - reference logits: CUDA against the reference engine, every logit within tol_max_abs and the rms
//     within tol_rms (fixtures/README.md), NaN failing;
//   - greedy ids: the argmax of each row that predicts a reference greedy token is that token, for the
//     first greedy_strict_prefix tokens (past them the reference's own top-2 margin is too small to
//     demand it);
//   - CUDA against CPU on the same plan within the same tolerances: two backends of this engine must
//     agree at least as closely as each must agree with an independent engine.
// Plans of max batch 36 or more (the hand-built ones are written with 64) also run three sequences in one
// session: the prompt and two other texts interleaved in one batch, then the greedy ids fed to all three
// per step (tensor-core prefill attention, batched decode GEMVs, a graph per batch shape), sequence 0
// against the reference and every sequence against the CPU on the same batches.
// At least one plan must be compared. Skips visibly without a GPU, without the shared fixtures, or where
// tpc-cuda-fixture-plans was not built (no GGUF reader in this build).
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "test/common/FixtureCheck.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#ifndef TPC_CUDA_FIXTURE_PLANS_TOOL
#define TPC_CUDA_FIXTURE_PLANS_TOOL "" // set by test/cuda/CMakeLists.txt where the tool is built
#endif

using namespace tpc;
using namespace tpc::rt;

namespace {

using Reference = tpc::test::FixtureReference;
using tpc::test::readFixtureReference;

/// The `<fixture>-d<N>[-tag].plan` files of `dir`, sorted.
std::vector<std::string> planFiles(const std::string &dir) {
  std::vector<std::string> plans;
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d)) {
      std::string f = e->d_name;
      if (f.size() > 5 && f.compare(f.size() - 5, 5, ".plan") == 0 && f.find("-d") != std::string::npos)
        plans.push_back(f);
    }
    ::closedir(d);
  }
  std::sort(plans.begin(), plans.end());
  return plans;
}

/// A temporary folder of plan files, removed with its files at the end of the test.
struct TempPlanDir {
  std::string path;
  TempPlanDir() : path(::testing::TempDir() + "tpc-cuda-plans-" + std::to_string(::getpid())) {
    ::mkdir(path.c_str(), 0755);
  }
  ~TempPlanDir() {
    for (const std::string &f : planFiles(path))
      std::remove((path + "/" + f).c_str());
    ::rmdir(path.c_str());
  }
};

/// teacherForced for `seqs` sequences in one session: sequence 0 reads the reference prompt, sequence q
/// the prompt with every token but the first shifted by 31q (another text), all interleaved in one batch
/// (every row asked for: 3 x 12 tokens run the tensor-core prefill attention); then each greedy id is fed
/// to every sequence in one batch per step (batched decode: the batched GEMVs, a graph per shape).
/// Returns each sequence's rows in teacherForced's layout.
Expected<std::vector<std::vector<float>>> teacherForcedTogether(Session &s, const Reference &ref, int seqs) {
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < ref.prompt.size(); ++i)
    for (int q = 0; q < seqs; ++q) {
      const int32_t tok = i == 0 ? ref.prompt[i] : int32_t((ref.prompt[i] + 31 * q) % ref.nVocab);
      batch.push_back({tok, int32_t(i), q, true});
    }
  std::vector<std::vector<float>> out(seqs);
  auto rows = s.evaluate(batch);
  if (!rows)
    return Error{rows.message()};
  const size_t v = size_t(ref.nVocab);
  for (size_t i = 0; i < batch.size(); ++i)
    out[i % seqs].insert(out[i % seqs].end(), rows->begin() + i * v, rows->begin() + (i + 1) * v);
  for (size_t k = 0; k < ref.greedy.size(); ++k) {
    std::vector<BatchToken> step;
    for (int q = 0; q < seqs; ++q)
      step.push_back({ref.greedy[k], int32_t(ref.prompt.size() + k), q, true});
    auto r = s.evaluate(step);
    if (!r)
      return Error{r.message()};
    for (int q = 0; q < seqs; ++q)
      out[q].insert(out[q].end(), r->begin() + q * v, r->begin() + (q + 1) * v);
  }
  return out;
}

TEST(CudaFixture, PlansMatchReferenceOnOneGpu) {
  TPC_REQUIRE_GPU();
  const char *sharedEnv = std::getenv("TPC_SHARED_DIR");
  const std::string shared = sharedEnv ? sharedEnv : "";
  struct stat st {};
  if (shared.empty() || ::stat((shared + "/fixtures").c_str(), &st) != 0)
    GTEST_SKIP() << "no shared fixtures: set TPC_SHARED_DIR to ../shared (its fixtures/ folder is missing)";
  const char *plansEnv = std::getenv("TPC_CUDA_PLANS");
  TempPlanDir temp;
  std::string dir = plansEnv ? plansEnv : "";
  if (dir.empty()) {
    const std::string tool = TPC_CUDA_FIXTURE_PLANS_TOOL;
    if (tool.empty())
      GTEST_SKIP() << "tpc-cuda-fixture-plans is not built here (no GGUF reader) and TPC_CUDA_PLANS is unset";
    auto [rc, out] =
        tpc::test::runShell("TPC_SHARED_DIR='" + shared + "' '" + tool + "' '" + temp.path + "' 2>&1");
    ASSERT_EQ(rc, 0) << "tpc-cuda-fixture-plans failed:\n" << out;
    dir = temp.path;
  }
  const std::vector<std::string> plans = planFiles(dir);
  int compared = 0;
  for (const std::string &f : plans) {
    const std::string name = f.substr(0, f.rfind("-d"));
    const std::string base = shared + "/fixtures/" + name;
    if (!std::ifstream(base + ".gguf")) {
      std::printf("[ fixture  ] %s: no %s.gguf, skipped\n", f.c_str(), base.c_str());
      continue;
    }
    SCOPED_TRACE(f);
    Reference ref = readFixtureReference(base);
    ASSERT_TRUE(ref.ok) << ref.error;
    ASSERT_GT(ref.strictPrefix, 0) << "the reference names no strictly comparable greedy tokens";
    auto plan = loadPlan(dir + "/" + f);
    ASSERT_TRUE(plan) << plan.message();
    SessionOptions o;
    o.threads = 4;
    o.ctxSize = 64;
    o.ggufPath = base + ".gguf";
    cuda::CudaOptions co;
    co.gpus = {0};
    auto gpu = tpc::rt::test::openCuda(*plan, o, co);
    ASSERT_TRUE(gpu) << gpu.message();
    auto cpu = Session::open(*plan, o);
    ASSERT_TRUE(cpu) << cpu.message();
    auto got = tpc::test::teacherForced(**gpu, ref);
    ASSERT_TRUE(got) << got.message();
    auto want = tpc::test::teacherForced(**cpu, ref);
    ASSERT_TRUE(want) << want.message();

    const ::testing::AssertionResult vsRef = tpc::test::matchesReference(*got, ref);
    EXPECT_TRUE(vsRef) << "CUDA vs reference";
    Reference onCpu = ref; // the CPU's logits in the reference's place: the same tolerances and greedy ids
    onCpu.logits = *want;
    const ::testing::AssertionResult vsCpu = tpc::test::matchesReference(*got, onCpu);
    EXPECT_TRUE(vsCpu) << "CUDA vs CPU on the same plan";
    ++compared;
    std::printf("[ fixture  ] %s devices=%zu cuda: %s; cpu: %s; cuda-cpu: %s; %d greedy ids checked\n",
                f.c_str(), plan->devices.size(), vsRef.message(),
                tpc::test::matchesReference(*want, ref).message(), vsCpu.message(), ref.strictPrefix);

    // Three sequences in one session (the multi-sequence paths of `tpc serve`): sequence 0 against the
    // reference, every sequence against the CPU running the same batches. Needs plans of max batch 36.
    if (plan->model.maxBatch < 3 * int64_t(ref.prompt.size()))
      continue;
    o.sequences = 3;
    auto gpu3 = tpc::rt::test::openCuda(*plan, o, co);
    ASSERT_TRUE(gpu3) << gpu3.message();
    auto cpu3 = Session::open(*plan, o);
    ASSERT_TRUE(cpu3) << cpu3.message();
    auto got3 = teacherForcedTogether(**gpu3, ref, 3);
    ASSERT_TRUE(got3) << got3.message();
    auto want3 = teacherForcedTogether(**cpu3, ref, 3);
    ASSERT_TRUE(want3) << want3.message();
    EXPECT_TRUE(tpc::test::matchesReference((*got3)[0], ref)) << "CUDA, 3 sequences: sequence 0 vs reference";
    for (int q = 0; q < 3; ++q) {
      Reference cpuRows = ref;
      cpuRows.logits = (*want3)[q];
      cpuRows.strictPrefix = q == 0 ? ref.strictPrefix : 0; // the other texts' greedy ids are not the reference's
      const ::testing::AssertionResult r = tpc::test::matchesReference((*got3)[q], cpuRows);
      EXPECT_TRUE(r) << "CUDA vs CPU, 3 sequences: sequence " << q;
      std::printf("[ fixture  ] %s 3 sequences, sequence %d cuda-cpu: %s\n", f.c_str(), q, r.message());
    }
  }
  EXPECT_GT(compared, 0) << "no fixture plan was compared (" << plans.size() << " plan files in " << dir
                         << ")";
}

} // namespace
