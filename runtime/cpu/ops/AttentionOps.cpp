//===- AttentionOps.cpp - RoPE and attention over the KV cache --------------===//
//
// ROPE rotates pairs of each head vector: normal mode pairs (2i, 2i+1), NEOX mode (i, i + n_dims/2), with
// theta_i = freq_scale · pos · base^(-2i/n_dims) / freq_factors[i]; dims past n_dims pass through. cos/sin
// come from the device's RoPE tables (RopeTable.h: once per call and parameter set), the rotation from the
// ISA's element-wise table.
// ATTENTION first appends this call's K/V rows in the cells of their (sequence, position) (converting to
// each half's storage type: f16, f32, or q8_0 / q4_0 blocks; a sliding-window ring overwrites the position
// its window no longer reads), then runs the flash-style kernel of runtime/cpu/Attention.h: each (token,
// query head) attends over its own sequence's cells at positions p' <= p, and p - p' < window when a sliding
// window is set; GQA maps query head h to KV head h / (Hq / Hkv); optional soft-capping of the scores and
// per-head sink logits that join the softmax denominator only.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ops/Ops.h"

#include "runtime/cpu/Attention.h"
#include "runtime/cpu/ew/Elementwise.h"
#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/Quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tpc::rt::cpu {

void opRope(const TensorRef &x, const TensorRef &pos, const TensorRef *freqFactors, const TensorRef &y,
            const RopeParams &p, ThreadGroup &tg, ActivationCache *cache) {
  const int64_t t = x.shape[0], h = x.shape[1], d = x.shape[2], nDims = p.nDims;
  RopeTables local;
  RopeTables &tables = cache ? cache->ropeTables() : local;
  const RopeTable &tab = tables.get(p, pos.i(), t, freqFactors ? freqFactors->f() : nullptr, tg);
  const ElementwiseKernels &k = elementwiseKernels();
  const bool neox = p.mode == RopeMode::Neox;
  // Rows (token, head) over threads: a decode step's heads use every thread too.
  tg.parallelFor(t * h, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t ti = r / h;
      const float *src = x.f() + r * d;
      float *dst = y.f() + r * d;
      k.rope(neox, src, dst, tab.cos(ti), tab.sin(ti), nDims);
      if (dst != src)
        std::copy(src + nDims, src + d, dst + nDims);
    }
  });
}

void opAttention(const TensorRef &q, const TensorRef &k, const TensorRef &v, const TensorRef &pos,
                 const TensorRef *sinks, KvBuffers &kv, const TensorRef &y, const AttentionParams &p,
                 ThreadGroup &tg) {
  const int64_t t = q.shape[0], hq = q.shape[1], dk = q.shape[2];
  const int64_t hkv = k.shape[1], dv = v.shape[2];
  if (hkv == 0) // this device's share of the heads is empty (checkStep: then hq is 0 too)
    return;
  // Append K/V in the cells of their (sequence, position): rows of the cache are [Hkv, D] per cell, in
  // the half's storage type. A quantized half takes the reference quantizer (the blocks the reference
  // engine's cache copy writes); head dims are multiples of 32, so no block straddles two heads.
  const uint64_t kCell = hkv * kvRowBytes(kv.desc.typeK, dk), vCell = hkv * kvRowBytes(kv.desc.typeV, dv);
  auto store = [](GGMLType type, const float *src, void *dst, int64_t n) {
    if (type == GGMLType::F16)
      fp32ToFp16Row(src, static_cast<uint16_t *>(dst), n);
    else if (type == GGMLType::F32)
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    else
      quantizeRow(type, src, dst, n);
  };
  for (int64_t ti = 0; ti < t; ++ti) {
    const int64_t cell = kv.cell(kv.seq ? kv.seq[ti] : 0, pos.i()[ti]);
    store(kv.desc.typeK, k.f() + ti * hkv * dk, static_cast<char *>(kv.k) + cell * kCell, hkv * dk);
    store(kv.desc.typeV, v.f() + ti * hkv * dv, static_cast<char *>(kv.v) + cell * vCell, hkv * dv);
  }
  if (hq == 0) // K/V mirrored (MQA) but no query head here: the cache is kept, nothing to attend
    return;
  AttentionArgs a;
  a.q = q.f();
  a.y = y.f();
  a.t = t, a.hq = hq, a.hkv = hkv, a.dk = dk, a.dv = dv;
  a.pos = pos.i();
  a.seq = kv.seq;
  a.k = kv.k, a.v = kv.v;
  a.typeK = kv.desc.typeK, a.typeV = kv.desc.typeV;
  a.ctx = kv.ctx;
  a.window = p.window;
  a.scale = p.scale, a.softcap = p.softcap;
  a.sinks = sinks ? sinks->f() : nullptr;
  if (p.group <= 0) {
    flashAttention(a, tg);
    return;
  }
  // Every KV head is here (mirrored: the devices outnumber them) and q holds the model's query heads
  // qHead0.. : attend per KV head its local query heads touch, each as a one-KV-head call reading that head
  // of the cache. Query heads that are not the whole local range are gathered into a contiguous block
  // first (and their rows scattered back).
  const int64_t h0 = p.qHead0, g = p.group;
  for (int64_t kh = h0 / g; kh * g < h0 + hq; ++kh) {
    const int64_t lo = std::max(h0, kh * g) - h0, hi = std::min(h0 + hq, (kh + 1) * g) - h0, n = hi - lo;
    AttentionArgs part = a;
    part.hq = n, part.hkv = 1, part.cacheHeads = hkv, part.kvHead0 = kh;
    part.sinks = sinks ? sinks->f() + lo : nullptr;
    std::vector<float> qs, ys;
    if (n != hq) {
      qs.resize(static_cast<size_t>(t * n * dk));
      ys.resize(static_cast<size_t>(t * n * dv));
      for (int64_t ti = 0; ti < t; ++ti)
        std::copy_n(q.f() + (ti * hq + lo) * dk, n * dk, qs.data() + ti * n * dk);
      part.q = qs.data(), part.y = ys.data();
    }
    flashAttention(part, tg);
    if (n != hq)
      for (int64_t ti = 0; ti < t; ++ti)
        std::copy_n(ys.data() + ti * n * dv, n * dv, y.f() + (ti * hq + lo) * dv);
  }
}

} // namespace tpc::rt::cpu
