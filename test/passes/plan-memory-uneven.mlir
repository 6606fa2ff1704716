// RUN: tpc-opt %s --tpc-plan-memory=max-batch=2 | FileCheck %s
/// Per-device totals with an uneven 2:1 split over 2 devices: the FFN intermediate [?, 96] is split
/// 64/32, so device 0's slots are twice device 1's; the split weights and KV heads follow the sizes, the
/// mirrored ones count in full on both; the residual add pinned to device 0 (tpc.on_device) is an alias
/// of its first operand on device 1 and needs no slot there.

// Arena, device 0: the normed x (2x32x4 = 256), h [2,64] (512, silu in place) and the partial down
// projection (256) live together = 1024; device 1: 256 + 256 + 256 = 768. The add writes in place over
// the partial on device 0 and is an alias of it on device 1.
// Weights, device 0: norm 128 + up rows 64x32x4 = 8192 + down cols 32x64x4 = 8192 -> 16512; device 1:
// 128 + 4096 + 4096 = 8320.
// KV per token, f16 K and V of 16 dims: device 0 holds 2 heads (2 x 32 x 2 = 128), device 1 one (64).
// CHECK-LABEL: module attributes
// CHECK-SAME: tpc.activation_bytes = array<i64: 1024, 768>
// CHECK-SAME: tpc.kv_bytes_per_token = array<i64: 128, 64>
// CHECK-SAME: tpc.weight_bytes = array<i64: 16512, 8320>
// CHECK: tpc.mul {{.*}}tpc.offsets = [array<i64: 0, 0>]
// CHECK: tpc.matmul {{.*}}tpc.offsets = [array<i64: 256, 256>]
// CHECK: tpc.unary {{.*}}tpc.offsets = [array<i64: 256, 256>]
// CHECK: tpc.matmul {{.*}}tpc.offsets = [array<i64: 768, 512>]
// CHECK: tpc.add {{.*}}tpc.offsets = [array<i64: 768, 512>]
module attributes {tpc.devices = 2 : i64} {
  func.func @forward(%x: tensor<?x32xf32>, %pos: tensor<?xi32>) -> tensor<?x32xf32> {
    %n = tpc.weight {ggml_type = "f32", name = "blk.0.ffn_norm.weight"} : tensor<32xf32>
    %up = tpc.weight {ggml_type = "f32", name = "blk.0.ffn_up.weight", tpc.state = [#tpc.state<split axis = 0, sizes = [64, 32]>]} : tensor<96x32xf32>
    %down = tpc.weight {ggml_type = "f32", name = "blk.0.ffn_down.weight", tpc.state = [#tpc.state<split axis = 1, sizes = [64, 32]>]} : tensor<32x96xf32>
    %kv = tpc.kv_cache {head_dim_k = 16 : i64, head_dim_v = 16 : i64, layer = 0 : i64, n_head_kv = 3 : i64, tpc.state = [#tpc.state<split axis = 0, sizes = [2, 1]>]} : !tpc.kv_cache<3x16x16>
    %0 = tpc.mul %x, %n : (tensor<?x32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
    %h = tpc.matmul %0, %up {tpc.state = [#tpc.state<split axis = 1, sizes = [64, 32]>]} : (tensor<?x32xf32>, tensor<96x32xf32>) -> tensor<?x96xf32>
    %g = tpc.unary silu %h {tpc.state = [#tpc.state<split axis = 1, sizes = [64, 32]>]} : tensor<?x96xf32> -> tensor<?x96xf32>
    %p = tpc.matmul %g, %down {tpc.state = [#tpc.state<partial>]} : (tensor<?x96xf32>, tensor<32x96xf32>) -> tensor<?x32xf32>
    %r = tpc.add %p, %0 {tpc.on_device = 0 : i64, tpc.state = [#tpc.state<partial>]} : (tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x32xf32>
    %y = tpc.all_reduce %r {tpc.state = [#tpc.state<mirrored>]} : tensor<?x32xf32>
    return %y : tensor<?x32xf32>
  }
}
