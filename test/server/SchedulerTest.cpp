//===- SchedulerTest.cpp - the scheduler against a deterministic fake engine -===//
//
// FakeEngine checks the Engine contract on every step (checkBatch: positions continue each sequence),
// records each batch, and answers every entry with a logits row whose argmax is next(token), so greedy
// generation from a prompt is known in advance. The vocabulary: <unk> <s> </s>, then 'a'..'z' (ids 3..28),
// so generated text spells the alphabet from the prompt's last letter on. BatchedEngine (one runtime
// session for every slot) is checked on a hand-built plan at the end.
//===----------------------------------------------------------------------===//
#include "server/BatchedEngine.h"
#include "server/PromptCache.h"
#include "server/Scheduler.h"

#include "test/runtime/exec/ExecTestUtil.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <thread>

using namespace tpc;
using namespace tpc::server;

namespace {

constexpr int32_t kVocab = 29;
constexpr int32_t kEos = 2;

rt::Tokenizer letters() {
  rt::TokenizerData d;
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", "</s>"};
  d.tokenTypes = {2, 3, 3};
  for (char c = 'a'; c <= 'z'; ++c)
    d.tokens.emplace_back(1, c), d.tokenTypes.push_back(1);
  d.unk = 0, d.bos = 1, d.eos = kEos;
  return rt::Tokenizer(d);
}

/// 'a'..'z' -> the next letter ('z' wraps to 'a').
int32_t nextLetter(int32_t t) { return t >= 28 ? 3 : t + 1; }

class FakeEngine : public Engine {
public:
  FakeEngine(int32_t seqs, int64_t ctx) : lengths_(static_cast<size_t>(seqs), 0), ctx_(ctx) {}
  std::function<int32_t(int32_t)> next = nextLetter;
  std::vector<std::vector<BatchEntry>> batches;
  std::vector<int32_t> forgotten;
  bool fail = false;

  Expected<void> step(const std::vector<BatchEntry> &batch, std::vector<float> &rows) override {
    if (fail)
      return Error{"injected engine failure"};
    if (std::string err = checkBatch(batch, lengths_, ctx_, kVocab); !err.empty())
      return Error{err};
    batches.push_back(batch);
    rows.clear();
    for (const BatchEntry &e : batch)
      if (e.logits) {
        std::vector<float> row(kVocab, 0.0f);
        row[static_cast<size_t>(next(e.token))] = 10.0f;
        rows.insert(rows.end(), row.begin(), row.end());
      }
    return {};
  }
  void forget(int32_t seq) override {
    forgotten.push_back(seq);
    lengths_[static_cast<size_t>(seq)] = 0;
  }
  int32_t maxSequences() const override { return static_cast<int32_t>(lengths_.size()); }
  int64_t ctxSize() const override { return ctx_; }
  int64_t nVocab() const override { return kVocab; }
  /// Prompt caching: like a full KV cache (any prefix) unless `onlyWhole` (a recurrent state: only all).
  bool keepable = false, onlyWhole = false;
  std::vector<std::pair<int32_t, int32_t>> kept;
  bool canKeepPrefix(int32_t seq, int32_t n) const override {
    const int64_t len = lengths_[static_cast<size_t>(seq)];
    return keepable && n > 0 && n <= len && (!onlyWhole || n == len);
  }
  void keepPrefix(int32_t seq, int32_t n) override {
    kept.push_back({seq, n});
    lengths_[static_cast<size_t>(seq)] = n;
  }

private:
  std::vector<int64_t> lengths_;
  int64_t ctx_;
};

GenerationParams greedy(int32_t maxTokens) {
  GenerationParams p;
  p.sampling.temperature = 0; // argmax
  p.maxTokens = maxTokens;
  return p;
}

std::vector<int32_t> prompt(int32_t first, int32_t n) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i)
    p.push_back(3 + (first - 3 + i) % 26);
  return p;
}

/// Every event a request has received so far.
struct Collected {
  std::string text;
  std::vector<int32_t> ids;
  std::optional<Finish> finish;
};
Collected drain(Request &r) {
  Collected c;
  for (Event e; r.next(e, std::chrono::milliseconds(0));) {
    if (e.kind == Event::Kind::Token) {
      c.text += e.token.text;
      c.ids.push_back(e.token.id);
    } else {
      c.text += e.finish.trailingText;
      c.finish = e.finish;
    }
  }
  return c;
}

std::shared_ptr<Request> submitOk(Scheduler &s, std::vector<int32_t> p, GenerationParams g) {
  auto r = s.submit(std::move(p), std::move(g));
  EXPECT_TRUE(r) << r.message();
  return r ? r.take() : nullptr;
}

void runAll(Scheduler &s, int maxSteps = 1000) {
  for (int i = 0; i < maxSteps && s.runStep(); ++i) {
  }
}

} // namespace

TEST(Scheduler, GreedyTokensTextAndUsage) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(2, 64);
  Scheduler s(eng, tok, {});
  auto r = submitOk(s, prompt(3, 3), greedy(4)); // "abc"
  runAll(s);
  Collected c = drain(*r);
  EXPECT_EQ(c.ids, (std::vector<int32_t>{6, 7, 8, 9}));
  EXPECT_EQ(c.text, "defg");
  ASSERT_TRUE(c.finish);
  EXPECT_EQ(c.finish->reason, FinishReason::Length);
  EXPECT_EQ(c.finish->promptTokens, 3);
  EXPECT_EQ(c.finish->completionTokens, 4);
  // The prompt in one step, then one decode step per token but the last (it is never evaluated).
  EXPECT_EQ(eng.batches.size(), 4u);
  EXPECT_EQ(eng.forgotten, (std::vector<int32_t>{0}));
}

TEST(Scheduler, BatchHoldsDecodesFirstThenEvenPromptChunks) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(4, 256);
  Scheduler s(eng, tok, Scheduler::Options{8});
  auto a = submitOk(s, prompt(3, 10), greedy(5));
  auto b = submitOk(s, prompt(10, 3), greedy(5));
  ASSERT_TRUE(s.runStep());
  // Budget 8 over two prompts: 4 each, b needs only 3, so a gets the one left over (5).
  std::vector<BatchSource> src = s.lastSources();
  std::vector<BatchEntry> bat = s.lastBatch();
  ASSERT_EQ(bat.size(), 8u);
  int fromA = 0, fromB = 0, logits = 0;
  for (size_t i = 0; i < bat.size(); ++i) {
    EXPECT_TRUE(src[i].prompt);
    (src[i].slot == 0 ? fromA : fromB) += 1;
    logits += bat[i].logits;
  }
  EXPECT_EQ(fromA, 5);
  EXPECT_EQ(fromB, 3);
  EXPECT_EQ(logits, 1); // only b's prompt is complete
  ASSERT_TRUE(s.runStep());
  bat = s.lastBatch();
  src = s.lastSources();
  // b decodes (first entry, at position 3) while a reads its last 5 prompt tokens.
  ASSERT_EQ(bat.size(), 6u);
  EXPECT_FALSE(src[0].prompt);
  EXPECT_EQ(src[0].slot, 1);
  EXPECT_EQ(bat[0].pos, 3);
  EXPECT_TRUE(bat[0].logits);
  for (size_t i = 1; i < bat.size(); ++i) {
    EXPECT_TRUE(src[i].prompt);
    EXPECT_EQ(bat[i].seq, 0);
    EXPECT_EQ(bat[i].pos, static_cast<int32_t>(4 + i));
  }
  EXPECT_TRUE(bat.back().logits);
  runAll(s);
  EXPECT_EQ(drain(*a).text, "klmno");
  EXPECT_EQ(drain(*b).text, "klmno"); // "hij" continues with k as well
}

TEST(Scheduler, LongPromptIsChunkedWhileOthersDecode) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(2, 512);
  Scheduler s(eng, tok, Scheduler::Options{16});
  auto shortReq = submitOk(s, prompt(3, 2), greedy(20));
  ASSERT_TRUE(s.runStep()); // short prompt read; it decodes from now on
  auto longReq = submitOk(s, prompt(3, 100), greedy(2));
  size_t before = drain(*shortReq).ids.size();
  int steps = 0;
  while (!drain(*longReq).finish && steps < 50) {
    ASSERT_TRUE(s.runStep());
    ++steps;
    const std::vector<BatchEntry> bat = s.lastBatch();
    EXPECT_LE(bat.size(), 16u);
    if (steps <= 6) { // while the long prompt is read, the short request decodes every step
      const size_t now = before + drain(*shortReq).ids.size();
      EXPECT_EQ(now, before + 1) << "step " << steps;
      before = now;
      EXPECT_EQ(bat[0].seq, 0);
      EXPECT_FALSE(s.lastSources()[0].prompt);
    }
  }
  // 100 prompt tokens at 15 per step: 7 steps, then one decode step for the second token.
  EXPECT_EQ(steps, 8);
}

TEST(Scheduler, PromptBudgetRemainderRotates) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(3, 512);
  Scheduler s(eng, tok, Scheduler::Options{10});
  for (int i = 0; i < 3; ++i)
    submitOk(s, prompt(3, 100), greedy(1));
  std::vector<std::vector<int>> counts;
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(s.runStep());
    std::vector<int> n(3, 0);
    for (const BatchSource &b : s.lastSources())
      ++n[static_cast<size_t>(b.slot)];
    counts.push_back(n);
  }
  // 10 tokens over 3 prompts: 4 + 3 + 3, the extra token moving to the next slot each step.
  EXPECT_EQ(counts[0], (std::vector<int>{4, 3, 3}));
  EXPECT_EQ(counts[1], (std::vector<int>{3, 4, 3}));
  EXPECT_EQ(counts[2], (std::vector<int>{3, 3, 4}));
}

TEST(Scheduler, EndOfGenerationStopsWithoutEmittingIt) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(1, 64);
  eng.next = [](int32_t t) { return t == 5 ? kEos : nextLetter(t); }; // 'c' -> </s>
  Scheduler s(eng, tok, {});
  auto r = submitOk(s, prompt(3, 1), greedy(10));
  runAll(s);
  Collected c = drain(*r);
  EXPECT_EQ(c.text, "bc");
  ASSERT_TRUE(c.finish);
  EXPECT_EQ(c.finish->reason, FinishReason::Stop);
  EXPECT_EQ(c.finish->completionTokens, 2);

  GenerationParams g = greedy(4);
  g.ignoreEos = true;
  auto r2 = submitOk(s, prompt(3, 1), g);
  runAll(s);
  EXPECT_EQ(drain(*r2).ids, (std::vector<int32_t>{4, 5, kEos, 3}));
}

TEST(Scheduler, StopStringIsHeldBackAndCut) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(1, 64);
  Scheduler s(eng, tok, {});
  GenerationParams g = greedy(10);
  g.stop = {"fg", "xyz"};
  auto r = submitOk(s, prompt(3, 3), g);
  std::vector<std::string> released;
  while (s.runStep())
    for (Event e; r->next(e, std::chrono::milliseconds(0));)
      released.push_back(e.kind == Event::Kind::Token ? e.token.text : "|" + std::string(finishReasonName(e.finish.reason)));
  // 'f' is held back (it may start "fg"); "fg" then ends the generation and is not sent.
  EXPECT_EQ(released, (std::vector<std::string>{"d", "e", "", "", "|stop"}));
}

TEST(Scheduler, StopTokenOfTheChatTemplateEndsTheTurn) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(1, 64);
  Scheduler s(eng, tok, {});
  GenerationParams g = greedy(10);
  g.stopTokens = {7}; // 'e'
  auto r = submitOk(s, prompt(3, 1), g);
  runAll(s);
  Collected c = drain(*r);
  EXPECT_EQ(c.text, "bcd");
  EXPECT_EQ(c.finish->reason, FinishReason::Stop);
}

TEST(Scheduler, ContextLimitEndsWithLength) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(1, 8);
  Scheduler s(eng, tok, {});
  auto r = submitOk(s, prompt(3, 5), greedy(100));
  runAll(s);
  Collected c = drain(*r);
  // Positions 0..7: 5 prompt tokens, 3 generated tokens evaluated, and a 4th sampled from the last row.
  EXPECT_EQ(c.ids.size(), 4u);
  EXPECT_EQ(c.finish->reason, FinishReason::Length);
  EXPECT_FALSE(s.submit(prompt(3, 9), greedy(1))); // longer than the context
}

TEST(Scheduler, CancelFreesTheSlotAtTheNextStep) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(1, 256);
  Scheduler s(eng, tok, {});
  auto a = submitOk(s, prompt(3, 2), greedy(100));
  auto b = submitOk(s, prompt(10, 2), greedy(2));
  ASSERT_TRUE(s.runStep());
  ASSERT_TRUE(s.runStep());
  EXPECT_EQ(s.stats().slotsBusy, 1);
  EXPECT_EQ(s.stats().queued, 1);
  a->cancel();
  ASSERT_TRUE(s.runStep());
  // a's slot was freed and forgotten before this step's batch, which is b's prompt.
  EXPECT_EQ(eng.forgotten, (std::vector<int32_t>{0}));
  for (const BatchSource &src : s.lastSources())
    EXPECT_TRUE(src.prompt);
  EXPECT_EQ(s.lastBatch().front().token, 10);
  EXPECT_EQ(s.lastBatch().front().pos, 0);
  Collected ca = drain(*a);
  ASSERT_TRUE(ca.finish);
  EXPECT_EQ(ca.finish->reason, FinishReason::Cancelled);
  runAll(s);
  EXPECT_EQ(drain(*b).text, "jk");
  EXPECT_EQ(s.stats().slotsBusy, 0);
  EXPECT_EQ(s.stats().finished[static_cast<int>(FinishReason::Cancelled)], 1u);
}

TEST(Scheduler, CancelledWhileQueuedNeverTakesASlot) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(1, 64);
  Scheduler s(eng, tok, {});
  auto a = submitOk(s, prompt(3, 2), greedy(3));
  auto b = submitOk(s, prompt(3, 2), greedy(3));
  b->cancel();
  runAll(s);
  EXPECT_EQ(drain(*b).finish->reason, FinishReason::Cancelled);
  EXPECT_EQ(drain(*a).finish->reason, FinishReason::Length);
  for (const auto &batch : eng.batches)
    for (const BatchEntry &e : batch)
      EXPECT_EQ(e.seq, 0);
  EXPECT_EQ(eng.batches.size(), 3u); // a alone
}

TEST(Scheduler, SlotsRunRequestsConcurrentlyAndQueueTheRest) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(2, 64);
  Scheduler s(eng, tok, {});
  std::vector<std::shared_ptr<Request>> reqs;
  for (int i = 0; i < 3; ++i)
    reqs.push_back(submitOk(s, prompt(3 + i, 2), greedy(3)));
  ASSERT_TRUE(s.runStep());
  EXPECT_EQ(s.stats().slotsBusy, 2);
  EXPECT_EQ(s.stats().queued, 1);
  ASSERT_TRUE(s.runStep());
  EXPECT_EQ(s.lastBatch().size(), 2u); // both slots decode in one batch
  runAll(s);
  EXPECT_EQ(drain(*reqs[0]).text, "cde");
  EXPECT_EQ(drain(*reqs[1]).text, "def");
  EXPECT_EQ(drain(*reqs[2]).text, "efg");
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.generatedTokens, 9u);
  EXPECT_EQ(st.promptTokens, 6u);
  // Steps: both prompts, 2 x both decoding, the third prompt, 2 x it decoding alone.
  EXPECT_EQ(st.steps, 6u);
  EXPECT_EQ(st.decodeSteps, 4u);
  EXPECT_EQ(st.decodeEntries, 6u);
  EXPECT_EQ(st.pureDecodeSteps, 4u);
  EXPECT_EQ(st.pureDecodeEntries, 6u);
  EXPECT_GT(st.engineSeconds, 0.0);
  EXPECT_GE(st.engineSeconds, st.pureDecodeEngineSeconds);
  EXPECT_GT(st.pureDecodeEngineSeconds, 0.0);
  EXPECT_GE(st.hostSeconds, 0.0);
  EXPECT_EQ(st.idleSeconds, 0.0); // runStep() alone never waits
}

TEST(Scheduler, SeededSamplingIsPerSlot) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(2, 256);
  eng.next = [](int32_t) { return 3; };
  Scheduler s(eng, tok, {});
  GenerationParams g = greedy(30);
  g.sampling.temperature = 5.0f; // nearly uniform over the flat logits
  g.sampling.topK = 0;
  g.sampling.topP = 1.0f;
  g.sampling.seed = 7;
  auto a = submitOk(s, prompt(3, 2), g);
  auto b = submitOk(s, prompt(3, 2), g);
  runAll(s);
  const Collected ca = drain(*a), cb = drain(*b);
  // Same seed in two slots running side by side: the same tokens, each from its own sampler.
  EXPECT_EQ(ca.ids, cb.ids);
  EXPECT_GT(std::set<int32_t>(ca.ids.begin(), ca.ids.end()).size(), 3u);
}

TEST(Scheduler, DrainRefusesNewRequestsAndFinishesRunningOnes) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(1, 64);
  Scheduler s(eng, tok, {});
  auto a = submitOk(s, prompt(3, 2), greedy(3));
  s.drain();
  auto refused = s.submit(prompt(3, 2), greedy(3));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.message().find("shutting down"), std::string::npos);
  runAll(s);
  EXPECT_EQ(drain(*a).finish->reason, FinishReason::Length);
  EXPECT_TRUE(s.stats().draining);
}

TEST(Scheduler, EngineErrorFailsTheRequestsOfThatBatch) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(2, 64);
  Scheduler s(eng, tok, {});
  auto a = submitOk(s, prompt(3, 2), greedy(3));
  ASSERT_TRUE(s.runStep());
  eng.fail = true;
  ASSERT_TRUE(s.runStep());
  Collected c = drain(*a);
  ASSERT_TRUE(c.finish);
  EXPECT_EQ(c.finish->reason, FinishReason::Error);
  EXPECT_NE(c.finish->error.find("injected"), std::string::npos);
  EXPECT_EQ(s.stats().slotsBusy, 0);
  eng.fail = false;
  auto b = submitOk(s, prompt(3, 2), greedy(2)); // the engine's next request works again
  runAll(s);
  EXPECT_EQ(drain(*b).text, "cd");
}

TEST(Scheduler, SubmitRejectsWhatCannotRun) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(1, 64);
  Scheduler s(eng, tok, {});
  GenerationParams g = greedy(3);
  g.sampling.topP = 2.0f; // the sampler refuses it
  EXPECT_FALSE(s.submit(prompt(3, 2), g));
  EXPECT_FALSE(s.submit({}, greedy(3)));
  EXPECT_FALSE(s.submit(prompt(3, 2), greedy(0)));
  EXPECT_EQ(s.stats().queued, 0);
}

TEST(Scheduler, ThreadedLoopServesRequests) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(2, 64);
  Scheduler s(eng, tok, {});
  s.start();
  auto r = submitOk(s, prompt(3, 2), greedy(3));
  std::string text;
  for (Event e; r->next(e, std::chrono::seconds(10));) {
    if (e.kind == Event::Kind::Finish)
      break;
    text += e.token.text;
  }
  EXPECT_EQ(text, "cde");
  s.waitIdle();
}

/// Runs the threaded loop until `r` finishes; its text.
std::string waitText(Request &r) {
  std::string text;
  for (Event e; r.next(e, std::chrono::seconds(10));) {
    if (e.kind == Event::Kind::Finish)
      break;
    text += e.token.text;
  }
  return text;
}

/// Starts the loop with two requests submitted before it, so they run in lockstep and finish in the same
/// step, and waits for both.
void startWithTwoFinishingTogether(Scheduler &s) {
  auto a = submitOk(s, prompt(3, 2), greedy(2)), b = submitOk(s, prompt(5, 2), greedy(2));
  s.start();
  EXPECT_EQ(waitText(*a), "cd");
  EXPECT_EQ(waitText(*b), "ef");
  s.waitIdle();
}

TEST(Scheduler, ClientsAnsweredTogetherHaveTheirNextPromptsReadInOneStep) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(2, 64);
  Scheduler::Options o;
  o.gather = std::chrono::milliseconds(1000); // far above the 50 ms between the two submits below
  Scheduler s(eng, tok, o);
  startWithTwoFinishingTogether(s);
  size_t before = eng.batches.size();
  auto c = submitOk(s, prompt(10, 3), greedy(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(50)); // the loop holds c back for the second client
  auto d = submitOk(s, prompt(12, 3), greedy(2));
  EXPECT_EQ(waitText(*c), "kl");
  EXPECT_EQ(waitText(*d), "mn");
  s.waitIdle();
  ASSERT_GT(eng.batches.size(), before);
  const std::vector<BatchEntry> first = eng.batches[before]; // both prompts in one step
  ASSERT_EQ(first.size(), 6u);
  EXPECT_EQ(std::set<int32_t>({first[0].seq, first[3].seq}), std::set<int32_t>({0, 1}));
  // c and d finished together but only e comes back: it waits the whole window once, then runs.
  auto e = submitOk(s, prompt(3, 1), greedy(1));
  EXPECT_EQ(waitText(*e), "b");
  EXPECT_GE(std::chrono::steady_clock::now() - e->submitted, o.gather);
  s.waitIdle();
  // e finished alone: the next request is not held.
  auto f = submitOk(s, prompt(4, 1), greedy(1));
  EXPECT_EQ(waitText(*f), "c");
  EXPECT_LT(std::chrono::steady_clock::now() - f->submitted, o.gather / 2);
  s.waitIdle();
}

TEST(Scheduler, NoGatherReadsTheFirstPromptAtOnce) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(2, 64);
  Scheduler::Options o;
  o.gather = std::chrono::milliseconds(0);
  Scheduler s(eng, tok, o);
  startWithTwoFinishingTogether(s);
  const size_t before = eng.batches.size();
  auto c = submitOk(s, prompt(10, 3), greedy(2));
  EXPECT_EQ(waitText(*c), "kl");
  s.waitIdle();
  ASSERT_GT(eng.batches.size(), before);
  EXPECT_EQ(eng.batches[before].size(), 3u); // c alone
}

TEST(CheckBatch, PositionsMustContinueEachSequence) {
  std::vector<int64_t> lengths = {2, 0};
  EXPECT_EQ(checkBatch({{5, 2, 0, true}, {6, 0, 1, false}, {7, 1, 1, true}}, lengths, 16, 29), "");
  EXPECT_EQ(lengths, (std::vector<int64_t>{3, 2}));
  std::string err = checkBatch({{5, 1, 0, true}}, lengths, 16, 29);
  EXPECT_NE(err.find("next position is 3"), std::string::npos) << err;
  EXPECT_NE(checkBatch({{5, 3, 2, true}}, lengths, 16, 29).find("sequence 2"), std::string::npos);
  EXPECT_NE(checkBatch({{40, 3, 0, true}}, lengths, 16, 29).find("token 40"), std::string::npos);
  EXPECT_NE(checkBatch({{5, 16, 0, true}}, lengths, 16, 29).find("context"), std::string::npos);
  EXPECT_EQ(lengths, (std::vector<int64_t>{3, 2})); // failed checks change nothing
}

TEST(BatchedEngine, OneSessionOneEvaluationPerStepRowsInBatchOrder) {
  // A plan whose logits row of a token is row `token` of a table (10 * token + j), with 2 sequences.
  rt::test::PlanMaker m(1, 8, 16);
  std::vector<float> table(16 * 16);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      table[i * 16 + j] = float(10 * i + j);
  m.b(0).step(rt::OpKind::GetRows, {m.weightF32(0, {16, 16}, table), m.tokens[0]}, {m.logits[0]});
  rt::SessionOptions o = m.options(1, 16);
  auto e = BatchedEngine::open(m.plan, 2, o, "cpu");
  ASSERT_TRUE(e) << e.message();
  BatchedEngine &eng = **e;
  EXPECT_EQ(eng.maxSequences(), 2);
  EXPECT_EQ(eng.ctxSize(), 16);
  std::vector<float> rows;
  auto ok = eng.step({{7, 0, 1, false}, {8, 0, 0, true}, {9, 1, 1, true}, {10, 1, 0, false}}, rows);
  ASSERT_TRUE(ok) << ok.message();
  ASSERT_EQ(rows.size(), 32u);
  EXPECT_EQ(rows[0], 80.f); // token 8's row, then token 9's: batch order
  EXPECT_EQ(rows[16], 90.f);
  EXPECT_EQ(eng.session().counters().calls, 1); // the whole step in one evaluation of one session
  EXPECT_EQ(eng.session().counters().tokens, 4);
  // The next step writes into the same storage: one row, no new allocation.
  const float *storage = rows.data();
  ASSERT_TRUE(eng.step({{11, 2, 0, true}}, rows));
  ASSERT_EQ(rows.size(), 16u);
  EXPECT_EQ(rows.data(), storage);
  EXPECT_EQ(rows[0], 110.f);
  EXPECT_EQ(rows[15], 125.f);
  auto bad = eng.step({{1, 3, 1, true}}, rows); // sequence 1 holds two tokens: position 3 skips one
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("so its next position is 2"), std::string::npos) << bad.message();
  eng.forget(1);
  EXPECT_EQ(eng.session().sequenceLength(1), 0);
  EXPECT_TRUE(eng.step({{1, 0, 1, true}}, rows));
  auto far = eng.step({{1, 0, 2, true}}, rows);
  ASSERT_FALSE(far);
  EXPECT_NE(far.message().find("sequence 2 is not in 0..1"), std::string::npos) << far.message();
}

namespace {

GenerationParams cached(int32_t maxTokens) {
  GenerationParams p = greedy(maxTokens);
  p.cachePrompt = true;
  return p;
}

/// The ids a request generates, run alone on a fresh engine (the cold run).
std::vector<int32_t> coldRun(const std::vector<int32_t> &p, int32_t maxTokens) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(1, 256);
  Scheduler s(eng, tok, {});
  auto r = submitOk(s, p, greedy(maxTokens));
  runAll(s);
  return drain(*r).ids;
}

} // namespace

TEST(PromptCache, PicksTheLongestPrefixThenTheLeastRecentSlot) {
  const std::vector<int32_t> a = {5, 6, 7, 8}, b = {5, 6, 9}, empty;
  auto all = [](int32_t, int32_t) { return true; };
  std::vector<SlotCacheView> v = {{false, &b, 2}, {false, &a, 1}, {false, &empty, 3}};
  // a shares 4 tokens with the 5-token prompt: all 4 kept.
  SlotChoice c = pickSlot({5, 6, 7, 8, 10}, v, -1, true, all);
  EXPECT_EQ(c.slot, 1);
  EXPECT_EQ(c.keep, 4);
  // The whole prompt cached: its last token is still read (its logits give the first token).
  c = pickSlot(a, v, -1, true, all);
  EXPECT_EQ(c.slot, 1);
  EXPECT_EQ(c.keep, 3);
  // Nothing shared: the slot used longest ago, so recent caches survive.
  c = pickSlot({20, 21}, v, -1, true, all);
  EXPECT_EQ(c.slot, 1);
  EXPECT_EQ(c.keep, 0);
  // cache_prompt off keeps nothing; a busy slot is never picked; id_slot waits for its slot.
  EXPECT_EQ(pickSlot({5, 6, 7, 8, 10}, v, -1, false, all).keep, 0);
  v[1].busy = true;
  c = pickSlot({5, 6, 7, 8, 10}, v, -1, true, all);
  EXPECT_EQ(c.slot, 0);
  EXPECT_EQ(c.keep, 2);
  EXPECT_EQ(pickSlot({5}, v, 1, true, all).slot, -1);
  EXPECT_EQ(pickSlot({5, 6, 1}, v, 0, true, all).slot, 0);
  // A prefix the engine cannot keep counts as none.
  c = pickSlot({5, 6, 9, 1}, v, -1, true, [](int32_t, int32_t) { return false; });
  EXPECT_EQ(c.keep, 0);
  EXPECT_EQ(commonPrefix(a, b), 2u);
}

TEST(Scheduler, PromptCacheKeepsThePrefixAndMatchesAColdRun) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(2, 256);
  eng.keepable = true;
  Scheduler s(eng, tok, {});
  const std::vector<int32_t> first = prompt(3, 6); // "abcdef"
  auto r1 = submitOk(s, first, cached(4));
  runAll(s);
  Collected c1 = drain(*r1);
  ASSERT_TRUE(c1.finish);
  EXPECT_EQ(c1.finish->cachedTokens, 0);
  EXPECT_TRUE(eng.forgotten.empty()); // the sequence stays in its slot
  // The next turn: the first prompt, what was generated, and more.
  std::vector<int32_t> second = first;
  second.insert(second.end(), c1.ids.begin(), c1.ids.end());
  second.push_back(20), second.push_back(21);
  auto r2 = submitOk(s, second, cached(5));
  ASSERT_TRUE(s.runStep());
  // Only the part after the kept prefix is read: the prompt and the 3 evaluated generated tokens.
  const int32_t keep = static_cast<int32_t>(first.size() + c1.ids.size() - 1);
  EXPECT_EQ(eng.kept, (std::vector<std::pair<int32_t, int32_t>>{{c1.finish->slot, keep}}));
  ASSERT_FALSE(s.lastBatch().empty());
  EXPECT_EQ(s.lastBatch().front().pos, keep);
  EXPECT_EQ(s.lastBatch().size(), second.size() - static_cast<size_t>(keep));
  runAll(s);
  Collected c2 = drain(*r2);
  ASSERT_TRUE(c2.finish);
  EXPECT_EQ(c2.finish->cachedTokens, keep);
  EXPECT_EQ(c2.finish->slot, c1.finish->slot);
  EXPECT_EQ(c2.ids, coldRun(second, 5));
  EXPECT_EQ(s.stats().cachedTokens, static_cast<uint64_t>(keep));
}

TEST(Scheduler, PromptCacheOnARecurrentEngineNeedsTheWholeSequence) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(1, 256);
  eng.keepable = eng.onlyWhole = true;
  Scheduler s(eng, tok, {});
  auto r1 = submitOk(s, prompt(3, 4), cached(3)); // abcd -> e f g (g never evaluated)
  runAll(s);
  Collected c1 = drain(*r1);
  // The same prompt again: keeping it would need a rewind (its last token is read again): starts over.
  auto r2 = submitOk(s, prompt(3, 4), cached(3));
  runAll(s);
  Collected c2 = drain(*r2);
  ASSERT_TRUE(c2.finish);
  EXPECT_EQ(c2.finish->cachedTokens, 0);
  EXPECT_EQ(c2.ids, c1.ids);
  // The whole sequence (prompt + evaluated tokens) as a prefix: kept.
  std::vector<int32_t> next = prompt(3, 4);
  next.insert(next.end(), c2.ids.begin(), c2.ids.end() - 1);
  next.push_back(25);
  auto r3 = submitOk(s, next, cached(2));
  runAll(s);
  Collected c3 = drain(*r3);
  ASSERT_TRUE(c3.finish);
  EXPECT_EQ(c3.finish->cachedTokens, 6);
  EXPECT_EQ(c3.ids, coldRun(next, 2));
}

TEST(Scheduler, WithoutCachePromptTheSequenceIsForgotten) {
  rt::Tokenizer tok = letters();
  FakeEngine eng(1, 256);
  eng.keepable = true;
  Scheduler s(eng, tok, {});
  auto r1 = submitOk(s, prompt(3, 4), cached(2));
  runAll(s);
  auto r2 = submitOk(s, prompt(3, 4), greedy(2)); // cache_prompt false
  runAll(s);
  Collected c2 = drain(*r2);
  ASSERT_TRUE(c2.finish);
  EXPECT_EQ(c2.finish->cachedTokens, 0);
  EXPECT_TRUE(eng.kept.empty());
  EXPECT_EQ(eng.forgotten, (std::vector<int32_t>{0, 0})); // before it (a kept sequence) and after it
}

TEST(BatchedEngine, KeepsAPrefixTheSessionCanRewindTo) {
  rt::test::PlanMaker m(1, 8, 16);
  std::vector<float> table(16 * 16);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      table[i * 16 + j] = float(10 * i + j);
  m.b(0).step(rt::OpKind::GetRows, {m.weightF32(0, {16, 16}, table), m.tokens[0]}, {m.logits[0]});
  auto e = BatchedEngine::open(m.plan, 2, m.options(1, 16), "cpu");
  ASSERT_TRUE(e) << e.message();
  BatchedEngine &eng = **e;
  std::vector<float> rows;
  ASSERT_TRUE(eng.step({{3, 0, 0, false}, {4, 1, 0, false}, {5, 2, 0, true}}, rows));
  EXPECT_FALSE(eng.canKeepPrefix(0, 0)); // nothing to keep
  EXPECT_TRUE(eng.canKeepPrefix(0, 1));
  EXPECT_TRUE(eng.canKeepPrefix(0, 3)); // all of it: continues
  EXPECT_FALSE(eng.canKeepPrefix(0, 4)); // past its length
  EXPECT_FALSE(eng.canKeepPrefix(1, 1)); // an empty sequence
  // Kept: the next batch starts at the prefix's end, and the session drops what came after.
  eng.keepPrefix(0, 1);
  ASSERT_TRUE(eng.step({{9, 1, 0, true}}, rows));
  EXPECT_EQ(eng.session().sequenceLength(0), 2);
  EXPECT_EQ(rows[0], 90.f);
}

TEST(Scheduler, GrammarConstrainsItsSlotOnlyAndEndsWhenComplete) {
  // The fake engine's argmax is the next letter; the grammar refuses it at 'x' and 'q' (masks), accepts it
  // in [a-z], and ends the request once "q" closed it. The plain request beside it is unaffected.
  rt::Tokenizer tok = letters();
  FakeEngine eng(2, 64);
  Scheduler s(eng, tok, {});
  auto plain = submitOk(s, prompt(3, 3), greedy(4)); // "abc" -> "defg"
  GenerationParams g = greedy(20);
  g.gbnf = "root ::= \"x\" [a-z] \"q\"\n";
  auto constrained = submitOk(s, prompt(3, 3), g);
  runAll(s);
  Collected p = drain(*plain), c = drain(*constrained);
  EXPECT_EQ(p.text, "defg");
  EXPECT_EQ(c.text, "xyq");
  ASSERT_TRUE(c.finish);
  EXPECT_EQ(c.finish->reason, FinishReason::Stop);
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.grammarTokens, 3u);
  EXPECT_EQ(st.grammarMasks, 2u);
  // A grammar that does not parse is refused at submit (the API refuses it earlier, naming its field).
  GenerationParams bad = greedy(4);
  bad.gbnf = "root ::= nothing\n";
  auto r = s.submit(prompt(3, 3), bad);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("undefined rule 'nothing'"), std::string::npos);
}
