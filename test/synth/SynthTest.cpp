//===- SynthTest.cpp - tpc synth: round trip, values, determinism, errors --===//
//
// Every small preset in every weight type is written to memory, read back with GGUFFile and checked: the
// tensor table is the plan's, every dequantized value is finite and each tensor's spread is what its
// distribution asks for; a small llama forward pass over the dequantized weights stays finite with O(1)
// logits; the same seed gives the same bytes whatever the thread count; bad flags give errors naming them;
// the Q4_K_M recipe reproduces the shared fixtures' quantized type layout; the tiny qwen35 presets write
// exactly the shared fixtures' keys and tensor table; the real qwen35 presets have the published shapes and
// keep their MTP block under --layers; the real-size vocabularies pass tpc's tokenizer validation and
// tokenize English into whole words.
//===----------------------------------------------------------------------===//
#include "compiler/synth/Synth.h"
#include "compiler/gguf/GGUFFile.h"
#include "compiler/synth/Vocab.h"
#include "compiler/tokenizer/GGUFTokenizer.h"
#include "runtime/ggml/Quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <unistd.h>

using namespace tpc;
using namespace tpc::synth;

namespace {

const char *const kTinyPresets[] = {"tiny-llama",     "tiny-qwen3",  "tiny-qwen3moe",
                                    "tiny-qwen35moe", "tiny-qwen35", "tiny-gemma4",
                                    "tiny-glm4moe"};
const char *const kTypes[] = {"F32",    "F16",    "BF16",    "Q8_0",   "Q4_0",   "Q4_1",   "Q5_0",  "Q5_1",
                              "Q2_K",   "Q3_K",   "Q4_K",    "Q5_K",   "Q6_K",   "Q4_K_M", "IQ4_NL", "IQ4_XS",
                              "MXFP4",  "IQ2_XXS", "IQ2_XS", "IQ2_S",  "IQ3_XXS", "IQ3_S",  "IQ1_S",  "IQ1_M"};

Synthesizer make(const std::string &preset, const std::string &type, uint64_t seed = 1, uint32_t layers = 0) {
  SynthOptions o;
  o.preset = preset;
  o.type = type;
  o.seed = seed;
  o.layers = layers;
  auto s = Synthesizer::create(o);
  EXPECT_TRUE(bool(s)) << s.message();
  return s.take();
}

std::unique_ptr<gguf::GGUFFile> open(const std::vector<uint8_t> &buf, const std::string &name) {
  auto f = gguf::GGUFFile::openBuffer(buf.data(), buf.size(), name);
  EXPECT_TRUE(bool(f)) << f.message();
  return f ? f.take() : nullptr;
}

/// All values of tensor t as floats.
std::vector<float> dequantize(const gguf::GGUFFile &f, const gguf::TensorInfo &t) {
  std::vector<float> out(t.nelements);
  uint64_t rowBytes = *ggmlRowBytes(t.type, t.ne[0]);
  const uint8_t *p = f.tensorData(t);
  for (uint64_t r = 0; r < t.nelements / t.ne[0]; ++r)
    dequantizeRow(t.type, p + r * rowBytes, out.data() + r * t.ne[0], static_cast<int64_t>(t.ne[0]));
  return out;
}

struct Moments {
  double mean = 0, std = 0;
  bool finite = true;
};
Moments moments(const std::vector<float> &v) {
  Moments m;
  double s = 0, s2 = 0;
  for (float x : v) {
    m.finite &= std::isfinite(x);
    s += x;
    s2 += double(x) * x;
  }
  m.mean = s / v.size();
  m.std = std::sqrt(std::max(0.0, s2 / v.size() - m.mean * m.mean));
  return m;
}

} // namespace

// Each small preset, in each type: the file reads back with the planned metadata and tensor table.
TEST(Synth, RoundTripEveryPresetAndType) {
  for (const char *preset : kTinyPresets)
    for (const char *type : kTypes) {
      SCOPED_TRACE(std::string(preset) + " " + type);
      Synthesizer s = make(preset, type);
      auto buf = s.writeToBuffer(2);
      ASSERT_TRUE(bool(buf)) << buf.message();
      EXPECT_EQ(buf->size(), s.fileSize());
      auto f = open(*buf, preset);
      ASSERT_TRUE(f);
      EXPECT_EQ(f->version(), 3u);
      EXPECT_EQ(*f->getString("general.architecture"), s.spec().arch);
      EXPECT_EQ(*f->getU32(s.spec().arch + ".block_count"), s.spec().blockCount());
      EXPECT_EQ(*f->getU32("general.file_type"), s.weightType().fileType);
      ASSERT_EQ(f->tensors().size(), s.tensors().size());
      for (size_t i = 0; i < s.tensors().size(); ++i) {
        EXPECT_EQ(f->tensors()[i].name, s.tensors()[i].name);
        EXPECT_EQ(f->tensors()[i].type, s.tensors()[i].type) << s.tensors()[i].name;
        EXPECT_EQ(f->tensors()[i].ne, s.tensors()[i].ne) << s.tensors()[i].name;
      }
      auto tok = tokenizerFromGGUF(*f);
      EXPECT_TRUE(bool(tok)) << tok.message();
    }
}

// Dequantized values are finite and have the planned spread: matrices std 1/sqrt(fan_in) (within 10%),
// norms mean 1, scales inside their ranges.
TEST(Synth, ValuesFiniteWithPlannedSpread) {
  for (const char *preset : kTinyPresets)
    for (const char *type : kTypes) {
      SCOPED_TRACE(std::string(preset) + " " + type);
      Synthesizer s = make(preset, type, 7);
      auto buf = s.writeToBuffer(2);
      ASSERT_TRUE(bool(buf));
      auto f = open(*buf, preset);
      ASSERT_TRUE(f);
      for (size_t i = 0; i < s.tensors().size(); ++i) {
        const TensorPlan &p = s.tensors()[i];
        std::vector<float> v = dequantize(*f, f->tensors()[i]);
        Moments m = moments(v);
        ASSERT_TRUE(m.finite) << p.name;
        if (p.init.kind == Init::Normal) {
          // Few samples (q/k norms) or few quant blocks (qwen35's ssm_alpha/beta: 4 rows of 256, each block's
          // scale jittered by +-20%) spread more.
          double tol = v.size() <= 1024 ? 0.35 : 0.1;
          EXPECT_NEAR(m.std, p.init.b, tol * p.init.b) << p.name << " " << ggmlTypeName(p.type);
          // Sampling error of a mean is std/sqrt(n); allow 5 of them plus 1% for quantization.
          double meanTol = (5.0 / std::sqrt(double(v.size())) + 0.01) * p.init.b;
          EXPECT_NEAR(m.mean, p.init.a, meanTol) << p.name;
        } else if (p.init.kind == Init::Uniform) {
          // 1% slack for F16/BF16 rounding (bounds may be negative: qwen35's ssm_a).
          for (float x : v) {
            EXPECT_GE(x, p.init.a - 0.01f * std::fabs(p.init.a)) << p.name;
            EXPECT_LE(x, p.init.b + 0.01f * std::fabs(p.init.b)) << p.name;
          }
        }
        bool ssmA = p.name.size() > 6 && p.name.compare(p.name.size() - 6, 6, ".ssm_a") == 0;
        if (ssmA) { // the decay rate -exp(A_log): every value negative
          for (float x : v)
            EXPECT_LT(x, 0.f) << p.name;
        }
      }
    }
}

// The weight quants have realistic spread in the big presets' shapes too (one layer of each).
TEST(Synth, FullSizeLayerValues) {
  for (const char *preset : {"qwen3-30b-a3b", "gemma4-26b-a4b", "qwen35moe-35b-a3b", "qwen35-27b"}) {
    SCOPED_TRACE(preset);
    Synthesizer s = make(preset, "Q4_K_M", 3, 1);
    for (const TensorPlan &p : s.tensors())
      ASSERT_TRUE(canFill(p.type)) << p.name;
    // Only the layer tensors, not the 262144-row embeddings: fill one expert tensor directly.
    for (const TensorPlan &p : s.tensors()) {
      if (p.name != "blk.0.ffn_down_exps.weight" && p.name != "blk.0.attn_v.weight" &&
          p.name != "blk.0.ffn_down.weight" && p.name != "blk.0.attn_qkv.weight" &&
          p.name != "blk.0.ssm_out.weight")
        continue;
      uint64_t rows = 64, rowBytes = *ggmlRowBytes(p.type, p.ne[0]);
      std::vector<uint8_t> raw(rows * rowBytes);
      Rng rng(5);
      fillRows(p.type, p.init, raw.data(), rows, p.ne[0], 0, rng);
      std::vector<float> v(rows * p.ne[0]);
      for (uint64_t r = 0; r < rows; ++r)
        dequantizeRow(p.type, raw.data() + r * rowBytes, v.data() + r * p.ne[0],
                               static_cast<int64_t>(p.ne[0]));
      Moments m = moments(v);
      EXPECT_TRUE(m.finite) << p.name;
      EXPECT_NEAR(m.std, p.init.b, 0.1 * p.init.b) << p.name << " " << ggmlTypeName(p.type);
    }
  }
}

namespace {
/// y = W x for a weight whose rows are dequantized on the fly (W: ne = [in, out]).
std::vector<float> matvec(const gguf::GGUFFile &f, const std::string &name, const std::vector<float> &x) {
  const gguf::TensorInfo *t = f.findTensor(name);
  EXPECT_NE(t, nullptr) << name;
  EXPECT_EQ(t->ne[0], x.size()) << name;
  uint64_t rowBytes = *ggmlRowBytes(t->type, t->ne[0]);
  std::vector<float> row(t->ne[0]), y(t->ne[1]);
  for (uint64_t r = 0; r < t->ne[1]; ++r) {
    dequantizeRow(t->type, f.tensorData(*t) + r * rowBytes, row.data(),
                           static_cast<int64_t>(t->ne[0]));
    double acc = 0;
    for (size_t i = 0; i < x.size(); ++i)
      acc += double(row[i]) * x[i];
    y[r] = static_cast<float>(acc);
  }
  return y;
}
std::vector<float> rmsNorm(const std::vector<float> &x, const std::vector<float> &w) {
  double s = 0;
  for (float v : x)
    s += double(v) * v;
  float k = static_cast<float>(1.0 / std::sqrt(s / x.size() + 1e-5));
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = x[i] * k * w[i];
  return y;
}
double rms(const std::vector<float> &x) {
  double s = 0;
  for (float v : x)
    s += double(v) * v;
  return std::sqrt(s / x.size());
}
} // namespace

// A llama forward pass (per token, attention over itself only: enough for magnitudes) over the
// dequantized weights of the benchmark shape: the residual stays O(1) and the logits are finite, O(1).
TEST(Synth, ForwardPassStaysFinite) {
  Synthesizer s = make("bench-llama", "Q4_K_M", 11, 2);
  auto buf = s.writeToBuffer(2);
  ASSERT_TRUE(bool(buf));
  auto f = open(*buf, "bench-llama");
  ASSERT_TRUE(f);
  const ModelSpec &m = s.spec();
  auto vec = [&](const std::string &n) { return dequantize(*f, *f->findTensor(n)); };
  const gguf::TensorInfo *embd = f->findTensor("token_embd.weight");
  uint64_t rowBytes = *ggmlRowBytes(embd->type, m.nEmbd);
  std::vector<float> x(m.nEmbd);
  dequantizeRow(embd->type, f->tensorData(*embd) + 42 * rowBytes, x.data(), m.nEmbd);
  for (uint32_t il = 0; il < m.nLayer; ++il) {
    std::string b = "blk." + std::to_string(il) + ".";
    std::vector<float> h = rmsNorm(x, vec(b + "attn_norm.weight"));
    std::vector<float> v = matvec(*f, b + "attn_v.weight", h);
    // One token attends only to itself: each query head's output is its KV head's V.
    uint32_t group = m.nHead / m.nHeadKv;
    std::vector<float> attn(m.nHead * m.headDim);
    for (uint32_t hd = 0; hd < m.nHead; ++hd)
      for (uint32_t d = 0; d < m.headDim; ++d)
        attn[hd * m.headDim + d] = v[(hd / group) * m.headDim + d];
    std::vector<float> o = matvec(*f, b + "attn_output.weight", attn);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] += o[i];
    h = rmsNorm(x, vec(b + "ffn_norm.weight"));
    std::vector<float> g = matvec(*f, b + "ffn_gate.weight", h), u = matvec(*f, b + "ffn_up.weight", h);
    for (size_t i = 0; i < g.size(); ++i)
      g[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
    std::vector<float> d = matvec(*f, b + "ffn_down.weight", g);
    EXPECT_GT(rms(d), 0.05) << b;
    EXPECT_LT(rms(d), 5.0) << b;
    for (size_t i = 0; i < x.size(); ++i)
      x[i] += d[i];
    EXPECT_LT(rms(x), 10.0) << b;
  }
  std::vector<float> logits = matvec(*f, "output.weight", rmsNorm(x, vec("output_norm.weight")));
  for (float l : logits)
    ASSERT_TRUE(std::isfinite(l));
  EXPECT_GT(rms(logits), 0.3);
  EXPECT_LT(rms(logits), 3.0);
}

// Same seed, same bytes, whatever the thread count; another seed changes the weights, not the layout;
// a layer's tensors do not depend on --layers.
TEST(Synth, Deterministic) {
  for (const char *preset : kTinyPresets) {
    SCOPED_TRACE(preset);
    auto a = make(preset, "Q4_K_M", 5).writeToBuffer(1);
    auto b = make(preset, "Q4_K_M", 5).writeToBuffer(4);
    auto c = make(preset, "Q4_K_M", 6).writeToBuffer(2);
    ASSERT_TRUE(a && b && c);
    EXPECT_TRUE(*a == *b);
    ASSERT_EQ(a->size(), c->size());
    EXPECT_FALSE(*a == *c);
  }
  Synthesizer full = make("tiny-llama", "Q8_0", 9), one = make("tiny-llama", "Q8_0", 9, 1);
  auto fb = full.writeToBuffer(2), ob = one.writeToBuffer(2);
  ASSERT_TRUE(fb && ob);
  auto ff = open(*fb, "full"), of = open(*ob, "one");
  for (const char *name : {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_down.weight"}) {
    const gguf::TensorInfo *x = ff->findTensor(name), *y = of->findTensor(name);
    ASSERT_TRUE(x && y) << name;
    ASSERT_EQ(x->nbytes, y->nbytes);
    EXPECT_EQ(0, std::memcmp(ff->tensorData(*x), of->tensorData(*y), x->nbytes)) << name;
  }
}

// Bad flags: one line naming the flag and the accepted values.
TEST(Synth, BadFlagsNameTheFlag) {
  auto err = [](SynthOptions o) {
    auto s = Synthesizer::create(o);
    EXPECT_FALSE(bool(s));
    return s ? std::string() : s.message();
  };
  SynthOptions o;
  o.preset = "llama-9000";
  std::string e = err(o);
  EXPECT_NE(e.find("--preset 'llama-9000'"), std::string::npos) << e;
  EXPECT_NE(e.find("llama3-8b"), std::string::npos) << e;
  o.preset = "tiny-llama";
  o.type = "Q3_XL";
  e = err(o);
  EXPECT_NE(e.find("--type 'Q3_XL'"), std::string::npos) << e;
  EXPECT_NE(e.find("Q4_K_M"), std::string::npos) << e;
  o.type = "q4_k_m"; // case-insensitive
  EXPECT_TRUE(bool(Synthesizer::create(o)));
  o.arch = "qwen3";
  e = err(o);
  EXPECT_NE(e.find("--arch qwen3"), std::string::npos) << e;
  o.arch = "llama";
  o.layers = 5;
  e = err(o);
  EXPECT_NE(e.find("--layers 5"), std::string::npos) << e;
  EXPECT_NE(e.find("1..4"), std::string::npos) << e;

  Synthesizer s = make("tiny-llama", "F16");
  auto w = s.write("/nonexistent-dir/x.gguf", 1);
  ASSERT_FALSE(bool(w));
  EXPECT_NE(w.message().find("/nonexistent-dir/x.gguf"), std::string::npos) << w.message();
}

// The benchmark presets have the sizes the CPU benchmark issue fixes (Q4_K_M: ~414 and ~249 MiB).
TEST(Synth, BenchmarkPresetSizes) {
  double llama = make("bench-llama", "Q4_K_M").fileSize() / 1048576.0;
  double moe = make("bench-qwen3moe", "Q4_K_M").fileSize() / 1048576.0;
  EXPECT_NEAR(llama, 414, 2);
  EXPECT_NEAR(moe, 249, 2);
}

// The Q4_K_M recipe gives every tensor of the shared fixtures' Q4_K_M files the type the reference
// engine's quantizer chose.
TEST(Synth, RecipeMatchesFixtureQ4KM) {
  const char *shared = std::getenv("TPC_SHARED_DIR");
  std::string dir = shared ? std::string(shared) + "/fixtures/" : "";
  if (dir.empty() || !std::ifstream(dir + "tiny-llama-Q4_K_M.gguf"))
    GTEST_SKIP() << "TPC_SHARED_DIR has no fixtures/ (set it to the shared folder to run this test)";
  WeightType wt = *parseWeightType("Q4_K_M");
  for (const char *name : {"tiny-llama-Q4_K_M.gguf", "tiny-qwen3moe-Q4_K_M.gguf",
                           "tiny-qwen35moe-Q4_K_M.gguf", "tiny-glm4moe-Q4_K_M.gguf"}) {
    SCOPED_TRACE(name);
    auto f = gguf::GGUFFile::open(dir + name);
    ASSERT_TRUE(bool(f)) << f.message();
    std::string arch = *(*f)->getString("general.architecture");
    RecipeContext ctx;
    ctx.nLayer = *(*f)->getU32(arch + ".block_count");
    ctx.nExpert = *(*f)->getU32Or(arch + ".expert_count", 0);
    ctx.nHead = *(*f)->getU32(arch + ".attention.head_count");
    ctx.nHeadKv = *(*f)->getU32(arch + ".attention.head_count_kv");
    ctx.hasOutput = (*f)->findTensor("output.weight") != nullptr;
    for (const gguf::TensorInfo &t : (*f)->tensors())
      ctx.nAttnV += t.name.find("attn_v.weight") != std::string::npos;
    int attnV = 0;
    for (const gguf::TensorInfo &t : (*f)->tensors()) {
      int layer = t.name.rfind("blk.", 0) == 0 ? std::stoi(t.name.substr(4)) : -1;
      EXPECT_EQ(ggmlTypeName(tensorType(wt, ctx, t.name, t.ne, layer, attnV)),
                std::string(ggmlTypeName(t.type)))
          << t.name;
      attnV += t.name.find("attn_v.weight") != std::string::npos;
    }
  }
}

// The real-size vocabularies are valid for tpc's tokenizer; English words come out whole and text
// round-trips through decode.
TEST(Synth, RealSizeVocabulariesTokenize) {
  struct Case {
    VocabKind kind;
    uint32_t n;
    const char *theToken;
  } cases[] = {{VocabKind::Llama3, 128256, "\xC4\xA0the"},
               {VocabKind::Qwen2, 151936, "\xC4\xA0the"},
               {VocabKind::Qwen35, 248320, "\xC4\xA0the"},
               {VocabKind::Glm4, 151552, "\xC4\xA0the"},
               {VocabKind::Gemma, 262144, "\xE2\x96\x81the"},
               {VocabKind::Spm512, 512, "\xE2\x96\x81the"}};
  for (const Case &c : cases) {
    SCOPED_TRACE(c.n);
    Vocab v = buildVocab(c.kind, c.n);
    ASSERT_EQ(v.tokens.size(), c.n);
    gguf::GGUFWriter w;
    w.setString("general.architecture", "llama");
    writeVocab(w, v);
    auto buf = w.writeToBuffer(nullptr);
    ASSERT_TRUE(bool(buf)) << buf.message();
    auto f = open(*buf, "vocab");
    ASSERT_TRUE(f);
    auto data = tokenizerFromGGUF(*f);
    ASSERT_TRUE(bool(data)) << data.message();
    rt::Tokenizer tok(data.take());
    const std::string text = "Once upon a time, the little girl said hello to the world 42 times!";
    std::vector<rt::TokenId> ids = tok.encode(text, false);
    EXPECT_EQ(tok.decode(ids), text);
    // Words merge into multi-character tokens (the 512-token vocabulary has fewer of them).
    EXPECT_LT(ids.size(), c.n > 1000 ? text.size() / 2 : text.size() * 3 / 4);
    rt::TokenId the = tok.find(c.theToken);
    ASSERT_GE(the, 0);
    EXPECT_NE(std::find(ids.begin(), ids.end(), the), ids.end());
    if (c.kind == VocabKind::Llama3) {
      EXPECT_EQ(v.tokens[128009], "<|eot_id|>");
    }
    if (c.kind == VocabKind::Qwen2) {
      EXPECT_EQ(v.tokens[151645], "<|im_end|>");
    }
    if (c.kind == VocabKind::Glm4) { // GLM-4.5's ids: <|endoftext|> (eos) 151329, [gMASK] 151331
      EXPECT_EQ(v.pre, "glm4");
      EXPECT_EQ(v.eos, 151329);
      EXPECT_EQ(v.tokens[151331], "[gMASK]");
      EXPECT_EQ(v.tokens[151336], "<|user|>");
    }
    if (c.kind == VocabKind::Qwen35) { // the real file's ids: eos 248046, <|endoftext|> 248044
      EXPECT_EQ(v.pre, "qwen35");
      EXPECT_EQ(v.eos, 248046);
      EXPECT_EQ(v.tokens[248046], "<|im_end|>");
      EXPECT_EQ(v.tokens[248044], "<|endoftext|>");
    }
  }
}

namespace {
/// `preset` in `type` has `fixture`'s layout exactly: every metadata key in the same order with the same
/// type and value (the token texts and scores only by type and count: the 512 pieces are invented;
/// tpc.synth.* is synth's own), and every tensor's name, shape and type, in the same order.
void expectFixtureLayout(const std::string &preset, const std::string &type, const std::string &fixture) {
  SCOPED_TRACE(preset + " " + type + " vs " + fixture);
  auto ref = gguf::GGUFFile::open(fixture);
  ASSERT_TRUE(bool(ref)) << ref.message();
  Synthesizer s = make(preset, type, 2);
  auto buf = s.writeToBuffer(2);
  ASSERT_TRUE(bool(buf)) << buf.message();
  auto f = open(*buf, preset);
  ASSERT_TRUE(f);

  std::vector<const gguf::Metadata *> ours;
  for (const gguf::Metadata &m : f->metadata())
    if (m.key.rfind("tpc.synth.", 0) != 0)
      ours.push_back(&m);
  const std::vector<gguf::Metadata> &theirs = (*ref)->metadata();
  ASSERT_EQ(ours.size(), theirs.size());
  for (size_t i = 0; i < theirs.size(); ++i) {
    const gguf::Metadata &a = *ours[i], &b = theirs[i];
    ASSERT_EQ(a.key, b.key) << "key " << i;
    if (a.key == "tokenizer.ggml.tokens" || a.key == "tokenizer.ggml.scores") {
      EXPECT_EQ(a.value.elemType(), b.value.elemType()) << a.key;
      EXPECT_EQ(a.value.elems().size(), b.value.elems().size()) << a.key;
    } else {
      EXPECT_TRUE(a.value == b.value) << a.key << ": " << a.value.toString() << " vs " << b.value.toString();
    }
  }

  const std::vector<gguf::TensorInfo> &ta = f->tensors(), &tb = (*ref)->tensors();
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t i = 0; i < tb.size(); ++i) {
    EXPECT_EQ(ta[i].name, tb[i].name) << "tensor " << i;
    EXPECT_EQ(ta[i].ne, tb[i].ne) << tb[i].name;
    EXPECT_EQ(ggmlTypeName(ta[i].type), std::string(ggmlTypeName(tb[i].type))) << tb[i].name;
  }
}
} // namespace

// The tiny qwen35 presets write the shared fixtures' layout exactly, for each type the fixtures come in
// (F32; tiny-qwen35moe also Q8_0 and Q4_K_M, the reference's quantizer).
TEST(Synth, Qwen35MatchesFixtureLayout) {
  const char *shared = std::getenv("TPC_SHARED_DIR");
  std::string dir = shared ? std::string(shared) + "/fixtures/" : "";
  if (dir.empty() || !std::ifstream(dir + "tiny-qwen35moe.gguf"))
    GTEST_SKIP() << "TPC_SHARED_DIR has no fixtures/tiny-qwen35moe.gguf (set it to the shared folder to run "
                    "this test)";
  expectFixtureLayout("tiny-qwen35moe", "F32", dir + "tiny-qwen35moe.gguf");
  expectFixtureLayout("tiny-qwen35moe", "Q8_0", dir + "tiny-qwen35moe-Q8_0.gguf");
  expectFixtureLayout("tiny-qwen35moe", "Q4_K_M", dir + "tiny-qwen35moe-Q4_K_M.gguf");
  expectFixtureLayout("tiny-qwen35", "F32", dir + "tiny-qwen35.gguf");
}

// tiny-glm4moe writes the shared fixture's layout exactly (keys, the MTP block's nextn.* tensors, and the
// reference quantizer's Q4_K_M types: Q5_0 / Q8_0 fallbacks for the 544- and 160-wide down projections).
TEST(Synth, Glm4MoeMatchesFixtureLayout) {
  const char *shared = std::getenv("TPC_SHARED_DIR");
  std::string dir = shared ? std::string(shared) + "/fixtures/" : "";
  if (dir.empty() || !std::ifstream(dir + "tiny-glm4moe.gguf"))
    GTEST_SKIP() << "TPC_SHARED_DIR has no fixtures/tiny-glm4moe.gguf (set it to the shared folder to run "
                    "this test)";
  expectFixtureLayout("tiny-glm4moe", "F32", dir + "tiny-glm4moe.gguf");
  expectFixtureLayout("tiny-glm4moe", "Q4_K_M", dir + "tiny-glm4moe-Q4_K_M.gguf");
}

namespace {
/// Writes `o` with zero weights (a sparse file) and opens it: real-size metadata and tensor tables at no
/// cost.
std::unique_ptr<gguf::GGUFFile> zerosFile(SynthOptions o, const std::string &tag) {
  o.zeros = true;
  auto s = Synthesizer::create(o);
  EXPECT_TRUE(bool(s)) << s.message();
  if (!s)
    return nullptr;
  std::string path = ::testing::TempDir() + "tpc-synth-" + std::to_string(::getpid()) + "-" + tag + ".gguf";
  auto ok = s->write(path, 2);
  EXPECT_TRUE(bool(ok)) << ok.message();
  auto f = gguf::GGUFFile::open(path);
  std::remove(path.c_str()); // the mapping stays valid
  EXPECT_TRUE(bool(f)) << f.message();
  return f ? f.take() : nullptr;
}
std::vector<uint64_t> shape(const gguf::GGUFFile &f, const std::string &name) {
  const gguf::TensorInfo *t = f.findTensor(name);
  return t ? t->ne : std::vector<uint64_t>{};
}
} // namespace

// GLM-4.5-Air and GLM-4.6 at real shape: the published keys (block_count 47 with the MTP block, 1 dense layer, 128
// experts of 1408 + 1 shared, 96 / 8 heads of 128 with half of each rotated) and the Q4_K_M fallbacks of
// its rows that are not whole 256-blocks (10944 and 1408); --layers keeps the MTP block after the kept ones.
TEST(Synth, Glm45AirPreset) {
  SynthOptions o;
  o.preset = "glm-4.5-air";
  o.type = "Q4_K_M";
  auto full = Synthesizer::create(o);
  ASSERT_TRUE(bool(full)) << full.message();
  EXPECT_NEAR(full->parameterCount() / 1e9, 110.5, 1.0);
  o.layers = 2;
  auto f = zerosFile(o, "glm-air");
  ASSERT_TRUE(f);
  EXPECT_EQ(*f->getU32("glm4moe.block_count"), 3u);
  EXPECT_EQ(*f->getU32("glm4moe.nextn_predict_layers"), 1u);
  EXPECT_EQ(*f->getU32("glm4moe.leading_dense_block_count"), 1u);
  EXPECT_EQ(*f->getU32("glm4moe.expert_count"), 128u);
  EXPECT_EQ(*f->getU32("glm4moe.expert_used_count"), 8u);
  EXPECT_EQ(*f->getU32("glm4moe.expert_shared_count"), 1u);
  EXPECT_EQ(*f->getU32("glm4moe.rope.dimension_count"), 64u);
  EXPECT_EQ(*f->getString("tokenizer.ggml.pre"), "glm4");
  EXPECT_EQ(shape(*f, "blk.0.attn_q.weight"), (std::vector<uint64_t>{4096, 12288}));
  EXPECT_EQ(shape(*f, "blk.0.attn_k.bias"), (std::vector<uint64_t>{1024}));
  EXPECT_EQ(shape(*f, "blk.1.ffn_down_exps.weight"), (std::vector<uint64_t>{1408, 4096, 128}));
  EXPECT_EQ(shape(*f, "blk.2.nextn.eh_proj.weight"), (std::vector<uint64_t>{8192, 4096}));
  EXPECT_EQ(shape(*f, "token_embd.weight"), (std::vector<uint64_t>{4096, 151552}));
  EXPECT_EQ(shape(*f, "blk.2.ffn_gate.weight"), std::vector<uint64_t>{}); // the MTP block is MoE
  EXPECT_EQ(ggmlTypeName(f->findTensor("blk.0.ffn_down.weight")->type), std::string("q5_0"));
  EXPECT_EQ(ggmlTypeName(f->findTensor("blk.1.ffn_down_exps.weight")->type), std::string("q5_0"));
  EXPECT_EQ(ggmlTypeName(f->findTensor("blk.1.attn_k.weight")->type), std::string("q8_0"));
  EXPECT_EQ(ggmlTypeName(f->findTensor("blk.1.attn_q.bias")->type), std::string("f32"));

  // GLM-4.6 / 4.7: per-head q/k norms, 3 dense layers, 160 experts of 1536 (whole 256-blocks: Q4_K).
  o.preset = "glm-4.6";
  o.layers = 0;
  auto g46 = Synthesizer::create(o);
  ASSERT_TRUE(bool(g46)) << g46.message();
  EXPECT_NEAR(g46->parameterCount() / 1e9, 358.3, 1.0);
  o.layers = 4;
  auto g = zerosFile(o, "glm-46");
  ASSERT_TRUE(g);
  EXPECT_EQ(*g->getU32("glm4moe.block_count"), 5u);
  EXPECT_EQ(*g->getU32("glm4moe.leading_dense_block_count"), 3u);
  EXPECT_EQ(*g->getU32("glm4moe.expert_count"), 160u);
  EXPECT_EQ(*g->getF32("glm4moe.expert_weights_scale"), 2.5f);
  EXPECT_EQ(shape(*g, "blk.0.attn_q_norm.weight"), (std::vector<uint64_t>{128}));
  EXPECT_EQ(shape(*g, "blk.2.ffn_down.weight"), (std::vector<uint64_t>{12288, 5120}));
  EXPECT_EQ(shape(*g, "blk.3.ffn_gate_exps.weight"), (std::vector<uint64_t>{5120, 1536, 160}));
  EXPECT_EQ(ggmlTypeName(g->findTensor("blk.3.ffn_gate_exps.weight")->type), std::string("q4_K"));
}

// The real qwen35 presets carry the published keys and shapes (shared/research/qwen35.md §1.2-1.3: loader
// dumps of Qwen3.5/3.6-35B-A3B and -27B), and `--layers N` keeps N trunk layers plus the MTP block
// (block_count N + 1), so the loader's trunk depth block_count - nextn_predict_layers is N.
TEST(Synth, Qwen35RealPresets) {
  struct Case {
    const char *preset, *arch;
    uint32_t E, blocks, H, Hkv, Hv, inner, ff;
    double params;
  } cases[] = {{"qwen35moe-35b-a3b", "qwen35moe", 2048, 41, 16, 2, 32, 4096, 0, 35.505e9},
               {"qwen35-27b", "qwen35", 5120, 65, 24, 4, 48, 6144, 17408, 27.321e9}};
  for (const Case &c : cases)
    for (uint32_t layers : {0u, 4u}) {
      SCOPED_TRACE(std::string(c.preset) + " --layers " + std::to_string(layers));
      SynthOptions o;
      o.preset = c.preset;
      o.layers = layers;
      auto f = zerosFile(o, c.preset + std::to_string(layers));
      ASSERT_TRUE(f);
      std::string a = std::string(c.arch) + ".";
      uint32_t blocks = layers ? layers + 1 : c.blocks, trunk = blocks - 1;
      EXPECT_EQ(*f->getString("general.architecture"), c.arch);
      EXPECT_EQ(*f->getU32(a + "block_count"), blocks);
      EXPECT_EQ(*f->getU32(a + "nextn_predict_layers"), 1u);
      EXPECT_EQ(*f->getU32(a + "full_attention_interval"), 4u);
      EXPECT_EQ(*f->getU32(a + "embedding_length"), c.E);
      EXPECT_EQ(*f->getU32(a + "context_length"), 262144u);
      EXPECT_EQ(*f->getU32(a + "vocab_size"), 248320u);
      EXPECT_EQ(*f->getU32(a + "attention.head_count"), c.H);
      EXPECT_EQ(*f->getU32(a + "attention.head_count_kv"), c.Hkv);
      EXPECT_EQ(*f->getU32(a + "attention.key_length"), 256u);
      EXPECT_EQ(*f->getU32(a + "attention.value_length"), 256u);
      EXPECT_EQ(*f->getU32(a + "rope.dimension_count"), 64u);
      const gguf::Value *sections = f->find(a + "rope.dimension_sections");
      ASSERT_NE(sections, nullptr);
      EXPECT_EQ(sections->toString(), "[11, 11, 10, 0]");
      EXPECT_EQ(*f->getF32(a + "rope.freq_base"), 1e7f);
      EXPECT_EQ(*f->getF32(a + "attention.layer_norm_rms_epsilon"), 1e-6f);
      EXPECT_EQ(*f->getU32(a + "ssm.conv_kernel"), 4u);
      EXPECT_EQ(*f->getU32(a + "ssm.state_size"), 128u);
      EXPECT_EQ(*f->getU32(a + "ssm.group_count"), 16u);
      EXPECT_EQ(*f->getU32(a + "ssm.time_step_rank"), c.Hv);
      EXPECT_EQ(*f->getU32(a + "ssm.inner_size"), c.inner);
      if (c.ff) {
        EXPECT_EQ(*f->getU32(a + "feed_forward_length"), c.ff);
        EXPECT_EQ(f->find(a + "expert_count"), nullptr);
      } else {
        EXPECT_EQ(f->find(a + "feed_forward_length"), nullptr);
        EXPECT_EQ(*f->getU32(a + "expert_count"), 256u);
        EXPECT_EQ(*f->getU32(a + "expert_used_count"), 8u);
        EXPECT_EQ(*f->getU32(a + "expert_feed_forward_length"), 512u);
        EXPECT_EQ(*f->getU32(a + "expert_shared_feed_forward_length"), 512u);
      }
      EXPECT_EQ(*f->getString("tokenizer.ggml.pre"), "qwen35");
      EXPECT_EQ(*f->getU32("tokenizer.ggml.eos_token_id"), 248046u);

      uint64_t E = c.E, C = 2 * 16 * 128 + c.inner;
      EXPECT_EQ(shape(*f, "token_embd.weight"), (std::vector<uint64_t>{E, 248320}));
      EXPECT_EQ(shape(*f, "output.weight"), (std::vector<uint64_t>{E, 248320})); // untied
      // Layer 0 is Gated DeltaNet, layer 3 gated attention ([q | gate] rows), the MTP block after the trunk.
      EXPECT_EQ(shape(*f, "blk.0.attn_qkv.weight"), (std::vector<uint64_t>{E, C}));
      EXPECT_EQ(shape(*f, "blk.0.ssm_conv1d.weight"), (std::vector<uint64_t>{4, C}));
      EXPECT_EQ(shape(*f, "blk.0.ssm_a"), (std::vector<uint64_t>{c.Hv}));
      EXPECT_EQ(shape(*f, "blk.0.ssm_out.weight"), (std::vector<uint64_t>{c.inner, E}));
      EXPECT_EQ(f->findTensor("blk.0.attn_q.weight"), nullptr);
      EXPECT_EQ(shape(*f, "blk.3.attn_q.weight"), (std::vector<uint64_t>{E, 2ull * c.H * 256}));
      EXPECT_EQ(shape(*f, "blk.3.attn_k.weight"), (std::vector<uint64_t>{E, c.Hkv * 256ull}));
      EXPECT_EQ(f->findTensor("blk.3.attn_qkv.weight"), nullptr);
      std::string mtp = "blk." + std::to_string(trunk) + ".";
      EXPECT_EQ(shape(*f, mtp + "nextn.eh_proj.weight"), (std::vector<uint64_t>{2 * E, E}));
      EXPECT_NE(f->findTensor(mtp + "attn_q.weight"), nullptr);
      EXPECT_EQ(f->findTensor(mtp + "attn_qkv.weight"), nullptr);
      EXPECT_EQ(f->findTensor("blk." + std::to_string(trunk - 1) + ".nextn.enorm.weight"), nullptr);
      EXPECT_EQ(f->findTensor("blk." + std::to_string(blocks) + ".attn_norm.weight"), nullptr);
      if (c.ff)
        EXPECT_EQ(shape(*f, "blk.0.ffn_down.weight"), (std::vector<uint64_t>{c.ff, E}));
      else
        EXPECT_EQ(shape(*f, "blk.0.ffn_gate_exps.weight"), (std::vector<uint64_t>{E, 512, 256}));
      // Q4_K_M: the conv kernel and the GDN vectors stay F32; the rest follows the recipe.
      EXPECT_EQ(f->findTensor("blk.0.ssm_conv1d.weight")->type, GGMLType::F32);
      EXPECT_EQ(f->findTensor("blk.0.ssm_a")->type, GGMLType::F32);
      EXPECT_EQ(f->findTensor("blk.0.ssm_dt.bias")->type, GGMLType::F32);
      EXPECT_EQ(f->findTensor("blk.0.ssm_alpha.weight")->type, GGMLType::Q4_K);
      EXPECT_EQ(f->findTensor("output.weight")->type, GGMLType::Q6_K);
      if (!layers) {
        uint64_t n = 0;
        for (const gguf::TensorInfo &t : f->tensors())
          n += t.nelements;
        EXPECT_NEAR(double(n), c.params, 0.01e9); // the --list description's figure
      }
    }
}

// --layers on a qwen35 preset: the trunk layers keep their kind and bytes, the MTP block follows them;
// the error names the MTP block.
TEST(Synth, Qwen35LayersKeepMtpBlock) {
  Synthesizer full = make("tiny-qwen35moe", "Q8_0", 4), four = make("tiny-qwen35moe", "Q8_0", 4, 4);
  EXPECT_EQ(four.spec().blockCount(), 5u);
  auto fb = full.writeToBuffer(2), ob = four.writeToBuffer(2);
  ASSERT_TRUE(fb && ob);
  auto ff = open(*fb, "full"), of = open(*ob, "four");
  ASSERT_TRUE(ff && of);
  EXPECT_EQ(*of->getU32("qwen35moe.block_count"), 5u);
  EXPECT_EQ(*of->getU32("qwen35moe.nextn_predict_layers"), 1u);
  for (const char *name : {"blk.0.attn_qkv.weight", "blk.2.ssm_a", "blk.3.attn_q.weight"}) {
    const gguf::TensorInfo *x = ff->findTensor(name), *y = of->findTensor(name);
    ASSERT_TRUE(x && y) << name;
    ASSERT_EQ(x->nbytes, y->nbytes);
    EXPECT_EQ(0, std::memcmp(ff->tensorData(*x), of->tensorData(*y), x->nbytes)) << name;
  }
  // The MTP block blk.4 has the full file's blk.8 tensors (names renumbered).
  size_t mtpFull = 0, mtpFour = 0;
  for (const gguf::TensorInfo &t : ff->tensors())
    if (t.name.rfind("blk.8.", 0) == 0) {
      ++mtpFull;
      const gguf::TensorInfo *u = of->findTensor("blk.4." + t.name.substr(6));
      ASSERT_NE(u, nullptr) << t.name;
      EXPECT_EQ(u->ne, t.ne) << t.name;
    }
  for (const gguf::TensorInfo &t : of->tensors())
    mtpFour += t.name.rfind("blk.4.", 0) == 0;
  EXPECT_EQ(mtpFour, mtpFull);
  EXPECT_NE(of->findTensor("blk.4.nextn.eh_proj.weight"), nullptr);
  EXPECT_EQ(of->findTensor("blk.5.attn_norm.weight"), nullptr);

  SynthOptions o;
  o.preset = "tiny-qwen35moe";
  o.layers = 9;
  auto e = Synthesizer::create(o);
  ASSERT_FALSE(bool(e));
  EXPECT_NE(
      e.message().find("--layers 9: preset 'tiny-qwen35moe' has 8 layers (and an MTP block, always kept); "
                       "give 1..8"),
      std::string::npos)
      << e.message();
}

// `tpc synth --list` shows the qwen35 presets.
TEST(Synth, Qwen35PresetsListed) {
  for (const char *name : {"qwen35moe-35b-a3b", "qwen35-27b", "tiny-qwen35moe", "tiny-qwen35"}) {
    const ModelSpec *s = findPreset(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_NE(presetNames().find(name), std::string::npos) << name;
    EXPECT_EQ(s->nNextN, 1u) << name;
  }
  EXPECT_EQ(findPreset("qwen35moe-35b-a3b")->nLayer, 40u);
  EXPECT_EQ(findPreset("qwen35-27b")->nLayer, 64u);
  EXPECT_EQ(findPreset("tiny-qwen35")->nFF, 512u);
}
