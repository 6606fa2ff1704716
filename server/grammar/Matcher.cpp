//===- Matcher.cpp - grammar-constrained token selection -------------------===//
//
// The automaton's expansion is a work list (no recursion: a deep stack of nested rules pops many frames
// in a row) with a seen-set, so an ambiguous grammar yields each (position, stack) once; left recursion was
// refused by the parser, so expansion ends. A frame continuing at an End is never pushed (tail call), so
// repetition (x' ::= x x' | "") keeps stacks flat.
//===----------------------------------------------------------------------===//
#include "server/grammar/Matcher.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace tpc::server::grammar {

Automaton::Automaton(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  std::vector<int32_t> stacks;
  for (uint32_t a : g_->alts[g_->root])
    expand(a, -1, stacks);
  start_ = intern(std::move(stacks), 0, 0, false);
}

int32_t Automaton::frame(uint32_t pos, int32_t next) {
  const uint64_t key = (uint64_t(pos) << 32) | uint32_t(next + 1);
  auto [it, fresh] = frameIds_.try_emplace(key, static_cast<int32_t>(frames_.size()));
  if (fresh)
    frames_.push_back({pos, next});
  return it->second;
}

void Automaton::expand(uint32_t pos, int32_t tail, std::vector<int32_t> &out) {
  const std::vector<Element> &el = g_->elems;
  work_.push_back({pos, tail});
  while (!work_.empty()) {
    auto [p, t] = work_.back();
    work_.pop_back();
    if (!seen_.insert((uint64_t(p) << 32) | uint32_t(t + 1)).second)
      continue;
    const Element &e = el[p];
    if (e.op == Element::Op::End) {
      if (t < 0)
        out.push_back(-1); // the whole input may end here
      else
        work_.push_back({frames_[t].pos, frames_[t].next});
    } else if (e.op == Element::Op::Chars) {
      out.push_back(frame(p, t));
    } else {
      const int32_t cont = el[p + 1].op == Element::Op::End ? t : frame(p + 1, t);
      for (uint32_t a : g_->alts[e.arg])
        work_.push_back({a, cont});
    }
  }
}

int32_t Automaton::intern(std::vector<int32_t> stacks, uint32_t partial, uint8_t remain, bool anyTail) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.empty())
    return kDead;
  std::string key(reinterpret_cast<const char *>(stacks.data()), stacks.size() * sizeof(int32_t));
  key.append(reinterpret_cast<const char *>(&partial), sizeof partial);
  key.push_back(static_cast<char>(remain));
  key.push_back(anyTail ? 1 : 0);
  auto it = stateIds_.find(key);
  if (it != stateIds_.end())
    return it->second;
  if (states_.size() >= kMaxStates)
    throw std::length_error("the grammar needs more than " + std::to_string(kMaxStates) +
                            " matcher states for one step; simplify it (smaller repetition counts)");
  State st;
  st.canEnd = remain == 0 && stacks.front() == -1;
  st.mustEnd = st.canEnd && stacks.size() == 1;
  st.stacks = std::move(stacks);
  st.partial = partial;
  st.remain = remain;
  st.anyTail = anyTail;
  const int32_t id = static_cast<int32_t>(states_.size());
  states_.push_back(std::move(st));
  table_.resize(table_.size() + 256, kUnknown);
  stateIds_.emplace(std::move(key), id);
  return id;
}

int32_t Automaton::build(int32_t s, uint8_t b) {
  const std::vector<int32_t> stacks = states_[s].stacks; // a copy: interning may grow states_
  // A partial character is kept as its bytes so far (packed, lead byte highest), so the second byte can
  // be checked against the lead: overlong forms (E0 80 A0 for a space), surrogates (ED A0..) and code
  // points past U+10FFFF are refused as a strict UTF-8 decoder refuses them.
  uint32_t packed = 0;
  uint8_t remain = 0;
  const uint8_t had = states_[s].remain;
  const bool anyTail = had > 0 && states_[s].anyTail;
  if (had == 0) {
    if (b >= 0x80) {
      if (b >= 0xC2 && b <= 0xDF)
        remain = 1;
      else if (b >= 0xE0 && b <= 0xEF)
        remain = 2;
      else if (b >= 0xF0 && b <= 0xF4)
        remain = 3;
      else
        return kDead; // a continuation byte without a lead, or a byte UTF-8 never uses
    }
    packed = b;
  } else {
    const uint32_t prev = states_[s].partial;
    if ((b & 0xC0) != 0x80)
      return kDead;
    if (prev < 0x100) { // the first continuation byte: its range depends on the lead
      if ((prev == 0xE0 && b < 0xA0) || (prev == 0xED && b > 0x9F) || (prev == 0xF0 && b < 0x90) ||
          (prev == 0xF4 && b > 0x8F))
        return kDead;
    }
    packed = (prev << 8) | b;
    remain = static_cast<uint8_t>(had - 1);
  }
  // The code point bits so far.
  const int n = packed >= 0x1000000 ? 4 : packed >= 0x10000 ? 3 : packed >= 0x100 ? 2 : 1;
  const uint32_t lead = packed >> (8 * (n - 1));
  const int len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  uint32_t v = len == 1 ? lead : len == 2 ? (lead & 0x1Fu) : len == 3 ? (lead & 0x0Fu) : (lead & 0x07u);
  for (int i = n - 2; i >= 0; --i)
    v = (v << 6) | ((packed >> (8 * i)) & 0x3Fu);
  if (remain > 0 && anyTail)
    return intern(stacks, packed, remain, true);
  if (remain > 0) {
    // A partial character: alive while some stack's class holds a code point starting with these bits.
    // The range is cut to what the sequence's length may encode (E0 starts U+0800, not U+0000), or a lead
    // byte with no valid continuation would be accepted and the next step find nothing allowed.
    static constexpr uint32_t kMinOfLength[] = {0, 0, 0x80, 0x800, 0x10000};
    const uint32_t lo = std::max(v << (6 * remain), kMinOfLength[len]);
    const uint32_t hi = std::min((v << (6 * remain)) | ((1u << (6 * remain)) - 1), 0x10FFFFu);
    if (lo > hi)
      return kDead;
    bool mixed = false;         // a class holding part of [lo, hi]: the next bytes decide
    std::vector<int32_t> whole; // the stacks whose class holds all of it
    for (int32_t f : stacks) {
      if (f < 0)
        continue;
      const CharClass &cls = g_->classes[g_->elems[frames_[f].pos].arg];
      if (cls.covers(lo, hi))
        whole.push_back(f);
      else if (cls.intersects(lo, hi))
        mixed = true;
    }
    if (mixed)
      return intern(stacks, packed, remain, false);
    if (whole.empty())
      return kDead;
    // Every stack left takes whatever character these bytes begin, so the exact bytes no longer matter:
    // all such prefixes share one state (a canonical lead with no second-byte rule), or each of the
    // thousands of multi-byte prefixes of a JSON string's mask walk would be a state of its own.
    if (packed < 0x100 && (packed == 0xE0 || packed == 0xED || packed == 0xF0 || packed == 0xF4))
      return intern(std::move(whole), packed, remain, false);
    uint32_t canon = len == 2 ? 0xC2u : len == 3 ? 0xE1u : 0xF1u;
    for (int i = 1; i < n; ++i)
      canon = (canon << 8) | 0x80u;
    return intern(std::move(whole), canon, remain, true);
  }
  if (anyTail) { // the character is complete and every stack's class takes it
    std::vector<int32_t> out;
    seen_.clear();
    for (int32_t f : stacks)
      if (f >= 0)
        expand(frames_[f].pos + 1, frames_[f].next, out);
    return intern(std::move(out), 0, 0, false);
  }
  if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
    return kDead;
  std::vector<int32_t> out;
  seen_.clear();
  for (int32_t f : stacks) {
    if (f < 0)
      continue;
    const Frame fr = frames_[f];
    if (g_->classes[g_->elems[fr.pos].arg].matches(v))
      expand(fr.pos + 1, fr.next, out);
  }
  return intern(std::move(out), 0, 0, false);
}

int32_t Automaton::compact(int32_t keep) {
  // Copy the kept state's stacks (their frames and the frames below them) into fresh tables.
  State st = states_[keep];
  std::vector<Frame> oldFrames;
  oldFrames.swap(frames_);
  frameIds_.clear();
  std::unordered_map<int32_t, int32_t> remap;
  // Each stack's frames bottom first (a stack may be as deep as the text is nested: no recursion).
  auto copy = [&](int32_t top) -> int32_t {
    std::vector<int32_t> chain;
    for (int32_t f = top; f >= 0 && !remap.count(f); f = oldFrames[f].next)
      chain.push_back(f);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const int32_t below = oldFrames[*it].next;
      remap.emplace(*it, frame(oldFrames[*it].pos, below < 0 ? below : remap.at(below)));
    }
    return top < 0 ? top : remap.at(top);
  };
  std::vector<int32_t> stacks;
  for (int32_t f : st.stacks)
    stacks.push_back(copy(f));
  states_.clear();
  stateIds_.clear();
  table_.clear();
  return intern(std::move(stacks), st.partial, st.remain, st.anyTail);
}

Vocabulary::Vocabulary(const rt::Tokenizer &tok) {
  const size_t n = tok.size();
  offsets_.reserve(n + 1);
  eog_.assign(n, false);
  offsets_.push_back(0);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    eog_[i] = tok.isEog(id);
    if (eog_[i])
      eogIds_.push_back(id);
    else
      blob_ += tok.tokenToPiece(id, false); // "" for control, unknown and unused tokens
    offsets_.push_back(static_cast<uint32_t>(blob_.size()));
  }
  // The trie: tokens sorted by bytes, nodes appended depth first along the sorted order.
  std::vector<int32_t> order;
  for (size_t i = 0; i < n; ++i)
    if (!bytes(static_cast<int32_t>(i)).empty() && bytes(static_cast<int32_t>(i)).size() < 65535)
      order.push_back(static_cast<int32_t>(i));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const auto x = bytes(a), y = bytes(b);
    return x < y || (x == y && a < b);
  });
  nodes_.push_back(Node{});      // the root
  std::vector<uint32_t> path{0}; // node index per depth
  std::string_view prev;
  for (int32_t id : order) {
    const std::string_view b = bytes(id);
    size_t common = 0;
    while (common < b.size() && common < prev.size() && b[common] == prev[common])
      ++common;
    while (path.size() > common + 1) {
      nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < b.size(); ++d) {
      Node nd;
      nd.byte = static_cast<uint8_t>(b[d]);
      nd.depth = static_cast<uint16_t>(d + 1);
      nd.firstToken = static_cast<uint32_t>(tokens_.size());
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back(nd);
    }
    Node &last = nodes_[path.back()];
    if (last.nTokens == 0)
      last.firstToken = static_cast<uint32_t>(tokens_.size());
    ++last.nTokens;
    tokens_.push_back(id);
    maxDepth_ = std::max(maxDepth_, b.size());
    prev = b;
  }
  while (!path.empty()) {
    nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
    path.pop_back();
  }
}

Matcher::Matcher(std::shared_ptr<const Grammar> g, const Vocabulary &vocab, std::vector<int32_t> endTokens,
                 bool allowEnd)
    : a_(std::move(g)), vocab_(vocab), endTokens_(std::move(endTokens)), allowEnd_(allowEnd),
      state_(a_.start()) {
  std::sort(endTokens_.begin(), endTokens_.end());
}

bool Matcher::isEnd(int32_t id) const {
  return (id >= 0 && static_cast<size_t>(id) < vocab_.size() && vocab_.endOfGeneration(id)) ||
         std::binary_search(endTokens_.begin(), endTokens_.end(), id);
}

bool Matcher::accepts(int32_t id) {
  ++stats_.checks;
  if (id < 0 || static_cast<size_t>(id) >= vocab_.size())
    return false;
  if (isEnd(id))
    return allowEnd_ && a_.canEnd(state_);
  const std::string_view b = vocab_.bytes(id);
  return !b.empty() && a_.walk(state_, b) != Automaton::kDead;
}

void Matcher::allowed(std::vector<int32_t> &ids) {
  const auto t0 = std::chrono::steady_clock::now();
  ids.clear();
  mark_.assign(vocab_.size(), 0); // marked, then collected in order: no sort of a 262k list
  const std::vector<Vocabulary::Node> &nodes = vocab_.nodes();
  const std::vector<int32_t> &toks = vocab_.nodeTokens();
  depthState_.assign(vocab_.maxDepth() + 1, Automaton::kDead);
  depthState_[0] = state_;
  // Depth-first order: a node's parent state is at depth - 1; a dead prefix skips its whole subtree.
  for (size_t k = 1; k < nodes.size();) {
    const Vocabulary::Node &nd = nodes[k];
    const int32_t s = a_.next(depthState_[nd.depth - 1], nd.byte);
    if (s == Automaton::kDead) {
      k = nd.end;
      continue;
    }
    depthState_[nd.depth] = s;
    for (uint32_t t = nd.firstToken; t < nd.firstToken + nd.nTokens; ++t)
      mark_[static_cast<size_t>(toks[t])] = 1;
    ++k;
  }
  if (allowEnd_ && a_.canEnd(state_)) {
    for (int32_t id : vocab_.endOfGenerationIds())
      mark_[static_cast<size_t>(id)] = 1;
    for (int32_t id : endTokens_)
      if (id >= 0 && static_cast<size_t>(id) < mark_.size())
        mark_[static_cast<size_t>(id)] = 1;
  }
  for (size_t i = 0; i < mark_.size(); ++i)
    if (mark_[i])
      ids.push_back(static_cast<int32_t>(i));
  ++stats_.masks;
  stats_.maskSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool Matcher::accept(int32_t id) {
  if (!accepts(id))
    return false;
  if (!isEnd(id))
    state_ = a_.walk(state_, vocab_.bytes(id));
  if (a_.stateCount() > Automaton::kCompactStates)
    state_ = a_.compact(state_);
  return true;
}

} // namespace tpc::server::grammar
