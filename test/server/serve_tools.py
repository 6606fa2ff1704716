"""`tpc serve` with tools and reasoning, through the official `openai` client, on a fixture model served
with a real template (Qwen 3.5's, --chat-template FILE): requests with tools and tool_choice are accepted
and their prompt is the template's rendering with the tools (token count equal to that of Python jinja2's
text, plus a forced call's prefix), malformed tool fields are the client's BadRequestError, and the
responses have OpenAI's shapes. Qwen 3.5's generation prompt opens <think>, so a fixture's answer (random
text) is all reasoning: reasoning_content, whole and streamed, equals what reasoning_format "none" returns
as content. The fixture cannot be made to write a well-formed call, so reading calls is left to the unit
tests (test/server/ToolCallsTest.cpp: every family, whole and streamed). Runs in the venv made by
make_venv.py (skipped visibly when the client could not be installed)."""
import json
import os
import subprocess
import sys

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates", "Qwen3.5-4B.jinja")


def render_jinja2(messages, tools):
    """jinja2's rendering of TEMPLATE as transformers does it (ImportError without jinja2)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.ext import loopcontrols

    def raise_exception(message):
        raise Exception(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    kw = {"tools": tools} if tools else {}
    with open(TEMPLATE, encoding="utf-8") as f:
        return env.from_string(f.read()).render(messages=messages, add_generation_prompt=True, **kw)


# The venv has the openai client, the system Python has jinja2 (python3-jinja2): the test asks the latter
# for renderings by running this file with --jinja2 (before the switch to the venv below).
if len(sys.argv) > 1 and sys.argv[1] == "--jinja2":
    args = json.load(sys.stdin)
    sys.stdout.write(render_jinja2(args["messages"], args["tools"]))
    sys.exit(0)

if os.environ.get("TPC_SERVE_VENV") and not sys.prefix.startswith(os.environ["TPC_SERVE_VENV"]):
    venv_python = os.path.join(os.environ["TPC_SERVE_VENV"], "bin", "python")
    if os.path.exists(venv_python):
        os.execv(venv_python, [venv_python, *sys.argv])

import unittest  # noqa: E402

import serve_util as su  # noqa: E402

try:
    import openai  # noqa: E402
except ImportError:
    su.skip("the openai client is not installed (the serve-venv test installs it from PyPI)")

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
# A finished call and its result: OpenAI clients send the arguments as JSON text.
HISTORY = ASK + [
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "22 C and sunny"}]


def jinja2_text(messages, tools=None):
    """jinja2's rendering of TEMPLATE, from this Python or the system's; None when neither has jinja2."""
    try:
        return render_jinja2(messages, tools)
    except ImportError:
        pass
    base = getattr(sys, "_base_executable", None) or "/usr/bin/python3"
    try:
        out = subprocess.run([base, os.path.abspath(__file__), "--jinja2"], capture_output=True, timeout=60,
                             input=json.dumps({"messages": messages, "tools": tools}).encode())
    except OSError:
        return None
    return out.stdout.decode() if out.returncode == 0 else None



TINY_DEMO = ("the repository's tiny-demo (../shared absent) has a 16-token vocabulary that cannot spell a "
             "forced call's grammar")

class ServeTools(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.plan, cls.name = su.test_plan()
        cls.server = su.Server(cls.plan, "-np", "2", "-c", "4096", "--chat-template", TEMPLATE)
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="none", timeout=120, max_retries=0)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.lines

    def chat(self, messages, **kw):
        kw.setdefault("max_tokens", 6)
        kw.setdefault("temperature", 0)
        return self.client.chat.completions.create(model=self.name, messages=messages, **kw)

    def tokens(self, text):
        _, ids = self.server.post("/tokenize", {"content": text})
        return len(ids["tokens"])

    def test_start_up_names_the_formats(self):
        self.assertTrue(any("tool calls: qwen-xml format; reasoning: <think> tags" in l for l in self.server.lines),
                        self.server.lines)

    def test_prompt_holds_the_tools_and_the_forced_prefix(self):
        if self.name == "tiny-demo":
            self.skipTest(TINY_DEMO)
        plain = self.chat(ASK).usage.prompt_tokens
        auto = self.chat(ASK, tools=TOOLS).usage.prompt_tokens
        none = self.chat(ASK, tools=TOOLS, tool_choice="none").usage.prompt_tokens
        named = self.chat(ASK, tools=TOOLS,
                          tool_choice={"type": "function", "function": {"name": "get_weather"}}).usage.prompt_tokens
        self.assertGreater(auto, plain + 50)  # the tool list and the template's instructions
        self.assertEqual(none, plain)         # "none": the model is not shown the tools
        self.assertGreater(named, auto)       # the call's opening is prefilled
        history = self.chat(HISTORY, tools=TOOLS).usage.prompt_tokens
        self.assertGreater(history, auto)
        text = jinja2_text(ASK, TOOLS)
        if text is None:
            print("note: Python's jinja2 is missing; the prompts' token counts are not compared")
            return
        bos = len(self.server.post("/tokenize", {"content": "", "add_special": True})[1]["tokens"])
        self.assertEqual(auto, self.tokens(text) + bos)
        # The arguments reached the template as an object (as jinja2 gets them from json.loads).
        loaded = json.loads(json.dumps(HISTORY))
        loaded[1]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}
        self.assertEqual(history, self.tokens(jinja2_text(loaded, TOOLS)) + bos)
        prefix = "</think>\n\n<tool_call>\n<function=get_weather>\n"
        self.assertEqual(named, self.tokens(text) + bos + self.tokens(prefix))

    def test_reasoning_is_split_whole_and_streamed(self):
        raw = self.chat(ASK, extra_body={"reasoning_format": "none"}).choices[0].message
        got = self.chat(ASK).choices[0]
        reasoning = got.message.model_extra.get("reasoning_content")
        self.assertTrue(raw.content)
        self.assertEqual(reasoning, raw.content)  # the answer never closed the <think> the prompt opened
        self.assertEqual(got.message.content, "")
        self.assertIsNone(got.message.tool_calls)
        streamed, content = "", ""
        for chunk in self.chat(ASK, stream=True):
            for c in chunk.choices:
                streamed += (c.delta.model_extra or {}).get("reasoning_content") or ""
                content += c.delta.content or ""
        self.assertEqual(streamed, reasoning)
        self.assertEqual(content, "")
        # Thinking turned off: the template closes the reasoning, the answer is content.
        off = self.chat(ASK, extra_body={"chat_template_kwargs": {"enable_thinking": False}}).choices[0].message
        self.assertIsNone(off.model_extra.get("reasoning_content"))
        self.assertTrue(off.content)

    def test_tool_responses_have_openai_shapes(self):
        if self.name == "tiny-demo":
            self.skipTest(TINY_DEMO)
        for choice in ("auto", "required", {"type": "function", "function": {"name": "get_weather"}}):
            got = self.chat(ASK, tools=TOOLS, tool_choice=choice).choices[0]
            self.assertIn(got.finish_reason, ("stop", "length", "tool_calls"))
            for call in got.message.tool_calls or []:
                self.assertTrue(call.id.startswith("call_"))
                self.assertEqual(call.type, "function")
                self.assertEqual(call.function.name, "get_weather")
                json.loads(call.function.arguments)
            if not got.message.tool_calls:
                self.assertIsInstance(got.message.content, str)
                # A forced call that did not parse gives back what the model wrote, not the prefix.
                self.assertNotIn("<function=", got.message.content)
            calls, reasons = {}, []
            for chunk in self.chat(ASK, tools=TOOLS, tool_choice=choice, stream=True):
                for c in chunk.choices:
                    for tc in c.delta.tool_calls or []:
                        calls.setdefault(tc.index, "")
                        calls[tc.index] += tc.function.arguments or ""
                    if c.finish_reason:
                        reasons.append(c.finish_reason)
            self.assertEqual(reasons, [got.finish_reason])
            self.assertEqual(len(calls), len(got.message.tool_calls or []))

    def test_reasoning_format_flag_is_checked(self):
        out = subprocess.run([su.TPC, "serve", self.plan, "--reasoning-format", "sideways"], capture_output=True,
                             timeout=60)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(b"--reasoning-format", out.stderr + out.stdout)

    def test_malformed_tool_fields_are_bad_requests(self):
        bad = [dict(tools=[{"type": "function", "function": {"name": "has space"}}]),
               dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "missing"}}),
               dict(tool_choice="required"),
               dict(tools=TOOLS, tool_choice="sometimes")]
        for kw in bad:
            with self.assertRaises(openai.BadRequestError, msg=str(kw)) as e:
                self.chat(ASK, **kw)
            self.assertIn(e.exception.body.get("param"), ("tools[0].function.name", "tool_choice"))
        with self.assertRaises(openai.BadRequestError):
            self.chat(ASK, extra_body={"reasoning_format": "sideways"})


if __name__ == "__main__":
    unittest.main(verbosity=2)
