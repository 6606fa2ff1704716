//===- Session.cpp - open, runChunk and the accessors of the CUDA session ---===//
//
// openCudaSession() runs exec::prepareOpen (the checks every backend makes, in the same order), refuses
// what this backend cannot run (a communicator that takes host buffers), makes the checks only the GPU
// kernels need (on shapes, before any GPU work), maps the session's plan devices to GPUs, then init() runs
// the setup phases of Memory.cpp in order: sizes, capacity per GPU, allocation and address resolution per
// device, weight upload; the communicator last. A CudaError thrown by any phase becomes open's one-line
// error. The multi-process seam as in the CPU session: a session of a subset (one rank of `mpirun`, with
// SessionOptions::comm) sizes, allocates and loads only its devices; `devs` keeps one entry per plan
// device so the step code indexes by plan device, and the other entries stay empty.
//
// runChunk() uploads tokens, positions, sequence ids and output rows on every device's stream, runs the
// chunk (Graphs.cpp: replayed graph or Dispatch.cpp's step loop) and copies device 0's logits rows back. The evaluate loop around it (chunks,
// argument checks, the failure latch) is rt::Session's.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/SessionImpl.h"

#include "runtime/cuda/Collective.cuh"
#include "runtime/cuda/Communicators.h"
#include "runtime/cuda/DeltaNet.cuh"
#include "runtime/cuda/Elementwise.cuh"
#include "runtime/exec/StepChecks.h"
#include "runtime/cuda/RankCommunicators.h"
#include "runtime/ggml/Blocks.h"
#include "runtime/plan/StepParams.h"

#include <fmt/core.h>

#include <cstring>

namespace tpc::rt::cuda {

using exec::KvBuffers;
using exec::TensorRef;

namespace {

bool isWeightOperand(const Step &s, size_t i) {
  return (s.op == OpKind::Matmul || s.op == OpKind::MulMatId) ? i == 1 : (s.op == OpKind::GetRows && i == 0);
}

/// What the CPU backend runs but these kernels do not, for every step of every device at `t` tokens (on
/// shapes only: exec::checkStep passed); "" when fine, else one line naming the step.
std::string checkGpuSteps(const Plan &plan, int64_t t, int64_t rows) {
  std::vector<TensorRef> in, out;
  for (size_t d = 0; d < plan.devices.size(); ++d) {
    const DevicePlan &dp = plan.devices[d];
    for (size_t si = 0; si < dp.steps.size(); ++si) {
      const Step &s = dp.steps[si];
      exec::bindOperands(dp, {}, s, t, rows, in, out);
      auto err = [&](const std::string &e) {
        return fmt::format("device {} step {} '{}' ({} tokens): {}", d, si, s.name, t, e);
      };
      if (touchesHost(dp, s)) { // the CPU kernels run it, or a copy across
        if (s.op == OpKind::Copy && in[0].dtype != out[0].dtype)
          return err("a copy between host and device must keep its dtype; recompile the plan");
        continue;
      }
      for (size_t i = 0; i < in.size(); ++i)
        if (isWeightOperand(s, i) && in[i].isWeight && !cudaSupportsType(in[i].wtype))
          return err(
              fmt::format("weight '{}' is {}, which the CUDA backend does not read (it reads f32, f16, "
                          "bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K..q6_K, iq4_nl, iq4_xs, mxfp4); use "
                          "--backend cpu",
                          dp.weights[dp.tensors[s.inputs[i]].index].name, ggmlTypeName(in[i].wtype)));
      if ((s.op == OpKind::Add || s.op == OpKind::Mul || s.op == OpKind::Div || s.op == OpKind::Permute) &&
          in[0].shape.size() > size_t(kMaxRank))
        return err("more than 8 dims");
      if (s.op == OpKind::ExpertCombine && in.size() > 5)
        return err("more than 4 multipliers");
      if (s.op == OpKind::Attention && (in[0].shape[2] > 256 || in[2].shape[2] > 256))
        return err("head dims above 256 are not supported by the CUDA attention kernel");
      if (s.op == OpKind::MulMatId && in[1].shape[0] > 8192)
        return err("more than 8192 experts");
      if (s.op == OpKind::SsmConv && (in[1].inner() > kMaxConvWidth || typeOf(in[1]) != GGMLType::F32))
        return err("the CUDA ssm_conv kernel takes f32 conv weights of width up to 9");
      if (s.op == OpKind::DeltaNet && in[0].inner() > kMaxDeltaKeyDim)
        return err("key head dims above 256 are not supported by the CUDA delta_net kernel");
      if (s.op == OpKind::GatedRmsNorm && typeOf(in[1]) != GGMLType::F32)
        return err("the CUDA gated_rms_norm kernel takes an f32 weight");
    }
  }
  return "";
}

} // namespace

int cudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string cudaDeviceName(int gpu) {
  cudaDeviceProp p{};
  cudaError_t e = cudaGetDeviceProperties(&p, gpu);
  if (e != cudaSuccess)
    return cudaGetErrorString(e);
  return fmt::format("{}, {:.1f} GiB, sm_{}{}", p.name, p.totalGlobalMem / double(1ull << 30), p.major,
                     p.minor);
}

CudaSession::CudaSession(Plan plan, int64_t ctx, int32_t sequences, std::vector<int> devices,
                         const CudaOptions &co)
    : Session(std::move(plan), ctx, sequences, std::move(devices)), copts(co) {}

CudaSession::~CudaSession() {
  collectives.reset(); // before the communicator and the streams its calls name
  for (auto &[shape, exec] : graphs)
    cudaGraphExecDestroy(exec);
  for (int i : devices()) {
    Device &d = devs[i];
    cudaSetDevice(d.gpu);
    if (d.blas)
      cublasDestroy(d.blas);
    if (d.ev)
      cudaEventDestroy(d.ev);
    if (d.stream)
      cudaStreamDestroy(d.stream);
  }
}

/// Marks device d's host-side steps and the steps whose fusion lookahead would reach one.
void CudaSession::markHostSteps(size_t d) {
  const DevicePlan &dp = plan().devices[d];
  Device &dev = devs[d];
  dev.hostStep.assign(dp.steps.size(), 0);
  dev.hostNear.assign(dp.steps.size(), 0);
  for (size_t i = 0; i < dp.steps.size(); ++i)
    if ((dev.hostStep[i] = touchesHost(dp, dp.steps[i])))
      for (size_t j = i >= kFuseReach - 1 ? i - (kFuseReach - 1) : 0; j <= i; ++j)
        dev.hostNear[j] = 1;
}

/// SessionOptions::comm when given (open checked that it is stream-ordered; a rank communicator's
/// staging memory is allocated now, not on the first collective), else the session's own: the loopback
/// kernel when every device sits on one GPU, NCCL over distinct GPUs.
Expected<void> CudaSession::makeCommunicator(const SessionOptions &opts,
                                             const std::vector<DeviceSizes> &sizes) {
  if (opts.comm) {
    communicator = opts.comm;
    for (int d : devices())
      if (Expected<void> ok = reserveRankStaging(*communicator, sizes[d].stage, sizes[d].sp.hostStage); !ok)
        return ok;
    return {};
  }
  std::vector<uint64_t> stage;
  std::vector<int> gpus;
  for (size_t d = 0; d < devs.size(); ++d) {
    stage.push_back(sizes[d].stage);
    gpus.push_back(devs[d].gpu);
  }
  auto c = loopback ? makeLoopbackCommunicator(gpus[0], static_cast<int>(gpus.size()), stage)
                    : makeNcclCommunicator(gpus, stage);
  if (!c)
    return Error{c.message()};
  communicator = std::shared_ptr<comm::Communicator>(c.take());
  ownComm = true;
  for (size_t d = 0; d < devs.size(); ++d)
    devs[d].stageBytes = stage[d];
  return {};
}

Expected<void> CudaSession::init(const exec::OpenPlan &o, const SessionOptions &opts, const Backend &hostCpu,
                                 const std::vector<int> &gpuOfDevice) {
  const Plan &p = plan();
  devs.resize(p.devices.size()); // by plan device; only the session's are set up
  std::set<int> used;
  for (int d : devices()) {
    devs[d].gpu = gpuOfDevice[d];
    used.insert(devs[d].gpu);
    for (const KvCache &c : p.devices[d].kv) {
      KvBuffers b; // placed by allocateDevice
      b.desc = c;
      devs[d].kv.push_back(b);
    }
  }
  loopback = used.size() == 1;
  try {
    // Sizes per logical device, then capacity per GPU (several logical devices may share one).
    std::vector<DeviceSizes> sizes;
    if (std::string e = sizeDevices(opts, sizes); !e.empty())
      return Error{e};
    if (std::string e = fitGpus(used, sizes); !e.empty())
      return Error{e};
    // Allocate, resolve addresses, create streams and handles.
    bool hostSteps = false;
    for (int d : devices()) {
      allocateDevice(d, sizes[d]);
      markHostSteps(d);
      hostSteps = hostSteps || std::count(devs[d].hostStep.begin(), devs[d].hostStep.end(), 1) > 0;
    }
    if (hostSteps && !(hostRunner = hostCpu.hostStepRunner(opts.threads))) // --threads, else all cores
      return Error{fmt::format("the plan places steps on the host, but the {} backend cannot run them",
                               hostCpu.name())};
    logitsTensor = exec::logitsTensorOf(p.devices[0]);
    uploadWeights(o.weights);
    if (Expected<void> ok = makeCommunicator(opts, sizes); !ok)
      return ok;
    // Tokens, positions, sequence ids, output rows; the logits rows.
    const uint64_t hostBytes = p.model.maxBatch * 16 + maxRowsAt(p.model.maxBatch) * p.model.nVocab * 4;
    TPC_CUDA_CHECK(cudaMallocHost(&hostIo.p, hostBytes));
    for (Device &dev : devs) { // host steps read the sequence ids from host memory
      dev.kvHost = dev.kv;
      for (KvBuffers &b : dev.kvHost)
        b.seq = static_cast<int32_t *>(hostIo.p) + 2 * p.model.maxBatch;
    }
  } catch (const CudaError &e) {
    return Error{e.what()};
  }
  // bf16 all-reduce payloads: the loopback and host-staged MPI communicators take them; NCCL's is refused
  // here, by name.
  if (Expected<void> ok = exec::setCommPayload(p, opts, *communicator); !ok)
    return ok;
  kernels = std::make_unique<Kernels>(*this);
  collectives = std::make_unique<exec::CollectiveRunner>(p, *communicator, *kernels);
  return {};
}

Expected<std::unique_ptr<Session>> openCudaSession(Plan plan, const SessionOptions &opts,
                                                   const CudaOptions &co, const Backend &hostCpu) {
  using E = Expected<std::unique_ptr<Session>>;
  auto o = exec::prepareOpen(plan, opts);
  if (!o)
    return Error{o.message()};
  const size_t n = o->devices.size(); // the session's devices (prepareOpen: a subset has a communicator)
  if (opts.f32Reference)
    return Error{"the float32 reference (--f32-reference) runs on the CPU backend only; use --backend cpu"};
  if (opts.f32KvCache)
    return Error{"f32 KV caches (--f32-kv) run on the CPU backend only; use --backend cpu"};
  if (opts.stepObserver)
    return Error{"a step observer (e.g. --profile-routing) runs on the CPU backend only; use --backend cpu"};
  if (opts.comm && !opts.comm->streamOrdered())
    return Error{
        fmt::format("the {} communicator takes host buffers; the CUDA backend needs a stream-ordered "
                    "one (or none: it makes its own)",
                    opts.comm->name())};
  for (auto [t, rows] : exec::checkedCallSizes(plan))
    if (std::string e = checkGpuSteps(plan, t, rows); !e.empty())
      return Error{"plan does not fit its ops: " + e};

  // GPUs: logical device d on gpus[d % count] (a rank's --gpus is its one GPU).
  const int visible = cudaDeviceCount();
  if (visible == 0)
    return Error{"no CUDA GPU is visible (check the driver and CUDA_VISIBLE_DEVICES); use --backend cpu"};
  std::vector<int> gpus = co.gpus;
  if (gpus.empty())
    for (int g = 0; g < visible; ++g)
      gpus.push_back(g);
  for (int g : gpus)
    if (g < 0 || g >= visible)
      return Error{fmt::format("--gpus: GPU {} does not exist ({} visible)", g, visible)};
  std::vector<int> gpuOf;
  std::set<int> used;
  for (size_t d = 0; d < plan.devices.size(); ++d)
    gpuOf.push_back(gpus[d % gpus.size()]);
  for (int d : o->devices)
    used.insert(gpuOf[d]);
  if (used.size() != 1 && used.size() != n)
    return Error{fmt::format("the plan's {} devices would share {} GPUs unevenly; give --gpus either one GPU "
                             "(loopback collectives) or {} distinct GPUs (NCCL)",
                             n, used.size(), n)};
  if (used.size() == 1 && n > size_t(kMaxLoopback))
    return Error{fmt::format("{} logical devices on one GPU; at most {} are supported", n, kMaxLoopback)};

  const int64_t ctx = o->ctx;
  std::vector<int> devices = o->devices;
  auto s = std::make_unique<CudaSession>(std::move(plan), ctx, o->sequences, std::move(devices), co);
  if (Expected<void> ok = s->init(*o, opts, hostCpu, gpuOf); !ok)
    return Error{ok.message()};
  return E(std::unique_ptr<Session>(std::move(s)));
}

Expected<void> CudaSession::runChunk(const Chunk &c, float *logits) {
  const Plan &p = plan();
  const int64_t t = c.t, mb = p.model.maxBatch;
  int32_t *hTok = static_cast<int32_t *>(hostIo.p), *hPos = hTok + mb, *hSeq = hPos + mb, *hRows = hSeq + mb;
  float *hLogits = reinterpret_cast<float *>(hRows + mb);
  try {
    std::copy(c.tokens, c.tokens + t, hTok);
    std::copy(c.positions, c.positions + t, hPos);
    std::copy(c.seqs, c.seqs + t, hSeq);
    std::copy(c.rows, c.rows + c.r, hRows);
    rows_ = c.r;
    for (int d : devices()) {
      Device &dev = devs[d];
      TPC_CUDA_CHECK(cudaSetDevice(dev.gpu));
      TPC_CUDA_CHECK(cudaMemcpyAsync(dev.tokens, hTok, t * 4, cudaMemcpyHostToDevice, dev.stream));
      TPC_CUDA_CHECK(cudaMemcpyAsync(dev.positions, hPos, t * 4, cudaMemcpyHostToDevice, dev.stream));
      TPC_CUDA_CHECK(cudaMemcpyAsync(dev.seqs, hSeq, t * 4, cudaMemcpyHostToDevice, dev.stream));
      TPC_CUDA_CHECK(cudaMemcpyAsync(dev.rows, hRows, c.r * 4, cudaMemcpyHostToDevice, dev.stream));
    }
    if (Expected<void> ok = launchChunk(t); !ok)
      return ok;
    Device &d0 = devs[0];
    // The plan's logits: the rows asked for, or one per token in a plan without the rows input.
    const uint64_t bytes = logits ? uint64_t(bind(0, logitsTensor, t).numel()) * 4 : 0;
    if (logits) { // only a session running device 0 is asked for them
      TPC_CUDA_CHECK(cudaSetDevice(d0.gpu));
      TPC_CUDA_CHECK(cudaMemcpyAsync(hLogits, d0.ptr[logitsTensor], bytes, cudaMemcpyDeviceToHost, d0.stream));
    }
    for (int d : devices()) {
      TPC_CUDA_CHECK(cudaSetDevice(devs[d].gpu));
      TPC_CUDA_CHECK(cudaStreamSynchronize(devs[d].stream));
    }
    if (logits)
      std::memcpy(logits, hLogits, bytes);
  } catch (const CudaError &e) {
    return Error{e.what()};
  }
  return {};
}

std::vector<uint64_t> CudaSession::deviceBytes() const {
  std::vector<uint64_t> out; // the session's devices, as the CPU session's
  for (int i : devices()) {
    const Device &d = devs[i];
    out.push_back(d.weights.size + d.acts.size + d.kvMem.size + d.scratch.size + d.f16.size + d.stageBytes);
  }
  return out;
}

std::vector<int> CudaSession::memoryOf() const {
  std::vector<int> out(devs.size(), -1);
  for (int d : devices())
    out[d] = devs[d].gpu;
  return out;
}

std::string CudaSession::memoryName(int gpu) const { return fmt::format("GPU {}", gpu); }

std::vector<float> CudaSession::tensorData(size_t device, int32_t id, int64_t tokens) const {
  if (device >= devs.size() || id < 0 || static_cast<size_t>(id) >= devs[device].ptr.size() ||
      plan().devices[device].tensors[id].storage == Storage::Weight)
    return {};
  TensorRef r = exec::bindTensor(plan().devices[device], devs[device].ptr, id, tokens, lastRows());
  const size_t n = static_cast<size_t>(r.numel()), es = dtypeBytes(r.dtype);
  std::vector<uint8_t> raw(n * es);
  cudaSetDevice(devs[device].gpu);
  if (n && cudaMemcpy(raw.data(), r.data, raw.size(), cudaMemcpyDefault) != cudaSuccess) // host or device
    return {};
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (r.dtype == DType::F32)
      std::memcpy(&out[i], &raw[i * 4], 4);
    else if (r.dtype == DType::I32) {
      int32_t v;
      std::memcpy(&v, &raw[i * 4], 4);
      out[i] = static_cast<float>(v);
    } else {
      uint16_t h;
      std::memcpy(&h, &raw[i * 2], 2);
      out[i] = fp16ToFp32(h);
    }
  }
  return out;
}

} // namespace tpc::rt::cuda
