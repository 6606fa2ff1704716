//===- MoeSplitCost.cpp - the decode cost of a MoE layer's split -------------===//
//
// See MoeSplitCost.h. Plain arithmetic over the devices' shares; nothing here reads IR.
//===----------------------------------------------------------------------===//
#include "passes/MoeSplitCost.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <cmath>
#include <fstream>

namespace mlir::tpc {

std::optional<RoutingProfile> readRoutingProfile(const std::string &path, std::string &error) {
  std::ifstream in(path);
  if (!in) {
    error = path + ": cannot open the routing profile";
    return std::nullopt;
  }
  RoutingProfile out;
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    llvm::StringRef l = llvm::StringRef(line).trim();
    if (l.empty() || l.starts_with("#"))
      continue;
    auto [head, rest] = l.split(':');
    int64_t layer = -1;
    if (!head.consume_front("blk.") || head.getAsInteger(10, layer) || layer < 0 || rest.trim().empty()) {
      error = path + ":" + std::to_string(no) + ": expected 'blk.N: count count ...' (tokens per expert)";
      return std::nullopt;
    }
    std::vector<double> &counts = out[layer];
    llvm::SmallVector<llvm::StringRef> fields;
    rest.split(fields, ' ', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef f : fields) {
      double c = 0;
      if (f.trim().getAsDouble(c) || !(c >= 0) || !std::isfinite(c)) {
        error = path + ":" + std::to_string(no) + ": '" + f.str() + "' is not a count (>= 0)";
        return std::nullopt;
      }
      counts.push_back(c);
    }
  }
  return out;
}

std::vector<int64_t> expertsPerDevice(const std::vector<double> &share, int64_t experts) {
  size_t n = share.size();
  std::vector<double> want(n);
  std::vector<int64_t> got(n);
  int64_t given = 0;
  for (size_t d = 0; d < n; ++d)
    given += got[d] = int64_t(std::floor(want[d] = share[d] * double(experts)));
  for (; given < experts; ++given) {
    size_t best = 0;
    for (size_t d = 1; d < n; ++d)
      if (want[d] - double(got[d]) > want[best] - double(got[best]))
        best = d;
    ++got[best];
  }
  return got;
}

std::optional<double> wholeExpertCost(const std::vector<double> &share, int64_t experts, int64_t used,
                                      const std::vector<double> &weights) {
  size_t n = share.size();
  std::vector<int64_t> owner;
  std::vector<int64_t> got = expertsPerDevice(share, experts);
  for (size_t d = 0; d < n; ++d)
    owner.insert(owner.end(), got[d], int64_t(d));
  // Cumulative routing weights of the experts (the profile's, else equal).
  bool profiled = int64_t(weights.size()) == experts;
  std::vector<double> cumulative(experts);
  double acc = 0;
  for (int64_t e = 0; e < experts; ++e)
    cumulative[e] = acc += profiled ? weights[e] : 1.0;
  if (acc <= 0)
    return std::nullopt;
  uint64_t state = 0x9E3779B97F4A7C15ULL;
  const int kTokens = 4096;
  double cost = 0;
  std::vector<int64_t> load(n);
  for (int t = 0; t < kTokens; ++t) {
    std::fill(load.begin(), load.end(), 0);
    for (int64_t j = 0; j < used; ++j) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      double u = double(state >> 11) * 0x1.0p-53 * acc;
      auto it = std::upper_bound(cumulative.begin(), cumulative.end(), u);
      ++load[owner[std::min<int64_t>(it - cumulative.begin(), experts - 1)]];
    }
    double worst = 0;
    for (size_t d = 0; d < n; ++d)
      if (share[d] > 0)
        worst = std::max(worst, double(load[d]) / (double(used) * share[d]));
    cost += worst / kTokens;
  }
  return cost;
}

} // namespace mlir::tpc
