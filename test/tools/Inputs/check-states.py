"""Checks the split states `tpc inspect --html` derives from a plan against the states the passes assigned:
usage check-states.py PAGE.html IR.mlir, IR being `tpc compile --emit=mlir` of the same model and devices.
Device 0's steps (the page's dataflow nodes, in step order) are matched in order to the IR ops of the same
name (the emitter names a step after its op; ops without a step, like weights and view reshapes, are
passed over); every matched step's derived state must equal its op's first result's `tpc.state` kind.
Prints STATES-OK and the number of steps compared."""
import re
import sys

page = open(sys.argv[1], encoding="utf-8").read()
ir = []
for line in open(sys.argv[2], encoding="utf-8"):
    m = re.search(r"= tpc\.(\w+) ", line)
    s = re.search(r"tpc\.state = \[#tpc\.state<(\w+)", line)
    if m and s:
        ir.append((m.group(1), s.group(1), line.strip()[:160]))

steps = sorted((int(i), name, state) for i, name, state in
               re.findall(r"<title>step (\d+): (\S+) -&gt; \[[^\]]*\] (\w+)", page))
assert steps and [s[0] for s in steps] == list(range(len(steps))), "the page lacks device 0's steps"
at, bad = 0, []
for i, name, state in steps:
    op = re.sub(r"^(blk\.\d+\.|output\.)", "", name)
    while at < len(ir) and ir[at][0] != op:
        at += 1
    assert at < len(ir), f"step {i} ({name}): no IR op tpc.{op} left to match"
    if ir[at][1] != state:
        bad.append(f"step {i} ({name}): derived {state}, the IR says {ir[at][1]}: {ir[at][2]}")
    at += 1
assert not bad, "\n".join(bad)
print("STATES-OK", len(steps), "steps")
