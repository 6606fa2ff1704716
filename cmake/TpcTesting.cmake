# tpc_add_gtest(NAME SOURCES a.cpp b.cpp LIBS x y)
# A GoogleTest binary whose cases become ctest tests (discovered when ctest runs, so the build never
# executes test binaries). TPC_SHARED_DIR reaches the tests as the environment variable TPC_SHARED_DIR;
# tests that need it call GTEST_SKIP() with a message when it is missing, which ctest reports as skipped.
function(tpc_add_gtest name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    TPC_SOURCE_DIR="${CMAKE_SOURCE_DIR}" TPC_BINARY_DIR="${CMAKE_BINARY_DIR}")
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES ENVIRONMENT "TPC_SHARED_DIR=${TPC_SHARED_DIR}" SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]"
      # CPU sessions run CPUID's best level, as before calibration, and write no cache file into the home
      # of whoever runs the tests (runtime/cpu/KernelChoice.h); the tests of the calibration set their own.
      ENVIRONMENT_MODIFICATION "TPC_CPU_CALIBRATE=set:0")
endfunction()

# tpc_add_shared_test(NAME [WHAT text] [COMMAND cmd args...])
# A ctest test that needs ../shared (TPC_SHARED_DIR): checked when the test runs, so ctest reports it as
# Skipped (with a line saying what is skipped) when the fixtures are absent, and runs COMMAND otherwise
# (test/check-shared.cmake; without COMMAND the test only reports whether the fixtures are there).
function(tpc_add_shared_test name)
  cmake_parse_arguments(ARG "" "WHAT" "COMMAND" ${ARGN})
  set(cmd ${CMAKE_COMMAND} -DDIR=${TPC_SHARED_DIR} "-DWHAT=${ARG_WHAT}" -P ${CMAKE_SOURCE_DIR}/test/check-shared.cmake)
  if(ARG_COMMAND)
    list(APPEND cmd -- ${ARG_COMMAND})
  endif()
  add_test(NAME ${name} COMMAND ${cmd})
  set_tests_properties(${name} PROPERTIES SKIP_REGULAR_EXPRESSION "tpc-shared-skip:")
endfunction()
