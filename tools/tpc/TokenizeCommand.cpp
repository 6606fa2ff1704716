//===- TokenizeCommand.cpp - `tpc tokenize` -----------------------------------===//
//
// `tpc tokenize model.gguf "text" [--no-special] [--parse-special] [--pieces]`: reads the tokenizer from
// the GGUF metadata and prints the token ids on one line, space-separated (or, with --pieces, one
// "id 'piece'" per line, control characters escaped). BOS/EOS are added as the vocabulary asks unless
// --no-special; --parse-special matches control-token text such as "<|im_end|>" in the input. Only the
// metadata is read, so this works on vocabulary-only GGUF files too.
//===----------------------------------------------------------------------===//
#include "tools/tpc/Command.h"

#include "compiler/gguf/GGUFFile.h"
#include "compiler/tokenizer/GGUFTokenizer.h"
#include "runtime/tokenizer/Tokenizer.h"

#include <fmt/core.h>

#include <memory>

namespace {

/// Options of one `tpc tokenize` invocation.
struct TokenizeOptions {
  std::string model;
  std::string text;
  bool noSpecial = false;
  bool parseSpecial = false;
  bool pieces = false;
};

/// A piece made printable on one line: \n, \t, \r, \\, ' and other control bytes escaped.
std::string escapePiece(const std::string &s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\'':
      out += "\\'";
      break;
    default:
      if (c < 0x20 || c == 0x7F)
        out += fmt::format("\\x{:02x}", c);
      else
        out += static_cast<char>(c);
    }
  }
  return out;
}

void runTokenize(const TokenizeOptions &o) {
  auto file = tpc::gguf::GGUFFile::open(o.model);
  if (!file)
    throw tpc::cli::Failure(file.message());
  auto data = tpc::tokenizerFromGGUF(**file);
  if (!data)
    throw tpc::cli::Failure(data.message());
  tpc::rt::Tokenizer tok(data.take());
  std::vector<tpc::rt::TokenId> ids = tok.encode(o.text, !o.noSpecial, o.parseSpecial);
  if (o.pieces) {
    for (tpc::rt::TokenId id : ids)
      fmt::print("{} '{}'\n", id, escapePiece(tok.tokenToPiece(id, /*special=*/true)));
    return;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i)
    line += (i ? " " : "") + std::to_string(ids[i]);
  fmt::print("{}\n", line);
}

void registerTokenize(CLI::App &app) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App *sub =
      app.add_subcommand("tokenize", "Print the token ids of a text with a GGUF model's tokenizer");
  sub->add_option("model", opts->model, "GGUF file (a vocabulary-only file is enough)")->required();
  sub->add_option("text", opts->text, "text to tokenize")->required();
  sub->add_flag("--no-special", opts->noSpecial, "do not add BOS/EOS");
  sub->add_flag("--parse-special", opts->parseSpecial,
                "match special-token text (e.g. <|im_end|>) in the input");
  sub->add_flag("--pieces", opts->pieces, "print one 'id piece' per line instead of the ids on one line");
  sub->callback([opts] { runTokenize(*opts); });
}

} // namespace

TPC_REGISTER_COMMAND(40, registerTokenize);
