//===- FixtureTest.cpp - dequantize the fixtures' real quantized tensors ---===//
//
// tiny-llama-Q8_0 and tiny-llama-Q4_K_M were made from tiny-llama (F32) by the reference engine's
// quantizer, so dequantizing their tensors must give the F32 tensors back within each type's
// quantization error. This validates our block layouts against the real quantizer's output. Skips
// visibly when TPC_SHARED_DIR/fixtures is missing.
//===----------------------------------------------------------------------===//
#include "compiler/gguf/GGUFFile.h"
#include "runtime/cpu/Matmul.h"
#include "runtime/cpu/quant/Quant.h"
#include "test/runtime/cpu/TestUtil.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

using namespace tpc;
using namespace tpc::rt::cpu;
using namespace tpc::rt::cpu::test;

namespace {

std::string fixture(const std::string &name) {
  const char *dir = std::getenv("TPC_SHARED_DIR");
  if (!dir)
    return {};
  std::string p = std::string(dir) + "/fixtures/" + name;
  return std::filesystem::exists(p) ? p : std::string();
}

std::unique_ptr<gguf::GGUFFile> openOrFail(const std::string &path) {
  auto f = gguf::GGUFFile::open(path);
  if (!f) {
    ADD_FAILURE() << f.message();
    return nullptr;
  }
  return f.take();
}

/// Largest allowed relative RMS error per type for these weights.
const std::map<GGMLType, double> kBound = {
    {GGMLType::Q8_0, 0.01}, {GGMLType::Q6_K, 0.02}, {GGMLType::Q5_K, 0.04}, {GGMLType::Q4_K, 0.08}};

void compareFile(const std::string &quantName) {
  std::string qp = fixture(quantName), fp = fixture("tiny-llama.gguf");
  if (qp.empty() || fp.empty())
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures/" << quantName << " not found (set TPC_SHARED_DIR)";
  auto q = openOrFail(qp), f = openOrFail(fp);
  ASSERT_TRUE(q && f);
  std::map<GGMLType, int> seen;
  for (const gguf::TensorInfo &t : q->tensors()) {
    if (!ggmlTypeInfo(t.type).quantized)
      continue;
    const gguf::TensorInfo *ref = f->findTensor(t.name);
    ASSERT_NE(ref, nullptr) << t.name;
    ASSERT_EQ(ref->type, GGMLType::F32) << t.name;
    ASSERT_EQ(ref->nelements, t.nelements) << t.name;
    ASSERT_TRUE(kBound.count(t.type)) << "unexpected type " << ggmlTypeName(t.type) << " in " << t.name;
    std::vector<float> y(t.nelements);
    dequantizeRow(t.type, q->tensorData(t), y.data(), static_cast<int64_t>(t.nelements));
    const float *x = reinterpret_cast<const float *>(f->tensorData(*ref));
    double err = relRms(y.data(), x, static_cast<int64_t>(t.nelements));
    EXPECT_LT(err, kBound.at(t.type)) << t.name << " (" << ggmlTypeName(t.type) << ")";
    EXPECT_GT(err, 0.0) << t.name;
    seen[t.type]++;
  }
  EXPECT_FALSE(seen.empty()) << "no quantized tensors in " << quantName;
}

} // namespace

TEST(Fixtures, Q8_0TensorsDequantizeToTheF32Source) { compareFile("tiny-llama-Q8_0.gguf"); }

TEST(Fixtures, Q4_K_MTensorsDequantizeToTheF32Source) { compareFile("tiny-llama-Q4_K_M.gguf"); }

TEST(Fixtures, MatmulOnRealQ6KTensorMatchesF32Source) {
  std::string qp = fixture("tiny-llama-Q4_K_M.gguf"), fp = fixture("tiny-llama.gguf");
  if (qp.empty() || fp.empty())
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures not found (set TPC_SHARED_DIR)";
  auto q = openOrFail(qp), f = openOrFail(fp);
  ASSERT_TRUE(q && f);
  const gguf::TensorInfo *t = q->findTensor("output.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, GGMLType::Q6_K);
  const gguf::TensorInfo *r = f->findTensor("output.weight");
  ASSERT_NE(r, nullptr);
  int64_t k = static_cast<int64_t>(t->ne[0]), n = static_cast<int64_t>(t->ne[1]), m = 3;
  std::vector<float> x = randomFloats(m * k, 11), y(m * n), yf(m * n);
  ThreadGroup g(2);
  MatmulArgs a;
  a.w = q->tensorData(*t);
  a.wType = t->type;
  a.n = n;
  a.k = k;
  a.wRowStride = rowBytes(t->type, k);
  a.x = x.data();
  a.m = m;
  a.xRowStride = k;
  a.y = y.data();
  a.yRowStride = n;
  matmul(a, g);
  a.w = f->tensorData(*r);
  a.wType = GGMLType::F32;
  a.wRowStride = 4 * k;
  a.y = yf.data();
  matmul(a, g);
  // Weight (Q6_K) and activation (Q8_K) quantization together stay within a few percent.
  EXPECT_LT(relRms(y.data(), yf.data(), m * n), 0.03);
}
