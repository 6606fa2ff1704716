//===- E2EPlans.h - compile a fixture and read its teacher-forced logits -*- C++ -*-===//
//
// The two steps the end-to-end fixture tests share: `tpc compile` a GGUF into a temporary plan (a gtest
// failure names the command and its output), and the plan's teacher-forced logits against a fixture's
// reference (the prompt as one batch, then every greedy id at its position).
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_E2E_E2EPLANS_H
#define TPC_TEST_E2E_E2EPLANS_H

#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanIO.h"
#include "test/common/FixtureCheck.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

namespace tpc::test {

inline const std::string &tpcBinary() {
  static const std::string path = std::string(TPC_BINARY_DIR) + "/bin/tpc";
  return path;
}

/// The shared fixtures' folder ($TPC_SHARED_DIR/fixtures) and `model`'s GGUF there; `gguf` is empty where
/// either is missing, and `skip` then says why (the caller's GTEST_SKIP message: a skip must return from the
/// test body itself).
struct FixtureFiles {
  std::string dir, gguf, skip;
};
inline FixtureFiles fixtureFiles(const std::string &model) {
  const char *shared = std::getenv("TPC_SHARED_DIR");
  FixtureFiles f;
  f.dir = shared ? std::string(shared) + "/fixtures" : "";
  const std::string path = f.dir + "/" + model + ".gguf";
  if (shared && ::access(path.c_str(), R_OK) == 0)
    f.gguf = path;
  else
    f.skip = "TPC_SHARED_DIR/fixtures/" + model + ".gguf not found; set TPC_SHARED_DIR to ../shared";
  return f;
}

/// `tpc compile GGUF --devices N --max-batch B -o TMP [--tensor-split SPLIT] FLAGS`; the plan's path, or ""
/// after a gtest failure naming the command. `tag` makes the file name unique within the test binary.
inline std::string compileFixturePlan(const std::string &gguf, int devices, const std::string &split,
                                      const std::string &tag, const std::string &flags = "", int maxBatch = 16) {
  std::string plan = ::testing::TempDir() + "tpc-e2e-" + std::to_string(::getpid()) + "-" + tag + ".plan";
  std::string cmd = tpcBinary() + " compile " + gguf + " --devices " + std::to_string(devices) + " --max-batch " +
                    std::to_string(maxBatch) + " -o " + plan;
  if (!split.empty())
    cmd += " --tensor-split " + split;
  if (!flags.empty())
    cmd += " " + flags;
  auto [rc, out] = runShell(cmd + " 2>&1");
  EXPECT_EQ(rc, 0) << cmd << "\n" << out;
  return rc == 0 ? plan : "";
}

/// Teacher-forced logits of a plan against `ref`. `f32Kv`: f32 KV caches (SessionOptions::f32KvCache),
/// every other step as in production. Empty after a gtest failure.
inline std::vector<float> teacherForcedLogits(const std::string &planPath, const FixtureReference &ref,
                                              bool f32Kv = false) {
  auto plan = rt::loadPlan(planPath);
  EXPECT_TRUE(plan) << plan.message();
  if (!plan)
    return {};
  rt::SessionOptions o;
  o.threads = 2;
  o.ctxSize = std::max<int64_t>(64, int64_t(ref.rows())); // tiny-qwen35moe-long: 88 rows
  o.f32KvCache = f32Kv;
  auto s = rt::Session::open(std::move(*plan), o);
  EXPECT_TRUE(s) << s.message();
  if (!s)
    return {};
  auto got = teacherForced(**s, ref);
  EXPECT_TRUE(got) << got.message();
  return got ? got.take() : std::vector<float>{};
}

} // namespace tpc::test

#endif // TPC_TEST_E2E_E2EPLANS_H
