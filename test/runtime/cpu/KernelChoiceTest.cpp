//===- KernelChoiceTest.cpp - the kernel level's calibration and its cache ---===//
//
// runtime/cpu/KernelChoice.h's order (override, off, cache, calibration) with a stand-in measurement that
// counts its calls; the cache file's round trip, its corrupt forms (ignored with a warning, then rewritten)
// and an unwritable directory (a warning); that calibrate() and pickIsa() only ever answer a level the CPU
// has; and that the decode sample of a plan stands for all of its weight bytes. No timing is asserted.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/KernelChoice.h"

#include "runtime/ggml/Quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::cpu;

namespace {

/// A fresh directory under the test's temp dir, removed at the end.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("tpc-kernel-choice-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string &name) const { return (path / name).string(); }
};

void writeText(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::trunc) << text;
}

std::string readText(const std::string &path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// A request over `path` whose measurement picks `pick` and counts its calls in `calls`.
KernelChoiceRequest request(const std::string &path, const KernelCacheKey &key, Isa pick, int &calls) {
  KernelChoiceRequest r;
  r.candidates = {Isa::Scalar, Isa::AVX2}; // any two levels: the logic does not run kernels here
  r.cachePath = path;
  r.key = key;
  r.measure = [pick, &calls] {
    ++calls;
    Calibration c;
    c.times = {{Isa::Scalar, 2e-3}, {Isa::AVX2, 1e-3}};
    c.chosen = pick;
    c.rounds = 3;
    return c;
  };
  return r;
}

/// The choice tests cache avx2 and read it back: a level the CPU lacks would be refused (a corrupt entry).
#define NEEDS_AVX2()                                                                                         \
  if (!isaAvailable(Isa::AVX2))                                                                              \
  GTEST_SKIP() << "needs an AVX2 CPU (the cached level must be one it can run)"

const KernelCacheKey keyA{"Test CPU|avx2", "build-a", "shapes-1 t2"};
const KernelCacheKey keyB{"Test CPU|avx2", "build-a", "shapes-2 t2"};

} // namespace

TEST(KernelCache, RoundTripKeepsEveryEntryAndReplacesItsOwn) {
  TempDir dir;
  const std::string path = dir.file("nested/tpc/cpu-kernels.txt"); // directories are created
  EXPECT_TRUE(readKernelCache(path, keyA).problem.empty()) << "a missing file is no problem";
  ASSERT_EQ(writeKernelCache(path, {}, {keyA, Isa::Scalar, "first note"}), "");
  KernelCacheRead r = readKernelCache(path, keyA);
  EXPECT_EQ(r.problem, "");
  ASSERT_TRUE(r.hit);
  EXPECT_EQ(r.hit->isa, Isa::Scalar);
  EXPECT_EQ(r.hit->note, "first note");
  EXPECT_FALSE(readKernelCache(path, keyB).hit);

  ASSERT_EQ(writeKernelCache(path, r.entries, {keyB, Isa::Scalar, "tab\tand\nnewline"}), "");
  r = readKernelCache(path, keyA);
  EXPECT_EQ(r.entries.size(), 2u);
  ASSERT_TRUE(readKernelCache(path, keyB).hit);
  EXPECT_EQ(readKernelCache(path, keyB).hit->note, "tab and newline"); // fields never split the line
  if (isaAvailable(Isa::AVX2)) { // the same key again: replaced, not added
    ASSERT_EQ(writeKernelCache(path, r.entries, {keyA, Isa::AVX2, "second"}), "");
    r = readKernelCache(path, keyA);
    EXPECT_EQ(r.entries.size(), 2u);
    ASSERT_TRUE(r.hit);
    EXPECT_EQ(r.hit->isa, Isa::AVX2);
  }
}

TEST(KernelCache, KeepsTheNewestEntriesOnly) {
  TempDir dir;
  const std::string path = dir.file("cpu-kernels.txt");
  std::vector<KernelCacheEntry> entries;
  for (size_t i = 0; i < kKernelCacheEntries + 5; ++i) {
    KernelCacheKey k = keyA;
    k.shapes = "s" + std::to_string(i);
    ASSERT_EQ(writeKernelCache(path, entries, {k, Isa::Scalar, ""}), "");
    entries = readKernelCache(path, k).entries;
  }
  EXPECT_EQ(entries.size(), kKernelCacheEntries);
  EXPECT_EQ(entries.front().key.shapes, "s5");
}

TEST(KernelCache, CorruptFilesAreIgnoredWithOneLine) {
  TempDir dir;
  const std::string path = dir.file("cpu-kernels.txt");
  const std::string header = "# tpc cpu kernel levels v1\n";
  const std::string good = keyA.cpu + "\t" + keyA.build + "\t" + keyA.shapes + "\tscalar\tnote\n";
  struct Case {
    std::string text, says;
  };
  std::vector<Case> cases = {
      {"", "line 1 is missing"},
      {"\x01\x02garbage\xff\n", "line 1 is not the header"},
      {header + good + "only\ttwo\n", "line 3 has 2 tab-separated fields, not 5"},
      {header + keyA.cpu + "\t" + keyA.build + "\t" + keyA.shapes + "\tavx9\tnote\n",
       "line 2 names the level \"avx9\""},
  };
  if (!isaAvailable(Isa::AVX512VNNI)) // an edited file naming a level this CPU lacks, for the key asked
    cases.push_back({header + keyA.cpu + "\t" + keyA.build + "\t" + keyA.shapes + "\tavx512vnni\tnote\n",
                     "which this CPU cannot run"});
  for (const Case &c : cases) {
    writeText(path, c.text);
    const KernelCacheRead r = readKernelCache(path, keyA);
    EXPECT_FALSE(r.hit) << c.says;
    EXPECT_TRUE(r.entries.empty()) << c.says;
    EXPECT_NE(r.problem.find(path), std::string::npos) << r.problem;
    EXPECT_NE(r.problem.find(c.says), std::string::npos) << r.problem;
    EXPECT_NE(r.problem.find("rewritten"), std::string::npos) << r.problem;
  }
  std::filesystem::create_directories(dir.file("a-directory"));
  const KernelCacheRead r = readKernelCache(dir.file("a-directory"), keyA);
  EXPECT_FALSE(r.hit);
  EXPECT_NE(r.problem.find("cannot read the CPU kernel cache"), std::string::npos) << r.problem;
}

TEST(KernelChoice, CorruptCacheWarnsCalibratesAndRewrites) {
  NEEDS_AVX2();
  TempDir dir;
  const std::string path = dir.file("cpu-kernels.txt");
  writeText(path, "not a cache file\n");
  int calls = 0;
  const KernelChoice c = decideKernels(request(path, keyA, Isa::AVX2, calls));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(c.how, "calibrated");
  EXPECT_EQ(c.isa, Isa::AVX2);
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("line 1 is not the header"), std::string::npos) << c.warnings[0];
  EXPECT_EQ(readText(path).rfind("# tpc cpu kernel levels v1\n", 0), 0u) << readText(path);
  // The rewritten file serves the next session without a calibration or a warning.
  const KernelChoice again = decideKernels(request(path, keyA, Isa::Scalar, calls));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(again.how, "cached");
  EXPECT_EQ(again.isa, Isa::AVX2);
  EXPECT_TRUE(again.warnings.empty());
  EXPECT_NE(again.line().find("avx2 (cached: "), std::string::npos) << again.line();
}

TEST(KernelChoice, AnotherKeyRecalibratesAndKeepsTheOldEntry) {
  NEEDS_AVX2();
  TempDir dir;
  const std::string path = dir.file("cpu-kernels.txt");
  int calls = 0;
  EXPECT_EQ(decideKernels(request(path, keyA, Isa::AVX2, calls)).how, "calibrated");
  EXPECT_EQ(decideKernels(request(path, keyA, Isa::Scalar, calls)).how, "cached");
  EXPECT_EQ(calls, 1);
  const KernelChoice b = decideKernels(request(path, keyB, Isa::Scalar, calls)); // other shapes: measure
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(b.how, "calibrated");
  EXPECT_EQ(b.isa, Isa::Scalar);
  KernelCacheKey otherBuild = keyA;
  otherBuild.build = "build-b";
  EXPECT_EQ(decideKernels(request(path, otherBuild, Isa::Scalar, calls)).how, "calibrated");
  EXPECT_EQ(calls, 3);
  const KernelChoice a = decideKernels(request(path, keyA, Isa::Scalar, calls));
  EXPECT_EQ(a.how, "cached");
  EXPECT_EQ(a.isa, Isa::AVX2);
  EXPECT_EQ(calls, 3);
}

TEST(KernelChoice, OverrideAndOffWinOverTheCacheForceRecalibrates) {
  NEEDS_AVX2();
  TempDir dir;
  const std::string path = dir.file("cpu-kernels.txt");
  int calls = 0;
  decideKernels(request(path, keyA, Isa::AVX2, calls));
  ASSERT_EQ(calls, 1);
  KernelChoiceRequest r = request(path, keyA, Isa::AVX2, calls);
  r.isaOverride = "scalar";
  KernelChoice c = decideKernels(r);
  EXPECT_EQ(c.isa, Isa::Scalar);
  EXPECT_EQ(c.how, "override");
  EXPECT_EQ(c.line(), "scalar (override: TPC_CPU_ISA=scalar)");
  r.isaOverride = nullptr;
  r.mode = CalibrateMode::Off;
  c = decideKernels(r);
  EXPECT_EQ(c.how, "cpuid");
  EXPECT_EQ(c.isa, Isa::AVX2); // the best of the candidates
  EXPECT_EQ(calls, 1);
  r.mode = CalibrateMode::Force;
  r.measure = request(path, keyA, Isa::Scalar, calls).measure;
  c = decideKernels(r);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(c.how, "calibrated");
  EXPECT_EQ(c.isa, Isa::Scalar);
  r.mode = CalibrateMode::Auto; // force rewrote the entry
  EXPECT_EQ(decideKernels(r).isa, Isa::Scalar);
  EXPECT_EQ(calls, 2);
  // One candidate: nothing to choose, nothing measured.
  r.candidates = {Isa::AVX2};
  c = decideKernels(r);
  EXPECT_EQ(c.how, "cpuid");
  EXPECT_EQ(c.isa, Isa::AVX2);
  EXPECT_EQ(calls, 2);
}

TEST(KernelChoice, UnwritableCacheOnlyWarns) {
  NEEDS_AVX2();
  TempDir dir;
  writeText(dir.file("plain-file"), "x");
  const std::string path = dir.file("plain-file/tpc/cpu-kernels.txt"); // a directory cannot be made here
  int calls = 0;
  const KernelChoice c = decideKernels(request(path, keyA, Isa::AVX2, calls));
  EXPECT_EQ(c.isa, Isa::AVX2);
  EXPECT_EQ(c.how, "calibrated");
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("for the CPU kernel cache"), std::string::npos) << c.warnings[0];
  EXPECT_NE(c.warnings[0].find("TPC_CPU_CALIBRATE=0"), std::string::npos) << c.warnings[0];
}

TEST(KernelChoice, ModeValues) {
  EXPECT_EQ(calibrateModeProblem(nullptr), "");
  for (const char *ok : {"0", "off", "1", "on", "force"})
    EXPECT_EQ(calibrateModeProblem(ok), "") << ok;
  EXPECT_NE(calibrateModeProblem("yes").find("TPC_CPU_CALIBRATE=yes is not a mode"), std::string::npos);
  EXPECT_EQ(calibrateMode("0"), CalibrateMode::Off);
  EXPECT_EQ(calibrateMode("force"), CalibrateMode::Force);
  EXPECT_EQ(calibrateMode(nullptr), CalibrateMode::Auto);
}

TEST(KernelChoice, NothingTimedIsCpuidAndNotCached) {
  NEEDS_AVX2();
  TempDir dir;
  const std::string path = dir.file("cpu-kernels.txt");
  int calls = 0;
  KernelChoiceRequest r = request(path, keyA, Isa::Scalar, calls);
  r.measure = [&calls] {
    ++calls;
    return calibrate(CalibrationWork{}, {Isa::Scalar, Isa::AVX2}); // no pieces: no rounds
  };
  const KernelChoice c = decideKernels(r);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(c.how, "cpuid");
  EXPECT_EQ(c.isa, Isa::AVX2);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(KernelChoice, AMeasurementOutsideTheCandidatesIsNeverRun) {
  NEEDS_AVX2();
  int calls = 0;
  KernelChoiceRequest r = request("", keyA, Isa::AVX512VNNI, calls); // no cache file
  const KernelChoice c = decideKernels(r);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(c.isa, Isa::AVX2); // the best candidate, not the stray answer
}

TEST(Calibration, PickIsaTakesTheFastestUnlessCpuidIsWithinTheMargin) {
  const std::vector<LevelTime> t = {{Isa::AVX2, 1.00}, {Isa::AVX512, 1.10}, {Isa::AVX512VNNI, 1.20}};
  EXPECT_EQ(pickIsa(t, Isa::AVX512VNNI), Isa::AVX2);
  const std::vector<LevelTime> close = {{Isa::AVX2, 1.00}, {Isa::AVX512, 1.10}, {Isa::AVX512VNNI, 1.02}};
  EXPECT_EQ(pickIsa(close, Isa::AVX512VNNI), Isa::AVX512VNNI);
  EXPECT_EQ(pickIsa(close, Isa::Scalar), Isa::AVX2); // cpuid not among them: the fastest
  const std::vector<LevelTime> vnni = {{Isa::AVX2, 1.5}, {Isa::AVX512, 1.4}, {Isa::AVX512VNNI, 1.0}};
  EXPECT_EQ(pickIsa(vnni, Isa::AVX512VNNI), Isa::AVX512VNNI);
}

// Real kernels on a small decode sample: whatever the timings, the answer is a candidate and available.
TEST(Calibration, OnlyEverPicksALevelThisCpuHas) {
  const int64_t k = 1024, n = 256;
  std::vector<float> f(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i)
    f[static_cast<size_t>(i)] = 0.01f * static_cast<float>((i * 37) % 101 - 50);
  std::vector<std::vector<uint8_t>> store;
  CalibrationWork w;
  for (GGMLType t : {GGMLType::Q4_K, GGMLType::Q8_0, GGMLType::Q6_K}) {
    const size_t rb = static_cast<size_t>(*ggmlRowBytes(t, k));
    store.emplace_back(rb * n);
    for (int64_t r = 0; r < n; ++r)
      quantizeRow(t, f.data(), store.back().data() + rb * static_cast<size_t>(r), k);
    w.matmuls.push_back({store.back().data(), t, n, k, rb, 2.0});
  }
  w.attention.push_back({4, 1, 256, 256, GGMLType::F16, GGMLType::F16, 128, 0, 3});
  w.attention.push_back({8, 2, 64, 64, GGMLType::Q8_0, GGMLType::Q4_0, 100, 30, 1});
  const std::vector<Isa> cand = calibrationCandidates();
  ASSERT_FALSE(cand.empty());
  for (Isa i : cand)
    EXPECT_TRUE(isaAvailable(i)) << isaName(i);
  const Calibration c = calibrate(w, cand, 0.02);
  EXPECT_TRUE(isaAvailable(c.chosen));
  EXPECT_NE(std::find(cand.begin(), cand.end(), c.chosen), cand.end());
  ASSERT_EQ(c.times.size(), cand.size());
  if (cand.size() > 1) {
    EXPECT_GE(c.rounds, kMinCalibrationRounds);
    EXPECT_LE(c.rounds, kMaxCalibrationRounds);
    for (const LevelTime &t : c.times)
      EXPECT_GT(t.seconds, 0) << isaName(t.isa);
  }
}

// The sample reads at most its budget (whole matrices or a large one's first rows) and its weights make it
// stand for every weight byte of the step: sum(weight x piece bytes) = the plan's decode bytes.
TEST(Calibration, DecodeSampleStandsForTheWholeStep) {
  DevicePlan dp;
  std::vector<void *> ptr;
  std::vector<std::vector<uint8_t>> store;
  auto weight = [&](GGMLType t, std::vector<int64_t> shape) {
    WeightSlice ws;
    ws.type = t;
    ws.shape = shape;
    dp.weights.push_back(ws);
    TensorDesc td;
    td.id = static_cast<int32_t>(dp.tensors.size());
    td.storage = Storage::Weight;
    td.index = static_cast<int32_t>(dp.weights.size() - 1);
    td.shape = shape;
    dp.tensors.push_back(td);
    uint64_t bytes = *ggmlRowBytes(t, static_cast<uint64_t>(shape.back()));
    for (size_t i = 0; i + 1 < shape.size(); ++i)
      bytes *= static_cast<uint64_t>(shape[i]);
    store.emplace_back(bytes);
    ptr.push_back(store.back().data());
    return td.id;
  };
  auto act = [&](std::vector<int64_t> shape) {
    TensorDesc td;
    td.id = static_cast<int32_t>(dp.tensors.size());
    td.shape = shape;
    dp.tensors.push_back(td);
    ptr.push_back(nullptr);
    return td.id;
  };
  const int32_t x = act({-1, 512}), y = act({-1, 4096}), ids = act({-1, 2});
  uint64_t total = 0;
  for (int layer = 0; layer < 6; ++layer) {
    Step s;
    s.op = OpKind::Matmul;
    s.inputs = {x, weight(GGMLType::Q4_K, {1024, 512})};
    s.outputs = {y};
    dp.steps.push_back(s);
    total += 1024 * *ggmlRowBytes(GGMLType::Q4_K, 512);
    Step e;
    e.op = OpKind::MulMatId; // 8 experts, 2 per token
    e.inputs = {x, weight(GGMLType::Q8_0, {8, 256, 512}), ids};
    e.outputs = {y};
    dp.steps.push_back(e);
    total += 2 * 256 * *ggmlRowBytes(GGMLType::Q8_0, 512);
  }
  Step out;
  out.op = OpKind::Matmul;
  out.inputs = {x, weight(GGMLType::Q6_K, {16384, 512})};
  out.outputs = {y};
  dp.steps.push_back(out);
  total += 16384 * *ggmlRowBytes(GGMLType::Q6_K, 512);

  for (uint64_t budget : {uint64_t(1) << 30, total / 4}) {
    const CalibrationWork w = decodeWork(dp, ptr, 4096, budget);
    double stands = 0;
    uint64_t read = 0;
    for (const CalibMatmul &m : w.matmuls) {
      const uint64_t bytes = static_cast<uint64_t>(m.n) * *ggmlRowBytes(m.type, static_cast<uint64_t>(m.k));
      stands += m.weight * static_cast<double>(bytes);
      read += bytes;
      EXPECT_EQ(m.k, 512);
      EXPECT_GE(m.weight, 1.0);
    }
    EXPECT_NEAR(stands, static_cast<double>(total), 1e-6 * static_cast<double>(total)) << budget;
    if (budget >= total)
      EXPECT_EQ(read, total);
    else
      EXPECT_LE(read, budget + budget / 8); // whole matrices and rows of whole 64-row runs: about the budget
    std::vector<void *> moved = ptr;        // another session's addresses: the same key
    for (void *&p : moved)
      p = p ? static_cast<uint8_t *>(p) + 64 : nullptr;
    EXPECT_EQ(shapeKey(w), shapeKey(decodeWork(dp, moved, 4096, budget)));
    DevicePlan fewer = dp; // another plan (no output projection): another key
    fewer.steps.pop_back();
    EXPECT_NE(shapeKey(w), shapeKey(decodeWork(fewer, ptr, 4096, budget)));
  }
}
