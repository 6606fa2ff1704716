//===- DeltaNet.cu - causal conv, gated delta rule and the row norms of hybrid layers -===//
//
// A call holds tokens of any sequences, interleaved, each sequence's at consecutive positions in batch
// order; sequence ids and positions live in device memory (a replayed decode graph sees new ones). So
// both recurrent kernels give each block one sequence and let it find that sequence's tokens itself:
// the block scans the sequence ids in chunks of one token per thread and compacts the matches, in batch
// order, into a shared-memory list (collectTokens: warp ballots and a prefix over the warps). A block
// whose sequence has no token in the call does nothing, so its state is left as it was. Calls are at
// most max_batch tokens, so the scan is cheap next to the work.
//
// SSM_CONV: one block per (32 channels, sequence); lanes are channels, the 8 warps take the list's
// tokens in turn, each output from the k inputs it needs. In front of the list sit the k - 1 inputs
// before the chunk (token indices, or stored state rows for a sequence's first tokens), so a token's
// inputs are list entries and a chunk boundary needs no special case. The block owns its sequence's
// state slice, so it writes the new state (the last k - 1 inputs) after a barrier, with no other block
// reading it.
//
// DELTA_NET: the token recurrence, one block per (32 value columns, value head, sequence), the block's
// [dk, 32] slice of the state in registers for the whole call: 4 warps each hold dk / 4 state rows for
// the 32 columns of its lanes. Per token the block stages q and k in shared memory, each thread forms its
// partial S^T k, S^T q over its rows (and k.q, the same for a warp's lanes), one barrier merges the warps,
// then every thread updates its rows in place: with d = beta (v - exp(g) S^T k), y = exp(g) S^T q + d k.q
// is the contract's S_new^T q without a second reduction. Two barriers per token (q/k and the partial sums
// are double-buffered); the next token's inputs are loaded into registers while this one is computed.
// Future work: the chunked (WY) form on tensor cores for long prefills (the CPU's form), where a run of
// 64 tokens becomes a few small matrix products instead of 64 dependent steps.
//
// L2_NORM and GATED_RMS_NORM: one warp per row (the models' rows are a head of 128), the row in registers
// up to 256 elements.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/DeltaNet.cuh"
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/Launch.cuh"
#include "runtime/cuda/Quant.cuh"

#include <algorithm>

namespace tpc::rt::cuda {
namespace {

//===----------------------------------------------------------------------===//
// kernels
//===----------------------------------------------------------------------===//

/// Writes to list[0..) the indices of tokens t0 .. t0 + blockDim.x - 1 of sequence s, in batch order, and
/// returns how many (every thread gets the count). Every thread of the block calls it; it ends with a
/// barrier, so the list is visible; the caller must not overwrite list entries another thread may still
/// read (a barrier between uses). warpCount holds blockDim.x / 32 ints.
__device__ int collectTokens(const int32_t *seq, int64_t t, int64_t t0, int s, int *list, int *warpCount) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, warps = blockDim.x / 32;
  const int64_t ti = t0 + tid;
  const bool mine = ti < t && (seq ? seq[ti] : 0) == s;
  const unsigned ballot = __ballot_sync(0xffffffffu, mine);
  if (lane == 0)
    warpCount[warp] = __popc(ballot);
  __syncthreads();
  int before = 0, total = 0;
  for (int w = 0; w < warps; ++w) {
    const int c = warpCount[w];
    before += w < warp ? c : 0;
    total += c;
  }
  if (mine)
    list[before + __popc(ballot & ((1u << lane) - 1u))] = static_cast<int>(ti);
  __syncthreads();
  return total;
}

constexpr int kConvWarps = 8;
constexpr int kConvThreads = kConvWarps * 32;
constexpr int kConvHist = int(kMaxConvWidth) - 1; // at most one state row per warp (the final write)
static_assert(kConvHist <= kConvWarps, "one warp per state row");

__global__ void __launch_bounds__(kConvThreads) ssmConvKernel(SsmConvArgs a) {
  // list[0 .. h): the h = k - 1 inputs before the chunk (a token index, or -(r + 1) for row r of the stored
  // state); list[h ..): the chunk's tokens of the sequence. Input j of entry e's window is list[e + j].
  __shared__ int list[kConvHist + kConvThreads];
  __shared__ int warpCount[kConvWarps];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int h = static_cast<int>(a.k) - 1, s = static_cast<int>(blockIdx.y);
  const int64_t c = int64_t(blockIdx.x) * 32 + lane;
  const bool chIn = c < a.c;
  float *st = a.convState + int64_t(s) * h * a.c;
  pdlEnter();
  float w[kMaxConvWidth];
#pragma unroll
  for (int j = 0; j < kMaxConvWidth; ++j)
    w[j] = chIn && j < a.k ? a.w[c * a.k + j] : 0.0f;
  if (tid < h)
    list[tid] = -(tid + 1);
  // The input behind list entry v: a token's row of x, or a stored state row (zero for a sequence that
  // starts at position 0 in this call).
  bool zero = false;
  auto input = [&](int v) {
    return v >= 0 ? a.x[int64_t(v) * a.c + c] : zero ? 0.0f : st[int64_t(-v - 1) * a.c + c];
  };
  int seen = 0;
  for (int64_t t0 = 0; t0 < a.t; t0 += kConvThreads) {
    const int n = collectTokens(a.seq, a.t, t0, s, list + h, warpCount);
    if (n == 0)
      continue;
    if (seen == 0)
      zero = a.pos[list[h]] == 0;
    seen += n;
    if (chIn)
      for (int e = warp; e < n; e += kConvWarps) {
        float acc = 0;
#pragma unroll
        for (int j = 0; j < kMaxConvWidth; ++j)
          if (j < a.k)
            acc += w[j] * input(list[e + j]);
        a.y[int64_t(list[h + e]) * a.c + c] = acc;
      }
    // The last h entries become the next chunk's history (read all, then write: the ranges may overlap).
    __syncthreads();
    const int keep = tid < h ? list[n + tid] : 0;
    __syncthreads();
    if (tid < h)
      list[tid] = keep;
  }
  // The new state: the sequence's last h inputs (older state rows, or zeros, where the call had fewer).
  // Every read of the old state is done before the first write.
  __syncthreads();
  const bool writes = seen > 0 && warp < h && chIn;
  const float nv = writes ? input(list[warp]) : 0.0f;
  __syncthreads();
  if (writes)
    st[int64_t(warp) * a.c + c] = nv;
}

constexpr int kDnWarps = 4;
constexpr int kDnThreads = kDnWarps * 32;
constexpr int kDnCols = 32; // value columns per block: one per lane

/// R state rows per thread: key dims up to kDnWarps * R (thread (warp, lane) holds rows warp + kDnWarps * r
/// of column lane).
template <int R> __global__ void __launch_bounds__(kDnThreads) deltaNetKernel(DeltaNetArgs a) {
  constexpr int kRows = kDnWarps * R;                              // the key dim, zero-padded
  constexpr int kLoads = (kRows + kDnThreads - 1) / kDnThreads; // q and k elements each thread stages
  __shared__ int list[kDnThreads];
  __shared__ int warpCount[kDnWarps];
  __shared__ float sk[2][kRows], sq[2][kRows];
  __shared__ float redK[2][kDnWarps][32], redQ[2][kDnWarps][32], redKQ[2][kDnWarps];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t j = int64_t(blockIdx.x) * kDnCols + lane, h = blockIdx.y, kh = h % a.hk;
  const int s = static_cast<int>(blockIdx.z);
  const bool colIn = j < a.dv;
  float *st = a.state + (int64_t(s) * a.hv + h) * a.dk * a.dv;
  pdlEnter();

  // One token's inputs as this thread needs them (loaded a token ahead).
  struct In {
    float k[kLoads], q[kLoads], v, g, beta;
  };
  auto fetch = [&](int ti, In &in) {
    const float *kr = a.k + (int64_t(ti) * a.hk + kh) * a.dk, *qr = a.q + (int64_t(ti) * a.hk + kh) * a.dk;
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int i = tid + l * kDnThreads;
      in.k[l] = i < a.dk ? kr[i] : 0.0f;
      in.q[l] = i < a.dk ? qr[i] * a.scale : 0.0f;
    }
    in.v = colIn ? a.v[(int64_t(ti) * a.hv + h) * a.dv + j] : 0.0f;
    in.g = a.g[int64_t(ti) * a.hv + h];
    in.beta = a.beta[int64_t(ti) * a.hv + h];
  };

  float S[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    S[r] = 0;
  int seen = 0, buf = 0;
  for (int64_t t0 = 0; t0 < a.t; t0 += kDnThreads) {
    const int n = collectTokens(a.seq, a.t, t0, s, list, warpCount);
    if (n == 0)
      continue;
    if (seen == 0 && a.pos[list[0]] != 0) // continuing: the stored state (zero at position 0)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int i = warp + kDnWarps * r;
        S[r] = colIn && i < a.dk ? st[int64_t(i) * a.dv + j] : 0.0f;
      }
    seen += n;
    In cur{}, nxt{};
    fetch(list[0], cur);
    for (int e = 0; e < n; ++e) {
      const int ti = list[e];
      if (e + 1 < n)
        fetch(list[e + 1], nxt);
#pragma unroll
      for (int l = 0; l < kLoads; ++l) {
        const int i = tid + l * kDnThreads;
        if (i < kRows) {
          sk[buf][i] = cur.k[l];
          sq[buf][i] = cur.q[l];
        }
      }
      __syncthreads();
      float pk = 0, pq = 0, pkq = 0;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int i = warp + kDnWarps * r;
        const float kv = sk[buf][i], qv = sq[buf][i];
        pk += S[r] * kv;
        pq += S[r] * qv;
        pkq += kv * qv;
      }
      redK[buf][warp][lane] = pk;
      redQ[buf][warp][lane] = pq;
      if (lane == 0)
        redKQ[buf][warp] = pkq;
      __syncthreads();
      float kS = 0, qS = 0, kq = 0;
#pragma unroll
      for (int w = 0; w < kDnWarps; ++w) {
        kS += redK[buf][w][lane];
        qS += redQ[buf][w][lane];
        kq += redKQ[buf][w];
      }
      const float decay = expf(cur.g);
      const float d = cur.beta * (cur.v - decay * kS);
      if (warp == 0 && colIn)
        a.y[(int64_t(ti) * a.hv + h) * a.dv + j] = decay * qS + d * kq;
#pragma unroll
      for (int r = 0; r < R; ++r)
        S[r] = decay * S[r] + sk[buf][warp + kDnWarps * r] * d;
      // The other buffer next: its last readers (the token before this one) passed this token's barriers.
      buf ^= 1;
      cur = nxt;
    }
    __syncthreads(); // every read of the list is done before the next chunk's
  }
  if (seen > 0)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = warp + kDnWarps * r;
      if (colIn && i < a.dk)
        st[int64_t(i) * a.dv + j] = S[r];
    }
}

constexpr int kNormWarps = 8;
constexpr int kNormCache = 8; // elements per lane kept in registers: rows up to 256

/// One warp per row. Gated: x / sqrt(mean(x^2) + eps) * w * silu(z), with xq (n a multiple of 32) also
/// quantized for the integer GEMV (launchQuantizeX's layout); else x / max(|x|, eps). Each lane reads
/// back only the elements it writes, so y may alias x or z.
template <bool Gated> __global__ void __launch_bounds__(kNormWarps * 32) rowNormKernel(GatedRmsNormArgs a) {
  pdlEnter();
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * kNormWarps;
  const bool cached = a.n <= 32 * kNormCache;
  for (int64_t r = int64_t(blockIdx.x) * kNormWarps + threadIdx.x / 32; r < a.rows; r += warps) {
    const float *x = a.x + r * a.n;
    float v[kNormCache], ss = 0;
    if (cached) {
#pragma unroll
      for (int e = 0; e < kNormCache; ++e) {
        const int64_t c = lane + 32 * e;
        v[e] = c < a.n ? x[c] : 0.0f;
        ss += v[e] * v[e];
      }
    } else {
      for (int64_t c = lane; c < a.n; c += 32)
        ss += x[c] * x[c];
    }
    for (int o = 16; o > 0; o >>= 1)
      ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float k = Gated ? rsqrtf(ss / float(a.n) + a.eps) : 1.0f / fmaxf(sqrtf(ss), a.eps);
    auto out = [&](int64_t c, float u) {
      float o = u * k;
      if constexpr (Gated) {
        const float z = a.z[r * a.n + c];
        o *= (a.w ? a.w[c] : 1.0f) * (z / (1.0f + expf(-z)));
      }
      a.y[r * a.n + c] = o;
      if (a.xq) // whole 32-blocks: every lane of the warp is here
        warpQuantize32(o, a.xq + r * a.n + (c & ~int64_t(31)), a.xs + (r * a.n + c) / 32);
    };
    if (cached) {
#pragma unroll
      for (int e = 0; e < kNormCache; ++e) {
        const int64_t c = lane + 32 * e; // with xq, n % 32 == 0: the warp's whole block or none of it
        if (c < a.n)
          out(c, v[e]);
      }
    } else {
      for (int64_t c = lane; c < a.n; c += 32)
        out(c, x[c]);
    }
  }
}

//===----------------------------------------------------------------------===//
// launchers
//===----------------------------------------------------------------------===//

unsigned gridCap(int64_t n) { return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(n, 65535))); }

template <int R> void launchDeltaNetRows(const DeltaNetArgs &a, dim3 grid, cudaStream_t s) {
  launchKernel(deltaNetKernel<R>, grid, kDnThreads, 0, s, a);
}

} // namespace

void launchSsmConv(const SsmConvArgs &a, cudaStream_t s) {
  if (a.t == 0 || a.c == 0)
    return;
  TPC_CUDA_ASSERT(a.k >= 1 && a.k <= kMaxConvWidth, "ssm_conv: kernel width must be 1..9");
  TPC_CUDA_ASSERT(a.sequences >= 1 && a.sequences <= 65535, "ssm_conv: sequences must be 1..65535");
  TPC_CUDA_ASSERT((a.c + 31) / 32 <= 0x7fffffff, "ssm_conv: too many channels");
  const dim3 grid(static_cast<unsigned>((a.c + 31) / 32), static_cast<unsigned>(a.sequences));
  launchKernel(ssmConvKernel, grid, kConvThreads, 0, s, a);
  TPC_CUDA_CHECK(cudaGetLastError());
}

void launchDeltaNet(const DeltaNetArgs &a, cudaStream_t s) {
  if (a.t == 0 || a.hk == 0 || a.hv == 0 || a.dv == 0) // a device with no heads of this layer
    return;
  TPC_CUDA_ASSERT(a.dk >= 1 && a.dk <= kMaxDeltaKeyDim, "delta_net: key head dim must be 1..256");
  TPC_CUDA_ASSERT(a.hk > 0 && a.hv % a.hk == 0, "delta_net: value heads not a multiple of key heads");
  TPC_CUDA_ASSERT(a.hv <= 65535 && a.sequences >= 1 && a.sequences <= 65535, "delta_net: grid too large");
  const dim3 grid(static_cast<unsigned>((a.dv + kDnCols - 1) / kDnCols), static_cast<unsigned>(a.hv),
                  static_cast<unsigned>(a.sequences));
  if (a.dk <= kDnWarps * 8)
    launchDeltaNetRows<8>(a, grid, s);
  else if (a.dk <= kDnWarps * 16)
    launchDeltaNetRows<16>(a, grid, s);
  else if (a.dk <= kDnWarps * 32)
    launchDeltaNetRows<32>(a, grid, s);
  else
    launchDeltaNetRows<64>(a, grid, s);
  TPC_CUDA_CHECK(cudaGetLastError());
}

void launchL2Norm(const L2NormArgs &a, cudaStream_t s) {
  if (a.rows == 0 || a.n == 0)
    return;
  GatedRmsNormArgs g;
  g.x = a.x;
  g.y = a.y;
  g.rows = a.rows;
  g.n = a.n;
  g.eps = a.eps;
  launchKernel(rowNormKernel<false>, gridCap((a.rows + kNormWarps - 1) / kNormWarps), kNormWarps * 32, 0, s, g);
  TPC_CUDA_CHECK(cudaGetLastError());
}

void launchGatedRmsNorm(const GatedRmsNormArgs &a, cudaStream_t s) {
  if (a.rows == 0)
    return;
  TPC_CUDA_ASSERT(a.n > 0, "gated_rms_norm: empty rows");
  TPC_CUDA_ASSERT(!a.xq || a.n % 32 == 0, "gated_rms_norm: quantized output needs rows of whole 32-blocks");
  launchKernel(rowNormKernel<true>, gridCap((a.rows + kNormWarps - 1) / kNormWarps), kNormWarps * 32, 0, s, a);
  TPC_CUDA_CHECK(cudaGetLastError());
}

} // namespace tpc::rt::cuda
