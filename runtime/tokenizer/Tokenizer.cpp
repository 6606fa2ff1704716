//===- Tokenizer.cpp - SentencePiece and byte-level BPE tokenizers ---------===//
//
// Encoding and decoding as llama.cpp's llama-vocab.cpp does it (the results must match its ids exactly):
// special-token partition first, then per text fragment the SPM bigram merge (priority queue on score,
// ties to the left) or the BPE merge by rank over pre-tokenized, byte-level-encoded pieces. Validation
// happens once in the constructor so encode/decode never index out of range.
//===----------------------------------------------------------------------===//
#include "runtime/tokenizer/Tokenizer.h"

#include "runtime/tokenizer/HashIndex.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <initializer_list>
#include <mutex>
#include <queue>

namespace tpc::rt {
namespace {

const char *const kSpmSpace = "\xE2\x96\x81"; // U+2581, SentencePiece's visible space

/// GPT-2's byte -> printable code point map: printable Latin-1 bytes map to themselves, the rest to
/// U+0100 and up in byte order.
std::array<uint32_t, 256> byteToUnicode() {
  std::array<uint32_t, 256> map{};
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[b] = printable ? b : 256 + n++;
  }
  return map;
}

/// True when `pre` is one of `names`.
bool isOneOf(std::string_view pre, std::initializer_list<const char *> names) {
  for (const char *n : names)
    if (pre == n)
      return true;
  return false;
}

/// The llama3 family proper: these also set ignore_merges and add BOS in llama.cpp.
bool isLlama3Family(std::string_view pre) {
  return isOneOf(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral"});
}

/// Which pre-tokenizer regex a `tokenizer.ggml.pre` name selects ("" when unknown), per llama.cpp's table.
std::string_view preKindOf(std::string_view pre) {
  // GLM-4 ("glm4", "chatglm-bpe") uses the llama3 regex without llama3's ignore_merges and BOS.
  if (isLlama3Family(pre) || isOneOf(pre, {"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"}))
    return "llama3";
  if (isOneOf(pre, {"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"}))
    return "qwen2";
  if (pre == "qwen35")
    return "qwen35";
  if (pre == "gpt-4o") // gpt-oss (o200k_harmony)
    return "gpt4o";
  if (isOneOf(pre, {"gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de",
                    "jina-v2-code", "roberta-bpe", "gigachat", "mpt", "olmo", "jais", "trillion"}))
    return "gpt2";
  if (pre.empty() || pre == "default")
    return "default";
  return "";
}

/// Replaces every occurrence of `from` in `s` by `to` (one pass into a new string: linear time).
void replaceAll(std::string &s, std::string_view from, std::string_view to) {
  if (s.find(from) == std::string::npos)
    return;
  std::string out;
  out.reserve(s.size() + s.size() / 4 * (to.size() > from.size() ? to.size() - from.size() : 0));
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

/// One symbol of the merge loops: a byte range of the text in a doubly linked list.
struct Symbol {
  int prev, next;
  size_t off, n;
};

/// `text` as a linked list of UTF-8 characters, the starting symbols of both merge algorithms (a truncated
/// last sequence keeps the bytes it has).
std::vector<Symbol> charSymbols(const std::string &text) {
  std::vector<Symbol> sym;
  for (size_t off = 0; off < text.size();) {
    size_t len = std::min(unicode::utf8Len(static_cast<unsigned char>(text[off])), text.size() - off);
    int idx = static_cast<int>(sym.size());
    sym.push_back({idx - 1, off + len == text.size() ? -1 : idx + 1, off, len});
    off += len;
  }
  return sym;
}

} // namespace

void applyModelDefaults(TokenizerData &d) {
  if (d.model == "llama") {
    d.addBos = true;
    d.addEos = false;
    d.addSpacePrefix = true;
    d.cleanSpaces = false;
  } else if (d.model == "gpt2") {
    d.addSpacePrefix = false;
    d.cleanSpaces = true;
    if (isLlama3Family(d.pre)) {
      d.ignoreMerges = true;
      d.addBos = true;
    } else if (isOneOf(d.pre, {"qwen2", "deepseek-r1-qwen", "megrez", "qwen35", "gpt-4o"})) {
      d.cleanSpaces = false;
    }
  }
}

void addEndOfGenerationTokens(TokenizerData &d) {
  // Chat templates end turns with these even when the file names only eos (llama.cpp's list).
  static const char *const eotTexts[] = {"<|eot_id|>",         "<|im_end|>", "<|end|>",  "<end_of_turn>",
                                         "<|endoftext|>",      "<EOT>",      "_<EOT>",   "<|end_of_text|>",
                                         "<end_of_utterance>", "<|return|>", "<|call|>", "<|eom_id|>"};
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    const std::string &text = d.tokens[i];
    if (text.empty() || (text[0] != '<' && text[0] != '_')) // every text above starts so: skip the rest fast
      continue;
    for (const char *t : eotTexts) {
      if (text != t)
        continue;
      TokenId id = static_cast<TokenId>(i);
      if (std::find(d.eog.begin(), d.eog.end(), id) == d.eog.end())
        d.eog.push_back(id);
      std::string_view tv = t;
      if (tv == "<|eom_id|>") {
        if (d.eom < 0)
          d.eom = id;
      } else if (d.eot < 0 && tv != "<|return|>" && tv != "<|call|>" && tv != "<|end_of_text|>" &&
                 tv != "<end_of_utterance>") {
        d.eot = id;
      }
    }
  }
  // Harmony (gpt-oss): <|end|> closes one message of a turn (the analysis before the final answer); the
  // turn ends at <|return|> or <|call|>. As llama.cpp, a vocabulary with both keeps <|end|> out of EOG.
  auto idOf = [&d](std::string_view t) {
    for (TokenId id : d.eog)
      if (d.tokens[static_cast<size_t>(id)] == t)
        return id;
    return TokenId(-1);
  };
  if (const TokenId end = idOf("<|end|>"); end >= 0 && idOf("<|return|>") >= 0 && idOf("<|call|>") >= 0) {
    d.eog.erase(std::remove(d.eog.begin(), d.eog.end(), end), d.eog.end());
    if (d.eot == end)
      d.eot = -1;
  }
}

struct Tokenizer::Impl {
  TokenizerData d; // everything but the token texts, which live in texts/textEnd
  // The token texts as one blob and each token's end offset (token i is [textEnd[i-1], textEnd[i])): for a
  // 262k vocabulary 2.3 + 1 MiB, where a std::string per token took 8 MiB of 32-byte objects plus a heap
  // block for every text past 15 bytes.
  std::string texts;
  std::vector<uint32_t> textEnd;
  std::vector<uint8_t> types; // TokenType per token (empty: all Normal); a byte, not data's int32
  bool decodeOnly = false;    // scores and merges dropped (TokenizerUse::DecodeOnly)
  bool encoderDropped = false; // dropEncoder(): the tables too
  bool spm = true;
  std::string preKind;
  std::vector<uint32_t> mergeSplit; // per merge: where its separating space is
  std::vector<uint8_t> strip;       // per token: 1 = lstrip, 2 = rstrip
  std::array<uint32_t, 256> b2u{};
  std::unordered_map<uint32_t, unsigned char> u2b;

  // The encoder's tables, built by the first encode() or find() (tables()): decoding needs none of them, so
  // a caller that only turns ids into text (tpc run --prompt-ids) never pays for indexing every token.
  struct Tables {
    HashIndex toId;                 // token text -> id
    HashIndex ranks;                // merge (left, right) -> rank
    std::vector<TokenId> specials;  // longest text first
    std::array<TokenId, 256> byteTok{};
  };
  mutable std::once_flag tablesOnce;
  mutable Tables tab;
  mutable std::atomic<bool> tablesBuilt{false};

  const Tables &tables() const {
    std::call_once(tablesOnce, [this] { buildTables(); });
    return tab;
  }
  void buildTables() const;

  std::string_view text(TokenId id) const {
    const uint32_t b = id == 0 ? 0 : textEnd[id - 1];
    return std::string_view(texts).substr(b, textEnd[id] - b);
  }
  size_t count() const { return textEnd.size(); }

  TokenType type(TokenId id) const {
    return types.empty() ? TokenType::Normal : static_cast<TokenType>(types[id]);
  }
  float score(TokenId id) const { return d.scores.empty() ? 0.0f : d.scores[id]; }
  /// The id of token text `s`, or -1 (tables() must have been built).
  TokenId lookup(std::string_view s) const {
    return tab.toId.find(hashBytes(s), [&](int32_t id) { return text(id) == s; });
  }
  static uint64_t mergeHash(std::string_view l, std::string_view r) { return hashBytes(r, hashBytes(l)); }
  /// The rank of merging `l` and `r`, or -1 (tables() must have been built).
  int32_t rank(std::string_view l, std::string_view r) const {
    return tab.ranks.find(mergeHash(l, r), [&](int32_t i) {
      const std::string &mg = d.merges[i];
      const size_t sp = mergeSplit[i];
      return sp == l.size() && mg.size() == sp + 1 + r.size() && mg.compare(0, sp, l) == 0 &&
             mg.compare(sp + 1, r.size(), r) == 0;
    });
  }

  /// Validates `data` and fills everything but `d` and the tables from it (throws TokenizerError).
  void derive(const TokenizerData &data);
  void encodeSpm(const std::string &text, std::vector<TokenId> &out) const;
  void encodeBpe(std::string_view text, std::vector<TokenId> &out) const;
};

void Tokenizer::Impl::buildTables() const {
  const size_t n = count();
  tab.toId.reset(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string_view t = text(static_cast<TokenId>(i));
    tab.toId.insert(hashBytes(t), static_cast<TokenId>(i), [&](int32_t other) { return text(other) == t; });
  }
  tab.ranks.reset(d.merges.size());
  for (size_t i = 0; i < d.merges.size(); ++i) {
    const std::string_view mg = d.merges[i];
    const size_t sp = mergeSplit[i];
    // The first of two equal merges keeps its (lower) rank.
    tab.ranks.insert(mergeHash(mg.substr(0, sp), mg.substr(sp + 1)), static_cast<int32_t>(i),
                     [&](int32_t) { return false; });
  }
  for (size_t i = 0; i < n; ++i) {
    TokenType t = type(static_cast<TokenId>(i));
    if ((t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) &&
        !text(static_cast<TokenId>(i)).empty())
      tab.specials.push_back(static_cast<TokenId>(i));
  }
  std::stable_sort(tab.specials.begin(), tab.specials.end(),
                   [&](TokenId a, TokenId b) { return text(a).size() > text(b).size(); });
  static const char hex[] = "0123456789ABCDEF";
  for (uint32_t b = 0; b < 256; ++b) {
    TokenId id = -1;
    if (spm) {
      std::string name = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
      id = lookup(name);
      if (id < 0)
        id = lookup(std::string(1, static_cast<char>(b)));
    } else {
      std::string s;
      unicode::appendUtf8(s, b2u[b]);
      id = lookup(s);
    }
    tab.byteTok[b] = id;
  }
  tablesBuilt.store(true);
}

Tokenizer::Tokenizer(TokenizerData data, TokenizerUse use) : impl(std::make_unique<Impl>()) {
  impl->derive(data);
  if (use == TokenizerUse::DecodeOnly) {
    impl->decodeOnly = true;
    std::vector<float>().swap(data.scores);
    std::vector<std::string>().swap(data.merges);
    std::vector<uint32_t>().swap(impl->mergeSplit);
  }
  size_t bytes = 0;
  for (const std::string &t : data.tokens)
    bytes += t.size();
  if (bytes > UINT32_MAX)
    throw TokenizerError("tokenizer.ggml.tokens holds " + std::to_string(bytes) + " bytes of text (at most 4 GiB)");
  impl->texts.reserve(bytes);
  impl->textEnd.reserve(data.tokens.size());
  for (const std::string &t : data.tokens) {
    impl->texts += t;
    impl->textEnd.push_back(static_cast<uint32_t>(impl->texts.size()));
  }
  std::vector<std::string>().swap(data.tokens); // freed now, not when the tokenizer goes
  impl->types.assign(data.tokenTypes.begin(), data.tokenTypes.end()); // derive() checked 0..6
  std::vector<int32_t>().swap(data.tokenTypes);
  impl->d = std::move(data);
}

void Tokenizer::validate(const TokenizerData &data) {
  Impl scratch;
  scratch.derive(data);
}

void Tokenizer::Impl::derive(const TokenizerData &d) {
  Impl &m = *this;
  size_t n = d.tokens.size();
  if (n == 0)
    throw TokenizerError("tokenizer has no tokens (tokenizer.ggml.tokens is empty)");
  if (n > static_cast<size_t>(INT32_MAX))
    throw TokenizerError("tokenizer has too many tokens (" + std::to_string(n) + ")");
  if (!d.scores.empty() && d.scores.size() != n)
    throw TokenizerError("tokenizer.ggml.scores has " + std::to_string(d.scores.size()) +
                         " entries but there are " + std::to_string(n) + " tokens");
  if (!d.tokenTypes.empty() && d.tokenTypes.size() != n)
    throw TokenizerError("tokenizer.ggml.token_type has " + std::to_string(d.tokenTypes.size()) +
                         " entries but there are " + std::to_string(n) + " tokens");
  for (size_t i = 0; i < d.tokenTypes.size(); ++i)
    if (d.tokenTypes[i] < 0 || d.tokenTypes[i] > 6)
      throw TokenizerError("tokenizer.ggml.token_type[" + std::to_string(i) +
                           "] = " + std::to_string(d.tokenTypes[i]) + " is not a token type (0..6)");
  auto checkId = [&](TokenId id, const char *what) {
    if (id < -1 || id >= static_cast<TokenId>(n))
      throw TokenizerError(std::string("tokenizer.ggml.") + what + " = " + std::to_string(id) +
                           " is out of range for " + std::to_string(n) + " tokens");
  };
  checkId(d.bos, "bos_token_id");
  checkId(d.eos, "eos_token_id");
  checkId(d.unk, "unknown_token_id");
  checkId(d.pad, "padding_token_id");
  checkId(d.eot, "eot_token_id");
  checkId(d.sep, "seperator_token_id");
  checkId(d.eom, "eom_token_id");
  m.strip.assign(n, 0);
  for (TokenId id : d.lstripTokens) {
    checkId(id, "lstrip token id");
    if (id >= 0)
      m.strip[id] |= 1;
  }
  for (TokenId id : d.rstripTokens) {
    checkId(id, "rstrip token id");
    if (id >= 0)
      m.strip[id] |= 2;
  }
  for (TokenId id : d.eog)
    checkId(id, "eog token id");
  if (d.addBos && d.bos < 0)
    throw TokenizerError("tokenizer.ggml.add_bos_token is true but there is no bos_token_id");
  if (d.addEos && d.eos < 0)
    throw TokenizerError("tokenizer.ggml.add_eos_token is true but there is no eos_token_id");

  if (d.model == "llama") {
    m.spm = true;
  } else if (d.model == "gpt2") {
    m.spm = false;
    m.preKind = std::string(preKindOf(d.pre));
    if (m.preKind.empty())
      throw TokenizerError(
          "unknown pre-tokenizer tokenizer.ggml.pre = '" + d.pre +
          "' (supported: default, gpt-2, llama3/llama-bpe, qwen2, qwen35, glm4, gpt-4o and their aliases)");
  } else {
    throw TokenizerError("unsupported tokenizer.ggml.model '" + d.model +
                         "' (supported: llama = SentencePiece, gpt2 = byte-level BPE)");
  }

  m.mergeSplit.reserve(d.merges.size());
  for (size_t i = 0; i < d.merges.size(); ++i) {
    const std::string &mg = d.merges[i];
    size_t sp = mg.find(' ', 1); // a merge's left part may itself start with a space
    if (sp == std::string::npos || sp + 1 >= mg.size())
      throw TokenizerError("tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + mg +
                           "' is not of the form 'left right'");
    m.mergeSplit.push_back(static_cast<uint32_t>(sp));
  }
  if (!m.spm && d.merges.empty())
    throw TokenizerError("byte-level BPE tokenizer (gpt2) has no tokenizer.ggml.merges");

  m.b2u = byteToUnicode();
  for (uint32_t b = 0; b < 256; ++b)
    m.u2b[m.b2u[b]] = static_cast<unsigned char>(b);
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer &&) noexcept = default;
Tokenizer &Tokenizer::operator=(Tokenizer &&) noexcept = default;

size_t Tokenizer::size() const { return impl->count(); }
std::string_view Tokenizer::token(TokenId id) const {
  return id < 0 || static_cast<size_t>(id) >= impl->count() ? std::string_view() : impl->text(id);
}
size_t Tokenizer::heapBytes() const {
  const Impl &m = *impl;
  size_t b = m.texts.capacity() + m.textEnd.capacity() * 4 + m.d.scores.capacity() * 4 +
             m.types.capacity() + m.mergeSplit.capacity() * 4 + m.strip.capacity();
  for (const std::string &mg : m.d.merges)
    b += sizeof(std::string) + (mg.capacity() > 15 ? mg.capacity() + 1 : 0);
  return b;
}
const TokenizerData &Tokenizer::data() const { return impl->d; }
void Tokenizer::dropEncoder() {
  Impl &m = *impl;
  m.tables(); // the once_flag is spent, so a later call cannot rebuild what goes here
  m.decodeOnly = m.encoderDropped = true;
  m.tab = Impl::Tables{};
  std::vector<float>().swap(m.d.scores);
  std::vector<std::string>().swap(m.d.merges);
  std::vector<uint32_t>().swap(m.mergeSplit);
}
TokenId Tokenizer::find(std::string_view text) const {
  if (impl->encoderDropped)
    throw TokenizerError("find() after dropEncoder(): the token text index was freed");
  impl->tables();
  return impl->lookup(text);
}
bool Tokenizer::encoderTablesBuilt() const { return impl->tablesBuilt.load(); }
bool Tokenizer::isEog(TokenId id) const {
  const TokenizerData &d = impl->d;
  return id >= 0 && (id == d.eos || id == d.eot || id == d.eom ||
                     std::find(d.eog.begin(), d.eog.end(), id) != d.eog.end());
}

void Tokenizer::Impl::encodeSpm(const std::string &text, std::vector<TokenId> &out) const {
  std::vector<Symbol> sym = charSymbols(text);
  struct Bigram {
    int left, right;
    float score;
    size_t size;
  };
  // Highest score first; equal scores: leftmost first.
  auto cmp = [](const Bigram &a, const Bigram &b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(cmp)> queue(cmp);
  auto tryAdd = [&](int l, int r) {
    if (l < 0 || r < 0)
      return;
    TokenId id = lookup(std::string_view(text).substr(sym[l].off, sym[l].n + sym[r].n));
    if (id < 0)
      return;
    queue.push({l, r, score(id), sym[l].n + sym[r].n});
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i)
    tryAdd(i - 1, i);
  while (!queue.empty()) {
    Bigram bg = queue.top();
    queue.pop();
    Symbol &l = sym[bg.left];
    Symbol &r = sym[bg.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != bg.size)
      continue; // stale: one side was merged since
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0)
      sym[r.next].prev = bg.left;
    tryAdd(l.prev, bg.left);
    tryAdd(bg.left, l.next);
  }
  if (sym.empty())
    return;
  for (int i = 0; i != -1; i = sym[i].next) {
    std::string piece = text.substr(sym[i].off, sym[i].n);
    TokenId id = lookup(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // Every merged symbol is a vocabulary entry, so this is a single character without one: bytes.
    for (unsigned char b : piece) {
      TokenId bt = tab.byteTok[b] >= 0 ? tab.byteTok[b] : d.unk;
      if (bt >= 0)
        out.push_back(bt);
    }
  }
}

void Tokenizer::Impl::encodeBpe(std::string_view text, std::vector<TokenId> &out) const {
  for (const std::string &raw : unicode::preTokenize(text, preKind)) {
    std::string word;
    for (unsigned char b : raw)
      unicode::appendUtf8(word, b2u[b]);
    if (d.ignoreMerges) {
      TokenId id = lookup(word);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    std::vector<Symbol> sym = charSymbols(word);
    struct Bigram {
      int left, right;
      int32_t rank;
      std::string text;
    };
    // Lowest rank first; equal ranks: leftmost first.
    auto cmp = [](const Bigram &a, const Bigram &b) {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(cmp)> queue(cmp);
    auto tryAdd = [&](int l, int r) {
      if (l < 0 || r < 0)
        return;
      std::string_view lt = std::string_view(word).substr(sym[l].off, sym[l].n);
      std::string_view rt = std::string_view(word).substr(sym[r].off, sym[r].n);
      const int32_t rk = rank(lt, rt);
      if (rk < 0)
        return;
      queue.push({l, r, rk, std::string(lt) + std::string(rt)});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i)
      tryAdd(i - 1, i);
    while (!queue.empty()) {
      Bigram bg = queue.top();
      queue.pop();
      Symbol &l = sym[bg.left];
      Symbol &r = sym[bg.right];
      if (l.n == 0 || r.n == 0 || word.compare(l.off, l.n + r.n, bg.text) != 0 || l.off + l.n != r.off)
        continue; // stale
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0)
        sym[r.next].prev = bg.left;
      tryAdd(l.prev, bg.left);
      tryAdd(bg.left, l.next);
    }
    for (const Symbol &s : sym) {
      if (s.n == 0)
        continue;
      std::string piece = word.substr(s.off, s.n);
      TokenId id = lookup(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // No entry for the merged piece: emit whatever single bytes the vocabulary has (llama.cpp does).
      for (char ch : piece) {
        TokenId bt = lookup(std::string(1, ch));
        if (bt >= 0)
          out.push_back(bt);
      }
    }
  }
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool addSpecial, bool parseSpecial) const {
  const Impl &m = *impl;
  if (m.decodeOnly)
    throw TokenizerError("this tokenizer was built for decoding only (TokenizerUse::DecodeOnly): it cannot "
                         "encode text");
  const TokenizerData &d = m.d;
  const Impl::Tables &tab = m.tables();
  // Fragments: a special token (id >= 0) or a byte range of the text (id = -1).
  struct Fragment {
    TokenId id;
    size_t off, len;
  };
  std::vector<Fragment> frags;
  if (!text.empty())
    frags.push_back({-1, 0, text.size()});
  for (TokenId sid : tab.specials) {
    TokenType t = m.type(sid);
    if (!parseSpecial && (t == TokenType::Control || t == TokenType::Unknown))
      continue;
    const std::string_view st = m.text(sid);
    std::vector<Fragment> next;
    for (const Fragment &f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      std::string_view s = text.substr(f.off, f.len);
      auto isSpace = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }; // C isspace
      size_t pos = 0;
      for (size_t hit; (hit = s.find(st, pos)) != std::string_view::npos;) {
        size_t left = hit;
        if (m.strip[sid] & 1)
          while (left > pos && isSpace(s[left - 1]))
            --left;
        if (left > pos)
          next.push_back({-1, f.off + pos, left - pos});
        next.push_back({sid, 0, 0});
        pos = hit + st.size();
        if (m.strip[sid] & 2)
          while (pos < s.size() && isSpace(s[pos]))
            ++pos;
      }
      if (pos < s.size())
        next.push_back({-1, f.off + pos, s.size() - pos});
    }
    frags.swap(next);
  }

  std::vector<TokenId> out;
  if (addSpecial && d.addBos)
    out.push_back(d.bos);
  bool prevSpecial = true; // the text start counts as after a special token (space prefix)
  for (const Fragment &f : frags) {
    if (f.id >= 0) {
      out.push_back(f.id);
      prevSpecial = true;
      continue;
    }
    if (m.spm) {
      std::string s;
      if (d.addSpacePrefix && prevSpecial)
        s = " ";
      s.append(text.substr(f.off, f.len));
      replaceAll(s, " ", kSpmSpace);
      m.encodeSpm(s, out);
    } else {
      m.encodeBpe(text.substr(f.off, f.len), out);
    }
    prevSpecial = false;
  }
  if (addSpecial && d.addEos)
    out.push_back(d.eos);
  return out;
}

std::string Tokenizer::tokenToPiece(TokenId id, bool special) const {
  const Impl &m = *impl;
  if (id < 0 || static_cast<size_t>(id) >= m.count())
    return "";
  const std::string_view text = m.text(id);
  TokenType t = m.type(id);
  if (t == TokenType::UserDefined || (special && (t == TokenType::Control || t == TokenType::Unknown)))
    return std::string(text);
  if (m.spm) {
    if (t == TokenType::Normal || t == TokenType::Undefined) {
      std::string s(text);
      replaceAll(s, kSpmSpace, " ");
      return s;
    }
    if (t == TokenType::Byte) {
      // "<0xNN>"; anything else was validated as a byte token only by its type: give its text.
      if (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>') {
        auto hexv = [](char c) {
          return c >= '0' && c <= '9'   ? c - '0'
                 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                        : -1;
        };
        int hi = hexv(text[3]), lo = hexv(text[4]);
        if (hi >= 0 && lo >= 0)
          return std::string(1, static_cast<char>(hi * 16 + lo));
      }
      return std::string(text);
    }
    return "";
  }
  if (t == TokenType::Normal || t == TokenType::Undefined || t == TokenType::Byte) {
    std::string s;
    for (uint32_t c : unicode::decodeUtf8(text)) {
      auto it = m.u2b.find(c);
      if (it != m.u2b.end())
        s += static_cast<char>(it->second);
      else
        unicode::appendUtf8(s, c); // not a byte-level code point: keep it as text
    }
    return s;
  }
  return "";
}

std::string Tokenizer::decode(const std::vector<TokenId> &ids, bool special) const {
  const TokenizerData &d = impl->d;
  std::string text;
  bool first = true;
  for (TokenId id : ids) {
    std::string piece = tokenToPiece(id, special);
    // encode prefixed the text with a space; the first real piece gives it back.
    if (first && id != d.bos) {
      if (d.addSpacePrefix && !piece.empty() && piece[0] == ' ')
        piece.erase(0, 1);
      first = false;
    }
    text += piece;
  }
  if (!d.cleanSpaces || text.size() < 2)
    return text;
  // llama.cpp's clean_spaces: " ?", " !", " .", " ," lose the space; " ' " loses both; " 's", " 'm",
  // " 're", " 've" lose the space.
  std::string a(1, text[0]);
  for (size_t i = 1; i < text.size(); ++i) {
    char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
      a.pop_back();
    a += x;
  }
  std::string b(1, a[0]);
  for (size_t i = 1; i < a.size(); ++i) {
    char x = a[i];
    if (x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      b += x;
      ++i; // drop the following space
      continue;
    }
    b += x;
  }
  std::string c(1, b[0]);
  for (size_t i = 1; i < b.size(); ++i) {
    char x = b[i];
    if (b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      char x1 = b[i + 1];
      bool drop = x1 == 's' || x1 == 'm';
      if (!drop && x1 != 't' && x1 != 'd' && i + 2 < b.size()) {
        char x2 = b[i + 2];
        drop = (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e');
      }
      if (drop)
        c.pop_back();
    }
    c += x;
  }
  return c;
}

std::string StreamDecoder::push(TokenId id) {
  std::string piece = tok.tokenToPiece(id, special);
  if (first && id != tok.data().bos) {
    if (tok.data().addSpacePrefix && !piece.empty() && piece[0] == ' ')
      piece.erase(0, 1);
    first = false;
  }
  pending += piece;
  // Release everything up to the last complete UTF-8 sequence.
  size_t cut = pending.size();
  size_t back = 0;
  while (back < 4 && back < pending.size()) {
    unsigned char b = pending[pending.size() - 1 - back];
    if ((b & 0xC0) != 0x80) {
      size_t need = unicode::utf8Len(b);
      if (need > back + 1 && (b & 0xC0) == 0xC0)
        cut = pending.size() - 1 - back; // lead byte whose sequence is not complete yet
      break;
    }
    ++back;
  }
  std::string out = pending.substr(0, cut);
  pending.erase(0, cut);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending);
  return out;
}

} // namespace tpc::rt
