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
  /// Product of all dims but the last.
  int64_t rows() const { return inner() ? numel() / inner() : 0; }
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

/// IEEE half <-> float.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);

/// Elementwise and row-wise ops (ElementwiseOps.cpp).
void opBinary(OpKind op, const TensorRef &a, const TensorRef &b, const TensorRef &y, ThreadGroup &tg);
void opScale(const TensorRef &x, const TensorRef &y, float v, ThreadGroup &tg);
void opUnary(UnaryFn fn, const TensorRef &x, const TensorRef &y, ThreadGroup &tg);
void opSoftcap(const TensorRef &x, const TensorRef &y, float cap, ThreadGroup &tg);
void opGlu(UnaryFn fn, const TensorRef &gate, const TensorRef *up, const TensorRef &y, ThreadGroup &tg);
void opRmsNorm(const TensorRef &x, const TensorRef *w, const TensorRef &y, float eps, ThreadGroup &tg);
void opSoftmax(const TensorRef &x, const TensorRef &y, ThreadGroup &tg);
void opTopK(const TensorRef &x, const TensorRef &y, int64_t k, ThreadGroup &tg);
void opTakeAlong(const TensorRef &x, const TensorRef &idx, const TensorRef &y, ThreadGroup &tg);
void opSum(const TensorRef &x, const TensorRef &y, int64_t axis, ThreadGroup &tg);
void opExpertCombine(const TensorRef &x, const std::vector<TensorRef> &muls, const TensorRef &y, ThreadGroup &tg);
/// Applies fn elementwise (exposed for tests of the scalar definitions).
float applyUnary(UnaryFn fn, float x);

/// Data movement (ShapeOps.cpp); all work on any dtype (by element size).
void opCopy(const TensorRef &x, const TensorRef &y);
void opPermute(const TensorRef &x, const TensorRef &y, const std::vector<int64_t> &perm, ThreadGroup &tg);
/// y = x narrowed on `axis` to [offset, offset + y.shape[axis]).
void opNarrow(const TensorRef &x, const TensorRef &y, int64_t axis, int64_t offset);
void opConcat(const std::vector<TensorRef> &xs, const TensorRef &y, int64_t axis);
/// Splits `shape` around `axis` into (outer, dim, inner) element counts.
void splitAxis(const std::vector<int64_t> &shape, int64_t axis, int64_t &outer, int64_t &dim, int64_t &inner);

/// Matrix products and embedding lookups (MatmulOps.cpp).
void opGetRows(const TensorRef &table, const TensorRef &ids, const TensorRef &y, ThreadGroup &tg);
void opMatmul(const TensorRef &x, const TensorRef &w, const TensorRef &y, ThreadGroup &tg);
void opMulMatId(const TensorRef &x, const TensorRef &w, const TensorRef &ids, const TensorRef &y, ThreadGroup &tg);
/// Row r of a weight (or f32 tensor) as floats.
void loadRow(const TensorRef &w, int64_t r, float *dst);

/// RoPE and attention (AttentionOps.cpp).
void opRope(const TensorRef &x, const TensorRef &pos, const TensorRef *freqFactors, const TensorRef &y, int64_t mode,
            int64_t nDims, float base, float freqScale, ThreadGroup &tg);
struct AttentionParams {
  float scale = 1;
  float softcap = 0;
  int64_t window = 0;
};
void opAttention(const TensorRef &q, const TensorRef &k, const TensorRef &v, const TensorRef &pos,
                 const TensorRef *sinks, KvBuffers &kv, const TensorRef &y, const AttentionParams &p,
                 ThreadGroup &tg);

/// Checks that a step's bound operands fit its op (shapes, dtypes, parameters); "" when fine.
std::string checkStep(const Step &s, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out,
                      const std::vector<KvBuffers> &kv);

} // namespace tpc::rt::exec

#endif // TPC_RUNTIME_EXEC_OPS_H
