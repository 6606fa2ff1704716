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

#endif // TPC_DIALECTS_TPC_IR_TPCTYPES_TD
