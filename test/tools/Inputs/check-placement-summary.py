"""Compares `tpc inspect --json` of a plan compiled with host placement against the same model compiled
without it: usage check-placement-summary.py PLAIN.json HOST.json (weights|kv); or two host-placed plans
of one model: check-placement-summary.py OLD.json NEW.json arenas.

weights (--override-tensor): per device, device + host weight bytes equal the plain plan's weights, some
weights and steps are on the host. kv (--no-kv-offload): no KV bytes stay on the device, the host holds the
plain plan's KV, some steps (the attention and the copies around it) run on the host. Prints PLACEMENT-OK.
"""
import json
import sys

plain, host = (json.load(open(p))["devices"] for p in sys.argv[1:3])
mode = sys.argv[3]
assert len(plain) == len(host), (len(plain), len(host))
if mode == "arenas":
    # arenas: NEW (schema v4, a host arena of its own) needs no more activation memory on either side than
    # OLD (schema v3, host tensors in the device arena's offset space, loaded with a host arena as large as
    # the device's), and less in all.
    for d, (o, n) in enumerate(zip(plain, host)):
        assert 0 < n["host_activation_bytes"] <= o["host_activation_bytes"], (d, o, n)
        assert n["activation_bytes"] <= o["activation_bytes"], (d, o, n)
        assert n["host_activation_bytes"] + n["activation_bytes"] < o["host_activation_bytes"] + o["activation_bytes"]
    print("PLACEMENT-OK")
    sys.exit(0)
for d, (p, h) in enumerate(zip(plain, host)):
    assert p["host_weight_bytes"] == p["host_kv_bytes_per_token"] == p["host_steps"] == 0, (d, p)
    assert p["host_activation_bytes"] == 0, (d, p)
    assert h["weight_bytes"] + h["host_weight_bytes"] == p["weight_bytes"], (d, p, h)
    assert h["kv_bytes_per_token"] + h["host_kv_bytes_per_token"] == p["kv_bytes_per_token"], (d, p, h)
    if mode == "kv":
        assert h["kv_bytes_per_token"] == 0 and h["host_weight_bytes"] == 0, (d, h)
    assert h["steps"] > p["steps"], (d, p, h)  # the copies
if mode == "weights":
    assert sum(h["host_weight_bytes"] for h in host) > 0, host
    assert all(h["host_steps"] > 0 for h in host), host
elif mode == "kv":
    assert sum(h["host_kv_bytes_per_token"] for h in host) == sum(p["kv_bytes_per_token"] for p in plain) > 0
    assert all(h["host_steps"] > 0 for h in host), host
else:
    sys.exit("mode must be weights or kv")
print("PLACEMENT-OK")
