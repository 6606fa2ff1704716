//===- Ops.h - CPU implementations of the plan's step ops ---------*- C++ -*-===//
//
// One function per op family, on resolved tensors (pointer + dtype + concrete shape): the executor binds a
// step's operands and calls these from its switch. Shapes were checked when the session opened
// (checkStep), so these functions assume consistent operands. Loops are split over the device's
// ThreadGroup; the families live in ElementwiseOps.cpp, ShapeOps.cpp, MatmulOps.cpp and AttentionOps.cpp.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_OPS_H
#define TPC_RUNTIME_EXEC_OPS_H

#include "runtime/cpu/ThreadGroup.h"
#include "runtime/plan/PlanFormat.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tpc::rt::exec {

using cpu::ThreadGroup;

/// A bound operand: where its bytes are, their type and the shape for this call.
struct TensorRef {
  void *data = nullptr;
  DType dtype = DType::F32;
  bool isWeight = false;          ///< rows of `wtype` (any ggml type)
  GGMLType wtype = GGMLType::F32; ///< only when isWeight
  std::vector<int64_t> shape;

  /// Element count.
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  /// Last dim (1 for a scalar).
  int64_t inner() const { return shape.empty() ? 1 : shape.back(); }
  /// Product of all dims but the last (also when the last is 0: a [T,0] tensor still has T rows).
  int64_t rows() const {
    int64_t n = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i)
      n *= shape[i];
    return n;
  }
  float *f() const { return static_cast<float *>(data); }
  int32_t *i() const { return static_cast<int32_t *>(data); }
};

/// One layer's cache, allocated for the session's context size: K [ctx, Hkv, Dk], V [ctx, Hkv, Dv].
struct KvBuffers {
  void *k = nullptr;
  void *v = nullptr;
  KvCache desc;
  int64_t ctx = 0;
};

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
/// SOFTMAX over the last axis.
void opSoftmax(const TensorRef &x, const TensorRef &y, ThreadGroup &tg);
/// TOP_K: indices of the k largest per row, descending, ties to the lower index.
void opTopK(const TensorRef &x, const TensorRef &y, int64_t k, ThreadGroup &tg);
/// TAKE_ALONG: y[r, j] = x[r, idx[r, j]].
void opTakeAlong(const TensorRef &x, const TensorRef &idx, const TensorRef &y, ThreadGroup &tg);
/// SUM over `axis` (y holds the reduced shape, with or without the kept 1).
void opSum(const TensorRef &x, const TensorRef &y, int64_t axis, ThreadGroup &tg);
/// EXPERT_COMBINE: y[t] = sum_j prod_i muls_i[t, j] * x[t, j].
void opExpertCombine(const TensorRef &x, const std::vector<TensorRef> &muls, const TensorRef &y,
                     ThreadGroup &tg);
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
/// Splits `shape` around `axis` into (outer, dim, inner) element counts.
void splitAxis(const std::vector<int64_t> &shape, int64_t axis, int64_t &outer, int64_t &dim, int64_t &inner);

// Matrix products and embedding lookups (MatmulOps.cpp).

/// GET_ROWS: y[i] = table[ids[i]] as floats (out-of-range ids give zeros).
void opGetRows(const TensorRef &table, const TensorRef &ids, const TensorRef &y, int64_t firstId,
               ThreadGroup &tg);
/// MATMUL: y[m, n] = x[m, :] . w[n, :].
void opMatmul(const TensorRef &x, const TensorRef &w, const TensorRef &y, ThreadGroup &tg);
/// MUL_MAT_ID: y[t, j] = w[ids[t, j]] . x[t, j] (or x[t] when x has no slot axis).
void opMulMatId(const TensorRef &x, const TensorRef &w, const TensorRef &ids, const TensorRef &y,
                ThreadGroup &tg);
/// Row r of a weight (or f32 tensor) as floats.
void loadRow(const TensorRef &w, int64_t r, float *dst);

// RoPE and attention (AttentionOps.cpp).

/// ROPE in place or out of place; mode 0 normal, 1 NEOX.
void opRope(const TensorRef &x, const TensorRef &pos, const TensorRef *freqFactors, const TensorRef &y,
            int64_t mode, int64_t nDims, float base, float freqScale, ThreadGroup &tg);
/// Scalars of ATTENTION.
struct AttentionParams {
  float scale = 1;
  float softcap = 0;
  int64_t window = 0;
};
/// ATTENTION: append k, v at pos into `kv`, then causal (windowed) attention of q over the cache.
void opAttention(const TensorRef &q, const TensorRef &k, const TensorRef &v, const TensorRef &pos,
                 const TensorRef *sinks, KvBuffers &kv, const TensorRef &y, const AttentionParams &p,
                 ThreadGroup &tg);

/// Runs one step that is not a collective on bound operands in host memory (the CPU kernels above), with
/// `kv` the device's caches (Attention reads kv[s.ints[0]], host pointers): the CPU session's per-step
/// switch, and what an accelerator backend calls for the steps its plan places on the host, e.g.
///   bindOperands(dp, ptrs, s, t, in, out);   // ptrs from resolveTensors with StorageBases::hostActs set
///   runLocalStep(s, in, out, hostKv, tg);
/// Copy and Reshape are host memcpys. Throws std::invalid_argument for a collective (AllReduce,
/// ReduceScatter, AllGather, AllReduceRmsNorm): sessions run those themselves.
void runLocalStep(const Step &s, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out,
                  std::vector<KvBuffers> &kv, ThreadGroup &tg);

/// Tensor `id` of device plan `dp` at address ptrs[id], with the token dimension at `t` (what every backend
/// hands its ops; the address may be host or device memory).
TensorRef bindTensor(const DevicePlan &dp, const std::vector<void *> &ptrs, int32_t id, int64_t t);
/// Where a device's storage kinds start (host or device memory); resolveTensors derives each tensor's
/// address from them, for every backend.
struct StorageBases {
  uint8_t *acts = nullptr;
  /// Where the host activation arena starts (DevicePlan::hostActivationBytes; host-placed activations
  /// have offsets of their own there). Views follow their base.
  uint8_t *hostActs = nullptr;
  std::vector<uint8_t *> weights; ///< one per weight slice (a host slice's in host memory)
  const std::vector<KvBuffers> *kv = nullptr;
  void *tokens = nullptr, *positions = nullptr, *logits = nullptr;
};
/// The address of every tensor of `dp` (views after their bases, which validatePlan checked).
std::vector<void *> resolveTensors(const DevicePlan &dp, const StorageBases &b);
/// The index of dp's OUTPUT_LOGITS tensor, or -1.
int32_t logitsTensorOf(const DevicePlan &dp);

/// bindTensor for every input and output of `s`.
void bindOperands(const DevicePlan &dp, const std::vector<void *> &ptrs, const Step &s, int64_t t,
                  std::vector<TensorRef> &in, std::vector<TensorRef> &out);

/// The k-th collective of every device must agree with device 0's at `t` tokens: op, parameters, tensor
/// count, equal sizes for all-reduces, and for gather/scatter parts that add up to one whole along the axis.
/// `ptrs[d]` are device d's tensor addresses. "" when fine.
std::string checkCollectives(const Plan &plan, const std::vector<const std::vector<void *> *> &ptrs,
                             int64_t t);

/// Checks that a step's bound operands fit its op (shapes, dtypes, parameters); "" when fine.
std::string checkStep(const Step &s, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out,
                      const std::vector<KvBuffers> &kv);

} // namespace tpc::rt::exec

#endif // TPC_RUNTIME_EXEC_OPS_H
