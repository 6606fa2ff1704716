//===- ZeroSizeTest.cpp - plans where a device's share of a dimension is 0 --===//
//
// The compiler splits quantized weights along their reduction axis in whole blocks, so a 2-device split
// of a Q4_K weight whose rows are one 256-element block puts every attention head on device 0 and none
// on device 1. Device 1 then holds [0, K] and [N, 0] weights (0 bytes), [T, 0, D] activations and a KV
// cache with 0 heads. Each op must accept these shapes; a matmul with K = 0 must write zeros (it is a
// partial sum: stale values would be all-reduced into the result), and the 2-device run must equal the
// 1-device run exactly.
//===----------------------------------------------------------------------===//
#include "test/runtime/exec/ExecTestUtil.h"

#include "runtime/cpu/quant/Quant.h"

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

constexpr int64_t kH = 256, kHeads = 4, kKvHeads = 2, kD = 64, kVocab = 16;

/// A Q4_K weight [rows, kH] (rows of one 256-element block) from random values.
std::vector<uint8_t> q4kRows(int64_t rows, uint32_t seed) {
  auto f = randomFloats(rows * kH, seed, -0.2f, 0.2f);
  const uint64_t rb = *ggmlRowBytes(GGMLType::Q4_K, kH);
  std::vector<uint8_t> out(rows * rb);
  for (int64_t r = 0; r < rows; ++r)
    quantizeRow(GGMLType::Q4_K, f.data() + r * kH, out.data() + r * rb, kH);
  return out;
}

/// An empty weight slice (0 bytes, no pieces) of the given shape.
int32_t emptyWeight(PlanMaker &mk, int d, GGMLType t, std::vector<int64_t> shape) {
  return mk.weightPieces(d, t, std::move(shape), {});
}

struct Outputs {
  int32_t out, gathered, scattered, qnorm;
};

/// The attention block on device d: heads = kHeads (all) or 0 (none). out is the all-reduced output
/// projection; gathered the all-gathered attention output; scattered the reduce-scattered projection.
Outputs attentionBlock(PlanMaker &mk, int d, bool allHeads, int devices, const std::vector<float> &emb,
                       const std::vector<uint8_t> &wq, const std::vector<uint8_t> &wk,
                       const std::vector<uint8_t> &wv, const std::vector<uint8_t> &wo) {
  const int64_t hq = allHeads ? kHeads : 0, hkv = allHeads ? kKvHeads : 0;
  DevicePlanBuilder b = mk.b(d);
  int32_t x = mk.tokenInput(d, {kH}, emb);
  int32_t xn = mk.act(d, {-1, kH});
  b.step(OpKind::RmsNorm, {x}, {xn}, {}, {1e-5f});
  auto proj = [&](const std::vector<uint8_t> &w, int64_t heads) {
    int32_t wt = heads ? mk.weightRaw(d, GGMLType::Q4_K, {heads * kD, kH}, w)
                       : emptyWeight(mk, d, GGMLType::Q4_K, {0, kH}); // column split: no rows here
    int32_t y = mk.act(d, {-1, heads * kD});
    b.step(OpKind::Matmul, {xn, wt}, {y});
    return mk.b(d).view(y, DType::F32, {-1, heads, kD});
  };
  int32_t q = proj(wq, hq), k = proj(wk, hkv), v = proj(wv, hkv);
  // Per-head q norm and RoPE over [T, heads, D] (heads may be 0).
  int32_t qn = mk.act(d, {-1, hq, kD});
  b.step(OpKind::RmsNorm, {q}, {qn}, {}, {1e-5f});
  int32_t qr = mk.act(d, {-1, hq, kD}), kr = mk.act(d, {-1, hkv, kD});
  b.step(OpKind::Rope, {qn, mk.positions[d]}, {qr}, {1, kD}, {10000.0f, 1.0f});
  b.step(OpKind::Rope, {k, mk.positions[d]}, {kr}, {1, kD}, {10000.0f, 1.0f});
  int32_t cache =
      b.addKv({0, static_cast<int32_t>(hkv), kD, kD, GGMLType::F16, GGMLType::F16, Placement::Device});
  int32_t att = mk.act(d, {-1, hq, kD});
  b.step(OpKind::Attention, {qr, kr, v, mk.positions[d]}, {att}, {cache, 0}, {0.125f, 0.0f});
  int32_t flat = mk.b(d).view(att, DType::F32, {-1, hq * kD});
  // Row split of the output projection: its reduction axis is one Q4_K block, so device 1 gets [kH, 0].
  int32_t woT = allHeads ? mk.weightRaw(d, GGMLType::Q4_K, {kH, kHeads * kD}, wo)
                         : emptyWeight(mk, d, GGMLType::Q4_K, {kH, 0});
  int32_t out = mk.act(d, {-1, kH});
  b.step(OpKind::Matmul, {flat, woT}, {out});
  // A copy before the in-place all-reduce feeds the reduce-scatter below.
  int32_t partial = mk.act(d, {-1, kH});
  b.step(OpKind::Copy, {out}, {partial});
  Outputs o{out, -1, -1, qn};
  if (devices > 1) {
    b.step(OpKind::AllReduce, {out}, {out}); // in place: a stale K = 0 result would be summed in
    o.gathered = mk.act(d, {-1, kHeads * kD});
    b.step(OpKind::AllGather, {flat}, {o.gathered}, {1});
    o.scattered = mk.act(d, {-1, allHeads ? kH : 0});
    b.step(OpKind::ReduceScatter, {partial}, {o.scattered}, {1});
  }
  return o;
}

TEST(ZeroSize, AttentionBlockWithNoHeadsOnOneDevice) {
  auto emb = randomFloats(kVocab * kH, 1);
  auto wq = q4kRows(kHeads * kD, 2), wk = q4kRows(kKvHeads * kD, 3), wv = q4kRows(kKvHeads * kD, 4);
  auto wo = q4kRows(kH, 5); // [kH, kHeads * kD] with kHeads * kD == kH == one block per row
  ASSERT_EQ(kHeads * kD, kH);

  PlanMaker one(1, 8, kVocab);
  Outputs o1 = attentionBlock(one, 0, true, 1, emb, wq, wk, wv, wo);
  PlanMaker two(2, 8, kVocab);
  Outputs o2[2] = {attentionBlock(two, 0, true, 2, emb, wq, wk, wv, wo),
                   attentionBlock(two, 1, false, 2, emb, wq, wk, wv, wo)};
  EXPECT_EQ(two.plan.devices[1].kvBytesPerToken, 0u);
  two.plan.ggufSize = two.gguf.size();
  EXPECT_TRUE(validatePlan(two.plan).empty()) << validatePlan(two.plan)[0];

  auto s1 = one.open(2), s2 = two.open(1);
  ASSERT_TRUE(s1 && s2);
  // A prompt of 5 tokens, then 3 decode steps through the KV cache: every call must overwrite device
  // 1's K = 0 partial sum with zeros, or the in-place all-reduce would double it.
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> calls = {
      {{3, 1, 4, 1, 5}, {0, 1, 2, 3, 4}}, {{9}, {5}}, {{2}, {6}}, {{6}, {7}}};
  for (const auto &[ids, pos] : calls) {
    const int64_t t = static_cast<int64_t>(ids.size());
    ASSERT_TRUE(s1->evaluate(ids, pos));
    auto r = s2->evaluate(ids, pos);
    ASSERT_TRUE(r) << r.message();
    auto want = s1->tensorData(0, o1.out, t);
    ASSERT_EQ(want.size(), size_t(t * kH));
    float mag = 0;
    for (float v : want)
      mag = std::max(mag, std::fabs(v));
    ASSERT_GT(mag, 0.0f) << "the block computes something";
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(s2->tensorData(d, o2[d].out, t), want) << "all-reduced output, device " << d;
      EXPECT_EQ(s2->tensorData(d, o2[d].gathered, t), s2->tensorData(0, o2[0].gathered, t));
    }
    // Device 1 holds the empty parts.
    EXPECT_TRUE(s2->tensorData(1, o2[1].scattered, t).empty());
    EXPECT_TRUE(s2->tensorData(1, o2[1].qnorm, t).empty());
    // Device 0's reduce-scatter part is the whole sum (device 1 added zeros).
    EXPECT_EQ(s2->tensorData(0, o2[0].scattered, t), want);
  }
}

TEST(ZeroSize, MatmulAndMulMatIdWithEmptyReductionWriteZeros) {
  for (GGMLType t : {GGMLType::F32, GGMLType::Q8_0, GGMLType::Q4_K}) {
    SCOPED_TRACE(ggmlTypeName(t));
    PlanMaker mk(1, 4, 8);
    // x [T, 0]: the empty share of a split activation; y is pre-filled so zeros must be written.
    int32_t xw = emptyWeight(mk, 0, GGMLType::F32, {4, 0});
    int32_t x = mk.act(0, {-1, 0});
    mk.b(0).step(OpKind::GetRows, {xw, mk.tokens[0]}, {x}); // get_rows of a [R, 0] table
    int32_t w = emptyWeight(mk, 0, t, {6, 0});
    int32_t y = mk.act(0, {-1, 6});
    mk.b(0).step(OpKind::Copy, {mk.tokenInput(0, {6}, randomFloats(4 * 6, 7, 1, 2))}, {y});
    mk.b(0).step(OpKind::Matmul, {x, w}, {y});
    // mul_mat_id over [E, N, 0] experts; ids route every slot.
    int32_t we = emptyWeight(mk, 0, t, {3, 5, 0});
    int32_t ids = mk.inputI32(0, {2, 2}, {2, 0, 1, 2});
    int32_t xe = mk.act(0, {2, 0});
    int32_t ye = mk.input(0, {2, 2, 5}, randomFloats(20, 8, 1, 2));
    mk.b(0).step(OpKind::MulMatId, {xe, we, ids}, {ye});
    // mul_mat_id with N = 0 (an empty share of the expert FFN's intermediate dim).
    int32_t wn = emptyWeight(mk, 0, t, {3, 0, ggmlTypeInfo(t).blockElems});
    int32_t xn =
        mk.input(0, {2, ggmlTypeInfo(t).blockElems}, randomFloats(2 * ggmlTypeInfo(t).blockElems, 9));
    int32_t yn = mk.act(0, {2, 2, 0});
    mk.b(0).step(OpKind::MulMatId, {xn, wn, ids}, {yn});
    // A slice of size 0 and a sum over an empty axis (zeros).
    int32_t sl = mk.act(0, {-1, 0});
    mk.b(0).step(OpKind::Slice, {y}, {sl}, {1, 6, 0});
    int32_t sumIn = mk.act(0, {2, 0, 3}), sum = mk.input(0, {2, 3}, randomFloats(6, 10, 1, 2));
    mk.b(0).step(OpKind::Sum, {sumIn}, {sum}, {1, 0});
    auto s = mk.run(3);
    ASSERT_TRUE(s);
    for (float v : s->tensorData(0, y, 3))
      ASSERT_EQ(v, 0.0f);
    for (float v : s->tensorData(0, ye, 1))
      ASSERT_EQ(v, 0.0f);
    for (float v : s->tensorData(0, sum, 1))
      ASSERT_EQ(v, 0.0f);
    EXPECT_TRUE(s->tensorData(0, yn, 1).empty());
  }
}

TEST(ZeroSize, CollectivesWithAnEmptyPart) {
  // all_gather / reduce_scatter where device 1's part is 0 columns, and an all-reduce of nothing.
  PlanMaker mk(2, 2, 8);
  auto a = randomFloats(2 * 5, 11), b = randomFloats(2 * 5, 12);
  int32_t g[2], rs[2], ar[2];
  for (int d = 0; d < 2; ++d) {
    int32_t x = d == 0 ? mk.tokenInput(0, {5}, a) : mk.act(1, {-1, 0});
    g[d] = mk.act(d, {-1, 5});
    mk.b(d).step(OpKind::AllGather, {x}, {g[d]}, {1});
    int32_t full = mk.tokenInput(d, {5}, d == 0 ? a : b);
    rs[d] = mk.act(d, {-1, d == 0 ? 5 : 0});
    mk.b(d).step(OpKind::ReduceScatter, {full}, {rs[d]}, {1});
    ar[d] = mk.act(d, {-1, 0});
    mk.b(d).step(OpKind::AllReduce, {ar[d]}, {ar[d]});
  }
  auto s = mk.run(2, 1);
  ASSERT_TRUE(s);
  std::vector<float> sum(10);
  for (int i = 0; i < 10; ++i)
    sum[i] = a[i] + b[i];
  for (int d = 0; d < 2; ++d)
    EXPECT_EQ(s->tensorData(d, g[d], 2), a) << d;
  EXPECT_EQ(s->tensorData(0, rs[0], 2), sum);
  EXPECT_TRUE(s->tensorData(1, rs[1], 2).empty());
}

TEST(ZeroSize, MqaDeviceWithoutQueryHeadsKeepsItsCache) {
  // MQA: K/V mirrored (1 KV head on every device), device 1 has no query head.
  PlanMaker mk(1, 4, 8);
  int32_t q = mk.act(0, {-1, 0, 8});
  int32_t k = mk.tokenInput(0, {1, 8}, randomFloats(8 * 8, 13));
  int32_t v = mk.tokenInput(0, {1, 8}, randomFloats(8 * 8, 14));
  int32_t cache = mk.b(0).addKv({0, 1, 8, 8, GGMLType::F32, GGMLType::F32, Placement::Device});
  int32_t y = mk.act(0, {-1, 0, 8});
  mk.b(0).step(OpKind::Attention, {q, k, v, mk.positions[0]}, {y}, {cache, 0}, {0.3f, 0.0f});
  auto s = mk.run(4);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->tensorData(0, y, 4).empty());
}

TEST(ZeroSize, NegativeDimsAndMismatchedEmptyHeadsAreStillErrors) {
  PlanMaker neg(1, 2, 1);
  neg.act(0, {-1, -3});
  auto errs = validatePlan(neg.plan);
  ASSERT_FALSE(errs.empty());
  EXPECT_NE(errs[0].find("bad shape"), std::string::npos) << errs[0];
  // 0 KV heads but query heads left: not a valid attention.
  PlanMaker mk(1, 2, 1);
  int32_t q = mk.act(0, {-1, 2, 8}), k = mk.act(0, {-1, 0, 8}), v = mk.act(0, {-1, 0, 8});
  int32_t cache = mk.b(0).addKv({0, 0, 8, 8, GGMLType::F16, GGMLType::F16, Placement::Device});
  int32_t y = mk.act(0, {-1, 2, 8});
  mk.b(0).step(OpKind::Attention, {q, k, v, mk.positions[0]}, {y}, {cache, 0}, {0.3f, 0.0f});
  SessionOptions o = mk.options();
  auto s = Session::open(mk.plan, o);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("attention"), std::string::npos) << s.message();
}

} // namespace
