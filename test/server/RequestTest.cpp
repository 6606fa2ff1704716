//===- RequestTest.cpp - client text, stop strings and log-probabilities ---===//
#include "server/Request.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace tpc;
using namespace tpc::server;

namespace {
/// SPM vocabulary: specials, then byte tokens for two halves of "é" (0xC3 0xA9), then words.
rt::Tokenizer vocab() {
  rt::TokenizerData d;
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", "\xE2\x96\x81hello", "\xE2\x96\x81wor", "ld", "!"};
  d.tokenTypes = {2, 3, 3, 6, 6, 1, 1, 1, 1};
  d.unk = 0, d.bos = 1, d.eos = 2;
  d.addSpacePrefix = true; // decoding from the start would drop the first space; a continuation keeps it
  return rt::Tokenizer(d);
}
} // namespace

TEST(TextStream, ReleasesWholeCharactersOnly) {
  rt::Tokenizer tok = vocab();
  TextStream t(tok, {});
  EXPECT_EQ(t.push(5), " hello"); // the first piece's leading space stays: this is a continuation
  EXPECT_EQ(t.push(3), "");       // half of a UTF-8 character
  EXPECT_EQ(t.push(4), "\xC3\xA9");
  EXPECT_EQ(t.flush(), "");
}

TEST(TextStream, StopStringAcrossTokens) {
  rt::Tokenizer tok = vocab();
  TextStream t(tok, {"world"});
  EXPECT_EQ(t.push(5), " hello");
  EXPECT_EQ(t.push(6), " "); // "wor" may start "world": held back
  EXPECT_FALSE(t.stopped());
  EXPECT_EQ(t.push(7), ""); // "world" found: nothing before it is left, the rest is dropped
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(t.push(8), "");
  EXPECT_EQ(t.flush(), "");
}

TEST(TextStream, HeldTextIsReleasedWhenItIsNotAStop) {
  rt::Tokenizer tok = vocab();
  TextStream t(tok, {"world!", "xyz"});
  EXPECT_EQ(t.push(6), " ");   // " wor": "wor" could start "world!"
  EXPECT_EQ(t.push(7), "");    // " world": still a prefix
  EXPECT_EQ(t.push(5), "world hello");
  EXPECT_EQ(t.push(6), " ");
  EXPECT_EQ(t.flush(), "wor"); // the end of generation releases what was held
}

TEST(Logprob, LogSoftmaxAndTopAlternatives) {
  const std::vector<float> row = {1.0f, 3.0f, 2.0f, 3.0f, -INFINITY};
  std::vector<TokenLogprob> top;
  const TokenLogprob lp = logprobOf(row.data(), row.size(), 2, 3, top);
  double z = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0);
  EXPECT_NEAR(lp.logprob, 2.0 - std::log(z), 1e-5);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 1); // ties by the lower id
  EXPECT_EQ(top[1].id, 3);
  EXPECT_EQ(top[2].id, 2);
  EXPECT_NEAR(top[0].logprob, 3.0 - std::log(z), 1e-5);
  EXPECT_TRUE(std::isinf(logprobOf(row.data(), row.size(), 4, 0, top).logprob));
  EXPECT_TRUE(top.empty());
}

TEST(Request, EventsInOrderAndCancelWakes) {
  int woken = 0;
  Request r({1, 2}, GenerationParams{}, [&] { ++woken; });
  Event e;
  EXPECT_FALSE(r.next(e, std::chrono::milliseconds(1)));
  Event a;
  a.token.id = 7;
  r.push(a);
  Event f;
  f.kind = Event::Kind::Finish;
  r.push(f);
  ASSERT_TRUE(r.next(e, std::chrono::milliseconds(0)));
  EXPECT_EQ(e.token.id, 7);
  ASSERT_TRUE(r.next(e, std::chrono::milliseconds(0)));
  EXPECT_EQ(e.kind, Event::Kind::Finish);
  r.cancel();
  r.cancel();
  EXPECT_TRUE(r.cancelled());
  EXPECT_EQ(woken, 1);
}
