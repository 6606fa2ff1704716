//===- MpiTestUtil.h - what the MPI test binaries share --------------*- C++ -*-===//
//
// testWorld(): the process's MpiWorld, initialised by MpiTestMain.cpp before any test runs. Tests in these
// binaries run on every rank of the job in the same order; a collective in a test meets the same test's
// collective on the other ranks.
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_MPI_MPITESTUTIL_H
#define TPC_TEST_MPI_MPITESTUTIL_H

#include "runtime/comm/MpiWorld.h"

#include <memory>

namespace tpc::test {

/// This process's part of the MPI job (valid while the tests run).
std::shared_ptr<rt::comm::MpiWorld> testWorld();

} // namespace tpc::test

#endif // TPC_TEST_MPI_MPITESTUTIL_H
