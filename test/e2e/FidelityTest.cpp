//===- FidelityTest.cpp - tpc compile + run against the reference logits -----===//
//
// The acceptance test of the device plan path: for every fixture in TPC_SHARED_DIR/fixtures (README
// there), `tpc compile` writes plans for 1, 2 and 3 devices (3 with --tensor-split 3,2,1), and each plan
// is evaluated teacher-forced as the README describes (prompt as one batch, then the 16 greedy ids one at a
// time). Checks (test/common/FixtureCheck.h): all 28 rows, every |d| and rms(d) against the reference
// within the fixture's tolerances, the argmax of every greedy row equal to the reference greedy id for the
// fixture's strict prefix, and for N > 1 the logits equal to the 1-device plan's within a tight bound
// (splits change only the summation order; for F32 fixtures also with f32 KV caches). For the F32 fixture of
// every architecture (on the 2-device plan) and every quantized fixture (on the 1-, 2- and 3-device plans),
// `tpc run --prompt-ids ... --greedy --dump-logits` drives the same check through the CLI, free-running, with
// its generated ids against the reference's. Each (model, devices) is its own ctest test.
//===----------------------------------------------------------------------===//
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanIO.h"

#include "test/common/FixtureCheck.h"
#include "test/e2e/E2EPlans.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <unistd.h>

using namespace tpc::rt;

namespace {

using Reference = tpc::test::FixtureReference;

Reference readReference(const std::string &dir, const std::string &name) {
  return tpc::test::readFixtureReference(dir + "/" + name);
}

const std::string &kTpc = tpc::test::tpcBinary();

/// Compiles `gguf` for `devices` (with `split` as --tensor-split when given) into a temporary plan.
std::string compile(const std::string &gguf, int devices, const std::string &split, const std::string &tag,
                    const std::string &flags = "", int maxBatch = 16) {
  return tpc::test::compileFixturePlan(gguf, devices, split, tag, flags, maxBatch);
}

/// Teacher-forced logits of a plan (E2EPlans.h).
std::vector<float> evaluate(const std::string &planPath, const Reference &ref, bool f32Kv = false) {
  return tpc::test::teacherForcedLogits(planPath, ref, f32Kv);
}

struct Case {
  std::string model;
  int devices;
  std::string split; ///< --tensor-split, empty: equal
  bool cli;          ///< also drive `tpc run` on this plan
  std::string flags; ///< further `tpc compile` flags (placement)
  int maxBatch = 16; ///< --max-batch: also the ring size of sliding-window caches (window + max_batch)
};

/// Readable case names in gtest/ctest output instead of the struct's bytes.
void PrintTo(const Case &c, std::ostream *os) {
  *os << c.model << " devices=" << c.devices << (c.split.empty() ? "" : " split " + c.split)
      << (c.flags.empty() ? "" : " " + c.flags) << " max-batch " << c.maxBatch;
}

class Fidelity : public ::testing::TestWithParam<Case> {};

TEST_P(Fidelity, MatchesReference) {
  const Case &c = GetParam();
  const tpc::test::FixtureFiles files = tpc::test::fixtureFiles(c.model);
  if (files.gguf.empty())
    GTEST_SKIP() << files.skip;
  const std::string &dir = files.dir, &gguf = files.gguf;
  ASSERT_EQ(::access(kTpc.c_str(), X_OK), 0) << kTpc << " not built";
  const Reference ref = readReference(dir, c.model);
  ASSERT_TRUE(ref.ok) << ref.error;
  const std::string what = c.model + " devices=" + std::to_string(c.devices) +
                           (c.split.empty() ? "" : " split " + c.split) +
                           (c.flags.empty() ? "" : " " + c.flags) +
                           " max-batch " + std::to_string(c.maxBatch);

  std::string plan = compile(gguf, c.devices, c.split, "n", c.flags, c.maxBatch);
  ASSERT_FALSE(plan.empty());
  std::vector<float> got = evaluate(plan, ref);
  ASSERT_FALSE(got.empty()) << what;
  std::vector<float> checked = got;
  tpc::test::exemptKnownRows(c.model, checked, ref);
  ::testing::AssertionResult vsRef = tpc::test::matchesReference(checked, ref);
  EXPECT_TRUE(vsRef) << what;
  std::printf("[ e2e      ] %s %s\n", what.c_str(), vsRef.message());

  if (c.devices > 1) {
    // Same function as the 1-device plan up to summation order.
    std::string one = compile(gguf, 1, "", "1");
    ASSERT_FALSE(one.empty());
    std::vector<float> base = evaluate(one, ref);
    double scale = 0;
    for (float v : base)
      scale = std::max(scale, std::fabs(double(v)));
    // Quantized weights: activations are quantized to 8 bits before every quantized matmul, so a 1-ulp
    // change can flip one rounding, and through the KV cache every later token moves by the quantization
    // noise (tiny-llama-Q4_K_M on 3 devices: rows 0-3 within 5e-7, rows 4-27 up to 0.06). There the bound
    // is the fixture's own tolerance.
    const double bound = ref.f32 ? 1e-4 * std::max(1.0, scale) : ref.tolMax;
    // The f16 KV cache does the same to F32 models: a 1e-7 relative difference of a K/V element (the
    // summation order) now and then rounds to the neighbouring f16 value, 5e-4 relative. tiny-gemma4moe
    // is sensitive to that (attention scale 1, V RMS-normalised to unit size, MoE routing): 1 vs 3 and 4
    // devices differ by 1.3e-6..7e-6 in row 0 and up to 4.3e-4 (1.07e-4 of the scale) later with f16
    // caches, but by at most 2.7e-6 in every row with f32 caches (f32 matmuls with f16 caches: still
    // 6.7e-4). So every F32 model is held to 1e-4 with f32 caches below (the splits' claim, summation
    // order only), and with the production f16 caches too except tiny-gemma4moe, whose f16 rows are held
    // to the reference tolerance above.
    const bool f16CacheFlips = c.model == "tiny-gemma4moe";
    if (!ref.f32 || !f16CacheFlips) {
      ::testing::AssertionResult vsOne = tpc::test::allWithin(got, base, bound);
      EXPECT_TRUE(vsOne) << what << " vs devices=1";
      std::printf("[ e2e      ] %s vs devices=1: %s\n", what.c_str(), vsOne.message());
    }
    if (ref.f32) {
      std::vector<float> got32 = evaluate(plan, ref, /*f32Kv=*/true);
      std::vector<float> base32 = evaluate(one, ref, /*f32Kv=*/true);
      EXPECT_NE(got32, got) << what << ": f32KvCache changed nothing (are the caches still f16?)";
      ::testing::AssertionResult vsOne32 = tpc::test::allWithin(got32, base32, bound);
      EXPECT_TRUE(vsOne32) << what << " vs devices=1, f32 KV caches";
      std::printf("[ e2e      ] %s vs devices=1, f32 KV caches: %s\n", what.c_str(), vsOne32.message());
    }
    std::remove(one.c_str());
  }

  if (c.cli) { // free-running greedy through `tpc run`, its --dump-logits against the reference
    EXPECT_TRUE(tpc::test::cliMatchesReference(kTpc, plan, ref, "-t 2")) << what;
  }
  std::remove(plan.c_str());
}

std::vector<Case> cases() {
  // Free-running greedy through `tpc run` (Greedy): the F32 fixture of each architecture on 2 devices;
  // every fixture the reference quantized on 1, 2 and 3 devices, beside the teacher-forced check, so each
  // quantized type's kernels generate the reference's ids at every split.
  enum class Greedy { No, TwoDevices, AllDevices };
  const std::vector<std::pair<std::string, Greedy>> models = {
      {"tiny-llama", Greedy::TwoDevices},
      {"tiny-llama-Q8_0", Greedy::AllDevices},
      {"tiny-llama-Q4_K_M", Greedy::AllDevices},
      {"tiny-qwen3", Greedy::TwoDevices},
      {"tiny-qwen3moe", Greedy::TwoDevices},
      {"tiny-qwen3moe-Q8_0", Greedy::AllDevices},
      {"tiny-qwen3moe-Q4_K_M", Greedy::AllDevices},
      {"tiny-qwen3moe-gu", Greedy::No},
      {"tiny-gemma4moe", Greedy::TwoDevices},
      {"tiny-gemma3", Greedy::TwoDevices},
      {"tiny-qwen35moe", Greedy::TwoDevices},
      {"tiny-qwen35moe-Q8_0", Greedy::AllDevices},
      {"tiny-qwen35moe-Q4_K_M", Greedy::AllDevices},
      {"tiny-qwen35", Greedy::TwoDevices},
      {"tiny-llama-IQ4_XS", Greedy::AllDevices},
      {"tiny-llama-Q3_K_M", Greedy::AllDevices},
      {"tiny-llama-Q2_K", Greedy::AllDevices},
      {"tiny-qwen3moe-IQ4_NL", Greedy::AllDevices},
      {"tiny-qwen3moe-Q3_K_S", Greedy::AllDevices},
      {"tiny-glm4moe", Greedy::TwoDevices},
      // Not through `tpc run`: its row 7 is exempt from the reference (exemptRouterTieRow below).
      {"tiny-glm4moe-Q4_K_M", Greedy::No},
      {"tiny-gptoss", Greedy::TwoDevices}};
  std::vector<Case> all;
  for (const auto &[m, greedy] : models) {
    const bool every = greedy == Greedy::AllDevices;
    all.push_back({m, 1, "", every});
    all.push_back({m, 2, "", every || greedy == Greedy::TwoDevices});
    all.push_back({m, 3, "3,2,1", every});
  }
  // More devices than the acceptance asks for, where segments (merged gate|up) and MoE chains meet
  // uneven shares.
  all.push_back({"tiny-qwen3moe-gu", 4, "4,3,2,1", false});
  all.push_back({"tiny-gemma4moe", 4, "4,3,2,1", false});
  // Separate gate and up experts (quantized) at 4 uneven intermediate shares: each device's slices pair up in
  // the fused gate/up GLU job.
  all.push_back({"tiny-qwen3moe-Q4_K_M", 4, "4,3,2,1", false});
  // Placement: the KV cache and the experts on the host (explicit copies in the plan) change nothing.
  all.push_back({"tiny-qwen3moe", 2, "", false, "--no-kv-offload --override-tensor 'ffn_.*_exps=cpu'"});
  // The tied embedding on the host: lookup and output projection on one host slice, the token ids copied
  // there, the partial rows and the split logits copied back for their collectives.
  all.push_back({"tiny-qwen3", 2, "", false, "--override-tensor 'token_embd=cpu'"});
  // The output head on the host (output_norm and output, quantized): the host projection's copy back is
  // the step that writes the logits.
  all.push_back({"tiny-llama-Q4_K_M", 1, "", false, "--override-tensor '^output=cpu'"});
  // The cache on the host over 3 uneven devices: the fused layer boundaries must get the same parameters
  // on every device although placement changes each device's arena layout (test/compiler/
  // placement-fixtures.test compares it with the plain plan); here against the reference, through the CLI.
  all.push_back({"tiny-llama-Q4_K_M", 3, "3,2,1", true, "--no-kv-offload"});
  // Sliding-window rings (window 8 in both gemma fixtures) of window + max_batch positions: with max-batch
  // 4 a ring holds 12 positions and the 28 reference rows wrap it twice, the prompt running in chunks of
  // 4; with max-batch 3 (11 positions) the chunks cut the prompt unevenly. The default cases above run the
  // 12-token prompt as one batch, longer than the window, over a ring of 24.
  for (int mb : {4, 3}) {
    all.push_back({"tiny-gemma3", 2, "", false, "", mb});
    all.push_back({"tiny-gemma4moe", 3, "3,2,1", false, "", mb});
  }
  // Hybrid (Gated DeltaNet) models: key-head groups at 4 uneven shares (2 key heads, 2 KV heads: some
  // devices hold none of a layer's heads); the 80-token prompt in one call (the chunked delta rule
  // across its 64-token chunk boundary) and in calls of 16 (the recurrent state carried between calls);
  // the recurrent states and KV caches on the host with the experts.
  all.push_back({"tiny-qwen35moe", 4, "4,3,2,1", false});
  all.push_back({"tiny-qwen35moe-Q4_K_M", 4, "4,3,2,1", false});
  all.push_back({"tiny-qwen35moe-long", 1, "", false, "", 96});
  all.push_back({"tiny-qwen35moe-long", 2, "", false, "", 96});
  all.push_back({"tiny-qwen35moe-long", 3, "3,2,1", false});
  all.push_back({"tiny-qwen35moe-long", 4, "4,3,2,1", false, "", 96});
  all.push_back({"tiny-qwen35moe", 2, "", false, "--no-kv-offload --override-tensor 'ffn_.*_exps=cpu'"});
  all.push_back({"tiny-qwen35moe", 3, "3,2,1", false, "--moe-split expert"});
  // GLM-4.5 MoE: 2 KV heads and 8 query heads (at 3 and 4 devices K/V stay whole and Q splits by head),
  // a dense first layer, sigmoid routing with a selection bias and a shared expert beside the routed ones;
  // every MoE layer split by intermediate (the shared expert always is) at 4 uneven shares, and by whole
  // experts in the loop below.
  all.push_back({"tiny-glm4moe", 4, "4,3,2,1", false});
  all.push_back({"tiny-glm4moe-Q4_K_M", 4, "4,3,2,1", false});
  for (const char *m : {"tiny-glm4moe", "tiny-glm4moe-Q4_K_M"}) {
    all.push_back({m, 2, "", false, "--moe-split intermediate"});
    all.push_back({m, 3, "3,2,1", false, "--moe-split intermediate"});
    all.push_back({m, 4, "4,3,2,1", false, "--moe-split intermediate"});
  }
  // gpt-oss: 8 query heads in 2 KV groups and experts 160 wide (5 MXFP4 blocks) at 4 uneven devices (K/V
  // mirrored, every device a share of the query heads and the blocks), and whole experts with their bias rows at 2, 3 (uneven) and 4 devices.
  all.push_back({"tiny-gptoss", 4, "4,3,2,1", false});
  for (int d : {2, 3, 4})
    all.push_back({"tiny-gptoss", d, d == 3 ? "3,2,1" : "", d == 2, "--moe-split expert"});
  // The experts with their biases (the pattern matches both) and the caches on the host.
  all.push_back({"tiny-gptoss", 2, "", false, "--no-kv-offload --override-tensor 'ffn_.*_exps=cpu'"});
  // Expert parallel: whole experts per device (in proportion to the shares), rows routed to another
  // device's experts are zeros here, one all-reduce per MoE block as before.
  for (const char *m : {"tiny-qwen3moe", "tiny-qwen3moe-Q4_K_M", "tiny-gemma4moe",
                        "tiny-glm4moe", "tiny-glm4moe-Q4_K_M"}) {
    const std::string ep = "--moe-split expert";
    all.push_back({m, 1, "", false, ep});
    all.push_back({m, 2, "", std::string(m) == "tiny-qwen3moe", ep});
    all.push_back({m, 3, "3,2,1", false, ep});
    all.push_back({m, 4, "4,3,2,1", false, ep});
  }
  return all;
}

std::string caseName(const ::testing::TestParamInfo<Case> &info) {
  const std::string &f = info.param.flags;
  std::string n = info.param.model + "_d" + std::to_string(info.param.devices) +
                  (f.empty()                                                 ? ""
                   : f.find("--moe-split expert") != std::string::npos       ? "_expert"
                   : f.find("--moe-split intermediate") != std::string::npos ? "_intermediate"
                                                                             : "_host") +
                  (info.param.maxBatch == 16 ? "" : "_ring_mb" + std::to_string(info.param.maxBatch));
  for (char &ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch)))
      ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fidelity, ::testing::ValuesIn(cases()), caseName);

} // namespace
