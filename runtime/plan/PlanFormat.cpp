//===- PlanFormat.cpp - plan structs: names, builder, semantic checks -----===//
//
// validatePlan() is the semantic half of loading (the FlatBuffers verifier is the structural half): it
// checks every id, index, size and offset with overflow-safe arithmetic, so the executor can index
// arenas and the GGUF without further checks. It collects every problem, one line each.
//===----------------------------------------------------------------------===//
#include "runtime/plan/PlanFormat.h"

#include "runtime/plan/StepParams.h"

#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <optional>

namespace tpc::rt {

namespace {
/// Operand counts per op; -1 = no upper bound. Parameter counts are StepParams.h's.
struct OpSig {
  const char *name;
  int minIn, maxIn, minOut, maxOut;
};
constexpr OpSig kSigs[kNumOpKinds] = {
    {"get_rows", 2, 2, 1, 1},     {"take_along", 2, 2, 1, 1},
    {"rms_norm", 1, 2, 1, 1},     {"matmul", 2, 2, 1, 1},
    {"mul_mat_id", 3, 3, 1, 1},   {"add", 2, 2, 1, 1},
    {"mul", 2, 2, 1, 1},          {"div", 2, 2, 1, 1},
    {"scale", 1, 1, 1, 1},        {"unary", 1, 1, 1, 1},
    {"glu", 1, 2, 1, 1},          {"softmax", 1, 1, 1, 1},
    {"top_k", 1, 1, 1, 1},        {"sum", 1, 1, 1, 1},
    {"reshape", 1, 1, 1, 1},      {"permute", 1, 1, 1, 1},
    {"view", 1, 1, 1, 1},         {"concat", 1, -1, 1, 1},
    {"rope", 2, 3, 1, 1},         {"softcap", 1, 1, 1, 1},
    {"attention", 4, 6, 1, 1},    {"expert_combine", 2, -1, 1, 1},
    {"all_reduce", 1, -1, 1, -1}, {"reduce_scatter", 1, 1, 1, 1},
    {"all_gather", 1, 1, 1, 1},   {"slice", 1, 1, 1, 1},
    {"copy", 1, 1, 1, 1},         {"all_reduce_rms_norm", 1, 3, 2, 2},
    {"ssm_conv", 3, 3, 1, 1},     {"delta_net", 6, 6, 1, 1},
    {"l2_norm", 1, 1, 1, 1},      {"gated_rms_norm", 3, 3, 1, 1},
    {"add_id", 3, 3, 1, 1},       {"send", 1, 1, 0, 0},
    {"recv", 0, 0, 1, 1},
};

std::optional<uint64_t> mulChecked(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}
std::optional<uint64_t> addChecked(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

/// Elements of `shape` with the token dim at `tokens` and the rows dim at `rows`; nullopt on a bad dim or
/// overflow. A dim may be 0: a device's share of a split dimension can be empty (e.g. every head of a
/// one-block split on device 0).
std::optional<uint64_t> elemsOf(const std::vector<int64_t> &shape, int64_t tokens, int64_t rows = -1) {
  uint64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t d = shape[i];
    if (d == kTokenDim && i == 0)
      d = tokens;
    else if (d == kRowsDim && i == 0)
      d = rows;
    if (d < 0)
      return std::nullopt;
    auto m = mulChecked(n, static_cast<uint64_t>(d));
    if (!m)
      return std::nullopt;
    n = *m;
  }
  return n;
}
} // namespace

const char *opKindName(OpKind op) {
  auto i = static_cast<unsigned>(op);
  return i < kNumOpKinds ? kSigs[i].name : "unknown-op";
}

bool isStageTransfer(OpKind op) { return op == OpKind::Send || op == OpKind::Recv; }

bool isCollective(OpKind op) {
  return op == OpKind::AllReduce || op == OpKind::ReduceScatter || op == OpKind::AllGather ||
         op == OpKind::AllReduceRmsNorm;
}

const char *dtypeName(DType dt) {
  switch (dt) {
  case DType::F32:
    return "f32";
  case DType::I32:
    return "i32";
  case DType::F16:
    return "f16";
  }
  return "unknown-dtype";
}

const char *commDtypeName(CommDtype t) { return t == CommDtype::BF16 ? "bf16" : "f32"; }

const char *placementName(Placement p) {
  switch (p) {
  case Placement::Device:
    return "device";
  case Placement::Host:
    return "host";
  }
  return "unknown-placement";
}

Placement tensorPlacement(const DevicePlan &dev, int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= dev.tensors.size())
    return Placement::Device;
  const TensorDesc &t = dev.tensors[id];
  switch (t.storage) {
  case Storage::Activation:
  case Storage::View: // validatePlan checks that a view's placement is its base's
    return t.placement;
  case Storage::Weight:
    return t.index >= 0 && static_cast<size_t>(t.index) < dev.weights.size() ? dev.weights[t.index].placement
                                                                             : Placement::Device;
  case Storage::Kv:
    return t.index >= 0 && static_cast<size_t>(t.index) < dev.kv.size() ? dev.kv[t.index].placement
                                                                        : Placement::Device;
  default:
    return Placement::Device; // tokens, positions and logits are bound by the caller in device memory
  }
}

int32_t tensorOfStorage(const DevicePlan &dp, Storage kind) {
  for (size_t i = 0; i < dp.tensors.size(); ++i)
    if (dp.tensors[i].storage == kind)
      return static_cast<int32_t>(i);
  return -1;
}

int32_t DevicePlanBuilder::activation(DType dt, std::vector<int64_t> shape, uint64_t offset,
                                      Placement where) {
  TensorDesc t;
  t.id = static_cast<int32_t>(dev_.tensors.size());
  t.dtype = dt;
  t.shape = std::move(shape);
  t.storage = Storage::Activation;
  t.offset = offset;
  t.placement = where;
  dev_.tensors.push_back(std::move(t));
  return dev_.tensors.back().id;
}

int32_t DevicePlanBuilder::weight(int32_t slice) {
  TensorDesc t;
  t.id = static_cast<int32_t>(dev_.tensors.size());
  t.dtype = DType::F32;
  t.shape = dev_.weights.at(slice).shape;
  t.storage = Storage::Weight;
  t.index = slice;
  dev_.tensors.push_back(std::move(t));
  return dev_.tensors.back().id;
}

int32_t DevicePlanBuilder::addWeight(WeightSlice w) {
  dev_.weights.push_back(std::move(w));
  return static_cast<int32_t>(dev_.weights.size() - 1);
}

int32_t DevicePlanBuilder::addKv(KvCache c) {
  dev_.kvBytesPerToken += kvBytesPerPosition(c);
  dev_.kv.push_back(c);
  return static_cast<int32_t>(dev_.kv.size() - 1);
}

int32_t DevicePlanBuilder::io(Storage kind, DType dt, std::vector<int64_t> shape) {
  TensorDesc t;
  t.id = static_cast<int32_t>(dev_.tensors.size());
  t.dtype = dt;
  t.shape = std::move(shape);
  t.storage = kind;
  dev_.tensors.push_back(std::move(t));
  return dev_.tensors.back().id;
}

int32_t DevicePlanBuilder::view(int32_t base, DType dt, std::vector<int64_t> shape, uint64_t offset) {
  TensorDesc t;
  t.id = static_cast<int32_t>(dev_.tensors.size());
  t.dtype = dt;
  t.shape = std::move(shape);
  t.storage = Storage::View;
  t.index = base;
  t.offset = offset;
  t.placement = tensorPlacement(dev_, base);
  dev_.tensors.push_back(std::move(t));
  return dev_.tensors.back().id;
}

void DevicePlanBuilder::step(OpKind op, std::vector<int32_t> in, std::vector<int32_t> out,
                             std::vector<int64_t> ints, std::vector<float> floats, std::string name,
                             Placement where) {
  Step s;
  s.op = op;
  s.placement = where;
  s.inputs = std::move(in);
  s.outputs = std::move(out);
  s.ints = std::move(ints);
  s.floats = std::move(floats);
  s.name = name.empty() ? opKindName(op) : std::move(name);
  dev_.steps.push_back(std::move(s));
}

namespace {
bool knownPlacement(Placement p) { return p == Placement::Device || p == Placement::Host; }

const char *storageName(Storage s) {
  switch (s) {
  case Storage::Activation:
    return "activation";
  case Storage::Weight:
    return "weight";
  case Storage::Kv:
    return "kv";
  case Storage::InputTokens:
    return "input tokens";
  case Storage::InputPositions:
    return "input positions";
  case Storage::OutputLogits:
    return "output logits";
  case Storage::View:
    return "view";
  case Storage::InputOutputRows:
    return "input output rows";
  }
  return "unknown storage";
}

/// The placement rules of one step whose operand ids and KV index are valid (one error line each):
///  - a collective runs on the device, on device-side tensors;
///  - a Copy writes its own side (its placement is its destination) and reads either side;
///  - every other step reads and writes tensors of its own side: activations, views, inputs and logits
///    (device-side), weight slices; a host step's KV cache is host-placed, while a device step may read a
///    host-placed one (--no-kv-offload: mapped host memory).
void checkStepPlacement(const DevicePlan &dev, size_t si, const std::function<void(std::string)> &err) {
  const Step &st = dev.steps[si];
  const Placement side = st.placement;
  const auto where =
      fmt::format("step {} '{}' ({}) on the {}", si, st.name, opKindName(st.op), placementName(side));
  auto operandName = [&](int32_t id) {
    const TensorDesc &t = dev.tensors[id];
    if (t.storage == Storage::Weight)
      return fmt::format("tensor {} (weight '{}')", id, dev.weights[t.index].name);
    return fmt::format("tensor {} ({})", id, storageName(t.storage));
  };
  auto kvCheck = [&](int32_t k) {
    if (side == Placement::Host && dev.kv[k].placement != Placement::Host)
      err(fmt::format("{}: kv cache {} (layer {}) is device-placed; a host step needs a host-placed cache",
                      where, k, dev.kv[k].layer));
  };
  if (isCollective(st.op)) {
    if (side != Placement::Device)
      err(fmt::format("{}: collectives run on the device", where));
    for (const std::vector<int32_t> *ids : {&st.inputs, &st.outputs})
      for (int32_t id : *ids)
        if (tensorPlacement(dev, id) != Placement::Device)
          err(fmt::format("{}: {} is on the host; collectives run on device-placed tensors", where,
                          operandName(id)));
    return;
  }
  if (st.op == OpKind::Copy) {
    for (int32_t id : st.outputs)
      if (tensorPlacement(dev, id) != side)
        err(fmt::format("{}: writes {} on the {}; a copy writes its own side", where, operandName(id),
                        placementName(tensorPlacement(dev, id))));
    return;
  }
  auto check = [&](int32_t id, const char *role) {
    const TensorDesc &t = dev.tensors[id];
    if (t.storage == Storage::Kv)
      return kvCheck(t.index);
    const Placement p = tensorPlacement(dev, id);
    if (p == side)
      return;
    if (t.storage == Storage::Weight)
      err(fmt::format("{}: {} is a {} slice; a {} step reads {} slices", where, operandName(id),
                      placementName(p), placementName(side), placementName(side)));
    else
      err(fmt::format("{}: {} {} is on the {}; a step's operands are on its side (a copy moves them)", where,
                      role, operandName(id), placementName(p)));
  };
  for (int32_t id : st.inputs)
    check(id, "input");
  for (int32_t id : st.outputs)
    check(id, "output");
  if (std::optional<int64_t> k = stepCache(st))
    kvCheck(static_cast<int32_t>(*k));
}

void validateDevice(const Plan &plan, size_t d, std::vector<std::string> &errs) {
  const DevicePlan &dev = plan.devices[d];
  auto err = [&](std::string msg) { errs.push_back(fmt::format("device {}: {}", d, msg)); };
  const int64_t maxBatch = plan.model.maxBatch;
  // Rows dims are sized for max_output_rows; a plan without the rows input has none (checked below).
  const int64_t maxRows = plan.model.maxOutputRows;

  // Weights: known type, whole blocks, inside the arena, pieces inside the GGUF and summing to the slice.
  for (size_t w = 0; w < dev.weights.size(); ++w) {
    const WeightSlice &s = dev.weights[w];
    auto where = fmt::format("weight {} '{}'", w, s.name);
    if (!knownPlacement(s.placement))
      err(fmt::format("{}: unknown placement {}", where, static_cast<int>(s.placement)));
    if (!ggmlTypeInfo(static_cast<uint32_t>(s.type))) {
      err(fmt::format("{}: unknown ggml type {}", where, static_cast<uint32_t>(s.type)));
      continue;
    }
    auto elems = elemsOf(s.shape, 0);
    if (s.shape.empty() || !elems) {
      err(fmt::format("{}: bad shape", where));
      continue;
    }
    auto rowBytes = ggmlRowBytes(s.type, static_cast<uint64_t>(s.shape.back()));
    std::vector<int64_t> outer(s.shape.begin(), s.shape.end() - 1); // rows, also when a row is empty
    auto rows = elemsOf(outer, 0);
    auto total = rowBytes && rows ? mulChecked(*rowBytes, *rows) : std::nullopt;
    if (!total || *total != s.bytes)
      err(fmt::format("{}: {} bytes do not match shape and type {}", where, s.bytes, ggmlTypeName(s.type)));
    if (s.offset % 4 != 0) // block structs hold f16/f32 fields; kernels read them in place
      err(fmt::format("{}: arena offset {} is not a multiple of 4", where, s.offset));
    auto end = addChecked(s.offset, s.bytes);
    if (!end || *end > dev.weightBytes)
      err(fmt::format("{}: [{}, +{}) lies outside the weight arena ({} bytes)", where, s.offset, s.bytes,
                      dev.weightBytes));
    uint64_t packed = 0;
    for (size_t p = 0; p < s.pieces.size(); ++p) {
      const WeightPiece &pc = s.pieces[p];
      std::optional<uint64_t> last =
          pc.rows == 0 ? std::optional<uint64_t>(0) : mulChecked(pc.rows - 1, pc.rowStride);
      std::optional<uint64_t> pend = last ? addChecked(*last, pc.rowBytes) : std::nullopt;
      pend = pend ? addChecked(*pend, pc.fileOffset) : std::nullopt;
      if (pc.rows > 0 && (!pend || *pend > plan.ggufSize))
        err(fmt::format("{}: piece {} reads past the end of the GGUF ({} bytes)", where, p, plan.ggufSize));
      auto pb = mulChecked(pc.rows, pc.rowBytes);
      auto np = pb ? addChecked(packed, *pb) : std::nullopt;
      if (!np) {
        err(fmt::format("{}: piece {} size overflows", where, p));
        break;
      }
      packed = *np;
    }
    if (packed != s.bytes)
      err(fmt::format("{}: pieces hold {} bytes, the slice {}", where, packed, s.bytes));
  }

  // KV caches.
  uint64_t kvPerToken = 0;
  for (size_t k = 0; k < dev.kv.size(); ++k) {
    const KvCache &c = dev.kv[k];
    if (!knownPlacement(c.placement))
      err(fmt::format("kv cache {} (layer {}): unknown placement {}", k, c.layer,
                      static_cast<int>(c.placement)));
    // 0 heads is a device's empty share of split KV heads.
    if (c.nHeadKv < 0 || c.headDimK <= 0 || c.headDimV <= 0 || c.window < 0 ||
        (c.kind != CacheKind::Attention && c.kind != CacheKind::Recurrent)) {
      err(fmt::format("kv cache {} (layer {}): bad heads/dims/window/kind", k, c.layer));
      continue;
    }
    // A type this runtime cannot store (a newer compiler's, or a damaged file): name the flag that chose it.
    if (!isKvCacheType(c.typeK) || !isKvCacheType(c.typeV)) {
      const bool kBad = !isKvCacheType(c.typeK);
      const GGMLType bad = kBad ? c.typeK : c.typeV;
      const GGMLTypeInfo *info = ggmlTypeInfo(static_cast<uint32_t>(bad));
      err(fmt::format(
          "kv cache {} (layer {}): {} half of type {} is not a cache type this tpc runs (f32, f16, "
          "q8_0, q4_0: tpc compile {})",
          k, c.layer, kBad ? "K" : "V", info ? info->name : std::to_string(static_cast<uint32_t>(bad)),
          kBad ? "--cache-type-k" : "--cache-type-v"));
      continue;
    }
    // A quantized half stores whole blocks per head (PlanFormat.h): a head dim the blocks do not tile
    // would make kvRowBytes drop its tail.
    if ((isQuantizedKvType(c.typeK) && c.headDimK % 32 != 0) ||
        (isQuantizedKvType(c.typeV) && c.headDimV % 32 != 0)) {
      err(fmt::format(
          "kv cache {} (layer {}): {} K / {} V cache with head dims {} / {}: quantized halves need "
          "head dims that are multiples of 32",
          k, c.layer, ggmlTypeName(c.typeK), ggmlTypeName(c.typeV), c.headDimK, c.headDimV));
      continue;
    }
    if (c.kind == CacheKind::Recurrent &&
        (c.typeK != GGMLType::F32 || c.typeV != GGMLType::F32 || c.window != 0 || c.convRows < 0 ||
         c.convChannels < 0 || c.headDimK > 4096 || c.headDimV > 4096)) {
      err(fmt::format("recurrent cache {} (layer {}): must be f32 without a window, with conv rows/channels >= 0 "
                      "and head dims up to 4096",
                      k, c.layer));
      continue;
    }
    kvPerToken += kvBytesPerPosition(c);
  }
  if (kvPerToken != dev.kvBytesPerToken)
    err(fmt::format("kv_bytes_per_token is {} but the caches need {}", dev.kvBytesPerToken, kvPerToken));

  // Tensors: ids, shapes, storage inside its arena for max_batch tokens.
  std::vector<uint64_t> bytesAtMax(dev.tensors.size(), 0);
  for (size_t i = 0; i < dev.tensors.size(); ++i) {
    const TensorDesc &t = dev.tensors[i];
    auto where = fmt::format("tensor {}", i);
    if (t.id != static_cast<int32_t>(i))
      err(fmt::format("{}: id {} differs from its index", where, t.id));
    if (t.shape.size() > 8) {
      err(fmt::format("{}: rank {} > 8", where, t.shape.size()));
      continue;
    }
    if (static_cast<uint8_t>(t.dtype) > 2) {
      err(fmt::format("{}: unknown dtype", where));
      continue;
    }
    if (!knownPlacement(t.placement)) {
      err(fmt::format("{}: unknown placement {}", where, static_cast<int>(t.placement)));
      continue;
    }
    auto elems = elemsOf(t.shape, maxBatch, maxRows > 0 ? maxRows : -1);
    auto bytes = elems ? mulChecked(*elems, dtypeBytes(t.dtype)) : std::nullopt;
    if (!bytes) {
      err(fmt::format("{}: bad shape (dims must be >= 0; only dim 0 may be -1 (tokens) or -2 (output rows, "
                      "which needs max_output_rows > 0))",
                      where));
      continue;
    }
    bytesAtMax[i] = *bytes;
    switch (t.storage) {
    case Storage::Activation: {
      if (t.offset % dtypeBytes(t.dtype) != 0)
        err(fmt::format("{}: offset {} is not aligned to its {} elements", where, t.offset,
                        dtypeName(t.dtype)));
      const bool host = t.placement == Placement::Host;
      const uint64_t arena = host ? dev.hostActivationBytes : dev.activationBytes;
      auto end = addChecked(t.offset, *bytes);
      if (!end || *end > arena)
        err(fmt::format("{}: [{}, +{}) lies outside the {} activation arena ({} bytes) for max_batch {} and "
                        "max_output_rows {}",
                        where, t.offset, *bytes, host ? "host" : "device", arena, maxBatch, maxRows));
      break;
    }
    case Storage::Weight:
      if (t.index < 0 || static_cast<size_t>(t.index) >= dev.weights.size())
        err(fmt::format("{}: weight index {} out of range", where, t.index));
      else if (elemsOf(dev.weights[t.index].shape, 0) != elemsOf(t.shape, maxBatch, maxRows))
        err(fmt::format("{}: shape differs from weight '{}'", where, dev.weights[t.index].name));
      break;
    case Storage::Kv:
      if (t.index < 0 || static_cast<size_t>(t.index) >= dev.kv.size())
        err(fmt::format("{}: kv index {} out of range", where, t.index));
      break;
    case Storage::InputTokens:
    case Storage::InputPositions:
      if (t.dtype != DType::I32 || t.shape.size() != 1 || t.shape[0] != -1)
        err(fmt::format("{}: token/position inputs must be i32 [-1]", where));
      break;
    case Storage::InputOutputRows:
      if (t.dtype != DType::I32 || t.shape.size() != 1 || t.shape[0] != kRowsDim)
        err(fmt::format("{}: the output-rows input must be i32 [-2]", where));
      break;
    case Storage::OutputLogits: {
      // With the rows input the logits hold the rows asked for, else one row per token.
      const int64_t rowsDim = tensorOfStorage(dev, Storage::InputOutputRows) >= 0 ? kRowsDim : kTokenDim;
      if (t.dtype != DType::F32 || t.shape.size() != 2 || t.shape[0] != rowsDim ||
          t.shape[1] != plan.model.nVocab)
        err(fmt::format("{}: logits must be f32 [{}, n_vocab={}]", where, rowsDim == kRowsDim ? "R" : "T",
                        plan.model.nVocab));
      break;
    }
    case Storage::View: {
      if (t.index < 0 || t.index >= static_cast<int32_t>(i)) {
        err(fmt::format("{}: view base {} must be an earlier tensor", where, t.index));
        break;
      }
      Storage bs = dev.tensors[t.index].storage;
      if (bs == Storage::Weight || bs == Storage::Kv) {
        err(fmt::format("{}: views of weights or kv caches are not supported", where));
        break;
      }
      if (t.offset % dtypeBytes(t.dtype) != 0)
        err(fmt::format("{}: view offset {} is not aligned to its {} elements", where, t.offset,
                        dtypeName(t.dtype)));
      auto end = addChecked(t.offset, *bytes);
      if (!end || *end > bytesAtMax[t.index])
        err(fmt::format("{}: view [{}, +{}) exceeds its base tensor {} ({} bytes)", where, t.offset, *bytes,
                        t.index, bytesAtMax[t.index]));
      if (t.placement != tensorPlacement(dev, t.index))
        err(fmt::format("{}: view on the {} of tensor {} on the {}; a view is on its base's side", where,
                        placementName(t.placement), t.index, placementName(tensorPlacement(dev, t.index))));
      break;
    }
    default:
      err(fmt::format("{}: unknown storage kind {}", where, static_cast<int>(t.storage)));
    }
  }

  // Steps: op, arity, operand ids, parameter counts.
  for (size_t s = 0; s < dev.steps.size(); ++s) {
    const Step &st = dev.steps[s];
    auto opi = static_cast<unsigned>(st.op);
    if (opi >= kNumOpKinds) {
      err(fmt::format("step {}: unknown op {}", s, opi));
      continue;
    }
    const OpSig &sig = kSigs[opi];
    auto where = fmt::format("step {} ({})", s, sig.name);
    auto countOk = [](size_t n, int lo, int hi) { return n >= size_t(lo) && (hi < 0 || n <= size_t(hi)); };
    if (!countOk(st.inputs.size(), sig.minIn, sig.maxIn))
      err(fmt::format("{}: {} inputs, expected {}..{}", where, st.inputs.size(), sig.minIn, sig.maxIn));
    if (!countOk(st.outputs.size(), sig.minOut, sig.maxOut))
      err(fmt::format("{}: {} outputs, expected {}..{}", where, st.outputs.size(), sig.minOut, sig.maxOut));
    if (st.op == OpKind::AllReduce && st.inputs.size() != st.outputs.size())
      err(fmt::format("{}: needs one output per input", where));
    const std::string params = checkParamLayout(st);
    if (!params.empty())
      err(fmt::format("{}: {}", where, params));
    for (int32_t id : st.inputs)
      if (id < 0 || static_cast<size_t>(id) >= dev.tensors.size())
        err(fmt::format("{}: input tensor {} out of range", where, id));
    for (int32_t id : st.outputs) {
      if (id < 0 || static_cast<size_t>(id) >= dev.tensors.size())
        err(fmt::format("{}: output tensor {} out of range", where, id));
      else if (dev.tensors[id].storage == Storage::Weight ||
               dev.tensors[id].storage == Storage::InputTokens ||
               dev.tensors[id].storage == Storage::InputPositions ||
               dev.tensors[id].storage == Storage::InputOutputRows)
        err(fmt::format("{}: writes read-only tensor {}", where, id));
    }
    // Attention and the recurrent ops name their cache in their parameters: the placement checks need a
    // valid index, and each op its kind of cache.
    bool kvOk = params.empty();
    if (std::optional<int64_t> kv = kvOk ? stepCache(st) : std::nullopt) {
      if (*kv < 0 || static_cast<size_t>(*kv) >= dev.kv.size()) {
        err(fmt::format("{}: kv cache index {} out of range", where, *kv));
        kvOk = false;
      } else if ((dev.kv[*kv].kind == CacheKind::Recurrent) != (st.op != OpKind::Attention)) {
        err(fmt::format("{}: cache {} is {} cache", where, *kv,
                        dev.kv[*kv].kind == CacheKind::Recurrent ? "a recurrent" : "an attention"));
        kvOk = false;
      }
    }
    if (!knownPlacement(st.placement)) {
      err(fmt::format("{}: unknown placement {}", where, static_cast<int>(st.placement)));
      continue;
    }
    // Placement, once every id it looks at is known to be valid.
    auto idOk = [&](int32_t id) {
      if (id < 0 || static_cast<size_t>(id) >= dev.tensors.size())
        return false;
      const TensorDesc &t = dev.tensors[id];
      if (!knownPlacement(t.placement))
        return false;
      if (t.storage == Storage::Weight)
        return t.index >= 0 && static_cast<size_t>(t.index) < dev.weights.size() &&
               knownPlacement(dev.weights[t.index].placement);
      if (t.storage == Storage::Kv)
        return t.index >= 0 && static_cast<size_t>(t.index) < dev.kv.size();
      return true;
    };
    if (kvOk && std::all_of(st.inputs.begin(), st.inputs.end(), idOk) &&
        std::all_of(st.outputs.begin(), st.outputs.end(), idOk))
      checkStepPlacement(dev, s, err);
  }
}
} // namespace

namespace {
/// Send/Recv pair up by position per (sender, receiver): the k-th Send of a to b meets the k-th Recv of b
/// from a, so both lists must have the same length and each pair the same dtype and shape; the peer is a
/// device of another stage.
void validateTransfers(const Plan &plan, std::vector<std::string> &errs) {
  const size_t n = plan.devices.size();
  // [a * n + b]: the tensors a sends to b (sends) and b receives from a (recvs), in order.
  std::vector<std::vector<const TensorDesc *>> sends(n * n), recvs(n * n);
  for (size_t d = 0; d < n; ++d) {
    const DevicePlan &dev = plan.devices[d];
    for (const Step &s : dev.steps) {
      if (!isStageTransfer(s.op) || !checkParamLayout(s).empty())
        continue; // the layout problem is reported with the step
      const int64_t peer = TransferParams::read(s).peer;
      if (peer < 0 || size_t(peer) >= n || stageOf(plan, size_t(peer)) == stageOf(plan, d)) {
        errs.push_back(fmt::format("device {} step '{}': peer {} is not a device of another stage", d, s.name,
                                   peer));
        continue;
      }
      const bool send = s.op == OpKind::Send;
      const std::vector<int32_t> &ids = send ? s.inputs : s.outputs;
      if (ids.size() != 1 || ids[0] < 0 || size_t(ids[0]) >= dev.tensors.size())
        continue; // reported with the step
      const TensorDesc *t = &dev.tensors[size_t(ids[0])];
      (send ? sends[d * n + size_t(peer)] : recvs[size_t(peer) * n + d]).push_back(t);
    }
  }
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b) {
      const auto &x = sends[a * n + b], &y = recvs[a * n + b];
      if (x.size() != y.size()) {
        errs.push_back(fmt::format("device {} sends {} tensors to device {}, which receives {}", a, x.size(), b,
                                   y.size()));
        continue;
      }
      for (size_t k = 0; k < x.size(); ++k)
        if (x[k]->dtype != y[k]->dtype || x[k]->shape != y[k]->shape)
          errs.push_back(fmt::format("transfer {} from device {} to {}: the sent and received tensors differ "
                                     "in dtype or shape",
                                     k, a, b));
    }
}
} // namespace

std::vector<std::string> validatePlan(const Plan &plan) {
  std::vector<std::string> errs;
  if (plan.model.nVocab <= 0 || plan.model.maxBatch <= 0 || plan.model.defaultCtx <= 0 ||
      plan.model.maxBatch > (int64_t(1) << 24) || plan.model.defaultCtx > (int64_t(1) << 26))
    errs.push_back(fmt::format("model: n_vocab {}, max_batch {}, default_ctx {} must be positive (and sane)",
                               plan.model.nVocab, plan.model.maxBatch, plan.model.defaultCtx));
  if (plan.devices.empty())
    errs.push_back("the plan has no devices");
  if (plan.commDtype != CommDtype::F32 && plan.commDtype != CommDtype::BF16)
    errs.push_back(fmt::format("comm_dtype {} is not f32 (0) or bf16 (1)", static_cast<int>(plan.commDtype)));
  const PlanTokenizer &tk = plan.tokenizer;
  if ((!tk.scores.empty() && tk.scores.size() != tk.tokens.size()) ||
      (!tk.tokenTypes.empty() && tk.tokenTypes.size() != tk.tokens.size()))
    errs.push_back("tokenizer: scores/token types do not match the token count");
  for (int32_t id : {tk.bosId, tk.eosId, tk.unkId, tk.padId, tk.sepId, tk.eotId, tk.eomId})
    if (id < -1 || (id >= 0 && static_cast<size_t>(id) >= tk.tokens.size() && !tk.tokens.empty()))
      errs.push_back(fmt::format("tokenizer: special token id {} out of range", id));
  if (plan.model.maxOutputRows < 0 || plan.model.maxOutputRows > plan.model.maxBatch)
    errs.push_back(fmt::format("model: max_output_rows {} must be in 0..max_batch ({})", plan.model.maxOutputRows,
                               plan.model.maxBatch));
  if (!errs.empty() && plan.model.maxBatch <= 0)
    return errs; // tensor sizes depend on max_batch
  for (size_t d = 0; d < plan.devices.size(); ++d) {
    validateDevice(plan, d, errs);
    // The rows input and max_output_rows come together: every device binds the rows of a call.
    const bool rowsInput = tensorOfStorage(plan.devices[d], Storage::InputOutputRows) >= 0;
    if (rowsInput != (plan.model.maxOutputRows > 0))
      errs.push_back(fmt::format("device {}: {} but max_output_rows is {}", d,
                                 rowsInput ? "has the output-rows input" : "has no output-rows input",
                                 plan.model.maxOutputRows));
  }
  if (plan.stages < 1 || plan.devices.empty() || plan.devices.size() % plan.stages != 0) {
    errs.push_back(fmt::format("{} pipeline stages do not divide the plan's {} devices", plan.stages,
                               plan.devices.size()));
    return errs;
  }
  // Collectives rendezvous by position among a stage's devices: each must issue its stage's sequence.
  const size_t per = devicesPerStage(plan);
  std::vector<std::vector<OpKind>> seqs;
  for (const DevicePlan &dev : plan.devices) {
    seqs.emplace_back();
    for (const Step &s : dev.steps)
      if (isCollective(s.op))
        seqs.back().push_back(s.op);
  }
  for (size_t d = 0; d < seqs.size(); ++d)
    if (const size_t first = d / per * per; seqs[d] != seqs[first])
      errs.push_back(
          fmt::format("device {} has {} collective steps, device {} has {} (or their order differs);"
                      " every device of a stage must issue the same collectives in the same order",
                      d, seqs[d].size(), first, seqs[first].size()));
  validateTransfers(plan, errs);
  return errs;
}

} // namespace tpc::rt
