//===- AttentionScalar.cpp - attention item kernel, portable C++ ------------===//
//
// The reference path of AttendItem.inc (TPC_CPU_ISA=scalar, or no AVX2): plain loops and std::exp.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/attention/AttentionKernels.h"

#include "runtime/ggml/Blocks.h"

#include <cstring>

namespace tpc::rt::cpu::attn {
namespace scalar {

struct Ops {
  static float dot(const float *a, const float *b, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i)
      s += a[i] * b[i];
    return s;
  }
  static void dot4(const float *q, const float *k, int64_t ks, int64_t n, float *out) {
    for (int j = 0; j < 4; ++j)
      out[j] = dot(q, k + j * ks, n);
  }
  static float expShiftSum(float *x, int64_t n, float shift) {
    float sum = 0;
    for (int64_t i = 0; i < n; ++i)
      sum += (x[i] = std::exp(x[i] - shift));
    return sum;
  }
  static void axpy(float w, const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      y[i] += w * x[i];
  }
  static void axpy4(const float *w, const float *x, int64_t xs, float *y, int64_t n) {
    for (int j = 0; j < 4; ++j)
      axpy(w[j], x + j * xs, y, n);
  }
  static void scale(float *y, float s, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      y[i] *= s;
  }
  static void toF32(const uint16_t *h, float *f, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      f[i] = fp16ToFp32(h[i]);
  }
  static void q8ToF32(const BlockQ8_0 *b, float *f, int64_t n) {
    for (int64_t i = 0; i < n / kQK; ++i, f += kQK) {
      const float d = fp16ToFp32(b[i].d);
      for (int j = 0; j < kQK; ++j)
        f[j] = d * b[i].qs[j];
    }
  }
  static void q4ToF32(const BlockQ4_0 *b, float *f, int64_t n) {
    for (int64_t i = 0; i < n / kQK; ++i, f += kQK) {
      const float d = fp16ToFp32(b[i].d);
      for (int j = 0; j < kQK / 2; ++j) {
        f[j] = d * ((b[i].qs[j] & 0xf) - 8);
        f[j + kQK / 2] = d * ((b[i].qs[j] >> 4) - 8);
      }
    }
  }
};

#include "runtime/cpu/attention/AttendItem.inc"

} // namespace scalar

Kernels scalarKernels() { return scalar::makeKernels(); }

} // namespace tpc::rt::cpu::attn
