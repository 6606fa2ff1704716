#!/usr/bin/env python3
"""KL divergence between two saved log-probability files, in either direction and either format.

Usage: compare-logprobs.py BASE OTHER

BASE and OTHER are `tpc perplexity --kl-divergence-base` files (tools/tpc/LogProbFile.h) or
llama-perplexity's own `--kl-divergence-base` files; both must hold the same tokens (chunk starts aside:
llama files store the text's first token there, tpc files the BOS). Prints the mean KL(BASE || OTHER)
with its standard error, the top-1 agreement and both perplexities over the scored rows: what `tpc
perplexity --kl-divergence` prints, but for any pair of files, e.g. the reference engine's rows against
tpc's float32 reference. Needs numpy.
"""
import sys

import numpy as np


def read(path):
    with open(path, "rb") as f:
        magic = f.read(8)
        if magic == b"_logits_":
            n_ctx, n_vocab, n_chunk = np.frombuffer(f.read(12), "<i4")
            first = n_ctx // 2
            tokens = np.frombuffer(f.read(4 * n_ctx * n_chunk), "<i4").reshape(n_chunk, n_ctx)
            row_u16 = 2 * ((n_vocab + 1) // 2) + 4
            rows = []
            for _ in range(n_chunk * (n_ctx - 1 - first)):
                raw = f.read(2 * row_u16)
                scale, mn = np.frombuffer(raw[:8], "<f4")
                q = np.frombuffer(raw[8:8 + 2 * n_vocab], "<u2").astype(np.float32)
                rows.append(scale * q + mn)
        elif magic == b"TPCLOGP1":
            version, n_vocab, n_ctx, n_chunk, first, _ = np.frombuffer(f.read(24), "<u4")
            assert version == 1, f"{path}: version {version}"
            tokens = np.frombuffer(f.read(4 * n_ctx * n_chunk), "<i4").reshape(n_chunk, n_ctx)
            rows = []
            for _ in range(int(n_chunk) * int(n_ctx - 1 - first)):
                raw = f.read(8 + 2 * n_vocab)
                rows.append(np.frombuffer(raw[8:], "<f2").astype(np.float32))
        else:
            sys.exit(f"{path}: not a log-probability file")
    targets = tokens[:, first + 1:].reshape(-1)
    return tokens, np.stack(rows), targets


base_tok, base, targets = read(sys.argv[1])
other_tok, other, _ = read(sys.argv[2])
if base.shape != other.shape or not np.array_equal(base_tok[:, 1:], other_tok[:, 1:]):
    sys.exit("the files hold different tokens or shapes")
b = base.astype(np.float64)
o = other.astype(np.float64)
kld = (np.exp(b) * (b - o)).sum(axis=1)
n = len(kld)
same = (b.argmax(axis=1) == o.argmax(axis=1)).mean()
idx = np.arange(n)
nll_b, nll_o = -b[idx, targets], -o[idx, targets]
print(f"rows {n}")
print(f"PPL(base)  {np.exp(nll_b.mean()):.4f}")
print(f"PPL(other) {np.exp(nll_o.mean()):.4f}")
print(f"Mean KLD   {kld.mean():.6f} +/- {kld.std() / np.sqrt(n - 1):.6f}")
print(f"Same top   {100 * same:.3f} %")
