"""The chat page at / in headless Chromium: type a message, press Send, wait for the streamed answer and
read it from the page; it must equal /v1/chat/completions' greedy answer for the same conversation.
Chromium is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: fds 3 and 4, JSON
messages ending in NUL), so no websocket library is needed. Skipped visibly without chromium."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import serve_util as su

MESSAGE = "Hello there"


class Browser:
    """Chromium with a DevTools pipe; send() returns the result of one command."""

    def __init__(self, exe):
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()

        def fds():
            a, b = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.profile = tempfile.mkdtemp(prefix="tpc-chromium-")
        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--remote-debugging-pipe", f"--user-data-dir={self.profile}", "about:blank"],
            preexec_fn=fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.next_id = 0
        self.buf = b""

    def send(self, method, params=None, session=None, timeout=30):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            chunk = os.read(self.from_browser, 65536)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self.buf += chunk
        raise TimeoutError(method)

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:  # noqa: BLE001 - it is going away either way
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


class ServeWebPage(unittest.TestCase):
    def test_chat_page_streams_the_answer(self):
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        plan, _ = su.test_plan()
        with su.Server(plan, "-np", "2", "-c", "512", "--chat-template", "chatml") as server:
            status, html = server.request("GET", "/")
            self.assertEqual(status, 200)
            for external in ("http://", "https://", "<script src", "<link"):
                self.assertNotIn(external, html, "the page must not load external assets")
            status, ref = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": MESSAGE}],
                                                               "max_tokens": 8, "temperature": 0})
            self.assertEqual(status, 200, ref)
            want = ref["choices"][0]["message"]["content"]

            browser = Browser(exe)
            try:
                target = browser.send("Target.createTarget", {"url": server.url + "/"})["targetId"]
                session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

                def js(expr):
                    r = browser.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session)
                    return r["result"].get("value")

                su.wait_until(lambda: js("document.readyState") == "complete" and js("!!document.getElementById('send')"),
                              30, "the page to load")
                js("document.getElementById('max').value = '8'; document.getElementById('temp').value = '0';"
                   "document.getElementById('input').focus()")
                browser.send("Input.insertText", {"text": MESSAGE}, session)  # typed, as a person would
                js("document.getElementById('send').click()")
                done = "(() => { const a = document.querySelector('.msg.assistant'); return a && a.dataset.done; })()"
                su.wait_until(lambda: js(done) in ("1", "error"), 60, "the streamed answer")
                self.assertEqual(js(done), "1", js("document.querySelector('.msg.assistant').textContent"))
                got = js("document.querySelector('.msg.assistant').textContent")
                self.assertEqual(js("document.querySelector('.msg.user').textContent"), MESSAGE)
                self.assertEqual(got, want)
                print(f"page answer: {got!r}")
            finally:
                browser.close()


if __name__ == "__main__":
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        su.skip("chromium is not installed (scripts/install-deps.sh installs Debian's chromium)")
    sys.exit(0 if unittest.main(exit=False, verbosity=2).result.wasSuccessful() else 1)
