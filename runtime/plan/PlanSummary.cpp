//===- PlanSummary.cpp - plan reports for inspect ---------------------------===//
//
// Collective traffic counts the elements of each collective's output per token (token-dim tensors) or in
// total (fixed-shape tensors), times 4 bytes: what a device sends or receives, not the algorithm's cost.
// Memory is split by placement (see DeviceSummary).
//===----------------------------------------------------------------------===//
#include "runtime/plan/PlanSummary.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>

namespace tpc::rt {

std::vector<DeviceSummary> summarizeDevices(const Plan &plan) {
  std::vector<DeviceSummary> out;
  for (const DevicePlan &dev : plan.devices) {
    DeviceSummary s;
    auto host = [](Placement p) { return p == Placement::Host; };
    for (const WeightSlice &w : dev.weights)
      (host(w.placement) ? s.hostWeightBytes : s.weightBytes) += w.bytes;
    s.activationBytes = dev.activationBytes; // the arenas a backend allocates, as the compiler sized them
    s.hostActivationBytes = dev.hostActivationBytes;
    for (const KvCache &c : dev.kv)
      (host(c.placement) ? s.hostKvBytesPerToken : s.kvBytesPerToken) +=
          static_cast<uint64_t>(c.nHeadKv) * (c.headDimK + c.headDimV) * dtypeBytes(c.dtype);
    s.steps = dev.steps.size();
    std::map<std::string, size_t> counts;
    for (const Step &st : dev.steps) {
      ++counts[opKindName(st.op)];
      if (host(st.placement))
        ++s.hostSteps;
      if (!isCollective(st.op))
        continue;
      ++s.collectives;
      // The fused all-reduce + norm moves only its first output (the norm is local).
      const size_t moved = st.op == OpKind::AllReduceRmsNorm ? 1 : st.outputs.size();
      for (size_t o = 0; o < moved && o < st.outputs.size(); ++o) {
        const int32_t id = st.outputs[o];
        uint64_t n = 1;
        for (int64_t d : dev.tensors[id].shape)
          n *= d == -1 ? 1 : static_cast<uint64_t>(d);
        s.collectiveBytesPerToken += n * 4;
      }
    }
    s.opCounts.assign(counts.begin(), counts.end());
    std::stable_sort(s.opCounts.begin(), s.opCounts.end(),
                     [](const auto &a, const auto &b) { return a.second > b.second; });
    out.push_back(std::move(s));
  }
  return out;
}

namespace {
std::string bytesStr(uint64_t b) {
  if (b >= (1ull << 30))
    return fmt::format("{:.2f} GiB", b / double(1ull << 30));
  if (b >= (1ull << 20))
    return fmt::format("{:.2f} MiB", b / double(1ull << 20));
  if (b >= 1024)
    return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", b);
}
} // namespace

std::string describePlan(const Plan &plan, int64_t ctx) {
  if (ctx <= 0)
    ctx = plan.model.defaultCtx;
  std::string out =
      fmt::format("plan: schema v{}, compiled by {}\n", plan.schemaVersion, plan.compilerVersion);
  out += fmt::format("gguf: {} ({} bytes, fingerprint {:016x})\n", plan.ggufPath, plan.ggufSize,
                     plan.ggufFingerprint);
  out += fmt::format("model: {}, n_vocab {}, n_ctx_train {}, max_batch {}, default ctx {}\n", plan.model.arch,
                     plan.model.nVocab, plan.model.nCtxTrain, plan.model.maxBatch, plan.model.defaultCtx);
  out += fmt::format("tokenizer: {} ({} tokens, {} merges)\n",
                     plan.tokenizer.model.empty() ? "none" : plan.tokenizer.model,
                     plan.tokenizer.tokens.size(), plan.tokenizer.merges.size());
  std::vector<DeviceSummary> ds = summarizeDevices(plan);
  for (size_t d = 0; d < ds.size(); ++d) {
    const DeviceSummary &s = ds[d];
    out += fmt::format("device {} ({}): weights {}, activations {}, KV {} per token = {} for ctx {}\n", d,
                       plan.devices[d].kind, bytesStr(s.weightBytes), bytesStr(s.activationBytes),
                       bytesStr(s.kvBytesPerToken), bytesStr(s.kvBytesPerToken * static_cast<uint64_t>(ctx)),
                       ctx);
    if (s.hostSteps || s.hostWeightBytes || s.hostActivationBytes || s.hostKvBytesPerToken)
      out += fmt::format(
          "  host: weights {}, activations {}, KV {} per token = {} for ctx {}; {} host steps\n",
          bytesStr(s.hostWeightBytes), bytesStr(s.hostActivationBytes), bytesStr(s.hostKvBytesPerToken),
          bytesStr(s.hostKvBytesPerToken * static_cast<uint64_t>(ctx)), ctx, s.hostSteps);
    out += fmt::format("  {} steps, {} collectives moving {} per token\n  ops:", s.steps, s.collectives,
                       bytesStr(s.collectiveBytesPerToken));
    for (const auto &[name, n] : s.opCounts)
      out += fmt::format(" {} {}", name, n);
    out += "\n";
  }
  return out;
}

} // namespace tpc::rt
