//===- CudaPluginTest.cpp - the CUDA backend is a plugin opened on first use ---===//
//
// In a CUDA build: `tpc` (and this binary, which links the registry) has no NEEDED entry for cudart,
// cuBLAS, NCCL or the driver, while libtpc_cuda.so has (so the check can see them); a CPU session, in
// process or as `tpc run`, maps none of them and not the plugin, and `auto` on a machine without an NVIDIA
// driver does not even look for the plugin; asking for "cuda" opens the plugin (on a machine without a
// GPU: the "no CUDA GPU is visible" error, exit 1), found beside the executable or in its ../lib, and a
// missing one is a one-line error listing both places. TPC_CUDA_PLUGIN pointing at a missing file, at a
// library that is not the plugin and at a plugin of another build gives a one-line error naming the path
// and what to do, exit 1.
//===----------------------------------------------------------------------===//
#include "runtime/backends/Backends.h"
#include "runtime/backends/CudaPluginLoader.h"

#include "test/common/TestSupport.h"
#include "test/runtime/exec/ExecTestUtil.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

const std::string kBin = std::string(TPC_BINARY_DIR) + "/bin/tpc";
const std::string kPlugin = std::string(TPC_BINARY_DIR) + "/lib/libtpc_cuda.so";
/// A library name of the CUDA stack (or the plugin) anywhere in `text`.
const std::regex kCudaLib("libcudart|libcublas|libnccl|libcuda\\.so|libtpc_cuda");

/// The NEEDED entries of `path`, one per line.
std::string neededOf(const std::string &path) {
  auto [rc, out] = tpc::test::runShell("readelf -d " + path + " 2>&1 | grep NEEDED");
  return out;
}

std::string processMaps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(CudaPlugin, ProgramsNeedNoCudaLibraryButThePluginDoes) {
  ASSERT_EQ(::access(kBin.c_str(), X_OK), 0) << kBin << " is built with the plugin";
  const std::string tpc = neededOf(kBin), self = neededOf("/proc/self/exe"), plugin = neededOf(kPlugin);
  ASSERT_NE(tpc.find("libc.so"), std::string::npos) << "readelf works: " << tpc;
  EXPECT_FALSE(std::regex_search(tpc, kCudaLib)) << "tpc:\n" << tpc;
  EXPECT_FALSE(std::regex_search(self, kCudaLib)) << "a program linking the registry:\n" << self;
  EXPECT_NE(plugin.find("libcublas"), std::string::npos) << "the plugin links cuBLAS:\n" << plugin;
}

TEST(CudaPlugin, CpuSessionsMapNoCudaLibraryUntilCudaIsAskedFor) {
  PlanMaker mk(1, 2, 3);
  const int32_t x = mk.tokenInput(0, {4}, randomFloats(3 * 4, 5));
  const int32_t y = mk.act(0, {-1, 4});
  mk.b(0).step(OpKind::Scale, {x}, {y}, {}, {2.0f});
  const SessionOptions o = mk.options(2, 8);
  std::vector<std::string> backends = {"cpu"};
  if (!nvidiaDriverPresent()) // with a driver, auto may rightly pick CUDA
    backends.push_back("auto");
  for (const std::string &b : backends) {
    auto s = Session::open(mk.plan, o, b);
    ASSERT_TRUE(s) << b << ": " << s.message();
    EXPECT_STREQ((*s)->backendName(), "CPU") << b;
    ASSERT_TRUE((*s)->evaluate({2, 0}, {0, 1})) << b;
    const std::string maps = processMaps();
    std::smatch m;
    EXPECT_FALSE(std::regex_search(maps, m, kCudaLib)) << b << ": " << m.str() << " is mapped";
  }
  // Asking for CUDA opens the plugin, which brings cuBLAS: the maps do show them once loaded.
  (void)builtinBackends().select("cuda");
  ASSERT_TRUE(loadCudaPlugin()) << loadCudaPlugin().message();
  const std::string maps = processMaps();
  EXPECT_NE(maps.find("libtpc_cuda.so"), std::string::npos);
  EXPECT_NE(maps.find("libcublas"), std::string::npos);
}

/// `tpc` with the tiny demo model compiled to a plan once per process; skips without the compiler.
class TpcRunPlugin : public ::testing::Test {
protected:
  void SetUp() override {
    if (::access(kBin.c_str(), X_OK) != 0)
      GTEST_SKIP() << kBin << " not built";
    if (!TPC_TEST_HAS_COMPILER)
      GTEST_SKIP() << "this build has no compiler (TPC_ENABLE_COMPILER=OFF) to write the plan";
    plan_ = ::testing::TempDir() + "tpc-plugin-" + std::to_string(::getpid()) + ".plan";
    auto [rc, out] = tpc::test::runShell(kBin + " compile " + TPC_SOURCE_DIR +
                                         "/examples/models/tiny-demo.gguf -o " + plan_ + " 2>&1");
    ASSERT_EQ(rc, 0) << out;
  }
  void TearDown() override { std::remove(plan_.c_str()); }
  /// `tpc run` on the plan with `env` before it and `args` after it; stdout and stderr.
  std::pair<int, std::string> run(const std::string &env, const std::string &args) {
    return tpc::test::runShell(env + " " + kBin + " run " + plan_ + " --prompt-ids 1,2 -n 2 " + args +
                               " 2>&1");
  }
  std::string plan_;
};

TEST_F(TpcRunPlugin, CpuRunLoadsNoCudaLibrary) {
  auto [rc, out] = run("LD_DEBUG=files", "--backend cpu");
  ASSERT_EQ(rc, 0) << out;
  ASSERT_NE(out.find("libfmt"), std::string::npos) << "LD_DEBUG=files lists the libraries: " << out;
  std::smatch m;
  EXPECT_FALSE(std::regex_search(out, m, kCudaLib)) << m.str() << " was loaded:\n" << out;
  if (nvidiaDriverPresent())
    return;
  // auto on a machine without a driver never looks for the plugin: a broken override changes nothing.
  auto [rc2, out2] = run("LD_DEBUG=files TPC_CUDA_PLUGIN=/nonexistent/libtpc_cuda.so", "");
  ASSERT_EQ(rc2, 0) << out2;
  EXPECT_FALSE(std::regex_search(out2, m, kCudaLib)) << m.str() << " was loaded:\n" << out2;
}

TEST_F(TpcRunPlugin, CudaWithoutAGpuLoadsThePluginAndSaysSo) {
  if (nvidiaDriverPresent())
    GTEST_SKIP() << "an NVIDIA driver is present: this case is for machines without a GPU";
  auto [rc, out] = run("LD_DEBUG=files", "--backend cuda");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("libtpc_cuda.so"), std::string::npos) << "the plugin was opened:\n" << out;
  auto [rc2, plain] = run("", "--backend cuda");
  EXPECT_EQ(rc2, 1) << plain;
  EXPECT_NE(plain.find("--backend: backend 'cuda' cannot run here: no CUDA GPU is visible"),
            std::string::npos)
      << plain;
  EXPECT_EQ(plain.find('\n'), plain.size() - 1) << "one line: " << plain;
}

TEST_F(TpcRunPlugin, PluginIsFoundBesideTheExecutableOrInItsLibFolder) {
  if (nvidiaDriverPresent())
    GTEST_SKIP() << "an NVIDIA driver is present: this case is for machines without a GPU";
  // A copy of tpc in a folder of its own: no plugin beside it or in ../lib, then one beside it.
  const std::string root = ::testing::TempDir() + "tpc-plugin-copy-" + std::to_string(::getpid());
  const std::string copy = root + "/bin/tpc";
  ASSERT_EQ(tpc::test::runShell("mkdir -p " + root + "/bin && cp " + kBin + " " + copy).first, 0);
  const std::string run = copy + " run " + plan_ + " --prompt-ids 1,2 -n 2 --backend cuda 2>&1";
  auto [rc, out] = tpc::test::runShell(run);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("the CUDA plugin libtpc_cuda.so is not installed (looked for " + root +
                     "/bin/libtpc_cuda.so, " + root + "/bin/../lib/libtpc_cuda.so)"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line: " << out;
  ASSERT_EQ(tpc::test::runShell("cp " + kPlugin + " " + root + "/bin/").first, 0);
  auto [rc2, found] = tpc::test::runShell(run);
  EXPECT_EQ(rc2, 1) << found;
  EXPECT_NE(found.find("no CUDA GPU is visible"), std::string::npos) << "the copy beside it loads: " << found;
  tpc::test::runShell("rm -rf " + root);
}

TEST_F(TpcRunPlugin, InstalledTpcFindsItsPlugin) {
  if (nvidiaDriverPresent())
    GTEST_SKIP() << "an NVIDIA driver is present: this case is for machines without a GPU";
  const std::string prefix = ::testing::TempDir() + "tpc-plugin-install-" + std::to_string(::getpid());
  auto [irc, log] = tpc::test::runShell(std::string(TPC_CMAKE_COMMAND) + " --install " + TPC_BINARY_DIR +
                                        " --prefix " + prefix + " 2>&1");
  ASSERT_EQ(irc, 0) << log;
  EXPECT_NE(log.find(prefix + "/lib/libtpc_cuda.so"), std::string::npos) << log;
  auto [rc, out] =
      tpc::test::runShell(prefix + "/bin/tpc run " + plan_ + " --prompt-ids 1,2 -n 2 --backend cuda 2>&1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("no CUDA GPU is visible"), std::string::npos) << "the installed plugin loads: " << out;
  tpc::test::runShell("rm -rf " + prefix);
}

TEST_F(TpcRunPlugin, BadOverrideIsAOneLineError) {
  struct Case {
    std::string path, want;
  };
  const std::vector<Case> cases = {
      {"/nonexistent/libtpc_cuda.so", "cannot load the CUDA plugin /nonexistent/libtpc_cuda.so: "},
      {TPC_NOT_A_PLUGIN, std::string(TPC_NOT_A_PLUGIN) + " is not a tpc CUDA plugin"},
      {TPC_STALE_PLUGIN,
       std::string("the CUDA plugin ") + TPC_STALE_PLUGIN + " is from another build of tpc"},
  };
  for (const Case &c : cases) {
    auto [rc, out] = run("TPC_CUDA_PLUGIN=" + c.path, "--backend cuda");
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find(c.want), std::string::npos) << out;
    EXPECT_NE(out.find("TPC_CUDA_PLUGIN"), std::string::npos) << "says what to do: " << out;
    EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line: " << out;
  }
  auto [rc, out] = run("TPC_CUDA_PLUGIN=/nonexistent/libtpc_cuda.so", "--backend cuda");
  EXPECT_NE(out.find("No such file"), std::string::npos) << "dlerror() is quoted: " << out;
}

} // namespace
