//===- AttentionTest.cpp - attention vs a scalar reference, decode == batch --===//
//
// Covers GQA, MQA and MHA head mappings, sliding windows, soft-capping, sinks, f16, f32, q8_0 and q4_0
// caches (the session's append quantizes each head's row; the reference reads the same rounded values)
// and Dk != Dv. Every case also runs token by token (incremental decode through the KV cache) and must give
// the same rows as the one-batch run.
//===----------------------------------------------------------------------===//
#include "test/runtime/exec/ExecTestUtil.h"

#include "runtime/cpu/ops/Ops.h"
#include "runtime/ggml/Quant.h"

#include <cmath>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

struct AttnCase {
  int64_t hq, hkv, dk, dv, window;
  float softcap;
  bool sinks;
  GGMLType cache; ///< both halves
};

/// The case as a one-step plan; returns the output tensor id.
int32_t buildAttention(PlanMaker &mk, const AttnCase &c, int64_t t, const std::vector<float> &q,
                       const std::vector<float> &k, const std::vector<float> &v,
                       const std::vector<float> &sinks) {
  int32_t qi = mk.tokenInput(0, {c.hq, c.dk}, q), ki = mk.tokenInput(0, {c.hkv, c.dk}, k);
  int32_t vi = mk.tokenInput(0, {c.hkv, c.dv}, v), y = mk.act(0, {-1, c.hq, c.dv});
  int32_t kv = mk.b(0).addKv({0, static_cast<int32_t>(c.hkv), static_cast<int32_t>(c.dk),
                              static_cast<int32_t>(c.dv), c.cache, c.cache, Placement::Device});
  // Per position: each KV head's K and V row, 4 / 2 bytes a value, 34 / 18 bytes per 32 (q8_0 / q4_0).
  const uint64_t perValue2 = c.cache == GGMLType::F32 ? 8 : c.cache == GGMLType::F16 ? 4 : 0;
  const uint64_t perBlock = c.cache == GGMLType::Q8_0 ? 34 : c.cache == GGMLType::Q4_0 ? 18 : 0;
  EXPECT_EQ(mk.plan.devices[0].kvBytesPerToken, uint64_t(c.hkv) * (perValue2 * uint64_t(c.dk + c.dv) / 2 +
                                                                   perBlock * uint64_t(c.dk + c.dv) / 32));
  std::vector<int32_t> in = {qi, ki, vi, mk.positions[0]};
  if (c.sinks)
    in.push_back(mk.input(0, {c.hq}, sinks));
  mk.b(0).step(OpKind::Attention, in, {y}, {kv, c.window}, {0.3f, c.softcap});
  (void)t;
  return y;
}

/// Scalar attention over all t tokens (positions 0..t-1), rounding K/V like the cache does.
std::vector<float> refAttention(const AttnCase &c, int64_t t, const std::vector<float> &q,
                                std::vector<float> k, std::vector<float> v, const std::vector<float> &sinks) {
  if (c.cache == GGMLType::F16) {
    for (float &x : k)
      x = cpu::halfToFloat(cpu::floatToHalf(x));
    for (float &x : v)
      x = cpu::halfToFloat(cpu::floatToHalf(x));
  }
  if (c.cache == GGMLType::Q8_0 || c.cache == GGMLType::Q4_0)
    for (std::vector<float> *x : {&k, &v}) { // each head's row: whole blocks (dims multiples of 32)
      std::vector<uint8_t> blocks(x->size() * 2);
      quantizeRow(c.cache, x->data(), blocks.data(), static_cast<int64_t>(x->size()));
      dequantizeRow(c.cache, blocks.data(), x->data(), static_cast<int64_t>(x->size()));
    }
  std::vector<float> y(t * c.hq * c.dv);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t h = 0; h < c.hq; ++h) {
      const int64_t kh = h / (c.hq / c.hkv);
      std::vector<double> s;
      std::vector<int64_t> js;
      for (int64_t j = 0; j <= i; ++j) {
        if (c.window && i - j >= c.window)
          continue;
        double d = 0;
        for (int64_t e = 0; e < c.dk; ++e)
          d += double(q[(i * c.hq + h) * c.dk + e]) * k[(j * c.hkv + kh) * c.dk + e];
        d *= 0.3;
        if (c.softcap > 0)
          d = c.softcap * std::tanh(d / c.softcap);
        s.push_back(d);
        js.push_back(j);
      }
      double mx = c.sinks ? sinks[h] : -1e300;
      for (double x : s)
        mx = std::max(mx, x);
      double denom = c.sinks ? std::exp(sinks[h] - mx) : 0;
      for (double &x : s)
        denom += (x = std::exp(x - mx));
      for (int64_t e = 0; e < c.dv; ++e) {
        double acc = 0;
        for (size_t n = 0; n < s.size(); ++n)
          acc += s[n] * v[(js[n] * c.hkv + kh) * c.dv + e];
        y[(i * c.hq + h) * c.dv + e] = static_cast<float>(acc / denom);
      }
    }
  return y;
}

TEST(Attention, MatchesReferenceAndIncrementalDecode) {
  const AttnCase cases[] = {
      {4, 2, 16, 16, 0, 0, false, GGMLType::F32},    // GQA
      {4, 1, 16, 8, 0, 0, false, GGMLType::F16},     // MQA, Dk != Dv, f16 cache
      {3, 3, 8, 8, 0, 0, false, GGMLType::F16},      // MHA
      {4, 2, 16, 16, 3, 0, false, GGMLType::F32},    // sliding window
      {2, 1, 8, 8, 2, 5.0f, false, GGMLType::F16},   // window + soft-cap
      {4, 2, 8, 12, 0, 0, true, GGMLType::F32},      // sinks
      {6, 2, 8, 8, 4, 2.0f, true, GGMLType::F16},    // everything
      {4, 2, 32, 32, 0, 0, false, GGMLType::Q8_0},   // quantized caches: blocks per head row
      {4, 1, 64, 32, 3, 0, true, GGMLType::Q4_0},    // MQA, Dk != Dv, window, sinks
      {6, 2, 32, 64, 4, 2.0f, true, GGMLType::Q8_0}, // everything
  };
  // 9 tokens run each step on one thread; 40 tokens are enough work to split over the threads.
  for (const int64_t t : {int64_t(9), int64_t(40)}) {
    int idx = 0;
    for (const AttnCase &c : cases) {
      SCOPED_TRACE("case " + std::to_string(idx++) + ", " + std::to_string(t) + " tokens");
      auto q = randomFloats(t * c.hq * c.dk, 100 + idx), k = randomFloats(t * c.hkv * c.dk, 200 + idx);
      auto v = randomFloats(t * c.hkv * c.dv, 300 + idx), sinks = randomFloats(c.hq, 400 + idx);
      PlanMaker batch(1, t, t);
      int32_t y = buildAttention(batch, c, t, q, k, v, sinks);
      auto s = batch.run(t, 3);
      ASSERT_TRUE(s);
      auto got = s->tensorData(0, y, t);
      auto want = refAttention(c, t, q, k, v, sinks);
      EXPECT_LT(maxAbsDiff(got, want), 2e-5f);

      // Token by token through the cache.
      PlanMaker step(1, t, t);
      int32_t ys = buildAttention(step, c, t, q, k, v, sinks);
      auto inc = step.open(2);
      ASSERT_TRUE(inc);
      std::vector<float> rows;
      for (int32_t i = 0; i < t; ++i) {
        auto r = inc->evaluate({i}, {i});
        ASSERT_TRUE(r) << r.message();
        auto row = inc->tensorData(0, ys, 1);
        rows.insert(rows.end(), row.begin(), row.end());
      }
      EXPECT_LT(maxAbsDiff(rows, got), 1e-6f);
    }
  }
}

// K/V of every KV head mirrored, q a range of the model's query heads (devices outnumbering the KV heads):
// local head h reads KV head (qHead0 + h) / group. Each range, inside one group or across two, must give
// those heads' rows of the whole computation; and the output gate multiplies by sigmoid(gate).
TEST(Attention, QueryHeadRangesOverMirroredKvAndOutputGate) {
  const AttnCase c{6, 2, 16, 8, 0, 0, true, GGMLType::F16}; // 3 query heads per KV head, sinks
  const int64_t t = 11;
  auto q = randomFloats(t * c.hq * c.dk, 11), k = randomFloats(t * c.hkv * c.dk, 12);
  auto v = randomFloats(t * c.hkv * c.dv, 13), sinks = randomFloats(c.hq, 14), gate = randomFloats(t * c.hq * c.dv, 15);
  const auto want = refAttention(c, t, q, k, v, sinks);
  for (auto [h0, n] : {std::pair<int64_t, int64_t>{0, 2}, {1, 2}, {2, 3}, {3, 3}, {0, 6}, {5, 1}}) {
    SCOPED_TRACE("query heads " + std::to_string(h0) + "+" + std::to_string(n));
    std::vector<float> qs(t * n * c.dk), ss(sinks.begin() + h0, sinks.begin() + h0 + n), gs(t * n * c.dv);
    for (int64_t i = 0; i < t; ++i) {
      std::copy_n(q.begin() + (i * c.hq + h0) * c.dk, n * c.dk, qs.begin() + i * n * c.dk);
      std::copy_n(gate.begin() + (i * c.hq + h0) * c.dv, n * c.dv, gs.begin() + i * n * c.dv);
    }
    for (bool gated : {false, true}) {
      PlanMaker mk(1, t, t);
      int32_t qi = mk.tokenInput(0, {n, c.dk}, qs), ki = mk.tokenInput(0, {c.hkv, c.dk}, k);
      int32_t vi = mk.tokenInput(0, {c.hkv, c.dv}, v), y = mk.act(0, {-1, n, c.dv});
      int32_t kv = mk.b(0).addKv(
          {0, int32_t(c.hkv), int32_t(c.dk), int32_t(c.dv), c.cache, c.cache, Placement::Device});
      std::vector<int32_t> in = {qi, ki, vi, mk.positions[0], mk.input(0, {n}, ss)};
      if (gated)
        in.push_back(mk.tokenInput(0, {n, c.dv}, gs));
      AttentionParams p{kv, 0, 0.3f, 0, gated, h0, c.hq / c.hkv};
      PackedParams pk = p.pack();
      mk.b(0).step(OpKind::Attention, in, {y}, pk.ints, pk.floats);
      auto s = mk.run(t, 2);
      ASSERT_TRUE(s);
      auto got = s->tensorData(0, y, t);
      std::vector<float> exp(t * n * c.dv);
      for (int64_t i = 0; i < t; ++i)
        for (int64_t e = 0; e < n * c.dv; ++e) {
          const float a = want[(i * c.hq + h0) * c.dv + e];
          const float g = gs[i * n * c.dv + e];
          exp[i * n * c.dv + e] = gated ? a / (1.0f + std::exp(-g)) : a;
        }
      EXPECT_LT(maxAbsDiff(got, exp), 2e-5f);
    }
  }
}

TEST(Attention, PositionPastContextIsAClearError) {
  AttnCase c{2, 1, 8, 8, 0, 0, false, GGMLType::F16};
  PlanMaker mk(1, 4, 4);
  buildAttention(mk, c, 4, randomFloats(4 * 16, 1), randomFloats(4 * 8, 2), randomFloats(4 * 8, 3), {});
  SessionOptions o = mk.options(0, 3);
  auto s = Session::open(mk.plan, o);
  ASSERT_TRUE(s) << s.message();
  auto r = (*s)->evaluate({0, 1, 2, 3}, {0, 1, 2, 3});
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("past the context of 3"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("--ctx-size"), std::string::npos);
  auto bad = (*s)->evaluate({7}, {0});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("outside the vocabulary"), std::string::npos) << bad.message();
}

TEST(Attention, CapacityCheckNamesDeviceAndBytes) {
  AttnCase c{2, 1, 8, 8, 0, 0, false, GGMLType::F16};
  PlanMaker mk(1, 4, 4);
  buildAttention(mk, c, 4, randomFloats(4 * 16, 1), randomFloats(4 * 8, 2), randomFloats(4 * 8, 3), {});
  SessionOptions o = mk.options(0, 1000);
  o.maxDeviceBytes = 4096;
  auto s = Session::open(mk.plan, o);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("device 0 needs"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--ctx-size 1000"), std::string::npos) << s.message();
}

} // namespace
