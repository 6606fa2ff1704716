//===- GptOss.cpp - gpt-oss importer ----------------------------------------===//
//
// OpenAI's gpt-oss (GGUF architecture "gpt-oss", llama.cpp's LLM_ARCH_OPENAI_MOE). Per layer:
//   h = rms_norm(x) * attn_norm
//   q, k, v = Wq h + bq, Wk h + bk, Wv h + bv; NEOX RoPE with YaRN (rope.scaling.*) on q and k
//   x += Wo attention(q, k, v; sinks) + bo       sinks: one logit per query head in each softmax's sum;
//                                                even layers slide (attention.sliding_window), odd are full
//   t = rms_norm(x) * post_attention_norm        (the FFN's pre-norm despite its name)
//   l = Wr t + br; ids = top_k(l); w = softmax(l[ids]) (over the k selected logits only)
//   x += sum_k w_k (Wdown_e swiglu_oai(Wgate_e t + bgate_e, Wup_e t + bup_e) + bdown_e), e = ids_k
// with swiglu_oai = min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1) and the down bias added before
// the router weighting. Output: untied output.weight after output_norm. The experts come as separate
// ffn_gate_exps / ffn_up_exps with their biases, or merged (newer converters' fuse_gate_up_exps) as
// ffn_gate_up_exps with ffn_gate_up_exps.bias, per expert rows [gate; up] in both.
//===----------------------------------------------------------------------===//
#include "compiler/import/Architectures.h"

namespace mlir::tpc {

Value buildGptOss(ModelBuilder &mb, HParams &hp, Value tokens, Value pos) {
  const int64_t E = hp.nEmbd, V = hp.nVocab, H = hp.nHead, D = hp.headDimK, X = hp.nExpert, F = hp.nFFExp;
  for (unsigned il = 0; il < hp.nLayer; ++il)
    hp.swaLayers[il] = il % 2 == 0; // the reference's fixed pattern (no GGUF key)
  const std::string whyX = hp.arch + ".expert_count " + std::to_string(X) + ", " + hp.arch +
                           ".expert_feed_forward_length " + std::to_string(F);
  const std::string whyE = hp.arch + ".expert_count " + std::to_string(X) + ", " + hp.arch +
                           ".embedding_length " + std::to_string(E);

  Value tokenEmbd = mb.weight("token_embd.weight", {V, E});
  if (mb.failed())
    return nullptr;
  Value x = mb.getRows(tokenEmbd, tokens);
  for (unsigned il = 0; il < hp.nLayer; ++il) {
    mb.setLayer(il);
    Value attnNorm = mb.weight(blk(il, "attn_norm.weight"), {E});
    AttentionWeights aw = loadAttention(mb, hp, il, D, hp.headDimV);
    loadAttentionBiases(mb, hp, il, D, hp.headDimV, aw, /*withOutput=*/true);
    AttentionSpec spec = baseAttentionSpec(hp, il, D, hp.headDimV, RopeMode::neox);
    spec.sinks = mb.weight(blk(il, "attn_sinks.weight"), {H}, hp.arch + ".attention.head_count " + std::to_string(H));
    spec.slidingWindow = hp.swaLayers[il] ? hp.slidingWindow : 0;
    Value ffnNorm = mb.weight(blk(il, "post_attention_norm.weight"), {E});
    MoeWeights mw = loadMoe(mb, hp, il);
    mw.routerBias = mb.weight(blk(il, "ffn_gate_inp.bias"), {X}, whyX);
    if (mw.gateUp) { // merged: one bias of per-expert rows [gate; up], as the weight's
      mw.gateUpBias = mb.weight(blk(il, "ffn_gate_up_exps.bias"), {X, 2 * F}, whyX);
    } else {
      mw.gateBias = mb.weight(blk(il, "ffn_gate_exps.bias"), {X, F}, whyX);
      mw.upBias = mb.weight(blk(il, "ffn_up_exps.bias"), {X, F}, whyX);
    }
    mw.downBias = mb.weight(blk(il, "ffn_down_exps.bias"), {X, E}, whyE);
    if (mb.failed())
      return nullptr;

    x = mb.add(x, mb.attentionBlock(mb.norm(x, attnNorm, hp.rmsEps), pos, aw, spec));
    Value t = mb.norm(x, ffnNorm, hp.rmsEps);
    x = mb.add(x, mb.moeFFN(t, t, mw, hp.nExpertUsed, GluFn::swiglu_oai, MoeGating::SoftmaxSelected));
  }
  return buildOutput(mb, hp, x, tokenEmbd);
}

} // namespace mlir::tpc
