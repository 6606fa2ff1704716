//===- FusionTest.cpp - run-time fusion of the CUDA session ---------------------===//
//
// Each fused group (Fusion.cpp) against the same plan run with CudaOptions::fuse off, bit for bit, and
// against the CPU backend: residual add + rms_norm with quantized producers and grouped decode matmuls, the
// MoE router chain with grouped expert matmuls, per-head rms_norm + rope (including an in-place hazard
// that must not fuse), and attention writing the output projection's quantized x. Skips visibly without a
// GPU.
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

TEST(CudaKernels, FusedResidualNormAndQuantizedProducers) {
  TPC_REQUIRE_GPU();
  // add + rms_norm run as one kernel (the sum written too); rms_norm and glu also write the quantized x
  // of the integer GEMVs that read them next (three matmuls on one x share it, the two of one type in
  // one launch). One row (the decode kernel) and four (the batched kernel of a batched decode step).
  // Checked against the CPU backend and against the same plan run unfused.
  const int64_t k = 512, f = 256;
  for (int64_t m : {int64_t(1), int64_t(4)}) {
    SCOPED_TRACE("rows " + std::to_string(m));
    PlanMaker mk(1, 1, 1);
    std::vector<float> deq;
    int32_t x = mk.input(0, {m, k}, randomFloats(m * k, 41, -2, 2)), r = mk.input(0, {m, k}, randomFloats(m * k, 42));
    int32_t nw = mk.weightF32(0, {k}, randomFloats(k, 43));
    int32_t wa = mk.weightRaw(0, GGMLType::Q4_K, {40, k}, randomWeight(GGMLType::Q4_K, 40, k, 44, deq));
    int32_t wb = mk.weightRaw(0, GGMLType::Q6_K, {24, k}, randomWeight(GGMLType::Q6_K, 24, k, 45, deq));
    int32_t wc = mk.weightRaw(0, GGMLType::Q8_0, {30, f}, randomWeight(GGMLType::Q8_0, 30, f, 46, deq));
    int32_t sum = mk.act(0, {m, k}), y = mk.act(0, {m, k}), za = mk.act(0, {m, 40}), zb = mk.act(0, {m, 24});
    mk.b(0).step(OpKind::Add, {x, r}, {sum});
    mk.b(0).step(OpKind::RmsNorm, {sum, nw}, {y}, {}, {1e-5f});
    int32_t wa2 = mk.weightRaw(0, GGMLType::Q4_K, {72, k}, randomWeight(GGMLType::Q4_K, 72, k, 48, deq));
    int32_t za2 = mk.act(0, {m, 72});
    mk.b(0).step(OpKind::Matmul, {y, wa}, {za}); // these two: one grouped launch
    mk.b(0).step(OpKind::Matmul, {y, wa2}, {za2});
    mk.b(0).step(OpKind::Matmul, {y, wb}, {zb}); // another type: its own launch
    int32_t gu = mk.input(0, {m, 2 * f}, randomFloats(m * 2 * f, 47, -3, 3)), g = mk.act(0, {m, f}),
            zc = mk.act(0, {m, 30});
    mk.b(0).step(OpKind::Glu, {gu}, {g}, {0});
    mk.b(0).step(OpKind::Matmul, {g, wc}, {zc});
    Pair p = runBoth(mk, {{0, 1}});
    cuda::CudaOptions plain;
    plain.fuse = false;
    Pair q = runBoth(mk, {{0, 1}}, 64, plain);
    ASSERT_TRUE(p.gpu && q.gpu);
    for (int32_t id : {sum, y, g})
      expectClose(p, 0, id, 1, 1e-5, "f32 output " + std::to_string(id));
    for (int32_t id : {za, za2, zb, zc}) {
      expectClose(p, 0, id, 1, 3e-2, "matmul " + std::to_string(id));
      // The fused producers quantize exactly like launchQuantizeX: bit-identical matmul outputs.
      EXPECT_EQ(p.gpu->tensorData(0, id, 1), q.gpu->tensorData(0, id, 1)) << "fused vs unfused " << id;
    }
  }
}

TEST(CudaKernels, FusedRouterChainAndGroupedExperts) {
  TPC_REQUIRE_GPU();
  // softmax -> top_k -> take_along -> sum -> div as one kernel, then gate and up mul_mat_id on the same
  // x and ids as one launch (the MoE layer's decode). Against the CPU and against the plan run unfused.
  const int64_t e = 40, k = 512, f = 64, slots = 6; // 40 experts: two lanes' worth per warp row
  PlanMaker mk(1, 1, 1);
  std::vector<float> deq;
  int32_t logits = mk.input(0, {1, e}, randomFloats(e, 51, -3, 3)), x = mk.input(0, {1, k}, randomFloats(k, 52));
  int32_t wg = mk.weightRaw(0, GGMLType::Q4_K, {e, f, k}, randomWeight(GGMLType::Q4_K, e * f, k, 53, deq));
  int32_t wu = mk.weightRaw(0, GGMLType::Q4_K, {e, f, k}, randomWeight(GGMLType::Q4_K, e * f, k, 54, deq));
  int32_t p = mk.act(0, {1, e}), ids = mk.act(0, {1, slots}, DType::I32), w = mk.act(0, {1, slots}),
          sum = mk.act(0, {1, 1}), wn = mk.act(0, {1, slots});
  int32_t g = mk.act(0, {1, slots, f}), u = mk.act(0, {1, slots, f});
  mk.b(0).step(OpKind::Softmax, {logits}, {p});
  mk.b(0).step(OpKind::TopK, {p}, {ids}, {slots});
  mk.b(0).step(OpKind::TakeAlong, {p, ids}, {w});
  mk.b(0).step(OpKind::Sum, {w}, {sum}, {1, 1});
  mk.b(0).step(OpKind::Div, {w, sum}, {wn});
  mk.b(0).step(OpKind::MulMatId, {x, wg, ids}, {g});
  mk.b(0).step(OpKind::MulMatId, {x, wu, ids}, {u});
  Pair fused = runBoth(mk, {{0, 1}});
  cuda::CudaOptions plain;
  plain.fuse = false;
  Pair unfused = runBoth(mk, {{0, 1}}, 64, plain);
  ASSERT_TRUE(fused.gpu && unfused.gpu);
  expectClose(fused, 0, ids, 1, 0, "top_k ids");
  for (int32_t id : {p, w, sum, wn})
    expectClose(fused, 0, id, 1, 1e-6, "router output " + std::to_string(id));
  for (int32_t id : {g, u}) {
    expectClose(fused, 0, id, 1, 3e-2, "expert matmul " + std::to_string(id));
    EXPECT_EQ(fused.gpu->tensorData(0, id, 1), unfused.gpu->tensorData(0, id, 1)) << "grouped vs alone " << id;
  }
}

TEST(CudaKernels, FusedHeadNormAndRope) {
  TPC_REQUIRE_GPU();
  // q_norm, k_norm, rope q, rope k as one kernel (bit-identical to the four steps), with dims past n_dims
  // passing through, and two ropes without norms where the second runs in place on the first's input
  // (a hazard: those must not run side by side).
  const int64_t t = 3, d = 64;
  for (int mode : {0, 1})
    for (int64_t nDims : {int64_t(64), int64_t(32)}) {
      SCOPED_TRACE("mode " + std::to_string(mode) + " n_dims " + std::to_string(nDims));
      PlanMaker mk(1, t, 64);
      int32_t q = mk.tokenInput(0, {4, d}, randomFloats(t * 4 * d, 61, -3, 3));
      int32_t k = mk.tokenInput(0, {2, d}, randomFloats(t * 2 * d, 62, -3, 3));
      int32_t qw = mk.weightF32(0, {d}, randomFloats(d, 63)), kw = mk.weightF32(0, {d}, randomFloats(d, 64));
      int32_t qn = mk.act(0, {-1, 4, d}), kn = mk.act(0, {-1, 2, d}), qr = mk.act(0, {-1, 4, d}),
              x2 = mk.act(0, {-1, 4, d});
      mk.b(0).step(OpKind::RmsNorm, {q, qw}, {qn}, {}, {1e-6f});
      mk.b(0).step(OpKind::RmsNorm, {k, kw}, {kn}, {}, {1e-6f});
      mk.b(0).step(OpKind::Rope, {qn, mk.positions[0]}, {qr}, {mode, nDims}, {10000.0f, 1.0f});
      mk.b(0).step(OpKind::Rope, {kn, mk.positions[0]}, {kn}, {mode, nDims}, {10000.0f, 1.0f}); // in place
      mk.b(0).step(OpKind::Rope, {q, mk.positions[0]}, {x2}, {mode, nDims}, {10000.0f, 1.0f});
      mk.b(0).step(OpKind::Rope, {q, mk.positions[0]}, {q}, {mode, nDims}, {10000.0f, 1.0f});
      Pair fused = runBoth(mk, {{0, int32_t(t)}}, 64);
      cuda::CudaOptions plain;
      plain.fuse = false;
      Pair unfused = runBoth(mk, {{0, int32_t(t)}}, 64, plain);
      ASSERT_TRUE(fused.gpu && unfused.gpu);
      for (int32_t id : {qn, qr, kn, x2, q}) {
        expectClose(fused, 0, id, t, 1e-5, "tensor " + std::to_string(id));
        EXPECT_EQ(fused.gpu->tensorData(0, id, t), unfused.gpu->tensorData(0, id, t)) << "fused vs unfused " << id;
      }
    }
}

TEST(CudaKernels, AttentionWritesTheOutputProjectionsQuantizedX) {
  TPC_REQUIRE_GPU();
  // attention -> reshape (a view of the same memory) -> q4_K matmul: the attention kernel writes the
  // matmul's quantized x too. Decode steps (graphs) fused vs unfused are bit-equal, and match the CPU.
  const int64_t hq = 4, hkv = 2, dh = 64, n = 48;
  PlanMaker mk(1, 16, 64);
  std::vector<float> deq;
  int32_t qi = mk.tokenInput(0, {hq, dh}, randomFloats(40 * hq * dh, 71, -2, 2));
  int32_t ki = mk.tokenInput(0, {hkv, dh}, randomFloats(40 * hkv * dh, 72, -2, 2));
  int32_t vi = mk.tokenInput(0, {hkv, dh}, randomFloats(40 * hkv * dh, 73));
  int32_t y = mk.act(0, {-1, hq, dh});
  int32_t flat = mk.b(0).view(y, DType::F32, {-1, hq * dh});
  int32_t w = mk.weightRaw(0, GGMLType::Q4_K, {n, hq * dh}, randomWeight(GGMLType::Q4_K, n, hq * dh, 74, deq));
  int32_t o = mk.act(0, {-1, n});
  int32_t kv = mk.b(0).addKv(
      {0, int32_t(hkv), int32_t(dh), int32_t(dh), GGMLType::F16, GGMLType::F16, Placement::Device});
  mk.b(0).step(OpKind::Attention, {qi, ki, vi, mk.positions[0]}, {y}, {kv, 0}, {0.125f, 0.0f});
  mk.b(0).step(OpKind::Reshape, {y}, {flat});
  mk.b(0).step(OpKind::Matmul, {flat, w}, {o});
  Pair fused = runBoth(mk, {{0, 5}});
  cuda::CudaOptions plain;
  plain.fuse = false;
  Pair unfused = runBoth(mk, {{0, 5}}, 64, plain);
  ASSERT_TRUE(fused.gpu && unfused.gpu);
  for (int32_t pos = 5; pos < 9; ++pos) {
    for (Pair *p : {&fused, &unfused}) {
      ASSERT_TRUE(p->cpu->evaluate({pos}, {pos}));
      ASSERT_TRUE(p->gpu->evaluate({pos}, {pos}));
    }
    expectClose(fused, 0, o, 1, 3e-2, "o at " + std::to_string(pos));
    EXPECT_EQ(fused.gpu->tensorData(0, o, 1), unfused.gpu->tensorData(0, o, 1)) << "fused vs unfused at " << pos;
    EXPECT_EQ(fused.gpu->tensorData(0, y, 1), unfused.gpu->tensorData(0, y, 1)) << "attention at " << pos;
  }
}

} // namespace
