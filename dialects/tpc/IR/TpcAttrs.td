//===- TpcAttrs.td - tpc dialect attributes ----------------*- tablegen -*-===//
//
// The split-state attribute `#tpc.state<...>`: how a value sits on the N devices. Passes attach it to op
// results as the discardable attribute `tpc.state` (an ArrayAttr, one state per result). The attribute
// checks its own consistency; the dialect checks it against the value it is attached to (axis < rank,
// sum of sizes == dimension) and against the module's `tpc.devices`.
//
//===----------------------------------------------------------------------===//
#ifndef TPC_DIALECTS_TPC_IR_TPCATTRS_TD
#define TPC_DIALECTS_TPC_IR_TPCATTRS_TD

include "dialects/tpc/IR/TpcBase.td"
include "dialects/tpc/IR/TpcEnums.td"

//===----------------------------------------------------------------------===//
// Attributes (alphabetical)
//===----------------------------------------------------------------------===//

def Tpc_StateAttr : AttrDef<Tpc_Dialect, "State"> {
  let mnemonic = "state";
  let summary = "How a value is distributed over the devices.";
  let description = [{
    One of five kinds:

    - `mirrored`: a full copy on every device.
    - `split axis = A, sizes = [s0, s1, ...], granule = G, segments = S`: split along axis `A`; device
      `d` holds `sizes[d]` elements of that axis (explicit, so uneven ratios are exact). `segments = S > 1`
      means the axis is a concatenation of `S` equal segments (a merged gate|up projection) and device `d`
      holds `sizes[d] / S` of each segment. Every size is a multiple of `G * S`. `granule` and
      `segments` default to 1 when omitted.
    - `partial`: each device holds an addend of the value (sum semantics).
    - `local device = D`: the value lives on device `D` only.
    - `routed sizes = [e0, e1, ...]`: rows of tokens routed to experts (expert parallelism). Device `d` owns
      `sizes[d]` consecutive experts (`sum(sizes)` = the expert count); each (token, selected slot) row of
      the value is held by the device owning the expert that slot selected, and every other device holds
      zeros there. The devices' values add up to the whole one (a `partial` whose addends do not overlap),
      so ops that map zero to zero (GLU, a scale) keep it, and a sum over the slots makes it `partial`.

    ```mlir
    #tpc.state<mirrored>
    #tpc.state<split axis = 1, sizes = [256, 128, 128], granule = 64, segments = 1>
    #tpc.state<partial>
    #tpc.state<local device = 0>
    #tpc.state<routed sizes = [64, 43, 21]>
    ```

    The attribute verifies its own consistency (non-negative sizes, multiples of the granule, axis and
    device non-negative). Where it is attached to a value (`tpc.state`), the dialect also checks
    `axis < rank`, `sum(sizes) == dim(axis)` for a static dimension and `sizes.size() == tpc.devices`
    (for `routed`, only the last: the expert count is not a dimension of the value; the rules of
    `mul_mat_id` tie it to the experts of its weight).
  }];
  let parameters = (ins
    "::mlir::tpc::StateKind":$kind,
    "int64_t":$axis,
    ArrayRefParameter<"int64_t", "per-device sizes along the split axis">:$sizes,
    "int64_t":$granule,
    "int64_t":$segments,
    "int64_t":$device
  );
  let hasCustomAssemblyFormat = 1;
  // Internal consistency; the checks against a value live in the dialect's attribute verifier.
  let genVerifyDecl = 1;
  let builders = [
    AttrBuilder<(ins "::mlir::tpc::StateKind":$kind), [{
      return $_get($_ctxt, kind, 0, ::llvm::ArrayRef<int64_t>(), 1, 1, 0);
    }]>
  ];
  let extraClassDeclaration = [{
    /// `#tpc.state<mirrored>`.
    static StateAttr getMirrored(::mlir::MLIRContext *ctx);
    /// `#tpc.state<partial>`.
    static StateAttr getPartial(::mlir::MLIRContext *ctx);
    /// `#tpc.state<local device = D>`.
    static StateAttr getLocal(::mlir::MLIRContext *ctx, int64_t device);
    /// `#tpc.state<split axis = A, sizes = [...], granule = G, segments = S>`.
    static StateAttr getSplit(::mlir::MLIRContext *ctx, int64_t axis,
                              ::llvm::ArrayRef<int64_t> sizes, int64_t granule = 1,
                              int64_t segments = 1);
    /// `#tpc.state<routed sizes = [...]>`: experts per device.
    static StateAttr getRouted(::mlir::MLIRContext *ctx, ::llvm::ArrayRef<int64_t> sizes);
    bool isMirrored() const { return getKind() == ::mlir::tpc::StateKind::mirrored; }
    bool isSplit() const { return getKind() == ::mlir::tpc::StateKind::split; }
    bool isPartial() const { return getKind() == ::mlir::tpc::StateKind::partial; }
    bool isLocal() const { return getKind() == ::mlir::tpc::StateKind::local; }
    bool isRouted() const { return getKind() == ::mlir::tpc::StateKind::routed; }
  }];
}

#endif // TPC_DIALECTS_TPC_IR_TPCATTRS_TD
