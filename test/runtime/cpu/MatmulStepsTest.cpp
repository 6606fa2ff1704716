//===- MatmulStepsTest.cpp - matmul steps: shared input conversion, batching --===//
//
// How the CPU backend runs matmul steps: the runner converts an input once for every matmul that reads it
// (Q/K/V of mixed weight types, the experts' gate and up) until a step writes over it; consecutive matmuls
// on one input are grouped (matmulBatchEnds) and run as one job with the separate steps' results; and a
// session over a plan with such groups gives the kernels' results.
//===----------------------------------------------------------------------===//
#include "test/runtime/exec/ExecTestUtil.h"

#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Matmul.h"
#include "runtime/cpu/ops/Ops.h"
#include "test/common/TestSupport.h"

#include <cstring>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;
using exec::TensorRef;

namespace {

/// A quantized weight of `rows` x k from Gaussian values.
std::vector<uint8_t> quantWeight(GGMLType t, int64_t rows, int64_t k, uint32_t seed) {
  std::vector<float> f = randomFloats(rows * k, seed, -0.1f, 0.1f);
  const size_t rb = static_cast<size_t>(*ggmlRowBytes(t, static_cast<uint64_t>(k)));
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    quantizeRow(t, f.data() + r * k, w.data() + rb * static_cast<size_t>(r), k);
  return w;
}

TensorRef weightRef(std::vector<uint8_t> &w, GGMLType t, std::vector<int64_t> shape) {
  TensorRef r;
  r.data = w.data();
  r.isWeight = true;
  r.wtype = t;
  r.shape = std::move(shape);
  return r;
}

TensorRef f32Ref(std::vector<float> &v, std::vector<int64_t> shape) {
  TensorRef r;
  r.data = v.data();
  r.shape = std::move(shape);
  return r;
}

Step step(OpKind op, std::vector<int32_t> in, std::vector<int32_t> out) {
  Step s;
  s.op = op;
  s.inputs = std::move(in);
  s.outputs = std::move(out);
  s.name = opKindName(op);
  return s;
}

} // namespace

TEST(MatmulSteps, BatchEndsGroupMatmulsOnOneInput) {
  DevicePlan dp;
  // ids: 0 x, 1 h, 2 ids, 10.. weights, 20.. outputs
  dp.steps = {step(OpKind::RmsNorm, {0}, {1}),
              step(OpKind::Matmul, {1, 10}, {20}), // Q
              step(OpKind::Matmul, {1, 11}, {21}), // K
              step(OpKind::Matmul, {1, 12}, {22}), // V
              step(OpKind::Matmul, {20, 13}, {23}), // another input: not in the group
              step(OpKind::MulMatId, {1, 14, 2}, {24}), // gate
              step(OpKind::MulMatId, {1, 15, 2}, {25}), // up
              step(OpKind::MulMatId, {1, 16, 24}, {26}), // routed by gate's output: reads a part's output
              step(OpKind::Matmul, {1, 17}, {27}),
              step(OpKind::Matmul, {1, 27}, {28})}; // reads the previous part's output
  const std::vector<size_t> end = cpu::matmulBatchEnds(dp);
  const std::vector<size_t> want = {1, 4, 4, 4, 5, 7, 7, 8, 9, 10};
  EXPECT_EQ(end, want);
}

TEST(MatmulSteps, RunnerConvertsASharedInputOnceUntilItIsWritten) {
  const int64_t t = 5, k = 256, nq = 64, nkv = 32, e = 4, f = 48;
  std::vector<float> x = randomFloats(t * k, 1), h = randomFloats(t * k, 2);
  std::vector<uint8_t> wq = quantWeight(GGMLType::Q4_K, nq, k, 3), wk = quantWeight(GGMLType::Q8_0, nkv, k, 4),
                       wv = quantWeight(GGMLType::Q6_K, nkv, k, 5), wg = quantWeight(GGMLType::Q4_K, e * f, k, 6),
                       wu = quantWeight(GGMLType::Q5_0, e * f, k, 7);
  std::vector<int32_t> ids = {0, 2, 1, 2, 3, 0, 2, 1, 0, 3};
  std::vector<float> q(t * nq), kk(t * nkv), v(t * nkv), g(t * 2 * f), u(t * 2 * f);
  TensorRef idsRef;
  idsRef.data = ids.data();
  idsRef.dtype = DType::I32;
  idsRef.shape = {t, 2};
  cpu::CpuStepRunner runner(2);
  runner.enableActivationCache();
  std::vector<exec::KvBuffers> kv;
  auto run = [&](OpKind op, std::vector<TensorRef> in, TensorRef out) {
    Step s = step(op, {}, {});
    ASSERT_TRUE(runner.run(s, in, {out}, kv));
  };
  // Q, K, V: three weight types, one ActQ8 conversion of x.
  run(OpKind::Matmul, {f32Ref(x, {t, k}), weightRef(wq, GGMLType::Q4_K, {nq, k})}, f32Ref(q, {t, nq}));
  run(OpKind::Matmul, {f32Ref(x, {t, k}), weightRef(wk, GGMLType::Q8_0, {nkv, k})}, f32Ref(kk, {t, nkv}));
  run(OpKind::Matmul, {f32Ref(x, {t, k}), weightRef(wv, GGMLType::Q6_K, {nkv, k})}, f32Ref(v, {t, nkv}));
  EXPECT_EQ(runner.activationCache().conversions(), 1u);
  EXPECT_EQ(runner.activationCache().hits(), 2u);
  // The experts' gate and up on another input, as one batch: one more conversion.
  std::vector<std::vector<TensorRef>> in = {
      {f32Ref(h, {t, k}), weightRef(wg, GGMLType::Q4_K, {e, f, k}), idsRef},
      {f32Ref(h, {t, k}), weightRef(wu, GGMLType::Q5_0, {e, f, k}), idsRef}};
  std::vector<std::vector<TensorRef>> out = {{f32Ref(g, {t, 2, f})}, {f32Ref(u, {t, 2, f})}};
  Step gate = step(OpKind::MulMatId, {}, {}), up = gate;
  ASSERT_TRUE(runner.runBatch({&gate, &up}, in, out));
  EXPECT_EQ(runner.activationCache().conversions(), 2u);
  // Each equals the kernels run alone (no cache, no batch).
  cpu::ThreadGroup tg(2);
  std::vector<float> q2(q.size()), g2(g.size()), u2(u.size());
  cpu::opMatmul(f32Ref(x, {t, k}), weightRef(wq, GGMLType::Q4_K, {nq, k}), f32Ref(q2, {t, nq}), tg);
  cpu::opMulMatId(f32Ref(h, {t, k}), weightRef(wg, GGMLType::Q4_K, {e, f, k}), idsRef, f32Ref(g2, {t, 2, f}), 0, tg);
  cpu::opMulMatId(f32Ref(h, {t, k}), weightRef(wu, GGMLType::Q5_0, {e, f, k}), idsRef, f32Ref(u2, {t, 2, f}), 0, tg);
  EXPECT_EQ(q, q2);
  EXPECT_EQ(g, g2);
  EXPECT_EQ(u, u2);
  // A step that writes x (here a copy onto itself, after x changed) drops its conversion: the next reader
  // converts the new values (a stale copy would give q again instead of -q).
  for (float &vx : x)
    vx *= -1;
  run(OpKind::Copy, {f32Ref(x, {t, k})}, f32Ref(x, {t, k}));
  const uint64_t before = runner.activationCache().conversions();
  run(OpKind::Matmul, {f32Ref(x, {t, k}), weightRef(wq, GGMLType::Q4_K, {nq, k})}, f32Ref(q2, {t, nq}));
  EXPECT_EQ(runner.activationCache().conversions(), before + 1);
  for (size_t i = 0; i < q.size(); ++i)
    ASSERT_EQ(q2[i], -q[i]) << i;
}

// A session over Q/K/V and the experts' gate/up (grouped into two jobs) at a decode and a prefill token
// count gives what the kernels give for each step alone.
TEST(MatmulSteps, SessionWithGroupedMatmulsMatchesTheKernels) {
  const int64_t k = 256, nq = 64, nkv = 32, e = 4, f = 40, vocab = 50;
  for (int64_t t : {1, 40}) {
    SCOPED_TRACE(t);
    PlanMaker m(1, 64, vocab);
    std::vector<float> table = randomFloats(vocab * k, 9);
    std::vector<uint8_t> wq = quantWeight(GGMLType::Q4_K, nq, k, 3), wk = quantWeight(GGMLType::Q8_0, nkv, k, 4),
                         wv = quantWeight(GGMLType::Q6_K, nkv, k, 5), wg = quantWeight(GGMLType::Q4_K, e * f, k, 6),
                         wu = quantWeight(GGMLType::Q4_K, e * f, k, 7);
    std::vector<int32_t> idsV;
    for (int64_t i = 0; i < 64; ++i)
      idsV.insert(idsV.end(), {static_cast<int32_t>(i % e), static_cast<int32_t>((i / 3 + 1) % e)});
    int32_t x = m.tokenInput(0, {k}, table);
    int32_t ids = m.inputI32(0, {64, 2}, idsV);
    int32_t idsT = m.b(0).view(ids, DType::I32, {-1, 2});
    int32_t q = m.act(0, {-1, nq}), kk = m.act(0, {-1, nkv}), v = m.act(0, {-1, nkv});
    int32_t g = m.act(0, {-1, 2, f}), u = m.act(0, {-1, 2, f});
    m.b(0).step(OpKind::Matmul, {x, m.weightRaw(0, GGMLType::Q4_K, {nq, k}, wq)}, {q});
    m.b(0).step(OpKind::Matmul, {x, m.weightRaw(0, GGMLType::Q8_0, {nkv, k}, wk)}, {kk});
    m.b(0).step(OpKind::Matmul, {x, m.weightRaw(0, GGMLType::Q6_K, {nkv, k}, wv)}, {v});
    m.b(0).step(OpKind::MulMatId, {x, m.weightRaw(0, GGMLType::Q4_K, {e, f, k}, wg), idsT}, {g});
    m.b(0).step(OpKind::MulMatId, {x, m.weightRaw(0, GGMLType::Q4_K, {e, f, k}, wu), idsT}, {u});
    const std::vector<size_t> ends = cpu::matmulBatchEnds(m.plan.devices[0]);
    int groups = 0; // as the session walks them: a group's steps run once, at its first step
    for (size_t i = 0; i < ends.size(); i = ends[i] > i + 1 ? ends[i] : i + 1)
      groups += ends[i] > i + 1;
    ASSERT_EQ(groups, 2) << "expected the Q/K/V and gate/up groups";
    auto s = m.run(t);
    ASSERT_TRUE(s);
    // The kernels alone on the same inputs.
    std::vector<float> xs(static_cast<size_t>(t * k));
    for (int64_t i = 0; i < t; ++i)
      std::copy(table.begin() + i * k, table.begin() + (i + 1) * k, xs.begin() + i * k);
    std::vector<int32_t> idsHere(idsV.begin(), idsV.begin() + 2 * t);
    TensorRef idsRef;
    idsRef.data = idsHere.data();
    idsRef.dtype = DType::I32;
    idsRef.shape = {t, 2};
    cpu::ThreadGroup tg(2);
    std::vector<float> wantQ(t * nq), wantV(t * nkv), wantU(t * 2 * f);
    cpu::opMatmul(f32Ref(xs, {t, k}), weightRef(wq, GGMLType::Q4_K, {nq, k}), f32Ref(wantQ, {t, nq}), tg);
    cpu::opMatmul(f32Ref(xs, {t, k}), weightRef(wv, GGMLType::Q6_K, {nkv, k}), f32Ref(wantV, {t, nkv}), tg);
    cpu::opMulMatId(f32Ref(xs, {t, k}), weightRef(wu, GGMLType::Q4_K, {e, f, k}), idsRef, f32Ref(wantU, {t, 2, f}), 0, tg);
    EXPECT_EQ(s->tensorData(0, q, t), wantQ);
    EXPECT_EQ(s->tensorData(0, v, t), wantV);
    EXPECT_EQ(s->tensorData(0, u, t), wantU);
  }
}

// Expert parallel: a device holding experts [2, 4) of 4 (firstExpert 2, a weight of the last two experts'
// rows) gives the whole weight's rows for the pairs routed to experts 2 and 3, and zeros for the others.
TEST(MatmulSteps, ExpertShareComputesItsExpertsAndZerosTheRest) {
  const int64_t k = 256, e = 4, f = 40, t = 5;
  std::vector<uint8_t> w = quantWeight(GGMLType::Q4_K, e * f, k, 11);
  const size_t expertBytes = w.size() / e;
  std::vector<uint8_t> share(w.begin() + 2 * expertBytes, w.end());
  std::vector<float> x = randomFloats(t * k, 12);
  std::vector<int32_t> idsV = {0, 2, 3, 1, 2, 3, 1, 0, 3, 2};
  TensorRef ids;
  ids.data = idsV.data();
  ids.dtype = DType::I32;
  ids.shape = {t, 2};
  cpu::ThreadGroup tg(2);
  std::vector<float> whole(t * 2 * f), part(t * 2 * f, 7.0f);
  cpu::opMulMatId(f32Ref(x, {t, k}), weightRef(w, GGMLType::Q4_K, {e, f, k}), ids, f32Ref(whole, {t, 2, f}), 0, tg);
  cpu::opMulMatId(f32Ref(x, {t, k}), weightRef(share, GGMLType::Q4_K, {2, f, k}), ids, f32Ref(part, {t, 2, f}), 2,
                  tg);
  // (Near, not equal: the kernels may group a different set of rows per expert.)
  for (int64_t p = 0; p < t * 2; ++p)
    for (int64_t i = 0; i < f; ++i) {
      if (idsV[p] < 2)
        ASSERT_EQ(part[p * f + i], 0.0f) << "pair " << p << " routed to expert " << idsV[p];
      else
        ASSERT_NEAR(part[p * f + i], whole[p * f + i], 1e-4f) << "pair " << p << " expert " << idsV[p];
    }
}
