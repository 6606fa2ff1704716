//===- Attention.cu - RoPE, KV append and flash-decode attention ------------===//
//
// RoPE computes its angles in double, as the CPU reference does, so long positions agree to f32
// rounding. The attention kernel keeps q in shared memory and, per warp, a running max m, denominator l
// and Dv/32 accumulators per lane; scores are warp dot products (lanes over the head dim, shuffle sum).
// GQA maps query head h to KV head h / (Hq / Hkv). Cache positions past a token's own are never read,
// and appended rows of later tokens of the same call are masked by causality, as on the CPU.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/Attention.cuh"
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/Launch.cuh"
#include "runtime/cuda/Quant.cuh"
#include "runtime/cuda/Reduce.cuh"

#include <cuda_fp16.h>

#include <algorithm>

namespace tpc::rt::cuda {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kPerLane = kMaxHeadDim / 32;
constexpr int kAttnWarps = 8;

//===----------------------------------------------------------------------===//
// kernels
//===----------------------------------------------------------------------===//

/// cos and sin of pair p's angle at position pos (in double, as the CPU reference computes it).
__device__ __forceinline__ void ropeAngle(const RopeArgs &a, int64_t p, int32_t pos, float &c, float &s) {
  double inv = double(a.freqScale) * pow(double(a.base), -2.0 * double(p) / double(a.nDims));
  if (a.freqFactors)
    inv /= double(a.freqFactors[p]);
  double sn, cs;
  sincos(double(pos) * inv, &sn, &cs);
  c = static_cast<float>(cs), s = static_cast<float>(sn);
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

template <typename C> __device__ __forceinline__ float cacheLoad(const C *p) {
  if constexpr (sizeof(C) == 2)
    return __half2float(*reinterpret_cast<const __half *>(p));
  else
    return *p;
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
  const int64_t kh = h / (a.hq / a.hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t c = threadIdx.x; c < a.dk; c += blockDim.x)
    qs[c] = a.q[(ti * a.hq + h) * a.dk + c];
  __syncthreads();
  const int64_t p = a.pos[ti];
  const int64_t lo = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
  const int64_t base = (a.seq ? a.seq[ti] : 0) * a.ctx; // the sequence's first cell
  const C *kc = static_cast<const C *>(a.kc), *vc = static_cast<const C *>(a.vc);
  float m = -INFINITY, l = 0, acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    acc[i] = 0;
  for (int64_t j = lo + warp; j <= p; j += kAttnWarps) {
    const int64_t cell = base + j % a.ctx;
    const C *kr = kc + (cell * a.hkv + kh) * a.dk;
    float sc = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < a.dk)
        sc += qs[c] * cacheLoad(kr + c);
    }
    for (int o = 16; o > 0; o >>= 1)
      sc += __shfl_xor_sync(0xffffffffu, sc, o);
    sc *= a.scale;
    if (a.softcap > 0)
      sc = a.softcap * tanhf(sc / a.softcap);
    const float mNew = fmaxf(m, sc);
    const float corr = expf(m - mNew), w = expf(sc - mNew);
    l = l * corr + w;
    const C *vr = vc + (cell * a.hkv + kh) * a.dv;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      acc[i] = acc[i] * corr + (c < a.dv ? w * cacheLoad(vr + c) : 0.0f);
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
    a.y[idx] = o * inv;
    if (a.xq) // dv % 32 == 0 and blockDim >= dv: every warp here holds whole blocks
      warpQuantize32(o * inv, a.xq + (idx & ~int64_t(31)), a.xs + idx / 32);
  }
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
  TPC_CUDA_ASSERT(a.hkv > 0 && a.hq % a.hkv == 0, "attention: query heads not a multiple of KV heads");
  TPC_CUDA_ASSERT(a.t <= 65535, "attention: more than 65535 tokens in one call");
  TPC_CUDA_ASSERT(!a.xq || a.dv % 32 == 0, "attention: quantized output needs head dims of whole 32-blocks");
  const int64_t n = a.t * a.hkv * (a.dk + a.dv);
  if (a.f16) {
    launchKernel(appendKernel<uint16_t>, blocksFor(n), 256, 0, s, a);
    launchKernel(attentionKernel<uint16_t>, dim3(unsigned(a.hq), unsigned(a.t)), kAttnWarps * 32, 0, s, a);
  } else {
    launchKernel(appendKernel<float>, blocksFor(n), 256, 0, s, a);
    launchKernel(attentionKernel<float>, dim3(unsigned(a.hq), unsigned(a.t)), kAttnWarps * 32, 0, s, a);
  }
  TPC_CUDA_CHECK(cudaGetLastError());
}

} // namespace tpc::rt::cuda
