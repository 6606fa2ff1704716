// RUN: tpc-opt %S/Inputs/llama-layer.mlir '--tpc-pipeline=devices=2 max-batch=4' | FileCheck %s --check-prefix=LAYER
// RUN: tpc-opt %S/Inputs/llama-layer.mlir '--tpc-pipeline=devices=1 max-batch=4' | FileCheck %s --check-prefix=ONE
// RUN: tpc-opt %s --split-input-file --tpc-fuse-norms | FileCheck %s
// RUN: tpc-opt %s --split-input-file --tpc-fuse-norms=remarks=true --verify-diagnostics -o /dev/null
/// tpc-fuse-norms: rms_norm + mul by its weight -> weighted_rms_norm; a layer boundary
/// [add{on_device = 0} ->] all_reduce -> rms_norm [-> mul] -> all_reduce_rms_norm, keeping planned offsets.

/// A llama layer on 2 devices, the whole pipeline: the vocabulary-parallel embedding's all-reduce takes the
/// attention norm (no residual: nothing was added), the attention's all-reduce takes the residual and the
/// FFN norm, the FFN's all-reduce the residual and the output norm. No separate norm, mul or all-reduce is
/// left, and each fused op carries the all-reduce's offsets for the sum and the mul's for the result.
// LAYER: %[[E:.*]] = tpc.get_rows
// LAYER: %[[S0:.*]], %[[N0:.*]] = tpc.all_reduce_rms_norm %[[E]] weight %{{.*}} {eps = 9.99999974E-6 : f32
// LAYER-SAME: tpc.offsets = [array<i64: 4096, 4096>, array<i64: 0, 0>]
// LAYER: tpc.matmul %[[N0]]
// LAYER: %[[A:.*]] = tpc.matmul {{.*}}tpc.state = [#tpc.state<partial>]
// LAYER: %[[S1:.*]], %[[N1:.*]] = tpc.all_reduce_rms_norm %[[A]] residual %[[S0]] weight
// LAYER: tpc.matmul %[[N1]]
// LAYER: %[[F:.*]] = tpc.matmul {{.*}}tpc.state = [#tpc.state<partial>]
// LAYER: tpc.all_reduce_rms_norm %[[F]] residual %[[S1]] weight
// LAYER-NOT: tpc.rms_norm
// LAYER-NOT: tpc.mul
// LAYER-NOT: tpc.all_reduce {
// LAYER: return

/// On one device there is no collective: the three norms take their weights.
// ONE-COUNT-3: tpc.weighted_rms_norm
// ONE-NOT: tpc.rms_norm
// ONE-NOT: tpc.mul

// -----

/// The fused norm runs at the norm's place with the mul's annotations; its weight, defined between the norm
/// and the mul, moves up to dominate it.
// CHECK-LABEL: func.func @forward
// CHECK: %[[W:.*]] = tpc.weight {ggml_type = "f32", name = "blk.0.attn_norm.weight"}
// CHECK: tpc.weighted_rms_norm %{{.*}}, %[[W]] {eps = 9.99999974E-6 : f32, tpc.offsets = [array<i64: 1024>]}
// CHECK: tpc.scale
// CHECK-NOT: tpc.mul
module attributes {tpc.devices = 1 : i64, tpc.max_batch = 4 : i64} {
  func.func @forward(%tok: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
    %t = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<16x64xf32>
    %x = tpc.get_rows %t, %tok {tpc.offsets = [array<i64: 0>]} : (tensor<16x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    // expected-remark @+1 {{tpc-fuse-norms: rms_norm + mul by its weight fused}}
    %n = tpc.rms_norm %x {eps = 1.0e-5 : f32, tpc.offsets = [array<i64: 1024>]} : tensor<?x64xf32> -> tensor<?x64xf32>
    %s = tpc.scale %x {value = 2.0 : f32, tpc.offsets = [array<i64: 2048>]} : tensor<?x64xf32> -> tensor<?x64xf32>
    %w = tpc.weight {ggml_type = "f32", name = "blk.0.attn_norm.weight"} : tensor<64xf32>
    %y = tpc.mul %n, %w {tpc.offsets = [array<i64: 1024>]} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %r = tpc.add %y, %s {tpc.offsets = [array<i64: -1>]} : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    return %r : tensor<?x64xf32>
  }
}

// -----

/// Only a mul by an f32 vector weight whose product reuses the norm's bytes is fused.
// CHECK-LABEL: func.func @forward
// CHECK-COUNT-3: tpc.rms_norm
// CHECK-NOT: tpc.weighted_rms_norm
module attributes {tpc.devices = 1 : i64, tpc.max_batch = 4 : i64} {
  func.func @forward(%tok: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
    %t = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<16x64xf32>
    %q = tpc.weight {ggml_type = "q8_0", name = "blk.0.ffn_norm.weight"} : tensor<64xf32>
    %w = tpc.weight {ggml_type = "f32", name = "blk.0.attn_norm.weight"} : tensor<64xf32>
    %x = tpc.get_rows %t, %tok {tpc.offsets = [array<i64: 0>]} : (tensor<16x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    // expected-remark @+1 {{tpc-fuse-norms: rms_norm + mul stay two steps: the multiplier is not an f32 vector weight}}
    %n0 = tpc.rms_norm %x {eps = 1.0e-5 : f32, tpc.offsets = [array<i64: 1024>]} : tensor<?x64xf32> -> tensor<?x64xf32>
    %y0 = tpc.mul %n0, %x {tpc.offsets = [array<i64: 1024>]} : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    // expected-remark @+1 {{tpc-fuse-norms: rms_norm + mul stay two steps: the multiplier is not an f32 vector weight}}
    %n1 = tpc.rms_norm %y0 {eps = 1.0e-5 : f32, tpc.offsets = [array<i64: 2048>]} : tensor<?x64xf32> -> tensor<?x64xf32>
    %y1 = tpc.mul %n1, %q {tpc.offsets = [array<i64: 2048>]} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    // expected-remark @+1 {{tpc-fuse-norms: rms_norm + mul stay two steps: the product does not reuse the norm's bytes}}
    %n2 = tpc.rms_norm %y1 {eps = 1.0e-5 : f32, tpc.offsets = [array<i64: 1024>]} : tensor<?x64xf32> -> tensor<?x64xf32>
    %y2 = tpc.mul %n2, %w {tpc.offsets = [array<i64: 3072>]} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    return %y2 : tensor<?x64xf32>
  }
}

// -----

/// A layer boundary on 2 devices whose residual %r (bytes 0..1024) overlaps the sum (512..1536) on device 0
/// but is not the same slot: the add stays a step and the fused op takes no residual.
// CHECK-LABEL: func.func @forward
// CHECK: %[[A:.*]] = tpc.add {{.*}}tpc.on_device = 0
// CHECK: tpc.all_reduce_rms_norm %[[A]] weight %{{.*}} {eps
// CHECK-SAME: tpc.offsets = [array<i64: 512, 1024>, array<i64: 2048, 2048>]
// CHECK-SAME: tpc.state = [#tpc.state<mirrored>, #tpc.state<mirrored>]
module attributes {tpc.devices = 2 : i64, tpc.max_batch = 4 : i64} {
  func.func @forward(%tok: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
    %t = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<16x64xf32>
    %m = tpc.weight {ggml_type = "f32", name = "blk.0.ffn_down.weight"} : tensor<64x64xf32>
    %w = tpc.weight {ggml_type = "f32", name = "blk.1.attn_norm.weight"} : tensor<64xf32>
    %r = tpc.get_rows %t, %tok {tpc.offsets = [array<i64: 0, 0>], tpc.state = [#tpc.state<mirrored>]} : (tensor<16x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    %p = tpc.matmul %r, %m {tpc.offsets = [array<i64: 1024, 1024>], tpc.state = [#tpc.state<partial>]} : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %a = tpc.add %p, %r {tpc.on_device = 0 : i64, tpc.offsets = [array<i64: 1024, 1024>], tpc.state = [#tpc.state<partial>]} : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    // expected-remark @+2 {{tpc-fuse-norms: the residual add stays a step: its bytes overlap the sum's on device 0}}
    // expected-remark @+1 {{tpc-fuse-norms: layer boundary fused: all_reduce + rms_norm + weight mul}}
    %s = tpc.all_reduce %a {tpc.offsets = [array<i64: 512, 1024>], tpc.state = [#tpc.state<mirrored>]} : tensor<?x64xf32>
    %n = tpc.rms_norm %s {eps = 1.0e-5 : f32, tpc.offsets = [array<i64: 2048, 2048>], tpc.state = [#tpc.state<mirrored>]} : tensor<?x64xf32> -> tensor<?x64xf32>
    %y = tpc.mul %n, %w {tpc.offsets = [array<i64: 2048, 2048>], tpc.state = [#tpc.state<mirrored>]} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %o = tpc.add %y, %s {tpc.offsets = [array<i64: -1, -1>], tpc.state = [#tpc.state<mirrored>]} : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    return %o : tensor<?x64xf32>
  }
}

// -----

/// Not a boundary: a step between the all-reduce and the norm (its buffer would be live while the fused op
/// writes), so the all-reduce stays and the norm takes its weight alone. A norm whose mul does not follow
/// it directly joins its all-reduce without the weight. A host-placed norm stays out of the collective.
// CHECK-LABEL: func.func @forward
// CHECK: tpc.all_reduce %
// CHECK: tpc.scale
// CHECK: tpc.weighted_rms_norm
// CHECK: %[[S:.*]], %[[N:.*]] = tpc.all_reduce_rms_norm %{{.*}} {eps
// CHECK: tpc.scale
// CHECK: tpc.mul %[[N]]
// CHECK: tpc.all_reduce %
// CHECK: tpc.weighted_rms_norm {{.*}}tpc.placement = "host"
module attributes {tpc.devices = 2 : i64, tpc.max_batch = 4 : i64} {
  func.func @forward(%tok: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
    %t = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<16x64xf32>
    %w = tpc.weight {ggml_type = "f32", name = "blk.0.attn_norm.weight"} : tensor<64xf32>
    %p = tpc.get_rows %t, %tok {tpc.offsets = [array<i64: 0, 0>], tpc.state = [#tpc.state<partial>]} : (tensor<16x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    %s = tpc.all_reduce %p {tpc.offsets = [array<i64: 1024, 1024>], tpc.state = [#tpc.state<mirrored>]} : tensor<?x64xf32>
    %b = tpc.scale %s {value = 2.0 : f32, tpc.offsets = [array<i64: 0, 0>], tpc.state = [#tpc.state<mirrored>]} : tensor<?x64xf32> -> tensor<?x64xf32>
    // expected-remark @+1 {{tpc-fuse-norms: rms_norm + mul by its weight fused}}
    %n = tpc.rms_norm %s {eps = 1.0e-5 : f32, tpc.offsets = [array<i64: 2048, 2048>], tpc.state = [#tpc.state<mirrored>]} : tensor<?x64xf32> -> tensor<?x64xf32>
    %y = tpc.mul %n, %w {tpc.offsets = [array<i64: 2048, 2048>], tpc.state = [#tpc.state<mirrored>]} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %p1 = tpc.scale %y {value = 2.0 : f32, tpc.offsets = [array<i64: 2048, 2048>], tpc.state = [#tpc.state<partial>]} : tensor<?x64xf32> -> tensor<?x64xf32>
    // expected-remark @+1 {{tpc-fuse-norms: layer boundary fused: all_reduce + rms_norm}}
    %s1 = tpc.all_reduce %p1 {tpc.offsets = [array<i64: 3072, 3072>], tpc.state = [#tpc.state<mirrored>]} : tensor<?x64xf32>
    %n1 = tpc.rms_norm %s1 {eps = 1.0e-5 : f32, tpc.offsets = [array<i64: 4096, 4096>], tpc.state = [#tpc.state<mirrored>]} : tensor<?x64xf32> -> tensor<?x64xf32>
    %b1 = tpc.scale %s1 {value = 2.0 : f32, tpc.offsets = [array<i64: 0, 0>], tpc.state = [#tpc.state<partial>]} : tensor<?x64xf32> -> tensor<?x64xf32>
    %y1 = tpc.mul %n1, %w {tpc.offsets = [array<i64: 4096, 4096>], tpc.state = [#tpc.state<mirrored>]} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %s2 = tpc.all_reduce %b1 {tpc.offsets = [array<i64: 1024, 1024>], tpc.state = [#tpc.state<mirrored>]} : tensor<?x64xf32>
    // expected-remark @+1 {{tpc-fuse-norms: rms_norm + mul by its weight fused}}
    %n2 = tpc.rms_norm %s2 {eps = 1.0e-5 : f32, tpc.placement = "host", tpc.offsets = [array<i64: 0, 0>], tpc.state = [#tpc.state<mirrored>]} : tensor<?x64xf32> -> tensor<?x64xf32>
    %y2 = tpc.mul %n2, %w {tpc.placement = "host", tpc.offsets = [array<i64: 0, 0>], tpc.state = [#tpc.state<mirrored>]} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %o = tpc.add %y1, %y2 {tpc.offsets = [array<i64: -1, -1>], tpc.state = [#tpc.state<mirrored>]} : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    return %o : tensor<?x64xf32>
  }
}
