// RUN: tpc-opt %s --split-input-file --tpc-plan-memory=max-batch=4 | FileCheck %s
// RUN: tpc-opt %s --split-input-file '--tpc-plan-memory=max-batch=4 remarks=true' -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOG
/// tpc-plan-memory: one arena slot per activation for max-batch tokens, reusing the slots of dead values.

/// A chain of [?, 64] f32 matmuls (4 tokens x 64 x 4 bytes = 1 KiB each; a matmul never writes in
/// place): every value dies when its only reader runs, so two slots alternate. The returned logits live in
/// the caller's buffer (-1), weights have no slot (and count only where some op reads them), and the arena
/// is two slots.
// CHECK-LABEL: module attributes
// CHECK-SAME: tpc.activation_bytes = array<i64: 2048>
// CHECK-SAME: tpc.kv_bytes_per_token = array<i64: 0>
// CHECK-SAME: tpc.max_batch = 4 : i64
// CHECK-SAME: tpc.weight_bytes = array<i64: 20480>
// CHECK: tpc.get_rows {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.matmul {{.*}}tpc.offsets = [array<i64: 1024>]
// CHECK: tpc.matmul {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.matmul {{.*}}tpc.offsets = [array<i64: 1024>]
// CHECK: tpc.matmul {{.*}}tpc.offsets = [array<i64: -1>]
module {
  func.func @forward(%tok: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x16xf32> {
    %w = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<16x64xf32>
    %m = tpc.weight {ggml_type = "f32", name = "blk.0.ffn_up.weight"} : tensor<64x64xf32>
    /// Read by no op: no bytes.
    %o = tpc.weight {ggml_type = "f32", name = "output.weight"} : tensor<64x64xf32>
    %0 = tpc.get_rows %w, %tok : (tensor<16x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    %1 = tpc.matmul %0, %m : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %2 = tpc.matmul %1, %m : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %3 = tpc.matmul %2, %m : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %4 = tpc.matmul %3, %w : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    return %4 : tensor<?x16xf32>
  }
}

// -----

/// A reshape is a view of its operand's slot, and its readers keep that slot alive: %0 (slot 0) is read
/// through %r by the add, so %1 cannot take it; %2 and the add write in place over %1's slot.
// CHECK-LABEL: module attributes
// CHECK-SAME: tpc.activation_bytes = array<i64: 2048>
// CHECK: tpc.get_rows {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.reshape {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.scale {{.*}}tpc.offsets = [array<i64: 1024>]
// CHECK: tpc.scale {{.*}}tpc.offsets = [array<i64: 1024>]
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

/// A value nobody reads dies right after its op: %dead's slot is reused by the next value. %0 is read
/// after %1, so %1 cannot write in place over it.
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

// -----

/// In place: elementwise ops whose first operand dies at them reuse its slot (one slot for the chain);
/// a broadcast rhs is never overwritten, and a matmul never writes in place.
// CHECK-LABEL: module attributes
// CHECK-SAME: tpc.activation_bytes = array<i64: 2048>
// CHECK: tpc.get_rows {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.rms_norm {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.mul {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.unary {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.matmul {{.*}}tpc.offsets = [array<i64: 1024>]
// CHECK: tpc.add {{.*}}tpc.offsets = [array<i64: 1024>]
module {
  func.func @forward(%tok: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
    %w = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<16x64xf32>
    %n = tpc.weight {ggml_type = "f32", name = "blk.0.attn_norm.weight"} : tensor<64xf32>
    %m = tpc.weight {ggml_type = "f32", name = "blk.0.ffn_up.weight"} : tensor<64x64xf32>
    %0 = tpc.get_rows %w, %tok : (tensor<16x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    %1 = tpc.rms_norm %0 {eps = 1.0e-6 : f32} : tensor<?x64xf32> -> tensor<?x64xf32>
    %2 = tpc.mul %1, %n : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %3 = tpc.unary silu %2 : tensor<?x64xf32> -> tensor<?x64xf32>
    %4 = tpc.matmul %3, %m : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %5 = tpc.add %4, %3 : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %6 = tpc.scale %5 {value = 2.0 : f32} : tensor<?x64xf32> -> tensor<?x64xf32>
    return %6 : tensor<?x64xf32>
  }
}

/// The decision log: the arena of each device, and every op that writes in place.
// LOG: remark: tpc-plan-memory: device 0: 2048 bytes of device activations, 0 of host activations for 4 tokens
// LOG: remark: tpc-plan-memory: writes in place over operand 0 on device 0
