//===- HashIndex.h - open-addressing index of strings the caller owns --*- C++ -*-===//
//
// The tokenizer's lookup tables (token text -> id, merge pair -> rank) over strings that already live in
// TokenizerData: one allocation of 8-byte slots (a 32-bit hash tag and an id), linear probing, load at
// most 1/2. Built in one pass; for a 262k-token vocabulary that is a few milliseconds, where a
// std::unordered_map of string views took ~85 ms (a node allocation per token) and as long again to free.
// The caller hashes its key with hashBytes() and says how to compare an id's key with the one sought.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_TOKENIZER_HASHINDEX_H
#define TPC_RUNTIME_TOKENIZER_HASHINDEX_H

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace tpc::rt {

/// A 64-bit hash of `s` chained onto `h` (pass the previous result to hash several parts; each part's
/// length is mixed in, so ("ab","c") and ("a","bc") differ).
inline uint64_t hashBytes(std::string_view s, uint64_t h = 0x9E3779B97F4A7C15ull) {
  const char *p = s.data();
  const size_t n = s.size();
  auto load32 = [](const char *q) {
    uint32_t v;
    std::memcpy(&v, q, 4);
    return uint64_t(v);
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  // The last 0..7 bytes with fixed-size loads (two overlapping 4-byte reads, or first/middle/last byte),
  // as wyhash does: a variable-length memcpy per token cost more than the hashing itself.
  const size_t r = n - i;
  const char *t = p + i;
  uint64_t tail = r >= 4  ? (load32(t) << 32) | load32(t + r - 4)
                  : r > 0 ? (uint64_t(uint8_t(t[0])) << 16) | (uint64_t(uint8_t(t[r >> 1])) << 8) | uint8_t(t[r - 1])
                          : 0;
  // MurmurHash3's finalizer: every input bit reaches the low bits the table indexes with (a single
  // multiply leaves the high bytes and the length out of them, and tokens sharing a prefix then collide).
  h ^= tail ^ (uint64_t(n) << 56);
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  return h ^ (h >> 33);
}

/// Ids indexed by the hash of their key; keys are compared through the caller's function.
class HashIndex {
public:
  /// Empties the index and sizes it for `n` entries.
  void reset(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n)
      cap *= 2;
    slots_.assign(cap, Slot{0, -1});
    mask_ = cap - 1;
  }
  /// Adds `id` under hash `h`; an entry for which `same(otherId)` holds is replaced (a later duplicate
  /// wins, as llama.cpp keeps the last id of a repeated token text).
  template <typename Same> void insert(uint64_t h, int32_t id, Same same) {
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot &s = slots_[i];
      if (s.id < 0 || (s.tag == tag && same(s.id))) {
        s = Slot{tag, id};
        return;
      }
    }
  }
  /// The id stored under hash `h` for which `match(id)` holds, or -1.
  template <typename Match> int32_t find(uint64_t h, Match match) const {
    if (slots_.empty())
      return -1;
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot &s = slots_[i];
      if (s.id < 0)
        return -1;
      if (s.tag == tag && match(s.id))
        return s.id;
    }
  }

private:
  struct Slot {
    uint32_t tag;
    int32_t id;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

} // namespace tpc::rt

#endif // TPC_RUNTIME_TOKENIZER_HASHINDEX_H
