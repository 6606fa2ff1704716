// RUN: tpc-opt %s --split-input-file --tpc-fuse-moe-scale-chain | FileCheck %s
// RUN: tpc-opt %s --split-input-file --tpc-fuse-moe-scale-chain --tpc-assign-split-axes=devices=2 --tpc-insert-collectives | FileCheck %s --check-prefix=TP
// RUN: tpc-opt %s --split-input-file --tpc-fuse-moe-scale-chain=remarks=true -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOG

/// gemma4's MoE tail: the per-expert scale is gathered by expert id and reshaped *between* the down projection
/// and the first multiply, then the router weights multiply, then the sum over the selected experts. The
/// chain folds into one expert_combine where the sum was; the scale's get_rows/reshape do not stop it.
// CHECK-LABEL: func.func @gemma4_chain
// CHECK: %[[D:.*]] = tpc.mul_mat_id %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?x2x16xf32>, tensor<4x32x16xf32>
// CHECK: %[[S:.*]] = tpc.get_rows
// CHECK-NOT: tpc.mul %
// CHECK-NOT: tpc.sum
// CHECK: tpc.expert_combine %[[D]], %[[S]], %arg2 : (tensor<?x2x32xf32>, tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x32xf32>
// CHECK-NOT: tpc.reshape
// CHECK: return

/// Tensor parallel, the regression the peers have (three all-reduces per gemma4 MoE layer): the expert
/// outputs are partial, the combine keeps them partial, and exactly one all-reduce follows it.
// TP-LABEL: func.func @gemma4_chain
// TP-NOT: tpc.all_reduce
// TP: tpc.mul_mat_id {{.*}}tpc.state = [#tpc.state<partial>]
// TP-NOT: tpc.all_reduce
// TP: tpc.expert_combine {{.*}}tpc.state = [#tpc.state<partial>]
// TP-NEXT: tpc.all_reduce
// TP-NOT: tpc.all_reduce
// TP: return
func.func @gemma4_chain(%x: tensor<?x32xf32>, %ids: tensor<?x2xi32>, %rw: tensor<?x2xf32>) -> tensor<?x32xf32> {
  %gu = tpc.weight {ggml_type = "f32", name = "blk.0.ffn_gate_up_exps.weight"} : tensor<4x32x32xf32>
  %wd = tpc.weight {ggml_type = "f32", name = "blk.0.ffn_down_exps.weight"} : tensor<4x32x16xf32>
  %scale = tpc.weight {ggml_type = "f32", name = "blk.0.ffn_down_exps.scale"} : tensor<4xf32>
  %e = tpc.mul_mat_id %x, %gu, %ids : (tensor<?x32xf32>, tensor<4x32x32xf32>, tensor<?x2xi32>) -> tensor<?x2x32xf32>
  %h = tpc.glu gelu_tanh %e : (tensor<?x2x32xf32>) -> tensor<?x2x16xf32>
  %d = tpc.mul_mat_id %h, %wd, %ids : (tensor<?x2x16xf32>, tensor<4x32x16xf32>, tensor<?x2xi32>) -> tensor<?x2x32xf32>
  %s = tpc.get_rows %scale, %ids : (tensor<4xf32>, tensor<?x2xi32>) -> tensor<?x2xf32>
  %s3 = tpc.reshape %s : tensor<?x2xf32> -> tensor<?x2x1xf32>
  %m1 = tpc.mul %d, %s3 : (tensor<?x2x32xf32>, tensor<?x2x1xf32>) -> tensor<?x2x32xf32>
  %r3 = tpc.reshape %rw : tensor<?x2xf32> -> tensor<?x2x1xf32>
  %m2 = tpc.mul %m1, %r3 : (tensor<?x2x32xf32>, tensor<?x2x1xf32>) -> tensor<?x2x32xf32>
  %y = tpc.sum %m2 {axis = 1 : i64} : tensor<?x2x32xf32> -> tensor<?x32xf32>
  %z = tpc.rms_norm %y {eps = 1.0e-6 : f32} : tensor<?x32xf32> -> tensor<?x32xf32>
  return %z : tensor<?x32xf32>
}

// -----

/// A link with a second consumer is not part of the chain: nothing is fused.
// CHECK-LABEL: func.func @shared_link
// CHECK: tpc.mul
// CHECK: tpc.sum
// CHECK-NOT: tpc.expert_combine
func.func @shared_link(%d: tensor<?x2x8xf32>, %rw: tensor<?x2x1xf32>) -> (tensor<?x8xf32>, tensor<?x2x8xf32>) {
  %m = tpc.mul %d, %rw : (tensor<?x2x8xf32>, tensor<?x2x1xf32>) -> tensor<?x2x8xf32>
  %y = tpc.sum %m {axis = 1 : i64} : tensor<?x2x8xf32> -> tensor<?x8xf32>
  return %y, %m : tensor<?x8xf32>, tensor<?x2x8xf32>
}

/// The decision log: every fused chain, and why a sum over experts was left alone.
// LOG: remark: tpc-fuse-moe-scale-chain: mul_mat_id, 2 multiplies and the sum over experts fused
