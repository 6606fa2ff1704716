"""Checks the summary of `tpc perplexity --kl-divergence` (its stdout in OUTPUT).

Usage: check-kld.py OUTPUT KLD_MIN KLD_MAX TOP_MIN
Passes when KLD_MIN < mean KLD <= KLD_MAX (KLD_MIN = -1 allows 0) and the same-top percentage is at
least TOP_MIN; prints "KLD-OK <kld> <top>" or the mismatch and exits 1.
"""
import re
import sys

out = open(sys.argv[1]).read()
lo, hi, top_min = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
kld = float(re.search(r"Mean +KLD: +(-?[0-9.]+)", out).group(1))
top = float(re.search(r"Same top p: +([0-9.]+)", out).group(1))
if not (lo < kld <= hi and top >= top_min):
    print(f"KLD-MISMATCH kld {kld} (want ({lo}, {hi}]) top {top} (want >= {top_min})")
    sys.exit(1)
print(f"KLD-OK {kld} {top}")
