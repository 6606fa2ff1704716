//===- ElementwiseOps.cpp - elementwise and row-wise CPU ops ----------------===//
//
// Binary ops with right-aligned broadcasting, unary functions, GLU, RMS norm, softmax, top-k, sums and the
// expert combine. Everything is f32 (top-k writes i32 indices). The element-wise and row-wise ones call the
// row kernels of ew/Elementwise.h for the active ISA; element-wise ops split elements over the thread group
// (64-byte aligned pieces, so one decode row uses every thread), row-wise ones split rows. Outputs may
// alias inputs (in place).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ops/Ops.h"

#include "runtime/cpu/ew/Elementwise.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tpc::rt::cpu {

float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400u));
      bits = sign | ((127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) // inf / nan
    return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31)
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10)
      return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1)))
      ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1)))
    ++half; // may carry into the exponent, which is the correct rounding
  return static_cast<uint16_t>(half);
}

float applyUnary(UnaryFn fn, float x) {
  switch (fn) {
  case UnaryFn::Silu:
    return x / (1.0f + std::exp(-x));
  case UnaryFn::Gelu:
    return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
  case UnaryFn::GeluTanh: // the vector tables' formula (ElementwiseX86.inc geluTanhV), with std::exp
    return x / (1.0f + std::exp(-1.59576912160573071f * x * (1.0f + 0.044715f * x * x)));
  case UnaryFn::Tanh:
    return std::tanh(x);
  case UnaryFn::Relu:
    return x > 0 ? x : 0.0f;
  case UnaryFn::Exp:
    return std::exp(x);
  case UnaryFn::Sigmoid:
    return 1.0f / (1.0f + std::exp(-x));
  case UnaryFn::Softplus: // ggml's: the identity above 20, where log(1 + e^x) rounds to x
    return x > 20.0f ? x : std::log1p(std::exp(x));
  case UnaryFn::SwigluOai: // two operands: a Glu function only (gluScalar), refused for Unary at open
    break;
  }
  return x;
}

namespace {
/// Rows per parallel chunk so tiny tensors don't pay for waking threads.
int64_t grainRows(int64_t rows, int64_t inner) { return inner * rows < 4096 ? 1 : rows; }

template <typename F> void forRows(int64_t rows, int64_t inner, ThreadGroup &tg, F &&f) {
  if (grainRows(rows, inner) == 1) {
    f(int64_t(0), rows);
    return;
  }
  tg.parallelFor(rows, [&](int64_t b, int64_t e, int) { f(b, e); });
}

/// Below this many elements an element-wise op runs on the caller: waking the group costs more.
constexpr int64_t kParallelElems = 8192;
/// Element chunks are multiples of 16 floats (64 bytes), so threads never write one cache line.
constexpr int64_t kElemGrain = 16;

/// Calls f(r, c0, c1) for the pieces [c0, c1) of rows r that together cover rows x inner elements, split
/// over the group by elements, not rows, so one decode row (a GLU of the FFN width) uses every thread.
template <typename F> void forRowPieces(int64_t rows, int64_t inner, ThreadGroup &tg, F &&f) {
  auto run = [&](int64_t b, int64_t e) {
    for (int64_t r = b / inner; r * inner < e; ++r) {
      const int64_t c0 = std::max(b, r * inner) - r * inner, c1 = std::min(e, (r + 1) * inner) - r * inner;
      if (c1 > c0)
        f(r, c0, c1);
    }
  };
  const int64_t total = rows * inner;
  if (total < kParallelElems || tg.size() == 1 || inner == 0) {
    run(0, total);
    return;
  }
  tg.parallelFor(total, kElemGrain, [&](int64_t b, int64_t e, int) { run(b, e); });
}
} // namespace

void opBinary(OpKind op, const TensorRef &a, const TensorRef &b, const TensorRef &y, ThreadGroup &tg) {
  const int ra = static_cast<int>(a.shape.size()), rb = static_cast<int>(b.shape.size());
  // b's stride for each of a's dims (0 where b broadcasts).
  std::vector<int64_t> bStride(ra, 0);
  int64_t s = 1;
  for (int j = rb - 1; j >= 0; --j) {
    int i = j + (ra - rb);
    if (b.shape[j] != 1)
      bStride[i] = s;
    s *= b.shape[j];
  }
  const int64_t inner = a.inner(), rows = a.rows(), bInner = ra ? bStride[ra - 1] : 0;
  const float *pa = a.f(), *pb = b.f();
  float *py = y.f();
  const ElementwiseKernels &k = elementwiseKernels();
  forRowPieces(rows, inner, tg, [&](int64_t r, int64_t c0, int64_t c1) {
    int64_t bo = 0, rem = r;
    for (int i = ra - 2; i >= 0; --i) {
      bo += (rem % a.shape[i]) * bStride[i];
      rem /= a.shape[i];
    }
    const float *xa = pa + r * inner + c0, *xb = pb + bo;
    float *o = py + r * inner + c0;
    if (bInner == 1)
      k.binary(op, xa, xb + c0, o, c1 - c0);
    else
      k.binaryScalar(op, xa, xb[0], o, c1 - c0);
  });
}

void opScale(const TensorRef &x, const TensorRef &y, float v, ThreadGroup &tg) {
  const float *px = x.f();
  float *py = y.f();
  const ElementwiseKernels &k = elementwiseKernels();
  forRowPieces(1, x.numel(), tg,
               [&](int64_t, int64_t b, int64_t e) { k.binaryScalar(OpKind::Mul, px + b, v, py + b, e - b); });
}

void opUnary(UnaryFn fn, const TensorRef &x, const TensorRef &y, ThreadGroup &tg) {
  const float *px = x.f();
  float *py = y.f();
  const ElementwiseKernels &k = elementwiseKernels();
  forRowPieces(1, x.numel(), tg, [&](int64_t, int64_t b, int64_t e) { k.unary(fn, px + b, py + b, e - b); });
}

void opSoftcap(const TensorRef &x, const TensorRef &y, float cap, ThreadGroup &tg) {
  const float *px = x.f();
  float *py = y.f();
  const ElementwiseKernels &k = elementwiseKernels();
  forRowPieces(1, x.numel(), tg, [&](int64_t, int64_t b, int64_t e) { k.softcap(px + b, py + b, cap, e - b); });
}

void opGlu(UnaryFn fn, const TensorRef &gate, const TensorRef *up, const TensorRef &y, ThreadGroup &tg) {
  const int64_t f = y.inner(), rows = y.rows();
  const int64_t gStride = up ? f : 2 * f;
  const float *pg = gate.f(), *pu = up ? up->f() : gate.f() + f;
  float *py = y.f();
  const ElementwiseKernels &k = elementwiseKernels();
  forRowPieces(rows, f, tg, [&](int64_t r, int64_t c0, int64_t c1) {
    k.glu(fn, pg + r * gStride + c0, pu + r * gStride + c0, py + r * f + c0, c1 - c0);
  });
}

void opRmsNorm(const TensorRef &x, const TensorRef *w, const TensorRef &y, float eps, ThreadGroup &tg) {
  const int64_t n = x.inner();
  const float *px = x.f(), *pw = w ? w->f() : nullptr;
  float *py = y.f();
  const ElementwiseKernels &k = elementwiseKernels();
  forRows(x.rows(), n, tg, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      k.rmsNorm(px + r * n, pw, py + r * n, eps, n);
  });
}

void opL2Norm(const TensorRef &x, const TensorRef &y, float eps, ThreadGroup &tg) {
  const int64_t n = x.inner();
  const float *px = x.f();
  float *py = y.f();
  forRows(x.rows(), n, tg, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float *xr = px + r * n;
      double ss = 0; // in double, as the RMS norm's sum
      for (int64_t i = 0; i < n; ++i)
        ss += double(xr[i]) * xr[i];
      const float k = 1.0f / std::max(static_cast<float>(std::sqrt(ss)), eps);
      for (int64_t i = 0; i < n; ++i)
        py[r * n + i] = xr[i] * k;
    }
  });
}

void opGatedRmsNorm(const TensorRef &x, const TensorRef &w, const TensorRef &z, const TensorRef &y, float eps,
                    ThreadGroup &tg) {
  const int64_t n = x.inner();
  const float *px = x.f(), *pw = w.f(), *pz = z.f();
  float *py = y.f();
  const ElementwiseKernels &k = elementwiseKernels();
  forRows(x.rows(), n, tg, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      k.rmsNorm(px + r * n, pw, py + r * n, eps, n);
      k.glu(UnaryFn::Silu, pz + r * n, py + r * n, py + r * n, n); // silu(z) * norm, in place
    }
  });
}

void opSoftmax(const TensorRef &x, const TensorRef &y, ThreadGroup &tg) {
  const int64_t n = x.inner();
  const float *px = x.f();
  float *py = y.f();
  const ElementwiseKernels &k = elementwiseKernels();
  forRows(x.rows(), n, tg, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      k.softmax(px + r * n, py + r * n, n);
  });
}

void opTopK(const TensorRef &x, const TensorRef &y, int64_t k, ThreadGroup &tg) {
  const int64_t n = x.inner();
  const float *px = x.f();
  int32_t *py = y.i();
  forRows(x.rows(), n, tg, [&](int64_t r0, int64_t r1) {
    std::vector<int32_t> idx(n);
    for (int64_t r = r0; r < r1; ++r) {
      const float *xr = px + r * n;
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                        [&](int32_t a, int32_t b) { return xr[a] > xr[b] || (xr[a] == xr[b] && a < b); });
      std::copy(idx.begin(), idx.begin() + k, py + r * k);
    }
  });
}

void opTakeAlong(const TensorRef &x, const TensorRef &idx, const TensorRef &y, ThreadGroup &) {
  const int64_t n = x.inner(), k = idx.inner(), rows = idx.rows();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) {
      int32_t c = idx.i()[r * k + j];
      y.f()[r * k + j] = (c >= 0 && c < n) ? x.f()[r * n + c] : 0.0f;
    }
}

void opSum(const TensorRef &x, const TensorRef &y, int64_t axis, ThreadGroup &) {
  int64_t outer, dim, inner;
  splitAxis(x.shape, axis, outer, dim, inner);
  std::vector<float> acc(inner);
  for (int64_t o = 0; o < outer; ++o) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t d = 0; d < dim; ++d) {
      const float *src = x.f() + (o * dim + d) * inner;
      for (int64_t i = 0; i < inner; ++i)
        acc[i] += src[i];
    }
    std::copy(acc.begin(), acc.end(), y.f() + o * inner);
  }
}

void opExpertCombine(const TensorRef &x, const std::vector<TensorRef> &muls, const TensorRef &y,
                     ThreadGroup &tg) {
  const int64_t t = x.shape[0], k = x.shape[1], n = x.shape[2];
  forRows(t, k * n, tg, [&](int64_t r0, int64_t r1) {
    std::vector<float> m(static_cast<size_t>(k));
    std::vector<const float *> rows(static_cast<size_t>(k));
    std::vector<float> acc(static_cast<size_t>(n)); // y may be planned over x: every slot is read first
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t j = 0; j < k; ++j) {
        float f = 1;
        for (const TensorRef &mt : muls)
          f *= mt.f()[r * k + j];
        m[static_cast<size_t>(j)] = f;
        rows[static_cast<size_t>(j)] = x.f() + (r * k + j) * n;
      }
      combineRow(rows.data(), m.data(), k, n, acc.data());
      std::copy(acc.begin(), acc.end(), y.f() + r * n);
    }
  });
}

void combineRow(const float *const *rows, const float *m, int64_t k, int64_t n, float *y) {
  std::fill(y, y + n, 0.0f);
  for (int64_t j = 0; j < k; ++j) {
    const float f = m[j], *xr = rows[j];
    if (xr)
      for (int64_t c = 0; c < n; ++c)
        y[c] += f * xr[c];
    else
      for (int64_t c = 0; c < n; ++c)
        y[c] += f * 0.0f;
  }
}

void opAddId(const TensorRef &x, const TensorRef &b, const TensorRef &ids, const TensorRef &y, int64_t firstExpert,
             ThreadGroup &tg) {
  const int64_t t = x.shape[0], k = x.shape[1], n = x.shape[2], experts = b.shape[0];
  const float *px = x.f(), *pb = b.f();
  const int32_t *pid = ids.i();
  float *py = y.f();
  const ElementwiseKernels &kern = elementwiseKernels();
  forRows(t, k * n, tg, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t row = r * k + j, e = int64_t(pid[row]) - firstExpert;
        const float *xr = px + row * n;
        float *yr = py + row * n;
        if (e >= 0 && e < experts)
          kern.binary(OpKind::Add, xr, pb + e * n, yr, n);
        else if (yr != xr) // another device's expert: the row stays x's (zeros when routed)
          std::copy(xr, xr + n, yr);
      }
  });
}

} // namespace tpc::rt::cpu
