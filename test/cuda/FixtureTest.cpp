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
// Plans of max batch 33 or more (the hand-built ones are written with 64) also run three sequences in one
// session, each reading the reference text on its own schedule (teacherForcedTogether: tensor-core
// prefill attention, the MoE tile GEMM, batched decode GEMVs, a graph per batch shape), each against the
// reference and against the CPU on the same batches.
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

/// teacherForced for several sequences in one session, every one reading the reference text (prompt, then
/// the greedy ids) on its own schedule: sequence q reads the first starts[q] tokens in one batch with the
/// others' (interleaved, every row asked for: 12 + 10 + 11 tokens run the tensor-core prefill attention
/// and, on the MoE fixtures, the tile GEMM), then one token per step until its text is read (batched
/// decode steps of 3, then 2, then 1 sequences: the batched GEMVs and a graph per shape). Each sequence's
/// rows then equal teacherForced's, so each is held to the reference, while the sequences sit at other
/// positions in every call (a read of another sequence's cache shows). Returns each sequence's rows.
Expected<std::vector<std::vector<float>>> teacherForcedTogether(Session &s, const Reference &ref,
                                                                const std::vector<int32_t> &starts) {
  std::vector<int32_t> text = ref.prompt;
  text.insert(text.end(), ref.greedy.begin(), ref.greedy.end());
  const size_t seqs = starts.size(), v = size_t(ref.nVocab), total = text.size();
  std::vector<std::vector<float>> out(seqs);
  std::vector<size_t> next(seqs, 0);
  std::vector<BatchToken> batch;
  std::vector<size_t> owner;
  for (int32_t i = 0;; ++i) { // the first batch: round robin over the sequences' starts
    bool any = false;
    for (size_t q = 0; q < seqs; ++q)
      if (i < starts[q]) {
        batch.push_back({text[i], i, int32_t(q), true});
        owner.push_back(q);
        next[q] = size_t(i) + 1;
        any = true;
      }
    if (!any)
      break;
  }
  for (;;) {
    auto rows = s.evaluate(batch);
    if (!rows)
      return Error{rows.message()};
    for (size_t i = 0; i < batch.size(); ++i)
      out[owner[i]].insert(out[owner[i]].end(), rows->begin() + i * v, rows->begin() + (i + 1) * v);
    batch.clear();
    owner.clear();
    for (size_t q = 0; q < seqs; ++q)
      if (next[q] < total) {
        batch.push_back({text[next[q]], int32_t(next[q]), int32_t(q), true});
        owner.push_back(q);
        ++next[q];
      }
    if (batch.empty())
      return out;
  }
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
    auto plan = loadPlan(dir + "/" + f);
    ASSERT_TRUE(plan) << plan.message();
    SessionOptions o;
    o.threads = 4;
    o.ctxSize = 64;
    o.ggufPath = base + ".gguf";
    cuda::CudaOptions co;
    co.gpus = {0};
    // The backend's A/B switches (CudaBackend.cpp), so a failing fixture can be rerun without one path.
    co.fuse = !std::getenv("TPC_CUDA_NO_FUSE");
    co.graphs = !std::getenv("TPC_CUDA_NO_GRAPHS");
    auto gpu = tpc::rt::test::openCuda(*plan, o, co);
    ASSERT_TRUE(gpu) << gpu.message();
    auto cpu = Session::open(*plan, o);
    ASSERT_TRUE(cpu) << cpu.message();
    auto got = tpc::test::teacherForced(**gpu, ref);
    ASSERT_TRUE(got) << got.message();
    auto want = tpc::test::teacherForced(**cpu, ref);
    ASSERT_TRUE(want) << want.message();
    tpc::test::exemptKnownRows(name, *want, ref);

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

    // Three sequences in one session (the multi-sequence paths of `tpc serve`), each against the reference
    // and against the CPU running the same batches. Needs plans of max batch 33 or more.
    const std::vector<int32_t> starts = {int32_t(ref.prompt.size()), int32_t(ref.prompt.size()) - 2,
                                         int32_t(ref.prompt.size()) - 1};
    if (plan->model.maxBatch < starts[0] + starts[1] + starts[2])
      continue;
    o.sequences = 3;
    auto gpu3 = tpc::rt::test::openCuda(*plan, o, co);
    ASSERT_TRUE(gpu3) << gpu3.message();
    auto cpu3 = Session::open(*plan, o);
    ASSERT_TRUE(cpu3) << cpu3.message();
    auto got3 = teacherForcedTogether(**gpu3, ref, starts);
    ASSERT_TRUE(got3) << got3.message();
    auto want3 = teacherForcedTogether(**cpu3, ref, starts);
    ASSERT_TRUE(want3) << want3.message();
    for (size_t q = 0; q < starts.size(); ++q) {
      const ::testing::AssertionResult r = tpc::test::matchesReference((*got3)[q], ref);
      EXPECT_TRUE(r) << "CUDA, 3 sequences: sequence " << q << " vs reference";
      Reference cpuRows = ref;
      cpuRows.logits = (*want3)[q];
      tpc::test::exemptKnownRows(name, cpuRows.logits, ref);
      const ::testing::AssertionResult c = tpc::test::matchesReference((*got3)[q], cpuRows);
      EXPECT_TRUE(c) << "CUDA vs CPU, 3 sequences: sequence " << q;
      std::printf("[ fixture  ] %s 3 sequences, sequence %zu cuda: %s; cuda-cpu: %s\n", f.c_str(), q,
                  r.message(), c.message());
    }
  }
  EXPECT_GT(compared, 0) << "no fixture plan was compared (" << plans.size() << " plan files in " << dir
                         << ")";
}

} // namespace
