//===- Progress.h - progress of long work on stderr ---------------*- C++ -*-===//
//
// Loading a 5 GB model's weights, compiling a large model, `--bench` rounds and perplexity chunks take
// seconds to minutes; without a sign of life a user cannot tell slow from stuck. A Progress shows nothing
// for work that ends within a second (TPC_PROGRESS_AFTER, seconds), then, on stderr:
//  - a terminal: one bar redrawn in place at most 10 times a second, and a newline when done;
//  - anything else (a log, a pipe, CI): a plain line every 5 s (TPC_PROGRESS_EVERY, seconds), and one
//    line when done, so logs neither stay silent nor fill with carriage returns.
// progressAllowed() turns every Progress off: `--no-progress` on any command and the quiet flag
// `--log-disable` (main.cpp). Counting is thread-safe (device threads add their own bytes); drawing is
// done by whichever thread finds the time has come, one at a time.
//
// Usage:
//   Progress p("loading weights, device 0", totalBytes, "bytes");
//   ... p.add(copied);            // from any thread
//   p.finish();                   // or let it go out of scope
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_SUPPORT_PROGRESS_H
#define TPC_RUNTIME_SUPPORT_PROGRESS_H

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

namespace tpc {

/// False after `--no-progress` or a quiet flag: no Progress draws anything.
inline std::atomic<bool> &progressAllowed() {
  static std::atomic<bool> allowed{true};
  return allowed;
}

class Progress {
public:
  /// `what` names the work; `total` units of `unit` ("bytes" prints GiB, MiB or KiB; anything else is a
  /// count, e.g. "chunks"). `enabled` false (a caller's own switch) makes it inert.
  Progress(std::string what, uint64_t total, std::string unit, bool enabled = true)
      : what_(std::move(what)), unit_(std::move(unit)), total_(total),
        enabled_(enabled && total > 0 && progressAllowed().load()), start_(Clock::now()) {
    after_ = seconds("TPC_PROGRESS_AFTER", 1.0);
    every_ = seconds("TPC_PROGRESS_EVERY", 5.0);
    tty_ = ::isatty(STDERR_FILENO) == 1;
  }
  Progress(const Progress &) = delete;
  Progress &operator=(const Progress &) = delete;
  ~Progress() { finish(); }

  void add(uint64_t n) {
    done_.fetch_add(n, std::memory_order_relaxed);
    tick();
  }
  void set(uint64_t n) {
    done_.store(n, std::memory_order_relaxed);
    tick();
  }
  /// Ends the display: the bar at its final value and a newline, or one "done" line; nothing when nothing
  /// was shown (work under the threshold stays silent). Idempotent.
  void finish() {
    if (!enabled_)
      return;
    std::lock_guard<std::mutex> lock(draw_);
    if (finished_)
      return;
    finished_ = true;
    if (!shown_)
      return;
    const double secs = elapsed();
    if (tty_)
      std::fprintf(stderr, "\r%s %s\n", bar().c_str(), padding().c_str());
    else
      std::fprintf(stderr, "%s: done, %s in %.1f s\n", what_.c_str(), amount(done_.load()).c_str(), secs);
    std::fflush(stderr);
  }

private:
  using Clock = std::chrono::steady_clock;

  static double seconds(const char *env, double fallback) {
    const char *v = std::getenv(env);
    if (!v || !*v)
      return fallback;
    char *end = nullptr;
    const double s = std::strtod(v, &end);
    return end != v && s >= 0 ? s : fallback;
  }
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  /// Bytes in the unit that suits the total (GiB, MiB or KiB), so a small load does not read "0.00/0.00 GiB".
  std::pair<double, const char *> scale() const {
    if (total_ >= (1ull << 30))
      return {double(1ull << 30), "GiB"};
    return total_ >= (1ull << 20) ? std::pair<double, const char *>{double(1ull << 20), "MiB"}
                                  : std::pair<double, const char *>{1024.0, "KiB"};
  }
  std::string amount(uint64_t n) const {
    char buf[64];
    if (unit_ == "bytes")
      std::snprintf(buf, sizeof buf, "%.2f %s", double(n) / scale().first, scale().second);
    else
      std::snprintf(buf, sizeof buf, "%llu %s", static_cast<unsigned long long>(n), unit_.c_str());
    return buf;
  }
  std::string of() const {
    const uint64_t d = std::min(done_.load(), total_);
    char buf[96];
    if (unit_ == "bytes")
      std::snprintf(buf, sizeof buf, "%.2f/%.2f %s", double(d) / scale().first,
                    double(total_) / scale().first, scale().second);
    else
      std::snprintf(buf, sizeof buf, "%llu/%llu %s", static_cast<unsigned long long>(d),
                    static_cast<unsigned long long>(total_), unit_.c_str());
    return buf;
  }
  int percent() const { return static_cast<int>(std::min(done_.load(), total_) * 100 / total_); }
  std::string bar() const {
    const int pct = percent();
    std::string b =
        what_ + " [" + std::string(size_t(pct / 4), '#') + std::string(size_t(25 - pct / 4), ' ') + "] ";
    char buf[16];
    std::snprintf(buf, sizeof buf, "%3d%% ", pct);
    return b + buf + of();
  }
  static std::string padding() { return "   "; } // clears a longer previous figure

  void tick() {
    if (!enabled_)
      return;
    const double secs = elapsed();
    if (secs < after_)
      return;
    std::unique_lock<std::mutex> lock(draw_, std::try_to_lock);
    if (!lock.owns_lock() || finished_)
      return; // another thread draws now
    const double gap = tty_ ? 0.1 : every_;
    if (shown_ && secs - lastDraw_ < gap)
      return;
    shown_ = true;
    lastDraw_ = secs;
    if (tty_)
      std::fprintf(stderr, "\r%s %s", bar().c_str(), padding().c_str());
    else
      std::fprintf(stderr, "%s: %d%% (%s), %.0f s\n", what_.c_str(), percent(), of().c_str(), secs);
    std::fflush(stderr);
  }

  std::string what_, unit_;
  uint64_t total_ = 0;
  bool enabled_ = false, tty_ = false;
  Clock::time_point start_;
  double after_ = 1.0, every_ = 5.0;
  std::atomic<uint64_t> done_{0};
  std::mutex draw_;
  bool shown_ = false, finished_ = false;
  double lastDraw_ = 0;
};

} // namespace tpc

#endif // TPC_RUNTIME_SUPPORT_PROGRESS_H
