//===- CpuBackend.cpp - the CPU Backend object and the step runner ---------===//
//
// Kernel failures (std::exception from the kernels, which check their own preconditions) become errors
// naming the step, so no exception leaves the backend.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/CpuBackend.h"

#include "runtime/cpu/CpuSession.h"
#include "runtime/cpu/ops/Ops.h"

#include <fmt/core.h>

#include <algorithm>
#include <thread>

namespace tpc::rt::cpu {

namespace {
class CpuBackend final : public Backend {
public:
  std::string name() const override { return "cpu"; }
  Expected<void> usable() const override { return {}; }
  Expected<std::unique_ptr<Session>> open(Plan plan, const SessionOptions &opts) const override {
    return openCpuSession(std::move(plan), opts);
  }
  std::unique_ptr<exec::HostStepRunner> hostStepRunner(int threads) const override {
    const int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::make_unique<CpuStepRunner>(n);
  }
};
} // namespace

std::unique_ptr<Backend> makeCpuBackend() { return std::make_unique<CpuBackend>(); }

Expected<void> CpuStepRunner::run(const Step &s, const std::vector<exec::TensorRef> &in,
                                  const std::vector<exec::TensorRef> &out, std::vector<exec::KvBuffers> &kv) {
  if (isCollective(s.op))
    return Error{fmt::format("step '{}' ({}) is a collective: the session runs it through its communicator",
                             s.name, opKindName(s.op))};
  try {
    runLocalStep(s, in, out, kv, tg_, cacheOn_ ? &cache_ : nullptr, f32Reference_);
  } catch (const std::exception &e) {
    cache_.clear(); // a failed step may have written part of its outputs
    return Error{fmt::format("step '{}' ({}): {}", s.name, opKindName(s.op), e.what())};
  }
  if (cacheOn_)
    noteWrites(out);
  return {};
}

Expected<void> CpuStepRunner::runBatch(const std::vector<const Step *> &steps,
                                       const std::vector<std::vector<exec::TensorRef>> &in,
                                       const std::vector<std::vector<exec::TensorRef>> &out, const Step *glu,
                                       const exec::TensorRef *gluOut) {
  try {
    std::vector<int64_t> firstExperts;
    for (const Step *s : steps)
      firstExperts.push_back(s->op == OpKind::MulMatId ? MulMatIdParams::read(*s).firstExpert.value_or(0) : 0);
    if (glu)
      opGateUpGlu(steps.front()->op, in, out, firstExperts, GluParams::read(*glu).fn, *gluOut, tg_, cacheOn_ ? &cache_ : nullptr);
    else
      opMatmulBatch(steps.front()->op, in, out, firstExperts, tg_, cacheOn_ ? &cache_ : nullptr, f32Reference_);
  } catch (const std::exception &e) {
    cache_.clear();
    return Error{fmt::format("steps '{}'..'{}' ({}{}): {}", steps.front()->name, glu ? glu->name : steps.back()->name,
                             opKindName(steps.front()->op), glu ? " + glu" : "", e.what())};
  }
  if (cacheOn_) {
    for (const auto &o : out) // unwritten when fused, but a fallback (aliasing) writes them
      noteWrites(o);
    if (glu)
      noteWrites({*gluOut});
  }
  return {};
}

void CpuStepRunner::noteWrites(const std::vector<exec::TensorRef> &written) {
  for (const exec::TensorRef &t : written)
    if (t.data)
      cache_.invalidate(t.data, static_cast<size_t>(t.numel()) * dtypeBytes(t.dtype));
}

} // namespace tpc::rt::cpu
