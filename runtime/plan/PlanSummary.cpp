//===- PlanSummary.cpp - plan reports for inspect ---------------------------===//
//
// Collective traffic counts the elements of each collective's output per token (token-dim tensors) or in
// total (fixed-shape tensors), times 4 bytes: what a device sends or receives, not the algorithm's cost.
// Memory is split by placement (see DeviceSummary).
//===----------------------------------------------------------------------===//
#include "runtime/plan/PlanSummary.h"

#include "runtime/plan/StepParams.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>

namespace tpc::rt {

namespace {
/// Elements per token of tensor `t` (the token dimension counts 1, and so do output rows: a decoded
/// token asks for one).
uint64_t perToken(const TensorDesc &t) {
  uint64_t n = 1;
  for (int64_t d : t.shape)
    n *= d < 0 ? 1 : static_cast<uint64_t>(d);
  return n;
}

/// Bytes of weight slice operand `w` that step `s` of `dev` reads for one token (see DeviceSummary).
uint64_t decodeBytes(const DevicePlan &dev, const Step &s, size_t operand, const WeightSlice &w) {
  const uint64_t outer = w.shape.empty() ? 1 : static_cast<uint64_t>(std::max<int64_t>(w.shape[0], 1));
  if (s.op == OpKind::GetRows && operand == 0 && s.inputs.size() > 1) // ids[T] or ids[T,k]: those rows
    return w.bytes / outer * std::min(outer, perToken(dev.tensors[s.inputs[1]]));
  if ((s.op == OpKind::MulMatId || s.op == OpKind::AddId) && operand == 1 && s.inputs.size() > 2) // ids[T,k]: k of E
    return w.bytes / outer * std::min(outer, perToken(dev.tensors[s.inputs[2]]));
  return w.bytes;
}
} // namespace

uint64_t collectiveBytesPerToken(const DevicePlan &dev, const Step &s, CommDtype wire) {
  if (!isCollective(s.op))
    return 0;
  const bool sum = s.op == OpKind::AllReduce || s.op == OpKind::AllReduceRmsNorm;
  const uint64_t elem = sum ? commDtypeBytes(wire) : 4;
  // The fused all-reduce + norm moves only its first output (the norm is local).
  const size_t moved = s.op == OpKind::AllReduceRmsNorm ? 1 : s.outputs.size();
  uint64_t bytes = 0;
  for (size_t o = 0; o < moved && o < s.outputs.size(); ++o)
    bytes += perToken(dev.tensors[s.outputs[o]]) * elem;
  return bytes;
}

uint64_t transferBytesPerToken(const DevicePlan &dev, const Step &s) {
  if (!isStageTransfer(s.op))
    return 0;
  const TensorDesc &t = dev.tensors[size_t(s.op == OpKind::Send ? s.inputs[0] : s.outputs[0])];
  return perToken(t) * dtypeBytes(t.dtype);
}

std::vector<DeviceSummary> summarizeDevices(const Plan &plan) {
  std::vector<DeviceSummary> out;
  for (const DevicePlan &dev : plan.devices) {
    DeviceSummary s;
    s.stage = stageOf(plan, out.size());
    auto host = [](Placement p) { return p == Placement::Host; };
    for (const WeightSlice &w : dev.weights)
      (host(w.placement) ? s.hostWeightBytes : s.weightBytes) += w.bytes;
    s.activationBytes = dev.activationBytes; // the arenas a backend allocates, as the compiler sized them
    s.hostActivationBytes = dev.hostActivationBytes;
    for (const TensorDesc &t : dev.tensors)
      if (t.storage == Storage::OutputLogits) // the rows a call computes (max_output_rows, else max_batch)
        s.logitsBytes = static_cast<uint64_t>(plan.model.maxOutputRows > 0 ? plan.model.maxOutputRows
                                                                           : plan.model.maxBatch) *
                        static_cast<uint64_t>(plan.model.nVocab) * 4;
    for (const KvCache &c : dev.kv) {
      if (c.kind == CacheKind::Recurrent) {
        s.recurrentBytesPerSequence += recurrentBytesPerSequence(c);
        ++s.recurrentLayers;
        continue;
      }
      (host(c.placement) ? s.hostKvBytesPerToken : s.kvBytesPerToken) += kvBytesPerPosition(c);
      if (host(c.placement))
        continue;
      if (c.window > 0) {
        s.kvWindowBytesPerPosition += kvBytesPerPosition(c);
        ++s.kvWindowLayers;
        if (std::find(s.kvWindows.begin(), s.kvWindows.end(), c.window) == s.kvWindows.end())
          s.kvWindows.push_back(c.window);
      } else {
        s.kvFullBytesPerToken += kvBytesPerPosition(c);
        ++s.kvFullLayers;
      }
    }
    std::sort(s.kvWindows.begin(), s.kvWindows.end());
    for (const Step &st : dev.steps)
      for (size_t i = 0; i < st.inputs.size(); ++i) {
        const TensorDesc &t = dev.tensors[st.inputs[i]];
        if (t.storage != Storage::Weight)
          continue;
        const WeightSlice &w = dev.weights[t.index];
        (host(st.placement) ? s.hostDecodeWeightBytes : s.decodeWeightBytes) += decodeBytes(dev, st, i, w);
      }
    s.steps = dev.steps.size();
    std::map<std::string, size_t> counts;
    for (const Step &st : dev.steps) {
      ++counts[opKindName(st.op)];
      if (host(st.placement))
        ++s.hostSteps;
      if (st.op == OpKind::Matmul && MatmulParams::read(st).replicated)
        ++s.replicatedMatmuls;
      (st.op == OpKind::Send ? s.sendBytesPerToken : s.recvBytesPerToken) += transferBytesPerToken(dev, st);
      if (!isCollective(st.op))
        continue;
      ++s.collectives;
      s.collectiveBytesPerToken += collectiveBytesPerToken(dev, st, plan.commDtype);
    }
    s.opCounts.assign(counts.begin(), counts.end());
    std::stable_sort(s.opCounts.begin(), s.opCounts.end(),
                     [](const auto &a, const auto &b) { return a.second > b.second; });
    out.push_back(std::move(s));
  }
  return out;
}

uint64_t kvBytesFor(const Plan &plan, size_t d, int64_t ctx, int32_t sequences, Placement side) {
  uint64_t total = 0;
  for (const KvCache &c : plan.devices[d].kv)
    if (c.placement == side) // a recurrent cache: one cell per sequence
      total += (kvCellBytesK(c) + kvCellBytesV(c)) * static_cast<uint64_t>(kvPositions(c, ctx, plan.model.maxBatch)) *
               static_cast<uint64_t>(sequences);
  return total;
}

std::vector<DeviceMemory> memoryAt(const Plan &plan, int64_t ctx, int32_t sequences) {
  if (ctx <= 0)
    ctx = plan.model.defaultCtx;
  const std::vector<DeviceSummary> ds = summarizeDevices(plan);
  std::vector<DeviceMemory> out;
  for (size_t d = 0; d < ds.size(); ++d) {
    const DeviceSummary &s = ds[d];
    DeviceMemory m;
    m.ctx = ctx;
    m.weightBytes = s.weightBytes;
    m.kvBytes = kvBytesFor(plan, d, ctx, sequences, Placement::Device);
    m.activationBytes = s.activationBytes;
    m.logitsBytes = s.logitsBytes;
    m.hostWeightBytes = s.hostWeightBytes;
    m.hostKvBytes = kvBytesFor(plan, d, ctx, sequences, Placement::Host);
    m.hostActivationBytes = s.hostActivationBytes;
    m.totalBytes = m.weightBytes + m.kvBytes + m.activationBytes + m.logitsBytes;
    m.hostTotalBytes = m.hostWeightBytes + m.hostKvBytes + m.hostActivationBytes;
    out.push_back(m);
  }
  return out;
}

int64_t blockCount(const Plan &plan) {
  std::vector<int64_t> seen;
  for (const DevicePlan &dev : plan.devices)
    for (const Step &s : dev.steps) {
      if (s.name.rfind("blk.", 0) != 0)
        continue;
      size_t end = 4;
      while (end < s.name.size() && s.name[end] >= '0' && s.name[end] <= '9')
        ++end;
      if (end == 4 || end >= s.name.size() || s.name[end] != '.')
        continue;
      const int64_t n = std::stoll(s.name.substr(4, end - 4));
      if (std::find(seen.begin(), seen.end(), n) == seen.end())
        seen.push_back(n);
    }
  return static_cast<int64_t>(seen.size());
}

std::string bytesStr(uint64_t b) {
  if (b >= (1ull << 30))
    return fmt::format("{:.2f} GiB", b / double(1ull << 30));
  if (b >= (1ull << 20))
    return fmt::format("{:.2f} MiB", b / double(1ull << 20));
  if (b >= 1024)
    return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", b);
}

std::string describePlan(const Plan &plan, int64_t ctx) {
  if (ctx <= 0)
    ctx = plan.model.defaultCtx;
  std::string out =
      fmt::format("plan: schema v{}, compiled by {}\n", plan.schemaVersion, plan.compilerVersion);
  out += fmt::format("gguf: {} ({} bytes, fingerprint {:016x})\n", plan.ggufPath, plan.ggufSize,
                     plan.ggufFingerprint);
  out += fmt::format("model: {}, n_vocab {}, n_ctx_train {}, max_batch {}, {}default ctx {}\n", plan.model.arch,
                     plan.model.nVocab, plan.model.nCtxTrain, plan.model.maxBatch,
                     plan.model.maxOutputRows > 0 ? fmt::format("max_output_rows {}, ", plan.model.maxOutputRows)
                                                  : std::string("every row computed (no output rows), "),
                     plan.model.defaultCtx);
  out += fmt::format("tokenizer: {} ({} tokens, {} merges)\n",
                     plan.tokenizer.model.empty() ? "none" : plan.tokenizer.model,
                     plan.tokenizer.tokens.size(), plan.tokenizer.merges.size());
  out += fmt::format("blocks: {}\n", blockCount(plan));
  if (plan.devices.size() > 1)
    out += fmt::format("all-reduce payload: {} on the wire (--comm-dtype{})\n", commDtypeName(plan.commDtype),
                       plan.commDtype == CommDtype::BF16 ? ": half the bytes, summed in f32" : "");
  // The attention caches' storage (`tpc compile -ctk/-ctv`; one pair for the whole plan), which the byte
  // figures below already count.
  for (const DevicePlan &dp : plan.devices) {
    auto c = std::find_if(dp.kv.begin(), dp.kv.end(),
                          [](const KvCache &k) { return k.kind == CacheKind::Attention; });
    if (c == dp.kv.end())
      continue;
    out += fmt::format("kv cache types: K {}, V {}\n", ggmlTypeName(c->typeK), ggmlTypeName(c->typeV));
    break;
  }
  std::vector<DeviceSummary> ds = summarizeDevices(plan);
  const std::vector<DeviceMemory> mem = memoryAt(plan, ctx);
  if (plan.stages > 1) {
    const size_t per = devicesPerStage(plan);
    out += fmt::format("stages: {} ({} devices each):", plan.stages, per);
    for (uint32_t st = 0; st < plan.stages; ++st)
      out += fmt::format(" stage {} = devices {}-{}{}", st, st * per, (st + 1) * per - 1,
                         st + 1 < plan.stages ? ";" : "");
    out += "\n";
  }
  for (size_t d = 0; d < ds.size(); ++d) {
    const DeviceSummary &s = ds[d];
    const std::string logits = s.logitsBytes ? " logits rows " + bytesStr(s.logitsBytes) + "," : std::string();
    const uint64_t kvAtCtx = mem[d].kvBytes;
    // memoryAt's total (weights, KV, activations, logits rows): the figure --report --json and --fit use.
    const std::string total =
        fmt::format("; total {} ({} bytes)", bytesStr(mem[d].totalBytes), mem[d].totalBytes);
    if (s.kvWindowLayers == 0) {
      out += fmt::format("device {} ({}): weights {}, activations {},{} KV {} per token = {} for ctx {}{}\n",
                         d, plan.devices[d].kind, bytesStr(s.weightBytes), bytesStr(s.activationBytes),
                         logits, bytesStr(s.kvBytesPerToken), bytesStr(kvAtCtx), ctx, total);
    } else {
      // A ring holds window + max_batch positions (the context when that is smaller).
      std::string rings;
      for (int64_t w : s.kvWindows)
        rings += fmt::format("{}{}", rings.empty() ? "" : "/", std::min<int64_t>(ctx, w + plan.model.maxBatch));
      std::string windows;
      for (int64_t w : s.kvWindows)
        windows += fmt::format("{}{}", windows.empty() ? "" : "/", w);
      out += fmt::format(
          "device {} ({}): weights {}, activations {},{} KV {} per token in {} full layer(s) + {} "
          "per position in {} sliding-window layer(s) (window {}, rings of {} positions) = {} "
          "for ctx {}{}\n",
          d, plan.devices[d].kind, bytesStr(s.weightBytes), bytesStr(s.activationBytes), logits,
          bytesStr(s.kvFullBytesPerToken), s.kvFullLayers, bytesStr(s.kvWindowBytesPerPosition),
          s.kvWindowLayers, windows, rings, bytesStr(kvAtCtx), ctx, total);
    }
    if (s.recurrentLayers)
      out += fmt::format("  recurrent state: {} per sequence in {} linear-attention layer(s) (in the KV figure "
                         "above; it does not grow with the context)\n",
                         bytesStr(s.recurrentBytesPerSequence), s.recurrentLayers);
    if (s.hostSteps || s.hostWeightBytes || s.hostActivationBytes || s.hostKvBytesPerToken)
      out += fmt::format(
          "  host: weights {}, activations {}, KV {} per token = {} for ctx {}; {} host steps; {}\n",
          bytesStr(s.hostWeightBytes), bytesStr(s.hostActivationBytes), bytesStr(s.hostKvBytesPerToken),
          bytesStr(mem[d].hostKvBytes), ctx, s.hostSteps,
          fmt::format("total {} ({} bytes)", bytesStr(mem[d].hostTotalBytes), mem[d].hostTotalBytes));
    out += fmt::format("  {} steps, {} collectives moving {} per token; a decoded token reads {} of weights{}\n"
                       "  ops:",
                       s.steps, s.collectives, bytesStr(s.collectiveBytesPerToken), bytesStr(s.decodeWeightBytes),
                       s.hostDecodeWeightBytes ? " (+ " + bytesStr(s.hostDecodeWeightBytes) + " on the host)"
                                               : std::string());
    for (const auto &[name, n] : s.opCounts)
      out += fmt::format(" {} {}", name, n);
    out += "\n";
    if (plan.stages > 1)
      out += fmt::format("  stage {}: sends {} and receives {} per token to/from its peers on the other stages\n",
                         s.stage, bytesStr(s.sendBytesPerToken), bytesStr(s.recvBytesPerToken));
    if (s.replicatedMatmuls)
      out += fmt::format("  {} replicated matmuls (whole weights, the same product on every device; devices in "
                         "one process split their rows at prefill)\n",
                         s.replicatedMatmuls);
  }
  return out;
}

} // namespace tpc::rt
