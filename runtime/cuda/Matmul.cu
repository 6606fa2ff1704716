//===- Matmul.cu - GEMV, grouped expert GEMV, dequantization and row lookups ===//
//
// The decode GEMV (x in registers; 1 token, or up to 4 of a batched step), the batched integer GEMV (2..8
// tokens, or an expert's routed pairs), the float GEMV below, the activation quantizer, f16 dequantization
// for cuBLAS and get_rows. The routing of mul_mat_id is Route.cu, its tile GEMM TileGemm.cu.
// gemvKernel<T>: a block of 4 warps covers 8 weight rows, each warp two rows. Lanes walk the rows' 32-
// element chunks (lane, lane + 32, ...): a chunk of both rows is dequantized once into registers and
// dotted with up to kTile token rows of x, then the lanes' partial sums meet by shuffles. Weight bytes are
// read once per kTile tokens, which is what decode (one token) is bound by; x is read through L1.
// Grouped over experts by blockIdx.y: each block reads its expert's pair range from `offsets`, so one
// launch serves every expert and a capture of it in a CUDA graph stays valid for any routing.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/Launch.cuh"
#include "runtime/cuda/Matmul.cuh"
#include "runtime/cuda/Quant.cuh"

#include <algorithm>
#include <cstdlib>
#include <string>

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
  pdlEnter();
  int64_t e = blockIdx.y, begin = 0, end = a.count;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t(blockIdx.x) * kWarps + warp) * R;
  if (a.ids) { // one pair per block row
    begin = blockIdx.y;
    end = begin + 1;
    e = int64_t(a.ids[begin]) - a.firstExpert;
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
/// 8 bits by launchQuantizeX, multiplied by dp4a (IntDot). fetch() issues a unit's weight loads, dot()
/// uses them: the kernel fetches kFetchRows rows before the first dot, so their loads are in flight
/// together (the float units load inside dot; their Raw is the row).
template <GGMLType T> struct FloatUnit {
  static constexpr int kUnit = 32, kFetchRows = 8, kMinThreadsPerSm = 1; // float rows need their registers
  struct X {
    float v[32];
    XSums s;
  };
  struct Raw {
    const uint8_t *row;
  };
  __device__ static X load(const GemvArgs &a, int64_t xrow, int64_t u, bool vec) {
    X x;
    loadX(a.x + xrow * a.k, u, a.k, vec, x.v);
    x.s = xSums(x.v);
    return x;
  }
  __device__ static Raw fetch(const uint8_t *row, int64_t) { return {row}; }
  __device__ static float dot(const Raw &r, int64_t u, int64_t k, const X &x) {
    return dotChunk<T>(r.row, u, k, x.v, x.s);
  }
};
template <GGMLType T> struct IntUnit {
  static constexpr int kUnit = IntDot<T>::kUnit, kFetchRows = IntDot<T>::kFetchRows;
  static constexpr int kMinThreadsPerSm = 512; // at most 128 registers: 16 warps keep loads in flight
  /// Rows a lane of the batched GEMV keeps in flight at up to 4 tokens: 2 for q5_K (three 16-byte loads a
  /// unit) and the 64-weight units (q2_K, q3_K, q6_K: 20-24 registers unpacked), which spill with 4 under
  /// the 128-register cap.
  static constexpr int kBatchRows = T == GGMLType::Q5_K || IntDot<T>::kUnit == 64 ? 2 : 4;
  using X = typename IntDot<T>::X;
  using Raw = typename IntDot<T>::Raw;
  using W = typename IntDot<T>::W;
  __device__ static W prep(const Raw &r, int64_t u) { return IntDot<T>::prep(r, u); }
  __device__ static float dot(const W &w, const X &x) { return IntDot<T>::dot(w, x); }
  __device__ static X load(const GemvArgs &a, int64_t xrow, int64_t u, bool) {
    return IntDot<T>::loadX(a.xq + xrow * a.k, a.xs + xrow * (a.k / 32), u);
  }
  __device__ static Raw fetch(const uint8_t *row, int64_t u) { return IntDot<T>::fetch(row, u); }
  __device__ static float dot(const Raw &r, int64_t u, int64_t, const X &x) { return IntDot<T>::dot(r, u, x); }
};

/// The matrix a GEMV block works on: the one part whose range of blocks holds blockIdx.x (parts > 1: Q, K,
/// V or gate, up in one launch, each part's rows in blocks of rowsPerBlock), and the block's index in it.
struct BlockPart {
  const void *w;
  float *y;
  int64_t n, bx;
};
__device__ __forceinline__ BlockPart blockPart(const GemvArgs &a, int64_t rowsPerBlock) {
  BlockPart b{a.w, a.y, a.n, int64_t(blockIdx.x)};
  for (int q = 0; a.parts > 1 && q < a.parts; ++q) {
    const int64_t blocks = (a.nPart[q] + rowsPerBlock - 1) / rowsPerBlock;
    if (b.bx < blocks) {
      b.w = a.wPart[q], b.y = a.yPart[q], b.n = a.nPart[q];
      break;
    }
    b.bx -= blocks;
  }
  return b;
}

/// One round of warpTransposeSum: the first C of a lane's values become C / 2, each the sum of the kept
/// half with the half the lane `O` away sends (lanes with bit O keep the upper half). Every index is a
/// constant, so the values stay in registers.
template <int C, int O, int V> __device__ __forceinline__ void transposeRound(float (&v)[V], int lane) {
  if constexpr (C > 1) {
    const bool upper = lane & O;
#pragma unroll
    for (int i = 0; i < C / 2; ++i) {
      const float send = upper ? v[i] : v[i + C / 2], keep = upper ? v[i + C / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
    transposeRound<C / 2, O / 2, V>(v, lane);
  }
}

/// log2(32 / V): lane l holds value (l >> transposeShift(V)) % V after warpTransposeSum<V>.
__host__ __device__ constexpr int transposeShift(int v) { return v >= 32 ? 0 : 1 + transposeShift(2 * v); }

/// Sums V (a power of two, at most 32) values over a warp with V - 1 + 5 - log2(V) shuffles instead of
/// 5V: each round halves the values a lane keeps, trading the other half with the lane `o` away, then the
/// last value is summed over the lanes that are left. Lane l ends with value (l >> transposeShift(V)) % V
/// summed over all 32 lanes.
template <int V> __device__ __forceinline__ float warpTransposeSum(float (&v)[V]) {
  static_assert(V >= 1 && V <= 32 && (V & (V - 1)) == 0, "a power of two of sums, at most 32");
  const int lane = threadIdx.x % 32;
  transposeRound<V, 16, V>(v, lane);
  float r = v[0];
#pragma unroll
  for (int o = 16 / V; o >= 1; o /= 2)
    r += __shfl_xor_sync(0xffffffffu, r, o);
  return r;
}

/// Decode GEMV with x held in registers: thread t owns units t, t + THREADS, ... (J of them) of the one
/// x row, loaded once per block; the block then walks its rows kRowStep at a time, every thread dotting
/// its units of each row, partial sums meeting in shared memory. A thread fetches kFetchRows rows' units
/// before dotting them (their loads in flight together). x is read once per block instead of once per
/// row (the L1 traffic of x is what bounded the row-per-warp kernel, at 92% L1 and 12% DRAM throughput in
/// Nsight Compute). The first fetch is issued before pdlWait(): weights never change, so the block's first
/// loads overlap the previous kernel's tail (launchKernel); the expert of a routed call is known only
/// after the wait. NT > 1 (integer units, plain calls of up to NT tokens: a batched decode step): every
/// token's x unit stays in registers too, each fetched unit is unpacked once (prep) and dotted with each
/// token's, and fewer rows are fetched at once (the x registers take their place); the sums of a row
/// step meet by a transposing shuffle reduction.
template <class P, int THREADS, int J, int NT = 1>
__global__ void __launch_bounds__(THREADS, P::kMinThreadsPerSm / THREADS)
    gemvDecodeKernel(GemvArgs a, bool vec, int64_t rowsPerBlock) {
  // kB rows fetched at once; units per thread (J) and tokens (NT) share the registers.
  constexpr int kW = THREADS / 32, kB1 = P::kFetchRows / J > 0 ? P::kFetchRows / J : 1;
  constexpr int kB = kB1 / NT > 0 ? kB1 / NT : 1;
  static_assert(kRowStep % kB == 0, "row step in whole fetches");
  __shared__ float part[kW][kRowStep * NT];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const BlockPart mine = blockPart(a, rowsPerBlock);
  const void *W = mine.w;
  float *Y = mine.y;
  const int64_t N = mine.n, bx = mine.bx;
  const int64_t row0 = bx * rowsPerBlock, rowEnd = min(row0 + rowsPerBlock, N);
  const int64_t units = (a.k + P::kUnit - 1) / P::kUnit;
  const uint8_t *wb = static_cast<const uint8_t *>(W);
  // kB rows' unit j from row r on. Rows past the block's end (a block of fewer than kRowStep rows)
  // re-read its last row: loads without a branch stay batched, which decode's speed depends on.
  typename P::Raw raw[kB];
  auto fetch = [&](int64_t r, int j) {
    const int64_t u = min(tid + int64_t(THREADS) * j, units - 1);
#pragma unroll
    for (int q = 0; q < kB; ++q)
      raw[q] = P::fetch(wb + min(r + q, rowEnd - 1) * a.rowBytes, u);
  };
  if (!a.ids)
    fetch(row0, 0);
  pdlWait(); // the next kernel is let in only after the row loop: see the trigger below
  int64_t p = 0;
  if (a.ids) {
    p = blockIdx.y;
    const int64_t e = int64_t(a.ids[p]) - a.firstExpert;
    if (e < 0 || e >= a.experts) { // only a broken router gives this; keep the output defined
      for (int64_t r = row0 + tid; r < rowEnd; r += THREADS)
        Y[p * N + r] = 0.0f;
      return;
    }
    wb += e * a.expertStride;
    fetch(row0, 0);
  }
  // Token i of a batched call reads x row i (plain calls only: no ids, xDiv 1); nt of NT are present.
  const int nt = NT == 1 ? 1 : int(a.count);
  typename P::X xv[J][NT];
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int64_t u = tid + int64_t(THREADS) * j;
#pragma unroll
    for (int i = 0; i < NT; ++i)
      if (u < units && i < nt)
        xv[j][i] = P::load(a, NT == 1 ? p / a.xDiv : i, u, vec);
  }
  for (int64_t r = row0; r < rowEnd; r += kRowStep) {
    float acc[kRowStep * NT];
#pragma unroll
    for (int q = 0; q < kRowStep * NT; ++q)
      acc[q] = 0;
#pragma unroll
    for (int b = 0; b < kRowStep; b += kB)
#pragma unroll
      for (int j = 0; j < J; ++j) {
        if (b + j > 0 || r > row0) // the block's first fetch was issued above
          fetch(r + b, j);
        const int64_t u = tid + int64_t(THREADS) * j;
        if (u < units)
#pragma unroll
          for (int q = 0; q < kB; ++q) {
            if constexpr (NT == 1) {
              acc[b + q] += P::dot(raw[q], u, a.k, xv[j][0]);
            } else {
              const typename P::W w = P::prep(raw[q], u);
#pragma unroll
              for (int i = 0; i < NT; ++i)
                if (i < nt)
                  acc[(b + q) * NT + i] += P::dot(w, xv[j][i]);
            }
          }
      }
    if constexpr (NT == 1) {
#pragma unroll
      for (int q = 0; q < kRowStep; ++q) {
        float v = acc[q];
        for (int o = 16; o > 0; o >>= 1)
          v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0)
          part[warp][q] = v;
      }
    } else {
      constexpr int kShift = transposeShift(kRowStep * NT);
      const float v = warpTransposeSum<kRowStep * NT>(acc);
      if ((lane & ((1 << kShift) - 1)) == 0)
        part[warp][(lane >> kShift) & (kRowStep * NT - 1)] = v;
    }
    __syncthreads();
    if (tid < kRowStep * NT) { // row r + tid / NT of token tid % NT (of the pair p when NT == 1)
      const int q = tid / NT, i = tid % NT;
      if (r + q < rowEnd && i < nt) {
        float v = 0;
#pragma unroll
        for (int w = 0; w < kW; ++w)
          v += part[w][tid];
        Y[(NT == 1 ? p : i) * N + r + q] = v;
      }
    }
    __syncthreads();
  }
  // Late: the next kernel's blocks take the slots these blocks free, spread like them. Triggered at the
  // start, a chain of waiting kernels filled the GPU ahead of time, unevenly, and one-token decode of
  // qwen3-30b-a3b lost 17% (llama3-8b 3%).
  pdlTrigger();
}

/// Batched integer GEMV: NT token rows per pass over the weights, for the 2..kGemvBatchMax rows of a
/// batched decode step (one token of each of several sequences) that the decode kernel does not take, and
/// for the pairs of each expert of a routed mul_mat_id (blockIdx.y the expert). The warps of a block form
/// groups of `split` warps; a group owns RS weight rows and its warps share their units (u = warp-in-group
/// * 32 + lane, stride split * 32), so a matrix of few rows still spreads over the GPU. Per unit a lane
/// fetches the RS rows' bytes (in flight together), unpacks each once (prep) and dots it with that unit of
/// every token's quantized x (read through L1: all blocks read the same few rows), so a weight byte crosses
/// DRAM once per NT tokens and the unpacking is paid once, not once per token. Sums meet by a transposing
/// shuffle reduction, then across the group's warps in shared memory. Any row length works (the decode
/// kernel keeps x in registers and stops at 1024 units). Parts (Q, K, V; gate, up) are blocks of blockIdx.x
/// as in the decode kernel. The first unit of a plain call is fetched before pdlWait (weights never change);
/// the next kernel is let in after the work, as in the decode kernel. One row group a block: blocks walking
/// several (a one-wave grid, the next group's loads issued during the reduction) were slower on an H200,
/// llama3-8b's step of 8 sequences 13.0 against 10.4 ms (the block's barriers serialise its warps; many
/// short blocks overlap).
template <class P, int RS, int NT>
__global__ void __launch_bounds__(kWarps * 32, 4) gemvBatchKernel(GemvArgs a, int split) {
  constexpr int V = RS * NT, kShift = transposeShift(V);
  static_assert(V <= 16, "at most 16 sums a lane");
  __shared__ float part[kWarps][V];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, groups = kWarps / split;
  const int group = warp / split, inGroup = warp % split;
  const BlockPart mine = blockPart(a, int64_t(RS) * groups);
  const int64_t N = mine.n, row0 = (mine.bx * groups + group) * RS, e = blockIdx.y, units = a.k / P::kUnit;
  const int64_t u0 = int64_t(inGroup) * 32 + lane, ustep = int64_t(split) * 32;
  const uint8_t *w[RS];
#pragma unroll
  for (int r = 0; r < RS; ++r) // rows past N re-read the last row; their results are not written
    w[r] = static_cast<const uint8_t *>(mine.w) + e * a.expertStride + min(row0 + r, N - 1) * a.rowBytes;
  typename P::Raw raw[RS];
  bool fetched = false;
  if (!a.list && u0 < units) {
#pragma unroll
    for (int r = 0; r < RS; ++r)
      raw[r] = P::fetch(w[r], u0);
    fetched = true;
  }
  pdlWait();
  int64_t begin = 0, end = a.count;
  if (a.list) {
    begin = a.offsets[e];
    end = a.offsets[e + 1];
  }
  for (int64_t p0 = begin; p0 < end; p0 += NT) {
    const int nt = end - p0 < NT ? static_cast<int>(end - p0) : NT;
    int64_t pair[NT], xrow[NT]; // the x rows once per pass: a 64-bit division is ~70 instructions
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      pair[i] = i < nt ? (a.list ? a.list[p0 + i] : p0 + i) : 0;
      xrow[i] = a.xDiv == 1 ? pair[i] : pair[i] / a.xDiv;
    }
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j)
      acc[j] = 0;
    for (int64_t u = u0; u < units; u += ustep) {
      if (!fetched)
#pragma unroll
        for (int r = 0; r < RS; ++r)
          raw[r] = P::fetch(w[r], u);
      fetched = false;
      typename P::W wv[RS];
#pragma unroll
      for (int r = 0; r < RS; ++r)
        wv[r] = P::prep(raw[r], u);
#pragma unroll
      for (int i = 0; i < NT; ++i)
        if (i < nt) {
          const typename P::X x = P::load(a, xrow[i], u, false);
#pragma unroll
          for (int r = 0; r < RS; ++r)
            acc[r * NT + i] += P::dot(wv[r], x);
        }
    }
    const float v = warpTransposeSum<V>(acc);
    if ((lane & ((1 << kShift) - 1)) == 0)
      part[warp][(lane >> kShift) & (V - 1)] = v;
    __syncthreads();
    // Lane j of each group's first warp writes row j / NT of token j % NT.
    if (inGroup == 0 && lane < V) {
      const int r = lane / NT, i = lane % NT;
      if (i < nt && row0 + r < N) {
        float sum = 0;
        for (int g = 0; g < split; ++g)
          sum += part[warp + g][lane];
        mine.y[pair[i] * N + row0 + r] = sum;
      }
    }
    __syncthreads(); // part is written again by the next pass
  }
  pdlTrigger();
}

/// One thread per 32-element block of the activation rows (k a multiple of 32).
__global__ void quantizeXKernel(const float *x, int64_t blocks, bool vec, int8_t *xq, XQBlock *xs) {
  pdlEnter();
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

template <GGMLType T> __global__ void dequantF16Kernel(DequantArgs a) {
  pdlEnter();
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
  pdlEnter();
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
/// Multiprocessors of the current GPU.
int64_t smCount() {
  static const int64_t sms = [] {
    int dev = 0, n = 132;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return int64_t(n);
  }();
  return sms;
}

/// Blocks of rowsPerBlock rows over every part of a GEMV (the grid's x; blockPart undoes it).
int64_t partBlocks(const GemvArgs &a, int64_t rowsPerBlock) {
  if (a.parts <= 1)
    return (a.n + rowsPerBlock - 1) / rowsPerBlock;
  int64_t blocks = 0;
  for (int q = 0; q < a.parts; ++q)
    blocks += (a.nPart[q] + rowsPerBlock - 1) / rowsPerBlock;
  return blocks;
}

/// Rows per block of a decode launch whose kernel of `threads` keeps `resident` blocks per multiprocessor:
/// one wave over all parts and pairs (fewer, longer blocks reload x less often; a second wave would run on
/// a mostly idle GPU), at most 32 warps per multiprocessor (8 blocks of 128 threads, 32 one-warp blocks of
/// a short expert row). TPC_CUDA_GEMV_BLOCKS_PER_SM caps the blocks per multiprocessor instead (tuning).
int64_t decodeRowsPerBlock(const GemvArgs &a, int resident, int threads) {
  static const int env = [] {
    const char *e = std::getenv("TPC_CUDA_GEMV_BLOCKS_PER_SM");
    return e && std::atoi(e) > 0 ? std::atoi(e) : 0;
  }();
  const int cap = env ? env : std::max(1, 1024 / threads);
  const int64_t sms = smCount();
  int64_t rows = a.n; // over all parts
  if (a.parts > 1) {
    rows = 0;
    for (int q = 0; q < a.parts; ++q)
      rows += a.nPart[q];
  }
  const int64_t pairs = a.ids ? a.count : 1;
  const int64_t blocks = std::max<int64_t>(1, sms * std::min(resident, cap) / pairs);
  // Too few rows for one block of kRowStep per multiprocessor (an MoE router): fewer rows per block
  // rather than idle multiprocessors.
  if (rows * pairs < kRowStep * sms)
    return std::max<int64_t>(1, (rows * pairs + sms - 1) / sms);
  const int64_t steps = ((rows + blocks - 1) / blocks + kRowStep - 1) / kRowStep; // kRowStep rows each
  return std::clamp<int64_t>(steps * kRowStep, kRowStep, 256);
}

/// Launches one thread shape of the decode kernel, sized by its occupancy.
template <class P, int THREADS, int J, int NT = 1>
void launchDecodeShape(const GemvArgs &a, bool vec, cudaStream_t s) {
  static const int resident = [] {
    int n = 0;
    TPC_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gemvDecodeKernel<P, THREADS, J, NT>, THREADS, 0));
    return std::max(1, n);
  }();
  const int64_t rowsPerBlock = decodeRowsPerBlock(a, resident, THREADS);
  const int64_t gridX = partBlocks(a, rowsPerBlock);
  const dim3 grid(static_cast<unsigned>(gridX), static_cast<unsigned>(a.ids ? a.count : 1));
  launchKernel(gemvDecodeKernel<P, THREADS, J, NT>, grid, THREADS, 0, s, a, vec, rowsPerBlock);
}

/// Thread shapes of the decode kernel by units per row: x in registers for up to 512 float units or
/// 1024 integer units (above that the row-per-warp kernel runs); with 2 tokens up to 512 units (256 for
/// the 64-weight units), with 4 up to 256 (the x of every token in registers; the batched kernel takes
/// longer rows).
/// False where no shape fits.
template <class P, bool kInt, int NT = 1>
bool launchDecode(const GemvArgs &a, bool vec, cudaStream_t s, int64_t units) {
  if (units <= 32) // short rows (an expert's down projection): one warp, so fewer threads sit idle
    launchDecodeShape<P, 32, 1, NT>(a, vec, s);
  else if (units <= 64)
    launchDecodeShape<P, 64, 1, NT>(a, vec, s);
  else if (units <= 128)
    launchDecodeShape<P, 128, 1, NT>(a, vec, s);
  else if (units <= 256)
    launchDecodeShape<P, 256, 1, NT>(a, vec, s);
  else if constexpr (NT == 1 || (NT == 2 && P::kUnit == 32)) { // 64-weight units: 2-token x in 2 would spill
    if (units <= 512)
      launchDecodeShape<P, 256, 2, NT>(a, vec, s);
    else if constexpr (kInt && NT == 1) {
      if (units > 1024)
        return false;
      launchDecodeShape<P, 256, 4>(a, vec, s);
    } else
      return false;
  } else
    return false;
  return true;
}

/// The batched integer GEMV over all parts, NT tokens per pass; RS rows per group keep at most 16 sums a
/// lane (and P::kBatchRows). Warps per row group: as many as the row has 32-unit strides, up to all kWarps
/// of the block.
template <class P, int NT> void launchBatch(const GemvArgs &a, cudaStream_t s) {
  constexpr int RS = NT >= 8 ? 2 : P::kBatchRows;
  const int64_t units = a.k / P::kUnit;
  const int split = units >= 96 ? 4 : units >= 64 ? 2 : 1;
  const int64_t gridX = partBlocks(a, int64_t(RS) * (kWarps / split));
  const dim3 grid(static_cast<unsigned>(gridX), static_cast<unsigned>(a.list ? a.experts : 1));
  launchKernel(gemvBatchKernel<P, RS, NT>, grid, kWarps * 32, 0, s, a, split);
}

struct GemvLaunch {
  const GemvArgs &a;
  bool vec;
  cudaStream_t s;
  bool decode;
  template <GGMLType T> void operator()() {
    if constexpr (hasIntDot(T))
      if (a.xq) { // gemvUsesIntDot said so; it also checked the units fit
        if (!decode) { // 2..kGemvBatchMax tokens, or an expert's pairs after routing (mostly a few)
          // Up to 4 tokens on rows that fit: the decode kernel with every token's x in registers.
          const int64_t units = a.k / IntDot<T>::kUnit;
          if (!a.list && a.count <= 2 && launchDecode<IntUnit<T>, true, 2>(a, vec, s, units))
            return;
          if constexpr (IntDot<T>::kUnit == 32) // a 64-weight unit's x of 4 tokens (96 registers) would spill
            if (!a.list && a.count <= 4 && launchDecode<IntUnit<T>, true, 4>(a, vec, s, units))
              return;
          if (a.list)
            launchBatch<IntUnit<T>, 4>(a, s);
          else if (a.count > 4)
            launchBatch<IntUnit<T>, 8>(a, s);
          else if (a.count > 2)
            launchBatch<IntUnit<T>, 4>(a, s);
          else
            launchBatch<IntUnit<T>, 2>(a, s);
          return;
        }
        const bool ok = launchDecode<IntUnit<T>, true>(a, vec, s, a.k / IntDot<T>::kUnit);
        TPC_CUDA_ASSERT(ok, "gemv: integer decode shape");
        return;
      }
    if (decode && launchDecode<FloatUnit<T>, false>(a, vec, s, (a.k + 31) / 32))
      return;
    // Row-per-warp kernel: kWarps warps of R rows per block.
    const int64_t rowsPerBlock = kWarps * (decode ? 1 : kRowsPerWarp);
    const dim3 grid(static_cast<unsigned>((a.n + rowsPerBlock - 1) / rowsPerBlock),
                    static_cast<unsigned>(a.ids ? a.count : a.experts));
    if (decode)
      launchKernel(gemvKernel<T, 1, 1>, grid, kWarps * 32, 0, s, a, vec);
    else
      launchKernel(gemvKernel<T, kRowsPerWarp, kTile>, grid, kWarps * 32, 0, s, a, vec);
  }
};
struct DequantLaunch {
  const DequantArgs &a;
  int64_t n;
  cudaStream_t s;
  template <GGMLType T> void operator()() { launchKernel(dequantF16Kernel<T>, blocksFor(n, 256), 256, 0, s, a); }
};
struct GetRowsLaunch {
  const GetRowsArgs &a;
  int64_t n;
  cudaStream_t s;
  template <GGMLType T> void operator()() { launchKernel(getRowsKernel<T>, blocksFor(n, 256), 256, 0, s, a); }
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
  GemvLaunch launch{a, vec, s, decode};
  TPC_CUDA_ASSERT(dispatchType(a.type, launch),
                  std::string("gemv: unsupported type ") + ggmlTypeName(a.type));
  TPC_CUDA_CHECK(cudaGetLastError());
}

bool gemvUsesIntDot(const GemvArgs &a) {
  // TPC_CUDA_GEMV_FLOAT=1 keeps float activations (A/B benchmarks of the two decode paths); =experts only
  // for mul_mat_id's experts, =dense only for the other matmuls (to tell where a difference comes from).
  static const int off = [] { // bit 1: dense, bit 2: experts
    const char *env = std::getenv("TPC_CUDA_GEMV_FLOAT");
    if (!env)
      return 0;
    const std::string v = env;
    return v == "experts" ? 2 : v == "dense" ? 1 : std::atoi(env) > 0 ? 3 : 0;
  }();
  if ((off & (a.ids || a.list ? 2 : 1)) || !hasIntDot(a.type) || a.k == 0 || a.k % 32 != 0)
    return false;
  if (a.ids || a.count == 1) { // the decode kernel holds x in registers: at most 1024 units
    return a.k / intDotUnit(a.type) <= 1024;
  }
  // The batched kernel reads x through L1: any row length (a unit of 64 divides k: 256-blocks).
  return a.list || a.count <= kGemvBatchMax;
}

bool gemvCanGroup(const GemvArgs &a) {
  if (a.list || a.k == 0)
    return false;
  if (!(a.ids || a.count == 1)) // batched: the integer kernel only (the float one takes no parts)
    return a.count <= kGemvBatchMax && gemvUsesIntDot(a);
  return gemvUsesIntDot(a) || (a.k + 31) / 32 <= 512;
}

void launchQuantizeX(const float *x, int64_t rows, int64_t k, int8_t *xq, XQBlock *xs, cudaStream_t s) {
  TPC_CUDA_ASSERT(k % 32 == 0, "quantize x: k must be a multiple of 32");
  const int64_t blocks = rows * k / 32;
  if (blocks == 0)
    return;
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  launchKernel(quantizeXKernel, blocksFor(blocks, 128), 128, 0, s, x, blocks, vec, xq, xs);
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
