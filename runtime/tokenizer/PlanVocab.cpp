//===- PlanVocab.cpp - the tokenizer a plan file carries -------------------===//
#include "runtime/tokenizer/PlanVocab.h"

namespace tpc::rt {

TokenizerData tokenizerDataFromPlan(const PlanTokenizer &t) {
  TokenizerData d;
  d.model = t.model;
  d.pre = t.pre.empty() ? "default" : t.pre;
  d.tokens = t.tokens;
  d.scores = t.scores;
  d.tokenTypes = t.tokenTypes;
  d.merges = t.merges;
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

} // namespace tpc::rt
