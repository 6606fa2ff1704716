//===- Presets.h - model shapes `tpc synth` can write -------------*- C++ -*-===//
//
// A ModelSpec is everything that decides a synthetic model's metadata and tensor shapes: architecture,
// widths, heads, experts, vocabulary, RoPE and attention layout. The presets copy the published configs
// of real models (config.json of Llama-3-8B, Qwen3-8B, Qwen3-30B-A3B, Gemma-4 26B-A4B, Qwen3.5-35B-A3B,
// Qwen3.5-27B, GLM-4.5-Air, gpt-oss-20b, gpt-oss-120b), plus one small model per architecture for tests and
// two benchmark shapes. `withLayers` shortens a preset: every layer keeps its shape (and, for gemma4, its
// sliding/global kind, for qwen35 its Gated DeltaNet/attention kind, for glm4moe its dense/MoE kind, which
// depend only on the layer index). The qwen35 / glm4moe MTP block is not a trunk layer: it stays, after the
// kept layers (block_count = layers + 1), as in a real file, whose loader takes the trunk depth as
// block_count - nextn_predict_layers.
//
// Usage:
//   const tpc::synth::ModelSpec *s = tpc::synth::findPreset("qwen3-30b-a3b");   // nullptr if unknown
//   Expected<tpc::synth::ModelSpec> short4 = tpc::synth::withLayers(*s, 4);
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_SYNTH_PRESETS_H
#define TPC_COMPILER_SYNTH_PRESETS_H

#include "runtime/support/Expected.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tpc::synth {

/// Which tokenizer the model carries (Vocab.h builds it).
enum class VocabKind {
  Spm512, ///< SentencePiece, 512 tokens, laid out like the shared tiny fixtures' vocabulary
  Llama3, ///< byte-level BPE, 128256 tokens, pre-tokenizer llama-bpe, Llama 3 special tokens
  Qwen2,  ///< byte-level BPE, 151936 tokens, pre-tokenizer qwen2, Qwen special tokens
  Qwen35, ///< byte-level BPE, 248320 tokens, pre-tokenizer qwen35, Qwen special tokens from id 248044
  Gemma,  ///< SentencePiece, 262144 tokens, Gemma special tokens, no space prefix
  Glm4,   ///< byte-level BPE, 151552 tokens, pre-tokenizer glm4, GLM special tokens from id 151329
  Gpt4o,  ///< byte-level BPE, 201088 tokens (o200k_harmony), pre-tokenizer gpt-4o, gpt-oss special tokens
};

/// Shapes and hyperparameters of one synthetic model.
struct ModelSpec {
  std::string preset;      ///< preset name (also general.name)
  std::string arch;        ///< general.architecture: llama, qwen3(moe), gemma3, gemma4, qwen35(moe), glm4moe, gpt-oss
  std::string description; ///< one line for `tpc synth --list`
  uint32_t nLayer = 0;     ///< trunk layers (qwen35: the MTP blocks come on top, see nNextN)
  uint32_t nEmbd = 0, nHead = 0;
  uint32_t nHeadKv = 0; ///< KV heads (gemma4: of the sliding-window layers)
  uint32_t headDim = 0; ///< head size (gemma4: of the sliding-window layers)
  /// gemma4 global (full-attention) layers: KV heads and head size; they have no attn_v (V = K).
  uint32_t nHeadKvGlobal = 0, headDimGlobal = 0;
  uint32_t nFF = 0; ///< dense FFN width (qwen3moe: written to the metadata but unused, as in the real file)
  uint32_t nExpert = 0, nExpertUsed = 0, nFFExp = 0;
  uint32_t nFFShexp = 0; ///< qwen35moe: shared expert width
  uint32_t nVocab = 0, nCtx = 0;
  float ropeBase = 10000.f;
  float ropeBaseSwa = 10000.f; ///< gemma4 sliding-window layers
  float rmsEps = 1e-5f;
  uint32_t slidingWindow = 0;
  uint32_t swaPeriod = 0;  ///< gemma4: layer il is global iff (il + 1) % swaPeriod == 0
  float ropePartial = 1.f; ///< gemma4 global layers: fraction of rotated pairs (rope_freqs.weight)
  bool tiedOutput = false; ///< no output.weight: logits use token_embd
  float finalSoftcap = 0.f;
  VocabKind vocab = VocabKind::Spm512;

  /// qwen35 / qwen35moe (hybrid): trunk layer il is gated full attention iff (il + 1) % fullAttnInterval
  /// == 0, else Gated DeltaNet; the nNextN MTP blocks after the trunk are full attention.
  uint32_t fullAttnInterval = 0;
  uint32_t nNextN = 0;
  uint32_t ropeDims = 0;                 ///< rope.dimension_count (qwen35: 64 of a 256-wide head)
  std::vector<int32_t> ropeSections;     ///< rope.dimension_sections (IMRoPE)
  uint32_t ssmConv = 0;                  ///< ssm.conv_kernel
  uint32_t ssmState = 0;                 ///< ssm.state_size: key and value head size
  uint32_t ssmGroups = 0, ssmVHeads = 0; ///< ssm.group_count (key heads), ssm.time_step_rank (value heads)

  /// glm4moe: the first nDenseLead layers are dense (nFF wide), the rest MoE with nExpertShared shared
  /// experts; sigmoid routing with a selection bias, normalised weights times expertWeightsScale; q/k/v
  /// biases; RoPE on ropeDims of each head; nNextN MTP blocks after the trunk.
  uint32_t nDenseLead = 0, nExpertShared = 0;
  float expertWeightsScale = 1.f;
  bool qkNorm = false; ///< glm4moe: per-head RMS norms of q and k (GLM-4.5 355B, 4.6, 4.7; not Air)
  /// gpt-oss: YaRN (rope.scaling.factor, original_context_length); sliding layers are the even ones.
  float ropeScaling = 0.f;
  uint32_t ropeOrigCtx = 0;

  /// gemma4: true when layer il uses sliding-window attention.
  bool isSlidingLayer(uint32_t il) const { return swaPeriod != 0 && (il + 1) % swaPeriod != 0; }
  /// KV heads and head size of layer il.
  uint32_t kvHeadsOf(uint32_t il) const { return swaPeriod && !isSlidingLayer(il) ? nHeadKvGlobal : nHeadKv; }
  uint32_t headDimOf(uint32_t il) const { return swaPeriod && !isSlidingLayer(il) ? headDimGlobal : headDim; }
  /// qwen35: true when block il is a Gated DeltaNet layer (never an MTP block).
  bool isRecurrentLayer(uint32_t il) const {
    return fullAttnInterval != 0 && il < nLayer && (il + 1) % fullAttnInterval != 0;
  }
  /// <arch>.block_count: the trunk and the MTP blocks.
  uint32_t blockCount() const { return nLayer + nNextN; }
  /// ssm.inner_size: value heads x value head size.
  uint32_t ssmInner() const { return ssmVHeads * ssmState; }
};

/// All presets, in the order `--list` shows them.
const std::vector<ModelSpec> &presets();
/// The preset named `name`, or nullptr.
const ModelSpec *findPreset(const std::string &name);
/// "llama3-8b, qwen3-8b, ..." for error messages.
std::string presetNames();
/// `spec` with `layers` trunk layers (1..spec.nLayer; MTP blocks kept); an error names the flag and the
/// valid range.
Expected<ModelSpec> withLayers(const ModelSpec &spec, uint32_t layers);

} // namespace tpc::synth

#endif // TPC_COMPILER_SYNTH_PRESETS_H
