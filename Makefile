# The README's two commands: `make demo` and `make check`. Both install what is missing first.
BUILD_DIR  ?= build
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
DEMO_DIR   ?= $(BUILD_DIR)/demo
TPC        := $(BUILD_DIR)/bin/tpc

.PHONY: all deps configure build build-demo check demo fuzz bench clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# Only what the demo runs: the tpc binary and, in a CUDA build, the plugin it loads (tpc_runtime depends on
# tpc_cuda_plugin, so the one target brings it). Every test binary waits for `make check`.
build-demo: configure
	@cmake --build $(BUILD_DIR) --target tpc -j $(JOBS)

# Every test: unit tests, lit suites and end-to-end fidelity, all registered with ctest. A build that
# registered no tests is an error, not an empty pass.
check: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure --no-tests=error -j $(JOBS)

# The main job on a model the repository writes itself (never needs ../shared).
demo: build-demo
	@bash scripts/demo.sh $(TPC) $(DEMO_DIR)

# Bounded libFuzzer runs of the GGUF reader and the plan loader (not part of `make check`).
fuzz:
	@bash scripts/install-deps.sh --fuzz
	@bash scripts/fuzz.sh $(BUILD_DIR)-fuzz

bench: build
	@bash bench/run.sh $(TPC)

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR)-fuzz
