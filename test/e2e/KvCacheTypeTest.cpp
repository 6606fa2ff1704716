//===- KvCacheTypeTest.cpp - the fixtures with q8_0 / q4_0 KV caches ---------===//
//
// `tpc compile -ctk/-ctv` on the shared fixtures at 1, 2 and 3 (3,2,1) devices, evaluated teacher-forced
// (test/common/FixtureCheck.h) beside the same plan compiled with the default f16 caches and run with f32
// caches (SessionOptions::f32KvCache: the cache without rounding).
//
// What is compared with what: this machine has no reference-engine binary that dumps logits with a q8_0
// cache (no llama-perplexity in the reference build; the fixtures' logits were made with f16 caches), so
// the check is against our own runs, with bounds derived from the formats:
//  - A cache's rounding perturbs the logits, to first order, in proportion to the rounding error of the
//    K/V values. f16 rounds a value x to within 2^-11 |x| (uniform: rms ~ 2^-11 |x| / sqrt(3)); q8_0 to
//    within half a step of amax / 127 (uniform: rms = amax / (127 sqrt(12)) = amax / 440), amax the largest
//    |x| of the value's block of 32. With mean |x| ~ 0.8 rms and amax ~ 2.5 rms for 32 values of a
//    roughly normal head row, q8_0's error is ~ (2.5 / 440) / (0.8 * 2^-11 / 1.73) = 24 times f16's.
//    So e(q8_0) <= 60 e(f16), e = rms of the logits' difference from the f32-cache run (a factor 2.5 of
//    margin for rows with larger amax / rms: outlier channels, k-norms), and e(q8_0) > 2 e(f16): a cache
//    that was not quantized fails that. Measured on the F32 fixtures: 25 to 32 times.
//  - q4_0's step is amax / 8 (the signed max maps to -8), 127 / 8 = 16 times q8_0's: e(q4_0) <= 16 x 60
//    e(f16) and e(q4_0) > e(q8_0). First order holds less well there (measured 16 to 21 times q8_0's), so
//    every fixture also holds e(q4_0) <= 32 e(q8_0), twice the step ratio.
//  - Against the reference's logits (f16 caches): rms(q8 - ref) <= rms(q8 - f32) + rms(f32 - ref) (the
//    triangle inequality), the first at most 60 e(f16), the second within the fixture's tol_rms; and
//    max |q8 - ref| <= tol_max_abs + 8 x 60 e(f16) (8: the largest |d| of the ~14k logits of a roughly
//    normal difference is ~4 rms; measured 4.7 to 6.1).
//  - Quantized weights (ref.f32 false): the CPU path quantizes activations to 8 bits before each matmul,
//    and a different cache rounding flips some of those roundings, so e(f16) is that noise (0.016 on
//    tiny-llama-Q8_0, 50 times an F32 fixture's) and the first-order bounds say nothing. There q8_0 must
//    meet the fixture's own tolerances against the reference (sized for that activation noise), and q4_0
//    the step-ratio bound above.
//  - Splits: each device quantizes whole rows of its own KV heads (blocks lie inside a head), so a split
//    q8_0 plan stores the values one device stores up to the summation order of K and V, whose 1e-7
//    changes flip a rounding now and then (see the bound at the check).
// Cases also cover the sliding-window rings (gemma3, gemma4), recurrent layers beside quantized attention
// caches (qwen35moe: its DeltaNet states stay f32), sinks (gpt-oss), and host-placed caches
// (--no-kv-offload).
//===----------------------------------------------------------------------===//
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanIO.h"

#include "test/common/FixtureCheck.h"
#include "test/e2e/E2EPlans.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace tpc::rt;

namespace {

using Reference = tpc::test::FixtureReference;

const std::string &kTpc = tpc::test::tpcBinary();

struct Case {
  std::string model;
  int devices;
  std::string split; ///< --tensor-split, empty: equal
  std::string flags; ///< further compile flags
};

void PrintTo(const Case &c, std::ostream *os) {
  *os << c.model << " devices=" << c.devices << (c.split.empty() ? "" : " split " + c.split) << " "
      << c.flags;
}

std::string compile(const std::string &gguf, const Case &c, const std::string &cacheFlags,
                    const std::string &tag) {
  return tpc::test::compileFixturePlan(gguf, c.devices, c.split, "kvq-" + tag, cacheFlags + " " + c.flags);
}

std::vector<float> evaluate(const std::string &planPath, const Reference &ref, bool f32Kv = false) {
  return tpc::test::teacherForcedLogits(planPath, ref, f32Kv);
}

/// rms of a - b (sizes equal, asserted by the caller).
double rmsDiff(const std::vector<float> &a, const std::vector<float> &b) {
  double sq = 0;
  for (size_t i = 0; i < a.size(); ++i)
    sq += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return a.empty() ? 0 : std::sqrt(sq / double(a.size()));
}

class KvCacheTypes : public ::testing::TestWithParam<Case> {};

TEST_P(KvCacheTypes, Q8AndQ4WithinTheirBounds) {
  const Case &c = GetParam();
  const tpc::test::FixtureFiles files = tpc::test::fixtureFiles(c.model);
  if (files.gguf.empty())
    GTEST_SKIP() << files.skip;
  const std::string &dir = files.dir, &gguf = files.gguf;
  ASSERT_EQ(::access(kTpc.c_str(), X_OK), 0) << kTpc << " not built";
  const Reference ref = tpc::test::readFixtureReference(dir + "/" + c.model);
  ASSERT_TRUE(ref.ok) << ref.error;
  std::ostringstream whatStream;
  PrintTo(c, &whatStream);
  const std::string what = whatStream.str();

  const std::string f16 = compile(gguf, c, "", "f16"), q8 = compile(gguf, c, "-ctk q8_0 -ctv q8_0", "q8");
  const std::string q4 = compile(gguf, c, "--cache-type-k q4_0 --cache-type-v q4_0", "q4");
  ASSERT_FALSE(f16.empty() || q8.empty() || q4.empty());
  const std::vector<float> exact = evaluate(f16, ref, /*f32Kv=*/true), half = evaluate(f16, ref);
  const std::vector<float> got8 = evaluate(q8, ref), got4 = evaluate(q4, ref);
  ASSERT_TRUE(exact.size() == ref.logits.size() && half.size() == exact.size() &&
              got8.size() == exact.size() && got4.size() == exact.size())
      << what;
  const double e16 = rmsDiff(half, exact), e8 = rmsDiff(got8, exact), e4 = rmsDiff(got4, exact);
  std::printf("[ kv types ] %s: rms vs f32 caches: f16 %.3g, q8_0 %.3g (%.1fx), q4_0 %.3g (%.1fx)\n",
              what.c_str(), e16, e8, e8 / e16, e4, e4 / e16);
  EXPECT_GT(e16, 0) << what << ": f32KvCache changed nothing";
  EXPECT_LE(e4, 32 * e8) << what << ": q4_0 caches against q8_0's";
  EXPECT_GT(e4, e8) << what << ": q4_0 moved the logits less than q8_0";
  if (ref.f32) {
    EXPECT_LE(e8, 60 * e16) << what << ": q8_0 caches";
    EXPECT_GT(e8, 2 * e16) << what << ": q8_0 moved the logits no more than f16 (is the cache quantized?)";
    EXPECT_LE(e4, 16 * 60 * e16) << what << ": q4_0 caches";
    const double vsRefRms = rmsDiff(got8, ref.logits);
    EXPECT_LE(vsRefRms, ref.tolRms + 60 * e16) << what << ": q8_0 caches vs the reference, rms";
    ::testing::AssertionResult vsRef = tpc::test::allWithin(got8, ref.logits, ref.tolMax + 8 * 60 * e16);
    EXPECT_TRUE(vsRef) << what << ": q8_0 caches vs the reference, max";
    std::printf("[ kv types ] %s: q8_0 vs reference rms %.3g (bound %.3g), %s\n", what.c_str(), vsRefRms,
                ref.tolRms + 60 * e16, vsRef.message());
  } else {
    ::testing::AssertionResult vsRef = tpc::test::matchesReference(got8, ref);
    EXPECT_TRUE(vsRef) << what << ": q8_0 caches vs the reference (f16 caches)";
    std::printf("[ kv types ] %s: q8_0 vs reference %s\n", what.c_str(), vsRef.message());
  }
  if (c.devices > 1) { // the one-device q8_0 plan: the same stored values, another summation order
    Case one = c;
    one.devices = 1, one.split.clear();
    const std::string q8one = compile(gguf, one, "-ctk q8_0 -ctv q8_0", "q8one");
    ASSERT_FALSE(q8one.empty());
    const std::vector<float> one8 = evaluate(q8one, ref);
    double scale = 0;
    for (float v : one8)
      scale = std::max(scale, std::fabs(double(v)));
    // FidelityTest holds an F32 fixture's split to 1e-4 of the logit scale (summation order, f32 caches);
    // with a rounding cache that order now and then flips a rounding, which moves one value by a step:
    // q8_0's is up to 60 times f16's (the bound above), so 60 times FidelityTest's bound (tiny-gemma4moe,
    // the most sensitive: 0.0105). Quantized weights: the fixture's tolerance, as in FidelityTest.
    const double bound = ref.f32 ? 60 * 1e-4 * std::max(1.0, scale) : ref.tolMax;
    ::testing::AssertionResult vsOne = tpc::test::allWithin(got8, one8, bound);
    EXPECT_TRUE(vsOne) << what << ": q8_0 vs devices=1";
    std::remove(q8one.c_str());
  }
  for (const std::string &p : {f16, q8, q4})
    std::remove(p.c_str());
}

/// "Final estimate: PPL = X" of `tpc perplexity`'s output, or NaN.
double finalPpl(const std::string &out) {
  const std::string key = "Final estimate: PPL = ";
  const size_t at = out.find(key);
  return at == std::string::npos ? NAN : std::atof(out.c_str() + at + key.size());
}

// Gemma 3 270M (Q4_K_M) on the GPL-3 text, 4 chunks of 512 (1020 scored tokens), as llama-perplexity scores
// it: q8_0 caches within 0.5% of f16's perplexity (issue 37), and not equal to it (the caches are
// quantized). Both runs score the same tokens, so the ratio is not the texts' sampling noise but what the
// cache costs (measured: 15.1416 against 15.1390, +0.02%). The model is what `make demo` fetches
// (build/demo/models), or TPC_GEMMA_GGUF; without it, or without the text, the test is skipped.
TEST(KvCacheTypesGemma, Q8PerplexityWithinHalfAPercentOfF16) {
  const char *env = std::getenv("TPC_GEMMA_GGUF");
  const std::string model = env ? env : std::string(TPC_BINARY_DIR) + "/demo/models/gemma-3-270m-q4_k_m.gguf";
  const std::string text = "/usr/share/common-licenses/GPL-3";
  if (!std::ifstream(model))
    GTEST_SKIP() << model << " not found: `make demo` fetches Gemma 3 270M there, or set TPC_GEMMA_GGUF";
  if (!std::ifstream(text))
    GTEST_SKIP() << text << " not found (Debian's base-files has it)";
  ASSERT_EQ(::access(kTpc.c_str(), X_OK), 0) << kTpc << " not built";
  double ppl[2];
  const char *flags[2] = {"", "-ctk q8_0 -ctv q8_0"};
  for (int i = 0; i < 2; ++i) {
    const std::string cmd =
        kTpc + " perplexity " + model + " " + flags[i] + " -f " + text + " -c 512 --chunks 4 -t 2";
    auto [rc, out] = tpc::test::runShell(cmd + " 2>&1");
    ASSERT_EQ(rc, 0) << cmd << "\n" << out;
    ppl[i] = finalPpl(out);
    ASSERT_TRUE(std::isfinite(ppl[i]) && ppl[i] > 1) << cmd << "\n" << out;
  }
  std::printf("[ kv types ] Gemma 3 270M, GPL-3, 4 x 512: PPL f16 %.4f, q8_0 %.4f (%+.3f%%)\n", ppl[0],
              ppl[1], 100 * (ppl[1] / ppl[0] - 1));
  EXPECT_LE(std::fabs(ppl[1] / ppl[0] - 1), 0.005);
  EXPECT_NE(ppl[1], ppl[0]) << "q8_0 caches gave f16's perplexity to 4 decimals: is the cache quantized?";
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char *m : {"tiny-llama", "tiny-llama-Q8_0", "tiny-qwen3", "tiny-gemma3", "tiny-gemma4moe",
                        "tiny-qwen35moe", "tiny-gptoss"}) {
    all.push_back({m, 1, "", ""});
    all.push_back({m, 2, "", ""});
    all.push_back({m, 3, "3,2,1", ""});
  }
  all.push_back({"tiny-llama", 2, "", "--no-kv-offload"}); // host-placed caches
  return all;
}

std::string caseName(const ::testing::TestParamInfo<Case> &i) {
  std::string n =
      i.param.model + "_" + std::to_string(i.param.devices) + (i.param.flags.empty() ? "" : "_nkvo");
  for (char &ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch)))
      ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KvCacheTypes, ::testing::ValuesIn(cases()), caseName);

} // namespace
