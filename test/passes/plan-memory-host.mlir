// RUN: tpc-opt %s --split-input-file --tpc-plan-memory=max-batch=4 | FileCheck %s
/// tpc-plan-memory with host placement: host-placed buffers (a backend_copy to the host, ops with
/// tpc.placement = "host") are packed into a host arena with offsets of its own, so neither arena reserves
/// room for the other side's tensors.

/// [4, 64] f32 values are 1 KiB. The device holds the lookup (slot 0) until the copy to the host, then the
/// copy back takes slot 0 again: a 1 KiB device arena. The host holds the copy (host 0) and the host
/// matmul (host 1024), which the host scale overwrites in place: a 2 KiB host arena. With one offset space
/// the host tensors would sit beside the device's and each arena would need 2 KiB or more.
// CHECK-LABEL: module attributes
// CHECK-SAME: tpc.activation_bytes = array<i64: 1024>
// CHECK-SAME: tpc.host_activation_bytes = array<i64: 2048>
// CHECK: tpc.get_rows {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.backend_copy {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.matmul {{.*}}tpc.offsets = [array<i64: 1024>]
// CHECK: tpc.scale {{.*}}tpc.offsets = [array<i64: 1024>]
// CHECK: tpc.backend_copy {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.matmul {{.*}}tpc.offsets = [array<i64: -1>]
module {
  func.func @forward(%tok: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x16xf32> {
    %w = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<16x64xf32>
    %m = tpc.weight {ggml_type = "f32", name = "blk.0.ffn_up.weight", tpc.placement = "host"} : tensor<64x64xf32>
    %0 = tpc.get_rows %w, %tok : (tensor<16x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    %h = tpc.backend_copy %0 {from = "device", to = "host"} : tensor<?x64xf32>
    %1 = tpc.matmul %h, %m {tpc.placement = "host"} : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %2 = tpc.scale %1 {value = 2.0 : f32, tpc.placement = "host"} : tensor<?x64xf32> -> tensor<?x64xf32>
    %d = tpc.backend_copy %2 {from = "host", to = "device"} : tensor<?x64xf32>
    %3 = tpc.matmul %d, %w : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    return %3 : tensor<?x16xf32>
  }
}

// -----

/// An elementwise op writes in place only over a dying operand in its own arena: the host scale reads the
/// device value %0 at its last use, but takes a host slot of its own (the device slot 0 is not host memory).
// CHECK-LABEL: module attributes
// CHECK-SAME: tpc.activation_bytes = array<i64: 1024>
// CHECK-SAME: tpc.host_activation_bytes = array<i64: 1024>
// CHECK: tpc.get_rows {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.scale {{.*}}tpc.offsets = [array<i64: 0>]
// CHECK: tpc.backend_copy {{.*}}tpc.offsets = [array<i64: 0>]
module {
  func.func @forward(%tok: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x16xf32> {
    %w = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<16x64xf32>
    %0 = tpc.get_rows %w, %tok : (tensor<16x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    %1 = tpc.scale %0 {value = 2.0 : f32, tpc.placement = "host"} : tensor<?x64xf32> -> tensor<?x64xf32>
    %d = tpc.backend_copy %1 {from = "host", to = "device"} : tensor<?x64xf32>
    %2 = tpc.matmul %d, %w : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    return %2 : tensor<?x16xf32>
  }
}
