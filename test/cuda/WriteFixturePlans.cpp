//===- WriteFixturePlans.cpp - hand-built fixture plans as files, for GPU machines ---===//
//
// `tpc-cuda-fixture-plans OUT_DIR` writes `<fixture>-d<N>.plan` for the shared fixtures at 1 and 2 devices,
// built by the CPU fixture test's LlamaPlanBuilder (the same plans the CPU backend is checked with), so
// CudaFixture.PlansMatchReferenceOnOneGpu can run them where there is a GPU but no MLIR compiler.
// The builder lives in an anonymous namespace of test/runtime/exec/FixtureTest.cpp; including that file
// here reuses it without copying (its TESTs get registered in this tool but never run: no RUN_ALL_TESTS).
//===----------------------------------------------------------------------===//
#include "test/runtime/exec/FixtureTest.cpp"

#include <cstdio>

namespace {

int writeAll(const std::string &out) {
  const char *shared = std::getenv("TPC_SHARED_DIR");
  if (!shared) {
    std::fprintf(stderr, "tpc-cuda-fixture-plans: set TPC_SHARED_DIR to the folder holding fixtures/\n");
    return 1;
  }
  struct Job {
    const char *name;
    const std::vector<Share> *one, *two;
  };
  const Job jobs[] = {{"tiny-llama", &kOne, &kTwo},
                      {"tiny-llama-Q8_0", &kOne, &kTwo},
                      {"tiny-llama-Q4_K_M", &kOne, nullptr}, // Q4_K blocks are 256 wide: no 2-way head split
                      {"tiny-qwen3moe", &kMoeOne, &kMoeTwo},
                      {"tiny-qwen3moe-Q8_0", &kMoeOne, &kMoeTwo},
                      {"tiny-qwen3moe-Q4_K_M", &kMoeOne, nullptr},
                      {"tiny-gemma3", &kGemmaOne, &kGemmaTwo}};
  for (const Job &j : jobs) {
    auto file = gguf::GGUFFile::open(std::string(shared) + "/fixtures/" + j.name + ".gguf");
    if (!file) {
      std::fprintf(stderr, "tpc-cuda-fixture-plans: %s\n", file.error().c_str());
      return 1;
    }
    for (const std::vector<Share> *shares : {j.one, j.two}) {
      if (!shares)
        continue;
      LlamaPlanBuilder builder(**file);
      Plan plan = builder.build(*shares, 16);
      const std::string path = out + "/" + j.name + "-d" + std::to_string(shares->size()) + ".plan";
      auto ok = writePlan(plan, path);
      if (!ok) {
        std::fprintf(stderr, "tpc-cuda-fixture-plans: %s\n", ok.message().c_str());
        return 1;
      }
      std::printf("%s\n", path.c_str());
    }
  }
  return ::testing::Test::HasFailure() ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tpc-cuda-fixture-plans OUT_DIR (with TPC_SHARED_DIR set)\n");
    return 2;
  }
  return writeAll(argv[1]);
}
