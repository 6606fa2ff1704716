//===- Vocab.cpp - synthetic tokenizer vocabularies -------------------------===//
//
// A Grower keeps the set of token texts and adds tokens only as concatenations of two existing ones, so
// the BPE merge list is consistent (every merge's parts were created earlier, i.e. have a lower rank) and
// every SPM piece is reachable by the bigram merge from its characters.
//===----------------------------------------------------------------------===//
#include "compiler/synth/Vocab.h"

#include "compiler/synth/Fill.h"

#include <array>
#include <unordered_map>
#include <unordered_set>

namespace tpc::synth {
namespace {

const char *const kSpmSpace = "\xE2\x96\x81"; // U+2581
const char *const kBpeSpace = "\xC4\xA0";     // U+0120: GPT-2's byte-level form of ' '

/// Common English words first, so ordinary text meets whole-word tokens.
const char *const kWords[] = {
    "the",   "of",    "and",    "to",    "a",     "in",     "is",     "it",   "you",     "that",  "he",
    "was",   "for",   "on",     "are",   "with",  "as",     "his",    "they", "be",      "at",    "one",
    "have",  "this",  "from",   "or",    "had",   "by",     "word",   "but",  "what",    "some",  "we",
    "can",   "out",   "other",  "were",  "all",   "there",  "when",   "up",   "use",     "your",  "how",
    "said",  "an",    "each",   "she",   "which", "do",     "their",  "time", "if",      "will",  "way",
    "about", "many",  "then",   "them",  "write", "would",  "like",   "so",   "these",   "her",   "long",
    "make",  "thing", "see",    "him",   "two",   "has",    "look",   "more", "day",     "could", "go",
    "come",  "did",   "number", "sound", "no",    "most",   "people", "my",   "over",    "know",  "water",
    "than",  "call",  "first",  "who",   "may",   "down",   "side",   "been", "now",     "find",  "once",
    "upon",  "world", "hello",  "model", "story", "little", "girl",   "boy",  "king",    "house", "small",
    "large", "good",  "new",    "old",   "great", "where",  "after",  "back", "little",  "only",  "round",
    "man",   "year",  "came",   "show",  "every", "under",  "name",   "very", "through", "just",  "form",
};

/// GPT-2's byte -> code point map (printable Latin-1 bytes map to themselves, the rest to U+0100..).
std::array<std::string, 256> byteLevelChars() {
  std::array<std::string, 256> out;
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    uint32_t cp = printable ? b : 256 + n++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    out[b] = s;
  }
  return out;
}

/// Grows a vocabulary by concatenation; see the file comment.
class Grower {
public:
  Grower(std::string space, uint64_t seed) : space_(std::move(space)), rng_(seed) {}

  /// A token that exists before any merge (BPE bytes, SPM single characters). `piece`: also emit it as a
  /// created token (SPM pieces; BPE byte tokens are emitted by the caller).
  void addBase(const std::string &s, bool piece) {
    if (!have_.insert(s).second)
      return;
    if (piece)
      created.push_back(s);
    left_.push_back(s);
    if (s != space_)
      shortTails_.push_back(s);
  }

  /// Creates l + r from two existing tokens; false if it exists or is too long.
  bool merge(const std::string &l, const std::string &r) {
    std::string t = l + r;
    if (t.size() > 16 || have_.count(t))
      return false;
    addRule(l, r);
    return true;
  }

  /// Adds the merge rule "l r" (BPE rank = its position) and the token l + r if it is new.
  void addRule(const std::string &l, const std::string &r) {
    if (!rank_.emplace(l + " " + r, static_cast<int>(merges.size())).second)
      return;
    merges.push_back(l + " " + r);
    std::string t = l + r;
    if (!have_.insert(t).second)
      return;
    created.push_back(t);
    left_.push_back(t);
    if (t.compare(0, space_.size(), space_) != 0 && t.size() <= 3)
      shortTails_.push_back(t);
  }

  /// Whole words, with and without the space marker. For BPE each word is run through the merges made
  /// so far (lowest rank first, as the tokenizer does) and a rule is added only where none applies, so the
  /// word ends as one token and later rules (higher ranks) can never split it. SPM only needs the word's
  /// prefixes to be pieces (left to right).
  void growWords(size_t budget, bool bpe) {
    for (const char *w : kWords)
      for (bool spaced : {true, false}) {
        std::vector<std::string> sym;
        if (spaced)
          sym.push_back(space_);
        for (const char *c = w; *c; ++c)
          sym.emplace_back(1, *c);
        while (sym.size() > 1) {
          if (created.size() >= budget)
            return;
          size_t best = 0;
          int bestRank = -1;
          for (size_t i = 0; bpe && i + 1 < sym.size(); ++i) {
            auto it = rank_.find(sym[i] + " " + sym[i + 1]);
            if (it != rank_.end() && (bestRank < 0 || it->second < bestRank)) {
              best = i;
              bestRank = it->second;
            }
          }
          if (bestRank < 0)
            addRule(sym[best], sym[best + 1]);
          sym[best] += sym[best + 1];
          sym.erase(sym.begin() + static_cast<long>(best) + 1);
        }
      }
  }

  /// Random letter sequences until `budget` tokens exist.
  void growRandom(size_t budget) {
    while (created.size() < budget) {
      const std::string &l = left_[rng_.next() % left_.size()];
      const std::string &r = shortTails_[rng_.next() % shortTails_.size()];
      merge(l, r);
    }
  }

  std::vector<std::string> created;
  std::vector<std::string> merges;

private:
  std::string space_;
  Rng rng_;
  std::unordered_set<std::string> have_;
  std::vector<std::string> left_, shortTails_;
  std::unordered_map<std::string, int> rank_; ///< "left right" -> BPE rank
};

/// Letters first (the random growth draws from them), then digits and punctuation.
std::vector<std::string> baseCharacters() {
  std::vector<std::string> out;
  for (char c = 'a'; c <= 'z'; ++c)
    out.emplace_back(1, c);
  for (char c = 'A'; c <= 'Z'; ++c)
    out.emplace_back(1, c);
  for (char c = '0'; c <= '9'; ++c)
    out.emplace_back(1, c);
  for (const char *p : {".", ",", "!", "?", "'", "-", ":", ";", "(", ")", "\""})
    out.emplace_back(p);
  return out;
}

/// Byte-level BPE: 256 byte tokens, merges up to nNormal tokens, then `specials` (text, type).
Vocab bpeVocab(uint32_t nVocab, uint32_t nNormal,
               const std::vector<std::pair<std::string, int32_t>> &specials, uint64_t seed) {
  Vocab v;
  v.model = "gpt2";
  std::array<std::string, 256> bytes = byteLevelChars();
  Grower g(kBpeSpace, seed);
  g.addBase(kBpeSpace, false);
  for (const std::string &c : baseCharacters())
    if (c.size() == 1 && std::isalpha(static_cast<unsigned char>(c[0])))
      g.addBase(c, false);
  for (const std::string &b : bytes)
    g.addBase(b, false); // every byte token exists; only letters and the space start merges
  size_t budget = nNormal - 256;
  g.growWords(budget, true);
  g.growRandom(budget);
  v.tokens.assign(bytes.begin(), bytes.end());
  v.tokens.insert(v.tokens.end(), g.created.begin(), g.created.end());
  v.types.assign(v.tokens.size(), 1);
  v.merges = std::move(g.merges);
  for (const auto &[text, type] : specials) {
    v.tokens.push_back(text);
    v.types.push_back(type);
  }
  while (v.tokens.size() < nVocab) { // padding rows of the embedding, as convert_hf_to_gguf writes them
    v.tokens.push_back("[PAD" + std::to_string(v.tokens.size()) + "]");
    v.types.push_back(5);
  }
  v.tokens.resize(nVocab);
  v.types.resize(nVocab);
  return v;
}

/// SentencePiece: `specials` (text, type) first, then 256 byte tokens, then pieces with falling scores.
Vocab spmVocab(uint32_t nVocab, const std::vector<std::pair<std::string, int32_t>> &specials, uint64_t seed) {
  Vocab v;
  v.model = "llama";
  for (const auto &[text, type] : specials) {
    v.tokens.push_back(text);
    v.types.push_back(type);
  }
  static const char hex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    v.types.push_back(6);
  }
  v.scores.assign(v.tokens.size(), 0.f);
  size_t budget = nVocab - v.tokens.size();
  Grower g(kSpmSpace, seed);
  g.addBase(kSpmSpace, true);
  // A small vocabulary spends its pieces on lowercase words; other characters use the byte tokens.
  for (const std::string &c : baseCharacters())
    if (budget >= 1024 || (c[0] >= 'a' && c[0] <= 'z'))
      g.addBase(c, true);
  g.growWords(budget, false);
  g.growRandom(budget);
  for (size_t i = 0; i < g.created.size(); ++i) {
    v.tokens.push_back(g.created[i]);
    v.types.push_back(1);
    v.scores.push_back(-static_cast<float>(i)); // earlier pieces merge first, as SentencePiece log-probs
  }
  return v;
}

/// Qwen byte-level BPE: `realNormal` ordinary tokens (when the vocabulary has its real size `realSize`),
/// the special/added tokens (the first three are <|endoftext|>, <|im_start|>, <|im_end|>: Qwen2 151643..,
/// Qwen3.5 248044..), then [PAD] rows up to the embedding size. Qwen2 and Qwen3.5 differ in size, ids and
/// pre-tokenizer (qwen35 adds combining marks to the letter classes), not in how the tokens are laid out.
Vocab qwenVocab(uint32_t nVocab, uint32_t realSize, uint32_t realNormal, const char *pre, uint64_t seed) {
  std::vector<std::pair<std::string, int32_t>> sp = {{"<|endoftext|>", 3},
                                                     {"<|im_start|>", 3},
                                                     {"<|im_end|>", 3},
                                                     {"<|object_ref_start|>", 3},
                                                     {"<|object_ref_end|>", 3},
                                                     {"<|box_start|>", 3},
                                                     {"<|box_end|>", 3},
                                                     {"<|quad_start|>", 3},
                                                     {"<|quad_end|>", 3},
                                                     {"<|vision_start|>", 3},
                                                     {"<|vision_end|>", 3},
                                                     {"<|vision_pad|>", 3},
                                                     {"<|image_pad|>", 3},
                                                     {"<|video_pad|>", 3},
                                                     {"<tool_call>", 4},
                                                     {"</tool_call>", 4},
                                                     {"<|fim_prefix|>", 4},
                                                     {"<|fim_middle|>", 4},
                                                     {"<|fim_suffix|>", 4},
                                                     {"<|fim_pad|>", 4},
                                                     {"<|repo_name|>", 4},
                                                     {"<|file_sep|>", 4},
                                                     {"<tool_response>", 4},
                                                     {"</tool_response>", 4},
                                                     {"<think>", 4},
                                                     {"</think>", 4}};
  uint32_t nNormal = nVocab >= realSize ? realNormal : nVocab - static_cast<uint32_t>(sp.size());
  Vocab v = bpeVocab(nVocab, nNormal, sp, seed);
  v.pre = pre;
  v.bos = static_cast<int32_t>(nNormal); // <|endoftext|>
  v.eos = v.bos + 2;                     // <|im_end|>
  v.pad = v.bos;
  v.addBos = false;
  return v;
}

/// GLM-4.5 byte-level BPE (pre-tokenizer glm4): 151329 ordinary tokens, then the special tokens from
/// <|endoftext|> (its eos and padding), [gMASK] (the bos the converter names; GLM adds it through the chat
/// template, not as BOS), then [PAD] rows up to the embedding size (151552).
Vocab glm4Vocab(uint32_t nVocab) {
  const std::vector<std::pair<std::string, int32_t>> sp = {
      {"<|endoftext|>", 3}, {"[MASK]", 3},          {"[gMASK]", 3},    {"[sMASK]", 3},
      {"<sop>", 3},         {"<eop>", 3},           {"<|system|>", 3}, {"<|user|>", 3},
      {"<|assistant|>", 3}, {"<|observation|>", 3}, {"<think>", 4},    {"</think>", 4},
      {"<tool_call>", 4},   {"</tool_call>", 4}};
  uint32_t nNormal = nVocab >= 151552 ? 151329 : nVocab - static_cast<uint32_t>(sp.size());
  Vocab v = bpeVocab(nVocab, nNormal, sp, 0x61a445);
  v.pre = "glm4";
  v.eos = static_cast<int32_t>(nNormal); // <|endoftext|>
  v.pad = v.eos;
  v.bos = v.eos + 2; // [gMASK]
  v.addBos = false;
  return v;
}

} // namespace

Vocab buildVocab(VocabKind kind, uint32_t nVocab) {
  switch (kind) {
  case VocabKind::Llama3: {
    // Llama 3: 128000 ordinary tokens, then 256 special tokens (names as in the real tokenizer).
    std::vector<std::pair<std::string, int32_t>> sp = {{"<|begin_of_text|>", 3},
                                                       {"<|end_of_text|>", 3},
                                                       {"<|reserved_special_token_0|>", 3},
                                                       {"<|reserved_special_token_1|>", 3},
                                                       {"<|finetune_right_pad_id|>", 3},
                                                       {"<|reserved_special_token_2|>", 3},
                                                       {"<|start_header_id|>", 3},
                                                       {"<|end_header_id|>", 3},
                                                       {"<|eom_id|>", 3},
                                                       {"<|eot_id|>", 3},
                                                       {"<|python_tag|>", 3}};
    uint32_t nSpecial = nVocab >= 1024 ? 256 : 16;
    for (uint32_t i = static_cast<uint32_t>(sp.size()); i < nSpecial; ++i)
      sp.push_back({"<|reserved_special_token_" + std::to_string(i - 8) + "|>", 3});
    Vocab v = bpeVocab(nVocab, nVocab - nSpecial, sp, 0x11a3a3);
    v.pre = "llama-bpe";
    v.bos = static_cast<int32_t>(nVocab - nSpecial);
    v.eos = v.bos + 1;
    v.addBos = true;
    return v;
  }
  case VocabKind::Qwen2:
    return qwenVocab(nVocab, 151936, 151643, "qwen2", 0x9e3779);
  case VocabKind::Qwen35:
    return qwenVocab(nVocab, 248320, 248044, "qwen35", 0x9e3735);
  case VocabKind::Glm4:
    return glm4Vocab(nVocab);
  case VocabKind::Gemma: {
    Vocab v = spmVocab(nVocab,
                       {{"<pad>", 3},
                        {"<eos>", 3},
                        {"<bos>", 3},
                        {"<unk>", 2},
                        {"<mask>", 3},
                        {"<start_of_turn>", 3},
                        {"<end_of_turn>", 3}},
                       0x6e33a4);
    v.pad = 0;
    v.eos = 1;
    v.bos = 2;
    v.unk = 3;
    v.addBos = true;
    v.addSpacePrefix = 0;
    return v;
  }
  case VocabKind::Gpt4o: {
    // gpt-oss's o200k_harmony: 199998 ordinary tokens, then <|startoftext|> (BOS), <|endoftext|> (pad) and the
    // harmony format's tokens at their real ids (reserved ones in between), up to 201088 rows.
    std::vector<std::pair<std::string, int32_t>> sp = {
        {"<|startoftext|>", 3}, {"<|endoftext|>", 3}, {"<|reserved_200000|>", 3}, {"<|reserved_200001|>", 3},
        {"<|return|>", 3},      {"<|constrain|>", 3}, {"<|reserved_200004|>", 3}, {"<|channel|>", 3},
        {"<|start|>", 3},       {"<|end|>", 3},       {"<|message|>", 3},         {"<|reserved_200009|>", 3},
        {"<|reserved_200010|>", 3}, {"<|reserved_200011|>", 3}, {"<|call|>", 3}};
    const uint32_t nNormal = nVocab >= 201088 ? 199998 : nVocab - static_cast<uint32_t>(sp.size());
    for (uint32_t id = nNormal + static_cast<uint32_t>(sp.size()); id < nVocab; ++id)
      sp.push_back({"<|reserved_" + std::to_string(id) + "|>", 3});
    Vocab v = bpeVocab(nVocab, nNormal, sp, 0x200b0a);
    v.pre = "gpt-4o";
    v.bos = static_cast<int32_t>(nNormal);
    v.eos = v.bos + 4; // <|return|>
    v.pad = v.bos + 1;
    v.addBos = false;
    return v;
  }
  case VocabKind::Spm512:
    break;
  }
  // The shared fixtures' layout: <unk>, <s>, </s>, 256 byte tokens, pieces.
  Vocab v = spmVocab(nVocab, {{"<unk>", 2}, {"<s>", 3}, {"</s>", 3}}, 0x512);
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  v.addBos = true;
  v.addSpacePrefix = 1;
  return v;
}

void writeVocab(gguf::GGUFWriter &w, const Vocab &v) {
  w.setString("tokenizer.ggml.model", v.model);
  if (!v.pre.empty())
    w.setString("tokenizer.ggml.pre", v.pre);
  w.setStringArray("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty())
    w.setF32Array("tokenizer.ggml.scores", v.scores);
  w.setI32Array("tokenizer.ggml.token_type", v.types);
  if (!v.merges.empty())
    w.setStringArray("tokenizer.ggml.merges", v.merges);
  if (v.unk >= 0)
    w.setU32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(v.unk));
  if (v.bos >= 0)
    w.setU32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.bos));
  if (v.eos >= 0)
    w.setU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos));
  if (v.pad >= 0)
    w.setU32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(v.pad));
  w.setBool("tokenizer.ggml.add_bos_token", v.addBos);
  w.setBool("tokenizer.ggml.add_eos_token", v.addEos);
  if (v.addSpacePrefix >= 0)
    w.setBool("tokenizer.ggml.add_space_prefix", v.addSpacePrefix != 0);
}

} // namespace tpc::synth
