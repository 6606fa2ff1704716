//===- Llama.cpp - llama importer -------------------------------------------===//
//
// Pre-norm decoder: x += Wo·attn(rope(Wq·h), rope(Wk·h), Wv·h) with h = rms_norm(x)·attn_norm, then
// x += Wdown·(silu(Wgate·h2) * Wup·h2) with h2 = rms_norm(x)·ffn_norm. GQA, normal (adjacent-pair) RoPE,
// attention scale 1/sqrt(head_dim). A llama file with experts (Mixtral-style) is not supported yet and is
// rejected by the missing ffn_gate tensor.
//===----------------------------------------------------------------------===//
#include "compiler/import/Architectures.h"

#include <cmath>

namespace mlir::tpc {

Value buildLlama(ModelBuilder &mb, HParams &hp, Value tokens, Value pos) {
  int64_t E = hp.nEmbd, V = hp.nVocab, D = hp.headDimK;
  Value tokenEmbd = mb.weight("token_embd.weight", {V, E});
  if (mb.failed())
    return nullptr;
  Value x = mb.getRows(tokenEmbd, tokens);
  for (unsigned il = 0; il < hp.nLayer; ++il) {
    mb.setLayer(il);
    Value attnNorm = mb.weight(blk(il, "attn_norm.weight"), {E});
    AttentionWeights aw = loadAttention(mb, hp, il, D, D);
    Value ffnNorm = mb.weight(blk(il, "ffn_norm.weight"), {E});
    FFNWeights ffn = loadFFN(mb, hp, il);
    if (mb.failed())
      return nullptr;

    AttentionSpec spec = baseAttentionSpec(hp, il, D, D, RopeMode::normal);
    x = mb.add(x, mb.attentionBlock(mb.norm(x, attnNorm, hp.rmsEps), pos, aw, spec));
    x = mb.add(x, mb.gluFFN(mb.norm(x, ffnNorm, hp.rmsEps), ffn, GluFn::silu));
  }
  return buildOutput(mb, hp, x, tokenEmbd);
}

} // namespace mlir::tpc
