//===- Lockstep.h - every rank runs the calls rank 0 makes --------*- C++ -*-===//
//
// In a multi-process run each rank holds a session of its own plan device, and every evaluate() call must
// happen on every rank, with the same tokens, in the same order (the collectives inside pair up). Rank 0
// owns the user's side (prompt, tokenizer, sampler, output, --bench, --dump-logits): it gets a
// LeaderSession, a Session whose evaluate() first sends the call (token ids and positions, so sampling
// decisions travel as the ids they chose) to the other ranks and then runs it on rank 0's own session.
// The other ranks run follow(): receive a call, run it, until rank 0 says the run is over. So any code
// written against rt::Session (tpc run, bench, perplexity) runs unchanged on rank 0.
//
// The calls travel as broadcasts from rank 0 on a host-buffer communicator (`control`, the ranks' MPI
// communicator; the plan's own collectives may be on another one, e.g. NCCL): a header {what, a, b}. For
// Evaluate (a = tokens, b = output rows) then the chunk's tokens, positions, sequence ids and output rows;
// ClearSequence (a = the sequence) keeps every rank's sequence lengths equal, so each rank's own
// evaluate() accepts the same batches; Finish / Failed when rank 0's side ended normally or with an error
// before the next call. A call that fails while the devices run may leave a peer inside a
// collective, which no message can reach: then the job must end (failedWhileRunning(), follow()'s error),
// and the launcher glue ends it.
//
// Usage (rank 0; the others call follow(*session, control)):
//   LeaderSession s(std::move(session), control);
//   userSide(s);            // s.evaluate() runs on every rank
//   s.finish(true);         // the followers return from follow()
//===----------------------------------------------------------------------===//
#ifndef TPC_TOOLS_TPC_LOCKSTEP_H
#define TPC_TOOLS_TPC_LOCKSTEP_H

#include "runtime/comm/Communicator.h"
#include "runtime/exec/Session.h"

#include <memory>
#include <string>

namespace tpc::cli {

/// Rank 0's session (see the file comment); everything but evaluate() answers from the wrapped session.
class LeaderSession final : public rt::Session {
public:
  /// `inner` runs rank 0's plan devices; `control` connects the ranks (host buffers, rank 0 is local).
  /// `label` names the backend in tables ("CPU, 2 MPI ranks").
  LeaderSession(std::unique_ptr<rt::Session> inner, rt::comm::Communicator &control, std::string label);
  ~LeaderSession() override;

  /// Tells the followers the run is over (`ok`: rank 0's side succeeded). Once; later calls do nothing.
  /// Not after failedWhileRunning() (the followers may be inside a collective: end the job instead).
  Expected<void> finish(bool ok);
  /// True when a call failed after it was sent to the followers (see the file comment).
  bool failedWhileRunning() const { return failedWhileRunning_; }

  const char *backendName() const override { return label_.c_str(); }
  int threadsPerDevice() const override { return inner_->threadsPerDevice(); }
  std::vector<uint64_t> deviceBytes() const override { return inner_->deviceBytes(); }
  std::vector<float> tensorData(size_t device, int32_t id, int64_t tokens) const override {
    return inner_->tensorData(device, id, tokens);
  }
  std::vector<int> memoryOf() const override { return inner_->memoryOf(); }
  double copyBandwidth(int m) const override { return inner_->copyBandwidth(m); }
  double readBandwidth(int m) const override { return inner_->readBandwidth(m); }
  std::string memoryName(int m) const override { return inner_->memoryName(m); }
  int hostMemory() const override { return inner_->hostMemory(); }
  /// Empties the sequence here, in the wrapped session and on every follower.
  void clearSequence(int32_t seq) override;

protected:
  Expected<void> runChunk(const Chunk &c, float *logits) override;

private:
  std::unique_ptr<rt::Session> inner_;
  rt::comm::Communicator &control_;
  std::string label_;
  bool finished_ = false, failedWhileRunning_ = false;
  std::string controlError_; ///< a ClearSequence that did not reach the followers (the next call fails)
  std::vector<rt::StepProfile> seen_; ///< the inner profile already copied into this session's
};

/// How a follower's run ended.
enum class LeaderEnd { Finished, Failed };

/// A rank other than 0: runs every call rank 0 sends on `session` until rank 0 finishes. An error (a call
/// that failed here, a broken communicator) means the job must end.
Expected<LeaderEnd> follow(rt::Session &session, rt::comm::Communicator &control);

} // namespace tpc::cli

#endif // TPC_TOOLS_TPC_LOCKSTEP_H
