//===- Recipe.cpp - which ggml type each synthetic tensor gets ---------------===//
#include "compiler/synth/Recipe.h"

#include <cctype>

namespace tpc::synth {
namespace {

struct TypeName {
  const char *name;
  GGMLType base;
  bool mix;
  uint32_t fileType; // llama_ftype: ALL_F32 0, F16 1, Q4_0 2, Q8_0 7, Q5_0 8, Q4_K_S 14, Q4_K_M 15, Q5_K_S
                     // 16, Q6_K 18, BF16 32 (a pure K type is recorded as its _S variant)
};
constexpr TypeName kTypes[] = {
    {"F32", GGMLType::F32, false, 0},    {"F16", GGMLType::F16, false, 1},
    {"BF16", GGMLType::BF16, false, 32}, {"Q8_0", GGMLType::Q8_0, false, 7},
    {"Q4_0", GGMLType::Q4_0, false, 2},  {"Q5_0", GGMLType::Q5_0, false, 8},
    {"Q4_K", GGMLType::Q4_K, false, 14}, {"Q5_K", GGMLType::Q5_K, false, 16},
    {"Q6_K", GGMLType::Q6_K, false, 18}, {"Q4_K_M", GGMLType::Q4_K, true, 15},
    {"IQ4_NL", GGMLType::IQ4_NL, false, 25}, {"IQ4_XS", GGMLType::IQ4_XS, false, 30},
    {"MXFP4_MOE", GGMLType::Q8_0, false, 38}, // experts MXFP4 (tensorType)
};

bool contains(const std::string &s, const char *what) { return s.find(what) != std::string::npos; }

bool isKQuant(GGMLType t) { return t == GGMLType::Q4_K || t == GGMLType::Q5_K || t == GGMLType::Q6_K; }

/// llama.cpp's change_type_if_necessary: rows that are not whole blocks get a type whose blocks fit.
GGMLType fitRow(GGMLType t, uint64_t ne0) {
  if (isKQuant(t) && ne0 % 256 != 0)
    t = t == GGMLType::Q4_K ? GGMLType::Q5_0 : GGMLType::Q8_0;
  if (t == GGMLType::IQ4_XS && ne0 % 256 != 0)
    t = GGMLType::IQ4_NL;
  if (ne0 % ggmlTypeInfo(t).blockElems != 0)
    t = GGMLType::F16;
  return t;
}

} // namespace

Expected<WeightType> parseWeightType(const std::string &name) {
  std::string upper;
  for (char c : name)
    upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const TypeName &t : kTypes)
    if (upper == t.name)
      return WeightType{t.name, t.base, t.mix, std::string(t.name) == "MXFP4_MOE", t.fileType};
  return Error{"--type '" + name + "' is not a weight type tpc synth writes; use one of " +
                     weightTypeNames()};
}

std::string weightTypeNames() {
  std::string out;
  for (const TypeName &t : kTypes)
    out += (out.empty() ? "" : ", ") + std::string(t.name);
  return out;
}

bool useMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

GGMLType tensorType(const WeightType &wt, const RecipeContext &ctx, const std::string &name,
                    const std::vector<uint64_t> &ne, int layer, int attnVIndex) {
  // Vectors, the router and the Gated DeltaNet conv kernel (rows of 4 taps) stay F32: llama.cpp never
  // quantizes 1-D tensors, ffn_gate_inp or ssm_conv1d, and the converter writes ssm_conv1d as F32 (the
  // other 1-D GDN tensors, ssm_a and ssm_dt.bias, are vectors).
  bool matrix = ne.size() >= 2 && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
  if (!matrix || contains(name, "ffn_gate_inp.weight") || contains(name, "ssm_conv1d"))
    return GGMLType::F32;
  if (wt.mxfp4Moe && ne.size() == 3)
    return fitRow(GGMLType::MXFP4, ne[0]);
  if (!wt.mixQ4KM)
    return fitRow(wt.base, ne[0]);

  GGMLType t = GGMLType::Q4_K;
  bool moe = ctx.nExpert >= 4;
  if (name == "output.weight" || (!ctx.hasOutput && name == "token_embd.weight")) {
    t = ne[0] % 256 != 0 ? GGMLType::Q8_0 : GGMLType::Q6_K;
  } else if (name == "token_embd.weight") {
    t = GGMLType::Q4_K;
  } else if (contains(name, "attn_v.weight")) {
    if (moe)
      t = GGMLType::Q8_0;
    else if (useMoreBits(attnVIndex, static_cast<int>(ctx.nAttnV)))
      t = GGMLType::Q6_K;
    else if (ctx.nHeadKv != 0 && ctx.nHead / ctx.nHeadKv >= 4)
      t = GGMLType::Q5_K;
  } else if (contains(name, "attn_k")) {
    if (moe)
      t = GGMLType::Q8_0;
  } else if (contains(name, "ffn_down")) {
    if (layer >= 0 && useMoreBits(layer, static_cast<int>(ctx.nLayer)))
      t = GGMLType::Q6_K;
  } else if (contains(name, "attn_output.weight")) {
    if (moe)
      t = GGMLType::Q5_K;
  }
  return fitRow(t, ne[0]);
}

} // namespace tpc::synth
