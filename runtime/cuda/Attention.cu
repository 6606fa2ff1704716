//===- Attention.cu - RoPE, KV append and flash-decode attention ------------===//
//
// RoPE computes its angles in double, as the CPU reference does, so long positions agree to f32
// rounding. The attention kernel keeps q in shared memory and, per warp, a running max m, denominator l
// and Dv/32 accumulators per lane; scores are warp dot products (lanes over the head dim, shuffle sum).
// GQA maps query head h to KV head h / (Hq / Hkv). Cache positions past a token's own are never read,
// and appended rows of later tokens of the same call are masked by causality, as on the CPU. The output
// gate is applied where each kernel writes y (both kernels), so the quantized copy is of the gated y.
// q8_0 / q4_0 caches (and mixed halves) are appended by a warp per 32-value block with the CPU's reference
// quantizers and read by the decode kernel value by value (cacheValue: the block's f16 scale times its
// int8 or nibble), for every call size: the tensor-core prefill kernel stages f16 rows only.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/Attention.cuh"
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/Launch.cuh"
#include "runtime/cuda/Quant.cuh"
#include "runtime/cuda/Reduce.cuh"

#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <type_traits>

namespace tpc::rt::cuda {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kPerLane = kMaxHeadDim / 32;
constexpr int kAttnWarps = 8;

//===----------------------------------------------------------------------===//
// kernels
//===----------------------------------------------------------------------===//

/// cos and sin of pair p's angle at position pos (in double, as the CPU reference computes it).
/// With YaRN, pair p's frequency mixes the interpolated and extrapolated ones by the ramp between the
/// correction dims, and cos/sin carry its magnitude (the CPU's ropeYarnInvFreq / ropeYarnMscale).
__device__ __forceinline__ void ropeAngle(const RopeArgs &a, int64_t p, int32_t pos, float &c, float &s) {
  const double extrap = pow(double(a.base), -2.0 * double(p) / double(a.nDims));
  double inv = double(a.freqScale) * extrap;
  if (a.extFactor != 0) {
    const float y = (float(p) - a.corrLo) / fmaxf(0.001f, a.corrHi - a.corrLo);
    const double mix = double(1.0f - fminf(1.0f, fmaxf(0.0f, y))) * a.extFactor;
    inv = extrap * (double(a.freqScale) * (1 - mix) + mix);
  }
  if (a.freqFactors)
    inv /= double(a.freqFactors[p]);
  double sn, cs;
  sincos(double(pos) * inv, &sn, &cs);
  c = static_cast<float>(cs * a.mscale), s = static_cast<float>(sn * a.mscale);
}

/// Indices of pair p: (p, p + n_dims / 2) for NEOX, (2p, 2p + 1) otherwise.
__device__ __forceinline__ void ropePair(const RopeArgs &a, int64_t p, int64_t &i0, int64_t &i1) {
  const bool neox = a.mode == RopeMode::Neox;
  i0 = neox ? p : 2 * p;
  i1 = neox ? p + a.nDims / 2 : 2 * p + 1;
}

__global__ void ropeKernel(RopeArgs a) {
  pdlEnter();
  const int64_t half = a.nDims / 2, n = a.t * a.h * half;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = i % half, th = i / half, ti = th / a.h;
    float c, s;
    ropeAngle(a, p, a.pos[ti], c, s);
    int64_t i0, i1;
    ropePair(a, p, i0, i1);
    const float *src = a.x + th * a.d;
    float *dst = a.y + th * a.d;
    const float x0 = src[i0], x1 = src[i1];
    dst[i0] = x0 * c - x1 * s;
    dst[i1] = x0 * s + x1 * c;
  }
  // Dims past n_dims pass through (only when out of place).
  if (a.x != a.y && a.nDims < a.d) {
    const int64_t rest = a.d - a.nDims, m = a.t * a.h * rest;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < m;
         i += int64_t(gridDim.x) * blockDim.x) {
      const int64_t th = i / rest, c = a.nDims + i % rest;
      a.y[th * a.d + c] = a.x[th * a.d + c];
    }
  }
}

/// One block (rowThreads(d) threads, one element each, as rmsNormKernel) per (part, token, head).
__global__ void __launch_bounds__(1024) normRopeKernel(NormRopeArgs a) {
  pdlEnter();
  __shared__ float row[1024];
  __shared__ float red[32];
  const RopeArgs &r = a.rope;
  int64_t th = blockIdx.x;
  const bool second = th >= r.t * a.part[0].h;
  const NormRopePart pt = second ? a.part[1] : a.part[0];
  if (second)
    th -= r.t * a.part[0].h;
  const int64_t e = threadIdx.x, ti = th / pt.h;
  float v = e < r.d ? pt.x[th * r.d + e] : 0.0f;
  if (pt.norm) {
    const float k = rsqrtf(blockSum(v * v, red) / float(r.d) + pt.eps);
    if (e < r.d) {
      v = pt.w ? v * k * pt.w[e] : v * k;
      pt.normed[th * r.d + e] = v;
    }
  }
  if (e < r.d)
    row[e] = v;
  __syncthreads(); // every read of x (which y may alias) is done
  float *y = pt.y + th * r.d;
  if (e < r.nDims / 2) {
    float c, s;
    ropeAngle(r, e, r.pos[ti], c, s);
    int64_t i0, i1;
    ropePair(r, e, i0, i1);
    const float x0 = row[i0], x1 = row[i1];
    y[i0] = x0 * c - x1 * s;
    y[i1] = x0 * s + x1 * c;
  } else if (e >= r.nDims && e < r.d) {
    y[e] = row[e];
  }
}

/// The output gate's factor.
__device__ __forceinline__ float sigmoidOf(float g) { return 1.0f / (1.0f + expf(-g)); }

template <typename C> __device__ __forceinline__ float cacheLoad(const C *p) {
  if constexpr (sizeof(C) == 2)
    return __half2float(*reinterpret_cast<const __half *>(p));
  else
    return *p;
}

/// The cache types beside f16-f16 and f32-f32 (q8_0 / q4_0 halves, or mixed): read through cacheValue.
struct AnyCache {};

/// Bytes of a head row of d values in storage t (kvRowBytes of PlanFormat.h).
__device__ __forceinline__ int64_t rowBytesOf(KvStorage t, int64_t d) {
  return t == KvStorage::F32    ? 4 * d
         : t == KvStorage::F16  ? 2 * d
         : t == KvStorage::Q8_0 ? d / 32 * 34
                                : d / 32 * 18;
}

/// Value c of head row `row` (cell * cache heads + head) of a half stored as t: f32, f16, or d * q of
/// its block (q8_0: int8 q; q4_0: nibble - 8, low nibbles first), as dequantizeRow computes it.
__device__ __forceinline__ float cacheValue(const void *base, KvStorage t, int64_t row, int64_t d,
                                            int64_t c) {
  if (t == KvStorage::F32)
    return static_cast<const float *>(base)[row * d + c];
  if (t == KvStorage::F16)
    return __half2float(static_cast<const __half *>(base)[row * d + c]);
  const uint8_t *blk = static_cast<const uint8_t *>(base) + row * rowBytesOf(t, d) +
                       (c / 32) * (t == KvStorage::Q8_0 ? 34 : 18);
  const float scale = __half2float(*reinterpret_cast<const __half *>(blk)); // blocks start at even bytes
  const int j = int(c % 32);
  if (t == KvStorage::Q8_0)
    return scale * float(static_cast<int8_t>(blk[2 + j]));
  const uint8_t b = blk[2 + (j & 15)];
  return scale * float(int(j < 16 ? b & 0xf : b >> 4) - 8);
}

/// Value c of head row `row` of the K (v = false) or V half: the typed pointer for the f16 / f32 kernels,
/// cacheValue for AnyCache.
template <typename C>
__device__ __forceinline__ float cacheAt(const AttentionArgs &a, bool v, int64_t row, int64_t c) {
  const int64_t d = v ? a.dv : a.dk;
  if constexpr (std::is_same_v<C, AnyCache>)
    return cacheValue(v ? a.vc : a.kc, v ? a.typeV : a.typeK, row, d, c);
  else
    return cacheLoad(static_cast<const C *>(v ? a.vc : a.kc) + row * d + c);
}

/// Appends k, v to a cache of any types: one warp per 32 values of a token's K or V row (a q8_0 / q4_0
/// block: heads are whole blocks), quantized as the CPU's reference quantizers do (quantQ8_0: d = amax /
/// 127, q = round-to-even(x / d); quantQ4_0: d = signed max / -8, q = min(15, trunc(x / d + 8.5))), so both
/// backends store the same blocks.
__global__ void appendAnyKernel(AttentionArgs a) {
  pdlEnter();
  const int64_t kn = a.hkv * a.dk, vn = a.hkv * a.dv, kChunks = (kn + 31) / 32, vChunks = (vn + 31) / 32;
  const int64_t warps = a.t * (kChunks + vChunks);
  const int lane = threadIdx.x % 32;
  for (int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; w < warps;
       w += int64_t(gridDim.x) * blockDim.x / 32) {
    const int64_t ti = w / (kChunks + vChunks), r = w % (kChunks + vChunks);
    const bool isV = r >= kChunks;
    const int64_t chunk = isV ? r - kChunks : r, n = isV ? vn : kn;
    const KvStorage t = isV ? a.typeV : a.typeK;
    const int64_t e = chunk * 32 + lane;
    const float x = e < n ? (isV ? a.v[ti * vn + e] : a.k[ti * kn + e]) : 0.0f;
    const int64_t at = (a.seq ? a.seq[ti] : 0) * a.ctx + a.pos[ti] % a.ctx; // the cell of (seq, pos)
    uint8_t *cell = static_cast<uint8_t *>(isV ? a.vc : a.kc) + at * rowBytesOf(t, n); // n = heads x d
    if (t == KvStorage::F32 || t == KvStorage::F16) {
      if (e < n) {
        if (t == KvStorage::F32)
          reinterpret_cast<float *>(cell)[e] = x;
        else
          reinterpret_cast<__half *>(cell)[e] = __float2half_rn(x);
      }
      continue;
    }
    if (t == KvStorage::Q8_0) {
      float amax = fabsf(x);
      for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      const float d = amax / 127, id = d != 0 ? 1.0f / d : 0.0f;
      uint8_t *blk = cell + chunk * 34;
      blk[2 + lane] =
          static_cast<uint8_t>(static_cast<int8_t>(fminf(fmaxf(rintf(__fmul_rn(x, id)), -127.0f), 127.0f)));
      if (lane == 0)
        *reinterpret_cast<__half *>(blk) = __float2half_rn(d);
      continue;
    }
    // q4_0: the element of largest magnitude, the first on ties, with its sign.
    float best = x, mag = fabsf(x);
    int at0 = lane;
    for (int o = 16; o > 0; o >>= 1) {
      const float om = __shfl_xor_sync(0xffffffffu, mag, o), ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, at0, o);
      if (om > mag || (om == mag && oi < at0))
        mag = om, best = ob, at0 = oi;
    }
    const float d = best / -8, id = d != 0 ? 1.0f / d : 0.0f;
    const int q = min(15, static_cast<int>(__fmul_rn(x, id) + 8.5f)); // no FMA: the CPU rounds x * id first
    const int hi = __shfl_down_sync(0xffffffffu, q, 16);              // element lane + 16: the high nibble
    uint8_t *blk = cell + chunk * 18;
    if (lane < 16)
      blk[2 + lane] = static_cast<uint8_t>(q | (hi << 4));
    if (lane == 0)
      *reinterpret_cast<__half *>(blk) = __float2half_rn(d);
  }
}

template <typename C> __global__ void appendKernel(AttentionArgs a) {
  pdlEnter();
  const int64_t kn = a.hkv * a.dk, vn = a.hkv * a.dv, n = a.t * (kn + vn);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ti = i / (kn + vn), r = i % (kn + vn);
    const int64_t at = (a.seq ? a.seq[ti] : 0) * a.ctx + a.pos[ti] % a.ctx; // the cell of (seq, pos)
    float v;
    C *dst;
    if (r < kn) {
      v = a.k[ti * kn + r];
      dst = static_cast<C *>(a.kc) + at * kn + r;
    } else {
      v = a.v[ti * vn + (r - kn)];
      dst = static_cast<C *>(a.vc) + at * vn + (r - kn);
    }
    if constexpr (sizeof(C) == 2)
      *reinterpret_cast<__half *>(dst) = __float2half_rn(v);
    else
      *dst = v;
  }
}

template <typename C> __global__ void __launch_bounds__(kAttnWarps * 32) attentionKernel(AttentionArgs a) {
  pdlEnter();
  __shared__ float qs[kMaxHeadDim];
  __shared__ float wm[kAttnWarps], wl[kAttnWarps];
  __shared__ float wacc[kAttnWarps][kMaxHeadDim];
  const int64_t h = blockIdx.x, ti = blockIdx.y;
  const int64_t kh = a.group > 0 ? (a.qHead0 + h) / a.group : h / (a.hq / a.hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t c = threadIdx.x; c < a.dk; c += blockDim.x)
    qs[c] = a.q[(ti * a.hq + h) * a.dk + c];
  __syncthreads();
  const int64_t p = a.pos[ti];
  const int64_t lo = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
  const int64_t base = (a.seq ? a.seq[ti] : 0) * a.ctx; // the sequence's first cell
  float m = -INFINITY, l = 0, acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    acc[i] = 0;
  for (int64_t j = lo + warp; j <= p; j += kAttnWarps) {
    const int64_t cell = base + j % a.ctx, row = cell * a.hkv + kh; // the head's row in either half
    float sc = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < a.dk)
        sc += qs[c] * cacheAt<C>(a, false, row, c);
    }
    for (int o = 16; o > 0; o >>= 1)
      sc += __shfl_xor_sync(0xffffffffu, sc, o);
    sc *= a.scale;
    if (a.softcap > 0)
      sc = a.softcap * tanhf(sc / a.softcap);
    const float mNew = fmaxf(m, sc);
    const float corr = expf(m - mNew), w = expf(sc - mNew);
    l = l * corr + w;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      acc[i] = acc[i] * corr + (c < a.dv ? w * cacheAt<C>(a, true, row, c) : 0.0f);
    }
    m = mNew;
  }
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t c = lane + 32 * i;
    if (c < a.dv)
      wacc[warp][c] = acc[i];
  }
  __syncthreads();
  float mx = a.sinks ? a.sinks[h] : -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w)
    mx = fmaxf(mx, wm[w]);
  float denom = a.sinks ? expf(a.sinks[h] - mx) : 0.0f;
  for (int w = 0; w < kAttnWarps; ++w)
    if (wm[w] > -INFINITY)
      denom += wl[w] * expf(wm[w] - mx);
  const float inv = 1.0f / denom;
  for (int64_t c = threadIdx.x; c < a.dv; c += blockDim.x) {
    float o = 0;
    for (int w = 0; w < kAttnWarps; ++w)
      if (wm[w] > -INFINITY)
        o += wacc[w][c] * expf(wm[w] - mx);
    const int64_t idx = (ti * a.hq + h) * a.dv + c;
    const float out = a.gate ? o * inv * sigmoidOf(a.gate[idx]) : o * inv;
    a.y[idx] = out;
    if (a.xq) // dv % 32 == 0 and blockDim >= dv: every warp here holds whole blocks
      warpQuantize32(out, a.xq + (idx & ~int64_t(31)), a.xs + idx / 32);
  }
}

//===----------------------------------------------------------------------===//
// Prefill attention on tensor cores (flash-attention tiles)
//
// One block per (64 consecutive tokens, query head): four warps of 16 query rows each. Per tile of 64
// cache positions the block stages K and V (f16 cache rows, zeros past the head dim) in shared memory,
// each warp computes its 16 x 64 scores with WMMA (f16 operands, f32 accumulation), turns them into
// probabilities with an online softmax (running max and denominator per row; masks: causality, window,
// other sequences), rescales its rows of the f32 output accumulator in shared memory and adds P V with
// WMMA. Rows are tokens of one call, which may belong to several sequences (batched prefill of `tpc
// serve`): the block walks the sequences its rows hold, each over the positions its rows see, masking
// the rows of the others. Accumulator fragments are kept in shared memory rather than registers because
// their element-to-row mapping is not specified by WMMA, and the rescale is per row.
//===----------------------------------------------------------------------===//

constexpr int kFaRows = 64;      // query rows (tokens) per block
constexpr int kFaCols = 64;      // cache positions per tile
constexpr int kFaThreads = 128;  // 4 warps of 16 rows
constexpr int kFlashMinTokens = 32;

/// Shared-memory layout of the prefill kernel for head dims up to D (a multiple of 16). Every array
/// starts 128-byte aligned and every fragment pointer 32-byte aligned (rows of 16 times the strides).
template <int D> struct FaLayout {
  static constexpr int kLdH = D + 8;       // f16 rows of q, k, v
  static constexpr int kLdS = kFaCols + 4; // f32 scores
  static constexpr int kLdP = kFaCols + 8; // f16 probabilities
  static constexpr int kLdO = D + 4;       // f32 output accumulator
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kFaRows * kLdH * 2;
  static constexpr int kV = kK + kFaCols * kLdH * 2;
  static constexpr int kS = kV + kFaCols * kLdH * 2;
  static constexpr int kP = kS + kFaRows * kLdS * 4;
  static constexpr int kO = kP + kFaRows * kLdP * 2;
  static constexpr int kRow = kO + kFaRows * kLdO * 4; // per row: m, l, corr (f32), pos, seq, lo (i32)
  static constexpr int kBytes = kRow + 6 * kFaRows * 4;
  static_assert(kK % 128 == 0 && kV % 128 == 0 && kS % 128 == 0 && kP % 128 == 0 && kO % 128 == 0 &&
                kRow % 128 == 0, "aligned arrays");
};

template <int D> __global__ void __launch_bounds__(kFaThreads) flashPrefillKernel(AttentionArgs a) {
  using L = FaLayout<D>;
  using namespace nvcuda;
  extern __shared__ __align__(128) unsigned char faSmem[];
  __half *qs = reinterpret_cast<__half *>(faSmem + L::kQ), *ks = reinterpret_cast<__half *>(faSmem + L::kK),
         *vs = reinterpret_cast<__half *>(faSmem + L::kV), *ps = reinterpret_cast<__half *>(faSmem + L::kP);
  float *ss = reinterpret_cast<float *>(faSmem + L::kS), *os = reinterpret_cast<float *>(faSmem + L::kO);
  float *rM = reinterpret_cast<float *>(faSmem + L::kRow), *rL = rM + kFaRows, *rCorr = rL + kFaRows;
  int *rPos = reinterpret_cast<int *>(rCorr + kFaRows), *rSeq = rPos + kFaRows, *rLo = rSeq + kFaRows;
  __shared__ int nextSeq, seqLo, seqHi;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t t0 = int64_t(blockIdx.x) * kFaRows, h = blockIdx.y,
                kh = a.group > 0 ? (a.qHead0 + h) / a.group : h / (a.hq / a.hkv);
  pdlEnter();
  for (int r = tid; r < kFaRows; r += kFaThreads) {
    const int64_t ti = t0 + r;
    const bool valid = ti < a.t;
    const int p = valid ? a.pos[ti] : -1;
    rPos[r] = p;
    rSeq[r] = valid ? (a.seq ? a.seq[ti] : 0) : INT_MAX;
    rLo[r] = a.window > 0 && p - a.window + 1 > 0 ? int(p - a.window + 1) : 0;
    rM[r] = -INFINITY;
    rL[r] = 0;
  }
  for (int i = tid; i < kFaRows * D; i += kFaThreads) {
    const int r = i / D, c = i % D;
    const int64_t ti = t0 + r;
    qs[r * L::kLdH + c] = __float2half_rn(ti < a.t && c < a.dk ? a.q[(ti * a.hq + h) * a.dk + c] : 0.0f);
    os[r * L::kLdO + c] = 0;
  }
  const __half *kc = static_cast<const __half *>(a.kc), *vc = static_cast<const __half *>(a.vc);
  const int dk16 = int((a.dk + 15) / 16), dv16 = int((a.dv + 15) / 16);
  for (int cur = -1;;) {
    __syncthreads();
    if (tid == 0) { // the next sequence among the rows, and the positions its rows see
      int nx = INT_MAX, lo = INT_MAX, hi = -1;
      for (int r = 0; r < kFaRows; ++r)
        if (rPos[r] >= 0 && rSeq[r] > cur && rSeq[r] < nx)
          nx = rSeq[r];
      for (int r = 0; r < kFaRows; ++r)
        if (rPos[r] >= 0 && rSeq[r] == nx) {
          lo = min(lo, rLo[r]);
          hi = max(hi, rPos[r]);
        }
      nextSeq = nx, seqLo = lo, seqHi = hi;
    }
    __syncthreads();
    const int seq = nextSeq;
    if (seq == INT_MAX)
      break;
    cur = seq;
    const int64_t jlo = seqLo, jhi = seqHi, base = int64_t(seq) * a.ctx;
    for (int64_t j0 = jlo; j0 <= jhi; j0 += kFaCols) {
      // K and V rows of positions j0 .. j0 + 63 (zeros past the last position any row sees: never-written
      // cells may hold NaN bits, and 0 * NaN would reach the sums).
      for (int i = tid; i < kFaCols * (D / 8); i += kFaThreads) {
        const int jr = i / (D / 8), c = 8 * (i % (D / 8));
        const int64_t j = j0 + jr;
        uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
        if (j <= jhi) {
          const int64_t cell = base + j % a.ctx;
          if (c < a.dk)
            kv = *reinterpret_cast<const uint4 *>(kc + (cell * a.hkv + kh) * a.dk + c);
          if (c < a.dv)
            vv = *reinterpret_cast<const uint4 *>(vc + (cell * a.hkv + kh) * a.dv + c);
        }
        *reinterpret_cast<uint4 *>(ks + jr * L::kLdH + c) = kv;
        *reinterpret_cast<uint4 *>(vs + jr * L::kLdH + c) = vv;
      }
      __syncthreads();
      const int r0 = warp * 16;
      { // S = Q K^T for the warp's 16 rows
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFaCols / 16];
#pragma unroll
        for (int j = 0; j < kFaCols / 16; ++j)
          wmma::fill_fragment(acc[j], 0.0f);
        for (int kk = 0; kk < dk16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fq;
          wmma::load_matrix_sync(fq, qs + r0 * L::kLdH + 16 * kk, L::kLdH);
#pragma unroll
          for (int j = 0; j < kFaCols / 16; ++j) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fk; // K rows = columns of K^T
            wmma::load_matrix_sync(fk, ks + 16 * j * L::kLdH + 16 * kk, L::kLdH);
            wmma::mma_sync(acc[j], fq, fk, acc[j]);
          }
        }
#pragma unroll
        for (int j = 0; j < kFaCols / 16; ++j)
          wmma::store_matrix_sync(ss + r0 * L::kLdS + 16 * j, acc[j], L::kLdS, wmma::mem_row_major);
      }
      __syncwarp();
      { // online softmax: lanes 2i and 2i + 1 hold the two halves of row r0 + i
        const int r = r0 + lane / 2, half = lane & 1, p = rPos[r], lo = rLo[r];
        const bool rowIn = p >= 0 && rSeq[r] == seq;
        float sv[32], mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < 32; ++c) {
          const int col = 32 * half + c;
          const int64_t j = j0 + col;
          float x = ss[r * L::kLdS + col] * a.scale;
          if (a.softcap > 0)
            x = a.softcap * tanhf(x / a.softcap);
          sv[c] = rowIn && j >= lo && j <= p ? x : -INFINITY;
          mx = fmaxf(mx, sv[c]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float mOld = rM[r], mNew = fmaxf(mOld, mx);
        const float corr = mNew == -INFINITY ? 1.0f : expf(mOld - mNew);
        float sum = 0;
#pragma unroll
        for (int c = 0; c < 32; ++c) {
          const float pv = sv[c] == -INFINITY ? 0.0f : expf(sv[c] - mNew);
          sum += pv;
          ps[r * L::kLdP + 32 * half + c] = __float2half_rn(pv);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        __syncwarp(); // both lanes of the row have read rM[r]
        if (half == 0) {
          rM[r] = mNew;
          rL[r] = rL[r] * corr + sum;
          rCorr[r] = corr;
        }
      }
      __syncwarp();
      for (int i = lane; i < 16 * D; i += 32) {
        const int r = r0 + i / D;
        os[r * L::kLdO + i % D] *= rCorr[r];
      }
      __syncwarp();
      for (int jd = 0; jd < dv16; ++jd) { // O += P V, one 16-column block of the head at a time
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::load_matrix_sync(acc, os + r0 * L::kLdO + 16 * jd, L::kLdO, wmma::mem_row_major);
#pragma unroll
        for (int kk = 0; kk < kFaCols / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fp;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fv;
          wmma::load_matrix_sync(fp, ps + r0 * L::kLdP + 16 * kk, L::kLdP);
          wmma::load_matrix_sync(fv, vs + 16 * kk * L::kLdH + 16 * jd, L::kLdH);
          wmma::mma_sync(acc, fp, fv, acc);
        }
        wmma::store_matrix_sync(os + r0 * L::kLdO + 16 * jd, acc, L::kLdO, wmma::mem_row_major);
      }
      __syncthreads(); // K and V are overwritten next
    }
  }
  // y = O / l; a sink logit joins the denominator only.
  for (int64_t i = tid; i < int64_t(kFaRows) * a.dv; i += kFaThreads) {
    const int r = int(i / a.dv), c = int(i % a.dv);
    const int64_t ti = t0 + r;
    if (ti >= a.t)
      continue;
    const float m = rM[r], o = os[r * L::kLdO + c];
    float out;
    if (a.sinks) {
      const float sk = a.sinks[h], mf = fmaxf(m, sk), sc = m == -INFINITY ? 0.0f : expf(m - mf);
      out = o * sc / (rL[r] * sc + expf(sk - mf));
    } else {
      out = o / rL[r];
    }
    const int64_t idx = (ti * a.hq + h) * a.dv + c;
    a.y[idx] = a.gate ? out * sigmoidOf(a.gate[idx]) : out;
  }
}

/// Launches the prefill kernel for head dims up to D, raising its shared-memory limit (per call: the limit
/// belongs to the current GPU's context, and a prefill call launches this once per layer).
template <int D> void launchFlash(const AttentionArgs &a, cudaStream_t s) {
  TPC_CUDA_CHECK(cudaFuncSetAttribute(flashPrefillKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      FaLayout<D>::kBytes));
  const dim3 grid(static_cast<unsigned>((a.t + kFaRows - 1) / kFaRows), static_cast<unsigned>(a.hq));
  launchKernel(flashPrefillKernel<D>, grid, kFaThreads, FaLayout<D>::kBytes, s, a);
}

/// The prefill kernel runs: many tokens, an f16 cache, head dims of whole 16-byte rows, no quantized
/// output; TPC_CUDA_NO_FLASH=1 keeps the flash-decode kernel for every call (A/B runs).
bool useFlashPrefill(const AttentionArgs &a) {
  static const bool off = [] {
    const char *env = std::getenv("TPC_CUDA_NO_FLASH");
    return env && std::atoi(env) > 0;
  }();
  return !off && a.t >= kFlashMinTokens && a.typeK == KvStorage::F16 && a.typeV == KvStorage::F16 && !a.xq &&
         a.dk % 8 == 0 && a.dv % 8 == 0;
}

unsigned blocksFor(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 65535)));
}

} // namespace

//===----------------------------------------------------------------------===//
// launchers
//===----------------------------------------------------------------------===//

void launchRope(const RopeArgs &a, cudaStream_t s) {
  TPC_CUDA_ASSERT(a.nDims % 2 == 0 && a.nDims <= a.d, "rope: n_dims must be even and at most the head dim");
  if (a.t * a.h == 0)
    return;
  launchKernel(ropeKernel, blocksFor(a.t * a.h * std::max<int64_t>(a.d / 2, 1)), 256, 0, s, a);
  TPC_CUDA_CHECK(cudaGetLastError());
}

void launchNormRope(const NormRopeArgs &a, cudaStream_t s) {
  const RopeArgs &r = a.rope;
  TPC_CUDA_ASSERT(r.nDims % 2 == 0 && r.nDims <= r.d, "rope: n_dims must be even and at most the head dim");
  TPC_CUDA_ASSERT(a.parts >= 1 && a.parts <= 2 && r.d >= 1 && r.d <= 1024, "norm + rope: 1..2 parts, d <= 1024");
  const int64_t blocks = r.t * (a.part[0].h + (a.parts > 1 ? a.part[1].h : 0));
  if (blocks == 0)
    return;
  TPC_CUDA_ASSERT(blocks <= 0x7fffffff, "norm + rope: too many rows");
  launchKernel(normRopeKernel, static_cast<unsigned>(blocks), rowThreads(r.d), 0, s, a);
  TPC_CUDA_CHECK(cudaGetLastError());
}

void launchAttention(const AttentionArgs &a, cudaStream_t s) {
  if (a.t == 0 || a.hq == 0) // a device with no query heads of this layer
    return;
  TPC_CUDA_ASSERT(a.dk <= kMaxHeadDim && a.dv <= kMaxHeadDim, "attention: head dim above 256");
  TPC_CUDA_ASSERT(a.hkv > 0 && (a.group > 0 ? a.qHead0 + a.hq <= a.group * a.hkv : a.hq % a.hkv == 0),
                  "attention: query heads not a multiple of KV heads (or past group x KV heads)");
  TPC_CUDA_ASSERT(a.t <= 65535, "attention: more than 65535 tokens in one call");
  TPC_CUDA_ASSERT(!a.xq || a.dv % 32 == 0, "attention: quantized output needs head dims of whole 32-blocks");
  const int64_t n = a.t * a.hkv * (a.dk + a.dv);
  const bool f16 = a.typeK == KvStorage::F16 && a.typeV == KvStorage::F16;
  if (!f16 && (a.typeK != KvStorage::F32 || a.typeV != KvStorage::F32)) { // q8_0 / q4_0 or mixed halves
    TPC_CUDA_ASSERT((a.typeK == KvStorage::F32 || a.typeK == KvStorage::F16 || a.dk % 32 == 0) &&
                        (a.typeV == KvStorage::F32 || a.typeV == KvStorage::F16 || a.dv % 32 == 0),
                    "attention: a quantized cache half needs head dims of whole 32-blocks");
    const int64_t warps = a.t * ((a.hkv * a.dk + 31) / 32 + (a.hkv * a.dv + 31) / 32);
    launchKernel(appendAnyKernel, blocksFor(warps * 32), 256, 0, s, a);
    launchKernel(attentionKernel<AnyCache>, dim3(unsigned(a.hq), unsigned(a.t)), kAttnWarps * 32, 0, s, a);
  } else if (f16) {
    launchKernel(appendKernel<uint16_t>, blocksFor(n), 256, 0, s, a);
    if (useFlashPrefill(a)) {
      const int64_t d = std::max(a.dk, a.dv);
      if (d <= 64)
        launchFlash<64>(a, s);
      else if (d <= 128)
        launchFlash<128>(a, s);
      else
        launchFlash<256>(a, s);
    } else {
      launchKernel(attentionKernel<uint16_t>, dim3(unsigned(a.hq), unsigned(a.t)), kAttnWarps * 32, 0, s, a);
    }
  } else {
    launchKernel(appendKernel<float>, blocksFor(n), 256, 0, s, a);
    launchKernel(attentionKernel<float>, dim3(unsigned(a.hq), unsigned(a.t)), kAttnWarps * 32, 0, s, a);
  }
  TPC_CUDA_CHECK(cudaGetLastError());
}

} // namespace tpc::rt::cuda
