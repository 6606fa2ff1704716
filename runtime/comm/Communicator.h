//===- Communicator.h - the collectives between a plan's devices --*- C++ -*-===//
//
// One interface for every way the devices of a plan exchange data. The world is the plan's devices: rank r
// is plan device r, size() is the device count. A Communicator object serves the ranks this process drives
// (localRanks()); implementations:
//   - InProcessCommunicator (this folder): every rank in one process, host memory, device threads meeting
//     in shared memory (the CPU backend);
//   - the CUDA backend's loopback and ncclCommInitAll communicators (runtime/cuda/Communicators.h: one host
//     thread drives all local devices, one call carries every local rank, like an ncclGroupStart/End
//     bracket; device buffers, stream-ordered);
//   - next, not built yet: MPI (one rank per process, host buffers; runtime/comm, MPI only) and NCCL
//     bootstrapped over MPI (one rank per process, device buffers, stream-ordered). Those that launch
//     kernels live with their backend (runtime/cuda); runtime/comm includes no backend.
//
// Calling conventions:
//   - Who calls: every rank takes part in every collective, in the same order (the k-th call of rank r
//     meets the k-th call of every other rank). A call lists one entry per local rank it covers; the local
//     ranks may be covered by several calls from different threads (the CPU backend: one thread per
//     device) or by one call from one thread (a GPU backend driving all its devices). Each local rank is
//     in exactly one call per collective. InProcessCommunicator accepts both; an implementation that needs
//     all local ranks in one call (a loopback kernel) says so and refuses partial calls with an error.
//   - Buffers: host memory when streamOrdered() is false; device memory of the rank's device when true.
//     Sizes must agree across ranks (all-reduce: equal counts per bucket entry; gather/scatter: the
//     AxisParts every rank passes are the same).
//   - Completion: not streamOrdered(): the call blocks until this call's ranks' buffers hold the result and
//     no peer reads them any more. streamOrdered(): the call enqueues the work on each entry's `stream`
//     (an opaque queue handle, e.g. cudaStream_t), ordered after what was enqueued before, and returns.
//   - Summation order: InProcessCommunicator adds the ranks' addends in rank order (x0 + x1 + ...), so its
//     sums are reproducible and independent of timing; other implementations state theirs (NCCL's ring
//     order differs; results then differ in the last bits from the in-process ones).
//   - Payload: all-reduce sums cross the wire as f32 (the default) or as bf16 (setPayload(Payload::BF16):
//     addends and sum rounded to bf16, summed in f32 in rank order; Bf16Wire.h has the exact rule). Set
//     once, the same on every rank, before the first collective; reduce-scatter sums stay f32. An
//     implementation that moves f32 only says so through supportsPayload.
//   - Errors: a failed or aborted call returns an error (one line); the buffers then hold garbage. After
//     abort() every waiting and later call returns at once with an error, on every rank of the process.
//
// Usage (one rank per thread):
//   comm::InProcessCommunicator comm(2);
//   // on the thread of rank r:
//   if (auto ok = comm.allReduce(r, {{x, n}, {y, m}}); !ok) fail(ok.message());   // a bucket of 2 tensors
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_COMM_COMMUNICATOR_H
#define TPC_RUNTIME_COMM_COMMUNICATOR_H

#include "runtime/support/Expected.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tpc::rt::comm {

/// Element types a communicator moves. Sums are defined for F32; gathers, scatters of sums and broadcasts
/// move bytes, so broadcast and all-gather take any type.
enum class ElemType : uint8_t { F32 = 0, F16 = 1, I32 = 2 };
/// Bytes of one element.
size_t elemBytes(ElemType t);
/// "f32", "f16", "i32".
const char *elemTypeName(ElemType t);

/// How an all-reduce's f32 addends and sums cross the wire (the plan's --comm-dtype).
enum class Payload : uint8_t { F32 = 0, BF16 = 1 };
/// "f32", "bf16".
const char *payloadName(Payload p);

/// `count` elements at `data`.
struct Buffer {
  void *data = nullptr;
  int64_t count = 0;
};

/// How a tensor divides between the ranks along one axis: the whole is [outer, Σ parts, inner] (row-major)
/// and rank r's part is [outer, parts[r], inner]. Parts may differ and may be 0 (a device's empty share).
struct AxisParts {
  int64_t outer = 1, inner = 1;
  std::vector<int64_t> parts; ///< one per rank of the world
  /// Σ parts.
  int64_t total() const;
  /// Offset of rank r's part along the axis (Σ parts[0..r)).
  int64_t offset(int rank) const;
};

/// One local rank's entry of an all-reduce: the bucket's tensors, summed over the ranks in place.
struct AllReduceEntry {
  int rank = 0;
  std::vector<Buffer> bucket; ///< bucket[i] has the same count on every rank
  void *stream = nullptr;     ///< streamOrdered(): the queue the sum is ordered on
};
/// One local rank's entry of an all-gather: `whole` (on every rank) = the ranks' `part`s concatenated.
/// Where the communicator's wholeOptional(), a rank that needs no whole passes whole.data null (its count
/// still the layout's): it contributes its part only.
struct AllGatherEntry {
  int rank = 0;
  Buffer part, whole; ///< part: [outer, parts[rank], inner]; whole: [outer, total, inner]; no overlap
  void *stream = nullptr;
};
/// One local rank's entry of a reduce-scatter: `part` = this rank's part of the sum of the ranks' `whole`s.
struct ReduceScatterEntry {
  int rank = 0;
  Buffer whole, part; ///< part must not overlap any rank's whole (peers read them while parts are written)
  void *stream = nullptr;
};
/// One local rank's entry of a broadcast: `buf` gets the root's `buf` (the root's is read).
struct BroadcastEntry {
  int rank = 0;
  Buffer buf;
  void *stream = nullptr;
};

/// The collectives between a plan's devices (see the file comment for the calling conventions).
class Communicator {
public:
  virtual ~Communicator() = default;

  /// "in-process", "mpi", "nccl", ... (errors and logs).
  virtual const char *name() const = 0;
  /// Ranks in the world (the plan's device count).
  virtual int size() const = 0;
  /// The ranks this object may be called for, ascending.
  virtual std::vector<int> localRanks() const = 0;
  /// True when calls are enqueued on the entries' streams (device buffers) and return before the data
  /// moves; false when they block until done (host buffers).
  virtual bool streamOrdered() const = 0;
  /// True when an all-gather entry may pass a null whole (AllGatherEntry).
  virtual bool wholeOptional() const { return false; }

  /// True when allReduce can move its payload as `p` (every implementation moves f32).
  virtual bool supportsPayload(Payload p) const { return p == Payload::F32; }
  /// The all-reduce payload from now on (see the file comment); a session sets it at open, before any
  /// collective, after checking supportsPayload. Virtual: a communicator of communicators (the pipeline
  /// stages') passes it on.
  virtual void setPayload(Payload p) { payload_ = p; }
  Payload payload() const { return payload_; }

  /// Sums each bucket tensor over the ranks in place (a bucket of several tensors is one collective).
  virtual Expected<void> allReduce(const std::vector<AllReduceEntry> &local,
                                   ElemType type = ElemType::F32) = 0;
  /// Concatenates the ranks' parts along the axis `layout` describes into every rank's whole.
  virtual Expected<void> allGather(const std::vector<AllGatherEntry> &local, const AxisParts &layout,
                                   ElemType type = ElemType::F32) = 0;
  /// Sums the ranks' wholes and leaves rank r's part (along the axis `layout` describes) in its `part`.
  virtual Expected<void> reduceScatter(const std::vector<ReduceScatterEntry> &local, const AxisParts &layout,
                                       ElemType type = ElemType::F32) = 0;
  /// Copies the root rank's buffer into every rank's (e.g. the sampled token of a multi-process run).
  virtual Expected<void> broadcast(const std::vector<BroadcastEntry> &local, int root,
                                   ElemType type = ElemType::F32) = 0;
  /// Returns when every rank has arrived (the entries are the local ranks this call covers).
  virtual Expected<void> barrier(const std::vector<int> &ranks) = 0;
  /// Point to point between the pipeline stages of a plan (Plan::stages): local rank `rank` sends `buf` to
  /// rank `peer` / receives rank `peer`'s into `buf`. The k-th send of a to b meets the k-th receive of b
  /// from a, with the same count. A send returns once `buf` may be reused, a receive once `buf` holds the
  /// data. Default: an error (the communicators of one-stage plans need none).
  virtual Expected<void> send(int rank, int peer, Buffer buf, ElemType type = ElemType::F32);
  /// True when send() returns without waiting for the receiver (the bytes are copied): a pipeline's stage
  /// may then run ahead by several messages (micro-batches).
  virtual bool buffersSends() const { return false; }
  virtual Expected<void> recv(int rank, int peer, Buffer buf, ElemType type = ElemType::F32);
  /// Fails every waiting and later call of every local rank with `reason` (a device that failed calls this
  /// so that its peers do not wait for it forever). Idempotent.
  virtual void abort(const std::string &reason) = 0;
  /// True after abort().
  virtual bool aborted() const = 0;

  // One-rank forms, for callers that drive one rank per thread.
  Expected<void> allReduce(int rank, std::vector<Buffer> bucket, void *stream = nullptr) {
    return allReduce({AllReduceEntry{rank, std::move(bucket), stream}});
  }
  Expected<void> allGather(int rank, Buffer part, Buffer whole, const AxisParts &layout,
                           void *stream = nullptr) {
    return allGather({AllGatherEntry{rank, part, whole, stream}}, layout);
  }
  Expected<void> reduceScatter(int rank, Buffer whole, Buffer part, const AxisParts &layout,
                               void *stream = nullptr) {
    return reduceScatter({ReduceScatterEntry{rank, whole, part, stream}}, layout);
  }
  Expected<void> broadcast(int rank, Buffer buf, int root, ElemType type, void *stream = nullptr) {
    return broadcast({BroadcastEntry{rank, buf, stream}}, root, type);
  }
  Expected<void> barrier(int rank) { return barrier(std::vector<int>{rank}); }

protected:
  Payload payload_ = Payload::F32;
};

} // namespace tpc::rt::comm

#endif // TPC_RUNTIME_COMM_COMMUNICATOR_H
