//===- BatchTest.cpp - several sequences in one session, on compiled fixture plans ---===//
//
// The batch API (Session::evaluate of BatchTokens) on `tpc compile` plans of the shared fixtures, which
// have the output-rows input and sliding-window rings:
//  - N sequences whose prompts and decode steps share every batch give each sequence's rows of N
//    separate one-sequence runs (the fixtures' N-device bound: batching changes the matmuls' chunking and
//    nothing per token), with f16 and with q8_0 caches;
//  - generation asks for one row per sequence, and the session's counter shows the plan computed exactly
//    those rows (plus one per chunk that asks for none);
//  - a cleared sequence is reused from position 0 and gives a fresh run's rows;
//  - a sequence rewound to an earlier position and continued with other tokens gives a fresh run's rows
//    (attention caches drop the later positions; a hybrid model's recurrent state is recomputed);
//  - bad batches are one-line errors naming the entry, and change nothing.
// Each test skips without ../shared.
//===----------------------------------------------------------------------===//
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanIO.h"

#include "test/common/FixtureCheck.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <unistd.h>

using namespace tpc::rt;

namespace {

const std::string kTpc = std::string(TPC_BINARY_DIR) + "/bin/tpc";

/// The fixture's GGUF path, or "" (the test skips) without ../shared.
std::string fixture(const std::string &name) {
  const char *shared = std::getenv("TPC_SHARED_DIR");
  const std::string gguf = shared ? std::string(shared) + "/fixtures/" + name + ".gguf" : "";
  return shared && std::ifstream(gguf) ? gguf : "";
}

/// `tpc compile gguf ARGS` into a temporary plan, loaded.
Expected<Plan> compiled(const std::string &gguf, const std::string &args) {
  const std::string path = ::testing::TempDir() + "tpc-batch-" + std::to_string(::getpid()) + ".plan";
  auto [rc, out] = tpc::test::runShell(kTpc + " compile " + gguf + " " + args + " -o " + path + " 2>&1");
  if (rc != 0)
    return Error{"tpc compile failed: " + out};
  auto plan = loadPlan(path);
  std::remove(path.c_str());
  return plan;
}

std::unique_ptr<Session> open(const Plan &plan, int32_t sequences, int64_t ctx = 64) {
  SessionOptions o;
  o.threads = 2;
  o.ctxSize = ctx;
  o.sequences = sequences;
  auto s = Session::open(plan, o);
  EXPECT_TRUE(s) << s.message();
  return s ? s.take() : nullptr;
}

/// Three prompts of different lengths (the fixtures share one 512-token vocabulary).
const std::vector<std::vector<int32_t>> kPrompts = {
    {1, 313, 421, 426, 263, 283, 278, 307, 461, 443, 286, 424},
    {1, 17, 99, 250},
    {1, 500, 42, 42, 7, 311, 8, 9, 10}};
constexpr int kSteps = 6;
/// Decode inputs per sequence (fixed, so the runs are comparable without sampling).
int32_t stepToken(size_t seq, int k) { return static_cast<int32_t>((37 * seq + 11 * k + 5) % 512); }

/// One sequence alone: its prompt (every row), then kSteps tokens one at a time.
std::vector<float> runAlone(const Plan &plan, size_t seq) {
  auto s = open(plan, 1);
  if (!s)
    return {};
  const std::vector<int32_t> &p = kPrompts[seq];
  std::vector<int32_t> pos(p.size());
  for (size_t i = 0; i < p.size(); ++i)
    pos[i] = static_cast<int32_t>(i);
  auto rows = s->evaluate(p, pos);
  EXPECT_TRUE(rows) << rows.message();
  std::vector<float> out = rows ? *rows : std::vector<float>{};
  for (int k = 0; k < kSteps; ++k) {
    auto r = s->evaluate({stepToken(seq, k)}, {static_cast<int32_t>(p.size() + k)});
    EXPECT_TRUE(r) << r.message();
    if (r)
      out.insert(out.end(), r->begin(), r->end());
  }
  return out;
}

/// All sequences in one session: one batch of the interleaved prompts (every row asked for), then each
/// step's tokens of every sequence in one batch. Returns each sequence's rows in runAlone's layout.
std::vector<std::vector<float>> runTogether(Session &s, int64_t vocab) {
  std::vector<BatchToken> batch;
  std::vector<size_t> owner;
  for (size_t i = 0;; ++i) { // round robin over the prompts: token i of each sequence that has one
    bool any = false;
    for (size_t q = 0; q < kPrompts.size(); ++q)
      if (i < kPrompts[q].size()) {
        batch.push_back({kPrompts[q][i], static_cast<int32_t>(i), static_cast<int32_t>(q), true});
        owner.push_back(q);
        any = true;
      }
    if (!any)
      break;
  }
  std::vector<std::vector<float>> out(kPrompts.size());
  auto rows = s.evaluate(batch);
  EXPECT_TRUE(rows) << rows.message();
  if (!rows)
    return out;
  for (size_t i = 0; i < batch.size(); ++i)
    out[owner[i]].insert(out[owner[i]].end(), rows->begin() + i * vocab, rows->begin() + (i + 1) * vocab);
  for (int k = 0; k < kSteps; ++k) {
    std::vector<BatchToken> step;
    for (size_t q = 0; q < kPrompts.size(); ++q)
      step.push_back({stepToken(q, k), static_cast<int32_t>(kPrompts[q].size() + k), static_cast<int32_t>(q), true});
    auto r = s.evaluate(step);
    EXPECT_TRUE(r) << r.message();
    if (!r)
      return out;
    for (size_t q = 0; q < kPrompts.size(); ++q)
      out[q].insert(out[q].end(), r->begin() + q * vocab, r->begin() + (q + 1) * vocab);
  }
  return out;
}

class Batch : public ::testing::TestWithParam<std::string> {};

TEST_P(Batch, SequencesInOneBatchEqualSeparateRuns) {
  const std::string gguf = fixture(GetParam());
  if (gguf.empty())
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures not found; set TPC_SHARED_DIR to ../shared";
  // max-batch 8: the interleaved prompts (25 tokens) run in 4 chunks that cut through every sequence;
  // the gemma rings hold 16 positions, so the 18-position sequence wraps. Also with q8_0 caches (-ctk /
  // -ctv): each sequence's cells hold its own blocks, whatever shares the batch.
  for (const char *cache : {"", " -ctk q8_0 -ctv q8_0"}) {
    SCOPED_TRACE(std::string("cache flags:") + cache);
    auto plan = compiled(gguf, std::string("--devices 2 --max-batch 8 --max-output-rows 8") + cache);
    ASSERT_TRUE(plan) << plan.message();
    const int64_t vocab = plan->model.nVocab;
    auto s = open(*plan, static_cast<int32_t>(kPrompts.size()));
    ASSERT_TRUE(s);
    const std::vector<std::vector<float>> together = runTogether(*s, vocab);
    for (size_t q = 0; q < kPrompts.size(); ++q) {
      const std::vector<float> alone = runAlone(*plan, q);
      ASSERT_EQ(alone.size(), (kPrompts[q].size() + kSteps) * vocab);
      double scale = 0;
      for (float v : alone)
        scale = std::max(scale, std::fabs(double(v)));
      ::testing::AssertionResult same = tpc::test::allWithin(together[q], alone, 1e-4 * std::max(1.0, scale));
      EXPECT_TRUE(same) << GetParam() << " sequence " << q;
      std::printf("[ batch    ] %s%s sequence %zu: %s\n", GetParam().c_str(), cache, q, same.message());
    }
  }
}

TEST_P(Batch, GenerationAsksOneRowPerSequence) {
  const std::string gguf = fixture(GetParam());
  if (gguf.empty())
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures not found; set TPC_SHARED_DIR to ../shared";
  auto plan = compiled(gguf, "--devices 2 --max-batch 16 --max-output-rows 4");
  ASSERT_TRUE(plan) << plan.message();
  ASSERT_EQ(plan->model.maxOutputRows, 4);
  auto s = open(*plan, 3);
  ASSERT_TRUE(s);
  // The prompts in one batch, asking for the last row of each: 3 rows of the 25 tokens (two chunks of
  // 16 + 9 tokens, each with rows to compute).
  std::vector<BatchToken> batch;
  for (size_t q = 0; q < kPrompts.size(); ++q)
    for (size_t i = 0; i < kPrompts[q].size(); ++i)
      batch.push_back({kPrompts[q][i], static_cast<int32_t>(i), static_cast<int32_t>(q), i + 1 == kPrompts[q].size()});
  auto rows = s->evaluate(batch);
  ASSERT_TRUE(rows) << rows.message();
  EXPECT_EQ(rows->size(), 3u * plan->model.nVocab);
  // Chunks: tokens 0..15 (the last rows of the first two prompts: tokens 11 and 15) and 16..24 (the
  // third's).
  EXPECT_EQ(s->counters().chunks, 2);
  EXPECT_EQ(s->counters().outputRows, 3);
  // A decode step of the three sequences: one row each.
  std::vector<BatchToken> step;
  for (size_t q = 0; q < kPrompts.size(); ++q)
    step.push_back({7, static_cast<int32_t>(kPrompts[q].size()), static_cast<int32_t>(q), true});
  auto r = s->evaluate(step);
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->size(), 3u * plan->model.nVocab);
  EXPECT_EQ(s->counters().outputRows, 6);
  // Every row of a 12-token prompt, with 4 rows per call: 3 chunks of 4 tokens, 12 rows.
  s->clearSequence(0);
  std::vector<int32_t> pos(kPrompts[0].size());
  for (size_t i = 0; i < pos.size(); ++i)
    pos[i] = static_cast<int32_t>(i);
  const SessionCounters before = s->counters();
  auto all = s->evaluate(kPrompts[0], pos);
  ASSERT_TRUE(all) << all.message();
  EXPECT_EQ(all->size(), kPrompts[0].size() * plan->model.nVocab);
  EXPECT_EQ(s->counters().chunks - before.chunks, 3);
  EXPECT_EQ(s->counters().outputRows - before.outputRows, 12);
}

TEST_P(Batch, ClearedSequenceIsReusedFromPositionZero) {
  const std::string gguf = fixture(GetParam());
  if (gguf.empty())
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures not found; set TPC_SHARED_DIR to ../shared";
  auto plan = compiled(gguf, "--max-batch 8");
  ASSERT_TRUE(plan) << plan.message();
  auto s = open(*plan, 2);
  ASSERT_TRUE(s);
  const int64_t vocab = plan->model.nVocab;
  // Sequence 1 holds prompt 0 (and sequence 0 prompt 2, which must not leak into it), then is cleared and
  // reused for prompt 1; its rows must equal prompt 1 run alone.
  std::vector<BatchToken> a;
  for (size_t i = 0; i < kPrompts[0].size(); ++i)
    a.push_back({kPrompts[0][i], static_cast<int32_t>(i), 1, false});
  for (size_t i = 0; i < kPrompts[2].size(); ++i)
    a.push_back({kPrompts[2][i], static_cast<int32_t>(i), 0, false});
  ASSERT_TRUE(s->evaluate(a));
  EXPECT_EQ(s->sequenceLength(1), int64_t(kPrompts[0].size()));
  s->clearSequence(1);
  EXPECT_EQ(s->sequenceLength(1), 0);
  EXPECT_EQ(s->sequenceLength(0), int64_t(kPrompts[2].size()));
  std::vector<BatchToken> b;
  for (size_t i = 0; i < kPrompts[1].size(); ++i)
    b.push_back({kPrompts[1][i], static_cast<int32_t>(i), 1, true});
  auto got = s->evaluate(b);
  ASSERT_TRUE(got) << got.message();
  std::vector<float> alone = runAlone(*plan, 1);
  alone.resize(kPrompts[1].size() * vocab); // the prompt rows
  EXPECT_TRUE(tpc::test::allWithin(*got, alone, 1e-4));
}

TEST_P(Batch, RewoundSequenceEqualsFreshRun) {
  const std::string gguf = fixture(GetParam());
  if (gguf.empty())
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures not found; set TPC_SHARED_DIR to ../shared";
  auto plan = compiled(gguf, "--max-batch 8");
  ASSERT_TRUE(plan) << plan.message();
  const bool recurrent = GetParam().find("qwen35") != std::string::npos;
  const std::vector<int32_t> &p = kPrompts[0];
  // Sequence 0 runs prompt 0 and three decode tokens, then goes back to position 7 (inside the prompt)
  // and continues with other tokens; a fresh session runs prompt 0's first 7 tokens and those tokens.
  const std::vector<int32_t> other = {99, 3, 250, 17};
  auto s = open(*plan, 2);
  ASSERT_TRUE(s);
  std::vector<BatchToken> a;
  for (size_t i = 0; i < p.size(); ++i)
    a.push_back({p[i], static_cast<int32_t>(i), 0, false});
  for (int32_t k = 0; k < 3; ++k)
    a.push_back({stepToken(0, k), static_cast<int32_t>(p.size()) + k, 0, false});
  a.push_back({kPrompts[1][0], 0, 1, false}); // another sequence beside it, which must not move
  ASSERT_TRUE(s->evaluate(a));
  const int64_t before = s->counters().recomputed;
  std::vector<BatchToken> b;
  for (size_t i = 0; i < other.size(); ++i)
    b.push_back({other[i], static_cast<int32_t>(7 + i), 0, true});
  b.push_back({kPrompts[1][1], 1, 1, true});
  auto got = s->evaluate(b);
  ASSERT_TRUE(got) << got.message();
  EXPECT_EQ(s->sequenceLength(0), 7 + int64_t(other.size()));
  // Only a recurrent state needs the prefix again: the 7 positions before the rewind.
  EXPECT_EQ(s->counters().recomputed - before, recurrent ? 7 : 0);

  auto fresh = open(*plan, 2);
  ASSERT_TRUE(fresh);
  std::vector<BatchToken> c;
  for (int32_t i = 0; i < 7; ++i)
    c.push_back({p[i], i, 0, false});
  for (size_t i = 0; i < other.size(); ++i)
    c.push_back({other[i], static_cast<int32_t>(7 + i), 0, true});
  c.push_back({kPrompts[1][0], 0, 1, false});
  c.push_back({kPrompts[1][1], 1, 1, true});
  auto want = fresh->evaluate(c);
  ASSERT_TRUE(want) << want.message();
  ASSERT_EQ(got->size(), want->size());
  EXPECT_TRUE(tpc::test::allWithin(*got, *want, 1e-4));
  // The greedy continuation agrees too.
  const int64_t vocab = plan->model.nVocab;
  for (size_t r = 0; r < got->size() / vocab; ++r)
    EXPECT_EQ(std::max_element(got->begin() + r * vocab, got->begin() + (r + 1) * vocab) - got->begin(),
              std::max_element(want->begin() + r * vocab, want->begin() + (r + 1) * vocab) - want->begin())
        << "row " << r;
}

TEST_P(Batch, BadBatchesAreOneLineErrorsAndChangeNothing) {
  const std::string gguf = fixture(GetParam());
  if (gguf.empty())
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures not found; set TPC_SHARED_DIR to ../shared";
  auto plan = compiled(gguf, "--max-batch 4");
  ASSERT_TRUE(plan) << plan.message();
  auto s = open(*plan, 2, 32);
  ASSERT_TRUE(s);
  auto expectError = [&](const std::vector<BatchToken> &batch, const std::string &what) {
    auto r = s->evaluate(batch);
    ASSERT_FALSE(r) << what;
    EXPECT_NE(r.message().find(what), std::string::npos) << r.message();
    EXPECT_EQ(r.message().find('\n'), std::string::npos) << r.message();
  };
  expectError({{5, 0, 2, true}}, "sequence 2 is not in 0..1");
  expectError({{5, 0, -1, true}}, "sequence -1 is not in 0..1");
  expectError({{5, 1, 0, true}}, "sequence 0 holds 0 position(s), so its next position is 0");
  expectError({{5, 0, 0, true}, {6, 2, 0, true}}, "continues at position 2 after position 0");
  expectError({{5, 32, 0, true}}, "past the context of 32 tokens");
  expectError({{512, 0, 0, true}}, "outside the vocabulary");
  EXPECT_EQ(s->sequenceLength(0), 0); // nothing ran
  // Twenty positions, then a rewind: full caches keep everything, but the gemma rings (8 + 4 positions)
  // only the last 12, so going back to 15 works (positions 8..14 are still there) and to 6 does not.
  std::vector<BatchToken> fill;
  for (int32_t p = 0; p < 20; ++p)
    fill.push_back({static_cast<int32_t>(p + 3), p, 0, false});
  ASSERT_TRUE(s->evaluate(fill));
  EXPECT_EQ(s->checkBatch({{5, 15, 0, true}}), "");
  const bool rings = GetParam().find("gemma") != std::string::npos;
  if (rings)
    expectError({{5, 6, 0, true}}, "sequence 0 cannot go back to position 6");
  else
    EXPECT_EQ(s->checkBatch({{5, 6, 0, true}}), "");
  EXPECT_EQ(s->checkBatch({{5, 0, 0, true}}), ""); // restarting reads nothing
  EXPECT_TRUE(s->evaluate({{5, 15, 0, true}})); // a rewind runs
  EXPECT_EQ(s->sequenceLength(0), 16);
}

// Full caches with GQA (llama), MQA with sliding-window rings (gemma3), rings + MoE (gemma4).
// Devices of one session help each other (HelpBoard: a device thread waiting at a collective runs units
// of its peers' matmuls): which thread ran a unit changes no bit, at 2 and 3 devices, one and two threads
// per device, prompts and decode steps of several sequences (MoE experts and fused GLUs included).
TEST_P(Batch, DevicesHelpingEachOtherChangeNoBit) {
  const std::string gguf = fixture(GetParam());
  if (gguf.empty())
    GTEST_SKIP() << "no shared fixtures: set TPC_SHARED_DIR to ../shared";
  for (int devices : {2, 3}) {
    auto plan = compiled(gguf, "--devices " + std::to_string(devices) + " --max-batch 16");
    ASSERT_TRUE(plan) << plan.message();
    for (int perDevice : {1, 2}) {
      std::vector<std::vector<float>> runs[2];
      for (int help : {0, 1}) {
        if (help)
          ::unsetenv("TPC_CPU_PEER_HELP");
        else
          ::setenv("TPC_CPU_PEER_HELP", "0", 1); // read when a session opens
        SessionOptions o;
        o.threads = devices * perDevice;
        o.ctxSize = 64;
        o.sequences = static_cast<int32_t>(kPrompts.size());
        auto s = Session::open(*plan, o);
        ::unsetenv("TPC_CPU_PEER_HELP");
        ASSERT_TRUE(s) << s.message();
        runs[help] = runTogether(**s, plan->model.nVocab);
      }
      for (size_t q = 0; q < kPrompts.size(); ++q) {
        ASSERT_EQ(runs[0][q].size(), runs[1][q].size());
        ASSERT_FALSE(runs[0][q].empty());
        size_t differ = 0;
        for (size_t j = 0; j < runs[0][q].size(); ++j)
          differ += std::memcmp(&runs[0][q][j], &runs[1][q][j], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0u) << devices << " devices x " << perDevice << " threads, sequence " << q;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Batch,
                         ::testing::Values("tiny-llama", "tiny-gemma3", "tiny-gemma4moe", "tiny-qwen35moe"),
                         tpc::test::fixtureParamName);

} // namespace
