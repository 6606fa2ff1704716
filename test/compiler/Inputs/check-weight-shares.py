#!/usr/bin/env python3
"""Checks that every device's split weights follow its --tensor-split share.

Usage: check-weight-shares.py REPORT.json RATIOS [TOLERANCE]

REPORT.json is `tpc compile --report --json`; RATIOS the --tensor-split shares ("3,2,1"). A device's split
weights are its weight bytes (both sides) less the bytes it holds whole like every other device (norms,
MQA K/V, routers: `mirrored_weight_bytes`). Each device's fraction of the split bytes must be within
TOLERANCE (default 0.05) of its ratio's fraction, and the split bytes of all devices together must not
exceed the GGUF's size (a tensor part loaded on two devices, or twice on one, would). Prints one line per
device and `OK`, or exits 1 naming the device that is off.
"""
import json
import os
import sys


def main():
    report = json.load(open(sys.argv[1]))
    ratios = [float(x) for x in sys.argv[2].split(",")]
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
    devs = report["devices"]
    if len(devs) != len(ratios):
        sys.exit(f"{sys.argv[1]}: {len(devs)} devices, {len(ratios)} ratios")
    split = [d["weight_bytes"] + d["host_weight_bytes"] - d["mirrored_weight_bytes"] for d in devs]
    total, rsum = sum(split), sum(ratios)
    if total <= 0:
        sys.exit(f"{sys.argv[1]}: no split weights")
    bad = []
    for i, (b, r) in enumerate(zip(split, ratios)):
        q = (b / total) / (r / rsum)
        print(f"device {i}: {b / 2**20:.1f} MiB split, {q:.3f} of its share")
        if abs(q - 1) > tol:
            bad.append(f"device {i} holds {q:.3f} of its share")
    size = os.path.getsize(report["model"])
    if total > size:
        bad.append(f"the devices hold {total} bytes of split weights, more than the whole GGUF ({size})")
    if bad:
        sys.exit(f"{report['model']} at {sys.argv[2]}: " + "; ".join(bad) + f" (tolerance {tol})")
    print("OK")


if __name__ == "__main__":
    main()
