//===- RunCommand.cpp - `tpc run` -------------------------------------------===//
//
// `tpc run plan.bin -p TEXT -n N` loads a plan (tokenizer included), or compiles a GGUF in memory with the
// flags of `tpc compile` (`tpc run model.gguf --devices 2`, ModelSource.h), opens a session on the backend
// `--backend auto|cpu|cuda` names (the built-in registry, runtime/backends; auto is CUDA when built and a
// GPU is visible) and streams generated text; the rest of the command sees only the Session interface
// (runtime/exec/Session.h). `--prompt-ids 1,2,3` skips the tokenizer; `--dump-logits FILE` writes float32
// rows (one per prompt position, then one per generated token after feeding it), the layout of the
// fixtures' .logits.f32 files (every prompt row is asked for only then: generating asks the session for the
// last row of the prompt and of each step, so the plan's output head runs on one row).
// `--bench -pp 512 -tg 128 [-r 5] [--depth N] [--json]` prints a llama-bench style table; with --depth N
// each test runs after N tokens of context (filled untimed, like llama-bench -gp N,128: "tg128 @ d4096").
// `--parallel 1,2,4,8` adds batched decode tests: P sequences (each after --depth tokens of its own) advance
// one token each per evaluate() call, every token asking for its logits row, as `tpc serve -np P` steps its
// slots; the table gives the aggregate t/s and the ms of one step next to the step of one sequence.
// llama-bench spells the test sizes "-pp"/"-tg", which CLI11 cannot declare (one-letter short names), so
// main.cpp rewrites those two spellings to --pp/--tg before parsing. `--f32-reference` runs the CPU
// backend's float32 reference (precision measurements), `--f32-kv` only its f32 KV caches; `--dump-hidden
// FILE` writes each layer's output per token (HiddenDump.h) to compare runs layer by layer. Every error is
// one line naming the flag or file. Under `mpirun -np N` (or `srun`) the process is one rank of a job and
// runs one plan device; rank 0 runs everything here and the others follow its evaluate() calls (Ranks.h).
//===----------------------------------------------------------------------===//
#include "tools/tpc/Command.h"
#include "tools/tpc/HiddenDump.h"
#include "tools/tpc/ModelSource.h"
#include "tools/tpc/Ranks.h"
#include "tools/tpc/RoutingProfile.h"

#include "runtime/comm/MpiLaunch.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/plan/PlanSummary.h"
#include "runtime/sampler/Sampler.h"
#include "runtime/support/Progress.h"
#include "runtime/tokenizer/PlanVocab.h"
#include "runtime/tokenizer/Tokenizer.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <sstream>

namespace {

using tpc::cli::commDtypeOverride;
using tpc::cli::CompileFlags;
using tpc::cli::Failure;
using tpc::cli::HiddenDump;
using tpc::cli::loadModel;
using tpc::cli::RoutingCounter;
using tpc::cli::runOnPlan;
using namespace tpc::rt;
using tpc::Timeline;

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
  std::string profileRouting; ///< --profile-routing FILE (RoutingProfile.h)
  std::string dumpHidden;     ///< --dump-hidden FILE (HiddenDump.h)
  bool ignoreEos = false;
  bool bench = false;
  int pp = 512;
  int tg = 128;
  int depth = 0;
  std::string parallel; ///< --parallel 1,2,4: sequences per batched decode step (bench)
  int reps = 5;
  bool json = false;
  bool profile = false;
  bool timings = false;
  bool noMmap = false;
  bool noHugePages = false;
  int microBatches = 0; ///< --micro-batches (pipeline plans)
  std::string backend = "auto";
  std::string gpus;
  bool f32Reference = false;
  bool f32Kv = false;
  CompileFlags compile; ///< for a GGUF: how to compile it (ModelSource.h)
};

/// Prompt tokens per evaluate() call (see runGenerate); the CPU prefill kernels work on 64-token blocks.
constexpr int64_t kPromptChunk = 64;

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

/// Runs `ids` at positions from..from+n-1 of sequence 0 and returns the logits of the last one only.
std::vector<float> evalLast(Session &s, const std::vector<int32_t> &ids, int32_t from) {
  std::vector<BatchToken> batch(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    batch[i] = {ids[i], from + static_cast<int32_t>(i), 0, i + 1 == ids.size()};
  auto r = s.evaluate(batch);
  if (!r)
    throw Failure(r.message());
  return std::move(*r);
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// `s` as the inside of a JSON string (quotes, backslashes and control characters escaped).
std::string jsonText(const std::string &s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (c < 0x20)
      out += fmt::format("\\u{:04x}", c);
    else
      out += static_cast<char>(c);
  }
  return out;
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
/// the measured read bandwidth (a decode step reads its weights and writes next to nothing, so a copy
/// figure, which pays a write per byte, is not its bound; it is printed beside as such). Logical devices on
/// one memory share it, so the slowest memory (most bytes per bandwidth) bounds the token; host-placed steps
/// on a GPU backend read host memory and are left out.
struct Roofline {
  uint64_t bytes = 0, hostBytes = 0; ///< weight bytes per token on the bounding memory; host-placed reads
  double bandwidth = 0, ts = 0;      ///< that memory's read bytes/s; tokens/s (0: unknown)
  double copy = 0;                   ///< that memory's copy bytes/s (read + write counted), for the note
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
    const double bw = s.readBandwidth(m);
    if (bw <= 0) { // unknown: say which memory
      best.bytes = b, best.bandwidth = 0, best.ts = 0, best.memory = m;
      return best;
    }
    if (best.ts == 0 || bw / double(b) < best.ts)
      best.bytes = b, best.bandwidth = bw, best.ts = bw / double(b), best.memory = m;
  }
  if (best.ts > 0)
    best.copy = s.copyBandwidth(best.memory);
  return best;
}

/// A comma-separated list of integers in [lo, hi] (--gpus, --parallel); an error names the flag and says what
/// an entry must be (`what`) with an example.
std::vector<int> parseIntList(const std::string &list, const char *flag, long lo, long hi,
                              const std::string &what, const char *example) {
  std::vector<int> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    char *end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end || v < lo || v > hi)
      throw Failure(fmt::format("{}: '{}' is not {} (expected e.g. {})", flag, item, what, example));
    out.push_back(static_cast<int>(v));
  }
  return out;
}

/// --parallel "1,2,4" as sequence counts, each 1..kMaxSequences; "" gives none.
std::vector<int> parseParallel(const std::string &list) {
  return parseIntList(list, "--parallel", 1, kMaxSequences,
                      fmt::format("a sequence count in 1..{}", kMaxSequences), "1,2,4,8");
}

void runBench(Session &s, const RunOptions &o) {
  const Plan &p = s.plan();
  const std::vector<int> parallel = parseParallel(o.parallel);
  if (o.pp < 0 || o.tg < 0 || (o.pp == 0 && o.tg == 0))
    throw Failure("--bench: give -pp N and/or -tg N with N > 0");
  if (!parallel.empty() && o.tg == 0)
    throw Failure("--parallel: needs -tg N > 0 (the decode steps it times)");
  if (o.reps < 1)
    throw Failure("-r: repetitions must be >= 1");
  if (o.depth < 0)
    throw Failure("--depth: must be >= 0");
  if (int64_t(o.depth) + std::max(o.pp, o.tg) > s.ctxSize())
    throw Failure(fmt::format("--bench: --depth {} + -pp {} / -tg {} exceed the context of {} tokens; raise "
                              "--ctx-size",
                              o.depth, o.pp, o.tg, s.ctxSize()));
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(p.model.nVocab - 1));
  auto randomIds = [&](int n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t &id : ids)
      id = tok(rng);
    return ids;
  };
  // The context the tests start from (untimed): positions 0..depth-1 of sequence 0, asking for one row
  // per chunk as llama-bench's prompt does. A test then rewinds to `depth`, which keeps the context,
  // unless a sliding-window ring has overwritten what position `depth` reads, or the model's recurrent
  // state would be recomputed by the rewind (inside the timed test); then it is filled again, untimed.
  auto fillDepth = [&] {
    s.clearSequence(0);
    for (int at = 0; at < o.depth; at += static_cast<int>(p.model.maxBatch))
      evalLast(s, randomIds(std::min<int>(o.depth - at, static_cast<int>(p.model.maxBatch))), at);
  };
  auto atDepth = [&] {
    if (o.depth == 0 || (s.recomputesRewinds() ? s.sequenceLength(0) != o.depth
                                               : !s.checkBatch({{0, o.depth, 0, true}}).empty()))
      fillDepth();
  };
  struct Result {
    std::string test;
    int tokens;
    double mean, sd;
    int sequences = 1;
    double stepMs = 0; ///< --parallel: ms per decode step
  };
  std::vector<Result> results;
  // Every round of every test (warm-ups included): a bar on stderr where the bench takes over a second.
  const int tests = (o.pp > 0) + (o.tg > 0) + static_cast<int>(parallel.size());
  tpc::Progress rounds("bench", static_cast<uint64_t>(tests) * static_cast<uint64_t>(o.reps + 1), "rounds");
  auto measure = [&](const std::string &name, int n, bool prompt) {
    std::vector<double> ts;
    for (int r = -1; r < o.reps; ++r, rounds.add(1)) { // r = -1 is the warm-up
      atDepth();
      const std::vector<int32_t> ids = randomIds(n);
      auto t0 = std::chrono::steady_clock::now();
      if (prompt) {
        evalLast(s, ids, o.depth);
      } else {
        for (int i = 0; i < n; ++i)
          evalLast(s, {ids[i]}, o.depth + i);
      }
      if (r >= 0)
        ts.push_back(n / seconds(t0));
    }
    auto [m, sd] = meanStd(ts);
    results.push_back({o.depth ? fmt::format("{} @ d{}", name, o.depth) : name, n, m, sd});
  };
  if (o.depth > 0) {
    fillDepth();
  }
  // Batched decode: sequences 0..P-1 each hold `depth` tokens (sequence 0's context copied by refilling, as
  // each sequence has its own cache), then every step feeds one token to each.
  auto measureParallel = [&](int P) {
    std::vector<double> ts, ms;
    for (int r = -1; r < o.reps; ++r, rounds.add(1)) {
      for (int q = 0; q < P; ++q) {
        if (o.depth == 0 || (s.recomputesRewinds() ? s.sequenceLength(q) != o.depth
                                                   : !s.checkBatch({{0, o.depth, q, true}}).empty())) {
          s.clearSequence(q);
          for (int at = 0; at < o.depth; at += static_cast<int>(p.model.maxBatch)) {
            const int n = std::min<int>(o.depth - at, static_cast<int>(p.model.maxBatch));
            std::vector<BatchToken> b;
            for (int32_t id : randomIds(n))
              b.push_back({id, at + static_cast<int32_t>(b.size()), q, static_cast<int>(b.size()) + 1 == n});
            if (auto e = s.evaluate(b); !e)
              throw Failure(e.message());
          }
        }
      }
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < o.tg; ++i) {
        std::vector<BatchToken> b;
        for (int q = 0; q < P; ++q)
          b.push_back({tok(rng), o.depth + i, q, true});
        if (auto e = s.evaluate(b); !e)
          throw Failure(e.message());
      }
      const double sec = seconds(t0);
      if (r >= 0) {
        ts.push_back(double(P) * o.tg / sec);
        ms.push_back(1e3 * sec / o.tg);
      }
    }
    auto [m, sd] = meanStd(ts);
    const std::string name = fmt::format("tg{} x{} seq", o.tg, P);
    results.push_back(
        {o.depth ? fmt::format("{} @ d{}", name, o.depth) : name, o.tg * P, m, sd, P, meanStd(ms).first});
  };
  if (o.pp > 0)
    measure(fmt::format("pp{}", o.pp), o.pp, true);
  if (o.tg > 0)
    measure(fmt::format("tg{}", o.tg), o.tg, false);
  for (int P : parallel)
    measureParallel(P);
  rounds.finish();

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
          "\"threads_per_device\": {}, \"test\": \"{}\", \"n_tokens\": {}, \"n_depth\": {}, \"n_parallel\": "
          "{}, "
          "\"step_ms\": {:.4f}, \"reps\": {}, \"avg_ts\": {:.4f}, "
          "\"stddev_ts\": {:.4f}, \"decode_weight_bytes_per_token\": {}, \"read_bandwidth_bytes_per_s\": "
          "{:.0f}, \"copy_bandwidth_bytes_per_s\": {:.0f}, "
          "\"roofline_ts\": {:.4f}, \"kernels\": \"{}\"}}{}\n",
          model, file, weightBytes, devices, s.backendName(), s.threadsPerDevice(), results[i].test,
          results[i].tokens, o.depth, results[i].sequences, results[i].stepMs, o.reps, results[i].mean,
          results[i].sd, roof.bytes, roof.bandwidth, roof.copy, roof.ts, jsonText(s.kernelChoice()),
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
  // --parallel: the step of P sequences against the step of one (the first parallel test with P = 1, else
  // the tg test).
  double oneStep = 0;
  for (const Result &r : results)
    if (r.sequences == 1 && r.stepMs > 0)
      oneStep = r.stepMs;
  for (const Result &r : results)
    if (oneStep == 0 && r.stepMs == 0 && r.test.rfind("tg", 0) == 0)
      oneStep = 1e3 / r.mean;
  for (const Result &r : results)
    if (r.stepMs > 0)
      fmt::print("\n{}: {:.2f} ms per step of {} token(s){}", r.test, r.stepMs, r.sequences,
                 oneStep > 0 ? fmt::format(", {:.2f}x the step of one sequence", r.stepMs / oneStep)
                             : std::string());
  if (!parallel.empty())
    fmt::print("\n");
  if (!s.kernelChoice().empty()) // which kernel level ran, and why (runtime/cpu/KernelChoice.h)
    fmt::print("\nkernels: {}\n", s.kernelChoice());
  if (roof.ts <= 0) {
    fmt::print("\ndecode roofline: unknown (the read bandwidth of {} could not be measured)\n",
               s.memoryName(roof.memory));
    return;
  }
  fmt::print("\ndecode roofline: {} of weights per token on {} at {:.1f} GB/s (read; copy {:.1f} GB/s, read + "
             "write counted) = {:.1f} t/s{}\n",
             bytesStr(roof.bytes), s.memoryName(roof.memory), roof.bandwidth / 1e9, roof.copy / 1e9, roof.ts,
             roof.hostBytes
                 ? fmt::format(" (host-placed steps read {} more from host memory)", bytesStr(roof.hostBytes))
                 : std::string());
  for (const Result &r : results)
    if (r.test.rfind("tg", 0) == 0 && r.stepMs == 0) { // a batched step reads the weights once for P tokens
      const double pct = 100.0 * r.mean / roof.ts;
      // Above ~100%: part of the weights came from the caches (a model near the last-level cache's size).
      fmt::print("{}: {:.1f}% of the roofline{}\n", r.test, pct,
                 pct > 105 ? " (above it: weights served partly from the caches)" : "");
    }
}

/// The start-up phases to the first token, one line on stderr (`--timings`), and whether the run built the
/// tokenizer's encoder tables (a run on --prompt-ids needs none: tests hold it to that).
void printTimings(const Timeline &tl, const Tokenizer *tok) {
  std::string line;
  for (const Timeline::Phase &ph : tl.phases())
    line += fmt::format("{}{} {:.3f} ({:.3f})", line.empty() ? "" : ", ", ph.name, ph.wall, ph.cpu);
  fmt::print(stderr, "timings, wall (cpu) s: {}; first token after {:.3f} s; tokenizer tables {}\n", line,
             tl.total(),
             !tok                        ? "none"
             : tok->encoderTablesBuilt() ? "built"
                                         : "not built");
}

/// The tokenizer of the plan's vocabulary (moved out of it), or null when the plan has none.
std::unique_ptr<Tokenizer> makeTokenizer(PlanTokenizer planVocab, const RunOptions &o, Timeline &tl) {
  if (planVocab.tokens.empty())
    return nullptr;
  std::unique_ptr<Tokenizer> tok;
  try {
    // A prompt given as ids is never encoded: no SPM scores or BPE merges to hold.
    tok = std::make_unique<Tokenizer>(tokenizerDataFromPlan(std::move(planVocab)),
                                      o.prompt.empty() ? TokenizerUse::DecodeOnly : TokenizerUse::EncodeDecode);
  } catch (const std::exception &e) {
    throw Failure(fmt::format("'{}': tokenizer: {}", o.plan, e.what()));
  }
  tl.mark("tokenizer");
  return tok;
}

/// `tok`: the plan's tokenizer, built before the session opened (see runRun), or null.
void runGenerate(Session &s, const RunOptions &o, std::unique_ptr<Tokenizer> tok, Timeline &tl) {
  const Plan &p = s.plan();
  std::vector<int32_t> prompt;
  if (!o.promptIds.empty()) {
    if (!o.prompt.empty())
      throw Failure("give either -p TEXT or --prompt-ids, not both");
    prompt = parseIds(o.promptIds, p.model.nVocab);
  } else if (!o.prompt.empty()) {
    if (!tok)
      throw Failure(fmt::format("'{}' has no tokenizer; use --prompt-ids", o.plan));
    prompt = tok->encode(o.prompt, true);
    if (prompt.empty())
      throw Failure("-p: the prompt encodes to no tokens");
    tok->dropEncoder(); // generation only decodes
    tl.mark("encode prompt");
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
  // The prompt goes in calls of at most kPromptChunk tokens, so the logits rows a call returns (n_vocab
  // floats each: 1 MiB for a 262k vocabulary) and those the session writes stay within that many rows
  // whatever the prompt's length: an 808-token prompt no longer holds 808 rows at once.
  auto t0 = std::chrono::steady_clock::now();
  // Sampling needs the last row only: one row computed. Every prompt row only for the dump.
  std::vector<float> last;
  if (o.dumpLogits.empty())
    last = evalLast(s, prompt, 0);
  const size_t chunk = static_cast<size_t>(std::min<int64_t>(kPromptChunk, p.model.maxBatch));
  for (size_t b = 0; !o.dumpLogits.empty() && b < prompt.size(); b += chunk) {
    const size_t e = std::min(prompt.size(), b + chunk);
    std::vector<int32_t> ids(prompt.begin() + b, prompt.begin() + e), pos(e - b);
    for (size_t i = b; i < e; ++i)
      pos[i - b] = static_cast<int32_t>(i);
    std::vector<float> rows = eval(s, ids, pos);
    dump.write(rows);
    if (e == prompt.size())
      last.assign(rows.end() - vocab, rows.end());
  }
  const double promptSec = seconds(t0);

  std::unique_ptr<StreamDecoder> stream;
  if (tok) {
    stream = std::make_unique<StreamDecoder>(*tok);
    if (!o.prompt.empty()) {
      fmt::print("{}", o.prompt);
      std::fflush(stdout);
    }
  }
  tl.mark("prompt evaluate");
  std::vector<int32_t> generated;
  t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < o.nPredict; ++k) {
    int32_t id = sampler->sample(last);
    generated.push_back(id);
    if (k == 0)
      tl.mark("sample");
    if (stream) {
      fmt::print("{}", stream->push(id));
      std::fflush(stdout);
    }
    if (tok && tok->isEog(id) && !o.ignoreEos)
      break;
    // The last token is fed only for the dump (its logits row completes the fixture layout).
    if (k + 1 < o.nPredict || !o.dumpLogits.empty()) {
      std::vector<float>().swap(last); // one logits row alive, not two (1 MiB each for 262k tokens)
      last = evalLast(s, {id}, static_cast<int32_t>(prompt.size() + k));
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
             "{} device(s) x {} threads; {} logits rows computed{}\n",
             prompt.size(), promptSec, prompt.size() / std::max(promptSec, 1e-9), generated.size(), genSec,
             generated.size() / std::max(genSec, 1e-9), p.devices.size(), s.threadsPerDevice(),
             s.counters().outputRows,
             s.kernelChoice().empty() ? std::string() : "; kernels " + s.kernelChoice());
  if (o.timings)
    printTimings(tl, tok.get());
}

/// Time per op kind on each device the session times (the CPU: every device; CUDA: the first), largest
/// first. A device's collectives include its wait for the others, so the tables side by side show where
/// devices fall out of step.
void printProfile(const Session &s) {
  for (size_t d = 0; d < s.devices().size(); ++d) {
    const std::vector<StepProfile> steps = s.profile(d);
    std::vector<StepProfile> byOp(kNumOpKinds);
    double total = 0;
    int64_t calls = 0;
    for (const StepProfile &p : steps) {
      StepProfile &b = byOp[static_cast<unsigned>(p.op)];
      b.name = opKindName(p.op);
      b.seconds += p.seconds;
      b.calls += p.calls;
      total += p.seconds;
      calls += p.calls;
    }
    if (calls == 0)
      continue;
    std::sort(byOp.begin(), byOp.end(),
              [](const StepProfile &a, const StepProfile &b) { return a.seconds > b.seconds; });
    fmt::print(stderr, "profile (device {}): {:.3f} s in steps\n", s.devices()[d], total);
    for (const StepProfile &b : byOp)
      if (b.calls)
        fmt::print(stderr, "  {:<16} {:8.3f} s {:5.1f}% {:8} calls\n", b.name, b.seconds,
                   100 * b.seconds / std::max(total, 1e-12), b.calls);
  }
}

/// "0,1" -> {0, 1} (--gpus); the error names the flag.
std::vector<int> parseOrdinals(const std::string &list) {
  return parseIntList(list, "--gpus", 0, INT32_MAX, "a GPU ordinal", "0,1");
}

void runRun(const RunOptions &o) {
  Timeline tl;
  if (o.threads < 0)
    throw Failure("-t: threads must be >= 0");
  if (o.ctxSize < 0)
    throw Failure("--ctx-size: must be > 0");
  SessionOptions so;
  so.threads = o.threads;
  so.ctxSize = o.ctxSize;
  so.commDtype = commDtypeOverride(o.compile);
  for (int P : parseParallel(o.parallel))
    so.sequences = std::max(so.sequences, P);
  so.ggufPath = o.gguf;
  so.ordinals = parseOrdinals(o.gpus);
  so.progress = true;
  so.f32Reference = o.f32Reference;
  so.f32KvCache = o.f32Kv;
  so.timeline = &tl;
  so.weightsInPlace = !o.noMmap;
  so.hugePages = !o.noHugePages;
  so.microBatches = o.microBatches;
  // --profile-routing: the counter is made from the session's plan before the first evaluate; the observer
  // runs on the device threads during evaluate() only.
  std::unique_ptr<RoutingCounter> routing;
  // Opened now, so a bad path fails before the model loads; by rank 0 only under MPI (it runs device 0,
  // where the dump reads; an unknown rank opens too).
  std::unique_ptr<HiddenDump> hidden;
  if (!o.dumpHidden.empty() && comm::detectMpiLaunch().rank <= 0)
    hidden = std::make_unique<HiddenDump>(o.dumpHidden);
  if (!o.profileRouting.empty() || hidden)
    so.stepObserver = [&routing, &hidden](int d, size_t i, const Step &st, const std::vector<exec::TensorRef> &in,
                                          const std::vector<exec::TensorRef> &out) {
      if (routing)
        routing->observe(d, i, st, in);
      if (hidden)
        hidden->observe(d, i, st, in, out);
    };
  // In-process the plan file or GGUF is loaded here and its tokenizer built from it (the session never
  // reads it); a rank of an MPI job loads the plan itself and rank 0 builds the tokenizer here the same way.
  // Built before the session opens: the plan's per-token strings and the tokenizer's compact copy then
  // coexist while the process is small, not on top of the weights at its peak.
  std::unique_ptr<Tokenizer> tok;
  auto load = [&] {
    Plan plan = loadModel(o.plan, o.compile, o.gguf, &tl);
    if (!o.bench)
      tok = makeTokenizer(std::move(plan.tokenizer), o, tl);
    return plan;
  };
  // In-process, or as one rank of `mpirun -np N tpc run ...` (Ranks.h): this code runs on rank 0 only,
  // and every evaluate() reaches the other ranks.
  runOnPlan(o.plan, load, so, o.backend, [&](Session &s) {
    s.setProfiling(o.profile);
    if (!o.profileRouting.empty())
      routing = std::make_unique<RoutingCounter>(s.plan());
    if (hidden)
      hidden->bind(s.plan());
    if (o.bench)
      runBench(s, o);
    else
      runGenerate(s, o, tok ? std::move(tok) : makeTokenizer(s.plan().tokenizer, o, tl), tl);
    if (o.profile)
      printProfile(s);
    if (hidden) {
      hidden->finish();
      fmt::print(stderr, "tpc run: {} hidden-state records written to '{}' (scripts/compare-hidden.py compares two)\n",
                 hidden->records(), o.dumpHidden);
    }
    if (routing) {
      routing->write(o.profileRouting);
      fmt::print(
          stderr,
          "tpc run: the routing of {} tokens written to '{}' (tpc compile --routing-profile reads it)\n",
          routing->tokens(), o.profileRouting);
    }
  }, [&](PlanTokenizer vocab) {
    if (!o.bench)
      tok = makeTokenizer(std::move(vocab), o, tl);
  });
}

void registerRun(CLI::App &app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App *cmd = app.add_subcommand("run", "Run a compiled plan: generate text, dump logits or benchmark");
  cmd->add_option(
         "model", o->plan,
         "plan file written by `tpc compile`, or a GGUF model (compiled in memory with the flags below)")
      ->required();
  addCompileFlags(*cmd, o->compile);
  cmd->add_option("-p,--prompt", o->prompt, "prompt text (tokenized with the plan's tokenizer)");
  cmd->add_option("--prompt-ids", o->promptIds, "prompt as comma-separated token ids");
  cmd->add_option("-n,--n-predict", o->nPredict, "tokens to generate")->capture_default_str();
  cmd->add_flag("--greedy", o->greedy, "argmax decoding (lowest id on ties)");
  cmd->add_option("--temp", o->temp, "sampling temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-k", o->topK, "keep the k most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", o->topP, "nucleus sampling threshold (1 = off)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "sampling seed")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads,
                  "threads in total, split evenly across devices, at least one each (0 = all cores)");
  cmd->add_option("-c,--ctx-size", o->ctxSize, "context size in tokens (default: the plan's)");
  cmd->add_option("--gguf", o->gguf, "the GGUF the plan was compiled from, if it moved");
  cmd->add_option(
      "--profile-routing", o->profileRouting,
      "Count the tokens routed to each expert of every MoE layer during the run and write them to "
      "FILE, in the format `tpc compile --routing-profile` reads");
  cmd->add_option("--dump-logits", o->dumpLogits,
                  "write float32 logits rows (prompt rows, then one per step)");
  cmd->add_option("--dump-hidden", o->dumpHidden,
                  "CPU: write every layer's residual-stream output (float32, per evaluated token) to FILE; "
                  "scripts/compare-hidden.py compares two such files layer by layer");
  cmd->add_flag("--f32-reference", o->f32Reference,
                "CPU float32 reference: no activation quantization, f32 KV cache (precision checks; slower)");
  cmd->add_flag("--f32-kv", o->f32Kv,
                "CPU: f32 KV caches, every other step as usual (isolates the f16 cache's rounding)");
  cmd->add_flag("--ignore-eos", o->ignoreEos, "keep generating after an end-of-generation token");
  cmd->add_flag("--bench", o->bench, "benchmark prompt processing and generation (llama-bench style)");
  cmd->add_option("--pp", o->pp, "bench: prompt tokens (also -pp)")->capture_default_str();
  cmd->add_option("--tg", o->tg, "bench: generated tokens (also -tg)")->capture_default_str();
  cmd->add_option("-r,--repetitions", o->reps, "bench: repetitions")->capture_default_str();
  cmd->add_option("--depth", o->depth,
                  "bench: context tokens filled (untimed) before each test, as "
                  "llama-bench -gp N,TG")
      ->capture_default_str();
  cmd->add_option(
      "--parallel", o->parallel,
      "bench: batched decode of P sequences per step for each P of a list (e.g. 1,2,4,8), as `tpc serve "
      "-np P` runs its slots");
  cmd->add_flag("--json", o->json, "bench: JSON output");
  cmd->add_flag("--profile", o->profile, "print time per op kind on each device (stderr; the CUDA backend times its first device only)");
  cmd->add_flag(
      "--no-mmap", o->noMmap,
      "copy every weight slice into the session (default: read contiguous slices from the mapped GGUF where "
      "weights are not on huge pages)");
  cmd->add_flag("--no-huge-pages", o->noHugePages,
                "CPU: keep weights and KV caches on 4 KiB pages (default: 2 MiB transparent huge pages where the "
                "kernel offers them, the weights copied there; decode is faster, opening copies the weights)");
  cmd->add_option("--micro-batches", o->microBatches,
                  "pipeline plans (tpc compile --stages) in one process: cut a call of several tokens into this "
                  "many micro-batches, so the stages work on different ones at once (default 0: one per stage; 1: "
                  "none)")
      ->check(CLI::Range(0, 4096));
  cmd->add_flag("--timings", o->timings, "print the start-up phases up to the first token (stderr)");
  cmd->add_option("--backend", o->backend, "auto (the first usable of cuda, cpu), cpu or cuda")
      ->capture_default_str();
  cmd->add_option("--gpus", o->gpus, "CUDA: GPU ordinals for the plan's devices, round-robin (default: all)");
  cmd->callback([o] { runRun(*o); });
}

} // namespace

TPC_REGISTER_COMMAND(20, registerRun);
