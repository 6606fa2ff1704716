//===- SynthCommand.cpp - `tpc synth` ------------------------------------------===//
//
// `tpc synth --preset NAME [--arch ARCH] [--type TYPE] [--tensor-type 'regex=TYPE,...'] -o model.gguf
// [--seed S] [--layers N] [-t N] [--zeros]`: writes a GGUF with the shapes, metadata and tokenizer of a real
// model and random weights (see compiler/synth/Synth.h; `--zeros` leaves them zero in a sparse file);
// `--list` prints the presets. Plain C++ (no MLIR), so it is built in both modes.
//===----------------------------------------------------------------------===//
#include "tools/tpc/Command.h"

#include "compiler/synth/Synth.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <thread>

namespace {

/// The command line of `tpc synth`.
struct SynthCliOptions {
  tpc::synth::SynthOptions synth;
  std::string output;
  unsigned threads = 0;
  bool list = false;
};

void printPresets() {
  fmt::print("{:<17} {:<9} {:>6} {:>6} {:>8} {:>8}  {}\n", "preset", "arch", "layers", "embd", "experts",
             "vocab", "description");
  for (const tpc::synth::ModelSpec &s : tpc::synth::presets())
    fmt::print("{:<17} {:<9} {:>6} {:>6} {:>8} {:>8}  {}\n", s.preset, s.arch, s.nLayer, s.nEmbd,
               s.nExpert ? fmt::format("{}/{}", s.nExpertUsed, s.nExpert) : "-", s.nVocab, s.description);
  fmt::print("types: {}\n", tpc::synth::weightTypeNames());
}

void runSynth(const SynthCliOptions &o) {
  if (o.list) {
    printPresets();
    return;
  }
  if (o.synth.preset.empty())
    throw tpc::cli::Failure("--preset is required (one of " + tpc::synth::presetNames() + ")");
  if (o.output.empty())
    throw tpc::cli::Failure("-o/--output is required (the GGUF file to write)");
  auto s = tpc::synth::Synthesizer::create(o.synth);
  if (!s)
    throw tpc::cli::Failure(s.message());
  unsigned threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  auto start = std::chrono::steady_clock::now();
  auto ok = s->write(o.output, threads);
  if (!ok)
    throw tpc::cli::Failure(ok.message());
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const tpc::synth::ModelSpec &m = s->spec();
  double gib = static_cast<double>(s->fileSize()) / (1024.0 * 1024 * 1024);
  fmt::print("wrote {}: {} ({}, {} layers), {} {}, {} tensors, {:.3f} B parameters, {:.2f} GiB in {:.1f} s "
             "({} threads, {:.2f} GiB/s)\n",
             o.output, m.preset, m.arch, m.nLayer,
             s->weightType().name + (o.synth.tensorTypes.empty() ? "" : " + --tensor-type rules"),
             o.synth.zeros ? std::string("zeros") : fmt::format("seed {}", o.synth.seed),
             s->tensors().size(), static_cast<double>(s->parameterCount()) / 1e9, gib, secs, threads,
             secs > 0 ? gib / secs : 0.0);
}

void registerSynth(CLI::App &app) {
  auto o = std::make_shared<SynthCliOptions>();
  CLI::App *cmd = app.add_subcommand(
      "synth", "Write a GGUF model with a real architecture's shapes and random weights (benchmarks, tests)");
  cmd->add_option("--preset", o->synth.preset, "model shape: " + tpc::synth::presetNames());
  cmd->add_option("--arch", o->synth.arch, "architecture (optional; must match the preset)");
  cmd->add_option("--type", o->synth.type, "weight type: " + tpc::synth::weightTypeNames())
      ->capture_default_str();
  cmd->add_option("--tensor-type", o->synth.tensorTypes,
                  "per-tensor types on top of --type, as llama-quantize's --custom-q (ik_llama.cpp; mainline's "
                  "--tensor-type): a comma list of regex=TYPE, each regex (ECMAScript) searched anywhere in "
                  "the GGUF tensor name, the first matching rule wins; only weight matrices (vectors, "
                  "ffn_gate_inp and ssm_conv1d stay F32); rows that are not whole blocks of TYPE fall back "
                  "as llama-quantize does. A rule that types no tensor is an error. Example: "
                  "--type Q8_0 --tensor-type '_exps=MXFP4' (gpt-oss style)");
  cmd->add_option("-o,--output", o->output, "GGUF file to write");
  cmd->add_option("--seed", o->synth.seed, "random seed (same seed, same file)")->capture_default_str();
  cmd->add_option("--layers", o->synth.layers, "keep only the first N layers (same layer shapes)");
  cmd->add_option("-t,--threads", o->threads, "fill threads (0 = all cores)")->capture_default_str();
  cmd->add_flag("--zeros", o->synth.zeros,
                "leave the weights zero and unwritten (a sparse file of real shapes, for compile tests)");
  cmd->add_flag("--list", o->list, "list the presets and types");
  cmd->callback([o] { runSynth(*o); });
}

} // namespace

TPC_REGISTER_COMMAND(50, registerSynth);
