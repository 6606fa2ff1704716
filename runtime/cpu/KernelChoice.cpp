//===- KernelChoice.cpp - which kernel level a CPU session runs, and why -----===//
//
// The order of KernelChoice.h (override, one candidate, off, cache, calibration), the plan's decode sample
// and the process-wide record of the first session's choice.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/KernelChoice.h"

#include "runtime/exec/Binding.h"
#include "runtime/plan/StepParams.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

namespace tpc::rt::cpu {

std::string calibrateModeProblem(const char *value) {
  if (!value)
    return {};
  const std::string v(value);
  if (v == "0" || v == "off" || v == "1" || v == "on" || v == "force")
    return {};
  return "TPC_CPU_CALIBRATE=" + v +
         " is not a mode: use 0 (CPUID's best level), 1 (calibrate once, then the cached level) or force "
         "(calibrate again)";
}

CalibrateMode calibrateMode(const char *value) {
  const std::string v = value ? value : "";
  if (v == "0" || v == "off")
    return CalibrateMode::Off;
  if (v == "force")
    return CalibrateMode::Force;
  return CalibrateMode::Auto;
}

std::string KernelChoice::line() const {
  return fmt::format("{} ({}{}{})", isaName(isa), how, detail.empty() ? "" : ": ", detail);
}

namespace {
/// "avx2 3.10 ms, avx512 3.05 ms, avx512vnni 2.41 ms per step in 0.21 s": the calibration's numbers.
std::string describe(const Calibration &c) {
  std::string s;
  for (const LevelTime &t : c.times)
    s += fmt::format("{}{} {:.3g} ms", s.empty() ? "" : ", ", isaName(t.isa), t.seconds * 1e3);
  return fmt::format("{} of one core per decode step's timed kernels, best of {} rounds, {:.2f} s", s,
                     c.rounds, c.wallSeconds);
}
} // namespace

KernelChoice decideKernels(const KernelChoiceRequest &r) {
  KernelChoice c;
  if (r.isaOverride) {
    for (Isa i : {Isa::Scalar, Isa::AVX2, Isa::AVX512, Isa::AVX512VNNI})
      if (std::string(r.isaOverride) == isaName(i))
        c.isa = i;
    c.how = "override";
    c.detail = std::string("TPC_CPU_ISA=") + r.isaOverride;
    return c;
  }
  const Isa best = r.candidates.empty() ? Isa::Scalar : r.candidates.back();
  if (r.candidates.size() < 2) {
    c.isa = best;
    c.how = "cpuid";
    c.detail = "the only level to choose from";
    return c;
  }
  if (r.mode == CalibrateMode::Off) {
    c.isa = best;
    c.how = "cpuid";
    c.detail = "TPC_CPU_CALIBRATE=0";
    return c;
  }
  KernelCacheRead cached;
  if (!r.cachePath.empty()) {
    cached = readKernelCache(r.cachePath, r.key);
    if (!cached.problem.empty())
      c.warnings.push_back(cached.problem);
    const bool usable = cached.hit && std::find(r.candidates.begin(), r.candidates.end(), cached.hit->isa) !=
                                          r.candidates.end();
    if (usable && r.mode == CalibrateMode::Auto) {
      c.isa = cached.hit->isa;
      c.how = "cached";
      c.detail = fmt::format("{} in {}", cached.hit->note, r.cachePath);
      return c;
    }
  }
  const Calibration cal = r.measure();
  if (cal.rounds == 0) { // a plan without matmuls or attention on this device: nothing told the levels apart
    c.isa = best;
    c.how = "cpuid";
    c.detail = "no decode kernels to time";
    return c;
  }
  // calibrate() picks among the candidates it was given; a measure that returns something else (a bug) must
  // still never run a level outside them.
  c.isa = std::find(r.candidates.begin(), r.candidates.end(), cal.chosen) != r.candidates.end() ? cal.chosen
                                                                                                : best;
  c.how = "calibrated";
  c.detail = describe(cal);
  if (!r.cachePath.empty())
    if (std::string bad = writeKernelCache(r.cachePath, cached.entries, {r.key, c.isa, c.detail});
        !bad.empty())
      c.warnings.push_back(bad);
  return c;
}

namespace {
/// A matmul instance of the plan: one weight matrix (an expert's for MUL_MAT_ID).
struct Instance {
  const uint8_t *w;
  size_t stride;
};
/// Instances of one (type, rows, row length).
struct MatmulClass {
  std::vector<Instance> at;
  uint64_t rowBytes = 0;
};
using ClassKey = std::tuple<int, int64_t, int64_t>; // type, n, k
using AttentionKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int, int, int64_t, float>;
} // namespace

CalibrationWork decodeWork(const DevicePlan &dp, const std::vector<void *> &ptr, int64_t ctx,
                           uint64_t budgetBytes) {
  std::map<ClassKey, MatmulClass> classes;
  std::map<AttentionKey, double> attention;
  uint64_t total = 0;
  auto addMatrix = [&](GGMLType t, int64_t n, int64_t k, const uint8_t *w) {
    const std::optional<uint64_t> rb = ggmlRowBytes(t, static_cast<uint64_t>(k));
    if (!rb || n <= 0 || k <= 0 || !w || !supportsDequantize(t))
      return;
    MatmulClass &c = classes[{static_cast<int>(t), n, k}];
    c.rowBytes = *rb;
    c.at.push_back({w, static_cast<size_t>(*rb)});
    total += *rb * static_cast<uint64_t>(n);
  };
  for (const Step &s : dp.steps) {
    if ((s.op == OpKind::Matmul || s.op == OpKind::MulMatId) && s.inputs.size() >= 2 &&
        dp.tensors[s.inputs[1]].storage == Storage::Weight) {
      const exec::TensorRef w = exec::bindTensor(dp, ptr, s.inputs[1], 1, 1);
      const auto *base = static_cast<const uint8_t *>(w.data);
      if (s.op == OpKind::Matmul) {
        addMatrix(w.wtype, w.rows(), w.inner(), base);
        continue;
      }
      if (w.shape.size() != 3 || s.inputs.size() < 3)
        continue;
      const std::vector<int64_t> &ids = dp.tensors[s.inputs[2]].shape;
      const int64_t slots = ids.size() == 2 ? std::min(ids[1], w.shape[0]) : 1;
      const std::optional<uint64_t> rb = ggmlRowBytes(w.wtype, static_cast<uint64_t>(w.shape[2]));
      for (int64_t e = 0; rb && e < slots; ++e) // the first experts stand for the routed ones
        addMatrix(w.wtype, w.shape[1], w.shape[2], base + static_cast<size_t>(e * w.shape[1]) * *rb);
    } else if (s.op == OpKind::Attention && s.inputs.size() >= 3) {
      const AttentionParams p = AttentionParams::read(s);
      const std::vector<int64_t> &q = dp.tensors[s.inputs[0]].shape, &k = dp.tensors[s.inputs[1]].shape,
                                 &v = dp.tensors[s.inputs[2]].shape;
      if (q.size() != 3 || k.size() != 3 || v.size() != 3 || p.kvCache < 0 ||
          static_cast<size_t>(p.kvCache) >= dp.kv.size() || q[1] == 0 || k[1] == 0)
        continue;
      const KvCache &kv = dp.kv[p.kvCache];
      int64_t depth = std::min(kCalibrationDepth, std::max<int64_t>(ctx, 1));
      if (p.window > 0)
        depth = std::min<int64_t>(depth, p.window);
      // A grouped call (mirrored KV heads) runs one KV head's query heads per call; timed as one call. A
      // device whose query heads do not fill its cache's KV heads evenly (fewer query heads than KV heads
      // on 3-4 devices, say) reads one KV head per call: timed so (flashAttention needs hq % hkv == 0).
      const int64_t hkv = q[1] % k[1] == 0 ? k[1] : 1;
      attention[{q[1], hkv, q[2], v[2], static_cast<int>(kv.typeK), static_cast<int>(kv.typeV), depth,
                 p.softcap}] += 1;
    }
  }

  CalibrationWork work;
  for (const auto &[key, c] : classes) {
    const auto [type, n, k] = key;
    const uint64_t instBytes = c.rowBytes * static_cast<uint64_t>(n);
    const uint64_t classBytes = instBytes * c.at.size();
    const double share = total <= budgetBytes ? double(classBytes) : double(budgetBytes) * classBytes / total;
    const size_t count = c.at.size();
    size_t take = std::clamp<size_t>(static_cast<size_t>(share / double(instBytes)), 1, count);
    int64_t rows = n;
    if (take == 1 && double(instBytes) > share) // one matrix larger than its share: its first rows
      rows = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(share / double(c.rowBytes))),
                                 std::min<int64_t>(n, 64), n);
    const double weight = double(classBytes) / (double(take) * double(rows) * double(c.rowBytes));
    for (size_t i = 0; i < take; ++i) { // spread over the model: layers far apart share no cache lines
      const Instance &in = c.at[i * count / take];
      work.matmuls.push_back({in.w, static_cast<GGMLType>(type), rows, k, in.stride, weight});
    }
  }
  for (const auto &[key, count] : attention) {
    const auto [hq, hkv, dk, dv, tk, tv, depth, softcap] = key;
    work.attention.push_back(
        {hq, hkv, dk, dv, static_cast<GGMLType>(tk), static_cast<GGMLType>(tv), depth, softcap, count});
  }
  return work;
}

std::string shapeKey(const CalibrationWork &w) {
  // FNV-1a over the shapes in order (decodeWork's order is sorted by shape, so equal plans give equal keys).
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::string &s) {
    for (unsigned char ch : s)
      h = (h ^ ch) * 1099511628211ull;
  };
  for (const CalibMatmul &m : w.matmuls)
    mix(fmt::format("m{}:{}:{}:{:.4g};", static_cast<int>(m.type), m.n, m.k, m.weight));
  for (const CalibAttention &a : w.attention)
    mix(fmt::format("a{}:{}:{}:{}:{}:{}:{}:{}:{};", a.hq, a.hkv, a.dk, a.dv, static_cast<int>(a.typeK),
                    static_cast<int>(a.typeV), a.depth, a.softcap, a.weight));
  return fmt::format("{:016x}", h);
}

KernelChoice chooseSessionKernels(const DevicePlan &dp, const std::vector<void *> &ptr, int64_t ctx) {
  static std::mutex mu;
  static std::optional<KernelChoice> first;
  std::lock_guard<std::mutex> lock(mu);
  if (first) {
    KernelChoice again = *first;
    again.warnings.clear(); // said once
    return again;
  }
  KernelChoice c;
  if (activeIsaFixed()) {
    c.isa = activeIsa();
    c.how = "fixed";
    c.detail = "a table built once in this process before its first CPU session fixed it";
  } else {
    KernelChoiceRequest r;
    r.isaOverride = std::getenv("TPC_CPU_ISA"); // validated where the session opens
    r.mode = calibrateMode(std::getenv("TPC_CPU_CALIBRATE"));
    r.candidates = calibrationCandidates();
    r.cachePath = kernelCachePath();
    const CalibrationWork work = decodeWork(dp, ptr, ctx);
    r.key = {cpuModelName() + "|" + isaName(bestAvailableIsa()), kernelBuildId(), shapeKey(work)};
    r.measure = [&] { return calibrate(work, r.candidates); };
    c = decideKernels(r);
    if (!setActiveIsa(
            c.isa)) { // something read the level meanwhile (cannot happen under the lock in practice)
      c.detail += fmt::format("; {} was already in use", isaName(activeIsa()));
      c.isa = activeIsa();
    }
  }
  first = c;
  return c;
}

} // namespace tpc::rt::cpu
