//===- FixtureTest.cpp - the GGUF reader on the shared fixture models -------===//
//
// Expected values are written down from ../shared/fixtures/README.md and each NAME.ref.json
// (`tensor_types`, `arch`), not read from the files under test. Skipped (visibly) when TPC_SHARED_DIR has
// no fixtures.
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <filesystem>
#include <map>
#include <set>

using namespace tpc;
using namespace tpc::gguf;
using namespace tpc::gguf::test;

namespace {
struct Fixture {
  const char *name;
  const char *arch;
  uint32_t blockCount;
  uint32_t fileType;
  std::map<std::string, size_t> typeCounts; ///< ref.json tensor_types
  uint32_t contextLength = 4096;            ///< README: 131072 for glm4moe and gpt-oss
};

const std::vector<Fixture> &fixtures() {
  static const std::vector<Fixture> f = {
      {"tiny-llama", "llama", 4, 0, {{"f32", 39}}},
      {"tiny-llama-Q8_0", "llama", 4, 7, {{"f32", 9}, {"q8_0", 30}}},
      {"tiny-llama-Q4_K_M", "llama", 4, 15, {{"f32", 9}, {"q4_K", 23}, {"q5_K", 2}, {"q6_K", 5}}},
      {"tiny-qwen3", "qwen3", 3, 0, {{"f32", 35}}},
      {"tiny-qwen3moe", "qwen3moe", 3, 0, {{"f32", 39}}},
      {"tiny-qwen3moe-Q8_0", "qwen3moe", 3, 7, {{"f32", 16}, {"q8_0", 23}}},
      {"tiny-qwen3moe-Q4_K_M",
       "qwen3moe",
       3,
       15,
       {{"f32", 16}, {"q4_K", 12}, {"q5_K", 3}, {"q6_K", 2}, {"q8_0", 6}}},
      {"tiny-qwen3moe-gu", "qwen3moe", 3, 0, {{"f32", 36}}},
      {"tiny-gemma4moe", "gemma4", 6, 0, {{"f32", 133}}},
      {"tiny-gemma3", "gemma3", 6, 0, {{"f32", 80}}},
      // The architectures and weight types of issues 28-30 (read here; compiling them is those issues').
      // block_count: README, "8 trunk layers + 1 MTP block" (qwen35*) and "4 layers + NextN block" (glm4moe).
      {"tiny-qwen35moe", "qwen35moe", 9, 0, {{"f32", 169}}},
      {"tiny-qwen35moe-long", "qwen35moe", 9, 0, {{"f32", 169}}},
      {"tiny-qwen35moe-Q8_0", "qwen35moe", 9, 7, {{"f32", 70}, {"q8_0", 99}}},
      {"tiny-qwen35moe-Q4_K_M",
       "qwen35moe",
       9,
       15,
       {{"f32", 70}, {"q4_K", 71}, {"q5_0", 8}, {"q5_K", 3}, {"q6_K", 1}, {"q8_0", 16}}},
      {"tiny-qwen35", "qwen35", 9, 0, {{"f32", 124}}},
      {"tiny-gptoss", "gpt-oss", 4, 38, {{"f32", 49}, {"mxfp4", 12}, {"q8_0", 18}}, 131072},
      {"tiny-glm4moe", "glm4moe", 5, 0, {{"f32", 89}}, 131072},
      {"tiny-glm4moe-Q4_K_M",
       "glm4moe",
       5,
       15,
       {{"f32", 37}, {"q4_K", 27}, {"q5_0", 5}, {"q5_K", 5}, {"q6_K", 1}, {"q8_0", 14}},
       131072},
      {"tiny-llama-IQ4_XS", "llama", 4, 30, {{"f32", 9}, {"iq4_xs", 25}, {"q5_K", 4}, {"q6_K", 1}}},
      {"tiny-llama-Q3_K_M", "llama", 4, 12, {{"f32", 9}, {"q3_K", 17}, {"q4_K", 10}, {"q5_K", 2}, {"q6_K", 1}}},
      {"tiny-llama-Q2_K", "llama", 4, 10, {{"f32", 9}, {"q2_K", 17}, {"q3_K", 8}, {"q4_K", 4}, {"q6_K", 1}}},
      {"tiny-qwen3moe-IQ4_NL", "qwen3moe", 3, 25, {{"f32", 16}, {"iq4_nl", 17}, {"q8_0", 6}}},
      {"tiny-qwen3moe-Q3_K_S", "qwen3moe", 3, 11, {{"f32", 16}, {"q3_K", 16}, {"q6_K", 1}, {"q8_0", 6}}},
  };
  return f;
}

/// Opens a fixture, or skips the test when the fixtures are absent.
#define OPEN_FIXTURE(var, name)                                                                              \
  std::string dir_##var = fixturesDir();                                                                     \
  if (dir_##var.empty())                                                                                     \
    GTEST_SKIP() << "TPC_SHARED_DIR has no fixtures/ (set it to the shared folder to run this test)";        \
  Expected<std::unique_ptr<GGUFFile>> open_##var = GGUFFile::open(dir_##var + "/" + (name) + ".gguf");       \
  ASSERT_TRUE(open_##var) << open_##var.message();                                                             \
  GGUFFile &var = **open_##var

std::vector<uint64_t> shape(const GGUFFile &f, const std::string &tensor) {
  const TensorInfo *t = f.findTensor(tensor);
  return t ? t->ne : std::vector<uint64_t>{};
}

GGMLType typeOf(const GGUFFile &f, const std::string &tensor) {
  const TensorInfo *t = f.findTensor(tensor);
  EXPECT_NE(t, nullptr) << tensor;
  return t ? t->type : GGMLType::I8;
}
} // namespace

class GGUFFixture : public ::testing::TestWithParam<Fixture> {};

TEST_P(GGUFFixture, HeaderMetadataAndTypeCounts) {
  const Fixture &fx = GetParam();
  OPEN_FIXTURE(f, fx.name);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.find("general.alignment"), nullptr);
  EXPECT_EQ(*f.getString("general.architecture"), fx.arch);
  std::string a = fx.arch;
  EXPECT_EQ(*f.getU32(a + ".block_count"), fx.blockCount);
  EXPECT_EQ(*f.getU32(a + ".context_length"), fx.contextLength);
  EXPECT_EQ(*f.getU32(a + ".embedding_length"), 256u);
  EXPECT_EQ(*f.getU32("general.file_type"), fx.fileType);
  if (fx.fileType != 0)
    EXPECT_EQ(*f.getU32("general.quantization_version"), 2u);
  EXPECT_EQ(*f.getString("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f.getStringArray("tokenizer.ggml.tokens")->size(), 512u);
  EXPECT_EQ(*f.getU32("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(*f.getU32("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_EQ(*f.getBool("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ((*f.getStringArray("tokenizer.ggml.tokens"))[1], "<s>");

  std::map<std::string, size_t> counts;
  size_t total = 0;
  uint64_t end = 0;
  for (const TensorInfo &t : f.tensors()) {
    ++counts[ggmlTypeName(t.type)];
    ++total;
    end = std::max(end, t.fileOffset + t.nbytes);
  }
  EXPECT_EQ(counts, fx.typeCounts);
  size_t expectedTotal = 0;
  for (auto &[type, n] : fx.typeCounts)
    expectedTotal += n;
  EXPECT_EQ(total, expectedTotal);
  EXPECT_LE(end, f.fileSize());
  EXPECT_GT(end + 32, f.fileSize()) << "the last tensor ends within one alignment of the end of the file";
  // Norm weights stay F32 in every file.
  EXPECT_EQ(typeOf(f, "output_norm.weight"), GGMLType::F32);
  EXPECT_EQ(shape(f, "output_norm.weight"), (std::vector<uint64_t>{256}));
  EXPECT_EQ(shape(f, "token_embd.weight"), (std::vector<uint64_t>{256, 512}));
}

INSTANTIATE_TEST_SUITE_P(Shared, GGUFFixture, ::testing::ValuesIn(fixtures()),
                         [](const ::testing::TestParamInfo<Fixture> &info) {
                           std::string n = info.param.name;
                           for (char &c : n)
                             if (!isalnum(static_cast<unsigned char>(c)))
                               c = '_';
                           return n;
                         });

/// Every GGUF in the fixtures folder is covered by the table above (a new fixture fails here until its
/// expected values are written down), and every table entry exists.
TEST(GGUFFixtures, TableCoversTheFolder) {
  std::string dir = fixturesDir();
  if (dir.empty())
    GTEST_SKIP() << "TPC_SHARED_DIR has no fixtures/ (set it to the shared folder to run this test)";
  std::set<std::string> onDisk, inTable;
  for (const auto &e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".gguf")
      onDisk.insert(e.path().stem().string());
  for (const Fixture &fx : fixtures())
    inTable.insert(fx.name);
  EXPECT_EQ(onDisk, inTable);
  EXPECT_EQ(onDisk.size(), 23u);
}

TEST(GGUFFixtures, TinyLlamaShapesAndHparams) {
  OPEN_FIXTURE(f, "tiny-llama");
  // 4 blocks x (attn_norm, q, k, v, output, ffn_norm, gate, up, down) + token_embd, output_norm, output.
  EXPECT_EQ(f.tensors().size(), 4u * 9 + 3);
  EXPECT_EQ(*f.getU32("llama.attention.head_count"), 8u);
  EXPECT_EQ(*f.getU32("llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(*f.getU32("llama.rope.dimension_count"), 32u);
  EXPECT_EQ(*f.getU32("llama.feed_forward_length"), 768u);
  EXPECT_FLOAT_EQ(*f.getF32("llama.rope.freq_base"), 10000.0f);
  EXPECT_FLOAT_EQ(*f.getF32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(f.find("llama.block_count")->type(), ValueType::UInt32);
  EXPECT_EQ(f.find("llama.rope.freq_base")->type(), ValueType::Float32);
  EXPECT_EQ(shape(f, "output.weight"), (std::vector<uint64_t>{256, 512}));
  EXPECT_EQ(shape(f, "blk.0.attn_q.weight"), (std::vector<uint64_t>{256, 256}));
  EXPECT_EQ(shape(f, "blk.3.attn_k.weight"), (std::vector<uint64_t>{256, 64}));
  EXPECT_EQ(shape(f, "blk.3.attn_v.weight"), (std::vector<uint64_t>{256, 64}));
  EXPECT_EQ(shape(f, "blk.1.ffn_gate.weight"), (std::vector<uint64_t>{256, 768}));
  EXPECT_EQ(shape(f, "blk.2.ffn_down.weight"), (std::vector<uint64_t>{768, 256}));
  EXPECT_EQ(f.findTensor("blk.4.attn_q.weight"), nullptr);
  // F32 data is readable in place: the norm weights are 1 + N(0, 0.1).
  const TensorInfo *norm = f.findTensor("blk.0.attn_norm.weight");
  ASSERT_NE(norm, nullptr);
  const float *w = reinterpret_cast<const float *>(f.tensorData(*norm));
  double mean = 0;
  for (size_t i = 0; i < 256; ++i)
    mean += w[i] / 256.0;
  EXPECT_NEAR(mean, 1.0, 0.05);
}

TEST(GGUFFixtures, TinyLlamaQ4KMTypesPerLayer) {
  OPEN_FIXTURE(f, "tiny-llama-Q4_K_M");
  EXPECT_EQ(typeOf(f, "token_embd.weight"), GGMLType::Q4_K);
  EXPECT_EQ(typeOf(f, "output.weight"), GGMLType::Q6_K);
  for (int l = 0; l < 4; ++l) {
    std::string b = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(typeOf(f, b + "attn_q.weight"), GGMLType::Q4_K);
    EXPECT_EQ(typeOf(f, b + "ffn_up.weight"), GGMLType::Q4_K);
    EXPECT_EQ(typeOf(f, b + "attn_v.weight"), l < 2 ? GGMLType::Q5_K : GGMLType::Q6_K) << l;
    EXPECT_EQ(typeOf(f, b + "ffn_down.weight"), l < 2 ? GGMLType::Q4_K : GGMLType::Q6_K) << l;
  }
  const TensorInfo *q = f.findTensor("blk.0.attn_q.weight");
  EXPECT_EQ(q->nbytes, 256u / 256 * 144 * 256);
}

TEST(GGUFFixtures, TinyQwen3TiedOutputAndWideHeads) {
  OPEN_FIXTURE(f, "tiny-qwen3");
  EXPECT_EQ(f.findTensor("output.weight"), nullptr) << "tied output";
  EXPECT_EQ(*f.getU32("qwen3.attention.key_length"), 128u);
  EXPECT_EQ(shape(f, "blk.0.attn_q.weight"), (std::vector<uint64_t>{256, 512}));
  EXPECT_EQ(shape(f, "blk.0.attn_output.weight"), (std::vector<uint64_t>{512, 256}));
  EXPECT_EQ(shape(f, "blk.0.attn_q_norm.weight"), (std::vector<uint64_t>{128}));
  EXPECT_FLOAT_EQ(*f.getF32("qwen3.rope.freq_base"), 1e6f);
}

TEST(GGUFFixtures, TinyQwen3MoeQ4KMTypes) {
  OPEN_FIXTURE(f, "tiny-qwen3moe-Q4_K_M");
  EXPECT_EQ(*f.getU32("qwen3moe.expert_count"), 8u);
  EXPECT_EQ(*f.getU32("qwen3moe.expert_used_count"), 2u);
  EXPECT_EQ(*f.getU32("qwen3moe.expert_feed_forward_length"), 256u);
  EXPECT_EQ(typeOf(f, "output.weight"), GGMLType::Q6_K);
  for (int l = 0; l < 3; ++l) {
    std::string b = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(typeOf(f, b + "attn_v.weight"), GGMLType::Q8_0) << l;
    EXPECT_EQ(typeOf(f, b + "attn_k.weight"), GGMLType::Q8_0) << l;
    EXPECT_EQ(typeOf(f, b + "attn_output.weight"), GGMLType::Q5_K) << l;
    EXPECT_EQ(typeOf(f, b + "ffn_gate_inp.weight"), GGMLType::F32) << l;
    EXPECT_EQ(typeOf(f, b + "ffn_gate_exps.weight"), GGMLType::Q4_K) << l;
    EXPECT_EQ(typeOf(f, b + "ffn_down_exps.weight"), l < 2 ? GGMLType::Q4_K : GGMLType::Q6_K) << l;
    EXPECT_EQ(shape(f, b + "ffn_down_exps.weight"), (std::vector<uint64_t>{256, 256, 8}));
    EXPECT_EQ(shape(f, b + "ffn_gate_inp.weight"), (std::vector<uint64_t>{256, 8}));
  }
  const TensorInfo *d = f.findTensor("blk.2.ffn_down_exps.weight");
  EXPECT_EQ(d->nbytes, 210u * 256 * 8);
}

TEST(GGUFFixtures, TinyQwen3MoeMergedGateUp) {
  OPEN_FIXTURE(f, "tiny-qwen3moe-gu");
  EXPECT_EQ(shape(f, "blk.0.ffn_gate_up_exps.weight"), (std::vector<uint64_t>{256, 512, 8}));
  EXPECT_EQ(f.findTensor("blk.0.ffn_gate_exps.weight"), nullptr);
  EXPECT_EQ(f.findTensor("blk.0.ffn_up_exps.weight"), nullptr);
}

TEST(GGUFFixtures, TinyGemma4MoePerLayerArrays) {
  OPEN_FIXTURE(f, "tiny-gemma4moe");
  EXPECT_EQ(f.find("gemma4.attention.head_count_kv")->elemType(), ValueType::UInt32);
  EXPECT_EQ(*f.getU32Array("gemma4.attention.head_count_kv"), (std::vector<uint32_t>{2, 2, 1, 2, 2, 1}));
  EXPECT_EQ(f.find("gemma4.attention.sliding_window_pattern")->elemType(), ValueType::Bool);
  EXPECT_EQ(*f.getBoolArray("gemma4.attention.sliding_window_pattern"),
            (std::vector<bool>{true, true, false, true, true, false}));
  EXPECT_FALSE(f.getU32("gemma4.attention.head_count_kv")) << "an array is not a scalar";
  EXPECT_EQ(*f.getU32("gemma4.attention.sliding_window"), 8u);
  EXPECT_EQ(*f.getU32("gemma4.attention.key_length"), 128u);
  EXPECT_EQ(*f.getU32("gemma4.attention.key_length_swa"), 64u);
  EXPECT_FLOAT_EQ(*f.getF32("gemma4.final_logit_softcapping"), 30.0f);
  EXPECT_EQ(*f.getU32("gemma4.expert_count"), 8u);
  EXPECT_EQ(*f.getU32("gemma4.expert_feed_forward_length"), 64u);
  EXPECT_EQ(shape(f, "blk.0.ffn_gate_up_exps.weight"), (std::vector<uint64_t>{256, 128, 8}));
  EXPECT_EQ(shape(f, "blk.0.ffn_down_exps.weight"), (std::vector<uint64_t>{64, 256, 8}));
  EXPECT_EQ(shape(f, "blk.0.ffn_down_exps.scale"), (std::vector<uint64_t>{8}));
  EXPECT_EQ(shape(f, "rope_freqs.weight"), (std::vector<uint64_t>{64}));
  EXPECT_NE(f.findTensor("blk.0.attn_v.weight"), nullptr);
  EXPECT_EQ(f.findTensor("blk.2.attn_v.weight"), nullptr) << "global layers have no attn_v";
  EXPECT_EQ(f.findTensor("output.weight"), nullptr) << "tied output";
}

TEST(GGUFFixtures, TinyGemma3MqaShapes) {
  OPEN_FIXTURE(f, "tiny-gemma3");
  EXPECT_EQ(*f.getU32("gemma3.attention.head_count_kv"), 1u);
  EXPECT_EQ(f.find("gemma3.rope.dimension_count"), nullptr);
  EXPECT_EQ(f.find("gemma3.attention.sliding_window_pattern"), nullptr);
  EXPECT_EQ(shape(f, "blk.5.attn_q.weight"), (std::vector<uint64_t>{256, 512}));
  EXPECT_EQ(shape(f, "blk.5.attn_k.weight"), (std::vector<uint64_t>{256, 128}));
  EXPECT_EQ(shape(f, "blk.5.attn_output.weight"), (std::vector<uint64_t>{512, 256}));
  // 6 blocks x 13 tensors (4 norms around attention and FFN + q/k norms + q, k, v, o, gate, up, down).
  EXPECT_EQ(f.tensors().size(), 6u * 13 + 2);
}
