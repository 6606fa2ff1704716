//===- Gemma4.cpp - gemma4 (MoE) importer -----------------------------------===//
//
// Gemma 4 MoE (26B-A4B shape). Per layer, after attention, a dense GELU FFN and a MoE FFN run in parallel on
// the same residual, each with its own post norm:
//
//   a  = x + rms_norm(Wo·attn)·post_attention_norm
//   d  = ffn_down·glu(ffn_gate·h1, ffn_up·h1),              h1 = rms_norm(a)·ffn_norm
//   m  = Σ_k w_k·down_exps.scale[e_k]·down_e(glu(gate_up_e·h2)), h2 = rms_norm(a)·pre_ffw_norm_2
//        router on rms_norm(a)·ffn_gate_inp.scale / sqrt(n_embd) (unweighted norm), softmax, top-k, renorm
//   x' = (rms_norm(rms_norm(d)·post_ffw_norm_1 + rms_norm(m)·post_ffw_norm_2)·post_ffw_norm + a)
//        · layer_output_scale
//
// Attention: sliding layers (attention.sliding_window_pattern) use the *_swa head size, RoPE dims and base
// (read and checked with the other hyperparameters, HParams.cpp);
// global layers use key_length, rope.dimension_count, rope.freq_base and rope_freqs.weight, and have no
// attn_v (V is the K projection before the k norm). V is RMS-normalised per head without a weight; the
// attention scale is 1 (the q/k norm weights carry the scaling). Embeddings are scaled by sqrt(n_embd), the
// output is tied to token_embd and soft-capped by final_logit_softcapping.
//===----------------------------------------------------------------------===//
#include "compiler/import/Architectures.h"

#include <cmath>

namespace mlir::tpc {

Value buildGemma4(ModelBuilder &mb, HParams &hp, Value tokens, Value pos) {
  int64_t E = hp.nEmbd, V = hp.nVocab, X = hp.nExpert, FE = hp.nFFExp;
  std::string moeWhy = "gemma4.expert_count " + std::to_string(X) + ", gemma4.expert_feed_forward_length " +
                       std::to_string(FE) + ", gemma4.embedding_length " + std::to_string(E);
  Value tokenEmbd = mb.weight("token_embd.weight", {V, E});
  Value ropeFreqs = mb.optionalWeight("rope_freqs.weight", {static_cast<int64_t>(hp.nRot / 2)});
  if (mb.failed())
    return nullptr;
  float eps = hp.rmsEps;
  Value x = mb.scale(mb.getRows(tokenEmbd, tokens), std::sqrt(static_cast<float>(E)));
  for (unsigned il = 0; il < hp.nLayer; ++il) {
    mb.setLayer(il);
    bool swa = hp.swaLayers[il];
    int64_t D = hp.headDimKOf(il), Dv = hp.headDimVOf(il);
    Value attnNorm = mb.weight(blk(il, "attn_norm.weight"), {E});
    AttentionWeights aw = loadAttention(mb, hp, il, D, Dv, /*vOptional=*/true);
    AttentionSpec spec = baseAttentionSpec(hp, il, D, Dv, RopeMode::neox);
    spec.qNorm = mb.weight(blk(il, "attn_q_norm.weight"), {D});
    spec.kNorm = mb.weight(blk(il, "attn_k_norm.weight"), {D});
    Value postAttnNorm = mb.weight(blk(il, "post_attention_norm.weight"), {E});
    Value ffnNorm = mb.weight(blk(il, "ffn_norm.weight"), {E});
    FFNWeights ffnW = loadFFN(mb, hp, il);
    Value postFfwNorm1 = mb.weight(blk(il, "post_ffw_norm_1.weight"), {E});
    Value preFfwNorm2 = mb.weight(blk(il, "pre_ffw_norm_2.weight"), {E});
    Value routerScale = mb.weight(blk(il, "ffn_gate_inp.scale"), {E});
    MoeWeights mw;
    mw.router = mb.weight(blk(il, "ffn_gate_inp.weight"), {X, E}, moeWhy);
    mw.gateUp = mb.weight(blk(il, "ffn_gate_up_exps.weight"), {X, 2 * FE, E}, moeWhy);
    mw.down = mb.weight(blk(il, "ffn_down_exps.weight"), {X, E, FE}, moeWhy);
    mw.downScale = mb.optionalWeight(blk(il, "ffn_down_exps.scale"), {X}, moeWhy);
    Value postFfwNorm2 = mb.weight(blk(il, "post_ffw_norm_2.weight"), {E});
    Value postFfwNorm = mb.weight(blk(il, "post_ffw_norm.weight"), {E});
    Value outScale = mb.optionalWeight(blk(il, "layer_output_scale.weight"), {1});
    if (!aw.wv && swa)
      mb.error("tensor '" + blk(il, "attn_v.weight") + "' is missing (sliding-window layers need a V projection)");
    else if (!aw.wv && Dv != D)
      mb.error("layer " + Twine(il) + " has no attn_v (V is the K projection), so gemma4.attention.value_length " +
               Twine(Dv) + " must equal gemma4.attention.key_length " + Twine(D));
    if (mb.failed())
      return nullptr;

    spec.scale = 1.0f;
    spec.slidingWindow = swa ? hp.slidingWindow : 0;
    spec.nRot = swa ? hp.nRotSwa : hp.nRot;
    spec.ropeBase = swa ? hp.ropeBaseSwa : hp.ropeBase;
    spec.ropeFreqs = swa ? Value() : ropeFreqs;
    spec.vNorm = true;
    spec.vFromK = !aw.wv;
    Value attn = mb.attentionBlock(mb.norm(x, attnNorm, eps), pos, aw, spec);
    Value a = mb.add(x, mb.norm(attn, postAttnNorm, eps));

    Value dense = mb.gluFFN(mb.norm(a, ffnNorm, eps), ffnW, GluFn::gelu_tanh);
    Value routerIn = mb.scale(mb.mul(mb.rmsNorm(a, eps), routerScale), 1.0f / std::sqrt(static_cast<float>(E)));
    Value moe = mb.moeFFN(mb.norm(a, preFfwNorm2, eps), routerIn, mw, hp.nExpertUsed, GluFn::gelu_tanh,
                          MoeGating::SoftmaxNormalized);
    Value denseOut = mb.norm(dense, postFfwNorm1, eps);
    Value y = mb.add(denseOut, mb.norm(moe, postFfwNorm2, eps));
    x = mb.add(mb.norm(y, postFfwNorm, eps), a);
    if (outScale)
      x = mb.mul(x, outScale);
  }
  Value logits = buildOutput(mb, hp, x, tokenEmbd);
  return logits && hp.finalSoftcap > 0 ? mb.softcap(logits, hp.finalSoftcap) : logits;
}

} // namespace mlir::tpc
