//===- PromptCache.cpp - which slot a request runs in, and what it keeps ---===//
#include "server/PromptCache.h"

#include <algorithm>

namespace tpc::server {

size_t commonPrefix(const std::vector<int32_t> &a, const std::vector<int32_t> &b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i])
    ++i;
  return i;
}

SlotChoice pickSlot(const std::vector<int32_t> &prompt, const std::vector<SlotCacheView> &slots,
                    int32_t idSlot, bool cache, const std::function<bool(int32_t, int32_t)> &canKeep) {
  // The prefix slot i keeps: shared with the prompt, short of the prompt's last token (see the header).
  auto keepOf = [&](int32_t i) -> int32_t {
    const SlotCacheView &v = slots[static_cast<size_t>(i)];
    if (!cache || !v.tokens || prompt.empty())
      return 0;
    const size_t n = std::min(commonPrefix(*v.tokens, prompt), prompt.size() - 1);
    return n > 0 && canKeep(i, static_cast<int32_t>(n)) ? static_cast<int32_t>(n) : 0;
  };
  const int32_t count = static_cast<int32_t>(slots.size());
  if (idSlot >= 0) {
    if (idSlot >= count || slots[static_cast<size_t>(idSlot)].busy)
      return {};
    return {idSlot, keepOf(idSlot)};
  }
  SlotChoice best;
  uint64_t bestUsed = 0;
  for (int32_t i = 0; i < count; ++i) {
    const SlotCacheView &v = slots[static_cast<size_t>(i)];
    if (v.busy)
      continue;
    const int32_t keep = keepOf(i);
    if (best.slot < 0 || keep > best.keep || (keep == best.keep && v.lastUsed < bestUsed)) {
      best = {i, keep};
      bestUsed = v.lastUsed;
    }
  }
  return best;
}

} // namespace tpc::server
