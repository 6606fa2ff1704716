//===- AttentionTest.cpp - RoPE and attention on CUDA ---------------------------===//
//
// RoPE in both modes, partial n_dims, with frequency factors, in place and out of place; attention over
// the KV cache (GQA, MQA, sliding window, soft-cap, sinks, f16, f32, q8_0 and q4_0 caches, head dims up to
// 256) across a chunked prefill and single-token decode steps (replayed CUDA graphs), each against the CPU
// backend; the tensor-core prefill kernel on calls of several sequences, then their batched decode steps.
// Skips visibly without a GPU.
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include "runtime/plan/StepParams.h"

#include <optional>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

TEST(CudaKernels, RopeNormalNeoxPartialAndFreqFactors) {
  TPC_REQUIRE_GPU();
  const int64_t t = 7, hh = 3, d = 16;
  for (int mode : {0, 1})
    for (int64_t nDims : {int64_t(16), int64_t(8)})
      for (bool ff : {false, true}) {
        PlanMaker mk(1, t, 64);
        int32_t x = mk.tokenInput(0, {hh, d}, randomFloats(t * hh * d, 12)), y = mk.act(0, {-1, hh, d});
        std::vector<int32_t> in = {x, mk.positions[0]};
        if (ff)
          in.push_back(mk.weightF32(0, {nDims / 2}, randomFloats(nDims / 2, 13, 1, 4)));
        mk.b(0).step(OpKind::Rope, in, {y}, {mode, nDims}, {10000.0f, 0.5f});
        // In place too (dims past n_dims stay as they are).
        mk.b(0).step(OpKind::Rope, in, {x}, {mode, nDims}, {10000.0f, 0.5f});
        Pair p = runBoth(mk, {{0, int32_t(t)}}, 64);
        expectClose(p, 0, y, t, 1e-5, "rope out of place");
        expectClose(p, 0, x, t, 1e-5, "rope in place");
      }
}

/// YaRN (gpt-oss's factor 32 over 4096, beta 32 / 1, NEOX over the whole head) against the CPU backend:
/// the ramp between the correction dims and the cos/sin magnitude.
TEST(CudaKernels, RopeYarn) {
  TPC_REQUIRE_GPU();
  const int64_t t = 7, hh = 3, d = 64;
  PlanMaker mk(1, t, 64);
  int32_t x = mk.tokenInput(0, {hh, d}, randomFloats(t * hh * d, 14)), y = mk.act(0, {-1, hh, d});
  RopeParams p{RopeMode::Neox, d, 150000.0f, 1.0f / 32};
  p.origCtx = 4096;
  p.extFactor = 1.0f;
  const PackedParams pp = p.pack();
  mk.b(0).step(OpKind::Rope, {x, mk.positions[0]}, {y}, pp.ints, pp.floats);
  Pair r = runBoth(mk, {{0, int32_t(t)}}, 64);
  expectClose(r, 0, y, t, 1e-5, "rope yarn");
}

struct AttnCase {
  int64_t hq, hkv, dk, dv, window;
  float softcap;
  bool sinks;
  DType cache;
};

/// One attention step of case c over q, k, v rows of random tables (`rows` rows each, one per token id;
/// seeds from `seed`), its cache halves stored as `tk` / `tv` (default: c.cache); returns its output tensor.
int32_t attentionStep(PlanMaker &mk, const AttnCase &c, int64_t rows, uint32_t seed,
                      std::optional<GGMLType> tk = std::nullopt, std::optional<GGMLType> tv = std::nullopt) {
  const GGMLType plain = c.cache == DType::F32 ? GGMLType::F32 : GGMLType::F16;
  int32_t qi = mk.tokenInput(0, {c.hq, c.dk}, randomFloats(rows * c.hq * c.dk, seed, -2, 2));
  int32_t ki = mk.tokenInput(0, {c.hkv, c.dk}, randomFloats(rows * c.hkv * c.dk, seed + 1, -2, 2));
  int32_t vi = mk.tokenInput(0, {c.hkv, c.dv}, randomFloats(rows * c.hkv * c.dv, seed + 2));
  int32_t y = mk.act(0, {-1, c.hq, c.dv});
  int32_t kv = mk.b(0).addKv({0, int32_t(c.hkv), int32_t(c.dk), int32_t(c.dv), tk.value_or(plain),
                              tv.value_or(plain), Placement::Device});
  std::vector<int32_t> in = {qi, ki, vi, mk.positions[0]};
  if (c.sinks)
    in.push_back(mk.input(0, {c.hq}, randomFloats(c.hq, seed + 3)));
  mk.b(0).step(OpKind::Attention, in, {y}, {kv, c.window}, {0.3f, c.softcap});
  return y;
}

TEST(CudaKernels, AttentionPrefillThenDecode) {
  TPC_REQUIRE_GPU();
  const AttnCase cases[] = {
      {4, 2, 32, 32, 0, 0, false, DType::F16},    {8, 1, 64, 64, 0, 0, false, DType::F16},
      {6, 3, 128, 96, 5, 0, false, DType::F32},   {4, 4, 256, 256, 0, 30.0f, true, DType::F16},
      {2, 1, 80, 80, 3, 20.0f, true, DType::F32},
  };
  const int64_t maxT = 40;
  for (const AttnCase &c : cases) {
    SCOPED_TRACE("hq " + std::to_string(c.hq) + " hkv " + std::to_string(c.hkv) + " dk " +
                 std::to_string(c.dk));
    PlanMaker mk(1, 16, 64);
    const int32_t y = attentionStep(mk, c, maxT, 1);
    // Prefill 13 (one chunk), then 16 + 3 in chunks of 16, then single-token decode steps (graphs).
    Pair p = runBoth(mk, {{0, 13}, {13, 19}});
    expectClose(p, 0, y, 3, 1e-4, "prefill tail");
    for (int32_t pos = 32; pos < 36; ++pos) {
      ASSERT_TRUE(p.cpu->evaluate({pos}, {pos}));
      ASSERT_TRUE(p.gpu->evaluate({pos}, {pos}));
      expectClose(p, 0, y, 1, 1e-4, "decode at " + std::to_string(pos));
    }
  }
}

// q8_0 / q4_0 caches (and mixed halves): the warp-per-block append and the decode kernel's block reads,
// for prefill chunks (which then do not take the tensor-core kernel) and decode steps, against the CPU
// backend, which quantizes with the same reference formulas and dequantizes to the same values. 2e-3:
// the f32 sums run in another order, and a K value one ulp away on the two backends can round to the
// neighbouring q8_0 step (none should: the inputs are the same table rows).
TEST(CudaKernels, AttentionQuantizedCaches) {
  TPC_REQUIRE_GPU();
  struct QCase {
    AttnCase c;
    GGMLType tk, tv;
  };
  const QCase cases[] = {
      {{4, 2, 32, 32, 0, 0, false, DType::F16}, GGMLType::Q8_0, GGMLType::Q8_0},
      {{8, 1, 64, 64, 5, 0, true, DType::F16}, GGMLType::Q4_0, GGMLType::Q4_0},
      {{6, 3, 128, 96, 0, 20.0f, false, DType::F16}, GGMLType::Q8_0, GGMLType::F16},
      {{4, 4, 256, 256, 3, 0, true, DType::F16}, GGMLType::F32, GGMLType::Q4_0},
  };
  for (const QCase &q : cases) {
    SCOPED_TRACE(std::string(ggmlTypeName(q.tk)) + " / " + ggmlTypeName(q.tv) + ", dk " +
                 std::to_string(q.c.dk));
    PlanMaker mk(1, 40, 64);
    const int32_t y = attentionStep(mk, q.c, 48, 21, q.tk, q.tv);
    Pair p = runBoth(mk, {{0, 13}, {13, 27}}); // positions 0..39: a chunk of 13, one of 27
    expectClose(p, 0, y, 27, 2e-3, "prefill");
    for (int32_t pos = 40; pos < 44; ++pos) {
      ASSERT_TRUE(p.cpu->evaluate({pos}, {pos}));
      ASSERT_TRUE(p.gpu->evaluate({pos}, {pos}));
      expectClose(p, 0, y, 1, 2e-3, "decode at " + std::to_string(pos));
    }
  }
}

// K/V of every KV head with q a range of the model's query heads (AttentionParams qHead0/group: devices
// outnumbering the KV heads), ranges inside one group and across two, on the flash-decode and the
// tensor-core prefill kernels (a call of 48 tokens), each against the CPU backend.
TEST(CudaKernels, AttentionQueryHeadRangesOverMirroredKv) {
  TPC_REQUIRE_GPU();
  const int64_t hkv = 2, group = 3, dk = 64, dv = 64, rows = 64;
  for (auto [h0, n] : {std::pair<int64_t, int64_t>{1, 2}, {2, 3}, {5, 1}}) {
    SCOPED_TRACE("query heads " + std::to_string(h0) + "+" + std::to_string(n));
    PlanMaker mk(1, 64, 128);
    int32_t qi = mk.tokenInput(0, {n, dk}, randomFloats(rows * n * dk, 7, -2, 2));
    int32_t ki = mk.tokenInput(0, {hkv, dk}, randomFloats(rows * hkv * dk, 8, -2, 2));
    int32_t vi = mk.tokenInput(0, {hkv, dv}, randomFloats(rows * hkv * dv, 9));
    int32_t y = mk.act(0, {-1, n, dv});
    int32_t kv = mk.b(0).addKv(
        {0, int32_t(hkv), int32_t(dk), int32_t(dv), GGMLType::F16, GGMLType::F16, Placement::Device});
    AttentionParams ap{kv, 0, 0.3f, 0, false, h0, group};
    PackedParams pk = ap.pack();
    mk.b(0).step(OpKind::Attention, {qi, ki, vi, mk.positions[0]}, {y}, pk.ints, pk.floats);
    Pair p = runBoth(mk, {{0, 48}});
    expectClose(p, 0, y, 48, 2e-3, "prefill");
    for (int32_t pos = 48; pos < 51; ++pos) {
      ASSERT_TRUE(p.cpu->evaluate({pos}, {pos}));
      ASSERT_TRUE(p.gpu->evaluate({pos}, {pos}));
      expectClose(p, 0, y, 1, 1e-4, "decode at " + std::to_string(pos));
    }
  }
}

/// Tokens (ids = rows of the input tables), positions start .. start + n - 1 of each of `seqs` sequences,
/// interleaved.
std::vector<BatchToken> interleaved(int32_t seqs, int32_t start, int32_t n, int32_t tableRows) {
  std::vector<BatchToken> b;
  for (int32_t i = 0; i < n; ++i)
    for (int32_t s = 0; s < seqs; ++s)
      b.push_back({(s * 97 + start + i) % tableRows, start + i, s, false});
  return b;
}

TEST(CudaKernels, AttentionTensorCorePrefillOfSeveralSequences) {
  TPC_REQUIRE_GPU();
  // Calls of 32 tokens and more with an f16 cache run the tensor-core prefill kernel: two sequences
  // interleaved in one call of 2 x 48 tokens, a second call of 2 x 40 continuing both (positions before the
  // call come from the cache), then batched decode steps of both sequences (the flash-decode kernel, in
  // captured graphs: equal to the same session without graphs, bit for bit), each against the CPU. Head
  // dims 64, 128 / 96, 256, 80 and 40 (padded to the kernel's 64 / 128 / 256), GQA and MQA, windows,
  // soft-cap and sinks; 96 rows leave the last 64-row tile partial.
  const AttnCase cases[] = {
      {8, 2, 64, 64, 0, 0, false, DType::F16},       {4, 4, 128, 96, 50, 0, false, DType::F16},
      {4, 1, 256, 256, 0, 30.0f, true, DType::F16},  {6, 3, 80, 80, 20, 20.0f, true, DType::F16},
      {4, 2, 40, 40, 0, 0, false, DType::F16},
  };
  const int32_t rows = 200; // rows of the input tables: the token ids (a vocabulary of 256)
  for (const AttnCase &c : cases) {
    SCOPED_TRACE("hq " + std::to_string(c.hq) + " hkv " + std::to_string(c.hkv) + " dk " + std::to_string(c.dk) +
                 " dv " + std::to_string(c.dv) + " window " + std::to_string(c.window));
    PlanMaker mk(1, 128, 256);
    const int32_t y = attentionStep(mk, c, rows, 5);
    SessionOptions o = mk.options(2, 256);
    o.sequences = 2;
    GraphTrio trio = openGraphTrio(mk.plan, o);
    ASSERT_TRUE(trio.ok);
    Pair &p = trio.p;
    Session *plain = trio.plain.get();
    auto runAll = [&](const std::vector<BatchToken> &b) {
      ASSERT_TRUE(p.cpu->evaluate(b));
      ASSERT_TRUE(p.gpu->evaluate(b));
      ASSERT_TRUE(plain->evaluate(b));
    };
    runAll(interleaved(2, 0, 48, rows));
    expectClose(p, 0, y, 96, 1e-2, "prefill of 2 x 48");
    runAll(interleaved(2, 48, 40, rows));
    expectClose(p, 0, y, 80, 1e-2, "prefill of 2 x 40 after 48");
    for (int32_t pos = 88; pos < 92; ++pos) {
      runAll(interleaved(2, pos, 1, rows));
      expectClose(p, 0, y, 2, 1e-4, "batched decode at " + std::to_string(pos));
      EXPECT_EQ(p.gpu->tensorData(0, y, 2), plain->tensorData(0, y, 2)) << "graph vs no graph at " << pos;
    }
  }
}

} // namespace
