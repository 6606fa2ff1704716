//===- TpcBase.td - tpc dialect definition -----------------*- tablegen -*-===//
//
// The `tpc` dialect and the type constraints shared by its ops, attributes and types. Activations are
// builtin ranked tensors (row-major, outermost first, token dimension dynamic at dim 0); float data is f32
// whatever the ggml storage type, integer ids are i32.
//
//===----------------------------------------------------------------------===//
#ifndef TPC_DIALECTS_TPC_IR_TPCBASE_TD
#define TPC_DIALECTS_TPC_IR_TPCBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Tpc_Dialect : Dialect {
  let name = "tpc";
  let summary = "Tensor-parallel model graph: GGUF model ops, split states and collectives.";
  let description = [{
    The `tpc` dialect holds a language model's forward graph at ggml granularity in global (unsplit)
    shapes, the split state of every value (`#tpc.state<...>`) and the explicit communication ops that
    partitioning inserts. The importer produces it from a GGUF file; passes assign split states, insert
    collectives and localize shapes; the plan emitter lowers it to the runtime's step list.
  }];
  let cppNamespace = "::mlir::tpc";
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  // tpc.state, tpc.placement, tpc.on_device, tpc.layer on ops and tpc.devices on the module are checked by
  // the dialect.
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Name of the discardable per-result split-state attribute (an ArrayAttr of StateAttr).
    static constexpr ::llvm::StringLiteral kStateAttrName = "tpc.state";
    /// Name of the discardable placement attribute ("device" or "host").
    static constexpr ::llvm::StringLiteral kPlacementAttrName = "tpc.placement";
    /// Name of the module attribute holding the number of devices.
    static constexpr ::llvm::StringLiteral kDevicesAttrName = "tpc.devices";
    /// Name of the op attribute that runs an op on one device only (the others forward operand 0).
    static constexpr ::llvm::StringLiteral kOnDeviceAttrName = "tpc.on_device";
    /// Name of the per-result local shapes tpc-localize records (ArrayAttr per result of one
    /// DenseI64ArrayAttr per device).
    static constexpr ::llvm::StringLiteral kLocalShapesAttrName = "tpc.local_shapes";
    /// Name of the importer's layer stamp: an i64 block index N >= 0 on the weights and ops of block N,
    /// the string kLayerOutputHead on those of the output head; absent on the embedding and on ops the
    /// passes create (collectives, copies), which belong where their operands come from.
    static constexpr ::llvm::StringLiteral kLayerAttrName = "tpc.layer";
    /// The tpc.layer value of the output head (final norm, output projection, logit soft-cap).
    static constexpr ::llvm::StringLiteral kLayerOutputHead = "output";

  private:
    // Defined next to the storage classes they need (TpcAttrs.cpp, TpcTypes.cpp).
    void registerAttributes();
    void registerTypes();

  public:
  }];
}

/// Float activations and weights.
def Tpc_F32Tensor : RankedTensorOf<[F32]>;
/// Token ids, positions, expert ids.
def Tpc_I32Tensor : RankedTensorOf<[I32]>;
/// Any ranked tensor with f32 or i32 elements (data movement ops accept both).
def Tpc_Tensor : RankedTensorOf<[F32, I32]>;

#endif // TPC_DIALECTS_TPC_IR_TPCBASE_TD
