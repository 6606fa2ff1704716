//===- FixtureTest.cpp - hand-built plans against the reference logits ----===//
//
// Builds the tiny-llama, tiny-qwen3moe and tiny-gemma3 (MQA) forward passes (fixtures/README.md) by hand,
// through the same builder API the compiler's emitter uses, for 1 device and for 2 and 3 devices (Q heads
// split in whole GQA sub-groups, KV heads given to every device that needs them, FFN and experts split
// unevenly, two all-reduces per layer, weights read through strided pieces). The plan is written to a
// file, loaded with loadPlan (GGUF fingerprint checked) and evaluated teacher-forced as the README
// describes; the 28 rows must match the reference within the fixture's tolerances and give its greedy ids
// (test/common/FixtureCheck.h, the check the e2e tests use). `tpc run` is driven on such a plan too.
// Skips with a message when the shared fixtures are absent.
//===----------------------------------------------------------------------===//
#include "runtime/exec/Executor.h"

#include "compiler/gguf/GGUFFile.h"
#include "compiler/tokenizer/GGUFTokenizer.h"

#include "test/common/FixtureCheck.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <unistd.h>

using namespace tpc;
using namespace tpc::rt;

namespace {

/// Where one device's share of the model lies.
struct Share {
  int64_t q0, nq;   ///< query heads
  int64_t kv0, nkv; ///< KV heads (may repeat on several devices)
  int64_t f0, nf;   ///< FFN rows
};

class LlamaPlanBuilder {
public:
  LlamaPlanBuilder(const gguf::GGUFFile &f) : f_(f) {}

  Plan build(const std::vector<Share> &shares, int64_t maxBatch) {
    Plan p;
    p.compilerVersion = "hand-built test";
    p.ggufPath = f_.path();
    p.ggufSize = f_.fileSize();
    auto fp = ggufFingerprint(f_.path());
    EXPECT_TRUE(fp);
    p.ggufFingerprint = *fp;
    const std::string arch = *f_.getString("general.architecture");
    const bool moe = arch == "qwen3moe"; // q/k norm, NEOX RoPE, top-k routed experts
    const bool gemma = arch == "gemma3"; // q/k norm, NEOX, sliding layers, post norms, GELU, tied output
    auto key = [&](const char *k) { return arch + "." + k; };
    const int64_t e = *f_.getU32(key("embedding_length")), layers = *f_.getU32(key("block_count"));
    const int64_t h = *f_.getU32(key("attention.head_count")),
                  hkv = *f_.getU32(key("attention.head_count_kv"));
    const float eps = *f_.getF32(key("attention.layer_norm_rms_epsilon"));
    const float base = *f_.getF32Or(key("rope.freq_base"), 10000.0f);
    const int64_t d = *f_.getU32Or(key("attention.key_length"), static_cast<uint32_t>(e / h)),
                  group = h / hkv;
    const int64_t experts = moe ? *f_.getU32(key("expert_count")) : 0;
    const int64_t used = moe ? *f_.getU32(key("expert_used_count")) : 0;
    const int64_t ropeMode = moe || gemma ? 1 : 0;
    const int64_t window = gemma ? *f_.getU32(key("attention.sliding_window")) : 0;
    const std::string outName = f_.findTensor("output.weight") ? "output.weight" : "token_embd.weight";
    const int64_t vocab = f_.findTensor(outName)->ne[1];
    p.model = {arch, vocab, 2048, maxBatch, 256};
    auto tk = tokenizerFromGGUF(f_);
    EXPECT_TRUE(tk);
    const TokenizerData &t = *tk;
    p.tokenizer = {
        t.model,        t.pre,         t.tokens, t.scores, t.tokenTypes, t.merges, t.bos,    t.eos,
        t.unk,          t.pad,         t.sep,    t.eot,    t.eom,        t.addBos, t.addEos, t.addSpacePrefix,
        t.ignoreMerges, t.cleanSpaces, ""};
    for (const Share &s : shares) {
      EXPECT_EQ(s.q0 / group, s.kv0); // whole sub-groups of one KV head range
      p.devices.emplace_back();
      dev_ = &p.devices.back();
      used_ = 0;
      wUsed_ = 0;
      DevicePlanBuilder b(*dev_);
      int32_t tok = b.io(Storage::InputTokens, DType::I32, {-1});
      int32_t pos = b.io(Storage::InputPositions, DType::I32, {-1});
      int32_t logits = b.io(Storage::OutputLogits, DType::F32, {-1, vocab});
      int32_t x = act({-1, e});
      b.step(OpKind::GetRows, {whole("token_embd.weight"), tok}, {x});
      if (gemma)
        b.step(OpKind::Scale, {x}, {x}, {}, {std::sqrt(float(e))});
      for (int64_t l = 0; l < layers; ++l) {
        auto n = [&](const char *w) { return fmt("blk.%lld.%s.weight", (long long)l, w); };
        int32_t hN = act({-1, e});
        b.step(OpKind::RmsNorm, {x, whole(n("attn_norm"))}, {hN}, {}, {eps});
        int32_t q = act({-1, s.nq * d}), k = act({-1, s.nkv * d}), v = act({-1, s.nkv * d});
        b.step(OpKind::Matmul, {hN, rows(n("attn_q"), s.q0 * d, s.nq * d)}, {q});
        b.step(OpKind::Matmul, {hN, rows(n("attn_k"), s.kv0 * d, s.nkv * d)}, {k});
        b.step(OpKind::Matmul, {hN, rows(n("attn_v"), s.kv0 * d, s.nkv * d)}, {v});
        int32_t q3 = b.view(q, DType::F32, {-1, s.nq, d}), k3 = b.view(k, DType::F32, {-1, s.nkv, d});
        int32_t v3 = b.view(v, DType::F32, {-1, s.nkv, d});
        int32_t qr = act({-1, s.nq, d}), kr = act({-1, s.nkv, d}), o = act({-1, s.nq, d});
        if (moe || gemma) { // per-head RMS norm of q and k before RoPE
          int32_t qn = act({-1, s.nq, d}), kn = act({-1, s.nkv, d});
          b.step(OpKind::RmsNorm, {q3, whole(n("attn_q_norm"))}, {qn}, {}, {eps});
          b.step(OpKind::RmsNorm, {k3, whole(n("attn_k_norm"))}, {kn}, {}, {eps});
          q3 = qn;
          k3 = kn;
        }
        // gemma3: layer il is global iff (il + 1) % 6 == 0; sliding layers use base 10000 and the window.
        const bool sliding = gemma && (l + 1) % 6 != 0;
        const float lbase = sliding ? 10000.0f : base;
        b.step(OpKind::Rope, {q3, pos}, {qr}, {ropeMode, d}, {lbase, 1.0f});
        b.step(OpKind::Rope, {k3, pos}, {kr}, {ropeMode, d}, {lbase, 1.0f});
        int32_t cache =
            b.addKv({static_cast<int32_t>(l), static_cast<int32_t>(s.nkv), static_cast<int32_t>(d),
                     static_cast<int32_t>(d), GGMLType::F16, GGMLType::F16, Placement::Device});
        b.step(OpKind::Attention, {qr, kr, v3, pos}, {o}, {cache, sliding ? window : 0},
               {1.0f / std::sqrt(float(d)), 0.0f});
        int32_t o2 = b.view(o, DType::F32, {-1, s.nq * d}), pa = act({-1, e});
        b.step(OpKind::Matmul, {o2, cols(n("attn_output"), s.q0 * d, s.nq * d)}, {pa});
        b.step(OpKind::AllReduce, {pa}, {pa}, {}, {}, n("attn_ar"));
        if (gemma) // the post norm needs the reduced sum
          b.step(OpKind::RmsNorm, {pa, whole(n("post_attention_norm"))}, {pa}, {}, {eps});
        b.step(OpKind::Add, {x, pa}, {x});
        int32_t h2 = act({-1, e}), pf = act({-1, e});
        b.step(OpKind::RmsNorm, {x, whole(n("ffn_norm"))}, {h2}, {}, {eps});
        if (moe) {
          // Router (mirrored), top-k, renormalised weights; experts split inside along their FFN dim.
          int32_t r = act({-1, experts}), pr = act({-1, experts}), ids = act({-1, used}, DType::I32);
          int32_t w = act({-1, used}), ws = act({-1, 1}), wn = act({-1, used});
          b.step(OpKind::Matmul, {h2, whole(n("ffn_gate_inp"))}, {r});
          b.step(OpKind::Softmax, {r}, {pr});
          b.step(OpKind::TopK, {pr}, {ids}, {used});
          b.step(OpKind::TakeAlong, {pr, ids}, {w});
          b.step(OpKind::Sum, {w}, {ws}, {1, 1});
          b.step(OpKind::Div, {w, ws}, {wn});
          int32_t g = act({-1, used, s.nf}), u = act({-1, used, s.nf}), a = act({-1, used, s.nf});
          int32_t dn = act({-1, used, e});
          b.step(OpKind::MulMatId, {h2, expertRows(n("ffn_gate_exps"), s.f0, s.nf), ids}, {g});
          b.step(OpKind::MulMatId, {h2, expertRows(n("ffn_up_exps"), s.f0, s.nf), ids}, {u});
          b.step(OpKind::Glu, {g, u}, {a}, {0});
          b.step(OpKind::MulMatId, {a, expertCols(n("ffn_down_exps"), s.f0, s.nf), ids}, {dn});
          b.step(OpKind::ExpertCombine, {dn, wn}, {pf});
        } else {
          int32_t g = act({-1, s.nf}), u = act({-1, s.nf}), a = act({-1, s.nf});
          b.step(OpKind::Matmul, {h2, rows(n("ffn_gate"), s.f0, s.nf)}, {g});
          b.step(OpKind::Matmul, {h2, rows(n("ffn_up"), s.f0, s.nf)}, {u});
          b.step(OpKind::Glu, {g, u}, {a}, {gemma ? 2 : 0});
          b.step(OpKind::Matmul, {a, cols(n("ffn_down"), s.f0, s.nf)}, {pf});
        }
        b.step(OpKind::AllReduce, {pf}, {pf}, {}, {}, n("ffn_ar"));
        if (gemma)
          b.step(OpKind::RmsNorm, {pf, whole(n("post_ffw_norm"))}, {pf}, {}, {eps});
        b.step(OpKind::Add, {x, pf}, {x});
      }
      int32_t xf = act({-1, e});
      b.step(OpKind::RmsNorm, {x, whole("output_norm.weight")}, {xf}, {}, {eps});
      b.step(OpKind::Matmul, {xf, whole(outName)}, {logits});
    }
    return p;
  }

private:
  static std::string fmt(const char *f, long long l, const char *w) {
    char buf[128];
    std::snprintf(buf, sizeof(buf), f, l, w);
    return buf;
  }
  int32_t act(std::vector<int64_t> shape, DType dt = DType::F32) {
    int64_t n = 1;
    for (size_t i = 0; i < shape.size(); ++i)
      n *= shape[i] == -1 ? 64 : shape[i]; // every plan here uses max_batch <= 64
    uint64_t off = used_;
    used_ += (n * 4 + 63) / 64 * 64;
    dev_->activationBytes = used_;
    return DevicePlanBuilder(*dev_).activation(dt, std::move(shape), off);
  }
  int32_t slice(const std::string &name, GGMLType type, std::vector<int64_t> shape, WeightPiece piece) {
    WeightSlice w{name, type, std::move(shape), wUsed_, piece.rows * piece.rowBytes, {piece}};
    wUsed_ += (w.bytes + 63) / 64 * 64;
    dev_->weightBytes = wUsed_;
    DevicePlanBuilder b(*dev_);
    return b.weight(b.addWeight(std::move(w)));
  }
  const gguf::TensorInfo &info(const std::string &name) {
    const gguf::TensorInfo *t = f_.findTensor(name);
    EXPECT_NE(t, nullptr) << name;
    return *t;
  }
  int32_t whole(const std::string &name) {
    const auto &t = info(name);
    uint64_t rb = *ggmlRowBytes(t.type, t.ne[0]), nrows = t.nelements / t.ne[0];
    std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
    return slice(name, t.type, shape, {t.fileOffset, rb, rb, nrows});
  }
  /// Rows [r0, r0 + n) of a 2-D weight.
  int32_t rows(const std::string &name, int64_t r0, int64_t n) {
    const auto &t = info(name);
    uint64_t rb = *ggmlRowBytes(t.type, t.ne[0]);
    return slice(name, t.type, {n, int64_t(t.ne[0])}, {t.fileOffset + r0 * rb, rb, rb, uint64_t(n)});
  }
  /// Rows [r0, r0 + n) of every expert of a [E, N, K] weight: one piece per expert.
  int32_t expertRows(const std::string &name, int64_t r0, int64_t n) {
    const auto &t = info(name);
    uint64_t rb = *ggmlRowBytes(t.type, t.ne[0]);
    std::vector<WeightPiece> pieces;
    for (uint64_t ex = 0; ex < t.ne[2]; ++ex)
      pieces.push_back({t.fileOffset + (ex * t.ne[1] + r0) * rb, rb, rb, uint64_t(n)});
    return slicePieces(name, t.type, {int64_t(t.ne[2]), n, int64_t(t.ne[0])}, pieces);
  }
  /// Columns [c0, c0 + n) of every row of every expert of a [E, N, K] weight: one strided piece.
  int32_t expertCols(const std::string &name, int64_t c0, int64_t n) {
    const auto &t = info(name);
    uint64_t rb = *ggmlRowBytes(t.type, t.ne[0]);
    auto skip = ggmlRowBytes(t.type, c0), part = ggmlRowBytes(t.type, n);
    EXPECT_TRUE(skip && part) << name << ": split not on a block boundary";
    return slicePieces(name, t.type, {int64_t(t.ne[2]), int64_t(t.ne[1]), n},
                       {{t.fileOffset + *skip, rb, *part, t.ne[1] * t.ne[2]}});
  }
  int32_t slicePieces(const std::string &name, GGMLType type, std::vector<int64_t> shape,
                      std::vector<WeightPiece> pieces) {
    uint64_t bytes = 0;
    for (const WeightPiece &pc : pieces)
      bytes += pc.rows * pc.rowBytes;
    WeightSlice w{name, type, std::move(shape), wUsed_, bytes, std::move(pieces)};
    wUsed_ += (w.bytes + 63) / 64 * 64;
    dev_->weightBytes = wUsed_;
    DevicePlanBuilder b(*dev_);
    return b.weight(b.addWeight(std::move(w)));
  }
  /// Columns [c0, c0 + n) of every row (whole quant blocks).
  int32_t cols(const std::string &name, int64_t c0, int64_t n) {
    const auto &t = info(name);
    uint64_t rb = *ggmlRowBytes(t.type, t.ne[0]);
    auto skip = ggmlRowBytes(t.type, c0), part = ggmlRowBytes(t.type, n);
    EXPECT_TRUE(skip && part) << name << ": split not on a block boundary";
    return slice(name, t.type, {int64_t(t.ne[1]), n}, {t.fileOffset + *skip, rb, *part, t.ne[1]});
  }

  const gguf::GGUFFile &f_;
  DevicePlan *dev_ = nullptr;
  uint64_t used_ = 0, wUsed_ = 0;
};

using Reference = tpc::test::FixtureReference;

Reference readReference(const std::string &dir, const std::string &name) {
  return tpc::test::readFixtureReference(dir + "/" + name);
}

void checkFixture(const std::string &name, const std::vector<std::vector<Share>> &splits) {
  const char *shared = std::getenv("TPC_SHARED_DIR");
  std::string dir = shared ? std::string(shared) + "/fixtures" : "";
  if (!shared || !std::ifstream(dir + "/" + name + ".gguf"))
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures/" << name << ".gguf not found; set TPC_SHARED_DIR to ../shared";
  auto file = gguf::GGUFFile::open(dir + "/" + name + ".gguf");
  ASSERT_TRUE(file) << file.message();
  Reference ref = readReference(dir, name);
  ASSERT_TRUE(ref.ok) << ref.error;
  for (const auto &shares : splits) {
    SCOPED_TRACE(name + " on " + std::to_string(shares.size()) + " devices");
    LlamaPlanBuilder builder(**file);
    Plan plan = builder.build(shares, 16);
    std::string path = ::testing::TempDir() + "tpc-llama-" + std::to_string(::getpid()) + ".plan";
    ASSERT_TRUE(writePlan(plan, path));
    auto loaded = loadPlan(path);
    std::remove(path.c_str());
    ASSERT_TRUE(loaded) << loaded.message();
    SessionOptions o;
    o.threads = 2;
    o.ctxSize = 64;
    auto s = Session::open(std::move(*loaded), o);
    ASSERT_TRUE(s) << s.message();
    auto got = tpc::test::teacherForced(**s, ref);
    ASSERT_TRUE(got) << got.message();
    ::testing::AssertionResult r = tpc::test::matchesReference(*got, ref);
    EXPECT_TRUE(r);
    std::printf("[ fixture  ] %s devices=%zu %s\n", name.c_str(), shares.size(), r.message());
  }
}

// tiny-llama: 8 query heads in 2 KV groups of 4, head dim 32, FFN 768.
const std::vector<Share> kOne = {{0, 8, 0, 2, 0, 768}};
const std::vector<Share> kTwo = {{0, 4, 0, 1, 0, 416}, {4, 4, 1, 1, 416, 352}};
const std::vector<Share> kThree = {{0, 4, 0, 1, 0, 320}, {4, 2, 1, 1, 320, 256}, {6, 2, 1, 1, 576, 192}};

TEST(Fixture, TinyLlamaF32OnOneTwoThreeDevices) { checkFixture("tiny-llama", {kOne, kTwo, kThree}); }

TEST(Fixture, TinyLlamaQ8_0OnOneAndTwoDevices) {
  // Q8_0 blocks are 32 wide: the FFN split must be a multiple of 32 (416/352 is).
  checkFixture("tiny-llama-Q8_0", {kOne, kTwo});
}

TEST(Fixture, TinyLlamaQ4KMOnOneDevice) { checkFixture("tiny-llama-Q4_K_M", {kOne}); }

// tiny-qwen3moe: 4 query heads in 2 KV groups, head dim 64, 8 experts (top 2) of FFN 256, split inside
// each expert (uneven for f32, on 32-element blocks for Q8_0).
const std::vector<Share> kMoeOne = {{0, 4, 0, 2, 0, 256}};
const std::vector<Share> kMoeTwo = {{0, 2, 0, 1, 0, 160}, {2, 2, 1, 1, 160, 96}};
const std::vector<Share> kMoeThree = {{0, 2, 0, 1, 0, 96}, {2, 1, 1, 1, 96, 96}, {3, 1, 1, 1, 192, 64}};

TEST(Fixture, TinyQwen3MoeOnOneTwoThreeDevices) {
  checkFixture("tiny-qwen3moe", {kMoeOne, kMoeTwo, kMoeThree});
}

// tiny-gemma3: 4 query heads sharing ONE KV head (MQA, head dim 128): with 2 or 3 devices the K/V
// projections and caches are mirrored and only the query heads split (2/2, 2/1/1).
const std::vector<Share> kGemmaOne = {{0, 4, 0, 1, 0, 768}};
const std::vector<Share> kGemmaTwo = {{0, 2, 0, 1, 0, 400}, {2, 2, 0, 1, 400, 368}};
const std::vector<Share> kGemmaThree = {{0, 2, 0, 1, 0, 256}, {2, 1, 0, 1, 256, 256}, {3, 1, 0, 1, 512, 256}};

TEST(Fixture, TinyGemma3MqaOnOneTwoThreeDevices) {
  checkFixture("tiny-gemma3", {kGemmaOne, kGemmaTwo, kGemmaThree});
}

TEST(Fixture, TinyQwen3MoeQ8_0OnOneAndThreeDevices) {
  checkFixture("tiny-qwen3moe-Q8_0", {kMoeOne, kMoeThree});
}

} // namespace

namespace {

TEST(TpcRun, GreedyDumpMatchesReferenceOnTwoDevices) {
  const char *shared = std::getenv("TPC_SHARED_DIR");
  std::string dir = shared ? std::string(shared) + "/fixtures" : "";
  if (!shared || !std::ifstream(dir + "/tiny-llama.gguf"))
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures/tiny-llama.gguf not found; set TPC_SHARED_DIR to ../shared";
  const std::string tpc = std::string(TPC_BINARY_DIR) + "/bin/tpc";
  if (::access(tpc.c_str(), X_OK) != 0)
    GTEST_SKIP() << tpc << " not built";
  auto file = gguf::GGUFFile::open(dir + "/tiny-llama.gguf");
  ASSERT_TRUE(file);
  Reference ref = readReference(dir, "tiny-llama");
  ASSERT_TRUE(ref.ok) << ref.error;
  LlamaPlanBuilder builder(**file);
  const std::string base = ::testing::TempDir() + "tpc-run-" + std::to_string(::getpid());
  ASSERT_TRUE(writePlan(builder.build(kTwo, 8), base + ".plan"));
  // max_batch 8 < 12 prompt tokens: the prompt runs in two chunks.
  EXPECT_TRUE(tpc::test::cliMatchesReference(tpc, base + ".plan", ref, "-t 2"));

  // Text in, text out, and the bench table.
  auto [rc2, text] = tpc::test::runShell(tpc + " run " + base + ".plan -p 'Once upon a time' -n 4 --greedy -t 2 2>&1");
  EXPECT_EQ(rc2, 0) << text;
  EXPECT_NE(text.find("Once upon a time"), std::string::npos) << text;
  auto [rc3, bench] = tpc::test::runShell(tpc + " run " + base + ".plan --bench -pp 16 -tg 4 -r 2 -t 2 2>&1");
  EXPECT_EQ(rc3, 0) << bench;
  EXPECT_NE(bench.find("| pp16 |"), std::string::npos) << bench;
  EXPECT_NE(bench.find("| tg4 |"), std::string::npos) << bench;

  // One-line errors naming the flag or file.
  auto [rc4, err] = tpc::test::runShell(tpc + " run " + base + ".plan --prompt-ids 1,x,3 2>&1");
  EXPECT_EQ(rc4, 1);
  EXPECT_NE(err.find("--prompt-ids: 'x'"), std::string::npos) << err;
  auto [rc5, err2] = tpc::test::runShell(tpc + " run " + base + ".plan --prompt-ids 1,2 -n 100 --ctx-size 50 2>&1");
  EXPECT_EQ(rc5, 1);
  EXPECT_NE(err2.find("--ctx-size"), std::string::npos) << err2;
  auto [rc6, err3] = tpc::test::runShell(tpc + " run " + base + ".missing --prompt-ids 1 2>&1");
  EXPECT_EQ(rc6, 1);
  EXPECT_NE(err3.find(base + ".missing"), std::string::npos) << err3;
  std::remove((base + ".plan").c_str());
}

/// Not a check: with TPC_KEEP_PLANS=DIR, writes the hand-built tiny-llama plans (F32, Q8_0; 1, 2 and 3
/// devices) there for bench/run.sh, until `tpc compile` emits plans.
TEST(TpcRun, KeepPlansForBench) {
  const char *keep = std::getenv("TPC_KEEP_PLANS"), *shared = std::getenv("TPC_SHARED_DIR");
  if (!keep || !shared)
    GTEST_SKIP() << "set TPC_KEEP_PLANS=DIR and TPC_SHARED_DIR to write benchmark plans";
  for (std::string name : {"tiny-llama", "tiny-llama-Q8_0"}) {
    auto file = gguf::GGUFFile::open(std::string(shared) + "/fixtures/" + name + ".gguf");
    ASSERT_TRUE(file);
    const std::vector<Share> *splits[] = {&kOne, &kTwo, &kThree};
    for (size_t n = 1; n <= (name == "tiny-llama" ? 3u : 2u); ++n) {
      LlamaPlanBuilder builder(**file);
      std::string path = std::string(keep) + "/" + name + "-d" + std::to_string(n) + ".plan";
      Plan plan = builder.build(*splits[n - 1], 64);
      plan.model.defaultCtx = 1024;
      ASSERT_TRUE(writePlan(plan, path));
    }
  }
}

} // namespace
