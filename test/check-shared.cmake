# Exit 77 (ctest: skipped) with a message when the shared fixtures are missing.
if(NOT EXISTS "${DIR}/fixtures/README.md")
  message("SKIPPED: ${DIR}/fixtures not found; fixture and tokenizer tests are skipped (set -DTPC_SHARED_DIR)")
  cmake_language(EXIT 77)
endif()
message("fixtures found in ${DIR}")
