//===- LogProbFile.h - log-probability files of `tpc perplexity` -*- C++ -*-===//
//
// `tpc perplexity --kl-divergence-base FILE` saves the log-probabilities of every scored row of a run; a
// later `--kl-divergence` run over the same tokens compares its own rows against them (KL divergence,
// top-1 agreement). The file holds the tokens too, so the second run evaluates exactly the same chunks.
//
// Format (version 1, little-endian, no padding):
//   offset  0  char[8]   magic "TPCLOGP1"
//           8  u32       version = 1
//          12  u32       n_vocab
//          16  u32       ctx: tokens per chunk
//          20  u32       n_chunks
//          24  u32       first: the first scored position of a chunk (ctx / 2); positions first .. ctx-2
//                        are scored, each predicting the token after it: ctx - 1 - first rows per chunk
//          28  u32       reserved = 0
//          32  i32[n_chunks * ctx]   the evaluated tokens, chunk after chunk (a chunk's first token is the
//                                    BOS it was evaluated with, when the model adds one)
//   then, chunk after chunk, one record per scored row:
//              f32       nll: -log p(next token), computed in float64
//              i32       top: the most likely token (lowest id on ties)
//              f16[n_vocab]  log p(v) for every token v (IEEE half, round to nearest even)
//   size = 32 + 4 n_chunks ctx + n_chunks (ctx - 1 - first) (8 + 2 n_vocab) bytes.
// Half precision keeps the file at the reference's size (2 bytes per token per row) while storing the
// likely tokens finely (relative error 2^-11), which is where the KL divergence has its weight; nll and top
// are stored exactly, so a run compared with its own file has PPL(Q) = PPL(base) and 100% top-1 agreement.
//
// The reader also takes llama-perplexity's own `--kl-divergence-base` files (magic "_logits_": u32 n_ctx,
// i32 n_vocab, i32 n_chunk, i32 tokens[n_ctx n_chunk] as tokenized (BOS not yet substituted), then per
// chunk n_ctx - 1 - n_ctx/2 rows of 2*((n_vocab+1)/2) + 4 u16: f32 scale, f32 min, then n_vocab u16 q with
// log p = scale q + min), so tpc's rows can be compared with the reference engine's.
//
// Usage:
//   LogProbWriter w(path, header);  for each row: w.write(row);   w.finish();
//   LogProbReader r(path);  r.header();  while rows remain: r.read(row);
// Errors are Failure exceptions naming --kl-divergence-base and the file.
//===----------------------------------------------------------------------===//
#ifndef TPC_TOOLS_TPC_LOGPROBFILE_H
#define TPC_TOOLS_TPC_LOGPROBFILE_H

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace tpc::cli {

struct LogProbHeader {
  uint32_t nVocab = 0, ctx = 0, nChunks = 0, first = 0;
  std::vector<int32_t> tokens;   ///< n_chunks * ctx
  /// A llama-perplexity file: its tokens are as tokenized (the caller puts the BOS at each chunk's start)
  /// and its rows hold no nll (the caller takes -logp[next token]).
  bool llamaFormat = false;
  /// Scored rows per chunk.
  uint32_t rowsPerChunk() const { return ctx - 1 - first; }
};

struct LogProbRow {
  float nll = 0; ///< 0 in llama-perplexity files

  int32_t top = 0;
  std::vector<float> logp; ///< n_vocab
};

class LogProbWriter {
public:
  /// Creates `path` and writes the header; Failure when it cannot.
  LogProbWriter(std::string path, const LogProbHeader &h);
  ~LogProbWriter();
  void write(const LogProbRow &row);
  /// Flushes and closes; Failure when the data did not reach the file.
  void finish();

private:
  std::string path_;
  FILE *f_ = nullptr;
  std::vector<uint16_t> buf_;
};

class LogProbReader {
public:
  /// Opens `path` (a tpc or llama-perplexity file) and reads its header; Failure when it is not one.
  explicit LogProbReader(std::string path);
  ~LogProbReader();
  const LogProbHeader &header() const { return h_; }
  /// Reads the next row; Failure when the file ends early.
  void read(LogProbRow &row);

private:
  std::string path_;
  FILE *f_ = nullptr;
  LogProbHeader h_;
  bool llama_ = false;
  std::vector<uint16_t> buf_;
};

} // namespace tpc::cli

#endif // TPC_TOOLS_TPC_LOGPROBFILE_H
