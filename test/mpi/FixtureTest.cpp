//===- FixtureTest.cpp - the fixture plans run as MPI ranks -------------------===//
//
// Runs as every rank of `mpirun -np N` (ctest: N = 2 with plans split evenly, N = 3 with --tensor-split
// 3,2,1; over shared memory and over TCP). For every shared fixture, each rank opens plan device `rank`
// of the N-device plan (written by make-plans.sh into $TPC_MPI_PLANS) with the MPI communicator and runs
// the fixture teacher-forced (test/common/FixtureCheck.h: the prompt as one batch, then each reference
// greedy id). Rank 0, which holds the logits, checks them against the reference (the fixture's
// tolerances and greedy prefix) and against the same plan run in one process (every device, one thread
// each, as each rank has): within the N-vs-1 bound of the end-to-end tests, the same argmax in every row,
// and, since the MPI all-reduce sums in rank order like the in-process one, the same bits; with bf16
// all-reduce payloads too.
//===----------------------------------------------------------------------===//
#include "test/mpi/MpiTestUtil.h"

#include "runtime/comm/MpiCommunicator.h"
#include "runtime/exec/Session.h"
#include "runtime/plan/PlanIO.h"

#include "test/common/FixtureCheck.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <optional>

using namespace tpc;
using namespace tpc::rt;

namespace {

/// Opens `planPath` on the CPU backend: plan device `rank` over `comm`, or every device when comm is null.
/// `wire`: the all-reduce payload instead of the plan's (SessionOptions::commDtype).
Expected<std::unique_ptr<Session>> openPlan(const std::string &planPath, std::shared_ptr<comm::Communicator> comm,
                                            int rank, int threads, std::optional<CommDtype> wire = std::nullopt) {
  auto plan = loadPlan(planPath);
  if (!plan)
    return Error{plan.message()};
  SessionOptions o;
  o.threads = threads;
  o.ctxSize = 64;
  o.commDtype = wire;
  if (comm) {
    o.devices = {rank};
    o.comm = std::move(comm);
  }
  return Session::open(plan.take(), o, "cpu");
}

class MpiFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(MpiFixture, MatchesTheReferenceAndTheInProcessRun) {
  auto world = tpc::test::testWorld();
  const int n = world->size(), me = world->rank();
  const std::string model = GetParam();
  const char *shared = std::getenv("TPC_SHARED_DIR"), *plans = std::getenv("TPC_MPI_PLANS");
  const std::string dir = shared ? std::string(shared) + "/fixtures" : "";
  if (!shared || !std::ifstream(dir + "/" + model + ".gguf")) // the same files on every rank: all skip
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures/" << model << ".gguf not found; set TPC_SHARED_DIR to ../shared";
  ASSERT_NE(plans, nullptr) << "TPC_MPI_PLANS (make-plans.sh's folder) is not set";
  const std::string plan = std::string(plans) + "/" + model + "-d" + std::to_string(n) + ".plan";
  const test::FixtureReference ref = test::readFixtureReference(dir + "/" + model);
  ASSERT_TRUE(ref.ok) << ref.error;

  // Every rank opens its device; a failure anywhere fails every rank (nobody enters a collective alone).
  auto session = openPlan(plan, std::make_shared<comm::MpiCommunicator>(world), me, 1);
  auto opened = world->allGather(session ? "" : session.message());
  ASSERT_TRUE(opened) << opened.message();
  for (int r = 0; r < n; ++r)
    ASSERT_EQ((*opened)[r], "") << "rank " << r << " could not open " << plan;
  EXPECT_EQ((*session)->devices(), std::vector<int>{me});

  auto got = test::teacherForced(**session, ref);
  ASSERT_TRUE(got) << got.message();
  if (me != 0) {
    EXPECT_TRUE(got->empty()) << "only the rank running device 0 returns logits";
    return;
  }
  std::vector<float> checked = *got;
  test::exemptKnownRows(model, checked, ref);
  ::testing::AssertionResult vsRef = test::matchesReference(checked, ref);
  EXPECT_TRUE(vsRef) << model << " on " << n << " ranks";
  std::printf("[ mpi      ] %s, %d ranks: %s\n", model.c_str(), n, vsRef.message());

  auto one = openPlan(plan, nullptr, 0, n); // the same plan in one process, one thread per device
  ASSERT_TRUE(one) << one.message();
  auto base = test::teacherForced(**one, ref);
  ASSERT_TRUE(base) << base.message();
  const double scale = test::maxAbsValue(*base);
  const double bound = ref.f32 ? 1e-4 * std::max(1.0, scale) : ref.tolMax; // test/e2e's N-vs-1 bound
  ::testing::AssertionResult vsInProcess = test::allWithin(*got, *base, bound);
  EXPECT_TRUE(vsInProcess) << model << ": " << n << " MPI ranks vs one process";
  const bool sameBits = test::sameBits(*got, *base);
  EXPECT_TRUE(sameBits) << model << ": the rank-order all-reduce should give the in-process bits";
  for (size_t row = 0; row < ref.rows(); ++row)
    EXPECT_EQ(test::argmaxRow(&(*got)[row * ref.nVocab], ref.nVocab),
              test::argmaxRow(&(*base)[row * ref.nVocab], ref.nVocab))
        << model << ": greedy id of row " << row;
  std::printf("[ mpi      ] %s, %d ranks vs in-process: %s%s\n", model.c_str(), n, vsInProcess.message(),
              sameBits ? ", bit for bit" : "");
}

// bf16 all-reduce payloads (Bf16Wire.h): the MPI ranks and the in-process run of the same plan give the
// same bits (both sum the bf16 addends in f32 in rank order; in-process prefill takes SharedReduceNorm's
// path, the ranks the composition's), within the fixture's tolerance of the reference, and not the bits of
// the f32 payloads. A few fixtures (dense, quantized, MoE, sliding window) keep the job short.
TEST_P(MpiFixture, Bf16PayloadsGiveTheInProcessBits) {
  auto world = tpc::test::testWorld();
  const int n = world->size(), me = world->rank();
  const std::string model = GetParam();
  if (model != "tiny-llama" && model != "tiny-llama-Q4_K_M" && model != "tiny-qwen3moe" && model != "tiny-gemma3")
    GTEST_SKIP() << "bf16 payloads are checked on tiny-llama, tiny-llama-Q4_K_M, tiny-qwen3moe, tiny-gemma3";
  const char *shared = std::getenv("TPC_SHARED_DIR"), *plans = std::getenv("TPC_MPI_PLANS");
  const std::string dir = shared ? std::string(shared) + "/fixtures" : "";
  if (!shared || !std::ifstream(dir + "/" + model + ".gguf"))
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures/" << model << ".gguf not found; set TPC_SHARED_DIR to ../shared";
  ASSERT_NE(plans, nullptr) << "TPC_MPI_PLANS (make-plans.sh's folder) is not set";
  const std::string plan = std::string(plans) + "/" + model + "-d" + std::to_string(n) + ".plan";
  const test::FixtureReference ref = test::readFixtureReference(dir + "/" + model);
  ASSERT_TRUE(ref.ok) << ref.error;

  auto session = openPlan(plan, std::make_shared<comm::MpiCommunicator>(world), me, 1, CommDtype::BF16);
  auto opened = world->allGather(session ? "" : session.message());
  ASSERT_TRUE(opened) << opened.message();
  for (int r = 0; r < n; ++r)
    ASSERT_EQ((*opened)[r], "") << "rank " << r << " could not open " << plan;
  auto got = test::teacherForced(**session, ref);
  ASSERT_TRUE(got) << got.message();
  if (me != 0)
    return;
  auto one = openPlan(plan, nullptr, 0, n, CommDtype::BF16);
  ASSERT_TRUE(one) << one.message();
  auto base = test::teacherForced(**one, ref);
  ASSERT_TRUE(base) << base.message();
  const double scale = test::maxAbsValue(*base);
  const int allReduces = test::allReduceSteps((*one)->plan().devices[0]);
  // The reference's tolerance plus the bf16 bound (test/e2e/CommDtypeTest.cpp says why).
  ::testing::AssertionResult vsRef =
      test::matchesReference(*got, test::widenedForBf16(ref, test::bf16PayloadBound(allReduces, scale)));
  EXPECT_TRUE(vsRef) << model << " on " << n << " ranks, bf16 payloads";
  const bool sameBits = test::sameBits(*got, *base);
  EXPECT_TRUE(sameBits) << model << ": bf16 payloads over MPI should give the in-process bits";
  auto f32 = openPlan(plan, nullptr, 0, n, CommDtype::F32);
  ASSERT_TRUE(f32) << f32.message();
  auto base32 = test::teacherForced(**f32, ref);
  ASSERT_TRUE(base32) << base32.message();
  EXPECT_NE(*base32, *base) << model << ": bf16 payloads changed nothing";
  std::printf("[ mpi      ] %s, %d ranks, bf16 payloads: %s%s\n", model.c_str(), n, vsRef.message(),
              sameBits ? ", in-process bits" : "");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MpiFixture,
                         ::testing::Values("tiny-llama", "tiny-llama-Q8_0", "tiny-llama-Q4_K_M", "tiny-qwen3",
                                           "tiny-qwen3moe", "tiny-qwen3moe-Q8_0", "tiny-qwen3moe-Q4_K_M",
                                           "tiny-qwen3moe-gu", "tiny-gemma4moe", "tiny-gemma3", "tiny-qwen35moe",
                                           "tiny-qwen35moe-Q4_K_M", "tiny-qwen35",
                                           "tiny-glm4moe", "tiny-gptoss"),
                         [](const auto &info) {
                           std::string n = info.param;
                           for (char &c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c)))
                               c = '_';
                           return n;
                         });

} // namespace
