//===- GGUFTokenizer.h - tokenizer data from GGUF metadata --------*- C++ -*-===//
//
// Reads the `tokenizer.ggml.*` metadata of a GGUF file into the runtime's TokenizerData (which the plan
// file carries), applying llama.cpp's per-model defaults for absent keys. The result is validated by
// building a tpc::rt::Tokenizer from it, so a file that passes here tokenizes without surprises. Errors
// are one line naming the file and key (missing tokens array, length mismatches, out-of-range special
// ids, unknown model or pre-tokenizer).
//
// Usage:
//   auto file = tpc::gguf::GGUFFile::open(path);
//   Expected<tpc::rt::TokenizerData> data = tpc::tokenizerFromGGUF(**file);
//   if (!data) report(data.message());
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_TOKENIZER_GGUFTOKENIZER_H
#define TPC_COMPILER_TOKENIZER_GGUFTOKENIZER_H

#include "runtime/support/Expected.h"
#include "compiler/gguf/GGUFFile.h"
#include "runtime/tokenizer/Tokenizer.h"

namespace tpc {

/// The tokenizer data of `file`, or an error naming the file and the offending key.
Expected<rt::TokenizerData> tokenizerFromGGUF(const gguf::GGUFFile &file);

} // namespace tpc

#endif // TPC_COMPILER_TOKENIZER_GGUFTOKENIZER_H
