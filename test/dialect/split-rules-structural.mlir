// RUN: tpc-opt %s --tpc-test-split-rules --verify-diagnostics -o /dev/null
/// The SplitStateInterface rules of the structural ops: matmuls (column and row parallel), reshapes,
/// attention (GQA and MQA), the MoE ops, reductions and collectives.

module attributes {tpc.devices = 2 : i64} {
func.func @matmul(%xk: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4], granule = 4>},
                  %wk: tensor<6x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>},
                  %wm: tensor<6x8xf32> {tpc.state = #tpc.state<mirrored>},
                  %xp: tensor<?x8xf32> {tpc.state = #tpc.state<partial>}) {
  /// Row parallel: the reduction axis split on both sides gives addends; backward, the weight follows x.
  // expected-remark @+2 {{transfer: [#tpc.state<partial>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 1, sizes = [4, 4], granule = 4, segments = 1>, #tpc.state<split axis = 1, sizes = [4, 4], granule = 4, segments = 1>]}}
  %0 = tpc.matmul %xk, %wk {tpc.state = [#tpc.state<partial>]} : (tensor<?x8xf32>, tensor<6x8xf32>) -> tensor<?x6xf32>
  /// A split reduction axis against a whole weight has no local rule (a collective or a weight split must decide).
  // expected-remark @+1 {{transfer: none}}
  %1 = tpc.matmul %xk, %wm : (tensor<?x8xf32>, tensor<6x8xf32>) -> tensor<?x6xf32>
  /// Linear in x: a partial x times a whole weight stays partial.
  // expected-remark @+2 {{transfer: [#tpc.state<partial>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<partial>, #tpc.state<mirrored>]}}
  %2 = tpc.matmul %xp, %wm {tpc.state = [#tpc.state<partial>]} : (tensor<?x8xf32>, tensor<6x8xf32>) -> tensor<?x6xf32>
  return
}
func.func @reshape(%x: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4], granule = 2>},
                   %h: tensor<?x4x2xf32> {tpc.state = #tpc.state<split axis = 2, sizes = [1, 1]>}) {
  /// Sizes travel through a reshape scaled by the dims merged into the split axis (granule too).
  // expected-remark @+2 {{transfer: [#tpc.state<split axis = 1, sizes = [2, 2], granule = 1, segments = 1>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 1, sizes = [4, 4], granule = 2, segments = 1>]}}
  %0 = tpc.reshape %x {tpc.state = [#tpc.state<split axis = 1, sizes = [2, 2]>]} : tensor<?x8xf32> -> tensor<?x4x2xf32>
  /// A split of an inner dim of a merged group cannot be expressed after the reshape.
  // expected-remark @+1 {{transfer: none}}
  %1 = tpc.reshape %h : tensor<?x4x2xf32> -> tensor<?x8xf32>
  return
}
func.func @attention(%q: tensor<?x4x2xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [2, 2], granule = 2>},
                     %k: tensor<?x2x2xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [1, 1]>},
                     %kbad: tensor<?x2x2xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [2, 0]>},
                     %km: tensor<?x1x2xf32> {tpc.state = #tpc.state<mirrored>},
                     %pos: tensor<?xi32> {tpc.state = #tpc.state<mirrored>}) {
  // expected-remark @+1 {{requirements: []}}
  %c = tpc.kv_cache {layer = 0, n_head_kv = 2, head_dim_k = 2, head_dim_v = 2, tpc.state = [#tpc.state<split axis = 0, sizes = [1, 1]>]} : !tpc.kv_cache<2x2x2>
  /// GQA: Q heads split in whole groups, K/V and the cache by KV heads with matching sizes.
  // expected-remark @+2 {{transfer: [#tpc.state<split axis = 1, sizes = [2, 2], granule = 2, segments = 1>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 1, sizes = [2, 2], granule = 2, segments = 1>, #tpc.state<split axis = 1, sizes = [1, 1], granule = 1, segments = 1>, #tpc.state<split axis = 1, sizes = [1, 1], granule = 1, segments = 1>, #tpc.state<split axis = 0, sizes = [1, 1], granule = 1, segments = 1>, #tpc.state<mirrored>]}}
  %0 = tpc.attention %q, %k, %k, %c, %pos {scale = 1.0 : f32, tpc.state = [#tpc.state<split axis = 1, sizes = [2, 2], granule = 2>]} : (tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, !tpc.kv_cache<2x2x2>, tensor<?xi32>) -> tensor<?x4x2xf32>
  /// K/V sizes that do not match the Q groups have no rule.
  // expected-remark @+1 {{transfer: none}}
  %1 = tpc.attention %q, %kbad, %kbad, %c, %pos {scale = 1.0 : f32} : (tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, !tpc.kv_cache<2x2x2>, tensor<?xi32>) -> tensor<?x4x2xf32>
  // expected-remark @+1 {{requirements: []}}
  %cm = tpc.kv_cache {layer = 1, n_head_kv = 1, head_dim_k = 2, head_dim_v = 2, tpc.state = [#tpc.state<mirrored>]} : !tpc.kv_cache<1x2x2>
  /// MQA: one KV head, so K/V and the cache stay whole while the Q heads split.
  // expected-remark @+2 {{transfer: [#tpc.state<split axis = 1, sizes = [2, 2], granule = 2, segments = 1>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 1, sizes = [2, 2], granule = 2, segments = 1>, #tpc.state<mirrored>, #tpc.state<mirrored>, #tpc.state<mirrored>, #tpc.state<mirrored>]}}
  %2 = tpc.attention %q, %km, %km, %cm, %pos {scale = 1.0 : f32, tpc.state = [#tpc.state<split axis = 1, sizes = [2, 2], granule = 2>]} : (tensor<?x4x2xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>, !tpc.kv_cache<1x2x2>, tensor<?xi32>) -> tensor<?x4x2xf32>
  return
}
func.func @moe(%gu: tensor<?x2x8xf32> {tpc.state = #tpc.state<split axis = 2, sizes = [4, 4], granule = 1, segments = 2>},
               %x: tensor<?x6xf32> {tpc.state = #tpc.state<mirrored>},
               %w: tensor<4x8x6xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4], segments = 2>},
               %ids: tensor<?x2xi32> {tpc.state = #tpc.state<mirrored>},
               %d: tensor<?x2x6xf32> {tpc.state = #tpc.state<partial>},
               %m: tensor<?x2xf32> {tpc.state = #tpc.state<mirrored>},
               %s: tensor<?x2x6xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [1, 1]>}) {
  /// A merged gate|up split per segment: each device holds matching halves.
  // expected-remark @+2 {{transfer: [#tpc.state<split axis = 2, sizes = [2, 2], granule = 1, segments = 1>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 2, sizes = [4, 4], granule = 1, segments = 2>]}}
  %0 = tpc.glu silu %gu {tpc.state = [#tpc.state<split axis = 2, sizes = [2, 2]>]} : (tensor<?x2x8xf32>) -> tensor<?x2x4xf32>
  /// Every expert's rows split the same way (per segment): the result's last axis follows.
  // expected-remark @+1 {{transfer: [#tpc.state<split axis = 2, sizes = [4, 4], granule = 1, segments = 2>]}}
  %1 = tpc.mul_mat_id %x, %w, %ids : (tensor<?x6xf32>, tensor<4x8x6xf32>, tensor<?x2xi32>) -> tensor<?x2x8xf32>
  /// The fused scale chain is linear in the expert outputs.
  // expected-remark @+2 {{transfer: [#tpc.state<partial>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<partial>, #tpc.state<mirrored>]}}
  %2 = tpc.expert_combine %d, %m {tpc.state = [#tpc.state<partial>]} : (tensor<?x2x6xf32>, tensor<?x2xf32>) -> tensor<?x6xf32>
  /// A sum over the split axis leaves each device an addend.
  // expected-remark @+1 {{transfer: [#tpc.state<partial>]}}
  %3 = tpc.sum %s {axis = 1 : i64} : tensor<?x2x6xf32> -> tensor<?x6xf32>
  /// A row-wise op over its split last axis has no local rule.
  // expected-remark @+1 {{transfer: none}}
  %4 = tpc.rms_norm %gu {eps = 1.0e-6 : f32} : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
  // expected-remark @+2 {{transfer: [#tpc.state<mirrored>, #tpc.state<mirrored>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<partial>, #tpc.state<partial>]}}
  %5:2 = tpc.all_reduce %d, %d {tpc.state = [#tpc.state<mirrored>, #tpc.state<mirrored>]} : tensor<?x2x6xf32>, tensor<?x2x6xf32>
  // expected-remark @+2 {{transfer: [#tpc.state<mirrored>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 1, sizes = [1, 1], granule = 1, segments = 1>]}}
  %6 = tpc.all_gather %s {axis = 1 : i64, tpc.state = [#tpc.state<mirrored>]} : tensor<?x2x6xf32>
  return
}
func.func @select_rows(%xm: tensor<?x8xf32> {tpc.state = #tpc.state<mirrored>},
                        %xs: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>},
                        %xp: tensor<?x8xf32> {tpc.state = #tpc.state<partial>},
                        %rows: tensor<?xi32> {tpc.state = #tpc.state<mirrored>}) {
  /// The output-rows gather: mirrored in and mirrored indices give mirrored rows; a mirrored result needs
  /// both mirrored.
  // expected-remark @+2 {{transfer: [#tpc.state<mirrored>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<mirrored>, #tpc.state<mirrored>]}}
  %0 = tpc.select_rows %xm, %rows {tpc.state = [#tpc.state<mirrored>]} : (tensor<?x8xf32>, tensor<?xi32>) -> tensor<?x8xf32>
  /// Whole rows move, so a split of another axis carries over (the indices stay mirrored).
  // expected-remark @+2 {{transfer: [#tpc.state<split axis = 1, sizes = [4, 4], granule = 1, segments = 1>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 1, sizes = [4, 4], granule = 1, segments = 1>, #tpc.state<mirrored>]}}
  %1 = tpc.select_rows %xs, %rows {tpc.state = [#tpc.state<split axis = 1, sizes = [4, 4]>]} : (tensor<?x8xf32>, tensor<?xi32>) -> tensor<?x8xf32>
  /// A partial input has no local rule: the collectives pass reduces it first.
  // expected-remark @+1 {{transfer: none}}
  %2 = tpc.select_rows %xp, %rows : (tensor<?x8xf32>, tensor<?xi32>) -> tensor<?x8xf32>
  return
}
func.func @expert_parallel(%x: tensor<?x6xf32> {tpc.state = #tpc.state<mirrored>},
                           %wgu: tensor<4x8x6xf32> {tpc.state = #tpc.state<split axis = 0, sizes = [3, 1]>},
                           %wd: tensor<4x6x4xf32> {tpc.state = #tpc.state<split axis = 0, sizes = [3, 1]>},
                           %wi: tensor<4x6x4xf32> {tpc.state = #tpc.state<split axis = 0, sizes = [2, 2]>},
                           %ids: tensor<?x2xi32> {tpc.state = #tpc.state<mirrored>},
                           %m: tensor<?x2xf32> {tpc.state = #tpc.state<mirrored>},
                           %r: tensor<?x2x4xf32> {tpc.state = #tpc.state<routed sizes = [3, 1]>}) {
  /// Whole experts per device: each device writes the rows routed to its 3 (or 1) experts, zeros elsewhere.
  // expected-remark @+2 {{transfer: [#tpc.state<routed sizes = [3, 1]>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<mirrored>, #tpc.state<split axis = 0, sizes = [3, 1], granule = 1, segments = 1>, #tpc.state<mirrored>]}}
  %0 = tpc.mul_mat_id %x, %wgu, %ids {tpc.state = [#tpc.state<routed sizes = [3, 1]>]} : (tensor<?x6xf32>, tensor<4x8x6xf32>, tensor<?x2xi32>) -> tensor<?x2x8xf32>
  /// GLU maps the zero rows to zero whatever its function.
  // expected-remark @+1 {{transfer: [#tpc.state<routed sizes = [3, 1]>]}}
  %1 = tpc.glu silu %0 : (tensor<?x2x8xf32>) -> tensor<?x2x4xf32>
  /// The down projection reads the routed rows of the same experts.
  // expected-remark @+2 {{transfer: [#tpc.state<routed sizes = [3, 1]>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<routed sizes = [3, 1]>, #tpc.state<split axis = 0, sizes = [3, 1], granule = 1, segments = 1>, #tpc.state<mirrored>]}}
  %2 = tpc.mul_mat_id %r, %wd, %ids {tpc.state = [#tpc.state<routed sizes = [3, 1]>]} : (tensor<?x2x4xf32>, tensor<4x6x4xf32>, tensor<?x2xi32>) -> tensor<?x2x6xf32>
  /// Routed over other experts than its weight's: no local rule.
  // expected-remark @+1 {{transfer: none}}
  %3 = tpc.mul_mat_id %r, %wi, %ids : (tensor<?x2x4xf32>, tensor<4x6x4xf32>, tensor<?x2xi32>) -> tensor<?x2x6xf32>
  /// The sum over the slots leaves each device an addend, closed by the same all-reduce as before.
  // expected-remark @+2 {{transfer: [#tpc.state<partial>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<routed sizes = [3, 1]>, #tpc.state<mirrored>]}}
  %4 = tpc.expert_combine %2, %m {tpc.state = [#tpc.state<partial>]} : (tensor<?x2x6xf32>, tensor<?x2xf32>) -> tensor<?x6xf32>
  /// exp(0) = 1: a routed value cannot pass.
  // expected-remark @+1 {{transfer: none}}
  %5 = tpc.unary exp %r : tensor<?x2x4xf32> -> tensor<?x2x4xf32>
  return
}
func.func @gated_delta_net(
    %x: tensor<?x512xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [256, 256], granule = 64, segments = 4>},
    %x1: tensor<?x512xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [256, 256], granule = 64>},
    %w: tensor<512x4xf32> {tpc.state = #tpc.state<split axis = 0, sizes = [256, 256], granule = 64, segments = 4>},
    %pos: tensor<?xi32> {tpc.state = #tpc.state<mirrored>},
    %q: tensor<?x2x64xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [1, 1]>},
    %v: tensor<?x4x64xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [2, 2], segments = 2>},
    %g: tensor<?x4xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [2, 2], segments = 2>},
    %vg: tensor<?x4x64xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [2, 2]>},
    %nw: tensor<64xf32> {tpc.state = #tpc.state<mirrored>}) {
  /// The state splits by key heads (axis 0) or not at all.
  // expected-remark @+1 {{requirements: []}}
  %s = tpc.recurrent_state {conv_kernel = 4, head_dim_k = 64, head_dim_v = 64, layer = 0, n_key_heads = 2, n_value_heads = 4, tpc.state = [#tpc.state<split axis = 0, sizes = [1, 1]>]} : !tpc.recurrent_state<2x4x64x64x4>
  /// The conv channels [q | k | v] are 2 + r = 4 segments of Hk heads: each device holds its key heads'
  /// part of every segment, the conv kernel's rows alike and its key heads' state.
  // expected-remark @+2 {{transfer: [#tpc.state<split axis = 1, sizes = [256, 256], granule = 64, segments = 4>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 1, sizes = [256, 256], granule = 64, segments = 4>, #tpc.state<split axis = 0, sizes = [256, 256], granule = 64, segments = 4>, #tpc.state<split axis = 0, sizes = [1, 1], granule = 1, segments = 1>, #tpc.state<mirrored>]}}
  %c = tpc.ssm_conv %x, %w, %s, %pos {tpc.state = [#tpc.state<split axis = 1, sizes = [256, 256], granule = 64, segments = 4>]} : (tensor<?x512xf32>, tensor<512x4xf32>, !tpc.recurrent_state<2x4x64x64x4>, tensor<?xi32>) -> tensor<?x512xf32>
  /// A plain split of the channels mixes q, k and v of different heads: no local rule.
  // expected-remark @+1 {{transfer: none}}
  %c1 = tpc.ssm_conv %x1, %w, %s, %pos : (tensor<?x512xf32>, tensor<512x4xf32>, !tpc.recurrent_state<2x4x64x64x4>, tensor<?xi32>) -> tensor<?x512xf32>
  /// Views of whole segments keep each device's part of them: q is one segment, v the last two.
  // expected-remark @+2 {{transfer: [#tpc.state<split axis = 1, sizes = [64, 64], granule = 64, segments = 1>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 1, sizes = [256, 256], granule = 64, segments = 4>]}}
  %qf = tpc.view %x {axis = 1, offset = 0, size = 128, tpc.state = [#tpc.state<split axis = 1, sizes = [64, 64], granule = 64>]} : tensor<?x512xf32> -> tensor<?x128xf32>
  // expected-remark @+2 {{transfer: [#tpc.state<split axis = 1, sizes = [128, 128], granule = 64, segments = 2>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 1, sizes = [256, 256], granule = 64, segments = 4>]}}
  %vf = tpc.view %x {axis = 1, offset = 256, size = 256, tpc.state = [#tpc.state<split axis = 1, sizes = [128, 128], granule = 64, segments = 2>]} : tensor<?x512xf32> -> tensor<?x256xf32>
  /// Half a segment: no rule.
  // expected-remark @+1 {{transfer: none}}
  %hf = tpc.view %x {axis = 1, offset = 0, size = 64} : tensor<?x512xf32> -> tensor<?x64xf32>
  /// Value heads in r = 2 segments of Hk: whole key-head groups per device; q and k by key heads.
  // expected-remark @+2 {{transfer: [#tpc.state<split axis = 1, sizes = [2, 2], granule = 1, segments = 2>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 1, sizes = [1, 1], granule = 1, segments = 1>, #tpc.state<split axis = 1, sizes = [1, 1], granule = 1, segments = 1>, #tpc.state<split axis = 1, sizes = [2, 2], granule = 1, segments = 2>, #tpc.state<split axis = 1, sizes = [2, 2], granule = 1, segments = 2>, #tpc.state<split axis = 1, sizes = [2, 2], granule = 1, segments = 2>, #tpc.state<split axis = 0, sizes = [1, 1], granule = 1, segments = 1>, #tpc.state<mirrored>]}}
  %o = tpc.delta_net %q, %q, %v, %g, %g, %s, %pos {scale = 0.125 : f32, tpc.state = [#tpc.state<split axis = 1, sizes = [2, 2], segments = 2>]} : (tensor<?x2x64xf32>, tensor<?x2x64xf32>, tensor<?x4x64xf32>, tensor<?x4xf32>, tensor<?x4xf32>, !tpc.recurrent_state<2x4x64x64x4>, tensor<?xi32>) -> tensor<?x4x64xf32>
  /// Grouped value heads (v split without segments) would pair a device's values with another's keys.
  // expected-remark @+1 {{transfer: none}}
  %o1 = tpc.delta_net %q, %q, %vg, %g, %g, %s, %pos {scale = 0.125 : f32} : (tensor<?x2x64xf32>, tensor<?x2x64xf32>, tensor<?x4x64xf32>, tensor<?x4xf32>, tensor<?x4xf32>, !tpc.recurrent_state<2x4x64x64x4>, tensor<?xi32>) -> tensor<?x4x64xf32>
  /// The gated norm is row-wise over each head, the gate z alongside.
  // expected-remark @+2 {{transfer: [#tpc.state<split axis = 1, sizes = [2, 2], granule = 1, segments = 2>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 1, sizes = [2, 2], granule = 1, segments = 2>, #tpc.state<mirrored>, #tpc.state<split axis = 1, sizes = [2, 2], granule = 1, segments = 2>]}}
  %n = tpc.gated_rms_norm %v, %nw, %v {eps = 1.0e-6 : f32, tpc.state = [#tpc.state<split axis = 1, sizes = [2, 2], segments = 2>]} : (tensor<?x4x64xf32>, tensor<64xf32>, tensor<?x4x64xf32>) -> tensor<?x4x64xf32>
  return
}
func.func @stage_transfer(%xm: tensor<?x8xf32> {tpc.state = #tpc.state<mirrored>},
                          %xs: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>}) {
  /// A stage transfer moves each device's part to its peer: mirrored and split pass through unchanged.
  // expected-remark @+2 {{transfer: [#tpc.state<mirrored>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<mirrored>]}}
  %0 = tpc.stage_transfer %xm {from = 0, to = 1, tpc.state = [#tpc.state<mirrored>]} : tensor<?x8xf32>
  // expected-remark @+2 {{transfer: [#tpc.state<split axis = 1, sizes = [4, 4], granule = 1, segments = 1>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 1, sizes = [4, 4], granule = 1, segments = 1>]}}
  %1 = tpc.stage_transfer %xs {from = 0, to = 1, tpc.state = [#tpc.state<split axis = 1, sizes = [4, 4]>]} : tensor<?x8xf32>
  /// (A partial operand is refused by the verifier: test/dialect/invalid.mlir.)
  return
}
}
