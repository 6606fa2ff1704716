//===- Request.cpp - request events, client text, log-probabilities -------===//
#include "server/Request.h"

#include <algorithm>
#include <cmath>

namespace tpc::server {

const char *finishReasonName(FinishReason r) {
  switch (r) {
  case FinishReason::Stop:
    return "stop";
  case FinishReason::Length:
    return "length";
  case FinishReason::Cancelled:
    return "cancelled";
  case FinishReason::Error:
    return "error";
  }
  return "stop";
}

bool Request::next(Event &e, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); }))
    return false;
  e = std::move(events_.front());
  events_.pop_front();
  return true;
}

void Request::cancel() {
  if (!cancelled_.exchange(true) && wake_)
    wake_();
}

void Request::push(Event e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

std::string TextStream::push(int32_t id) {
  if (stopped_)
    return {};
  held_ += decoder_.push(id);
  // The earliest stop string wins; everything from it on is dropped.
  size_t cut = std::string::npos;
  for (const std::string &s : stop_)
    if (!s.empty())
      cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string &s : stop_) {
    if (s.empty())
      continue;
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len)
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string TextStream::flush() {
  if (stopped_)
    return {};
  std::string out = held_ + decoder_.flush();
  held_.clear();
  return out;
}

TokenLogprob logprobOf(const float *row, size_t n, int32_t id, int32_t top, std::vector<TokenLogprob> &best) {
  float mx = -INFINITY;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(row[i]))
      mx = std::max(mx, row[i]);
  double sum = 0;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(row[i]))
      sum += std::exp(double(row[i]) - mx);
  const double logZ = mx + std::log(sum);
  auto lp = [&](size_t i) {
    return std::isfinite(row[i]) ? static_cast<float>(double(row[i]) - logZ) : -INFINITY;
  };
  best.clear();
  if (top > 0) {
    std::vector<int32_t> ids(n);
    for (size_t i = 0; i < n; ++i)
      ids[i] = static_cast<int32_t>(i);
    const size_t k = std::min(static_cast<size_t>(top), n);
    auto better = [&](int32_t a, int32_t b) {
      const float la = lp(static_cast<size_t>(a)), lb = lp(static_cast<size_t>(b));
      return la != lb ? la > lb : a < b;
    };
    std::partial_sort(ids.begin(), ids.begin() + static_cast<long>(k), ids.end(), better);
    for (size_t i = 0; i < k; ++i)
      best.push_back({ids[i], lp(static_cast<size_t>(ids[i]))});
  }
  return {id, lp(static_cast<size_t>(id))};
}

} // namespace tpc::server
