//===- Session.cpp - open, evaluate and the public surface of CudaSession ---===//
//
// open() maps the plan's logical devices to GPUs, checks every step (exec::checkStep plus what only the
// GPU kernels refuse), then runs the setup phases of Memory.cpp in order: sizes, capacity per GPU,
// allocation and address resolution per device, weight upload; NCCL communicators last, when the devices
// sit on distinct GPUs. A CudaError thrown by any phase becomes open's one-line error.
//
// evaluate() runs a call in chunks of max_batch tokens: tokens and positions go up on every device's
// stream, the chunk runs (Graphs.cpp: replayed graph or Dispatch.cpp's step loop), device 0's logits come
// back. After a CUDA error the session refuses further calls (its device state is unknown).
//===----------------------------------------------------------------------===//
#include "runtime/cuda/SessionImpl.h"

#include "runtime/cuda/Collective.cuh"
#include "runtime/cuda/Elementwise.cuh"

#include <fmt/core.h>

#include <cstring>
#include <thread>

namespace tpc::rt::cuda {

using exec::KvBuffers;
using exec::TensorRef;

namespace {

bool isWeightOperand(const Step &s, size_t i) {
  return (s.op == OpKind::Matmul || s.op == OpKind::MulMatId) ? i == 1 : (s.op == OpKind::GetRows && i == 0);
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

CudaSession::Impl::~Impl() {
  if (graph)
    cudaGraphExecDestroy(graph);
  for (Device &d : devs) {
    cudaSetDevice(d.gpu);
    if (d.blas)
      cublasDestroy(d.blas);
    if (d.ev)
      cudaEventDestroy(d.ev);
    if (d.stream)
      cudaStreamDestroy(d.stream);
  }
}

std::string CudaSession::Impl::checkAll(int64_t t) const {
  std::vector<TensorRef> in, out;
  const size_t n = devs.size();
  for (size_t d = 0; d < n; ++d)
    for (size_t si = 0; si < plan.devices[d].steps.size(); ++si) {
      const Step &s = plan.devices[d].steps[si];
      bindStep(d, s, t, in, out);
      auto err = [&](const std::string &e) {
        return fmt::format("device {} step {} '{}' ({} tokens): {}", d, si, s.name, t, e);
      };
      if (std::string e = exec::checkStep(s, in, out, devs[d].kv); !e.empty())
        return err(e);
      if (touchesHost(plan.devices[d], s)) { // the CPU kernels run it, or a copy across
        if (s.op == OpKind::Copy && in[0].dtype != out[0].dtype)
          return err("a copy between host and device must keep its dtype; recompile the plan");
        continue;
      }
      // What the CPU backend allows but these kernels do not.
      for (size_t i = 0; i < in.size(); ++i)
        if (isWeightOperand(s, i) && in[i].isWeight && !cudaSupportsType(in[i].wtype))
          return err(
              fmt::format("weight '{}' is {}, which the CUDA backend does not read (it reads f32, "
                          "f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K); use --backend cpu",
                          plan.devices[d].weights[plan.devices[d].tensors[s.inputs[i]].index].name,
                          ggmlTypeName(in[i].wtype)));
      if ((s.op == OpKind::Add || s.op == OpKind::Mul || s.op == OpKind::Div || s.op == OpKind::Permute) &&
          in[0].shape.size() > size_t(kMaxRank))
        return err("more than 8 dims");
      if (s.op == OpKind::ExpertCombine && in.size() > 5)
        return err("more than 4 multipliers");
      if (s.op == OpKind::Attention && (in[0].shape[2] > 256 || in[2].shape[2] > 256))
        return err("head dims above 256 are not supported by the CUDA attention kernel");
      if (s.op == OpKind::MulMatId && in[1].shape[0] > 8192)
        return err("more than 8192 experts");
    }
  // Collectives: the k-th of every device must agree in sizes (NCCL and the loopback kernel sum equal
  // counts; the gather/scatter offsets come from the peers' parts).
  std::vector<const std::vector<void *> *> ptrs;
  for (const Device &dev : devs)
    ptrs.push_back(&dev.ptr);
  return exec::checkCollectives(plan, ptrs, t);
}

/// Marks device d's host-side steps and the steps whose fusion lookahead would reach one, and starts the
/// host thread group on the first device that has any.
void CudaSession::Impl::markHostSteps(size_t d, const SessionOptions &opts) {
  const DevicePlan &dp = plan.devices[d];
  Device &dev = devs[d];
  dev.hostStep.assign(dp.steps.size(), 0);
  dev.hostNear.assign(dp.steps.size(), 0);
  for (size_t i = 0; i < dp.steps.size(); ++i)
    if ((dev.hostStep[i] = touchesHost(dp, dp.steps[i])))
      for (size_t j = i >= kFuseReach - 1 ? i - (kFuseReach - 1) : 0; j <= i; ++j)
        dev.hostNear[j] = 1;
  if (!hostThreads && std::count(dev.hostStep.begin(), dev.hostStep.end(), 1)) // --threads, else all
    hostThreads = std::make_unique<cpu::ThreadGroup>(
        opts.threads > 0 ? opts.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
}

CudaSession::CudaSession() : impl_(std::make_unique<Impl>()) {}
CudaSession::~CudaSession() = default;

Expected<std::unique_ptr<CudaSession>> CudaSession::open(Plan plan, const SessionOptions &opts,
                                                         const CudaOptions &copts) {
  using E = Expected<std::unique_ptr<CudaSession>>;
  if (auto errs = validatePlan(plan); !errs.empty())
    return Error{"invalid plan: " + errs[0]};
  std::unique_ptr<CudaSession> s(new CudaSession());
  Impl &m = *s->impl_;
  m.plan = std::move(plan);
  m.copts = copts;
  const Plan &p = m.plan;
  const size_t n = p.devices.size();
  m.ctx = opts.ctxSize > 0 ? opts.ctxSize : p.model.defaultCtx;
  if (m.ctx > (int64_t(1) << 26))
    return Error{fmt::format("--ctx-size {} is too large", m.ctx)};

  // GPUs: logical device d on gpus[d % count].
  const int visible = cudaDeviceCount();
  if (visible == 0)
    return Error{"no CUDA GPU is visible (check the driver and CUDA_VISIBLE_DEVICES); use --backend cpu"};
  std::vector<int> gpus = copts.gpus;
  if (gpus.empty())
    for (int g = 0; g < visible; ++g)
      gpus.push_back(g);
  for (int g : gpus)
    if (g < 0 || g >= visible)
      return Error{fmt::format("--gpus: GPU {} does not exist ({} visible)", g, visible)};
  std::set<int> used;
  m.devs.resize(n);
  for (size_t d = 0; d < n; ++d) {
    m.devs[d].gpu = gpus[d % gpus.size()];
    used.insert(m.devs[d].gpu);
  }
  m.loopback = used.size() == 1;
  if (!m.loopback && used.size() != n)
    return Error{fmt::format("the plan's {} devices would share {} GPUs unevenly; give --gpus either one GPU "
                             "(loopback collectives) or {} distinct GPUs (NCCL)",
                             n, used.size(), n)};
  if (m.loopback && n > size_t(kMaxLoopback))
    return Error{fmt::format("{} logical devices on one GPU; at most {} are supported", n, kMaxLoopback)};

  // KV descriptors first (checkStep reads them), then the plan checks, before touching GPU memory.
  for (size_t d = 0; d < n; ++d)
    for (const KvCache &c : p.devices[d].kv) {
      KvBuffers b;
      b.desc = c;
      b.ctx = m.ctx;
      m.devs[d].kv.push_back(b);
    }
  for (size_t d = 0; d < n; ++d)
    m.devs[d].ptr.assign(p.devices[d].tensors.size(), nullptr);
  for (int64_t t : {int64_t(1), p.model.maxBatch})
    if (std::string e = m.checkAll(t); !e.empty())
      return Error{"plan does not fit its ops: " + e};

  auto weights = openWeightSource(p, opts);
  if (!weights)
    return Error{weights.message()};
  const uint8_t *src = weights->data;

  try {
    // Sizes per logical device, then capacity per GPU (several logical devices may share one).
    std::vector<DeviceSizes> sizes;
    if (std::string e = m.sizeDevices(opts, sizes); !e.empty())
      return Error{e};
    if (std::string e = m.fitGpus(used, sizes); !e.empty())
      return Error{e};
    // Allocate, resolve addresses, create streams and handles.
    for (size_t d = 0; d < n; ++d) {
      m.allocateDevice(d, sizes[d]);
      m.markHostSteps(d, opts);
    }
    m.logitsTensor = exec::logitsTensorOf(p.devices[0]);
    if (m.logitsTensor < 0)
      return Error{"device 0 has no OUTPUT_LOGITS tensor; recompile the plan"};
    m.uploadWeights(src);

    // N > 1 on distinct GPUs: one NCCL communicator per GPU.
    if (!m.loopback) {
      std::vector<int> order;
      for (const Device &d : m.devs)
        order.push_back(d.gpu);
      auto comms = NcclComms::create(order);
      if (!comms)
        return Error{comms.message()};
      m.nccl = std::move(*comms);
    }
    const uint64_t hostBytes = p.model.maxBatch * 8 + p.model.maxBatch * p.model.nVocab * 4;
    TPC_CUDA_CHECK(cudaMallocHost(&m.hostIo.p, hostBytes));
  } catch (const CudaError &e) {
    return Error{e.what()};
  }
  m.prof.resize(p.devices[0].steps.size());
  for (size_t i = 0; i < m.prof.size(); ++i)
    m.prof[i].name = p.devices[0].steps[i].name, m.prof[i].op = p.devices[0].steps[i].op;
  return E(std::move(s));
}

Expected<std::vector<float>> CudaSession::evaluate(const std::vector<int32_t> &tokens,
                                                   const std::vector<int32_t> &positions) {
  Impl &m = *impl_;
  const Plan &p = m.plan;
  if (!m.failure.empty())
    return Error{"execution failed earlier: " + m.failure + "; reopen the plan"};
  if (std::string bad = checkEvaluateArgs(p, m.ctx, tokens, positions); !bad.empty())
    return Error{bad};
  const int64_t vocab = p.model.nVocab, total = static_cast<int64_t>(tokens.size());
  std::vector<float> logits(static_cast<size_t>(total * vocab));
  int32_t *hTok = static_cast<int32_t *>(m.hostIo.p), *hPos = hTok + p.model.maxBatch;
  float *hLogits = reinterpret_cast<float *>(hPos + p.model.maxBatch);
  try {
    for (int64_t at = 0; at < total; at += p.model.maxBatch) {
      const int64_t t = std::min(p.model.maxBatch, total - at);
      std::copy(tokens.begin() + at, tokens.begin() + at + t, hTok);
      std::copy(positions.begin() + at, positions.begin() + at + t, hPos);
      for (Device &dev : m.devs) {
        TPC_CUDA_CHECK(cudaSetDevice(dev.gpu));
        TPC_CUDA_CHECK(cudaMemcpyAsync(dev.tokens, hTok, t * 4, cudaMemcpyHostToDevice, dev.stream));
        TPC_CUDA_CHECK(cudaMemcpyAsync(dev.positions, hPos, t * 4, cudaMemcpyHostToDevice, dev.stream));
      }
      m.runChunk(t);
      Device &d0 = m.devs[0];
      TPC_CUDA_CHECK(cudaSetDevice(d0.gpu));
      TPC_CUDA_CHECK(cudaMemcpyAsync(hLogits, m.devs[0].ptr[m.logitsTensor], t * vocab * 4,
                                     cudaMemcpyDeviceToHost, d0.stream));
      for (Device &dev : m.devs) {
        TPC_CUDA_CHECK(cudaSetDevice(dev.gpu));
        TPC_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
      }
      std::memcpy(logits.data() + at * vocab, hLogits, t * vocab * 4);
    }
  } catch (const CudaError &e) {
    m.failure = e.what();
    return Error{"execution failed: " + m.failure + "; reopen the plan"};
  }
  return logits;
}

const Plan &CudaSession::plan() const { return impl_->plan; }
int64_t CudaSession::ctxSize() const { return impl_->ctx; }
int64_t CudaSession::nVocab() const { return impl_->plan.model.nVocab; }
std::vector<uint64_t> CudaSession::deviceBytes() const {
  std::vector<uint64_t> out;
  for (const Device &d : impl_->devs)
    out.push_back(d.weights.size + d.acts.size + d.kvMem.size + d.scratch.size + d.f16.size);
  return out;
}
std::vector<int> CudaSession::gpuOf() const {
  std::vector<int> out;
  for (const Device &d : impl_->devs)
    out.push_back(d.gpu);
  return out;
}
bool CudaSession::usesGraphs() const { return impl_->copts.graphs && impl_->loopback; }

std::vector<float> CudaSession::tensorData(size_t device, int32_t id, int64_t tokens) const {
  const Impl &m = *impl_;
  if (device >= m.devs.size() || id < 0 || static_cast<size_t>(id) >= m.devs[device].ptr.size() ||
      m.plan.devices[device].tensors[id].storage == Storage::Weight)
    return {};
  TensorRef r = m.bind(device, id, tokens);
  const size_t n = static_cast<size_t>(r.numel()), es = dtypeBytes(r.dtype);
  std::vector<uint8_t> raw(n * es);
  cudaSetDevice(m.devs[device].gpu);
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
      out[i] = exec::halfToFloat(h);
    }
  }
  return out;
}

void CudaSession::setProfiling(bool on) { impl_->profiling = on; }
std::vector<StepProfile> CudaSession::profile() const { return impl_->prof; }

} // namespace tpc::rt::cuda
