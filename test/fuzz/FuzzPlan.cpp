//===- FuzzPlan.cpp - libFuzzer target for the plan loader -------------------===//
//
// Plans are untrusted input: parsePlan() must turn any bytes into a Plan or a one-line error. An accepted
// plan must also pass validatePlan() (parsePlan runs it; checked again here as an invariant), survive
// serializePlan() -> parsePlan() unchanged in its figures, and be describable (describePlan walks every
// device, tensor and step), so ASan/UBSan see any index the loader failed to check.
//===----------------------------------------------------------------------===//
#include "runtime/plan/PlanIO.h"
#include "runtime/plan/PlanSummary.h"

#include "test/fuzz/FuzzCheck.h"

#include <cstddef>
#include <cstdint>

using namespace tpc::rt;

namespace {
volatile size_t gSink;
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Expected<Plan> plan = parsePlan(data, size, "fuzz input");
  if (!plan) {
    FUZZ_CHECK(!plan.message().empty());
    return 0;
  }
  FUZZ_CHECK(validatePlan(*plan).empty());
  gSink = gSink + describePlan(*plan).size();
  std::vector<uint8_t> again = serializePlan(*plan);
  Expected<Plan> back = parsePlan(again.data(), again.size(), "round trip");
  FUZZ_CHECK(static_cast<bool>(back));
  FUZZ_CHECK(back->devices.size() == plan->devices.size());
  for (size_t d = 0; d < plan->devices.size(); ++d) {
    FUZZ_CHECK(back->devices[d].steps.size() == plan->devices[d].steps.size());
    FUZZ_CHECK(back->devices[d].tensors.size() == plan->devices[d].tensors.size());
    FUZZ_CHECK(back->devices[d].weightBytes == plan->devices[d].weightBytes);
  }
  return 0;
}
