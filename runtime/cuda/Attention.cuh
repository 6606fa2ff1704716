//===- Attention.cuh - launchers of RoPE and attention over the KV cache -*- C++ -*-===//
//
// ROPE and ATTENTION with the semantics of runtime/cpu/ops/AttentionOps.cpp. Attention appends the call's
// K/V rows in the cells of their (sequence, position): cell = seq * ctx + pos % ctx, where ctx is the
// positions one sequence holds (a sliding-window layer's ring, or the context), converting to the cache
// dtype; then it runs a flash-decode style kernel over the token's own sequence's cells:
// one block per (token, query head), its warps stride over the visible cache positions with an online
// softmax each, merged at the end (sinks join the denominator). Positions are read on the GPU, so a
// captured decode step stays valid as the context grows. Head dims up to 256. An output gate (Qwen3.5's
// gated attention) multiplies each result by sigmoid(gate) in the kernels' epilogues, before the optional
// quantized copy, so a gated step keeps the fused quantized output.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_ATTENTION_CUH
#define TPC_RUNTIME_CUDA_ATTENTION_CUH

#include "runtime/plan/StepParams.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpc::rt::cuda {

struct XQBlock; // Quant.cuh: an activation block's scale and sums

/// Which elements of a head ROPE rotates together (RopeParams::mode, StepParams.h: the same codes).
enum class RopeMode : int {
  Normal = 0, ///< adjacent pairs (2i, 2i + 1)
  Neox = 1,   ///< halves (i, i + n_dims / 2)
};

/// ROPE over x[T, H, D] (y may alias x).
struct RopeArgs {
  const float *x = nullptr;
  float *y = nullptr;
  const int32_t *pos = nullptr;
  const float *freqFactors = nullptr;
  int64_t t = 0, h = 0, d = 0, nDims = 0;
  RopeMode mode = RopeMode::Normal;
  float base = 10000, freqScale = 1;
  /// YaRN (tpc.rope's formula): the ramp's correction dims, its strength and the cos/sin magnitude.
  float extFactor = 0, corrLo = 0, corrHi = 0, mscale = 1;
};
void launchRope(const RopeArgs &a, cudaStream_t s);

/// RopeArgs' YaRN fields from the plan's parameters (the correction dims in float as the CPU's).
inline void setRopeYarn(const RopeParams &p, RopeArgs &a) {
  a.extFactor = p.extFactor;
  a.mscale = ropeYarnMscale(p);
  if (p.extFactor != 0) {
    float dims[2];
    ropeYarnCorrDims(p, dims);
    a.corrLo = dims[0];
    a.corrHi = dims[1];
  }
}

/// Up to two ROPE steps that share positions and frequencies (Q and K) in one launch, each optionally
/// preceded by its per-head rms_norm (qwen3's q_norm / k_norm): one block per (tensor, token, head), the
/// head's row in shared memory. Bit-identical to rms_norm then rope as separate kernels.
struct NormRopePart {
  const float *x = nullptr; ///< the rope's input, or the norm's when norm
  bool norm = false;
  const float *w = nullptr; ///< norm weight, may be null
  float eps = 0;
  float *normed = nullptr; ///< the norm's output (written; the rope reads it from shared memory)
  float *y = nullptr;
  int64_t h = 0;
};
struct NormRopeArgs {
  RopeArgs rope; ///< positions, frequencies, t, d (at most 1024), nDims, mode; its x, y, h unused
  NormRopePart part[2];
  int parts = 0;
};
void launchNormRope(const NormRopeArgs &a, cudaStream_t s);

/// A KV cache half's storage type (the plan's GGMLType, as the kernels switch on it).
enum class KvStorage : uint8_t { F32, F16, Q8_0, Q4_0 };

/// ATTENTION of q[T, Hq, Dk] over a cache K[cells, Hkv, Dk], V[cells, Hkv, Dv] after appending k, v in the
/// cells of (seq, pos).
struct AttentionArgs {
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  const int32_t *pos = nullptr;
  const int32_t *seq = nullptr; ///< each token's sequence, device memory (null: all in sequence 0)
  const float *sinks = nullptr;
  void *kc = nullptr, *vc = nullptr;
  /// Storage of each half (`tpc compile -ctk/-ctv`): f32, f16, or q8_0 / q4_0 blocks of 32 values per head
  /// row (34 / 18 bytes; head dims multiples of 32).
  KvStorage typeK = KvStorage::F16, typeV = KvStorage::F16;
  int64_t t = 0, hq = 0, hkv = 0, dk = 0, dv = 0;
  int64_t ctx = 0; ///< cells per sequence (the ring of a sliding-window cache, or the context)
  float scale = 1, softcap = 0;
  int64_t window = 0;
  /// group > 0: the cache holds every KV head (mirrored: the devices outnumber them) and q the model's
  /// query heads qHead0.. : local head h reads KV head (qHead0 + h) / group. 0: h / (hq / hkv).
  int64_t qHead0 = 0, group = 0;
  const float *gate = nullptr; ///< [T, Hq, Dv]: y *= sigmoid(gate) (null: no output gate)
  float *y = nullptr;
  /// With xq (dv a multiple of 32): y also quantized for the integer GEMV that reads it next (the output
  /// projection; launchQuantizeX's layout).
  int8_t *xq = nullptr;
  XQBlock *xs = nullptr;
};
void launchAttention(const AttentionArgs &a, cudaStream_t s);

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_ATTENTION_CUH
