#!/usr/bin/env bash
# Installs every Debian package tpc needs, and nothing from outside Debian's registry.
# Idempotent: packages already present are skipped, so a second run costs one dpkg query.
#   scripts/install-deps.sh          build + test dependencies (make demo, make check)
#   scripts/install-deps.sh --fuzz   also clang-19 and its libFuzzer runtime (make fuzz)
set -euo pipefail

pkgs=(
  cmake ninja-build ccache g++ make python3
  llvm-19-dev llvm-19-tools mlir-19-tools libmlir-19-dev   # MLIR 19, mlir-tblgen, FileCheck, lit
  libcli11-dev libfmt-dev libgtest-dev                    # CLI, user-facing output, unit tests
  libflatbuffers-dev flatbuffers-compiler                 # the plan format
  libcpp-httplib-dev nlohmann-json3-dev pkgconf           # tpc serve: HTTP and JSON
  curl python3-venv chromium                              # tests: serve's clients, its page and inspect --html in a browser
  python3-jinja2                                          # tests: the oracle of the chat-template interpreter
  python3-jsonschema                                      # tests: structured output validated against its schema
  openmpi-bin libopenmpi-dev                              # mpirun / srun tpc run: one rank per process
)
if [[ "${1:-}" == "--fuzz" ]]; then pkgs+=(clang-19 libclang-rt-19-dev); fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
