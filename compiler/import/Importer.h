//===- Importer.h - GGUF model -> tpc IR ---------------------------*- C++ -*-===//
//
// Imports a GGUF model as one function in global (unsplit) shapes:
//
//   module attributes {tpc.arch = "llama", tpc.gguf = "model.gguf", tpc.n_vocab = 512, ...} {
//     func.func @forward(%tokens: tensor<?xi32>, %pos: tensor<?xi32>, %rows: tensor<?xi32>)
//         -> tensor<?x512xf32>
//   }
//
// The token dimension is dynamic throughout; the last hidden state is gathered to the `rows` a call asks
// for (tpc.select_rows) before the final norm, so the head and the returned logits have one row per
// requested row. Supported architectures come from a table (Importer.cpp);
// an unknown architecture, a missing tensor or a tensor of the wrong shape is an error naming it.
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_IMPORT_IMPORTER_H
#define TPC_COMPILER_IMPORT_IMPORTER_H

#include "compiler/gguf/GGUFFile.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>
#include <vector>

namespace mlir::tpc {

/// Imports `file`; diagnostics go to the context's handler. Null on failure.
OwningOpRef<ModuleOp> importModel(MLIRContext &ctx, const ::tpc::gguf::GGUFFile &file);

/// The `general.architecture` values importModel accepts.
std::vector<std::string> supportedArchitectures();

} // namespace mlir::tpc

#endif // TPC_COMPILER_IMPORT_IMPORTER_H
