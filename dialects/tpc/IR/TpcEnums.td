//===- TpcEnums.td - tpc dialect enums ---------------------*- tablegen -*-===//
//
// The function selectors of tpc.unary, tpc.glu, tpc.rope and the kind of a split state. They are plain
// I32 enums, printed as bare keywords by the ops' assembly formats. Alphabetical.
//
//===----------------------------------------------------------------------===//
#ifndef TPC_DIALECTS_TPC_IR_TPCENUMS_TD
#define TPC_DIALECTS_TPC_IR_TPCENUMS_TD

include "mlir/IR/EnumAttr.td"

def Tpc_GluFn : I32EnumAttr<"GluFn", "activation applied to the gate of tpc.glu", [
    I32EnumAttrCase<"silu", 0>,
    I32EnumAttrCase<"gelu_tanh", 1>,
    I32EnumAttrCase<"gelu", 2>,
    // gpt-oss: min(g, 7) * sigmoid(1.702 * min(g, 7)) * (clamp(u, -7, 7) + 1), the constants fixed by the
    // model (OpenAI's reference `swiglu`, ggml's SWIGLU_OAI): not fn(gate) * up, but f(0, 0) = 0 still.
    I32EnumAttrCase<"swiglu_oai", 3>,
  ]> {
  let cppNamespace = "::mlir::tpc";
}

def Tpc_RopeMode : I32EnumAttr<"RopeMode", "pairing of rotated elements in tpc.rope", [
    I32EnumAttrCase<"normal", 0>,
    I32EnumAttrCase<"neox", 1>,
  ]> {
  let cppNamespace = "::mlir::tpc";
}

def Tpc_StateKind : I32EnumAttr<"StateKind", "kind of a split state", [
    I32EnumAttrCase<"mirrored", 0>,
    I32EnumAttrCase<"split", 1>,
    I32EnumAttrCase<"partial", 2>,
    I32EnumAttrCase<"local", 3>,
    I32EnumAttrCase<"routed", 4>,
  ]> {
  let cppNamespace = "::mlir::tpc";
}

def Tpc_UnaryFn : I32EnumAttr<"UnaryFn", "function applied by tpc.unary", [
    I32EnumAttrCase<"silu", 0>,
    I32EnumAttrCase<"gelu", 1>,
    I32EnumAttrCase<"gelu_tanh", 2>,
    I32EnumAttrCase<"tanh", 3>,
    I32EnumAttrCase<"relu", 4>,
    I32EnumAttrCase<"exp", 5>,
    I32EnumAttrCase<"sigmoid", 6>,
    I32EnumAttrCase<"softplus", 7>,
  ]> {
  let cppNamespace = "::mlir::tpc";
}

#endif // TPC_DIALECTS_TPC_IR_TPCENUMS_TD
