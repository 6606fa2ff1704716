// RUN: tpc-opt %s --split-input-file --tpc-plan-memory=max-batch=4 | FileCheck %s
/// tpc-plan-memory: one arena slot per activation for max-batch tokens, reusing the slots of dead values.

/// A chain of [?, 64] f32 values (4 tokens x 64 x 4 bytes = 1 KiB each): every value dies when its only
/// reader runs, so two slots alternate. The returned logits live in the caller's buffer (-1), weights have
/// no slot (and count only where some op reads them), and the arena is two slots.
// CHECK-LABEL: module attributes
// CHECK-SAME: tpc.activation_bytes = array<i64: 2048>
// CHECK-SAME: tpc.kv_bytes_per_token = array<i64: 0>
// CHECK-SAME: tpc.max_batch = 4 : i64
// CHECK-SAME: tpc.weight_bytes = array<i64: 4096>
// CHECK: tpc.get_rows {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.scale {{.*}}tpc.offsets = [array<i64: 1024>]
// CHECK: tpc.scale {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.scale {{.*}}tpc.offsets = [array<i64: 1024>]
// CHECK: tpc.matmul {{.*}}tpc.offsets = [array<i64: -1>]
module {
  func.func @forward(%tok: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x16xf32> {
    %w = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<16x64xf32>
    /// Read by no op: no bytes.
    %o = tpc.weight {ggml_type = "f32", name = "output.weight"} : tensor<64x64xf32>
    %0 = tpc.get_rows %w, %tok : (tensor<16x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    %1 = tpc.scale %0 {value = 2.0 : f32} : tensor<?x64xf32> -> tensor<?x64xf32>
    %2 = tpc.scale %1 {value = 2.0 : f32} : tensor<?x64xf32> -> tensor<?x64xf32>
    %3 = tpc.scale %2 {value = 2.0 : f32} : tensor<?x64xf32> -> tensor<?x64xf32>
    %4 = tpc.matmul %3, %w : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    return %4 : tensor<?x16xf32>
  }
}

// -----

/// A reshape is a view of its operand's slot, and its readers keep that slot alive: %0 (slot 0) is read
/// through %r by the last add, so %1 and %2 cannot reuse it.
// CHECK-LABEL: module attributes
// CHECK-SAME: tpc.activation_bytes = array<i64: 3072>
// CHECK: tpc.get_rows {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.reshape {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.scale {{.*}}tpc.offsets = [array<i64: 1024>]
// CHECK: tpc.scale {{.*}}tpc.offsets = [array<i64: 2048>]
// CHECK: tpc.add {{.*}}tpc.offsets = [array<i64: 1024>]
module {
  func.func @forward(%tok: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x4x16xf32> {
    %w = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<16x64xf32>
    %0 = tpc.get_rows %w, %tok : (tensor<16x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    %r = tpc.reshape %0 : tensor<?x64xf32> -> tensor<?x4x16xf32>
    %1 = tpc.scale %r {value = 2.0 : f32} : tensor<?x4x16xf32> -> tensor<?x4x16xf32>
    %2 = tpc.scale %1 {value = 2.0 : f32} : tensor<?x4x16xf32> -> tensor<?x4x16xf32>
    %3 = tpc.add %2, %r : (tensor<?x4x16xf32>, tensor<?x4x16xf32>) -> tensor<?x4x16xf32>
    %4 = tpc.scale %3 {value = 2.0 : f32} : tensor<?x4x16xf32> -> tensor<?x4x16xf32>
    return %4 : tensor<?x4x16xf32>
  }
}

// -----

/// An op that reads no later value still gets a slot for its own output, and a value nobody reads dies
/// right after its op: %dead's slot is reused by the next value.
// CHECK-LABEL: module attributes
// CHECK-SAME: tpc.activation_bytes = array<i64: 2048>
// CHECK: tpc.get_rows {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.scale {{.*}}tpc.offsets = [array<i64: 1024>]
// CHECK: tpc.scale {{.*}}tpc.offsets = [array<i64: 1024>]
module {
  func.func @forward(%tok: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
    %w = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<16x64xf32>
    %0 = tpc.get_rows %w, %tok : (tensor<16x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    %dead = tpc.scale %0 {value = 2.0 : f32} : tensor<?x64xf32> -> tensor<?x64xf32>
    %1 = tpc.scale %0 {value = 3.0 : f32} : tensor<?x64xf32> -> tensor<?x64xf32>
    %2 = tpc.add %1, %0 : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    return %2 : tensor<?x64xf32>
  }
}
