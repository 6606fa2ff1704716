//===- AttentionOps.cpp - RoPE and attention over the KV cache --------------===//
//
// ROPE rotates pairs of each head vector: normal mode pairs (2i, 2i+1), NEOX mode (i, i + n_dims/2), with
// theta_i = freq_scale · pos · base^(-2i/n_dims) / freq_factors[i]; dims past n_dims pass through.
// ATTENTION first appends this call's K/V rows at their positions (converting to the cache dtype), then
// each (token, query head) attends causally over the cache: positions p' <= p, and p - p' < window when
// a sliding window is set; GQA maps query head h to KV head h / (Hq / Hkv). Optional soft-capping of the
// scores and per-head sink logits that join the softmax denominator only. Parallel over (token, KV head):
// the KV rows are converted once per GQA group.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ops/Ops.h"

#include "runtime/cpu/VectorOps.h"
#include "runtime/cpu/quant/Quant.h"

#include <algorithm>
#include <climits>
#include <cmath>

namespace tpc::rt::cpu {

void opRope(const TensorRef &x, const TensorRef &pos, const TensorRef *freqFactors, const TensorRef &y,
            const RopeParams &p, ThreadGroup &tg) {
  const int64_t mode = static_cast<int64_t>(p.mode), nDims = p.nDims;
  const float base = p.base, freqScale = p.freqScale;
  const int64_t t = x.shape[0], h = x.shape[1], d = x.shape[2], half = nDims / 2;
  std::vector<double> invFreq(half);
  for (int64_t i = 0; i < half; ++i) {
    invFreq[i] = freqScale * std::pow(double(base), -2.0 * double(i) / double(nDims));
    if (freqFactors)
      invFreq[i] /= freqFactors->f()[i];
  }
  tg.parallelFor(t, [&](int64_t b, int64_t e, int) {
    std::vector<float> c(half), s(half);
    for (int64_t ti = b; ti < e; ++ti) {
      const double p = pos.i()[ti];
      for (int64_t i = 0; i < half; ++i) {
        const double theta = p * invFreq[i];
        c[i] = static_cast<float>(std::cos(theta));
        s[i] = static_cast<float>(std::sin(theta));
      }
      for (int64_t hi = 0; hi < h; ++hi) {
        const float *src = x.f() + (ti * h + hi) * d;
        float *dst = y.f() + (ti * h + hi) * d;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i0 = mode == 1 ? i : 2 * i, i1 = mode == 1 ? i + half : 2 * i + 1;
          const float a = src[i0], bb = src[i1];
          dst[i0] = a * c[i] - bb * s[i];
          dst[i1] = a * s[i] + bb * c[i];
        }
        if (dst != src)
          std::copy(src + nDims, src + d, dst + nDims);
      }
    }
  });
}

namespace {
/// Writes n floats into a cache row of dtype dt.
void storeRow(void *cache, DType dt, int64_t at, const float *src, int64_t n) {
  if (dt == DType::F32) {
    std::memcpy(static_cast<float *>(cache) + at, src, n * 4);
  } else {
    uint16_t *dst = static_cast<uint16_t *>(cache) + at;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = floatToHalf(src[i]);
  }
}
} // namespace

void opAttention(const TensorRef &q, const TensorRef &k, const TensorRef &v, const TensorRef &pos,
                 const TensorRef *sinks, KvBuffers &kv, const TensorRef &y, const AttentionParams &p,
                 ThreadGroup &tg) {
  const int64_t t = q.shape[0], hq = q.shape[1], dk = q.shape[2];
  const int64_t hkv = k.shape[1], dv = v.shape[2];
  if (hkv == 0) // this device's share of the heads is empty (checkStep: then hq is 0 too)
    return;
  const int64_t group = hq / hkv;
  const DType dt = kv.desc.dtype;
  // Append K/V at their positions (rows of the cache are [Hkv, D] per position).
  for (int64_t ti = 0; ti < t; ++ti) {
    const int64_t at = pos.i()[ti];
    storeRow(kv.k, dt, at * hkv * dk, k.f() + ti * hkv * dk, hkv * dk);
    storeRow(kv.v, dt, at * hkv * dv, v.f() + ti * hkv * dv, hkv * dv);
  }
  if (hq == 0) // K/V mirrored (MQA) but no query head here: the cache is kept, nothing to attend
    return;
  int64_t maxPos = 0, minLo = INT64_MAX;
  for (int64_t ti = 0; ti < t; ++ti) {
    const int64_t pi = pos.i()[ti];
    maxPos = std::max<int64_t>(maxPos, pi);
    minLo = std::min<int64_t>(minLo, p.window > 0 ? std::max<int64_t>(0, pi - p.window + 1) : 0);
  }
  // K/V rows as f32, [position][Hkv][D]: an f32 cache is read in place; an f16 cache is converted once
  // per call when several tokens attend (prefill: per work item, every token would convert all earlier
  // rows again, O(T^2)), unless that copy would be large; otherwise per work item below.
  const float *kAll = nullptr, *vAll = nullptr;
  int64_t allFrom = 0; // position of the first row of kAll / vAll
  std::vector<float> converted;
  const int64_t span = maxPos - minLo + 1;
  if (dt == DType::F32) {
    kAll = static_cast<const float *>(kv.k);
    vAll = static_cast<const float *>(kv.v);
  } else if (t > 1 && span * hkv * (dk + dv) <= (int64_t(1) << 24)) {
    converted.resize(static_cast<size_t>(span * hkv * (dk + dv)));
    float *kc = converted.data(), *vc = kc + span * hkv * dk;
    tg.parallelFor(span, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) {
        // F16C where the CPU has it (8 halves per instruction) rather than a 256 KiB lookup table.
        dequantizeRow(GGMLType::F16, static_cast<const uint16_t *>(kv.k) + (minLo + r) * hkv * dk,
                           kc + r * hkv * dk, hkv * dk);
        dequantizeRow(GGMLType::F16, static_cast<const uint16_t *>(kv.v) + (minLo + r) * hkv * dv,
                           vc + r * hkv * dv, hkv * dv);
      }
    });
    kAll = kc;
    vAll = vc;
    allFrom = minLo;
  }
  // One work item per (token, KV head): its cache rows (converted to f32 once, here or above) serve the
  // whole group of query heads that share them (GQA), then scores and the weighted sum per query head.
  auto body = [&](int64_t b, int64_t e, int) {
    std::vector<float> kf, vf, score;
    for (int64_t item = b; item < e; ++item) {
      // Tokens in zigzag order (0, T-1, 1, T-2, ...): a causal row's work grows with its position, so
      // this gives every thread's contiguous chunk of items the same work.
      const int64_t slot = item / hkv, kh = item % hkv;
      const int64_t ti = slot % 2 == 0 ? slot / 2 : t - 1 - slot / 2;
      const int64_t pi = pos.i()[ti];
      const int64_t lo = p.window > 0 ? std::max<int64_t>(0, pi - p.window + 1) : 0, n = pi - lo + 1;
      const float *k0, *v0; // row j of this KV head: k0 + j * kStride
      int64_t kStride, vStride;
      if (kAll) {
        k0 = kAll + ((lo - allFrom) * hkv + kh) * dk;
        v0 = vAll + ((lo - allFrom) * hkv + kh) * dv;
        kStride = hkv * dk;
        vStride = hkv * dv;
      } else {
        kf.resize(n * dk);
        vf.resize(n * dv);
        for (int64_t j = 0; j < n; ++j) {
          // F16C where the CPU has it: decode at a 512-token context ran ~17% faster than with a table.
          dequantizeRow(GGMLType::F16, static_cast<const uint16_t *>(kv.k) + ((lo + j) * hkv + kh) * dk,
                             &kf[j * dk], dk);
          dequantizeRow(GGMLType::F16, static_cast<const uint16_t *>(kv.v) + ((lo + j) * hkv + kh) * dv,
                             &vf[j * dv], dv);
        }
        k0 = kf.data();
        v0 = vf.data();
        kStride = dk;
        vStride = dv;
      }
      score.resize(n);
      for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
        const float *qr = q.f() + (ti * hq + h) * dk;
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          float sc = cpu::dotF32(qr, k0 + j * kStride, dk) * p.scale;
          if (p.softcap > 0)
            sc = p.softcap * std::tanh(sc / p.softcap);
          score[j] = sc;
          mx = std::max(mx, sc);
        }
        const float sink = sinks ? sinks->f()[h] : -INFINITY;
        mx = std::max(mx, sink);
        double denom = sinks ? std::exp(double(sink - mx)) : 0.0;
        for (float &sc : score) {
          sc = std::exp(sc - mx);
          denom += sc;
        }
        float *out = y.f() + (ti * hq + h) * dv;
        std::fill(out, out + dv, 0.0f);
        for (int64_t j = 0; j < n; ++j)
          cpu::axpyF32(score[j], v0 + j * vStride, out, dv);
        const float inv = static_cast<float>(1.0 / denom);
        for (int64_t c = 0; c < dv; ++c)
          out[c] *= inv;
      }
    }
  };
  // Waking the workers costs more than a small decode step (one token, a short context) saves.
  const int64_t work = t * hq * (p.window > 0 ? std::min(p.window, maxPos + 1) : maxPos + 1) * (dk + dv);
  if (work < (1 << 16))
    body(0, t * hkv, 0);
  else
    tg.parallelFor(t * hkv, body);
}

} // namespace tpc::rt::cpu
