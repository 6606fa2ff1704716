// RUN: tpc-opt %S/Inputs/llama-layer.mlir --tpc-assign-split-axes=devices=2 --tpc-insert-collectives '--tpc-insert-backend-copies=no-kv-offload' --tpc-localize | FileCheck %s --check-prefix=NKVO
// RUN: tpc-opt %S/Inputs/llama-layer.mlir --tpc-assign-split-axes=devices=2 --tpc-insert-collectives '--tpc-insert-backend-copies=override-tensor=blk\.0\.ffn_(gate|up)\.weight=cpu' --tpc-localize | FileCheck %s --check-prefix=OT
// RUN: tpc-opt %S/Inputs/llama-layer.mlir --tpc-assign-split-axes=devices=2 --tpc-insert-backend-copies | FileCheck %s --check-prefix=NONE
// RUN: not tpc-opt %S/Inputs/llama-layer.mlir '--tpc-insert-backend-copies=override-tensor=ffn=gpu7' 2>&1 | FileCheck %s --check-prefix=BADTARGET
// RUN: not tpc-opt %S/Inputs/llama-layer.mlir '--tpc-insert-backend-copies=override-tensor=*ffn=cpu' 2>&1 | FileCheck %s --check-prefix=BADREGEX
// RUN: not tpc-opt %S/Inputs/collective-reads-weight.mlir '--tpc-insert-backend-copies=override-tensor=token_embd=cpu' 2>&1 | FileCheck %s --check-prefix=COLLECTIVE
// RUN: tpc-opt %S/Inputs/llama-layer.mlir --tpc-assign-split-axes=devices=2 --tpc-insert-collectives '--tpc-insert-backend-copies=override-tensor=ffn_down=cpu no-kv-offload=true remarks=true' -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOG

/// --no-kv-offload: the cache lives on the host and stays split per device (each device's host part holds its
/// KV heads); the attention reading it runs on the host, and every copy carries its source's split state, so
/// each device copies only its own heads.
// NKVO: %[[POS:.*]] = tpc.backend_copy %arg1 {from = "device", to = "host"{{.*}}tpc.placement = "host"{{.*}}tpc.state = [#tpc.state<mirrored>]}
// NKVO: %[[V:.*]] = tpc.backend_copy %{{.*}} {from = "device", to = "host"{{.*}}tpc.state = [#tpc.state<split axis = 1, sizes = [1, 1]
// NKVO: %[[Q:.*]] = tpc.backend_copy %{{.*}} {from = "device", to = "host"{{.*}}tpc.state = [#tpc.state<split axis = 1, sizes = [4, 4]
// NKVO: %[[K:.*]] = tpc.backend_copy %{{.*}} {from = "device", to = "host"{{.*}}tpc.state = [#tpc.state<split axis = 1, sizes = [1, 1]
// NKVO: %[[C:.*]] = tpc.kv_cache {{{.*}}tpc.placement = "host"{{.*}}tpc.state = [#tpc.state<split axis = 0, sizes = [1, 1]
// NKVO: %[[A:.*]] = tpc.attention %[[Q]], %[[K]], %[[V]], %[[C]], %[[POS]] {{{.*}}tpc.placement = "host"{{.*}}sizes = [4, 4]
// NKVO: tpc.backend_copy %[[A]] {from = "host", to = "device"{{.*}}tpc.placement = "device"{{.*}}tpc.state = [#tpc.state<split axis = 1, sizes = [4, 4]

/// --override-tensor: the matched weights and their matmuls move to the host; the GLU on the device reads
/// their results through copies that keep the column-parallel split.
// OT: name = "blk.0.ffn_gate.weight"{{.*}}tpc.placement = "host"
// OT: name = "blk.0.ffn_up.weight"{{.*}}tpc.placement = "host"
// OT-NOT: name = "blk.0.ffn_down.weight"{{.*}}tpc.placement = "host"
// OT: %[[H:.*]] = tpc.backend_copy %{{.*}} {from = "device", to = "host"{{.*}}tpc.placement = "host"{{.*}}tpc.state = [#tpc.state<mirrored>]}
// OT: %[[G:.*]] = tpc.matmul %[[H]], %{{.*}} {{{.*}}tpc.placement = "host"
// OT-NEXT: %[[GD:.*]] = tpc.backend_copy %[[G]] {from = "host", to = "device"{{.*}}sizes = [384, 384]
// OT: tpc.glu silu %[[GD]], %{{.*}}

// NONE-NOT: backend_copy
// NONE-NOT: tpc.placement
// BADTARGET: --override-tensor 'ffn=gpu7': unknown target 'gpu7'
// BADREGEX: --override-tensor '*ffn=cpu': bad regular expression
/// A collective runs on the device: a pinned weight it reads directly is an error naming the weight.
// COLLECTIVE: error: --override-tensor: weight 'token_embd.weight' is read by tpc.all_gather, a collective, which runs on the device; it cannot stay on the host

/// The decision log: what is pinned and why, which ops follow it to the host, each copy.
// LOG-DAG: remark: tpc-insert-backend-copies: 'blk.0.ffn_down.weight' stays on the host (--override-tensor 'ffn_down=cpu')
// LOG-DAG: remark: tpc-insert-backend-copies: the KV cache stays on the host (--no-kv-offload)
// LOG-DAG: remark: tpc-insert-backend-copies: tpc.attention runs on the host: it reads a host tensor
// LOG-DAG: remark: tpc-insert-backend-copies: operand 4 crosses to the host: backend_copy
// LOG-DAG: remark: tpc-insert-backend-copies: operand 0 crosses to the device: backend_copy
