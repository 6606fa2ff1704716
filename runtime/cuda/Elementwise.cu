//===- Elementwise.cu - elementwise, row-wise and layout kernels ------------===//
//
// The f32 ops of runtime/exec/ElementwiseOps.cpp and the movers of ShapeOps.cpp that need a kernel
// (narrow/concat/copy of equal dtypes are cudaMemcpy2DAsync calls in the session). Section "kernels"
// then "launchers". Grid-stride loops everywhere, so grid sizes are capped and any size works; rows are
// reduced by one block each (rms_norm, softmax) with a shared-memory tree.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/Launch.cuh"
#include "runtime/cuda/Elementwise.cuh"
#include "runtime/cuda/Quant.cuh"
#include "runtime/cuda/Reduce.cuh"

#include <cuda_fp16.h>

#include <algorithm>

namespace tpc::rt::cuda {
namespace {

//===----------------------------------------------------------------------===//
// kernels
//===----------------------------------------------------------------------===//

/// The UnaryFn functions of PlanFormat.h (a value outside the enum passes x through; open() refuses such
/// plans).
__device__ __forceinline__ float unaryFn(UnaryFn fn, float x) {
  switch (fn) {
  case UnaryFn::Silu:
    return x / (1.0f + expf(-x));
  case UnaryFn::Gelu:
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  case UnaryFn::GeluTanh:
    return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  case UnaryFn::Tanh:
    return tanhf(x);
  case UnaryFn::Relu:
    return x > 0 ? x : 0.0f;
  case UnaryFn::Exp:
    return expf(x);
  case UnaryFn::Sigmoid:
    return 1.0f / (1.0f + expf(-x));
  case UnaryFn::Softplus: // as ggml: the identity above 20, where log(1 + exp(x)) rounds to x in f32
    return x > 20.0f ? x : log1pf(expf(x));
  case UnaryFn::SwigluOai: // two operands: gluKernel's (the step checks refuse it for Unary)
    break;
  }
  return x;
}

/// gpt-oss's clamped SwiGLU (the CPU's swigluOai: alpha 1.702, limit 7).
__device__ __forceinline__ float swigluOai(float g, float u) {
  const float x = fminf(g, 7.0f), l = fmaxf(fminf(u, 7.0f), -7.0f);
  return x / (1.0f + expf(-1.702f * x)) * (l + 1.0f);
}

__device__ __forceinline__ int64_t gridStart() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t gridStep() { return int64_t(gridDim.x) * blockDim.x; }

__global__ void binaryKernel(BinaryArgs a, int64_t n) {
  pdlEnter();
  for (int64_t i = gridStart(); i < n; i += gridStep()) {
    int64_t rem = i, bo = 0;
    for (int d = a.rank - 1; d >= 0; --d) {
      bo += (rem % a.shape[d]) * a.bStride[d];
      rem /= a.shape[d];
    }
    const float x = a.a[i], v = a.b[bo];
    switch (a.op) {
    case BinaryOp::Add:
      a.y[i] = x + v;
      break;
    case BinaryOp::Mul:
      a.y[i] = x * v;
      break;
    case BinaryOp::Div:
      a.y[i] = x / v;
      break;
    }
  }
}

__global__ void mapKernel(MapArgs a) {
  pdlEnter();
  for (int64_t i = gridStart(); i < a.n; i += gridStep()) {
    const float x = a.x[i];
    switch (a.kind) {
    case MapKind::Scale:
      a.y[i] = x * a.v;
      break;
    case MapKind::Softcap:
      a.y[i] = a.v * tanhf(x / a.v);
      break;
    case MapKind::Unary:
      a.y[i] = unaryFn(a.fn, x);
      break;
    }
  }
}

/// With xq: the warp of 32 consecutive elements (f a multiple of 32) also writes their quantized block.
__global__ void gluKernel(GluArgs a) {
  pdlEnter();
  const int64_t n = a.rows * a.f;
  for (int64_t i = gridStart(); i < n; i += gridStep()) {
    const int64_t r = i / a.f, c = i % a.f;
    const float g = a.g[r * a.gStride + c], u = a.u[r * a.gStride + c];
    const float v = a.fn == UnaryFn::SwigluOai ? swigluOai(g, u) : unaryFn(a.fn, g) * u;
    a.y[i] = v;
    if (a.xq)
      warpQuantize32(v, a.xq + (i & ~int64_t(31)), a.xs + i / 32);
  }
}

/// y[t, j, :] = x[t, j, :] + b[ids[t, j] - firstExpert, :] for the experts b holds; x's row elsewhere.
__global__ void addIdKernel(AddIdArgs a) {
  pdlEnter();
  const int64_t n = a.rows * a.n;
  for (int64_t i = gridStart(); i < n; i += gridStep()) {
    const int64_t r = i / a.n, c = i % a.n, e = int64_t(a.ids[r]) - a.firstExpert;
    a.y[i] = a.x[i] + (e >= 0 && e < a.experts ? a.b[e * a.n + c] : 0.0f);
  }
}

__device__ float blockMax(float v, float *red) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  v = lane < warps ? red[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Optionally adds r first (writing the sum), and quantizes the output for the integer GEMV (n a
/// multiple of 32, so each warp holds whole blocks). Rows of up to kNormCache elements per thread keep
/// their values (and w) in registers between the two passes, so decode's one-row call makes one trip to
/// memory instead of two; longer rows read them again. Every thread reads back only the elements it
/// wrote, so y or sum may alias x or r.
constexpr int kNormCache = 8;
__global__ void __launch_bounds__(1024) rmsNormKernel(RmsNormArgs a) {
  pdlEnter();
  __shared__ float red[32];
  const int64_t bd = blockDim.x;
  const bool cached = a.n <= kNormCache * bd;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const float *x = a.x + r * a.n, *res = a.r ? a.r + r * a.n : nullptr;
    float *sum = a.sum ? a.sum + r * a.n : nullptr, *y = a.y + r * a.n;
    auto in = [&](int64_t c) { return res ? x[c] + res[c] : x[c]; };
    auto out = [&](int64_t c, float o) {
      y[c] = o;
      if (a.xq)
        warpQuantize32(o, a.xq + r * a.n + (c & ~int64_t(31)), a.xs + (r * a.n + c) / 32);
    };
    float ss = 0, v[kNormCache], wv[kNormCache];
    if (cached) {
#pragma unroll
      for (int j = 0; j < kNormCache; ++j) {
        const int64_t c = threadIdx.x + j * bd;
        if (c < a.n) {
          v[j] = in(c);
          wv[j] = a.w ? a.w[c] : 1.0f;
          if (sum)
            sum[c] = v[j];
          ss += v[j] * v[j];
        }
      }
    } else {
      for (int64_t c = threadIdx.x; c < a.n; c += bd) {
        const float u = in(c);
        if (sum)
          sum[c] = u;
        ss += u * u;
      }
    }
    ss = blockSum(ss, red);
    const float k = rsqrtf(ss / float(a.n) + a.eps);
    if (cached) {
#pragma unroll
      for (int j = 0; j < kNormCache; ++j) {
        const int64_t c = threadIdx.x + j * bd;
        if (c < a.n)
          out(c, a.w ? v[j] * k * wv[j] : v[j] * k);
      }
    } else {
      for (int64_t c = threadIdx.x; c < a.n; c += bd) {
        const float u = sum ? sum[c] : in(c);
        out(c, a.w ? u * k * a.w[c] : u * k);
      }
    }
  }
}

__global__ void softmaxKernel(SoftmaxArgs a) {
  pdlEnter();
  __shared__ float red[32];
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const float *x = a.x + r * a.n;
    float *y = a.y + r * a.n;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < a.n; c += blockDim.x)
      m = fmaxf(m, x[c]);
    m = blockMax(m, red);
    float s = 0;
    for (int64_t c = threadIdx.x; c < a.n; c += blockDim.x) {
      const float e = expf(x[c] - m);
      y[c] = e;
      s += e;
    }
    const float inv = 1.0f / blockSum(s, red);
    for (int64_t c = threadIdx.x; c < a.n; c += blockDim.x)
      y[c] *= inv;
  }
}

/// One warp per row: k passes of "largest value not yet taken" (ties to the lower index), each a warp
/// arg-max reduction; k (experts per token) is small.
__global__ void topKKernel(TopKArgs a) {
  pdlEnter();
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < a.rows; r += warps) {
    const float *x = a.x + r * a.n;
    float prevV = INFINITY;
    int64_t prevI = -1;
    for (int64_t j = 0; j < a.k; ++j) {
      float bv = -INFINITY;
      int64_t bi = -1;
      for (int64_t c = lane; c < a.n; c += 32) {
        const float v = x[c];
        const bool after = v < prevV || (v == prevV && c > prevI); // not taken yet in (value desc, index asc)
        if (after && (bi < 0 || v > bv))
          bv = v, bi = c;
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi)))
          bv = ov, bi = oi;
      }
      if (lane == 0)
        a.y[r * a.k + j] = static_cast<int32_t>(bi < 0 ? 0 : bi);
      prevV = bv, prevI = bi;
    }
  }
}

/// softmaxKernel, topKKernel, takeAlongKernel, sumKernel and the div of binaryKernel on one row per
/// warp, the row's values in registers (lane holds c = lane + 32 j).
__global__ void routeTopKKernel(RouteTopKArgs a) {
  pdlEnter();
  constexpr int kJ = kRouteMaxExperts / 32;
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < a.rows; r += warps) {
    const float *x = a.x + r * a.n;
    float v[kJ];
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int64_t c = lane + 32 * j;
      v[j] = c < a.n ? x[c] : -INFINITY;
      m = fmaxf(m, v[j]);
    }
    for (int o = 16; o > 0; o >>= 1)
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0;
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      v[j] = lane + 32 * j < a.n ? expf(v[j] - m) : 0.0f;
      sum += v[j];
    }
    for (int o = 16; o > 0; o >>= 1)
      sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = 1.0f / sum;
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int64_t c = lane + 32 * j;
      v[j] *= inv;
      if (c < a.n)
        a.p[r * a.n + c] = v[j];
    }
    float prevV = INFINITY, total = 0;
    int64_t prevI = -1;
    for (int64_t t = 0; t < a.k; ++t) {
      float bv = -INFINITY;
      int64_t bi = -1;
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        const int64_t c = lane + 32 * j;
        const bool after = v[j] < prevV || (v[j] == prevV && c > prevI); // not taken yet
        if (c < a.n && after && (bi < 0 || v[j] > bv))
          bv = v[j], bi = c;
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi)))
          bv = ov, bi = oi;
      }
      const float w = bi < 0 ? 0.0f : bv;
      if (lane == 0) {
        a.ids[r * a.k + t] = static_cast<int32_t>(bi < 0 ? 0 : bi);
        a.w[r * a.k + t] = w;
      }
      total += w;
      prevV = bv, prevI = bi;
    }
    if (lane == 0) {
      a.s[r] = total;
      for (int64_t t = 0; t < a.k; ++t)
        a.wn[r * a.k + t] = a.w[r * a.k + t] / total; // this lane wrote w: reading it back is ordered
    }
  }
}

__global__ void takeAlongKernel(TakeAlongArgs a) {
  pdlEnter();
  const int64_t n = a.rows * a.k;
  for (int64_t i = gridStart(); i < n; i += gridStep()) {
    const int64_t r = i / a.k;
    const int32_t c = a.idx[i];
    a.y[i] = (c >= 0 && c < a.n) ? a.x[r * a.n + c] : 0.0f;
  }
}

__global__ void sumKernel(SumArgs a) {
  pdlEnter();
  const int64_t n = a.outer * a.inner;
  for (int64_t i = gridStart(); i < n; i += gridStep()) {
    const int64_t o = i / a.inner, c = i % a.inner;
    float acc = 0;
    for (int64_t d = 0; d < a.dim; ++d)
      acc += a.x[(o * a.dim + d) * a.inner + c];
    a.y[i] = acc;
  }
}

__global__ void expertCombineKernel(ExpertCombineArgs a) {
  pdlEnter();
  const int64_t n = a.t * a.n;
  for (int64_t i = gridStart(); i < n; i += gridStep()) {
    const int64_t r = i / a.n, c = i % a.n;
    float acc = 0;
    for (int64_t j = 0; j < a.k; ++j) {
      float m = 1;
      for (int q = 0; q < a.nm; ++q)
        m *= a.m[q][r * a.k + j];
      acc += m * a.x[(r * a.k + j) * a.n + c];
    }
    a.y[i] = acc;
  }
}

__global__ void convertKernel(ConvertArgs a) {
  pdlEnter();
  for (int64_t i = gridStart(); i < a.n; i += gridStep()) {
    if (a.toHalf)
      static_cast<__half *>(a.y)[i] = __float2half_rn(static_cast<const float *>(a.x)[i]);
    else
      static_cast<float *>(a.y)[i] = __half2float(static_cast<const __half *>(a.x)[i]);
  }
}

template <typename T> __global__ void permuteKernel(PermuteArgs a, int64_t n) {
  pdlEnter();
  const T *x = static_cast<const T *>(a.x);
  T *y = static_cast<T *>(a.y);
  for (int64_t i = gridStart(); i < n; i += gridStep()) {
    int64_t rem = i, off = 0;
    for (int d = a.rank - 1; d >= 0; --d) {
      off += (rem % a.yShape[d]) * a.srcStride[d];
      rem /= a.yShape[d];
    }
    y[i] = x[off];
  }
}

//===----------------------------------------------------------------------===//
// launchers
//===----------------------------------------------------------------------===//

constexpr int kThreads = 256;
/// Blocks for n grid-stride items: enough to fill the GPU, capped (the loops cover the rest).
unsigned blocksFor(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)));
}
unsigned rowBlocks(int64_t rows) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(rows, 65535)));
}

void done() { TPC_CUDA_CHECK(cudaGetLastError()); }

} // namespace

void launchBinary(const BinaryArgs &a, cudaStream_t s) {
  TPC_CUDA_ASSERT(a.rank >= 0 && a.rank <= kMaxRank, "binary: rank above 8");
  int64_t n = 1;
  for (int i = 0; i < a.rank; ++i)
    n *= a.shape[i];
  if (n == 0)
    return;
  launchKernel(binaryKernel, blocksFor(n), kThreads, 0, s, a, n);
  done();
}

void launchMap(const MapArgs &a, cudaStream_t s) {
  if (a.n == 0)
    return;
  launchKernel(mapKernel, blocksFor(a.n), kThreads, 0, s, a);
  done();
}

void launchAddId(const AddIdArgs &a, cudaStream_t s) {
  if (a.rows * a.n == 0)
    return;
  launchKernel(addIdKernel, blocksFor(a.rows * a.n), kThreads, 0, s, a);
}

void launchGlu(const GluArgs &a, cudaStream_t s) {
  if (a.rows * a.f == 0)
    return;
  TPC_CUDA_ASSERT(!a.xq || a.f % 32 == 0, "glu: quantized output needs rows of whole 32-blocks");
  launchKernel(gluKernel, blocksFor(a.rows * a.f), kThreads, 0, s, a);
  done();
}

void launchRmsNorm(const RmsNormArgs &a, cudaStream_t s) {
  if (a.rows == 0)
    return;
  TPC_CUDA_ASSERT(a.n > 0, "rms_norm: empty rows");
  TPC_CUDA_ASSERT(!a.xq || a.n % 32 == 0, "rms_norm: quantized output needs rows of whole 32-blocks");
  launchKernel(rmsNormKernel, rowBlocks(a.rows), rowThreads(a.n), 0, s, a);
  done();
}

void launchSoftmax(const SoftmaxArgs &a, cudaStream_t s) {
  if (a.rows == 0 || a.n == 0)
    return;
  launchKernel(softmaxKernel, rowBlocks(a.rows), rowThreads(a.n), 0, s, a);
  done();
}

void launchRouteTopK(const RouteTopKArgs &a, cudaStream_t s) {
  if (a.rows == 0)
    return;
  TPC_CUDA_ASSERT(a.n > 0 && a.n <= kRouteMaxExperts && a.k >= 1 && a.k <= a.n, "route top-k: sizes");
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((a.rows + 3) / 4, 65535));
  launchKernel(routeTopKKernel, blocks, 128, 0, s, a);
  done();
}

void launchTopK(const TopKArgs &a, cudaStream_t s) {
  if (a.rows == 0 || a.k == 0)
    return;
  TPC_CUDA_ASSERT(a.k <= a.n, "top_k: k larger than the row");
  launchKernel(topKKernel, blocksFor(a.rows * 32), kThreads, 0, s, a);
  done();
}

void launchTakeAlong(const TakeAlongArgs &a, cudaStream_t s) {
  if (a.rows * a.k == 0)
    return;
  launchKernel(takeAlongKernel, blocksFor(a.rows * a.k), kThreads, 0, s, a);
  done();
}

void launchSum(const SumArgs &a, cudaStream_t s) {
  if (a.outer * a.inner == 0)
    return;
  launchKernel(sumKernel, blocksFor(a.outer * a.inner), kThreads, 0, s, a);
  done();
}

void launchExpertCombine(const ExpertCombineArgs &a, cudaStream_t s) {
  TPC_CUDA_ASSERT(a.nm >= 0 && a.nm <= 4, "expert_combine: more than 4 multipliers");
  if (a.t * a.n == 0)
    return;
  launchKernel(expertCombineKernel, blocksFor(a.t * a.n), kThreads, 0, s, a);
  done();
}

void launchConvert(const ConvertArgs &a, cudaStream_t s) {
  if (a.n == 0)
    return;
  launchKernel(convertKernel, blocksFor(a.n), kThreads, 0, s, a);
  done();
}

void launchPermute(const PermuteArgs &a, cudaStream_t s) {
  TPC_CUDA_ASSERT(a.rank >= 1 && a.rank <= kMaxRank, "permute: rank must be 1..8");
  TPC_CUDA_ASSERT(a.elemBytes == 2 || a.elemBytes == 4, "permute: element size must be 2 or 4");
  int64_t n = 1;
  for (int i = 0; i < a.rank; ++i)
    n *= a.yShape[i];
  if (n == 0)
    return;
  if (a.elemBytes == 4)
    launchKernel(permuteKernel<uint32_t>, blocksFor(n), kThreads, 0, s, a, n);
  else
    launchKernel(permuteKernel<uint16_t>, blocksFor(n), kThreads, 0, s, a, n);
  done();
}

} // namespace tpc::rt::cuda
