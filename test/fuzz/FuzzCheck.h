//===- FuzzCheck.h - assertions for the libFuzzer targets -----------*- C++ -*-===//
//
// FUZZ_CHECK(cond) prints the condition and traps when it is false, so libFuzzer records the input as a crash
// (asserts may be compiled out; the targets run at -O1 without NDEBUG guarantees).
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_FUZZ_FUZZCHECK_H
#define TPC_TEST_FUZZ_FUZZCHECK_H

#include <cstdio>

/// Traps after naming the failed condition, so a crash report says which invariant broke.
#define FUZZ_CHECK(cond)                                                                                     \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);                     \
      __builtin_trap();                                                                                      \
    }                                                                                                        \
  } while (0)

#endif // TPC_TEST_FUZZ_FUZZCHECK_H
