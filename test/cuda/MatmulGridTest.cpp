//===- MatmulGridTest.cpp - the IQ grid types through the CUDA matmuls --------===//
//
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M weights (QuantGrid.cuh) through every matmul path
// against the exact double product of the dequantized weights and against the CPU backend: the integer
// decode GEMV at every thread shape, the batched integer GEMV (2..8 tokens, long rows), cuBLAS on the f16
// dequantization, mul_mat_id's per-pair, routed and tile-GEMM (prefill) forms, and get_rows. The weights
// use every grid index, sign code and scale value (test/common/GridBlocks.h). Skips visibly without a GPU.
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "runtime/cuda/Matmul.cuh"
#include "test/common/GridBlocks.h"
#include "test/common/TestSupport.h"

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

const GGMLType kGridTypes[] = {GGMLType::IQ2_XXS, GGMLType::IQ2_XS, GGMLType::IQ2_S, GGMLType::IQ3_XXS,
                               GGMLType::IQ3_S,   GGMLType::IQ1_S,  GGMLType::IQ1_M};

/// `rows` rows of k elements of grid type t (k a multiple of 256) whose super-blocks together use every
/// grid index, sign code and scale value; d of either sign at activation-like magnitudes. `deq` gets
/// their exact values.
std::vector<uint8_t> gridWeight(GGMLType t, int64_t rows, int64_t k, uint32_t seed, std::vector<float> &deq) {
  const uint64_t rb = *ggmlRowBytes(t, k);
  std::vector<uint8_t> bytes(rows * rb);
  const uint16_t halves[5] = {fp32ToFp16(0.002f), fp32ToFp16(0.0005f), fp32ToFp16(-0.001f),
                              fp32ToFp16(0.004f), fp32ToFp16(-0.0025f)};
  std::mt19937 rng(seed);
  tpc::gridtest::fillGridBlocks(t, bytes.data(), static_cast<int>(rows * k / 256), rng, halves, 5);
  deq.assign(rows * k, 0);
  for (int64_t r = 0; r < rows; ++r)
    dequantizeRow(t, &bytes[r * rb], &deq[r * k], k);
  return bytes;
}

/// One matmul of m tokens on an n x k grid weight: against the exact product and the CPU backend.
void checkMatmul(GGMLType type, int64_t n, int64_t k, int64_t m, uint32_t seed) {
  SCOPED_TRACE(std::string(ggmlTypeName(type)) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
               " m=" + std::to_string(m));
  PlanMaker mk(1, m, 1);
  std::vector<float> deq;
  auto wb = gridWeight(type, n, k, seed, deq);
  auto xv = randomFloats(m * k, seed + 1);
  int32_t w = mk.weightRaw(0, type, {n, k}, wb);
  int32_t x = mk.input(0, {m, k}, xv), y = mk.act(0, {m, n});
  mk.b(0).step(OpKind::Matmul, {x, w}, {y});
  Pair p = runBoth(mk, {{0, 1}});
  ASSERT_TRUE(p.gpu);
  cuda::GemvArgs probe;
  probe.type = type, probe.k = k, probe.count = m;
  // Up to 8 tokens the integer GEMVs (x rounded to 8 bits as on the CPU), from 9 cuBLAS on f16 operands.
  if (m <= 8)
    ASSERT_TRUE(cuda::gemvUsesIntDot(probe));
  EXPECT_LE(relErr(tpc::test::refMatmul(xv, deq, m, n, k), p.gpu->tensorData(0, y, 1)), m >= 9 ? 5e-3 : 3e-2)
      << "vs exact";
  expectClose(p, 0, y, 1, 3e-2, "vs CPU");
}

TEST(CudaKernels, MatmulGridTypesGemvAndCublas) {
  TPC_REQUIRE_GPU();
  // 1: decode; 2, 3, 6, 8: the batched integer GEMVs; 24: cuBLAS. 67 rows: the last warp has one.
  for (GGMLType type : kGridTypes)
    for (int64_t m : {int64_t(1), int64_t(2), int64_t(3), int64_t(6), int64_t(8), int64_t(24)})
      checkMatmul(type, 67, 512, m, 7);
}

TEST(CudaKernels, MatmulGridTypesEveryDecodeShapeAndLongRows) {
  TPC_REQUIRE_GPU();
  // Decode at 1 .. 1024 units of 32 (every thread shape of the decode kernel; 16384 = 64 super-blocks
  // per row: every grid index in each row), then rows past the decode kernel for the batched GEMV.
  for (GGMLType type : kGridTypes) {
    for (int64_t k : {int64_t(256), int64_t(2048), int64_t(4096), int64_t(16384), int64_t(32768)})
      checkMatmul(type, 37, k, 1, 31);
    for (int64_t m : {int64_t(2), int64_t(4), int64_t(7)})
      checkMatmul(type, 37, 40960, m, 41);
  }
}

TEST(CudaKernels, MulMatIdGridTypesDecodeAndTileGemm) {
  TPC_REQUIRE_GPU();
  const int64_t e = 6, n = 200, k = 512, kk = 2;
  // Pairs t * kk over 6 experts: 2 and 6 per-pair decode blocks; 20 the routed batched GEMV; 300 the tile
  // GEMM (prefill) with partial tiles.
  const std::pair<int64_t, cuda::MoePath> cases[] = {{1, cuda::MoePath::PerPair},
                                                     {3, cuda::MoePath::PerPair},
                                                     {10, cuda::MoePath::RoutedGemv},
                                                     {150, cuda::MoePath::RoutedGemm}};
  for (GGMLType type : kGridTypes)
    for (auto [t, path] : cases) {
      SCOPED_TRACE(std::string(ggmlTypeName(type)) + " t=" + std::to_string(t));
      ASSERT_EQ(cuda::moePath(type, t * kk, e, k), path);
      PlanMaker mk(1, 1, 1);
      std::vector<float> deq;
      int32_t w = mk.weightRaw(0, type, {e, n, k}, gridWeight(type, e * n, k, 61, deq));
      std::mt19937 rng(5);
      std::vector<int32_t> ids(t * kk);
      for (int32_t &v : ids)
        v = static_cast<int32_t>(rng() % e);
      auto xv = randomFloats(t * k, 62);
      int32_t x = mk.input(0, {t, k}, xv);
      int32_t id = mk.inputI32(0, {t, kk}, ids), y = mk.act(0, {t, kk, n});
      mk.b(0).step(OpKind::MulMatId, {x, w, id}, {y});
      Pair p = runBoth(mk, {{0, 1}});
      ASSERT_TRUE(p.gpu);
      std::vector<float> want(t * kk * n);
      for (int64_t i = 0; i < t * kk; ++i)
        for (int64_t r = 0; r < n; ++r) {
          double s = 0;
          for (int64_t c = 0; c < k; ++c)
            s += double(xv[(i / kk) * k + c]) * deq[(ids[i] * n + r) * k + c];
          want[i * n + r] = float(s);
        }
      // 8-bit x on the integer GEMVs, f16 operands on the tile GEMM.
      EXPECT_LE(relErr(want, p.gpu->tensorData(0, y, 1)), path == cuda::MoePath::RoutedGemm ? 5e-3 : 3e-2)
          << "vs exact";
      expectClose(p, 0, y, 1, 3e-2, "vs CPU");
    }
}

TEST(CudaKernels, GetRowsGridTypes) {
  TPC_REQUIRE_GPU();
  const int64_t rows = 19, k = 2048;
  for (GGMLType type : kGridTypes) {
    SCOPED_TRACE(ggmlTypeName(type));
    PlanMaker mk(1, 4, 1);
    std::vector<float> deq;
    int32_t w = mk.weightRaw(0, type, {rows, k}, gridWeight(type, rows, k, 11, deq));
    int32_t ids = mk.inputI32(0, {4}, {18, 0, 5, 5}), out = mk.act(0, {4, k});
    mk.b(0).step(OpKind::GetRows, {w, ids}, {out});
    Pair p = runBoth(mk, {{0, 1}});
    ASSERT_TRUE(p.gpu);
    auto got = p.gpu->tensorData(0, out, 1);
    const int want[4] = {18, 0, 5, 5};
    for (int i = 0; i < 4; ++i)
      for (int64_t c = 0; c < k; ++c) // exact: the decoder matches the CPU's bit for bit
        ASSERT_EQ(got[i * k + c], deq[want[i] * k + c]) << "row " << i << " col " << c;
  }
}

TEST(CudaKernels, SupportedTypeCheckAcceptsGridTypes) {
  // No GPU needed: the check open() makes of every weight operand (Session.cpp).
  for (GGMLType type : kGridTypes) {
    SCOPED_TRACE(ggmlTypeName(type));
    EXPECT_TRUE(cuda::cudaSupportsType(type));
  }
}

} // namespace
