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
                                       const std::vector<std::vector<exec::TensorRef>> &out, const Step *fused,
                                       const std::vector<exec::TensorRef> *fusedIn,
                                       const exec::TensorRef *fusedOut) {
  try {
    std::vector<int64_t> firstExperts;
    for (const Step *s : steps)
      firstExperts.push_back(s->op == OpKind::MulMatId ? MulMatIdParams::read(*s).firstExpert.value_or(0) : 0);
    ActivationCache *cache = cacheOn_ ? &cache_ : nullptr;
    if (fused && fused->op == OpKind::Glu)
      opGateUpGlu(steps.front()->op, in, out, firstExperts, GluParams::read(*fused).fn, *fusedOut, tg_, cache);
    else if (fused && fused->op == OpKind::ExpertCombine && steps.size() == 1 && fusedIn && !fusedIn->empty())
      opMulMatIdCombine(in[0][0], in[0][1], in[0][2], out[0][0], firstExperts[0],
                        std::vector<exec::TensorRef>(fusedIn->begin() + 1, fusedIn->end()), *fusedOut, tg_, cache,
                        f32Reference_);
    else if (fused)
      throw std::invalid_argument(fmt::format("step '{}' ({}) cannot run fused with them", fused->name,
                                              opKindName(fused->op)));
    else
      opMatmulBatch(steps.front()->op, in, out, firstExperts, tg_, cache, f32Reference_);
  } catch (const std::exception &e) {
    cache_.clear();
    return Error{fmt::format("steps '{}'..'{}' ({}{}): {}", steps.front()->name,
                             fused ? fused->name : steps.back()->name, opKindName(steps.front()->op),
                             fused ? fmt::format(" + {}", opKindName(fused->op)) : "", e.what())};
  }
  if (cacheOn_) {
    for (const auto &o : out) // unwritten when fused, but a fallback (aliasing) writes them
      noteWrites(o);
    if (fused)
      noteWrites({*fusedOut});
  }
  return {};
}

void CpuStepRunner::noteWrites(const std::vector<exec::TensorRef> &written) {
  for (const exec::TensorRef &t : written)
    if (t.data)
      cache_.invalidate(t.data, static_cast<size_t>(t.numel()) * dtypeBytes(t.dtype));
}

} // namespace tpc::rt::cpu
