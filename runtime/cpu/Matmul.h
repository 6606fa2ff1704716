//===- Matmul.h - quantized matrix multiplication on the CPU -----*- C++ -*-===//
//
// y[m, n] = x[m, k] . W[n, k]^T for W of any supported ggml type (rows of W are GGUF tensor rows). As in
// the reference engine, x is first converted once to the weight type's activation format (Quant.h
// activationFormat: ActQ8 rows shared by q4_0/q5_0/q8_0/q4_K/q5_K/q6_K, f32 rows for float weights, or a
// legacy type), through an ActivationCache when one is given so that readers of the same input share the
// conversion; then integer block dot products run.
//
// Paths (chosen from the shapes alone, so a (row, token) result never depends on the thread count):
//  - rows: fewer than kPanelMinTokens tokens (decode, small batches). Row kernels unpack each weight block
//    once for up to 8 tokens; work units are runs of weight rows, so every weight byte is read once. On
//    AVX2, calls of several tokens take eight rows at a time in the lanes of a vector for the types with
//    lane kernels (Kernels.h batchFrom, LanesX86.inc): their float order is the panel tiles', not the
//    one-token kernel's.
//  - panels: from kPanelMinTokens tokens (prefill) on ISAs with panel kernels. A unit is a panel of 32
//    weight rows that the thread converts into its own scratch (Kernels.h: rows interleaved for the
//    register tiles; 32 rows of a 5632-wide q4_K matrix are 225 KB, within L2), then every token passes
//    over it in tiles of 8.
// Units are claimed dynamically (ThreadGroup::parallelDynamic), so uneven units keep every thread busy.
//
// Results are deterministic for given shapes and ISA but differ between paths and ISAs in the order of
// float operations (the integer block sums are exact everywhere): see docs/architecture.md, "CPU matmul
// tolerance", for the bound the tests hold every path to.
//
// MatmulOptions::f32Reference replaces all of this with the float32 reference (MatmulReference.cpp).
//
// Errors (unsupported type, k not whole blocks, strides too small) throw std::invalid_argument with a
// message naming the argument; no work is started then. Empty shapes are valid: n = 0 or m = 0 writes
// nothing, k = 0 writes zeros (the empty sum; a device's share of a split reduction axis can be empty).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_MATMUL_H
#define TPC_RUNTIME_CPU_MATMUL_H

#include "runtime/cpu/ActivationCache.h"
#include "runtime/cpu/ThreadGroup.h"
#include "runtime/cpu/quant/Quant.h"
#include "runtime/ggml/GGMLTypes.h"
#include "runtime/plan/PlanFormat.h"

#include <cstddef>
#include <cstdint>
#include <functional>

namespace tpc::rt::cpu {

/// Tokens from which a matmul runs through weight panels (where the ISA has panel kernels): up to 8 tokens
/// (one row-kernel call) the row and lane kernels unpack each block once for all of them and beat converting
/// a panel; from 9, a second call would unpack every block again, and panels won on every measured shape
/// but the 262144 x 640 output projection (AVX2, Zen 3: +10-85 % per CPU-second at 9-12 tokens on 4096^2 and
/// 2048 x 640, -5-15 % on 262144 x 640).
constexpr int64_t kPanelMinTokens = 9;

/// What every matmul takes besides its operands.
struct MatmulOptions {
  Isa isa = activeIsa();             ///< kernels to use (tests pick each level the machine has)
  ActivationCache *cache = nullptr;  ///< converted inputs to reuse (null: convert into scratch)
  bool allowPanels = true;           ///< false: row kernels at every token count (tests, benchmarks)
  /// The float32 reference (MatmulReference.cpp): dequantized W rows . f32 x, no activation rounding; what
  /// the quantized paths are measured against. Slower; never the default.
  bool f32Reference = false;
};

/// Arguments of matmul.
struct MatmulArgs : MatmulOptions {
  const void *w = nullptr;        ///< weight rows
  GGMLType wType = GGMLType::F32; ///< their element type
  int64_t n = 0;                  ///< rows of W = outputs per token
  int64_t k = 0;                  ///< row length (elements), a multiple of the type's block size
  size_t wRowStride = 0;          ///< bytes between consecutive W rows
  const float *x = nullptr;       ///< activations, m rows of k floats
  int64_t m = 0;                  ///< tokens
  size_t xRowStride = 0;          ///< floats between consecutive x rows
  float *y = nullptr;             ///< outputs, m rows of n floats
  size_t yRowStride = 0;          ///< floats between consecutive y rows
};

/// y = x . W^T (see the file comment).
void matmul(const MatmulArgs &args, ThreadGroup &group);

/// matmul with f32Reference (what matmul calls then): W rows dequantized to f32 and dotted with f32 x.
void matmulReference(const MatmulArgs &args, ThreadGroup &group);

/// Several products as one job (their units claimed from one counter): matmuls that read one input, such as
/// Q, K and V or gate and up, then cost one hand-off instead of one each, and a thread that finishes its
/// share of one product takes units of the next. Each part's results are matmul's. Options (panels) are the
/// first part's; give every part the same cache so the input is converted once.
void matmulBatch(const MatmulArgs *parts, size_t count, ThreadGroup &group);

/// Arguments of matmulId (ggml's mul_mat_id): a 3-D expert weight [nExperts][n][k] and routed entries,
/// each an (expert, input row, output row) triple, in any order.
struct MatmulIdArgs : MatmulOptions {
  const void *w = nullptr;          ///< expert 0's first row
  GGMLType wType = GGMLType::F32;   ///< element type
  int64_t n = 0, k = 0;             ///< rows per expert, row length
  size_t wRowStride = 0;            ///< bytes between rows of one expert
  size_t wExpertStride = 0;         ///< bytes between experts
  int64_t nExperts = 0;             ///< experts in w
  const float *x = nullptr;         ///< activation rows
  size_t xRowStride = 0;            ///< floats between x rows
  int64_t xRowCount = 0;            ///< rows of x (each is converted once, whatever uses it)
  float *y = nullptr;               ///< output rows
  size_t yRowStride = 0;            ///< floats between y rows
  const int32_t *experts = nullptr; ///< for i < count: the expert of entry i
  const int32_t *xRows = nullptr;   ///< input row of entry i (< xRowCount)
  const int32_t *yRows = nullptr;   ///< output row of entry i
  int64_t count = 0;                ///< entries
};

/// For i < count: y[yRows[i]] = W[experts[i]] . x[xRows[i]], as one dynamically scheduled job over (expert,
/// row range) units: each expert's entries form its token set, which takes the panel path when it has at
/// least kPanelMinTokens entries and the row path otherwise; x is converted once for all experts. An
/// entry's result is the one matmul gives for its expert's token count.
void matmulId(const MatmulIdArgs &args, ThreadGroup &group);

/// matmulId with f32Reference (what matmulId calls then), entry by entry.
void matmulIdReference(const MatmulIdArgs &args, ThreadGroup &group);

/// Several matmulIds as one job, units ordered expert by expert across the parts: the experts' gate and up
/// projections of one input run together, each expert's gate and up units next to each other while its
/// tokens' activations are in cache. Each part's results are matmulId's.
void matmulIdBatch(const MatmulIdArgs *parts, size_t count, ThreadGroup &group);

/// MoE gate and up with the GLU applied per tile: for i < count, gate.y[yRows[i]] = fn(Wg[e] . x) * (Wu[e] .
/// x), e = experts[i]; up.y is not written (it is checked like matmulId's: pass gate.y). One job over
/// (expert, row range) units, each computing the gate and up outputs of its rows for the expert's tokens
/// into a per-thread scratch and writing only the product while they are in cache. gate and up must share
/// x, n, k and the routing (experts, xRows); each keeps its own weight type and kernels, so the products are
/// bit for bit matmulId's and the result is `glu` on them (the caller passes the element-wise table's row
/// kernel, which this library does not link). Not for f32Reference (the caller runs the steps unfused).
using GluRowFn = void (*)(UnaryFn fn, const float *g, const float *u, float *y, int64_t n);
void matmulIdGlu(const MatmulIdArgs &gate, const MatmulIdArgs &up, UnaryFn fn, GluRowFn glu, ThreadGroup &group);

/// matmulId whose products go to `consume` instead of y, one range of output columns at a time: a job over
/// column ranges [c0, c1) (whole 32-row panels of the weight), each unit computing every entry's products
/// over its columns into a per-thread scratch laid out like y (entry i's values at row yRows[i], column
/// c - c0, `stride` floats a row; rows < yRowCount) and then calling consume(scratch, stride, c0, c1). Rows
/// no entry names hold stale values: the consumer knows which rows it reads. Each product is bit for bit
/// matmulId's (the same kernels on the same token sets). For consumers that reduce over y's rows: MoE's
/// expert_combine fused into the down projection, so that the [tokens, slots, n] products stay in cache
/// instead of being written and read back. a.y is checked, not written. Not for f32Reference.
using ColumnConsumer = std::function<void(const float *scratch, size_t stride, int64_t c0, int64_t c1)>;
void matmulIdColumns(const MatmulIdArgs &args, int64_t yRowCount, const ColumnConsumer &consume,
                     ThreadGroup &group);

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_MATMUL_H
