// RUN: tpc-opt %s --split-input-file --tpc-insert-collectives | FileCheck %s

/// A bias after a row-parallel projection (gpt-oss's attn_output.bias) is a mirrored addend of a partial
/// value: added on every device it would be summed N times by the all-reduce. The bias add runs on
/// device 0 only (tpc.on_device = 0), before the one all-reduce, and the residual joins it there. A version
/// of the pass that added the bias after sinking on every device fails the CHECK-NOT below.
module attributes {tpc.devices = 2 : i64} {
// CHECK-LABEL: func.func @attn_output_bias
// CHECK: %[[P:.*]] = tpc.matmul
// CHECK-NOT: tpc.all_reduce
// CHECK: %[[B:.*]] = tpc.add %[[P]], %arg3 {tpc.on_device = 0 : i64, tpc.state = [#tpc.state<partial>]}
// CHECK-NOT: tpc.all_reduce
// CHECK: %[[R:.*]] = tpc.add %[[B]], %arg0 {tpc.on_device = 0 : i64, tpc.state = [#tpc.state<partial>]}
// CHECK-NEXT: %[[S:.*]] = tpc.all_reduce %[[R]]
// CHECK-NOT: tpc.add
// CHECK: tpc.rms_norm %[[S]]
func.func @attn_output_bias(%x: tensor<?x8xf32>, %xs: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>},
                            %w: tensor<8x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>},
                            %bo: tensor<8xf32>) -> tensor<?x8xf32> {
  %p = tpc.matmul %xs, %w {tpc.state = [#tpc.state<partial>]} : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %b = tpc.add %p, %bo {tpc.state = [#tpc.state<mirrored>]} : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %c = tpc.add %x, %b {tpc.state = [#tpc.state<mirrored>]} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %n = tpc.rms_norm %c {eps = 1.0e-6 : f32, tpc.state = [#tpc.state<mirrored>]} : tensor<?x8xf32> -> tensor<?x8xf32>
  return %n : tensor<?x8xf32>
}
}

// -----

/// The experts' down bias (tpc.add_id) after the down projection split on its reduction axis (the
/// intermediate split): added on device 0 only, before the router weighting, which the all-reduce then
/// sinks past (expert_combine is linear), so one reduce of [T, n_embd] closes the block instead of one
/// of [T, k, n_embd] before the bias.
module attributes {tpc.devices = 2 : i64} {
// CHECK-LABEL: func.func @down_bias
// CHECK: %[[D:.*]] = tpc.mul_mat_id
// CHECK-NOT: tpc.all_reduce
// CHECK: %[[B:.*]] = tpc.add_id %[[D]], %arg3, %arg4 {tpc.on_device = 0 : i64, tpc.state = [#tpc.state<partial>]}
// CHECK-NOT: tpc.all_reduce
// CHECK: %[[C:.*]] = tpc.expert_combine %[[B]], %arg5 {{.*}}tpc.state = [#tpc.state<partial>]
// CHECK: %[[R:.*]] = tpc.add %[[C]], %arg0 {tpc.on_device = 0 : i64
// CHECK-NEXT: tpc.all_reduce %[[R]]
func.func @down_bias(%x: tensor<?x8xf32>, %a: tensor<?x2x6xf32> {tpc.state = #tpc.state<split axis = 2, sizes = [3, 3]>},
                     %wd: tensor<4x8x6xf32> {tpc.state = #tpc.state<split axis = 2, sizes = [3, 3]>},
                     %bd: tensor<4x8xf32>, %ids: tensor<?x2xi32>, %wr: tensor<?x2xf32>) -> tensor<?x8xf32> {
  %d = tpc.mul_mat_id %a, %wd, %ids {tpc.state = [#tpc.state<partial>]} : (tensor<?x2x6xf32>, tensor<4x8x6xf32>, tensor<?x2xi32>) -> tensor<?x2x8xf32>
  %b = tpc.add_id %d, %bd, %ids {tpc.state = [#tpc.state<mirrored>]} : (tensor<?x2x8xf32>, tensor<4x8xf32>, tensor<?x2xi32>) -> tensor<?x2x8xf32>
  %c = tpc.expert_combine %b, %wr {tpc.state = [#tpc.state<mirrored>]} : (tensor<?x2x8xf32>, tensor<?x2xf32>) -> tensor<?x8xf32>
  %y = tpc.add %x, %c {tpc.state = [#tpc.state<mirrored>]} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
}
