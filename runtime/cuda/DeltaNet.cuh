//===- DeltaNet.cuh - launchers of the linear-attention layers' kernels -*- C++ -*-===//
//
// SSM_CONV, DELTA_NET, L2_NORM and GATED_RMS_NORM with the semantics of runtime/cpu/DeltaNet.h (the
// contract: sequence rules, state layouts, the zero state of a sequence whose first token of the call is
// at position 0, value head h reading key head h % hk). The two recurrent ops read and write the
// per-sequence state of a recurrent cache (exec::KvBuffers: the conv state in its K half, the delta-rule
// state in its V half). Positions and sequence ids are read on the GPU, never on the host, so a captured
// decode step stays valid when replayed with new positions and sequences: each block finds its
// sequence's tokens of the call by scanning the sequence ids itself.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_DELTANET_CUH
#define TPC_RUNTIME_CUDA_DELTANET_CUH

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpc::rt::cuda {

/// Widest conv kernel SSM_CONV takes (the models use 4).
inline constexpr int64_t kMaxConvWidth = 9;
/// Largest key head dim DELTA_NET takes (its state rows live in registers).
inline constexpr int64_t kMaxDeltaKeyDim = 256;

/// SSM_CONV: the causal depthwise conv of x[t, c] with w[c, k] over each sequence's inputs, preceded by
/// the sequence's conv state; y[t, c] (never aliasing x). The state of sequence s is [k - 1, c] at
/// convState + s * (k - 1) * c; after the call it holds the sequence's last k - 1 inputs.
struct SsmConvArgs {
  const float *x = nullptr, *w = nullptr;
  float *y = nullptr;
  int64_t t = 0, c = 0, k = 0;  ///< tokens, channels, kernel width (1 .. kMaxConvWidth)
  const int32_t *pos = nullptr; ///< [t], device memory
  const int32_t *seq = nullptr; ///< [t], device memory (null: all in sequence 0)
  float *convState = nullptr;   ///< [sequences, k - 1, c]
  int32_t sequences = 1;
};
void launchSsmConv(const SsmConvArgs &a, cudaStream_t s);

/// DELTA_NET: the gated delta rule of q, k[t, hk, dk], v[t, hv, dv], g, beta[t, hv] into y[t, hv, dv]
/// (aliasing no input), over the state [sequences, hv, dk, dv] (v fastest).
struct DeltaNetArgs {
  const float *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
  float *y = nullptr;
  int64_t t = 0, hk = 0, hv = 0, dk = 0, dv = 0; ///< hv a multiple of hk, dk <= kMaxDeltaKeyDim
  float scale = 1;                               ///< multiplies q
  const int32_t *pos = nullptr;                  ///< [t], device memory
  const int32_t *seq = nullptr;                  ///< [t], device memory (null: all in sequence 0)
  float *state = nullptr;
  int32_t sequences = 1;
};
void launchDeltaNet(const DeltaNetArgs &a, cudaStream_t s);

/// L2_NORM over rows of n: y = x / max(|x|, eps) (y may alias x).
struct L2NormArgs {
  const float *x = nullptr;
  float *y = nullptr;
  int64_t rows = 0, n = 0;
  float eps = 0;
};
void launchL2Norm(const L2NormArgs &a, cudaStream_t s);

struct XQBlock; // Quant.cuh: an activation block's scale and sums

/// GATED_RMS_NORM over rows of n: y = x / sqrt(mean(x^2) + eps) * w * silu(z), w[n] shared by every row
/// (null: 1); y may alias x or z. With xq (n a multiple of 32): y also quantized for the integer GEMV that
/// reads it next (the linear-attention layer's output projection; launchQuantizeX's layout).
struct GatedRmsNormArgs {
  const float *x = nullptr, *w = nullptr, *z = nullptr;
  float *y = nullptr;
  int64_t rows = 0, n = 0;
  float eps = 0;
  int8_t *xq = nullptr;
  XQBlock *xs = nullptr;
};
void launchGatedRmsNorm(const GatedRmsNormArgs &a, cudaStream_t s);

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_DELTANET_CUH
