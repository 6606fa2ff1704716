//===- MpiTestMain.cpp - GoogleTest under mpirun ------------------------------===//
//
// The main() of the test binaries that run as the ranks of an MPI job (ctest starts them with mpirun): MPI
// is initialised once for the process (testWorld()), every rank runs the same tests in the same order
// (collectives pair up), rank 0 prints GoogleTest's usual output and the other ranks print only their
// failures, prefixed with the rank. The exit status is non-zero on every rank when a test failed on any
// rank, so mpirun's status says whether the job passed.
//===----------------------------------------------------------------------===//
#include "test/mpi/MpiTestUtil.h"

#include "runtime/comm/MpiLaunch.h"

#include <fmt/core.h>
#include <gtest/gtest.h>

namespace tpc::test {

namespace {
std::shared_ptr<rt::comm::MpiWorld> &worldSlot() {
  static std::shared_ptr<rt::comm::MpiWorld> w;
  return w;
}

/// The other ranks' output: only failed assertions, with the rank in front.
class FailurePrinter : public ::testing::EmptyTestEventListener {
public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult &r) override {
    if (r.failed())
      fmt::print(stderr, "[rank {}] {}:{}: failure\n{}\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }

private:
  int rank_;
};
} // namespace

std::shared_ptr<rt::comm::MpiWorld> testWorld() { return worldSlot(); }

} // namespace tpc::test

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!tpc::rt::comm::detectMpiLaunch().launched) {
    fmt::print(stderr, "{}: start this test under mpirun (e.g. mpirun -np 2 {})\n", argv[0], argv[0]);
    return 2;
  }
  auto world = tpc::rt::comm::MpiWorld::init();
  if (!world) {
    fmt::print(stderr, "{}\n", world.message());
    return 2;
  }
  tpc::test::worldSlot() = *world;
  const int rank = (*world)->rank();
  if (rank != 0) {
    ::testing::TestEventListeners &ls = ::testing::UnitTest::GetInstance()->listeners();
    delete ls.Release(ls.default_result_printer());
    ls.Append(new tpc::test::FailurePrinter(rank));
  }
  const int mine = RUN_ALL_TESTS();
  auto all = (*world)->allGather(mine ? "1" : "0");
  int failed = mine;
  if (all)
    for (const std::string &s : *all)
      failed |= s == "1";
  else
    failed = 1;
  if (failed && rank == 0 && !mine)
    fmt::print(stderr, "a test failed on another rank (its [rank N] lines above)\n");
  tpc::test::worldSlot().reset(); // MPI_Finalize
  world->reset();
  return failed ? 1 : 0;
}
