//===- LocalStep.cpp - one non-collective step on host tensors --------------===//
//
// The op switch of the CPU backend, behind CpuStepRunner: the CPU session runs every step but the
// collectives through it, an accelerator backend the steps the plan places on the host (with host pointers
// bound). Operands were checked at open (exec::checkStep); parameters are read through StepParams.h.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ops/Ops.h"

#include <fmt/core.h>

#include <stdexcept>

namespace tpc::rt::cpu {

void runLocalStep(const Step &s, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out,
                  std::vector<KvBuffers> &kv, ThreadGroup &tg, ActivationCache *cache, bool f32Reference) {
  if (in.empty() || out.empty()) // a stage transfer: the session's communicator moves it
    throw std::invalid_argument(fmt::format("runLocalStep: step '{}' ({}) has no input or no output; sessions "
                                            "run stage transfers through their communicator",
                                            s.name, opKindName(s.op)));
  const TensorRef &x = in[0];
  const TensorRef &y = out[0];
  switch (s.op) {
  case OpKind::GetRows:
    opGetRows(x, in[1], y, GetRowsParams::read(s).firstId.value_or(0), tg);
    return;
  case OpKind::TakeAlong:
    opTakeAlong(x, in[1], y, tg);
    return;
  case OpKind::RmsNorm:
    opRmsNorm(x, in.size() > 1 ? &in[1] : nullptr, y, RmsNormParams::read(s).eps, tg);
    return;
  case OpKind::Matmul:
    opMatmul(x, in[1], y, tg, cache, f32Reference);
    return;
  case OpKind::MulMatId:
    opMulMatId(x, in[1], in[2], y, MulMatIdParams::read(s).firstExpert.value_or(0), tg, cache, f32Reference);
    return;
  case OpKind::Add:
  case OpKind::Mul:
  case OpKind::Div:
    opBinary(s.op, x, in[1], y, tg);
    return;
  case OpKind::Scale:
    opScale(x, y, ScaleParams::read(s).value, tg);
    return;
  case OpKind::Unary:
    opUnary(UnaryParams::read(s).fn, x, y, tg);
    return;
  case OpKind::Glu:
    opGlu(GluParams::read(s).fn, x, in.size() > 1 ? &in[1] : nullptr, y, tg);
    return;
  case OpKind::Softmax:
    opSoftmax(x, y, tg);
    return;
  case OpKind::TopK:
    opTopK(x, y, TopKParams::read(s).k, tg);
    return;
  case OpKind::Sum:
    opSum(x, y, SumParams::read(s).axis, tg);
    return;
  case OpKind::Reshape:
  case OpKind::Copy:
    opCopy(x, y);
    return;
  case OpKind::Permute:
    opPermute(x, y, PermuteParams::read(s).perm, tg);
    return;
  case OpKind::View:
  case OpKind::Slice: {
    const NarrowParams p = NarrowParams::read(s);
    opNarrow(x, y, p.axis, p.offset);
    return;
  }
  case OpKind::Concat:
    opConcat(in, y, AxisParams::read(s).axis);
    return;
  case OpKind::Rope:
    opRope(x, in[1], in.size() > 2 ? &in[2] : nullptr, y, RopeParams::read(s), tg, cache);
    return;
  case OpKind::Softcap:
    opSoftcap(x, y, SoftcapParams::read(s).cap, tg);
    return;
  case OpKind::Attention: {
    const AttentionParams p = AttentionParams::read(s);
    const size_t nIn = in.size() - (p.gated ? 1 : 0); // the gate is the last input
    opAttention(x, in[1], in[2], in[3], nIn > 4 ? &in[4] : nullptr, kv[p.kvCache], y, p, tg);
    if (p.gated)
      opGlu(UnaryFn::Sigmoid, in.back(), &y, y, tg); // y = sigmoid(gate) * y
    return;
  }
  case OpKind::SsmConv:
    opSsmConv(x, in[1], kv[SsmConvParams::read(s).kvCache], in[2], y, tg);
    return;
  case OpKind::DeltaNet: {
    const DeltaNetParams p = DeltaNetParams::read(s);
    opDeltaNet(x, in[1], in[2], in[3], in[4], kv[p.kvCache], in[5], y, p.scale, tg);
    return;
  }
  case OpKind::L2Norm:
    opL2Norm(x, y, RmsNormParams::read(s).eps, tg);
    return;
  case OpKind::GatedRmsNorm:
    opGatedRmsNorm(x, in[1], in[2], y, RmsNormParams::read(s).eps, tg);
    return;
  case OpKind::AddId:
    opAddId(x, in[1], in[2], y, AddIdParams::read(s).firstExpert.value_or(0), tg);
    return;
  case OpKind::ExpertCombine:
    opExpertCombine(x, std::vector<TensorRef>(in.begin() + 1, in.end()), y, tg);
    return;
  case OpKind::AllReduce:
  case OpKind::ReduceScatter:
  case OpKind::AllGather:
  case OpKind::AllReduceRmsNorm:
  case OpKind::Send:
  case OpKind::Recv:
    break;
  }
  throw std::invalid_argument(fmt::format("runLocalStep: step '{}' ({}) is a collective or unknown; "
                                          "sessions run collectives through their communicator",
                                          s.name, opKindName(s.op)));
}

} // namespace tpc::rt::cpu
