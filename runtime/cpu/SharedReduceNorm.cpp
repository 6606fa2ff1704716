//===- SharedReduceNorm.cpp - all-reduce + RMS norm by rows among in-process devices ===//
#include "runtime/cpu/SharedReduceNorm.h"

#include "runtime/comm/Bf16Wire.h"
#include "runtime/cpu/ew/Elementwise.h"

#include <fmt/core.h>

#include <algorithm>
#include <vector>
#include <cstring>

namespace tpc::rt::cpu {

namespace {
struct Range {
  const char *b, *e;
};
Range rangeOf(const exec::TensorRef &t) {
  const char *b = static_cast<const char *>(t.data);
  return {b, b + t.numel() * 4};
}
/// Overlapping but not the same bytes.
bool clash(const exec::TensorRef &a, const exec::TensorRef &b) {
  const Range x = rangeOf(a), y = rangeOf(b);
  const bool overlap = x.b < y.e && y.b < x.e;
  return overlap && !(x.b == y.b && x.e == y.e);
}
} // namespace

bool SharedReduceNorm::operandsSafe(const std::vector<exec::TensorRef> &in, const std::vector<exec::TensorRef> &out,
                                    const AllReduceRmsNormParams &p) {
  if (out.size() != 2 || in.empty())
    return false;
  const exec::TensorRef &x = in[0], &y = out[0], &n = out[1];
  if (x.dtype != DType::F32 || y.numel() != x.numel() || n.numel() != x.numel())
    return false;
  const Range ry = rangeOf(y), rn = rangeOf(n);
  if (ry.b < rn.e && rn.b < ry.e) // the sum and its norm are both outputs
    return false;
  for (const exec::TensorRef *o : {&y, &n}) {
    if (clash(*o, x))
      return false;
    if (p.residual && in.size() > 1 && clash(*o, in[1]))
      return false;
  }
  return true;
}

Expected<void> SharedReduceNorm::run(int rank, const std::vector<exec::TensorRef> &in,
                                     const std::vector<exec::TensorRef> &out, const AllReduceRmsNormParams &p,
                                     ThreadGroup &tg, bool wholeSum) {
  const exec::TensorRef &x = in[0];
  Slot &mine = slots_[static_cast<size_t>(rank)];
  mine.x = x.f();
  mine.r = p.residual ? in[1].f() : nullptr;
  mine.y = out[0].f();
  mine.n = out[1].f();
  mine.rows = x.rows();
  mine.cols = x.inner();
  mine.wholeSum = wholeSum;
  const float *w = p.weight ? in.back().f() : nullptr;
  // Every device's addend is complete and its slot published.
  if (Expected<void> ok = comm_.barrier({rank}); !ok)
    return ok;
  const int devices = static_cast<int>(slots_.size());
  for (const Slot &s : slots_)
    if (s.rows != mine.rows || s.cols != mine.cols) {
      const std::string why = fmt::format("all-reduce + norm: device {} has {}x{} rows, another {}x{}", rank,
                                          mine.rows, mine.cols, s.rows, s.cols);
      comm_.abort(why);
      return Error{why};
    }
  const int64_t cols = mine.cols, r0 = mine.rows * rank / devices, r1 = mine.rows * (rank + 1) / devices;
  const ElementwiseKernels &k = elementwiseKernels();
  const Slot &first = slots_[0];
  const bool bf16 = comm_.payload() == comm::Payload::BF16;
  tg.parallelFor(r1 - r0, [&](int64_t b, int64_t e, int thread) {
    float *sum = static_cast<float *>(tg.threadScratch(thread, static_cast<size_t>(2 * cols) * sizeof(float)));
    float *norm = sum + cols;
    for (int64_t row = r0 + b; row < r0 + e; ++row) {
      const size_t at = static_cast<size_t>(row * cols);
      const float *x0 = first.x + at;
      if (bf16) {
        // CollectiveRunner's bf16 composition: the communicator's sum of the addends as they cross the wire
        // (Bf16Wire.h), then the residual, in f32.
        for (int64_t j = 0; j < cols; ++j)
          sum[j] = comm::roundBf16(x0[j]);
        for (int d = 1; d < devices; ++d) {
          const float *xd = slots_[d].x + at;
          for (int64_t j = 0; j < cols; ++j)
            sum[j] += comm::roundBf16(xd[j]);
        }
        for (int64_t j = 0; j < cols; ++j)
          sum[j] = comm::roundBf16(sum[j]);
        if (mine.r) {
          const float *rr = mine.r + at;
          for (int64_t j = 0; j < cols; ++j)
            sum[j] += rr[j];
        }
      } else {
        // The composition's order: device 0's addend with the residual, then the others in rank order.
        if (mine.r) {
          const float *rr = mine.r + at; // mirrored: this device's copy holds the same values
          for (int64_t j = 0; j < cols; ++j)
            sum[j] = x0[j] + rr[j];
        } else {
          std::copy(x0, x0 + cols, sum);
        }
        for (int d = 1; d < devices; ++d) {
          const float *xd = slots_[d].x + at;
          for (int64_t j = 0; j < cols; ++j)
            sum[j] += xd[j];
        }
      }
      k.rmsNorm(sum, w, norm, p.eps, cols);
      for (const Slot &s : slots_) {
        if (&s == &mine || s.wholeSum) // a peer may read only its own rows of the sum (ownRowsSuffice)
          std::memcpy(s.y + at, sum, static_cast<size_t>(cols) * 4);
        std::memcpy(s.n + at, norm, static_cast<size_t>(cols) * 4);
      }
    }
  });
  // Every row written (and every addend read) before anyone goes on.
  return comm_.barrier({rank});
}

std::vector<char> SharedReduceNorm::ownRowsSuffice(const DevicePlan &dp, const std::vector<char> &shared) {
  const std::vector<Step> &st = dp.steps;
  std::vector<char> own(st.size(), 0);
  for (size_t si = 0; si < st.size(); ++si) {
    if (!shared[si] || st[si].op != OpKind::AllReduceRmsNorm || st[si].outputs.empty())
      continue;
    const int32_t sum = st[si].outputs[0];
    bool read = false, ok = true;
    for (size_t j = si + 1; j < st.size() && ok; ++j) {
      const Step &s = st[j];
      const bool residual = s.op == OpKind::AllReduceRmsNorm && shared[j] && AllReduceRmsNormParams::read(s).residual;
      for (size_t q = 0; q < s.inputs.size(); ++q)
        if (s.inputs[q] == sum) {
          read = true;
          ok &= residual && q == 1;
        }
      if (std::find(s.outputs.begin(), s.outputs.end(), sum) != s.outputs.end())
        break;
    }
    own[si] = read && ok;
  }
  return own;
}


} // namespace tpc::rt::cpu
