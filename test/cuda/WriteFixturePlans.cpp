//===- WriteFixturePlans.cpp - hand-built fixture plans as files, for GPU machines ---===//
//
// `tpc-cuda-fixture-plans OUT_DIR` writes `<fixture>-d<N>.plan` for the shared fixtures at 1 and 2 devices,
// built by the CPU fixture test's LlamaPlanBuilder (the same plans the CPU backend is checked with):
// CudaFixture.PlansMatchReferenceOnOneGpu runs it into a temporary folder and checks every plan on CUDA,
// so a GPU machine needs no MLIR compiler for that test.
// `tpc-cuda-fixture-plans --gguf MODEL.gguf --devices N OUT.plan` builds the same kind of plan for any
// llama/qwen3moe GGUF (e.g. a `tpc synth` model for benchmarks), heads and FFN split evenly (FFN in
// multiples of 256, so K-quant blocks stay whole), max_batch 64 (the builder's activation limit).
// The builder lives in an anonymous namespace of test/runtime/exec/FixtureTest.cpp; including that file
// here reuses it without copying (its TESTs get registered in this tool but never run: no RUN_ALL_TESTS).
//===----------------------------------------------------------------------===//
#include "test/runtime/exec/FixtureTest.cpp"

#include <cstdio>
#include <fstream>

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
    const std::string src = std::string(shared) + "/fixtures/" + j.name + ".gguf";
    if (!std::ifstream(src)) { // a machine may carry some of the fixtures only (bench/gpu/prepare.sh)
      std::printf("%s: missing, no plans written\n", src.c_str());
      continue;
    }
    auto file = gguf::GGUFFile::open(src);
    if (!file) {
      std::fprintf(stderr, "tpc-cuda-fixture-plans: %s\n", file.message().c_str());
      return 1;
    }
    for (const std::vector<Share> *shares : {j.one, j.two}) {
      if (!shares)
        continue;
      LlamaPlanBuilder builder(**file);
      Plan plan = builder.build(*shares, 64); // 64: room for three sequences' prompts in one batch
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

/// Even shares of heads and FFN rows for n devices (n = 1 or 2; KV heads split when there are enough).
std::vector<Share> evenShares(const gguf::GGUFFile &f, int n) {
  const std::string arch = *f.getString("general.architecture");
  const int64_t h = *f.getU32(arch + ".attention.head_count"),
                hkv = *f.getU32(arch + ".attention.head_count_kv");
  const int64_t ffn = arch == "qwen3moe" ? *f.getU32(arch + ".expert_feed_forward_length")
                                         : *f.getU32(arch + ".feed_forward_length");
  if (n == 1)
    return {{0, h, 0, hkv, 0, ffn}};
  const int64_t f0 = (ffn / 2 + 255) / 256 * 256;
  return {{0, h / 2, 0, hkv / 2, 0, f0}, {h / 2, h - h / 2, hkv / 2, hkv - hkv / 2, f0, ffn - f0}};
}

int writeOne(const std::string &path, int n, const std::string &out) {
  auto file = gguf::GGUFFile::open(path);
  if (!file) {
    std::fprintf(stderr, "tpc-cuda-fixture-plans: %s\n", file.message().c_str());
    return 1;
  }
  if (n != 1 && n != 2) {
    std::fprintf(stderr, "tpc-cuda-fixture-plans: --devices must be 1 or 2\n");
    return 1;
  }
  LlamaPlanBuilder builder(**file);
  Plan plan = builder.build(evenShares(**file, n), 64);
  plan.model.defaultCtx = 1024;
  auto ok = writePlan(plan, out);
  if (!ok || ::testing::Test::HasFailure()) {
    std::fprintf(stderr, "tpc-cuda-fixture-plans: %s\n", ok ? "the builder failed" : ok.message().c_str());
    return 1;
  }
  std::printf("%s\n", out.c_str());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 6 && std::string(argv[1]) == "--gguf" && std::string(argv[3]) == "--devices")
    return writeOne(argv[2], std::atoi(argv[4]), argv[5]);
  if (argc != 2) {
    std::fprintf(stderr, "usage: tpc-cuda-fixture-plans OUT_DIR (with TPC_SHARED_DIR set)\n"
                         "       tpc-cuda-fixture-plans --gguf MODEL.gguf --devices N OUT.plan\n");
    return 2;
  }
  return writeAll(argv[1]);
}
