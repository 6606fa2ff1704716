//===- FixtureReference.h - the shared fixtures' reference data ---*- C++ -*-===//
//
// Reads NAME.ref.json and NAME.logits.f32 of ../shared/fixtures (see its README): the prompt, the greedy
// ids, the tolerances and the reference logits rows. One reader for every test that compares against the
// fixtures (executor, end-to-end, CUDA). The JSON is read with a small scanner for the few fields needed:
// integer arrays and numbers at known keys. The reader checks the files against each other (rows, n_vocab,
// the logits file's size, tolerances present), so a damaged or misread reference is an error, not a check
// that compares nothing.
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_COMMON_FIXTUREREFERENCE_H
#define TPC_TEST_COMMON_FIXTUREREFERENCE_H

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace tpc::test {

struct FixtureReference {
  std::vector<int32_t> prompt, greedy;
  std::vector<float> logits; ///< rows x n_vocab: one row per prompt position, then one per decode step
  size_t nVocab = 0;
  float tolMax = NAN, tolRms = NAN;
  int strictPrefix = 0;
  bool f32 = false;  ///< "weights": "F32"
  bool ok = false;   ///< both files read and consistent
  std::string error; ///< why not ok: names the file and the field

  /// Rows of the reference layout: the prompt, then one per greedy id.
  size_t rows() const { return prompt.size() + greedy.size(); }
};

/// Reads `base`.ref.json and `base`.logits.f32 (base = fixtures dir + "/" + name).
inline FixtureReference readFixtureReference(const std::string &base) {
  FixtureReference r;
  std::ifstream js(base + ".ref.json");
  std::string text((std::istreambuf_iterator<char>(js)), {});
  auto intArray = [&](const std::string &key) {
    std::vector<int32_t> v;
    size_t at = text.find("\"" + key + "\"");
    if (at == std::string::npos)
      return v;
    size_t b = text.find('[', at), e = text.find(']', b);
    if (b == std::string::npos || e == std::string::npos)
      return v;
    std::string body = text.substr(b + 1, e - b - 1);
    for (char *p = body.data(); *p;) {
      char *end;
      long x = std::strtol(p, &end, 10);
      if (end == p) {
        ++p;
        continue;
      }
      v.push_back(static_cast<int32_t>(x));
      p = end;
    }
    return v;
  };
  auto number = [&](const std::string &key) {
    size_t at = text.find("\"" + key + "\"");
    if (at == std::string::npos)
      return NAN;
    size_t colon = text.find(':', at);
    return colon == std::string::npos ? NAN : std::strtof(text.c_str() + colon + 1, nullptr);
  };
  r.prompt = intArray("prompt_ids");
  r.greedy = intArray("greedy_ids");
  r.tolMax = number("tol_max_abs");
  r.tolRms = number("tol_rms");
  float prefix = number("greedy_strict_prefix");
  r.strictPrefix = std::isnan(prefix) ? 0 : static_cast<int>(prefix);
  r.f32 = text.find("\"weights\": \"F32\"") != std::string::npos;
  const float vocab = number("n_vocab"), rows = number("rows"), nGen = number("n_gen");
  r.nVocab = std::isnan(vocab) ? 0 : static_cast<size_t>(vocab);
  auto fail = [&](const std::string &why) {
    r.error = why;
    return r;
  };
  if (text.empty())
    return fail(base + ".ref.json: cannot read");
  if (r.prompt.empty() || r.greedy.empty() || r.nVocab == 0 || std::isnan(rows) || std::isnan(nGen))
    return fail(base + ".ref.json: prompt_ids, greedy_ids, n_vocab, rows or n_gen missing");
  if (r.greedy.size() != static_cast<size_t>(nGen) || r.rows() != static_cast<size_t>(rows))
    return fail(base + ".ref.json: " + std::to_string(r.prompt.size()) + " prompt ids and " +
                std::to_string(r.greedy.size()) + " greedy ids do not match rows " + std::to_string(int(rows)) +
                " and n_gen " + std::to_string(int(nGen)));
  // A strict prefix of 0 is valid: the first greedy row is already ambiguous (tiny-llama-Q3_K_M: top-2
  // margin 0.0127 below ambiguity_margin 0.1), so only the teacher-forced rows compare (README, How to
  // compare); a missing key reads as NaN and still fails.
  if (!(r.tolMax > 0) || !(r.tolRms > 0) || std::isnan(prefix) || r.strictPrefix < 0 ||
      size_t(r.strictPrefix) > r.greedy.size())
    return fail(base + ".ref.json: tol_max_abs, tol_rms or greedy_strict_prefix missing or out of range");
  std::ifstream lf(base + ".logits.f32", std::ios::binary);
  if (!lf)
    return fail(base + ".logits.f32: cannot read");
  lf.seekg(0, std::ios::end);
  const size_t bytes = static_cast<size_t>(lf.tellg());
  if (bytes != r.rows() * r.nVocab * 4)
    return fail(base + ".logits.f32: " + std::to_string(bytes) + " bytes, expected rows x n_vocab x 4 = " +
                std::to_string(r.rows() * r.nVocab * 4));
  r.logits.resize(bytes / 4);
  lf.seekg(0);
  lf.read(reinterpret_cast<char *>(r.logits.data()), static_cast<std::streamsize>(bytes));
  if (!lf)
    return fail(base + ".logits.f32: read failed");
  r.ok = true;
  return r;
}

} // namespace tpc::test

#endif // TPC_TEST_COMMON_FIXTUREREFERENCE_H
