//===- PlanTest.cpp - plan format round trip and every loader error -------===//
//
// Builds plans through the PlanFormat structs, writes them with serializePlan() and loads them back, then
// damages them in every way the loader must catch: truncation, flipped bytes, a foreign file, a newer
// schema, out-of-range ids/offsets/pieces, mismatched collectives, a missing or changed GGUF. The GGUF is a
// small valid file written here (GGUF v3 header, one tensor).
//===----------------------------------------------------------------------===//
#include "runtime/plan/PlanIO.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <unistd.h>

using namespace tpc;
using namespace tpc::rt;

namespace {

/// A unique temporary path (removed by the test fixture).
std::string tempPath(const std::string &stem) {
  return ::testing::TempDir() + "tpc-plan-" + stem + "-" + std::to_string(::getpid());
}

void put32(std::vector<uint8_t> &b, uint32_t v) { b.insert(b.end(), (uint8_t *)&v, (uint8_t *)&v + 4); }
void put64(std::vector<uint8_t> &b, uint64_t v) { b.insert(b.end(), (uint8_t *)&v, (uint8_t *)&v + 8); }
void putStr(std::vector<uint8_t> &b, const std::string &s) {
  put64(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

/// A minimal GGUF v3: one string key, one f32 tensor "w" [rows x cols], data = i * 0.5.
std::vector<uint8_t> makeGguf(int rows, int cols) {
  std::vector<uint8_t> b;
  put32(b, 0x46554747u);
  put32(b, 3);
  put64(b, 1); // tensors
  put64(b, 1); // kv
  putStr(b, "general.architecture");
  put32(b, 8);
  putStr(b, "llama");
  putStr(b, "w");
  put32(b, 2);
  put64(b, cols);
  put64(b, rows);
  put32(b, 0);
  put64(b, 0);
  while (b.size() % 32)
    b.push_back(0);
  for (int i = 0; i < rows * cols; ++i) {
    float f = i * 0.5f;
    b.insert(b.end(), (uint8_t *)&f, (uint8_t *)&f + 4);
  }
  return b;
}

void writeBytes(const std::string &path, const std::vector<uint8_t> &b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char *>(b.data()), b.size());
}

/// A valid two-device plan: y = x·wᵀ with w split by rows, then all_gather.
Plan makePlan(const std::string &ggufPath, uint64_t ggufSize, uint64_t fingerprint) {
  Plan p;
  p.compilerVersion = "test";
  p.ggufPath = ggufPath;
  p.ggufSize = ggufSize;
  p.ggufFingerprint = fingerprint;
  p.model = {"llama", 8, 128, 4, 64};
  p.tokenizer.model = "llama";
  p.tokenizer.tokens = {"<unk>", "<s>", "</s>", "a"};
  p.tokenizer.scores = {0, 0, 0, -1};
  p.tokenizer.tokenTypes = {2, 3, 3, 1};
  p.tokenizer.bosId = 1;
  p.tokenizer.eosId = 2;
  p.tokenizer.addBos = true;
  p.tokenizer.merges = {"a b"};
  const uint64_t dataStart = ggufSize - 8 * 8 * 4;
  for (int d = 0; d < 2; ++d) {
    DevicePlan dev;
    DevicePlanBuilder b(dev);
    WeightSlice w{"w", GGMLType::F32, {4, 8}, 0, 4 * 8 * 4, {{dataStart + d * 4 * 32, 32, 32, 4}}};
    int32_t wi = b.weight(b.addWeight(w));
    int32_t tok = b.io(Storage::InputTokens, DType::I32, {-1});
    int32_t emb = b.activation(DType::F32, {-1, 8}, 0);
    int32_t y = b.activation(DType::F32, {-1, 4}, 4 * 8 * 4);
    int32_t logits = b.io(Storage::OutputLogits, DType::F32, {-1, 8});
    b.addKv({0, 1, 4, 4, DType::F16, Placement::Device});
    EXPECT_EQ(dev.kvBytesPerToken, 1u * (4 + 4) * 2); // addKv counts it
    b.step(OpKind::GetRows, {wi, tok}, {emb});
    b.step(OpKind::Matmul, {emb, wi}, {y});
    b.step(OpKind::AllGather, {y}, {logits}, {1});
    dev.weightBytes = 4 * 8 * 4;
    dev.activationBytes = 4 * 8 * 4 + 4 * 4 * 4;
    p.devices.push_back(std::move(dev));
  }
  return p;
}

class PlanTest : public ::testing::Test {
protected:
  void SetUp() override {
    gguf = tempPath("model.gguf");
    planPath = tempPath("plan.bin");
    ggufBytes = makeGguf(8, 8);
    writeBytes(gguf, ggufBytes);
    auto fp = ggufFingerprint(gguf);
    ASSERT_TRUE(fp) << fp.message();
    plan = makePlan(gguf, ggufBytes.size(), *fp);
    ASSERT_TRUE(validatePlan(plan).empty()) << validatePlan(plan)[0];
  }
  void TearDown() override {
    std::remove(gguf.c_str());
    std::remove(planPath.c_str());
  }
  /// Loads `p` after a round trip through bytes; returns the error message or "" when it loaded.
  std::string loadError(const Plan &p) {
    std::vector<uint8_t> bytes = serializePlan(p);
    auto r = parsePlan(bytes.data(), bytes.size(), "x.plan");
    return r ? "" : r.message();
  }
  std::string gguf, planPath;
  std::vector<uint8_t> ggufBytes;
  Plan plan;
};

TEST_F(PlanTest, RoundTripKeepsEveryField) {
  ASSERT_TRUE(writePlan(plan, planPath));
  auto r = loadPlan(planPath);
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->ggufPath, plan.ggufPath);
  EXPECT_EQ(r->ggufFingerprint, plan.ggufFingerprint);
  EXPECT_EQ(r->model.arch, "llama");
  EXPECT_EQ(r->model.maxBatch, 4);
  EXPECT_EQ(r->tokenizer.tokens, plan.tokenizer.tokens);
  EXPECT_EQ(r->tokenizer.scores, plan.tokenizer.scores);
  EXPECT_EQ(r->tokenizer.merges, plan.tokenizer.merges);
  EXPECT_EQ(r->tokenizer.bosId, 1);
  EXPECT_TRUE(r->tokenizer.addBos);
  ASSERT_EQ(r->devices.size(), 2u);
  const DevicePlan &d1 = r->devices[1];
  ASSERT_EQ(d1.weights.size(), 1u);
  EXPECT_EQ(d1.weights[0].pieces[0].fileOffset, plan.devices[1].weights[0].pieces[0].fileOffset);
  EXPECT_EQ(d1.weights[0].shape, (std::vector<int64_t>{4, 8}));
  ASSERT_EQ(d1.steps.size(), 3u);
  EXPECT_EQ(d1.steps[2].op, OpKind::AllGather);
  EXPECT_EQ(d1.steps[2].ints, std::vector<int64_t>{1});
  EXPECT_EQ(d1.tensors[2].shape, (std::vector<int64_t>{-1, 8}));
  EXPECT_EQ(d1.kv[0].dtype, DType::F16);
  EXPECT_EQ(serializePlan(*r), serializePlan(plan));
}

TEST_F(PlanTest, EveryTruncationIsRejected) {
  std::vector<uint8_t> bytes = serializePlan(plan);
  // Every prefix must fail cleanly (the verifier or the magic check), never crash.
  for (size_t n = 0; n < bytes.size(); n += (n < 64 ? 1 : 7)) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    auto r = parsePlan(cut.data(), cut.size(), "cut.plan");
    EXPECT_FALSE(r) << "prefix " << n << " loaded";
    if (!r)
      EXPECT_NE(r.message().find("cut.plan"), std::string::npos) << r.message();
  }
}

TEST_F(PlanTest, FlippedBytesNeverCrashAndMostlyFail) {
  std::vector<uint8_t> bytes = serializePlan(plan);
  std::mt19937 rng(7);
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> bad = bytes;
    size_t at = rng() % bad.size();
    bad[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
    auto r = parsePlan(bad.data(), bad.size(), "flip.plan");
    if (!r)
      ++rejected;
    else
      EXPECT_TRUE(validatePlan(*r).empty()); // whatever loads must have passed the semantic checks
  }
  // Flips inside string payloads or float params are legitimately undetectable; most others are caught.
  EXPECT_GT(rejected, 200);
}

TEST_F(PlanTest, ForeignFileIsNotAPlan) {
  auto r = parsePlan(ggufBytes.data(), ggufBytes.size(), "model.gguf");
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("not a tpc plan"), std::string::npos) << r.message();
  auto missing = loadPlan(tempPath("nope"));
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.message().find("cannot open plan"), std::string::npos) << missing.message();
}

TEST_F(PlanTest, NewerSchemaNamesBothVersions) {
  plan.schemaVersion = kPlanSchemaVersion + 1;
  std::string e = loadError(plan);
  EXPECT_NE(e.find(fmt::format("plan schema v{} is newer than this tpc (v{})", kPlanSchemaVersion + 1,
                               kPlanSchemaVersion)),
            std::string::npos)
      << e;
}

TEST_F(PlanTest, SemanticErrorsAreCaught) {
  struct Case {
    const char *expect;
    void (*edit)(Plan &);
  };
  const Case cases[] = {
      {"input tensor 99 out of range", [](Plan &p) { p.devices[0].steps[1].inputs[0] = 99; }},
      {"outside the activation arena", [](Plan &p) { p.devices[0].tensors[2].offset = 1000; }},
      {"outside the activation arena", [](Plan &p) { p.devices[0].tensors[2].offset = ~0ull - 3; }},
      {"reads past the end of the GGUF",
       [](Plan &p) { p.devices[1].weights[0].pieces[0].fileOffset += 4096; }},
      {"reads past the end of the GGUF",
       [](Plan &p) { p.devices[1].weights[0].pieces[0].rowStride = ~0ull / 2; }},
      {"outside the weight arena", [](Plan &p) { p.devices[0].weightBytes = 16; }},
      {"pieces hold", [](Plan &p) { p.devices[0].weights[0].pieces[0].rows = 3; }},
      {"unknown ggml type", [](Plan &p) { p.devices[0].weights[0].type = static_cast<GGMLType>(4); }},
      {"inputs, expected", [](Plan &p) { p.devices[0].steps[1].inputs.pop_back(); }},
      {"needs 1 ints", [](Plan &p) { p.devices[0].steps[2].ints.clear(); }},
      {"unknown op", [](Plan &p) { p.devices[0].steps[0].op = static_cast<OpKind>(200); }},
      {"collective steps", [](Plan &p) { p.devices[1].steps.pop_back(); }},
      {"weight index", [](Plan &p) { p.devices[0].tensors[0].index = 5; }},
      {"view base", [](Plan &p) { DevicePlanBuilder(p.devices[0]).view(40, DType::F32, {2}); }},
      {"exceeds its base",
       [](Plan &p) {
         DevicePlanBuilder(p.devices[0]).view(2, DType::F32, {-1, 9});
       }},
      {"kv_bytes_per_token", [](Plan &p) { p.devices[0].kvBytesPerToken = 1; }},
      {"not aligned to its f32", [](Plan &p) { p.devices[0].tensors[2].offset = 2; }},
      {"not a multiple of 4",
       [](Plan &p) {
         p.devices[0].weights[0].offset = 2;
         p.devices[0].weightBytes += 2;
       }},
      {"id 7 differs", [](Plan &p) { p.devices[0].tensors[1].id = 7; }},
      {"only dim 0 may be -1",
       [](Plan &p) {
         p.devices[0].tensors[2].shape = {8, -1};
       }},
      {"writes read-only", [](Plan &p) { p.devices[0].steps[1].outputs[0] = 1; }},
      {"logits must be",
       [](Plan &p) {
         p.devices[0].tensors[4].shape = {-1, 7};
       }},
      {"special token id", [](Plan &p) { p.tokenizer.eosId = 17; }},
      {"no devices", [](Plan &p) { p.devices.clear(); }},
      {"max_batch", [](Plan &p) { p.model.maxBatch = 0; }},
  };
  for (const Case &c : cases) {
    Plan p = plan;
    c.edit(p);
    std::string e = loadError(p);
    EXPECT_NE(e.find(c.expect), std::string::npos) << "expected '" << c.expect << "', got '" << e << "'";
    EXPECT_NE(e.find("x.plan"), std::string::npos) << e;
  }
}

TEST_F(PlanTest, GgufCheckAcceptsTheSameFile) {
  auto r = checkPlanGguf(plan);
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(*r, gguf);
}

TEST_F(PlanTest, MissingGgufIsNamed) {
  std::remove(gguf.c_str());
  auto r = checkPlanGguf(plan);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find(gguf), std::string::npos);
  EXPECT_NE(r.message().find("missing"), std::string::npos) << r.message();
}

TEST_F(PlanTest, ChangedGgufIsDetected) {
  // Same size, one weight byte changed in the sampled data: the fingerprint must differ.
  std::vector<uint8_t> edited = ggufBytes;
  edited[edited.size() - 3] ^= 0x40;
  writeBytes(gguf, edited);
  auto r = checkPlanGguf(plan);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("changed since the plan was compiled"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("tpc compile"), std::string::npos);
  // A changed metadata byte too.
  edited = ggufBytes;
  edited[40] ^= 1;
  writeBytes(gguf, edited);
  EXPECT_FALSE(checkPlanGguf(plan));
  // And a different size.
  edited = ggufBytes;
  edited.push_back(0);
  writeBytes(gguf, edited);
  auto s = checkPlanGguf(plan);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("size"), std::string::npos) << s.message();
}

TEST(PlanFingerprint, SamplesLargeFilesAndIsStable) {
  // A 3 MiB file: the fingerprint reads samples, so a change inside a sample changes it and a change far
  // from every sample (and from the header) does not — the documented trade-off for 30 GB files.
  std::string path = tempPath("big.gguf");
  std::vector<uint8_t> b = makeGguf(8, 8);
  size_t header = b.size() - 256;
  b.resize(3u << 20, 0x11);
  writeBytes(path, b);
  auto a = ggufFingerprint(path);
  ASSERT_TRUE(a) << a.message();
  EXPECT_EQ(*a, *ggufFingerprint(path));
  std::vector<uint8_t> c = b;
  c[header + 5] ^= 1; // inside sample 0
  writeBytes(path, c);
  EXPECT_NE(*a, *ggufFingerprint(path));
  c = b;
  uint64_t dataLen = b.size() - header;
  size_t gap = header + (dataLen - 65536) * 1 / 15 - 1000; // between samples 0 and 1
  c[gap] ^= 1;
  writeBytes(path, c);
  EXPECT_EQ(*a, *ggufFingerprint(path));
  std::remove(path.c_str());
}

} // namespace

#include "runtime/plan/PlanSummary.h"

namespace {

TEST_F(PlanTest, SummaryCountsMemoryOpsAndTraffic) {
  std::vector<DeviceSummary> s = summarizeDevices(plan);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].weightBytes, 4u * 8 * 4);
  EXPECT_EQ(s[1].steps, 3u);
  EXPECT_EQ(s[1].collectives, 1u);
  EXPECT_EQ(s[1].collectiveBytesPerToken, 8u * 4); // all_gather output [T, 8] f32
  EXPECT_EQ(s[0].opCounts.size(), 3u);
  std::string text = describePlan(plan, 100);
  EXPECT_NE(text.find("device 1 (cpu): weights 128 B"), std::string::npos) << text;
  EXPECT_NE(text.find("KV 16 B per token = 1.6 KiB for ctx 100"), std::string::npos) << text;
  EXPECT_NE(text.find("all_gather 1"), std::string::npos) << text;
}

} // namespace
