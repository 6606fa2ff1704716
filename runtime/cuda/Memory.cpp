//===- Memory.cpp - arenas, scratch and weight upload of the CUDA session ---===//
//
// Memory planning happened at compile time (the plan's arena sizes and offsets); this file turns it into
// allocations, in open's order:
//   sizeDevices     per logical device: weight arena (every slice re-aligned to 256 bytes so the K-quant
//                   kernels can use 16-byte loads), activations, KV (at --ctx-size per sequence, rings for
//                   sliding-window layers), scratch + I/O, the
//                   f16 weight cache, and the host-placed parts (host weights, pinned host activations,
//                   mapped pinned host KV), checked against --max-device-bytes
//   fitGpus         capacity per GPU (logical devices sharing one add up); the f16 cache only where
//                   everything fits with 1 GiB to spare
//   allocateDevice  one cudaMalloc per arena (GpuAlloc, freed on its GPU), stream, event, cuBLAS handle,
//                   the scratch carved into its parts, every tensor's address (exec::resolveTensors)
//   uploadWeights   slice by slice from the mmapped GGUF through two 64 MiB pinned staging buffers (the
//                   copy of one overlaps the packing of the other), host slices copied into host memory,
//                   then the f16 cache dequantized once on the GPU
//
// Scratch per device (one allocation with the I/O buffers): the f16 weight tile and f16 activations of
// the cuBLAS path, the expert routing lists of MUL_MAT_ID and the quantized x of the integer decode GEMV,
// each sized from the plan's steps at max_batch (scratchFor). scratchFor also sizes the staging buffer of
// the reduce-scatter / all-gather collectives, which the session's communicator allocates (Communicators.h)
// and the capacity check counts.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/SessionImpl.h"

#include "runtime/cuda/Matmul.cuh"
#include "runtime/support/Progress.h"

#include <fmt/core.h>

#include <cstring>

namespace tpc::rt::cuda {

using exec::KvBuffers;
using exec::TensorRef;

ScratchPlan CudaSession::scratchFor(size_t d) const {
  ScratchPlan sp;
  const int64_t t = plan().model.maxBatch;
  std::vector<TensorRef> in, out;
  // The f16 weight tile holds up to 16 Mi elements (32 MiB) of rows, at least 64 rows.
  constexpr int64_t kTileElems = int64_t(16) << 20;
  for (const Step &s : plan().devices[d].steps) {
    if (touchesHost(plan().devices[d], s))
      continue;
    exec::bindOperands(plan().devices[d], devs[d].ptr, s, t, maxRowsAt(t), in, out);
    if (s.op == OpKind::Matmul && t >= copts.cublasMinRows && in[0].inner() > 0) {
      const int64_t k = in[0].inner(), n = in[1].rows();
      const int64_t rows = std::min<int64_t>(n, std::max<int64_t>(64, kTileElems / k));
      sp.tileElems = std::max(sp.tileElems, rows * k);
      sp.xHalf = std::max<uint64_t>(sp.xHalf, uint64_t(in[0].numel()) * 2);
    } else if (s.op == OpKind::MulMatId) {
      // offsets, the pair list, the tile GEMM's tile table and its entry count (Dispatch.cpp)
      const int64_t e = in[1].shape[0], count = in[2].numel();
      sp.route = std::max<uint64_t>(sp.route, uint64_t(e + 1 + count + 2 * tileGemmMaxTiles(count, e) + 1) * 4);
      if (tileGemmSupports(typeOf(in[1]), in[0].inner())) // the tile GEMM's f16 activations
        sp.xHalf = std::max<uint64_t>(sp.xHalf, uint64_t(in[0].numel()) * 2);
    } else if (s.op == OpKind::ReduceScatter || s.op == OpKind::AllGather) {
      sp.stage = std::max<uint64_t>(sp.stage, uint64_t(in[0].numel()) * 4);
    }
    if (isCollective(s.op)) {
      uint64_t bytes = 0;
      for (const std::vector<TensorRef> *v : {&in, &out})
        for (const TensorRef &r : *v)
          bytes += uint64_t(r.numel()) * dtypeBytes(r.dtype);
      sp.hostStage = std::max(sp.hostStage, bytes);
    }
  }
  sp.wTile = uint64_t(sp.tileElems) * 2;
  // The integer GEMVs run for plain matmuls of up to kGemvBatchMax tokens, for mul_mat_id's per-pair form
  // (at most kPairGridMax pairs, so tokens) and for its routed GEMV (up to moeGemvMaxPairs pairs): their
  // x at that many tokens bounds the quantized copy.
  const DevicePlan &dp = plan().devices[d];
  for (const Step &s : dp.steps) {
    if ((s.op != OpKind::Matmul && s.op != OpKind::MulMatId) || touchesHost(dp, s))
      continue;
    int64_t tq = std::min<int64_t>(t, std::max(kPairGridMax, kGemvBatchMax));
    if (s.op == OpKind::MulMatId) {
      exec::bindOperands(dp, devs[d].ptr, s, 1, maxRowsAt(1), in, out);
      const int64_t slots = std::max<int64_t>(1, in[2].numel()); // pairs per token
      tq = std::clamp<int64_t>(moeGemvMaxPairs(in[1].shape[0]) / slots, tq, t);
    }
    exec::bindOperands(dp, devs[d].ptr, s, tq, maxRowsAt(tq), in, out);
    sp.xqElems = std::max(sp.xqElems, in[0].numel());
  }
  return sp;
}

std::string CudaSession::sizeDevices(const SessionOptions &opts, std::vector<DeviceSizes> &sizes) const {
  const Plan &p = plan();
  sizes.assign(p.devices.size(), DeviceSizes()); // by plan device; only the session's are sized
  // Tokens, positions, sequence ids and output rows of a call; its logits rows.
  const uint64_t io =
      alignUp(p.model.maxBatch * 4) * 4 + alignUp(maxRowsAt(p.model.maxBatch) * p.model.nVocab * 4);
  for (int d : devices()) {
    const DevicePlan &dp = p.devices[d];
    DeviceSizes &z = sizes[d];
    for (const WeightSlice &w : dp.weights) {
      uint64_t &arena = w.placement == Placement::Host ? z.hostWeights : z.weights;
      z.sliceOffset.push_back(arena);
      arena += alignUp(w.bytes);
    }
    z.acts = dp.activationBytes;
    z.hostActs = dp.hostActivationBytes; // the plan's host arena (v3 plans: as large as the device's)
    for (const KvCache &c : dp.kv) {
      // Every sequence's cells: the context, or a sliding-window layer's ring.
      const uint64_t cells = uint64_t(kvPositions(c, ctxSize(), p.model.maxBatch)) * maxSequences();
      (c.placement == Placement::Host ? z.hostKv : z.kv) += alignUp(cells * kvCellBytesK(c)) + alignUp(cells * kvCellBytesV(c));
    }
    z.sp = scratchFor(d);
    // f16 copies of the matmul weights the cuBLAS path reads (decided per GPU below).
    z.f16Offset.assign(dp.weights.size(), -1);
    if (copts.f16Cache && p.model.maxBatch >= copts.cublasMinRows)
      for (const Step &st : dp.steps) {
        if (st.op != OpKind::Matmul || touchesHost(dp, st))
          continue;
        const TensorDesc &wd = dp.tensors[st.inputs[1]];
        if (wd.storage != Storage::Weight || z.f16Offset[wd.index] >= 0)
          continue;
        const WeightSlice &ws = dp.weights[wd.index];
        int64_t elems = 1;
        for (int64_t v : ws.shape)
          elems *= v;
        z.f16Offset[wd.index] = static_cast<int64_t>(z.f16);
        z.f16 += alignUp(uint64_t(elems) * 2);
      }
    z.scratch = alignUp(z.sp.wTile) + alignUp(z.sp.xHalf) + alignUp(z.sp.route) + alignUp(z.sp.xqElems) +
                alignUp(z.sp.xqElems / 32 * kXQBlockBytes) + io;
    z.stage = alignUp(z.sp.stage); // the communicator's, allocated when it is made
    if (opts.maxDeviceBytes && z.total() > opts.maxDeviceBytes)
      return fmt::format("device {} needs {} bytes (weights {}, activations {}, KV {} for --ctx-size {} x {} "
                         "sequence(s), scratch {}) but has {}; use more devices or a smaller --ctx-size",
                         d, z.total(), z.weights, z.acts, z.kv, ctxSize(), maxSequences(), z.scratch + z.stage,
                         opts.maxDeviceBytes);
  }
  return "";
}

std::string CudaSession::fitGpus(const std::set<int> &used, std::vector<DeviceSizes> &sizes) const {
  for (int g : used) {
    uint64_t need = 0;
    for (int d : devices())
      if (devs[d].gpu == g)
        need += sizes[d].total();
    size_t freeB = 0, totalB = 0;
    TPC_CUDA_CHECK(cudaSetDevice(g));
    TPC_CUDA_CHECK(cudaMemGetInfo(&freeB, &totalB));
    // The f16 weight cache only where everything fits with 1 GiB to spare; otherwise tiles.
    uint64_t cache = 0;
    for (int d : devices())
      if (devs[d].gpu == g)
        cache += sizes[d].f16;
    if (cache && need + cache + (uint64_t(1) << 30) > freeB)
      for (int d : devices())
        if (devs[d].gpu == g) {
          sizes[d].f16 = 0;
          sizes[d].f16Offset.assign(sizes[d].f16Offset.size(), -1);
        }
    if (need + (uint64_t(256) << 20) > freeB) // leave room for cuBLAS workspaces and the CUDA context
      return fmt::format("GPU {} ({}) has {:.2f} GiB free but the plan's devices on it need {:.2f} GiB "
                         "for --ctx-size {}; use more GPUs or a smaller --ctx-size",
                         g, cudaDeviceName(g), freeB / double(1ull << 30), need / double(1ull << 30),
                         ctxSize());
  }
  return "";
}

void CudaSession::allocateDevice(size_t d, const DeviceSizes &z) {
  const Plan &p = plan();
  const DevicePlan &dp = p.devices[d];
  Device &dev = devs[d];
  TPC_CUDA_CHECK(cudaSetDevice(dev.gpu));
  TPC_CUDA_CHECK(cudaStreamCreateWithFlags(&dev.stream, cudaStreamNonBlocking));
  TPC_CUDA_CHECK(cudaEventCreateWithFlags(&dev.ev, cudaEventDisableTiming));
  TPC_CUBLAS_CHECK(cublasCreate(&dev.blas));
  TPC_CUBLAS_CHECK(cublasSetStream(dev.blas, dev.stream));
  auto alloc = [&](GpuAlloc &a, uint64_t bytes, const char *what) {
    cudaError_t e = a.allocate(dev.gpu, bytes);
    if (e != cudaSuccess)
      throw CudaError(fmt::format("device {} (GPU {}): cannot allocate {} bytes of {}: {}", d, dev.gpu, bytes,
                                  what, cudaGetErrorString(e)));
  };
  alloc(dev.weights, z.weights, "weights");
  auto hostAlloc = [&](HostAlloc &a, uint64_t bytes, unsigned flags, const char *what) {
    if (bytes == 0)
      return;
    cudaError_t e = cudaHostAlloc(&a.p, bytes, flags);
    if (e != cudaSuccess)
      throw CudaError(fmt::format("device {}: cannot allocate {} bytes of pinned host memory for the host-"
                                  "placed {}: {}",
                                  d, bytes, what, cudaGetErrorString(e)));
    std::memset(a.p, 0, bytes);
  };
  hostAlloc(dev.hostActs, z.hostActs, cudaHostAllocPortable, "activations");
  hostAlloc(dev.hostKv, z.hostKv, cudaHostAllocPortable | cudaHostAllocMapped, "KV cache");
  if (z.hostWeights)
    dev.hostWeights.reset(new uint8_t[z.hostWeights]);
  alloc(dev.acts, z.acts, "activations");
  alloc(dev.kvMem, z.kv, "KV cache");
  alloc(dev.scratch, z.scratch, "scratch");
  if (z.f16)
    alloc(dev.f16, z.f16, "f16 weight cache");
  dev.f16Of.assign(dp.weights.size(), nullptr);
  for (size_t w = 0; w < dp.weights.size(); ++w)
    if (z.f16Offset[w] >= 0)
      dev.f16Of[w] = dev.f16.p + z.f16Offset[w];
  TPC_CUDA_CHECK(cudaMemsetAsync(dev.acts.p, 0, std::max<uint64_t>(z.acts, 1), dev.stream));
  TPC_CUDA_CHECK(cudaMemsetAsync(dev.kvMem.p, 0, std::max<uint64_t>(z.kv, 1), dev.stream));
  dev.sliceOffset = z.sliceOffset;
  uint64_t at = 0, hostAt = 0;
  uint8_t *hostKv = nullptr; // the device's address of the mapped host caches (the same under UVA)
  if (dev.hostKv.p) {
    void *mapped = nullptr;
    TPC_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, dev.hostKv.p, 0));
    if (mapped != dev.hostKv.p)
      throw CudaError("--no-kv-offload needs unified addressing (host and device pointers equal)");
    hostKv = static_cast<uint8_t *>(mapped);
  }
  uint8_t *sc = dev.scratch.p;
  auto take = [&](uint64_t bytes) {
    uint8_t *r = sc;
    sc += alignUp(bytes);
    return r;
  };
  dev.seqs = reinterpret_cast<int32_t *>(take(p.model.maxBatch * 4));
  for (KvBuffers &b : dev.kv) {
    const bool host = b.desc.placement == Placement::Host;
    uint8_t *base = host ? hostKv : dev.kvMem.p;
    uint64_t &off = host ? hostAt : at;
    b.ctx = kvPositions(b.desc, ctxSize(), p.model.maxBatch);
    b.sequences = maxSequences();
    b.seq = dev.seqs; // the call's sequence ids, uploaded with the tokens
    const uint64_t cells = uint64_t(b.ctx) * uint64_t(b.sequences);
    b.k = base + off;
    off += alignUp(cells * kvCellBytesK(b.desc));
    b.v = base + off;
    off += alignUp(cells * kvCellBytesV(b.desc));
  }
  dev.wTile = z.sp.wTile ? take(z.sp.wTile) : nullptr;
  dev.tileElems = z.sp.tileElems;
  dev.xHalf = z.sp.xHalf ? take(z.sp.xHalf) : nullptr;
  dev.xHalfBytes = z.sp.xHalf;
  dev.route = z.sp.route ? reinterpret_cast<int32_t *>(take(z.sp.route)) : nullptr;
  dev.xqElems = z.sp.xqElems;
  dev.xq = reinterpret_cast<int8_t *>(take(z.sp.xqElems));
  dev.xs = reinterpret_cast<XQBlock *>(take(z.sp.xqElems / 32 * kXQBlockBytes));
  dev.tokens = reinterpret_cast<int32_t *>(take(p.model.maxBatch * 4));
  dev.positions = reinterpret_cast<int32_t *>(take(p.model.maxBatch * 4));
  dev.rows = reinterpret_cast<int32_t *>(take(p.model.maxBatch * 4));
  dev.logits = reinterpret_cast<float *>(take(maxRowsAt(p.model.maxBatch) * p.model.nVocab * 4));
  exec::StorageBases bases;
  bases.acts = dev.acts.p;
  bases.hostActs = static_cast<uint8_t *>(dev.hostActs.p);
  for (size_t w = 0; w < dp.weights.size(); ++w)
    bases.weights.push_back(
        (dp.weights[w].placement == Placement::Host ? dev.hostWeights.get() : dev.weights.p) +
        dev.sliceOffset[w]);
  bases.kv = &dev.kv;
  bases.tokens = dev.tokens;
  bases.positions = dev.positions;
  bases.rows = dev.rows;
  bases.logits = dev.logits;
  dev.ptr = exec::resolveTensors(dp, bases);
}

void CudaSession::uploadWeights(const exec::WeightSource &from) {
  const uint8_t *src = from.data;
  const Plan &p = plan();
  // Upload the weights slice by slice through two pinned staging buffers (copy of one overlaps the
  // packing of the other).
  constexpr uint64_t kStage = uint64_t(64) << 20;
  HostAlloc stage[2];
  cudaEvent_t staged[2] = {nullptr, nullptr};
  TPC_CUDA_CHECK(cudaMallocHost(&stage[0].p, kStage));
  TPC_CUDA_CHECK(cudaMallocHost(&stage[1].p, kStage));
  uint64_t totalBytes = 0, doneBytes = 0;
  for (int d : devices())
    for (const WeightSlice &w : p.devices[d].weights)
      totalBytes += w.bytes;
  // A bar on a terminal, plain lines otherwise, nothing under a second or with --no-progress (Progress.h).
  Progress shown("loading weights", totalBytes, "bytes", copts.progress);
  auto progress = [&](bool end) {
    shown.set(doneBytes);
    if (end)
      shown.finish();
  };
  for (int d : devices()) { // only the session's slices: a rank maps and reads its share of the GGUF
    Device &dev = devs[d];
    const DevicePlan &dp = p.devices[d];
    TPC_CUDA_CHECK(cudaSetDevice(dev.gpu));
    for (cudaEvent_t &e : staged) {
      if (e)
        cudaEventDestroy(e);
      e = nullptr;
      TPC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      TPC_CUDA_CHECK(cudaEventRecord(e, dev.stream));
    }
    int buf = 0;
    uint64_t fill = 0;
    uint8_t *dst = nullptr;
    auto flush = [&]() {
      if (fill == 0)
        return;
      TPC_CUDA_CHECK(cudaMemcpyAsync(dst, stage[buf].p, fill, cudaMemcpyHostToDevice, dev.stream));
      TPC_CUDA_CHECK(cudaEventRecord(staged[buf], dev.stream));
      dst += fill;
      doneBytes += fill;
      fill = 0;
      buf ^= 1;
      TPC_CUDA_CHECK(cudaEventSynchronize(staged[buf])); // the other buffer's copy is done
      progress(false);
    };
    for (size_t w = 0; w < dp.weights.size(); ++w) {
      flush();
      if (dp.weights[w].placement == Placement::Host) { // stays in host memory
        exec::copyWeightSlice(dp.weights[w], src, dev.hostWeights.get() + dev.sliceOffset[w]);
        exec::releaseCopiedPages(dp.weights[w], from);
        doneBytes += dp.weights[w].bytes;
        progress(false);
        continue;
      }
      dst = dev.weights.p + dev.sliceOffset[w];
      for (const WeightPiece &pc : dp.weights[w].pieces)
        for (uint64_t r = 0; r < pc.rows; ++r) {
          const uint8_t *row = src + pc.fileOffset + r * pc.rowStride;
          uint64_t left = pc.rowBytes;
          while (left > 0) {
            const uint64_t take = std::min(left, kStage - fill);
            std::memcpy(static_cast<uint8_t *>(stage[buf].p) + fill, row, take);
            fill += take;
            row += take;
            left -= take;
            if (fill == kStage)
              flush();
          }
        }
      exec::releaseCopiedPages(dp.weights[w], from); // staged: its file pages are read
    }
    flush();
    // The f16 cache, dequantized once from the uploaded slices.
    for (size_t w = 0; w < dp.weights.size(); ++w) {
      if (!dev.f16Of[w])
        continue;
      const WeightSlice &ws = dp.weights[w];
      const int64_t k = ws.shape.back();
      DequantArgs dq;
      dq.type = ws.type;
      dq.w = dev.weights.p + dev.sliceOffset[w];
      dq.rowBytes = ws.type == GGMLType::F32 ? k * 4 : *ggmlRowBytes(ws.type, static_cast<uint64_t>(k));
      dq.rows = k ? static_cast<int64_t>(ws.bytes / dq.rowBytes) : 0;
      dq.k = k;
      dq.out = dev.f16Of[w];
      launchDequantF16(dq, dev.stream);
    }
    TPC_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
  }
  for (cudaEvent_t e : staged)
    if (e)
      cudaEventDestroy(e);
  progress(true);
}

} // namespace tpc::rt::cuda
