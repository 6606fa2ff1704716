//===- CompileReport.cpp - `tpc compile --report` ---------------------------===//
//
// Memory comes from the plan (summarizeDevices, as `tpc inspect` shows it); which weights are whole on
// every device, the collectives and the MoE choices come from the module the plan was emitted from.
// Collective bytes per token are the f32 payload of each collective's operands, attributed to a layer by
// the `blk.N` weights its inputs derive from (attributeLayers).
//===----------------------------------------------------------------------===//
#include "tools/tpc/compiler/CompileReport.h"

#include "compiler/emit/PlanEmitter.h"
#include "passes/Stages.h"
#include "runtime/plan/PlanSummary.h"

#include "dialects/tpc/IR/TpcOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>

namespace tpc::cli {
namespace {

/// Collectives of one layer.
struct LayerTraffic {
  int allReduce = 0, allGather = 0, reduceScatter = 0;
  int tensors = 0;           ///< operands over all of them (a bucketed all-reduce carries several)
  int64_t bytesPerToken = 0; ///< payload: f32 elements per token of every operand
};

std::string layerName(int64_t layer) {
  if (layer == mlir::tpc::kLayerOutput)
    return "output";
  if (layer == mlir::tpc::kLayerNone)
    return "input";
  return "blk." + std::to_string(layer);
}

/// Elements per token of a value's global shape (the dynamic token dimension counts 1).
int64_t perToken(mlir::Value v) {
  int64_t n = 1;
  for (int64_t d : llvm::cast<mlir::ShapedType>(v.getType()).getShape())
    n *= mlir::ShapedType::isDynamic(d) ? 1 : d;
  return n;
}

/// Per device, the bytes of the weight slices whose tensor is whole on every device (every use of it
/// mirrored): what does not shrink with more devices, apart from what follows the split ratios.
std::vector<uint64_t> mirroredWeightBytes(mlir::ModuleOp m, const rt::Plan &plan) {
  llvm::StringSet<> whole, split;
  m.walk([&](mlir::tpc::WeightOp w) {
    mlir::tpc::StateAttr s = mlir::tpc::getValueState(w.getResult());
    (s && !s.isMirrored() ? split : whole).insert(w.getName());
  });
  std::vector<uint64_t> out;
  for (const rt::DevicePlan &dev : plan.devices) {
    uint64_t b = 0;
    for (const rt::WeightSlice &w : dev.weights)
      if (whole.contains(w.name) && !split.contains(w.name))
        b += w.bytes;
    out.push_back(b);
  }
  return out;
}

/// How one MoE layer splits: its expert weights' state (the gate/up of its first mul_mat_id).
struct MoeLayer {
  bool expert = false;             ///< whole experts per device (else each expert's intermediate dim)
  int64_t experts = 0;             ///< experts of the layer
  std::vector<int64_t> perDevice; ///< expert: experts per device; intermediate: that dim's share
  int64_t width = 0;               ///< intermediate: the dim split
};

/// Per layer, the MoE split; the predicted expert load of device d is its share of the routed rows under
/// uniform routing: experts_d / experts (expert parallel), or its share of every routed expert's rows.
std::map<int64_t, MoeLayer> moeLayers(mlir::ModuleOp m) {
  auto layers = mlir::tpc::attributeLayers(m);
  std::map<int64_t, MoeLayer> out;
  m.walk([&](mlir::tpc::MulMatIdOp op) {
    int64_t layer = layers.lookup(op);
    if (out.count(layer))
      return;
    MoeLayer &l = out[layer];
    auto wt = op.getW().getType();
    l.experts = wt.getDimSize(0);
    mlir::tpc::StateAttr s = mlir::tpc::getValueState(op.getW());
    if (s && s.isSplit()) {
      l.expert = s.getAxis() == 0;
      l.perDevice.assign(s.getSizes().begin(), s.getSizes().end());
      l.width = wt.getDimSize(s.getAxis());
    }
  });
  return out;
}

/// The predicted share of the routed expert rows each device computes.
std::vector<double> moeLoad(const MoeLayer &l) {
  std::vector<double> out;
  for (int64_t u : l.perDevice)
    out.push_back(l.width ? double(u) / double(l.width) : 0.0);
  return out;
}

std::string joined(const std::vector<double> &v, const char *fmtSpec) {
  std::string s;
  for (double x : v)
    s += (s.empty() ? "" : ", ") + fmt::format(fmt::runtime(fmtSpec), x);
  return s;
}

/// One pipeline stage of the report: its layers (first, last; -1 none) and the weight bytes its devices hold.
struct StageRow {
  int64_t first = -1, last = -1;
  uint64_t weightBytes = 0;
};
/// One tpc.stage_transfer: from, to, its messages (a device pair each; the logits go to device 0 alone)
/// and the payload of one message for one token.
struct TransferRow {
  int64_t from = 0, to = 0;
  size_t messages = 0;
  uint64_t bytesPerToken = 0;
};

/// The stages of a pipeline plan (empty for one stage) and its transfers, from the module and the plan.
std::vector<StageRow> stageRows(mlir::ModuleOp m, const rt::Plan &plan, std::vector<TransferRow> &transfers) {
  const std::vector<int64_t> layers = mlir::tpc::moduleStageLayers(m);
  if (layers.size() < 2)
    return {};
  std::vector<StageRow> rows(layers.size());
  int64_t next = 0;
  for (size_t st = 0; st < layers.size(); ++st) {
    rows[st].first = next;
    rows[st].last = next + layers[st] - 1;
    next += layers[st];
  }
  for (size_t d = 0; d < plan.devices.size(); ++d)
    for (const rt::WeightSlice &w : plan.devices[d].weights)
      rows[size_t(rt::stageOf(plan, d))].weightBytes += w.bytes;
  m.walk([&](mlir::tpc::StageTransferOp op) {
    const bool logitsOnly = op->hasOneUse() && llvm::isa<mlir::func::ReturnOp>(*op->getUsers().begin());
    transfers.push_back({int64_t(op.getFrom()), int64_t(op.getTo()), logitsOnly ? 1 : rt::devicesPerStage(plan),
                         uint64_t(perToken(op.getX())) * 4});
  });
  return rows;
}

} // namespace

void printReport(const std::string &model, bool json, mlir::ModuleOp m, const rt::Plan &plan) {
  auto layers = mlir::tpc::attributeLayers(m);
  std::map<int64_t, LayerTraffic> traffic;
  m.walk([&](mlir::Operation *op) {
    if (!llvm::isa<mlir::tpc::AllReduceOp, mlir::tpc::AllReduceRmsNormOp, mlir::tpc::AllGatherOp,
                   mlir::tpc::ReduceScatterOp>(op))
      return;
    LayerTraffic &t = traffic[layers.lookup(op)];
    llvm::SmallVector<mlir::Value> payload(op->getOperands());
    // All-reduce payloads cross as --comm-dtype says; gathers and scatters move f32.
    int64_t elemBytes = 4;
    if (llvm::isa<mlir::tpc::AllReduceOp, mlir::tpc::AllReduceRmsNormOp>(op))
      elemBytes = static_cast<int64_t>(rt::commDtypeBytes(plan.commDtype));
    if (llvm::isa<mlir::tpc::AllReduceOp>(op)) {
      ++t.allReduce;
    } else if (auto fused = llvm::dyn_cast<mlir::tpc::AllReduceRmsNormOp>(op)) {
      ++t.allReduce; // a layer boundary: only x crosses devices (the residual and norm weight stay local)
      payload = {fused.getX()};
    } else if (llvm::isa<mlir::tpc::AllGatherOp>(op)) {
      ++t.allGather;
    } else {
      ++t.reduceScatter;
    }
    for (mlir::Value v : payload) {
      t.bytesPerToken += perToken(v) * elemBytes;
      ++t.tensors;
    }
  });
  int64_t total = 0;
  for (auto &[layer, t] : traffic)
    total += t.bytesPerToken;
  const size_t n = plan.devices.size();
  // Memory split by side (what each GPU allocates vs what stays in host memory), as `tpc inspect` shows it.
  const std::vector<rt::DeviceSummary> mem = rt::summarizeDevices(plan);
  const std::vector<rt::DeviceMemory> atCtx = rt::memoryAt(plan); // the plan's context: what --fit budgets
  const std::vector<uint64_t> whole = mirroredWeightBytes(m, plan);
  const std::map<int64_t, MoeLayer> moe = moeLayers(m);
  const bool anyHost = std::any_of(mem.begin(), mem.end(), [](const rt::DeviceSummary &m) {
    return m.hostWeightBytes || m.hostActivationBytes || m.hostKvBytesPerToken;
  });
  std::vector<TransferRow> transfers;
  const std::vector<StageRow> stages = stageRows(m, plan, transfers);
  const size_t per = rt::devicesPerStage(plan);
  if (json) {
    std::string s =
        fmt::format("{{\"model\": \"{}\", \"arch\": \"{}\", \"blocks\": {}, \"ctx\": {}, \"devices\": [",
                    model, plan.model.arch, rt::blockCount(plan), plan.model.defaultCtx);
    for (size_t d = 0; d < n; ++d) {
      const rt::DeviceSummary &m = mem[d];
      const rt::DeviceMemory &c = atCtx[d];
      s += fmt::format("{}{{\"device\": {}, \"total_bytes\": {}, \"kv_bytes\": {}, \"logits_bytes\": {}, "
                       "\"host_total_bytes\": {}, \"host_kv_bytes\": {}, ",
                       d ? ", " : "", d, c.totalBytes, c.kvBytes, c.logitsBytes, c.hostTotalBytes,
                       c.hostKvBytes);
      s += fmt::format(
          "\"weight_bytes\": {}, \"kv_bytes_per_1k_tokens\": {}, "
          "\"kv_full_bytes_per_token\": {}, \"kv_full_layers\": {}, "
          "\"kv_window_bytes_per_position\": {}, \"kv_window_layers\": {}, "
          "\"activation_bytes\": {}, \"host_weight_bytes\": {}, \"host_kv_bytes_per_1k_tokens\": {}, "
          "\"host_activation_bytes\": {}, \"mirrored_weight_bytes\": {}, "
          "\"recurrent_bytes_per_sequence\": {}, \"recurrent_layers\": {}}}",
          m.weightBytes, rt::kvBytesFor(plan, d, 1024, 1, rt::Placement::Device), m.kvFullBytesPerToken,
          m.kvFullLayers, m.kvWindowBytesPerPosition, m.kvWindowLayers, m.activationBytes, m.hostWeightBytes,
          rt::kvBytesFor(plan, d, 1024, 1, rt::Placement::Host), m.hostActivationBytes, whole[d],
          m.recurrentBytesPerSequence, m.recurrentLayers);
    }
    s += "], \"collectives\": [";
    bool first = true;
    for (auto &[layer, t] : traffic) {
      s += fmt::format(
          "{}{{\"layer\": \"{}\", \"all_reduce\": {}, \"all_gather\": {}, \"reduce_scatter\": {}, "
          "\"tensors\": {}, \"bytes_per_token\": {}}}",
          first ? "" : ", ", layerName(layer), t.allReduce, t.allGather, t.reduceScatter, t.tensors,
          t.bytesPerToken);
      first = false;
    }
    s += "], \"moe\": [";
    first = true;
    for (auto &[layer, l] : moe) {
      s += fmt::format("{}{{\"layer\": \"{}\", \"split\": \"{}\", \"experts\": {}, \"per_device\": [{}], "
                       "\"predicted_expert_load\": [{}]}}",
                       first ? "" : ", ", layerName(layer), l.perDevice.empty() ? "mirrored" : l.expert ? "expert" : "intermediate",
                       l.experts, joined(std::vector<double>(l.perDevice.begin(), l.perDevice.end()), "{:.0f}"),
                       joined(moeLoad(l), "{:.4f}"));
      first = false;
    }
    s += "], \"stages\": [";
    for (size_t st = 0; st < stages.size(); ++st)
      s += fmt::format("{}{{\"stage\": {}, \"first_layer\": {}, \"last_layer\": {}, \"first_device\": {}, "
                       "\"devices\": {}, \"weight_bytes\": {}}}",
                       st ? ", " : "", st, stages[st].first, stages[st].last, st * per, per,
                       stages[st].weightBytes);
    s += "], \"stage_transfers\": [";
    for (size_t i = 0; i < transfers.size(); ++i)
      s += fmt::format("{}{{\"from\": {}, \"to\": {}, \"messages\": {}, \"bytes_per_token\": {}}}",
                       i ? ", " : "", transfers[i].from, transfers[i].to, transfers[i].messages,
                       transfers[i].bytesPerToken);
    s += fmt::format("], \"collective_bytes_per_token\": {}, \"comm_dtype\": \"{}\", \"max_batch\": {}, "
                     "\"max_output_rows\": {}}}\n",
                     total, rt::commDtypeName(plan.commDtype), plan.model.maxBatch, plan.model.maxOutputRows);
    fmt::print("{}", s);
    return;
  }
  fmt::print("{} ({}) on {} device(s){}, max batch {}, max output rows {}\n\n", model, plan.model.arch, n,
             plan.stages > 1 ? fmt::format(" in {} pipeline stages of {}", plan.stages, per) : std::string(),
             plan.model.maxBatch, plan.model.maxOutputRows);
  const double MiB = 1048576.0;
  // Recurrent (linear-attention) states are per sequence and do not grow with the context: their own column.
  const bool anyRecurrent = std::any_of(mem.begin(), mem.end(), [](const rt::DeviceSummary &m) { return m.recurrentLayers > 0; });
  // The last column is rt::memoryAt's total at the plan's context (weights, KV with rings, activations,
  // logits rows): the figure `tpc inspect` prints and --fit holds to a budget.
  fmt::print(
      "| device | weights (MiB) | KV per 1k tokens (MiB) | activations (MiB) |{}{} total at ctx {} (MiB) |\n",
      anyRecurrent ? " recurrent state per sequence (MiB) |" : "",
      anyHost ? " host weights (MiB) | host KV per 1k tokens (MiB) | host activations (MiB) |" : "",
      plan.model.defaultCtx);
  fmt::print(
      "|-------:|--------------:|-----------------------:|------------------:|{}{}--------------------:|\n",
      anyRecurrent ? "-----------------------------------:|" : "",
      anyHost ? "-------------------:|----------------------------:|-----------------------:|" : "");
  for (size_t d = 0; d < n; ++d) {
    const rt::DeviceSummary &m = mem[d];
    const uint64_t rec = m.recurrentBytesPerSequence;
    auto kvOf = [&](rt::Placement side) { // per 1k tokens of one sequence: attention caches only
      uint64_t bytes = rt::kvBytesFor(plan, d, 1024, 1, side);
      for (const rt::KvCache &c : plan.devices[d].kv)
        if (c.kind == rt::CacheKind::Recurrent && c.placement == side)
          bytes -= rt::recurrentBytesPerSequence(c);
      return bytes;
    };
    fmt::print("| {:>6} | {:>13.3f} | {:>22.3f} | {:>17.3f} |", d, m.weightBytes / MiB, kvOf(rt::Placement::Device) / MiB,
               m.activationBytes / MiB);
    if (anyRecurrent)
      fmt::print(" {:>34.3f} |", rec / MiB);
    if (anyHost)
      fmt::print(" {:>18.3f} | {:>27.3f} | {:>22.3f} |", m.hostWeightBytes / MiB,
                 kvOf(rt::Placement::Host) / MiB, m.hostActivationBytes / MiB);
    fmt::print(" {:>19.3f} |\n", atCtx[d].totalBytes / MiB);
  }
  // KV by layer kind: a full layer's cache grows with the context, a sliding-window layer's is a ring of
  // window + max batch positions (the "per 1k tokens" column counts both at a context of 1024).
  for (size_t d = 0; d < n; ++d) {
    const rt::DeviceSummary &m = mem[d];
    if (m.kvWindowLayers == 0)
      continue;
    std::string windows;
    for (int64_t w : m.kvWindows)
      windows += fmt::format("{}{} (ring {})", windows.empty() ? "" : ", ", w, w + plan.model.maxBatch);
    fmt::print("{}device {} KV: {} full layer(s) {} B per token; {} sliding-window layer(s) {} B per position, "
               "window {}\n",
               d == 0 ? "\n" : "", d, m.kvFullLayers, m.kvFullBytesPerToken, m.kvWindowLayers,
               m.kvWindowBytesPerPosition, windows);
  }
  fmt::print(
      "\nCollectives per layer (bytes per token = payload of the operands, all-reduces in {} "
      "(--comm-dtype), the others in f32; a ring all-reduce moves 2(N-1)/N of it per device; tensors > "
      "collectives where one all-reduce carries a bucket):\n\n",
      rt::commDtypeName(plan.commDtype));
  fmt::print("| layer | all_reduce | all_gather | reduce_scatter | tensors | bytes/token |\n");
  fmt::print("|-------|-----------:|-----------:|---------------:|--------:|------------:|\n");
  for (auto &[layer, t] : traffic)
    fmt::print("| {} | {} | {} | {} | {} | {} |\n", layerName(layer), t.allReduce, t.allGather,
               t.reduceScatter, t.tensors, t.bytesPerToken);
  fmt::print("\ntotal: {} bytes per token{}\n", total, traffic.empty() ? " (no collectives)" : "");
  if (!stages.empty()) {
    // Collectives stay inside a stage (the table above); between stages only the transfers move.
    fmt::print("\nPipeline stages ({} devices each; the embedding with stage 0, the output head with the last):\n\n",
               per);
    fmt::print("| stage | layers | devices | weights (MiB) |\n|------:|--------|---------|--------------:|\n");
    for (size_t st = 0; st < stages.size(); ++st)
      fmt::print("| {} | {}-{} | {}-{} | {:.3f} |\n", st, stages[st].first, stages[st].last, st * per,
                 (st + 1) * per - 1, stages[st].weightBytes / MiB);
    fmt::print("\nStage transfers (send/recv; device j of one stage to device j of the other, one message per "
               "device pair and call, the logits to device 0 only; bytes per token per message, a logits "
               "transfer per output row):\n\n");
    fmt::print("| from | to | messages | bytes/token |\n|-----:|---:|---------:|------------:|\n");
    for (const TransferRow &t : transfers)
      fmt::print("| {} | {} | {} | {} |\n", t.from, t.to, t.messages, t.bytesPerToken);
  }
  if (moe.empty())
    return;
  fmt::print("\nMoE layers (per device: whole experts, or units of each expert's intermediate dim; predicted "
             "load: the device's share of the routed expert rows, uniform routing):\n\n");
  fmt::print("| layer | split | experts | per device | predicted load |\n");
  fmt::print("|-------|-------|--------:|------------|----------------|\n");
  for (auto &[layer, l] : moe)
    fmt::print("| {} | {} | {} | {} | {} |\n", layerName(layer),
               l.perDevice.empty() ? "mirrored" : l.expert ? "expert" : "intermediate", l.experts,
               joined(std::vector<double>(l.perDevice.begin(), l.perDevice.end()), "{:.0f}"),
               joined(moeLoad(l), "{:.3f}"));
}

} // namespace tpc::cli
