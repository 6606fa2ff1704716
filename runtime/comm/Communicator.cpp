//===- Communicator.cpp - element types and axis layouts -------------------===//
//
// The small value types every communicator implementation shares.
//===----------------------------------------------------------------------===//
#include "runtime/comm/Communicator.h"

#include <fmt/core.h>

namespace tpc::rt::comm {

size_t elemBytes(ElemType t) { return t == ElemType::F16 ? 2 : 4; }

const char *elemTypeName(ElemType t) {
  switch (t) {
  case ElemType::F32:
    return "f32";
  case ElemType::F16:
    return "f16";
  case ElemType::I32:
    return "i32";
  }
  return "unknown";
}

const char *payloadName(Payload p) { return p == Payload::BF16 ? "bf16" : "f32"; }

int64_t AxisParts::total() const {
  int64_t t = 0;
  for (int64_t p : parts)
    t += p;
  return t;
}

int64_t AxisParts::offset(int rank) const {
  int64_t t = 0;
  for (int r = 0; r < rank; ++r)
    t += parts[r];
  return t;
}

Expected<void> Communicator::send(int rank, int peer, Buffer, ElemType) {
  return Error{fmt::format("the {} communicator cannot send from rank {} to rank {}: it serves one-stage "
                           "plans only",
                           name(), rank, peer)};
}

Expected<void> Communicator::recv(int rank, int peer, Buffer, ElemType) {
  return Error{fmt::format("the {} communicator cannot receive from rank {} on rank {}: it serves one-stage "
                           "plans only",
                           name(), peer, rank)};
}

} // namespace tpc::rt::comm
