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
    PROPERTIES ENVIRONMENT "TPC_SHARED_DIR=${TPC_SHARED_DIR}" SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()
