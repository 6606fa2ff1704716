//===- MoeSplitCost.h - the decode cost of a MoE layer's split -----*- C++ -*-===//
//
// The numbers tpc-assign-split-axes's auto MoE choice compares, kept apart from the pass so they can be read
// (and changed) alone: the routing profile a user may give (`routing-profile`), how whole experts are
// dealt to the devices, and the expected decode time of a layer whose devices hold whole experts.
// Costs are in units of the balanced time: 1.0 means every device is exactly as busy as its ratio says.
//===----------------------------------------------------------------------===//
#ifndef TPC_PASSES_MOESPLITCOST_H
#define TPC_PASSES_MOESPLITCOST_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir::tpc {

/// Per layer, the tokens routed to each expert (a `routing-profile` file; empty: uniform routing).
using RoutingProfile = std::map<int64_t, std::vector<double>>;

/// Reads a routing profile: `#` comments, blank lines, and one line per MoE layer, `blk.N: c0 c1 ...` with
/// a count per expert. A bad line fails with "FILE:LINE: ..." in `error`.
std::optional<RoutingProfile> readRoutingProfile(const std::string &path, std::string &error);

/// Whole experts per device for the fractions `share` (summing to 1), by largest remainder.
std::vector<int64_t> expertsPerDevice(const std::vector<double> &share, int64_t experts);

/// The expected decode time of one MoE layer whose devices hold whole experts (`expertsPerDevice`, in
/// order), over the balanced time: E[max_d X_d / (used * share_d)], X the counts of a token's `used`
/// experts landing on each device. Experts are drawn as likely as their `weights` (the layer's routing
/// profile; empty: uniform routing) from a fixed-seed sample of 4096 tokens. Nullopt when the weights sum to 0.
std::optional<double> wholeExpertCost(const std::vector<double> &share, int64_t experts, int64_t used,
                                      const std::vector<double> &weights);

} // namespace mlir::tpc

#endif // TPC_PASSES_MOESPLITCOST_H
