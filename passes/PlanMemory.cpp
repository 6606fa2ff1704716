//===- PlanMemory.cpp - tpc-plan-memory ---------------------------------------===//
//
// Liveness-based activation arena planning, per device. Walks @forward in program order; a value that
// owns arena bytes (LocalShapes.h: Storage::Buffer) is live from its defining op to its last use, where
// uses of its aliases (reshapes of it, results of ops pinned to another device) count as its uses. Slots
// are assigned first-fit from the free ranges left by dead values, so the arena is the peak of the live
// set (plus fragmentation), not the sum of all activations. An elementwise op whose first operand dies
// at it writes in place (inPlaceOperand). Sizes are local shapes for `max-batch` tokens and, for the values
// computed from tpc.select_rows (LocalShapes.h: rowsDimValues), `max-output-rows` rows, rounded up to 64
// bytes (kernels load whole cache lines; the plan requires element alignment only).
// Host-placed buffers (resultOnHost: --override-tensor, --no-kv-offload readers) are packed into a second
// arena of their own, so neither side's arena reserves room for the other's tensors: the device arena is
// what the GPU allocates, the host arena what is pinned in host memory.
//
// Writes, per op with tensor results, `tpc.offsets`: an ArrayAttr with one DenseI64ArrayAttr per result
// holding one byte offset per device (-1: no arena bytes there: weights, the returned logits, aliases of
// non-arena values; a host value's offset is in the host arena). On the module: `tpc.activation_bytes`,
// `tpc.host_activation_bytes`, `tpc.weight_bytes` (local slice bytes of every
// weight some op on that device reads, 64-byte aligned like the emitter lays them out),
// `tpc.kv_bytes_per_token` (f16 K and V of the local KV heads) as DenseI64ArrayAttr per device, and
// `tpc.max_batch`, `tpc.max_output_rows` (max-output-rows capped at max-batch).
//
// Assumes the states are final (it runs last) and that @forward is one block.
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "passes/DecisionLog.h"
#include "passes/LocalShapes.h"
#include "runtime/ggml/GGMLTypes.h"

#include "mlir/IR/Builders.h"

#include <map>

#define DEBUG_TYPE "tpc-plan-memory"

namespace mlir::tpc {
#define GEN_PASS_DEF_TPCPLANMEMORY
#include "passes/Passes.h.inc"

namespace {

constexpr int64_t kAlign = 64;
int64_t alignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// First-fit allocator over [0, inf): free ranges merged on release; `peak` is the arena size.
class Arena {
public:
  int64_t allocate(int64_t size) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < size)
        continue;
      int64_t off = it->first, rest = it->second - size;
      free_.erase(it);
      if (rest > 0)
        free_[off + size] = rest;
      return off;
    }
    // No hole fits: grow at the end, absorbing a free range that touches the end.
    int64_t off = peak_;
    if (!free_.empty()) {
      auto last = std::prev(free_.end());
      if (last->first + last->second == peak_) {
        off = last->first;
        free_.erase(last);
      }
    }
    peak_ = std::max(peak_, off + size);
    return off;
  }
  void release(int64_t off, int64_t size) {
    auto [it, ok] = free_.emplace(off, size);
    (void)ok;
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }
  int64_t peak() const { return peak_; }

private:
  std::map<int64_t, int64_t> free_; ///< offset -> size
  int64_t peak_ = 0;
};

/// Arena plan of one device: offset per value (-1: none, else in its side's arena) and each arena's peak.
struct DeviceMemory {
  DenseMap<Value, int64_t> offset;
  int64_t peak = 0, hostPeak = 0;
};

/// The value whose buffer `v` shares on `device` (itself for a buffer, null for no arena bytes).
Value bufferRoot(Value v, int64_t device) {
  while (true) {
    Storage s = valueStorage(v, device);
    if (s == Storage::Buffer)
      return v;
    if (s != Storage::Alias)
      return {};
    v = v.getDefiningOp()->getOperand(0);
  }
}

/// The buffer root an elementwise op may overwrite with its single result: the first operand of add, add_id,
/// mul, div (the lhs has the result's shape; the rhs may broadcast), scale, unary, softcap, rms_norm (weighted
/// too) and a two-operand glu. Null for every other op.
Value inPlaceOperand(Operation &op, int64_t device) {
  if (op.getNumResults() != 1 || op.getNumOperands() == 0 ||
      !isa<AddOp, AddIdOp, MulOp, DivOp, ScaleOp, UnaryOp, SoftcapOp, RmsNormOp, WeightedRmsNormOp, GluOp>(op))
    return {};
  if (auto glu = dyn_cast<GluOp>(op); glu && !glu.getUp())
    return {};
  Value in = op.getOperand(0);
  return valueStorage(in, device) == Storage::Buffer ? in : Value();
}

DeviceMemory planDevice(Block &body, int64_t device, int64_t maxBatch, int64_t maxRows,
                        const llvm::DenseSet<Value> &rowsDim, bool remarks) {
  DenseMap<Operation *, int64_t> index;
  for (Operation &op : body)
    index[&op] = index.size();
  // Last use of every buffer root, through its aliases.
  DenseMap<Value, int64_t> lastUse;
  for (Operation &op : body)
    for (Value r : op.getResults())
      if (Value root = bufferRoot(r, device)) {
        int64_t &last = lastUse[root];
        last = std::max(last, index[&op]);
        for (Operation *user : r.getUsers())
          if (Operation *top = body.findAncestorOpInBlock(*user))
            last = std::max(last, index[top]);
      }
  DeviceMemory mem;
  Arena deviceArena, hostArena;
  auto arenaOf = [&](Value root) -> Arena & {
    auto r = cast<OpResult>(root);
    return resultOnHost(r.getOwner(), r.getResultNumber()) ? hostArena : deviceArena;
  };
  DenseMap<Value, std::pair<int64_t, int64_t>> slot; ///< buffer root -> (offset, size)
  std::multimap<int64_t, Value> dying;               ///< last use -> buffer root
  for (Operation &op : body) {
    int64_t i = index[&op];
    // Values whose last reader came before this op are free; this op's operands are still live.
    while (!dying.empty() && dying.begin()->first < i) {
      auto [off, size] = slot.lookup(dying.begin()->second);
      arenaOf(dying.begin()->second).release(off, size);
      dying.erase(dying.begin());
    }
    for (Value r : op.getResults()) {
      if (!isa<RankedTensorType>(r.getType()))
        continue;
      Value root = bufferRoot(r, device);
      if (root != r) {
        mem.offset[r] = root ? mem.offset.lookup(root) : -1;
        continue;
      }
      int64_t size = alignUp(localBytes(planShape(r, device, rowsDim), maxBatch, maxRows));
      int64_t off = size ? -1 : 0;
      // In place: an elementwise op whose first operand dies here, has exactly this size and lives in the
      // same arena takes over its slot (the CPU kernels read each element, or each row, before writing it).
      if (Value in = inPlaceOperand(op, device); size && in && lastUse.lookup(in) == i &&
                                                 slot.lookup(in).second == size &&
                                                 &arenaOf(in) == &arenaOf(r)) {
        for (auto it = dying.lower_bound(i); it != dying.end() && it->first == i; ++it)
          if (it->second == in) {
            dying.erase(it);
            break;
          }
        off = slot.lookup(in).first;
        TPC_DECISION(remarks, &op, "writes in place over operand 0 on device " << device);
      } else if (size) {
        off = arenaOf(r).allocate(size);
      }
      mem.offset[r] = off;
      if (size) {
        slot[r] = {off, size};
        dying.emplace(lastUse.lookup(r), r);
      }
    }
  }
  mem.peak = deviceArena.peak();
  mem.hostPeak = hostArena.peak();
  return mem;
}

/// Local bytes of a weight on `device` as the emitter packs it (0 when no op on that device reads it).
int64_t weightBytes(WeightOp w, int64_t device) {
  if (llvm::none_of(w->getUsers(), [&](Operation *u) { return runsOn(u, device); }))
    return 0;
  SmallVector<int64_t> shape = localShape(w.getResult(), device);
  auto type = ::tpc::ggmlTypeFromName(w.getGgmlType().str());
  if (!type || shape.empty())
    return 0;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i)
    rows *= shape[i];
  std::optional<uint64_t> rb = ::tpc::ggmlRowBytes(*type, shape.back());
  return rb ? alignUp(rows * int64_t(*rb)) : 0;
}

struct PlanMemoryPass : impl::TpcPlanMemoryBase<PlanMemoryPass> {
  using TpcPlanMemoryBase::TpcPlanMemoryBase;

  void runOnOperation() override {
    ModuleOp m = getOperation();
    auto fn = m.lookupSymbol<func::FuncOp>("forward");
    if (!fn || !fn.getBody().hasOneBlock() || maxBatch < 1 || maxOutputRows < 1) {
      m.emitError(maxBatch < 1        ? "tpc-plan-memory: max-batch must be >= 1"
                  : maxOutputRows < 1 ? "tpc-plan-memory: max-output-rows must be >= 1"
                                      : "tpc-plan-memory: expected one func @forward with one block");
      return signalPassFailure();
    }
    FailureOr<llvm::DenseSet<Value>> rowsDim = rowsDimValues(fn);
    if (failed(rowsDim))
      return signalPassFailure();
    // A call never returns more rows than it has tokens.
    const int64_t maxRows = std::min(maxOutputRows.getValue(), maxBatch.getValue());
    const int64_t n = numDevices(m);
    SmallVector<DeviceMemory> mems;
    for (int64_t d = 0; d < n; ++d) {
      mems.push_back(planDevice(fn.getBody().front(), d, maxBatch, maxRows, *rowsDim, remarks));
      TPC_DECISION(remarks, m, "device " << d << ": " << mems.back().peak << " bytes of device activations, "
                                         << mems.back().hostPeak << " of host activations for "
                                         << static_cast<int64_t>(maxBatch) << " tokens, " << maxRows
                                         << " output rows");
    }
    annotate(fn, mems);
    SmallVector<int64_t> act, hostAct, weights(n, 0), kv(n, 0), recurrent(n, 0);
    for (const DeviceMemory &mem : mems) {
      act.push_back(mem.peak);
      hostAct.push_back(mem.hostPeak);
    }
    fn.walk([&](Operation *op) {
      for (int64_t d = 0; d < n; ++d) {
        if (auto w = dyn_cast<WeightOp>(op))
          weights[d] += weightBytes(w, d);
        if (auto c = dyn_cast<KvCacheOp>(op)) {
          StateAttr s = getValueState(c.getResult());
          int64_t heads = s && s.isSplit() ? s.getSizes()[d] : c.getNHeadKv();
          kv[d] += heads * (c.getHeadDimK() + c.getHeadDimV()) * 2; // f16 K and V
        }
        if (auto r = dyn_cast<RecurrentStateOp>(op)) {
          // f32 conv and delta-rule states of the device's key heads (and their tiled value heads).
          RecurrentStateType t = r.getType();
          StateAttr s = getValueState(r.getResult());
          int64_t hk = s && s.isSplit() ? s.getSizes()[d] : t.getNKeyHeads();
          int64_t hv = hk * (t.getNValueHeads() / t.getNKeyHeads());
          int64_t channels = hk * 2 * t.getHeadDimK() + hv * t.getHeadDimV();
          recurrent[d] += 4 * ((t.getConvKernel() - 1) * channels + hv * t.getHeadDimK() * t.getHeadDimV());
        }
      }
    });
    Builder b(m.getContext());
    m->setAttr("tpc.activation_bytes", b.getDenseI64ArrayAttr(act));
    m->setAttr("tpc.host_activation_bytes", b.getDenseI64ArrayAttr(hostAct));
    m->setAttr("tpc.weight_bytes", b.getDenseI64ArrayAttr(weights));
    m->setAttr("tpc.kv_bytes_per_token", b.getDenseI64ArrayAttr(kv));
    if (llvm::any_of(recurrent, [](int64_t x) { return x > 0; }))
      m->setAttr("tpc.recurrent_bytes_per_sequence", b.getDenseI64ArrayAttr(recurrent));
    m->setAttr("tpc.max_batch", b.getI64IntegerAttr(maxBatch));
    m->setAttr("tpc.max_output_rows", b.getI64IntegerAttr(maxRows));
  }

  /// `tpc.offsets` on every op with tensor results.
  void annotate(func::FuncOp fn, ArrayRef<DeviceMemory> mems) {
    Builder b(fn.getContext());
    for (Operation &op : fn.getBody().front()) {
      if (isa<WeightOp>(op) || op.getNumResults() == 0 ||
          llvm::none_of(op.getResultTypes(), [](Type t) { return isa<RankedTensorType>(t); }))
        continue;
      SmallVector<Attribute> perResult;
      for (Value r : op.getResults()) {
        SmallVector<int64_t> offs;
        for (const DeviceMemory &mem : mems) {
          auto it = mem.offset.find(r);
          offs.push_back(it == mem.offset.end() ? -1 : it->second);
        }
        perResult.push_back(b.getDenseI64ArrayAttr(offs));
      }
      op.setAttr("tpc.offsets", b.getArrayAttr(perResult));
    }
  }
};

} // namespace
} // namespace mlir::tpc
