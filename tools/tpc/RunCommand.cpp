//===- RunCommand.cpp - `tpc run` -------------------------------------------===//
//
// `tpc run plan.bin -p TEXT -n N` loads a plan (tokenizer included), opens a session on the backend
// `--backend auto|cpu|cuda` names (the built-in registry, runtime/backends; auto is CUDA when built and a
// GPU is visible) and streams generated text; the rest of the command sees only the Session interface
// (runtime/exec/Session.h). `--prompt-ids 1,2,3` skips the tokenizer; `--dump-logits FILE` writes float32
// rows (one per prompt position, then one per generated token after feeding it), the layout of the
// fixtures' .logits.f32 files. `--bench -pp 512 -tg 128 [-r 5] [--json]` prints a llama-bench style table.
// llama-bench spells the test sizes "-pp"/"-tg", which CLI11 cannot declare (one-letter short names), so
// main.cpp rewrites those two spellings to --pp/--tg before parsing. Every error is one line naming the
// flag or file. Under `mpirun -np N` (or `srun`) the process is one rank of a job and runs one plan device;
// rank 0 runs everything here and the others follow its evaluate() calls (Ranks.h).
//===----------------------------------------------------------------------===//
#include "tools/tpc/Command.h"
#include "tools/tpc/Ranks.h"

#include "runtime/plan/PlanIO.h"
#include "runtime/plan/PlanSummary.h"
#include "runtime/sampler/Sampler.h"
#include "runtime/tokenizer/PlanVocab.h"
#include "runtime/tokenizer/Tokenizer.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <sstream>

namespace {

using tpc::cli::Failure;
using tpc::cli::runOnPlan;
using namespace tpc::rt;

/// Options of one `tpc run` invocation.
struct RunOptions {
  std::string plan;
  std::string prompt;
  std::string promptIds;
  int nPredict = 32;
  bool greedy = false;
  float temp = 0.8f;
  int topK = 40;
  float topP = 0.95f;
  uint64_t seed = 0;
  int threads = 0;
  int64_t ctxSize = 0;
  std::string gguf;
  std::string dumpLogits;
  bool ignoreEos = false;
  bool bench = false;
  int pp = 512;
  int tg = 128;
  int reps = 5;
  bool json = false;
  bool profile = false;
  std::string backend = "auto";
  std::string gpus;
};

/// Parses "1,2,3" (spaces allowed); the error names the flag.
std::vector<int32_t> parseIds(const std::string &s, int64_t vocab) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos)
      throw Failure(fmt::format("--prompt-ids: empty entry in '{}' (expected comma-separated token ids)", s));
    item = item.substr(b, e - b + 1);
    char *end = nullptr;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (*end || v < 0 || v >= vocab)
      throw Failure(fmt::format("--prompt-ids: '{}' is not a token id in 0..{}", item, vocab - 1));
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty())
    throw Failure("--prompt-ids: no ids given (expected e.g. 1,2,3)");
  return ids;
}

/// Appends logits rows to the dump file.
struct LogitsDump {
  FILE *f = nullptr;
  std::string path;
  explicit LogitsDump(const std::string &p) : path(p) {
    if (!p.empty() && !(f = std::fopen(p.c_str(), "wb")))
      throw Failure(fmt::format("--dump-logits: cannot write '{}'", p));
  }
  void write(const std::vector<float> &rows) {
    if (f && std::fwrite(rows.data(), sizeof(float), rows.size(), f) != rows.size())
      throw Failure(fmt::format("--dump-logits: write to '{}' failed (disk full?)", path));
  }
  ~LogitsDump() {
    if (f)
      std::fclose(f);
  }
};

std::vector<float> eval(Session &s, const std::vector<int32_t> &ids, const std::vector<int32_t> &pos) {
  auto r = s.evaluate(ids, pos);
  if (!r)
    throw Failure(r.message());
  return std::move(*r);
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Mean and sample standard deviation.
std::pair<double, double> meanStd(const std::vector<double> &v) {
  double m = 0, s = 0;
  for (double x : v)
    m += x;
  m /= v.size();
  for (double x : v)
    s += (x - m) * (x - m);
  return {m, v.size() > 1 ? std::sqrt(s / (v.size() - 1)) : 0.0};
}

/// The decode roofline: tokens per second if decode were bound by reading the weights once per token at
/// the measured copy bandwidth. Logical devices on one memory share it, so the slowest memory (most bytes
/// per bandwidth) bounds the token; host-placed steps on a GPU backend read host memory and are left out.
struct Roofline {
  uint64_t bytes = 0, hostBytes = 0; ///< weight bytes per token on the bounding memory; host-placed reads
  double bandwidth = 0, ts = 0;      ///< that memory's bytes/s; tokens/s (0: unknown)
  int memory = 0;
};
Roofline decodeRoofline(const Session &s) {
  const std::vector<DeviceSummary> sum = summarizeDevices(s.plan());
  const std::vector<int> mem = s.memoryOf();
  const int host = s.hostMemory();
  std::map<int, uint64_t> bytes;
  uint64_t hostBytes = 0;
  for (size_t d = 0; d < sum.size() && d < mem.size(); ++d) {
    if (mem[d] < 0)
      continue; // a device another process runs
    bytes[mem[d]] += sum[d].decodeWeightBytes;
    (host >= 0 ? bytes[host] : hostBytes) += sum[d].hostDecodeWeightBytes;
  }
  Roofline best;
  best.hostBytes = hostBytes;
  for (const auto &[m, b] : bytes) {
    if (b == 0)
      continue; // a memory that holds no weights bounds nothing
    const double bw = s.copyBandwidth(m);
    if (bw <= 0) { // unknown: say which memory
      best.bytes = b, best.bandwidth = 0, best.ts = 0, best.memory = m;
      return best;
    }
    if (best.ts == 0 || bw / double(b) < best.ts)
      best.bytes = b, best.bandwidth = bw, best.ts = bw / double(b), best.memory = m;
  }
  return best;
}

void runBench(Session &s, const RunOptions &o) {
  const Plan &p = s.plan();
  if (o.pp < 0 || o.tg < 0 || (o.pp == 0 && o.tg == 0))
    throw Failure("--bench: give -pp N and/or -tg N with N > 0");
  if (o.reps < 1)
    throw Failure("-r: repetitions must be >= 1");
  if (std::max(o.pp, o.tg) > s.ctxSize())
    throw Failure(fmt::format("--bench: -pp {} / -tg {} exceed the context of {} tokens; raise --ctx-size",
                              o.pp, o.tg, s.ctxSize()));
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(p.model.nVocab - 1));
  struct Result {
    std::string test;
    int tokens;
    double mean, sd;
  };
  std::vector<Result> results;
  auto measure = [&](const std::string &name, int n, bool prompt) {
    std::vector<double> ts;
    for (int r = -1; r < o.reps; ++r) { // r = -1 is the warm-up
      auto t0 = std::chrono::steady_clock::now();
      if (prompt) {
        std::vector<int32_t> ids(n), pos(n);
        for (int i = 0; i < n; ++i)
          ids[i] = tok(rng), pos[i] = i;
        eval(s, ids, pos);
      } else {
        for (int i = 0; i < n; ++i)
          eval(s, {tok(rng)}, {i});
      }
      if (r >= 0)
        ts.push_back(n / seconds(t0));
    }
    auto [m, sd] = meanStd(ts);
    results.push_back({name, n, m, sd});
  };
  if (o.pp > 0)
    measure(fmt::format("pp{}", o.pp), o.pp, true);
  if (o.tg > 0)
    measure(fmt::format("tg{}", o.tg), o.tg, false);

  uint64_t weightBytes = 0;
  for (const DevicePlan &d : p.devices)
    weightBytes += d.weightBytes;
  const Roofline roof = decodeRoofline(s);
  std::string model = p.model.arch;
  std::string file = p.ggufPath.substr(p.ggufPath.find_last_of('/') + 1);
  const int devices = static_cast<int>(p.devices.size());
  const std::string size = weightBytes >= (1ull << 30)
                               ? fmt::format("{:.2f} GiB", weightBytes / double(1ull << 30))
                               : fmt::format("{:.2f} MiB", weightBytes / double(1ull << 20));
  if (o.json) {
    fmt::print("[\n");
    for (size_t i = 0; i < results.size(); ++i)
      fmt::print(
          "  {{\"model\": \"{}\", \"file\": \"{}\", \"size_bytes\": {}, \"devices\": {}, \"backend\": "
          "\"{}\", "
          "\"threads_per_device\": {}, \"test\": \"{}\", \"n_tokens\": {}, \"reps\": {}, \"avg_ts\": {:.4f}, "
          "\"stddev_ts\": {:.4f}, \"decode_weight_bytes_per_token\": {}, \"copy_bandwidth_bytes_per_s\": "
          "{:.0f}, "
          "\"roofline_ts\": {:.4f}}}{}\n",
          model, file, weightBytes, devices, s.backendName(), s.threadsPerDevice(), results[i].test,
          results[i].tokens, o.reps, results[i].mean, results[i].sd, roof.bytes, roof.bandwidth, roof.ts,
          i + 1 < results.size() ? "," : "");
    fmt::print("]\n");
    return;
  }
  fmt::print("| model | size | devices | backend | threads | test | t/s |\n");
  fmt::print("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
  // GPU backends run no host worker threads: "-" rather than a misleading 0.
  const std::string threads =
      s.threadsPerDevice() > 0 ? std::to_string(s.threadsPerDevice() * devices) : std::string("-");
  for (const Result &r : results)
    fmt::print("| {} ({}) | {} | {} | {} | {} | {} | {:.2f} ± {:.2f} |\n", model, file, size, devices,
               s.backendName(), threads, r.test, r.mean, r.sd);
  if (roof.ts <= 0) {
    fmt::print("\ndecode roofline: unknown (the copy bandwidth of {} could not be measured)\n",
               s.memoryName(roof.memory));
    return;
  }
  fmt::print("\ndecode roofline: {} of weights per token on {} at {:.0f} GB/s (copy, read + write) = {:.1f} "
             "t/s{}\n",
             bytesStr(roof.bytes), s.memoryName(roof.memory), roof.bandwidth / 1e9, roof.ts,
             roof.hostBytes ? fmt::format(" (host-placed steps read {} more from host memory)", bytesStr(roof.hostBytes))
                            : std::string());
  for (const Result &r : results)
    if (r.test.rfind("tg", 0) == 0)
      fmt::print("{}: {:.1f}% of the roofline\n", r.test, 100.0 * r.mean / roof.ts);
}

void runGenerate(Session &s, const RunOptions &o) {
  const Plan &p = s.plan();
  std::unique_ptr<Tokenizer> tok;
  if (!p.tokenizer.tokens.empty()) {
    try {
      tok = std::make_unique<Tokenizer>(tokenizerDataFromPlan(p.tokenizer));
    } catch (const std::exception &e) {
      throw Failure(fmt::format("plan '{}': tokenizer: {}", o.plan, e.what()));
    }
  }
  std::vector<int32_t> prompt;
  if (!o.promptIds.empty()) {
    if (!o.prompt.empty())
      throw Failure("give either -p TEXT or --prompt-ids, not both");
    prompt = parseIds(o.promptIds, p.model.nVocab);
  } else if (!o.prompt.empty()) {
    if (!tok)
      throw Failure(fmt::format("plan '{}' has no tokenizer; use --prompt-ids", o.plan));
    prompt = tok->encode(o.prompt, true);
    if (prompt.empty())
      throw Failure("-p: the prompt encodes to no tokens");
  } else {
    throw Failure("no prompt: give -p TEXT or --prompt-ids 1,2,3");
  }
  if (o.nPredict < 0)
    throw Failure("-n: must be >= 0");
  const int64_t need = static_cast<int64_t>(prompt.size()) + o.nPredict;
  if (need > s.ctxSize())
    throw Failure(
        fmt::format("the prompt ({} tokens) plus -n {} needs {} positions but the context holds {}; "
                    "raise --ctx-size or lower -n",
                    prompt.size(), o.nPredict, need, s.ctxSize()));
  SamplerParams sp;
  sp.temperature = o.greedy ? 0.0f : o.temp;
  sp.topK = o.topK;
  sp.topP = o.topP;
  sp.seed = o.seed;
  std::unique_ptr<Sampler> sampler;
  try {
    sampler = std::make_unique<Sampler>(sp);
  } catch (const std::exception &e) {
    throw Failure(fmt::format("--temp/--top-k/--top-p: {}", e.what()));
  }

  LogitsDump dump(o.dumpLogits);
  const int64_t vocab = p.model.nVocab;
  std::vector<int32_t> pos(prompt.size());
  for (size_t i = 0; i < pos.size(); ++i)
    pos[i] = static_cast<int32_t>(i);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> rows = eval(s, prompt, pos);
  const double promptSec = seconds(t0);
  dump.write(rows);
  std::vector<float> last(rows.end() - vocab, rows.end());

  std::unique_ptr<StreamDecoder> stream;
  if (tok) {
    stream = std::make_unique<StreamDecoder>(*tok);
    if (!o.prompt.empty()) {
      fmt::print("{}", o.prompt);
      std::fflush(stdout);
    }
  }
  std::vector<int32_t> generated;
  t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < o.nPredict; ++k) {
    int32_t id = sampler->sample(last);
    generated.push_back(id);
    if (stream) {
      fmt::print("{}", stream->push(id));
      std::fflush(stdout);
    }
    if (tok && tok->isEog(id) && !o.ignoreEos)
      break;
    // The last token is fed only for the dump (its logits row completes the fixture layout).
    if (k + 1 < o.nPredict || !o.dumpLogits.empty()) {
      last = eval(s, {id}, {static_cast<int32_t>(prompt.size() + k)});
      dump.write(last);
    }
  }
  const double genSec = seconds(t0);
  if (stream)
    fmt::print("{}\n", stream->flush());
  std::string ids;
  for (size_t i = 0; i < generated.size(); ++i)
    ids += (i ? "," : "") + std::to_string(generated[i]);
  fmt::print("generated ids: {}\n", ids);
  std::fflush(stdout);
  fmt::print(stderr,
             "prompt: {} tokens in {:.3f} s ({:.1f} t/s); generation: {} tokens in {:.3f} s ({:.1f} t/s); "
             "{} device(s) x {} threads\n",
             prompt.size(), promptSec, prompt.size() / std::max(promptSec, 1e-9), generated.size(), genSec,
             generated.size() / std::max(genSec, 1e-9), p.devices.size(), s.threadsPerDevice());
}

/// Time per op kind on device 0, largest first.
void printProfile(const Session &s) {
  std::vector<StepProfile> byOp(kNumOpKinds);
  double total = 0;
  for (const StepProfile &p : s.profile()) {
    StepProfile &b = byOp[static_cast<unsigned>(p.op)];
    b.name = opKindName(p.op);
    b.seconds += p.seconds;
    b.calls += p.calls;
    total += p.seconds;
  }
  std::sort(byOp.begin(), byOp.end(),
            [](const StepProfile &a, const StepProfile &b) { return a.seconds > b.seconds; });
  fmt::print(stderr, "profile (device 0): {:.3f} s in steps\n", total);
  for (const StepProfile &b : byOp)
    if (b.calls)
      fmt::print(stderr, "  {:<16} {:8.3f} s {:5.1f}% {:8} calls\n", b.name, b.seconds,
                 100 * b.seconds / std::max(total, 1e-12), b.calls);
}

/// "0,1" -> {0, 1} (--gpus); the error names the flag.
std::vector<int> parseOrdinals(const std::string &list) {
  std::vector<int> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    char *end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end || v < 0)
      throw Failure(fmt::format("--gpus: '{}' is not a GPU ordinal (expected e.g. 0,1)", item));
    out.push_back(static_cast<int>(v));
  }
  return out;
}

void runRun(const RunOptions &o) {
  if (o.threads < 0)
    throw Failure("-t: threads must be >= 0");
  if (o.ctxSize < 0)
    throw Failure("--ctx-size: must be > 0");
  SessionOptions so;
  so.threads = o.threads;
  so.ctxSize = o.ctxSize;
  so.ggufPath = o.gguf;
  so.ordinals = parseOrdinals(o.gpus);
  so.progress = true;
  // In-process, or as one rank of `mpirun -np N tpc run ...` (Ranks.h): this code runs on rank 0 only,
  // and every evaluate() reaches the other ranks.
  runOnPlan(o.plan, so, o.backend, [&](Session &s) {
    s.setProfiling(o.profile);
    if (o.bench)
      runBench(s, o);
    else
      runGenerate(s, o);
    if (o.profile)
      printProfile(s);
  });
}

void registerRun(CLI::App &app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App *cmd = app.add_subcommand("run", "Run a compiled plan: generate text, dump logits or benchmark");
  cmd->add_option("plan", o->plan, "plan file written by `tpc compile`")->required();
  cmd->add_option("-p,--prompt", o->prompt, "prompt text (tokenized with the plan's tokenizer)");
  cmd->add_option("--prompt-ids", o->promptIds, "prompt as comma-separated token ids");
  cmd->add_option("-n,--n-predict", o->nPredict, "tokens to generate")->capture_default_str();
  cmd->add_flag("--greedy", o->greedy, "argmax decoding (lowest id on ties)");
  cmd->add_option("--temp", o->temp, "sampling temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-k", o->topK, "keep the k most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", o->topP, "nucleus sampling threshold (1 = off)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "sampling seed")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "threads in total, split evenly across devices, at least one each (0 = all cores)");
  cmd->add_option("-c,--ctx-size", o->ctxSize, "context size in tokens (default: the plan's)");
  cmd->add_option("--gguf", o->gguf, "the GGUF the plan was compiled from, if it moved");
  cmd->add_option("--dump-logits", o->dumpLogits,
                  "write float32 logits rows (prompt rows, then one per step)");
  cmd->add_flag("--ignore-eos", o->ignoreEos, "keep generating after an end-of-generation token");
  cmd->add_flag("--bench", o->bench, "benchmark prompt processing and generation (llama-bench style)");
  cmd->add_option("--pp", o->pp, "bench: prompt tokens (also -pp)")->capture_default_str();
  cmd->add_option("--tg", o->tg, "bench: generated tokens (also -tg)")->capture_default_str();
  cmd->add_option("-r,--repetitions", o->reps, "bench: repetitions")->capture_default_str();
  cmd->add_flag("--json", o->json, "bench: JSON output");
  cmd->add_flag("--profile", o->profile, "print time per op kind on device 0 (stderr)");
  cmd->add_option("--backend", o->backend, "auto (the first usable of cuda, cpu), cpu or cuda")
      ->capture_default_str();
  cmd->add_option("--gpus", o->gpus, "CUDA: GPU ordinals for the plan's devices, round-robin (default: all)");
  cmd->callback([o] { runRun(*o); });
}

} // namespace

TPC_REGISTER_COMMAND(20, registerRun);
