//===- TpcOps.td - tpc dialect ops -------------------------*- tablegen -*-===//
//
// The ops of the tpc dialect, the contract between the importer, the passes, the plan emitter and the
// runtime. Three groups: model ops (what the importer emits), fused ops (what tpc-fuse-norms makes of
// them for the plan) and communication/placement ops (what partitioning inserts). Alphabetical within
// each group.
//
// Every op infers its result type (InferTypeOpAdaptor; tpc.weight and tpc.reshape excepted, whose result
// type is their input), and the inference itself rejects shape/type mismatches with a precise message, so
// builders and the parser share one set of checks. Every op is Pure except tpc.attention, which writes the
// KV cache.
//
//===----------------------------------------------------------------------===//
#ifndef TPC_DIALECTS_TPC_IR_TPCOPS_TD
#define TPC_DIALECTS_TPC_IR_TPCOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "dialects/tpc/IR/TpcBase.td"
include "dialects/tpc/IR/TpcEnums.td"
include "dialects/tpc/IR/TpcAttrs.td"
include "dialects/tpc/IR/TpcTypes.td"
include "dialects/tpc/IR/TpcInterfaces.td"

/// Base of all tpc ops: every op takes part in split-state propagation and states its own rules
/// (TpcInterfaces.cpp for the elementwise ops, TpcSplitRules.cpp for the rest).
class Tpc_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tpc_Dialect, mnemonic, !listconcat(traits, [
          DeclareOpInterfaceMethods<Tpc_SplitStateInterface, ["transfer", "requirements"]>])>;

/// Verifies an op by running its type inference with diagnostics on. Listed before InferTypeOpAdaptor:
/// traits verify in order, so a shape error is reported by the precise message of the inference rather
/// than by InferTypeOpInterface's generic "failed to infer returned types".
def Tpc_VerifyByInference : NativeOpTrait<"VerifyByInference"> {
  let cppNamespace = "::mlir::tpc::OpTrait";
}

/// A side-effect-free op whose result type is computed from its operands and attributes.
class Tpc_InferOp<string mnemonic, list<Trait> traits = []>
    : Tpc_Op<mnemonic, !listconcat([Pure, Tpc_VerifyByInference, InferTypeOpAdaptor], traits)>;

/// One-operand op with a readable `%x {attrs} : A -> B` form.
class Tpc_UnaryShapeOp<string mnemonic, list<Trait> traits = []>
    : Tpc_InferOp<mnemonic, traits> {
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
}

/// Broadcasting elementwise binary op on f32: `lhs` has the result shape, `rhs` broadcasts to it
/// (right-aligned; each rhs dim equals the lhs dim or is 1; rhs rank <= lhs rank).
class Tpc_BinaryOp<string mnemonic, list<Trait> traits = []>
    : Tpc_InferOp<mnemonic, traits> {
  let arguments = (ins Tpc_F32Tensor:$lhs, Tpc_F32Tensor:$rhs);
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

/// Communication op that keeps the global shape of its operand.
class Tpc_CommOp<string mnemonic, list<Trait> traits = []>
    // AllTypesMatch infers the result type from the operand (ODS adds InferTypeOpInterface).
    : Tpc_Op<mnemonic, !listconcat(traits, [Pure, AllTypesMatch<["x", "result"]>])> {
  let results = (outs Tpc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  // The states of operand and result, where annotated, must be the ones this collective converts.
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Model ops (alphabetical)
//===----------------------------------------------------------------------===//

def Tpc_AddOp : Tpc_BinaryOp<"add"> {
  let summary = "Elementwise sum with broadcasting of the right operand.";
  let description = [{
    `result = lhs + rhs`, where `rhs` broadcasts to the shape of `lhs` (right-aligned).

    ```mlir
    %y = tpc.add %x, %bias : (tensor<?x512xf32>, tensor<512xf32>) -> tensor<?x512xf32>
    ```
  }];
}

def Tpc_AddIdOp : Tpc_InferOp<"add_id"> {
  let summary = "Adds each selected expert's bias row: x + bias[ids] (per-expert biases).";
  let description = [{
    `x: tensor<?xKselxN>` (a `mul_mat_id` result), `bias: tensor<ExN>` (one row per expert),
    `ids: tensor<?xKselxi32>`: `result[t, k, :] = x[t, k, :] + bias[ids[t, k], :]` (ggml's ADD_ID,
    gpt-oss's expert biases). Split with its `mul_mat_id`: the columns of every expert with the bias's
    columns, whole experts with the bias's rows (a device adds only its experts' rows; the others are
    zero rows there and stay zero). A partial `x` (the down projection split on its reduction axis) takes
    the bias once: the op carries `tpc.on_device` and the other devices pass `x` through.

    ```mlir
    %y = tpc.add_id %down, %b_down, %sel
        : (tensor<?x2x64xf32>, tensor<8x64xf32>, tensor<?x2xi32>) -> tensor<?x2x64xf32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x, Tpc_F32Tensor:$bias, Tpc_I32Tensor:$ids);
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = "$x `,` $bias `,` $ids attr-dict `:` functional-type(operands, results)";
}

def Tpc_AttentionOp : Tpc_Op<"attention", [Tpc_VerifyByInference, InferTypeOpAdaptor,
                                            AttrSizedOperandSegments]> {
  let summary = "Causal multi-head attention over the KV cache, after appending the new keys/values.";
  let description = [{
    Appends `k`/`v` of every token at its position `pos` to `cache`, then computes for each query token
    `t` and query head `h` softmax attention over the cache positions `p'` with `p' <= pos[t]` (and
    `pos[t] - p' < sliding_window` when `sliding_window > 0`). Grouped-query attention: query head `h`
    uses KV head `h / (Hq / Hkv)`. Scores are `scale * q.k`, soft-capped by `softcap * tanh(s / softcap)`
    when `softcap > 0`. With `sinks` (one logit per query head) an extra sink logit joins each softmax
    and takes no value. With `gate` (of the result's shape) the result is multiplied by `sigmoid(gate)`
    elementwise (Qwen3.5's gated attention: the gate comes from the same projection as q, per head).

    Shapes: `q: tensor<?xHqxDk>`, `k: tensor<?xHkvxDk>`, `v: tensor<?xHkvxDv>`,
    `cache: !tpc.kv_cache<HkvxDkxDv>`, `pos: tensor<?xi32>`, `sinks: tensor<Hqxf32>`,
    `gate: tensor<?xHqxDvxf32>`, result `tensor<?xHqxDv>`.

    ```mlir
    %o = tpc.attention %q, %k, %v, %cache, %pos {scale = 0.125 : f32, sliding_window = 512 : i64}
        : (tensor<?x8x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<2x64x64>,
           tensor<?xi32>) -> tensor<?x8x64xf32>
    ```
  }];
  let arguments = (ins
    Tpc_F32Tensor:$q,
    Tpc_F32Tensor:$k,
    Tpc_F32Tensor:$v,
    // Appending writes the cache; reading it is the attention itself.
    Arg<Tpc_KvCacheType, "the layer's KV cache", [MemRead, MemWrite]>:$cache,
    Tpc_I32Tensor:$pos,
    Optional<Tpc_F32Tensor>:$sinks,
    Optional<Tpc_F32Tensor>:$gate,
    F32Attr:$scale,
    DefaultValuedAttr<I64Attr, "0">:$sliding_window,
    DefaultValuedAttr<F32Attr, "0.0f">:$softcap
  );
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $cache `,` $pos (`sinks` `(` $sinks^ `)`)? (`gate` `(` $gate^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// The operand index of the gate (after the optional sinks).
    unsigned gateIndex() { return getSinks() ? 6 : 5; }
  }];
}

def Tpc_ConcatOp : Tpc_InferOp<"concat"> {
  let summary = "Concatenation of tensors along one axis.";
  let description = [{
    All inputs have the same rank and element type and agree on every dimension except `axis`; the
    result's `axis` dimension is the sum of theirs (dynamic when any is dynamic).

    ```mlir
    %c = tpc.concat %a, %b {axis = 1 : i64}
        : (tensor<?x64xf32>, tensor<?x32xf32>) -> tensor<?x96xf32>
    ```
  }];
  let arguments = (ins Variadic<Tpc_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Tpc_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type(operands, results)";
}

def Tpc_DivOp : Tpc_BinaryOp<"div"> {
  let summary = "Elementwise quotient with broadcasting of the right operand.";
  let description = [{
    `result = lhs / rhs`, where `rhs` broadcasts to the shape of `lhs` (right-aligned). Normalizing
    router weights: divide the selected weights by their row sum.

    ```mlir
    %n = tpc.div %w, %s : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
    ```
  }];
}

def Tpc_ExpertCombineOp : Tpc_InferOp<"expert_combine"> {
  let summary = "Weighted sum over the selected experts (the fused MoE scale chain).";
  let description = [{
    `result[t, :] = sum_k (prod_j m_j[t, k]) * x[t, k, :]`. `x` is `tensor<?xKselxN>`; each multiplier
    is `tensor<?xKsel>` or `tensor<?xKselx1>` (router weights, per-expert scales gathered by expert id).
    Produced by `tpc-fuse-moe-scale-chain`, never by the importer; linear in `x`, so a partial `x` gives
    a partial result.

    ```mlir
    %y = tpc.expert_combine %down, %router_w, %scale
        : (tensor<?x2x64xf32>, tensor<?x2xf32>, tensor<?x2x1xf32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x, Variadic<Tpc_F32Tensor>:$multipliers);
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = "$x `,` $multipliers attr-dict `:` functional-type(operands, results)";
}

def Tpc_GetRowsOp : Tpc_InferOp<"get_rows"> {
  let summary = "Gathers rows of a table by index (embedding lookup).";
  let description = [{
    `result[i..., c...] = table[ids[i...], c...]`: the result shape is the ids' shape followed by the
    table's shape without its first dimension. Used for token embeddings and for per-expert scales
    gathered by expert id.

    ```mlir
    %e = tpc.get_rows %tok_embd, %tokens : (tensor<512x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    %s = tpc.get_rows %exp_scale, %sel : (tensor<8xf32>, tensor<?x2xi32>) -> tensor<?x2xf32>
    ```
  }];
  let arguments = (ins Tpc_Tensor:$table, Tpc_I32Tensor:$ids);
  let results = (outs Tpc_Tensor:$result);
  let assemblyFormat = "$table `,` $ids attr-dict `:` functional-type(operands, results)";
}

def Tpc_GluOp : Tpc_InferOp<"glu"> {
  let summary = "Gated linear unit: fn(gate) * up.";
  let description = [{
    Two-operand form: `result = fn(gate) * up`, both of the same shape; `swiglu_oai` (gpt-oss) is
    `min(gate, 7) * sigmoid(1.702 * min(gate, 7)) * (clamp(up, -7, 7) + 1)`. One-operand form: the last axis
    of the operand is `[gate | up]` (a merged gate_up projection), split into halves; the result's last
    dimension is half of the operand's.

    ```mlir
    %h = tpc.glu silu %gate, %up : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
    %g = tpc.glu gelu_tanh %gu : (tensor<?x256xf32>) -> tensor<?x128xf32>
    ```
  }];
  let arguments = (ins Tpc_GluFn:$fn, Tpc_F32Tensor:$gate, Optional<Tpc_F32Tensor>:$up);
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = "$fn $gate (`,` $up^)? attr-dict `:` functional-type(operands, results)";
}

def Tpc_KvCacheOp : Tpc_InferOp<"kv_cache"> {
  let summary = "The KV cache of one layer: state that lives across calls.";
  let description = [{
    Names the cache of layer `layer`; the runtime allocates it for the context length chosen at run
    time. The result type repeats `n_head_kv`, `head_dim_k` and `head_dim_v`.

    ```mlir
    %cache = tpc.kv_cache {head_dim_k = 64 : i64, head_dim_v = 64 : i64, layer = 3 : i64,
                           n_head_kv = 2 : i64} : !tpc.kv_cache<2x64x64>
    ```
  }];
  let arguments = (ins I64Attr:$layer, I64Attr:$n_head_kv, I64Attr:$head_dim_k, I64Attr:$head_dim_v);
  let results = (outs Tpc_KvCacheType:$result);
  // qualified: print `!tpc.kv_cache<...>`, not the stripped `<...>`.
  let assemblyFormat = "attr-dict `:` qualified(type($result))";
}

def Tpc_MatmulOp : Tpc_InferOp<"matmul"> {
  let summary = "Matrix product with a transposed weight: y = x . w^T.";
  let description = [{
    `x: tensor<?x...xK>`, `w: tensor<NxK>` (the logical row-major shape of a ggml weight with
    `ne = [K, N]`), result `tensor<?x...xN>`.

    ```mlir
    %q = tpc.matmul %x, %wq : (tensor<?x256xf32>, tensor<512x256xf32>) -> tensor<?x512xf32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x, Tpc_F32Tensor:$w);
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = "$x `,` $w attr-dict `:` functional-type(operands, results)";
}

def Tpc_MulOp : Tpc_BinaryOp<"mul"> {
  let summary = "Elementwise product with broadcasting of the right operand.";
  let description = [{
    `result = lhs * rhs`, where `rhs` broadcasts to the shape of `lhs` (right-aligned). The norm weight
    is a `tpc.mul` after `tpc.rms_norm`.

    ```mlir
    %y = tpc.mul %n, %norm_w : (tensor<?x256xf32>, tensor<256xf32>) -> tensor<?x256xf32>
    ```
  }];
}

def Tpc_MulMatIdOp : Tpc_InferOp<"mul_mat_id"> {
  let summary = "Per-token matmul with the experts selected by id.";
  let description = [{
    `w: tensor<ExNxK>` holds `E` expert matrices, `ids: tensor<?xKselxi32>` the selected experts per
    token. `x` is `tensor<?xK>` (the same input for every selected expert) or `tensor<?xKselxK>` (one
    input per selected expert). `result[t, k, :] = w[ids[t, k]] . x[t(, k)]`, shape `tensor<?xKselxN>`.

    ```mlir
    %up = tpc.mul_mat_id %x, %w_up, %sel
        : (tensor<?x64xf32>, tensor<8x128x64xf32>, tensor<?x2xi32>) -> tensor<?x2x128xf32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x, Tpc_F32Tensor:$w, Tpc_I32Tensor:$ids);
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = "$x `,` $w `,` $ids attr-dict `:` functional-type(operands, results)";
}

def Tpc_PermuteOp : Tpc_UnaryShapeOp<"permute"> {
  let summary = "Permutes the axes of a tensor.";
  let description = [{
    `result.dim(i) = x.dim(perm[i])`; `perm` is a permutation of `[0, rank)`.

    ```mlir
    %t = tpc.permute %x {perm = array<i64: 1, 0, 2>} : tensor<?x8x64xf32> -> tensor<8x?x64xf32>
    ```
  }];
  let arguments = (ins Tpc_Tensor:$x, DenseI64ArrayAttr:$perm);
  let results = (outs Tpc_Tensor:$result);
}

def Tpc_ReshapeOp : Tpc_Op<"reshape", [Pure]> {
  let summary = "Reinterprets a tensor with a new shape of the same element count.";
  let description = [{
    Row-major reshape. The token dimension stays dynamic dim 0: a dynamic input has a dynamic result
    dim 0, and the product of the remaining dimensions must match. Static inputs need equal element
    counts. The result type is explicit (it cannot be inferred).

    ```mlir
    %h = tpc.reshape %q : tensor<?x512xf32> -> tensor<?x8x64xf32>
    ```
  }];
  let arguments = (ins Tpc_Tensor:$x);
  let results = (outs Tpc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  // Element count and the dynamic token dimension are checked here, since nothing infers the result.
  let hasVerifier = 1;
}

def Tpc_RmsNormOp : Tpc_UnaryShapeOp<"rms_norm"> {
  let summary = "RMS normalization over the last axis, without weight.";
  let description = [{
    `result = x / sqrt(mean(x^2, last axis) + eps)`. The norm weight is a following `tpc.mul`.

    ```mlir
    %n = tpc.rms_norm %x {eps = 1.0e-06 : f32} : tensor<?x256xf32> -> tensor<?x256xf32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x, F32Attr:$eps);
  let results = (outs Tpc_F32Tensor:$result);
}

def Tpc_RopeOp : Tpc_InferOp<"rope"> {
  let summary = "Rotary position embedding of the first n_dims elements of every head.";
  let description = [{
    `x: tensor<?xHxD>` with `D >= n_dims` (only the first `n_dims` elements are rotated),
    `pos: tensor<?xi32>`, optional `freq_factors: tensor<(n_dims/2)xf32>`; result has the shape of `x`.
    `theta_i = pos * freq_scale * base^(-2i/n_dims) / freq_factors[i]`. Mode `normal` rotates pairs
    `(2i, 2i+1)`, mode `neox` pairs `(i, i + n_dims/2)`.

    YaRN (`ext_factor > 0`, llama.cpp's `rope_yarn`): pair i mixes the interpolated angle with the
    extrapolated one (`pos * base^(-2i/n_dims)`), `theta_i = interp (1 - r_i) + extrap r_i`, with the ramp
    `r_i = ext_factor (1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1))` between the correction dims
    `lo = max(0, floor(c(beta_fast)))`, `hi = min(n_dims - 1, ceil(c(beta_slow)))`,
    `c(b) = n_dims ln(orig_ctx / (2 pi b)) / (2 ln base)`; cos and sin are scaled by
    `attn_factor (1 + 0.1 ln(1 / freq_scale))`. With `ext_factor = 0` they are scaled by `attn_factor`.

    ```mlir
    %r = tpc.rope neox %q, %pos {base = 1.0e+04 : f32, n_dims = 64 : i64}
        : (tensor<?x8x64xf32>, tensor<?xi32>) -> tensor<?x8x64xf32>
    ```
  }];
  let arguments = (ins
    Tpc_RopeMode:$mode,
    Tpc_F32Tensor:$x,
    Tpc_I32Tensor:$pos,
    Optional<Tpc_F32Tensor>:$freq_factors,
    I64Attr:$n_dims,
    F32Attr:$base,
    DefaultValuedAttr<F32Attr, "1.0f">:$freq_scale,
    // YaRN (see the description); the defaults are plain RoPE.
    DefaultValuedAttr<F32Attr, "0.0f">:$ext_factor,
    DefaultValuedAttr<F32Attr, "1.0f">:$attn_factor,
    DefaultValuedAttr<F32Attr, "32.0f">:$beta_fast,
    DefaultValuedAttr<F32Attr, "1.0f">:$beta_slow,
    DefaultValuedAttr<I64Attr, "0">:$orig_ctx
  );
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = [{
    $mode $x `,` $pos (`,` $freq_factors^)? attr-dict `:` functional-type(operands, results)
  }];
}

def Tpc_ScaleOp : Tpc_UnaryShapeOp<"scale",
    []> {
  let summary = "Multiplies every element by a constant.";
  let description = [{
    `result = value * x`. Linear, so a partial input gives a partial result.

    ```mlir
    %s = tpc.scale %x {value = 1.600000e+01 : f32} : tensor<?x256xf32> -> tensor<?x256xf32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x, F32Attr:$value);
  let results = (outs Tpc_F32Tensor:$result);
}

def Tpc_SelectRowsOp : Tpc_InferOp<"select_rows"> {
  let summary = "Keeps the rows of the call whose logits are returned (llama.cpp's inp_out_ids).";
  let description = [{
    `result[i, c...] = x[rows[i], c...]`: the rows of `x` named by `rows`, in that order. The importer
    applies it to the last hidden state before the final norm, with `rows` the third argument of
    `@forward`, so the norm, the output projection, a soft-cap and the gather of split logits run only on
    the rows a caller asks for (one per sequence when generating, all of them for a logits dump). Dim 0 of
    the result is the call's output-rows dimension (`-2` in the plan), which the plan sizes by
    `max-output-rows`, not by `max-batch`; every value computed from it has that dim 0 too.

    Split rules: `x` mirrored or split off axis 0, `rows` mirrored; the result keeps `x`'s state (a gather
    of whole rows moves no column).

    ```mlir
    %h = tpc.select_rows %x, %rows : (tensor<?x256xf32>, tensor<?xi32>) -> tensor<?x256xf32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x, Tpc_I32Tensor:$rows);
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = "$x `,` $rows attr-dict `:` functional-type(operands, results)";
}

def Tpc_SoftcapOp : Tpc_UnaryShapeOp<"softcap",
    []> {
  let summary = "Soft-caps every element: cap * tanh(x / cap).";
  let description = [{
    Bounds logits smoothly to `(-cap, cap)`; `cap > 0`.

    ```mlir
    %l = tpc.softcap %logits {cap = 3.000000e+01 : f32} : tensor<?x512xf32> -> tensor<?x512xf32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x, F32Attr:$cap);
  let results = (outs Tpc_F32Tensor:$result);
}

def Tpc_SoftmaxOp : Tpc_UnaryShapeOp<"softmax"> {
  let summary = "Softmax over the last axis.";
  let description = [{
    `result[..., i] = exp(x[..., i]) / sum_j exp(x[..., j])` (router probabilities).

    ```mlir
    %p = tpc.softmax %router : tensor<?x8xf32> -> tensor<?x8xf32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x);
  let results = (outs Tpc_F32Tensor:$result);
}

def Tpc_SumOp : Tpc_UnaryShapeOp<"sum"> {
  let summary = "Sum over one axis.";
  let description = [{
    Sums `x` over `axis`; with `keep_dim` the axis stays with size 1, otherwise it is removed. Sum over
    the selected experts is `axis = 1`; ggml's sum_rows is `axis = last, keep_dim = true`.

    ```mlir
    %y = tpc.sum %x {axis = 1 : i64} : tensor<?x2x64xf32> -> tensor<?x64xf32>
    %r = tpc.sum %w {axis = 1 : i64, keep_dim = true} : tensor<?x2xf32> -> tensor<?x1xf32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x, I64Attr:$axis, DefaultValuedAttr<BoolAttr, "false">:$keep_dim);
  let results = (outs Tpc_F32Tensor:$result);
}

def Tpc_TakeAlongOp : Tpc_InferOp<"take_along"> {
  let summary = "Per-row gather along an axis.";
  let description = [{
    `result[t, k] = x[t, ids[t, k]]` for `axis = 1`: `x: tensor<?xExf32>`, `ids: tensor<?xKxi32>`,
    result `tensor<?xKxf32>` (the router weights of the selected experts). In general `x` and `ids` have
    the same rank and agree on every dimension but `axis`; the result has the shape of `ids`.

    ```mlir
    %w = tpc.take_along %probs, %sel {axis = 1 : i64}
        : (tensor<?x8xf32>, tensor<?x2xi32>) -> tensor<?x2xf32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x, Tpc_I32Tensor:$ids, I64Attr:$axis);
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = "$x `,` $ids attr-dict `:` functional-type(operands, results)";
}

def Tpc_TopKOp : Tpc_InferOp<"top_k"> {
  let summary = "Indices of the k largest elements of the last axis, descending.";
  let description = [{
    `x: tensor<?xExf32>` gives `tensor<?xkxi32>`, largest first; ties go to the lower index.
    `1 <= k <= E`.

    ```mlir
    %sel = tpc.top_k %probs {k = 2 : i64} : tensor<?x8xf32> -> tensor<?x2xi32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x, I64Attr:$k);
  let results = (outs Tpc_I32Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
}

def Tpc_UnaryOp : Tpc_InferOp<"unary",
    []> {
  let summary = "Elementwise activation function.";
  let description = [{
    Applies `fn` (silu, gelu, gelu_tanh, tanh, relu, exp, sigmoid) to every element.

    ```mlir
    %a = tpc.unary silu %x : tensor<?x128xf32> -> tensor<?x128xf32>
    ```
  }];
  let arguments = (ins Tpc_UnaryFn:$fn, Tpc_F32Tensor:$x);
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = "$fn $x attr-dict `:` type($x) `->` type($result)";
}

def Tpc_ViewOp : Tpc_UnaryShapeOp<"view"> {
  let summary = "A contiguous sub-range of one axis.";
  let description = [{
    `result = x[..., offset : offset + size, ...]` along `axis` (splitting a fused QKV projection).
    The axis must be static, `offset >= 0`, `size >= 1` and `offset + size <= dim(axis)`.

    ```mlir
    %k = tpc.view %qkv {axis = 1 : i64, offset = 512 : i64, size = 128 : i64}
        : tensor<?x768xf32> -> tensor<?x128xf32>
    ```
  }];
  let arguments = (ins Tpc_Tensor:$x, I64Attr:$axis, I64Attr:$offset, I64Attr:$size);
  let results = (outs Tpc_Tensor:$result);
}

def Tpc_WeightOp : Tpc_Op<"weight", [Pure]> {
  let summary = "A weight tensor of the GGUF file, named by its tensor name.";
  let description = [{
    The result has the logical row-major shape, the reverse of ggml's `ne` (`ne = [256, 512]` gives
    `tensor<512x256xf32>`, an expert tensor `ne = [256, 512, 8]` gives `tensor<8x512x256xf32>`). The
    element type is always f32; `ggml_type` is the stored type ("f32", "q8_0", "q4_K", ...). The shape is
    static and positive and its innermost dimension a whole number of the type's blocks. The importer's
    layer stamp (`tpc.layer`, see the dialect) prints before the dictionary.

    ```mlir
    %w = tpc.weight layer 0 {ggml_type = "q4_K", name = "blk.0.attn_q.weight"} : tensor<512x256xf32>
    %e = tpc.weight {ggml_type = "q8_0", name = "token_embd.weight"} : tensor<512x256xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name, StrAttr:$ggml_type);
  let results = (outs Tpc_F32Tensor:$result);
  // `tpc.weight [layer N | layer "output"] {ggml_type = ..., name = ...} : type`: the importer's layer stamp
  // (tpc.layer) is printed before the dictionary, so the dictionary reads as the GGUF tensor alone.
  let hasCustomAssemblyFormat = 1;
  // The ggml type name and the block size are checked against runtime/ggml's type table.
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Linear-attention (Gated DeltaNet) ops: the recurrent layers of hybrid models (TpcRecurrentOps.td)
//===----------------------------------------------------------------------===//

include "dialects/tpc/IR/TpcRecurrentOps.td"

//===----------------------------------------------------------------------===//
// Fused ops: produced by tpc-fuse-norms from the ops above, never by the importer (alphabetical)
//===----------------------------------------------------------------------===//

def Tpc_AllReduceRmsNormOp : Tpc_Op<"all_reduce_rms_norm",
    [Pure, AttrSizedOperandSegments, Tpc_VerifyByInference, InferTypeOpAdaptor]> {
  let summary = "A layer boundary in one collective: [residual +] all-reduce, then RMS norm [x weight].";
  let description = [{
    `sum = all_reduce(x + (device == 0 ? residual : 0))` and `result = rms_norm(sum, eps) * weight`:
    `x` is partial, `residual` (optional, added on device 0 only) and `weight` (optional, the f32 norm
    weight of `x`'s last dimension) are mirrored; both results are mirrored and have `x`'s type. `sum`
    is the residual stream the next layer adds to, `result` what it reads. Produced by `tpc-fuse-norms`
    from `add {tpc.on_device = 0}` -> `all_reduce` -> `rms_norm` [-> `mul`]; one plan step
    (AllReduceRmsNorm), so each backend may fuse the sum and the norm.

    ```mlir
    %sum, %n = tpc.all_reduce_rms_norm %x residual %r weight %w {eps = 1.0e-05 : f32}
        : (tensor<?x256xf32>, tensor<?x256xf32>, tensor<256xf32>) -> (tensor<?x256xf32>, tensor<?x256xf32>)
    ```
    With 2 devices (a row of 2 elements, no weight):
    ```
    x (partial)    residual          sum (mirrored)      result (mirrored)
    dev 0 [1 2]    [10 20]    -->    [14 26] on both     rms_norm([14 26]) on both
    dev 1 [3 4]    (unused)
    ```
  }];
  let arguments = (ins
    Tpc_F32Tensor:$x,
    Optional<Tpc_F32Tensor>:$residual,
    Optional<Tpc_F32Tensor>:$weight,
    F32Attr:$eps
  );
  let results = (outs Tpc_F32Tensor:$sum, Tpc_F32Tensor:$result);
  let assemblyFormat = [{
    $x (`residual` $residual^)? (`weight` $weight^)? attr-dict `:` functional-type(operands, results)
  }];
  // The states, where annotated, must be the ones the collective converts (x partial, the rest mirrored).
  let hasVerifier = 1;
}

def Tpc_WeightedRmsNormOp : Tpc_InferOp<"weighted_rms_norm"> {
  let summary = "RMS normalization over the last axis times a norm weight (rms_norm + mul in one op).";
  let description = [{
    `result = x / sqrt(mean(x^2, last axis) + eps) * weight`, where `weight` has the size of the last
    dimension of `x`. Produced by `tpc-fuse-norms` from a `tpc.rms_norm` whose only use is a `tpc.mul`
    by a mirrored f32 norm weight; the importer keeps ggml's two ops.

    ```mlir
    %n = tpc.weighted_rms_norm %x, %w {eps = 1.0e-06 : f32}
        : (tensor<?x256xf32>, tensor<256xf32>) -> tensor<?x256xf32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x, Tpc_F32Tensor:$weight, F32Attr:$eps);
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = "$x `,` $weight attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Communication and placement ops (alphabetical)
//===----------------------------------------------------------------------===//

def Tpc_AllGatherOp : Tpc_CommOp<"all_gather"> {
  let summary = "Gathers a split value on every device (split -> mirrored).";
  let description = [{
    Operand split along `axis`, result mirrored; global shapes in and out are the same. Device `d`
    contributes its `sizes[d]` slice.

    ```mlir
    %m = tpc.all_gather %x {axis = 1 : i64} : tensor<?x512xf32>
    ```
    With 2 devices, `sizes = [2, 2]` along axis 1:
    ```
    operand                       result
    +-------+-------+             +-------------+
    |  1  2 |  3  4 |     -->     |  1  2  3  4 | <- device 0
    |  5  6 |  7  8 |             |  5  6  7  8 |
    +-------+-------+             +-------------+
     dev 0   dev 1                |  1  2  3  4 | <- device 1
                                  |  5  6  7  8 |
                                  +-------------+
    ```
  }];
  let arguments = (ins Tpc_Tensor:$x, I64Attr:$axis);
}

def Tpc_AllReduceOp : Tpc_Op<"all_reduce", [Pure, Tpc_VerifyByInference, InferTypeOpAdaptor]> {
  let summary = "Sums partial values over all devices (partial -> mirrored).";
  let description = [{
    Each operand holds, on every device, an addend of the value (`partial`); each result is the sum,
    mirrored on every device. Several operands make one bucketed collective; result `i` has the type of
    operand `i`.

    ```mlir
    %y = tpc.all_reduce %x : tensor<?x256xf32>
    %a, %b = tpc.all_reduce %x, %r : tensor<?x256xf32>, tensor<?x256xf32>
    ```
    With 2 devices:
    ```
    operand (partial)             result (mirrored)
    +-------------+               +-------------+
    |  1  2  3  4 | <- device 0   | 11 22 33 44 | <- device 0
    +-------------+       -->     +-------------+
    | 10 20 30 40 | <- device 1   | 11 22 33 44 | <- device 1
    +-------------+               +-------------+
    ```
  }];
  let arguments = (ins Variadic<Tpc_Tensor>:$inputs);
  let results = (outs Variadic<Tpc_Tensor>:$results);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs)";
  let hasVerifier = 1;
}

def Tpc_BackendCopyOp : Tpc_CommOp<"backend_copy"> {
  let summary = "Moves a value between device memory and host memory, keeping its split state.";
  let description = [{
    A placement change (`from`, `to` are "device" or "host" and differ). Each device copies only what it
    holds, so a split value stays split (a KV cache kept on the host with `--no-kv-offload`).

    ```mlir
    %h = tpc.backend_copy %x {from = "device", to = "host"} : tensor<?x256xf32>
    ```
    With 2 devices and a split operand:
    ```
    device 0 memory  [ a0 ]  -->  device 0's host memory  [ a0 ]
    device 1 memory  [ a1 ]  -->  device 1's host memory  [ a1 ]
    ```
  }];
  let arguments = (ins Tpc_Tensor:$x, StrAttr:$from, StrAttr:$to);
}

def Tpc_ReduceScatterOp : Tpc_CommOp<"reduce_scatter"> {
  let summary = "Sums partial values and leaves each device its slice (partial -> split).";
  let description = [{
    Operand partial, result split along `axis`: device `d` receives the sum restricted to its
    `sizes[d]` slice.

    ```mlir
    %s = tpc.reduce_scatter %x {axis = 1 : i64} : tensor<?x4xf32>
    ```
    With 2 devices, `sizes = [2, 2]` along axis 1:
    ```
    operand (partial)             result (split)
    +-------------+               +-------+-------+
    |  1  2  3  4 | <- device 0   | 11 22 | 33 44 |
    +-------------+       -->     +-------+-------+
    | 10 20 30 40 | <- device 1    dev 0   dev 1
    +-------------+
    ```
  }];
  let arguments = (ins Tpc_Tensor:$x, I64Attr:$axis);
}

def Tpc_SliceOp : Tpc_CommOp<"slice"> {
  let summary = "Keeps each device's slice of a mirrored value (mirrored -> split, no traffic).";
  let description = [{
    Operand mirrored, result split along `axis`: each device keeps its `sizes[d]` slice of the copy it
    already has, so nothing moves between devices.

    ```mlir
    %s = tpc.slice %x {axis = 1 : i64} : tensor<?x4xf32>
    ```
    With 2 devices, `sizes = [2, 2]` along axis 1:
    ```
    operand (mirrored)            result (split)
    +-------------+               +-------+-------+
    |  1  2  3  4 | <- device 0   |  1  2 |  3  4 |
    +-------------+       -->     +-------+-------+
    |  1  2  3  4 | <- device 1    dev 0   dev 1
    +-------------+
    ```
  }];
  let arguments = (ins Tpc_Tensor:$x, I64Attr:$axis);
}

def Tpc_StageTransferOp : Tpc_CommOp<"stage_transfer"> {
  let summary = "Hands a value from one pipeline stage's devices to another stage's (send + receive).";
  let description = [{
    A pipeline plan (`tpc compile --stages S`) runs a contiguous range of layers on each stage, and each
    stage splits its layers over its own devices exactly as a one-stage plan does. Where a value computed
    on stage `from` is read on stage `to`, this op stands between them: device `j` of stage `from` sends
    its part to device `j` of stage `to` (a send and a receive step in the plan). It moves whole parts and
    never sums, so the operand is mirrored or split (never partial or routed) and the result keeps the
    operand's state: both stages split the same way. Inserted by `tpc-insert-stage-transfers` from the
    stage assignment; `from` and `to` differ (the logits return from the last stage to stage 0, whose
    device 0 hands them to the caller).

    ```mlir
    %h = tpc.stage_transfer %x {from = 0 : i64, to = 1 : i64} : tensor<?x640xf32>
    ```
    With 2 stages of 2 devices each and a mirrored operand:
    ```
    stage 0 device 0 [ x ]  -->  stage 1 device 0 [ x ]
    stage 0 device 1 [ x ]  -->  stage 1 device 1 [ x ]
    ```
  }];
  let arguments = (ins Tpc_Tensor:$x, I64Attr:$from, I64Attr:$to);
}

#endif // TPC_DIALECTS_TPC_IR_TPCOPS_TD
