//===- PlanTest.cpp - plan format round trip and every loader error -------===//
//
// Builds plans through the PlanFormat structs, writes them with serializePlan() and loads them back, then
// damages them in every way the loader must catch: truncation, flipped bytes, a foreign file, a newer
// schema, out-of-range ids/offsets/pieces, mismatched collectives, a missing or changed GGUF. The GGUF is a
// small valid file written here (GGUF v3 header, one tensor).
//===----------------------------------------------------------------------===//
#include "runtime/plan/PlanIO.h"
#include "runtime/plan/StepParams.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
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
  p.tokenizer.chatTemplate = "{{ messages }}";
  p.tokenizer.chatTemplateToolUse = "{{ tools }}";
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
    b.addKv({0, 1, 4, 4, GGMLType::F16, GGMLType::F16, Placement::Device});
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
  EXPECT_EQ(r->tokenizer.chatTemplate, "{{ messages }}");
  EXPECT_EQ(r->tokenizer.chatTemplateToolUse, "{{ tools }}");
  ASSERT_EQ(r->devices.size(), 2u);
  const DevicePlan &d1 = r->devices[1];
  ASSERT_EQ(d1.weights.size(), 1u);
  EXPECT_EQ(d1.weights[0].pieces[0].fileOffset, plan.devices[1].weights[0].pieces[0].fileOffset);
  EXPECT_EQ(d1.weights[0].shape, (std::vector<int64_t>{4, 8}));
  ASSERT_EQ(d1.steps.size(), 3u);
  EXPECT_EQ(d1.steps[2].op, OpKind::AllGather);
  EXPECT_EQ(d1.steps[2].ints, std::vector<int64_t>{1});
  EXPECT_EQ(d1.tensors[2].shape, (std::vector<int64_t>{-1, 8}));
  EXPECT_EQ(d1.kv[0].typeK, GGMLType::F16);
  EXPECT_EQ(d1.kv[0].typeV, GGMLType::F16);
  EXPECT_EQ(serializePlan(*r), serializePlan(plan));
}

TEST_F(PlanTest, CacheTypesRoundTripAndSizeTheCache) {
  // v8: a storage type per half. Head dims of 64 / 32: q8_0 K is 2 blocks of 34 bytes per head, q4_0 V
  // one block of 18; kvBytesPerToken must be what the plan says (validatePlan compares).
  for (DevicePlan &d : plan.devices) {
    KvCache &c = d.kv[0];
    c.headDimK = 64, c.headDimV = 32, c.typeK = GGMLType::Q8_0, c.typeV = GGMLType::Q4_0;
    EXPECT_EQ(kvCellBytesK(c), 68u);
    EXPECT_EQ(kvCellBytesV(c), 18u);
    d.kvBytesPerToken = kvBytesPerPosition(c);
  }
  ASSERT_TRUE(validatePlan(plan).empty()) << validatePlan(plan)[0];
  auto r = parsePlan(serializePlan(plan).data(), serializePlan(plan).size(), "q.plan");
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->devices[1].kv[0].typeK, GGMLType::Q8_0);
  EXPECT_EQ(r->devices[1].kv[0].typeV, GGMLType::Q4_0);
  EXPECT_EQ(r->devices[1].kvBytesPerToken, 68u + 18u);
  // A quantized half whose head dim the 32-value blocks do not tile, and a type a cache cannot have.
  Plan odd = plan;
  odd.devices[0].kv[0].headDimV = 48;
  odd.devices[0].kvBytesPerToken = kvBytesPerPosition(odd.devices[0].kv[0]);
  EXPECT_NE(loadError(odd).find("quantized halves need head dims that are multiples of 32"),
            std::string::npos)
      << loadError(odd);
  Plan k4 = plan;
  k4.devices[0].kv[0].typeK = GGMLType::Q4_K;
  EXPECT_NE(
      loadError(k4).find("K half of type q4_K is not a cache type this tpc runs (f32, f16, q8_0, q4_0: tpc "
                         "compile --cache-type-k)"),
      std::string::npos)
      << loadError(k4);
  Plan v99 = plan;
  v99.devices[1].kv[0].typeV = static_cast<GGMLType>(99); // no ggml type at all
  EXPECT_NE(loadError(v99).find("V half of type 99 is not a cache type"), std::string::npos)
      << loadError(v99);
}

TEST_F(PlanTest, SchemaV7CachesTakeTheirOneDtypeForBothHalves) {
  // Before v8 a cache had one dtype: F32 or F16 for both halves. The v8 writer still writes it (the K
  // half's, f32 or f16), so a v7 plan, which has no type_k / type_v, reads it back for both.
  for (GGMLType t : {GGMLType::F32, GGMLType::F16}) {
    Plan v7 = plan;
    v7.schemaVersion = 7;
    for (DevicePlan &d : v7.devices) {
      d.kv[0].typeK = d.kv[0].typeV = t;
      d.kvBytesPerToken = kvBytesPerPosition(d.kv[0]);
    }
    const std::vector<uint8_t> bytes = serializePlan(v7);
    auto r = parsePlan(bytes.data(), bytes.size(), "v7.plan");
    ASSERT_TRUE(r) << r.message();
    EXPECT_EQ(r->devices[0].kv[0].typeK, t);
    EXPECT_EQ(r->devices[0].kv[0].typeV, t);
  }
  // A v7 reader of a v8 plan with quantized halves would see f16 in `dtype` and size the cache wrong:
  // the version check refuses it first (NewerSchemaNamesBothVersions).
}

TEST_F(PlanTest, CommDtypeRoundTripsAndOlderPlansLoadAsF32) {
  // v9 keeps --comm-dtype; a v8 plan (no such field) runs with f32 payloads, as it was compiled for.
  Plan bf16 = plan;
  bf16.commDtype = CommDtype::BF16;
  std::vector<uint8_t> bytes = serializePlan(bf16);
  auto r = parsePlan(bytes.data(), bytes.size(), "v9.plan");
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->commDtype, CommDtype::BF16);
  Plan v8 = bf16;
  v8.schemaVersion = 8;
  bytes = serializePlan(v8);
  r = parsePlan(bytes.data(), bytes.size(), "v8.plan");
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->commDtype, CommDtype::F32);
  // A value this tpc does not know is refused by name, not run as something else.
  Plan bad = plan;
  bad.commDtype = static_cast<CommDtype>(7);
  bytes = serializePlan(bad);
  r = parsePlan(bytes.data(), bytes.size(), "bad.plan");
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("comm_dtype 7"), std::string::npos) << r.message();
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
      {"outside the device activation arena", [](Plan &p) { p.devices[0].tensors[2].offset = 1000; }},
      {"outside the device activation arena", [](Plan &p) { p.devices[0].tensors[2].offset = ~0ull - 3; }},
      // A host-placed activation is checked against the host arena, which this plan does not have.
      {"outside the host activation arena (0 bytes)",
       [](Plan &p) { p.devices[0].tensors[2].placement = Placement::Host; }},
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

// A pipeline plan (v9): stages split the devices, Send/Recv pair up by position between two devices of
// different stages with the same dtype and shape; every violation is one line naming the devices.
TEST_F(PlanTest, PipelineStagesRoundTripAndTheirTransfersAreChecked) {
  Plan p = plan;
  p.stages = 2; // device 0 is stage 0, device 1 stage 1
  DevicePlanBuilder(p.devices[0]).step(OpKind::Send, {3}, {}, TransferParams{1}.pack().ints, {}, "send");
  DevicePlanBuilder(p.devices[1]).step(OpKind::Recv, {}, {3}, TransferParams{0}.pack().ints, {}, "recv");
  ASSERT_TRUE(validatePlan(p).empty()) << validatePlan(p)[0];
  std::vector<uint8_t> bytes = serializePlan(p);
  auto r = parsePlan(bytes.data(), bytes.size(), "x.plan");
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->stages, 2u);
  EXPECT_EQ(r->devices[0].steps.back().op, OpKind::Send);
  EXPECT_EQ(TransferParams::read(r->devices[1].steps.back()).peer, 0);
  EXPECT_EQ(devicesPerStage(*r), 1u);
  EXPECT_EQ(stageOf(*r, 1), 1);
  // A plan before v9 has one stage.
  EXPECT_EQ(plan.stages, 1u);

  struct Case {
    const char *expect;
    void (*edit)(Plan &);
  };
  const Case cases[] = {
      {"3 pipeline stages do not divide the plan's 2 devices", [](Plan &q) { q.stages = 3; }},
      {"peer 0 is not a device of another stage",
       [](Plan &q) { q.devices[0].steps.back().ints = TransferParams{0}.pack().ints; }},
      {"peer 7 is not a device of another stage",
       [](Plan &q) { q.devices[1].steps.back().ints = TransferParams{7}.pack().ints; }},
      {"device 0 sends 1 tensors to device 1, which receives 0", [](Plan &q) { q.devices[1].steps.pop_back(); }},
      {"the sent and received tensors differ in dtype or shape",
       [](Plan &q) { q.devices[1].steps.back().outputs = {2}; }},
      // One stage: the two devices meet at their collectives again, and a transfer has no other stage.
      {"is not a device of another stage", [](Plan &q) { q.stages = 1; }},
  };
  for (const Case &c : cases) {
    Plan q = p;
    c.edit(q);
    std::string e = loadError(q);
    EXPECT_NE(e.find(c.expect), std::string::npos) << "expected '" << c.expect << "', got '" << e << "'";
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

/// A GGUF whose metadata is larger than the fingerprint's first read (a 262k-token vocabulary is ~6 MB):
/// a 3 MiB string array before one tensor, then 2 MiB of tensor data.
std::vector<uint8_t> bigHeaderGguf(size_t &headerEnd) {
  std::vector<uint8_t> b;
  put32(b, 0x46554747u);
  put32(b, 3);
  put64(b, 1); // tensors
  put64(b, 2); // kv
  putStr(b, "general.architecture");
  put32(b, 8);
  putStr(b, "llama");
  putStr(b, "tokenizer.ggml.tokens");
  put32(b, 9); // array
  put32(b, 8); // of strings
  const uint64_t n = 3u << 18;
  put64(b, n);
  for (uint64_t i = 0; i < n; ++i)
    putStr(b, i % 2 ? "tok1" : "tok2"); // 12 bytes each
  putStr(b, "w");
  put32(b, 2);
  put64(b, 1024);
  put64(b, 512);
  put32(b, 0);
  put64(b, 0);
  headerEnd = b.size(); // the fingerprint hashes the header up to the end of the tensor infos
  while (b.size() % 32)
    b.push_back(0);
  std::mt19937 rng(3);
  for (int i = 0; i < 512 * 1024; ++i)
    put32(b, rng());
  return b;
}

TEST(PlanFingerprint, CatchesAnEditedHeaderByteOrSampledDataByte) {
  // What the fingerprint covers: the size, every byte of the header (metadata and tensor infos, here
  // past the first MiB it reads), and 16 samples of 64 KiB evenly spaced over the data. One changed
  // byte anywhere in those is caught. What it cannot catch: an edit of the same size that touches only
  // data bytes between the samples (about (data - 1 MiB) / data of the data region: most of a large
  // file), e.g. a re-quantized tensor written in place. Catching those would need a hash of the whole
  // file, which for a 30 GB model is seconds of reading at every start.
  std::string path = tempPath("vocab.gguf");
  size_t headerEnd = 0;
  const std::vector<uint8_t> b = bigHeaderGguf(headerEnd);
  ASSERT_GT(headerEnd, 3u << 20);
  writeBytes(path, b);
  auto base = ggufFingerprint(path);
  ASSERT_TRUE(base) << base.message();
  EXPECT_EQ(*base, *ggufFingerprint(path)); // stable
  // The fingerprint with byte `at` changed (in place, then put back).
  auto edited = [&](size_t at) {
    auto poke = [&](uint8_t v) {
      std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
      f.seekp(static_cast<std::streamoff>(at));
      f.put(static_cast<char>(v));
    };
    poke(b[at] ^ 0x20);
    auto fp = ggufFingerprint(path);
    poke(b[at]);
    EXPECT_TRUE(fp) << fp.message();
    return fp ? *fp : *base;
  };
  // Header bytes: in the first MiB, at 2 MiB, in the last tensor info's offset field.
  for (size_t at : {size_t(100), size_t(2u << 20), headerEnd - 1})
    EXPECT_NE(edited(at), *base) << "header byte " << at;
  // The first and the last byte of each sample.
  const uint64_t dataLen = b.size() - headerEnd, sample = 64 * 1024;
  for (int i = 0; i < 16; ++i) {
    const uint64_t off = headerEnd + (dataLen - sample) * i / 15;
    EXPECT_NE(edited(off), *base) << "sample " << i << " first byte";
    EXPECT_NE(edited(off + sample - 1), *base) << "sample " << i << " last byte";
  }
  // The blind spot, stated above: a byte between samples 3 and 4.
  const uint64_t gap = headerEnd + (dataLen - sample) * 3 / 15 + sample + 100;
  EXPECT_EQ(edited(gap), *base);
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

/// memoryAt, the one source of every memory figure: a sliding-window cache counts its ring (window +
/// max_batch positions, at most the context), the total is weights + KV + activations + logits rows, and
/// the plan's default context is used when none is given. blockCount counts the blk.N of step names.
TEST_F(PlanTest, MemoryAtCountsRingsAndTotals) {
  KvCache ring{1, 1, 4, 4, GGMLType::F16, GGMLType::F16, Placement::Device};
  ring.window = 8;
  DevicePlanBuilder(plan.devices[0]).addKv(ring);
  const std::vector<DeviceMemory> at100 = memoryAt(plan, 100);
  ASSERT_EQ(at100.size(), 2u);
  EXPECT_EQ(at100[0].kvBytes, 16u * 100 + 16u * (8 + 4)); // the full cache, and the ring of 12 positions
  EXPECT_EQ(at100[1].kvBytes, 16u * 100);
  const std::vector<DeviceSummary> s = summarizeDevices(plan);
  for (size_t d = 0; d < 2; ++d)
    EXPECT_EQ(at100[d].totalBytes,
              s[d].weightBytes + at100[d].kvBytes + s[d].activationBytes + s[d].logitsBytes);
  EXPECT_EQ(at100[0].logitsBytes, 4u * 8 * 4); // max_batch rows of n_vocab floats (no output-rows input)
  EXPECT_EQ(memoryAt(plan, 10)[0].kvBytes, 16u * 10 + 16u * 10); // a ring never exceeds the context
  EXPECT_EQ(memoryAt(plan)[0].ctx, plan.model.defaultCtx);
  EXPECT_EQ(at100[0].hostTotalBytes, 0u);
  std::string text = describePlan(plan, 100);
  EXPECT_NE(text.find(fmt::format("for ctx 100; total {} ({} bytes)", bytesStr(at100[0].totalBytes),
                                  at100[0].totalBytes)),
            std::string::npos)
      << text;

  EXPECT_EQ(blockCount(plan), 0);
  plan.devices[0].steps[0].name = "blk.0.get_rows";
  plan.devices[0].steps[1].name = "blk.12.matmul";
  plan.devices[1].steps[1].name = "blk.12.matmul";
  plan.devices[1].steps[2].name = "output.all_gather";
  EXPECT_EQ(blockCount(plan), 2);
}

} // namespace

namespace {

/// `plan` with host placement on every device: the KV cache on the host, a second slice of "w" kept in host
/// memory, and a host matmul between two copies (device -> host, host -> device), plus a host view.
/// Returns the ids of the host activation, the host view and the host weight tensor of device 0.
struct HostIds {
  int32_t h, hv, wh, yh, back;
};
HostIds addHostPart(Plan &p) {
  HostIds ids{};
  for (DevicePlan &dev : p.devices) {
    DevicePlanBuilder b(dev);
    WeightSlice w = dev.weights[0];
    w.offset = dev.weightBytes;
    w.placement = Placement::Host;
    dev.weightBytes += w.bytes;
    const int32_t wh = b.weight(b.addWeight(w));
    // The host tensors have offsets of their own, in the host arena.
    const int32_t h = b.activation(DType::F32, {-1, 8}, 0, Placement::Host);
    const int32_t hv = b.view(h, DType::F32, {-1, 2, 4});
    const int32_t yh = b.activation(DType::F32, {-1, 4}, 4 * 8 * 4, Placement::Host);
    dev.hostActivationBytes = 4 * 8 * 4 + 4 * 4 * 4;
    const int32_t back = b.activation(DType::F32, {-1, 4}, dev.activationBytes);
    dev.activationBytes += 4 * 4 * 4;
    dev.kv[0].placement = Placement::Host;
    b.step(OpKind::Copy, {2}, {h}, {}, {}, "to_host", Placement::Host);
    b.step(OpKind::Matmul, {h, wh}, {yh}, {}, {}, "host_matmul", Placement::Host);
    b.step(OpKind::Copy, {yh}, {back}, {}, {}, "to_device", Placement::Device);
    ids = {h, hv, wh, yh, back};
  }
  return ids;
}

/// Every problem validatePlan() finds, joined, for substring checks.
std::string allErrors(const Plan &p) {
  std::string all;
  for (const std::string &e : validatePlan(p))
    all += e + "\n";
  return all;
}

TEST_F(PlanTest, RoundTripKeepsPlacement) {
  HostIds ids = addHostPart(plan);
  ASSERT_TRUE(validatePlan(plan).empty()) << allErrors(plan);
  ASSERT_TRUE(writePlan(plan, planPath));
  auto r = loadPlan(planPath);
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->schemaVersion, kPlanSchemaVersion);
  for (const DevicePlan &d : r->devices) {
    EXPECT_EQ(d.hostActivationBytes, 192u);
    ASSERT_EQ(d.weights.size(), 2u);
    EXPECT_EQ(d.weights[0].placement, Placement::Device);
    EXPECT_EQ(d.weights[1].placement, Placement::Host);
    EXPECT_EQ(d.kv[0].placement, Placement::Host);
    EXPECT_EQ(d.tensors[ids.h].placement, Placement::Host);
    EXPECT_EQ(d.tensors[ids.hv].placement, Placement::Host); // a view inherits its base's side
    EXPECT_EQ(d.tensors[ids.back].placement, Placement::Device);
    EXPECT_EQ(tensorPlacement(d, ids.wh), Placement::Host);
    EXPECT_EQ(tensorPlacement(d, 0), Placement::Device);
    ASSERT_EQ(d.steps.size(), 6u);
    EXPECT_EQ(d.steps[1].placement, Placement::Device);
    EXPECT_EQ(d.steps[3].placement, Placement::Host); // the copy to the host runs on (writes) the host
    EXPECT_EQ(d.steps[4].placement, Placement::Host);
    EXPECT_EQ(d.steps[5].placement, Placement::Device);
  }
  EXPECT_EQ(serializePlan(*r), serializePlan(plan));
}

TEST_F(PlanTest, SchemaV2PlansStillLoadWithDevicePlacement) {
  // A v2 file has no step/tensor/weight placement (the fields are absent, FlatBuffers reads the default);
  // a v2 plan compiled with --no-kv-offload has only the cache on the host, read by device steps.
  plan.schemaVersion = 2;
  plan.devices[0].kv[0].placement = Placement::Host;
  auto r = parsePlan(serializePlan(plan).data(), serializePlan(plan).size(), "v2.plan");
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->schemaVersion, 2u);
  EXPECT_EQ(r->devices[0].kv[0].placement, Placement::Host);
  for (const DevicePlan &d : r->devices) {
    for (const Step &s : d.steps)
      EXPECT_EQ(s.placement, Placement::Device);
    for (const TensorDesc &t : d.tensors)
      EXPECT_EQ(t.placement, Placement::Device);
    EXPECT_EQ(d.weights[0].placement, Placement::Device);
  }
  // Default placements add no bytes: the v3 writer writes such a plan exactly as v2 did, but for the
  // version number.
  Plan v3 = plan;
  v3.schemaVersion = 3;
  EXPECT_EQ(serializePlan(v3).size(), serializePlan(plan).size());
}

TEST_F(PlanTest, SchemaV3HostActivationsShareTheDeviceOffsetSpace) {
  // v3 had no host arena of its own: host activations sat at offsets of the one shared space, so the loader
  // gives such a plan a host arena as large as the device's, which holds them where they are.
  Plan plain = plan;
  HostIds ids = addHostPart(plan);
  Plan v3 = plan;
  v3.schemaVersion = 3;
  for (DevicePlan &d : v3.devices) {
    const uint64_t shift = d.activationBytes; // host tensors after the device's, as the v3 compiler left them
    for (TensorDesc &t : d.tensors)
      if (t.storage == Storage::Activation && t.placement == Placement::Host)
        t.offset += shift;
    d.activationBytes += d.hostActivationBytes;
    d.hostActivationBytes = 0; // not written: a v3 file has no such field
  }
  std::vector<uint8_t> bytes = serializePlan(v3);
  auto r = parsePlan(bytes.data(), bytes.size(), "v3.plan");
  ASSERT_TRUE(r) << r.message();
  for (const DevicePlan &d : r->devices) {
    EXPECT_EQ(d.activationBytes, 448u);
    EXPECT_EQ(d.hostActivationBytes, 448u);
    EXPECT_EQ(d.tensors[ids.yh].offset, 256u + 128u);
  }
  // A v3 plan with no host activation gets no host arena.
  plain.schemaVersion = 3;
  plain.devices[0].kv[0].placement = Placement::Host; // --no-kv-offload alone: a cache, no activation
  bytes = serializePlan(plain);
  r = parsePlan(bytes.data(), bytes.size(), "v3.plan");
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->devices[0].hostActivationBytes, 0u);
  // A v4 plan states its host arena; one too small for its host tensors is refused, naming the tensor.
  Plan small = plan;
  small.devices[1].hostActivationBytes = 128;
  EXPECT_NE(allErrors(small).find("device 1: tensor " + std::to_string(ids.yh) +
                                  ": [128, +64) lies outside the host activation arena (128 bytes)"),
            std::string::npos)
      << allErrors(small);
}

TEST_F(PlanTest, PlacementErrorsNameTheStepAndTensor) {
  HostIds ids = addHostPart(plan);
  ASSERT_TRUE(validatePlan(plan).empty()) << allErrors(plan);
  struct Case {
    const char *expect;
    std::function<void(Plan &)> edit;
  };
  const Case cases[] = {
      {"device 0: step 1 'matmul' (matmul) on the host: input tensor 2 (activation) is on the device; a "
       "step's "
       "operands are on its side (a copy moves them)",
       [](Plan &p) { p.devices[0].steps[1].placement = Placement::Host; }},
      {"device 0: step 1 'matmul' (matmul) on the host: tensor 0 (weight 'w') is a device slice; a host step "
       "reads host slices",
       [](Plan &p) { p.devices[0].steps[1].placement = Placement::Host; }},
      {"device 1: step 4 'host_matmul' (matmul) on the device: tensor 5 (weight 'w') is a host slice; a "
       "device "
       "step reads device slices",
       [](Plan &p) { p.devices[1].steps[4].placement = Placement::Device; }},
      {"device 0: step 2 'all_gather' (all_gather) on the host: collectives run on the device",
       [](Plan &p) { p.devices[0].steps[2].placement = Placement::Host; }},
      {"device 1: step 2 'all_gather' (all_gather) on the device: tensor 3 (activation) is on the host; "
       "collectives run on device-placed tensors",
       [](Plan &p) { p.devices[1].tensors[3].placement = Placement::Host; }},
      {"device 0: step 3 'to_host' (copy) on the host: writes tensor 2 (activation) on the device; a copy "
       "writes its own side",
       [](Plan &p) { p.devices[0].steps[3].outputs = {2}; }},
      {"device 0: tensor 7: view on the device of tensor 6 on the host; a view is on its base's side",
       [](Plan &p) { p.devices[0].tensors[7].placement = Placement::Device; }},
      {"device 1: step 6 'host_attention' (attention) on the host: kv cache 0 (layer 0) is device-placed; a "
       "host "
       "step needs a host-placed cache",
       [](Plan &p) {
         p.devices[1].kv[0].placement = Placement::Device;
         DevicePlanBuilder(p.devices[1])
             .step(OpKind::Attention, {6, 6, 6, 6}, {8}, {0, 0}, {1, 0}, "host_attention", Placement::Host);
       }},
      {"device 0: step 0 (get_rows): unknown placement 7",
       [](Plan &p) { p.devices[0].steps[0].placement = static_cast<Placement>(7); }},
      {"device 0: weight 1 'w': unknown placement 2",
       [](Plan &p) { p.devices[0].weights[1].placement = static_cast<Placement>(2); }},
  };
  ASSERT_EQ(ids.wh, 5);
  ASSERT_EQ(ids.h, 6);
  ASSERT_EQ(ids.hv, 7);
  for (const Case &c : cases) {
    Plan p = plan;
    c.edit(p);
    std::string all = allErrors(p);
    EXPECT_NE(all.find(std::string(c.expect) + "\n"), std::string::npos)
        << "expected '" << c.expect << "', got:\n"
        << all;
    std::string e = loadError(p); // the loader reports the first problem on one line
    EXPECT_NE(e.find("x.plan"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // A device step may read a host-placed cache (--no-kv-offload: mapped host memory).
  Plan ok = plan;
  DevicePlanBuilder(ok.devices[0])
      .step(OpKind::Attention, {2, 2, 2, 2}, {3}, {0, 0}, {1, 0}, "dev_attention");
  EXPECT_EQ(allErrors(ok), "");
}

TEST_F(PlanTest, SummaryCountsTheWeightBytesOfOneDecodedToken) {
  // get_rows reads the row of the one token (32 of w's 128 bytes), the matmul all of w.
  EXPECT_EQ(summarizeDevices(plan)[0].decodeWeightBytes, 32u + 128u);
  // mul_mat_id with ids [T, 2] reads 2 of the 4 experts (each [2, 8] f32 = 64 bytes); a get_rows of a
  // per-expert table with those ids reads 2 of its 4 rows.
  DevicePlan &dev = plan.devices[1];
  DevicePlanBuilder b(dev);
  const int32_t experts = b.weight(b.addWeight({"e", GGMLType::F32, {4, 2, 8}, 0, 4 * 2 * 8 * 4, {}}));
  const int32_t scales = b.weight(b.addWeight({"s", GGMLType::F32, {4, 1}, 0, 4 * 4, {}}));
  const int32_t ids = b.activation(DType::I32, {-1, 2}, 0), x = b.activation(DType::F32, {-1, 8}, 0);
  const int32_t y = b.activation(DType::F32, {-1, 2, 2}, 0), sc = b.activation(DType::F32, {-1, 2, 1}, 0);
  b.step(OpKind::MulMatId, {x, experts, ids}, {y});
  b.step(OpKind::GetRows, {scales, ids}, {sc});
  std::vector<DeviceSummary> s = summarizeDevices(plan);
  EXPECT_EQ(s[1].decodeWeightBytes, 32u + 128u + 2 * 64u + 2 * 4u);
  EXPECT_EQ(s[1].hostDecodeWeightBytes, 0u);
  // A host step's weights count on the host side.
  addHostPart(plan);
  s = summarizeDevices(plan);
  EXPECT_EQ(s[0].decodeWeightBytes, 32u + 128u);
  EXPECT_EQ(s[0].hostDecodeWeightBytes, 128u);
  EXPECT_NE(describePlan(plan).find("a decoded token reads 160 B of weights (+ 128 B on the host)\n"),
            std::string::npos)
      << describePlan(plan);
}

TEST_F(PlanTest, SummarySeparatesHostBytesAndSteps) {
  addHostPart(plan);
  std::vector<DeviceSummary> s = summarizeDevices(plan);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].weightBytes, 128u);     // the device slice of w
  EXPECT_EQ(s[0].hostWeightBytes, 128u); // its host slice
  // The arenas as the plan sizes them: 192 bytes of device activations plus the copy back [4,4]; the host
  // arena holds h [4,8] and yh [4,4].
  EXPECT_EQ(s[0].activationBytes, 256u);
  EXPECT_EQ(s[0].hostActivationBytes, 192u);
  EXPECT_EQ(s[0].kvBytesPerToken, 0u);
  EXPECT_EQ(s[0].hostKvBytesPerToken, 16u);
  EXPECT_EQ(s[0].hostSteps, 2u);
  EXPECT_EQ(s[0].logitsBytes, 4u * 8u * 4u); // max_batch 4 rows of n_vocab 8 floats, outside the arenas
  std::string text = describePlan(plan, 100);
  // Each side ends with memoryAt's total: 128 + 0 + 256 + 128 on the device, 128 + 1600 + 192 on the host.
  EXPECT_NE(
      text.find("device 0 (cpu): weights 128 B, activations 256 B, logits rows 128 B, KV 0 B per token = "
                "0 B for ctx 100; total 512 B (512 bytes)\n"
                "  host: weights 128 B, activations 192 B, KV 16 B per token = 1.6 KiB for ctx 100; "
                "2 host steps; total 1.9 KiB (1920 bytes)\n"),
      std::string::npos)
      << text;
  // Without host placement there is no host line.
  Plan device = plan;
  for (DevicePlan &d : device.devices) {
    d.steps.resize(3);
    d.weights.resize(1);
    d.tensors.resize(5);
    d.kv[0].placement = Placement::Device;
    d.hostActivationBytes = 0;
  }
  ASSERT_TRUE(validatePlan(device).empty()) << allErrors(device);
  EXPECT_EQ(describePlan(device, 100).find("host:"), std::string::npos);
}

} // namespace
