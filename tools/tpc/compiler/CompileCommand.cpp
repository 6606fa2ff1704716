//===- CompileCommand.cpp - `tpc compile` -----------------------------------===//
//
// `tpc compile model.gguf --emit=mlir`: reads the GGUF, imports it into the tpc dialect, verifies the
// module and prints it. MLIR diagnostics are collected and turned into one error line each.
//===----------------------------------------------------------------------===//
#include "compiler/gguf/GGUFFile.h"
#include "compiler/import/Importer.h"
#include "tools/tpc/Command.h"

#include "dialects/tpc/IR/TpcOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

#include <memory>
#include <string>

namespace tpc::cli {
namespace {

struct CompileOptions {
  std::string model;
  std::string emit = "mlir";
  std::string output;
};

void runCompile(const CompileOptions &opts) {
  auto file = gguf::GGUFFile::open(opts.model);
  if (!file)
    throw Failure(file.error());

  mlir::MLIRContext ctx;
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    if (!diagnostics.empty())
      diagnostics += "\n";
    diagnostics += d.str();
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::tpc::importModel(ctx, **file);
  if (!module)
    throw Failure(diagnostics.empty() ? opts.model + ": import failed" : diagnostics);
  if (mlir::failed(mlir::verify(*module)))
    throw Failure(opts.model + ": the imported module does not verify (a tpc bug): " + diagnostics);

  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  os.flush();
  if (opts.output.empty() || opts.output == "-") {
    fmt::print("{}", text);
    return;
  }
  std::unique_ptr<FILE, int (*)(FILE *)> out(std::fopen(opts.output.c_str(), "wb"), &std::fclose);
  if (!out || std::fwrite(text.data(), 1, text.size(), out.get()) != text.size())
    throw Failure(opts.output + ": cannot write the output (-o)");
}

void registerCompile(CLI::App &app) {
  auto opts = std::make_shared<CompileOptions>();
  CLI::App *cmd = app.add_subcommand("compile", "Compile a GGUF model into tpc IR / a device plan");
  cmd->add_option("model", opts->model, "GGUF model file")->required();
  cmd->add_option("--emit", opts->emit, "What to write: mlir (the imported tpc IR)")
      ->check(CLI::IsMember({"mlir"}));
  cmd->add_option("-o,--output", opts->output, "Output file ('-' or absent: stdout)");
  cmd->callback([opts] { runCompile(*opts); });
}

} // namespace
} // namespace tpc::cli

TPC_REGISTER_COMMAND(10, tpc::cli::registerCompile);
