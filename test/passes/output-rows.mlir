// RUN: tpc-opt %s '--tpc-pipeline=devices=2 max-batch=16 max-output-rows=2' | FileCheck %s --check-prefixes=CHECK,TWO
// RUN: tpc-opt %s '--tpc-pipeline=devices=2 max-batch=16 max-output-rows=16' | FileCheck %s --check-prefixes=CHECK,SIXTEEN
// RUN: tpc-opt %s '--tpc-pipeline=devices=2 max-batch=16 max-output-rows=99' | FileCheck %s --check-prefix=CAPPED
/// The output head after tpc.select_rows (what the importer builds): the last hidden state (tokens, 64
/// wide) is gathered to the call's output rows, then the final norm and the 4096-row projection run on
/// those rows only.
///
/// Split states: select_rows reads the all-reduced (mirrored) residual and the mirrored row indices, and
/// its result is mirrored; the norm stays mirrored, the projection is column parallel (its 4096 rows split
/// 2048 + 2048) and its result is gathered on the row dimension's values.
// CHECK-LABEL: module attributes
// TWO-SAME: tpc.activation_bytes = array<i64: 16896, 16896>
// SIXTEEN-SAME: tpc.activation_bytes = array<i64: 135168, 135168>
// TWO-SAME: tpc.max_output_rows = 2
// SIXTEEN-SAME: tpc.max_output_rows = 16
// CHECK: func.func @forward(%{{.*}}: tensor<?xi32>, %{{.*}}: tensor<?xi32>, %[[ROWS:.*]]: tensor<?xi32>)
// CHECK: tpc.get_rows {{.*}}tpc.offsets = [array<i64: 0, 0>], tpc.state = [#tpc.state<partial>]
// CHECK: %[[AR:.*]] = tpc.all_reduce {{.*}}tpc.offsets = [array<i64: 4096, 4096>], tpc.state = [#tpc.state<mirrored>]
// CHECK: %[[SEL:.*]] = tpc.select_rows %[[AR]], %[[ROWS]] {{{.*}}tpc.offsets = [array<i64: 0, 0>], tpc.state = [#tpc.state<mirrored>]}
// CHECK: tpc.weighted_rms_norm %[[SEL]], {{.*}}tpc.state = [#tpc.state<mirrored>]
/// Plan memory: tokens are sized for max-batch (16 x 64 x 4 = 4 KiB for the lookup and the all-reduce),
/// the rows for max-output-rows: the gathered rows take the dead lookup's slot (2 or 16 rows x 256 B,
/// then the norm, fused with its weight by tpc-fuse-norms, in place), the local logits (rows x 2048 x 4 B: 16 KiB or 128 KiB) the end of
/// the arena once the all-reduce is dead.
// TWO: tpc.matmul {{.*}}tpc.offsets = [array<i64: 512, 512>], tpc.state = [#tpc.state<split axis = 1, sizes = [2048, 2048]
// SIXTEEN: tpc.matmul {{.*}}tpc.offsets = [array<i64: 4096, 4096>], tpc.state = [#tpc.state<split axis = 1, sizes = [2048, 2048]
// CHECK: tpc.all_gather {{.*}}tpc.offsets = [array<i64: -1, -1>], tpc.state = [#tpc.state<mirrored>]
// CHECK: return
/// A call never returns more rows than it has tokens: max-output-rows is capped at max-batch.
// CAPPED: tpc.max_output_rows = 16
module attributes {tpc.arch = "llama", tpc.n_vocab = 4096 : i64} {
  func.func @forward(%tok: tensor<?xi32>, %pos: tensor<?xi32>, %rows: tensor<?xi32>) -> tensor<?x4096xf32> {
    %emb = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<4096x64xf32>
    %nw = tpc.weight {ggml_type = "f32", name = "output_norm.weight"} : tensor<64xf32>
    %out = tpc.weight {ggml_type = "f32", name = "output.weight"} : tensor<4096x64xf32>
    %x = tpc.get_rows %emb, %tok : (tensor<4096x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    %h = tpc.select_rows %x, %rows : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    %n = tpc.rms_norm %h {eps = 1.0e-5 : f32} : tensor<?x64xf32> -> tensor<?x64xf32>
    %m = tpc.mul %n, %nw : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %l = tpc.matmul %m, %out : (tensor<?x64xf32>, tensor<4096x64xf32>) -> tensor<?x4096xf32>
    return %l : tensor<?x4096xf32>
  }
}

