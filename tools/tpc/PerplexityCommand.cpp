//===- PerplexityCommand.cpp - `tpc perplexity` -------------------------------===//
//
// `tpc perplexity plan.bin -f text.txt [-c 512]` measures perplexity with llama-perplexity's protocol: the
// text is tokenized (BOS added as the model wants), cut into chunks of --ctx-size tokens (the tail that
// does not fill a chunk is dropped), each chunk is evaluated from position 0 with its first token replaced
// by the BOS, and only the second half is scored: positions ctx/2 .. ctx-2 each predict the next token, so
// every scored token has at least ctx/2 tokens of context. After each chunk the running estimate
// exp(mean NLL) is printed ("[k]PPL,"), at the end the estimate with its standard error
// (ppl * sqrt(var(NLL) / (count - 1))).
//
// `--kl-divergence-base FILE` alone also saves every scored row's log-probabilities (LogProbFile.h);
// `--kl-divergence --kl-divergence-base FILE` evaluates the tokens stored there instead of a text and
// compares each row with the stored one: mean KL(base || this run) with its standard error and
// percentiles, PPL of both, ln(PPL ratio), RMS of the change in the next token's probability, and how often
// both runs rank the same token first. The base may be one of llama-perplexity's own files, which compares
// tpc with the reference engine. Chunks are evaluated in pieces of --batch-size tokens (default: the plan's
// max_batch) so the logits of a whole chunk need not be held at once.
//
// Runs on any backend through the Session interface (`--backend`, as `tpc run`), and as the ranks of
// `mpirun -np N` (Ranks.h: rank 0 scores, the others follow); `--f32-reference` is the CPU backend's float32
// reference (SessionOptions::f32Reference). Every error is one line naming the flag or file.
//===----------------------------------------------------------------------===//
#include "tools/tpc/Command.h"
#include "tools/tpc/LogProbFile.h"
#include "tools/tpc/ModelSource.h"
#include "tools/tpc/Ranks.h"

#include "runtime/ggml/Blocks.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/support/Progress.h"
#include "runtime/tokenizer/PlanVocab.h"
#include "runtime/tokenizer/Tokenizer.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <unistd.h>

namespace {

using tpc::cli::addCompileFlags;
using tpc::cli::commDtypeOverride;
using tpc::cli::Failure;
using tpc::cli::loadModel;
using tpc::cli::LogProbHeader;
using tpc::cli::LogProbReader;
using tpc::cli::LogProbRow;
using tpc::cli::LogProbWriter;
using tpc::cli::runOnPlan;
using namespace tpc::rt;

struct PplOptions {
  std::string plan, text, klBase, gguf, backend = "auto";
  int64_t ctx = 512;
  int64_t chunks = -1;
  int64_t batch = 0;
  int threads = 0;
  bool kld = false;
  bool f32Reference = false;
  bool ctxGiven = false;          ///< -c on the command line (a base file brings its own)
  tpc::cli::CompileFlags compile; ///< for a GGUF: how to compile it (ModelSource.h)
};

/// One logits row reduced to what perplexity and KL divergence need. Sums in double, like the reference.
struct RowScore {
  double nll = 0;  ///< -log p(target)
  int32_t top = 0; ///< argmax, lowest id on ties
  double lse = 0;  ///< log sum exp of the logits: log p(v) = logit[v] - lse
};

RowScore scoreRow(const float *logits, int64_t n, int32_t target) {
  RowScore r;
  float mx = logits[0];
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > mx)
      mx = logits[i], r.top = static_cast<int32_t>(i);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += std::exp(double(logits[i]) - mx);
  r.lse = mx + std::log(sum);
  r.nll = r.lse - logits[target];
  return r;
}

/// Mean and its standard error from running sums (the reference's formula; 0 error for < 2 values).
std::pair<double, double> meanAndError(double sum, double sum2, int64_t n) {
  if (n < 1)
    return {0, 0};
  const double m = sum / n, var = sum2 / n - m * m;
  return {m, n > 1 && var > 0 ? std::sqrt(var / (n - 1)) : 0.0};
}

/// Running sums of a --kl-divergence comparison.
struct KldStats {
  double nll = 0, nll2 = 0, base = 0, base2 = 0, nllBase = 0;
  double kld = 0, kld2 = 0, dp = 0, dp2 = 0, dp4 = 0;
  int64_t sameTop = 0, count = 0;
  std::vector<float> klds; ///< per row, for percentiles

  void add(double nllQ, double nllB, double k, bool same) {
    nll += nllQ, nll2 += nllQ * nllQ, base += nllB, base2 += nllB * nllB, nllBase += nllQ * nllB;
    kld += k, kld2 += k * k;
    const double d = std::exp(-nllQ) - std::exp(-nllB);
    dp += d, dp2 += d * d, dp4 += d * d * d * d;
    sameTop += same;
    ++count;
    klds.push_back(static_cast<float>(k));
  }
  /// ln(PPL(Q)/PPL(base)) and its error (the two NLL series are correlated: their covariance counts).
  std::pair<double, double> logRatio() const {
    auto [q, eq] = meanAndError(nll, nll2, count);
    auto [b, eb] = meanAndError(base, base2, count);
    const double cov = count > 1 ? (nllBase / count - (nll / count) * (base / count)) / (count - 1) : 0;
    return {q - b, std::sqrt(std::max(0.0, eq * eq + eb * eb - 2 * cov))};
  }
};

float percentile(const std::vector<float> &sorted, double f) {
  const double p = f * double(sorted.size() - 1);
  const size_t i = static_cast<size_t>(p);
  const double w = p - double(i);
  return static_cast<float>((1 - w) * sorted[i] + w * sorted[std::min(i + 1, sorted.size() - 1)]);
}

std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Failure(fmt::format("-f: cannot read '{}'", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The chunks to evaluate: the text's tokens or a base file's, each chunk starting with the BOS when the
/// model adds one.
struct Chunks {
  int64_t ctx = 0, count = 0, totalTokens = 0;
  std::vector<int32_t> tokens; ///< count * ctx, as evaluated
  int64_t first() const { return ctx / 2; }
};

Chunks chunksFromText(const PplOptions &o, const Tokenizer &tok) {
  const std::vector<int32_t> ids = tok.encode(readText(o.text), /*addSpecial=*/true);
  Chunks c;
  c.ctx = o.ctx;
  c.totalTokens = static_cast<int64_t>(ids.size());
  if (c.totalTokens < 2 * o.ctx)
    throw Failure(fmt::format("-f '{}' tokenizes to {} tokens, but --ctx-size {} needs at least {}; give a "
                              "longer text or a smaller --ctx-size",
                              o.text, ids.size(), o.ctx, 2 * o.ctx));
  c.count = c.totalTokens / o.ctx;
  if (o.chunks > 0)
    c.count = std::min(c.count, o.chunks);
  c.tokens.assign(ids.begin(), ids.begin() + c.count * c.ctx);
  return c;
}

Chunks chunksFromBase(const PplOptions &o, const LogProbHeader &h, const Plan &plan) {
  if (int64_t(h.nVocab) != plan.model.nVocab)
    throw Failure(fmt::format("--kl-divergence-base '{}' has a vocabulary of {} tokens but plan '{}' has {}; "
                              "compare runs of the same model",
                              o.klBase, h.nVocab, o.plan, plan.model.nVocab));
  if (h.first != h.ctx / 2)
    throw Failure(fmt::format("--kl-divergence-base '{}': scored rows start at {}, not at ctx/2 = {}",
                              o.klBase, h.first, h.ctx / 2));
  if (o.ctxGiven && o.ctx != int64_t(h.ctx))
    throw Failure(
        fmt::format("--ctx-size {} differs from the {} tokens per chunk of --kl-divergence-base '{}'; "
                    "leave -c out (the base file sets it)",
                    o.ctx, h.ctx, o.klBase));
  Chunks c;
  c.ctx = h.ctx;
  c.count = h.nChunks;
  if (o.chunks > 0)
    c.count = std::min(c.count, o.chunks);
  c.totalTokens = static_cast<int64_t>(h.tokens.size());
  c.tokens.assign(h.tokens.begin(), h.tokens.begin() + c.count * c.ctx);
  for (int32_t t : c.tokens)
    if (t < 0 || t >= plan.model.nVocab)
      throw Failure(
          fmt::format("--kl-divergence-base '{}' holds token id {}, outside the vocabulary", o.klBase, t));
  return c;
}

/// Evaluates chunk `k` in pieces of `batch` tokens and hands each scored row (position, logits) to `row`.
template <typename F> void evaluateChunk(Session &s, const Chunks &c, int64_t k, int64_t batch, F &&row) {
  const int64_t vocab = s.plan().model.nVocab;
  for (int64_t at = 0; at < c.ctx; at += batch) {
    const int64_t n = std::min(batch, c.ctx - at);
    std::vector<int32_t> ids(c.tokens.begin() + k * c.ctx + at, c.tokens.begin() + k * c.ctx + at + n),
        pos(n);
    for (int64_t i = 0; i < n; ++i)
      pos[i] = static_cast<int32_t>(at + i);
    auto logits = s.evaluate(ids, pos);
    if (!logits)
      throw Failure(logits.message());
    for (int64_t i = 0; i < n; ++i)
      if (at + i >= c.first() && at + i <= c.ctx - 2)
        row(at + i, logits->data() + i * vocab);
  }
}

/// Perplexity over the chunks; with `writer`, every scored row's log-probabilities go to the base file.
void runPerplexity(Session &s, const Chunks &c, int64_t batch, LogProbWriter *writer) {
  const int64_t vocab = s.plan().model.nVocab;
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  LogProbRow out;
  if (writer)
    out.logp.resize(vocab);
  // On a terminal the running estimate below is the progress (a bar would garble its line); where stdout
  // goes elsewhere, stderr shows the chunks done.
  tpc::Progress chunks("perplexity", static_cast<uint64_t>(c.count), "chunks",
                       !(::isatty(STDOUT_FILENO) && ::isatty(STDERR_FILENO)));
  for (int64_t k = 0; k < c.count; ++k, chunks.add(1)) {
    evaluateChunk(s, c, k, batch, [&](int64_t pos, const float *logits) {
      const RowScore r = scoreRow(logits, vocab, c.tokens[k * c.ctx + pos + 1]);
      nll += r.nll, nll2 += r.nll * r.nll, ++count;
      if (writer) {
        out.nll = static_cast<float>(r.nll);
        out.top = r.top;
        for (int64_t v = 0; v < vocab; ++v)
          out.logp[v] = static_cast<float>(logits[v] - r.lse);
        writer->write(out);
      }
    });
    fmt::print("[{}]{:.4f},", k + 1, std::exp(nll / count));
    std::fflush(stdout);
  }
  chunks.finish();
  auto [m, e] = meanAndError(nll, nll2, count);
  const double ppl = std::exp(m);
  fmt::print("\nFinal estimate: PPL = {:.4f} +/- {:.5f}\n", ppl, ppl * e);
  fmt::print("({} chunks of {} tokens, {} scored tokens, mean NLL {:.6f})\n", c.count, c.ctx, count, m);
}

/// Compares every scored row with the base file's (KL divergence and friends).
void runKld(Session &s, const Chunks &c, int64_t batch, LogProbReader &base) {
  const int64_t vocab = s.plan().model.nVocab;
  const bool llama = base.header().llamaFormat;
  KldStats st;
  LogProbRow b;
  fmt::print(
      "chunk        PPL(Q)        ln(PPL(Q)/PPL(base))       KL divergence       Δp RMS       same top\n");
  tpc::Progress chunks("kl-divergence", static_cast<uint64_t>(c.count), "chunks", // as runPerplexity's
                       !(::isatty(STDOUT_FILENO) && ::isatty(STDERR_FILENO)));
  for (int64_t k = 0; k < c.count; ++k, chunks.add(1)) {
    evaluateChunk(s, c, k, batch, [&](int64_t pos, const float *logits) {
      const int32_t target = c.tokens[k * c.ctx + pos + 1];
      base.read(b);
      const RowScore r = scoreRow(logits, vocab, target);
      // KL(base || Q) = sum_v p_base(v) (log p_base(v) - log p_Q(v)), with this run's log p rounded to
      // the half precision of a tpc base file first: a run compared with its own file gives exactly 0, and
      // what the rounding hides is below 1e-6 of KL divergence.
      double kld = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        const float lq = static_cast<float>(double(logits[v]) - r.lse);
        const double q = llama ? double(lq) : double(tpc::fp16ToFp32(tpc::fp32ToFp16(lq)));
        kld += std::exp(double(b.logp[v])) * (double(b.logp[v]) - q);
      }
      const double nllBase = llama ? -double(b.logp[target]) : double(b.nll);
      st.add(r.nll, nllBase, kld, r.top == b.top);
    });
    auto [lq, eq] = meanAndError(st.nll, st.nll2, st.count);
    auto [lr, er] = st.logRatio();
    auto [kl, ekl] = meanAndError(st.kld, st.kld2, st.count);
    const double pTop = double(st.sameTop) / st.count;
    fmt::print("{:5}   {:9.4f} ± {:7.4f}   {:10.5f} ± {:8.5f}   {:9.6f} ± {:8.6f}   {:6.3f} %   {:7.3f} %\n",
               k + 1, std::exp(lq), std::exp(lq) * eq, lr, er, kl, ekl, 100 * std::sqrt(st.dp2 / st.count),
               100 * pTop);
    std::fflush(stdout);
  }
  chunks.finish();
  auto [lq, eq] = meanAndError(st.nll, st.nll2, st.count);
  auto [lb, eb] = meanAndError(st.base, st.base2, st.count);
  auto [lr, er] = st.logRatio();
  auto [kl, ekl] = meanAndError(st.kld, st.kld2, st.count);
  auto [dp, edp] = meanAndError(st.dp, st.dp2, st.count);
  std::sort(st.klds.begin(), st.klds.end());
  const double pTop = double(st.sameTop) / st.count;
  fmt::print("\n====== Perplexity ({} scored tokens) ======\n", st.count);
  fmt::print("Mean PPL(Q)               : {:10.6f} ± {:10.6f}\n", std::exp(lq), std::exp(lq) * eq);
  fmt::print("Mean PPL(base)            : {:10.6f} ± {:10.6f}\n", std::exp(lb), std::exp(lb) * eb);
  fmt::print("Mean ln(PPL(Q)/PPL(base)) : {:10.6f} ± {:10.6f}\n", lr, er);
  fmt::print("\n====== KL divergence ======\n");
  fmt::print("Mean    KLD: {:10.6f} ± {:10.6f}\n", kl, ekl);
  fmt::print("Maximum KLD: {:10.6f}\n", st.klds.back());
  fmt::print("99.0%   KLD: {:10.6f}\n", percentile(st.klds, 0.99));
  fmt::print("Median  KLD: {:10.6f}\n", percentile(st.klds, 0.5));
  fmt::print("Minimum KLD: {:10.6f}\n", st.klds.front());
  fmt::print("\n====== Token probability ======\n");
  fmt::print("Mean    Δp: {:6.3f} ± {:5.3f} %\n", 100 * dp, 100 * edp);
  fmt::print("RMS     Δp: {:6.3f} %\n", 100 * std::sqrt(st.dp2 / st.count));
  fmt::print("Same top p: {:6.3f} ± {:5.3f} %\n", 100 * pTop,
             st.count > 1 ? 100 * std::sqrt(pTop * (1 - pTop) / (st.count - 1)) : 0.0);
}

void runCommand(const PplOptions &o) {
  if (o.kld && o.klBase.empty())
    throw Failure("--kl-divergence compares with a saved run: give --kl-divergence-base FILE");
  if (!o.kld && o.text.empty())
    throw Failure("no text: give -f FILE (e.g. -f /usr/share/common-licenses/GPL-3)");
  if (o.ctx < 4)
    throw Failure(fmt::format("--ctx-size {}: must be at least 4 (half of each chunk is scored)", o.ctx));
  if (o.batch < 0 || o.threads < 0)
    throw Failure("--batch-size and --threads must be >= 0");
  // A plan file, or a GGUF compiled in memory with the compile flags (ModelSource.h), as `tpc run`.
  std::optional<Plan> plan(loadModel(o.plan, o.compile, o.gguf, nullptr));
  if (plan->tokenizer.tokens.empty())
    throw Failure(fmt::format("plan '{}' has no tokenizer; recompile it from a GGUF with one", o.plan));
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = std::make_unique<Tokenizer>(tokenizerDataFromPlan(plan->tokenizer));
  } catch (const std::exception &e) {
    throw Failure(fmt::format("plan '{}': tokenizer: {}", o.plan, e.what()));
  }

  std::unique_ptr<LogProbReader> base;
  Chunks c;
  if (o.kld) {
    base = std::make_unique<LogProbReader>(o.klBase);
    c = chunksFromBase(o, base->header(), *plan);
  } else {
    c = chunksFromText(o, *tok);
  }
  // Each chunk starts with the BOS (llama-perplexity files store the text's tokens; tpc's the evaluated).
  const TokenizerData &td = tok->data();
  if (td.addBos && td.bos >= 0 && (!base || base->header().llamaFormat))
    for (int64_t k = 0; k < c.count; ++k)
      c.tokens[k * c.ctx] = td.bos;

  SessionOptions so;
  so.threads = o.threads;
  so.ctxSize = c.ctx;
  so.commDtype = commDtypeOverride(o.compile);
  so.ggufPath = o.gguf;
  so.f32Reference = o.f32Reference;
  so.progress = true; // loading the weights (Progress.h: where it takes over a second)
  const int64_t maxBatch = plan->model.maxBatch;
  const size_t devices = plan->devices.size();
  // In-process the plan loaded above is the session's; a rank of an MPI job loads the plan file itself
  // (Ranks.h). The lambda runs on rank 0, and its evaluate() calls reach the other ranks.
  auto load = [&] { return std::move(*plan); };
  runOnPlan(o.plan, load, so, o.backend, [&](Session &s) {
    const int64_t batch = std::min(o.batch > 0 ? o.batch : maxBatch, c.ctx);
    fmt::print(stderr,
               "perplexity: {} tokens, {} chunks of {} (scoring {} per chunk){}, {} device(s) on {}{}\n",
               c.totalTokens, c.count, c.ctx, c.ctx - 1 - c.first(), o.kld ? " from the base file" : "",
               devices, s.backendName(), o.f32Reference ? ", float32 reference" : "");
    const auto t0 = std::chrono::steady_clock::now();
    if (o.kld) {
      runKld(s, c, batch, *base);
    } else {
      std::unique_ptr<LogProbWriter> writer;
      if (!o.klBase.empty()) {
        LogProbHeader h;
        h.nVocab = static_cast<uint32_t>(s.plan().model.nVocab);
        h.ctx = static_cast<uint32_t>(c.ctx);
        h.nChunks = static_cast<uint32_t>(c.count);
        h.first = static_cast<uint32_t>(c.first());
        h.tokens = c.tokens;
        writer = std::make_unique<LogProbWriter>(o.klBase, h);
      }
      runPerplexity(s, c, batch, writer.get());
      if (writer) {
        writer->finish();
        fmt::print(stderr, "perplexity: saved the log-probabilities of every scored row to '{}'\n", o.klBase);
      }
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print(stderr, "perplexity: {:.1f} s ({:.1f} tokens/s)\n", sec,
               c.count * c.ctx / std::max(sec, 1e-9));
  });
}

void registerPerplexity(CLI::App &app) {
  auto o = std::make_shared<PplOptions>();
  CLI::App *cmd = app.add_subcommand(
      "perplexity",
      "Perplexity of a plan over a text (llama-perplexity's protocol), optionally KL divergence");
  cmd->add_option("plan", o->plan, "plan file written by `tpc compile`, or a GGUF (compiled in memory)")
      ->required();
  cmd->add_option("-f,--file", o->text, "the text to score (plain UTF-8)");
  CLI::Option *ctx =
      cmd->add_option("-c,--ctx-size", o->ctx, "tokens per chunk; the second half of each is scored")
          ->capture_default_str();
  cmd->add_option("--chunks", o->chunks, "score at most this many chunks (default: all)");
  cmd->add_option("-b,--batch-size", o->batch, "tokens per evaluation (default: the plan's max_batch)");
  cmd->add_option("-t,--threads", o->threads, "threads in total, split across devices (0 = all cores)");
  cmd->add_option("--kl-divergence-base", o->klBase,
                  "log-probability file: written by a plain run, read by --kl-divergence (tpc's or "
                  "llama-perplexity's format)");
  cmd->add_flag("--kl-divergence", o->kld, "compare with --kl-divergence-base over its stored tokens");
  cmd->add_flag("--f32-reference", o->f32Reference,
                "CPU float32 reference: no activation quantization, f32 KV cache (slower)");
  cmd->add_option("--backend", o->backend, "auto (CUDA when built and a GPU is visible), cpu or cuda")
      ->capture_default_str();
  cmd->add_option("--gguf", o->gguf, "the GGUF the plan was compiled from, if it moved");
  addCompileFlags(*cmd, o->compile);
  cmd->callback([o, ctx] {
    o->ctxGiven = ctx->count() > 0;
    runCommand(*o);
  });
}

} // namespace

TPC_REGISTER_COMMAND(27, registerPerplexity);
