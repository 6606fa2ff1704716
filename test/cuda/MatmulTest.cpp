//===- MatmulTest.cpp - matmul, mul_mat_id and get_rows on CUDA -----------------===//
//
// Every weight type through each matmul path against an exact double-precision product of the dequantized
// weights and against the CPU backend (which quantizes activations to 8 bits for quantized weights, as the
// integer GEMVs do): the decode GEMV (one token), the batched GEMVs (2..8 tokens; the integer one at any
// row length) and cuBLAS (from 9), wide rows for every thread shape of the decode kernel, mul_mat_id in
// each of its forms (per-pair decode blocks, the routed batched GEMV, the tile GEMM on tensor cores with
// partial tiles; an expert-parallel share's offset ids), get_rows of every type, and what open() refuses
// (a weight type no kernel reads). GemvBandwidth prints the decode GEMV's bandwidth (not a correctness
// check). Skips visibly without a GPU.
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "runtime/cuda/Matmul.cuh"
#include "runtime/plan/StepParams.h"
#include "test/common/TestSupport.h"

#include <chrono>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

/// Relative error a mul_mat_id of `count` pairs may show against the exact product: 8-bit activations on
/// the integer GEMVs, f16 operands on the tile GEMM, none on the float GEMV.
double mulMatIdTolerance(GGMLType type, int64_t count, int64_t experts, int64_t k) {
  const cuda::MoePath path = cuda::moePath(type, count, experts, k);
  if (path == cuda::MoePath::RoutedGemm)
    return 5e-3;
  cuda::GemvArgs probe;
  probe.type = type, probe.k = k, probe.count = count;
  static const int32_t someIds = 0;
  (path == cuda::MoePath::PerPair ? probe.ids : probe.list) = &someIds;
  return cuda::gemvUsesIntDot(probe) ? 3e-2 : 1e-5;
}

TEST(CudaKernels, MatmulEveryTypeGemvAndCublas) {
  TPC_REQUIRE_GPU();
  const int64_t n = 67, k = 512; // odd row count: the last warp has one row
  for (GGMLType type : kCudaWeightTypes) {
    // 1: decode; 2, 3, 6, 8: the batched GEMVs (integer for the types that have a unit: 2, 4 and 8
    // tokens per pass); 24 >= cublasMinRows: cuBLAS.
    for (int64_t m : {int64_t(1), int64_t(2), int64_t(3), int64_t(6), int64_t(8), int64_t(24)}) {
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
  for (GGMLType type : {GGMLType::Q4_K, GGMLType::Q6_K, GGMLType::Q8_0, GGMLType::F16, GGMLType::Q3_K,
                        GGMLType::IQ4_XS})
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

TEST(CudaKernels, MatmulBatchedIntegerRowsAnyLength) {
  TPC_REQUIRE_GPU();
  // The batched integer GEMV reads x through L1, so it takes rows past the decode kernel's 1024 units;
  // row counts that leave the last warp partial (RS rows per warp) and tokens of every pass width.
  for (GGMLType type : {GGMLType::Q4_0, GGMLType::Q8_0, GGMLType::Q4_K, GGMLType::Q5_K, GGMLType::Q6_K,
                        GGMLType::Q2_K, GGMLType::Q3_K, GGMLType::IQ4_NL, GGMLType::IQ4_XS, GGMLType::MXFP4})
    for (int64_t k : {int64_t(256), int64_t(14336), int64_t(40960)})
      for (int64_t m : {int64_t(2), int64_t(4), int64_t(7)}) {
        SCOPED_TRACE(std::string(ggmlTypeName(type)) + " k=" + std::to_string(k) + " m=" + std::to_string(m));
        const int64_t n = 37;
        PlanMaker mk(1, 1, 1);
        std::vector<float> deq;
        auto wb = randomWeight(type, n, k, 51, deq);
        auto xv = randomFloats(m * k, 52);
        int32_t w = mk.weightRaw(0, type, {n, k}, wb);
        int32_t x = mk.input(0, {m, k}, xv), y = mk.act(0, {m, n});
        mk.b(0).step(OpKind::Matmul, {x, w}, {y});
        Pair p = runBoth(mk, {{0, 1}});
        ASSERT_TRUE(p.gpu);
        cuda::GemvArgs probe;
        probe.type = type, probe.k = k, probe.count = m;
        ASSERT_TRUE(cuda::gemvUsesIntDot(probe));
        EXPECT_LE(relErr(tpc::test::refMatmul(xv, deq, m, n, k), p.gpu->tensorData(0, y, 1)), 3e-2) << "vs exact";
        expectClose(p, 0, y, 1, 3e-2, "vs CPU");
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
  for (GGMLType type : kCudaWeightTypes) {
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
  // Pairs t * kk over 6 experts: 2 and 6 per-pair decode blocks; 20 the routed batched GEMV; 26, 80 and
  // 600 (100 per expert: two tiles each) the tile GEMM on tensor cores, f32 excepted.
  for (GGMLType type : {GGMLType::F32, GGMLType::Q4_0, GGMLType::Q8_0, GGMLType::Q4_K, GGMLType::Q6_K,
                        GGMLType::Q2_K, GGMLType::Q3_K, GGMLType::IQ4_NL, GGMLType::IQ4_XS, GGMLType::MXFP4})
    for (int64_t t : {int64_t(1), int64_t(3), int64_t(10), int64_t(13), int64_t(40), int64_t(300)})
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
        EXPECT_LE(relErr(want, got), mulMatIdTolerance(type, t * kk, e, k)) << "vs exact";
        expectClose(p, 0, y, 1, type == GGMLType::F32 ? 1e-5 : 3e-2, "vs CPU");
      }
}

/// The tile GEMM's edges through mul_mat_id: weight rows that leave the last 64-row tile partial (200),
/// an odd number of 32-element chunks (the k-step's second chunk zero), one expert with several full
/// tiles and one with a partial tile, and the other experts idle.
TEST(CudaKernels, MulMatIdTileGemmPartialTilesAndOddChunks) {
  TPC_REQUIRE_GPU();
  const int64_t e = 4, n = 200, t = 150, kk = 1;
  for (GGMLType type : {GGMLType::F16, GGMLType::BF16, GGMLType::Q4_1, GGMLType::Q5_0, GGMLType::Q8_0,
                        GGMLType::Q4_K, GGMLType::Q5_K, GGMLType::Q6_K, GGMLType::Q2_K, GGMLType::Q3_K,
                        GGMLType::IQ4_NL, GGMLType::IQ4_XS, GGMLType::MXFP4})
    for (int64_t k : {int64_t(96), int64_t(512)}) {
      if (ggmlTypeInfo(type).blockElems > k || k % ggmlTypeInfo(type).blockElems != 0)
        continue;
      SCOPED_TRACE(std::string(ggmlTypeName(type)) + " k=" + std::to_string(k));
      ASSERT_EQ(cuda::moePath(type, t * kk, e, k), cuda::MoePath::RoutedGemm);
      PlanMaker mk(1, 1, 1);
      std::vector<float> deq;
      int32_t w = mk.weightRaw(0, type, {e, n, k}, randomWeight(type, e * n, k, 61, deq));
      std::vector<int32_t> ids(t * kk);
      for (int64_t i = 0; i < t; ++i) // 140 pairs to expert 2 (three tiles), 10 to expert 0
        ids[i] = i % 15 == 0 ? 0 : 2;
      auto xv = randomFloats(t * k, 62);
      int32_t x = mk.input(0, {t, k}, xv);
      int32_t id = mk.inputI32(0, {t, kk}, ids), y = mk.act(0, {t, kk, n});
      mk.b(0).step(OpKind::MulMatId, {x, w, id}, {y});
      Pair p = runBoth(mk, {{0, 1}});
      ASSERT_TRUE(p.gpu);
      auto got = p.gpu->tensorData(0, y, 1);
      std::vector<float> want(t * n);
      for (int64_t i = 0; i < t; ++i)
        for (int64_t r = 0; r < n; ++r) {
          double s = 0;
          for (int64_t c = 0; c < k; ++c)
            s += double(xv[i * k + c]) * deq[(ids[i] * n + r) * k + c];
          want[i * n + r] = float(s);
        }
      EXPECT_LE(relErr(want, got), 5e-3) << "vs exact";
      expectClose(p, 0, y, 1, 3e-2, "vs CPU");
    }
}

/// The expert matmuls of a layer read the same ids: the first routes, the others reuse its grouping (the
/// GEMM's tile table too) and zero their own rows of foreign pairs; once a step writes over the ids, the
/// next mul_mat_id must route again. Three steps, the ids rewritten before the third, each against the
/// exact product, through the routed GEMV (20 pairs over 6 experts) and the tile GEMM (150 pairs).
TEST(CudaKernels, MulMatIdStepsOnOneIdsShareTheirRouting) {
  TPC_REQUIRE_GPU();
  const int64_t e = 6, n = 70, k = 256, kk = 2;
  for (int64_t t : {int64_t(10), int64_t(75)}) {
    SCOPED_TRACE("pairs " + std::to_string(t * kk));
    PlanMaker mk(1, 1, 1);
    std::vector<float> d1, d2, d3;
    int32_t w1 = mk.weightRaw(0, GGMLType::Q4_K, {e, n, k}, randomWeight(GGMLType::Q4_K, e * n, k, 71, d1));
    int32_t w2 = mk.weightRaw(0, GGMLType::Q8_0, {e, n, k}, randomWeight(GGMLType::Q8_0, e * n, k, 72, d2));
    int32_t w3 = mk.weightRaw(0, GGMLType::Q4_K, {e, n, k}, randomWeight(GGMLType::Q4_K, e * n, k, 73, d3));
    std::mt19937 rng(9);
    std::vector<int32_t> first(t * kk), second(t * kk);
    for (int32_t &v : first)
      v = static_cast<int32_t>(rng() % e);
    for (int32_t &v : second)
      v = static_cast<int32_t>(rng() % (e + 2)) - 1; // some out of range: zero rows
    auto xv = randomFloats(t * k, 74);
    int32_t x = mk.input(0, {t, k}, xv);
    int32_t ids = mk.inputI32(0, {t, kk}, first), ids2 = mk.inputI32(0, {t, kk}, second);
    int32_t y1 = mk.act(0, {t, kk, n}), y2 = mk.act(0, {t, kk, n}), y3 = mk.act(0, {t, kk, n});
    mk.b(0).step(OpKind::MulMatId, {x, w1, ids}, {y1});
    mk.b(0).step(OpKind::MulMatId, {x, w2, ids}, {y2});
    mk.b(0).step(OpKind::Copy, {ids2}, {ids}); // new routing in the same tensor
    mk.b(0).step(OpKind::MulMatId, {x, w3, ids}, {y3});
    Pair p = runBoth(mk, {{0, 1}});
    ASSERT_TRUE(p.gpu);
    auto exact = [&](const std::vector<int32_t> &route, const std::vector<float> &deq) {
      std::vector<float> want(t * kk * n, 0.0f);
      for (int64_t i = 0; i < t * kk; ++i) {
        if (route[i] < 0 || route[i] >= e)
          continue;
        for (int64_t r = 0; r < n; ++r) {
          double s = 0;
          for (int64_t c = 0; c < k; ++c)
            s += double(xv[(i / kk) * k + c]) * deq[(route[i] * n + r) * k + c];
          want[i * n + r] = float(s);
        }
      }
      return want;
    };
    EXPECT_LE(relErr(exact(first, d1), p.gpu->tensorData(0, y1, 1)), mulMatIdTolerance(GGMLType::Q4_K, t * kk, e, k));
    EXPECT_LE(relErr(exact(first, d2), p.gpu->tensorData(0, y2, 1)), mulMatIdTolerance(GGMLType::Q8_0, t * kk, e, k));
    EXPECT_LE(relErr(exact(second, d3), p.gpu->tensorData(0, y3, 1)), mulMatIdTolerance(GGMLType::Q4_K, t * kk, e, k));
    for (int32_t id : {y1, y2, y3})
      expectClose(p, 0, id, 1, 3e-2, "vs CPU " + std::to_string(id));
  }
}

/// An expert-parallel share (--moe-split expert): the weight holds experts [2, 6) of 8, ids are global;
/// pairs routed to the share's experts are computed with the local expert id - 2, the others are zero rows,
/// in the per-pair decode form and through the routing pass (prefill), as on the CPU.
TEST(CudaKernels, MulMatIdExpertShareOffsetsIdsAndZerosOtherExperts) {
  TPC_REQUIRE_GPU();
  const int64_t global = 8, first = 2, e = 4, n = 40, k = 256, kk = 2;
  for (GGMLType type : {GGMLType::F32, GGMLType::Q4_K})
    for (int64_t t : {int64_t(1), int64_t(13)}) {
      SCOPED_TRACE(std::string(ggmlTypeName(type)) + " t=" + std::to_string(t));
      PlanMaker mk(1, 1, 1);
      std::vector<float> deq;
      int32_t w = mk.weightRaw(0, type, {e, n, k}, randomWeight(type, e * n, k, 31, deq));
      std::mt19937 rng(7);
      std::vector<int32_t> ids(t * kk);
      for (int32_t &v : ids)
        v = static_cast<int32_t>(rng() % global);
      ids[0] = 3; // at least one pair in the share
      auto xv = randomFloats(t * k, 32);
      int32_t x = mk.input(0, {t, k}, xv);
      int32_t id = mk.inputI32(0, {t, kk}, ids), y = mk.act(0, {t, kk, n});
      const PackedParams pp = MulMatIdParams{first}.pack();
      mk.b(0).step(OpKind::MulMatId, {x, w, id}, {y}, pp.ints, pp.floats);
      Pair p = runBoth(mk, {{0, 1}});
      ASSERT_TRUE(p.gpu);
      auto got = p.gpu->tensorData(0, y, 1);
      std::vector<float> want(t * kk * n, 0.0f);
      for (int64_t i = 0; i < t * kk; ++i) {
        const int64_t local = ids[i] - first;
        if (local < 0 || local >= e)
          continue;
        for (int64_t r = 0; r < n; ++r) {
          double s = 0;
          for (int64_t c = 0; c < k; ++c)
            s += double(xv[(i / kk) * k + c]) * deq[(local * n + r) * k + c];
          want[i * n + r] = float(s);
        }
      }
      for (int64_t i = 0; i < t * kk; ++i)
        if (ids[i] < first || ids[i] >= first + e)
          for (int64_t r = 0; r < n; ++r)
            ASSERT_EQ(got[i * n + r], 0.0f) << "pair " << i << " routed to expert " << ids[i];
      EXPECT_LE(relErr(want, got), mulMatIdTolerance(type, t * kk, e, k));
      expectClose(p, 0, y, 1, type == GGMLType::F32 ? 1e-5 : 3e-2, "vs CPU");
    }
}

TEST(CudaKernels, OpenRefusesWhatTheKernelsCannotRead) {
  // No GPU needed: the plan is refused on shapes and types before any GPU is looked for. q8_K: the CPU
  // backend dequantizes it (so only the CUDA check can refuse it), no CUDA kernel reads it.
  PlanMaker mk(1, 1, 1);
  std::vector<uint8_t> q8k(*ggmlRowBytes(GGMLType::Q8_K, 256) * 3, 0);
  int32_t w = mk.weightRaw(0, GGMLType::Q8_K, {3, 256}, q8k);
  int32_t x = mk.input(0, {1, 256}, randomFloats(256, 1)), y = mk.act(0, {1, 3});
  mk.b(0).step(OpKind::Matmul, {x, w}, {y}, {}, {}, "blk.0.attn_q");
  SessionOptions o = mk.options();
  auto s = openCuda(mk.plan, o);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("q8_K"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("blk.0.attn_q"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

/// Not a correctness check: decode GEMV bandwidth on a llama3-8b sized FFN matrix per type (printed).
TEST(CudaKernels, GemvBandwidth) {
  TPC_REQUIRE_GPU();
  const int64_t n = 14336, k = 4096;
  for (GGMLType type :
       {GGMLType::F16, GGMLType::Q8_0, GGMLType::Q4_0, GGMLType::Q4_K, GGMLType::Q5_K, GGMLType::Q6_K,
        GGMLType::Q2_K, GGMLType::Q3_K, GGMLType::IQ4_NL, GGMLType::IQ4_XS, GGMLType::MXFP4}) {
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
    auto s = openCuda(mk.plan, o, co);
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
