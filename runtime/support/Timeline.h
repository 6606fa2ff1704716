//===- Timeline.h - wall-clock phases of a start-up ---------------*- C++ -*-===//
//
// `tpc run --timings` prints where the time to the first token goes (plan load, tokenizer, GGUF check,
// arenas, weights, first evaluate). Code on the start-up path calls mark() after each phase when the caller
// passed a Timeline (SessionOptions::timeline); a null Timeline costs nothing. One thread marks. Each phase
// also records the process's CPU time (all threads), which on a shared machine says what the phase costs
// when its wall time is inflated by waiting for a core.
//
// Usage:
//   Timeline t;                 // starts the clock
//   load();  t.mark("plan load");
//   open();  t.mark("open");
//   for (auto &[phase, s] : t.phases()) print(phase, s);
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_SUPPORT_TIMELINE_H
#define TPC_RUNTIME_SUPPORT_TIMELINE_H

#include <chrono>
#include <ctime>
#include <string>
#include <vector>

namespace tpc {

/// Named phases, each the wall and CPU time since the previous mark (or since construction).
class Timeline {
public:
  struct Phase {
    std::string name;
    double wall = 0, cpu = 0; ///< seconds
  };
  Timeline() : last_(Clock::now()), start_(last_), lastCpu_(cpuNow()) {}
  /// Ends the current phase and names it.
  void mark(std::string phase) {
    const Clock::time_point now = Clock::now();
    const double cpu = cpuNow();
    phases_.push_back({std::move(phase), std::chrono::duration<double>(now - last_).count(), cpu - lastCpu_});
    last_ = now;
    lastCpu_ = cpu;
  }
  /// The phases in order.
  const std::vector<Phase> &phases() const { return phases_; }
  /// Wall seconds from construction to the last mark.
  double total() const { return std::chrono::duration<double>(last_ - start_).count(); }

private:
  using Clock = std::chrono::steady_clock;
  static double cpuNow() {
    timespec ts{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  }
  Clock::time_point last_, start_;
  double lastCpu_ = 0;
  std::vector<Phase> phases_;
};

/// Marks `t` when it is not null (the start-up code's optional timeline).
inline void markPhase(Timeline *t, const char *phase) {
  if (t)
    t->mark(phase);
}

} // namespace tpc

#endif // TPC_RUNTIME_SUPPORT_TIMELINE_H
