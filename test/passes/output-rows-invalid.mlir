// RUN: not tpc-opt %s --tpc-plan-memory 2>&1 | FileCheck %s

/// A value of the output rows cannot meet a value of the tokens: the two dims differ per call.
// CHECK: error: mixes the token dimension and the output-rows dimension
module {
  func.func @forward(%tok: tensor<?xi32>, %pos: tensor<?xi32>, %rows: tensor<?xi32>) -> tensor<?x64xf32> {
    %emb = tpc.weight {ggml_type = "f32", name = "token_embd.weight"} : tensor<16x64xf32>
    %x = tpc.get_rows %emb, %tok : (tensor<16x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    %h = tpc.select_rows %x, %rows : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    %bad = tpc.add %h, %x : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    return %bad : tensor<?x64xf32>
  }
}
