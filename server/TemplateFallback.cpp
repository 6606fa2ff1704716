//===- TemplateFallback.cpp - a chat template for a GGUF that has none -----===//
#include "server/TemplateFallback.h"

#include <fmt/core.h>

namespace tpc::server {

TemplateFallback templateFallback(const std::string &arch) {
  // Architectures whose every released model uses one turn format.
  struct Fixed {
    const char *arch, *name;
  } const fixed[] = {{"gemma3", "gemma3"}, {"gemma3_text", "gemma3"}, {"gemma2", "gemma3"},
                     {"gemma", "gemma3"},  {"gemma4", "gemma4"},      {"qwen3", "qwen3"},
                     {"qwen3moe", "qwen3"}};
  for (const Fixed &f : fixed)
    if (arch == f.arch)
      return {f.name,
              fmt::format("the GGUF has no chat template and architecture '{}' fixes its turns", arch)};
  return {"chatml", fmt::format("the GGUF has no chat template and architecture '{}' does not fix one "
                                "(ChatML, as llama-server; --chat-template picks another)",
                                arch)};
}

} // namespace tpc::server
