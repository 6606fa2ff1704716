// RUN: tpc-opt %s --split-input-file --tpc-insert-collectives | FileCheck %s
// RUN: tpc-opt %S/Inputs/llama-layer.mlir --tpc-assign-split-axes=devices=2 -o %t.assigned.mlir
// RUN: tpc-opt %t.assigned.mlir --tpc-insert-collectives=remarks=true -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOG

/// Each conversion is its own collective: partial -> mirrored all_reduce (one, shared by both consumers),
/// split -> mirrored all_gather, mirrored -> split slice (no traffic), partial -> split reduce_scatter.
module attributes {tpc.devices = 2 : i64} {
// CHECK-LABEL: func.func @conversions
// CHECK: %[[SL:.*]] = tpc.slice %arg0 {axis = 1 : i64, tpc.state = [#tpc.state<split axis = 1, sizes = [4, 4]
// CHECK: %[[P:.*]] = tpc.matmul
// CHECK-NEXT: %[[R:.*]] = tpc.all_reduce %[[P]] {tpc.state = [#tpc.state<mirrored>]}
// CHECK: tpc.rms_norm %[[R]]
// CHECK: tpc.softmax %[[R]]
// CHECK: tpc.glu silu %{{.*}}, %[[SL]]
// CHECK: %[[RS:.*]] = tpc.reduce_scatter %{{.*}} {axis = 1 : i64, tpc.state = [#tpc.state<split axis = 1, sizes = [4, 4]
// CHECK: tpc.unary silu %[[RS]]
// CHECK: %[[G:.*]] = tpc.all_gather %{{.*}} {axis = 1 : i64, tpc.state = [#tpc.state<mirrored>]}
// CHECK: return %[[G]]
func.func @conversions(%x: tensor<?x8xf32>, %w: tensor<8x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>},
                       %xs: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>},
                       %wc: tensor<8x8xf32> {tpc.state = #tpc.state<split axis = 0, sizes = [4, 4]>}) -> tensor<?x8xf32> {
  %p = tpc.matmul %xs, %w {tpc.state = [#tpc.state<partial>]} : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %n = tpc.rms_norm %p {eps = 1.0e-6 : f32, tpc.state = [#tpc.state<mirrored>]} : tensor<?x8xf32> -> tensor<?x8xf32>
  %m = tpc.softmax %p {tpc.state = [#tpc.state<mirrored>]} : tensor<?x8xf32> -> tensor<?x8xf32>
  %g = tpc.matmul %n, %wc {tpc.state = [#tpc.state<split axis = 1, sizes = [4, 4]>]} : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %h = tpc.glu silu %g, %x {tpc.state = [#tpc.state<split axis = 1, sizes = [4, 4]>]} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %q = tpc.matmul %h, %w {tpc.state = [#tpc.state<partial>]} : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %u = tpc.unary silu %q {tpc.state = [#tpc.state<split axis = 1, sizes = [4, 4]>]} : tensor<?x8xf32> -> tensor<?x8xf32>
  return %u : tensor<?x8xf32>
}
}

// -----

/// Sinking: the all-reduce moves past the ops linear in its partial operand (mul by a mirrored norm weight,
/// scale) and past the residual add, which then runs on device 0 only; the reduce happens once, last.
module attributes {tpc.devices = 2 : i64} {
// CHECK-LABEL: func.func @sink
// CHECK: %[[P:.*]] = tpc.matmul
// CHECK-NOT: tpc.all_reduce
// CHECK: %[[A:.*]] = tpc.mul %[[P]], %{{.*}} {tpc.state = [#tpc.state<partial>]}
// CHECK: %[[B:.*]] = tpc.scale %[[A]] {{.*}}tpc.state = [#tpc.state<partial>]
// CHECK: %[[C:.*]] = tpc.add %[[B]], %arg0 {tpc.on_device = 0 : i64, tpc.state = [#tpc.state<partial>]}
// CHECK-NEXT: %[[R:.*]] = tpc.all_reduce %[[C]]
// CHECK-NEXT: tpc.rms_norm %[[R]]
func.func @sink(%x: tensor<?x8xf32>, %xs: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>},
                %w: tensor<8x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>}, %nw: tensor<8xf32>) -> tensor<?x8xf32> {
  %p = tpc.matmul %xs, %w {tpc.state = [#tpc.state<partial>]} : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %a = tpc.mul %p, %nw {tpc.state = [#tpc.state<mirrored>]} : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %b = tpc.scale %a {value = 0.5 : f32, tpc.state = [#tpc.state<mirrored>]} : tensor<?x8xf32> -> tensor<?x8xf32>
  %c = tpc.add %x, %b {tpc.state = [#tpc.state<mirrored>]} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %n = tpc.rms_norm %c {eps = 1.0e-6 : f32, tpc.state = [#tpc.state<mirrored>]} : tensor<?x8xf32> -> tensor<?x8xf32>
  return %n : tensor<?x8xf32>
}
}

// -----

/// AR(a) + AR(b) -> AR(a + b): parallel branches summed before any nonlinearity share one reduce.
module attributes {tpc.devices = 2 : i64} {
// CHECK-LABEL: func.func @sum_of_partials
// CHECK: %[[S:.*]] = tpc.add %{{.*}}, %{{.*}} {tpc.state = [#tpc.state<partial>]}
// CHECK-NEXT: tpc.all_reduce %[[S]]
// CHECK-NOT: tpc.all_reduce
func.func @sum_of_partials(%xs: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>},
                           %w: tensor<8x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>}) -> tensor<?x8xf32> {
  %p = tpc.matmul %xs, %w {tpc.state = [#tpc.state<partial>]} : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %q = tpc.matmul %xs, %w {tpc.state = [#tpc.state<partial>]} : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %s = tpc.add %p, %q {tpc.state = [#tpc.state<mirrored>]} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %n = tpc.rms_norm %s {eps = 1.0e-6 : f32, tpc.state = [#tpc.state<mirrored>]} : tensor<?x8xf32> -> tensor<?x8xf32>
  return %n : tensor<?x8xf32>
}
}

// -----

/// Bucketing (gemma4: dense FFN and MoE branches, each normalized before they meet): the first reduce's
/// consumers all come after the second, so both go out as one collective.
module attributes {tpc.devices = 2 : i64} {
// CHECK-LABEL: func.func @bucket
// CHECK-NOT: tpc.all_reduce
// CHECK: tpc.matmul
// CHECK: %[[Q:.*]] = tpc.matmul
// CHECK-NEXT: %[[R:[0-9]+]]:2 = tpc.all_reduce %{{.*}}, %[[Q]] {tpc.state = [#tpc.state<mirrored>, #tpc.state<mirrored>]}
// CHECK-NEXT: tpc.rms_norm %[[R]]#0
// CHECK-NEXT: tpc.rms_norm %[[R]]#1
// CHECK-NOT: tpc.all_reduce
func.func @bucket(%xs: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>},
                  %w: tensor<8x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>}) -> tensor<?x8xf32> {
  %p = tpc.matmul %xs, %w {tpc.state = [#tpc.state<partial>]} : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %q = tpc.matmul %xs, %w {tpc.state = [#tpc.state<partial>]} : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %a = tpc.rms_norm %p {eps = 1.0e-6 : f32, tpc.state = [#tpc.state<mirrored>]} : tensor<?x8xf32> -> tensor<?x8xf32>
  %b = tpc.rms_norm %q {eps = 1.0e-6 : f32, tpc.state = [#tpc.state<mirrored>]} : tensor<?x8xf32> -> tensor<?x8xf32>
  %s = tpc.add %a, %b {tpc.state = [#tpc.state<mirrored>]} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %s : tensor<?x8xf32>
}
}

/// The decision log: each collective with the states it converts, each sinking step.
// LOG: remark: tpc-insert-collectives: operand 0 is #tpc.state<partial>, needs #tpc.state<mirrored>: inserted tpc.all_reduce
// LOG: remark: tpc-insert-collectives: operand 0 is #tpc.state<split axis = 1, sizes = [256, 256], granule = 1, segments = 1>, needs #tpc.state<mirrored>: inserted tpc.all_gather
// LOG: remark: tpc-insert-collectives: all_reduce sunk past tpc.add, the residual added on device 0 only
// LOG: remark: tpc-insert-collectives: all_reduce sunk past tpc.add, the residual added on device 0 only
