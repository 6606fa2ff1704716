//===- Template.h - a sandboxed Jinja interpreter for chat templates -*- C++ -*-===//
//
// A GGUF carries its chat template as Jinja source (`tokenizer.chat_template`), written for transformers'
// apply_chat_template: jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
// loopcontrols extension, and the globals raise_exception and strftime_now. This interpreter renders the
// subset chat templates use with the same output, byte for byte (test/server/templates/ holds real
// templates checked against Python's jinja2). The template is untrusted input, so it is sandboxed:
// nothing in the language reaches files, the network or the process; lists and dicts cannot be changed in
// place (as the immutable sandbox); loop iterations, macro recursion and output size are bounded; every
// error names the template line and the construct.
//
// Usage:
//   auto t = jinja::Template::parse(text);            // syntax errors: "line 3: {% for %}: expected 'in'"
//   jinja::Dict ctx; ctx.set("messages", jinja::Value::fromJson(msgs));
//   auto out = t->render(ctx);
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_JINJA_TEMPLATE_H
#define TPC_SERVER_JINJA_TEMPLATE_H

#include "runtime/support/Expected.h"
#include "server/jinja/Value.h"

#include <memory>
#include <string>

namespace tpc::server::jinja {

struct Node;

/// Bounds on one rendering (a chat template's render takes microseconds; these only stop a hostile one).
struct Limits {
  size_t maxOutput = 16u << 20; ///< bytes of output
  size_t maxSteps = 5'000'000;  ///< loop iterations and macro calls together
  int maxDepth = 200;           ///< nested macro calls and expressions
  double maxSeconds = 5;        ///< wall time of one rendering (checked at every step)
};

class Template {
public:
  /// Parses `source`; the error names the line and the construct.
  static Expected<Template> parse(const std::string &source);
  /// Renders with `context`'s variables over the builtin globals. Errors name the line.
  Expected<std::string> render(const Dict &context, const Limits &limits = {}) const;

private:
  std::shared_ptr<std::vector<std::unique_ptr<Node>>> body_;
};

} // namespace tpc::server::jinja

#endif // TPC_SERVER_JINJA_TEMPLATE_H
