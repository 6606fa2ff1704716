// RUN: tpc-opt %s --split-input-file '--tpc-assign-split-axes=devices=3 tensor-split=1,1,1' | FileCheck %s --check-prefix=THREE
// RUN: tpc-opt %s --split-input-file '--tpc-assign-split-axes=devices=2 tensor-split=2,1' | FileCheck %s --check-prefix=UNEVEN
// RUN: tpc-opt %s --split-input-file '--tpc-assign-split-axes=devices=4' | FileCheck %s --check-prefix=FOUR

/// Tied embeddings: one table read by the vocabulary-parallel lookup and by the column-parallel output
/// projection takes one row split for both uses (same sizes, same order), so the emitter loads one slice per
/// device. 200 rows over three equal devices do not divide: rounded on its own after the lookup's rounding
/// credit, the projection took [67, 66, 67] against the lookup's [67, 67, 66], and every device loaded both.
// THREE-LABEL: func.func @tied
// THREE: name = "token_embd.weight", tpc.state = [#tpc.state<split axis = 0, sizes = {{\[}}[[SIZES:[0-9, ]+]]{{\]}}
// THREE: name = "token_embd.weight", tpc.state = [#tpc.state<split axis = 0, sizes = {{\[}}[[SIZES]]{{\]}}
// THREE: tpc.get_rows {{.*}}tpc.state = [#tpc.state<partial>]
// THREE: tpc.matmul {{.*}}tpc.state = [#tpc.state<split axis = 1, sizes = {{\[}}[[SIZES]]{{\]}}
// UNEVEN-LABEL: func.func @tied
// UNEVEN: name = "token_embd.weight", tpc.state = [#tpc.state<split axis = 0, sizes = [133, 67]
// UNEVEN: name = "token_embd.weight", tpc.state = [#tpc.state<split axis = 0, sizes = [133, 67]
/// Below 64 rows per device the lookup would stay whole on its own; it follows the projection's split rather
/// than keeping a whole copy beside the projection's slice (the same bytes twice on every device).
// FOUR-LABEL: func.func @tied
// FOUR: name = "token_embd.weight", tpc.state = [#tpc.state<split axis = 0, sizes = [50, 50, 50, 50]
// FOUR: name = "token_embd.weight", tpc.state = [#tpc.state<split axis = 0, sizes = [50, 50, 50, 50]
// FOUR: tpc.get_rows {{.*}}tpc.state = [#tpc.state<partial>]
func.func @tied(%tok: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x200xf32> {
  %e = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<200x64xf32>
  %x = tpc.get_rows %e, %tok : (tensor<200x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %l = tpc.matmul %x, %e : (tensor<?x64xf32>, tensor<200x64xf32>) -> tensor<?x200xf32>
  return %l : tensor<?x200xf32>
}

