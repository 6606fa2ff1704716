"""`tpc inspect plan.bin --html` in headless Chromium: the page renders its four figures and they carry the
plan's own numbers. Compiles the repository's tiny-demo.gguf for 2 devices with an uneven split (and the
shared tiny-qwen3moe for its 3-D expert weights when ../shared is there), writes the page, opens it over
the DevTools pipe (test/server/serve_webpage.py's Browser), and asserts on rendered elements (a non-empty
layout box), not pixels:
  - memory: one segment per non-zero part, bytes equal to `tpc inspect --json`, widths to one scale;
  - collectives: per device as many as --json counts, their bytes summing to its bytes per token;
  - weight cuts: one per GGUF tensor the plan reads, every one with a drawn box;
  - dataflow: exactly one layer visible, switching the layer chooser shows another, the nodes of all
    layers are device 0's steps, and the states include mirrored, split and partial (none unknown).
Saves a full-page screenshot next to the page (look at it). Skipped visibly without chromium."""
import base64
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from serve_webpage import Browser  # noqa: E402 - the DevTools-pipe driver the server tests use

TPC = os.environ.get("TPC_BIN", "tpc")
SOURCE = os.environ.get("TPC_SOURCE_DIR", os.path.join(HERE, "..", ".."))
SHARED = os.environ.get("TPC_SHARED_DIR", "")
WORK = os.environ.get("TPC_PICTURE_WORK", "/tmp/tpc-picture-work")

# Everything the assertions need, measured in the page; a shape counts as rendered when its box is not empty.
PROBE = r"""(() => {
  const drawn = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const all = sel => Array.from(document.querySelectorAll(sel));
  const seg = all('.mem-seg').map(e => ({device: +e.dataset.device, kind: e.dataset.kind, side: e.dataset.side,
      bytes: +e.dataset.bytes, width: e.getBoundingClientRect().width, drawn: drawn(e)}));
  const coll = all('.collective').map(e => ({device: +e.dataset.device, bytes: +e.dataset.bytes, drawn: drawn(e)}));
  const cuts = all('.weight-cut').map(e => ({name: e.dataset.name, drawn: drawn(e),
      runs: e.querySelectorAll('.cut-run').length}));
  const flows = all('svg.flow').map(s => ({layer: s.dataset.layer, shown: drawn(s),
      nodes: s.querySelectorAll('.flow-node').length,
      drawnNodes: Array.from(s.querySelectorAll('.flow-node')).filter(drawn).length,
      states: Array.from(s.querySelectorAll('.flow-node')).map(n => n.dataset.state)}));
  return {figures: all('svg.figure').filter(drawn).length, seg, coll, cuts, flows,
          options: all('#layer option').map(o => o.value), selected: document.getElementById('layer').value,
          width: document.documentElement.scrollWidth, height: document.documentElement.scrollHeight};
})()"""


def run(*args):
    return subprocess.run([TPC, *args], check=True, capture_output=True, text=True).stdout


class InspectHtml(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.exe = shutil.which("chromium") or shutil.which("chromium-browser")
        os.makedirs(WORK, exist_ok=True)
        cls.browser = Browser(cls.exe)

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()

    def page(self, name, gguf, *compile_args):
        plan, html = os.path.join(WORK, name + ".plan"), os.path.join(WORK, name + ".html")
        run("compile", gguf, "-o", plan, *compile_args)
        self.assertIn(html, run("inspect", plan, "--html", html))
        facts = json.loads(run("inspect", "--json", plan))
        tensors = json.loads(run("inspect", "--json", gguf))["tensors"]
        with open(html, encoding="utf-8") as f:
            text = f.read()
        for external in ("http:", "https:", "src=", "<link", "@import"):
            self.assertNotIn(external, text, "the page must not load anything from elsewhere")

        b = self.browser
        target = b.send("Target.createTarget", {"url": "file://" + html})["targetId"]
        session = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

        def js(expr):
            r = b.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session)
            if "exceptionDetails" in r:
                raise AssertionError(f"script error in the page: {r['exceptionDetails']}")
            return r["result"].get("value")

        deadline = time.time() + 30
        # The new target starts on about:blank: wait for the page itself (its layer chooser), loaded.
        while not js("document.readyState === 'complete' && !!document.getElementById('layer')"):
            self.assertLess(time.time(), deadline, "the page did not load in 30 s")
            time.sleep(0.1)
        got = js(PROBE)
        return plan, facts, tensors, got, js, session, target

    def screenshot(self, name, session):
        b = self.browser
        metrics = {"width": 1400, "height": 900, "deviceScaleFactor": 1, "mobile": False}
        b.send("Emulation.setDeviceMetricsOverride", metrics, session)
        height = b.send("Runtime.evaluate", {"expression": "document.documentElement.scrollHeight",
                                             "returnByValue": True}, session)["result"]["value"]
        b.send("Emulation.setDeviceMetricsOverride", dict(metrics, height=min(height, 8000)), session)
        png = b.send("Page.captureScreenshot", {"format": "png"}, session)["data"]
        data = base64.b64decode(png)
        self.assertTrue(data.startswith(b"\x89PNG") and len(data) > 10000, len(data))
        path = os.path.join(WORK, name + ".png")
        with open(path, "wb") as f:
            f.write(data)
        print(f"screenshot: {path}")

    def check_figures(self, facts, tensors, got):
        devices = facts["devices"]
        ctx = facts["default_ctx"]
        # Memory: the same numbers as --json, to one scale.
        want = {}
        for d, dev in enumerate(devices):
            for kind, side, v in (("weights", "device", dev["weight_bytes"]), ("kv", "device", dev["kv_bytes"]),
                                  ("activations", "device", dev["activation_bytes"]),
                                  ("logits", "device", dev["logits_bytes"]),
                                  ("weights", "host", dev["host_weight_bytes"]),
                                  ("kv", "host", dev["host_kv_bytes"]),
                                  ("activations", "host", dev["host_activation_bytes"])):
                if v:
                    want[(d, kind, side)] = v
        have = {(s["device"], s["kind"], s["side"]): s["bytes"] for s in got["seg"]}
        self.assertEqual(have, want)
        self.assertTrue(all(s["drawn"] for s in got["seg"]))
        widest = max(got["seg"], key=lambda s: s["width"])
        for s in got["seg"]:  # one scale for every part of every device (a part under 1 px is drawn 1 px wide)
            self.assertAlmostEqual(max(1.0, s["bytes"] * widest["width"] / widest["bytes"]), s["width"], delta=1.0,
                                   msg=f"memory bars are not to one scale: {s} vs {widest}")
        # Collectives: count and bytes per token per device.
        for d, dev in enumerate(devices):
            mine = [c for c in got["coll"] if c["device"] == d]
            self.assertEqual(len(mine), dev["collectives"])
            self.assertEqual(sum(c["bytes"] for c in mine), dev["collective_bytes_per_token"])
            self.assertTrue(all(c["drawn"] for c in mine))
        # Weight cuts: every tensor the plan reads, each drawn.
        names = [c["name"] for c in got["cuts"]]
        self.assertEqual(sorted(names), sorted(t["name"] for t in tensors if t["name"] in names))
        self.assertEqual(len(names), len(set(names)))
        self.assertTrue(all(c["drawn"] and c["runs"] >= 1 for c in got["cuts"]), got["cuts"])
        # Dataflow: one layer shown, all device 0's steps across the layers, states derived.
        shown = [f for f in got["flows"] if f["shown"]]
        self.assertEqual(len(shown), 1)
        self.assertEqual(shown[0]["layer"], got["selected"])
        self.assertEqual(shown[0]["drawnNodes"], shown[0]["nodes"])
        self.assertGreater(shown[0]["nodes"], 3)
        self.assertEqual(sum(f["nodes"] for f in got["flows"]), devices[0]["steps"])
        self.assertEqual(got["options"], [f["layer"] for f in got["flows"]])
        states = {s for f in got["flows"] for s in f["states"]}
        self.assertEqual(states, {"mirrored", "split", "partial"})
        return names

    def switch_layer(self, got, js):
        other = next(o for o in got["options"] if o != got["selected"])
        js(f"const s = document.getElementById('layer'); s.value = {json.dumps(other)};"
           "s.dispatchEvent(new Event('change'))")
        now = js(PROBE)
        shown = [f for f in now["flows"] if f["shown"]]
        self.assertEqual([f["layer"] for f in shown], [other])
        self.assertEqual(shown[0]["drawnNodes"], shown[0]["nodes"])

    def test_demo_page(self):
        gguf = os.path.join(SOURCE, "examples", "models", "tiny-demo.gguf")
        plan, facts, tensors, got, js, session, target = self.page("demo", gguf, "--devices", "2", "--tensor-split", "3,1")
        self.assertEqual(len(facts["devices"]), 2)
        # memory, collectives, the weights of 3 layer groups (embed, blk.0, output), one dataflow
        self.assertEqual(got["figures"], 1 + 1 + 3 + 1, got["figures"])
        names = self.check_figures(facts, tensors, got)
        self.assertEqual(len(names), len(tensors))  # tiny-demo: every tensor is read
        self.switch_layer(got, js)
        self.screenshot("demo", session)
        self.browser.send("Target.closeTarget", {"targetId": target})

    def test_moe_page_shows_expert_weights(self):
        gguf = os.path.join(SHARED, "fixtures", "tiny-qwen3moe-Q8_0.gguf")
        if not os.path.isfile(gguf):
            self.skipTest(f"{gguf} not found (../shared fixtures)")
        plan, facts, tensors, got, js, session, target = self.page("moe", gguf, "--devices", "2")
        self.check_figures(facts, tensors, got)
        experts = [c for c in got["cuts"] if "_exps" in c["name"]]
        self.assertTrue(experts)
        # 3-D expert weights: at least one run per expert and device unless whole experts are cut
        self.assertTrue(all(c["runs"] >= 2 for c in experts), experts)
        self.screenshot("moe", session)
        self.browser.send("Target.closeTarget", {"targetId": target})


if __name__ == "__main__":
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        print("SKIPPED: chromium is not installed (scripts/install-deps.sh installs Debian's chromium)")
        sys.exit(77)
    sys.exit(0 if unittest.main(exit=False, verbosity=2).result.wasSuccessful() else 1)
