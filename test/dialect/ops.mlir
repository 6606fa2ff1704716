// RUN: tpc-opt %s | tpc-opt | FileCheck %s
// RUN: tpc-opt %s --mlir-print-op-generic | tpc-opt | FileCheck %s
/// Round trip of every tpc op, the kv_cache type and every #tpc.state form, in custom and generic form.

// CHECK-LABEL: func.func @weights_and_embedding
func.func @weights_and_embedding(%tokens: tensor<?xi32>) -> tensor<?x256xf32> {
  // CHECK: %[[E:.*]] = tpc.weight {ggml_type = "q8_0", name = "token_embd.weight"} : tensor<512x256xf32>
  %e = tpc.weight {ggml_type = "q8_0", name = "token_embd.weight"} : tensor<512x256xf32>
  // CHECK: tpc.weight {ggml_type = "q4_K", name = "blk.0.ffn_up_exps.weight"} : tensor<8x512x256xf32>
  %x = tpc.weight {ggml_type = "q4_K", name = "blk.0.ffn_up_exps.weight"} : tensor<8x512x256xf32>
  /// The importer's layer stamp prints before the dictionary; on other ops it is an ordinary attribute.
  // CHECK: tpc.weight layer 3 {ggml_type = "f32", name = "blk.3.attn_norm.weight"} : tensor<256xf32>
  %l = tpc.weight layer 3 {ggml_type = "f32", name = "blk.3.attn_norm.weight"} : tensor<256xf32>
  // CHECK: tpc.weight layer "output" {ggml_type = "q6_K", name = "output.weight"} : tensor<512x256xf32>
  %o = tpc.weight layer "output" {ggml_type = "q6_K", name = "output.weight"} : tensor<512x256xf32>
  // CHECK: tpc.get_rows %{{.*}}, %{{.*}} {tpc.layer = 3 : i64} : (tensor<512x256xf32>, tensor<?xi32>)
  %g = tpc.get_rows %e, %tokens {tpc.layer = 3 : i64} : (tensor<512x256xf32>, tensor<?xi32>) -> tensor<?x256xf32>
  // CHECK: tpc.get_rows %[[E]], %{{.*}} : (tensor<512x256xf32>, tensor<?xi32>) -> tensor<?x256xf32>
  %h = tpc.get_rows %e, %tokens : (tensor<512x256xf32>, tensor<?xi32>) -> tensor<?x256xf32>
  return %h : tensor<?x256xf32>
}

// CHECK-LABEL: func.func @select_rows
func.func @select_rows(%x: tensor<?x256xf32>, %rows: tensor<?xi32>) -> tensor<?x256xf32> {
  // CHECK: tpc.select_rows %{{.*}}, %{{.*}} : (tensor<?x256xf32>, tensor<?xi32>) -> tensor<?x256xf32>
  %h = tpc.select_rows %x, %rows : (tensor<?x256xf32>, tensor<?xi32>) -> tensor<?x256xf32>
  return %h : tensor<?x256xf32>
}

// CHECK-LABEL: func.func @norm_matmul_elementwise
func.func @norm_matmul_elementwise(%x: tensor<?x256xf32>, %w: tensor<512x256xf32>,
                                   %nw: tensor<256xf32>, %s: tensor<?x1xf32>) -> tensor<?x512xf32> {
  // CHECK: tpc.rms_norm %{{.*}} {eps = 9.99999997E-7 : f32} : tensor<?x256xf32> -> tensor<?x256xf32>
  %n = tpc.rms_norm %x {eps = 1.0e-6 : f32} : tensor<?x256xf32> -> tensor<?x256xf32>
  // CHECK: tpc.mul %{{.*}}, %{{.*}} : (tensor<?x256xf32>, tensor<256xf32>) -> tensor<?x256xf32>
  %m = tpc.mul %n, %nw : (tensor<?x256xf32>, tensor<256xf32>) -> tensor<?x256xf32>
  // CHECK: tpc.add %{{.*}}, %{{.*}} : (tensor<?x256xf32>, tensor<?x256xf32>) -> tensor<?x256xf32>
  %a = tpc.add %m, %x : (tensor<?x256xf32>, tensor<?x256xf32>) -> tensor<?x256xf32>
  // CHECK: tpc.div %{{.*}}, %{{.*}} : (tensor<?x256xf32>, tensor<?x1xf32>) -> tensor<?x256xf32>
  %d = tpc.div %a, %s : (tensor<?x256xf32>, tensor<?x1xf32>) -> tensor<?x256xf32>
  // CHECK: tpc.scale %{{.*}} {value = 1.600000e+01 : f32} : tensor<?x256xf32> -> tensor<?x256xf32>
  %c = tpc.scale %d {value = 16.0 : f32} : tensor<?x256xf32> -> tensor<?x256xf32>
  // CHECK: tpc.matmul %{{.*}}, %{{.*}} : (tensor<?x256xf32>, tensor<512x256xf32>) -> tensor<?x512xf32>
  %y = tpc.matmul %c, %w : (tensor<?x256xf32>, tensor<512x256xf32>) -> tensor<?x512xf32>
  // CHECK: tpc.softcap %{{.*}} {cap = 3.000000e+01 : f32} : tensor<?x512xf32> -> tensor<?x512xf32>
  %l = tpc.softcap %y {cap = 30.0 : f32} : tensor<?x512xf32> -> tensor<?x512xf32>
  return %l : tensor<?x512xf32>
}

// CHECK-LABEL: func.func @activations
func.func @activations(%g: tensor<?x128xf32>, %u: tensor<?x128xf32>, %gu: tensor<?x256xf32>) {
  // CHECK: tpc.unary silu %{{.*}} : tensor<?x128xf32> -> tensor<?x128xf32>
  %0 = tpc.unary silu %g : tensor<?x128xf32> -> tensor<?x128xf32>
  // CHECK: tpc.unary gelu %
  %1 = tpc.unary gelu %g : tensor<?x128xf32> -> tensor<?x128xf32>
  // CHECK: tpc.unary gelu_tanh %
  %2 = tpc.unary gelu_tanh %g : tensor<?x128xf32> -> tensor<?x128xf32>
  // CHECK: tpc.unary tanh %
  %3 = tpc.unary tanh %g : tensor<?x128xf32> -> tensor<?x128xf32>
  // CHECK: tpc.unary relu %
  %4 = tpc.unary relu %g : tensor<?x128xf32> -> tensor<?x128xf32>
  // CHECK: tpc.unary exp %
  %5 = tpc.unary exp %g : tensor<?x128xf32> -> tensor<?x128xf32>
  // CHECK: tpc.unary sigmoid %
  %6 = tpc.unary sigmoid %g : tensor<?x128xf32> -> tensor<?x128xf32>
  // CHECK: tpc.glu silu %{{.*}}, %{{.*}} : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  %7 = tpc.glu silu %g, %u : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  // CHECK: tpc.glu gelu %{{.*}}, %
  %8 = tpc.glu gelu %g, %u : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  // CHECK: tpc.glu gelu_tanh %{{.*}} : (tensor<?x256xf32>) -> tensor<?x128xf32>
  %9 = tpc.glu gelu_tanh %gu : (tensor<?x256xf32>) -> tensor<?x128xf32>
  // CHECK: tpc.softmax %{{.*}} : tensor<?x128xf32> -> tensor<?x128xf32>
  %10 = tpc.softmax %g : tensor<?x128xf32> -> tensor<?x128xf32>
  return
}

// CHECK-LABEL: func.func @moe_routing
func.func @moe_routing(%x: tensor<?x64xf32>, %router: tensor<8x64xf32>, %up: tensor<8x128x64xf32>,
                       %down: tensor<8x64x128xf32>, %scale: tensor<8xf32>) -> tensor<?x64xf32> {
  %logits = tpc.matmul %x, %router : (tensor<?x64xf32>, tensor<8x64xf32>) -> tensor<?x8xf32>
  %p = tpc.softmax %logits : tensor<?x8xf32> -> tensor<?x8xf32>
  // CHECK: %[[SEL:.*]] = tpc.top_k %{{.*}} {k = 2 : i64} : tensor<?x8xf32> -> tensor<?x2xi32>
  %sel = tpc.top_k %p {k = 2} : tensor<?x8xf32> -> tensor<?x2xi32>
  // CHECK: tpc.take_along %{{.*}}, %[[SEL]] {axis = 1 : i64} : (tensor<?x8xf32>, tensor<?x2xi32>) -> tensor<?x2xf32>
  %rw = tpc.take_along %p, %sel {axis = 1} : (tensor<?x8xf32>, tensor<?x2xi32>) -> tensor<?x2xf32>
  // CHECK: tpc.sum %{{.*}} {axis = 1 : i64, keep_dim = true} : tensor<?x2xf32> -> tensor<?x1xf32>
  %rs = tpc.sum %rw {axis = 1, keep_dim = true} : tensor<?x2xf32> -> tensor<?x1xf32>
  %rn = tpc.div %rw, %rs : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  // CHECK: tpc.mul_mat_id %{{.*}}, %{{.*}}, %[[SEL]] : (tensor<?x64xf32>, tensor<8x128x64xf32>, tensor<?x2xi32>) -> tensor<?x2x128xf32>
  %h = tpc.mul_mat_id %x, %up, %sel : (tensor<?x64xf32>, tensor<8x128x64xf32>, tensor<?x2xi32>) -> tensor<?x2x128xf32>
  %a = tpc.unary silu %h : tensor<?x2x128xf32> -> tensor<?x2x128xf32>
  // CHECK: tpc.mul_mat_id %{{.*}}, %{{.*}}, %[[SEL]] : (tensor<?x2x128xf32>, tensor<8x64x128xf32>, tensor<?x2xi32>) -> tensor<?x2x64xf32>
  %o = tpc.mul_mat_id %a, %down, %sel : (tensor<?x2x128xf32>, tensor<8x64x128xf32>, tensor<?x2xi32>) -> tensor<?x2x64xf32>
  // CHECK: tpc.get_rows %{{.*}}, %[[SEL]] : (tensor<8xf32>, tensor<?x2xi32>) -> tensor<?x2xf32>
  %es = tpc.get_rows %scale, %sel : (tensor<8xf32>, tensor<?x2xi32>) -> tensor<?x2xf32>
  // CHECK: tpc.sum %{{.*}} {axis = 1 : i64} : tensor<?x2x64xf32> -> tensor<?x64xf32>
  %s = tpc.sum %o {axis = 1} : tensor<?x2x64xf32> -> tensor<?x64xf32>
  %es1 = tpc.reshape %es : tensor<?x2xf32> -> tensor<?x2x1xf32>
  // CHECK: tpc.expert_combine %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?x2x64xf32>, tensor<?x2xf32>, tensor<?x2x1xf32>) -> tensor<?x64xf32>
  %c = tpc.expert_combine %o, %rn, %es1 : (tensor<?x2x64xf32>, tensor<?x2xf32>, tensor<?x2x1xf32>) -> tensor<?x64xf32>
  %r = tpc.add %c, %s : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}

/// gpt-oss's expert biases, clamped SwiGLU and YaRN RoPE.
// CHECK-LABEL: func.func @gpt_oss_ops
func.func @gpt_oss_ops(%g: tensor<?x2x160xf32>, %u: tensor<?x2x160xf32>, %b: tensor<8x160xf32>, %sel: tensor<?x2xi32>,
                       %q: tensor<?x8x64xf32>, %pos: tensor<?xi32>) -> tensor<?x2x160xf32> {
  // CHECK: tpc.add_id %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?x2x160xf32>, tensor<8x160xf32>, tensor<?x2xi32>) -> tensor<?x2x160xf32>
  %gb = tpc.add_id %g, %b, %sel : (tensor<?x2x160xf32>, tensor<8x160xf32>, tensor<?x2xi32>) -> tensor<?x2x160xf32>
  // CHECK: tpc.glu swiglu_oai %{{.*}}, %{{.*}} : (tensor<?x2x160xf32>, tensor<?x2x160xf32>) -> tensor<?x2x160xf32>
  %a = tpc.glu swiglu_oai %gb, %u : (tensor<?x2x160xf32>, tensor<?x2x160xf32>) -> tensor<?x2x160xf32>
  // CHECK: tpc.rope neox %{{.*}}, %{{.*}} {attn_factor = 1.500000e+00 : f32, base = 1.500000e+05 : f32, beta_fast = 1.600000e+01 : f32, beta_slow = 2.000000e+00 : f32, ext_factor = 1.000000e+00 : f32, freq_scale = 3.125000e-02 : f32, n_dims = 64 : i64, orig_ctx = 4096 : i64}
  %r = tpc.rope neox %q, %pos {n_dims = 64, base = 150000.0 : f32, freq_scale = 0.03125 : f32, ext_factor = 1.0 : f32, attn_factor = 1.5 : f32, beta_fast = 16.0 : f32, beta_slow = 2.0 : f32, orig_ctx = 4096} : (tensor<?x8x64xf32>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return %a : tensor<?x2x160xf32>
}

// CHECK-LABEL: func.func @shapes
func.func @shapes(%qkv: tensor<?x768xf32>, %a: tensor<?x64xf32>, %b: tensor<?x32xf32>) {
  // CHECK: tpc.view %{{.*}} {axis = 1 : i64, offset = 512 : i64, size = 128 : i64} : tensor<?x768xf32> -> tensor<?x128xf32>
  %k = tpc.view %qkv {axis = 1, offset = 512, size = 128} : tensor<?x768xf32> -> tensor<?x128xf32>
  // CHECK: tpc.reshape %{{.*}} : tensor<?x128xf32> -> tensor<?x2x64xf32>
  %h = tpc.reshape %k : tensor<?x128xf32> -> tensor<?x2x64xf32>
  // CHECK: tpc.permute %{{.*}} {perm = array<i64: 1, 0, 2>} : tensor<?x2x64xf32> -> tensor<2x?x64xf32>
  %p = tpc.permute %h {perm = array<i64: 1, 0, 2>} : tensor<?x2x64xf32> -> tensor<2x?x64xf32>
  // CHECK: tpc.concat %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<?x64xf32>, tensor<?x32xf32>) -> tensor<?x96xf32>
  %c = tpc.concat %a, %b {axis = 1} : (tensor<?x64xf32>, tensor<?x32xf32>) -> tensor<?x96xf32>
  // CHECK: tpc.reshape %{{.*}} : tensor<4x6xf32> -> tensor<24xf32>
  %cst = arith.constant dense<1.0> : tensor<4x6xf32>
  %flat = tpc.reshape %cst : tensor<4x6xf32> -> tensor<24xf32>
  return
}

// CHECK-LABEL: func.func @attention_layer
func.func @attention_layer(%q: tensor<?x8x64xf32>, %k: tensor<?x2x64xf32>, %v: tensor<?x2x64xf32>,
                           %pos: tensor<?xi32>, %ff: tensor<32xf32>, %sinks: tensor<8xf32>) {
  // CHECK: %[[C:.*]] = tpc.kv_cache {head_dim_k = 64 : i64, head_dim_v = 64 : i64, layer = 3 : i64, n_head_kv = 2 : i64} : !tpc.kv_cache<2x64x64>
  %cache = tpc.kv_cache {layer = 3, n_head_kv = 2, head_dim_k = 64, head_dim_v = 64} : !tpc.kv_cache<2x64x64>
  // CHECK: tpc.rope normal %{{.*}}, %{{.*}} {base = 1.000000e+04 : f32, n_dims = 64 : i64} : (tensor<?x8x64xf32>, tensor<?xi32>) -> tensor<?x8x64xf32>
  %qr = tpc.rope normal %q, %pos {n_dims = 64, base = 10000.0 : f32} : (tensor<?x8x64xf32>, tensor<?xi32>) -> tensor<?x8x64xf32>
  // CHECK: tpc.rope neox %{{.*}}, %{{.*}}, %{{.*}} {base = 1.000000e+06 : f32, freq_scale = 2.500000e-01 : f32, n_dims = 64 : i64} : (tensor<?x2x64xf32>, tensor<?xi32>, tensor<32xf32>) -> tensor<?x2x64xf32>
  %kr = tpc.rope neox %k, %pos, %ff {n_dims = 64, base = 1000000.0 : f32, freq_scale = 0.25 : f32} : (tensor<?x2x64xf32>, tensor<?xi32>, tensor<32xf32>) -> tensor<?x2x64xf32>
  // CHECK: tpc.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[C]], %{{.*}} {scale = 1.250000e-01 : f32} : (tensor<?x8x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>) -> tensor<?x8x64xf32>
  %o = tpc.attention %qr, %kr, %v, %cache, %pos {scale = 0.125 : f32} : (tensor<?x8x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>) -> tensor<?x8x64xf32>
  // CHECK: tpc.attention %{{.*}}, %[[C]], %{{.*}} sinks(%{{.*}}) {scale = 1.250000e-01 : f32, sliding_window = 512 : i64, softcap = 5.000000e+01 : f32} : (tensor<?x8x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>, tensor<8xf32>) -> tensor<?x8x64xf32>
  %o2 = tpc.attention %qr, %kr, %v, %cache, %pos sinks(%sinks) {scale = 0.125 : f32, sliding_window = 512, softcap = 50.0 : f32} : (tensor<?x8x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>, tensor<8xf32>) -> tensor<?x8x64xf32>
  return
}

// CHECK-LABEL: func.func @gated_delta_net
func.func @gated_delta_net(%x: tensor<?x512xf32>, %w: tensor<512x4xf32>, %pos: tensor<?xi32>, %g: tensor<?x4xf32>,
                           %beta: tensor<?x4xf32>, %z: tensor<?x4x64xf32>, %nw: tensor<64xf32>) {
  // CHECK: %[[S:.*]] = tpc.recurrent_state {conv_kernel = 4 : i64, head_dim_k = 64 : i64, head_dim_v = 64 : i64, layer = 0 : i64, n_key_heads = 2 : i64, n_value_heads = 4 : i64} : !tpc.recurrent_state<2x4x64x64x4>
  %s = tpc.recurrent_state {conv_kernel = 4, head_dim_k = 64, head_dim_v = 64, layer = 0, n_key_heads = 2, n_value_heads = 4} : !tpc.recurrent_state<2x4x64x64x4>
  // CHECK: tpc.ssm_conv %{{.*}}, %{{.*}}, %[[S]], %{{.*}} : (tensor<?x512xf32>, tensor<512x4xf32>, !tpc.recurrent_state<2x4x64x64x4>, tensor<?xi32>) -> tensor<?x512xf32>
  %c = tpc.ssm_conv %x, %w, %s, %pos : (tensor<?x512xf32>, tensor<512x4xf32>, !tpc.recurrent_state<2x4x64x64x4>, tensor<?xi32>) -> tensor<?x512xf32>
  %qf = tpc.view %c {axis = 1, offset = 0, size = 128} : tensor<?x512xf32> -> tensor<?x128xf32>
  %vf = tpc.view %c {axis = 1, offset = 256, size = 256} : tensor<?x512xf32> -> tensor<?x256xf32>
  %q3 = tpc.reshape %qf : tensor<?x128xf32> -> tensor<?x2x64xf32>
  %v = tpc.reshape %vf : tensor<?x256xf32> -> tensor<?x4x64xf32>
  // CHECK: tpc.l2_norm %{{.*}} {eps = 9.99999997E-7 : f32} : tensor<?x2x64xf32> -> tensor<?x2x64xf32>
  %q = tpc.l2_norm %q3 {eps = 1.0e-6 : f32} : tensor<?x2x64xf32> -> tensor<?x2x64xf32>
  // CHECK: tpc.delta_net %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[S]], %{{.*}} {scale = 1.250000e-01 : f32}
  %o = tpc.delta_net %q, %q, %v, %g, %beta, %s, %pos {scale = 0.125 : f32} : (tensor<?x2x64xf32>, tensor<?x2x64xf32>, tensor<?x4x64xf32>, tensor<?x4xf32>, tensor<?x4xf32>, !tpc.recurrent_state<2x4x64x64x4>, tensor<?xi32>) -> tensor<?x4x64xf32>
  // CHECK: tpc.gated_rms_norm %{{.*}}, %{{.*}}, %{{.*}} {eps = 9.99999997E-7 : f32} : (tensor<?x4x64xf32>, tensor<64xf32>, tensor<?x4x64xf32>) -> tensor<?x4x64xf32>
  %n = tpc.gated_rms_norm %o, %nw, %z {eps = 1.0e-6 : f32} : (tensor<?x4x64xf32>, tensor<64xf32>, tensor<?x4x64xf32>) -> tensor<?x4x64xf32>
  // CHECK: tpc.unary softplus
  %sp = tpc.unary softplus %g : tensor<?x4xf32> -> tensor<?x4xf32>
  return
}

// CHECK-LABEL: func.func @gated_attention
func.func @gated_attention(%q: tensor<?x4x64xf32>, %k: tensor<?x2x64xf32>, %v: tensor<?x2x64xf32>, %pos: tensor<?xi32>,
                           %gate: tensor<?x4x64xf32>) {
  %cache = tpc.kv_cache {layer = 3, n_head_kv = 2, head_dim_k = 64, head_dim_v = 64} : !tpc.kv_cache<2x64x64>
  // CHECK: tpc.attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} gate(%{{.*}}) {scale = 1.250000e-01 : f32} : (tensor<?x4x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>, tensor<?x4x64xf32>) -> tensor<?x4x64xf32>
  %o = tpc.attention %q, %k, %v, %cache, %pos gate(%gate) {scale = 0.125 : f32} : (tensor<?x4x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>, tensor<?x4x64xf32>) -> tensor<?x4x64xf32>
  return
}

// CHECK-LABEL: func.func @communication
// CHECK-SAME: tpc.state = #tpc.state<split axis = 1, sizes = [128, 128], granule = 64, segments = 1>
func.func @communication(%x: tensor<?x256xf32>, %r: tensor<?x256xf32>,
                         %s: tensor<?x256xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [128, 128], granule = 64>})
    -> (tensor<?x256xf32> {tpc.state = #tpc.state<mirrored>}) {
  // CHECK: %[[P:.*]] = tpc.scale %{{.*}} {tpc.state = [#tpc.state<partial>], value = 1.000000e+00 : f32}
  %p = tpc.scale %x {value = 1.0 : f32, tpc.state = [#tpc.state<partial>]} : tensor<?x256xf32> -> tensor<?x256xf32>
  // CHECK: tpc.all_reduce %[[P]] {tpc.state = [#tpc.state<mirrored>]} : tensor<?x256xf32>
  %m = tpc.all_reduce %p {tpc.state = [#tpc.state<mirrored>]} : tensor<?x256xf32>
  // CHECK: %{{.*}}:2 = tpc.all_reduce %{{.*}}, %{{.*}} : tensor<?x256xf32>, tensor<?x256xf32>
  %a:2 = tpc.all_reduce %x, %r : tensor<?x256xf32>, tensor<?x256xf32>
  // CHECK: tpc.reduce_scatter %[[P]] {axis = 1 : i64, tpc.state = [#tpc.state<split axis = 1, sizes = [192, 64], granule = 64, segments = 1>]} : tensor<?x256xf32>
  %rs = tpc.reduce_scatter %p {axis = 1, tpc.state = [#tpc.state<split axis = 1, sizes = [192, 64], granule = 64>]} : tensor<?x256xf32>
  // CHECK: tpc.all_gather %{{.*}} {axis = 1 : i64} : tensor<?x256xf32>
  %g = tpc.all_gather %rs {axis = 1} : tensor<?x256xf32>
  // CHECK: tpc.slice %{{.*}} {axis = 1 : i64, tpc.state = [#tpc.state<split axis = 1, sizes = [128, 128], granule = 2, segments = 2>]} : tensor<?x256xf32>
  %sl = tpc.slice %m {axis = 1, tpc.state = [#tpc.state<split axis = 1, sizes = [128, 128], granule = 2, segments = 2>]} : tensor<?x256xf32>
  // CHECK: tpc.backend_copy %{{.*}} {from = "device", to = "host", tpc.placement = "host"} : tensor<?x256xf32>
  %h = tpc.backend_copy %s {from = "device", to = "host", tpc.placement = "host"} : tensor<?x256xf32>
  // CHECK: tpc.backend_copy %{{.*}} {from = "host", to = "device", tpc.placement = ["device"], tpc.state = [#tpc.state<local device = 1>]} : tensor<?x256xf32>
  %d = tpc.backend_copy %x {from = "host", to = "device", tpc.placement = ["device"], tpc.state = [#tpc.state<local device = 1>]} : tensor<?x256xf32>
  // CHECK: tpc.stage_transfer %{{.*}} {from = 0 : i64, to = 1 : i64} : tensor<?x256xf32>
  %st = tpc.stage_transfer %m {from = 0, to = 1} : tensor<?x256xf32>
  // CHECK: tpc.stage_transfer %{{.*}} {from = 1 : i64, to = 0 : i64, tpc.state = [#tpc.state<split axis = 1, sizes = [128, 128], granule = 2, segments = 2>]} : tensor<?x256xf32>
  %sb = tpc.stage_transfer %sl {from = 1, to = 0, tpc.state = [#tpc.state<split axis = 1, sizes = [128, 128], granule = 2, segments = 2>]} : tensor<?x256xf32>
  return %m : tensor<?x256xf32>
}

/// The fused forms tpc-fuse-norms makes; both optional operands of the layer boundary in every combination.
// CHECK-LABEL: func.func @fused_norms
func.func @fused_norms(%x: tensor<?x256xf32>, %r: tensor<?x256xf32>, %w: tensor<256xf32>) {
  // CHECK: tpc.weighted_rms_norm %{{.*}}, %{{.*}} {eps = 9.99999997E-7 : f32} : (tensor<?x256xf32>, tensor<256xf32>) -> tensor<?x256xf32>
  %n = tpc.weighted_rms_norm %x, %w {eps = 1.0e-6 : f32} : (tensor<?x256xf32>, tensor<256xf32>) -> tensor<?x256xf32>
  // CHECK: %{{.*}}, %{{.*}} = tpc.all_reduce_rms_norm %{{.*}} residual %{{.*}} weight %{{.*}} {eps = 9.99999974E-6 : f32} : (tensor<?x256xf32>, tensor<?x256xf32>, tensor<256xf32>) -> (tensor<?x256xf32>, tensor<?x256xf32>)
  %s0, %n0 = tpc.all_reduce_rms_norm %x residual %r weight %w {eps = 1.0e-5 : f32} : (tensor<?x256xf32>, tensor<?x256xf32>, tensor<256xf32>) -> (tensor<?x256xf32>, tensor<?x256xf32>)
  // CHECK: tpc.all_reduce_rms_norm %{{.*}} residual %{{.*}} {eps
  // CHECK-NOT: weight
  // CHECK-SAME: : (tensor<?x256xf32>, tensor<?x256xf32>) -> (tensor<?x256xf32>, tensor<?x256xf32>)
  %s1, %n1 = tpc.all_reduce_rms_norm %x residual %r {eps = 1.0e-5 : f32} : (tensor<?x256xf32>, tensor<?x256xf32>) -> (tensor<?x256xf32>, tensor<?x256xf32>)
  // CHECK: tpc.all_reduce_rms_norm %{{.*}} weight %{{.*}} {eps
  %s2, %n2 = tpc.all_reduce_rms_norm %x weight %w {eps = 1.0e-5 : f32} : (tensor<?x256xf32>, tensor<256xf32>) -> (tensor<?x256xf32>, tensor<?x256xf32>)
  // CHECK: tpc.all_reduce_rms_norm %{{.*}} {eps = 9.99999974E-6 : f32} : (tensor<?x256xf32>) -> (tensor<?x256xf32>, tensor<?x256xf32>)
  %s3, %n3 = tpc.all_reduce_rms_norm %x {eps = 1.0e-5 : f32} : (tensor<?x256xf32>) -> (tensor<?x256xf32>, tensor<?x256xf32>)
  return
}
