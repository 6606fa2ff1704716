//===- Matmul.cu - GEMV, grouped expert GEMV, dequantization and row lookups ===//
//
// gemvKernel<T>: a block of 4 warps covers 8 weight rows, each warp two rows. Lanes walk the rows' 32-
// element chunks (lane, lane + 32, ...): a chunk of both rows is dequantized once into registers and
// dotted with up to kTile token rows of x, then the lanes' partial sums meet by shuffles. Weight bytes are
// read once per kTile tokens, which is what decode (one token) is bound by; x is read through L1.
// Grouped over experts by blockIdx.y: each block reads its expert's pair range from `offsets`, so one
// launch serves every expert and a capture of it in a CUDA graph stays valid for any routing.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/Matmul.cuh"
#include "runtime/cuda/Quant.cuh"

#include <algorithm>
#include <cstdlib>

static_assert(sizeof(tpc::rt::cuda::XQBlock) == tpc::rt::cuda::kXQBlockBytes);

namespace tpc::rt::cuda {
namespace {

constexpr int kWarps = 4;       // warps per GEMV block
constexpr int kRowsPerWarp = 2; // weight rows per warp when several tokens share them
constexpr int kTile = 4;        // token rows per pass over the weights (batches)
constexpr int kRowStep = 8;     // decode: weight rows per step of a block (their loads in flight together)

//===----------------------------------------------------------------------===//
// kernels
//===----------------------------------------------------------------------===//

/// Elements [32c, 32c + 32) of an x row of k floats (zeros past k).
__device__ __forceinline__ void loadX(const float *xr, int64_t c, int64_t k, bool vec, float xv[32]) {
  const int64_t base = c * 32;
  if (vec && base + 32 <= k) {
    const float4 *p = reinterpret_cast<const float4 *>(xr + base);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 v = p[i];
      xv[4 * i] = v.x, xv[4 * i + 1] = v.y, xv[4 * i + 2] = v.z, xv[4 * i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 32; ++i)
      xv[i] = base + i < k ? xr[base + i] : 0.0f;
  }
}

/// R weight rows per warp, NT token rows per pass over the weights. Decode (one pair per expert or one
/// token) uses R = NT = 1: fewest registers, so the most warps keep loads in flight.
template <GGMLType T, int R, int NT>
__global__ void __launch_bounds__(kWarps * 32) gemvKernel(GemvArgs a, bool vec) {
  int64_t e = blockIdx.y, begin = 0, end = a.count;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t(blockIdx.x) * kWarps + warp) * R;
  if (a.ids) { // one pair per block row
    begin = blockIdx.y;
    end = begin + 1;
    e = a.ids[begin];
    if (e < 0 || e >= a.experts) { // only a broken router gives this; keep the output defined
      for (int r = 0; r < R && lane == 0; ++r)
        if (row0 + r < a.n)
          a.y[begin * a.n + row0 + r] = 0.0f;
      return;
    }
  } else if (a.list) {
    begin = a.offsets[e];
    end = a.offsets[e + 1];
  }
  if (begin >= end || row0 >= a.n)
    return;
  const uint8_t *w[R];
#pragma unroll
  for (int r = 0; r < R; ++r) // rows past n re-read the last row; their results are not written
    w[r] = static_cast<const uint8_t *>(a.w) + e * a.expertStride + min(row0 + r, a.n - 1) * a.rowBytes;
  const int64_t chunks = (a.k + 31) / 32;
  for (int64_t p0 = begin; p0 < end; p0 += NT) {
    const int nt = end - p0 < NT ? static_cast<int>(end - p0) : NT;
    int64_t pair[NT];
#pragma unroll
    for (int i = 0; i < NT; ++i)
      pair[i] = i < nt ? (a.list ? a.list[p0 + i] : p0 + i) : 0;
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < NT; ++i)
        acc[r][i] = 0;
    for (int64_t c = lane; c < chunks; c += 32) {
      float wv[R][32];
#pragma unroll
      for (int r = 0; r < R; ++r)
        loadChunk<T>(w[r], c, a.k, wv[r]);
#pragma unroll
      for (int i = 0; i < NT; ++i) {
        if (i < nt) {
          float xv[32];
          loadX(a.x + (pair[i] / a.xDiv) * a.k, c, a.k, vec, xv);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            float s = 0;
#pragma unroll
            for (int j = 0; j < 32; ++j)
              s = fmaf(wv[r][j], xv[j], s);
            acc[r][i] += s;
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float s = acc[r][i];
        for (int o = 16; o > 0; o >>= 1)
          s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0 && i < nt && row0 + r < a.n)
          a.y[pair[i] * a.n + row0 + r] = s;
      }
  }
}

/// The activation side of the decode GEMV for weights of type T, one unit of kUnit weights at a time.
/// FloatUnit: the 32 float x values of a chunk and their sums (dotChunk). IntUnit: the row quantized to
/// 8 bits by launchQuantizeX, multiplied by dp4a (IntDot).
template <GGMLType T> struct FloatUnit {
  static constexpr int kUnit = 32;
  struct X {
    float v[32];
    XSums s;
  };
  __device__ static X load(const GemvArgs &a, int64_t xrow, int64_t u, bool vec) {
    X x;
    loadX(a.x + xrow * a.k, u, a.k, vec, x.v);
    x.s = xSums(x.v);
    return x;
  }
  __device__ static float dot(const uint8_t *row, int64_t u, int64_t k, const X &x) {
    return dotChunk<T>(row, u, k, x.v, x.s);
  }
};
template <GGMLType T> struct IntUnit {
  static constexpr int kUnit = IntDot<T>::kUnit;
  using X = typename IntDot<T>::X;
  __device__ static X load(const GemvArgs &a, int64_t xrow, int64_t u, bool) {
    return IntDot<T>::loadX(a.xq + xrow * a.k, a.xs + xrow * (a.k / 32), u);
  }
  __device__ static float dot(const uint8_t *row, int64_t u, int64_t, const X &x) {
    return IntDot<T>::dot(row, u, x);
  }
};

/// Decode GEMV with x held in registers: thread t owns units t, t + THREADS, ... (J of them) of the one
/// x row, loaded once per block; the block then walks its rows kRowStep at a time (their loads in
/// flight together), every thread dotting its units of each row, partial sums meeting in shared memory.
/// x is read once per block instead of once per row (the L1 traffic of x is what bounded the
/// row-per-warp kernel, at 92% L1 and 12% DRAM throughput in Nsight Compute).
template <class P, int THREADS, int J>
__global__ void __launch_bounds__(THREADS) gemvDecodeKernel(GemvArgs a, bool vec, int64_t rowsPerBlock) {
  constexpr int kW = THREADS / 32;
  __shared__ float part[kW][kRowStep];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  // The block's matrix: the one part whose block range holds blockIdx.x.
  const void *W = a.w;
  float *Y = a.y;
  int64_t N = a.n, bx = blockIdx.x;
  for (int q = 0; a.parts > 1 && q < a.parts; ++q) {
    const int64_t blocks = (a.nPart[q] + rowsPerBlock - 1) / rowsPerBlock;
    if (bx < blocks) {
      W = a.wPart[q], Y = a.yPart[q], N = a.nPart[q];
      break;
    }
    bx -= blocks;
  }
  const int64_t row0 = bx * rowsPerBlock, rowEnd = min(row0 + rowsPerBlock, N);
  int64_t p = 0, e = 0;
  if (a.ids) {
    p = blockIdx.y;
    e = a.ids[p];
    if (e < 0 || e >= a.experts) { // only a broken router gives this; keep the output defined
      for (int64_t r = row0 + tid; r < rowEnd; r += THREADS)
        Y[p * N + r] = 0.0f;
      return;
    }
  }
  const int64_t units = (a.k + P::kUnit - 1) / P::kUnit;
  typename P::X xv[J];
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int64_t u = tid + int64_t(THREADS) * j;
    if (u < units)
      xv[j] = P::load(a, p / a.xDiv, u, vec);
  }
  const uint8_t *wb = static_cast<const uint8_t *>(W) + e * a.expertStride;
  for (int64_t r = row0; r < rowEnd; r += kRowStep) {
    float acc[kRowStep];
#pragma unroll
    for (int q = 0; q < kRowStep; ++q) {
      acc[q] = 0;
      // Rows past the block's end (a block of fewer than kRowStep rows) re-read its last row: loads
      // without a branch stay batched across the kRowStep rows, which decode's speed depends on.
      const uint8_t *row = wb + min(r + q, rowEnd - 1) * a.rowBytes;
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int64_t u = tid + int64_t(THREADS) * j;
        if (u < units)
          acc[q] += P::dot(row, u, a.k, xv[j]);
      }
    }
#pragma unroll
    for (int q = 0; q < kRowStep; ++q) {
      float v = acc[q];
      for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0)
        part[warp][q] = v;
    }
    __syncthreads();
    if (tid < kRowStep && r + tid < rowEnd) {
      float v = 0;
#pragma unroll
      for (int w = 0; w < kW; ++w)
        v += part[w][tid];
      Y[p * N + r + tid] = v;
    }
    __syncthreads();
  }
}

/// One thread per 32-element block of the activation rows (k a multiple of 32).
__global__ void quantizeXKernel(const float *x, int64_t blocks, bool vec, int8_t *xq, XQBlock *xs) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= blocks)
    return;
  float v[32];
  loadX(x + 32 * i, 0, 32, vec, v);
  int8_t q[32];
  quantizeBlock32(v, q, xs[i]);
  int4 *o = reinterpret_cast<int4 *>(xq + 32 * i);
  o[0] = *reinterpret_cast<const int4 *>(q);
  o[1] = *reinterpret_cast<const int4 *>(q + 16);
}

/// One block: counts per expert, offsets, then every valid pair placed in its expert's range (the order
/// inside a range does not matter: each pair's result is computed on its own).
__global__ void routeKernel(RouteArgs a) {
  extern __shared__ int cursor[];
  for (int64_t e = threadIdx.x; e < a.experts; e += blockDim.x)
    cursor[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < a.count; p += blockDim.x) {
    const int32_t id = a.ids[p];
    if (id >= 0 && id < a.experts)
      atomicAdd(&cursor[id], 1);
    else
      for (int64_t c = 0; c < a.n; ++c) // only a broken router gives this; keep the output defined
        a.y[p * a.n + c] = 0.0f;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int s = 0;
    for (int64_t e = 0; e < a.experts; ++e) {
      const int c = cursor[e];
      a.offsets[e] = s;
      cursor[e] = s;
      s += c;
    }
    a.offsets[a.experts] = s;
  }
  __syncthreads();
  for (int64_t p = threadIdx.x; p < a.count; p += blockDim.x) {
    const int32_t id = a.ids[p];
    if (id >= 0 && id < a.experts)
      a.list[atomicAdd(&cursor[id], 1)] = static_cast<int32_t>(p);
  }
}

template <GGMLType T> __global__ void dequantF16Kernel(DequantArgs a) {
  const int64_t chunks = (a.k + 31) / 32, n = a.rows * chunks;
  __half *out = static_cast<__half *>(a.out);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / chunks, c = i % chunks;
    float w[32];
    loadChunk<T>(static_cast<const uint8_t *>(a.w) + (a.row0 + r) * a.rowBytes, c, a.k, w);
    __half *o = out + r * a.k + c * 32;
#pragma unroll
    for (int j = 0; j < 32; ++j)
      if (c * 32 + j < a.k)
        o[j] = __float2half_rn(w[j]);
  }
}

template <GGMLType T> __global__ void getRowsKernel(GetRowsArgs a) {
  const int64_t chunks = (a.k + 31) / 32, n = a.count * chunks;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / chunks, c = i % chunks;
    const int64_t id = int64_t(a.ids[r]) - a.idOffset; // a vocabulary-parallel share starts at idOffset
    float w[32];
    if (id >= 0 && id < a.rows)
      loadChunk<T>(static_cast<const uint8_t *>(a.table) + id * a.rowBytes, c, a.k, w);
    else
      for (int j = 0; j < 32; ++j)
        w[j] = 0;
    float *o = a.y + r * a.k + c * 32;
#pragma unroll
    for (int j = 0; j < 32; ++j)
      if (c * 32 + j < a.k)
        o[j] = w[j];
  }
}

//===----------------------------------------------------------------------===//
// launchers
//===----------------------------------------------------------------------===//

unsigned blocksFor(int64_t n, int threads) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 1 << 20)));
}

/// Per-type launches for dispatchType (member templates cannot live in function-local classes).
struct TypeProbe {
  template <GGMLType T> void operator()() {}
};
/// Thread shapes of the decode kernel by units per row: x in registers for up to 512 float units or
/// 1024 integer units (above that the row-per-warp kernel runs).
template <class P, bool kInt>
bool launchDecode(const GemvArgs &a, dim3 grid, bool vec, cudaStream_t s, int64_t rowsPerBlock, int64_t units) {
  if (units <= 32) // short rows (an expert's down projection): one warp, so fewer threads sit idle
    gemvDecodeKernel<P, 32, 1><<<grid, 32, 0, s>>>(a, vec, rowsPerBlock);
  else if (units <= 64)
    gemvDecodeKernel<P, 64, 1><<<grid, 64, 0, s>>>(a, vec, rowsPerBlock);
  else if (units <= 128)
    gemvDecodeKernel<P, 128, 1><<<grid, 128, 0, s>>>(a, vec, rowsPerBlock);
  else if (units <= 512)
    gemvDecodeKernel<P, 256, 2><<<grid, 256, 0, s>>>(a, vec, rowsPerBlock);
  else if constexpr (kInt) {
    if (units > 1024)
      return false;
    gemvDecodeKernel<P, 256, 4><<<grid, 256, 0, s>>>(a, vec, rowsPerBlock);
  } else
    return false;
  return true;
}

struct GemvLaunch {
  const GemvArgs &a;
  dim3 grid;
  bool vec;
  cudaStream_t s;
  bool decode;
  int64_t rowsPerBlock; ///< decode: rows per block (grid.x = ceil(n / rowsPerBlock))
  template <GGMLType T> void operator()() {
    if constexpr (hasIntDot(T))
      if (a.xq) { // gemvUsesIntDot said so; it also checked the units fit
        const bool ok = launchDecode<IntUnit<T>, true>(a, grid, vec, s, rowsPerBlock, a.k / IntDot<T>::kUnit);
        TPC_CUDA_ASSERT(ok, "gemv: integer decode shape");
        return;
      }
    if (decode && launchDecode<FloatUnit<T>, false>(a, grid, vec, s, rowsPerBlock, (a.k + 31) / 32))
      return;
    if (decode)
      gemvKernel<T, 1, 1><<<grid, kWarps * 32, 0, s>>>(a, vec);
    else
      gemvKernel<T, kRowsPerWarp, kTile><<<grid, kWarps * 32, 0, s>>>(a, vec);
  }
};
struct DequantLaunch {
  const DequantArgs &a;
  int64_t n;
  cudaStream_t s;
  template <GGMLType T> void operator()() { dequantF16Kernel<T><<<blocksFor(n, 256), 256, 0, s>>>(a); }
};
struct GetRowsLaunch {
  const GetRowsArgs &a;
  int64_t n;
  cudaStream_t s;
  template <GGMLType T> void operator()() { getRowsKernel<T><<<blocksFor(n, 256), 256, 0, s>>>(a); }
};

} // namespace

bool cudaSupportsType(GGMLType t) {
  TypeProbe probe;
  return dispatchType(t, probe);
}

void launchGemv(const GemvArgs &a, cudaStream_t s) {
  TPC_CUDA_ASSERT(a.experts >= 1 && a.experts <= 65535, "gemv: experts must be 1..65535");
  TPC_CUDA_ASSERT(a.list || a.ids || a.experts == 1, "gemv: several experts need a pair list or ids");
  TPC_CUDA_ASSERT(!a.ids || a.count <= 65535, "gemv: too many pairs for the per-pair grid");
  if (a.n == 0 || a.count == 0)
    return;
  if (a.k == 0) { // a device whose share of the reduction axis is empty: its partial sum is zero
    TPC_CUDA_ASSERT(!a.list, "gemv: k = 0 with experts");
    TPC_CUDA_CHECK(cudaMemsetAsync(a.y, 0, a.count * a.n * sizeof(float), s));
    return;
  }
  const bool vec = (reinterpret_cast<uintptr_t>(a.x) % 16 == 0) && a.k % 4 == 0;
  TPC_CUDA_ASSERT(!a.xq == !gemvUsesIntDot(a), "gemv: quantized activations given exactly when used");
  TPC_CUDA_ASSERT(a.parts == 1 || (a.parts <= GemvArgs::kMaxParts && gemvCanGroup(a)), "gemv: parts");
  // Decode: one token, or one (token, slot) pair per expert on average (MoE decode).
  const bool decode = a.ids || a.count == 1;
  int64_t rowsPerBlock = kWarps * (decode ? 1 : kRowsPerWarp);
  int64_t rows = a.n; // over all parts
  if (a.parts > 1) {
    rows = 0;
    for (int q = 0; q < a.parts; ++q)
      rows += a.nPart[q];
  }
  if (a.xq || (decode && (a.k + 31) / 32 <= 512)) {
    // Rows per block: a few blocks per multiprocessor over all pairs. Fewer, longer blocks reload x less
    // often; more blocks hide more latency. TPC_CUDA_GEMV_BLOCKS_PER_SM overrides the default (tuning).
    static const int64_t sms = [] {
      int dev = 0, n = 132;
      cudaGetDevice(&dev);
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
      return int64_t(n);
    }();
    static const int64_t perSm = [] {
      const char *env = std::getenv("TPC_CUDA_GEMV_BLOCKS_PER_SM");
      return sms * (env && std::atoi(env) > 0 ? std::atoi(env) : 8);
    }();
    const int64_t pairs = a.ids ? a.count : 1;
    const int64_t blocks = std::max<int64_t>(1, perSm / pairs);
    rowsPerBlock = std::min<int64_t>(
        256, std::max<int64_t>(kRowStep, (rows / blocks + kRowStep - 1) / kRowStep * kRowStep));
    // Too few rows for one block of kRowStep per multiprocessor (an MoE router): fewer rows per block
    // rather than idle multiprocessors.
    if (rows * pairs < kRowStep * sms)
      rowsPerBlock = std::max<int64_t>(1, (rows * pairs + sms - 1) / sms);
  }
  int64_t gridX = (a.n + rowsPerBlock - 1) / rowsPerBlock;
  if (a.parts > 1) {
    gridX = 0;
    for (int q = 0; q < a.parts; ++q)
      gridX += (a.nPart[q] + rowsPerBlock - 1) / rowsPerBlock;
  }
  const dim3 grid(static_cast<unsigned>(gridX),
                  static_cast<unsigned>(a.ids ? a.count : a.experts));
  GemvLaunch launch{a, grid, vec, s, decode, rowsPerBlock};
  TPC_CUDA_ASSERT(dispatchType(a.type, launch),
                  std::string("gemv: unsupported type ") + ggmlTypeName(a.type));
  TPC_CUDA_CHECK(cudaGetLastError());
}

bool gemvUsesIntDot(const GemvArgs &a) {
  // TPC_CUDA_GEMV_FLOAT=1 keeps float activations (A/B benchmarks of the two decode paths).
  static const bool off = [] {
    const char *env = std::getenv("TPC_CUDA_GEMV_FLOAT");
    return env && std::atoi(env) > 0;
  }();
  if (off || !hasIntDot(a.type) || a.k == 0 || a.k % 32 != 0 || !(a.ids || a.count == 1))
    return false;
  const int64_t unit = a.type == GGMLType::Q6_K ? 64 : 32;
  return a.k / unit <= 1024;
}

bool gemvCanGroup(const GemvArgs &a) {
  if (a.list || !(a.ids || a.count == 1) || a.k == 0)
    return false;
  return gemvUsesIntDot(a) || (a.k + 31) / 32 <= 512;
}

void launchQuantizeX(const float *x, int64_t rows, int64_t k, int8_t *xq, XQBlock *xs, cudaStream_t s) {
  TPC_CUDA_ASSERT(k % 32 == 0, "quantize x: k must be a multiple of 32");
  const int64_t blocks = rows * k / 32;
  if (blocks == 0)
    return;
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  quantizeXKernel<<<blocksFor(blocks, 128), 128, 0, s>>>(x, blocks, vec, xq, xs);
  TPC_CUDA_CHECK(cudaGetLastError());
}

void launchRouteExperts(const RouteArgs &a, cudaStream_t s) {
  TPC_CUDA_ASSERT(a.experts >= 1 && a.experts <= 8192, "mul_mat_id: experts must be 1..8192");
  routeKernel<<<1, 1024, a.experts * sizeof(int), s>>>(a);
  TPC_CUDA_CHECK(cudaGetLastError());
}

void launchDequantF16(const DequantArgs &a, cudaStream_t s) {
  if (a.rows == 0 || a.k == 0)
    return;
  const int64_t n = a.rows * ((a.k + 31) / 32);
  DequantLaunch launch{a, n, s};
  TPC_CUDA_ASSERT(dispatchType(a.type, launch),
                  std::string("dequant: unsupported type ") + ggmlTypeName(a.type));
  TPC_CUDA_CHECK(cudaGetLastError());
}

void launchGetRows(const GetRowsArgs &a, cudaStream_t s) {
  if (a.count == 0 || a.k == 0)
    return;
  const int64_t n = a.count * ((a.k + 31) / 32);
  GetRowsLaunch launch{a, n, s};
  TPC_CUDA_ASSERT(dispatchType(a.type, launch),
                  std::string("get_rows: unsupported type ") + ggmlTypeName(a.type));
  TPC_CUDA_CHECK(cudaGetLastError());
}

} // namespace tpc::rt::cuda
