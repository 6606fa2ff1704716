//===- Vocab.h - synthetic tokenizer vocabularies -----------------*- C++ -*-===//
//
// A real-size vocabulary for a synthetic model, valid for tpc's tokenizer (and llama.cpp's): byte-level BPE
// ("gpt2" with llama-bpe, qwen2 or qwen35 pre-tokenization) or SentencePiece ("llama"). Token texts are
// made up, but built the way real vocabularies grow: every multi-character token is the concatenation of
// two earlier tokens (a BPE merge, or for SPM a pair the bigram merge can reach), starting from common
// English words and then random letter sequences, so English text tokenizes into multi-character pieces.
// Special tokens sit where the real models have them (Llama 3: 128000.., Qwen: 151643.., Qwen3.5: 248044..;
// Gemma: ids 0-3 and the turn markers). The vocabulary depends only on its kind, not on the weight seed.
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_SYNTH_VOCAB_H
#define TPC_COMPILER_SYNTH_VOCAB_H

#include "compiler/gguf/GGUFWriter.h"
#include "compiler/synth/Presets.h"

namespace tpc::synth {

/// The tokenizer.ggml.* values of one vocabulary.
struct Vocab {
  std::string model; ///< "llama" or "gpt2"
  std::string pre;   ///< tokenizer.ggml.pre ("" = absent)
  std::vector<std::string> tokens;
  std::vector<float> scores;       ///< SPM only
  std::vector<int32_t> types;      ///< llama_token_type per token
  std::vector<std::string> merges; ///< BPE only
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool addBos = false, addEos = false;
  int addSpacePrefix = -1; ///< -1: key absent, else 0/1
};

/// Builds the vocabulary of `kind` with `nVocab` tokens (the model's embedding rows).
Vocab buildVocab(VocabKind kind, uint32_t nVocab);

/// Writes `v` as tokenizer.ggml.* metadata.
void writeVocab(gguf::GGUFWriter &w, const Vocab &v);

} // namespace tpc::synth

#endif // TPC_COMPILER_SYNTH_VOCAB_H
