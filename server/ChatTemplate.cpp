//===- ChatTemplate.cpp - chat messages -> prompt text ---------------------===//
//
// A Jinja template is rendered by server/jinja. Each built-in render function mirrors its official Jinja template for text-only messages; the comments name
// the template expressions they stand for. Jinja's `trim` is Python's str.strip(); here it strips ASCII
// whitespace only (Unicode spaces at the ends of a message are kept).
//===----------------------------------------------------------------------===//
#include "server/ChatTemplate.h"

#include "server/jinja/Template.h"

#include <algorithm>
#include <ctime>
#include <fstream>
#include <regex>
#include <sstream>

namespace tpc::server {
namespace {

const char *const kWhitespace = " \t\n\r\v\f";

std::string trim(const std::string &s) {
  const size_t b = s.find_first_not_of(kWhitespace);
  if (b == std::string::npos)
    return {};
  return s.substr(b, s.find_last_not_of(kWhitespace) - b + 1);
}
std::string lstripChar(const std::string &s, char c) {
  const size_t b = s.find_first_not_of(c);
  return b == std::string::npos ? std::string() : s.substr(b);
}
std::string rstripChar(const std::string &s, char c) {
  const size_t e = s.find_last_not_of(c);
  return e == std::string::npos ? std::string() : s.substr(0, e + 1);
}
bool contains(const std::string &s, const char *what) { return s.find(what) != std::string::npos; }

/// OpenAI's "developer" role is the system role of the newer API.
std::string roleOf(const ChatMessage &m) { return m.role == "developer" ? "system" : m.role; }

Expected<void> checkRoles(const std::vector<ChatMessage> &messages) {
  if (messages.empty())
    return Error{"messages is empty; give at least one message"};
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string r = roleOf(messages[i]);
    if (r != "system" && r != "user" && r != "assistant")
      return Error{"messages[" + std::to_string(i) + "].role '" + messages[i].role +
                   "' is not supported (system, developer, user or assistant; tool messages need the model's Jinja template)"};
  }
  return {};
}

std::string today() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%d %b %Y", &tm); // the Llama 3.2 template's strftime_now("%d %b %Y")
  return buf;
}

/// Gemma 4's strip_thinking macro: drop every "<|channel>...<channel|>" block, then trim.
std::string stripThinking(const std::string &text) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    const size_t close = text.find("<channel|>", pos);
    const std::string part = text.substr(pos, close == std::string::npos ? std::string::npos : close - pos);
    const size_t open = part.find("<|channel>");
    out += open == std::string::npos ? part : part.substr(0, open);
    if (close == std::string::npos)
      break;
    pos = close + 10;
  }
  return trim(out);
}

} // namespace

Expected<ChatTemplate> ChatTemplate::recognise(const std::string &text, const std::string &origin) {
  if (contains(text, "<|turn>") && contains(text, "<turn|>")) {
    ChatTemplate t(Family::Gemma4);
    t.emptyThought_ = contains(text, "<|channel>thought\\n<channel|>") || contains(text, "<|channel>thought\n<channel|>");
    return t;
  }
  if (contains(text, "<start_of_turn>") && contains(text, "<end_of_turn>")) {
    ChatTemplate t(Family::Gemma3);
    t.systemRejected_ = contains(text, "System role not supported");
    return t;
  }
  if (contains(text, "<|start_header_id|>") && contains(text, "<|eot_id|>")) {
    ChatTemplate t(Family::Llama3);
    t.knowledgeDate_ = contains(text, "Cutting Knowledge Date");
    t.dateFromClock_ = contains(text, "strftime_now");
    std::smatch m;
    if (std::regex_search(text, m, std::regex(R"(date_string\s*=\s*["']([^"']*)["'])")))
      t.defaultDate_ = m[1];
    return t;
  }
  if (contains(text, "<|im_start|>") && contains(text, "<|im_end|>")) {
    ChatTemplate t(Family::ChatML);
    t.thinkTags_ = contains(text, "</think>");
    return t;
  }
  const std::string what = text.empty() ? "has no chat template (tokenizer.chat_template)"
                                        : "has a chat template tpc does not recognise (none of the llama 3, "
                                          "ChatML/Qwen 3, Gemma 3 or Gemma 4 markers)";
  return Error{origin + " " + what + "; start tpc serve with --chat-template NAME|FILE (NAME: " + names() +
               ")"};
}

namespace {
/// The variables of a Jinja template for one conversation, as transformers' apply_chat_template passes them.
jinja::Dict jinjaContext(const std::vector<ChatMessage> &messages, const std::string &bos, const std::string &eos,
                         const ChatOptions &opts) {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const ChatMessage &m : messages) {
    nlohmann::ordered_json j = {{"role", m.role}, {"content", m.content}};
    for (auto it = m.extra.begin(); it != m.extra.end(); ++it)
      j[it.key()] = it.value();
    msgs.push_back(std::move(j));
  }
  jinja::Dict ctx;
  ctx.set(jinja::Value("messages"), jinja::Value::fromJson(msgs));
  if (!opts.tools.is_null())
    ctx.set(jinja::Value("tools"), jinja::Value::fromJson(opts.tools));
  ctx.set(jinja::Value("add_generation_prompt"), jinja::Value(opts.addGenerationPrompt));
  ctx.set(jinja::Value("bos_token"), jinja::Value(bos));
  ctx.set(jinja::Value("eos_token"), jinja::Value(eos));
  for (auto it = opts.kwargs.begin(); it != opts.kwargs.end(); ++it)
    ctx.set(jinja::Value(it.key()), jinja::Value::fromJson(it.value()));
  if (opts.enableThinking)
    ctx.set(jinja::Value("enable_thinking"), jinja::Value(*opts.enableThinking));
  return ctx;
}
} // namespace

Expected<ChatTemplate> ChatTemplate::fromJinja(const std::string &text, const std::string &origin,
                                               const std::string &bos, const std::string &eos,
                                               const std::string &toolUse) {
  const std::string what = origin + ": the chat template ";
  const std::string fix = "; start tpc serve with --chat-template NAME|FILE (NAME: " + std::string(names()) + ")";
  if (text.empty())
    return Error{origin + " has no chat template (tokenizer.chat_template)" + fix};
  auto parsed = jinja::Template::parse(text);
  if (!parsed)
    return Error{what + "cannot be parsed: " + parsed.message() + fix};
  ChatTemplate t(Family::Jinja);
  t.jinja_ = std::make_shared<const jinja::Template>(parsed.take());
  t.bos_ = bos;
  t.eos_ = eos;
  t.source_ = toolUse.empty() ? text : text + "\n" + toolUse;
  // The markers that close a model turn in the known formats: each one the template writes is a stop token
  // (most are also the vocabulary's end-of-generation tokens; this covers GGUFs that do not mark them).
  for (const char *m : {"<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<turn|>", "<|end|>", "<|return|>", "<|call|>",
                        "<|user|>", "<|observation|>", "<|end_of_text|>", "<|END_OF_TURN_TOKEN|>", "<|eom_id|>"})
    if (contains(text, m))
      t.ends_.push_back(m);
  // Harmony (gpt-oss): <|end|> closes each message of a turn (the analysis before the final answer); the
  // turn ends at <|return|> or <|call|>, as llama.cpp decides when a vocabulary has both.
  if (contains(text, "<|return|>") && contains(text, "<|call|>"))
    t.ends_.erase(std::remove(t.ends_.begin(), t.ends_.end(), std::string("<|end|>")), t.ends_.end());
  // The probe: one user turn, the smallest conversation every chat template must take.
  auto probe = t.jinja_->render(jinjaContext({{"user", "Hello"}}, bos, eos, {}));
  if (!probe)
    return Error{what + "fails on a one-message conversation: " + probe.message() + fix};
  if (!toolUse.empty()) {
    const std::string variant = origin + ": the chat template tool_use ";
    auto tu = jinja::Template::parse(toolUse);
    if (!tu)
      return Error{variant + "cannot be parsed: " + tu.message() + fix};
    t.toolUse_ = std::make_shared<const jinja::Template>(tu.take());
    auto probeTools = t.toolUse_->render(jinjaContext({{"user", "Hello"}}, bos, eos, {}));
    if (!probeTools)
      return Error{variant + "fails on a one-message conversation: " + probeTools.message() + fix};
  }
  return t;
}

const char *ChatTemplate::names() { return "llama3, llama3.1, chatml, qwen3, gemma3, gemma4"; }

Expected<ChatTemplate> ChatTemplate::fromFlag(const std::string &value, const std::string &bos,
                                              const std::string &eos) {
  if (value == "llama3")
    return ChatTemplate(Family::Llama3);
  if (value == "llama3.1") {
    ChatTemplate t(Family::Llama3);
    t.knowledgeDate_ = true;
    return t;
  }
  if (value == "chatml")
    return ChatTemplate(Family::ChatML);
  if (value == "qwen3") {
    ChatTemplate t(Family::ChatML);
    t.thinkTags_ = true;
    return t;
  }
  if (value == "gemma3")
    return ChatTemplate(Family::Gemma3);
  if (value == "gemma4") {
    ChatTemplate t(Family::Gemma4);
    t.emptyThought_ = true; // the current official template
    return t;
  }
  std::ifstream f(value, std::ios::binary);
  if (!f)
    return Error{"--chat-template: '" + value + "' is neither a template name (" + names() +
                 ") nor a readable file"};
  std::stringstream ss;
  ss << f.rdbuf();
  return fromJinja(ss.str(), "--chat-template file '" + value + "'", bos, eos);
}

std::string ChatTemplate::name() const {
  switch (family_) {
  case Family::Llama3:
    return knowledgeDate_ ? "llama3.1" : "llama3";
  case Family::ChatML:
    return thinkTags_ ? "qwen3" : "chatml";
  case Family::Gemma3:
    return "gemma3";
  case Family::Gemma4:
    return "gemma4";
  case Family::Jinja:
    return "jinja";
  }
  return "";
}

std::vector<std::string> ChatTemplate::endOfTurn() const {
  switch (family_) {
  case Family::Llama3:
    return {"<|eot_id|>"};
  case Family::ChatML:
    return {"<|im_end|>"};
  case Family::Gemma3:
    return {"<end_of_turn>"};
  case Family::Gemma4:
    return {"<turn|>"};
  case Family::Jinja:
    return ends_;
  }
  return {};
}

Expected<std::string> ChatTemplate::apply(const std::vector<ChatMessage> &messages, const std::string &bos,
                                          const ChatOptions &opts) const {
  if (family_ == Family::Jinja) {
    if (messages.empty())
      return Error{"messages is empty; give at least one message"};
    const bool tools = !opts.tools.is_null() && toolUse_;
    auto out = (tools ? toolUse_ : jinja_)->render(jinjaContext(messages, bos_.empty() ? bos : bos_, eos_, opts));
    if (!out)
      return Error{"the model's chat template: " + out.message()};
    return out.take();
  }
  if (auto ok = checkRoles(messages); !ok)
    return Error{ok.message()};
  const bool firstIsSystem = roleOf(messages[0]) == "system";
  std::string out;
  switch (family_) {
  case Family::Llama3: {
    out = bos;
    size_t first = 0;
    if (knowledgeDate_) {
      // {{- bos_token }} ... "<|start_header_id|>system<|end_header_id|>\n\n" "Cutting Knowledge Date: ..."
      std::string system;
      if (firstIsSystem)
        system = trim(messages[0].content), first = 1;
      const std::string date = !opts.date.empty() ? opts.date : dateFromClock_ ? today() : defaultDate_;
      out += "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: " +
             date + "\n\n" + system + "<|eot_id|>";
    }
    // '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>'
    for (size_t i = first; i < messages.size(); ++i)
      out += "<|start_header_id|>" + roleOf(messages[i]) + "<|end_header_id|>\n\n" + trim(messages[i].content) +
             "<|eot_id|>";
    out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  case Family::ChatML: {
    // Qwen 3: the last user message bounds the assistant turns whose reasoning is kept.
    size_t lastQuery = messages.size() - 1;
    for (size_t i = messages.size(); i-- > 0;)
      if (roleOf(messages[i]) == "user") {
        lastQuery = i;
        break;
      }
    for (size_t i = 0; i < messages.size(); ++i) {
      const std::string role = roleOf(messages[i]);
      std::string content = messages[i].content;
      if (role != "assistant" || !thinkTags_) {
        out += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
        continue;
      }
      std::string reasoning;
      if (const size_t close = content.find("</think>"); close != std::string::npos) {
        // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
        std::string before = rstripChar(content.substr(0, close), '\n');
        const size_t open = before.rfind("<think>");
        reasoning = lstripChar(open == std::string::npos ? before : before.substr(open + 7), '\n');
        content = lstripChar(content.substr(content.rfind("</think>") + 8), '\n');
      }
      if (i > lastQuery && (i + 1 == messages.size() || !reasoning.empty()))
        out += "<|im_start|>assistant\n<think>\n" + rstripChar(lstripChar(reasoning, '\n'), '\n') +
               "\n</think>\n\n" + lstripChar(content, '\n');
      else
        out += "<|im_start|>assistant\n" + content;
      out += "<|im_end|>\n";
    }
    out += "<|im_start|>assistant\n";
    if (thinkTags_ && opts.enableThinking == false)
      out += "<think>\n\n</think>\n\n";
    return out;
  }
  case Family::Gemma3: {
    out = bos;
    std::string prefix;
    size_t first = 0;
    if (firstIsSystem) {
      if (systemRejected_)
        return Error{"this model's chat template does not support a system message"};
      prefix = messages[0].content + "\n\n"; // not trimmed: first_user_prefix = content + '\n\n'
      first = 1;
    }
    for (size_t i = first; i < messages.size(); ++i) {
      const size_t k = i - first;
      const std::string role = roleOf(messages[i]);
      if ((role == "user") != (k % 2 == 0))
        return Error{"Conversation roles must alternate user/assistant/user/assistant/... (the model's chat "
                     "template requires it)"};
      out += "<start_of_turn>" + std::string(role == "assistant" ? "model" : role) + "\n" +
             (k == 0 ? prefix : std::string()) + trim(messages[i].content) + "<end_of_turn>\n";
    }
    out += "<start_of_turn>model\n";
    return out;
  }
  case Family::Gemma4: {
    out = bos;
    const bool thinking = opts.enableThinking == true;
    size_t first = 0;
    if (thinking || firstIsSystem) {
      out += "<|turn>system\n";
      if (thinking)
        out += "<|think|>\n";
      if (firstIsSystem)
        out += trim(messages[0].content), first = 1;
      out += "<turn|>\n";
    }
    for (size_t i = first; i < messages.size(); ++i) {
      const std::string role = roleOf(messages[i]);
      const bool model = role == "assistant";
      // continue_same_model_turn: an assistant message right after another assistant message.
      if (!(model && i > first && roleOf(messages[i - 1]) == "assistant"))
        out += "<|turn>" + std::string(model ? "model" : role) + "\n";
      out += (model ? stripThinking(messages[i].content) : trim(messages[i].content)) + "<turn|>\n";
    }
    out += "<|turn>model\n";
    if (emptyThought_ && !thinking)
      out += "<|channel>thought\n<channel|>";
    return out;
  }
  case Family::Jinja:
    break;
  }
  return Error{"unknown chat template family"};
}

} // namespace tpc::server
