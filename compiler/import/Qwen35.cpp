//===- Qwen35.cpp - qwen35 and qwen35moe (Qwen3.5 / Qwen3.6) importer ---------===//
//
// Hybrid models: three of every four layers (all but (il + 1) % full_attention_interval == 0) are Gated
// DeltaNet linear attention with a recurrent state per sequence, the others gated full attention.
//
// Gated DeltaNet layer (ik_llama.cpp src/llama-delta-net.cpp, HF Qwen3_5MoeGatedDeltaNet):
//   qkv = attn_qkv u -> causal depthwise conv with state (ssm_conv1d) -> silu -> q | k | v (the conv
//   channels are q and k of every key head, then v of every value head); q, k L2-normalised per head;
//   beta = sigmoid(ssm_beta u), g = softplus(ssm_alpha u + ssm_dt.bias) * ssm_a; the gated delta rule per
//   value head (value head h reads key head h % Hk: tiled), q scaled by 1/sqrt(Dk); then
//   rms_norm(o) * ssm_norm * silu(attn_gate u) per value head, and ssm_out.
// Gated attention layer: attn_q rows per head are [q | gate]; q/k RMS norms; NEOX RoPE on the first
// rope.dimension_count dims (IMRoPE with equal positions in every section is NEOX for text); the output
// times sigmoid(gate) before attn_output.
// FFN: qwen35 a dense SiLU GLU; qwen35moe softmax routing over all experts, top-k renormalised, SiLU
// experts, plus a shared expert scaled by sigmoid(ffn_gate_inp_shexp u) per token. The FFN input norm is
// post_attention_norm. Norm weights are applied as stored (the converter stores 1 + w).
// block_count counts the MTP (NextN) blocks at the end; their tensors are in the file and not read here.
//===----------------------------------------------------------------------===//
#include "compiler/import/Architectures.h"

#include <cmath>

namespace mlir::tpc {
namespace {

/// The Gated DeltaNet weights of one layer.
struct DeltaNetWeights {
  Value qkv, gate, beta, alpha, dtBias, a, conv, norm, out;
};

DeltaNetWeights loadDeltaNet(ModelBuilder &mb, const HParams &hp, unsigned il) {
  const std::string &A = hp.arch;
  int64_t E = hp.nEmbd, Hk = hp.ssmKeyHeads, Hv = hp.ssmValueHeads, Dk = hp.ssmHeadDimK, Dv = hp.ssmHeadDimV;
  int64_t C = 2 * Hk * Dk + Hv * Dv;
  std::string conv = A + ".ssm.group_count " + std::to_string(Hk) + " x " + A + ".ssm.state_size " +
                     std::to_string(Dk) + " x 2 + " + A + ".ssm.inner_size " + std::to_string(Hv * Dv);
  std::string inner = A + ".ssm.inner_size " + std::to_string(Hv * Dv) + ", " + A + ".embedding_length " +
                      std::to_string(E);
  std::string heads = A + ".ssm.time_step_rank " + std::to_string(Hv);
  DeltaNetWeights w;
  w.qkv = mb.weight(blk(il, "attn_qkv.weight"), {C, E}, conv);
  w.gate = mb.weight(blk(il, "attn_gate.weight"), {Hv * Dv, E}, inner);
  w.beta = mb.weight(blk(il, "ssm_beta.weight"), {Hv, E}, heads);
  w.alpha = mb.weight(blk(il, "ssm_alpha.weight"), {Hv, E}, heads);
  w.dtBias = mb.weight(blk(il, "ssm_dt.bias"), {Hv}, heads);
  w.a = mb.weight(blk(il, "ssm_a"), {Hv}, heads);
  w.conv = mb.weight(blk(il, "ssm_conv1d.weight"), {C, int64_t(hp.ssmConvKernel)},
                     conv + ", " + A + ".ssm.conv_kernel " + std::to_string(hp.ssmConvKernel));
  w.norm = mb.weight(blk(il, "ssm_norm.weight"), {Dv}, A + ".ssm.inner_size / ssm.time_step_rank");
  w.out = mb.weight(blk(il, "ssm_out.weight"), {E, Hv * Dv}, inner);
  return w;
}

Value deltaNetBlock(ModelBuilder &mb, const HParams &hp, unsigned il, Value h, Value pos, const DeltaNetWeights &w) {
  const int64_t T = ShapedType::kDynamic, Hk = hp.ssmKeyHeads, Hv = hp.ssmValueHeads, Dk = hp.ssmHeadDimK,
                Dv = hp.ssmHeadDimV, keyDim = Hk * Dk;
  Value qkv = mb.matmul(h, w.qkv);
  Value z = mb.reshape(mb.matmul(h, w.gate), {T, Hv, Dv});
  Value beta = mb.unary(mb.matmul(h, w.beta), UnaryFn::sigmoid);
  Value g = mb.mul(mb.unary(mb.add(mb.matmul(h, w.alpha), w.dtBias), UnaryFn::softplus), w.a);
  Value state = mb.recurrentState(il, Hk, Hv, Dk, Dv, hp.ssmConvKernel);
  Value conv = mb.unary(mb.ssmConv(qkv, w.conv, state, pos), UnaryFn::silu);
  Value q = mb.l2Norm(mb.reshape(mb.view(conv, 1, 0, keyDim), {T, Hk, Dk}), hp.rmsEps);
  Value k = mb.l2Norm(mb.reshape(mb.view(conv, 1, keyDim, keyDim), {T, Hk, Dk}), hp.rmsEps);
  Value v = mb.reshape(mb.view(conv, 1, 2 * keyDim, Hv * Dv), {T, Hv, Dv});
  Value o = mb.deltaNet(q, k, v, g, beta, state, pos, 1.0f / std::sqrt(static_cast<float>(Dk)));
  Value n = mb.gatedRmsNorm(o, w.norm, z, hp.rmsEps);
  return mb.matmul(mb.reshape(n, {T, Hv * Dv}), w.out);
}

/// Gated full attention: attn_q holds [q | gate] per head.
Value gatedAttentionBlock(ModelBuilder &mb, const HParams &hp, unsigned il, Value h, Value pos,
                          const AttentionWeights &w, Value qNorm, Value kNorm) {
  const int64_t T = ShapedType::kDynamic, H = hp.nHead, Hkv = hp.nHeadKv[il], D = hp.headDimK;
  Value qg = mb.reshape(mb.matmul(h, w.wq), {T, H, 2 * D});
  Value q = mb.view(qg, 2, 0, D);
  Value gate = mb.view(qg, 2, D, D);
  Value k = mb.reshape(mb.matmul(h, w.wk), {T, Hkv, D});
  Value v = mb.reshape(mb.matmul(h, w.wv), {T, Hkv, D});
  q = mb.rope(mb.norm(q, qNorm, hp.rmsEps), pos, Value(), RopeMode::neox, hp.nRot, hp.ropeBase);
  k = mb.rope(mb.norm(k, kNorm, hp.rmsEps), pos, Value(), RopeMode::neox, hp.nRot, hp.ropeBase);
  Value cache = mb.kvCache(il, Hkv, D, D);
  Value a = mb.attention(q, k, v, cache, pos, 1.0f / std::sqrt(static_cast<float>(D)), 0, 0.f, gate);
  return mb.matmul(mb.reshape(a, {T, H * D}), w.wo);
}

} // namespace

Value buildQwen35(ModelBuilder &mb, HParams &hp, Value tokens, Value pos) {
  const bool moe = hp.arch == "qwen35moe"; // its expert keys are checked by readHParams
  const int64_t E = hp.nEmbd, V = hp.nVocab, D = hp.headDimK;
  if (hp.headDimV != hp.headDimK) {
    mb.error(Twine(hp.arch) + ".attention.value_length " + Twine(hp.headDimV) + " differs from key_length " +
             Twine(hp.headDimK) + ": the gated attention layers use one head size");
    return nullptr;
  }
  Value tokenEmbd = mb.weight("token_embd.weight", {V, E});
  if (mb.failed())
    return nullptr;
  Value x = mb.getRows(tokenEmbd, tokens);
  for (unsigned il = 0; il < hp.nLayer; ++il) {
    mb.setLayer(il);
    const bool recurrent = hp.recurrentLayers[il];
    Value attnNorm = mb.weight(blk(il, "attn_norm.weight"), {E});
    DeltaNetWeights dw;
    AttentionWeights aw;
    Value qNorm, kNorm;
    if (recurrent) {
      dw = loadDeltaNet(mb, hp, il);
    } else {
      // attn_q rows: [q | gate] per head, so twice the heads' width.
      int64_t H = hp.nHead, Hkv = hp.nHeadKv[il];
      std::string why = hp.arch + ".attention.head_count " + std::to_string(H) + " x key_length " +
                        std::to_string(D);
      aw.wq = mb.weight(blk(il, "attn_q.weight"), {2 * H * D, E}, why + " x 2 (q and its gate)");
      aw.wk = mb.weight(blk(il, "attn_k.weight"), {Hkv * D, E}, why);
      aw.wv = mb.weight(blk(il, "attn_v.weight"), {Hkv * D, E}, why);
      aw.wo = mb.weight(blk(il, "attn_output.weight"), {E, H * D}, why);
      qNorm = mb.weight(blk(il, "attn_q_norm.weight"), {D});
      kNorm = mb.weight(blk(il, "attn_k_norm.weight"), {D});
    }
    Value ffnNorm = mb.weight(blk(il, "post_attention_norm.weight"), {E});
    MoeWeights moeW;
    FFNWeights ffnW, shW;
    Value shGate;
    if (moe) {
      moeW = loadMoe(mb, hp, il);
      std::string sh = hp.arch + ".expert_shared_feed_forward_length " + std::to_string(hp.nFFShexp);
      int64_t F = hp.nFFShexp;
      shW.gate = mb.weight(blk(il, "ffn_gate_shexp.weight"), {F, E}, sh);
      shW.up = mb.weight(blk(il, "ffn_up_shexp.weight"), {F, E}, sh);
      shW.down = mb.weight(blk(il, "ffn_down_shexp.weight"), {E, F}, sh);
      shGate = mb.weight(blk(il, "ffn_gate_inp_shexp.weight"), {E}, hp.arch + ".embedding_length");
    } else {
      ffnW = loadFFN(mb, hp, il);
    }
    if (mb.failed())
      return nullptr;

    Value h = mb.norm(x, attnNorm, hp.rmsEps);
    x = mb.add(x, recurrent ? deltaNetBlock(mb, hp, il, h, pos, dw)
                            : gatedAttentionBlock(mb, hp, il, h, pos, aw, qNorm, kNorm));
    Value h2 = mb.norm(x, ffnNorm, hp.rmsEps);
    Value ffn;
    if (moe) {
      ffn = mb.moeFFN(h2, h2, moeW, hp.nExpertUsed, GluFn::silu, MoeGating::SoftmaxNormalized);
      // The shared expert, scaled per token by sigmoid(gate . h2) (a [T, 1] column).
      Value gateCol = mb.unary(mb.matmul(h2, mb.reshape(shGate, {1, E})), UnaryFn::sigmoid);
      ffn = mb.add(ffn, mb.mul(mb.gluFFN(h2, shW, GluFn::silu), gateCol));
    } else {
      ffn = mb.gluFFN(h2, ffnW, GluFn::silu);
    }
    x = mb.add(x, ffn);
  }
  return buildOutput(mb, hp, x, tokenEmbd);
}

} // namespace mlir::tpc
