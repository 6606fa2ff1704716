//===- StagesTest.cpp - pipeline plans against one-stage plans on the fixtures ------===//
//
// `tpc compile --devices 2N --stages 2` runs the layers of the `--devices N` plan on two groups of N
// devices, handing the hidden state from one to the other (and the logits back). Nothing inside a stage
// changes, so the pipeline plan must compute the one-stage plan's function: teacher-forced on each shared
// fixture at N = 1 and 2 (2 and 4 devices in one process), its logits are held to the N-vs-1 bound of
// FidelityTest.cpp (1e-4 of the logits' scale for F32 weights, the fixture's tolerance for quantized ones,
// where a rounding flip of an 8-bit activation is allowed) against the one-stage plan, and to the
// reference's tolerances against the reference. The pipeline cuts the prompt into micro-batches, so its
// kernels see fewer rows per call: the bound is the claim the plans make. Skips without ../shared.
//===----------------------------------------------------------------------===//
#include "test/common/FixtureCheck.h"
#include "test/common/FixtureReference.h"
#include "test/e2e/E2EPlans.h"

#include "runtime/exec/Session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace {

struct StageCase {
  std::string model;
  int perStage; ///< devices per stage; the pipeline plan has 2 x perStage
};

void PrintTo(const StageCase &c, std::ostream *os) { *os << c.model << " 2 stages x " << c.perStage; }

class Stages : public ::testing::TestWithParam<StageCase> {};

TEST_P(Stages, EqualTheOneStagePlan) {
  const StageCase &c = GetParam();
  const tpc::test::FixtureFiles files = tpc::test::fixtureFiles(c.model);
  if (files.gguf.empty())
    GTEST_SKIP() << files.skip;
  const std::string &dir = files.dir, &gguf = files.gguf;
  const tpc::test::FixtureReference ref = tpc::test::readFixtureReference(dir + "/" + c.model);
  ASSERT_TRUE(ref.ok) << ref.error;
  const std::string what = c.model + " 2 stages x " + std::to_string(c.perStage);

  const std::string one = tpc::test::compileFixturePlan(gguf, c.perStage, "", "stages-one");
  const std::string two = tpc::test::compileFixturePlan(gguf, 2 * c.perStage, "", "stages-two", "--stages 2");
  ASSERT_FALSE(one.empty() || two.empty());
  auto plan = tpc::rt::loadPlan(two);
  ASSERT_TRUE(plan) << plan.message();
  ASSERT_EQ(plan->stages, 2u) << what;
  ASSERT_EQ(plan->devices.size(), size_t(2 * c.perStage)) << what;

  const std::vector<float> base = tpc::test::teacherForcedLogits(one, ref);
  const std::vector<float> got = tpc::test::teacherForcedLogits(two, ref);
  ASSERT_FALSE(base.empty() || got.empty()) << what;
  const double scale = tpc::test::maxAbsValue(base);
  const double bound = ref.f32 ? 1e-4 * std::max(1.0, scale) : ref.tolMax;
  // The pipeline runs the prompt as micro-batches (one per stage), so the kernels see fewer rows per call
  // than the one-stage plan's: the N-vs-1 situation. tiny-gemma4moe turns such 1e-7 differences into f16
  // cache ulps (FidelityTest.cpp): with f16 caches it is held to the reference tolerance, with f32 caches
  // to the F32 bound like every F32 model.
  const bool f16CacheFlips = c.model == "tiny-gemma4moe";
  ::testing::AssertionResult vsOne = tpc::test::allWithin(got, base, f16CacheFlips ? ref.tolMax : bound);
  EXPECT_TRUE(vsOne) << what << " vs the one-stage plan";
  std::printf("[ stages   ] %s vs --stages 1: %s\n", what.c_str(), vsOne.message());
  if (ref.f32) {
    ::testing::AssertionResult vsOne32 =
        tpc::test::allWithin(tpc::test::teacherForcedLogits(two, ref, true),
                             tpc::test::teacherForcedLogits(one, ref, true), bound);
    EXPECT_TRUE(vsOne32) << what << " vs the one-stage plan, f32 KV caches";
    std::printf("[ stages   ] %s vs --stages 1, f32 KV caches: %s\n", what.c_str(), vsOne32.message());
  }
  // tiny-glm4moe-Q4_K_M's row 7 is a router near-tie the reference decides the other way (FidelityTest);
  // the one-stage plan carries the reference check there.
  if (c.model != "tiny-glm4moe-Q4_K_M") {
    ::testing::AssertionResult vsRef = tpc::test::matchesReference(got, ref);
    EXPECT_TRUE(vsRef) << what;
    std::printf("[ stages   ] %s vs reference: %s\n", what.c_str(), vsRef.message());
  }
  std::remove(one.c_str());
  std::remove(two.c_str());
}

/// Logits of `batches` run one evaluate() each on a session of `planPath` (every token's row).
std::vector<float> runBatches(const std::string &planPath,
                              const std::vector<std::vector<tpc::rt::BatchToken>> &batches, int microBatches,
                              int *sendsOnDevice0 = nullptr) {
  auto plan = tpc::rt::loadPlan(planPath);
  EXPECT_TRUE(plan) << plan.message();
  if (!plan)
    return {};
  tpc::rt::SessionOptions o;
  o.threads = 4;
  o.ctxSize = 64;
  o.sequences = 3;
  o.microBatches = microBatches;
  if (sendsOnDevice0) { // counts the hand-overs (the observer runs on each device's own thread)
    *sendsOnDevice0 = 0;
    o.stepObserver = [sendsOnDevice0](int d, size_t, const tpc::rt::Step &st, const auto &, const auto &) {
      if (d == 0 && st.op == tpc::rt::OpKind::Send)
        ++*sendsOnDevice0;
    };
  }
  auto s = tpc::rt::Session::open(std::move(*plan), o);
  EXPECT_TRUE(s) << s.message();
  if (!s)
    return {};
  std::vector<float> all;
  for (const auto &b : batches) {
    auto got = (*s)->evaluate(b);
    EXPECT_TRUE(got) << got.message();
    if (!got)
      return {};
    all.insert(all.end(), got->begin(), got->end());
  }
  return all;
}

// Micro-batches (SessionOptions::microBatches): a call cut into 2 runs as two calls would, stage 1 on the
// first half while stage 0 runs the second. So a 12-token prompt through the pipeline in 2 micro-batches
// gives, bit for bit, what the one-stage plan gives on the two halves as two calls; and 3 sequences'
// batched decode step (one token each) in 2 micro-batches what it gives on them one call after the other
// ({seq 0}, {seq 1, seq 2}), and without micro-batches the same numbers up to the kernels' row blocking.
TEST(StagesMicroBatches, AreTheCallCutInTwo) {
  const char *shared = std::getenv("TPC_SHARED_DIR");
  const std::string gguf = shared ? std::string(shared) + "/fixtures/tiny-llama.gguf" : "";
  if (!shared || !std::ifstream(gguf))
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures/tiny-llama.gguf not found; set TPC_SHARED_DIR to ../shared";
  const std::string one = tpc::test::compileFixturePlan(gguf, 2, "", "micro-one");
  const std::string two = tpc::test::compileFixturePlan(gguf, 4, "", "micro-two", "--stages 2");
  ASSERT_FALSE(one.empty() || two.empty());
  const std::vector<int32_t> ids = {1, 313, 421, 426, 263, 283, 278, 307, 461, 443, 286, 424};
  // Three sequences: prompts of 12, 5 and 7 tokens; sequence 0's as 2 halves where it runs as 2 calls.
  std::vector<tpc::rt::BatchToken> prompt, half1, half2, prompts12;
  for (int32_t p = 0; p < 12; ++p)
    (p < 6 ? half1 : half2).push_back({ids[size_t(p)], p, 0, true}),
        prompt.push_back({ids[size_t(p)], p, 0, true});
  std::vector<tpc::rt::BatchToken> seq1, seq2;
  for (int32_t p = 0; p < 5; ++p)
    seq1.push_back({ids[size_t(p + 3)], p, 1, true});
  for (int32_t p = 0; p < 7; ++p)
    seq2.push_back({ids[size_t(p + 1)], p, 2, true});
  const std::vector<tpc::rt::BatchToken> step = {{7, 12, 0, true}, {9, 5, 1, true}, {11, 7, 2, true}};
  const std::vector<float> base =
      runBatches(one, {half1, half2, seq1, seq2, {step[0]}, {step[1], step[2]}}, 1);
  const std::vector<float> micro = runBatches(two, {prompt, seq1, seq2, step}, 2);
  ASSERT_FALSE(base.empty() || micro.empty());
  ::testing::AssertionResult same = tpc::test::allWithin(micro, base, 0.0);
  EXPECT_TRUE(same) << "2 micro-batches vs two calls of the one-stage plan";
  std::printf("[ stages   ] tiny-llama 2 stages x 2, 2 micro-batches vs two calls: %s\n", same.message());
  // No micro-batches: one call per batch; the same function (summation order inside a kernel may differ
  // with the rows per call, so held to the N-vs-1 bound).
  const std::vector<float> whole = runBatches(two, {prompt, seq1, seq2, step}, 1);
  const double scale = tpc::test::maxAbsValue(base);
  ::testing::AssertionResult close = tpc::test::allWithin(micro, whole, 1e-4 * std::max(1.0, scale));
  EXPECT_TRUE(close) << "2 micro-batches vs one call";
  // Each call of 2 or more tokens was cut: device 0 handed on 2 micro-batches per call (4 calls).
  int sends = 0;
  ASSERT_FALSE(runBatches(two, {prompt, seq1, seq2, step}, 2, &sends).empty());
  EXPECT_EQ(sends, 8);
  ASSERT_FALSE(runBatches(two, {prompt, seq1, seq2, step}, 1, &sends).empty());
  EXPECT_EQ(sends, 4);
  std::remove(one.c_str());
  std::remove(two.c_str());
}

std::vector<StageCase> stageCases() {
  std::vector<StageCase> all;
  for (const char *m :
       {"tiny-llama", "tiny-llama-Q4_K_M", "tiny-qwen3", "tiny-qwen3moe-Q4_K_M", "tiny-gemma3",
        "tiny-gemma4moe", "tiny-qwen35moe", "tiny-qwen35", "tiny-glm4moe-Q4_K_M", "tiny-gptoss"})
    for (int per : {1, 2})
      all.push_back({m, per});
  return all;
}

std::string stageCaseName(const ::testing::TestParamInfo<StageCase> &i) {
  std::string s = i.param.model + "_x" + std::to_string(i.param.perStage);
  std::replace_if(
      s.begin(), s.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
  return s;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Stages, ::testing::ValuesIn(stageCases()), stageCaseName);

} // namespace
