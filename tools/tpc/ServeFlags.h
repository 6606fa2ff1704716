//===- ServeFlags.h - llama-server's flag spellings for `tpc serve` -*- C++ -*-===//
//
// The flags a llama-server command line passes that tpc serve has the feature for, in llama-server's
// spellings: -m/--model, -a/--alias A[,B...], --api-key-file, --metrics (off by default, as there),
// --slots/--no-slots, --no-webui, -n/--n-predict, -to/--timeout, --cors-origins, --temp, --top-k, --top-p,
// --min-p, --seed (server-wide defaults of the requests), --jinja (accepted: the GGUF's template is rendered
// anyway) and -cb/--cont-batching (accepted: it is always on). -c, -np/--parallel, -t, --host, --port,
// --api-key, --chat-template and --threads-http are ServeCommand.cpp's own; main.cpp turns llama-server's
// multi-letter short flags (-ngl, -ctk, -md...) into long ones, so they are refused by name instead of
// being read as clusters (-n gl). The llama-server flags tpc serve does not take are named in one line
// (kUnsupportedLlamaServerFlags), in --help and in the error for such a flag.
//===----------------------------------------------------------------------===//
#ifndef TPC_TOOLS_TPC_SERVEFLAGS_H
#define TPC_TOOLS_TPC_SERVEFLAGS_H

#include "server/Server.h"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace tpc::cli {

/// The llama-server flags tpc serve does not take, as one line.
extern const char *const kUnsupportedLlamaServerFlags;

struct LlamaServerFlags {
  std::string model; ///< -m/--model: the model when not given as the positional argument
  std::vector<std::string> aliases;
  std::string apiKeyFile;
  bool metrics = false, slots = false, noSlots = false, noWebui = false, jinja = false, contBatching = false;
  int nPredict = -1;
  int timeout = 0; ///< 0: cpp-httplib's (5 s)
  std::string corsOrigins = "*";
  std::optional<float> temp, topP, minP;
  std::optional<int> topK;
  int64_t seed = -1;
};

/// Declares the flags of the file comment on `cmd`.
void addLlamaServerFlags(CLI::App &cmd, LlamaServerFlags &f);

/// Checks the flags and applies them: the API key from --api-key-file (when `apiKey` is empty), the
/// server's switches and CORS policy, the requests' defaults. Throws Failure naming the flag.
void applyLlamaServerFlags(const LlamaServerFlags &f, std::string &apiKey, server::ServerOptions &so,
                           server::ServerDefaults &d);

/// Throws Failure for the arguments CLI11 left over: each named, with kUnsupportedLlamaServerFlags when
/// it is one of llama-server's.
void refuseExtraArguments(const std::vector<std::string> &extras);

} // namespace tpc::cli

#endif // TPC_TOOLS_TPC_SERVEFLAGS_H
