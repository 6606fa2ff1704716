//===- JinjaTest.cpp - the interpreter's errors, sandbox limits and semantics ===//
//
// Real templates are checked against jinja2 by jinja_oracle.py; these are hand-written bad templates (every
// error names the line and the construct) and the sandbox's limits, plus the Python semantics the oracle's
// conversations may not reach. Expected texts are what Python's jinja2 prints for the same template.
//===----------------------------------------------------------------------===//
#include "server/jinja/Template.h"

#include <gtest/gtest.h>

using namespace tpc::server::jinja;

namespace {

std::string render(const std::string &src, Dict ctx = {}, const Limits &limits = {}) {
  auto t = Template::parse(src);
  if (!t)
    return "PARSE: " + t.message();
  auto out = t->render(ctx, limits);
  return out ? *out : "RENDER: " + out.message();
}

TEST(Jinja, SyntaxErrorsNameLineAndConstruct) {
  EXPECT_EQ(render("a\n{% frobnicate %}"), "PARSE: line 2: unknown tag '{% frobnicate %}' (this interpreter "
                                           "supports if, for, set, macro, call, filter, break, continue, raw, "
                                           "generation)");
  EXPECT_EQ(render("x\ny\n{% for m of messages %}{% endfor %}"),
            "PARSE: line 3: {% for %}: expected 'in' after the loop variables");
  EXPECT_EQ(render("{% if x %}\nno end"), "PARSE: line 1: missing '{% endif %}' (the template ends first)");
  EXPECT_EQ(render("\n\n{{ x + }}"), "PARSE: line 3: {{ }}: expected an expression, the tag ends");
  EXPECT_EQ(render("{{ x"), "PARSE: line 1: unclosed '{{': no '}}' follows");
  EXPECT_EQ(render("{% endfor %}"), "PARSE: line 1: unexpected '{% endfor %}' (no open block takes it here)");
  EXPECT_EQ(render("{{ 'abc }}"), "PARSE: line 1: unclosed '{{': no '}}' follows");
  EXPECT_EQ(render("{% set x = [1, 2 %}"), "PARSE: line 1: {% set %}: expected ',' or ']' in a list");
  EXPECT_EQ(render("{{ 12345678901234567890 }}"),
            "PARSE: line 1: {{ }}: the integer 12345678901234567890 does not fit in 64 bits");
  EXPECT_EQ(render("\n{{ '\\xZZ' }}"), "PARSE: line 2: invalid \\x escape in a string");
  EXPECT_EQ(render("{% for x in y recursive %}{% endfor %}"),
            "PARSE: line 1: {% for %}: recursive loops are not supported");
}

TEST(Jinja, RenderErrorsNameLineAndConstruct) {
  EXPECT_EQ(render("ok\n{{ x | frobnicate }}"), "RENDER: line 2: unknown filter 'frobnicate'");
  EXPECT_EQ(render("{{ 1 is frobnicate }}"), "RENDER: line 1: unknown test 'frobnicate'");
  EXPECT_EQ(render("\n{{ message.content.strip() }}"),
            "RENDER: line 2: 'message' is undefined (reading .content)");
  EXPECT_EQ(render("{% if true %}\n\n{{ raise_exception('Conversation roles must alternate') }}{% endif %}"),
            "RENDER: line 3: the template raised an exception: Conversation roles must alternate");
  EXPECT_EQ(render("{{ 1 + 'a' }}"), "RENDER: line 1: unsupported operand types for +: 'int' and 'str'");
  EXPECT_EQ(render("{{ x + 1 }}"), "RENDER: line 1: 'x' is undefined (an operand of '+')");
  EXPECT_EQ(render("{{ foo() }}"), "RENDER: line 1: 'foo' is undefined (called as a function)");
  EXPECT_EQ(render("{% set x = 3 %}{% set x.y = 1 %}"),
            "RENDER: line 1: {% set x.y %}: only a namespace() takes attribute assignment, not int");
}

TEST(Jinja, SandboxLimits) {
  Limits small;
  small.maxSteps = 1000;
  small.maxOutput = 1000;
  small.maxDepth = 20;
  EXPECT_EQ(render("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", {}, small),
            "RENDER: line 1: the template ran more than 1000 loop iterations and macro calls (a sandbox limit)");
  EXPECT_EQ(render("{% for i in range(100) %}\n{{ 'x' * 20 }}{% endfor %}", {}, small),
            "RENDER: line 2: the output passed 1000 bytes (a sandbox limit)");
  EXPECT_EQ(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {}, small),
            "RENDER: line 1: calls nested deeper than 20 (a sandbox limit)");
  Limits quick;
  quick.maxSeconds = 1e-9;
  EXPECT_EQ(render("{% for i in range(100000) %}\n{% endfor %}", {}, quick),
            "RENDER: line 1: the template ran longer than 1e-09 s (a sandbox limit)");
  EXPECT_EQ(render("{{ range(1000000) | length }}"), "RENDER: line 1: range() over 100000 items (a sandbox limit)");
  EXPECT_EQ(render("{{ 'ab' * 100000000 }}"),
            "RENDER: line 1: a repeated sequence passed 16777216 items (a sandbox limit)");
  EXPECT_EQ(render("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                   "{% endfor %}"),
            "RENDER: line 1: a string passed 16777216 bytes or items (a sandbox limit)");
  EXPECT_EQ(render("{{ 'ab' * 9223372036854775807 }}"),
            "RENDER: line 1: a repeated sequence passed 16777216 items (a sandbox limit)");
  EXPECT_EQ(render("{{ 'x' | center(1000000000000) }}"),
            "RENDER: line 1: filter 'center' passed 16777216 bytes or items (a sandbox limit)");
  EXPECT_EQ(render("{% set l = [1] %}{{ l.append(2) }}"),
            "RENDER: line 1: access to attribute 'append' of 'list' object is unsafe (the sandbox keeps lists "
            "immutable)");
  EXPECT_EQ(render("{% set d = {} %}{{ d.update({'a': 1}) }}"),
            "RENDER: line 1: access to attribute 'update' of 'dict' object is unsafe (the sandbox keeps dicts "
            "immutable)");
  EXPECT_EQ(render("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}"),
            "PARSE: line 1: {{ }}: nested deeper than 200 levels (a sandbox limit)");
  // No way out of the template: Python's escape hatches are plain undefined names here.
  EXPECT_EQ(render("{{ ''.__class__ }}|{{ cycler }}|{{ self }}"), "||");
}

TEST(Jinja, PythonSemantics) {
  EXPECT_EQ(render("{{ [1, 'a', none, true, 2.5, {'k': 'it\\'s'}] }}"),
            "[1, 'a', None, True, 2.5, {'k': \"it's\"}]");
  EXPECT_EQ(render("{{ {'a': 'é\"\\n', 'b': [1, 2.0, none, false]} | tojson }}"),
            "{\"a\": \"é\\\"\\n\", \"b\": [1, 2.0, null, false]}");
  EXPECT_EQ(render("{{ {'b': 1, 'a': [1, {}]} | tojson(indent=2) }}"),
            "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    {}\n  ]\n}");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=(',', ':')) }}"), "{\"a\":2,\"b\":1}");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1e-5 }} {{ 1e16 }}"),
            "3 -4 3.5 2 1024 1e-05 1e+16");
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.index }}{{ x }}{{ loop.revindex0 }}{% if not loop.last %},"
                   "{% endif %}{% endfor %}"),
            "1a2,2b1,3c0");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}"
                   "{% set ns.n = ns.n + i %}{% set local = i %}{% endfor %}{{ ns.n }}{{ local is defined }}"),
            "3False");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ '  x y  '.split() }} {{ 'Hello World'[::-1] }} {{ 'abc'[1:] }}"),
            "['a', 'b', '', 'c'] ['x', 'y'] dlroW olleH bc");
  EXPECT_EQ(render("{{ 'x' if none else 'y' }} {{ 'a' ~ 1 ~ none }} {{ 'b' not in 'abc' }} {{ 3 is odd }}"),
            "y a1None False True");
  EXPECT_EQ(render("{{ ['b', 'A', 'c'] | sort | join('-') }} {{ [3, 1] | map('string') | list }}"), "A-b-c ['3', '1']");
  EXPECT_EQ(render("{{ '{} and {name}'.format(1, name='x') }} {{ 'hello world'.title() }}"), "1 and x Hello World");
  EXPECT_EQ(render("{{ 'a\\nb' | indent(2, true) }}|{{ '  t ' | trim }}|{{ x | default('d') }}"), "  a\n  b|t|d");
  Dict ctx;
  ctx.set(Value("messages"), Value::fromJson(nlohmann::ordered_json::parse(
                                 R"([{"role":"user","content":"a"},{"role":"tool","content":"b"}])")));
  EXPECT_EQ(render("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | first }}"
                   "{{ messages | rejectattr('role', 'in', ['user']) | list | length }}{{ messages[-1].role }}",
                   ctx),
            "a1tool");
}

TEST(Jinja, WhitespaceControlAsTransformers) {
  // trim_blocks drops the newline after a block tag, lstrip_blocks the indentation before one; `-` strips
  // all whitespace on its side; `{%+` keeps the indentation.
  EXPECT_EQ(render("<\n  {% if true %}\n  x\n  {% endif %}\n>"), "<\n  x\n>");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}\n"), "ab");
  EXPECT_EQ(render("{{ 'a' }}\n{{ 'b' }}\n"), "a\nb");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("a\n  {# note #}\nb {{ 'c' }}\n\n"), "a\nb c\n");
  EXPECT_EQ(render("{% raw %}{{ not a tag }}{% endraw %}"), "{{ not a tag }}");
  EXPECT_EQ(render("x\n\n"), "x\n"); // keep_trailing_newline=False: one final newline dropped
}

} // namespace
