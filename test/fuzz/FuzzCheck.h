//===- FuzzCheck.h - assertions for the libFuzzer targets -----------*- C++ -*-===//
//
// FUZZ_CHECK(cond) traps when cond is false, so libFuzzer records the input as a crash (asserts may be
// compiled out; the targets run at -O1 without NDEBUG guarantees).
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_FUZZ_FUZZCHECK_H
#define TPC_TEST_FUZZ_FUZZCHECK_H

#define FUZZ_CHECK(cond)                                                                                     \
  do {                                                                                                       \
    if (!(cond))                                                                                             \
      __builtin_trap();                                                                                      \
  } while (0)

#endif // TPC_TEST_FUZZ_FUZZCHECK_H
