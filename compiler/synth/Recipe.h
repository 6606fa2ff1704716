//===- Recipe.h - which ggml type each synthetic tensor gets ------*- C++ -*-===//
//
// `--type` names either one ggml type for every weight matrix (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4 and the grid types) or a mix: Q4_K_M, or MXFP4_MOE
// (llama.cpp's file type 38, what every gpt-oss GGUF is: the 3-D expert matrices MXFP4, the other matrices
// Q8_0). `--tensor-type` rules (`regex=TYPE,...`) then override the type of the matrices whose names they
// match, the first matching rule winning, and the row fallback below applies to the rule's type too
// (llama-quantize's --custom-q order). Vectors (norms, scales, rope_freqs, qwen35's ssm_a / ssm_dt.bias /
// ffn_gate_inp_shexp), the MoE router `ffn_gate_inp.weight` and the Gated DeltaNet conv kernel
// `ssm_conv1d.weight` always stay F32, as llama.cpp's quantizer leaves them.
//
// Q4_K_M follows the reference engine of the shared fixtures (ik_llama.cpp's llama_tensor_get_type), so
// that a synthetic model has the same type layout as a quantized real one (checked against the fixtures'
// Q4_K_M files in test/synth):
//   output.weight (token_embd.weight when the output is tied)   Q6_K (Q8_0 when ne0 % 256 != 0)
//   attn_v     Q8_0 with >= 4 experts; else Q6_K on "more bits" layers; else Q5_K when n_head/n_kv >= 4
//   attn_k     Q8_0 with >= 4 experts
//   attn_output Q5_K with >= 4 experts
//   ffn_down*  Q6_K on "more bits" layers (experts included)
//   the rest   Q4_K (qwen35: attn_qkv, attn_gate, ssm_alpha/beta, ssm_out, nextn.eh_proj too, as the
//              reference's tiny-qwen35moe-Q4_K_M has them)
// "More bits" layers: i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2 (attn_v counts attn_v tensors; ffn_down
// uses the layer index; n is block_count, MTP blocks included). K-quant rows must be whole 256-element
// blocks; other widths fall back as llama.cpp does (Q4_K -> Q5_0, Q6_K -> Q8_0, Q2_K/Q3_K/IQ4_XS -> IQ4_NL;
// Q5_K -> Q8_0 here, since ik's Q6_0 is not generated), and a width that is not a multiple of 32 falls back
// to F16.
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_SYNTH_RECIPE_H
#define TPC_COMPILER_SYNTH_RECIPE_H

#include "runtime/support/Expected.h"
#include "runtime/ggml/GGMLTypes.h"

#include <cstdint>
#include <regex>
#include <string>
#include <vector>

namespace tpc::synth {

/// The parsed --type.
struct WeightType {
  std::string name;              ///< as the user spells it canonically: "Q4_K_M", "F16"
  GGMLType base = GGMLType::F32; ///< the type of ordinary matrices
  bool mixQ4KM = false;          ///< the Q4_K_M recipe
  bool mxfp4Moe = false;         ///< MXFP4_MOE: expert matrices MXFP4, every other matrix `base` (Q8_0)
  uint32_t fileType = 0;         ///< general.file_type (llama_ftype)
};

/// Parses --type (case-insensitive); the error lists the accepted names.
Expected<WeightType> parseWeightType(const std::string &name);
/// "F32, F16, ..., Q4_K_M".
std::string weightTypeNames();

/// What the recipe needs to know about the model besides the tensor itself.
struct RecipeContext {
  uint32_t nLayer = 0;
  uint32_t nExpert = 0;
  uint32_t nHead = 0, nHeadKv = 0; ///< of layer 0 (ggml's n_gqa())
  bool hasOutput = true;           ///< output.weight exists (false: tied to token_embd)
  uint32_t nAttnV = 0;             ///< number of attn_v tensors
};

/// True for the tensors llama.cpp's quantizer quantizes: `.weight` tensors of 2 or more dimensions except
/// the MoE router ffn_gate_inp and ssm_conv1d. Every other tensor stays F32 whatever --type or
/// --tensor-type say.
bool isQuantizable(const std::string &name, const std::vector<uint64_t> &ne);

/// llama.cpp's change_type_if_necessary: a row of ne0 elements that is not whole blocks of `t` gets a type
/// whose blocks fit (Q4_K -> Q5_0; Q5_K, Q6_K -> Q8_0; Q2_K, Q3_K, IQ4_XS -> IQ4_NL; F16 when even 32-blocks
/// do not fit).
GGMLType fitRow(GGMLType t, uint64_t ne0);

/// One `--tensor-type` rule `regex=TYPE`: the weight matrices whose GGUF name the regex finds get TYPE.
struct TensorTypeRule {
  std::string text;    ///< the rule as given ("attn_.*=Q4_K"): errors quote it
  std::string pattern; ///< the regex (ECMAScript, searched anywhere in the name, as std::regex_search)
  GGMLType type = GGMLType::F32;
  std::regex re;
};

/// Parses `--tensor-type`: a comma list of `regex=TYPE` (split at the first '=' of each item, as
/// llama-quantize's --custom-q; TYPE one ggml type synth writes, case-insensitive, not a recipe). Errors
/// quote the rule: a missing '=', an empty regex, an invalid regex, an unknown or unwritable type.
Expected<std::vector<TensorTypeRule>> parseTensorTypeRules(const std::string &spec);

/// True for llama.cpp's "use more bits" layers.
bool useMoreBits(int i, int n);

/// The type of tensor `name` with shape `ne` (ggml order). `layer` is the block index (-1 outside
/// blocks); `attnVIndex` is this tensor's position among the attn_v tensors (ignored otherwise).
GGMLType tensorType(const WeightType &wt, const RecipeContext &ctx, const std::string &name,
                    const std::vector<uint64_t> &ne, int layer, int attnVIndex);

} // namespace tpc::synth

#endif // TPC_COMPILER_SYNTH_RECIPE_H
