// One llama layer of tiny-llama (GQA 8 query / 2 KV heads of 32, FFN 768) and its output head,
// as tpc compile imports it (--stop-after=import).
module attributes {tpc.arch = "llama", tpc.gguf = "/work/shared/fixtures/tiny-llama.gguf", tpc.n_ctx_train = 4096 : i64, tpc.n_vocab = 512 : i64} {
  func.func @forward(%arg0: tensor<?xi32>, %arg1: tensor<?xi32>) -> tensor<?x512xf32> {
    %0 = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<512x256xf32>
    %1 = tpc.get_rows %0, %arg0 : (tensor<512x256xf32>, tensor<?xi32>) -> tensor<?x256xf32>
    %2 = tpc.weight {ggml_type = "f32", name = "blk.0.attn_norm.weight"} : tensor<256xf32>
    %3 = tpc.weight {ggml_type = "f32", name = "blk.0.attn_q.weight"} : tensor<256x256xf32>
    %4 = tpc.weight {ggml_type = "f32", name = "blk.0.attn_k.weight"} : tensor<64x256xf32>
    %5 = tpc.weight {ggml_type = "f32", name = "blk.0.attn_v.weight"} : tensor<64x256xf32>
    %6 = tpc.weight {ggml_type = "f32", name = "blk.0.attn_output.weight"} : tensor<256x256xf32>
    %7 = tpc.weight {ggml_type = "f32", name = "blk.0.ffn_norm.weight"} : tensor<256xf32>
    %8 = tpc.weight {ggml_type = "f32", name = "blk.0.ffn_gate.weight"} : tensor<768x256xf32>
    %9 = tpc.weight {ggml_type = "f32", name = "blk.0.ffn_up.weight"} : tensor<768x256xf32>
    %10 = tpc.weight {ggml_type = "f32", name = "blk.0.ffn_down.weight"} : tensor<256x768xf32>
    %11 = tpc.rms_norm %1 {eps = 9.99999974E-6 : f32} : tensor<?x256xf32> -> tensor<?x256xf32>
    %12 = tpc.mul %11, %2 : (tensor<?x256xf32>, tensor<256xf32>) -> tensor<?x256xf32>
    %13 = tpc.matmul %12, %3 : (tensor<?x256xf32>, tensor<256x256xf32>) -> tensor<?x256xf32>
    %14 = tpc.reshape %13 : tensor<?x256xf32> -> tensor<?x8x32xf32>
    %15 = tpc.matmul %12, %4 : (tensor<?x256xf32>, tensor<64x256xf32>) -> tensor<?x64xf32>
    %16 = tpc.reshape %15 : tensor<?x64xf32> -> tensor<?x2x32xf32>
    %17 = tpc.matmul %12, %5 : (tensor<?x256xf32>, tensor<64x256xf32>) -> tensor<?x64xf32>
    %18 = tpc.reshape %17 : tensor<?x64xf32> -> tensor<?x2x32xf32>
    %19 = tpc.rope normal %14, %arg1 {base = 1.000000e+04 : f32, n_dims = 32 : i64} : (tensor<?x8x32xf32>, tensor<?xi32>) -> tensor<?x8x32xf32>
    %20 = tpc.rope normal %16, %arg1 {base = 1.000000e+04 : f32, n_dims = 32 : i64} : (tensor<?x2x32xf32>, tensor<?xi32>) -> tensor<?x2x32xf32>
    %21 = tpc.kv_cache {head_dim_k = 32 : i64, head_dim_v = 32 : i64, layer = 0 : i64, n_head_kv = 2 : i64} : !tpc.kv_cache<2x32x32>
    %22 = tpc.attention %19, %20, %18, %21, %arg1 {scale = 0.176776692 : f32} : (tensor<?x8x32xf32>, tensor<?x2x32xf32>, tensor<?x2x32xf32>, !tpc.kv_cache<2x32x32>, tensor<?xi32>) -> tensor<?x8x32xf32>
    %23 = tpc.reshape %22 : tensor<?x8x32xf32> -> tensor<?x256xf32>
    %24 = tpc.matmul %23, %6 : (tensor<?x256xf32>, tensor<256x256xf32>) -> tensor<?x256xf32>
    %25 = tpc.add %1, %24 : (tensor<?x256xf32>, tensor<?x256xf32>) -> tensor<?x256xf32>
    %26 = tpc.rms_norm %25 {eps = 9.99999974E-6 : f32} : tensor<?x256xf32> -> tensor<?x256xf32>
    %27 = tpc.mul %26, %7 : (tensor<?x256xf32>, tensor<256xf32>) -> tensor<?x256xf32>
    %28 = tpc.matmul %27, %8 : (tensor<?x256xf32>, tensor<768x256xf32>) -> tensor<?x768xf32>
    %29 = tpc.matmul %27, %9 : (tensor<?x256xf32>, tensor<768x256xf32>) -> tensor<?x768xf32>
    %30 = tpc.glu silu %28, %29 : (tensor<?x768xf32>, tensor<?x768xf32>) -> tensor<?x768xf32>
    %31 = tpc.matmul %30, %10 : (tensor<?x768xf32>, tensor<256x768xf32>) -> tensor<?x256xf32>
    %32 = tpc.add %25, %31 : (tensor<?x256xf32>, tensor<?x256xf32>) -> tensor<?x256xf32>
    %126 = tpc.weight {ggml_type = "f32", name = "output_norm.weight"} : tensor<256xf32>
    %127 = tpc.weight {ggml_type = "f32", name = "output.weight"} : tensor<512x256xf32>
    %128 = tpc.rms_norm %32 {eps = 9.99999974E-6 : f32} : tensor<?x256xf32> -> tensor<?x256xf32>
    %129 = tpc.mul %128, %126 : (tensor<?x256xf32>, tensor<256xf32>) -> tensor<?x256xf32>
    %130 = tpc.matmul %129, %127 : (tensor<?x256xf32>, tensor<512x256xf32>) -> tensor<?x512xf32>
    return %130 : tensor<?x512xf32>
  }
}
