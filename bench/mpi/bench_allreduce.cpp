//===- bench_allreduce.cpp - all-reduce latency per call over MPI ----------===//
//
//   mpirun -np 2 [--mca btl tcp,self] tpc-bench-mpi-allreduce FLOATS [CALLS]
//
// Every rank sums FLOATS floats in place CALLS times (default 2000, after 200 warm-up calls) through
// MpiCommunicator, as a CPU rank's decode step does; rank 0 prints the median and mean microseconds per
// call over 5 rounds and the bytes each rank sends per call (MPI_Allreduce at 2 ranks: the whole payload).
// Then, on rank 0 alone, the in-process communicator with 2 threads on the same payload, for comparison.
//===----------------------------------------------------------------------===//
#include "runtime/comm/InProcessCommunicator.h"
#include "runtime/comm/MpiCommunicator.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

using namespace tpc::rt;
using Clock = std::chrono::steady_clock;

namespace {

/// Microseconds per call of `calls` calls of `step`.
template <typename F> double perCall(int calls, F step) {
  const auto t0 = Clock::now();
  for (int i = 0; i < calls; ++i)
    step();
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: mpirun -np N tpc-bench-mpi-allreduce FLOATS [CALLS]\n");
    return 2;
  }
  const int64_t n = std::atoll(argv[1]);
  const int calls = argc > 2 ? std::atoi(argv[2]) : 2000;
  auto world = comm::MpiWorld::init();
  if (!world) {
    fmt::print(stderr, "tpc-bench-mpi-allreduce: {}\n", world.message());
    return 1;
  }
  const int rank = (*world)->rank(), size = (*world)->size();
  std::vector<float> x(size_t(n), 0.0f); // zeros: repeated sums stay finite
  {
    comm::MpiCommunicator c(*world);
    auto step = [&] {
      if (auto ok = c.allReduce(rank, {{x.data(), n}}); !ok) {
        fmt::print(stderr, "tpc-bench-mpi-allreduce: {}\n", ok.message());
        (*world)->abortJob(1);
      }
    };
    perCall(200, step);
    std::vector<double> rounds;
    for (int r = 0; r < 5; ++r)
      rounds.push_back(perCall(calls, step));
    double mean = 0;
    for (double v : rounds)
      mean += v / rounds.size();
    if (rank == 0)
      fmt::print("mpi         ranks={} floats={} bytes/call sent per rank={} median={:.1f} us mean={:.1f} us\n",
                 size, n, size == 2 ? n * 4 : 2 * (size - 1) * n * 4 / size, median(rounds), mean);
  }
  if (rank == 0) { // the in-process communicator, 2 device threads, same payload
    comm::InProcessCommunicator ip(2);
    std::vector<float> y(size_t(n), 0.0f);
    std::vector<double> rounds;
    for (int r = 0; r < 6; ++r) {
      double us = 0;
      std::thread peer([&] {
        for (int i = 0; i < calls; ++i)
          (void)ip.allReduce(1, {{y.data(), n}});
      });
      us = perCall(calls, [&] { (void)ip.allReduce(0, {{x.data(), n}}); });
      peer.join();
      if (r > 0) // the first round warms up
        rounds.push_back(us);
    }
    fmt::print("in-process  threads=2 floats={} median={:.1f} us\n", n, median(rounds));
  }
  return 0;
}
