//===- QuantChunkTest.cu - the CUDA dequantizers, run on the host -----------===//
//
// loadChunk<T> (runtime/cuda/Quant.cuh) is __host__ __device__, so its bit manipulation is checked here
// against the CPU backend's dequantizeRow on random blocks of every type, bit for bit, on any machine
// (no GPU needed; this is the part of the CUDA backend that CI without a GPU exercises).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/quant/Blocks.h"
#include "runtime/cpu/quant/Quant.h"
#include "runtime/cuda/Quant.cuh"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

using namespace tpc;
using namespace tpc::rt;

namespace {

/// Random rows of type T (every quant bit pattern; scale fields set to finite halves); compares every
/// 32-element chunk with the CPU dequantization.
template <GGMLType T> void checkType(int64_t k) {
  std::mt19937 rng(static_cast<uint32_t>(T) + 7);
  const GGMLTypeInfo &info = ggmlTypeInfo(T);
  const uint64_t rb = *ggmlRowBytes(T, k);
  const int64_t rows = 5;
  std::vector<uint8_t> bytes(rows * rb);
  for (uint8_t &b : bytes)
    b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (uint64_t blk = 0; info.quantized && blk < bytes.size() / info.blockBytes; ++blk) {
    std::vector<int> fields = {T == GGMLType::Q6_K ? 208 : 0};
    if (T == GGMLType::Q4_1 || T == GGMLType::Q5_1 || T == GGMLType::Q4_K || T == GGMLType::Q5_K)
      fields.push_back(2);
    for (int off : fields) {
      uint16_t h = rt::cpu::fp32ToFp16(scale(rng));
      std::memcpy(&bytes[blk * info.blockBytes + off], &h, 2);
    }
  }
  if (T == GGMLType::F16 || T == GGMLType::F32) // random bits would include NaNs
    for (int64_t i = 0; i < rows * k; ++i) {
      float v = scale(rng) * 100;
      if (T == GGMLType::F32)
        std::memcpy(&bytes[i * 4], &v, 4);
      else {
        uint16_t h = rt::cpu::fp32ToFp16(v);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
  std::vector<float> want(k);
  for (int64_t r = 0; r < rows; ++r) {
    rt::cpu::dequantizeRow(T, &bytes[r * rb], want.data(), k);
    for (int64_t c = 0; c < (k + 31) / 32; ++c) {
      float got[32];
      rt::cuda::loadChunk<T>(&bytes[r * rb], c, k, got);
      // dotChunk (the decode GEMV's fused form) against the plain dot of the same values.
      float xv[32];
      double ref = 0;
      for (int j = 0; j < 32; ++j) {
        xv[j] = c * 32 + j < k ? float(int(rng() % 2001) - 1000) / 1000.0f : 0.0f;
        ref += double(c * 32 + j < k ? got[j] : 0.0f) * xv[j];
      }
      const float dot = rt::cuda::dotChunk<T>(&bytes[r * rb], c, k, xv, rt::cuda::xSums(xv));
      if (!std::isnan(ref))
        ASSERT_NEAR(dot, ref, 1e-4 * (1 + std::fabs(ref))) << ggmlTypeName(T) << " dot of chunk " << c;
      for (int j = 0; j < 32 && c * 32 + j < k; ++j) {
        const float w = want[c * 32 + j];
        if (std::isnan(w))
          continue; // bf16 rows of random bits
        ASSERT_EQ(got[j], w) << ggmlTypeName(T) << " row " << r << " element " << c * 32 + j;
      }
    }
  }
}

TEST(CudaQuant, ChunksMatchCpuDequantizeEveryType) {
  checkType<GGMLType::F32>(100); // plain types: rows need not be whole chunks
  checkType<GGMLType::F16>(70);
  checkType<GGMLType::BF16>(512);
  checkType<GGMLType::Q4_0>(512);
  checkType<GGMLType::Q4_1>(512);
  checkType<GGMLType::Q5_0>(512);
  checkType<GGMLType::Q5_1>(512);
  checkType<GGMLType::Q8_0>(512);
  checkType<GGMLType::Q4_K>(768);
  checkType<GGMLType::Q5_K>(768);
  checkType<GGMLType::Q6_K>(768);
}

/// A no-op per-type functor (member templates cannot live in a function-local class).
struct Probe {
  template <GGMLType T> void operator()() {}
};

TEST(CudaQuant, SupportedTypesAreTheDispatchedOnes) {
  for (GGMLType t : {GGMLType::Q2_K, GGMLType::Q3_K, GGMLType::IQ4_NL, GGMLType::MXFP4}) {
    Probe p;
    EXPECT_FALSE(rt::cuda::dispatchType(t, p)) << ggmlTypeName(t);
  }
}

} // namespace
