//===- ToolCalls.cpp - the tool-call formats of the model families --------===//
//
// Region readers work on complete text: OutputParser hands them the text from an opening marker on and
// asks again with more text while they answer NeedMore, so they never see half a marker at the start.
//===----------------------------------------------------------------------===//
#include "server/ToolCalls.h"

#include <fmt/core.h>

namespace tpc::server {

using ojson = nlohmann::ordered_json;

namespace {

bool contains(const std::string &s, const char *what) { return s.find(what) != std::string::npos; }

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && isSpace(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && isSpace(s.back()))
    s.remove_suffix(1);
  return s;
}

/// The schema of property `key` of function `name` in `tools` (null when unknown).
const nlohmann::json *propertySchema(const nlohmann::json &tools, const std::string &name, const std::string &key) {
  if (!tools.is_array())
    return nullptr;
  for (const nlohmann::json &t : tools) {
    const nlohmann::json &fn = t.contains("function") ? t["function"] : t;
    if (!fn.is_object() || fn.value("name", "") != name)
      continue;
    auto params = fn.find("parameters");
    if (params == fn.end() || !params->is_object())
      return nullptr;
    auto props = params->find("properties");
    if (props == params->end() || !props->is_object() || !props->contains(key))
      return nullptr;
    return &(*props)[key];
  }
  return nullptr;
}

/// A text-valued argument as JSON (see the file comment of ToolCalls.h).
ojson typedValue(const nlohmann::json &tools, const std::string &name, const std::string &key, std::string_view v) {
  const nlohmann::json *schema = propertySchema(tools, name, key);
  if (schema && schema->is_object() && schema->value("type", nlohmann::json()) == "string")
    return ojson(std::string(v));
  ojson parsed = ojson::parse(v, nullptr, false);
  if (!parsed.is_discarded())
    return parsed;
  return ojson(std::string(v));
}

/// {"name": ..., "arguments" | "parameters": {...} or its JSON text} -> a call; false when it is not one.
bool callFromObject(const ojson &obj, ToolCall &out) {
  if (!obj.is_object() || !obj.contains("name") || !obj["name"].is_string() || obj["name"].get<std::string>().empty())
    return false;
  ojson args = ojson::object();
  for (const char *key : {"arguments", "parameters"}) {
    if (!obj.contains(key))
      continue;
    args = obj[key];
    if (args.is_string())
      args = ojson::parse(args.get<std::string>(), nullptr, false);
    break;
  }
  if (!args.is_object())
    return false;
  out.name = obj["name"].get<std::string>();
  out.arguments = args.dump();
  return true;
}

RegionParse malformed(size_t consumed) {
  RegionParse r;
  r.kind = RegionParse::Kind::Malformed;
  r.consumed = consumed;
  return r;
}

RegionParse calls(size_t consumed, std::vector<ToolCall> c) {
  RegionParse r;
  r.kind = RegionParse::Kind::Calls;
  r.consumed = consumed;
  r.calls = std::move(c);
  return r;
}

/// `<open>BODY</close>`: the body and the region's length, or NeedMore / an unterminated region at the end.
bool closedBody(std::string_view text, std::string_view open, std::string_view close, bool atEnd,
                std::string_view &body, size_t &consumed) {
  const size_t end = text.find(close, open.size());
  if (end == std::string_view::npos) {
    if (!atEnd)
      return false;
    body = text.substr(open.size());
    consumed = text.size();
    return true;
  }
  body = text.substr(open.size(), end - open.size());
  consumed = end + close.size();
  return true;
}

/// Qwen XML: one or more <function=NAME> blocks of <parameter=KEY>\nVALUE\n</parameter>.
bool parseQwenXml(std::string_view body, const nlohmann::json &tools, std::vector<ToolCall> &out) {
  body = trim(body);
  if (body.empty())
    return false;
  while (!body.empty()) {
    if (body.substr(0, 10) != "<function=")
      return false;
    const size_t nameEnd = body.find('>');
    if (nameEnd == std::string_view::npos)
      return false;
    ToolCall call;
    call.name = std::string(trim(body.substr(10, nameEnd - 10)));
    if (call.name.empty())
      return false;
    body = trim(body.substr(nameEnd + 1));
    ojson args = ojson::object();
    while (body.substr(0, 11) == "<parameter=") {
      const size_t keyEnd = body.find('>');
      const size_t valueEnd = body.find("</parameter>");
      if (keyEnd == std::string_view::npos || valueEnd == std::string_view::npos || valueEnd < keyEnd)
        return false;
      const std::string key(trim(body.substr(11, keyEnd - 11)));
      std::string_view value = body.substr(keyEnd + 1, valueEnd - keyEnd - 1);
      // The format puts the value on lines of its own: one newline each side is the format's.
      if (!value.empty() && value.front() == '\n')
        value.remove_prefix(1);
      if (!value.empty() && value.back() == '\n')
        value.remove_suffix(1);
      args[key] = typedValue(tools, call.name, key, value);
      body = trim(body.substr(valueEnd + 12));
    }
    if (body.substr(0, 11) != "</function>")
      return false;
    body = trim(body.substr(11));
    call.arguments = args.dump();
    out.push_back(std::move(call));
  }
  return true;
}

/// GLM: NAME then <arg_key>K</arg_key><arg_value>V</arg_value> pairs.
bool parseGlm(std::string_view body, const nlohmann::json &tools, std::vector<ToolCall> &out) {
  const size_t firstKey = body.find("<arg_key>");
  ToolCall call;
  call.name = std::string(trim(body.substr(0, firstKey)));
  if (call.name.empty() || call.name.find_first_of("<>\n") != std::string::npos)
    return false;
  body = firstKey == std::string_view::npos ? std::string_view() : trim(body.substr(firstKey));
  ojson args = ojson::object();
  while (!body.empty()) {
    if (body.substr(0, 9) != "<arg_key>")
      return false;
    const size_t keyEnd = body.find("</arg_key>");
    if (keyEnd == std::string_view::npos)
      return false;
    const std::string key(trim(body.substr(9, keyEnd - 9)));
    body = trim(body.substr(keyEnd + 10));
    if (body.substr(0, 11) != "<arg_value>")
      return false;
    const size_t valueEnd = body.find("</arg_value>");
    if (valueEnd == std::string_view::npos)
      return false;
    args[key] = typedValue(tools, call.name, key, body.substr(11, valueEnd - 11));
    body = trim(body.substr(valueEnd + 12));
  }
  call.arguments = args.dump();
  out.push_back(std::move(call));
  return true;
}

/// JSON objects (calls) one after another, separated by white space or ';' (Llama 3's python_tag body).
bool parseJsonCalls(std::string_view body, std::vector<ToolCall> &out) {
  size_t pos = 0;
  bool any = false;
  for (;;) {
    while (pos < body.size() && (isSpace(body[pos]) || body[pos] == ';'))
      ++pos;
    if (pos == body.size())
      return any;
    bool bad = false;
    const size_t end = jsonValueEnd(body, pos, bad);
    if (bad || end == std::string_view::npos)
      return false;
    ToolCall call;
    if (!callFromObject(ojson::parse(body.substr(pos, end - pos), nullptr, false), call))
      return false;
    out.push_back(std::move(call));
    any = true;
    pos = end;
  }
}

RegionParse parseMistral(std::string_view text, bool atEnd) {
  const std::string_view open = "[TOOL_CALLS]";
  size_t pos = open.size();
  while (pos < text.size() && isSpace(text[pos]))
    ++pos;
  if (pos == text.size())
    return atEnd ? malformed(text.size()) : RegionParse{};
  bool bad = false;
  if (text[pos] == '[') { // Nemo: a JSON array of calls
    const size_t end = jsonValueEnd(text, pos, bad);
    if (bad)
      return malformed(atEnd ? text.size() : pos + 1);
    if (end == std::string_view::npos)
      return atEnd ? malformed(text.size()) : RegionParse{};
    ojson arr = ojson::parse(text.substr(pos, end - pos), nullptr, false);
    std::vector<ToolCall> out;
    if (!arr.is_array() || arr.empty())
      return malformed(end);
    for (const ojson &o : arr) {
      ToolCall call;
      if (!callFromObject(o, call))
        return malformed(end);
      out.push_back(std::move(call));
    }
    return calls(end, std::move(out));
  }
  // NAME[ARGS]{...}, or NAME[CALL_ID]ID[ARGS]{...}.
  const size_t args = text.find("[ARGS]", pos);
  const size_t callId = text.find("[CALL_ID]", pos);
  const size_t nameEnd = std::min(args, callId);
  std::string_view name = text.substr(pos, nameEnd == std::string_view::npos ? std::string_view::npos : nameEnd - pos);
  if (const size_t br = name.find('['); nameEnd == std::string_view::npos && br != std::string_view::npos) {
    const std::string_view tail = name.substr(br); // the start of [ARGS] or [CALL_ID] may still come
    if (std::string_view("[ARGS]").substr(0, tail.size()) != tail &&
        std::string_view("[CALL_ID]").substr(0, tail.size()) != tail)
      return malformed(atEnd ? text.size() : pos);
    name = name.substr(0, br);
  }
  // A name is one short word; anything else is no call (decided before the rest arrives).
  if (name.size() > 128 || name.find_first_of(" \n\t{[<\"") != std::string_view::npos)
    return malformed(atEnd ? text.size() : pos);
  if (args == std::string_view::npos)
    return atEnd ? malformed(text.size()) : RegionParse{};
  if (name.empty())
    return malformed(args);
  const size_t jsonStart = args + 6;
  if (jsonStart == text.size())
    return atEnd ? malformed(text.size()) : RegionParse{};
  const size_t end = jsonValueEnd(text, jsonStart, bad);
  if (bad)
    return malformed(atEnd ? text.size() : jsonStart);
  if (end == std::string_view::npos)
    return atEnd ? malformed(text.size()) : RegionParse{};
  ojson argsJson = ojson::parse(text.substr(jsonStart, end - jsonStart), nullptr, false);
  if (!argsJson.is_object())
    return malformed(end);
  return calls(end, {ToolCall{"", std::string(name), argsJson.dump()}});
}

} // namespace

const char *toolFormatName(ToolFormat f) {
  switch (f) {
  case ToolFormat::None:
    return "none";
  case ToolFormat::Hermes:
    return "hermes";
  case ToolFormat::QwenXml:
    return "qwen-xml";
  case ToolFormat::Glm:
    return "glm";
  case ToolFormat::Llama3:
    return "llama3";
  case ToolFormat::MistralJson:
    return "mistral-json";
  case ToolFormat::Mistral:
    return "mistral";
  case ToolFormat::Harmony:
    return "harmony";
  }
  return "none";
}

ToolFormat detectToolFormat(const std::string &t) {
  // Most specific first: the Qwen XML and GLM templates also write <tool_call>.
  if (contains(t, "<|channel|>") && contains(t, "<|message|>"))
    return ToolFormat::Harmony;
  if (contains(t, "<function=") && contains(t, "<parameter="))
    return ToolFormat::QwenXml;
  if (contains(t, "<arg_key>") && contains(t, "<arg_value>"))
    return ToolFormat::Glm;
  if (contains(t, "<tool_call>"))
    return ToolFormat::Hermes;
  if (contains(t, "[TOOL_CALLS]"))
    return contains(t, "[ARGS]") ? ToolFormat::Mistral : ToolFormat::MistralJson;
  if (contains(t, "<|python_tag|>") || (contains(t, "<|start_header_id|>") && contains(t, "\"parameters\"")))
    return ToolFormat::Llama3;
  return ToolFormat::None;
}

std::vector<std::string> callOpeners(ToolFormat f) {
  switch (f) {
  case ToolFormat::Hermes:
  case ToolFormat::QwenXml:
  case ToolFormat::Glm:
    return {"<tool_call>"};
  case ToolFormat::Llama3:
    return {"<|python_tag|>"};
  case ToolFormat::MistralJson:
  case ToolFormat::Mistral:
    return {"[TOOL_CALLS]"};
  case ToolFormat::None:
  case ToolFormat::Harmony:
    break;
  }
  return {};
}

size_t jsonValueEnd(std::string_view text, size_t pos, bool &bad) {
  bad = false;
  if (pos >= text.size())
    return std::string_view::npos;
  const char first = text[pos];
  if (first != '{' && first != '[') {
    bad = true; // calls are objects or arrays; a scalar is no call
    return std::string_view::npos;
  }
  std::string stack;
  bool inString = false, escaped = false;
  for (size_t i = pos; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '{' || c == '[') {
      stack.push_back(c == '{' ? '}' : ']');
    } else if (c == '}' || c == ']') {
      if (stack.empty() || stack.back() != c) {
        bad = true;
        return std::string_view::npos;
      }
      stack.pop_back();
      if (stack.empty())
        return i + 1;
    }
  }
  return std::string_view::npos;
}

RegionParse parseCallRegion(ToolFormat f, std::string_view text, bool atEnd, const nlohmann::json &tools) {
  std::vector<ToolCall> out;
  std::string_view body;
  size_t consumed = 0;
  switch (f) {
  case ToolFormat::Hermes: {
    if (!closedBody(text, "<tool_call>", "</tool_call>", atEnd, body, consumed))
      return {};
    ToolCall call;
    if (!callFromObject(ojson::parse(trim(body), nullptr, false), call))
      return malformed(consumed);
    return calls(consumed, {call});
  }
  case ToolFormat::QwenXml:
    if (!closedBody(text, "<tool_call>", "</tool_call>", atEnd, body, consumed))
      return {};
    return parseQwenXml(body, tools, out) ? calls(consumed, std::move(out)) : malformed(consumed);
  case ToolFormat::Glm:
    if (!closedBody(text, "<tool_call>", "</tool_call>", atEnd, body, consumed))
      return {};
    return parseGlm(body, tools, out) ? calls(consumed, std::move(out)) : malformed(consumed);
  case ToolFormat::Llama3: {
    const std::string_view tag = "<|python_tag|>";
    if (text.substr(0, tag.size()) == tag) { // the rest of the answer is the call
      if (!atEnd)
        return {};
      return parseJsonCalls(text.substr(tag.size()), out) ? calls(text.size(), std::move(out)) : malformed(text.size());
    }
    bool bad = false;
    const size_t end = jsonValueEnd(text, 0, bad);
    if (bad)
      return malformed(atEnd ? text.size() : 1);
    if (end == std::string_view::npos)
      return atEnd ? malformed(text.size()) : RegionParse{};
    ToolCall call;
    if (!callFromObject(ojson::parse(text.substr(0, end), nullptr, false), call))
      return malformed(end);
    return calls(end, {call});
  }
  case ToolFormat::MistralJson:
  case ToolFormat::Mistral:
    return parseMistral(text, atEnd);
  case ToolFormat::None:
  case ToolFormat::Harmony:
    break;
  }
  return malformed(text.size());
}

namespace {

/// The schema of a tool's arguments (an object with no properties when it declares none).
nlohmann::json parametersOf(const nlohmann::json &fn) {
  auto p = fn.find("parameters");
  if (p != fn.end() && p->is_object())
    return *p;
  return nlohmann::json{{"type", "object"}, {"properties", nlohmann::json::object()}};
}

/// A GBNF string literal of plain text (tool names are [A-Za-z0-9_.-], the markers are ASCII).
std::string lit(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out + "\"";
}

/// The argument pairs of the text-valued formats: keys from the schema's properties, free-text values
/// (no '<' that starts a closing tag; the format's close tag ends the value).
std::string textPairsRule(const std::string &rule, const nlohmann::json &schema, ToolFormat f) {
  std::string keys;
  if (auto props = schema.find("properties"); props != schema.end() && props->is_object())
    for (auto it = props->begin(); it != props->end(); ++it)
      keys += (keys.empty() ? "" : " | ") + lit(it.key());
  if (keys.empty())
    keys = "[A-Za-z0-9_.-]+";
  const std::string value = "( [^<] | \"<\" [^/] )*";
  if (f == ToolFormat::QwenXml)
    return fmt::format("{} ::= ( \"<parameter=\" ( {} ) \">\\n\" {} \"\\n</parameter>\\n\" )*\n", rule, keys, value);
  return fmt::format("{} ::= ( \"<arg_key>\" ( {} ) \"</arg_key>\\n<arg_value>\" {} \"</arg_value>\\n\" )*\n", rule,
                     keys, value);
}

} // namespace

Expected<ForcedCall> forcedCall(ToolFormat f, const nlohmann::json &tools, const std::string &name,
                                const SchemaToGbnf &toGbnf) {
  std::vector<const nlohmann::json *> fns;
  for (const nlohmann::json &t : tools)
    if (name.empty() || t["function"]["name"] == name)
      fns.push_back(&t["function"]);
  if (fns.empty())
    return Error{"no tool named '" + name + "'"};
  const bool named = !name.empty();
  // Per format: the prefix that opens any call, what follows the function name, and what closes it.
  std::string open, afterName, close;
  switch (f) {
  case ToolFormat::Hermes:
    open = "<tool_call>\n{\"name\": \"", afterName = "\", \"arguments\": ", close = "}\n</tool_call>";
    break;
  case ToolFormat::Llama3:
    open = "{\"name\": \"", afterName = "\", \"parameters\": ", close = "}";
    break;
  case ToolFormat::MistralJson:
    open = "[TOOL_CALLS][{\"name\": \"", afterName = "\", \"arguments\": ", close = "}]";
    break;
  case ToolFormat::Mistral:
    open = "[TOOL_CALLS]", afterName = "[ARGS]";
    break;
  case ToolFormat::QwenXml:
    open = "<tool_call>\n<function=", afterName = ">\n", close = "</function>\n</tool_call>";
    break;
  case ToolFormat::Glm:
    open = "<tool_call>", afterName = "\n", close = "</tool_call>";
    break;
  case ToolFormat::Harmony:
    // After the generation prompt "<|start|>assistant", as the template writes a call.
    open = " to=functions.", afterName = "<|channel|>commentary json<|message|>";
    break;
  case ToolFormat::None:
    return Error{"the model's chat template has no tool-call format tpc knows, so a call cannot be forced"};
  }
  ForcedCall out;
  out.prefill = open + (named ? fns[0]->at("name").get<std::string>() + afterName : std::string());
  if (!toGbnf)
    return out;
  std::string rules, alternatives;
  for (size_t i = 0; i < fns.size(); ++i) {
    const std::string rule = fmt::format("tool{}-args", i);
    const nlohmann::json schema = parametersOf(*fns[i]);
    if (f == ToolFormat::QwenXml || f == ToolFormat::Glm) {
      rules += textPairsRule(rule, schema, f);
    } else {
      auto r = toGbnf(schema, rule);
      if (!r)
        return Error{"tools[" + std::to_string(i) + "].function.parameters: " + r.message()};
      rules += *r + "\n";
    }
    const std::string head = named ? std::string() : lit(fns[i]->at("name").get<std::string>() + afterName) + " ";
    alternatives += (alternatives.empty() ? "" : " | ") + head + rule;
  }
  out.gbnf = "root ::= ( " + alternatives + " )" + (close.empty() ? "" : " " + lit(close)) + "\n" + rules;
  return out;
}

} // namespace tpc::server
