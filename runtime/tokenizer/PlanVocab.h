//===- PlanVocab.h - the tokenizer a plan file carries ----------*- C++ -*-===//
//
// Plans carry the GGUF's tokenizer (PlanTokenizer, filled at compile time from tokenizer.ggml.*); this
// turns it back into the runtime's TokenizerData, with the end-of-generation tokens llama.cpp finds by
// their text (the plan stores only eos/eot/eom). `tpc run` and `tpc serve` both load their tokenizer here;
// the plan emitter writes it with the reverse mapping.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_TOKENIZER_PLANVOCAB_H
#define TPC_RUNTIME_TOKENIZER_PLANVOCAB_H

#include "runtime/plan/PlanFormat.h"
#include "runtime/tokenizer/Tokenizer.h"

namespace tpc::rt {

/// TokenizerData for the plan's tokenizer (see the file comment). Pass the plan's tokenizer as an rvalue
/// where the plan no longer needs it: its token and merge texts then move instead of being copied.
TokenizerData tokenizerDataFromPlan(PlanTokenizer t);

/// The reverse, for the compiler: the plan form of a GGUF's tokenizer (the chat template is not part of
/// TokenizerData; the caller sets it). Both directions live here so a field added to one is added to both.
PlanTokenizer planTokenizerFromData(TokenizerData t);

} // namespace tpc::rt

#endif // TPC_RUNTIME_TOKENIZER_PLANVOCAB_H
