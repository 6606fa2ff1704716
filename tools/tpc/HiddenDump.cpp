//===- HiddenDump.cpp - `tpc run --dump-hidden FILE` ------------------------===//
//
// HiddenDump.h documents the file. The observer runs on device 0's thread, which is the only writer: a
// failure there is kept and reported by finish() on the caller's thread.
//===----------------------------------------------------------------------===//
#include "tools/tpc/HiddenDump.h"

#include "tools/tpc/Command.h"

#include <fmt/core.h>

#include <cstring>

using namespace tpc::rt;

namespace tpc::cli {

int64_t layerOfStep(const std::string &name) {
  if (name.rfind("blk.", 0) != 0)
    return -1;
  int64_t n = 0;
  size_t i = 4;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i)
    n = n * 10 + (name[i] - '0');
  return i > 4 && i < name.size() && name[i] == '.' ? n : -1;
}

HiddenDump::HiddenDump(const std::string &path) : path_(path) {
  if (!(f_ = std::fopen(path.c_str(), "wb")))
    throw Failure(fmt::format("--dump-hidden: cannot write '{}' ({}); give a path in a writable directory",
                              path, std::strerror(errno)));
  if (std::fwrite("TPCHID01", 1, 8, f_) != 8)
    error_ = "write failed (disk full?)";
}

HiddenDump::~HiddenDump() {
  if (f_)
    std::fclose(f_);
}

void HiddenDump::bind(const Plan &plan) {
  if (plan.devices.empty())
    throw Failure("--dump-hidden: the plan has no devices");
  const std::vector<Step> &steps = plan.devices[0].steps;
  layerOfLastStep_.assign(steps.size(), -1);
  std::vector<size_t> last; // by layer: its last step + 1 (0: none)
  for (size_t si = 0; si < steps.size(); ++si)
    if (const int64_t l = layerOfStep(steps[si].name); l >= 0) {
      if (static_cast<size_t>(l) >= last.size())
        last.resize(l + 1, 0);
      last[l] = si + 1;
    }
  if (last.empty())
    throw Failure("--dump-hidden: the plan has no layer steps (named blk.N.*) on device 0");
  for (size_t l = 0; l < last.size(); ++l) {
    if (!last[l])
      throw Failure(fmt::format("--dump-hidden: the plan has layers up to {} but no step named blk.{}.* on device "
                                "0; cannot tell where layer {} ends",
                                last.size() - 1, l, l));
    layerOfLastStep_[last[l] - 1] = static_cast<int64_t>(l);
  }
}

void HiddenDump::observe(int device, size_t index, const Step &step, const std::vector<exec::TensorRef> &,
                         const std::vector<exec::TensorRef> &outputs) {
  if (device != 0 || index >= layerOfLastStep_.size() || layerOfLastStep_[index] < 0 || !error_.empty())
    return;
  const int64_t layer = layerOfLastStep_[index];
  if (outputs.empty() || outputs[0].dtype != DType::F32 || outputs[0].shape.size() < 2) {
    error_ = fmt::format("layer {}'s last step '{}' ({}) does not write f32 rows; the residual stream cannot be "
                         "read there",
                         layer, step.name, opKindName(step.op));
    return;
  }
  const exec::TensorRef &y = outputs[0];
  if (width_ >= 0 && y.inner() != width_) {
    error_ = fmt::format("layer {}'s last step '{}' writes rows of {} values, the other layers {}; it is not the "
                         "residual stream (a split state?)",
                         layer, step.name, y.inner(), width_);
    return;
  }
  width_ = y.inner();
  if (layer == 0)
    ++call_;
  const int32_t head[4] = {static_cast<int32_t>(layer), static_cast<int32_t>(call_), static_cast<int32_t>(y.rows()),
                           static_cast<int32_t>(width_)};
  const size_t n = static_cast<size_t>(y.numel());
  if (std::fwrite(head, sizeof(int32_t), 4, f_) != 4 || std::fwrite(y.f(), sizeof(float), n, f_) != n)
    error_ = "write failed (disk full?)";
  ++records_;
}

void HiddenDump::finish() {
  FILE *f = f_;
  f_ = nullptr;
  if (f && std::fclose(f) != 0 && error_.empty())
    error_ = "write failed (disk full?)";
  if (!error_.empty())
    throw Failure(fmt::format("--dump-hidden '{}': {}", path_, error_));
}

} // namespace tpc::cli
