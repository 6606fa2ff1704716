// RUN: tpc-opt %s --tpc-test-split-rules --verify-diagnostics -o /dev/null
/// The split rules gpt-oss adds: tpc.add_id (per-expert biases) with each layout of its mul_mat_id, the
/// bias added once to a partial value only on one device, and the clamped SwiGLU keeping routed rows.

module attributes {tpc.devices = 2 : i64} {
func.func @add_id_intermediate(
    %x: tensor<?x2x8xf32> {tpc.state = #tpc.state<split axis = 2, sizes = [4, 4], granule = 4>},
    %b: tensor<4x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4], granule = 4>},
    %bm: tensor<4x8xf32> {tpc.state = #tpc.state<mirrored>},
    %ids: tensor<?x2xi32> {tpc.state = #tpc.state<mirrored>}) {
  /// Every expert's columns split: the bias's columns follow (gate/up biases of an intermediate split).
  // expected-remark @+2 {{transfer: [#tpc.state<split axis = 2, sizes = [4, 4], granule = 4, segments = 1>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<split axis = 2, sizes = [4, 4], granule = 4, segments = 1>, #tpc.state<split axis = 1, sizes = [4, 4], granule = 4, segments = 1>, #tpc.state<mirrored>]}}
  %0 = tpc.add_id %x, %b, %ids {tpc.state = [#tpc.state<split axis = 2, sizes = [4, 4], granule = 4>]} : (tensor<?x2x8xf32>, tensor<4x8xf32>, tensor<?x2xi32>) -> tensor<?x2x8xf32>
  /// Split columns against a whole bias: a device would not know which columns it holds.
  // expected-remark @+1 {{transfer: none}}
  %1 = tpc.add_id %x, %bm, %ids : (tensor<?x2x8xf32>, tensor<4x8xf32>, tensor<?x2xi32>) -> tensor<?x2x8xf32>
  /// The clamped SwiGLU is elementwise in (gate, up): a split of the GLU elements passes.
  // expected-remark @+1 {{transfer: [#tpc.state<split axis = 2, sizes = [4, 4], granule = 4, segments = 1>]}}
  %2 = tpc.glu swiglu_oai %0, %0 : (tensor<?x2x8xf32>, tensor<?x2x8xf32>) -> tensor<?x2x8xf32>
  return
}
func.func @add_id_experts(
    %x: tensor<?x2x6xf32> {tpc.state = #tpc.state<routed sizes = [3, 1]>},
    %b: tensor<4x6xf32> {tpc.state = #tpc.state<split axis = 0, sizes = [3, 1]>},
    %bo: tensor<4x6xf32> {tpc.state = #tpc.state<split axis = 0, sizes = [2, 2]>},
    %ids: tensor<?x2xi32> {tpc.state = #tpc.state<mirrored>}) {
  /// Whole experts: each device adds the bias rows of its own experts; the rows it does not hold stay zero.
  // expected-remark @+2 {{transfer: [#tpc.state<routed sizes = [3, 1]>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<routed sizes = [3, 1]>, #tpc.state<split axis = 0, sizes = [3, 1], granule = 1, segments = 1>, #tpc.state<mirrored>]}}
  %0 = tpc.add_id %x, %b, %ids {tpc.state = [#tpc.state<routed sizes = [3, 1]>]} : (tensor<?x2x6xf32>, tensor<4x6xf32>, tensor<?x2xi32>) -> tensor<?x2x6xf32>
  /// The bias rows of other experts than the routed rows': no local rule.
  // expected-remark @+1 {{transfer: none}}
  %1 = tpc.add_id %x, %bo, %ids : (tensor<?x2x6xf32>, tensor<4x6xf32>, tensor<?x2xi32>) -> tensor<?x2x6xf32>
  /// swiglu_oai(0, 0) = 0: routed rows pass the clamped SwiGLU like any GLU.
  // expected-remark @+1 {{transfer: [#tpc.state<routed sizes = [3, 1]>]}}
  %2 = tpc.glu swiglu_oai %0, %0 : (tensor<?x2x6xf32>, tensor<?x2x6xf32>) -> tensor<?x2x6xf32>
  return
}
func.func @add_id_partial(
    %x: tensor<?x2x6xf32> {tpc.state = #tpc.state<partial>},
    %b: tensor<4x6xf32> {tpc.state = #tpc.state<mirrored>},
    %ids: tensor<?x2xi32> {tpc.state = #tpc.state<mirrored>}) {
  /// A partial value plus a whole bias on every device would add the bias once per device: no rule.
  // expected-remark @+1 {{transfer: none}}
  %0 = tpc.add_id %x, %b, %ids : (tensor<?x2x6xf32>, tensor<4x6xf32>, tensor<?x2xi32>) -> tensor<?x2x6xf32>
  /// On one device only (the others forward x): the bias joins the addends once.
  // expected-remark @+2 {{transfer: [#tpc.state<partial>]}}
  // expected-remark @+1 {{requirements: [#tpc.state<partial>, #tpc.state<mirrored>, #tpc.state<mirrored>]}}
  %1 = tpc.add_id %x, %b, %ids {tpc.on_device = 0 : i64, tpc.state = [#tpc.state<partial>]} : (tensor<?x2x6xf32>, tensor<4x6xf32>, tensor<?x2xi32>) -> tensor<?x2x6xf32>
  return
}
func.func @rope_yarn(%q: tensor<?x8x64xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>},
                     %pos: tensor<?xi32> {tpc.state = #tpc.state<mirrored>}) {
  /// YaRN changes the angles, not the layout: heads split as for plain RoPE.
  // expected-remark @+1 {{transfer: [#tpc.state<split axis = 1, sizes = [4, 4], granule = 1, segments = 1>]}}
  %0 = tpc.rope neox %q, %pos {base = 1.5e+05 : f32, n_dims = 64 : i64, freq_scale = 3.125e-02 : f32, ext_factor = 1.0 : f32, orig_ctx = 4096 : i64} : (tensor<?x8x64xf32>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}
}
