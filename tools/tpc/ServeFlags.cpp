//===- ServeFlags.cpp - llama-server's flag spellings for `tpc serve` ------===//
#include "tools/tpc/ServeFlags.h"

#include "tools/tpc/Command.h"

#include <fmt/core.h>

#include <fstream>

namespace tpc::cli {

const char *const kUnsupportedLlamaServerFlags =
    "llama-server flags tpc serve does not take: -ngl/--n-gpu-layers (use --devices/--backend), "
    "-fa/--flash-attn, "
    "-ub/--ubatch-size, --mlock, --no-mmap, --numa, --rope-*, --yarn-*, --lora*, "
    "--mmproj, -md/--model-draft, --embedding(s), --reranking, --ssl-key-file, --ssl-cert-file, --path, "
    "--system-prompt-file, --slot-save-path, -sps/--slot-prompt-similarity, --grammar*, --log-format, "
    "-hf/--hf-repo, --hf-file, -nocb/--no-cont-batching (batching is always continuous)";

void addLlamaServerFlags(CLI::App &cmd, LlamaServerFlags &f) {
  cmd.add_option("-m,--model", f.model, "the model (plan or GGUF), as llama-server's -m");
  cmd.add_option("-a,--alias", f.aliases,
                 "model id(s) clients see in /v1/models, comma-separated (default: the GGUF's file name); a "
                 "request naming any model is served, as in llama-server")
      ->delimiter(',');
  cmd.add_option("--api-key-file", f.apiKeyFile, "read the API key from the first line of this file");
  cmd.add_flag("--metrics", f.metrics, "serve /metrics (Prometheus; off by default, as in llama-server)");
  cmd.add_flag("--slots", f.slots, "serve /slots (the default)");
  cmd.add_flag("--no-slots,--slots-endpoint-disable", f.noSlots, "do not serve /slots");
  cmd.add_flag("--no-webui", f.noWebui, "do not serve the chat page at /");
  cmd.add_flag("--cont-batching", f.contBatching, "accepted: batching is always continuous");
  cmd.add_flag("--jinja", f.jinja,
               "accepted for llama-server's command lines: the GGUF's template is rendered");
  cmd.add_option("-n,--n-predict", f.nPredict,
                 "tokens a request generates when it sets no max_tokens (-1: "
                 "until the context is full)")
      ->capture_default_str();
  cmd.add_option(
      "--timeout", f.timeout,
      "HTTP read/write timeout in seconds: how long a client may take to send or read (default 5)");
  cmd.add_option(
         "--cors-origins", f.corsOrigins,
         "origins browser pages may call from: '*', 'none' or scheme://host[:port],... (others get 403)")
      ->capture_default_str();
  cmd.add_option("--temp", f.temp, "default temperature of requests (0: greedy; default 0.8)");
  cmd.add_option("--top-k", f.topK, "default top_k of requests (default 40; 0: off)");
  cmd.add_option("--top-p", f.topP, "default top_p of requests (default 0.95)");
  cmd.add_option("--min-p", f.minP, "default min_p of requests (default 0.05)");
  cmd.add_option("-s,--seed", f.seed, "default seed of requests (-1: random per request)")
      ->capture_default_str();
  cmd.footer(kUnsupportedLlamaServerFlags);
}

void applyLlamaServerFlags(const LlamaServerFlags &f, std::string &apiKey, server::ServerOptions &so,
                           server::ServerDefaults &d) {
  if (!f.apiKeyFile.empty() && apiKey.empty()) {
    std::ifstream in(f.apiKeyFile);
    if (!in || !std::getline(in, apiKey))
      throw Failure(fmt::format("--api-key-file: cannot read a key from '{}'", f.apiKeyFile));
    while (!apiKey.empty() && (apiKey.back() == '\r' || apiKey.back() == ' '))
      apiKey.pop_back();
    if (apiKey.empty())
      throw Failure(fmt::format("--api-key-file: the first line of '{}' is empty", f.apiKeyFile));
  }
  if (f.slots && f.noSlots)
    throw Failure("--slots and --no-slots contradict each other");
  so.metrics = f.metrics;
  so.slots = !f.noSlots;
  so.webui = !f.noWebui;
  if (f.timeout < 0 || f.timeout > 86400)
    throw Failure(fmt::format("--timeout: {} s is not in 1..86400", f.timeout));
  if (std::string err = server::CorsPolicy::parse(f.corsOrigins, so.cors); !err.empty())
    throw Failure(err);
  if (f.nPredict < -1 || f.nPredict == 0)
    throw Failure(fmt::format("-n: {} is not -1 (no limit) or a positive count", f.nPredict));
  d.nPredict = f.nPredict;
  auto unit = [](const char *flag, const std::optional<float> &v, float lo, float hi, float &out) {
    if (!v)
      return;
    if (!(*v >= lo && *v <= hi))
      throw Failure(fmt::format("{}: {} is not in {}..{}", flag, *v, lo, hi));
    out = *v;
  };
  unit("--temp", f.temp, 0.0f, 2.0f, d.temperature);
  unit("--top-p", f.topP, 0.0f, 1.0f, d.topP);
  unit("--min-p", f.minP, 0.0f, 1.0f, d.minP);
  if (f.topK) {
    if (*f.topK < 0)
      throw Failure("--top-k: must be >= 0 (0: off)");
    d.topK = *f.topK;
  }
  if (f.seed < -1)
    throw Failure("--seed: must be -1 (random) or >= 0");
  d.seed = f.seed;
}

void refuseExtraArguments(const std::vector<std::string> &extras) {
  if (extras.empty())
    return;
  throw Failure(fmt::format("unknown argument '{}' ({})", extras.front(), kUnsupportedLlamaServerFlags));
}

} // namespace tpc::cli
