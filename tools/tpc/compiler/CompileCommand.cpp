//===- CompileCommand.cpp - `tpc compile` -----------------------------------===//
//
// `tpc compile model.gguf --devices N [--tensor-split 3,2,1] [--override-tensor REGEX=cpu]...
//  [--no-kv-offload] [--max-batch N] [-o plan.bin]`: import the GGUF, run the tpc pipeline (the same
// builder tpc-opt's --tpc-pipeline uses) and write the device plan. `--emit=mlir [--stop-after STAGE]`
// prints the IR instead (after `import` or any pipeline stage); `--report [--json]` prints memory per
// device and the collectives per layer. MLIR diagnostics are collected and reported as one error line
// naming the model; warnings are printed as they come. llama.cpp's spellings work too: `-ot`, `-nkvo`,
// `-ts` (main.cpp), a comma-separated list in one --override-tensor, and the target `CPU`.
//===----------------------------------------------------------------------===//
#include "compiler/emit/PlanEmitter.h"
#include "compiler/gguf/GGUFFile.h"
#include "compiler/import/Importer.h"
#include "tools/tpc/compiler/CompileReport.h"
#include "passes/Pipelines.h"
#include "runtime/plan/PlanIO.h"
#include "tools/tpc/Command.h"

#include "dialects/tpc/IR/TpcOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <sstream>
#include <string>

namespace tpc::cli {
namespace {

struct CompileOptions {
  std::string model;
  int64_t devices = 1;
  bool devicesGiven = false; ///< --devices on the command line (else --tensor-split's count sets it)
  std::string tensorSplit;
  std::vector<std::string> overrideTensor;
  bool noKvOffload = false;
  int64_t maxBatch = 512;
  std::string moeSplit = "auto";
  std::string routingProfile;
  std::string output;
  std::string emit = "plan";
  std::string stopAfter;
  bool printIrAfterAll = false;
  bool report = false;
  bool json = false;
};

/// "3,2,1" -> {3, 2, 1}: one positive share per device (devices < 0: as many devices as shares, up to 64).
std::vector<double> parseTensorSplit(const std::string &text, int64_t devices) {
  std::vector<double> shares;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char *end = nullptr;
    double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(v > 0))
      throw Failure(fmt::format("--tensor-split: '{}' is not a positive number (expected e.g. 3,2,1)", item));
    shares.push_back(v);
  }
  if (devices < 0 && shares.size() > 64)
    throw Failure(fmt::format("--tensor-split: {} shares, but at most 64 devices", shares.size()));
  if (devices >= 0 && int64_t(shares.size()) != devices)
    throw Failure(fmt::format("--tensor-split: {} shares given for --devices {} (one per device)",
                              shares.size(), devices));
  return shares;
}

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

/// The entries of every --override-tensor value, each `REGEX=cpu` with the target lower-cased. A value may
/// be a comma-separated list, as llama.cpp's -ot takes it; a comma inside a regex (`[0-9]{1,3}`) stays,
/// because an entry ends only at a comma that follows `=WORD`. Throws naming the entry that is not REGEX=cpu.
std::vector<std::string> overrideEntries(const std::vector<std::string> &values) {
  auto endsInTarget = [](const std::string &e) {
    size_t eq = e.rfind('=');
    return eq != std::string::npos && eq + 1 < e.size() &&
           std::all_of(e.begin() + eq + 1, e.end(), [](char c) { return std::isalnum(uint8_t(c)) || c == '_'; });
  };
  std::vector<std::string> entries;
  for (const std::string &v : values) {
    std::string cur;
    std::istringstream in(v);
    for (std::string piece; std::getline(in, piece, ',');) {
      cur = cur.empty() ? piece : cur + "," + piece;
      if (endsInTarget(cur)) {
        entries.push_back(cur);
        cur.clear();
      }
    }
    if (!cur.empty() || v.empty() || v.back() == ',')
      entries.push_back(cur); // an incomplete entry: refused below, by name
  }
  for (std::string &e : entries) {
    size_t eq = e.rfind('=');
    std::string target = eq == std::string::npos ? "" : e.substr(eq + 1);
    std::transform(target.begin(), target.end(), target.begin(), [](char c) { return std::tolower(uint8_t(c)); });
    if (eq == std::string::npos || eq == 0)
      throw Failure(fmt::format("--override-tensor: '{}' must be REGEX=cpu", e));
    if (target != "cpu")
      throw Failure(fmt::format("--override-tensor: '{}': the only target is cpu (host memory); weights not "
                                "named stay on the devices the plan splits them over",
                                e));
    e = e.substr(0, eq + 1) + target;
  }
  return entries;
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
  mlir::tpc::PipelineOptions pipe;
  pipe.devices = opts.devices;
  if (!opts.tensorSplit.empty()) {
    // As with llama.cpp's -ts, the shares alone say how many devices there are.
    pipe.tensorSplit = parseTensorSplit(opts.tensorSplit, opts.devicesGiven ? opts.devices : -1);
    pipe.devices = int64_t(pipe.tensorSplit.size());
  }
  pipe.overrideTensor = overrideEntries(opts.overrideTensor);
  pipe.noKvOffload = opts.noKvOffload;
  pipe.maxBatch = opts.maxBatch;
  pipe.moeSplit = opts.moeSplit;
  pipe.routingProfile = opts.routingProfile;

  auto file = gguf::GGUFFile::open(opts.model);
  if (!file)
    throw Failure(file.message());

  mlir::MLIRContext ctx;
  ctx.disableMultithreading(); // module passes only; and IR printing needs it
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    if (d.getSeverity() == mlir::DiagnosticSeverity::Warning)
      fmt::print(stderr, "tpc compile: warning: {}\n", d.str());
    if (d.getSeverity() != mlir::DiagnosticSeverity::Error)
      return mlir::success();
    if (!diagnostics.empty())
      diagnostics += "; ";
    diagnostics += d.str();
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::tpc::importModel(ctx, **file);
  if (!module)
    throw Failure(diagnostics.empty() ? opts.model + ": import failed" : diagnostics);
  if (mlir::failed(mlir::verify(*module)))
    throw Failure(opts.model + ": the imported module does not verify (a tpc bug): " + diagnostics);

  if (opts.stopAfter != "import") {
    mlir::PassManager pm(&ctx);
    if (mlir::failed(mlir::tpc::buildTpcPipeline(pm, pipe, opts.stopAfter)))
      throw Failure("--stop-after: cannot build the pipeline up to '" + opts.stopAfter + "'");
    if (opts.printIrAfterAll)
      pm.enableIRPrinting([](mlir::Pass *, mlir::Operation *) { return false; },
                          [](mlir::Pass *, mlir::Operation *) { return true; },
                          /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false);
    if (mlir::failed(pm.run(*module)))
      throw Failure(fmt::format("{}: compiling for {} device(s) failed: {}", opts.model, pipe.devices,
                                diagnostics.empty() ? "a pass failed without a message" : diagnostics));
  }
  if (opts.emit == "mlir") {
    writeText(opts.output, printIR(*module));
    return;
  }
  mlir::FailureOr<rt::Plan> plan = mlir::tpc::emitPlan(*module, **file, {std::string("tpc ") + TPC_VERSION});
  if (mlir::failed(plan))
    throw Failure(fmt::format("{}: plan emission failed: {}", opts.model, diagnostics));
  if (opts.report)
    printReport(opts.model, opts.json, *module, *plan);
  // With --report the plan is written only where -o asks for it.
  std::string out = opts.output.empty() && !opts.report ? "plan.bin" : opts.output;
  if (out.empty())
    return;
  auto written = rt::writePlan(*plan, out);
  if (!written)
    throw Failure(written.message() + " (-o)");
  if (!opts.report)
    fmt::print(stderr, "tpc compile: wrote {} ({} device(s), {} steps on device 0)\n", out,
               plan->devices.size(), plan->devices.empty() ? 0 : plan->devices[0].steps.size());
}

void registerCompile(CLI::App &app) {
  auto opts = std::make_shared<CompileOptions>();
  CLI::App *cmd = app.add_subcommand("compile", "Compile a GGUF model into a device plan (or tpc IR)");
  cmd->add_option("model", opts->model, "GGUF model file")->required();
  CLI::Option *devices =
      cmd->add_option("--devices", opts->devices, "Number of devices to split the model over (default: 1, or "
                                                  "one per --tensor-split share)")
          ->check(CLI::Range(int64_t(1), int64_t(64)));
  cmd->add_option("--tensor-split", opts->tensorSplit, "Relative share of each device, e.g. 3,2,1 (also -ts)");
  cmd->add_option("--override-tensor", opts->overrideTensor,
                  "REGEX=cpu[,REGEX=cpu...]: keep the weights whose GGUF name matches on the host (repeatable; "
                  "also -ot)");
  cmd->add_flag("--no-kv-offload", opts->noKvOffload, "Keep the KV cache in host memory (also -nkvo)");
  cmd->add_option("--max-batch", opts->maxBatch, "Tokens per evaluation the activation arenas hold")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--moe-split", opts->moeSplit,
                  "How MoE layers split: auto (default: per layer, the cheaper at decode under uniform routing), "
                  "intermediate (every expert's intermediate dimension) or expert (whole experts per device, in "
                  "proportion to --tensor-split; CPU runtime only for now)")
      ->check(CLI::IsMember({"auto", "intermediate", "expert"}));
  cmd->add_option("--routing-profile", opts->routingProfile,
                  "With --moe-split auto: per MoE layer, the tokens routed to each expert ('blk.N: c0 c1 ...' "
                  "lines, # comments) instead of uniform routing");
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
  cmd->callback([opts, devices] {
    opts->devicesGiven = devices->count() > 0;
    runCompile(*opts);
  });
}

} // namespace
} // namespace tpc::cli

TPC_REGISTER_COMMAND(10, tpc::cli::registerCompile);
