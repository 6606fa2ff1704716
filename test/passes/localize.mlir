// RUN: tpc-opt %S/Inputs/llama-layer.mlir '--tpc-assign-split-axes=devices=3 tensor-split=3,2,1' --tpc-insert-collectives --tpc-localize | FileCheck %s
// RUN: not tpc-opt %S/Inputs/llama-layer.mlir --tpc-assign-split-axes=devices=2 --tpc-localize 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: tpc-opt %S/Inputs/llama-layer.mlir '--tpc-assign-split-axes=devices=3 tensor-split=3,2,1' --tpc-insert-collectives --tpc-localize=remarks=true -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOG

/// One IR, per-device shapes: an uneven 3,2,1 split gives each device its own local dims (-1 = tokens).
// CHECK: name = "blk.0.attn_q.weight", tpc.local_shapes = {{\[\[}}array<i64: 128, 256>, array<i64: 96, 256>, array<i64: 32, 256>]]
// CHECK: name = "blk.0.ffn_gate.weight", tpc.local_shapes = {{\[\[}}array<i64: 384, 256>, array<i64: 256, 256>, array<i64: 128, 256>]]
// CHECK: name = "blk.0.ffn_down.weight", tpc.local_shapes = {{\[\[}}array<i64: 256, 384>, array<i64: 256, 256>, array<i64: 256, 128>]]
// CHECK: tpc.kv_cache {{.*}}tpc.local_shapes = {{\[\[}}array<i64: 2>, array<i64: 2>, array<i64: 2>]]
// CHECK: tpc.attention {{.*}}tpc.local_shapes = {{\[\[}}array<i64: -1, 4, 32>, array<i64: -1, 3, 32>, array<i64: -1, 1, 32>]]
// CHECK: tpc.all_reduce {{.*}}tpc.local_shapes = {{\[\[}}array<i64: -1, 256>, array<i64: -1, 256>, array<i64: -1, 256>]]
// CHECK: tpc.glu silu {{.*}}tpc.local_shapes = {{\[\[}}array<i64: -1, 384>, array<i64: -1, 256>, array<i64: -1, 128>]]

/// Localize is the gate before emission: a state mismatch left without its collective is an error.
// MISSING: error: 'tpc.rms_norm' op tpc-localize: operand 0 is #tpc.state<partial> but the op needs #tpc.state<mirrored> (a collective is missing)

/// The decision log: the values whose local shapes differ per device (an uneven split).
// LOG: remark: tpc-localize: result 0 has different local shapes per device: [array<i64: 128, 256>, array<i64: 96, 256>, array<i64: 32, 256>]
