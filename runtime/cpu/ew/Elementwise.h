//===- Elementwise.h - row kernels of the element-wise ops, per ISA -*- C++ -*-===//
//
// The inner loops of the unary/GLU/softcap/RMS-norm/softmax/binary ops (ops/ElementwiseOps.cpp splits rows
// over threads and calls these per row range), built for each ISA like the matmul kernels: a scalar table
// (the definitions: std::exp/tanh/erf, double accumulators) and AVX2 / AVX-512 tables (ElementwiseX86.inc)
// with a vector exp and tanh. Numerics of the vector tables (documented in docs/architecture.md):
//  - exp: Cody-Waite reduction by ln 2 and a degree-7 polynomial, scaled by 2^n in two halves (so
//    denormal results and overflow to +inf come out right); a few ulp.
//  - tanh: odd Taylor series to u^15 for |u| < 0.55, (1 - e)/(1 + e) with e = exp(-2|u|) above; a few ulp.
//  - silu, sigmoid, softcap from those.
//  - gelu-tanh as the reference engine's vector path (ggml_v_gelu): x / (1 + e^(-2u)),
//    u = sqrt(2/pi) x (1 + 0.044715 x^2), on every table (the scalar one with std::exp). Bound: u carries
//    <= 5 roundings (3e-7 relative, constants included), which e^(-2u) turns into 2|u| 3e-7 relative and
//    the result into |x| e/(1+e)^2 2|u| 3e-7 <= |x| 2 max(|u| e^(-2|u|)) 3e-7 = 1.1e-7 |x| absolute;
//    exp (4 ulp), 1 + e and the division add 3.6e-7 relative: |y - ref| <= 5e-7 |ref| + 1.5e-7 |x|.
//    The erf gelu stays scalar (std::erf): no model on the fixtures' list uses it on a hot path.
//  - RoPE: x c rounded, then one FMA with the partner's x s (the scalar table: two products and a sum);
//    c and s are cos/sin computed in double and rounded to float once per (position, frequency).
//  - RMS norm and softmax sums accumulate in double (vector lanes, then a pairwise sum), as the scalar path.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_EW_ELEMENTWISE_H
#define TPC_RUNTIME_CPU_EW_ELEMENTWISE_H

#include "runtime/cpu/quant/Quant.h"
#include "runtime/plan/PlanFormat.h"

#include <cstdint>

namespace tpc::rt::cpu {

/// gpt-oss's clamped SwiGLU (UnaryFn::SwigluOai), its constants fixed by the model as in OpenAI's reference
/// and ggml's SWIGLU_OAI: min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1). The vector tables use
/// their sigmoid (the silu bound above).
inline constexpr float kSwigluOaiAlpha = 1.702f, kSwigluOaiLimit = 7.0f;
float swigluOai(float g, float u);

/// The row kernels of one ISA. Outputs may alias inputs exactly (in place), never partially.
struct ElementwiseKernels {
  /// y[i] = fn(x[i]).
  void (*unary)(UnaryFn fn, const float *x, float *y, int64_t n);
  /// y[i] = fn(g[i]) * u[i]; swigluOai(g[i], u[i]) for UnaryFn::SwigluOai.
  void (*glu)(UnaryFn fn, const float *g, const float *u, float *y, int64_t n);
  /// y[i] = cap * tanh(x[i] / cap).
  void (*softcap)(const float *x, float *y, float cap, int64_t n);
  /// y[i] = x[i] * k (* w[i] when w), k = 1 / sqrt(mean(x^2) + eps) (the mean in double).
  void (*rmsNorm)(const float *x, const float *w, float *y, float eps, int64_t n);
  /// y = softmax(x) (max subtracted, the sum in double).
  void (*softmax)(const float *x, float *y, int64_t n);
  /// y[i] = a[i] op b[i] (op: Add, Mul or Div).
  void (*binary)(OpKind op, const float *a, const float *b, float *y, int64_t n);
  /// y[i] = a[i] op v (op: Add, Mul or Div); SCALE is Mul.
  void (*binaryScalar)(OpKind op, const float *a, float v, float *y, int64_t n);
  /// RoPE of one head's first nDims elements (even): y[j] = x[j] c[j] + x[p(j)] s[j], p(j) = j ^ 1 (normal)
  /// or (j + nDims/2) mod nDims (NeoX); c and s in that expanded layout (RopeTable.h builds them).
  void (*rope)(bool neox, const float *x, float *y, const float *c, const float *s, int64_t nDims);
};

/// The table built for `isa` (AVX512VNNI uses the AVX-512 one); callers check isaAvailable(isa) first.
const ElementwiseKernels &elementwiseKernels(Isa isa);
/// The table for activeIsa() (TPC_CPU_ISA respected), chosen once.
const ElementwiseKernels &elementwiseKernels();

namespace ew {
const ElementwiseKernels &scalarTable();
const ElementwiseKernels *avx2Table();   ///< nullptr when not built for x86-64
const ElementwiseKernels *avx512Table(); ///< nullptr when not built for x86-64
} // namespace ew

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_EW_ELEMENTWISE_H
