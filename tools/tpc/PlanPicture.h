//===- PlanPicture.h - what `tpc inspect --html/--svg` draws ------*- C++ -*-===//
//
// The facts of a plan the pictures show, gathered once from the plan alone (no GGUF, no compiler):
//  - memory per device: memoryAt() at the page's context (rings for sliding-window layers), the numbers
//    `tpc inspect` and `tpc compile --report` print;
//  - the layers: the emitter names each step after the `tpc.layer` stamp of its op (`blk.N.<op>`,
//    `output.<op>`, the embedding without a prefix); a step without a prefix after the first block belongs
//    to the layer before it (nothing else is named that way today);
//  - the collectives of every device per layer, each with collectiveBytesPerToken() (the --report figure);
//  - how each weight is cut: from its slices' pieces (strided runs into the GGUF), so the drawing is the
//    bytes each device copies, whatever axis the compiler chose (rows, columns, experts);
//  - per step a split state (mirrored / split / partial) derived by propagating the weights' cuts through
//    device 0's steps (see deriveStates in PlanPicture.cpp: the rules mirror the sharding pass's).
// PlanPictureSvg.cpp renders these as SVG and as one self-contained HTML page.
//===----------------------------------------------------------------------===//
#ifndef TPC_TOOLS_TPC_PLANPICTURE_H
#define TPC_TOOLS_TPC_PLANPICTURE_H

#include "runtime/plan/PlanSummary.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tpc::cli::picture {

/// A value's distribution over the devices, as the passes' split states name it.
enum class State : uint8_t { Mirrored, Split, Partial, Unknown };
/// "mirrored", "split", "partial", "unknown".
const char *stateName(State s);

/// One layer column: the embedding, a block, or the output head, in program order.
struct Layer {
  std::string label; ///< "embed", "blk.3", "output"
  int64_t block = -1; ///< N of blk.N, -1 otherwise
};

/// One collective step as it appears in a device's lane.
struct Collective {
  size_t step = 0;                ///< index in the device's steps
  size_t layer = 0;               ///< index in Picture::layers
  std::string op, name;           ///< "all_reduce", "blk.0.all_reduce"
  uint64_t bytesPerToken = 0;     ///< collectiveBytesPerToken()
};

/// A rectangle of a weight's GGUF bytes: rows (outer elements) by bytes within a row.
struct Run {
  uint64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
};

/// One device's part of a weight.
struct WeightShare {
  bool present = false;        ///< the device holds a slice of it
  std::vector<int64_t> shape;  ///< local shape, outermost first
  uint64_t bytes = 0;
  bool host = false;           ///< placed in host memory
  std::vector<Run> runs;       ///< its pieces in the tensor's row x byte grid
};

/// How one GGUF tensor is cut across the devices.
struct WeightCut {
  std::string name, type;
  size_t layer = 0;             ///< blk.N of its name, else the layer of the first step that reads it
  bool mirrored = false;        ///< every device holds the whole tensor
  int axis = -1;                ///< split axis (outermost first), -1 when mirrored
  bool innermost = false;       ///< split within rows (the row/column axis)
  std::vector<int64_t> shape;   ///< global shape (the local shapes summed along the split axis)
  uint64_t totalRows = 0, rowBytes = 0; ///< the grid the runs live in
  std::vector<WeightShare> shares;      ///< per device
  /// "mirrored", "axis 0 (rows): 16 + 16 of 32", "axis 0 (experts): 4 + 4 of 8".
  std::string describe() const;
};

/// One step of the dataflow figure (device 0).
struct FlowNode {
  size_t step = 0;
  std::string op, name, shape; ///< shape of the first output, "[T, 16]"
  State state = State::Unknown;
  std::vector<size_t> from;                          ///< producer nodes inside this layer (node indices)
  size_t external = 0;                               ///< inputs made outside this layer
  std::vector<std::pair<std::string, State>> weights; ///< weight operands: name and cut
};

/// The whole picture of a plan.
struct Picture {
  std::string planPath, summaryText; ///< summaryText: describePlan(), shown verbatim on the page
  int64_t ctx = 0;                   ///< the context the KV bars are drawn for
  std::vector<std::string> deviceNames; ///< "device 0 (cpu)"
  std::vector<rt::DeviceSummary> memory;
  std::vector<rt::DeviceMemory> memoryAtCtx; ///< rt::memoryAt(plan, ctx): the bars' bytes
  int64_t blocks = 0;                        ///< rt::blockCount(plan)
  uint32_t stages = 1;                       ///< pipeline stages (rt::Plan::stages)
  std::vector<Layer> layers;
  std::vector<std::vector<Collective>> lanes; ///< per device, in step order (Send/Recv steps too)
  std::vector<WeightCut> weights;             ///< in order of first use
  std::vector<std::vector<FlowNode>> flows;   ///< per layer, device 0's steps
  size_t chosenLayer = 0;                     ///< the layer the dataflow shows first
};

/// Gathers the picture of a validated plan for a context of `ctx` tokens (0: the plan's default).
Picture buildPicture(const rt::Plan &plan, const std::string &planPath, int64_t ctx);

/// The index of the layer `spec` names ("3" or "blk.3", "embed", "output"); empty spec: the first block
/// (or layer 0). Throws Failure naming --layer and the valid choices.
size_t findLayer(const Picture &p, const std::string &spec);

/// One standalone SVG document with the four figures, the dataflow for p.chosenLayer.
std::string renderSvg(const Picture &p);
/// One self-contained HTML page: the figures, the plan summary, a layer chooser (inline JS).
std::string renderHtml(const Picture &p);

} // namespace tpc::cli::picture

#endif // TPC_TOOLS_TPC_PLANPICTURE_H
