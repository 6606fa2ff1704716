//===- Session.cpp - the evaluate loop every backend shares ----------------===//
//
// Argument checks, chunks of at most max_batch tokens, and the failure latch: a chunk that fails leaves
// device memory (and the KV caches) in an unknown state, so the session refuses every later call.
//===----------------------------------------------------------------------===//
#include "runtime/exec/Session.h"

#include "runtime/exec/StepChecks.h"

#include <algorithm>

namespace tpc::rt {

Session::Session(Plan plan, int64_t ctx, std::vector<int> devices)
    : plan_(std::move(plan)), ctx_(ctx), devices_(std::move(devices)) {
  const std::vector<Step> &steps = plan_.devices[devices_.front()].steps;
  prof_.resize(steps.size());
  for (size_t i = 0; i < steps.size(); ++i)
    prof_[i].name = steps[i].name, prof_[i].op = steps[i].op;
}

Session::~Session() = default;

bool Session::runsDevice(int d) const { return std::binary_search(devices_.begin(), devices_.end(), d); }

void Session::recordStep(size_t step, double seconds) {
  prof_[step].seconds += seconds;
  ++prof_[step].calls;
}

Expected<std::vector<float>> Session::evaluate(const std::vector<int32_t> &tokens,
                                               const std::vector<int32_t> &positions) {
  if (!failure_.empty())
    return Error{"execution failed earlier: " + failure_ + "; reopen the plan"};
  if (std::string bad = exec::checkEvaluateArgs(plan_, ctx_, tokens, positions); !bad.empty())
    return Error{bad};
  const int64_t vocab = plan_.model.nVocab, total = static_cast<int64_t>(tokens.size());
  const bool logits = runsDevice(0);
  std::vector<float> rows(logits ? static_cast<size_t>(total * vocab) : 0);
  for (int64_t at = 0; at < total; at += plan_.model.maxBatch) {
    const int64_t t = std::min(plan_.model.maxBatch, total - at);
    Expected<void> ok =
        runChunk(tokens.data() + at, positions.data() + at, t, logits ? rows.data() + at * vocab : nullptr);
    if (!ok) {
      failure_ = ok.message();
      return Error{"execution failed: " + failure_ + "; reopen the plan"};
    }
  }
  return rows;
}

} // namespace tpc::rt
