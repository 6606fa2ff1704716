//===- FuzzCompile.cpp - libFuzzer target for the compile path -------------===//
//
// A model file the GGUF reader accepts is still untrusted: its hyperparameters and tensor shapes can be
// anything. This target runs what `tpc compile` runs, import -> the whole pipeline for 1, 2, 3 (uneven
// 3,2,1) or 4 devices -> emitPlan -> validatePlan (and the plan loader on the written plan), and checks
// that every outcome is either a plan or a clean error:
//  - an abort (LLVM ERROR from an op builder, an assert in a pass) or a sanitizer report is a crash;
//  - an import error names the file, and every error is one line;
//  - a module the importer returns, and the module after every pass that succeeded, verifies (the pass
//    manager's own verifier is replaced by one that traps instead of turning a bug into an error);
//  - a plan emission error is not one the emitter calls a tpc bug, and an emitted plan validates and
//    loads again.
// Inputs come from a structure-aware mutator (GGUFMutator.h) seeded with real models (the shared
// fixtures, examples/models/tiny-demo.gguf), so most inputs reach the importer. One input compiles for one
// device count, picked by a hash of its bytes (deterministic, so a finding replays; every mutation picks
// again, so all four are covered): four pipelines per input would cost four times the executions. The
// model is written to a temporary file because the plan records the GGUF's fingerprint, read from disk.
//===----------------------------------------------------------------------===//
#include "compiler/emit/PlanEmitter.h"
#include "compiler/gguf/GGUFFile.h"
#include "compiler/import/Importer.h"
#include "passes/Pipelines.h"
#include "runtime/plan/PlanIO.h"
#include "test/fuzz/FuzzCheck.h"
#include "test/fuzz/GGUFMutator.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

/// LLVM's BumpPtrAllocator poisons its slabs when the including code is built with ASan, but the MLIR
/// libraries share those inline functions uninstrumented: one side poisons what the other then reads (a
/// false use-after-poison in MLIRContext's constructor). Manual poisoning is off for this target; ASan
/// still checks every allocation of its own.
extern "C" const char *__asan_default_options() { return "allow_user_poisoning=0"; }

namespace {

/// Verifies the module after every pass that succeeded; a failure marks `broken` (a pass left invalid IR).
struct VerifyAfterEachPass : mlir::PassInstrumentation {
  explicit VerifyAfterEachPass(bool &broken) : broken(broken) {}
  void runAfterPass(mlir::Pass *, mlir::Operation *op) override {
    if (mlir::failed(mlir::verify(op)))
      broken = true;
  }
  bool &broken;
};

bool oneLine(const std::string &s) { return !s.empty() && s.find('\n') == std::string::npos; }

/// Errors reported while compiling one model (warnings and remarks are not checked).
struct Errors {
  std::vector<std::string> messages;
  void expectClean(const std::string &mustName = "") const {
    FUZZ_CHECK(!messages.empty()); // a failure always says why
    for (const std::string &m : messages) {
      FUZZ_CHECK(oneLine(m));
      FUZZ_CHECK(m.find("a tpc bug") == std::string::npos);
    }
    FUZZ_CHECK(mustName.empty() || messages.front().find(mustName) != std::string::npos);
  }
};

/// One pipeline run and plan emission of the imported `module`; returns normally for a plan or a clean
/// error, traps otherwise.
void compileFor(mlir::ModuleOp module, const tpc::gguf::GGUFFile &file, int64_t devices, Errors &errors) {
  mlir::OwningOpRef<mlir::ModuleOp> copy = module.clone();
  mlir::tpc::PipelineOptions options;
  options.devices = devices;
  if (devices == 3)
    options.tensorSplit = {3, 2, 1};
  options.maxBatch = 8; // arena sizes do not change what can fail; small ones keep the run fast
  mlir::PassManager pm(module.getContext());
  bool broken = false;
  pm.enableVerifier(false);
  pm.addInstrumentation(std::make_unique<VerifyAfterEachPass>(broken));
  FUZZ_CHECK(mlir::succeeded(mlir::tpc::buildTpcPipeline(pm, options)));
  errors.messages.clear();
  bool passed = mlir::succeeded(pm.run(*copy));
  FUZZ_CHECK(!broken);
  if (!passed) {
    errors.expectClean();
    return;
  }
  mlir::FailureOr<tpc::rt::Plan> plan = mlir::tpc::emitPlan(*copy, file, {"tpc fuzz"});
  if (mlir::failed(plan)) {
    errors.expectClean();
    return;
  }
  FUZZ_CHECK(errors.messages.empty());
  FUZZ_CHECK(tpc::rt::validatePlan(*plan).empty());
  std::vector<uint8_t> bytes = tpc::rt::serializePlan(*plan);
  FUZZ_CHECK(static_cast<bool>(tpc::rt::parsePlan(bytes.data(), bytes.size(), "fuzz plan")));
}

/// Imports `file` and compiles it for `devices` devices.
void compile(const tpc::gguf::GGUFFile &file, int64_t devices) {
  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  Errors errors;
  static const bool verbose = std::getenv("TPC_FUZZ_VERBOSE"); // replaying a finding: show every error
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    if (d.getSeverity() == mlir::DiagnosticSeverity::Error)
      errors.messages.push_back(d.str());
    if (verbose)
      std::fprintf(stderr, "diagnostic: %s\n", d.str().c_str());
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::tpc::importModel(ctx, file);
  if (!module) {
    errors.expectClean(file.path());
    return;
  }
  FUZZ_CHECK(errors.messages.empty());
  FUZZ_CHECK(mlir::succeeded(mlir::verify(*module)));
  compileFor(*module, file, devices, errors);
}

/// 1..4 from the input's bytes (FNV-1a over its size and up to 64 KiB of samples).
int64_t devicesFor(const uint8_t *data, size_t size) {
  uint64_t h = 1469598103934665603ull ^ size;
  for (size_t i = 0; i < size; i += 1 + size / 65536)
    h = (h ^ data[i]) * 1099511628211ull;
  return 1 + static_cast<int64_t>(h % 4);
}

/// This process's model file (the fuzzer may run several processes in one directory).
const std::string &modelPath() {
  static const std::string path = [] {
    const char *dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/tpc-fuzz-compile-" + std::to_string(getpid()) + ".gguf";
  }();
  return path;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string &path = modelPath();
  FILE *out = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(out && std::fwrite(data, 1, size, out) == size && std::fclose(out) == 0);
  tpc::Expected<std::unique_ptr<tpc::gguf::GGUFFile>> file = tpc::gguf::GGUFFile::open(path);
  if (!file) { // the GGUF reader's own target covers this; only the error's form is checked
    if (std::getenv("TPC_FUZZ_VERBOSE"))
      std::fprintf(stderr, "reader: %s\n", file.message().c_str());
    FUZZ_CHECK(oneLine(file.message()) && file.message().find(path) == 0);
    return 0;
  }
  compile(**file, devicesFor(data, size));
  return 0;
}

/// Mostly structure-aware mutation; now and then (and whenever the input is no longer a GGUF the writer
/// can reproduce) libFuzzer's byte mutation.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize, unsigned seed) {
  if (seed % 16 != 0)
    if (size_t n = tpc::fuzz::mutateGGUF(data, size, maxSize, seed))
      return n;
  return LLVMFuzzerMutate(data, size, maxSize);
}
