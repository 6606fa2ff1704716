//===- Recipe.cpp - which ggml type each synthetic tensor gets ---------------===//
#include "compiler/synth/Recipe.h"

#include "runtime/ggml/BlocksIQ.h"
#include "compiler/synth/Fill.h"

#include <cctype>

namespace tpc::synth {
namespace {

struct TypeName {
  const char *name;
  GGMLType base;
  bool mix;
  uint32_t fileType; // llama_ftype: ALL_F32 0, F16 1, Q4_0 2, Q4_1 3, Q8_0 7, Q5_0 8, Q5_1 9, Q2_K 10,
                     // Q3_K_S 11, Q4_K_S 14, Q4_K_M 15, Q5_K_S 16, Q6_K 18, IQ4_NL 25, IQ4_XS 30, BF16 32,
                     // MXFP4 38 (a pure K type is recorded as its _S variant)
};
constexpr TypeName kTypes[] = {
    {"F32", GGMLType::F32, false, 0},    {"F16", GGMLType::F16, false, 1},
    {"BF16", GGMLType::BF16, false, 32}, {"Q8_0", GGMLType::Q8_0, false, 7},
    {"Q4_0", GGMLType::Q4_0, false, 2},  {"Q5_0", GGMLType::Q5_0, false, 8},
    {"Q4_K", GGMLType::Q4_K, false, 14}, {"Q5_K", GGMLType::Q5_K, false, 16},
    {"Q6_K", GGMLType::Q6_K, false, 18}, {"Q4_K_M", GGMLType::Q4_K, true, 15},
    {"IQ4_NL", GGMLType::IQ4_NL, false, 25}, {"IQ4_XS", GGMLType::IQ4_XS, false, 30},
    {"IQ2_XXS", GGMLType::IQ2_XXS, false, 19}, {"IQ2_XS", GGMLType::IQ2_XS, false, 20},
    {"IQ2_S", GGMLType::IQ2_S, false, 28},   {"IQ3_XXS", GGMLType::IQ3_XXS, false, 23},
    {"IQ3_S", GGMLType::IQ3_S, false, 26},   {"IQ1_S", GGMLType::IQ1_S, false, 24},
    {"IQ1_M", GGMLType::IQ1_M, false, 31},
    {"Q4_1", GGMLType::Q4_1, false, 3},      {"Q5_1", GGMLType::Q5_1, false, 9},
    {"Q2_K", GGMLType::Q2_K, false, 10},     {"Q3_K", GGMLType::Q3_K, false, 11},
    {"MXFP4", GGMLType::MXFP4, false, 38},
    {"MXFP4_MOE", GGMLType::Q8_0, false, 38}, // experts MXFP4 (tensorType)
};

bool contains(const std::string &s, const char *what) { return s.find(what) != std::string::npos; }

} // namespace

GGMLType fitRow(GGMLType t, uint64_t ne0) {
  if (ne0 % 256 != 0) { // the K-quant and IQ4_XS super-block
    switch (t) {
    case GGMLType::Q4_K:
      t = GGMLType::Q5_0;
      break;
    case GGMLType::Q5_K:
    case GGMLType::Q6_K:
      t = GGMLType::Q8_0;
      break;
    case GGMLType::Q2_K:
    case GGMLType::Q3_K:
    case GGMLType::IQ4_XS:
      t = GGMLType::IQ4_NL;
      break;
    default:
      if (isGridType(t)) // as llama-quantize: the grid types fall back to IQ4_NL too
        t = GGMLType::IQ4_NL;
      break;
    }
  }
  if (ne0 % ggmlTypeInfo(t).blockElems != 0)
    t = GGMLType::F16;
  return t;
}

bool isQuantizable(const std::string &name, const std::vector<uint64_t> &ne) {
  // Vectors, the router and the Gated DeltaNet conv kernel (rows of 4 taps) stay F32: llama.cpp never
  // quantizes 1-D tensors, ffn_gate_inp or ssm_conv1d, and the converter writes ssm_conv1d as F32 (the
  // other 1-D GDN tensors, ssm_a and ssm_dt.bias, are vectors).
  bool matrix = ne.size() >= 2 && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
  return matrix && !contains(name, "ffn_gate_inp.weight") && !contains(name, "ssm_conv1d");
}

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

Expected<std::vector<TensorTypeRule>> parseTensorTypeRules(const std::string &spec) {
  std::vector<TensorTypeRule> rules;
  if (spec.empty())
    return rules;
  size_t start = 0;
  while (true) {
    size_t comma = spec.find(',', start);
    std::string item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    auto fail = [&](const std::string &why) { return Error{"--tensor-type rule '" + item + "': " + why}; };
    size_t eq = item.find('=');
    if (item.empty())
      return Error{"--tensor-type '" + spec + "' has an empty rule; give a comma list of regex=TYPE"};
    if (eq == std::string::npos)
      return fail("no '='; a rule is regex=TYPE (e.g. ffn_down_exps=Q3_K)");
    TensorTypeRule r;
    r.text = item;
    r.pattern = item.substr(0, eq);
    std::string typeName = item.substr(eq + 1);
    if (r.pattern.empty())
      return fail("empty regex");
    std::optional<GGMLType> t = ggmlTypeFromName(typeName);
    if (!t || !canFill(*t)) {
      Expected<WeightType> recipe = parseWeightType(typeName);
      if (recipe && recipe->mixQ4KM)
        return fail("'" + typeName + "' is a recipe; a rule gives one ggml type");
      std::string names;
      for (const TypeName &tn : kTypes)
        if (!tn.mix)
          names += (names.empty() ? "" : ", ") + std::string(tn.name);
      return fail("'" + typeName + "' is not a ggml type tpc synth writes; use one of " + names);
    }
    r.type = *t;
    try {
      r.re = std::regex(r.pattern, std::regex::ECMAScript);
    } catch (const std::regex_error &e) {
      return fail("invalid regex '" + r.pattern + "': " + e.what());
    }
    rules.push_back(std::move(r));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return rules;
}

bool useMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

GGMLType tensorType(const WeightType &wt, const RecipeContext &ctx, const std::string &name,
                    const std::vector<uint64_t> &ne, int layer, int attnVIndex) {
  if (!isQuantizable(name, ne))
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
