//===- TpcTypes.td - tpc dialect types ---------------------*- tablegen -*-===//
//
// The KV-cache type: the per-layer state that lives across calls of the forward function. Its context
// length is a run-time choice, so the type only records the head count and head sizes.
//
//===----------------------------------------------------------------------===//
#ifndef TPC_DIALECTS_TPC_IR_TPCTYPES_TD
#define TPC_DIALECTS_TPC_IR_TPCTYPES_TD

include "dialects/tpc/IR/TpcBase.td"

//===----------------------------------------------------------------------===//
// Types (alphabetical)
//===----------------------------------------------------------------------===//

def Tpc_KvCacheType : TypeDef<Tpc_Dialect, "KvCache"> {
  let mnemonic = "kv_cache";
  // Also the constraint message: "operand #3 must be the key/value cache of one attention layer".
  let summary = "the key/value cache of one attention layer";
  let description = [{
    `!tpc.kv_cache<HkvxDkxDv>`: `Hkv` KV heads, keys of `Dk` elements and values of `Dv` elements per
    head. The number of cached positions (the context length) is chosen at run time.

    ```mlir
    %cache = tpc.kv_cache {head_dim_k = 64, head_dim_v = 64, layer = 3, n_head_kv = 2}
        : !tpc.kv_cache<2x64x64>
    ```

    For split states the cache behaves like a tensor of shape `[Hkv, context, Dk|Dv]`: only axis 0
    (KV heads) can be split.
  }];
  let parameters = (ins "int64_t":$nHeadKv, "int64_t":$headDimK, "int64_t":$headDimV);
  // `2x64x64` lexes as one dimension list, which the declarative format cannot parse.
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Tpc_RecurrentStateType : TypeDef<Tpc_Dialect, "RecurrentState"> {
  let mnemonic = "recurrent_state";
  let summary = "the recurrent state of one linear-attention (Gated DeltaNet) layer";
  let description = [{
    `!tpc.recurrent_state<HkxHvxDkxDvxK>`: per sequence, the conv state (the last `K - 1` inputs of the
    layer's `C = 2 Hk Dk + Hv Dv` conv channels) and the delta-rule state (`Hv` matrices of `Dk x Dv`).
    Value head `h` reads key head `h % Hk` (value heads are tiled over the key heads). It does not grow
    with the context; the runtime keeps one per sequence.

    For split states the state behaves like a tensor whose axis 0 is the `Hk` key heads: a device holding
    key heads `[a, b)` holds their q/k conv channels, the value heads `{j Hk + g : g in [a, b), j < Hv/Hk}`
    with their conv channels, and those value heads' delta-rule states.

    ```mlir
    %s = tpc.recurrent_state {conv_kernel = 4, head_dim_k = 128, head_dim_v = 128, layer = 0,
                              n_key_heads = 16, n_value_heads = 32} : !tpc.recurrent_state<16x32x128x128x4>
    ```
  }];
  let parameters = (ins "int64_t":$nKeyHeads, "int64_t":$nValueHeads, "int64_t":$headDimK,
                        "int64_t":$headDimV, "int64_t":$convKernel);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Conv channels: q and k of every key head, then v of every value head.
    int64_t getConvChannels() const { return 2 * getNKeyHeads() * getHeadDimK() + getNValueHeads() * getHeadDimV(); }
  }];
}

#endif // TPC_DIALECTS_TPC_IR_TPCTYPES_TD
