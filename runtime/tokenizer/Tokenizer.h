//===- Tokenizer.h - SentencePiece and byte-level BPE tokenizers --*- C++ -*-===//
//
// The runtime tokenizer: text -> token ids and back, reproducing llama.cpp's results for the two
// vocabulary families GGUF models use. `TokenizerData` is the plain data the plan file carries (filled
// from `tokenizer.ggml.*` by compiler/tokenizer); `Tokenizer` validates it once and then encodes and
// decodes.
//
// - "llama" (SentencePiece style): optional leading space, spaces -> U+2581, start from UTF-8 characters
//   and repeatedly merge the adjacent pair whose concatenation is the best-scoring vocabulary entry (ties
//   go to the leftmost pair); characters without an entry become their byte tokens <0xXX>.
// - "gpt2" (byte-level BPE): split the text with the pre-tokenizer named by `tokenizer.ggml.pre` (gpt2,
//   llama3, qwen2, qwen35 regexes, as hand-written matchers over code points), map bytes to printable code
//   points, then apply merges by rank within each piece.
//
// Special tokens: control and unknown tokens are matched in the text only when parseSpecial is true;
// user-defined tokens always are (as in llama.cpp). Thread-safe for concurrent const calls (the lazily built
// tables are built once). No MLIR/LLVM; namespace tpc::rt.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_TOKENIZER_TOKENIZER_H
#define TPC_RUNTIME_TOKENIZER_TOKENIZER_H

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tpc::rt {

/// A token id; -1 means "none".
using TokenId = int32_t;

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

/// Everything that changes tokenizer results, as read from `tokenizer.ggml.*`.
struct TokenizerData {
  std::string model = "llama"; ///< tokenizer.ggml.model: "llama" (SPM) or "gpt2" (byte-level BPE)
  /// tokenizer.ggml.pre: "default", "gpt-2", "llama3"/"llama-bpe", "qwen2", "qwen35"...
  std::string pre = "default";
  std::vector<std::string> tokens; ///< token texts, index = id
  std::vector<float> scores;       ///< SPM merge scores (empty: all 0)
  std::vector<int32_t> tokenTypes; ///< TokenType values (empty: all Normal)
  std::vector<std::string> merges; ///< BPE merges "left right", rank = index
  TokenId bos = -1, eos = -1, unk = -1, pad = -1, eot = -1, sep = -1, eom = -1;
  bool addBos = false;
  bool addEos = false;
  bool addSpacePrefix = false;
  /// llama.cpp's "ignore_merges": a pre-token that is itself a vocabulary entry is emitted as is (llama3).
  bool ignoreMerges = false;
  /// Strip the space before punctuation when decoding (llama.cpp's clean_spaces; gpt2 family default).
  bool cleanSpaces = false;
  /// Special tokens that swallow the whitespace before (lstrip) or after (rstrip) them when matched in
  /// text (llama.cpp sets these by model name, e.g. rstrip on Phi-3's special tokens).
  std::vector<TokenId> lstripTokens, rstripTokens;
  /// Further end-of-generation tokens besides eos/eot/eom (llama.cpp adds <|im_end|>, <|end|>,
  /// <end_of_turn>, ... by their text; see tokenizerFromGGUF).
  std::vector<TokenId> eog;
};

/// Error for inconsistent tokenizer data (names what is wrong).
struct TokenizerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Applies llama.cpp's per-model defaults to data read from a file whose keys may be absent: SPM adds BOS
/// and a space prefix; BPE pre-tokenizers set ignoreMerges/cleanSpaces. Call before reading the explicit
/// add_bos_token/add_eos_token/add_space_prefix keys, which override these.
void applyModelDefaults(TokenizerData &data);

/// Adds the end-of-generation tokens llama.cpp finds by their text (<|eot_id|>, <|im_end|>, <end_of_turn>,
/// ...) to data.eog; the first one also becomes eot (or eom for <|eom_id|>) when none is set.
void addEndOfGenerationTokens(TokenizerData &data);

/// What a Tokenizer is built for. DecodeOnly drops the SPM scores and BPE merges once validated (encode()
/// then throws; tokenToPiece, decode, find and isEog work; dropEncoder() goes further): `tpc run --prompt-ids` never encodes, and for a
/// 262k vocabulary the scores alone are 1 MiB that MPI rank 0 would hold by itself.
enum class TokenizerUse { EncodeDecode, DecodeOnly };

/// An encoder/decoder built from validated TokenizerData.
class Tokenizer {
public:
  /// Validates `data` (sizes agree, special ids in range, merges well formed). Throws TokenizerError with a
  /// one-line message. The token texts move into one blob with offsets, the types into bytes. The encoder's lookup tables are built by the first encode() or find(), so that
  /// decoding alone (ids to text) costs no pass over the vocabulary's hash.
  explicit Tokenizer(TokenizerData data, TokenizerUse use = TokenizerUse::EncodeDecode);
  /// The constructor's checks alone, without taking (or copying) the data.
  static void validate(const TokenizerData &data);
  ~Tokenizer();
  Tokenizer(Tokenizer &&) noexcept;
  Tokenizer &operator=(Tokenizer &&) noexcept;

  /// Token ids for `text`. addSpecial adds BOS/EOS as the vocabulary asks; parseSpecial matches control
  /// tokens written in the text (user-defined tokens are always matched). Throws TokenizerError on a
  /// DecodeOnly tokenizer.
  std::vector<TokenId> encode(std::string_view text, bool addSpecial, bool parseSpecial = false) const;

  /// The bytes token `id` stands for in output text (U+2581 -> space, <0xNN> -> byte, byte-level BPE
  /// decoded). Control tokens give "" unless `special`. Out-of-range ids give "".
  std::string tokenToPiece(TokenId id, bool special = false) const;

  /// Concatenated pieces of `ids`; for SPM with a space prefix the leading space of the first piece is
  /// removed (removeLeadingSpace), mirroring how encode added it.
  std::string decode(const std::vector<TokenId> &ids, bool special = false) const;

  /// The vocabulary size.
  size_t size() const;
  /// The data this tokenizer was built from, except the token texts and types (`tokens` and `tokenTypes`
  /// are empty: the tokenizer keeps them compactly; read a text with token()).
  const TokenizerData &data() const;
  /// The text of token `id` as stored in the vocabulary (U+2581, <0xNN>, byte-level code points as they
  /// are); "" for an out-of-range id.
  std::string_view token(TokenId id) const;
  /// Heap bytes of the vocabulary tables (texts, scores, types, merges; not the lazily built encoder
  /// tables): tests bound it for a 262k vocabulary, whose bytes rank 0 of an MPI job holds alone.
  size_t heapBytes() const;
  /// Id of an exact token text, or -1.
  TokenId find(std::string_view text) const;
  /// True for end-of-generation tokens (eos, eot, eom and the extra `eog` ids).
  bool isEog(TokenId id) const;
  /// True once encode() or find() built the encoder's tables (tests of start-up work).
  bool encoderTablesBuilt() const;
  /// Frees what only encode() and find() use (their tables, scores, merges): `tpc run` encodes its prompt
  /// once and then only decodes (for 262k tokens that is ~5 MiB rank 0 holds alone). encode() and find()
  /// throw TokenizerError afterwards. Not thread-safe: no other call may run meanwhile.
  void dropEncoder();

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

/// Streaming detokenizer: feeds pieces and returns only complete UTF-8 sequences, holding back a partial
/// multi-byte character until the next piece completes it (byte tokens split characters).
class StreamDecoder {
public:
  /// `continuation`: the text continues earlier text (a generated answer after its prompt), so the first
  /// piece keeps its leading space even where encode() adds a space prefix.
  /// `special`: control tokens give their text (a chat answer's format markers, read by tpc serve's
  /// output parser) instead of nothing.
  explicit StreamDecoder(const Tokenizer &tok, bool continuation = false, bool special = false)
      : tok(tok), first(!continuation), special(special) {}
  /// Text that became complete after adding `id`.
  std::string push(TokenId id);
  /// Whatever is still held back (an incomplete sequence at the end of generation), as is.
  std::string flush();

private:
  const Tokenizer &tok;
  std::string pending;
  bool first;
  bool special;
};

/// Code point classes used by the pre-tokenizers (from the generated UnicodeTables.inc).
namespace unicode {
enum : uint32_t {
  Undefined = 0x001,
  Number = 0x002,
  Letter = 0x004,
  Separator = 0x008,
  AccentMark = 0x010,
  Punctuation = 0x020,
  Symbol = 0x040,
  Control = 0x080,
  Whitespace = 0x100,
};
/// Flags of code point `cpt` (0 beyond U+10FFFF).
uint32_t flags(uint32_t cpt);
/// Decodes UTF-8 leniently: each byte of a malformed sequence becomes U+FFFD (as in llama.cpp).
std::vector<uint32_t> decodeUtf8(std::string_view s);
/// Appends the UTF-8 encoding of `cpt`.
void appendUtf8(std::string &out, uint32_t cpt);
/// Length of the UTF-8 sequence that starts with byte `b` (1 for invalid lead bytes).
size_t utf8Len(unsigned char b);
/// Splits `text` into pre-tokens with the named pre-tokenizer ("gpt2", "llama3", "qwen2", "qwen35",
/// "default").
/// Returns the pieces in the original UTF-8 (not byte-level encoded).
std::vector<std::string> preTokenize(std::string_view text, std::string_view pre);
} // namespace unicode

} // namespace tpc::rt

#endif // TPC_RUNTIME_TOKENIZER_TOKENIZER_H
