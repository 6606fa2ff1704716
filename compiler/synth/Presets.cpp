//===- Presets.cpp - model shapes `tpc synth` can write ----------------------===//
//
// Sources of the real shapes (config.json of each model):
// - Llama-3-8B: hidden 4096, 32 layers, 32 heads / 8 KV heads, FFN 14336, vocab 128256, rope_theta 5e5,
//   rms eps 1e-5, context 8192, untied output.
// - Qwen3-8B: hidden 4096, 36 layers, 32 / 8 heads, head_dim 128, FFN 12288, vocab 151936, rope_theta 1e6,
//   rms eps 1e-6, context 40960, untied output.
// - Qwen3-30B-A3B: hidden 2048, 48 layers, 32 / 4 heads, head_dim 128, 128 experts (8 used) of width 768,
//   intermediate_size 6144 (unused by the MoE layers), vocab 151936, rope_theta 1e6, untied output.
// - Gemma-4 26B-A4B (text_config): hidden 2816, 30 layers, 16 heads; sliding layers 8 KV heads of 256,
//   global layers (every 6th) 2 KV heads of 512 with K = V (attention_k_eq_v); dense FFN 2112 in parallel
//   with 128 experts (8 used) of width 704; vocab 262144; sliding window 1024; rope_theta 1e4 (sliding) and
//   1e6 with partial_rotary_factor 0.25 (global); final soft-cap 30; tied embeddings; context 262144.
// - Qwen3.5-35B-A3B (= Qwen3.6-35B-A3B; GGUF keys as the loader dumps of real files show them, see
//   shared/research/qwen35.md §1.2): hidden 2048, 40 layers + 1 MTP block (block_count 41), every 4th layer
//   full attention with 16 / 2 heads of 256 (RoPE on 64 dims, sections [11, 11, 10, 0], base 1e7), the
//   others Gated DeltaNet (conv 4, 16 key heads / 32 value heads of 128, inner 4096); 256 experts (8 used)
//   of 512 plus a shared expert of 512; vocab 248320; rms eps 1e-6; context 262144; untied output.
// - Qwen3.5-27B (= Qwen3.6-27B, dense): hidden 5120, 64 layers + 1 MTP, 24 / 4 heads of 256, GDN 16 key /
//   48 value heads (inner 6144), FFN 17408, otherwise as 35B-A3B.
// - GLM-4.5-Air (glm4moe): hidden 4096, 46 layers + 1 MTP block (block_count 47), 96 / 8 heads of 128 with
//   q/k/v biases and no q/k norm, RoPE on 64 dims (partial_rotary_factor 0.5, NEOX) base 1e6; layer 0 dense
//   (FFN 10944), the others 128 experts (8 used) of 1408 plus 1 shared expert of 1408, sigmoid routing with
//   a selection bias, normalised weights, routed_scaling_factor 1.0; vocab 151552; rms eps 1e-5; context
//   131072; untied output.
// - GLM-4.6 (= GLM-4.7's shapes; GLM-4.5 355B differs only in its 131072 context): hidden 5120, 92 layers +
//   1 MTP block, 96 / 8 heads of 128 with q/k/v biases and per-head q/k norms (use_qk_norm), 64 rotated dims;
//   layers 0-2 dense (FFN 12288), the others 160 experts (8 used) of 1536 plus 1 shared expert of 1536,
//   routed_scaling_factor 2.5; vocab 151552; context 202752.
// - gpt-oss-20b / gpt-oss-120b (OpenAI's ModelConfig and the GGUF key dumps, shared/research/archs_quants.md
//   §1.1): hidden 2880, 24 / 36 layers, 64 / 8 heads of 64, 32 / 128 experts (4 used) of 2880, sliding window
//   128 on the even layers, rope_theta 150000 with YaRN factor 32 over 4096, rms eps 1e-5, vocab 201088
//   (o200k_harmony), context 131072, untied output.
// The tiny presets mirror the shared fixtures' shapes; bench-* are the CPU benchmark shapes.
//===----------------------------------------------------------------------===//
#include "compiler/synth/Presets.h"

#include <algorithm>

namespace tpc::synth {
namespace {

ModelSpec llama(std::string name, std::string desc, uint32_t E, uint32_t L, uint32_t H, uint32_t Hkv,
                uint32_t F, uint32_t V, VocabKind vocab) {
  ModelSpec s;
  s.preset = std::move(name);
  s.arch = "llama";
  s.description = std::move(desc);
  s.nEmbd = E;
  s.nLayer = L;
  s.nHead = H;
  s.nHeadKv = Hkv;
  s.headDim = E / H;
  s.nFF = F;
  s.nVocab = V;
  s.nCtx = 4096;
  s.vocab = vocab;
  return s;
}

ModelSpec qwen3(std::string name, std::string desc, uint32_t E, uint32_t L, uint32_t H, uint32_t Hkv,
                uint32_t D, uint32_t F, uint32_t V, VocabKind vocab) {
  ModelSpec s = llama(std::move(name), std::move(desc), E, L, H, Hkv, F, V, vocab);
  s.arch = "qwen3";
  s.headDim = D;
  s.ropeBase = 1e6f;
  s.rmsEps = 1e-6f;
  return s;
}

ModelSpec qwen3moe(ModelSpec s, uint32_t X, uint32_t used, uint32_t FE) {
  s.arch = "qwen3moe";
  s.nExpert = X;
  s.nExpertUsed = used;
  s.nFFExp = FE;
  return s;
}

/// A Qwen3.5 hybrid (qwen35, or qwen35moe when X > 0): the settings all published sizes share (head size
/// 256 with 64 rotated dims, GDN head size 128 and conv 4, interval 4, one MTP block), scaled for tiny.
ModelSpec qwen35(std::string name, std::string desc, uint32_t E, uint32_t L, uint32_t H, uint32_t Hkv,
                 uint32_t Hv, uint32_t F, uint32_t X, uint32_t used, uint32_t FE, bool tiny) {
  ModelSpec s = qwen3(std::move(name), std::move(desc), E, L, H, Hkv, tiny ? 64 : 256, F, tiny ? 512 : 248320,
                      tiny ? VocabKind::Spm512 : VocabKind::Qwen35);
  s.arch = X ? "qwen35moe" : "qwen35";
  s.nCtx = tiny ? 4096 : 262144;
  s.ropeBase = 1e7f;
  s.ropeDims = s.headDim / 4; // partial_rotary_factor 0.25
  s.ropeSections = tiny ? std::vector<int32_t>{3, 3, 2, 0} : std::vector<int32_t>{11, 11, 10, 0};
  s.fullAttnInterval = 4;
  s.nNextN = 1;
  s.ssmConv = 4;
  s.ssmState = tiny ? 64 : 128;
  s.ssmGroups = tiny ? 2 : 16;
  s.ssmVHeads = Hv;
  s.nExpert = X;
  s.nExpertUsed = used;
  s.nFFExp = FE;
  s.nFFShexp = FE;
  return s;
}

/// A GLM-4.5 MoE (glm4moe): the settings the published sizes share (head size 128 with half of it rotated,
/// one MTP block, one shared expert), scaled for tiny (the shared fixture's shapes).
ModelSpec glm4moe(std::string name, std::string desc, uint32_t E, uint32_t L, uint32_t H, uint32_t Hkv,
                  uint32_t F, uint32_t X, uint32_t used, uint32_t FE, float scale, bool tiny) {
  ModelSpec s = qwen3moe(qwen3(std::move(name), std::move(desc), E, L, H, Hkv, tiny ? 64 : 128, F,
                               tiny ? 512 : 151552, tiny ? VocabKind::Spm512 : VocabKind::Glm4),
                         X, used, FE);
  s.arch = "glm4moe";
  s.nCtx = 131072;
  s.rmsEps = 1e-5f;
  s.ropeDims = s.headDim / 2;
  s.nNextN = 1;
  s.nDenseLead = 1;
  s.nExpertShared = 1;
  s.expertWeightsScale = scale;
  return s;
}

/// gpt-oss: attention and expert biases, sinks, alternating sliding layers, YaRN (Synth.cpp writes them).
ModelSpec gptOss(std::string name, std::string desc, uint32_t E, uint32_t L, uint32_t H, uint32_t Hkv, uint32_t X,
                 uint32_t used, uint32_t FE, uint32_t V, uint32_t window, VocabKind vocab) {
  ModelSpec s = llama(std::move(name), std::move(desc), E, L, H, Hkv, FE, V, vocab);
  s.arch = "gpt-oss";
  s.headDim = 64;
  s.nExpert = X;
  s.nExpertUsed = used;
  s.nFFExp = FE;
  s.nCtx = 131072;
  s.ropeBase = 150000.f;
  s.ropeScaling = 32.f;
  s.ropeOrigCtx = 4096;
  s.slidingWindow = window;
  return s;
}

std::vector<ModelSpec> makePresets() {
  std::vector<ModelSpec> v;

  ModelSpec l3 = llama("llama3-8b", "Llama-3-8B shapes (8.0B parameters)", 4096, 32, 32, 8, 14336, 128256,
                       VocabKind::Llama3);
  l3.nCtx = 8192;
  l3.ropeBase = 500000.f;
  v.push_back(l3);

  ModelSpec q3 = qwen3("qwen3-8b", "Qwen3-8B shapes (8.2B parameters)", 4096, 36, 32, 8, 128, 12288, 151936,
                       VocabKind::Qwen2);
  q3.nCtx = 40960;
  v.push_back(q3);

  ModelSpec q3m = qwen3moe(qwen3("qwen3-30b-a3b", "Qwen3-30B-A3B shapes (30.5B parameters, 128 experts)",
                                 2048, 48, 32, 4, 128, 6144, 151936, VocabKind::Qwen2),
                           128, 8, 768);
  q3m.nCtx = 40960;
  v.push_back(q3m);

  ModelSpec g4;
  g4.preset = "gemma4-26b-a4b";
  g4.arch = "gemma4";
  g4.description = "Gemma-4 26B-A4B shapes (25.2B parameters, 128 experts + dense FFN)";
  g4.nEmbd = 2816;
  g4.nLayer = 30;
  g4.nHead = 16;
  g4.nHeadKv = 8;
  g4.headDim = 256;
  g4.nHeadKvGlobal = 2;
  g4.headDimGlobal = 512;
  g4.nFF = 2112;
  g4.nExpert = 128;
  g4.nExpertUsed = 8;
  g4.nFFExp = 704;
  g4.nVocab = 262144;
  g4.nCtx = 262144;
  g4.ropeBase = 1e6f;
  g4.ropeBaseSwa = 1e4f;
  g4.rmsEps = 1e-6f;
  g4.slidingWindow = 1024;
  g4.swaPeriod = 6;
  g4.ropePartial = 0.25f;
  g4.tiedOutput = true;
  g4.finalSoftcap = 30.f;
  g4.vocab = VocabKind::Gemma;
  v.push_back(g4);

  // Gemma 3 270M: a 262,144-row table tied to the output projection is 53% of its bytes.
  ModelSpec g3 = qwen3("gemma3-270m", "Gemma-3 270M shapes (268M parameters, tied 262,144-row table)", 640,
                       18, 4, 1, 256, 2048, 262144, VocabKind::Gemma);
  g3.arch = "gemma3";
  g3.nCtx = 32768;
  g3.slidingWindow = 512;
  g3.tiedOutput = true;
  v.push_back(g3);

  v.push_back(qwen35("qwen35moe-35b-a3b",
                     "Qwen3.5/3.6-35B-A3B shapes (35.5B parameters, 256 experts, 40 layers + MTP block)",
                     2048, 40, 16, 2, 32, 0, 256, 8, 512, false));
  v.push_back(qwen35("qwen35-27b", "Qwen3.5/3.6-27B shapes (27.3B parameters, dense, 64 layers + MTP block)",
                     5120, 64, 24, 4, 48, 17408, 0, 0, 0, false));

  v.push_back(glm4moe("glm-4.5-air",
                      "GLM-4.5-Air shapes (110.5B parameters, 128 experts + shared, 46 layers + MTP block)",
                      4096, 46, 96, 8, 10944, 128, 8, 1408, 1.f, false));
  ModelSpec g46 = glm4moe(
      "glm-4.6", "GLM-4.6 / 4.7 shapes (358.3B parameters, 160 experts + shared, q/k norms, 92 layers + MTP)",
      5120, 92, 96, 8, 12288, 160, 8, 1536, 2.5f, false);
  g46.nDenseLead = 3;
  g46.qkNorm = true;
  g46.nCtx = 202752;
  v.push_back(g46);
  v.push_back(gptOss("gpt-oss-20b", "gpt-oss-20b shapes (20.9B parameters, 32 experts, MXFP4_MOE for real types)",
                     2880, 24, 64, 8, 32, 4, 2880, 201088, 128, VocabKind::Gpt4o));
  v.push_back(gptOss("gpt-oss-120b", "gpt-oss-120b shapes (116.8B parameters, 128 experts)", 2880, 36, 64, 8,
                     128, 4, 2880, 201088, 128, VocabKind::Gpt4o));

  // Small models of each architecture, shaped like the shared fixtures (tests, examples).
  v.push_back(gptOss("tiny-gptoss", "small gpt-oss (fixture shapes: 256 wide, 4 layers, 8 experts of 160, window 8)",
                     256, 4, 8, 2, 8, 2, 160, 512, 8, VocabKind::Spm512));
  v.push_back(llama("tiny-llama", "small llama (fixture shapes: 256 wide, 4 layers, GQA 8/2)", 256, 4, 8, 2,
                    768, 512, VocabKind::Spm512));
  ModelSpec tq3 = qwen3("tiny-qwen3", "small qwen3 (256 wide, 3 layers, head_dim 128, tied output)", 256, 3,
                        4, 2, 128, 768, 512, VocabKind::Spm512);
  tq3.tiedOutput = true;
  v.push_back(tq3);
  v.push_back(qwen3moe(qwen3("tiny-qwen3moe", "small qwen3moe (256 wide, 3 layers, 8 experts of 256, 2 used)",
                             256, 3, 4, 2, 64, 768, 512, VocabKind::Spm512),
                       8, 2, 256));
  v.push_back(qwen35("tiny-qwen35moe",
                     "small qwen35moe (fixture shapes: 256 wide, 8 layers + MTP, 8 experts of 64)", 256, 8, 4,
                     2, 4, 0, 8, 2, 64, true));
  v.push_back(qwen35("tiny-qwen35", "small qwen35 (fixture shapes: 256 wide, 8 layers + MTP, FFN 512)", 256,
                     8, 4, 2, 4, 512, 0, 0, 0, true));
  v.push_back(
      glm4moe("tiny-glm4moe",
              "small glm4moe (fixture shapes: 256 wide, 4 layers + MTP, 8 experts of 160 + shared, 3 used)",
              256, 4, 8, 2, 544, 8, 3, 160, 2.5f, true));
  ModelSpec tg4 = g4;
  tg4.preset = "tiny-gemma4";
  tg4.description = "small gemma4 (fixture shapes: 256 wide, 6 layers, 8 experts of 64, window 8)";
  tg4.nEmbd = 256;
  tg4.nLayer = 6;
  tg4.nHead = 4;
  tg4.nHeadKv = 2;
  tg4.headDim = 64;
  tg4.nHeadKvGlobal = 1;
  tg4.headDimGlobal = 128;
  tg4.nFF = 192;
  tg4.nExpert = 8;
  tg4.nExpertUsed = 2;
  tg4.nFFExp = 64;
  tg4.nVocab = 512;
  tg4.nCtx = 4096;
  tg4.slidingWindow = 8;
  tg4.swaPeriod = 3;
  tg4.vocab = VocabKind::Spm512;
  v.push_back(tg4);

  // CPU benchmark shapes (fixed by the benchmark issue; do not change).
  v.push_back(llama("bench-llama", "CPU benchmark llama (2048 wide, 16 layers, GQA 32/8, FFN 5632)", 2048, 16,
                    32, 8, 5632, 512, VocabKind::Spm512));
  ModelSpec bq = qwen3moe(qwen3("bench-qwen3moe",
                                "CPU benchmark qwen3moe (1024 wide, 8 layers, 32 experts of 512, 4 used)",
                                1024, 8, 16, 4, 64, 0, 512, VocabKind::Spm512),
                          32, 4, 512);
  v.push_back(bq);
  return v;
}

} // namespace

const std::vector<ModelSpec> &presets() {
  static const std::vector<ModelSpec> table = makePresets();
  return table;
}

const ModelSpec *findPreset(const std::string &name) {
  for (const ModelSpec &s : presets())
    if (s.preset == name)
      return &s;
  return nullptr;
}

std::string presetNames() {
  std::string out;
  for (const ModelSpec &s : presets())
    out += (out.empty() ? "" : ", ") + s.preset;
  return out;
}

Expected<ModelSpec> withLayers(const ModelSpec &spec, uint32_t layers) {
  if (layers == 0 || layers > spec.nLayer)
    return Error{"--layers " + std::to_string(layers) + ": preset '" + spec.preset + "' has " +
                 std::to_string(spec.nLayer) + " layers" +
                 (spec.nNextN ? " (and an MTP block, always kept)" : "") + "; give 1.." +
                 std::to_string(spec.nLayer)};
  ModelSpec s = spec;
  s.nLayer = layers;
  s.nDenseLead = std::min(s.nDenseLead, layers);
  return s;
}

} // namespace tpc::synth
