//===- Gemma3.cpp - gemma3 importer -----------------------------------------===//
//
// Gemma 3: input embeddings scaled by sqrt(n_embd); RMS norms before *and* after each sub-block
// (post_attention_norm, post_ffw_norm); per-head q/k norms; GELU(tanh)-GLU FFN; tied output. Sliding-window
// and global layers are fixed by the architecture, not by a GGUF key: layer il is global iff
// (il + 1) % 6 == 0; sliding layers use RoPE base 10000, global ones rope.freq_base. The attention scale is
// 1/sqrt(key_length), except for the 62-layer 27B model, which uses 1/sqrt(n_embd / n_head).
//===----------------------------------------------------------------------===//
#include "compiler/import/Architectures.h"

#include <cmath>

namespace mlir::tpc {

Value buildGemma3(ModelBuilder &mb, HParams &hp, Value tokens, Value pos) {
  int64_t E = hp.nEmbd, V = hp.nVocab, H = hp.nHead, D = hp.headDimK;
  constexpr unsigned kSwaPattern = 6;
  constexpr float kSwaRopeBase = 10000.f;
  for (unsigned il = 0; il < hp.nLayer; ++il)
    hp.swaLayers[il] = (il + 1) % kSwaPattern != 0;
  if (hp.nLayer == 62 && E < H) {
    mb.error("gemma3.embedding_length = " + Twine(E) + ": expected at least gemma3.attention.head_count = " +
             Twine(H) + " (the 62-layer model scales attention by 1/sqrt(embedding_length / head_count))");
    return nullptr;
  }
  float attnScale = hp.nLayer == 62 ? 1.0f / std::sqrt(static_cast<float>(E / H))
                                    : 1.0f / std::sqrt(static_cast<float>(D));

  Value tokenEmbd = mb.weight("token_embd.weight", {V, E});
  if (mb.failed())
    return nullptr;
  Value x = mb.scale(mb.getRows(tokenEmbd, tokens), std::sqrt(static_cast<float>(E)));
  for (unsigned il = 0; il < hp.nLayer; ++il) {
    mb.setLayer(il);
    Value attnNorm = mb.weight(blk(il, "attn_norm.weight"), {E});
    AttentionWeights aw = loadAttention(mb, hp, il, D, hp.headDimV);
    AttentionSpec spec = baseAttentionSpec(hp, il, D, hp.headDimV, RopeMode::neox);
    spec.qNorm = mb.weight(blk(il, "attn_q_norm.weight"), {D});
    spec.kNorm = mb.weight(blk(il, "attn_k_norm.weight"), {D});
    Value postAttnNorm = mb.weight(blk(il, "post_attention_norm.weight"), {E});
    Value ffnNorm = mb.weight(blk(il, "ffn_norm.weight"), {E});
    FFNWeights ffnW = loadFFN(mb, hp, il);
    Value postFfwNorm = mb.weight(blk(il, "post_ffw_norm.weight"), {E});
    if (mb.failed())
      return nullptr;

    bool swa = hp.swaLayers[il];
    spec.scale = attnScale;
    spec.slidingWindow = swa ? hp.slidingWindow : 0;
    spec.ropeBase = swa ? kSwaRopeBase : hp.ropeBase;
    if (swa) // rope.scaling (the larger models' linear factor) is for the global layers only, as the reference
      spec.ropeScaling.freqScale = 1.f;
    Value attn = mb.attentionBlock(mb.norm(x, attnNorm, hp.rmsEps), pos, aw, spec);
    x = mb.add(x, mb.norm(attn, postAttnNorm, hp.rmsEps));
    Value ffn = mb.gluFFN(mb.norm(x, ffnNorm, hp.rmsEps), ffnW, GluFn::gelu_tanh);
    x = mb.add(x, mb.norm(ffn, postFfwNorm, hp.rmsEps));
  }
  return buildOutput(mb, hp, x, tokenEmbd);
}

} // namespace mlir::tpc
