//===- Elementwise.cpp - the scalar row kernels and the ISA dispatch -------===//
//
// The scalar table is the definition the vector tables are tested against (with a double reference):
// the same formulas the executor always used, one element at a time.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ew/Elementwise.h"

#include <algorithm>
#include <cmath>

namespace tpc::rt::cpu {

float applyUnary(UnaryFn fn, float x); // ops/ElementwiseOps.cpp: the scalar definitions

float swigluOai(float g, float u) {
  const float x = std::min(g, kSwigluOaiLimit), l = std::max(std::min(u, kSwigluOaiLimit), -kSwigluOaiLimit);
  return x / (1.0f + std::exp(-kSwigluOaiAlpha * x)) * (l + 1.0f);
}

namespace ew {
namespace {

void unaryScalar(UnaryFn fn, const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = applyUnary(fn, x[i]);
}

void gluScalar(UnaryFn fn, const float *g, const float *u, float *y, int64_t n) {
  if (fn == UnaryFn::SwigluOai) {
    for (int64_t i = 0; i < n; ++i)
      y[i] = swigluOai(g[i], u[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    y[i] = applyUnary(fn, g[i]) * u[i];
}

void softcapScalar(const float *x, float *y, float cap, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = cap * std::tanh(x[i] / cap);
}

void rmsNormScalar(const float *x, const float *w, float *y, float eps, int64_t n) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i)
    ss += double(x[i]) * x[i];
  const float k = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
  if (w)
    for (int64_t i = 0; i < n; ++i)
      y[i] = x[i] * k * w[i];
  else
    for (int64_t i = 0; i < n; ++i)
      y[i] = x[i] * k;
}

void softmaxScalar(const float *x, float *y, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i)
    m = std::max(m, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - m);
    sum += y[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i)
    y[i] *= inv;
}

void binaryScalar(OpKind op, const float *a, const float *b, float *y, int64_t n) {
  if (op == OpKind::Add)
    for (int64_t i = 0; i < n; ++i)
      y[i] = a[i] + b[i];
  else if (op == OpKind::Mul)
    for (int64_t i = 0; i < n; ++i)
      y[i] = a[i] * b[i];
  else
    for (int64_t i = 0; i < n; ++i)
      y[i] = a[i] / b[i];
}

void binaryScalarScalar(OpKind op, const float *a, float v, float *y, int64_t n) {
  if (op == OpKind::Add)
    for (int64_t i = 0; i < n; ++i)
      y[i] = a[i] + v;
  else if (op == OpKind::Mul)
    for (int64_t i = 0; i < n; ++i)
      y[i] = a[i] * v;
  else
    for (int64_t i = 0; i < n; ++i)
      y[i] = a[i] / v;
}

// The old definition's a c - b s (s holds -sin where the old loop subtracted: the same float results).
void ropeScalar(bool neox, const float *x, float *y, const float *c, const float *s, int64_t nDims) {
  const int64_t half = nDims / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const float a = x[i0], b = x[i1];
    y[i0] = a * c[i0] + b * s[i0];
    y[i1] = b * c[i1] + a * s[i1];
  }
}

} // namespace

const ElementwiseKernels &scalarTable() {
  static const ElementwiseKernels t{unaryScalar,   gluScalar,    softcapScalar,      rmsNormScalar,
                                    softmaxScalar, binaryScalar, binaryScalarScalar, ropeScalar};
  return t;
}

} // namespace ew

const ElementwiseKernels &elementwiseKernels(Isa isa) {
  const ElementwiseKernels *t = nullptr;
  if (isa == Isa::AVX512 || isa == Isa::AVX512VNNI)
    t = ew::avx512Table();
  else if (isa == Isa::AVX2)
    t = ew::avx2Table();
  return t ? *t : ew::scalarTable();
}

const ElementwiseKernels &elementwiseKernels() {
  static const ElementwiseKernels &t = elementwiseKernels(fixActiveIsa());
  return t;
}

} // namespace tpc::rt::cpu
