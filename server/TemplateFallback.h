//===- TemplateFallback.h - a chat template for a GGUF that has none -*- C++ -*-===//
//
// A GGUF without tokenizer.chat_template (Gemma 3 270M, which `make demo` fetches) would leave chat
// requests unanswerable. llama-server falls back to ChatML; tpc takes the architecture's own turns where
// the architecture fixes them (gemma3 -> Gemma's <start_of_turn> turns, gemma4 -> Gemma 4's, qwen3 ->
// ChatML with think tags) and ChatML otherwise (llama's architecture is shared by Llama 2, Llama 3 and
// many fine-tunes with different templates, so it fixes nothing). `tpc serve` says which and why.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_TEMPLATEFALLBACK_H
#define TPC_SERVER_TEMPLATEFALLBACK_H

#include <string>

namespace tpc::server {

struct TemplateFallback {
  std::string name; ///< a built-in renderer's name (ChatTemplate::fromFlag)
  std::string why;  ///< one line for the start-up message
};

/// The built-in template for a model of architecture `arch` (general.architecture) without a template.
TemplateFallback templateFallback(const std::string &arch);

} // namespace tpc::server

#endif // TPC_SERVER_TEMPLATEFALLBACK_H
