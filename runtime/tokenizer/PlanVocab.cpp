//===- PlanVocab.cpp - the tokenizer a plan file carries -------------------===//
#include "runtime/tokenizer/PlanVocab.h"

#include <utility>

namespace tpc::rt {

TokenizerData tokenizerDataFromPlan(PlanTokenizer t) {
  TokenizerData d;
  d.model = std::move(t.model);
  d.pre = t.pre.empty() ? "default" : t.pre;
  d.tokens = std::move(t.tokens);
  d.scores = std::move(t.scores);
  d.tokenTypes = std::move(t.tokenTypes);
  d.merges = std::move(t.merges);
  d.bos = t.bosId;
  d.eos = t.eosId;
  d.unk = t.unkId;
  d.pad = t.padId;
  d.eot = t.eotId;
  d.sep = t.sepId;
  d.eom = t.eomId;
  d.addBos = t.addBos;
  d.addEos = t.addEos;
  d.addSpacePrefix = t.addSpacePrefix;
  d.ignoreMerges = t.ignoreMerges;
  d.cleanSpaces = t.cleanSpaces;
  addEndOfGenerationTokens(d);
  return d;
}

PlanTokenizer planTokenizerFromData(TokenizerData t) {
  PlanTokenizer p;
  p.model = std::move(t.model);
  p.pre = std::move(t.pre);
  p.tokens = std::move(t.tokens);
  p.scores = std::move(t.scores);
  p.tokenTypes = std::move(t.tokenTypes);
  p.merges = std::move(t.merges);
  p.bosId = t.bos;
  p.eosId = t.eos;
  p.unkId = t.unk;
  p.padId = t.pad;
  p.sepId = t.sep;
  p.eotId = t.eot;
  p.eomId = t.eom;
  p.addBos = t.addBos;
  p.addEos = t.addEos;
  p.addSpacePrefix = t.addSpacePrefix;
  p.ignoreMerges = t.ignoreMerges;
  p.cleanSpaces = t.cleanSpaces;
  return p;
}

} // namespace tpc::rt
