"""Runs `tpc tokenize` on every case of a fixture's NAME.tokens.json (../shared/fixtures/README.md,
"Tokenizer"), with BOS (default) and without (--no-special), and compares the printed ids with the
reference ids exactly: usage check-tokenize.py TPC NAME.gguf NAME.tokens.json. Prints TOKENIZE-OK and the
number of comparisons, or one line naming the case that differs and exits 1.
"""
import json
import subprocess
import sys

tpc, model, ref = sys.argv[1:4]
cases = json.load(open(ref))["cases"]
if not cases:
    sys.exit(f"check-tokenize: {ref}: no cases")
checked = 0
for c in cases:
    for flags, key in (([], "add_special_true"), (["--no-special"], "add_special_false")):
        run = subprocess.run([tpc, "tokenize", model, c["text"], *flags], capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"check-tokenize: tpc tokenize {c['text']!r} {' '.join(flags)} failed: {run.stderr.strip()}")
        got = [int(x) for x in run.stdout.split()]
        if got != c[key]:
            sys.exit(f"check-tokenize: {c['text']!r} {' '.join(flags)}: got {got}, {ref} has {c[key]}")
        checked += 1
print(f"TOKENIZE-OK {checked}")
