//===- PlanVocab.h - the tokenizer a plan file carries ----------*- C++ -*-===//
//
// Plans carry the GGUF's tokenizer (PlanTokenizer, filled at compile time from tokenizer.ggml.*); this
// turns it back into the runtime's TokenizerData, with the end-of-generation tokens llama.cpp finds by
// their text (the plan stores only eos/eot/eom). `tpc run` and `tpc serve` both load their tokenizer here.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_TOKENIZER_PLANVOCAB_H
#define TPC_RUNTIME_TOKENIZER_PLANVOCAB_H

#include "runtime/plan/PlanFormat.h"
#include "runtime/tokenizer/Tokenizer.h"

namespace tpc::rt {

/// TokenizerData for the plan's tokenizer (see the file comment).
TokenizerData tokenizerDataFromPlan(const PlanTokenizer &t);

} // namespace tpc::rt

#endif // TPC_RUNTIME_TOKENIZER_PLANVOCAB_H
