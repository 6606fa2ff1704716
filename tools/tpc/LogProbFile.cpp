//===- LogProbFile.cpp - log-probability files of `tpc perplexity` ----------===//
//
// See LogProbFile.h for both formats. Fields are read one by one (no struct overlays) and every count is
// checked against the file size before anything is allocated: a base file is user input.
//===----------------------------------------------------------------------===//
#include "tools/tpc/LogProbFile.h"

#include "runtime/ggml/Blocks.h"
#include "tools/tpc/Command.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>

namespace tpc::cli {

namespace {
constexpr char kMagic[8] = {'T', 'P', 'C', 'L', 'O', 'G', 'P', '1'};
constexpr char kLlamaMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
constexpr uint32_t kVersion = 1;

std::string where(const std::string &path) { return fmt::format("--kl-divergence-base '{}'", path); }

uint64_t fileSize(FILE *f) {
  std::fseek(f, 0, SEEK_END);
  const long n = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  return n < 0 ? 0 : static_cast<uint64_t>(n);
}
} // namespace

LogProbWriter::LogProbWriter(std::string path, const LogProbHeader &h) : path_(std::move(path)) {
  if (h.tokens.size() != uint64_t(h.nChunks) * h.ctx || h.first + 1 >= h.ctx)
    throw Failure(where(path_) + ": inconsistent header (a tpc bug)");
  f_ = std::fopen(path_.c_str(), "wb");
  if (!f_)
    throw Failure(where(path_) + ": cannot create the file");
  const uint32_t fields[6] = {kVersion, h.nVocab, h.ctx, h.nChunks, h.first, 0};
  std::fwrite(kMagic, 1, 8, f_);
  std::fwrite(fields, 4, 6, f_);
  std::fwrite(h.tokens.data(), 4, h.tokens.size(), f_);
  buf_.resize(h.nVocab);
}

LogProbWriter::~LogProbWriter() {
  if (f_)
    std::fclose(f_);
}

void LogProbWriter::write(const LogProbRow &row) {
  for (size_t i = 0; i < buf_.size(); ++i)
    buf_[i] = fp32ToFp16(row.logp[i]);
  std::fwrite(&row.nll, 4, 1, f_);
  std::fwrite(&row.top, 4, 1, f_);
  if (std::fwrite(buf_.data(), 2, buf_.size(), f_) != buf_.size())
    throw Failure(where(path_) + ": write failed (disk full?)");
}

void LogProbWriter::finish() {
  const bool ok = std::ferror(f_) == 0 && std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok)
    throw Failure(where(path_) + ": write failed (disk full?)");
}

LogProbReader::LogProbReader(std::string path) : path_(std::move(path)) {
  f_ = std::fopen(path_.c_str(), "rb");
  if (!f_)
    throw Failure(where(path_) + ": cannot open the file (write one first with --kl-divergence-base "
                                 "and no --kl-divergence)");
  const uint64_t size = fileSize(f_);
  char magic[8] = {};
  if (std::fread(magic, 1, 8, f_) != 8 ||
      (std::memcmp(magic, kMagic, 8) != 0 && std::memcmp(magic, kLlamaMagic, 8) != 0))
    throw Failure(where(path_) + ": not a log-probability file (no TPCLOGP1 or _logits_ magic)");
  llama_ = std::memcmp(magic, kLlamaMagic, 8) == 0;
  uint64_t rowBytes = 0, headerBytes = 0;
  if (llama_) {
    uint32_t nCtx = 0;
    int32_t nVocab = 0, nChunk = 0;
    if (std::fread(&nCtx, 4, 1, f_) != 1 || std::fread(&nVocab, 4, 1, f_) != 1 || std::fread(&nChunk, 4, 1, f_) != 1)
      throw Failure(where(path_) + ": truncated header");
    if (nVocab <= 0 || nChunk <= 0 || nCtx < 4)
      throw Failure(where(path_) + fmt::format(": bad header (n_ctx {}, n_vocab {}, n_chunk {})", nCtx, nVocab, nChunk));
    h_.nVocab = static_cast<uint32_t>(nVocab);
    h_.ctx = nCtx;
    h_.nChunks = static_cast<uint32_t>(nChunk);
    h_.first = nCtx / 2;
    h_.llamaFormat = true;
    rowBytes = 2 * (2 * ((uint64_t(h_.nVocab) + 1) / 2) + 4);
    headerBytes = 20;
  } else {
    uint32_t fields[6] = {};
    if (std::fread(fields, 4, 6, f_) != 6)
      throw Failure(where(path_) + ": truncated header");
    if (fields[0] != kVersion)
      throw Failure(where(path_) + fmt::format(": version {} (this tpc reads version {})", fields[0], kVersion));
    h_.nVocab = fields[1];
    h_.ctx = fields[2];
    h_.nChunks = fields[3];
    h_.first = fields[4];
    if (h_.nVocab == 0 || h_.nChunks == 0 || h_.ctx < 4 || h_.first + 1 >= h_.ctx)
      throw Failure(where(path_) + fmt::format(": bad header (n_vocab {}, ctx {}, n_chunks {}, first {})",
                                               h_.nVocab, h_.ctx, h_.nChunks, h_.first));
    rowBytes = 8 + 2 * uint64_t(h_.nVocab);
    headerBytes = 32;
  }
  // Every count is below 2^32, so these products fit in 64 bits.
  const uint64_t tokens = uint64_t(h_.nChunks) * h_.ctx;
  const uint64_t need = headerBytes + 4 * tokens + uint64_t(h_.nChunks) * h_.rowsPerChunk() * rowBytes;
  if (size < need)
    throw Failure(where(path_) + fmt::format(": {} bytes, but its header promises {}; the file is truncated",
                                             size, need));
  h_.tokens.resize(tokens);
  if (std::fread(h_.tokens.data(), 4, tokens, f_) != tokens)
    throw Failure(where(path_) + ": cannot read the tokens");
  buf_.resize(rowBytes / 2);
}

LogProbReader::~LogProbReader() {
  if (f_)
    std::fclose(f_);
}

void LogProbReader::read(LogProbRow &row) {
  row.logp.resize(h_.nVocab);
  if (!llama_) {
    if (std::fread(&row.nll, 4, 1, f_) != 1 || std::fread(&row.top, 4, 1, f_) != 1 ||
        std::fread(buf_.data(), 2, h_.nVocab, f_) != h_.nVocab)
      throw Failure(where(path_) + ": the file ends before its last row");
    fp16ToFp32Row(buf_.data(), row.logp.data(), h_.nVocab);
    return;
  }
  if (std::fread(buf_.data(), 2, buf_.size(), f_) != buf_.size())
    throw Failure(where(path_) + ": the file ends before its last row");
  float scale = 0, minLogProb = 0;
  std::memcpy(&scale, &buf_[0], 4);
  std::memcpy(&minLogProb, &buf_[2], 4);
  const uint16_t *q = buf_.data() + 4;
  for (uint32_t i = 0; i < h_.nVocab; ++i)
    row.logp[i] = scale * q[i] + minLogProb;
  // Top: the largest code (lowest id on ties); nll is filled by the caller, who knows the target.
  row.top = static_cast<int32_t>(std::max_element(q, q + h_.nVocab) - q);
  row.nll = 0;
}

} // namespace tpc::cli
