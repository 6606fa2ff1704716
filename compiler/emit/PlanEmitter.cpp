//===- PlanEmitter.cpp - partitioned tpc IR -> device plan ------------------===//
//
// One pass over @forward per device, in program order (the plan's step order is the IR's order, so every
// device meets the collectives in the same sequence). Per value and device:
//  - function arguments are the InputTokens / InputPositions / InputOutputRows tensors; values computed
//    from tpc.select_rows (the output head) have the output-rows dim 0 (-2), sized per call;
//  - a weight becomes a WeightSlice the first time an op on that device reads it: the local part of the
//    tensor (LocalShapes.h) as runs of rows of the GGUF (WeightPieces.h), packed in ggml layout;
//  - a kv_cache becomes a KvCache with the local KV-head count (placement host for tpc.placement = host),
//    the storage types EmitOptions gives (`--cache-type-k/-v`) and, when every attention reading it has a
//    sliding window, that window: the runtime then keeps a ring of window + max_batch positions per sequence
//    instead of the whole context;
//  - a value returned by @forward is the OutputLogits tensor; other values are arena activations at the
//    offset tpc-plan-memory chose, or Views of the value they alias (reshapes; ops pinned to another
//    device with tpc.on_device, whose result there is their first operand).
// Placement (tpc-insert-backend-copies) carries over: a step runs where its op's `tpc.placement` says (a
// backend_copy where its `to` says), an activation lives on its producer's side, a view on its base's, a
// weight slice on its weight op's side. Inputs and logits stay on the device.
// Every op is one step; the fused forms tpc-fuse-norms makes (weighted_rms_norm, all_reduce_rms_norm) map
// to RmsNorm with a weight and AllReduceRmsNorm.
// Assumes a verified module after tpc-plan-memory (tpc.offsets present on every op with tensor results).
//===----------------------------------------------------------------------===//
#include "compiler/emit/PlanEmitter.h"
#include "compiler/emit/WeightPieces.h"

#include "passes/LocalShapes.h"
#include "passes/Stages.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/plan/StepParams.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <tuple>

namespace mlir::tpc {

using ::tpc::GGMLType;
namespace rt = ::tpc::rt;

namespace {

constexpr uint64_t kWeightAlign = 64;

rt::DType dtypeOf(Value v) {
  auto t = cast<ShapedType>(v.getType());
  return t.getElementType().isInteger(32) ? rt::DType::I32 : rt::DType::F32;
}

/// Where result `index` of `op` lives (resultOnHost).
rt::Placement resultPlacement(Operation *op, unsigned index) {
  return resultOnHost(op, index) ? rt::Placement::Host : rt::Placement::Device;
}

/// Where the step of `op` runs: the placement of its results, which must agree (a plan step runs on one
/// side). Fails on `op` naming the disagreement.
FailureOr<rt::Placement> stepPlacement(Operation *op) {
  rt::Placement p = resultPlacement(op, 0);
  for (unsigned i = 1; i < op->getNumResults(); ++i)
    if (resultPlacement(op, i) != p)
      return op->emitError("plan emitter: the results of one op are placed on different sides (host and "
                           "device); a plan step runs on one side");
  return p;
}

/// ggml UnaryFn of a tpc.glu function (the enums differ in order).
int64_t gluFn(GluFn fn) {
  switch (fn) {
  case GluFn::silu:
    return int64_t(rt::UnaryFn::Silu);
  case GluFn::gelu:
    return int64_t(rt::UnaryFn::Gelu);
  case GluFn::gelu_tanh:
    return int64_t(rt::UnaryFn::GeluTanh);
  case GluFn::swiglu_oai:
    return int64_t(rt::UnaryFn::SwigluOai);
  }
  return -1;
}

/// The sliding window of the attention ops that read cache `c` (through backend copies), or 0 when one of
/// them reads the whole context (or none reads it): a windowed cache only needs a ring of positions.
int64_t cacheWindow(KvCacheOp c) {
  int64_t window = -1;
  SmallVector<Value> caches = {c.getResult()};
  while (!caches.empty()) {
    Value v = caches.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (auto copy = dyn_cast<BackendCopyOp>(user)) {
        caches.push_back(copy.getResult());
      } else if (auto attn = dyn_cast<AttentionOp>(user)) {
        const int64_t w = int64_t(attn.getSlidingWindow());
        window = window < 0 ? w : (window == w ? w : 0);
      }
    }
  }
  return std::max<int64_t>(window, 0);
}

/// Emits one device's program.
class DeviceEmitter {
public:
  DeviceEmitter(ModuleOp m, const ::tpc::gguf::GGUFFile &f, int64_t device, rt::DevicePlan &dev,
                const DenseMap<Operation *, int64_t> &layers, const llvm::DenseSet<Value> &rowsDim,
                const EmitOptions &options, int64_t stage, int64_t perStage,
                const DenseMap<Operation *, int64_t> &stages)
      : m_(m), f_(f), device_(device), dev_(dev), b_(dev), layers_(layers), rowsDim_(rowsDim),
        options_(options), stage_(stage), perStage_(perStage), stages_(stages) {}

  LogicalResult run(func::FuncOp fn, int64_t nVocab);

private:
  LogicalResult emitOp(Operation *op);
  FailureOr<int32_t> operand(Value v, bool asTable = false);
  FailureOr<int32_t> weight(WeightOp w, bool asTable);
  FailureOr<int32_t> result(Value v, unsigned index);
  FailureOr<int32_t> aliasOf(Value v, Value of);
  std::string stepName(Operation *op) const;

  ModuleOp m_;
  const ::tpc::gguf::GGUFFile &f_;
  int64_t device_;
  rt::DevicePlan &dev_;
  rt::DevicePlanBuilder b_;
  const DenseMap<Operation *, int64_t> &layers_;
  const llvm::DenseSet<Value> &rowsDim_; ///< values whose dim 0 is the call's output rows
  const EmitOptions &options_;
  /// Pipeline stages: this plan device is device device_ of stage stage_ (perStage_ devices each); it
  /// emits the ops of its stage only (stages_, passes/Stages.h), and a stage_transfer as a Send or Recv.
  int64_t stage_, perStage_;
  const DenseMap<Operation *, int64_t> &stages_;
  DenseMap<Value, int32_t> tensors_;
  DenseMap<Value, int32_t> kv_;
  DenseMap<Operation *, int32_t> weights_, tables_;
  int32_t logits_ = -1;
};

std::string DeviceEmitter::stepName(Operation *op) const {
  std::string name = op->getName().stripDialect().str();
  int64_t layer = layers_.lookup(op);
  if (layer == kLayerOutput)
    return "output." + name;
  if (layer >= 0)
    return "blk." + std::to_string(layer) + "." + name;
  return name;
}

FailureOr<int32_t> DeviceEmitter::weight(WeightOp w, bool asTable) {
  auto &cache = asTable ? tables_ : weights_;
  if (auto it = cache.find(w); it != cache.end())
    return it->second;
  std::string name = w.getName().str();
  const ::tpc::gguf::TensorInfo *info = f_.findTensor(name);
  if (!info)
    return w.emitError() << "weight '" << name << "' is not in " << f_.path();
  auto global = cast<RankedTensorType>(w.getType()).getShape();
  SmallVector<int64_t> local = localShape(w.getResult(), device_);
  SplitSel sel;
  StateAttr s = getValueState(w.getResult());
  if (s && s.isSplit()) {
    sel.axis = s.getAxis();
    sel.segments = s.getSegments();
    int64_t before = 0;
    for (int64_t d = 0; d < device_; ++d)
      before += s.getSizes()[d];
    if (sel.segments < 1 || before % sel.segments || s.getSizes()[device_] % sel.segments)
      return w.emitError() << "weight '" << name << "': split sizes are not whole segments";
    sel.start = before / sel.segments;
    sel.size = s.getSizes()[device_] / sel.segments;
  } else if (s && !s.isMirrored()) {
    return w.emitError() << "weight '" << name << "': cannot emit state " << s
                         << " (a weight is mirrored or split)";
  }
  auto pieces = weightPieces(info->type, global, info->fileOffset, sel);
  if (!pieces)
    return w.emitError() << "weight '" << name << "' (" << w.getGgmlType() << "): split along axis "
                         << sel.axis << " at element " << sel.start << " (+" << sel.size
                         << ") is not on quant-block boundaries";
  rt::WeightSlice slice;
  slice.name = name;
  slice.type = info->type;
  slice.placement = resultPlacement(w, 0); // a host weight stays in host memory
  slice.shape.assign(local.begin(), local.end());
  if (asTable && slice.shape.size() == 1)
    slice.shape.push_back(1); // a 1-D table gathered by id: one element per row
  for (const rt::WeightPiece &p : *pieces)
    slice.bytes += p.rows * p.rowBytes;
  // The runs must pack exactly the local tensor (ggml layout of the local shape).
  uint64_t localRows = 1;
  for (size_t i = 0; i + 1 < local.size(); ++i)
    localRows *= uint64_t(local[i]);
  std::optional<uint64_t> localRowBytes = ::tpc::ggmlRowBytes(info->type, local.back());
  if (!localRowBytes || slice.bytes != localRows * *localRowBytes)
    return w.emitError() << "plan emitter: weight '" << name << "' pieces hold " << slice.bytes
                         << " bytes on device " << device_ << ", its local shape needs "
                         << (localRowBytes ? localRows * *localRowBytes : 0) << " (a tpc bug)";
  // The same part of the same tensor read by two ops (a tied embedding: the lookup and the output
  // projection) is one slice: the bytes are loaded once. A host use and a device use stay two slices (each
  // side reads its own memory).
  for (auto [i, other] : llvm::enumerate(dev_.weights)) {
    if (other.name == slice.name && other.placement == slice.placement && other.shape == slice.shape &&
        other.pieces.size() == pieces->size() &&
        std::equal(other.pieces.begin(), other.pieces.end(), pieces->begin(),
                   [](const auto &a, const auto &b) {
                     return a.fileOffset == b.fileOffset && a.rowStride == b.rowStride &&
                            a.rowBytes == b.rowBytes && a.rows == b.rows;
                   })) {
      int32_t id = b_.weight(static_cast<int32_t>(i));
      cache[w] = id;
      return id;
    }
  }
  slice.offset = dev_.weightBytes;
  slice.pieces = std::move(*pieces);
  dev_.weightBytes += (slice.bytes + kWeightAlign - 1) / kWeightAlign * kWeightAlign;
  int32_t id = b_.weight(b_.addWeight(std::move(slice)));
  cache[w] = id;
  return id;
}

FailureOr<int32_t> DeviceEmitter::operand(Value v, bool asTable) {
  if (auto w = v.getDefiningOp<WeightOp>())
    return weight(w, asTable);
  auto it = tensors_.find(v);
  if (it == tensors_.end()) {
    if (Operation *def = v.getDefiningOp())
      return def->emitError() << "plan emitter: value used before it was emitted on device " << device_;
    return m_.emitError() << "plan emitter: unknown function argument";
  }
  return it->second;
}

/// A View of `of`'s tensor with `v`'s local shape (views of views point at the root).
FailureOr<int32_t> DeviceEmitter::aliasOf(Value v, Value of) {
  FailureOr<int32_t> base = operand(of);
  if (failed(base))
    return failure();
  const rt::TensorDesc &bt = dev_.tensors[*base];
  SmallVector<int64_t> shape = planShape(v, device_, rowsDim_);
  int64_t n = 1, nb = 1;
  for (int64_t d : shape)
    n *= d < 0 ? 1 : d;
  for (int64_t d : bt.shape)
    nb *= d < 0 ? 1 : d;
  // The same dynamic dim 0 (tokens, output rows or none) on both sides.
  auto dyn0 = [](ArrayRef<int64_t> s) { return s.empty() ? int64_t(0) : std::min<int64_t>(s[0], 0); };
  if (n != nb || dyn0(shape) != dyn0(bt.shape))
    return v.getDefiningOp()->emitError()
           << "plan emitter: alias of a value with a different local element count on device " << device_;
  if (bt.storage != rt::Storage::Activation && bt.storage != rt::Storage::View) {
    // Not arena bytes (an input, a weight): the alias is the tensor itself when shapes agree.
    if (std::vector<int64_t>(shape.begin(), shape.end()) == bt.shape)
      return *base;
    return v.getDefiningOp()->emitError() << "plan emitter: cannot alias a non-activation with a new shape";
  }
  int32_t root = bt.storage == rt::Storage::View ? bt.index : *base;
  uint64_t off = bt.storage == rt::Storage::View ? bt.offset : 0;
  return b_.view(root, dtypeOf(v), std::vector<int64_t>(shape.begin(), shape.end()), off);
}

FailureOr<int32_t> DeviceEmitter::result(Value v, unsigned index) {
  Operation *op = v.getDefiningOp();
  SmallVector<int64_t> shape = planShape(v, device_, rowsDim_);
  std::vector<int64_t> s(shape.begin(), shape.end());
  switch (valueStorage(v, device_)) {
  case Storage::Output:
    if (dev_.tensors[logits_].shape != s)
      return op->emitError() << "plan emitter: the returned logits are not [rows, n_vocab] on device "
                             << device_ << " (a split result needs an all_gather first)";
    return logits_;
  case Storage::Alias:
    return aliasOf(v, op->getOperand(0));
  case Storage::Buffer: {
    auto offs = op->getAttrOfType<ArrayAttr>("tpc.offsets");
    if (!offs || offs.size() != op->getNumResults())
      return op->emitError() << "plan emitter: no tpc.offsets (run tpc-plan-memory first)";
    auto per = dyn_cast<DenseI64ArrayAttr>(offs[index]);
    if (!per || int64_t(per.size()) <= device_ || per[device_] < 0)
      return op->emitError() << "plan emitter: tpc.offsets has no slot for result " << index << " on device "
                             << device_;
    return b_.activation(dtypeOf(v), s, per[device_], resultPlacement(op, index));
  }
  default:
    return op->emitError() << "plan emitter: unexpected result storage";
  }
}

LogicalResult DeviceEmitter::run(func::FuncOp fn, int64_t nVocab) {
  Block &body = fn.getBody().front();
  if (body.getNumArguments() != 2 && body.getNumArguments() != 3)
    return fn.emitError("plan emitter: @forward must take (tokens, positions[, output rows])");
  tensors_[body.getArgument(0)] = b_.io(rt::Storage::InputTokens, rt::DType::I32, {rt::kTokenDim});
  tensors_[body.getArgument(1)] = b_.io(rt::Storage::InputPositions, rt::DType::I32, {rt::kTokenDim});
  // Without the rows argument (IR written before it existed) every token's row is computed.
  const bool rows = body.getNumArguments() == 3;
  if (rows)
    tensors_[body.getArgument(2)] = b_.io(rt::Storage::InputOutputRows, rt::DType::I32, {rt::kRowsDim});
  // A pipeline's logits return to device 0 of stage 0 (passes/Stages.h), which hands them out.
  if (stage_ == 0 && (device_ == 0 || moduleStageLayers(m_).size() < 2))
    logits_ = b_.io(rt::Storage::OutputLogits, rt::DType::F32, {rows ? rt::kRowsDim : rt::kTokenDim, nVocab});
  for (Operation &op : body) {
    if (stages_.lookup(&op) != stage_ && !isa<StageTransferOp>(op))
      continue; // another stage's op; its weights and caches are not loaded here either
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      if (ret.getNumOperands() != 1)
        return ret.emitError("plan emitter: @forward must return the logits only");
      if (isa_and_nonnull<StageTransferOp>(ret.getOperand(0).getDefiningOp()) && device_ != 0)
        continue; // pipeline logits come back to device 0 only (the one that hands them out)
      FailureOr<int32_t> t = operand(ret.getOperand(0));
      if (failed(t))
        return failure();
      if (*t != logits_) // the logits are an alias or an input here: copy them out (on the device side)
        b_.step(rt::OpKind::Copy, {*t}, {logits_}, {}, {}, "output.copy", rt::Placement::Device);
      continue;
    }
    if (failed(emitOp(&op)))
      return failure();
  }
  return success();
}

LogicalResult DeviceEmitter::emitOp(Operation *op) {
  if (isa<WeightOp>(op))
    return success(); // weights are sliced when first read
  if (auto x = dyn_cast<StageTransferOp>(op)) {
    // Device j of one stage hands its part to device j of the other (the same split on both sides).
    const int64_t from = int64_t(x.getFrom()), to = int64_t(x.getTo()); // verified >= 0
    const bool sends = from == stage_, receives = to == stage_;
    // The logits (read by the return only) go to device 0 of stage 0 alone: the others would drop them.
    const bool logitsOnly = x->hasOneUse() && isa<func::ReturnOp>(*x->getUsers().begin());
    if ((!sends && !receives) || (logitsOnly && device_ != 0))
      return success();
    const int64_t peer = (sends ? to : from) * perStage_ + device_;
    const std::vector<int64_t> ints = rt::TransferParams{peer}.pack().ints;
    if (sends) {
      FailureOr<int32_t> t = operand(x.getX());
      if (failed(t))
        return failure();
      b_.step(rt::OpKind::Send, {*t}, {}, ints, {}, stepName(op), rt::Placement::Device);
      return success();
    }
    FailureOr<int32_t> t = result(x.getResult(), 0);
    if (failed(t))
      return failure();
    tensors_[x.getResult()] = *t;
    b_.step(rt::OpKind::Recv, {}, {*t}, ints, {}, stepName(op), rt::Placement::Device);
    return success();
  }
  if (auto c = dyn_cast<KvCacheOp>(op)) {
    StateAttr s = getValueState(c.getResult());
    if (s && !s.isMirrored() && !(s.isSplit() && s.getAxis() == 0))
      return op->emitError() << "plan emitter: kv_cache state " << s
                             << " (only mirrored or split on KV heads)";
    rt::KvCache kv;
    kv.layer = int32_t(c.getLayer());
    kv.nHeadKv = int32_t(s && s.isSplit() ? s.getSizes()[device_] : c.getNHeadKv());
    kv.headDimK = int32_t(c.getHeadDimK());
    kv.headDimV = int32_t(c.getHeadDimV());
    kv.typeK = options_.cacheTypeK;
    kv.typeV = options_.cacheTypeV;
    // A quantized half stores whole 32-value blocks per head (rt::KvCache); say which flag and layer
    // cannot have them rather than let the plan check refuse the plan.
    for (auto [type, dim, flag, what] : {std::tuple{kv.typeK, kv.headDimK, "--cache-type-k", "key"},
                                         std::tuple{kv.typeV, kv.headDimV, "--cache-type-v", "value"}})
      if (rt::isQuantizedKvType(type) && dim % 32 != 0)
        return op->emitError() << flag << " " << ::tpc::ggmlTypeName(type) << ": layer " << kv.layer << "'s "
                               << what << " head size " << dim << " is not a multiple of 32 ("
                               << ::tpc::ggmlTypeName(type) << " stores blocks of 32 values per head); use "
                               << flag << " f16";
    kv.window = int32_t(cacheWindow(c));
    auto placement = op->getAttrOfType<StringAttr>("tpc.placement");
    kv.placement = placement && placement.getValue() == "host" ? rt::Placement::Host : rt::Placement::Device;
    kv_[c.getResult()] = b_.addKv(kv);
    return success();
  }
  if (auto r = dyn_cast<RecurrentStateOp>(op)) {
    StateAttr s = getValueState(r.getResult());
    if (s && !s.isMirrored() && !(s.isSplit() && s.getAxis() == 0))
      return op->emitError() << "plan emitter: recurrent_state state " << s
                             << " (only mirrored or split on key heads)";
    RecurrentStateType t = r.getType();
    const int64_t hk = s && s.isSplit() ? s.getSizes()[device_] : t.getNKeyHeads();
    const int64_t hv = hk * (t.getNValueHeads() / t.getNKeyHeads());
    rt::KvCache c;
    c.kind = rt::CacheKind::Recurrent;
    c.layer = int32_t(r.getLayer());
    c.nHeadKv = int32_t(hv);
    c.headDimK = int32_t(t.getHeadDimK());
    c.headDimV = int32_t(t.getHeadDimV());
    c.typeK = c.typeV = ::tpc::GGMLType::F32; // recurrent states stay f32 whatever -ctk / -ctv say
    c.convRows = int32_t(t.getConvKernel() - 1);
    c.convChannels = int32_t(2 * hk * t.getHeadDimK() + hv * t.getHeadDimV());
    auto placement = op->getAttrOfType<StringAttr>("tpc.placement");
    c.placement = placement && placement.getValue() == "host" ? rt::Placement::Host : rt::Placement::Device;
    kv_[r.getResult()] = b_.addKv(c);
    return success();
  }
  if (auto copy = dyn_cast<BackendCopyOp>(op);
      copy && isa<KvCacheType, RecurrentStateType>(copy.getX().getType())) {
    kv_[copy.getResult()] = kv_.lookup(copy.getX()); // the cache's placement is on the kv_cache op
    return success();
  }
  for (Value r : op->getResults())
    if (StateAttr s = getValueState(r); s && s.isLocal())
      return op->emitError() << "plan emitter: state " << s << " is not supported (no op runs on one device "
                             << "only except through tpc.on_device)";
  if (!runsOn(op, device_)) {
    // Elsewhere the op is the identity on its first operand (the residual added on one device only).
    for (auto [i, r] : llvm::enumerate(op->getResults())) {
      FailureOr<int32_t> t = result(r, i);
      if (failed(t))
        return failure();
      tensors_[r] = *t;
    }
    return success();
  }
  // Reshapes of arena values are views: no step.
  if (isa<ReshapeOp>(op) && valueStorage(op->getResult(0), device_) == Storage::Alias) {
    FailureOr<int32_t> t = result(op->getResult(0), 0);
    if (failed(t))
      return failure();
    tensors_[op->getResult(0)] = *t;
    return success();
  }

  std::vector<int32_t> in, out;
  auto addIn = [&](Value v, bool asTable = false) {
    FailureOr<int32_t> t = operand(v, asTable);
    if (failed(t))
      return false;
    in.push_back(*t);
    return true;
  };
  for (auto [i, r] : llvm::enumerate(op->getResults())) {
    FailureOr<int32_t> t = result(r, i);
    if (failed(t))
      return failure();
    tensors_[r] = *t;
    out.push_back(*t);
  }
  rt::PackedParams params;
  rt::OpKind kind;
  auto splitOf = [&](Value v) { return getValueState(v); };
  // Offset of this device's part along a split axis (whole segments only).
  auto localOffset = [&](StateAttr s) {
    int64_t off = 0;
    for (int64_t d = 0; d < device_; ++d)
      off += s.getSizes()[d];
    return off;
  };
  bool ok = true;
  LogicalResult res =
      llvm::TypeSwitch<Operation *, LogicalResult>(op)
          .Case([&](GetRowsOp o) -> LogicalResult {
            kind = rt::OpKind::GetRows;
            ok = addIn(o.getTable(), /*asTable=*/true) && addIn(o.getIds());
            // A vocabulary-parallel table: this device holds rows [offset, offset + local rows); other ids
            // read as zero rows (the result is partial).
            if (StateAttr t = splitOf(o.getTable()); t && t.isSplit() && t.getAxis() == 0)
              params = rt::GetRowsParams{localOffset(t)}.pack();
            return success();
          })
          .Case([&](SelectRowsOp o) -> LogicalResult {
            kind = rt::OpKind::GetRows; // the rows of an activation, by the call's row indices
            ok = addIn(o.getX()) && addIn(o.getRows());
            return success();
          })
          .Case([&](TakeAlongOp o) -> LogicalResult {
            kind = rt::OpKind::TakeAlong;
            if (o.getAxis() != cast<ShapedType>(o.getX().getType()).getRank() - 1)
              return o.emitError("plan emitter: take_along is supported along the last axis only");
            ok = addIn(o.getX()) && addIn(o.getIds());
            return success();
          })
          .Case([&](RmsNormOp o) -> LogicalResult {
            kind = rt::OpKind::RmsNorm;
            params = rt::RmsNormParams{o.getEps().convertToFloat()}.pack();
            ok = addIn(o.getX());
            return success();
          })
          .Case([&](L2NormOp o) -> LogicalResult {
            kind = rt::OpKind::L2Norm;
            params = rt::RmsNormParams{o.getEps().convertToFloat()}.pack();
            ok = addIn(o.getX());
            return success();
          })
          .Case([&](GatedRmsNormOp o) -> LogicalResult {
            kind = rt::OpKind::GatedRmsNorm;
            params = rt::RmsNormParams{o.getEps().convertToFloat()}.pack();
            ok = addIn(o.getX()) && addIn(o.getW()) && addIn(o.getZ());
            return success();
          })
          .Case([&](SsmConvOp o) -> LogicalResult {
            kind = rt::OpKind::SsmConv;
            auto it = kv_.find(o.getState());
            if (it == kv_.end())
              return o.emitError("plan emitter: ssm_conv's state is not a tpc.recurrent_state");
            params = rt::SsmConvParams{it->second}.pack();
            ok = addIn(o.getX()) && addIn(o.getW()) && addIn(o.getPos());
            return success();
          })
          .Case([&](DeltaNetOp o) -> LogicalResult {
            kind = rt::OpKind::DeltaNet;
            auto it = kv_.find(o.getState());
            if (it == kv_.end())
              return o.emitError("plan emitter: delta_net's state is not a tpc.recurrent_state");
            params = rt::DeltaNetParams{it->second, o.getScale().convertToFloat()}.pack();
            ok = addIn(o.getQ()) && addIn(o.getK()) && addIn(o.getV()) && addIn(o.getG()) && addIn(o.getBeta()) &&
                 addIn(o.getPos());
            return success();
          })
          .Case([&](WeightedRmsNormOp o) -> LogicalResult {
            kind = rt::OpKind::RmsNorm;
            params = rt::RmsNormParams{o.getEps().convertToFloat()}.pack();
            ok = addIn(o.getX()) && addIn(o.getWeight());
            return success();
          })
          .Case([&](MatmulOp o) -> LogicalResult {
            kind = rt::OpKind::Matmul;
            ok = addIn(o.getX()) && addIn(o.getW());
            // Every device computes this same product: say so, so that devices sharing memory may split
            // its rows and gather instead (the CPU backend at prefill).
            auto whole = [&](Value v) { return !splitOf(v) || splitOf(v).isMirrored(); };
            if (numDevices(m_) > 1 && whole(o.getW()) && whole(o.getResult()))
              params = rt::MatmulParams{true}.pack();
            return success();
          })
          .Case([&](MulMatIdOp o) -> LogicalResult {
            kind = rt::OpKind::MulMatId;
            ok = addIn(o.getX()) && addIn(o.getW()) && addIn(o.getIds());
            // Expert parallel: this device holds experts [offset, offset + local experts); rows routed
            // elsewhere are zeros here (the result is routed, summed by the combine's all-reduce).
            if (StateAttr w = splitOf(o.getW()); w && w.isSplit() && w.getAxis() == 0)
              params = rt::MulMatIdParams{localOffset(w)}.pack();
            return success();
          })
          .Case([&](AddIdOp o) -> LogicalResult {
            kind = rt::OpKind::AddId;
            ok = addIn(o.getX()) && addIn(o.getBias()) && addIn(o.getIds());
            // Whole experts: this device holds the bias rows of experts [offset, offset + local rows).
            if (StateAttr b = splitOf(o.getBias()); b && b.isSplit() && b.getAxis() == 0)
              params = rt::AddIdParams{localOffset(b)}.pack();
            return success();
          })
          .Case<AddOp, MulOp, DivOp>([&](auto o) -> LogicalResult {
            kind = isa<AddOp>(op) ? rt::OpKind::Add : isa<MulOp>(op) ? rt::OpKind::Mul : rt::OpKind::Div;
            ok = addIn(o.getLhs()) && addIn(o.getRhs());
            return success();
          })
          .Case([&](ScaleOp o) -> LogicalResult {
            kind = rt::OpKind::Scale;
            params = rt::ScaleParams{o.getValue().convertToFloat()}.pack();
            ok = addIn(o.getX());
            return success();
          })
          .Case([&](UnaryOp o) -> LogicalResult {
            kind = rt::OpKind::Unary;
            params = rt::UnaryParams{rt::UnaryFn(o.getFn())}.pack(); // tpc.unary's order is the runtime's
            ok = addIn(o.getX());
            return success();
          })
          .Case([&](GluOp o) -> LogicalResult {
            kind = rt::OpKind::Glu;
            params = rt::GluParams{rt::UnaryFn(gluFn(o.getFn()))}.pack();
            ok = addIn(o.getGate()) && (!o.getUp() || addIn(o.getUp()));
            return success();
          })
          .Case([&](SoftmaxOp o) -> LogicalResult {
            kind = rt::OpKind::Softmax;
            ok = addIn(o.getX());
            return success();
          })
          .Case([&](TopKOp o) -> LogicalResult {
            kind = rt::OpKind::TopK;
            params = rt::TopKParams{int64_t(o.getK())}.pack();
            ok = addIn(o.getX());
            return success();
          })
          .Case([&](SumOp o) -> LogicalResult {
            kind = rt::OpKind::Sum;
            params = rt::SumParams{int64_t(o.getAxis()), o.getKeepDim()}.pack();
            ok = addIn(o.getX());
            return success();
          })
          .Case([&](ReshapeOp o) -> LogicalResult {
            kind = rt::OpKind::Reshape; // of a weight or input: a copy with the new shape
            ok = addIn(o.getX());
            return success();
          })
          .Case([&](PermuteOp o) -> LogicalResult {
            kind = rt::OpKind::Permute;
            params = rt::PermuteParams{{o.getPerm().begin(), o.getPerm().end()}}.pack();
            ok = addIn(o.getX());
            return success();
          })
          .Case([&](ViewOp o) -> LogicalResult {
            kind = rt::OpKind::View;
            StateAttr s = splitOf(o.getX());
            int64_t offset = o.getOffset(), size = o.getSize();
            if (s && s.isSplit() && s.getAxis() == int64_t(o.getAxis())) {
              // Whole segments of a segmented split (the split rules allow no other view): this device's
              // part of each segment is sizes[d] / segments, so the segments before the view's first one
              // take that many local elements each.
              const int64_t segLen = o.getX().getType().getDimSize(o.getAxis()) / s.getSegments();
              const int64_t part = s.getSizes()[device_] / s.getSegments();
              if (s.getSegments() == 1 || offset % segLen || size % segLen)
                return o.emitError("plan emitter: a view along the split axis of its operand that is not "
                                   "whole segments of it");
              offset = offset / segLen * part;
              size = size / segLen * part;
            }
            params = rt::NarrowParams{int64_t(o.getAxis()), offset, size}.pack();
            ok = addIn(o.getX());
            return success();
          })
          .Case([&](ConcatOp o) -> LogicalResult {
            kind = rt::OpKind::Concat;
            StateAttr s = splitOf(o.getResult());
            if (s && s.isSplit() && s.getAxis() == int64_t(o.getAxis()))
              return o.emitError(
                  "plan emitter: a concat along the split axis of its result is not supported");
            params = rt::AxisParams{int64_t(o.getAxis())}.pack();
            for (Value v : o.getInputs())
              ok = ok && addIn(v);
            return success();
          })
          .Case([&](RopeOp o) -> LogicalResult {
            kind = rt::OpKind::Rope;
            rt::RopeParams rp{o.getMode() == RopeMode::neox ? rt::RopeMode::Neox : rt::RopeMode::Normal,
                              int64_t(o.getNDims()), o.getBase().convertToFloat(), o.getFreqScale().convertToFloat()};
            rp.origCtx = int64_t(o.getOrigCtx());
            rp.extFactor = o.getExtFactor().convertToFloat();
            rp.attnFactor = o.getAttnFactor().convertToFloat();
            rp.betaFast = o.getBetaFast().convertToFloat();
            rp.betaSlow = o.getBetaSlow().convertToFloat();
            params = rp.pack();
            ok = addIn(o.getX()) && addIn(o.getPos()) && (!o.getFreqFactors() || addIn(o.getFreqFactors()));
            return success();
          })
          .Case([&](SoftcapOp o) -> LogicalResult {
            kind = rt::OpKind::Softcap;
            params = rt::SoftcapParams{o.getCap().convertToFloat()}.pack();
            ok = addIn(o.getX());
            return success();
          })
          .Case([&](AttentionOp o) -> LogicalResult {
            kind = rt::OpKind::Attention;
            auto it = kv_.find(o.getCache());
            if (it == kv_.end())
              return o.emitError("plan emitter: attention's cache is not a tpc.kv_cache");
            rt::AttentionParams ap{it->second, int64_t(o.getSlidingWindow()), o.getScale().convertToFloat(),
                                   o.getSoftcap().convertToFloat(), bool(o.getGate())};
            // K/V mirrored over more than one KV head (the devices outnumber them): this device's query
            // heads start at its offset in the split, and read KV head (first + h) / group.
            const int64_t hq = o.getQ().getType().getDimSize(1), hkv = o.getK().getType().getDimSize(1);
            StateAttr qs = splitOf(o.getQ()), ks = splitOf(o.getK());
            if (hkv > 1 && (!ks || ks.isMirrored()) && qs && qs.isSplit() && qs.getAxis() == 1) {
              ap.qHead0 = localOffset(qs);
              ap.group = hq / hkv;
            }
            params = ap.pack();
            ok = addIn(o.getQ()) && addIn(o.getK()) && addIn(o.getV()) && addIn(o.getPos()) &&
                 (!o.getSinks() || addIn(o.getSinks())) && (!o.getGate() || addIn(o.getGate()));
            return success();
          })
          .Case([&](ExpertCombineOp o) -> LogicalResult {
            kind = rt::OpKind::ExpertCombine;
            ok = addIn(o.getX());
            for (Value v : o.getMultipliers())
              ok = ok && addIn(v);
            return success();
          })
          .Case([&](AllReduceOp o) -> LogicalResult {
            kind = rt::OpKind::AllReduce;
            for (Value v : o.getInputs())
              ok = ok && addIn(v);
            return success();
          })
          .Case([&](AllReduceRmsNormOp o) -> LogicalResult {
            // Device 0 adds the residual to its addend, the devices sum, each normalizes (tpc-fuse-norms).
            kind = rt::OpKind::AllReduceRmsNorm;
            params = rt::AllReduceRmsNormParams{bool(o.getResidual()), bool(o.getWeight()),
                                                o.getEps().convertToFloat()}
                         .pack();
            ok = addIn(o.getX()) && (!o.getResidual() || addIn(o.getResidual())) &&
                 (!o.getWeight() || addIn(o.getWeight()));
            return success();
          })
          .Case([&](ReduceScatterOp o) -> LogicalResult {
            kind = rt::OpKind::ReduceScatter;
            StateAttr s = splitOf(o.getResult());
            if (s && s.getSegments() > 1)
              return o.emitError("plan emitter: reduce_scatter into a segmented split is not supported");
            params = rt::AxisParams{int64_t(o.getAxis())}.pack();
            ok = addIn(o.getX());
            return success();
          })
          .Case([&](AllGatherOp o) -> LogicalResult {
            kind = rt::OpKind::AllGather;
            StateAttr s = splitOf(o.getX());
            if (s && s.getSegments() > 1)
              return o.emitError("plan emitter: all_gather of a segmented split is not supported");
            params = rt::AxisParams{int64_t(o.getAxis())}.pack();
            ok = addIn(o.getX());
            return success();
          })
          .Case([&](SliceOp o) -> LogicalResult {
            kind = rt::OpKind::Slice;
            StateAttr s = splitOf(o.getResult());
            if (!s || !s.isSplit())
              return o.emitError("plan emitter: slice result must be split");
            if (s.getSegments() > 1)
              return o.emitError("plan emitter: slice into a segmented split is not supported");
            params = rt::NarrowParams{int64_t(o.getAxis()), localOffset(s), s.getSizes()[device_]}.pack();
            ok = addIn(o.getX());
            return success();
          })
          .Case([&](BackendCopyOp o) -> LogicalResult {
            kind = rt::OpKind::Copy;
            ok = addIn(o.getX());
            return success();
          })
          .Default([&](Operation *o) -> LogicalResult {
            return o->emitError() << "plan emitter: no plan step for '" << o->getName() << "'";
          });
  if (failed(res) || !ok)
    return failure();
  FailureOr<rt::Placement> where = stepPlacement(op);
  if (failed(where))
    return failure();
  b_.step(kind, std::move(in), std::move(out), params.ints, params.floats, stepName(op), *where);
  return success();
}

} // namespace

FailureOr<rt::Plan> emitPlan(ModuleOp module, const ::tpc::gguf::GGUFFile &file, const EmitOptions &options) {
  auto fn = module.lookupSymbol<func::FuncOp>("forward");
  if (!fn || !fn.getBody().hasOneBlock())
    return module.emitError("plan emitter: expected one func @forward with one block");
  auto intAttr = [&](StringRef name) -> int64_t {
    auto a = module->getAttrOfType<IntegerAttr>(name);
    return a ? a.getInt() : 0;
  };
  auto activation = module->getAttrOfType<DenseI64ArrayAttr>("tpc.activation_bytes");
  auto hostActivation = module->getAttrOfType<DenseI64ArrayAttr>("tpc.host_activation_bytes");
  const int64_t n = numDevices(module), maxBatch = intAttr("tpc.max_batch");
  if (!activation || int64_t(activation.size()) != n || !hostActivation ||
      int64_t(hostActivation.size()) != n || maxBatch < 1)
    return module.emitError("plan emitter: no tpc.activation_bytes / tpc.host_activation_bytes / "
                            "tpc.max_batch for every device (run tpc-plan-memory first)");
  rt::Plan plan;
  if (failed(fillPlanSource(module, file, options, plan)))
    return failure();
  plan.model.maxBatch = maxBatch;
  FailureOr<llvm::DenseSet<Value>> rowsDim = rowsDimValues(fn);
  if (failed(rowsDim))
    return failure();
  if (fn.getNumArguments() == 3) {
    plan.model.maxOutputRows = intAttr("tpc.max_output_rows");
    if (plan.model.maxOutputRows < 1)
      return module.emitError("plan emitter: no tpc.max_output_rows (run tpc-plan-memory first)");
  }
  DenseMap<Operation *, int64_t> layers = attributeLayers(module);
  // A pipeline plan: the pipeline split the layers over n devices per stage; plan device s * n + j is
  // device j of stage s.
  const std::vector<int64_t> stageLayers = moduleStageLayers(module);
  const int64_t nStages = std::max<int64_t>(1, int64_t(stageLayers.size()));
  DenseMap<Operation *, int64_t> stages = assignStages(module, stageLayers);
  plan.stages = uint32_t(nStages);
  for (int64_t s = 0; s < nStages; ++s)
    for (int64_t d = 0; d < n; ++d) {
      plan.devices.emplace_back();
      rt::DevicePlan &dev = plan.devices.back();
      dev.kind = "cpu";
      dev.ordinal = int32_t(s * n + d);
      dev.activationBytes = uint64_t(activation[d]);
      dev.hostActivationBytes = uint64_t(hostActivation[d]);
      DeviceEmitter e(module, file, d, dev, layers, *rowsDim, options, s, n, stages);
      if (failed(e.run(fn, plan.model.nVocab)))
        return failure();
    }
  std::vector<std::string> problems = rt::validatePlan(plan);
  if (!problems.empty())
    return module.emitError() << "plan emitter produced an invalid plan (a tpc bug): " << problems.front()
                              << (problems.size() > 1 ? " (+" + std::to_string(problems.size() - 1) + " more)"
                                                      : std::string());
  return plan;
}

} // namespace mlir::tpc
