//===- InsertBackendCopies.cpp - tpc-insert-backend-copies --------------------===//
//
// Placement is part of a value's state. `override-tensor REGEX=cpu` pins matching weights to the host and
// `no-kv-offload` pins every KV cache; the ops reading a pinned tensor then run on the host
// (`tpc.placement = "host"`), and every activation crossing between a host op and a device op goes through
// an explicit tpc.backend_copy {from, to}. A copy has the state of its source, so each device copies its
// own part: a split KV cache on the host stays split per device, and so does the attention reading it.
// Collectives always stay on the device: one reading a pinned tensor directly is an error naming it (the
// pipeline never produces one; every other collective gets copies around it like any device op).
//===----------------------------------------------------------------------===//
#include "passes/DecisionLog.h"
#include "passes/Passes.h"
#include "passes/StateUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Regex.h"

#include <map>

#define DEBUG_TYPE "tpc-insert-backend-copies"

namespace mlir::tpc {
#define GEN_PASS_DEF_TPCINSERTBACKENDCOPIES
#include "passes/Passes.h.inc"

namespace {

constexpr StringLiteral kHost = "host", kDevice = "device";

bool onHost(Operation *op) {
  auto p = op->getAttrOfType<StringAttr>(TpcDialect::kPlacementAttrName);
  return p && p.getValue() == kHost;
}

struct InsertBackendCopiesPass : impl::TpcInsertBackendCopiesBase<InsertBackendCopiesPass> {
  using TpcInsertBackendCopiesBase::TpcInsertBackendCopiesBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Parse REGEX=target entries first: a bad flag fails before anything changes.
    std::vector<llvm::Regex> pinned;
    std::vector<std::string> entries;
    for (const std::string &entry : overrideTensor) {
      size_t eq = entry.rfind('=');
      if (eq == std::string::npos || eq == 0) {
        module.emitError() << "--override-tensor '" << entry << "': expected REGEX=cpu";
        return signalPassFailure();
      }
      std::string target = entry.substr(eq + 1);
      if (target != "cpu" && target != "host" && target != "CPU") {
        module.emitError() << "--override-tensor '" << entry << "': unknown target '" << target
                           << "' (only cpu: the host; device placement is the default)";
        return signalPassFailure();
      }
      llvm::Regex re(entry.substr(0, eq));
      std::string why;
      if (!re.isValid(why)) {
        module.emitError() << "--override-tensor '" << entry << "': bad regular expression: " << why;
        return signalPassFailure();
      }
      pinned.push_back(std::move(re));
      entries.push_back(entry);
    }
    if (pinned.empty() && !noKvOffload)
      return;

    Builder b(module.getContext());
    SmallVector<Operation *> leaves;
    std::vector<bool> matched(pinned.size(), false);
    module.walk([&](Operation *op) {
      bool pin = false;
      if (auto w = dyn_cast<WeightOp>(op)) {
        for (size_t i = 0; i < pinned.size(); ++i)
          if (pinned[i].match(w.getName())) {
            if (!pin)
              TPC_DECISION(remarks, op, "'" << w.getName() << "' stays on the host (--override-tensor '"
                                            << entries[i] << "')");
            pin = matched[i] = true;
          }
      } else if (isCacheOp(op)) {
        pin = noKvOffload;
        if (pin)
          TPC_DECISION(remarks, op, (isa<KvCacheOp>(op) ? "the KV cache" : "the recurrent state")
                                        << " stays on the host (--no-kv-offload)");
      }
      if (pin) {
        op->setAttr(TpcDialect::kPlacementAttrName, b.getStringAttr(kHost));
        leaves.push_back(op);
      }
    });
    // A pattern that matches nothing is most likely a typo or another architecture's names: say so, since
    // the plan would silently keep those weights on the devices.
    for (size_t i = 0; i < entries.size(); ++i)
      if (!matched[i])
        module.emitWarning() << "--override-tensor '" << entries[i]
                             << "' matches no weight of this model; it places nothing on the host";
    // Every consumer of a pinned tensor runs where the tensor is, except a collective: collectives run on
    // the device (NCCL reads device memory), so a pinned tensor a collective reads is an error naming it.
    SetVector<Operation *> hostOps;
    for (Operation *leaf : leaves)
      for (Operation *user : leaf->getUsers()) {
        if (isa<AllReduceOp, AllGatherOp, ReduceScatterOp>(user)) {
          auto w = dyn_cast<WeightOp>(leaf);
          user->emitError() << (w ? "--override-tensor: weight '" + w.getName().str() + "'"
                                  : std::string("--no-kv-offload: the kv cache"))
                            << " is read by " << user->getName()
                            << ", a collective, which runs on the device; it cannot stay on the host";
          return signalPassFailure();
        }
        hostOps.insert(user);
      }
    for (Operation *op : hostOps) {
      op->setAttr(TpcDialect::kPlacementAttrName, b.getStringAttr(kHost));
      TPC_DECISION(remarks, op, op->getName().getStringRef() << " runs on the host: it reads a host tensor");
      // A host op reads its weights in place, so they follow it (each use has its own tpc.weight: the
      // conv kernel of a recurrent state on the host, a few KiB).
      for (Value v : op->getOperands())
        if (auto w = v.getDefiningOp<WeightOp>(); w && !onHost(w) && w->hasOneUse()) {
          w->setAttr(TpcDialect::kPlacementAttrName, b.getStringAttr(kHost));
          TPC_DECISION(remarks, w, "'" << w.getName() << "' stays on the host with its reader");
        }
    }

    // Copies at every host/device boundary, one per (value, direction).
    std::map<std::pair<const void *, bool>, Value> copies;
    auto copyOf = [&](Value v, bool toHost, Operation *before) -> Value {
      auto key = std::make_pair(v.getAsOpaquePointer(), toHost);
      if (auto it = copies.find(key); it != copies.end())
        return it->second;
      OpBuilder ob(before);
      if (Operation *def = v.getDefiningOp())
        ob.setInsertionPointAfter(def);
      else
        ob.setInsertionPointToStart(before->getBlock());
      auto copy = ob.create<BackendCopyOp>(v.getLoc(), v.getType(), v, ob.getStringAttr(toHost ? kDevice : kHost),
                                           ob.getStringAttr(toHost ? kHost : kDevice));
      setStates(copy, {stateOrMirrored(v)}); // each device copies its own part
      copy->setAttr(TpcDialect::kPlacementAttrName, ob.getStringAttr(toHost ? kHost : kDevice));
      copies[key] = copy.getResult();
      return copy.getResult();
    };
    module.walk([&](Operation *op) {
      if (isa<BackendCopyOp, WeightOp, ModuleOp, func::FuncOp>(op) || isCacheOp(op))
        return;
      bool host = onHost(op); // func.return: the caller reads device memory
      for (OpOperand &o : op->getOpOperands()) {
        Operation *def = o.get().getDefiningOp();
        if (def && (isa<WeightOp>(def) || isCacheOp(def)))
          continue; // pinned tensors are read in place by their (host) consumers
        bool srcHost = def && onHost(def); // a copy's placement is its destination
        if (srcHost != host) {
          o.set(copyOf(o.get(), host, op));
          TPC_DECISION(remarks, op,
                       "operand " << o.getOperandNumber() << " crosses to the " << (host ? "host" : "device")
                                  << ": backend_copy");
        }
      }
    });
  }
};

} // namespace
} // namespace mlir::tpc
