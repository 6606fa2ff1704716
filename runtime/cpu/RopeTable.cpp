//===- RopeTable.cpp - RoPE cos/sin per (position, frequency) ----------------===//
//
// theta_i = freq_scale · pos · base^(-2i/n_dims) / freq_factors[i] in double (as the old per-step loop),
// with YaRN's ramp between interpolated and extrapolated frequencies and its magnitude on cos and sin
// (StepParams.h: ropeYarnInvFreq, ropeYarnMscale), cos and sin rounded to float and written in the kernels'
// expanded layout.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/RopeTable.h"

#include "runtime/cpu/ThreadGroup.h"

#include <algorithm>
#include <cmath>

namespace tpc::rt::cpu {

void RopeTable::build(ThreadGroup &tg) {
  const int64_t nDims = params.nDims, half = nDims / 2, t = static_cast<int64_t>(pos.size());
  const bool neox = params.mode == RopeMode::Neox;
  std::vector<double> invFreq(half);
  float corr[2] = {0, 0};
  if (params.extFactor != 0)
    ropeYarnCorrDims(params, corr);
  const double mscale = ropeYarnMscale(params); // YaRN's magnitude (1 without it)
  for (int64_t i = 0; i < half; ++i) {
    invFreq[i] = ropeYarnInvFreq(params, corr, i);
    if (!freqFactors.empty())
      invFreq[i] /= freqFactors[i];
  }
  c.resize(t * nDims);
  s.resize(t * nDims);
  tg.parallelFor(t, [&](int64_t b, int64_t e, int) {
    for (int64_t ti = b; ti < e; ++ti) {
      float *cr = c.data() + ti * nDims, *sr = s.data() + ti * nDims;
      for (int64_t i = 0; i < half; ++i) {
        const double theta = double(pos[ti]) * invFreq[i];
        const float cv = static_cast<float>(std::cos(theta) * mscale),
                    sv = static_cast<float>(std::sin(theta) * mscale);
        // Element i0 is a c - b s, its partner i1 is b c + a s.
        const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        cr[i0] = cr[i1] = cv;
        sr[i0] = -sv;
        sr[i1] = sv;
      }
    }
  });
}

const RopeTable &RopeTables::get(const RopeParams &p, const int32_t *pos, int64_t t, const float *freqFactors,
                                 ThreadGroup &tg) {
  const int64_t nff = freqFactors ? p.nDims / 2 : 0;
  for (const RopeTable &tab : tables_)
    if (tab.params.sameAngles(p) && static_cast<int64_t>(tab.pos.size()) == t &&
        static_cast<int64_t>(tab.freqFactors.size()) == nff && std::equal(pos, pos + t, tab.pos.begin()) &&
        std::equal(freqFactors, freqFactors + nff, tab.freqFactors.begin()))
      return tab;
  ++builds_;
  RopeTable tab;
  if (tables_.size() >= kMaxTables) { // reuse the oldest table's storage
    tab = std::move(tables_.front());
    tables_.erase(tables_.begin());
  }
  tab.params = p;
  tab.pos.assign(pos, pos + t);
  tab.freqFactors.assign(freqFactors, freqFactors + nff);
  tab.build(tg);
  tables_.push_back(std::move(tab));
  return tables_.back();
}

} // namespace tpc::rt::cpu
