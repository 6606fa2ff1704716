//===- MatmulOps.cpp - matmul, expert matmul and row lookups ----------------===//
//
// Thin adapters from bound tensors to runtime/cpu's kernels: cpu::matmul (y = x·wᵀ for every weight type,
// activations converted once to the weight type's activation format, as the reference engine does) and
// cpu::matmulId for MUL_MAT_ID, which takes every routed (token, slot) pair at once and runs all used
// experts as one job with x converted once. Both go through the device's ActivationCache when the session
// gives one, so matmuls reading one input (Q/K/V, gate/up, the experts' gate/up) convert it once, and
// consecutive ones on one input can run as one job (matmulBatchEnds finds them, opMatmulBatch runs them).
// An f32 tensor can stand in for a weight (rows of K floats).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ops/Ops.h"

#include "runtime/cpu/Matmul.h"
#include "runtime/cpu/ew/Elementwise.h"
#include "runtime/cpu/quant/Quant.h"

#include <algorithm>

namespace tpc::rt::cpu {

uint64_t rowBytesOf(const TensorRef &w) {
  if (!w.isWeight)
    return w.inner() * 4;
  return *ggmlRowBytes(w.wtype, static_cast<uint64_t>(w.inner()));
}
namespace {
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

namespace {
cpu::MatmulArgs matmulArgs(const TensorRef &x, const TensorRef &w, const TensorRef &y, ActivationCache *cache,
                           bool f32Reference) {
  cpu::MatmulArgs a;
  a.cache = cache;
  a.f32Reference = f32Reference;
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
  return a;
}
} // namespace

void opMatmul(const TensorRef &x, const TensorRef &w, const TensorRef &y, ThreadGroup &tg, ActivationCache *cache,
              bool f32Reference) {
  cpu::matmul(matmulArgs(x, w, y, cache, f32Reference), tg);
}

namespace {
/// True when the bytes of a and b overlap.
bool overlaps(const TensorRef &a, const TensorRef &b) {
  const char *alo = static_cast<const char *>(a.data), *blo = static_cast<const char *>(b.data);
  const size_t ab = static_cast<size_t>(a.numel()) * dtypeBytes(a.dtype);
  const size_t bb = static_cast<size_t>(b.numel()) * dtypeBytes(b.dtype);
  return alo < blo + bb && blo < alo + ab;
}

/// The routed entries of a MUL_MAT_ID, kept alive for the call.
struct IdEntries {
  std::vector<int32_t> experts, xRows, yRows;
};

/// `zeroOthers`: write zeros into the rows routed to other devices' experts (off when y is not written).
cpu::MatmulIdArgs mulMatIdArgs(const TensorRef &x, const TensorRef &w, const TensorRef &ids, const TensorRef &y,
                               int64_t firstExpert, ActivationCache *cache, bool f32Reference, IdEntries &en,
                               bool zeroOthers = true) {
  const int64_t k = x.inner(), e = w.shape[0], n = w.shape[1];
  const int64_t t = ids.shape[0], slots = ids.shape[1];
  const bool perSlot = x.shape.size() == 3; // x[T,k,K] rather than x[T,K] shared by every slot
  std::vector<int32_t> &experts = en.experts, &xRows = en.xRows, &yRows = en.yRows;
  experts.reserve(static_cast<size_t>(t * slots));
  xRows.reserve(experts.capacity());
  yRows.reserve(experts.capacity());
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t j = 0; j < slots; ++j) {
      const int64_t ex = ids.i()[ti * slots + j] - firstExpert;
      if (ex < 0 || ex >= e) { // another device's expert (expert parallel), or a broken router: zeros
        if (zeroOthers)
          std::fill(y.f() + (ti * slots + j) * n, y.f() + (ti * slots + j + 1) * n, 0.0f);
        continue;
      }
      experts.push_back(static_cast<int32_t>(ex));
      xRows.push_back(static_cast<int32_t>(perSlot ? ti * slots + j : ti));
      yRows.push_back(static_cast<int32_t>(ti * slots + j));
    }
  cpu::MatmulIdArgs a;
  a.cache = cache;
  a.f32Reference = f32Reference;
  a.w = w.data;
  a.wType = typeOf(w);
  a.n = n;
  a.k = k;
  a.wRowStride = rowBytesOf(w);
  a.wExpertStride = a.wRowStride * static_cast<size_t>(n);
  a.nExperts = e;
  a.x = x.f();
  a.xRowStride = static_cast<size_t>(k);
  a.xRowCount = x.rows();
  a.y = y.f();
  a.yRowStride = static_cast<size_t>(n);
  a.experts = experts.data();
  a.xRows = xRows.data();
  a.yRows = yRows.data();
  a.count = static_cast<int64_t>(experts.size());
  return a;
}
} // namespace

void opMulMatId(const TensorRef &x, const TensorRef &w, const TensorRef &ids, const TensorRef &y,
                int64_t firstExpert, ThreadGroup &tg, ActivationCache *cache, bool f32Reference) {
  IdEntries en;
  cpu::matmulId(mulMatIdArgs(x, w, ids, y, firstExpert, cache, f32Reference, en), tg);
}

std::vector<size_t> matmulBatchEnds(const DevicePlan &dp) {
  const std::vector<Step> &st = dp.steps;
  std::vector<size_t> end(st.size());
  for (size_t i = 0; i < st.size(); ++i) {
    end[i] = i + 1;
    const Step &a = st[i];
    if (a.op != OpKind::Matmul && a.op != OpKind::MulMatId)
      continue;
    size_t j = i + 1;
    for (; j < st.size(); ++j) {
      const Step &b = st[j];
      // Same op on the same input (and routing); no part may read what an earlier part writes.
      if (b.op != a.op || b.inputs[0] != a.inputs[0] || b.placement != a.placement ||
          (a.op == OpKind::MulMatId && b.inputs[2] != a.inputs[2]))
        break;
      bool reads = false;
      for (size_t p = i; p < j; ++p)
        for (int32_t o : st[p].outputs)
          for (int32_t in : b.inputs)
            reads |= in == o;
      if (reads)
        break;
    }
    end[i] = j;
  }
  return end;
}

std::vector<size_t> gateUpGluSteps(const DevicePlan &dp, const std::vector<size_t> &batchEnd) {
  const std::vector<Step> &st = dp.steps;
  std::vector<size_t> glu(st.size(), 0);
  for (size_t i = 0; i < st.size(); ++i) {
    const size_t end = batchEnd[i], parts = end - i;
    if ((st[i].op != OpKind::MulMatId && st[i].op != OpKind::Matmul) || parts > 2 || end >= st.size())
      continue;
    const Step &g = st[end];
    if (g.op != OpKind::Glu || g.placement != st[i].placement || g.inputs.size() != parts)
      continue;
    bool match = true;
    for (size_t p = 0; p < parts; ++p)
      match &= st[i + p].outputs.size() == 1 && g.inputs[p] == st[i + p].outputs[0];
    // gate and up are never written: nothing else may read them.
    for (size_t j = 0; j < st.size() && match; ++j)
      for (int32_t in : st[j].inputs)
        for (size_t p = 0; p < parts && j != end; ++p)
          match &= in != st[i + p].outputs[0];
    if (match)
      glu[i] = end;
    i = end - 1;
  }
  return glu;
}

namespace {
/// A dense matmul as a matmulId of one expert that every token uses (the fused GLU's form): the products
/// are the same kernels on the same token order.
cpu::MatmulIdArgs denseAsExperts(const TensorRef &x, const TensorRef &w, const TensorRef &y, ActivationCache *cache,
                                 IdEntries &en) {
  const int64_t m = x.rows();
  en.experts.assign(static_cast<size_t>(m), 0);
  en.xRows.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i)
    en.xRows[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  en.yRows = en.xRows;
  const cpu::MatmulArgs d = matmulArgs(x, w, y, cache, false);
  cpu::MatmulIdArgs a;
  a.cache = cache;
  a.w = d.w;
  a.wType = d.wType;
  a.n = d.n;
  a.k = d.k;
  a.wRowStride = d.wRowStride;
  a.wExpertStride = d.wRowStride * static_cast<size_t>(d.n);
  a.nExperts = 1;
  a.x = d.x;
  a.xRowStride = d.xRowStride;
  a.xRowCount = m;
  a.y = y.f();
  a.yRowStride = static_cast<size_t>(y.inner());
  a.experts = en.experts.data();
  a.xRows = en.xRows.data();
  a.yRows = en.yRows.data();
  a.count = m;
  return a;
}
} // namespace

void opGateUpGlu(OpKind op, const std::vector<std::vector<TensorRef>> &ins,
                 const std::vector<std::vector<TensorRef>> &outs, const std::vector<int64_t> &firstExperts,
                 UnaryFn fn, const TensorRef &y, ThreadGroup &tg, ActivationCache *cache) {
  const bool id = op == OpKind::MulMatId;
  // The plan may place the GLU output over memory the gate/up steps read (their input or routing is dead
  // once they ran): then the fused job would write it while it is read, so run the steps as planned.
  bool alias = false;
  for (const std::vector<TensorRef> &in : ins)
    alias |= overlaps(in[0], y) || (id && overlaps(in[2], y));
  if (alias) {
    opMatmulBatch(op, ins, outs, firstExperts, tg, cache);
    opGlu(fn, outs[0][0], outs.size() > 1 ? &outs[1][0] : nullptr, y, tg);
    return;
  }
  IdEntries eg, eu;
  auto args = [&](size_t p, const TensorRef &w, IdEntries &en) {
    return id ? mulMatIdArgs(ins[p][0], w, ins[p][2], y, p < firstExperts.size() ? firstExperts[p] : 0, cache,
                             false, en)
              : denseAsExperts(ins[p][0], w, y, cache, en);
  };
  if (ins.size() == 2) {
    cpu::matmulIdGlu(args(0, ins[0][1], eg), args(1, ins[1][1], eu), fn, elementwiseKernels().glu, tg);
    return;
  }
  // One merged gate_up weight ([E,] 2F, K): rows [0, F) of each expert are the gate, [F, 2F) the up.
  TensorRef half = ins[0][1];
  half.shape[half.shape.size() - 2] /= 2;
  cpu::MatmulIdArgs g = args(0, half, eg);
  g.wExpertStride *= 2;
  cpu::MatmulIdArgs u = g;
  u.w = static_cast<const uint8_t *>(g.w) + g.wRowStride * static_cast<size_t>(g.n);
  cpu::matmulIdGlu(g, u, fn, elementwiseKernels().glu, tg);
}

void opMatmulBatch(OpKind op, const std::vector<std::vector<TensorRef>> &ins,
                   const std::vector<std::vector<TensorRef>> &outs, const std::vector<int64_t> &firstExperts,
                   ThreadGroup &tg, ActivationCache *cache, bool f32Reference) {
  if (op == OpKind::Matmul) {
    std::vector<cpu::MatmulArgs> parts;
    for (size_t i = 0; i < ins.size(); ++i)
      parts.push_back(matmulArgs(ins[i][0], ins[i][1], outs[i][0], cache, f32Reference));
    cpu::matmulBatch(parts.data(), parts.size(), tg);
    return;
  }
  std::vector<IdEntries> en(ins.size());
  std::vector<cpu::MatmulIdArgs> parts;
  for (size_t i = 0; i < ins.size(); ++i)
    parts.push_back(mulMatIdArgs(ins[i][0], ins[i][1], ins[i][2], outs[i][0],
                                 i < firstExperts.size() ? firstExperts[i] : 0, cache, f32Reference, en[i]));
  cpu::matmulIdBatch(parts.data(), parts.size(), tg);
}

std::vector<size_t> downCombineSteps(const DevicePlan &dp, const std::vector<size_t> &batchEnd) {
  const std::vector<Step> &st = dp.steps;
  std::vector<size_t> fused(st.size(), 0);
  for (size_t i = 0; i + 1 < st.size(); ++i) {
    const Step &m = st[i], &c = st[i + 1];
    if (m.op != OpKind::MulMatId || batchEnd[i] != i + 1 || c.op != OpKind::ExpertCombine ||
        c.placement != m.placement || m.outputs.size() != 1 || c.inputs.empty() || c.inputs[0] != m.outputs[0])
      continue;
    // The products are never written: the combine's x must be their only use.
    bool sole = true;
    for (size_t j = 0; j < st.size() && sole; ++j)
      for (size_t q = 0; q < st[j].inputs.size(); ++q)
        sole &= st[j].inputs[q] != m.outputs[0] || (j == i + 1 && q == 0);
    if (sole)
      fused[i] = i + 1;
  }
  return fused;
}

void opMulMatIdCombine(const TensorRef &x, const TensorRef &w, const TensorRef &ids, const TensorRef &products,
                       int64_t firstExpert, const std::vector<TensorRef> &muls, const TensorRef &y, ThreadGroup &tg,
                       ActivationCache *cache, bool f32Reference) {
  const int64_t t = ids.shape[0], slots = ids.shape[1], n = y.inner();
  // Decode and small batches keep the steps: their products are a few KB, written and read in cache, and
  // the fused job's column units would only add calls (measured: bench-qwen3moe IQ2_XXS tg64 4 % slower).
  bool alias = t < kFusedCombineMinTokens || f32Reference || products.shape.size() != 3 ||
               products.shape[1] != slots || products.inner() != n || y.rows() != t;
  for (const TensorRef *in : {&x, &ids})
    alias |= overlaps(*in, y);
  for (const TensorRef &m : muls)
    alias |= overlaps(m, y) || m.numel() != t * slots;
  if (alias) { // the steps as planned
    opMulMatId(x, w, ids, products, firstExpert, tg, cache, f32Reference);
    opExpertCombine(products, muls, y, tg);
    return;
  }
  IdEntries en;
  const cpu::MatmulIdArgs a = mulMatIdArgs(x, w, ids, products, firstExpert, cache, false, en, false);
  const int64_t experts = w.shape[0];
  const int32_t *pid = ids.i();
  float *py = y.f();
  cpu::matmulIdColumns(
      a, t * slots,
      [&](const float *scratch, size_t stride, int64_t c0, int64_t c1) {
        std::vector<float> m(static_cast<size_t>(slots));
        std::vector<const float *> rows(static_cast<size_t>(slots));
        for (int64_t ti = 0; ti < t; ++ti) {
          for (int64_t j = 0; j < slots; ++j) {
            const int64_t r = ti * slots + j, ex = int64_t(pid[r]) - firstExpert;
            float f = 1;
            for (const TensorRef &mt : muls)
              f *= mt.f()[r];
            m[static_cast<size_t>(j)] = f;
            // Another device's expert: opMulMatId's zero row.
            rows[static_cast<size_t>(j)] = ex >= 0 && ex < experts ? scratch + static_cast<size_t>(r) * stride : nullptr;
          }
          cpu::combineRow(rows.data(), m.data(), slots, c1 - c0, py + ti * n + c0);
        }
      },
      tg);
}

} // namespace tpc::rt::cpu
