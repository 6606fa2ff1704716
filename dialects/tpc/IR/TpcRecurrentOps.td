//===- TpcRecurrentOps.td - linear-attention ops of the tpc dialect -*- tablegen -*-===//
//
// The Gated DeltaNet ops of hybrid models (Qwen3.5 / Qwen3.6), alphabetical, included by TpcOps.td after
// the model ops (they use its op classes); their inference is in TpcRecurrentOps.cpp, their split rules in
// TpcSplitRules.cpp. A file of their own to keep TpcOps.td under ~800 lines.
//
//===----------------------------------------------------------------------===//
#ifndef TPC_DIALECTS_TPC_IR_TPCRECURRENTOPS_TD
#define TPC_DIALECTS_TPC_IR_TPCRECURRENTOPS_TD

def Tpc_DeltaNetOp : Tpc_Op<"delta_net", [Tpc_VerifyByInference, InferTypeOpAdaptor]> {
  let summary = "The gated delta rule over each sequence's tokens, with state across calls.";
  let description = [{
    Per value head `h` (reading key head `h % Hk`) and per sequence, over its tokens in order, with `S`
    the head's `Dk x Dv` state: `S <- exp(g) S; d = beta (v - S^T k); S <- S + k d^T;
    result = S^T (scale q)`. `q` and `k` are used as given (the importer L2-normalises them), `g` is the
    log-decay and `beta` the write strength (after its sigmoid). A sequence whose first token of the
    call is at position 0 starts from a zero state. The state lives in `state` (read and written).

    Shapes: `q, k: tensor<?xHkxDk>`, `v: tensor<?xHvxDv>`, `g, beta: tensor<?xHv>`,
    `state: !tpc.recurrent_state<HkxHvxDkxDvxK>`, `pos: tensor<?xi32>`, result `tensor<?xHvxDv>`.

    ```mlir
    %o = tpc.delta_net %q, %k, %v, %g, %beta, %s, %pos {scale = 0.125 : f32}
        : (tensor<?x2x64xf32>, tensor<?x2x64xf32>, tensor<?x4x64xf32>, tensor<?x4xf32>, tensor<?x4xf32>,
           !tpc.recurrent_state<2x4x64x64x4>, tensor<?xi32>) -> tensor<?x4x64xf32>
    ```
  }];
  let arguments = (ins
    Tpc_F32Tensor:$q,
    Tpc_F32Tensor:$k,
    Tpc_F32Tensor:$v,
    Tpc_F32Tensor:$g,
    Tpc_F32Tensor:$beta,
    Arg<Tpc_RecurrentStateType, "the layer's recurrent state", [MemRead, MemWrite]>:$state,
    Tpc_I32Tensor:$pos,
    F32Attr:$scale
  );
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $g `,` $beta `,` $state `,` $pos attr-dict `:` functional-type(operands, results)
  }];
}

def Tpc_GatedRmsNormOp : Tpc_InferOp<"gated_rms_norm"> {
  let summary = "RMS normalization over the last axis, times a weight and a SiLU gate.";
  let description = [{
    `result = x / sqrt(mean(x^2, last axis) + eps) * w * silu(z)`: the output norm of a Gated DeltaNet
    layer, per value head. `w` has the last dimension of `x`; `z` has the shape of `x`.

    ```mlir
    %n = tpc.gated_rms_norm %x, %w, %z {eps = 1.0e-06 : f32}
        : (tensor<?x4x64xf32>, tensor<64xf32>, tensor<?x4x64xf32>) -> tensor<?x4x64xf32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x, Tpc_F32Tensor:$w, Tpc_F32Tensor:$z, F32Attr:$eps);
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = "$x `,` $w `,` $z attr-dict `:` functional-type(operands, results)";
}

def Tpc_L2NormOp : Tpc_UnaryShapeOp<"l2_norm"> {
  let summary = "L2 normalization over the last axis.";
  let description = [{
    `result = x / max(sqrt(sum(x^2, last axis)), eps)` (ggml's l2_norm).

    ```mlir
    %n = tpc.l2_norm %x {eps = 1.0e-06 : f32} : tensor<?x2x64xf32> -> tensor<?x2x64xf32>
    ```
  }];
  let arguments = (ins Tpc_F32Tensor:$x, F32Attr:$eps);
  let results = (outs Tpc_F32Tensor:$result);
}

def Tpc_RecurrentStateOp : Tpc_InferOp<"recurrent_state"> {
  let summary = "The recurrent state of one linear-attention layer: state that lives across calls.";
  let description = [{
    Names the state of layer `layer`; the runtime keeps one per sequence. The result type repeats the
    key and value head counts, the head sizes and the conv kernel width.

    ```mlir
    %s = tpc.recurrent_state {conv_kernel = 4 : i64, head_dim_k = 64 : i64, head_dim_v = 64 : i64,
                              layer = 0 : i64, n_key_heads = 2 : i64, n_value_heads = 4 : i64}
        : !tpc.recurrent_state<2x4x64x64x4>
    ```
  }];
  let arguments = (ins I64Attr:$layer, I64Attr:$n_key_heads, I64Attr:$n_value_heads, I64Attr:$head_dim_k,
                       I64Attr:$head_dim_v, I64Attr:$conv_kernel);
  let results = (outs Tpc_RecurrentStateType:$result);
  let assemblyFormat = "attr-dict `:` qualified(type($result))";
}

def Tpc_SsmConvOp : Tpc_Op<"ssm_conv", [Tpc_VerifyByInference, InferTypeOpAdaptor]> {
  let summary = "Causal depthwise convolution over each sequence's tokens, with state across calls.";
  let description = [{
    `result[t, c] = sum_j w[c, j] * xs[t + j, c]` with `xs` the sequence's last `K - 1` inputs (the conv
    state of `state`, zeros where the sequence's first token of the call is at position 0) followed by
    its tokens of this call: tap `K - 1` multiplies the token itself. The state keeps each sequence's last
    `K - 1` inputs. `x` holds the layer's `C` conv channels: q and k of every key head, then v of every
    value head (`C = 2 Hk Dk + Hv Dv` of the state's type).

    ```mlir
    %y = tpc.ssm_conv %x, %w, %s, %pos
        : (tensor<?x512xf32>, tensor<512x4xf32>, !tpc.recurrent_state<2x4x64x64x4>, tensor<?xi32>)
        -> tensor<?x512xf32>
    ```
  }];
  let arguments = (ins
    Tpc_F32Tensor:$x,
    Tpc_F32Tensor:$w,
    Arg<Tpc_RecurrentStateType, "the layer's recurrent state", [MemRead, MemWrite]>:$state,
    Tpc_I32Tensor:$pos
  );
  let results = (outs Tpc_F32Tensor:$result);
  let assemblyFormat = "$x `,` $w `,` $state `,` $pos attr-dict `:` functional-type(operands, results)";
}

#endif // TPC_DIALECTS_TPC_IR_TPCRECURRENTOPS_TD
