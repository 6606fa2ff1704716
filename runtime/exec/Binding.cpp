//===- Binding.cpp - tensor addresses and bound operands ---------------------===//
//
// Shared by every backend: the CPU session, the CUDA session and host-step runners bind through here, so a
// tensor means the same bytes everywhere.
//===----------------------------------------------------------------------===//
#include "runtime/exec/Binding.h"

namespace tpc::rt::exec {

void splitAxis(const std::vector<int64_t> &shape, int64_t axis, int64_t &outer, int64_t &dim,
               int64_t &inner) {
  outer = 1;
  inner = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= shape[i];
  dim = shape[axis];
  for (size_t i = axis + 1; i < shape.size(); ++i)
    inner *= shape[i];
}

std::vector<void *> resolveTensors(const DevicePlan &dp, const StorageBases &b) {
  std::vector<void *> ptr(dp.tensors.size(), nullptr);
  for (size_t i = 0; i < dp.tensors.size(); ++i) {
    const TensorDesc &t = dp.tensors[i];
    switch (t.storage) {
    case Storage::Activation:
      ptr[i] = (t.placement == Placement::Host ? b.hostActs : b.acts) + t.offset;
      break;
    case Storage::Weight:
      ptr[i] = b.weights[t.index];
      break;
    case Storage::Kv:
      ptr[i] = (*b.kv)[t.index].k;
      break;
    case Storage::InputTokens:
      ptr[i] = b.tokens;
      break;
    case Storage::InputPositions:
      ptr[i] = b.positions;
      break;
    case Storage::OutputLogits:
      ptr[i] = b.logits;
      break;
    case Storage::InputOutputRows:
      ptr[i] = b.rows;
      break;
    case Storage::View:
      ptr[i] = static_cast<uint8_t *>(ptr[t.index]) + t.offset;
      break;
    }
  }
  return ptr;
}

int32_t logitsTensorOf(const DevicePlan &dp) { return tensorOfStorage(dp, Storage::OutputLogits); }

TensorRef bindTensor(const DevicePlan &dp, const std::vector<void *> &ptrs, int32_t id, int64_t t,
                     int64_t rows) {
  const TensorDesc &td = dp.tensors[id];
  TensorRef r;
  r.data = ptrs.empty() ? nullptr : ptrs[id];
  r.dtype = td.dtype;
  r.shape = td.shape;
  if (!r.shape.empty() && r.shape[0] == kTokenDim)
    r.shape[0] = t;
  else if (!r.shape.empty() && r.shape[0] == kRowsDim)
    r.shape[0] = rows;
  if (td.storage == Storage::Weight) {
    r.isWeight = true;
    r.wtype = dp.weights[td.index].type;
  }
  return r;
}

void bindOperands(const DevicePlan &dp, const std::vector<void *> &ptrs, const Step &s, int64_t t,
                  int64_t rows, std::vector<TensorRef> &in, std::vector<TensorRef> &out) {
  in.clear();
  out.clear();
  for (int32_t id : s.inputs)
    in.push_back(bindTensor(dp, ptrs, id, t, rows));
  for (int32_t id : s.outputs)
    out.push_back(bindTensor(dp, ptrs, id, t, rows));
}

} // namespace tpc::rt::exec
