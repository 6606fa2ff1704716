//===- OutputParser.cpp - generated text -> content, reasoning, tool calls -===//
//
// One buffer of unreleased text and a state; run() takes steps until one cannot go on without more text.
// The generic formats move Content -> Reasoning (<think>) -> Content -> Call (a region) -> Content...;
// harmony moves Header (<|start|>assistant<|channel|>NAME ... <|message|>) -> Body (until <|end|>,
// <|call|>, <|return|> or the next header) -> Header...
//===----------------------------------------------------------------------===//
#include "server/OutputParser.h"

#include <random>

namespace tpc::server {

namespace {

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool startsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

/// The length of the longest tail of `s` that is a proper prefix of one of `markers` (text that must wait).
size_t heldPrefix(std::string_view s, const std::vector<std::string> &markers) {
  size_t keep = 0;
  for (const std::string &m : markers)
    for (size_t len = std::min(m.size() - 1, s.size()); len > keep; --len)
      if (s.substr(s.size() - len) == std::string_view(m).substr(0, len)) {
        keep = len;
        break;
      }
  return keep;
}

size_t trailingSpace(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && isSpace(s[s.size() - 1 - n]))
    ++n;
  return n;
}

/// What must wait at the end of `s`: the start of a marker, and the white space before it (which is the
/// format's when a marker follows).
size_t heldBack(std::string_view s, const std::vector<std::string> &markers) {
  if (markers.empty())
    return 0;
  const size_t h = heldPrefix(s, markers);
  return h + trailingSpace(s.substr(0, s.size() - h));
}

std::string_view rtrim(std::string_view s) { return s.substr(0, s.size() - trailingSpace(s)); }

std::string randomId(size_t n) {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32)};
  static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string s;
  for (size_t i = 0; i < n; ++i)
    s += alphabet[rng() % (sizeof alphabet - 1)];
  return s;
}

const std::vector<std::string> kHarmonyMarkers = {"<|end|>", "<|call|>", "<|return|>", "<|start|>", "<|channel|>"};

} // namespace

bool parseReasoningFormat(const std::string &s, ReasoningFormat &out) {
  if (s == "none")
    out = ReasoningFormat::None;
  else if (s == "deepseek" || s == "deepseek-legacy")
    out = ReasoningFormat::Deepseek;
  else if (s == "auto")
    out = ReasoningFormat::Auto;
  else
    return false;
  return true;
}

std::string newToolCallId() { return "call_" + randomId(24); }
std::string newMistralToolCallId() { return randomId(9); }

OutputParser::OutputParser(OutputConfig cfg) : cfg_(std::move(cfg)) {
  if (!cfg_.newId)
    cfg_.newId = (cfg_.tools == ToolFormat::Mistral || cfg_.tools == ToolFormat::MistralJson) ? newMistralToolCallId
                                                                                               : newToolCallId;
  if (cfg_.harmony) {
    state_ = State::Header;
    // A forced call's prefix continues the generation prompt's "<|start|>assistant": read it as a header.
    if (!cfg_.prefill.empty())
      buf_ = "<|start|>assistant" + cfg_.prefill;
    return;
  }
  buf_ = cfg_.prefill;
  // The forced call's own prefix (after the "</think>" that closes a reasoning the prompt opened).
  forcedHead_ = cfg_.prefill;
  if (startsWith(forcedHead_, "</think>"))
    forcedHead_.erase(0, forcedHead_.find_first_not_of(" \n", 8));
  if (cfg_.startInReasoning && cfg_.splitReasoning)
    state_ = State::Reasoning, reasoningSeen_ = true;
}

void OutputParser::push(std::string_view text, std::vector<OutputDelta> &out) {
  buf_ += text;
  run(false, out);
}

void OutputParser::finish(std::vector<OutputDelta> &out) { run(true, out); }

void OutputParser::run(bool atEnd, std::vector<OutputDelta> &out) {
  while (cfg_.harmony ? stepHarmony(atEnd, out) : stepGeneric(atEnd, out)) {
  }
}

void OutputParser::content(std::string_view s, std::vector<OutputDelta> &out) {
  if (!contentSeen_)
    while (!s.empty() && isSpace(s.front()))
      s.remove_prefix(1);
  if (s.empty())
    return;
  contentSeen_ = true;
  if (!out.empty() && out.back().kind == OutputDelta::Kind::Content)
    out.back().text += s;
  else
    out.push_back({OutputDelta::Kind::Content, std::string(s), {}, 0});
}

void OutputParser::reasoning(std::string_view s, std::vector<OutputDelta> &out) {
  if (!cfg_.splitReasoning)
    return content(s, out);
  if (!reasoningStarted_)
    while (!s.empty() && isSpace(s.front()))
      s.remove_prefix(1);
  if (s.empty())
    return;
  reasoningStarted_ = true;
  if (!out.empty() && out.back().kind == OutputDelta::Kind::Reasoning)
    out.back().text += s;
  else
    out.push_back({OutputDelta::Kind::Reasoning, std::string(s), {}, 0});
}

void OutputParser::call(ToolCall c, std::vector<OutputDelta> &out) {
  c.id = cfg_.newId();
  out.push_back({OutputDelta::Kind::Call, {}, std::move(c), calls_++});
}

bool OutputParser::stepGeneric(bool atEnd, std::vector<OutputDelta> &out) {
  if (buf_.empty())
    return false;
  if (state_ == State::Reasoning) {
    const size_t close = buf_.find("</think>");
    if (close != std::string::npos) {
      reasoning(rtrim(std::string_view(buf_).substr(0, close)), out);
      buf_.erase(0, close + 8);
      state_ = State::Content;
      return true;
    }
    // Trailing white space waits too: the white space before </think> is not the model's reasoning.
    const size_t keep = atEnd ? 0 : heldBack(buf_, {"</think>"});
    reasoning(std::string_view(buf_).substr(0, buf_.size() - keep), out);
    buf_.erase(0, buf_.size() - keep);
    return false;
  }
  if (state_ == State::Call) {
    RegionParse r = parseCallRegion(cfg_.tools, buf_, atEnd, cfg_.toolList);
    if (r.kind == RegionParse::Kind::NeedMore) {
      if (!atEnd)
        return false;
      r.kind = RegionParse::Kind::Malformed, r.consumed = buf_.size();
    }
    r.consumed = std::max<size_t>(1, std::min(r.consumed, buf_.size()));
    if (r.kind == RegionParse::Kind::Calls)
      for (ToolCall &c : r.calls)
        call(std::move(c), out);
    else if (!forcedHead_.empty() && startsWith(buf_, forcedHead_)) // a forced call that failed: what the
      content(buf_.substr(forcedHead_.size(), r.consumed - std::min(r.consumed, forcedHead_.size())), out); // model wrote
    else // not a call: the text it was, with the white space before it
      content(pendingSpace_ + buf_.substr(0, r.consumed), out);
    pendingSpace_.clear();
    forcedHead_.clear();
    buf_.erase(0, r.consumed);
    state_ = State::Content;
    return true;
  }
  // Content: look for the next marker.
  if (!contentSeen_) {
    size_t lead = 0;
    while (lead < buf_.size() && isSpace(buf_[lead]))
      ++lead;
    buf_.erase(0, lead);
    if (buf_.empty())
      return false;
  }
  std::vector<std::string> markers = callOpeners(cfg_.tools);
  const bool thinkHere = cfg_.thinkTags && cfg_.splitReasoning && !contentSeen_ && !reasoningSeen_;
  if (thinkHere && startsWith(buf_, "<think>")) {
    buf_.erase(0, 7);
    state_ = State::Reasoning, reasoningSeen_ = true;
    return true;
  }
  if (cfg_.tools == ToolFormat::Llama3 && !contentSeen_ && buf_[0] == '{') { // the bare JSON call
    state_ = State::Call;
    return true;
  }
  size_t at = std::string::npos;
  for (const std::string &m : markers)
    at = std::min(at, buf_.find(m));
  if (at != std::string::npos) {
    const std::string_view before = std::string_view(buf_).substr(0, at);
    content(rtrim(before), out);
    pendingSpace_ = std::string(before.substr(rtrim(before).size()));
    buf_.erase(0, at);
    state_ = State::Call;
    return true;
  }
  if (thinkHere)
    markers.push_back("<think>");
  const size_t keep = atEnd ? 0 : heldBack(buf_, markers);
  content(std::string_view(buf_).substr(0, buf_.size() - keep), out);
  buf_.erase(0, buf_.size() - keep);
  return false;
}

bool OutputParser::stepHarmony(bool atEnd, std::vector<OutputDelta> &out) {
  if (buf_.empty())
    return false;
  if (state_ == State::Header) {
    if (!startsWith(buf_, "<|")) {
      if (buf_.size() == 1 && buf_[0] == '<' && !atEnd)
        return false;
      state_ = State::Body, body_ = Body::Content; // text without a header is the answer
      return true;
    }
    const size_t msg = buf_.find("<|message|>");
    if (msg == std::string::npos) {
      if (atEnd) { // a header that never opened its message: nothing of it is the model's answer
        buf_.clear();
      }
      return false;
    }
    const std::string header = buf_.substr(0, msg);
    buf_.erase(0, msg + 11);
    auto word = [&](size_t from) {
      size_t end = from;
      while (end < header.size() && !isSpace(header[end]) && header[end] != '<')
        ++end;
      return header.substr(from, end - from);
    };
    const size_t ch = header.find("<|channel|>");
    const std::string channel = ch == std::string::npos ? std::string() : word(ch + 11);
    const size_t to = header.find("to=");
    const std::string recipient = to == std::string::npos ? std::string() : word(to + 3);
    state_ = State::Body;
    if (cfg_.tools == ToolFormat::Harmony && startsWith(recipient, "functions.")) {
      body_ = Body::Call, callName_ = recipient.substr(10);
    } else {
      body_ = channel == "analysis" ? Body::Reasoning : Body::Content;
    }
    return true;
  }
  size_t at = std::string::npos;
  std::string marker;
  for (const std::string &m : kHarmonyMarkers)
    if (size_t p = buf_.find(m); p < at)
      at = p, marker = m;
  const std::string_view text = std::string_view(buf_).substr(0, at == std::string::npos ? buf_.size() : at);
  if (body_ == Body::Call) {
    if (at == std::string::npos && !atEnd)
      return false;
    nlohmann::ordered_json args = nlohmann::ordered_json::parse(text, nullptr, false);
    if (args.is_object() && !callName_.empty())
      call(ToolCall{"", callName_, args.dump()}, out);
    else
      content(text, out);
  } else if (at == std::string::npos) {
    const size_t keep = atEnd ? 0 : heldPrefix(buf_, kHarmonyMarkers);
    const std::string_view part = std::string_view(buf_).substr(0, buf_.size() - keep);
    body_ == Body::Reasoning ? reasoning(part, out) : content(part, out);
    buf_.erase(0, buf_.size() - keep);
    return false;
  } else {
    body_ == Body::Reasoning ? reasoning(text, out) : content(text, out);
  }
  if (at == std::string::npos) {
    buf_.clear();
    return false;
  }
  // A message's end marker is dropped; the start of the next header stays for the Header state.
  const bool ends = marker == "<|end|>" || marker == "<|call|>" || marker == "<|return|>";
  buf_.erase(0, at + (ends ? marker.size() : 0));
  state_ = State::Header;
  return true;
}

} // namespace tpc::server
