// A split weight gathered whole by a collective (hand-written: the pipeline gives weights the state their
// consumer needs). Pinning it to the host would put an all_gather on host memory.
module attributes {tpc.devices = 2 : i64} {
  func.func @forward(%arg0: tensor<?xi32>, %arg1: tensor<?xi32>) -> tensor<?x256xf32> {
    %0 = tpc.weight {ggml_type = "f32", name = "token_embd.weight", tpc.state = [#tpc.state<split axis = 1, sizes = [128, 128], granule = 1>]} : tensor<512x256xf32>
    %1 = tpc.all_gather %0 {axis = 1, tpc.state = [#tpc.state<mirrored>]} : tensor<512x256xf32>
    %2 = tpc.get_rows %1, %arg0 {tpc.state = [#tpc.state<mirrored>]} : (tensor<512x256xf32>, tensor<?xi32>) -> tensor<?x256xf32>
    return %2 : tensor<?x256xf32>
  }
}
