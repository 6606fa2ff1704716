//===- PlanPicture.cpp - the facts `tpc inspect --html/--svg` draws ---------===//
//
// Everything here reads the plan only. Weight cuts come from the slices' pieces (what each device copies
// from the GGUF), so they are exact for any axis; the axis named in the caption is inferred from the local
// shapes and the run layout (see cutAxis). Split states are derived by forward propagation over device 0's
// steps (deriveStates) with the sharding rules: a matmul against a weight split on its rows gives a split
// result, on its columns (the contraction) a partial sum; a lookup in a table split on rows (vocabulary) or
// experts split on axis 0 give partial sums; collectives give mirrored values (reduce-scatter: split); any
// other op is partial if an operand is, else split if an operand is, else mirrored.
//===----------------------------------------------------------------------===//
#include "tools/tpc/PlanPicture.h"

#include "tools/tpc/Command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <optional>

namespace tpc::cli::picture {
namespace {

constexpr int64_t kEmbedKey = -1;
constexpr int64_t kOutputKey = std::numeric_limits<int64_t>::max();

/// The layer key of a step name: N for `blk.N.`, kOutputKey for `output.`, nullopt without a stamp.
std::optional<int64_t> layerOfName(const std::string &name) {
  if (name.rfind("output.", 0) == 0)
    return kOutputKey;
  if (name.rfind("blk.", 0) != 0)
    return std::nullopt;
  size_t i = 4;
  int64_t n = 0;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && n < (int64_t{1} << 40))
    n = n * 10 + (name[i++] - '0');
  if (i == 4 || i >= name.size() || name[i] != '.')
    return std::nullopt;
  return n;
}

/// Per device, the layer key of each step: its stamp, else the previous step's, else the embedding.
std::vector<std::vector<int64_t>> stepLayerKeys(const rt::Plan &plan) {
  std::vector<std::vector<int64_t>> keys;
  for (const rt::DevicePlan &dev : plan.devices) {
    std::vector<int64_t> &k = keys.emplace_back();
    int64_t last = kEmbedKey;
    for (const rt::Step &s : dev.steps) {
      if (std::optional<int64_t> l = layerOfName(s.name))
        last = *l;
      k.push_back(last);
    }
  }
  return keys;
}

std::string shapeStr(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + (shape[i] == -1 ? std::string("T") : std::to_string(shape[i]));
  return s + "]";
}

bool samePieces(const std::vector<rt::WeightPiece> &a, const std::vector<rt::WeightPiece> &b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto &x, const auto &y) {
    return x.fileOffset == y.fileOffset && x.rowStride == y.rowStride && x.rowBytes == y.rowBytes &&
           x.rows == y.rows;
  });
}

/// The split axis of a weight that is not mirrored: where the local shapes differ (an empty share is
/// [32, 0] or [0, 32]), else by the run layout: runs narrower than a row cut the innermost axis; otherwise
/// one run per index of the axes before the split axis (3-D: one run per expert means axis 1, one block
/// of whole experts axis 0).
int cutAxis(const WeightCut &c) {
  const WeightShare *first = nullptr;
  for (const WeightShare &s : c.shares) {
    if (!s.present)
      continue;
    if (!first) {
      first = &s;
      continue;
    }
    for (size_t a = 0; a < s.shape.size() && a < first->shape.size(); ++a)
      if (s.shape[a] != first->shape[a])
        return static_cast<int>(a);
  }
  if (!first || first->shape.empty())
    return -1;
  for (const WeightShare &s : c.shares)
    for (const Run &r : s.runs)
      if (r.cols < c.rowBytes)
        return static_cast<int>(first->shape.size()) - 1;
  if (first->shape.size() < 3)
    return 0;
  const uint64_t outer = static_cast<uint64_t>(std::max<int64_t>(first->shape[0], 1));
  return first->runs.size() >= 2 && first->runs.size() % outer == 0 && outer > 1 ? 1 : 0;
}

/// How `name` is cut: pieces of every device mapped into the tensor's row x byte grid.
WeightCut cutOf(const rt::Plan &plan, const std::string &name, size_t layer) {
  WeightCut c;
  c.name = name;
  c.layer = layer;
  c.shares.resize(plan.devices.size());
  std::vector<const rt::WeightSlice *> slices(plan.devices.size(), nullptr);
  uint64_t base = std::numeric_limits<uint64_t>::max(), end = 0, rowBytes = 0;
  bool multiRow = false;
  for (size_t d = 0; d < plan.devices.size(); ++d)
    for (const rt::WeightSlice &w : plan.devices[d].weights)
      if (w.name == name) {
        slices[d] = &w;
        c.type = ggmlTypeName(w.type);
        WeightShare &s = c.shares[d];
        s.present = true;
        s.shape = w.shape;
        s.bytes = w.bytes;
        s.host = w.placement == rt::Placement::Host;
        for (const rt::WeightPiece &p : w.pieces) {
          if (!p.rows || !p.rowBytes)
            continue;
          base = std::min(base, p.fileOffset);
          end = std::max(end, p.fileOffset + (p.rows - 1) * p.rowStride + p.rowBytes);
          rowBytes = std::max(rowBytes, p.rowBytes);
          if (p.rows > 1) {
            rowBytes = std::max(rowBytes, p.rowStride);
            multiRow = true;
          }
        }
        break;
      }
  const WeightShare *first = nullptr;
  for (const WeightShare &s : c.shares)
    if (s.present && !first)
      first = &s;
  if (!first)
    return c;
  // A 1-D tensor is one row: its parts lie side by side within it.
  if (!multiRow && first->shape.size() <= 1 && end > base)
    rowBytes = end - base;
  c.rowBytes = rowBytes;
  c.totalRows = rowBytes ? (end - base + rowBytes - 1) / rowBytes : 0;
  for (size_t d = 0; d < slices.size(); ++d) {
    if (!slices[d])
      continue;
    for (const rt::WeightPiece &p : slices[d]->pieces)
      if (p.rows && p.rowBytes && rowBytes)
        c.shares[d].runs.push_back({(p.fileOffset - base) / rowBytes, p.rows, (p.fileOffset - base) % rowBytes,
                                    p.rowBytes});
  }
  c.mirrored = true;
  for (size_t d = 0; d < slices.size(); ++d)
    c.mirrored = c.mirrored && slices[d] && samePieces(slices[d]->pieces, slices[0]->pieces);
  c.shape = first->shape;
  if (c.mirrored)
    return c;
  c.axis = cutAxis(c);
  c.innermost = c.axis >= 0 && c.axis + 1 == static_cast<int>(first->shape.size());
  if (c.axis >= 0 && static_cast<size_t>(c.axis) < c.shape.size()) {
    c.shape[c.axis] = 0;
    for (const WeightShare &s : c.shares)
      if (s.present && static_cast<size_t>(c.axis) < s.shape.size())
        c.shape[c.axis] += s.shape[c.axis];
  }
  return c;
}

/// The split state of each tensor of device 0, propagated over its steps (see the file comment).
std::vector<State> deriveStates(const rt::DevicePlan &dev, const std::map<std::string, const WeightCut *> &cuts) {
  std::vector<State> st(dev.tensors.size(), State::Unknown);
  auto weightCut = [&](int32_t id) -> const WeightCut * {
    const rt::TensorDesc &t = dev.tensors[id];
    if (t.storage != rt::Storage::Weight)
      return nullptr;
    auto it = cuts.find(dev.weights[t.index].name);
    return it == cuts.end() ? nullptr : it->second;
  };
  auto stateOf = [&](int32_t id) {
    for (int hops = 0; dev.tensors[id].storage == rt::Storage::View && st[id] == State::Unknown && hops < 64; ++hops)
      id = dev.tensors[id].index; // a view shares its base's distribution
    const rt::TensorDesc &t = dev.tensors[id];
    if (t.storage == rt::Storage::InputTokens || t.storage == rt::Storage::InputPositions ||
        t.storage == rt::Storage::InputOutputRows || t.storage == rt::Storage::Kv)
      return State::Mirrored;
    if (const WeightCut *c = weightCut(id))
      return c->mirrored ? State::Mirrored : State::Split;
    return st[id];
  };
  for (const rt::Step &s : dev.steps) {
    State out = State::Mirrored;
    bool unknown = false;
    for (int32_t in : s.inputs) {
      State x = stateOf(in);
      unknown = unknown || x == State::Unknown;
      if (x == State::Partial || (x == State::Split && out == State::Mirrored))
        out = x;
    }
    // The weight operand decides a contraction's result.
    auto weightRule = [&](size_t operand, bool experts) {
      const WeightCut *c = operand < s.inputs.size() ? weightCut(s.inputs[operand]) : nullptr;
      if (!c || c->mirrored)
        return;
      const bool contraction = c->innermost || (experts && c->axis == 0);
      out = contraction ? State::Partial : State::Split;
      unknown = false;
    };
    switch (s.op) {
    case rt::OpKind::Matmul:
      weightRule(1, false);
      break;
    case rt::OpKind::MulMatId:
      weightRule(1, true);
      break;
    case rt::OpKind::GetRows: // a table split on its rows (the vocabulary) is a partial lookup
      if (const WeightCut *c = weightCut(s.inputs[0]); c && !c->mirrored) {
        out = c->innermost ? State::Split : State::Partial;
        unknown = false;
      }
      break;
    case rt::OpKind::AllReduce:
    case rt::OpKind::AllGather:
    case rt::OpKind::AllReduceRmsNorm:
      out = State::Mirrored, unknown = false;
      break;
    case rt::OpKind::ReduceScatter:
      out = State::Split, unknown = false;
      break;
    default:
      break;
    }
    for (int32_t o : s.outputs)
      st[o] = unknown && out == State::Mirrored ? State::Unknown : out;
  }
  return st;
}

/// Device `d`'s steps of each layer, with their producers, weights and states.
std::vector<std::vector<FlowNode>> buildFlowsOf(const rt::Plan &plan, size_t d, const std::vector<int64_t> &keys0,
                                                const std::map<int64_t, size_t> &layerIndex,
                                                const std::map<std::string, const WeightCut *> &cuts,
                                                size_t nLayers) {
  std::vector<std::vector<FlowNode>> flows(nLayers);
  if (plan.devices.size() <= d)
    return flows;
  const rt::DevicePlan &dev = plan.devices[d];
  std::vector<State> states = deriveStates(dev, cuts);
  std::vector<std::pair<size_t, size_t>> producer(dev.tensors.size(), {SIZE_MAX, 0}); // layer, node
  auto root = [&](int32_t id) {
    for (int hops = 0; dev.tensors[id].storage == rt::Storage::View && producer[id].first == SIZE_MAX && hops < 64;
         ++hops)
      id = dev.tensors[id].index;
    return id;
  };
  for (size_t i = 0; i < dev.steps.size(); ++i) {
    const rt::Step &s = dev.steps[i];
    const size_t layer = layerIndex.at(keys0[i]);
    FlowNode n;
    n.step = i;
    n.op = rt::opKindName(s.op);
    n.name = s.name;
    if (!s.outputs.empty()) {
      n.shape = shapeStr(dev.tensors[s.outputs[0]].shape);
      n.state = states[s.outputs[0]];
    }
    for (int32_t in : s.inputs) {
      const rt::TensorDesc &t = dev.tensors[in];
      if (t.storage == rt::Storage::Weight) {
        auto it = cuts.find(dev.weights[t.index].name);
        n.weights.emplace_back(dev.weights[t.index].name,
                               it == cuts.end() ? State::Unknown
                               : it->second->mirrored ? State::Mirrored
                                                      : State::Split);
        continue;
      }
      if (t.storage == rt::Storage::Kv)
        continue;
      auto [pl, pn] = producer[root(in)];
      if (pl == layer && std::find(n.from.begin(), n.from.end(), pn) == n.from.end())
        n.from.push_back(pn);
      else if (pl != layer)
        ++n.external;
    }
    for (int32_t o : s.outputs)
      producer[o] = {layer, flows[layer].size()};
    flows[layer].push_back(std::move(n));
  }
  return flows;
}

/// The first device's steps of each layer; in a pipeline plan, each layer's from the first device of the
/// stage that runs it.
std::vector<std::vector<FlowNode>> buildFlows(const rt::Plan &plan, const std::vector<std::vector<int64_t>> &keys,
                                              const std::map<int64_t, size_t> &layerIndex,
                                              const std::map<std::string, const WeightCut *> &cuts,
                                              size_t nLayers) {
  std::vector<std::vector<FlowNode>> flows(nLayers);
  const size_t per = std::max<size_t>(1, rt::devicesPerStage(plan));
  for (size_t d = 0; d < plan.devices.size() && d < keys.size(); d += per) {
    std::vector<std::vector<FlowNode>> mine = buildFlowsOf(plan, d, keys[d], layerIndex, cuts, nLayers);
    for (size_t l = 0; l < nLayers; ++l)
      if (flows[l].empty())
        flows[l] = std::move(mine[l]);
  }
  return flows;
}

} // namespace

const char *stateName(State s) {
  switch (s) {
  case State::Mirrored:
    return "mirrored";
  case State::Split:
    return "split";
  case State::Partial:
    return "partial";
  case State::Unknown:
    break;
  }
  return "unknown";
}

std::string WeightCut::describe() const {
  if (mirrored)
    return "mirrored: whole on every device";
  if (axis < 0 || static_cast<size_t>(axis) >= shape.size())
    return "split";
  const size_t rank = shape.size();
  const char *what = innermost         ? (rank == 1 ? "elements" : "columns")
                     : rank >= 3 && axis == 0 ? "experts"
                     : rank >= 3       ? "rows per expert"
                                       : "rows";
  std::string parts;
  for (const WeightShare &s : shares)
    parts += fmt::format("{}{}", parts.empty() ? "" : " + ",
                         s.present && static_cast<size_t>(axis) < s.shape.size() ? s.shape[axis] : 0);
  return fmt::format("axis {} ({}): {} of {}", axis, what, parts, shape[axis]);
}

Picture buildPicture(const rt::Plan &plan, const std::string &planPath, int64_t ctx) {
  Picture p;
  p.planPath = planPath;
  p.ctx = ctx > 0 ? ctx : plan.model.defaultCtx;
  p.summaryText = rt::describePlan(plan, p.ctx);
  p.memory = rt::summarizeDevices(plan);
  p.memoryAtCtx = rt::memoryAt(plan, p.ctx);
  p.blocks = rt::blockCount(plan);
  p.stages = plan.stages;
  for (size_t d = 0; d < plan.devices.size(); ++d)
    p.deviceNames.push_back(plan.stages > 1 ? fmt::format("device {} ({}, stage {})", d, plan.devices[d].kind,
                                                          rt::stageOf(plan, d))
                                            : fmt::format("device {} ({})", d, plan.devices[d].kind));

  std::vector<std::vector<int64_t>> keys = stepLayerKeys(plan);
  std::map<int64_t, size_t> layerIndex;
  for (const auto &k : keys)
    for (int64_t key : k)
      layerIndex[key] = 0;
  for (auto &[key, index] : layerIndex) {
    index = p.layers.size();
    p.layers.push_back({key == kEmbedKey    ? "embed"
                        : key == kOutputKey ? "output"
                                            : "blk." + std::to_string(key),
                        key == kEmbedKey || key == kOutputKey ? -1 : key});
  }

  p.lanes.resize(plan.devices.size());
  std::map<std::string, size_t> firstUse; // weight name -> layer of its first reader
  std::vector<std::string> order;
  for (size_t d = 0; d < plan.devices.size(); ++d) {
    const rt::DevicePlan &dev = plan.devices[d];
    for (size_t i = 0; i < dev.steps.size(); ++i) {
      const rt::Step &s = dev.steps[i];
      const size_t layer = layerIndex[keys[d][i]];
      if (rt::isCollective(s.op))
        p.lanes[d].push_back({i, layer, rt::opKindName(s.op), s.name,
                                 rt::collectiveBytesPerToken(dev, s, plan.commDtype)});
      else if (rt::isStageTransfer(s.op)) // what crosses a stage boundary, with its payload per token
        p.lanes[d].push_back({i, layer, rt::opKindName(s.op), s.name, rt::transferBytesPerToken(dev, s)});
      for (int32_t in : s.inputs) {
        const rt::TensorDesc &t = dev.tensors[in];
        if (t.storage != rt::Storage::Weight)
          continue;
        const std::string &name = dev.weights[t.index].name;
        auto [it, fresh] = firstUse.emplace(name, layer);
        if (fresh)
          order.push_back(name);
        else
          it->second = std::min(it->second, layer);
      }
    }
  }
  // A weight named blk.N.* is drawn with block N even when a step of another layer reads it (the fused
  // layer boundary normalizes with the next block's attn_norm); other weights go with their first reader.
  for (const std::string &name : order) {
    std::optional<int64_t> block = layerOfName(name);
    auto it = block ? layerIndex.find(*block) : layerIndex.end();
    p.weights.push_back(cutOf(plan, name, it != layerIndex.end() ? it->second : firstUse[name]));
  }
  std::stable_sort(p.weights.begin(), p.weights.end(),
                   [](const WeightCut &a, const WeightCut &b) { return a.layer < b.layer; });
  std::map<std::string, const WeightCut *> cuts;
  for (const WeightCut &c : p.weights)
    cuts[c.name] = &c;
  if (!keys.empty())
    p.flows = buildFlows(plan, keys, layerIndex, cuts, p.layers.size());
  else
    p.flows.resize(p.layers.size());
  p.chosenLayer = findLayer(p, "");
  return p;
}

size_t findLayer(const Picture &p, const std::string &spec) {
  if (spec.empty()) {
    for (size_t i = 0; i < p.layers.size(); ++i)
      if (p.layers[i].block >= 0)
        return i;
    return 0;
  }
  std::string want = !spec.empty() && std::all_of(spec.begin(), spec.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })
                         ? "blk." + spec
                         : spec;
  for (size_t i = 0; i < p.layers.size(); ++i)
    if (p.layers[i].label == want)
      return i;
  std::string have;
  for (const Layer &l : p.layers)
    if (l.block < 0)
      have += (have.empty() ? "" : ", ") + l.label;
  int64_t lo = -1, hi = -1;
  for (const Layer &l : p.layers)
    if (l.block >= 0) {
      lo = lo < 0 ? l.block : std::min(lo, l.block);
      hi = std::max(hi, l.block);
    }
  if (lo >= 0)
    have += fmt::format("{}a block {}..{}", have.empty() ? "" : ", ", lo, hi);
  throw Failure(fmt::format("--layer {}: {} has no such layer; give {}", spec, p.planPath, have));
}

} // namespace tpc::cli::picture
