//===- bench_exec.cpp - executor latency per decode token and per prompt -----===//
//
// Opens a plan and times Session::evaluate: a prompt of PP tokens, then TG single-token decode steps,
// REPS times. Prints the minimum and the median per decode token and per prompt: the minimum is what the
// executor costs (a shared machine only ever adds time), the median what a run sees. Also t/s per
// CPU-second of the process times the thread count: what an otherwise idle machine would give (spinning
// workers count as busy, so this errs low), the number to compare on an oversubscribed machine. Used to
// compare executor changes (thread hand-off, barriers) in one run, e.g. two builds alternating on one plan.
//
// Usage: tpc-bench-exec PLAN [threads=2] [pp=64] [tg=64] [reps=5]
// With TPC_BENCH_STEPS=N set, also prints device 0's N slowest steps (name, op, shapes, ms per call).
//===----------------------------------------------------------------------===//
#include "runtime/exec/Executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

using namespace tpc::rt;

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double cpuNow() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PLAN [threads=2] [pp=64] [tg=64] [reps=5]\n", argv[0]);
    return 2;
  }
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  const int pp = argc > 3 ? std::atoi(argv[3]) : 64, tg = argc > 4 ? std::atoi(argv[4]) : 64;
  const int reps = argc > 5 ? std::atoi(argv[5]) : 5;
  auto plan = loadPlan(argv[1]);
  if (!plan) {
    std::fprintf(stderr, "bench: %s\n", plan.message().c_str());
    return 1;
  }
  SessionOptions o;
  o.threads = threads;
  o.ctxSize = pp + tg + 1;
  auto s = Session::open(std::move(*plan), o);
  if (!s) {
    std::fprintf(stderr, "bench: %s\n", s.message().c_str());
    return 1;
  }
  const int32_t vocab = static_cast<int32_t>((*s)->nVocab());
  std::vector<double> prompt, token;
  double promptCpu = 0, tokenCpu = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<int32_t> ids(pp), pos(pp);
    for (int i = 0; i < pp; ++i)
      ids[i] = (i * 7 + 1) % vocab, pos[i] = i;
    double t0 = now(), c0 = cpuNow();
    if (!(*s)->evaluate(ids, pos)) {
      std::fprintf(stderr, "bench: evaluate failed\n");
      return 1;
    }
    prompt.push_back(now() - t0);
    promptCpu += cpuNow() - c0;
    c0 = cpuNow();
    for (int i = 0; i < tg; ++i) {
      double t1 = now();
      if (!(*s)->evaluate({(i * 5 + 3) % vocab}, {pp + i}))
        return 1;
      token.push_back(now() - t1);
    }
    tokenCpu += cpuNow() - c0;
  }
  if (const char *top = std::getenv("TPC_BENCH_STEPS")) {
    (*s)->setProfiling(true);
    std::vector<int32_t> ids(pp), pos(pp);
    for (int i = 0; i < pp; ++i)
      ids[i] = (i * 7 + 1) % vocab, pos[i] = i;
    (void)(*s)->evaluate(ids, pos);
    auto prof = (*s)->profile();
    std::vector<size_t> order(prof.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return prof[a].seconds > prof[b].seconds; });
    const Plan &plan = (*s)->plan();
    for (size_t i = 0; i < std::min<size_t>(order.size(), std::atoi(top)); ++i) {
      const StepProfile &sp = prof[order[i]];
      const Step &st = plan.devices[0].steps[order[i]];
      std::string shapes;
      for (int32_t id : st.inputs) {
        shapes += " [";
        for (int64_t d : plan.devices[0].tensors[id].shape)
          shapes += std::to_string(d) + ",";
        shapes += "]";
      }
      std::printf("step %zu %s (%s): %.3f ms per call, inputs%s\n", order[i], sp.name.c_str(),
                  opKindName(sp.op), sp.calls ? sp.seconds / sp.calls * 1e3 : 0.0, shapes.c_str());
    }
  }
  std::printf("per cpu-second x %d threads: pp%d %.1f t/s, tg %.1f t/s\n", threads, pp,
              double(pp) * reps * threads / promptCpu, double(tg) * reps * threads / tokenCpu);
  std::printf("decode: min %.1f us, median %.1f us per token; prompt %d: min %.2f ms, median %.2f ms "
              "(%d threads, %zu devices)\n",
              *std::min_element(token.begin(), token.end()) * 1e6, median(token) * 1e6, pp,
              *std::min_element(prompt.begin(), prompt.end()) * 1e3, median(prompt) * 1e3, threads,
              (*s)->plan().devices.size());
  return 0;
}
