//===- ReplicaShares.cpp - replicated matmuls split among in-process devices ===//
#include "runtime/cpu/ReplicaShares.h"

#include "runtime/cpu/ops/Ops.h"
#include "runtime/plan/StepParams.h"

#include <algorithm>

namespace tpc::rt::cpu {

namespace {
constexpr int64_t kPanel = 32; // the prefill kernels' panel: a share of whole panels converts nothing twice
} // namespace

std::pair<int64_t, int64_t> ReplicaShares::rowsOf(int64_t n, int rank, int devices) {
  const int64_t panels = (n + kPanel - 1) / kPanel, per = panels / devices, extra = panels % devices;
  const int64_t p0 = rank * per + std::min<int64_t>(rank, extra), p1 = p0 + per + (rank < extra ? 1 : 0);
  return {std::min(n, p0 * kPanel), std::min(n, p1 * kPanel)};
}

bool ReplicaShares::shares(const Step &s, int64_t t) const {
  return comm_ && devices_ > 1 && t >= kShareMinTokens && s.op == OpKind::Matmul && s.inputs.size() == 2 &&
         MatmulParams::read(s).replicated;
}

void ReplicaShares::prepare(const std::vector<const Step *> &steps, std::vector<std::vector<exec::TensorRef>> &in,
                            std::vector<std::vector<exec::TensorRef>> &out, int64_t t) {
  pending_.clear();
  size_t need = 0;
  for (size_t j = 0; j < steps.size(); ++j) {
    const exec::TensorRef &w = in[j][1], &y = out[j][0];
    // Every device must get rows (a [T,0] share is not worth a rendezvous): a panel or more each.
    if (!shares(*steps[j], t) || w.shape.size() != 2 || (w.rows() + kPanel - 1) / kPanel < devices_ ||
        y.inner() != w.rows())
      continue;
    Shared s{j, w, y, {}, nullptr};
    s.layout.outer = y.rows();
    for (int d = 0; d < devices_; ++d) {
      auto [r0, r1] = rowsOf(w.rows(), d, devices_);
      s.layout.parts.push_back(r1 - r0);
    }
    need += static_cast<size_t>(s.layout.outer * s.layout.parts[rank_]);
    pending_.push_back(std::move(s));
  }
  if (scratch_.size() < need)
    scratch_.resize(need);
  size_t at = 0;
  for (Shared &s : pending_) {
    exec::TensorRef &w = in[s.member][1], &y = out[s.member][0];
    auto [r0, r1] = rowsOf(w.shape[0], rank_, devices_);
    w.data = static_cast<uint8_t *>(w.data) + static_cast<uint64_t>(r0) * rowBytesOf(w);
    w.shape[0] = r1 - r0;
    s.part = scratch_.data() + at;
    at += static_cast<size_t>(s.layout.outer * (r1 - r0));
    y.data = s.part;
    y.shape = {s.layout.outer, r1 - r0};
  }
}

Expected<void> ReplicaShares::gather(std::vector<std::vector<exec::TensorRef>> &in,
                                     std::vector<std::vector<exec::TensorRef>> &out,
                                     std::vector<exec::TensorRef> &written) {
  for (Shared &s : pending_) {
    const int64_t mine = s.layout.outer * s.layout.parts[rank_];
    if (Expected<void> ok = comm_->allGather(rank_, comm::Buffer{s.part, mine}, comm::Buffer{s.whole.data, s.whole.numel()},
                                            s.layout);
        !ok)
      return ok;
    in[s.member][1] = s.weight;
    out[s.member][0] = s.whole;
    written.push_back(s.whole);
  }
  pending_.clear();
  return {};
}

} // namespace tpc::rt::cpu
