//===- ActivationCache.cpp - activations converted once per input -----------===//
//
// A short vector searched linearly: a device holds a handful of live converted inputs at a time.
// Evicted buffers are reused when the new copy fits, so a steady decode loop allocates nothing.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ActivationCache.h"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace tpc::rt::cpu {

void ActivationCache::Free::operator()(uint8_t *p) const { std::free(p); }

const uint8_t *ActivationCache::get(int key, const float *x, int64_t m, int64_t k, size_t stride, size_t rowBytes,
                                    const std::function<void(uint8_t *)> &fill) {
  for (const Entry &e : entries_)
    if (e.key == key && e.x == x && e.m == m && e.k == k && (m <= 1 || e.stride == stride)) {
      ++hits_;
      return e.data.get();
    }
  ++conversions_;
  const size_t bytes = rowBytes * static_cast<size_t>(m);
  std::unique_ptr<uint8_t, Free> buf;
  size_t cap = 0;
  if (entries_.size() >= kMaxEntries) { // evict the oldest, keeping its buffer if it is large enough
    if (entries_.front().bytes >= bytes) {
      buf = std::move(entries_.front().data);
      cap = entries_.front().bytes;
    }
    entries_.erase(entries_.begin());
  }
  if (!buf) {
    const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    buf.reset(static_cast<uint8_t *>(std::aligned_alloc(64, rounded)));
    if (!buf)
      throw std::bad_alloc();
    cap = rounded;
  }
  fill(buf.get());
  const uint8_t *lo = reinterpret_cast<const uint8_t *>(x);
  const size_t span = m > 0 ? ((static_cast<size_t>(m) - 1) * stride + static_cast<size_t>(k)) * sizeof(float) : 0;
  entries_.push_back(Entry{key, x, m, k, stride, lo, lo + span, std::move(buf), cap});
  return entries_.back().data.get();
}

void ActivationCache::invalidate(const void *p, size_t bytes) {
  if (entries_.empty() || bytes == 0)
    return;
  const uint8_t *lo = static_cast<const uint8_t *>(p), *hi = lo + bytes;
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const Entry &e) { return e.lo < hi && lo < e.hi; }),
                 entries_.end());
}

void ActivationCache::clear() { entries_.clear(); }

} // namespace tpc::rt::cpu
