//===- SpinWait.h - spin, then yield, then block ------------------*- C++ -*-===//
//
// The waiting policy of the CPU runtime's hand-offs (thread-group workers, device threads between chunks,
// ranks at an in-process barrier): spin with a pause hint for a few microseconds, then yield the core
// until a deadline, then block. Decode meets at these points several times a layer, so a futex wake-up
// (50-100 us on a busy machine) must not be on the critical path when a peer is only a little late;
// yielding keeps the waiter ready without starving other runnable threads, and an idle waiter still
// sleeps once the deadline passes, so an idle session costs no CPU.
//
// Usage:
//   waitUntil([&] { return flag.load(std::memory_order_acquire); }, 300, std::chrono::milliseconds(2),
//             [&] { std::unique_lock<std::mutex> l(mu); cv.wait(l, [&] { return flag.load(); }); });
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_SUPPORT_SPINWAIT_H
#define TPC_RUNTIME_SUPPORT_SPINWAIT_H

#include <chrono>
#include <thread>

namespace tpc {

/// The pause hint of a spin loop (PAUSE on x86-64: ~70 ns on the VMs; nothing elsewhere).
inline void cpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

/// Work a waiting thread may do between its checks (thread-local; none by default): the CPU session's
/// device threads run units of the other in-process devices' matmuls while they wait at a collective.
/// `fn(ctx)` does one short piece of work and returns whether there was any.
struct SpinHelp {
  bool (*fn)(void *ctx) = nullptr;
  void *ctx = nullptr;
};
inline thread_local SpinHelp tlsSpinHelp;

/// Sets this thread's SpinHelp for the lifetime of the object (restoring the previous one).
class ScopedSpinHelp {
public:
  ScopedSpinHelp(bool (*fn)(void *), void *ctx) : saved_(tlsSpinHelp) { tlsSpinHelp = {fn, ctx}; }
  ~ScopedSpinHelp() { tlsSpinHelp = saved_; }
  ScopedSpinHelp(const ScopedSpinHelp &) = delete;
  ScopedSpinHelp &operator=(const ScopedSpinHelp &) = delete;

private:
  SpinHelp saved_;
};

/// Returns once done() holds: checks it `spins` times with a pause hint between, then yields between
/// checks until `yieldFor` has passed since the call, then calls block() between checks. block() sleeps
/// until the condition may hold (a condition variable's predicate); it may return early (the loop checks
/// done() again). Between checks the thread's SpinHelp runs first; while it finds work, the thread neither
/// pauses, yields nor blocks, and the spin and yield phases start over after it (a peer that still had work
/// is likely to arrive soon).
template <typename Done, typename Block>
void waitUntil(Done done, int spins, std::chrono::steady_clock::duration yieldFor, Block block) {
  auto start = std::chrono::steady_clock::now();
  const SpinHelp help = tlsSpinHelp;
  for (int i = 0; !done(); ++i) {
    if (help.fn && help.fn(help.ctx)) {
      i = -1;
      start = std::chrono::steady_clock::now();
      continue;
    }
    if (i < spins)
      cpuRelax();
    else if (std::chrono::steady_clock::now() - start < yieldFor)
      std::this_thread::yield();
    else
      block();
  }
}

} // namespace tpc

#endif // TPC_RUNTIME_SUPPORT_SPINWAIT_H
