//===- Passes.td - tpc partitioning passes ------------------*- tablegen -*-===//
//
// The passes that turn an imported (global, unsplit) forward function into a partitioned one: split
// states on every value, explicit collectives and backend copies, per-device local shapes and arena
// offsets. Order and options: Pipelines.h. DESIGN.md §2.3 and §3 give the reasoning.
//
//===----------------------------------------------------------------------===//
#ifndef TPC_PASSES_PASSES_TD
#define TPC_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def TpcAssignSplitAxes : Pass<"tpc-assign-split-axes", "::mlir::ModuleOp"> {
  let summary = "Assign a split state to every value from op structure and propagate it";
  let description = [{
    Seeds split states from op structure, never from tensor names: attention splits its heads (whole
    KV-head groups; with fewer KV heads than devices K/V and the cache stay mirrored and only Q heads
    split), a GLU splits its intermediate dimension (a merged gate|up operand per segment), and the
    matmuls producing those operands become column-parallel. The states flow backward through the
    SplitStateInterface `requirements` of single-consumer producers up to a mirrored activation, and forward
    through `transfer` (a matmul consuming a split reduction axis becomes row-parallel and its result
    partial). Weights take whatever their consumer requires. Per-device sizes come from `tensor-split`
    ratios rounded to the granule of every tensor the split touches (KV-head groups, quant blocks of a
    weight split along its rows, segments); rounding carries its remainder so no device drifts.
    The result: `tpc.state` on every op result and `tpc.devices` on the module.
  }];
  let options = [
    Option<"devices", "devices", "int64_t", /*default=*/"1", "Number of devices">,
    ListOption<"tensorSplit", "tensor-split", "double",
               "Relative share of each device (default: equal)">,
  ];
}

def TpcFuseMoeScaleChain : Pass<"tpc-fuse-moe-scale-chain", "::mlir::ModuleOp"> {
  let summary = "Fold the multiplies after the expert down projection and the expert sum into one op";
  let description = [{
    Finds `sum(mul(...mul(mul_mat_id_down, m1)..., mk), axis = expert)` where every multiplier is a
    per-(token, expert) factor broadcast over the hidden dimension (router weights, a per-expert scale
    gathered by expert id) and replaces the chain with `tpc.expert_combine(x, m1, ..., mk)`, placed where the
    sum was, so ops that compute the multipliers between the chain's links in program order (the scale's
    get_rows/reshape) do not stop the match. The combine is linear in `x`: with a partial `x` its result
    stays partial, so one all-reduce serves the whole MoE block.
  }];
}

def TpcInsertCollectives : Pass<"tpc-insert-collectives", "::mlir::ModuleOp"> {
  let summary = "Insert explicit collectives where states disagree, then sink and bucket all-reduces";
  let description = [{
    Where a producer's state differs from what a consumer requires: partial -> mirrored `all_reduce`,
    partial -> split `reduce_scatter`, split -> mirrored `all_gather`, mirrored -> split `slice`. Then each
    all-reduce sinks past the ops linear in its partial operand (mul/div by a mirrored value, scale,
    reshape/permute, sum, expert_combine), a residual `add(partial, mirrored)` runs on device 0 only
    (`tpc.on_device = 0`) before the reduce, and all-reduces that become ready together with no consumer
    between them are bucketed into one collective.
  }];
}

def TpcInsertBackendCopies : Pass<"tpc-insert-backend-copies", "::mlir::ModuleOp"> {
  let summary = "Place pinned tensors and the KV cache on the host and insert explicit backend copies";
  let description = [{
    `override-tensor` entries `REGEX=cpu` pin the weights whose GGUF name matches to the host;
    `no-kv-offload` keeps every KV cache on the host. The op reading or writing a host tensor runs on the
    host (`tpc.placement = "host"`), with explicit `tpc.backend_copy {from, to}` ops at the boundaries. A
    copy carries the split state of its source: a split KV cache kept on the host stays split per device.
  }];
  let options = [
    ListOption<"overrideTensor", "override-tensor", "std::string",
               "REGEX=cpu: keep the matching weights on the host">,
    Option<"noKvOffload", "no-kv-offload", "bool", /*default=*/"false", "Keep the KV cache on the host">,
  ];
}

def TpcLocalize : Pass<"tpc-localize", "::mlir::ModuleOp"> {
  let summary = "Attach each value's per-device local shape";
  let description = [{
    Checks every state against its value (axis, sizes, granules) and records the per-device local shapes
    as `tpc.local_shapes` (one DenseI64ArrayAttr per device and result; -1 is the token dimension). One IR
    serves all devices, uneven splits included.
  }];
}

def TpcPlanMemory : Pass<"tpc-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Liveness-based activation arena offsets and memory totals per device";
  let description = [{
    Assigns every activation a byte offset in its device's arena for `max-batch` tokens, reusing the space
    of values that are dead (liveness over the forward function's program order), and records weight
    bytes, KV bytes per token and the activation peak per device on the module. Values computed from
    `tpc.select_rows` (the output head) are sized for `max-output-rows` rows instead of `max-batch` tokens:
    the head of a call runs only on the rows whose logits it returns.
  }];
  let options = [
    Option<"maxBatch", "max-batch", "int64_t", /*default=*/"512", "Tokens per call the arenas hold">,
    // 64: the CPU matmul's token block, so a request for every row (logit dumps, perplexity) runs in
    // chunks that are still efficient; more rows than a server's slots ask for in one step.
    Option<"maxOutputRows", "max-output-rows", "int64_t", /*default=*/"64",
           "Logits rows per call the arenas hold (capped at max-batch)">,
  ];
}

#endif // TPC_PASSES_PASSES_TD
