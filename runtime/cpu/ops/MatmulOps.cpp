//===- MatmulOps.cpp - matmul, expert matmul and row lookups ----------------===//
//
// Thin adapters from bound tensors to runtime/cpu's kernels: cpu::matmul (y = x·wᵀ for every weight type,
// activations converted once to the weight type's vec-dot type, as the reference engine does) and
// cpu::matmulId for MUL_MAT_ID, which groups the (token, slot) pairs by expert in token order (so results
// do not depend on threading) and runs one product per used expert; up to 4 tokens (decode) all used
// experts run as one job (cpu::matmulIdGrouped, same results). An f32 tensor can stand in for a
// weight (rows of K floats).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ops/Ops.h"

#include "runtime/cpu/Matmul.h"
#include "runtime/cpu/quant/Quant.h"

#include <algorithm>

namespace tpc::rt::cpu {

namespace {
/// Bytes of one weight row.
uint64_t rowBytesOf(const TensorRef &w) {
  if (!w.isWeight)
    return w.inner() * 4;
  return *ggmlRowBytes(w.wtype, static_cast<uint64_t>(w.inner()));
}
GGMLType typeOf(const TensorRef &w) { return w.isWeight ? w.wtype : GGMLType::F32; }
} // namespace

void loadRow(const TensorRef &w, int64_t r, float *dst) {
  const int64_t n = w.inner();
  const char *src = static_cast<const char *>(w.data) + r * rowBytesOf(w);
  if (typeOf(w) == GGMLType::F32)
    std::memcpy(dst, src, n * 4);
  else
    dequantizeRow(w.wtype, src, dst, n);
}

void opGetRows(const TensorRef &table, const TensorRef &ids, const TensorRef &y, int64_t firstId,
               ThreadGroup &tg) {
  const int64_t n = table.inner(), rows = table.rows(), count = ids.numel();
  if (n == 0) // a [R,0] table (an empty share of a split row): nothing to copy
    return;
  tg.parallelFor(count, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t id = int64_t(ids.i()[i]) - firstId;
      if (id >= 0 && id < rows)
        loadRow(table, id, y.f() + i * n);
      else
        std::fill(y.f() + i * n, y.f() + (i + 1) * n, 0.0f); // ids computed in-plan are always in range
    }
  });
}

void opMatmul(const TensorRef &x, const TensorRef &w, const TensorRef &y, ThreadGroup &tg) {
  cpu::MatmulArgs a;
  a.w = w.data;
  a.wType = typeOf(w);
  a.n = w.rows();
  a.k = x.inner();
  a.wRowStride = rowBytesOf(w);
  a.x = x.f();
  a.m = x.rows();
  a.xRowStride = static_cast<size_t>(a.k);
  a.y = y.f();
  a.yRowStride = static_cast<size_t>(a.n);
  cpu::matmul(a, tg);
}

void opMulMatId(const TensorRef &x, const TensorRef &w, const TensorRef &ids, const TensorRef &y,
                ThreadGroup &tg) {
  const int64_t k = x.inner(), e = w.shape[0], n = w.shape[1];
  const int64_t t = ids.shape[0], slots = ids.shape[1];
  const bool perSlot = x.shape.size() == 3; // x[T,k,K] rather than x[T,K] shared by every slot
  std::vector<std::vector<int32_t>> xRows(e), yRows(e);
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t j = 0; j < slots; ++j) {
      int32_t ex = ids.i()[ti * slots + j];
      if (ex < 0 || ex >= e) { // only a broken router gives this; keep the output defined
        std::fill(y.f() + (ti * slots + j) * n, y.f() + (ti * slots + j + 1) * n, 0.0f);
        continue;
      }
      xRows[ex].push_back(static_cast<int32_t>(perSlot ? ti * slots + j : ti));
      yRows[ex].push_back(static_cast<int32_t>(ti * slots + j));
    }
  cpu::ExpertMatmul base;
  base.w = w.data;
  base.wType = typeOf(w);
  base.n = n;
  base.k = k;
  base.wRowStride = rowBytesOf(w);
  base.wExpertStride = base.wRowStride * static_cast<size_t>(n);
  base.nExperts = e;
  base.x = x.f();
  base.xRowStride = static_cast<size_t>(k);
  base.y = y.f();
  base.yRowStride = static_cast<size_t>(n);
  if (t <= 4) {
    // Decode: every used expert in one parallel job (per-expert jobs would be a few rows each).
    std::vector<int32_t> experts, xr, yr;
    for (int64_t ex = 0; ex < e; ++ex) {
      experts.insert(experts.end(), xRows[ex].size(), static_cast<int32_t>(ex));
      xr.insert(xr.end(), xRows[ex].begin(), xRows[ex].end());
      yr.insert(yr.end(), yRows[ex].begin(), yRows[ex].end());
    }
    cpu::MatmulIdGroupedArgs g;
    static_cast<cpu::ExpertMatmul &>(g) = base;
    g.xRowCount = x.rows();
    g.experts = experts.data();
    g.xRows = xr.data();
    g.yRows = yr.data();
    g.count = static_cast<int64_t>(experts.size());
    cpu::matmulIdGrouped(g, tg);
    return;
  }
  cpu::MatmulIdArgs a;
  static_cast<cpu::ExpertMatmul &>(a) = base;
  for (int64_t ex = 0; ex < e; ++ex) {
    if (xRows[ex].empty())
      continue;
    a.expert = ex;
    a.xRows = xRows[ex].data();
    a.yRows = yRows[ex].data();
    a.count = static_cast<int64_t>(xRows[ex].size());
    cpu::matmulId(a, tg);
  }
}

} // namespace tpc::rt::cpu
