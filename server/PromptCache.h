//===- PromptCache.h - which slot a request runs in, and what it keeps -*- C++ -*-===//
//
// Prompt caching (llama-server's cache_prompt, on by default in the API): a slot keeps its sequence's
// KV cache after its request finishes, together with the token ids at its positions. A new request goes
// to the free slot whose sequence shares the longest prefix with its prompt; the engine keeps that
// prefix (Engine::keepPrefix) and only the rest of the prompt is read. The last prompt token is always
// read again, because its logits row gives the first generated token.
//
// What an engine can keep is its own business (Engine::canKeepPrefix): a full KV cache any prefix, a
// sliding-window ring only a short rewind, and a recurrent state (Gated DeltaNet, qwen35) only its whole
// sequence, since its state cannot step back (a rewind would recompute the sequence from position 0,
// which saves nothing). A prefix the engine cannot keep counts as 0: the slot starts over.
//
// Among slots that keep equally much (often none), the one used longest ago is taken, so the caches of
// recent conversations survive the longest.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_PROMPTCACHE_H
#define TPC_SERVER_PROMPTCACHE_H

#include <cstdint>
#include <functional>
#include <vector>

namespace tpc::server {

/// What the choice needs to know of one slot.
struct SlotCacheView {
  bool busy = false;
  const std::vector<int32_t> *tokens = nullptr; ///< the ids at the positions its sequence holds
  uint64_t lastUsed = 0;                        ///< admission counter of its last request (0: never)
};

/// The slot a request runs in and the prefix of its sequence it keeps.
struct SlotChoice {
  int32_t slot = -1; ///< -1: no slot fits now (all busy, or the asked slot is busy)
  int32_t keep = 0;  ///< positions kept: the prompt's first `keep` tokens are not read again
};

/// Length of the common prefix of `a` and `b`.
size_t commonPrefix(const std::vector<int32_t> &a, const std::vector<int32_t> &b);

/// Picks the slot for `prompt` (see the file comment). `idSlot` >= 0 asks for that slot only;
/// `cache` false keeps nothing. canKeep(slot, n): whether the engine can keep n > 0 positions of slot.
SlotChoice pickSlot(const std::vector<int32_t> &prompt, const std::vector<SlotCacheView> &slots,
                    int32_t idSlot, bool cache, const std::function<bool(int32_t, int32_t)> &canKeep);

} // namespace tpc::server

#endif // TPC_SERVER_PROMPTCACHE_H
