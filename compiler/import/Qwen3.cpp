//===- Qwen3.cpp - qwen3 and qwen3moe importer ------------------------------===//
//
// Like llama, with per-head RMS norms on Q and K (attn_q_norm / attn_k_norm, applied before RoPE), NEOX
// RoPE, and head_dim from attention.key_length (n_head·head_dim may differ from n_embd). qwen3moe replaces
// the dense FFN with a MoE block: router softmax over all experts, top-k, weights renormalised to sum to 1,
// SiLU-GLU experts; the experts come either as separate ffn_gate_exps / ffn_up_exps or as one merged
// ffn_gate_up_exps whose per-expert rows are [gate; up].
//===----------------------------------------------------------------------===//
#include "compiler/import/Architectures.h"

#include <cmath>

namespace mlir::tpc {

Value buildQwen3(ModelBuilder &mb, HParams &hp, Value tokens, Value pos) {
  bool moe = hp.arch == "qwen3moe"; // its expert keys are checked by readHParams
  int64_t E = hp.nEmbd, V = hp.nVocab, D = hp.headDimK;
  Value tokenEmbd = mb.weight("token_embd.weight", {V, E});
  if (mb.failed())
    return nullptr;
  Value x = mb.getRows(tokenEmbd, tokens);
  for (unsigned il = 0; il < hp.nLayer; ++il) {
    mb.setLayer(il);
    Value attnNorm = mb.weight(blk(il, "attn_norm.weight"), {E});
    AttentionWeights aw = loadAttention(mb, hp, il, D, hp.headDimV);
    AttentionSpec spec = baseAttentionSpec(hp, il, D, hp.headDimV, RopeMode::neox);
    spec.qNorm = mb.weight(blk(il, "attn_q_norm.weight"), {D});
    spec.kNorm = mb.weight(blk(il, "attn_k_norm.weight"), {D});
    Value ffnNorm = mb.weight(blk(il, "ffn_norm.weight"), {E});
    MoeWeights moeW;
    FFNWeights ffnW;
    if (moe)
      moeW = loadMoe(mb, hp, il);
    else
      ffnW = loadFFN(mb, hp, il);
    if (mb.failed())
      return nullptr;

    x = mb.add(x, mb.attentionBlock(mb.norm(x, attnNorm, hp.rmsEps), pos, aw, spec));
    Value h2 = mb.norm(x, ffnNorm, hp.rmsEps);
    Value ffn = moe ? mb.moeFFN(h2, h2, moeW, hp.nExpertUsed, GluFn::silu, MoeGating::SoftmaxNormalized)
                    : mb.gluFFN(h2, ffnW, GluFn::silu);
    x = mb.add(x, ffn);
  }
  return buildOutput(mb, hp, x, tokenEmbd);
}

} // namespace mlir::tpc
