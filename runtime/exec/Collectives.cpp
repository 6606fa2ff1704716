//===- Collectives.cpp - collective steps from a communicator and three kernels ===//
//
// The compositions of Collectives.h. Parameters are read through StepParams.h; shapes come from the
// plan (for the peers) and from the bound operands (for the local devices), which checkCollectives made
// agree at open.
//===----------------------------------------------------------------------===//
#include "runtime/exec/Collectives.h"

#include "runtime/exec/Binding.h"
#include "runtime/plan/StepParams.h"

#include <fmt/core.h>

namespace tpc::rt::exec {

namespace {
comm::Buffer bufferOf(const TensorRef &t) { return {t.data, t.numel()}; }
} // namespace

CollectiveRunner::CollectiveRunner(const Plan &plan, comm::Communicator &comm, CollectiveKernels &kernels)
    : plan_(plan), comm_(comm), kernels_(kernels), steps_(plan.devices.size()),
      ordinal_(plan.devices.size()) {
  for (size_t d = 0; d < plan.devices.size(); ++d) {
    const std::vector<Step> &steps = plan.devices[d].steps;
    ordinal_[d].assign(steps.size(), -1);
    for (size_t si = 0; si < steps.size(); ++si)
      if (isCollective(steps[si].op)) {
        ordinal_[d][si] = static_cast<int>(steps_[d].size());
        steps_[d].push_back(si);
      }
  }
}

comm::AxisParts CollectiveRunner::partsOf(size_t k, int rank, int64_t axis, int64_t t, int64_t rows) const {
  comm::AxisParts layout;
  // The collective meets the devices of `rank`'s pipeline stage only (all of them in a one-stage plan).
  const size_t per = devicesPerStage(plan_), first = size_t(stageOf(plan_, size_t(rank))) * per;
  for (size_t d = first; d < first + per; ++d) {
    const DevicePlan &dp = plan_.devices[d];
    const Step &s = dp.steps[steps_[d][k]];
    const int32_t part = s.op == OpKind::AllGather ? s.inputs[0] : s.outputs[0];
    layout.parts.push_back(bindTensor(dp, {}, part, t, rows).shape[axis]);
  }
  const DevicePlan &dp = plan_.devices[rank];
  const Step &s = dp.steps[steps_[rank][k]];
  const TensorRef whole = bindTensor(dp, {}, s.op == OpKind::AllGather ? s.outputs[0] : s.inputs[0], t, rows);
  int64_t dim = 0;
  splitAxis(whole.shape, axis, layout.outer, dim, layout.inner);
  return layout;
}

Expected<void> CollectiveRunner::allReduceRmsNormBf16(const std::vector<CollectiveCall> &calls) {
  // A residual on the wire would round the hidden state itself to bf16 at every layer boundary; every
  // device holds the same residual, so the addends alone cross (summed in place in x, which this step is
  // the last to read: y may be x) and each device adds the residual to the sum afterwards, in f32.
  std::vector<comm::AllReduceEntry> entries;
  for (const CollectiveCall &c : calls)
    entries.push_back({c.rank, {bufferOf((*c.in)[0])}, c.stream});
  if (auto ok = comm_.allReduce(entries); !ok)
    return ok;
  for (const CollectiveCall &c : calls) {
    const AllReduceRmsNormParams p = AllReduceRmsNormParams::read(plan_.devices[c.rank].steps[c.step]);
    const TensorRef &x = (*c.in)[0], &y = (*c.out)[0];
    if (p.residual)
      kernels_.add(c.rank, x, (*c.in)[1], y);
    else
      kernels_.copy(c.rank, x, y);
    kernels_.rmsNorm(c.rank, y, p.weight ? &c.in->back() : nullptr, (*c.out)[1], p.eps);
  }
  return {};
}

Expected<void> CollectiveRunner::run(const std::vector<CollectiveCall> &calls, int64_t t, int64_t rows) {
  if (calls.empty())
    return {};
  auto stepOf = [&](const CollectiveCall &c) -> const Step & { return plan_.devices[c.rank].steps[c.step]; };
  const Step &s0 = stepOf(calls[0]);
  const int k = ordinal_[calls[0].rank][calls[0].step];
  for (const CollectiveCall &c : calls)
    if (k < 0 || ordinal_[c.rank][c.step] != k) {
      // A caller bug; the peers must not wait for these devices.
      const std::string why =
          fmt::format("collective '{}': device {} is at step {} '{}', not at collective {} of "
                      "device {}",
                      s0.name, c.rank, c.step, stepOf(c).name, k, calls[0].rank);
      comm_.abort(why);
      return Error{why};
    }
  switch (s0.op) {
  case OpKind::AllReduce: {
    std::vector<comm::AllReduceEntry> entries;
    for (const CollectiveCall &c : calls) {
      comm::AllReduceEntry e{c.rank, {}, c.stream};
      for (size_t i = 0; i < c.in->size(); ++i) {
        kernels_.copy(c.rank, (*c.in)[i], (*c.out)[i]);
        e.bucket.push_back(bufferOf((*c.out)[i]));
      }
      entries.push_back(std::move(e));
    }
    return comm_.allReduce(entries);
  }
  case OpKind::AllReduceRmsNorm: {
    if (comm_.payload() == comm::Payload::BF16)
      return allReduceRmsNormBf16(calls);
    // The residual joins device 0's addend, so the sum holds it once (y may share r's bytes).
    std::vector<comm::AllReduceEntry> entries;
    for (const CollectiveCall &c : calls) {
      const AllReduceRmsNormParams p = AllReduceRmsNormParams::read(stepOf(c));
      const TensorRef &x = (*c.in)[0], &y = (*c.out)[0];
      // Device 0 of the call's stage (plan device 0 in a one-stage plan) holds the residual's addend.
      if (p.residual && size_t(c.rank) % devicesPerStage(plan_) == 0)
        kernels_.add(c.rank, x, (*c.in)[1], y);
      else
        kernels_.copy(c.rank, x, y);
      entries.push_back({c.rank, {bufferOf(y)}, c.stream});
    }
    if (auto ok = comm_.allReduce(entries); !ok)
      return ok;
    for (const CollectiveCall &c : calls) {
      const AllReduceRmsNormParams p = AllReduceRmsNormParams::read(stepOf(c));
      kernels_.rmsNorm(c.rank, (*c.out)[0], p.weight ? &c.in->back() : nullptr, (*c.out)[1], p.eps);
    }
    return {};
  }
  case OpKind::ReduceScatter: {
    const int64_t axis = AxisParams::read(s0).axis;
    const comm::AxisParts layout = partsOf(k, calls[0].rank, axis, t, rows);
    std::vector<comm::ReduceScatterEntry> entries;
    for (const CollectiveCall &c : calls)
      entries.push_back({c.rank, bufferOf((*c.in)[0]), bufferOf((*c.out)[0]), c.stream});
    return comm_.reduceScatter(entries, layout);
  }
  case OpKind::AllGather: {
    const int64_t axis = AxisParams::read(s0).axis;
    const comm::AxisParts layout = partsOf(k, calls[0].rank, axis, t, rows);
    std::vector<comm::AllGatherEntry> entries;
    for (const CollectiveCall &c : calls) {
      comm::Buffer whole = bufferOf((*c.out)[0]);
      if (c.wholeUnused && comm_.wholeOptional())
        whole.data = nullptr;
      entries.push_back({c.rank, bufferOf((*c.in)[0]), whole, c.stream});
    }
    return comm_.allGather(entries, layout);
  }
  default:
    return Error{fmt::format("step '{}' ({}) is not a collective", s0.name, opKindName(s0.op))};
  }
}

} // namespace tpc::rt::exec
