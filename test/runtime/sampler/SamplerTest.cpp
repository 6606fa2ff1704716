//===- SamplerTest.cpp - sampler tests -------------------------------------===//
//
// Greedy tie-breaking, top-k/top-p/min-p boundaries on hand-computed distributions, seeded
// reproducibility, and empirical frequencies against the softmax (fixed seeds, tolerances of several
// standard deviations so the tests are deterministic but still catch a wrong distribution).
//===----------------------------------------------------------------------===//
#include "runtime/sampler/Sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

using namespace tpc::rt;

namespace {

std::vector<int32_t> ids(const std::vector<TokenProb> &c) {
  std::vector<int32_t> v;
  for (const TokenProb &t : c)
    v.push_back(t.id);
  return v;
}

TEST(Sampler, GreedyPicksLowestIdOnTies) {
  std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  EXPECT_EQ(Sampler::greedy(l.data(), l.size()), 1);
  Sampler s(SamplerParams{});
  EXPECT_EQ(s.sample(l), 1);
  l[1] = NAN; // NaN never wins
  EXPECT_EQ(s.sample(l), 3);
  EXPECT_THROW(Sampler::greedy(l.data(), 0), SamplerError);
  std::vector<float> nans = {NAN, NAN};
  EXPECT_THROW(s.sample(nans), SamplerError);
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplerParams p;
  p.temperature = 1.5f;
  p.topK = 1;
  p.seed = 7;
  Sampler s(p);
  std::mt19937 gen(123);
  std::normal_distribution<float> nd;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> l(64);
    for (float &x : l)
      x = nd(gen);
    EXPECT_EQ(s.sample(l), Sampler::greedy(l.data(), l.size()));
  }
}

TEST(Sampler, TopKKeepsTheKLargest) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.topK = 3;
  Sampler s(p);
  std::vector<float> l = {1, 5, 3, 5, 4, 0};
  EXPECT_EQ(ids(s.candidates(l.data(), l.size())), (std::vector<int32_t>{1, 3, 4}));
}

/// A vocabulary-sized row with many ties, NaN and -inf entries: greedy and the one-pass top-k selection give
/// what a full sort by (logit descending, id ascending) gives, for k below, at and above the usable count.
TEST(Sampler, LargeRowsMatchAFullSort) {
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> level(-40, 40);
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<float> l(262147); // not a multiple of 8: the greedy tail runs
    for (size_t i = 0; i < l.size(); ++i)
      l[i] = i % 97 == 0 ? NAN : i % 89 == 0 ? -INFINITY : 0.25f * static_cast<float>(level(gen));
    if (trial == 1)
      l[l.size() - 1] = 100.0f; // the maximum in the tail
    if (trial == 2)
      l[3] = NAN, l[8] = 11.0f, l[16] = 11.0f; // tied maximum: the lower id
    std::vector<std::pair<float, int32_t>> ref;
    for (size_t i = 0; i < l.size(); ++i)
      if (!std::isnan(l[i]) && l[i] != -INFINITY)
        ref.emplace_back(l[i], static_cast<int32_t>(i));
    std::sort(ref.begin(), ref.end(), [](const auto &a, const auto &b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    EXPECT_EQ(Sampler::greedy(l.data(), l.size()), ref[0].second) << "trial " << trial;
    for (int32_t k : {1, 40, 1000}) {
      SamplerParams p;
      p.temperature = 1.0f;
      p.topK = k;
      std::vector<int32_t> want;
      for (int32_t i = 0; i < k; ++i)
        want.push_back(ref[static_cast<size_t>(i)].second);
      EXPECT_EQ(ids(Sampler(p).candidates(l.data(), l.size())), want) << "trial " << trial << " k=" << k;
    }
  }
  std::vector<float> allNan(1000, NAN), someInf(1000, NAN);
  EXPECT_THROW(Sampler::greedy(allNan.data(), allNan.size()), SamplerError);
  someInf[500] = -INFINITY; // -inf is a value for greedy (the only one here), excluded from sampling
  EXPECT_EQ(Sampler::greedy(someInf.data(), someInf.size()), 500);
}

TEST(Sampler, TopPBoundaries) {
  // Probabilities 0.5, 0.25, 0.125, 0.125 from logits log(4), log(2), 0, 0.
  std::vector<float> l = {std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  auto keep = [&](float topP) {
    SamplerParams p;
    p.temperature = 1.0f;
    p.topP = topP;
    return ids(Sampler(p).candidates(l.data(), l.size()));
  };
  EXPECT_EQ(keep(0.49f), (std::vector<int32_t>{0}));    // reached by the first token
  EXPECT_EQ(keep(0.51f), (std::vector<int32_t>{0, 1})); // just above: one more
  EXPECT_EQ(keep(0.74f), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(keep(0.76f), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(keep(0.0f), (std::vector<int32_t>{0})); // never empty
  EXPECT_EQ(keep(1.0f).size(), 4u);                 // off
  SamplerParams bad;
  bad.topP = 1.5f;
  EXPECT_THROW(Sampler{bad}, SamplerError);
}

TEST(Sampler, MinP) {
  std::vector<float> l = {std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  SamplerParams p;
  p.temperature = 1.0f;
  p.minP = 0.55f; // keeps p >= 0.275: only the first
  EXPECT_EQ(ids(Sampler(p).candidates(l.data(), l.size())), (std::vector<int32_t>{0}));
  p.minP = 0.45f; // keeps p >= 0.225
  EXPECT_EQ(ids(Sampler(p).candidates(l.data(), l.size())), (std::vector<int32_t>{0, 1}));
  p.minP = 0.3f; // keeps p >= 0.15: the 0.125 tokens go
  EXPECT_EQ(ids(Sampler(p).candidates(l.data(), l.size())), (std::vector<int32_t>{0, 1}));
  p.minP = 0.2f; // keeps p >= 0.1: all
  EXPECT_EQ(ids(Sampler(p).candidates(l.data(), l.size())).size(), 4u);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  std::vector<float> l = {2.0f, 1.0f, 0.0f};
  SamplerParams p;
  p.temperature = 0.5f;
  std::vector<TokenProb> cold = Sampler(p).candidates(l.data(), l.size());
  p.temperature = 2.0f;
  std::vector<TokenProb> hot = Sampler(p).candidates(l.data(), l.size());
  // p0 = 1 / (1 + e^{-1/T} + e^{-2/T})
  EXPECT_NEAR(cold[0].p, 1.0 / (1 + std::exp(-2.0) + std::exp(-4.0)), 1e-6);
  EXPECT_NEAR(hot[0].p, 1.0 / (1 + std::exp(-0.5) + std::exp(-1.0)), 1e-6);
  double sum = 0;
  for (const TokenProb &t : hot)
    sum += t.p;
  EXPECT_NEAR(sum, 1.0, 1e-6);
}

TEST(Sampler, SameSeedSameTokens) {
  std::vector<float> l(100);
  for (size_t i = 0; i < l.size(); ++i)
    l[i] = std::sin(static_cast<float>(i)) * 2;
  SamplerParams p;
  p.temperature = 1.0f;
  p.topK = 50;
  p.topP = 0.95f;
  p.seed = 1234;
  Sampler a(p), b(p);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 200; ++i) {
    ta.push_back(a.sample(l));
    tb.push_back(b.sample(l));
  }
  EXPECT_EQ(ta, tb);
  p.seed = 1235;
  Sampler c(p);
  std::vector<int32_t> tc;
  for (int i = 0; i < 200; ++i)
    tc.push_back(c.sample(l));
  EXPECT_NE(ta, tc);
  a.reseed(1234);
  EXPECT_EQ(a.sample(l), ta[0]);
}

TEST(Sampler, FrequenciesFollowSoftmax) {
  std::vector<float> l = {1.0f, 0.0f, -1.0f, 0.5f};
  SamplerParams p;
  p.temperature = 1.0f;
  p.seed = 99;
  Sampler s(p);
  const int n = 40000;
  std::map<int32_t, int> count;
  for (int i = 0; i < n; ++i)
    ++count[s.sample(l)];
  double z = 0;
  for (float x : l)
    z += std::exp(x);
  for (int32_t id = 0; id < 4; ++id) {
    double expect = std::exp(l[id]) / z;
    double sd = std::sqrt(expect * (1 - expect) / n);
    EXPECT_NEAR(static_cast<double>(count[id]) / n, expect, 5 * sd) << "token " << id;
  }
}

TEST(Sampler, FiltersNeverYieldExcludedTokens) {
  std::vector<float> l = {3.0f, 2.9f, 0.0f, -5.0f, 2.8f};
  SamplerParams p;
  p.temperature = 3.0f; // flat, so excluded tokens would show up if the filter leaked
  p.topK = 2;
  p.seed = 5;
  Sampler s(p);
  for (int i = 0; i < 2000; ++i) {
    int32_t id = s.sample(l);
    EXPECT_TRUE(id == 0 || id == 1) << id;
  }
}

} // namespace

namespace {

TEST(Sampler, LogitBiasBansAndBoostsBeforeGreedyAndSampling) {
  std::vector<float> l = {0.5f, 2.0f, -1.0f, 1.5f, 1.0f};
  SamplerParams p;
  p.logitBias = {{1, -INFINITY}};
  Sampler banned(p);
  EXPECT_EQ(banned.sample(l), 3);         // the argmax is banned: the next best
  EXPECT_EQ(l[1], 2.0f);                  // the caller's row is untouched
  p.logitBias = {{2, 10.0f}, {99, 5.0f}}; // an id past the row is ignored
  EXPECT_EQ(Sampler(p).sample(l), 2);
  // Sampling: a banned token is never drawn, whatever the seed.
  p.temperature = 1.0f;
  p.logitBias = {{1, -INFINITY}, {3, -INFINITY}};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    p.seed = seed;
    const int32_t id = Sampler(p).sample(l);
    EXPECT_NE(id, 1);
    EXPECT_NE(id, 3);
  }
  p.logitBias = {{0, NAN}};
  EXPECT_THROW(Sampler{p}, SamplerError);
}

} // namespace
