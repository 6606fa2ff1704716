#!/usr/bin/env python3
"""The Jinja interpreter (server/jinja) against Python's jinja2 as the oracle, byte for byte.

Usage: jinja_oracle.py TPC_JINJA_RENDER TEMPLATES_DIR...

Every template of the TEMPLATES_DIRs is rendered over the conversations below by jinja2, configured as
transformers' apply_chat_template configures it (ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks, loopcontrols, the `generation` block, tojson = json.dumps(ensure_ascii=False, ...),
raise_exception, strftime_now at a fixed date), and by `tpc-jinja-render`; the outputs must be equal. Where
jinja2 raises (a template refusing a conversation), the interpreter must fail too, naming the template's
message for raise_exception. Exits 77 (skipped) when jinja2 is not installed (Debian: python3-jinja2).
"""
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime

try:
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("SKIP: Python's jinja2 is not installed (apt-get install python3-jinja2)")
    sys.exit(77)


class Raised(Exception):
    pass


class Generation(Extension):
    """transformers' AssistantTracker, reduced to rendering its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


def oracle_env():
    def raise_exception(message):
        raise Raised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime(2024, 7, 26, 12, 0, 0).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city, \"now\".",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. Zürich"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web.",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}


def conversations():
    sys_ = {"role": "system", "content": "You are a helpful assistant."}
    u1 = {"role": "user", "content": "Hello! What's 2+2?"}
    a1 = {"role": "assistant", "content": "2+2 is 4."}
    u2 = {"role": "user", "content": "And in French, with \"quotes\", a tab\tand ünïcödé 日本語?"}
    c = []
    c.append(("system+user", dict(messages=[sys_, u1], add_generation_prompt=True)))
    c.append(("user only", dict(messages=[u1], add_generation_prompt=True)))
    c.append(("multi-turn", dict(messages=[sys_, u1, a1, u2], add_generation_prompt=True)))
    c.append(("no generation prompt", dict(messages=[u1, a1], add_generation_prompt=False)))
    c.append(("assistant prefill", dict(messages=[u1, {"role": "assistant", "content": "Sure, the answer"}],
                                        add_generation_prompt=False)))
    c.append(("empty content", dict(messages=[{"role": "user", "content": ""}], add_generation_prompt=True)))
    c.append(("empty assistant", dict(messages=[u1, {"role": "assistant", "content": ""}, u2],
                                      add_generation_prompt=True)))
    c.append(("tools", dict(messages=[sys_, {"role": "user", "content": "Weather in Paris?"}], tools=TOOLS,
                            add_generation_prompt=True)))
    c.append(("tools, no system", dict(messages=[{"role": "user", "content": "Weather in Paris?"}], tools=TOOLS,
                                       add_generation_prompt=True)))
    c.append(("tool call and result", dict(messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21}"}],
        tools=TOOLS, add_generation_prompt=True)))
    c.append(("tool call, null content", dict(messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": "Thanks"}], tools=TOOLS, add_generation_prompt=True)))
    c.append(("reasoning", dict(messages=[
        u1, {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4", "reasoning_content": "Add them."},
        u2], add_generation_prompt=True)))
    c.append(("thinking off", dict(messages=[u1], add_generation_prompt=True, enable_thinking=False)))
    c.append(("thinking on", dict(messages=[sys_, u1], add_generation_prompt=True, enable_thinking=True)))
    for name, ctx in c:
        ctx.setdefault("bos_token", "<BOS>")
        ctx.setdefault("eos_token", "<EOS>")
    return c


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    render = sys.argv[1]
    env = oracle_env()
    convs = conversations()
    failures, checked, total = [], 0, 0
    paths = sorted(os.path.join(d, f) for d in sys.argv[2:] for f in os.listdir(d) if f.endswith(".jinja"))
    if not paths:
        print("no templates in " + " ".join(sys.argv[2:]))
        return 1
    for path in paths:
        name = os.path.basename(path)
        src = open(path, encoding="utf-8").read()
        expected = []
        try:
            tmpl = env.from_string(src)
        except jinja2.TemplateSyntaxError as e:  # then every rendering must fail in tpc too
            tmpl = None
            syntax = f"TemplateSyntaxError: {e}"
        for cname, ctx in convs:
            if tmpl is None:
                expected.append(("error", syntax))
                continue
            try:
                expected.append(("ok", tmpl.render(**ctx)))
            except Raised as e:
                expected.append(("raise", str(e)))
            except Exception as e:  # a template that fails in jinja2 itself must fail here too
                expected.append(("error", f"{type(e).__name__}: {e}"))
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump([ctx for _, ctx in convs], f)
        try:
            out = subprocess.run([render, path, f.name], capture_output=True, text=True,
                                 timeout=60)
        finally:
            os.unlink(f.name)
        if out.returncode != 0:
            failures.append(f"{name}: tpc-jinja-render exited {out.returncode}: {out.stderr.strip()}")
            continue
        got = json.loads(out.stdout)
        rendered = 0
        for (cname, _), (kind, exp), g in zip(convs, expected, got):
            total += 1
            if kind == "ok":
                rendered += 1
                if g.get("ok") != exp:
                    failures.append(f"{name} [{cname}]: differs\n--- jinja2:\n{exp!r}\n--- tpc:\n"
                                    f"{g.get('ok', g.get('error'))!r}")
                    continue
            elif "error" not in g:
                failures.append(f"{name} [{cname}]: jinja2 fails ({exp}) but tpc rendered {g['ok']!r}")
                continue
            elif kind == "raise" and exp not in g["error"]:
                failures.append(f"{name} [{cname}]: jinja2 raised {exp!r}, tpc failed otherwise: {g['error']}")
                continue
            checked += 1
        if rendered == 0:
            failures.append(f"{name}: jinja2 rendered none of the conversations; the test checks nothing")
        print(f"{name}: {rendered}/{len(convs)} conversations rendered by jinja2")
    print(f"{checked}/{total} renderings equal to jinja2's (jinja2 {jinja2.__version__})")
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
