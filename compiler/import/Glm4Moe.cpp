//===- Glm4Moe.cpp - glm4moe (GLM-4.5 / 4.6 / 4.7) importer -----------------===//
//
// As ik_llama.cpp's build_glm4_moe and create_glm4_moe_tensors build it (src/graphs/build_glm4.cpp,
// src/llama-load-tensors.cpp, llm_build_moe_ffn in src/llama-build-context.cpp):
//   x += Wo·attn(rope(q), rope(k), v) with q/k/v = W·h + b (biases required), optional per-head RMS norms
//   of q and k (attn_q_norm / attn_k_norm: GLM-4.5 355B, 4.6 and 4.7 have them, Air does not), NEOX RoPE
//   on the first rope.dimension_count dims of each head (half of it on the real models), scale
//   1/sqrt(head_dim);
//   x += FFN(rms_norm(x)·post_attention_norm), where the FFN input norm is stored as post_attention_norm.
// The first leading_dense_block_count layers have a dense SiLU GLU FFN; the others are MoE:
//   s = sigmoid(router·h) (softmax when expert_gating_func = 1); the top-k experts are chosen on
//   s + exp_probs_b, but their weights are the unbiased s, normalised to sum 1 (expert_weights_norm) and
//   times expert_weights_scale; SiLU GLU experts; plus the shared experts (expert_shared_count of
//   expert_feed_forward_length each, stored as one ffn_*_shexp GLU) on the same h, unweighted.
// block_count counts the nextn_predict_layers MTP blocks at the end (blk.N.nextn.* with their own
// attention and MoE): they are in the file and not imported, so no op reads them, the split analysis never
// sees them and no device loads their bytes (a weight becomes a plan slice only where an op reads it).
//===----------------------------------------------------------------------===//
#include "compiler/import/Architectures.h"

#include <cmath>

namespace mlir::tpc {
namespace {

/// The router of one MoE layer: which experts each token uses and their weights.
struct Routing {
  Value ids, weights; ///< [T, k] i32, [T, k] f32
};

Routing route(ModelBuilder &mb, const HParams &hp, Value h, Value router, Value selectionBias) {
  Value logits = mb.matmul(h, router);                                                       // [T, E]
  Value scores = hp.expertSigmoid ? mb.unary(logits, UnaryFn::sigmoid) : mb.softmax(logits); // [T, E]
  Value ids = mb.topK(mb.add(scores, selectionBias), hp.nExpertUsed);                        // [T, k]
  Value weights = mb.takeAlong(scores, ids);                                                 // [T, k]
  if (hp.expertWeightsNorm)
    weights = mb.div(weights, mb.sum(weights, /*axis=*/1, /*keepDim=*/true));
  // The reference skips a scale within 1e-5 of 1; so does this, to build the same chain.
  if (std::abs(hp.expertWeightsScale - 1.f) > 1e-5f)
    weights = mb.scale(weights, hp.expertWeightsScale);
  return {ids, weights};
}

} // namespace

Value buildGlm4Moe(ModelBuilder &mb, HParams &hp, Value tokens, Value pos) {
  const int64_t E = hp.nEmbd, V = hp.nVocab, D = hp.headDimK;
  if (hp.headDimV != hp.headDimK) {
    mb.error(Twine(hp.arch) + ".attention.value_length " + Twine(hp.headDimV) + " differs from key_length " +
             Twine(hp.headDimK) + ": glm4moe uses one head size");
    return nullptr;
  }
  Value tokenEmbd = mb.weight("token_embd.weight", {V, E});
  if (mb.failed())
    return nullptr;
  Value x = mb.getRows(tokenEmbd, tokens);
  for (unsigned il = 0; il < hp.nLayer; ++il) {
    mb.setLayer(il);
    const bool moe = il >= hp.nDenseLead;
    Value attnNorm = mb.weight(blk(il, "attn_norm.weight"), {E});
    AttentionWeights aw = loadAttention(mb, hp, il, D, D);
    loadAttentionBiases(mb, hp, il, D, D, aw, /*withOutput=*/false);
    AttentionSpec spec = baseAttentionSpec(hp, il, D, D, RopeMode::neox);
    spec.qNorm = mb.optionalWeight(blk(il, "attn_q_norm.weight"), {D});
    spec.kNorm = mb.optionalWeight(blk(il, "attn_k_norm.weight"), {D});
    Value ffnNorm = mb.weight(blk(il, "post_attention_norm.weight"), {E});
    FFNWeights ffnW, shW;
    MoeWeights moeW;
    Value selectionBias;
    if (moe) {
      moeW = loadMoe(mb, hp, il);
      selectionBias = mb.weight(blk(il, "exp_probs_b.bias"), {int64_t(hp.nExpert)},
                                hp.arch + ".expert_count " + std::to_string(hp.nExpert));
      if (hp.nExpertShared) {
        int64_t F = int64_t(hp.nFFExp) * hp.nExpertShared;
        std::string sh = hp.arch + ".expert_shared_count " + std::to_string(hp.nExpertShared) + " x " +
                         hp.arch + ".expert_feed_forward_length " + std::to_string(hp.nFFExp);
        shW.gate = mb.weight(blk(il, "ffn_gate_shexp.weight"), {F, E}, sh);
        shW.up = mb.weight(blk(il, "ffn_up_shexp.weight"), {F, E}, sh);
        shW.down = mb.weight(blk(il, "ffn_down_shexp.weight"), {E, F}, sh);
      }
    } else {
      ffnW = loadFFN(mb, hp, il);
    }
    if (mb.failed())
      return nullptr;

    x = mb.add(x, mb.attentionBlock(mb.norm(x, attnNorm, hp.rmsEps), pos, aw, spec));
    Value h2 = mb.norm(x, ffnNorm, hp.rmsEps);
    Value ffn;
    if (moe) {
      Routing r = route(mb, hp, h2, moeW.router, selectionBias);
      ffn = mb.moeExperts(h2, moeW, r.ids, r.weights, hp.nExpertUsed, GluFn::silu);
      if (hp.nExpertShared)
        ffn = mb.add(ffn, mb.gluFFN(h2, shW, GluFn::silu));
    } else {
      ffn = mb.gluFFN(h2, ffnW, GluFn::silu);
    }
    x = mb.add(x, ffn);
  }
  return buildOutput(mb, hp, x, tokenEmbd);
}

} // namespace mlir::tpc
