//===- ModelSource.cpp - a plan file, or a GGUF compiled in memory --------===//
//
// The compile flags shared by `tpc compile`, `tpc run` and `tpc serve`, their checks (moved here from the
// compile command, unchanged), the file-kind test, and the choice between loading a plan and compiling a
// GGUF. Plain C++ and CLI11: built with and without the compiler.
//===----------------------------------------------------------------------===//
#include "tools/tpc/ModelSource.h"

#include "runtime/plan/PlanIO.h"
#include "tools/tpc/Command.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

#include <sys/stat.h>

namespace tpc::cli {

namespace {
/// "3,2,1" -> {3, 2, 1}: one positive share per device (devices < 0: as many devices as shares, up to 64).
std::vector<double> parseTensorSplit(const std::string &text, int64_t devices) {
  std::vector<double> shares;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char *end = nullptr;
    double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(v > 0))
      throw Failure(fmt::format("--tensor-split: '{}' is not a positive number (expected e.g. 3,2,1)", item));
    shares.push_back(v);
  }
  if (devices < 0 && shares.size() > 64)
    throw Failure(fmt::format("--tensor-split: {} shares, but at most 64 devices", shares.size()));
  if (devices >= 0 && int64_t(shares.size()) != devices)
    throw Failure(fmt::format("--tensor-split: {} shares given for --devices {} (one per device)",
                              shares.size(), devices));
  return shares;
}

/// The entries of every --override-tensor value, each `REGEX=cpu` with the target lower-cased. A value may
/// be a comma-separated list, as llama.cpp's -ot takes it; a comma inside a regex (`[0-9]{1,3}`) stays,
/// because an entry ends only at a comma that follows `=WORD`. Throws naming the entry that is not REGEX=cpu.
std::vector<std::string> overrideEntries(const std::vector<std::string> &values) {
  auto endsInTarget = [](const std::string &e) {
    size_t eq = e.rfind('=');
    return eq != std::string::npos && eq + 1 < e.size() &&
           std::all_of(e.begin() + eq + 1, e.end(), [](char c) { return std::isalnum(uint8_t(c)) || c == '_'; });
  };
  std::vector<std::string> entries;
  for (const std::string &v : values) {
    std::string cur;
    std::istringstream in(v);
    for (std::string piece; std::getline(in, piece, ',');) {
      cur = cur.empty() ? piece : cur + "," + piece;
      if (endsInTarget(cur)) {
        entries.push_back(cur);
        cur.clear();
      }
    }
    if (!cur.empty() || v.empty() || v.back() == ',')
      entries.push_back(cur); // an incomplete entry: refused below, by name
  }
  for (std::string &e : entries) {
    size_t eq = e.rfind('=');
    std::string target = eq == std::string::npos ? "" : e.substr(eq + 1);
    std::transform(target.begin(), target.end(), target.begin(), [](char c) { return std::tolower(uint8_t(c)); });
    if (eq == std::string::npos || eq == 0)
      throw Failure(fmt::format("--override-tensor: '{}' must be REGEX=cpu", e));
    if (target != "cpu")
      throw Failure(fmt::format("--override-tensor: '{}': the only target is cpu (host memory); weights not "
                                "named stay on the devices the plan splits them over",
                                e));
    e = e.substr(0, eq + 1) + target;
  }
  return entries;
}
} // namespace

void addCompileFlags(CLI::App &cmd, CompileFlags &f) {
  f.devicesOption =
      cmd.add_option("--devices", f.devices,
                     "Number of devices to split the model over (default: 1, or one per --tensor-split share)")
          ->check(CLI::Range(int64_t(1), int64_t(64)));
  f.options = {
      f.devicesOption,
      cmd.add_option("--tensor-split", f.tensorSplit, "Relative share of each device, e.g. 3,2,1 (also -ts)"),
      cmd.add_option("--override-tensor", f.overrideTensor,
                     "REGEX=cpu[,REGEX=cpu...]: keep the weights whose GGUF name matches on the host "
                     "(repeatable; also -ot)"),
      cmd.add_flag("--no-kv-offload", f.noKvOffload, "Keep the KV cache in host memory (also -nkvo)"),
      cmd.add_option("--cache-type-k", f.cacheTypeK,
                     "Storage of the attention caches' keys: f16 (default), q8_0, q4_0 (blocks of 32 values "
                     "along each head: half / a quarter of f16's bytes, head dims multiples of 32) or f32 "
                     "(also -ctk; recurrent DeltaNet states stay f32)")
          ->check(CLI::IsMember({"f16", "q8_0", "q4_0", "f32"})),
      cmd.add_option("--cache-type-v", f.cacheTypeV,
                     "Storage of the attention caches' values: f16 (default), q8_0, q4_0 or f32 (also -ctv)")
          ->check(CLI::IsMember({"f16", "q8_0", "q4_0", "f32"})),
      cmd.add_option("--max-batch", f.maxBatch, "Tokens per evaluation the activation arenas hold")
          ->check(CLI::Range(int64_t(1), int64_t(1) << 20)),
      cmd.add_option(
             "--max-output-rows", f.maxOutputRows,
             "Logits rows per evaluation the arenas hold (capped at --max-batch; a request for more rows, "
             "e.g. every row of a long prompt, runs in chunks)")
          ->capture_default_str()
          ->check(CLI::Range(int64_t(1), int64_t(1) << 20)),
      cmd.add_option(
             "--moe-split", f.moeSplit,
             "How MoE layers split: auto (default: per layer, the cheaper at decode under uniform "
             "routing; then whole experts where the intermediate split would leave a device's weights "
             "more than 5% off its share), intermediate (every expert's intermediate dimension) or "
             "expert (whole experts per device, in proportion to --tensor-split)")
          ->check(CLI::IsMember({"auto", "intermediate", "expert"})),
      cmd.add_option("--stages", f.stages,
                     "Pipeline stages: each runs a contiguous range of layers split over --devices / --stages "
                     "devices, handing the hidden state to the next (default 1)"),
      cmd.add_option("--stage-layers", f.stageLayers,
                     "With --stages: layers per stage, e.g. 20,28 (default: balanced by weight bytes)"),
      cmd.add_option(
          "--routing-profile", f.routingProfile,
          "With --moe-split auto: per MoE layer, the tokens routed to each expert ('blk.N: c0 c1 ...' "
          "lines, # comments) instead of uniform routing"),
  };
  f.commDtypeOption =
      cmd.add_option("--comm-dtype", f.commDtype,
                     "All-reduce payloads on the wire between devices: f32 (default) or bf16 (half the "
                     "bytes, summed in f32; for slow links between hosts, docs/multi-process.md). Recorded "
                     "by compile; overrides the plan's when running")
          ->check(CLI::IsMember({"f32", "bf16"}));
}

std::optional<rt::CommDtype> commDtypeOverride(const CompileFlags &f) {
  if (!f.commDtypeOption || f.commDtypeOption->count() == 0)
    return std::nullopt;
  return f.commDtype == "bf16" ? rt::CommDtype::BF16 : rt::CommDtype::F32;
}

CompileRequest checkCompileFlags(const CompileFlags &f) {
  CompileRequest r;
  r.devices = f.devices;
  if (!f.tensorSplit.empty()) {
    // As with llama.cpp's -ts, the shares alone say how many devices there are.
    const bool devicesGiven = f.devicesOption && f.devicesOption->count() > 0;
    r.tensorSplit = parseTensorSplit(f.tensorSplit, devicesGiven ? f.devices : -1);
    r.devices = int64_t(r.tensorSplit.size());
  }
  r.overrideTensor = overrideEntries(f.overrideTensor);
  r.noKvOffload = f.noKvOffload;
  r.maxBatch = f.maxBatch;
  r.maxOutputRows = f.maxOutputRows;
  r.moeSplit = f.moeSplit;
  r.routingProfile = f.routingProfile;
  // CLI11 checked the names; ggmlTypeFromName knows each of them.
  r.cacheTypeK = ggmlTypeFromName(f.cacheTypeK).value_or(GGMLType::F16);
  r.cacheTypeV = ggmlTypeFromName(f.cacheTypeV).value_or(GGMLType::F16);
  r.commDtype = f.commDtype == "bf16" ? rt::CommDtype::BF16 : rt::CommDtype::F32; // CLI11 checked the name
  checkStageFlags(f, r);
  return r;
}

std::string givenCompileFlag(const CompileFlags &f) {
  for (const CLI::Option *o : f.options)
    if (o && o->count() > 0)
      return o->get_name();
  return "";
}

FileKind detectFileKind(const std::string &path, std::string &head) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw Failure(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    throw Failure(fmt::format("{}: not a regular file (give the path of a GGUF model)", path));
  std::unique_ptr<FILE, int (*)(FILE *)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f)
    throw Failure(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  char buf[8] = {};
  size_t n = std::fread(buf, 1, sizeof buf, f.get());
  head.assign(buf, n);
  if (n >= 4 && std::memcmp(buf, "GGUF", 4) == 0)
    return FileKind::GGUF;
  if (n == sizeof rt::kPlanMagic && std::memcmp(buf, rt::kPlanMagic, sizeof buf) == 0)
    return FileKind::Plan;
  return FileKind::Unknown;
}

std::string hexBytes(const std::string &s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 4; ++i)
    out += fmt::format("{}{:02x}", i ? " " : "", static_cast<unsigned char>(s[i]));
  return out.empty() ? "none: the file is empty" : out;
}

rt::Plan loadModel(const std::string &path, const CompileFlags &flags, const std::string &ggufOverride,
                   Timeline *timeline) {
  std::string head;
  switch (detectFileKind(path, head)) {
  case FileKind::Plan: {
    if (std::string f = givenCompileFlag(flags); !f.empty())
      throw Failure(fmt::format("{}: '{}' is a compiled plan, so its compile flags are fixed; {} applies when "
                                "running a GGUF (or recompile the plan with `tpc compile ... {}`)",
                                f, path, f, f));
    auto plan = rt::loadPlan(path);
    if (!plan)
      throw Failure(plan.message());
    markPhase(timeline, "plan load");
    return std::move(*plan);
  }
  case FileKind::GGUF: {
    if (!ggufOverride.empty())
      throw Failure(fmt::format("--gguf names the GGUF a plan was compiled from, but '{}' is a GGUF itself; "
                                "drop --gguf",
                                path));
    const CompileRequest request = checkCompileFlags(flags);
    auto plan = compileGgufToPlan(path, request);
    if (!plan)
      throw Failure(plan.message());
    markPhase(timeline, "compile");
    return std::move(*plan);
  }
  case FileKind::Unknown:
    break;
  }
  throw Failure(fmt::format("{}: neither a GGUF model (magic 'GGUF') nor a tpc plan (magic 'TPCPLAN1'); "
                            "first bytes: {}",
                            path, hexBytes(head)));
}

#ifndef TPC_HAS_COMPILER
Expected<rt::Plan> compileGgufToPlan(const std::string &gguf, const CompileRequest &) {
  return Error{fmt::format("{} is a GGUF, and this tpc was built without the compiler (TPC_ENABLE_COMPILER=OFF); "
                           "compile it into a plan where tpc has the compiler (`tpc compile {} -o plan.bin`) "
                           "and run the plan",
                           gguf, gguf)};
}
#endif

} // namespace tpc::cli
