//===- RoutingProfile.cpp - per-layer expert counts of a run --------------===//
#include "tools/tpc/RoutingProfile.h"

#include "tools/tpc/Command.h"
#include "tools/tpc/HiddenDump.h"

#include "runtime/plan/StepParams.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <map>

namespace tpc::cli {

using namespace tpc::rt;

RoutingCounter::RoutingCounter(const Plan &plan) {
  // Global experts per layer: over every device's share, first expert + local experts (an expert-parallel
  // share holds a range; an intermediate split holds them all).
  std::map<int64_t, int64_t> experts;
  for (const DevicePlan &dp : plan.devices)
    for (const Step &s : dp.steps)
      if (s.op == OpKind::MulMatId && s.inputs.size() >= 3) {
        const int64_t layer = layerOfStep(s.name);
        const TensorDesc &w = dp.tensors[s.inputs[1]];
        if (layer < 0 || w.shape.empty())
          continue;
        const int64_t end = MulMatIdParams::read(s).firstExpert.value_or(0) + w.shape[0];
        experts[layer] = std::max(experts[layer], end);
      }
  if (!plan.devices.empty())
    for (size_t si = 0; si < plan.devices[0].steps.size(); ++si) {
      const Step &s = plan.devices[0].steps[si];
      const int64_t layer = layerOfStep(s.name);
      if (s.op != OpKind::MulMatId || s.inputs.size() < 3 || layer < 0 || !experts.count(layer))
        continue;
      auto same = [&](const Layer &l) { return l.layer == layer; };
      if (std::any_of(layers_.begin(), layers_.end(), same))
        continue; // gate, up and down read the same routing
      layers_.push_back({layer, si, std::vector<double>(static_cast<size_t>(experts[layer]), 0.0)});
    }
  if (layers_.empty())
    throw Failure("--profile-routing: the plan has no MoE layer (no mul_mat_id step named blk.N.*); there is "
                  "no routing to profile");
}

void RoutingCounter::observe(int device, size_t index, const Step &step,
                             const std::vector<exec::TensorRef> &inputs) {
  if (device != 0 || step.op != OpKind::MulMatId || inputs.size() < 3)
    return;
  for (size_t li = 0; li < layers_.size(); ++li) {
    Layer &l = layers_[li];
    if (l.step != index)
      continue;
    const exec::TensorRef &ids = inputs[2];
    const int32_t *v = ids.i();
    const int64_t n = ids.numel();
    for (int64_t i = 0; i < n; ++i)
      if (v[i] >= 0 && v[i] < int64_t(l.counts.size())) // a broken router's out-of-range id routes nowhere
        l.counts[static_cast<size_t>(v[i])] += 1;
    if (li == 0)
      tokens_ += ids.shape.empty() ? 0 : ids.shape[0];
    return;
  }
}

void RoutingCounter::write(const std::string &path) const {
  std::FILE *f = std::fopen(path.c_str(), "w");
  if (!f)
    throw Failure(fmt::format("--profile-routing '{}': cannot write the file", path));
  std::string out = fmt::format("# tpc routing profile: tokens routed to each expert per MoE layer, over {} "
                                "evaluated tokens (tpc compile --routing-profile reads it)\n",
                                tokens_);
  for (const Layer &l : layers_) {
    out += fmt::format("blk.{}:", l.layer);
    for (double c : l.counts)
      out += fmt::format(" {:.0f}", c);
    out += "\n";
  }
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) != 0 || !ok)
    throw Failure(fmt::format("--profile-routing '{}': writing failed", path));
}

} // namespace tpc::cli
