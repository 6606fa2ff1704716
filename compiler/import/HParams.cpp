//===- HParams.cpp - model hyperparameters from GGUF metadata ---------------===//
//
// Every value is checked where it is read, against the range the ops built from it accept: counts and
// sizes are at least 1 and at most a bound far above any real model (which also keeps their products in
// int64), floats are finite and on the right side of 0, and dependent values agree (head counts divide,
// RoPE dims fit the head). The first problem is the error.
//===----------------------------------------------------------------------===//
#include "compiler/import/HParams.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace mlir::tpc {
namespace {

constexpr uint32_t kMaxLayers = 4096, kMaxHeads = 1 << 16, kMaxWidth = 1 << 24, kMaxExperts = 1 << 16;

/// Reads `<arch>.*` keys of one file; the first problem is kept in `error`, later reads are skipped.
class KeyReader {
public:
  KeyReader(const gguf::GGUFFile &f, const std::string &arch) : f(f), arch(arch) {}

  std::string key(const char *k) const { return arch + "." + k; }

  /// Records "<file>: <key> = <value>: expected <expected>" (the first problem only).
  void fail(const std::string &k, const std::string &value, const std::string &expected) {
    if (!error)
      error = fmt::format("{}: {} = {}: expected {}", f.path(), k, value, expected);
  }

  /// `<arch>.k` as an integer in [lo, hi] (`def` when absent, or an error naming the key when there is
  /// no default); `what` says what the value is, for the message.
  uint32_t u32(const char *k, std::optional<uint32_t> def, uint32_t lo, uint32_t hi, const char *what = "") {
    if (error)
      return 0;
    std::string name = key(k);
    ::tpc::Expected<uint32_t> v = def ? f.getU32Or(name, *def) : f.getU32(name);
    if (!v) {
      error = v.message();
      return 0;
    }
    if (*v < lo || *v > hi)
      fail(name, std::to_string(*v) + (f.find(name) ? "" : " (the default)"),
           fmt::format("{}an integer in [{}, {}]", what, lo, hi));
    return *v;
  }

  /// `<arch>.k` as a finite float (`def` when absent) > lo (>= lo when `orEqual`) and < hi.
  float f32(const char *k, float def, double lo, bool orEqual, double hi = INFINITY, const char *what = "") {
    if (error)
      return 0;
    std::string name = key(k);
    ::tpc::Expected<float> v = f.getF32Or(name, def);
    if (!v) {
      error = v.message();
      return 0;
    }
    if (!std::isfinite(*v) || (orEqual ? *v < lo : *v <= lo) || *v >= hi)
      fail(name, fmt::format("{}", *v),
           fmt::format("{}a finite number {} {}{}", what, orEqual ? ">=" : ">", lo,
                       std::isfinite(hi) ? fmt::format(" and < {}", hi) : ""));
    return *v;
  }

  const gguf::GGUFFile &f;
  const std::string &arch;
  std::optional<std::string> error;
};

/// head_count_kv: a scalar (all layers) or one entry per layer; absent means MHA. Each divides head_count.
void readHeadCountKv(KeyReader &r, HParams &hp) {
  std::string kvKey = r.key("attention.head_count_kv");
  if (const gguf::Value *v = r.f.find(kvKey); v && v->type() == gguf::ValueType::Array) {
    ::tpc::Expected<std::vector<uint32_t>> a = r.f.getU32Array(kvKey);
    if (!a) {
      r.error = a.message();
      return;
    }
    hp.nHeadKv = *a;
    if (hp.nHeadKv.size() != hp.nLayer)
      r.fail(kvKey, v->toString(8), fmt::format("one entry per layer ({})", hp.nLayer));
  } else {
    hp.nHeadKv.assign(hp.nLayer, r.u32("attention.head_count_kv", hp.nHead, 1, kMaxHeads));
  }
  for (unsigned il = 0; il < hp.nHeadKv.size() && !r.error; ++il)
    if (hp.nHeadKv[il] == 0 || hp.nHead % hp.nHeadKv[il] != 0)
      r.fail(kvKey + (hp.nHeadKv.size() > 1 && r.f.find(kvKey) && r.f.find(kvKey)->isArray()
                          ? fmt::format("[{}]", il)
                          : ""),
             std::to_string(hp.nHeadKv[il]),
             fmt::format("a divisor of {} = {} (every KV head serves a whole group of query heads)",
                         r.key("attention.head_count"), hp.nHead));
}

/// qwen35 / qwen35moe: the Gated DeltaNet keys (ssm.*), the full-attention interval, the MTP blocks that
/// block_count includes (the trunk is the rest), the shared expert's width.
void readQwen35(KeyReader &r, HParams &hp) {
  hp.nNextN = r.u32("nextn_predict_layers", 0, 0, hp.nLayer - 1, "MTP blocks, fewer than block_count: ");
  hp.ssmConvKernel = r.u32("ssm.conv_kernel", std::nullopt, 1, 64, "the conv kernel width, ");
  hp.ssmHeadDimK = r.u32("ssm.state_size", std::nullopt, 1, 4096, "the key head size, ");
  hp.ssmKeyHeads = r.u32("ssm.group_count", std::nullopt, 1, kMaxHeads, "the key heads, ");
  hp.ssmValueHeads = r.u32("ssm.time_step_rank", std::nullopt, 1, kMaxHeads, "the value heads, ");
  uint32_t inner = r.u32("ssm.inner_size", std::nullopt, 1, kMaxWidth, "value heads x value head size, ");
  hp.fullAttnInterval = r.u32("full_attention_interval", 4, 1, kMaxLayers, "the layer period of full attention, ");
  if (!r.error && hp.ssmValueHeads % hp.ssmKeyHeads)
    r.fail(r.key("ssm.time_step_rank"), std::to_string(hp.ssmValueHeads),
           fmt::format("a multiple of {} = {} (value heads are tiled over key heads)", r.key("ssm.group_count"),
                       hp.ssmKeyHeads));
  if (!r.error && inner % hp.ssmValueHeads)
    r.fail(r.key("ssm.inner_size"), std::to_string(inner),
           fmt::format("a multiple of {} = {}", r.key("ssm.time_step_rank"), hp.ssmValueHeads));
  if (hp.nExpert)
    hp.nFFShexp = r.u32("expert_shared_feed_forward_length", hp.nFFExp, 1, kMaxWidth, "the shared expert's width, ");
  if (r.error)
    return;
  hp.ssmHeadDimV = inner / hp.ssmValueHeads;
  hp.nLayer -= hp.nNextN;
  hp.nHeadKv.resize(hp.nLayer);
  hp.recurrentLayers.resize(hp.nLayer);
  for (uint32_t il = 0; il < hp.nLayer; ++il)
    hp.recurrentLayers[il] = (il + 1) % hp.fullAttnInterval != 0;
}

/// glm4moe: the leading dense layers, the shared experts, the routing (gating function, normalisation,
/// scale) and the MTP blocks that block_count includes (the trunk is the rest). Defaults as the reference
/// engine's loader: no dense layers, weights not normalised, sigmoid gating when the key is absent or 0.
void readGlm4Moe(KeyReader &r, HParams &hp) {
  hp.nNextN = r.u32("nextn_predict_layers", 0, 0, hp.nLayer - 1, "MTP blocks, fewer than block_count: ");
  if (r.error)
    return;
  hp.nLayer -= hp.nNextN;
  hp.nHeadKv.resize(hp.nLayer);
  hp.nDenseLead = r.u32("leading_dense_block_count", 0, 0, hp.nLayer, "dense layers, at most the trunk's: ");
  hp.nExpertShared = r.u32("expert_shared_count", std::nullopt, 0, 64, "shared experts, ");
  hp.expertWeightsScale =
      r.f32("expert_weights_scale", 1.f, 0, false, INFINITY, "the routed weights' scale, ");
  uint32_t gating =
      r.u32("expert_gating_func", 0, 0, 2, "0 (default: sigmoid), 1 (softmax) or 2 (sigmoid), ");
  hp.expertSigmoid = gating != 1;
  if (!r.error) {
    ::tpc::Expected<bool> norm = r.f.getBoolOr(r.key("expert_weights_norm"), false);
    if (!norm)
      r.error = norm.message();
    else
      hp.expertWeightsNorm = *norm;
  }
  if (!r.error && hp.nDenseLead > 0 && (hp.nFF == 0 || hp.nFF > kMaxWidth))
    r.fail(r.key("feed_forward_length"), std::to_string(hp.nFF) + (hp.nFF ? "" : " (or absent)"),
           fmt::format("the dense FFN's width, an integer in [1, {}] (the first {} = {} layers are dense)",
                       kMaxWidth, r.key("leading_dense_block_count"), hp.nDenseLead));
}

/// gemma4's sliding-window layers: their own head sizes, RoPE dims and base, and the per-layer pattern.
void readGemma4(KeyReader &r, HParams &hp) {
  hp.headDimKSwa = r.u32("attention.key_length_swa", hp.headDimK, 1, kMaxHeads);
  hp.headDimVSwa = r.u32("attention.value_length_swa", hp.headDimKSwa, 1, kMaxHeads);
  hp.nRotSwa = r.u32("rope.dimension_count_swa", hp.headDimKSwa, 2, std::max<uint32_t>(hp.headDimKSwa, 2),
                     "the rotated dims, even and at most the sliding layers' head size (key_length_swa), ");
  if (!r.error && hp.nRotSwa % 2)
    r.fail(r.key("rope.dimension_count_swa"), std::to_string(hp.nRotSwa), "an even number (RoPE rotates pairs)");
  hp.ropeBaseSwa = r.f32("rope.freq_base_swa", 10000.f, 0, false);
  if (r.error)
    return;
  std::string patternKey = r.key("attention.sliding_window_pattern");
  ::tpc::Expected<std::vector<bool>> pattern = r.f.getBoolArray(patternKey);
  if (!pattern) {
    r.error = pattern.message();
    return;
  }
  if (pattern->size() != hp.nLayer)
    r.fail(patternKey, r.f.find(patternKey)->toString(8), fmt::format("one entry per layer ({})", hp.nLayer));
  else
    hp.swaLayers.assign(pattern->begin(), pattern->end());
}

/// rope.scaling.*: none, linear (freq_scale = 1 / factor) or yarn (also original_context_length and the
/// reference's defaults: ext_factor 1, beta_fast 32, beta_slow 1); attn_factor multiplies cos/sin. Other
/// types (longrope, ...) are refused by name rather than run unscaled.
void readRopeScaling(KeyReader &r, HParams &hp) {
  std::string typeKey = r.key("rope.scaling.type");
  ::tpc::Expected<std::string> type = r.f.getStringOr(typeKey, "linear");
  if (!type) {
    r.error = type.message();
    return;
  }
  if (*type != "none" && *type != "linear" && *type != "yarn") {
    r.fail(typeKey, "\"" + *type + "\"", "\"none\", \"linear\" or \"yarn\" (the RoPE scalings tpc implements)");
    return;
  }
  float factor = r.f32("rope.scaling.factor", 0.f, 0, true, INFINITY, "0 (none) or ");
  hp.ropeAttnFactor = r.f32("rope.scaling.attn_factor", 1.f, 0, false);
  if (r.error || *type == "none")
    return;
  hp.ropeFreqScale = factor == 0.f ? 1.f : 1.f / factor;
  if (*type != "yarn")
    return;
  hp.ropeExtFactor = 1.f;
  hp.ropeOrigCtx = r.u32("rope.scaling.original_context_length", hp.nCtxTrain, 1, UINT32_MAX,
                         "YaRN's original context, ");
  if (!r.error && hp.ropeBase == 1.f)
    r.fail(r.key("rope.freq_base"), "1", "a base other than 1 (YaRN divides by its logarithm)");
}

} // namespace

::tpc::Expected<HParams> readHParams(const gguf::GGUFFile &file, const std::string &arch, HParamNeeds needs) {
  HParams hp;
  hp.arch = arch;
  KeyReader r(file, arch);
  hp.nLayer = r.u32("block_count", std::nullopt, 1, kMaxLayers);
  hp.nEmbd = r.u32("embedding_length", std::nullopt, 1, kMaxWidth);
  hp.nHead = r.u32("attention.head_count", std::nullopt, 1, kMaxHeads);
  hp.nCtxTrain = r.u32("context_length", 4096, 1, UINT32_MAX);
  // Keys an architecture does not use are read as they are (a stray expert_count in a dense model is
  // harmless); the ones it builds from must be in range.
  hp.nFF = needs.denseFFN ? r.u32("feed_forward_length", 0, 1, kMaxWidth, "the dense FFN's width, ")
                          : r.u32("feed_forward_length", 0, 0, UINT32_MAX);
  hp.rmsEps = r.f32("attention.layer_norm_rms_epsilon", 1e-5f, 0, false, 1);
  hp.ropeBase = r.f32("rope.freq_base", 10000.f, 0, false);
  hp.finalSoftcap = r.f32("final_logit_softcapping", 0.f, 0, true, INFINITY, "0 (none) or ");
  if (needs.moe) {
    hp.nExpert = r.u32("expert_count", 0, 1, kMaxExperts, "the number of experts, ");
    hp.nExpertUsed = r.u32("expert_used_count", 0, 1, std::max<uint32_t>(hp.nExpert, 1),
                           "the experts each token uses, at most expert_count: ");
    hp.nFFExp = r.u32("expert_feed_forward_length", 0, 1, kMaxWidth, "the experts' FFN width, ");
  }
  hp.slidingWindow = needs.slidingWindow
                         ? r.u32("attention.sliding_window", 0, 1, UINT32_MAX, "the sliding layers' window, ")
                         : r.u32("attention.sliding_window", 0, 0, UINT32_MAX);
  if (!r.error)
    readHeadCountKv(r, hp);
  if (r.error)
    return ::tpc::Error{*r.error};

  // Head sizes default to embedding_length / head_count (0 when the embedding is narrower: an error).
  uint32_t defHead = hp.nEmbd / hp.nHead;
  hp.headDimK = r.u32("attention.key_length", defHead, 1, kMaxHeads);
  hp.headDimV = r.u32("attention.value_length", hp.headDimK, 1, kMaxHeads);
  hp.nRot = r.u32("rope.dimension_count", hp.headDimK, 2, std::max<uint32_t>(hp.headDimK, 2),
                  "the rotated dims, even and at most the head size (attention.key_length), ");
  if (!r.error && hp.nRot % 2)
    r.fail(r.key("rope.dimension_count"), std::to_string(hp.nRot), "an even number (RoPE rotates pairs)");
  if (!r.error)
    readRopeScaling(r, hp);
  if (arch == "qwen35" || arch == "qwen35moe")
    readQwen35(r, hp);
  if (arch == "glm4moe")
    readGlm4Moe(r, hp);
  hp.swaLayers.assign(hp.nLayer, false);
  if (arch == "gemma4")
    readGemma4(r, hp);
  if (!r.error && arch == "gemma4" && hp.slidingWindow == 0 &&
      std::find(hp.swaLayers.begin(), hp.swaLayers.end(), true) != hp.swaLayers.end())
    r.fail(r.key("attention.sliding_window"), "0", "a window of at least 1 token for the sliding-window layers");
  if (r.error)
    return ::tpc::Error{*r.error};
  return hp;
}

} // namespace mlir::tpc
