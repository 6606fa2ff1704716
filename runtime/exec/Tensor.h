//===- Tensor.h - bound operands: what every backend hands its ops -*- C++ -*-===//
//
// A step's operands after binding (Binding.h): an address (host or device memory, the backend's), the
// element type and the concrete shape of this call (the token dimension substituted). KvBuffers is one
// layer's cache as a backend allocated it. Plain data, no backend types.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_TENSOR_H
#define TPC_RUNTIME_EXEC_TENSOR_H

#include "runtime/plan/PlanFormat.h"

#include <cstdint>
#include <vector>

namespace tpc::rt::exec {

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

/// One layer's cache as a session allocated it: K [sequences * ctx, Hkv, Dk], V [sequences * ctx, Hkv, Dv],
/// where ctx is kvPositions(desc, ...) (the context, or the ring of a sliding-window layer). Position p of
/// sequence s lives in cell(s, p): a ring overwrites p - ctx, which its window no longer reads.
struct KvBuffers {
  void *k = nullptr;
  void *v = nullptr;
  KvCache desc;
  int64_t ctx = 0;       ///< positions per sequence
  int32_t sequences = 1; ///< sequences the cache holds
  /// The sequence of each token of the current call, in the memory the backend's attention reads (the
  /// session fills it with the tokens); null means every token is in sequence 0. Attention is not an input
  /// of the plan's ops: the plan knows positions, the session knows sequences.
  const int32_t *seq = nullptr;
  int64_t cell(int64_t s, int64_t pos) const { return s * ctx + pos % ctx; }
};

/// Splits `shape` around `axis` into (outer, dim, inner) element counts.
void splitAxis(const std::vector<int64_t> &shape, int64_t axis, int64_t &outer, int64_t &dim, int64_t &inner);

} // namespace tpc::rt::exec

#endif // TPC_RUNTIME_EXEC_TENSOR_H
