//===- MicroBatches.cpp - a call cut into micro-batches for a pipeline ---------===//
//
// MicroBatches.h.
//===----------------------------------------------------------------------===//
#include "runtime/exec/MicroBatches.h"

#include <algorithm>

namespace tpc::rt::exec {

std::vector<MicroBatch> splitMicroBatches(int64_t t, const int32_t *rows, int64_t r, int parts) {
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(parts, t));
  std::vector<MicroBatch> out;
  int64_t row = 0;
  for (int64_t k = 0; k < n; ++k) {
    MicroBatch m;
    m.first = t * k / n;
    m.t = t * (k + 1) / n - m.first;
    m.firstRow = row;
    for (; row < r && rows[row] < m.first + m.t; ++row)
      m.rows.push_back(static_cast<int32_t>(rows[row] - m.first));
    if (m.rows.empty()) {
      m.rows.push_back(static_cast<int32_t>(m.t - 1));
      m.dropRow = true;
    }
    out.push_back(std::move(m));
  }
  return out;
}

} // namespace tpc::rt::exec
