//===- DeltaNetTest.cpp - the hybrid (Gated DeltaNet) layers' kernels on CUDA ---===//
//
// The ops of Qwen3.5's linear-attention layers and gated attention, each against the CPU backend:
// ssm_conv and delta_net (after l2_norm of q and k) on one recurrent cache across calls that mix
// sequences, which is where the kernels' own token scan matters: an interleaved prefill of two sequences,
// a call of 300 tokens (more than one scan chunk of either kernel) that starts a third sequence and
// continues the first, batched decode steps, a call where a sequence gets fewer tokens than the conv
// state holds, and one that restarts a sequence at position 0 (its state must be ignored). The calls of
// three tokens replay one captured graph with different sequence and position patterns and must equal
// a session without graphs bit for bit. Then l2_norm and gated_rms_norm on short, long and odd rows
// (gated_rms_norm also writing the quantized x of the integer GEMV after it), softplus on both sides of
// its cut-off, and attention with an output gate (with and without sinks, the flash-decode and the
// tensor-core prefill kernels, the quantized output). Skips visibly without a GPU.
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include "runtime/plan/StepParams.h"

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

/// Appends step `op` with the parameters `p` packs.
void stepWith(PlanMaker &mk, OpKind op, std::vector<int32_t> in, std::vector<int32_t> out, const PackedParams &p) {
  mk.b(0).step(op, std::move(in), std::move(out), p.ints, p.floats);
}

struct DnCase {
  int64_t hk, hv, dk, dv; ///< delta_net heads and head dims
  int64_t c, k;           ///< ssm_conv channels and kernel width
};

struct RecurrentOut {
  int32_t conv, y;
};

/// ssm_conv of x[T, c] and l2_norm(q), l2_norm(k) -> delta_net on one recurrent cache, the inputs rows of
/// random tables (`rows` rows each, one per token id; seeds from `seed`).
RecurrentOut recurrentSteps(PlanMaker &mk, const DnCase &c, int64_t rows, uint32_t seed) {
  KvCache kc;
  kc.nHeadKv = int32_t(c.hv);
  kc.headDimK = int32_t(c.dk);
  kc.headDimV = int32_t(c.dv);
  kc.typeK = kc.typeV = GGMLType::F32;
  kc.kind = CacheKind::Recurrent;
  kc.convRows = int32_t(c.k - 1);
  kc.convChannels = int32_t(c.c);
  const int32_t kv = mk.b(0).addKv(kc);
  RecurrentOut o;
  const int32_t x = mk.tokenInput(0, {c.c}, randomFloats(rows * c.c, seed, -2, 2));
  const int32_t w = mk.weightF32(0, {c.c, c.k}, randomFloats(c.c * c.k, seed + 1));
  o.conv = mk.act(0, {-1, c.c});
  stepWith(mk, OpKind::SsmConv, {x, w, mk.positions[0]}, {o.conv}, SsmConvParams{kv}.pack());
  const int32_t q = mk.tokenInput(0, {c.hk, c.dk}, randomFloats(rows * c.hk * c.dk, seed + 2));
  const int32_t k = mk.tokenInput(0, {c.hk, c.dk}, randomFloats(rows * c.hk * c.dk, seed + 3));
  const int32_t v = mk.tokenInput(0, {c.hv, c.dv}, randomFloats(rows * c.hv * c.dv, seed + 4, -2, 2));
  // The models' log-decay is <= 0 and their write strength a sigmoid.
  const int32_t g = mk.tokenInput(0, {c.hv}, randomFloats(rows * c.hv, seed + 5, -1.5f, -0.02f));
  const int32_t beta = mk.tokenInput(0, {c.hv}, randomFloats(rows * c.hv, seed + 6, 0.05f, 0.95f));
  const int32_t qn = mk.act(0, {-1, c.hk, c.dk}), kn = mk.act(0, {-1, c.hk, c.dk});
  stepWith(mk, OpKind::L2Norm, {q}, {qn}, RmsNormParams{1e-6f}.pack());
  stepWith(mk, OpKind::L2Norm, {k}, {kn}, RmsNormParams{1e-6f}.pack());
  o.y = mk.act(0, {-1, c.hv, c.dv});
  stepWith(mk, OpKind::DeltaNet, {qn, kn, v, g, beta, mk.positions[0]}, {o.y},
           DeltaNetParams{kv, 1.0f / std::sqrt(float(c.dk))}.pack());
  return o;
}

/// A call's tokens: (sequence, position) pairs, token ids derived from both.
std::vector<BatchToken> batchOf(const std::vector<std::pair<int32_t, int32_t>> &sp, int32_t tableRows) {
  std::vector<BatchToken> b;
  for (auto [s, pos] : sp)
    b.push_back({(s * 97 + pos * 7) % tableRows, pos, s, false});
  return b;
}

TEST(CudaKernels, SsmConvAndDeltaNetOverMixedSequences) {
  TPC_REQUIRE_GPU();
  // Value heads tiled over key heads, head dims that leave partial column slices and padded state rows
  // (each register-row variant: dk 32, 80 and 128, 256), channel counts that leave a partial block, conv
  // widths 2, 3, 4 and 9 (the widest).
  const DnCase cases[] = {
      {2, 4, 32, 48, 80, 4}, {2, 6, 128, 128, 200, 4}, {1, 2, 80, 64, 33, 9}, {1, 3, 256, 32, 64, 2},
      {4, 4, 64, 96, 40, 3},
  };
  const int32_t rows = 256; // rows of the input tables: the token ids (a vocabulary of 256)
  for (const DnCase &c : cases) {
    SCOPED_TRACE("hk " + std::to_string(c.hk) + " hv " + std::to_string(c.hv) + " dk " + std::to_string(c.dk) +
                 " dv " + std::to_string(c.dv) + " channels " + std::to_string(c.c) + " width " +
                 std::to_string(c.k));
    PlanMaker mk(1, 320, 256);
    const RecurrentOut r = recurrentSteps(mk, c, rows, 7);
    SessionOptions o = mk.options(2, 512);
    o.sequences = 3;
    GraphTrio trio = openGraphTrio(mk.plan, o);
    ASSERT_TRUE(trio.ok);
    Pair &p = trio.p;
    Session *plain = trio.plain.get();
    auto run = [&](const std::vector<std::pair<int32_t, int32_t>> &sp, const std::string &what) {
      SCOPED_TRACE(what);
      const std::vector<BatchToken> b = batchOf(sp, rows);
      ASSERT_TRUE(p.cpu->evaluate(b));
      ASSERT_TRUE(p.gpu->evaluate(b));
      ASSERT_TRUE(plain->evaluate(b));
      const int64_t t = int64_t(b.size());
      expectClose(p, 0, r.conv, t, 1e-5, "ssm_conv");
      expectClose(p, 0, r.y, t, 2e-3, "delta_net");
      EXPECT_EQ(p.gpu->tensorData(0, r.conv, t), plain->tensorData(0, r.conv, t)) << "ssm_conv: graph vs none";
      EXPECT_EQ(p.gpu->tensorData(0, r.y, t), plain->tensorData(0, r.y, t)) << "delta_net: graph vs none";
    };
    // Sequence 0 at positions 0..39 with sequence 1's 0..19 on every other token.
    std::vector<std::pair<int32_t, int32_t>> sp;
    for (int32_t i = 0; i < 40; ++i) {
      sp.push_back({0, i});
      if (i % 2 == 0)
        sp.push_back({1, i / 2});
    }
    run(sp, "interleaved prefill of 2 sequences");
    // 300 tokens: sequence 2 starts (0..99 alone, then 100..179 alternating with sequence 0's 40..119),
    // then sequence 0 alone (120..159).
    sp.clear();
    for (int32_t i = 0; i < 100; ++i)
      sp.push_back({2, i});
    for (int32_t i = 0; i < 80; ++i) {
      sp.push_back({2, 100 + i});
      sp.push_back({0, 40 + i});
    }
    for (int32_t i = 120; i < 160; ++i)
      sp.push_back({0, i});
    run(sp, "300 tokens of 2 sequences");
    int32_t next[3] = {160, 20, 180};
    auto decode = [&](const std::string &what) {
      run({{0, next[0]}, {1, next[1]}, {2, next[2]}}, what);
      for (int32_t &n : next)
        ++n;
    };
    for (int i = 0; i < 3; ++i)
      decode("batched decode " + std::to_string(i));
    // Sequence 1 gets two tokens (fewer than a width-4 conv's state rows), sequence 0 one; same shape as
    // the decode steps (one graph), other sequences and positions.
    run({{1, next[1]}, {0, next[0]}, {1, next[1] + 1}}, "two tokens of sequence 1, one of sequence 0");
    next[0] += 1, next[1] += 2;
    // Sequence 1 restarts at position 0: its stored states must not leak in.
    run({{1, 0}, {2, next[2]}, {1, 1}}, "sequence 1 restarted at 0");
    next[1] = 2, next[2] += 1;
    for (int i = 0; i < 2; ++i)
      decode("batched decode after the restart " + std::to_string(i));
    // One sequence alone (the other blocks find no token) and a single-token call (its own graph).
    run({{2, next[2]}}, "decode of sequence 2 alone");
  }
}

TEST(CudaKernels, L2NormGatedRmsNormAndSoftplus) {
  TPC_REQUIRE_GPU();
  PlanMaker mk(1, 1, 1);
  std::vector<int32_t> outs;
  // Rows kept in registers (128, 20), and longer ones read twice (300); a zero row (the eps floor).
  for (int64_t n : {int64_t(128), int64_t(20), int64_t(300)}) {
    auto xv = randomFloats(6 * 4 * n, 61 + uint32_t(n), -3, 3);
    std::fill(xv.begin(), xv.begin() + n, 0.0f);
    const int32_t x = mk.input(0, {6, 4, n}, xv);
    const int32_t z = mk.input(0, {6, 4, n}, randomFloats(6 * 4 * n, 62 + uint32_t(n), -4, 4));
    const int32_t w = mk.weightF32(0, {n}, randomFloats(n, 63 + uint32_t(n)));
    const int32_t l2 = mk.act(0, {6, 4, n}), gn = mk.act(0, {6, 4, n});
    stepWith(mk, OpKind::L2Norm, {x}, {l2}, RmsNormParams{1e-6f}.pack());
    stepWith(mk, OpKind::GatedRmsNorm, {x, w, z}, {gn}, RmsNormParams{1e-5f}.pack());
    outs.push_back(l2);
    outs.push_back(gn);
  }
  const int32_t sx = mk.input(0, {3, 77}, randomFloats(3 * 77, 64, -30, 30)), sp = mk.act(0, {3, 77});
  stepWith(mk, OpKind::Unary, {sx}, {sp}, UnaryParams{UnaryFn::Softplus}.pack());
  Pair p = runBoth(mk, {{0, 1}});
  for (size_t i = 0; i < outs.size(); ++i)
    expectClose(p, 0, outs[i], 1, 1e-5, "row norm " + std::to_string(i));
  expectClose(p, 0, sp, 1, 1e-5, "softplus");
}

TEST(CudaKernels, GatedRmsNormWritesTheQuantizedX) {
  TPC_REQUIRE_GPU();
  // gated_rms_norm over [T, heads, 128] feeding a quantized matmul on its [T, heads * 128] view (the
  // linear-attention layer's output projection) writes that matmul's quantized x itself: bit-identical to
  // the unfused run, and close to the CPU. One row (decode) and four.
  const int64_t h = 4, d = 128, n = 48;
  for (int32_t t : {1, 4}) {
    SCOPED_TRACE("tokens " + std::to_string(t));
    PlanMaker mk(1, 4, 16);
    std::vector<float> deq;
    const int32_t x = mk.tokenInput(0, {h, d}, randomFloats(16 * h * d, 71, -2, 2));
    const int32_t z = mk.tokenInput(0, {h, d}, randomFloats(16 * h * d, 72, -3, 3));
    const int32_t w = mk.weightF32(0, {d}, randomFloats(d, 73));
    const int32_t wq = mk.weightRaw(0, GGMLType::Q8_0, {n, h * d}, randomWeight(GGMLType::Q8_0, n, h * d, 74, deq));
    const int32_t y = mk.act(0, {-1, h, d}), out = mk.act(0, {-1, n});
    stepWith(mk, OpKind::GatedRmsNorm, {x, w, z}, {y}, RmsNormParams{1e-6f}.pack());
    const int32_t flat = mk.b(0).view(y, DType::F32, {-1, h * d});
    mk.b(0).step(OpKind::Matmul, {flat, wq}, {out});
    Pair p = runBoth(mk, {{0, t}}, 64);
    cuda::CudaOptions plain;
    plain.fuse = false;
    Pair q = runBoth(mk, {{0, t}}, 64, plain);
    ASSERT_TRUE(p.gpu && q.gpu);
    expectClose(p, 0, y, t, 1e-5, "gated_rms_norm");
    expectClose(p, 0, out, t, 3e-2, "matmul after it");
    EXPECT_EQ(p.gpu->tensorData(0, out, t), q.gpu->tensorData(0, out, t)) << "fused vs unfused";
  }
}

/// Attention of hq query heads over hkv KV heads (head dims d) with an output gate [T, hq, d] (and sinks
/// when asked: the gate is then the sixth input); inputs are rows of random tables. Returns the output.
int32_t gatedAttention(PlanMaker &mk, int64_t hq, int64_t hkv, int64_t d, bool sinks, DType cache, int64_t rows,
                       uint32_t seed) {
  const int32_t q = mk.tokenInput(0, {hq, d}, randomFloats(rows * hq * d, seed, -2, 2));
  const int32_t k = mk.tokenInput(0, {hkv, d}, randomFloats(rows * hkv * d, seed + 1, -2, 2));
  const int32_t v = mk.tokenInput(0, {hkv, d}, randomFloats(rows * hkv * d, seed + 2));
  const int32_t g = mk.tokenInput(0, {hq, d}, randomFloats(rows * hq * d, seed + 3, -4, 4));
  const int32_t y = mk.act(0, {-1, hq, d});
  const int32_t kv = mk.b(0).addKv({0, int32_t(hkv), int32_t(d), int32_t(d),
                                    cache == DType::F32 ? GGMLType::F32 : GGMLType::F16,
                                    cache == DType::F32 ? GGMLType::F32 : GGMLType::F16, Placement::Device});
  std::vector<int32_t> in = {q, k, v, mk.positions[0]};
  if (sinks)
    in.push_back(mk.input(0, {hq}, randomFloats(hq, seed + 4)));
  in.push_back(g);
  AttentionParams ap;
  ap.kvCache = kv;
  ap.scale = 0.3f;
  ap.gated = true;
  stepWith(mk, OpKind::Attention, in, {y}, ap.pack());
  return y;
}

TEST(CudaKernels, GatedAttentionPrefillDecodeAndQuantizedOutput) {
  TPC_REQUIRE_GPU();
  // A prefill of 40 tokens (the tensor-core kernel for the f16 caches, the flash-decode kernel for f32),
  // then decode steps (flash-decode; the first output also quantized for the output projection that
  // follows, which must see the gated values: bit-identical to the unfused run).
  const int64_t hq = 4, d = 128, n = 40;
  PlanMaker mk(1, 40, 256);
  std::vector<float> deq;
  const int32_t y1 = gatedAttention(mk, hq, 2, d, false, DType::F16, 256, 81);
  // The output projection right after it (within the fusion lookahead).
  const int32_t wq = mk.weightRaw(0, GGMLType::Q8_0, {n, hq * d}, randomWeight(GGMLType::Q8_0, n, hq * d, 84, deq));
  const int32_t flat = mk.b(0).view(y1, DType::F32, {-1, hq * d}), out = mk.act(0, {-1, n});
  mk.b(0).step(OpKind::Matmul, {flat, wq}, {out});
  const int32_t y2 = gatedAttention(mk, hq, 1, 64, true, DType::F16, 256, 91);
  const int32_t y3 = gatedAttention(mk, 2, 2, 96, true, DType::F32, 256, 101);
  Pair p = runBoth(mk, {{0, 40}}, 256);
  cuda::CudaOptions plain;
  plain.fuse = false;
  Pair q = runBoth(mk, {{0, 40}}, 256, plain);
  ASSERT_TRUE(p.gpu && q.gpu);
  expectClose(p, 0, y1, 40, 1e-2, "prefill, f16 cache");
  expectClose(p, 0, y2, 40, 1e-2, "prefill, f16 cache, sinks");
  expectClose(p, 0, y3, 40, 1e-4, "prefill, f32 cache, sinks");
  for (int32_t pos = 40; pos < 44; ++pos) {
    for (Pair *s : {&p, &q}) {
      ASSERT_TRUE(s->cpu->evaluate({pos}, {pos}));
      ASSERT_TRUE(s->gpu->evaluate({pos}, {pos}));
    }
    const std::string at = " at " + std::to_string(pos);
    expectClose(p, 0, y1, 1, 1e-4, "decode" + at);
    expectClose(p, 0, y2, 1, 1e-4, "decode, sinks" + at);
    expectClose(p, 0, y3, 1, 1e-4, "decode, f32 cache, sinks" + at);
    expectClose(p, 0, out, 1, 3e-2, "output projection" + at);
    EXPECT_EQ(p.gpu->tensorData(0, out, 1), q.gpu->tensorData(0, out, 1)) << "fused vs unfused" << at;
  }
}

} // namespace
