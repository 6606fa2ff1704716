//===- Session.h - a loaded plan, whatever backend runs it --------*- C++ -*-===//
//
// What `tpc run` (and later `tpc serve` and a multi-process launcher) sees of a backend: a Session opened
// by a Backend (Backend.h) from a plan and SessionOptions. evaluate() is written once here: it checks the
// arguments, runs prompts longer than the plan's max_batch in chunks through the backend's runChunk(), and
// makes a failed session refuse further calls. Everything else a caller needs is virtual: memory per
// device, tensor read-back for tests and dumps, profiling, and what the decode roofline of
// `tpc run --bench` needs (which memory holds each device's weights and its copy bandwidth).
//
// A session runs some or all of the plan's devices (SessionOptions::devices). In one process it runs all
// of them and makes its own communicator; a multi-process launcher opens one device per rank and passes
// the communicator that connects the ranks (SessionOptions::comm), with no other change to this
// interface. Only the session that runs device 0 (which holds the logits) returns logits rows.
//
// Usage:
//   auto s = builtinBackends().open("cpu", std::move(plan), options);   // runtime/backends/Backends.h
//   if (!s) fail(s.message());
//   auto logits = (*s)->evaluate(tokens, positions);   // tokens.size() rows of n_vocab floats
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_SESSION_H
#define TPC_RUNTIME_EXEC_SESSION_H

#include "runtime/comm/Communicator.h"
#include "runtime/plan/PlanFormat.h"
#include "runtime/support/Expected.h"
#include "runtime/support/Timeline.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tpc::rt {

/// How to open a plan.
struct SessionOptions {
  int threads = 0;      ///< CPU worker threads in total, split across the devices (0: hardware concurrency)
  int64_t ctxSize = 0;  ///< KV cache positions (0: the plan's default context)
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
  /// Accelerators the plan's devices map to, round-robin (`tpc run --gpus`; empty: every visible one).
  /// Backends without such devices ignore it.
  std::vector<int> ordinals;
  bool progress = false; ///< a progress bar on stderr while weights load (backends that upload them)
  /// The float32 reference, for precision measurements (`--f32-reference`): matmuls over dequantized
  /// weights with f32 activations (no activation quantization) and f32 KV caches. CPU backend only; the
  /// others refuse to open with it.
  bool f32Reference = false;
  /// Host backends read a weight slice that is one contiguous run of the GGUF straight from the mapped
  /// file instead of copying it (`tpc run --no-mmap` turns this off: every slice is copied, and the
  /// session no longer depends on the file staying as it was).
  bool weightsInPlace = true;
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

  /// Runs tokens[i] at positions[i] (positions < ctxSize()) and returns tokens.size() rows of n_vocab
  /// logits, row-major (no rows when this session does not run device 0). Errors (bad token id, position
  /// past the context, size mismatch, a failure while running) are one line; after a failure while running
  /// every later call fails too.
  Expected<std::vector<float>> evaluate(const std::vector<int32_t> &tokens,
                                        const std::vector<int32_t> &positions);

  const Plan &plan() const { return plan_; }
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
  /// Bytes allocated per device this session runs (weights + activations + KV + logits rows + backend
  /// scratch). Weights a host backend reads in place from the mapped GGUF are not allocated: not counted.
  virtual std::vector<uint64_t> deviceBytes() const = 0;
  /// Tensor `id` of plan device `device` after the last evaluate() call with `tokens` tokens, as floats
  /// (i32 and f16 converted): for tests and debugging dumps. Empty when the device is not this session's,
  /// the id out of range, or a weight.
  virtual std::vector<float> tensorData(size_t device, int32_t id, int64_t tokens) const = 0;

  /// Turns per-step timing on (the steps of devices().front()) and returns what was measured so far.
  void setProfiling(bool on) { profiling_ = on; }
  std::vector<StepProfile> profile() const { return prof_; }

  // The decode roofline of `tpc run --bench`.
  /// The memory each plan device's weights live in (a GPU ordinal; 0 for the CPU's host memory), one entry
  /// per plan device, -1 for the devices this session does not run.
  virtual std::vector<int> memoryOf() const = 0;
  /// Copy bandwidth of memory `m` in bytes per second, read + write counted; 0 when unknown.
  virtual double copyBandwidth(int m) const = 0;
  /// "GPU 0", "host memory" (bench notes).
  virtual std::string memoryName(int m) const = 0;
  /// The memory of memoryOf() that host-placed weights live in, or -1 when it is none of them (a GPU
  /// backend: host memory is not measured, so host-placed reads are reported apart).
  virtual int hostMemory() const = 0;

protected:
  Session(Plan plan, int64_t ctx, std::vector<int> devices);
  /// Runs `t` <= max_batch tokens (tokens[i] at positions[i], checked) on every device of the session and
  /// writes their logits rows to `logits` (null when the session does not run device 0). An error makes
  /// the session unusable.
  virtual Expected<void> runChunk(const int32_t *tokens, const int32_t *positions, int64_t t,
                                  float *logits) = 0;
  bool profiling() const { return profiling_; }
  /// Adds one call of `seconds` to step `step` of devices().front() (when profiling).
  void recordStep(size_t step, double seconds);

private:
  const Plan plan_;
  const int64_t ctx_;
  const std::vector<int> devices_;
  bool profiling_ = false;
  std::vector<StepProfile> prof_;
  std::string failure_; ///< why a chunk failed; the session refuses every later call
};

} // namespace tpc::rt

#endif // TPC_RUNTIME_EXEC_SESSION_H
