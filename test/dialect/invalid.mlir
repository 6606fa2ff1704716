// RUN: tpc-opt %s --split-input-file --verify-diagnostics
/// One case per verifier/type-inference error of the tpc ops and the kv_cache type.

func.func @negative_binary_rank(%a: tensor<8xf32>, %b: tensor<2x8xf32>) {
  // expected-error @+1 {{'tpc.add' op rhs 'tensor<2x8xf32>' has a higher rank than lhs 'tensor<8xf32>'}}
  %0 = tpc.add %a, %b : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @negative_binary_broadcast(%a: tensor<?x8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{'tpc.mul' op rhs 'tensor<4xf32>' does not broadcast to lhs 'tensor<?x8xf32>': dim 0 is 4, expected 1 or 8}}
  %0 = tpc.mul %a, %b : (tensor<?x8xf32>, tensor<4xf32>) -> tensor<?x8xf32>
  return
}

// -----

/// The result type of an inferring op must be the inferred one.
func.func @negative_inferred_type_mismatch(%a: tensor<?x8xf32>, %b: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.div' op result type(s) 'tensor<?x9xf32>' differ from the inferred type(s) 'tensor<?x8xf32>'}}
  %0 = tpc.div %a, %b : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x9xf32>
  return
}

// -----

func.func @negative_attention_rank(%q: tensor<?x512xf32>, %k: tensor<?x2x64xf32>, %c: !tpc.kv_cache<2x64x64>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.attention' op q must have rank 3, got 'tensor<?x512xf32>'}}
  %0 = tpc.attention %q, %k, %k, %c, %p {scale = 1.0 : f32} : (tensor<?x512xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_attention_dynamic_heads(%q: tensor<?x?x64xf32>, %k: tensor<?x2x64xf32>, %c: !tpc.kv_cache<2x64x64>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.attention' op q 'tensor<?x?x64xf32>' must have static head count and head size}}
  %0 = tpc.attention %q, %k, %k, %c, %p {scale = 1.0 : f32} : (tensor<?x?x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_attention_tokens(%q: tensor<4x8x64xf32>, %k: tensor<5x2x64xf32>, %c: !tpc.kv_cache<2x64x64>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.attention' op k 'tensor<5x2x64xf32>' has a different token count than q 'tensor<4x8x64xf32>'}}
  %0 = tpc.attention %q, %k, %k, %c, %p {scale = 1.0 : f32} : (tensor<4x8x64xf32>, tensor<5x2x64xf32>, tensor<5x2x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>) -> tensor<4x8x64xf32>
  return
}

// -----

func.func @negative_attention_head_size(%q: tensor<?x8x64xf32>, %k: tensor<?x2x32xf32>, %c: !tpc.kv_cache<2x64x64>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.attention' op k head size 32 differs from q head size 64}}
  %0 = tpc.attention %q, %k, %k, %c, %p {scale = 1.0 : f32} : (tensor<?x8x64xf32>, tensor<?x2x32xf32>, tensor<?x2x32xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>) -> tensor<?x8x32xf32>
  return
}

// -----

func.func @negative_attention_v_heads(%q: tensor<?x8x64xf32>, %k: tensor<?x2x64xf32>, %v: tensor<?x4x64xf32>, %c: !tpc.kv_cache<2x64x64>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.attention' op v has 4 heads but k has 2}}
  %0 = tpc.attention %q, %k, %v, %c, %p {scale = 1.0 : f32} : (tensor<?x8x64xf32>, tensor<?x2x64xf32>, tensor<?x4x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_attention_gqa(%q: tensor<?x6x64xf32>, %k: tensor<?x4x64xf32>, %c: !tpc.kv_cache<4x64x64>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.attention' op query heads 6 are not a multiple of KV heads 4}}
  %0 = tpc.attention %q, %k, %k, %c, %p {scale = 1.0 : f32} : (tensor<?x6x64xf32>, tensor<?x4x64xf32>, tensor<?x4x64xf32>, !tpc.kv_cache<4x64x64>, tensor<?xi32>) -> tensor<?x6x64xf32>
  return
}

// -----

func.func @negative_attention_cache(%q: tensor<?x8x64xf32>, %k: tensor<?x2x64xf32>, %c: !tpc.kv_cache<1x64x64>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.attention' op cache '!tpc.kv_cache<1x64x64>' does not match k/v (expected !tpc.kv_cache<2x64x64>)}}
  %0 = tpc.attention %q, %k, %k, %c, %p {scale = 1.0 : f32} : (tensor<?x8x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<1x64x64>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_attention_sinks(%q: tensor<?x8x64xf32>, %k: tensor<?x2x64xf32>, %c: !tpc.kv_cache<2x64x64>, %p: tensor<?xi32>, %s: tensor<2xf32>) {
  // expected-error @+1 {{'tpc.attention' op sinks 'tensor<2xf32>' must have one entry per query head (8)}}
  %0 = tpc.attention %q, %k, %k, %c, %p sinks(%s) {scale = 1.0 : f32} : (tensor<?x8x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>, tensor<2xf32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_attention_window(%q: tensor<?x8x64xf32>, %k: tensor<?x2x64xf32>, %c: !tpc.kv_cache<2x64x64>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.attention' op sliding_window must be >= 0 (0 = none), got -1}}
  %0 = tpc.attention %q, %k, %k, %c, %p {scale = 1.0 : f32, sliding_window = -1} : (tensor<?x8x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_attention_softcap(%q: tensor<?x8x64xf32>, %k: tensor<?x2x64xf32>, %c: !tpc.kv_cache<2x64x64>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.attention' op softcap must be >= 0 (0 = none), got -5}}
  %0 = tpc.attention %q, %k, %k, %c, %p {scale = 1.0 : f32, softcap = -5.0 : f32} : (tensor<?x8x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_concat_dims(%a: tensor<?x64xf32>, %b: tensor<?x2x32xf32>) {
  // expected-error @+1 {{'tpc.concat' op input must have rank 2, got 'tensor<?x2x32xf32>'}}
  %0 = tpc.concat %a, %b {axis = 1} : (tensor<?x64xf32>, tensor<?x2x32xf32>) -> tensor<?x96xf32>
  return
}

// -----

func.func @negative_concat_other_dim(%a: tensor<4x64xf32>, %b: tensor<5x32xf32>) {
  // expected-error @+1 {{'tpc.concat' op input 1 'tensor<5x32xf32>' differs from input 0 'tensor<4x64xf32>' in dim 0 (only axis 1 may differ)}}
  %0 = tpc.concat %a, %b {axis = 1} : (tensor<4x64xf32>, tensor<5x32xf32>) -> tensor<4x96xf32>
  return
}

// -----

func.func @negative_concat_axis(%a: tensor<?x64xf32>) {
  // expected-error @+1 {{'tpc.concat' op axis 2 is out of range for 'tensor<?x64xf32>'}}
  %0 = tpc.concat %a {axis = 2} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @negative_concat_empty() {
  // expected-error @+1 {{'tpc.concat' op needs at least one input}}
  %0 = "tpc.concat"() <{axis = 0 : i64}> : () -> tensor<4xf32>
  return
}

// -----

func.func @negative_expert_combine_no_multiplier(%x: tensor<?x2x64xf32>) {
  // expected-error @+1 {{'tpc.expert_combine' op needs at least one multiplier}}
  %0 = "tpc.expert_combine"(%x) : (tensor<?x2x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @negative_expert_combine_multiplier(%x: tensor<?x2x64xf32>, %m: tensor<?x3xf32>) {
  // expected-error @+1 {{'tpc.expert_combine' op multiplier 0 'tensor<?x3xf32>' must be tensor<?x2xf32> or tensor<?x2x1xf32> to match x 'tensor<?x2x64xf32>'}}
  %0 = tpc.expert_combine %x, %m : (tensor<?x2x64xf32>, tensor<?x3xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @negative_get_rows_scalar_table(%t: tensor<f32>, %ids: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.get_rows' op table must have rank >= 1, got 'tensor<f32>'}}
  %0 = tpc.get_rows %t, %ids : (tensor<f32>, tensor<?xi32>) -> tensor<?xf32>
  return
}

// -----

func.func @negative_glu_shapes(%g: tensor<?x128xf32>, %u: tensor<?x64xf32>) {
  // expected-error @+1 {{'tpc.glu' op gate 'tensor<?x128xf32>' and up 'tensor<?x64xf32>' must have the same shape}}
  %0 = tpc.glu silu %g, %u : (tensor<?x128xf32>, tensor<?x64xf32>) -> tensor<?x128xf32>
  return
}

// -----

func.func @negative_glu_odd(%gu: tensor<?x255xf32>) {
  // expected-error @+1 {{'tpc.glu' op merged gate|up operand 'tensor<?x255xf32>' needs a static, even last dimension to split into halves}}
  %0 = tpc.glu silu %gu : (tensor<?x255xf32>) -> tensor<?x127xf32>
  return
}

// -----

func.func @negative_kv_cache_layer() {
  // expected-error @+1 {{'tpc.kv_cache' op layer must be >= 0, got -1}}
  %0 = tpc.kv_cache {layer = -1, n_head_kv = 2, head_dim_k = 64, head_dim_v = 64} : !tpc.kv_cache<2x64x64>
  return
}

// -----

func.func @negative_kv_cache_sizes() {
  // expected-error @+1 {{'tpc.kv_cache' op n_head_kv, head_dim_k and head_dim_v must be positive, got 0, 64, 64}}
  %0 = "tpc.kv_cache"() <{layer = 0 : i64, n_head_kv = 0 : i64, head_dim_k = 64 : i64, head_dim_v = 64 : i64}> : () -> !tpc.kv_cache<1x64x64>
  return
}

// -----

func.func @negative_kv_cache_type() {
  // expected-error @+1 {{'tpc.kv_cache' op result type(s) '!tpc.kv_cache<2x64x128>' differ from the inferred type(s) '!tpc.kv_cache<2x64x64>'}}
  %0 = tpc.kv_cache {layer = 0, n_head_kv = 2, head_dim_k = 64, head_dim_v = 64} : !tpc.kv_cache<2x64x128>
  return
}

// -----

// expected-error @+1 {{!tpc.kv_cache sizes must be positive, got 2x0x64}}
func.func private @negative_kv_cache_type_zero(!tpc.kv_cache<2x0x64>)

// -----

// expected-error @+1 {{!tpc.kv_cache expects 3 sizes HkvxDkxDv, got 2}}
func.func private @negative_kv_cache_type_rank(!tpc.kv_cache<2x64>)

// -----

func.func @negative_matmul_inner(%x: tensor<?x256xf32>, %w: tensor<512x128xf32>) {
  // expected-error @+1 {{'tpc.matmul' op x 'tensor<?x256xf32>' has inner dim 256 but weight 'tensor<512x128xf32>' expects 128 (y = x . w^T, w is NxK)}}
  %0 = tpc.matmul %x, %w : (tensor<?x256xf32>, tensor<512x128xf32>) -> tensor<?x512xf32>
  return
}

// -----

func.func @negative_matmul_weight_rank(%x: tensor<?x256xf32>, %w: tensor<2x512x256xf32>) {
  // expected-error @+1 {{'tpc.matmul' op weight must have rank 2, got 'tensor<2x512x256xf32>'}}
  %0 = tpc.matmul %x, %w : (tensor<?x256xf32>, tensor<2x512x256xf32>) -> tensor<?x512xf32>
  return
}

// -----

func.func @negative_add_id_bias_width(%x: tensor<?x2x160xf32>, %b: tensor<8x128xf32>, %ids: tensor<?x2xi32>) {
  // expected-error @+1 {{'tpc.add_id' op bias 'tensor<8x128xf32>' must have one row of x's width 160 per expert (ExN)}}
  %0 = tpc.add_id %x, %b, %ids : (tensor<?x2x160xf32>, tensor<8x128xf32>, tensor<?x2xi32>) -> tensor<?x2x160xf32>
  return
}

// -----

func.func @negative_add_id_slots(%x: tensor<?x2x160xf32>, %b: tensor<8x160xf32>, %ids: tensor<?x4xi32>) {
  // expected-error @+1 {{'tpc.add_id' op x 'tensor<?x2x160xf32>' and ids 'tensor<?x4xi32>' must agree on tokens and selected experts}}
  %0 = tpc.add_id %x, %b, %ids : (tensor<?x2x160xf32>, tensor<8x160xf32>, tensor<?x4xi32>) -> tensor<?x2x160xf32>
  return
}

// -----

func.func @negative_rope_yarn_without_context(%x: tensor<?x8x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.rope' op YaRN (ext_factor > 0) needs orig_ctx >= 1 and base != 1}}
  %0 = tpc.rope neox %x, %p {n_dims = 64, base = 150000.0 : f32, ext_factor = 1.0 : f32} : (tensor<?x8x64xf32>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_rope_attn_factor(%x: tensor<?x8x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.rope' op attn_factor must be > 0, got 0}}
  %0 = tpc.rope neox %x, %p {n_dims = 64, base = 150000.0 : f32, attn_factor = 0.0 : f32} : (tensor<?x8x64xf32>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_mul_mat_id_rank(%x: tensor<?x2x1x64xf32>, %w: tensor<8x128x64xf32>, %ids: tensor<?x2xi32>) {
  // expected-error @+1 {{'tpc.mul_mat_id' op x must be tensor<?xK> or tensor<?xKselxK>, got 'tensor<?x2x1x64xf32>'}}
  %0 = tpc.mul_mat_id %x, %w, %ids : (tensor<?x2x1x64xf32>, tensor<8x128x64xf32>, tensor<?x2xi32>) -> tensor<?x2x128xf32>
  return
}

// -----

func.func @negative_mul_mat_id_tokens(%x: tensor<3x64xf32>, %w: tensor<8x128x64xf32>, %ids: tensor<4x2xi32>) {
  // expected-error @+1 {{'tpc.mul_mat_id' op x 'tensor<3x64xf32>' and ids 'tensor<4x2xi32>' have different token counts}}
  %0 = tpc.mul_mat_id %x, %w, %ids : (tensor<3x64xf32>, tensor<8x128x64xf32>, tensor<4x2xi32>) -> tensor<4x2x128xf32>
  return
}

// -----

func.func @negative_mul_mat_id_ksel(%x: tensor<?x3x64xf32>, %w: tensor<8x128x64xf32>, %ids: tensor<?x2xi32>) {
  // expected-error @+1 {{'tpc.mul_mat_id' op x 'tensor<?x3x64xf32>' has 3 inputs per token but ids select 2 experts}}
  %0 = tpc.mul_mat_id %x, %w, %ids : (tensor<?x3x64xf32>, tensor<8x128x64xf32>, tensor<?x2xi32>) -> tensor<?x2x128xf32>
  return
}

// -----

func.func @negative_mul_mat_id_inner(%x: tensor<?x32xf32>, %w: tensor<8x128x64xf32>, %ids: tensor<?x2xi32>) {
  // expected-error @+1 {{'tpc.mul_mat_id' op x 'tensor<?x32xf32>' has inner dim 32 but expert weights 'tensor<8x128x64xf32>' expect 64 (w is ExNxK)}}
  %0 = tpc.mul_mat_id %x, %w, %ids : (tensor<?x32xf32>, tensor<8x128x64xf32>, tensor<?x2xi32>) -> tensor<?x2x128xf32>
  return
}

// -----

func.func @negative_permute(%x: tensor<?x8x64xf32>) {
  // expected-error @+1 {{'tpc.permute' op perm [1, 1, 0] is not a permutation of the 3 axes of 'tensor<?x8x64xf32>'}}
  %0 = tpc.permute %x {perm = array<i64: 1, 1, 0>} : tensor<?x8x64xf32> -> tensor<8x8x?xf32>
  return
}

// -----

func.func @negative_reshape_element_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{'tpc.reshape' op element type changes from 'tensor<4xf32>' to 'tensor<4xi32>'}}
  %0 = tpc.reshape %x : tensor<4xf32> -> tensor<4xi32>
  return
}

// -----

func.func @negative_reshape_dynamic_inner(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.reshape' op only dim 0 (tokens) may be dynamic, got 'tensor<?x8xf32>' -> 'tensor<?x?xf32>'}}
  %0 = tpc.reshape %x : tensor<?x8xf32> -> tensor<?x?xf32>
  return
}

// -----

func.func @negative_reshape_token_dim(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.reshape' op the dynamic token dimension must stay dim 0: 'tensor<?x8xf32>' -> 'tensor<8x4xf32>'}}
  %0 = tpc.reshape %x : tensor<?x8xf32> -> tensor<8x4xf32>
  return
}

// -----

func.func @negative_reshape_count(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.reshape' op element count differs: 'tensor<?x8xf32>' -> 'tensor<?x3x3xf32>' (per token)}}
  %0 = tpc.reshape %x : tensor<?x8xf32> -> tensor<?x3x3xf32>
  return
}

// -----

func.func @negative_rms_norm_eps(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.rms_norm' op eps must be >= 0, got -1}}
  %0 = tpc.rms_norm %x {eps = -1.0 : f32} : tensor<?x8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_rope_tokens(%x: tensor<4x8x64xf32>, %p: tensor<5xi32>) {
  // expected-error @+1 {{'tpc.rope' op pos 'tensor<5xi32>' has a different token count than x 'tensor<4x8x64xf32>'}}
  %0 = tpc.rope normal %x, %p {n_dims = 64, base = 10000.0 : f32} : (tensor<4x8x64xf32>, tensor<5xi32>) -> tensor<4x8x64xf32>
  return
}

// -----

func.func @negative_rope_dynamic_head(%x: tensor<?x8x?xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.rope' op x 'tensor<?x8x?xf32>' must have a static head size}}
  %0 = tpc.rope normal %x, %p {n_dims = 64, base = 10000.0 : f32} : (tensor<?x8x?xf32>, tensor<?xi32>) -> tensor<?x8x?xf32>
  return
}

// -----

func.func @negative_rope_n_dims(%x: tensor<?x8x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.rope' op n_dims 128 must be even, >= 2 and <= the head size 64}}
  %0 = tpc.rope neox %x, %p {n_dims = 128, base = 10000.0 : f32} : (tensor<?x8x64xf32>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_rope_base(%x: tensor<?x8x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.rope' op base must be > 0, got 0}}
  %0 = tpc.rope neox %x, %p {n_dims = 64, base = 0.0 : f32} : (tensor<?x8x64xf32>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_rope_freq_scale(%x: tensor<?x8x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.rope' op freq_scale must be > 0, got -1}}
  %0 = tpc.rope neox %x, %p {n_dims = 64, base = 10000.0 : f32, freq_scale = -1.0 : f32} : (tensor<?x8x64xf32>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_rope_freq_factors(%x: tensor<?x8x64xf32>, %p: tensor<?xi32>, %f: tensor<64xf32>) {
  // expected-error @+1 {{'tpc.rope' op freq_factors 'tensor<64xf32>' must have n_dims/2 = 32 entries}}
  %0 = tpc.rope neox %x, %p, %f {n_dims = 64, base = 10000.0 : f32} : (tensor<?x8x64xf32>, tensor<?xi32>, tensor<64xf32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_softcap(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.softcap' op cap must be > 0, got 0}}
  %0 = tpc.softcap %x {cap = 0.0 : f32} : tensor<?x8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_softmax_scalar(%x: tensor<f32>) {
  // expected-error @+1 {{'tpc.softmax' op operand must have rank >= 1, got 'tensor<f32>'}}
  %0 = tpc.softmax %x : tensor<f32> -> tensor<f32>
  return
}

// -----

func.func @negative_sum_axis(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.sum' op axis 2 is out of range for 'tensor<?x8xf32>'}}
  %0 = tpc.sum %x {axis = 2} : tensor<?x8xf32> -> tensor<?xf32>
  return
}

// -----

func.func @negative_take_along_rank(%x: tensor<?x8xf32>, %ids: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.take_along' op ids must have rank 2, got 'tensor<?xi32>'}}
  %0 = tpc.take_along %x, %ids {axis = 1} : (tensor<?x8xf32>, tensor<?xi32>) -> tensor<?xf32>
  return
}

// -----

func.func @negative_take_along_dims(%x: tensor<4x8xf32>, %ids: tensor<5x2xi32>) {
  // expected-error @+1 {{'tpc.take_along' op x 'tensor<4x8xf32>' and ids 'tensor<5x2xi32>' differ in dim 0 (only axis 1 may differ)}}
  %0 = tpc.take_along %x, %ids {axis = 1} : (tensor<4x8xf32>, tensor<5x2xi32>) -> tensor<5x2xf32>
  return
}

// -----

func.func @negative_top_k_k(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.top_k' op k = 9 must be in [1, 8]}}
  %0 = tpc.top_k %x {k = 9} : tensor<?x8xf32> -> tensor<?x9xi32>
  return
}

// -----

func.func @negative_top_k_dynamic(%x: tensor<8x?xf32>) {
  // expected-error @+1 {{'tpc.top_k' op operand 'tensor<8x?xf32>' must have a static last dimension}}
  %0 = tpc.top_k %x {k = 2} : tensor<8x?xf32> -> tensor<8x2xi32>
  return
}

// -----

func.func @negative_unary_result_shape(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.unary' op result type(s) 'tensor<?x4xf32>' differ from the inferred type(s) 'tensor<?x8xf32>'}}
  %0 = tpc.unary relu %x : tensor<?x8xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @negative_view_dynamic(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.view' op axis 0 of 'tensor<?x8xf32>' is dynamic; views need a static axis}}
  %0 = tpc.view %x {axis = 0, offset = 0, size = 1} : tensor<?x8xf32> -> tensor<1x8xf32>
  return
}

// -----

func.func @negative_view_range(%x: tensor<?x768xf32>) {
  // expected-error @+1 {{'tpc.view' op range [700, 700 + 128) is not a non-empty sub-range of axis 1 (size 768)}}
  %0 = tpc.view %x {axis = 1, offset = 700, size = 128} : tensor<?x768xf32> -> tensor<?x128xf32>
  return
}

// -----

func.func @negative_weight_type() {
  // expected-error @+1 {{'tpc.weight' op unknown ggml_type "q9_K" for tensor "blk.0.attn_q.weight" (expected a ggml type name such as f32, q8_0, q4_K)}}
  %0 = tpc.weight {ggml_type = "q9_K", name = "blk.0.attn_q.weight"} : tensor<512x256xf32>
  return
}

// -----

func.func @negative_weight_name() {
  // expected-error @+1 {{'tpc.weight' op name must be a GGUF tensor name, got an empty string}}
  %0 = tpc.weight {ggml_type = "f32", name = ""} : tensor<512x256xf32>
  return
}

// -----

func.func @negative_weight_dynamic() {
  // expected-error @+1 {{'tpc.weight' op weight "w" must have a static, positive shape, got 'tensor<?x256xf32>'}}
  %0 = tpc.weight {ggml_type = "f32", name = "w"} : tensor<?x256xf32>
  return
}

// -----

func.func @negative_weight_block() {
  // expected-error @+1 {{'tpc.weight' op weight "blk.0.ffn_down.weight": innermost dim 320 is not a multiple of the q4_K block size 256}}
  %0 = tpc.weight {ggml_type = "q4_K", name = "blk.0.ffn_down.weight"} : tensor<64x320xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Communication ops: axes, placements and the states of operand and result.
//===----------------------------------------------------------------------===//

func.func @negative_all_gather_axis(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.all_gather' op axis 2 is out of range for 'tensor<?x8xf32>'}}
  %0 = tpc.all_gather %x {axis = 2} : tensor<?x8xf32>
  return
}

// -----

func.func @negative_all_gather_operand_state(%x: tensor<?x8xf32>) {
  %p = tpc.scale %x {value = 1.0 : f32, tpc.state = [#tpc.state<partial>]} : tensor<?x8xf32> -> tensor<?x8xf32>
  // expected-error @+1 {{'tpc.all_gather' op operand must be split along the gather axis, got #tpc.state<partial>}}
  %0 = tpc.all_gather %p {axis = 1} : tensor<?x8xf32>
  return
}

// -----

func.func @negative_all_gather_result_state(%x: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4], granule = 1>}) {
  // expected-error @+1 {{'tpc.all_gather' op result must be mirrored, got #tpc.state<split axis = 1, sizes = [4, 4], granule = 1, segments = 1>}}
  %0 = tpc.all_gather %x {axis = 1, tpc.state = [#tpc.state<split axis = 1, sizes = [4, 4]>]} : tensor<?x8xf32>
  return
}

// -----

/// An all-reduce of a split or mirrored value would sum copies or disjoint slices: rejected.
func.func @negative_all_reduce_split(%x: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>}) {
  // expected-error @+1 {{'tpc.all_reduce' op operand must be partial (or routed), got #tpc.state<split axis = 1, sizes = [4, 4], granule = 1, segments = 1>}}
  %0 = tpc.all_reduce %x : tensor<?x8xf32>
  return
}

// -----

func.func @negative_all_reduce_mirrored(%x: tensor<?x8xf32> {tpc.state = #tpc.state<mirrored>}) {
  // expected-error @+1 {{'tpc.all_reduce' op operand must be partial (or routed), got #tpc.state<mirrored>}}
  %0 = tpc.all_reduce %x : tensor<?x8xf32>
  return
}

// -----

func.func @negative_all_reduce_result(%x: tensor<?x8xf32> {tpc.state = #tpc.state<partial>}) {
  // expected-error @+1 {{'tpc.all_reduce' op result must be mirrored, got #tpc.state<partial>}}
  %0 = tpc.all_reduce %x {tpc.state = [#tpc.state<partial>]} : tensor<?x8xf32>
  return
}

// -----

func.func @negative_all_reduce_empty() {
  // expected-error @+1 {{'tpc.all_reduce' op needs at least one operand}}
  "tpc.all_reduce"() : () -> ()
  return
}

// -----

func.func @negative_backend_copy_placement(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.backend_copy' op placement must be "device" or "host", got "gpu"}}
  %0 = tpc.backend_copy %x {from = "gpu", to = "host"} : tensor<?x8xf32>
  return
}

// -----

func.func @negative_backend_copy_same(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.backend_copy' op copies from "host" to itself; from and to must differ}}
  %0 = tpc.backend_copy %x {from = "host", to = "host"} : tensor<?x8xf32>
  return
}

// -----

func.func @negative_backend_copy_state(%x: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>}) {
  // expected-error @+1 {{'tpc.backend_copy' op must keep the split state of its operand: #tpc.state<split axis = 1, sizes = [4, 4], granule = 1, segments = 1> -> #tpc.state<mirrored>}}
  %0 = tpc.backend_copy %x {from = "device", to = "host", tpc.state = [#tpc.state<mirrored>]} : tensor<?x8xf32>
  return
}

// -----

func.func @negative_stage_transfer_same(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.stage_transfer' op transfers from stage 1 to itself; from and to must differ}}
  %0 = tpc.stage_transfer %x {from = 1, to = 1} : tensor<?x8xf32>
  return
}

// -----

func.func @negative_stage_transfer_negative(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.stage_transfer' op stages must be >= 0, got from -1 to 1}}
  %0 = tpc.stage_transfer %x {from = -1, to = 1} : tensor<?x8xf32>
  return
}

// -----

func.func @negative_stage_transfer_partial(%x: tensor<?x8xf32> {tpc.state = #tpc.state<partial>}) {
  // expected-error @+1 {{'tpc.stage_transfer' op moves whole parts: its operand must be mirrored or split, got #tpc.state<partial>}}
  %0 = tpc.stage_transfer %x {from = 0, to = 1} : tensor<?x8xf32>
  return
}

// -----

func.func @negative_stage_transfer_state(%x: tensor<?x8xf32> {tpc.state = #tpc.state<split axis = 1, sizes = [4, 4]>}) {
  // expected-error @+1 {{'tpc.stage_transfer' op must keep the split state of its operand: #tpc.state<split axis = 1, sizes = [4, 4], granule = 1, segments = 1> -> #tpc.state<mirrored>}}
  %0 = tpc.stage_transfer %x {from = 0, to = 1, tpc.state = [#tpc.state<mirrored>]} : tensor<?x8xf32>
  return
}

// -----

func.func @negative_reduce_scatter_operand(%x: tensor<?x8xf32> {tpc.state = #tpc.state<mirrored>}) {
  // expected-error @+1 {{'tpc.reduce_scatter' op operand must be partial, got #tpc.state<mirrored>}}
  %0 = tpc.reduce_scatter %x {axis = 1} : tensor<?x8xf32>
  return
}

// -----

func.func @negative_reduce_scatter_result(%x: tensor<?x8xf32> {tpc.state = #tpc.state<partial>}) {
  // expected-error @+1 {{'tpc.reduce_scatter' op result must be split along the scatter axis, got #tpc.state<mirrored>}}
  %0 = tpc.reduce_scatter %x {axis = 1, tpc.state = [#tpc.state<mirrored>]} : tensor<?x8xf32>
  return
}

// -----

func.func @negative_reduce_scatter_axis(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.reduce_scatter' op axis -1 is out of range for 'tensor<?x8xf32>'}}
  %0 = tpc.reduce_scatter %x {axis = -1} : tensor<?x8xf32>
  return
}

// -----

func.func @negative_slice_operand(%x: tensor<?x8xf32> {tpc.state = #tpc.state<partial>}) {
  // expected-error @+1 {{'tpc.slice' op operand must be mirrored, got #tpc.state<partial>}}
  %0 = tpc.slice %x {axis = 1} : tensor<?x8xf32>
  return
}

// -----

func.func @negative_slice_result_axis(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'tpc.slice' op result must be split along the slice axis, got #tpc.state<split axis = 0, sizes = [2, 2], granule = 1, segments = 1>}}
  %0 = tpc.slice %x {axis = 1, tpc.state = [#tpc.state<split axis = 0, sizes = [2, 2]>]} : tensor<4x8xf32>
  return
}

// -----

func.func @negative_slice_axis(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'tpc.slice' op axis 5 is out of range for 'tensor<4x8xf32>'}}
  %0 = tpc.slice %x {axis = 5} : tensor<4x8xf32>
  return
}

// -----

func.func @negative_select_rows_rows_rank(%x: tensor<?x8xf32>, %rows: tensor<?x2xi32>) {
  // expected-error @+1 {{'tpc.select_rows' op rows must have rank 1, got 'tensor<?x2xi32>'}}
  %0 = tpc.select_rows %x, %rows : (tensor<?x8xf32>, tensor<?x2xi32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_select_rows_type(%x: tensor<?x8xf32>, %rows: tensor<3xi32>) {
  // expected-error @+1 {{'tpc.select_rows' op result type(s) 'tensor<?x8xf32>' differ from the inferred type(s) 'tensor<3x8xf32>'}}
  %0 = tpc.select_rows %x, %rows : (tensor<?x8xf32>, tensor<3xi32>) -> tensor<?x8xf32>
  return
}

// -----

/// Non-finite attributes: NaN fails every comparison and infinity passes "> 0", so both are refused by name.
func.func @negative_rms_norm_eps_nan(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.rms_norm' op eps must be finite, got nan}}
  %0 = tpc.rms_norm %x {eps = 0x7FC00000 : f32} : tensor<?x8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_rope_base_inf(%x: tensor<?x8x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.rope' op base must be finite, got inf}}
  %0 = tpc.rope neox %x, %p {n_dims = 64, base = 0x7F800000 : f32} : (tensor<?x8x64xf32>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_softcap_inf(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.softcap' op cap must be finite, got inf}}
  %0 = tpc.softcap %x {cap = 0x7F800000 : f32} : tensor<?x8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_scale_nan(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.scale' op value must be finite, got nan}}
  %0 = tpc.scale %x {value = 0x7FC00000 : f32} : tensor<?x8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_attention_scale(%q: tensor<?x8x64xf32>, %k: tensor<?x2x64xf32>, %c: !tpc.kv_cache<2x64x64>, %p: tensor<?xi32>) {
  // expected-error @+1 {{'tpc.attention' op scale must be > 0, got 0}}
  %0 = tpc.attention %q, %k, %k, %c, %p {scale = 0.0 : f32} : (tensor<?x8x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}

// -----

func.func @negative_weighted_rms_norm_weight(%x: tensor<?x8xf32>, %w: tensor<4xf32>) {
  // expected-error @+1 {{'tpc.weighted_rms_norm' op weight 'tensor<4xf32>' does not match the last dimension of x 'tensor<?x8xf32>'}}
  %0 = tpc.weighted_rms_norm %x, %w {eps = 1.0e-5 : f32} : (tensor<?x8xf32>, tensor<4xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_all_reduce_rms_norm_residual(%x: tensor<?x8xf32>, %r: tensor<?x4xf32>) {
  // expected-error @+1 {{'tpc.all_reduce_rms_norm' op residual 'tensor<?x4xf32>' must have the type of x 'tensor<?x8xf32>'}}
  %s, %n = tpc.all_reduce_rms_norm %x residual %r {eps = 1.0e-5 : f32} : (tensor<?x8xf32>, tensor<?x4xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  return
}

// -----

func.func @negative_all_reduce_rms_norm_eps(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.all_reduce_rms_norm' op eps must be >= 0, got -1}}
  %s, %n = tpc.all_reduce_rms_norm %x {eps = -1.0 : f32} : (tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  return
}

// -----

/// Like tpc.all_reduce: the addend is partial, everything else mirrored.
func.func @negative_all_reduce_rms_norm_operand(%x: tensor<?x8xf32> {tpc.state = #tpc.state<mirrored>}) {
  // expected-error @+1 {{'tpc.all_reduce_rms_norm' op operand must be partial, got #tpc.state<mirrored>}}
  %s, %n = tpc.all_reduce_rms_norm %x {eps = 1.0e-5 : f32} : (tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  return
}

// -----

func.func @negative_all_reduce_rms_norm_residual_state(%x: tensor<?x8xf32> {tpc.state = #tpc.state<partial>}, %r: tensor<?x8xf32> {tpc.state = #tpc.state<partial>}) {
  // expected-error @+1 {{'tpc.all_reduce_rms_norm' op residual and weight must be mirrored, got #tpc.state<partial>}}
  %s, %n = tpc.all_reduce_rms_norm %x residual %r {eps = 1.0e-5 : f32} : (tensor<?x8xf32>, tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  return
}

// -----

func.func @negative_all_reduce_rms_norm_result(%x: tensor<?x8xf32> {tpc.state = #tpc.state<partial>}) {
  // expected-error @+1 {{'tpc.all_reduce_rms_norm' op result must be mirrored, got #tpc.state<partial>}}
  %s, %n = tpc.all_reduce_rms_norm %x {eps = 1.0e-5 : f32, tpc.state = [#tpc.state<mirrored>, #tpc.state<partial>]} : (tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  return
}

// -----

/// The layer stamp is a block index or "output".
func.func @negative_layer_stamp(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tpc.scale' op tpc.layer must be a block index (i64 >= 0) or "output", got -1 : i64}}
  %0 = tpc.scale %x {value = 1.0 : f32, tpc.layer = -1 : i64} : tensor<?x8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_weight_layer_stamp() {
  // expected-error @+1 {{'tpc.weight' op tpc.layer must be a block index (i64 >= 0) or "output", got "head"}}
  %0 = tpc.weight layer "head" {ggml_type = "f32", name = "output_norm.weight"} : tensor<8xf32>
  return
}

// -----

func.func @recurrent_state_heads() {
  // expected-error @+1 {{'tpc.recurrent_state' op n_value_heads 3 must be a multiple of n_key_heads 2}}
  %s = tpc.recurrent_state {conv_kernel = 4, head_dim_k = 64, head_dim_v = 64, layer = 0, n_key_heads = 2, n_value_heads = 3} : !tpc.recurrent_state<2x4x64x64x4>
  return
}

// -----

func.func @recurrent_state_type(%s: !tpc.recurrent_state<2x3x64x64x4>) {
  // expected-error @-1 {{!tpc.recurrent_state value heads 3 must be a multiple of the key heads 2}}
  return
}

// -----

func.func @ssm_conv_channels(%x: tensor<?x500xf32>, %w: tensor<512x4xf32>, %pos: tensor<?xi32>) {
  %s = tpc.recurrent_state {conv_kernel = 4, head_dim_k = 64, head_dim_v = 64, layer = 0, n_key_heads = 2, n_value_heads = 4} : !tpc.recurrent_state<2x4x64x64x4>
  // expected-error @+1 {{'tpc.ssm_conv' op x 'tensor<?x500xf32>' must have the state's 512 conv channels (2 Hk Dk + Hv Dv)}}
  %c = tpc.ssm_conv %x, %w, %s, %pos : (tensor<?x500xf32>, tensor<512x4xf32>, !tpc.recurrent_state<2x4x64x64x4>, tensor<?xi32>) -> tensor<?x500xf32>
  return
}

// -----

func.func @ssm_conv_kernel(%x: tensor<?x512xf32>, %w: tensor<512x3xf32>, %pos: tensor<?xi32>) {
  %s = tpc.recurrent_state {conv_kernel = 4, head_dim_k = 64, head_dim_v = 64, layer = 0, n_key_heads = 2, n_value_heads = 4} : !tpc.recurrent_state<2x4x64x64x4>
  // expected-error @+1 {{'tpc.ssm_conv' op w 'tensor<512x3xf32>' must be [512, 4] (channels x conv kernel)}}
  %c = tpc.ssm_conv %x, %w, %s, %pos : (tensor<?x512xf32>, tensor<512x3xf32>, !tpc.recurrent_state<2x4x64x64x4>, tensor<?xi32>) -> tensor<?x512xf32>
  return
}

// -----

func.func @delta_net_heads(%q: tensor<?x2x64xf32>, %v: tensor<?x2x64xf32>, %g: tensor<?x4xf32>, %pos: tensor<?xi32>) {
  %s = tpc.recurrent_state {conv_kernel = 4, head_dim_k = 64, head_dim_v = 64, layer = 0, n_key_heads = 2, n_value_heads = 4} : !tpc.recurrent_state<2x4x64x64x4>
  // expected-error @+1 {{'tpc.delta_net' op v 'tensor<?x2x64xf32>' must be [?, 4, 64] (the state's value heads)}}
  %o = tpc.delta_net %q, %q, %v, %g, %g, %s, %pos {scale = 0.125 : f32} : (tensor<?x2x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, tensor<?x4xf32>, tensor<?x4xf32>, !tpc.recurrent_state<2x4x64x64x4>, tensor<?xi32>) -> tensor<?x4x64xf32>
  return
}

// -----

func.func @delta_net_gate(%q: tensor<?x2x64xf32>, %v: tensor<?x4x64xf32>, %g: tensor<?x3xf32>, %pos: tensor<?xi32>) {
  %s = tpc.recurrent_state {conv_kernel = 4, head_dim_k = 64, head_dim_v = 64, layer = 0, n_key_heads = 2, n_value_heads = 4} : !tpc.recurrent_state<2x4x64x64x4>
  // expected-error @+1 {{'tpc.delta_net' op g 'tensor<?x3xf32>' and beta 'tensor<?x3xf32>' must have one entry per value head (4)}}
  %o = tpc.delta_net %q, %q, %v, %g, %g, %s, %pos {scale = 0.125 : f32} : (tensor<?x2x64xf32>, tensor<?x2x64xf32>, tensor<?x4x64xf32>, tensor<?x3xf32>, tensor<?x3xf32>, !tpc.recurrent_state<2x4x64x64x4>, tensor<?xi32>) -> tensor<?x4x64xf32>
  return
}

// -----

func.func @gated_rms_norm_z(%x: tensor<?x4x64xf32>, %w: tensor<64xf32>, %z: tensor<?x2x64xf32>) {
  // expected-error @+1 {{'tpc.gated_rms_norm' op z 'tensor<?x2x64xf32>' must have the shape of x 'tensor<?x4x64xf32>'}}
  %n = tpc.gated_rms_norm %x, %w, %z {eps = 1.0e-6 : f32} : (tensor<?x4x64xf32>, tensor<64xf32>, tensor<?x2x64xf32>) -> tensor<?x4x64xf32>
  return
}

// -----

func.func @attention_gate_shape(%q: tensor<?x4x64xf32>, %k: tensor<?x2x64xf32>, %pos: tensor<?xi32>, %gate: tensor<?x4x32xf32>) {
  %cache = tpc.kv_cache {layer = 3, n_head_kv = 2, head_dim_k = 64, head_dim_v = 64} : !tpc.kv_cache<2x64x64>
  // expected-error @+1 {{'tpc.attention' op gate 'tensor<?x4x32xf32>' must have the result's shape [?, 4, 64]}}
  %o = tpc.attention %q, %k, %k, %cache, %pos gate(%gate) {scale = 0.125 : f32} : (tensor<?x4x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>, !tpc.kv_cache<2x64x64>, tensor<?xi32>, tensor<?x4x32xf32>) -> tensor<?x4x64xf32>
  return
}
