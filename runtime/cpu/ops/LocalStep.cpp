//===- LocalStep.cpp - one non-collective step on host tensors --------------===//
//
// The op switch of the CPU executor, public so that every backend runs host-placed steps the same way: the
// CPU session calls it for each step but the collectives, an accelerator backend for the steps the plan
// places on the host (with host pointers bound). Operands were checked at open (checkStep).
//===----------------------------------------------------------------------===//
#include "runtime/exec/Ops.h"

#include <fmt/core.h>

#include <stdexcept>

namespace tpc::rt::exec {

void runLocalStep(const Step &s, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out,
                  std::vector<KvBuffers> &kv, ThreadGroup &tg) {
  const TensorRef &x = in[0];
  const TensorRef &y = out[0];
  switch (s.op) {
  case OpKind::GetRows:
    opGetRows(x, in[1], y, s.ints.empty() ? 0 : s.ints[0], tg);
    return;
  case OpKind::TakeAlong:
    opTakeAlong(x, in[1], y, tg);
    return;
  case OpKind::RmsNorm:
    opRmsNorm(x, in.size() > 1 ? &in[1] : nullptr, y, s.floats[0], tg);
    return;
  case OpKind::Matmul:
    opMatmul(x, in[1], y, tg);
    return;
  case OpKind::MulMatId:
    opMulMatId(x, in[1], in[2], y, tg);
    return;
  case OpKind::Add:
  case OpKind::Mul:
  case OpKind::Div:
    opBinary(s.op, x, in[1], y, tg);
    return;
  case OpKind::Scale:
    opScale(x, y, s.floats[0], tg);
    return;
  case OpKind::Unary:
    opUnary(static_cast<UnaryFn>(s.ints[0]), x, y, tg);
    return;
  case OpKind::Glu:
    opGlu(static_cast<UnaryFn>(s.ints[0]), x, in.size() > 1 ? &in[1] : nullptr, y, tg);
    return;
  case OpKind::Softmax:
    opSoftmax(x, y, tg);
    return;
  case OpKind::TopK:
    opTopK(x, y, s.ints[0], tg);
    return;
  case OpKind::Sum:
    opSum(x, y, s.ints[0], tg);
    return;
  case OpKind::Reshape:
  case OpKind::Copy:
    opCopy(x, y);
    return;
  case OpKind::Permute:
    opPermute(x, y, s.ints, tg);
    return;
  case OpKind::View:
  case OpKind::Slice:
    opNarrow(x, y, s.ints[0], s.ints[1]);
    return;
  case OpKind::Concat:
    opConcat(in, y, s.ints[0]);
    return;
  case OpKind::Rope:
    opRope(x, in[1], in.size() > 2 ? &in[2] : nullptr, y, s.ints[0], s.ints[1], s.floats[0], s.floats[1], tg);
    return;
  case OpKind::Softcap:
    opSoftcap(x, y, s.floats[0], tg);
    return;
  case OpKind::Attention: {
    AttentionParams p;
    p.scale = s.floats[0];
    p.softcap = s.floats[1];
    p.window = s.ints[1];
    opAttention(x, in[1], in[2], in[3], in.size() > 4 ? &in[4] : nullptr, kv[s.ints[0]], y, p, tg);
    return;
  }
  case OpKind::ExpertCombine:
    opExpertCombine(x, std::vector<TensorRef>(in.begin() + 1, in.end()), y, tg);
    return;
  case OpKind::AllReduce:
  case OpKind::ReduceScatter:
  case OpKind::AllGather:
  case OpKind::AllReduceRmsNorm:
    break;
  }
  throw std::invalid_argument(fmt::format("runLocalStep: step '{}' ({}) is a collective or unknown; the "
                                          "session runs collectives itself",
                                          s.name, opKindName(s.op)));
}

} // namespace tpc::rt::exec
