//===- TensorTypeTest.cpp - tpc synth --tensor-type rules and the new weight types ---===//
//
// The rule parser (regex=TYPE lists, errors quoting the rule), the rules' meaning over a planned model
// (the first matching rule wins, only weight matrices, the row fallback applied to the rule's type, a rule
// that types nothing is an error) and the written file (the types read back, every value finite with the
// planned spread, gpt-oss style MXFP4 experts). The block generators of Q2_K, Q3_K, MXFP4, Q4_1 and Q5_1
// are checked for their spread and mean with many blocks, and for the features the fills promise (both
// scale signs in Q3_K, two neighbouring MXFP4 exponents). Rules over the tiny presets reproduce the type
// layouts of the shared fixtures that the reference quantized to Q2_K, Q3_K_M, Q3_K_S, IQ4_XS and IQ4_NL.
//===----------------------------------------------------------------------===//
#include "compiler/gguf/GGUFFile.h"
#include "compiler/synth/Synth.h"
#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/Quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

using namespace tpc;
using namespace tpc::synth;

namespace {

Expected<Synthesizer> plan(const std::string &preset, const std::string &type, const std::string &rules) {
  SynthOptions o;
  o.preset = preset;
  o.type = type;
  o.tensorTypes = rules;
  o.seed = 2;
  return Synthesizer::create(o);
}

std::map<std::string, GGMLType> typesOf(const Synthesizer &s) {
  std::map<std::string, GGMLType> m;
  for (const TensorPlan &t : s.tensors())
    m[t.name] = t.type;
  return m;
}

std::string parseError(const std::string &spec) {
  auto r = parseTensorTypeRules(spec);
  EXPECT_FALSE(bool(r)) << spec;
  return r ? std::string() : r.message();
}

} // namespace

TEST(TensorType, ParsesRules) {
  auto r = parseTensorTypeRules("ffn_down_exps=Q3_K,attn_.*=q4_k,token_embd=Q8_0,_exps=mxfp4");
  ASSERT_TRUE(bool(r)) << r.message();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0].pattern, "ffn_down_exps");
  EXPECT_EQ((*r)[0].type, GGMLType::Q3_K);
  EXPECT_EQ((*r)[1].text, "attn_.*=q4_k");
  EXPECT_EQ((*r)[1].type, GGMLType::Q4_K); // case-insensitive
  EXPECT_EQ((*r)[3].type, GGMLType::MXFP4);
  // The regex is searched, not matched whole (std::regex_search, as llama-quantize).
  EXPECT_TRUE(std::regex_search(std::string("blk.3.attn_q.weight"), (*r)[1].re));
  EXPECT_FALSE(std::regex_search(std::string("blk.3.ffn_up_exps.weight"), (*r)[1].re));
  auto none = parseTensorTypeRules("");
  ASSERT_TRUE(bool(none));
  EXPECT_TRUE(none->empty());
}

TEST(TensorType, ParseErrorsQuoteTheRule) {
  std::string e = parseError("attn_q=Q4_K,ffn_down");
  EXPECT_NE(e.find("--tensor-type rule 'ffn_down': no '='"), std::string::npos) << e;
  e = parseError("attn_q=Q9_K");
  EXPECT_NE(e.find("rule 'attn_q=Q9_K'"), std::string::npos) << e;
  EXPECT_NE(e.find("'Q9_K' is not a ggml type"), std::string::npos) << e;
  EXPECT_NE(e.find("MXFP4"), std::string::npos) << e; // lists what it writes
  e = parseError("attn_q=Q8_K"); // a ggml type, but an activation type synth never writes
  EXPECT_NE(e.find("'Q8_K' is not a ggml type tpc synth writes"), std::string::npos) << e;
  e = parseError("attn_q=Q4_K_M");
  EXPECT_NE(e.find("'Q4_K_M' is a recipe"), std::string::npos) << e;
  e = parseError("attn_(q=Q4_K");
  EXPECT_NE(e.find("rule 'attn_(q=Q4_K': invalid regex 'attn_(q'"), std::string::npos) << e;
  e = parseError("=Q4_K");
  EXPECT_NE(e.find("rule '=Q4_K': empty regex"), std::string::npos) << e;
  e = parseError("attn_q=Q4_K,");
  EXPECT_NE(e.find("has an empty rule"), std::string::npos) << e;
}

// Rules over a planned model: first match wins, vectors and the router stay F32, the rest keeps --type.
TEST(TensorType, FirstMatchWinsOnMatricesOnly) {
  auto s =
      plan("tiny-qwen3moe", "IQ4_XS",
           "blk\\.1\\.ffn_down_exps=Q2_K,ffn_down_exps=Q3_K,attn_.*=Q4_K,token_embd=Q8_0,ffn_gate_inp=Q8_0,"
           "_norm=Q8_0");
  ASSERT_FALSE(bool(s)); // ffn_gate_inp and the norms are never quantized: those rules type nothing
  EXPECT_NE(s.message().find("rule 'ffn_gate_inp=Q8_0' matches no weight matrix of tiny-qwen3moe"),
            std::string::npos)
      << s.message();

  s = plan("tiny-qwen3moe", "IQ4_XS",
           "blk\\.1\\.ffn_down_exps=Q2_K,ffn_down_exps=Q3_K,attn_.*=Q4_K,token_embd=Q8_0");
  ASSERT_TRUE(bool(s)) << s.message();
  auto t = typesOf(*s);
  EXPECT_EQ(t["blk.1.ffn_down_exps.weight"], GGMLType::Q2_K); // the earlier rule wins
  EXPECT_EQ(t["blk.0.ffn_down_exps.weight"], GGMLType::Q3_K);
  EXPECT_EQ(t["blk.2.ffn_down_exps.weight"], GGMLType::Q3_K);
  EXPECT_EQ(t["blk.0.attn_q.weight"], GGMLType::Q4_K);
  EXPECT_EQ(t["blk.2.attn_output.weight"], GGMLType::Q4_K);
  EXPECT_EQ(t["token_embd.weight"], GGMLType::Q8_0);
  EXPECT_EQ(t["blk.0.ffn_up_exps.weight"], GGMLType::IQ4_XS); // no rule: --type
  EXPECT_EQ(t["output.weight"], GGMLType::IQ4_XS);
  EXPECT_EQ(t["blk.0.attn_q_norm.weight"], GGMLType::F32); // "attn_.*" finds it, but vectors stay F32
  EXPECT_EQ(t["blk.0.ffn_gate_inp.weight"], GGMLType::F32);
}

// A rule that only matches tensors an earlier rule took types nothing: an error naming it.
TEST(TensorType, ShadowedRuleIsAnError) {
  auto s = plan("tiny-llama", "Q8_0", "attn=Q4_K,attn_q=Q6_K");
  ASSERT_FALSE(bool(s));
  EXPECT_NE(s.message().find("--tensor-type rule 'attn_q=Q6_K' types nothing"), std::string::npos)
      << s.message();
  s = plan("tiny-llama", "Q8_0", "attn_q=Q6_K,nonexistent=Q4_K");
  ASSERT_FALSE(bool(s));
  EXPECT_NE(s.message().find("rule 'nonexistent=Q4_K' matches no weight matrix of tiny-llama"),
            std::string::npos)
      << s.message();
}

// The rule's type falls back like --type's when rows are not whole blocks (tiny-gemma4's 192- and 64-wide
// rows: Q2_K/Q3_K -> IQ4_NL, Q6_K -> Q8_0), and the file reads back with the planned types and spread.
TEST(TensorType, FallbackAndFile) {
  auto s = plan("tiny-gemma4", "F16", "ffn_down\\.=Q2_K,ffn_down_exps=Q3_K,ffn_gate\\.=Q6_K,attn_q=MXFP4");
  ASSERT_TRUE(bool(s)) << s.message();
  auto t = typesOf(*s);
  EXPECT_EQ(t["blk.0.ffn_down.weight"], GGMLType::IQ4_NL);      // ne0 = 192
  EXPECT_EQ(t["blk.0.ffn_down_exps.weight"], GGMLType::IQ4_NL); // ne0 = 64
  EXPECT_EQ(t["blk.0.ffn_gate.weight"], GGMLType::Q6_K);        // ne0 = 256
  EXPECT_EQ(t["blk.0.attn_q.weight"], GGMLType::MXFP4);
  EXPECT_EQ(t["blk.0.ffn_up.weight"], GGMLType::F16);

  auto buf = s->writeToBuffer(2);
  ASSERT_TRUE(bool(buf)) << buf.message();
  auto f = gguf::GGUFFile::openBuffer(buf->data(), buf->size(), "mixed");
  ASSERT_TRUE(bool(f)) << f.message();
  EXPECT_EQ(*(*f)->getU32("general.quantization_version"), 2u); // F16 base, quantized by the rules
  for (size_t i = 0; i < s->tensors().size(); ++i)
    EXPECT_EQ((*f)->tensors()[i].type, s->tensors()[i].type) << s->tensors()[i].name;
}

// On top of the Q4_K_M recipe: the matched tensors change, the rest keep the recipe's choice.
TEST(TensorType, OnTopOfTheRecipe) {
  auto base = plan("tiny-llama", "Q4_K_M", "");
  auto ruled = plan("tiny-llama", "Q4_K_M", "ffn_up=Q2_K");
  ASSERT_TRUE(base && ruled);
  auto b = typesOf(*base), r = typesOf(*ruled);
  ASSERT_EQ(b.size(), r.size());
  int changed = 0;
  for (const auto &[name, type] : b) {
    if (name.find("ffn_up") != std::string::npos) {
      EXPECT_EQ(r[name], GGMLType::Q2_K) << name;
      ++changed;
    } else {
      EXPECT_EQ(r[name], type) << name;
    }
  }
  EXPECT_EQ(changed, 4);
  EXPECT_EQ(r["output.weight"], GGMLType::Q6_K);
  EXPECT_EQ(r["blk.3.attn_v.weight"], GGMLType::Q6_K); // a "more bits" layer
  EXPECT_EQ(r["blk.0.attn_v.weight"], GGMLType::Q5_K); // GQA 4
  EXPECT_EQ(r["blk.1.ffn_gate.weight"], GGMLType::Q4_K);
}

// gpt-oss style: MXFP4 experts, the other matrices Q8_0.
TEST(TensorType, MxfpExpertsOnly) {
  auto s = plan("tiny-qwen3moe", "Q8_0", "_exps=MXFP4");
  ASSERT_TRUE(bool(s)) << s.message();
  std::set<GGMLType> experts, others;
  for (const TensorPlan &p : s->tensors()) {
    if (!isQuantizable(p.name, p.ne))
      continue;
    (p.name.find("_exps") != std::string::npos ? experts : others).insert(p.type);
  }
  EXPECT_EQ(experts, std::set<GGMLType>{GGMLType::MXFP4});
  EXPECT_EQ(others, std::set<GGMLType>{GGMLType::Q8_0});
}

// Each new block generator over many blocks: finite, mean ~0, std within 3% of the target, at a small and
// a large target (the scales must stay finite fp16 / in range for both).
TEST(TensorType, NewTypesHaveThePlannedSpread) {
  for (GGMLType t : {GGMLType::Q2_K, GGMLType::Q3_K, GGMLType::MXFP4, GGMLType::Q4_1, GGMLType::Q5_1})
    for (float sigma : {0.01f, 1.0f}) {
      SCOPED_TRACE(std::string(ggmlTypeName(t)) + " sigma " + std::to_string(sigma));
      const uint64_t rows = 64, n = 4096;
      const uint64_t rowBytes = *ggmlRowBytes(t, n);
      std::vector<uint8_t> raw(rows * rowBytes);
      Rng rng(17);
      fillRows(t, Init::normal(0.f, sigma), raw.data(), rows, n, 0, rng);
      std::vector<float> v(n);
      double s = 0, s2 = 0;
      for (uint64_t r = 0; r < rows; ++r) {
        dequantizeRow(t, raw.data() + r * rowBytes, v.data(), n);
        for (float x : v) {
          ASSERT_TRUE(std::isfinite(x));
          s += x;
          s2 += double(x) * x;
        }
      }
      const double count = double(rows * n), mean = s / count, sd = std::sqrt(s2 / count - mean * mean);
      EXPECT_NEAR(sd, sigma, 0.03 * sigma);
      EXPECT_NEAR(mean, 0.0, 0.01 * sigma);
    }
}

// Q3_K uses both scale signs (they cancel the levels' -0.5 bias) with magnitudes in [16, 31]; MXFP4 blocks
// take the two exponents around the target.
TEST(TensorType, BlockFeatures) {
  Rng rng(3);
  std::vector<BlockQ3_K> q3(64);
  fillRows(GGMLType::Q3_K, Init::normal(0.f, 0.05f), reinterpret_cast<uint8_t *>(q3.data()), 1, 64 * kQKK, 0,
           rng);
  int neg = 0, pos = 0;
  for (const BlockQ3_K &b : q3) {
    int8_t sc[16];
    unpackScalesQ3K(b.scales, sc);
    for (int8_t x : sc) {
      EXPECT_GE(std::abs(x), 16);
      EXPECT_LE(std::abs(x), 31);
      (x < 0 ? neg : pos) += 1;
    }
  }
  EXPECT_GT(neg, 300);
  EXPECT_GT(pos, 300);

  std::vector<BlockMXFP4> mx(1000);
  fillRows(GGMLType::MXFP4, Init::normal(0.f, 0.05f), reinterpret_cast<uint8_t *>(mx.data()), 1, 1000 * kQK,
           0, rng);
  std::map<int, int> exps;
  for (const BlockMXFP4 &b : mx)
    ++exps[b.e];
  ASSERT_EQ(exps.size(), 2u);
  EXPECT_EQ(exps.begin()->first + 1, exps.rbegin()->first);
  // 0.05 / 5.85 (the rms of the doubled levels) = 2^-6.87: the block scale 2^(e - 128) is 2^-7 or 2^-6.
  EXPECT_EQ(exps.begin()->first, 128 - 7);
}

// --type plus rules reproduce the type layout the reference's llama-quantize gave each of the shared
// fixtures quantized to the new types: every tensor of the fixture has the synthetic file's name, shape
// and type, and no tensor is left over.
TEST(TensorType, RulesReproduceFixtureLayouts) {
  const char *shared = std::getenv("TPC_SHARED_DIR");
  const std::string dir = shared ? std::string(shared) + "/fixtures/" : "";
  if (dir.empty() || !std::ifstream(dir + "tiny-llama-Q2_K.gguf"))
    GTEST_SKIP() << "TPC_SHARED_DIR has no fixtures/ (set it to the shared folder to run this test)";
  struct Layout {
    const char *fixture, *preset, *type, *rules;
  };
  const Layout layouts[] = {
      {"tiny-qwen3moe-IQ4_NL", "tiny-qwen3moe", "IQ4_NL", "attn_[kv]\\.=Q8_0"},
      {"tiny-qwen3moe-Q3_K_S", "tiny-qwen3moe", "Q3_K", "attn_[kv]\\.=Q8_0,^output\\.=Q6_K"},
      {"tiny-llama-IQ4_XS", "tiny-llama", "IQ4_XS", "attn_v=Q5_K,^output\\.=Q6_K"},
      {"tiny-llama-Q2_K", "tiny-llama", "Q2_K", "attn_v=Q4_K,attn_output=Q3_K,ffn_down=Q3_K,^output\\.=Q6_K"},
      {"tiny-llama-Q3_K_M", "tiny-llama", "Q3_K",
       "blk\\.[01]\\.attn_v=Q5_K,attn_v=Q4_K,attn_output=Q4_K,ffn_down=Q4_K,^output\\.=Q6_K"},
  };
  for (const Layout &l : layouts) {
    SCOPED_TRACE(l.fixture);
    auto s = plan(l.preset, l.type, l.rules);
    ASSERT_TRUE(bool(s)) << s.message();
    auto f = gguf::GGUFFile::open(dir + l.fixture + ".gguf");
    ASSERT_TRUE(bool(f)) << f.message();
    std::map<std::string, const TensorPlan *> planned;
    for (const TensorPlan &p : s->tensors())
      planned[p.name] = &p;
    ASSERT_EQ((*f)->tensors().size(), planned.size());
    for (const gguf::TensorInfo &t : (*f)->tensors()) {
      auto it = planned.find(t.name);
      ASSERT_NE(it, planned.end()) << t.name;
      EXPECT_EQ(it->second->ne, t.ne) << t.name;
      EXPECT_EQ(std::string(ggmlTypeName(it->second->type)), ggmlTypeName(t.type)) << t.name;
    }
  }
}
