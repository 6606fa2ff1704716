"""Rewrites the level of every entry of a CPU kernel cache file (runtime/cpu/KernelCache.h): usage

    set-cached-level.py FILE LEVEL

so a test can make a run take a level other than the one its calibration chose, through the cache.
"""
import sys

path, level = sys.argv[1], sys.argv[2]
lines = open(path, encoding="utf-8").read().splitlines()
if not lines or not lines[0].startswith("# tpc cpu kernel levels"):
    sys.exit(f"set-cached-level: {path} is not a kernel cache file")
out = [lines[0]]
for line in lines[1:]:
    f = line.split("\t")
    if len(f) != 5:
        sys.exit(f"set-cached-level: {path}: an entry without 5 fields")
    f[3] = level
    out.append("\t".join(f))
open(path, "w", encoding="utf-8").write("\n".join(out) + "\n")
