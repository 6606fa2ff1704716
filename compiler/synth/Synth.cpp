//===- Synth.cpp - full-size GGUF models with random weights ----------------===//
//
// Tensor names, shapes (ggml ne order) and metadata keys follow the importers (compiler/import/Llama.cpp,
// Qwen3.cpp, Gemma4.cpp, Qwen35.cpp, Glm4Moe.cpp, GptOss.cpp, HParams.cpp) and the fixture files; the order
// of keys and tensors matches the fixtures (test/synth compares the qwen35 ones with the shared fixtures key
// by key).
// qwen35 values besides matrices and norms, in the fixtures' ranges: ssm_a (= -exp(A_log), a decay rate)
// U(-1, -0.05), so every head decays and none forgets at once; ssm_dt.bias U(-0.5, 1); the depthwise conv
// taps std 1/sqrt(kernel); the shared-expert gate vector std 1/sqrt(n_embd), so its sigmoid is O(1) away
// from 0 and 1.
//===----------------------------------------------------------------------===//
#include "compiler/synth/Synth.h"

#include "compiler/synth/Vocab.h"

#include <cmath>
#include <regex>

namespace tpc::synth {
namespace {

/// FNV-1a: a stable hash of a tensor name (std::hash may differ between builds).
uint64_t hashName(const std::string &s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s)
    h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

/// Collects the tensor list in file order.
class Planner {
public:
  explicit Planner(const ModelSpec &s) : s(s) {}

  void add(const std::string &name, std::vector<uint64_t> ne, Init init) {
    out.push_back({name, GGMLType::F32, std::move(ne), init});
  }
  /// A weight matrix y = W x with W of `rows` x `fanIn` (ne = [fanIn, rows, experts]).
  void matrix(const std::string &name, uint64_t fanIn, uint64_t rows, uint64_t experts = 0,
              float gain = 1.f) {
    std::vector<uint64_t> ne = {fanIn, rows};
    if (experts)
      ne.push_back(experts);
    add(name, std::move(ne), Init::normal(0.f, gain / std::sqrt(static_cast<float>(fanIn))));
  }
  void norm(const std::string &name, uint64_t n, float scale = 1.f) {
    // 1 + N(0, 0.1), times scale (gemma4 q/k norms carry the attention scale).
    add(name, {n}, Init::normal(scale, 0.1f * scale));
  }

  static std::string blk(uint32_t il, const char *suffix) {
    return "blk." + std::to_string(il) + "." + suffix;
  }

  void embeddings() {
    float stddev = s.tiedOutput ? 1.f / std::sqrt(static_cast<float>(s.nEmbd)) : 1.f;
    add("token_embd.weight", {s.nEmbd, s.nVocab}, Init::normal(0.f, stddev));
  }
  void output() {
    norm("output_norm.weight", s.nEmbd);
    if (!s.tiedOutput)
      matrix("output.weight", s.nEmbd, s.nVocab);
  }
  void attention(uint32_t il, bool qkNorm, bool hasV, float qkNormScale = 1.f) {
    uint64_t E = s.nEmbd, H = s.nHead, Hkv = s.kvHeadsOf(il), D = s.headDimOf(il);
    matrix(blk(il, "attn_q.weight"), E, H * D);
    matrix(blk(il, "attn_k.weight"), E, Hkv * D);
    if (hasV)
      matrix(blk(il, "attn_v.weight"), E, Hkv * D);
    if (qkNorm) {
      norm(blk(il, "attn_q_norm.weight"), D, qkNormScale);
      norm(blk(il, "attn_k_norm.weight"), D, qkNormScale);
    }
    matrix(blk(il, "attn_output.weight"), H * D, E);
  }
  void denseFFN(uint32_t il) {
    matrix(blk(il, "ffn_gate.weight"), s.nEmbd, s.nFF);
    matrix(blk(il, "ffn_up.weight"), s.nEmbd, s.nFF);
    matrix(blk(il, "ffn_down.weight"), s.nFF, s.nEmbd);
  }

  /// Qwen3.5 Gated DeltaNet: attn_qkv rows [q | k | v] of conv_dim = 2 key_dim + value_dim channels.
  void deltaNet(uint32_t il) {
    uint64_t E = s.nEmbd, Hv = s.ssmVHeads, keyDim = uint64_t(s.ssmGroups) * s.ssmState, V = s.ssmInner();
    uint64_t C = 2 * keyDim + V;
    matrix(blk(il, "attn_qkv.weight"), E, C);
    matrix(blk(il, "attn_gate.weight"), E, V);
    matrix(blk(il, "ssm_conv1d.weight"), s.ssmConv, C);
    add(blk(il, "ssm_dt.bias"), {Hv}, Init::uniform(-0.5f, 1.f));
    add(blk(il, "ssm_a"), {Hv}, Init::uniform(-1.f, -0.05f));
    matrix(blk(il, "ssm_beta.weight"), E, Hv);
    matrix(blk(il, "ssm_alpha.weight"), E, Hv);
    norm(blk(il, "ssm_norm.weight"), s.ssmState);
    matrix(blk(il, "ssm_out.weight"), V, E);
  }
  /// Qwen3.5 gated attention: attn_q rows are [q | gate] per head.
  void gatedAttention(uint32_t il) {
    uint64_t E = s.nEmbd, H = s.nHead, Hkv = s.nHeadKv, D = s.headDim;
    matrix(blk(il, "attn_q.weight"), E, 2 * H * D);
    matrix(blk(il, "attn_k.weight"), E, Hkv * D);
    matrix(blk(il, "attn_v.weight"), E, Hkv * D);
    norm(blk(il, "attn_q_norm.weight"), D);
    norm(blk(il, "attn_k_norm.weight"), D);
    matrix(blk(il, "attn_output.weight"), H * D, E);
  }
  void moeFFN(uint32_t il) {
    matrix(blk(il, "ffn_gate_inp.weight"), s.nEmbd, s.nExpert);
    matrix(blk(il, "ffn_gate_exps.weight"), s.nEmbd, s.nFFExp, s.nExpert);
    matrix(blk(il, "ffn_up_exps.weight"), s.nEmbd, s.nFFExp, s.nExpert);
    matrix(blk(il, "ffn_down_exps.weight"), s.nFFExp, s.nEmbd, s.nExpert);
  }

  /// qwen35 / qwen35moe: trunk layers, then the MTP blocks (a full-attention layer plus nextn.*).
  void qwen35() {
    embeddings();
    for (uint32_t il = 0; il < s.blockCount(); ++il) {
      norm(blk(il, "attn_norm.weight"), s.nEmbd);
      if (s.isRecurrentLayer(il))
        deltaNet(il);
      else
        gatedAttention(il);
      norm(blk(il, "post_attention_norm.weight"), s.nEmbd);
      if (s.nExpert) {
        moeFFN(il);
        add(blk(il, "ffn_gate_inp_shexp.weight"), {s.nEmbd},
            Init::normal(0.f, 1.f / std::sqrt(static_cast<float>(s.nEmbd))));
        matrix(blk(il, "ffn_gate_shexp.weight"), s.nEmbd, s.nFFShexp);
        matrix(blk(il, "ffn_up_shexp.weight"), s.nEmbd, s.nFFShexp);
        matrix(blk(il, "ffn_down_shexp.weight"), s.nFFShexp, s.nEmbd);
      } else {
        denseFFN(il);
      }
      if (il >= s.nLayer) {
        matrix(blk(il, "nextn.eh_proj.weight"), 2ull * s.nEmbd, s.nEmbd);
        norm(blk(il, "nextn.enorm.weight"), s.nEmbd);
        norm(blk(il, "nextn.hnorm.weight"), s.nEmbd);
        norm(blk(il, "nextn.shared_head_norm.weight"), s.nEmbd);
      }
    }
    output();
  }

  /// glm4moe: attention with q/k/v biases, the leading dense layers, then MoE layers with a selection bias
  /// and a shared expert; the MTP blocks after the trunk (a MoE layer plus nextn.*), in the fixture's order.
  void glm4moe() {
    uint64_t E = s.nEmbd, H = s.nHead, Hkv = s.nHeadKv, D = s.headDim,
             Fs = uint64_t(s.nFFExp) * s.nExpertShared;
    auto bias = [&](const std::string &name, uint64_t n) { add(name, {n}, Init::normal(0.f, 0.1f)); };
    embeddings();
    for (uint32_t il = 0; il < s.blockCount(); ++il) {
      norm(blk(il, "attn_norm.weight"), E);
      matrix(blk(il, "attn_q.weight"), E, H * D);
      bias(blk(il, "attn_q.bias"), H * D);
      matrix(blk(il, "attn_k.weight"), E, Hkv * D);
      bias(blk(il, "attn_k.bias"), Hkv * D);
      matrix(blk(il, "attn_v.weight"), E, Hkv * D);
      bias(blk(il, "attn_v.bias"), Hkv * D);
      if (s.qkNorm) {
        norm(blk(il, "attn_q_norm.weight"), D);
        norm(blk(il, "attn_k_norm.weight"), D);
      }
      matrix(blk(il, "attn_output.weight"), H * D, E);
      norm(blk(il, "post_attention_norm.weight"), E);
      if (il < s.nDenseLead) {
        denseFFN(il);
      } else {
        matrix(blk(il, "ffn_gate_inp.weight"), E, s.nExpert);
        // The selection bias: uniform, as a normal of 8 samples (tiny) would miss its planned spread.
        add(blk(il, "exp_probs_b.bias"), {s.nExpert}, Init::uniform(-0.15f, 0.15f));
        matrix(blk(il, "ffn_gate_exps.weight"), E, s.nFFExp, s.nExpert);
        matrix(blk(il, "ffn_up_exps.weight"), E, s.nFFExp, s.nExpert);
        matrix(blk(il, "ffn_down_exps.weight"), s.nFFExp, E, s.nExpert);
        matrix(blk(il, "ffn_gate_shexp.weight"), E, Fs);
        matrix(blk(il, "ffn_up_shexp.weight"), E, Fs);
        matrix(blk(il, "ffn_down_shexp.weight"), Fs, E);
      }
      if (il >= s.nLayer) {
        matrix(blk(il, "nextn.eh_proj.weight"), 2 * E, E);
        matrix(blk(il, "nextn.embed_tokens.weight"), E, s.nVocab);
        norm(blk(il, "nextn.enorm.weight"), E);
        norm(blk(il, "nextn.hnorm.weight"), E);
        matrix(blk(il, "nextn.shared_head_head.weight"), E, s.nVocab);
        norm(blk(il, "nextn.shared_head_norm.weight"), E);
      }
    }
    output();
  }

  void llamaOrQwen3() {
    bool qwen = s.arch != "llama", moe = s.arch == "qwen3moe";
    embeddings();
    for (uint32_t il = 0; il < s.nLayer; ++il) {
      norm(blk(il, "attn_norm.weight"), s.nEmbd);
      attention(il, qwen, true);
      norm(blk(il, "ffn_norm.weight"), s.nEmbd);
      if (moe) {
        moeFFN(il);
      } else {
        denseFFN(il);
      }
    }
    output();
  }

  void gemma3() {
    embeddings();
    for (uint32_t il = 0; il < s.nLayer; ++il) {
      norm(blk(il, "attn_norm.weight"), s.nEmbd);
      attention(il, true, true);
      norm(blk(il, "post_attention_norm.weight"), s.nEmbd);
      norm(blk(il, "ffn_norm.weight"), s.nEmbd);
      denseFFN(il);
      norm(blk(il, "post_ffw_norm.weight"), s.nEmbd);
    }
    output();
  }

  void gemma4() {
    embeddings();
    // Proportional RoPE on the global layers: the first ropePartial of the pairs rotate, the rest get
    // frequency factor 1e30 (no rotation), as the fixture and the converter encode it.
    uint64_t pairs = s.headDimGlobal / 2;
    add("rope_freqs.weight", {pairs}, Init::ropeFreqs(std::round(s.ropePartial * static_cast<float>(pairs))));
    for (uint32_t il = 0; il < s.nLayer; ++il) {
      bool swa = s.isSlidingLayer(il);
      float qkScale = 1.f / std::sqrt(std::sqrt(static_cast<float>(s.headDimOf(il))));
      norm(blk(il, "attn_norm.weight"), s.nEmbd);
      attention(il, true, /*hasV=*/swa, qkScale);
      norm(blk(il, "post_attention_norm.weight"), s.nEmbd);
      norm(blk(il, "ffn_norm.weight"), s.nEmbd);
      denseFFN(il);
      norm(blk(il, "post_ffw_norm_1.weight"), s.nEmbd);
      norm(blk(il, "pre_ffw_norm_2.weight"), s.nEmbd);
      // The router sees rms_norm(a) * scale / sqrt(n_embd): std 1 keeps its logits O(1).
      matrix(blk(il, "ffn_gate_inp.weight"), s.nEmbd, s.nExpert, 0, std::sqrt(static_cast<float>(s.nEmbd)));
      norm(blk(il, "ffn_gate_inp.scale"), s.nEmbd);
      matrix(blk(il, "ffn_gate_up_exps.weight"), s.nEmbd, 2ull * s.nFFExp, s.nExpert);
      matrix(blk(il, "ffn_down_exps.weight"), s.nFFExp, s.nEmbd, s.nExpert);
      add(blk(il, "ffn_down_exps.scale"), {s.nExpert}, Init::uniform(0.5f, 1.5f));
      norm(blk(il, "post_ffw_norm_2.weight"), s.nEmbd);
      norm(blk(il, "post_ffw_norm.weight"), s.nEmbd);
      add(blk(il, "layer_output_scale.weight"), {1}, Init::uniform(0.5f, 1.0f));
    }
    norm("output_norm.weight", s.nEmbd);
  }

  /// gpt-oss, in the converter's order: biases after their weights, sinks, the experts' biases [F, X].
  void gptOss() {
    const uint64_t E = s.nEmbd, H = s.nHead, Hkv = s.nHeadKv, D = s.headDim, X = s.nExpert, F = s.nFFExp;
    auto bias = [&](const std::string &name, std::vector<uint64_t> ne, float stddev = 0.1f) {
      add(name, std::move(ne), Init::normal(0.f, stddev));
    };
    embeddings();
    for (uint32_t il = 0; il < s.nLayer; ++il) {
      norm(blk(il, "attn_norm.weight"), E);
      matrix(blk(il, "attn_q.weight"), E, H * D);
      bias(blk(il, "attn_q.bias"), {H * D});
      matrix(blk(il, "attn_k.weight"), E, Hkv * D);
      bias(blk(il, "attn_k.bias"), {Hkv * D});
      matrix(blk(il, "attn_v.weight"), E, Hkv * D);
      bias(blk(il, "attn_v.bias"), {Hkv * D});
      matrix(blk(il, "attn_output.weight"), H * D, E);
      bias(blk(il, "attn_output.bias"), {E});
      bias(blk(il, "attn_sinks.weight"), {H}, 1.f); // one logit per query head, O(1) like the scores
      norm(blk(il, "post_attention_norm.weight"), E);
      matrix(blk(il, "ffn_gate_inp.weight"), E, X);
      bias(blk(il, "ffn_gate_inp.bias"), {X}, 0.5f);
      matrix(blk(il, "ffn_gate_exps.weight"), E, F, X);
      bias(blk(il, "ffn_gate_exps.bias"), {F, X});
      matrix(blk(il, "ffn_up_exps.weight"), E, F, X);
      bias(blk(il, "ffn_up_exps.bias"), {F, X});
      matrix(blk(il, "ffn_down_exps.weight"), F, E, X);
      bias(blk(il, "ffn_down_exps.bias"), {E, X});
    }
    output();
  }

  const ModelSpec &s;
  std::vector<TensorPlan> out;
};

/// qwen35 / qwen35moe keys, in the fixtures' order (which is the converter's).
void writeQwen35HParams(gguf::GGUFWriter &w, const ModelSpec &s) {
  std::string a = s.arch + ".";
  w.setU32(a + "context_length", s.nCtx);
  w.setU32(a + "embedding_length", s.nEmbd);
  w.setU32(a + "block_count", s.blockCount());
  w.setU32(a + "vocab_size", s.nVocab);
  w.setU32(a + "attention.head_count", s.nHead);
  w.setU32(a + "attention.head_count_kv", s.nHeadKv);
  w.setU32(a + "attention.key_length", s.headDim);
  w.setU32(a + "attention.value_length", s.headDim);
  w.setU32(a + "rope.dimension_count", s.ropeDims);
  w.setI32Array(a + "rope.dimension_sections", s.ropeSections); // INT32, as gguf-py writes Python ints
  w.setF32(a + "rope.freq_base", s.ropeBase);
  w.setF32(a + "attention.layer_norm_rms_epsilon", s.rmsEps);
  w.setU32(a + "ssm.conv_kernel", s.ssmConv);
  w.setU32(a + "ssm.state_size", s.ssmState);
  w.setU32(a + "ssm.group_count", s.ssmGroups);
  w.setU32(a + "ssm.time_step_rank", s.ssmVHeads);
  w.setU32(a + "ssm.inner_size", s.ssmInner());
  w.setU32(a + "full_attention_interval", s.fullAttnInterval);
  w.setU32(a + "nextn_predict_layers", s.nNextN);
  if (s.nFF)
    w.setU32(a + "feed_forward_length", s.nFF);
  if (s.nExpert) {
    w.setU32(a + "expert_count", s.nExpert);
    w.setU32(a + "expert_used_count", s.nExpertUsed);
    w.setU32(a + "expert_feed_forward_length", s.nFFExp);
    w.setU32(a + "expert_shared_feed_forward_length", s.nFFShexp);
  }
}

/// glm4moe keys, in the fixture's order (which is the converter's).
void writeGlm4MoeHParams(gguf::GGUFWriter &w, const ModelSpec &s) {
  std::string a = s.arch + ".";
  w.setU32(a + "context_length", s.nCtx);
  w.setU32(a + "embedding_length", s.nEmbd);
  w.setU32(a + "block_count", s.blockCount());
  w.setU32(a + "vocab_size", s.nVocab);
  w.setU32(a + "feed_forward_length", s.nFF);
  w.setU32(a + "expert_feed_forward_length", s.nFFExp);
  w.setU32(a + "expert_count", s.nExpert);
  w.setU32(a + "expert_used_count", s.nExpertUsed);
  w.setU32(a + "expert_shared_count", s.nExpertShared);
  w.setU32(a + "leading_dense_block_count", s.nDenseLead);
  w.setF32(a + "expert_weights_scale", s.expertWeightsScale);
  w.setBool(a + "expert_weights_norm", true);
  w.setU32(a + "expert_gating_func", 2); // sigmoid
  w.setU32(a + "nextn_predict_layers", s.nNextN);
  w.setU32(a + "attention.head_count", s.nHead);
  w.setU32(a + "attention.head_count_kv", s.nHeadKv);
  w.setU32(a + "attention.key_length", s.headDim);
  w.setU32(a + "attention.value_length", s.headDim);
  w.setU32(a + "rope.dimension_count", s.ropeDims);
  w.setF32(a + "rope.freq_base", s.ropeBase);
  w.setF32(a + "attention.layer_norm_rms_epsilon", s.rmsEps);
}

/// The `<arch>.*` keys each importer reads (HParams.cpp, Gemma4.cpp), in the fixtures' order.
void writeHParams(gguf::GGUFWriter &w, const ModelSpec &s) {
  if (s.fullAttnInterval)
    return writeQwen35HParams(w, s);
  if (s.arch == "glm4moe")
    return writeGlm4MoeHParams(w, s);
  std::string a = s.arch + ".";
  bool gemma = s.arch == "gemma4";
  w.setU32(a + "context_length", s.nCtx);
  w.setU32(a + "embedding_length", s.nEmbd);
  w.setU32(a + "block_count", s.nLayer);
  w.setU32(a + "vocab_size", s.nVocab);
  if (s.nFF)
    w.setU32(a + "feed_forward_length", s.nFF);
  if (s.nExpert) {
    w.setU32(a + "expert_feed_forward_length", s.nFFExp);
    w.setU32(a + "expert_count", s.nExpert);
    w.setU32(a + "expert_used_count", s.nExpertUsed);
  }
  w.setU32(a + "attention.head_count", s.nHead);
  if (gemma) {
    std::vector<uint32_t> kv;
    std::vector<bool> pattern;
    for (uint32_t il = 0; il < s.nLayer; ++il) {
      kv.push_back(s.kvHeadsOf(il));
      pattern.push_back(s.isSlidingLayer(il));
    }
    w.setU32Array(a + "attention.head_count_kv", kv);
    w.setU32(a + "attention.key_length", s.headDimGlobal);
    w.setU32(a + "attention.value_length", s.headDimGlobal);
    w.setU32(a + "attention.key_length_swa", s.headDim);
    w.setU32(a + "attention.value_length_swa", s.headDim);
    w.setU32(a + "attention.sliding_window", s.slidingWindow);
    w.setBoolArray(a + "attention.sliding_window_pattern", pattern);
    w.setU32(a + "attention.shared_kv_layers", 0);
    w.setU32(a + "embedding_length_per_layer_input", 0);
    w.setU32(a + "rope.dimension_count", s.headDimGlobal);
    w.setU32(a + "rope.dimension_count_swa", s.headDim);
    w.setF32(a + "rope.freq_base", s.ropeBase);
    w.setF32(a + "rope.freq_base_swa", s.ropeBaseSwa);
  } else {
    w.setU32(a + "attention.head_count_kv", s.nHeadKv);
    if (s.arch == "llama") {
      w.setU32(a + "rope.dimension_count", s.headDim);
    } else {
      if (s.arch == "gemma3" || s.arch == "gpt-oss")
        w.setU32(a + "attention.sliding_window", s.slidingWindow);
      w.setU32(a + "attention.key_length", s.headDim);
      w.setU32(a + "attention.value_length", s.headDim);
    }
    w.setF32(a + "rope.freq_base", s.ropeBase);
    if (s.ropeScaling > 0) { // YaRN (gpt-oss)
      w.setString(a + "rope.scaling.type", "yarn");
      w.setF32(a + "rope.scaling.factor", s.ropeScaling);
      w.setU32(a + "rope.scaling.original_context_length", s.ropeOrigCtx);
    }
  }
  w.setF32(a + "attention.layer_norm_rms_epsilon", s.rmsEps);
  if (s.finalSoftcap > 0)
    w.setF32(a + "final_logit_softcapping", s.finalSoftcap);
}

} // namespace

Expected<Synthesizer> Synthesizer::create(const SynthOptions &opts) {
  const ModelSpec *preset = findPreset(opts.preset);
  if (!preset)
    return Error{"--preset '" + opts.preset + "' is not a preset; use one of " + presetNames() +
                       " (tpc synth --list describes them)"};
  if (!opts.arch.empty() && opts.arch != preset->arch)
    return Error{"--arch " + opts.arch + " does not match --preset " + preset->preset +
                       ", which is a " + preset->arch + " model"};
  Expected<WeightType> wt = parseWeightType(opts.type);
  if (!wt)
    return Error{wt.message()};
  Expected<std::vector<TensorTypeRule>> rules = parseTensorTypeRules(opts.tensorTypes);
  if (!rules)
    return Error{rules.message()};
  Expected<ModelSpec> spec = withLayers(*preset, opts.layers ? opts.layers : preset->nLayer);
  if (!spec)
    return Error{spec.message()};

  Synthesizer s;
  s.spec_ = spec.take();
  s.wtype_ = *wt;
  s.seed_ = opts.seed;
  s.zeros_ = opts.zeros;
  const ModelSpec &m = s.spec_;

  Planner p(m);
  if (m.arch == "gemma4")
    p.gemma4();
  else if (m.arch == "gemma3")
    p.gemma3();
  else if (m.fullAttnInterval)
    p.qwen35();
  else if (m.arch == "glm4moe")
    p.glm4moe();
  else if (m.arch == "gpt-oss")
    p.gptOss();
  else
    p.llamaOrQwen3();
  s.tensors_ = std::move(p.out);

  RecipeContext ctx;
  ctx.nLayer = m.blockCount(); // ggml's n_layer counts the MTP blocks
  ctx.nExpert = m.nExpert;
  ctx.nHead = m.nHead;
  ctx.nHeadKv = m.kvHeadsOf(0);
  ctx.hasOutput = !m.tiedOutput;
  for (const TensorPlan &t : s.tensors_)
    ctx.nAttnV += t.name.find("attn_v.weight") != std::string::npos;
  int attnV = 0;
  // Per rule: how many matrices its regex finds and how many it types (the first matching rule wins).
  std::vector<size_t> found(rules->size()), typed(rules->size());
  for (TensorPlan &t : s.tensors_) {
    int layer = -1;
    if (t.name.compare(0, 4, "blk.") == 0)
      layer = std::stoi(t.name.substr(4));
    bool isV = t.name.find("attn_v.weight") != std::string::npos;
    t.type = tensorType(s.wtype_, ctx, t.name, t.ne, layer, attnV);
    attnV += isV;
    if (rules->empty() || !isQuantizable(t.name, t.ne))
      continue;
    int winner = -1;
    for (size_t r = 0; r < rules->size(); ++r)
      if (std::regex_search(t.name, (*rules)[r].re)) {
        ++found[r];
        if (winner < 0)
          winner = static_cast<int>(r);
      }
    if (winner >= 0) {
      ++typed[winner];
      t.type = fitRow((*rules)[winner].type, t.ne[0]);
    }
  }
  for (size_t r = 0; r < rules->size(); ++r) {
    const std::string rule = "--tensor-type rule '" + (*rules)[r].text + "'";
    if (!found[r])
      return Error{rule + " matches no weight matrix of " + m.preset +
                   " (regex searched in GGUF names such as "
                   "blk.0.attn_q.weight; vectors, ffn_gate_inp and ssm_conv1d stay F32); check the regex "
                   "against `tpc inspect` of the model"};
    if (!typed[r])
      return Error{rule + " types nothing: every weight matrix it matches is typed by an earlier rule (the "
                          "first matching rule wins); reorder or drop it"};
  }

  gguf::GGUFWriter &w = s.writer_;
  w.setString("general.architecture", m.arch);
  w.setString("general.name", m.preset);
  w.setU32("general.file_type", s.wtype_.fileType);
  writeHParams(w, m);
  writeVocab(w, buildVocab(m.vocab, m.nVocab));
  bool quantized = false;
  for (const TensorPlan &t : s.tensors_)
    quantized |= ggmlTypeInfo(t.type).quantized;
  if (quantized)
    w.setU32("general.quantization_version", 2);
  // Provenance: a synthetic model says so (and how to make it again).
  w.setString("tpc.synth.preset", m.preset);
  w.setU64("tpc.synth.seed", s.seed_);
  for (const TensorPlan &t : s.tensors_) {
    Expected<size_t> idx = w.addTensor(t.name, t.type, t.ne);
    if (!idx)
      return Error{"internal error planning " + m.preset + ": " + idx.message()};
    s.nameHash_.push_back(hashName(t.name));
  }
  return s;
}

uint64_t Synthesizer::parameterCount() const {
  uint64_t n = 0;
  for (const gguf::TensorInfo &t : writer_.tensors())
    n += t.nelements;
  return n;
}

uint64_t Synthesizer::fileSize() const {
  Expected<gguf::GGUFWriter::Layout> l = writer_.layout();
  return l ? l->fileSize : 0;
}

void Synthesizer::fill(size_t index, uint8_t *dst, size_t nbytes) const {
  const TensorPlan &t = tensors_[index];
  uint64_t rowElems = t.ne[0];
  uint64_t rowBytes = *ggmlRowBytes(t.type, rowElems);
  uint64_t rows = nbytes / rowBytes;
  // Chunks of whole rows, about 1 MiB, fixed by the row size alone (never by the thread count).
  uint64_t chunkRows = std::max<uint64_t>(1, (uint64_t(1) << 20) / rowBytes);
  for (uint64_t r = 0, k = 0; r < rows; r += chunkRows, ++k) {
    Rng rng(mixSeed(mixSeed(seed_, nameHash_[index]), k));
    uint64_t n = std::min(chunkRows, rows - r);
    fillRows(t.type, t.init, dst + r * rowBytes, n, rowElems, r * rowElems, rng);
  }
}

Expected<void> Synthesizer::write(const std::string &path, unsigned threads) const {
  if (zeros_)
    return writer_.write(path, {}, threads);
  return writer_.write(
      path, [this](size_t i, uint8_t *dst, size_t n) { fill(i, dst, n); }, threads);
}

Expected<std::vector<uint8_t>> Synthesizer::writeToBuffer(unsigned threads) const {
  return writer_.writeToBuffer([this](size_t i, uint8_t *dst, size_t n) { fill(i, dst, n); }, threads);
}

} // namespace tpc::synth
