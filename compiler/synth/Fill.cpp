//===- Fill.cpp - random tensor contents in ggml formats --------------------===//
//
// Each block generator draws uniform quants and picks the block scale from the target standard deviation
// sigma and the quants' own spread: for x = d * (q - c) with q uniform, std(x) = d * sqrt(E[(q - c)^2]).
// K-quant sub-block scales sc are uniform in [32, 63] (6 bits) or |sc| in [64, 127] (Q6_K's int8), so the
// super-block scale d divides by sqrt(E[sc^2]) too. The block scale also varies by +-20% between blocks.
//===----------------------------------------------------------------------===//
#include "compiler/synth/Fill.h"

#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/Quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpc::synth {

uint64_t mixSeed(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

namespace {

/// sqrt(E[sc^2]) for sc uniform in [lo, hi] (integers).
constexpr double rmsUniformInt(double lo, double hi) {
  double n = hi - lo + 1, mean = (lo + hi) / 2;
  return mean * mean + (n * n - 1) / 12;
}

const float kRmsSc6 = static_cast<float>(std::sqrt(rmsUniformInt(32, 63)));  // K4/K5 6-bit sub-scales
const float kRmsSc8 = static_cast<float>(std::sqrt(rmsUniformInt(64, 127))); // Q6_K int8 sub-scales
// sqrt(E[(q - c)^2]) of the quants, q uniform: Q4_0 c = 8, Q5_0 c = 16, Q6_K c = 32, Q4_K/Q5_K centred by
// their mins (variance only), Q8_0 over -127..127 with -128 mapped to -127.
const float kRmsQ4_0 = std::sqrt(21.25f + 0.25f);
const float kRmsQ5_0 = std::sqrt(85.25f + 0.25f);
const float kStdQ4 = std::sqrt(21.25f);
const float kStdQ5 = std::sqrt(85.25f);
const float kRmsQ6 = std::sqrt(341.25f + 0.25f);
const float kRmsQ8 = std::sqrt(5460.5f);

void randomBytes(Rng &rng, uint8_t *dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t r = rng.next();
    std::memcpy(dst + i, &r, 8);
  }
  if (i < n) {
    uint64_t r = rng.next();
    std::memcpy(dst + i, &r, n - i);
  }
}

/// The block scale for this block: base * U(0.8, 1.2).
float jitter(Rng &rng, float base) { return base * (0.8f + 0.4f * rng.uniform()); }

/// Q4_K/Q5_K scales: sc_j = m_j uniform in [32, 63], packed as scaleMinK4 reads them. With dmin = c * d
/// every sub-block d*sc*q - dmin*m = d*sc*(q - c) is centred.
void packScalesK4(Rng &rng, uint8_t q[12]) {
  uint64_t r = rng.next();
  uint8_t sc[8];
  for (int j = 0; j < 8; ++j)
    sc[j] = static_cast<uint8_t>(32 + ((r >> (5 * j)) & 31));
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6)); // m = sc
  }
  for (int j = 4; j < 8; ++j)
    q[j + 4] = static_cast<uint8_t>((sc[j] & 0xf) | ((sc[j] & 0xf) << 4));
}

template <typename Block> void fillQ4K(Block *b, uint64_t nb, float sigma, Rng &rng, bool five) {
  float base = sigma / ((five ? kStdQ5 : kStdQ4) * kRmsSc6);
  float centre = five ? 15.5f : 7.5f;
  for (uint64_t i = 0; i < nb; ++i) {
    float d = jitter(rng, base);
    uint16_t dh = fp32ToFp16(d);
    b[i].d = dh;
    b[i].dmin = fp32ToFp16(fp16ToFp32(dh) * centre);
    packScalesK4(rng, b[i].scales);
    randomBytes(rng, b[i].qs, sizeof b[i].qs);
    if constexpr (sizeof(Block) == sizeof(BlockQ5_K))
      randomBytes(rng, b[i].qh, sizeof b[i].qh);
  }
}

void fillQ6K(BlockQ6_K *b, uint64_t nb, float sigma, Rng &rng) {
  float base = sigma / (kRmsQ6 * kRmsSc8);
  for (uint64_t i = 0; i < nb; ++i) {
    randomBytes(rng, b[i].ql, sizeof b[i].ql);
    randomBytes(rng, b[i].qh, sizeof b[i].qh);
    uint8_t raw[16];
    randomBytes(rng, raw, 16);
    for (int j = 0; j < 16; ++j) {
      int mag = 64 + (raw[j] & 63);
      b[i].scales[j] = static_cast<int8_t>(raw[j] & 0x40 ? -mag : mag); // random sign cancels q - 32's bias
    }
    b[i].d = fp32ToFp16(jitter(rng, base));
  }
}

void fillQ8_0(BlockQ8_0 *b, uint64_t nb, float sigma, Rng &rng) {
  float base = sigma / kRmsQ8;
  for (uint64_t i = 0; i < nb; ++i) {
    b[i].d = fp32ToFp16(jitter(rng, base));
    randomBytes(rng, reinterpret_cast<uint8_t *>(b[i].qs), sizeof b[i].qs);
    for (int8_t &q : b[i].qs)
      if (q == -128)
        q = -127; // keep the quants symmetric, as ggml's quantizer does
  }
}

/// Q4_0/Q5_0: x = d * (q - c); a random sign on d cancels the -0.5 bias of the uniform quants.
template <typename Block> void fillQ4_0(Block *b, uint64_t nb, float sigma, Rng &rng, bool five) {
  float base = sigma / (five ? kRmsQ5_0 : kRmsQ4_0);
  for (uint64_t i = 0; i < nb; ++i) {
    float d = jitter(rng, base);
    b[i].d = fp32ToFp16(rng.next() & 1 ? -d : d);
    randomBytes(rng, b[i].qs, sizeof b[i].qs);
    if constexpr (sizeof(Block) == sizeof(BlockQ5_0))
      randomBytes(rng, b[i].qh, sizeof b[i].qh);
  }
}

/// sqrt(E[v^2]) of IQ4_NL's 16 levels (uniform nibbles).
float rmsIQ4NL() {
  double s = 0;
  for (int8_t v : kIQ4NLValues)
    s += double(v) * v;
  return static_cast<float>(std::sqrt(s / 16));
}

/// IQ4_NL: x = d * values[q], q uniform; the levels' mean is -5.9 of an rms of 65, so a random sign on d
/// cancels the bias (as Q4_0's).
void fillIQ4_NL(BlockIQ4_NL *b, uint64_t nb, float sigma, Rng &rng) {
  const float base = sigma / rmsIQ4NL();
  for (uint64_t i = 0; i < nb; ++i) {
    float d = jitter(rng, base);
    b[i].d = fp32ToFp16(rng.next() & 1 ? -d : d);
    randomBytes(rng, b[i].qs, sizeof b[i].qs);
  }
}

/// IQ4_XS: x = d * (ls - 32) * values[q] with the sub-block factors ls - 32 uniform in [8, 31] and d's sign
/// random per super-block.
void fillIQ4_XS(BlockIQ4_XS *b, uint64_t nb, float sigma, Rng &rng) {
  const float base = sigma / (rmsIQ4NL() * static_cast<float>(std::sqrt(rmsUniformInt(8, 31))));
  for (uint64_t i = 0; i < nb; ++i) {
    float d = jitter(rng, base);
    b[i].d = fp32ToFp16(rng.next() & 1 ? -d : d);
    b[i].scales_h = 0;
    std::memset(b[i].scales_l, 0, sizeof b[i].scales_l);
    for (int ib = 0; ib < kQKK / kQK; ++ib) {
      const int ls = 32 + 8 + static_cast<int>(rng.next() % 24); // 40..63
      b[i].scales_l[ib / 2] |= static_cast<uint8_t>((ls & 0xf) << (4 * (ib % 2)));
      b[i].scales_h |= static_cast<uint16_t>(((ls >> 4) & 3) << (2 * ib));
    }
    randomBytes(rng, b[i].qs, sizeof b[i].qs);
  }
}

/// MXFP4: x = 2^(e-128) values[q] (the doubled E2M1 levels, rms sqrt(548/16)), q uniform; the block
/// exponent is the power of two nearest the target scale, floor or ceil at random so the spread averages
/// out (the levels are symmetric: no sign flip needed). A minimal fill for the gpt-oss presets.
void fillMXFP4(BlockMXFP4 *b, uint64_t nb, float sigma, Rng &rng) {
  const double base = std::log2(double(sigma) / std::sqrt(548.0 / 16));
  for (uint64_t i = 0; i < nb; ++i) {
    const double e = (rng.next() & 1 ? std::ceil(base) : std::floor(base)) + 128;
    b[i].e = static_cast<uint8_t>(std::min(254.0, std::max(1.0, e)));
    randomBytes(rng, b[i].qs, sizeof b[i].qs);
  }
}

float sample(const Init &init, uint64_t elem, Rng &rng) {
  switch (init.kind) {
  case Init::Normal:
    return init.a + init.b * rng.normal();
  case Init::Uniform:
    return init.a + (init.b - init.a) * rng.uniform();
  case Init::RopeFreqs:
    return static_cast<float>(elem) < init.a ? 1.0f : 1e30f;
  }
  return 0.f;
}

} // namespace

bool canFill(GGMLType t) {
  switch (t) {
  case GGMLType::F32:
  case GGMLType::F16:
  case GGMLType::BF16:
  case GGMLType::Q8_0:
  case GGMLType::Q4_0:
  case GGMLType::Q5_0:
  case GGMLType::Q4_K:
  case GGMLType::Q5_K:
  case GGMLType::Q6_K:
  case GGMLType::IQ4_NL:
  case GGMLType::IQ4_XS:
  case GGMLType::MXFP4:
    return true;
  default:
    return false;
  }
}

void fillRows(GGMLType t, const Init &init, uint8_t *dst, uint64_t rows, uint64_t rowElems,
              uint64_t firstElem, Rng &rng) {
  uint64_t n = rows * rowElems;
  switch (t) {
  case GGMLType::F32: {
    float *p = reinterpret_cast<float *>(dst);
    for (uint64_t i = 0; i < n; ++i)
      p[i] = sample(init, firstElem + i, rng);
    return;
  }
  case GGMLType::F16:
  case GGMLType::BF16: {
    uint16_t *p = reinterpret_cast<uint16_t *>(dst);
    for (uint64_t i = 0; i < n; ++i) {
      float v = sample(init, firstElem + i, rng);
      p[i] = t == GGMLType::F16 ? fp32ToFp16(v) : fp32ToBf16(v);
    }
    return;
  }
  default:
    break;
  }

  const GGMLTypeInfo &info = ggmlTypeInfo(t);
  uint64_t nb = n / info.blockElems;
  if (init.kind == Init::Normal && init.a == 0.f) {
    float sigma = init.b;
    switch (t) {
    case GGMLType::Q4_K:
      return fillQ4K(reinterpret_cast<BlockQ4_K *>(dst), nb, sigma, rng, false);
    case GGMLType::Q5_K:
      return fillQ4K(reinterpret_cast<BlockQ5_K *>(dst), nb, sigma, rng, true);
    case GGMLType::Q6_K:
      return fillQ6K(reinterpret_cast<BlockQ6_K *>(dst), nb, sigma, rng);
    case GGMLType::Q8_0:
      return fillQ8_0(reinterpret_cast<BlockQ8_0 *>(dst), nb, sigma, rng);
    case GGMLType::Q4_0:
      return fillQ4_0(reinterpret_cast<BlockQ4_0 *>(dst), nb, sigma, rng, false);
    case GGMLType::Q5_0:
      return fillQ4_0(reinterpret_cast<BlockQ5_0 *>(dst), nb, sigma, rng, true);
    case GGMLType::IQ4_NL:
      return fillIQ4_NL(reinterpret_cast<BlockIQ4_NL *>(dst), nb, sigma, rng);
    case GGMLType::IQ4_XS:
      return fillIQ4_XS(reinterpret_cast<BlockIQ4_XS *>(dst), nb, sigma, rng);
    case GGMLType::MXFP4:
      return fillMXFP4(reinterpret_cast<BlockMXFP4 *>(dst), nb, sigma, rng);
    default:
      break;
    }
  }
  // IQ4_NL / IQ4_XS have no quantizer: any other distribution is a tpc bug (Recipe keeps vectors F32).
  if (t == GGMLType::IQ4_NL || t == GGMLType::IQ4_XS || t == GGMLType::MXFP4)
    throw std::invalid_argument(std::string("synth: ") + ggmlTypeName(t) + " tensors need a zero-mean normal init");
  // Any other distribution: floats through the reference quantizer, row by row.
  std::vector<float> row(rowElems);
  uint64_t rowBytes = rowElems / info.blockElems * info.blockBytes;
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t i = 0; i < rowElems; ++i)
      row[i] = sample(init, firstElem + r * rowElems + i, rng);
    quantizeRow(t, row.data(), dst + r * rowBytes, static_cast<int64_t>(rowElems));
  }
}

} // namespace tpc::synth
