//===- Session.cpp - the evaluate loop every backend shares ----------------===//
//
// Batch checks (the sequence rules of Session.h), chunks of at most max_batch tokens and max_output_rows
// logits rows, the rows each chunk asks for, and the failure latch: a chunk that fails leaves device
// memory (and the KV caches) in an unknown state, so the session refuses every later call.
//===----------------------------------------------------------------------===//
#include "runtime/exec/Session.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>

namespace tpc::rt {

namespace {
/// The sliding-window caches whose ring is shorter than the context: (window, positions per sequence).
std::vector<std::pair<int64_t, int64_t>> ringsOf(const Plan &plan, int64_t ctx) {
  std::vector<std::pair<int64_t, int64_t>> rings;
  for (const DevicePlan &d : plan.devices)
    for (const KvCache &c : d.kv)
      if (c.window > 0 && kvPositions(c, ctx, plan.model.maxBatch) < ctx)
        rings.emplace_back(c.window, kvPositions(c, ctx, plan.model.maxBatch));
  std::sort(rings.begin(), rings.end());
  rings.erase(std::unique(rings.begin(), rings.end()), rings.end());
  return rings;
}
bool hasRecurrentCaches(const Plan &plan) {
  for (const DevicePlan &d : plan.devices)
    for (const KvCache &c : d.kv)
      if (c.kind == CacheKind::Recurrent)
        return true;
  return false;
}
} // namespace

Session::Session(Plan plan, int64_t ctx, int32_t sequences, std::vector<int> devices)
    : plan_(std::move(plan)), ctx_(ctx), devices_(std::move(devices)),
      rowsInput_(plan_.model.maxOutputRows > 0), lengths_(static_cast<size_t>(std::max(1, sequences)), 0),
      rings_(ringsOf(plan_, ctx_)), recurrent_(hasRecurrentCaches(plan_)),
      history_(recurrent_ ? lengths_.size() : 0) {
  for (int d : devices_) {
    const std::vector<Step> &steps = plan_.devices[static_cast<size_t>(d)].steps;
    std::vector<StepProfile> &p = prof_.emplace_back(steps.size());
    for (size_t i = 0; i < steps.size(); ++i)
      p[i].name = steps[i].name, p[i].op = steps[i].op;
  }
}

Session::~Session() = default;

bool Session::runsDevice(int d) const { return std::binary_search(devices_.begin(), devices_.end(), d); }

void Session::recordStep(size_t step, double seconds, size_t device) {
  StepProfile &p = prof_[device][step];
  p.seconds += seconds;
  ++p.calls;
}

void Session::clearSequence(int32_t seq) {
  if (seq >= 0 && static_cast<size_t>(seq) < lengths_.size()) {
    lengths_[static_cast<size_t>(seq)] = 0;
    if (recurrent_)
      history_[static_cast<size_t>(seq)].clear();
  }
}

int64_t Session::sequenceLength(int32_t seq) const {
  return seq >= 0 && static_cast<size_t>(seq) < lengths_.size() ? lengths_[static_cast<size_t>(seq)] : 0;
}

std::string Session::checkBatch(const std::vector<BatchToken> &batch) const {
  if (batch.empty())
    return "evaluate: the batch is empty";
  const int64_t nSeq = static_cast<int64_t>(lengths_.size());
  // Per sequence: the position its next token in this batch must have (-1: none seen yet).
  std::vector<int64_t> next(lengths_.size(), -1);
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchToken &b = batch[i];
    if (b.token < 0 || b.token >= plan_.model.nVocab)
      return fmt::format("batch entry {}: token id {} is outside the vocabulary (0..{})", i, b.token,
                         plan_.model.nVocab - 1);
    if (b.seq < 0 || b.seq >= nSeq)
      return fmt::format("batch entry {}: sequence {} is not in 0..{} (the session holds {} sequence(s); "
                         "open it with more, e.g. tpc serve -np)",
                         i, b.seq, nSeq - 1, nSeq);
    if (b.pos < 0 || b.pos >= ctx_)
      return fmt::format("batch entry {}: position {} is past the context of {} tokens; use a larger "
                         "--ctx-size (the model was trained with {})",
                         i, b.pos, ctx_, plan_.model.nCtxTrain);
    const int64_t len = lengths_[b.seq];
    int64_t &want = next[b.seq];
    if (want >= 0) {
      if (b.pos != want)
        return fmt::format("batch entry {}: sequence {} continues at position {} after position {} earlier "
                           "in the batch; a sequence's tokens take consecutive positions",
                           i, b.seq, b.pos, want - 1);
    } else if (b.pos > len) {
      return fmt::format("batch entry {}: sequence {} holds {} position(s), so its next position is {} (or "
                         "an earlier one, to rewind), not {}",
                         i, b.seq, len, len, b.pos);
    } else if (b.pos < len && b.pos > 0) {
      for (auto [window, ring] : rings_)
        if (window > 1 && std::max<int64_t>(0, b.pos - window + 1) < len - ring)
          return fmt::format("batch entry {}: sequence {} cannot go back to position {}: it holds positions "
                             "0..{} and its sliding-window layers (window {}) keep only the last {}; rewind to "
                             "{} or later, or clear the sequence and start again at 0",
                             i, b.seq, b.pos, len - 1, window, ring, len - ring + window - 1);
    }
    want = b.pos + 1;
  }
  return "";
}

Expected<std::vector<float>> Session::evaluate(const std::vector<int32_t> &tokens,
                                               const std::vector<int32_t> &positions) {
  if (tokens.size() != positions.size())
    return Error{fmt::format("evaluate: {} tokens but {} positions", tokens.size(), positions.size())};
  std::vector<BatchToken> batch(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    batch[i] = {tokens[i], positions[i], 0, true};
  return evaluate(batch);
}

Expected<std::vector<float>> Session::evaluate(const std::vector<BatchToken> &batch) {
  std::vector<float> out;
  if (Expected<void> ok = evaluate(batch, out); !ok)
    return Error{ok.message()};
  return out;
}

Expected<void> Session::evaluate(const std::vector<BatchToken> &batch, std::vector<float> &out) {
  if (!failure_.empty())
    return Error{"execution failed earlier: " + failure_ + "; reopen the plan"};
  if (std::string bad = checkBatch(batch); !bad.empty())
    return Error{bad};
  ++counters_.calls;
  // A rewind inside a recurrent state: the sequence's kept tokens before the rewound position run first.
  std::vector<BatchToken> replayed;
  if (recurrent_) {
    std::vector<char> seen(lengths_.size(), 0);
    for (const BatchToken &b : batch) {
      if (seen[b.seq])
        continue;
      seen[b.seq] = 1;
      if (b.pos > 0 && b.pos < lengths_[b.seq])
        for (int32_t p = 0; p < b.pos; ++p)
          replayed.push_back({history_[b.seq][p], p, b.seq, false});
    }
    counters_.recomputed += static_cast<int64_t>(replayed.size());
    if (!replayed.empty())
      replayed.insert(replayed.end(), batch.begin(), batch.end());
  }
  const std::vector<BatchToken> &run = replayed.empty() ? batch : replayed;
  const int64_t vocab = plan_.model.nVocab, total = static_cast<int64_t>(run.size());
  const bool logits = runsDevice(0);
  int64_t wanted = 0;
  for (const BatchToken &b : run)
    wanted += b.logits;
  out.resize(logits ? static_cast<size_t>(wanted * vocab) : 0); // every element is written below
  const int64_t maxBatch = plan_.model.maxBatch;
  const int64_t maxRows = rowsInput_ ? plan_.model.maxOutputRows : maxBatch;
  std::vector<int32_t> tokens, positions, seqs, rows;
  std::vector<char> keep; // per computed row: returned to the caller
  std::vector<float> chunkLogits;
  float *dst = out.data();
  for (int64_t at = 0; at < total;) {
    tokens.clear(), positions.clear(), seqs.clear(), rows.clear(), keep.clear();
    // A chunk ends at max_batch tokens or, when the plan computes only the rows asked for, at its
    // max_output_rows-th row.
    for (; at < total && int64_t(tokens.size()) < maxBatch && int64_t(rows.size()) < maxRows; ++at) {
      const BatchToken &b = run[at];
      if (rowsInput_ && b.logits)
        rows.push_back(static_cast<int32_t>(tokens.size())), keep.push_back(1);
      else if (!rowsInput_)
        rows.push_back(static_cast<int32_t>(tokens.size())), keep.push_back(b.logits);
      tokens.push_back(b.token), positions.push_back(b.pos), seqs.push_back(b.seq);
    }
    if (rows.empty()) // the output head runs on at least one row (a kernel of 0 rows is no launch on a GPU)
      rows.push_back(static_cast<int32_t>(tokens.size() - 1)), keep.push_back(0);
    Chunk c{tokens.data(), positions.data(), seqs.data(), int64_t(tokens.size()), rows.data(),
            int64_t(rows.size())};
    // A chunk whose rows are all returned writes them in place: decode's one row needs no second 1 MiB
    // buffer (262k vocabulary) and no copy.
    const bool direct = logits && std::all_of(keep.begin(), keep.end(), [](char k) { return k != 0; });
    if (!direct)
      chunkLogits.resize(logits ? static_cast<size_t>(c.r * vocab) : 0);
    Expected<void> ok = runChunk(c, direct ? dst : logits ? chunkLogits.data() : nullptr);
    if (!ok) {
      failure_ = ok.message();
      return Error{"execution failed: " + failure_ + "; reopen the plan"};
    }
    lastRows_ = c.r;
    ++counters_.chunks;
    counters_.tokens += c.t;
    counters_.outputRows += c.r;
    if (direct)
      dst += c.r * vocab;
    for (size_t r = 0; logits && !direct && r < keep.size(); ++r)
      if (keep[r]) {
        std::memcpy(dst, chunkLogits.data() + r * vocab, static_cast<size_t>(vocab) * sizeof(float));
        dst += vocab;
      }
  }
  for (const BatchToken &b : run) {
    lengths_[b.seq] = b.pos + 1; // the last token of each sequence leaves its length
    if (recurrent_) {
      std::vector<int32_t> &h = history_[b.seq];
      h.resize(static_cast<size_t>(b.pos)); // a rewind drops the rest; positions are consecutive
      h.push_back(b.token);
    }
  }
  return {};
}

} // namespace tpc::rt
