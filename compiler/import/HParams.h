//===- HParams.h - model hyperparameters from GGUF metadata -------*- C++ -*-===//
//
// The hyperparameters the importers need, read from `<arch>.*` metadata with each architecture's defaults
// (ggml/llama.cpp conventions), and checked: a file whose structure the reader accepts can still hold
// values no model has (a NaN epsilon, a negative RoPE base, head counts that do not divide), and those
// must be errors naming the file, the key, its value and what was expected, never an op the importer
// cannot build. Per-layer values (head_count_kv as a scalar or an array, the sliding-window pattern) are
// expanded to one entry per layer so the importers never special-case the encoding. What the values
// must agree with in the tensors (head_dim * heads = the projection's rows, ...) is checked where each
// weight is loaded (ModelBuilder), with the keys that give the expected shape.
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_IMPORT_HPARAMS_H
#define TPC_COMPILER_IMPORT_HPARAMS_H

#include "compiler/gguf/GGUFFile.h"

#include <string>
#include <vector>

namespace mlir::tpc {

/// The GGUF reader lives in ::tpc (plain C++); the compiler in mlir::tpc.
namespace gguf = ::tpc::gguf;

/// Hyperparameters of one model; 0 means "not used by this architecture".
struct HParams {
  std::string arch;
  uint32_t nLayer = 0, nEmbd = 0, nVocab = 0, nCtxTrain = 0;
  uint32_t nHead = 0;
  std::vector<uint32_t> nHeadKv;   ///< per layer
  uint32_t headDimK = 0, headDimV = 0;       ///< global (full-attention) layers
  uint32_t headDimKSwa = 0, headDimVSwa = 0; ///< sliding-window layers (gemma4)
  uint32_t nFF = 0, nFFExp = 0, nExpert = 0, nExpertUsed = 0;
  float rmsEps = 1e-5f;
  float ropeBase = 10000.f, ropeBaseSwa = 10000.f;
  uint32_t nRot = 0, nRotSwa = 0;
  /// RoPE scaling (`rope.scaling.*`, llama.cpp's reading): freq_scale = 1 / factor; YaRN (type "yarn") mixes
  /// interpolated and extrapolated frequencies over the dims between its correction dims (tpc.rope) and
  /// scales cos/sin by attn_factor (1 + 0.1 ln factor).
  float ropeFreqScale = 1.f, ropeExtFactor = 0.f, ropeAttnFactor = 1.f, yarnBetaFast = 32.f, yarnBetaSlow = 1.f;
  uint32_t ropeOrigCtx = 0; ///< rope.scaling.original_context_length (YaRN)
  uint32_t slidingWindow = 0;
  std::vector<bool> swaLayers; ///< per layer: true = sliding-window attention
  float finalSoftcap = 0.f;
  /// Hybrid linear-attention models (qwen35, qwen35moe). block_count counts the nNextN MTP blocks at the
  /// end, which the forward pass does not run: nLayer is the trunk. A layer is recurrent (Gated DeltaNet)
  /// unless (il + 1) % fullAttnInterval == 0.
  uint32_t nNextN = 0;
  uint32_t ssmConvKernel = 0, ssmKeyHeads = 0, ssmValueHeads = 0, ssmHeadDimK = 0, ssmHeadDimV = 0;
  uint32_t fullAttnInterval = 0;
  uint32_t nFFShexp = 0; ///< the shared expert's width (qwen35moe)
  std::vector<bool> recurrentLayers; ///< per trunk layer
  /// glm4moe: the first nDenseLead layers have a dense FFN, the rest MoE with nExpertShared shared experts
  /// of nFFExp each; routing scores are sigmoid (or softmax) of the router logits, the top-k chosen on
  /// scores + exp_probs_b, the chosen unbiased scores normalised to sum 1 when expertWeightsNorm, times
  /// expertWeightsScale. block_count counts the nNextN MTP blocks, as for qwen35.
  uint32_t nDenseLead = 0, nExpertShared = 0;
  float expertWeightsScale = 1.f;
  bool expertWeightsNorm = false;
  bool expertSigmoid = false; ///< expert_gating_func 2 (sigmoid) rather than 1 (softmax)

  uint32_t headDimKOf(unsigned il) const { return swaLayers[il] && headDimKSwa ? headDimKSwa : headDimK; }
  uint32_t headDimVOf(unsigned il) const { return swaLayers[il] && headDimVSwa ? headDimVSwa : headDimV; }
};

/// What an architecture builds, so the keys it depends on are required and checked.
struct HParamNeeds {
  bool denseFFN = false;      ///< feed_forward_length > 0
  bool moe = false;           ///< expert_count, expert_used_count, expert_feed_forward_length
  bool slidingWindow = false; ///< attention.sliding_window > 0 (layers with a fixed sliding pattern)
};

/// Reads and checks every hyperparameter of `arch` (the common `<arch>.*` keys, the ones `needs` names,
/// and gemma4's sliding-window keys); the error names the file, the key, its value and what is expected.
::tpc::Expected<HParams> readHParams(const gguf::GGUFFile &file, const std::string &arch, HParamNeeds needs);

} // namespace mlir::tpc

#endif // TPC_COMPILER_IMPORT_HPARAMS_H
