//===- FidelityLevelsTest.cpp - the fidelity cases at every CPU kernel level -===//
//
// The CPU kernels are chosen once per process (activeIsa(): the best level, or TPC_CPU_ISA), so
// Fixtures/Fidelity (FidelityTest.cpp) checks only the level the machine runs by default. CI machines
// differ (AVX2-only, AVX-512, AVX-512 VNNI), and each level sums the same exact integer terms in its own
// float order, which decides where an 8-bit activation or an f16 cache element lands on the other side of
// its rounding boundary: every level must meet the fixtures' tolerances on its own. So for every quantized
// fixture at 1 device, and one uneven 3-device MoE case, this suite re-runs the Fixtures/Fidelity case in a
// child process of this binary with TPC_CPU_ISA set to each level the CPU has below its default (the child
// `tpc` processes of the case inherit it), and reports the child's lines per level. The default level is
// Fixtures/Fidelity itself (skipped here); levels the CPU lacks skip visibly.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/quant/Quant.h"
#include "test/common/TestSupport.h"

#include <gtest/gtest.h>

#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using tpc::rt::cpu::Isa;

struct LevelCase {
  std::string model;
  int devices;
  Isa isa;
};

void PrintTo(const LevelCase &c, std::ostream *os) {
  *os << c.model << " devices=" << c.devices << " " << tpc::rt::cpu::isaName(c.isa);
}

/// The Fixtures/Fidelity case name of (model, devices) with no flags (FidelityTest.cpp caseName).
std::string fidelityCaseName(const std::string &model, int devices) {
  std::string n = model + "_d" + std::to_string(devices);
  for (char &ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch)))
      ch = '_';
  return n;
}

/// This test binary (the child runs it again).
std::string selfPath() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

class FidelityLevel : public ::testing::TestWithParam<LevelCase> {};

TEST_P(FidelityLevel, MatchesReference) {
  const LevelCase &c = GetParam();
  const char *level = tpc::rt::cpu::isaName(c.isa);
  const char *shared = std::getenv("TPC_SHARED_DIR");
  if (!shared || !std::ifstream(std::string(shared) + "/fixtures/" + c.model + ".gguf"))
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures/" << c.model << ".gguf not found; set TPC_SHARED_DIR to ../shared";
  if (!tpc::rt::cpu::isaAvailable(c.isa))
    GTEST_SKIP() << "this CPU cannot run the " << level << " kernels";
  if (c.isa == tpc::rt::cpu::activeIsa())
    GTEST_SKIP() << level << " is this process's level: Fixtures/Fidelity checks it";
  const std::string self = selfPath();
  ASSERT_FALSE(self.empty()) << "cannot find this test binary through /proc/self/exe";
  const std::string filter = "Fixtures/Fidelity.MatchesReference/" + fidelityCaseName(c.model, c.devices);
  const std::string cmd = std::string("TPC_CPU_ISA=") + level + " '" + self + "' --gtest_filter=" + filter +
                          " --gtest_color=no 2>&1";
  auto [rc, out] = tpc::test::runShell(cmd);
  // The child's result lines (max|d|, rms per check), tagged with the level.
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("[ e2e      ]", 0) == 0)
      std::printf("[ e2e %-6s] %s\n", level, line.c_str() + 13);
  ASSERT_NE(out.find("[==========] 1 test from 1 test suite ran"), std::string::npos)
      << filter << " is not one Fixtures/Fidelity case (did FidelityTest.cpp's case list change?):\n" << out;
  EXPECT_EQ(rc, 0) << "TPC_CPU_ISA=" << level << ": " << filter << " failed:\n" << out;
}

std::vector<LevelCase> levelCases() {
  // Every fixture the reference quantized (Fixtures/Fidelity's quantized models) at 1 device, and one MoE
  // model over 3 uneven devices (the split's float order and its checks against the 1-device plan).
  const std::vector<std::pair<std::string, int>> plans = {
      {"tiny-llama-Q8_0", 1},      {"tiny-llama-Q4_K_M", 1},     {"tiny-qwen3moe-Q8_0", 1},
      {"tiny-qwen3moe-Q4_K_M", 1}, {"tiny-qwen35moe-Q8_0", 1},   {"tiny-qwen35moe-Q4_K_M", 1},
      {"tiny-llama-IQ4_XS", 1},    {"tiny-llama-Q3_K_M", 1},     {"tiny-llama-Q2_K", 1},
      {"tiny-qwen3moe-IQ4_NL", 1}, {"tiny-qwen3moe-Q3_K_S", 1},  {"tiny-glm4moe-Q4_K_M", 1},
      {"tiny-qwen3moe-Q4_K_M", 3}};
  std::vector<LevelCase> all;
  for (Isa isa : {Isa::Scalar, Isa::AVX2, Isa::AVX512, Isa::AVX512VNNI})
    for (const auto &[m, d] : plans)
      all.push_back({m, d, isa});
  return all;
}

std::string levelCaseName(const ::testing::TestParamInfo<LevelCase> &info) {
  return fidelityCaseName(info.param.model, info.param.devices) + "_" + tpc::rt::cpu::isaName(info.param.isa);
}

INSTANTIATE_TEST_SUITE_P(Levels, FidelityLevel, ::testing::ValuesIn(levelCases()), levelCaseName);

} // namespace
