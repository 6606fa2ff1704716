//===- DeltaNet.h - Gated DeltaNet recurrence and causal conv (CPU) -*- C++ -*-===//
//
// The two recurrent kernels of the hybrid (Qwen3.5 / Qwen3-Next) linear-attention layers, on host memory.
// Both keep per-sequence state that lives across calls (the recurrent cache of runtime/plan: a conv state
// and a delta-rule state per sequence), and both follow the session's sequence rules: a call holds tokens
// of any sequences, a sequence's tokens are in batch order at consecutive positions, and a sequence whose
// first token in the call is at position 0 starts from a zero state (its old state is ignored and
// overwritten); otherwise it continues from its stored state.
//
// Causal depthwise conv (ssmConv): channel c of token t is
//     y[t, c] = sum_{j < K} w[c, j] * xs[t + j, c],  xs = [state rows (K-1) ; the sequence's x rows]
// i.e. tap j = K-1 multiplies the token itself, tap 0 the input K-1 tokens back. After the call a
// sequence's conv state holds its last K-1 input rows (older state rows when the call had fewer tokens).
// The state of sequence s is [K-1, C] (row i = the input i + 1 - (K-1) tokens before the next one, channel
// fastest) at convState + s * (K-1) * C.
//
// Gated delta rule (deltaNet), per value head h (key head h % hk: value heads are tiled over key heads),
// with S the [dk, dv] state (v fastest: S[i * dv + j]), per token in order:
//     S <- exp(g) * S;   d = beta * (v - S^T k);   S <- S + k d^T;   y = S^T (scale * q)
// q and k are used as given (the graph L2-normalises them first); g is the log-decay (<= 0 in models,
// any value accepted), beta the write strength (already sigmoid-ed). The state of sequence s is
// [hv, dk, dv] at state + s * hv * dk * dv.
//
// Two forms, one vectorised kernel body per ISA (deltanet/DeltaNetHead.inc): the token recurrence over
// blocks of state columns kept in L1 across a run's tokens (the decay in a scalar factor, so each token is
// one FMA pass plus the next token's S^T k and S^T q), and the chunked (WY) form: chunks of 64 tokens,
// within a chunk the unit-lower-triangular solve T = (I + A)^-1 with A = strictly_lower((beta*K) K^T *
// Gamma), U = T (beta V), W = T (beta K exp(G)), then V' = U - W S, Y = (Q exp(G)) S + tril(Q K^T * Gamma)
// V', and the state carried with exp(G_C). On the CPU the chunked form wins only on a sequence's first
// chunk from position 0 (its products with the zero state vanish; kDeltaNetChunkMin below has the
// measurements), so that chunk runs chunked and everything else, long prefills included, runs the
// vectorised recurrence. Work is split over (sequence, value head) pairs; the result does not depend on
// the thread count.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_DELTANET_H
#define TPC_RUNTIME_CPU_DELTANET_H

#include "runtime/cpu/ThreadGroup.h"
#include "runtime/cpu/quant/Quant.h"

#include <cstdint>

namespace tpc::rt::cpu {

/// One causal-conv call (see the file comment).
struct SsmConvArgs {
  const float *x = nullptr; ///< [t, c]
  const float *w = nullptr; ///< [c, k]: w[c * k + j]
  float *y = nullptr;       ///< [t, c] (never aliases x)
  int64_t t = 0, c = 0, k = 0; ///< tokens, channels, kernel width (k >= 1; the state holds k - 1 rows)
  const int32_t *pos = nullptr; ///< [t] position of each token
  const int32_t *seq = nullptr; ///< [t] sequence of each token (null: all in sequence 0)
  float *convState = nullptr;   ///< [sequences, k - 1, c]
  int32_t sequences = 1;        ///< sequences the state holds (every seq[i] is below it)
};
void ssmConv(const SsmConvArgs &a, ThreadGroup &tg);

/// One gated-delta-rule call (see the file comment).
struct DeltaNetArgs {
  const float *q = nullptr, *k = nullptr; ///< [t, hk, dk]
  const float *v = nullptr;               ///< [t, hv, dv]
  const float *g = nullptr;               ///< [t, hv] log-decay
  const float *beta = nullptr;            ///< [t, hv]
  float *y = nullptr;                     ///< [t, hv, dv] (aliases none of the inputs)
  int64_t t = 0, hk = 0, hv = 0, dk = 0, dv = 0; ///< hv is a multiple of hk
  float scale = 1;                        ///< multiplies q (1/sqrt(dk) in the models)
  const int32_t *pos = nullptr;           ///< [t]
  const int32_t *seq = nullptr;           ///< [t] (null: all in sequence 0)
  float *state = nullptr;                 ///< [sequences, hv, dk, dv]
  int32_t sequences = 1;
};
void deltaNet(const DeltaNetArgs &a, ThreadGroup &tg);

/// Which form deltaNet computes a run of one sequence's tokens in.
enum class DeltaNetPath {
  Auto,      ///< the measured choice below (what deltaNet(a, tg) runs)
  Chunked,   ///< the chunked form for every run, any length
  Recurrent, ///< the token recurrence for every run
};

/// Auto: a run of at least this many tokens whose sequence starts at position 0 computes its first chunk
/// (up to 64 tokens) in the chunked form, which skips every product with the (zero) starting state; the
/// rest of the run, and every other run, uses the token recurrence. Measured on a 2-core Xeon (Sapphire
/// Rapids VM) at hk = 16, hv = 32, dk = dv = 128, one thread, ns per token and value head, chunked against
/// recurrence:
///   from position 0, 16 / 64 tokens:   AVX-512 1013 / 736 vs 1269 / 984,  AVX2 1319 / 1026 vs 1541 / 1286,
///                                      scalar 2079 / 2462 vs 3288 / 3038 (8 tokens: about even);
///   continuing a state, 64 / 512:      AVX-512 1123 / 1527 vs 977 / 1207,  AVX2 1838 / 2147 vs 1297 / 2059,
///                                      scalar 4618 / 5014 vs 3076 / 3851.
/// At chunks of 64 the chunked form costs about 4 vector operations per state element and token (3 for the
/// products with the state, 1 for the chunk's own K K^T, solve and P D), the recurrence 3 (an FMA to
/// update, two for the next token's S^T k and S^T q; its decay is kept in a scalar factor), both at about
/// the same fraction of peak: only a chunk from a zero state, whose state products vanish, gains.
inline constexpr int64_t kDeltaNetChunkMin = 16;

/// deltaNet with the kernels built for `isa` (lowered to what this CPU runs) and the given path: the
/// handle of the tests and benchmarks on each path. The result depends on these two (the paths round
/// differently), never on the thread count.
void deltaNet(const DeltaNetArgs &a, ThreadGroup &tg, Isa isa, DeltaNetPath path);

/// The token-by-token recurrence in double precision over the same arguments (tests' reference; single
/// threaded). Updates a.state like deltaNet.
void deltaNetReference(const DeltaNetArgs &a);

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_DELTANET_H
