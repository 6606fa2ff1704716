# ctest wrapper for tests that read ../shared:
#   cmake -DDIR=<TPC_SHARED_DIR> [-DWHAT=<what is skipped>] -P check-shared.cmake [-- COMMAND ARGS...]
# Without DIR/fixtures it prints one line starting with "tpc-shared-skip:", which the test's
# SKIP_REGULAR_EXPRESSION (tpc_add_shared_test in cmake/TpcTesting.cmake) makes ctest report as Skipped.
# CMake 3.25 (Debian 12) cannot exit with ctest's skip code 77: cmake_language(EXIT) needs 3.29. With the
# fixtures present it runs COMMAND, if any, and fails when COMMAND fails.
if(NOT EXISTS "${DIR}/fixtures/README.md")
  if(NOT WHAT)
    set(WHAT "the fixture and tokenizer tests")
  endif()
  message("tpc-shared-skip: ${DIR}/fixtures not found; ${WHAT} skipped (set -DTPC_SHARED_DIR=...)")
  return()
endif()
set(cmd)
set(after_dashes FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_dashes)
    list(APPEND cmd "${CMAKE_ARGV${i}}")
  elseif("${CMAKE_ARGV${i}}" STREQUAL "--")
    set(after_dashes TRUE)
  endif()
endforeach()
if("${cmd}" STREQUAL "")
  message("fixtures found in ${DIR}")
  return()
endif()
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "failed (exit ${rc}): ${cmd}")
endif()
