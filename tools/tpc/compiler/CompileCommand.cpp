//===- CompileCommand.cpp - `tpc compile` -----------------------------------===//
//
// `tpc compile model.gguf --devices N [--tensor-split 3,2,1] [--override-tensor REGEX=cpu]...
//  [--no-kv-offload] [--max-batch N] [--max-output-rows R] [-o plan.bin]`: import the GGUF, run the tpc pipeline (the same
// builder tpc-opt's --tpc-pipeline uses) and write the device plan. `--emit=mlir [--stop-after STAGE]`
// prints the IR instead (after `import` or any pipeline stage); `--report [--json]` prints memory per
// device and the collectives per layer. MLIR diagnostics are collected and reported as one error line
// naming the model; warnings are printed as they come. llama.cpp's spellings work too: `-ot`, `-nkvo`,
// `-ts` (main.cpp), a comma-separated list in one --override-tensor, and the target `CPU`.
//===----------------------------------------------------------------------===//
#include "compiler/emit/PlanEmitter.h"
#include "compiler/gguf/GGUFFile.h"
#include "compiler/import/Importer.h"
#include "passes/Pipelines.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/plan/PlanSummary.h"
#include "tools/tpc/Command.h"
#include "tools/tpc/ModelSource.h"

#include "dialects/tpc/IR/TpcOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <memory>
#include <sstream>
#include <string>

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

/// Collectives of one layer.
struct LayerTraffic {
  int allReduce = 0, allGather = 0, reduceScatter = 0;
  int tensors = 0;           ///< operands over all of them (a bucketed all-reduce carries several)
  int64_t bytesPerToken = 0; ///< payload: f32 elements per token of every operand
};

std::string layerName(int64_t layer) {
  if (layer == mlir::tpc::kLayerOutput)
    return "output";
  if (layer == mlir::tpc::kLayerNone)
    return "input";
  return "blk." + std::to_string(layer);
}

/// Elements per token of a value's global shape (the dynamic token or output-rows dimension counts 1).
int64_t perToken(mlir::Value v) {
  int64_t n = 1;
  for (int64_t d : llvm::cast<mlir::ShapedType>(v.getType()).getShape())
    n *= mlir::ShapedType::isDynamic(d) ? 1 : d;
  return n;
}

void printReport(const CompileOptions &opts, mlir::ModuleOp m, const rt::Plan &plan) {
  auto layers = mlir::tpc::attributeLayers(m);
  std::map<int64_t, LayerTraffic> traffic;
  m.walk([&](mlir::Operation *op) {
    if (!llvm::isa<mlir::tpc::AllReduceOp, mlir::tpc::AllReduceRmsNormOp, mlir::tpc::AllGatherOp,
                   mlir::tpc::ReduceScatterOp>(op))
      return;
    LayerTraffic &t = traffic[layers.lookup(op)];
    llvm::SmallVector<mlir::Value> payload(op->getOperands());
    if (llvm::isa<mlir::tpc::AllReduceOp>(op)) {
      ++t.allReduce;
    } else if (auto fused = llvm::dyn_cast<mlir::tpc::AllReduceRmsNormOp>(op)) {
      ++t.allReduce; // a layer boundary: only x crosses devices (the residual and norm weight stay local)
      payload = {fused.getX()};
    } else if (llvm::isa<mlir::tpc::AllGatherOp>(op)) {
      ++t.allGather;
    } else {
      ++t.reduceScatter;
    }
    for (mlir::Value v : payload) {
      t.bytesPerToken += perToken(v) * 4;
      ++t.tensors;
    }
  });
  int64_t total = 0;
  for (auto &[layer, t] : traffic)
    total += t.bytesPerToken;
  const size_t n = plan.devices.size();
  // Memory split by side (what each GPU allocates vs what stays in host memory), as `tpc inspect` shows it.
  const std::vector<rt::DeviceSummary> mem = rt::summarizeDevices(plan);
  const bool anyHost = std::any_of(mem.begin(), mem.end(), [](const rt::DeviceSummary &m) {
    return m.hostWeightBytes || m.hostActivationBytes || m.hostKvBytesPerToken;
  });
  if (opts.json) {
    std::string s =
        fmt::format("{{\"model\": \"{}\", \"arch\": \"{}\", \"devices\": [", opts.model, plan.model.arch);
    for (size_t d = 0; d < n; ++d) {
      const rt::DeviceSummary &m = mem[d];
      s += fmt::format("{}{{\"device\": {}, \"weight_bytes\": {}, \"kv_bytes_per_1k_tokens\": {}, "
                       "\"kv_full_bytes_per_token\": {}, \"kv_full_layers\": {}, "
                       "\"kv_window_bytes_per_position\": {}, \"kv_window_layers\": {}, "
                       "\"activation_bytes\": {}, \"host_weight_bytes\": {}, \"host_kv_bytes_per_1k_tokens\": {}, "
                       "\"host_activation_bytes\": {}}}",
                       d ? ", " : "", d, m.weightBytes, rt::kvBytesFor(plan, d, 1024, 1, rt::Placement::Device),
                       m.kvFullBytesPerToken, m.kvFullLayers, m.kvWindowBytesPerPosition, m.kvWindowLayers,
                       m.activationBytes, m.hostWeightBytes, rt::kvBytesFor(plan, d, 1024, 1, rt::Placement::Host),
                       m.hostActivationBytes);
    }
    s += "], \"collectives\": [";
    bool first = true;
    for (auto &[layer, t] : traffic) {
      s += fmt::format(
          "{}{{\"layer\": \"{}\", \"all_reduce\": {}, \"all_gather\": {}, \"reduce_scatter\": {}, "
          "\"tensors\": {}, \"bytes_per_token\": {}}}",
          first ? "" : ", ", layerName(layer), t.allReduce, t.allGather, t.reduceScatter, t.tensors,
          t.bytesPerToken);
      first = false;
    }
    s += fmt::format("], \"collective_bytes_per_token\": {}, \"max_batch\": {}, \"max_output_rows\": {}}}\n",
                     total, plan.model.maxBatch, plan.model.maxOutputRows);
    fmt::print("{}", s);
    return;
  }
  fmt::print("{} ({}) on {} device(s), max batch {}, max output rows {}\n\n", opts.model, plan.model.arch, n,
             plan.model.maxBatch, plan.model.maxOutputRows);
  const double MiB = 1048576.0;
  fmt::print("| device | weights (MiB) | KV per 1k tokens (MiB) | activations (MiB) |{}\n",
             anyHost ? " host weights (MiB) | host KV per 1k tokens (MiB) | host activations (MiB) |" : "");
  fmt::print("|-------:|--------------:|-----------------------:|------------------:|{}\n",
             anyHost ? "-------------------:|----------------------------:|-----------------------:|" : "");
  for (size_t d = 0; d < n; ++d) {
    const rt::DeviceSummary &m = mem[d];
    fmt::print("| {:>6} | {:>13.3f} | {:>22.3f} | {:>17.3f} |", d, m.weightBytes / MiB,
               rt::kvBytesFor(plan, d, 1024, 1, rt::Placement::Device) / MiB, m.activationBytes / MiB);
    if (anyHost)
      fmt::print(" {:>18.3f} | {:>27.3f} | {:>22.3f} |", m.hostWeightBytes / MiB,
                 rt::kvBytesFor(plan, d, 1024, 1, rt::Placement::Host) / MiB, m.hostActivationBytes / MiB);
    fmt::print("\n");
  }
  // KV by layer kind: a full layer's cache grows with the context, a sliding-window layer's is a ring of
  // window + max batch positions (the "per 1k tokens" column counts both at a context of 1024).
  for (size_t d = 0; d < n; ++d) {
    const rt::DeviceSummary &m = mem[d];
    if (m.kvWindowLayers == 0)
      continue;
    std::string windows;
    for (int64_t w : m.kvWindows)
      windows += fmt::format("{}{} (ring {})", windows.empty() ? "" : ", ", w, w + plan.model.maxBatch);
    fmt::print("{}device {} KV: {} full layer(s) {} B per token; {} sliding-window layer(s) {} B per position, "
               "window {}\n",
               d == 0 ? "\n" : "", d, m.kvFullLayers, m.kvFullBytesPerToken, m.kvWindowLayers,
               m.kvWindowBytesPerPosition, windows);
  }
  fmt::print(
      "\nCollectives per layer (bytes per token = f32 payload of the operands; a ring all-reduce moves "
      "2(N-1)/N of it per device; tensors > collectives where one all-reduce carries a bucket):\n\n");
  fmt::print("| layer | all_reduce | all_gather | reduce_scatter | tensors | bytes/token |\n");
  fmt::print("|-------|-----------:|-----------:|---------------:|--------:|------------:|\n");
  for (auto &[layer, t] : traffic)
    fmt::print("| {} | {} | {} | {} | {} | {} |\n", layerName(layer), t.allReduce, t.allGather,
               t.reduceScatter, t.tensors, t.bytesPerToken);
  fmt::print("\ntotal: {} bytes per token{}\n", total, traffic.empty() ? " (no collectives)" : "");
}

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
    pipe.devices = r.devices;
    pipe.tensorSplit = r.tensorSplit;
    pipe.overrideTensor = r.overrideTensor;
    pipe.noKvOffload = r.noKvOffload;
    pipe.maxBatch = r.maxBatch;
    pipe.maxOutputRows = r.maxOutputRows;
    mlir::PassManager pm(&ctx_);
    if (mlir::failed(mlir::tpc::buildTpcPipeline(pm, pipe, stopAfter)))
      throw Failure("--stop-after: cannot build the pipeline up to '" + stopAfter + "'");
    if (printIrAfterAll)
      pm.enableIRPrinting([](mlir::Pass *, mlir::Operation *) { return false; },
                          [](mlir::Pass *, mlir::Operation *) { return true; },
                          /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false);
    if (mlir::failed(pm.run(*module_)))
      throw Failure(fmt::format("{}: compiling for {} device(s) failed: {}", model_, pipe.devices,
                                diagnostics_.empty() ? "a pass failed without a message" : diagnostics_));
  }

  rt::Plan emit() {
    mlir::FailureOr<rt::Plan> plan =
        mlir::tpc::emitPlan(*module_, *file_, {std::string("tpc ") + TPC_VERSION});
    if (mlir::failed(plan))
      throw Failure(fmt::format("{}: plan emission failed: {}", model_, diagnostics_));
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
  const CompileRequest request = checkCompileFlags(opts.flags);

  Compilation c(opts.model, "tpc compile");
  c.import();
  if (opts.stopAfter != "import")
    c.runPipeline(request, opts.stopAfter, opts.printIrAfterAll);
  if (opts.emit == "mlir") {
    writeText(opts.output, printIR(c.module()));
    return;
  }
  rt::Plan plan = c.emit();
  if (opts.report)
    printReport(opts, c.module(), plan);
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
  cmd->callback([opts] { runCompile(*opts); });
}

} // namespace

Expected<rt::Plan> compileGgufToPlan(const std::string &gguf, const CompileRequest &request) {
  rt::Plan plan;
  try {
    Compilation c(gguf, "tpc");
    c.import();
    c.runPipeline(request, "", false);
    plan = c.emit();
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
