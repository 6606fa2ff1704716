//===- GGUFTokenizer.cpp - tokenizer data from GGUF metadata ---------------===//
//
// Key names and defaults follow llama.cpp's vocabulary loader: model and pre-tokenizer first (they pick
// the defaults), then the arrays, then special ids and the add_* flags, which override the defaults.
//===----------------------------------------------------------------------===//
#include "compiler/tokenizer/GGUFTokenizer.h"

#include <cctype>
#include <limits>

namespace tpc {

Expected<rt::TokenizerData> tokenizerFromGGUF(const gguf::GGUFFile &file) {
  const std::string &path = file.path();
  auto fail = [&](const std::string &msg) { return Error{path + ": " + msg}; };
  rt::TokenizerData d;

  auto model = file.getString("tokenizer.ggml.model");
  if (!model)
    return Error{model.message() + " (the file has no tokenizer; tpc needs tokenizer.ggml.*)"};
  d.model = *model;
  auto pre = file.getStringOr("tokenizer.ggml.pre", "default");
  if (!pre)
    return Error{pre.message()};
  d.pre = *pre;
  rt::applyModelDefaults(d);

  auto tokens = file.getStringArray("tokenizer.ggml.tokens");
  if (!tokens)
    return Error{tokens.message()};
  d.tokens = tokens.take();
  if (d.tokens.empty())
    return fail("tokenizer.ggml.tokens is empty");
  const size_t n = d.tokens.size();
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return fail("tokenizer.ggml.tokens has too many entries (" + std::to_string(n) + ")");

  if (file.find("tokenizer.ggml.scores")) {
    auto scores = file.getF32Array("tokenizer.ggml.scores");
    if (!scores)
      return Error{scores.message()};
    d.scores = scores.take();
    if (d.scores.size() != n)
      return fail("tokenizer.ggml.scores has " + std::to_string(d.scores.size()) + " entries but " +
                  "tokenizer.ggml.tokens has " + std::to_string(n));
  }
  if (file.find("tokenizer.ggml.token_type")) {
    auto types = file.getI64Array("tokenizer.ggml.token_type");
    if (!types)
      return Error{types.message()};
    if (types->size() != n)
      return fail("tokenizer.ggml.token_type has " + std::to_string(types->size()) + " entries but " +
                  "tokenizer.ggml.tokens has " + std::to_string(n));
    d.tokenTypes.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      int64_t t = (*types)[i];
      if (t < 0 || t > 6)
        return fail("tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string(t) +
                    " is not a token type (0..6)");
      d.tokenTypes.push_back(static_cast<int32_t>(t));
    }
  }
  if (file.find("tokenizer.ggml.merges")) {
    auto merges = file.getStringArray("tokenizer.ggml.merges");
    if (!merges)
      return Error{merges.message()};
    d.merges = merges.take();
  }

  struct IdKey {
    const char *key;
    rt::TokenId *dst;
  };
  const IdKey ids[] = {
      {"tokenizer.ggml.bos_token_id", &d.bos},      {"tokenizer.ggml.eos_token_id", &d.eos},
      {"tokenizer.ggml.unknown_token_id", &d.unk},  {"tokenizer.ggml.padding_token_id", &d.pad},
      {"tokenizer.ggml.eot_token_id", &d.eot},      {"tokenizer.ggml.eom_token_id", &d.eom},
      {"tokenizer.ggml.seperator_token_id", &d.sep}};
  for (const IdKey &k : ids) {
    if (!file.find(k.key))
      continue;
    auto v = file.getI64(k.key);
    if (!v)
      return Error{v.message()};
    // Some converters write -1 (or UINT32_MAX) for "none".
    if (*v == -1 || *v == static_cast<int64_t>(std::numeric_limits<uint32_t>::max())) {
      *k.dst = -1;
      continue;
    }
    if (*v < 0 || static_cast<uint64_t>(*v) >= n)
      return fail(std::string(k.key) + " = " + std::to_string(*v) + " is out of range for " +
                  std::to_string(n) + " tokens");
    *k.dst = static_cast<rt::TokenId>(*v);
  }
  // llama.cpp's SPM default: <unk> is id 0 when the file does not say otherwise.
  if (d.model == "llama" && d.unk < 0 && !file.find("tokenizer.ggml.unknown_token_id"))
    d.unk = 0;

  struct FlagKey {
    const char *key;
    bool *dst;
  };
  const FlagKey flags[] = {{"tokenizer.ggml.add_bos_token", &d.addBos},
                           {"tokenizer.ggml.add_eos_token", &d.addEos},
                           {"tokenizer.ggml.add_space_prefix", &d.addSpacePrefix}};
  for (const FlagKey &k : flags) {
    auto v = file.getBoolOr(k.key, *k.dst);
    if (!v)
      return Error{v.message()};
    *k.dst = *v;
  }

  rt::addEndOfGenerationTokens(d);

  // llama.cpp's per-model token attributes: Phi-3's special tokens (control, user-defined, unknown) and
  // </s> swallow the whitespace after them, except <unk>, <s> and <|endoftext|>.
  auto name = file.getStringOr("general.name", "");
  if (!name)
    return Error{name.message()};
  std::string lower = *name;
  for (char &c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("phi-3") != std::string::npos || lower.find("phi3") != std::string::npos) {
    for (size_t i = 0; i < n; ++i) {
      int32_t t = d.tokenTypes.empty() ? 1 : d.tokenTypes[i];
      const std::string &text = d.tokens[i];
      bool special = t == 2 || t == 3 || t == 4 || text == "</s>";
      if (special && text != "<unk>" && text != "<s>" && text != "<|endoftext|>")
        d.rstripTokens.push_back(static_cast<rt::TokenId>(i));
    }
  }

  try {
    rt::Tokenizer::validate(d);
  } catch (const rt::TokenizerError &e) {
    return fail(e.what());
  }
  return d;
}

} // namespace tpc
