// RUN: tpc-opt %s --split-input-file --tpc-insert-stage-transfers=stage-layers=2,1 | FileCheck %s
// RUN: tpc-opt %s --split-input-file --tpc-insert-stage-transfers=stage-layers=1,1,1 | FileCheck %s --check-prefix=THREE
// RUN: tpc-opt %s --split-input-file --tpc-insert-stage-transfers="stages=2 remarks=true" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BALANCED
// RUN: tpc-opt %s --split-input-file --tpc-insert-stage-transfers | FileCheck %s --check-prefix=ONE
// RUN: not tpc-opt %s --split-input-file --tpc-insert-stage-transfers=stage-layers=2,2 -o /dev/null 2>&1 | FileCheck %s --check-prefix=SUM
// RUN: not tpc-opt %s --split-input-file --tpc-insert-stage-transfers="stages=3 stage-layers=2,1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not tpc-opt %s --split-input-file --tpc-insert-stage-transfers=stages=4 -o /dev/null 2>&1 | FileCheck %s --check-prefix=MANY

/// Three layers of a residual stream (norm, matmul, residual add), the embedding before them and the
/// output head after. stage-layers=2,1: layers 0-1 on stage 0, layer 2 and the head on stage 1. The one
/// value crossing the boundary (layer 1's output, read by layer 2's norm and its residual add) moves once,
/// right after its producer; the logits come back to stage 0. Weights, the token ids and everything
/// inside a stage stay as they were.
// CHECK: module attributes {tpc.stage_layers = array<i64: 2, 1>}
// CHECK-LABEL: func.func @forward
// CHECK: %[[E:.*]] = tpc.get_rows
// CHECK-NOT: tpc.stage_transfer
// CHECK: %[[X2:.*]] = tpc.add {{.*}}tpc.layer = 1
// CHECK-NEXT: %[[T:.*]] = tpc.stage_transfer %[[X2]] {from = 0 : i64, to = 1 : i64} : tensor<?x8xf32>
// CHECK-NOT: tpc.stage_transfer
// CHECK: tpc.rms_norm %[[T]] {{.*}}tpc.layer = 2
// CHECK-NOT: tpc.stage_transfer
// CHECK: tpc.add %{{.*}}, %[[T]] {tpc.layer = 2
// CHECK-NOT: tpc.stage_transfer
// CHECK: %[[L:.*]] = tpc.matmul {{.*}}tpc.layer = "output"
// CHECK-NEXT: %[[B:.*]] = tpc.stage_transfer %[[L]] {from = 1 : i64, to = 0 : i64} : tensor<?x16xf32>
// CHECK-NEXT: return %[[B]]

/// One layer per stage: a transfer at each of the two boundaries, and the logits from stage 2 to 0.
// THREE-COUNT-1: {from = 0 : i64, to = 1 : i64}
// THREE-COUNT-1: {from = 1 : i64, to = 2 : i64}
// THREE-COUNT-1: {from = 2 : i64, to = 0 : i64}
// THREE-NOT: tpc.stage_transfer

/// Without stage-layers the cut balances the weight bytes: layer 2 weighs as much as layers 0 and 1
/// together (its matmul is 4x wider), and the head goes with the last stage.
// BALANCED: remark: tpc-insert-stage-transfers: stage layers [2, 1] (balanced by weight bytes)

/// One stage: the module is unchanged.
// ONE-NOT: tpc.stage_transfer
// ONE-NOT: tpc.stage_layers

// SUM: error: tpc-insert-stage-transfers: stage-layers [2, 2] sum to 4, the model has 3 layer(s)
// COUNT: error: tpc-insert-stage-transfers: stage-layers [2, 1] has 2 entries for 3 stages (one per stage)
// MANY: error: tpc-insert-stage-transfers: 4 stages, but the model has 3 layer(s) (at least one per stage)
module {
func.func @forward(%tokens: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x16xf32> {
  %e = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<16x8xf32>
  %x0 = tpc.get_rows %e, %tokens : (tensor<16x8xf32>, tensor<?xi32>) -> tensor<?x8xf32>
  %w0 = tpc.weight layer 0 {ggml_type = "f32", name = "blk.0.w"} : tensor<8x8xf32>
  %n0 = tpc.rms_norm %x0 {eps = 1.0e-6 : f32, tpc.layer = 0 : i64} : tensor<?x8xf32> -> tensor<?x8xf32>
  %m0 = tpc.matmul %n0, %w0 {tpc.layer = 0 : i64} : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %x1 = tpc.add %m0, %x0 {tpc.layer = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %w1 = tpc.weight layer 1 {ggml_type = "f32", name = "blk.1.w"} : tensor<8x8xf32>
  %n1 = tpc.rms_norm %x1 {eps = 1.0e-6 : f32, tpc.layer = 1 : i64} : tensor<?x8xf32> -> tensor<?x8xf32>
  %m1 = tpc.matmul %n1, %w1 {tpc.layer = 1 : i64} : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %x2 = tpc.add %m1, %x1 {tpc.layer = 1 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %w2 = tpc.weight layer 2 {ggml_type = "f32", name = "blk.2.w"} : tensor<32x8xf32>
  %w2d = tpc.weight layer 2 {ggml_type = "f32", name = "blk.2.wd"} : tensor<8x32xf32>
  %n2 = tpc.rms_norm %x2 {eps = 1.0e-6 : f32, tpc.layer = 2 : i64} : tensor<?x8xf32> -> tensor<?x8xf32>
  %u2 = tpc.matmul %n2, %w2 {tpc.layer = 2 : i64} : (tensor<?x8xf32>, tensor<32x8xf32>) -> tensor<?x32xf32>
  %m2 = tpc.matmul %u2, %w2d {tpc.layer = 2 : i64} : (tensor<?x32xf32>, tensor<8x32xf32>) -> tensor<?x8xf32>
  %x3 = tpc.add %m2, %x2 {tpc.layer = 2 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %wo = tpc.weight layer "output" {ggml_type = "f32", name = "output.weight"} : tensor<16x8xf32>
  %l = tpc.matmul %x3, %wo {tpc.layer = "output"} : (tensor<?x8xf32>, tensor<16x8xf32>) -> tensor<?x16xf32>
  return %l : tensor<?x16xf32>
}
}
