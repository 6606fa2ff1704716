"""Checks `tpc inspect --html` and `--svg` of one plan against its `tpc inspect --json`, without a browser:
usage check-picture.py PLAN.json PAGE.html FIGURES.svg. The SVG must be well-formed XML and the page must
not reference anything outside itself; in both, the memory parts carry the --json bytes (KV for the default
context, rings for sliding-window layers)
and add up to each device's total_bytes, the page's block count is --json's, each device has as many collectives as --json counts with the same bytes per token, the weight
figures name each weight once, and the dataflow of the page's layers holds device 0's steps. Prints
PICTURE-OK."""
import collections
import html.parser
import json
import sys
import xml.etree.ElementTree as ET

facts = json.load(open(sys.argv[1]))
page = open(sys.argv[2], encoding="utf-8").read()
svg_root = ET.parse(sys.argv[3]).getroot()  # raises on malformed XML
for external in ("http:", "https:", "src=", "<link", "@import"):
    assert external not in page, f"the page references {external}"


class Elements(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.items = []

    def handle_starttag(self, tag, attrs):
        self.items.append((tag, dict(attrs)))


parser = Elements()
parser.feed(page)
page_items = parser.items
svg_items = [(e.tag.split("}")[-1], e.attrib) for e in svg_root.iter()]


def with_class(items, cls):
    return [a for _, a in items if cls in a.get("class", "").split()]


ctx = facts["default_ctx"]
want_mem = {}
for d, dev in enumerate(facts["devices"]):
    for kind, side, v in (("weights", "device", dev["weight_bytes"]), ("kv", "device", dev["kv_bytes"]),
                          ("activations", "device", dev["activation_bytes"]), ("logits", "device", dev["logits_bytes"]), ("weights", "host", dev["host_weight_bytes"]),
                          ("kv", "host", dev["host_kv_bytes"]),
                          ("activations", "host", dev["host_activation_bytes"])):
        if v:
            want_mem[(str(d), kind, side)] = v

for where, items in (("page", page_items), ("svg", svg_items)):
    mem = {(a["data-device"], a["data-kind"], a["data-side"]): int(a["data-bytes"]) for a in with_class(items, "mem-seg")}
    assert mem == want_mem, (where, mem, want_mem)
    for d, dev in enumerate(facts["devices"]):  # the device side's parts add up to the total --fit budgets
        drawn = sum(v for (dd, _, side), v in mem.items() if dd == str(d) and side == "device")
        assert drawn == dev["total_bytes"], (where, d, drawn, dev["total_bytes"])
    coll = with_class(items, "collective")
    for d, dev in enumerate(facts["devices"]):
        mine = [int(a["data-bytes"]) for a in coll if a["data-device"] == str(d)]
        assert len(mine) == dev["collectives"] and sum(mine) == dev["collective_bytes_per_token"], (where, d, mine, dev)
    names = [a["data-name"] for a in with_class(items, "weight-cut")]
    assert names and len(names) == len(set(names)), (where, names)
    assert len(with_class(items, "flow-node")) > 0, where

# The page holds every layer's dataflow: together, all of device 0's steps, each once.
steps = sorted(int(a["data-step"]) for a in with_class(page_items, "flow-node"))
assert steps == list(range(facts["devices"][0]["steps"])), steps
flows = [a for _, a in page_items if "flow" in a.get("class", "").split()]
shown = [a["data-layer"] for a in flows if "display:none" not in a.get("style", "")]
assert len(shown) == 1, shown
blocks = [a["data-blocks"] for _, a in page_items if "data-blocks" in a]
assert blocks == [str(facts["blocks"])], (blocks, facts["blocks"])
print("PICTURE-OK", len(flows), "layers,", shown[0], "shown")
