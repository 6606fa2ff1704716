// RUN: tpc-opt %S/Inputs/llama-layer.mlir --tpc-assign-split-axes=devices=2 | FileCheck %s --check-prefix=TWO
// RUN: tpc-opt %S/Inputs/llama-layer.mlir '--tpc-assign-split-axes=devices=3 tensor-split=3,2,1' | FileCheck %s --check-prefix=THREE
// RUN: tpc-opt %S/Inputs/llama-layer.mlir --tpc-assign-split-axes=devices=1 | FileCheck %s --check-prefix=ONE
// RUN: not tpc-opt %S/Inputs/llama-layer.mlir '--tpc-assign-split-axes=devices=2 tensor-split=1,1,1' 2>&1 | FileCheck %s --check-prefix=BADSPLIT
// RUN: not tpc-opt %S/Inputs/llama-layer.mlir '--tpc-assign-split-axes=devices=2 tensor-split=0,0' 2>&1 | FileCheck %s --check-prefix=ZEROSPLIT
// RUN: tpc-opt %s --split-input-file --tpc-assign-split-axes=devices=2 | FileCheck %s
// RUN: tpc-opt %S/Inputs/llama-layer.mlir '--tpc-assign-split-axes=devices=3 tensor-split=3,2,1 remarks=true' -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOG
// RUN: tpc-opt %s --split-input-file '--tpc-assign-split-axes=devices=2 remarks=true' -o /dev/null 2>&1 | FileCheck %s --check-prefix=GRANULE

/// Splits come from op structure: the matmuls feeding attention heads and the GLU are column parallel (rows of
/// their weights split), the matmuls consuming them row parallel (reduction axis split, result partial).
/// Q heads split in whole GQA groups (4 query heads per KV head), K/V and the cache by KV heads.
// TWO: module attributes {{{.*}}tpc.devices = 2 : i64
/// The token embedding is split by vocabulary rows: each device looks up the ids it holds (a partial sum).
// TWO: name = "token_embd.weight", tpc.state = [#tpc.state<split axis = 0, sizes = [256, 256]
// TWO: tpc.get_rows {{.*}}tpc.state = [#tpc.state<partial>]
// TWO: name = "blk.0.attn_q.weight", tpc.state = [#tpc.state<split axis = 0, sizes = [128, 128], granule = 128, segments = 1>]
// TWO: name = "blk.0.attn_k.weight", tpc.state = [#tpc.state<split axis = 0, sizes = [32, 32], granule = 32, segments = 1>]
// TWO: name = "blk.0.attn_output.weight", tpc.state = [#tpc.state<split axis = 1, sizes = [128, 128], granule = 128, segments = 1>]
// TWO: name = "blk.0.ffn_gate.weight", tpc.state = [#tpc.state<split axis = 0, sizes = [384, 384]
// TWO: name = "blk.0.ffn_down.weight", tpc.state = [#tpc.state<split axis = 1, sizes = [384, 384]
// TWO: tpc.reshape {{.*}}sizes = [4, 4], granule = 4{{.*}} -> tensor<?x8x32xf32>
// TWO: tpc.kv_cache {{.*}}tpc.state = [#tpc.state<split axis = 0, sizes = [1, 1]
// TWO: tpc.attention {{.*}}tpc.state = [#tpc.state<split axis = 1, sizes = [4, 4], granule = 4
// TWO: tpc.matmul {{.*}}tpc.state = [#tpc.state<partial>]{{.*}}tensor<256x256xf32>
// TWO: tpc.glu silu {{.*}}sizes = [384, 384]
// TWO: tpc.matmul {{.*}}tpc.state = [#tpc.state<partial>]{{.*}}tensor<256x768xf32>
/// The output projection is column parallel (its logits are gathered later).
// TWO: name = "output.weight", tpc.state = [#tpc.state<split axis = 0, sizes = [256, 256]
// TWO: return

/// 3,2,1: every size a multiple of its granule. The embedding's 512 rows go 256, 171, 85; two KV heads
/// cannot give three devices a share each, so K/V and the cache stay whole on every device and the 8 query
/// heads split one by one (4, 3, 1: 128, 96, 32 rows of 32); the FFN's 768 rows split exactly; the output
/// rows match the embedding's split.
// THREE: name = "token_embd.weight", tpc.state = [#tpc.state<split axis = 0, sizes = [256, 171, 85]
// THREE: name = "blk.0.attn_q.weight", tpc.state = [#tpc.state<split axis = 0, sizes = [128, 96, 32], granule = 32
// THREE: name = "blk.0.attn_k.weight", tpc.state = [#tpc.state<mirrored>]
// THREE: name = "blk.0.ffn_gate.weight", tpc.state = [#tpc.state<split axis = 0, sizes = [384, 256, 128]
// THREE: tpc.kv_cache {{.*}}tpc.state = [#tpc.state<mirrored>]
// THREE: name = "output.weight", tpc.state = [#tpc.state<split axis = 0, sizes = [256, 171, 85]

// ONE: tpc.devices = 1
// ONE-NOT: split
// ONE-NOT: partial

// BADSPLIT: tensor-split lists 3 shares for 2 devices
// ZEROSPLIT: tensor-split shares sum to 0

// -----

/// MQA (one KV head, the peers' crash): K/V and the cache stay mirrored on every device and only the Q heads
/// split, one head at a time.
// CHECK-LABEL: func.func @mqa
// CHECK: %[[K:.*]] = tpc.matmul {{.*}}tpc.state = [#tpc.state<mirrored>]{{.*}}-> tensor<?x8xf32>
// CHECK: tpc.kv_cache {{.*}}tpc.state = [#tpc.state<mirrored>]
// CHECK: tpc.attention {{.*}}tpc.state = [#tpc.state<split axis = 1, sizes = [2, 2], granule = 1
func.func @mqa(%x: tensor<?x16xf32>, %pos: tensor<?xi32>) -> tensor<?x16xf32> {
  %wq = tpc.weight {ggml_type = "f32", name = "q"} : tensor<32x16xf32>
  %wk = tpc.weight {ggml_type = "f32", name = "k"} : tensor<8x16xf32>
  %wv = tpc.weight {ggml_type = "f32", name = "v"} : tensor<8x16xf32>
  %wo = tpc.weight {ggml_type = "f32", name = "o"} : tensor<16x32xf32>
  %q0 = tpc.matmul %x, %wq : (tensor<?x16xf32>, tensor<32x16xf32>) -> tensor<?x32xf32>
  %q = tpc.reshape %q0 : tensor<?x32xf32> -> tensor<?x4x8xf32>
  %k0 = tpc.matmul %x, %wk : (tensor<?x16xf32>, tensor<8x16xf32>) -> tensor<?x8xf32>
  %k = tpc.reshape %k0 : tensor<?x8xf32> -> tensor<?x1x8xf32>
  %v0 = tpc.matmul %x, %wv : (tensor<?x16xf32>, tensor<8x16xf32>) -> tensor<?x8xf32>
  %v = tpc.reshape %v0 : tensor<?x8xf32> -> tensor<?x1x8xf32>
  %c = tpc.kv_cache {layer = 0, n_head_kv = 1, head_dim_k = 8, head_dim_v = 8} : !tpc.kv_cache<1x8x8>
  %a = tpc.attention %q, %k, %v, %c, %pos {scale = 0.35 : f32} : (tensor<?x4x8xf32>, tensor<?x1x8xf32>, tensor<?x1x8xf32>, !tpc.kv_cache<1x8x8>, tensor<?xi32>) -> tensor<?x4x8xf32>
  %a2 = tpc.reshape %a : tensor<?x4x8xf32> -> tensor<?x32xf32>
  %o = tpc.matmul %a2, %wo : (tensor<?x32xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

/// Q4_K weights split along their rows' reduction axis only on 256-element block boundaries: the down
/// projection's 768 inputs are 3 blocks, so the GLU group moves in whole blocks (512 + 256), and the weight
/// says so with granule 256. The merged gate|up expert weight splits per segment (matching gate and up rows).
// CHECK-LABEL: func.func @quant_blocks
// CHECK: name = "down", tpc.state = [#tpc.state<split axis = 1, sizes = [512, 256], granule = 256, segments = 1>]
// CHECK: name = "gate_up_exps", tpc.state = [#tpc.state<split axis = 1, sizes = [64, 64], granule = 1, segments = 2>]
// CHECK: tpc.glu silu %{{.*}}, %{{.*}} {tpc.state = [#tpc.state<split axis = 1, sizes = [512, 256], granule = 256
// CHECK: tpc.mul_mat_id {{.*}}sizes = [64, 64], granule = 1, segments = 2
// CHECK: tpc.glu silu %{{[0-9]+}} {tpc.state = [#tpc.state<split axis = 2, sizes = [32, 32]
func.func @quant_blocks(%x: tensor<?x256xf32>, %ids: tensor<?x2xi32>) -> (tensor<?x256xf32>, tensor<?x2x64xf32>) {
  %g = tpc.weight {ggml_type = "q4_K", name = "gate"} : tensor<768x256xf32>
  %u = tpc.weight {ggml_type = "q4_K", name = "up"} : tensor<768x256xf32>
  %d = tpc.weight {ggml_type = "q4_K", name = "down"} : tensor<256x768xf32>
  %gu = tpc.weight {ggml_type = "f32", name = "gate_up_exps"} : tensor<4x128x256xf32>
  %a = tpc.matmul %x, %g : (tensor<?x256xf32>, tensor<768x256xf32>) -> tensor<?x768xf32>
  %b = tpc.matmul %x, %u : (tensor<?x256xf32>, tensor<768x256xf32>) -> tensor<?x768xf32>
  %h = tpc.glu silu %a, %b : (tensor<?x768xf32>, tensor<?x768xf32>) -> tensor<?x768xf32>
  %y0 = tpc.matmul %h, %d : (tensor<?x768xf32>, tensor<256x768xf32>) -> tensor<?x256xf32>
  %y = tpc.add %x, %y0 : (tensor<?x256xf32>, tensor<?x256xf32>) -> tensor<?x256xf32>
  %e = tpc.mul_mat_id %x, %gu, %ids : (tensor<?x256xf32>, tensor<4x128x256xf32>, tensor<?x2xi32>) -> tensor<?x2x128xf32>
  %f = tpc.glu silu %e : (tensor<?x2x128xf32>) -> tensor<?x2x64xf32>
  return %y, %f : tensor<?x256xf32>, tensor<?x2x64xf32>
}

// -----

/// K = V (gemma4's global layers): one projection feeds both. Every consumer asks for the same KV-head split,
/// so the projection itself is column parallel (no device computes all of K).
// CHECK-LABEL: func.func @k_equals_v
// CHECK: tpc.matmul {{.*}}tpc.state = [#tpc.state<split axis = 1, sizes = [8, 8], granule = 8{{.*}}-> tensor<?x16xf32>
// CHECK: tpc.attention {{.*}}tpc.state = [#tpc.state<split axis = 1, sizes = [2, 2]
func.func @k_equals_v(%x: tensor<?x16xf32>, %pos: tensor<?xi32>) -> tensor<?x16xf32> {
  %wq = tpc.weight {ggml_type = "f32", name = "q"} : tensor<32x16xf32>
  %wk = tpc.weight {ggml_type = "f32", name = "k"} : tensor<16x16xf32>
  %wo = tpc.weight {ggml_type = "f32", name = "o"} : tensor<16x32xf32>
  %q0 = tpc.matmul %x, %wq : (tensor<?x16xf32>, tensor<32x16xf32>) -> tensor<?x32xf32>
  %q = tpc.reshape %q0 : tensor<?x32xf32> -> tensor<?x4x8xf32>
  %k0 = tpc.matmul %x, %wk : (tensor<?x16xf32>, tensor<16x16xf32>) -> tensor<?x16xf32>
  %k = tpc.reshape %k0 : tensor<?x16xf32> -> tensor<?x2x8xf32>
  %c = tpc.kv_cache {layer = 0, n_head_kv = 2, head_dim_k = 8, head_dim_v = 8} : !tpc.kv_cache<2x8x8>
  %a = tpc.attention %q, %k, %k, %c, %pos {scale = 0.35 : f32} : (tensor<?x4x8xf32>, tensor<?x2x8xf32>, tensor<?x2x8xf32>, !tpc.kv_cache<2x8x8>, tensor<?xi32>) -> tensor<?x4x8xf32>
  %a2 = tpc.reshape %a : tensor<?x4x8xf32> -> tensor<?x32xf32>
  %o = tpc.matmul %a2, %wo : (tensor<?x32xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
  %r = tpc.add %x, %o : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %r : tensor<?x16xf32>
}

// -----

/// Consumers that disagree: the K projection is also read whole by another op, so it stays mirrored and the
/// attention's split is a slice (no data moves) rather than a gather.
// CHECK-LABEL: func.func @consumers_disagree
// CHECK: %[[K:.*]] = tpc.reshape {{.*}}tpc.state = [#tpc.state<mirrored>]{{.*}}-> tensor<?x2x8xf32>
// CHECK: tpc.softmax %[[K]] {tpc.state = [#tpc.state<mirrored>]}
func.func @consumers_disagree(%x: tensor<?x16xf32>, %pos: tensor<?xi32>) -> (tensor<?x16xf32>, tensor<?x2x8xf32>) {
  %wq = tpc.weight {ggml_type = "f32", name = "q"} : tensor<32x16xf32>
  %wk = tpc.weight {ggml_type = "f32", name = "k"} : tensor<16x16xf32>
  %wo = tpc.weight {ggml_type = "f32", name = "o"} : tensor<16x32xf32>
  %q0 = tpc.matmul %x, %wq : (tensor<?x16xf32>, tensor<32x16xf32>) -> tensor<?x32xf32>
  %q = tpc.reshape %q0 : tensor<?x32xf32> -> tensor<?x4x8xf32>
  %k0 = tpc.matmul %x, %wk : (tensor<?x16xf32>, tensor<16x16xf32>) -> tensor<?x16xf32>
  %k = tpc.reshape %k0 : tensor<?x16xf32> -> tensor<?x2x8xf32>
  %s = tpc.softmax %k : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
  %c = tpc.kv_cache {layer = 0, n_head_kv = 2, head_dim_k = 8, head_dim_v = 8} : !tpc.kv_cache<2x8x8>
  %a = tpc.attention %q, %k, %k, %c, %pos {scale = 0.35 : f32} : (tensor<?x4x8xf32>, tensor<?x2x8xf32>, tensor<?x2x8xf32>, !tpc.kv_cache<2x8x8>, tensor<?xi32>) -> tensor<?x4x8xf32>
  %a2 = tpc.reshape %a : tensor<?x4x8xf32> -> tensor<?x32xf32>
  %o = tpc.matmul %a2, %wo : (tensor<?x32xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
  %r = tpc.add %x, %o : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %r, %s : tensor<?x16xf32>, tensor<?x2x8xf32>
}

// -----

/// Rounding does not drift to one device: three GLU units over two equal devices give [2, 1] in the first
/// layer and, with the carried credit, [1, 2] in the next.
// CHECK-LABEL: func.func @no_drift
// CHECK: tpc.glu silu {{.*}}sizes = [2, 1]
// CHECK: tpc.glu silu {{.*}}sizes = [1, 2]
func.func @no_drift(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %g1 = tpc.weight {ggml_type = "f32", name = "g1"} : tensor<3x4xf32>
  %u1 = tpc.weight {ggml_type = "f32", name = "u1"} : tensor<3x4xf32>
  %d1 = tpc.weight {ggml_type = "f32", name = "d1"} : tensor<4x3xf32>
  %g2 = tpc.weight {ggml_type = "f32", name = "g2"} : tensor<3x4xf32>
  %u2 = tpc.weight {ggml_type = "f32", name = "u2"} : tensor<3x4xf32>
  %d2 = tpc.weight {ggml_type = "f32", name = "d2"} : tensor<4x3xf32>
  %a1 = tpc.matmul %x, %g1 : (tensor<?x4xf32>, tensor<3x4xf32>) -> tensor<?x3xf32>
  %b1 = tpc.matmul %x, %u1 : (tensor<?x4xf32>, tensor<3x4xf32>) -> tensor<?x3xf32>
  %h1 = tpc.glu silu %a1, %b1 : (tensor<?x3xf32>, tensor<?x3xf32>) -> tensor<?x3xf32>
  %y1 = tpc.matmul %h1, %d1 : (tensor<?x3xf32>, tensor<4x3xf32>) -> tensor<?x4xf32>
  %r1 = tpc.add %x, %y1 : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %a2 = tpc.matmul %r1, %g2 : (tensor<?x4xf32>, tensor<3x4xf32>) -> tensor<?x3xf32>
  %b2 = tpc.matmul %r1, %u2 : (tensor<?x4xf32>, tensor<3x4xf32>) -> tensor<?x3xf32>
  %h2 = tpc.glu silu %a2, %b2 : (tensor<?x3xf32>, tensor<?x3xf32>) -> tensor<?x3xf32>
  %y2 = tpc.matmul %h2, %d2 : (tensor<?x3xf32>, tensor<4x3xf32>) -> tensor<?x4xf32>
  %r2 = tpc.add %r1, %y2 : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %r2 : tensor<?x4xf32>
}

/// The decision log (remarks=true; Debian's LLVM has no -debug-only): each seed's group and its shares, and
/// a quantized weight cut along its rows growing its group's multiple.
// LOG: remark: tpc-assign-split-axes: seeds a group of 512 table rows (vocabulary parallel): per device [256, 171, 85]
// LOG: remark: tpc-assign-split-axes: seeds a group of 8 query heads (K/V mirrored: one KV head, or fewer than the devices): per device [4, 3, 1]
// LOG: remark: tpc-assign-split-axes: seeds a group of 768 GLU elements: per device [384, 256, 128]
// LOG: remark: tpc-assign-split-axes: seeds a group of 512 output rows (column parallel logits): per device [256, 171, 85]
// GRANULE: remark: tpc-assign-split-axes: 'down' (q4_K) is cut along its rows in 256-element blocks: its group moves in multiples of 256 units
/// quant_blocks' dense down projection leaves the devices 2:1 blocks (12.9% off the shares). The auto MoE
/// choice finds that whole experts for the MoE GLU beside it would bring the shares no closer (the miss is
/// not the MoE layer's), and keeps the faster intermediate split.
// GRANULE: remark: tpc-assign-split-axes: MoE split: intermediate costs 1.000, whole experts {{.*}}: intermediate
// GRANULE: remark: tpc-assign-split-axes: MoE split: the split weights miss a device's share by 12.9%, with every MoE layer in whole experts by 12.9%: keep the layers

// -----

/// The grid types (iq2_xxs, iq1_m, ...) are 256-element super-blocks like the K-quants: the type table gives the
/// granule, so a weight cut along its rows moves its group in whole super-blocks.
// CHECK-LABEL: func.func @grid_blocks
// CHECK: name = "down_grid", tpc.state = [#tpc.state<split axis = 1, sizes = [512, 256], granule = 256, segments = 1>]
// GRANULE: remark: tpc-assign-split-axes: 'down_grid' (iq1_m) is cut along its rows in 256-element blocks: its group moves in multiples of 256 units
func.func @grid_blocks(%x: tensor<?x256xf32>) -> tensor<?x256xf32> {
  %g = tpc.weight {ggml_type = "iq2_xxs", name = "gate_grid"} : tensor<768x256xf32>
  %u = tpc.weight {ggml_type = "iq3_s", name = "up_grid"} : tensor<768x256xf32>
  %d = tpc.weight {ggml_type = "iq1_m", name = "down_grid"} : tensor<256x768xf32>
  %a = tpc.matmul %x, %g : (tensor<?x256xf32>, tensor<768x256xf32>) -> tensor<?x768xf32>
  %b = tpc.matmul %x, %u : (tensor<?x256xf32>, tensor<768x256xf32>) -> tensor<?x768xf32>
  %h = tpc.glu silu %a, %b : (tensor<?x768xf32>, tensor<?x768xf32>) -> tensor<?x768xf32>
  %y0 = tpc.matmul %h, %d : (tensor<?x768xf32>, tensor<256x768xf32>) -> tensor<?x256xf32>
  %y = tpc.add %x, %y0 : (tensor<?x256xf32>, tensor<?x256xf32>) -> tensor<?x256xf32>
  return %y : tensor<?x256xf32>
}
