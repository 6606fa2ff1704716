//===- KernelTest.cpp - every CUDA kernel against the CPU backend -----------===//
//
// Each test builds a small plan around one op family with random inputs and odd sizes, runs it on the
// CPU backend (the reference, runtime/exec) and on CUDA, and compares the outputs within a tolerance.
// Matmuls are also checked against an exact double-precision product of the dequantized weights (the
// CPU backend quantizes activations to 8 bits for quantized weights, the CUDA kernels do not), for the
// GEMV path (few tokens) and the cuBLAS path (many tokens). Skips visibly without a GPU.
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include "runtime/ggml/Blocks.h"
#include "runtime/cpu/quant/Quant.h"
#include "runtime/cuda/Matmul.cuh"
#include "test/common/TestSupport.h"

#include <array>
#include <chrono>
#include <cstring>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

/// Byte offsets of the f16 scale fields inside one block of `t` (random bytes there could be inf/NaN).
std::vector<int> halfFields(GGMLType t) {
  switch (t) {
  case GGMLType::Q4_0:
  case GGMLType::Q5_0:
  case GGMLType::Q8_0:
    return {0};
  case GGMLType::Q4_1:
  case GGMLType::Q5_1:
  case GGMLType::Q4_K:
  case GGMLType::Q5_K:
    return {0, 2};
  case GGMLType::Q6_K:
    return {208};
  default:
    return {};
  }
}

/// Random rows of type t (every quant bit pattern, sane scales); `deq` gets their exact values.
std::vector<uint8_t> randomWeight(GGMLType t, int64_t rows, int64_t k, uint32_t seed,
                                  std::vector<float> &deq) {
  std::mt19937 rng(seed);
  const uint64_t rb = *ggmlRowBytes(t, k);
  std::vector<uint8_t> bytes(rows * rb);
  if (t == GGMLType::F32 || t == GGMLType::F16 || t == GGMLType::BF16) {
    auto v = randomFloats(rows * k, seed);
    for (int64_t i = 0; i < rows * k; ++i) {
      if (t == GGMLType::F32)
        std::memcpy(&bytes[i * 4], &v[i], 4);
      else {
        uint16_t h = t == GGMLType::F16 ? fp32ToFp16(v[i]) : fp32ToBf16(v[i]);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
  } else {
    for (uint8_t &b : bytes)
      b = static_cast<uint8_t>(rng());
    const auto &info = ggmlTypeInfo(t);
    std::uniform_real_distribution<float> sc(0.001f, 0.02f);
    for (uint64_t b = 0; b < bytes.size() / info.blockBytes; ++b)
      for (int off : halfFields(t)) {
        uint16_t h = fp32ToFp16(sc(rng));
        std::memcpy(&bytes[b * info.blockBytes + off], &h, 2);
      }
  }
  deq.assign(rows * k, 0);
  for (int64_t r = 0; r < rows; ++r)
    dequantizeRow(t, &bytes[r * rb], &deq[r * k], k);
  return bytes;
}

const GGMLType kTypes[] = {GGMLType::F32,  GGMLType::F16,  GGMLType::BF16, GGMLType::Q4_0,
                           GGMLType::Q4_1, GGMLType::Q5_0, GGMLType::Q5_1, GGMLType::Q8_0,
                           GGMLType::Q4_K, GGMLType::Q5_K, GGMLType::Q6_K};

TEST(CudaKernels, MatmulEveryTypeGemvAndCublas) {
  TPC_REQUIRE_GPU();
  const int64_t n = 67, k = 512; // odd row count: the last warp has one row
  for (GGMLType type : kTypes) {
    for (int64_t m : {int64_t(1), int64_t(3), int64_t(6), int64_t(24)}) { // 24 >= cublasMinRows: cuBLAS
      SCOPED_TRACE(std::string(ggmlTypeName(type)) + " m=" + std::to_string(m));
      PlanMaker mk(1, m, 1);
      std::vector<float> deq;
      auto wb = randomWeight(type, n, k, 7, deq);
      auto xv = randomFloats(m * k, 8);
      int32_t w = mk.weightRaw(0, type, {n, k}, wb);
      int32_t x = mk.input(0, {m, k}, xv), y = mk.act(0, {m, n});
      mk.b(0).step(OpKind::Matmul, {x, w}, {y});
      Pair p = runBoth(mk, {{0, 1}});
      ASSERT_TRUE(p.gpu);
      auto got = p.gpu->tensorData(0, y, 1);
      auto want = tpc::test::refMatmul(xv, deq, m, n, k);
      // f32 GEMV accumulation vs f16 operands on the cuBLAS path; the integer decode path rounds x to
      // 8 bits like the CPU backend (hence its tolerance).
      cuda::GemvArgs probe;
      probe.type = type, probe.k = k, probe.count = m;
      EXPECT_LE(relErr(want, got), m >= 9 ? 5e-3 : cuda::gemvUsesIntDot(probe) ? 3e-2 : 1e-5) << "vs exact";
      // The CPU backend rounds activations to 8 bits for quantized weights.
      const double plain = type == GGMLType::F32                             ? 1e-5
                           : type == GGMLType::F16 || type == GGMLType::BF16 ? 5e-3
                                                                             : 3e-2;
      expectClose(p, 0, y, 1, m >= 9 ? std::max(plain, 5e-3) : plain, "vs CPU");
    }
  }
}

TEST(CudaKernels, MatmulDecodeWideRowsEveryThreadShape) {
  TPC_REQUIRE_GPU();
  // Row lengths that take each thread shape of the decode kernel (units per row 64 .. 1024 and past it,
  // where the row-per-warp kernel runs), the integer and the float activation paths.
  const int64_t n = 37;
  for (GGMLType type : {GGMLType::Q4_K, GGMLType::Q6_K, GGMLType::Q8_0, GGMLType::F16})
    for (int64_t k : {int64_t(2048), int64_t(4096), int64_t(14336), int64_t(20480), int64_t(40960)}) {
      SCOPED_TRACE(std::string(ggmlTypeName(type)) + " k=" + std::to_string(k));
      PlanMaker mk(1, 1, 1);
      std::vector<float> deq;
      auto wb = randomWeight(type, n, k, 31, deq);
      auto xv = randomFloats(k, 32);
      int32_t w = mk.weightRaw(0, type, {n, k}, wb);
      int32_t x = mk.input(0, {1, k}, xv), y = mk.act(0, {1, n});
      mk.b(0).step(OpKind::Matmul, {x, w}, {y});
      Pair p = runBoth(mk, {{0, 1}});
      ASSERT_TRUE(p.gpu);
      cuda::GemvArgs probe;
      probe.type = type, probe.k = k, probe.count = 1;
      EXPECT_LE(relErr(tpc::test::refMatmul(xv, deq, 1, n, k), p.gpu->tensorData(0, y, 1)),
                cuda::gemvUsesIntDot(probe) ? 3e-2 : 1e-5);
    }
}

TEST(CudaKernels, FusedResidualNormAndQuantizedProducers) {
  TPC_REQUIRE_GPU();
  // add + rms_norm run as one kernel (the sum written too); rms_norm and glu also write the quantized x
  // of the integer GEMVs that read them next (three matmuls on one x share it, the two of one type in
  // one launch). Checked against the CPU backend and against the same plan run unfused.
  const int64_t k = 512, f = 256;
  PlanMaker mk(1, 1, 1);
  std::vector<float> deq;
  int32_t x = mk.input(0, {1, k}, randomFloats(k, 41, -2, 2)), r = mk.input(0, {1, k}, randomFloats(k, 42));
  int32_t nw = mk.weightF32(0, {k}, randomFloats(k, 43));
  int32_t wa = mk.weightRaw(0, GGMLType::Q4_K, {40, k}, randomWeight(GGMLType::Q4_K, 40, k, 44, deq));
  int32_t wb = mk.weightRaw(0, GGMLType::Q6_K, {24, k}, randomWeight(GGMLType::Q6_K, 24, k, 45, deq));
  int32_t wc = mk.weightRaw(0, GGMLType::Q8_0, {30, f}, randomWeight(GGMLType::Q8_0, 30, f, 46, deq));
  int32_t sum = mk.act(0, {1, k}), y = mk.act(0, {1, k}), za = mk.act(0, {1, 40}), zb = mk.act(0, {1, 24});
  mk.b(0).step(OpKind::Add, {x, r}, {sum});
  mk.b(0).step(OpKind::RmsNorm, {sum, nw}, {y}, {}, {1e-5f});
  int32_t wa2 = mk.weightRaw(0, GGMLType::Q4_K, {72, k}, randomWeight(GGMLType::Q4_K, 72, k, 48, deq));
  int32_t za2 = mk.act(0, {1, 72});
  mk.b(0).step(OpKind::Matmul, {y, wa}, {za}); // these two: one grouped launch
  mk.b(0).step(OpKind::Matmul, {y, wa2}, {za2});
  mk.b(0).step(OpKind::Matmul, {y, wb}, {zb}); // another type: its own launch
  int32_t gu = mk.input(0, {1, 2 * f}, randomFloats(2 * f, 47, -3, 3)), g = mk.act(0, {1, f}),
          zc = mk.act(0, {1, 30});
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

TEST(CudaKernels, HostPlacedStepsRunOnTheHost) {
  TPC_REQUIRE_GPU();
  // --override-tensor ...=cpu as the plan states it: x copied to the host, a matmul on a host weight slice
  // run by the CPU kernels, its result copied back for a device rms_norm, between device steps that would
  // otherwise fuse with it. The host matmul must equal the CPU backend's bit for bit (the GPU's integer
  // GEMV rounds differently), at one token (decode) and several, and the host slice must not use VRAM.
  const int64_t k = 512, n = 96;
  auto build = [&](Placement where, PlanMaker &mk) {
    std::vector<float> deq;
    int32_t x = mk.tokenInput(0, {k}, randomFloats(8 * k, 71, -2, 2));
    int32_t nw = mk.weightF32(0, {k}, randomFloats(k, 72));
    int32_t w = mk.weightRaw(0, GGMLType::Q4_K, {n, k}, randomWeight(GGMLType::Q4_K, n, k, 73, deq));
    DevicePlan &dp = mk.plan.devices[0];
    dp.weights[dp.tensors[w].index].placement = where;
    auto side = [&](std::vector<int64_t> shape) {
      return where == Placement::Host ? mk.hostAct(0, shape) : mk.act(0, shape);
    };
    int32_t xn = mk.act(0, {-1, k}), xh = side({-1, k}), yh = side({-1, n}), y = mk.act(0, {-1, n}),
            z = mk.act(0, {-1, n});
    mk.b(0).step(OpKind::RmsNorm, {x, nw}, {xn}, {}, {1e-5f});
    mk.b(0).step(OpKind::Copy, {xn}, {xh}, {}, {}, "to host", where);
    mk.b(0).step(OpKind::Matmul, {xh, w}, {yh}, {}, {}, "host matmul", where);
    mk.b(0).step(OpKind::Copy, {yh}, {y}, {}, {}, "to device");
    mk.b(0).step(OpKind::RmsNorm, {y}, {z}, {}, {1e-5f});
    return std::array<int32_t, 2>{yh, z};
  };
  PlanMaker mk(1, 4, 8), dev(1, 4, 8); // 8 token ids: the calls use ids 0..3
  auto [yh, z] = build(Placement::Host, mk);
  build(Placement::Device, dev);
  for (auto calls : {std::vector<std::pair<int32_t, int32_t>>{{0, 1}, {1, 1}}, {{0, 4}}}) {
    Pair p = runBoth(mk, calls);
    ASSERT_TRUE(p.gpu);
    const int64_t t = calls.back().second;
    EXPECT_EQ(p.cpu->tensorData(0, yh, t), p.gpu->tensorData(0, yh, t)) << "host matmul at " << t << " tokens";
    expectClose(p, 0, z, t, 1e-5, "device norm of the copied-back rows");
  }
  Pair p = runBoth(mk, {{0, 1}}), q = runBoth(dev, {{0, 1}});
  ASSERT_TRUE(p.gpu && q.gpu);
  EXPECT_GE(q.gpu->deviceBytes()[0], p.gpu->deviceBytes()[0] + *ggmlRowBytes(GGMLType::Q4_K, k) * n)
      << "the host slice must stay in host memory";
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

TEST(CudaKernels, MatmulEmptyReductionWritesZeros) {
  TPC_REQUIRE_GPU();
  // A device whose share of K is 0 holds a zero partial sum.
  PlanMaker mk(1, 2, 1);
  int32_t x = mk.act(0, {2, 0}), w = mk.act(0, {5, 0}), y = mk.act(0, {2, 5});
  int32_t junk = mk.input(0, {2, 5}, randomFloats(10, 3));
  mk.b(0).step(OpKind::Copy, {junk}, {y}); // garbage first, so a missing write shows
  mk.b(0).step(OpKind::Matmul, {x, w}, {y});
  Pair p = runBoth(mk, {{0, 1}});
  ASSERT_TRUE(p.gpu);
  for (float v : p.gpu->tensorData(0, y, 1))
    EXPECT_EQ(v, 0.0f);
}

TEST(CudaKernels, GetRowsEveryType) {
  TPC_REQUIRE_GPU();
  const int64_t rows = 19, k = 256;
  for (GGMLType type : kTypes) {
    SCOPED_TRACE(ggmlTypeName(type));
    PlanMaker mk(1, 4, 1);
    std::vector<float> deq;
    int32_t w = mk.weightRaw(0, type, {rows, k}, randomWeight(type, rows, k, 11, deq));
    int32_t ids = mk.inputI32(0, {5}, {18, 0, 5, 5, 99}), out = mk.act(0, {5, k});
    mk.b(0).step(OpKind::GetRows, {w, ids}, {out});
    Pair p = runBoth(mk, {{0, 1}});
    ASSERT_TRUE(p.gpu);
    auto got = p.gpu->tensorData(0, out, 1);
    const int want[5] = {18, 0, 5, 5, -1};
    for (int i = 0; i < 5; ++i)
      for (int64_t c = 0; c < k; ++c)
        ASSERT_NEAR(got[i * k + c], want[i] < 0 ? 0.0f : deq[want[i] * k + c], 1e-6f)
            << "row " << i << " col " << c;
  }
}

TEST(CudaKernels, MulMatIdGroupedDecodeAndPrefill) {
  TPC_REQUIRE_GPU();
  const int64_t e = 6, n = 45, k = 256, kk = 2;
  for (GGMLType type : {GGMLType::F32, GGMLType::Q8_0, GGMLType::Q4_K, GGMLType::Q6_K})
    for (int64_t t : {int64_t(1), int64_t(3), int64_t(13)})
      for (bool perSlot : {false, true}) {
        SCOPED_TRACE(std::string(ggmlTypeName(type)) + " t=" + std::to_string(t) +
                     (perSlot ? " per-slot" : ""));
        PlanMaker mk(1, 1, 1);
        std::vector<float> deq;
        int32_t w = mk.weightRaw(0, type, {e, n, k}, randomWeight(type, e * n, k, 21, deq));
        std::mt19937 rng(5);
        std::vector<int32_t> ids(t * kk);
        for (int32_t &v : ids)
          v = static_cast<int32_t>(rng() % e);
        if (t > 1)
          ids[3] = -1; // a broken router: zeros, like the CPU
        auto xv = randomFloats((perSlot ? t * kk : t) * k, 22);
        int32_t x = perSlot ? mk.input(0, {t, kk, k}, xv) : mk.input(0, {t, k}, xv);
        int32_t id = mk.inputI32(0, {t, kk}, ids), y = mk.act(0, {t, kk, n});
        mk.b(0).step(OpKind::MulMatId, {x, w, id}, {y});
        Pair p = runBoth(mk, {{0, 1}});
        ASSERT_TRUE(p.gpu);
        auto got = p.gpu->tensorData(0, y, 1);
        std::vector<float> want(t * kk * n, 0.0f);
        for (int64_t i = 0; i < t * kk; ++i) {
          if (ids[i] < 0)
            continue;
          for (int64_t r = 0; r < n; ++r) {
            double s = 0;
            for (int64_t c = 0; c < k; ++c)
              s += double(xv[(perSlot ? i : i / kk) * k + c]) * deq[(ids[i] * n + r) * k + c];
            want[i * n + r] = float(s);
          }
        }
        cuda::GemvArgs probe; // t * kk <= 16 pairs: the decode form, integer for the quantized types
        probe.type = type, probe.k = k, probe.count = t * kk, probe.ids = ids.data();
        EXPECT_LE(relErr(want, got), t * kk <= 16 && cuda::gemvUsesIntDot(probe) ? 3e-2 : 1e-5);
        expectClose(p, 0, y, 1, type == GGMLType::F32 ? 1e-5 : 3e-2, "vs CPU");
      }
}

TEST(CudaKernels, BinaryBroadcastMapAndGlu) {
  TPC_REQUIRE_GPU();
  PlanMaker mk(1, 1, 1);
  const std::vector<int64_t> a = {3, 5, 7};
  int32_t x = mk.input(0, a, randomFloats(105, 1, -3, 3));
  std::vector<int32_t> outs;
  for (OpKind op : {OpKind::Add, OpKind::Mul, OpKind::Div})
    for (const std::vector<int64_t> &bs :
         std::vector<std::vector<int64_t>>{{3, 5, 7}, {7}, {5, 1}, {3, 1, 7}, {1}}) {
      int32_t b = mk.input(0, bs, randomFloats(numelOf(bs), 2, 0.5f, 2.0f)), y = mk.act(0, a);
      mk.b(0).step(op, {x, b}, {y});
      outs.push_back(y);
    }
  int32_t sc = mk.act(0, a), cap = mk.act(0, a);
  mk.b(0).step(OpKind::Scale, {x}, {sc}, {}, {-2.5f});
  mk.b(0).step(OpKind::Softcap, {x}, {cap}, {}, {1.5f});
  outs.push_back(sc);
  outs.push_back(cap);
  for (int fn = 0; fn <= 6; ++fn) {
    int32_t u = mk.act(0, a);
    mk.b(0).step(OpKind::Unary, {x}, {u}, {fn});
    outs.push_back(u);
  }
  // GLU fused [gate | up] and split, on rows of 2 x 19.
  int32_t gu = mk.input(0, {4, 38}, randomFloats(152, 4, -3, 3)), g = mk.act(0, {4, 19}),
          up = mk.act(0, {4, 19});
  mk.b(0).step(OpKind::View, {gu}, {g}, {1, 0, 19});
  mk.b(0).step(OpKind::View, {gu}, {up}, {1, 19, 19});
  for (int fn : {0, 2}) {
    int32_t y1 = mk.act(0, {4, 19}), y2 = mk.act(0, {4, 19});
    mk.b(0).step(OpKind::Glu, {gu}, {y1}, {fn});
    mk.b(0).step(OpKind::Glu, {g, up}, {y2}, {fn});
    outs.push_back(y1);
    outs.push_back(y2);
  }
  Pair p = runBoth(mk, {{0, 1}});
  for (size_t i = 0; i < outs.size(); ++i)
    expectClose(p, 0, outs[i], 1, 1e-5, "output " + std::to_string(i));
}

TEST(CudaKernels, RowReductionsAndRouting) {
  TPC_REQUIRE_GPU();
  PlanMaker mk(1, 1, 1);
  auto xv = randomFloats(5 * 4099, 3, -4, 4);
  xv[7] = xv[8]; // a tie for top-k: the lower index first
  int32_t x = mk.input(0, {5, 4099}, xv), w = mk.weightF32(0, {4099}, randomFloats(4099, 4));
  int32_t norm = mk.act(0, {5, 4099}), normW = mk.act(0, {5, 4099}), sm = mk.act(0, {5, 4099});
  int32_t top = mk.act(0, {5, 8}, DType::I32), taken = mk.act(0, {5, 8});
  mk.b(0).step(OpKind::RmsNorm, {x}, {norm}, {}, {1e-5f});
  mk.b(0).step(OpKind::RmsNorm, {x, w}, {normW}, {}, {1e-6f});
  // Rows longer than the kernel keeps in registers (8 per thread of 1024).
  int32_t wide = mk.input(0, {2, 9001}, randomFloats(2 * 9001, 9, -4, 4)), wideNorm = mk.act(0, {2, 9001});
  mk.b(0).step(OpKind::RmsNorm, {wide}, {wideNorm}, {}, {1e-5f});
  mk.b(0).step(OpKind::Softmax, {x}, {sm});
  mk.b(0).step(OpKind::TopK, {x}, {top}, {8});
  mk.b(0).step(OpKind::TakeAlong, {sm, top}, {taken});
  // Sums over each axis, the expert combine with two multipliers.
  int32_t c3 = mk.input(0, {3, 4, 33}, randomFloats(396, 5));
  int32_t s0 = mk.act(0, {4, 33}), s1 = mk.act(0, {3, 1, 33}), s2 = mk.act(0, {3, 4});
  mk.b(0).step(OpKind::Sum, {c3}, {s0}, {0, 0});
  mk.b(0).step(OpKind::Sum, {c3}, {s1}, {1, 1});
  mk.b(0).step(OpKind::Sum, {c3}, {s2}, {2, 0});
  int32_t m1 = mk.input(0, {3, 4}, randomFloats(12, 6)), m2 = mk.input(0, {3, 4}, randomFloats(12, 7));
  int32_t comb = mk.act(0, {3, 33});
  mk.b(0).step(OpKind::ExpertCombine, {c3, m1, m2}, {comb});
  Pair p = runBoth(mk, {{0, 1}});
  expectClose(p, 0, norm, 1, 1e-5, "rms_norm");
  expectClose(p, 0, normW, 1, 1e-5, "rms_norm * w");
  expectClose(p, 0, wideNorm, 1, 1e-5, "rms_norm of long rows");
  expectClose(p, 0, sm, 1, 1e-5, "softmax");
  expectClose(p, 0, top, 1, 0, "top_k");
  expectClose(p, 0, taken, 1, 1e-5, "take_along");
  expectClose(p, 0, s0, 1, 1e-5, "sum axis 0");
  expectClose(p, 0, s1, 1, 1e-5, "sum axis 1");
  expectClose(p, 0, s2, 1, 1e-5, "sum axis 2");
  expectClose(p, 0, comb, 1, 1e-5, "expert_combine");
}

TEST(CudaKernels, CopiesPermutesViewsConcats) {
  TPC_REQUIRE_GPU();
  PlanMaker mk(1, 1, 1);
  int32_t x = mk.input(0, {3, 4, 5}, randomFloats(60, 9, -100, 100));
  int32_t h = mk.act(0, {3, 4, 5}, DType::F16), back = mk.act(0, {3, 4, 5});
  mk.b(0).step(OpKind::Copy, {x}, {h});
  mk.b(0).step(OpKind::Copy, {h}, {back});
  int32_t pf = mk.act(0, {5, 3, 4}), ph = mk.act(0, {4, 5, 3}, DType::F16), phf = mk.act(0, {4, 5, 3});
  mk.b(0).step(OpKind::Permute, {x}, {pf}, {2, 0, 1});
  mk.b(0).step(OpKind::Permute, {h}, {ph}, {1, 2, 0});
  mk.b(0).step(OpKind::Copy, {ph}, {phf});
  int32_t v = mk.act(0, {3, 2, 5}), sl = mk.act(0, {3, 4, 2}), empty = mk.act(0, {3, 0, 5});
  mk.b(0).step(OpKind::View, {x}, {v}, {1, 1, 2});
  mk.b(0).step(OpKind::Slice, {x}, {sl}, {2, 3, 2});
  mk.b(0).step(OpKind::Slice, {x}, {empty}, {1, 4, 0});
  int32_t c = mk.act(0, {3, 6, 5}), c2 = mk.act(0, {3, 4, 7});
  mk.b(0).step(OpKind::Concat, {x, v, empty}, {c}, {1});
  mk.b(0).step(OpKind::Concat, {x, sl}, {c2}, {2});
  Pair p = runBoth(mk, {{0, 1}});
  for (auto [id, what] : std::vector<std::pair<int32_t, const char *>>{{back, "f32->f16->f32"},
                                                                       {pf, "permute f32"},
                                                                       {phf, "permute f16"},
                                                                       {v, "view"},
                                                                       {sl, "slice"},
                                                                       {c, "concat axis 1"},
                                                                       {c2, "concat axis 2"}})
    expectClose(p, 0, id, 1, 0, what);
}

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

struct AttnCase {
  int64_t hq, hkv, dk, dv, window;
  float softcap;
  bool sinks;
  DType cache;
};

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
    int32_t qi = mk.tokenInput(0, {c.hq, c.dk}, randomFloats(maxT * c.hq * c.dk, 1, -2, 2));
    int32_t ki = mk.tokenInput(0, {c.hkv, c.dk}, randomFloats(maxT * c.hkv * c.dk, 2, -2, 2));
    int32_t vi = mk.tokenInput(0, {c.hkv, c.dv}, randomFloats(maxT * c.hkv * c.dv, 3));
    int32_t y = mk.act(0, {-1, c.hq, c.dv});
    int32_t kv = mk.b(0).addKv({0, int32_t(c.hkv), int32_t(c.dk), int32_t(c.dv), c.cache, Placement::Device});
    std::vector<int32_t> in = {qi, ki, vi, mk.positions[0]};
    if (c.sinks)
      in.push_back(mk.input(0, {c.hq}, randomFloats(c.hq, 4)));
    mk.b(0).step(OpKind::Attention, in, {y}, {kv, c.window}, {0.3f, c.softcap});
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
  int32_t kv = mk.b(0).addKv({0, int32_t(hkv), int32_t(dh), int32_t(dh), DType::F16, Placement::Device});
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

TEST(CudaKernels, LoopbackCollectivesOnTwoAndThreeDevices) {
  TPC_REQUIRE_GPU();
  for (int nd : {2, 3}) {
    SCOPED_TRACE(std::to_string(nd) + " devices");
    PlanMaker mk(nd, 4, 64);
    std::vector<int32_t> ar(nd), ar2(nd), arOut(nd), rs(nd), ag(nd);
    const int64_t parts[3] = {5, 0, 3}; // uneven, one empty share
    int64_t whole = 0;
    for (int d = 0; d < nd; ++d)
      whole += parts[d];
    for (int d = 0; d < nd; ++d) {
      int32_t a = mk.tokenInput(d, {7}, randomFloats(4 * 7, 30 + d));
      int32_t b = mk.tokenInput(d, {3, 2}, randomFloats(4 * 6, 40 + d));
      ar[d] = mk.act(d, {-1, 7});
      ar2[d] = b;
      arOut[d] = mk.act(d, {-1, 3, 2});
      mk.b(d).step(OpKind::AllReduce, {a, b}, {ar[d], arOut[d]}); // a bucket, one out of place
      int32_t x = mk.tokenInput(d, {whole, 2}, randomFloats(4 * whole * 2, 50 + d));
      rs[d] = mk.act(d, {-1, parts[d], 2});
      mk.b(d).step(OpKind::ReduceScatter, {x}, {rs[d]}, {1});
      int32_t part = mk.tokenInput(d, {3, parts[d] ? parts[d] : 1}, randomFloats(4 * 3 * 5, 60 + d));
      int32_t pv = mk.act(d, {-1, 3, parts[d]});
      mk.b(d).step(OpKind::Slice, {part}, {pv}, {2, 0, parts[d]});
      ag[d] = mk.act(d, {-1, 3, whole});
      mk.b(d).step(OpKind::AllGather, {pv}, {ag[d]}, {2});
    }
    Pair p = runBoth(mk, {{0, 4}});
    for (int d = 0; d < nd; ++d) {
      expectClose(p, d, ar[d], 4, 1e-6, "all_reduce");
      expectClose(p, d, arOut[d], 4, 1e-6, "all_reduce out of place");
      if (parts[d] > 0) // an empty share has no data to compare
        expectClose(p, d, rs[d], 4, 1e-6, "reduce_scatter");
      expectClose(p, d, ag[d], 4, 0, "all_gather");
    }
  }
}

TEST(CudaKernels, OpenRefusesWhatTheKernelsCannotRead) {
  TPC_REQUIRE_GPU();
  PlanMaker mk(1, 1, 1);
  std::vector<uint8_t> q2(*ggmlRowBytes(GGMLType::Q2_K, 256) * 3, 0);
  int32_t w = mk.weightRaw(0, GGMLType::Q2_K, {3, 256}, q2);
  int32_t x = mk.input(0, {1, 256}, randomFloats(256, 1)), y = mk.act(0, {1, 3});
  mk.b(0).step(OpKind::Matmul, {x, w}, {y}, {}, {}, "blk.0.attn_q");
  SessionOptions o = mk.options();
  auto s = cuda::CudaSession::open(mk.plan, o);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("q2_K"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("blk.0.attn_q"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

/// Not a correctness check: decode GEMV bandwidth on a llama3-8b sized FFN matrix per type (printed).
TEST(CudaKernels, GemvBandwidth) {
  TPC_REQUIRE_GPU();
  const int64_t n = 14336, k = 4096;
  for (GGMLType type :
       {GGMLType::F16, GGMLType::Q8_0, GGMLType::Q4_0, GGMLType::Q4_K, GGMLType::Q5_K, GGMLType::Q6_K}) {
    PlanMaker mk(1, 1, 1);
    const uint64_t rb = *ggmlRowBytes(type, k);
    std::vector<uint8_t> bytes(n * rb, 0x11);
    int32_t w = mk.weightRaw(0, type, {n, k}, bytes);
    int32_t x = mk.tokenInput(0, {k}, randomFloats(2 * k, 1)), y = mk.act(0, {-1, n});
    for (int rep = 0; rep < 20; ++rep)
      mk.b(0).step(OpKind::Matmul, {x, w}, {y});
    SessionOptions o = mk.options();
    cuda::CudaOptions co;
    co.gpus = {0};
    auto s = cuda::CudaSession::open(mk.plan, o, co);
    ASSERT_TRUE(s) << s.message();
    ASSERT_TRUE((*s)->evaluate({0}, {0})); // capture + warm-up
    const int iters = 20;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i)
      ASSERT_TRUE((*s)->evaluate({0}, {0}));
    const double sec =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters / 20;
    std::printf("[ gemv     ] %-5s %lldx%lld: %.1f us, %.0f GB/s\n", ggmlTypeName(type), (long long)n,
                (long long)k, sec * 1e6, n * rb / sec / 1e9);
  }
}

} // namespace
