//===- Ops.h - CPU implementations of the plan's step ops ---------*- C++ -*-===//
//
// One function per op family, on bound operands (exec::TensorRef: pointer + dtype + concrete shape) in host
// memory. Shapes were checked when the session opened (exec::checkStep), so these functions assume
// consistent operands. Loops are split over the device's ThreadGroup; the families live in
// ElementwiseOps.cpp, ShapeOps.cpp, MatmulOps.cpp and AttentionOps.cpp, and runLocalStep (LocalStep.cpp)
// is the switch from a step to them.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_OPS_OPS_H
#define TPC_RUNTIME_CPU_OPS_OPS_H

#include "runtime/cpu/ActivationCache.h"
#include "runtime/cpu/ThreadGroup.h"
#include "runtime/exec/Tensor.h"
#include "runtime/plan/StepParams.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tpc::rt::cpu {

using exec::KvBuffers;
using exec::TensorRef;

/// IEEE half -> float.
float halfToFloat(uint16_t h);
/// float -> IEEE half, round to nearest even.
uint16_t floatToHalf(float f);

// Elementwise and row-wise ops (ElementwiseOps.cpp).

/// ADD/MUL/DIV: y = a op b, b broadcast right-aligned.
void opBinary(OpKind op, const TensorRef &a, const TensorRef &b, const TensorRef &y, ThreadGroup &tg);
/// SCALE: y = x * v.
void opScale(const TensorRef &x, const TensorRef &y, float v, ThreadGroup &tg);
/// UNARY: y = fn(x).
void opUnary(UnaryFn fn, const TensorRef &x, const TensorRef &y, ThreadGroup &tg);
/// SOFTCAP: y = cap * tanh(x / cap).
void opSoftcap(const TensorRef &x, const TensorRef &y, float cap, ThreadGroup &tg);
/// GLU: y = fn(gate) * up; without `up`, gate holds [gate | up] halves per row.
void opGlu(UnaryFn fn, const TensorRef &gate, const TensorRef *up, const TensorRef &y, ThreadGroup &tg);
/// RMS_NORM over the last axis, times `w` when given.
void opRmsNorm(const TensorRef &x, const TensorRef *w, const TensorRef &y, float eps, ThreadGroup &tg);
/// L2_NORM over the last axis: x / max(|x|, eps).
void opL2Norm(const TensorRef &x, const TensorRef &y, float eps, ThreadGroup &tg);
/// GATED_RMS_NORM over the last axis: rms_norm(x) * w * silu(z).
void opGatedRmsNorm(const TensorRef &x, const TensorRef &w, const TensorRef &z, const TensorRef &y, float eps,
                    ThreadGroup &tg);
/// SOFTMAX over the last axis.
void opSoftmax(const TensorRef &x, const TensorRef &y, ThreadGroup &tg);
/// TOP_K: indices of the k largest per row, descending, ties to the lower index.
void opTopK(const TensorRef &x, const TensorRef &y, int64_t k, ThreadGroup &tg);
/// TAKE_ALONG: y[r, j] = x[r, idx[r, j]].
void opTakeAlong(const TensorRef &x, const TensorRef &idx, const TensorRef &y, ThreadGroup &tg);
/// SUM over `axis` (y holds the reduced shape, with or without the kept 1).
void opSum(const TensorRef &x, const TensorRef &y, int64_t axis, ThreadGroup &tg);
/// ADD_ID: y[t, j] = x[t, j] + b[ids[t, j] - firstExpert] (rows of experts outside b are copied).
void opAddId(const TensorRef &x, const TensorRef &b, const TensorRef &ids, const TensorRef &y, int64_t firstExpert,
             ThreadGroup &tg);
/// EXPERT_COMBINE: y[t] = sum_j prod_i muls_i[t, j] * x[t, j].
void opExpertCombine(const TensorRef &x, const std::vector<TensorRef> &muls, const TensorRef &y,
                     ThreadGroup &tg);
/// EXPERT_COMBINE's arithmetic for one token over n columns: y[c] = 0 + m[0] x[0][c] + m[1] x[1][c] + ...,
/// slots in order (rows[j] null: a zero row, m[j] * 0 still added). opExpertCombine and the down projection
/// fused with it (opMulMatIdCombine) both call this one function, so they agree bit for bit.
void combineRow(const float *const *rows, const float *m, int64_t k, int64_t n, float *y);
/// Applies fn elementwise (exposed for tests of the scalar definitions).
float applyUnary(UnaryFn fn, float x);

// Data movement (ShapeOps.cpp); all work on any dtype (by element size).

/// COPY/RESHAPE: same elements (f32 <-> f16 converts); no-op when y aliases x.
void opCopy(const TensorRef &x, const TensorRef &y);
/// PERMUTE: y.shape[i] = x.shape[perm[i]].
void opPermute(const TensorRef &x, const TensorRef &y, const std::vector<int64_t> &perm, ThreadGroup &tg);
/// y = x narrowed on `axis` to [offset, offset + y.shape[axis]).
void opNarrow(const TensorRef &x, const TensorRef &y, int64_t axis, int64_t offset);
/// CONCAT along `axis`.
void opConcat(const std::vector<TensorRef> &xs, const TensorRef &y, int64_t axis);
using exec::splitAxis;

// Matrix products and embedding lookups (MatmulOps.cpp).

/// Bytes of one row of a matmul's weight operand (a ggml-typed weight, or an f32 tensor standing in for one).
uint64_t rowBytesOf(const TensorRef &w);
/// GET_ROWS: y[i] = table[ids[i]] as floats (out-of-range ids give zeros).
void opGetRows(const TensorRef &table, const TensorRef &ids, const TensorRef &y, int64_t firstId,
               ThreadGroup &tg);
/// MATMUL: y[m, n] = x[m, :] . w[n, :]; x's conversion is taken from / kept in `cache` when given.
/// `f32Reference`: the float32 reference product (MatmulOptions::f32Reference) instead.
void opMatmul(const TensorRef &x, const TensorRef &w, const TensorRef &y, ThreadGroup &tg,
              ActivationCache *cache = nullptr, bool f32Reference = false);
/// MUL_MAT_ID: y[t, j] = w[ids[t, j] - firstExpert] . x[t, j] (or x[t] when x has no slot axis); cache,
/// f32Reference as for opMatmul. An expert-parallel share holds experts [firstExpert, firstExpert +
/// w.shape[0]): rows routed to other experts are zeros and are not computed.
void opMulMatId(const TensorRef &x, const TensorRef &w, const TensorRef &ids, const TensorRef &y,
                int64_t firstExpert, ThreadGroup &tg, ActivationCache *cache = nullptr, bool f32Reference = false);
/// For each step index i of `dp`: the end of the run of steps from i that can run as one matmul job
/// (consecutive Matmuls on the same input, or MulMatIds on the same input and routing, none reading
/// another's output); i + 1 where there is none.
std::vector<size_t> matmulBatchEnds(const DevicePlan &dp);
/// Runs such a run of Matmul (or MulMatId) steps, operands bound per step, as one job (`firstExperts`: each
/// MulMatId step's first expert).
void opMatmulBatch(OpKind op, const std::vector<std::vector<TensorRef>> &ins,
                   const std::vector<std::vector<TensorRef>> &outs, const std::vector<int64_t> &firstExperts,
                   ThreadGroup &tg, ActivationCache *cache, bool f32Reference = false);
/// For each step index i of `dp`: the index of a GLU step that the MulMatId (or Matmul) run [i, batchEnd[i])
/// feeds and that runs fused with it (opGateUpGlu), or 0. The run is gate and up (GLU (g, u)) or one merged
/// gate_up (GLU (x[..., 2F])), the GLU follows it directly and is the only reader of its outputs (which the
/// fusion never writes).
std::vector<size_t> gateUpGluSteps(const DevicePlan &dp, const std::vector<size_t> &batchEnd);
/// Such a run of `op` steps (operands per step, `firstExperts` per MulMatId step) and its GLU fn as one job
/// (matmulIdGlu; a dense matmul as one expert every token uses): y = fn(gate) * up per row (per routed
/// (token, slot): zeros for other devices' experts), the gate/up outputs `outs` unwritten; unfused (outs
/// written, then the GLU) where y overlaps an input or the routing.
void opGateUpGlu(OpKind op, const std::vector<std::vector<TensorRef>> &ins,
                 const std::vector<std::vector<TensorRef>> &outs, const std::vector<int64_t> &firstExperts,
                 UnaryFn fn, const TensorRef &y, ThreadGroup &tg, ActivationCache *cache);
/// For each step index i of `dp`: the index of an EXPERT_COMBINE step that the lone MulMatId step i feeds and
/// that runs fused with it (opMulMatIdCombine), or 0: the combine follows directly, reads the products as
/// its x and nothing else reads them (the fusion never writes them).
std::vector<size_t> downCombineSteps(const DevicePlan &dp, const std::vector<size_t> &batchEnd);
/// Tokens from which opMulMatIdCombine fuses (below it runs the two steps: the same bits either way).
inline constexpr int64_t kFusedCombineMinTokens = 16;
/// MUL_MAT_ID (x, w, ids -> products, unwritten) and EXPERT_COMBINE (products, muls -> y) as one job
/// (matmulIdColumns): each column range's products of every routed (token, slot) stay in a per-thread
/// scratch and are combined there (combineRow), the same bits as the two steps. Unfused (the products
/// written, then combined) where y overlaps x, the routing or a factor, or with f32Reference.
void opMulMatIdCombine(const TensorRef &x, const TensorRef &w, const TensorRef &ids, const TensorRef &products,
                       int64_t firstExpert, const std::vector<TensorRef> &muls, const TensorRef &y, ThreadGroup &tg,
                       ActivationCache *cache, bool f32Reference = false);
/// Row r of a weight (or f32 tensor) as floats.
void loadRow(const TensorRef &w, int64_t r, float *dst);

// RoPE and attention (AttentionOps.cpp).

/// ROPE in place or out of place; cos/sin from cache's RoPE tables (a table built for this step when null).
void opRope(const TensorRef &x, const TensorRef &pos, const TensorRef *freqFactors, const TensorRef &y,
            const RopeParams &p, ThreadGroup &tg, ActivationCache *cache = nullptr);
/// SSM_CONV: causal depthwise conv of x[T,C] with w[C,K] over each sequence, with the conv state of
/// recurrent cache `rs` (runtime/cpu/DeltaNet.h).
void opSsmConv(const TensorRef &x, const TensorRef &w, KvBuffers &rs, const TensorRef &pos, const TensorRef &y,
               ThreadGroup &tg);
/// DELTA_NET: the gated delta rule with the state of recurrent cache `rs` (runtime/cpu/DeltaNet.h).
void opDeltaNet(const TensorRef &q, const TensorRef &k, const TensorRef &v, const TensorRef &g,
                const TensorRef &beta, KvBuffers &rs, const TensorRef &pos, const TensorRef &y, float scale,
                ThreadGroup &tg);
/// ATTENTION: append k, v at pos into `kv` (the cache p.kvCache names), then causal (windowed) attention of
/// q over the cache.
void opAttention(const TensorRef &q, const TensorRef &k, const TensorRef &v, const TensorRef &pos,
                 const TensorRef *sinks, KvBuffers &kv, const TensorRef &y, const AttentionParams &p,
                 ThreadGroup &tg);

/// Runs one step that is not a collective on bound operands in host memory, with `kv` the device's caches
/// (Attention appends to the one it names): the switch behind CpuStepRunner (CpuBackend.h), which the CPU
/// session and accelerator backends' host-placed steps go through. Copy and Reshape are host memcpys.
/// Matmuls take converted inputs from `cache` when given; the caller must then report every write to it.
/// `f32Reference`: matmuls are the float32 reference products (MatmulOptions::f32Reference).
/// Throws std::invalid_argument for a collective (AllReduce, ReduceScatter, AllGather, AllReduceRmsNorm):
/// sessions run those through exec::CollectiveRunner.
void runLocalStep(const Step &s, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out,
                  std::vector<KvBuffers> &kv, ThreadGroup &tg, ActivationCache *cache = nullptr,
                  bool f32Reference = false);

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_OPS_OPS_H
