//===- Binding.h - tensor addresses and bound step operands -------*- C++ -*-===//
//
// Every backend resolves a device plan the same way: once at open, the address of every tensor from where
// its storage kinds start (StorageBases: arenas, weight slices, KV caches, I/O buffers, host or device
// memory); per call, bindOperands substitutes the dynamic dims: the call's tokens (kTokenDim) and the rows
// whose logits it returns (kRowsDim). Views come after their bases
// (validatePlan checked), so one pass in id order resolves them.
//
// Usage:
//   StorageBases b;  b.acts = actArena;  b.hostActs = hostArena;  b.weights = ...;  b.kv = &caches; ...
//   std::vector<void *> ptrs = resolveTensors(dp, b);
//   bindOperands(dp, ptrs, step, tokens, rows, in, out);   // in/out: TensorRefs of this call
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_BINDING_H
#define TPC_RUNTIME_EXEC_BINDING_H

#include "runtime/exec/Tensor.h"

#include <cstdint>
#include <vector>

namespace tpc::rt::exec {

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
  void *rows = nullptr; ///< the output-rows input (i32 [R]) of plans that have one
};

/// The address of every tensor of `dp` (views after their bases, which validatePlan checked).
std::vector<void *> resolveTensors(const DevicePlan &dp, const StorageBases &b);
/// The index of dp's OUTPUT_LOGITS tensor, or -1.
int32_t logitsTensorOf(const DevicePlan &dp);

/// Tensor `id` of device plan `dp` at address ptrs[id], with the token dimension at `t` and the output-rows
/// dimension at `rows` (what every backend hands its ops; the address may be host or device memory). An
/// empty `ptrs` binds null addresses (for checks that look at shapes only).
TensorRef bindTensor(const DevicePlan &dp, const std::vector<void *> &ptrs, int32_t id, int64_t t,
                     int64_t rows);

/// bindTensor for every input and output of `s`.
void bindOperands(const DevicePlan &dp, const std::vector<void *> &ptrs, const Step &s, int64_t t,
                  int64_t rows, std::vector<TensorRef> &in, std::vector<TensorRef> &out);

} // namespace tpc::rt::exec

#endif // TPC_RUNTIME_EXEC_BINDING_H
