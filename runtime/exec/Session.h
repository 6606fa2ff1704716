//===- Session.h - a loaded plan, whatever backend runs it --------*- C++ -*-===//
//
// What `tpc run`, `tpc serve` (and a multi-process launcher) see of a backend: a Session opened by a
// Backend (Backend.h) from a plan and SessionOptions. evaluate() is written once here: it checks the batch,
// runs it in chunks of at most the plan's max_batch tokens and max_output_rows logits rows through the
// backend's runChunk(), and makes a failed session refuse further calls. Everything else a caller needs is
// virtual: memory per device, tensor read-back for tests and dumps, profiling, and what the decode
// roofline of `tpc run --bench` needs (which memory holds each device's weights and its copy bandwidth).
//
// Sequences. A session holds SessionOptions::sequences independent sequences in one set of KV caches
// (each sequence ctxSize() positions; a sliding-window layer's cache a ring of window + max_batch). A
// batch mixes tokens of any sequences; each token attends to the positions 0..pos of its own sequence only
// (those of earlier calls and those before it in the batch). The rules evaluate() checks, each violation
// a one-line error and no state changed:
//   - 0 <= seq < maxSequences(), 0 <= pos < ctxSize(), 0 <= token < nVocab();
//   - a sequence's tokens in one batch have consecutive positions, in batch order;
//   - the first of them continues the sequence (pos == its length) or rewinds it (pos < length: the
//     positions from pos on are dropped), as long as the cache still holds what the token reads: a full
//     cache always does; a sliding-window ring of P positions per sequence has overwritten position q
//     once position q + P was written, so a rewind may go back at most P - window + 1 positions (except
//     to 0, which reads nothing). clearSequence(s) makes s empty: its next token is at position 0.
//   - a model with recurrent layers (Gated DeltaNet: a state per sequence that holds only the sequence's
//     end, runtime/plan's CacheKind::Recurrent) cannot step back inside that state, so the session keeps
//     each sequence's token ids and a rewind to 0 < pos < length recomputes the sequence from position 0
//     up to pos (its tokens prepended to the batch, no logits; SessionCounters::recomputed counts them)
//     before the batch runs: the same logits as a fresh sequence, at the cost of its prefix.
// Logits come back only for the tokens that ask for them (BatchToken::logits), in batch order. A plan
// compiled with output rows (schema v5) computes the output head for those rows only (at least one per
// chunk); an older plan computes every row and the session picks.
//
// A session runs some or all of the plan's devices (SessionOptions::devices). In one process it runs all
// of them and makes its own communicator; a multi-process launcher opens one device per rank and passes
// the communicator that connects the ranks (SessionOptions::comm), with no other change to this
// interface. Only the session that runs device 0 (which holds the logits) returns logits rows.
//
// Usage:
//   auto s = builtinBackends().open("cpu", std::move(plan), options);   // runtime/backends/Backends.h
//   if (!s) fail(s.message());
//   auto last = (*s)->evaluate({{tok, pos, seq, true}, ...});   // one n_vocab row per `true`
//   auto all = (*s)->evaluate(tokens, positions);              // sequence 0, one row per token
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_SESSION_H
#define TPC_RUNTIME_EXEC_SESSION_H

#include "runtime/comm/Communicator.h"
#include "runtime/exec/Tensor.h"
#include "runtime/plan/PlanFormat.h"
#include "runtime/support/Expected.h"
#include "runtime/support/Timeline.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tpc::rt {

/// The most sequences a session may hold.
inline constexpr int32_t kMaxSequences = 4096;

/// One token of a batch (see "Sequences" above).
struct BatchToken {
  int32_t token = 0;
  int32_t pos = 0;     ///< position inside its own sequence
  int32_t seq = 0;     ///< sequence id, 0 <= seq < maxSequences()
  bool logits = false; ///< return this token's logits row
};

/// What a session has run so far (tests, reports): calls of evaluate(), backend chunks, tokens, and the
/// logits rows the plan's output head computed (with output rows: the rows asked for, at least one per
/// chunk; without: every token).
struct SessionCounters {
  int64_t calls = 0, chunks = 0, tokens = 0, outputRows = 0;
  int64_t recomputed = 0; ///< tokens re-evaluated to rewind a recurrent state (see "Sequences")
};

/// How to open a plan.
struct SessionOptions {
  int threads = 0;      ///< CPU worker threads in total, split across the devices (0: hardware concurrency)
  int64_t ctxSize = 0;  ///< KV positions of each sequence (0: the plan's default context)
  /// Sequences the KV caches hold (each ctxSize positions; `tpc serve -np`).
  int32_t sequences = 1;
  std::string ggufPath; ///< overrides the plan's GGUF path
  /// Weights from memory instead of the GGUF file (tests): the bytes the pieces' file offsets index.
  const uint8_t *ggufData = nullptr;
  uint64_t ggufDataSize = 0;
  uint64_t maxDeviceBytes = 0; ///< capacity per device (0: no limit); opening fails naming the device
  /// The plan devices this session runs (empty: all of them). Only their weight slices, KV caches and
  /// arenas are loaded. A subset needs `comm`.
  std::vector<int> devices;
  /// The collectives between the plan's devices: its world is the plan's devices and it serves
  /// `devices`. Null: the backend makes its in-process one (every device in this process).
  std::shared_ptr<comm::Communicator> comm;
  /// The all-reduce payload on the wire instead of the plan's (`--comm-dtype` at run time; every rank of a
  /// job must pass the same). A backend whose communicator moves f32 only refuses bf16 at open.
  std::optional<CommDtype> commDtype;
  /// Accelerators the plan's devices map to, round-robin (`tpc run --gpus`; empty: every visible one).
  /// Backends without such devices ignore it.
  std::vector<int> ordinals;
  bool progress = false; ///< a progress bar on stderr while weights load (backends that upload them)
  /// The float32 reference, for precision measurements (`--f32-reference`): matmuls over dequantized
  /// weights with f32 activations (no activation quantization) and f32 KV caches. CPU backend only; the
  /// others refuse to open with it.
  bool f32Reference = false;
  /// f32 KV caches alone, every other step as usual (`--f32-kv`): an f16 cache rounds a 1e-7 relative
  /// difference of K/V into a whole f16 ulp now and then, so this isolates everything else (the N-vs-1
  /// fidelity check: docs/architecture.md, "Precision tools"). CPU backend only; the others refuse it.
  bool f32KvCache = false;
  /// Called after every step a device of the session runs (`index` into its plan's steps), on that
  /// device's thread (devices run concurrently), with the step's bound inputs and outputs (an input the
  /// step wrote in place holds its result by then): a read-only hook for debugging and profiling (`tpc
  /// run --profile-routing` counts the routed ids of mul_mat_id steps, `--dump-hidden` copies the residual
  /// stream). CPU backend only; the others refuse to open with it.
  std::function<void(int device, size_t index, const Step &step, const std::vector<exec::TensorRef> &inputs,
                     const std::vector<exec::TensorRef> &outputs)>
      stepObserver;
  /// Host backends read a weight slice that is one contiguous run of the GGUF straight from the mapped
  /// file instead of copying it (`tpc run --no-mmap` turns this off: every slice is copied, and the
  /// session no longer depends on the file staying as it was).
  bool weightsInPlace = true;
  /// The CPU backend puts the weights and KV caches on 2 MiB transparent huge pages where the kernel offers
  /// them (decode streams every weight per token; 4 KiB pages stop the prefetchers at every page). Weights
  /// are then copied (the page cache maps a file in 4 KiB pages), which takes precedence over
  /// weightsInPlace. `tpc run --no-huge-pages` turns this off.
  bool hugePages = true;
  /// Pipeline plans (Plan::stages > 1), all devices in this process: a call of several tokens runs as up
  /// to this many micro-batches, so that stage 1 works on micro-batch 1 while stage 0 works on micro-batch
  /// 2 (runtime/exec/MicroBatches.h). 0: one per stage; 1: none. CPU backend.
  int microBatches = 0;
  Timeline *timeline = nullptr; ///< open() marks its phases here (`tpc run --timings`) when set
};

/// Time spent per step, filled when profiling is on.
struct StepProfile {
  std::string name;
  OpKind op = OpKind::Copy;
  double seconds = 0;
  int64_t calls = 0;
};

/// A loaded, runnable plan. One caller at a time: evaluate() itself runs the devices in parallel.
class Session {
public:
  /// Opens `plan` on the built-in backend `backend` ("cpu", "cuda", "auto"): builtinBackends().open().
  /// Defined by runtime/backends (library tpc_runtime), which knows the backends; runtime/exec does not.
  static Expected<std::unique_ptr<Session>> open(Plan plan, const SessionOptions &opts,
                                                 const std::string &backend = "cpu");
  virtual ~Session();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  /// Evaluates `batch` (see "Sequences" above) and returns one row of n_vocab logits per token with
  /// `logits` set, in batch order, row-major (no rows when this session does not run device 0). Errors (a
  /// bad token id, sequence or position, a failure while running) are one line; after a failure while
  /// running every later call fails too.
  Expected<std::vector<float>> evaluate(const std::vector<BatchToken> &batch);
  /// The same into `out`, resized to the rows asked for: a caller that evaluates every step (tpc serve)
  /// keeps its capacity, so no n_vocab rows (4 MiB for 4 slots of a 262k vocabulary) are allocated and
  /// zeroed per step. On an error `out` is unspecified.
  Expected<void> evaluate(const std::vector<BatchToken> &batch, std::vector<float> &out);
  /// The all-rows path (logit dumps, perplexity, fidelity tests): tokens[i] at positions[i] of sequence 0,
  /// returning tokens.size() rows.
  Expected<std::vector<float>> evaluate(const std::vector<int32_t> &tokens,
                                        const std::vector<int32_t> &positions);
  /// "" when evaluate(batch) would accept `batch` (the rules of "Sequences"); else its error line. Nothing
  /// runs and nothing changes.
  std::string checkBatch(const std::vector<BatchToken> &batch) const;
  /// Empties sequence `seq` (its next token is at position 0); out-of-range ids are ignored. Virtual so a
  /// session that forwards its calls (a multi-process leader) can forward this one too.
  virtual void clearSequence(int32_t seq);
  /// Sequences the session holds (SessionOptions::sequences).
  int32_t maxSequences() const { return static_cast<int32_t>(lengths_.size()); }
  /// True when a rewind inside a sequence recomputes it from position 0 (a recurrent state: "Sequences").
  bool recomputesRewinds() const { return recurrent_; }
  /// Positions sequence `seq` holds (0 for an unknown id).
  int64_t sequenceLength(int32_t seq) const;
  const SessionCounters &counters() const { return counters_; }

  const Plan &plan() const { return plan_; }
  /// KV positions of each sequence.
  int64_t ctxSize() const { return ctx_; }
  int64_t nVocab() const { return plan_.model.nVocab; }
  /// The plan devices this session runs, ascending.
  const std::vector<int> &devices() const { return devices_; }
  /// True when this session runs plan device `d`.
  bool runsDevice(int d) const;

  /// "CPU", "CUDA" (bench tables).
  virtual const char *backendName() const = 0;
  /// CPU worker threads per device (0 on a GPU backend).
  virtual int threadsPerDevice() const = 0;
  /// The kernel level the session runs and how it was chosen, one line (CPU: "avx512vnni (calibrated:
  /// ...)", runtime/cpu/KernelChoice.h); empty where the backend chooses nothing.
  virtual std::string kernelChoice() const { return {}; }
  /// Bytes allocated per device this session runs (weights + activations + KV + logits rows + backend
  /// scratch). Weights a host backend reads in place from the mapped GGUF are not allocated: not counted.
  virtual std::vector<uint64_t> deviceBytes() const = 0;
  /// Tensor `id` of plan device `device` after the last chunk, whose token count the caller gives (a
  /// rows-dim tensor has the last chunk's rows), as floats (i32 and f16 converted): for tests and debugging
  /// dumps. Empty when the device is not this session's, the id out of range, or a weight.
  virtual std::vector<float> tensorData(size_t device, int32_t id, int64_t tokens) const = 0;

  /// Turns per-step timing on and returns what was measured so far on the session's `device`-th device
  /// (an index into devices(); 0 = devices().front()). The CPU backend times every device it runs (each
  /// device thread books its own steps, so a device waiting for another shows it in its collectives); the
  /// CUDA backend times the first device only, synchronising after each step (empty for the others).
  void setProfiling(bool on) { profiling_ = on; }
  std::vector<StepProfile> profile(size_t device = 0) const {
    return device < prof_.size() ? prof_[device] : std::vector<StepProfile>{};
  }

  // The decode roofline of `tpc run --bench`.
  /// The memory each plan device's weights live in (a GPU ordinal; 0 for the CPU's host memory), one entry
  /// per plan device, -1 for the devices this session does not run.
  virtual std::vector<int> memoryOf() const = 0;
  /// Copy bandwidth of memory `m` in bytes per second, read + write counted; 0 when unknown.
  virtual double copyBandwidth(int m) const = 0;
  /// Read bandwidth of memory `m` in bytes per second: a read-only stream over a buffer far past the caches
  /// by the run's threads (CPU) or every SM (GPU), which is what decode does with the weights (the roofline's
  /// denominator); 0 when unknown.
  virtual double readBandwidth(int m) const = 0;
  /// "GPU 0", "host memory" (bench notes).
  virtual std::string memoryName(int m) const = 0;
  /// The memory of memoryOf() that host-placed weights live in, or -1 when it is none of them (a GPU
  /// backend: host memory is not measured, so host-placed reads are reported apart).
  virtual int hostMemory() const = 0;

protected:
  Session(Plan plan, int64_t ctx, int32_t sequences, std::vector<int> devices);

  /// One call of the backend: t <= max_batch tokens (checked), token i of sequence seqs[i] at positions[i],
  /// and the r output rows the plan computes (indices into the chunk, ascending; with a plan without the
  /// rows input every token, r == t).
  struct Chunk {
    const int32_t *tokens = nullptr, *positions = nullptr, *seqs = nullptr;
    int64_t t = 0;
    const int32_t *rows = nullptr;
    int64_t r = 0;
  };
  /// Runs `c` on every device of the session and writes the plan's logits rows (r rows, or t for a plan
  /// without the rows input) to `logits` (null when the session does not run device 0). An error makes the
  /// session unusable.
  virtual Expected<void> runChunk(const Chunk &c, float *logits) = 0;
  /// Rows of the last chunk (what a rows-dim tensor holds for tensorData).
  int64_t lastRows() const { return lastRows_; }
  bool profiling() const { return profiling_; }
  /// Adds one call of `seconds` to step `step` of the session's `device`-th device (when profiling). Each
  /// device's record is its own: device threads may book at the same time.
  void recordStep(size_t step, double seconds, size_t device = 0);

private:
  const Plan plan_;
  const int64_t ctx_;
  const std::vector<int> devices_;
  const bool rowsInput_;          ///< the plan has InputOutputRows (else every row is computed)
  std::vector<int64_t> lengths_;  ///< positions held per sequence
  /// (window, positions per sequence) of the sliding-window rings shorter than the context: what limits
  /// a rewind (see "Sequences").
  std::vector<std::pair<int64_t, int64_t>> rings_;
  /// The plan has recurrent caches: each sequence's token ids are kept (history_) to recompute a rewind.
  const bool recurrent_;
  std::vector<std::vector<int32_t>> history_;
  int64_t lastRows_ = 0;
  SessionCounters counters_;
  bool profiling_ = false;
  std::vector<std::vector<StepProfile>> prof_; ///< [index into devices_][step]
  std::string failure_; ///< why a chunk failed; the session refuses every later call
};

} // namespace tpc::rt

#endif // TPC_RUNTIME_EXEC_SESSION_H
