//===- ElementwiseTest.cpp - element-wise row kernels at every ISA level ---===//
//
// Every table this CPU can run (scalar, AVX2, AVX-512; the others skip visibly) against double-precision
// references on random rows of lengths around the vector widths, with the tolerances documented in
// docs/architecture.md ("Element-wise kernels"), derived from float rounding, not tuned:
//  - exp, sigmoid, silu, tanh, softcap: |y - ref| <= 1e-6 |ref| (a few ulp: the polynomial's 5e-9, the
//    reduction, 2-4 roundings), plus 1e-37 absolute where the result is denormal.
//  - gelu-tanh (x / (1 + e^(-2u)) on every table): 5e-7 |ref| + 1.5e-7 |x| (Elementwise.h derives it:
//    u's roundings, amplified by 2|u| through the exp, bounded in absolute terms; measured: within 1/4).
//  - gelu (erf, scalar on every path): 1e-6 |ref| + 3e-7 |x| (1 + erf cancels for negative x: 4 ulp of 1
//    times |x| / 2).
//  - GLU: the unary's bound times |up|, plus one rounding.
//  - RMS norm: 1e-6 |ref| (double sum; the scale's 3 roundings and 2 products).
//  - softmax: (2e-6 + 6e-8 |x - max|) |ref| + 1e-37 (x - max rounded to float, exp, the sum, one product).
//  - add/mul/div: exactly the float operation.
// Special inputs: +-inf, NaN, +-200 (exp overflow to inf and underflow to 0), exact zeros. The op entry
// points (ops/ElementwiseOps.cpp) split elements over threads; their results must not depend on the
// thread count.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ew/Elementwise.h"
#include "runtime/cpu/ops/Ops.h"
#include "test/runtime/cpu/TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::cpu;
using namespace tpc::rt::cpu::test;

namespace {

const std::vector<int64_t> kLengths = {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000, 4099};

double unaryRef(UnaryFn fn, double x) {
  switch (fn) {
  case UnaryFn::Silu:
    return x / (1.0 + std::exp(-x));
  case UnaryFn::Gelu:
    return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  case UnaryFn::GeluTanh: // 0.5 x (1 + tanh u) without the cancellation of 1 + tanh u for negative x
    return x / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  case UnaryFn::Tanh:
    return std::tanh(x);
  case UnaryFn::Relu:
    return x > 0 ? x : 0.0;
  case UnaryFn::Exp:
    return std::exp(x);
  case UnaryFn::Sigmoid:
    return 1.0 / (1.0 + std::exp(-x));
  }
  return 0;
}

/// The documented bound for fn at x with reference ref.
double unaryTol(UnaryFn fn, double x, double ref) {
  if (fn == UnaryFn::Relu)
    return 0;
  if (fn == UnaryFn::GeluTanh) // vector on every ISA but scalar: Elementwise.h derives this bound
    return 5e-7 * std::fabs(ref) + 1.5e-7 * std::fabs(x) + 1e-37;
  double tol = 1e-6 * std::fabs(ref) + 1e-37;
  if (fn == UnaryFn::Gelu)
    tol += 3e-7 * std::fabs(x);
  return tol;
}

/// Random values scaled so every branch is hit (tanh's series and exp form, exp's range ends).
std::vector<float> inputs(int64_t n, uint32_t seed, float sigma) {
  std::vector<float> x = randomFloats(n, seed, sigma);
  if (n > 40) { // some exact zeros and range ends
    x[0] = 0.0f;
    x[1] = -0.0f;
    x[2] = 88.0f;
    x[3] = -87.5f;
    x[4] = -100.0f;
    x[5] = 1e-6f;
  }
  return x;
}

class ElementwiseIsa : public ::testing::TestWithParam<Isa> {
protected:
  const ElementwiseKernels *table() const {
    return isaAvailable(GetParam()) ? &elementwiseKernels(GetParam()) : nullptr;
  }
};

#define SKIP_UNLESS_ISA()                                                                                     \
  const ElementwiseKernels *k = table();                                                                    \
  if (!k)                                                                                                   \
    GTEST_SKIP() << "this CPU cannot run the " << isaName(GetParam()) << " element-wise kernels";

TEST_P(ElementwiseIsa, UnaryAndGluMatchDoubleReference) {
  SKIP_UNLESS_ISA();
  for (UnaryFn fn : {UnaryFn::Silu, UnaryFn::Gelu, UnaryFn::GeluTanh, UnaryFn::Tanh, UnaryFn::Relu, UnaryFn::Exp,
                     UnaryFn::Sigmoid})
    for (int64_t n : kLengths)
      for (float sigma : {0.3f, 4.0f, 30.0f}) {
        std::vector<float> x = inputs(n, 7 + uint32_t(n), sigma), u = randomFloats(n, 99, 2.0f), y(n), g(n);
        k->unary(fn, x.data(), y.data(), n);
        k->glu(fn, x.data(), u.data(), g.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const double ref = unaryRef(fn, x[i]);
          if (std::fabs(ref) > std::numeric_limits<float>::max()) { // overflows float: inf
            EXPECT_EQ(y[i], float(ref)) << "fn " << int(fn) << " x " << x[i];
            continue;
          }
          ASSERT_NEAR(y[i], ref, unaryTol(fn, x[i], ref))
              << "fn " << int(fn) << " n " << n << " i " << i << " x " << x[i];
          if (std::fabs(ref * u[i]) > std::numeric_limits<float>::max()) {
            EXPECT_TRUE(std::isinf(g[i])) << "glu fn " << int(fn) << " x " << x[i];
            continue;
          }
          ASSERT_NEAR(g[i], ref * u[i], unaryTol(fn, x[i], ref) * std::fabs(u[i]) + 1e-7 * std::fabs(ref * u[i]))
              << "glu fn " << int(fn) << " n " << n << " i " << i << " x " << x[i];
        }
      }
}

/// gpt-oss's clamped SwiGLU against its double definition: the gate clamped above at 7 (a large gate is
/// 7 sigmoid(11.9) ~ 7, not growing), the linear branch clamped to [-7, 7] and shifted by 1; the bound is
/// the sigmoid's (1e-6 relative) through the products. Values well past both clamps are included.
TEST_P(ElementwiseIsa, SwigluOaiMatchesDoubleReference) {
  SKIP_UNLESS_ISA();
  for (int64_t n : kLengths) {
    std::vector<float> g = randomFloats(n, 3 + uint32_t(n), 6.0f), u = randomFloats(n, 5 + uint32_t(n), 6.0f), y(n);
    if (n > 4) {
      g[0] = 50.0f, u[0] = -50.0f; // both clamps
      g[1] = -50.0f, u[1] = 50.0f; // the gate's lower side is not clamped: sigmoid(-85) ~ 0
      g[2] = 7.0f, u[2] = -1.0f;   // the +1 cancels the linear branch
    }
    k->glu(UnaryFn::SwigluOai, g.data(), u.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double x = std::min(double(g[i]), 7.0), l = std::clamp(double(u[i]), -7.0, 7.0) + 1.0;
      const double ref = x / (1.0 + std::exp(-1.702 * x)) * l;
      ASSERT_NEAR(y[i], ref, 2e-6 * std::fabs(ref) + 1e-6 * std::fabs(x * l) + 1e-30)
          << isaName(GetParam()) << " n " << n << " i " << i << " g " << g[i] << " u " << u[i];
    }
    if (n > 4) {
      EXPECT_NEAR(y[0], 7.0 / (1.0 + std::exp(-1.702 * 7.0)) * -6.0, 1e-5);
      EXPECT_EQ(y[2], 0.0f);
    }
  }
}

TEST_P(ElementwiseIsa, SpecialValues) {
  SKIP_UNLESS_ISA();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {inf, -inf, nan, 200.0f, -200.0f, 89.0f, -104.5f, 0.0f}, y(x.size());
  k->unary(UnaryFn::Exp, x.data(), y.data(), int64_t(x.size()));
  EXPECT_EQ(y[0], inf);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], inf);
  EXPECT_EQ(y[4], 0.0f);
  EXPECT_EQ(y[5], inf);
  EXPECT_EQ(y[7], 1.0f);
  k->unary(UnaryFn::Tanh, x.data(), y.data(), int64_t(x.size()));
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -1.0f);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[7], 0.0f);
  k->unary(UnaryFn::GeluTanh, x.data(), y.data(), int64_t(x.size()));
  EXPECT_EQ(y[0], inf);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], 200.0f); // e^(-2u) underflows to 0
  EXPECT_EQ(y[4], 0.0f);   // e^(-2u) overflows to inf: -0, not NaN
  EXPECT_EQ(y[7], 0.0f);
  k->unary(UnaryFn::Silu, x.data(), y.data(), int64_t(x.size()));
  EXPECT_EQ(y[3], 200.0f);
  EXPECT_NEAR(y[4], 0.0f, 1e-30);
  EXPECT_TRUE(std::isnan(y[2]));
}

TEST_P(ElementwiseIsa, SoftcapRmsNormSoftmaxAndBinaryMatchDoubleReference) {
  SKIP_UNLESS_ISA();
  for (int64_t n : kLengths) {
    std::vector<float> x = randomFloats(n, 3 + uint32_t(n), 8.0f), w = randomFloats(n, 5, 1.0f), y(n);
    for (float cap : {30.0f, 50.0f}) {
      k->softcap(x.data(), y.data(), cap, n);
      for (int64_t i = 0; i < n; ++i) {
        const double ref = cap * std::tanh(double(x[i]) / cap);
        ASSERT_NEAR(y[i], ref, 1e-6 * std::fabs(ref) + 1e-37) << "softcap n " << n << " x " << x[i];
      }
    }
    for (bool withW : {false, true}) {
      k->rmsNorm(x.data(), withW ? w.data() : nullptr, y.data(), 1e-6f, n);
      double ss = 0;
      for (float v : x)
        ss += double(v) * v;
      const double scale = 1.0 / std::sqrt(ss / n + 1e-6);
      for (int64_t i = 0; i < n; ++i) {
        const double ref = x[i] * scale * (withW ? w[i] : 1.0);
        ASSERT_NEAR(y[i], ref, 1e-6 * std::fabs(ref)) << "rms norm n " << n << " i " << i;
      }
    }
    std::vector<float> s = x;
    if (n > 4)
      s[1] = s[n - 2] = -std::numeric_limits<float>::infinity(); // masked entries weigh exactly 0
    k->softmax(s.data(), y.data(), n);
    double m = -INFINITY, sum = 0;
    for (float v : s)
      m = std::max(m, double(v));
    for (float v : s)
      sum += std::exp(v - m);
    for (int64_t i = 0; i < n; ++i) {
      // s[i] - m is rounded to float first (as the kernels must): 0.5 ulp of |s[i] - m| in the exponent.
      const double ref = std::exp(s[i] - m) / sum;
      if (ref == 0) {
        ASSERT_EQ(y[i], 0.0f) << "softmax n " << n << " masked i " << i;
        continue;
      }
      ASSERT_NEAR(y[i], ref, (2e-6 + 6e-8 * std::fabs(s[i] - m)) * ref + 1e-37) << "softmax n " << n << " i " << i;
    }
    for (OpKind op : {OpKind::Add, OpKind::Mul, OpKind::Div}) {
      k->binary(op, x.data(), w.data(), y.data(), n);
      std::vector<float> ys(n);
      k->binaryScalar(op, x.data(), 1.7f, ys.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const float want = op == OpKind::Add ? x[i] + w[i] : op == OpKind::Mul ? x[i] * w[i] : x[i] / w[i];
        const float wantS = op == OpKind::Add ? x[i] + 1.7f : op == OpKind::Mul ? x[i] * 1.7f : x[i] / 1.7f;
        ASSERT_EQ(y[i], want) << "binary " << int(op) << " n " << n << " i " << i;
        ASSERT_EQ(ys[i], wantS) << "binary scalar " << int(op) << " n " << n << " i " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, ElementwiseIsa, ::testing::Values(Isa::Scalar, Isa::AVX2, Isa::AVX512),
                         [](const ::testing::TestParamInfo<Isa> &i) { return std::string(isaName(i.param)); });

// The op entries split elements over threads in 64-byte pieces: the same bits at 1, 2 and 3 threads, for
// one long row (a decode GLU) and for many rows with an odd width, and GLU on [gate | up] halves.
TEST(ElementwiseOps, ResultsDoNotDependOnTheThreadCount) {
  for (auto [rows, inner] : {std::pair<int64_t, int64_t>{1, 20001}, {37, 333}}) {
    std::vector<float> g = randomFloats(rows * inner * 2, 11, 3.0f), want, got(rows * inner);
    for (int threads : {1, 2, 3}) {
      ThreadGroup tg(threads);
      TensorRef gate{g.data(), DType::F32, false, GGMLType::F32, {rows, 2 * inner}};
      TensorRef y{got.data(), DType::F32, false, GGMLType::F32, {rows, inner}};
      opGlu(UnaryFn::Silu, gate, nullptr, y, tg);
      TensorRef x{g.data(), DType::F32, false, GGMLType::F32, {rows, inner}};
      std::vector<float> u(rows * inner);
      TensorRef yu{u.data(), DType::F32, false, GGMLType::F32, {rows, inner}};
      opUnary(UnaryFn::GeluTanh, x, yu, tg);
      got.insert(got.end(), u.begin(), u.end());
      if (threads == 1)
        want = got;
      else
        EXPECT_EQ(got, want) << "rows " << rows << " threads " << threads;
      // Spot-check against the kernel on the whole row: GLU row r is silu(gate half) * up half.
      for (int64_t r = 0; r < rows; r += 7)
        for (int64_t c = 0; c < inner; c += 97) {
          const float sg = g[r * 2 * inner + c];
          const double ref = sg / (1.0 + std::exp(-double(sg))) * g[r * 2 * inner + inner + c];
          ASSERT_NEAR(got[r * inner + c], ref, 2e-6 * std::fabs(ref) + 1e-30);
        }
      got.resize(rows * inner);
    }
  }
}

} // namespace
