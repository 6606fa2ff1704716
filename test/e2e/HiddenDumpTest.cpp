//===- HiddenDumpTest.cpp - `tpc run --dump-hidden` on the fixtures ---------===//
//
// The per-layer hidden-state dump (tools/tpc/HiddenDump.h) of F32 fixtures (tiny-llama: untied output;
// tiny-gemma4moe: tied, soft-capped, MoE, layer-output scale) through the CLI:
//  - one record per (chunk, layer) for every layer of the GGUF, rows of embedding_length values, as many
//    rows per layer as --dump-logits rows;
//  - 1 and 2 devices agree layer by layer within the N-vs-1 bound (1e-4 of the layer's max |h|; with f32
//    KV caches, FidelityTest.cpp says why);
//  - the last layer's rows are what the output head reads: rms_norm(h) * output_norm, times the output (or
//    tied embedding) matrix, soft-capped where the model says, recomputed here in double from the GGUF,
//    equal the run's --dump-logits rows within 1e-4 of their scale;
//  - scripts/compare-hidden.py passes a 1-vs-2 pair and names the first layer where an f16-cache run
//    departs from an f32-cache one;
//  - a path that cannot be written is a one-line error naming the flag and the path.
//===----------------------------------------------------------------------===//
#include "compiler/gguf/GGUFFile.h"
#include "test/common/FixtureCheck.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <unistd.h>

namespace {

const std::string kTpc = std::string(TPC_BINARY_DIR) + "/bin/tpc";

struct Layer {
  int32_t width = 0;
  std::vector<float> rows; ///< every record's rows, in file order
};

/// Reads a dump whole; fails the test on a malformed file.
std::map<int32_t, Layer> readDump(const std::string &path) {
  std::map<int32_t, Layer> layers;
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  EXPECT_TRUE(in && std::memcmp(magic, "TPCHID01", 8) == 0) << path << ": no TPCHID01 magic";
  int32_t head[4];
  while (in.read(reinterpret_cast<char *>(head), sizeof(head))) {
    Layer &l = layers[head[0]];
    EXPECT_TRUE(l.width == 0 || l.width == head[3]) << path << " layer " << head[0];
    l.width = head[3];
    const size_t at = l.rows.size(), n = size_t(head[2]) * size_t(head[3]);
    l.rows.resize(at + n);
    in.read(reinterpret_cast<char *>(l.rows.data() + at), std::streamsize(n * 4));
    EXPECT_TRUE(in) << path << ": truncated record of layer " << head[0];
  }
  return layers;
}

/// The fixture's prompt as --prompt-ids.
std::string promptIds(const tpc::test::FixtureReference &ref) {
  std::string ids;
  for (size_t i = 0; i < ref.prompt.size(); ++i)
    ids += (i ? "," : "") + std::to_string(ref.prompt[i]);
  return ids;
}

std::string tmp(const std::string &tag) {
  return ::testing::TempDir() + "tpc-hidden-" + std::to_string(::getpid()) + "-" + tag;
}

/// F32 tensor `name` of the GGUF as floats (empty when absent).
std::vector<float> f32Tensor(const tpc::gguf::GGUFFile &g, const std::string &name) {
  const tpc::gguf::TensorInfo *t = g.findTensor(name);
  if (!t || t->type != tpc::GGMLType::F32)
    return {};
  std::vector<float> v(t->nelements);
  std::memcpy(v.data(), g.tensorData(*t), v.size() * 4);
  return v;
}

class HiddenDump : public ::testing::TestWithParam<std::string> {};

TEST_P(HiddenDump, LayersAgreeAcrossDevicesAndTheLastFeedsTheHead) {
  const std::string model = GetParam();
  const char *shared = std::getenv("TPC_SHARED_DIR");
  const std::string dir = shared ? std::string(shared) + "/fixtures" : "";
  const std::string path = dir + "/" + model + ".gguf";
  if (!shared || !std::ifstream(path))
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures/" << model << ".gguf not found; set TPC_SHARED_DIR to ../shared";
  const tpc::test::FixtureReference ref = tpc::test::readFixtureReference(dir + "/" + model);
  ASSERT_TRUE(ref.ok) << ref.error;
  auto gguf = tpc::gguf::GGUFFile::open(path);
  ASSERT_TRUE(gguf) << gguf.message();
  const tpc::gguf::GGUFFile &g = **gguf;
  auto arch = g.getString("general.architecture");
  ASSERT_TRUE(arch) << arch.message();
  auto nLayer = g.getU32(*arch + ".block_count");
  auto nEmbd = g.getU32(*arch + ".embedding_length");
  auto eps = g.getF32(*arch + ".attention.layer_norm_rms_epsilon");
  ASSERT_TRUE(nLayer && nEmbd && eps);
  const float cap = g.getF32(*arch + ".final_logit_softcapping") ? *g.getF32(*arch + ".final_logit_softcapping") : 0;

  std::map<int, std::map<int32_t, Layer>> dumps; // by device count
  std::vector<float> logits1;
  for (int devices : {1, 2}) {
    const std::string plan = tmp(std::to_string(devices) + ".plan"), dump = tmp(std::to_string(devices) + ".bin"),
                      lg = tmp(std::to_string(devices) + ".f32");
    auto [crc, cout] = tpc::test::runShell(kTpc + " compile " + path + " --devices " + std::to_string(devices) +
                                           " -o " + plan + " 2>&1");
    ASSERT_EQ(crc, 0) << cout;
    const std::string cmd = kTpc + " run " + plan + " --prompt-ids " + promptIds(ref) + " --greedy -n 4 -t 2 " +
                            "--f32-kv --dump-hidden " + dump + " --dump-logits " + lg;
    auto [rc, out] = tpc::test::runShell(cmd + " 2>&1");
    ASSERT_EQ(rc, 0) << cmd << "\n" << out;
    dumps[devices] = readDump(dump);
    if (devices == 1)
      logits1 = tpc::test::readFloats(lg);
    std::remove(plan.c_str());
    std::remove(dump.c_str());
    std::remove(lg.c_str());
  }

  const size_t nVocab = size_t(ref.nVocab), rowsWanted = logits1.size() / nVocab;
  ASSERT_EQ(rowsWanted, ref.prompt.size() + 4); // the prompt's rows, then one per fed token
  for (int devices : {1, 2}) {
    ASSERT_EQ(dumps[devices].size(), size_t(*nLayer)) << devices << " device(s)";
    for (const auto &[l, layer] : dumps[devices]) {
      EXPECT_EQ(layer.width, int32_t(*nEmbd)) << "layer " << l;
      EXPECT_EQ(layer.rows.size(), rowsWanted * size_t(*nEmbd)) << "layer " << l;
    }
  }
  for (int32_t l = 0; l < int32_t(*nLayer); ++l) {
    const std::vector<float> &a = dumps[1][l].rows, &b = dumps[2][l].rows;
    double scale = 0;
    for (float v : a)
      scale = std::max(scale, std::fabs(double(v)));
    ::testing::AssertionResult r = tpc::test::allWithin(b, a, 1e-4 * std::max(1.0, scale));
    EXPECT_TRUE(r) << model << " layer " << l << ", 2 devices vs 1";
    std::printf("[ hidden   ] %s layer %d, 2 devices vs 1: %s\n", model.c_str(), l, r.message());
  }

  // The head on the last layer's rows, in double, from the GGUF's own tensors.
  const std::vector<float> norm = f32Tensor(g, "output_norm.weight");
  std::vector<float> out = f32Tensor(g, "output.weight");
  if (out.empty())
    out = f32Tensor(g, "token_embd.weight"); // tied
  ASSERT_EQ(norm.size(), size_t(*nEmbd));
  ASSERT_EQ(out.size(), nVocab * *nEmbd);
  const std::vector<float> &h = dumps[1][int32_t(*nLayer) - 1].rows;
  std::vector<float> head(logits1.size());
  const size_t E = *nEmbd;
  for (size_t r = 0; r < rowsWanted; ++r) {
    double ss = 0;
    for (size_t i = 0; i < E; ++i)
      ss += double(h[r * E + i]) * h[r * E + i];
    const double k = 1.0 / std::sqrt(ss / double(E) + double(*eps));
    for (size_t v = 0; v < nVocab; ++v) {
      double z = 0;
      for (size_t i = 0; i < E; ++i)
        z += double(h[r * E + i]) * k * norm[i] * out[v * E + i];
      head[r * nVocab + v] = float(cap > 0 ? cap * std::tanh(z / cap) : z);
    }
  }
  double scale = 0;
  for (float v : logits1)
    scale = std::max(scale, std::fabs(double(v)));
  ::testing::AssertionResult r = tpc::test::allWithin(head, logits1, 1e-4 * std::max(1.0, scale));
  EXPECT_TRUE(r) << model << ": the head recomputed from the last layer's dump vs --dump-logits";
  std::printf("[ hidden   ] %s head from the last layer vs the logits: %s\n", model.c_str(), r.message());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HiddenDump, ::testing::Values("tiny-llama", "tiny-gemma4moe"),
                         tpc::test::fixtureParamName);

TEST(HiddenDumpCli, CompareScriptFindsTheFirstDepartingLayer) {
  const char *shared = std::getenv("TPC_SHARED_DIR");
  const std::string path = shared ? std::string(shared) + "/fixtures/tiny-llama.gguf" : "";
  if (!shared || !std::ifstream(path))
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures/tiny-llama.gguf not found; set TPC_SHARED_DIR to ../shared";
  const std::string script = std::string(TPC_SOURCE_DIR) + "/scripts/compare-hidden.py";
  const std::string base = kTpc + " run " + path + " --prompt-ids 1,2,3,4,5 -n 2 -t 2 --dump-hidden ";
  const std::string a = tmp("a.bin"), b = tmp("b.bin"), c = tmp("c.bin");
  ASSERT_EQ(tpc::test::runShell(base + a + " --f32-kv 2>&1").first, 0);
  ASSERT_EQ(tpc::test::runShell(base + b + " --f32-kv --devices 2 2>&1").first, 0);
  ASSERT_EQ(tpc::test::runShell(base + c + " 2>&1").first, 0);
  auto [same, sameOut] = tpc::test::runShell("python3 " + script + " " + a + " " + b + " --max-rel 1e-5 2>&1");
  EXPECT_EQ(same, 0) << sameOut;
  EXPECT_NE(sameOut.find("    3 "), std::string::npos) << sameOut; // a row for the last of the 4 layers
  // With the f16 cache the run parts from the f32-cache one at the first layer's attention already.
  auto [diff, diffOut] = tpc::test::runShell("python3 " + script + " " + a + " " + c + " --max-rel 1e-5 2>&1");
  EXPECT_EQ(diff, 1) << diffOut;
  EXPECT_NE(diffOut.find("is the first with rel > 1e-05"), std::string::npos) << diffOut;
  // The float32 reference dumps through the same observer: all four layers, comparable with the others.
  const std::string d = tmp("d.bin");
  ASSERT_EQ(tpc::test::runShell(base + d + " --f32-reference 2>&1").first, 0);
  auto [ref32, ref32Out] = tpc::test::runShell("python3 " + script + " " + d + " " + a + " 2>&1");
  EXPECT_EQ(ref32, 0) << ref32Out;
  EXPECT_NE(ref32Out.find("    3 "), std::string::npos) << ref32Out;
  auto [bad, badOut] = tpc::test::runShell("python3 " + script + " " + a + " " + tmp("missing.bin") + " 2>&1");
  EXPECT_NE(bad, 0);
  EXPECT_NE(badOut.find("cannot read"), std::string::npos) << badOut;
  for (const std::string &f : {a, b, c, d})
    std::remove(f.c_str());
}

TEST(HiddenDumpCli, UnwritablePathIsOneLineNamingTheFlag) {
  const char *shared = std::getenv("TPC_SHARED_DIR");
  const std::string path = shared ? std::string(shared) + "/fixtures/tiny-llama.gguf" : "";
  if (!shared || !std::ifstream(path))
    GTEST_SKIP() << "TPC_SHARED_DIR/fixtures/tiny-llama.gguf not found; set TPC_SHARED_DIR to ../shared";
  auto [rc, out] = tpc::test::runShell(kTpc + " run " + path +
                                       " --prompt-ids 1,2 -n 1 --dump-hidden /nonexistent-dir/h.bin 2>&1");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--dump-hidden: cannot write '/nonexistent-dir/h.bin'"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

} // namespace
