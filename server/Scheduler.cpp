//===- Scheduler.cpp - slots and continuous batching over an Engine -------===//
//
// Slot state lives under mu_ except during engine_.step(), which runs unlocked so that submit(), cancel()
// and stats() never wait for an evaluation; only the scheduler thread touches slots and the engine.
//===----------------------------------------------------------------------===//
#include "server/Scheduler.h"

#include "server/PromptCache.h"
#include "server/grammar/Matcher.h"

#include <fmt/core.h>

#include <algorithm>

namespace tpc::server {

namespace {
double msBetween(Request::Clock::time_point a, Request::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
double secondsNow() {
  return std::chrono::duration<double>(Request::Clock::now().time_since_epoch()).count();
}
} // namespace

struct Scheduler::Slot {
  std::shared_ptr<Request> req;
  std::unique_ptr<rt::Sampler> sampler;
  std::unique_ptr<TextStream> text;
  std::unique_ptr<grammar::Matcher> matcher; ///< the request's grammar state (constrained requests only)
  size_t promptDone = 0; ///< prompt tokens evaluated
  int32_t nPast = 0;     ///< tokens in the sequence's cache
  int32_t pending = -1;  ///< sampled token waiting to be evaluated (>= 0: generating)
  int32_t generated = 0;
  int32_t cached = 0;          ///< prompt tokens kept from the previous sequence (PromptCache.h)
  std::vector<int32_t> tokens; ///< the ids at the positions the sequence holds (nPast of them)
  uint64_t lastUsed = 0;       ///< admission counter of the last request (0: never used)
  Request::Clock::time_point assigned, firstToken;

  bool reading() const { return req && promptDone < req->prompt.size(); }
  bool generating() const { return req && pending >= 0; }
};

Scheduler::Scheduler(Engine &engine, const rt::Tokenizer &tok, Options opts)
    : engine_(engine), tok_(tok), opts_(opts) {
  for (int32_t i = 0; i < engine.maxSequences(); ++i)
    slots_.push_back(std::make_unique<Slot>());
  stats_.slotsTotal = engine.maxSequences();
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i]->req)
      finish(*slots_[i], static_cast<int32_t>(i), FinishReason::Error, "the server stopped");
  for (auto &r : queue_) {
    Event e;
    e.kind = Event::Kind::Finish;
    e.finish.reason = FinishReason::Error;
    e.finish.error = "the server stopped";
    r->push(std::move(e));
  }
  queue_.clear();
}

Expected<std::shared_ptr<Request>> Scheduler::submit(std::vector<int32_t> prompt, GenerationParams params) {
  if (prompt.empty())
    return Error{"the prompt is empty"};
  if (static_cast<int64_t>(prompt.size()) > engine_.ctxSize())
    return Error{fmt::format("the prompt has {} tokens but the context holds {}", prompt.size(),
                             engine_.ctxSize())};
  if (params.maxTokens < 1)
    return Error{"max_tokens must be at least 1"};
  try {
    rt::Sampler check(params.sampling);
  } catch (const rt::SamplerError &e) {
    return Error{e.what()};
  }
  if (!params.gbnf.empty() && !params.grammar) { // the API compiles it; a direct caller may not have
    auto g = grammar::parseGbnf(params.gbnf);
    if (!g)
      return Error{"the grammar is not valid: " + g.message()};
    params.grammar = g.take();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_)
    return Error{"the server is shutting down"};
  auto req = std::make_shared<Request>(std::move(prompt), std::move(params), [this] { cv_.notify_all(); });
  queue_.push_back(req);
  cv_.notify_all();
  return req;
}

void Scheduler::start() {
  // The grammar vocabulary (token bytes and trie: ~0.2 s for a 262k vocabulary) is built beside serving, so
  // the first constrained request does not stall every slot's step while it is built.
  vocabFuture_ = std::async(std::launch::async, [this] { return std::make_unique<grammar::Vocabulary>(tok_); });
  thread_ = std::thread([this] { loop(); });
}

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!stop_ && !hasWork()) {
        const double t = secondsNow();
        cv_.wait(lock, [&] { return stop_ || hasWork(); });
        stats_.idleSeconds += secondsNow() - t;
      }
      if (stop_)
        return;
      gather(lock);
      if (stop_)
        return;
    }
    runStep();
  }
}

void Scheduler::gather(std::unique_lock<std::mutex> &lock) {
  const int32_t expect = std::min(finishedTogether_, static_cast<int32_t>(slots_.size()));
  if (opts_.gather.count() <= 0 || expect < 2 || queue_.empty())
    return;
  for (const auto &s : slots_)
    if (s->req)
      return; // a step runs anyway: new prompts join it
  const auto until = queue_.front()->submitted + opts_.gather;
  const double t = secondsNow();
  cv_.wait_until(lock, until, [&] { return stop_ || static_cast<int32_t>(queue_.size()) >= expect; });
  stats_.idleSeconds += secondsNow() - t;
  finishedTogether_ = 0; // waited once for these clients
}

bool Scheduler::hasWork() const {
  if (!queue_.empty())
    return true;
  for (const auto &s : slots_)
    if (s->req)
      return true;
  return false;
}

void Scheduler::admit() {
  // Requests cancelled while queued never take a slot.
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (!(*it)->cancelled()) {
      ++it;
      continue;
    }
    Event e;
    e.kind = Event::Kind::Finish;
    e.finish.reason = FinishReason::Cancelled;
    e.finish.promptTokens = static_cast<int32_t>((*it)->prompt.size());
    (*it)->push(std::move(e));
    ++stats_.finished[static_cast<int>(FinishReason::Cancelled)];
    it = queue_.erase(it);
  }
  // FIFO, but a request that asks for a busy slot (id_slot) lets the ones behind it go first.
  std::vector<SlotCacheView> views(slots_.size());
  for (auto it = queue_.begin(); it != queue_.end();) {
    size_t freeSlots = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      views[i] = {slots_[i]->req != nullptr, &slots_[i]->tokens, slots_[i]->lastUsed};
      freeSlots += slots_[i]->req ? 0 : 1;
    }
    if (freeSlots == 0)
      break;
    const GenerationParams &p = (*it)->params;
    const SlotChoice c = pickSlot((*it)->prompt, views, p.idSlot, p.cachePrompt,
                                  [this](int32_t seq, int32_t n) { return engine_.canKeepPrefix(seq, n); });
    if (c.slot < 0) {
      ++it;
      continue;
    }
    Slot &s = *slots_[static_cast<size_t>(c.slot)];
    if (c.keep > 0)
      engine_.keepPrefix(c.slot, c.keep);
    else if (s.nPast > 0)
      engine_.forget(c.slot);
    s.tokens.resize(static_cast<size_t>(c.keep));
    s.nPast = s.cached = c.keep;
    s.lastUsed = ++admitted_;
    s.req = *it;
    it = queue_.erase(it);
    s.sampler = std::make_unique<rt::Sampler>(s.req->params.sampling);
    s.text = std::make_unique<TextStream>(tok_, s.req->params.stop, s.req->params.specialText);
    const GenerationParams &rp = s.req->params;
    s.matcher = rp.grammar ? std::make_unique<grammar::Matcher>(rp.grammar, vocabulary(), rp.stopTokens, !rp.ignoreEos)
                           : nullptr;
    s.promptDone = static_cast<size_t>(c.keep);
    stats_.cachedTokens += static_cast<uint64_t>(c.keep);
    s.pending = -1;
    s.generated = 0;
    s.assigned = Request::Clock::now();
  }
}

void Scheduler::buildBatch(std::vector<BatchEntry> &batch, std::vector<BatchSource> &src) {
  const int32_t n = static_cast<int32_t>(slots_.size());
  for (int32_t i = 0; i < n; ++i)
    if (slots_[i]->generating()) {
      batch.push_back({slots_[i]->pending, slots_[i]->nPast, i, true});
      src.push_back({i, false});
    }
  // Prompt slots in rotating order, so the remainder of an uneven split goes round.
  std::vector<int32_t> readers;
  for (int32_t k = 0; k < n; ++k) {
    const int32_t i = static_cast<int32_t>((rotate_ + static_cast<size_t>(k)) % static_cast<size_t>(n));
    if (slots_[i]->reading())
      readers.push_back(i);
  }
  if (readers.empty())
    return;
  rotate_ = (rotate_ + 1) % static_cast<size_t>(n);
  int64_t budget = std::max<int64_t>(1, int64_t(opts_.batchSize) - static_cast<int64_t>(batch.size()));
  std::vector<int64_t> take(readers.size(), 0);
  // Even shares; a slot needing less than its share leaves the rest to the others on the next round.
  for (bool progress = true; budget > 0 && progress;) {
    progress = false;
    std::vector<size_t> open;
    for (size_t r = 0; r < readers.size(); ++r) {
      const Slot &s = *slots_[readers[r]];
      if (static_cast<int64_t>(s.req->prompt.size() - s.promptDone) > take[r])
        open.push_back(r);
    }
    if (open.empty())
      break;
    const int64_t share = budget / static_cast<int64_t>(open.size());
    int64_t extra = budget % static_cast<int64_t>(open.size());
    for (size_t r : open) {
      const Slot &s = *slots_[readers[r]];
      const int64_t want = static_cast<int64_t>(s.req->prompt.size() - s.promptDone) - take[r];
      const int64_t give = std::min(want, share + (extra > 0 ? 1 : 0));
      if (extra > 0 && give == share + 1)
        --extra;
      take[r] += give;
      budget -= give;
      progress |= give > 0;
    }
  }
  for (size_t r = 0; r < readers.size(); ++r) {
    Slot &s = *slots_[readers[r]];
    for (int64_t k = 0; k < take[r]; ++k) {
      const size_t p = s.promptDone + static_cast<size_t>(k);
      batch.push_back({s.req->prompt[p], static_cast<int32_t>(p), readers[r], p + 1 == s.req->prompt.size()});
      src.push_back({readers[r], true});
    }
  }
}

bool Scheduler::runStep() {
  const double tStart = secondsNow();
  std::vector<BatchEntry> batch;
  std::vector<BatchSource> src;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i]->req && slots_[i]->req->cancelled())
        finish(*slots_[i], static_cast<int32_t>(i), FinishReason::Cancelled);
    admit();
    buildBatch(batch, src);
    lastBatch_ = batch;
    lastSources_ = src;
    if (batch.empty()) {
      idleCv_.notify_all();
      return false;
    }
  }
  const double t0 = secondsNow();
  auto ok = engine_.step(batch, rows_);
  const double t1 = secondsNow();

  std::lock_guard<std::mutex> lock(mu_);
  if (!ok) {
    for (const BatchSource &b : src)
      if (slots_[b.slot]->req)
        finish(*slots_[b.slot], b.slot, FinishReason::Error, ok.message());
    return true;
  }
  uint64_t promptTokens = 0, before = stats_.generatedTokens;
  for (size_t i = 0; i < src.size(); ++i) {
    Slot &s = *slots_[src[i].slot];
    ++s.nPast;
    s.tokens.push_back(batch[i].token);
    if (src[i].prompt)
      ++s.promptDone, ++promptTokens;
  }
  const size_t vocab = static_cast<size_t>(engine_.nVocab());
  const uint64_t finishedBefore = finishedCount();
  size_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].logits) {
      Slot &s = *slots_[src[i].slot];
      if (s.req)
        onToken(s, src[i].slot, rows_.data() + row * vocab);
      ++row;
    }
  if (const uint64_t f = finishedCount() - finishedBefore; f > 0)
    finishedTogether_ = static_cast<int32_t>(f);
  stats_.promptTokens += promptTokens;
  const uint64_t decodes = batch.size() - promptTokens;
  stats_.decodeSteps += decodes > 0;
  stats_.decodeEntries += decodes;
  if (promptTokens == 0) {
    ++stats_.pureDecodeSteps;
    stats_.pureDecodeEntries += decodes;
    stats_.pureDecodeEngineSeconds += t1 - t0;
  }
  stats_.engineSeconds += t1 - t0;
  stats_.hostSeconds += (t0 - tStart) + (secondsNow() - t1);
  ++stats_.steps;
  stats_.batchTokens += batch.size();
  window_.push_back({t1 - t0, stats_.generatedTokens - before, promptTokens});
  double busy = 0;
  for (const Tick &t : window_)
    busy += t.t;
  while (window_.size() > 1 && busy - window_.front().t > 10.0)
    busy -= window_.front().t, window_.pop_front();
  if (!hasWork())
    idleCv_.notify_all();
  return true;
}

void Scheduler::onToken(Slot &s, int32_t slotIndex, const float *row) {
  const GenerationParams &p = s.req->params;
  const size_t vocab = static_cast<size_t>(engine_.nVocab());
  int32_t id = 0;
  try {
    id = s.matcher ? s.sampler->sample(row, vocab, *s.matcher) : s.sampler->sample(row, vocab);
  } catch (const std::exception &e) { // SamplerError; a grammar past the matcher's state bound
    finish(s, slotIndex, FinishReason::Error, e.what());
    return;
  }
  if (s.generated == 0)
    s.firstToken = Request::Clock::now();
  s.pending = -1;
  const bool endOfTurn = std::find(p.stopTokens.begin(), p.stopTokens.end(), id) != p.stopTokens.end();
  if (!p.ignoreEos && (tok_.isEog(id) || endOfTurn)) {
    finish(s, slotIndex, FinishReason::Stop);
    return;
  }
  if (s.matcher) {
    try {
      s.matcher->accept(id); // the sampler checked it: its transitions exist
    } catch (const std::exception &e) {
      finish(s, slotIndex, FinishReason::Error, e.what());
      return;
    }
    ++stats_.grammarTokens;
  }
  Event e;
  e.token.id = id;
  if (p.logprobs || p.topLogprobs > 0)
    e.token.logprob = logprobOf(row, vocab, id, p.topLogprobs, e.token.top).logprob;
  e.token.text = s.text->push(id);
  ++s.generated;
  ++stats_.generatedTokens;
  s.req->push(std::move(e));
  if (s.text->stopped() || (s.matcher && s.matcher->mustEnd())) // a complete match that nothing may follow
    finish(s, slotIndex, FinishReason::Stop);
  else if (s.generated >= p.maxTokens || s.nPast >= engine_.ctxSize())
    finish(s, slotIndex, FinishReason::Length);
  else
    s.pending = id;
}

void Scheduler::finish(Slot &s, int32_t slotIndex, FinishReason r, std::string error) {
  Event e;
  e.kind = Event::Kind::Finish;
  Finish &f = e.finish;
  f.reason = r;
  f.error = std::move(error);
  const bool cache = s.req->params.cachePrompt;
  if ((r == FinishReason::Stop || r == FinishReason::Length) && s.text)
    f.trailingText = s.text->flush();
  const auto now = Request::Clock::now();
  f.promptTokens = static_cast<int32_t>(s.req->prompt.size());
  f.completionTokens = s.generated;
  f.cachedTokens = s.cached;
  f.stoppedByWord = r == FinishReason::Stop && s.text && s.text->stopped();
  f.slot = slotIndex;
  f.queuedMs = msBetween(s.req->submitted, s.assigned);
  if (s.generated > 0) {
    f.promptMs = msBetween(s.assigned, s.firstToken);
    f.decodeMs = msBetween(s.firstToken, now);
  } else {
    f.promptMs = msBetween(s.assigned, now);
  }
  stats_.promptSeconds += f.promptMs / 1000.0;
  stats_.decodeSeconds += f.decodeMs / 1000.0;
  s.req->push(std::move(e));
  ++stats_.finished[static_cast<int>(r)];
  if (s.matcher) {
    stats_.grammarMasks += s.matcher->stats().masks;
    stats_.grammarMaskSeconds += s.matcher->stats().maskSeconds;
    s.matcher.reset();
  }
  s.req.reset();
  s.sampler.reset();
  s.text.reset();
  s.pending = -1;
  // The sequence stays for the next request's prompt cache unless this one opted out or failed.
  if (!cache || r == FinishReason::Error) {
    engine_.forget(slotIndex);
    s.tokens.clear();
    s.nPast = 0;
  }
}

const grammar::Vocabulary &Scheduler::vocabulary() {
  if (!vocab_)
    vocab_ = vocabFuture_.valid() ? vocabFuture_.get() : std::make_unique<grammar::Vocabulary>(tok_);
  return *vocab_;
}

void Scheduler::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

void Scheduler::waitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  idleCv_.wait(lock, [&] { return !hasWork(); });
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerStats s = stats_;
  s.queued = static_cast<int32_t>(queue_.size());
  s.slotsBusy = 0;
  for (const auto &slot : slots_)
    s.slotsBusy += slot->req ? 1 : 0;
  double busy = 0;
  uint64_t gen = 0, prompt = 0;
  for (const Tick &t : window_)
    busy += t.t, gen += t.gen, prompt += t.prompt;
  if (busy > 0) {
    s.decodeTokensPerSecond = double(gen) / busy;
    s.promptTokensPerSecond = double(prompt) / busy;
  }
  s.draining = draining_;
  return s;
}

std::vector<SlotState> Scheduler::slotStates() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SlotState> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot &s = *slots_[i];
    SlotState st;
    st.id = static_cast<int32_t>(i);
    st.busy = s.req != nullptr;
    st.cachedPositions = s.nPast;
    if (s.req) {
      st.params = s.req->params;
      st.promptTokens = static_cast<int32_t>(s.req->prompt.size());
      st.promptDone = static_cast<int32_t>(s.promptDone);
      st.generated = s.generated;
      st.cached = s.cached;
    }
    out.push_back(std::move(st));
  }
  return out;
}

std::vector<BatchEntry> Scheduler::lastBatch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lastBatch_;
}

std::vector<BatchSource> Scheduler::lastSources() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lastSources_;
}

} // namespace tpc::server
