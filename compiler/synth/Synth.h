//===- Synth.h - full-size GGUF models with random weights --------*- C++ -*-===//
//
// `tpc synth` in library form: from a preset (Presets.h), a weight type and optional per-tensor type rules
// (Recipe.h) and a seed, a GGUF v3
// file with the metadata, tensor names and shapes the importers read for that architecture (the same keys
// and layout as the shared fixtures), a tokenizer (Vocab.h) and random weights (Fill.h).
//
// Values: matrices N(0, 1/fan_in) (fan_in = ne0); norms 1 + N(0, 0.1); embeddings std 1, or 1/sqrt(n_embd)
// when the output is tied (so logits stay O(1)); the gemma4 extras as in the fixtures (router std 1, q/k
// norms times head_dim^-0.25, per-expert scales U(0.5, 1.5), layer output scales U(0.5, 1)); the qwen35
// Gated DeltaNet vectors in the fixtures' ranges (ssm_a negative, Synth.cpp). Activations therefore keep an
// rms of about 1 through every matmul of every layer.
//
// Determinism: each tensor is filled in chunks of whole rows (about 1 MiB each, fixed by the row size), and
// chunk k of tensor "name" draws from a generator seeded with (seed, hash(name), k). The bytes therefore
// depend only on the seed, the preset and the type, never on the thread count; a layer's tensors are the
// same whatever --layers is.
//
// Speed: the writer maps the file and fills tensors on `threads` workers; quant blocks are generated
// directly (no float round trip).
//
// Usage:
//   tpc::synth::SynthOptions o;  o.preset = "llama3-8b";  o.type = "Q4_K_M";  o.seed = 1;
//   auto s = tpc::synth::Synthesizer::create(o);           // errors name the flag
//   if (!s) fail(s.message());
//   auto ok = s->write("model.gguf", /*threads=*/0);
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_SYNTH_SYNTH_H
#define TPC_COMPILER_SYNTH_SYNTH_H

#include "compiler/gguf/GGUFWriter.h"
#include "compiler/synth/Fill.h"
#include "compiler/synth/Presets.h"
#include "compiler/synth/Recipe.h"

namespace tpc::synth {

/// What to synthesize (the flags of `tpc synth`).
struct SynthOptions {
  std::string preset;
  std::string arch; ///< optional: must match the preset's architecture when given
  std::string type = "Q4_K_M";
  uint64_t seed = 0;
  uint32_t layers = 0; ///< 0: the preset's layer count
  /// `--tensor-type`: "regex=TYPE,..." over the weight matrices, on top of `type` (Recipe.h).
  std::string tensorTypes;
  /// Tensor data left zero and unwritten (a sparse file): real shapes at no cost, for compile tests that
  /// never read values (`tpc synth --zeros`).
  bool zeros = false;
};

/// One tensor of the model: its data type, shape and value distribution.
struct TensorPlan {
  std::string name;
  GGMLType type = GGMLType::F32;
  std::vector<uint64_t> ne;
  Init init;
};

/// A planned model: metadata and tensor infos are laid out at creation; write() fills the data.
class Synthesizer {
public:
  /// Plans the model; errors name the flag (--preset, --arch, --type, --layers, --tensor-type and its rule:
  /// also a rule that types no tensor, because it matches none or only tensors an earlier rule took).
  static Expected<Synthesizer> create(const SynthOptions &opts);

  const ModelSpec &spec() const { return spec_; }
  const WeightType &weightType() const { return wtype_; }
  const std::vector<TensorPlan> &tensors() const { return tensors_; }
  /// Total parameters (elements of all tensors) and the size of the file.
  uint64_t parameterCount() const;
  uint64_t fileSize() const;

  /// Writes the file with `threads` fill workers (0 = all cores).
  Expected<void> write(const std::string &path, unsigned threads) const;
  /// Writes into memory (tests).
  Expected<std::vector<uint8_t>> writeToBuffer(unsigned threads) const;

private:
  Synthesizer() = default;
  void fill(size_t index, uint8_t *dst, size_t nbytes) const;

  ModelSpec spec_;
  WeightType wtype_;
  uint64_t seed_ = 0;
  bool zeros_ = false;
  std::vector<TensorPlan> tensors_;
  std::vector<uint64_t> nameHash_;
  gguf::GGUFWriter writer_;
};

} // namespace tpc::synth

#endif // TPC_COMPILER_SYNTH_SYNTH_H
