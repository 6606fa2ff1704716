// RUN: tpc-opt %s --tpc-test-split-rules --verify-diagnostics --split-input-file
/// The SplitStateInterface rules the dialect defines: the all-mirrored default, activations (any state
/// but partial), scale (linear) and the broadcasting binary ops.

func.func @default_rule(%x: tensor<?x8xf32> {tpc.state = #tpc.state<mirrored>},
                        %w: tensor<4x8xf32> {tpc.state = #tpc.state<mirrored>},
                        %s: tensor<4x8xf32> {tpc.state = #tpc.state<split axis = 0, sizes = [2, 2]>}) {
  // expected-remark @+1 {{transfer: [#tpc.state<mirrored>]}}
  %0 = tpc.matmul %x, %w : (tensor<?x8xf32>, tensor<4x8xf32>) -> tensor<?x4xf32>
  /// Rows of the weight split, x whole: column parallel, the result's last axis split the same way.
  // expected-remark @+1 {{transfer: [#tpc.state<split axis = 1, sizes = [2, 2], granule = 1, segments = 1>]}}
  %1 = tpc.matmul %x, %s : (tensor<?x8xf32>, tensor<4x8xf32>) -> tensor<?x4xf32>
  // expected-remark @+2 {{transfer: [#tpc.state<mirrored>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<mirrored>, #tpc.state<mirrored>]}}
  %2 = tpc.matmul %x, %w {tpc.state = [#tpc.state<mirrored>]} : (tensor<?x8xf32>, tensor<4x8xf32>) -> tensor<?x4xf32>
  return
}

// -----

func.func @activations(%p: tensor<?x8xf32> {tpc.state = #tpc.state<partial>},
                       %s: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>}) {
  /// silu(a) + silu(b) != silu(a + b): a partial input has no rule.
  // expected-remark @+1 {{transfer: none}}
  %0 = tpc.unary silu %p : tensor<?x8xf32> -> tensor<?x8xf32>
  // expected-remark @+1 {{transfer: [#tpc.state<split axis = 1, sizes = [4, 4], granule = 1, segments = 1>]}}
  %1 = tpc.unary silu %s : tensor<?x8xf32> -> tensor<?x8xf32>
  // expected-remark @+1 {{transfer: none}}
  %2 = tpc.softcap %p {cap = 30.0 : f32} : tensor<?x8xf32> -> tensor<?x8xf32>
  /// scale is linear: partial stays partial, both ways.
  // expected-remark @+2 {{transfer: [#tpc.state<partial>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<partial>]}}
  %3 = tpc.scale %p {value = 2.0 : f32, tpc.state = [#tpc.state<partial>]} : tensor<?x8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @binary(%p: tensor<?x8xf32> {tpc.state = #tpc.state<partial>},
                  %q: tensor<?x8xf32> {tpc.state = #tpc.state<partial>},
                  %m: tensor<8xf32> {tpc.state = #tpc.state<mirrored>},
                  %s: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>}) {
  /// partial + partial = partial (sum is linear in both operands).
  // expected-remark @+1 {{transfer: [#tpc.state<partial>]}}
  %0 = tpc.add %p, %q : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  /// partial + mirrored would add the mirrored value once per device.
  // expected-remark @+1 {{transfer: none}}
  %1 = tpc.add %p, %m : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  /// partial * mirrored = partial (the MoE scale chain).
  // expected-remark @+1 {{transfer: [#tpc.state<partial>]}}
  %2 = tpc.mul %p, %m : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  // expected-remark @+1 {{transfer: none}}
  %3 = tpc.mul %p, %q : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  /// A device holding all of rhs takes the slice matching its part of lhs.
  // expected-remark @+1 {{transfer: [#tpc.state<split axis = 1, sizes = [4, 4], granule = 1, segments = 1>]}}
  %4 = tpc.div %s, %m : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  /// Backward: a split result needs a split lhs, and a rhs spanning the split axis split the same way.
  // expected-remark @+2 {{transfer: [#tpc.state<split axis = 1, sizes = [4, 4], granule = 1, segments = 1>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 1, sizes = [4, 4], granule = 1, segments = 1>, #tpc.state<split axis = 0, sizes = [4, 4], granule = 1, segments = 1>]}}
  %5 = "tpc.mul"(%s, %m) {tpc.state = [#tpc.state<split axis = 1, sizes = [4, 4]>]} : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  return
}
