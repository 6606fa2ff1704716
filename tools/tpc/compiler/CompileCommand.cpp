//===- CompileCommand.cpp - `tpc compile` -----------------------------------===//
//
// `tpc compile model.gguf --devices N [--tensor-split 3,2,1] [--override-tensor REGEX=cpu]...
//  [--no-kv-offload] [-ctk/-ctv f16|q8_0|q4_0|f32] [--max-batch N] [--max-output-rows R] [-o plan.bin]`:
//  import the GGUF, run the tpc pipeline (the same
// builder tpc-opt's --tpc-pipeline uses) and write the device plan. `--emit=mlir [--stop-after STAGE]`
// prints the IR instead (after `import` or any pipeline stage); `--report [--json]` prints memory per
// device and the collectives per layer. MLIR diagnostics are collected and reported as one error line
// naming the model; warnings are printed as they come. llama.cpp's spellings work too: `-ot`, `-nkvo`,
// `-ts` (main.cpp), a comma-separated list in one --override-tensor, and the target `CPU`. `-c N` sets the
// plan's default context; `--fit BUDGETS [--fit-ctx-min N] [--fit-kv q8_0|q4_0]` chooses the flags that make
// every device's memory fit (Fit.h) and then compiles as if they had been given.
//===----------------------------------------------------------------------===//
#include "compiler/emit/PlanEmitter.h"
#include "compiler/gguf/GGUFFile.h"
#include "compiler/import/Importer.h"
#include "passes/Pipelines.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/support/Progress.h"
#include "tools/tpc/Command.h"
#include "tools/tpc/ModelSource.h"
#include "tools/tpc/compiler/CompileReport.h"
#include "tools/tpc/compiler/Fit.h"

#include "dialects/tpc/IR/TpcOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace tpc::cli {
namespace {

struct CompileOptions {
  std::string model;
  CompileFlags flags; ///< --devices, --tensor-split, ... (shared with run and serve: ModelSource.h)
  std::string output;
  std::string emit = "plan";
  std::string stopAfter;
  bool printIrAfterAll = false;
  bool report = false;
  bool json = false;
  int64_t ctx = 0;           ///< -c: the plan's default context (0: the emitter's)
  std::string fit;           ///< --fit budgets (Fit.h)
  int64_t fitCtxMin = 4096;  ///< --fit-ctx-min
  std::string fitKv = "f16"; ///< --fit-kv: the lowest KV cache type --fit may choose
};

std::string printIR(mlir::ModuleOp m) {
  std::string text;
  llvm::raw_string_ostream os(text);
  m.print(os);
  return text;
}

void writeText(const std::string &path, const std::string &text) {
  if (path.empty() || path == "-") {
    fmt::print("{}", text);
    return;
  }
  std::unique_ptr<FILE, int (*)(FILE *)> out(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!out || std::fwrite(text.data(), 1, text.size(), out.get()) != text.size())
    throw Failure(path + ": cannot write the output (-o)");
}

/// Counts the passes run on the module itself (the top level of the pipeline) into a Progress.
class PassProgress : public mlir::PassInstrumentation {
public:
  PassProgress(mlir::ModuleOp module, std::shared_ptr<Progress> shown)
      : module_(module.getOperation()), shown_(std::move(shown)) {}
  void runAfterPass(mlir::Pass *, mlir::Operation *op) override {
    if (op == module_)
      shown_->add(1);
  }

private:
  mlir::Operation *module_;
  std::shared_ptr<Progress> shown_;
};

/// One compilation of a GGUF: the file, an MLIR context whose errors are collected into one line (warnings
/// are printed as they come, prefixed `who`), the module. Each step throws Failure naming the model.
class Compilation {
public:
  Compilation(const std::string &model, std::string who) : model_(model), who_(std::move(who)) {
    auto file = gguf::GGUFFile::open(model);
    if (!file)
      throw Failure(file.message());
    file_ = std::move(*file);
    ctx_.disableMultithreading(); // module passes only; and IR printing needs it
    handler_ = std::make_unique<mlir::ScopedDiagnosticHandler>(&ctx_, [this](mlir::Diagnostic &d) {
      if (d.getSeverity() == mlir::DiagnosticSeverity::Warning)
        fmt::print(stderr, "{}: warning: {}\n", who_, d.str());
      if (d.getSeverity() != mlir::DiagnosticSeverity::Error)
        return mlir::success();
      if (!diagnostics_.empty())
        diagnostics_ += "; ";
      diagnostics_ += d.str();
      return mlir::success();
    });
  }

  void import() {
    module_ = mlir::tpc::importModel(ctx_, *file_);
    if (!module_)
      throw Failure(diagnostics_.empty() ? model_ + ": import failed" : diagnostics_);
    if (mlir::failed(mlir::verify(*module_)))
      throw Failure(model_ + ": the imported module does not verify (a tpc bug): " + diagnostics_);
  }

  /// The tpc pipeline up to `stopAfter` ("" = all of it).
  void runPipeline(const CompileRequest &r, const std::string &stopAfter, bool printIrAfterAll) {
    mlir::tpc::PipelineOptions pipe;
    pipe.devices = r.devices / r.stages; // the split inside one stage (StageFlags.cpp checked it divides)
    pipe.stages = r.stages;
    pipe.stageLayers = r.stageLayers;
    pipe.tensorSplit = r.tensorSplit;
    pipe.overrideTensor = r.overrideTensor;
    pipe.noKvOffload = r.noKvOffload;
    pipe.maxBatch = r.maxBatch;
    pipe.maxOutputRows = r.maxOutputRows;
    pipe.moeSplit = r.moeSplit;
    pipe.routingProfile = r.routingProfile;
    mlir::PassManager pm(&ctx_);
    if (mlir::failed(mlir::tpc::buildTpcPipeline(pm, pipe, stopAfter)))
      throw Failure("--stop-after: cannot build the pipeline up to '" + stopAfter + "'");
    if (printIrAfterAll)
      pm.enableIRPrinting([](mlir::Pass *, mlir::Operation *) { return false; },
                          [](mlir::Pass *, mlir::Operation *) { return true; },
                          /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false);
    // A large model's passes take seconds each: progress per top-level pass (nothing under a second).
    auto shown =
        std::make_shared<Progress>(fmt::format("compiling {}", model_),
                                   static_cast<uint64_t>(std::distance(pm.begin(), pm.end())), "passes");
    pm.addInstrumentation(std::make_unique<PassProgress>(*module_, shown));
    const mlir::LogicalResult ran = pm.run(*module_);
    shown->finish();
    if (mlir::failed(ran))
      throw Failure(fmt::format("{}: compiling for {} device(s) failed: {}", model_, r.devices,
                                diagnostics_.empty() ? "a pass failed without a message" : diagnostics_));
  }

  rt::Plan emit(const CompileRequest &r) {
    mlir::tpc::EmitOptions eo;
    eo.compilerVersion = std::string("tpc ") + TPC_VERSION;
    eo.cacheTypeK = r.cacheTypeK;
    eo.cacheTypeV = r.cacheTypeV;
    mlir::FailureOr<rt::Plan> plan = mlir::tpc::emitPlan(*module_, *file_, eo);
    if (mlir::failed(plan))
      throw Failure(fmt::format("{}: plan emission failed: {}", model_, diagnostics_));
    plan->commDtype = r.commDtype; // recorded only: the runtime's communicators apply it
    return std::move(*plan);
  }

  mlir::ModuleOp module() { return *module_; }

private:
  std::string model_, who_;
  std::unique_ptr<gguf::GGUFFile> file_;
  mlir::MLIRContext ctx_;
  std::string diagnostics_;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler_;
  mlir::OwningOpRef<mlir::ModuleOp> module_;
};

/// --fit: the request and context Fit.h's search chooses from the user's flags, its decisions printed on
/// stderr (stdout stays the report's, JSON included).
std::pair<CompileRequest, int64_t> fitRequest(const CompileOptions &opts, const CompileRequest &given) {
  FitOptions fo;
  fo.budgets = parseFitBudgets(opts.fit);
  const size_t n = fo.budgets.devices.size();
  const bool devicesGiven = opts.flags.devicesOption && opts.flags.devicesOption->count() > 0;
  if ((devicesGiven || !given.tensorSplit.empty()) && size_t(given.devices) != n)
    throw Failure(fmt::format("--fit {} gives {} budget(s) for {} device(s); give one budget per device",
                              opts.fit, n, given.devices));
  CompileRequest base = given;
  base.devices = int64_t(n);
  fo.ctxStart = opts.ctx;
  fo.ctxMin = opts.fitCtxMin;
  fo.kvLowest = opts.fitKv;
  fo.sharesGiven = !given.tensorSplit.empty();
  fo.moeSplitGiven = std::any_of(opts.flags.options.begin(), opts.flags.options.end(), [](CLI::Option *o) {
    return o && o->get_name() == "--moe-split" && o->count() > 0;
  });
  auto compile = [&](const CompileRequest &r) {
    Compilation c(opts.model, "tpc compile --fit");
    c.import();
    c.runPipeline(r, "", false);
    return c.emit(r);
  };
  FitResult fit =
      fitToBudgets(base, fo, compile, [](const std::string &line) { fmt::print(stderr, "{}\n", line); });
  return {fit.request, fit.ctx};
}

void runCompile(const CompileOptions &opts) {
  const auto &stages = mlir::tpc::pipelineStages();
  if (!opts.stopAfter.empty()) {
    if (opts.emit != "mlir")
      throw Failure("--stop-after needs --emit=mlir (a plan is written only after the whole pipeline)");
    if (opts.stopAfter != "import" && llvm::find(stages, opts.stopAfter) == stages.end()) {
      std::string all = "import";
      for (const std::string &s : stages)
        all += ", " + s;
      throw Failure(fmt::format("--stop-after: unknown stage '{}' (stages: {})", opts.stopAfter, all));
    }
  }
  if (opts.json && !opts.report)
    throw Failure("--json needs --report");
  if (opts.report && opts.emit != "plan")
    throw Failure("--report describes the plan; it cannot be combined with --emit=" + opts.emit);
  CompileRequest request = checkCompileFlags(opts.flags);
  int64_t ctx = opts.ctx;
  if (opts.fit.empty() && (opts.fitKv != "f16" || opts.fitCtxMin != 4096))
    throw Failure("--fit-kv and --fit-ctx-min tell --fit what it may choose; give --fit BUDGETS too");
  if (!opts.fit.empty()) {
    if (opts.emit != "plan")
      throw Failure("--fit chooses a plan; it cannot be combined with --emit=" + opts.emit);
    if (request.stages > 1)
      throw Failure("--fit with --stages is not supported yet (it sizes one stage's devices)");
    std::tie(request, ctx) = fitRequest(opts, request);
  }

  Compilation c(opts.model, "tpc compile");
  c.import();
  if (opts.stopAfter != "import")
    c.runPipeline(request, opts.stopAfter, opts.printIrAfterAll);
  if (opts.emit == "mlir") {
    writeText(opts.output, printIR(c.module()));
    return;
  }
  rt::Plan plan = c.emit(request);
  if (ctx > 0)
    plan.model.defaultCtx = ctx;
  if (opts.report)
    printReport(opts.model, opts.json, c.module(), plan);
  // With --report the plan is written only where -o asks for it.
  std::string out = opts.output.empty() && !opts.report ? "plan.bin" : opts.output;
  if (out.empty())
    return;
  auto written = rt::writePlan(plan, out);
  if (!written)
    throw Failure(written.message() + " (-o)");
  if (!opts.report)
    fmt::print(stderr, "tpc compile: wrote {} ({} device(s), {} steps on device 0)\n", out,
               plan.devices.size(), plan.devices.empty() ? 0 : plan.devices[0].steps.size());
}

void registerCompile(CLI::App &app) {
  auto opts = std::make_shared<CompileOptions>();
  CLI::App *cmd = app.add_subcommand("compile", "Compile a GGUF model into a device plan (or tpc IR)");
  cmd->add_option("model", opts->model, "GGUF model file")->required();
  addCompileFlags(*cmd, opts->flags);
  cmd->add_option("-o,--output", opts->output,
                  "Output file (plan: default plan.bin; --emit=mlir: default stdout)");
  cmd->add_option("--emit", opts->emit, "What to write: plan (default) or mlir (the IR)")
      ->check(CLI::IsMember({"plan", "mlir"}));
  cmd->add_option("--stop-after", opts->stopAfter,
                  "With --emit=mlir: stop after this stage (import or a pass)");
  cmd->add_flag("--print-ir-after-all", opts->printIrAfterAll, "Print the IR after every pass (stderr)");
  cmd->add_flag("--report", opts->report,
                "Print memory per device and collectives per layer (writes the plan only with -o)");
  cmd->add_flag("--json", opts->json, "With --report: JSON instead of tables");
  cmd->add_option(
         "-c,--ctx-size", opts->ctx,
         "The plan's default context (run and serve use it unless given -c; default: the training "
         "context, at most 4096); with --fit, the context it starts from (default: the training context)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 26));
  cmd->add_option(
      "--fit", opts->fit,
      "BUDGET,BUDGET[,host=BUDGET] (e.g. 24GiB,24GiB,host=64GiB) or auto (the CUDA devices' free "
      "memory): choose the context, KV cache type, MoE split and host-placed experts so that every "
      "device's total is within its budget (one line per decision on stderr)");
  cmd->add_option("--fit-ctx-min", opts->fitCtxMin, "With --fit: the smallest context it may choose")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 26));
  cmd->add_option("--fit-kv", opts->fitKv,
                  "With --fit: the lowest KV cache type it may choose: f16 (never quantize), q8_0 or q4_0")
      ->capture_default_str()
      ->check(CLI::IsMember({"f16", "q8_0", "q4_0"}));
  cmd->callback([opts] { runCompile(*opts); });
}

} // namespace

Expected<rt::Plan> compileGgufToPlan(const std::string &gguf, const CompileRequest &request) {
  rt::Plan plan;
  try {
    Compilation c(gguf, "tpc");
    c.import();
    c.runPipeline(request, "", false);
    plan = c.emit(request);
  } catch (const Failure &e) {
    return Error{e.what()};
  }
#ifdef __GLIBC__
  // The context and the GGUF's parsed metadata are gone: give their heap back to the system, so the
  // session that runs next does not sit on top of the compiler's memory.
  ::malloc_trim(0);
#endif
  return plan;
}

} // namespace tpc::cli

TPC_REGISTER_COMMAND(10, tpc::cli::registerCompile);
