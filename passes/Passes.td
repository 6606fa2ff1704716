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

/// Every pass takes `remarks`: its decision log as MLIR remarks on the ops concerned (passes/DecisionLog.h;
/// Debian's LLVM registers no -debug-only).
defvar RemarksOption = Option<"remarks", "remarks", "bool", /*default=*/"false",
                              "Report each decision of the pass as a remark on the op it concerns">;

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

    ```mlir
    // Before (an FFN; test/passes/assign-split-axes.mlir has the llama layer):
    %g = tpc.matmul %x, %wg : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
    %h = tpc.glu silu %g, %u : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
    %y = tpc.matmul %h, %wd : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
    // After --tpc-assign-split-axes=devices=2: the GLU seeds a group of 128 units; its producers are
    // column parallel, its consumer row parallel (partial).
    %wg = tpc.weight {..., tpc.state = [#tpc.state<split axis = 0, sizes = [64, 64], granule = 1, segments = 1>]}
    %g = tpc.matmul %x, %wg {tpc.state = [#tpc.state<split axis = 1, sizes = [64, 64], granule = 1, segments = 1>]}
    %h = tpc.glu silu %g, %u {tpc.state = [#tpc.state<split axis = 1, sizes = [64, 64], ...>]}
    %y = tpc.matmul %h, %wd {tpc.state = [#tpc.state<partial>]}
    ```
  }];
  let options = [
    Option<"devices", "devices", "int64_t", /*default=*/"1", "Number of devices">,
    ListOption<"tensorSplit", "tensor-split", "double",
               "Relative share of each device (default: equal)">,
    Option<"moeSplit", "moe-split", "std::string", /*default=*/"\"auto\"",
           "How MoE layers split: auto (per layer, the cheaper at decode; then whole experts where the "
           "intermediate split leaves a device's split weights more than 5% off its share), intermediate "
           "(every expert's intermediate dimension over the devices) or expert (whole experts per device, rows "
           "routed to them)">,
    Option<"routingProfile", "routing-profile", "std::string", /*default=*/"\"\"",
           "For moe-split=auto: a file of tokens routed to each expert per layer ('blk.N: c0 c1 ...' lines); "
           "default: uniform routing">,
    RemarksOption,
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

    ```mlir
    // Before (test/passes/fuse-moe-scale-chain.mlir):
    %d = tpc.mul_mat_id %h, %wd, %ids : (...) -> tensor<?x2x32xf32>
    %s3 = tpc.reshape %s : tensor<?x2xf32> -> tensor<?x2x1xf32>
    %m1 = tpc.mul %d, %s3 : (tensor<?x2x32xf32>, tensor<?x2x1xf32>) -> tensor<?x2x32xf32>
    %r3 = tpc.reshape %rw : tensor<?x2xf32> -> tensor<?x2x1xf32>
    %m2 = tpc.mul %m1, %r3 : (tensor<?x2x32xf32>, tensor<?x2x1xf32>) -> tensor<?x2x32xf32>
    %y = tpc.sum %m2 {axis = 1 : i64} : tensor<?x2x32xf32> -> tensor<?x32xf32>
    // After:
    %y = tpc.expert_combine %d, %s, %rw : (tensor<?x2x32xf32>, tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x32xf32>
    ```
  }];
  let options = [RemarksOption];
}

def TpcInsertCollectives : Pass<"tpc-insert-collectives", "::mlir::ModuleOp"> {
  let summary = "Insert explicit collectives where states disagree, then sink and bucket all-reduces";
  let description = [{
    Where a producer's state differs from what a consumer requires: partial -> mirrored `all_reduce`,
    partial -> split `reduce_scatter`, split -> mirrored `all_gather`, mirrored -> split `slice`. Then each
    all-reduce sinks past the ops linear in its partial operand (mul/div by a mirrored value, scale,
    reshape/permute, sum, expert_combine), a residual `add(partial, mirrored)` runs on device 0 only
    (`tpc.on_device = 0`) before the reduce, and all-reduces that become ready together with no consumer
    between them are bucketed into one collective. A bias after a row-parallel projection (gpt-oss's
    `attn_output.bias`, and its experts' down bias as `tpc.add_id`) is such a mirrored addend: it is added
    once, on device 0, before the reduce rather than after it, so the reduce can keep sinking (past the
    router weighting into the residual) and each block still costs one all-reduce.

    ```mlir
    // Before (states from tpc-assign-split-axes; test/passes/insert-collectives.mlir):
    %y = tpc.matmul %h, %wd {tpc.state = [#tpc.state<partial>]} : (...) -> tensor<?x64xf32>
    %r = tpc.add %x, %y {tpc.state = [#tpc.state<mirrored>]} : (...) -> tensor<?x64xf32>
    // After: the residual is added on device 0 before one all-reduce.
    %y = tpc.matmul %h, %wd {tpc.state = [#tpc.state<partial>]} : (...) -> tensor<?x64xf32>
    %a = tpc.add %y, %x {tpc.on_device = 0 : i64, tpc.state = [#tpc.state<partial>]} : (...) -> tensor<?x64xf32>
    %r = tpc.all_reduce %a {tpc.state = [#tpc.state<mirrored>]} : tensor<?x64xf32>
    ```
  }];
  let options = [RemarksOption];
}

def TpcInsertStageTransfers : Pass<"tpc-insert-stage-transfers", "::mlir::ModuleOp"> {
  let summary = "Cut the layers into pipeline stages and insert a stage_transfer wherever a value crosses one";
  let description = [{
    With `stages` = S > 1 (or `stage-layers` = n0,n1,...: layers per stage, summing to the model's layers)
    stage s runs layers [n0+..+n(s-1), n0+..+ns), the embedding goes
    with stage 0 and the output head with the last stage (passes/Stages.h has the rule for every op). Every
    operand read on another stage than the one that computed it gets a `tpc.stage_transfer` {from, to}
    right after its producer, shared by every reader on that stage (in a transformer: the residual stream
    once per boundary, and the logits back to stage 0). Weights, caches and the function's inputs never
    move: each stage loads and binds its own. Runs after tpc-insert-collectives, so nothing inside a stage
    changes; the module gets `tpc.stage_layers`. Without `stage-layers` the cut balances the weight bytes
    per stage (a matmul's FLOPs per token are twice its weight elements, so bytes stand for both): the
    contiguous cut whose heaviest stage is lightest, the output head counted on the last stage.

    ```mlir
    // stage-layers=1,1: layer 0's output x1 is read by layer 1.
    %x1 = tpc.all_reduce %a {tpc.state = [#tpc.state<mirrored>]} : tensor<?x64xf32>
    %t = tpc.stage_transfer %x1 {from = 0 : i64, to = 1 : i64, tpc.state = [#tpc.state<mirrored>]} : tensor<?x64xf32>
    %n = tpc.rms_norm %t {eps = 1.0e-05 : f32, tpc.layer = 1 : i64} : ...
    ```
  }];
  let options = [
    Option<"stages", "stages", "int64_t", /*default=*/"1", "Pipeline stages (1: none)">,
    ListOption<"stageLayers", "stage-layers", "int64_t",
               "Layers per pipeline stage (sums to the layer count; default: balanced by weight bytes)">,
    RemarksOption,
  ];
}

def TpcInsertBackendCopies : Pass<"tpc-insert-backend-copies", "::mlir::ModuleOp"> {
  let summary = "Place pinned tensors and the KV cache on the host and insert explicit backend copies";
  let description = [{
    `override-tensor` entries `REGEX=cpu` pin the weights whose GGUF name matches to the host;
    `no-kv-offload` keeps every KV cache on the host. The op reading or writing a host tensor runs on the
    host (`tpc.placement = "host"`), with explicit `tpc.backend_copy {from, to}` ops at the boundaries. A
    copy carries the split state of its source: a split KV cache kept on the host stays split per device.

    ```mlir
    // Before:
    %w = tpc.weight {ggml_type = "q8_0", name = "blk.0.ffn_down.weight"} : tensor<64x64xf32>
    %y = tpc.matmul %x, %w : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    // After --tpc-insert-backend-copies=override-tensor=ffn_down=cpu (test/passes/insert-backend-copies.mlir):
    %xh = tpc.backend_copy %x {from = "device", to = "host", tpc.placement = "host", ...} : tensor<?x64xf32>
    %w = tpc.weight {ggml_type = "q8_0", name = "blk.0.ffn_down.weight", tpc.placement = "host"} : ...
    %yh = tpc.matmul %xh, %w {tpc.placement = "host"} : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %y = tpc.backend_copy %yh {from = "host", to = "device", tpc.placement = "device", ...} : tensor<?x64xf32>
    ```
  }];
  let options = [
    ListOption<"overrideTensor", "override-tensor", "std::string",
               "REGEX=cpu: keep the matching weights on the host">,
    Option<"noKvOffload", "no-kv-offload", "bool", /*default=*/"false", "Keep the KV cache on the host">,
    RemarksOption,
  ];
}

def TpcLocalize : Pass<"tpc-localize", "::mlir::ModuleOp"> {
  let summary = "Attach each value's per-device local shape";
  let description = [{
    Checks every state against its value (axis, sizes, granules) and records the per-device local shapes
    as `tpc.local_shapes` (one DenseI64ArrayAttr per device and result; -1 is the token dimension). One IR
    serves all devices, uneven splits included.

    ```mlir
    // Before (test/passes/localize.mlir: the llama layer at 3 devices, 3,2,1):
    %o = tpc.attention %q, %k, %v, %c, %pos {..., tpc.state = [#tpc.state<split axis = 1, sizes = [4, 0, 4], ...>]}
        : (...) -> tensor<?x8x32xf32>
    // After: one local shape per device (-1: the token dimension; device 1 holds no head).
    %o = tpc.attention %q, %k, %v, %c, %pos {..., tpc.local_shapes = [[array<i64: -1, 4, 32>,
        array<i64: -1, 0, 32>, array<i64: -1, 4, 32>]], tpc.state = ...} : (...) -> tensor<?x8x32xf32>
    ```
  }];
  let options = [RemarksOption];
}

def TpcPlanMemory : Pass<"tpc-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Liveness-based activation arena offsets and memory totals per device";
  let description = [{
    Assigns every activation a byte offset in its device's arena for `max-batch` tokens, reusing the space
    of values that are dead (liveness over the forward function's program order), and records weight
    bytes, KV bytes per token and the activation peak per device on the module. Values computed from
    `tpc.select_rows` (the output head) are sized for `max-output-rows` rows instead of `max-batch` tokens:
    the head of a call runs only on the rows whose logits it returns.

    ```mlir
    // Before: the module after tpc-localize (test/passes/plan-memory.mlir).
    // After --tpc-plan-memory=max-batch=4: byte offsets per result and device, totals on the module;
    // the on-device residual add writes in place over the matmul's slot, the returned value has none (-1).
    module attributes {tpc.activation_bytes = array<i64: 2048, 2048>, tpc.max_batch = 4 : i64, ...}
    %y = tpc.matmul %h, %wd {tpc.offsets = [array<i64: 1024, 1024>], ...}
    %a = tpc.add %y, %x {tpc.offsets = [array<i64: 1024, 1024>], tpc.on_device = 0 : i64, ...}
    %r = tpc.all_reduce %a {tpc.offsets = [array<i64: -1, -1>], ...} : tensor<?x64xf32>
    ```
  }];
  let options = [
    Option<"maxBatch", "max-batch", "int64_t", /*default=*/"512", "Tokens per call the arenas hold">,
    // 64: the CPU matmul's token block, so a request for every row (logit dumps, perplexity) runs in
    // chunks that are still efficient; more rows than a server's slots ask for in one step.
    Option<"maxOutputRows", "max-output-rows", "int64_t", /*default=*/"64",
           "Logits rows per call the arenas hold (capped at max-batch)">,
    RemarksOption,
  ];
}

def TpcFuseNorms : Pass<"tpc-fuse-norms", "::mlir::ModuleOp"> {
  let summary = "Fuse norms with their weight and layer boundaries into single plan steps";
  let description = [{
    Two peepholes on the planned module, each one plan step instead of several: `rms_norm` whose only use
    is a `mul` by a mirrored f32 norm weight becomes `tpc.weighted_rms_norm`; a layer boundary
    `add {tpc.on_device = 0}` -> `all_reduce` -> `rms_norm` [-> `mul` by its weight] becomes one
    `tpc.all_reduce_rms_norm` (device 0 adds the residual to its addend, the devices sum, each
    normalizes). It runs after `tpc-plan-memory` and keeps the offsets it chose: the norm and mul must
    follow the all-reduce directly (weights aside), so no other buffer is live in between, and the add
    folds in only when the residual's bytes are the sum's own or overlap them on no device (a
    collective's parameters must agree everywhere). The plan emitter maps the fused ops 1:1.

    ```mlir
    // Before (test/passes/fuse-norms.mlir; states and offsets elided):
    %a = tpc.add %y, %x {tpc.on_device = 0 : i64} : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %s = tpc.all_reduce %a : tensor<?x64xf32>
    %n = tpc.rms_norm %s {eps = 1.0e-05 : f32} : tensor<?x64xf32> -> tensor<?x64xf32>
    %h = tpc.mul %n, %w : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    // After:
    %s, %h = tpc.all_reduce_rms_norm %y residual %x weight %w {eps = 1.0e-05 : f32}
        : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
    ```
  }];
  let options = [RemarksOption];
}

#endif // TPC_PASSES_PASSES_TD
