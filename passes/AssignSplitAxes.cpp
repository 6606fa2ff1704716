//===- AssignSplitAxes.cpp - tpc-assign-split-axes ---------------------------===//
//
// Gives every value of the forward function a split state, from op structure alone:
//
//  1. Seeds. Each attention op, GLU, Gated DeltaNet output norm (the gated_rms_norm of a delta_net's
//     result, which also reads the z projection: its units are the delta rule's key heads), the final projection (a matmul whose result the function
//     returns) and a large lookup table (the token embedding, split by rows: the lookup is partial) starts a
//     *group*: a number of indivisible units (KV heads, Q heads for MQA, GLU intermediate elements, output
//     rows, table rows) that devices share. The seed says which state each of its
//     operands and its result need in terms of the group's per-device unit counts.
//  2. Backward. A wanted state travels to a producer through `requirements` while every consumer of the
//     value wants that same layout (a shared activation such as the residual stream stays mirrored; the
//     collectives pass slices it for free). Weights take any state; a weight with several consumers was split
//     into one op per use first, so each consumer decides for its own copy.
//  3. Forward. Every value not reached is computed by `transfer` in program order. A partial operand is
//     read as mirrored (the collectives pass reduces it there and then sinks the reduction), so partial
//     states only arise where an op creates them (a matmul over a split reduction axis).
//  4. Granules. A weight split along its rows' reduction axis must be cut on quant-block boundaries; when a
//     group's sizes violate that, the group's unit multiple grows (lcm) and steps 2-3 rerun.
//
// Per-device unit counts come from the tensor-split ratios, in chunks of the group's multiple, by largest
// remainder with a credit carried from group to group of the same kind (the attention of every layer, its
// FFN, ...) so rounding does not favour one device throughout.
//===----------------------------------------------------------------------===//
#include "passes/DecisionLog.h"
#include "passes/MoeSplitCost.h"
#include "passes/Passes.h"
#include "passes/StateUtils.h"

#include "runtime/ggml/GGMLTypes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <numeric>

#define DEBUG_TYPE "tpc-assign-split-axes"

namespace mlir::tpc {
#define GEN_PASS_DEF_TPCASSIGNSPLITAXES
#include "passes/Passes.h.inc"

namespace {

/// What a seed asks for, per operand/result, given its group's per-device units.
struct Group {
  Operation *seed = nullptr;
  int64_t units = 0;    ///< indivisible units the devices share
  int64_t multiple = 1; ///< per-device unit counts are multiples of this (quant blocks)
  SmallVector<int64_t> perDevice;
  /// The group whose per-device units this one takes (-1: its own). A tied table's output projection
  /// follows its lookup, so both read the same rows on every device and the emitter loads them once.
  int follows = -1;
  /// A MoE GLU whose units are whole experts (expert parallel) rather than intermediate elements.
  bool experts = false;
  /// A MoE GLU: its experts and the experts each token selects (for the auto choice).
  int64_t moeExperts = 0, moeUsed = 0;
  /// A MoE GLU left intermediate by the auto choice: how much slower whole experts would be at decode
  /// (x the balanced time; infinite where unpriced), which orders the switches `balanceWeights` makes.
  double moePenalty = std::numeric_limits<double>::infinity();
};

/// How far (as a fraction of its share) a device's split weights may stray from its tensor-split ratio
/// before the auto MoE choice gives up decode time for memory: issue 16's goal for every model.
constexpr double kWeightShareTolerance = 0.05;

/// How MoE layers split (the `moe-split` option).
enum class MoeSplit { intermediate, expert, automatic };

class Assigner {
public:
  Assigner(func::FuncOp fn, int64_t devices, ArrayRef<double> ratios, MoeSplit moeSplit,
           const RoutingProfile &profile, bool remarks)
      : fn_(fn), ctx_(fn.getContext()), n_(devices), ratios_(ratios.begin(), ratios.end()),
        moeSplit_(moeSplit), profile_(profile), remarks_(remarks) {}

  LogicalResult run() {
    if (n_ > 1)
      collectSeeds();
    if (failed(settle()))
      return failure();
    // Auto: the MoE layers whose intermediate split costs more than whole experts switch, then settle again.
    if (moeSplit_ == MoeSplit::automatic && chooseMoeSplits() && failed(settle()))
      return failure();
    if (moeSplit_ == MoeSplit::automatic && failed(balanceWeights()))
      return failure();
    for (const Group &g : groups_)
      TPC_DECISION(remarks_, g.seed,
                   "seeds a group of " << g.units << " " << (g.experts ? "experts (expert parallel)" : unitName(g.seed))
                                       << ": per device " << listString(g.perDevice)
                                       << (g.multiple > 1 ? " (multiples of " + std::to_string(g.multiple) + ")"
                                                          : std::string()));
    write();
    return success();
  }

private:
  /// Steps 2-4 to their fixpoint for the current groups.
  LogicalResult settle() {
    // Granule fixpoint: each round can only grow a group's multiple, and multiples divide the units.
    for (int round = 0;; ++round) {
      distribute();
      st_.clear();
      groupOf_.clear();
      pending_.clear();
      for (auto [i, g] : llvm::enumerate(groups_))
        applySeed(static_cast<int>(i));
      forward();
      if (!fixGranules())
        break;
      if (round == 8)
        return fn_.emitError("tpc-assign-split-axes: quant-block granules did not settle (a tpc bug)");
    }
    return success();
  }

  // ---- seeds ----------------------------------------------------------------------------------------

  /// K/V and the cache stay whole on every device: one KV head (MQA), or fewer KV heads than devices (a
  /// split by KV heads would leave devices without attention).
  bool mirrorsKv(AttentionOp att) const {
    int64_t hkv = att.getK().getType().getDimSize(1);
    return hkv == 1 || hkv < n_;
  }

  /// What a group's units are, for the log.
  const char *unitName(Operation *seed) const {
    if (auto att = dyn_cast<AttentionOp>(seed))
      return mirrorsKv(att) ? "query heads (K/V mirrored: one KV head, or fewer than the devices)" : "KV heads";
    if (isa<GluOp>(seed))
      return "GLU elements";
    if (isa<GatedRmsNormOp>(seed))
      return "key heads (with their tiled value heads)";
    return isa<GetRowsOp>(seed) ? "table rows (vocabulary parallel)" : "output rows (column parallel logits)";
  }

  void collectSeeds() {
    // Uses of a table that a tied embedding shares (lookup and output projection), by GGUF name.
    llvm::StringMap<SmallVector<Operation *, 2>> tableUses;
    fn_.walk([&](Operation *op) {
      if (auto att = dyn_cast<AttentionOp>(op)) {
        int64_t hq = att.getQ().getType().getDimSize(1), hkv = att.getK().getType().getDimSize(1);
        // MQA (one KV head serves every Q head), or more devices than KV heads (Qwen3.5's 2): K/V stay
        // whole and the Q heads split one by one, so every device has a share of the attention.
        groups_.push_back({op, mirrorsKv(att) ? hq : hkv});
      } else if (auto gn = dyn_cast<GatedRmsNormOp>(op)) {
        // The units of a linear-attention layer: key heads, each with its r tiled value heads.
        if (auto dn = gn.getX().getDefiningOp<DeltaNetOp>())
          groups_.push_back({op, dn.getState().getType().getNKeyHeads()});
      } else if (auto glu = dyn_cast<GluOp>(op)) {
        // The experts' gate projection, possibly through its per-expert bias (gpt-oss).
        Value gate = glu.getGate();
        if (auto bias = gate.getDefiningOp<AddIdOp>())
          gate = bias.getX();
        auto experts = gate.getDefiningOp<MulMatIdOp>();
        Group g{op, glu.getType().getDimSize(glu.getType().getRank() - 1)};
        if (experts) {
          g.moeExperts = experts.getW().getType().getDimSize(0);
          g.moeUsed = experts.getIds().getType().getDimSize(1);
          if (moeSplit_ == MoeSplit::expert)
            toExperts(g);
        }
        groups_.push_back(g);
      } else if (auto mm = dyn_cast<MatmulOp>(op)) {
        if (returnsLogits(mm))
          if (auto w = mm.getW().getDefiningOp<WeightOp>())
            tableUses[w.getName()].push_back(op);
        if (isFinalProjection(mm))
          groups_.push_back({op, mm.getType().getDimSize(mm.getType().getRank() - 1)});
      } else if (auto gr = dyn_cast<GetRowsOp>(op)) {
        if (auto w = gr.getTable().getDefiningOp<WeightOp>(); w && w.getType().getRank() == 2)
          tableUses[w.getName()].push_back(op);
        if (isVocabParallel(gr))
          groups_.push_back({op, gr.getTable().getType().getDimSize(0)});
      }
    });
    for (auto &entry : tableUses)
      tieTable(entry.getValue());
  }

  /// A table read by a lookup and by the output projection (tied embeddings) takes one row split for
  /// both: the vocabulary-parallel lookup and the column-parallel projection both hold rows
  /// [offset_d, offset_d + rows_d) of the one table, so each device loads one slice that both steps read.
  /// Where only one use would split on its own (a small table below the lookup's 64 rows per device, or
  /// a projection whose rows are narrower than 16 floats), the other follows it anyway: the split costs
  /// that use one collective per call (an all-reduce of the looked-up rows, or the logits gather), while
  /// a whole copy beside a slice would load the same bytes twice on every device.
  void tieTable(ArrayRef<Operation *> uses) {
    if (uses.size() < 2 || uses.size() > 2 || !isa<GetRowsOp>(uses[0]) || !isa<MatmulOp>(uses[1]))
      return;
    int lookup = groupOfSeed(uses[0]), proj = groupOfSeed(uses[1]);
    if (lookup < 0 && proj < 0)
      return;
    int64_t rows = cast<GetRowsOp>(uses[0]).getTable().getType().getDimSize(0);
    if (cast<MatmulOp>(uses[1]).getType().getDimSize(1) != rows)
      return;
    if (lookup < 0) {
      lookup = static_cast<int>(groups_.size());
      groups_.push_back({uses[0], rows});
    }
    if (proj < 0) {
      proj = static_cast<int>(groups_.size());
      groups_.push_back({uses[1], rows});
    }
    // Groups are distributed in program order: the later use (the projection) follows the earlier one.
    groups_[std::max(lookup, proj)].follows = std::min(lookup, proj);
  }

  static void toExperts(Group &g) {
    g.units = g.moeExperts;
    g.multiple = 1;
    g.experts = true;
  }

  /// The auto MoE choice, per layer, by the expected time of the layer's expert matmuls at decode (one token:
  /// the devices wait for each other at the block's all-reduce, so the busiest device sets it), in units of
  /// the balanced time. Both layouts read the same expert bytes in total, and the matmul kernels run either
  /// shape at their row rate, so the cost is the busiest device's share of the routed rows over its ratio:
  ///  - intermediate: every device computes its rows of each of the `used` experts: u_d / F, as rounded to
  ///    quant blocks (the granule waste: 768 = 3 Q4_K blocks over 4 devices leaves 1/3, 1/3, 1/3, 0);
  ///  - expert: device d computes the selected experts it holds: E[max_d X_d / (used * share_d)], X the
  ///    counts of a token's `used` experts landing on each device under uniform routing (every expert
  ///    equally likely), or the layer's routing profile (each expert as likely as its share of the profiled
  ///    tokens); a fixed-seed sample of 4096 tokens.
  /// The layout with the lower cost wins (ties: intermediate). True when a group switched.
  bool chooseMoeSplits() {
    const std::vector<double> share = shares();
    bool changed = false;
    for (Group &g : groups_) {
      if (!g.moeExperts || g.experts || g.moeUsed < 1)
        continue;
      double inter = 0;
      for (int64_t d = 0; d < n_; ++d)
        if (share[d] > 0)
          inter = std::max(inter, double(g.perDevice[d]) / double(g.units) / share[d]);
      auto layer = g.seed->getAttrOfType<IntegerAttr>(TpcDialect::kLayerAttrName);
      auto prof = layer ? profile_.find(layer.getInt()) : profile_.end();
      bool profiled = prof != profile_.end() && int64_t(prof->second.size()) == g.moeExperts;
      std::optional<double> expert =
          wholeExpertCost(share, g.moeExperts, g.moeUsed, profiled ? prof->second : std::vector<double>());
      if (!expert)
        continue;
      g.moePenalty = *expert - inter;
      bool toExpert = *expert < inter;
      TPC_DECISION(remarks_, g.seed,
                   "MoE split" << (profiled ? " (routing profile)" : "") << ": intermediate costs "
                               << llvm::formatv("{0:F3}", inter).str() << ", whole experts "
                               << llvm::formatv("{0:F3}", *expert).str()
                               << " (x the balanced time): " << (toExpert ? "expert" : "intermediate"));
      if (toExpert) {
        toExperts(g);
        changed = true;
      }
    }
    return changed;
  }

  /// Memory is a constraint, not just time. The intermediate split cuts each expert in quant blocks (768 =
  /// 3 Q4_K blocks), and the credit evens the blocks out over many layers but not over a few: qwen3-30b-a3b
  /// with 2 layers at 1,1,1,1 gave the devices 1.2, 1.2, 0.77, 0.82 of their shares. While some device's
  /// split weights miss its share by more than kWeightShareTolerance, the intermediate MoE layer whose whole
  /// experts cost the least decode time switches to them (whole experts follow the ratios to one expert).
  /// A miss the MoE layers do not cause (a dense FFN's blocks) is not worth decode time: when switching
  /// every one of them would not bring the shares closer, none switches.
  LogicalResult balanceWeights() {
    double worst = worstShareMiss();
    SmallVector<Group *> candidates;
    for (Group &g : groups_)
      if (g.moeExperts && !g.experts)
        candidates.push_back(&g);
    if (worst <= kWeightShareTolerance || candidates.empty())
      return success();
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](Group *a, Group *b) { return a->moePenalty < b->moePenalty; });
    std::vector<Group> before;
    for (Group *g : candidates) {
      before.push_back(*g);
      toExperts(*g);
    }
    if (failed(settle()))
      return failure();
    double allExperts = worstShareMiss();
    for (auto [g, b] : llvm::zip(candidates, before))
      *g = b;
    TPC_DECISION(remarks_, candidates.front()->seed,
                 "MoE split: the split weights miss a device's share by "
                     << llvm::formatv("{0:F1}", 100 * worst).str() << "%, with every MoE layer in whole experts by "
                     << llvm::formatv("{0:F1}", 100 * allExperts).str() << "%: "
                     << (allExperts < worst ? "switching layers, cheapest at decode first" : "keep the layers"));
    if (allExperts >= worst)
      return settle();
    for (Group *g : candidates) {
      toExperts(*g);
      if (failed(settle()))
        return failure();
      double after = worstShareMiss();
      TPC_DECISION(remarks_, g->seed,
                   "MoE split: whole experts (" << llvm::formatv("{0:F3}", g->moePenalty).str()
                                                << " x the balanced time more at decode): the shares miss by "
                                                << llvm::formatv("{0:F1}", 100 * after).str() << "%");
      if (after <= kWeightShareTolerance)
        break;
    }
    return success();
  }

  /// How far the device furthest from its share of the split weights is from it (0: all exact).
  double worstShareMiss() {
    const std::vector<double> share = shares();
    std::vector<double> bytes = splitWeightBytes();
    double total = std::accumulate(bytes.begin(), bytes.end(), 0.0), worst = 0;
    for (int64_t d = 0; d < n_ && total > 0; ++d)
      if (share[d] > 0)
        worst = std::max(worst, std::abs(bytes[d] / total / share[d] - 1));
    return worst;
  }

  /// Each device's bytes of the split weights as the states stand (weights every device holds whole are
  /// left out, a GGUF tensor read by two ops is counted once, as the emitter loads it).
  std::vector<double> splitWeightBytes() {
    std::vector<double> bytes(n_);
    llvm::StringSet<> seen;
    fn_.walk([&](WeightOp w) {
      StateAttr s = lookup(w.getResult());
      auto type = ::tpc::ggmlTypeFromName(w.getGgmlType().str());
      if (!s || !s.isSplit() || !type || !seen.insert(w.getName()).second)
        return;
      RankedTensorType t = w.getType();
      std::optional<uint64_t> row = ::tpc::ggmlRowBytes(*type, t.getDimSize(t.getRank() - 1));
      if (!row)
        return;
      double whole = double(*row) * double(t.getNumElements() / t.getDimSize(t.getRank() - 1));
      for (auto [d, size] : llvm::enumerate(s.getSizes()))
        bytes[d] += whole * double(size) / double(t.getDimSize(s.getAxis()));
    });
    return bytes;
  }

  int groupOfSeed(Operation *op) const {
    for (auto [i, g] : llvm::enumerate(groups_))
      if (g.seed == op)
        return static_cast<int>(i);
    return -1;
  }

  /// True when the function returns `mm`'s result, possibly through elementwise ops that keep a split of
  /// the vocabulary axis (gemma's final soft-cap, a scale): the gather can wait until the return.
  static bool returnsLogits(MatmulOp mm) {
    Operation *cur = mm;
    while (cur->hasOneUse() && isa<SoftcapOp, ScaleOp, UnaryOp>(*cur->user_begin()))
      cur = *cur->user_begin();
    return cur->hasOneUse() && isa<func::ReturnOp>(*cur->user_begin());
  }

  /// The last projection (logits, possibly soft-capped): column-parallel when holding 1/N of its weight saves
  /// more than the gather of its outputs costs. A gathered byte crosses a link ~16x slower than a weight byte
  /// streams from memory, so split when a weight row is larger than 16 output floats' worth.
  bool isFinalProjection(MatmulOp mm) {
    auto w = mm.getW().getDefiningOp<WeightOp>();
    if (!w || !returnsLogits(mm))
      return false;
    auto wt = w.getType();
    auto type = ::tpc::ggmlTypeFromName(w.getGgmlType().str());
    if (!type)
      return false;
    auto rowBytes = ::tpc::ggmlRowBytes(*type, wt.getDimSize(wt.getRank() - 1));
    return rowBytes && *rowBytes > 16 * 4;
  }

  /// A lookup table (the token embedding) split by rows: each device holds 1/N of it and the lookup
  /// becomes partial, which costs one all-reduce of the looked-up rows per call. Worth it when every device
  /// still holds at least 64 rows: below that the table is small and the reduce is not.
  bool isVocabParallel(GetRowsOp gr) {
    auto w = gr.getTable().getDefiningOp<WeightOp>();
    return w && w.getType().getRank() == 2 && w.getType().getDimSize(0) >= 64 * n_;
  }

  /// A split of `axis` giving device d perDevice[d] units of `perUnit` elements (per segment). The granule
  /// is the group's indivisible chunk: `multiple` units.
  StateAttr split(int g, int64_t axis, int64_t perUnit, int64_t segments = 1) {
    SmallVector<int64_t> sizes;
    for (int64_t u : groups_[g].perDevice)
      sizes.push_back(u * perUnit * segments);
    return StateAttr::getSplit(ctx_, axis, sizes, perUnit * groups_[g].multiple, segments);
  }

  void applySeed(int g) {
    Operation *op = groups_[g].seed;
    StateAttr m = StateAttr::getMirrored(ctx_);
    if (auto att = dyn_cast<AttentionOp>(op)) {
      int64_t hq = att.getQ().getType().getDimSize(1), hkv = att.getK().getType().getDimSize(1);
      bool mqa = mirrorsKv(att);
      int64_t group = mqa ? 1 : hq / hkv;
      StateAttr q = split(g, 1, group);
      StateAttr kv = mqa ? m : split(g, 1, 1);
      StateAttr cache = mqa ? m : split(g, 0, 1);
      setResult(att.getResult(), q, g);
      want(att.getQ(), q, g);
      want(att.getK(), kv, g);
      want(att.getV(), kv, g);
      want(att.getCache(), cache, g);
      if (att.getSinks())
        want(att.getSinks(), split(g, 0, group), g);
      if (att.getGate()) // the output gate has the result's layout
        want(att.getGate(), q, g);
      return;
    }
    if (auto gn = dyn_cast<GatedRmsNormOp>(op)) {
      // Value heads in r segments of Hk (tiled), per device r x its key heads; z alike, w whole.
      auto dn = gn.getX().getDefiningOp<DeltaNetOp>();
      RecurrentStateType t = dn.getState().getType();
      StateAttr heads = split(g, 1, 1, t.getNValueHeads() / t.getNKeyHeads());
      setResult(gn.getResult(), heads, g);
      want(gn.getX(), heads, g);
      want(gn.getZ(), heads, g);
      return;
    }
    if (auto glu = dyn_cast<GluOp>(op); glu && groups_[g].experts) {
      // Whole experts: the gate/up expert weights split on the expert axis (mul_mat_id's rules), the rows
      // routed to each device's experts flow on to the down projection, whose weight follows forward.
      StateAttr routed = StateAttr::getRouted(ctx_, groups_[g].perDevice);
      setResult(glu.getResult(), routed, g);
      want(glu.getGate(), routed, g);
      if (glu.getUp())
        want(glu.getUp(), routed, g);
      return;
    }
    if (auto glu = dyn_cast<GluOp>(op)) {
      int64_t last = glu.getType().getRank() - 1;
      StateAttr out = split(g, last, 1);
      setResult(glu.getResult(), out, g);
      if (glu.getUp()) {
        want(glu.getGate(), out, g);
        want(glu.getUp(), out, g);
      } else {
        // [gate | up] in one operand: each device takes the same rows of both halves.
        want(glu.getGate(), split(g, last, 1, 2), g);
      }
      return;
    }
    if (auto gr = dyn_cast<GetRowsOp>(op)) {
      setResult(gr.getResult(), StateAttr::getPartial(ctx_), g);
      want(gr.getTable(), split(g, 0, 1), g);
      return;
    }
    auto mm = cast<MatmulOp>(op);
    setResult(mm.getResult(), split(g, mm.getType().getRank() - 1, 1), g);
    want(mm.getW(), split(g, 0, 1), g);
  }

  void setResult(Value v, StateAttr s, int g) {
    if (st_.count(v))
      return;
    st_[v] = s;
    groupOf_[v] = g;
  }

  // ---- backward ------------------------------------------------------------------------------------

  /// `v` should have state `s` for the consumer at hand. Taken when `v` is a weight or cache, or an
  /// activation only this consumer reads; then its producer is asked what it needs in turn.
  void want(Value v, StateAttr s, int g) {
    if (!s || s.isMirrored() || st_.count(v))
      return;
    Operation *def = v.getDefiningOp();
    if (!def)
      return; // a function argument stays whole; a slice makes the part
    bool leaf = isa<WeightOp>(def) || isCacheOp(def);
    if (!leaf && def->getNumResults() != 1)
      return;
    if (!leaf && !v.hasOneUse()) {
      // Shared: taken only once every consumer has asked for the same layout (K and V read from one
      // projection). Where they disagree, or one never asks (the residual stream), it stays whole and each
      // splitting consumer gets a slice, which moves no data, where a split value would need a gather.
      SmallVector<StateAttr> &asked = pending_[v];
      asked.push_back(s);
      if (asked.size() < static_cast<size_t>(std::distance(v.use_begin(), v.use_end())) ||
          llvm::any_of(asked, [&](StateAttr a) { return !sameLayout(a, s); }))
        return;
    }
    auto iface = dyn_cast<SplitStateInterface>(def);
    if (!iface)
      return;
    SmallVector<StateAttr> known;
    for (Value o : def->getOperands())
      known.push_back(lookup(o));
    FailureOr<SmallVector<StateAttr>> req = iface.requirements({s}, known);
    if (failed(req))
      return; // the producer cannot make it: a collective will
    st_[v] = s;
    groupOf_[v] = g;
    for (auto [o, r] : llvm::zip(def->getOperands(), *req))
      want(o, r, g);
  }

  /// The state known for `v`: assigned, mirrored for arguments, null for an unassigned weight/cache.
  StateAttr lookup(Value v) const {
    if (auto it = st_.find(v); it != st_.end())
      return it->second;
    return v.getDefiningOp() ? StateAttr() : StateAttr::getMirrored(ctx_);
  }

  // ---- forward -------------------------------------------------------------------------------------

  void forward() {
    StateAttr m = StateAttr::getMirrored(ctx_);
    fn_.getBody().walk([&](Operation *op) {
      auto iface = dyn_cast<SplitStateInterface>(op);
      if (!iface || isa<WeightOp>(op) || isCacheOp(op))
        return;
      SmallVector<StateAttr> in;
      int group = -1;
      for (Value o : op->getOperands()) {
        StateAttr s = lookup(o);
        bool leaf = o.getDefiningOp() && (isa<WeightOp>(o.getDefiningOp()) || isCacheOp(o.getDefiningOp()));
        if (!s && !leaf)
          s = m; // produced by an op without the interface: whole
        if (s && s.isPartial())
          s = m; // reduced before this op (and the reduction sunk later)
        if (s && s.isSplit() && group < 0 && groupOf_.count(o))
          group = groupOf_[o];
        in.push_back(s);
      }
      SmallVector<StateAttr> out;
      bool assigned = llvm::all_of(op->getResults(), [&](Value r) { return st_.count(r); });
      if (assigned) {
        for (Value r : op->getResults())
          out.push_back(st_[r]);
      } else {
        FailureOr<SmallVector<StateAttr>> t = iface.transfer(in);
        if (failed(t))
          t = guessThroughFreeOperands(iface, in);
        if (failed(t))
          out.assign(op->getNumResults(), m);
        else
          out = *t;
        for (auto [r, s] : llvm::zip(op->getResults(), out)) {
          st_[r] = s;
          if (group >= 0 && (s.isSplit() || s.isPartial()))
            groupOf_[r] = group;
        }
      }
      // Leaves nobody claimed take what this consumer needs for the results it has.
      if (llvm::none_of(in, [](StateAttr s) { return !s; }))
        return;
      FailureOr<SmallVector<StateAttr>> req = iface.requirements(out, in);
      for (auto [i, o] : llvm::enumerate(op->getOperands())) {
        if (in[i])
          continue;
        StateAttr s = succeeded(req) && (*req)[i] && !(*req)[i].isPartial() ? (*req)[i] : m;
        st_[o] = s;
        if (group >= 0 && s.isSplit())
          groupOf_[o] = group;
      }
    });
  }

  /// For ops whose rule needs every operand known (elementwise with a weight): try the first known
  /// operand's state as the result and check the op can make it from the known operands.
  FailureOr<SmallVector<StateAttr>> guessThroughFreeOperands(SplitStateInterface iface,
                                                             ArrayRef<StateAttr> in) {
    Operation *op = iface.getOperation();
    if (op->getNumResults() != 1 || llvm::none_of(in, [](StateAttr s) { return !s; }))
      return failure();
    StateAttr guess;
    for (StateAttr s : in)
      if (s) {
        guess = s;
        break;
      }
    if (!guess)
      return failure();
    FailureOr<SmallVector<StateAttr>> req = iface.requirements({guess}, in);
    if (failed(req))
      return failure();
    for (auto [have, need] : llvm::zip(in, *req))
      if (have && !sameLayout(have, need))
        return failure();
    return SmallVector<StateAttr>{guess};
  }

  // ---- granules ------------------------------------------------------------------------------------

  /// Grows the multiple of every group that split a quantized weight inside a block. True if any grew.
  bool fixGranules() {
    bool changed = false;
    fn_.walk([&](WeightOp w) {
      StateAttr s = lookup(w.getResult());
      int64_t block = weightBlockElems(w);
      if (!s || !s.isSplit() || block == 1 || s.getAxis() != w.getType().getRank() - 1)
        return;
      auto it = groupOf_.find(w.getResult());
      if (it == groupOf_.end())
        return;
      Group &g = groups_[it->second];
      // Contiguous elements of this weight's axis per unit of the group (within one segment: a device's
      // part of each segment is cut separately).
      int64_t perUnit = w.getType().getDimSize(s.getAxis()) / (g.units * s.getSegments());
      int64_t need = block / std::gcd(block, perUnit);
      int64_t m = std::lcm(g.multiple, need);
      if (g.units % m)
        m = g.units; // no block-aligned cut exists: the whole group on one device
      if (m != g.multiple) {
        TPC_DECISION(remarks_, w,
                     "'" << w.getName() << "' (" << w.getGgmlType() << ") is cut along its rows in " << block
                         << "-element blocks: its group moves in multiples of " << m << " units");
        g.multiple = m;
        changed = true;
      }
    });
    return changed;
  }

  /// Each device's fraction of the tensor-split ratios (equal when none were given).
  std::vector<double> shares() const {
    std::vector<double> r(ratios_.begin(), ratios_.end());
    if (r.empty())
      r.assign(n_, 1.0);
    double total = 0;
    for (double x : r)
      total += x;
    for (double &x : r)
      x /= total;
    return r;
  }

  /// Per-device unit counts of every group, in program order.
  void distribute() {
    const std::vector<double> r = shares();
    // The rounding credit is carried between groups of one kind (same seed op, units and multiple: the
    // attention of every layer, its FFN, its experts), so each kind rotates its leftover chunks over the
    // devices. One credit for all groups let a KV head a device missed be paid back with an expert chunk
    // many times its bytes: gemma4-26b-a4b over three devices gave device 1 6% more than its share.
    std::map<std::tuple<StringRef, int64_t, int64_t>, std::vector<double>> credits;
    // A tied pair moves in the larger of the two multiples (each use's granules hold for both).
    for (Group &g : groups_)
      if (g.follows >= 0)
        groups_[g.follows].multiple = g.multiple = std::lcm(groups_[g.follows].multiple, g.multiple);
    for (Group &g : groups_) {
      if (g.follows >= 0) {
        g.perDevice = groups_[g.follows].perDevice; // same rows, no second rounding
        continue;
      }
      std::vector<double> &credit = credits[{g.seed->getName().getStringRef(), g.units, g.multiple}];
      credit.resize(n_, 0.0);
      int64_t chunks = g.units / g.multiple;
      std::vector<double> target(n_);
      double sum = 0;
      for (int64_t d = 0; d < n_; ++d)
        sum += target[d] = std::max(0.0, r[d] * chunks + credit[d]);
      std::vector<int64_t> got(n_);
      int64_t given = 0;
      for (int64_t d = 0; d < n_; ++d) {
        target[d] = sum > 0 ? target[d] * chunks / sum : r[d] * chunks;
        given += got[d] = static_cast<int64_t>(std::floor(target[d]));
      }
      // The chunks the floors left go to the largest remainders (fewer than n_ of them).
      std::vector<int64_t> order(n_);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return target[a] - got[a] > target[b] - got[b]; });
      for (int64_t i = 0; given < chunks; ++i, ++given)
        ++got[order[i % n_]];
      g.perDevice.clear();
      for (int64_t d = 0; d < n_; ++d) {
        credit[d] = target[d] - static_cast<double>(got[d]);
        g.perDevice.push_back(got[d] * g.multiple);
      }
    }
  }

  // ---- output --------------------------------------------------------------------------------------

  void write() {
    StateAttr m = StateAttr::getMirrored(ctx_);
    fn_.getBody().walk([&](Operation *op) {
      if (op->getNumResults() == 0)
        return;
      SmallVector<StateAttr> states;
      for (Value r : op->getResults()) {
        auto it = st_.find(r);
        StateAttr s = it == st_.end() ? m : it->second;
        // A quantized weight cut along its rows says so: its granule is the quant block.
        if (auto w = dyn_cast<WeightOp>(op); w && s.isSplit() && s.getAxis() == w.getType().getRank() - 1) {
          int64_t block = weightBlockElems(w);
          int64_t unit = std::lcm(s.getGranule() * s.getSegments(), block);
          bool ok = llvm::all_of(s.getSizes(), [&](int64_t x) { return x % unit == 0; });
          if (ok && unit % s.getSegments() == 0)
            s = StateAttr::getSplit(ctx_, s.getAxis(), s.getSizes(), unit / s.getSegments(), s.getSegments());
        }
        states.push_back(s);
      }
      setStates(op, states);
    });
  }

  func::FuncOp fn_;
  MLIRContext *ctx_;
  int64_t n_;
  std::vector<double> ratios_;
  MoeSplit moeSplit_;
  const RoutingProfile &profile_;
  bool remarks_;
  std::vector<Group> groups_;
  DenseMap<Value, StateAttr> st_;
  DenseMap<Value, int> groupOf_;
  DenseMap<Value, SmallVector<StateAttr>> pending_; ///< wants of shared values, until every use asked
};

/// Gives every use of a weight its own tpc.weight op, so that consumers with different needs (a tied
/// embedding read whole by get_rows and split by the output projection) each get their own slice.
void oneWeightPerUse(func::FuncOp fn, bool remarks) {
  SmallVector<WeightOp> weights;
  fn.walk([&](WeightOp w) { weights.push_back(w); });
  for (WeightOp w : weights) {
    SmallVector<OpOperand *> uses;
    for (OpOperand &use : w->getUses())
      uses.push_back(&use);
    if (uses.size() > 1)
      TPC_DECISION(remarks, w, "'" << w.getName() << "' has " << uses.size() << " readers: one copy of the op each");
    for (size_t i = 1; i < uses.size(); ++i) {
      OpBuilder b(uses[i]->getOwner());
      uses[i]->set(b.clone(*w)->getResult(0));
    }
  }
}

struct AssignSplitAxesPass : impl::TpcAssignSplitAxesBase<AssignSplitAxesPass> {
  using TpcAssignSplitAxesBase::TpcAssignSplitAxesBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (devices < 1) {
      module.emitError() << "tpc-assign-split-axes: devices must be at least 1, got "
                         << static_cast<int64_t>(devices);
      return signalPassFailure();
    }
    std::vector<double> ratios(tensorSplit.begin(), tensorSplit.end());
    if (!ratios.empty()) {
      if (static_cast<int64_t>(ratios.size()) != devices) {
        module.emitError() << "tpc-assign-split-axes: tensor-split lists " << ratios.size() << " shares for "
                           << static_cast<int64_t>(devices) << " devices (give one share per device)";
        return signalPassFailure();
      }
      double sum = 0;
      for (double r : ratios) {
        if (!(r >= 0) || !std::isfinite(r)) {
          module.emitError() << "tpc-assign-split-axes: tensor-split shares must be finite and >= 0";
          return signalPassFailure();
        }
        sum += r;
      }
      if (sum <= 0) {
        module.emitError()
            << "tpc-assign-split-axes: tensor-split shares sum to 0 (give some device a share)";
        return signalPassFailure();
      }
    }
    if (moeSplit != "intermediate" && moeSplit != "expert" && moeSplit != "auto") {
      module.emitError() << "tpc-assign-split-axes: moe-split '" << moeSplit
                         << "' is not a MoE split; use auto, intermediate or expert";
      return signalPassFailure();
    }
    RoutingProfile profile;
    if (!routingProfile.empty()) {
      std::string error;
      std::optional<RoutingProfile> p = readRoutingProfile(routingProfile, error);
      if (!p) {
        module.emitError() << "tpc-assign-split-axes: " << error;
        return signalPassFailure();
      }
      profile = std::move(*p);
    }
    module->setAttr(TpcDialect::kDevicesAttrName,
                    IntegerAttr::get(IntegerType::get(module.getContext(), 64), devices));
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      oneWeightPerUse(fn, remarks);
      MoeSplit how = moeSplit == "expert"         ? MoeSplit::expert
                     : moeSplit == "intermediate" ? MoeSplit::intermediate
                                                  : MoeSplit::automatic;
      if (failed(Assigner(fn, devices, ratios, how, profile, remarks).run()))
        return signalPassFailure();
    }
  }
};

} // namespace
} // namespace mlir::tpc
