//===- Matcher.h - grammar-constrained token selection -------------*- C++ -*-===//
//
// Three pieces, from the grammar to the sampler:
//
// - Automaton: runs a Grammar over UTF-8 bytes as a pushdown matcher over code points, in llama.cpp's
//   style (a state is a set of stacks of grammar positions; a character pops the stacks whose top class
//   matches it and expands what follows into new stacks), built lazily into a DFA: each set of stacks (plus
//   a partial UTF-8 character, so a token may end inside a character) is interned once as a state, and its
//   transition on each byte is computed the first time it is asked and then read from a 256-entry table.
//   Stacks are persistent lists of hash-consed frames, so equal stacks are equal integers and a state's
//   stack set is a sorted vector of them. JSON's string state loops back to itself, so checking a token
//   or walking the vocabulary there costs one table read per byte.
// - Vocabulary: each token's bytes as they reach the client (computed once per server; control, unknown
//   and unused tokens have none and are never allowed) and a trie of them in depth-first order.
// - Matcher (one per constrained request): the current state; accepts(id) walks the token's bytes (the
//   sampler's fast path), allowed() walks the trie from the state and skips every subtree whose prefix
//   is dead (the mask, paid only when the sampled token was refused), accept(id) moves on. The
//   end-of-generation tokens are allowed exactly when the grammar can end here; mustEnd() says nothing
//   more can follow (the scheduler then finishes the request with "stop").
//
// Memory: a state costs 1 KiB of transitions; past kCompactStates the matcher keeps only its current
// state (accept() compacts), and a grammar needing more than kMaxStates in one mask walk is an error.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_GRAMMAR_MATCHER_H
#define TPC_SERVER_GRAMMAR_MATCHER_H

#include "runtime/sampler/Sampler.h"
#include "runtime/tokenizer/Tokenizer.h"
#include "server/grammar/Gbnf.h"

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tpc::server::grammar {

/// Lazily built DFA of a grammar over bytes (see the file comment). Single-threaded.
class Automaton {
public:
  static constexpr int32_t kDead = -1;
  static constexpr size_t kMaxStates = 1u << 16;
  static constexpr size_t kCompactStates = 1u << 14;

  explicit Automaton(std::shared_ptr<const Grammar> g);
  /// The state before any input.
  int32_t start() const { return start_; }
  /// The state after byte `b` from `s` (kDead when the grammar refuses it). Throws std::length_error past
  /// kMaxStates.
  int32_t next(int32_t s, uint8_t b) {
    const size_t at = static_cast<size_t>(s) * 256 + b;
    if (table_[at] == kUnknown) {
      const int32_t t = build(s, b); // may grow table_: no reference into it across this call
      table_[at] = t;
    }
    return table_[at];
  }
  /// The state after `bytes`, or kDead.
  int32_t walk(int32_t s, std::string_view bytes) {
    for (char c : bytes)
      if ((s = next(s, static_cast<uint8_t>(c))) == kDead)
        return kDead;
    return s;
  }
  /// The input may end here (a complete match, no partial character).
  bool canEnd(int32_t s) const { return states_[s].canEnd; }
  /// A complete match and nothing may follow.
  bool mustEnd(int32_t s) const { return states_[s].mustEnd; }
  /// Forgets every state but `keep` (bounds memory); returns `keep`'s new id.
  int32_t compact(int32_t keep);
  size_t stateCount() const { return states_.size(); }
  const Grammar &grammar() const { return *g_; }

private:
  static constexpr int32_t kUnknown = -2;
  struct Frame {
    uint32_t pos;
    int32_t next;
  };
  struct State {
    std::vector<int32_t> stacks; ///< top frames, sorted; -1 is the empty stack (a complete match)
    uint32_t partial = 0;        ///< the bytes of a partial UTF-8 character so far (packed, lead highest)
    uint8_t remain = 0;          ///< its continuation bytes still to come
    bool anyTail = false;        ///< every stack takes any character these bytes begin (partial is canonical)
    bool canEnd = false, mustEnd = false;
  };
  int32_t build(int32_t s, uint8_t b);
  int32_t frame(uint32_t pos, int32_t next);
  void expand(uint32_t pos, int32_t tail, std::vector<int32_t> &out);
  int32_t intern(std::vector<int32_t> stacks, uint32_t partial, uint8_t remain, bool anyTail);

  std::shared_ptr<const Grammar> g_;
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> frameIds_;
  std::vector<State> states_;
  std::unordered_map<std::string, int32_t> stateIds_;
  std::vector<int32_t> table_; ///< 256 transitions per state
  std::vector<std::pair<uint32_t, int32_t>> work_;
  std::unordered_set<uint64_t> seen_;
  int32_t start_ = 0;
};

/// The vocabulary as a grammar sees it (see the file comment). Immutable after construction.
class Vocabulary {
public:
  explicit Vocabulary(const rt::Tokenizer &tok);
  size_t size() const { return offsets_.size() - 1; }
  /// The token's bytes in output text; empty for a token that never appears as text.
  std::string_view bytes(int32_t id) const {
    return std::string_view(blob_).substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
  }
  bool endOfGeneration(int32_t id) const { return eog_[static_cast<size_t>(id)]; }
  const std::vector<int32_t> &endOfGenerationIds() const { return eogIds_; }

  /// Trie node in depth-first order: its subtree is [index, end); tokens [firstToken, +nTokens) end here.
  struct Node {
    uint32_t end = 0, firstToken = 0;
    uint16_t nTokens = 0, depth = 0;
    uint8_t byte = 0;
  };
  const std::vector<Node> &nodes() const { return nodes_; }
  const std::vector<int32_t> &nodeTokens() const { return tokens_; }
  size_t maxDepth() const { return maxDepth_; }

private:
  std::string blob_;
  std::vector<uint32_t> offsets_;
  std::vector<bool> eog_;
  std::vector<int32_t> eogIds_;
  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
  size_t maxDepth_ = 0;
};

/// Counters a matcher adds to: the masks it computed and their time (for /metrics and the benchmark).
struct MaskStats {
  uint64_t checks = 0, masks = 0;
  double maskSeconds = 0;
};

/// One constrained generation's grammar state; the sampler's TokenFilter (see the file comment).
class Matcher : public rt::TokenFilter {
public:
  /// `endTokens`: ids that end the generation besides the vocabulary's end-of-generation tokens (the
  /// chat template's end of turn); `allowEnd` false keeps them all refused (ignore_eos).
  Matcher(std::shared_ptr<const Grammar> g, const Vocabulary &vocab, std::vector<int32_t> endTokens,
          bool allowEnd);

  bool accepts(int32_t id) override;
  void allowed(std::vector<int32_t> &ids) override;
  /// Moves past token `id` (which accepts() allowed). Returns false for a refused token.
  bool accept(int32_t id);
  bool canEnd() const { return a_.canEnd(state_); }
  bool mustEnd() const { return a_.mustEnd(state_); }
  /// Whether `id` ends the generation (an end-of-generation or end-of-turn token).
  bool isEnd(int32_t id) const;
  const MaskStats &stats() const { return stats_; }

private:
  Automaton a_;
  const Vocabulary &vocab_;
  std::vector<int32_t> endTokens_;
  bool allowEnd_;
  int32_t state_;
  std::vector<int32_t> depthState_;
  std::vector<uint8_t> mark_;
  MaskStats stats_;
};

} // namespace tpc::server::grammar

#endif // TPC_SERVER_GRAMMAR_MATCHER_H
