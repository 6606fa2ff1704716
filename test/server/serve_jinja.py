"""`tpc serve` with a Jinja chat template (--chat-template FILE, rendered by server/jinja as the GGUF's own
template is): the prompt of a chat request is the template's rendering (its token count equals that of
Python jinja2's text, when jinja2 is installed), a tool-call conversation reaches the template, and a
template that cannot be parsed or rendered is refused at start-up with its line and construct named."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import serve_util as su

TEMPLATE = os.path.join(su.SOURCE, "test", "server", "templates", "Qwen-Qwen3-0.6B.jinja")
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]


def jinja2_text(messages, **kw):
    """jinja2's rendering of TEMPLATE as transformers does it, or None without jinja2."""
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from jinja2.ext import loopcontrols
    except ImportError:
        return None
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    with open(TEMPLATE, encoding="utf-8") as f:
        return env.from_string(f.read()).render(messages=messages, add_generation_prompt=True, **kw)


class ServeJinja(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.plan, cls.name = su.test_plan()
        cls.server = su.Server(cls.plan, "-np", "1", "-c", "512", "--chat-template", TEMPLATE)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.lines

    def chat(self, messages, **kw):
        body = {"messages": messages, "max_tokens": 2, "temperature": 0}
        body.update(kw)
        return self.server.post("/v1/chat/completions", body)

    def test_started_with_the_jinja_template(self):
        self.assertTrue(any("chat template jinja" in l for l in self.server.lines), self.server.lines)

    def test_prompt_is_the_template_rendering(self):
        status, got = self.chat(MESSAGES)
        self.assertEqual(status, 200, got)
        text = jinja2_text(MESSAGES)
        if text is None:
            print("note: Python's jinja2 is missing; the prompt's token count is not compared")
            return
        _, ids = self.server.post("/tokenize", {"content": text})
        _, bos = self.server.post("/tokenize", {"content": "", "add_special": True})
        self.assertEqual(got["usage"]["prompt_tokens"], len(ids["tokens"]) + len(bos["tokens"]))
        # enable_thinking=False through chat_template_kwargs changes the rendering as it does in jinja2.
        status, off = self.chat(MESSAGES, chat_template_kwargs={"enable_thinking": False})
        self.assertEqual(status, 200, off)
        _, ids_off = self.server.post("/tokenize", {"content": jinja2_text(MESSAGES, enable_thinking=False)})
        self.assertEqual(off["usage"]["prompt_tokens"], len(ids_off["tokens"]) + len(bos["tokens"]))
        self.assertGreater(off["usage"]["prompt_tokens"], got["usage"]["prompt_tokens"])

    def test_tool_conversation_reaches_the_template(self):
        msgs = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Oslo\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "rain"}]
        status, got = self.chat(msgs)
        self.assertEqual(status, 200, got)
        # A null content reaches the template as "" (llama-server's rule; Qwen 3's template tests
        # `'</think>' in content`, which fails on None).
        msgs[1]["content"] = ""
        text = jinja2_text(msgs)
        if text is not None:
            _, ids = self.server.post("/tokenize", {"content": text})
            _, bos = self.server.post("/tokenize", {"content": "", "add_special": True})
            self.assertEqual(got["usage"]["prompt_tokens"], len(ids["tokens"]) + len(bos["tokens"]))


class BrokenTemplate(unittest.TestCase):
    def test_refused_at_start_naming_line_and_construct(self):
        plan, _ = su.test_plan()
        with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
            f.write("{% for m in messages %}\n{{ m.content }}\n{% endfro %}\n")
        try:
            out = subprocess.run([su.TPC, "serve", plan, "--port", "0", "--chat-template", f.name],
                                 capture_output=True, text=True, timeout=120)
        finally:
            os.unlink(f.name)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(f"--chat-template file '{f.name}': the chat template cannot be parsed: line 3: unknown tag "
                      "'{% endfro %}'", out.stderr)


if __name__ == "__main__":
    if not su.TPC or not os.path.exists(su.TPC):
        su.skip("TPC_BIN is not set")
    unittest.main(verbosity=2)
