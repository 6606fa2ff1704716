//===- ShapeOps.cpp - copies, permutes, narrows and concatenations ----------===//
//
// Data movement on any dtype (f32/i32 move 4 bytes per element, f16 2). A copy between an f32 and an f16
// tensor converts. Tensors are dense row-major, so every op here is a set of contiguous runs.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ops/Ops.h"

namespace tpc::rt::cpu {

void opCopy(const TensorRef &x, const TensorRef &y) {
  const int64_t n = x.numel();
  if (x.dtype == y.dtype) {
    if (x.data != y.data)
      std::memmove(y.data, x.data, n * dtypeBytes(x.dtype));
  } else if (x.dtype == DType::F32 && y.dtype == DType::F16) {
    for (int64_t i = 0; i < n; ++i)
      static_cast<uint16_t *>(y.data)[i] = floatToHalf(x.f()[i]);
  } else if (x.dtype == DType::F16 && y.dtype == DType::F32) {
    for (int64_t i = 0; i < n; ++i)
      y.f()[i] = halfToFloat(static_cast<const uint16_t *>(x.data)[i]);
  }
}

void opPermute(const TensorRef &x, const TensorRef &y, const std::vector<int64_t> &perm, ThreadGroup &tg) {
  const size_t r = x.shape.size();
  const size_t es = dtypeBytes(x.dtype);
  std::vector<int64_t> xStride(r, 1);
  for (size_t i = r; i-- > 1;)
    xStride[i - 1] = xStride[i] * x.shape[i];
  // Source stride for each output dim.
  std::vector<int64_t> src(r);
  for (size_t i = 0; i < r; ++i)
    src[i] = xStride[perm[i]];
  const int64_t inner = y.inner(), rows = y.rows();
  const char *px = static_cast<const char *>(x.data);
  char *py = static_cast<char *>(y.data);
  tg.parallelFor(rows, [&](int64_t r0, int64_t r1, int) {
    for (int64_t row = r0; row < r1; ++row) {
      int64_t off = 0, rem = row;
      for (size_t i = r - 1; i-- > 0;) {
        off += (rem % y.shape[i]) * src[i];
        rem /= y.shape[i];
      }
      const int64_t s = src[r - 1];
      for (int64_t c = 0; c < inner; ++c)
        std::memcpy(py + (row * inner + c) * es, px + (off + c * s) * es, es);
    }
  });
}

void opNarrow(const TensorRef &x, const TensorRef &y, int64_t axis, int64_t offset) {
  int64_t outer, dim, inner;
  splitAxis(x.shape, axis, outer, dim, inner);
  const int64_t size = y.shape[axis];
  const size_t es = dtypeBytes(x.dtype);
  for (int64_t o = 0; o < outer; ++o)
    std::memmove(static_cast<char *>(y.data) + o * size * inner * es,
                 static_cast<const char *>(x.data) + (o * dim + offset) * inner * es, size * inner * es);
}

void opConcat(const std::vector<TensorRef> &xs, const TensorRef &y, int64_t axis) {
  int64_t outer, dim, inner;
  splitAxis(y.shape, axis, outer, dim, inner);
  const size_t es = dtypeBytes(y.dtype);
  int64_t at = 0;
  for (const TensorRef &x : xs) {
    const int64_t d = x.shape[axis];
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(static_cast<char *>(y.data) + (o * dim + at) * inner * es,
                  static_cast<const char *>(x.data) + o * d * inner * es, d * inner * es);
    at += d;
  }
}

} // namespace tpc::rt::cpu
